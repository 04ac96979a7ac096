//! One run: a turmoil world with a client host (the real driver, see
//! [`crate::client_host`]) and a sandbox host (the exec server over
//! `SimOs`, see [`crate::sandbox`]), a fault loop that applies the
//! schedule between simulation steps, and the observations the oracle
//! judges.
//!
//! Everything is derived from the seed: turmoil's rng, the client's seed,
//! SimOs's; the epoch is fixed; the world is stepped on one thread.

use crate::client_host::{client_main, ClientCtx};
use crate::control::Control;
use crate::explore::{RunReport, RunSeed};
use crate::faults::{CancelPoint, FaultKind, FaultSchedule};
use crate::observe::{self, ClientLog};
use crate::oracle::{self, BackgroundObs, CellTruth, Observations};
use crate::os::disk::FillAt;
use crate::outages::outages;
use crate::sandbox::{sandbox_main, Sandbox};
use crate::scenario::{CellSpec, Scenario};
use crate::swarm::World;
use crate::trace::Trace;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, UNIX_EPOCH};
use tether::MemoryStore;
use tether_core::agent::Pid;
use tether_core::protocol::Lang;
use tether_scenarios::script;
use tether_scenarios::shell_model::Flavor;
use tether_scenarios::workload::Step;

/// Virtual time after which a run is declared hung.
pub const MAX_VIRTUAL: Duration = Duration::from_secs(240);
pub use tether_scenarios::observe::CALL_BUDGET_MS;

/// Virtual time per simulation step. Each step costs turmoil a `block_on`
/// per host and one for its network, busy or idle: with 1 ms that was about
/// three quarters of the explorer's CPU time. Within a step each host's
/// timers still fire at their own millisecond, and the sandbox's processes
/// and daemons are stepped through their own wake-ups (see [`run_in`]); what
/// the step rounds up to its multiple is message delivery between the hosts
/// (turmoil's 1-10 ms latency becomes 5 or 10 ms) and the instant a
/// scheduled fault lands (every drawn fault time and duration is 10 ms or
/// more). `README.md`, "Benchmarks", has the measurements.
pub const STEP: Duration = Duration::from_millis(5);

/// Which build of the product runs: the real one, or one with a
/// deliberately planted bug (only with the `mutations` feature, never in
/// release builds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// The product as it is.
    Real,
    /// The product with one planted bug, by name in [`BROKEN`].
    #[cfg(feature = "mutations")]
    Broken(tether_core::mutation::Mutation),
}

/// The broken variants as `--variant` names them; each bug is described
/// on its [`tether_core::mutation::Mutation`].
#[cfg(feature = "mutations")]
const BROKEN: [(&str, tether_core::mutation::Mutation); 17] = {
    use tether_core::mutation::Mutation as M;
    [
        ("cancel-pgid-only", M::CancelPgidOnly),
        ("resubmit-new-id", M::ResubmitNewId),
        ("transport-error-is-death", M::TransportErrorIsDeath),
        ("daemon-exits-at-term", M::DaemonExitsAtTerm),
        ("fallback-when-off", M::FallbackWhenOff),
        ("plain-exec-resent", M::PlainExecResent),
        ("kill-before-grace", M::KillBeforeGrace),
        ("daemon-ignores-term", M::DaemonIgnoresTerm),
        ("note-kept-state-lost", M::NoteKeptStateLost),
        ("reboot-taken-for-death", M::RebootTakenForDeath),
        ("reaper-spins", M::ReaperSpins),
        ("shim-ignores-tombstone", M::ShimIgnoresTombstone),
        ("idle-during-cancel", M::IdleDuringCancel),
        ("journal-rewrites-clean-tear", M::JournalRewritesCleanTear),
        ("io-error-taken-as-unsent", M::IoErrorTakenAsUnsent),
        ("shim-skips-final-read", M::ShimSkipsFinalRead),
        ("idle-exit-unannounced", M::IdleExitUnannounced),
    ]
};

impl Variant {
    /// The names of the variants this build runs (`real` first).
    pub fn built() -> Vec<&'static str> {
        #[allow(unused_mut)]
        let mut names = vec!["real"];
        #[cfg(feature = "mutations")]
        names.extend(BROKEN.iter().map(|(name, _)| *name));
        names
    }

    /// Parses a variant name; the error says what this build has.
    pub fn parse(name: &str) -> Result<Variant, String> {
        if name == "real" {
            return Ok(Variant::Real);
        }
        #[cfg(feature = "mutations")]
        if let Some((_, bug)) = BROKEN.iter().find(|(n, _)| *n == name) {
            return Ok(Variant::Broken(*bug));
        }
        Err(if cfg!(feature = "mutations") {
            format!(
                "--variant {name:?}: no such variant; this build has: {}",
                Variant::built().join(", ")
            )
        } else {
            format!(
                "--variant {name:?}: this build has only `real` (the broken variants \
                 exist only in builds with --features mutations, never in release builds)"
            )
        })
    }

    /// The variant's name, as [`Variant::parse`] takes it.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Real => "real",
            #[cfg(feature = "mutations")]
            Variant::Broken(bug) => BROKEN
                .iter()
                .find(|(_, b)| *b == bug)
                .map_or("broken", |(name, _)| name),
        }
    }

    #[cfg(feature = "mutations")]
    fn mutation(self) -> Option<tether_core::mutation::Mutation> {
        match self {
            Variant::Real => None,
            Variant::Broken(bug) => Some(bug),
        }
    }
}

pub use tether_scenarios::faults::healed_at_ms;

/// Timed actions of the fault loop.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Tick {
    Fault(FaultKind),
    Repair,
    Release,
    Thaw,
    DiskFree,
}

/// The turmoil host, as the explorer drives it: every seed in its own
/// world, on this build's `Variant`.
pub struct Sim(pub Variant);

impl RunSeed for Sim {
    fn run(&self, scenario: &Scenario, seed: u64, schedule: &FaultSchedule) -> RunReport {
        run(scenario, seed, schedule, self.0)
    }
}

/// Runs `scenario` with `seed` and `schedule` in the seed's world
/// ([`Scenario::world`]); judges it.
pub fn run(
    scenario: &Scenario,
    seed: u64,
    schedule: &FaultSchedule,
    variant: Variant,
) -> RunReport {
    run_in(scenario, seed, &scenario.world(seed), schedule, variant)
}

/// Runs `scenario` with `seed` and `schedule` in `world`; judges it.
pub fn run_in(
    scenario: &Scenario,
    seed: u64,
    world: &World,
    schedule: &FaultSchedule,
    variant: Variant,
) -> RunReport {
    #[cfg(feature = "mutations")]
    let _guard = tether_core::mutation::activate(variant.mutation());
    #[cfg(not(feature = "mutations"))]
    let _ = variant;

    let scenario = &scenario.for_seed(seed);
    let trace = Trace::new();
    trace.at(
        0,
        "world",
        format!("scenario {} seed {seed}: {schedule}", scenario.name),
    );
    trace.at(0, "world", format!("world {world}"));
    let control = Control::new();
    let log = Rc::new(RefCell::new(ClientLog::default()));
    let location = crate::client_host::location();
    let sandbox = Rc::new(RefCell::new(Sandbox::new(
        seed,
        trace.clone(),
        &location.root,
        &location.agent_path(),
        world,
    )));
    sandbox.borrow_mut().set_control(control.clone());

    let mut sim = turmoil::Builder::new()
        .rng_seed(seed)
        .epoch(UNIX_EPOCH + Duration::from_secs(1_700_000_000))
        .simulation_duration(MAX_VIRTUAL)
        .tick_duration(STEP)
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(Duration::from_millis(10))
        .build();

    {
        let sandbox = sandbox.clone();
        let trace = trace.clone();
        let control = control.clone();
        sim.host("sandbox", move || {
            sandbox_main(sandbox.clone(), trace.clone(), control.clone())
        });
    }
    let ctx = ClientCtx {
        scenario: Rc::new(scenario.clone()),
        seed,
        world: world.clone(),
        trace: trace.clone(),
        control: control.clone(),
        log: log.clone(),
        store: MemoryStore::new(),
        second_store: MemoryStore::new(),
        channel: Rc::default(),
    };
    sim.client("client", client_main(ctx));

    // The fault loop's agenda.
    let mut agenda: Vec<(u64, Tick)> = Vec::new();
    for f in &schedule.0 {
        agenda.push((f.at_ms, Tick::Fault(f.kind.clone())));
        match f.kind {
            FaultKind::PartitionExec { for_ms } => {
                agenda.push((f.at_ms.saturating_add(for_ms), Tick::Repair));
            }
            FaultKind::HoldExec { for_ms } => {
                agenda.push((f.at_ms.saturating_add(for_ms), Tick::Release));
            }
            FaultKind::FreezeSandbox { for_ms } => {
                agenda.push((f.at_ms.saturating_add(for_ms), Tick::Thaw));
            }
            FaultKind::DiskFull {
                for_ms,
                at_result: false,
            } => {
                agenda.push((f.at_ms.saturating_add(for_ms), Tick::DiskFree));
            }
            _ => {}
        }
    }
    agenda.sort();
    agenda.reverse();
    control.lock().healed_at_ms = healed_at_ms(&schedule.0);

    let mut deaths = Deaths::default();
    let mut harness = Vec::new();
    loop {
        let now = u64::try_from(sim.elapsed().as_millis()).unwrap_or(u64::MAX);
        // What fell due on the sandbox during the last step happens at its
        // own instant, before anything due at `now`.
        sandbox.borrow_mut().advance_through(now);
        while agenda.last().is_some_and(|(at, _)| *at <= now) {
            let Some((_, tick)) = agenda.pop() else { break };
            apply(&mut sim, now, tick, &trace, &control, &sandbox, &mut deaths);
        }
        if std::mem::take(&mut control.lock().replace_now) {
            // `ReplacedAfterOp`: an op ran and its reply was held back.
            let replace = Tick::Fault(FaultKind::ReplaceSandbox);
            apply(
                &mut sim,
                now,
                replace,
                &trace,
                &control,
                &sandbox,
                &mut deaths,
            );
        }
        {
            let mut sb = sandbox.borrow_mut();
            if sb.next_wake().is_some_and(|w| w <= now) {
                sb.advance(now);
            }
            if std::mem::take(&mut control.lock().snapshot_now) {
                sb.advance(now);
                sb.take_snapshot();
            }
        }
        match sim.step() {
            Ok(true) => break,
            Ok(false) => {}
            Err(e) => {
                harness.push(format!("simulation: {e}"));
                break;
            }
        }
    }
    let virtual_ms = u64::try_from(sim.elapsed().as_millis()).unwrap_or(u64::MAX);
    sandbox.borrow_mut().advance(virtual_ms);
    let Deaths {
        all: mut kernel_deaths,
        by_new_boot: boot_deaths,
        boots,
    } = deaths;
    // A daemon that exited by itself (idle timeout) died too.
    kernel_deaths.extend(sandbox.borrow().self_exits.iter().copied());
    // As did one a fault killed right after a write.
    kernel_deaths.extend(sandbox.borrow().killed_after_write.iter().copied());
    // The agent's code must never panic; a panicked op looked to the
    // client like a dropped connection, so only the sandbox can tell.
    harness.extend(sandbox.borrow().op_defects.iter().cloned());
    harness.extend(sandbox.borrow().os().spinning().cloned());
    harness.extend(
        sandbox
            .borrow()
            .os()
            .relative_paths()
            .into_iter()
            .map(|p| format!("the agent used a path that is not absolute: {p:?}")),
    );
    // A cancel's tombstone says why once: a later cancel, timeout or stop
    // must not rewrite it (its reason and request are the first's).
    harness.extend(
        sandbox
            .borrow()
            .os()
            .tombstones_replaced()
            .iter()
            .map(|t| format!("the agent wrote a cell's tombstone over: {t}")),
    );
    kernel_deaths.sort();
    drop(sim);

    let flavor = if world.bash {
        Flavor::Bash
    } else {
        Flavor::Dash
    };
    let obs_deaths = kernel_deaths.clone();
    let mut obs = observe(
        scenario,
        &log.borrow(),
        &sandbox.borrow(),
        kernel_deaths,
        harness,
        flavor,
    );
    obs.replacements_unreported =
        observe::unreported_replacements(&log.borrow(), &obs_deaths, &boot_deaths);
    obs.replacements_unfounded = observe::unfounded_replacements(
        &log.borrow(),
        &boots,
        sandbox.borrow().os().pids_wrapped(),
    );
    obs.false_unkillable = observe::false_unkillable(&log.borrow(), &sandbox.borrow().kill_deaths);
    obs.max_kernels = Some(world.max_kernels);
    obs.kernel_idle_ms = Some(world.kernel_idle_ms);
    obs.tools = sandbox.borrow().tool_obs();
    obs.orphan_runs = sandbox.borrow().orphan_runs();
    obs.tools.reported_answered = log.borrow().tool_answered.clone();
    obs.tools.awaiting_at_end = log.borrow().calls_awaiting_at_end;
    obs.tools.runs = control.lock().tool_runs.clone();
    // Judged by what happened: a kill after a write no process met is
    // no fault of the run.
    let judged = schedule.without_unmet_kills(&sandbox.borrow().kills_met);
    obs.outages = Some(outages(&judged, &crate::client_host::config_in(world)));
    obs.flawed = world.flaw.map(|flaw| oracle::Flawed {
        flaw,
        fallback: world.fallback,
    });
    obs.disk_filled = schedule.0.iter().any(|f| {
        matches!(
            f.kind,
            FaultKind::DiskFull { .. } | FaultKind::DiskFullAtWrite { .. }
        )
    });
    obs.sandbox_clock_jumps_ms = schedule
        .0
        .iter()
        .map(|f| match f.kind {
            FaultKind::ClockJump { ms } => ms,
            _ => 0,
        })
        .fold(0, u64::saturating_add);
    let mut violations = oracle::check(&obs);
    violations.extend(oracle::expectations(scenario, &judged, &obs));
    violations.sort();
    violations.dedup();
    for v in &violations {
        trace.at(virtual_ms, "oracle", format!("VIOLATION {v}"));
    }
    trace.at(
        virtual_ms,
        "world",
        format!("end ({} violations)", violations.len()),
    );
    let mut channel: std::collections::BTreeMap<String, u64> = sandbox
        .borrow()
        .channel_counts
        .iter()
        .map(|(k, v)| ((*k).to_owned(), *v))
        .collect();
    if world.channel {
        channel.insert("seeds".into(), 1);
    }
    RunReport {
        violations,
        trace: trace.render(),
        virtual_ms,
        channel,
        skipped: None,
    }
}

/// Kernel daemons the faults killed, (virtual ms, pid).
#[derive(Default)]
struct Deaths {
    all: Vec<(u64, Pid)>,
    /// Those a boot that changed the boot id killed (the oracle's ground
    /// truth for "the kernel was replaced").
    by_new_boot: Vec<(u64, Pid)>,
    /// When the sandbox booted again (bounced or replaced): pids restart.
    boots: Vec<u64>,
}

fn apply(
    sim: &mut turmoil::Sim<'_>,
    now: u64,
    tick: Tick,
    trace: &Trace,
    control: &Control,
    sandbox: &Rc<RefCell<Sandbox>>,
    deaths: &mut Deaths,
) {
    match tick {
        Tick::Repair => {
            trace.at(now, "fault", "partition healed");
            sim.repair("client", "sandbox");
        }
        Tick::Release => {
            trace.at(now, "fault", "hold released");
            sim.release("client", "sandbox");
        }
        Tick::Thaw => {
            trace.at(now, "fault", "sandbox thawed");
            sandbox.borrow_mut().thaw(now);
        }
        Tick::DiskFree => {
            let refused = sandbox.borrow_mut().free_disk(now);
            trace.at(
                now,
                "fault",
                format!("disk has room again ({refused} writes refused so far)"),
            );
        }
        Tick::Fault(kind) => {
            trace.at(
                now,
                "fault",
                serde_json::to_string(&kind).unwrap_or_default(),
            );
            match kind {
                FaultKind::PartitionExec { .. } => sim.partition("client", "sandbox"),
                FaultKind::HoldExec { .. } => sim.hold("client", "sandbox"),
                FaultKind::DropConnection => sim.bounce("sandbox"),
                FaultKind::ExecLatency { ms, for_ms } => {
                    let mut a = control.lock();
                    a.latency_ms = ms;
                    a.latency_until_ms = now.saturating_add(for_ms);
                }
                FaultKind::SlowStart { op, ms } => control.lock().slow_start.push((op, ms)),
                FaultKind::ReplyLost { op } => control.lock().reply_lost.push(op),
                FaultKind::ReplacedAfterOp { op } => control.lock().replaced_after_op.push(op),
                FaultKind::KillDaemon => {
                    for pid in sandbox.borrow_mut().kill_daemons() {
                        deaths.all.push((now, pid));
                    }
                }
                FaultKind::BounceSandbox | FaultKind::ReplaceSandbox => {
                    let boot = sandbox.borrow().os().current_boot_id().to_owned();
                    deaths.boots.push(now);
                    let killed = if kind == FaultKind::BounceSandbox {
                        sandbox.borrow_mut().bounce()
                    } else {
                        sandbox.borrow_mut().replace()
                    };
                    let new_boot = sandbox.borrow().os().current_boot_id() != boot;
                    for pid in killed {
                        deaths.all.push((now, pid));
                        if new_boot {
                            deaths.by_new_boot.push((now, pid));
                        }
                    }
                    sim.bounce("sandbox");
                }
                FaultKind::CrashClient { down_ms } => control.lock().crash_client = Some(down_ms),
                FaultKind::ClockJump { ms } => sandbox.borrow_mut().jump_clock(now, ms),
                FaultKind::Cancel { point } => match point {
                    CancelPoint::BeforeSubmitRegisters => {
                        control.lock().cancel_before_submit = true
                    }
                    CancelPoint::DuringWait => control.lock().cancel_now = true,
                    CancelPoint::AfterDone => control.lock().cancel_after_done = true,
                    CancelPoint::BeforeCellStarts => control.lock().cancel_before_start = true,
                    CancelPoint::AsResultIsJournaled => control.lock().cancel_at_result = true,
                },
                FaultKind::KillShim => {
                    sandbox.borrow_mut().kill_shims();
                }
                FaultKind::KillInterpreter => {
                    sandbox.borrow_mut().kill_interpreters();
                }
                FaultKind::KillOp { op } => control.lock().kill_op.push(op),
                FaultKind::DamageReply {
                    op,
                    at_permille,
                    flip,
                } => control.lock().damage_reply.push((op, at_permille, flip)),
                FaultKind::TermDaemon => {
                    // The kernel is lost from the TERM on: its daemon
                    // starts nothing more and exits once its stop is over.
                    for pid in sandbox.borrow_mut().term_daemons(now) {
                        deaths.all.push((now, pid));
                    }
                }
                FaultKind::WipeKernelDirs => {
                    // The kernels are lost from the removal on: their
                    // daemons end what is left and exit.
                    for pid in sandbox.borrow_mut().wipe_kernel_dirs(now) {
                        deaths.all.push((now, pid));
                    }
                }
                FaultKind::FreezeSandbox { for_ms } => sandbox.borrow_mut().freeze(now, for_ms),
                FaultKind::DiskFull {
                    at_result: false, ..
                } => sandbox.borrow_mut().fill_disk(now),
                FaultKind::DiskFull {
                    for_ms,
                    at_result: true,
                } => sandbox
                    .borrow_mut()
                    .fill_disk_at(now, for_ms, FillAt::Result),
                FaultKind::DiskFullAtWrite { for_ms, file } => {
                    sandbox
                        .borrow_mut()
                        .fill_disk_at(now, for_ms, FillAt::Write(file.clone()))
                }
                FaultKind::PauseAfterWrite { for_ms, file } => {
                    sandbox.borrow_mut().pause_after_write(now, &file, for_ms)
                }
                FaultKind::KillAfterWrite { file } => {
                    sandbox.borrow_mut().kill_after_write(now, &file)
                }
                FaultKind::ChannelCut { at_permille } => {
                    control.lock().channel_cut.push(at_permille)
                }
                FaultKind::ChannelHalfOpen { for_ms } => {
                    control.lock().channel_half_open_until_ms = now.saturating_add(for_ms)
                }
                FaultKind::ChannelStall { for_ms } => {
                    control.lock().channel_stall_until_ms = now.saturating_add(for_ms)
                }
                FaultKind::ChannelLateReply { ms } => control.lock().channel_late_reply.push(ms),
                FaultKind::ChannelReorder { hold_ms } => {
                    control.lock().channel_reorder.push(hold_ms)
                }
            }
        }
    }
}

/// When the client first resolved a cell other than as `unknown` (the
/// first resolution, or the resume's after an `unknown`).
fn written_off_at(seen: &crate::observe::CellSeen) -> Option<u64> {
    match seen.resolutions.first() {
        Some(tether_core::protocol::CellOutcome::Unknown { .. }) if seen.resolutions.len() > 1 => {
            seen.last_resolved_at
        }
        Some(tether_core::protocol::CellOutcome::Unknown { .. }) => None,
        _ => seen.resolved_at,
    }
}

/// Until when `seen`'s key was its own: the start of the next cell the
/// client gave the same key (a kernel evicted and opened again by a later
/// client process numbers its cells from 1 again), or never.
/// The tags of `spec`'s late printers: each of their lines starts with
/// its tag, which tells them from those of another cell under the same
/// key (drawn_clients seed 145: a kernel opened again numbers from 1).
fn late_tags(spec: &CellSpec) -> Vec<String> {
    spec.workload
        .steps
        .iter()
        .filter_map(|s| match s {
            Step::LatePrint { tag, .. } => Some(tag.clone()),
            _ => None,
        })
        .collect()
}

fn key_own_until(log: &ClientLog, seen: &crate::observe::CellSeen) -> u64 {
    let from = seen.started_at.unwrap_or(0);
    log.cells
        .values()
        .filter(|c| c.key.is_some() && c.key == seen.key)
        .filter_map(|c| c.started_at)
        .filter(|&t| t > from)
        .min()
        .unwrap_or(u64::MAX)
}

/// Two cells the client saw carry `key`.
fn key_reused(log: &ClientLog, key: Option<&tether_core::client::CellKey>) -> bool {
    key.is_some_and(|k| {
        log.cells
            .values()
            .filter(|c| c.key.as_ref() == Some(k))
            .count()
            > 1
    })
}

fn observe(
    scenario: &Scenario,
    log: &ClientLog,
    sandbox: &Sandbox,
    kernel_deaths: Vec<(u64, Pid)>,
    harness: Vec<String>,
    flavor: Flavor,
) -> Observations {
    let mut cells = Vec::new();
    let mut bystanders_hit = Vec::new();
    for spec in scenario.cells() {
        let seen = log.cells.get(&spec.label).cloned().unwrap_or_default();
        let truth = sandbox.truth(&spec.label);
        let cell_key = seen
            .key
            .as_ref()
            .map(|key| (key.kernel.as_str().to_owned(), key.seq.0));
        // What happened under the key after a later cell took it over is
        // that cell's (full_disk seed 205: `after` in a kernel opened
        // again was taken for `drip` forking after its resolution).
        let own_until = key_own_until(log, &seen);
        // Under a key a later cell took over, what lives at the end is
        // that cell's (drawn seed 684: a kernel evicted and opened again
        // numbers its cells from 1); one of this cell's that outlived its
        // kernel's shutdown is a leak, which the leak checks judge.
        // A key two frontends' cells carried (each numbers its own cells)
        // is the one's whose submission the agent accepted: a cell that
        // was never accepted ran nothing under it (drawn_clients seed
        // 501833: a cell timed out before its kernel came up took the
        // other frontend's leftovers under that number for its own).
        let claims_key = seen.accepted_at.is_some() || !key_reused(log, seen.key.as_ref());
        let mut alive_at_end = match (&sandbox.snapshot, &cell_key) {
            (Some(snap), Some(key)) if own_until == u64::MAX && claims_key => {
                snap.get(key).cloned().unwrap_or_default()
            }
            _ => Vec::new(),
        };
        // The documented limit: what nothing names runs on (the leak
        // checks leave it out too): the kernel's files removed, or its
        // shim and daemon dead before either recorded it
        // (daemon_then_shim_killed_escapes seed 101432: the disk refused
        // the shim's orphan record until both were killed).
        alive_at_end.retain(|&pid| !sandbox.named_by_nothing(pid));
        if spec.lang == Lang::Python {
            // The documented limit (client/README.md, "what a cancel
            // reaches"): without cgroups a Python cell's `setsid env -i`
            // daemon is tied to it by nothing the agent can read.
            // (Judged at the snapshot: a pid reused since is another
            // process, python_orphans seed 1494.)
            alive_at_end.retain(|pid| !sandbox.snapshot_untraceable.contains(pid));
        }
        // Nothing that happened to other cells or kernels may signal a
        // bystander's processes (they may end by themselves).
        if spec.bystander
            && cell_key
                .as_ref()
                .is_some_and(|key| sandbox.signalled_cells.contains(key))
        {
            bystanders_hit.push(format!(
                "processes of {} (a cell nobody cancelled) were signalled",
                spec.label
            ));
        }
        let truth = CellTruth {
            executions: truth.executions,
            // A tool call that failed (its deadline ran out in a clock
            // jump, its cell ended first) printed no result.
            // Plus what its background children printed before it
            // resolved (a late print that came early is its output).
            stdout: [
                observe::without_lines(
                    observe::truth_stdout(scenario, spec, truth.executions, flavor),
                    &cell_key
                        .as_ref()
                        .map(|(kernel, seq)| sandbox.failed_call_lines(kernel, *seq))
                        .unwrap_or_default(),
                ),
                cell_key
                    .as_ref()
                    .map(|(kernel, seq)| sandbox.early_late_stdout(kernel, *seq, &late_tags(spec)))
                    .unwrap_or_default(),
            ]
            .concat(),
            // A shell cell's own processes write its stderr; a Python
            // cell's is the interpreter's, which serves every cell.
            // Not judged when a kernel evicted and opened again by a later
            // client process gave a second cell the same key (its numbers
            // start over): what was written under it is both cells'.
            // Nor for a cell that ran as a plain exec (fail open): no
            // kernel's cell wrote it.
            stderr: match (&cell_key, spec.lang) {
                (Some((kernel, seq)), Lang::Shell)
                    if !key_reused(log, seen.key.as_ref()) && seen.ran_without_kernel.is_none() =>
                {
                    Some(sandbox.stderr_of(kernel, *seq))
                }
                _ => None,
            },
            // Its scripted stdout is what it wrote only on its scripted
            // path: a TERM trap (a stop's TERM whose tombstone a full
            // disk refused, full_disk seed 670051) may end it early with
            // a status of its own.
            ran_to_end: truth.executions == 1
                && !cell_key
                    .as_ref()
                    .is_some_and(|(kernel, seq)| sandbox.ran_term_trap(kernel, *seq)),
            unfinished: match (&cell_key, seen.last_resolved_at) {
                (Some((kernel, seq)), Some(resolved)) => sandbox
                    .finished_at(kernel, *seq)
                    .is_none_or(|at| at > resolved),
                _ => false,
            },
            alive_at_end,
            // Against the final resolution, whose outcome the oracle judges;
            // without the untraceable ones of the documented limit above.
            // Only a cell that claims its key: one of two frontends'
            // cells under one number that was never accepted ran nothing
            // under it (drawn_clients seed 104116: a cell cancelled
            // before it was sent was judged by the other frontend's).
            died_after_resolution: match (&cell_key, seen.last_resolved_at) {
                (Some(key), Some(resolved)) if claims_key => sandbox
                    .cell_exits
                    .get(key)
                    .into_iter()
                    .flatten()
                    .filter(|&&(pid, _, at)| {
                        spec.lang != Lang::Python || !sandbox.untraceable_exits.contains(&(pid, at))
                    })
                    // Not an earlier cell's of the same key (drawn_clients
                    // seed 149: the first frontend's py#1 left a daemon the
                    // second frontend's py#1, never submitted, was judged by).
                    .filter(|&&(_, spawned, _)| spawned >= seen.started_at.unwrap_or(0))
                    .map(|&(_, _, at)| at)
                    .filter(|&at| at > resolved && at < own_until)
                    .max(),
                _ => None,
            },
            // From the resolution the oracle judges it by: `unknown`
            // promises nothing, so a process spawned after an `unknown`
            // and before the resume's own resolution is no run after one
            // (tool_calls seed 3: a call ran out its deadline during a
            // long hold, then the cell forked its last process).
            spawned_after_resolution: match (&cell_key, written_off_at(&seen)) {
                (Some(key), Some(resolved)) if claims_key => sandbox
                    .cell_spawns
                    .get(key)
                    .and_then(|t| t.iter().copied().find(|&t| t > resolved && t < own_until)),
                _ => None,
            },
        };
        cells.push(observe::cell(scenario, log, spec, truth, flavor));
    }
    let background = script::background_kernels(scenario)
        .into_iter()
        .map(|k| {
            let truth = sandbox.background_truth(k.as_str());
            BackgroundObs {
                kernel: k.to_string(),
                log: log
                    .background
                    .get(k.as_str())
                    .cloned()
                    .unwrap_or_else(|| Err("never read".into())),
                written: truth.written,
                later: truth.later,
                // The simulated OS says on which side of the drain bound
                // each line landed.
                either: Vec::new(),
                writers: truth.writers,
                lossy: sandbox.background_lossy(k.as_str()),
            }
        })
        .collect();
    let (leaked_processes, leaked_files, mut leaked_cgroups) = sandbox.leaks();
    leaked_cgroups.extend(sandbox.idle_exit_cgroups.iter().cloned());
    let client = observe::client_observations(log, &kernel_deaths);
    let mut state_loss = sandbox.state_loss(&kernel_deaths);
    let scripted: std::collections::BTreeSet<&str> =
        scenario.cells().map(|c| c.label.as_str()).collect();
    state_loss.unscripted = log
        .cells
        .iter()
        .filter(|(label, _)| !scripted.contains(label.as_str()))
        .map(|(label, seen)| observe::note_cell(log, label, seen))
        .collect();
    Observations {
        state_loss,
        cells,
        extra_executions: sandbox.extra_executions(scenario),
        collateral: sandbox
            .collateral()
            .into_iter()
            .chain(bystanders_hit)
            .collect(),
        leaked_processes,
        leaked_files,
        leaked_cgroups,
        interpreter_deaths: sandbox.interpreter_deaths.clone(),
        interpreter_ends: sandbox.interpreter_ends.clone(),
        background,
        self_inflicted: sandbox
            .self_inflicted
            .iter()
            .cloned()
            .chain(observe::stranded_losses(log, &sandbox.stranded))
            .collect(),
        stop_survivors: sandbox.term_survivors.clone(),
        termed_kernels: Some(sandbox.termed_kernels.iter().cloned().collect()),
        early_kills: sandbox.early_kills(),
        started_after_term: sandbox.started_after_term(),
        started_after_cancel: sandbox.started_after_cancel(),
        journal_gaps: sandbox
            .journal_gaps
            .iter()
            .chain(sandbox.os().removed_journal_gaps())
            .cloned()
            .collect(),
        two_daemons: sandbox.two_daemons.values().cloned().collect(),
        false_notes: false_notes(scenario, log, sandbox),
        // The simulation's own errors come first, then the client's.
        harness_errors: harness
            .into_iter()
            .chain(client.harness_errors.iter().cloned())
            .collect(),
        ..client
    }
}

/// What the agent says of a cell whose shim died before it ended
/// (`tether_core::agent::shell::discard_state`): the note names the cell.
const SHIM_KILLED_NOTE: (&str, &str) = (
    "tether: the shell state cell ",
    " reached was not kept (its shim was killed before the cell ended)",
);

/// Notes a cell got that an earlier cell's shim was killed, where that
/// shim finished its cell and exited by itself.
fn false_notes(scenario: &Scenario, log: &ClientLog, sandbox: &Sandbox) -> Vec<String> {
    let mut found = Vec::new();
    for spec in scenario.cells() {
        let Some(seen) = log.cells.get(&spec.label) else {
            continue;
        };
        let Some(key) = &seen.key else {
            continue;
        };
        let kernel = key.kernel.as_str().to_owned();
        let stderr: Vec<u8> = seen
            .output
            .iter()
            .filter(|(_, s, _)| *s == tether_core::protocol::Stream::Stderr)
            .flat_map(|(_, _, d)| d.iter().copied())
            .collect();
        let text = String::from_utf8_lossy(&stderr);
        for (at, _) in text.match_indices(SHIM_KILLED_NOTE.0) {
            let rest = &text[at + SHIM_KILLED_NOTE.0.len()..];
            let Some((seq, tail)) = rest.split_once(' ') else {
                continue;
            };
            let Ok(seq) = seq.parse::<u64>() else {
                continue;
            };
            if format!(" {tail}").starts_with(SHIM_KILLED_NOTE.1)
                && sandbox.every_shim_finished(&kernel, seq)
            {
                found.push(format!(
                    "{} was told that the shim of cell {seq} of {kernel} was killed before the cell ended; that shim finished it and exited 0",
                    spec.label
                ));
            }
        }
    }
    found
}
