//! Shell kernels through the real `tether-agent op` binary: state across
//! cells, `exit N`, exact bytes, idempotent submission, timeouts, probe,
//! shutdown, ack and gc.

mod common;

use common::*;
use serde_json::json;
use std::time::Duration;

#[test]
fn cwd_and_exports_persist_and_exit_keeps_the_state_it_reached() {
    let mut r = Root::new();
    r.spawn("k");
    let (o, out, e) = r.run("k", 1, "cd /tmp; export X=1 'Y=a b'; echo first");
    assert_eq!(o, json!({"outcome": "ok"}), "{e:?}");
    assert_eq!(out, b"first\n");
    assert_contiguous(&e);
    let (o, out, _) = r.run("k", 2, "pwd; echo \"$X\"; echo \"$Y\"");
    assert_eq!(o, json!({"outcome": "ok"}));
    assert_eq!(String::from_utf8_lossy(&out), "/tmp\n1\na b\n");
    // exit 3: resolves as exit 3 with what it did before kept.
    let (o, _, _) = r.run("k", 3, "cd /; export X=changed; exit 3");
    assert_eq!(o, json!({"outcome": "exit", "code": 3}));
    let (o, out, _) = r.run("k", 4, "pwd; echo $X; false");
    assert_eq!(String::from_utf8_lossy(&out), "/\nchanged\n");
    assert_eq!(
        o,
        json!({"outcome": "exit", "code": 1}),
        "last status 1: {o}"
    );
    // the marker never reaches the saved state, yet every cell carries it.
    let (_, out, _) = r.run("k", 5, "echo \"m=$TETHER_CELL\"");
    assert!(String::from_utf8_lossy(&out).ends_with(":5\n"), "{out:?}");
    let saved = std::fs::read_to_string(r.path().join("kernels/k/state/shell")).unwrap();
    assert!(saved.contains("X="), "{saved}");
    assert!(
        !saved.contains("TETHER_CELL"),
        "marker leaked into the saved state"
    );
    // The wrapper's scratch files (each written once: see
    // `CellLayout::scratch_files`) are the ones the shim removes: a cell
    // that ended, with a function defined, leaves none behind.
    let (o, _, _) = r.run("k", 6, "f() { :; }; g=1");
    assert_eq!(o, json!({"outcome": "ok"}));
    let left: Vec<String> = std::fs::read_dir(r.path().join("kernels/k/cells/6"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("scratch"))
        .collect();
    assert!(left.is_empty(), "scratch files left: {left:?}");
}

/// A PATH with dash as `sh` and no bash: the kernel's cells run in dash.
fn without_bash(r: &mut Root) {
    let bin = r.file("bin");
    std::fs::create_dir(&bin).unwrap();
    for (name, target) in [("sh", "/bin/dash"), ("cat", "/bin/cat")] {
        std::os::unix::fs::symlink(target, bin.join(name)).unwrap();
    }
    r.path_env = Some(bin.into_os_string());
}

/// Where the sandbox has no bash, cells run in `/bin/sh` (dash here) and
/// keep what POSIX sh can list: variables, exports, cwd, umask, `set`
/// flags (not functions: dash cannot list them).
#[test]
fn a_dash_kernel_keeps_what_posix_sh_can() {
    let mut r = Root::new();
    without_bash(&mut r);
    r.spawn("k");
    let (o, _, _) = r.run("k", 1, "X='a b'; export E=2; cd /tmp; umask 077; set -u");
    assert_eq!(o, json!({"outcome": "ok"}));
    let (o, out, _) = r.run("k", 2, "echo \"$X|$E|$-\"; pwd; umask; Y=3; exit 4");
    assert_eq!(o, json!({"outcome": "exit", "code": 4}));
    assert_eq!(String::from_utf8_lossy(&out), "a b|2|u\n/tmp\n0077\n");
    let (o, out, e) = r.run("k", 3, "echo $Y; set +u; greet");
    assert_eq!(String::from_utf8_lossy(&out), "3\n");
    // A missing command: the shell's own status, as `sh -c` gives it.
    assert_eq!(o, json!({"outcome": "exit", "code": 127}), "{o}");
    let mut err = Vec::new();
    for x in e
        .iter()
        .filter(|x| x["kind"] == "output" && x["stream"] == "stderr")
    {
        let b: tether_core::bytes::Bytes = serde_json::from_value(x["data"].clone()).unwrap();
        err.extend(b.0);
    }
    assert!(
        String::from_utf8_lossy(&err).starts_with("cell 3: "),
        "{}",
        String::from_utf8_lossy(&err)
    );
}

/// A cell starts with `$?` as the previous cell left it, as the next
/// prompt of an interactive shell does (`false`, then `echo $?` prints 1),
/// also after `exit N` and under a restored `set -e` (which must not stop
/// the shell on it); under bash `$_` too, where it is known. Bash and dash.
#[test]
fn a_cell_starts_with_the_previous_status() {
    for dash in [false, true] {
        let mut r = Root::new();
        if dash {
            without_bash(&mut r);
        }
        r.spawn("k");
        let cells = [
            ("false", "", json!({"outcome": "exit", "code": 1})),
            ("echo \"s=$?\"", "s=1\n", json!({"outcome": "ok"})),
            (
                "echo \"s=$?\"; exit 3",
                "s=0\n",
                json!({"outcome": "exit", "code": 3}),
            ),
            (
                "echo \"s=$?\"; set -e; false",
                "s=3\n",
                json!({"outcome": "exit", "code": 1}),
            ),
            (
                "echo \"alive s=$?\"",
                "alive s=1\n",
                json!({"outcome": "ok"}),
            ),
        ];
        for (seq, (code, want, outcome)) in cells.into_iter().enumerate() {
            let (o, out, e) = r.run("k", seq as u64 + 1, code);
            assert_eq!(
                String::from_utf8_lossy(&out),
                want,
                "dash={dash} {code}: {e:?}"
            );
            assert_eq!(o, outcome, "dash={dash} {code}");
        }
        if !dash {
            let (_, out, _) = r.run("k", 6, "set +e; echo a b; exit 0");
            assert_eq!(out, b"a b\n");
            let (_, out, _) = r.run("k", 7, "echo \"[$_]\"");
            assert_eq!(out, b"[b]\n", "$_ after an exit is the code's own");
            let (_, out, _) = r.run("k", 8, "echo \"[$_]\"");
            assert_eq!(out, b"[]\n", "never tether's own words");
        }
    }
}

#[test]
fn a_cells_own_exit_trap_is_kept_and_never_fires() {
    let mut r = Root::new();
    r.spawn("k");
    let (o, out, _) = r.run("k", 1, "trap 'echo trapped' EXIT; cd /usr; export T=7");
    assert_eq!(o, json!({"outcome": "ok"}));
    assert_eq!(out, b"");
    let (_, out, _) = r.run("k", 2, "pwd; echo $T; trap -p EXIT; exit 4");
    assert_eq!(out, b"/usr\n7\ntrap -- 'echo trapped' EXIT\n");
    let (o, out, _) = r.run("k", 3, "trap - EXIT; trap -p; echo $T");
    assert_eq!(o, json!({"outcome": "ok"}));
    assert_eq!(out, b"7\n");
}

/// A user's functions named after the builtins the wrapper calls (bash
/// finds functions first) change nothing of the wrapper's: under bash a
/// `builtin` function is set aside at the save and defined last at the
/// restore (where `declare`, `typeset` and `command` are functions too,
/// the state is not kept, and the next cell says so); under dash the save
/// drops them (dash keeps no functions).
#[test]
fn functions_named_after_builtins_leave_the_wrapper_alone() {
    let mut r = Root::new();
    r.spawn("k");
    let (o, out, _) = r.run(
        "k",
        1,
        "builtin() { echo B \"$@\"; }; command() { echo C; }; printf() { echo P; }; export -f builtin; X=1; cd /tmp",
    );
    assert_eq!((o, out), (json!({"outcome": "ok"}), b"".to_vec()));
    let (o, out, _) = r.run("k", 2, "builtin echo b; echo \"$X $PWD\"; Y=2; exit 3");
    assert_eq!(o, json!({"outcome": "exit", "code": 3}));
    assert_eq!(String::from_utf8_lossy(&out), "B echo b\n1 /tmp\n");
    let (o, out, _) = r.run(
        "k",
        3,
        "bash -c 'builtin x'; unset -f builtin printf; echo $Y; builtin echo ok",
    );
    assert_eq!(o, json!({"outcome": "ok"}));
    assert_eq!(String::from_utf8_lossy(&out), "B x\n2\nok\n");
    r.run(
        "k",
        4,
        "builtin() { :; }; declare() { :; }; typeset() { :; }; command() { :; }; Z=1",
    );
    let (_, out, e) = r.run("k", 5, "echo \"[${Z-}]\"; type -t builtin");
    assert_eq!(String::from_utf8_lossy(&out), "[]\nbuiltin\n");
    assert!(format!("{e:?}").contains("was not kept"), "{e:?}");

    let mut r = Root::new();
    without_bash(&mut r);
    r.spawn("k");
    let (o, _, _) = r.run(
        "k",
        1,
        "umask 027; printf() { echo P; }; umask() { echo U; }; pwd() { echo W; }; X=1; cd /tmp",
    );
    assert_eq!(o, json!({"outcome": "ok"}));
    let (o, out, _) = r.run("k", 2, "echo \"$X\"; pwd; umask");
    assert_eq!(o, json!({"outcome": "ok"}));
    assert_eq!(String::from_utf8_lossy(&out), "1\n/tmp\n0027\n");
}

#[test]
fn bytes_and_code_run_verbatim() {
    let mut r = Root::new();
    r.spawn("k");
    let (o, out, _) = r.run(
        "k",
        1,
        "printf '\\377\\000\\376\\n'; echo \"it's $(echo \"q\\\"uote\")\"",
    );
    assert_eq!(o, json!({"outcome": "ok"}));
    assert_eq!(out, b"\xff\x00\xfe\nit's q\"uote\n");
    // code that is not UTF-8 itself
    let first = r.submit("k", 2, b"printf '%s\\n' '\xe9t\xe9'", 5000);
    let mut entries = first["batch"]["entries"].as_array().unwrap().clone();
    if first["batch"]["done"] != true {
        entries = r.wait_done("k", 2);
    }
    assert_eq!(stdout(&entries), b"\xe9t\xe9\n");
}

#[test]
fn output_past_the_cap_is_clipped_once() {
    let mut r = Root::new();
    r.spawn("k");
    // 9 MiB of output against the 8 MiB cap
    let (o, out, e) = r.run("k", 1, "head -c 9437184 /dev/zero");
    assert_eq!(o, json!({"outcome": "ok"}));
    assert_eq!(out.len(), 8 * 1024 * 1024);
    let clipped: Vec<_> = e.iter().filter(|e| e["kind"] == "clipped").collect();
    assert_eq!(clipped.len(), 1);
    assert_eq!(clipped[0]["dropped"], 1024 * 1024);
    assert_contiguous(&e);
}

#[test]
fn submission_is_idempotent_by_request_id() {
    let mut r = Root::new();
    r.spawn("k");
    let counter = r.file("counter");
    let code = format!("echo x >> {}", counter.display());
    let a = r.submit_with("k", 1, "req-a", code.as_bytes(), 5000, None);
    assert_eq!(a["acceptance"], "accepted");
    r.wait_done("k", 1);
    let again = r.submit_with("k", 1, "req-a", code.as_bytes(), 5000, None);
    assert_eq!(again["acceptance"], "already_accepted");
    assert_eq!(again["batch"]["done"], true);
    let other = r.submit_with("k", 1, "req-b", b"true", 100, None);
    assert_eq!(other["error"]["kind"], "conflict", "{other}");
    assert_eq!(
        std::fs::read_to_string(&counter).unwrap(),
        "x\n",
        "ran exactly once"
    );
}

#[test]
fn timeout_cancels_the_cell_and_the_kernel_lives_on() {
    let mut r = Root::new();
    r.spawn("k");
    r.run("k", 1, "export KEEP=yes");
    r.submit_with("k", 2, "req-2", b"sleep 1000", 100, Some(200));
    let e = r.wait_done("k", 2);
    assert_eq!(outcome(&e), json!({"outcome": "timed_out"}));
    let (o, out, _) = r.run("k", 3, "echo $KEEP");
    assert_eq!(o, json!({"outcome": "ok"}));
    assert_eq!(out, b"yes\n");
}

#[test]
fn probe_tells_alive_dead_replaced_and_absent() {
    let mut r = Root::new();
    assert_eq!(r.probe("k", None), json!({"status": "absent"}));
    let id = r.spawn("k");
    assert_eq!(r.probe("k", Some(&id))["status"], "alive");
    // spawn again with the same nonce: reused
    let nonce = id["nonce"].as_str().unwrap().to_owned();
    let again = r.op(
        json!({"spawn": {"kernel": "k", "lang": "shell", "nonce": nonce,
        "idle_timeout_ms": 600000, "grace_ms": 300}}),
    );
    assert_eq!(again["spawned"]["fresh"], false);
    assert_eq!(again["spawned"]["identity"], id);
    // a reused pid: same pid, other start time
    let mut reused = id.clone();
    reused["starttime"] = json!(id["starttime"].as_u64().unwrap() + 1);
    std::fs::write(r.path().join("kernels/k/identity.json"), reused.to_string()).unwrap();
    let st = r.probe("k", Some(&reused));
    assert_eq!(st["status"], "replaced", "{st}");
    std::fs::write(r.path().join("kernels/k/identity.json"), id.to_string()).unwrap();
    // kill -9 the daemon: dead, with evidence
    let pid = id["pid"].as_u64().unwrap() as i32;
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    assert!(eventually(Duration::from_secs(10), || {
        r.probe("k", Some(&id))["status"] == "dead"
    }));
    // a fresh spawn starts from a fresh state
    let fresh = r.spawn("k");
    assert_ne!(fresh["pid"], id["pid"]);
    assert_eq!(r.probe("k", Some(&id))["status"], "replaced");
}

#[test]
fn bad_requests_get_typed_errors() {
    let r = Root::new();
    let v = r.raw(b"not json");
    assert_eq!(v["error"]["kind"], "bad_request");
    let v = r.raw(br#"{"v":99,"id":5,"op":"gc"}"#);
    assert_eq!(v["error"]["kind"], "unsupported_version");
    assert_eq!(v["id"], 5);
    let v = r.raw(br#"{"v":1,"id":6,"op":{"probe":{"kernel":"../etc"}}}"#);
    assert_eq!(v["error"]["kind"], "bad_request");
    let v =
        r.raw(br#"{"v":1,"id":7,"op":{"wait":{"kernel":"nope","seq":1,"cursor":0,"wait_ms":10}}}"#);
    assert_eq!(v["error"]["kind"], "no_such_kernel");
}

#[test]
fn shutdown_kills_what_ignores_term_and_removes_the_kernel() {
    let mut r = Root::new();
    let id = r.spawn("k");
    let pids = r.file("pids");
    let code = format!(
        "sh -c 'trap \"\" TERM; echo $$ >> {p}; while :; do sleep 1; done' & sleep 1000 & echo $! >> {p}; exit 0",
        p = pids.display()
    );
    let (o, _, _) = r.run("k", 1, &code);
    assert_eq!(o, json!({"outcome": "exit", "code": 0}));
    r.submit(
        "k",
        2,
        format!("echo $$ >> {}; sleep 1000", pids.display()).as_bytes(),
        300,
    );
    assert!(eventually(Duration::from_secs(5), || pids_in(&pids).len() == 3));
    let reply = r.op(json!({"shutdown": {"kernel": "k"}}));
    assert!(
        reply["shut_down"]["killed"].as_u64().unwrap() >= 4,
        "{reply}"
    );
    for pid in pids_in(&pids) {
        assert!(!alive(pid), "pid {pid} survived shutdown");
    }
    assert!(!alive(id["pid"].as_u64().unwrap() as u32));
    assert!(!r.path().join("kernels/k").exists());
    assert_eq!(r.probe("k", None), json!({"status": "absent"}));
}

#[test]
fn ack_deletes_a_done_cell_and_gc_sweeps_dead_kernels() {
    let mut r = Root::new();
    let id = r.spawn("k");
    r.run("k", 1, "true");
    r.op(json!({"ack": {"kernel": "k", "seq": 1}}));
    assert!(!r.path().join("kernels/k/cells/1").exists());
    r.op(json!({"ack": {"kernel": "k", "seq": 1}})); // idempotent
    assert_eq!(r.op(json!("gc"))["collected"]["removed"], json!([]));
    let pid = id["pid"].as_u64().unwrap() as i32;
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    assert!(eventually(Duration::from_secs(10), || !alive(pid as u32)));
    assert_eq!(r.op(json!("gc"))["collected"]["removed"], json!(["k"]));
}

#[test]
fn idle_daemon_kills_what_it_owns_and_exits() {
    let mut r = Root::new();
    let id = r.spawn_with("k", 300, 1500);
    let pids = r.file("pids");
    let (o, _, e) = r.run(
        "k",
        1,
        &format!("sleep 1000 & echo $! >> {}", pids.display()),
    );
    assert_eq!(o, json!({"outcome": "ok"}));
    let left: Vec<u32> = pids_in(&pids);
    let reported = e
        .iter()
        .find(|e| e["kind"] == "leftovers")
        .unwrap_or_else(|| panic!("no leftovers: {e:?}"));
    assert!(reported["pids"]
        .as_array()
        .unwrap()
        .contains(&json!(left[0])));
    let daemon = id["pid"].as_u64().unwrap() as u32;
    assert!(eventually(Duration::from_secs(20), || !alive(daemon)));
    assert!(!alive(left[0]), "a leftover survived the idle exit");
}

#[test]
fn a_respawned_kernel_starts_fresh_and_stops_the_dead_ones_cell() {
    let mut r = Root::new();
    let id = r.spawn("k");
    r.run("k", 1, "cd /usr; export OLD=1");
    let pids = r.file("pids");
    r.submit(
        "k",
        2,
        format!("echo $$ >> {}; sleep 1000", pids.display()).as_bytes(),
        0,
    );
    assert!(eventually(Duration::from_secs(10), || pids_in(&pids).len() == 1));
    let pid = id["pid"].as_u64().unwrap() as i32;
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    assert!(eventually(Duration::from_secs(10), || r
        .probe("k", Some(&id))["status"]
        == "dead"));
    // The probe that proved the daemon dead ended its running cell.
    assert!(eventually(Duration::from_secs(10), || !alive(
        pids_in(&pids)[0]
    )));
    let w = r.try_op(json!({"wait": {"kernel": "k", "seq": 2, "cursor": 0, "wait_ms": 10}}));
    assert_eq!(w["error"]["kind"], "kernel_dead", "{w}");
    r.spawn("k");
    // The new daemon resolves the dead one's cell.
    let e = r.wait_done("k", 2);
    assert_eq!(
        outcome(&e),
        json!({"outcome": "error", "message": "the kernel daemon that ran this cell is gone"})
    );
    // the new kernel has a fresh state
    let (o, out, _) = r.run("k", 3, "pwd; echo \"[$OLD]\"");
    assert_eq!(o, json!({"outcome": "ok"}));
    assert_ne!(String::from_utf8_lossy(&out), "/usr\n[1]\n");
    assert!(String::from_utf8_lossy(&out).ends_with("[]\n"), "{out:?}");
}

/// CRLF line ends (what a terminal's Enter sends) run as LF: without it
/// bash would take `2\r` as sleep's argument (pexpect's
/// test_long_running_multiline sends exactly this).
#[test]
fn crlf_line_ends_run_as_lf() {
    let mut r = Root::new();
    r.spawn("k");
    let (o, out, e) = r.run("k", 1, "echo begin\r\nsleep 0.1\r\necho done\r\n");
    assert_eq!(o, json!({"outcome": "ok"}), "{e:?}");
    assert_eq!(out, b"begin\ndone\n");
}

/// The positional parameters persist as at an interactive prompt:
/// `set -- …` in one cell, `$#`/`"$@"` in the next, values exact (spaces,
/// newlines, quotes, empty, `-x`, more than 9), through `exit`, `set -e`,
/// `set -u` and a timeout's TERM. An exit inside a function: dash keeps
/// the top level's; bash sees only the function's, and keeps the ones the
/// cell started with. Bash and dash.
#[test]
fn the_positional_parameters_persist() {
    let show = r#"printf '%s:' "$#"; for a; do printf '<%s>' "$a"; done; echo"#;
    for dash in [false, true] {
        let mut r = Root::new();
        if dash {
            without_bash(&mut r);
        }
        r.spawn("k");
        let seq = std::cell::Cell::new(0);
        let run = |r: &mut Root, code: &str| {
            seq.set(seq.get() + 1);
            let (o, out, e) = r.run("k", seq.get(), code);
            (o, String::from_utf8_lossy(&out).into_owned(), e)
        };
        let (o, out, _) = run(
            &mut r,
            &format!("{show}; set -- a 'b c' '' -x \"it's\" 'l1\nl2' 7 8 9 ten eleven"),
        );
        assert_eq!(o, json!({"outcome": "ok"}));
        assert_eq!(out, "0:\n", "dash={dash}");
        let (_, out, e) = run(&mut r, &format!("{show}; echo \"${{10}}|$1\"; shift 2"));
        assert_eq!(
            out, "11:<a><b c><><-x><it's><l1\nl2><7><8><9><ten><eleven>\nten|a\n",
            "dash={dash} {e:?}"
        );
        let (o, out, _) = run(&mut r, &format!("{show}; set -- x 'y z'; exit 3"));
        assert_eq!(o, json!({"outcome": "exit", "code": 3}));
        assert_eq!(
            out, "9:<><-x><it's><l1\nl2><7><8><9><ten><eleven>\n",
            "dash={dash}"
        );
        let (o, out, _) = run(
            &mut r,
            &format!("{show}; set -e; set -- e; false; set -- no"),
        );
        assert_eq!(o, json!({"outcome": "exit", "code": 1}));
        assert_eq!(out, "2:<x><y z>\n", "dash={dash}");
        let (_, out, _) = run(
            &mut r,
            &format!("set +e; {show}; set -u; set -- u; : $nope; set -- no"),
        );
        assert_eq!(out, "1:<e>\n", "dash={dash}");
        let (_, out, _) = run(
            &mut r,
            &format!("set +u; {show}; set -- top; f() {{ exit 5; }}; f in"),
        );
        assert_eq!(out, "1:<u>\n", "dash={dash}");
        let want = if dash { "1:<top>\n" } else { "1:<u>\n" };
        let (_, out, _) = run(&mut r, &format!("{show}; set --"));
        assert_eq!(out, want, "dash={dash}: after an exit inside a function");
        let (_, out, _) = run(&mut r, &format!("{show}; set -- before the timeout"));
        assert_eq!(out, "0:\n", "dash={dash}");
        seq.set(seq.get() + 1);
        r.submit_with(
            "k",
            seq.get(),
            &format!("req-{}", seq.get()),
            b"set -- cancelled here; while :; do :; done",
            100,
            Some(300),
        );
        let e = r.wait_done("k", seq.get());
        assert_eq!(outcome(&e), json!({"outcome": "timed_out"}));
        let (_, out, _) = run(&mut r, show);
        assert_eq!(out, "2:<cancelled><here>\n", "dash={dash}");
    }
}
