//! What a kernel directory records about its daemon and its cells, and the
//! identity check behind `probe` (and behind every "is the daemon alive?").

use super::journal::{self, read_journal};
use super::layout::{CellLayout, KernelLayout};
use super::os::{Os, OsError, Pid};
use super::procs::{self, Table};
use crate::protocol::{Identity, Lang, ProbeStatus};
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use std::collections::BTreeSet;

/// Default grace between TERM and KILL.
pub const DEFAULT_GRACE_MS: u64 = 2_000;

/// What `spawn` was asked for, kept in `config.json` for the daemon.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelConfig {
    /// The language.
    pub lang: Lang,
    /// The spawn's nonce (also in the daemon's argv).
    pub nonce: String,
    /// Idle self-exit after this long without a running cell.
    pub idle_timeout_ms: u64,
    /// Grace between TERM and KILL.
    pub grace_ms: u64,
}

/// The shim the daemon started for a cell (`launch.json`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchRecord {
    /// The shim's pid.
    pub shim_pid: Pid,
    /// Its start time (tells a reused pid apart).
    pub shim_starttime: u64,
    /// The cell's env marker value.
    pub marker: String,
    /// The cell's cgroup, kept in the record of an acknowledged cell whose
    /// cgroup still has members (`leftovers/`); absent in `launch.json`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<String>,
    /// The boot the recorded process ran in. Pids start over when the
    /// sandbox reboots, and start times count from boot: a process of the
    /// new boot can have the recorded pid *and* start time (the same
    /// spawns at the same time after boot; background_log seed 103280:
    /// the channel exec of a client got a lingering shim's record and an
    /// idle exit KILLed it). Absent when the boot id could not be read, or
    /// in a record written before it was kept: taken as this boot's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
}

impl LaunchRecord {
    /// A record of the process `pid` that started at `starttime`, in the
    /// boot the sandbox runs now.
    pub fn new(os: &dyn Os, pid: Pid, starttime: u64, marker: String) -> LaunchRecord {
        LaunchRecord {
            shim_pid: pid,
            shim_starttime: starttime,
            marker,
            cgroup: None,
            boot_id: os.boot_id().ok(),
        }
    }

    /// Was it written in the boot the sandbox runs now? A record of an
    /// earlier boot names no process (its pid and start time may be a
    /// new process's), nor any cgroup or marker anything now carries.
    pub fn of_this_boot(&self, os: &dyn Os) -> bool {
        match (&self.boot_id, os.boot_id()) {
            (Some(then), Ok(now)) => *then == now,
            _ => true,
        }
    }
}

/// The main process (pid, group, start time) a cell's journal says it
/// started, unless its launch record is of an earlier boot: pids and start
/// times count again from each boot, so the entry may name a process of
/// this one (full_disk seed 100704: a cell from before a bounce named the
/// other kernel's new daemon, same pid, same start time, and a shutdown
/// KILLed it). Without a launch record (its daemon died before writing
/// it) the entry is taken as this boot's.
pub fn started_this_boot(
    os: &dyn Os,
    cell: &CellLayout,
    launch: Option<&LaunchRecord>,
) -> Option<(Pid, Pid, u64)> {
    if launch.is_some_and(|l| !l.of_this_boot(os)) {
        return None;
    }
    read_journal(os, &cell.journal())
        .ok()
        .and_then(|r| journal::started(&r))
}

/// Does the kernel's config name daemon nonce `nonce`? `Some(false)`:
/// the config is gone, or another daemon's; `None`: it cannot be read.
pub fn config_names(os: &dyn Os, kernel: &KernelLayout, nonce: &str) -> Option<bool> {
    match read_json::<KernelConfig>(os, &kernel.config()) {
        Ok(Some(c)) => Some(c.nonce == nonce),
        Ok(None) => Some(false),
        Err(_) => None,
    }
}

/// Reads a JSON file: `Ok(None)` when absent, an error when unreadable.
pub fn read_json<T: DeserializeOwned>(os: &dyn Os, path: &str) -> Result<Option<T>, OsError> {
    match os.read_file(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| OsError::Other(format!("{path} is damaged: {e}"))),
        Err(OsError::NotFound) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Serialises plain data (cannot fail for our types).
pub fn to_json<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_default()
}

/// Is `expect` the daemon running now? `Alive`, `Dead` or `Replaced`, with
/// what was seen.
pub fn check_identity(os: &dyn Os, expect: &Identity) -> ProbeStatus {
    match os.boot_id() {
        Ok(boot) if boot != expect.boot_id && !reboot_taken_for_death() => {
            return ProbeStatus::Replaced {
                evidence: format!(
                    "the sandbox rebooted or was replaced: boot id {boot}, the daemon was started under {}",
                    expect.boot_id
                ),
            }
        }
        Ok(_) => {}
        Err(e) => {
            return ProbeStatus::Dead {
                evidence: format!("cannot read the boot id: {e}"),
            }
        }
    }
    let Some(p) = os.process(expect.pid) else {
        return ProbeStatus::Dead {
            evidence: format!(
                "no process {} (the daemon exited or was killed)",
                expect.pid
            ),
        };
    };
    if p.starttime != expect.starttime {
        return ProbeStatus::Replaced {
            evidence: format!(
                "pid {} was reused: start time {}, the daemon's was {}",
                expect.pid, p.starttime, expect.starttime
            ),
        };
    }
    if p.zombie {
        return ProbeStatus::Dead {
            evidence: format!("the daemon (pid {}) has exited (zombie)", expect.pid),
        };
    }
    if !os.has_arg(expect.pid, &expect.nonce) {
        // A daemon that exits between the two reads has no argv left (a
        // zombie's is empty): that is a death, not another process
        // (background_log seed 501729, a probe preempted across the
        // daemon's idle exit, said Replaced).
        let now = os.process(expect.pid);
        if now.is_none_or(|q| q.zombie || q.starttime != p.starttime) {
            return ProbeStatus::Dead {
                evidence: format!("the daemon (pid {}) exited while it was probed", expect.pid),
            };
        }
        return ProbeStatus::Replaced {
            evidence: format!(
                "pid {} does not carry the nonce {} in its argv",
                expect.pid, expect.nonce
            ),
        };
    }
    ProbeStatus::Alive {
        identity: expect.clone(),
    }
}

/// The probe op: compares the recorded identity with `expect` and checks it.
pub fn probe(os: &dyn Os, kernel: &KernelLayout, expect: Option<&Identity>) -> ProbeStatus {
    let recorded: Option<Identity> = read_json(os, &kernel.identity()).ok().flatten();
    match (expect, recorded) {
        (None, None) => ProbeStatus::Absent,
        (None, Some(rec)) => check_identity(os, &rec),
        // A sandbox replaced by a new machine has none of the old one's
        // files: that it was replaced is what the client must hear, not
        // only that the state is gone.
        (Some(exp), None) => match os.boot_id() {
            Ok(boot) if boot != exp.boot_id => check_identity(os, exp),
            _ => ProbeStatus::Dead {
                evidence: format!(
                    "{} is gone (the kernel's state was removed)",
                    kernel.identity()
                ),
            },
        },
        (Some(exp), Some(rec)) if rec != *exp => ProbeStatus::Replaced {
            evidence: format!(
                "the kernel was re-spawned: daemon pid {} nonce {}, expected pid {} nonce {}",
                rec.pid, rec.nonce, exp.pid, exp.nonce
            ),
        },
        (Some(exp), Some(_)) => check_identity(os, exp),
    }
}

/// The planted bug [`crate::mutation::Mutation::RebootTakenForDeath`]:
/// never, in a build without the `mutations` feature.
fn reboot_taken_for_death() -> bool {
    #[cfg(feature = "mutations")]
    {
        crate::mutation::active(crate::mutation::Mutation::RebootTakenForDeath)
    }
    #[cfg(not(feature = "mutations"))]
    {
        false
    }
}

/// Notes that the kernel whose shut list is `shut` (see
/// [`super::layout::Layout::shut`]) is being shut down under `nonce`, or
/// that a fresh daemon replaces the dead one of `nonce`: a
/// spawn of that nonce can still arrive later (an exec held by the
/// network, a channel request run after the client's one-shot retry) and
/// must not start a daemon again for a kernel its client has shut down.
/// Every nonce is kept, not just the last: a stale spawn of an older
/// daemon can arrive after a newer one was shut down too. A line per
/// shutdown or replacement; the client makes a fresh nonce for every new
/// daemon.
pub fn record_shut(os: &mut dyn Os, shut: &str, nonce: &str) -> Result<(), OsError> {
    if let Some((dir, _)) = shut.rsplit_once('/') {
        os.create_dir_all(dir)?;
    }
    os.append(shut, format!("{nonce}\n").as_bytes())
}

/// Was a daemon of this nonce shut down (see [`record_shut`])? A list that
/// cannot be read counts as none: refusing every spawn of the kernel would
/// be worse than the stale spawn it guards against.
pub fn was_shut(os: &dyn Os, shut: &str, nonce: &str) -> bool {
    os.read_file(shut)
        .ok()
        .is_some_and(|list| list.split(|&b| b == b'\n').any(|l| l == nonce.as_bytes()))
}

/// Makes `path`, a directory inside the kernel's, one level at a time
/// below the kernel's directory, which must exist (`NotFound` otherwise).
/// An op preempted across the kernel's shutdown (its directory removed)
/// must not make it again, left behind for good (timeout seed 102540: a
/// late cancel's tombstone made `cells/1/cancel` after the shutdown).
pub fn make_dir(os: &mut dyn Os, kernel: &KernelLayout, path: &str) -> Result<(), OsError> {
    let Some(rest) = path.strip_prefix(kernel.dir()) else {
        return Err(OsError::Other(format!(
            "{path} is not inside {}",
            kernel.dir()
        )));
    };
    let mut at = kernel.dir().trim_end_matches('/').to_owned();
    if !os.exists(&at) {
        return Err(OsError::NotFound);
    }
    for part in rest.split('/').filter(|p| !p.is_empty()) {
        at.push('/');
        at.push_str(part);
        os.create_dir(&at)?;
    }
    Ok(())
}

/// A kernel daemon's command line after the program: `serve
/// --kernel-dir <dir> --nonce <nonce>` (the probe finds the nonce there,
/// a spawn the kernel's directory).
pub fn daemon_args(kernel_dir: &str, nonce: &str) -> [String; 5] {
    ["serve", "--kernel-dir", kernel_dir, "--nonce", nonce].map(str::to_owned)
}

/// The live daemons of this kernel by their command line
/// ([`daemon_args`]), recorded or not, but for `caller` and its
/// ancestors.
pub fn daemons_by_command_line(os: &dyn Os, kernel: &KernelLayout, caller: Pid) -> BTreeSet<Pid> {
    let table = Table::snapshot(os);
    let protected = procs::protected(&table, caller);
    let [serve, flag, ..] = daemon_args(kernel.dir(), "");
    table
        .iter()
        .filter(|p| !p.zombie && !protected.contains(&p.pid))
        .filter(|p| {
            os.has_arg(p.pid, &serve) && os.has_arg(p.pid, &flag) && os.has_arg(p.pid, kernel.dir())
        })
        .map(|p| p.pid)
        .collect()
}

/// The recorded daemon's pid when it is alive.
pub fn live_daemon(os: &dyn Os, kernel: &KernelLayout) -> Option<Identity> {
    match probe(os, kernel, None) {
        ProbeStatus::Alive { identity } => Some(identity),
        _ => None,
    }
}
