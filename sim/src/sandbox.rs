//! The sandbox host: [`SimOs`] plus the agent's real logic on it.
//!
//! - the exec server ([`sandbox_main`]): each exec call becomes a process
//!   in `SimOs` (`begin_exec`) running the agent's [`OpRun`] until it
//!   yields its reply line, long-polling in virtual time; the install op
//!   (`/bin/sh -c <install script>`) is simulated by the script's steps on
//!   `SimOs` (a read-only or `noexec` root refuses as the script does,
//!   with the core's typed refusal); a plain exec of fail open runs the
//!   cell's code outside any kernel ([`plain`]);
//!   armed faults apply here (latency, slow start, reply lost, the submit
//!   held back for an early cancel);
//! - [`Sandbox::advance`], called by the world between steps: runs the
//!   simulated processes up to now and ticks every kernel daemon's
//!   [`Daemon`] logic;
//! - the channel host ([`channel`]): `tether-agent channel` as a
//!   process, core's channel server over a simulated stream;
//! - ground truth for the oracle: side-effect counts, processes of each
//!   cell, leaks, bystanders killed.

use crate::control::Control;
use crate::os::preempt::{self, Preempter};
use crate::os::{ProcEventKind, Role, SimOs, SimOsConfig, SimSignal};
use crate::scenario::Scenario;
use crate::swarm::{Flaw, World};
use crate::trace::{excerpt, now_ms, Trace};
use crate::transport::{serve, HandlerFuture, WireRequest, WireResponse, EXEC_PORT};
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::time::Duration;
use tether_core::agent::daemon::{Daemon, DaemonStep, ExitCause};
use tether_core::agent::journal;
use tether_core::agent::kernel::read_json;
use tether_core::agent::layout::KernelLayout;
use tether_core::agent::op::OpRun;
use tether_core::agent::{Os, Pid};
use tether_core::bytes::Bytes;
use tether_core::ids::{CellSeq, RequestId};
use tether_core::protocol::install::installed_line;
use tether_core::protocol::{
    EntryKind, Envelope, Identity, InstallRefusal, JournalRead, OpKind, Submission,
};
use tether_core::time::Timestamp;

mod background;
mod channel;
mod escalation;
mod plain;
mod process_faults;

pub use background::BackgroundTruth;
pub use channel::ChannelCounts;
pub use process_faults::STOP_SLACK_MS;

/// A cell process that ended: pid, when it was spawned, when it ended
/// (virtual ms).
pub type CellExit = (Pid, u64, u64);

/// Ground truth about one cell.
#[derive(Clone, Debug, Default)]
pub struct Truth {
    /// Times its code started (lines in its side-effect file).
    pub executions: u32,
}

struct DaemonRun {
    /// Its logic (`None` while a tick of it is paused, which holds it).
    logic: Option<Daemon>,
    /// A tick of it preempted at an OS call ([`crate::os::preempt`]).
    paused: Option<PausedTick>,
    kernel_dir: String,
    boot: String,
    next_wake: Timestamp,
    /// It decided to exit (its sweep kills what it owns).
    exiting: bool,
    /// It caught a SIGTERM from outside (its stop is not its own doing).
    stopped: bool,
    /// When it started (virtual ms).
    started_ms: u64,
    /// The nonce it was spawned under (its cells' cgroups carry it).
    nonce: String,
}

/// What removing kernel directories from outside (`wipe_kernel_dirs`)
/// left and whom it touched.
#[derive(Default)]
pub(crate) struct Wiped {
    /// Processes and cgroups only the removed files named (the documented
    /// limit, client/README.md "Known limit of shutdown"): excused leaks.
    pub(crate) unnamed: BTreeSet<Pid>,
    pub(crate) unnamed_cgroups: BTreeSet<String>,
    /// Daemons alive at the removal: each exits at its next tick.
    pub(crate) daemons: BTreeSet<Pid>,
    /// Shims alive at the removal, with the cell directory each serves:
    /// each ends its own tree.
    pub(crate) shims: BTreeMap<Pid, String>,
}

/// A daemon's tick paused at one of its OS calls.
struct PausedTick {
    tick: preempt::Paused<(Daemon, DaemonStep)>,
    /// When it goes on (sandbox clock).
    resume_at: Timestamp,
    /// When the tick began (sandbox clock).
    began: Timestamp,
    /// For a daemon that caught SIGTERM: the cells launched before it.
    launched_before: Option<BTreeSet<u64>>,
}

/// The simulated sandbox and the agent logic running on it.
pub struct Sandbox {
    os: SimOs,
    trace: Trace,
    root: String,
    daemons: BTreeMap<Pid, DaemonRun>,
    /// Kernels (by name) a shutdown op was seen for: the script's final
    /// shutdown, or the client's reaper evicting one. Their daemons'
    /// deaths and their processes' signals after it are expected; other
    /// kernels are still judged.
    shut_kernels: BTreeSet<String>,
    /// The kernel (by name) each daemon and interpreter belongs to.
    kernel_of_pid: BTreeMap<Pid, String>,
    /// Every daemon that started: when (virtual ms), its pid and kernel.
    /// Pids restart at a boot, so a death names its kernel from here.
    daemon_starts: Vec<(u64, Pid, String)>,
    /// Daemons killed by a fault (not the agent's doing).
    fault_killed: BTreeSet<Pid>,
    /// Pid → role of live processes we learned from spawn events.
    roles: BTreeMap<Pid, String>,
    collateral: Vec<String>,
    /// When processes of each cell (kernel name, seq) were spawned
    /// (virtual ms).
    pub cell_spawns: BTreeMap<(String, u64), Vec<u64>>,
    /// The processes of each cell (kernel name, seq) that ended: pid,
    /// when it was spawned and when it ended (virtual ms). Spawned before
    /// a cell started, a process under its key is an earlier cell's of
    /// that key (another frontend's record, a kernel opened again).
    pub cell_exits: BTreeMap<(String, u64), Vec<CellExit>>,
    /// When each cell process (by pid) was spawned (virtual ms).
    cell_spawned_at: BTreeMap<Pid, u64>,
    /// The exits of [`Sandbox::cell_exits`] of untraceable processes
    /// (pid, when), judged when they happened: the pid may be reused by a
    /// traceable process later.
    pub untraceable_exits: BTreeSet<(Pid, u64)>,
    /// The processes of [`Sandbox::snapshot`] that were untraceable then.
    pub snapshot_untraceable: BTreeSet<Pid>,
    /// The cell (kernel name, seq) each cell process was born from.
    cell_of: BTreeMap<Pid, (String, u64)>,
    /// Cells (kernel name, seq) whose processes the agent signalled before
    /// any shutdown.
    pub signalled_cells: BTreeSet<(String, u64)>,
    /// Cells (kernel name, seq) whose shim a fault killed (`kill_shim`):
    /// their kernel's daemon ends what they still run as a cancel does,
    /// without a tombstone.
    shim_killed_cells: BTreeSet<(String, u64)>,
    /// The cell (kernel name, seq) of each cell shim, by pid.
    shim_cell: BTreeMap<Pid, (String, u64)>,
    /// The shims each cell number (kernel name, seq) had, in order, and
    /// whether each exited by itself with 0: it saw its cell to the end
    /// (ground truth for the state notes). A number has more than one
    /// shim where a replaced sandbox or a kernel opened again numbers
    /// from 1 again.
    shim_runs: BTreeMap<(String, u64), Vec<(Pid, bool)>>,
    /// The sandbox's clock runs this far ahead of virtual time (clock jumps).
    clock_offset: u64,
    /// Daemons that decided to exit by themselves (idle), with when
    /// (virtual ms).
    pub self_exits: Vec<(u64, Pid)>,
    /// Daemons the fault `kill_after_write` killed, with when (virtual
    /// ms).
    pub killed_after_write: Vec<(u64, Pid)>,
    /// Every `kill_after_write` met (by a daemon, an op or a shim): when
    /// (virtual ms) and the file name it was armed with. One armed but
    /// never met changed nothing, and the judgement leaves it out.
    pub kills_met: Vec<(u64, String)>,
    /// Cell processes alive at the snapshot without the cell's marker
    /// (`env -i`) in a sandbox without cgroups: once out of the
    /// interpreter's tree nothing ties them to a Python cell, the
    /// documented limit of its cancel.
    pub untraceable: BTreeSet<Pid>,
    /// A kernel daemon was killed (a fault) while its kernel's disk
    /// refused writes: the records of what came back to it may be missing.
    daemon_killed_on_full_disk: bool,
    /// Untraceable children of killed shims: (pid, when in running ms,
    /// the daemon they went to).
    pub(crate) shim_orphans: Vec<(Pid, u64, Pid)>,
    /// Untraceable processes no record can name any more (their shim and
    /// its daemon both killed before either recorded them): a documented
    /// limit (client/README.md), excused as leaks.
    pub(crate) unrecordable: BTreeSet<Pid>,
    /// What the removal of kernel directories (`wipe_kernel_dirs`) left
    /// and whom it touched.
    pub(crate) wiped: Wiped,
    /// How many results had been journaled at the last look
    /// ([`Sandbox::cancel_at_result`]).
    results_seen: usize,
    /// The fault `DiskFull { at_result }` or `DiskFullAtWrite` armed or in
    /// force ([`Sandbox::fill_disk_at`]).
    armed_fill: Option<process_faults::ArmedFill>,
    /// Daemons whose exit sweep has begun.
    exiting_daemons: BTreeSet<Pid>,
    /// Of those, the ones that chose to go idle: a daemon is idle only
    /// once every cancel it escalates is over, so its sweep's KILL is
    /// judged as the cancel's would be.
    idle_exiting: BTreeSet<Pid>,
    /// Empty cgroups of a daemon's own cells it left at its idle exit:
    /// no shutdown may come after an idle exit to remove them (judged at
    /// the exit, as the shutdown's leaks are at the end).
    pub(crate) idle_exit_cgroups: Vec<String>,
    /// The switchboard, for a cancel the sandbox asks of the client
    /// (`CancelPoint::BeforeCellStarts`); set by the world.
    control: Option<Control>,
    /// The client was asked to cancel for the shim held now.
    hold_asked: bool,
    /// Agent processes (an op's exec, a channel) by the kernels a probe or
    /// a submit they ran was about: such an op ends what a gone daemon's
    /// cells still run (`tether_core::agent::orphans`).
    provers: BTreeMap<Pid, BTreeSet<String>>,
    /// Deaths the agent caused itself while its kernel had work: a daemon
    /// that went idle with a cell it took unfinished.
    pub self_inflicted: Vec<String>,
    /// Cells (kernel name, seq) recorded but not taken when their daemon
    /// went idle, with when (virtual ms) and what happened: the submit's handshake with the
    /// exiting daemon must send each to the next daemon, not lose it
    /// (judged with the client's outcome, `observe::stranded_losses`).
    pub stranded: Vec<crate::observe::Stranded>,
    /// Processes that died by SIGKILL: (pid, when in virtual ms). Every
    /// simulated process dies by KILL (none is unkillable), so one the
    /// agent reported unkillable is judged by these.
    pub kill_deaths: Vec<(Pid, u64)>,
    /// When a Python interpreter died before any shutdown (virtual ms).
    pub interpreter_deaths: Vec<u64>,
    /// How each of those interpreters ended: `status C` or `signal N`.
    pub interpreter_ends: Vec<(u64, String)>,
    /// Journals whose entry numbers are not 1, 2, 3, … (a gap or a
    /// repeat), read before each shutdown and at the snapshot.
    pub journal_gaps: Vec<String>,
    /// Agent processes (execs, channels) whose op code panicked (the op
    /// runs in the connection's task, so a panic there would only drop
    /// the connection, which the client takes for a transport fault and
    /// retries: the crash would pass unseen), or asked to be woken before
    /// the step that asked (a busy loop, which the simulation's driver
    /// would hide: the eighth sample's `op.rs:585`); daemons whose tick
    /// asked the same.
    pub op_defects: Vec<String>,
    /// Kernels that had two daemons alive at once, neither of them
    /// exiting (at most one may own a kernel's cells).
    pub two_daemons: BTreeMap<String, String>,
    /// Cell processes alive when the script's cells were done, by seq.
    /// Keyed by (kernel name, seq).
    pub snapshot: Option<BTreeMap<(String, u64), Vec<Pid>>>,
    /// The client's grace between TERM and KILL (ms), which a stopped
    /// kernel's daemon uses too.
    grace_ms: u64,
    /// Stopped kernels to look at again.
    term_checks: Vec<process_faults::TermCheck>,
    /// When the freeze in progress ends (ms): a TERM that lands while the
    /// sandbox is frozen is caught only then.
    frozen_until_ms: Option<u64>,
    /// When the freeze in progress began (ms), and how long the sandbox
    /// was frozen before it in all: see `running_ms`.
    frozen_since_ms: Option<u64>,
    frozen_ms: u64,
    /// What a stopped kernel left running after its stop was over.
    pub term_survivors: Vec<String>,
    /// Cells a stopped daemon left open, untaken, until they are
    /// withdrawn.
    left_open: Vec<process_faults::LeftOpen>,
    /// The kernels whose daemon got SIGTERM from outside (a fault).
    pub termed_kernels: std::collections::BTreeSet<String>,
    /// What happened on channels (streams opened, ops carried, channel
    /// faults that hit one).
    pub channel_counts: ChannelCounts,
    /// What may have lost background output, by kernel name (`*`: of
    /// every kernel) ([`background`]).
    background_lossy: BTreeMap<String, BTreeSet<String>>,
    /// When the last `logs` op of each kernel read its log.
    logs_reads: BTreeMap<String, Timestamp>,
    /// What the escalation checks saw ([`escalation`]).
    escalation: escalation::EscalationTruth,
    /// Which agent steps are preempted ([`crate::os::preempt`]).
    preempter: Preempter,
    /// What happened to each shell cell (kernel name, seq) that may have
    /// cost the kernel the state it reached: its shell killed by a
    /// signal, its shim killed before its result was journaled.
    state_loss_causes: BTreeMap<(String, u64), Vec<String>>,
    /// The main process (the shell) of each shell cell, by pid.
    shell_mains: BTreeMap<Pid, (String, u64)>,
}

/// A pid space this small (the swarm's small worlds) reuses a killed
/// daemon's pid at the next birth after its reaping.
const SMALL_PID_MAX: u32 = 200;

impl Sandbox {
    /// A freshly booted sandbox whose agent lives under `root`.
    pub fn new(seed: u64, trace: Trace, root: &str, agent_exe: &str, world: &World) -> Sandbox {
        let mut config = SimOsConfig {
            seed,
            agent_exe: agent_exe.into(),
            init_reaps: world.init_reaps,
            pid_max: world.pid_max,
            bounce_keeps_boot_id: world.bounce_keeps_boot_id,
            shim_start: std::time::Duration::from_millis(world.shim_start_ms),
            torn_writes: world.torn_writes,
            high_pids_first: world.high_pids_first,
            timer_slack: std::time::Duration::from_millis(world.timer_slack_ms),
            interp_start: std::time::Duration::from_millis(world.interp_start_ms),
            ..SimOsConfig::default()
        };
        if !world.cgroups {
            config.cgroup_root = None;
        }
        if !world.bash {
            config.programs.remove("bash");
        }
        match world.flaw {
            Some(Flaw::ReadOnlyRoot) => config.read_only.push(root.into()),
            Some(Flaw::NoexecRoot) => config.noexec.push(root.into()),
            Some(Flaw::NoPython3) => {
                config.programs.remove("python3");
            }
            None => {}
        }
        Sandbox {
            os: SimOs::new(config),
            trace,
            root: root.into(),
            daemons: BTreeMap::new(),
            shut_kernels: BTreeSet::new(),
            kernel_of_pid: BTreeMap::new(),
            daemon_starts: Vec::new(),
            fault_killed: BTreeSet::new(),
            roles: BTreeMap::new(),
            collateral: Vec::new(),
            cell_spawns: BTreeMap::new(),
            cell_exits: BTreeMap::new(),
            cell_spawned_at: BTreeMap::new(),
            untraceable_exits: BTreeSet::new(),
            snapshot_untraceable: BTreeSet::new(),
            cell_of: BTreeMap::new(),
            signalled_cells: BTreeSet::new(),
            shim_killed_cells: BTreeSet::new(),
            shim_cell: BTreeMap::new(),
            shim_runs: BTreeMap::new(),
            clock_offset: 0,
            self_exits: Vec::new(),
            killed_after_write: Vec::new(),
            kills_met: Vec::new(),
            results_seen: 0,
            armed_fill: None,
            exiting_daemons: BTreeSet::new(),
            idle_exiting: BTreeSet::new(),
            idle_exit_cgroups: Vec::new(),
            control: None,
            hold_asked: false,
            provers: BTreeMap::new(),
            untraceable: BTreeSet::new(),
            daemon_killed_on_full_disk: false,
            shim_orphans: Vec::new(),
            unrecordable: BTreeSet::new(),
            wiped: Wiped::default(),
            self_inflicted: Vec::new(),
            stranded: Vec::new(),
            kill_deaths: Vec::new(),
            interpreter_deaths: Vec::new(),
            interpreter_ends: Vec::new(),
            snapshot: None,
            grace_ms: world.grace_ms,
            term_checks: Vec::new(),
            frozen_until_ms: None,
            frozen_since_ms: None,
            frozen_ms: 0,
            term_survivors: Vec::new(),
            left_open: Vec::new(),
            termed_kernels: std::collections::BTreeSet::new(),
            background_lossy: BTreeMap::new(),
            logs_reads: BTreeMap::new(),
            escalation: escalation::EscalationTruth::default(),
            state_loss_causes: BTreeMap::new(),
            shell_mains: BTreeMap::new(),
            journal_gaps: Vec::new(),
            op_defects: Vec::new(),
            two_daemons: BTreeMap::new(),
            channel_counts: ChannelCounts::new(),
            preempter: Preempter::new(seed, world.preempt_permille),
        }
    }

    /// A shutdown op for `kernel` arrived (on an exec or the channel):
    /// its daemon's death and its processes' signals from now on are
    /// expected.
    fn shutdown_seen(&mut self, kernel: String) {
        // The daemons started up to this instant first: one a spawn
        // started just before is one this shutdown may end (`drawn` seed
        // 400948: registered after, it reopened the kernel the shutdown
        // had just closed, and its end was judged collateral).
        self.advance(now_ms());
        self.check_journals(Some(&kernel));
        self.shut_kernels.insert(kernel);
    }

    /// The simulated OS (for tests and inspection).
    pub fn os(&self) -> &SimOs {
        &self.os
    }

    /// Runs processes and daemons up to `now_ms`, then moves the process
    /// events into the trace.
    pub fn advance(&mut self, now_ms: u64) {
        let now = self.os_time(now_ms);
        self.run_processes(now);
        self.cancel_for_held_shim(now_ms);
        self.cancel_at_result(now_ms);
        self.advance_armed_fill(now_ms);
        if self.os.is_frozen() {
            // The daemons are frozen too.
            self.flush_events();
            return;
        }
        for spawn in self.os.take_daemon_spawns() {
            self.trace.at(
                now_ms,
                "sandbox",
                format!("daemon {} starts for {}", spawn.pid, spawn.kernel_dir),
            );
            // A kernel opened again after its shutdown (an eviction) is
            // judged again.
            let kernel = kernel_name(&spawn.kernel_dir);
            self.escalation.daemon_spawned(spawn.pid);
            // Under a reused pid, a daemon that exited before is not this one.
            self.exiting_daemons.remove(&spawn.pid);
            self.idle_exiting.remove(&spawn.pid);
            self.shut_kernels.remove(&kernel);
            self.daemon_starts
                .push((self.virtual_ms(now), spawn.pid, kernel.clone()));
            self.kernel_of_pid.insert(spawn.pid, kernel);
            self.daemons.insert(
                spawn.pid,
                DaemonRun {
                    logic: Some(Daemon::new(&spawn.kernel_dir, &spawn.nonce)),
                    paused: None,
                    kernel_dir: spawn.kernel_dir.clone(),
                    boot: self.os.current_boot_id().to_owned(),
                    next_wake: now,
                    exiting: false,
                    stopped: false,
                    started_ms: self.virtual_ms(now),
                    nonce: spawn.nonce.clone(),
                },
            );
        }
        let boot = self.os.current_boot_id().to_owned();
        let pids: Vec<Pid> = self.daemons.keys().copied().collect();
        for pid in pids {
            let alive =
                self.os.is_alive(pid) && self.daemons.get(&pid).is_some_and(|d| d.boot == boot);
            if !alive {
                // A tick paused mid-way is abandoned with its process.
                self.daemons.remove(&pid);
                continue;
            }
            let Some((step, began, launched_before)) = self.tick_daemon(pid, now, now_ms) else {
                continue;
            };
            let Some(run) = self.daemons.get_mut(&pid) else {
                continue;
            };
            let cause = run.logic.as_ref().and_then(Daemon::exit_cause);
            let began_exit = cause.is_some() && !run.exiting;
            run.exiting |= began_exit;
            let kernel_dir = run.kernel_dir.clone();
            let stopped = run.stopped;
            let nonce = run.nonce.clone();
            match step {
                DaemonStep::Continue { next_wake } => {
                    run.next_wake = next_wake;
                    let said = format!("daemon {pid} asked to be woken");
                    if next_wake <= began && !self.op_defects.iter().any(|d| d.starts_with(&said)) {
                        // A real daemon's driver would not sleep at all:
                        // a busy loop, which this driver's steps hide.
                        self.op_defects.push(format!(
                            "daemon {pid} asked to be woken at {next_wake:?}, no later than its tick began ({began:?}): a busy loop"
                        ));
                    }
                }
                DaemonStep::Exit => {
                    self.trace
                        .at(now_ms, "sandbox", format!("daemon {pid} exits"));
                    self.judge_idle_exit(pid, &kernel_dir, &nonce, now_ms);
                    self.os.exit_process(pid, 0);
                    self.daemons.remove(&pid);
                    if stopped {
                        self.stopped_daemon_exited(&kernel_dir, now_ms);
                    }
                }
            }
            if let Some(before) = launched_before {
                self.note_launches_after_term(pid, &kernel_dir, &before, now);
            }
            if began_exit {
                self.exiting_daemons.insert(pid);
                if cause == Some(ExitCause::Idle) {
                    self.idle_exiting.insert(pid);
                    self.judge_idle_announcement(pid, &kernel_dir, &nonce, now_ms);
                }
                let chosen = match cause {
                    Some(ExitCause::Idle) => Some("idle"),
                    Some(ExitCause::ConfigUnreadable) => Some("unable to read its config"),
                    _ => None,
                };
                if let Some(why) = chosen.filter(|_| !self.is_shut(&kernel_name(&kernel_dir))) {
                    // It chose to go, while its kernel is in use (its
                    // config there): not a death the client could have
                    // caused or foreseen. A daemon that found its kernel
                    // removed goes by design, even when a successor made
                    // the kernel again before this tick ended (drawn
                    // seed 100144: a tick preempted across the removal).
                    self.self_exits.push((now_ms, pid));
                    self.note_lossy(
                        Some(&kernel_name(&kernel_dir)),
                        format!("its daemon {pid} exited {why}"),
                    );
                    let name = kernel_name(&kernel_dir);
                    for (seq, taken) in self.unfinished_cells(&kernel_dir) {
                        let detail = format!(
                            "daemon {pid} of {name} exited by itself at {now_ms} ms while its cell {seq} was unfinished"
                        );
                        if taken {
                            self.self_inflicted.push(detail);
                        } else {
                            self.stranded.push(crate::observe::Stranded {
                                kernel: name.clone(),
                                seq,
                                at_ms: now_ms,
                                detail,
                                gone_at_ms: None,
                            });
                        }
                    }
                }
            }
            // What the daemon did may wake processes at this instant.
            self.run_processes(now);
        }
        self.check_one_daemon_per_kernel(now_ms);
        self.flush_events();
        self.check_stopped_kernels(now_ms);
        self.check_left_open(now_ms);
        self.forget_strands_that_ran(now_ms);
    }

    /// A stranded cell (see `stranded`) whose journal has a `started`
    /// entry ran after all, on the next daemon: it was not lost. One whose
    /// submission is gone is noted so (withdrawn, or removed by a fault).
    fn forget_strands_that_ran(&mut self, now_ms: u64) {
        if self.stranded.is_empty() {
            return;
        }
        let root = self.root.clone();
        let os = &self.os;
        self.stranded.retain_mut(|s| {
            let cell =
                KernelLayout::new(&format!("{root}/kernels/{}", s.kernel)).cell(CellSeq(s.seq));
            if s.gone_at_ms.is_none() && !os.exists(&cell.submission()) {
                s.gone_at_ms = Some(now_ms);
            }
            let started = journal::read_journal(os, &cell.journal())
                .ok()
                .and_then(|r| journal::started(&r));
            started.is_none()
        });
    }

    /// Runs (or goes on with) the tick of the live daemon `pid` if it is
    /// due: its step and, for a daemon that caught SIGTERM, the cells
    /// launched before the tick. `None`: no tick ended now (not due, or
    /// paused mid-way by a preemption, [`crate::os::preempt`]).
    fn tick_daemon(
        &mut self,
        pid: Pid,
        now: Timestamp,
        now_ms: u64,
    ) -> Option<(DaemonStep, Timestamp, Option<BTreeSet<u64>>)> {
        let run = self.daemons.get_mut(&pid)?;
        if let Some(paused) = run.paused.take() {
            if paused.resume_at > now {
                // Mid-tick: nothing else of it runs (a TERM it caught
                // waits for the tick's end).
                run.paused = Some(paused);
                return None;
            }
            self.trace.at(
                now_ms,
                "sandbox",
                format!("daemon {pid}'s tick goes on (preempted)"),
            );
            let (logic, step) = paused.tick.resume(&mut self.os, pid);
            run.logic = Some(logic);
            return Some((step, paused.began, paused.launched_before));
        }
        let caught_term = self.os.take_caught_term(pid);
        let launched_before = self.launched_if_stopped(pid, caught_term);
        let run = self.daemons.get_mut(&pid)?;
        let logic = run.logic.as_mut()?;
        if caught_term {
            self.trace
                .at(now_ms, "sandbox", format!("daemon {pid} caught TERM"));
            logic.terminate(now);
            self.escalation.daemon_termed(pid, now);
            run.stopped = true;
            run.next_wake = now;
        }
        if run.next_wake > now {
            return None;
        }
        let mut logic = run.logic.take()?;
        let Some(at) = self.preempter.draw(now_ms) else {
            match self.step_meeting_kill(pid, now_ms, |os| logic.tick(os)) {
                Ok(step) => {
                    self.daemons.get_mut(&pid)?.logic = Some(logic);
                    return Some((step, now, launched_before));
                }
                Err(name) => {
                    // Nothing of the tick after the write landed.
                    let dir = self.daemons.get(&pid)?.kernel_dir.clone();
                    self.trace.at(
                        now_ms,
                        "sandbox",
                        format!("daemon {pid} KILLED after its write of {name} (fault)"),
                    );
                    self.note_fault_killed_daemon(pid, &dir, true);
                    self.killed_after_write.push((now_ms, pid));
                    self.flush_events();
                    return None;
                }
            }
        };
        let tick = move |os: &mut dyn Os| {
            let step = logic.tick(os);
            (logic, step)
        };
        match preempt::run(&mut self.os, pid, at.clone(), tick) {
            preempt::Outcome::Done((logic, step)) => {
                run.logic = Some(logic);
                Some((step, now, launched_before))
            }
            preempt::Outcome::Paused(tick) => {
                self.preempter.paused(&at);
                self.trace.at(
                    now_ms,
                    "sandbox",
                    format!(
                        "daemon {pid}'s tick PREEMPTED {} for {} ms",
                        at.describe(),
                        at.pause.as_millis()
                    ),
                );
                run.paused = Some(PausedTick {
                    tick,
                    resume_at: now + at.pause,
                    began: now,
                    launched_before,
                });
                None
            }
        }
    }

    /// Runs `step` as process `pid` (a daemon's tick, an op's step) to
    /// its end, meeting an armed `kill_after_write`: `Err` with the file's
    /// name where the process stopped after that write, killed there (the
    /// caller notes what the death means for its kind of process).
    fn step_meeting_kill<R>(
        &mut self,
        pid: Pid,
        now_ms: u64,
        step: impl FnOnce(&mut dyn Os) -> R,
    ) -> Result<R, String> {
        let armed = self.preempter.armed_kill(now_ms);
        self.os.arm_kill_after_write(armed);
        let previous = self.os.current();
        self.os.set_current(pid);
        let done = step(&mut self.os);
        self.os.set_current(previous);
        self.os.arm_kill_after_write(None);
        let Some((_, name)) = self.os.take_stopped_at_write() else {
            return Ok(done);
        };
        self.preempter.disarm_after_write();
        self.os.kill_from_outside(pid);
        self.kills_met.push((now_ms, name.clone()));
        Err(name)
    }

    /// Records a kernel with two live daemons, neither exiting.
    fn check_one_daemon_per_kernel(&mut self, now_ms: u64) {
        let mut by_kernel: BTreeMap<&str, Vec<Pid>> = BTreeMap::new();
        for (pid, run) in &self.daemons {
            // A daemon whose directory was removed is done for (it exits
            // at its next tick); the client may spawn the next before.
            if !run.exiting && !self.wiped.daemons.contains(pid) && self.os.is_alive(*pid) {
                by_kernel.entry(&run.kernel_dir).or_default().push(*pid);
            }
        }
        for (dir, pids) in by_kernel.into_iter().filter(|(_, p)| p.len() > 1) {
            let kernel = kernel_name(dir);
            let detail =
                format!("kernel {kernel} had daemons {pids:?} alive at once at {now_ms} ms");
            self.two_daemons.entry(kernel).or_insert(detail);
        }
    }

    /// Reads the journal of every cell of `kernel` (every kernel when
    /// `None`) and records those whose numbers are not contiguous from 1.
    /// A trailing partial line is a write in progress, not a gap.
    pub fn check_journals(&mut self, kernel: Option<&str>) {
        let kernels_dir = format!("{}/kernels", self.root);
        let mut names = self.os.list_dir(&kernels_dir).unwrap_or_default();
        names.sort();
        for name in names
            .iter()
            .filter(|n| kernel.is_none_or(|k| k == n.as_str()))
        {
            let layout = KernelLayout::new(&format!("{kernels_dir}/{name}"));
            let mut seqs: Vec<u64> = self
                .os
                .list_dir(&layout.cells_dir())
                .unwrap_or_default()
                .iter()
                .filter_map(|s| s.parse().ok())
                .collect();
            seqs.sort_unstable();
            for seq in seqs {
                let path = layout.cell(CellSeq(seq)).journal();
                let Ok(bytes) = self.os.read_file(&path) else {
                    continue;
                };
                let read = tether_core::protocol::parse_journal(&bytes);
                let found = journal_gap(&read).or_else(|| {
                    let submission = self
                        .os
                        .read_file(&layout.cell(CellSeq(seq)).submission())
                        .ok()
                        .and_then(|b| serde_json::from_slice::<Submission>(&b).ok())?;
                    unaccepted(&read, &submission.request_id)
                });
                if let Some(gap) = found {
                    let found = format!("journal of {name}#{seq}: {gap}");
                    if !self.journal_gaps.contains(&found) {
                        self.journal_gaps.push(found);
                    }
                }
            }
        }
    }

    /// The sandbox clock's reading at virtual time `ms`.
    fn os_time(&self, ms: u64) -> Timestamp {
        Timestamp(ms.saturating_add(self.clock_offset))
    }

    /// Virtual time of a sandbox clock reading.
    fn virtual_ms(&self, t: Timestamp) -> u64 {
        t.0.saturating_sub(self.clock_offset)
    }

    /// The sandbox's clock jumps `ms` forward (a fault).
    pub fn jump_clock(&mut self, now_ms: u64, ms: u64) {
        self.clock_offset = self.clock_offset.saturating_add(ms);
        self.advance(now_ms);
    }

    /// Steps the sandbox through each wake-up due before `before_ms`, in
    /// time order, so that a process or daemon that falls due between two
    /// simulation steps acts at its own millisecond, not at the next step.
    pub fn advance_through(&mut self, before_ms: u64) {
        let mut done = self.virtual_ms(self.os.now_ts());
        while let Some(wake) = self.next_wake().filter(|&w| w < before_ms) {
            let at = wake.max(done);
            self.advance(at);
            // Something still due at the instant just stepped to (a frozen
            // sandbox's daemons) waits for the step's own advance, as it
            // did before; this also bounds the loop.
            if self.next_wake().is_some_and(|w| w <= at) {
                break;
            }
            done = at;
        }
    }

    /// When something on the sandbox is next due (virtual ms).
    pub fn next_wake(&self) -> Option<u64> {
        let os = self.os.next_wake().map(|t| self.virtual_ms(t));
        let d = self
            .daemons
            .values()
            .map(|d| {
                let paused = d.paused.as_ref().map(|p| p.resume_at);
                self.virtual_ms(paused.unwrap_or(d.next_wake))
            })
            .min();
        // A daemon's step may have filled the disk at a result since the
        // last look: looked at again at once.
        let disk = self.armed_fill.as_ref().map(|a| {
            if self.os.filled_at() {
                self.virtual_ms(self.os.now_ts())
            } else {
                a.next_wake()
            }
        });
        [os, d, disk].into_iter().flatten().min()
    }

    /// Moves process events into the trace and learns roles and bystander
    /// deaths from them.
    pub fn flush_events(&mut self) {
        for e in self.os.take_events() {
            if let ProcEventKind::Exit {
                pid,
                status: crate::os::ExitStatus::Signaled(sig),
            } = &e.kind
            {
                if *sig == crate::os::SimSignal::Kill {
                    let at = self.virtual_ms(e.at);
                    self.kill_deaths.push((*pid, at));
                }
                if let Some(key) = self.shell_mains.get(pid).cloned() {
                    let at = self.virtual_ms(e.at);
                    self.state_loss_causes
                        .entry(key)
                        .or_default()
                        .push(format!("its shell {pid} was killed by {sig} at {at} ms"));
                }
            }
            match &e.kind {
                ProcEventKind::Spawn {
                    pid,
                    argv,
                    cell,
                    role,
                    marked,
                    ..
                } => {
                    // A reused pid is a new process: no cell's unless it
                    // says so, and named by what names it now.
                    self.cell_of.remove(pid);
                    self.shell_mains.remove(pid);
                    self.wiped.unnamed.remove(pid);
                    if let Some(c) = cell {
                        self.kernel_of_pid.insert(*pid, kernel_name(&c.kernel_dir));
                        if let Some(seq) = c.seq {
                            let at = self.virtual_ms(e.at);
                            let key = (kernel_name(&c.kernel_dir), seq);
                            self.cell_spawns.entry(key.clone()).or_default().push(at);
                            self.cell_spawned_at.insert(*pid, at);
                            if tether_core::agent::shell::dirs_of(argv).is_some() {
                                self.shell_mains.insert(*pid, key.clone());
                            }
                            self.cell_of.insert(*pid, key);
                        }
                    }
                    // The documented limit is a property of the process from
                    // birth (`env -i`), whether or not it is still alive at
                    // the snapshot: one the daemon's exit sweep kills later
                    // is as untraceable as one that survives. A reused pid
                    // is a new process, judged afresh.
                    let unmarked = cell.is_some()
                        && self.os.config().cgroup_root.is_none()
                        && *role == Role::Cell
                        && !marked;
                    if unmarked {
                        self.untraceable.insert(*pid);
                    } else {
                        self.untraceable.remove(pid);
                    }
                    // Told by the birth, not looked up: the process may be
                    // gone by now (python_state seed 210: an interpreter
                    // killed with its shim in the ms it was born was not
                    // counted as its kernel's death).
                    let role = match role {
                        Role::Init => "init",
                        Role::Daemon { .. } => "daemon",
                        Role::Exec => "exec",
                        Role::Shim => "shim",
                        Role::Cell => "cell",
                        Role::Interpreter => "interpreter",
                    };
                    self.shim_cell.remove(pid);
                    if role == "shim" {
                        if let Some(cell) = shim_cell(argv) {
                            self.shim_runs
                                .entry(cell.clone())
                                .or_default()
                                .push((*pid, false));
                            self.shim_cell.insert(*pid, cell);
                        }
                    }
                    self.roles
                        .insert(*pid, format!("{role} {}", argv.join(" ")));
                }
                ProcEventKind::Exit {
                    pid,
                    status: crate::os::ExitStatus::Code(0),
                } if self.shim_cell.contains_key(pid) => {
                    if let Some(cell) = self.shim_cell.get(pid) {
                        let runs = self.shim_runs.entry(cell.clone()).or_default();
                        if let Some(run) = runs.iter_mut().rev().find(|(p, _)| p == pid) {
                            run.1 = true;
                        }
                    }
                }
                ProcEventKind::Exit { pid, status }
                    if !self.pid_shut(*pid)
                        && self
                            .roles
                            .get(pid)
                            .is_some_and(|r| r.starts_with("interpreter")) =>
                {
                    let at = self.virtual_ms(e.at);
                    self.interpreter_deaths.push(at);
                    let how = match status {
                        crate::os::ExitStatus::Code(c) => format!("status {c}"),
                        crate::os::ExitStatus::Signaled(sig) => format!("signal {}", sig.number()),
                    };
                    self.interpreter_ends.push((at, how));
                }
                ProcEventKind::Exit { pid, .. }
                    if self.roles.get(pid).is_some_and(|r| r.starts_with("cell")) =>
                {
                    if let Some(key) = self.cell_of.get(pid) {
                        let at = self.virtual_ms(e.at);
                        let spawned = self.cell_spawned_at.get(pid).copied().unwrap_or(0);
                        self.cell_exits
                            .entry(key.clone())
                            .or_default()
                            .push((*pid, spawned, at));
                        if self.untraceable.contains(pid) {
                            self.untraceable_exits.insert((*pid, at));
                        }
                    }
                }
                ProcEventKind::Signal {
                    from, to, signal, ..
                } if *from != 0 => {
                    self.note_escalation_signal(e.at, *from, *to, *signal);
                    if from == to && self.daemons.contains_key(to) {
                        // No decision of a daemon signals itself: it ends by
                        // returning from its last tick, its sweep done (a
                        // daemon in its own kill set dies mid-sweep, leaving
                        // what the sweep had still to end and remove).
                        self.self_inflicted.push(format!(
                            "daemon {to} sent itself {signal} at {} ms",
                            self.virtual_ms(e.at)
                        ));
                    }
                    if let Some(c) = self.cell_of.get(to) {
                        // A daemon's exit sweep kills what its kernel owns,
                        // bystanders' leftovers included, as a shutdown does.
                        if !self.is_shut(&c.0)
                            && !self.exiting_daemons.contains(from)
                            && !self.cancelled_by_its_kernel(*from, c)
                            && !self.ended_for_its_killed_shim(*from, c)
                            && !self.swept_by_a_successor(*from, c)
                            && !self.ended_as_its_daemons_orphan(*from, c)
                            && !self.ended_by_its_shim_after_a_wipe(*from, c)
                        {
                            self.signalled_cells.insert(c.clone());
                        }
                    }
                    let victim = self.roles.get(to).cloned().unwrap_or_default();
                    let bystander = victim.starts_with("init")
                        || victim.starts_with("exec")
                        || (victim.starts_with("daemon")
                            && !self.pid_shut(*to)
                            && !self.unrecorded_daemon_ended_by_an_op(*from, *to)
                            && matches!(signal, SimSignal::Kill | SimSignal::Term));
                    if bystander && *from != *to {
                        self.collateral.push(format!(
                            "{signal} from {from} to {to} ({})",
                            excerpt(victim.as_bytes(), 60)
                        ));
                    }
                }
                _ => {}
            }
            let text = e.kind.to_string();
            self.trace
                .at(self.virtual_ms(e.at), "proc", excerpt(text.as_bytes(), 110));
        }
    }

    /// `to` is a kernel daemon no identity record names (a spawn started
    /// it and died before recording it) and `from` an agent op: a spawn
    /// ends such a daemon before it starts the kernel's next (no probe
    /// finds it, so no cell reached it). A recorded daemon stays a
    /// bystander of every op but its kernel's shutdown.
    fn unrecorded_daemon_ended_by_an_op(&self, from: Pid, to: Pid) -> bool {
        // Its run may be gone already (its exit comes before the signal
        // in the events).
        let Some(kernel) = self.kernel_of_pid.get(&to) else {
            return false;
        };
        let dir = format!("{}/kernels/{kernel}", self.root);
        let recorded = read_json::<Identity>(&self.os, &KernelLayout::new(&dir).identity())
            .ok()
            .flatten()
            .is_some_and(|i| i.pid == to);
        !recorded && self.roles.get(&from).is_some_and(|r| r.starts_with("exec"))
    }

    /// `from` is the shim of `cell` (its cell shim, or its kernel's
    /// interpreter shim, which runs every Python cell of the kernel) and
    /// its kernel's directory was removed while it ran: the shim ends its
    /// own tree, the kernel being lost.
    fn ended_by_its_shim_after_a_wipe(&self, from: Pid, cell: &(String, u64)) -> bool {
        self.wiped.shims.get(&from).is_some_and(|dir| {
            let interpreter_of = dir
                .strip_suffix("/py")
                .is_some_and(|kernel_dir| kernel_name(kernel_dir) == cell.0);
            interpreter_of || self.shim_cell.get(&from) == Some(cell)
        })
    }

    /// `from` is the daemon of the kernel of `cell` and the cell has a
    /// tombstone: its signals are that cell's own cancel — asked for by
    /// the client (a cancel may also reach a cell that already resolved,
    /// whose leftovers it still owns) or laid by a fresh daemon for a cell
    /// whose shim outlived the daemon that ran it (the kernel's state is
    /// gone, the client was told). Only the cancelled cell counts: a
    /// signal to any other cell, of this kernel or another, is collateral.
    fn cancelled_by_its_kernel(&self, from: Pid, cell: &(String, u64)) -> bool {
        self.daemons.get(&from).is_some_and(|d| {
            kernel_name(&d.kernel_dir) == cell.0
                && self.os.exists(
                    &KernelLayout::new(&d.kernel_dir)
                        .cell(CellSeq(cell.1))
                        .cancel(),
                )
        })
    }

    /// `from` is a daemon of the kernel of `cell`, whose shim a fault
    /// killed: a daemon ends such a cell as a cancel ends it (its result
    /// settled, TERM, KILL after the grace period; see
    /// `tether_core::agent::daemon`) without laying a tombstone, since
    /// nobody asked for a cancel. That cell is no bystander of its own end.
    fn ended_for_its_killed_shim(&self, from: Pid, cell: &(String, u64)) -> bool {
        self.shim_killed_cells.contains(cell)
            && self
                .daemons
                .get(&from)
                .is_some_and(|d| kernel_name(&d.kernel_dir) == cell.0)
    }

    /// `from` is a daemon of the kernel of `cell` that started after the
    /// cell did: a daemon that took over from a dead one, whose state is
    /// lost, ends what its predecessors left (their interpreter, their
    /// cells' leftovers), as a kernel restart does. The client was told
    /// the state was lost; the cell is no bystander of that.
    fn swept_by_a_successor(&self, from: Pid, cell: &(String, u64)) -> bool {
        let Some(d) = self.daemons.get(&from) else {
            return false;
        };
        kernel_name(&d.kernel_dir) == cell.0
            && self
                .cell_spawns
                .get(cell)
                .and_then(|at| at.first())
                .is_some_and(|&first| first < d.started_ms)
    }

    /// `from` is an agent process that ran a probe or a submit of the
    /// kernel of `cell` while no daemon of that kernel runs: the op that
    /// proves a daemon gone ends what its cells still run, the client
    /// being told the state is lost. With a daemon of the kernel alive the
    /// cells are that daemon's to decide about, and an op of another
    /// kernel has no business with them.
    fn ended_as_its_daemons_orphan(&self, from: Pid, cell: &(String, u64)) -> bool {
        self.roles.get(&from).is_some_and(|r| r.starts_with("exec"))
            && self.provers.get(&from).is_some_and(|k| k.contains(&cell.0))
            && !self
                .daemons
                .values()
                .any(|d| kernel_name(&d.kernel_dir) == cell.0)
    }

    /// Agent process `pid` runs an op of kind `op` about `kernel` (a new
    /// exec starts afresh: its pid may be an earlier one's).
    pub(crate) fn note_op(
        &mut self,
        pid: Pid,
        op: Option<OpKind>,
        kernel: Option<String>,
        fresh: bool,
    ) {
        if fresh {
            self.provers.remove(&pid);
        }
        if let (Some(OpKind::Probe | OpKind::Submit), Some(k)) = (op, kernel) {
            self.provers.entry(pid).or_default().insert(k);
        }
    }

    /// A shutdown of `kernel` was seen.
    /// Every shim cell `seq` of `kernel` had saw its cell to the end (a
    /// note that one was killed would be false). A cell number used again
    /// (a replaced sandbox, a kernel opened again) counts each of its
    /// shims: a note may speak of any (drawn_clients seeds 200733,
    /// 400684).
    pub fn every_shim_finished(&self, kernel: &str, seq: u64) -> bool {
        self.shim_runs
            .get(&(kernel.to_owned(), seq))
            .is_some_and(|runs| runs.iter().all(|&(_, finished)| finished))
    }

    fn is_shut(&self, kernel: &str) -> bool {
        self.shut_kernels.contains(kernel)
    }

    /// The kernel `pid` (a daemon, an interpreter, a cell process) belongs
    /// to was shut down; a pid of no known kernel counts as shut once any
    /// kernel was (the judgement errs towards no false alarm).
    fn pid_shut(&self, pid: Pid) -> bool {
        let kernel = self
            .daemons
            .get(&pid)
            .map(|d| kernel_name(&d.kernel_dir))
            .or_else(|| self.kernel_of_pid.get(&pid).cloned());
        match kernel {
            Some(k) => self.is_shut(&k),
            None => !self.shut_kernels.is_empty(),
        }
    }

    /// The switchboard, for the cancels the sandbox asks of the client.
    pub fn set_control(&mut self, control: Control) {
        self.control = Some(control);
    }

    /// The fault `Cancel { point: AsResultIsJournaled }`: once armed, the
    /// next result appended to a journal asks the client to cancel, so
    /// that the cancel crosses the result on its way to the client.
    fn cancel_at_result(&mut self, now_ms: u64) {
        let results = self.os.results_journaled();
        if results == self.results_seen {
            return;
        }
        self.results_seen = results;
        let Some(control) = self.control.clone() else {
            return;
        };
        let mut a = control.lock();
        if std::mem::take(&mut a.cancel_at_result) {
            a.cancel_now = true;
            self.trace.at(
                now_ms,
                "fault",
                "a result was journaled; the client cancels now".to_owned(),
            );
        }
    }

    /// The fault `Cancel { point: BeforeCellStarts }` (armed on the
    /// switchboard, so that the script's end disarms it): the next cell's
    /// shim is held before it looks at the cell; the client is asked to
    /// cancel once it is, and the shim goes on once the cancel op ran.
    fn cancel_for_held_shim(&mut self, now_ms: u64) {
        let Some(control) = self.control.clone() else {
            return;
        };
        let mut a = control.lock();
        self.os.arm_hold(a.cancel_before_start);
        let Some(pid) = self.os.held_shim() else {
            self.hold_asked = false;
            return;
        };
        if !self.hold_asked {
            self.hold_asked = true;
            a.cancel_before_start = false;
            self.os.arm_hold(false);
            a.cancel_op_ran = false;
            a.cancel_now = true;
            a.cancel_is_early = true;
            self.trace.at(
                now_ms,
                "fault",
                format!("shim {pid} held before it looks at its cell; the client cancels now"),
            );
        } else if a.cancel_op_ran {
            drop(a);
            self.os.release_held_shim();
            self.hold_asked = false;
            self.trace
                .at(now_ms, "fault", format!("shim {pid} released"));
        }
    }

    /// The cgroups of the cells of the daemon spawned under `nonce`
    /// (`tether-{nonce}-{seq}`, `procs::cgroup_name`).
    fn cgroups_of_nonce(&self, nonce: &str) -> Vec<String> {
        let prefix = format!("{}{nonce}-", tether_core::agent::procs::CGROUP_PREFIX);
        self.os
            .cgroups()
            .into_iter()
            .filter(|g| g.rsplit('/').next().is_some_and(|n| n.starts_with(&prefix)))
            .collect()
    }

    /// A daemon exits: if it chose to (idle, its kernel neither shut down,
    /// stopped nor removed), it must leave no empty cgroup of its own
    /// cells (those named `tether-{nonce}-…`): nothing may come after an
    /// idle exit to remove them (a shutdown may never come).
    /// A daemon begins an idle exit only with its announcement on disk
    /// (`exiting`, its nonce): a submit recorded after its last look at
    /// the submissions finds it and waits to see its cell taken or not
    /// (`op::handshake`); unannounced, that cell is stranded. Not judged
    /// once the kernel's config is gone (a shutdown removed the kernel,
    /// announcement and all, while the tick was preempted).
    fn judge_idle_announcement(&mut self, pid: Pid, kernel_dir: &str, nonce: &str, now_ms: u64) {
        let kernel = KernelLayout::new(kernel_dir);
        if !self.os.exists(&kernel.config()) {
            return;
        }
        let announced = self
            .os
            .read_file(&kernel.exiting())
            .is_ok_and(|n| n == nonce.as_bytes());
        if !announced {
            self.op_defects.push(format!(
                "daemon {pid} began an idle exit at {now_ms} ms without its announcement ({}): a cell submitted after its last look would be stranded",
                kernel.exiting()
            ));
        }
    }

    fn judge_idle_exit(&mut self, pid: Pid, kernel_dir: &str, nonce: &str, now_ms: u64) {
        let idle = self.self_exits.iter().any(|&(_, p)| p == pid);
        if !idle || self.wiped.daemons.contains(&pid) {
            return;
        }
        // An idle exit ends what the kernel owns (its sweep), as a stop
        // does: the cells' leftovers, shims, the interpreter; but for what
        // nothing names, as at a shutdown (the documented limit:
        // python_orphans seed 141, a `setsid env -i` daemon whose shim and
        // daemon were killed before either recorded it).
        let left: Vec<String> = self
            .owned_by_kernel(pid, kernel_dir)
            .into_iter()
            .filter(|(p, _, _)| *p != pid && !self.named_by_nothing(*p))
            .map(|(_, _, what)| what)
            .collect();
        if !left.is_empty() {
            self.term_survivors.push(format!(
                "kernel {}'s daemon {pid} exited idle at {now_ms} ms; still running: {}",
                kernel_name(kernel_dir),
                left.join(", ")
            ));
        }
        for g in self.cgroups_of_nonce(nonce) {
            if self.os.cgroup_members(&g).is_empty() {
                self.idle_exit_cgroups
                    .push(format!("{g} (at daemon {pid}'s idle exit, {now_ms} ms)"));
            }
        }
    }

    /// Cells of the kernel at `kernel_dir` that were submitted and whose
    /// journal is not done, each with whether a daemon took it.
    fn unfinished_cells(&self, kernel_dir: &str) -> Vec<(u64, bool)> {
        let layout = KernelLayout::new(kernel_dir);
        let mut seqs: Vec<u64> = self
            .os
            .list_dir(&layout.cells_dir())
            .unwrap_or_default()
            .iter()
            .filter_map(|name| name.parse().ok())
            .collect();
        seqs.sort_unstable();
        seqs.retain(|&seq| {
            let cell = layout.cell(CellSeq(seq));
            self.os.exists(&cell.submission())
                && !self.os.exists(&journal::done_flag(&cell.journal()))
        });
        seqs.into_iter()
            .map(|seq| {
                let cell = layout.cell(CellSeq(seq));
                (seq, tether_core::agent::op::taken(&self.os, &cell))
            })
            .collect()
    }

    /// Kills every kernel daemon (a fault); returns the pids killed.
    pub fn kill_daemons(&mut self) -> Vec<Pid> {
        let kernels = format!("{}/kernels", self.root);
        let dirs = self.os.list_dir(&kernels).unwrap_or_default();
        let mut killed = Vec::new();
        for d in dirs {
            let dir = format!("{kernels}/{d}");
            if let Some(pid) = self.os.kill_daemon(&dir) {
                self.note_fault_killed_daemon(pid, &dir, killed.is_empty());
                killed.push(pid);
            }
        }
        self.flush_events();
        killed
    }

    /// What the sandbox keeps of a kernel daemon a fault just killed (a
    /// KILL already delivered); `may_reuse`: its pid may be the next
    /// birth's (one at a time).
    fn note_fault_killed_daemon(&mut self, pid: Pid, dir: &str, may_reuse: bool) {
        let kernel = kernel_name(dir);
        self.note_daemon_killed(pid);
        self.note_lossy(Some(&kernel), format!("its daemon {pid} was killed"));
        if self.os.refuses_writes(&format!("{dir}/leftovers")) {
            self.daemon_killed_on_full_disk = true;
        }
        self.stop_interrupted(dir);
        self.fault_killed.insert(pid);
        if self.os.config().pid_max <= SMALL_PID_MAX && may_reuse {
            // Where pids are few, the next birth after its reaping
            // takes the dead daemon's pid: a record of it must be
            // told from the newcomer by its start time.
            self.os.reuse_pid_next(pid);
        }
    }

    /// Restarts the sandbox (a fault); returns the daemons that were alive.
    pub fn bounce(&mut self) -> Vec<Pid> {
        self.restart(SimOs::bounce)
    }

    /// Replaces the sandbox by a new machine (a fault: processes and files
    /// gone); returns the daemons that were alive.
    pub fn replace(&mut self) -> Vec<Pid> {
        self.restart(SimOs::replace)
    }

    fn restart(&mut self, how: fn(&mut SimOs)) -> Vec<Pid> {
        let alive: Vec<Pid> = self
            .daemons
            .keys()
            .copied()
            .filter(|&p| self.os.is_alive(p))
            .collect();
        how(&mut self.os);
        self.note_lossy(None, "the sandbox restarted".into());
        self.forget_stops();
        self.daemons.clear();
        self.roles.clear();
        self.cell_of.clear();
        self.kernel_of_pid.clear();
        self.flush_events();
        alive
    }

    /// What the processes of cell `seq` of kernel `kernel` wrote to
    /// stderr.
    /// Did a shell of cell `seq` of `kernel` run its TERM trap (leaving
    /// its scripted path)?
    pub fn ran_term_trap(&self, kernel: &str, seq: u64) -> bool {
        self.os
            .ran_term_trap(&format!("{}/kernels/{kernel}", self.root), seq)
    }

    pub fn stderr_of(&self, kernel: &str, seq: u64) -> Vec<u8> {
        self.os
            .stderr_written(&format!("{}/kernels/{kernel}", self.root), seq)
    }

    /// Ground truth of the tool calls: what every caller got, every
    /// answer file written (the handler's runs are the client script's).
    pub fn tool_obs(&self) -> tether_scenarios::oracle::ToolObs {
        use tether_core::agent::calls::CallEnd;
        use tether_scenarios::oracle::{ToolAnswerObs, ToolCallObs, ToolObs};
        ToolObs {
            calls: self
                .os
                .tool_calls()
                .iter()
                .map(|c| ToolCallObs {
                    id: c.id.clone(),
                    cell: c
                        .cell
                        .as_ref()
                        .map_or_else(String::new, |r| r.cell_dir.clone()),
                    key: c.cell.as_ref().and_then(|r| {
                        r.seq
                            .map(|seq| format!("{}#{seq}", kernel_name(&r.kernel_dir)))
                    }),
                    leftover: c.leftover,
                    past_limits: !tether_scenarios::workload::within_call_limits(&c.name, &c.args),
                    answered: match &c.end {
                        Some(CallEnd::Answered { stdout }) => Some(stdout.clone()),
                        _ => None,
                    },
                    failed: match &c.end {
                        Some(CallEnd::Failed { message, .. }) => Some(message.clone()),
                        _ => None,
                    },
                    started_ms: Some(self.virtual_ms(c.started)),
                    ended_ms: c.at.map(|t| self.virtual_ms(t)),
                    cell_ended_at_start: c.cell_ended_at_start,
                    cell_ended_ms: c.cell_ended_at.map(|t| self.virtual_ms(t)),
                    stalled: c.name == tether_scenarios::workload::STALLED_TOOL,
                    overran_ms: c.overran_at.map(|t| self.virtual_ms(t)),
                })
                .collect(),
            answers: self
                .os
                .answers()
                .iter()
                .map(|a| ToolAnswerObs {
                    id: a.id.clone(),
                    journaled: a.journaled,
                    after_result: a.after_result,
                })
                .collect(),
            runs: Vec::new(),
            reported_answered: Vec::new(),
            awaiting_at_end: 0,
        }
    }

    /// Ground truth of the Python cells taken by interpreters whose
    /// daemon had died.
    pub fn orphan_runs(&self) -> Vec<tether_scenarios::oracle::OrphanRunObs> {
        self.os
            .orphan_runs()
            .iter()
            .map(|r| tether_scenarios::oracle::OrphanRunObs {
                key: format!("{}#{}", kernel_name(&r.kernel_dir), r.seq),
                daemon_died_ms: self.virtual_ms(r.daemon_died),
                at_ms: self.virtual_ms(r.at),
            })
            .collect()
    }

    /// The lines the tool calls of cell `seq` of `kernel` would have
    /// printed had they been answered, for each of its calls that failed
    /// (a deadline that a clock jump ran out, a cell that ended first):
    /// what its stdout lacks.
    pub fn failed_call_lines(&self, kernel: &str, seq: u64) -> Vec<String> {
        let dir = format!("{}/kernels/{kernel}", self.root);
        self.os
            .tool_calls()
            .iter()
            .filter(|c| !c.leftover)
            .filter(|c| {
                c.cell
                    .as_ref()
                    .is_some_and(|r| r.kernel_dir == dir && r.seq == Some(seq))
            })
            .filter(|c| {
                matches!(
                    c.end,
                    Some(tether_core::agent::calls::CallEnd::Failed { .. })
                )
            })
            .map(|c| {
                format!(
                    "{}\n",
                    tether_scenarios::workload::tool_result(&c.name, &c.args)
                )
            })
            .collect()
    }

    /// Ground truth for the cell `label`.
    pub fn truth(&self, label: &str) -> Truth {
        Truth {
            executions: u32::try_from(self.os.side_effect_count(label)).unwrap_or(u32::MAX),
        }
    }

    /// Records which cell processes are alive now (end of the script).
    pub fn take_snapshot(&mut self) {
        self.check_journals(None);
        let mut by_cell: BTreeMap<(String, u64), Vec<Pid>> = BTreeMap::new();
        let no_cgroups = self.os.config().cgroup_root.is_none();
        for (pid, cell) in self.os.cell_processes() {
            let untraceable = self
                .os
                .view(pid)
                .is_some_and(|v| !v.env.contains_key(tether_core::agent::procs::MARKER_NAME));
            if no_cgroups && untraceable {
                self.untraceable.insert(pid);
            }
            if self.untraceable.contains(&pid) {
                self.snapshot_untraceable.insert(pid);
            }
            if let Some(seq) = cell.seq {
                by_cell
                    .entry((kernel_name(&cell.kernel_dir), seq))
                    .or_default()
                    .push(pid);
            }
        }
        self.snapshot = Some(by_cell);
    }

    /// When the cell (kernel name, seq) ended on the sandbox: its
    /// journal was first appended its result (virtual ms).
    pub fn finished_at(&self, kernel: &str, seq: u64) -> Option<u64> {
        let layout = KernelLayout::new(&format!("{}/kernels/{kernel}", self.root));
        let journal = layout.cell(CellSeq(seq)).journal();
        self.os
            .result_journaled_at(&journal)
            .map(|t| self.virtual_ms(t))
    }

    /// The documented limit (client/README.md, "Known limit of
    /// shutdown"): no file left names `pid` as its kernel's. It carries
    /// nothing naming its kernel (no marker, no cgroup) and no record
    /// names it: its shim and its daemon died before either recorded it,
    /// or a daemon was killed while the disk refused its records. Or its
    /// kernel's directory was removed while no daemon of it ran, and with
    /// it what named `pid` (a later kernel in that directory cannot know
    /// it: python_orphans seed 100227, a fresh daemon's idle exit held to
    /// the wiped kernel's orphan). Every judge of what a stop, an idle
    /// exit, a shutdown or a cancel must end asks this one question.
    pub(crate) fn named_by_nothing(&self, pid: Pid) -> bool {
        self.wiped.unnamed.contains(&pid)
            || (self.untraceable.contains(&pid)
                && (self.daemon_killed_on_full_disk || self.unrecordable.contains(&pid)))
    }

    /// Processes (other than pid 1 and exec calls still draining),
    /// kernel files and cgroups left now.
    pub fn leaks(&self) -> (Vec<String>, Vec<String>, Vec<String>) {
        let procs = self
            .os
            .alive_pids()
            .into_iter()
            .filter_map(|pid| self.os.view(pid))
            .filter(|v| !matches!(v.role, Role::Init | Role::Exec))
            // The documented limit (client/README.md, "Known limit of
            // shutdown"): a process that carries nothing naming its kernel
            // (no marker, no cgroup) is found after its shim's and its
            // daemon's deaths only by a record one of them wrote; a daemon
            // killed while the disk refused it (python_orphans seed 226), or
            // right after the shim (seeds 1079, 1909), left none.
            .filter(|v| !self.named_by_nothing(v.pid))
            .map(|v| format!("{} {}", v.pid, v.argv.join(" ")))
            .collect();
        let files = self.os.files_under(&format!("{}/kernels", self.root));
        let cgroups = self
            .os
            .cgroups()
            .into_iter()
            .filter(|g| !self.wiped.unnamed_cgroups.contains(g))
            .collect();
        (procs, files, cgroups)
    }

    /// Cells that ran more than once, or that no scripted cell accounts
    /// for, with how many times they ran.
    pub fn extra_executions(&self, scenario: &Scenario) -> BTreeMap<String, u32> {
        let scripted: BTreeSet<String> = scenario.cells().map(|c| c.label.clone()).collect();
        let liveness = ["liveness", "liveness2"];
        let dir = self.os.config().side_effect_dir.clone();
        let mut out = BTreeMap::new();
        for f in self.os.files_under(&dir) {
            let name = f.rsplit('/').next().unwrap_or_default().to_owned();
            let n = u32::try_from(self.os.side_effect_count(&name)).unwrap_or(u32::MAX);
            let unknown = !scripted.contains(&name) && !liveness.contains(&name.as_str());
            if unknown || (liveness.contains(&name.as_str()) && n > 1) {
                out.insert(name, n);
            }
        }
        out
    }

    /// What may have cost each shell kernel its state (for the judgment
    /// of the agent's "not kept" notes); `kernel_deaths` are the daemon
    /// deaths the world saw (virtual ms, pid).
    pub fn state_loss(&self, kernel_deaths: &[(u64, Pid)]) -> crate::oracle::StateLossObs {
        let mut causes: BTreeMap<String, Vec<String>> = self
            .state_loss_causes
            .iter()
            .map(|((k, seq), c)| (format!("{k}#{seq}"), c.clone()))
            .collect();
        for (dir, saved) in self.os.shell_saves() {
            // `…/kernels/K/cells/N`
            let mut parts = dir.rsplit('/');
            let seq = parts.next().unwrap_or_default();
            let kernel = parts.nth(1).unwrap_or_default();
            if !saved {
                causes
                    .entry(format!("{kernel}#{seq}"))
                    .or_default()
                    .push(tether_scenarios::oracle::loss_notes::ENDED_WITHOUT_SAVE.into());
            }
        }
        // The daemon of that pid that started last before the death (a
        // bounce restarts pids: shell_state seed 101037, a daemon killed
        // by a bounce whose pid the next daemon took had no kernel here,
        // and a state note was wanted across the death).
        let daemon_deaths = kernel_deaths
            .iter()
            .filter_map(|(at, pid)| {
                let (_, _, kernel) = self
                    .daemon_starts
                    .iter()
                    .rev()
                    .find(|(started, p, _)| p == pid && started <= at)?;
                Some((*at, kernel.clone()))
            })
            .collect();
        crate::oracle::StateLossObs {
            judged: true,
            causes,
            daemon_deaths,
            unscripted: Vec::new(),
        }
    }

    /// Bystanders that a signal from the agent hit.
    pub fn collateral(&self) -> Vec<String> {
        self.collateral.clone()
    }
}

/// The kernel's name: the last component of its directory.
/// The cell (kernel name, seq) of a cell shim's argv (`shim --launch
/// JSON`); `None` for an interpreter shim's.
fn shim_cell(argv: &[String]) -> Option<(String, u64)> {
    let launch: serde_json::Value = serde_json::from_str(argv.last()?).ok()?;
    let dir = launch.get("cell_dir")?.as_str()?;
    let (kernel_dir, seq) = dir.trim_end_matches('/').rsplit_once("/cells/")?;
    Some((kernel_name(kernel_dir), seq.parse().ok()?))
}

fn kernel_name(kernel_dir: &str) -> String {
    kernel_dir
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// What is wrong with a journal's entry numbers, if anything: they must
/// run 1, 2, 3, … with no gap and no repeat.
pub fn journal_gap(read: &JournalRead) -> Option<String> {
    if let Some((line, why)) = read.bad_lines.first() {
        return Some(format!("line {line} is not an entry ({why})"));
    }
    let ns: Vec<u64> = read.entries.iter().map(|e| e.n).collect();
    let contiguous = ns.iter().enumerate().all(|(i, &n)| n == i as u64 + 1);
    (!contiguous).then(|| format!("entry numbers {ns:?}"))
}

/// A journal begins with the acceptance of its submission's request (what
/// a client resuming the cell checks it by), or, cancelled before it was
/// submitted, with its result: `None` when it does, or is still empty.
/// (The eleventh mutants sample's `JournalWriter::is_empty` -> `false`
/// wrote no acceptance.)
fn unaccepted(read: &JournalRead, request: &RequestId) -> Option<String> {
    match &read.entries.first()?.kind {
        EntryKind::Accepted { request_id } if request_id == request => None,
        EntryKind::Result { .. } => None,
        other => Some(format!(
            "it begins with {other:?}, not the acceptance of request {request}"
        )),
    }
}

/// The install op: `/bin/sh -c <script> tether-install ROOT HASH SIZE ID PATH`,
/// step by step as the script goes (make the directories, write the agent,
/// check its size, put it in place, run it once), answered with the
/// core's typed refusal where a step fails.
fn install(sb: &mut Sandbox, argv: &[String], stdin: &[u8]) -> WireResponse {
    let (Some(root), Some(size), Some(id), Some(path)) =
        (argv.get(4), argv.get(6), argv.get(7), argv.get(8))
    else {
        return WireResponse {
            stderr: Bytes(b"install: missing arguments".to_vec()),
            exit_code: 2,
            ..WireResponse::default()
        };
    };
    let id: u64 = id.parse().unwrap_or_default();
    let pid = sb.os.begin_exec(argv);
    let got = stdin.len() as u64;
    let os = &mut sb.os;
    let refusal = if os.create_dir_all(&format!("{root}/bin")).is_err()
        || os.create_dir_all(&format!("{root}/kernels")).is_err()
    {
        Some(InstallRefusal::NoDirs)
    } else if os.write_atomic(path, stdin).is_err() {
        Some(InstallRefusal::NoWrite)
    } else if size.parse::<u64>().ok() != Some(got) {
        let _ = os.remove_all(path);
        Some(InstallRefusal::Truncated {
            got,
            want: size.parse().unwrap_or_default(),
        })
    } else if !os.can_exec(path) {
        // The file stays, as `mv` left it.
        Some(InstallRefusal::Noexec)
    } else {
        None
    };
    let reply = match &refusal {
        Some(r) => r.reply_line(id),
        None => installed_line(id, path),
    };
    if let Ok(pid) = pid {
        sb.os.end_exec(pid, 0);
    }
    sb.flush_events();
    WireResponse {
        stdout: Bytes(reply),
        ..WireResponse::default()
    }
}

/// Ends an exec's process if its task is dropped (connection torn down)
/// — unless the sandbox rebooted since, when the pid may be someone else's.
struct ExecGuard {
    sb: Rc<RefCell<Sandbox>>,
    pid: Pid,
    boot: String,
    done: bool,
}

impl Drop for ExecGuard {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        if let Ok(mut sb) = self.sb.try_borrow_mut() {
            if std::thread::panicking() {
                sb.op_defects
                    .push(format!("the op of agent process {} panicked", self.pid));
            }
            if sb.os.current_boot_id() == self.boot && sb.os.is_alive(self.pid) {
                sb.os.end_exec(self.pid, 129);
            }
        }
    }
}

async fn handle(
    sb: Rc<RefCell<Sandbox>>,
    trace: Trace,
    control: Control,
    req: WireRequest,
) -> Option<WireResponse> {
    let latency = {
        let a = control.lock();
        (now_ms() < a.latency_until_ms).then_some(a.latency_ms)
    };
    if let Some(ms) = latency {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    // A frozen sandbox starts nothing: the call waits for the thaw (or
    // for the client's deadline).
    wait_while_frozen(&sb).await;
    let argv = req.argv;
    let stdin = req.stdin.0;
    let op = req.op;
    if argv.first().map(String::as_str) == Some("/bin/sh")
        && argv.get(3).map(String::as_str) == Some("tether-install")
    {
        trace.log("sandbox", "exec install");
        let mut s = sb.borrow_mut();
        let t = s.os_time(now_ms());
        s.os.set_now(t);
        return Some(install(&mut s, &argv, &stdin));
    }
    if plain::plain_code(&argv).is_some() {
        return plain::plain(sb, trace, control, argv).await;
    }
    if argv.get(1).map(String::as_str) != Some("op") {
        return Some(WireResponse {
            stderr: Bytes(format!("sh: {}: not found", argv.join(" ")).into_bytes()),
            exit_code: 127,
            ..WireResponse::default()
        });
    }
    // An op command the client did not tag is no op any fault aims at.
    let kind = op.map(|k| k.to_string()).unwrap_or_default();
    if let Some(op) = op {
        control
            .before_op(op, |what| trace.log("sandbox", what))
            .await;
    }
    if op == Some(OpKind::Logs) {
        // The op reads the log at its first step, at this instant.
        let kernel = serde_json::from_slice::<Envelope>(&stdin)
            .ok()
            .and_then(|e| e.op.kernel().map(|k| k.as_str().to_owned()))
            .unwrap_or_default();
        let mut s = sb.borrow_mut();
        s.advance(now_ms());
        s.note_logs_read(&kernel);
    }
    let op_kernel = serde_json::from_slice::<Envelope>(&stdin)
        .ok()
        .and_then(|e| e.op.kernel().map(|k| k.as_str().to_owned()));
    let root = root_arg(&argv);
    let (pid, boot) = {
        let mut s = sb.borrow_mut();
        s.advance(now_ms());
        if op == Some(OpKind::Shutdown) {
            s.shutdown_seen(op_kernel.clone().unwrap_or_default());
        }
        if !s.os.exists(&argv[0]) {
            trace.log("sandbox", format!("exec {kind}: agent not installed"));
            return Some(WireResponse {
                stderr: Bytes(format!("sh: {}: not found", argv[0]).into_bytes()),
                exit_code: 127,
                ..WireResponse::default()
            });
        }
        if !s.os.can_exec(&argv[0]) {
            trace.log(
                "sandbox",
                format!("exec {kind}: agent not executable (noexec)"),
            );
            return Some(WireResponse {
                stderr: Bytes(format!("sh: {}: Permission denied", argv[0]).into_bytes()),
                exit_code: 126,
                ..WireResponse::default()
            });
        }
        let pid = match s.os.begin_exec(&argv) {
            Ok(pid) => pid,
            Err(e) => {
                return Some(WireResponse {
                    stderr: Bytes(format!("fork: {e}").into_bytes()),
                    exit_code: 126,
                    ..WireResponse::default()
                })
            }
        };
        s.flush_events();
        s.note_op(pid, op, op_kernel, true);
        (pid, s.os.current_boot_id().to_owned())
    };
    trace.log("sandbox", format!("exec {kind} as pid {pid}"));
    let mut guard = ExecGuard {
        sb: sb.clone(),
        pid,
        boot,
        done: false,
    };
    let mut run = OpRun::new(&root, &stdin);
    let kill = op.is_some_and(|op| control.take_kill_op(op));
    let line = loop {
        wait_while_frozen(&sb).await;
        let began = {
            let mut s = sb.borrow_mut();
            s.advance(now_ms());
            s.os.now_ts()
        };
        let Some((polled, line)) = op_step(&sb, &trace, &kind, pid, &guard.boot, run).await else {
            // Its process died while its step was paused.
            guard.done = true;
            trace.log(
                "sandbox",
                format!("{kind} (pid {pid}) died while its step was paused"),
            );
            return Some(WireResponse {
                stderr: Bytes(b"Killed".to_vec()),
                exit_code: 137,
                ..WireResponse::default()
            });
        };
        run = polled;
        let wake = run.next_wake();
        if line.is_none() {
            if let Some(w) = wake.filter(|&w| w < began) {
                // A wake-up before the step that asked for it is a busy
                // loop on a real machine (its driver sleeps until then).
                sb.borrow_mut().op_defects.push(format!(
                    "the op {kind} (pid {pid}) asked to be woken at {w:?}, before its step began ({began:?}): a busy loop"
                ));
            }
        }
        if kill {
            // After its first step, whatever that recorded.
            let mut s = sb.borrow_mut();
            if s.os.current_boot_id() == guard.boot && s.os.is_alive(pid) {
                s.os.kill_from_outside(pid);
            }
            s.flush_events();
            guard.done = true;
            trace.log(
                "sandbox",
                format!("{kind} (pid {pid}) KILLED from outside after its first step (fault)"),
            );
            return Some(WireResponse {
                stderr: Bytes(b"Killed".to_vec()),
                exit_code: 137,
                ..WireResponse::default()
            });
        }
        if let Some(line) = line {
            break line;
        }
        let now = now_ms();
        let until = wake.map_or(now + 1, |w| w.0.max(now + 1)).min(now + 5);
        tokio::time::sleep(Duration::from_millis(until - now)).await;
    };
    {
        let mut s = sb.borrow_mut();
        s.os.end_exec(pid, 0);
        s.flush_events();
        guard.done = true;
    }
    if op.is_some_and(|op| control.after_op(op)) {
        trace.log("sandbox", format!("{kind} ran; its reply is LOST (fault)"));
        return None;
    }
    trace.log("sandbox", format!("reply {kind}: {}", excerpt(&line, 160)));
    let mut line = line;
    if let Some((at, flip)) = op.and_then(|op| control.take_damage_reply(op)) {
        tether_scenarios::faults::damage(&mut line, at, flip);
        trace.log(
            "sandbox",
            format!(
                "{kind}'s reply DAMAGED on the way (fault): {}",
                excerpt(&line, 160)
            ),
        );
    }
    Some(WireResponse {
        stdout: Bytes(line),
        ..WireResponse::default()
    })
}

/// One poll of the op command `pid` at this instant, after the sandbox
/// caught up to it; preempted at one of its OS calls if the seed's world
/// draws it ([`crate::os::preempt`]): the poll then waits in virtual time
/// while the rest of the sandbox runs, and goes on. `None`: its process
/// died meanwhile (the sandbox rebooted, a fault killed it), so the rest
/// never ran.
async fn op_step(
    sb: &Rc<RefCell<Sandbox>>,
    trace: &Trace,
    kind: &str,
    pid: Pid,
    boot: &str,
    mut run: OpRun,
) -> Option<(OpRun, Option<Vec<u8>>)> {
    let draw = |p: &mut preempt::Preempter| p.draw(now_ms());
    preemptible_step(sb, trace, kind, pid, boot, draw, move |os| {
        let line = run.poll(os);
        (run, line)
    })
    .await
}

/// Runs `step` as process `pid` (an op command, the channel), preempted
/// where `draw` says ([`crate::os::preempt`]): paused (the rest of the
/// sandbox runs meanwhile, in virtual time) or killed there. `None`: the
/// process died before the step's end (a fault killed it, the sandbox
/// rebooted while it was paused).
pub(crate) async fn preemptible_step<R: Send + 'static>(
    sb: &Rc<RefCell<Sandbox>>,
    trace: &Trace,
    kind: &str,
    pid: Pid,
    boot: &str,
    draw: impl FnOnce(&mut preempt::Preempter) -> Option<preempt::Preemption>,
    step: impl FnOnce(&mut dyn Os) -> R + Send + 'static,
) -> Option<R> {
    let paused = {
        let mut s = sb.borrow_mut();
        s.advance(now_ms());
        let Some(at) = draw(&mut s.preempter) else {
            match s.step_meeting_kill(pid, now_ms(), step) {
                Ok(done) => {
                    s.advance(now_ms());
                    return Some(done);
                }
                Err(name) => {
                    // Nothing of the step after the write landed.
                    s.flush_events();
                    trace.log(
                        "sandbox",
                        format!("{kind} (pid {pid}) KILLED after its write of {name} (fault)"),
                    );
                    return None;
                }
            }
        };
        match preempt::run(&mut s.os, pid, at.clone(), step) {
            preempt::Outcome::Done(done) => {
                s.advance(now_ms());
                return Some(done);
            }
            preempt::Outcome::Paused(paused) => {
                s.preempter.paused(&at);
                trace.log(
                    "sandbox",
                    format!(
                        "{kind} (pid {pid}) PREEMPTED {} for {} ms",
                        at.describe(),
                        at.pause.as_millis()
                    ),
                );
                (paused, at.pause)
            }
        }
    };
    let (paused, pause) = paused;
    tokio::time::sleep(pause).await;
    // A frozen sandbox runs no process, this one included.
    wait_while_frozen(sb).await;
    let mut s = sb.borrow_mut();
    s.advance(now_ms());
    if s.os.current_boot_id() != boot || !s.os.is_alive(pid) {
        return None;
    }
    trace.log("sandbox", format!("{kind} (pid {pid}) goes on"));
    let done = paused.resume(&mut s.os, pid);
    s.advance(now_ms());
    Some(done)
}

/// Waits (in virtual time) until the sandbox is not frozen.
async fn wait_while_frozen(sb: &Rc<RefCell<Sandbox>>) {
    while sb.borrow().is_frozen() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The sandbox host's program: the exec server.
pub async fn sandbox_main(
    sb: Rc<RefCell<Sandbox>>,
    trace: Trace,
    control: Control,
) -> turmoil::Result {
    tokio::task::spawn_local(channel::listen(sb.clone(), trace.clone(), control.clone()));
    let handler = Rc::new(move |req: WireRequest| -> HandlerFuture {
        Box::pin(handle(sb.clone(), trace.clone(), control.clone(), req))
    });
    serve(EXEC_PORT, handler).await?;
    Ok(())
}

/// The agent's `--root` argument (empty when absent).
pub(crate) fn root_arg(argv: &[String]) -> String {
    argv.iter()
        .position(|a| a == "--root")
        .and_then(|i| argv.get(i + 1))
        .cloned()
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::{journal_gap, unaccepted, ExecGuard, RequestId, Sandbox};
    use crate::swarm::World;
    use crate::trace::Trace;
    use std::cell::RefCell;
    use std::rc::Rc;
    use tether_core::agent::Os;
    use tether_core::protocol::parse_journal as parse;
    use tether_core::protocol::Lang;

    #[test]
    fn a_daemon_due_between_two_steps_ticks_at_its_own_millisecond() {
        let scenario = crate::scenario::by_name("happy").unwrap();
        let world = World::classic(&scenario);
        let mut sb = Sandbox::new(1, Trace::new(), "/agent", "tether-agent", &world);
        // A kernel daemon started by an exec at 0 ms, as `spawn` starts it.
        let kdir = "/agent/kernels/k";
        let exec = sb
            .os
            .begin_exec(&["tether-agent".into(), "op".into()])
            .unwrap();
        sb.os.create_dir_all(&format!("{kdir}/cells")).unwrap();
        let config = tether_core::agent::kernel::KernelConfig {
            lang: Lang::Shell,
            nonce: "n".into(),
            idle_timeout_ms: 600_000,
            grace_ms: 300,
        };
        sb.os
            .write_atomic(
                &format!("{kdir}/config.json"),
                &serde_json::to_vec(&config).unwrap(),
            )
            .unwrap();
        sb.os.spawn_daemon(kdir, "n").unwrap();
        sb.os.end_exec(exec, 0);
        sb.advance(0);
        let tick = u64::try_from(tether_core::agent::daemon::TICK.as_millis()).unwrap();
        assert_eq!(sb.next_wake(), Some(tick));
        // The next step begins at 2.5 ticks: the daemon ticked at its two
        // due instants, not once late at the step.
        sb.advance_through(tick * 5 / 2);
        assert_eq!(sb.next_wake(), Some(3 * tick));
    }

    #[test]
    fn an_agent_process_whose_op_panics_is_recorded_and_a_dropped_one_is_not() {
        let world = crate::scenario::by_name("happy").unwrap().world(1);
        let sb = Rc::new(RefCell::new(Sandbox::new(
            1,
            Trace::new(),
            "/root",
            "/agent",
            &world,
        )));
        let guard = |sb: &Rc<RefCell<Sandbox>>| ExecGuard {
            sb: sb.clone(),
            pid: 4242,
            boot: String::new(),
            done: false,
        };
        // A connection torn down (the client went, a fault) is no panic.
        drop(guard(&sb));
        assert!(sb.borrow().op_defects.is_empty());
        let in_task = guard(&sb);
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            let _guard = in_task;
            panic!("a bug in the op");
        }));
        assert!(unwound.is_err());
        assert_eq!(
            sb.borrow().op_defects,
            vec!["the op of agent process 4242 panicked".to_owned()]
        );
    }

    #[test]
    fn a_journal_must_number_its_entries_from_one_without_gaps() {
        let line = |n: u64| format!("{{\"n\":{n},\"kind\":\"done\"}}\n");
        let ok = format!("{}{}{}", line(1), line(2), line(3));
        assert_eq!(journal_gap(&parse(ok.as_bytes())), None);
        // A write in progress is not a gap.
        assert_eq!(
            journal_gap(&parse(format!("{ok}{{\"n\":4").as_bytes())),
            None
        );
        let gap = format!("{}{}", line(1), line(3));
        assert!(journal_gap(&parse(gap.as_bytes()))
            .unwrap()
            .contains("[1, 3]"));
        let repeat = format!("{}{}{}", line(1), line(2), line(2));
        assert!(journal_gap(&parse(repeat.as_bytes())).is_some());
        assert!(journal_gap(&parse(format!("{}oops\n", line(1)).as_bytes())).is_some());
    }

    #[test]
    fn a_journal_begins_with_its_requests_acceptance_or_its_result() {
        let r = RequestId("r1".into());
        let accepted =
            |id: &str| format!("{{\"n\":1,\"kind\":\"accepted\",\"request_id\":\"{id}\"}}\n");
        assert_eq!(unaccepted(&parse(b""), &r), None, "empty: not begun");
        assert_eq!(unaccepted(&parse(accepted("r1").as_bytes()), &r), None);
        let cancelled = "{\"n\":1,\"kind\":\"result\",\"outcome\":{\"kind\":\"cancelled\"}}\n";
        assert_eq!(
            unaccepted(&parse(cancelled.as_bytes()), &r),
            None,
            "cancelled before submit"
        );
        assert!(
            unaccepted(&parse(accepted("r2").as_bytes()), &r).is_some(),
            "another request's"
        );
        let output = "{\"n\":1,\"kind\":\"done\"}\n";
        assert!(
            unaccepted(&parse(output.as_bytes()), &r).is_some(),
            "no acceptance"
        );
    }
}
