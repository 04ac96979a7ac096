//! The process event log: every spawn, exit, reap, reparent, signal and
//! boot, stamped with virtual time, for the replay trace and the oracle.

use super::process::{CellRef, ExitStatus, Role};
use super::signals::{SignalEffect, SimSignal};
use super::SimOs;
use std::fmt;
use tether_core::agent::Pid;
use tether_core::time::Timestamp;

/// One thing that happened to a process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcEvent {
    /// When (virtual time).
    pub at: Timestamp,
    /// What.
    pub kind: ProcEventKind,
}

/// What happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProcEventKind {
    /// The sandbox (re)booted: every process before it is gone.
    Boot {
        /// The new boot id.
        boot_id: String,
        /// Processes that were alive when it went down.
        killed: Vec<Pid>,
    },
    /// A process was created.
    Spawn {
        /// Its pid.
        pid: Pid,
        /// Its parent (0: from outside the sandbox).
        ppid: Pid,
        /// Its group.
        pgid: Pid,
        /// Its session.
        sid: Pid,
        /// Its command line.
        argv: Vec<String>,
        /// The cell it belongs to (ground truth), if any.
        cell: Option<CellRef>,
        /// What it is, told at birth: a process may be gone before anyone
        /// looks (an interpreter killed with its shim in the same ms).
        role: Role,
        /// Whether its environment carries the agent's cell marker.
        marked: bool,
    },
    /// A process ended (it is a zombie until reaped).
    Exit {
        /// Its pid.
        pid: Pid,
        /// How.
        status: ExitStatus,
    },
    /// A zombie was reaped.
    Reap {
        /// Its pid.
        pid: Pid,
        /// By whom (0: outside the sandbox).
        by: Pid,
    },
    /// An orphan got a new parent.
    Reparent {
        /// Its pid.
        pid: Pid,
        /// The new parent.
        to: Pid,
    },
    /// A signal was sent.
    Signal {
        /// The sender (0: the kernel).
        from: Pid,
        /// The target.
        to: Pid,
        /// Which.
        signal: SimSignal,
        /// What it did.
        effect: SignalEffect,
    },
}

impl fmt::Display for ProcEventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProcEventKind::Boot { boot_id, killed } => {
                write!(f, "boot {boot_id} (killed {killed:?})")
            }
            ProcEventKind::Spawn {
                pid,
                ppid,
                pgid,
                sid,
                argv,
                cell,
                ..
            } => {
                let cmd: Vec<&str> = argv.iter().take(3).map(String::as_str).collect();
                write!(
                    f,
                    "spawn {pid} ppid={ppid} pgid={pgid} sid={sid} {:?}",
                    cmd.join(" ")
                )?;
                if let Some(c) = cell {
                    match c.seq {
                        Some(seq) => write!(f, " cell={seq}")?,
                        None => write!(f, " cell={}", c.cell_dir)?,
                    }
                }
                Ok(())
            }
            ProcEventKind::Exit { pid, status } => write!(f, "exit {pid} {status}"),
            ProcEventKind::Reap { pid, by } => write!(f, "reap {pid} by {by}"),
            ProcEventKind::Reparent { pid, to } => write!(f, "reparent {pid} to {to}"),
            ProcEventKind::Signal {
                from,
                to,
                signal,
                effect,
            } => write!(f, "signal {signal} {from}->{to} {effect}"),
        }
    }
}

impl fmt::Display for ProcEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.at, self.kind)
    }
}

impl SimOs {
    pub(crate) fn log(&mut self, kind: ProcEventKind) {
        self.events.push(ProcEvent { at: self.now, kind });
    }
}
