//! Replies from the agent: one JSON line per exec, echoing the op's id.

use super::journal::JournalEntry;
use super::ops::Identity;
use crate::bytes::Bytes;
use crate::ids::{CellSeq, KernelName};
use serde::{Deserialize, Serialize};
use std::fmt;

/// How a cell ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "outcome")]
pub enum CellOutcome {
    /// The code ran to its end and succeeded.
    Ok,
    /// The code failed without an exit status of its own: a Python
    /// exception, a shell killed by a signal, a cell the agent refused.
    Error {
        /// What went wrong, for a person.
        message: String,
    },
    /// The code ended with status `code` (not 0 for a shell): its last
    /// command's status or its `exit N` / `sys.exit(N)`. A definitive
    /// completion; the kernel's state is kept.
    Exit {
        /// The exit status.
        code: i32,
    },
    /// The cell was cancelled (by request, or it never started).
    Cancelled,
    /// The cell ran past its timeout and was cancelled.
    TimedOut,
    /// The client cannot know: the sandbox is unreachable or the deadline
    /// passed. The record is kept so the cell can be resumed later.
    Unknown {
        /// Why the outcome is not known.
        reason: String,
    },
}

impl fmt::Display for CellOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CellOutcome::Ok => f.write_str("ok"),
            CellOutcome::Error { message } => write!(f, "error: {message}"),
            CellOutcome::Exit { code } => write!(f, "exit {code}"),
            CellOutcome::Cancelled => f.write_str("cancelled"),
            CellOutcome::TimedOut => f.write_str("timed out"),
            CellOutcome::Unknown { reason } => write!(f, "unknown: {reason}"),
        }
    }
}

/// What a probe found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "status")]
pub enum ProbeStatus {
    /// The daemon we spawned is running.
    Alive {
        /// Its identity, as checked.
        identity: Identity,
    },
    /// There was a daemon and it is gone.
    Dead {
        /// What was seen (for the user and the oracle).
        evidence: String,
    },
    /// Something else holds the place: the pid was reused, the boot or the
    /// nonce differ.
    Replaced {
        /// What was seen.
        evidence: String,
    },
    /// The kernel was never spawned here (no expectation was given).
    Absent,
}

/// What a submit found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Acceptance {
    /// Recorded now.
    Accepted,
    /// Recorded before under the same request id: not run a second time.
    AlreadyAccepted,
    /// A cancel tombstone was there first: the cell will never run.
    CancelledBeforeStart,
}

/// What a cancel found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CancelState {
    /// Not started yet: a tombstone now stops it from ever starting.
    Tombstoned,
    /// Running: the daemon escalates TERM → KILL over the cell's processes.
    Escalating,
    /// Already resolved; nothing to do.
    AlreadyDone,
}

/// Journal entries after a cursor.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalBatch {
    /// Entries with `n > cursor`, in order.
    pub entries: Vec<JournalEntry>,
    /// True when the journal holds `done`: nothing more will come.
    pub done: bool,
}

/// A successful reply.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    /// The agent binary is in place.
    Installed {
        /// Where.
        path: String,
    },
    /// The probe's verdict.
    Probed {
        /// What was found.
        status: ProbeStatus,
        /// Of the probe's `sent` cells, those the expected daemon never
        /// recorded, when it is gone and its kernel's files are kept (the
        /// same boot, its spawn's config): they never ran, and may go to
        /// the next daemon. Empty when the daemon is alive, or its files
        /// are gone (then nothing can tell).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        never_recorded: Vec<CellSeq>,
    },
    /// The daemon runs.
    Spawned {
        /// Its identity.
        identity: Identity,
        /// False when a live daemon with the same nonce was reused.
        fresh: bool,
        /// For a fresh daemon: the highest cell number its kernel used
        /// before it (0: none), cells earlier daemons ran, whose state went
        /// with them. A client that never sent the number finds out here
        /// that the kernel had a state it lost (a second frontend).
        #[serde(default, skip_serializing_if = "is_zero")]
        ran_before: u64,
    },
    /// The cell is recorded (or was already).
    Submitted {
        /// What happened to the submission.
        acceptance: Acceptance,
        /// The journal so far.
        batch: JournalBatch,
    },
    /// Journal entries after the cursor.
    Waited {
        /// The entries.
        batch: JournalBatch,
    },
    /// The cancel is recorded.
    Cancelled {
        /// What it found.
        state: CancelState,
    },
    /// The kernel is gone.
    ShutDown {
        /// How many processes had to be killed.
        killed: u32,
    },
    /// Stale kernels removed.
    Collected {
        /// Their names.
        removed: Vec<KernelName>,
    },
    /// The journal is deleted.
    Acked,
    /// The kernel's background log ([`crate::agent::background`]).
    Logs {
        /// Its bytes, exactly (empty when nothing was logged).
        data: Bytes,
    },
    /// A submit's `expect` did not match the kernel's daemon: nothing was
    /// recorded by this submit. `status` is what a probe with the same
    /// expectation says (dead, replaced, or dead because the kernel's
    /// directory is gone).
    IdentityMismatch {
        /// The probe's verdict.
        status: ProbeStatus,
        /// The cell's sequence number already holds this very request (an
        /// earlier send recorded it in the daemon that is now gone).
        recorded: bool,
        /// The expected daemon's kernel files are still here (the same
        /// boot, the config its spawn wrote): a cell any send recorded
        /// would still be (only its client's ack or a withdrawal removes a
        /// submission), so `recorded: false` also says that no earlier
        /// unanswered send ran it here. False when the files are gone or
        /// another daemon's, and from an agent that predates the field:
        /// an earlier unanswered send may have run the cell.
        #[serde(default)]
        files_kept: bool,
    },
}

/// The kind of failure the agent reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The request could not be read.
    BadRequest,
    /// The agent speaks another protocol version.
    UnsupportedVersion,
    /// A different request already holds this cell's sequence number.
    Conflict,
    /// The kernel directory does not exist.
    NoSuchKernel,
    /// The cell does not exist.
    NoSuchCell,
    /// The kernel's daemon is not running.
    KernelDead,
    /// The sandbox is not x86_64.
    WrongArch,
    /// The agent binary arrived damaged.
    BadInstall,
    /// `python3` is not on the sandbox's PATH.
    PythonMissing,
    /// The agent cannot be put in place or cannot run there: the root is
    /// not writable, or its filesystem is mounted `noexec`.
    CannotInstall,
    /// A file or process operation failed.
    Io,
}

/// A failure reported by the agent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentError {
    /// What kind.
    pub kind: ErrorKind,
    /// Details for a person.
    pub detail: String,
    /// With a [`ErrorKind::Conflict`] on a submit: the lowest sequence
    /// number the kernel has never used (its earlier cells ran under
    /// another client's record), so the client can continue from there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_seq: Option<crate::ids::CellSeq>,
}

impl fmt::Display for AgentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.kind, self.detail)
    }
}

/// The line the agent prints: exactly one of `reply` and `error`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplyEnvelope {
    /// Protocol version.
    pub v: u32,
    /// The id of the op this answers.
    pub id: u64,
    /// The reply, on success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<Reply>,
    /// The error, on failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<AgentError>,
}

impl ReplyEnvelope {
    /// The line the agent prints for this envelope: its JSON, sealed
    /// with a checksum ([`super::seal`]), and a newline.
    pub fn to_line(&self) -> Vec<u8> {
        // Serialising plain data with string keys cannot fail; an empty
        // object would be refused by the reader, never accepted.
        super::seal::seal(&serde_json::to_vec(self).unwrap_or_default())
    }
}

impl Reply {
    /// Does this reply answer an op of `kind`?
    pub fn answers(&self, kind: super::OpKind) -> bool {
        use super::OpKind as K;
        matches!(
            (self, kind),
            (Reply::Installed { .. }, K::Install)
                | (Reply::Probed { .. }, K::Probe)
                | (Reply::Spawned { .. }, K::Spawn)
                | (Reply::Submitted { .. }, K::Submit)
                | (Reply::Waited { .. }, K::Wait)
                | (Reply::Cancelled { .. }, K::Cancel)
                | (Reply::ShutDown { .. }, K::Shutdown)
                | (Reply::Collected { .. }, K::Gc)
                | (Reply::Acked, K::Ack)
                | (Reply::Logs { .. }, K::Logs)
                | (Reply::IdentityMismatch { .. }, K::Submit)
        )
    }
}

/// For `skip_serializing_if`: a zero is the field's absence.
#[allow(clippy::trivially_copy_pass_by_ref)] // serde passes a reference
fn is_zero(n: &u64) -> bool {
    *n == 0
}
