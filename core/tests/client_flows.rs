//! One test per flow of the client state machine, driven against the fake
//! agent of `support`.

mod support;

use std::time::Duration;
use support::{kname, Harness, Net};
use tether_core::bytes::Bytes;
use tether_core::client::{CellKey, Client, ClientError, Effect, Event, KernelRecord};
use tether_core::ids::CellSeq;
use tether_core::protocol::{Acceptance, CellOutcome, Lang, OpKind};
use tether_core::time::Timestamp;

fn state_lost(h: &Harness) -> usize {
    h.events
        .iter()
        .filter(|e| matches!(e, Event::StateLost { .. }))
        .count()
}

#[test]
fn spawn_installs_the_agent_on_first_use_then_runs_the_cell() {
    let mut h = Harness::new(1);
    h.agent.installed = false;
    h.open("k", Lang::Shell);
    let cell = h.run("k", "out hi", None);
    h.settle();
    assert_eq!(h.outcome(&cell), Some(CellOutcome::Ok));
    assert_eq!(h.output(&cell), "hi\n");
    assert_eq!(h.sent(OpKind::Install), 1);
    assert_eq!(
        h.sent(OpKind::Spawn),
        2,
        "spawn is sent again after the install"
    );
    assert!(h
        .events
        .iter()
        .any(|e| matches!(e, Event::KernelReady { fresh: true, .. })));
}

#[test]
fn the_record_is_persisted_before_the_first_submit() {
    let mut h = Harness::new(2);
    h.open("k", Lang::Shell);
    h.run_until(|h| {
        h.events
            .iter()
            .any(|e| matches!(e, Event::KernelReady { .. }))
    });
    let cell = h.run("k", "out a", None);
    let persist = h.effects.iter().position(|e| matches!(e, Effect::Persist(r) if r.cells.iter().any(|c| c.seq == cell.seq && c.submitted)));
    let submit = h
        .effects
        .iter()
        .position(|e| matches!(e, Effect::Exec { op, .. } if op.kind() == OpKind::Submit));
    assert!(persist.unwrap() < submit.unwrap());
    h.settle();
    let record = &h.records[&kname("k")];
    assert!(record.cells.is_empty(), "resolved cells leave the record");
    assert_eq!(
        record.acked,
        vec![cell.seq],
        "its acknowledgement waits in the record for the next submit"
    );
}

#[test]
fn acks_ride_on_the_next_submit_or_go_alone_when_the_kernel_stays_idle() {
    let mut h = Harness::new(20);
    h.open("k", Lang::Shell);
    h.settle();
    let one = h.run("k", "out 1", None);
    h.settle();
    assert!(h.agent.has_cell(&kname("k"), one.seq), "not acked yet");
    let two = h.run("k", "out 2", None);
    h.settle();
    assert!(
        !h.agent.has_cell(&kname("k"), one.seq),
        "the second submit acknowledged the first cell"
    );
    assert_eq!(h.sent(OpKind::Ack), 0);
    assert_eq!(h.sent(OpKind::Submit), 2);
    assert_eq!(h.records[&kname("k")].acked, vec![two.seq]);
    // Idle for ack_delay: the last acknowledgement goes on its own.
    h.run_until(|h| h.sent(OpKind::Ack) == 1 && h.pending.is_empty());
    assert!(!h.agent.has_cell(&kname("k"), two.seq));
    assert!(h.records[&kname("k")].acked.is_empty());
    assert!(h.now >= Timestamp(0) + support::config().ack_delay);
}

#[test]
fn a_recorded_kernel_is_not_probed_the_submit_checks_the_daemon() {
    let mut h = Harness::new(3);
    h.open("k", Lang::Shell);
    let first = h.run("k", "out 1", None);
    h.settle();
    let record = h.records[&kname("k")].clone();
    let mut h2 = Harness::with(Client::new(support::config(), 4), h.agent.clone());
    h2.client.resume(record, false, h2.now);
    h2.settle();
    assert!(h2.effects.is_empty() || h2.sent(OpKind::Probe) == 0);
    let cell = h2
        .client
        .run_cell(&kname("k"), Bytes::from("out 2"), None, h2.now)
        .unwrap();
    h2.settle();
    assert_eq!(h2.outcome(&cell), Some(CellOutcome::Ok));
    assert_eq!(h2.output(&cell), "2\n");
    assert_eq!(h2.sent(OpKind::Probe), 0);
    assert_eq!(h2.sent(OpKind::Spawn), 0);
    assert_eq!(h2.sent(OpKind::Submit), 1, "one exec for the warm cell");
    assert_eq!(state_lost(&h2), 0);
    assert!(
        !h2.agent.has_cell(&kname("k"), first.seq),
        "the submit carried the earlier process's acknowledgement"
    );
}

#[test]
fn a_resumed_cell_in_flight_is_still_probed_before_the_wait() {
    let mut h = Harness::new(30);
    h.open("k", Lang::Shell);
    let cell = h.run("k", "out a\ntick\nout b", None);
    h.run_until(|h| h.output(&cell) == "a\n");
    let record = h.records[&kname("k")].clone();
    let mut h2 = Harness::with(Client::new(support::config(), 31), h.agent.clone());
    h2.now = h.now;
    h2.client.resume(record, false, h2.now);
    h2.settle();
    let kinds: Vec<OpKind> = h2
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::Exec { op, .. } => Some(op.kind()),
            _ => None,
        })
        .collect();
    assert_eq!(kinds.first(), Some(&OpKind::Probe), "{}", h2.trace);
    assert_eq!(h2.sent(OpKind::Submit), 0, "resume waits, never resubmits");
    assert_eq!(h2.output(&cell), "b\n");
}

#[test]
fn submit_to_a_dead_daemon_reports_state_lost_and_runs_the_cell_in_a_fresh_one() {
    let mut h = Harness::new(5);
    h.open("k", Lang::Python);
    h.settle();
    let record = h.records[&kname("k")].clone();
    h.agent.kill_daemon(&kname("k"));
    let mut h2 = Harness::with(Client::new(support::config(), 6), h.agent.clone());
    h2.client.resume(record, false, h2.now);
    let key = h2
        .client
        .run_cell(&kname("k"), Bytes::from("out x"), None, h2.now)
        .unwrap();
    h2.settle();
    assert_eq!(state_lost(&h2), 1);
    assert_eq!(h2.sent(OpKind::Probe), 0, "the submit was the probe");
    assert!(h2
        .events
        .iter()
        .any(|e| matches!(e, Event::KernelReady { fresh: true, .. })));
    assert_eq!(
        h2.outcome(&key),
        Some(CellOutcome::Ok),
        "the cell the dead daemon refused runs in the fresh kernel"
    );
    assert_eq!(h2.agent.runs.values().sum::<u32>(), 1, "it ran once");
}

#[test]
fn submit_to_a_replaced_daemon_reports_state_lost_and_replacement() {
    let mut h = Harness::new(7);
    h.open("k", Lang::Shell);
    h.settle();
    let record = h.records[&kname("k")].clone();
    h.agent.restart_with_pid_reuse(&kname("k"));
    let mut h2 = Harness::with(Client::new(support::config(), 8), h.agent.clone());
    h2.client.resume(record, false, h2.now);
    let key = h2
        .client
        .run_cell(&kname("k"), Bytes::from("out y"), None, h2.now)
        .unwrap();
    h2.settle();
    assert_eq!(state_lost(&h2), 1);
    assert!(h2
        .events
        .iter()
        .any(|e| matches!(e, Event::KernelReplaced { .. })));
    let new = h2.records[&kname("k")].identity.clone().unwrap();
    assert_ne!(new.nonce, "someone-else");
    assert_eq!(h2.outcome(&key), Some(CellOutcome::Ok));
}

#[test]
fn a_cell_an_earlier_send_recorded_in_the_dead_daemon_is_lost_not_run_again() {
    let mut h = Harness::new(40);
    h.open("k", Lang::Shell);
    h.settle();
    // The submit runs but its reply is lost; the daemon dies before the
    // resend, which finds the cell recorded under its request id.
    h.net = Net::LoseReplies;
    let cell = h.run("k", "out once\ntick\nout more", None);
    h.run_until(|h| h.pending.is_empty());
    h.agent.kill_daemon(&kname("k"));
    h.net = Net::Up;
    h.settle();
    assert_eq!(state_lost(&h), 1, "{}", h.trace);
    assert!(
        matches!(h.outcome(&cell), Some(CellOutcome::Error { .. })),
        "{}",
        h.trace
    );
    assert_eq!(h.agent.runs.values().sum::<u32>(), 1, "never run again");
}

#[test]
fn a_cell_whose_reply_was_lost_is_not_run_again_on_a_replaced_sandbox() {
    // Found by the simulation (sim/races/resubmit-after-replaced-sandbox.json):
    // the submit runs but its reply is lost, then the sandbox is replaced,
    // so the resend finds no trace of the submission. It may have run: it
    // is reported lost, never run a second time on the fresh kernel.
    let mut h = Harness::new(43);
    h.open("k", Lang::Shell);
    h.settle();
    h.net = Net::LoseReplies;
    let cell = h.run("k", "out once", None);
    h.run_until(|h| h.pending.is_empty());
    h.agent.replace_sandbox();
    h.net = Net::Up;
    h.settle();
    assert_eq!(state_lost(&h), 1, "{}", h.trace);
    assert!(
        matches!(h.outcome(&cell), Some(CellOutcome::Error { .. })),
        "{}",
        h.trace
    );
    assert_eq!(h.agent.runs.values().sum::<u32>(), 1, "never run again");
    // The kernel works again for new cells.
    let next = h.run("k", "out next", None);
    h.settle();
    assert_eq!(h.outcome(&next), Some(CellOutcome::Ok), "{}", h.trace);
}

#[test]
fn a_cell_no_unanswered_send_recorded_runs_on_the_next_daemon_where_the_files_were_kept() {
    // shim_killed_escapes seed 101837: a send that reached nothing (or
    // whose cell was withdrawn) went unanswered; the daemon died; the
    // resend found no trace of the cell in files the sandbox kept, so it
    // never ran: it runs on the next daemon, not reported lost.
    let mut h = Harness::new(44);
    let (cell, _) = record_of_a_cell_sent_into_a_dead_daemon(&mut h);
    h.net = Net::Up;
    h.settle();
    assert_eq!(h.outcome(&cell), Some(CellOutcome::Ok), "{}", h.trace);
    assert_eq!(h.agent.runs.values().sum::<u32>(), 1, "run once");
}

/// A cell sent once to a daemon killed before, its submit lost on the
/// way: the record a resume starts from if the client process goes now.
fn record_of_a_cell_sent_into_a_dead_daemon(h: &mut Harness) -> (CellKey, KernelRecord) {
    h.open("k", Lang::Shell);
    h.settle();
    h.agent.kill_daemon(&kname("k"));
    h.net = Net::LoseRequests;
    let cell = h.run("k", "out once", None);
    h.run_until(|h| h.sent(OpKind::Submit) == 1 && h.pending.is_empty());
    let record = h.records[&kname("k")].clone();
    assert!(record.cells.iter().any(|c| c.submitted), "{record:?}");
    (cell, record)
}

#[test]
fn a_resumed_cell_the_dead_daemon_never_recorded_runs_on_the_next_daemon() {
    // shim_killed_escapes seed 101837, resumed: every send of the cell
    // went unanswered and the client wrote it off; the resume's probe
    // finds the daemon dead, and the agent, asked about the cell, says
    // the daemon never recorded it, in files the sandbox kept: it never
    // ran, so it runs on the next daemon instead of being reported lost.
    let mut h = Harness::new(45);
    let (cell, record) = record_of_a_cell_sent_into_a_dead_daemon(&mut h);
    let mut h2 = Harness::with(Client::new(support::config(), 46), h.agent.clone());
    h2.client.resume(record, false, h2.now);
    h2.settle();
    assert_eq!(h2.outcome(&cell), Some(CellOutcome::Ok), "{}", h2.trace);
    assert_eq!(h2.output(&cell), "once\n");
    assert_eq!(
        state_lost(&h2),
        1,
        "the kernel's state was lost all the same"
    );
    assert_eq!(h2.agent.runs.values().sum::<u32>(), 1, "run once");
}

#[test]
fn a_resumed_cell_of_a_replaced_sandbox_is_lost_never_run_again() {
    // The same, but the sandbox was replaced: no file tells whether the
    // lost daemon ran it, so it is reported lost and never run again.
    let mut h = Harness::new(47);
    let (cell, record) = record_of_a_cell_sent_into_a_dead_daemon(&mut h);
    h.agent.replace_sandbox();
    let mut h2 = Harness::with(Client::new(support::config(), 48), h.agent.clone());
    h2.client.resume(record, false, h2.now);
    h2.settle();
    assert!(
        matches!(h2.outcome(&cell), Some(CellOutcome::Error { .. })),
        "{}",
        h2.trace
    );
    assert_eq!(h2.agent.runs.values().sum::<u32>(), 0, "{}", h2.trace);
}

#[test]
fn a_cancelled_cell_the_dead_daemon_never_recorded_resolves_cancelled() {
    let mut h = Harness::new(42);
    h.open("k", Lang::Shell);
    h.settle();
    h.agent.kill_daemon(&kname("k"));
    h.net = Net::Down;
    let cell = h.run("k", "out never", None);
    h.client.cancel(&cell, h.now);
    h.drain();
    h.net = Net::Up;
    h.settle();
    assert_eq!(
        h.outcome(&cell),
        Some(CellOutcome::Cancelled),
        "{}",
        h.trace
    );
    assert_eq!(h.agent.runs.values().sum::<u32>(), 0, "{}", h.trace);
}

#[test]
fn probe_unreachable_is_unknown_never_state_lost_or_respawn() {
    let mut h = Harness::new(9);
    h.open("k", Lang::Shell);
    let cell = h.run("k", "out a\ntick\nout b", None);
    h.run_until(|h| {
        h.events
            .iter()
            .any(|e| matches!(e, Event::CellAccepted { .. }))
    });
    let record = h.records[&kname("k")].clone();
    let mut h2 = Harness::with(Client::new(support::config(), 10), h.agent.clone());
    h2.net = Net::Down;
    h2.client.resume(record, false, h2.now);
    h2.settle();
    assert!(matches!(
        h2.outcome(&cell),
        Some(CellOutcome::Unknown { .. })
    ));
    assert_eq!(state_lost(&h2), 0);
    assert_eq!(h2.sent(OpKind::Spawn), 0);
    assert!(
        !h2.effects.iter().any(|e| matches!(e, Effect::Forget(_))),
        "the record is kept"
    );
    assert_eq!(h2.client.record(&kname("k")).unwrap().cells.len(), 1);
    assert!(h2.now <= Timestamp(0) + Duration::from_secs(60) + support::config().exec_budget());
}

#[test]
fn output_is_delivered_in_order_exactly_once_across_dropped_replies() {
    let mut h = Harness::new(11);
    h.open("k", Lang::Shell);
    h.settle();
    // Lose the submit's reply (the op ran): the submit is re-sent with the
    // same request id and the agent does not run it again.
    h.net = Net::LoseReplies;
    let cell = h.run("k", "out 1\ntick\nout 2\ntick\nout 3\nexit 4", None);
    h.run_until(|h| h.pending.is_empty());
    h.net = Net::Up;
    h.settle();
    assert_eq!(h.output(&cell), "1\n2\n3\n", "{}", h.trace);
    assert_eq!(h.outcome(&cell), Some(CellOutcome::Exit { code: 4 }));
    assert_eq!(h.resolutions(&cell), 1);
    let rids: Vec<_> = h
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::Exec {
                op: tether_core::protocol::Op::Submit { submission, .. },
                ..
            } => Some((submission.request_id.clone(), submission.seq)),
            _ => None,
        })
        .collect();
    assert!(rids.windows(2).all(|w| w[0] == w[1]), "{rids:?}");
    assert_eq!(h.agent.runs.values().copied().collect::<Vec<_>>(), vec![1]);
}

#[test]
fn duplicates_are_dropped_and_a_gap_is_read_again() {
    use tether_core::protocol::{
        EntryKind, JournalBatch, JournalEntry, Reply, ReplyEnvelope, Stream,
    };
    let mut h = Harness::new(12);
    h.open("k", Lang::Shell);
    h.settle();
    let cell = h.run("k", "hang", None);
    // Take the submit exec and answer it by hand with a gappy batch.
    let (id, _) = h
        .ops
        .iter()
        .rev()
        .find(|(_, op)| op.kind() == OpKind::Submit)
        .map(|(i, o)| (*i, o.clone()))
        .unwrap();
    h.pending.retain(|(_, x), _| *x != id);
    let out = |n: u64, s: &str| JournalEntry {
        n,
        kind: EntryKind::Output {
            stream: Stream::Stdout,
            data: Bytes::from(s),
        },
    };
    let reply = |id: u64, r: Reply| {
        let stdout = ReplyEnvelope {
            v: 1,
            id,
            reply: Some(r),
            error: None,
        }
        .to_line();
        Ok(tether_core::protocol::ExecOutput {
            stdout,
            stderr: vec![],
            exit_code: 0,
        })
    };
    let batch = JournalBatch {
        entries: vec![out(1, "a"), out(2, "b"), out(4, "d")],
        done: false,
    };
    h.client.handle_exec(
        id,
        reply(
            id.0,
            Reply::Submitted {
                acceptance: Acceptance::Accepted,
                batch,
            },
        ),
        h.now,
    );
    h.drain();
    assert_eq!(h.output(&cell), "ab");
    // The re-read comes after a backoff, from cursor 2.
    h.run_until(|h| {
        h.ops
            .values()
            .any(|op| matches!(op, tether_core::protocol::Op::Wait { cursor: 2, .. }))
    });
    let (wid, _) = h
        .ops
        .iter()
        .rev()
        .find(|(_, op)| op.kind() == OpKind::Wait)
        .map(|(i, o)| (*i, o.clone()))
        .unwrap();
    h.pending.retain(|(_, x), _| *x != wid);
    let batch = JournalBatch {
        entries: vec![
            out(2, "b"),
            out(3, "c"),
            out(4, "d"),
            JournalEntry {
                n: 5,
                kind: EntryKind::Result {
                    outcome: CellOutcome::Ok,
                },
            },
            JournalEntry {
                n: 6,
                kind: EntryKind::Done,
            },
        ],
        done: true,
    };
    h.client.handle_exec(
        wid,
        reply(
            wid.0,
            Reply::Waited {
                batch: batch.clone(),
            },
        ),
        h.now,
    );
    // The same reply again (a duplicate delivery) is ignored.
    h.client
        .handle_exec(wid, reply(wid.0, Reply::Waited { batch }), h.now);
    h.drain();
    assert_eq!(h.output(&cell), "abcd");
    assert_eq!(h.outcome(&cell), Some(CellOutcome::Ok));
    assert_eq!(h.resolutions(&cell), 1);
}

#[test]
fn cancel_before_the_submit_reply_is_sent_at_once_and_wins() {
    let mut h = Harness::new(13);
    h.open("k", Lang::Shell);
    h.settle();
    // The submit does not get through yet (its answer will be an error);
    // the cancel, sent at once, does: it leaves a tombstone.
    h.net = Net::Down;
    let cell = h.run("k", "out never", None);
    h.net = Net::Up;
    h.client.cancel(&cell, h.now);
    h.drain();
    assert_eq!(
        h.sent(OpKind::Cancel),
        1,
        "the cancel goes out before any reply"
    );
    h.settle();
    assert!(
        h.events.iter().any(|e| matches!(
            e,
            Event::CellAccepted {
                acceptance: Acceptance::CancelledBeforeStart,
                ..
            }
        )),
        "{}",
        h.trace
    );
    assert_eq!(h.outcome(&cell), Some(CellOutcome::Cancelled));
    assert_eq!(h.output(&cell), "");
    assert!(h.agent.runs.is_empty(), "the cell never ran");
}

#[test]
fn cells_queued_at_once_are_submitted_one_after_the_others_acceptance() {
    let mut h = Harness::new(21);
    h.open("k", Lang::Shell);
    h.settle();
    let first = h.run("k", "out a", None);
    let second = h.run("k", "out b", None);
    h.drain();
    assert_eq!(
        h.sent(OpKind::Submit),
        1,
        "the second waits for the first's submit to be answered (a submit answered first would run first)"
    );
    h.settle();
    assert_eq!(h.sent(OpKind::Submit), 2, "{}", h.trace);
    assert_eq!(h.outcome(&first), Some(CellOutcome::Ok));
    assert_eq!(h.outcome(&second), Some(CellOutcome::Ok));
    assert_eq!(h.output(&second), "b\n");
}

#[test]
fn a_cell_timeout_cancels_the_cell_not_the_kernel() {
    let mut h = Harness::new(14);
    h.open("k", Lang::Shell);
    h.settle();
    let cell = h.run("k", "out start\nhang", Some(Duration::from_secs(3)));
    h.settle();
    assert_eq!(h.outcome(&cell), Some(CellOutcome::TimedOut));
    assert_eq!(h.output(&cell), "start\n");
    assert_eq!(h.sent(OpKind::Cancel), 1);
    assert_eq!(h.sent(OpKind::Shutdown), 0);
    let next = h.run("k", "out after", None);
    h.settle();
    assert_eq!(
        h.outcome(&next),
        Some(CellOutcome::Ok),
        "the kernel lives on"
    );
}

#[test]
fn the_reaper_evicts_idle_kernels_and_the_lru_beyond_the_cap_but_never_one_in_flight() {
    let mut cfg = support::config();
    cfg.max_kernels = 2;
    cfg.kernel_idle_timeout = Duration::from_secs(600);
    let mut h = Harness::with(Client::new(cfg, 15), Default::default());
    h.open("a", Lang::Shell);
    let busy = h.run("a", "hang", None);
    h.run_until(|h| {
        h.events
            .iter()
            .any(|e| matches!(e, Event::CellAccepted { .. }))
    });
    h.now = h.now + Duration::from_secs(1);
    h.open("b", Lang::Shell);
    h.now = h.now + Duration::from_secs(1);
    h.open("c", Lang::Shell);
    h.run_until(|h| {
        h.events
            .iter()
            .any(|e| matches!(e, Event::KernelEvicted { .. }))
    });
    let evicted: Vec<_> = h
        .events
        .iter()
        .filter_map(|e| match e {
            Event::KernelEvicted { kernel, .. } => Some(kernel.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(evicted, vec!["b"], "a is older but has a cell in flight");
    // Kept, marked shutting down, until the shutdown is answered.
    assert!(h.records[&kname("b")].shutting_down, "{}", h.trace);
    assert!(h.records[&kname("b")].cells.is_empty());
    assert!(h
        .client
        .run_cell(&kname("b"), Bytes::from(""), None, h.now)
        .is_err());
    // Idle: c is reaped after the idle timeout, a is not (still busy).
    h.run_until(|h| {
        h.events
            .iter()
            .filter(|e| matches!(e, Event::KernelEvicted { .. }))
            .count()
            == 2
    });
    assert!(h.now >= Timestamp(0) + Duration::from_secs(600));
    assert!(h
        .effects
        .iter()
        .any(|e| matches!(e, Effect::Forget(k) if k.as_str() == "b")));
    assert!(!h.records.contains_key(&kname("b")));
    assert!(h
        .events
        .iter()
        .any(|e| matches!(e, Event::KernelEvicted { kernel, .. } if kernel.as_str() == "c")));
    assert_eq!(h.client.in_flight(), 1);
    h.client.cancel(&busy, h.now);
    h.settle();
    assert_eq!(h.outcome(&busy), Some(CellOutcome::Cancelled));
}

/// A kernel whose only cell ended on the client (timed out) while its
/// spawn was still unanswered holds nothing the cap must keep: the next
/// kernel evicts it, and its shutdown waits for the spawn (drawn seed
/// 501595 of the `--max-faults 8` long run: two kernels open under a cap
/// of one for as long as the spawn's answer was held).
#[test]
fn a_kernel_with_only_its_spawn_in_flight_is_evicted_beyond_the_cap() {
    let mut cfg = support::config();
    cfg.max_kernels = 1;
    let mut h = Harness::with(Client::new(cfg, 41), Default::default());
    h.lose_kind = Some(OpKind::Spawn);
    h.open("a", Lang::Shell);
    let cell = h.run("a", "out 1", Some(Duration::from_secs(1)));
    h.run_until(|h| h.outcome(&cell).is_some());
    assert_eq!(h.outcome(&cell), Some(CellOutcome::TimedOut), "{}", h.trace);
    assert_eq!(h.sent(OpKind::Spawn), 1, "{}", h.trace);
    h.lose_kind = None;
    h.open("b", Lang::Shell);
    let next = h.run("b", "out 2", None);
    h.run_until(|h| {
        h.events
            .iter()
            .any(|e| matches!(e, Event::KernelEvicted { kernel, .. } if kernel.as_str() == "a"))
    });
    assert_eq!(
        h.sent(OpKind::Spawn),
        2,
        "a's spawn is still out: {}",
        h.trace
    );
    h.settle();
    assert_eq!(h.outcome(&next), Some(CellOutcome::Ok), "{}", h.trace);
    h.run_until(|h| !h.records.contains_key(&kname("a")));
    assert!(!h.records.contains_key(&kname("a")), "{}", h.trace);
    assert!(
        !h.agent.kernels.contains_key(&kname("a")),
        "the shutdown went after the spawn's answer: {}",
        h.trace
    );
}

#[test]
fn resume_in_a_new_client_waits_from_the_cursor_and_never_submits_again() {
    let mut h = Harness::new(16);
    h.open("k", Lang::Shell);
    let cell = h.run("k", "out 1\ntick\nout 2\ntick\nout 3", None);
    h.run_until(|h| h.output(&cell) == "1\n");
    let record = h.records[&kname("k")].clone();
    assert_eq!(record.cells[0].cursor, 2);
    // The first client process is gone; a new one resumes.
    let mut h2 = Harness::with(Client::new(support::config(), 17), h.agent.clone());
    h2.client.resume(record.clone(), false, h2.now);
    h2.settle();
    assert_eq!(h2.sent(OpKind::Submit), 0);
    assert_eq!(h2.output(&cell), "2\n3\n");
    assert_eq!(h2.outcome(&cell), Some(CellOutcome::Ok));
    // Replay from 0 in yet another client (the journal is acked by now, so
    // use the agent as it was before h2).
    let mut h3 = Harness::with(Client::new(support::config(), 18), h.agent.clone());
    h3.client.resume(record, true, h3.now);
    h3.settle();
    assert_eq!(h3.output(&cell), "1\n2\n3\n");
}

/// The client's timeout is part of the record: a client process that
/// resumes a cell whose timeout fired (and asked for its cancel) before
/// the first process went reports it timed out, not cancelled (drawn
/// seed 232: a crash right after the timeout's cancel, and the resumed
/// cell's `cancelled` looked like a cancel nobody asked for).
#[test]
fn a_cell_that_timed_out_is_still_timed_out_when_a_new_client_resumes_it() {
    let mut h = Harness::new(22);
    h.open("k", Lang::Shell);
    h.settle();
    let cell = h.run("k", "out 1\nhang", Some(Duration::from_millis(300)));
    h.run_until(|h| {
        h.records
            .get(&kname("k"))
            .is_some_and(|r| r.cells.iter().any(|c| c.cancel_requested))
    });
    let record = h.records[&kname("k")].clone();
    assert!(record.cells[0].timed_out, "{record:?}");
    assert_eq!(
        h.outcome(&cell),
        None,
        "the first process went before the end"
    );
    let mut h2 = Harness::with(Client::new(support::config(), 23), h.agent.clone());
    h2.client.resume(record, false, h2.now);
    h2.settle();
    assert_eq!(
        h2.outcome(&cell),
        Some(CellOutcome::TimedOut),
        "{}",
        h2.trace
    );
}

#[test]
fn retries_back_off_and_resend_the_same_op() {
    let mut h = Harness::new(19);
    h.net = Net::Down;
    h.open("k", Lang::Shell);
    h.run_until(|h| h.sent(OpKind::Spawn) >= 3);
    let times: Vec<Timestamp> = {
        let mut t = Vec::new();
        for line in h.trace.lines().filter(|l| l.contains(" spawn ")) {
            let secs = line
                .split_whitespace()
                .next()
                .unwrap()
                .trim_end_matches('s');
            let ms = (secs.parse::<f64>().unwrap() * 1000.0).round() as u64;
            t.push(Timestamp(ms));
        }
        t
    };
    let gaps: Vec<u64> = times.windows(2).map(|w| w[1].0 - w[0].0).collect();
    assert_eq!(
        gaps,
        vec![250, 450],
        "latency 50 ms + backoff 200, 400 ms\n{}",
        h.trace
    );
    let spawns: Vec<_> = h
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::Exec { op, .. } if op.kind() == OpKind::Spawn => Some(op.clone()),
            _ => None,
        })
        .collect();
    assert!(
        spawns.windows(2).all(|w| w[0] == w[1]),
        "same nonce every time"
    );
    h.net = Net::Up;
    assert!(h.run_until(|h| h
        .events
        .iter()
        .any(|e| matches!(e, Event::KernelReady { .. }))));
}

#[test]
fn unreachable_for_too_long_makes_cells_unknown_and_keeps_the_record() {
    let mut h = Harness::new(20);
    h.open("k", Lang::Shell);
    h.settle();
    let cell = h.run("k", "out 1\ntick\nhang", None);
    h.run_until(|h| h.output(&cell) == "1\n");
    h.net = Net::Down;
    h.settle();
    let CellOutcome::Unknown { reason } = h.outcome(&cell).unwrap() else {
        panic!("{}", h.trace)
    };
    assert!(reason.contains("did not answer"), "{reason}");
    assert_eq!(h.records[&kname("k")].cells.len(), 1);
    assert_eq!(h.sent(OpKind::Spawn), 1);
    assert_eq!(state_lost(&h), 0);
    assert_eq!(h.client.in_flight(), 0);
    // A record kept is resumable once the sandbox answers again.
    h.net = Net::Up;
    let record = h.records[&kname("k")].clone();
    let mut h2 = Harness::with(Client::new(support::config(), 21), h.agent.clone());
    h2.client.resume(record, false, h2.now);
    h2.client.cancel(&cell, h2.now);
    h2.settle();
    assert_eq!(h2.outcome(&cell), Some(CellOutcome::Cancelled));
}

#[test]
fn a_new_cell_is_refused_behind_a_kept_unknown_cell_until_it_is_resumed() {
    // A cell written off as unknown may still run on the daemon, which
    // runs a kernel's cells in order: a new cell would wait behind it for
    // as long as it runs (for ever, for a loop nobody cancels).
    let mut h = Harness::new(25);
    h.open("k", Lang::Shell);
    h.settle();
    let cell = h.run("k", "out 1\ntick\nhang", None);
    h.run_until(|h| h.output(&cell) == "1\n");
    h.net = Net::Down;
    h.settle();
    assert!(matches!(
        h.outcome(&cell),
        Some(CellOutcome::Unknown { .. })
    ));
    h.net = Net::Up;
    let err = h
        .client
        .run_cell(&kname("k"), Bytes::from("out 2"), None, h.now)
        .unwrap_err();
    assert_eq!(
        err,
        ClientError::UnresolvedCell {
            kernel: kname("k"),
            seqs: vec![cell.seq]
        }
    );
    assert!(err.to_string().contains("resume"), "{err}");
    assert_eq!(h.records[&kname("k")].cells.len(), 1, "nothing was queued");
    // Resumed and cancelled, it ends; then the next cell runs.
    let record = h.client.record(&kname("k")).unwrap();
    h.client.resume(record, false, h.now);
    h.client.cancel(&cell, h.now);
    h.settle();
    assert_eq!(h.resolutions(&cell), 2, "{}", h.trace);
    let next = h.run("k", "out 2", None);
    h.settle();
    assert_eq!(h.outcome(&next), Some(CellOutcome::Ok), "{}", h.trace);
}

#[test]
fn a_kept_unknown_cell_with_a_cancel_asked_for_does_not_refuse_the_next() {
    // Its cancel goes once the kernel answers, so the next cell waits
    // behind it only as long as the cancel takes.
    let mut h = Harness::new(26);
    h.open("k", Lang::Shell);
    h.settle();
    let cell = h.run("k", "out 1\ntick\nhang", None);
    h.run_until(|h| h.output(&cell) == "1\n");
    h.net = Net::Down;
    h.client.cancel(&cell, h.now);
    h.settle();
    assert!(matches!(
        h.outcome(&cell),
        Some(CellOutcome::Unknown { .. })
    ));
    h.net = Net::Up;
    let next = h.run("k", "out 2", None);
    h.settle();
    assert_eq!(h.outcome(&next), Some(CellOutcome::Ok), "{}", h.trace);
}

#[test]
fn replies_for_old_or_unknown_exec_ids_are_ignored() {
    let mut h = Harness::new(22);
    h.open("k", Lang::Shell);
    h.client
        .handle_exec(tether_core::ids::ExecId(999), Ok(Default::default()), h.now);
    h.settle();
    assert!(h
        .events
        .iter()
        .any(|e| matches!(e, Event::Note { text, .. } if text.contains("x999"))));
    assert!(h
        .events
        .iter()
        .any(|e| matches!(e, Event::KernelReady { .. })));
}

/// A spawn still out may start a daemon after a shutdown sent meanwhile
/// has swept the kernel: the shutdown waits for the spawn's answer, or its
/// deadline (full_disk seed 103509 left such a daemon running).
#[test]
fn a_shutdown_waits_for_the_spawn_in_flight() {
    for lost in [false, true] {
        let mut h = Harness::new(40);
        if lost {
            h.lose_kind = Some(OpKind::Spawn);
        }
        h.open("k", Lang::Shell);
        assert_eq!(h.sent(OpKind::Spawn), 1);
        h.client.shutdown(&kname("k"), h.now);
        h.drain();
        assert_eq!(
            h.sent(OpKind::Shutdown),
            0,
            "no shutdown while the spawn is unanswered (lost reply: {lost})"
        );
        h.run_until(|h| h.sent(OpKind::Shutdown) == 1);
        let answered = h.trace.find("result x1").expect("the spawn's result");
        let shutdown = h.trace.find("shutdown k").expect("the shutdown");
        assert!(answered < shutdown, "{}", h.trace);
        h.lose_kind = None;
        h.settle();
        assert!(h.client.record(&kname("k")).is_none(), "{}", h.trace);
        assert!(h.agent.kernels.is_empty(), "{}", h.trace);
    }
}

#[test]
fn commands_on_unknown_or_dying_kernels_are_typed_errors() {
    let mut h = Harness::new(23);
    let err = h
        .client
        .run_cell(&kname("nope"), Bytes::from(""), None, h.now)
        .unwrap_err();
    assert_eq!(err, ClientError::UnknownKernel(kname("nope")));
    assert!(err.to_string().contains("open it"));
    h.open("k", Lang::Shell);
    h.client.shutdown(&kname("k"), h.now);
    let err = h
        .client
        .run_cell(&kname("k"), Bytes::from(""), None, h.now)
        .unwrap_err();
    assert_eq!(err, ClientError::KernelShuttingDown(kname("k")));
    h.settle();
    assert!(h.client.record(&kname("k")).is_none());
}

#[test]
fn time_going_backwards_is_clamped() {
    let mut h = Harness::new(24);
    h.open("k", Lang::Shell);
    h.settle();
    let t = h.now;
    h.client.handle_timeout(Timestamp(0));
    let _ = h
        .client
        .run_cell(&kname("k"), Bytes::from("out a"), None, Timestamp(0))
        .unwrap();
    while let Some(e) = h.client.poll_effect() {
        if let Effect::Exec { deadline, .. } = e {
            assert!(deadline >= t);
        }
    }
}

#[test]
fn clipped_output_and_leftovers_reach_the_frontend() {
    let mut h = Harness::new(25);
    h.open("k", Lang::Shell);
    let cell = h.run("k", "out a\nclip 4096\nleftover 77,78", None);
    h.settle();
    assert!(h
        .events
        .iter()
        .any(|e| matches!(e, Event::Clipped { cell: c, dropped: 4096 } if *c == cell)));
    assert!(h.events.iter().any(
        |e| matches!(e, Event::Leftovers { cell: c, pids } if *c == cell && pids == &[77, 78])
    ));
    assert_eq!(h.outcome(&cell), Some(CellOutcome::Ok));
}

#[test]
fn an_agent_that_cannot_be_installed_fails_the_cells_with_the_reason() {
    let mut config = support::config();
    config.fallback = false;
    let mut h = Harness::with(Client::new(config, 26), support::FakeAgent::default());
    h.agent.installed = false;
    h.agent.install_error = Some(tether_core::protocol::ErrorKind::WrongArch);
    h.open("k", Lang::Shell);
    let cell = h.run("k", "out a", None);
    h.settle();
    let Some(CellOutcome::Error { message }) = h.outcome(&cell) else {
        panic!("{}", h.trace)
    };
    assert!(message.contains("x86_64"), "{message}");
    assert_eq!(h.sent(OpKind::Install), 1, "a refusal is not retried");
    assert_eq!(state_lost(&h), 0);
}

/// Fail open: a kernel that cannot start runs each never-submitted cell
/// once as a plain exec, says so, keeps it out of the record, and never
/// submits it to a kernel afterwards; a cancel cannot stop it.
#[test]
fn a_kernel_that_cannot_start_runs_the_cell_once_without_it() {
    for kind in [
        tether_core::protocol::ErrorKind::WrongArch,
        tether_core::protocol::ErrorKind::CannotInstall,
    ] {
        let mut h = Harness::new(27);
        h.agent.installed = false;
        h.agent.install_error = Some(kind);
        h.open("k", Lang::Shell);
        let cell = h.run("k", "echo plain", None);
        h.settle();
        assert_eq!(h.outcome(&cell), Some(CellOutcome::Ok), "{}", h.trace);
        assert_eq!(h.output(&cell), "echo plain", "{}", h.trace);
        assert_eq!(h.sent(OpKind::Plain), 1, "{}", h.trace);
        assert_eq!(h.sent(OpKind::Submit), 0, "{}", h.trace);
        assert_eq!(h.resolutions(&cell), 1);
        assert!(
            h.events
                .iter()
                .any(|e| matches!(e, Event::RanWithoutKernel { cell: c, .. } if *c == cell)),
            "{}",
            h.trace
        );
        let record = h.client.record(&cell.kernel).unwrap();
        assert!(record.cells.is_empty(), "{record:?}");
    }
}

/// Without a kernel, a shell cell with a NUL byte is refused as a kernel
/// refuses it: an argv ends at the NUL, so a backend would refuse the
/// exec or run the part before it.
#[test]
fn a_shell_cell_with_a_null_byte_is_not_run_without_a_kernel_either() {
    let mut h = Harness::new(29);
    h.agent.installed = false;
    h.agent.install_error = Some(tether_core::protocol::ErrorKind::CannotInstall);
    h.open("k", Lang::Shell);
    let cell = h.run("k", "echo before\0touch poc", None);
    h.settle();
    let Some(CellOutcome::Error { message }) = h.outcome(&cell) else {
        panic!("{}", h.trace)
    };
    assert!(message.contains("null byte (at byte 11)"), "{message}");
    assert_eq!(h.sent(OpKind::Plain), 0, "{}", h.trace);
    assert_eq!(h.output(&cell), "");
    assert!(h.client.record(&cell.kernel).unwrap().cells.is_empty());
}

/// A plain exec that fails in transport may have run: `unknown`, never
/// sent again.
#[test]
fn a_plain_exec_lost_in_transport_is_unknown_and_not_sent_again() {
    let mut h = Harness::new(28);
    h.agent.installed = false;
    h.agent.install_error = Some(tether_core::protocol::ErrorKind::CannotInstall);
    h.lose_kind = Some(OpKind::Plain);
    h.open("k", Lang::Shell);
    let cell = h.run("k", "echo plain", None);
    h.settle();
    assert!(
        matches!(h.outcome(&cell), Some(CellOutcome::Unknown { .. })),
        "{}",
        h.trace
    );
    assert_eq!(h.sent(OpKind::Plain), 1, "{}", h.trace);
}

/// Nor when the client's own deadline timer fires before the driver
/// reports the timeout (the sim found it sent again, and the cell ran
/// twice): `timed out` with a timeout, else `unknown`.
#[test]
fn a_plain_exec_past_its_deadline_is_not_sent_again() {
    for timeout in [Some(Duration::from_secs(5)), None] {
        let mut h = Harness::new(29);
        h.agent.installed = false;
        h.agent.install_error = Some(tether_core::protocol::ErrorKind::CannotInstall);
        h.lose_kind = Some(OpKind::Plain);
        h.lost_reply_lag = Duration::from_millis(1);
        h.open("k", Lang::Shell);
        let cell = h.run("k", "echo plain", timeout);
        h.settle();
        let outcome = h.outcome(&cell);
        match timeout {
            Some(_) => assert_eq!(outcome, Some(CellOutcome::TimedOut), "{}", h.trace),
            None => assert!(
                matches!(outcome, Some(CellOutcome::Unknown { .. })),
                "{}",
                h.trace
            ),
        }
        assert_eq!(h.sent(OpKind::Plain), 1, "{}", h.trace);
        assert_eq!(h.resolutions(&cell), 1);
    }
}

/// The submits the fake agent answered, as (request id, seq, code).
fn submits_seen(agent: &support::FakeAgent) -> Vec<(String, u64, Vec<u8>)> {
    agent
        .ops
        .iter()
        .filter_map(|op| match op {
            tether_core::protocol::Op::Submit { submission, .. } => Some((
                submission.request_id.to_string(),
                submission.seq.0,
                submission.code.as_slice().to_vec(),
            )),
            _ => None,
        })
        .collect()
}

#[test]
fn resume_of_a_cell_whose_submit_never_arrived_submits_it_once_with_its_request_id() {
    let mut h = Harness::new(50);
    h.open("k", Lang::Shell);
    h.settle();
    // The record says submitted, but the send never reaches the sandbox and
    // the client process dies.
    h.net = Net::Down;
    let cell = h.run("k", "out hello", None);
    let record = h.records[&kname("k")].clone();
    assert!(record.cells[0].submitted, "{}", h.trace);
    let (rid, seq) = (
        record.cells[0].request_id.to_string(),
        record.cells[0].seq.0,
    );
    assert!(submits_seen(&h.agent).is_empty(), "{}", h.trace);

    let mut h2 = Harness::with(Client::new(support::config(), 51), h.agent.clone());
    h2.now = h.now;
    h2.client.resume(record, false, h2.now);
    h2.settle();
    assert_eq!(
        submits_seen(&h2.agent),
        vec![(rid.clone(), seq, b"out hello".to_vec())],
        "exactly one submit, with the recorded request id, seq and code\n{}",
        h2.trace
    );
    assert_eq!(h2.outcome(&cell), Some(CellOutcome::Ok), "{}", h2.trace);
    assert_eq!(h2.output(&cell), "hello\n");
    assert_eq!(h2.resolutions(&cell), 1);
    assert_eq!(h2.agent.runs.get(&rid), Some(&1), "ran once");
}

#[test]
fn resume_of_a_cell_whose_journal_exists_never_resubmits_it() {
    let mut h = Harness::new(52);
    h.open("k", Lang::Shell);
    h.settle();
    // The submit reaches the sandbox (the journal exists) but its reply is
    // lost, and the client process dies.
    h.net = Net::LoseReplies;
    let cell = h.run("k", "out a\ntick\nout b", None);
    h.run_until(|h| h.pending.is_empty());
    assert_eq!(submits_seen(&h.agent).len(), 1, "{}", h.trace);
    let record = h.records[&kname("k")].clone();
    let rid = record.cells[0].request_id.to_string();

    let mut h2 = Harness::with(Client::new(support::config(), 53), h.agent.clone());
    h2.now = h.now;
    h2.client.resume(record, false, h2.now);
    h2.settle();
    assert_eq!(h2.sent(OpKind::Submit), 0, "{}", h2.trace);
    assert_eq!(submits_seen(&h2.agent).len(), 1, "{}", h2.trace);
    assert_eq!(h2.outcome(&cell), Some(CellOutcome::Ok), "{}", h2.trace);
    assert_eq!(h2.output(&cell), "a\nb\n");
    assert_eq!(h2.agent.runs.get(&rid), Some(&1), "ran once");
}

#[test]
fn a_second_client_without_a_record_is_told_the_kernel_is_ahead_then_continues_after_it() {
    let mut h = Harness::new(40);
    h.open("k", Lang::Shell);
    for code in ["out a1", "out a2"] {
        let cell = h.run("k", code, None);
        h.settle();
        assert_eq!(h.outcome(&cell), Some(CellOutcome::Ok));
    }
    // Another client (another state directory: no record of `k`) on the
    // same sandbox: it adopts the daemon, and its cell 1 is refused, not
    // accepted (cell 1 of the kernel ran and was acknowledged) and never
    // waited for.
    let mut h2 = Harness::with(Client::new(support::config(), 41), h.agent.clone());
    h2.open("k", Lang::Shell);
    let refused = h2.run("k", "out b", None);
    h2.settle();
    match h2.outcome(&refused) {
        Some(CellOutcome::Error { message }) => {
            assert!(message.contains("another client"), "{message}");
            assert!(message.contains("continues from cell 3"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(h2.output(&refused), "");
    assert_eq!(h2.records[&kname("k")].next_seq, 3);
    // Its next cell goes after the kernel's and runs, once.
    let cell = h2.run("k", "out b", None);
    assert_eq!(cell.seq, CellSeq(3));
    h2.settle();
    assert_eq!(h2.outcome(&cell), Some(CellOutcome::Ok));
    assert_eq!(h2.output(&cell), "b\n");
    assert!(h2.agent.runs.values().all(|&n| n == 1));
}

#[test]
fn a_shutdown_given_up_on_is_sent_again_once_the_sandbox_answers() {
    // An idle daemon exits by itself, its kernel directory does not: a
    // shutdown every attempt of which failed stays owed (reaper seed 178:
    // an evicted kernel's shutdown ran into a 21 s partition and its files
    // outlived the run).
    let mut h = Harness::new(31);
    h.open("b", Lang::Shell);
    let cell = h.run("b", "out 1", None);
    h.settle();
    assert_eq!(h.outcome(&cell), Some(CellOutcome::Ok));
    assert!(h.agent.kernels.contains_key(&kname("b")));
    h.net = Net::Down;
    h.client.shutdown(&kname("b"), h.now);
    h.run_until(|h| h.client.kernels().all(|k| k.as_str() != "b"));
    assert!(
        h.trace.contains("could not shut kernel b down"),
        "{}",
        h.trace
    );
    assert!(h.agent.kernels.contains_key(&kname("b")), "never reached");
    // The sandbox answers again: the next exec that gets through (another
    // kernel's spawn) sends b's shutdown again.
    h.net = Net::Up;
    h.open("c", Lang::Shell);
    h.settle();
    assert!(!h.agent.kernels.contains_key(&kname("b")), "{}", h.trace);
    assert!(h.client.kernels().all(|k| k.as_str() != "b"));
    // Owed once: nothing more is sent for it.
    let shutdowns = h.sent(OpKind::Shutdown);
    let more = h.run("c", "out 2", None);
    h.settle();
    assert_eq!(h.outcome(&more), Some(CellOutcome::Ok));
    assert_eq!(h.sent(OpKind::Shutdown), shutdowns);
}

#[test]
fn a_shutdown_begun_by_a_crashed_client_is_sent_again_by_the_next() {
    // two_kernels seed 100281: the reaper evicted a kernel during a
    // partition and the client crashed before the shutdown got through;
    // its record was already forgotten, so the next client process knew
    // nothing of it and its daemon, shim and files outlived the run.
    let mut h = Harness::new(33);
    h.open("b", Lang::Shell);
    let cell = h.run("b", "out 1", None);
    h.settle();
    assert_eq!(h.outcome(&cell), Some(CellOutcome::Ok));
    h.net = Net::Down;
    h.client.shutdown(&kname("b"), h.now);
    h.run_until(|h| h.sent(OpKind::Shutdown) >= 1);
    // The client process dies here: what survives is its record.
    let record = h.records[&kname("b")].clone();
    assert!(record.shutting_down, "{}", h.trace);
    assert!(h.agent.kernels.contains_key(&kname("b")), "never reached");
    let mut h2 = Harness::with(Client::new(support::config(), 34), h.agent.clone());
    h2.client.resume(record, false, h2.now);
    h2.run_until(|h| h.client.kernels().all(|k| k.as_str() != "b"));
    assert_eq!(h2.sent(OpKind::Submit), 0);
    assert!(!h2.agent.kernels.contains_key(&kname("b")), "{}", h2.trace);
    assert!(
        h2.effects
            .iter()
            .any(|e| matches!(e, Effect::Forget(k) if k.as_str() == "b")),
        "{}",
        h2.trace
    );
    // A new kernel of that name starts from a fresh sequence number past
    // the old one's (no cell key reused).
    h2.open("b", Lang::Shell);
    let again = h2.run("b", "out 2", None);
    h2.settle();
    assert_eq!(h2.outcome(&again), Some(CellOutcome::Ok));
    assert!(again.seq.0 > cell.seq.0, "{again:?} after {cell:?}");
}

#[test]
fn a_spawn_left_unanswered_by_a_crashed_client_is_sent_again_under_its_nonce() {
    // sandbox_replaced seed 165: a spawn frame held by the channel reached
    // the sandbox after the next client process had spawned under a new
    // nonce and shut the kernel down; the old nonce was in no shut list,
    // so it started a daemon that outlived the run.
    fn spawn_nonces(h: &Harness) -> Vec<String> {
        h.effects
            .iter()
            .filter_map(|e| match e {
                Effect::Exec {
                    op: tether_core::protocol::Op::Spawn { nonce, .. },
                    ..
                } => Some(nonce.clone()),
                _ => None,
            })
            .collect()
    }
    let mut h = Harness::new(35);
    h.net = Net::Down;
    h.open("k", Lang::Shell);
    let cell = h.run("k", "out 1", None);
    h.run_until(|h| h.sent(OpKind::Spawn) >= 1);
    let sent = spawn_nonces(&h)[0].clone();
    let persisted = h
        .effects
        .iter()
        .position(|e| matches!(e, Effect::Persist(r) if r.spawning.as_deref() == Some(&*sent)))
        .expect("the spawn's nonce is persisted");
    let first_spawn = h
        .effects
        .iter()
        .position(|e| matches!(e, Effect::Exec { op, .. } if op.kind() == OpKind::Spawn))
        .unwrap();
    assert!(persisted < first_spawn, "persisted before it is sent");
    // The client process dies here: what survives is its record.
    let record = h.records[&kname("k")].clone();
    assert_eq!(record.spawning.as_deref(), Some(&*sent));
    let mut h2 = Harness::with(Client::new(support::config(), 36), h.agent.clone());
    h2.client.resume(record, false, h2.now);
    h2.settle();
    assert_eq!(h2.outcome(&cell), Some(CellOutcome::Ok), "{}", h2.trace);
    let nonces = spawn_nonces(&h2);
    assert!(!nonces.is_empty(), "{}", h2.trace);
    assert!(nonces.iter().all(|n| *n == sent), "{nonces:?} after {sent}");
    assert_eq!(
        h2.records[&kname("k")].spawning,
        None,
        "an answered spawn's nonce is spent"
    );
}

/// The agent says the daemon is gone while every probe finds it alive:
/// the client takes the probe's word a bounded number of times
/// (`Config::max_attempts`), then fails the kernel's cell saying so,
/// instead of probing for ever.
#[test]
fn an_agent_that_keeps_calling_a_live_daemon_dead_fails_the_kernel_after_its_attempts() {
    let mut h = Harness::new(7);
    h.open("k", Lang::Shell);
    h.settle();
    h.agent.dead_on_wait = true;
    let cell = h.run("k", "out a\ntick\nout b", None);
    let mut steps = 0;
    h.run_until(|h| {
        steps += 1;
        steps > 10_000 || (h.client.in_flight() == 0 && h.pending.is_empty())
    });
    assert!(steps <= 10_000, "still probing after 10,000 steps");
    assert!(
        matches!(h.outcome(&cell), Some(CellOutcome::Error { message })
            if message.contains("keeps reporting the daemon gone")),
        "{:?}",
        h.outcome(&cell)
    );
    let attempts = support::config().max_attempts as usize;
    assert!(
        h.sent(OpKind::Probe) <= attempts + 1,
        "{}",
        h.sent(OpKind::Probe)
    );
}

/// A second frontend (no record of the kernel) that starts a fresh daemon
/// where the first frontend's dead daemon ran cells is told their state
/// is gone; its cell is refused behind the kernel and asks to be run
/// again, which goes through (two_clients seed 380 in the simulation).
#[test]
fn a_second_frontend_is_told_the_state_it_never_saw_is_gone() {
    let mut first = Harness::new(1);
    first.open("k", Lang::Shell);
    let set = first.run("k", "out x", None);
    first.settle();
    assert_eq!(first.outcome(&set), Some(CellOutcome::Ok));
    first.agent.kill_daemon(&kname("k"));
    let mut second = Harness::with(Client::new(support::config(), 2), first.agent.clone());
    second.open("k", Lang::Shell);
    let read = second.run("k", "out y", None);
    second.settle();
    assert_eq!(state_lost(&second), 1, "{}", second.trace);
    let refused = second.outcome(&read).expect("resolved");
    assert!(
        tether_core::client::asks_to_run_again(&refused),
        "{refused:?}"
    );
    let again = second.run("k", "out y", None);
    second.settle();
    assert_eq!(
        second.outcome(&again),
        Some(CellOutcome::Ok),
        "{}",
        second.trace
    );
    // A client that knew the kernel is not told twice.
    assert_eq!(state_lost(&second), 1);
}

/// A resumed cell sent but never known accepted is waited for; when its
/// number holds another request (its submit never reached the agent, and
/// a second frontend took the number), it is refused and asks to be run
/// again, never given that cell's output (two_clients seed 101 in the
/// simulation).
#[test]
fn a_resumed_cell_whose_number_holds_another_request_is_refused() {
    let mut h = Harness::new(30);
    h.open("k", Lang::Shell);
    let theirs = h.run("k", "out theirs\ntick\nout more", None);
    h.run_until(|h| h.output(&theirs) == "theirs\n");
    let mut record = h.records[&kname("k")].clone();
    let mut ours = record.cells[0].clone();
    ours.request_id = tether_core::ids::RequestId("ours".into());
    ours.cursor = 0;
    record.cells = vec![ours];
    let mut h2 = Harness::with(Client::new(support::config(), 31), h.agent.clone());
    h2.client.resume(record, false, h2.now);
    h2.settle();
    let key = CellKey {
        kernel: kname("k"),
        seq: CellSeq(1),
    };
    assert_eq!(
        h2.output(&key),
        "",
        "another request's output: {}",
        h2.trace
    );
    let outcome = h2.outcome(&key).expect("resolved");
    assert!(
        tether_core::client::asks_to_run_again(&outcome),
        "{outcome:?}"
    );
}

/// A client that shut a kernel down (its eviction told of that loss) and
/// opens it again is told of the state another client left there since,
/// when the daemon that held it is gone (drawn_clients seed 201515, no
/// faults: the other frontend bound a name after this one's eviction,
/// its daemon exited idle, and this one's next cell met a NameError
/// nobody announced). Opened again with nothing run since, it hears
/// nothing more.
#[test]
fn a_kernel_opened_again_after_its_eviction_tells_of_cells_another_client_ran_since() {
    for others_ran in [false, true] {
        let mut cfg = support::config();
        cfg.max_kernels = 1;
        let mut h = Harness::with(Client::new(cfg, 16), Default::default());
        h.open("a", Lang::Shell);
        let first = h.run("a", "out a", None);
        h.settle();
        assert_eq!(h.outcome(&first), Some(CellOutcome::Ok));
        h.open("b", Lang::Shell);
        h.run_until(|h| !h.agent.kernels.contains_key(&kname("a")));
        h.settle();
        if others_ran {
            // Another client opened it, ran a cell, and its daemon died.
            let used = std::collections::BTreeSet::from([1]);
            h.agent.kernels.insert(
                kname("a"),
                support::FakeKernel {
                    used,
                    ..Default::default()
                },
            );
        }
        let before = state_lost(&h);
        h.open("a", Lang::Shell);
        let again = h.run("a", "out b", None);
        h.settle();
        assert_eq!(h.outcome(&again), Some(CellOutcome::Ok), "{}", h.trace);
        assert_eq!(
            state_lost(&h) - before,
            usize::from(others_ran),
            "others ran: {others_ran}\n{}",
            h.trace
        );
    }
}

#[test]
fn a_kernel_opened_again_while_its_shutdown_is_owed_tells_of_cells_another_client_ran_since() {
    // The eviction's shutdown never got through, so nothing was removed:
    // the cells the fresh spawn counts up to this client's own last are
    // its own, whose loss its eviction told (reaper seed 500205); those
    // numbered past them another client ran since, on a daemon now gone,
    // and this client never saw their state.
    for others_ran in [false, true] {
        let mut h = Harness::new(41);
        h.open("a", Lang::Shell);
        let first = h.run("a", "out a", None);
        let second = h.run("a", "out b", None);
        h.settle();
        assert_eq!(h.outcome(&first), Some(CellOutcome::Ok));
        assert_eq!(h.outcome(&second), Some(CellOutcome::Ok));
        h.net = Net::Down;
        h.client.shutdown(&kname("a"), h.now);
        h.run_until(|h| h.client.kernels().all(|k| k.as_str() != "a"));
        assert!(
            h.trace.contains("could not shut kernel a down"),
            "{}",
            h.trace
        );
        // Its daemon is gone (an idle exit), its files are not.
        let k = h.agent.kernels.get_mut(&kname("a")).expect("never reached");
        k.daemon = None;
        if others_ran {
            k.used.extend([3, 4]);
        }
        h.net = Net::Up;
        let before = state_lost(&h);
        h.open("a", Lang::Shell);
        h.run_until(|h| h.agent.kernels[&kname("a")].daemon.is_some());
        h.settle();
        assert_eq!(
            state_lost(&h) - before,
            usize::from(others_ran),
            "others ran: {others_ran}\n{}",
            h.trace
        );
    }
}
