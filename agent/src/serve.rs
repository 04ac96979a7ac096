//! `tether-agent serve --kernel-dir D --nonce N`: the kernel daemon. Started
//! detached (own session) by `spawn`; a child subreaper, so every orphan of
//! its cells comes back to it; loops [`Daemon::tick`] and reaps its
//! children (shims, reparented orphans) in between. Between ticks it
//! sleeps on the kernel's `wake` FIFO, so an op that records a submission
//! or a tombstone has the daemon look at once, not at its next tick.
//!
//! SIGTERM (`docker stop`, a host shutdown) is caught: the daemon stops
//! its kernel as [`Daemon::terminate`] says (the cells' processes get TERM,
//! then KILL after the grace period; the unfinished cells are resolved
//! with the stop as their error) and exits, instead of dying at once and
//! leaving its shims and interpreter running, orphaned.

use crate::linux_os::LinuxOs;
use rustix::event::{poll, PollFd, PollFlags};
use rustix::fd::OwnedFd;
use rustix::process::{wait, WaitOptions};
use std::ffi::OsString;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tether_core::agent::layout::KernelLayout;
use tether_core::agent::{Daemon, DaemonStep, Os};

pub(crate) fn run(args: &[OsString]) -> u8 {
    let (Some(dir), Some(nonce)) = (
        crate::flag(args, "--kernel-dir"),
        crate::flag(args, "--nonce"),
    ) else {
        eprintln!("tether-agent serve: --kernel-dir DIR --nonce NONCE are required");
        return 2;
    };
    if let Err(e) = rustix::process::set_child_subreaper(Some(rustix::process::getpid())) {
        eprintln!("tether-agent serve: cannot become a child subreaper: {e}");
    }
    catch_term();
    let mut os = LinuxOs::new();
    let mut daemon = Daemon::new(&dir, &nonce);
    let wake = open_wake_fifo(&KernelLayout::new(&dir).wake());
    let mut buf = [0u8; 64];
    loop {
        if TERM_RECEIVED.load(Ordering::SeqCst) {
            daemon.terminate(os.now());
        }
        let step = daemon.tick(&mut os);
        reap_all();
        match step {
            DaemonStep::Exit => {
                reap_all();
                return 0;
            }
            DaemonStep::Continue { next_wake } => {
                match &wake {
                    Some(fd) => {
                        let d = next_wake
                            .saturating_since(os.now())
                            .clamp(Duration::from_millis(1), Duration::from_millis(50));
                        let timeout = rustix::time::Timespec {
                            tv_sec: 0,
                            tv_nsec: i64::from(d.subsec_nanos()),
                        };
                        let mut fds = [PollFd::new(fd, PollFlags::IN)];
                        if poll(&mut fds, Some(&timeout)).is_ok_and(|n| n > 0) {
                            // An op recorded a submission or a tombstone:
                            // drain the nudges and tick now.
                            while rustix::io::read(fd, &mut buf).is_ok_and(|n| n > 0) {}
                        }
                    }
                    None => {
                        crate::sleep_until(os.now(), Some(next_wake), Duration::from_millis(50))
                    }
                }
                reap_all();
            }
        }
    }
}

/// The FIFO ops write to after recording a submission or a tombstone
/// (`Os::wake`), opened read-write so that it never reports end-of-file.
/// `None` (plain ticking) when it cannot be made.
fn open_wake_fifo(path: &str) -> Option<OwnedFd> {
    use rustix::fs::{FileType, Mode, OFlags, CWD};
    match rustix::fs::mknodat(CWD, path, FileType::Fifo, Mode::from_raw_mode(0o600), 0) {
        Ok(()) | Err(rustix::io::Errno::EXIST) => {}
        Err(e) => {
            eprintln!("tether-agent serve: cannot make {path}: {e}; ticking only");
            return None;
        }
    }
    let flags = OFlags::RDWR | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOFOLLOW;
    let fd = rustix::fs::open(path, flags, Mode::empty()).ok()?;
    let st = rustix::fs::fstat(&fd).ok()?;
    (FileType::from_raw_mode(st.st_mode) == FileType::Fifo).then_some(fd)
}

/// Set by the SIGTERM handler; the loop hands it to the daemon logic.
static TERM_RECEIVED: AtomicBool = AtomicBool::new(false);

/// This process (a kernel daemon) has been sent SIGTERM
/// ([`tether_core::agent::Os::stop_requested`]).
pub(crate) fn term_received() -> bool {
    TERM_RECEIVED.load(Ordering::SeqCst)
}

extern "C" fn on_term(_signal: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    TERM_RECEIVED.store(true, Ordering::SeqCst);
}

/// Catches SIGTERM (without SA_RESTART, so a poll or sleep in progress
/// ends and the loop sees the flag at once).
fn catch_term() {
    // SAFETY: the handler only stores to an atomic; the sigaction struct
    // is fully initialised (zeroed, then the handler and an empty mask).
    let rc = unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_term as extern "C" fn(libc::c_int) as libc::sighandler_t;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGTERM, &action, std::ptr::null_mut())
    };
    if rc != 0 {
        eprintln!(
            "tether-agent serve: cannot catch SIGTERM: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// Reaps every child that has exited, without blocking.
fn reap_all() {
    while let Ok(Some(_)) = wait(WaitOptions::NOHANG) {}
}
