//! [`LinuxOs`]: the agent's [`Os`] on a real Linux machine.
//!
//! - [`procfs`]: processes from `/proc` (stat cut after the last `)`,
//!   environ, cmdline).
//! - [`files`]: private, atomic file operations for the state directories.
//! - [`spawn`]: detached starts of the daemon and shim roles (new session,
//!   stdio away from the caller, no inherited descriptors or ignored
//!   signals).
//! - [`cgroup`]: a cell's own cgroup v2 (made by the shim, its members,
//!   its removal).
//! - [`spawn_into`]: a cell's main process, born inside the cell's cgroup
//!   (`clone3(CLONE_INTO_CGROUP)`, a `cgroup.procs` write where that is
//!   refused).
//!
//! Everything the agent *decides* lives in `tether_core::agent`; this module
//! only answers questions and carries out orders, with typed errors and no
//! panics on anything the system hands back.

pub(crate) mod cgroup;
mod files;
mod procfs;
mod spawn;
pub(crate) mod spawn_into;

use self::spawn::Detached;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use tether_core::agent::{CellLaunch, Os, OsError, Pid, ProcInfo, Signal};
use tether_core::time::Timestamp;

/// The executable re-run for the daemon and shim roles: this very binary,
/// even if its file has been replaced or deleted since it started.
const SELF_EXE: &str = "/proc/self/exe";

/// File in the kernel directory that receives the daemon's stderr.
pub(crate) const DAEMON_STDERR: &str = "daemon.stderr";
/// File in the cell directory that receives the shim's stderr.
pub(crate) const SHIM_STDERR: &str = "shim.stderr";

/// The real operating system.
#[derive(Clone, Debug)]
pub(crate) struct LinuxOs {
    /// Program executed for the daemon and shim roles.
    exe: PathBuf,
    /// argv[0] given to them (what `ps` shows).
    arg0: OsString,
}

impl Default for LinuxOs {
    fn default() -> Self {
        Self::new()
    }
}

impl LinuxOs {
    /// The OS as seen by this agent binary: roles re-execute
    /// `/proc/self/exe`.
    pub(crate) fn new() -> Self {
        let arg0 = std::env::current_exe()
            .map(PathBuf::into_os_string)
            .unwrap_or_else(|_| OsString::from("tether-agent"));
        LinuxOs {
            exe: PathBuf::from(SELF_EXE),
            arg0,
        }
    }

    /// The same, but the roles run `exe` instead (tests use a stand-in).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn with_exe(exe: impl Into<PathBuf>) -> Self {
        let exe = exe.into();
        LinuxOs {
            arg0: exe.clone().into_os_string(),
            exe,
        }
    }
}

/// argv[1..] of the daemon role (what `serve::run` parses).
fn daemon_args(kernel_dir: &str, nonce: &str) -> Vec<OsString> {
    tether_core::agent::kernel::daemon_args(kernel_dir, nonce)
        .map(OsString::from)
        .to_vec()
}

/// argv[1..] of the shim role: the launch as one JSON argument (what
/// `shim::run` parses).
fn shim_args(launch: &CellLaunch) -> Result<Vec<OsString>, OsError> {
    let json = serde_json::to_string(launch)
        .map_err(|e| OsError::Other(format!("cannot encode cell launch: {e}")))?;
    Ok(["shim", "--launch", &json].map(OsString::from).to_vec())
}

fn to_signal(signal: Signal) -> rustix::process::Signal {
    use rustix::process::Signal as S;
    match signal {
        Signal::Int => S::INT,
        Signal::Term => S::TERM,
        Signal::Stop => S::STOP,
        Signal::Cont => S::CONT,
        Signal::Kill => S::KILL,
    }
}

/// Appends `name` to `dir` when `dir` is a directory that exists.
fn log_in(dir: &str, name: &str) -> Option<PathBuf> {
    let dir = Path::new(dir);
    dir.is_dir().then(|| dir.join(name))
}

impl Os for LinuxOs {
    /// Milliseconds of `CLOCK_BOOTTIME`: monotonic, shared by every process
    /// of the machine (an op command and the daemon agree), counting
    /// suspend.
    fn now(&self) -> Timestamp {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
        let ms = (t.tv_sec.max(0) as u64)
            .saturating_mul(1000)
            .saturating_add((t.tv_nsec.max(0) as u64) / 1_000_000);
        Timestamp(ms)
    }

    fn boot_id(&self) -> Result<String, OsError> {
        const PATH: &str = "/proc/sys/kernel/random/boot_id";
        let raw = files::read_file(PATH)?;
        let id = String::from_utf8_lossy(&raw).trim().to_owned();
        if id.is_empty() {
            return Err(OsError::Other(format!("{PATH} is empty")));
        }
        Ok(id)
    }

    fn self_pid(&self) -> Pid {
        std::process::id()
    }

    fn read_file(&self, path: &str) -> Result<Vec<u8>, OsError> {
        files::read_file(path)
    }

    fn create_new(&mut self, path: &str, data: &[u8]) -> Result<(), OsError> {
        files::create_new(path, data)
    }

    fn write_atomic(&mut self, path: &str, data: &[u8]) -> Result<(), OsError> {
        files::write_atomic(path, data)
    }

    fn append(&mut self, path: &str, data: &[u8]) -> Result<(), OsError> {
        files::append(path, data)
    }

    fn exists(&self, path: &str) -> bool {
        files::exists(path)
    }

    fn list_dir(&self, path: &str) -> Result<Vec<String>, OsError> {
        files::list_dir(path)
    }

    fn create_dir_all(&mut self, path: &str) -> Result<(), OsError> {
        files::create_dir_all(path)
    }

    fn create_dir(&mut self, path: &str) -> Result<(), OsError> {
        files::create_dir(path)
    }

    fn remove_all(&mut self, path: &str) -> Result<(), OsError> {
        files::remove_all(path)
    }

    fn process(&self, pid: Pid) -> Option<ProcInfo> {
        procfs::process(pid)
    }

    fn processes(&self) -> Vec<ProcInfo> {
        procfs::processes()
    }

    fn children(&self, pid: Pid) -> Vec<ProcInfo> {
        procfs::children(pid).unwrap_or_else(|| {
            self.processes()
                .into_iter()
                .filter(|p| p.ppid == pid && p.pid != pid && !p.zombie)
                .collect()
        })
    }

    fn has_env(&self, pid: Pid, name: &str, value: &str) -> bool {
        procfs::has_env(pid, name, value)
    }

    fn env_var(&self, pid: Pid, name: &str) -> Option<String> {
        procfs::env_var(pid, name)
    }

    fn has_arg(&self, pid: Pid, arg: &str) -> bool {
        procfs::has_arg(pid, arg)
    }

    fn stop_requested(&self) -> bool {
        crate::serve::term_received()
    }

    /// `kill(2)` on exactly one pid. Pid 0 and 1, and values that would be
    /// negative as a `pid_t` (process groups, "everyone"), are refused
    /// whatever the caller meant.
    fn signal(&mut self, pid: Pid, signal: Signal) -> Result<(), OsError> {
        if pid <= 1 {
            return Err(OsError::Other(format!("refusing to signal pid {pid}")));
        }
        let target = i32::try_from(pid)
            .ok()
            .and_then(rustix::process::Pid::from_raw)
            .ok_or_else(|| OsError::Other(format!("refusing to signal pid {pid}: not a pid")))?;
        rustix::process::kill_process(target, to_signal(signal)).map_err(|e| match e {
            rustix::io::Errno::SRCH => OsError::NotFound,
            rustix::io::Errno::PERM => OsError::PermissionDenied,
            e => OsError::Other(format!("signal {signal:?} to pid {pid}: {e}")),
        })
    }

    /// `{group}/cgroup.procs`.
    fn cgroup_members(&self, group: &str) -> Vec<Pid> {
        cgroup::members(group)
    }

    /// `rmdir`, only on a cgroup2 file system.
    fn remove_cgroup(&mut self, group: &str) -> Result<(), OsError> {
        cgroup::remove(group)
    }

    fn spawn_daemon(&mut self, kernel_dir: &str, nonce: &str) -> Result<Pid, OsError> {
        Detached {
            program: self.exe.clone(),
            arg0: self.arg0.clone(),
            args: daemon_args(kernel_dir, nonce),
            new_session: true,
            stderr_log: log_in(kernel_dir, DAEMON_STDERR),
        }
        .spawn()
    }

    /// The shim stays in the caller's session (it puts the cell's main
    /// process in a new one itself) and is the caller's child, to be reaped
    /// by it.
    fn spawn_cell(&mut self, launch: &CellLaunch) -> Result<Pid, OsError> {
        Detached {
            program: self.exe.clone(),
            arg0: self.arg0.clone(),
            args: shim_args(launch)?,
            new_session: false,
            stderr_log: log_in(&launch.cell_dir, SHIM_STDERR),
        }
        .spawn()
    }

    /// 16 bytes of the kernel's random source, as hex.
    fn random_token(&mut self) -> String {
        crate::random_hex(16)
    }

    /// `program` with a `/` is checked as a path; otherwise each `PATH`
    /// entry is tried (default `/usr/local/bin:/usr/bin:/bin`).
    fn has_program(&self, program: &str) -> bool {
        if program.is_empty() || program.contains('\0') {
            return false;
        }
        if program.contains('/') {
            return is_executable(Path::new(program));
        }
        let path = std::env::var_os("PATH")
            .unwrap_or_else(|| OsString::from("/usr/local/bin:/usr/bin:/bin"));
        std::env::split_paths(&path)
            .filter(|dir| !dir.as_os_str().is_empty())
            .any(|dir| is_executable(&dir.join(program)))
    }

    /// Writes one byte to the daemon's FIFO without blocking: no FIFO, no
    /// reader or a full pipe all mean the daemon is not waiting for it.
    fn wake(&mut self, path: &str) {
        use rustix::fs::{FileType, Mode, OFlags};
        let flags = OFlags::WRONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOFOLLOW;
        let Ok(fd) = rustix::fs::open(path, flags, Mode::empty()) else {
            return;
        };
        if rustix::fs::fstat(&fd)
            .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Fifo)
        {
            let _ = rustix::io::write(&fd, b"!");
        }
    }
}

/// A regular file (after symlinks) that we may execute.
fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file())
        && rustix::fs::access(path, rustix::fs::Access::EXEC_OK).is_ok()
}

#[cfg(test)]
mod tests;
