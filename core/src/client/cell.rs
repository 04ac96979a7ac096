//! One cell: queued, submitted, waiting on its journal, resolved. Journal
//! entries are delivered in order exactly once: entries at or below the
//! cursor are dropped, a gap (an entry past `cursor + 1`) stops delivery
//! and the journal is read again from the cursor.

use super::event::{CellKey, Effect, Event};
use super::exec::{CELL_REFUSED, RUN_AGAIN};
use super::kernel::Phase;
use super::record::CallRecord;
use super::record::CellRecord;
use super::retry::Task;
use super::timer::Timer;
use super::Client;
use crate::bytes::Bytes;
use crate::ids::{CellSeq, KernelName, RequestId};
use crate::protocol::{
    Acceptance, CallAnswer, CellOutcome, EntryKind, JournalBatch, Op, Submission,
};
use crate::time::Timestamp;
use std::collections::BTreeSet;
use std::time::Duration;

/// A cell as the client tracks it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Cell {
    /// What is persisted.
    pub(crate) rec: CellRecord,
    /// The agent answered a submit of it (in this process).
    pub(crate) accepted: bool,
    /// Rebuilt from a record: it is never submitted again.
    pub(crate) resumed: bool,
    /// The frontend has its outcome (only `unknown` cells stay after that).
    pub(crate) resolved: bool,
    /// The journal's result entry, once read.
    pub(crate) outcome: Option<CellOutcome>,
    /// Gaps seen in its journal (bounded: an agent that never fills one
    /// makes the cell `unknown`).
    pub(crate) gaps: u32,
    /// It runs as a plain exec without a kernel (fail open): it is not in
    /// the record, and nothing on the sandbox can cancel it.
    pub(crate) fallback: bool,
    /// Until when its next wait is held back for the frontend's answer to
    /// a tool call (see [`Cell::awaits_answer`]).
    pub(crate) answer_hold_until: Option<Timestamp>,
    /// The calls that hold is for: those asked since it began (an older
    /// call still unanswered holds nothing back any more).
    pub(crate) held_for: BTreeSet<String>,
}

/// The long-poll bound (ms) of a wait sent while a tool call of its cell
/// is unanswered past the hold: the answer rides on the next wait, so
/// this bounds how late a slow handler's answer reaches the sandbox.
pub(crate) const ANSWER_WAIT_MS: u64 = 1_000;

impl Cell {
    /// A new cell, not yet sent.
    pub(crate) fn new(
        seq: CellSeq,
        request_id: RequestId,
        code: Bytes,
        timeout_ms: Option<u64>,
    ) -> Cell {
        Cell {
            rec: CellRecord {
                seq,
                request_id,
                code,
                timeout_ms,
                cursor: 0,
                cancel_requested: false,
                timed_out: false,
                submitted: false,
                calls: Default::default(),
            },
            accepted: false,
            resumed: false,
            resolved: false,
            outcome: None,
            gaps: 0,
            fallback: false,
            answer_hold_until: None,
            held_for: BTreeSet::new(),
        }
    }

    /// A cell rebuilt from its record.
    pub(crate) fn resumed(mut rec: CellRecord, replay: bool) -> Cell {
        if replay {
            rec.cursor = 0;
        }
        Cell {
            rec,
            accepted: false,
            resumed: true,
            resolved: false,
            outcome: None,
            gaps: 0,
            fallback: false,
            answer_hold_until: None,
            held_for: BTreeSet::new(),
        }
    }

    /// Does the cell wait for the frontend to answer a tool call? Its next
    /// wait is held back then (it carries the answer), unless a cancel was
    /// asked for — for one long-poll bound from the call at most: a
    /// handler slower than that (or one that never answers) must not stop
    /// the cell's output and end from coming, nor outlast the caller's own
    /// deadline (tool_calls with a tool never answered: the caller gave
    /// up, the cell ended, and the client never waited again).
    pub(crate) fn awaits_answer(&self, now: Timestamp) -> bool {
        !self.rec.cancel_requested
            && self.answer_hold_until.is_some_and(|t| now < t)
            && self
                .held_for
                .iter()
                .any(|id| self.rec.calls.get(id).is_some_and(CallRecord::unanswered))
    }

    /// A tool call of the cell waits for the frontend's answer.
    pub(crate) fn has_unanswered(&self) -> bool {
        self.rec.calls.values().any(CallRecord::unanswered)
    }

    /// Answers kept and not yet known to have reached the sandbox.
    pub(crate) fn answers(&self) -> Vec<CallAnswer> {
        self.rec
            .calls
            .iter()
            .filter(|(_, c)| !c.delivered)
            .filter_map(|(id, c)| {
                c.answer.clone().map(|reply| CallAnswer {
                    id: id.clone(),
                    reply,
                })
            })
            .collect()
    }

    /// What the agent is sent to submit it.
    pub(crate) fn submission(&self) -> Submission {
        Submission {
            request_id: self.rec.request_id.clone(),
            seq: self.rec.seq,
            code: self.rec.code.clone(),
            timeout_ms: self.rec.timeout_ms,
        }
    }
}

/// What reading a batch came to.
enum Absorbed {
    /// More will come: wait again.
    More,
    /// An entry is missing: read again from the cursor (after a backoff).
    Gap { cursor: u64, got: u64 },
    /// The journal is complete.
    Done,
    /// The journal is another request's: this cell's submit never reached
    /// the agent, and another client record took its number.
    Foreign { theirs: RequestId, ours: RequestId },
}

impl Client {
    /// The cell, if the client tracks it.
    pub(crate) fn cell_mut(&mut self, key: &CellKey) -> Option<&mut Cell> {
        self.kernels.get_mut(&key.kernel)?.cells.get_mut(&key.seq)
    }

    /// The cell, if the client tracks it.
    pub(crate) fn cell(&self, key: &CellKey) -> Option<&Cell> {
        self.kernels.get(&key.kernel)?.cells.get(&key.seq)
    }

    /// Sends the cell's submit: marks it submitted and persists the record
    /// first, so a crash after the send is resumed by waiting, not resending.
    pub(crate) fn submit_cell(&mut self, key: &CellKey) {
        if self.submit_held(key) {
            return;
        }
        let Some(cell) = self.cell_mut(key) else {
            return;
        };
        if !cell.rec.submitted {
            cell.rec.submitted = true;
            self.persist(&key.kernel);
        }
        self.start(Task::Submit(key.clone()));
    }

    /// A cell's submit waits while a cell queued before it on its kernel
    /// is unresolved and not known to be recorded (never sent, or its
    /// submit unanswered): the daemon takes the submissions it finds in
    /// order, and one that landed first would run first (drawn seed
    /// 610365: two cells queued at once, the second's submit answered
    /// first, and it ran before the first, reading a name the first had
    /// not set yet). [`Client::release_held`] sends it once that is over.
    fn submit_held(&self, key: &CellKey) -> bool {
        let Some(k) = self.kernels.get(&key.kernel) else {
            return false;
        };
        k.cells.range(..key.seq).any(|(seq, c)| {
            let earlier = CellKey {
                kernel: key.kernel.clone(),
                seq: *seq,
            };
            !c.resolved && (!c.rec.submitted || self.tasks.contains_key(&Task::Submit(earlier)))
        })
    }

    /// Drives the cells of `kernel` a held submit kept back
    /// ([`Client::submit_held`]): once a submit was answered `submitted`
    /// or a cell resolved (see `release_due`).
    pub(crate) fn release_held(&mut self, kernel: &KernelName) {
        let Some(k) = self.kernels.get(kernel) else {
            return;
        };
        if k.phase != Phase::Ready {
            return;
        }
        let idle: Vec<CellKey> = k
            .cells
            .iter()
            .filter(|(_, c)| !c.resolved)
            .map(|(seq, _)| CellKey {
                kernel: kernel.clone(),
                seq: *seq,
            })
            .filter(|key| {
                !self.tasks.contains_key(&Task::Submit(key.clone()))
                    && !self.tasks.contains_key(&Task::Wait(key.clone()))
            })
            .collect();
        for key in idle {
            self.drive_cell(&key);
        }
    }

    /// Starts (or restarts) whatever a cell needs once its kernel is ready.
    pub(crate) fn drive_cell(&mut self, key: &CellKey) {
        let Some(cell) = self.cell(key) else {
            return;
        };
        if cell.resolved && cell.rec.cancel_requested && cell.rec.submitted {
            // Written off as `unknown` before its cancel got through: send
            // the cancel now that the kernel answers, or the cell runs on
            // (and blocks the kernel's later cells).
            if !self.tasks.contains_key(&Task::Cancel(key.clone())) {
                self.start(Task::Cancel(key.clone()));
            }
            return;
        }
        if cell.resolved
            || self.tasks.contains_key(&Task::Submit(key.clone()))
            || self.tasks.contains_key(&Task::Wait(key.clone()))
        {
            return;
        }
        let (submitted, known, cancel, holding) = (
            cell.rec.submitted,
            cell.accepted || cell.resumed,
            cell.rec.cancel_requested,
            cell.awaits_answer(self.now),
        );
        if !submitted || !known {
            // Never sent, or sent by this process without an answer yet:
            // (re)submitting under the same request id is idempotent.
            self.submit_cell(key);
        } else if !holding {
            self.start(Task::Wait(key.clone()));
        }
        if cancel && submitted && !self.tasks.contains_key(&Task::Cancel(key.clone())) {
            self.start(Task::Cancel(key.clone()));
        }
    }

    /// The op that carries `task` for a cell, built from its current state.
    pub(crate) fn cell_op(&self, task: &Task) -> Option<Op> {
        let key = task.cell()?;
        let kernel = key.kernel.clone();
        let seq = key.seq;
        match task {
            Task::Submit(_) => {
                let cell = self.cell(key).filter(|c| !c.resolved)?;
                let k = self.kernels.get(&kernel)?;
                Some(Op::Submit {
                    submission: cell.submission(),
                    wait_ms: self.config.wait_ms,
                    ack: k.acked.iter().copied().collect(),
                    expect: k.identity.clone(),
                    kernel,
                })
            }
            Task::Wait(_) => {
                let cell = self.cell(key).filter(|c| !c.resolved)?;
                let wait_ms = if cell.has_unanswered() {
                    self.config.wait_ms.min(ANSWER_WAIT_MS)
                } else {
                    self.config.wait_ms
                };
                Some(Op::Wait {
                    kernel,
                    seq,
                    cursor: cell.rec.cursor,
                    wait_ms,
                    answers: cell.answers(),
                })
            }
            Task::Cancel(_) => Some(Op::Cancel {
                kernel,
                seq,
                request: self.cell(key).map(|c| c.rec.request_id.clone()),
            }),
            Task::Ack(_) => Some(Op::Ack { kernel, seq }),
            _ => None,
        }
    }

    /// The agent took the submission; its journal so far comes along.
    pub(crate) fn on_submitted(
        &mut self,
        key: &CellKey,
        acceptance: Acceptance,
        batch: JournalBatch,
    ) {
        let Some(cell) = self.cell_mut(key) else {
            return;
        };
        cell.accepted = true;
        self.events.push_back(Event::CellAccepted {
            cell: key.clone(),
            acceptance,
        });
        let before_start = acceptance == Acceptance::CancelledBeforeStart;
        self.on_batch(key, batch, before_start);
    }

    /// Journal entries arrived (from a submit or a wait).
    pub(crate) fn on_batch(&mut self, key: &CellKey, batch: JournalBatch, never_started: bool) {
        match self.absorb(key, batch) {
            Absorbed::Done => self.complete(key),
            Absorbed::More if never_started => {
                // A tombstone was first: the cell will never run, whatever
                // the journal says later.
                let outcome = self.cancelled_outcome(key);
                self.finish_cell(key, outcome);
            }
            Absorbed::More => self.wake_wait(key),
            Absorbed::Foreign { theirs, ours } => {
                // A resumed cell sent but never known accepted is waited
                // for, not sent again: its number may hold what a second
                // frontend ran meanwhile (two_clients seed 101: its
                // output was delivered as this cell's).
                let why = format!(
                    "cell {} holds request {theirs}, not this cell's {ours}: this cell's submit never reached the agent",
                    key.seq
                );
                self.on_seq_taken(key, Some(CellSeq(key.seq.0 + 1)), why);
            }
            Absorbed::Gap { cursor, got } => {
                let text = format!(
                    "journal gap: expected entry {} but got {got}; reading again from {cursor}",
                    cursor + 1
                );
                self.note(Some(key.kernel.clone()), text.clone());
                self.retry_later(Task::Wait(key.clone()), text);
            }
        }
    }

    /// Starts the cell's next wait, unless one is in flight, the cell is
    /// resolved or it waits for the frontend's answer to a tool call.
    pub(crate) fn wake_wait(&mut self, key: &CellKey) {
        let Some(cell) = self.cell(key) else {
            return;
        };
        if cell.resolved
            || cell.awaits_answer(self.now)
            || self.tasks.contains_key(&Task::Submit(key.clone()))
            || self.tasks.contains_key(&Task::Wait(key.clone()))
        {
            return;
        }
        self.start(Task::Wait(key.clone()));
    }

    /// Delivers the batch's new entries in order; persists a moved cursor.
    fn absorb(&mut self, key: &CellKey, batch: JournalBatch) -> Absorbed {
        let Some(cell) = self.cell_mut(key) else {
            return Absorbed::More;
        };
        let theirs = batch.entries.iter().find_map(|e| match &e.kind {
            EntryKind::Accepted { request_id } if *request_id != cell.rec.request_id => {
                Some(request_id.clone())
            }
            _ => None,
        });
        if let Some(theirs) = theirs {
            let ours = cell.rec.request_id.clone();
            return Absorbed::Foreign { theirs, ours };
        }
        let start = cell.rec.cursor;
        let mut events = Vec::new();
        let mut gap = None;
        let mut done = false;
        let mut asked = Vec::new();
        for entry in batch.entries {
            if entry.n <= cell.rec.cursor {
                continue; // a duplicate: delivered before
            }
            if entry.n != cell.rec.cursor + 1 {
                gap = Some(entry.n);
                break;
            }
            cell.rec.cursor = entry.n;
            let c = key.clone();
            match entry.kind {
                EntryKind::Output { stream, data } => events.push(Event::Output {
                    cell: c,
                    n: entry.n,
                    stream,
                    data,
                }),
                EntryKind::Clipped { dropped } => events.push(Event::Clipped { cell: c, dropped }),
                EntryKind::Leftovers { pids } => events.push(Event::Leftovers { cell: c, pids }),
                EntryKind::Unkillable { pids } => events.push(Event::Unkillable { cell: c, pids }),
                EntryKind::Result { outcome } => cell.outcome = Some(outcome),
                EntryKind::Done => done = true,
                EntryKind::ToolCall { id, name, args } => {
                    if !cell.rec.calls.contains_key(&id) {
                        asked.push(id.clone());
                        cell.rec.calls.insert(
                            id.clone(),
                            CallRecord {
                                name: name.clone(),
                                args: args.clone(),
                                answer: None,
                                delivered: false,
                            },
                        );
                        events.push(Event::ToolCall {
                            cell: c,
                            id,
                            name,
                            args,
                        });
                    }
                }
                EntryKind::ToolAnswered { id } => {
                    if let Some(call) = cell.rec.calls.get_mut(&id) {
                        if !call.delivered {
                            call.delivered = true;
                            // Not needed again: the record stays small.
                            call.answer = None;
                            events.push(Event::ToolAnswered { cell: c, id });
                        }
                    }
                }
                EntryKind::Accepted { .. } | EntryKind::Started { .. } => {}
            }
        }
        let moved = cell.rec.cursor != start;
        if !asked.is_empty() {
            self.hold_for_answer(key, &asked);
            self.asked
                .extend(asked.into_iter().map(|id| (key.clone(), id)));
        }
        self.events.extend(events);
        if moved {
            self.persist(&key.kernel);
        }
        let cursor = self.cell(key).map_or(0, |c| c.rec.cursor);
        match gap {
            Some(got) => Absorbed::Gap { cursor, got },
            None if done || batch.done => Absorbed::Done,
            None => Absorbed::More,
        }
    }

    /// A tool call of the cell went to the frontend: its next wait is held
    /// back for the answer, one long-poll bound at most.
    pub(crate) fn hold_for_answer(&mut self, key: &CellKey, calls: &[String]) {
        // As long as a wait may run: a prompt answer rides on the next
        // wait at once; a later one costs at most one ANSWER_WAIT_MS.
        let until = self.now + std::time::Duration::from_millis(self.config.wait_ms);
        if let Some(cell) = self.cell_mut(key) {
            cell.answer_hold_until = Some(until);
            cell.held_for.extend(calls.iter().cloned());
            self.timers.set(Timer::AnswerHold(key.clone()), until);
        }
    }

    /// The hold for a tool call's answer ran out: the cell's waits go on
    /// (the answer rides on a later one), and the sandbox's silence counts
    /// from now if nothing else needed it meanwhile.
    pub(crate) fn on_answer_hold(&mut self, key: &CellKey) {
        let now = self.now;
        if let Some(k) = self.kernels.get_mut(&key.kernel) {
            if !k.busy(now) {
                k.last_contact = now;
            }
        }
        if let Some(cell) = self.cell_mut(key) {
            cell.answer_hold_until = None;
            cell.held_for.clear();
        }
        self.wake_wait(key);
        self.arm_give_up(&key.kernel);
    }

    /// The journal is complete: resolve from its result, then acknowledge.
    fn complete(&mut self, key: &CellKey) {
        let Some(cell) = self.cell_mut(key) else {
            return;
        };
        let outcome = match cell.outcome.take() {
            Some(CellOutcome::Cancelled) if cell.rec.timed_out => CellOutcome::TimedOut,
            Some(outcome) => outcome,
            // Its result went to a client process that crashed before it
            // resolved the cell (the cursor it persisted is past it): the
            // cancel asked for, and why (drawn seed 300386: a timed-out
            // cell resumed after a crash resolved `cancelled`, which the
            // oracle took for the reaper's cancel).
            None if cell.rec.cancel_requested && cell.rec.timed_out => CellOutcome::TimedOut,
            None if cell.rec.cancel_requested => CellOutcome::Cancelled,
            None => CellOutcome::Error {
                message: "the cell's journal ended without a result entry".into(),
            },
        };
        if let Some(k) = self.kernels.get_mut(&key.kernel) {
            k.recoveries = 0;
        }
        self.finish_cell(key, outcome);
    }

    /// Resolves a cell the agent knows about; its acknowledgement (kept in
    /// the record that the resolution persists) rides on the kernel's next
    /// submit, or goes on its own after `ack_delay` without one.
    fn finish_cell(&mut self, key: &CellKey, outcome: CellOutcome) {
        let at = self.now + self.config.ack_delay;
        if let Some(k) = self.kernels.get_mut(&key.kernel) {
            k.acked.insert(key.seq);
            self.timers.set(Timer::FlushAcks(key.kernel.clone()), at);
        }
        self.resolve(key, outcome, false);
    }

    /// The kernel's acknowledgements waited `ack_delay` for a submit: send
    /// them on their own once the kernel is ready and idle.
    pub(crate) fn flush_acks(&mut self, name: &KernelName) {
        let at = self.now + self.config.ack_delay;
        let Some(k) = self.kernels.get(name) else {
            return;
        };
        if k.acked.is_empty() || k.phase != super::kernel::Phase::Ready {
            // Nothing to send, or the next submit carries them.
            return;
        }
        if k.busy(self.now) {
            self.timers.set(Timer::FlushAcks(name.clone()), at);
            return;
        }
        let keys: Vec<CellKey> = k
            .acked
            .iter()
            .map(|seq| CellKey {
                kernel: name.clone(),
                seq: *seq,
            })
            .collect();
        for key in keys {
            self.start(Task::Ack(key));
        }
    }

    /// The agent confirmed that these cells' journals are gone.
    pub(crate) fn acks_done(&mut self, name: &KernelName, seqs: &[CellSeq]) {
        if let Some(k) = self.kernels.get_mut(name) {
            for seq in seqs {
                k.acked.remove(seq);
            }
        }
    }

    /// The agent refused a submit: the cell's sequence number holds other
    /// work. Nothing of this cell was recorded, so it resolves as an
    /// error that says why, and the kernel's next cells continue from the
    /// number the agent gave (`next`): a client with no record of a
    /// kernel that another client drove (another state directory) starts
    /// at 1, learns here where the kernel is, and its next run goes
    /// through. Never a wait: the cell in that place is not this one.
    pub(crate) fn on_seq_taken(&mut self, key: &CellKey, next: Option<CellSeq>, why: String) {
        let mut message = format!("{CELL_REFUSED}: {why}");
        if let Some(next) = next {
            if let Some(k) = self.kernels.get_mut(&key.kernel) {
                k.next_seq = k.next_seq.max(next.0);
            }
            message = format!(
                "{CELL_REFUSED}: kernel {} already ran cells up to {} under another client's record (another state directory, or a lost one): nothing ran; this client continues from cell {next}, {RUN_AGAIN} ({why})",
                key.kernel,
                next.0 - 1,
            );
        }
        // The cells queued behind it, held back until its submit ended
        // ([`Client::submit_held`]), are refused with it: run now, they
        // would run before it (drawn_clients seed 600341: the second of
        // two cells queued at once read a name the refused first had not
        // set).
        let behind: Vec<CellKey> = self
            .kernels
            .get(&key.kernel)
            .map(|k| {
                k.cells
                    .range(CellSeq(key.seq.0 + 1)..)
                    .filter(|(_, c)| !c.resolved && !c.rec.submitted)
                    .map(|(seq, _)| CellKey {
                        kernel: key.kernel.clone(),
                        seq: *seq,
                    })
                    .collect()
            })
            .unwrap_or_default();
        for later in behind {
            let message = format!(
                "{CELL_REFUSED}: cell {key}, queued before it, was refused: nothing ran; {RUN_AGAIN}"
            );
            self.resolve(&later, CellOutcome::Error { message }, false);
        }
        self.resolve(key, CellOutcome::Error { message }, false);
        self.persist(&key.kernel);
    }

    /// Cancelled, or timed out when the client's timeout asked for it.
    pub(crate) fn cancelled_outcome(&self, key: &CellKey) -> CellOutcome {
        match self.cell(key) {
            Some(c) if c.rec.timed_out => CellOutcome::TimedOut,
            _ => CellOutcome::Cancelled,
        }
    }

    /// Reports the cell's outcome and stops its work. `keep` leaves it in
    /// the record (for `unknown`: a later process may resume it).
    pub(crate) fn resolve(&mut self, key: &CellKey, outcome: CellOutcome, keep: bool) {
        let Some(kernel) = self.kernels.get_mut(&key.kernel) else {
            return;
        };
        let Some(cell) = kernel.cells.get_mut(&key.seq) else {
            return;
        };
        if cell.resolved {
            return;
        }
        cell.resolved = true;
        if !keep {
            kernel.cells.remove(&key.seq);
            self.forget_calls(|c| c == key);
        }
        for task in [
            Task::Submit(key.clone()),
            Task::Wait(key.clone()),
            Task::Cancel(key.clone()),
        ] {
            self.drop_task(&task);
        }
        self.timers.stop(&Timer::CellTimeout(key.clone()));
        self.events.push_back(Event::CellResolved {
            cell: key.clone(),
            outcome,
        });
        if !keep {
            self.persist(&key.kernel);
        }
        self.release_due.insert(key.kernel.clone());
    }

    /// Asks for a cell to be cancelled (by the frontend or its timeout).
    pub(crate) fn request_cancel(&mut self, key: &CellKey) {
        let now = self.now;
        let Some(cell) = self.cell_mut(key) else {
            return;
        };
        if cell.resolved {
            return;
        }
        if cell.fallback {
            self.note(
                Some(key.kernel.clone()),
                format!("cell {key} runs without a kernel: tether cannot cancel it; it runs to its end (or its timeout)"),
            );
            return;
        }
        if !cell.rec.submitted {
            // Never sent: nothing on the sandbox to stop.
            let outcome = self.cancelled_outcome(key);
            self.resolve(key, outcome, false);
            return;
        }
        let held = cell.awaits_answer(now);
        if !cell.rec.cancel_requested {
            cell.rec.cancel_requested = true;
            self.persist(&key.kernel);
        }
        if !self.tasks.contains_key(&Task::Cancel(key.clone())) {
            self.start(Task::Cancel(key.clone()));
        }
        let ready = self
            .kernels
            .get(&key.kernel)
            .is_some_and(|k| k.phase == super::kernel::Phase::Ready);
        if held && ready {
            // The wait held back for a tool call's answer goes now: the
            // cancel's end comes on it.
            self.wake_wait(key);
        }
    }

    /// The cell's own timeout fired: cancel it (never the kernel).
    pub(crate) fn on_cell_timeout(&mut self, key: &CellKey) {
        let Some(cell) = self.cell_mut(key) else {
            return;
        };
        if cell.resolved {
            return;
        }
        cell.rec.timed_out = true;
        let after = cell.rec.timeout_ms.unwrap_or(0);
        self.note(
            Some(key.kernel.clone()),
            format!("cell {key} ran past its timeout of {after} ms: cancelling it"),
        );
        self.request_cancel(key);
    }

    /// Queues a new cell on `kernel`; returns its key.
    pub(crate) fn add_cell(
        &mut self,
        kernel: &KernelName,
        code: Bytes,
        timeout: Option<Duration>,
    ) -> Option<CellKey> {
        let request_id = self.fresh_request_id();
        let now = self.now;
        let k = self.kernels.get_mut(kernel)?;
        let seq = CellSeq(k.next_seq);
        k.next_seq += 1;
        let timeout_ms = timeout.map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX));
        k.cells
            .insert(seq, Cell::new(seq, request_id, code, timeout_ms));
        let key = CellKey {
            kernel: kernel.clone(),
            seq,
        };
        if let Some(t) = timeout {
            self.timers.set(Timer::CellTimeout(key.clone()), now + t);
        }
        Some(key)
    }

    /// Pushes the kernel's record for the driver to write.
    pub(crate) fn persist(&mut self, kernel: &KernelName) {
        if let Some(record) = self.record(kernel) {
            self.effects.push_back(Effect::Persist(record));
        }
    }
}
