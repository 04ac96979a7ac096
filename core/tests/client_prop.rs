//! A proptest over random interleavings of commands, exec results
//! (success, transport error, garbage bytes, duplicates, late replies for
//! old ids, results for ids never sent), agent faults and timeouts
//! (including a clock going backwards). Checked after every step:
//!
//! - nothing panics;
//! - time never goes backwards: every exec deadline is at or after the
//!   latest `now`, and after `handle_timeout(t)` the next timer is after t;
//! - only idempotent ops are re-sent: every submit of a (kernel, seq)
//!   carries the same request id and code;
//! - output is delivered in journal order, at most once, never after the
//!   cell resolved;
//! - state lost is reported only after a probe reply said dead, replaced,
//!   or found no trace of an expected daemon;
//! - every cell resolves exactly once, and after the faults stop (the
//!   network heals, or stays down for good) within a bounded time.

mod support;

use proptest::prelude::*;
use std::collections::BTreeMap;
use std::time::Duration;
use support::{config, kname, FakeAgent};
use tether_core::bytes::Bytes;
use tether_core::client::{CellKey, Client, Effect, Event, TransportError, TransportErrorKind};
use tether_core::ids::{CellSeq, ExecId, KernelName, RequestId};
use tether_core::protocol::{
    parse_reply, CellOutcome, EntryKind, ExecOutput, JournalEntry, Lang, Op, ProbeStatus, Reply,
    ReplyEnvelope,
};
use tether_core::time::Timestamp;

const KERNELS: [&str; 3] = ["a", "b", "c"];
const SCRIPTS: [&str; 5] = [
    "out 1",
    "out 1\ntick\nout 2\ntick\nexit 3",
    "err e\nfail boom",
    "out x\nhang",
    "tick\ntick\ntick\nout late",
];

#[derive(Clone, Debug)]
enum Action {
    Open(usize, bool),
    Run(usize, usize, Option<u64>),
    Cancel(usize),
    Shutdown(usize),
    Deliver(usize),
    Garbage(usize, Vec<u8>),
    TransportFail(usize),
    LoseReply(usize),
    Duplicate(usize),
    Stray(u64),
    Advance(u64),
    Backwards(u64),
    KillDaemon(usize),
    ReuseDaemonPid(usize),
    Uninstall,
    /// The op runs; its reply's journal batch loses an entry.
    Gappy(usize),
    /// The op runs; its reply's journal batch repeats every entry.
    Doubled(usize),
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        2 => (0..3usize, any::<bool>()).prop_map(|(k, p)| Action::Open(k, p)),
        3 => (0..3usize, 0..5usize, prop::option::of(1_000..30_000u64)).prop_map(|(k, s, t)| Action::Run(k, s, t)),
        1 => (0..8usize).prop_map(Action::Cancel),
        1 => (0..3usize).prop_map(Action::Shutdown),
        8 => (0..4usize).prop_map(Action::Deliver),
        1 => ((0..4usize), prop::collection::vec(any::<u8>(), 0..40)).prop_map(|(i, g)| Action::Garbage(i, g)),
        1 => (0..4usize).prop_map(Action::TransportFail),
        1 => (0..4usize).prop_map(Action::LoseReply),
        1 => (0..8usize).prop_map(Action::Duplicate),
        1 => (0..50u64).prop_map(Action::Stray),
        3 => (1..30_000u64).prop_map(Action::Advance),
        1 => (1..5_000u64).prop_map(Action::Backwards),
        1 => (0..3usize).prop_map(Action::KillDaemon),
        1 => (0..3usize).prop_map(Action::ReuseDaemonPid),
        1 => Just(Action::Uninstall),
        1 => (0..4usize).prop_map(Action::Gappy),
        1 => (0..4usize).prop_map(Action::Doubled),
    ]
}

/// Drives a client by hand and checks the invariants as it goes.
struct World {
    client: Client,
    agent: FakeAgent,
    now: Timestamp,
    latest: Timestamp,
    pending: Vec<(ExecId, Op)>,
    delivered: Vec<(ExecId, Result<ExecOutput, TransportError>)>,
    submits: BTreeMap<(KernelName, CellSeq), (RequestId, Bytes)>,
    /// Probe replies that proved a kernel's state lost, minus StateLost seen.
    evidence: BTreeMap<KernelName, i64>,
    cells: Vec<CellKey>,
    resolved: BTreeMap<CellKey, usize>,
    /// The last journal entry delivered as output, per cell.
    delivered_n: BTreeMap<CellKey, u64>,
    /// Output entries the agent journaled, per cell.
    journaled: BTreeMap<CellKey, Vec<u64>>,
    /// Output entries delivered, per cell.
    outputs: BTreeMap<CellKey, Vec<u64>>,
    /// Cells that resolved from their journal's own result (ok, exit N).
    completed: Vec<CellKey>,
}

impl World {
    fn new(seed: u64) -> World {
        World {
            client: Client::new(config(), seed),
            agent: FakeAgent::default(),
            now: Timestamp::ZERO,
            latest: Timestamp::ZERO,
            pending: Vec::new(),
            delivered: Vec::new(),
            submits: BTreeMap::new(),
            evidence: BTreeMap::new(),
            cells: Vec::new(),
            resolved: BTreeMap::new(),
            delivered_n: BTreeMap::new(),
            journaled: BTreeMap::new(),
            outputs: BTreeMap::new(),
            completed: Vec::new(),
        }
    }

    fn at(&mut self, now: Timestamp) -> Timestamp {
        self.latest = self.latest.max(now);
        now
    }

    fn drain(&mut self) -> Result<(), TestCaseError> {
        while let Some(effect) = self.client.poll_effect() {
            if let Effect::Exec { id, op, deadline } = effect {
                prop_assert!(
                    deadline >= self.latest,
                    "deadline {deadline} before now {}",
                    self.latest
                );
                if let Op::Submit {
                    kernel, submission, ..
                } = &op
                {
                    let key = (kernel.clone(), submission.seq);
                    let value = (submission.request_id.clone(), submission.code.clone());
                    let first = self.submits.entry(key).or_insert_with(|| value.clone());
                    prop_assert_eq!(&*first, &value, "a re-sent submit changed");
                }
                self.pending.push((id, op));
            }
        }
        while let Some(event) = self.client.poll_event() {
            match event {
                Event::StateLost { kernel, .. } => {
                    let e = self.evidence.entry(kernel.clone()).or_default();
                    *e -= 1;
                    prop_assert!(
                        *e >= 0,
                        "state lost for {kernel} without a probe's (or a submit's) evidence"
                    );
                }
                Event::Output { cell, n, .. } => {
                    let last = self.delivered_n.entry(cell.clone()).or_default();
                    prop_assert!(
                        n > *last,
                        "{} output {} after {}: out of order or twice",
                        cell,
                        n,
                        last
                    );
                    let skipped = self
                        .journaled
                        .get(&cell)
                        .is_some_and(|ns| ns.iter().any(|m| *m > *last && *m < n));
                    prop_assert!(!skipped, "{} output {} skipped an earlier entry", cell, n);
                    *last = n;
                    self.outputs.entry(cell.clone()).or_default().push(n);
                    prop_assert!(
                        !self.resolved.contains_key(&cell),
                        "{} output after it resolved",
                        cell
                    );
                }
                Event::CellResolved { cell, outcome } => {
                    if matches!(outcome, CellOutcome::Ok | CellOutcome::Exit { .. }) {
                        self.completed.push(cell.clone());
                    }
                    let n = self.resolved.entry(cell.clone()).or_default();
                    *n += 1;
                    prop_assert_eq!(*n, 1, "{} resolved twice", cell);
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn deliver(&mut self, id: ExecId, result: Result<ExecOutput, TransportError>) {
        let now = self.at(self.now);
        self.delivered.push((id, result.clone()));
        self.client.handle_exec(id, result, now);
    }

    /// Checks that an acknowledgement only names cells whose journal the
    /// frontend has whole: resolved, every journaled output delivered.
    fn check_acks(&self, op: &Op) -> Result<(), TestCaseError> {
        let (kernel, seqs): (&KernelName, Vec<CellSeq>) = match op {
            Op::Ack { kernel, seq } => (kernel, vec![*seq]),
            Op::Submit { kernel, ack, .. } => (kernel, ack.clone()),
            _ => return Ok(()),
        };
        for seq in seqs {
            let key = CellKey {
                kernel: kernel.clone(),
                seq,
            };
            prop_assert!(
                self.resolved.contains_key(&key),
                "{} acknowledged before it resolved",
                key
            );
            let last = self.delivered_n.get(&key).copied().unwrap_or(0);
            let undelivered = self
                .journaled
                .get(&key)
                .is_some_and(|ns| ns.iter().any(|n| *n > last));
            prop_assert!(!undelivered, "{} acknowledged with output undelivered", key);
        }
        Ok(())
    }

    /// Runs the op on the fake agent and notes probe evidence.
    fn run_op(&mut self, id: ExecId, op: &Op) -> Result<ExecOutput, TestCaseError> {
        self.check_acks(op)?;
        let out = self.agent.exec(id, op);
        for (kernel, k) in &self.agent.kernels {
            for (seq, c) in &k.cells {
                let key = CellKey {
                    kernel: kernel.clone(),
                    seq: CellSeq(*seq),
                };
                let ns: Vec<u64> = c
                    .journal
                    .iter()
                    .filter(|e| matches!(e.kind, EntryKind::Output { .. }))
                    .map(|e| e.n)
                    .collect();
                self.journaled.insert(key, ns);
            }
        }
        if let Op::Probe { kernel, expect, .. } = op {
            if let Ok(Reply::Probed { status, .. }) = parse_reply(id.0, op.kind(), &out) {
                let lost = match status {
                    ProbeStatus::Dead { .. } | ProbeStatus::Replaced { .. } => true,
                    ProbeStatus::Absent => expect.is_some(),
                    ProbeStatus::Alive { .. } => false,
                };
                if lost {
                    *self.evidence.entry(kernel.clone()).or_default() += 1;
                }
            }
        }
        if let Op::Submit { kernel, .. } = op {
            // A submit that carried the expected identity answers with the
            // probe's verdict when the daemon is not that one.
            if let Ok(Reply::IdentityMismatch { status, .. }) = parse_reply(id.0, op.kind(), &out) {
                if !matches!(status, ProbeStatus::Alive { .. }) {
                    *self.evidence.entry(kernel.clone()).or_default() += 1;
                }
            }
        }
        Ok(out)
    }

    fn take(&mut self, i: usize) -> Option<(ExecId, Op)> {
        if self.pending.is_empty() {
            return None;
        }
        let i = i % self.pending.len();
        Some(self.pending.remove(i))
    }

    fn apply(&mut self, a: Action) -> Result<(), TestCaseError> {
        match a.clone() {
            Action::Open(k, py) => {
                let lang = if py { Lang::Python } else { Lang::Shell };
                let now = self.at(self.now);
                self.client.open(kname(KERNELS[k]), lang, now);
            }
            Action::Run(k, s, t) => {
                // A cell that can hang always has a timeout, so every cell
                // has a bounded life on a healthy sandbox.
                let t = if SCRIPTS[s].contains("hang") {
                    Some(t.unwrap_or(5_000))
                } else {
                    t
                };
                let now = self.at(self.now);
                if let Ok(key) = self.client.run_cell(
                    &kname(KERNELS[k]),
                    Bytes::from(SCRIPTS[s]),
                    t.map(Duration::from_millis),
                    now,
                ) {
                    self.cells.push(key);
                }
            }
            Action::Cancel(i) => {
                if !self.cells.is_empty() {
                    let key = self.cells[i % self.cells.len()].clone();
                    let now = self.at(self.now);
                    self.client.cancel(&key, now);
                }
            }
            Action::Shutdown(k) => {
                let now = self.at(self.now);
                self.client.shutdown(&kname(KERNELS[k]), now);
            }
            Action::Deliver(i) => {
                if let Some((id, op)) = self.take(i) {
                    let out = self.run_op(id, &op)?;
                    self.deliver(id, Ok(out));
                }
            }
            Action::Garbage(i, bytes) => {
                if let Some((id, _)) = self.take(i) {
                    let out = ExecOutput {
                        stdout: bytes,
                        stderr: Vec::new(),
                        exit_code: 0,
                    };
                    self.deliver(id, Ok(out));
                }
            }
            Action::TransportFail(i) => {
                if let Some((id, _)) = self.take(i) {
                    let e = TransportError {
                        kind: TransportErrorKind::Io,
                        detail: "reset".into(),
                    };
                    self.deliver(id, Err(e));
                }
            }
            Action::LoseReply(i) => {
                if let Some((id, op)) = self.take(i) {
                    let _ = self.run_op(id, &op)?;
                    let e = TransportError {
                        kind: TransportErrorKind::TimedOut,
                        detail: "lost".into(),
                    };
                    self.deliver(id, Err(e));
                }
            }
            Action::Duplicate(i) => {
                if !self.delivered.is_empty() {
                    let (id, r) = self.delivered[i % self.delivered.len()].clone();
                    self.deliver(id, r);
                }
            }
            Action::Stray(id) => {
                let id = ExecId(10_000 + id);
                self.deliver(id, Ok(ExecOutput::default()));
            }
            Action::Advance(ms) => {
                self.now = self.now + Duration::from_millis(ms);
                let now = self.at(self.now);
                self.client.handle_timeout(now);
                self.check_timer()?;
            }
            Action::Backwards(ms) => {
                let t = self.now - Duration::from_millis(ms);
                self.client.handle_timeout(t);
                self.check_timer()?;
            }
            Action::KillDaemon(k) => self.agent.kill_daemon(&kname(KERNELS[k])),
            Action::ReuseDaemonPid(k) => self.agent.restart_with_pid_reuse(&kname(KERNELS[k])),
            Action::Uninstall => self.agent.installed = false,
            Action::Gappy(i) | Action::Doubled(i) => {
                if let Some((id, op)) = self.take(i) {
                    let out = self.run_op(id, &op)?;
                    let gappy = matches!(a, Action::Gappy(_));
                    let out = mangle(id, &op, out, |entries| {
                        if gappy {
                            // Drop the second entry (the first output of a
                            // submit's batch) or else the first.
                            if entries.len() > 1 {
                                entries.remove(1);
                            } else if !entries.is_empty() {
                                entries.remove(0);
                            }
                        } else {
                            let copy = entries.clone();
                            entries.extend(copy);
                        }
                    });
                    self.deliver(id, Ok(out));
                }
            }
        }
        self.drain()
    }

    fn check_timer(&self) -> Result<(), TestCaseError> {
        if let Some(t) = self.client.poll_timeout() {
            prop_assert!(
                t > self.latest,
                "timer {t} still due after handle_timeout({})",
                self.latest
            );
        }
        Ok(())
    }

    /// The faults stop: every exec is answered (or, with `up == false`,
    /// fails) after 50 ms, timers fire on time. Returns when no cell is in
    /// flight; fails if that takes longer than `bound`.
    fn heal(&mut self, up: bool, bound: Duration) -> Result<(), TestCaseError> {
        let start = self.now;
        let mut queue: BTreeMap<(Timestamp, ExecId), Op> = BTreeMap::new();
        // Execs already out are answered (or fail) now.
        for (id, op) in std::mem::take(&mut self.pending) {
            queue.insert((self.now, id), op);
        }
        for _ in 0..20_000 {
            if self.client.in_flight() == 0 {
                return Ok(());
            }
            let next_exec = queue.keys().next().copied();
            let timer = self.client.poll_timeout();
            let exec_first = match (next_exec, timer) {
                (Some((at, _)), Some(t)) => at <= t,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => break,
            };
            if exec_first {
                let (at, id) = next_exec.unwrap_or((Timestamp::ZERO, ExecId(0)));
                let op = queue.remove(&(at, id)).unwrap_or(Op::Gc);
                self.now = self.now.max(at);
                let result = if up {
                    Ok(self.run_op(id, &op)?)
                } else {
                    Err(TransportError {
                        kind: TransportErrorKind::Unreachable,
                        detail: "down".into(),
                    })
                };
                self.deliver(id, result);
            } else if let Some(t) = timer {
                self.now = self.now.max(t);
                let now = self.at(self.now);
                self.client.handle_timeout(now);
                self.check_timer()?;
            }
            self.drain()?;
            for (id, op) in std::mem::take(&mut self.pending) {
                queue.insert((self.now + Duration::from_millis(50), id), op);
            }
            prop_assert!(
                self.now <= start + bound,
                "cells still in flight {:?} after {bound:?} of {}",
                self.now.saturating_since(start),
                if up {
                    "a healthy sandbox"
                } else {
                    "an unreachable sandbox"
                }
            );
        }
        prop_assert_eq!(self.client.in_flight(), 0, "stalled with cells in flight");
        Ok(())
    }
}

/// Rewrites the journal batch of a submit or wait reply.
fn mangle(
    id: ExecId,
    op: &Op,
    out: ExecOutput,
    f: impl FnOnce(&mut Vec<JournalEntry>),
) -> ExecOutput {
    let (mut batch, submitted) = match parse_reply(id.0, op.kind(), &out) {
        Ok(Reply::Submitted { acceptance, batch }) => (batch, Some(acceptance)),
        Ok(Reply::Waited { batch }) => (batch, None),
        _ => return out,
    };
    f(&mut batch.entries);
    let reply = match submitted {
        Some(acceptance) => Reply::Submitted { acceptance, batch },
        None => Reply::Waited { batch },
    };
    let env = ReplyEnvelope {
        v: 1,
        id: id.0,
        reply: Some(reply),
        error: None,
    };
    ExecOutput {
        stdout: env.to_line(),
        ..out
    }
}

proptest! {
    #[test]
    fn random_interleavings_keep_the_invariants(
        seed in any::<u64>(),
        actions in prop::collection::vec(action(), 1..80),
        heal_up in any::<bool>(),
    ) {
        let mut w = World::new(seed);
        for a in actions {
            w.apply(a)?;
        }
        // Bound: the longest cell timeout (30 s) plus giving up on a silent
        // sandbox (60 s) plus one exec budget (20 s) plus backoffs and waits.
        let cfg = config();
        let bound = Duration::from_secs(30) + cfg.unreachable_after + cfg.exec_budget() * 3;
        w.heal(heal_up, bound)?;
        for cell in &w.cells {
            prop_assert_eq!(w.resolved.get(cell).copied(), Some(1), "{} never resolved", cell);
        }
        for cell in &w.completed {
            let journaled = w.journaled.get(cell).cloned().unwrap_or_default();
            let delivered = w.outputs.get(cell).cloned().unwrap_or_default();
            prop_assert_eq!(journaled, delivered, "{} completed without all of its output", cell);
        }
    }
}
