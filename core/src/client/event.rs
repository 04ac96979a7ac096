//! What the client hands out: [`Effect`]s for the driver, [`Event`]s for the
//! frontend, and the types they name ([`CellKey`], [`TransportError`]).

use super::record::KernelRecord;
use crate::bytes::Bytes;
use crate::ids::{CellSeq, ExecId, KernelName};
pub use crate::protocol::CallReply;
use crate::protocol::{Acceptance, CellOutcome, Identity, Op, Stream};
use crate::time::Timestamp;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Names one cell: its kernel and its place in it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct CellKey {
    /// The kernel.
    pub kernel: KernelName,
    /// The cell's sequence number in that kernel.
    pub seq: CellSeq,
}

impl fmt::Display for CellKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}", self.kernel, self.seq)
    }
}

/// Work for the driver, in the order it must be carried out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Run `op` on the sandbox (render it with
    /// [`crate::protocol::render`]`(id.0, …)`) and hand the result to
    /// [`super::Client::handle_exec`]; give up at `deadline` with
    /// [`TransportErrorKind::TimedOut`].
    Exec {
        /// Matches the result to this effect; also the reply's envelope id.
        id: ExecId,
        /// The operation.
        op: Op,
        /// When the driver stops waiting for it.
        deadline: Timestamp,
    },
    /// Write this record durably before carrying out any later effect.
    Persist(KernelRecord),
    /// The kernel's record may be deleted (shut down or evicted).
    Forget(KernelName),
}

/// What the frontend sees.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// The kernel's daemon runs and cells can go to it.
    KernelReady {
        /// The kernel.
        kernel: KernelName,
        /// Its daemon.
        identity: Identity,
        /// True when it was started now (its state is empty).
        fresh: bool,
    },
    /// The kernel's state is gone: a probe found its daemon dead or
    /// replaced. Only ever emitted with that evidence.
    StateLost {
        /// The kernel.
        kernel: KernelName,
        /// What the probe saw.
        evidence: String,
    },
    /// Something else holds the kernel's place (pid reused, another boot or
    /// nonce); follows the [`Event::StateLost`] it explains.
    KernelReplaced {
        /// The kernel.
        kernel: KernelName,
        /// What the probe saw.
        evidence: String,
    },
    /// The agent recorded the cell's submission.
    CellAccepted {
        /// The cell.
        cell: CellKey,
        /// What the agent found.
        acceptance: Acceptance,
    },
    /// Output of a cell, in journal order, exactly once per client.
    Output {
        /// The cell.
        cell: CellKey,
        /// The journal entry's sequence number.
        n: u64,
        /// Which stream.
        stream: Stream,
        /// The bytes, exactly.
        data: Bytes,
    },
    /// Output past the agent's cap was dropped.
    Clipped {
        /// The cell.
        cell: CellKey,
        /// Bytes dropped.
        dropped: u64,
    },
    /// Code in the cell called a host tool and waits for the answer: give
    /// it with [`super::Client::answer_call`]. Emitted once per call and
    /// client (again by a resumed client for a call it has no answer for).
    ToolCall {
        /// The cell.
        cell: CellKey,
        /// The call's id in the cell.
        id: String,
        /// The tool.
        name: String,
        /// Its arguments.
        args: serde_json::Value,
    },
    /// The frontend's answer to a tool call, as kept (before it is sent).
    ToolReplied {
        /// The cell.
        cell: CellKey,
        /// The call.
        id: String,
        /// The answer.
        reply: CallReply,
    },
    /// The answer to a tool call reached the sandbox (its caller can
    /// read it).
    ToolAnswered {
        /// The cell.
        cell: CellKey,
        /// The call.
        id: String,
    },
    /// Processes of the cell still running when it resolved.
    Leftovers {
        /// The cell.
        cell: CellKey,
        /// Their pids.
        pids: Vec<u32>,
    },
    /// Processes of a cancelled cell that outlived KILL.
    Unkillable {
        /// The cell.
        cell: CellKey,
        /// Their pids.
        pids: Vec<u32>,
    },
    /// The cell is over (or its outcome can't be known: `unknown`).
    CellResolved {
        /// The cell.
        cell: CellKey,
        /// How it ended.
        outcome: CellOutcome,
    },
    /// The reaper shut the kernel down.
    KernelEvicted {
        /// The kernel.
        kernel: KernelName,
        /// Why (idle, or beyond the cap).
        reason: String,
    },
    /// No kernel can start on the sandbox, so the cell runs once as a
    /// plain exec (fail open, [`crate::client::Config::fallback`]): no state
    /// is kept, nothing is journaled, it cannot be resumed or cancelled.
    /// Its output and outcome follow as for any cell.
    RanWithoutKernel {
        /// The cell.
        cell: CellKey,
        /// Why no kernel could start.
        reason: String,
    },
    /// Something worth telling a person; changes nothing.
    Note {
        /// The kernel it is about, if any.
        kernel: Option<KernelName>,
        /// The note.
        text: String,
    },
}

/// Why an exec call produced no output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransportError {
    /// What kind of failure.
    pub kind: TransportErrorKind,
    /// Details for a person.
    pub detail: String,
}

/// The kind of a [`TransportError`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TransportErrorKind {
    /// The sandbox could not be reached.
    Unreachable,
    /// The exec passed its deadline.
    TimedOut,
    /// The transport failed otherwise.
    Io,
}

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            TransportErrorKind::Unreachable => "unreachable",
            TransportErrorKind::TimedOut => "timed out",
            TransportErrorKind::Io => "i/o error",
        };
        write!(f, "{kind}: {}", self.detail)
    }
}

impl std::error::Error for TransportError {}

/// Why a command was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientError {
    /// The kernel was never opened or resumed in this client.
    UnknownKernel(KernelName),
    /// The kernel is being shut down (by request or by the reaper).
    KernelShuttingDown(KernelName),
    /// The kernel keeps a cell written off as `unknown` that may still
    /// run: a new cell would queue behind it on the daemon and wait as
    /// long as it runs (for ever, for a loop nobody cancels). Resume the
    /// kernel (or cancel that cell) first, as the CLI's `tether resume`.
    UnresolvedCell {
        /// The kernel.
        kernel: KernelName,
        /// The cells it keeps, oldest first.
        seqs: Vec<crate::ids::CellSeq>,
    },
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::UnknownKernel(k) => write!(
                f,
                "kernel {k} is not open in this client: open it (with a language) or resume it from its record first"
            ),
            ClientError::KernelShuttingDown(k) => write!(
                f,
                "kernel {k} is shutting down: wait for it to finish, then open it again"
            ),
            ClientError::UnresolvedCell { kernel, seqs } => {
                let seqs: Vec<String> = seqs.iter().map(ToString::to_string).collect();
                write!(
                    f,
                    "kernel {kernel} keeps cell(s) {} whose outcome is unknown and which may still run: resume the kernel or cancel them first",
                    seqs.join(", ")
                )
            }
        }
    }
}

impl std::error::Error for ClientError {}
