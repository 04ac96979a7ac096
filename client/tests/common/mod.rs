//! Helpers for the end-to-end tests: a `tether` command with its own
//! sandbox root and state directory, and the agent binary it ships.

#![allow(dead_code, unreachable_pub, clippy::new_without_default)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;

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
            .env("TETHER_ROOT", self.root.path())
            .env("TETHER_BACKEND", &self.backend)
            .env("TETHER_AGENT_BIN", agent_bin())
            .stdin(Stdio::null());
        cmd
    }

    /// Runs `tether ARGS…` to completion.
    pub fn tether(&self, args: &[&str]) -> Output {
        self.cmd().args(args).output().unwrap()
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
        child.stdin.take().unwrap().write_all(stdin).unwrap();
        child.wait_with_output().unwrap()
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
        let _ = self.cmd().arg("stop").output();
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
