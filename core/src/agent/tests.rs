//! The agent's pure decisions against a tiny in-memory [`Os`].

use super::daemon::{Daemon, DaemonStep, ExitCause, KILL_BOUND};
use super::journal::{self, JournalWriter};
use super::kernel::{check_identity, to_json, KernelConfig};
use super::layout::{KernelLayout, Layout};
use super::op::OpRun;
use super::os::{CellLaunch, Os, OsError, Pid, ProcInfo, Signal};
use super::procs::{self, CellScope, Table, MARKER_NAME};
use crate::bytes::Bytes;
use crate::ids::{CellSeq, KernelName, RequestId};
use crate::protocol::{
    parse_journal, CellOutcome, EntryKind, Identity, Lang, ProbeStatus, ReplyEnvelope, Stream,
    Submission,
};
use crate::time::Timestamp;
use std::collections::{BTreeMap, BTreeSet};

#[derive(Default)]
pub(crate) struct FakeOs {
    pub(crate) now: u64,
    files: BTreeMap<String, Vec<u8>>,
    procs: BTreeMap<Pid, ProcInfo>,
    env: BTreeMap<Pid, Vec<(String, String)>>,
    args: BTreeMap<Pid, Vec<String>>,
    signals: Vec<(Pid, Signal)>,
    launches: Vec<CellLaunch>,
    /// cgroup path -> pids put in it (a member is listed while it exists).
    cgroups: BTreeMap<String, Vec<Pid>>,
    me: Pid,
    /// Every write fails, as on a full disk.
    pub(crate) disk_full: bool,
    /// On the full disk, a refused append puts this many of its bytes
    /// down first.
    tear: usize,
    /// A SIGTERM the daemon has not acted on yet ([`Os::stop_requested`]).
    pub(crate) term_pending: bool,
    /// A SIGTERM lands at the next append (in the middle of a tick).
    term_at_append: bool,
    /// Directories made (a directory with files in it exists anyway).
    dirs: BTreeSet<String>,
    /// Appends and signals in the order they were made, for tests of what
    /// comes first: `append PATH`, `signal PID SIGNAL`.
    acts: Vec<String>,
    /// How long starting a cell's shim takes (the clock moves on by it).
    launch_ms: u64,
    /// Writes of a file whose path ends so fail, as on a disk that
    /// filled just then.
    refuse_writes_of: Option<&'static str>,
}

fn proc_(pid: Pid, ppid: Pid, pgid: Pid) -> ProcInfo {
    ProcInfo {
        pid,
        ppid,
        pgid,
        sid: pgid,
        starttime: 100 + u64::from(pid),
        zombie: false,
    }
}

impl FakeOs {
    pub(crate) fn new() -> FakeOs {
        let mut os = FakeOs {
            me: 10,
            ..FakeOs::default()
        };
        os.add(proc_(1, 0, 1));
        os.add(proc_(10, 1, 10));
        os
    }
    fn add(&mut self, p: ProcInfo) {
        self.procs.insert(p.pid, p);
    }
    fn room(&self) -> Result<(), OsError> {
        if self.disk_full {
            return Err(OsError::Other("No space left on device".into()));
        }
        Ok(())
    }
}

impl Os for FakeOs {
    fn now(&self) -> Timestamp {
        Timestamp(self.now)
    }
    fn boot_id(&self) -> Result<String, OsError> {
        Ok("boot-1".into())
    }
    fn self_pid(&self) -> Pid {
        self.me
    }
    fn read_file(&self, path: &str) -> Result<Vec<u8>, OsError> {
        self.files.get(path).cloned().ok_or(OsError::NotFound)
    }
    fn create_new(&mut self, path: &str, data: &[u8]) -> Result<(), OsError> {
        self.room()?;
        if self.files.contains_key(path) {
            return Err(OsError::AlreadyExists);
        }
        self.files.insert(path.into(), data.to_vec());
        Ok(())
    }
    fn write_atomic(&mut self, path: &str, data: &[u8]) -> Result<(), OsError> {
        self.room()?;
        if self.refuse_writes_of.is_some_and(|end| path.ends_with(end)) {
            return Err(OsError::Other("No space left on device".into()));
        }
        self.files.insert(path.into(), data.to_vec());
        Ok(())
    }
    fn append(&mut self, path: &str, data: &[u8]) -> Result<(), OsError> {
        if self.disk_full && self.tear > 0 {
            // A refused write(2) that put its first bytes down.
            let n = self.tear.min(data.len());
            self.files
                .entry(path.into())
                .or_default()
                .extend_from_slice(&data[..n]);
        }
        self.room()?;
        self.acts.push(format!("append {path}"));
        self.term_pending |= std::mem::take(&mut self.term_at_append);
        self.files
            .entry(path.into())
            .or_default()
            .extend_from_slice(data);
        Ok(())
    }
    fn exists(&self, path: &str) -> bool {
        let dir = format!("{path}/");
        self.files
            .keys()
            .chain(&self.dirs)
            .any(|k| k == path || k.starts_with(&dir))
    }
    fn list_dir(&self, path: &str) -> Result<Vec<String>, OsError> {
        let dir = format!("{path}/");
        let names: BTreeSet<String> = self
            .files
            .keys()
            .chain(&self.dirs)
            .filter_map(|k| k.strip_prefix(&dir))
            .map(|rest| rest.split('/').next().unwrap_or_default().to_owned())
            .collect();
        Ok(names.into_iter().collect())
    }
    fn create_dir_all(&mut self, path: &str) -> Result<(), OsError> {
        self.dirs.insert(path.trim_end_matches('/').to_owned());
        Ok(())
    }
    fn create_dir(&mut self, path: &str) -> Result<(), OsError> {
        let path = path.trim_end_matches('/');
        let parent = path.rsplit_once('/').map_or("", |(p, _)| p);
        if !parent.is_empty() && !self.exists(parent) {
            return Err(OsError::NotFound);
        }
        self.dirs.insert(path.to_owned());
        Ok(())
    }
    fn remove_all(&mut self, path: &str) -> Result<(), OsError> {
        let dir = format!("{path}/");
        self.files.retain(|k, _| k != path && !k.starts_with(&dir));
        self.dirs.retain(|k| k != path && !k.starts_with(&dir));
        Ok(())
    }
    fn process(&self, pid: Pid) -> Option<ProcInfo> {
        self.procs.get(&pid).cloned()
    }
    fn processes(&self) -> Vec<ProcInfo> {
        self.procs.values().cloned().collect()
    }
    fn has_env(&self, pid: Pid, name: &str, value: &str) -> bool {
        self.env
            .get(&pid)
            .is_some_and(|e| e.iter().any(|(n, v)| n == name && v == value))
    }
    fn env_var(&self, pid: Pid, name: &str) -> Option<String> {
        self.env
            .get(&pid)
            .and_then(|e| e.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone()))
    }
    fn has_arg(&self, pid: Pid, arg: &str) -> bool {
        self.args
            .get(&pid)
            .is_some_and(|a| a.iter().any(|x| x == arg))
    }
    fn signal(&mut self, pid: Pid, signal: Signal) -> Result<(), OsError> {
        self.signals.push((pid, signal));
        self.acts.push(format!("signal {pid} {signal:?}"));
        if signal == Signal::Kill {
            self.procs.remove(&pid);
        }
        Ok(())
    }
    fn cgroup_members(&self, group: &str) -> Vec<Pid> {
        let mut pids: Vec<Pid> = self
            .cgroups
            .get(group)
            .map(|m| {
                m.iter()
                    .copied()
                    .filter(|p| self.procs.contains_key(p))
                    .collect()
            })
            .unwrap_or_default();
        pids.sort();
        pids
    }
    fn remove_cgroup(&mut self, group: &str) -> Result<(), OsError> {
        if !self.cgroup_members(group).is_empty() {
            return Err(OsError::Other("busy".into()));
        }
        self.cgroups.remove(group);
        Ok(())
    }
    /// Daemons are 50 (or the next pid free after it).
    fn spawn_daemon(&mut self, dir: &str, nonce: &str) -> Result<Pid, OsError> {
        let pid = (50..).find(|p| !self.procs.contains_key(p)).unwrap();
        self.add(proc_(pid, 1, pid));
        self.args
            .insert(pid, crate::agent::kernel::daemon_args(dir, nonce).to_vec());
        Ok(pid)
    }
    /// Shims are 60, 80, 100, …
    fn spawn_cell(&mut self, launch: &CellLaunch) -> Result<Pid, OsError> {
        let pid = 60 + 20 * Pid::try_from(self.launches.len()).unwrap();
        self.launches.push(launch.clone());
        self.now += self.launch_ms;
        self.add(proc_(pid, self.me, self.me));
        Ok(pid)
    }
    fn has_program(&self, _program: &str) -> bool {
        true
    }
    fn stop_requested(&self) -> bool {
        self.term_pending
    }
    fn random_token(&mut self) -> String {
        format!("token{}", self.files.len())
    }
}

fn identity() -> Identity {
    Identity {
        boot_id: "boot-1".into(),
        pid: 50,
        starttime: 150,
        nonce: "n1".into(),
    }
}

/// Seen from a Python cell's cancel: the interpreter's descendants are
/// the cell's, except what another cell of the kernel started (its marker,
/// or its cgroup) with everything below it, and the interpreter's own
/// marker. Another kernel's marker does not count.
#[test]
fn a_python_cells_scope_spares_other_cells_under_the_interpreter() {
    let mut os = FakeOs::new();
    os.add(proc_(20, 10, 20)); // the interpreter
    for (pid, ppid, marker) in [
        (21, 20, Some("n:1")), // an earlier cell's leftover…
        (22, 21, None),        // …and what it forked without the marker
        (23, 20, Some("n:2")), // the cancelled cell's own
        (24, 23, None),        // below it, without the marker
        (25, 20, None),        // an earlier cell's, env={}, in its cgroup
        (26, 20, Some("n:py")),
        (27, 20, Some("m:1")), // another kernel's marker: not a cell of n
        (28, 20, None),        // the cancelled cell's, env={}
    ] {
        os.add(proc_(pid, ppid, 20));
        if let Some(m) = marker {
            os.env.insert(pid, vec![(MARKER_NAME.into(), m.into())]);
        }
    }
    let g1 = "/sys/fs/cgroup/tether-n-1".to_owned();
    os.cgroups.insert(g1.clone(), vec![25]);
    let table = Table::snapshot(&os);
    let others = procs::OtherCells::new(&os, "n:2", std::slice::from_ref(&g1));
    let set = procs::descendants_except(&os, &table, 20, &others);
    assert_eq!(set, BTreeSet::from([23, 24, 27, 28]));
    for pid in [21, 25, 26] {
        assert!(others.owns(&os, pid), "{pid}");
    }
    // Without cgroups only the markers tell: 25 is indistinguishable.
    let others = procs::OtherCells::new(&os, "n:2", &[]);
    let set = procs::descendants_except(&os, &table, 20, &others);
    assert_eq!(set, BTreeSet::from([23, 24, 25, 27, 28]));
}

#[test]
fn identity_check_tells_pid_reuse_from_death() {
    let mut os = FakeOs::new();
    let id = identity();
    assert!(matches!(check_identity(&os, &id), ProbeStatus::Dead { .. }));
    os.add(proc_(50, 1, 50));
    os.args.insert(50, vec!["n1".into()]);
    assert!(matches!(
        check_identity(&os, &id),
        ProbeStatus::Alive { .. }
    ));
    // same pid, another start time: reused
    os.procs.get_mut(&50).unwrap().starttime = 999;
    assert!(matches!(
        check_identity(&os, &id),
        ProbeStatus::Replaced { .. }
    ));
    // same start time, no nonce in argv
    os.procs.get_mut(&50).unwrap().starttime = 150;
    os.args.insert(50, vec!["other".into()]);
    assert!(matches!(
        check_identity(&os, &id),
        ProbeStatus::Replaced { .. }
    ));
    // zombie
    os.args.insert(50, vec!["n1".into()]);
    os.procs.get_mut(&50).unwrap().zombie = true;
    assert!(matches!(check_identity(&os, &id), ProbeStatus::Dead { .. }));
    // another boot
    let mut other = id.clone();
    other.boot_id = "boot-0".into();
    assert!(matches!(
        check_identity(&os, &other),
        ProbeStatus::Replaced { .. }
    ));
}

#[test]
fn a_probe_of_a_daemon_whose_files_are_gone_tells_a_new_boot_from_a_removal() {
    let os = FakeOs::new();
    let k = KernelLayout::new("/k");
    // Same boot: someone removed the kernel's state.
    assert!(matches!(
        super::kernel::probe(&os, &k, Some(&identity())),
        ProbeStatus::Dead { .. }
    ));
    // Another boot: a new machine (none of the old files) took the
    // sandbox's place, and the client must hear it was replaced.
    let mut before = identity();
    before.boot_id = "boot-0".into();
    assert!(matches!(
        super::kernel::probe(&os, &k, Some(&before)),
        ProbeStatus::Replaced { .. }
    ));
}

#[test]
fn a_torn_journal_is_taken_over_on_a_full_disk_and_cut_once_it_frees() {
    // full_disk seed 140: a shim's append tore a line as the disk filled;
    // the daemon, ending the cell for its dead shim, could not cut it and
    // took the cell for done. Taking the journal over must not need space.
    let mut os = FakeOs::new();
    let path = "/j";
    let mut w = JournalWriter::open(&mut os, path, 1 << 20).unwrap();
    w.output(&mut os, Stream::Stdout, b"kept").unwrap();
    os.append(path, b"{\"n\":2,\"ki").unwrap(); // the torn append
    os.disk_full = true;
    let mut w2 = JournalWriter::open(&mut os, path, 1 << 20).expect("opened on a full disk");
    let end = vec![EntryKind::Result {
        outcome: CellOutcome::Ok,
    }];
    assert!(
        w2.finish(&mut os, end).is_err(),
        "nothing can be written yet"
    );
    assert!(w2.has_unwritten());
    os.disk_full = false;
    w2.flush(&mut os).unwrap();
    let read = parse_journal(&os.files[path]);
    assert!(
        read.bad_lines.is_empty() && read.partial_tail == 0,
        "{read:?}"
    );
    let ns: Vec<u64> = read.entries.iter().map(|e| e.n).collect();
    assert_eq!(ns, vec![1, 2, 3], "the torn line cut, each entry once");
}

#[test]
fn journal_writer_recovers_n_cuts_torn_tail_and_clips_once() {
    let mut os = FakeOs::new();
    let path = "/j";
    let mut w = JournalWriter::open(&mut os, path, 10).unwrap();
    w.output(&mut os, Stream::Stdout, b"0123456").unwrap();
    os.append(path, b"{\"n\":3,\"ki").unwrap(); // a torn append
    let mut w2 = JournalWriter::open(&mut os, path, 10).unwrap();
    w2.output(&mut os, Stream::Stderr, b"789abc").unwrap();
    w2.output(&mut os, Stream::Stderr, b"def").unwrap();
    w2.finish(
        &mut os,
        vec![EntryKind::Result {
            outcome: CellOutcome::Ok,
        }],
    )
    .unwrap();
    drop(w);
    let read = parse_journal(&os.files[path]);
    assert!(read.bad_lines.is_empty() && read.partial_tail == 0);
    let ns: Vec<u64> = read.entries.iter().map(|e| e.n).collect();
    assert_eq!(ns, vec![1, 2, 3, 4, 5]);
    assert_eq!(
        read.entries[1].kind,
        EntryKind::Output {
            stream: Stream::Stderr,
            data: Bytes(b"789".to_vec())
        }
    );
    assert_eq!(read.entries[2].kind, EntryKind::Clipped { dropped: 6 });
    // Only a settled result waits for the daemon's `done`.
    assert!(!os.files.contains_key(&journal::settle_flag(path)));
}

#[test]
fn cell_processes_spare_protected_pids() {
    let mut os = FakeOs::new();
    // 10 = caller (daemon); 60 = shim (child of 10); 61 = main (own session)
    os.add(proc_(60, 10, 10));
    os.add(proc_(61, 60, 61));
    os.add(proc_(62, 61, 61)); // same group
    os.add(proc_(63, 60, 63)); // setsid'd orphan, reparented to the shim
    os.add(proc_(70, 1, 70)); // env marker only (escaped the tree)
    os.env.insert(70, vec![(MARKER_NAME.into(), "n:1".into())]);
    os.add(proc_(71, 60, 71)); // another cell's marker under our shim
    os.env.insert(71, vec![(MARKER_NAME.into(), "n:2".into())]);
    os.add(proc_(80, 1, 80)); // unrelated
    let table = Table::snapshot(&os);
    let protected = procs::protected(&table, 10);
    let scope = CellScope {
        shim: Some(60),
        pgid: Some(61),
        marker: "n:1".into(),
        other_markers: vec!["n:2".into()],
        extra: vec![],
        cgroup: None,
    };
    let set = procs::cell_processes(&os, &table, &scope, &protected);
    assert_eq!(set, BTreeSet::from([61, 62, 63, 70]));
}

#[test]
fn a_group_or_session_of_0_or_1_matches_nothing() {
    // In a PID namespace whose session leader is outside, procfs gives
    // sid 0 to everything started there; a scope with pgid 0 (a bad
    // `started` entry) must not take them all.
    let mut os = FakeOs::new();
    os.add(proc_(40, 1, 0)); // a bystander with pgid = sid = 0
    os.add(proc_(41, 1, 1)); // one in init's group
    let table = Table::snapshot(&os);
    let protected = procs::protected(&table, 10);
    for pgid in [0, 1] {
        let scope = CellScope {
            pgid: Some(pgid),
            marker: "n:1".into(),
            ..CellScope::default()
        };
        let set = procs::cell_processes(&os, &table, &scope, &protected);
        assert!(set.is_empty(), "pgid {pgid} took {set:?}");
    }
}

#[test]
fn cell_processes_include_cgroup_members_but_spare_protected_ones() {
    let mut os = FakeOs::new();
    os.add(proc_(61, 1, 61)); // setsid + env -i, shim gone: only the cgroup
    os.add(proc_(72, 1, 72)); // in the cgroup but another cell's marker
    os.env.insert(72, vec![(MARKER_NAME.into(), "n:2".into())]);
    os.add(proc_(80, 1, 80)); // unrelated
    let g = "/sys/fs/cgroup/tether-n-1".to_owned();
    os.cgroups.insert(g.clone(), vec![10, 61, 72]); // 10 = the caller
    let table = Table::snapshot(&os);
    let protected = procs::protected(&table, 10);
    let mut scope = CellScope {
        shim: None,
        pgid: None,
        marker: "n:1".into(),
        other_markers: vec!["n:2".into()],
        extra: vec![],
        cgroup: None,
    };
    assert!(procs::cell_processes(&os, &table, &scope, &protected).is_empty());
    scope.cgroup = Some(g);
    let set = procs::cell_processes(&os, &table, &scope, &protected);
    assert_eq!(set, BTreeSet::from([61]));
}

#[test]
fn cgroup_names_and_paths() {
    assert_eq!(procs::cgroup_name("n1:7"), "tether-n1-7");
    assert_eq!(procs::cgroup_name("a/b c:1"), "tether-a_b_c-1");
    assert!(procs::cgroup_name(&"x".repeat(500)).len() <= 200);
    assert!(procs::valid_cgroup_path("/sys/fs/cgroup/a/tether-n1-7"));
    for bad in [
        "",
        "tether-x",
        "/sys/fs/cgroup/user.slice",
        "/sys/fs/cgroup/../tether-x",
        "/sys/fs/cgroup//tether-x",
        "/sys/fs/cgroup/tether-",
        "/sys/fs/cgroup/tether-x\n/etc",
    ] {
        assert!(!procs::valid_cgroup_path(bad), "{bad:?}");
    }
}

/// The outcome in a journal's `result`, if there is one.
fn result_in(os: &FakeOs, journal: &str) -> Option<CellOutcome> {
    parse_journal(&os.files[journal])
        .entries
        .into_iter()
        .find_map(|e| match e.kind {
            EntryKind::Result { outcome } => Some(outcome),
            _ => None,
        })
}

fn has_done(os: &FakeOs, journal: &str) -> bool {
    parse_journal(&os.files[journal])
        .entries
        .iter()
        .any(|e| e.kind == EntryKind::Done)
}

/// The shim (60) of cell 1 started its main process 61 in session 61.
fn started_main(os: &mut FakeOs, cell: &super::layout::CellLayout) {
    os.add(proc_(61, 60, 61));
    let mut w = JournalWriter::open(os, &cell.journal(), 1 << 20).unwrap();
    w.push(
        os,
        EntryKind::Started {
            pid: 61,
            pgid: 61,
            starttime: 161,
        },
    )
    .unwrap();
}

/// A shell cell whose shim was killed is not resolved while anything of
/// it runs: the daemon ends it as a cancel does — TERM to what its cgroup
/// holds (a `setsid env -i` daemon that left the shim's tree, its marker
/// and its session), KILL after the grace period — and only then writes
/// `done`, with the shim's death as the error. The cgroup goes once
/// empty, and the cell's shell state is not kept (the next cell says so).
#[test]
fn a_cell_whose_shim_died_stays_owned_while_its_cgroup_has_members() {
    let mut os = FakeOs::new();
    let dir = kernel_with_submission(&mut os, false);
    let k = KernelLayout::new(&dir);
    let cell = k.cell(CellSeq(1));
    let mut d = Daemon::new(&dir, "n1");
    let _ = d.tick(&mut os);
    assert_eq!(os.launches.len(), 1);
    // The shim (60) made the cell's cgroup, recorded it, started main 61,
    // which started a setsid + env -i daemon 65 (reparented to pid 1).
    let g = "/sys/fs/cgroup/tether-n1-1".to_owned();
    os.files
        .insert(cell.cgroup(), format!("{g}\n").into_bytes());
    started_main(&mut os, &cell);
    os.add(proc_(65, 1, 65));
    os.cgroups.insert(g.clone(), vec![61, 65]);
    // The shell saved a state the kernel must not take.
    os.files
        .insert(cell.snapshot_new(), b"x=1\n#tether-end\n".to_vec());
    os.now = 5;
    let _ = d.tick(&mut os);
    // The shim is killed -9 (and its main process with it): 65 is still a
    // process of the cell, so the cell is not resolved: its result is
    // settled, 65 gets TERM.
    os.procs.remove(&60);
    os.procs.remove(&61);
    os.now = 10;
    let _ = d.tick(&mut os);
    let j = cell.journal();
    assert!(!has_done(&os, &j), "resolved while 65 runs");
    assert!(os.exists(&journal::settle_flag(&j)));
    assert_eq!(
        result_in(&os, &j),
        Some(CellOutcome::Error {
            message: super::daemon::SHIM_DIED.into()
        })
    );
    assert_eq!(os.signals, vec![(65, Signal::Term)]);
    // 65 ignores TERM: nothing more until the grace period (100 ms) ends.
    os.now = 50;
    let _ = d.tick(&mut os);
    assert_eq!(os.signals.len(), 1);
    assert!(!has_done(&os, &j));
    os.now = 110;
    let _ = d.tick(&mut os);
    assert_eq!(
        os.signals[1..],
        [(65, Signal::Stop), (65, Signal::Kill)],
        "{:?}",
        os.signals
    );
    // Gone now: the next look resolves the cell and removes the cgroup.
    os.now = 120;
    let _ = d.tick(&mut os);
    assert!(has_done(&os, &j));
    assert!(!os.cgroups.contains_key(&g), "the empty cgroup is removed");
    assert!(
        !os.files.contains_key(&k.snapshot()),
        "the state is not kept"
    );
    assert!(!os.files.contains_key(&cell.snapshot_new()));
    let note = String::from_utf8(os.files[&k.note()].clone()).unwrap();
    assert!(
        note.contains("cell 1 reached was not kept (its shim was killed"),
        "{note}"
    );
    // A cancel now finds it done and signals nothing.
    os.files.insert(cell.cancel(), b"cancel\n".to_vec());
    os.now = 130;
    let _ = d.tick(&mut os);
    assert_eq!(os.signals.len(), 3);
}

/// Without a cgroup: what the killed shim's tree held was reparented to
/// the daemon (a subreaper), and the cell's session and marker still
/// name the rest. All of it is the cell's — a `setsid env -i` daemon
/// (86, only the reparenting ties it to the cell), what it forks later
/// and what comes back to the daemon after its first look (88, double-
/// forked by a process that ignored the TERM) included — and nothing
/// else: the leftover cell 1 reported (70, no
/// marker, orphaned by the same kill of every shim) and a process
/// carrying another cell's marker (71), children of the daemon too, are
/// never signalled.
#[test]
fn a_killed_shims_orphans_session_and_marker_are_ended_without_a_cgroup() {
    let mut os = FakeOs::new();
    let dir = kernel_with_submission(&mut os, false);
    let k = KernelLayout::new(&dir);
    let mut d = Daemon::new(&dir, "n1");
    let _ = d.tick(&mut os);
    // Cell 1 ends, leaving 70 (a child of its shim 60, which lingers).
    let one = k.cell(CellSeq(1));
    os.add(proc_(70, 60, 70));
    let mut w = JournalWriter::open(&mut os, &one.journal(), 1 << 20).unwrap();
    w.finish(
        &mut os,
        vec![
            EntryKind::Result {
                outcome: CellOutcome::Ok,
            },
            EntryKind::Leftovers { pids: vec![70] },
        ],
    )
    .unwrap();
    let cell = k.cell(CellSeq(2));
    let sub = Submission {
        request_id: RequestId("r2".into()),
        seq: CellSeq(2),
        code: Bytes(b"sleep 9".to_vec()),
        timeout_ms: None,
    };
    os.files.insert(cell.submission(), to_json(&sub));
    os.now = 2;
    let _ = d.tick(&mut os);
    assert_eq!(os.launches.len(), 2, "cell 2 starts (shim 80)");
    os.add(proc_(81, 80, 81));
    let mut w = JournalWriter::open(&mut os, &cell.journal(), 1 << 20).unwrap();
    w.push(
        &mut os,
        EntryKind::Started {
            pid: 81,
            pgid: 81,
            starttime: 181,
        },
    )
    .unwrap();
    os.add(proc_(82, 81, 81)); // in the session
    os.add(proc_(83, 1, 83)); // left the session, kept the marker
    os.env.insert(83, vec![(MARKER_NAME.into(), "n1:2".into())]);
    os.add(proc_(86, 80, 86)); // setsid env -i, under the subreaper shim
    os.add(proc_(71, 10, 71));
    os.env.insert(71, vec![(MARKER_NAME.into(), "n1:0".into())]);
    os.now = 5;
    let _ = d.tick(&mut os);
    // Every shim is killed; their orphans come back to the daemon (10).
    os.procs.remove(&60);
    os.procs.remove(&80);
    for pid in [70, 86] {
        os.procs.get_mut(&pid).unwrap().ppid = 10;
    }
    os.now = 10;
    let _ = d.tick(&mut os);
    let mut termed: Vec<Pid> = os.signals.iter().map(|s| s.0).collect();
    termed.sort();
    assert_eq!(termed, vec![81, 82, 83, 86], "{:?}", os.signals);
    assert!(os.signals.iter().all(|s| s.1 == Signal::Term));
    assert!(!has_done(&os, &cell.journal()));
    // The shell and its session child die of the TERM; 83 and 86 ignore
    // it, and 86 forks 87 (no marker, its own session); what 83 double-
    // forked since, 88 (no marker, its own session), came back to the
    // daemon after its first look. 70, an earlier cell's leftover the
    // daemon has seen since that look, is not this cell's.
    for pid in [81, 82] {
        os.procs.remove(&pid);
    }
    os.add(proc_(87, 86, 87));
    os.add(proc_(88, 10, 88));
    os.now = 110;
    let _ = d.tick(&mut os);
    let killed: BTreeSet<Pid> = os
        .signals
        .iter()
        .filter(|s| s.1 == Signal::Kill)
        .map(|s| s.0)
        .collect();
    assert_eq!(killed, BTreeSet::from([83, 86, 87, 88]), "{:?}", os.signals);
    os.now = 120;
    let _ = d.tick(&mut os);
    assert!(has_done(&os, &cell.journal()));
    assert!(
        !os.signals.iter().any(|s| s.0 == 70 || s.0 == 71),
        "{:?}",
        os.signals
    );
    assert!(os.procs.contains_key(&70) && os.procs.contains_key(&71));
}

/// A shim killed after it appended `done` and before it wrote the done
/// flag: the cell had resolved (the client may have read it), so nothing
/// of it is ended — its leftover 65 may run on — and the flag is written.
#[test]
fn a_shim_killed_between_done_and_its_flag_leaves_a_resolved_cell() {
    let mut os = FakeOs::new();
    let dir = kernel_with_submission(&mut os, false);
    let cell = KernelLayout::new(&dir).cell(CellSeq(1));
    let mut d = Daemon::new(&dir, "n1");
    let _ = d.tick(&mut os);
    started_main(&mut os, &cell);
    os.add(proc_(65, 60, 61));
    os.env.insert(65, vec![(MARKER_NAME.into(), "n1:1".into())]);
    os.procs.remove(&61);
    let mut w = JournalWriter::open(&mut os, &cell.journal(), 1 << 20).unwrap();
    w.finish(
        &mut os,
        vec![
            EntryKind::Result {
                outcome: CellOutcome::Ok,
            },
            EntryKind::Leftovers { pids: vec![65] },
        ],
    )
    .unwrap();
    os.files.remove(&journal::done_flag(&cell.journal()));
    os.procs.remove(&60);
    os.procs.get_mut(&65).unwrap().ppid = 10;
    for now in [10, 20, 200, 400] {
        os.now = now;
        let _ = d.tick(&mut os);
    }
    assert!(os.signals.is_empty(), "{:?}", os.signals);
    assert!(os.exists(&journal::done_flag(&cell.journal())));
    assert_eq!(result_in(&os, &cell.journal()), Some(CellOutcome::Ok));
    assert!(os.procs.contains_key(&65));
}

/// A fresh daemon finds a cell its dead predecessor ran, whose shim is
/// gone too: what the cell still runs (its main process 61, still the one
/// the journal recorded, with its session, and a marked process) is ended
/// as a cancel ends it before the cell resolves, "daemon gone". A session
/// whose leader is no longer the recorded process (a restarted sandbox
/// reuses pids) is nobody's to signal.
#[test]
fn a_fresh_daemon_ends_what_a_cell_of_its_dead_predecessor_still_runs() {
    for same_main in [true, false] {
        let mut os = FakeOs::new();
        let dir = kernel_with_submission(&mut os, false);
        let cell = KernelLayout::new(&dir).cell(CellSeq(1));
        let mut old = Daemon::new(&dir, "n1");
        let _ = old.tick(&mut os);
        started_main(&mut os, &cell);
        os.add(proc_(62, 61, 61));
        os.add(proc_(63, 1, 63));
        os.env.insert(63, vec![(MARKER_NAME.into(), "n1:1".into())]);
        // The old daemon and the shim are killed.
        os.procs.remove(&60);
        if !same_main {
            // Pid 61 is now another process (another start time).
            os.procs.get_mut(&61).unwrap().starttime += 1;
        }
        os.now = 50;
        // Its spawn wrote the kernel's config under its own nonce.
        respawn_config(&mut os, &dir, "n2");
        let mut d = Daemon::new(&dir, "n2");
        let _ = d.tick(&mut os);
        let mut termed: Vec<Pid> = os.signals.iter().map(|s| s.0).collect();
        termed.sort();
        let expect = if same_main {
            vec![61, 62, 63]
        } else {
            vec![63]
        };
        assert_eq!(termed, expect, "{:?}", os.signals);
        // A tick within the grace (100 ms) sends no KILL.
        os.now = 60;
        let _ = d.tick(&mut os);
        assert!(
            os.signals.iter().all(|s| s.1 == Signal::Term),
            "KILL only after the grace: {:?}",
            os.signals
        );
        assert!(!has_done(&os, &cell.journal()));
        os.now = 160;
        let _ = d.tick(&mut os);
        os.now = 170;
        let _ = d.tick(&mut os);
        assert!(has_done(&os, &cell.journal()));
        assert_eq!(
            result_in(&os, &cell.journal()),
            Some(CellOutcome::Error {
                message: "the kernel daemon that ran this cell is gone".into()
            })
        );
        assert_eq!(os.procs.contains_key(&61), !same_main);
        assert_eq!(os.procs.contains_key(&62), !same_main);
        assert!(!os.procs.contains_key(&63));
    }
}

/// The kernel's config as a spawn under `nonce` rewrites it.
fn respawn_config(os: &mut FakeOs, dir: &str, nonce: &str) {
    let config = KernelLayout::new(dir).config();
    let mut c: KernelConfig = serde_json::from_slice(&os.files[&config]).unwrap();
    c.nonce = nonce.into();
    os.files.insert(config, to_json(&c));
}

fn kernel_with_submission(os: &mut FakeOs, tombstone: bool) -> String {
    let layout = Layout::new("/r");
    let k = layout.kernel(&KernelName::new("k").unwrap());
    let config = KernelConfig {
        lang: Lang::Shell,
        nonce: "n1".into(),
        idle_timeout_ms: 60_000,
        grace_ms: 100,
    };
    os.files.insert(k.config(), to_json(&config));
    let cell = k.cell(CellSeq(1));
    let sub = Submission {
        request_id: RequestId("r1".into()),
        seq: CellSeq(1),
        code: Bytes(b"sleep 9".to_vec()),
        timeout_ms: None,
    };
    os.files.insert(cell.submission(), to_json(&sub));
    if tombstone {
        os.files.insert(cell.cancel(), b"cancel\n".to_vec());
    }
    k.dir().to_owned()
}

/// A shell cell whose code holds a NUL byte ends as an error that says
/// so, and nothing of it runs (no shim, no code file): a shell would run
/// it only up to the NUL, silently (inspect_ai's test_bash_null_byte).
/// The next cell runs.
#[test]
fn a_shell_cell_with_a_null_byte_is_an_error_and_nothing_of_it_runs() {
    let mut os = FakeOs::new();
    let dir = kernel_with_submission(&mut os, false);
    let k = KernelLayout::new(&dir);
    let cell = k.cell(CellSeq(1));
    let sub = Submission {
        request_id: RequestId("r1".into()),
        seq: CellSeq(1),
        code: Bytes(b"echo before\0; touch poc".to_vec()),
        timeout_ms: None,
    };
    os.files.insert(cell.submission(), to_json(&sub));
    let mut d = Daemon::new(&dir, "n1");
    let _ = d.tick(&mut os);
    assert!(os.launches.is_empty(), "{:?}", os.launches);
    assert!(!os.files.contains_key(&cell.code()));
    assert!(has_done(&os, &cell.journal()));
    match result_in(&os, &cell.journal()) {
        Some(CellOutcome::Error { message }) => {
            assert!(message.contains("null byte (at byte 11)"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    let next = k.cell(CellSeq(2));
    let sub = Submission {
        request_id: RequestId("r2".into()),
        seq: CellSeq(2),
        code: Bytes(b"true".to_vec()),
        timeout_ms: None,
    };
    os.files.insert(next.submission(), to_json(&sub));
    os.now = 10;
    let _ = d.tick(&mut os);
    assert_eq!(os.launches.len(), 1, "the next cell runs");
}

/// A cell's timeout counts from its launch, not from the start of the
/// tick that launched it: a tick slow before the launch (a filesystem
/// call held up, a preempted process) would cut the timeout short (drawn
/// seed 262: 372 ms of a 442 ms timeout).
#[test]
fn a_cells_timeout_counts_from_its_launch_not_from_the_ticks_start() {
    let mut os = FakeOs::new();
    let dir = kernel_with_submission(&mut os, false);
    let cell = KernelLayout::new(&dir).cell(CellSeq(1));
    let sub = Submission {
        request_id: RequestId("r1".into()),
        seq: CellSeq(1),
        code: Bytes(b"sleep 9".to_vec()),
        timeout_ms: Some(500),
    };
    os.files.insert(cell.submission(), to_json(&sub));
    os.launch_ms = 200;
    let mut d = Daemon::new(&dir, "n1");
    os.now = 1_000;
    let _ = d.tick(&mut os);
    assert_eq!(os.launches.len(), 1);
    assert_eq!(os.now, 1_200, "launched at 1,200");
    started_main(&mut os, &cell);
    os.now = 1_650;
    let _ = d.tick(&mut os);
    assert!(!os.exists(&cell.cancel()), "450 ms after its launch");
    assert!(os.signals.is_empty(), "{:?}", os.signals);
    os.now = 1_700;
    let _ = d.tick(&mut os);
    assert!(os.exists(&cell.cancel()), "500 ms after its launch");
}

/// As [`kernel_with_submission`], for a Python kernel.
fn python_kernel_with_submission(os: &mut FakeOs) -> String {
    let dir = kernel_with_submission(os, false);
    let config = KernelConfig {
        lang: Lang::Python,
        nonce: "n1".into(),
        idle_timeout_ms: 60_000,
        grace_ms: 100,
    };
    os.files
        .insert(KernelLayout::new(&dir).config(), to_json(&config));
    dir
}

#[test]
fn a_submission_the_full_disk_keeps_from_starting_keeps_the_daemon_from_idling() {
    // reaper seed 102301: a cell submitted just before the disk filled
    // could not be taken (its journal and code unwritable); the daemon,
    // tracking no cell, took itself for idle and exited with the cell
    // unfinished: the kernel was lost by the agent's own doing.
    let mut os = FakeOs::new();
    let dir = kernel_with_submission(&mut os, false);
    let k = KernelLayout::new(&dir);
    let config = KernelConfig {
        lang: Lang::Shell,
        nonce: "n1".into(),
        idle_timeout_ms: 1_000,
        grace_ms: 100,
    };
    os.files.insert(k.config(), to_json(&config));
    os.disk_full = true;
    let mut d = Daemon::new(&dir, "n1");
    for _ in 0..30 {
        assert!(matches!(d.tick(&mut os), DaemonStep::Continue { .. }));
        os.now += 100;
    }
    assert!(os.launches.is_empty(), "nothing could start on a full disk");
    os.disk_full = false;
    assert!(matches!(d.tick(&mut os), DaemonStep::Continue { .. }));
    assert_eq!(os.launches.len(), 1, "the cell starts once there is room");
}

/// Ticks `d` every 100 ms, ten times at most, until it exits; whether it
/// did.
fn tick_until_exit(d: &mut Daemon, os: &mut FakeOs) -> bool {
    for _ in 0..10 {
        if d.tick(os) == DaemonStep::Exit {
            return true;
        }
        os.now += 100;
    }
    false
}

#[test]
fn a_daemon_sent_term_during_a_tick_starts_no_cell_and_its_stop_resolves_it() {
    // reaper seed 1464: the TERM landed while a tick was under way (the
    // daemon acts on it between ticks); the tick still started the cell
    // submitted meanwhile, after the kernel was already being stopped.
    let mut os = FakeOs::new();
    let dir = kernel_with_submission(&mut os, false);
    let mut d = Daemon::new(&dir, "n1");
    os.term_pending = true;
    assert!(matches!(d.tick(&mut os), DaemonStep::Continue { .. }));
    assert!(os.launches.is_empty(), "a cell started after the TERM");
    d.terminate(os.now());
    tick_until_exit(&mut d, &mut os);
    let kinds = journal_kinds(&os, &format!("{dir}/cells/1/journal"));
    assert!(
        kinds.iter().any(|k| matches!(
            k,
            EntryKind::Result {
                outcome: CellOutcome::Error { .. }
            }
        )),
        "the stop resolves the untaken cell: {kinds:?}"
    );
    assert!(os.launches.is_empty());
}

#[test]
fn a_term_during_the_tick_that_finds_the_daemon_idle_is_a_stop_not_an_idle_exit() {
    // idle_exit seed 102477: the sandbox's clock jumped 2 h and a TERM
    // landed during the tick that took a cell just recorded; the tick
    // accepted it, left it for the stop, then found the daemon idle and
    // exited: no stop ever resolved the cell, and its client was told the
    // state was lost while it was in flight.
    let mut os = FakeOs::new();
    let dir = kernel_with_submission(&mut os, false);
    let submission = KernelLayout::new(&dir).cell(CellSeq(1)).submission();
    let recorded = os.files.remove(&submission).unwrap();
    let mut d = Daemon::new(&dir, "n1");
    assert!(matches!(d.tick(&mut os), DaemonStep::Continue { .. }));
    os.files.insert(submission, recorded);
    os.now += 2 * 3_600_000;
    os.term_at_append = true;
    assert!(
        matches!(d.tick(&mut os), DaemonStep::Continue { .. }),
        "the daemon went idle with a cell it had accepted"
    );
    assert!(os.launches.is_empty());
    d.terminate(os.now());
    assert!(tick_until_exit(&mut d, &mut os));
    let kinds = journal_kinds(&os, &format!("{dir}/cells/1/journal"));
    assert!(
        matches!(
            kinds.as_slice(),
            [
                EntryKind::Accepted { .. },
                EntryKind::Result {
                    outcome: CellOutcome::Error { .. }
                },
                EntryKind::Done
            ]
        ),
        "the stop resolves the accepted cell: {kinds:?}"
    );
}

#[test]
fn a_stop_leaves_a_cell_directory_without_a_submission_as_it_found_it() {
    // A submit that failed after making its cell's directory (a full disk)
    // recorded nothing: its client sends the cell again, to run under the
    // next daemon. A stop that tombstoned or closed that directory too
    // (the tenth mutants sample's `unfinished` with `||`) would make the
    // resend come back cancelled without running.
    let mut os = FakeOs::new();
    let dir = kernel_with_submission(&mut os, false);
    let unrecorded = KernelLayout::new(&dir).cell(CellSeq(2));
    os.create_dir_all(unrecorded.dir()).unwrap();
    let mut d = Daemon::new(&dir, "n1");
    d.terminate(os.now());
    assert!(tick_until_exit(&mut d, &mut os), "the stop ends");
    assert!(
        os.exists(&format!("{dir}/cells/1/journal")),
        "the recorded cell is resolved by the stop"
    );
    assert!(!os.exists(&unrecorded.cancel()), "tombstoned");
    assert!(!os.exists(&unrecorded.journal()), "given a journal");
}

#[test]
fn a_stopped_daemon_announces_its_exit_so_a_late_cell_goes_to_the_next_daemon() {
    // daemon_termed seed 103343: a submit recorded its cell during the
    // stop's last tick, after the stop had closed the cells it saw; the
    // cell was left open and its client told the state was lost in flight.
    let mut os = FakeOs::new();
    let dir = kernel_with_submission(&mut os, false);
    let k = KernelLayout::new(&dir);
    let mut d = Daemon::new(&dir, "n1");
    d.terminate(os.now());
    assert!(tick_until_exit(&mut d, &mut os), "the stop ends");
    assert_eq!(
        os.files.get(&k.exiting()).map(Vec::as_slice),
        Some(&b"n1"[..]),
        "the exit is announced under the daemon's nonce"
    );
}

#[test]
fn a_tombstoned_submission_never_starts() {
    let mut os = FakeOs::new();
    let dir = kernel_with_submission(&mut os, true);
    let mut d = Daemon::new(&dir, "n1");
    assert!(matches!(d.tick(&mut os), DaemonStep::Continue { .. }));
    assert!(os.launches.is_empty());
    let read = parse_journal(&os.files[&format!("{dir}/cells/1/journal")]);
    let kinds: Vec<_> = read.entries.iter().map(|e| e.kind.clone()).collect();
    assert_eq!(
        kinds,
        vec![
            EntryKind::Accepted {
                request_id: RequestId("r1".into())
            },
            EntryKind::Result {
                outcome: CellOutcome::Cancelled
            },
            EntryKind::Done
        ]
    );
}

#[test]
fn escalation_terms_then_kills_everything_every_tick_after_grace() {
    let mut os = FakeOs::new();
    let dir = kernel_with_submission(&mut os, false);
    let mut d = Daemon::new(&dir, "n1");
    let _ = d.tick(&mut os);
    assert_eq!(os.launches.len(), 1);
    // the shim (60) started main 61; 61's child 62 will ignore TERM;
    // the leader 61 exits first.
    os.add(proc_(61, 60, 61));
    os.add(proc_(62, 61, 61));
    os.append(
        &format!("{dir}/cells/1/journal"),
        &crate::protocol::JournalEntry {
            n: 2,
            kind: EntryKind::Started {
                pid: 61,
                pgid: 61,
                starttime: 161,
            },
        }
        .to_line(),
    )
    .unwrap();
    os.files
        .insert(format!("{dir}/cells/1/cancel"), b"cancel\n".to_vec());
    os.now = 10;
    let _ = d.tick(&mut os);
    assert_eq!(os.signals, vec![(61, Signal::Term), (62, Signal::Term)]);
    os.procs.remove(&61); // the leader obeyed; 62 did not
    os.signals.clear();
    os.now = 50;
    let _ = d.tick(&mut os);
    assert!(os.signals.is_empty(), "nothing before the grace period");
    os.now = 111;
    let _ = d.tick(&mut os);
    assert_eq!(os.signals, vec![(62, Signal::Stop), (62, Signal::Kill)]);
    assert!(!os
        .signals
        .iter()
        .any(|(p, _)| *p == 60 || *p == 10 || *p == 1));
}

#[test]
fn bad_stdin_gives_a_reply_line_not_a_panic() {
    let mut os = FakeOs::new();
    for input in [
        &b""[..],
        b"\xff\xfe",
        b"[]",
        b"{\"v\":1}",
        b"{\"v\":1,\"id\":3,\"op\":{\"wait\":{}}}",
    ] {
        let mut run = OpRun::new("/r", input);
        let line = run.poll(&mut os).expect("an immediate reply");
        let env: ReplyEnvelope = serde_json::from_slice(&line).unwrap();
        assert!(env.error.is_some(), "{input:?}");
    }
}

#[test]
fn a_python_cell_acked_before_the_daemon_saw_done_does_not_block_the_next() {
    let mut os = FakeOs::new();
    let dir = python_kernel_with_submission(&mut os);
    let k = KernelLayout::new(&dir);
    let mut d = Daemon::new(&dir, "n1");
    let _ = d.tick(&mut os);
    let run = format!("{dir}/py/run");
    assert_eq!(os.files.get(&run).map(Vec::as_slice), Some(&b"1"[..]));
    // The cell finishes and the client acks it (its directory goes) before
    // the daemon's next tick; then cell 2 arrives.
    os.remove_all(k.cell(CellSeq(1)).dir()).unwrap();
    let sub = Submission {
        request_id: RequestId("r2".into()),
        seq: CellSeq(2),
        code: Bytes(b"x".to_vec()),
        timeout_ms: None,
    };
    os.files
        .insert(k.cell(CellSeq(2)).submission(), to_json(&sub));
    let _ = d.tick(&mut os);
    let _ = d.tick(&mut os);
    assert_eq!(os.files.get(&run).map(Vec::as_slice), Some(&b"2"[..]));
}

/// A Python kernel whose daemon started cell 1 on a fresh interpreter
/// (61, under its shim 60): the daemon, the kernel and the cell's journal.
fn python_cell_started(os: &mut FakeOs) -> (Daemon, KernelLayout, JournalWriter) {
    let dir = python_kernel_with_submission(os);
    let k = KernelLayout::new(&dir);
    let mut d = Daemon::new(&dir, "n1");
    let _ = d.tick(os);
    assert_eq!(os.launches.len(), 1, "the interpreter's shim (60)");
    os.add(proc_(61, 60, 60)); // the interpreter
    let journal = k.cell(CellSeq(1)).journal();
    let mut w = JournalWriter::open(os, &journal, 1 << 20).unwrap();
    w.push(
        os,
        EntryKind::Started {
            pid: 61,
            pgid: 60,
            starttime: 161,
        },
    )
    .unwrap();
    (d, k, w)
}

/// The interpreter's shim killed after a cancel's result was settled
/// and before `done` (python_cancel seed 1195, live): the cancelled cell
/// can take no note, so the next Python cell carries it; without it the
/// next cell finds the namespace gone and nobody said so.
#[test]
fn an_interpreter_lost_after_its_cells_result_is_told_by_the_next_cell() {
    let mut os = FakeOs::new();
    let (mut d, k, mut w) = python_cell_started(&mut os);
    let cell = k.cell(CellSeq(1));
    // Cancelled: the shim settles the result, then is killed -9 (the
    // interpreter with it) before it writes `done`.
    os.files.insert(cell.cancel(), b"cancel\n".to_vec());
    w.push(
        &mut os,
        EntryKind::Result {
            outcome: CellOutcome::Cancelled,
        },
    )
    .unwrap();
    os.now = 10;
    let _ = d.tick(&mut os);
    os.procs.remove(&60);
    os.procs.remove(&61);
    os.now = 20;
    let _ = d.tick(&mut os);
    let j = cell.journal();
    assert_eq!(result_in(&os, &j), Some(CellOutcome::Cancelled));
    let noted = |os: &FakeOs, j: &str| {
        parse_journal(&os.files[j]).entries.iter().any(|e| {
            matches!(&e.kind, EntryKind::Output { stream: Stream::Stderr, data }
                if super::python::is_loss_note(data.as_slice()))
        })
    };
    assert!(!noted(&os, &j), "a note after the result");
    // Cell 2 starts on a fresh interpreter and says the namespace is lost.
    let sub = Submission {
        request_id: RequestId("r2".into()),
        seq: CellSeq(2),
        code: Bytes(b"x".to_vec()),
        timeout_ms: None,
    };
    os.files
        .insert(k.cell(CellSeq(2)).submission(), to_json(&sub));
    for now in [30, 40, 50] {
        os.now = now;
        let _ = d.tick(&mut os);
    }
    assert_eq!(os.launches.len(), 2, "a fresh interpreter's shim");
    assert!(noted(&os, &k.cell(CellSeq(2)).journal()));
}

/// python_state seed 104103: the daemon told the loss of the namespace
/// (the shim's death) and only then killed the orphaned interpreter; its
/// tick, slow, let the client hear of the loss while the interpreter, and
/// the namespace, still lived.
#[test]
fn an_orphaned_interpreter_is_killed_before_its_loss_is_told() {
    let mut os = FakeOs::new();
    let (mut d, k, _) = python_cell_started(&mut os);
    let mark = format!("n1:{}", super::python::INTERPRETER_MARK);
    os.env.insert(61, vec![(MARKER_NAME.into(), mark)]);
    let cell = k.cell(CellSeq(1));
    os.now = 10;
    let _ = d.tick(&mut os);
    // The shim is killed from outside; the interpreter lives on, orphaned.
    os.procs.remove(&60);
    os.procs.get_mut(&61).unwrap().ppid = 10;
    os.acts.clear();
    os.now = 20;
    let _ = d.tick(&mut os);
    let j = format!("append {}", cell.journal());
    let kill = os.acts.iter().position(|a| a == "signal 61 Kill");
    let told = os.acts.iter().position(|a| *a == j);
    assert!(kill.is_some() && told.is_some(), "{:?}", os.acts);
    assert!(kill < told, "killed, then told: {:?}", os.acts);
}

/// The interpreter killed while the disk is full (python_cancel seed
/// 101419): the record that the cell it died in told the death cannot be
/// written, so that cell's note and result wait for it. Written without
/// it, the daemon took the death for one nobody told and the next cell
/// said it a second time.
#[test]
fn a_death_in_a_cell_while_the_disk_is_full_is_told_once() {
    use super::{ExitStatus, InterpShim, InterpStep};
    let mut os = FakeOs::new();
    let dir = python_kernel_with_submission(&mut os);
    let k = KernelLayout::new(&dir);
    let mut d = Daemon::new(&dir, "n1");
    let _ = d.tick(&mut os);
    assert_eq!(os.launches.len(), 1, "the interpreter's shim (60)");
    let mut shim = InterpShim::new(os.launches[0].clone());
    let mut step = shim.poll_step(&mut os);
    assert!(matches!(step, InterpStep::StartInterpreter { .. }));
    os.add(proc_(61, 60, 61));
    shim.handle_interpreter(Ok((61, 161)));
    // Cell 1 goes to the interpreter.
    for _ in 0..10 {
        step = shim.poll_step(&mut os);
        match step {
            InterpStep::EnterCgroup { .. } => {
                shim.handle_cgroup(&mut os, None);
            }
            InterpStep::Send { .. } => {
                shim.handle_sent(true);
                break;
            }
            _ => {}
        }
    }
    assert!(matches!(step, InterpStep::Send { .. }), "{step:?}");
    // Killed from outside, the disk full.
    os.disk_full = true;
    os.procs.remove(&61);
    shim.handle_exit(61, ExitStatus::Signal(9));
    let cell = k.cell(CellSeq(1));
    let notes = |os: &FakeOs, j: &str| {
        os.files.get(j).map_or(0, |b| {
            parse_journal(b)
                .entries
                .iter()
                .filter(|e| {
                    matches!(&e.kind, EntryKind::Output { stream: Stream::Stderr, data }
                        if super::python::is_loss_note(data.as_slice()))
                })
                .count()
        })
    };
    for now in [10, 20, 30] {
        os.now = now;
        let _ = shim.poll_step(&mut os);
        let _ = d.tick(&mut os);
    }
    assert_eq!(notes(&os, &cell.journal()), 0, "nothing written yet");
    // Room again: the record, then the note and the result.
    os.disk_full = false;
    for now in [100, 200] {
        os.now = now;
        let _ = shim.poll_step(&mut os);
    }
    assert!(os.exists(&super::python::told_file(&k)));
    assert_eq!(notes(&os, &cell.journal()), 1);
    assert!(result_in(&os, &cell.journal()).is_some());
    // The shim, its tree empty, exits; cell 2 starts on a fresh
    // interpreter without saying the loss again.
    assert!(matches!(shim.poll_step(&mut os), InterpStep::Linger));
    shim.handle_tree_empty(&mut os);
    os.procs.remove(&60);
    let sub = Submission {
        request_id: RequestId("r2".into()),
        seq: CellSeq(2),
        code: Bytes(b"x".to_vec()),
        timeout_ms: None,
    };
    os.files
        .insert(k.cell(CellSeq(2)).submission(), to_json(&sub));
    for now in [300, 400, 500] {
        os.now = now;
        let _ = d.tick(&mut os);
    }
    assert_eq!(os.launches.len(), 2, "a fresh interpreter's shim");
    assert_eq!(notes(&os, &k.cell(CellSeq(2)).journal()), 0, "told twice");
}

#[test]
fn zombies_are_never_a_kernel_process_a_shutdown_waits_for() {
    // Under a PID 1 that never reaps (many containers), a killed shim of an
    // acknowledged cell stays a zombie for good: shutdown must not count it.
    let mut os = FakeOs::new();
    let k = KernelLayout::new("/root/kernels/k");
    let record = super::kernel::LaunchRecord {
        shim_pid: 70,
        shim_starttime: 170,
        marker: "n:1".into(),
        cgroup: None,
        boot_id: None,
    };
    os.files
        .insert(format!("{}/leftovers/1.json", k.dir()), to_json(&record));
    os.add(ProcInfo {
        zombie: true,
        ..proc_(70, 1, 70)
    });
    os.add(proc_(71, 70, 71)); // a live child of the zombie shim's tree
    let table = Table::snapshot(&os);
    let protected = procs::protected(&table, os.me);
    let set = super::op::kernel_processes(&os, &table, &k, &protected);
    assert_eq!(set, BTreeSet::from([71]));
    os.procs.remove(&71);
    let table = Table::snapshot(&os);
    assert!(super::op::kernel_processes(&os, &table, &k, &protected).is_empty());
}

#[test]
fn a_leftovers_record_of_an_earlier_boot_names_no_process() {
    // background_log seed 103280: an acknowledged cell's lingering shim
    // (pid 40 here) was recorded under leftovers/; the sandbox rebooted, and the
    // client's channel exec got that pid again at the same ticks since boot.
    // The idle exit of the kernel's next daemon KILLed that exec.
    let mut os = FakeOs::new();
    let k = KernelLayout::new("/root/kernels/k");
    let record = super::kernel::LaunchRecord {
        boot_id: Some("boot-0".into()),
        ..super::kernel::LaunchRecord::new(&os, 40, 140, "n:2".into())
    };
    os.files
        .insert(format!("{}/leftovers/2.json", k.dir()), to_json(&record));
    os.add(proc_(40, 1, 40)); // same pid, same start time, this boot
    os.add(proc_(41, 40, 40));
    let table = Table::snapshot(&os);
    let protected = procs::protected(&table, os.me);
    assert!(super::op::kernel_processes(&os, &table, &k, &protected).is_empty());
    // The same record written in this boot still names the shim's tree.
    let record = super::kernel::LaunchRecord::new(&os, 40, 140, "n:2".into());
    assert_eq!(record.boot_id.as_deref(), Some("boot-1"));
    os.files
        .insert(format!("{}/leftovers/2.json", k.dir()), to_json(&record));
    let set = super::op::kernel_processes(&os, &table, &k, &protected);
    assert_eq!(set, BTreeSet::from([40, 41]));
}

#[test]
fn a_done_python_cell_without_a_cgroup_stays_owned_while_a_marked_leftover_lives() {
    // No cgroup (read-only, as in docker): a Python cell's leftover is a
    // child of the one interpreter, known only by the cell's marker. The
    // daemon must keep the done cell, so that its cancel still kills it.
    let mut os = FakeOs::new();
    let dir = python_kernel_with_submission(&mut os);
    let k = KernelLayout::new(&dir);
    let mut d = Daemon::new(&dir, "n1");
    let _ = d.tick(&mut os);
    let cell = k.cell(CellSeq(1));
    os.add(proc_(61, 60, 60)); // the interpreter, under its shim
    os.add(proc_(70, 61, 61)); // cell 1's subprocess, left running
    os.env.insert(
        70,
        vec![(MARKER_NAME.into(), procs::marker_value("n1", CellSeq(1)))],
    );
    let mut w = JournalWriter::open(&mut os, &cell.journal(), 1 << 20).unwrap();
    w.push(
        &mut os,
        EntryKind::Started {
            pid: 61,
            pgid: 60,
            starttime: 161,
        },
    )
    .unwrap();
    w.finish(
        &mut os,
        vec![
            EntryKind::Result {
                outcome: CellOutcome::Ok,
            },
            EntryKind::Done,
        ],
    )
    .unwrap();
    os.now = 10;
    let _ = d.tick(&mut os);
    assert!(os.signals.is_empty());
    os.files.insert(cell.cancel(), b"cancel\n".to_vec());
    os.now = 20;
    let _ = d.tick(&mut os);
    assert_eq!(os.signals, vec![(70, Signal::Term)]);
}

/// A shell cell's launch under kernel `/k` (the kernel directory exists).
fn shell_launch(os: &mut FakeOs) -> CellLaunch {
    os.files.insert("/k/config.json".into(), b"{}".to_vec());
    // The daemon launches a cell whose directory its submit made.
    os.dirs.insert("/k/cells/1".into());
    CellLaunch {
        kernel_dir: "/k".into(),
        cell_dir: "/k/cells/1".into(),
        lang: Lang::Shell,
        argv: vec!["sh".into(), "-c".into(), "true".into()],
        marker: (MARKER_NAME.into(), "n:1".into()),
    }
}

fn journal_kinds(os: &FakeOs, path: &str) -> Vec<EntryKind> {
    parse_journal(&os.files[path])
        .entries
        .into_iter()
        .map(|e| e.kind)
        .collect()
}

#[test]
fn the_shim_machine_resolves_then_logs_late_output_and_exits_when_its_tree_is_empty() {
    use super::shim::cell::{CellShim, ShimStep};
    let mut os = FakeOs::new();
    let mut shim = CellShim::new(shell_launch(&mut os));
    let ShimStep::MakeCgroup { .. } = shim.poll_step(&mut os) else {
        panic!("the cgroup comes first")
    };
    assert!(shim.handle_cgroup(&mut os, Some("/cg/tether-n-1".into())));
    assert_eq!(os.files["/k/cells/1/cgroup"], b"/cg/tether-n-1\n");
    let ShimStep::Start { cgroup, .. } = shim.poll_step(&mut os) else {
        panic!("then the main process")
    };
    assert_eq!(cgroup.as_deref(), Some("/cg/tether-n-1"));
    os.add(proc_(70, 10, 70));
    shim.handle_started(&mut os, Ok((70, 170)));
    shim.handle_output(&mut os, Stream::Stdout, b"hi\n")
        .unwrap();
    // A background child holds the pipes: the main exit alone does not
    // complete the cell before the drain bound.
    os.add(proc_(71, 10, 70));
    os.procs.remove(&70);
    shim.handle_exit(Timestamp(0), 70, super::ExitStatus::Code(0));
    assert_eq!(shim.poll_step(&mut os), ShimStep::Pump);
    assert_eq!(
        shim.poll_timeout(Timestamp(0)),
        Some(Timestamp(0) + super::shim::DEFAULT_DRAIN)
    );
    os.now = 200;
    assert_eq!(shim.poll_step(&mut os), ShimStep::FinalRead);
    shim.handle_output(&mut os, Stream::Stderr, b"last\n")
        .unwrap();
    assert_eq!(shim.poll_step(&mut os), ShimStep::Linger);
    let kinds = journal_kinds(&os, "/k/cells/1/journal");
    assert!(matches!(kinds[0], EntryKind::Started { pid: 70, .. }));
    assert!(matches!(&kinds[2], EntryKind::Output { data, .. } if data.0 == b"last\n"));
    assert!(matches!(kinds[3], EntryKind::Result { .. }));
    assert_eq!(kinds[4], EntryKind::Leftovers { pids: vec![71] });
    assert_eq!(kinds[5], EntryKind::Done);
    // Late output: the background log, never the cell's journal.
    shim.handle_output(&mut os, Stream::Stdout, b"late\n")
        .unwrap();
    assert_eq!(journal_kinds(&os, "/k/cells/1/journal").len(), 6);
    assert_eq!(os.files["/k/background.log"], b"late\n");
    assert!(shim.reading(Stream::Stdout));
    os.procs.remove(&71);
    shim.handle_tree_empty(&mut os);
    assert_eq!(shim.poll_step(&mut os), ShimStep::Exit(0));
}

#[test]
fn the_shim_machine_never_starts_a_tombstoned_cell() {
    use super::shim::cell::{CellShim, ShimStep};
    let mut os = FakeOs::new();
    let launch = shell_launch(&mut os);
    os.files
        .insert("/k/cells/1/cancel".into(), b"cancel\n".to_vec());
    let mut shim = CellShim::new(launch);
    assert_eq!(shim.poll_step(&mut os), ShimStep::Linger);
    let kinds = journal_kinds(&os, "/k/cells/1/journal");
    assert_eq!(
        kinds,
        vec![
            EntryKind::Result {
                outcome: CellOutcome::Cancelled
            },
            EntryKind::Done
        ]
    );
    shim.handle_tree_empty(&mut os);
    assert_eq!(shim.poll_step(&mut os), ShimStep::Exit(0));
}

#[test]
fn the_background_log_keeps_its_newest_bytes_behind_a_note() {
    use super::background::{self, BackgroundLog, CAP, CHECK_EVERY, DROPPED_NOTE};
    let mut os = FakeOs::new();
    os.files.insert("/k/config.json".into(), b"{}".to_vec());
    let k = KernelLayout::new("/k");
    let mut log = BackgroundLog::new(&k);
    let line = |i: usize| format!("line {i:07}\n");
    let mut i = 0;
    while (i * 13) as u64 <= 3 * CAP {
        log.append(&mut os, line(i).as_bytes()).unwrap();
        i += 1;
    }
    let text = background::read(&os, &k).unwrap();
    assert!(text.len() as u64 <= CAP + CHECK_EVERY, "{}", text.len());
    assert!(text.starts_with(DROPPED_NOTE.as_bytes()));
    assert!(text.ends_with(line(i - 1).as_bytes()));
    // The note ends a line and the kept part starts at a line.
    let after_note = text.iter().position(|&b| b == b'\n').unwrap() + 1;
    assert!(text[after_note..].starts_with(b"line "));
    // A kernel that is gone gets no log.
    os.files.clear();
    log.append(&mut os, b"x").unwrap();
    assert!(os.files.is_empty());
}

/// A refused append on a full disk may put part of its bytes down (torn
/// writes): the writer cuts the unfinished line it left before it appends
/// again, keeping the whole lines; another writer's unfinished line is
/// not its to cut.
#[test]
fn a_torn_background_append_is_cut_before_the_next() {
    use super::background::{self, BackgroundLog};
    let mut os = FakeOs::new();
    os.files.insert("/k/config.json".into(), b"{}".to_vec());
    let k = KernelLayout::new("/k");
    let mut log = BackgroundLog::new(&k);
    log.append(&mut os, b"one\n").unwrap();
    os.disk_full = true;
    os.tear = 6;
    assert!(log.append(&mut os, b"two\nthree\n").is_err());
    assert_eq!(background::read(&os, &k).unwrap(), b"one\ntwo\nth");
    os.disk_full = false;
    log.append(&mut os, b"four\n").unwrap();
    assert_eq!(background::read(&os, &k).unwrap(), b"one\ntwo\nfour\n");
    // A refused append that put nothing down; meanwhile another writer's
    // line in the making ("pa" of "partial") is not this one's to cut.
    os.tear = 0;
    os.disk_full = true;
    let mut other = BackgroundLog::new(&k);
    assert!(other.append(&mut os, b"half\n").is_err());
    os.disk_full = false;
    os.files
        .get_mut(&k.background_log())
        .unwrap()
        .extend_from_slice(b"pa");
    other.append(&mut os, b"five\n").unwrap();
    assert_eq!(
        background::read(&os, &k).unwrap(),
        b"one\ntwo\nfour\npafive\n"
    );
}

/// A cancelled cell whose shim found processes still running settles its
/// result without `done`; the daemon writes `done` once the escalation
/// has nothing left, or after KILL_BOUND of KILL rounds with the survivors
/// named; never a second result.
#[test]
fn a_settled_cancel_is_done_once_its_processes_are_gone_or_outlived_kill() {
    for dies in [true, false] {
        let mut os = FakeOs::new();
        let dir = kernel_with_submission(&mut os, false);
        let journal = format!("{dir}/cells/1/journal");
        let mut d = Daemon::new(&dir, "n1");
        let _ = d.tick(&mut os);
        os.add(proc_(61, 60, 61));
        os.add(proc_(62, 61, 61)); // ignores TERM
        let mut w = JournalWriter::open(&mut os, &journal, 1024).unwrap();
        w.push(
            &mut os,
            EntryKind::Started {
                pid: 61,
                pgid: 61,
                starttime: 161,
            },
        )
        .unwrap();
        os.files
            .insert(format!("{dir}/cells/1/cancel"), b"cancel\n".to_vec());
        os.now = 10;
        let _ = d.tick(&mut os); // TERM
        os.procs.remove(&61);
        // The shim: the main process is gone, 62 is not.
        w.settle(
            &mut os,
            vec![EntryKind::Result {
                outcome: CellOutcome::Cancelled,
            }],
        )
        .unwrap();
        os.now = 50;
        let _ = d.tick(&mut os);
        assert!(!journal::is_done(&parse_journal(&os.files[&journal])));
        os.now = 111;
        let _ = d.tick(&mut os); // KILL: gone in the fake
        if dies {
            os.now = 121;
        } else {
            // It outlives every KILL (stuck in the kernel), for KILL_BOUND
            // counted from the first KILL round (at 111).
            os.add(proc_(62, 1, 61));
            os.now = 111 + KILL_BOUND.as_millis() as u64 - 1;
            let _ = d.tick(&mut os);
            assert!(!journal::is_done(&parse_journal(&os.files[&journal])));
            os.add(proc_(62, 1, 61));
            os.now += 1;
        }
        let _ = d.tick(&mut os);
        let kinds: Vec<EntryKind> = parse_journal(&os.files[&journal])
            .entries
            .into_iter()
            .map(|e| e.kind)
            .skip_while(|k| !matches!(k, EntryKind::Result { .. }))
            .collect();
        let mut expected = vec![EntryKind::Result {
            outcome: CellOutcome::Cancelled,
        }];
        if !dies {
            expected.push(EntryKind::Unkillable { pids: vec![62] });
        }
        expected.push(EntryKind::Done);
        assert_eq!(kinds, expected, "dies: {dies}");
    }
}

/// The shim keeps a cell's snapshot only when it is complete and the cell
/// belongs to the kernel's current daemon; a cell that could not save
/// leaves a note for the next one.
#[test]
fn only_a_complete_snapshot_of_the_current_daemon_becomes_the_state() {
    use super::shell::promote_state;
    let mut os = FakeOs::new();
    let dir = kernel_with_submission(&mut os, false);
    let k = KernelLayout::new(&dir);
    let cell = k.cell(CellSeq(1));
    let launch = |nonce: &str| CellLaunch {
        kernel_dir: dir.clone(),
        cell_dir: cell.dir().to_owned(),
        lang: Lang::Shell,
        argv: Vec::new(),
        marker: (MARKER_NAME.into(), format!("{nonce}:1")),
    };
    os.files
        .insert(cell.snapshot_new(), b"X=1\n#tether-end\n".to_vec());
    assert_eq!(promote_state(&mut os, &launch("n1"), None), Ok(true));
    assert_eq!(os.files[&k.snapshot()], b"X=1\n#tether-end\n");
    assert!(!os.files.contains_key(&cell.snapshot_new()));
    assert!(!os.files.contains_key(&k.note()));
    // Cut short (KILL mid-save): the previous state stays, with a note.
    os.files.insert(cell.snapshot_new(), b"X=2\n#teth".to_vec());
    assert_eq!(promote_state(&mut os, &launch("n1"), Some(9)), Ok(false));
    assert_eq!(os.files[&k.snapshot()], b"X=1\n#tether-end\n");
    let note = String::from_utf8(os.files[&k.note()].clone()).unwrap();
    assert!(
        note.contains("cell 1") && note.contains("signal 9"),
        "{note}"
    );
    // A cell of an earlier daemon (another nonce) changes nothing.
    os.files.remove(&k.note());
    os.files
        .insert(cell.snapshot_new(), b"X=3\n#tether-end\n".to_vec());
    assert_eq!(promote_state(&mut os, &launch("n0"), None), Ok(false));
    assert_eq!(os.files[&k.snapshot()], b"X=1\n#tether-end\n");
    assert!(!os.files.contains_key(&k.note()));
}

/// Writes a tool-call request file as a caller does.
fn request(os: &mut FakeOs, dir: &str, file_id: &str, id: &str, token: &str, args: &str) {
    let body = format!(r#"{{"id":"{id}","token":"{token}","name":"t","args":{args}}}"#);
    os.files
        .insert(format!("{dir}/{file_id}.req"), body.into_bytes());
}

/// A cell shim whose main process (pid 70) runs; with the calls
/// directory and credential its cell's processes carry.
fn shim_running_a_cell(os: &mut FakeOs) -> (super::shim::cell::CellShim, String, String) {
    use super::shim::cell::{CellShim, ShimStep};
    let mut shim = CellShim::new(shell_launch(os));
    let _ = shim.poll_step(os);
    let _ = shim.handle_cgroup(os, None);
    let ShimStep::Start { env, .. } = shim.poll_step(os) else {
        panic!("the main process starts")
    };
    let env: BTreeMap<String, String> = env.into_iter().collect();
    os.add(proc_(70, 10, 70));
    shim.handle_started(os, Ok((70, 170)));
    (
        shim,
        env["TETHER_CALL"].clone(),
        env["TETHER_CALL_TOKEN"].clone(),
    )
}

#[test]
fn the_shim_journals_calls_with_the_cells_credential_and_refuses_the_rest_unjournaled() {
    use super::calls::{self, answer_path};
    use super::shim::cell::ShimStep;
    use crate::protocol::{CallAnswer, CallReply};
    let mut os = FakeOs::new();
    let (mut shim, dir, token) = shim_running_a_cell(&mut os);
    assert_eq!(dir, "/k/cells/1/calls");
    assert!(!token.is_empty());
    request(&mut os, &dir, "good", "good", &token, r#"{"q":1}"#);
    request(
        &mut os,
        &dir,
        "stale",
        "stale",
        "a-finished-cells-token",
        "{}",
    );
    request(&mut os, &dir, "other", "not-its-name", &token, "{}");
    os.files.insert(format!("{dir}/.half.tmp"), b"{".to_vec());
    assert_eq!(shim.poll_step(&mut os), ShimStep::Pump);
    let kinds = journal_kinds(&os, "/k/cells/1/journal");
    let journaled: Vec<&EntryKind> = kinds
        .iter()
        .filter(|k| matches!(k, EntryKind::ToolCall { .. }))
        .collect();
    assert_eq!(
        journaled,
        vec![&EntryKind::ToolCall {
            id: "good".into(),
            name: "t".into(),
            args: serde_json::json!({"q": 1}),
        }],
        "only the call with the credential reaches the journal"
    );
    let refusal = |os: &FakeOs, id: &str| -> CallReply {
        serde_json::from_slice(&os.files[&answer_path(&dir, id)]).unwrap()
    };
    assert!(
        matches!(refusal(&os, "stale"), CallReply::Error { message } if message.contains("credential"))
    );
    assert!(matches!(refusal(&os, "other"), CallReply::Error { .. }));
    assert!(!os.files.contains_key(&answer_path(&dir, "good")));
    // The host's answer: only for a journaled call, once.
    let cell = super::layout::CellLayout::from_dir("/k/cells/1");
    let answer = |id: &str, v: i64| CallAnswer {
        id: id.into(),
        reply: CallReply::Ok { value: v.into() },
    };
    assert_eq!(
        calls::deliver(&mut os, &cell, &[answer("good", 7), answer("stale", 8)]).unwrap(),
        1
    );
    assert_eq!(
        calls::deliver(&mut os, &cell, &[answer("good", 9)]).unwrap(),
        0
    );
    assert_eq!(
        refusal(&os, "good"),
        CallReply::Ok { value: 7.into() },
        "the first answer wins"
    );
    assert!(matches!(refusal(&os, "stale"), CallReply::Error { .. }));
    // The answer appeared: journaled as answered, on the next tick.
    assert_eq!(shim.poll_step(&mut os), ShimStep::Pump);
    let kinds = journal_kinds(&os, "/k/cells/1/journal");
    assert_eq!(
        kinds.last(),
        Some(&EntryKind::ToolAnswered { id: "good".into() })
    );
    // A second look journals nothing new.
    assert_eq!(shim.poll_step(&mut os), ShimStep::Pump);
    assert_eq!(journal_kinds(&os, "/k/cells/1/journal").len(), kinds.len());
    // Once the cell resolved, no answer is written.
    request(&mut os, &dir, "late", "late", &token, "{}");
    os.procs.remove(&70);
    shim.handle_exit(Timestamp(0), 70, super::ExitStatus::Code(0));
    shim.handle_eof(Stream::Stdout);
    shim.handle_eof(Stream::Stderr);
    assert_eq!(shim.poll_step(&mut os), ShimStep::FinalRead);
    assert_eq!(shim.poll_step(&mut os), ShimStep::Linger);
    assert!(!journal_kinds(&os, "/k/cells/1/journal")
        .iter()
        .any(|k| matches!(k, EntryKind::ToolCall { id, .. } if id == "late")));
    assert_eq!(
        calls::deliver(&mut os, &cell, &[answer("late", 1)]).unwrap(),
        0
    );
}

#[test]
fn a_call_the_full_disk_keeps_out_of_the_journal_is_journaled_once_it_frees() {
    use super::calls;
    use crate::protocol::{CallAnswer, CallReply};
    let mut os = FakeOs::new();
    let (mut shim, dir, token) = shim_running_a_cell(&mut os);
    request(&mut os, &dir, "c1", "c1", &token, "{}");
    os.disk_full = true;
    for _ in 0..5 {
        let _ = shim.poll_step(&mut os);
        os.now += 20;
    }
    os.disk_full = false;
    for _ in 0..10 {
        let _ = shim.poll_step(&mut os);
        os.now += 100;
    }
    let calls_in = |os: &FakeOs| {
        journal_kinds(os, "/k/cells/1/journal")
            .iter()
            .filter(|k| matches!(k, EntryKind::ToolCall { .. }))
            .count()
    };
    assert_eq!(calls_in(&os), 1, "one call, journaled once");
    // Its answer, noted while the disk is full again, is journaled once too.
    let cell = super::layout::CellLayout::from_dir("/k/cells/1");
    let answer = CallAnswer {
        id: "c1".into(),
        reply: CallReply::Ok { value: 1.into() },
    };
    assert_eq!(calls::deliver(&mut os, &cell, &[answer]).unwrap(), 1);
    os.disk_full = true;
    for _ in 0..5 {
        let _ = shim.poll_step(&mut os);
        os.now += 20;
    }
    os.disk_full = false;
    for _ in 0..10 {
        let _ = shim.poll_step(&mut os);
        os.now += 100;
    }
    let answered = journal_kinds(&os, "/k/cells/1/journal")
        .iter()
        .filter(|k| matches!(k, EntryKind::ToolAnswered { .. }))
        .count();
    assert_eq!((calls_in(&os), answered), (1, 1));
}

#[test]
fn call_limits_are_refusals_that_say_which() {
    use super::calls::check;
    use crate::protocol::calls::{CallRequest, MAX_ARGS, MAX_CALLS};
    let req = |args: serde_json::Value| CallRequest {
        id: "a".into(),
        token: "t".into(),
        name: "n".into(),
        args,
    };
    assert_eq!(check("a", &req(1.into()), "t", 0), None);
    assert!(
        check("a", &req(1.into()), "t", MAX_CALLS).is_some_and(|m| m.contains("limit per cell"))
    );
    let big = serde_json::Value::String("x".repeat(MAX_ARGS));
    assert!(check("a", &req(big), "t", 0).is_some_and(|m| m.contains("over the limit")));
    assert!(check("a", &req(1.into()), "u", 0).is_some_and(|m| m.contains("credential")));
    let mut nameless = req(1.into());
    nameless.name.clear();
    assert!(check("a", &nameless, "t", 0).is_some());
}

/// Runs one op to its reply on `os` (no waiting: `wait_ms` 0).
fn op(os: &mut FakeOs, op: crate::protocol::Op) -> ReplyEnvelope {
    let env = crate::protocol::Envelope {
        v: crate::protocol::PROTOCOL_VERSION,
        id: 1,
        op,
    };
    let mut run = OpRun::new("/r", &serde_json::to_vec(&env).unwrap());
    let line = run.poll(os).expect("a reply without waiting");
    serde_json::from_slice(&line).unwrap()
}

/// Spawns the shell kernel `k` (nonce `n1`) through the op, as a client does.
fn spawn_shell_k(os: &mut FakeOs) {
    let spawned = op(
        os,
        crate::protocol::Op::Spawn {
            kernel: KernelName::new("k").unwrap(),
            lang: Lang::Shell,
            nonce: "n1".into(),
            idle_timeout_ms: 60_000,
            grace_ms: 100,
        },
    );
    assert!(spawned.error.is_none(), "{spawned:?}");
}

fn submit_op(seq: u64, request: &str) -> crate::protocol::Op {
    crate::protocol::Op::Submit {
        kernel: KernelName::new("k").unwrap(),
        submission: Submission {
            request_id: RequestId(request.into()),
            seq: CellSeq(seq),
            code: Bytes(b"true".to_vec()),
            timeout_ms: None,
        },
        wait_ms: 0,
        ack: Vec::new(),
        expect: None,
    }
}

fn acceptance(reply: &ReplyEnvelope) -> Option<crate::protocol::Acceptance> {
    match &reply.reply {
        Some(crate::protocol::Reply::Submitted { acceptance, .. }) => Some(*acceptance),
        _ => None,
    }
}

#[test]
fn a_fresh_daemon_leaves_a_cell_whose_submit_recorded_nothing_to_run() {
    // fail_open seed 100542: a submit failed on a full disk after making
    // the cell's directory; the daemon died; the spawn of a fresh one
    // tombstoned that directory as a cell the old daemon had accepted, and
    // the client's resubmit (nothing was recorded) came back cancelled.
    let mut os = FakeOs::new();
    assert!(op_to_end(&mut os, spawn_op("n1")).error.is_none());
    os.disk_full = true;
    let failed = op(&mut os, submit_op(1, "r1"));
    assert!(failed.error.is_some(), "{failed:?}");
    os.disk_full = false;
    // Accepted but never started by the dead daemon: tombstoned.
    let k = Layout::new("/r").kernel(&KernelName::new("k").unwrap());
    let sub = Submission {
        request_id: RequestId("r2".into()),
        seq: CellSeq(2),
        code: Bytes(b"true".to_vec()),
        timeout_ms: None,
    };
    os.files
        .insert(k.cell(CellSeq(2)).submission(), to_json(&sub));
    os.procs.remove(&50);
    assert!(op_to_end(&mut os, spawn_op("n2")).error.is_none());
    assert!(os.exists(&k.cell(CellSeq(2)).cancel()));
    assert!(!os.exists(&k.cell(CellSeq(1)).cancel()));
    let again = op(&mut os, submit_op(1, "r1"));
    assert_eq!(
        acceptance(&again),
        Some(crate::protocol::Acceptance::Accepted),
        "{again:?}"
    );
}

#[test]
fn an_acknowledged_cell_leaves_nothing_and_a_second_ack_is_harmless() {
    // The eleventh mutants sample's `ack_cell` with its `!` deleted kept
    // every journal (and refused the ack of one already gone); no world
    // of the simulation tells a kept journal from one a best-effort ack
    // left, so this test is where it is caught.
    use crate::protocol::Op;
    let mut os = FakeOs::new();
    assert!(op_to_end(&mut os, spawn_op("n1")).error.is_none());
    let r = op(&mut os, submit_op(1, "a1"));
    assert!(r.error.is_none(), "{r:?}");
    let k = Layout::new("/r").kernel(&KernelName::new("k").unwrap());
    let cell = k.cell(CellSeq(1));
    let mut w = JournalWriter::open(&mut os, &cell.journal(), journal::DEFAULT_CAP).unwrap();
    w.finish(
        &mut os,
        vec![EntryKind::Result {
            outcome: CellOutcome::Ok,
        }],
    )
    .unwrap();
    let ack = || Op::Ack {
        kernel: KernelName::new("k").unwrap(),
        seq: CellSeq(1),
    };
    let r = op(&mut os, ack());
    assert!(r.error.is_none(), "{r:?}");
    assert!(
        !os.exists(cell.dir()),
        "the acknowledged cell's directory stays"
    );
    let r = op(&mut os, ack());
    assert!(
        r.error.is_none(),
        "a second ack of a cell already gone: {r:?}"
    );
}

#[test]
fn a_used_sequence_number_is_a_conflict_that_names_the_next_even_after_its_ack() {
    use crate::protocol::{Acceptance, ErrorKind};
    let mut os = FakeOs::new();
    spawn_shell_k(&mut os);
    let k = Layout::new("/r").kernel(&KernelName::new("k").unwrap());
    // Client A: cells 2 and 3 reach the agent out of order (two submits
    // in flight): both are new work.
    for (seq, id) in [(1, "a1"), (3, "a3"), (2, "a2")] {
        let r = op(&mut os, submit_op(seq, id));
        assert_eq!(acceptance(&r), Some(Acceptance::Accepted), "{seq}: {r:?}");
    }
    // A resend is idempotent while the cell is there.
    let r = op(&mut os, submit_op(2, "a2"));
    assert_eq!(acceptance(&r), Some(Acceptance::AlreadyAccepted));
    // Cells 1 and 2 are acknowledged (their directories go), 3 is not.
    for seq in [1, 2] {
        os.remove_all(k.cell(CellSeq(seq)).dir()).unwrap();
    }
    // Client B, with no record of the kernel, starts at 1: refused with
    // the kernel's next free number, for an acknowledged cell (whose
    // submission is gone) as for one still there; a late resend of an
    // acknowledged cell is refused too (it would never run).
    for (seq, id) in [(1, "b1"), (1, "a1"), (3, "b1")] {
        let r = op(&mut os, submit_op(seq, id));
        let e = r.error.unwrap_or_else(|| panic!("{seq} {id}: accepted"));
        assert_eq!(e.kind, ErrorKind::Conflict, "{e}");
        assert_eq!(e.next_seq, Some(CellSeq(4)), "{e}");
    }
    assert!(
        !os.exists(&k.cell(CellSeq(1)).submission()),
        "a refused submit records nothing"
    );
    // The marks fold into one floor.
    assert_eq!(os.list_dir(&k.seqs_dir()).unwrap(), vec!["floor-3"]);
    let r = op(&mut os, submit_op(4, "b4"));
    assert_eq!(acceptance(&r), Some(Acceptance::Accepted), "{r:?}");
}

/// Two client records of one kernel: A cancels its cell 2 before its
/// submission arrives (the tombstone names A's request); B's own cell 2
/// is refused with the next free number, not cancelled by it, and A's
/// resend is told its cell was cancelled before it started. A cancel of
/// A's cell 3, where B's submission already holds 3, lays nothing: B's
/// cell is not A's to cancel (drawn_clients seed 478: the first
/// frontend's liveness cell came back cancelled by the second's
/// tombstone).
#[test]
fn a_tombstone_cancels_only_its_own_requests_cell() {
    use crate::protocol::{Acceptance, ErrorKind, Op};
    let mut os = FakeOs::new();
    spawn_shell_k(&mut os);
    let k = Layout::new("/r").kernel(&KernelName::new("k").unwrap());
    let r = op(&mut os, submit_op(1, "a1"));
    assert_eq!(acceptance(&r), Some(Acceptance::Accepted), "{r:?}");
    let cancel = |os: &mut FakeOs, seq: u64, request: &str| {
        op(
            os,
            Op::Cancel {
                kernel: KernelName::new("k").unwrap(),
                seq: CellSeq(seq),
                request: Some(RequestId(request.into())),
            },
        )
    };
    let r = cancel(&mut os, 2, "a2");
    assert!(r.error.is_none(), "{r:?}");
    let r = op(&mut os, submit_op(2, "b2"));
    let e = r
        .error
        .clone()
        .unwrap_or_else(|| panic!("b2 accepted: {r:?}"));
    assert_eq!(e.kind, ErrorKind::Conflict, "{e}");
    assert_eq!(e.next_seq, Some(CellSeq(3)), "{e}");
    let r = op(&mut os, submit_op(2, "a2"));
    assert_eq!(
        acceptance(&r),
        Some(Acceptance::CancelledBeforeStart),
        "{r:?}"
    );
    let r = op(&mut os, submit_op(3, "b3"));
    assert_eq!(acceptance(&r), Some(Acceptance::Accepted), "{r:?}");
    let r = cancel(&mut os, 3, "a3");
    assert!(r.error.is_none(), "{r:?}");
    assert!(
        !os.exists(&k.cell(CellSeq(3)).cancel()),
        "B's cell 3 is not A's to cancel"
    );
}

#[test]
fn a_sequence_number_cancelled_before_its_submit_is_used_and_its_resend_is_idempotent() {
    use crate::protocol::{Acceptance, Op};
    let mut os = FakeOs::new();
    let _ = op(
        &mut os,
        Op::Spawn {
            kernel: KernelName::new("k").unwrap(),
            lang: Lang::Shell,
            nonce: "n1".into(),
            idle_timeout_ms: 60_000,
            grace_ms: 100,
        },
    );
    let k = Layout::new("/r").kernel(&KernelName::new("k").unwrap());
    let cancel = op(
        &mut os,
        Op::Cancel {
            kernel: KernelName::new("k").unwrap(),
            seq: CellSeq(1),
            request: None,
        },
    );
    assert!(cancel.error.is_none(), "{cancel:?}");
    for _ in 0..2 {
        let r = op(&mut os, submit_op(1, "a1"));
        assert_eq!(acceptance(&r), Some(Acceptance::CancelledBeforeStart));
    }
    os.remove_all(k.cell(CellSeq(1)).dir()).unwrap();
    let r = op(&mut os, submit_op(1, "a1"));
    assert!(
        r.error.is_some(),
        "acknowledged: never recorded again: {r:?}"
    );
}

#[test]
fn what_a_killed_shim_left_to_the_daemon_is_kept_for_after_the_daemon() {
    // No cgroup: a Python cell's `setsid env -i` daemon (no marker, its own
    // session) is an orphan under the interpreter's shim. The shim is
    // killed: it comes back to the kernel daemon (a subreaper). The daemon
    // is killed next: it goes to PID 1, and only a record the daemon kept
    // still names it for shutdown (python_cancel seed 222).
    let mut os = FakeOs::new();
    let dir = python_kernel_with_submission(&mut os);
    let k = KernelLayout::new(&dir);
    let mut d = Daemon::new(&dir, "n1");
    let _ = d.tick(&mut os); // the interpreter's shim: 60
    os.add(proc_(61, 60, 60)); // the interpreter
    os.add(proc_(80, 60, 80)); // the env -i daemon, an orphan under the shim
    os.now = 10;
    let _ = d.tick(&mut os);
    let record = format!("{}/leftovers/orphan-80.json", k.dir());
    assert!(!os.files.contains_key(&record), "nothing died yet");
    // The shim is SIGKILLed: its children come back to the daemon (10).
    os.procs.remove(&60);
    os.procs.get_mut(&61).unwrap().ppid = os.me;
    os.procs.get_mut(&80).unwrap().ppid = os.me;
    os.now = 20;
    let _ = d.tick(&mut os);
    assert!(os.files.contains_key(&record));
    // The daemon is killed: the orphan goes to PID 1 and a shutdown (an
    // op, not the daemon) still finds it by the record.
    os.procs.remove(&61);
    os.procs.get_mut(&80).unwrap().ppid = 1;
    os.me = 99;
    os.add(proc_(99, 1, 99));
    let table = Table::snapshot(&os);
    let protected = procs::protected(&table, os.me);
    let set = super::op::kernel_processes(&os, &table, &k, &protected);
    assert_eq!(set, BTreeSet::from([80]));
    // A pid reused by another process is not the orphan.
    os.procs.get_mut(&80).unwrap().starttime += 1;
    let table = Table::snapshot(&os);
    assert!(super::op::kernel_processes(&os, &table, &k, &protected).is_empty());
}

#[test]
fn a_cells_process_group_reused_by_a_later_process_is_not_the_cells() {
    // A cell's journal names its group (the bash it started, pid 7). The
    // sandbox rebooted (or pids wrapped): pid 7 now leads another group,
    // a shutdown op's own. A shutdown of the old kernel must spare it
    // (reaper seed 500199: the op of one shutdown killed another's).
    let mut os = FakeOs::new();
    let k = KernelLayout::new("/root/kernels/a");
    let cell = k.cell(CellSeq(1));
    let mut w = JournalWriter::open(&mut os, &cell.journal(), 1 << 20).unwrap();
    w.push(
        &mut os,
        EntryKind::Started {
            pid: 7,
            pgid: 7,
            starttime: 3,
        },
    )
    .unwrap();
    os.add(proc_(7, 1, 7)); // started at 107: a later process
    let table = Table::snapshot(&os);
    let protected = procs::protected(&table, os.me);
    assert!(super::op::kernel_processes(&os, &table, &k, &protected).is_empty());
    // The cell's own leader, and a member of its group once the leader is
    // gone, are still the cell's.
    os.procs.get_mut(&7).unwrap().starttime = 3;
    os.add(proc_(8, 1, 7));
    let table = Table::snapshot(&os);
    assert_eq!(
        super::op::kernel_processes(&os, &table, &k, &protected),
        BTreeSet::from([7, 8])
    );
    os.procs.remove(&7);
    let table = Table::snapshot(&os);
    assert_eq!(
        super::op::kernel_processes(&os, &table, &k, &protected),
        BTreeSet::from([8])
    );
}

/// A daemon killed between starting its interpreter's shim and recording
/// it leaves no record of them (full_disk seed 104909): the probe that
/// finds it gone ends the interpreter by its marker, as does a spawn that
/// retires the dead daemon's nonce; another nonce's interpreter and a
/// bystander live on.
#[test]
fn an_interpreter_its_dead_daemon_never_recorded_is_ended_by_its_marker() {
    for by_spawn in [false, true] {
        let mut os = FakeOs::new();
        let dir = python_kernel_with_submission(&mut os);
        let k = KernelLayout::new(&dir);
        let daemon = recorded_daemon_10(&mut os, &k);
        // Interpreter 70 (its shim 69 outlived the daemon), another
        // kernel's interpreter 71, a bystander 90; the op is pid 11.
        os.add(proc_(69, 1, 10));
        os.add(proc_(70, 69, 70));
        os.env
            .insert(70, vec![(MARKER_NAME.into(), "n1:py".into())]);
        os.add(proc_(71, 1, 71));
        os.env
            .insert(71, vec![(MARKER_NAME.into(), "n0:py".into())]);
        os.add(proc_(90, 1, 90));
        os.add(proc_(11, 1, 11));
        os.me = 11;
        let request = if by_spawn {
            spawn_op("n2")
        } else {
            crate::protocol::Op::Probe {
                kernel: KernelName::new("k").unwrap(),
                expect: Some(daemon.clone()),
                sent: Vec::new(),
            }
        };
        let _ = op(&mut os, request);
        assert!(!os.procs.contains_key(&70), "by spawn: {by_spawn}");
        for alive in [71, 90] {
            assert!(
                os.procs.contains_key(&alive),
                "{alive} (by spawn: {by_spawn})"
            );
        }
    }
}

/// Records pid 10 (FakeOs's own, start time 110, nonce n1, boot-1) as
/// the kernel's daemon; returns its identity.
fn recorded_daemon_10(os: &mut FakeOs, k: &KernelLayout) -> Identity {
    let daemon = Identity {
        boot_id: "boot-1".into(),
        pid: 10,
        starttime: 110,
        nonce: "n1".into(),
    };
    os.files.insert(k.identity(), to_json(&daemon));
    daemon
}

/// drawn seed 250: a spawn that started its daemon and then could not
/// record its identity left it running with the kernel's config as its
/// own; the client's spawn again (same nonce) started a second beside it.
#[test]
fn a_spawn_that_cannot_record_its_daemons_identity_ends_the_daemon() {
    let mut os = FakeOs::new();
    os.refuse_writes_of = Some("identity.json");
    let failed = op_to_end(&mut os, spawn_op("n1"));
    let error = failed.error.expect("the spawn fails as the write did");
    assert_eq!(error.kind, crate::protocol::ErrorKind::Io);
    assert!(error.detail.contains("identity.json"), "{}", error.detail);
    assert!(os.signals.contains(&(50, Signal::Kill)), "{:?}", os.signals);
    assert!(!os.procs.contains_key(&50), "the daemon it started is gone");
    os.refuse_writes_of = None;
    let again = op_to_end(&mut os, spawn_op("n1"));
    assert!(again.error.is_none(), "{again:?}");
    assert!(os.procs.contains_key(&50), "the spawn again starts one");
}

#[test]
fn a_spawn_ends_the_daemon_a_killed_spawn_started_and_never_recorded() {
    // drawn seed 101317: the spawn op was killed right after it started
    // the daemon, before it wrote identity.json; the client's spawn again
    // under the same nonce started a second daemon beside it, and both
    // ran the next cell.
    let mut os = FakeOs::new();
    let daemon = |os: &mut FakeOs, pid: Pid, dir: &str, nonce: &str| {
        os.add(proc_(pid, 1, pid));
        os.args
            .insert(pid, crate::agent::kernel::daemon_args(dir, nonce).to_vec());
        pid
    };
    let unrecorded = daemon(&mut os, 70, "/r/kernels/k", "n1");
    let other_kernels = daemon(&mut os, 71, "/r/kernels/other", "n9");
    let again = op_to_end(&mut os, spawn_op("n1"));
    assert!(again.error.is_none(), "{again:?}");
    assert!(
        os.signals.contains(&(unrecorded, Signal::Kill)),
        "{:?}",
        os.signals
    );
    assert!(!os.procs.contains_key(&unrecorded));
    assert!(
        os.procs.contains_key(&other_kernels),
        "another kernel's daemon is no business of this spawn"
    );
    let recorded = crate::agent::kernel::live_daemon(&os, &KernelLayout::new("/r/kernels/k"))
        .expect("the spawn's own daemon runs, recorded");
    assert_eq!(
        crate::agent::kernel::daemons_by_command_line(&os, &KernelLayout::new("/r/kernels/k"), 1),
        BTreeSet::from([recorded.pid]),
        "one daemon of the kernel"
    );
    // Its next spawn finds the recorded daemon and leaves it be.
    let adopted = op_to_end(&mut os, spawn_op("n1"));
    assert!(adopted.error.is_none(), "{adopted:?}");
    assert!(os.procs.contains_key(&recorded.pid));
}

#[test]
fn a_shutdown_retires_the_clients_unanswered_spawn() {
    // drawn seed 500997: the client's spawn was read by a channel 19 s
    // late, after the kernel had been opened again under a new nonce and
    // shut down; it started a daemon nobody owned.
    let mut os = FakeOs::new();
    let shut = op_to_end(
        &mut os,
        crate::protocol::Op::Shutdown {
            kernel: KernelName::new("k").unwrap(),
            nonce: None,
            unanswered_spawn: Some("n-late".into()),
        },
    );
    assert!(shut.error.is_none(), "{shut:?}");
    assert_a_late_spawn_starts_nothing(&mut os, "n-late");
    // Another nonce still spawns the kernel.
    let fresh = op_to_end(&mut os, spawn_op("n2"));
    assert!(fresh.error.is_none(), "{fresh:?}");
}

/// A copy of a spawn whose nonce is spent (shut, refused) arrives late:
/// refused as a conflict, and no daemon starts.
fn assert_a_late_spawn_starts_nothing(os: &mut FakeOs, nonce: &str) {
    let late = op_to_end(os, spawn_op(nonce));
    let error = late.error.expect("a late copy of a spent spawn is refused");
    assert_eq!(error.kind, crate::protocol::ErrorKind::Conflict);
    assert!(!os.procs.contains_key(&50), "it starts nothing");
}

fn spawn_op(nonce: &str) -> crate::protocol::Op {
    crate::protocol::Op::Spawn {
        kernel: KernelName::new("k").unwrap(),
        lang: Lang::Shell,
        nonce: nonce.into(),
        idle_timeout_ms: 60_000,
        grace_ms: 100,
    }
}

/// Runs one op to its reply, moving the clock to each wake-up in between.
fn op_to_end(os: &mut FakeOs, op: crate::protocol::Op) -> ReplyEnvelope {
    let env = crate::protocol::Envelope {
        v: crate::protocol::PROTOCOL_VERSION,
        id: 1,
        op,
    };
    let mut run = OpRun::new("/r", &serde_json::to_vec(&env).unwrap());
    loop {
        if let Some(line) = run.poll(os) {
            return serde_json::from_slice(&line).unwrap();
        }
        os.now = run.next_wake().expect("a waiting op wakes").0;
    }
}

#[test]
fn a_spawn_that_arrives_after_its_kernels_shutdown_starts_nothing() {
    // reaper seed 187: a spawn carried by the channel ran late, after the
    // client's one-shot retry had spawned the kernel and the reaper had
    // shut it down; it started a daemon again that outlived the run.
    let mut os = FakeOs::new();
    let spawned = op_to_end(&mut os, spawn_op("n1"));
    assert!(spawned.error.is_none(), "{spawned:?}");
    assert!(os.procs.contains_key(&50));
    let shut = op_to_end(
        &mut os,
        crate::protocol::Op::Shutdown {
            kernel: KernelName::new("k").unwrap(),
            nonce: None,
            unanswered_spawn: None,
        },
    );
    assert!(shut.error.is_none(), "{shut:?}");
    assert!(!os.procs.contains_key(&50), "the daemon was killed");
    assert!(!os.exists("/r/kernels/k"));
    // The late copy of the first spawn: refused, no daemon, no files.
    let late = op_to_end(&mut os, spawn_op("n1"));
    let error = late.error.expect("a stale spawn is refused");
    assert_eq!(error.kind, crate::protocol::ErrorKind::Conflict);
    assert!(!os.procs.contains_key(&50));
    assert!(!os.exists("/r/kernels/k"));
    // A new daemon (a new nonce) for the same name still starts, and once
    // it is shut down too, neither nonce starts one again.
    let again = op_to_end(&mut os, spawn_op("n2"));
    assert!(again.error.is_none(), "{again:?}");
    assert!(os.procs.contains_key(&50));
    let _ = op_to_end(
        &mut os,
        crate::protocol::Op::Shutdown {
            kernel: KernelName::new("k").unwrap(),
            nonce: None,
            unanswered_spawn: None,
        },
    );
    for nonce in ["n1", "n2"] {
        assert!(op_to_end(&mut os, spawn_op(nonce)).error.is_some());
        assert!(!os.procs.contains_key(&50));
    }
}

#[test]
fn a_shutdown_that_arrives_after_its_kernel_was_spawned_again_leaves_the_new_daemon() {
    // reaper seed 100620: the reaper's shutdown of a kernel, carried by the
    // channel, ran late, after the client's one-shot retry had shut the
    // kernel down and a later cell had spawned it again: it killed the new
    // daemon. A shutdown names the daemon it means (its nonce).
    let shutdown = |nonce: Option<&str>| crate::protocol::Op::Shutdown {
        kernel: KernelName::new("k").unwrap(),
        nonce: nonce.map(str::to_owned),
        unanswered_spawn: None,
    };
    let mut os = FakeOs::new();
    assert!(op_to_end(&mut os, spawn_op("n1")).error.is_none());
    assert!(op_to_end(&mut os, shutdown(Some("n1"))).error.is_none());
    assert!(!os.procs.contains_key(&50));
    assert!(op_to_end(&mut os, spawn_op("n2")).error.is_none());
    assert!(os.procs.contains_key(&50));
    // The late copy of the first shutdown: nothing killed, nothing removed.
    let late = op_to_end(&mut os, shutdown(Some("n1")));
    assert!(late.error.is_none(), "{late:?}");
    assert!(os.procs.contains_key(&50), "the new daemon runs on");
    assert!(os.exists("/r/kernels/k/config.json"));
    // Its own nonce, or none (a client that never knew a daemon), shuts it.
    assert!(op_to_end(&mut os, shutdown(Some("n2"))).error.is_none());
    assert!(!os.procs.contains_key(&50));
    assert!(op_to_end(&mut os, spawn_op("n3")).error.is_none());
    assert!(op_to_end(&mut os, shutdown(None)).error.is_none());
    assert!(!os.procs.contains_key(&50));
    assert!(!os.exists("/r/kernels/k"));
}

/// An op run of `op`, not yet polled.
fn op_run(op: crate::protocol::Op) -> OpRun {
    let env = crate::protocol::Envelope {
        v: crate::protocol::PROTOCOL_VERSION,
        id: 1,
        op,
    };
    OpRun::new("/r", &serde_json::to_vec(&env).unwrap())
}

#[test]
fn a_shutdown_and_a_spawn_of_another_nonce_never_run_across_each_other() {
    // drawn_clients seed 149: one frontend's reaper shut kernel k down
    // (nonce n1) while the other frontend's spawn of k (n2) ran; the
    // spawn started a daemon between two of the shutdown's sweeps, and
    // the next sweep killed it. Each holds the kernel's lock.
    let shutdown = |nonce: &str| crate::protocol::Op::Shutdown {
        kernel: KernelName::new("k").unwrap(),
        nonce: Some(nonce.into()),
        unanswered_spawn: None,
    };
    let mut os = FakeOs::new();
    assert!(op_to_end(&mut os, spawn_op("n1")).error.is_none());
    // 1. A spawn during the sweep is refused; after it, a spawn under a
    // fresh nonce starts afresh (a client spends the nonce of a spawn
    // refused for a conflict), and a late copy of the refused one starts
    // nothing (drawn_clients seed 100067).
    let mut sweep = op_run(shutdown("n1"));
    assert!(
        sweep.poll(&mut os).is_none(),
        "the sweep waits for its kill"
    );
    assert!(!os.procs.contains_key(&50), "n1's daemon was killed");
    let during = op_to_end(&mut os, spawn_op("n2-refused"));
    let error = during.error.expect("a spawn during the sweep is refused");
    assert_eq!(error.kind, crate::protocol::ErrorKind::Conflict);
    assert!(error.detail.contains("probe"), "{}", error.detail);
    assert!(!os.procs.contains_key(&50), "and starts nothing");
    os.now = sweep.next_wake().unwrap().0;
    assert!(sweep.poll(&mut os).is_some());
    assert!(!os.exists("/r/kernels/k/config.json"));
    assert_a_late_spawn_starts_nothing(&mut os, "n2-refused");
    let after = op_to_end(&mut os, spawn_op("n2"));
    assert!(after.error.is_none(), "{after:?}");
    assert!(os.procs.contains_key(&50));
    // 2. A shutdown of n2 that finds a spawn at work waits for it, and
    // leaves alone the daemon it started under another nonce (n1's
    // record was shut; n3 is a spawn of the other record's).
    let lock = "/r/kernels/k/spawning";
    let holder = format!("10 {}", os.process(10).unwrap().starttime);
    os.create_new(lock, holder.as_bytes()).unwrap();
    let mut sweep = op_run(shutdown("n2"));
    assert!(sweep.poll(&mut os).is_none(), "it waits for the spawn");
    assert!(os.procs.contains_key(&50), "and kills nothing meanwhile");
    // The spawn at work: n2's daemon died, n3's starts.
    os.procs.remove(&50);
    os.remove_all(lock).unwrap();
    let other = op_to_end(&mut os, spawn_op("n3"));
    assert!(other.error.is_none(), "{other:?}");
    os.now = sweep.next_wake().unwrap().0;
    let reply = sweep.poll(&mut os).expect("the sweep ends");
    let reply: ReplyEnvelope = serde_json::from_slice(&reply).unwrap();
    assert!(reply.error.is_none(), "{reply:?}");
    assert!(os.procs.contains_key(&50), "n3's daemon runs on");
    assert!(os.exists("/r/kernels/k/config.json"));
    assert!(!os.exists(lock), "the lock is let go");
    assert!(
        op_to_end(&mut os, spawn_op("n3")).error.is_none(),
        "n3 is adopted"
    );
}

#[test]
fn a_late_spawn_of_a_replaced_daemon_starts_nothing_after_the_shutdown() {
    // sandbox_replaced seed 103926: the daemon of nonce n1 exited (idle),
    // the client found it dead and spawned n2, then shut n2 down; a copy
    // of n1's spawn the channel held ran after that and started a daemon
    // whose files outlived the run (the shutdown had recorded only n2).
    let mut os = FakeOs::new();
    let first = op_to_end(&mut os, spawn_op("n1"));
    assert!(first.error.is_none(), "{first:?}");
    os.procs.remove(&50);
    let second = op_to_end(&mut os, spawn_op("n2"));
    assert!(second.error.is_none(), "{second:?}");
    assert!(os.procs.contains_key(&50), "n2's daemon");
    let shut = op_to_end(
        &mut os,
        crate::protocol::Op::Shutdown {
            kernel: KernelName::new("k").unwrap(),
            nonce: Some("n2".into()),
            unanswered_spawn: None,
        },
    );
    assert!(shut.error.is_none(), "{shut:?}");
    assert!(!os.exists("/r/kernels/k"));
    let late = op_to_end(&mut os, spawn_op("n1"));
    let error = late.error.expect("the replaced daemon's spawn is refused");
    assert_eq!(error.kind, crate::protocol::ErrorKind::Conflict);
    assert!(!os.procs.contains_key(&50));
    assert!(!os.exists("/r/kernels/k"));
}

#[test]
fn a_late_spawn_of_a_daemon_whose_directory_was_removed_starts_nothing() {
    // full_disk seed 104645: the kernel's directory was removed under its
    // daemon (n1), which exited; the client spawned n2, then shut it down;
    // a copy of n1's spawn the channel held ran after that and started a
    // daemon nobody knew of (neither a spawn nor the shutdown had a
    // config naming n1 to retire). A daemon that exits because its config
    // is gone retires its nonce; one that exits idle does not (its client
    // may spawn under it again, having crashed before the answer).
    let mut os = FakeOs::new();
    assert!(op_to_end(&mut os, spawn_op("n1")).error.is_none());
    let mut d = Daemon::new("/r/kernels/k", "n1");
    assert!(matches!(d.tick(&mut os), DaemonStep::Continue { .. }));
    os.remove_all("/r/kernels/k").unwrap();
    assert!(
        tick_until_exit(&mut d, &mut os),
        "a removed kernel's daemon exits"
    );
    os.procs.remove(&50);
    let late = op_to_end(&mut os, spawn_op("n1"));
    let error = late.error.expect("the exited daemon's spawn is refused");
    assert_eq!(error.kind, crate::protocol::ErrorKind::Conflict);
    assert!(!os.procs.contains_key(&50));
    assert!(!os.exists("/r/kernels/k/config.json"));
    // The client's next daemon, under a new nonce, starts.
    assert!(op_to_end(&mut os, spawn_op("n2")).error.is_none());
    assert!(os.procs.contains_key(&50));
}

#[test]
fn a_daemon_whose_kernel_another_spawn_made_again_exits() {
    // two_clients seed 2946: the kernels' directories were removed and a
    // second frontend's spawn made the kernel again before the old
    // daemon's next tick; that daemon found a config there and went on,
    // and both daemons ran the next cell into one journal.
    let mut os = FakeOs::new();
    assert!(op_to_end(&mut os, spawn_op("n1")).error.is_none());
    let mut old = Daemon::new("/r/kernels/k", "n1");
    assert!(matches!(old.tick(&mut os), DaemonStep::Continue { .. }));
    os.remove_all("/r/kernels/k").unwrap();
    assert!(op_to_end(&mut os, spawn_op("n2")).error.is_none());
    assert!(os.exists("/r/kernels/k/config.json"), "made again");
    assert!(
        tick_until_exit(&mut old, &mut os),
        "the old daemon took the new config for its own"
    );
    assert_eq!(old.exit_cause(), Some(ExitCause::KernelRemoved));
}

#[test]
fn a_daemon_says_why_it_exits() {
    // A host judges an exit the daemon chose while its kernel was in use
    // as a death the agent caused; one it was told to make is not (drawn
    // seed 100144: a daemon that found its kernel removed, taken for an
    // idle one because a successor made the kernel again meanwhile).
    let mut os = FakeOs::new();
    assert!(op_to_end(&mut os, spawn_op("n1")).error.is_none());
    let mut idle = Daemon::new("/r/kernels/k", "n1");
    assert!(matches!(idle.tick(&mut os), DaemonStep::Continue { .. }));
    assert_eq!(idle.exit_cause(), None, "a fresh daemon stays");
    os.now += 3_600_000;
    assert!(tick_until_exit(&mut idle, &mut os));
    assert_eq!(idle.exit_cause(), Some(ExitCause::Idle));

    let mut stopped = Daemon::new("/r/kernels/k", "n1");
    assert!(matches!(stopped.tick(&mut os), DaemonStep::Continue { .. }));
    stopped.terminate(os.now());
    assert!(tick_until_exit(&mut stopped, &mut os));
    assert_eq!(stopped.exit_cause(), Some(ExitCause::Stopped));

    let mut removed = Daemon::new("/r/kernels/k", "n1");
    assert!(matches!(removed.tick(&mut os), DaemonStep::Continue { .. }));
    os.remove_all("/r/kernels/k").unwrap();
    assert!(tick_until_exit(&mut removed, &mut os));
    assert_eq!(removed.exit_cause(), Some(ExitCause::KernelRemoved));

    let mut unreadable = Daemon::new("/r/kernels/k", "n1");
    os.create_dir_all("/r/kernels/k").unwrap();
    os.write_atomic("/r/kernels/k/config.json", b"{ torn")
        .unwrap();
    assert!(tick_until_exit(&mut unreadable, &mut os));
    assert_eq!(unreadable.exit_cause(), Some(ExitCause::ConfigUnreadable));
}

#[test]
fn a_retried_spawn_of_a_dead_daemon_under_its_own_nonce_still_starts_one() {
    // Only a replaced nonce is retired: a spawn retried under the nonce of
    // the daemon that died (its reply was lost, say) starts it again.
    let mut os = FakeOs::new();
    assert!(op_to_end(&mut os, spawn_op("n1")).error.is_none());
    os.procs.remove(&50);
    let again = op_to_end(&mut os, spawn_op("n1"));
    assert!(again.error.is_none(), "{again:?}");
    assert!(os.procs.contains_key(&50));
}

#[test]
fn a_shim_keeps_what_was_reparented_to_it_for_after_the_shim_and_the_daemon() {
    // shim_killed_escapes seed 102038, no cgroup: the cell's `setsid env
    // -i` daemon (no marker, its own session) comes back to the shim (a
    // subreaper) when its parent exits. The kernel daemon is killed, then
    // the shim: the orphan goes to PID 1, and only the shim's record still
    // names it for shutdown.
    use super::shim::cell::{CellShim, ShimStep};
    use super::shim::orphans::ORPHAN_LOOK;
    let mut os = FakeOs::new();
    let mut shim = CellShim::new(shell_launch(&mut os));
    let ShimStep::MakeCgroup { .. } = shim.poll_step(&mut os) else {
        panic!("the cgroup comes first")
    };
    assert!(!shim.handle_cgroup(&mut os, None));
    let ShimStep::Start { .. } = shim.poll_step(&mut os) else {
        panic!("then the main process")
    };
    os.add(proc_(70, 10, 70));
    shim.handle_started(&mut os, Ok((70, 170)));
    assert_eq!(shim.poll_step(&mut os), ShimStep::Pump);
    assert!(
        !os.files.keys().any(|f| f.contains("/leftovers/")),
        "the main process is no orphan"
    );
    // Reparented to the shim between two looks: recorded at the next.
    os.add(proc_(72, 10, 72));
    os.now = 50;
    assert_eq!(shim.poll_step(&mut os), ShimStep::Pump);
    let record = "/k/leftovers/orphan-72.json";
    assert!(!os.files.contains_key(record), "looks are paced");
    os.now = ORPHAN_LOOK.as_millis() as u64;
    assert_eq!(shim.poll_step(&mut os), ShimStep::Pump);
    assert!(os.files.contains_key(record));
    assert!(shim.orphans().kept(72, 172));
    // The shim is killed (the daemon was already): 72 goes to PID 1, and a
    // shutdown, an op, still finds it; the main process is the cell's
    // group's (found by the journal's `started`).
    os.procs.remove(&10);
    os.procs.get_mut(&72).unwrap().ppid = 1;
    os.procs.get_mut(&70).unwrap().ppid = 1;
    os.me = 99;
    os.add(proc_(99, 1, 99));
    let k = KernelLayout::new("/k");
    let table = Table::snapshot(&os);
    let protected = procs::protected(&table, os.me);
    let set = super::op::kernel_processes(&os, &table, &k, &protected);
    assert!(set.contains(&72), "{set:?}");
    // The record names the cell: what ends the cell's processes once its
    // daemon is proven gone (it is failed as lost) finds 72 too.
    let cell =
        super::op::recorded_cell_processes(&os, &table, &k, Some("n"), CellSeq(1), &protected);
    assert!(cell.contains(&72), "{cell:?}");
    let other =
        super::op::recorded_cell_processes(&os, &table, &k, Some("n"), CellSeq(2), &protected);
    assert!(!other.contains(&72), "another cell's: {other:?}");
}

/// A submit op of cell 1 (`r1`) started while the kernel's daemon has
/// announced its idle exit: it waits to see what becomes of the cell.
fn submit_during_an_announced_exit(os: &mut FakeOs) -> (OpRun, KernelLayout) {
    assert!(op_to_end(os, spawn_op("n1")).error.is_none());
    let k = Layout::new("/r").kernel(&KernelName::new("k").unwrap());
    os.files.insert(k.exiting(), b"n1".to_vec());
    let env = crate::protocol::Envelope {
        v: crate::protocol::PROTOCOL_VERSION,
        id: 1,
        op: submit_op(1, "r1"),
    };
    let mut run = OpRun::new("/r", &serde_json::to_vec(&env).unwrap());
    assert!(run.poll(os).is_none(), "no answer while the daemon decides");
    assert!(os.exists(&k.cell(CellSeq(1)).submission()));
    (run, k)
}

/// The exiting daemon (pid 50) of [`submit_during_an_announced_exit`]
/// is gone: the submit answers that the cell is not recorded, and it is.
fn expect_withdrawn(os: &mut FakeOs, run: &mut OpRun, k: &KernelLayout) {
    os.procs.remove(&50);
    let line = run.poll(os).expect("an answer once the daemon is gone");
    let reply: ReplyEnvelope = serde_json::from_slice(&line).unwrap();
    assert!(
        matches!(
            reply.reply,
            Some(crate::protocol::Reply::IdentityMismatch {
                recorded: false,
                files_kept: true,
                ..
            })
        ),
        "{reply:?}"
    );
    assert!(
        !os.exists(k.cell(CellSeq(1)).dir()),
        "the cell is withdrawn"
    );
}

#[test]
fn a_cell_recorded_as_its_daemon_exits_idle_is_withdrawn_and_runs_on_the_next() {
    // two_kernels seed 30944: a submit found the daemon alive and recorded
    // its cell while the daemon's tick had decided its idle exit; the cell
    // was never taken and failed as lost with the kernel the agent itself
    // let go.
    let mut os = FakeOs::new();
    let (mut run, k) = submit_during_an_announced_exit(&mut os);
    os.now += 50;
    assert!(run.poll(&mut os).is_none(), "the daemon still exits");
    os.now += 50;
    expect_withdrawn(&mut os, &mut run, &k);
    // The next daemon takes the cell under its number: nothing used it.
    assert!(op_to_end(&mut os, spawn_op("n2")).error.is_none());
    assert!(!os.exists(&k.exiting()), "a spawn ends the announcement");
    let r = op(&mut os, submit_op(1, "r1"));
    assert_eq!(
        acceptance(&r),
        Some(crate::protocol::Acceptance::Accepted),
        "{r:?}"
    );
}

#[test]
fn a_jump_of_the_sandbox_clock_does_not_end_the_wait_for_an_exiting_daemon() {
    // Seed 100991: the clock (boot time, which counts a suspended
    // machine's sleep) jumped 15 s while the submit ran; the wait, bounded
    // by that clock, took the cell for kept at its first look, and the
    // daemon exited without it.
    let mut os = FakeOs::new();
    let (mut run, k) = submit_during_an_announced_exit(&mut os);
    os.now += 60_000;
    assert!(
        run.poll(&mut os).is_none(),
        "still waiting: the daemon has not decided"
    );
    os.now += 5;
    expect_withdrawn(&mut os, &mut run, &k);
}

#[test]
fn a_daemon_frozen_in_its_announced_exit_does_not_hold_a_submit_forever() {
    let mut os = FakeOs::new();
    let (mut run, _k) = submit_during_an_announced_exit(&mut os);
    let mut looks = 0;
    let line = loop {
        os.now += super::op::POLL_INTERVAL.as_millis() as u64;
        looks += 1;
        assert!(looks < 100_000, "the wait has no bound");
        if let Some(line) = run.poll(&mut os) {
            break line;
        }
    };
    let reply: ReplyEnvelope = serde_json::from_slice(&line).unwrap();
    assert_eq!(
        acceptance(&reply),
        Some(crate::protocol::Acceptance::Accepted),
        "past the bound the cell is taken for kept: {reply:?}"
    );
}

#[test]
fn a_cell_recorded_as_its_daemon_announces_its_exit_is_kept_when_the_daemon_stays() {
    let mut os = FakeOs::new();
    let (mut run, k) = submit_during_an_announced_exit(&mut os);
    // The daemon's last look found the cell: it withdraws the announcement.
    os.files.remove(&k.exiting());
    os.now += 50;
    let line = run.poll(&mut os).expect("the submit's answer");
    let reply: ReplyEnvelope = serde_json::from_slice(&line).unwrap();
    assert_eq!(
        acceptance(&reply),
        Some(crate::protocol::Acceptance::Accepted),
        "{reply:?}"
    );
    // Its number is used: another request for it is refused.
    let r = op(&mut os, submit_op(1, "other"));
    assert!(r.error.is_some(), "{r:?}");
    assert_eq!(os.list_dir(&k.seqs_dir()).unwrap(), vec!["floor-1"]);
}

#[test]
fn a_daemon_that_ticks_late_kills_before_it_calls_anything_unkillable() {
    // A frozen sandbox (or a slow host) held the daemon past the grace and
    // KILL_BOUND: its first KILL round comes at the thaw, and what that
    // round ends was never unkillable. Counted from the grace, the cell
    // resolved in the same tick naming processes its KILL had just ended.
    let mut os = FakeOs::new();
    let dir = kernel_with_submission(&mut os, false);
    let journal = format!("{dir}/cells/1/journal");
    let mut d = Daemon::new(&dir, "n1");
    let _ = d.tick(&mut os);
    os.add(proc_(62, 1, 61)); // ignores TERM
    let mut w = JournalWriter::open(&mut os, &journal, 1024).unwrap();
    w.push(
        &mut os,
        EntryKind::Started {
            pid: 61,
            pgid: 61,
            starttime: 161,
        },
    )
    .unwrap();
    w.settle(
        &mut os,
        vec![EntryKind::Result {
            outcome: CellOutcome::Cancelled,
        }],
    )
    .unwrap();
    os.files
        .insert(format!("{dir}/cells/1/cancel"), b"cancel\n".to_vec());
    os.now = 10;
    let _ = d.tick(&mut os); // TERM
    os.now = 10 + 100 + KILL_BOUND.as_millis() as u64 + 5_000;
    let _ = d.tick(&mut os); // the first KILL round, late
    assert!(
        !journal::is_done(&parse_journal(&os.files[&journal])),
        "resolved at its first KILL round"
    );
    os.procs.remove(&62); // the KILL took
    os.now += 10;
    let _ = d.tick(&mut os);
    let kinds: Vec<EntryKind> = parse_journal(&os.files[&journal])
        .entries
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert!(journal::is_done(&parse_journal(&os.files[&journal])));
    assert!(
        !kinds
            .iter()
            .any(|k| matches!(k, EntryKind::Unkillable { .. })),
        "{kinds:?}"
    );
}

#[test]
fn nothing_inside_a_removed_kernel_directory_is_made_again() {
    // timeout seed 102540: a cancel preempted across its kernel's shutdown
    // made `cells/1/cancel` again, left behind for good.
    let mut os = FakeOs::new();
    let k = KernelLayout::new("/r/kernels/k");
    os.dirs.insert("/r/kernels".into());
    let cell = k.cell(CellSeq(1));
    assert_eq!(
        super::kernel::make_dir(&mut os, &k, cell.dir()),
        Err(OsError::NotFound)
    );
    assert!(!os.exists(k.dir()), "the kernel's directory is not made");
    os.dirs.insert(k.dir().into());
    super::kernel::make_dir(&mut os, &k, cell.dir()).unwrap();
    assert!(os.exists(cell.dir()), "below a kernel that exists, it is");
    super::kernel::make_dir(&mut os, &k, cell.dir()).unwrap();
}

#[test]
fn a_shutdown_takes_what_shares_a_session_with_the_kernels_processes() {
    // python_cancel seed 1692: an acked cell's `env -i` grandchild (no
    // marker) under the interpreter outlived the shutdown; it shares the
    // session of its marked parent.
    let mut os = FakeOs::new();
    let k = KernelLayout::new("/k");
    let config = KernelConfig {
        lang: Lang::Python,
        nonce: "n1".into(),
        idle_timeout_ms: 1_000,
        grace_ms: 100,
    };
    os.files.insert(k.config(), to_json(&config));
    let mut parent = proc_(80, 1, 70);
    parent.sid = 70;
    os.add(parent);
    os.env.insert(80, vec![(MARKER_NAME.into(), "n1:1".into())]);
    let mut grandchild = proc_(81, 80, 70);
    grandchild.sid = 70;
    os.add(grandchild);
    let mut stranger = proc_(90, 1, 90);
    stranger.sid = 90;
    os.add(stranger);
    // A cell of this kernel whose journal is gone (acked): its marker is
    // still looked for by number.
    os.dirs.insert(k.cell(CellSeq(1)).dir().into());
    let table = Table::snapshot(&os);
    let protected = procs::protected(&table, os.me);
    let set = super::op::kernel_processes(&os, &table, &k, &protected);
    assert!(set.contains(&80), "{set:?}");
    assert!(set.contains(&81), "the grandchild, by its session: {set:?}");
    assert!(!set.contains(&90), "{set:?}");
}

#[test]
fn a_probe_of_a_dead_daemon_says_which_sent_cells_it_never_recorded() {
    let mut os = FakeOs::new();
    let spawned = op_to_end(&mut os, spawn_op("n1"));
    let Some(crate::protocol::Reply::Spawned { identity, .. }) = spawned.reply else {
        panic!("{spawned:?}")
    };
    assert!(acceptance(&op(&mut os, submit_op(1, "r1"))).is_some());
    let k = Layout::new("/r").kernel(&KernelName::new("k").unwrap());
    let sent = |seq: u64, request: &str| crate::protocol::SentCell {
        seq: CellSeq(seq),
        request_id: RequestId(request.into()),
    };
    let probe = |os: &mut FakeOs| {
        let reply = op(
            os,
            crate::protocol::Op::Probe {
                kernel: KernelName::new("k").unwrap(),
                expect: Some(identity.clone()),
                // 1 under its id; 2 never sent anywhere; 1 again under an
                // id it does not carry: another cell in its place.
                sent: vec![sent(1, "r1"), sent(2, "r2"), sent(1, "other")],
            },
        );
        match reply.reply {
            Some(crate::protocol::Reply::Probed {
                status,
                never_recorded,
            }) => (status, never_recorded),
            other => panic!("{other:?}"),
        }
    };
    let (status, never) = probe(&mut os);
    assert!(matches!(status, ProbeStatus::Alive { .. }), "{status:?}");
    assert!(never.is_empty(), "a live daemon: nothing to say");
    os.procs.remove(&identity.pid);
    let (status, never) = probe(&mut os);
    assert!(matches!(status, ProbeStatus::Dead { .. }), "{status:?}");
    assert_eq!(never, [CellSeq(2), CellSeq(1)]);
    // Its spawn's config gone: no file tells what it recorded.
    os.files.remove(&k.config());
    let (_, never) = probe(&mut os);
    assert!(never.is_empty(), "{never:?}");
}

/// A daemon killed under a running cell leaves the cell's shim and
/// processes running. The op that proves the daemon gone (a probe, or a
/// submit that expected it) ends them before it answers, so a cell its
/// client writes off as lost does not run on until a next daemon adopts
/// it (full_disk seed 209: it forked after its resolution). A bystander,
/// and everything while a daemon of the kernel runs, are left alone.
#[test]
fn the_op_that_proves_a_daemon_gone_ends_what_its_cells_still_run() {
    for via_submit in [false, true] {
        let mut os = FakeOs::new();
        let dir = kernel_with_submission(&mut os, false);
        let k = KernelLayout::new(&dir);
        let cell = k.cell(CellSeq(1));
        // The daemon is pid 10 here: it starts shim 60.
        let _ = Daemon::new(&dir, "n1").tick(&mut os);
        started_main(&mut os, &cell);
        os.add(proc_(62, 61, 61));
        os.add(proc_(63, 1, 63));
        os.env.insert(63, vec![(MARKER_NAME.into(), "n1:1".into())]);
        os.add(proc_(90, 1, 90));
        let daemon = recorded_daemon_10(&mut os, &k);
        os.args.insert(10, vec!["serve".into(), "n1".into()]);
        // The op runs as pid 11.
        os.add(proc_(11, 1, 11));
        os.me = 11;
        let proving_op = |os: &mut FakeOs| {
            let kernel = KernelName::new("k").unwrap();
            let request = if via_submit {
                let crate::protocol::Op::Submit { submission, .. } = submit_op(2, "r2") else {
                    unreachable!()
                };
                crate::protocol::Op::Submit {
                    kernel,
                    submission,
                    wait_ms: 0,
                    ack: Vec::new(),
                    expect: Some(daemon.clone()),
                }
            } else {
                crate::protocol::Op::Probe {
                    kernel,
                    expect: Some(daemon.clone()),
                    sent: Vec::new(),
                }
            };
            op(os, request)
        };
        let _ = proving_op(&mut os);
        assert!(os.signals.is_empty(), "its daemon runs: {:?}", os.signals);
        os.procs.remove(&10);
        let reply = proving_op(&mut os);
        assert!(
            matches!(
                reply.reply,
                Some(
                    crate::protocol::Reply::Probed { .. }
                        | crate::protocol::Reply::IdentityMismatch { .. }
                )
            ),
            "{reply:?}"
        );
        let mut ended: Vec<Pid> = os.procs.keys().copied().collect();
        ended.retain(|p| ![1, 11, 90].contains(p));
        assert!(ended.is_empty(), "left running: {ended:?}");
        assert!(os.procs.contains_key(&90), "a bystander");
    }
}

#[test]
fn a_journal_larger_than_a_batch_comes_in_batches_from_the_cursor() {
    // tool_call_limits seed 101432: a full disk queued a megabyte call once
    // per tick; the journal's 80 MiB then went out as one answer, more than
    // the exec transport carries, on every submit and wait after.
    use super::op::MAX_BATCH_BYTES;
    use crate::protocol::{journal::JournalEntry, Op, Reply};
    let mut os = FakeOs::new();
    assert!(op_to_end(&mut os, spawn_op("n1")).error.is_none());
    assert!(op(&mut os, submit_op(1, "r1")).error.is_none());
    let journal = Layout::new("/r")
        .kernel(&KernelName::new("k").unwrap())
        .cell(CellSeq(1))
        .journal();
    let args = serde_json::Value::String("x".repeat(super::super::protocol::calls::MAX_ARGS - 16));
    let mut lines = Vec::new();
    for n in 1..=24u64 {
        let kind = EntryKind::ToolCall {
            id: format!("c{n}"),
            name: "t".into(),
            args: args.clone(),
        };
        lines.extend(JournalEntry { n, kind }.to_line());
    }
    os.files.insert(journal, lines);
    let mut cursor = 0;
    let mut seen = Vec::new();
    while cursor < 24 {
        let wait = Op::Wait {
            kernel: KernelName::new("k").unwrap(),
            seq: CellSeq(1),
            cursor,
            wait_ms: 1_000,
            answers: Vec::new(),
        };
        let line_len = {
            let env = crate::protocol::Envelope {
                v: crate::protocol::PROTOCOL_VERSION,
                id: 1,
                op: wait.clone(),
            };
            let mut run = OpRun::new("/r", &serde_json::to_vec(&env).unwrap());
            let line = run
                .poll(&mut os)
                .expect("entries are there: an answer at once");
            let reply: ReplyEnvelope = serde_json::from_slice(&line).unwrap();
            let Some(Reply::Waited { batch }) = reply.reply else {
                panic!("{:?}", reply.error)
            };
            assert!(!batch.entries.is_empty());
            seen.extend(batch.entries.iter().map(|e| e.n));
            cursor = batch.entries.last().unwrap().n;
            line.len()
        };
        assert!(
            line_len <= MAX_BATCH_BYTES + 4096,
            "an answer of {line_len} bytes"
        );
    }
    assert_eq!(
        seen,
        (1..=24).collect::<Vec<_>>(),
        "every entry once, in order"
    );
}
