//! Tool calls in the client state machine: the event, the answer as an
//! input, the wait that carries it, and what a resumed client does.

mod support;

use support::{kname, Harness};
use tether_core::client::{CellKey, Client, Event};
use tether_core::protocol::{CallReply, CellOutcome, Lang, Op};

fn calls(h: &Harness) -> Vec<(CellKey, String, String)> {
    h.events
        .iter()
        .filter_map(|e| match e {
            Event::ToolCall { cell, id, name, .. } => {
                Some((cell.clone(), id.clone(), name.clone()))
            }
            _ => None,
        })
        .collect()
}

fn ok(v: serde_json::Value) -> CallReply {
    CallReply::Ok { value: v }
}

fn waits_carrying(h: &Harness, id: &str) -> usize {
    h.ops
        .values()
        .filter(|op| matches!(op, Op::Wait { answers, .. } if answers.iter().any(|a| a.id == id)))
        .count()
}

fn fake_cell<'a>(h: &'a Harness, cell: &CellKey) -> &'a support::FakeCell {
    &h.agent.kernels[&cell.kernel].cells[&cell.seq.0]
}

#[test]
fn a_call_is_emitted_once_and_its_answer_rides_on_the_next_wait() {
    let mut h = Harness::new(1);
    h.open("k", Lang::Shell);
    let cell = h.run("k", "call search\nout after", None);
    h.settle();
    assert_eq!(
        calls(&h),
        vec![(cell.clone(), "c1".into(), "search".into())]
    );
    assert_eq!(h.outcome(&cell), None, "the cell waits for the answer");
    assert!(
        h.pending.is_empty(),
        "no wait goes out before the answer (it would long-poll without it)"
    );
    let waits_before = h.sent(tether_core::protocol::OpKind::Wait);
    h.client
        .answer_call(&cell, "c1", ok(serde_json::json!({"hits": 3})), h.now);
    h.drain();
    // Kept in the record before it is sent.
    let record = &h.records[&kname("k")];
    let rec = record.cells.iter().find(|c| c.seq == cell.seq).unwrap();
    assert_eq!(
        rec.calls["c1"].answer,
        Some(ok(serde_json::json!({"hits": 3})))
    );
    h.settle();
    assert_eq!(h.outcome(&cell), Some(CellOutcome::Ok));
    assert_eq!(h.output(&cell), "after\n");
    assert_eq!(
        h.sent(tether_core::protocol::OpKind::Wait),
        waits_before + 1,
        "one wait per call round trip: it carries the answer and long-polls"
    );
    assert_eq!(waits_carrying(&h, "c1"), 1);
    assert_eq!(fake_cell(&h, &cell).answers.len(), 1);
    assert!(h
        .events
        .iter()
        .any(|e| matches!(e, Event::ToolAnswered { id, .. } if id == "c1")));
    assert_eq!(calls(&h).len(), 1, "emitted once");
}

#[test]
fn a_second_answer_and_an_answer_to_an_unknown_call_change_nothing() {
    let mut h = Harness::new(2);
    h.open("k", Lang::Shell);
    let cell = h.run("k", "call a\nhang", None);
    h.settle();
    h.client.answer_call(&cell, "c1", ok(1.into()), h.now);
    h.client.answer_call(&cell, "c1", ok(2.into()), h.now);
    h.client.answer_call(&cell, "nope", ok(3.into()), h.now);
    h.drain();
    let notes: Vec<&String> = h
        .events
        .iter()
        .filter_map(|e| match e {
            Event::Note { text, .. } => Some(text),
            _ => None,
        })
        .collect();
    assert!(
        notes.iter().any(|t| t.contains("answered already")),
        "{notes:?}"
    );
    assert!(
        notes.iter().any(|t| t.contains("no such call")),
        "{notes:?}"
    );
    h.run_until(|h| {
        h.events
            .iter()
            .any(|e| matches!(e, Event::ToolAnswered { .. }))
    });
    assert_eq!(fake_cell(&h, &cell).answers["c1"], ok(1.into()));
    // Delivered: the record no longer carries the answer.
    h.drain();
    let rec = h.records[&kname("k")]
        .cells
        .iter()
        .find(|c| c.seq == cell.seq)
        .unwrap()
        .calls["c1"]
        .clone();
    assert!(rec.delivered && rec.answer.is_none(), "{rec:?}");
}

#[test]
fn a_result_over_the_limit_goes_as_an_error() {
    let mut h = Harness::new(3);
    h.open("k", Lang::Shell);
    let cell = h.run("k", "call big", None);
    h.settle();
    let big = "x".repeat(tether_core::protocol::calls::MAX_RESULT + 1);
    h.client.answer_call(&cell, "c1", ok(big.into()), h.now);
    h.settle();
    assert!(matches!(
        &fake_cell(&h, &cell).answers["c1"],
        CallReply::Error { message } if message.contains("over the limit")
    ));
}

#[test]
fn a_resumed_client_resends_a_kept_answer_and_asks_again_only_for_unanswered_calls() {
    let mut h = Harness::new(4);
    h.open("k", Lang::Shell);
    let cell = h.run("k", "call one\ncall two\nout end", None);
    h.settle();
    // Answered and persisted; the wait that carries it ran, but its reply
    // is lost with the client.
    h.client.answer_call(&cell, "c1", ok("first".into()), h.now);
    h.drain();
    h.pending.clear();
    let record = h.records[&kname("k")].clone();
    let mut h2 = Harness::with(Client::new(support::config(), 40), h.agent.clone());
    h2.now = h.now;
    h2.client.resume(record, false, h2.now);
    h2.settle();
    assert!(
        calls(&h2).iter().all(|(_, id, _)| id != "c1"),
        "the answered call is not asked again: {:?}",
        calls(&h2)
    );
    assert_eq!(
        waits_carrying(&h2, "c1"),
        1,
        "its kept answer is re-sent until the journal confirms it"
    );
    assert_eq!(calls(&h2), vec![(cell.clone(), "c2".into(), "two".into())]);
    // This client dies before answering: the next one asks again.
    let record = h2.records[&kname("k")].clone();
    let mut h3 = Harness::with(Client::new(support::config(), 41), h2.agent.clone());
    h3.now = h2.now;
    h3.client.resume(record, false, h3.now);
    h3.drain();
    assert_eq!(calls(&h3), vec![(cell.clone(), "c2".into(), "two".into())]);
    h3.client
        .answer_call(&cell, "c2", ok("second".into()), h3.now);
    h3.settle();
    assert_eq!(h3.outcome(&cell), Some(CellOutcome::Ok));
    let fake = fake_cell(&h3, &cell);
    assert_eq!(fake.answers["c1"], ok("first".into()));
    assert_eq!(fake.answers["c2"], ok("second".into()));
    // The re-sent answer found c1 answered: a no-op on the sandbox.
    assert_eq!(fake.answers_refused, 1);
}

#[test]
fn cancel_while_a_call_waits_resolves_the_cell() {
    let mut h = Harness::new(5);
    h.open("k", Lang::Shell);
    let cell = h.run("k", "call slow\nout never", None);
    h.settle();
    assert_eq!(calls(&h).len(), 1);
    h.client.cancel(&cell, h.now);
    h.settle();
    assert_eq!(h.outcome(&cell), Some(CellOutcome::Cancelled));
    assert_eq!(h.output(&cell), "");
}

#[test]
fn a_call_never_answered_holds_the_cells_waits_back_one_long_poll_at_most() {
    // tool_calls with a tool the host never answers: the caller gave up at
    // its deadline and the cell went on to its end, but the client held
    // the cell's waits back for the answer for ever: no output, no end.
    let mut h = Harness::new(6);
    h.open("k", Lang::Shell);
    let cell = h.run("k", "abandon slow\ntick\nout after", None);
    h.settle();
    assert_eq!(calls(&h).len(), 1);
    assert_eq!(h.client.calls_awaiting_frontend(), 1);
    assert!(h.pending.is_empty(), "the wait is held back for the answer");
    let held_at = h.now;
    let wait = std::time::Duration::from_millis(h.client.config().wait_ms);
    assert!(h.run_until(|h| h.outcome(&cell).is_some()), "{}", h.trace);
    assert_eq!(h.outcome(&cell), Some(CellOutcome::Ok));
    assert_eq!(h.output(&cell), "after\n");
    assert!(
        h.now >= held_at + wait,
        "held back one long-poll bound from the call"
    );
    // The cell left the record: its call, never answered, is forgotten
    // (the client does not keep every abandoned call of a long session).
    assert_eq!(h.client.calls_awaiting_frontend(), 0);
    // The answer, late, changes nothing (a note says so).
    h.client.answer_call(&cell, "c1", ok(1.into()), h.now);
    h.drain();
    assert_eq!(h.outcome(&cell), Some(CellOutcome::Ok));
}

#[test]
fn a_call_left_unanswered_holds_back_no_later_calls_answer() {
    // tool_calls seed 102938 (long run shard 4/5 at 8c0d73b): the stalled
    // call, still unanswered, held the wait back after a later call had
    // its answer, so the answer went only with the cancel's wait and
    // reached the cell after its end.
    let mut h = Harness::new(7);
    h.open("k", Lang::Shell);
    let cell = h.run("k", "abandon slow\ntick\ncall fast\nout after", None);
    h.settle();
    assert!(
        h.run_until(|h| calls(h).len() == 2 && h.pending.is_empty()),
        "{}",
        h.trace
    );
    let (_, fast, _) = calls(&h)[1].clone();
    let waits_before = h.sent(tether_core::protocol::OpKind::Wait);
    h.client.answer_call(&cell, &fast, ok(1.into()), h.now);
    h.drain();
    assert_eq!(
        h.sent(tether_core::protocol::OpKind::Wait),
        waits_before + 1,
        "the answer goes at once, whatever the older call"
    );
    h.settle();
    assert_eq!(h.outcome(&cell), Some(CellOutcome::Ok));
    assert_eq!(h.output(&cell), "after\n");
}

#[test]
fn a_kernel_resumed_in_the_same_process_does_not_ask_its_calls_again() {
    // tool_calls seeds 3, 5 and 37 at 891ab90: a resume replaces the
    // kernel with its record, and replacing it forgot the calls this
    // process had asked, so the frontend was asked again and the tool ran
    // twice (the explorer's `tool_handler_repeated`).
    let mut h = Harness::new(8);
    h.open("k", Lang::Shell);
    let cell = h.run("k", "call one\nout end", None);
    h.settle();
    assert_eq!(calls(&h).len(), 1);
    let record = h.records[&kname("k")].clone();
    h.client.resume(record, false, h.now);
    h.drain();
    assert_eq!(calls(&h).len(), 1, "asked again: {:?}", calls(&h));
    assert_eq!(h.client.calls_awaiting_frontend(), 1);
    h.client.answer_call(&cell, "c1", ok(1.into()), h.now);
    h.settle();
    assert_eq!(h.outcome(&cell), Some(CellOutcome::Ok));
    assert_eq!(h.client.calls_awaiting_frontend(), 0);
}
