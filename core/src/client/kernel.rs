//! One kernel: how it is connected (probe a recorded daemon, or spawn a new
//! one), what a probe's verdict means, and how the client gives up.
//!
//! Only a probe that says *dead* or *replaced* (or finds no trace of a
//! daemon it was told to expect) is state lost. A sandbox that does not
//! answer is *unreachable*: the kernel's cells resolve as `unknown`, the
//! record is kept, nothing is respawned.

use super::cell::Cell;
use super::event::{CellKey, Event};
use super::record::KernelRecord;
use super::retry::Task;
use super::timer::Timer;
use super::Client;
use crate::ids::{CellSeq, KernelName};
use crate::protocol::{CellOutcome, Identity, Lang, Op, ProbeStatus, SentCell};
use crate::time::Timestamp;
use std::collections::{BTreeMap, BTreeSet};

/// How a cell refused because its kernel could not start begins (its
/// outcome's message; the agent's reason follows).
pub const KERNEL_NOT_STARTED: &str = "the kernel could not be started";
/// How a cell in flight ends when its kernel's state is lost (the
/// evidence follows): the op that proved the daemon gone ended the cell's
/// processes before it answered, so nothing of the cell runs on.
pub const LOST_IN_FLIGHT: &str = "the kernel's state was lost while the cell was in flight";

/// Where a kernel stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Probing the recorded daemon.
    Probing,
    /// Spawning a daemon under [`Kernel::spawn_nonce`].
    Spawning,
    /// The daemon runs; cells go to it.
    Ready,
    /// Given up: no successful exec for too long. Cells are `unknown`.
    Unreachable,
    /// The agent refused for good (wrong architecture, no python, …).
    Failed,
    /// Being shut down (by request or by the reaper).
    ShuttingDown,
}

/// A kernel as the client tracks it.
#[derive(Clone, Debug)]
pub(crate) struct Kernel {
    pub(crate) name: KernelName,
    pub(crate) lang: Lang,
    pub(crate) identity: Option<Identity>,
    pub(crate) phase: Phase,
    pub(crate) next_seq: u64,
    pub(crate) cells: BTreeMap<CellSeq, Cell>,
    /// Resolved cells whose acknowledgement the agent has not confirmed.
    pub(crate) acked: BTreeSet<CellSeq>,
    /// Last command or activity (for the reaper).
    pub(crate) last_used: Timestamp,
    /// Last successful exec, or the start of the current activity.
    pub(crate) last_contact: Timestamp,
    /// The last failure, for the unknown outcome's reason.
    pub(crate) last_error: Option<String>,
    /// Times the agent said "kernel dead" while a probe said alive, since
    /// the last cell completed; bounded so a confused agent can't loop us.
    pub(crate) recoveries: u32,
    /// The nonce of a spawn sent and not answered. Every spawn goes under
    /// it until the agent answers one (re-sends, and the next client
    /// process after a crash: it is persisted), so a copy of that spawn
    /// that arrives late finds its daemon, or its nonce shut: it never
    /// starts a daemon after the kernel's shutdown, as a copy under a
    /// nonce the client forgot would (sandbox_replaced seed 165).
    pub(crate) spawn_nonce: Option<String>,
    /// Opened by this client process with no record of the kernel, or
    /// again after its own shutdown of it: a fresh daemon whose kernel
    /// ran cells before it (since any shutdown) tells this client of a
    /// state it never saw, and that is gone ([`Client::ran_before`]).
    pub(crate) newcomer: bool,
    /// Of those, the cells this client itself ran, up to this number
    /// (opened again while its own shutdown of the kernel is still owed:
    /// nothing was removed, and the loss of its own cells was told by
    /// its eviction); 0 for a client that ran none there since any
    /// shutdown.
    pub(crate) own_cells_up_to: u64,
}

impl Kernel {
    pub(crate) fn new(name: KernelName, lang: Lang, now: Timestamp) -> Kernel {
        Kernel {
            name,
            lang,
            identity: None,
            phase: Phase::Probing,
            next_seq: 1,
            cells: BTreeMap::new(),
            acked: BTreeSet::new(),
            last_used: now,
            last_contact: now,
            last_error: None,
            recoveries: 0,
            spawn_nonce: None,
            newcomer: false,
            own_cells_up_to: 0,
        }
    }

    /// Unresolved cells.
    pub(crate) fn in_flight(&self) -> usize {
        self.cells.values().filter(|c| !c.resolved).count()
    }

    /// Cells written off as `unknown` and kept whose submit may have
    /// reached the daemon, with no cancel asked for: each may still run,
    /// and a later cell would wait behind it. A kept cell with a cancel
    /// asked for is not one: the cancel goes once the kernel answers
    /// ([`Client::drive_cell`]).
    pub(crate) fn kept_maybe_running(&self) -> Vec<CellSeq> {
        self.cells
            .values()
            .filter(|c| c.resolved && c.rec.submitted && !c.rec.cancel_requested)
            .map(|c| c.rec.seq)
            .collect()
    }

    /// Work is under way that needs the sandbox to answer (a cell that
    /// waits for the frontend's answer to a tool call does not).
    pub(crate) fn busy(&self, now: Timestamp) -> bool {
        matches!(self.phase, Phase::Probing | Phase::Spawning)
            || self
                .cells
                .values()
                .any(|c| !c.resolved && !c.awaits_answer(now))
    }

    /// The persisted form.
    pub(crate) fn record(&self) -> KernelRecord {
        KernelRecord {
            kernel: self.name.clone(),
            lang: self.lang,
            identity: self.identity.clone(),
            next_seq: self.next_seq,
            cells: self
                .cells
                .values()
                .filter(|c| !c.fallback)
                .map(|c| c.rec.clone())
                .collect(),
            acked: self.acked.iter().copied().collect(),
            shutting_down: self.phase == Phase::ShuttingDown,
            spawning: self.spawn_nonce.clone(),
        }
    }

    fn keys(&self) -> Vec<CellKey> {
        self.cells
            .keys()
            .map(|seq| CellKey {
                kernel: self.name.clone(),
                seq: *seq,
            })
            .collect()
    }
}

impl Client {
    /// Connects a kernel: probe the recorded daemon, or spawn one.
    pub(crate) fn connect(&mut self, name: &KernelName) {
        let now = self.now;
        let Some(k) = self.kernels.get_mut(name) else {
            return;
        };
        if !k.busy(now) {
            k.last_contact = now;
        }
        if k.identity.is_some() {
            k.phase = Phase::Probing;
            self.start(Task::Probe(name.clone()));
        } else {
            self.spawn(name);
        }
        self.arm_give_up(name);
    }

    /// Spawns a daemon: under the nonce of a spawn still unanswered, or a
    /// fresh one, persisted before the spawn is sent.
    fn spawn(&mut self, name: &KernelName) {
        let fresh = self.fresh_nonce();
        let Some(k) = self.kernels.get_mut(name) else {
            return;
        };
        k.phase = Phase::Spawning;
        if k.spawn_nonce.is_none() {
            k.spawn_nonce = Some(fresh);
            self.persist(name);
        }
        self.start(Task::Spawn(name.clone()));
    }

    /// The agent answered a spawn (started or found its daemon, or refused
    /// it for good): its nonce is spent.
    pub(crate) fn spawn_answered(&mut self, name: &KernelName) {
        if let Some(k) = self.kernels.get_mut(name) {
            k.spawn_nonce = None;
        }
    }

    /// Takes a recorded daemon as running without asking: its cells are
    /// submitted with the identity as `expect`, so the submit itself is the
    /// liveness check (a daemon that is gone answers
    /// [`crate::protocol::Reply::IdentityMismatch`] and nothing is
    /// recorded). Only for a kernel none of whose cells was submitted: one
    /// that has cells in flight is probed first ([`Client::connect`]).
    pub(crate) fn assume_ready(&mut self, name: &KernelName) {
        let Some(k) = self.kernels.get_mut(name) else {
            return;
        };
        k.phase = Phase::Ready;
        let keys = k.keys();
        for key in keys {
            self.drive_cell(&key);
        }
        self.arm_give_up(name);
    }

    /// A submit that expected `sent` found another daemon (or none):
    /// `status` is the probe's verdict. Unless an earlier send may have
    /// recorded it (the agent found its submission, or an earlier attempt
    /// ended without an answer), the cell was not recorded, so it goes to
    /// the next daemon; otherwise it may have run in the lost kernel and is
    /// never run again without the caller asking.
    pub(crate) fn on_mismatch(
        &mut self,
        key: &CellKey,
        status: ProbeStatus,
        recorded: bool,
        sent: Option<Identity>,
    ) {
        if !recorded {
            self.never_recorded(key);
        }
        let name = &key.kernel;
        let Some(k) = self.kernels.get(name) else {
            return;
        };
        let ready = k.phase == Phase::Ready;
        if ready && sent.is_some() && k.identity == sent {
            self.on_probed(name, status, &[]);
        } else {
            // An earlier verdict already moved the kernel on: the cell
            // waits for (or goes to) the daemon the kernel has now.
            self.persist(name);
            if ready {
                self.drive_cell(key);
            }
        }
    }

    /// No daemon recorded `key`'s submission, so none ran it: it goes to
    /// the next daemon, or, cancelled, ends without running anywhere.
    fn never_recorded(&mut self, key: &CellKey) {
        let mut cancelled = false;
        if let Some(cell) = self.cell_mut(key) {
            cell.rec.submitted = false;
            cell.accepted = false;
            cancelled = cell.rec.cancel_requested;
        }
        if cancelled {
            let outcome = self.cancelled_outcome(key);
            self.resolve(key, outcome, false);
        }
    }

    /// The op that carries a kernel task.
    pub(crate) fn kernel_op(&self, task: &Task) -> Option<Op> {
        let name = task.kernel()?;
        let k = self.kernels.get(name)?;
        match (task, &k.phase) {
            (Task::Probe(_), Phase::Probing) => Some(Op::Probe {
                kernel: name.clone(),
                expect: k.identity.clone(),
                // Cells in flight: if the daemon is gone, the agent says
                // which it never recorded, so a cell whose submits all
                // went unanswered is not taken for one that may have run
                // (shim_killed_escapes seed 101837, resumed).
                sent: k
                    .cells
                    .values()
                    .filter(|c| !c.resolved && c.rec.submitted && !c.fallback)
                    .map(|c| SentCell {
                        seq: c.rec.seq,
                        request_id: c.rec.request_id.clone(),
                    })
                    .collect(),
            }),
            (Task::Spawn(_), Phase::Spawning) => Some(Op::Spawn {
                kernel: name.clone(),
                lang: k.lang,
                nonce: k.spawn_nonce.clone()?,
                idle_timeout_ms: millis(self.config.daemon_idle_timeout),
                grace_ms: millis(self.config.grace),
            }),
            (Task::Shutdown(_), Phase::ShuttingDown) => Some(Op::Shutdown {
                kernel: name.clone(),
                // The daemon this client last knew: a copy of this op that
                // arrives after the kernel was opened again must not shut
                // the new daemon (reaper seed 100620). Unknown (never
                // spawned, or lost and not yet spawned again): any daemon,
                // since none newer can be this client's.
                nonce: k.identity.as_ref().map(|i| i.nonce.clone()),
                unanswered_spawn: k.spawn_nonce.clone(),
            }),
            _ => None,
        }
    }

    /// A probe's verdict; `never_recorded`: cells the lost daemon never
    /// recorded (they go to the next one).
    pub(crate) fn on_probed(
        &mut self,
        name: &KernelName,
        status: ProbeStatus,
        never_recorded: &[CellSeq],
    ) {
        let Some(k) = self.kernels.get(name) else {
            return;
        };
        let expected = k.identity.is_some();
        if !matches!(status, ProbeStatus::Alive { .. }) {
            for seq in never_recorded {
                let key = CellKey {
                    kernel: name.clone(),
                    seq: *seq,
                };
                if self.cell(&key).is_some_and(|c| !c.resolved) {
                    self.never_recorded(&key);
                }
            }
        }
        match status {
            ProbeStatus::Alive { identity } => self.ready(name, identity, false),
            ProbeStatus::Dead { evidence } => self.state_lost(name, evidence, false),
            ProbeStatus::Replaced { evidence } => self.state_lost(name, evidence, true),
            ProbeStatus::Absent if expected => self.state_lost(
                name,
                "the probe found no trace of the recorded daemon (its kernel directory is gone)"
                    .into(),
                false,
            ),
            ProbeStatus::Absent => self.spawn(name),
        }
    }

    /// A fresh daemon's kernel had run cells up to `ran_before` under
    /// earlier daemons. A newcomer (a second frontend with no record of
    /// the kernel) never saw that state, which went with the daemons that
    /// held it: it is told, as a client that knew the daemon is told of
    /// its death (two_clients: the first frontend's daemon was killed,
    /// the second started a fresh one, and its cell found the names the
    /// first had bound gone, unannounced).
    pub(crate) fn ran_before(&mut self, name: &KernelName, ran_before: u64) {
        let Some(k) = self.kernels.get_mut(name) else {
            return;
        };
        if !std::mem::take(&mut k.newcomer) || ran_before <= k.own_cells_up_to {
            return;
        }
        self.events.push_back(Event::StateLost {
            kernel: name.clone(),
            evidence: format!(
                "kernel {name} ran cells up to {ran_before} under another client's record, on a daemon that is gone; this client started a fresh one, without what they left"
            ),
        });
    }

    /// The daemon runs: record it and send every waiting cell.
    pub(crate) fn ready(&mut self, name: &KernelName, identity: Identity, fresh: bool) {
        let Some(k) = self.kernels.get_mut(name) else {
            return;
        };
        let changed = k.identity.as_ref() != Some(&identity);
        k.identity = Some(identity.clone());
        k.newcomer = false;
        k.phase = Phase::Ready;
        let keys = k.keys();
        if changed {
            self.persist(name);
        }
        self.events.push_back(Event::KernelReady {
            kernel: name.clone(),
            identity,
            fresh,
        });
        for key in keys {
            self.drive_cell(&key);
        }
        self.arm_give_up(name);
    }

    /// A probe proved the daemon gone: say so with the evidence, fail the
    /// cells that were in it, spawn a fresh daemon for the queued ones.
    pub(crate) fn state_lost(&mut self, name: &KernelName, evidence: String, replaced: bool) {
        self.events.push_back(Event::StateLost {
            kernel: name.clone(),
            evidence: evidence.clone(),
        });
        if replaced {
            self.events.push_back(Event::KernelReplaced {
                kernel: name.clone(),
                evidence: evidence.clone(),
            });
        }
        let Some(k) = self.kernels.get_mut(name) else {
            return;
        };
        k.identity = None;
        let lost: Vec<(CellKey, bool)> = k
            .keys()
            .into_iter()
            .filter_map(|key| {
                let c = k.cells.get(&key.seq)?;
                c.rec.submitted.then_some((key, c.resolved))
            })
            .collect();
        for (key, resolved) in lost {
            if resolved {
                // An `unknown` cell kept for resume: its journal is gone now.
                if let Some(k) = self.kernels.get_mut(name) {
                    k.cells.remove(&key.seq);
                }
                self.forget_calls(|c| *c == key);
                continue;
            }
            let message = format!("{LOST_IN_FLIGHT}: {evidence}");
            self.resolve(&key, CellOutcome::Error { message }, false);
        }
        self.persist(name);
        self.connect(name);
    }

    /// No successful exec for too long, or attempts exhausted: every
    /// unresolved cell is `unknown`; the record stays for a later resume.
    pub(crate) fn give_up(&mut self, name: &KernelName, why: String) {
        let Some(k) = self.kernels.get_mut(name) else {
            return;
        };
        if matches!(k.phase, Phase::ShuttingDown) {
            return;
        }
        k.phase = Phase::Unreachable;
        let keys = k.keys();
        self.drop_kernel_tasks(name, false);
        self.timers.stop(&Timer::GiveUp(name.clone()));
        self.note(
            Some(name.clone()),
            format!("giving up on kernel {name}: {why}; its record is kept, resume it when the sandbox answers"),
        );
        for key in keys {
            let reason = format!("the sandbox did not answer: {why}");
            self.resolve(&key, CellOutcome::Unknown { reason }, true);
        }
    }

    /// The agent refused for good: the kernel's cells fail with the reason.
    pub(crate) fn kernel_failed(&mut self, name: &KernelName, why: String) {
        let Some(k) = self.kernels.get_mut(name) else {
            return;
        };
        if matches!(k.phase, Phase::ShuttingDown) {
            return;
        }
        k.phase = Phase::Failed;
        let keys: Vec<CellKey> = k
            .keys()
            .into_iter()
            .filter(|key| k.cells.get(&key.seq).is_some_and(|c| !c.fallback))
            .collect();
        self.drop_kernel_tasks(name, false);
        self.timers.stop(&Timer::GiveUp(name.clone()));
        self.note(Some(name.clone()), format!("kernel {name} failed: {why}"));
        for key in keys {
            let message = format!("{KERNEL_NOT_STARTED}: {why}");
            self.resolve(&key, CellOutcome::Error { message }, false);
        }
    }

    /// The agent says the daemon is gone while we thought it ready: probe
    /// for evidence (never conclude from this alone).
    pub(crate) fn suspect(&mut self, name: &KernelName, detail: String) {
        let limit = self.config.max_attempts;
        let Some(k) = self.kernels.get_mut(name) else {
            return;
        };
        if k.phase != Phase::Ready {
            return;
        }
        k.recoveries += 1;
        if k.recoveries > limit {
            self.kernel_failed(
                name,
                format!("the agent keeps reporting the daemon gone while probes find it alive: {detail}"),
            );
            return;
        }
        self.note(
            Some(name.clone()),
            format!("the agent reports: {detail}; probing kernel {name}"),
        );
        self.drop_kernel_tasks(name, true);
        self.connect(name);
    }

    /// Drops the kernel's tasks (keeping cancels and acks if asked).
    pub(crate) fn drop_kernel_tasks(&mut self, name: &KernelName, keep_cancels: bool) {
        let tasks: Vec<Task> = self
            .tasks
            .keys()
            .filter(|t| t.kernel() == Some(name))
            .filter(|t| !(keep_cancels && matches!(t, Task::Cancel(_) | Task::Ack(_))))
            .cloned()
            .collect();
        for t in tasks {
            self.drop_task(&t);
        }
    }

    /// Sets the give-up timer while the kernel is busy.
    pub(crate) fn arm_give_up(&mut self, name: &KernelName) {
        let after = self.config.unreachable_after;
        let Some(k) = self.kernels.get(name) else {
            return;
        };
        let timer = Timer::GiveUp(name.clone());
        if k.busy(self.now) {
            self.timers.set(timer, k.last_contact + after);
        } else {
            self.timers.stop(&timer);
        }
    }

    /// The give-up timer fired.
    pub(crate) fn on_give_up_timer(&mut self, name: &KernelName) {
        let after = self.config.unreachable_after;
        let now = self.now;
        let Some(k) = self.kernels.get(name) else {
            return;
        };
        if !k.busy(now)
            || matches!(
                k.phase,
                Phase::Unreachable | Phase::Failed | Phase::ShuttingDown
            )
        {
            return;
        }
        let due = k.last_contact + after;
        if due > now {
            self.timers.set(Timer::GiveUp(name.clone()), due);
            return;
        }
        let last = k.last_error.clone().unwrap_or_else(|| "no reply".into());
        let why = format!("no successful exec for {} ms (last: {last})", millis(after));
        self.give_up(name, why);
    }

    /// The sandbox answered on behalf of `name`.
    pub(crate) fn contact(&mut self, name: &KernelName) {
        let now = self.now;
        if let Some(k) = self.kernels.get_mut(name) {
            k.last_contact = now;
            k.last_error = None;
        }
        self.arm_give_up(name);
    }
}

pub(crate) fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
