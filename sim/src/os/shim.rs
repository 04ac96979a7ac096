//! The simulated cell shim: the IO half of `tether-agent shim`, driving the
//! agent's own shim decisions (`tether_core::agent::shim::ShimCore`: the
//! journal writer, the tombstone check, the outcome) exactly as the real
//! shim does. It is a child subreaper; it starts the cell's main process in
//! a new session with the env marker and its stdout/stderr on two pipes,
//! journals what the pipes deliver, reaps, and resolves the cell when the
//! main process has exited and both pipes reached EOF or the drain bound
//! passed. Processes of the cell still running then are reported as
//! leftovers; the shim stays (reaping, so they stay in its subtree) until
//! none is left.

use super::interp::{is_bash, CellFiles, Shell};
use super::process::{CellRef, ExitStatus, Fd, ForkSpec, Program, Role};
use super::SimOs;
use std::time::Duration;
use tether_core::agent::{CellLaunch, Pid};
use tether_core::protocol::Stream;
use tether_core::time::Timestamp;

use tether_core::agent::procs::{self, CellScope, Table};
use tether_core::agent::shim::{complete, DEFAULT_DRAIN};
use tether_core::agent::{ExitStatus as CoreExit, Os, ShimCore};
use tether_core::protocol::CellOutcome;

/// A shim's progress.
#[derive(Debug)]
pub(crate) struct ShimRun {
    launch: CellLaunch,
    core: Option<ShimCore>,
    main: Option<Pid>,
    pgid: Pid,
    pipes: Option<(u64, u64)>,
    eof: (bool, bool),
    exited: Option<(Timestamp, ExitStatus)>,
    finished: bool,
    drain: Duration,
    /// The cell's own cgroup, when one could be made.
    cgroup: Option<String>,
}

impl ShimRun {
    pub(crate) fn new(launch: CellLaunch) -> ShimRun {
        ShimRun {
            launch,
            core: None,
            main: None,
            pgid: 0,
            pipes: None,
            eof: (false, false),
            exited: None,
            finished: false,
            drain: DEFAULT_DRAIN,
            cgroup: None,
        }
    }

    /// The cell directory it serves.
    pub(crate) fn cell_dir(&self) -> &str {
        &self.launch.cell_dir
    }

    /// When this shim next has something to do.
    pub(crate) fn wake(&self, os: &SimOs, pid: Pid) -> Option<Timestamp> {
        let now = os.now;
        if self.core.is_none() && !self.finished {
            return Some(now);
        }
        let has_zombie = os.procs.values().any(|c| c.ppid == pid && !c.alive());
        if has_zombie {
            return Some(now);
        }
        if let Some((out, err)) = self.pipes.filter(|_| !self.finished) {
            let news = |id: u64, eof: bool| {
                !eof && os
                    .pipes
                    .get(&id)
                    .is_none_or(|p| !p.buf.is_empty() || p.writers == 0)
            };
            if news(out, self.eof.0) || news(err, self.eof.1) {
                return Some(now);
            }
        }
        if self.finished {
            return os.children_of(pid).is_empty().then_some(now);
        }
        self.exited.map(|(at, _)| at + self.drain)
    }
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
        let mut progress = false;
        if shim.core.is_none() {
            if shim.finished {
                return false;
            }
            progress = true;
            self.start_cell(pid, shim);
            if shim.core.is_none() {
                return self.shim_linger(pid, shim) || progress;
            }
        }
        // Output first, then exits: what a process wrote before it died is
        // journaled before its end.
        if let Some((out, err)) = shim.pipes.filter(|_| !shim.finished) {
            for (id, stream, eof) in [
                (out, Stream::Stdout, &mut shim.eof.0),
                (err, Stream::Stderr, &mut shim.eof.1),
            ] {
                if *eof {
                    continue;
                }
                let (data, at_eof) = self.read_pipe(id);
                if !data.is_empty() {
                    progress = true;
                    if let Some(core) = shim.core.as_mut() {
                        // As the real shim: a journal that cannot be
                        // written is reported on stderr, and it goes on.
                        let _ = core.output(self, stream, &data);
                    }
                }
                if at_eof {
                    *eof = true;
                    progress = true;
                }
            }
        }
        // waitpid(-1, WNOHANG): the main process and any reparented orphan.
        for (child, status) in self.reap_children(pid) {
            progress = true;
            if Some(child) == shim.main {
                shim.exited = Some((self.now, status));
            }
        }
        if !shim.finished {
            let eof = shim.eof.0 && shim.eof.1;
            let exited_at = shim.exited.map(|(at, _)| at);
            if complete(exited_at, eof, self.now, shim.drain) {
                progress = true;
                shim.finished = true;
                // Nobody reads the pipes any more.
                if let Some(p) = self.procs.get_mut(&pid) {
                    let reads = std::mem::take(&mut p.reads);
                    for id in reads {
                        if let Some(pipe) = self.pipes.get_mut(&id) {
                            pipe.reader_open = false;
                        }
                        self.gc_pipe(id);
                    }
                }
                let leftovers = self.shim_leftovers(pid, shim);
                let exit = shim
                    .exited
                    .map_or(CoreExit::Signal(9), |(_, status)| core_exit(status));
                if let Some(core) = shim.core.as_mut() {
                    let _ = core.finish(self, exit, leftovers);
                }
            }
        }
        self.shim_linger(pid, shim) || progress
    }

    /// After the journal is finished the shim stays, reaping, until it has
    /// no child left; then it exits. True if it exited.
    fn shim_linger(&mut self, pid: Pid, shim: &ShimRun) -> bool {
        if shim.finished && self.is_alive(pid) && self.children_of(pid).is_empty() {
            // Its tree is gone: the cell's cgroup goes too, if empty.
            if let Some(group) = &shim.cgroup {
                let _ = self.remove_cgroup(group);
            }
            self.exit_proc(pid, ExitStatus::Code(0));
            return true;
        }
        false
    }

    /// As `tether-agent shim`: becomes a child subreaper, opens the journal
    /// (exit 1 if it cannot), honours a tombstone (the code never runs),
    /// starts the main process in a new session with the marker and its
    /// output on two pipes, journals `started`.
    fn start_cell(&mut self, pid: Pid, shim: &mut ShimRun) {
        if let Some(p) = self.procs.get_mut(&pid) {
            p.subreaper = true;
        }
        let launch = shim.launch.clone();
        let mut core = match ShimCore::new(self, launch.clone()) {
            Ok(core) => core,
            Err(_) => {
                shim.finished = true;
                self.exit_proc(pid, ExitStatus::Code(1));
                return;
            }
        };
        if let Some(reason) = core.tombstone(self) {
            let _ = core.never_started(self, reason.outcome());
            shim.finished = true;
            return;
        }
        let cell_dir = launch.cell_dir.trim_end_matches('/').to_owned();
        // The shell script's arguments: `tether-cell STATE_DIR CELL_DIR`.
        let state_dir = match launch.argv.get(3).map(String::as_str) {
            Some("tether-cell") => launch.argv.get(4).cloned(),
            _ => None,
        };
        let code_path = format!("{cell_dir}/code");
        let shell = match self.fs.read(&code_path) {
            Ok(code) => Shell::from_code(
                &code,
                Some(CellFiles {
                    cell_dir: cell_dir.clone(),
                    state_dir,
                    marker: launch.marker.0.clone(),
                }),
            ),
            Err(e) => Shell::from_code(format!("cannot open {code_path}: {e}").as_bytes(), None),
        };
        let mut shell = shell;
        shell.bash = launch.argv.first().is_some_and(|a| is_bash(a));
        let Some(program) = launch.argv.first() else {
            let message = "the cell has an empty argv".to_owned();
            let _ = core.never_started(self, CellOutcome::Error { message });
            shim.finished = true;
            return;
        };
        if !program.starts_with('/') && !self.has_program(program) {
            let message = format!("cannot start {program}: not found");
            let _ = core.never_started(self, CellOutcome::Error { message });
            shim.finished = true;
            return;
        }
        // As the real shim: the cell's own cgroup, recorded before the
        // main process starts (none when cgroups are not writable).
        if let Some(group) = self.make_cgroup(pid, &core.cgroup_name()) {
            if core.record_cgroup(self, &group).is_ok() {
                shim.cgroup = Some(group);
            } else {
                let _ = self.remove_cgroup(&group);
            }
        }
        let out = self.new_pipe();
        let err = self.new_pipe();
        if let Some(p) = self.procs.get_mut(&pid) {
            p.reads = vec![out, err];
        }
        let argv: Vec<&str> = launch.argv.iter().map(String::as_str).collect();
        let mut spec = ForkSpec::new(&argv, Program::Shell(Box::new(shell)), Role::Cell);
        spec.new_session = true;
        spec.stdio = Some((Fd::Pipe(out), Fd::Pipe(err)));
        spec.origin = Some(Some(cell_ref(&launch)));
        let mut env = self
            .procs
            .get(&pid)
            .map(|p| p.env.clone())
            .unwrap_or_default();
        env.insert(launch.marker.0.clone(), launch.marker.1.clone());
        spec.env = Some(env);
        shim.pipes = Some((out, err));
        match self.fork(pid, spec) {
            Ok(main) => {
                // The child enters the cgroup before it runs the cell's
                // code (nothing runs between the fork and this).
                if let Some(group) = &shim.cgroup {
                    let _ = self.join_cgroup(main, group);
                }
                let starttime = self.procs.get(&main).map_or(0, |p| p.starttime);
                shim.main = Some(main);
                shim.pgid = main;
                let _ = core.started(self, main, main, starttime);
                shim.core = Some(core);
            }
            Err(e) => {
                let message = format!("cannot start {program}: {e}");
                let _ = core.never_started(self, CellOutcome::Error { message });
                shim.finished = true;
            }
        }
    }

    /// The cell's processes still running, as the real shim computes them.
    fn shim_leftovers(&mut self, pid: Pid, shim: &ShimRun) -> Vec<Pid> {
        let table = Table::snapshot(self);
        let protected = procs::protected(&table, pid);
        let scope = CellScope {
            shim: Some(pid),
            pgid: Some(shim.pgid),
            marker: shim.launch.marker.1.clone(),
            other_markers: Vec::new(),
            extra: Vec::new(),
            cgroup: shim.cgroup.clone(),
        };
        procs::cell_processes(self, &table, &scope, &protected)
            .into_iter()
            .collect()
    }
}

fn core_exit(status: ExitStatus) -> CoreExit {
    match status {
        ExitStatus::Code(c) => CoreExit::Code(c),
        ExitStatus::Signaled(s) => CoreExit::Signal(s.number()),
    }
}
