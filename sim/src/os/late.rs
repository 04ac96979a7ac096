//! Ground truth of the background log: what the background children of
//! [`tether_scenarios::workload::Step::LatePrint`] wrote, and whether the
//! cell whose pipe they wrote to had resolved by then (its shim decided
//! the result: from then on the pipe's bytes are the kernel's background
//! log, before it they are the cell's output).

use super::process::{CellRef, Fd, Program};
use super::SimOs;
use tether_core::agent::Pid;
use tether_core::protocol::Stream;
use tether_core::time::Timestamp;

/// One write of a late printer that its pipe took.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LateWrite {
    /// The cell the printer was born from.
    pub cell: CellRef,
    /// When (the sandbox's clock).
    pub at: Timestamp,
    /// To which stream of the cell.
    pub stream: Stream,
    /// What.
    pub data: Vec<u8>,
    /// The cell had resolved: the bytes belong in the background log.
    pub background: bool,
}

impl SimOs {
    /// `pid`, a late printer, is about to write `data` to `fd`: notes it
    /// if the pipe takes it (a pipe nobody reads kills the writer instead).
    pub(crate) fn note_late_write(&mut self, pid: Pid, fd: Fd, stream: Stream, data: &[u8]) {
        let Fd::Pipe(id) = fd else { return };
        if !self.pipes.get(&id).is_some_and(|p| p.reader_open) || data.is_empty() {
            return;
        }
        let Some(cell) = self.procs.get(&pid).and_then(|p| p.origin.clone()) else {
            return;
        };
        let background = self.procs.values().any(|p| {
            p.alive()
                && p.reads.contains(&id)
                && matches!(&p.program, Program::Shim(s) if s.resolved())
        });
        self.late_writes.push(LateWrite {
            cell,
            at: self.now,
            stream,
            data: data.to_vec(),
            background,
        });
    }

    /// Every write of a late printer, in order.
    pub fn late_writes(&self) -> &[LateWrite] {
        &self.late_writes
    }
}
