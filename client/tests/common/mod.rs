//! Helpers for the end-to-end tests: a `tether` command with its own
//! sandbox root and state directory, and the agent binary it ships.

#![allow(dead_code, unreachable_pub, clippy::new_without_default)]

pub mod mux;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, ExitStatus, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long any `tether` a test starts may take: past it the process is
/// killed and the test fails (a cell that never resolves must not hang CI).
pub const BOUND: Duration = Duration::from_secs(120);

/// Waits for `child` at most `bound`; past it kills it and returns `None`.
pub fn wait_within(child: &mut Child, bound: Duration) -> Option<ExitStatus> {
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if start.elapsed() < bound => {
                std::thread::sleep(Duration::from_millis(10));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}

/// Waits for `child` at most [`BOUND`]; past it kills it and fails the test.
pub fn wait_bounded(child: &mut Child, what: &str) -> ExitStatus {
    wait_within(child, BOUND).unwrap_or_else(|| {
        panic!("`{what}` did not exit within {BOUND:?}: killed it (a cell that never resolves?)")
    })
}

/// Like [`Child::wait_with_output`], bounded by [`BOUND`] (the pipes are
/// read in threads so a full pipe never blocks the child).
pub fn finish(mut child: Child, what: &str) -> Output {
    fn drain(pipe: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<Vec<u8>> {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    }
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let status = wait_bounded(&mut child, what);
    Output {
        status,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    }
}

/// The first line `child` prints, waiting at most [`BOUND`] (past it the
/// child is killed and the test fails). The reader comes back too: keep it,
/// so the child's stdout stays open.
pub fn first_line(child: &mut Child) -> (String, BufReader<ChildStdout>) {
    let stdout = child.stdout.take().expect("stdout is piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        let _ = reader.read_line(&mut line);
        let _ = tx.send((line, reader));
    });
    match rx.recv_timeout(BOUND) {
        Ok(got) => got,
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("`tether` printed no line within {BOUND:?}: killed it");
        }
    }
}

/// Waits until `path` exists, at most [`BOUND`].
pub fn wait_for_file(path: &Path) {
    let start = Instant::now();
    while !path.exists() {
        assert!(
            start.elapsed() < BOUND,
            "{} did not appear within {BOUND:?}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The agent binary the tests ship: `$TETHER_AGENT_BIN`, else a fresh
/// build next to the `tether` under test (`cargo build -p tether-agent`).
pub fn agent_bin() -> &'static Path {
    static AGENT: OnceLock<PathBuf> = OnceLock::new();
    AGENT.get_or_init(|| {
        if let Some(path) = std::env::var_os("TETHER_AGENT_BIN") {
            return PathBuf::from(path);
        }
        // Same profile (and so the same directory) as the tether binary
        // under test; a no-op when the agent is up to date.
        let tether = Path::new(env!("CARGO_BIN_EXE_tether"));
        let profile = match tether.parent().and_then(|d| d.file_name()) {
            Some(dir) if dir == "debug" => "dev".to_owned(),
            Some(dir) => dir.to_string_lossy().into_owned(),
            None => "dev".to_owned(),
        };
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let status = Command::new(env!("CARGO"))
            .args(["build", "-p", "tether-agent", "--bin", "tether-agent"])
            .args(["--profile", &profile])
            .current_dir(&workspace)
            .status()
            .expect("run cargo build -p tether-agent");
        assert!(status.success(), "cargo build -p tether-agent failed");
        tether.with_file_name("tether-agent")
    })
}

/// One isolated tether world: its own sandbox root and records.
pub struct World {
    pub root: tempfile::TempDir,
    pub state: tempfile::TempDir,
    pub backend: String,
}

impl World {
    pub fn new() -> World {
        World::with_backend("local")
    }

    pub fn with_backend(backend: &str) -> World {
        World {
            root: tempfile::Builder::new()
                .prefix("tether-root")
                .tempdir()
                .unwrap(),
            state: tempfile::Builder::new()
                .prefix("tether-state")
                .tempdir()
                .unwrap(),
            backend: backend.to_owned(),
        }
    }

    /// `tether` with this world's environment.
    pub fn cmd(&self) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tether"));
        cmd.env("XDG_STATE_HOME", self.state.path())
            .env("XDG_RUNTIME_DIR", self.runtime_dir())
            .env("TETHER_ROOT", self.root.path())
            .env("TETHER_BACKEND", &self.backend)
            .env("TETHER_AGENT_BIN", agent_bin())
            .stdin(Stdio::null());
        cmd
    }

    /// `$XDG_RUNTIME_DIR` of this world's `tether`s: the background
    /// processes' sockets live in its `tether/`.
    pub fn runtime_dir(&self) -> PathBuf {
        self.state.path().join("run")
    }

    /// The pids of this world's background processes (`tether mux`) that
    /// still run.
    pub fn mux_pids(&self) -> Vec<u32> {
        let Ok(entries) = std::fs::read_dir(self.runtime_dir().join("tether")) else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".lock"))
            .filter_map(|e| std::fs::read_to_string(e.path()).ok())
            .filter_map(|text| text.trim().parse::<u32>().ok())
            .filter(|pid| {
                let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
                alive(*pid) && cmdline.contains(" mux ")
            })
            .collect()
    }

    /// Runs `tether ARGS…` to completion (at most [`BOUND`]).
    pub fn tether(&self, args: &[&str]) -> Output {
        finish(self.spawn(args), &format!("tether {}", args.join(" ")))
    }

    /// Runs `tether run --kernel K CODE` to completion.
    pub fn run(&self, kernel: &str, code: &str) -> Output {
        self.tether(&["run", "--kernel", kernel, code])
    }

    /// Runs `tether ARGS…` with `stdin` bytes.
    pub fn tether_stdin(&self, args: &[&str], stdin: &[u8]) -> Output {
        let mut child = self
            .cmd()
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut pipe = child.stdin.take().unwrap();
        let stdin = stdin.to_vec();
        // A thread, so a child that never reads cannot block the test.
        std::thread::spawn(move || {
            let _ = pipe.write_all(&stdin);
        });
        finish(child, &format!("tether {} (with stdin)", args.join(" ")))
    }

    /// Starts `tether ARGS…` with piped stdout/stderr.
    pub fn spawn(&self, args: &[&str]) -> Child {
        self.cmd()
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// Starts `tether run` of a cell on `kernel` that prints `started` and
    /// then waits in a `sleep 300`; returns the running client and the
    /// sleeper's pid once the cell is really running.
    pub fn spawn_sleeping_cell(&self, kernel: &str) -> (Child, u32) {
        let pidfile = self.root.path().join(format!("{kernel}-cell.pid"));
        let code = format!(
            "echo started; sh -c 'echo $$ > {}; exec sleep 300'",
            pidfile.display()
        );
        let mut child = self.spawn(&["run", "--kernel", kernel, &code]);
        let (line, _stdout) = first_line(&mut child);
        assert_eq!(line, "started\n");
        wait_for_file(&pidfile);
        let sleeper = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        (child, sleeper)
    }

    /// The client's persisted record of `kernel` (the JSON file under the
    /// world's state directory), if there is one.
    pub fn record(&self, kernel: &str) -> Option<serde_json::Value> {
        let base = self.state.path().join("tether");
        let file = format!("{kernel}.json");
        std::fs::read_dir(base).ok()?.flatten().find_map(|sandbox| {
            let bytes = std::fs::read(sandbox.path().join(&file)).ok()?;
            serde_json::from_slice(&bytes).ok()
        })
    }

    /// The sequence number the next cell of `kernel` gets.
    pub fn next_seq(&self, kernel: &str) -> u64 {
        let record = self.record(kernel).expect("a record of the kernel");
        record["next_seq"]
            .as_u64()
            .unwrap_or_else(|| panic!("no next_seq in {record}"))
    }

    /// Waits until the client has marked cell `seq` of `kernel` as sent in
    /// its record: it persists that before it sends the submit, so from
    /// then on the submit is on its way.
    pub fn wait_submitted(&self, kernel: &str, seq: u64) {
        let start = Instant::now();
        loop {
            let sent = self.record(kernel).is_some_and(|r| {
                r["cells"].as_array().is_some_and(|cells| {
                    cells
                        .iter()
                        .any(|c| c["seq"].as_u64() == Some(seq) && c["submitted"] == true)
                })
            });
            if sent {
                return;
            }
            assert!(
                start.elapsed() < BOUND,
                "cell {seq} of {kernel} was not sent within {BOUND:?}: {:?}",
                self.record(kernel)
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The daemon pid of `kernel`, from `tether status --json`.
    pub fn daemon_pid(&self, kernel: &str) -> u32 {
        let out = self.tether(&["status", "--json", "--kernel", kernel]);
        let line: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("status --json: {e}: {}", text(&out.stdout)));
        line["record"]["identity"]["pid"]
            .as_u64()
            .unwrap_or_else(|| panic!("no daemon pid in {line}")) as u32
    }
}

impl Drop for World {
    fn drop(&mut self) {
        // Leave no daemon behind.
        if let Ok(mut child) = self.cmd().arg("stop").spawn() {
            let _ = wait_within(&mut child, BOUND);
        }
        for pid in self.mux_pids() {
            let _ = Command::new("kill").arg(pid.to_string()).status();
        }
    }
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

pub fn show(out: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.status.code(),
        text(&out.stdout),
        text(&out.stderr)
    )
}

/// Sends `signal` (e.g. "INT", "KILL") to `pid`.
pub fn kill(signal: &str, pid: u32) {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .unwrap();
    assert!(status.success(), "kill -{signal} {pid}");
}

/// Is `pid` a live (non-zombie) process?
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => {
            let after = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("");
            !after.trim_start().starts_with('Z')
        }
    }
}
