//! The simulated interpreter shim of a Python kernel: the IO driver of the
//! agent's own [`InterpShim`] (which makes every decision), as
//! `agent/src/pyshim.rs` is on Linux. Here: a child subreaper that forks
//! the simulated interpreter ([`super::python`]) in a new session with the
//! marker, its stdin, stdout and stderr on simulated pipes and the report
//! pipe as its fd 3; makes each cell's cgroup and moves the interpreter in
//! and out; writes to its stdin, reads its pipes, reaps, and exits when
//! the machine says so.

use super::process::{CellRef, ExitStatus, Fd, ForkSpec, Program, Role};
use super::python::PyInterp;
use super::shim::reading;
use super::SimOs;
use std::time::Duration;
use tether_core::agent::kernel::config_names;
use tether_core::agent::layout::KernelLayout;
use tether_core::agent::procs;
use tether_core::agent::shim::{LINGER_MS, PUMP_MS};
use tether_core::agent::{CellLaunch, InterpShim, InterpStep, Os, Pid};
use tether_core::protocol::Stream;
use tether_core::time::Timestamp;

/// The interpreter shim's machine and the simulated pipes it holds.
#[derive(Debug)]
pub(crate) struct PyShimRun {
    launch: CellLaunch,
    /// Until its first step: when the exec of the agent binary is over.
    pub(super) start_at: Option<Timestamp>,
    /// Held before it takes the cell handed over (the fault that holds a
    /// shim for a cancel, [`SimOs::arm_hold`]): until then at most.
    pub(super) held_until: Option<Timestamp>,
    machine: InterpShim,
    /// stdout, stderr, reports (read ends).
    reads: Option<[u64; 3]>,
    ctl_eof: bool,
    stdin: Option<u64>,
    /// While a cell runs: the next look at its tool calls (one per
    /// [`PUMP_MS`], as the real shim's pump; the simulation wakes for it
    /// only while the calls directory holds something, or its kernel's
    /// config is gone: the idle shim's look for that is paced too).
    next_tick: Option<Timestamp>,
    /// While it lingers: its next look ([`LINGER_MS`], as the real shim's;
    /// the simulation wakes for it only while its kernel's config is gone,
    /// the one thing such a look acts on that no event announces).
    next_linger: Option<Timestamp>,
}

impl PyShimRun {
    pub(crate) fn new(launch: CellLaunch, start_at: Timestamp) -> PyShimRun {
        PyShimRun {
            start_at: Some(start_at),
            held_until: None,
            machine: InterpShim::new(launch.clone()),
            launch,
            reads: None,
            ctl_eof: false,
            stdin: None,
            next_tick: None,
            next_linger: None,
        }
    }

    /// Its pseudo cell directory.
    pub(crate) fn cell_dir(&self) -> &str {
        self.machine.cell_dir()
    }

    /// The output pipes the machine still reads, with their streams.
    fn reading(&self) -> Vec<(u64, Stream)> {
        let pipes = self.reads.map(|[out, err, _]| (out, err));
        reading(pipes, |s| self.machine.reading(s))
    }

    /// The report pipe, while the machine reads it.
    fn reports(&self) -> Option<u64> {
        let [_, _, ctl] = self.reads?;
        (self.machine.reading_reports() && !self.ctl_eof).then_some(ctl)
    }

    /// When this shim next has something to do.
    pub(super) fn wake(&self, os: &SimOs, pid: Pid) -> Option<Timestamp> {
        if let Some(until) = self.held_until {
            return Some(until);
        }
        let pipes = self.reading().into_iter().map(|(id, _)| id);
        let lingering = self.machine.lingering();
        let look = os.orphan_look_due(pid, self.machine.interpreter(), self.machine.orphans());
        // As the machine reads it: the config gone, or a later daemon's
        // (python_cancel seed 103322: a new daemon spawned right after the
        // wipe, and the old shim, asleep, never looked).
        let kernel_gone = || {
            procs::marker_nonce(&self.launch.marker.1).is_some_and(|nonce| {
                let kernel = KernelLayout::new(&self.launch.kernel_dir);
                config_names(os, &kernel, nonce) == Some(false)
            })
        };
        // Running a cell or idle (a lingering shim's looks are below).
        let tick = self.next_tick.filter(|_| {
            !lingering
                && (self
                    .machine
                    .running_cell()
                    .is_some_and(|dir| os.calls_pending(dir))
                    || kernel_gone())
        });
        // A lingering shim acts only on a config that is gone.
        let config_gone = || !os.exists(&KernelLayout::new(&self.launch.kernel_dir).config());
        let linger = self.next_linger.filter(|_| lingering && config_gone());
        // Its pump's poll sees a death its pipes do not announce (a cell's
        // child that does not hold them; the interpreter while one does)
        // when it times out, as the cell shim's does (`ShimRun::reaps_at`).
        let reaps_at = self
            .next_tick
            .filter(|_| !lingering)
            .map(|tick| super::shim::next_pump(tick, os.now));
        os.shim_due(
            pid,
            self.start_at,
            pipes.chain(self.reports()),
            lingering,
            reaps_at,
        )
        .or_else(|| {
            [self.machine.poll_timeout(os), look, tick, linger]
                .into_iter()
                .flatten()
                .min()
        })
    }
}

impl SimOs {
    pub(super) fn drive_pyshim(&mut self, pid: Pid, shim: &mut PyShimRun) -> bool {
        if let Some(until) = shim.held_until {
            if self.now < until && self.held_shim == Some(pid) {
                return false;
            }
            shim.held_until = None;
            self.held_shim = None;
        }
        if self.hold_next_shim && shim.machine.cell_waiting(self) {
            // Held before it takes the cell (its look at the tombstone).
            self.hold_next_shim = false;
            shim.held_until = Some(self.now + super::shim::HOLD_BOUND);
            self.held_shim = Some(pid);
            return false;
        }
        let mut progress = false;
        loop {
            let Some(step) = self.step_unless_stopped(pid, |os| shim.machine.poll_step(os)) else {
                return true;
            };
            match step {
                InterpStep::StartInterpreter { argv, marker } => {
                    let started = self.start_interpreter(pid, shim, &argv, &marker);
                    shim.machine.handle_interpreter(started);
                }
                InterpStep::EnterCgroup { name, pid: py } => {
                    let made = self.make_cgroup(pid, &name).and_then(|g| {
                        if self.join_cgroup(py, &g).is_ok() {
                            Some(g)
                        } else {
                            let _ = self.remove_cgroup(&g);
                            None
                        }
                    });
                    if !shim.machine.handle_cgroup(self, made.clone()) {
                        if let Some(group) = made {
                            self.join_cgroup_of(py, pid);
                            let _ = self.remove_cgroup(&group);
                        }
                    }
                }
                InterpStep::Send { line } => {
                    // "{seq} {cell_dir} {marker} {token}\n"
                    if let Some(dir) = String::from_utf8_lossy(&line).split(' ').nth(1) {
                        self.judge_start(pid, dir);
                    }
                    let sent = shim.stdin.is_some_and(|id| match self.pipes.get_mut(&id) {
                        Some(pipe) if pipe.reader_open => {
                            pipe.buf.extend_from_slice(&line);
                            true
                        }
                        // EPIPE (the shim ignores SIGPIPE, as Rust
                        // programs do).
                        _ => false,
                    });
                    if !sent {
                        self.pyshim_close_stdin(pid, shim);
                    }
                    shim.machine.handle_sent(sent);
                }
                InterpStep::Pump => {
                    shim.next_tick = Some(self.now + Duration::from_millis(PUMP_MS));
                    let read = self.pyshim_read(shim);
                    if !read
                        && !self.shim_reap(pid, |_, child, status| {
                            shim.machine.handle_exit(child, status)
                        })
                    {
                        return progress;
                    }
                }
                InterpStep::Drain => {
                    self.pyshim_read(shim);
                }
                InterpStep::LeaveCgroup { pid: py, .. } => self.join_cgroup_of(py, pid),
                InterpStep::CloseInput => {
                    self.pyshim_close_stdin(pid, shim);
                    if let Some([_, _, ctl]) = shim.reads {
                        shim.ctl_eof = true;
                        if let Some(p) = self.procs.get_mut(&pid) {
                            p.reads.retain(|&id| id != ctl);
                        }
                        if let Some(pipe) = self.pipes.get_mut(&ctl) {
                            pipe.reader_open = false;
                        }
                        self.gc_pipe(ctl);
                    }
                }
                InterpStep::Linger => {
                    shim.next_linger = Some(self.now + Duration::from_millis(LINGER_MS));
                    let read = self.pyshim_read(shim);
                    let reaped = self.shim_reap(pid, |_, child, status| {
                        shim.machine.handle_exit(child, status)
                    });
                    if !self.children_of(pid).is_empty() {
                        return progress || read || reaped;
                    }
                    shim.machine.handle_tree_empty(self);
                }
                InterpStep::Exit(code) => {
                    self.exit_proc(pid, ExitStatus::Code(i32::from(code)));
                    return true;
                }
            }
            progress = true;
        }
    }

    /// The shim closes the interpreter's stdin.
    fn pyshim_close_stdin(&mut self, pid: Pid, shim: &mut PyShimRun) {
        let Some(id) = shim.stdin.take() else {
            return;
        };
        if let Some(p) = self.procs.get_mut(&pid) {
            p.writes.retain(|&w| w != id);
        }
        if let Some(pipe) = self.pipes.get_mut(&id) {
            pipe.writers = pipe.writers.saturating_sub(1);
        }
        self.gc_pipe(id);
    }

    /// Hands the machine what stdout, stderr and the report pipe hold.
    /// True if anything.
    fn pyshim_read(&mut self, shim: &mut PyShimRun) -> bool {
        let pipes = shim.reading();
        let machine = &mut shim.machine;
        let mut any = self.read_pipes(&pipes, |os, stream, data| match data {
            Some(data) => {
                let _ = machine.handle_output(os, stream, data);
            }
            None => machine.handle_eof(stream),
        });
        if let Some(ctl) = shim
            .reports()
            .filter(|_| !self.stopped_at_write(self.current))
        {
            let (data, at_eof) = self.read_pipe(ctl);
            if !data.is_empty() {
                any = true;
                shim.machine.handle_report(&data);
            }
            if at_eof {
                any = true;
                shim.ctl_eof = true;
            }
        }
        any
    }

    /// Forks the interpreter (own session, `marker`), with the bootstrap's
    /// SIGINT handler, its stdin, stdout and stderr on new pipes and the
    /// report pipe as fd 3. Fails as exec does when it is not there.
    fn start_interpreter(
        &mut self,
        pid: Pid,
        shim: &mut PyShimRun,
        argv: &[String],
        marker: &(String, String),
    ) -> Result<(Pid, u64), String> {
        let program = argv.first().map_or("", String::as_str);
        if !program.starts_with('/') && !self.has_program(program) {
            return Err(format!("cannot start {program}: not found"));
        }
        let out = self.new_pipe();
        let err = self.new_pipe();
        let ctl = self.new_pipe();
        let stdin = self.new_pipe();
        if let Some(p) = self.procs.get_mut(&pid) {
            p.reads = vec![out, err, ctl];
            p.writes = vec![stdin];
        }
        if let Some(pipe) = self.pipes.get_mut(&stdin) {
            pipe.writers += 1;
        }
        let env = self.marked_env(pid, marker);
        let kernel_dir = shim.launch.kernel_dir.trim_end_matches('/').to_owned();
        let mut interp = PyInterp::new(kernel_dir.clone(), stdin, ctl, env.clone());
        interp.ready_at = self.now + self.config.interp_start;
        interp.shim = pid;
        interp.daemon = self.daemon_of_shim(pid);
        let args: Vec<&str> = argv.iter().map(String::as_str).collect();
        let mut spec = ForkSpec::new(&args, Program::Python(Box::new(interp)), Role::Interpreter);
        spec.new_session = true;
        // As the shim's pre-exec sets it: the interpreter dies with its
        // shim at whatever point of its start.
        spec.dies_with_parent = true;
        spec.stdio = Some((Fd::Pipe(out), Fd::Pipe(err)));
        spec.env = Some(env);
        spec.origin = Some(Some(CellRef {
            kernel_dir,
            cell_dir: shim.launch.cell_dir.trim_end_matches('/').to_owned(),
            seq: None,
        }));
        shim.reads = Some([out, err, ctl]);
        shim.stdin = Some(stdin);
        let py = self
            .fork(pid, spec)
            .map_err(|e| format!("cannot start {program}: {e}"))?;
        if let Some(p) = self.procs.get_mut(&py) {
            // The bootstrap's SIGINT handler; fd 3 and stdin.
            p.int_handler = true;
            p.writes = vec![ctl];
            p.reads = vec![stdin];
        }
        if let Some(pipe) = self.pipes.get_mut(&ctl) {
            pipe.writers += 1;
        }
        Ok((py, self.procs.get(&py).map_or(0, |p| p.starttime)))
    }
}
