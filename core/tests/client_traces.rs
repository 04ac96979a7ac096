//! Snapshots of the effect/event traces of the canonical flows. Every
//! value in them is deterministic (seeded nonces and request ids, virtual
//! time), so nothing is redacted.

mod support;

use support::{kname, Harness, Net};
use tether_core::client::Client;
use tether_core::protocol::{Lang, OpKind};

#[test]
fn happy_path() {
    let mut h = Harness::new(100);
    h.open("k", Lang::Shell);
    let cell = h.run("k", "out hello\ntick\nerr careful\nout world", None);
    h.settle();
    assert!(h.output(&cell).contains("world"));
    insta::assert_snapshot!(h.trace);
}

#[test]
fn cancel_before_the_submit_reply() {
    let mut h = Harness::new(101);
    h.open("k", Lang::Shell);
    h.settle();
    h.net = Net::Down;
    let cell = h.run("k", "out never", None);
    h.net = Net::Up;
    h.client.cancel(&cell, h.now);
    h.settle();
    insta::assert_snapshot!(h.trace);
}

#[test]
fn drop_during_wait_then_resume_in_a_new_client() {
    let mut h = Harness::new(102);
    h.open("k", Lang::Python);
    let cell = h.run("k", "out 1\ntick\nout 2\ntick\nout 3", None);
    h.run_until(|h| h.output(&cell) == "1\n");
    // The client process dies here; only its persisted record survives.
    let record = h.records[&kname("k")].clone();
    let mut h2 = Harness::with(Client::new(support::config(), 103), h.agent.clone());
    h2.now = h.now;
    h2.client.resume(record, false, h2.now);
    h2.settle();
    let trace = format!(
        "{}--- the client process dies; a new one resumes from the record ---\n{}",
        h.trace, h2.trace
    );
    insta::assert_snapshot!(trace);
}

#[test]
fn submit_finds_a_replaced_pid() {
    // No probe first: the submit carries the recorded identity and the
    // agent answers with the probe's verdict instead of recording the cell.
    let mut h = Harness::new(104);
    h.open("k", Lang::Shell);
    h.settle();
    let record = h.records[&kname("k")].clone();
    h.agent.restart_with_pid_reuse(&kname("k"));
    let mut h2 = Harness::with(Client::new(support::config(), 105), h.agent.clone());
    h2.client.resume(record, false, h2.now);
    h2.drain();
    h2.run("k", "out fresh", None);
    h2.settle();
    insta::assert_snapshot!(h2.trace);
}

#[test]
fn warm_cells_cost_one_exec_each() {
    // Two cells in one client, then a new client process (from the record)
    // runs a third: every warm cell is one submit, which carries the
    // expected daemon and the previous cell's acknowledgement. The last
    // acknowledgement goes alone once the kernel has been idle for
    // `ack_delay`.
    let mut h = Harness::new(106);
    h.open("k", Lang::Shell);
    h.settle();
    h.line("--- warm ---".into());
    h.run("k", "out one", None);
    h.settle();
    h.run("k", "out two", None);
    h.settle();
    let record = h.records[&kname("k")].clone();
    let mut h2 = Harness::with(Client::new(support::config(), 107), h.agent.clone());
    h2.now = h.now;
    h2.line("--- a new client process, from the record ---".into());
    h2.client.resume(record, false, h2.now);
    h2.drain();
    h2.run("k", "out three", None);
    h2.settle();
    h2.line("--- idle ---".into());
    h2.run_until(|h| h.sent(OpKind::Ack) == 1 && h.pending.is_empty());
    let trace = format!("{}{}", h.trace, h2.trace);
    insta::assert_snapshot!(trace);
}
