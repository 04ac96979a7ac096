//! Sending tasks as execs and reading their results: reply parsing,
//! retries after transport errors and garbage, install-on-first-use, and
//! what each kind of agent error means.

use super::event::{Effect, TransportError, TransportErrorKind};
use super::kernel::Phase;
use super::retry::{backoff, Task, TaskState};
use super::timer::Timer;
use super::Client;
use crate::ids::ExecId;
use crate::protocol::{parse_reply, AgentError, ErrorKind, ExecOutput, Op, Reply, ReplyError};

/// How a cell the agent refused for good begins its error (the agent's
/// reason follows).
pub const CELL_REFUSED: &str = "the agent refused the cell";

/// What the error of a cell refused because another client record ran
/// its kernel past the cell's number ends its account with (nothing ran;
/// this client now continues after the kernel, see [`asks_to_run_again`]).
pub const RUN_AGAIN: &str = "run the cell again";

/// Was `outcome` a refusal that asks the caller to run the cell again
/// (another client record ran the kernel further: nothing of this cell
/// ran, and the next try goes through)? A frontend may do so itself.
pub fn asks_to_run_again(outcome: &crate::protocol::CellOutcome) -> bool {
    matches!(outcome, crate::protocol::CellOutcome::Error { message }
        if message.starts_with(CELL_REFUSED) && message.contains(RUN_AGAIN))
}

/// How a cell whose journal the agent refused to read begins its
/// `unknown` reason (the agent's reason follows).
pub const JOURNAL_UNREADABLE: &str = "the agent cannot read the cell's journal";

/// Whether the agent binary is known to be in place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum InstallState {
    /// Not known (assume it is: most ops find it).
    Unknown,
    /// An install is under way; tasks that found no agent wait for it.
    Running,
}

impl Client {
    /// Starts `task` afresh (a task already running is left alone).
    pub(crate) fn start(&mut self, task: Task) {
        if self.tasks.contains_key(&task) {
            return;
        }
        self.tasks.insert(task.clone(), TaskState::default());
        self.send(&task);
    }

    /// Sends one attempt of `task` as a new exec.
    pub(crate) fn send(&mut self, task: &Task) {
        let Some(op) = self.build_op(task) else {
            // Its reason to exist is gone (cell resolved, kernel moved on).
            self.drop_task(task);
            return;
        };
        let id = ExecId(self.next_exec);
        self.next_exec += 1;
        let deadline = match task {
            Task::Fallback(key) => self.plain_deadline(key),
            _ => self.now + self.config.exec_budget(),
        };
        let Some(state) = self.tasks.get_mut(task) else {
            return;
        };
        if let Op::Submit { ack, expect, .. } = &op {
            state.acks.clone_from(ack);
            state.expect.clone_from(expect);
        }
        state.attempts += 1;
        state.exec = Some(id);
        state.after_install = false;
        self.execs.insert(id, task.clone());
        self.timers.stop(&Timer::Retry(task.clone()));
        self.timers.set(Timer::ExecDeadline(id), deadline);
        self.effects.push_back(Effect::Exec { id, op, deadline });
    }

    fn build_op(&self, task: &Task) -> Option<Op> {
        match task {
            Task::Install => Some(Op::Install {
                hash: self.config.location.hash.clone(),
                size: self.config.agent_size,
            }),
            Task::Probe(_) | Task::Spawn(_) | Task::Shutdown(_) => self.kernel_op(task),
            Task::Submit(_) | Task::Wait(_) | Task::Cancel(_) | Task::Ack(_) => self.cell_op(task),
            Task::Fallback(key) => self.plain_op(key),
        }
    }

    /// Forgets `task`: its exec's late result will be ignored.
    pub(crate) fn drop_task(&mut self, task: &Task) {
        if let Some(state) = self.tasks.remove(task) {
            if let Some(id) = state.exec {
                self.execs.remove(&id);
                self.timers.stop(&Timer::ExecDeadline(id));
            }
        }
        self.timers.stop(&Timer::Retry(task.clone()));
    }

    /// An exec finished (or failed to).
    pub(crate) fn on_exec(&mut self, id: ExecId, result: Result<ExecOutput, TransportError>) {
        let Some(task) = self.execs.remove(&id) else {
            self.note(
                None,
                format!("ignored the result of exec {id}: it was given up on or never sent"),
            );
            return;
        };
        self.timers.stop(&Timer::ExecDeadline(id));
        if let Some(state) = self.tasks.get_mut(&task) {
            state.exec = None;
        }
        if self.shutdown_held_for(&task) {
            return;
        }
        if let Task::Fallback(key) = &task {
            #[cfg(feature = "mutations")]
            if let Err(e) = &result {
                if crate::mutation::active(crate::mutation::Mutation::PlainExecResent) {
                    return self.retry_later(task, e.to_string());
                }
            }
            return self.on_plain_exec(key, result);
        }
        let out = match result {
            Ok(out) => out,
            Err(e) => {
                #[cfg(feature = "mutations")]
                let task = match self.mutant_transport_error(task, &e) {
                    Some(task) => task,
                    None => return,
                };
                if e.kind != TransportErrorKind::Unreachable && !io_error_taken_as_unsent(&e) {
                    // It may have reached the sandbox and run there.
                    self.mark_uncertain(&task);
                }
                return self.retry_later(task, e.to_string());
            }
        };
        match parse_reply(id.0, task.op_kind(), &out) {
            Ok(reply) => {
                self.reached(&task);
                let sent = self.tasks.get(&task).cloned().unwrap_or_default();
                self.drop_task(&task);
                self.on_reply(task, reply, sent);
            }
            Err(ReplyError::AgentMissing { stderr }) if task != Task::Install => {
                self.reached(&task);
                self.agent_missing(task, stderr);
            }
            Err(ReplyError::Agent(e)) => {
                self.reached(&task);
                self.on_agent_error(task, e);
            }
            Err(e @ ReplyError::Version { .. }) => {
                self.reached(&task);
                self.fatal(task, e.to_string());
            }
            Err(e) => {
                // Garbage from a command that ran.
                self.mark_uncertain(&task);
                self.retry_later(task, e.to_string())
            }
        }
    }

    /// An attempt of `task` ended without an answer after it may have
    /// reached the sandbox ([`TaskState::uncertain`]).
    pub(crate) fn mark_uncertain(&mut self, task: &Task) {
        if let Some(state) = self.tasks.get_mut(task) {
            state.uncertain = true;
        }
    }

    /// The sandbox answered: it is reachable (and owed shutdowns go).
    fn reached(&mut self, task: &Task) {
        if !self.owed_shutdowns.is_empty() {
            self.resend_owed_shutdowns();
        }
        match task.kernel() {
            Some(k) => {
                let k = k.clone();
                self.contact(&k);
            }
            None => {
                let names: Vec<_> = self.kernels.keys().cloned().collect();
                for k in names {
                    self.contact(&k);
                }
            }
        }
    }

    /// The agent binary is not there: install it, then send `task` again.
    fn agent_missing(&mut self, task: Task, stderr: String) {
        let max = self.config.max_attempts;
        let Some(state) = self.tasks.get_mut(&task) else {
            return;
        };
        // The sandbox answered: the failures before this reply no longer
        // count against the task, only agent-missing replies do.
        state.attempts = 0;
        state.missing += 1;
        if state.missing >= max {
            return self.exhausted(
                task,
                format!("the agent is still missing after installing it: {stderr}"),
            );
        }
        state.after_install = true;
        if self.install != InstallState::Running {
            self.install = InstallState::Running;
            self.note(
                None,
                "the agent is not on the sandbox: installing it".into(),
            );
            self.tasks.remove(&Task::Install);
            self.start(Task::Install);
        }
    }

    /// Sends every task that waited for the install.
    fn after_install(&mut self, ok: Result<(), (bool, String)>) {
        self.install = InstallState::Unknown;
        let parked: Vec<Task> = self
            .tasks
            .iter()
            .filter(|(_, s)| s.after_install)
            .map(|(t, _)| t.clone())
            .collect();
        for task in parked {
            match &ok {
                Ok(()) => self.send(&task),
                Err((true, why)) => self.fatal(task, why.clone()),
                Err((false, why)) => self.exhausted(task, why.clone()),
            }
        }
    }

    /// A transport error, a garbage reply or a deadline: send again after
    /// a backoff, or give up once the attempts are spent.
    pub(crate) fn retry_later(&mut self, task: Task, why: String) {
        let (base, max, limit) = (
            self.config.backoff_base,
            self.config.backoff_max,
            self.config.max_attempts,
        );
        if let Some(k) = task.kernel().and_then(|k| self.kernels.get_mut(k)) {
            k.last_error = Some(why.clone());
        }
        let state = self.tasks.entry(task.clone()).or_default();
        state.exec = None;
        let attempts = state.attempts.max(1);
        state.attempts = attempts;
        if attempts >= limit {
            return self.exhausted(
                task,
                format!("{attempts} attempts failed, the last with: {why}"),
            );
        }
        let at = self.now + backoff(base, max, attempts);
        self.timers.set(Timer::Retry(task), at);
    }

    /// Every attempt failed without an answer from the agent.
    fn exhausted(&mut self, task: Task, why: String) {
        self.drop_task(&task);
        match &task {
            Task::Install => self.after_install(Err((false, format!("installing the agent failed: {why}")))),
            Task::Ack(c) => self.note(Some(c.kernel.clone()), format!("could not acknowledge cell {c} ({why}); the kernel's next submit carries the acknowledgement")),
            Task::Shutdown(k) => {
                let k = k.clone();
                self.note(Some(k.clone()), format!("could not shut kernel {k} down ({why}); its daemon exits by itself when idle, and the shutdown is sent again once the sandbox answers"));
                self.owe_shutdown(&k);
            }
            _ => {
                if let Some(k) = task.kernel().cloned() {
                    self.give_up(&k, why);
                }
            }
        }
    }

    /// The agent refused in a way a resend will not fix.
    fn fatal(&mut self, task: Task, why: String) {
        self.drop_task(&task);
        match &task {
            Task::Install => {
                self.after_install(Err((true, format!("installing the agent failed: {why}"))))
            }
            Task::Probe(k) => {
                let k = k.clone();
                self.kernel_failed(&k, why);
            }
            Task::Spawn(k) => {
                let k = k.clone();
                self.kernel_cannot_start(&k, why);
            }
            Task::Submit(c) => {
                let c = c.clone();
                let message = format!("{CELL_REFUSED}: {why}");
                self.resolve(&c, crate::protocol::CellOutcome::Error { message }, false);
            }
            Task::Wait(c) => {
                let c = c.clone();
                let reason = format!("{JOURNAL_UNREADABLE}: {why}");
                self.resolve(&c, crate::protocol::CellOutcome::Unknown { reason }, false);
            }
            Task::Fallback(c) => {
                // Never sent again (it may have run); `on_plain_exec`
                // resolves it, this only covers a refusal to build it.
                let c = c.clone();
                let reason = format!("the plain exec could not be sent: {why}");
                self.resolve(&c, crate::protocol::CellOutcome::Unknown { reason }, false);
            }
            Task::Cancel(c) | Task::Ack(c) => {
                if let Task::Ack(c) = &task {
                    self.acks_done(&c.kernel, &[c.seq]);
                }
                self.note(Some(c.kernel.clone()), format!("{task:?} refused: {why}"));
            }
            Task::Shutdown(k) => {
                let k = k.clone();
                self.note(
                    Some(k.clone()),
                    format!("shutting kernel {k} down failed: {why}"),
                );
                self.shut_down(&k);
            }
        }
    }

    /// An error the agent reported, by task.
    fn on_agent_error(&mut self, task: Task, e: AgentError) {
        use ErrorKind as E;
        let why = e.to_string();
        match (&task, e.kind) {
            (_, E::Io) => {
                // The op may have failed after its first write (a submit
                // whose submission was written, then its sequence number
                // not: idle_exit seed 103673 ran the cell, and the client
                // took the error for "not recorded" and submitted it again
                // on the next daemon).
                self.mark_uncertain(&task);
                self.retry_later(task, why)
            }
            (Task::Spawn(k), E::Conflict) => {
                // A daemon this client has no record of runs the kernel (an
                // earlier client process spawned it and crashed before its
                // identity was persisted): probe it and adopt it.
                let k = k.clone();
                self.drop_task(&task);
                self.spawn_answered(&k);
                if let Some(kernel) = self.kernels.get_mut(&k) {
                    kernel.phase = Phase::Probing;
                }
                self.start(Task::Probe(k));
            }
            (Task::Submit(c), E::Conflict) => {
                let c = c.clone();
                self.drop_task(&task);
                self.on_seq_taken(&c, e.next_seq, why);
            }
            (Task::Probe(k), E::NoSuchKernel) => {
                let k = k.clone();
                self.drop_task(&task);
                self.on_probed(&k, crate::protocol::ProbeStatus::Absent, &[]);
            }
            (Task::Submit(c) | Task::Wait(c), E::KernelDead | E::NoSuchKernel) => {
                let k = c.kernel.clone();
                self.drop_task(&task);
                self.suspect(&k, why);
            }
            (Task::Wait(c), E::NoSuchCell)
                if self.cell(c).is_some_and(|c| {
                    c.rec.submitted && c.rec.cursor == 0 && !c.accepted && !c.resolved
                }) =>
            {
                // A cell in the record whose submit never reached the
                // sandbox (the process died between persisting and sending):
                // send it now, with the recorded request id, seq and code.
                // Submit is idempotent by request id, so this never runs it
                // twice. Once per process: a cell the agent accepted (here)
                // and then lost is not sent again (`fatal` → unknown), nor
                // one whose journal this record has read from (cursor > 0:
                // the cell existed, so it was acknowledged, not lost).
                let c = c.clone();
                self.drop_task(&task);
                self.note(
                    Some(c.kernel.clone()),
                    format!("cell {c} never reached the sandbox; submitting it now"),
                );
                self.submit_cell(&c);
            }
            (Task::Cancel(_) | Task::Ack(_), E::KernelDead | E::NoSuchKernel | E::NoSuchCell)
            | (Task::Shutdown(_), E::KernelDead | E::NoSuchKernel) => {
                // Nothing left to stop or remove.
                self.drop_task(&task);
                if let Task::Ack(c) = &task {
                    self.acks_done(&c.kernel, &[c.seq]);
                }
                if let Task::Shutdown(k) = &task {
                    let k = k.clone();
                    self.shut_down(&k);
                }
            }
            _ => self.fatal(task, why),
        }
    }

    /// A reply the agent gave for `task` (already finished; `sent` is the
    /// state of its last send).
    fn on_reply(&mut self, task: Task, reply: Reply, sent: TaskState) {
        match (task, reply) {
            (Task::Install, Reply::Installed { path }) => {
                self.note(None, format!("installed the agent at {path}"));
                self.after_install(Ok(()));
            }
            (
                Task::Probe(k),
                Reply::Probed {
                    status,
                    never_recorded,
                },
            ) => self.on_probed(&k, status, &never_recorded),
            (
                Task::Spawn(k),
                Reply::Spawned {
                    identity,
                    fresh,
                    ran_before,
                },
            ) => {
                self.spawn_answered(&k);
                self.ran_before(&k, ran_before);
                self.ready(&k, identity, fresh)
            }
            (Task::Submit(c), Reply::Submitted { acceptance, batch }) => {
                // The agent deleted the journals this submit acknowledged.
                self.acks_done(&c.kernel, &sent.acks);
                self.on_submitted(&c, acceptance, batch);
                // Recorded: the cells queued behind it may go now.
                self.release_due.insert(c.kernel.clone());
            }
            (
                Task::Submit(c),
                Reply::IdentityMismatch {
                    status,
                    recorded,
                    files_kept,
                },
            ) => {
                // An earlier send that was not answered may have run the
                // cell, unless the sandbox kept what would show it
                // (shim_killed_escapes seed 101837: a withdrawn cell's
                // answer was lost, and the resend's was taken for a loss).
                let may_have_run = recorded || (sent.uncertain && !files_kept);
                self.on_mismatch(&c, status, may_have_run, sent.expect)
            }
            (Task::Ack(c), Reply::Acked) => {
                self.acks_done(&c.kernel, &[c.seq]);
                self.persist(&c.kernel);
            }
            (Task::Wait(c), Reply::Waited { batch }) => self.on_batch(&c, batch, false),
            (Task::Shutdown(k), Reply::ShutDown { .. })
                if self
                    .kernels
                    .get(&k)
                    .is_some_and(|k| k.phase == Phase::ShuttingDown) =>
            {
                self.shut_down(&k);
            }
            // Cancel and ack replies need nothing more; parse_reply
            // guarantees the reply kind matches the op.
            _ => {}
        }
    }
}

/// The deliberately broken variants of [`crate::mutation`] (test builds of
/// the simulation only): what a naive client does after a transport error.
#[cfg(feature = "mutations")]
impl Client {
    /// Returns the task to retry as usual, or `None` when the mutant took over.
    fn mutant_transport_error(&mut self, task: Task, e: &TransportError) -> Option<Task> {
        use crate::mutation::{active, Mutation};
        if active(Mutation::TransportErrorIsDeath) {
            if let Some(k) = task.kernel().cloned() {
                self.drop_task(&task);
                self.state_lost(&k, format!("the sandbox did not answer: {e}"), false);
                return None;
            }
        }
        if active(Mutation::ResubmitNewId) {
            if let Task::Submit(old) = &task {
                // "The send failed, so send the work again": a new request
                // id under a new sequence number; the old cell is written off.
                let old = old.clone();
                let code = self.cell(&old).map(|c| c.rec.code.clone())?;
                let timeout = self
                    .cell(&old)
                    .and_then(|c| c.rec.timeout_ms)
                    .map(std::time::Duration::from_millis);
                self.drop_task(&task);
                let key = self.add_cell(&old.kernel, code, timeout)?;
                self.resolve(
                    &old,
                    crate::protocol::CellOutcome::Unknown {
                        reason: format!("resubmitted as {key}"),
                    },
                    false,
                );
                self.submit_cell(&key);
                return None;
            }
        }
        Some(task)
    }
}

/// The planted bug [`crate::mutation::Mutation::IoErrorTakenAsUnsent`]:
/// never, without the `mutations` feature.
fn io_error_taken_as_unsent(e: &TransportError) -> bool {
    #[cfg(feature = "mutations")]
    {
        e.kind == TransportErrorKind::Io
            && crate::mutation::active(crate::mutation::Mutation::IoErrorTakenAsUnsent)
    }
    #[cfg(not(feature = "mutations"))]
    {
        let _ = e;
        false
    }
}
