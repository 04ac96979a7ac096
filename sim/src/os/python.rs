//! The Python kernel: the interpreter shim (the IO half of the real
//! `agent/src/pyshim.rs`, driving the agent's own [`ShimCore`] as it does)
//! and the persistent interpreter it runs (what the bootstrap of
//! `tether_core::agent::python` does, over the workload interpreter).
//!
//! The shim, a child subreaper launched with the pseudo cell directory
//! `{kernel}/py`, starts the interpreter in a new session with the marker
//! `<nonce>:py`, its stdout and stderr on two pipes, a stdin pipe and a
//! report pipe (fd 3). Each time round, as the real loop does, it journals
//! what stdout/stderr carry into the current cell, takes the reports (a
//! report for the current cell: leftovers by marker, then the result), and
//! when no cell is current reads `{kernel}/py/run` for a sequence number
//! higher than the last one, journals `started` (the interpreter's pid)
//! and writes `seq cell_dir marker` to the interpreter's stdin; then it
//! reaps. When the interpreter died it journals the loss into the current
//! cell, stays while it has children, and exits.
//!
//! Cell cgroups as the real shim: when cgroups are writable, each cell's
//! own is made and recorded before the cell is handed over, and the
//! interpreter moved into it (what the cell forks inherits it); when the
//! cell ends the interpreter goes back to the shim's cgroup before the
//! leftovers are counted. An empty cell cgroup goes at once, one with
//! members at the shim's end (or through the daemon, ack or shutdown).
//!
//! The interpreter keeps a namespace (names bound by `SetName`),
//! `os.environ`, its working directory and signal dispositions across
//! cells; runs one cell at a time ([`super::interp::PyFlavor`]); SIGINT
//! during a cell is KeyboardInterrupt (a child it waits for is killed, as
//! `subprocess.call` does; the namespace stays; the cell reports
//! `cancelled`) unless the cell ignored SIGINT; SIGINT between cells does
//! nothing. At stdin's end it runs its atexit texts and exits 0.

use super::interp::{PyFlavor, Shell};
use super::process::{CellRef, ExitStatus, Fd, ForkSpec, Program, Role};
use super::SimOs;
use std::collections::BTreeMap;
use tether_core::agent::layout::KernelLayout;
use tether_core::agent::procs::{self, CellScope, Table};
use tether_core::agent::{python, CellLaunch, Os, Pid, ShimCore};
use tether_core::ids::CellSeq;
use tether_core::protocol::{CellOutcome, Lang, Stream};
use tether_core::time::Timestamp;
use tether_scenarios::workload::Workload;

/// The current cell of the interpreter shim.
#[derive(Debug)]
struct Current {
    seq: u64,
    core: ShimCore,
    marker: String,
    /// The cell's own cgroup, which holds the interpreter while it runs.
    group: Option<String>,
}

/// The interpreter shim's progress.
#[derive(Debug)]
pub(crate) struct PyShimRun {
    launch: CellLaunch,
    started: bool,
    py: Option<(Pid, u64)>,
    /// stdout, stderr, reports (read ends), with their EOF flags.
    reads: Option<[u64; 3]>,
    eof: [bool; 3],
    stdin: Option<u64>,
    ctl_buf: Vec<u8>,
    current: Option<Current>,
    last_seq: u64,
    /// The interpreter is gone: reap the rest, then exit.
    finished: bool,
    /// Cell cgroups that still had members when their cell ended (removed
    /// at the shim's end if empty then).
    pending: Vec<String>,
}

impl PyShimRun {
    pub(crate) fn new(launch: CellLaunch) -> PyShimRun {
        PyShimRun {
            launch,
            started: false,
            py: None,
            reads: None,
            eof: [false; 3],
            stdin: None,
            ctl_buf: Vec::new(),
            current: None,
            last_seq: 0,
            finished: false,
            pending: Vec::new(),
        }
    }

    /// Its pseudo cell directory.
    pub(crate) fn cell_dir(&self) -> &str {
        &self.launch.cell_dir
    }

    fn run_seq(&self, os: &SimOs) -> Option<u64> {
        let kernel = KernelLayout::new(&self.launch.kernel_dir);
        os.fs
            .read(&python::run_file(&kernel))
            .ok()
            .and_then(|b| String::from_utf8_lossy(&b).trim().parse::<u64>().ok())
            .filter(|&s| s > self.last_seq)
    }

    /// When this shim next has something to do.
    pub(crate) fn wake(&self, os: &SimOs, pid: Pid) -> Option<Timestamp> {
        let now = os.now;
        if !self.started {
            return Some(now);
        }
        if os.procs.values().any(|c| c.ppid == pid && !c.alive()) {
            return Some(now);
        }
        if self.finished {
            return os.children_of(pid).is_empty().then_some(now);
        }
        if let Some(ids) = self.reads {
            let news = ids.iter().zip(self.eof).any(|(id, eof)| {
                !eof && os
                    .pipes
                    .get(id)
                    .is_none_or(|p| !p.buf.is_empty() || p.writers == 0)
            });
            if news {
                return Some(now);
            }
        }
        if self.current.is_none() && self.run_seq(os).is_some() {
            return Some(now);
        }
        None
    }
}

/// The interpreter's state.
#[derive(Debug)]
pub(crate) struct PyInterp {
    kernel_dir: String,
    stdin: u64,
    ctl: u64,
    inbuf: Vec<u8>,
    namespace: BTreeMap<String, String>,
    environ: BTreeMap<String, String>,
    atexit: Vec<String>,
    cell: Option<(u64, Box<Shell>)>,
}

impl PyInterp {
    /// When the interpreter next has something to do.
    pub(crate) fn wake(&self, os: &SimOs, pid: Pid) -> Option<Timestamp> {
        let p = os.procs.get(&pid)?;
        if p.int_pending || p.trap_pending && self.cell.is_none() {
            return Some(os.now);
        }
        match &self.cell {
            Some((_, shell)) => {
                if shell.python.as_ref().is_some_and(|py| py.ended.is_some()) {
                    Some(os.now)
                } else {
                    shell.wake(os, pid)
                }
            }
            None => {
                let input = os
                    .pipes
                    .get(&self.stdin)
                    .is_none_or(|p| !p.buf.is_empty() || p.writers == 0);
                (input || self.inbuf.contains(&b'\n')).then_some(os.now)
            }
        }
    }
}

/// How `waitpid` describes the interpreter's end (as the real shim words it).
fn death_detail(status: ExitStatus) -> String {
    match status {
        ExitStatus::Code(code) => format!("exited with status {code}"),
        ExitStatus::Signaled(sig) => format!("was killed by signal {}", sig.number()),
    }
}

impl SimOs {
    /// Runs the interpreter shim `pid` as far as it gets now.
    pub(crate) fn run_pyshim(&mut self, pid: Pid) -> bool {
        let take = |p| match p {
            Program::PyShim(shim) => Ok(shim),
            other => Err(other),
        };
        self.step_program(pid, take, Program::PyShim, |os, shim| {
            os.as_process(pid, |os| os.drive_pyshim(pid, shim))
        })
    }

    fn drive_pyshim(&mut self, pid: Pid, shim: &mut PyShimRun) -> bool {
        let mut progress = false;
        if !shim.started {
            shim.started = true;
            progress = true;
            self.start_interpreter(pid, shim);
        }
        if !shim.finished {
            progress |= self.pyshim_read(shim);
            while let Some(end) = shim.ctl_buf.iter().position(|&b| b == b'\n') {
                progress = true;
                let line: Vec<u8> = shim.ctl_buf.drain(..=end).collect();
                let Ok(report) = serde_json::from_slice::<serde_json::Value>(&line) else {
                    continue;
                };
                let seq = report.get("seq").and_then(serde_json::Value::as_u64);
                let outcome = report
                    .get("outcome")
                    .and_then(|o| serde_json::from_value::<CellOutcome>(o.clone()).ok());
                let (Some(seq), Some(outcome)) = (seq, outcome) else {
                    continue;
                };
                if shim.current.as_ref().is_some_and(|c| c.seq == seq) {
                    if let Some(c) = shim.current.take() {
                        self.pyshim_finish(pid, shim, c, Ok(outcome));
                    }
                }
            }
            if shim.current.is_none() {
                if let Some(seq) = shim.run_seq(self) {
                    progress = true;
                    shim.last_seq = seq;
                    self.pyshim_start_cell(shim, seq);
                }
            }
        }
        let mut died = None;
        for (child, status) in self.reap_children(pid) {
            progress = true;
            if shim.py.is_some_and(|(py, _)| py == child) {
                died = Some(death_detail(status));
            }
        }
        if let Some(detail) = died {
            // What the interpreter wrote before it died belongs to the cell.
            self.pyshim_read(shim);
            if let Some(c) = shim.current.take() {
                self.pyshim_finish(pid, shim, c, Err(detail));
            }
            self.pyshim_close(pid, shim);
        }
        if shim.finished && self.is_alive(pid) && self.children_of(pid).is_empty() {
            for group in std::mem::take(&mut shim.pending) {
                let _ = self.remove_cgroup(&group);
            }
            self.exit_proc(pid, ExitStatus::Code(0));
            return true;
        }
        progress
    }

    /// Ends the current cell, as the real shim's `finish`: the interpreter
    /// leaves the cell's cgroup (back to the shim's), the leftovers (marker
    /// and cgroup) are counted, the outcome journaled with `done`; an
    /// empty cgroup is removed, one with members kept for later.
    fn pyshim_finish(
        &mut self,
        pid: Pid,
        shim: &mut PyShimRun,
        mut c: Current,
        reported: Result<CellOutcome, String>,
    ) {
        let py_pid = shim.py.map_or(0, |p| p.0);
        if c.group.is_some() {
            self.join_cgroup_of(py_pid, pid);
        }
        let left = self.py_leftovers(&c.marker, py_pid, c.group.as_deref());
        let _ = c.core.finish_python(self, reported, left);
        if let Some(group) = c.group {
            if self.remove_cgroup(&group).is_err() {
                shim.pending.push(group);
            }
        }
    }

    /// The shim is done with the interpreter: its descriptors close.
    fn pyshim_close(&mut self, pid: Pid, shim: &mut PyShimRun) {
        shim.finished = true;
        shim.current = None;
        shim.stdin = None;
        if let Some(p) = self.procs.get_mut(&pid) {
            let reads = std::mem::take(&mut p.reads);
            let writes = std::mem::take(&mut p.writes);
            for id in reads {
                if let Some(pipe) = self.pipes.get_mut(&id) {
                    pipe.reader_open = false;
                }
                self.gc_pipe(id);
            }
            for id in writes {
                if let Some(pipe) = self.pipes.get_mut(&id) {
                    pipe.writers = pipe.writers.saturating_sub(1);
                }
                self.gc_pipe(id);
            }
        }
    }

    /// Reads stdout, stderr (journaled into the current cell, dropped
    /// between cells) and the report pipe.
    fn pyshim_read(&mut self, shim: &mut PyShimRun) -> bool {
        let Some(ids) = shim.reads else {
            return false;
        };
        let mut progress = false;
        for (i, id) in ids.into_iter().enumerate() {
            if shim.eof[i] {
                continue;
            }
            let (data, at_eof) = self.read_pipe(id);
            if !data.is_empty() {
                progress = true;
                match i {
                    0 | 1 => {
                        let stream = if i == 0 {
                            Stream::Stdout
                        } else {
                            Stream::Stderr
                        };
                        if let Some(c) = shim.current.as_mut() {
                            let _ = c.core.output(self, stream, &data);
                        }
                    }
                    _ => shim.ctl_buf.extend_from_slice(&data),
                }
            }
            if at_eof {
                shim.eof[i] = true;
                progress = true;
            }
        }
        progress
    }

    /// As the real shim: becomes a child subreaper and starts the
    /// interpreter (own session, marker `<nonce>:py`).
    fn start_interpreter(&mut self, pid: Pid, shim: &mut PyShimRun) {
        if let Some(p) = self.procs.get_mut(&pid) {
            p.subreaper = true;
        }
        let launch = shim.launch.clone();
        let Some(program) = launch.argv.first() else {
            shim.finished = true;
            return;
        };
        if !program.starts_with('/') && !self.has_program(program) {
            // "cannot start python3": the shim exits; the daemon reports it.
            shim.finished = true;
            return;
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
        let mut env = self
            .procs
            .get(&pid)
            .map(|p| p.env.clone())
            .unwrap_or_default();
        env.insert(launch.marker.0.clone(), launch.marker.1.clone());
        let interp = PyInterp {
            kernel_dir: launch.kernel_dir.trim_end_matches('/').to_owned(),
            stdin,
            ctl,
            inbuf: Vec::new(),
            namespace: BTreeMap::new(),
            environ: env.clone(),
            atexit: Vec::new(),
            cell: None,
        };
        let argv: Vec<&str> = launch.argv.iter().map(String::as_str).collect();
        let mut spec = ForkSpec::new(&argv, Program::Python(Box::new(interp)), Role::Interpreter);
        spec.new_session = true;
        spec.stdio = Some((Fd::Pipe(out), Fd::Pipe(err)));
        spec.env = Some(env);
        spec.origin = Some(Some(CellRef {
            kernel_dir: launch.kernel_dir.trim_end_matches('/').to_owned(),
            cell_dir: launch.cell_dir.trim_end_matches('/').to_owned(),
            seq: None,
        }));
        shim.reads = Some([out, err, ctl]);
        shim.stdin = Some(stdin);
        match self.fork(pid, spec) {
            Ok(py) => {
                if let Some(p) = self.procs.get_mut(&py) {
                    // The bootstrap's SIGINT handler; fd 3 and stdin.
                    p.int_handler = true;
                    p.writes = vec![ctl];
                    p.reads = vec![stdin];
                }
                if let Some(pipe) = self.pipes.get_mut(&ctl) {
                    pipe.writers += 1;
                }
                let start = self.procs.get(&py).map_or(0, |p| p.starttime);
                shim.py = Some((py, start));
            }
            Err(_) => self.pyshim_close(pid, shim),
        }
    }

    /// Hands cell `seq` to the interpreter, as the real shim's `start_cell`.
    fn pyshim_start_cell(&mut self, shim: &mut PyShimRun, seq: u64) {
        let kernel = KernelLayout::new(&shim.launch.kernel_dir);
        let nonce = shim
            .launch
            .marker
            .1
            .strip_suffix(&format!(":{}", python::INTERPRETER_MARK))
            .unwrap_or(&shim.launch.marker.1)
            .to_owned();
        let cell = kernel.cell(CellSeq(seq));
        let marker = procs::marker_value(&nonce, CellSeq(seq));
        let launch = CellLaunch {
            kernel_dir: kernel.dir().to_owned(),
            cell_dir: cell.dir().to_owned(),
            lang: Lang::Python,
            argv: Vec::new(),
            marker: (procs::MARKER_NAME.to_owned(), marker.clone()),
        };
        let Ok(mut core) = ShimCore::new(self, launch) else {
            return;
        };
        if let Some(reason) = core.tombstone(self) {
            let _ = core.never_started(self, reason.outcome());
            return;
        }
        let (py_pid, py_start) = shim.py.unwrap_or((0, 0));
        // As the real shim: the cell's own cgroup, recorded, and the
        // interpreter moved into it before the cell is handed over.
        let shim_pid = self.current;
        let mut group = None;
        if let Some(g) = self.make_cgroup(shim_pid, &core.cgroup_name()) {
            if core.record_cgroup(self, &g).is_ok() && self.join_cgroup(py_pid, &g).is_ok() {
                group = Some(g);
            } else {
                let _ = self.remove_cgroup(&g);
            }
        }
        let _ = core.started(self, py_pid, py_pid, py_start);
        let line = format!("{seq} {} {marker}\n", cell.dir());
        let sent = shim.stdin.is_some_and(|id| match self.pipes.get_mut(&id) {
            Some(pipe) if pipe.reader_open => {
                pipe.buf.extend_from_slice(line.as_bytes());
                true
            }
            // EPIPE (the shim ignores SIGPIPE, as Rust programs do).
            _ => false,
        });
        let c = Current {
            seq,
            core,
            marker,
            group,
        };
        if !sent {
            shim.stdin = None;
            self.pyshim_finish(shim_pid, shim, c, Err("does not take input".into()));
            return;
        }
        shim.current = Some(c);
    }

    /// Processes carrying the cell's marker or in its cgroup that still
    /// run, as the real shim computes them (the interpreter is spared).
    fn py_leftovers(&mut self, marker: &str, py_pid: Pid, group: Option<&str>) -> Vec<Pid> {
        let table = Table::snapshot(self);
        let mut protected = procs::protected(&table, self.current);
        protected.insert(py_pid);
        let scope = CellScope {
            shim: None,
            pgid: None,
            marker: marker.to_owned(),
            other_markers: Vec::new(),
            extra: Vec::new(),
            cgroup: group.map(str::to_owned),
        };
        procs::cell_processes(self, &table, &scope, &protected)
            .into_iter()
            .collect()
    }

    /// Runs the interpreter `pid` as far as it gets now.
    pub(crate) fn run_python(&mut self, pid: Pid) -> bool {
        let take = |p| match p {
            Program::Python(py) => Ok(py),
            other => Err(other),
        };
        self.step_program(pid, take, Program::Python, |os, py| {
            os.drive_python(pid, py)
        })
    }

    fn drive_python(&mut self, pid: Pid, py: &mut PyInterp) -> bool {
        let mut progress = false;
        // A cell, then maybe the next line already buffered.
        for _ in 0..4 {
            if !self.running(pid) {
                return progress;
            }
            let (int, term) = self
                .procs
                .get_mut(&pid)
                .map(|p| {
                    let int = std::mem::take(&mut p.int_pending);
                    // A TERM handler between cells runs and returns.
                    let term = py.cell.is_none() && std::mem::take(&mut p.trap_pending);
                    (int, term)
                })
                .unwrap_or_default();
            progress |= int || term;
            if let Some((_, shell)) = py.cell.as_mut() {
                if int {
                    self.keyboard_interrupt(pid, shell);
                }
                progress |= self.drive_shell(pid, shell);
                let ended = shell.python.as_mut().and_then(|f| f.ended.take());
                let Some(outcome) = ended else {
                    return progress;
                };
                progress = true;
                if !self.end_py_cell(pid, py, outcome) {
                    return progress;
                }
                continue;
            }
            // `for _line in sys.stdin`.
            let (data, eof) = self.read_pipe(py.stdin);
            py.inbuf.extend_from_slice(&data);
            progress |= !data.is_empty();
            let Some(end) = py.inbuf.iter().position(|&b| b == b'\n') else {
                if eof {
                    // stdin closed: the loop ends, atexit runs, exit 0.
                    let out = self.procs.get(&pid).map_or(Fd::Null, |p| p.stdout);
                    for text in std::mem::take(&mut py.atexit).into_iter().rev() {
                        if !self.write_fd(pid, out, text.as_bytes()) {
                            return true;
                        }
                    }
                    self.exit_proc(pid, ExitStatus::Code(0));
                    return true;
                }
                return progress;
            };
            progress = true;
            let line: Vec<u8> = py.inbuf.drain(..=end).collect();
            self.start_py_cell(pid, py, &line);
        }
        progress
    }

    /// KeyboardInterrupt in the running cell: a child `subprocess.call`
    /// waits for is killed and reaped; the cell reports `cancelled`.
    fn keyboard_interrupt(&mut self, pid: Pid, shell: &mut Shell) {
        if let Some(child) = shell.foreground() {
            let _ = self.deliver(pid, child, super::SimSignal::Kill);
            self.reap(child, pid);
        }
        if let Some(f) = shell.python.as_mut() {
            f.ended = Some(CellOutcome::Cancelled);
        }
        shell.stop();
    }

    /// The bootstrap's loop body for one stdin line: `seq dir marker`.
    fn start_py_cell(&mut self, pid: Pid, py: &mut PyInterp, line: &[u8]) {
        let text = String::from_utf8_lossy(line);
        let mut parts = text.trim_end_matches('\n').splitn(3, ' ');
        let (Some(seq), Some(dir), Some(marker)) = (parts.next(), parts.next(), parts.next())
        else {
            // The bootstrap's unpacking fails: ValueError ends the loop.
            self.exit_proc(pid, ExitStatus::Code(1));
            return;
        };
        let Ok(seq) = seq.parse::<u64>() else {
            self.exit_proc(pid, ExitStatus::Code(1));
            return;
        };
        py.environ
            .insert(procs::MARKER_NAME.to_owned(), marker.to_owned());
        let origin = CellRef {
            kernel_dir: py.kernel_dir.clone(),
            cell_dir: dir.trim_end_matches('/').to_owned(),
            seq: Some(seq),
        };
        let code = self.fs.read(&format!("{dir}/code"));
        let workload = match code {
            Ok(code) => Workload::decode(&code).map_err(|e| format!("SyntaxError: {e}")),
            Err(e) => Err(format!("FileNotFoundError: {dir}/code: {e}")),
        };
        let mut shell = match workload {
            Ok(w) => Shell::new(w, None),
            Err(message) => {
                let err = self.procs.get(&pid).map_or(Fd::Null, |p| p.stderr);
                self.write_fd(pid, err, format!("{message}\n").as_bytes());
                let mut shell = Shell::new(Workload::default(), None);
                shell.stop();
                shell.python = Some(PyFlavor {
                    environ: BTreeMap::new(),
                    origin,
                    ended: Some(CellOutcome::Error { message }),
                });
                py.cell = Some((seq, Box::new(shell)));
                return;
            }
        };
        shell.vars = std::mem::take(&mut py.namespace);
        shell.python = Some(PyFlavor {
            environ: std::mem::take(&mut py.environ),
            origin,
            ended: None,
        });
        py.cell = Some((seq, Box::new(shell)));
    }

    /// The cell ended: the namespace and `os.environ` stay for the next
    /// one; the report goes to fd 3. False if the interpreter died of it
    /// (the shim is gone: BrokenPipeError ends the loop).
    fn end_py_cell(&mut self, pid: Pid, py: &mut PyInterp, outcome: CellOutcome) -> bool {
        let Some((seq, mut shell)) = py.cell.take() else {
            return true;
        };
        py.namespace = std::mem::take(&mut shell.vars);
        if let Some(f) = shell.python.take() {
            if !f.environ.is_empty() {
                py.environ = f.environ;
            }
        }
        if let Some(text) = shell.take_exit_trap() {
            py.atexit.push(text);
        }
        let report = serde_json::json!({ "seq": seq, "outcome": outcome }).to_string();
        let sent = match self.pipes.get_mut(&py.ctl) {
            Some(pipe) if pipe.reader_open => {
                pipe.buf.extend_from_slice(report.as_bytes());
                pipe.buf.push(b'\n');
                true
            }
            _ => false,
        };
        if !sent {
            self.exit_proc(pid, ExitStatus::Code(1));
        }
        sent
    }
}
