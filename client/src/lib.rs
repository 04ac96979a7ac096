//! # tether (client)
//!
//! The tokio side of tether: everything that does IO on the client host.
//! All decisions live in [`tether_core::client::Client`]; this crate moves
//! bytes and time for it.
//!
//! - [`transport`]: the [`transport::Transport`] trait — run a command to
//!   completion on a sandbox;
//! - [`local`]: the `local` transport (real processes, injected latency);
//! - [`docker`], [`ssh`], [`modal`]: the remote transports (`docker exec`,
//!   sessions on one OpenSSH connection per host (`ssh_master`), Modal's
//!   Python client through one long-lived bridge process per transport);
//! - [`channel`]: agent ops over one long-lived, multiplexed exec of the
//!   agent, one-shot execs whenever it is not open;
//! - [`persist`]: `tether mux`, the background process that keeps a
//!   sandbox's channel open between `tether` commands, and the transport
//!   that reaches it;
//! - [`backend`]: `--backend` specs (`local?latency=50ms`) to transports;
//! - [`driver`]: [`driver::Driver`], the tokio loop around the state machine;
//! - [`records`]: persisted kernel records (files, or memory for the sim);
//! - [`agent_bin`]: finding and hashing the agent binary to ship;
//! - [`duration`]: `500ms` / `30s` / `2m` on the command line;
//! - [`events`]: events as JSON lines and as messages for a person;
//! - [`cli`]: the `tether` command line and its exit codes;
//! - [`tools`]: the CLI's tool handler (`--tools CMD`);
//! - [`bench`]: the hidden `tether bench` measurements.

pub mod agent_bin;
pub mod backend;
pub mod bench;
pub mod channel;
pub mod cli;
pub mod docker;
pub mod driver;
pub mod duration;
pub mod events;
pub mod local;
pub mod modal;
pub mod persist;
pub mod records;
pub mod ssh;
mod ssh_master;
mod subprocess;
pub mod tools;
pub mod transport;

pub use driver::{CancelHandle, Driver, DriverError, NewCell, ToolCall, ToolFuture, ToolHandler};
pub use records::{FileStore, MemoryStore, RecordStore};
pub use transport::{ExecRequest, Transport};
