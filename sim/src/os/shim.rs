//! The simulated cell shim: the IO driver of the agent's own shell cell
//! shim ([`CellShim`], which makes every decision), as `agent/src/shim.rs`
//! is on Linux. Here: a child subreaper that makes the cell's cgroup in
//! the simulated hierarchy, forks the cell's shell (the workload
//! interpreter) in a new session with the env marker and its stdout and
//! stderr on two simulated pipes, reads them, reaps, and exits when the
//! machine says so.

use super::interp::{CellFiles, Shell};
use super::process::{CellRef, Disposition, ExitStatus, Fd, ForkSpec, Program, Role};
use super::SimOs;
use std::time::Duration;
use tether_core::agent::shim::PUMP_MS;
use tether_core::agent::{
    CellLaunch, CellShim, ExitStatus as CoreExit, InterpShim, Os, Pid, ShimStep,
};
use tether_core::protocol::Stream;
use tether_core::time::Timestamp;
use tether_scenarios::workload::Step;

/// A shim's machine and the simulated pipes it reads.
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
}

impl ShimRun {
    pub(crate) fn new(launch: CellLaunch, start_at: Timestamp) -> ShimRun {
        ShimRun {
            start_at: Some(start_at),
            machine: CellShim::new(launch.clone()),
            launch,
            pipes: None,
            next_tick: None,
        }
    }

    /// The cell directory it serves.
    pub(crate) fn cell_dir(&self) -> &str {
        self.machine.cell_dir()
    }

    /// Has its cell resolved ([`CellShim::resolved`])?
    pub(crate) fn resolved(&self) -> bool {
        self.machine.resolved()
    }

    /// When this shim next has something to do.
    pub(crate) fn wake(&self, os: &SimOs, pid: Pid) -> Option<Timestamp> {
        let pipes = reading(self.pipes, &self.machine).map(|(id, _)| id);
        if let Some(at) = os.shim_due(pid, self.start_at, pipes, &self.machine) {
            return Some(at);
        }
        let tick = self.next_tick.filter(|_| {
            let calls = format!("{}/calls", self.cell_dir().trim_end_matches('/'));
            os.list_dir(&calls).is_ok_and(|names| !names.is_empty())
        });
        match (self.machine.poll_timeout(os.now), tick) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// The output side both shim machines share (core's [`CellShim`] and
/// [`InterpShim`]): the streams they still read, what they are handed
/// from them, the exits they are told of; one driver reads and reaps for
/// both.
pub(crate) trait ShimOutput {
    /// Does it still read `stream`?
    fn reading(&self, stream: Stream) -> bool;
    /// Is it waiting for the cell's process tree to empty?
    fn lingering(&self) -> bool;
    /// Output read from `stream`.
    fn output(&mut self, os: &mut SimOs, stream: Stream, data: &[u8]);
    /// `stream` is at its end.
    fn eof(&mut self, stream: Stream);
    /// A child it reaped.
    fn exited(&mut self, now: Timestamp, pid: Pid, status: CoreExit);
}

impl ShimOutput for CellShim {
    fn reading(&self, stream: Stream) -> bool {
        CellShim::reading(self, stream)
    }
    fn lingering(&self) -> bool {
        CellShim::lingering(self)
    }
    fn output(&mut self, os: &mut SimOs, stream: Stream, data: &[u8]) {
        // As the real shim: a journal that cannot be written is reported
        // on stderr, and it goes on.
        let _ = self.handle_output(os, stream, data);
    }
    fn eof(&mut self, stream: Stream) {
        self.handle_eof(stream);
    }
    fn exited(&mut self, now: Timestamp, pid: Pid, status: CoreExit) {
        self.handle_exit(now, pid, status);
    }
}

impl ShimOutput for InterpShim {
    fn reading(&self, stream: Stream) -> bool {
        InterpShim::reading(self, stream)
    }
    fn lingering(&self) -> bool {
        InterpShim::lingering(self)
    }
    fn output(&mut self, os: &mut SimOs, stream: Stream, data: &[u8]) {
        // As for a cell shim: an unwritable journal does not stop it.
        let _ = self.handle_output(os, stream, data);
    }
    fn eof(&mut self, stream: Stream) {
        self.handle_eof(stream);
    }
    fn exited(&mut self, _: Timestamp, pid: Pid, status: CoreExit) {
        self.handle_exit(pid, status);
    }
}

/// Of a shim's stdout and stderr pipes, those its machine still reads.
pub(crate) fn reading(
    pipes: Option<(u64, u64)>,
    machine: &impl ShimOutput,
) -> impl Iterator<Item = (u64, Stream)> + '_ {
    let pipes = pipes.map(|(out, err)| [(out, Stream::Stdout), (err, Stream::Stderr)]);
    pipes
        .into_iter()
        .flatten()
        .filter(|&(_, stream)| machine.reading(stream))
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

impl SimOs {
    /// Runs the shim `pid` as far as it gets now. True if it did anything.
    pub(crate) fn run_shim(&mut self, pid: Pid) -> bool {
        let take = |p| match p {
            Program::Shim(shim) => Ok(shim),
            other => Err(other),
        };
        self.step_program(pid, take, Program::Shim, |os, shim| {
            os.as_process(pid, |os| os.drive_shim(pid, shim))
        })
    }

    fn drive_shim(&mut self, pid: Pid, shim: &mut ShimRun) -> bool {
        if !self.shim_begins(pid, &mut shim.start_at) {
            return false;
        }
        let mut progress = false;
        loop {
            match shim.machine.poll_step(self) {
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
                    let started =
                        self.start_main(pid, shim, &argv, &marker, &env, cgroup.as_deref());
                    shim.machine.handle_started(self, started);
                }
                ShimStep::Pump => {
                    shim.next_tick = Some(self.now + Duration::from_millis(PUMP_MS));
                    // Output first, then exits: what a process wrote
                    // before it died is journaled before its end.
                    let read = self.shim_read(shim.pipes, &mut shim.machine);
                    if !read && !self.shim_reap(pid, &mut shim.machine) {
                        return progress;
                    }
                }
                ShimStep::FinalRead => {
                    shim.next_tick = None;
                    self.shim_read(shim.pipes, &mut shim.machine);
                }
                ShimStep::Linger => {
                    let read = self.shim_read(shim.pipes, &mut shim.machine);
                    let reaped = self.shim_reap(pid, &mut shim.machine);
                    if !self.children_of(pid).is_empty() {
                        return progress || read || reaped;
                    }
                    shim.machine.handle_tree_empty(self);
                }
                ShimStep::Retry => {
                    // Until the machine's retry time (its next wake).
                    let read = self.shim_read(shim.pipes, &mut shim.machine);
                    let reaped = self.shim_reap(pid, &mut shim.machine);
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

    /// As both shims begin: false while the exec of the agent binary is
    /// not over; then the shim is a child subreaper.
    pub(crate) fn shim_begins(&mut self, pid: Pid, start_at: &mut Option<Timestamp>) -> bool {
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

    /// When a shim has something to do at once (or, before it began,
    /// when it begins): a child to reap, news on a pipe it reads, or its
    /// lingering over. `None`: only its machine's timers can wake it.
    pub(crate) fn shim_due(
        &self,
        pid: Pid,
        start_at: Option<Timestamp>,
        mut pipes: impl Iterator<Item = u64>,
        machine: &impl ShimOutput,
    ) -> Option<Timestamp> {
        if start_at.is_some() {
            return start_at;
        }
        let due = self.procs.values().any(|c| c.ppid == pid && !c.alive())
            || pipes.any(|id| self.pipe_has_news(id))
            || (machine.lingering() && self.children_of(pid).is_empty());
        due.then_some(self.now)
    }

    /// Hands `machine` what the stdout and stderr pipes it reads hold.
    /// True if anything.
    pub(crate) fn shim_read(
        &mut self,
        pipes: Option<(u64, u64)>,
        machine: &mut impl ShimOutput,
    ) -> bool {
        let mut any = false;
        let open: Vec<_> = reading(pipes, machine).collect();
        for (id, stream) in open {
            let (data, at_eof) = self.read_pipe(id);
            if !data.is_empty() {
                any = true;
                machine.output(self, stream, &data);
            }
            if at_eof {
                any = true;
                machine.eof(stream);
            }
        }
        any
    }

    /// `waitpid(-1, WNOHANG)`: the shim's main child (the cell's shell,
    /// the interpreter) and any reparented orphan.
    pub(crate) fn shim_reap(&mut self, pid: Pid, machine: &mut impl ShimOutput) -> bool {
        let reaped = self.reap_children(pid);
        for &(child, status) in &reaped {
            machine.exited(self.now, child, core_exit(status));
        }
        !reaped.is_empty()
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
        let mut env = self
            .procs
            .get(&pid)
            .map(|p| p.env.clone())
            .unwrap_or_default();
        env.insert(marker.0.clone(), marker.1.clone());
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
