//! The channel transport: agent ops over one long-lived, multiplexed exec
//! of the agent (`tether-agent channel`) when it is open, one-shot execs of
//! the backend when it is not.
//!
//! [`ChannelTransport`] is a [`Transport`] like any other: the client's
//! state machine sends it an op and gets a reply or a transport error. Every
//! decision (when to open, what goes where, when a silent channel is
//! stalled, what a break does, the reopen backoff) is
//! [`tether_core::channel::Mux`]'s; this module moves bytes and time:
//!
//! - [`stream`]: the backends' streaming execs ([`StreamExec`]);
//! - [`actor`]: the task that owns the [`tether_core::channel::Mux`], the
//!   stream and the callers waiting for replies.
//!
//! Only agent ops other than install go on the channel (an install ships
//! the binary the channel runs), and not those with an injected slow start
//! (`local?delay.submit=4s`: the slow start is an exec's); every other
//! exec goes straight to the backend.

mod actor;
pub mod stream;

use crate::backend::BackendSpec;
use crate::docker::DockerTransport;
use crate::local::LocalTransport;
use crate::modal::ModalTransport;
use crate::ssh::SshTransport;
use crate::transport::{ExecFuture, ExecOutput, ExecRequest, Transport, TransportError};
use actor::{Command, Routed};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tether_core::channel::{channel_argv, MuxConfig};
use tether_core::protocol::{render, AgentLocation, Op, OpKind};
use tokio::sync::{mpsc, oneshot};

pub use stream::{ChannelStream, StreamExec};
pub use tether_core::channel::mux::MuxStats;

/// Whether cells use the channel (`--channel`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ChannelMode {
    /// On the backends that can stream (local, docker, ssh, modal); one-shot
    /// execs on the others.
    #[default]
    Auto,
    /// Every op as a one-shot exec.
    Off,
}

/// What the channel is doing, for tests, the benchmark and `--verbose`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChannelStatus {
    /// Ops go on the channel now.
    pub open: bool,
    /// The local process of the current stream (the agent itself on the
    /// local backend, the bridge on modal; none on docker and ssh, whose
    /// streams are sessions on a connection).
    pub pid: Option<u32>,
    /// Counters.
    pub stats: MuxStats,
    /// Why it last broke.
    pub last_break: Option<String>,
}

/// The channel's knobs for a `tether` command (and the simulation, which
/// runs the same client): the channel opens at the second op only, so a
/// command whose cell resolves within its submit never starts one (it
/// would die with the process unused); one whose cell takes longer waits
/// on it.
pub fn mux_config() -> MuxConfig {
    MuxConfig {
        open_at_op: 2,
        ..MuxConfig::default()
    }
}

/// The transport for a `tether` command: `spec`'s backend with the agent
/// at `location`, behind a channel ([`mux_config`]) where the backend can
/// stream and `mode` allows.
pub fn transport_for(
    spec: &BackendSpec,
    location: &AgentLocation,
    mode: ChannelMode,
) -> Arc<dyn Transport> {
    match (mode, channel_for(spec, location, mux_config())) {
        (ChannelMode::Auto, Some(channel)) => channel,
        _ => spec.transport(),
    }
}

/// A channel over `spec`'s backend, if that backend can stream.
pub fn channel_for(
    spec: &BackendSpec,
    location: &AgentLocation,
    config: MuxConfig,
) -> Option<Arc<ChannelTransport>> {
    match spec {
        BackendSpec::Local(opts) => Some(Arc::new(ChannelTransport::new(
            Arc::new(LocalTransport::new(opts.clone())),
            location,
            config,
        ))),
        BackendSpec::Docker(opts) => Some(Arc::new(ChannelTransport::new(
            Arc::new(DockerTransport::new(opts.clone())),
            location,
            config,
        ))),
        BackendSpec::Ssh(opts) => Some(Arc::new(ChannelTransport::new(
            Arc::new(SshTransport::new(opts.clone())),
            location,
            config,
        ))),
        BackendSpec::Modal(opts) => Some(Arc::new(ChannelTransport::new(
            Arc::new(ModalTransport::new(opts.clone())),
            location,
            config,
        ))),
    }
}

/// Ops over the channel when it is open, over `inner` otherwise.
pub struct ChannelTransport {
    inner: Arc<dyn Transport>,
    opener: Arc<dyn StreamExec>,
    /// The argv of a one-shot op at this location: only such execs may
    /// go on the channel.
    op_argv: Vec<String>,
    channel_argv: Vec<String>,
    config: MuxConfig,
    actor: Mutex<Option<mpsc::UnboundedSender<Command>>>,
    status: Arc<Mutex<ChannelStatus>>,
}

impl ChannelTransport {
    /// A channel to the agent at `location` over `backend`, which runs the
    /// one-shot execs too.
    pub fn new<B: Transport + StreamExec>(
        backend: Arc<B>,
        location: &AgentLocation,
        config: MuxConfig,
    ) -> ChannelTransport {
        let inner: Arc<dyn Transport> = backend.clone();
        ChannelTransport::from_parts(inner, backend, location, config)
    }

    /// A channel whose one-shot execs go through `inner` and whose stream
    /// `opener` starts (a wrapped backend, e.g. with injected faults).
    pub fn from_parts(
        inner: Arc<dyn Transport>,
        opener: Arc<dyn StreamExec>,
        location: &AgentLocation,
        config: MuxConfig,
    ) -> ChannelTransport {
        ChannelTransport {
            inner,
            opener,
            op_argv: render(0, &Op::Gc, location).argv,
            channel_argv: channel_argv(location),
            config,
            actor: Mutex::new(None),
            status: Arc::default(),
        }
    }

    /// What the channel is doing now.
    pub fn status(&self) -> ChannelStatus {
        lock(&self.status).clone()
    }

    /// Opens the channel if nothing did yet and waits until it is open,
    /// at most `bound`; whether it is.
    pub async fn open(&self, bound: Duration) -> bool {
        let Some(actor) = self.actor() else {
            return false;
        };
        let _ = actor.send(Command::Start);
        let deadline = tokio::time::Instant::now() + bound;
        while !self.status().open {
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        true
    }

    /// Closes the channel now (its process ends: killed on this machine,
    /// its stdin closed on the sandbox, where the agent's channel exits);
    /// the ops in flight on it become transport errors and the next op
    /// opens a new one. A client that is done with a sandbox calls it so
    /// that nothing of its own stays there.
    pub fn close(&self) {
        if let Ok(mut slot) = self.actor.lock() {
            slot.take();
        }
    }

    /// Whether `req` may go on the channel.
    fn eligible(&self, req: &ExecRequest) -> bool {
        req.op
            .is_some_and(|op| op.kind != OpKind::Install && !self.opener.slow_start(op.kind))
            && req.argv == self.op_argv
    }

    /// The actor's mailbox, started on first use (it needs the runtime).
    fn actor(&self) -> Option<mpsc::UnboundedSender<Command>> {
        let mut slot = self.actor.lock().ok()?;
        let running = slot.as_ref().is_some_and(|tx| !tx.is_closed());
        if !running {
            let tx = actor::spawn(
                Arc::clone(&self.opener),
                self.channel_argv.clone(),
                self.config.clone(),
                Arc::clone(&self.status),
            );
            *slot = Some(tx);
        }
        slot.clone()
    }

    async fn exec_routed(&self, req: ExecRequest) -> Result<ExecOutput, TransportError> {
        if !self.eligible(&req) {
            return self.inner.exec(req).await;
        }
        let Some(actor) = self.actor() else {
            return self.inner.exec(req).await;
        };
        let (answer, routed) = oneshot::channel();
        let request = req.stdin.clone();
        if actor.send(Command::Route { request, answer }).is_err() {
            return self.inner.exec(req).await;
        }
        match routed.await {
            Ok(Routed::Channel { frame, reply }) => {
                // Dropped before the reply (deadline, abandoned call): the
                // mux forgets the frame and drops its late reply.
                let _abandon = Abandon { actor, frame };
                match reply.await {
                    Ok(Ok(stdout)) => Ok(ExecOutput {
                        stdout,
                        stderr: Vec::new(),
                        exit_code: 0,
                    }),
                    Ok(Err(e)) => Err(e),
                    Err(_) => Err(TransportError {
                        kind: tether_core::client::TransportErrorKind::Io,
                        detail: "the channel stopped with the op in flight".into(),
                    }),
                }
            }
            Ok(Routed::OneShot) | Err(_) => self.inner.exec(req).await,
        }
    }
}

impl Transport for ChannelTransport {
    fn exec(&self, req: ExecRequest) -> ExecFuture<'_> {
        Box::pin(self.exec_routed(req))
    }

    fn describe(&self) -> String {
        format!("{} (channel)", self.inner.describe())
    }

    fn helpers_started(&self) -> u64 {
        self.inner.helpers_started()
    }
}

struct Abandon {
    actor: mpsc::UnboundedSender<Command>,
    frame: u64,
}

impl Drop for Abandon {
    fn drop(&mut self) {
        // A frame already answered is not pending: abandoning it is a no-op.
        let _ = self.actor.send(Command::Abandon(self.frame));
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panicking holder leaves plain data behind: still usable.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
