//! What a shim (a child subreaper) keeps on disk about the processes
//! reparented to it: a cell's `setsid` daemon whose parent exited comes
//! back to the shim, and where there is no cgroup a `setsid env -i` one
//! carries nothing else that names the kernel (no marker, its own session).
//! Killed from outside, the shim leaves them to its parent: to the kernel
//! daemon, which keeps its own record of them, or — the daemon killed
//! first — to PID 1, where nothing would find them again. So the shim
//! records each child other than the one it started, as the daemon does
//! (`leftovers/orphan-<pid>.json`, pid and start time, read by shutdown,
//! gc and every daemon's exit sweep through
//! [`crate::agent::op::kernel_processes`]), once per [`ORPHAN_LOOK`] while
//! it pumps or lingers (shim_killed_escapes seed 102038: the daemon
//! killed at 272 ms, the shim at 500 ms, the env -i daemon left running
//! after shutdown).
//!
//! A cell's shim writes its cell's marker into each record: the op that
//! proves the daemon gone ends an unfinished cell's processes
//! ([`crate::agent::orphans::end_orphaned_cells`]) by what names that
//! cell, these records included (shim_killed_escapes seed 102038 again:
//! the env -i daemon ran on after its cell was failed as lost, until the
//! shutdown). The interpreter's shim serves every cell: its records name
//! none.
//!
//! The look ([`Os::children`]) is paced, not done at every pump: an
//! orphan reparented and its shim killed within one [`ORPHAN_LOOK`] is
//! still lost (with cgroups its cgroup holds it).

use crate::agent::kernel::{to_json, LaunchRecord};
use crate::agent::layout::KernelLayout;
use crate::agent::op::leftovers_dir;
use crate::agent::os::{Os, Pid};
use crate::time::Timestamp;
use std::collections::BTreeSet;
use std::time::Duration;

/// How often a shim looks for processes reparented to it.
pub const ORPHAN_LOOK: Duration = Duration::from_millis(100);

/// A shim's records of its orphans.
#[derive(Debug, Default)]
pub struct OrphanRecords {
    /// Recorded, by pid and start time (a pid may be reused).
    kept: BTreeSet<(Pid, u64)>,
    next_look: Timestamp,
    /// The marker of the cell whose orphans these are (empty: no one
    /// cell's).
    marker: String,
}

impl OrphanRecords {
    /// The records of one cell's shim, naming the cell by its `marker`.
    pub fn of_cell(marker: String) -> OrphanRecords {
        OrphanRecords {
            marker,
            ..OrphanRecords::default()
        }
    }

    /// When the next look is due.
    pub fn next_look(&self) -> Timestamp {
        self.next_look
    }

    /// Is `(pid, starttime)` recorded already?
    pub fn kept(&self, pid: Pid, starttime: u64) -> bool {
        self.kept.contains(&(pid, starttime))
    }

    /// Once its look is due: records every live child of this shim but
    /// `main` (the process it started) not recorded yet, under the
    /// kernel `kernel_dir`. A record that cannot be written now (a full
    /// disk) is tried again at the next look.
    pub fn look(&mut self, os: &mut dyn Os, kernel_dir: &str, main: Option<Pid>) {
        let now = os.now();
        if now < self.next_look {
            return;
        }
        self.next_look = now + ORPHAN_LOOK;
        let new: Vec<(Pid, u64)> = os
            .children(os.self_pid())
            .into_iter()
            .filter(|p| !p.zombie && Some(p.pid) != main)
            .map(|p| (p.pid, p.starttime))
            .filter(|c| !self.kept.contains(c))
            .collect();
        if new.is_empty() {
            return;
        }
        // Only inside a kernel directory that still exists: one removed
        // under the shim (a temp cleaner, a shutdown) is not made again
        // for a record nobody would remove (drawn seed 501060 of the long
        // run: `kernels/py/leftovers/orphan-13.json` left after the
        // kernels' directories were wiped and the kernel shut down).
        let kernel = KernelLayout::new(kernel_dir);
        let dir = leftovers_dir(&kernel);
        if crate::agent::kernel::make_dir(os, &kernel, &dir).is_err() {
            return;
        }
        for (pid, starttime) in new {
            let record = LaunchRecord::new(os, pid, starttime, self.marker.clone());
            let path = format!("{dir}/orphan-{pid}.json");
            if os.write_atomic(&path, &to_json(&record)).is_ok() {
                self.kept.insert((pid, starttime));
            }
        }
    }
}
