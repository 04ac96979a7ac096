//! Background jobs outlive their cell, and so does their output: what they
//! print after their cell resolved goes to the kernel's background log
//! (`tether logs`), never into a later cell and never to a closed pipe
//! (which would kill them with SIGPIPE). Local backend, real processes.

mod common;

use common::{alive, show, text, wait_for_file, World};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// `tether logs --kernel K`, as text.
fn logs(w: &World, kernel: &str) -> String {
    let out = w.tether(&["logs", "--kernel", kernel]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    text(&out.stdout)
}

/// Polls `tether logs` until `done` holds for it (at most 10 s).
fn logs_until(w: &World, kernel: &str, done: impl Fn(&str) -> bool) -> String {
    let start = Instant::now();
    loop {
        let log = logs(w, kernel);
        if done(&log) || start.elapsed() > Duration::from_secs(10) {
            return log;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A port nobody listens on right now.
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// Issue 7's case: `python3 -m http.server PORT &` logs each request to
/// stderr, which is the cell's pipe. Before, it died of SIGPIPE on its
/// first request once its cell was done; now three requests from later
/// cells all answer 200, the request log is in `tether logs`, and no later
/// cell's output holds any of it.
#[test]
fn a_background_server_keeps_answering_and_its_log_is_readable() {
    if !tether_require::have(module_path!(), tether_require::Need::Python3) {
        return;
    }
    let w = World::new();
    let port = free_port();
    let out = w.run(
        "k",
        &format!("python3 -m http.server {port} --bind 127.0.0.1 &"),
    );
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    // Wait (bounded) until it listens.
    let start = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the server never listened on {port}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    for i in 0..3 {
        let out = w.run(
            "k",
            &format!("curl -s -o /dev/null -w '%{{http_code}}\\n' http://127.0.0.1:{port}/?n={i}"),
        );
        assert_eq!(out.status.code(), Some(0), "request {i}: {}", show(&out));
        assert_eq!(text(&out.stdout), "200\n", "request {i}: {}", show(&out));
        assert!(
            !text(&out.stderr).contains("GET /"),
            "the server's log leaked into a later cell: {}",
            show(&out)
        );
    }
    let log = logs_until(&w, "k", |log| log.matches("\"GET /?n=").count() == 3);
    for i in 0..3 {
        assert!(
            log.contains(&format!("\"GET /?n={i} HTTP/1.1\" 200")),
            "request {i} is not in the log:\n{log}"
        );
    }
}

/// A loop printing every 100 ms is still alive and logging 10 s after its
/// cell resolved; a later cell's output is only its own.
#[test]
fn a_background_loop_is_alive_and_logging_ten_seconds_later() {
    let w = World::new();
    let pidfile = w.root.path().join("loop.pid");
    let code = format!(
        "sh -c 'echo $$ > {}; while :; do echo tick; sleep 0.1; done' &",
        pidfile.display()
    );
    let out = w.run("k", &code);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let resolved = Instant::now();
    wait_for_file(&pidfile);
    let pid: u32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let out = w.run("k", "echo later");
    assert_eq!(text(&out.stdout), "later\n", "{}", show(&out));
    // The point is to look 10 s after the cell resolved.
    std::thread::sleep(Duration::from_secs(10).saturating_sub(resolved.elapsed()));
    assert!(alive(pid), "the loop died after its cell resolved");
    let before = logs(&w, "k").matches("tick").count();
    assert!(
        before >= 50,
        "only {before} ticks logged in 10 s (one every 100 ms expected)"
    );
    let after = logs_until(&w, "k", |log| log.matches("tick").count() > before);
    assert!(
        after.matches("tick").count() > before,
        "the loop stopped logging 10 s after its cell resolved"
    );
    assert!(alive(pid), "the loop died");
}

/// A Python cell's background subprocess writes to the interpreter's
/// stdout: between cells that goes to the background log, and the
/// subprocess lives on (the pipe stays read).
#[test]
fn a_python_cells_background_subprocess_logs_between_cells() {
    if !tether_require::have(module_path!(), tether_require::Need::Python3) {
        return;
    }
    let w = World::new();
    let pidfile = w.root.path().join("sub.pid");
    let code = format!(
        "import subprocess\n\
         p = subprocess.Popen(['sh', '-c', 'while :; do echo tock; sleep 0.1; done'])\n\
         open({:?}, 'w').write(str(p.pid))",
        pidfile.display().to_string()
    );
    let out = w.tether(&["run", "--lang", "python", "--kernel", "py", &code]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let pid: u32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let log = logs_until(&w, "py", |log| log.matches("tock").count() >= 10);
    assert!(
        log.matches("tock").count() >= 10,
        "the subprocess's output is not in the log:\n{log}"
    );
    assert!(alive(pid), "the subprocess died");
}
