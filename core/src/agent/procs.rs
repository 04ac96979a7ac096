//! Which processes belong to a cell, and which must never be signalled.
//!
//! A cell's processes are the union of: the descendants of its shim (a
//! child subreaper, so a double-forked daemon is reparented to it and stays
//! a descendant), everything in the process group or session recorded by
//! the cell's `started` entry, and everything carrying the cell's env
//! marker. Never included: pid 1, the calling process and its ancestors,
//! the shim itself, processes carrying another known cell's marker, and
//! zombies (already dead; their parent reaps them).

use super::os::{Os, Pid, ProcInfo, Signal};
use crate::ids::CellSeq;
use std::collections::{BTreeMap, BTreeSet};

/// Name of the env marker every process of a cell carries.
pub const MARKER_NAME: &str = "TETHER_CELL";

/// The marker value of cell `seq` of the kernel spawned with `nonce`.
pub fn marker_value(nonce: &str, seq: CellSeq) -> String {
    format!("{nonce}:{}", seq.0)
}

/// One snapshot of the process table.
#[derive(Clone, Debug, Default)]
pub struct Table {
    procs: BTreeMap<Pid, ProcInfo>,
    children: BTreeMap<Pid, Vec<Pid>>,
}

impl Table {
    /// Reads every process once.
    pub fn snapshot(os: &dyn Os) -> Table {
        let mut t = Table::default();
        for p in os.processes() {
            t.children.entry(p.ppid).or_default().push(p.pid);
            t.procs.insert(p.pid, p);
        }
        t
    }

    /// One process of the snapshot.
    pub fn get(&self, pid: Pid) -> Option<&ProcInfo> {
        self.procs.get(&pid)
    }

    /// Every process of the snapshot, by pid.
    pub fn iter(&self) -> impl Iterator<Item = &ProcInfo> {
        self.procs.values()
    }

    /// Strict descendants of `root` (by the ppid links of the snapshot).
    pub fn descendants(&self, root: Pid) -> BTreeSet<Pid> {
        let mut out = BTreeSet::new();
        let mut stack = vec![root];
        while let Some(p) = stack.pop() {
            for &c in self.children.get(&p).map(Vec::as_slice).unwrap_or(&[]) {
                if c != root && out.insert(c) {
                    stack.push(c);
                }
            }
        }
        out
    }

    /// `pid` and all its ancestors up to pid 1.
    pub fn ancestors_and_self(&self, pid: Pid) -> BTreeSet<Pid> {
        let mut out = BTreeSet::new();
        let mut cur = pid;
        while cur > 0 && out.insert(cur) {
            match self.procs.get(&cur) {
                Some(p) => cur = p.ppid,
                None => break,
            }
        }
        out
    }
}

/// What identifies one cell's processes.
#[derive(Clone, Debug, Default)]
pub struct CellScope {
    /// The cell's shim, if it runs (its descendants belong to the cell).
    pub shim: Option<Pid>,
    /// Process group / session of the cell's main process.
    pub pgid: Option<Pid>,
    /// The cell's env marker value ([`MARKER_NAME`]).
    pub marker: String,
    /// Markers of the kernel's other cells (their processes are protected).
    pub other_markers: Vec<String>,
    /// Further pids known to belong to the cell (reported leftovers).
    pub extra: Vec<Pid>,
}

/// Pids that are never signalled: pid 1 and `caller` with its ancestors.
pub fn protected(table: &Table, caller: Pid) -> BTreeSet<Pid> {
    let mut p = table.ancestors_and_self(caller);
    p.insert(1);
    p.insert(0);
    p
}

/// The cell's live processes (zombies and protected pids left out).
pub fn cell_processes(
    os: &dyn Os,
    table: &Table,
    scope: &CellScope,
    protected: &BTreeSet<Pid>,
) -> BTreeSet<Pid> {
    let mut set = BTreeSet::new();
    if let Some(shim) = scope.shim {
        set.extend(table.descendants(shim));
    }
    for &pid in &scope.extra {
        if table.get(pid).is_some() {
            set.insert(pid);
            set.extend(table.descendants(pid));
        }
    }
    for p in table.iter() {
        let in_group = scope.pgid.is_some_and(|g| p.pgid == g || p.sid == g);
        if in_group || os.has_env(p.pid, MARKER_NAME, &scope.marker) {
            set.insert(p.pid);
        }
    }
    set.retain(|pid| {
        let Some(p) = table.get(*pid) else {
            return false;
        };
        !p.zombie
            && !protected.contains(pid)
            && Some(*pid) != scope.shim
            && !scope
                .other_markers
                .iter()
                .any(|m| os.has_env(*pid, MARKER_NAME, m))
    });
    #[cfg(feature = "mutations")]
    if crate::mutation::active(crate::mutation::Mutation::CancelPgidOnly) {
        // The broken variant: only what is still in the cell's group.
        set.retain(|pid| table.get(*pid).is_some_and(|p| Some(p.pgid) == scope.pgid));
    }
    set
}

/// Sends `signal` to each pid individually; vanished pids are fine.
pub fn signal_each(os: &mut dyn Os, pids: &BTreeSet<Pid>, signal: Signal) {
    for &pid in pids {
        if pid > 1 {
            let _ = os.signal(pid, signal);
        }
    }
}

/// Freezes every pid, then kills every pid (so nothing forks in between).
pub fn stop_and_kill(os: &mut dyn Os, pids: &BTreeSet<Pid>) {
    signal_each(os, pids, Signal::Stop);
    signal_each(os, pids, Signal::Kill);
}
