//! Drives the real `tether-agent` binary: one `op` exec per request, JSON
//! on stdin, one reply line on stdout. Processes are observed in `/proc`.

#![allow(dead_code, unreachable_pub)]

use serde_json::{json, Value};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub const AGENT: &str = env!("CARGO_BIN_EXE_tether-agent");

/// An agent root in a temporary directory; shuts its kernels down on drop.
pub struct Root {
    pub dir: tempfile::TempDir,
    kernels: Vec<String>,
    next_id: u64,
    /// `PATH` for the ops (and so for the daemons they spawn), when set.
    pub path_env: Option<std::ffi::OsString>,
    /// More environment for the ops, the daemons they spawn and what
    /// those start (interpreters, cells).
    pub extra_env: Vec<(String, String)>,
}

impl Root {
    pub fn new() -> Root {
        Root {
            dir: tempfile::Builder::new()
                .prefix("tether-agent-test")
                .tempdir()
                .unwrap(),
            kernels: Vec::new(),
            next_id: 1,
            path_env: None,
            extra_env: Vec::new(),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A scratch file path inside the root (outside `kernels/`).
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Runs one op, returns the whole reply envelope.
    pub fn raw(&self, stdin: &[u8]) -> Value {
        let mut command = Command::new(AGENT);
        if let Some(path) = &self.path_env {
            command.env("PATH", path);
        }
        command.envs(self.extra_env.iter().map(|(k, v)| (k, v)));
        let mut child = command
            .args(["op", "--root"])
            .arg(self.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(stdin).unwrap();
        // Bounded: an op that never returns fails the test instead of
        // hanging CI (the wait ops themselves return within their wait_ms).
        let id = child.id();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait_with_output());
        });
        let out = match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(out) => out.unwrap(),
            Err(_) => {
                let _ = Command::new("kill")
                    .args(["-KILL", &id.to_string()])
                    .status();
                panic!("tether-agent op did not exit within 120 s: killed it");
            }
        };
        assert!(out.status.success(), "op failed: {out:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        assert_eq!(text.matches('\n').count(), 1, "one reply line: {text:?}");
        serde_json::from_str(&text).unwrap()
    }

    /// Runs `op`; returns its `reply` (panics on an error reply).
    pub fn op(&mut self, op: Value) -> Value {
        let v = self.try_op(op.clone());
        v.get("reply")
            .cloned()
            .unwrap_or_else(|| panic!("op {op} failed: {v}"))
    }

    /// Runs `op`; returns the whole envelope.
    pub fn try_op(&mut self, op: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let env = json!({"v": 1, "id": id, "op": op});
        let v = self.raw(env.to_string().as_bytes());
        assert_eq!(v["id"], id);
        v
    }

    /// The nonce of the kernel's latest spawn: unique to this root, kernel
    /// and spawn (as the client makes one per spawn).
    pub fn nonce(&self, kernel: &str) -> String {
        let spawns = self.kernels.iter().filter(|k| *k == kernel).count();
        self.nonce_of(kernel, spawns.saturating_sub(1))
    }

    fn nonce_of(&self, kernel: &str, spawn: usize) -> String {
        let dir = self
            .dir
            .path()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        match spawn {
            0 => format!("nonce-{kernel}-{}-{dir}", std::process::id()),
            n => format!("nonce-{kernel}-{}-{dir}-{n}", std::process::id()),
        }
    }

    /// Spawns a shell kernel with a short grace period.
    pub fn spawn(&mut self, kernel: &str) -> Value {
        self.spawn_with(kernel, 300, 600_000)
    }

    pub fn spawn_with(&mut self, kernel: &str, grace_ms: u64, idle_ms: u64) -> Value {
        self.spawn_lang(kernel, "shell", grace_ms, idle_ms)
    }

    pub fn spawn_lang(&mut self, kernel: &str, lang: &str, grace_ms: u64, idle_ms: u64) -> Value {
        let spawns = self.kernels.iter().filter(|k| *k == kernel).count();
        let r = self.op(json!({"spawn": {"kernel": kernel, "lang": lang,
            "nonce": self.nonce_of(kernel, spawns),
            "idle_timeout_ms": idle_ms, "grace_ms": grace_ms}}));
        self.kernels.push(kernel.to_owned());
        r["spawned"]["identity"].clone()
    }

    /// Submits `code` as cell `seq` and returns the reply's `submitted`.
    pub fn submit(&mut self, kernel: &str, seq: u64, code: &[u8], wait_ms: u64) -> Value {
        self.submit_with(kernel, seq, &format!("req-{seq}"), code, wait_ms, None)
    }

    pub fn submit_with(
        &mut self,
        kernel: &str,
        seq: u64,
        request: &str,
        code: &[u8],
        wait_ms: u64,
        timeout_ms: Option<u64>,
    ) -> Value {
        let code: Value = serde_json::from_str(
            &String::from_utf8(
                serde_json::to_vec(&tether_core::bytes::Bytes(code.to_vec())).unwrap(),
            )
            .unwrap(),
        )
        .unwrap();
        let mut sub = json!({"request_id": request, "seq": seq, "code": code});
        if let Some(t) = timeout_ms {
            sub["timeout_ms"] = json!(t);
        }
        let v = self
            .try_op(json!({"submit": {"kernel": kernel, "submission": sub, "wait_ms": wait_ms}}));
        v.get("reply").map(|r| r["submitted"].clone()).unwrap_or(v)
    }

    /// Waits for cell `seq` to be done; returns all its entries.
    pub fn wait_done(&mut self, kernel: &str, seq: u64) -> Vec<Value> {
        let mut entries: Vec<Value> = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let cursor = entries.last().map_or(0, |e| e["n"].as_u64().unwrap());
            let r = self.op(
                json!({"wait": {"kernel": kernel, "seq": seq, "cursor": cursor, "wait_ms": 2000}}),
            );
            let batch = &r["waited"]["batch"];
            entries.extend(batch["entries"].as_array().unwrap().iter().cloned());
            if batch["done"] == true {
                return entries;
            }
            assert!(
                Instant::now() < deadline,
                "cell {seq} never finished: {entries:?}"
            );
        }
    }

    /// Submits and waits for the end; returns (outcome, stdout bytes, entries).
    pub fn run(&mut self, kernel: &str, seq: u64, code: &str) -> (Value, Vec<u8>, Vec<Value>) {
        let first = self.submit(kernel, seq, code.as_bytes(), 5000);
        let mut entries: Vec<Value> = first["batch"]["entries"].as_array().unwrap().clone();
        if first["batch"]["done"] != true {
            let cursor = entries.last().map_or(0, |e| e["n"].as_u64().unwrap());
            let more = self.wait_done_from(kernel, seq, cursor);
            entries.extend(more);
        }
        (outcome(&entries), stdout(&entries), entries)
    }

    fn wait_done_from(&mut self, kernel: &str, seq: u64, cursor: u64) -> Vec<Value> {
        let all = self.wait_done(kernel, seq);
        all.into_iter()
            .filter(|e| e["n"].as_u64().unwrap() > cursor)
            .collect()
    }

    pub fn cancel(&mut self, kernel: &str, seq: u64) -> String {
        let r = self.op(json!({"cancel": {"kernel": kernel, "seq": seq}}));
        r["cancelled"]["state"].as_str().unwrap().to_owned()
    }

    pub fn probe(&mut self, kernel: &str, expect: Option<&Value>) -> Value {
        let mut p = json!({"kernel": kernel});
        if let Some(e) = expect {
            p["expect"] = e.clone();
        }
        self.op(json!({"probe": p}))["probed"]["status"].clone()
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        for k in std::mem::take(&mut self.kernels) {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                self.try_op(json!({"shutdown": {"kernel": k}}))
            }));
        }
    }
}

/// The outcome in the journal's `result` entry.
pub fn outcome(entries: &[Value]) -> Value {
    entries
        .iter()
        .find(|e| e["kind"] == "result")
        .map(|e| e["outcome"].clone())
        .unwrap_or(Value::Null)
}

/// Concatenated stdout bytes of the entries.
pub fn stdout(entries: &[Value]) -> Vec<u8> {
    let mut out = Vec::new();
    for e in entries
        .iter()
        .filter(|e| e["kind"] == "output" && e["stream"] == "stdout")
    {
        let b: tether_core::bytes::Bytes = serde_json::from_value(e["data"].clone()).unwrap();
        out.extend(b.0);
    }
    out
}

/// Checks `n` is contiguous from 1.
pub fn assert_contiguous(entries: &[Value]) {
    for (i, e) in entries.iter().enumerate() {
        assert_eq!(e["n"].as_u64().unwrap(), i as u64 + 1, "{entries:?}");
    }
}

/// True when `pid` exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
    match std::fs::read(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let Some(close) = stat.iter().rposition(|&b| b == b')') else {
                return false;
            };
            stat.get(close + 2) != Some(&b'Z')
        }
        Err(_) => false,
    }
}

/// Pids written (one per line) to `file`.
pub fn pids_in(file: &Path) -> Vec<u32> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Live processes whose environ or cmdline contains `needle`.
pub fn procs_mentioning(needle: &str) -> Vec<u32> {
    let mut found = Vec::new();
    let me = std::process::id();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == me || !alive(pid) {
            continue;
        }
        for f in ["environ", "cmdline"] {
            if let Ok(bytes) = std::fs::read(format!("/proc/{pid}/{f}")) {
                if bytes.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                    found.push(pid);
                    break;
                }
            }
        }
    }
    found
}

/// Polls `cond` every 20 ms for up to `limit`; returns its last value.
pub fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() > end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Can this process make a cgroup v2 child of its own cgroup? `Err` says
/// why not. (The agent's shim does the same at each cell's start.)
pub fn cgroup_v2_writable() -> Result<(), String> {
    tether_require::Need::Cgroup2.probe()
}
