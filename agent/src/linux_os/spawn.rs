//! Starting the agent's long-lived roles (kernel daemon, cell shim) as
//! detached processes.
//!
//! The child gets stdin and stdout on `/dev/null` and stderr on a log file
//! (or `/dev/null`), every other inherited descriptor is marked
//! close-on-exec, and all signal dispositions are reset to their defaults.
//! The descriptor rule matters: an op command runs with its stdout on the
//! client's exec pipe, and a daemon that kept any copy of that pipe would
//! keep the client's exec from ever seeing EOF. The disposition rule
//! matters because `SIG_IGN` survives `exec`: a daemon started from a
//! background job (`SIGINT` ignored) would hand that on to every cell.
//!
//! The child is not waited for here: an op command exits right after and
//! the daemon is reparented; a daemon reaps its shims itself.

use std::ffi::OsString;
use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use tether_core::agent::{OsError, Pid};

/// One detached process to start.
#[derive(Clone, Debug)]
pub(crate) struct Detached {
    /// The executable (e.g. `/proc/self/exe`).
    pub(crate) program: PathBuf,
    /// argv[0] as `ps` shows it.
    pub(crate) arg0: OsString,
    /// argv[1..].
    pub(crate) args: Vec<OsString>,
    /// Start a new session (the child becomes session and group leader).
    pub(crate) new_session: bool,
    /// Append stderr to this file (created 0600); `/dev/null` when absent
    /// or when it cannot be opened.
    pub(crate) stderr_log: Option<PathBuf>,
}

impl Detached {
    /// Starts the process and returns its pid without waiting for it.
    pub(crate) fn spawn(&self) -> Result<Pid, OsError> {
        let mut cmd = Command::new(&self.program);
        cmd.arg0(&self.arg0)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(self.stderr());
        let new_session = self.new_session;
        let fd_limit = fd_limit();
        // SAFETY: the closure runs in the forked child before exec and only
        // makes async-signal-safe system calls (setsid, sigaction,
        // close_range / fcntl); it allocates nothing and takes no locks.
        unsafe {
            cmd.pre_exec(move || {
                if new_session {
                    rustix::process::setsid()?;
                }
                reset_signal_dispositions();
                cloexec_from_3(fd_limit);
                Ok(())
            });
        }
        let child: Child = spawn_retrying(&mut cmd)
            .map_err(|e| OsError::Other(format!("cannot start {}: {e}", self.program.display())))?;
        // Dropping `Child` neither waits for nor kills the process.
        Ok(child.id())
    }

    fn stderr(&self) -> Stdio {
        self.stderr_log
            .as_deref()
            .and_then(|path| open_log(path).ok())
            .map_or_else(Stdio::null, Stdio::from)
    }
}

fn open_log(path: &Path) -> io::Result<std::fs::File> {
    OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(path)
}

/// `Command::spawn`, retried a few times on `ETXTBSY`. A file that was just
/// written can be "busy" for a moment when another thread of this process
/// forks while the writer's descriptor is still open (the fork's copy lives
/// until that child execs); it passes by itself.
pub(crate) fn spawn_retrying(cmd: &mut Command) -> io::Result<Child> {
    let mut attempt = 0u64;
    loop {
        match cmd.spawn() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && attempt < 20 => {
                attempt += 1;
                std::thread::sleep(std::time::Duration::from_millis(5 * attempt));
            }
            other => return other,
        }
    }
}

/// Upper bound of descriptor numbers to sweep when `close_range` is not
/// available (computed before fork).
fn fd_limit() -> i32 {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    limit.current.map_or(65_536, |n| n.min(65_536) as i32)
}

/// Resets every catchable standard signal to `SIG_DFL` (async-signal-safe).
pub(crate) fn reset_signal_dispositions() {
    for sig in 1..32 {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        // SAFETY: a zeroed sigaction with SIG_DFL and an empty mask is a
        // valid argument; sigaction is async-signal-safe. Failure (an
        // invalid number) leaves that signal as it was.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = libc::SIG_DFL;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(sig, &action, std::ptr::null_mut());
        }
    }
}

/// Marks every descriptor from 3 up as close-on-exec (async-signal-safe).
/// Marking instead of closing keeps std's own exec-error pipe working.
fn cloexec_from_3(fd_limit: i32) {
    // SAFETY: close_range with CLOSE_RANGE_CLOEXEC only sets flags.
    let done = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    if done == 0 {
        return;
    }
    // Kernels before 5.11: one fcntl per possible descriptor.
    for fd in 3..fd_limit {
        // SAFETY: fcntl on a closed descriptor fails with EBADF, harmlessly.
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags >= 0 && flags & libc::FD_CLOEXEC == 0 {
                libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
            }
        }
    }
}
