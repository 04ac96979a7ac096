//! Timers: an enum of what can expire and a table of deadlines. The next
//! wakeup is the minimum of the table.

use super::event::CellKey;
use super::retry::Task;
use crate::ids::{ExecId, KernelName};
use crate::time::Timestamp;
use std::collections::BTreeMap;

/// Something that happens at a deadline.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Timer {
    /// An exec passed its deadline without a result: treated as a
    /// transport error, its late result is ignored.
    ExecDeadline(ExecId),
    /// A failed task is sent again.
    Retry(Task),
    /// A cell ran past its timeout: cancel it.
    CellTimeout(CellKey),
    /// No successful exec for `unreachable_after`: give up on the kernel.
    GiveUp(KernelName),
    /// Look for idle kernels and kernels beyond the cap.
    Reap,
    /// The kernel's acknowledgements found no submit to ride on for
    /// `ack_delay`: send them as acks of their own.
    FlushAcks(KernelName),
    /// A cell's wait held back for a tool call's answer goes on.
    AnswerHold(CellKey),
}

/// Deadlines by timer.
#[derive(Clone, Debug, Default)]
pub(crate) struct TimerTable {
    table: BTreeMap<Timer, Timestamp>,
}

impl TimerTable {
    /// Sets (or moves) `timer` to `at`.
    pub(crate) fn set(&mut self, timer: Timer, at: Timestamp) {
        self.table.insert(timer, at);
    }

    /// Cancels `timer`.
    pub(crate) fn stop(&mut self, timer: &Timer) {
        self.table.remove(timer);
    }

    /// The earliest deadline.
    pub(crate) fn next(&self) -> Option<Timestamp> {
        self.table.values().min().copied()
    }

    /// Removes and returns the earliest timer due at `now`, if any (earliest
    /// deadline first, ties in timer order).
    pub(crate) fn pop_due(&mut self, now: Timestamp) -> Option<Timer> {
        let (timer, _) = self
            .table
            .iter()
            .filter(|(_, at)| **at <= now)
            .min_by_key(|(timer, at)| (**at, (*timer).clone()))?;
        let timer = timer.clone();
        self.table.remove(&timer);
        Some(timer)
    }

    /// Stops every timer `keep` says no to.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&Timer) -> bool) {
        self.table.retain(|t, _| keep(t));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_is_the_minimum_and_due_timers_pop_in_order() {
        let mut t = TimerTable::default();
        t.set(Timer::Reap, Timestamp(30));
        t.set(Timer::ExecDeadline(ExecId(1)), Timestamp(10));
        t.set(Timer::ExecDeadline(ExecId(2)), Timestamp(20));
        assert_eq!(t.next(), Some(Timestamp(10)));
        assert_eq!(t.pop_due(Timestamp(5)), None);
        assert_eq!(
            t.pop_due(Timestamp(25)),
            Some(Timer::ExecDeadline(ExecId(1)))
        );
        assert_eq!(
            t.pop_due(Timestamp(25)),
            Some(Timer::ExecDeadline(ExecId(2)))
        );
        assert_eq!(t.pop_due(Timestamp(25)), None);
        t.set(Timer::Reap, Timestamp(40));
        assert_eq!(t.next(), Some(Timestamp(40)));
        t.stop(&Timer::Reap);
        assert_eq!(t.next(), None);
    }
}
