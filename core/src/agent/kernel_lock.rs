//! The kernel's lock file (`spawning`): held by a spawn while it starts a
//! daemon, and by a shutdown while it sweeps, so that neither runs across
//! the other. Two spawns at once would each find no daemon and start one
//! (two client processes' spawns held by a frozen sandbox and run together
//! at its thaw: reaper seed 501974); a spawn run during another record's
//! shutdown of the kernel started a daemon the sweep then killed, a cancel
//! of a process that was not the shutdown's (drawn_clients seed 149).
//!
//! The file names its holder (pid and start time); one whose holder is
//! gone (a killed op, a torn write) is taken over.

use super::layout::KernelLayout;
use super::os::{still_runs, Os, OsError, Pid};

/// What [`claim`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// This process holds the lock now (or nothing can hold it: a disk
    /// that takes no file, a directory gone; the caller goes on alone).
    Taken,
    /// A live process holds it: its pid, when the file names one.
    Held(Option<Pid>),
}

/// Takes the kernel's lock for this process. Never makes the kernel's
/// directory: a spawn makes it first, a shutdown finds it or is done.
pub fn claim(os: &mut dyn Os, k: &KernelLayout) -> Claim {
    let me = os.self_pid();
    let start = os.process(me).map_or(0, |p| p.starttime);
    let lock = k.spawn_lock();
    for _ in 0..2 {
        match os.create_new(&lock, format!("{me} {start}").as_bytes()) {
            Ok(()) => return Claim::Taken,
            Err(OsError::AlreadyExists) => {}
            Err(_) => return Claim::Taken,
        }
        let holder = os.read_file(&lock).ok().and_then(|b| {
            let text = String::from_utf8(b).ok()?;
            let (pid, start) = text.trim().split_once(' ')?;
            Some((pid.parse::<Pid>().ok()?, start.parse::<u64>().ok()?))
        });
        let live = holder.is_some_and(|(pid, start)| still_runs(os, pid, start));
        if live {
            return Claim::Held(holder.map(|h| h.0));
        }
        let _ = os.remove_all(&lock);
    }
    // Another process took it over between our two tries.
    Claim::Held(None)
}

/// Lets the lock go.
pub fn release(os: &mut dyn Os, k: &KernelLayout) {
    let _ = os.remove_all(&k.spawn_lock());
}
