//! The channel in the simulation, client half: the real client's
//! [`ChannelTransport`] (its [`tether_core::channel::Mux`] and actor) over
//! a simulated stream, a `turmoil::net` TCP connection to the sandbox's
//! channel port, where `crate::sandbox`'s channel host runs core's
//! [`tether_core::channel::Server`] on the simulated OS.
//!
//! The connection opens with one length-prefixed [`WireRequest`] (the
//! channel command's argv, as a streaming exec starts a command); after
//! it the stream carries the channel's frames both ways, as the command's
//! stdin and stdout would. A fault that makes an exec slow to start (an
//! armed slow start, a submit held for an early cancel) keeps that op off
//! the channel, as the real transport keeps an op with an injected slow
//! start (`local?delay.submit=…`) on one-shot execs.

use crate::client_host::{location, SimTransport};
use crate::control::Control;
use crate::trace::Trace;
use crate::transport::{write_frame, WireRequest};
use std::sync::Arc;
use tether::channel::stream::OpenFuture;
use tether::channel::{mux_config, ChannelStream, ChannelTransport, StreamExec};
use tether::transport::{TransportError, TransportErrorKind};
use tether_core::bytes::Bytes;
use tether_core::protocol::OpKind;

/// The port the sandbox's channel host listens on.
pub const CHANNEL_PORT: u16 = 7023;

/// Opens channel streams on the simulated sandbox.
pub struct SimStreamExec {
    trace: Trace,
    control: Control,
}

impl StreamExec for SimStreamExec {
    fn open_stream(&self, argv: Vec<String>) -> OpenFuture<'_> {
        Box::pin(async move {
            self.trace.log("client", "channel: opening a stream");
            let fail = |e: std::io::Error| TransportError {
                kind: match e.kind() {
                    std::io::ErrorKind::ConnectionRefused => TransportErrorKind::Unreachable,
                    _ => TransportErrorKind::Io,
                },
                detail: format!("cannot start the channel: {e}"),
            };
            let mut stream = turmoil::net::TcpStream::connect(format!("sandbox:{CHANNEL_PORT}"))
                .await
                .map_err(fail)?;
            let start = WireRequest {
                argv,
                stdin: Bytes::default(),
                op: None,
            };
            write_frame(&mut stream, &start).await.map_err(fail)?;
            let (stdout, stdin) = stream.into_split();
            Ok(ChannelStream {
                stdin: Box::new(stdin),
                stdout: Box::new(stdout),
                stderr: Box::new(tokio::io::empty()),
                pid: None,
                keep: Box::new(()),
                send_delay: std::time::Duration::ZERO,
            })
        })
    }

    fn slow_start(&self, kind: OpKind) -> bool {
        let a = self.control.lock();
        a.slow_start.iter().any(|(t, _)| t.matches(kind))
            || (kind == OpKind::Submit && a.cancel_before_submit)
    }
}

/// The client's transport on a seed that runs on the channel: the real
/// [`ChannelTransport`] with the CLI's knobs, its one-shot execs over
/// `one_shot`.
pub fn transport(one_shot: SimTransport, trace: Trace, control: Control) -> Arc<ChannelTransport> {
    Arc::new(ChannelTransport::from_parts(
        Arc::new(one_shot),
        Arc::new(SimStreamExec { trace, control }),
        &location(),
        mux_config(),
    ))
}
