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

use super::interp::Shell;
use super::process::{CellRef, ExitStatus, Fd, ForkSpec, Program, Role};
use super::SimOs;
use std::time::Duration;
use tether_core::agent::{CellLaunch, Pid};
use tether_core::protocol::Stream;
use tether_core::time::Timestamp;

use self::logic::{complete, ShimCore, DEFAULT_DRAIN};

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
        if let Some((out, err)) = self.pipes {
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
        let Some(p) = self.procs.get_mut(&pid) else {
            return false;
        };
        let program = std::mem::replace(&mut p.program, Program::Running);
        let Program::Shim(mut shim) = program else {
            p.program = program;
            return false;
        };
        let saved = self.current;
        self.current = pid;
        let progress = self.drive_shim(pid, &mut shim);
        self.current = saved;
        if let Some(p) = self.procs.get_mut(&pid) {
            if p.alive() && matches!(p.program, Program::Running) {
                p.program = Program::Shim(shim);
            }
        }
        progress
    }

    fn drive_shim(&mut self, pid: Pid, shim: &mut ShimRun) -> bool {
        let mut progress = false;
        if shim.core.is_none() {
            if shim.finished {
                return false;
            }
            progress = true;
            if !self.start_cell(pid, shim) {
                return true;
            }
        }
        // Output first, then exits: what a process wrote before it died is
        // journaled before its end.
        if let Some((out, err)) = shim.pipes {
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
                        if core.output(self, stream, &data).is_err() {
                            // The journal cannot be written (its directory
                            // is gone): nothing left to report to.
                            self.exit_proc(pid, ExitStatus::Code(1));
                            return true;
                        }
                    }
                }
                if at_eof {
                    *eof = true;
                    progress = true;
                }
            }
        }
        for (child, status) in self.reap_children(pid) {
            progress = true;
            if Some(child) == shim.main {
                shim.exited = Some((self.now, status));
            }
        }
        if !shim.finished {
            if let Some((at, status)) = shim.exited {
                let eof = shim.eof.0 && shim.eof.1;
                if complete(Some(at), eof, self.now, shim.drain) {
                    progress = true;
                    shim.finished = true;
                    let leftovers = self.shim_leftovers(pid, shim);
                    if let Some(core) = shim.core.as_mut() {
                        let _ = core.finish(self, logic_status(status), leftovers);
                    }
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
                }
            }
        }
        if shim.finished && self.children_of(pid).is_empty() {
            self.exit_proc(pid, ExitStatus::Code(0));
            return true;
        }
        progress
    }

    /// Opens the journal, honours a tombstone, starts the main process.
    /// False when the shim is done (it exited).
    fn start_cell(&mut self, pid: Pid, shim: &mut ShimRun) -> bool {
        let launch = shim.launch.clone();
        let mut core = match ShimCore::new(self, launch.clone()) {
            Ok(core) => core,
            Err(_) => {
                shim.finished = true;
                self.exit_proc(pid, ExitStatus::Code(1));
                return false;
            }
        };
        if let Some(reason) = core.tombstone(self) {
            let _ = core.never_started(self, reason.outcome());
            shim.finished = true;
            self.exit_proc(pid, ExitStatus::Code(0));
            return false;
        }
        if let Some(p) = self.procs.get_mut(&pid) {
            p.subreaper = true;
        }
        let out = self.new_pipe();
        let err = self.new_pipe();
        if let Some(p) = self.procs.get_mut(&pid) {
            p.reads = vec![out, err];
        }
        let code_path = format!("{}/code", launch.cell_dir.trim_end_matches('/'));
        let end_path = format!("{}/end", launch.cell_dir.trim_end_matches('/'));
        let shell = match self.fs.read(&code_path) {
            Ok(code) => Shell::from_code(&code, Some(end_path)),
            Err(e) => Shell::from_code(format!("cannot open {code_path}: {e}").as_bytes(), None),
        };
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
                let starttime = self.procs.get(&main).map_or(0, |p| p.starttime);
                shim.main = Some(main);
                shim.pgid = main;
                let _ = core.started(self, main, main, starttime);
                shim.core = Some(core);
                true
            }
            Err(e) => {
                let _ = core.output(
                    self,
                    Stream::Stderr,
                    format!("shim: fork: {e}\n").as_bytes(),
                );
                let _ = core.finish(self, logic_status(ExitStatus::Code(126)), Vec::new());
                shim.finished = true;
                self.exit_proc(pid, ExitStatus::Code(1));
                false
            }
        }
    }

    /// The cell's processes still running, as the shim sees them.
    fn shim_leftovers(&mut self, pid: Pid, shim: &ShimRun) -> Vec<Pid> {
        logic::leftovers(self, pid, shim.pgid, &shim.launch.marker.1)
    }
}

fn logic_status(status: ExitStatus) -> logic::ExitStatus {
    match status {
        ExitStatus::Code(c) => logic::ExitStatus::Code(c),
        ExitStatus::Signaled(s) => logic::ExitStatus::Signal(s.number()),
    }
}

/// The agent's shim decisions. Until `tether_core::agent::shim` is public,
/// a stand-in with the same calls (journal entries in the same order).
mod logic {
    use std::time::Duration;
    use tether_core::agent::{CellLaunch, Os, OsError, Pid};
    use tether_core::protocol::{parse_journal, CellOutcome, EntryKind, JournalEntry, Stream};
    use tether_core::time::Timestamp;

    pub(super) const DEFAULT_DRAIN: Duration = Duration::from_millis(200);

    #[derive(Clone, Copy, Debug)]
    pub(super) enum ExitStatus {
        Code(i32),
        Signal(i32),
    }

    #[derive(Clone, Copy, Debug)]
    pub(super) enum CancelReason {
        Requested,
        Timeout,
    }

    impl CancelReason {
        pub(super) fn outcome(self) -> CellOutcome {
            match self {
                CancelReason::Requested => CellOutcome::Cancelled,
                CancelReason::Timeout => CellOutcome::TimedOut,
            }
        }
    }

    pub(super) fn complete(
        exited_at: Option<Timestamp>,
        eof: bool,
        now: Timestamp,
        drain: Duration,
    ) -> bool {
        exited_at.is_some_and(|at| eof || now >= at + drain)
    }

    #[derive(Debug)]
    pub(super) struct ShimCore {
        cell_dir: String,
        next_n: u64,
    }

    impl ShimCore {
        pub(super) fn new(os: &mut dyn Os, launch: CellLaunch) -> Result<ShimCore, OsError> {
            let cell_dir = launch.cell_dir.trim_end_matches('/').to_owned();
            let next_n = match os.read_file(&format!("{cell_dir}/journal")) {
                Ok(b) => parse_journal(&b).entries.last().map_or(1, |e| e.n + 1),
                Err(OsError::NotFound) => 1,
                Err(e) => return Err(e),
            };
            Ok(ShimCore { cell_dir, next_n })
        }

        fn push(&mut self, os: &mut dyn Os, kind: EntryKind) -> Result<(), OsError> {
            let e = JournalEntry {
                n: self.next_n,
                kind,
            };
            os.append(&format!("{}/journal", self.cell_dir), &e.to_line())?;
            self.next_n += 1;
            Ok(())
        }

        pub(super) fn tombstone(&self, os: &dyn Os) -> Option<CancelReason> {
            os.read_file(&format!("{}/cancel", self.cell_dir))
                .ok()
                .map(|t| {
                    if t.starts_with(b"timeout") {
                        CancelReason::Timeout
                    } else {
                        CancelReason::Requested
                    }
                })
        }

        pub(super) fn never_started(
            &mut self,
            os: &mut dyn Os,
            outcome: CellOutcome,
        ) -> Result<(), OsError> {
            self.push(os, EntryKind::Result { outcome })?;
            self.push(os, EntryKind::Done)
        }

        pub(super) fn started(
            &mut self,
            os: &mut dyn Os,
            pid: Pid,
            pgid: Pid,
            starttime: u64,
        ) -> Result<(), OsError> {
            self.push(
                os,
                EntryKind::Started {
                    pid,
                    pgid,
                    starttime,
                },
            )
        }

        pub(super) fn output(
            &mut self,
            os: &mut dyn Os,
            stream: Stream,
            data: &[u8],
        ) -> Result<(), OsError> {
            self.push(
                os,
                EntryKind::Output {
                    stream,
                    data: data.into(),
                },
            )
        }

        pub(super) fn finish(
            &mut self,
            os: &mut dyn Os,
            exit: ExitStatus,
            leftovers: Vec<Pid>,
        ) -> Result<CellOutcome, OsError> {
            let cancel = self.tombstone(os);
            let end = os
                .read_file(&format!("{}/end", self.cell_dir))
                .ok()
                .and_then(|b| String::from_utf8(b).ok()?.trim().parse::<i32>().ok());
            let outcome = match (end, cancel, exit) {
                (Some(0), _, _) => CellOutcome::Ok,
                (_, Some(r), _) => r.outcome(),
                (Some(s), None, _) => CellOutcome::Error {
                    message: format!("the last command exited with status {s}"),
                },
                (None, None, ExitStatus::Code(code)) => CellOutcome::Exit { code },
                (None, None, ExitStatus::Signal(sig)) => CellOutcome::Error {
                    message: format!("killed by signal {sig}"),
                },
            };
            self.push(
                os,
                EntryKind::Result {
                    outcome: outcome.clone(),
                },
            )?;
            if !leftovers.is_empty() {
                self.push(os, EntryKind::Leftovers { pids: leftovers })?;
            }
            self.push(os, EntryKind::Done)?;
            Ok(outcome)
        }
    }

    /// Descendants of the shim, the cell's session, the marker; live only.
    pub(super) fn leftovers(os: &dyn Os, shim: Pid, sid: Pid, marker: &str) -> Vec<Pid> {
        let procs = os.processes();
        let mut set = std::collections::BTreeSet::new();
        let mut frontier = vec![shim];
        while let Some(p) = frontier.pop() {
            for c in procs.iter().filter(|c| c.ppid == p) {
                if set.insert(c.pid) {
                    frontier.push(c.pid);
                }
            }
        }
        for p in &procs {
            if p.sid == sid || p.pgid == sid || os.has_env(p.pid, "TETHER_CELL", marker) {
                set.insert(p.pid);
            }
        }
        procs
            .iter()
            .filter(|p| set.contains(&p.pid) && !p.zombie && p.pid > 1 && p.pid != shim)
            .map(|p| p.pid)
            .collect()
    }
}
