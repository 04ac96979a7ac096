//! `tether-agent serve --kernel-dir D --nonce N`: the kernel daemon. Started
//! detached (own session) by `spawn`; a child subreaper, so every orphan of
//! its cells comes back to it; loops [`Daemon::tick`] and reaps its
//! children (shims, reparented orphans) in between.

use crate::linux_os::LinuxOs;
use rustix::process::{wait, WaitOptions};
use std::ffi::OsString;
use std::time::Duration;
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
    let mut os = LinuxOs::new();
    let mut daemon = Daemon::new(&dir, &nonce);
    loop {
        let step = daemon.tick(&mut os);
        reap_all();
        match step {
            DaemonStep::Exit => {
                reap_all();
                return 0;
            }
            DaemonStep::Continue { next_wake } => {
                crate::sleep_until(os.now(), Some(next_wake), Duration::from_millis(50));
                reap_all();
            }
        }
    }
}

/// Reaps every child that has exited, without blocking.
fn reap_all() {
    while let Ok(Some(_)) = wait(WaitOptions::NOHANG) {}
}
