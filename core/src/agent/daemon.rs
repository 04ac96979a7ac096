//! The kernel daemon's decisions (`tether-agent serve`), one [`Daemon::tick`]
//! at a time: start submitted cells in sequence order (never one with a
//! tombstone), enforce timeouts, escalate cancels, finalize cells whose
//! shim died, and exit after an idle period, killing what it owns first.
//!
//! Cancel escalation, per cell: TERM to every process of the cell, then
//! after the grace period STOP + KILL every process of the cell again on
//! every tick until none is left. Never gated on the main process: a
//! descendant that traps TERM after its leader exited still dies.
//! A cancelled cell resolves when its escalation is over: a shim that
//! finds processes of the cancelled cell still running settles the
//! result without `done` ([`JournalWriter::settle`]), and the daemon
//! writes `done` once none is left, or after [`KILL_BOUND`] of KILL
//! rounds, naming those that outlived it (`unkillable`).
//!
//! A shim killed from outside before its cell ended (an OOM killer, a
//! `kill -9`): the daemon settles the cell's result (its cancel's reason,
//! else [`SHIM_DIED`]) and ends the cell as a cancel does — TERM to what
//! its session, marker and cgroup hold and to the orphans the shim's
//! subreaper tree left to this daemon (the only trace of a `setsid env -i`
//! daemon where there is no cgroup), KILL after the grace period — and
//! writes `done` once none is left. Resolved while they ran on, they would
//! fork and write for nobody, beside the kernel's next cell; the shell
//! state such a cell reached is not kept (nobody saw it to its end).
//!
//! A done cell stays tracked after its shim is gone while its own cgroup
//! (see [`super::procs::read_cgroup`]) still has members: a leftover that
//! left the shim's tree, its session and its marker is still the cell's,
//! for a later cancel and for the idle exit. The cgroup is removed when
//! the cell is dropped.
//!
//! A cancel never touches another cell's processes: besides the
//! interpreter (SIGINT, and KILL only once the grace period has passed)
//! and processes carrying another tracked cell's marker, whatever carries
//! any other marker of the kernel or is a member of another tracked cell's
//! cgroup is spared ([`super::procs::OtherCells`]). A Python cell's
//! processes are the interpreter's descendants minus those subtrees: every
//! earlier cell's leftovers descend from the same interpreter.
//!
//! Stop (SIGTERM to the daemon, as `docker stop` or a host shutdown sends
//! it; the driver calls [`Daemon::terminate`]): every unfinished cell gets
//! a `stopped` tombstone, every process the kernel owns (shims, the
//! interpreter, cells, leftovers) gets TERM, and after the grace period
//! the exit sweep STOPs and KILLs what is left; the journals of the cells
//! that did not finish are closed with the stop as their error, so a
//! client reads why, and finds the daemon gone (the state loss) at its
//! next look. Nothing of the kernel is left behind, orphaned.
//!
//! The driver calls `tick` at `next_wake` at the latest (earlier is fine)
//! and reaps its children (the shims) between ticks.

use super::journal::{self, read_journal, JournalWriter, DEFAULT_CAP};
use super::kernel::{self, read_json, to_json, KernelConfig, LaunchRecord, DEFAULT_GRACE_MS};
use super::layout::KernelLayout;
use super::op::{cell_seqs, kernel_processes, leftovers_dir, remove_cgroups};
use super::orphans;
use super::os::{still_runs, CellLaunch, Os, OsError, Pid, Signal};
use super::procs::{self, marker_value, CellScope, Table, MARKER_NAME};
use super::python;
use super::shell;
use super::tombstone::{self, CancelReason};
use crate::ids::CellSeq;
use crate::protocol::{CellOutcome, EntryKind, Lang, Stream, Submission};
use crate::time::Timestamp;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// How often the daemon looks for new submissions and tombstones.
pub const TICK: Duration = Duration::from_millis(10);

/// How often a done cell that still has processes is looked at again to
/// see whether they are gone (a scan of the whole process table).
const LINGER_RECHECK: Duration = Duration::from_secs(1);
/// How long KILL rounds go on past the grace period before a settled
/// cancel resolves without the processes that outlived them.
pub const KILL_BOUND: Duration = Duration::from_secs(1);
/// The error of a shell cell whose shim died before the cell ended.
pub const SHIM_DIED: &str = "the cell's shim died (killed from outside) before the cell ended; its processes were ended as a cancel ends them (TERM, then KILL after the grace period) before this result";
/// Exiting gives up sweeping after this long.
pub const EXIT_BOUND: Duration = Duration::from_secs(10);

/// What the driver does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DaemonStep {
    /// Tick again at `next_wake` at the latest.
    Continue {
        /// The next deadline.
        next_wake: Timestamp,
    },
    /// Everything owned is dead: exit the process.
    Exit,
}

#[derive(Clone, Debug, Default)]
struct Escalation {
    /// When the TERM was sent: the grace counts from it.
    since: Timestamp,
    term_sent: bool,
    finished: bool,
    /// Every process this escalation signalled, with its start time: once
    /// found, a process stays the cell's until it is gone, even when what
    /// found it is gone (a setsid `env -i` daemon found in the shim's tree
    /// is reparented to the daemon when the shim is killed, and without a
    /// cgroup nothing else names it).
    signalled: BTreeMap<Pid, u64>,
    /// When the first KILL round was sent: what outlives [`KILL_BOUND`] of
    /// rounds from then is unkillable. Counted from the rounds, not from
    /// the grace: a daemon that ticks late (a frozen sandbox, a slow host)
    /// sends its first round late, and a process it has not yet sent KILL
    /// to is not one that survived it.
    first_kill: Option<Timestamp>,
}

#[derive(Clone, Debug)]
struct Track {
    shim: Option<(Pid, u64)>,
    marker: String,
    pgid: Option<Pid>,
    leftovers: Vec<Pid>,
    done: bool,
    deadline: Option<Timestamp>,
    cancel: Option<Escalation>,
    /// A cell of the kernel's persistent Python interpreter (whose shim
    /// outlives the cell).
    python: bool,
    /// The interpreter's pid (Python cells), from the `started` entry.
    interp: Option<(Pid, u64)>,
    /// A Python cell the daemon started a fresh interpreter shim for: no
    /// earlier cell ran in that interpreter.
    first_in_interpreter: bool,
    /// The cell's own cgroup, from its `cgroup` file (a Python cell's is
    /// made by the interpreter's shim, which moves the interpreter into it
    /// while the cell runs).
    cgroup: Option<String>,
    /// The `cgroup` file was read after the cell was done (it is written
    /// before the main process starts, so it will not appear later).
    cgroup_checked: bool,
    /// A done cell found lingering (members in its cgroup, or marked
    /// processes) is looked at again only from then on: the look scans the
    /// whole process table, too much for every tick.
    linger_recheck: Option<Timestamp>,
    /// The shim's death was seen (the interpreter's loss, for a Python
    /// cell, handled once).
    shim_death_seen: bool,
    /// This daemon's children (pid, start time) at each look since the
    /// shim's death: at the first look every one (but what is known to
    /// be another's) came back from the shim's tree, at a later one only
    /// one not seen before did (an earlier cell's leftover whose track
    /// went since is not this cell's).
    children_seen: BTreeSet<(Pid, u64)>,
    /// The shim's death was written (its result settled, for the
    /// escalation that ends what the cell still runs to finish); until
    /// then it is tried again each tick (a full disk).
    shim_death_told: bool,
    /// A shell cell whose shim died before it journaled a result: nobody
    /// saw its shell to its end, so the state it reached is discarded
    /// (with the note for the next cell) when it resolves.
    state_orphaned: bool,
}

impl Track {
    fn new(shim: (Pid, u64), marker: String, python: bool) -> Track {
        Track {
            shim: Some(shim),
            marker,
            pgid: None,
            leftovers: Vec::new(),
            done: false,
            deadline: None,
            cancel: None,
            python,
            interp: None,
            first_in_interpreter: false,
            cgroup: None,
            cgroup_checked: false,
            linger_recheck: None,
            shim_death_seen: false,
            children_seen: BTreeSet::new(),
            shim_death_told: false,
            state_orphaned: false,
        }
    }
}

/// The kernel daemon.
#[derive(Debug)]
pub struct Daemon {
    kernel: KernelLayout,
    nonce: String,
    config: Option<KernelConfig>,
    shell: String,
    handled: BTreeSet<CellSeq>,
    cells: BTreeMap<CellSeq, Track>,
    idle_since: Timestamp,
    /// Set once the daemon decided to exit: until when its exit sweep may
    /// go on.
    exiting: Option<Timestamp>,
    /// Why it decided (see [`Daemon::exit_cause`]).
    exit_cause: Option<ExitCause>,
    /// The Python interpreter's shim, once started.
    py: Option<(Pid, u64)>,
    /// Told to stop (SIGTERM), and when.
    stop: Option<Stop>,
    /// The interpreter's shim whose death was seen (its orphans kept).
    py_gone_seen: Option<(Pid, u64)>,
    /// A shim died since the last look: what it held came back to this
    /// daemon (a subreaper), to be kept on disk ([`Daemon::keep_orphans`]).
    orphans_due: bool,
    /// A submitted cell could not be taken at the last look (a full disk
    /// kept its journal from being written): it is tried again at the next
    /// tick, and until then the daemon is not idle (reaper seed 102301: an
    /// idle exit with such a cell left it unfinished, the kernel lost).
    untaken: bool,
}

/// Why a daemon decided to exit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitCause {
    /// Idle for the kernel's idle timeout, its exit announced.
    Idle,
    /// Its kernel's config is gone: shut down, or its directory removed.
    KernelRemoved,
    /// Its kernel's config is there but could not be read.
    ConfigUnreadable,
    /// Told to stop (SIGTERM).
    Stopped,
}

/// A stop in progress (see the module doc).
#[derive(Clone, Copy, Debug)]
struct Stop {
    since: Timestamp,
    term_sent: bool,
}

impl Daemon {
    /// The daemon of the kernel directory `kernel_dir`, spawned with `nonce`.
    pub fn new(kernel_dir: &str, nonce: &str) -> Daemon {
        Daemon {
            kernel: KernelLayout::new(kernel_dir),
            nonce: nonce.to_owned(),
            config: None,
            shell: String::new(),
            handled: BTreeSet::new(),
            cells: BTreeMap::new(),
            idle_since: Timestamp::ZERO,
            exiting: None,
            exit_cause: None,
            py: None,
            stop: None,
            py_gone_seen: None,
            orphans_due: false,
            untaken: false,
        }
    }

    /// The daemon got SIGTERM: from the next tick on it stops the kernel
    /// (see the module doc) and exits. A second call changes nothing.
    pub fn terminate(&mut self, now: Timestamp) {
        #[cfg(feature = "mutations")]
        if crate::mutation::active(crate::mutation::Mutation::DaemonExitsAtTerm) {
            // The planted bug: an exit sweep already over, nothing killed.
            self.begin_exit(now, ExitCause::Stopped);
            self.exiting = Some(now);
            self.cells.clear();
            return;
        }
        #[cfg(feature = "mutations")]
        if crate::mutation::active(crate::mutation::Mutation::DaemonIgnoresTerm) {
            // The planted bug: the TERM changes nothing.
            return;
        }
        if self.stop.is_none() {
            self.stop = Some(Stop {
                since: now,
                term_sent: false,
            });
        }
    }

    /// The daemon has decided to exit (idle, shut down, removed or
    /// stopped): what it signals from now on is its exit sweep, not a
    /// cancel.
    pub fn is_exiting(&self) -> bool {
        self.exit_cause().is_some()
    }

    /// Why the daemon exits, once it decided to: a host tells an exit the
    /// agent chose while its kernel was still in use ([`ExitCause::Idle`],
    /// [`ExitCause::ConfigUnreadable`]) from one it was told to make.
    pub fn exit_cause(&self) -> Option<ExitCause> {
        if self.stop.is_some() {
            return Some(ExitCause::Stopped);
        }
        self.exit_cause
    }

    fn begin_exit(&mut self, now: Timestamp, cause: ExitCause) {
        self.exiting = Some(now + EXIT_BOUND);
        self.exit_cause = Some(cause);
    }

    /// One step; see the module doc.
    #[must_use]
    pub fn tick(&mut self, os: &mut dyn Os) -> DaemonStep {
        let now = os.now();
        if self.config.is_none() && self.exiting.is_none() {
            match read_json::<KernelConfig>(os, &self.kernel.config()) {
                Ok(Some(c)) if c.nonce == self.nonce => {
                    self.shell = if os.has_program("bash") {
                        "bash".into()
                    } else {
                        "/bin/sh".into()
                    };
                    self.config = Some(c);
                    self.idle_since = now;
                    self.adopt_existing(os);
                }
                Ok(_) => self.begin_exit(now, ExitCause::KernelRemoved),
                Err(_) => self.begin_exit(now, ExitCause::ConfigUnreadable),
            }
        }
        if self.exiting.is_none() && !self.config_is_ours(os) {
            // Shut down or removed under us.
            self.begin_exit(now, ExitCause::KernelRemoved);
        }
        if self.stop.is_some() || self.exiting.is_some() {
            // A stop's TERM ends shims (and the sweep's KILL those left):
            // what a shim held comes to this daemon, and a daemon killed
            // before its sweep ended them would leave them to PID 1 with
            // nothing that names them (daemon_then_shim_killed_escapes
            // seed 102525: a TERMed daemon KILLed within its grace, a
            // cell's `setsid` sleep running on past the shutdown).
            let _ = self.keep_orphans(os);
        }
        if self.stop.is_some() && self.exiting.is_none() {
            return self.stop_step(os, now);
        }
        if let Some(deadline) = self.exiting {
            let step = self.exit_sweep(os, now, deadline);
            if step == DaemonStep::Exit && self.stop.is_some() {
                self.close_stopped(os);
            }
            return step;
        }
        if let Some(shim) = self.py.filter(|&s| self.py_gone_seen != Some(s)) {
            let alive = still_runs(os, shim.0, shim.1);
            if !alive {
                self.py_gone_seen = Some(shim);
                self.orphans_due = true;
            }
        }
        self.track_cells(os, now);
        self.start_next(os);
        if std::mem::take(&mut self.orphans_due) {
            // A record a full disk refused is written at a later tick.
            self.orphans_due = !self.keep_orphans(os);
        }
        let busy = self.untaken
            || self.cells.values().any(|t| {
                !t.done || (t.cancel.as_ref().is_some_and(|c| !c.finished) && !idle_during_cancel())
            });
        if busy {
            self.idle_since = now;
        }
        let idle = Duration::from_millis(self.config.as_ref().map_or(0, |c| c.idle_timeout_ms));
        if now >= self.idle_since + idle {
            if self.announce_idle_exit(os) {
                self.begin_exit(now, ExitCause::Idle);
                return self.exit_sweep(os, now, now + EXIT_BOUND);
            }
            self.idle_since = now;
        }
        DaemonStep::Continue {
            next_wake: now + TICK,
        }
    }

    /// Before an idle exit: the exit is announced ([`KernelLayout::exiting`])
    /// and the submissions looked at once more. A submit that found this
    /// daemon alive may have recorded its cell after this tick's first
    /// look (two_kernels seed 30944: the daemon exited, the cell was never
    /// taken and failed as lost). Either that submit finds the
    /// announcement (and waits to see what became of its cell), or this
    /// look finds its cell, and the daemon withdraws the announcement and
    /// stays to run it. False: the daemon stays.
    fn announce_idle_exit(&mut self, os: &mut dyn Os) -> bool {
        if os
            .write_atomic(&self.kernel.exiting(), self.nonce.as_bytes())
            .is_err()
            && !idle_exit_unannounced()
        {
            // Unannounced, the exit could strand a cell: stay, and try
            // again at a later tick.
            return false;
        }
        let came = cell_seqs(os, &self.kernel).into_iter().any(|seq| {
            !self.handled.contains(&seq) && os.exists(&self.kernel.cell(seq).submission())
        });
        if came {
            // A submit that still finds the announcement waits for its
            // cell to be taken, which the next tick does.
            let _ = os.remove_all(&self.kernel.exiting());
        }
        !came
    }

    /// The kernel's config is still this daemon's: not removed, nor made
    /// again by another spawn (a removal of the kernels' directories, then
    /// a spawn, while this daemon's tick was preempted: two_clients seed
    /// 2946, where both daemons ran the next cell into one journal). A
    /// config that cannot be read now is taken for ours: it was, and a
    /// read error passes.
    ///
    /// The read costs nothing measurable beside a stat: an idle daemon
    /// used 27-29 ticks of CPU in 30 s with it, 27-33 with an `exists`
    /// in its place (real agent, 10 ms ticks, 2026-12-06).
    fn config_is_ours(&self, os: &dyn Os) -> bool {
        kernel::config_names(os, &self.kernel, &self.nonce).unwrap_or(true)
    }

    fn grace(&self) -> Duration {
        Duration::from_millis(
            self.config
                .as_ref()
                .map_or(DEFAULT_GRACE_MS, |c| c.grace_ms),
        )
    }

    /// Cells left unresolved by an earlier daemon: a cell whose shim still
    /// runs is adopted and cancelled (its kernel's state is gone), any other
    /// is finalized. Cells submitted but never taken are run.
    fn adopt_existing(&mut self, os: &mut dyn Os) {
        orphans::kill_orphaned_interpreter(os, &self.kernel);
        for seq in cell_seqs(os, &self.kernel) {
            let cell = self.kernel.cell(seq);
            if !super::op::taken(os, &cell) {
                continue;
            }
            self.handled.insert(seq);
            if os.exists(&journal::done_flag(&cell.journal())) {
                continue;
            }
            let live_shim = self.orphaned_shim(os, seq);
            if let Some(l) = live_shim {
                let _ = tombstone::write(os, &cell, CancelReason::Requested);
                self.cells.insert(
                    seq,
                    Track::new((l.shim_pid, l.shim_starttime), l.marker, false),
                );
                continue;
            }
            let Ok(mut w) = JournalWriter::open(os, &cell.journal(), DEFAULT_CAP) else {
                continue;
            };
            if w.is_done() {
                // Its shim died after the journal's `done` and before the
                // flag, and the daemon with it: the flag is written now (a
                // later tick tries again where the disk refuses it, as
                // for a shim that dies so under this daemon). Without it
                // the cell stayed unfinished for every op, the stop and
                // the idle exit (daemon_killed seed 22: this daemon went
                // idle with it).
                if w.mark_done(os).is_err() {
                    let mut t = Track::new((0, 0), String::new(), false);
                    t.shim = None;
                    t.shim_death_seen = true;
                    self.cells.insert(seq, t);
                }
                continue;
            }
            // Its shim is gone too, but what the cell started may run on:
            // it is ended as a cancel ends it (its marker and cgroup, and
            // its session while its main process is still the one the
            // journal recorded: after a restart of the sandbox that
            // session's number may be anyone's), and the cell resolves
            // after. A result settled before stays the result.
            let result = if w.has_result() {
                Vec::new()
            } else {
                vec![EntryKind::Result {
                    outcome: CellOutcome::Error {
                        message: "the kernel daemon that ran this cell is gone".into(),
                    },
                }]
            };
            // Refused (a full disk): the tick writes it when the disk lets
            // it, as for a shim that died under this daemon; untracked,
            // the cell stayed unresolved and the daemon free to exit idle
            // (full_disk seed 156: the disk filled as this result was
            // written).
            let settled = w.settle(os, result).is_ok();
            let launch = read_json::<LaunchRecord>(os, &cell.launch()).ok().flatten();
            let started = kernel::started_this_boot(os, &cell, launch.as_ref());
            let marker = launch.map(|l| l.marker).unwrap_or_default();
            let python = self.config.as_ref().is_some_and(|c| c.lang == Lang::Python);
            let mut t = Track::new((0, 0), marker, python);
            t.shim = None;
            t.shim_death_seen = true;
            t.shim_death_told = settled;
            let same_main = started.is_some_and(|(pid, _, start)| still_runs(os, pid, start));
            // 0 matches no process and is not read again from the journal.
            t.pgid = Some(started.filter(|_| same_main && !python).map_or(0, |s| s.1));
            t.cancel = Some(Escalation::default());
            self.cells.insert(seq, t);
        }
    }

    /// The still-running shim of a cell an earlier daemon started: from
    /// `launch.json`, or (if the daemon died before writing it) as the
    /// parent of the main process the journal recorded.
    fn orphaned_shim(&self, os: &dyn Os, seq: CellSeq) -> Option<LaunchRecord> {
        let cell = self.kernel.cell(seq);
        let live = |pid: Pid, start: u64| still_runs(os, pid, start);
        if let Some(l) = read_json::<LaunchRecord>(os, &cell.launch()).ok().flatten() {
            return (l.of_this_boot(os) && live(l.shim_pid, l.shim_starttime)).then_some(l);
        }
        let read = read_journal(os, &cell.journal()).ok()?;
        let (pid, starttime) = read.entries.iter().find_map(|e| match e.kind {
            EntryKind::Started { pid, starttime, .. } => Some((pid, starttime)),
            _ => None,
        })?;
        let main = os.process(pid).filter(|p| p.starttime == starttime)?;
        let shim = os.process(main.ppid).filter(|p| p.pid > 1 && !p.zombie)?;
        // The earlier daemon's nonce is gone with its config: the shim's
        // tree and the recorded session still find the cell.
        Some(LaunchRecord::new(
            os,
            shim.pid,
            shim.starttime,
            String::new(),
        ))
    }

    fn track_cells(&mut self, os: &mut dyn Os, now: Timestamp) {
        let grace = self.grace();
        let markers: Vec<String> = self.cells.values().map(|t| t.marker.clone()).collect();
        let groups: Vec<(CellSeq, String)> = self
            .cells
            .iter()
            .filter_map(|(&seq, t)| Some((seq, t.cgroup.clone()?)))
            .collect();
        let mut table: Option<Table> = None;
        let self_pid = os.self_pid();
        // Children of this daemon that are no running cell's orphans: the
        // live shims, the interpreter's, and the leftovers done cells
        // reported (a leftover of an earlier cell whose lingering shim was
        // killed with this one is that cell's, and may run on).
        let not_orphans: Vec<Pid> = self
            .cells
            .values()
            .flat_map(|t| {
                t.shim
                    .map(|s| s.0)
                    .into_iter()
                    .chain(t.leftovers.iter().copied())
            })
            .chain(self.py.map(|p| p.0))
            .collect();
        // The shims gone since the last look, read once for the tick. A
        // Python cell's interpreter, orphaned with its shim, is killed
        // before the loss is told below: a tick that told it first and
        // was then slow (preempted) let the client hear of the loss while
        // the namespace still lived (python_state seed 104103).
        let gone: BTreeSet<CellSeq> = self
            .cells
            .iter()
            .filter(|(_, t)| {
                t.shim
                    .is_some_and(|(pid, start)| !still_runs(os, pid, start))
            })
            .map(|(&seq, _)| seq)
            .collect();
        if self
            .cells
            .iter()
            .any(|(seq, t)| t.python && !t.shim_death_seen && gone.contains(seq))
        {
            self.kill_orphaned_interpreters(os);
        }
        let mut drop = Vec::new();
        let mut interp_lost = Vec::new();
        let mut shim_loss_told = false;
        for (&seq, t) in self.cells.iter_mut() {
            let cell = self.kernel.cell(seq);
            if !t.done && !os.exists(&cell.submission()) {
                // Acked and deleted before this tick saw `done`: the client
                // only acks a journal it read to its end, so the cell is
                // over (a Python cell's shim never exits to tell us). The
                // submission, not the directory, tells: a cancel that
                // raced the ack makes the directory again, with only its
                // tombstone, and must not revive the escalation (whose
                // end would kill the interpreter with the next cell's
                // namespace).
                t.done = true;
            }
            if !t.done && os.exists(&journal::done_flag(&cell.journal())) {
                t.done = true;
                if let Ok(read) = read_journal(os, &cell.journal()) {
                    for e in &read.entries {
                        if let EntryKind::Leftovers { pids } = &e.kind {
                            t.leftovers.clone_from(pids);
                        }
                    }
                }
            }
            if t.shim.is_some() && gone.contains(&seq) {
                t.shim = None;
                self.orphans_due = true;
            }
            if t.shim.is_none() && !t.done && !t.shim_death_told {
                let first_look = !t.shim_death_seen;
                t.shim_death_seen = true;
                // The shim died without finishing the journal (killed from
                // outside: an OOM killer, a `pkill`). The cell is ended the
                // way a cancel ends it: its result is settled now, every
                // process it still runs gets TERM, then KILL after the
                // grace period, and `done` is written once none is left
                // (below). Resolved while they ran on, they would fork and
                // write for nobody, beside the kernel's next cell.
                let cancel = tombstone::read(os, &cell);
                // A fresh interpreter's shim killed before it started the
                // cell's code (no `started` entry) took no namespace with
                // it: nothing of the kernel's is lost, and no loss is told
                // (python_orphans seed 292: the shim was killed as it
                // started, and the cell said the namespace was lost).
                let held_nothing = t.python
                    && t.first_in_interpreter
                    && read_journal(os, &cell.journal())
                        .is_ok_and(|r| journal::started(&r).is_none());
                let outcome = if held_nothing {
                    if first_look {
                        interp_lost.push(seq);
                    }
                    shim_loss_told = true;
                    cancel.map_or_else(
                        || CellOutcome::Error {
                            message: python::SHIM_DIED_BEFORE_START.into(),
                        },
                        CancelReason::outcome,
                    )
                } else if t.python {
                    // The interpreter's shim: the interpreter, orphaned,
                    // goes with it, and with it the namespace.
                    if first_look {
                        interp_lost.push(seq);
                    }
                    python::died(cancel, python::SHIM_DIED)
                } else {
                    match cancel {
                        Some(r) => r.outcome(),
                        None => CellOutcome::Error {
                            message: SHIM_DIED.into(),
                        },
                    }
                };
                // A journal that cannot be written now (a full disk) is
                // written at a later tick: until then the cell is not
                // settled, so its escalation does not end it and neither
                // the client nor the idle exit takes it for resolved.
                let mut journal = JournalWriter::open(os, &cell.journal(), DEFAULT_CAP);
                if !os.exists(&cell.submission()) {
                    // Acked between this tick's first look and the journal
                    // read (an ack removes the submission before the
                    // journal): the shim finished it, the client read it.
                    t.done = true;
                    continue;
                }
                if let Some(w) = journal.as_mut().ok().filter(|w| w.is_done()) {
                    // The shim died after the journal's `done` and before
                    // its flag: the cell resolved (its leftovers may run
                    // on). With the flag, the next tick takes it as done.
                    t.shim_death_told = w.mark_done(os).is_ok();
                    continue;
                }
                if let Ok(mut w) = journal {
                    if first_look && !t.python && (!w.has_result() || note_kept_state_lost()) {
                        t.state_orphaned = true;
                    }
                    if t.python && !held_nothing && !w.has_result() {
                        let note = python::loss_note(python::SHIM_DIED);
                        shim_loss_told |= w.output(os, Stream::Stderr, &note).is_ok();
                    }
                    // A shim that settled a cancel's result and then saw
                    // its tree empty leaves only `done` to write.
                    let result = if w.has_result() {
                        Vec::new()
                    } else {
                        vec![EntryKind::Result { outcome }]
                    };
                    t.shim_death_told = w.settle(os, result).is_ok();
                }
                // A journal that cannot be read now is ended at a later
                // tick: taken for done, the cell would be left unresolved
                // and the daemon free to exit idle under it (full_disk
                // seed 140: a torn line that could not be cut).
                t.cancel.get_or_insert_with(Escalation::default);
            }
            if t.cgroup.is_none() && !t.cgroup_checked {
                t.cgroup = procs::read_cgroup(os, &cell);
                t.cgroup_checked = t.cgroup.is_some() || t.done;
            }
            if t.cancel.is_none() && os.exists(&cell.cancel()) {
                t.cancel = Some(Escalation::default());
            }
            if t.cancel.is_none() && !t.done && t.deadline.is_some_and(|d| now >= d) {
                let _ = tombstone::write(os, &cell, CancelReason::Timeout);
                t.cancel = Some(Escalation::default());
            }
            let mut empty = false;
            if let Some(c) = t.cancel.as_mut().filter(|c| !c.finished) {
                // The cell's result is in (the interpreter is done with
                // it) and its `done` waits for this escalation.
                let settled = !t.done && os.exists(&journal::settle_flag(&cell.journal()));
                let cell_running = !t.done && !settled;
                if t.python && t.interp.is_none() {
                    t.interp = read_journal(os, &cell.journal()).ok().and_then(|r| {
                        r.entries.iter().find_map(|e| match e.kind {
                            EntryKind::Started { pid, starttime, .. } => Some((pid, starttime)),
                            _ => None,
                        })
                    });
                } else if !t.python && t.pgid.is_none() {
                    t.pgid = read_journal(os, &cell.journal())
                        .ok()
                        .and_then(|r| journal::started_pgid(&r));
                }
                let table = table.get_or_insert_with(|| Table::snapshot(os));
                let mut protected = procs::protected(table, self_pid);
                protected.extend(t.interp.map(|(pid, _)| pid));
                // The interpreter as long as it is that process: a pid
                // reused after its death (an op's, say) is never signalled
                // and its children are not the cell's.
                let interp = t.interp.filter(|&(pid, start)| {
                    table
                        .get(pid)
                        .is_some_and(|p| p.starttime == start && !p.zombie)
                });
                let interp = interp.map(|(pid, _)| pid);
                let scope = CellScope {
                    // A Python cell's processes descend from the
                    // interpreter (see below).
                    shim: if t.python { None } else { t.shim.map(|s| s.0) },
                    pgid: t.pgid,
                    marker: t.marker.clone(),
                    other_markers: markers
                        .iter()
                        .filter(|m| **m != t.marker)
                        .cloned()
                        .collect(),
                    extra: t.leftovers.clone(),
                    cgroup: t.cgroup.clone(),
                };
                let mut set = procs::cell_processes(os, table, &scope, &protected);
                // Never another cell's: the interpreter (spared until the
                // grace ends) and every earlier cell's leftovers descend
                // from the interpreter too, and a finished cell is no
                // longer in `markers`.
                let other_groups = groups_but(&groups, seq);
                let others = procs::OtherCells::new(os, &t.marker, &other_groups);
                if !t.python && t.shim_death_seen {
                    // What the dead shim's subreaper tree held came back
                    // to this daemon (a subreaper too): the only trace
                    // left of a `setsid env -i` daemon where there is no
                    // cgroup. Looked for at every look of the escalation,
                    // not only the first: a shell that ignores TERM forks
                    // on, and what it double-forks since comes back here
                    // too (drawn_clients seed 100676: a `setsid env -i`
                    // daemon born 130 ms after the shim's death outlived
                    // its cell); a child seen at an earlier look is not
                    // taken later (`children_seen`). (A Python cell's
                    // processes are the interpreter's descendants, found
                    // below while it still lives.)
                    for p in table.iter() {
                        if p.ppid != self_pid || !t.children_seen.insert((p.pid, p.starttime)) {
                            continue;
                        }
                        let orphan = !p.zombie
                            && !protected.contains(&p.pid)
                            && !not_orphans.contains(&p.pid)
                            && !others.owns(os, p.pid);
                        if orphan {
                            c.signalled.entry(p.pid).or_insert(p.starttime);
                        }
                    }
                }
                if let Some(interp) = interp.filter(|_| t.python) {
                    set.extend(procs::descendants_except(os, table, interp, &others));
                }
                set.retain(|pid| {
                    !protected.contains(pid)
                        && table.get(*pid).is_some_and(|p| !p.zombie)
                        && !others.owns(os, *pid)
                });
                // What it signalled before, and what those fork since (a
                // process found only this way, an orphan of a killed shim,
                // still forks).
                let before: Vec<Pid> = c
                    .signalled
                    .iter()
                    .filter(|&(&pid, &start)| {
                        table
                            .get(pid)
                            .is_some_and(|p| p.starttime == start && !p.zombie)
                            && !protected.contains(&pid)
                    })
                    .map(|(&pid, _)| pid)
                    .collect();
                for pid in before {
                    set.insert(pid);
                    set.extend(
                        procs::descendants_except(os, table, pid, &others)
                            .into_iter()
                            .filter(|p| {
                                !protected.contains(p) && table.get(*p).is_some_and(|i| !i.zombie)
                            }),
                    );
                }
                for &pid in &set {
                    if let Some(p) = table.get(pid) {
                        c.signalled.insert(pid, p.starttime);
                    }
                }
                if !c.term_sent {
                    if let Some(interp) = interp.filter(|_| cell_running) {
                        let _ = os.signal(interp, Signal::Int);
                    }
                    procs::signal_each(os, &set, Signal::Term);
                    c.term_sent = true;
                    // The grace counts from the TERM, which a slow tick
                    // sends a while after it read the clock.
                    c.since = os.now();
                } else if now >= c.since + grace || kill_before_grace() {
                    procs::stop_and_kill(os, &set);
                    if !set.is_empty() {
                        c.first_kill.get_or_insert(now);
                    }
                    if let Some(interp) = interp.filter(|_| cell_running) {
                        // The interpreter did not stop: it dies with its
                        // namespace (the shim reports the loss).
                        let _ = os.signal(interp, Signal::Kill);
                    }
                }
                empty = set.is_empty();
                let rounds_over = c.first_kill.is_some_and(|t| now >= t + KILL_BOUND);
                if settled && (empty || rounds_over) {
                    let unkillable: Vec<Pid> = set.iter().copied().collect();
                    let extra = if unkillable.is_empty() {
                        Vec::new()
                    } else {
                        vec![EntryKind::Unkillable { pids: unkillable }]
                    };
                    if t.state_orphaned {
                        // Before `done`: the next cell starts after it.
                        t.state_orphaned =
                            shell::discard_state(os, &self.kernel, &cell, &t.marker).is_err();
                    }
                    // The result is there: `outcome` is not used. Not
                    // written (a full disk): again at a later tick.
                    t.done = JournalWriter::open(os, &cell.journal(), DEFAULT_CAP)
                        .is_ok_and(|mut w| w.close(os, CellOutcome::Cancelled, extra).is_ok());
                }
                if empty && t.done && (t.python || t.shim.is_none()) {
                    c.finished = true;
                }
            }
            // A cancel that just found nothing left is a fresh look too.
            let recheck_due =
                t.linger_recheck.is_none_or(|at| now >= at) || (t.cancel.is_some() && empty);
            if t.done
                && (t.python || t.shim.is_none())
                && (t.cancel.is_none() || empty)
                && recheck_due
            {
                // A cell whose shim is gone may still have processes in
                // its cgroup (a daemon that escaped the shim's tree before
                // the shim was killed): keep it, so that a cancel, or the
                // idle exit, still finds them.
                let in_cgroup = t.cgroup.as_deref().is_some_and(|g| {
                    let table = table.get_or_insert_with(|| Table::snapshot(os));
                    let protected = procs::protected(table, self_pid);
                    os.cgroup_members(g).into_iter().any(|pid| {
                        !protected.contains(&pid) && table.get(pid).is_some_and(|p| !p.zombie)
                    })
                });
                // Without a cgroup, a Python cell's leftovers are children
                // of the one interpreter, known only by the cell's marker:
                // keep the cell while one lives, so that its cancel still
                // reaches them (a shell cell's shim stays for its own).
                let marked = !in_cgroup && t.python && t.cgroup.is_none() && {
                    let table = table.get_or_insert_with(|| Table::snapshot(os));
                    let protected = procs::protected(table, self_pid);
                    table.iter().any(|p| {
                        !p.zombie
                            && !protected.contains(&p.pid)
                            && Some(p.pid) != t.interp.map(|(pid, _)| pid)
                            && os.has_env(p.pid, MARKER_NAME, &t.marker)
                    })
                };
                let lingering = in_cgroup || marked;
                t.linger_recheck = lingering.then_some(now + LINGER_RECHECK);
                if !lingering {
                    if let Some(g) = &t.cgroup {
                        let _ = os.remove_cgroup(g);
                    }
                    drop.push(seq);
                }
            }
        }
        for seq in drop {
            self.cells.remove(&seq);
        }
        if !interp_lost.is_empty() {
            // The cell that ran carries the note, if it can still take
            // one; else the next does. Either way the next starts afresh.
            self.kill_orphaned_interpreters(os);
            self.py = None;
            // A loss told neither here nor by the shim itself (its marker)
            // is told by the next Python cell.
            let untold = python::untold_file(&self.kernel);
            if !shim_loss_told && !os.exists(&python::told_file(&self.kernel)) {
                let _ = os.write_atomic(&untold, b"");
            } else {
                let _ = os.remove_all(&untold);
            }
        } else if shim_loss_told {
            // Told at a later tick (its journal could not be written at
            // the first look).
            let _ = os.remove_all(&python::untold_file(&self.kernel));
        }
    }

    /// The interpreter this daemon started is gone, with its shim (killed
    /// from outside, or exited once its interpreter died and its tree
    /// emptied) or without it (a shim that lingers for the dead
    /// interpreter's leftovers takes no more cells): the next cell needs
    /// a fresh one.
    fn interpreter_lost(&self, os: &dyn Os) -> bool {
        let Some((pid, start)) = self.py else {
            return false;
        };
        if !still_runs(os, pid, start) {
            return true;
        }
        let table = Table::snapshot(os);
        let marker = format!("{}:{}", self.nonce, python::INTERPRETER_MARK);
        !table
            .descendants(pid)
            .into_iter()
            .any(|p| table.get(p).is_some_and(|i| !i.zombie) && os.has_env(p, MARKER_NAME, &marker))
    }

    /// Keeps a record (`leftovers/orphan-<pid>.json`: pid and start time)
    /// of each process a dead shim left to this daemon: its children other
    /// than its live shims. While this daemon lives they are its
    /// descendants (owned: the idle exit and shutdown take them), but a
    /// killed daemon leaves them to PID 1, and a `setsid env -i` daemon
    /// carries nothing else that names the kernel (no marker, no cgroup
    /// without cgroup v2): the record is what lets shutdown, or a later
    /// daemon's idle exit, still find them (python_cancel seed 222: the
    /// interpreter's shim killed, then the daemon).
    /// False when a record could not be written (a full disk): the
    /// daemon tries again at its next tick, so a disk full only when the
    /// shim died loses nothing. (A daemon killed before the disk has room
    /// again keeps nothing: python_orphans seed 226, the limit in
    /// client/README.md.)
    fn keep_orphans(&self, os: &mut dyn Os) -> bool {
        let table = Table::snapshot(os);
        let me = os.self_pid();
        let shims = self.shims();
        let orphans: Vec<(Pid, u64)> = table
            .iter()
            .filter(|p| p.ppid == me && p.pid != me && !p.zombie && !shims.contains(&p.pid))
            .map(|p| (p.pid, p.starttime))
            .collect();
        if orphans.is_empty() {
            return true;
        }
        let dir = leftovers_dir(&self.kernel);
        if kernel::make_dir(os, &self.kernel, &dir).is_err() {
            return false;
        }
        let mut all = true;
        for (pid, starttime) in orphans {
            let path = format!("{dir}/orphan-{pid}.json");
            if os.exists(&path) {
                continue;
            }
            let record = LaunchRecord::new(os, pid, starttime, String::new());
            all &= os.write_atomic(&path, &to_json(&record)).is_ok();
        }
        all
    }

    /// The shims this daemon started that it still tracks (of cells and
    /// of its interpreter).
    fn shims(&self) -> BTreeSet<Pid> {
        self.cells
            .values()
            .filter_map(|t| t.shim.map(|s| s.0))
            .chain(self.py.map(|s| s.0))
            .collect()
    }

    /// Kills this kernel's interpreters whose shim died: orphaned (they
    /// came back to this daemon, a subreaper), they would hold the old
    /// namespace with nobody to hand them cells or read their results.
    /// The live interpreter shim's own are spared: a fresh one started for
    /// the next cell carries the same marker (python_stuck seed 104552 of
    /// the long run: a tick ended the lost interpreter's shim and started
    /// a fresh interpreter for the next cell; the next tick saw the old
    /// shim gone under the cell it had run, killed the fresh interpreter,
    /// and the next cell but one told a death its predecessor had told).
    fn kill_orphaned_interpreters(&self, os: &mut dyn Os) {
        let live = self.py.filter(|&(pid, start)| still_runs(os, pid, start));
        orphans::kill_interpreters_of(os, &self.nonce, live.map(|(pid, _)| pid));
    }

    fn start_next(&mut self, os: &mut dyn Os) {
        self.untaken = false;
        if os.stop_requested() {
            return;
        }
        // While a cell runs, the cells queued behind it wait their turn,
        // but one cancelled (or timed out by its client) before its turn
        // never runs, so it is resolved now: its cancel, and a client's
        // timeout, would otherwise wait for the running cell's end.
        let busy = self.cells.values().any(|t| !t.done);
        let Some(config) = self.config.clone() else {
            return;
        };
        for seq in cell_seqs(os, &self.kernel) {
            if self.handled.contains(&seq) {
                continue;
            }
            let cell = self.kernel.cell(seq);
            if busy && tombstone::read(os, &cell).is_none() {
                continue;
            }
            let Ok(Some(sub)) = read_json::<Submission>(os, &cell.submission()) else {
                continue;
            };
            let Ok(mut w) = JournalWriter::open(os, &cell.journal(), DEFAULT_CAP) else {
                // Again at a later tick.
                self.untaken = true;
                continue;
            };
            self.handled.insert(seq);
            if w.is_done() {
                continue;
            }
            if w.is_empty()
                && w.push(
                    os,
                    EntryKind::Accepted {
                        request_id: sub.request_id.clone(),
                    },
                )
                .is_err()
            {
                // Not launched before its journal begins with the
                // acceptance (the shim's own writer starts an empty journal
                // at `started`: reaper seed 100997, a full disk): again at
                // a later tick, and none after it before (a cell is never
                // overtaken). Not again when an earlier tick wrote it and
                // then could not end the journal (see below).
                self.handled.remove(&seq);
                self.untaken = true;
                return;
            }
            let untold = python::untold_file(&self.kernel);
            if config.lang == Lang::Python
                && !busy
                && os.exists(&untold)
                // Lost with its shim under a cell that had its result
                // already: nobody was told. The flag goes once the note
                // is written.
                && w.output(os, Stream::Stderr, &python::loss_note(python::SHIM_DIED))
                    .is_ok()
            {
                let _ = os.remove_all(&untold);
            }
            if config.lang == Lang::Python
                && !busy
                && self.interpreter_lost(os)
                && self.end_lost_interpreter(os)
            {
                let _ = w.output(
                    os,
                    Stream::Stderr,
                    &python::loss_note(python::LOST_BETWEEN_CELLS),
                );
            }
            if let Some(reason) = tombstone::read(os, &cell) {
                // The cancel won: the cell never starts.
                let ended = w.finish(
                    os,
                    vec![EntryKind::Result {
                        outcome: reason.outcome(),
                    }],
                );
                if ended.is_err() {
                    // The journal cannot take its end now (a full disk):
                    // again at a later tick (nothing of it ran).
                    self.handled.remove(&seq);
                    self.untaken = true;
                }
                continue;
            }
            if os.stop_requested() {
                // A TERM came during this tick: the stop that follows
                // resolves the cell, which never starts. Until then the
                // daemon is busy with it: an idle exit now (a clock that
                // jumped) would leave it accepted and open, with no stop
                // to resolve it (idle_exit seed 102477).
                self.untaken = true;
                return;
            }
            match self.launch(os, seq, &sub, &config, &mut w) {
                Ok(track) => {
                    let mut track = track;
                    // From the launch, not from the tick's start: a slow
                    // tick (a paused filesystem call) that took the cell
                    // late would have shortened its timeout (drawn seed
                    // 262: 372 ms of a 442 ms timeout).
                    let started = os.now();
                    track.deadline = sub.timeout_ms.map(|ms| started + Duration::from_millis(ms));
                    self.cells.insert(seq, track);
                    return;
                }
                Err(message) => {
                    let outcome = CellOutcome::Error { message };
                    if w.finish(os, vec![EntryKind::Result { outcome }]).is_err() {
                        // Nothing of it ran; its end is written at a later
                        // tick, or it starts then (a full disk that kept
                        // its code from being written has room again).
                        self.handled.remove(&seq);
                        self.untaken = true;
                        return;
                    }
                }
            }
        }
    }

    fn launch(
        &mut self,
        os: &mut dyn Os,
        seq: CellSeq,
        sub: &Submission,
        config: &KernelConfig,
        w: &mut JournalWriter,
    ) -> Result<Track, String> {
        let cell = self.kernel.cell(seq);
        let marker = marker_value(&self.nonce, seq);
        if let Some(why) = (config.lang == Lang::Shell)
            .then(|| shell::unrunnable(sub.code.as_slice()))
            .flatten()
        {
            return Err(why);
        }
        let code = match config.lang {
            Lang::Shell => shell::cell_code(sub.code.as_slice()),
            Lang::Python => std::borrow::Cow::Borrowed(sub.code.as_slice()),
        };
        os.write_atomic(&cell.code(), &code)
            .map_err(|e| format!("cannot write the cell's code: {e}"))?;
        let mut first_in_interpreter = false;
        let (pid, start, python) = match config.lang {
            Lang::Shell => {
                let launch = CellLaunch {
                    kernel_dir: self.kernel.dir().to_owned(),
                    cell_dir: cell.dir().to_owned(),
                    lang: config.lang,
                    argv: shell::argv(&self.shell, &self.kernel, &cell),
                    marker: (MARKER_NAME.to_owned(), marker.clone()),
                };
                let pid = os
                    .spawn_cell(&launch)
                    .map_err(|e: OsError| format!("cannot start the cell's shim: {e}"))?;
                (pid, os.process(pid).map_or(0, |p| p.starttime), false)
            }
            Lang::Python => {
                let before = self.py;
                let (pid, start, untold) = self.interpreter(os)?;
                first_in_interpreter = before != Some((pid, start));
                if untold {
                    let _ = w.output(
                        os,
                        Stream::Stderr,
                        &python::loss_note(python::LOST_BETWEEN_CELLS),
                    );
                }
                os.write_atomic(
                    &python::run_file(&self.kernel),
                    seq.0.to_string().as_bytes(),
                )
                .map_err(|e| format!("cannot hand the cell to the interpreter: {e}"))?;
                (pid, start, true)
            }
        };
        let record = LaunchRecord::new(os, pid, start, marker.clone());
        let _ = os.write_atomic(&cell.launch(), &to_json(&record));
        let mut track = Track::new((pid, start), marker, python);
        track.first_in_interpreter = first_in_interpreter;
        Ok(track)
    }

    /// A lost interpreter's end: what is left of it killed, and this
    /// daemon's record of it dropped. True when nobody has told the loss
    /// (the shim tells it in the cell it died in): the next cell's
    /// journal must.
    fn end_lost_interpreter(&mut self, os: &mut dyn Os) -> bool {
        // A shim still alive with no interpreter under it may be one that
        // has not started it yet (its exec under way): it goes first, or
        // it starts one beside the next and both take the kernel's next
        // cell (full_disk seed 501618: a hand-off a full disk refused was
        // tried again a tick later, 1 ms after the shim's start, and the
        // cell ran twice).
        if let Some((pid, start)) = self.py {
            if still_runs(os, pid, start) {
                procs::stop_and_kill(os, &BTreeSet::from([pid]));
            }
        }
        self.kill_orphaned_interpreters(os);
        self.py = None;
        let told = python::told_file(&self.kernel);
        let was_told = os.exists(&told);
        let _ = os.remove_all(&told);
        !was_told
    }

    /// The Python interpreter's shim, started if it is not running, and
    /// whether a loss of the one before is still to be told. The shim
    /// is looked at again here: one that died after this tick's look
    /// for a lost interpreter is a loss too, not a silent fresh start
    /// (python_cancel seed 100826: the next cell found the namespace gone
    /// and nobody had said so).
    fn interpreter(&mut self, os: &mut dyn Os) -> Result<(Pid, u64, bool), String> {
        let mut untold = false;
        if let Some((pid, start)) = self.py {
            if still_runs(os, pid, start) {
                return Ok((pid, start, false));
            }
            untold = self.end_lost_interpreter(os);
        }
        let dir = python::py_dir(&self.kernel);
        kernel::make_dir(os, &self.kernel, &dir)
            .map_err(|e| format!("cannot create {dir}: {e}"))?;
        // A new interpreter starts with no cell handed to it, and no
        // death of it told.
        let _ = os.remove_all(&python::run_file(&self.kernel));
        let _ = os.remove_all(&python::told_file(&self.kernel));
        let launch = CellLaunch {
            kernel_dir: self.kernel.dir().to_owned(),
            cell_dir: dir,
            lang: Lang::Python,
            argv: python::argv(),
            marker: (
                MARKER_NAME.to_owned(),
                format!("{}:{}", self.nonce, python::INTERPRETER_MARK),
            ),
        };
        let pid = os
            .spawn_cell(&launch)
            .map_err(|e: OsError| format!("cannot start the Python interpreter: {e}"))?;
        let start = os.process(pid).map_or(0, |p| p.starttime);
        self.py = Some((pid, start));
        let record = LaunchRecord::new(os, pid, start, launch.marker.1.clone());
        let _ = os.write_atomic(&python::launch_file(&self.kernel), &to_json(&record));
        Ok((pid, start, untold))
    }

    /// Every live process the kernel owns: its daemon's descendants (shims,
    /// the interpreter, orphans it reaped), whatever carries its nonce, and
    /// every tracked cell's processes.
    fn owned_processes(&self, os: &dyn Os) -> BTreeSet<Pid> {
        let table = Table::snapshot(os);
        let self_pid = os.self_pid();
        let mut protected = procs::protected(&table, self_pid);
        // The kernel's files are this daemon's only while its config names
        // its nonce: once its directory was removed and a new daemon
        // spawned there, they, and the daemon its identity names, are the
        // new one's (full_disk seed 103399: the old daemon's exit sweep
        // KILLed the new daemon).
        let own_files = kernel::config_names(os, &self.kernel, &self.nonce) == Some(true);
        if let Some(other) = kernel::live_daemon(os, &self.kernel).filter(|id| id.pid != self_pid) {
            protected.extend(table.tree_but(other.pid, &BTreeSet::new()));
        }
        let mut set = if own_files {
            kernel_processes(os, &table, &self.kernel, &protected)
        } else {
            BTreeSet::new()
        };
        set.extend(table.descendants(self_pid));
        for t in self.cells.values() {
            let scope = CellScope {
                shim: t.shim.map(|s| s.0),
                pgid: t.pgid,
                marker: t.marker.clone(),
                other_markers: Vec::new(),
                extra: t.leftovers.clone(),
                cgroup: t.cgroup.clone(),
            };
            set.extend(procs::cell_processes(os, &table, &scope, &protected));
        }
        set.retain(|p| !protected.contains(p) && table.get(*p).is_some_and(|i| !i.zombie));
        set
    }

    /// One tick of a stop (see the module doc): tombstones and TERM at
    /// once, the exit sweep once the grace period has passed (or at once,
    /// when nothing is left to wait for).
    fn stop_step(&mut self, os: &mut dyn Os, now: Timestamp) -> DaemonStep {
        let Some(mut stop) = self.stop else {
            return DaemonStep::Continue {
                next_wake: now + TICK,
            };
        };
        if !stop.term_sent {
            // Before the TERM, so that a shim that sees its cell end
            // names the stop as the reason, not a signal.
            for seq in self.unfinished(os) {
                let _ = tombstone::write(os, &self.kernel.cell(seq), CancelReason::Stopped);
            }
            // Not the shims: killed by the TERM, a shim's cell would lose
            // what names it (a `setsid env -i` child it had not recorded
            // yet), and its result; the exit sweep KILLs them with the
            // rest (daemon_then_shim_killed_escapes seed 102525).
            let shims = self.shims();
            let mut set = self.owned_processes(os);
            set.retain(|p| !shims.contains(p));
            procs::signal_each(os, &set, Signal::Term);
            stop.term_sent = true;
            self.stop = Some(stop);
            if !set.is_empty() {
                return DaemonStep::Continue {
                    next_wake: now + TICK,
                };
            }
        }
        let over = now >= stop.since + self.grace() || self.owned_processes(os).is_empty();
        if !over {
            return DaemonStep::Continue {
                next_wake: (now + TICK).min(stop.since + self.grace()),
            };
        }
        self.begin_exit(now, ExitCause::Stopped);
        let step = self.exit_sweep(os, now, now + EXIT_BOUND);
        if step == DaemonStep::Exit {
            self.close_stopped(os);
        }
        step
    }

    /// Cells submitted to this kernel whose journal is not done.
    fn unfinished(&self, os: &dyn Os) -> Vec<CellSeq> {
        cell_seqs(os, &self.kernel)
            .into_iter()
            .filter(|&seq| {
                let cell = self.kernel.cell(seq);
                os.exists(&cell.submission()) && !os.exists(&journal::done_flag(&cell.journal()))
            })
            .collect()
    }

    /// A stopped kernel's last act: every cell that did not finish is
    /// resolved with the stop as its error (a result a shim settled
    /// before stays), so nobody waits on it and nothing runs it later.
    /// The exit is announced first, as an idle exit is: a submit that
    /// records its cell after this look finds the announcement, waits for
    /// this daemon to be gone, and withdraws the cell for the next daemon
    /// (daemon_termed seed 103343: a cell recorded during the stop's last
    /// tick was left open, and its client told the state was lost in
    /// flight).
    fn close_stopped(&mut self, os: &mut dyn Os) {
        let _ = os.write_atomic(&self.kernel.exiting(), self.nonce.as_bytes());
        for seq in self.unfinished(os) {
            let cell = self.kernel.cell(seq);
            let Ok(mut w) = JournalWriter::open(os, &cell.journal(), DEFAULT_CAP) else {
                continue;
            };
            if !os.exists(&cell.journal()) {
                // Never taken: it is accepted and resolved at once.
                if let Ok(Some(sub)) = read_json::<Submission>(os, &cell.submission()) {
                    let _ = w.push(
                        os,
                        EntryKind::Accepted {
                            request_id: sub.request_id,
                        },
                    );
                }
            }
            let _ = w.close(os, CancelReason::Stopped.outcome(), Vec::new());
        }
    }

    /// Kills everything the kernel owns (STOP + KILL, again each tick),
    /// then exits.
    fn exit_sweep(&mut self, os: &mut dyn Os, now: Timestamp, deadline: Timestamp) -> DaemonStep {
        let set = self.owned_processes(os);
        if set.is_empty() || now >= deadline {
            for g in self.cells.values().filter_map(|t| t.cgroup.as_deref()) {
                let _ = os.remove_cgroup(g);
            }
            // And those its files name (cells no longer tracked, kept
            // leftovers, now ended): left to the shutdown, they outlived
            // a kernel whose directory went before it (python_bystander
            // seed 253: an idle exit, then a temp cleaner).
            remove_cgroups(os, &self.kernel);
            // A daemon whose kernel's directory was removed (its config
            // gone, or a later daemon's) retires its nonce: its client
            // spawns under a new one from now on, so a copy of its spawn
            // that arrives late (held by the network, read by a channel
            // after the client's retry) must start nothing. A spawn
            // records the nonce whose config it replaces and a shutdown
            // the one it shuts, but with the config removed neither can
            // (full_disk seed 104645: a held spawn started a daemon after
            // the shutdown, nobody's). An idle exit keeps its nonce: its
            // client, crashed before it heard the spawn's answer, spawns
            // under it again and must get a daemon, not a conflict
            // (sandbox_bounce seed 161).
            if kernel::config_names(os, &self.kernel, &self.nonce) == Some(false) {
                if let Some(shut) = self.kernel.shut() {
                    if !kernel::was_shut(os, &shut, &self.nonce) {
                        let _ = kernel::record_shut(os, &shut, &self.nonce);
                    }
                }
            }
            return DaemonStep::Exit;
        }
        procs::stop_and_kill(os, &set);
        DaemonStep::Continue {
            next_wake: now + TICK,
        }
    }
}

/// The planted bug [`crate::mutation::Mutation::KillBeforeGrace`]: never,
/// without the `mutations` feature.
fn kill_before_grace() -> bool {
    #[cfg(feature = "mutations")]
    {
        crate::mutation::active(crate::mutation::Mutation::KillBeforeGrace)
    }
    #[cfg(not(feature = "mutations"))]
    {
        false
    }
}

/// The planted bug [`crate::mutation::Mutation::IdleDuringCancel`]:
/// never, without the `mutations` feature.
fn idle_during_cancel() -> bool {
    #[cfg(feature = "mutations")]
    {
        crate::mutation::active(crate::mutation::Mutation::IdleDuringCancel)
    }
    #[cfg(not(feature = "mutations"))]
    {
        false
    }
}

/// The planted bug [`crate::mutation::Mutation::IdleExitUnannounced`]:
/// never, without the `mutations` feature.
fn idle_exit_unannounced() -> bool {
    #[cfg(feature = "mutations")]
    {
        crate::mutation::active(crate::mutation::Mutation::IdleExitUnannounced)
    }
    #[cfg(not(feature = "mutations"))]
    {
        false
    }
}

/// The planted bug [`crate::mutation::Mutation::NoteKeptStateLost`]:
/// never, without the `mutations` feature.
fn note_kept_state_lost() -> bool {
    #[cfg(feature = "mutations")]
    {
        crate::mutation::active(crate::mutation::Mutation::NoteKeptStateLost)
    }
    #[cfg(not(feature = "mutations"))]
    {
        false
    }
}

/// The cgroups of every tracked cell but `seq`'s: what a search for
/// `seq`'s processes must leave alone.
fn groups_but(groups: &[(CellSeq, String)], seq: CellSeq) -> Vec<String> {
    groups
        .iter()
        .filter(|(s, _)| *s != seq)
        .map(|(_, g)| g.clone())
        .collect()
}
