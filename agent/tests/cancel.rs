//! Cancel against every escape class, with real processes: after the
//! cancel, zero processes of the cell survive (counted from the pids each
//! process wrote and from a `/proc` scan for the cell's env marker), while
//! the kernel's daemon, the kernel itself and a cell of another kernel that
//! runs at the same time are untouched.

mod common;

use common::*;
use serde_json::json;
use std::path::Path;
use std::time::Duration;

/// Runs `code` (built from the pid file path and a scratch dir) as cell 1
/// of kernel `a` while kernel `b` runs a cell too; waits until at least
/// `min_pids` pids are registered; cancels; checks the aftermath.
fn cancel_escape(code: impl Fn(&Path, &Path) -> String, min_pids: usize, expect_state: &str) {
    let mut r = Root::new();
    let id_a = r.spawn("a");
    let id_b = r.spawn("b");
    let scratch = r.file("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    // `sh SCRATCH/ignore.sh PIDS`: ignores TERM, registers its real pid.
    std::fs::write(
        scratch.join("ignore.sh"),
        "trap '' TERM\necho $$ >> \"$1\"\nwhile :; do sleep 1; done\n",
    )
    .unwrap();
    let pids = r.file("pids");
    let bpids = r.file("bpids");

    r.submit(
        "b",
        1,
        format!(
            "echo $$ >> {}; while :; do sleep 0.2; done",
            bpids.display()
        )
        .as_bytes(),
        0,
    );
    r.submit("a", 1, code(&pids, &scratch).as_bytes(), 0);
    assert!(
        eventually(Duration::from_secs(20), || pids_in(&pids).len() >= min_pids
            && pids_in(&bpids).len() == 1),
        "the cell never registered its processes: {:?}",
        pids_in(&pids)
    );
    if expect_state == "already_done" {
        let entries = r.wait_done("a", 1);
        let left = entries.iter().find(|e| e["kind"] == "leftovers");
        let left = left.unwrap_or_else(|| panic!("no leftovers reported: {entries:?}"));
        for pid in pids_in(&pids) {
            assert!(
                left["pids"].as_array().unwrap().contains(&json!(pid)),
                "{left}"
            );
            assert!(alive(pid), "a leftover must stay until cancelled");
        }
    }
    let state = r.cancel("a", 1);
    assert_eq!(state, expect_state);
    let entries = r.wait_done("a", 1);
    if expect_state == "escalating" {
        assert_eq!(
            outcome(&entries),
            json!({"outcome": "cancelled"}),
            "{entries:?}"
        );
    }
    let marker = format!("TETHER_CELL={}:1", r.nonce("a"));
    let survivors = |r: &Root| -> Vec<u32> {
        let _ = r;
        let mut s: Vec<u32> = pids_in(&pids).into_iter().filter(|p| alive(*p)).collect();
        s.extend(procs_mentioning(&marker));
        s.extend(procs_mentioning(&scratch.display().to_string()));
        s.extend(procs_mentioning(&pids.display().to_string()));
        s.sort();
        s.dedup();
        s
    };
    let clean = eventually(Duration::from_secs(20), || survivors(&r).is_empty());
    assert!(
        clean,
        "survivors of the cancelled cell: {:?}",
        survivors(&r)
    );

    // untouched: both daemons, kernel b's running cell; kernel a works on.
    assert_eq!(r.probe("a", Some(&id_a))["status"], "alive");
    assert_eq!(r.probe("b", Some(&id_b))["status"], "alive");
    let b_main = pids_in(&bpids)[0];
    assert!(alive(b_main), "the other kernel's cell was hit");
    let b = r.op(json!({"wait": {"kernel": "b", "seq": 1, "cursor": 2, "wait_ms": 0}}));
    assert_eq!(b["waited"]["batch"]["done"], false);
    let (o, out, _) = r.run("a", 2, "echo still here");
    assert_eq!(o, json!({"outcome": "ok"}));
    assert_eq!(out, b"still here\n");
    r.cancel("b", 1);
    r.wait_done("b", 1);
}

#[test]
fn builtin_only_loop() {
    cancel_escape(
        |p, _| format!("echo $$ >> {}; while :; do :; done", p.display()),
        1,
        "escalating",
    );
}

#[test]
fn descendant_that_ignores_or_traps_term() {
    cancel_escape(
        |p, _| {
            let p = p.display();
            format!(
                "sh -c 'trap \"\" TERM; echo $$ >> {p}; while :; do sleep 0.1; done' &
                 sh -c 'trap \"echo no\" TERM; echo $$ >> {p}; while :; do sleep 0.1; done' &
                 echo $$ >> {p}; wait"
            )
        },
        3,
        "escalating",
    );
}

#[test]
fn background_child_holding_stdout_after_the_wrapper_exits() {
    // The wrapper exits at once: the cell resolves after the drain bound
    // with the child as a leftover, still owned; cancel kills it.
    cancel_escape(
        |p, _| format!("sleep 1000 & echo $! >> {}", p.display()),
        1,
        "already_done",
    );
}

#[test]
fn background_child_holding_stdout_while_the_wrapper_runs() {
    cancel_escape(
        |p, _| {
            let p = p.display();
            format!("sh -c 'trap \"\" TERM; exec sleep 1000' & echo $! >> {p}; echo $$ >> {p}; sleep 1000")
        },
        2,
        "escalating",
    );
}

#[test]
fn setsid_double_fork_daemon() {
    cancel_escape(
        |p, scratch| {
            let p = p.display();
            let s = scratch.display();
            format!(
                "setsid sh -c '(sleep 1000 & echo $! >> {p}; sh {s}/ignore.sh {p}) &' ; echo $$ >> {p}; while :; do sleep 1; done"
            )
        },
        3,
        "escalating",
    );
}

#[test]
fn setsid_env_i_devnull_daemon() {
    cancel_escape(
        |p, scratch| {
            let p = p.display();
            let s = scratch.display();
            format!(
                "setsid env -i /bin/sh -c '/bin/sh {s}/ignore.sh {p} & exit 0' </dev/null >/dev/null 2>&1 & echo $$ >> {p}; while :; do sleep 1; done"
            )
        },
        2,
        "escalating",
    );
}

#[test]
fn setpgid_orphan() {
    cancel_escape(
        |p, _| {
            let p = p.display();
            format!(
                "(perl -e 'setpgrp(0,0); $SIG{{TERM}}=\"IGNORE\"; open(my $f, \">>\", $ARGV[0]); print $f \"$$\\n\"; close $f; sleep 1000' {p} &) ; echo $$ >> {p}; sleep 1000"
            )
        },
        2,
        "escalating",
    );
}

#[test]
fn command_with_its_own_exit_trap() {
    cancel_escape(
        |p, _| {
            let p = p.display();
            format!("trap 'sleep 1000' EXIT; trap '' TERM; echo $$ >> {p}; sleep 1000 & echo $! >> {p}; wait")
        },
        2,
        "escalating",
    );
}

#[test]
fn burst_of_fast_forks() {
    cancel_escape(
        |p, _| {
            let p = p.display();
            format!(
                "for j in 1 2 3; do (trap '' TERM; i=0; while [ $i -lt 400 ]; do sleep 1000 & echo $! >> {p}; i=$((i+1)); done; wait) & done; echo $$ >> {p}; wait"
            )
        },
        30,
        "escalating",
    );
}

#[test]
fn process_whose_comm_has_spaces_and_parens() {
    cancel_escape(
        |p, scratch| {
            let p = p.display();
            let exe = scratch.join("a b) c");
            let exe = exe.display();
            format!(
                "cp \"$(command -v perl)\" '{exe}'; '{exe}' -e '$SIG{{TERM}}=\"IGNORE\"; open(my $f, \">>\", $ARGV[0]); print $f \"$$\\n\"; close $f; sleep 1000' {p} & echo $$ >> {p}; wait"
            )
        },
        2,
        "escalating",
    );
}

#[test]
fn tombstone_before_submit_means_the_cell_never_runs() {
    let mut r = Root::new();
    r.spawn("k");
    let side = r.file("side-effect");
    assert_eq!(r.cancel("k", 1), "tombstoned");
    let s = r.submit("k", 1, format!("touch {}", side.display()).as_bytes(), 2000);
    assert_eq!(s["acceptance"], "cancelled_before_start", "{s}");
    assert_eq!(s["batch"]["done"], true);
    assert_eq!(
        outcome(s["batch"]["entries"].as_array().unwrap()),
        json!({"outcome": "cancelled"})
    );
    // a resend is answered the same way; the daemon moves on to cell 2.
    let again = r.submit("k", 1, format!("touch {}", side.display()).as_bytes(), 100);
    assert_eq!(again["acceptance"], "cancelled_before_start");
    let (o, _, _) = r.run("k", 2, "true");
    assert_eq!(o, json!({"outcome": "ok"}));
    assert!(!side.exists(), "the cancelled cell ran");
}

/// The escape only a cgroup catches: a `setsid` + `env -i` daemon with its
/// stdio on /dev/null that ignores TERM, and then the cell's shim is
/// killed -9. The daemon is reparented away from the shim's tree (to the
/// kernel daemon), carries no marker, has a session of its own, and was
/// never reported as a leftover (the shim died first); the cell's cgroup
/// still holds it. The kernel's daemon finds it there and ends the cell
/// as a cancel does — TERM, KILL after the grace period — and only then
/// resolves it, with the shim's death as the error: no process of a
/// written-off cell runs on beside the next one.
#[test]
fn daemon_that_outlives_its_killed_shim_is_found_by_the_cell_cgroup() {
    if !tether_require::have(
        "daemon_that_outlives_its_killed_shim_is_found_by_the_cell_cgroup",
        tether_require::Need::Cgroup2,
    ) {
        return;
    }
    let mut r = Root::new();
    let id_a = r.spawn("a");
    let scratch = r.file("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    std::fs::write(
        scratch.join("ignore.sh"),
        "trap '' TERM\necho $$ >> \"$1\"\nwhile :; do sleep 1; done\n",
    )
    .unwrap();
    let pids = r.file("pids");
    let (p, s) = (pids.display(), scratch.display());
    let code = format!(
        "setsid env -i /bin/sh -c '/bin/sh {s}/ignore.sh {p} & exit 0' </dev/null >/dev/null 2>&1 & echo $$ >> {p}; while :; do sleep 1; done"
    );
    r.submit("a", 1, code.as_bytes(), 0);
    assert!(
        eventually(Duration::from_secs(20), || pids_in(&pids).len() >= 2),
        "the cell never registered its processes: {:?}",
        pids_in(&pids)
    );
    let (main, escaped) = {
        let v = pids_in(&pids);
        // The main shell writes its pid after starting the daemon; either
        // may land first.
        let main = *v
            .iter()
            .find(|p| session_of(**p) == Some(**p))
            .unwrap_or_else(|| panic!("no session leader among {v:?}"));
        let escaped = *v.iter().find(|p| **p != main).unwrap();
        (main, escaped)
    };
    let cell = r.path().join("kernels/a/cells/1");
    let group = std::fs::read_to_string(cell.join("cgroup"))
        .unwrap_or_else(|e| panic!("cgroup v2 is writable but the shim recorded no cgroup: {e}"));
    let group = group.trim_end().to_owned();
    let members = || -> Vec<u32> {
        std::fs::read_to_string(format!("{group}/cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.parse().ok())
            .collect()
    };
    assert!(members().contains(&escaped), "{:?}", members());
    let launch: serde_json::Value =
        serde_json::from_slice(&std::fs::read(cell.join("launch.json")).unwrap()).unwrap();
    let shim = launch["shim_pid"].as_u64().unwrap() as u32;
    assert!(!members().contains(&shim), "the shim is not a member");
    // Untraceable but for the cgroup (and, once the shim is dead, its
    // reparenting): no marker, a session that is not the cell's.
    let marker = format!("TETHER_CELL={}:1", r.nonce("a"));
    assert!(!procs_mentioning(&marker).contains(&escaped));
    assert_ne!(session_of(escaped), Some(main));

    let killed_at = std::time::Instant::now();
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &shim.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let entries = r.wait_done("a", 1);
    // It ignores TERM: only the KILL after the grace period (300 ms) ends
    // it, and the cell resolves after that, not when the shim died.
    assert!(
        killed_at.elapsed() >= Duration::from_millis(300),
        "resolved {:?} after the shim's death, within the grace period",
        killed_at.elapsed()
    );
    assert_eq!(
        outcome(&entries),
        json!({"outcome": "error", "message": tether_core::agent::daemon::SHIM_DIED}),
        "{entries:?}"
    );
    let survivors = || -> Vec<u32> {
        let mut s: Vec<u32> = pids_in(&pids).into_iter().filter(|p| alive(*p)).collect();
        s.extend(procs_mentioning(&marker));
        s.extend(procs_mentioning(&scratch.display().to_string()));
        s.extend(procs_mentioning(&pids.display().to_string()));
        s.sort();
        s.dedup();
        s
    };
    assert_eq!(survivors(), Vec::<u32>::new(), "ran on after the result");
    assert!(!alive(shim));
    assert!(!entries.iter().any(|e| e["kind"] == "leftovers"));
    assert!(
        eventually(Duration::from_secs(20), || !Path::new(&group).exists()),
        "the cell's empty cgroup {group} was not removed"
    );
    assert_eq!(r.cancel("a", 1), "already_done");
    assert_eq!(r.probe("a", Some(&id_a))["status"], "alive");
    // The next cell runs, in the state before the written-off one, and
    // says so.
    let (o, out, entries) = r.run("a", 2, "echo still here");
    assert_eq!(o, json!({"outcome": "ok"}));
    assert_eq!(out, b"still here\n");
    let err = String::from_utf8(stderr(&entries)).unwrap();
    assert!(
        err.contains("the shell state cell 1 reached was not kept (its shim was killed"),
        "{err}"
    );
}

/// A shell cell's shim killed -9 mid-cell, in any world (with or without
/// a writable cgroup v2): the processes of the cell are found by its
/// session (a child that ignores TERM), its marker (one that left the
/// session) and the shim's orphans, which came back to the kernel's
/// daemon (a `setsid env -i` daemon: nothing else names it where there is
/// no cgroup). All are dead when the cell resolves, the error says the
/// shim died, and the kernel runs its next cell.
#[test]
fn a_cell_whose_shim_is_killed_resolves_once_everything_it_started_is_gone() {
    let mut r = Root::new();
    r.spawn("a");
    let scratch = r.file("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    std::fs::write(
        scratch.join("ignore.sh"),
        "trap '' TERM\necho $$ >> \"$1\"\nwhile :; do sleep 1; done\n",
    )
    .unwrap();
    let pids = r.file("pids");
    let (p, s) = (pids.display(), scratch.display());
    let code = format!(
        "/bin/sh {s}/ignore.sh {p} & setsid /bin/sh {s}/ignore.sh {p} & setsid env -i /bin/sh -c '/bin/sh {s}/ignore.sh {p} & exit 0' </dev/null >/dev/null 2>&1 & while :; do sleep 1; done"
    );
    r.submit("a", 1, code.as_bytes(), 0);
    assert!(
        eventually(Duration::from_secs(20), || pids_in(&pids).len() >= 3),
        "the cell never registered its processes: {:?}",
        pids_in(&pids)
    );
    let cell = r.path().join("kernels/a/cells/1");
    let launch: serde_json::Value =
        serde_json::from_slice(&std::fs::read(cell.join("launch.json")).unwrap()).unwrap();
    let shim = launch["shim_pid"].as_u64().unwrap() as u32;
    assert!(std::process::Command::new("kill")
        .args(["-KILL", &shim.to_string()])
        .status()
        .unwrap()
        .success());
    let entries = r.wait_done("a", 1);
    let marker = format!("TETHER_CELL={}:1", r.nonce("a"));
    let mut survivors: Vec<u32> = pids_in(&pids).into_iter().filter(|p| alive(*p)).collect();
    survivors.extend(procs_mentioning(&marker));
    survivors.extend(procs_mentioning(&scratch.display().to_string()));
    assert_eq!(survivors, Vec::<u32>::new(), "ran on after the result");
    assert_eq!(
        outcome(&entries),
        json!({"outcome": "error", "message": tether_core::agent::daemon::SHIM_DIED}),
        "{entries:?}"
    );
    let (o, out, _) = r.run("a", 2, "echo next");
    assert_eq!(o, json!({"outcome": "ok"}));
    assert_eq!(out, b"next\n");
}

/// The cell's stderr bytes.
fn stderr(entries: &[serde_json::Value]) -> Vec<u8> {
    let mut out = Vec::new();
    for e in entries
        .iter()
        .filter(|e| e["kind"] == "output" && e["stream"] == "stderr")
    {
        let b: tether_core::bytes::Bytes = serde_json::from_value(e["data"].clone()).unwrap();
        out.extend(b.0);
    }
    out
}

/// The session of `pid`, from procfs.
fn session_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .nth(3)?
        .parse()
        .ok()
}

/// A cell acknowledged while its cgroup still holds a process that left
/// the shim's tree: the cell's directory goes, the cgroup is kept in a
/// leftovers record, and shutdown kills the process and removes the
/// cgroup (no empty cgroup is left behind). The cell completed, leaving
/// a `setsid env -i` daemon (a reported leftover, which may run on), and
/// then its lingering shim was killed -9: the cgroup is all that names
/// the daemon now.
#[test]
fn shutdown_after_ack_kills_what_the_cgroup_holds_and_removes_it() {
    if !tether_require::have(
        "shutdown_after_ack_kills_what_the_cgroup_holds_and_removes_it",
        tether_require::Need::Cgroup2,
    ) {
        return;
    }
    let mut r = Root::new();
    r.spawn("a");
    let pids = r.file("pids");
    let p = pids.display();
    let code = format!(
        "setsid env -i /bin/sh -c 'echo $$ >> {p}; exec sleep 1000' </dev/null >/dev/null 2>&1 & while [ ! -s {p} ]; do sleep 0.05; done"
    );
    r.submit("a", 1, code.as_bytes(), 0);
    let entries = r.wait_done("a", 1);
    assert_eq!(outcome(&entries), json!({"outcome": "ok"}), "{entries:?}");
    let escaped = pids_in(&pids)[0];
    let left = entries.iter().find(|e| e["kind"] == "leftovers");
    assert!(
        left.is_some_and(|l| l["pids"].as_array().unwrap().contains(&json!(escaped))),
        "{entries:?}"
    );
    let cell = r.path().join("kernels/a/cells/1");
    let group = std::fs::read_to_string(cell.join("cgroup")).unwrap();
    let group = group.trim_end().to_owned();
    let launch: serde_json::Value =
        serde_json::from_slice(&std::fs::read(cell.join("launch.json")).unwrap()).unwrap();
    let shim = launch["shim_pid"].as_u64().unwrap().to_string();
    assert!(std::process::Command::new("kill")
        .args(["-KILL", &shim])
        .status()
        .unwrap()
        .success());
    r.wait_done("a", 1);
    r.op(json!({"ack": {"kernel": "a", "seq": 1}}));
    assert!(!cell.exists(), "the acknowledged cell's directory is gone");
    assert!(alive(escaped));
    let kept = std::fs::read_to_string(r.path().join("kernels/a/leftovers/1.json")).unwrap();
    assert!(kept.contains(&group), "{kept}");
    r.op(json!({"shutdown": {"kernel": "a"}}));
    assert!(
        eventually(Duration::from_secs(20), || !alive(escaped)),
        "shutdown left {escaped} alive"
    );
    assert!(!Path::new(&group).exists(), "{group} was left behind");
}

/// A cell's `setsid env -i` daemon (no marker, its own session) comes
/// back to the cell's shim, a subreaper, when its parent exits. The
/// kernel daemon is killed -9, then the shim: the daemon goes to PID 1,
/// and without a cgroup nothing but the shim's record of what was
/// reparented to it (`leftovers/orphan-<pid>.json`) still names it;
/// shutdown ends it (shim_killed_escapes seed 102038 in the simulation).
#[test]
fn shutdown_ends_a_daemon_reparented_to_a_shim_killed_after_its_kernel_daemon() {
    let mut r = Root::new();
    r.spawn("a");
    let scratch = r.file("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    std::fs::write(
        scratch.join("ignore.sh"),
        "trap '' TERM\necho $$ >> \"$1\"\nwhile :; do sleep 1; done\n",
    )
    .unwrap();
    let pids = r.file("pids");
    let (p, s) = (pids.display(), scratch.display());
    let code = format!(
        "setsid env -i /bin/sh -c '/bin/sh {s}/ignore.sh {p} & exit 0' </dev/null >/dev/null 2>&1 & while :; do sleep 1; done"
    );
    r.submit("a", 1, code.as_bytes(), 0);
    assert!(
        eventually(Duration::from_secs(20), || pids_in(&pids).len() == 1),
        "the cell never started its daemon"
    );
    let escaped = pids_in(&pids)[0];
    let record = r
        .path()
        .join(format!("kernels/a/leftovers/orphan-{escaped}.json"));
    assert!(
        eventually(Duration::from_secs(10), || record.exists()),
        "the shim never recorded {escaped}"
    );
    let identity: serde_json::Value =
        serde_json::from_slice(&std::fs::read(r.path().join("kernels/a/identity.json")).unwrap())
            .unwrap();
    let launch: serde_json::Value = serde_json::from_slice(
        &std::fs::read(r.path().join("kernels/a/cells/1/launch.json")).unwrap(),
    )
    .unwrap();
    for pid in [&identity["pid"], &launch["shim_pid"]] {
        let pid = pid.as_u64().unwrap().to_string();
        assert!(std::process::Command::new("kill")
            .args(["-KILL", &pid])
            .status()
            .unwrap()
            .success());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(alive(escaped), "nothing ended it yet");
    r.op(json!({"shutdown": {"kernel": "a"}}));
    assert!(
        eventually(Duration::from_secs(20), || !alive(escaped)),
        "shutdown left {escaped} alive"
    );
}
