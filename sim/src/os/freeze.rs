//! The whole sandbox frozen (`docker pause`, a cgroup freezer) and
//! thawed: while frozen no process takes a step, catchable signals wait
//! (SIGKILL still kills, as the cgroup v2 freezer allows), and the clock
//! runs on, so a sleep or a grace period that ended meanwhile is over at
//! the thaw. Freezes nest: the sandbox runs again when the last ends.

use super::process::RunState;
use super::SimOs;
use tether_core::agent::Pid;

impl SimOs {
    /// Freezes every process.
    pub fn freeze(&mut self) {
        self.frozen = self.frozen.saturating_add(1);
    }

    /// Ends one freeze; when none is left, every process that is not
    /// stopped runs again and takes the signals that arrived meanwhile, in
    /// arrival order.
    pub fn thaw(&mut self) {
        self.frozen = self.frozen.saturating_sub(1);
        if self.is_frozen() {
            return;
        }
        let waiting: Vec<Pid> = self
            .procs
            .values()
            .filter(|p| p.state == RunState::Running && !p.pending.is_empty())
            .map(|p| p.pid)
            .collect();
        for pid in waiting {
            let pending = self
                .procs
                .get_mut(&pid)
                .map(|p| std::mem::take(&mut p.pending))
                .unwrap_or_default();
            for sig in pending {
                if self.apply(pid, sig) == Ok(super::SignalEffect::Killed) {
                    break;
                }
            }
        }
    }

    /// Is the sandbox frozen now?
    pub fn is_frozen(&self) -> bool {
        self.frozen > 0
    }
}
