//! A cancel resolves when its escalation is over, through the real
//! `tether` binary and a real agent: a background child that ignores TERM
//! is dead (KILLed at the end of the grace period) by the time `tether
//! run` reports the cell cancelled, and nothing is reported as left over.

mod common;

use common::{alive, finish, first_line, kill, show, text, wait_for_file, World};
use std::time::{Duration, Instant};

/// The cell starts a TERM-ignoring child listening on nothing in
/// particular (a `sleep`), then waits in the foreground; Ctrl-C cancels
/// it. When `tether run` exits the child is gone, and the cancel took the
/// grace period (2 s): it waited for KILL.
#[test]
fn a_cancel_resolves_after_the_term_ignoring_child_is_dead() {
    let w = World::new();
    assert_eq!(w.run("k", "export KEEP=1").status.code(), Some(0));
    let pidfile = w.root.path().join("child.pid");
    let code = format!(
        "sh -c 'trap \"\" TERM; echo $$ > {}; exec sleep 300' & echo started; sleep 100",
        pidfile.display()
    );
    let mut child = w.spawn(&["run", "--kernel", "k", &code]);
    let (line, stdout) = first_line(&mut child);
    assert_eq!(line, "started\n");
    wait_for_file(&pidfile);
    let ignorer: u32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let start = Instant::now();
    kill("INT", child.id());
    drop(stdout);
    let out = finish(child, "tether run after ctrl-c");
    let took = start.elapsed();
    // Checked before anything else can run: at resolution it is gone.
    let survived = alive(ignorer);
    assert_eq!(out.status.code(), Some(130), "{}", show(&out));
    assert!(
        !survived,
        "the TERM-ignoring child {ignorer} outlived the cancel's resolution"
    );
    assert!(
        took >= Duration::from_millis(1500),
        "resolved in {took:?}, before the grace period's KILL"
    );
    assert!(
        !text(&out.stderr).contains("left processes running"),
        "{}",
        show(&out)
    );
    let out = w.run("k", "echo $KEEP");
    assert_eq!(text(&out.stdout), "1\n", "{}", show(&out));
}
