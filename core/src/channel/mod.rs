//! The channel: one long-lived exec of the agent per sandbox
//! (`tether-agent channel --root R`) whose stdin and stdout carry framed
//! op requests and replies, several in flight at once, so that a warm op
//! costs a round trip on an open stream instead of a new exec.
//!
//! The client state machine does not know about it: an op is still a
//! request with a deadline that ends in a reply or a transport error. The
//! channel is a transport that multiplexes those requests and falls back
//! to one-shot execs whenever it is not open.
//!
//! - [`frame`]: the framing both sides speak (`KIND ID LEN\n` + payload);
//! - [`mux`]: the client side's decisions ([`Mux`]): when to open, which
//!   op goes on the channel, when a silent channel counts as stalled, what
//!   a break does to the ops in flight, the reopen backoff;
//! - [`server`]: the agent side's decisions ([`Server`]): the hello, one
//!   op run per request frame, replies by frame id, the heartbeat.

pub mod frame;
pub mod mux;
pub mod server;

pub use frame::{Decoder, Frame, FrameError, FrameKind};
pub use mux::{Mux, MuxConfig, MuxOutput, Route, StreamId};
pub use server::{Server, ServerOutput};

use crate::protocol::AgentLocation;
use std::time::Duration;

/// How often the agent sends a [`FrameKind::Beat`] on an open channel.
pub const HEARTBEAT: Duration = Duration::from_secs(1);

/// The command that opens the channel on the sandbox.
pub fn channel_argv(location: &AgentLocation) -> Vec<String> {
    vec![
        location.agent_path(),
        "channel".into(),
        "--root".into(),
        location.root.clone(),
    ]
}
