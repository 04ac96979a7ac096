//! Which processes belong to a cell, and which must never be signalled.
//!
//! A cell's processes are the union of: the descendants of its shim (a
//! child subreaper, so a double-forked daemon is reparented to it and stays
//! a descendant), everything in the process group or session recorded by
//! the cell's `started` entry, everything carrying the cell's env marker,
//! and the members of the cell's own cgroup when the shim could make one
//! (the only trace left of a `setsid` + `env -i` daemon once the shim
//! itself was killed: no marker, its own session, reparented away).
//! Never included: pid 1, the calling process and its ancestors,
//! the shim itself, processes carrying another known cell's marker, and
//! zombies (already dead; their parent reaps them). The daemon's cancel
//! also spares what belongs to the kernel's other cells ([`OtherCells`]).

use super::layout::CellLayout;
use super::os::{Os, Pid, ProcInfo, Signal};
use crate::ids::CellSeq;
use std::collections::{BTreeMap, BTreeSet};

/// Name of the env marker every process of a cell carries.
pub const MARKER_NAME: &str = "TETHER_CELL";

/// The marker value of cell `seq` of the kernel spawned with `nonce`.
pub fn marker_value(nonce: &str, seq: CellSeq) -> String {
    format!("{nonce}:{}", seq.0)
}

/// The daemon nonce a marker value (`{nonce}:{seq}`) carries.
pub fn marker_nonce(marker: &str) -> Option<&str> {
    marker.rsplit_once(':').map(|(nonce, _)| nonce)
}

/// Prefix of every cgroup the agent makes (and the only kind it removes).
pub const CGROUP_PREFIX: &str = "tether-";

/// The name of the cgroup of the cell whose marker value is `marker`
/// (`{nonce}:{seq}` gives `tether-{nonce}-{seq}`): letters, digits, `-`,
/// `_` and `.` are kept, anything else becomes `_`; at most 200 bytes.
pub fn cgroup_name(marker: &str) -> String {
    let mut name = String::from(CGROUP_PREFIX);
    for c in marker.chars() {
        if name.len() >= 200 {
            break;
        }
        name.push(match c {
            ':' => '-',
            c if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') => c,
            _ => '_',
        });
    }
    name
}

/// Is `path` a cgroup path the agent may have made: absolute, no `.` or
/// `..` or empty components, no control characters, and a last component
/// starting with [`CGROUP_PREFIX`]? A cell's `cgroup` file is only
/// believed when it is (so a damaged file never points the agent's
/// `rmdir` or member reads anywhere else).
pub fn valid_cgroup_path(path: &str) -> bool {
    let Some(rest) = path.strip_prefix('/') else {
        return false;
    };
    let parts: Vec<&str> = rest.split('/').collect();
    !path.chars().any(char::is_control)
        && parts
            .iter()
            .all(|p| !p.is_empty() && *p != "." && *p != "..")
        && parts
            .last()
            .is_some_and(|p| p.len() > CGROUP_PREFIX.len() && p.starts_with(CGROUP_PREFIX))
}

/// The cell's cgroup, from its `cgroup` file, when it has a valid one.
pub fn read_cgroup(os: &dyn Os, cell: &CellLayout) -> Option<String> {
    let bytes = os.read_file(&cell.cgroup()).ok()?;
    let text = std::str::from_utf8(&bytes).ok()?.trim_end_matches('\n');
    valid_cgroup_path(text).then(|| text.to_owned())
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

    /// `root` and its descendants, but for the `protected` ones (what an
    /// op or a daemon ends of a live shim or daemon it found recorded).
    pub fn tree_but(&self, root: Pid, protected: &BTreeSet<Pid>) -> BTreeSet<Pid> {
        let mut tree = self.descendants(root);
        tree.insert(root);
        tree.retain(|p| !protected.contains(p));
        tree
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
    /// The cell's own cgroup (its members belong to the cell), from the
    /// cell's `cgroup` file ([`read_cgroup`]).
    pub cgroup: Option<String>,
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
    if let Some(group) = &scope.cgroup {
        set.extend(
            os.cgroup_members(group)
                .into_iter()
                .filter(|pid| table.get(*pid).is_some()),
        );
    }
    for p in table.iter() {
        // Group/session 0 or 1 is never a cell's own: in a PID namespace
        // whose session leader lives outside, procfs reports sid 0 for
        // everything started there (CI runs so), and 1 is init's.
        let in_group = scope
            .pgid
            .is_some_and(|g| g > 1 && (p.pgid == g || p.sid == g));
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

/// What belongs to the kernel's *other* cells, seen from one cell's
/// cancel: a process carrying another marker of the same kernel
/// (`{nonce}:…` but not this cell's; the interpreter's `{nonce}:py`
/// included), or a member of another cell's cgroup. A cancel never
/// touches these (a Python cell's processes descend from the one
/// interpreter, as do the leftovers of every earlier cell of the kernel).
#[derive(Clone, Debug, Default)]
pub struct OtherCells {
    prefix: Option<String>,
    own: String,
    members: BTreeSet<Pid>,
}

impl OtherCells {
    /// Seen from the cell whose marker is `own` (`{nonce}:{seq}`), with the
    /// cgroups of the kernel's other cells.
    pub fn new(os: &dyn Os, own: &str, other_groups: &[String]) -> OtherCells {
        OtherCells {
            prefix: marker_nonce(own).map(|nonce| format!("{nonce}:")),
            own: own.to_owned(),
            members: other_groups
                .iter()
                .flat_map(|g| os.cgroup_members(g))
                .collect(),
        }
    }

    /// Does `pid` belong to another cell of the kernel (or to its
    /// interpreter)?
    pub fn owns(&self, os: &dyn Os, pid: Pid) -> bool {
        if self.members.contains(&pid) {
            return true;
        }
        let Some(prefix) = self.prefix.as_deref() else {
            return false;
        };
        os.env_var(pid, MARKER_NAME)
            .is_some_and(|m| m.starts_with(prefix) && m != self.own)
    }
}

/// Strict descendants of `root`, except the subtrees of processes that
/// belong to another cell (`others`): what a Python cell started from the
/// shared interpreter. A process another cell started keeps what it
/// forks, even when that drops the marker.
pub fn descendants_except(
    os: &dyn Os,
    table: &Table,
    root: Pid,
    others: &OtherCells,
) -> BTreeSet<Pid> {
    let mut out = BTreeSet::new();
    let mut stack = vec![root];
    while let Some(p) = stack.pop() {
        for &c in table.children.get(&p).map(Vec::as_slice).unwrap_or(&[]) {
            if c != root && !out.contains(&c) && !others.owns(os, c) {
                out.insert(c);
                stack.push(c);
            }
        }
    }
    out
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
