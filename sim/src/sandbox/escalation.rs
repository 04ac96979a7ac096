//! Ground truth of how a kernel daemon ends processes, from the simulated
//! OS's signal log, for the oracle's escalation checks
//! (`tether_scenarios::oracle` `escalation`):
//!
//! - a cancel's KILL waits for the grace period: a daemon that sent TERM
//!   to a process of a cell sends STOP or KILL to that cell's processes
//!   only once the world's grace period has passed since (the sandbox's
//!   clock, which the daemon reads too: a clock jump moves both). Its
//!   exit sweep (shut down, stopped) and a shutdown kill at once by
//!   design and are not judged here; the stop has its own check
//!   ([`super::process_faults`]). An idle exit's sweep is: a daemon
//!   escalating a cancel is not idle until the cancel is over, so a
//!   sweep that cuts its grace short (a late cancel of a finished cell's
//!   leftovers, an idle timeout below the grace) is the cancel's early
//!   KILL;
//! - a daemon that caught SIGTERM starts no cell after it: a cell whose
//!   launch record (written when the daemon starts a shell cell's shim
//!   or hands a cell to the Python interpreter) a tick of that daemon
//!   wrote after the TERM is recorded. (A fresh daemon of the same
//!   kernel may start cells meanwhile: only the stopped daemon's own
//!   ticks are looked at.)

use super::Sandbox;
use crate::os::SimSignal;
use std::collections::{BTreeMap, BTreeSet};
use tether_core::agent::layout::KernelLayout;
use tether_core::agent::{Os, Pid};
use tether_core::ids::CellSeq;
use tether_core::time::Timestamp;

/// What the escalation checks have seen so far.
#[derive(Debug, Default)]
pub(super) struct EscalationTruth {
    /// The first TERM each daemon sent to a process of each cell (daemon
    /// pid, kernel name, seq), on the sandbox's clock.
    first_term: BTreeMap<(Pid, String, u64), Timestamp>,
    /// The first TERM each daemon sent to each process (daemon pid,
    /// process pid), on the sandbox's clock: an idle exit's sweep is
    /// judged by these (what the cancel it outran had TERMed).
    termed_procs: BTreeMap<(Pid, Pid), Timestamp>,
    /// Daemons that caught SIGTERM, with when (the sandbox's clock).
    termed: BTreeMap<Pid, Timestamp>,
    /// STOP or KILL sent to a cell's process less than the grace period
    /// after the same daemon's TERM to that cell: the first of each
    /// daemon's escalation of each cell.
    pub(super) early_kills: Vec<String>,
    /// The escalations (daemon pid, kernel name, seq) already in
    /// `early_kills`.
    early: BTreeSet<(Pid, String, u64)>,
    /// Cells a daemon started after it caught SIGTERM.
    pub(super) started_after_term: Vec<String>,
}

impl EscalationTruth {
    /// A daemon was spawned as `pid`: nothing seen under a reused pid is
    /// its.
    pub(super) fn daemon_spawned(&mut self, pid: Pid) {
        self.first_term.retain(|(d, _, _), _| *d != pid);
        self.termed_procs.retain(|(d, _), _| *d != pid);
        self.early.retain(|(d, _, _)| *d != pid);
        self.termed.remove(&pid);
    }

    /// The daemon `pid` caught SIGTERM at `at`.
    pub(super) fn daemon_termed(&mut self, pid: Pid, at: Timestamp) {
        self.termed.entry(pid).or_insert(at);
    }
}

impl Sandbox {
    /// A signal from `from` to `to` at `at` (the sandbox's clock): judged
    /// when `from` is a live kernel daemon that is not exiting and `to` a
    /// process of a cell of a kernel not shut down.
    pub(super) fn note_escalation_signal(
        &mut self,
        at: Timestamp,
        from: Pid,
        to: Pid,
        signal: SimSignal,
    ) {
        let swept = self.exiting_daemons.contains(&from) && !self.idle_exiting.contains(&from);
        if !self.daemons.contains_key(&from) || swept {
            return;
        }
        if !self.roles.get(&to).is_some_and(|r| r.starts_with("cell")) {
            return;
        }
        let Some((kernel, seq)) = self.cell_of.get(&to).cloned() else {
            return;
        };
        if self.is_shut(&kernel) {
            return;
        }
        let key = (from, kernel, seq);
        // An idle exit's sweep ends everything at once; it may only not
        // cut short a grace the daemon's cancel gave a process.
        let idle_sweep = self.idle_exiting.contains(&from);
        match signal {
            SimSignal::Term => {
                self.escalation.first_term.entry(key).or_insert(at);
                self.escalation.termed_procs.entry((from, to)).or_insert(at);
            }
            SimSignal::Stop | SimSignal::Kill => {
                let term = match idle_sweep {
                    // Not a TERM to an earlier process under a reused pid.
                    true => self.escalation.termed_procs.get(&(from, to)).filter(|t| {
                        self.cell_spawned_at
                            .get(&to)
                            .is_none_or(|&born| self.virtual_ms(**t) >= born)
                    }),
                    false => self.escalation.first_term.get(&key),
                };
                let Some(&term) = term else {
                    return;
                };
                let due = term.0.saturating_add(self.grace_ms);
                if at.0 < due && self.escalation.early.insert(key.clone()) {
                    let (daemon, kernel, seq) = key;
                    self.escalation.early_kills.push(format!(
                        "daemon {daemon} sent {signal} to {to} of {kernel}#{seq} at {} ms, {} ms after its TERM to that cell (grace {} ms)",
                        self.virtual_ms(at),
                        at.0 - term.0,
                        self.grace_ms
                    ));
                }
            }
            _ => {}
        }
    }

    /// The cells of the daemon `pid`'s kernel that have a launch record,
    /// if the daemon is stopped (or `caught_term` now): what its next
    /// tick must not add to.
    pub(super) fn launched_if_stopped(&self, pid: Pid, caught_term: bool) -> Option<BTreeSet<u64>> {
        let run = self
            .daemons
            .get(&pid)
            .filter(|r| r.stopped || caught_term)?;
        let layout = KernelLayout::new(&run.kernel_dir);
        let cells = self.os.list_dir(&layout.cells_dir()).unwrap_or_default();
        Some(
            cells
                .iter()
                .filter_map(|name| name.parse().ok())
                .filter(|&seq| self.os.exists(&layout.cell(CellSeq(seq)).launch()))
                .collect(),
        )
    }

    /// A tick of the stopped daemon `pid` of `kernel_dir` ended at `now`;
    /// `before` were the cells launched before it.
    pub(super) fn note_launches_after_term(
        &mut self,
        pid: Pid,
        kernel_dir: &str,
        before: &BTreeSet<u64>,
        now: Timestamp,
    ) {
        let layout = KernelLayout::new(kernel_dir);
        let cells = self.os.list_dir(&layout.cells_dir()).unwrap_or_default();
        let mut started: Vec<u64> = cells
            .iter()
            .filter_map(|name| name.parse().ok())
            .filter(|seq| !before.contains(seq))
            .filter(|&seq| self.os.exists(&layout.cell(CellSeq(seq)).launch()))
            .collect();
        started.sort_unstable();
        let term = self.escalation.termed.get(&pid).copied().unwrap_or(now);
        for seq in started {
            self.escalation.started_after_term.push(format!(
                "daemon {pid} of {} caught SIGTERM at {} ms and started its cell {seq} at {} ms",
                super::kernel_name(kernel_dir),
                self.virtual_ms(term),
                self.virtual_ms(now)
            ));
        }
    }

    /// STOP or KILL a daemon sent to a cell's processes before the grace
    /// period after its TERM to that cell had passed.
    pub fn early_kills(&self) -> Vec<String> {
        self.escalation.early_kills.clone()
    }

    /// Cells a daemon started after it caught SIGTERM.
    pub fn started_after_term(&self) -> Vec<String> {
        self.escalation.started_after_term.clone()
    }

    /// Cells a shim started though their cancel was recorded when it
    /// looked.
    pub fn started_after_cancel(&self) -> Vec<String> {
        self.os.started_after_cancel().to_vec()
    }
}
