//! Ground truth for orphaned interpreters: which daemon started each
//! Python interpreter, when daemons died, and every cell an interpreter
//! took after the daemon that started it had died. A new daemon of the
//! kernel must end the old interpreter before it hands out a cell: left
//! alive, it would take a cell submitted to the new daemon and run it in
//! the old namespace (the client was told that namespace is lost).

use super::process::Role;
use super::SimOs;
use tether_core::agent::Pid;
use tether_core::time::Timestamp;

/// A Python cell taken by an interpreter whose daemon had died.
#[derive(Clone, Debug)]
pub struct OrphanRun {
    /// The kernel directory.
    pub kernel_dir: String,
    /// The cell's sequence number.
    pub seq: u64,
    /// When the interpreter's daemon died.
    pub daemon_died: Timestamp,
    /// When the interpreter took the cell.
    pub at: Timestamp,
}

/// A daemon, by pid and start time (pids are reused).
pub(crate) type DaemonId = (Pid, u64);

impl SimOs {
    /// The daemon whose interpreter shim `shim` is (its parent now, as
    /// it starts the interpreter), if its parent is a daemon.
    pub(crate) fn daemon_of_shim(&self, shim: Pid) -> Option<DaemonId> {
        let parent = self.procs.get(&shim)?.ppid;
        let p = self.procs.get(&parent)?;
        matches!(p.role, Role::Daemon { .. }).then_some((p.pid, p.starttime))
    }

    /// Notes the death of `pid` if it is a daemon.
    pub(crate) fn note_daemon_exit(&mut self, pid: Pid) {
        if let Some(p) = self
            .procs
            .get(&pid)
            .filter(|p| matches!(p.role, Role::Daemon { .. }))
        {
            self.daemon_deaths.insert((pid, p.starttime), self.now);
        }
    }

    /// The interpreter started by `daemon` takes cell `seq` of
    /// `kernel_dir` now: noted if that daemon is dead.
    pub(crate) fn note_py_cell_start(
        &mut self,
        daemon: Option<DaemonId>,
        kernel_dir: &str,
        seq: u64,
    ) {
        let Some(died) = daemon.and_then(|d| self.daemon_deaths.get(&d).copied()) else {
            return;
        };
        self.orphan_runs.push(OrphanRun {
            kernel_dir: kernel_dir.to_owned(),
            seq,
            daemon_died: died,
            at: self.now,
        });
    }

    /// Every cell an orphaned interpreter took.
    pub fn orphan_runs(&self) -> &[OrphanRun] {
        &self.orphan_runs
    }
}
