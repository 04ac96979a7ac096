//! The process table: what a simulated process is, and the kernel's part of
//! its life — fork (pid allocation with reuse, inherited group, session,
//! environment, descriptors and ignored signals), exit (descriptors closed,
//! children reparented to the nearest living subreaper ancestor or pid 1,
//! orphaned stopped groups hung up), and reaping by the parent.

use super::events::ProcEventKind;
use super::interp::Shell;
use super::python::PyInterp;
use super::shim::Shim;
use super::signals::SimSignal;
use super::SimOs;
use std::collections::BTreeMap;
use std::fmt;
use tether_core::agent::{OsError, Pid};
use tether_core::time::Timestamp;
use tether_scenarios::workload::Step;

/// How a process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ExitStatus {
    /// `exit(code)`.
    Code(i32),
    /// Killed by a signal.
    Signaled(SimSignal),
}

impl ExitStatus {
    /// What a shell's `$?` shows: the code, or 128 + the signal number.
    pub fn shell_status(self) -> i32 {
        match self {
            ExitStatus::Code(c) => c,
            ExitStatus::Signaled(s) => 128 + s.number(),
        }
    }
}

impl fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExitStatus::Code(c) => write!(f, "exit {c}"),
            ExitStatus::Signaled(s) => write!(f, "killed by {s}"),
        }
    }
}

/// Run state of a process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunState {
    /// Running (or runnable, or sleeping).
    Running,
    /// Frozen by SIGSTOP until SIGCONT (SIGKILL still kills).
    Stopped,
    /// Exited, waiting for its parent to reap it.
    Zombie(ExitStatus),
}

/// What a process does with a catchable signal.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Disposition {
    /// The default action (terminate, for the signals modelled).
    #[default]
    Default,
    /// Ignored (`trap '' TERM`); survives fork and exec.
    Ignore,
    /// A shell trap running these steps; reset to default in children.
    Trap(Vec<Step>),
}

impl Disposition {
    /// What a child (fork + exec) inherits: ignores stay, traps reset.
    fn inherited(&self) -> Disposition {
        match self {
            Disposition::Ignore => Disposition::Ignore,
            _ => Disposition::Default,
        }
    }
}

/// Where a descriptor (stdout or stderr) goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fd {
    /// `/dev/null` (or closed).
    Null,
    /// The write end of a pipe.
    Pipe(u64),
}

/// Which cell a process was born from (ground truth, whatever it did to its
/// group, session or environment afterwards).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct CellRef {
    /// The kernel directory.
    pub kernel_dir: String,
    /// The cell directory.
    pub cell_dir: String,
    /// The cell's sequence number (the cell directory's name), if numeric.
    pub seq: Option<u64>,
}

/// What role a process plays, for observation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    /// Pid 1 of the sandbox.
    Init,
    /// An exec call's command (an agent op).
    Exec,
    /// A kernel daemon.
    Daemon {
        /// Its kernel directory.
        kernel_dir: String,
    },
    /// A cell's shim.
    Shim,
    /// A process of a cell (main process or descendant).
    Cell,
    /// A Python kernel's persistent interpreter (serves every cell of its
    /// kernel; not a process of any one cell).
    Interpreter,
}

/// What a process runs.
#[derive(Debug)]
pub(crate) enum Program {
    /// Pid 1: reaps orphans (if configured to).
    Init,
    /// Driven from outside (op commands, daemons): reaps its children at once.
    External,
    /// A simulated shim (a shell cell's, or a Python kernel's).
    Shim(Box<Shim>),
    /// A shell interpreting a workload.
    Shell(Box<Shell>),
    /// A Python kernel's interpreter.
    Python(Box<PyInterp>),
    /// `sleep` until then.
    Sleep { until: Timestamp },
    /// `tether-call`.
    Caller(Box<super::caller::CallerRun>),
    /// Taken out while it runs (never observable from outside).
    Running,
}

/// One simulated process.
#[derive(Debug)]
pub(crate) struct Proc {
    pub(crate) pid: Pid,
    pub(crate) ppid: Pid,
    pub(crate) pgid: Pid,
    pub(crate) sid: Pid,
    pub(crate) argv: Vec<String>,
    pub(crate) env: BTreeMap<String, String>,
    pub(crate) cwd: String,
    pub(crate) starttime: u64,
    pub(crate) state: RunState,
    pub(crate) subreaper: bool,
    /// KILLed when its parent exits (`PR_SET_PDEATHSIG`; not inherited
    /// on fork, as on Linux).
    pub(crate) dies_with_parent: bool,
    pub(crate) term: Disposition,
    pub(crate) int: Disposition,
    pub(crate) hup: Disposition,
    /// A trapped TERM arrived and its trap has not run yet.
    pub(crate) trap_pending: bool,
    /// SIGINT runs a handler of the program (Python's); not inherited.
    pub(crate) int_handler: bool,
    /// A SIGINT for that handler arrived and has not been handled yet.
    pub(crate) int_pending: bool,
    /// Catchable signals that arrived while stopped.
    pub(crate) pending: Vec<SimSignal>,
    pub(crate) stdout: Fd,
    pub(crate) stderr: Fd,
    /// Read ends of pipes this process holds (closed when it exits).
    pub(crate) reads: Vec<u64>,
    /// Write ends of pipes it holds besides stdout and stderr (closed when
    /// it exits; not inherited: close-on-exec).
    pub(crate) writes: Vec<u64>,
    pub(crate) program: Program,
    pub(crate) origin: Option<CellRef>,
    pub(crate) role: Role,
    /// The cgroup it is a member of (a cell's own, see
    /// [`super::SimOsConfig::cgroup_root`]); `None`: the root one.
    /// Inherited on fork, as on Linux.
    pub(crate) cgroup: Option<String>,
}

impl Proc {
    pub(crate) fn alive(&self) -> bool {
        !matches!(self.state, RunState::Zombie(_))
    }
}

/// How to make a child.
pub(crate) struct ForkSpec {
    pub(crate) argv: Vec<String>,
    pub(crate) new_session: bool,
    pub(crate) new_group: bool,
    /// Replaces the inherited environment.
    pub(crate) env: Option<BTreeMap<String, String>>,
    pub(crate) stdio: Option<(Fd, Fd)>,
    /// A background job of a non-interactive shell: SIGINT ignored.
    pub(crate) background: bool,
    pub(crate) program: Program,
    pub(crate) role: Role,
    pub(crate) origin: Option<Option<CellRef>>,
    /// `PR_SET_PDEATHSIG` with KILL, set between its fork and its exec.
    pub(crate) dies_with_parent: bool,
}

impl ForkSpec {
    pub(crate) fn new(argv: &[&str], program: Program, role: Role) -> ForkSpec {
        ForkSpec {
            argv: argv.iter().map(|s| (*s).to_owned()).collect(),
            new_session: false,
            new_group: false,
            env: None,
            stdio: None,
            background: false,
            program,
            role,
            origin: None,
            dies_with_parent: false,
        }
    }
}

/// A pipe: bytes written and not yet read, who can still write, whether
/// anyone still reads.
#[derive(Debug, Default)]
pub(crate) struct Pipe {
    pub(crate) buf: Vec<u8>,
    pub(crate) writers: u32,
    pub(crate) reader_open: bool,
}

impl SimOs {
    /// Runs process `pid`'s program through `drive`, with the program taken
    /// out of the table so that `drive` can use the whole OS, and puts it
    /// back if the process still lives and was not given another program.
    /// False (nothing done) if `pid` is gone or `take` refuses its program.
    pub(crate) fn step_program<T>(
        &mut self,
        pid: Pid,
        take: fn(Program) -> Result<T, Program>,
        put: fn(T) -> Program,
        drive: impl FnOnce(&mut SimOs, &mut T) -> bool,
    ) -> bool {
        let Some(p) = self.procs.get_mut(&pid) else {
            return false;
        };
        let program = std::mem::replace(&mut p.program, Program::Running);
        let mut state = match take(program) {
            Ok(state) => state,
            Err(program) => {
                p.program = program;
                return false;
            }
        };
        let progress = drive(self, &mut state);
        if let Some(p) = self.procs.get_mut(&pid) {
            if p.alive() && matches!(p.program, Program::Running) {
                p.program = put(state);
            }
        }
        progress
    }

    /// Runs `f` as process `pid` (the caller of whatever it does).
    pub(crate) fn as_process(&mut self, pid: Pid, f: impl FnOnce(&mut SimOs) -> bool) -> bool {
        let saved = self.current;
        self.current = pid;
        let progress = f(self);
        self.current = saved;
        progress
    }

    /// The next free pid after the last one handed out, wrapping at
    /// `pid_max` (so pids are reused, as on Linux).
    fn alloc_pid(&mut self) -> Result<Pid, OsError> {
        if let Some(pid) = self.reuse_pid.filter(|&p| !self.pid_in_use(p)) {
            self.reuse_pid = None;
            self.pids_wrapped = true;
            return Ok(pid);
        }
        let max = self.config.pid_max.max(2);
        for _ in 0..max {
            let pid = if self.next_pid >= max || self.next_pid == 0 {
                self.pids_wrapped |= self.next_pid >= max;
                if self.procs.contains_key(&1) {
                    2
                } else {
                    1
                }
            } else {
                self.next_pid
            };
            self.next_pid = pid + 1;
            if !self.pid_in_use(pid) {
                return Ok(pid);
            }
        }
        Err(OsError::Other("fork: no free pid (EAGAIN)".into()))
    }

    /// Linux frees a pid only once no process has it as its pid, its
    /// process group or its session: a killed session leader's number
    /// stays taken while its session has members.
    fn pid_in_use(&self, pid: Pid) -> bool {
        self.procs.contains_key(&pid) || self.procs.values().any(|p| p.pgid == pid || p.sid == pid)
    }

    /// The next process born once `pid` is free (its entry reaped, no
    /// group or session named by it) takes it, as a wrap of a small pid
    /// space landing just then would: the same pid, another start time.
    pub fn reuse_pid_next(&mut self, pid: Pid) {
        self.reuse_pid = Some(pid);
    }

    /// Clock ticks (100 Hz) since boot: `/proc/PID/stat` field 22.
    pub(crate) fn ticks(&self) -> u64 {
        self.now.saturating_since(self.boot_at).as_millis() as u64 / 10
    }

    /// Forks `parent` (0: a process entering from outside the sandbox's pid
    /// namespace, like an exec call) into a new process as `spec` says.
    pub(crate) fn fork(&mut self, parent: Pid, spec: ForkSpec) -> Result<Pid, OsError> {
        let pid = self.alloc_pid()?;
        let (pgid, sid, env, cwd, term, int, hup, stdio, origin, cgroup) =
            match self.procs.get(&parent) {
                Some(p) if p.alive() => (
                    p.pgid,
                    p.sid,
                    p.env.clone(),
                    p.cwd.clone(),
                    p.term.inherited(),
                    p.int.inherited(),
                    p.hup.inherited(),
                    (p.stdout, p.stderr),
                    p.origin.clone(),
                    p.cgroup.clone(),
                ),
                Some(_) => return Err(OsError::Other(format!("fork: parent {parent} has exited"))),
                None if parent == 0 => (
                    pid,
                    pid,
                    BTreeMap::new(),
                    "/".to_owned(),
                    Disposition::Default,
                    Disposition::Default,
                    Disposition::Default,
                    (Fd::Null, Fd::Null),
                    None,
                    None,
                ),
                None => return Err(OsError::NotFound),
            };
        let pgid = if spec.new_session || spec.new_group {
            pid
        } else {
            pgid
        };
        let sid = if spec.new_session { pid } else { sid };
        let (stdout, stderr) = spec.stdio.unwrap_or(stdio);
        for fd in [stdout, stderr] {
            if let Fd::Pipe(id) = fd {
                if let Some(pipe) = self.pipes.get_mut(&id) {
                    pipe.writers += 1;
                }
            }
        }
        let origin = spec.origin.unwrap_or(origin);
        let proc = Proc {
            pid,
            ppid: parent,
            pgid,
            sid,
            argv: spec.argv,
            env: spec.env.unwrap_or(env),
            cwd,
            starttime: self.ticks(),
            state: RunState::Running,
            subreaper: false,
            dies_with_parent: spec.dies_with_parent,
            term,
            int: if spec.background {
                Disposition::Ignore
            } else {
                int
            },
            hup,
            trap_pending: false,
            int_handler: false,
            int_pending: false,
            pending: Vec::new(),
            stdout,
            stderr,
            reads: Vec::new(),
            writes: Vec::new(),
            program: spec.program,
            origin,
            role: spec.role,
            cgroup,
        };
        self.log(ProcEventKind::Spawn {
            pid,
            ppid: parent,
            pgid,
            sid,
            argv: proc.argv.clone(),
            cell: proc.origin.clone(),
            role: proc.role.clone(),
            marked: proc
                .env
                .contains_key(tether_core::agent::procs::MARKER_NAME),
        });
        self.procs.insert(pid, proc);
        Ok(pid)
    }

    /// The process that inherits the orphans of `dying`: the nearest living
    /// subreaper among its ancestors, else pid 1.
    fn find_reaper(&self, dying: Pid) -> Pid {
        let mut at = self.procs.get(&dying).map_or(0, |p| p.ppid);
        for _ in 0..self.procs.len() + 1 {
            if at <= 1 {
                break;
            }
            match self.procs.get(&at) {
                Some(p) if p.alive() && p.subreaper => return at,
                Some(p) => at = p.ppid,
                None => break,
            }
        }
        1
    }

    fn release_fd(&mut self, fd: Fd) {
        if let Fd::Pipe(id) = fd {
            if let Some(pipe) = self.pipes.get_mut(&id) {
                pipe.writers = pipe.writers.saturating_sub(1);
            }
            self.gc_pipe(id);
        }
    }

    /// Forgets a pipe nobody can write to or read from any more.
    pub(crate) fn gc_pipe(&mut self, id: u64) {
        if self
            .pipes
            .get(&id)
            .is_some_and(|p| p.writers == 0 && !p.reader_open)
        {
            self.pipes.remove(&id);
        }
    }

    /// `pid` ends with `status`: its descriptors close, its children move to
    /// their new reaper, and it becomes a zombie (reaped at once when its
    /// parent does that, e.g. pid 1 or an agent process).
    pub(crate) fn exit_proc(&mut self, pid: Pid, status: ExitStatus) {
        let Some(p) = self.procs.get_mut(&pid) else {
            return;
        };
        if !p.alive() {
            return;
        }
        self.note_daemon_exit(pid);
        let Some(p) = self.procs.get_mut(&pid) else {
            return;
        };
        p.state = RunState::Zombie(status);
        p.pending.clear();
        let (out, err, pgid, ppid) = (p.stdout, p.stderr, p.pgid, p.ppid);
        p.stdout = Fd::Null;
        p.stderr = Fd::Null;
        p.program = Program::Running;
        let reads = std::mem::take(&mut p.reads);
        let writes = std::mem::take(&mut p.writes);
        self.release_fd(out);
        self.release_fd(err);
        for id in writes {
            self.release_fd(Fd::Pipe(id));
        }
        for id in reads {
            if let Some(pipe) = self.pipes.get_mut(&id) {
                pipe.reader_open = false;
            }
            self.gc_pipe(id);
        }
        self.log(ProcEventKind::Exit { pid, status });

        let reaper = self.find_reaper(pid);
        let children: Vec<Pid> = self.children_of(pid);
        // Groups this exit may orphan, as Linux's `kill_orphaned_pgrp`
        // finds them: its own, if its parent was the group's link out
        // (another group of the same session), and each child's, if this
        // process was that child group's link.
        let sid = self.procs.get(&pid).map_or(0, |p| p.sid);
        let mut groups = Vec::new();
        if self
            .procs
            .get(&ppid)
            .is_some_and(|parent| parent.pgid != pgid && parent.sid == sid)
        {
            groups.push(pgid);
        }
        let mut death_signalled = Vec::new();
        for child in &children {
            if let Some(c) = self.procs.get_mut(child) {
                if c.pgid != pgid && c.sid == sid {
                    groups.push(c.pgid);
                }
                c.ppid = reaper;
                if std::mem::take(&mut c.dies_with_parent) && c.alive() {
                    death_signalled.push(*child);
                }
            }
            self.log(ProcEventKind::Reparent {
                pid: *child,
                to: reaper,
            });
        }
        groups.sort_unstable();
        groups.dedup();
        for g in groups {
            self.hang_up_orphaned_group(g);
        }
        for child in death_signalled {
            let _ = self.deliver(0, child, SimSignal::Kill);
        }
        if self.reaps_at_once(reaper) {
            self.reap_children(reaper);
        }
        if ppid == 0 || self.reaps_at_once(ppid) {
            self.reap(pid, ppid);
        }
    }

    /// Does `pid` reap its children as soon as they exit?
    fn reaps_at_once(&self, pid: Pid) -> bool {
        match self.procs.get(&pid) {
            Some(p) if p.alive() => match p.program {
                Program::Init => self.config.init_reaps,
                Program::External => true,
                _ => false,
            },
            _ => false,
        }
    }

    /// Pids whose parent is `pid`, in order.
    pub(crate) fn children_of(&self, pid: Pid) -> Vec<Pid> {
        self.procs
            .values()
            .filter(|c| c.ppid == pid && c.pid != pid)
            .map(|c| c.pid)
            .collect()
    }

    /// Removes a zombie; `by` is the reaping parent (0: outside the sandbox).
    pub(crate) fn reap(&mut self, pid: Pid, by: Pid) -> Option<ExitStatus> {
        let status = match self.procs.get(&pid).map(|p| p.state) {
            Some(RunState::Zombie(status)) => status,
            _ => return None,
        };
        self.procs.remove(&pid);
        self.log(ProcEventKind::Reap { pid, by });
        Some(status)
    }

    /// Reaps every zombie child of `parent`; returns them with their status.
    pub(crate) fn reap_children(&mut self, parent: Pid) -> Vec<(Pid, ExitStatus)> {
        let zombies: Vec<Pid> = self
            .procs
            .values()
            .filter(|c| c.ppid == parent && !c.alive())
            .map(|c| c.pid)
            .collect();
        zombies
            .into_iter()
            .filter_map(|z| self.reap(z, parent).map(|s| (z, s)))
            .collect()
    }

    /// POSIX: when a process group becomes orphaned (no member has a parent
    /// in another group of the same session; a parent that is PID 1 does
    /// not count) and holds a stopped member, every member gets SIGHUP then
    /// SIGCONT. Called only for a group an exit may have orphaned: one
    /// orphaned all along (a session leader's, whose parent is in another
    /// session) is never hung up.
    fn hang_up_orphaned_group(&mut self, pgid: Pid) {
        let members: Vec<Pid> = self
            .procs
            .values()
            .filter(|p| p.pgid == pgid && p.alive())
            .map(|p| p.pid)
            .collect();
        let any_stopped = members.iter().any(|m| {
            self.procs
                .get(m)
                .is_some_and(|p| p.state == RunState::Stopped)
        });
        if !any_stopped {
            return;
        }
        let orphaned = members.iter().all(|m| {
            let Some(p) = self.procs.get(m) else {
                return true;
            };
            match self.procs.get(&p.ppid) {
                Some(parent) if parent.alive() && p.ppid != 1 => {
                    parent.pgid == pgid || parent.sid != p.sid
                }
                _ => true,
            }
        });
        if orphaned {
            for m in members {
                let _ = self.deliver(0, m, SimSignal::Hup);
                let _ = self.deliver(0, m, SimSignal::Cont);
            }
        }
    }

    /// Creates a pipe with one reader and no writers yet.
    pub(crate) fn new_pipe(&mut self) -> u64 {
        self.next_pipe += 1;
        self.pipes.insert(
            self.next_pipe,
            Pipe {
                buf: Vec::new(),
                writers: 0,
                reader_open: true,
            },
        );
        self.next_pipe
    }

    /// `pid` writes `data` to `fd`. A pipe without a reader kills the writer
    /// with SIGPIPE; returns false then.
    pub(crate) fn write_fd(&mut self, pid: Pid, fd: Fd, data: &[u8]) -> bool {
        let Fd::Pipe(id) = fd else {
            return true;
        };
        match self.pipes.get_mut(&id) {
            Some(pipe) if pipe.reader_open => {
                pipe.buf.extend_from_slice(data);
                // Ground truth: what a cell's process wrote to its stderr.
                if let Some(p) = self.procs.get(&pid) {
                    if let (
                        Role::Cell,
                        Some(CellRef {
                            kernel_dir,
                            seq: Some(seq),
                            ..
                        }),
                        true,
                    ) = (&p.role, &p.origin, p.stderr == fd)
                    {
                        self.stderr_written
                            .entry((kernel_dir.clone(), *seq))
                            .or_default()
                            .extend_from_slice(data);
                    }
                }
                true
            }
            _ => {
                let _ = self.deliver(0, pid, SimSignal::Pipe);
                self.procs.get(&pid).is_some_and(|p| p.alive())
            }
        }
    }

    /// Does the pipe hold something to read, or has it reached EOF (or
    /// gone)? What a reader waits for.
    pub(crate) fn pipe_has_news(&self, id: u64) -> bool {
        self.pipes
            .get(&id)
            .is_none_or(|p| !p.buf.is_empty() || p.writers == 0)
    }

    /// Takes what is buffered in a pipe; the flag is true at end of file
    /// (no writer left and nothing buffered).
    pub(crate) fn read_pipe(&mut self, id: u64) -> (Vec<u8>, bool) {
        match self.pipes.get_mut(&id) {
            Some(pipe) => {
                let data = std::mem::take(&mut pipe.buf);
                let eof = pipe.writers == 0;
                (data, eof)
            }
            None => (Vec::new(), true),
        }
    }
}
