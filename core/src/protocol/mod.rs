//! The wire protocol between the client and the agent: one agent operation
//! per exec call, its reply as one JSON line on stdout, and the per-cell
//! journal those replies carry.
//!
//! - [`calls`]: tool calls from a cell (requests, answers, limits);
//! - [`ops`]: the operations and what they carry;
//! - [`reply`]: replies, agent errors, probe results, cell outcomes;
//! - [`journal`]: journal entries and the tolerant journal reader;
//! - [`render`]: an op to argv + stdin bytes (pure);
//! - [`install`]: the install step's refusals, typed (what the install
//!   script prints);
//! - [`parse`]: exec output to a typed reply or a typed error (total);
//! - [`seal`]: the checksum that makes a changed or cut reply line an error.

pub mod calls;
pub mod install;
pub mod journal;
pub mod ops;
pub mod parse;
pub mod render;
pub mod reply;
pub mod seal;

pub use calls::{CallAnswer, CallReply, CallRequest};
pub use install::InstallRefusal;
pub use journal::{parse_journal, EntryKind, JournalEntry, JournalRead, Stream};
pub use ops::{Envelope, Identity, Lang, Op, OpKind, SentCell, Submission};
pub use parse::{parse_reply, ExecOutput, ReplyError};
pub use render::{render, AgentLocation, Rendered, StdinSource};
pub use reply::{
    Acceptance, AgentError, CancelState, CellOutcome, ErrorKind, JournalBatch, ProbeStatus, Reply,
    ReplyEnvelope,
};

/// The protocol version this build speaks. Bumped on any incompatible change.
pub const PROTOCOL_VERSION: u32 = 1;
