//! The simulated Python interpreter a kernel's interpreter shim
//! ([`super::pyshim`]) runs: what the bootstrap of
//! `tether_core::agent::python` does, over the workload interpreter.
//!
//! The interpreter keeps a namespace (names bound by `SetName`),
//! `os.environ`, its working directory and signal dispositions across
//! cells; reads `seq cell_dir marker` lines on stdin and runs one cell at
//! a time ([`super::interp::PyFlavor`]), reporting each cell's outcome as
//! one JSON line on its report pipe (fd 3); SIGINT during a cell is
//! KeyboardInterrupt (a child it waits for is killed, as
//! `subprocess.call` does; the namespace stays; the cell reports
//! `cancelled`) unless the cell ignored SIGINT; SIGINT between cells does
//! nothing. At stdin's end it runs its atexit texts and exits 0.

use super::interp::{PyFlavor, Shell};
use super::process::{CellRef, ExitStatus, Fd, Program};
use super::SimOs;
use std::collections::BTreeMap;
use tether_core::agent::layout::CellLayout;
use tether_core::agent::{procs, Pid};
use tether_core::protocol::CellOutcome;
use tether_core::time::Timestamp;
use tether_scenarios::workload::Workload;

/// The interpreter's state.
#[derive(Debug)]
pub(crate) struct PyInterp {
    kernel_dir: String,
    /// The daemon whose shim started it (ground truth, [`super::orphans`]).
    pub(crate) daemon: Option<super::orphans::DaemonId>,
    stdin: u64,
    ctl: u64,
    inbuf: Vec<u8>,
    namespace: BTreeMap<String, String>,
    environ: BTreeMap<String, String>,
    atexit: Vec<String>,
    cell: Option<(u64, Box<Shell>)>,
    /// Until then it starts up (imports): it reads no cell, and SIGINT,
    /// ignored from its start until the bootstrap sets its handler, does
    /// nothing.
    pub(crate) ready_at: Timestamp,
    /// Its parent at its start, its shim: the bootstrap's first act.
    pub(crate) shim: Pid,
}

impl PyInterp {
    /// A fresh interpreter of the kernel at `kernel_dir`, reading cells
    /// from the pipe `stdin` and reporting on the pipe `ctl`.
    pub(crate) fn new(
        kernel_dir: String,
        stdin: u64,
        ctl: u64,
        environ: BTreeMap<String, String>,
    ) -> PyInterp {
        PyInterp {
            kernel_dir,
            daemon: None,
            stdin,
            ctl,
            inbuf: Vec::new(),
            namespace: BTreeMap::new(),
            environ,
            atexit: Vec::new(),
            cell: None,
            ready_at: Timestamp::default(),
            shim: 0,
        }
    }

    /// When the interpreter next has something to do.
    pub(crate) fn wake(&self, os: &SimOs, pid: Pid) -> Option<Timestamp> {
        let p = os.procs.get(&pid)?;
        if os.now < self.ready_at {
            return Some(self.ready_at);
        }
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

impl SimOs {
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
        if self.now < py.ready_at {
            // Starting up: a SIGINT now meets the ignore it started with.
            if let Some(p) = self.procs.get_mut(&pid) {
                p.int_pending = false;
            }
            return false;
        }
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
            if self.procs.get(&pid).is_some_and(|p| p.ppid != py.shim) {
                // The bootstrap's look for its shim: gone (killed while
                // the interpreter started, the cell already in the pipe),
                // it exits without running the cell.
                self.exit_proc(pid, ExitStatus::Code(1));
                return true;
            }
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

    /// The bootstrap's loop body for one stdin line: `seq dir marker
    /// token` (`-`: the cell takes no tool calls).
    fn start_py_cell(&mut self, pid: Pid, py: &mut PyInterp, line: &[u8]) {
        use tether_core::protocol::calls::{ENV_DIR, ENV_TOKEN};
        let text = String::from_utf8_lossy(line);
        let mut parts = text.trim_end_matches('\n').splitn(4, ' ');
        let (Some(seq), Some(dir), Some(marker), Some(token)) =
            (parts.next(), parts.next(), parts.next(), parts.next())
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
        // The cell's tool-call credential, in `os.environ` as the
        // bootstrap puts it (and in the context variable `tether.call`
        // reads: the simulated caller reads the environment).
        if token == "-" {
            py.environ.remove(ENV_DIR);
            py.environ.remove(ENV_TOKEN);
        } else {
            let calls = format!("{}/calls", dir.trim_end_matches('/'));
            py.environ.insert(ENV_DIR.to_owned(), calls);
            py.environ.insert(ENV_TOKEN.to_owned(), token.to_owned());
        }
        let origin = CellRef {
            kernel_dir: py.kernel_dir.clone(),
            cell_dir: dir.trim_end_matches('/').to_owned(),
            seq: Some(seq),
        };
        self.note_py_cell_start(py.daemon, &py.kernel_dir, seq);
        // A cancel recorded before this look: the bootstrap raises
        // KeyboardInterrupt before it reads the code (its SIGINT may have
        // come while the interpreter was starting, ignored then).
        let tombstone = self
            .fs
            .exists(&CellLayout::from_dir(dir.trim_end_matches('/')).cancel());
        let code = self.fs.read(&format!("{dir}/code"));
        let workload = match code {
            _ if tombstone => Err(None),
            Ok(code) => Workload::decode(&code).map_err(|e| Some(format!("SyntaxError: {e}"))),
            Err(e) => Err(Some(format!("FileNotFoundError: {dir}/code: {e}"))),
        };
        let mut shell = match workload {
            Ok(w) => Shell::new(w, None),
            Err(message) => {
                if let Some(message) = &message {
                    let err = self.procs.get(&pid).map_or(Fd::Null, |p| p.stderr);
                    self.write_fd(pid, err, format!("{message}\n").as_bytes());
                }
                // Nothing of the cell ran: the namespace and environment
                // go on to the next cell.
                let mut shell = Shell::new(Workload::default(), None);
                shell.stop();
                shell.vars = std::mem::take(&mut py.namespace);
                shell.python = Some(PyFlavor {
                    environ: std::mem::take(&mut py.environ),
                    origin,
                    ended: Some(message.map_or(CellOutcome::Cancelled, |message| {
                        CellOutcome::Error { message }
                    })),
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
