//! The background process (`tether mux`) that keeps a sandbox's channel
//! open between `tether` commands, end to end with real processes on the
//! local backend and on docker: warm runs go through it (no new exec),
//! its death by `kill -9` mid-cell loses nothing and runs nothing twice,
//! a stopped one costs a bounded wait, it exits when idle, and a stale or
//! bad socket costs a note, never a hang or a failed cell.

mod common;

use common::{alive, finish, kill, show, text, World};
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};

/// How long anything here may take before the test fails.
const BOUND: Duration = Duration::from_secs(60);

/// Polls `done` until it holds, failing after [`BOUND`].
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < BOUND, "not within {BOUND:?}: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The running background process's status, if one answers.
fn status(w: &World) -> Option<Value> {
    let out = w.tether(&["mux", "--status"]);
    if out.status.code() != Some(0) {
        return None;
    }
    serde_json::from_slice(&out.stdout).ok()
}

fn num(v: &Value, path: &[&str]) -> u64 {
    let mut at = v;
    for key in path {
        at = &at[*key];
    }
    at.as_u64()
        .unwrap_or_else(|| panic!("no number at {path:?} in {v}"))
}

/// A background process whose channel is open; its status.
fn open_mux(w: &World) -> Value {
    let mut last = None;
    wait_until("the background process's channel opens", || {
        last = status(w);
        last.as_ref()
            .is_some_and(|s| s["channel"]["open"] == Value::Bool(true))
    });
    last.unwrap()
}

fn ok(out: &std::process::Output) {
    assert_eq!(out.status.code(), Some(0), "{}", show(out));
}

/// How the test reaches the sandbox's files (a side-effect file, a gate).
struct Sandbox<'a> {
    dir: String,
    sh: &'a dyn Fn(&str) -> String,
}

/// A warm `tether run true` goes through the background process: one op
/// on its channel per cell, no one-shot exec, no new channel.
fn warm_runs_use_the_background_process(w: &World) {
    ok(&w.run("k", "true"));
    let before = open_mux(w);
    for _ in 0..3 {
        let out = w.run("k", "true");
        ok(&out);
        assert_eq!(text(&out.stderr), "", "{}", show(&out));
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
        num(&after, &["channel", "on_channel"]) - num(&before, &["channel", "on_channel"]),
        3,
        "one op per warm cell: {before}\n{after}"
    );
}

/// `kill -9` of the background process while a cell waits: the `tether`
/// goes on without it (or `tether resume` does); the cell ran once, its
/// output complete and in order; the next `tether` says the socket was
/// stale and starts a new background process.
fn killed_mid_cell(w: &World, sandbox: &Sandbox) {
    let side = format!("{}/side", sandbox.dir);
    let gate = format!("{}/gate", sandbox.dir);
    ok(&w.run("k", "true"));
    let before = open_mux(w);
    let pid = num(&before, &["pid"]) as u32;
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
    kill("KILL", pid);
    (sandbox.sh)(&format!("touch {gate}"));
    let run = finish(child, "tether run (background process killed)");
    let resumed = w.tether(&["resume", "--kernel", "k"]);
    ok(&resumed);
    let code = run.status.code();
    assert!(code == Some(0) || code == Some(75), "{}", show(&run));
    let output = text(&run.stdout) + &text(&resumed.stdout);
    assert_eq!(
        output,
        "1\n2\n3\n4\n5\n6\n",
        "{}\n{}",
        show(&run),
        show(&resumed)
    );
    assert_eq!((sandbox.sh)(&format!("cat {side}")), "ran\n", "ran once");
    // `resume` found the stale socket (unless the run's own output did).
    let notes = text(&run.stderr) + &text(&resumed.stderr);
    assert!(notes.contains("stale socket"), "{notes}");
    let after = open_mux(w);
    assert_ne!(after["pid"], before["pid"]);
    // The dead one's channel ended with its stdin: only the new one's is left.
    let root = w.root.path().to_string_lossy().into_owned();
    wait_until("one channel process is left on the sandbox", || {
        channel_processes(sandbox, &root) == 1
    });
    let out = w.run("k", "echo again");
    ok(&out);
    assert_eq!(text(&out.stdout), "again\n");
    assert_eq!(text(&out.stderr), "", "no note with a live one");
}

/// How many `tether-agent channel --root ROOT` processes run on the sandbox.
fn channel_processes(sandbox: &Sandbox, root: &str) -> usize {
    // argv[1] and argv[3] (the scan's own shell only mentions them).
    (sandbox.sh)(&format!(
        "for p in /proc/[0-9]*; do \
           a=$(tr '\\000' '\\n' < $p/cmdline 2>/dev/null | sed -n '2p;4p' | tr '\\n' ' '); \
           [ \"$a\" = 'channel {root} ' ] && echo x; \
         done"
    ))
    .lines()
    .count()
}

/// With `--persist 1s`, the background process exits a second after the
/// last `tether` left, and removes its socket; the next run starts a new
/// one without a note.
fn idle_exit(w: &World) {
    stop_muxes(w);
    ok(&w.tether(&["--persist", "1s", "run", "--kernel", "idle", "true"]));
    let pids = {
        let mut pids = Vec::new();
        wait_until("the background process runs", || {
            pids = w.mux_pids();
            !pids.is_empty()
        });
        pids
    };
    for pid in &pids {
        wait_until("the idle background process exits", || !alive(*pid));
    }
    let sockets = |w: &World| -> Vec<String> {
        std::fs::read_dir(w.runtime_dir().join("tether"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".sock"))
            .collect()
    };
    assert_eq!(sockets(w), Vec::<String>::new(), "its socket is removed");
    let out = w.tether(&["--persist", "1s", "run", "--kernel", "idle", "echo back"]);
    ok(&out);
    assert_eq!(text(&out.stdout), "back\n");
    assert_eq!(text(&out.stderr), "", "{}", show(&out));
}

/// `tether stop` stops the kernels and retires the background process.
fn stop_retires_it(w: &World) {
    ok(&w.run("k", "true"));
    let pid = num(&open_mux(w), &["pid"]) as u32;
    ok(&w.tether(&["stop"]));
    wait_until("the background process exits after `tether stop`", || {
        !alive(pid)
    });
}

/// A socket path that holds a plain file: the run works, with a note, and
/// a new background process replaces the file. A socket directory others
/// may read: the run works, with a note, and starts none.
fn bad_socket_and_bad_dir(w: &World) {
    ok(&w.run("k", "true"));
    let first = open_mux(w);
    let pid = num(&first, &["pid"]) as u32;
    kill("KILL", pid);
    let dir = w.runtime_dir().join("tether");
    let socket = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "sock"))
        .expect("the socket is left behind");
    std::fs::remove_file(&socket).unwrap();
    std::fs::write(&socket, "not a socket").unwrap();
    let out = w.run("k", "echo works");
    ok(&out);
    assert_eq!(text(&out.stdout), "works\n");
    assert!(
        text(&out.stderr).contains("does not answer"),
        "{}",
        show(&out)
    );
    let second = open_mux(w);
    assert_ne!(second["pid"], first["pid"]);
    stop_muxes(w);
    set_mode(&dir, 0o755);
    let out = w.run("k", "echo still works");
    ok(&out);
    assert_eq!(text(&out.stdout), "still works\n");
    assert!(text(&out.stderr).contains("mode 0700"), "{}", show(&out));
    assert_eq!(w.mux_pids(), Vec::<u32>::new(), "none started");
    set_mode(&dir, 0o700);
}

/// A background process that is stopped (`SIGSTOP`) accepts connections
/// and never answers: the `tether` gives up on it within its ack bound and
/// runs the cell on its own transport, once.
fn stopped_mux(w: &World, sandbox: &Sandbox) {
    let side = format!("{}/stopped-side", sandbox.dir);
    ok(&w.run("k", "true"));
    let pid = num(&open_mux(w), &["pid"]) as u32;
    kill("STOP", pid);
    let out = w.run("k", &format!("echo ran >> {side}; echo done"));
    kill("CONT", pid);
    ok(&out);
    assert_eq!(text(&out.stdout), "done\n", "{}", show(&out));
    assert_eq!((sandbox.sh)(&format!("cat {side}")), "ran\n", "ran once");
    stop_muxes(w);
}

/// Three `tether mux` for one sandbox started at once: one serves, the
/// other two see its lock and exit at once.
fn one_per_sandbox(w: &World) {
    stop_muxes(w);
    let mut muxes: Vec<_> = (0..3)
        .map(|_| {
            w.cmd()
                .args(["mux", "--idle", "60s"])
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut exited = Vec::new();
    wait_until("two of the three exit", || {
        for (i, mux) in muxes.iter_mut().enumerate() {
            if !exited.contains(&i) && mux.try_wait().unwrap().is_some() {
                exited.push(i);
            }
        }
        exited.len() >= 2
    });
    assert_eq!(exited.len(), 2, "one keeps serving");
    let serving = (0..3).find(|i| !exited.contains(i)).unwrap();
    let status = status(w).expect("the third serves");
    assert_eq!(num(&status, &["pid"]), u64::from(muxes[serving].id()));
    stop_muxes(w);
    let refused = muxes
        .into_iter()
        .map(|mux| text(&finish(mux, "tether mux").stderr))
        .filter(|said| said.contains("AlreadyRunning"))
        .count();
    assert_eq!(refused, 2, "two saw the lock held");
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn local_sh(script: &str) -> String {
    let out = std::process::Command::new("sh")
        .args(["-c", script])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Stops this world's background processes (TERM), waiting for them.
fn stop_muxes(w: &World) {
    for pid in w.mux_pids() {
        kill("TERM", pid);
        wait_until("the background process stops", || !alive(pid));
    }
}

#[test]
fn local_warm_runs_use_the_background_process() {
    warm_runs_use_the_background_process(&World::new());
}

#[test]
fn local_background_process_killed_mid_cell_loses_nothing() {
    let w = World::new();
    let scratch = tempfile::tempdir().unwrap();
    let sandbox = Sandbox {
        dir: scratch.path().to_string_lossy().into_owned(),
        sh: &local_sh,
    };
    killed_mid_cell(&w, &sandbox);
}

#[test]
fn local_stopped_background_process_costs_a_bounded_wait() {
    let w = World::new();
    let scratch = tempfile::tempdir().unwrap();
    let sandbox = Sandbox {
        dir: scratch.path().to_string_lossy().into_owned(),
        sh: &local_sh,
    };
    stopped_mux(&w, &sandbox);
}

#[test]
fn local_one_background_process_per_sandbox() {
    one_per_sandbox(&World::new());
}

#[test]
fn local_background_process_exits_when_idle() {
    idle_exit(&World::new());
}

#[test]
fn local_stop_retires_the_background_process() {
    stop_retires_it(&World::new());
}

#[test]
fn local_bad_socket_or_directory_falls_back_with_a_note() {
    bad_socket_and_bad_dir(&World::new());
}

/// A container of the test image, removed on drop.
struct Container(String);

impl Drop for Container {
    fn drop(&mut self) {
        let _ = std::process::Command::new("docker")
            .args(["rm", "-f", &self.0])
            .output();
    }
}

/// All of the above on docker, in one container.
#[test]
fn on_docker_the_background_process_keeps_the_channel() {
    if !tether_require::have(module_path!(), tether_require::Need::Docker) {
        return;
    }
    let name = format!("tether-persist-test-{}", std::process::id());
    let container = Container(name.clone());
    let w = World::with_backend(&format!("docker:{name}?image=tether-sandbox:latest"));
    let sh = |script: &str| {
        let out = std::process::Command::new("docker")
            .args(["exec", &container.0, "sh", "-c", script])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    warm_runs_use_the_background_process(&w);
    sh("mkdir -p /tmp/persist-test");
    let sandbox = Sandbox {
        dir: "/tmp/persist-test".into(),
        sh: &sh,
    };
    killed_mid_cell(&w, &sandbox);
    stopped_mux(&w, &sandbox);
    one_per_sandbox(&w);
    stop_retires_it(&w);
    idle_exit(&w);
    bad_socket_and_bad_dir(&w);
    drop(w);
}
