//! One `tether` drives a kernel at a time (the record's lock), through the
//! real binary and real agents: two runs started together, `--wait`,
//! `cancel` of a kernel another `tether` drives, a corrupt record.

mod common;

use common::{alive, finish, show, text, wait_bounded, World, BOUND};
use std::path::Path;
use std::process::{Child, Output};
use std::time::Instant;

const BUSY: i32 = 16;

/// A cell that appends `label` to `log`, then holds the kernel until the
/// file `go` exists (the test creates it), then appends `label-end`.
fn held_cell(label: &str, log: &Path, go: &Path) -> String {
    format!(
        "echo {label} >> {log}; while [ ! -e {go} ]; do sleep 0.01; done; echo {label}-end >> {log}",
        log = log.display(),
        go = go.display()
    )
}

/// Waits until one of `a`, `b` exits; returns its index.
fn first_to_exit(a: &mut Child, b: &mut Child) -> usize {
    let start = Instant::now();
    loop {
        if a.try_wait().unwrap().is_some() {
            return 0;
        }
        if b.try_wait().unwrap().is_some() {
            return 1;
        }
        assert!(start.elapsed() < BOUND, "neither tether exited");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

fn record(w: &World, kernel: &str) -> serde_json::Value {
    let dir = std::fs::read_dir(w.state.path().join("tether"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let bytes = std::fs::read(dir.join(format!("{kernel}.json"))).unwrap();
    serde_json::from_slice(&bytes)
        .unwrap_or_else(|e| panic!("the record is not JSON ({e}): {}", text(&bytes)))
}

/// Two `tether run` on one kernel started together, 20 times: every time
/// one runs and the other is refused at once with 16, the record stays
/// valid JSON with nothing unresolved, and the next run works.
#[test]
fn of_two_runs_started_together_one_runs_and_the_other_is_refused() {
    let w = World::new();
    let log = w.root.path().join("runs.log");
    let mut expected = String::new();
    for i in 0..20 {
        let go = w.root.path().join(format!("go-{i}"));
        let codes = [
            held_cell(&format!("a{i}"), &log, &go),
            held_cell(&format!("b{i}"), &log, &go),
        ];
        let mut a = w.spawn(&["run", "--kernel", "k", &codes[0]]);
        let mut b = w.spawn(&["run", "--kernel", "k", &codes[1]]);
        let refused = first_to_exit(&mut a, &mut b);
        let (loser, winner) = if refused == 0 { (a, b) } else { (b, a) };
        let label = if refused == 0 { "b" } else { "a" };
        let lost: Output = finish(loser, "the refused tether run");
        assert_eq!(lost.status.code(), Some(BUSY), "round {i}: {}", show(&lost));
        let err = text(&lost.stderr);
        assert!(
            err.contains("kernel k is busy"),
            "round {i}: {}",
            show(&lost)
        );
        std::fs::write(&go, b"").unwrap();
        let won = finish(winner, "the running tether run");
        assert_eq!(won.status.code(), Some(0), "round {i}: {}", show(&won));
        expected.push_str(&format!("{label}{i}\n{label}{i}-end\n"));
        // Exactly one cell ran, once.
        assert_eq!(
            std::fs::read_to_string(&log).unwrap(),
            expected,
            "round {i}"
        );
        let rec = record(&w, "k");
        assert_eq!(rec["cells"], serde_json::json!([]), "round {i}: {rec}");
    }
    let out = w.run("k", "echo next");
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert_eq!(text(&out.stdout), "next\n", "{}", show(&out));
}

/// The refusal names the running cell and the tether that runs it.
#[test]
fn the_refusal_names_the_running_cell() {
    let w = World::new();
    let (mut child, _) = w.spawn_sleeping_cell("k");
    let out = w.run("k", "echo too soon");
    assert_eq!(out.status.code(), Some(BUSY), "{}", show(&out));
    let err = text(&out.stderr);
    assert!(
        err.contains("cell 1 is running in another tether")
            && err.contains(&format!("pid {}", child.id())),
        "{}",
        show(&out)
    );
    // --json names tether's own condition on its last line.
    let out = w.tether(&["--json", "run", "--kernel", "k", "echo too soon"]);
    assert_eq!(out.status.code(), Some(BUSY), "{}", show(&out));
    let last: serde_json::Value =
        serde_json::from_str(text(&out.stdout).lines().last().unwrap_or("")).unwrap();
    assert_eq!(
        (&last["event"], &last["failure"]),
        (&serde_json::json!("failure"), &serde_json::json!("busy")),
        "{last}"
    );
    let _ = child.kill();
    let _ = wait_bounded(&mut child, "the sleeping tether run");
}

/// `run --wait` queues behind the running `tether` instead of being
/// refused, and runs after it.
#[test]
fn run_wait_queues_behind_the_running_tether() {
    let w = World::new();
    let log = w.root.path().join("runs.log");
    let go = w.root.path().join("go");
    let mut first = w.spawn(&["run", "--kernel", "k", &held_cell("first", &log, &go)]);
    common::wait_for_file(&log);
    let code = format!("echo second >> {}; echo queued", log.display());
    let second = w.spawn(&["run", "--wait", "--kernel", "k", &code]);
    std::fs::write(&go, b"").unwrap();
    let status = wait_bounded(&mut first, "the first tether run");
    assert_eq!(status.code(), Some(0));
    let out = finish(second, "tether run --wait");
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert_eq!(text(&out.stdout), "queued\n", "{}", show(&out));
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        "first\nfirst-end\nsecond\n"
    );
}

/// `tether cancel` of a kernel another `tether` drives interrupts that
/// tether (its cell is cancelled: 130), and the kernel stays.
#[test]
fn cancel_reaches_the_tether_that_drives_the_kernel() {
    let w = World::new();
    assert_eq!(w.run("k", "export KEEP=1").status.code(), Some(0));
    let (child, sleeper) = w.spawn_sleeping_cell("k");
    let out = w.tether(&["cancel", "--kernel", "k"]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let ran = finish(child, "the cancelled tether run");
    assert_eq!(ran.status.code(), Some(130), "{}", show(&ran));
    assert!(!alive(sleeper), "the cell's sleep {sleeper} survived");
    let out = w.run("k", "echo $KEEP");
    assert_eq!(text(&out.stdout), "1\n", "{}", show(&out));
}

/// A truncated or corrupt record is a clear error naming the file, 69,
/// never a panic; the record put back, the kernel works again.
#[test]
fn a_corrupt_record_is_exit_69_naming_the_file() {
    let w = World::new();
    assert_eq!(w.run("k", "true").status.code(), Some(0));
    let dir = std::fs::read_dir(w.state.path().join("tether"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let path = dir.join("k.json");
    let bytes = std::fs::read(&path).unwrap();
    for broken in [&bytes[..bytes.len() / 2], b"", b"\xff\xfe not json"] {
        std::fs::write(&path, broken).unwrap();
        for args in [&["run", "--kernel", "k", "true"][..], &["status"][..]] {
            let out = w.tether(args);
            assert_eq!(out.status.code(), Some(69), "{args:?}: {}", show(&out));
            let err = text(&out.stderr);
            assert!(
                err.contains(&path.display().to_string()) && !err.contains("panicked"),
                "{args:?}: {}",
                show(&out)
            );
        }
    }
    std::fs::write(&path, &bytes).unwrap();
    let out = w.run("k", "echo again");
    assert_eq!(text(&out.stdout), "again\n", "{}", show(&out));
}
