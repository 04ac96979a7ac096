//! [`KernelRecord`]: what the driver persists so that a new client process
//! can resume a kernel and its unresolved cells without submitting again.

use crate::bytes::Bytes;
use crate::ids::{CellSeq, KernelName, RequestId};
use crate::protocol::{CallReply, Identity, Lang};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A kernel as persisted: written (via [`super::Effect::Persist`]) before
/// the first submit of each cell, whenever a cell's cursor moves and when
/// a cell resolves.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelRecord {
    /// The kernel.
    pub kernel: KernelName,
    /// Its language.
    pub lang: Lang,
    /// The daemon's identity, once spawned.
    pub identity: Option<Identity>,
    /// The sequence number the next cell gets.
    pub next_seq: u64,
    /// Cells not yet acknowledged: unresolved, or resolved as `unknown`.
    pub cells: Vec<CellRecord>,
    /// Cells whose whole journal the client has delivered but whose
    /// acknowledgement the agent has not confirmed yet: the next submit
    /// carries them (or, when the kernel stays idle, acks of their own).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub acked: Vec<CellSeq>,
    /// The kernel is being shut down (by request or by the reaper) and the
    /// agent has not answered yet: a new client process sends the shutdown
    /// again ([`super::Client::resume`]) instead of leaving the daemon and
    /// its files to outlive the kernel. The record is forgotten once the
    /// shutdown is answered.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shutting_down: bool,
    /// The nonce of a spawn sent and not answered: a new client process
    /// spawns under it, never under a new one, so a late copy of that
    /// spawn cannot start a daemon the client does not know of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spawning: Option<String>,
}

/// One unacknowledged cell as persisted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CellRecord {
    /// Its place in the kernel.
    pub seq: CellSeq,
    /// The id its submission carries (the same on every resend).
    pub request_id: RequestId,
    /// The code.
    pub code: Bytes,
    /// Its timeout, if any.
    pub timeout_ms: Option<u64>,
    /// The last journal entry delivered (0 = none).
    pub cursor: u64,
    /// A cancel was asked for (it is re-sent on resume).
    pub cancel_requested: bool,
    /// The client's timeout fired, and asked for that cancel: the cell
    /// ends timed out, also for a client process that resumes it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub timed_out: bool,
    /// A submit may have been sent: resume waits, it never submits again.
    pub submitted: bool,
    /// The cell's tool calls seen so far, by id: a resumed client emits
    /// the unanswered ones again and re-sends stored answers instead of
    /// asking the frontend twice.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub calls: BTreeMap<String, CallRecord>,
}

/// One tool call of a cell as persisted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallRecord {
    /// The tool.
    pub name: String,
    /// Its arguments.
    pub args: serde_json::Value,
    /// The frontend's answer, kept before it is sent, until it reached
    /// the sandbox.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<CallReply>,
    /// The journal says the answer reached the sandbox: not sent again
    /// (and no longer kept).
    #[serde(default)]
    pub delivered: bool,
}

impl CallRecord {
    /// Nobody answered it yet: the frontend is (or will be) asked.
    pub fn unanswered(&self) -> bool {
        self.answer.is_none() && !self.delivered
    }
}
