//! The client state machine: sans-IO, shaped like `quinn-proto`.
//!
//! A [`Client`] manages many kernels on one sandbox. Commands and results
//! go in through methods that take `now`; [`Effect`]s (execs to run,
//! records to persist) and [`Event`]s (what the frontend sees) come out of
//! queues; [`Client::poll_timeout`] says when to call
//! [`Client::handle_timeout`].
//!
//! - [`config`]: [`Config`] and its defaults;
//! - [`event`]: [`Effect`], [`Event`], [`CellKey`], [`TransportError`], [`ClientError`];
//! - [`record`]: [`KernelRecord`], what is persisted for resume;
//! - `kernel`: connect (probe or spawn), probe verdicts, state lost, giving up;
//! - `cell`: submit, journal delivery (dedup, gaps), resolve, cancel, timeout;
//! - `exec`: sending tasks, reply parsing, retries, install on first use;
//! - `fallback`: fail open, a cell run once without a kernel;
//! - `reaper`: idle timeout and LRU cap;
//! - `retry`: tasks, attempts, backoff;
//! - `timer`: the timer enum and table.

pub mod config;
pub mod event;
pub mod record;

mod cell;
mod exec;
mod fallback;
mod kernel;
mod reaper;
mod retry;
mod timer;

pub use config::Config;
pub use event::{CellKey, ClientError, Effect, Event, TransportError, TransportErrorKind};
pub use exec::{asks_to_run_again, CELL_REFUSED, JOURNAL_UNREADABLE, RUN_AGAIN};
pub use kernel::{KERNEL_NOT_STARTED, LOST_IN_FLIGHT};
pub use record::{CallRecord, CellRecord, KernelRecord};
pub use retry::backoff;

use crate::bytes::Bytes;
use crate::ids::{ExecId, KernelName, RequestId};
use crate::protocol::{CallReply, ExecOutput, Lang};
use crate::time::Timestamp;
use cell::Cell;
use exec::InstallState;
use kernel::{Kernel, Phase};
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use retry::{Task, TaskState};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;
use timer::{Timer, TimerTable};

/// The client state machine for many kernels on one sandbox.
///
/// # Driving it
///
/// After **every** call that takes `now` (a command, [`Client::handle_exec`]
/// or [`Client::handle_timeout`]), drain in this order:
///
/// 1. [`Client::poll_effect`] until `None`, carrying each out in order. An
///    [`Effect::Persist`] must be durable before any later effect is carried
///    out (a record always precedes the submit it describes), and the
///    events queued so far must be delivered (step 2) before it is made
///    durable: a persisted cursor then never covers output the frontend has
///    not been handed (a crash between the two repeats output on resume,
///    it never loses any). An
///    [`Effect::Exec`] is started (not awaited) and its result, or a
///    [`TransportError`] at its deadline, goes to [`Client::handle_exec`].
/// 2. [`Client::poll_event`] until `None`, for the frontend.
/// 3. [`Client::poll_timeout`]: call [`Client::handle_timeout`] at that time
///    (or earlier; firing early is harmless, nothing is due yet).
///
/// # Time
///
/// Time never goes backwards: a `now` earlier than the latest one seen is
/// clamped to it, so a driver's clock jump backwards delays timers rather
/// than reordering them. Deadlines in effects and from
/// [`Client::poll_timeout`] are computed from that clamped time.
///
/// # Guarantees
///
/// - Every op is idempotent and is re-sent only after a transport error, a
///   garbage reply or its deadline, with exponential backoff, at most
///   [`Config::max_attempts`] times; a re-sent submit carries the same
///   request id and sequence. Each send has a fresh [`ExecId`]; results for
///   ids the client no longer waits for are ignored (with a
///   [`Event::Note`]).
/// - Output is delivered in journal order exactly once per client.
/// - [`Event::StateLost`] only follows a probe that said dead or replaced
///   (or found no trace of a daemon it was told to expect), or the same
///   verdict from a submit that carried the expected identity
///   ([`crate::protocol::Reply::IdentityMismatch`]).
/// - A warm cell costs one exec: its submit carries the daemon's expected
///   identity (no probe first) and the acknowledgements of the cells
///   resolved before it (no ack exec after); acknowledgements that find no
///   submit within [`Config::ack_delay`] are sent on their own.
/// - A sandbox that does not answer for [`Config::unreachable_after`] makes
///   the kernel's cells `unknown` and keeps their record; it never causes a
///   respawn.
///
/// Randomness (nonces, request ids) comes from a `ChaCha8Rng` seeded by the
/// `seed` given to [`Client::new`], so a run is reproducible.
pub struct Client {
    config: Config,
    rng: ChaCha8Rng,
    now: Timestamp,
    next_exec: u64,
    kernels: BTreeMap<KernelName, Kernel>,
    /// Next sequence numbers of kernels that are gone, so a kernel opened
    /// again under the same name never reuses a [`CellKey`].
    retired: BTreeMap<KernelName, u64>,
    /// Kernels whose shutdown was given up on (every attempt failed): the
    /// client forgot them, but their directories stay on the sandbox (an
    /// idle daemon exits, its files do not), so the shutdown is sent again
    /// once the sandbox answers, or when asked for by name.
    owed_shutdowns: BTreeMap<KernelName, Lang>,
    /// Tool calls this client asked its frontend about that have no answer
    /// yet: a kernel resumed in the same process (after it was given up
    /// on) does not ask again, which would run the tool twice.
    asked: BTreeSet<(CellKey, String)>,
    tasks: BTreeMap<Task, TaskState>,
    execs: BTreeMap<ExecId, Task>,
    install: InstallState,
    timers: TimerTable,
    /// Kernels whose held submits ([`Client::submit_held`]) may go: looked
    /// at once the input that released them is fully handled (at the next
    /// [`Client::poll_effect`]), never in the middle of it. A loop that
    /// resolves several cells (a loss, a refusal) would otherwise send the
    /// next one's submit before resolving it too, and the send cannot be
    /// taken back (`queued` seed 710296: a cell resolved as lost with its
    /// sandbox ran on the fresh one).
    release_due: BTreeSet<KernelName>,
    effects: VecDeque<Effect>,
    events: VecDeque<Event>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("now", &self.now)
            .field("kernels", &self.kernels.keys().collect::<Vec<_>>())
            .field("tasks", &self.tasks.keys().collect::<Vec<_>>())
            .field("in_flight", &self.in_flight())
            .finish()
    }
}

impl Client {
    /// A client with no kernels; `seed` drives nonces and request ids.
    pub fn new(config: Config, seed: u64) -> Client {
        Client {
            config,
            rng: ChaCha8Rng::seed_from_u64(seed),
            now: Timestamp::ZERO,
            next_exec: 1,
            kernels: BTreeMap::new(),
            retired: BTreeMap::new(),
            asked: BTreeSet::new(),
            owed_shutdowns: BTreeMap::new(),
            tasks: BTreeMap::new(),
            execs: BTreeMap::new(),
            install: InstallState::Unknown,
            timers: TimerTable::default(),
            release_due: BTreeSet::new(),
            effects: VecDeque::new(),
            events: VecDeque::new(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Opens a kernel: spawns its daemon (installing the agent first if it
    /// is missing). A kernel already open is left as it is; one that was
    /// given up on (unreachable or failed) is connected again, by probing
    /// its recorded daemon first if it has one.
    pub fn open(&mut self, kernel: KernelName, lang: Lang, now: Timestamp) {
        self.advance(now);
        match self.kernels.get_mut(&kernel) {
            Some(k) => {
                k.last_used = self.now;
                match k.phase {
                    Phase::Unreachable | Phase::Failed => self.connect(&kernel),
                    Phase::ShuttingDown => self.note(
                        Some(kernel.clone()),
                        format!("kernel {kernel} is shutting down; open it again once it is gone"),
                    ),
                    _ => {}
                }
            }
            None => {
                // Opened again: its own shutdown will cover what the old
                // one left.
                let shutdown_owed = self.owed_shutdowns.remove(&kernel).is_some();
                let mut k = Kernel::new(kernel.clone(), lang, self.now);
                // A kernel this client shut down (its eviction told of
                // that loss) may have run again since under another
                // client, on a daemon now gone: once the shutdown removed
                // the kernel, a fresh spawn's `ran_before` counts only
                // cells run since (drawn_clients seed 201515, no faults:
                // the other frontend bound a name after this one's
                // eviction, its daemon exited idle, and this one's cell
                // met a NameError nobody announced). A shutdown still
                // owed removed nothing: the cells counted up to this
                // client's own last are its own, whose loss the eviction
                // told (reaper seed 500205 of the `--max-faults 8` long
                // run); those numbered past them another client ran since.
                let retired_next = self.retired.get(&kernel).copied();
                k.newcomer = true;
                if shutdown_owed {
                    k.own_cells_up_to = retired_next.map_or(0, |n| n.saturating_sub(1));
                }
                k.next_seq = retired_next.unwrap_or(1);
                self.kernels.insert(kernel.clone(), k);
                self.connect(&kernel);
            }
        }
        self.arm_reap();
    }

    /// Queues a cell on an open kernel and returns its key. The record
    /// holding the cell is persisted ([`Effect::Persist`]) before its first
    /// submit. A kernel that was given up on is connected again first.
    /// Refused ([`ClientError::UnresolvedCell`]) while the kernel keeps a
    /// cell written off as `unknown` that may still run (its submit may
    /// have reached the daemon, no cancel asked for): the daemon runs a
    /// kernel's cells in order, so the new one would wait behind it,
    /// for ever behind a loop. [`Client::resume`] or [`Client::cancel`] it
    /// first.
    pub fn run_cell(
        &mut self,
        kernel: &KernelName,
        code: Bytes,
        timeout: Option<Duration>,
        now: Timestamp,
    ) -> Result<CellKey, ClientError> {
        self.advance(now);
        let k = self
            .kernels
            .get_mut(kernel)
            .ok_or_else(|| ClientError::UnknownKernel(kernel.clone()))?;
        if k.phase == Phase::ShuttingDown {
            return Err(ClientError::KernelShuttingDown(kernel.clone()));
        }
        let kept = k.kept_maybe_running();
        if !kept.is_empty() {
            return Err(ClientError::UnresolvedCell {
                kernel: kernel.clone(),
                seqs: kept,
            });
        }
        k.last_used = self.now;
        // The give-up timer measures silence while a cell waits: silence
        // while none did (a spawn still being retried after its cell was
        // cancelled, say) must not give this new cell up before its first
        // exec (two_kernels 500070: given up at once after a 27 s outage).
        if k.in_flight() == 0 {
            k.last_contact = self.now;
        }
        let phase = k.phase.clone();
        let key = self
            .add_cell(kernel, code, timeout)
            .ok_or_else(|| ClientError::UnknownKernel(kernel.clone()))?;
        match phase {
            Phase::Ready => self.submit_cell(&key),
            Phase::Unreachable | Phase::Failed => {
                self.persist(kernel);
                self.connect(kernel);
            }
            _ => self.persist(kernel),
        }
        self.arm_give_up(kernel);
        self.arm_reap();
        Ok(key)
    }

    /// Cancels a cell. Works at any time, even before the submit's reply:
    /// the cancel is sent at once (a tombstone if the cell has not started)
    /// and re-sent until the agent answers. A cell never sent resolves as
    /// cancelled at once.
    pub fn cancel(&mut self, cell: &CellKey, now: Timestamp) {
        self.advance(now);
        match self.cell(cell) {
            Some(c) if !c.resolved => self.request_cancel(cell),
            _ => self.note(
                Some(cell.kernel.clone()),
                format!("cancel of {cell} ignored: it is not in flight"),
            ),
        }
        self.arm_reap();
    }

    /// Rebuilds a kernel and its unresolved cells from a persisted record
    /// (in a new process): the daemon is probed, then every submitted cell
    /// is waited for from its cursor, never submitted again. With `replay`
    /// the wait starts at cursor 0 and everything is delivered again. A
    /// kernel of that name already in this client is replaced. A record
    /// marked shutting down has its shutdown sent again instead.
    pub fn resume(&mut self, record: KernelRecord, replay: bool, now: Timestamp) {
        self.advance(now);
        let name = record.kernel.clone();
        if self.kernels.contains_key(&name) {
            self.remove_kernel(&name);
        }
        if record.shutting_down {
            // An earlier process began this kernel's shutdown and never saw
            // it answered: send it again; its cells died with the kernel.
            let next = self.retired.get(&name).copied().unwrap_or(1);
            self.retired.insert(name.clone(), record.next_seq.max(next));
            self.owed_shutdowns.insert(name.clone(), record.lang);
            self.resend_owed_shutdown(&name);
            self.arm_reap();
            return;
        }
        let mut k = Kernel::new(name.clone(), record.lang, self.now);
        k.identity = record.identity;
        k.spawn_nonce = record.spawning;
        k.acked = record.acked.into_iter().collect();
        let max_seq = record.cells.iter().map(|c| c.seq.0).max().unwrap_or(0);
        let retired = self.retired.get(&name).copied().unwrap_or(1);
        k.next_seq = record.next_seq.max(max_seq + 1).max(retired);
        for rec in record.cells {
            let timeout = rec.timeout_ms.map(Duration::from_millis);
            let key = CellKey {
                kernel: name.clone(),
                seq: rec.seq,
            };
            // Calls the frontend was asked about and did not answer before
            // the last client went: ask again (answered ones are re-sent).
            let mut asked_again = Vec::new();
            for (id, call) in rec.calls.iter().filter(|(_, c)| c.unanswered()) {
                if !self.asked.insert((key.clone(), id.clone())) {
                    continue;
                }
                asked_again.push(id.clone());
                self.events.push_back(Event::ToolCall {
                    cell: key.clone(),
                    id: id.clone(),
                    name: call.name.clone(),
                    args: call.args.clone(),
                });
            }
            let mut cell = Cell::resumed(rec, replay);
            if !asked_again.is_empty() {
                // Held back for the answers asked again, as for a new call.
                let until = self.now + Duration::from_millis(self.config.wait_ms);
                cell.answer_hold_until = Some(until);
                cell.held_for = asked_again.into_iter().collect();
                self.timers.set(Timer::AnswerHold(key.clone()), until);
            }
            k.cells.insert(cell.rec.seq, cell);
            if let Some(t) = timeout {
                self.timers.set(Timer::CellTimeout(key), self.now + t);
            }
        }
        let never_sent: Vec<CellKey> = k
            .cells
            .values()
            .filter(|c| c.rec.cancel_requested && !c.rec.submitted)
            .map(|c| CellKey {
                kernel: name.clone(),
                seq: c.rec.seq,
            })
            .collect();
        // A daemon with cells in flight is probed before they are waited
        // for; otherwise the next submit checks it (it carries the identity).
        let probe = k.identity.is_none() || k.cells.values().any(|c| c.rec.submitted);
        self.kernels.insert(name.clone(), k);
        for key in never_sent {
            self.request_cancel(&key);
        }
        if probe {
            self.connect(&name);
        } else {
            self.assume_ready(&name);
        }
        self.arm_reap();
    }

    /// The frontend's answer to the tool call `id` of `cell` (an
    /// [`Event::ToolCall`]): kept in the cell's record
    /// ([`Effect::Persist`]) before it is sent, on the cell's next wait.
    /// A result over [`crate::protocol::calls::MAX_RESULT`] becomes an
    /// error that says so. A second answer for a call, or one for a call
    /// or cell the client does not know, changes nothing (a note says so).
    pub fn answer_call(&mut self, cell: &CellKey, id: &str, reply: CallReply, now: Timestamp) {
        self.advance(now);
        let reply = crate::protocol::calls::bounded(reply);
        let was_idle = self
            .kernels
            .get(&cell.kernel)
            .is_some_and(|k| !k.busy(self.now));
        let problem = match self
            .cell_mut(cell)
            .filter(|c| !c.resolved)
            .map(|c| c.rec.calls.get_mut(id))
        {
            None => Some(format!(
                "answer to call {id} of {cell} ignored: the cell is not in flight"
            )),
            Some(None) => Some(format!(
                "answer to call {id} of {cell} ignored: no such call"
            )),
            Some(Some(call)) if !call.unanswered() => Some(format!(
                "answer to call {id} of {cell} ignored: it is answered already"
            )),
            Some(Some(call)) => {
                call.answer = Some(reply.clone());
                self.asked.remove(&(cell.clone(), id.to_owned()));
                None
            }
        };
        match problem {
            Some(text) => self.note(Some(cell.kernel.clone()), text),
            None => {
                // The sandbox was not needed while the frontend worked on
                // the answer: its silence counts from now.
                if let Some(k) = self.kernels.get_mut(&cell.kernel).filter(|_| was_idle) {
                    k.last_contact = self.now;
                }
                self.events.push_back(Event::ToolReplied {
                    cell: cell.clone(),
                    id: id.to_owned(),
                    reply,
                });
                self.persist(&cell.kernel);
                // Not ready (a resumed kernel still being probed): the wait
                // goes when it is, with the answer.
                if self
                    .kernels
                    .get(&cell.kernel)
                    .is_some_and(|k| k.phase == Phase::Ready)
                {
                    self.wake_wait(cell);
                }
                self.arm_give_up(&cell.kernel);
            }
        }
        self.arm_reap();
    }

    /// Shuts a kernel down: its unresolved cells resolve as cancelled, its
    /// record may be forgotten ([`Effect::Forget`]) and the agent stops the
    /// daemon and everything it owns.
    pub fn shutdown(&mut self, kernel: &KernelName, now: Timestamp) {
        self.advance(now);
        match self.kernels.get(kernel).map(|k| &k.phase) {
            None if self.owed_shutdowns.contains_key(kernel) => {
                self.resend_owed_shutdown(kernel);
            }
            None => self.note(
                Some(kernel.clone()),
                format!("shutdown of {kernel} ignored: it is not open"),
            ),
            Some(Phase::ShuttingDown) => {}
            Some(_) => self.begin_shutdown(kernel),
        }
        self.arm_reap();
    }

    /// The result of the exec of [`Effect::Exec`] `id`: its output, or the
    /// transport's failure (including its deadline passing).
    pub fn handle_exec(
        &mut self,
        id: ExecId,
        result: Result<ExecOutput, TransportError>,
        now: Timestamp,
    ) {
        self.advance(now);
        self.on_exec(id, result);
        self.arm_reap();
    }

    /// Fires every timer due at `now`: exec deadlines, retries, cell
    /// timeouts, giving up on silent kernels, reaping.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        self.advance(now);
        while let Some(timer) = self.timers.pop_due(self.now) {
            match timer {
                Timer::ExecDeadline(id) => {
                    if let Some(task) = self.execs.remove(&id) {
                        if let Some(state) = self.tasks.get_mut(&task) {
                            state.exec = None;
                        }
                        if self.shutdown_held_for(&task) {
                            continue;
                        }
                        let why = format!("exec {id} passed its deadline");
                        if let Task::Fallback(key) = &task {
                            // A plain exec is never sent again (it may
                            // still run): as when the driver times it out.
                            let e = event::TransportError {
                                kind: event::TransportErrorKind::TimedOut,
                                detail: why,
                            };
                            let key = key.clone();
                            self.on_plain_exec(&key, Err(e));
                            continue;
                        }
                        self.mark_uncertain(&task);
                        self.retry_later(task, why);
                    }
                }
                Timer::Retry(task) => {
                    if self.tasks.get(&task).is_some_and(|s| s.exec.is_none()) {
                        self.send(&task);
                    }
                }
                Timer::CellTimeout(key) => self.on_cell_timeout(&key),
                Timer::GiveUp(name) => self.on_give_up_timer(&name),
                Timer::Reap => self.reap(),
                Timer::FlushAcks(name) => self.flush_acks(&name),
                Timer::AnswerHold(key) => self.on_answer_hold(&key),
            }
        }
        self.arm_reap();
    }

    /// The next effect to carry out, in order.
    #[must_use]
    pub fn poll_effect(&mut self) -> Option<Effect> {
        for kernel in std::mem::take(&mut self.release_due) {
            self.release_held(&kernel);
        }
        self.effects.pop_front()
    }

    /// The next event for the frontend, in order.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When [`Client::handle_timeout`] must next be called; `None` when no
    /// timer is set.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        self.timers.next()
    }

    /// The kernel's record as it would be persisted now.
    pub fn record(&self, kernel: &KernelName) -> Option<KernelRecord> {
        self.kernels
            .get(kernel)
            .filter(|k| k.phase != Phase::ShuttingDown)
            .map(Kernel::record)
    }

    /// Unresolved cells over all kernels.
    pub fn in_flight(&self) -> usize {
        self.kernels.values().map(Kernel::in_flight).sum()
    }

    /// Unresolved cells whose next wait is held back for the frontend's
    /// answer to a tool call (at the last time the client was given).
    pub fn awaiting_answers(&self) -> usize {
        self.kernels
            .values()
            .flat_map(|k| k.cells.values())
            .filter(|c| !c.resolved && c.awaits_answer(self.now))
            .count()
    }

    /// Tool calls the frontend was asked about and has not answered, of
    /// cells still in this client's record (a status line's "waiting on
    /// N tool calls").
    pub fn calls_awaiting_frontend(&self) -> usize {
        self.asked.len()
    }

    /// A cell left the record: its unanswered calls can never be answered
    /// (an answer finds no cell in flight), so they are forgotten.
    pub(crate) fn forget_calls(&mut self, of: impl Fn(&CellKey) -> bool) {
        self.asked.retain(|(cell, _)| !of(cell));
    }

    /// Kernels this client holds (open, opening, given up or shutting down).
    pub fn kernels(&self) -> impl Iterator<Item = &KernelName> {
        self.kernels.keys()
    }

    fn advance(&mut self, now: Timestamp) {
        self.now = self.now.max(now);
    }

    fn note(&mut self, kernel: Option<KernelName>, text: String) {
        self.events.push_back(Event::Note { kernel, text });
    }

    fn fresh_nonce(&mut self) -> String {
        format!("{:016x}", self.rng.next_u64())
    }

    fn fresh_request_id(&mut self) -> RequestId {
        RequestId(format!(
            "{:016x}{:016x}",
            self.rng.next_u64(),
            self.rng.next_u64()
        ))
    }
}
