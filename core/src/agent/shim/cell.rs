//! A shell cell's shim as a sans-IO machine: every decision of
//! `tether-agent shim` for a shell cell, driven by the real shim over real
//! pipes (`agent/src/shim.rs`) and by the simulated OS over simulated ones
//! (`sim/src/os/shim.rs`).
//!
//! The driver calls [`CellShim::poll_step`] and does what the step says
//! before it polls again; what it observed meanwhile goes in through the
//! `handle_*` methods. Journal, tombstone, leftovers and cgroup removal go
//! through the [`Os`] trait here; the driver only moves bytes, starts the
//! main process, reaps and makes the cgroup. Time comes from [`Os::now`]
//! and never goes backwards.
//!
//! The steps, in order: open the journal (exit 1 if it cannot be opened);
//! a tombstone that got there first resolves the cell without running it;
//! [`ShimStep::MakeCgroup`] (recorded in the cell's `cgroup` file before
//! the main process starts); [`ShimStep::Start`]; [`ShimStep::Pump`] until
//! the cell is complete ([`super::complete`]: the main process exited and
//! both pipes reached EOF or the drain bound passed); [`ShimStep::FinalRead`]
//! of what the pipes already hold; then the result, the leftovers (every
//! process of the cell's [`CellScope`] still running) and `done`; then
//! [`ShimStep::Linger`] until the shim's tree is empty — still reading the
//! pipes, whose bytes now go to the kernel's background log, so a
//! background job never writes to a closed pipe; then the cgroup goes (if
//! empty) and [`ShimStep::Exit`].

use super::orphans::OrphanRecords;
use super::{complete, ExitStatus, ShimCore, DEFAULT_DRAIN, JOURNAL_RETRY};
use crate::agent::background::BackgroundLog;
use crate::agent::layout::KernelLayout;
use crate::agent::os::{CellLaunch, Os, Pid};
use crate::agent::procs::{self, CellScope, Table};
use crate::protocol::{CellOutcome, Stream};
use crate::time::Timestamp;
use std::time::Duration;

/// What the driver does next.
#[must_use]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShimStep {
    /// Make the cell's own cgroup `name` (under the shim's), then call
    /// [`CellShim::handle_cgroup`] with its path, or `None` where cgroups
    /// are not writable.
    MakeCgroup {
        /// Its name ([`procs::cgroup_name`] of the cell's marker).
        name: String,
    },
    /// Start the main process: `argv` in a new session, `marker` and
    /// `env` in its environment (and the kernel's `bin` directory, with
    /// `tether-call`, at the end of its PATH), stdout and stderr on two pipes the driver reads, born
    /// in `cgroup` when there is one. Then call
    /// [`CellShim::handle_started`].
    Start {
        /// Its argv (never empty).
        argv: Vec<String>,
        /// The env marker `(name, value)`.
        marker: (String, String),
        /// More environment: the tool-call directory and credential.
        env: Vec<(String, String)>,
        /// The cgroup given to [`CellShim::handle_cgroup`], if kept.
        cgroup: Option<String>,
    },
    /// Read the pipes and reap children until something happens or
    /// [`CellShim::poll_timeout`] passes; report with `handle_output`,
    /// `handle_eof` and `handle_exit`.
    Pump,
    /// Read what the pipes already hold, without waiting; report it.
    FinalRead,
    /// Keep reading the pipes and reaping; call
    /// [`CellShim::handle_tree_empty`] once no child is left (after one
    /// last read of what the pipes hold).
    Linger,
    /// The journal is behind (a write failed: a full disk): read the
    /// pipes and reap as for [`ShimStep::Pump`] until
    /// [`CellShim::poll_timeout`], then step again (the shim writes what
    /// waits before it lingers or exits).
    Retry,
    /// Exit with this status.
    Exit(u8),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Open,
    Cgroup,
    Start,
    Pump,
    FinalRead,
    Finish,
    /// Resolved, with journal entries still to write.
    Flush,
    Linger,
    Exit(u8),
}

/// One shell cell's shim.
#[derive(Debug)]
pub struct CellShim {
    launch: CellLaunch,
    phase: Phase,
    core: Option<ShimCore>,
    main: Option<Pid>,
    cgroup: Option<String>,
    eof: [bool; 2],
    exited: Option<(Timestamp, ExitStatus)>,
    drain: Duration,
    log: BackgroundLog,
    /// When the journal is written again ([`Phase::Flush`]).
    retry_at: Timestamp,
    /// The processes reparented to the shim, kept on disk.
    orphans: OrphanRecords,
}

fn index(stream: Stream) -> usize {
    match stream {
        Stream::Stdout => 0,
        Stream::Stderr => 1,
    }
}

impl CellShim {
    /// The shim of the cell `launch` describes.
    pub fn new(launch: CellLaunch) -> CellShim {
        let log = BackgroundLog::new(&KernelLayout::new(&launch.kernel_dir));
        let orphans = OrphanRecords::of_cell(launch.marker.1.clone());
        CellShim {
            launch,
            phase: Phase::Open,
            core: None,
            main: None,
            cgroup: None,
            eof: [false; 2],
            exited: None,
            drain: DEFAULT_DRAIN,
            log,
            retry_at: Timestamp::ZERO,
            orphans,
        }
    }

    /// The cell directory it serves.
    pub fn cell_dir(&self) -> &str {
        &self.launch.cell_dir
    }

    /// The main process, once started.
    pub fn main_pid(&self) -> Option<Pid> {
        self.main
    }

    /// Its records of the processes reparented to it: a driver that
    /// wakes the shim only when there is news wakes it for a look when a
    /// child other than the main process is not recorded yet.
    pub fn orphans(&self) -> &OrphanRecords {
        &self.orphans
    }

    /// Does the shim still read `stream`'s pipe (it has not reached EOF,
    /// and the shim has not exited)?
    pub fn reading(&self, stream: Stream) -> bool {
        matches!(
            self.phase,
            Phase::Pump | Phase::FinalRead | Phase::Finish | Phase::Flush | Phase::Linger
        ) && !self.eof[index(stream)]
    }

    /// Has the cell resolved, the shim now waiting for its tree to empty
    /// ([`ShimStep::Linger`])?
    pub fn lingering(&self) -> bool {
        self.phase == Phase::Linger
    }

    /// Has the cell resolved (its result decided, its journal written or
    /// queued)? From then on what its pipes carry is the kernel's
    /// background log, not the cell's output.
    pub fn resolved(&self) -> bool {
        matches!(self.phase, Phase::Flush | Phase::Linger | Phase::Exit(_))
    }

    /// When the shim has something to do without new input: now while it
    /// has a step ready, the drain bound while it waits for EOF after the
    /// main process exited, else never (it waits for its pipes and
    /// children).
    #[must_use]
    pub fn poll_timeout(&self, now: Timestamp) -> Option<Timestamp> {
        match self.phase {
            Phase::Pump => match self.exited {
                Some((at, _)) if complete(Some(at), self.eof == [true; 2], now, self.drain) => {
                    Some(now)
                }
                Some((at, _)) => Some(at + self.drain),
                None => None,
            },
            Phase::Flush => Some(self.retry_at.max(now)),
            Phase::Linger | Phase::Exit(_) => None,
            _ => Some(now),
        }
    }

    /// The next step.
    pub fn poll_step(&mut self, os: &mut dyn Os) -> ShimStep {
        loop {
            match self.phase {
                Phase::Open => self.open(os),
                Phase::Cgroup => {
                    self.phase = Phase::Start;
                    return ShimStep::MakeCgroup {
                        name: procs::cgroup_name(&self.launch.marker.1),
                    };
                }
                Phase::Start => {
                    self.phase = Phase::Pump;
                    let env = self
                        .core
                        .as_ref()
                        .map(ShimCore::calls_env)
                        .unwrap_or_default();
                    return ShimStep::Start {
                        argv: self.launch.argv.clone(),
                        marker: self.launch.marker.clone(),
                        env,
                        cgroup: self.cgroup.clone(),
                    };
                }
                Phase::Pump => {
                    let exited_at = self.exited.map(|(at, _)| at);
                    if !complete(exited_at, self.eof == [true; 2], os.now(), self.drain) {
                        if let Some(core) = self.core.as_mut() {
                            // A journal that cannot be written fails the
                            // call's caller at its deadline; the cell goes on.
                            let _ = core.tick_calls(os);
                        }
                        self.end_tree_if_kernel_gone(os);
                        self.orphans.look(os, &self.launch.kernel_dir, self.main);
                        return ShimStep::Pump;
                    }
                    self.phase = Phase::FinalRead;
                }
                Phase::FinalRead => {
                    self.phase = Phase::Finish;
                    if !shim_skips_final_read() {
                        return ShimStep::FinalRead;
                    }
                }
                Phase::Finish => self.finish(os),
                // A journal whose kernel's directory is gone has no
                // reader left: what it owes is dropped, not retried for
                // ever.
                Phase::Flush if self.kernel_gone(os) => self.phase = Phase::Linger,
                Phase::Flush if os.now() < self.retry_at => return ShimStep::Retry,
                Phase::Flush => match self.core.as_mut().map(|c| c.flush(os)) {
                    Some(Err(_)) => {
                        self.retry_at = os.now() + JOURNAL_RETRY;
                        return ShimStep::Retry;
                    }
                    _ => self.phase = Phase::Linger,
                },
                Phase::Linger
                    if self.core.as_ref().is_some_and(ShimCore::has_unwritten)
                        && !self.kernel_gone(os) =>
                {
                    self.phase = Phase::Flush;
                }
                Phase::Linger => {
                    self.end_tree_if_kernel_gone(os);
                    self.orphans.look(os, &self.launch.kernel_dir, self.main);
                    return ShimStep::Linger;
                }
                Phase::Exit(code) => return ShimStep::Exit(code),
            }
        }
    }

    /// Opens the journal; honours a tombstone; refuses an empty argv.
    fn open(&mut self, os: &mut dyn Os) {
        let mut core = match ShimCore::new(os, self.launch.clone()) {
            Ok(core) => core,
            Err(_) => {
                self.phase = Phase::Exit(1);
                return;
            }
        };
        let tombstone = core.tombstone(os).filter(|_| !shim_ignores_tombstone());
        self.phase = if let Some(reason) = tombstone {
            let _ = core.never_started(os, reason.outcome());
            Phase::Linger
        } else if self.launch.argv.is_empty() {
            let message = "the cell has an empty argv".to_owned();
            let _ = core.never_started(os, CellOutcome::Error { message });
            Phase::Linger
        } else {
            Phase::Cgroup
        };
        self.core = Some(core);
    }

    /// The cgroup [`ShimStep::MakeCgroup`] made, or `None`. It is recorded
    /// in the cell's `cgroup` file before the main process starts, so any
    /// later op or daemon finds its members. False: the shim does not use
    /// it (it could not be recorded), and the driver removes it.
    pub fn handle_cgroup(&mut self, os: &mut dyn Os, path: Option<String>) -> bool {
        let (Some(path), Some(core)) = (path, self.core.as_mut()) else {
            return false;
        };
        if core.record_cgroup(os, &path).is_err() {
            return false;
        }
        self.cgroup = Some(path);
        true
    }

    /// How [`ShimStep::Start`] went: the main process's pid and start
    /// time, or why it could not start (the cell resolves with that).
    pub fn handle_started(&mut self, os: &mut dyn Os, started: Result<(Pid, u64), String>) {
        let Some(core) = self.core.as_mut() else {
            return;
        };
        match started {
            Ok((pid, starttime)) => {
                self.main = Some(pid);
                let _ = core.started(os, pid, pid, starttime);
            }
            Err(message) => {
                let _ = core.never_started(os, CellOutcome::Error { message });
                self.phase = Phase::Linger;
            }
        }
    }

    /// Bytes read from `stream`'s pipe: the cell's output until it
    /// resolved, the kernel's background log after. A journal that cannot
    /// be written is the driver's to report; the shim goes on.
    pub fn handle_output(
        &mut self,
        os: &mut dyn Os,
        stream: Stream,
        data: &[u8],
    ) -> Result<(), crate::agent::OsError> {
        match (self.phase, self.core.as_mut()) {
            (Phase::Pump | Phase::FinalRead | Phase::Finish, Some(core)) => {
                core.output(os, stream, data)
            }
            _ => self.log.append(os, data),
        }
    }

    /// `stream`'s pipe reached EOF.
    pub fn handle_eof(&mut self, stream: Stream) {
        self.eof[index(stream)] = true;
    }

    /// A child was reaped: the main process's exit ends the cell (once
    /// the pipes are done); any other child is an orphan the shim reaped.
    pub fn handle_exit(&mut self, now: Timestamp, pid: Pid, status: ExitStatus) {
        if Some(pid) == self.main && self.exited.is_none() {
            self.exited = Some((now, status));
        }
    }

    /// A kernel whose directory was removed (a temp cleaner, a stray
    /// `rm -rf`) has no record left by which its daemon, an op or a
    /// shutdown could find what this shim holds: the shim ends its tree
    /// and its cgroup's members itself (again at each look, for a fork
    /// that raced the last), and exits once the tree is empty.
    fn end_tree_if_kernel_gone(&mut self, os: &mut dyn Os) {
        if self.kernel_gone(os) {
            super::end_own_tree(os, self.cgroup.as_deref());
        }
    }

    /// Is the kernel's config gone (shut down, or its directory removed)?
    /// A config of another nonce is not "gone" here, as it is for the
    /// interpreter shim: a fresh daemon adopts a cell whose shim outlived
    /// its predecessor (a tombstone, then the shim's own cancel and
    /// journal, which must go on), while it never adopts an old
    /// interpreter (the spawn ends it).
    fn kernel_gone(&self, os: &dyn Os) -> bool {
        !os.exists(&KernelLayout::new(&self.launch.kernel_dir).config())
    }

    /// The shim has no child left: the cell's cgroup goes if it is empty
    /// (one holding a process that left the tree stays for the daemon, an
    /// ack, gc or shutdown), and the shim exits.
    pub fn handle_tree_empty(&mut self, os: &mut dyn Os) {
        if self.phase != Phase::Linger {
            return;
        }
        if let Some(group) = &self.cgroup {
            let _ = os.remove_cgroup(group);
        }
        self.phase = Phase::Exit(0);
    }

    /// The cell is complete: result, leftovers, `done`.
    fn finish(&mut self, os: &mut dyn Os) {
        self.phase = Phase::Linger;
        let Some(core) = self.core.as_mut() else {
            return;
        };
        let table = Table::snapshot(os);
        let protected = procs::protected(&table, os.self_pid());
        let scope = CellScope {
            shim: Some(os.self_pid()),
            pgid: self.main,
            marker: self.launch.marker.1.clone(),
            other_markers: Vec::new(),
            extra: Vec::new(),
            cgroup: self.cgroup.clone(),
        };
        let leftovers: Vec<Pid> = procs::cell_processes(os, &table, &scope, &protected)
            .into_iter()
            .collect();
        // A main process the shim never saw exit (it cannot happen once
        // the cell is complete) counts as killed.
        let exit = self.exited.map_or(ExitStatus::Signal(9), |(_, s)| s);
        // What could not be written now waits in the journal's queue:
        // written before the shim lingers ([`Phase::Flush`]).
        let _ = core.finish(os, exit, leftovers);
    }
}

/// The planted bug [`crate::mutation::Mutation::ShimIgnoresTombstone`]:
/// never, without the `mutations` feature.
fn shim_ignores_tombstone() -> bool {
    #[cfg(feature = "mutations")]
    {
        crate::mutation::active(crate::mutation::Mutation::ShimIgnoresTombstone)
    }
    #[cfg(not(feature = "mutations"))]
    {
        false
    }
}

/// The planted bug [`crate::mutation::Mutation::ShimSkipsFinalRead`]:
/// never, without the `mutations` feature.
fn shim_skips_final_read() -> bool {
    #[cfg(feature = "mutations")]
    {
        crate::mutation::active(crate::mutation::Mutation::ShimSkipsFinalRead)
    }
    #[cfg(not(feature = "mutations"))]
    {
        false
    }
}
