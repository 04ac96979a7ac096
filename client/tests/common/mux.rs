//! The background process (`tether mux`) seen from outside, for the
//! tests that run it on every backend (`tests/persist.rs`: local, docker,
//! ssh; `tests/modal.rs`: the Modal stand-in): its status, warm runs
//! through it, and a cell that something is killed under while it waits.

use super::{alive, finish, kill, show, text, World};
use serde_json::Value;
use std::process::Output;
use std::time::{Duration, Instant};

/// How long anything here may take before the test fails.
pub const BOUND: Duration = Duration::from_secs(60);

/// Polls `done` until it holds, failing after [`BOUND`].
pub fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < BOUND, "not within {BOUND:?}: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The running background process's status, if one answers.
pub fn status(w: &World) -> Option<Value> {
    let out = w.tether(&["mux", "--status"]);
    if out.status.code() != Some(0) {
        return None;
    }
    serde_json::from_slice(&out.stdout).ok()
}

/// The number at `path` in `v`.
pub fn num(v: &Value, path: &[&str]) -> u64 {
    let mut at = v;
    for key in path {
        at = &at[*key];
    }
    at.as_u64()
        .unwrap_or_else(|| panic!("no number at {path:?} in {v}"))
}

/// A background process whose channel is open; its status.
pub fn open_mux(w: &World) -> Value {
    let mut last = None;
    wait_until("the background process's channel opens", || {
        last = status(w);
        last.as_ref()
            .is_some_and(|s| s["channel"]["open"] == Value::Bool(true))
    });
    last.unwrap()
}

/// The command exited 0.
pub fn ok(out: &Output) {
    assert_eq!(out.status.code(), Some(0), "{}", show(out));
}

/// How the test reaches the sandbox's files and processes.
pub struct Sandbox<'a> {
    /// A scratch directory on the sandbox (side-effect files, gates).
    pub dir: String,
    /// Runs a shell script on the sandbox; its stdout.
    pub sh: &'a dyn Fn(&str) -> String,
}

/// Runs a shell script on this machine (the local backend, the ssh host
/// on loopback, the Modal stand-in's sandbox); its stdout.
pub fn local_sh(script: &str) -> String {
    let out = std::process::Command::new("sh")
        .args(["-c", script])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The pids of the `tether-agent channel --root ROOT` processes on the
/// sandbox.
pub fn channel_pids(sandbox: &Sandbox, root: &str) -> Vec<u32> {
    // argv[1] and argv[3] (the scan's own shell only mentions them).
    (sandbox.sh)(&format!(
        "for p in /proc/[0-9]*; do \
           a=$(tr '\\000' '\\n' < $p/cmdline 2>/dev/null | sed -n '2p;4p' | tr '\\n' ' '); \
           [ \"$a\" = 'channel {root} ' ] && echo ${{p#/proc/}}; \
         done"
    ))
    .lines()
    .filter_map(|l| l.trim().parse().ok())
    .collect()
}

/// The `exit` line of a `tether --json` run.
pub fn exit_line(out: &Output) -> Value {
    text(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["event"] == "exit")
        .unwrap_or_else(|| panic!("no exit line: {}", show(out)))
}

/// Warm `tether run true`s go through the background process: one op on
/// its channel per cell, no one-shot exec, no new channel, and neither
/// the `tether`s nor the background process start a helper process (an
/// ssh master, a Modal bridge: a connection, a Python).
pub fn warm_runs_use_the_background_process(w: &World) {
    ok(&w.run("k", "true"));
    let before = open_mux(w);
    for _ in 0..3 {
        let out = w.tether(&["--json", "run", "--kernel", "k", "true"]);
        ok(&out);
        assert_eq!(text(&out.stderr), "", "{}", show(&out));
        assert_eq!(
            exit_line(&out)["helpers_started"],
            0,
            "the `tether` itself starts no ssh master or Modal bridge: {}",
            show(&out)
        );
    }
    let after = status(w).expect("the background process still runs");
    assert_eq!(after["pid"], before["pid"], "{before}\n{after}");
    assert_eq!(after["channel"]["pid"], before["channel"]["pid"]);
    for same in ["opened", "one_shot", "broken"] {
        assert_eq!(
            num(&after, &["channel", same]),
            num(&before, &["channel", same]),
            "{same}: {before}\n{after}"
        );
    }
    assert_eq!(
        num(&after, &["helpers_started"]),
        num(&before, &["helpers_started"]),
        "no new helper in the background process: {before}\n{after}"
    );
    assert_eq!(
        num(&after, &["channel", "on_channel"]) - num(&before, &["channel", "on_channel"]),
        3,
        "one op per warm cell: {before}\n{after}"
    );
}

/// What a cell cut in the middle left.
pub struct Cut {
    /// The `tether run` of the cell.
    pub run: Output,
    /// The `tether resume` after it.
    pub resumed: Output,
    /// The background process's status before the cut.
    pub before: Value,
}

/// `tether run` of a cell through the warm background process: it prints
/// 1 to 3, writes its side effect, waits for a gate, prints 4 to 6. Once
/// its first half ran, `cut` runs (given the background process's status),
/// then the gate opens. The cell completes exactly once (the side-effect
/// file counted), its output whole and in order (`tether resume` prints
/// what the run could not).
pub fn cut_mid_cell(w: &World, sandbox: &Sandbox, name: &str, cut: impl FnOnce(&Value)) -> Cut {
    let side = format!("{}/{name}-side", sandbox.dir);
    let gate = format!("{}/{name}-gate", sandbox.dir);
    ok(&w.run("k", "true"));
    let before = open_mux(w);
    let code = format!(
        "for i in 1 2 3; do echo $i; done; echo ran >> {side}; \
         while [ ! -e {gate} ]; do sleep 0.02; done; for i in 4 5 6; do echo $i; done"
    );
    let child = w.spawn(&["run", "--kernel", "k", &code]);
    wait_until("the cell ran its first half", || {
        (sandbox.sh)(&format!("cat {side} 2>/dev/null")).contains("ran")
    });
    let during = status(w).expect("the background process runs");
    assert!(
        num(&during, &["execs"]) > num(&before, &["execs"]),
        "the cell's ops go through the background process: {before}\n{during}"
    );
    cut(&during);
    (sandbox.sh)(&format!("touch {gate}"));
    let run = finish(child, &format!("tether run ({name})"));
    let resumed = w.tether(&["resume", "--kernel", "k"]);
    ok(&resumed);
    let code = run.status.code();
    assert!(
        code == Some(0) || code == Some(75),
        "{name}: {}",
        show(&run)
    );
    assert_eq!(
        text(&run.stdout) + &text(&resumed.stdout),
        "1\n2\n3\n4\n5\n6\n",
        "{name}: output whole and in order\n{}\n{}",
        show(&run),
        show(&resumed)
    );
    assert_eq!(
        (sandbox.sh)(&format!("cat {side}")),
        "ran\n",
        "{name}: ran once"
    );
    Cut {
        run,
        resumed,
        before,
    }
}

/// `kill -9` of the background process while a cell waits: the `tether`
/// goes on without it (or `tether resume` does); the cell ran once, its
/// output complete and in order; the next `tether` says the socket was
/// stale and starts a new background process, and only its channel
/// process is left on the sandbox. What the cut left.
pub fn mux_killed_mid_cell(w: &World, sandbox: &Sandbox) -> Cut {
    let cut = cut_mid_cell(w, sandbox, "mux-killed", |during| {
        kill("KILL", num(during, &["pid"]) as u32);
    });
    // `resume` found the stale socket (unless the run's own output did).
    let notes = text(&cut.run.stderr) + &text(&cut.resumed.stderr);
    assert!(notes.contains("stale socket"), "{notes}");
    let after = open_mux(w);
    assert_ne!(after["pid"], cut.before["pid"]);
    // The dead one's channel ended with its stdin: only the new one's is left.
    let root = w.root.path().to_string_lossy().into_owned();
    wait_until("one channel process is left on the sandbox", || {
        channel_pids(sandbox, &root).len() == 1
    });
    let out = w.run("k", "echo again");
    ok(&out);
    assert_eq!(text(&out.stdout), "again\n");
    assert_eq!(text(&out.stderr), "", "no note with a live one");
    cut
}

/// The channel's process on the sandbox killed (`kill -9`) while a cell
/// waits on it through the background process: the channel breaks, the
/// wait is retried (one-shot, then on the reopened channel), the cell
/// completes once and in order, and the same background process goes on
/// with a new channel.
pub fn channel_killed_mid_cell(w: &World, sandbox: &Sandbox) {
    let root = w.root.path().to_string_lossy().into_owned();
    let cut = cut_mid_cell(w, sandbox, "channel-killed", |during| {
        let pids = channel_pids(sandbox, &root);
        assert_eq!(pids.len(), 1, "one channel process: {pids:?}\n{during}");
        // On the sandbox: its pid is the sandbox's (a container's own).
        (sandbox.sh)(&format!("kill -9 {}", pids[0]));
    });
    ok(&cut.run);
    let after = open_mux(w);
    assert_eq!(
        after["pid"], cut.before["pid"],
        "the same background process"
    );
    assert_eq!(
        num(&after, &["channel", "broken"]),
        num(&cut.before, &["channel", "broken"]) + 1,
        "{}\n{after}",
        cut.before
    );
    let out = w.run("k", "echo again");
    ok(&out);
    assert_eq!(text(&out.stdout), "again\n");
}

/// Stops this world's background processes (TERM), waiting for them.
pub fn stop_muxes(w: &World) {
    for pid in w.mux_pids() {
        kill("TERM", pid);
        wait_until("the background process stops", || !alive(pid));
    }
}
