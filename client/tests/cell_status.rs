//! What a cell hands back, through the real `tether` binary and a real
//! agent: its own exit status (as `sh -c` gives it), `--json` telling a
//! cell's status apart from tether's own conditions, and stdin at EOF for
//! shell and Python cells.

mod common;

use common::{show, text, World};
use std::time::{Duration, Instant};

fn json_lines(out: &std::process::Output) -> Vec<serde_json::Value> {
    text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// `tether run` exits with the cell's status: the last command's, or the
/// one `exit N` gives; the kernel keeps working after each.
#[test]
fn run_exits_with_the_cells_own_status() {
    let w = World::new();
    for (code, status) in [
        ("doesntexist", 127),
        ("exit 3", 3),
        ("false", 1),
        ("true; (exit 5)", 5), // pytest's "no tests collected" stays 5
        ("echo fine", 0),
        ("sh -c 'kill -9 $$'", 137),
    ] {
        let out = w.run("k", code);
        assert_eq!(out.status.code(), Some(status), "{code:?}: {}", show(&out));
    }
    let out = w.run("k", "echo still here");
    assert_eq!(text(&out.stdout), "still here\n", "{}", show(&out));
}

/// A cell exiting 75 and tether's own "outcome unknown" (75 as well) are
/// told apart by `--json`'s last line.
#[test]
fn json_tells_a_cell_exiting_75_from_an_unknown_outcome() {
    let w = World::new();
    let out = w.tether(&["--json", "run", "--kernel", "k", "exit 75"]);
    assert_eq!(out.status.code(), Some(75), "{}", show(&out));
    let last = json_lines(&out).pop().unwrap();
    assert_eq!(last["event"], "exit", "{last}");
    assert_eq!(last["outcome"]["outcome"], "exit", "{last}");
    assert_eq!(last["outcome"]["code"], 75, "{last}");

    // Nothing listens on port 1: the sandbox is unreachable.
    if !tether_require::have(
        "json_tells_a_cell_exiting_75_from_an_unknown_outcome (unreachable half)",
        tether_require::Need::Sshd,
    ) {
        return;
    }
    let unreachable = World::with_backend("ssh:nobody@127.0.0.1:1");
    let out = unreachable.tether(&["--json", "run", "--kernel", "k", "true"]);
    assert_eq!(out.status.code(), Some(75), "{}", show(&out));
    let last = json_lines(&out).pop().unwrap();
    assert_eq!(last["event"], "exit", "{last}");
    assert_eq!(last["outcome"]["outcome"], "unknown", "{last}");
}

/// tether's own refusals carry a `failure` line naming the condition.
#[test]
fn json_names_tethers_own_failures() {
    let w = World::new();
    let out = w.tether(&["--json", "run", "--kernel", "../x", "true"]);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    let last = json_lines(&out).pop().unwrap();
    assert_eq!(
        (&last["event"], &last["failure"], &last["exit_code"]),
        (
            &serde_json::json!("failure"),
            &serde_json::json!("usage"),
            &serde_json::json!(2)
        ),
        "{last}"
    );
}

/// Shell cells read EOF: `cat`, `read` and Python's `input()` in a
/// subprocess return at once; pagers default to `cat` unless set.
#[test]
fn shell_cells_have_stdin_at_eof_and_cat_as_pager() {
    let w = World::new();
    let start = Instant::now();
    let out = w.run(
        "k",
        "cat; read line; echo \"read=$?\"; \
         if command -v python3 >/dev/null; then python3 -c 'input()' 2>/dev/null; echo \"py=$?\"; \
         else echo py=1; fi",
    );
    assert_eq!(text(&out.stdout), "read=1\npy=1\n", "{}", show(&out));
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    let out = w.run("k", "echo \"$PAGER $GIT_PAGER\"; export PAGER=more");
    assert_eq!(text(&out.stdout), "cat cat\n", "{}", show(&out));
    let out = w.run("k", "echo \"$PAGER $GIT_PAGER\"");
    assert_eq!(text(&out.stdout), "more cat\n", "{}", show(&out));
}

/// Python's `input()` raises EOFError within a second, saying cells have
/// no stdin; the namespace survives; subprocesses read EOF too.
#[test]
fn python_input_raises_eof_at_once_and_the_namespace_survives() {
    if !tether_require::have(module_path!(), tether_require::Need::Python3) {
        return;
    }
    let w = World::new();
    let py = |code: &str| w.tether(&["run", "--lang", "python", "--kernel", "py", code]);
    let out = py("x = 41");
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let start = Instant::now();
    let out = py("input('name? ')");
    let took = start.elapsed();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(took < Duration::from_secs(1), "input() took {took:?}");
    let err = text(&out.stderr);
    assert!(err.contains("EOFError"), "{}", show(&out));
    assert!(err.contains("no stdin"), "{}", show(&out));
    let out = py("import os, subprocess, sys\n\
         r = subprocess.run(['cat'], capture_output=True)\n\
         print(repr(sys.stdin.read()), r.returncode, repr(r.stdout), os.environ['PAGER'])\n\
         x + 1");
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert_eq!(text(&out.stdout), "'' 0 b'' cat\n42\n", "{}", show(&out));
}
