//! The real-process host of the harness runtime: a scenario
//! ([`tether_scenarios::scenario::Scenario`]) run on a real backend by the
//! one client script ([`tether_scenarios::script`]) through the real
//! driver, its faults made real, and judged by the runtime's oracle
//! ([`tether_scenarios::oracle::check`]) over what can be observed live
//! ([`crate::sim_observe`]).
//!
//! Milliseconds are real milliseconds from the start of the run (cells
//! sleep for real). Faults due at 0 are armed before anything runs; later
//! ones count from the moment the scenario is ready — the agent installed
//! and the first kernel up — so that setting up a sandbox never eats into
//! the schedule. The client takes the runtime's timing
//! ([`tether_scenarios::script::timing`]).
//!
//! How each fault is made real:
//!
//! - network faults (partition, hold, dropped connections, latency, slow
//!   start, lost reply) and the cancel before the submit registers: in the
//!   driver's transport ([`crate::faulty`]);
//! - a client crash: the driver is dropped with its calls in flight, and
//!   after the downtime a new client resumes every kernel from the
//!   records (which outlive it);
//! - a killed daemon: `kill -9` of every daemon of the session, through
//!   the sandbox;
//! - a bounced or replaced sandbox: `docker restart` / a new container of
//!   the same name (docker only);
//! - a clock jump of the sandbox alone cannot be made on a real machine:
//!   such a scenario is skipped ([`unrealisable`]).

use crate::backends;
use crate::container::{self, Container};
use crate::faulty::{Faulty, Switch};
use crate::harness::Live;
use crate::sim_observe::{self, Log, Tagged};
use std::cell::{RefCell, RefMut};
use std::sync::Arc;
use std::time::Duration;
use tether::transport::Transport;
use tether::Driver;
use tether_core::bytes::Bytes;
use tether_core::client::{Event, KernelRecord};
use tether_core::protocol::Lang;
use tether_require::Need;
use tether_scenarios::control::Control;
use tether_scenarios::faults::{
    healed_at_ms, CancelPoint, Family, Fault, FaultKind, FaultSchedule,
};
use tether_scenarios::observe::ClientLog;
use tether_scenarios::scenario::{CellSpec, Scenario};
use tether_scenarios::script::{self, poll_until, Frontend, Host as ScriptHost};
use tether_scenarios::workload::Step;
use tokio::time::Instant;

/// Where a scenario runs.
pub enum Host {
    /// This machine; state in a temporary directory.
    Local(tempfile::TempDir),
    /// A throwaway container.
    Docker(Container),
}

impl Host {
    /// A local sandbox.
    ///
    /// # Panics
    ///
    /// When no temporary directory can be made.
    pub fn local() -> Host {
        let dir = tempfile::Builder::new()
            .prefix("tether-sim-live")
            .tempdir()
            .expect("tempdir");
        Host::Local(dir)
    }

    /// A docker sandbox, or why docker can't run here; without `init` its
    /// PID 1 never reaps orphans (see [`Scenario::init_reaps`]).
    pub fn docker(label: &str, init: bool) -> Result<Host, String> {
        backends::docker()?;
        Ok(Host::Docker(Container::start_with(label, init)))
    }

    /// `local` or `docker`.
    pub fn backend(&self) -> &'static str {
        match self {
            Host::Local(_) => "local",
            Host::Docker(_) => "docker",
        }
    }

    fn spec(&self) -> String {
        match self {
            Host::Local(_) => "local".into(),
            Host::Docker(c) => c.spec(),
        }
    }

    fn root(&self) -> String {
        match self {
            Host::Local(dir) => dir.path().display().to_string(),
            Host::Docker(_) => "/tmp/tether-live".into(),
        }
    }
}

/// The fault families `backend` can make real.
pub fn realisable(backend: &str) -> Vec<Family> {
    Family::ALL
        .into_iter()
        .filter(|f| match f {
            // The exec of an op is the transport's: nothing here can
            // kill the op's own process after its first step.
            Family::ClockJump
            | Family::KillOp
            | Family::DamageReply
            | Family::DiskFull
            | Family::DiskFullAtResult
            | Family::DiskFullAtWrite
            | Family::PauseAfterWrite
            | Family::KillAfterWrite => false,
            // `docker pause` then `unpause` hung here mid-run (the unpause
            // never returned, on this cgroup v1 engine): off until that is
            // understood; the simulation keeps the fault.
            Family::Freeze => false,
            // Holding a shim before its first look is the simulated OS's.
            Family::CancelBeforeStart => false,
            // Seeing the result's append as it happens is the simulated OS's.
            Family::CancelAtResult => false,
            // A machine replaced between an op's end and its reply too.
            Family::ReplacedAfterOp => false,
            // Only the fail-open scenario draws it, and that scenario's
            // flawed sandbox is the simulation's (see `unrealisable`).
            Family::PlainReplyLost => false,
            // The simulation's stream only.
            f if Family::CHANNEL.contains(f) => false,
            Family::Bounce | Family::Replace => backend == "docker",
            _ => true,
        })
        .collect()
}

/// Why a scenario cannot run on a backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unrealisable {
    /// What cannot be made real.
    pub why: String,
    /// The machine feature whose absence is the reason, if one is: a
    /// `TETHER_REQUIRE` naming it turns the skip into a failure.
    pub need: Option<Need>,
}

impl Unrealisable {
    fn inherent(why: String) -> Option<Unrealisable> {
        Some(Unrealisable { why, need: None })
    }
}

/// Why `scenario`'s fixed faults cannot be made real on `backend`, if so.
pub fn unrealisable(scenario: &Scenario, backend: &str) -> Option<Unrealisable> {
    unrealisable_schedule(scenario, &scenario.fixed, backend)
}

/// Why `schedule` on `scenario` cannot be made real on `backend`, if so.
pub fn unrealisable_schedule(
    scenario: &Scenario,
    schedule: &FaultSchedule,
    backend: &str,
) -> Option<Unrealisable> {
    if scenario.fails_open {
        return Unrealisable::inherent(
            "its sandbox flaw (a read-only or noexec root, no python3) is drawn per seed in \
             the simulation's world; live, fail open is tested by live-e2e/tests/fallback.rs"
                .into(),
        );
    }
    for f in &schedule.0 {
        match f.kind {
            FaultKind::ClockJump { ms } => {
                return Unrealisable::inherent(format!(
                    "its clock jump ({ms} ms, the sandbox's clock only) cannot be made on a real \
                     machine without moving the client's clock too"
                ))
            }
            FaultKind::DamageReply { .. }
            | FaultKind::DiskFull { .. }
            | FaultKind::DiskFullAtWrite { .. }
            | FaultKind::PauseAfterWrite { .. }
            | FaultKind::KillAfterWrite { .. } => {
                return Unrealisable::inherent(
                    "a damaged reply, a full disk and a step stopped after a named write are made by the simulation only".to_owned(),
                )
            }
            FaultKind::ReplacedAfterOp { .. } => {
                return Unrealisable::inherent(
                    "a sandbox replaced between an op's end and its reply is the simulation's"
                        .to_owned(),
                )
            }
            FaultKind::ChannelCut { .. }
            | FaultKind::ChannelHalfOpen { .. }
            | FaultKind::ChannelStall { .. }
            | FaultKind::ChannelLateReply { .. }
            | FaultKind::ChannelReorder { .. } => {
                return Unrealisable::inherent(
                    "faults on the channel's stream are made by the simulation only".to_owned(),
                )
            }
            FaultKind::BounceSandbox | FaultKind::ReplaceSandbox if backend != "docker" => {
                return Unrealisable::inherent(format!(
                    "{} needs a sandbox that can be restarted or replaced under the client \
                     (docker); {backend} cannot",
                    serde_json::to_string(&f.kind).unwrap_or_default()
                ))
            }
            _ => {}
        }
    }
    // A setsid + env -i daemon of a Python cell leaves no trace but the
    // cell's cgroup (it has no marker, its own session, and hangs under
    // the interpreter shim like every cell's orphans): without cgroups the
    // agent cannot find it, a documented limit, not a fault to inject.
    let python_escape = scenario.cells().any(|c| {
        c.lang == Lang::Python
            && c.workload
                .steps
                .iter()
                .any(|s| matches!(s, Step::EnvIDaemon { .. } | Step::SetpgidEnvIOrphan { .. }))
    });
    if python_escape {
        let (cgroups, need) = match backend {
            "local" => (Need::Cgroup2.probe(), Some(Need::Cgroup2)),
            _ => (
                Err(format!("{backend} sandboxes have no writable cgroup v2")),
                None,
            ),
        };
        if let Err(why) = cgroups {
            return Some(Unrealisable {
                why: format!(
                    "a Python cell's setsid + env -i daemon is found only by the cell's cgroup: {why}"
                ),
                need,
            });
        }
    }
    None
}

/// Skips `scenario` on `backend` visibly, or fails when the reason is a
/// missing machine feature that `TETHER_REQUIRE` names.
pub fn skip(scenario: &str, backend: &str, why: &Unrealisable) {
    let test = format!("{scenario} on {backend}");
    match why.need {
        Some(need) => tether_require::missing(&test, need, &why.why),
        None => tether_require::skip(&test, &why.why),
    }
}

/// Everything the script, the fault loop and the observers share.
pub(crate) struct Ctx<'a> {
    pub(crate) scenario: &'a Scenario,
    /// The faults of the run (the scenario's fixed ones, and any drawn).
    pub(crate) schedule: FaultSchedule,
    /// Rendered cells, by label.
    pub(crate) cells: Vec<Tagged>,
    pub(crate) start: Instant,
    pub(crate) switch: Switch,
    pub(crate) log: RefCell<Log>,
    /// Observations go through the backend's own transport.
    pub(crate) obs: Arc<dyn Transport>,
    pub(crate) root: String,
    /// Makes client processes.
    live: &'a Live,
    /// When the scenario became ready (the first kernel up: a daemon
    /// reported ready or a cell accepted), once it did.
    ready_at: std::cell::Cell<Option<u64>>,
    /// The scripted cells are done before the scenario was ever ready:
    /// the later faults are dropped.
    faults_off: std::cell::Cell<bool>,
    /// A container restart or replacement is being made: the script's
    /// pauses wait for it.
    sandbox_changing: std::cell::Cell<bool>,
    /// When the faults due at 0 are over.
    healed_now: u64,
    /// How long after `ready_at` the later faults are over.
    healed_later: u64,
    /// The fault loop has made every fault it will make.
    faults_done: std::cell::Cell<bool>,
}

impl Ctx<'_> {
    pub(crate) fn now_ms(&self) -> u64 {
        self.switch.now_ms()
    }

    pub(crate) fn side_dir(&self) -> String {
        format!("{}/side", self.root)
    }

    fn tagged(&self, label: &str) -> &Tagged {
        // Every scripted cell and the liveness cells are rendered up front.
        self.cells
            .iter()
            .find(|t| t.spec.label == label)
            .unwrap_or_else(|| unreachable!("cell {label} was not rendered"))
    }
}

impl ScriptHost for Ctx<'_> {
    fn now_ms(&self) -> u64 {
        self.switch.now_ms()
    }

    fn control(&self) -> &Control {
        self.switch.control()
    }

    fn log(&self) -> RefMut<'_, ClientLog> {
        RefMut::map(self.log.borrow_mut(), |l| &mut l.client)
    }

    fn scenario(&self) -> &Scenario {
        self.scenario
    }

    fn new_client(&self, _incarnation: u64, frontend: Frontend) -> Driver {
        match frontend {
            Frontend::First => self.live.client(),
            Frontend::Second => self.live.client_with(&self.live.second_store),
        }
    }

    fn records(&self, frontend: Frontend) -> Vec<KernelRecord> {
        script::records_of(match frontend {
            Frontend::First => &self.live.store,
            Frontend::Second => &self.live.second_store,
        })
    }

    fn code(&self, cell: &CellSpec) -> Bytes {
        Bytes::from(self.tagged(&cell.label).code.as_str())
    }

    fn note(&self, what: &str) {
        self.switch.note(what.to_owned());
    }

    fn on_event(&self, event: &Event) {
        let now = self.now_ms();
        self.log().on_event(now, event);
        let up = matches!(
            event,
            Event::KernelReady { .. } | Event::CellAccepted { .. } | Event::Output { .. }
        );
        if up && self.ready_at.get().is_none() && !self.faults_off.get() {
            // Decided here, before the script goes on, so the liveness
            // wait always sees when the later faults heal.
            self.ready_at.set(Some(now));
            let mut a = self.switch.lock();
            a.healed_at_ms = self.healed_now.max(now.saturating_add(self.healed_later));
        }
    }

    async fn after_cell(&self) {
        sim_observe::after_cell(self).await;
    }

    async fn idle(&self, ms: u64) {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        while self.sandbox_changing.get() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn faults_made(&self) {
        // The liveness wait ends when every fault is due; one the loop is
        // still making (or that a loaded machine woke it late for) is
        // made first, so it cannot land on the liveness cell.
        poll_until(|| self.faults_done.get().then_some(())).await;
    }

    async fn snapshot(&self) {
        sim_observe::snapshot(self).await;
        if self.ready_at.get().is_none() {
            // Never ready: no later fault will come.
            self.faults_off.set(true);
            self.switch.lock().healed_at_ms = self.healed_now;
        }
    }
}

/// Runs `scenario` on `host` with its fixed faults and judges it.
///
/// # Panics
///
/// When the backend fails to set up (no agent, docker refusing).
pub async fn run(scenario: &Scenario, host: &Host) -> sim_observe::Report {
    run_schedule(scenario, &scenario.fixed, host).await
}

/// Which transport carries the client's ops under the faulty one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ops {
    /// Each op its own exec of the backend.
    OneShot,
    /// Ops on the sandbox's channel (`tether-agent channel`), one-shot
    /// execs whenever it is not open: the transport `tether run` uses.
    Channel,
}

/// [`run`], the client's ops carried as `ops` says.
///
/// # Panics
///
/// When the backend fails to set up (no agent, docker refusing), or
/// cannot stream and `ops` is [`Ops::Channel`].
pub async fn run_with(scenario: &Scenario, host: &Host, ops: Ops) -> sim_observe::Report {
    run_schedule_with(scenario, &scenario.fixed, host, ops).await
}

/// Runs `scenario` on `host` under `schedule` (its fixed faults and any
/// drawn ones) and judges it.
///
/// # Panics
///
/// When the backend fails to set up (no agent, docker refusing).
pub async fn run_schedule(
    scenario: &Scenario,
    schedule: &FaultSchedule,
    host: &Host,
) -> sim_observe::Report {
    run_schedule_with(scenario, schedule, host, Ops::OneShot).await
}

/// [`run_schedule`], the client's ops carried as `ops` says. The faults
/// of the faulty transport hit the ops above the channel; the channel's
/// own process is the sandbox's and dies with it (a bounce, a replace).
///
/// # Panics
///
/// As [`run_with`].
pub async fn run_schedule_with(
    scenario: &Scenario,
    schedule: &FaultSchedule,
    host: &Host,
    ops: Ops,
) -> sim_observe::Report {
    let switch = Switch::new();
    let wrap_switch = switch.clone();
    let spec = host.spec();
    let root = host.root();
    let channel = match ops {
        Ops::OneShot => None,
        Ops::Channel => {
            let parsed = tether::backend::BackendSpec::parse(&spec)
                .unwrap_or_else(|e| panic!("{spec}: {e}"));
            let location = crate::harness::agent().location(&root);
            let channel = tether::channel::channel_for(
                &parsed,
                &location,
                tether_core::channel::MuxConfig::default(),
            )
            .unwrap_or_else(|| panic!("{spec} cannot stream: no channel"));
            Some(channel)
        }
    };
    let closer = channel.clone();
    let live = Live::with_driver(
        &spec,
        &root,
        move |t| {
            let carrier = channel.map_or(t, |c| c as Arc<dyn Transport>);
            Arc::new(Faulty::new(carrier, wrap_switch)) as Arc<dyn Transport>
        },
        script::timing,
    );
    live.prepare().await;
    let mut cells: Vec<Tagged> = scenario
        .cells()
        .map(|c| Tagged::new(c.clone(), &live.side_dir()))
        .collect();
    for label in ["liveness", "liveness2"] {
        cells.push(Tagged::new(
            script::liveness_cell(scenario, label),
            &live.side_dir(),
        ));
    }
    let mut faults = schedule.0.clone();
    faults.sort();
    // Faults due at once are armed before anything runs; later ones
    // count from the moment the scenario is ready.
    let later = faults.split_off(faults.partition_point(|f| f.at_ms == 0));
    let healed_now = healed_at_ms(&faults);
    let healed_later = healed_at_ms(&later);
    // The run begins now that the sandbox is set up. Until it is ready,
    // the later faults' end is unknown.
    switch.restart_clock();
    switch.lock().healed_at_ms = if later.is_empty() {
        healed_now
    } else {
        u64::MAX
    };
    let ctx = Ctx {
        scenario,
        schedule: schedule.clone(),
        cells,
        start: switch.start(),
        switch,
        log: RefCell::new(Log::default()),
        obs: Arc::clone(&live.transport),
        root: live.root.clone(),
        live: &live,
        ready_at: std::cell::Cell::new(None),
        faults_off: std::cell::Cell::new(false),
        sandbox_changing: std::cell::Cell::new(false),
        healed_now,
        healed_later,
        faults_done: std::cell::Cell::new(false),
    };
    for f in faults {
        apply(&ctx, host, f.kind).await;
    }
    tokio::join!(script::client_main(&ctx), async {
        fault_loop(&ctx, host, later).await;
        ctx.faults_done.set(true);
    });
    let mut channel_ops = None;
    if let Some(channel) = closer {
        let stats = channel.status().stats;
        channel_ops = Some(stats.on_channel);
        ctx.switch.note(format!("channel: {stats:?}"));
        // The client is done: its channel goes, as when `tether` exits.
        // One still on the sandbox after a bound is the judge's leftover.
        channel.close();
        for _ in 0..100 {
            if live.survivors(" channel --root ").await.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let mut report = sim_observe::judge(&ctx, host.backend()).await;
    report.channel_ops = channel_ops;
    report
}

/// Applies `faults` at their times, counted from the moment the first
/// kernel is ready (or not at all if the script ends first).
async fn fault_loop(ctx: &Ctx<'_>, host: &Host, faults: Vec<Fault>) {
    if faults.is_empty() {
        return;
    }
    let ready = poll_until(|| {
        ctx.ready_at
            .get()
            .map(Some)
            .or(ctx.faults_off.get().then_some(None))
    })
    .await;
    let Some(ready) = ready else { return };
    ctx.switch
        .note(format!("ready at {ready} ms: later faults count from here"));
    for f in faults {
        let at = ready.saturating_add(f.at_ms);
        let now = ctx.now_ms();
        tokio::time::sleep(Duration::from_millis(at.saturating_sub(now))).await;
        if ctx.log.borrow().client.finished {
            return;
        }
        apply(ctx, host, f.kind).await;
    }
}
/// Makes one fault happen now.
async fn apply(ctx: &Ctx<'_>, host: &Host, kind: FaultKind) {
    let now = ctx.now_ms();
    let until = |ms: u64| now.saturating_add(ms);
    let what = serde_json::to_string(&kind).unwrap_or_default();
    ctx.switch.note(what.clone());
    match kind {
        FaultKind::PartitionExec { for_ms } => ctx.switch.lock().partition_until_ms = until(for_ms),
        FaultKind::HoldExec { for_ms } => ctx.switch.lock().hold_until_ms = until(for_ms),
        FaultKind::DropConnection => ctx.switch.drop_connections(),
        FaultKind::ExecLatency { ms, for_ms } => {
            let mut a = ctx.switch.lock();
            a.latency_ms = ms;
            a.latency_until_ms = until(for_ms);
        }
        FaultKind::SlowStart { op, ms } => ctx.switch.lock().slow_start.push((op, ms)),
        FaultKind::ReplyLost { op } => ctx.switch.lock().reply_lost.push(op),
        FaultKind::CrashClient { down_ms } => ctx.switch.lock().crash_client = Some(down_ms),
        FaultKind::Cancel { point } => {
            let mut a = ctx.switch.lock();
            match point {
                CancelPoint::BeforeSubmitRegisters => a.cancel_before_submit = true,
                CancelPoint::DuringWait => a.cancel_now = true,
                CancelPoint::AfterDone => a.cancel_after_done = true,
                // `realisable` leaves its family out: nothing here can
                // hold a real shim's exec.
                CancelPoint::BeforeCellStarts | CancelPoint::AsResultIsJournaled => {
                    unreachable!("{what} on a live backend")
                }
            }
        }
        FaultKind::KillDaemon => {
            let pids = sim_observe::daemons(ctx).await;
            // The death is dated when the kill is sent, not when the
            // fault was due (finding the daemons takes a `ps`).
            let at = ctx.now_ms();
            let mut argv = vec!["kill".to_owned(), "-9".to_owned()];
            argv.extend(pids.iter().map(u32::to_string));
            if !pids.is_empty() {
                sim_observe::exec(ctx, argv).await;
            }
            ctx.switch.note(format!("daemons {pids:?} killed"));
            let mut log = ctx.log.borrow_mut();
            log.kernel_deaths.extend(pids.iter().map(|p| (at, *p)));
        }
        FaultKind::BounceSandbox | FaultKind::ReplaceSandbox => {
            let Host::Docker(c) = host else {
                // `unrealisable` refused these before the run.
                unreachable!("{what} on {}", host.backend())
            };
            let pids = sim_observe::daemons(ctx).await;
            let at = ctx.now_ms();
            let (name, init) = (c.name.clone(), c.init);
            let bounce = kind == FaultKind::BounceSandbox;
            ctx.sandbox_changing.set(true);
            if bounce {
                tokio::task::spawn_blocking(move || container::restart(&name))
                    .await
                    .expect("docker restart");
            } else {
                // The old machine dies first; its side-effect counts are
                // kept before the new one can be observed.
                let side = ctx.side_dir();
                let dead = name.clone();
                let counts = tokio::task::spawn_blocking(move || {
                    container::kill_and_count_lines(&dead, &side)
                })
                .await
                .expect("docker kill");
                sim_observe::replaced_with(ctx, &counts);
                tokio::task::spawn_blocking(move || container::replace(&name, init))
                    .await
                    .expect("docker replace");
            }
            ctx.switch.note(format!(
                "container {} (daemons {pids:?} gone)",
                if bounce { "restarted" } else { "replaced" }
            ));
            ctx.log
                .borrow_mut()
                .kernel_deaths
                .extend(pids.iter().map(|p| (at, *p)));
            ctx.switch.drop_connections();
            if !bounce {
                // The new machine is the test's too: where side effects go.
                sim_observe::exec(ctx, vec!["mkdir".into(), "-p".into(), ctx.side_dir()]).await;
            }
            ctx.sandbox_changing.set(false);
        }
        FaultKind::ClockJump { .. }
        | FaultKind::KillOp { .. }
        | FaultKind::DamageReply { .. }
        | FaultKind::DiskFull { .. }
        | FaultKind::DiskFullAtWrite { .. }
        | FaultKind::PauseAfterWrite { .. }
        | FaultKind::KillAfterWrite { .. }
        | FaultKind::ReplacedAfterOp { .. }
        | FaultKind::ChannelCut { .. }
        | FaultKind::ChannelHalfOpen { .. }
        | FaultKind::ChannelStall { .. }
        | FaultKind::ChannelLateReply { .. }
        | FaultKind::ChannelReorder { .. } => {
            // `unrealisable` refused these before the run.
            unreachable!("{what} is not realised live")
        }
        FaultKind::KillShim | FaultKind::KillInterpreter => {
            let shims = sim_observe::shims(ctx).await;
            let (pids, lost) = if kind == FaultKind::KillInterpreter {
                (&shims.interpreters, !shims.interpreters.is_empty())
            } else {
                // An interpreter is lost with its shim, even one the shim
                // is still starting (no `python3` in the table yet).
                (&shims.all, !shims.of_interpreters.is_empty())
            };
            let at = ctx.now_ms();
            signal(ctx, "-9", pids).await;
            ctx.switch.note(format!("{pids:?} killed"));
            if kind == FaultKind::KillShim {
                ctx.log
                    .borrow_mut()
                    .killed_shims
                    .extend(shims.cmdlines.clone());
            }
            if lost {
                // The namespaces are gone from the KILL on, whether or not
                // a later look at the process table saw their interpreter.
                let mut log = ctx.log.borrow_mut();
                log.interpreter_deaths.push(at);
                log.interpreter_pids.extend(&shims.interpreters);
            }
        }
        FaultKind::WipeKernelDirs => {
            let pids = sim_observe::daemons(ctx).await;
            sim_observe::before_wipe(ctx).await;
            // The kernels are lost from the removal on.
            let at = ctx.now_ms();
            let script = format!("rm -rf {}/kernels/*", ctx.root);
            sim_observe::exec(ctx, vec!["sh".to_owned(), "-c".to_owned(), script]).await;
            ctx.switch
                .note(format!("kernel directories removed (daemons {pids:?})"));
            let mut log = ctx.log.borrow_mut();
            log.kernel_deaths.extend(pids.iter().map(|p| (at, *p)));
        }
        FaultKind::TermDaemon => {
            let pids = sim_observe::daemons(ctx).await;
            // The kernel is lost from the TERM on.
            let at = ctx.now_ms();
            signal(ctx, "-TERM", &pids).await;
            ctx.switch.note(format!("daemons {pids:?} sent TERM"));
            let mut log = ctx.log.borrow_mut();
            log.kernel_deaths.extend(pids.iter().map(|p| (at, *p)));
        }
        FaultKind::FreezeSandbox { for_ms } => {
            let Host::Docker(c) = host else {
                unreachable!("{what} on {}", host.backend())
            };
            let name = c.name.clone();
            let pause = name.clone();
            tokio::task::spawn_blocking(move || container::pause(&pause))
                .await
                .expect("docker pause");
            // Thawed by a thread of its own, not a task of the runtime: a
            // task can starve behind whatever the paused container keeps
            // waiting (the container then stayed paused and the run hung).
            let note = ctx.switch.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(for_ms));
                container::unpause(&name);
                note.note("container unpaused".into());
            });
        }
    }
}

/// `kill SIGNAL PIDS` on the sandbox (nothing when there are none).
async fn signal(ctx: &Ctx<'_>, signal: &str, pids: &[u32]) {
    if pids.is_empty() {
        return;
    }
    let mut argv = vec!["kill".to_owned(), signal.to_owned()];
    argv.extend(pids.iter().map(u32::to_string));
    sim_observe::exec(ctx, argv).await;
}
