//! Snapshots of the effect/event traces of the canonical flows. Every
//! value in them is deterministic (seeded nonces and request ids, virtual
//! time), so nothing is redacted.

mod support;

use support::{kname, Harness, Net};
use tether_core::client::Client;
use tether_core::protocol::Lang;

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
fn probe_finds_a_replaced_pid() {
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
