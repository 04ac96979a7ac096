//! The cell shim's decisions: what it journals and how a cell's outcome
//! follows from what was observed. The shim's loop is a sans-IO machine:
//! [`cell::CellShim`] for a shell cell, [`interp::InterpShim`] for a
//! Python kernel's interpreter; the real shim (`tether-agent shim`) and the
//! simulated one only drive it (start processes, move bytes, reap).
//!
//! Journal of a cell: `accepted` (by the daemon), `started`, `output`…,
//! then `clipped` (if output was cut), `result`, `leftovers` (if any
//! process of the cell still runs), `done`.
//!
//! Completion: the main process exited AND (both pipes reached EOF OR the
//! drain bound passed since the exit).

pub mod cell;
pub mod interp;
pub mod orphans;

use super::calls::CallDesk;
use super::journal::{JournalWriter, DEFAULT_CAP};
use super::layout::CellLayout;
use super::os::{CellLaunch, Os, OsError, Pid};
use super::shell;
pub use super::tombstone::CancelReason;
use crate::protocol::{CellOutcome, EntryKind, Lang, Stream};
use crate::time::Timestamp;
use std::time::Duration;

/// How long a shim's one look at its pipes waits while the cell runs: the
/// cell's tool calls are looked at once per look (the real shims, and the
/// simulated one while calls are pending).
pub const PUMP_MS: u64 = 20;

/// How often a lingering shim looks again while its tree lives (its
/// paced look for orphans, and whether its kernel's directory is gone).
pub const LINGER_MS: u64 = 100;

/// Default bound on draining the pipes after the main process exited.
pub const DEFAULT_DRAIN: Duration = Duration::from_millis(200);

/// How the main process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitStatus {
    /// It exited with this status.
    Code(i32),
    /// A signal killed it.
    Signal(i32),
}

/// A shell cell's outcome. Reaching the end of the code with status 0 is
/// `ok` even if a cancel raced it; otherwise a cancel wins; otherwise the
/// cell exits with its shell's own status, as `sh -c` does: the last
/// command's status at the end of the code, or the `exit N` that stopped
/// the shell early.
pub fn shell_outcome(
    exit: ExitStatus,
    end: Option<i32>,
    cancel: Option<CancelReason>,
) -> CellOutcome {
    match (end, cancel, exit) {
        (Some(0), _, _) => CellOutcome::Ok,
        (_, Some(reason), _) => reason.outcome(),
        (Some(status), None, _) => CellOutcome::Exit { code: status },
        (None, None, ExitStatus::Code(code)) => CellOutcome::Exit { code },
        (None, None, ExitStatus::Signal(sig)) => CellOutcome::Error {
            message: format!("the cell's shell was killed by signal {sig}"),
        },
    }
}

/// A Python cell's outcome from the interpreter's exit (the persistent
/// interpreter reports per-cell results itself; this covers its death).
pub fn process_outcome(exit: ExitStatus, cancel: Option<CancelReason>) -> CellOutcome {
    match (cancel, exit) {
        (_, ExitStatus::Code(0)) => CellOutcome::Ok,
        (Some(reason), _) => reason.outcome(),
        (None, ExitStatus::Code(code)) => CellOutcome::Exit { code },
        (None, ExitStatus::Signal(sig)) => CellOutcome::Error {
            message: format!("killed by signal {sig}"),
        },
    }
}

/// Is the cell complete? See the module doc.
pub fn complete(
    exited_at: Option<Timestamp>,
    pipes_eof: bool,
    now: Timestamp,
    drain: Duration,
) -> bool {
    match exited_at {
        None => false,
        Some(at) => pipes_eof || now >= at + drain,
    }
}

/// How often a shim whose journal is behind (a write failed: a full
/// disk) tries again.
pub const JOURNAL_RETRY: Duration = Duration::from_millis(50);

/// A shim whose kernel's directory was removed (a temp cleaner, a stray
/// `rm -rf`) ends what it holds itself: no record is left by which its
/// daemon, an op or a shutdown could find its tree. STOP + KILL of its
/// descendants and of `cgroup`'s members (again at each look, for a fork
/// that raced the last).
pub(crate) fn end_own_tree(os: &mut dyn Os, cgroup: Option<&str>) {
    let self_pid = os.self_pid();
    end_tree(os, self_pid, cgroup);
}

/// STOP + KILL of `root`'s descendants (and of `root` unless it is the
/// caller) and of `cgroup`'s members.
pub(crate) fn end_tree(os: &mut dyn Os, root: Pid, cgroup: Option<&str>) {
    let table = super::procs::Table::snapshot(os);
    let self_pid = os.self_pid();
    let protected = super::procs::protected(&table, self_pid);
    let mut set = table.descendants(root);
    if root != self_pid {
        set.insert(root);
    }
    if let Some(group) = cgroup {
        set.extend(os.cgroup_members(group));
    }
    set.retain(|p| !protected.contains(p) && table.get(*p).is_some_and(|i| !i.zombie));
    if !set.is_empty() {
        super::procs::stop_and_kill(os, &set);
    }
}

/// The shim's journal and its decisions for one cell.
#[derive(Debug)]
pub struct ShimCore {
    launch: CellLaunch,
    cell: CellLayout,
    journal: JournalWriter,
    calls: Option<CallDesk>,
}

impl ShimCore {
    /// Takes over the cell's journal.
    pub fn new(os: &mut dyn Os, launch: CellLaunch) -> Result<ShimCore, OsError> {
        let cell = CellLayout::from_dir(&launch.cell_dir);
        let journal = JournalWriter::open(os, &cell.journal(), DEFAULT_CAP)?;
        // A cell whose calls directory cannot be made runs without tool
        // calls (its callers find no directory and say so).
        let calls = CallDesk::open(os, &cell).ok();
        Ok(ShimCore {
            launch,
            cell,
            journal,
            calls,
        })
    }

    /// What the cell's processes carry for tool calls (the calls
    /// directory and the cell's credential); empty without a desk.
    pub fn calls_env(&self) -> Vec<(String, String)> {
        self.calls.as_ref().map(CallDesk::env).unwrap_or_default()
    }

    /// One look at the cell's tool calls (each pump tick while it runs),
    /// see [`CallDesk::tick`], after writing what the journal owes.
    pub fn tick_calls(&mut self, os: &mut dyn Os) -> Result<(), OsError> {
        // What a full disk kept back goes first: a call queued but not
        // written is one its caller waits on and the host never sees.
        if self.journal.has_unwritten() {
            self.journal.flush(os)?;
        }
        match self.calls.as_mut() {
            Some(desk) => desk.tick(os, &mut self.journal),
            None => Ok(()),
        }
    }

    /// Journal entries wait to be written (a write failed).
    pub fn has_unwritten(&self) -> bool {
        self.journal.has_unwritten()
    }

    /// Writes the journal entries that wait ([`JournalWriter::flush`]).
    pub fn flush(&mut self, os: &mut dyn Os) -> Result<(), OsError> {
        self.journal.flush(os)
    }

    /// The cell's paths.
    pub fn cell(&self) -> &CellLayout {
        &self.cell
    }

    /// The tombstone, checked right before the main process starts: a
    /// cancel that got there first means the code never runs.
    pub fn tombstone(&self, os: &dyn Os) -> Option<CancelReason> {
        super::tombstone::read(os, &self.cell)
    }

    /// The name of the cell's own cgroup ([`super::procs::cgroup_name`]).
    pub fn cgroup_name(&self) -> String {
        super::procs::cgroup_name(&self.launch.marker.1)
    }

    /// Records the cell's cgroup in its `cgroup` file, before the main
    /// process starts, so that any later op or daemon finds its members.
    /// A path the agent would not believe back is refused.
    pub fn record_cgroup(&mut self, os: &mut dyn Os, path: &str) -> Result<(), OsError> {
        if !super::procs::valid_cgroup_path(path) {
            return Err(OsError::Other(format!("not a cell cgroup path: {path:?}")));
        }
        os.write_atomic(&self.cell.cgroup(), format!("{path}\n").as_bytes())
    }

    /// Resolves a cell that never started.
    pub fn never_started(&mut self, os: &mut dyn Os, outcome: CellOutcome) -> Result<(), OsError> {
        self.journal.finish(os, vec![EntryKind::Result { outcome }])
    }

    /// The main process started.
    pub fn started(
        &mut self,
        os: &mut dyn Os,
        pid: Pid,
        pgid: Pid,
        starttime: u64,
    ) -> Result<(), OsError> {
        self.journal.push(
            os,
            EntryKind::Started {
                pid,
                pgid,
                starttime,
            },
        )
    }

    /// Output read from a pipe.
    pub fn output(&mut self, os: &mut dyn Os, stream: Stream, data: &[u8]) -> Result<(), OsError> {
        self.journal.output(os, stream, data)
    }

    /// The cell is complete: journals the result, the leftovers, `done`.
    pub fn finish(
        &mut self,
        os: &mut dyn Os,
        exit: ExitStatus,
        leftovers: Vec<Pid>,
    ) -> Result<CellOutcome, OsError> {
        let cancel = super::tombstone::read(os, &self.cell);
        let outcome = match self.launch.lang {
            Lang::Shell => {
                let end = os
                    .read_file(&self.cell.end())
                    .ok()
                    .and_then(|b| shell::end_status(&b));
                let killed_by = match exit {
                    ExitStatus::Signal(sig) => Some(sig),
                    ExitStatus::Code(_) => None,
                };
                // The result is journaled whatever happens to the state.
                if let Err(e) = shell::promote_state(os, &self.launch, killed_by) {
                    let note = format!("tether: the shell state of this cell was not kept: {e}\n");
                    // Queued if it cannot be written now: the result
                    // still follows it.
                    let _ = self.journal.output(os, Stream::Stderr, note.as_bytes());
                }
                shell_outcome(exit, end, cancel)
            }
            Lang::Python => process_outcome(exit, cancel),
        };
        self.end(os, outcome, leftovers, cancel)
    }

    /// Journals the end of the cell. A cancelled cell whose processes are
    /// still there resolves only when the cancel's escalation is over: its
    /// result is settled, and the daemon writes `done` once none is left
    /// (naming any that outlived KILL); a caller that reuses the cell's
    /// port right after the cancel must not find it taken.
    fn end(
        &mut self,
        os: &mut dyn Os,
        outcome: CellOutcome,
        leftovers: Vec<Pid>,
        cancel: Option<CancelReason>,
    ) -> Result<CellOutcome, OsError> {
        // A last look for answers, so that every call answered before the
        // result is journaled answered before it (the pump looks only
        // every tick, and a cell may end right after its last call got
        // its answer): the client then knows which of its answers reached
        // the cell. No new request is taken now (the cell has ended).
        if let Some(desk) = self.calls.as_mut() {
            let _ = desk.note_answers(os, &mut self.journal);
        }
        let result = EntryKind::Result {
            outcome: outcome.clone(),
        };
        if cancel.is_some() && !leftovers.is_empty() {
            self.journal.settle(os, vec![result])?;
            return Ok(outcome);
        }
        let mut entries = vec![result];
        if !leftovers.is_empty() {
            entries.push(EntryKind::Leftovers { pids: leftovers });
        }
        self.journal.finish(os, entries)?;
        Ok(outcome)
    }

    /// A Python cell is complete: `reported` is the bootstrap's outcome, or
    /// (Err) how the interpreter died during the cell. A cancel names the
    /// outcome; a lost namespace is said on stderr.
    pub fn finish_python(
        &mut self,
        os: &mut dyn Os,
        reported: Result<CellOutcome, String>,
        leftovers: Vec<Pid>,
    ) -> Result<CellOutcome, OsError> {
        let cancel = super::tombstone::read(os, &self.cell);
        let outcome = match reported {
            Ok(o) => super::python::outcome(o, cancel),
            Err(detail) => {
                let note = super::python::loss_note(&detail);
                // Queued if it cannot be written now: the result still
                // follows it.
                let _ = self.journal.output(os, Stream::Stderr, &note);
                super::python::died(cancel, &detail)
            }
        };
        self.end(os, outcome, leftovers, cancel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes() {
        use ExitStatus::*;
        assert_eq!(shell_outcome(Code(0), Some(0), None), CellOutcome::Ok);
        assert_eq!(
            shell_outcome(Code(3), None, None),
            CellOutcome::Exit { code: 3 }
        );
        // The last command's status, whatever the shell's own exit was.
        assert_eq!(
            shell_outcome(Code(0), Some(127), None),
            CellOutcome::Exit { code: 127 }
        );
        assert_eq!(
            shell_outcome(Signal(9), None, Some(CancelReason::Timeout)),
            CellOutcome::TimedOut
        );
        assert_eq!(
            shell_outcome(Code(143), Some(143), Some(CancelReason::Requested)),
            CellOutcome::Cancelled
        );
        assert!(complete(
            Some(Timestamp(0)),
            false,
            Timestamp(200),
            DEFAULT_DRAIN
        ));
        assert!(!complete(
            Some(Timestamp(0)),
            false,
            Timestamp(199),
            DEFAULT_DRAIN
        ));
        assert!(!complete(None, true, Timestamp(999), DEFAULT_DRAIN));
    }
}
