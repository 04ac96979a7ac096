//! The Python kernel's interpreter shim as a sans-IO machine: every
//! decision of `tether-agent shim` for a Python kernel, driven by the real
//! shim over real pipes (`agent/src/pyshim.rs`) and by the simulated OS
//! over simulated ones (`sim/src/os/python.rs`).
//!
//! The driver calls [`InterpShim::poll_step`] and does what the step says
//! before it polls again; what it observed meanwhile goes in through the
//! `handle_*` methods. Time comes from [`Os::now`].
//!
//! The shim starts the interpreter ([`InterpStep::StartInterpreter`]),
//! then, one cell at a time: reads `{kernel}/py/run` for a sequence number
//! higher than the last; opens that cell's journal; a tombstone that got
//! there first resolves it without running it; otherwise the cell's own
//! cgroup, holding the interpreter ([`InterpStep::EnterCgroup`], recorded
//! in the cell's `cgroup` file), `started` (the interpreter's pid), and
//! `seq cell_dir marker` on the interpreter's stdin ([`InterpStep::Send`]).
//! The cell ends with the bootstrap's report for it (one JSON line on
//! fd 3) or with the interpreter's death: what stdout/stderr already hold
//! is read ([`InterpStep::Drain`]), the interpreter leaves the cgroup
//! ([`InterpStep::LeaveCgroup`]), the leftovers (marker and cgroup, never
//! the interpreter) are counted, the outcome journaled with `done`, and the
//! cgroup removed if empty (else at the shim's end). Output between cells
//! goes to the kernel's background log. When the interpreter is gone the
//! shim closes its input ([`InterpStep::CloseInput`]) and lingers, still
//! reading stdout/stderr into the background log, until its tree is empty.

use super::orphans::OrphanRecords;
use super::{ExitStatus, ShimCore, JOURNAL_RETRY};
use crate::agent::background::BackgroundLog;
use crate::agent::layout::KernelLayout;
use crate::agent::os::{CellLaunch, Os, OsError, Pid};
use crate::agent::procs::{self, CellScope, Table};
use crate::agent::python;
use crate::ids::CellSeq;
use crate::protocol::{CellOutcome, Lang, Stream};
use crate::time::Timestamp;

/// What the driver does next.
#[must_use]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InterpStep {
    /// Start the interpreter: `argv` in a new session with `marker` in its
    /// environment, stdin, stdout and stderr on pipes and a report pipe
    /// on its fd 3. Then call [`InterpShim::handle_interpreter`].
    StartInterpreter {
        /// Its argv (never empty).
        argv: Vec<String>,
        /// The env marker `(name, value)`.
        marker: (String, String),
    },
    /// Make the cgroup `name` and move the interpreter `pid` into it, then
    /// call [`InterpShim::handle_cgroup`] with its path (or `None`).
    EnterCgroup {
        /// Its name ([`procs::cgroup_name`] of the cell's marker).
        name: String,
        /// The interpreter.
        pid: Pid,
    },
    /// Write `line` to the interpreter's stdin, then call
    /// [`InterpShim::handle_sent`].
    Send {
        /// `seq cell_dir marker token\n` (`token`: the cell's tool-call
        /// credential, `-` when it has none).
        line: Vec<u8>,
    },
    /// Read stdout, stderr and the reports and reap children until
    /// something happens or a short poll passes (the run file is not
    /// watched); report with `handle_output`, `handle_report`,
    /// `handle_eof` and `handle_exit`.
    Pump,
    /// Read what stdout and stderr already hold, without waiting.
    Drain,
    /// Move the interpreter `pid` out of the cell's cgroup `path`, back
    /// into the shim's own.
    LeaveCgroup {
        /// The cell's cgroup.
        path: String,
        /// The interpreter.
        pid: Pid,
    },
    /// The interpreter is gone: close its stdin and the report pipe; keep
    /// reading stdout and stderr.
    CloseInput,
    /// Keep reading stdout and stderr and reaping; call
    /// [`InterpShim::handle_tree_empty`] once no child is left.
    Linger,
    /// Exit with this status.
    Exit(u8),
}

#[derive(serde::Deserialize)]
struct Report {
    seq: u64,
    outcome: CellOutcome,
}

#[derive(Clone, Debug)]
enum CellPhase {
    Cgroup,
    Send,
    Sent,
    Running,
    /// Drained: the interpreter leaves the cgroup, then the cell finishes.
    Ending(Result<CellOutcome, String>),
    /// Left the cgroup: the cell finishes.
    Finish(Result<CellOutcome, String>),
}

#[derive(Debug)]
struct Current {
    seq: CellSeq,
    core: ShimCore,
    marker: String,
    group: Option<String>,
    phase: CellPhase,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Begin,
    Run,
    Linger,
    Exit(u8),
}

/// The end of a cell the interpreter died in, waiting for the record that
/// the death was told ([`python::told_file`]) to be written: the note and
/// the result wait with it, in that order. A journal with its `done` and
/// no record reads to the daemon as a death nobody told, which the next
/// cell would tell again (python_cancel seed 101419: a disk full when the
/// interpreter was killed).
#[derive(Debug)]
struct UntoldEnd {
    core: ShimCore,
    detail: String,
    leftovers: Vec<Pid>,
}

/// The interpreter shim of one Python kernel.
#[derive(Debug)]
pub struct InterpShim {
    launch: CellLaunch,
    kernel: KernelLayout,
    nonce: String,
    phase: Phase,
    py: Option<(Pid, u64)>,
    died: Option<String>,
    ctl_buf: Vec<u8>,
    current: Option<Current>,
    last_seq: u64,
    eof: [bool; 2],
    /// Cell cgroups that still had members when their cell ended.
    pending: Vec<String>,
    /// Ended cells whose journal is behind (a write failed: a full
    /// disk), written again at every step.
    unflushed: Vec<ShimCore>,
    /// The end of the cell the interpreter died in, held back while the
    /// record that its death was told cannot be written (a full disk).
    untold_end: Option<UntoldEnd>,
    /// When those are written again.
    flush_at: Timestamp,
    /// When it next looks whether its kernel is gone while idle.
    gone_look_at: Timestamp,
    log: BackgroundLog,
    /// The processes reparented to the shim (what the interpreter's cells
    /// left), kept on disk.
    orphans: OrphanRecords,
}

fn index(stream: Stream) -> usize {
    match stream {
        Stream::Stdout => 0,
        Stream::Stderr => 1,
    }
}

/// How the interpreter's end reads in the loss report.
fn death_detail(status: ExitStatus) -> String {
    match status {
        ExitStatus::Code(code) => format!("exited with status {code}"),
        ExitStatus::Signal(sig) => format!("was killed by signal {sig}"),
    }
}

impl InterpShim {
    /// The shim `launch` describes (its cell directory is `{kernel}/py`,
    /// its marker `<nonce>:py`).
    pub fn new(launch: CellLaunch) -> InterpShim {
        let kernel = KernelLayout::new(&launch.kernel_dir);
        let suffix = format!(":{}", python::INTERPRETER_MARK);
        let nonce = launch
            .marker
            .1
            .strip_suffix(&suffix)
            .unwrap_or(&launch.marker.1)
            .to_owned();
        let log = BackgroundLog::new(&kernel);
        InterpShim {
            launch,
            kernel,
            nonce,
            phase: Phase::Begin,
            py: None,
            died: None,
            ctl_buf: Vec::new(),
            current: None,
            last_seq: 0,
            eof: [false; 2],
            pending: Vec::new(),
            unflushed: Vec::new(),
            untold_end: None,
            flush_at: Timestamp::ZERO,
            gone_look_at: Timestamp::ZERO,
            log,
            orphans: OrphanRecords::default(),
        }
    }

    /// Its pseudo cell directory.
    pub fn cell_dir(&self) -> &str {
        &self.launch.cell_dir
    }

    /// The directory of the cell the interpreter runs now, if any (its
    /// `calls` directory is where the cell's tool calls come).
    pub fn running_cell(&self) -> Option<&str> {
        self.current
            .as_ref()
            .filter(|c| matches!(c.phase, CellPhase::Sent | CellPhase::Running))
            .map(|c| c.core.cell().dir())
    }

    /// Is a cell handed over and not taken yet (the shim's next step
    /// takes it, and honours its tombstone)?
    pub fn cell_waiting(&self, os: &dyn Os) -> bool {
        self.phase == Phase::Run
            && self.current.is_none()
            && self.died.is_none()
            && self.next_seq(os).is_some()
    }

    /// The interpreter, once started.
    pub fn interpreter(&self) -> Option<Pid> {
        self.py.map(|(pid, _)| pid)
    }

    /// Its records of the processes reparented to it (see
    /// [`super::cell::CellShim::orphans`]).
    pub fn orphans(&self) -> &OrphanRecords {
        &self.orphans
    }

    /// Does the shim still read `stream`'s pipe?
    pub fn reading(&self, stream: Stream) -> bool {
        matches!(self.phase, Phase::Run | Phase::Linger) && !self.eof[index(stream)]
    }

    /// Does the shim still read the report pipe?
    pub fn reading_reports(&self) -> bool {
        self.phase == Phase::Run
    }

    /// Is the interpreter gone, the shim waiting for its tree to empty
    /// ([`InterpStep::Linger`])?
    pub fn lingering(&self) -> bool {
        self.phase == Phase::Linger
    }

    /// Is the kernel's config gone, or another daemon's (another nonce:
    /// no daemon adopts an old interpreter, see the cell shim's
    /// `kernel_gone`)? An unreadable one is taken for still ours.
    fn kernel_gone(&self, os: &dyn Os) -> bool {
        crate::agent::kernel::config_names(os, &self.kernel, &self.nonce) == Some(false)
    }

    /// Is the kernel's config itself gone (its directory removed, or shut
    /// down)? Then nobody is left to end what the shim holds, and it ends
    /// its whole tree. Under a config of another nonce (a new daemon) it
    /// ends only its interpreter's (the cell it ran: the new daemon may
    /// know nothing of it, after a wipe): what earlier cells left stays
    /// for the shutdown, which finds it recorded (python_bystander seed
    /// 101188: a lingering shim ended an uncancelled cell's leftover when
    /// the next daemon started).
    fn kernel_dir_gone(&self, os: &dyn Os) -> bool {
        !os.exists(&self.kernel.config())
    }

    /// The cell handed over next, if the daemon has named one: any number
    /// but the last one run, as the daemon hands each number over once. A
    /// lower one comes when another client record's cell took a higher
    /// number first (drawn_clients seed 50: the second frontend ran cell 2
    /// on a kernel it opened again, the first frontend's cell 1 came
    /// next; the interpreter waited for a number above 2 and the cell,
    /// accepted, never ran).
    fn next_seq(&self, os: &dyn Os) -> Option<u64> {
        os.read_file(&python::run_file(&self.kernel))
            .ok()
            .and_then(|b| String::from_utf8_lossy(&b).trim().parse::<u64>().ok())
            .filter(|&s| s != self.last_seq)
    }

    /// When the shim has something to do without new input: now while it
    /// has a step ready (a report, a death, a cell to start), else never.
    #[must_use]
    pub fn poll_timeout(&self, os: &dyn Os) -> Option<Timestamp> {
        let now = os.now();
        let ready = match (self.phase, &self.current) {
            (Phase::Begin, _) => true,
            (Phase::Run, Some(c)) => match c.phase {
                CellPhase::Running => self.died.is_some() || self.ctl_buf.contains(&b'\n'),
                _ => true,
            },
            (Phase::Run, None) => self.died.is_some() || self.next_seq(os).is_some(),
            (Phase::Linger | Phase::Exit(_), _) => false,
        };
        if ready {
            Some(now)
        } else {
            self.behind().then_some(self.flush_at.max(now))
        }
    }

    /// Do ended cells still owe their journals something?
    fn behind(&self) -> bool {
        !self.unflushed.is_empty() || self.untold_end.is_some()
    }

    /// Ends a cell the interpreter died in: the record that the death
    /// was told first, then the note and the result (held back again if
    /// the record cannot be written now).
    fn end_told(&mut self, os: &mut dyn Os, end: UntoldEnd) {
        if os
            .write_atomic(&python::told_file(&self.kernel), b"")
            .is_err()
        {
            self.untold_end = Some(end);
            return;
        }
        let UntoldEnd {
            mut core,
            detail,
            leftovers,
        } = end;
        if core.finish_python(os, Err(detail), leftovers).is_err() {
            self.unflushed.push(core);
        }
    }

    /// Writes what the journals of ended cells still owe.
    fn flush_ended(&mut self, os: &mut dyn Os) {
        if !self.behind() || os.now() < self.flush_at {
            return;
        }
        if let Some(end) = self.untold_end.take() {
            self.end_told(os, end);
        }
        self.unflushed.retain_mut(|core| core.flush(os).is_err());
        self.flush_at = os.now() + JOURNAL_RETRY;
    }

    /// The next step.
    pub fn poll_step(&mut self, os: &mut dyn Os) -> InterpStep {
        self.flush_ended(os);
        if matches!(self.phase, Phase::Run | Phase::Linger) {
            let interpreter = self.interpreter();
            self.orphans.look(os, self.kernel.dir(), interpreter);
        }
        if self.phase == Phase::Run && self.current.is_some() && os.now() >= self.gone_look_at {
            // A cell runs: a kernel whose directory went has nobody left
            // to end it (python_stuck seed 103322: a stuck cell of a
            // killed daemon's interpreter ran on after the wipe and the
            // shutdown). The interpreter's death then ends the shim.
            self.gone_look_at = os.now() + std::time::Duration::from_millis(super::LINGER_MS);
            let group = self.current.as_ref().and_then(|c| c.group.clone());
            if self.kernel_dir_gone(os) {
                super::end_own_tree(os, group.as_deref());
            } else if let Some(py) = self.interpreter().filter(|_| self.kernel_gone(os)) {
                super::end_tree(os, py, group.as_deref());
            }
        }
        loop {
            match self.phase {
                Phase::Begin => {
                    self.phase = Phase::Run;
                    return InterpStep::StartInterpreter {
                        argv: self.launch.argv.clone(),
                        marker: self.launch.marker.clone(),
                    };
                }
                Phase::Linger => {
                    // Lingering for its interpreter's leftovers: a kernel
                    // whose directory went has nobody left to end them
                    // (python_cancel seed 101266: a setsid leftover kept
                    // the old shim, and itself, alive after shutdown).
                    if self.kernel_dir_gone(os) {
                        super::end_own_tree(os, None);
                    }
                    return InterpStep::Linger;
                }
                Phase::Exit(code) => return InterpStep::Exit(code),
                Phase::Run => {}
            }
            if self.current.is_some() {
                if let Some(step) = self.step_cell(os) {
                    return step;
                }
                if self.current.is_some() {
                    return InterpStep::Pump;
                }
                continue;
            }
            if self.died.is_some() {
                self.phase = Phase::Linger;
                return InterpStep::CloseInput;
            }
            let idle_look = os.now() >= self.gone_look_at;
            if idle_look {
                // Idle, it looks every LINGER_MS too: a kernel wiped with
                // no daemon left would otherwise keep its interpreter.
                self.gone_look_at = os.now() + std::time::Duration::from_millis(super::LINGER_MS);
            }
            let next = self.next_seq(os);
            if (idle_look || next.is_some()) && self.kernel_gone(os) {
                // The kernel it served is gone (its directory removed, a
                // new daemon there with another nonce): the cell is the
                // new interpreter's, and this one ends (python_state seed
                // 100655: a wiped kernel's old interpreter ran the next
                // daemon's cell as well).
                self.phase = Phase::Linger;
                return InterpStep::CloseInput;
            }
            let Some(seq) = next else {
                return InterpStep::Pump;
            };
            self.last_seq = seq;
            self.open_cell(os, CellSeq(seq));
        }
    }

    /// Takes cell `seq`: opens its journal and honours a tombstone.
    fn open_cell(&mut self, os: &mut dyn Os, seq: CellSeq) {
        let cell = self.kernel.cell(seq);
        let marker = procs::marker_value(&self.nonce, seq);
        let launch = CellLaunch {
            kernel_dir: self.kernel.dir().to_owned(),
            cell_dir: cell.dir().to_owned(),
            lang: Lang::Python,
            argv: Vec::new(),
            marker: (procs::MARKER_NAME.to_owned(), marker.clone()),
        };
        let Ok(mut core) = ShimCore::new(os, launch) else {
            return;
        };
        if let Some(reason) = core.tombstone(os) {
            if core.never_started(os, reason.outcome()).is_err() {
                self.unflushed.push(core);
            }
            return;
        }
        self.current = Some(Current {
            seq,
            core,
            marker,
            group: None,
            phase: CellPhase::Cgroup,
        });
    }

    /// The current cell's next step; `None` while it runs (or once it
    /// finished).
    fn step_cell(&mut self, os: &mut dyn Os) -> Option<InterpStep> {
        let (py_pid, py_start) = self.py.unwrap_or((0, 0));
        let c = self.current.as_mut()?;
        match std::mem::replace(&mut c.phase, CellPhase::Running) {
            CellPhase::Cgroup => {
                c.phase = CellPhase::Send;
                Some(InterpStep::EnterCgroup {
                    name: procs::cgroup_name(&c.marker),
                    pid: py_pid,
                })
            }
            CellPhase::Send => {
                let _ = c.core.started(os, py_pid, py_pid, py_start);
                c.phase = CellPhase::Sent;
                let token = c
                    .core
                    .calls_env()
                    .into_iter()
                    .find(|(name, _)| name == crate::protocol::calls::ENV_TOKEN)
                    .map_or_else(|| "-".to_owned(), |(_, token)| token);
                let line = format!("{} {} {} {token}\n", c.seq.0, c.core.cell().dir(), c.marker);
                Some(InterpStep::Send {
                    line: line.into_bytes(),
                })
            }
            // The driver reports the write before it polls again.
            CellPhase::Sent | CellPhase::Running => {
                // A journal that cannot be written fails the call's caller
                // at its deadline; the cell goes on.
                let _ = c.core.tick_calls(os);
                let seq = c.seq.0;
                if let Some(outcome) = self.take_report(seq) {
                    self.end_cell(Ok(outcome));
                    return Some(InterpStep::Drain);
                }
                if let Some(detail) = self.died.clone() {
                    self.end_cell(Err(detail));
                    return Some(InterpStep::Drain);
                }
                None
            }
            CellPhase::Ending(reported) => {
                match c.group.clone().filter(|_| self.died.is_none()) {
                    Some(path) => {
                        c.phase = CellPhase::Finish(reported);
                        Some(InterpStep::LeaveCgroup { path, pid: py_pid })
                    }
                    // A dead interpreter has left the cgroup already.
                    None => {
                        self.finish(os, reported);
                        None
                    }
                }
            }
            CellPhase::Finish(reported) => {
                self.finish(os, reported);
                None
            }
        }
    }

    fn end_cell(&mut self, reported: Result<CellOutcome, String>) {
        if let Some(c) = self.current.as_mut() {
            c.phase = CellPhase::Ending(reported);
        }
    }

    /// The report for cell `seq`, if one came; reports for other cells
    /// (and lines that are no report) are dropped.
    fn take_report(&mut self, seq: u64) -> Option<CellOutcome> {
        while let Some(end) = self.ctl_buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.ctl_buf.drain(..=end).collect();
            match serde_json::from_slice::<Report>(&line) {
                Ok(report) if report.seq == seq => return Some(report.outcome),
                _ => {}
            }
        }
        None
    }

    /// Ends the current cell: leftovers by marker and cgroup (never the
    /// interpreter), the outcome with `done`, the cgroup removed if empty.
    fn finish(&mut self, os: &mut dyn Os, reported: Result<CellOutcome, String>) {
        let Some(mut c) = self.current.take() else {
            return;
        };
        let table = Table::snapshot(os);
        let mut protected = procs::protected(&table, os.self_pid());
        if let Some((py, _)) = self.py {
            protected.insert(py);
        }
        let scope = CellScope {
            shim: None,
            pgid: None,
            marker: c.marker.clone(),
            other_markers: Vec::new(),
            extra: Vec::new(),
            cgroup: c.group.clone(),
        };
        let left: Vec<Pid> = procs::cell_processes(os, &table, &scope, &protected)
            .into_iter()
            .collect();
        if let Some(group) = c.group.take() {
            if os.remove_cgroup(&group).is_err() {
                self.pending.push(group);
            }
        }
        match reported {
            Err(detail) => self.end_told(
                os,
                UntoldEnd {
                    core: c.core,
                    detail,
                    leftovers: left,
                },
            ),
            Ok(outcome) => {
                if c.core.finish_python(os, Ok(outcome), left).is_err() {
                    self.unflushed.push(c.core);
                }
            }
        }
    }

    /// How [`InterpStep::StartInterpreter`] went: its pid and start time,
    /// or why it could not start (the shim then lingers and exits; the
    /// daemon reports the kernel's loss).
    pub fn handle_interpreter(&mut self, started: Result<(Pid, u64), String>) {
        match started {
            Ok(py) => self.py = Some(py),
            Err(_) => self.phase = Phase::Linger,
        }
    }

    /// The cgroup [`InterpStep::EnterCgroup`] made (the interpreter in it),
    /// or `None`. It is recorded in the cell's `cgroup` file. False: the
    /// shim does not use it (it could not be recorded), and the driver
    /// moves the interpreter back and removes it.
    pub fn handle_cgroup(&mut self, os: &mut dyn Os, path: Option<String>) -> bool {
        let (Some(path), Some(c)) = (path, self.current.as_mut()) else {
            return false;
        };
        if c.core.record_cgroup(os, &path).is_err() {
            return false;
        }
        c.group = Some(path);
        true
    }

    /// Whether [`InterpStep::Send`] wrote the whole line. An interpreter
    /// that takes no input ends the cell.
    pub fn handle_sent(&mut self, sent: bool) {
        if let Some(c) = self.current.as_mut() {
            c.phase = if sent {
                CellPhase::Running
            } else {
                CellPhase::Ending(Err("does not take input".into()))
            };
        }
    }

    /// Bytes from the interpreter's stdout or stderr: the current cell's
    /// output while a cell runs, the background log between cells and
    /// after the interpreter is gone.
    pub fn handle_output(
        &mut self,
        os: &mut dyn Os,
        stream: Stream,
        data: &[u8],
    ) -> Result<(), OsError> {
        match self.current.as_mut() {
            Some(c) if !matches!(c.phase, CellPhase::Cgroup) && self.phase == Phase::Run => {
                c.core.output(os, stream, data)
            }
            _ => self.log.append(os, data),
        }
    }

    /// Bytes from the report pipe.
    pub fn handle_report(&mut self, data: &[u8]) {
        self.ctl_buf.extend_from_slice(data);
    }

    /// `stream`'s pipe reached EOF.
    pub fn handle_eof(&mut self, stream: Stream) {
        self.eof[index(stream)] = true;
    }

    /// A child was reaped: the interpreter's death ends the current cell
    /// (its namespace is lost) and the shim; other children are orphans.
    pub fn handle_exit(&mut self, pid: Pid, status: ExitStatus) {
        if self.interpreter() == Some(pid) && self.died.is_none() {
            self.died = Some(death_detail(status));
        }
    }

    /// The shim has no child left: cell cgroups left over go if empty, and
    /// the shim exits.
    pub fn handle_tree_empty(&mut self, os: &mut dyn Os) {
        if self.phase != Phase::Linger {
            return;
        }
        for group in std::mem::take(&mut self.pending) {
            let _ = os.remove_cgroup(&group);
        }
        // A journal still behind is the daemon's to end once the shim is
        // gone (it writes the cell's loss when it can).
        self.flush_at = Timestamp::ZERO;
        self.flush_ended(os);
        self.phase = Phase::Exit(0);
    }
}
