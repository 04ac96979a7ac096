//! The `tether` CLI end to end on the local backend: real agent, real
//! daemons, real processes. Each test has its own sandbox root and records.

mod common;

use common::{alive, finish, first_line, kill, show, text, wait_bounded, World};
use std::time::Duration;

#[test]
fn state_persists_between_runs() {
    let w = World::new();
    let out = w.run("k", "cd /tmp; export X=1");
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let out = w.run("k", "pwd; echo $X");
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert_eq!(text(&out.stdout), "/tmp\n1\n", "{}", show(&out));
}

#[test]
fn exit_n_is_the_exit_status_and_the_next_cell_works() {
    let w = World::new();
    assert_eq!(w.run("k", "export KEEP=yes").status.code(), Some(0));
    let out = w.run("k", "echo before; exit 3");
    assert_eq!(out.status.code(), Some(3), "{}", show(&out));
    assert_eq!(text(&out.stdout), "before\n");
    assert!(text(&out.stderr).contains("status 3"), "{}", show(&out));
    let out = w.run("k", "echo after $KEEP");
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert_eq!(text(&out.stdout), "after yes\n");
}

#[test]
fn a_failing_cell_exits_1_and_a_timeout_124() {
    let w = World::new();
    let out = w.run("k", "false");
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let out = w.tether(&["run", "--kernel", "k", "--timeout", "1s", "sleep 60"]);
    assert_eq!(out.status.code(), Some(124), "{}", show(&out));
    let out = w.run("k", "echo still here");
    assert_eq!(text(&out.stdout), "still here\n", "{}", show(&out));
}

#[test]
fn hostile_kernel_names_are_refused_as_usage_errors() {
    let w = World::new();
    for name in [
        "../etc",
        "a/b",
        "a b",
        "x;rm -rf ~",
        "$(id)",
        ".hidden",
        "-rf",
        "",
    ] {
        let out = w.tether(&["run", &format!("--kernel={name}"), "true"]);
        assert_eq!(out.status.code(), Some(2), "{name:?}: {}", show(&out));
        assert!(
            text(&out.stderr).contains("A-Z a-z 0-9"),
            "{name:?}: {}",
            show(&out)
        );
    }
}

#[test]
fn unknown_backends_and_parameters_are_usage_errors() {
    let w = World::new();
    let out = w.tether(&["--backend", "kubernetes", "run", "true"]);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    assert!(text(&out.stderr).contains("unknown backend"));
    let out = w.tether(&["--backend", "local?speed=9", "run", "true"]);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    assert!(text(&out.stderr).contains("speed"));
}

/// Quotes, `$()`, backticks and bytes that are not UTF-8 (no NUL) reach
/// the shell verbatim, whether the code comes as an argument or on stdin.
#[test]
fn code_runs_verbatim() {
    use std::os::unix::ffi::OsStrExt;
    let w = World::new();
    let payload: &[u8] =
        b"it's \"quoted\" $(echo not run) `echo nor this` $HOME \\n \x01\xff\xfe end";
    let mut code = b"cat <<'TETHER_EOF'\n".to_vec();
    code.extend_from_slice(payload);
    code.extend_from_slice(b"\nTETHER_EOF\n");
    let mut expected = payload.to_vec();
    expected.push(b'\n');

    let out = w.tether_stdin(&["run", "--kernel", "k"], &code);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert_eq!(out.stdout, expected, "{}", show(&out));

    let child = w
        .cmd()
        .args(["run", "--kernel", "k"])
        .arg(std::ffi::OsStr::from_bytes(&code))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = finish(child, "tether run --kernel k <code as an argument>");
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert_eq!(out.stdout, expected, "{}", show(&out));
}

#[test]
fn json_mode_prints_one_json_object_per_line() {
    let w = World::new();
    let out = w.tether(&[
        "--json",
        "run",
        "--kernel",
        "k",
        "echo hi; echo oops >&2; exit 4",
    ]);
    assert_eq!(out.status.code(), Some(4), "{}", show(&out));
    let lines: Vec<serde_json::Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let outputs: Vec<&serde_json::Value> =
        lines.iter().filter(|l| l["event"] == "output").collect();
    assert!(
        outputs
            .iter()
            .any(|l| l["stream"] == "stdout" && l["data"]["text"] == "hi\n"),
        "{lines:?}"
    );
    assert!(
        outputs
            .iter()
            .any(|l| l["stream"] == "stderr" && l["data"]["text"] == "oops\n"),
        "{lines:?}"
    );
    let last = lines.last().unwrap();
    assert_eq!(last["event"], "exit");
    assert_eq!(last["exit_code"], 4);
    assert_eq!(last["outcome"]["outcome"], "exit");
}

/// A warm `tether run` in a fresh process (the kernel is known from its
/// record) costs exactly one exec: the submit checks the daemon and
/// carries the previous cell's acknowledgement.
#[test]
fn a_warm_run_in_a_new_process_is_one_exec() {
    let w = World::new();
    assert_eq!(w.run("k", "echo first").status.code(), Some(0));
    let cells = w.root.path().join("kernels/k/cells");
    assert!(cells.join("1").exists(), "cell 1 waits for its ack");
    for seq in 2..=3 {
        let out = w.tether(&["--json", "run", "--kernel", "k", "true"]);
        assert_eq!(out.status.code(), Some(0), "{}", show(&out));
        let last: serde_json::Value =
            serde_json::from_str(text(&out.stdout).lines().last().unwrap()).unwrap();
        assert_eq!(last["event"], "exit", "{}", show(&out));
        assert_eq!(
            last["execs"],
            serde_json::json!({ "submit": 1 }),
            "{}",
            show(&out)
        );
        assert!(
            !cells.join((seq - 1).to_string()).exists(),
            "the submit of cell {seq} acknowledged cell {}",
            seq - 1
        );
    }
}

/// Ctrl-C cancels the cell, not the kernel: the cell's processes are gone,
/// the kernel's state is still there.
#[test]
fn ctrl_c_cancels_the_cell_and_keeps_the_kernel() {
    let w = World::new();
    assert_eq!(w.run("k", "export KEEP=1").status.code(), Some(0));
    let (mut child, sleeper) = w.spawn_sleeping_cell("k");
    kill("INT", child.id());
    let status = wait_bounded(&mut child, "tether run after ctrl-c");
    assert_eq!(status.code(), Some(130));
    assert!(
        !alive(sleeper),
        "the cell's sleep {sleeper} survived the cancel"
    );
    let out = w.run("k", "echo $KEEP");
    assert_eq!(text(&out.stdout), "1\n", "{}", show(&out));
}

/// The cancel is issued while the submit exec is still on its way (it is
/// delayed 4 s); the cell never runs and is reported cancelled.
#[test]
fn cancel_before_registration_never_runs_the_cell() {
    let w = World::with_backend("local?delay.submit=4s");
    assert_eq!(w.run("k", "true").status.code(), Some(0));
    let side = w.root.path().join("side-effect");
    let code = format!("touch {}", side.display());
    let seq = w.next_seq("k");
    let child = w.spawn(&["run", "--kernel", "k", &code]);
    // The submit is on its way (held back 4 s by the transport).
    w.wait_submitted("k", seq);
    kill("INT", child.id());
    let out = finish(child, "tether run after ctrl-c");
    assert_eq!(out.status.code(), Some(130), "{}", show(&out));
    assert!(!side.exists(), "the cancelled cell ran");
    // The submit has landed by now (tether waits for it); still nothing.
    let out = w.run("k", "echo next");
    assert_eq!(text(&out.stdout), "next\n", "{}", show(&out));
    assert!(!side.exists(), "the cancelled cell ran late");
}

/// Starts a cell on kernel `k` that counts its runs in the returned file,
/// prints `first`, sleeps 3 s and prints `second`; `kill -9`s the client
/// once `first` arrived.
fn kill_the_client_mid_cell(w: &World) -> std::path::PathBuf {
    let counter = w.root.path().join("counter");
    let code = format!(
        "echo ran >> {}; echo first; sleep 3; echo second",
        counter.display()
    );
    let mut child = w.spawn(&["run", "--kernel", "k", &code]);
    let (line, _stdout) = first_line(&mut child);
    assert_eq!(line, "first\n");
    kill("KILL", child.id());
    let _ = wait_bounded(&mut child, "tether run after kill -9");
    counter
}

/// `kill -9` of `tether run` mid-cell; `tether resume` prints the rest and
/// the cell ran exactly once.
#[test]
fn resume_after_the_client_is_killed_prints_the_rest_once() {
    let w = World::new();
    let counter = kill_the_client_mid_cell(&w);

    let out = w.tether(&["resume", "--kernel", "k"]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert!(text(&out.stdout).ends_with("second\n"), "{}", show(&out));
    assert_eq!(std::fs::read_to_string(&counter).unwrap(), "ran\n");
    // Resolved: nothing left to resume, and the kernel takes new cells.
    let out = w.run("k", "echo next");
    assert_eq!(text(&out.stdout), "next\n", "{}", show(&out));
    assert_eq!(std::fs::read_to_string(&counter).unwrap(), "ran\n");
}

/// `tether resume --replay` prints the whole transcript of the cell.
#[test]
fn resume_replay_prints_the_whole_transcript() {
    let w = World::new();
    let counter = kill_the_client_mid_cell(&w);

    let out = w.tether(&["resume", "--kernel", "k", "--replay"]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert_eq!(text(&out.stdout), "first\nsecond\n", "{}", show(&out));
    assert_eq!(std::fs::read_to_string(&counter).unwrap(), "ran\n");
}

/// `kill -9` of the kernel daemon: the next run says the state was lost,
/// with the evidence, and runs in a fresh kernel.
#[test]
fn a_killed_daemon_is_reported_as_state_lost_and_replaced() {
    let w = World::new();
    assert_eq!(w.run("k", "export X=1").status.code(), Some(0));
    let daemon = w.daemon_pid("k");
    kill("KILL", daemon);
    let out = w.run("k", "echo fresh:${X:-unset}");
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert_eq!(text(&out.stdout), "fresh:unset\n", "{}", show(&out));
    let err = text(&out.stderr);
    assert!(err.contains("state lost"), "{}", show(&out));
    assert!(
        err.contains(&daemon.to_string()),
        "no evidence: {}",
        show(&out)
    );
    assert_ne!(w.daemon_pid("k"), daemon);
}

/// After `kill -9` of `tether run`, a new `run` refuses (the cell is
/// unresolved, exit 16: busy) and `tether cancel` kills the cell, not the
/// kernel.
#[test]
fn cancel_from_another_process_after_the_client_died() {
    let w = World::new();
    assert_eq!(w.run("k", "export KEEP=1").status.code(), Some(0));
    let (mut child, sleeper) = w.spawn_sleeping_cell("k");
    kill("KILL", child.id());
    let _ = wait_bounded(&mut child, "tether run after kill -9");

    let out = w.run("k", "echo too soon");
    assert_eq!(out.status.code(), Some(16), "{}", show(&out));
    assert!(
        text(&out.stderr).contains("tether resume"),
        "{}",
        show(&out)
    );

    let out = w.tether(&["cancel", "--kernel", "k"]);
    assert_eq!(out.status.code(), Some(130), "{}", show(&out));
    assert!(
        !alive(sleeper),
        "the cell's sleep {sleeper} survived the cancel"
    );
    let out = w.run("k", "echo $KEEP");
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert_eq!(text(&out.stdout), "1\n", "{}", show(&out));
}

/// A Python kernel keeps its namespace, shows a final expression, maps an
/// exception to exit 1 and `sys.exit(N)` to N; Ctrl-C interrupts the cell
/// and keeps the namespace; a shell `--lang` on it is a usage error.
#[test]
fn python_kernel_keeps_its_namespace() {
    if !tether_require::have(
        "python_kernel_keeps_its_namespace",
        tether_require::Need::Python3,
    ) {
        return;
    }
    let w = World::new();
    let py = |code: &str| w.tether(&["run", "--lang", "python", "--kernel", "py", code]);
    let out = py("x = 6 * 7");
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let out = py("x");
    assert_eq!(text(&out.stdout), "42\n", "{}", show(&out));
    let out = py("raise ValueError('boom')");
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(
        text(&out.stderr).contains("ValueError: boom"),
        "{}",
        show(&out)
    );
    let out = py("import sys; sys.exit(4)");
    assert_eq!(out.status.code(), Some(4), "{}", show(&out));

    let mut child = w.spawn(&[
        "run",
        "--kernel",
        "py",
        "import time\nprint('started', flush=True)\ntime.sleep(300)",
    ]);
    let (line, _stdout) = first_line(&mut child);
    assert_eq!(line, "started\n");
    kill("INT", child.id());
    assert_eq!(
        wait_bounded(&mut child, "tether run after ctrl-c").code(),
        Some(130)
    );
    let out = py("x + 1");
    assert_eq!(text(&out.stdout), "43\n", "{}", show(&out));

    let out = w.tether(&["run", "--lang", "shell", "--kernel", "py", "true"]);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
}

#[test]
fn resume_with_nothing_to_resume_says_so() {
    let w = World::new();
    let out = w.tether(&["resume", "--kernel", "k"]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert!(
        text(&out.stderr).contains("nothing to resume"),
        "{}",
        show(&out)
    );
    assert_eq!(w.run("k", "true").status.code(), Some(0));
    let out = w.tether(&["resume", "--kernel", "k"]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert!(
        text(&out.stderr).contains("no unresolved cell"),
        "{}",
        show(&out)
    );
}

/// The local root holds the binary tether executes: one that others can
/// write to is refused.
#[test]
fn a_local_root_writable_by_others_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let w = World::new();
    std::fs::set_permissions(w.root.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = w.run("k", "true");
    assert_eq!(out.status.code(), Some(69), "{}", show(&out));
    assert!(
        text(&out.stderr).contains("others can write"),
        "{}",
        show(&out)
    );
    std::fs::set_permissions(w.root.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    assert_eq!(w.run("k", "true").status.code(), Some(0));
}

/// Injected latency is a backend parameter; cells run the same through it,
/// and a background child that keeps running is reported as a leftover.
#[test]
fn cells_run_through_injected_latency_and_leftovers_are_reported() {
    let w = World::with_backend("local?latency=100ms");
    let out = w.run("k", "echo slow but fine");
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert_eq!(text(&out.stdout), "slow but fine\n");
    let out = w.run("k", "sleep 30 >/dev/null 2>&1 &");
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert!(
        text(&out.stderr).contains("left processes running"),
        "{}",
        show(&out)
    );
}

/// The hang guard itself: a child past its bound is killed, not waited on.
#[test]
fn a_child_past_its_bound_is_killed() {
    let mut child = std::process::Command::new("sleep")
        .arg("300")
        .spawn()
        .unwrap();
    let pid = child.id();
    assert_eq!(
        common::wait_within(&mut child, Duration::from_millis(100)),
        None
    );
    assert!(!alive(pid), "sleep {pid} survived");
}

/// `kill -9` of `tether run` while its submit is still on its way (held
/// back 4 s): the cell never reached the sandbox. `tether resume` sends it
/// then, under its recorded request id, and it runs exactly once.
#[test]
fn resume_sends_a_submit_that_never_reached_the_sandbox() {
    let w = World::with_backend("local?delay.submit=4s");
    assert_eq!(w.run("k", "true").status.code(), Some(0));
    let counter = w.root.path().join("counter");
    let code = format!("echo ran >> {}; echo hello", counter.display());
    let seq = w.next_seq("k");
    let mut child = w.spawn(&["run", "--kernel", "k", &code]);
    // The submit is on its way (held back 4 s by the transport).
    w.wait_submitted("k", seq);
    kill("KILL", child.id());
    let _ = wait_bounded(&mut child, "tether run after kill -9");
    assert!(!counter.exists(), "the submit reached the sandbox");

    let out = w.tether(&["resume", "--kernel", "k"]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert_eq!(text(&out.stdout), "hello\n", "{}", show(&out));
    assert_eq!(std::fs::read_to_string(&counter).unwrap(), "ran\n");
    let out = w.run("k", "echo next");
    assert_eq!(text(&out.stdout), "next\n", "{}", show(&out));
    assert_eq!(std::fs::read_to_string(&counter).unwrap(), "ran\n");
}

/// Two clients with their own records (two state directories) on one
/// sandbox root and one kernel: the second has no record of the kernel
/// and starts at cell 1, which the first already ran. The agent used to
/// answer "accepted" and the cell never ran: `tether run` waited forever.
#[test]
fn a_second_client_without_a_record_is_refused_clearly_then_continues_after_the_kernel() {
    let w = World::new();
    for i in 1..=3 {
        let out = w.run("k", &format!("X={i}"));
        assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    }
    // Its own records and mux, the first world's sandbox root.
    let other = World::new();
    let run_other = |code: &str| {
        let child = other
            .cmd()
            .env("TETHER_ROOT", w.root.path())
            .args(["run", "--kernel", "k", code])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        finish(child, "the second client's tether run")
    };
    let out = run_other("echo two $X");
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert_eq!(text(&out.stdout), "", "nothing ran: {}", show(&out));
    let err = text(&out.stderr);
    assert!(
        err.contains("another client") && err.contains("continues from cell 4"),
        "{}",
        show(&out)
    );
    // It learned where the kernel is: its next run goes through, in the
    // same kernel (the first client's variable is there).
    let out = run_other("echo two $X");
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert_eq!(text(&out.stdout), "two 3\n", "{}", show(&out));
    // The first client's next number is now the second's: refused the
    // same way, then it goes on too.
    let out = w.run("k", "echo one");
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(
        text(&out.stderr).contains("another client"),
        "{}",
        show(&out)
    );
    let out = w.run("k", "echo one $X");
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert_eq!(text(&out.stdout), "one 3\n", "{}", show(&out));
}
