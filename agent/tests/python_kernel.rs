//! Python kernels through the real binary: one persistent interpreter, the
//! final expression shown, cancel by KeyboardInterrupt with the namespace
//! kept, an interpreter that ignores SIGINT killed after the grace period
//! (loss reported), a cell's subprocesses killed with it.

mod common;

use common::*;
use serde_json::json;
use std::time::Duration;

fn python_root() -> Root {
    let mut r = Root::new();
    r.spawn_lang("py", "python", 300, 600_000);
    r
}

#[test]
fn namespace_persists_and_the_last_expression_is_shown() {
    let mut r = python_root();
    let (o, out, _) = r.run("py", 1, "x = 41\nprint('hi')\nx + 1");
    assert_eq!(o, json!({"outcome": "ok"}));
    assert_eq!(out, b"hi\n42\n");
    let (o, out, e) = r.run("py", 2, "1/0");
    assert_eq!(o["outcome"], "error");
    assert!(o["message"].as_str().unwrap().contains("ZeroDivisionError"));
    assert!(out.is_empty(), "{e:?}");
    let (o, _, _) = r.run("py", 3, "import sys; sys.exit(3)");
    assert_eq!(o, json!({"outcome": "exit", "code": 3}));
    let (o, out, _) = r.run(
        "py",
        4,
        "import os; print(os.environ['TETHER_CELL'].endswith(':4')); x",
    );
    assert_eq!(o, json!({"outcome": "ok"}));
    assert_eq!(out, b"True\n41\n");
}

#[test]
fn interrupt_keeps_the_namespace_and_kills_the_cells_subprocesses() {
    let mut r = python_root();
    let pids = r.file("pids");
    r.run("py", 1, "x = 5");
    let code = format!(
        "import subprocess, time\n\
         a = subprocess.Popen(['sleep', '1000'])\n\
         b = subprocess.Popen(['sh', '-c', 'trap \"\" TERM; while :; do sleep 1; done'], start_new_session=True, env={{}})\n\
         open({p:?}, 'w').write('%d\\n%d\\n' % (a.pid, b.pid))\n\
         time.sleep(1000)",
        p = pids.display().to_string()
    );
    r.submit("py", 2, code.as_bytes(), 0);
    assert!(eventually(Duration::from_secs(20), || pids_in(&pids).len() == 2));
    assert_eq!(r.cancel("py", 2), "escalating");
    let e = r.wait_done("py", 2);
    assert_eq!(outcome(&e), json!({"outcome": "cancelled"}));
    assert!(eventually(Duration::from_secs(20), || pids_in(&pids)
        .iter()
        .all(|p| !alive(*p))));
    let (o, out, _) = r.run("py", 3, "x");
    assert_eq!(o, json!({"outcome": "ok"}));
    assert_eq!(out, b"5\n", "the namespace survived the interrupt");
}

#[test]
fn an_interpreter_that_ignores_sigint_is_killed_and_the_loss_reported() {
    let mut r = python_root();
    r.run("py", 1, "x = 5");
    let flag = r.file("flag");
    let code = format!(
        "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nopen({:?}, 'w').write('1')\nwhile True: pass",
        flag.display().to_string()
    );
    r.submit("py", 2, code.as_bytes(), 0);
    assert!(eventually(Duration::from_secs(20), || flag.exists()));
    r.cancel("py", 2);
    let e = r.wait_done("py", 2);
    assert_eq!(outcome(&e), json!({"outcome": "cancelled"}));
    let err: String = e
        .iter()
        .filter(|e| e["kind"] == "output" && e["stream"] == "stderr")
        .map(|e| e["data"]["text"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert!(err.contains("namespace is lost"), "{e:?}");
    let (o, _, _) = r.run("py", 3, "x");
    assert_eq!(o["outcome"], "error", "a fresh interpreter has no x: {o}");
    let (o, out, _) = r.run("py", 4, "y = 2\ny * 3");
    assert_eq!(o, json!({"outcome": "ok"}));
    assert_eq!(out, b"6\n");
}

#[test]
fn python_timeout() {
    let mut r = python_root();
    r.submit_with(
        "py",
        1,
        "req-1",
        b"import time\ntime.sleep(1000)",
        100,
        Some(300),
    );
    let e = r.wait_done("py", 1);
    assert_eq!(outcome(&e), json!({"outcome": "timed_out"}));
}
