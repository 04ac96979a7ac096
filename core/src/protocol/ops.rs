//! Agent operations. Every op is idempotent, so the client may resend any of
//! them after a transport error: submit by request id, wait by cursor,
//! cancel by tombstone, the rest trivially.

use crate::bytes::Bytes;
use crate::ids::{CellSeq, KernelName, RequestId};
use serde::{Deserialize, Serialize};
use std::fmt;

/// The language of a kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Lang {
    /// Each cell is a fresh POSIX shell that restores and saves cwd + exports.
    Shell,
    /// One persistent `python3` interpreter per kernel.
    Python,
}

impl fmt::Display for Lang {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Lang::Shell => "shell",
            Lang::Python => "python",
        })
    }
}

/// Who a kernel daemon is: enough to tell it from a process that reused its
/// pid, or from a daemon of an earlier boot or an earlier spawn.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Identity {
    /// `/proc/sys/kernel/random/boot_id` of the sandbox at spawn.
    pub boot_id: String,
    /// The daemon's pid.
    pub pid: u32,
    /// The daemon's start time (clock ticks since boot, field 22 of stat).
    pub starttime: u64,
    /// A random value chosen by the client, carried in the daemon's argv.
    pub nonce: String,
}

/// One cell as submitted: persisted by the client before the first send.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Submission {
    /// The client's id for this piece of work.
    pub request_id: RequestId,
    /// The cell's place in the kernel.
    pub seq: CellSeq,
    /// The code, byte for byte.
    pub code: Bytes,
    /// The agent cancels the cell after this many milliseconds, if set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// A cell named by its place and the id its submission carries: a
/// submission under another id in that place is not this cell.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SentCell {
    /// Its place in the kernel.
    pub seq: CellSeq,
    /// The id of its submission.
    pub request_id: RequestId,
}

/// An operation the agent performs in one exec call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    /// Put the agent binary (stdin) at its content-addressed path.
    Install {
        /// Hex SHA-256 of the binary, part of its path.
        hash: String,
        /// Its size in bytes, checked after the copy.
        size: u64,
    },
    /// Is the kernel's daemon the one we spawned?
    Probe {
        /// The kernel.
        kernel: KernelName,
        /// The identity recorded at spawn, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        expect: Option<Identity>,
        /// Cells the client sent to that daemon and has no verdict on:
        /// if the daemon is gone and its files are kept, the reply says
        /// which of them it never recorded (they never ran anywhere).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        sent: Vec<SentCell>,
    },
    /// Start the kernel daemon; a live daemon with the same nonce is reused.
    Spawn {
        /// The kernel.
        kernel: KernelName,
        /// Its language.
        lang: Lang,
        /// Chosen by the client, becomes part of the identity.
        nonce: String,
        /// The daemon exits (killing what it owns) after this much idleness.
        idle_timeout_ms: u64,
        /// Grace between TERM and KILL when cancelling.
        grace_ms: u64,
    },
    /// Record a cell (O_EXCL by sequence) and wait for its journal.
    ///
    /// With `expect`, the agent first checks the daemon exactly as
    /// [`Op::Probe`] does; if it is not that daemon, nothing is recorded
    /// and the reply is [`super::Reply::IdentityMismatch`] with the verdict.
    /// Once the submission is recorded, the journals of the `ack` cells are
    /// deleted (as [`Op::Ack`] does, idempotently; a cell whose journal is
    /// not done is left alone).
    Submit {
        /// The kernel.
        kernel: KernelName,
        /// The cell.
        submission: Submission,
        /// Long-poll bound: how long to wait for the journal before replying.
        wait_ms: u64,
        /// Cells whose whole journal the client has: they may go.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        ack: Vec<CellSeq>,
        /// The daemon the client believes runs the kernel.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        expect: Option<Identity>,
    },
    /// Long-poll a cell's journal from a cursor.
    Wait {
        /// The kernel.
        kernel: KernelName,
        /// The cell.
        seq: CellSeq,
        /// The last journal entry already seen (0 = none).
        cursor: u64,
        /// Long-poll bound.
        wait_ms: u64,
        /// Answers to the cell's tool calls, written before the wait (each
        /// once, and only while the cell runs and the call is journaled).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        answers: Vec<super::calls::CallAnswer>,
    },
    /// Cancel a cell: a tombstone if it has not started, escalation if it has.
    Cancel {
        /// The kernel.
        kernel: KernelName,
        /// The cell.
        seq: CellSeq,
        /// The request the client submits the cell as: the tombstone it
        /// lays before the submission says whose it is, so that another
        /// client record's cell of that number is not cancelled by it
        /// (absent from older clients: the number's cell, whoever's).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request: Option<RequestId>,
    },
    /// Stop the daemon and everything it owns; remove the kernel's state.
    Shutdown {
        /// The kernel.
        kernel: KernelName,
        /// The nonce of the daemon the client shuts down, when it knows
        /// one. A kernel that runs under another nonce now was spawned
        /// again since: this shutdown arrived late (a channel request run
        /// after the client's one-shot retry, a held exec) and leaves it
        /// alone. Without it, whatever runs the kernel is shut down.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        nonce: Option<String>,
        /// The nonce of a spawn the client sent and never had answered:
        /// recorded as shut with the kernel, so that a copy of it that
        /// arrives later (a channel request read late) starts no daemon
        /// after the shutdown.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        unanswered_spawn: Option<String>,
    },
    /// Remove kernel directories whose daemon is gone.
    Gc,
    /// The client has every entry of this cell: its journal may go.
    Ack {
        /// The kernel.
        kernel: KernelName,
        /// The cell.
        seq: CellSeq,
    },
    /// Read the kernel's background log: what its cells' processes printed
    /// after their cell resolved.
    Logs {
        /// The kernel.
        kernel: KernelName,
    },
    /// Not an agent op: run a cell's code once as a plain exec of the
    /// backend (`sh -c` / `python3 -c`), when no kernel can start there
    /// (fail open). No journal, no state, no resume: its output is the
    /// exec's, its outcome the exec's status.
    Plain {
        /// How to run the code.
        lang: Lang,
        /// The code.
        code: Bytes,
    },
}

/// The kind of an [`Op`], for matching replies and for traces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    /// [`Op::Install`]
    Install,
    /// [`Op::Probe`]
    Probe,
    /// [`Op::Spawn`]
    Spawn,
    /// [`Op::Submit`]
    Submit,
    /// [`Op::Wait`]
    Wait,
    /// [`Op::Cancel`]
    Cancel,
    /// [`Op::Shutdown`]
    Shutdown,
    /// [`Op::Gc`]
    Gc,
    /// [`Op::Ack`]
    Ack,
    /// [`Op::Logs`]
    Logs,
    /// [`Op::Plain`]
    Plain,
}

impl Op {
    /// What kind of op this is.
    pub fn kind(&self) -> OpKind {
        match self {
            Op::Install { .. } => OpKind::Install,
            Op::Probe { .. } => OpKind::Probe,
            Op::Spawn { .. } => OpKind::Spawn,
            Op::Submit { .. } => OpKind::Submit,
            Op::Wait { .. } => OpKind::Wait,
            Op::Cancel { .. } => OpKind::Cancel,
            Op::Shutdown { .. } => OpKind::Shutdown,
            Op::Gc => OpKind::Gc,
            Op::Ack { .. } => OpKind::Ack,
            Op::Logs { .. } => OpKind::Logs,
            Op::Plain { .. } => OpKind::Plain,
        }
    }

    /// The kernel the op is about, if any.
    pub fn kernel(&self) -> Option<&KernelName> {
        match self {
            Op::Probe { kernel, .. }
            | Op::Spawn { kernel, .. }
            | Op::Submit { kernel, .. }
            | Op::Wait { kernel, .. }
            | Op::Cancel { kernel, .. }
            | Op::Shutdown { kernel, .. }
            | Op::Ack { kernel, .. }
            | Op::Logs { kernel } => Some(kernel),
            Op::Install { .. } | Op::Gc | Op::Plain { .. } => None,
        }
    }
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        f.write_str(&s)
    }
}

/// What the client writes to the agent's stdin: the op with the protocol
/// version and an id that the reply must echo.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope {
    /// Protocol version ([`super::PROTOCOL_VERSION`]).
    pub v: u32,
    /// Echoed in the reply so a stale reply is never taken for a fresh one.
    pub id: u64,
    /// The operation.
    pub op: Op,
}
