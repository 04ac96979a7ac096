//! The agent side of the channel, sans-IO ([`Server`]): what
//! `tether-agent channel` decides, so the real agent (threads over its
//! stdin and stdout) and the simulation (a task over a simulated stream)
//! run the same dispatch.
//!
//! Drain order: feed received bytes with [`Server::handle_input`]; call
//! [`Server::poll`] with the OS whenever [`Server::next_wake`] is due (or
//! after input); after either, drain [`Server::poll_output`] until `None`
//! and write each frame out in that order. Time (the OS's clock) never goes
//! backwards between calls.
//!
//! The rules:
//! - the first frame out is the hello (the protocol version);
//! - each request frame becomes an [`OpRun`] of its own, exactly what a
//!   one-shot op would run on the same stdin (same validation, journal and
//!   idempotence); a repeated frame id replaces nothing (the client never
//!   reuses one, and an op already running keeps its reply);
//! - ops run concurrently, each polled at its own wake-up, oldest frame
//!   first; a finished op's reply line goes out as a reply frame with its
//!   request's id;
//! - a beat goes out every [`HEARTBEAT`], ops or not, so the client can
//!   tell a slow op from a stalled channel; its id counts the bytes
//!   received so far, so the client can also tell a stream that loses
//!   its requests from one whose ops (or whose large requests) are slow;
//! - bytes that are not frames end the channel ([`FrameError`]: the stream
//!   cannot be resynchronised); a frame the client should never send is
//!   ignored with a note.

use super::frame::{Decoder, Frame, FrameError, FrameKind};
use super::HEARTBEAT;
use crate::agent::{OpRun, Os};
use crate::ids::KernelName;
use crate::protocol::{Envelope, OpKind, PROTOCOL_VERSION};
use crate::time::Timestamp;
use std::collections::{BTreeMap, VecDeque};

/// What the driver must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerOutput {
    /// Write this frame to the stream (hello, a beat, a reply).
    Send {
        /// The frame.
        frame: Frame,
        /// For a reply: the kind of the op it answers, when the request
        /// said (what a fault aimed at an op kind matches).
        op: Option<OpKind>,
    },
    /// A request arrived and its op started.
    Accepted {
        /// Its frame id.
        frame: u64,
        /// Its kind, when the request said.
        op: Option<OpKind>,
        /// The kernel it is about, when it is about one.
        kernel: Option<KernelName>,
    },
    /// Something worth a line on stderr (the channel goes on).
    Note(String),
}

struct Running {
    run: OpRun,
    op: Option<OpKind>,
}

/// One channel's agent side.
pub struct Server {
    root: String,
    decoder: Decoder,
    ops: BTreeMap<u64, Running>,
    /// Bytes received from the client (what a beat acknowledges).
    received: u64,
    next_beat: Timestamp,
    outputs: VecDeque<ServerOutput>,
}

impl Server {
    /// A channel for the agent at `root`, opened at `now`: its hello is
    /// the first output.
    pub fn new(root: &str, now: Timestamp) -> Server {
        let hello = Frame::new(
            FrameKind::Hello,
            0,
            PROTOCOL_VERSION.to_string().into_bytes(),
        );
        Server {
            root: root.to_owned(),
            decoder: Decoder::new(),
            ops: BTreeMap::new(),
            received: 0,
            next_beat: now + HEARTBEAT,
            outputs: VecDeque::from([ServerOutput::Send {
                frame: hello,
                op: None,
            }]),
        }
    }

    /// Bytes from the client. An error means the stream is not frames:
    /// the channel must end (every later call says so again).
    pub fn handle_input(&mut self, bytes: &[u8]) -> Result<(), FrameError> {
        // Counted as they arrive, before anything can refuse them: the
        // beat says what arrived, not what ran.
        self.received += bytes.len() as u64;
        self.decoder.push(bytes);
        while let Some(frame) = self.decoder.next_frame()? {
            if frame.kind != FrameKind::Request {
                self.outputs.push_back(ServerOutput::Note(format!(
                    "ignored a {:?} frame from the client",
                    frame.kind
                )));
                continue;
            }
            if self.ops.contains_key(&frame.id) {
                continue;
            }
            let envelope = serde_json::from_slice::<Envelope>(&frame.payload).ok();
            let op = envelope.as_ref().map(|e| e.op.kind());
            let kernel = envelope.as_ref().and_then(|e| e.op.kernel().cloned());
            let run = OpRun::new(&self.root, &frame.payload);
            self.ops.insert(frame.id, Running { run, op });
            self.outputs.push_back(ServerOutput::Accepted {
                frame: frame.id,
                op,
                kernel,
            });
        }
        Ok(())
    }

    /// Polls every op that is due, oldest frame first, then beats if it
    /// is time.
    pub fn poll(&mut self, os: &mut dyn Os) {
        let now = os.now();
        let mut finished = Vec::new();
        for (&id, running) in self.ops.iter_mut() {
            if running.run.next_wake().is_some_and(|wake| wake > now) {
                continue;
            }
            if let Some(line) = running.run.poll(os) {
                finished.push((id, line, running.op));
            }
        }
        for (id, line, op) in finished {
            self.ops.remove(&id);
            self.outputs.push_back(ServerOutput::Send {
                frame: Frame::new(FrameKind::Reply, id, line),
                op,
            });
        }
        let now = os.now();
        if now >= self.next_beat {
            self.outputs.push_back(ServerOutput::Send {
                frame: Frame::new(FrameKind::Beat, self.received, Vec::new()),
                op: None,
            });
            self.next_beat = now + HEARTBEAT;
        }
    }

    /// When [`Server::poll`] has something to do next (an op's wake-up, or
    /// the next beat); `now` for an op that wants polling at once.
    #[must_use]
    pub fn next_wake(&self, now: Timestamp) -> Timestamp {
        self.ops
            .values()
            .map(|r| r.run.next_wake().unwrap_or(now))
            .chain([self.next_beat])
            .min()
            .unwrap_or(self.next_beat)
    }

    /// Ops started and not yet answered.
    pub fn in_flight(&self) -> usize {
        self.ops.len()
    }

    /// The next thing to do.
    #[must_use]
    pub fn poll_output(&mut self) -> Option<ServerOutput> {
        self.outputs.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::tests::FakeOs;
    use crate::protocol::render::StdinSource;
    use crate::protocol::{render, AgentLocation, Op};

    fn drain(server: &mut Server) -> Vec<ServerOutput> {
        std::iter::from_fn(|| server.poll_output()).collect()
    }

    fn frames(outputs: &[ServerOutput]) -> Vec<(FrameKind, u64)> {
        outputs
            .iter()
            .filter_map(|o| match o {
                ServerOutput::Send { frame, .. } => Some((frame.kind, frame.id)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn hello_first_then_one_reply_per_request_by_its_id_and_beats() {
        let mut os = FakeOs::new();
        let now = os.now();
        let mut server = Server::new("/r", now);
        assert_eq!(frames(&drain(&mut server)), vec![(FrameKind::Hello, 0)]);
        let location = AgentLocation {
            root: "/r".into(),
            hash: "h".into(),
        };
        let StdinSource::Bytes(gc) = render(5, &Op::Gc, &location).stdin else {
            panic!("gc's stdin is its envelope")
        };
        let probe = &gc[..];
        let mut wire = Frame::new(FrameKind::Request, 9, probe.to_vec()).encode();
        wire.extend(Frame::new(FrameKind::Request, 4, b"not json".to_vec()).encode());
        // The same id again (a client bug) starts nothing new.
        wire.extend(Frame::new(FrameKind::Request, 9, probe.to_vec()).encode());
        wire.extend(Frame::new(FrameKind::Beat, 0, Vec::new()).encode());
        for chunk in wire.chunks(3) {
            server.handle_input(chunk).unwrap();
        }
        let out = drain(&mut server);
        assert_eq!(
            out[..2],
            [
                ServerOutput::Accepted {
                    frame: 9,
                    op: Some(OpKind::Gc),
                    kernel: None,
                },
                ServerOutput::Accepted {
                    frame: 4,
                    op: None,
                    kernel: None,
                }
            ]
        );
        assert!(matches!(&out[2], ServerOutput::Note(n) if n.contains("Beat")));
        assert_eq!(server.in_flight(), 2);
        server.poll(&mut os);
        let out = drain(&mut server);
        // Oldest frame first; the bad request gets the agent's error line.
        assert_eq!(
            frames(&out),
            vec![(FrameKind::Reply, 4), (FrameKind::Reply, 9)]
        );
        assert_eq!(server.in_flight(), 0);
        let ServerOutput::Send { frame, op } = &out[0] else {
            panic!()
        };
        assert_eq!(*op, None);
        assert!(String::from_utf8_lossy(&frame.payload).contains("bad_request"));
        // A beat once a heartbeat passed, and not before.
        assert_eq!(server.next_wake(os.now()), now + HEARTBEAT);
        server.poll(&mut os);
        assert!(drain(&mut server).is_empty());
        os.now += 1_000;
        server.poll(&mut os);
        // Its id acknowledges every byte received.
        assert_eq!(
            frames(&drain(&mut server)),
            vec![(FrameKind::Beat, wire.len() as u64)]
        );
        // Garbage ends the channel, and stays an error.
        assert!(server.handle_input(b"oops\n").is_err());
        assert!(server.handle_input(b"B 0 0\n").is_err());
    }
}
