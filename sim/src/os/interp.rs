//! The workload interpreter: a simulated `sh` running a
//! [`Workload`] step by step in virtual time, with the process behaviour of
//! the real rendered shell ([`tether_scenarios::workload::render_shell`]):
//! `sleep` is a foreground child (a TERM trap waits for it), `&` children
//! stay in the group with SIGINT ignored, `setsid`/`env -i`/`setpgid`
//! escapes fork intermediate processes that exit at once (so the escapee
//! is an orphan, reparented to the nearest subreaper), a builtin busy loop
//! never forks, EXIT traps run on `exit` and at the end but not on death by
//! signal, and finished background jobs stay zombies until the shell next
//! waits for a foreground job (as dash does). A cell run by `bash` differs
//! as bash does: background jobs are reaped at once and keep SIGINT, and a
//! fatal TERM/INT/HUP runs the EXIT trap before the shell dies.

use super::caller::CallerRun;
use super::disk::WriteMode;
use super::process::{CellRef, Disposition, ExitStatus, Fd, ForkSpec, Program, Role, RunState};
use super::SimOs;
use std::collections::BTreeMap;
use std::time::Duration;
use tether_core::agent::{OsError, Pid};
use tether_core::protocol::{CellOutcome, Stream};
use tether_core::time::Timestamp;
use tether_scenarios::shell_model::{self, CellEnd, Flavor, ShellOption, ShellState, StateChange};
use tether_scenarios::workload::{Step, Workload};

/// Commands one shell may run at one instant before the interpreter gives
/// up on it (a runaway loop in the simulation, not in the workload: every
/// workload loop waits on time).
const STEP_LIMIT: usize = 100_000;

/// The tool-call environment a cell's shim gives its main process, which
/// the cell script neither saves nor restores.
const CALLS_ENV: [&str; 2] = [
    tether_core::protocol::calls::ENV_DIR,
    tether_core::protocol::calls::ENV_TOKEN,
];

/// What the current frame waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wait {
    /// Nothing: run the next step.
    Ready,
    /// A foreground child (`sleep`, a `setsid …` command).
    Child(Pid),
    /// A builtin busy loop, until then or forever.
    Busy(Option<Timestamp>),
}

#[derive(Debug)]
struct Frame {
    steps: Vec<Step>,
    pc: usize,
    wait: Wait,
}

/// The files the agent's cell script reads and writes around the user's
/// code (see `tether_core::agent::shell`): the kernel's saved shell state
/// (restored first, written to `shell.new` without the marker at the end
/// of the code and on the shell's exit path) and the cell's `end` file
/// with the last status.
#[derive(Clone, Debug)]
pub(crate) struct CellFiles {
    pub(crate) cell_dir: String,
    pub(crate) state_dir: Option<String>,
    pub(crate) marker: String,
}

/// A workload run as a cell of a Python interpreter (see
/// [`super::python`]) rather than by a shell: `sleep` and busy loops stay
/// in-process, children get the interpreter's `os.environ` (with the
/// cell's marker) and are the cell's, `exit N` is `SystemExit` (the cell
/// ends, the interpreter stays), an unbound name is `NameError`, and the
/// end of the steps ends the cell, not the process.
#[derive(Debug)]
pub(crate) struct PyFlavor {
    /// `os.environ`: what children inherit (what `/proc/PID/environ` of
    /// the interpreter shows does not change).
    pub(crate) environ: BTreeMap<String, String>,
    /// The cell the children belong to (ground truth).
    pub(crate) origin: CellRef,
    /// How the cell ended, once it did (the bootstrap's report).
    pub(crate) ended: Option<CellOutcome>,
}

/// A shell interpreting a workload.
#[derive(Debug)]
pub(crate) struct Shell {
    /// The script, then one frame per running trap handler.
    frames: Vec<Frame>,
    exit_trap: Option<String>,
    last_status: i32,
    /// The cell script's files; `None` for a plain shell.
    files: Option<CellFiles>,
    restored: bool,
    /// bash rather than dash: reaps background jobs as they finish
    /// (SIGCHLD handler), runs the EXIT trap when a fatal TERM/INT/HUP
    /// kills it, and does not make background jobs ignore SIGINT.
    pub(crate) bash: bool,
    /// Names bound by [`Step::SetName`] in a Python cell: the kernel's
    /// namespace.
    pub(crate) vars: BTreeMap<String, String>,
    /// A shell's state (variables, exports, functions, aliases, options,
    /// umask, directory, traps): what the kernel's save keeps, by the
    /// rules of [`shell_model`]. Its exported variables are the process's
    /// environment (with the marker) and its directory the process's.
    pub(crate) state: ShellState,
    /// Run as a Python cell instead.
    pub(crate) python: Option<PyFlavor>,
    /// The background child of a [`Step::LatePrint`]: what it prints is
    /// ground truth ([`SimOs::late_writes`]).
    late: bool,
}

impl Shell {
    /// A shell that runs `workload`.
    pub(crate) fn new(workload: Workload, files: Option<CellFiles>) -> Shell {
        Shell {
            frames: vec![Frame {
                steps: workload.steps,
                pc: 0,
                wait: Wait::Ready,
            }],
            exit_trap: None,
            last_status: 0,
            files,
            restored: false,
            bash: false,
            vars: BTreeMap::new(),
            state: ShellState::default(),
            python: None,
            late: false,
        }
    }

    /// A shell for cell code: the decoded workload, or, when the code is not
    /// a workload, a shell that reports the error and exits 2 (as `sh` does
    /// on a syntax error).
    pub(crate) fn from_code(code: &[u8], files: Option<CellFiles>) -> Shell {
        // Code reaches the shell as an argv, which ends at the first NUL:
        // the shell runs the part before it (the agent refuses such code,
        // `tether_core::agent::shell::unrunnable`).
        let code = code.split(|&b| b == 0).next().unwrap_or_default();
        // A shell takes the CR of a CRLF line ending for part of the line's
        // last word (bash: `sleep: invalid time interval '2\r'`): the agent
        // hands it code with LF endings (`tether_core::agent::shell::cell_code`;
        // the eleventh mutants sample's `==` -> `!=` there kept them).
        let decoded = if code.windows(2).any(|w| w == b"\r\n") {
            Err("$'\\r': command not found (a CRLF line ending)".to_owned())
        } else {
            Workload::decode(code).map_err(|e| e.to_string())
        };
        match decoded {
            Ok(w) => Shell::new(w, files),
            Err(e) => Shell::new(
                Workload::new(vec![
                    Step::Print {
                        stream: Stream::Stderr,
                        text: format!("sh: {e}\n"),
                    },
                    Step::Exit { code: 2 },
                ]),
                None,
            ),
        }
    }

    /// When this shell next needs to run, if it waits on time only.
    pub(crate) fn wake(&self, os: &SimOs, pid: Pid) -> Option<Timestamp> {
        let trap = os.procs.get(&pid).is_some_and(|p| p.trap_pending);
        if self.bash
            && os
                .procs
                .values()
                .any(|c| c.ppid == pid && !c.alive() && Some(c.pid) != self.foreground())
        {
            return Some(os.now);
        }
        match self.frames.last().map(|f| f.wait) {
            None | Some(Wait::Ready) => Some(os.now),
            Some(Wait::Child(c)) => match os.procs.get(&c) {
                Some(p) if p.alive() => None,
                _ => Some(os.now),
            },
            Some(Wait::Busy(_)) if trap => Some(os.now),
            Some(Wait::Busy(until)) => until,
        }
    }
}

impl Shell {
    /// The foreground child it waits for, if any.
    pub(crate) fn foreground(&self) -> Option<Pid> {
        match self.frames.last().map(|f| f.wait) {
            Some(Wait::Child(c)) => Some(c),
            _ => None,
        }
    }

    /// Abandons every step (an exception unwinding the cell).
    pub(crate) fn stop(&mut self) {
        self.frames.clear();
    }

    /// The shell it models.
    pub(crate) fn flavor(&self) -> Flavor {
        if self.bash {
            Flavor::Bash
        } else {
            Flavor::Dash
        }
    }

    /// Takes the EXIT trap's text (it runs once).
    pub(crate) fn take_exit_trap(&mut self) -> Option<String> {
        self.exit_trap.take()
    }
}

fn secs(ms: u64) -> String {
    format!("{}.{:03}", ms / 1000, ms % 1000)
}

impl SimOs {
    /// Runs the shell `pid` as far as it gets at the current instant.
    /// Returns true if it did anything.
    pub(crate) fn run_shell(&mut self, pid: Pid) -> bool {
        let take = |p| match p {
            Program::Shell(shell) => Ok(shell),
            other => Err(other),
        };
        self.step_program(pid, take, Program::Shell, |os, shell| {
            os.drive_shell(pid, shell)
        })
    }

    pub(crate) fn running(&self, pid: Pid) -> bool {
        self.procs
            .get(&pid)
            .is_some_and(|p| p.state == RunState::Running)
    }

    pub(crate) fn drive_shell(&mut self, pid: Pid, shell: &mut Shell) -> bool {
        let mut progress = false;
        if !shell.restored {
            shell.restored = true;
            progress = true;
            self.restore_state(pid, shell);
        }
        for _ in 0..STEP_LIMIT {
            if !self.running(pid) || shell.python.as_ref().is_some_and(|py| py.ended.is_some()) {
                return progress;
            }
            if shell.bash {
                // bash's SIGCHLD handler: finished background jobs go at
                // once (the foreground one is collected by its wait).
                let fg = shell.foreground();
                let zombies: Vec<Pid> = self
                    .procs
                    .values()
                    .filter(|c| c.ppid == pid && !c.alive() && Some(c.pid) != fg)
                    .map(|c| c.pid)
                    .collect();
                for z in zombies {
                    self.reap(z, pid);
                    progress = true;
                }
            }
            let trap_pending = self.procs.get(&pid).is_some_and(|p| p.trap_pending);
            let Some(frame) = shell.frames.last_mut() else {
                self.finish(pid, shell, None);
                return true;
            };
            match frame.wait {
                Wait::Child(c) => {
                    let status = match self.procs.get(&c) {
                        Some(p) if p.alive() => return progress,
                        Some(_) => self.reap(c, pid),
                        None => None,
                    };
                    frame.wait = Wait::Ready;
                    shell.last_status = status.map_or(127, ExitStatus::shell_status);
                    // Waiting for a foreground job reaps finished background
                    // jobs too (dash's wait loop); nothing else does.
                    self.reap_children(pid);
                    progress = true;
                }
                Wait::Busy(until) => {
                    if trap_pending {
                        self.start_trap(pid, shell);
                        progress = true;
                    } else if until.is_some_and(|t| t <= self.now) {
                        frame.wait = Wait::Ready;
                        progress = true;
                    } else {
                        return progress;
                    }
                }
                Wait::Ready => {
                    if trap_pending {
                        self.start_trap(pid, shell);
                        progress = true;
                        continue;
                    }
                    let Some(frame) = shell.frames.last_mut() else {
                        continue;
                    };
                    if frame.pc >= frame.steps.len() {
                        if shell.frames.len() > 1 {
                            shell.frames.pop();
                        } else {
                            self.finish(pid, shell, None);
                        }
                        progress = true;
                        continue;
                    }
                    let step = frame.steps[frame.pc].clone();
                    frame.pc += 1;
                    progress = true;
                    self.exec_step(pid, shell, step);
                }
            }
        }
        progress
    }

    fn start_trap(&mut self, pid: Pid, shell: &mut Shell) {
        let Some(p) = self.procs.get_mut(&pid) else {
            return;
        };
        p.trap_pending = false;
        if let Disposition::Trap(steps) = &p.term {
            if let (
                Role::Cell,
                Some(CellRef {
                    kernel_dir,
                    seq: Some(seq),
                    ..
                }),
            ) = (&p.role, &p.origin)
            {
                self.trapped.insert((kernel_dir.clone(), *seq));
            }
            shell.frames.push(Frame {
                steps: steps.clone(),
                pc: 0,
                wait: Wait::Ready,
            });
        }
    }

    /// The cell script's prologue (`tether_core::agent::shell`): the note
    /// a cell before left goes to stderr, then the kernel's snapshot is
    /// restored over what the shell inherited ([`ShellState::restore`]).
    /// A Python cell keeps its namespace elsewhere.
    fn restore_state(&mut self, pid: Pid, shell: &mut Shell) {
        if shell.python.is_some() {
            return;
        }
        let marker = shell.files.as_ref().map(|f| f.marker.clone());
        let Some(p) = self.procs.get(&pid) else {
            return;
        };
        let inherited: BTreeMap<String, String> = p
            .env
            .iter()
            .filter(|(k, _)| Some(*k) != marker.as_ref() && !CALLS_ENV.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let cwd = p.cwd.clone();
        let mut snapshot = None;
        if let Some(state) = shell.files.as_ref().and_then(|f| f.state_dir.clone()) {
            let note = format!("{state}/note");
            if let Ok(text) = self.fs.read(&note) {
                if !text.is_empty() {
                    let err = self.procs.get(&pid).map_or(Fd::Null, |p| p.stderr);
                    self.write_fd(pid, err, &text);
                    let _ = self.fs.write_atomic(&note, b"");
                }
            }
            snapshot = self
                .fs
                .read(&format!("{state}/shell"))
                .ok()
                .and_then(|b| ShellState::from_snapshot(&b));
        }
        shell.state = ShellState::restore(shell.flavor(), &inherited, snapshot);
        // The cell's tool-call directory and credential are the shim's
        // for this cell: never saved, never restored (the wrapper's
        // exclusions), always inherited.
        for name in CALLS_ENV {
            if let Some(v) = self.procs.get(&pid).and_then(|p| p.env.get(name).cloned()) {
                shell.state.assign(name, &v, true);
            }
        }
        // `cd` to the saved directory, if it is still there.
        match shell.state.cwd.clone().filter(|d| self.fs.is_dir(d)) {
            Some(dir) => {
                if let Some(p) = self.procs.get_mut(&pid) {
                    p.cwd = dir;
                }
            }
            None => shell.state.cwd = Some(cwd),
        }
        self.sync_env(pid, shell);
    }

    /// The process's environment follows the shell's exports (the marker
    /// stays: the wrapper never saves or restores it).
    fn sync_env(&mut self, pid: Pid, shell: &Shell) {
        let marker = shell.files.as_ref().map(|f| f.marker.clone());
        if let Some(p) = self.procs.get_mut(&pid) {
            let mut env = shell.state.environment();
            if let Some(m) = marker {
                if let Some(v) = p.env.get(&m) {
                    env.insert(m, v.clone());
                }
            }
            p.env = env;
        }
    }

    /// The wrapper's save (at the end of the code, or from its EXIT trap
    /// on `exit`, a set -e failure or a cancel's TERM): what the shell's
    /// flavor can list ([`ShellState::saved`]) goes to the cell's
    /// `shell.new` (the shim promotes it), without the marker.
    fn save_state(&mut self, pid: Pid, shell: &mut Shell) {
        let Some(files) = shell.files.as_ref() else {
            return;
        };
        let mut state = shell.state.saved(shell.flavor());
        state.vars.remove(&files.marker);
        state.exported.remove(&files.marker);
        for name in CALLS_ENV {
            state.vars.remove(name);
            state.exported.remove(name);
        }
        if let Some(p) = self.procs.get(&pid) {
            state.cwd = Some(p.cwd.clone());
        }
        let new = format!("{}/shell.new", files.cell_dir);
        let snapshot = state.to_snapshot();
        // The script truncates `shell.new` (`>|`: no space needed), then
        // appends its save line by line, the end marker last: on a full
        // disk what fits of the first lines lands (a torn save, which the
        // shim must not take for the state).
        let _ = self.fs.write_atomic(&new, b"");
        let _ = self.disk_write(&new, &snapshot, WriteMode::Append);
    }

    /// The code reached its end: the save, then the `end` file.
    fn save_end(&mut self, pid: Pid, shell: &mut Shell) {
        self.save_state(pid, shell);
        let Some(files) = shell.files.take() else {
            return;
        };
        let end = format!("{}/end", files.cell_dir);
        let status = format!("{}\n", shell.last_status);
        // Its `printf >| end` fails on a full disk as the save did.
        let _ = self.disk_write(&end, status.as_bytes(), WriteMode::Replace);
    }

    /// Ends the shell: the script's epilogue on a normal end, the EXIT
    /// trap, exit.
    fn finish(&mut self, pid: Pid, shell: &mut Shell, exit_code: Option<u8>) {
        if let Some(py) = shell.python.as_mut() {
            // The bootstrap's report; an EXIT trap (atexit) runs only when
            // the interpreter exits.
            py.ended = Some(match exit_code {
                None => CellOutcome::Ok,
                Some(code) => CellOutcome::Exit {
                    code: i32::from(code),
                },
            });
            shell.frames.clear();
            return;
        }
        // bash keeps a user's EXIT trap aside (it never fires) and always
        // saves; under dash the user's trap replaced tether's, so a shell
        // that exits early runs it instead of the save.
        let user_trap = shell.exit_trap.take();
        let end = match exit_code {
            None => CellEnd::Complete,
            Some(_) => CellEnd::Early,
        };
        let saves = shell_model::end_saves(shell.flavor(), end, user_trap.is_some());
        if let Some(files) = shell.files.as_ref() {
            self.shell_saves.insert(files.cell_dir.clone(), saves);
        }
        if saves {
            match end {
                CellEnd::Complete => self.save_end(pid, shell),
                _ => self.save_state(pid, shell),
            }
        }
        if let Some(text) = user_trap.filter(|_| !shell.bash && exit_code.is_some()) {
            let out = self.procs.get(&pid).map_or(Fd::Null, |p| p.stdout);
            if !self.write_fd(pid, out, text.as_bytes()) {
                return;
            }
        }
        let code = exit_code.map_or(shell.last_status & 0xff, i32::from);
        self.exit_proc(pid, ExitStatus::Code(code));
    }

    fn shell_error(&mut self, pid: Pid, shell: &mut Shell, message: &str) {
        let err = self.procs.get(&pid).map_or(Fd::Null, |p| p.stderr);
        self.write_fd(pid, err, format!("sh: {message}\n").as_bytes());
        shell.last_status = 2;
    }

    fn argv_of(&self, pid: Pid) -> Vec<String> {
        self.procs
            .get(&pid)
            .map(|p| p.argv.clone())
            .unwrap_or_default()
    }

    /// Forks a child of the shell (or interpreter) `pid`: a Python cell's
    /// children get `os.environ` (unless `spec` sets an environment) and
    /// belong to the cell.
    fn fork_child(&mut self, pid: Pid, shell: &Shell, mut spec: ForkSpec) -> Result<Pid, OsError> {
        if let Some(py) = &shell.python {
            if spec.env.is_none() {
                spec.env = Some(py.environ.clone());
            }
            if spec.origin.is_none() {
                spec.origin = Some(Some(py.origin.clone()));
            }
        }
        self.fork(pid, spec)
    }

    /// The environment of a `tether-call` the shell (or Python) `pid`
    /// starts: its own (or `os.environ`) with the workload's deadline.
    fn caller_env(&self, pid: Pid, shell: &Shell, tool: &str) -> BTreeMap<String, String> {
        let mut env = match &shell.python {
            Some(py) => py.environ.clone(),
            None => self
                .procs
                .get(&pid)
                .map(|p| p.env.clone())
                .unwrap_or_default(),
        };
        env.insert(
            tether_core::protocol::calls::ENV_TIMEOUT.to_owned(),
            tether_scenarios::workload::call_timeout_text(tool),
        );
        env
    }

    fn exec_step(&mut self, pid: Pid, shell: &mut Shell, step: Step) {
        let now = self.now;
        let until = |ms: u64| now + Duration::from_millis(ms);
        let wait = |shell: &mut Shell, w: Wait| {
            if let Some(f) = shell.frames.last_mut() {
                f.wait = w;
            }
        };
        match step {
            Step::Print { stream, text } => {
                let fd = self.procs.get(&pid).map_or(Fd::Null, |p| match stream {
                    Stream::Stdout => p.stdout,
                    Stream::Stderr => p.stderr,
                });
                if shell.late {
                    self.note_late_write(pid, fd, stream, text.as_bytes());
                }
                self.write_fd(pid, fd, text.as_bytes());
                shell.last_status = 0;
            }
            // time.sleep: in-process.
            Step::Sleep { ms } if shell.python.is_some() => {
                wait(shell, Wait::Busy(Some(until(ms))))
            }
            Step::Sleep { ms } => {
                let spec = ForkSpec::new(
                    &["sleep", &secs(ms)],
                    Program::Sleep { until: until(ms) },
                    Role::Cell,
                );
                match self.fork_child(pid, shell, spec) {
                    Ok(c) => wait(shell, Wait::Child(c)),
                    Err(e) => self.shell_error(pid, shell, &format!("fork: {e}")),
                }
            }
            Step::Exit { code } => self.finish(pid, shell, Some(code)),
            Step::IgnoreTerm => {
                if let Some(p) = self.procs.get_mut(&pid) {
                    p.term = Disposition::Ignore;
                }
            }
            Step::TrapTerm { then } => {
                if let Some(p) = self.procs.get_mut(&pid) {
                    p.term = Disposition::Trap(then);
                }
            }
            Step::BusyLoop { ms } => wait(shell, Wait::Busy(ms.map(until))),
            Step::BackgroundChildHoldingStdout { sleep_ms } => {
                let mut spec = ForkSpec::new(
                    &["sleep", &secs(sleep_ms)],
                    Program::Sleep {
                        until: until(sleep_ms),
                    },
                    Role::Cell,
                );
                // subprocess.Popen leaves SIGINT as it is.
                spec.background = !shell.bash && shell.python.is_none();
                if let Err(e) = self.fork_child(pid, shell, spec) {
                    self.shell_error(pid, shell, &format!("fork: {e}"));
                }
            }
            Step::SetsidDoubleForkDaemon { sleep_ms } => {
                let script = format!("(sleep {} &)", secs(sleep_ms));
                let mut setsid =
                    ForkSpec::new(&["sh", "-c", &script], Program::External, Role::Cell);
                setsid.new_session = true;
                let result = self.fork_child(pid, shell, setsid).and_then(|a| {
                    let sub = ForkSpec::new(&["sh", "-c", &script], Program::External, Role::Cell);
                    let b = self.fork(a, sub)?;
                    let mut daemon = ForkSpec::new(
                        &["sleep", &secs(sleep_ms)],
                        Program::Sleep {
                            until: until(sleep_ms),
                        },
                        Role::Cell,
                    );
                    daemon.background = true;
                    self.fork(b, daemon)?;
                    self.exit_proc(b, ExitStatus::Code(0));
                    self.exit_proc(a, ExitStatus::Code(0));
                    Ok(a)
                });
                match result {
                    Ok(a) => wait(shell, Wait::Child(a)),
                    Err(e) => self.shell_error(pid, shell, &format!("fork: {e}")),
                }
            }
            Step::EnvIDaemon { sleep_ms } => {
                let script = format!("sleep {} </dev/null >/dev/null 2>&1 &", secs(sleep_ms));
                let mut setsid =
                    ForkSpec::new(&["sh", "-c", &script], Program::External, Role::Cell);
                setsid.new_session = true;
                setsid.env = Some(BTreeMap::from([(
                    "PATH".to_owned(),
                    "/usr/bin:/bin".to_owned(),
                )]));
                let result = self.fork_child(pid, shell, setsid).and_then(|a| {
                    let mut daemon = ForkSpec::new(
                        &["sleep", &secs(sleep_ms)],
                        Program::Sleep {
                            until: until(sleep_ms),
                        },
                        Role::Cell,
                    );
                    daemon.background = true;
                    daemon.stdio = Some((Fd::Null, Fd::Null));
                    self.fork(a, daemon)?;
                    self.exit_proc(a, ExitStatus::Code(0));
                    Ok(a)
                });
                match result {
                    Ok(a) => wait(shell, Wait::Child(a)),
                    Err(e) => self.shell_error(pid, shell, &format!("fork: {e}")),
                }
            }
            Step::EnvIGrandchild { sleep_ms } => {
                // The child `sh` waits for its grandchild: modelled as a
                // sleep of the same length (it ends when the grandchild
                // would).
                let mut child = ForkSpec::new(
                    &["sh", "-c", &format!("env -i sleep {}", secs(sleep_ms))],
                    Program::Sleep {
                        until: until(sleep_ms),
                    },
                    Role::Cell,
                );
                // subprocess.Popen leaves SIGINT as it is.
                child.background = !shell.bash && shell.python.is_none();
                let result = self.fork_child(pid, shell, child).and_then(|a| {
                    let mut sleep = ForkSpec::new(
                        &["sleep", &secs(sleep_ms)],
                        Program::Sleep {
                            until: until(sleep_ms),
                        },
                        Role::Cell,
                    );
                    sleep.stdio = Some((Fd::Null, Fd::Null));
                    sleep.env = Some(BTreeMap::from([(
                        "PATH".to_owned(),
                        "/usr/bin:/bin".to_owned(),
                    )]));
                    self.fork(a, sleep)
                });
                if let Err(e) = result {
                    self.shell_error(pid, shell, &format!("fork: {e}"));
                }
            }
            Step::SetpgidOrphan { sleep_ms } | Step::SetpgidEnvIOrphan { sleep_ms } => {
                let env_i = matches!(step, Step::SetpgidEnvIOrphan { .. });
                let bash = shell.bash;
                let argv = match shell.python {
                    // subprocess.call(['sh', '-c', '(perl … &)'])
                    Some(_) => vec!["sh".to_owned(), "-c".to_owned()],
                    None => self.argv_of(pid),
                };
                let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
                let sub = ForkSpec::new(&argv, Program::External, Role::Cell);
                let result = self.fork_child(pid, shell, sub).and_then(|b| {
                    let mut orphan = ForkSpec::new(
                        &["sleep", &secs(sleep_ms)],
                        Program::Sleep {
                            until: until(sleep_ms),
                        },
                        Role::Cell,
                    );
                    orphan.background = !bash;
                    orphan.new_group = true;
                    if env_i {
                        orphan.stdio = Some((Fd::Null, Fd::Null));
                        orphan.env = Some(BTreeMap::from([(
                            "PATH".to_owned(),
                            "/usr/bin:/bin".to_owned(),
                        )]));
                    }
                    self.fork(b, orphan)?;
                    self.exit_proc(b, ExitStatus::Code(0));
                    Ok(b)
                });
                match result {
                    Ok(b) => wait(shell, Wait::Child(b)),
                    Err(e) => self.shell_error(pid, shell, &format!("fork: {e}")),
                }
            }
            Step::ToolCall { .. } | Step::SizedToolCall { .. } => {
                let (name, args) =
                    tether_scenarios::workload::foreground_call(&step).unwrap_or_default();
                // A sized call's arguments come on stdin (they may be a
                // megabyte: not for the process table).
                let shown = if matches!(step, Step::SizedToolCall { .. }) {
                    "-"
                } else {
                    args.as_str()
                };
                let mut spec = ForkSpec::new(
                    &["tether-call", &name, shown],
                    Program::Caller(Box::new(CallerRun::new(
                        name.clone(),
                        args.clone(),
                        now,
                        false,
                    ))),
                    Role::Cell,
                );
                spec.env = Some(self.caller_env(pid, shell, &name));
                match self.fork_child(pid, shell, spec) {
                    Ok(c) => wait(shell, Wait::Child(c)),
                    Err(e) => self.shell_error(pid, shell, &format!("fork: {e}")),
                }
            }
            Step::LeftoverToolCall {
                after_ms,
                name,
                args,
            } => {
                let mut spec = ForkSpec::new(
                    &["tether-call", &name, &args],
                    Program::Caller(Box::new(CallerRun::new(
                        name.clone(),
                        args.clone(),
                        until(after_ms),
                        true,
                    ))),
                    Role::Cell,
                );
                spec.env = Some(self.caller_env(pid, shell, &name));
                spec.background = !shell.bash && shell.python.is_none();
                spec.stdio = Some((Fd::Null, Fd::Null));
                if let Err(e) = self.fork_child(pid, shell, spec) {
                    self.shell_error(pid, shell, &format!("fork: {e}"));
                }
            }
            Step::LatePrint {
                after_ms,
                tag,
                lines,
            } => {
                // `( … ) &`: a subshell (a fork of this shell, or `sh -c`
                // from Python) that sleeps in the foreground, then prints.
                let mut child = Shell::new(
                    Workload::new(vec![
                        Step::Sleep { ms: after_ms },
                        Step::Print {
                            stream: Stream::Stdout,
                            text: tether_scenarios::workload::late_text(&tag, lines),
                        },
                    ]),
                    None,
                );
                child.bash = shell.bash && shell.python.is_none();
                child.late = true;
                let argv = match shell.python {
                    Some(_) => vec!["sh".to_owned(), "-c".to_owned()],
                    None => self.argv_of(pid),
                };
                let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
                let mut spec = ForkSpec::new(&argv, Program::Shell(Box::new(child)), Role::Cell);
                spec.background = !shell.bash && shell.python.is_none();
                if let Err(e) = self.fork_child(pid, shell, spec) {
                    self.shell_error(pid, shell, &format!("fork: {e}"));
                }
            }
            Step::SetExitTrap { text } => shell.exit_trap = Some(text),
            Step::ForkBurst { count } => {
                let argv = match shell.python {
                    // subprocess.Popen(['true'])
                    Some(_) => vec!["true".to_owned()],
                    None => self.argv_of(pid),
                };
                let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
                for _ in 0..count {
                    let mut spec = ForkSpec::new(&argv, Program::External, Role::Cell);
                    spec.background = !shell.bash && shell.python.is_none();
                    match self.fork_child(pid, shell, spec) {
                        Ok(c) => {
                            self.exit_proc(c, ExitStatus::Code(0));
                            if shell.python.is_some() {
                                // Popen's next call reaps finished children.
                                self.reap(c, pid);
                            }
                        }
                        Err(e) => {
                            self.shell_error(pid, shell, &format!("fork: {e}"));
                            break;
                        }
                    }
                }
            }
            Step::WriteSideEffect { name } => {
                let path = format!("{}/{name}", self.config.side_effect_dir);
                match self.fs.append(&path, b"x\n") {
                    Ok(()) => shell.last_status = 0,
                    Err(e) => self.shell_error(pid, shell, &format!("cannot create {path}: {e}")),
                }
            }
            Step::SetVar { name, value } => match shell.python.as_mut() {
                // os.environ: children see it, /proc/PID/environ does not.
                Some(py) => {
                    py.environ.insert(name, value);
                }
                None => {
                    shell.state.assign(&name, &value, true);
                    shell.last_status = 0;
                    self.sync_env(pid, shell);
                }
            },
            Step::IgnoreInt => {
                if let Some(p) = self.procs.get_mut(&pid) {
                    p.int = Disposition::Ignore;
                    p.int_pending = false;
                }
            }
            Step::SetName { name, value } if shell.python.is_some() => {
                shell.vars.insert(name, value);
            }
            Step::SetName { name, value } => {
                shell.state.assign(&name, &value, false);
                shell.last_status = 0;
                self.sync_env(pid, shell);
            }
            Step::PrintName { name } => match self.bound(shell, &name) {
                Some(value) => {
                    let out = self.procs.get(&pid).map_or(Fd::Null, |p| p.stdout);
                    self.write_fd(pid, out, format!("{value}\n").as_bytes());
                    shell.last_status = 0;
                }
                None => {
                    if let Some(py) = shell.python.as_mut() {
                        let message = format!("NameError: name '{name}' is not defined");
                        let err = self.procs.get(&pid).map_or(Fd::Null, |p| p.stderr);
                        let text = format!(
                            "Traceback (most recent call last):\n  File \"<cell>\", line 1, in <module>\n{message}\n"
                        );
                        self.write_fd(pid, err, text.as_bytes());
                        py.ended = Some(CellOutcome::Error { message });
                        shell.frames.clear();
                    } else {
                        // `${NAME?}`: a non-interactive shell exits.
                        self.shell_error(pid, shell, &format!("{name}: parameter not set"));
                        self.finish(pid, shell, Some(shell.flavor().unbound_status()));
                    }
                }
            },
            Step::ChangeDir { path } => {
                let cwd = self
                    .procs
                    .get(&pid)
                    .map(|p| p.cwd.clone())
                    .unwrap_or_default();
                let target = if path.starts_with('/') {
                    path.clone()
                } else {
                    format!("{cwd}/{path}")
                };
                match super::fs::normalize(&target) {
                    Ok(dir) if self.fs.is_dir(&dir) => {
                        shell.state.chdir(&dir);
                        if let Some(p) = self.procs.get_mut(&pid) {
                            p.cwd = dir;
                        }
                        shell.last_status = 0;
                    }
                    _ => self.shell_error(pid, shell, &format!("cd: can't cd to {path}")),
                }
            }
            // A Python cell has no shell state.
            Step::State { .. } | Step::Show { .. } | Step::Fail | Step::Expand { .. }
                if shell.python.is_some() => {}
            Step::State { change } => self.change_state(pid, shell, change),
            Step::Show { probe } => {
                let text = shell.state.show(&probe);
                let out = self.procs.get(&pid).map_or(Fd::Null, |p| p.stdout);
                self.write_fd(pid, out, text.as_bytes());
                shell.last_status = 0;
            }
            Step::Fail => {
                shell.last_status = 1;
                if shell.state.has(ShellOption::Errexit) {
                    self.finish(pid, shell, Some(1));
                }
            }
            Step::Expand { name } => {
                shell.last_status = 0;
                if shell.state.get(&name).is_none() && shell.state.has(ShellOption::Nounset) {
                    self.shell_error(pid, shell, &format!("{name}: parameter not set"));
                    self.finish(pid, shell, Some(shell.flavor().unbound_status()));
                }
            }
        }
    }

    /// A name's value: a Python cell's namespace, a shell's variables.
    fn bound(&self, shell: &Shell, name: &str) -> Option<String> {
        match shell.python {
            Some(_) => shell.vars.get(name).cloned(),
            None => shell.state.get(name).map(str::to_owned),
        }
    }

    fn change_state(&mut self, pid: Pid, shell: &mut Shell, change: StateChange) {
        if let StateChange::Pushd { path } = &change {
            match super::fs::normalize(path) {
                Ok(dir) if self.fs.is_dir(&dir) => {
                    shell.state.apply(&StateChange::Pushd { path: dir.clone() });
                    if let Some(p) = self.procs.get_mut(&pid) {
                        p.cwd = dir;
                    }
                    shell.last_status = 0;
                }
                _ => self.shell_error(pid, shell, &format!("pushd: {path}: no such directory")),
            }
            return;
        }
        shell.state.apply(&change);
        shell.last_status = 0;
        self.sync_env(pid, shell);
    }
}
