//! Runs a simulation scenario ([`tether_sim::scenario::Scenario`]) on a
//! real backend: its client script through the real driver, its fixed
//! faults realised for real, and the simulation's oracle
//! ([`tether_sim::oracle::check`]) over what can be observed live
//! ([`crate::sim_observe`]).
//!
//! Virtual milliseconds are real milliseconds from the start of the
//! script (cells sleep for real). The client takes the simulation's
//! timing configuration ([`tether_sim::client_host::config`]).
//!
//! How each fault is made real:
//!
//! - network faults (partition, hold, dropped connections, latency, slow
//!   start, lost reply) and the cancel before the submit registers: in the
//!   driver's transport ([`crate::faulty`]);
//! - a client crash: the driver is dropped with its calls in flight, and
//!   after the downtime a new client resumes every kernel from the
//!   records (which outlive it), as the simulation's client host does;
//! - a killed daemon: `kill -9` of every daemon of the session, through
//!   the sandbox;
//! - a bounced or replaced sandbox: `docker restart` / a new container of
//!   the same name (docker only);
//! - a clock jump of the sandbox alone cannot be made on a real machine:
//!   such a scenario is skipped ([`unrealisable`]).
//!
//! What the client saw is kept in the simulation's own
//! [`ClientLog`](tether_sim::observe::ClientLog), and the script's pure
//! parts (kernels, liveness cells, the cancel a resume owes, when faults
//! have healed) are the simulation's functions. The script's steps
//! themselves stay a copy of [`tether_sim::client_host`]'s: this one
//! sleeps until real deadlines, arms a [`Switch`] (real `Instant`s, not
//! the simulation's virtual-ms `Control`), and observes the real sandbox
//! with `ps` between steps, where the simulation's host raises a flag for
//! its world to read the simulated OS.

use crate::backends;
use crate::container::{self, Container};
use crate::faulty::{Faulty, Switch};
use crate::harness::Live;
use crate::sim_observe::{self, Log, Tagged};
use std::cell::RefCell;
use std::sync::Arc;
use std::time::Duration;
use tether::transport::Transport;
use tether::RecordStore;
use tether_core::bytes::Bytes;
use tether_core::client::{Config, Event};
use tether_core::protocol::{CellOutcome, Lang};
use tether_scenarios::workload::Step;
use tether_sim::client_host;
use tether_sim::faults::{CancelPoint, Fault, FaultKind};
use tether_sim::scenario::{Action, Scenario};
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
    /// PID 1 never reaps orphans (see
    /// [`tether_sim::scenario::Scenario::init_reaps`]).
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

/// Why `scenario`'s fixed faults cannot be made real on `backend`, if so.
pub fn unrealisable(scenario: &Scenario, backend: &str) -> Option<String> {
    for f in &scenario.fixed.0 {
        match f.kind {
            FaultKind::ClockJump { ms } => {
                return Some(format!(
                    "its clock jump ({ms} ms, the sandbox's clock only) cannot be made on a real \
                     machine without moving the client's clock too"
                ))
            }
            FaultKind::BounceSandbox | FaultKind::ReplaceSandbox if backend != "docker" => {
                return Some(format!(
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
                .any(|s| matches!(s, Step::EnvIDaemon { .. }))
    });
    if python_escape {
        let cgroups = match backend {
            "local" => backends::local_cell_cgroups(),
            _ => Err(format!("{backend} sandboxes have no writable cgroup v2")),
        };
        if let Err(why) = cgroups {
            return Some(format!(
                "a Python cell's setsid + env -i daemon is found only by the cell's cgroup: {why}"
            ));
        }
    }
    None
}

/// Prints `skipped: <scenario> on <backend>: <why>` on the real stderr.
pub fn skip(scenario: &str, backend: &str, why: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "skipped: {scenario} on {backend}: {why}");
}

/// The simulation's timing, on a real client.
fn sim_timing(c: &mut Config) {
    let s = tether_sim::client_host::config();
    c.wait_ms = s.wait_ms;
    c.exec_slack = s.exec_slack;
    c.max_attempts = s.max_attempts;
    c.backoff_base = s.backoff_base;
    c.backoff_max = s.backoff_max;
    c.unreachable_after = s.unreachable_after;
    c.grace = s.grace;
}

/// Everything the script, the fault loop and the observers share.
pub(crate) struct Ctx<'a> {
    pub(crate) scenario: &'a Scenario,
    /// Rendered cells, by label.
    pub(crate) cells: Vec<Tagged>,
    pub(crate) start: Instant,
    pub(crate) switch: Switch,
    pub(crate) log: RefCell<Log>,
    /// Observations go through the backend's own transport.
    pub(crate) obs: Arc<dyn Transport>,
    pub(crate) root: String,
    /// When every fault is over (ms).
    healed_ms: u64,
}

impl Ctx<'_> {
    pub(crate) fn now_ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
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

/// Runs `scenario` on `host` with its fixed faults and judges it.
///
/// # Panics
///
/// When the backend fails to set up (no agent, docker refusing).
pub async fn run(scenario: &Scenario, host: &Host) -> sim_observe::Report {
    let switch = Switch::new();
    let wrap_switch = switch.clone();
    let mut live = Live::with_driver(
        &host.spec(),
        &host.root(),
        move |t| Arc::new(Faulty::new(t, wrap_switch)) as Arc<dyn Transport>,
        sim_timing,
    );
    live.prepare().await;
    let mut cells: Vec<Tagged> = scenario
        .cells()
        .map(|c| Tagged::new(c.clone(), &live.side_dir()))
        .collect();
    for label in ["liveness", "liveness2"] {
        cells.push(Tagged::new(
            client_host::liveness_cell(scenario, label),
            &live.side_dir(),
        ));
    }
    let mut faults = scenario.fixed.0.clone();
    faults.sort();
    let ctx = Ctx {
        scenario,
        cells,
        start: Instant::now(),
        switch,
        log: RefCell::new(Log::default()),
        obs: Arc::clone(&live.transport),
        root: live.root.clone(),
        healed_ms: tether_sim::world::healed_at_ms(&faults),
    };
    // Faults due at once are armed before anything runs.
    let later = faults.split_off(faults.partition_point(|f| f.at_ms == 0));
    for f in faults {
        apply(&ctx, host, f.kind).await;
    }
    tokio::join!(client_main(&ctx, &mut live), fault_loop(&ctx, host, later));
    sim_observe::judge(&ctx, host.backend()).await
}

async fn fault_loop(ctx: &Ctx<'_>, host: &Host, faults: Vec<Fault>) {
    for f in faults {
        tokio::time::sleep_until(ctx.start + Duration::from_millis(f.at_ms)).await;
        apply(ctx, host, f.kind).await;
    }
}

/// Makes one fault happen now.
async fn apply(ctx: &Ctx<'_>, host: &Host, kind: FaultKind) {
    let now = Instant::now();
    let until = |ms: u64| Some(now + Duration::from_millis(ms));
    let what = serde_json::to_string(&kind).unwrap_or_default();
    ctx.switch
        .lock()
        .injected
        .push(format!("{} ms: {what}", ctx.now_ms()));
    match kind {
        FaultKind::PartitionExec { for_ms } => ctx.switch.lock().partition_until = until(for_ms),
        FaultKind::HoldExec { for_ms } => ctx.switch.lock().hold_until = until(for_ms),
        FaultKind::DropConnection => ctx.switch.drop_connections(),
        FaultKind::ExecLatency { ms, for_ms } => {
            let mut a = ctx.switch.lock();
            a.latency_ms = ms;
            a.latency_until = until(for_ms);
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
            }
        }
        FaultKind::KillDaemon => {
            let at = ctx.now_ms();
            let pids = sim_observe::daemons(ctx).await;
            let mut argv = vec!["kill".to_owned(), "-9".to_owned()];
            argv.extend(pids.iter().map(u32::to_string));
            if !pids.is_empty() {
                sim_observe::exec(ctx, argv).await;
            }
            ctx.switch
                .lock()
                .injected
                .push(format!("{at} ms: daemons {pids:?} killed"));
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
            tokio::task::spawn_blocking(move || {
                if bounce {
                    container::restart(&name);
                } else {
                    container::replace(&name, init);
                }
            })
            .await
            .expect("docker restart/replace");
            ctx.switch.lock().injected.push(format!(
                "{} ms: container {} (daemons {pids:?} gone)",
                ctx.now_ms(),
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
        }
        FaultKind::ClockJump { .. } => {
            // `unrealisable` refused this before the run.
            unreachable!("clock jumps are not realised live")
        }
    }
}

/// The client process: runs the script; on a crash, drops the driver,
/// stays down, and starts again from the records.
async fn client_main(ctx: &Ctx<'_>, live: &mut Live) {
    let next = std::cell::Cell::new(0usize);
    let mut restarted = false;
    loop {
        let crashed = client_host::unless_crashed(
            run_script(ctx, live, &next, restarted),
            wait_crash(&ctx.switch),
        )
        .await;
        let Some(down) = crashed else { return };
        ctx.switch
            .lock()
            .injected
            .push(format!("{} ms: client crashed", ctx.now_ms()));
        // The old driver goes with its calls in flight.
        live.new_client();
        tokio::time::sleep(Duration::from_millis(down)).await;
        restarted = true;
    }
}

async fn wait_crash(switch: &Switch) -> u64 {
    client_host::poll_until(|| switch.lock().crash_client.take()).await
}

async fn run_script(
    ctx: &Ctx<'_>,
    live: &mut Live,
    next: &std::cell::Cell<usize>,
    restarted: bool,
) {
    let start = ctx.start;
    let mut on_event = |e: &Event| ctx.log.borrow_mut().on_event(start, e);
    if restarted {
        // A new client process: pick its kernels up from their records.
        let names = live.store.list().unwrap_or_default();
        for name in names {
            let Some(record) = live.store.load(&name).ok().flatten() else {
                continue;
            };
            let (label, cancel_at) = ctx.log.borrow().client.pending_cancel(ctx.scenario);
            let begin = ctx.now_ms();
            let canceller = cancel_watch(ctx, live.driver().cancel_handle(), label, cancel_at);
            let run = live.driver().resume(record, false, &mut on_event);
            let r = client_host::with_canceller(run, canceller).await;
            ctx.log
                .borrow_mut()
                .call("resume", begin, ctx.now_ms(), r.err());
            sim_observe::after_cell(ctx).await;
        }
    }
    while let Some(action) = ctx.scenario.script.get(next.get()) {
        match action {
            Action::Idle { ms } => tokio::time::sleep(Duration::from_millis(*ms)).await,
            Action::Run(cell) => {
                let resolved = ctx
                    .log
                    .borrow()
                    .client
                    .cells
                    .get(&cell.label)
                    .is_some_and(|c| !c.resolutions.is_empty());
                if !resolved {
                    run_one(ctx, live, &cell.label, &mut on_event).await;
                }
            }
        }
        next.set(next.get() + 1);
    }
    // What the script's cells left running.
    sim_observe::snapshot(ctx).await;
    // Liveness: once every fault has healed, a fresh cell must run.
    let now = ctx.now_ms();
    if ctx.healed_ms > now {
        tokio::time::sleep(Duration::from_millis(ctx.healed_ms - now)).await;
    }
    {
        // Faults armed for ops that never came are over too. (The same
        // flags as the sim's `Control`, on the live switchboard: its
        // deadlines are real `Instant`s, the sim's virtual ms.)
        let mut a = ctx.switch.lock();
        a.reply_lost.clear();
        a.slow_start.clear();
        a.cancel_before_submit = false;
        a.cancel_now = false;
        a.cancel_after_done = false;
        a.crash_client = None;
    }
    let mut outcome = run_one(ctx, live, "liveness", &mut on_event).await;
    if outcome.as_ref() != Some(&CellOutcome::Ok) && !ctx.log.borrow().client.state_lost.is_empty()
    {
        // After a reported loss the first cell may go down with the old
        // kernel; the next one must run on a fresh kernel.
        outcome = run_one(ctx, live, "liveness2", &mut on_event).await;
    }
    ctx.log.borrow_mut().client.liveness = outcome;
    for k in client_host::kernels(ctx.scenario) {
        let begin = ctx.now_ms();
        let r = live.driver().shutdown(&k, &mut on_event).await;
        ctx.log
            .borrow_mut()
            .call("shutdown", begin, ctx.now_ms(), r.err());
    }
    ctx.log.borrow_mut().client.finished = true;
}

async fn run_one(
    ctx: &Ctx<'_>,
    live: &mut Live,
    label: &str,
    on_event: &mut dyn FnMut(&Event),
) -> Option<CellOutcome> {
    let tagged = ctx.tagged(label);
    let cell = &tagged.spec;
    let begin = ctx.now_ms();
    {
        let mut log = ctx.log.borrow_mut();
        log.client.current = Some(label.to_owned());
        log.client
            .cells
            .entry(label.to_owned())
            .or_default()
            .started_at = Some(begin);
    }
    let handle = live.driver().cancel_handle();
    let timeout = cell.timeout_ms.map(Duration::from_millis);
    let cancel_at = cell.cancel_after_ms.map(|ms| begin + ms);
    let canceller = cancel_watch(ctx, handle, label.to_owned(), cancel_at);
    let name = client_host::kernel_of(cell);
    let run = live.driver().run_cell(
        &name,
        cell.lang,
        Bytes::from(tagged.code.as_str()),
        timeout,
        &mut *on_event,
    );
    let result = client_host::with_canceller(run, canceller).await;
    let call = format!("run_cell {label}");
    let (key, outcome) = match result {
        Ok((key, outcome)) => (key, outcome),
        Err(e) => {
            ctx.log
                .borrow_mut()
                .call(&call, begin, ctx.now_ms(), Some(e));
            return None;
        }
    };
    ctx.log.borrow_mut().call(&call, begin, ctx.now_ms(), None);
    sim_observe::after_cell(ctx).await;
    let after_done = std::mem::take(&mut ctx.switch.lock().cancel_after_done);
    if after_done {
        ctx.switch.lock().injected.push(format!(
            "{} ms: cancel {label} after it resolved",
            ctx.now_ms()
        ));
        let now = live.driver().now();
        live.driver().client().cancel(&key, now);
        let begin = ctx.now_ms();
        let r = live.driver().settle(on_event).await;
        ctx.log
            .borrow_mut()
            .call("cancel after done", begin, ctx.now_ms(), r.err());
    }
    Some(outcome)
}

/// Cancels the current cell (`label`) at `at` (ms) and whenever a fault
/// asks for it; never returns.
async fn cancel_watch(ctx: &Ctx<'_>, handle: tether::CancelHandle, label: String, at: Option<u64>) {
    let mut scripted = at;
    loop {
        let wait = async {
            match scripted {
                Some(at) => {
                    tokio::time::sleep_until(ctx.start + Duration::from_millis(at)).await;
                }
                None => std::future::pending().await,
            }
        };
        let fault = client_host::poll_until(|| {
            let mut a = ctx.switch.lock();
            std::mem::take(&mut a.cancel_now).then(|| std::mem::take(&mut a.cancel_is_early))
        });
        let early = tokio::select! {
            biased;
            () = wait => {
                scripted = None;
                false
            }
            early = fault => early,
        };
        let mut log = ctx.log.borrow_mut();
        if let Some(c) = log.client.cells.get_mut(&label) {
            c.cancel_requested = true;
            log.live.entry(label.clone()).or_default().cancelled_early |= early;
        }
        drop(log);
        handle.cancel_current();
    }
}
