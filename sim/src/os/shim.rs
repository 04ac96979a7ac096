//! The simulated cell shim: the IO driver of the agent's own shell cell
//! shim ([`CellShim`], which makes every decision), as `agent/src/shim.rs`
//! is on Linux. Here: a child subreaper that makes the cell's cgroup in
//! the simulated hierarchy, forks the cell's shell (the workload
//! interpreter) in a new session with the env marker and its stdout and
//! stderr on two simulated pipes, reads them, reaps, and exits when the
//! machine says so.

use super::interp::{CellFiles, Shell};
use super::process::{CellRef, Disposition, ExitStatus, Fd, ForkSpec, Program, Role};
use super::pyshim::PyShimRun;
use super::SimOs;
use std::collections::BTreeMap;
use std::time::Duration;
use tether_core::agent::layout::{CellLayout, KernelLayout};
use tether_core::agent::shim::orphans::OrphanRecords;
use tether_core::agent::shim::{LINGER_MS, PUMP_MS};
use tether_core::agent::{CellLaunch, CellShim, ExitStatus as CoreExit, Os, Pid, ShimStep};
use tether_core::protocol::{Lang, Stream};
use tether_core::time::Timestamp;
use tether_scenarios::workload::Step;

/// A shim process's program: as `tether-agent shim` runs one or the
/// other by the launch's language, a shell cell's shim or a Python
/// kernel's interpreter shim.
#[derive(Debug)]
// Its variants differ in size, but it lives boxed in `Program::Shim`.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Shim {
    /// A shell cell's shim.
    Cell(ShimRun),
    /// A Python kernel's interpreter shim.
    Interp(PyShimRun),
}

impl Shim {
    pub(crate) fn new(launch: CellLaunch, start_at: Timestamp) -> Shim {
        match launch.lang {
            Lang::Shell => Shim::Cell(ShimRun::new(launch, start_at)),
            Lang::Python => Shim::Interp(PyShimRun::new(launch, start_at)),
        }
    }

    /// The cell directory it serves (an interpreter shim's: a pseudo one).
    pub(crate) fn cell_dir(&self) -> &str {
        match self {
            Shim::Cell(s) => s.cell_dir(),
            Shim::Interp(s) => s.cell_dir(),
        }
    }

    /// Has the shell cell it serves resolved? (An interpreter shim serves
    /// every cell of its kernel: never.)
    pub(crate) fn resolved(&self) -> bool {
        matches!(self, Shim::Cell(s) if s.machine.resolved())
    }

    /// When this shim next has something to do.
    pub(crate) fn wake(&self, os: &SimOs, pid: Pid) -> Option<Timestamp> {
        if os.stopped_at_write(pid) {
            // Stopped after a write, to be killed: it does nothing more.
            return None;
        }
        match self {
            Shim::Cell(s) => s.wake(os, pid),
            Shim::Interp(s) => s.wake(os, pid),
        }
    }
}

/// A shell cell shim's machine and the simulated pipes it reads.
#[derive(Debug)]
pub(crate) struct ShimRun {
    launch: CellLaunch,
    /// Until its first step: when the exec of the agent binary is over.
    start_at: Option<Timestamp>,
    machine: CellShim,
    /// stdout, stderr (read ends).
    pipes: Option<(u64, u64)>,
    /// While the cell runs: the next look at its tool calls (one per
    /// [`PUMP_MS`], as the real shim's pump; the simulation wakes for it
    /// only while the calls directory holds something).
    next_tick: Option<Timestamp>,
    /// While it lingers: its next look ([`LINGER_MS`], as the real shim's;
    /// the simulation wakes for it only while its kernel's config is gone,
    /// the one thing such a look acts on that no event announces).
    next_linger: Option<Timestamp>,
    /// When its poll's timeout fires, as armed at the end of its last run:
    /// the machine's next deadline, late by the world's timer slack.
    /// `None` until it first ran (then its machine's deadline counts).
    timer: Option<Option<Timestamp>>,
}

impl ShimRun {
    pub(crate) fn new(launch: CellLaunch, start_at: Timestamp) -> ShimRun {
        ShimRun {
            start_at: Some(start_at),
            machine: CellShim::new(launch.clone()),
            launch,
            pipes: None,
            next_tick: None,
            next_linger: None,
            timer: None,
        }
    }

    /// The cell directory it serves.
    pub(crate) fn cell_dir(&self) -> &str {
        self.machine.cell_dir()
    }

    /// While its cell runs, when the real shim would see a child's exit
    /// that no news on its pipes announced: it reaps after each pump's
    /// poll, which returns at once on news and else times out a
    /// [`PUMP_MS`] after it began (or, its pipes closed, after a sleep
    /// as long). So the shell's exit with its pipes held open by a
    /// background child, or closed already, is seen at the next tick of
    /// that pump, up to a [`PUMP_MS`] later: a window in which the world
    /// goes on (a full disk frees, a cancel lands). Ticks run every
    /// [`PUMP_MS`] from the last pump. `None` (at once) otherwise.
    fn reaps_at(&self, now: Timestamp) -> Option<Timestamp> {
        let tick = self
            .next_tick
            .filter(|_| self.machine.main_pid().is_some())?;
        Some(next_pump(tick, now))
    }

    /// The pipes the machine still reads, with their streams.
    fn reading(&self) -> Vec<(u64, Stream)> {
        reading(self.pipes, |s| self.machine.reading(s))
    }

    fn wake(&self, os: &SimOs, pid: Pid) -> Option<Timestamp> {
        let pipes = self.reading().into_iter().map(|(id, _)| id);
        let lingering = self.machine.lingering();
        if let Some(at) = os.shim_due(pid, self.start_at, pipes, lingering, self.reaps_at(os.now)) {
            return Some(at);
        }
        let kernel_gone = || !os.exists(&KernelLayout::new(&self.launch.kernel_dir).config());
        let tick = self
            .next_tick
            .filter(|_| os.calls_pending(self.cell_dir()) || kernel_gone());
        // The machine looks for orphans while its cell runs and while it
        // lingers, not while it retries a journal (the real shim sleeps
        // until the retry then).
        let looks = !self.machine.resolved() || lingering;
        let look = os
            .orphan_look_due(pid, self.machine.main_pid(), self.machine.orphans())
            .filter(|_| looks);
        let linger = self.next_linger.filter(|_| lingering && kernel_gone());
        let timer = self
            .timer
            .unwrap_or_else(|| self.machine.poll_timeout(os.now));
        [timer, tick, look, linger].into_iter().flatten().min()
    }
}

/// The first tick at or after `now` of a pump that ticks every
/// [`PUMP_MS`] from `tick`: when a pumping shim's poll, seeing no news,
/// next times out and it reaps.
pub(crate) fn next_pump(tick: Timestamp, now: Timestamp) -> Timestamp {
    if tick >= now {
        return tick;
    }
    let pumps = (now.as_millis() - tick.as_millis()).div_ceil(PUMP_MS);
    tick + Duration::from_millis(PUMP_MS.saturating_mul(pumps))
}

/// Of a shim's stdout and stderr pipes, those its machine still `reads`.
pub(crate) fn reading(
    pipes: Option<(u64, u64)>,
    reads: impl Fn(Stream) -> bool,
) -> Vec<(u64, Stream)> {
    let Some((out, err)) = pipes else {
        return Vec::new();
    };
    [(out, Stream::Stdout), (err, Stream::Stderr)]
        .into_iter()
        .filter(|&(_, stream)| reads(stream))
        .collect()
}

fn cell_ref(launch: &CellLaunch) -> CellRef {
    let seq = launch
        .cell_dir
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .and_then(|s| s.parse().ok());
    CellRef {
        kernel_dir: launch.kernel_dir.trim_end_matches('/').to_owned(),
        cell_dir: launch.cell_dir.trim_end_matches('/').to_owned(),
        seq,
    }
}

/// How long a held shim ([`SimOs::hold_next_cell_start`]) waits at most
/// for the cancel it is held for.
pub(crate) const HOLD_BOUND: Duration = Duration::from_secs(3);

impl SimOs {
    /// While `armed`, the next shell cell's shim is held before its first
    /// look (as if the exec of the agent binary took that long), or a
    /// Python kernel's interpreter shim before it takes the next cell
    /// handed over, until [`SimOs::release_held_shim`], [`HOLD_BOUND`] at
    /// most: the window in which a cancel finds the cell launched and not
    /// yet started.
    pub(crate) fn arm_hold(&mut self, armed: bool) {
        self.hold_next_shim = armed;
    }

    /// The shim held now, if one is.
    pub(crate) fn held_shim(&self) -> Option<Pid> {
        self.held_shim.filter(|&pid| self.is_alive(pid))
    }

    /// Lets the held shim begin now (after the usual exec time).
    pub(crate) fn release_held_shim(&mut self) {
        let Some(pid) = self.held_shim.take() else {
            return;
        };
        let at = self.now + self.config.shim_start;
        if let Some(p) = self.procs.get_mut(&pid) {
            if let Program::Shim(shim) = &mut p.program {
                match &mut **shim {
                    Shim::Cell(run) => run.start_at = run.start_at.map(|_| at),
                    Shim::Interp(run) => run.held_until = None,
                }
            }
        }
    }

    /// Cells a shim started though their cancel was recorded when it
    /// looked (ground truth for the oracle).
    pub(crate) fn started_after_cancel(&self) -> &[String] {
        &self.started_after_cancel
    }

    /// The shim `pid` starts the cell of `cell_dir` (its main process, or
    /// the interpreter's run of it). A shim's look at the tombstone and
    /// its start happen at one instant here: a cancel recorded now was
    /// there when it looked, and must have kept the cell from running at
    /// all (cancel_early: not ended once it runs).
    pub(super) fn judge_start(&mut self, pid: Pid, cell_dir: &str) {
        if self.exists(&CellLayout::from_dir(cell_dir).cancel()) {
            self.started_after_cancel.push(format!(
                "shim {pid} started {cell_dir} at {} ms, its cancel recorded before it looked",
                self.now.0
            ));
        }
    }

    /// Runs the shim `pid` (either kind) as far as it gets now. True if it
    /// did anything.
    pub(crate) fn run_shim(&mut self, pid: Pid) -> bool {
        let take = |p| match p {
            Program::Shim(shim) => Ok(shim),
            other => Err(other),
        };
        if self.stopped_at_write(pid) {
            return false;
        }
        self.step_program(pid, take, Program::Shim, |os, shim| {
            os.as_process(pid, |os| match &mut **shim {
                Shim::Cell(s) => os.shim_begins(pid, &mut s.start_at) && os.drive_shim(pid, s),
                Shim::Interp(s) => os.shim_begins(pid, &mut s.start_at) && os.drive_pyshim(pid, s),
            })
        })
    }

    /// Runs the shell cell shim `pid`, then arms its poll's timeout: a
    /// deadline still ahead fires the world's timer slack late (a loaded
    /// machine wakes a poll late), and news on a pipe meanwhile wakes it
    /// at once, as `poll(2)` does, into a machine whose deadline passed.
    fn drive_shim(&mut self, pid: Pid, shim: &mut ShimRun) -> bool {
        let progress = self.drive_shim_steps(pid, shim);
        let now = self.now;
        let slack = self.config.timer_slack;
        shim.timer = Some(
            shim.machine
                .poll_timeout(now)
                .map(|t| if t > now { t + slack } else { t }),
        );
        progress
    }

    fn drive_shim_steps(&mut self, pid: Pid, shim: &mut ShimRun) -> bool {
        let mut progress = false;
        loop {
            let Some(step) = self.step_unless_stopped(pid, |os| shim.machine.poll_step(os)) else {
                return true;
            };
            match step {
                ShimStep::MakeCgroup { name } => {
                    let made = self.make_cgroup(pid, &name);
                    if !shim.machine.handle_cgroup(self, made.clone()) {
                        if let Some(group) = made {
                            let _ = self.remove_cgroup(&group);
                        }
                    }
                }
                ShimStep::Start {
                    argv,
                    marker,
                    cgroup,
                    env,
                } => {
                    self.judge_start(pid, shim.machine.cell_dir());
                    let started =
                        self.start_main(pid, shim, &argv, &marker, &env, cgroup.as_deref());
                    shim.machine.handle_started(self, started);
                }
                ShimStep::Pump => {
                    shim.next_tick = Some(self.now + Duration::from_millis(PUMP_MS));
                    // Output first, then exits: what a process wrote
                    // before it died is journaled before its end.
                    let read = self.shim_read(shim);
                    if !read
                        && !self.shim_reap(pid, |at, child, status| {
                            shim.machine.handle_exit(at, child, status)
                        })
                    {
                        return progress;
                    }
                }
                ShimStep::FinalRead => {
                    shim.next_tick = None;
                    self.shim_read(shim);
                }
                ShimStep::Linger => {
                    shim.next_linger = Some(self.now + Duration::from_millis(LINGER_MS));
                    let read = self.shim_read(shim);
                    let reaped = self.shim_reap(pid, |at, child, status| {
                        shim.machine.handle_exit(at, child, status)
                    });
                    if !self.children_of(pid).is_empty() {
                        return progress || read || reaped;
                    }
                    shim.machine.handle_tree_empty(self);
                }
                ShimStep::Retry => {
                    // Until the machine's retry time (its next wake).
                    let read = self.shim_read(shim);
                    let reaped = self.shim_reap(pid, |at, child, status| {
                        shim.machine.handle_exit(at, child, status)
                    });
                    return progress || read || reaped;
                }
                ShimStep::Exit(code) => {
                    self.exit_proc(pid, ExitStatus::Code(i32::from(code)));
                    return true;
                }
            }
            progress = true;
        }
    }

    /// As a shim begins: false while the exec of the agent binary is not
    /// over; then the shim is a child subreaper.
    fn shim_begins(&mut self, pid: Pid, start_at: &mut Option<Timestamp>) -> bool {
        match *start_at {
            Some(at) if self.now < at => return false,
            Some(_) => *start_at = None,
            None => {}
        }
        if let Some(p) = self.procs.get_mut(&pid) {
            p.subreaper = true;
        }
        true
    }

    /// When a shim has something to do (before it began: when it
    /// begins): news on a pipe it reads or its lingering over, at once; a
    /// child to reap, at once too unless `reaps_at` says when a shim
    /// that sees no news on its pipes looks (`None`: only its machine's
    /// timers wake it).
    pub(crate) fn shim_due(
        &self,
        pid: Pid,
        start_at: Option<Timestamp>,
        mut pipes: impl Iterator<Item = u64>,
        lingering: bool,
        reaps_at: Option<Timestamp>,
    ) -> Option<Timestamp> {
        if start_at.is_some() {
            return start_at;
        }
        let news = pipes.any(|id| self.pipe_has_news(id))
            || (lingering && self.children_of(pid).is_empty());
        if news {
            return Some(self.now);
        }
        self.procs
            .values()
            .any(|c| c.ppid == pid && !c.alive())
            .then(|| reaps_at.map_or(self.now, |at| at.max(self.now)))
    }

    /// Does the calls directory of the cell at `cell_dir` hold a request
    /// (what a shim's pump-paced look at it would act on)?
    pub(crate) fn calls_pending(&self, cell_dir: &str) -> bool {
        let cell = tether_core::agent::layout::CellLayout::from_dir(cell_dir);
        self.list_dir(&tether_core::agent::calls::calls_dir(&cell))
            .is_ok_and(|names| !names.is_empty())
    }

    /// When the shim `pid` next looks for processes reparented to it
    /// ([`OrphanRecords::look`], paced like the real shim's): only while
    /// a live child other than `main` is not recorded yet (a look would
    /// find nothing new otherwise, and waking for it costs the run).
    pub(crate) fn orphan_look_due(
        &self,
        pid: Pid,
        main: Option<Pid>,
        orphans: &OrphanRecords,
    ) -> Option<Timestamp> {
        let unrecorded = self.procs.values().any(|c| {
            c.ppid == pid
                && c.pid != pid
                && c.alive()
                && Some(c.pid) != main
                && !orphans.kept(c.pid, c.starttime)
        });
        unrecorded.then(|| orphans.next_look().max(self.now))
    }

    /// Reads what each of `pipes` holds and hands it to `f` (`None`: the
    /// pipe is at its end), as the agent's `read_pipes` does for both
    /// shims. True if anything was read or ended.
    pub(crate) fn read_pipes(
        &mut self,
        pipes: &[(u64, Stream)],
        mut f: impl FnMut(&mut SimOs, Stream, Option<&[u8]>),
    ) -> bool {
        let mut any = false;
        for &(id, stream) in pipes {
            if self.stopped_at_write(self.current) {
                // Killed after a write: it reads no more.
                break;
            }
            let (data, at_eof) = self.read_pipe(id);
            if !data.is_empty() {
                any = true;
                f(self, stream, Some(&data));
            }
            if at_eof {
                any = true;
                f(self, stream, None);
            }
        }
        any
    }

    /// The shim `pid`'s environment with the cell's `marker` in it: what
    /// the process it starts (a cell's shell, an interpreter) inherits.
    pub(crate) fn marked_env(
        &self,
        pid: Pid,
        marker: &(String, String),
    ) -> BTreeMap<String, String> {
        let mut env = self
            .procs
            .get(&pid)
            .map(|p| p.env.clone())
            .unwrap_or_default();
        env.insert(marker.0.clone(), marker.1.clone());
        env
    }

    /// `waitpid(-1, WNOHANG)` for a shim: its main child (the cell's
    /// shell, the interpreter) and any reparented orphan, each handed to
    /// `f`. True if any.
    pub(crate) fn shim_reap(
        &mut self,
        pid: Pid,
        mut f: impl FnMut(Timestamp, Pid, CoreExit),
    ) -> bool {
        if self.stopped_at_write(pid) {
            return false;
        }
        let reaped = self.reap_children(pid);
        for &(child, status) in &reaped {
            f(self.now, child, core_exit(status));
        }
        !reaped.is_empty()
    }

    /// Hands the machine what the pipes it reads hold. True if anything.
    fn shim_read(&mut self, shim: &mut ShimRun) -> bool {
        let machine = &mut shim.machine;
        let pipes = reading(shim.pipes, |s| machine.reading(s));
        self.read_pipes(&pipes, |os, stream, data| match data {
            // As the real shim: a journal that cannot be written is
            // reported on stderr, and it goes on.
            Some(data) => {
                let _ = machine.handle_output(os, stream, data);
            }
            None => machine.handle_eof(stream),
        })
    }

    /// Starts the cell's shell (the workload interpreter over the cell's
    /// code) in a new session with the marker, in `cgroup`, its output on
    /// two new pipes. Fails as exec does when the program is not there.
    fn start_main(
        &mut self,
        pid: Pid,
        shim: &mut ShimRun,
        argv: &[String],
        marker: &(String, String),
        calls_env: &[(String, String)],
        cgroup: Option<&str>,
    ) -> Result<(Pid, u64), String> {
        let launch = &shim.launch;
        let cell_dir = launch.cell_dir.trim_end_matches('/').to_owned();
        // The shell script's arguments (the kernel's state directory).
        let state_dir = tether_core::agent::shell::dirs_of(argv).map(|(s, _)| s.to_owned());
        let code_path = format!("{cell_dir}/code");
        let mut shell = match self.fs.read(&code_path) {
            Ok(code) => Shell::from_code(
                &code,
                Some(CellFiles {
                    cell_dir: cell_dir.clone(),
                    state_dir,
                    marker: marker.0.clone(),
                }),
            ),
            Err(e) => Shell::from_code(format!("cannot open {code_path}: {e}").as_bytes(), None),
        };
        let program = argv.first().map_or("", String::as_str);
        shell.bash = tether_core::agent::shell::is_bash(program);
        if !program.starts_with('/') && !self.has_program(program) {
            return Err(format!("cannot start {program}: not found"));
        }
        let out = self.new_pipe();
        let err = self.new_pipe();
        if let Some(p) = self.procs.get_mut(&pid) {
            p.reads = vec![out, err];
        }
        shim.pipes = Some((out, err));
        let args: Vec<&str> = argv.iter().map(String::as_str).collect();
        let mut spec = ForkSpec::new(&args, Program::Shell(Box::new(shell)), Role::Cell);
        spec.new_session = true;
        spec.stdio = Some((Fd::Pipe(out), Fd::Pipe(err)));
        spec.origin = Some(Some(cell_ref(launch)));
        let mut env = self.marked_env(pid, marker);
        env.extend(calls_env.iter().cloned());
        spec.env = Some(env);
        let main = self
            .fork(pid, spec)
            .map_err(|e| format!("cannot start {program}: {e}"))?;
        // The child enters the cgroup before it runs the cell's code
        // (nothing runs between the fork and this).
        if let Some(group) = cgroup {
            let _ = self.join_cgroup(main, group);
        }
        // The wrapper's TERM trap: a cancel's TERM ends the shell through
        // `exit 143`, so its EXIT path saves the state.
        if let Some(p) = self.procs.get_mut(&main) {
            p.term = Disposition::Trap(vec![Step::Exit { code: 143 }]);
        }
        Ok((main, self.procs.get(&main).map_or(0, |p| p.starttime)))
    }
}

pub(crate) fn core_exit(status: ExitStatus) -> CoreExit {
    match status {
        ExitStatus::Code(c) => CoreExit::Code(c),
        ExitStatus::Signaled(s) => CoreExit::Signal(s.number()),
    }
}
