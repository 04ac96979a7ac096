//! Tasks and their retries. A [`Task`] is one logical operation (probe this
//! kernel, submit this cell, …); each send of it is one exec with a fresh
//! [`ExecId`]. Every op is idempotent, so a task is re-sent after a
//! transport error, a garbage reply or a deadline, after an exponential
//! backoff, at most `max_attempts` times.

use super::event::CellKey;
use crate::ids::{ExecId, KernelName};
use crate::protocol::OpKind;
use std::time::Duration;

/// One logical operation.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Task {
    /// Install the agent (shared by every kernel).
    Install,
    /// Probe a kernel's daemon.
    Probe(KernelName),
    /// Spawn a kernel's daemon.
    Spawn(KernelName),
    /// Shut a kernel down.
    Shutdown(KernelName),
    /// Submit a cell.
    Submit(CellKey),
    /// Read a cell's journal from its cursor.
    Wait(CellKey),
    /// Cancel a cell.
    Cancel(CellKey),
    /// Tell the agent a cell's journal may go.
    Ack(CellKey),
    /// Run a cell once as a plain exec, without a kernel (fail open).
    Fallback(CellKey),
}

impl Task {
    /// The kernel the task works for, if any.
    pub(crate) fn kernel(&self) -> Option<&KernelName> {
        match self {
            Task::Install => None,
            Task::Probe(k) | Task::Spawn(k) | Task::Shutdown(k) => Some(k),
            Task::Submit(c)
            | Task::Wait(c)
            | Task::Cancel(c)
            | Task::Ack(c)
            | Task::Fallback(c) => Some(&c.kernel),
        }
    }

    /// The kind of op that carries the task.
    pub(crate) fn op_kind(&self) -> OpKind {
        match self {
            Task::Install => OpKind::Install,
            Task::Probe(_) => OpKind::Probe,
            Task::Spawn(_) => OpKind::Spawn,
            Task::Shutdown(_) => OpKind::Shutdown,
            Task::Submit(_) => OpKind::Submit,
            Task::Wait(_) => OpKind::Wait,
            Task::Cancel(_) => OpKind::Cancel,
            Task::Ack(_) => OpKind::Ack,
            Task::Fallback(_) => OpKind::Plain,
        }
    }

    /// The cell the task works for, if any.
    pub(crate) fn cell(&self) -> Option<&CellKey> {
        match self {
            Task::Submit(c)
            | Task::Wait(c)
            | Task::Cancel(c)
            | Task::Ack(c)
            | Task::Fallback(c) => Some(c),
            _ => None,
        }
    }
}

/// Where a task stands.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct TaskState {
    /// Sends so far (an agent-missing reply counts too, so a broken install
    /// cannot loop forever).
    pub(crate) attempts: u32,
    /// The exec in flight, if any.
    pub(crate) exec: Option<ExecId>,
    /// Parked until the agent is installed.
    pub(crate) after_install: bool,
    /// A submit's last send: the acknowledgements it carried.
    pub(crate) acks: Vec<crate::ids::CellSeq>,
    /// A submit's last send: the daemon it expected.
    pub(crate) expect: Option<crate::protocol::Identity>,
    /// Replies that the agent is missing (each starts an install): so
    /// many in a row means a broken install, not a slow one.
    pub(crate) missing: u32,
    /// An attempt ended without an answer (transport error, deadline): it
    /// may have run on the sandbox even if no file there says so any more
    /// (a replaced sandbox keeps none).
    pub(crate) uncertain: bool,
}

/// The delay before attempt `attempts + 1`: `base · 2^(attempts-1)`, capped.
pub fn backoff(base: Duration, max: Duration, attempts: u32) -> Duration {
    let shift = attempts.saturating_sub(1).min(20);
    base.saturating_mul(1u32 << shift).min(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_is_capped() {
        let (b, m) = (Duration::from_millis(200), Duration::from_secs(5));
        let delays: Vec<u128> = (1..=7).map(|a| backoff(b, m, a).as_millis()).collect();
        assert_eq!(delays, vec![200, 400, 800, 1600, 3200, 5000, 5000]);
        assert_eq!(backoff(b, m, u32::MAX), m);
    }
}
