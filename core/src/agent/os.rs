//! The agent's view of its operating system. Everything the agent decides
//! (journal, submission, tombstones, cancel escalation, leftovers, reaping)
//! is written against this trait, so the real agent (`tether-agent`, procfs
//! and signals) and the simulation (`SimOs`) run the very same logic.
//!
//! Paths are absolute strings; listings and process tables come back sorted
//! so that nothing downstream depends on hash order.

use crate::protocol::Lang;
use crate::time::Timestamp;
use std::fmt;

/// A process id.
pub type Pid = u32;

/// The signals the agent sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Signal {
    /// SIGINT: interrupt (Python's KeyboardInterrupt).
    Int,
    /// SIGTERM: please stop.
    Term,
    /// SIGSTOP: freeze (so a forking process cannot race the KILL sweep).
    Stop,
    /// SIGCONT.
    Cont,
    /// SIGKILL.
    Kill,
}

/// What the agent knows of a process.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ProcInfo {
    /// Its pid.
    pub pid: Pid,
    /// Its parent.
    pub ppid: Pid,
    /// Its process group.
    pub pgid: Pid,
    /// Its session.
    pub sid: Pid,
    /// Start time in clock ticks since boot (tells a reused pid apart).
    pub starttime: u64,
    /// True when it has exited and waits to be reaped.
    pub zombie: bool,
}

/// A failed OS operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OsError {
    /// No such file or process.
    NotFound,
    /// The file already exists (an O_EXCL create lost).
    AlreadyExists,
    /// Not allowed.
    PermissionDenied,
    /// Anything else, described.
    Other(String),
}

impl fmt::Display for OsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OsError::NotFound => f.write_str("not found"),
            OsError::AlreadyExists => f.write_str("already exists"),
            OsError::PermissionDenied => f.write_str("permission denied"),
            OsError::Other(s) => f.write_str(s),
        }
    }
}

impl std::error::Error for OsError {}

/// How to start one cell's process tree under a shim. Travels to the shim
/// as JSON (`marker` as a two-element array).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CellLaunch {
    /// The kernel's directory.
    pub kernel_dir: String,
    /// The cell's directory (holds `code`, `journal`, `cancel`, …).
    pub cell_dir: String,
    /// The language.
    pub lang: Lang,
    /// Argv of the cell's main process (run in a new session by the shim).
    pub argv: Vec<String>,
    /// The env marker `(name, value)` that every process of the cell carries.
    pub marker: (String, String),
}

/// Is `pid` still the process that started at `starttime` (alive, not a
/// zombie)? A pid alone may name a later process once that one is gone.
pub fn still_runs(os: &dyn Os, pid: Pid, starttime: u64) -> bool {
    os.process(pid)
        .is_some_and(|p| p.starttime == starttime && !p.zombie)
}

/// The operating system as the agent logic needs it.
pub trait Os {
    /// Current time (monotonic enough for grace periods and idle timeouts).
    fn now(&self) -> Timestamp;
    /// The sandbox's boot id.
    fn boot_id(&self) -> Result<String, OsError>;
    /// The calling process (the op command or daemon running this logic).
    fn self_pid(&self) -> Pid;

    /// Whole contents of a file.
    fn read_file(&self, path: &str) -> Result<Vec<u8>, OsError>;
    /// Creates a file that must not exist yet (O_EXCL), with `data`.
    fn create_new(&mut self, path: &str, data: &[u8]) -> Result<(), OsError>;
    /// Replaces a file atomically (temporary file + rename).
    fn write_atomic(&mut self, path: &str, data: &[u8]) -> Result<(), OsError>;
    /// Appends to a file, creating it if needed.
    fn append(&mut self, path: &str, data: &[u8]) -> Result<(), OsError>;
    /// True when the path exists.
    fn exists(&self, path: &str) -> bool;
    /// Names in a directory, sorted.
    fn list_dir(&self, path: &str) -> Result<Vec<String>, OsError>;
    /// Creates a directory and its parents, mode 0700.
    fn create_dir_all(&mut self, path: &str) -> Result<(), OsError>;
    /// Creates one directory, mode 0700, in a parent that must exist
    /// (`NotFound` otherwise); one that exists already is fine. What is
    /// made inside a kernel's directory is made so (see
    /// [`super::kernel::make_dir`]).
    fn create_dir(&mut self, path: &str) -> Result<(), OsError>;
    /// Removes a file or a directory tree; absent is fine.
    fn remove_all(&mut self, path: &str) -> Result<(), OsError>;

    /// One process, if it exists.
    fn process(&self, pid: Pid) -> Option<ProcInfo>;
    /// Every process, sorted by pid.
    fn processes(&self) -> Vec<ProcInfo>;
    /// The live children of `pid`, sorted by pid. The default scans every
    /// process; an OS that lists a process's children directly (Linux's
    /// `/proc/PID/task/TID/children`) answers without the scan, which a
    /// shim's paced look at what was reparented to it makes often.
    fn children(&self, pid: Pid) -> Vec<ProcInfo> {
        self.processes()
            .into_iter()
            .filter(|p| p.ppid == pid && p.pid != pid && !p.zombie)
            .collect()
    }
    /// Does the process's environment hold `name=value`?
    fn has_env(&self, pid: Pid, name: &str, value: &str) -> bool;
    /// The value of `name` in the process's environment (as `has_env`
    /// sees it), if it holds one that is UTF-8.
    fn env_var(&self, pid: Pid, name: &str) -> Option<String>;
    /// Does the process's argv hold `arg`?
    fn has_arg(&self, pid: Pid, arg: &str) -> bool;
    /// Sends a signal to one pid.
    fn signal(&mut self, pid: Pid, signal: Signal) -> Result<(), OsError>;

    /// The processes in the cgroup at `group` (an absolute path to its
    /// directory, as a cell's `cgroup` file records it), sorted: what its
    /// `cgroup.procs` lists. Empty when there is no such cgroup. Only
    /// processes that are members themselves: a moved-out child is not.
    fn cgroup_members(&self, group: &str) -> Vec<Pid>;
    /// Removes the cgroup at `group` (`rmdir`), which succeeds only when
    /// it has no member left. Absent is fine; one that still has members
    /// is an error and stays.
    fn remove_cgroup(&mut self, group: &str) -> Result<(), OsError>;

    /// Starts the kernel daemon for `kernel_dir`, detached (own session),
    /// with `nonce` in its argv. Returns its pid.
    fn spawn_daemon(&mut self, kernel_dir: &str, nonce: &str) -> Result<Pid, OsError>;
    /// Starts a cell's shim. Returns the shim's pid.
    fn spawn_cell(&mut self, launch: &CellLaunch) -> Result<Pid, OsError>;
    /// A fresh credential for a cell's tool calls: unguessable by another
    /// process (the real system's random source; the simulation's seeded
    /// state). Hex or other file-name-safe characters.
    fn random_token(&mut self) -> String;
    /// True when `program` can be found on PATH (e.g. `python3`).
    fn has_program(&self, program: &str) -> bool;
    /// Nudges whoever sleeps on the wake channel at `path` (the kernel
    /// daemon, see [`super::layout::KernelLayout::wake`]) so that it looks
    /// at its cells now rather than at its next tick. Best effort: nobody
    /// listening is fine. The default does nothing (the daemon still
    /// notices at its next tick).
    fn wake(&mut self, path: &str) {
        let _ = path;
    }
    /// The calling daemon has been sent SIGTERM and has not acted on it
    /// yet: the signal lands at any moment of a tick, and the daemon acts
    /// on it only between ticks, so the tick in progress asks before it
    /// starts a cell (a kernel being stopped starts nothing more). No
    /// default: a wrapper that forwards the others must forward this too.
    fn stop_requested(&self) -> bool;
}
