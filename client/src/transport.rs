//! The one thing a sandbox must offer: run a command to completion.
//!
//! A [`Transport`] takes an argv and stdin bytes and returns stdout, stderr
//! and the exit status ([`ExecOutput`]), or a [`TransportError`] when it
//! cannot say what happened (unreachable, timed out, broken pipe). Every
//! backend (local processes, docker, ssh, Modal, the simulation's
//! `turmoil::net` exec server) implements this trait; everything above it —
//! rendering ops, parsing replies, retries — is shared.

use std::future::Future;
use std::pin::Pin;

pub use tether_core::client::{TransportError, TransportErrorKind};
pub use tether_core::protocol::{ExecOutput, OpKind};

/// The agent op an exec call carries, as the client rendered it: what a
/// transport, a fault injector or a trace may know about the call without
/// parsing its argv or stdin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExecOp {
    /// The exec's id (echoed in the agent's reply).
    pub id: u64,
    /// Which op.
    pub kind: OpKind,
}

/// One exec call: the command (no shell unless `argv` asks for one), the
/// bytes to write to its stdin before closing it, and the agent op it
/// carries, if it is one.
#[derive(Clone, PartialEq, Eq)]
pub struct ExecRequest {
    /// The command and its arguments.
    pub argv: Vec<String>,
    /// Written to the command's stdin, which is then closed.
    pub stdin: Vec<u8>,
    /// The agent op (`None` for any other command).
    pub op: Option<ExecOp>,
}

impl ExecRequest {
    /// A plain command with an empty stdin, no agent op.
    pub fn command(argv: Vec<String>) -> ExecRequest {
        ExecRequest {
            argv,
            stdin: Vec::new(),
            op: None,
        }
    }
}

impl std::fmt::Debug for ExecRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecRequest")
            .field("argv", &self.argv)
            .field("stdin_len", &self.stdin.len())
            .field("op", &self.op)
            .finish()
    }
}

/// The future an exec call returns.
pub type ExecFuture<'a> =
    Pin<Box<dyn Future<Output = Result<ExecOutput, TransportError>> + Send + 'a>>;

/// A way to run commands to completion on a sandbox.
///
/// Implementations must not retry on their own (the client state machine
/// decides what is safe to resend) and must report "I don't know whether the
/// command ran" as a [`TransportError`], never as an [`ExecOutput`]. A
/// command that ran and failed (including "not found", exit 127) is an
/// [`ExecOutput`]. Dropping the future abandons the call.
pub trait Transport: Send + Sync + 'static {
    /// Runs `req` to completion.
    fn exec(&self, req: ExecRequest) -> ExecFuture<'_>;

    /// A short description for messages, e.g. `local (latency 50ms)`.
    fn describe(&self) -> String;

    /// How many local processes this transport started to reach the
    /// sandbox: ssh masters (each a new connection), Modal bridges (each
    /// a new Python importing Modal's client). What a warm cell should
    /// never pay; 0 for backends that start none.
    fn helpers_started(&self) -> u64 {
        0
    }
}
