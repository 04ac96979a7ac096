//! Streaming execs: a long-lived command on the sandbox whose stdin and
//! stdout stay open, which is what the channel rides on. Each backend that
//! can keep a command running says how ([`StreamExec`]); the channel's
//! driver does the rest.
//!
//! - `local`: the command is a child of this process; the backend's
//!   injected latency is slept before it starts and added to every write
//!   (a frame arrives one round trip after it was sent, as a one-shot
//!   exec's command starts one round trip after the call);
//! - `docker`: an exec of the Engine API with its pipes attached
//!   ([`crate::docker`]): no process on this machine per stream;
//! - `ssh`: a session on the host's one multiplexed connection
//!   ([`crate::ssh`]): no process on this machine per stream;
//! - `modal`: `Sandbox.exec` through the transport's bridge
//!   (`crate::modal`), its pipes carried as JSON lines.
//!
//! A local command runs in its own process group (a Ctrl-C at the
//! terminal is for tether) and is killed when the stream is dropped; an
//! ssh session is closed (the remote command sees its stdin end).

use crate::docker::DockerTransport;
use crate::local::LocalTransport;
use crate::ssh::SshTransport;
use crate::transport::{OpKind, TransportError, TransportErrorKind};
use bollard::container::LogOutput;
use bollard::errors::Error as EngineError;
use futures_util::StreamExt;
use std::future::Future;
use std::pin::Pin;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, DuplexStream};
use tokio::process::{Child, Command};

/// A running command with its pipes.
pub struct ChannelStream {
    /// Its stdin.
    pub stdin: Box<dyn AsyncWrite + Send + Unpin>,
    /// Its stdout.
    pub stdout: Box<dyn AsyncRead + Send + Unpin>,
    /// Its stderr (what it says when it fails to start).
    pub stderr: Box<dyn AsyncRead + Send + Unpin>,
    /// The process on this machine that is the stream (the command
    /// itself, or the Modal bridge that carries it); none over ssh and
    /// docker, whose streams are sessions on a connection.
    pub pid: Option<u32>,
    /// Owns the stream: dropping it kills the local process or closes
    /// the ssh session or the docker exec's connection (nothing for a Modal stream: dropping its stdin
    /// ends it, and the bridge is shared).
    pub keep: Box<dyn std::any::Any + Send>,
    /// Added before every write (injected latency).
    pub send_delay: Duration,
}

impl std::fmt::Debug for ChannelStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelStream")
            .field("pid", &self.pid)
            .field("send_delay", &self.send_delay)
            .finish()
    }
}

/// The future [`StreamExec::open_stream`] returns.
pub type OpenFuture<'a> =
    Pin<Box<dyn Future<Output = Result<ChannelStream, TransportError>> + Send + 'a>>;

/// A backend that can keep a command running with open pipes.
pub trait StreamExec: Send + Sync + 'static {
    /// Starts `argv` on the sandbox. An error means it could not be
    /// started; a command that starts and fails ends its stdout instead.
    fn open_stream(&self, argv: Vec<String>) -> OpenFuture<'_>;

    /// Whether execs of `kind` have an injected slow start (a test knob):
    /// such ops go as one-shot execs, where the slow start happens.
    fn slow_start(&self, kind: OpKind) -> bool {
        let _ = kind;
        false
    }
}

impl StreamExec for LocalTransport {
    fn open_stream(&self, argv: Vec<String>) -> OpenFuture<'_> {
        let latency = self.options().latency;
        Box::pin(async move {
            if !latency.is_zero() {
                tokio::time::sleep(latency).await;
            }
            let Some((program, args)) = argv.split_first() else {
                return Err(io_error("empty argv".into()));
            };
            let mut command = Command::new(program);
            command.args(args);
            spawn(command, latency)
                .map_err(|e| io_error(format!("cannot start the channel ({program}): {e}")))
        })
    }

    fn slow_start(&self, kind: OpKind) -> bool {
        self.options().delays.contains_key(&kind)
    }
}

impl StreamExec for DockerTransport {
    fn open_stream(&self, argv: Vec<String>) -> OpenFuture<'_> {
        Box::pin(async move {
            let attached = self.start(&argv).await?;
            let (stdout, stderr, pump) = demultiplex(attached.output);
            Ok(ChannelStream {
                stdin: Box::new(attached.input),
                stdout: Box::new(stdout),
                stderr: Box::new(stderr),
                pid: None,
                keep: Box::new(AbortOnDrop(pump)),
                send_delay: Duration::ZERO,
            })
        })
    }
}

/// Splits an exec's output frames into a stdout and a stderr pipe, each
/// ending when the exec's output ends (an error ends them too: the
/// channel sees its stream end and breaks).
fn demultiplex(
    mut output: std::pin::Pin<
        Box<dyn futures_util::Stream<Item = Result<LogOutput, EngineError>> + Send>,
    >,
) -> (DuplexStream, DuplexStream, tokio::task::JoinHandle<()>) {
    const PIPE: usize = 1 << 16;
    let (mut out_w, out_r) = tokio::io::duplex(PIPE);
    let (mut err_w, err_r) = tokio::io::duplex(PIPE);
    let pump = tokio::spawn(async move {
        while let Some(Ok(frame)) = output.next().await {
            let written = match frame {
                LogOutput::StdOut { message } | LogOutput::Console { message } => {
                    out_w.write_all(&message).await
                }
                LogOutput::StdErr { message } => err_w.write_all(&message).await,
                LogOutput::StdIn { .. } => Ok(()),
            };
            if written.is_err() {
                break; // the channel dropped its reader
            }
        }
    });
    (out_r, err_r, pump)
}

/// Ends the exec's connection when the stream is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl StreamExec for SshTransport {
    fn open_stream(&self, argv: Vec<String>) -> OpenFuture<'_> {
        Box::pin(async move {
            let mut session = self.start(&argv).await?;
            let missing = || io_error("a pipe of the channel's ssh session is missing".into());
            let stdin = session.stdin().take().ok_or_else(missing)?;
            let stdout = session.stdout().take().ok_or_else(missing)?;
            let stderr = session.stderr().take().ok_or_else(missing)?;
            Ok(ChannelStream {
                stdin: Box::new(stdin),
                stdout: Box::new(stdout),
                stderr: Box::new(stderr),
                pid: None,
                keep: Box::new(session),
                send_delay: Duration::ZERO,
            })
        })
    }
}

fn spawn(mut command: Command, send_delay: Duration) -> std::io::Result<ChannelStream> {
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child: Child = command.spawn()?;
    let missing = || std::io::Error::other("a pipe of the channel's command is missing");
    let stdin = child.stdin.take().ok_or_else(missing)?;
    let stdout = child.stdout.take().ok_or_else(missing)?;
    let stderr = child.stderr.take().ok_or_else(missing)?;
    Ok(ChannelStream {
        stdin: Box::new(stdin),
        stdout: Box::new(stdout),
        stderr: Box::new(stderr),
        pid: child.id(),
        keep: Box::new(child),
        send_delay,
    })
}

fn io_error(detail: String) -> TransportError {
    TransportError {
        kind: TransportErrorKind::Io,
        detail,
    }
}
