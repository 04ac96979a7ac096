//! The client side of the channel, sans-IO ([`Mux`]): every decision the
//! multiplexing transport makes, so the driver around it (tokio over a
//! real stream today, the simulation's stream later) only moves bytes and
//! time.
//!
//! Drain order: after any `handle_*`/[`Mux::route`] call, drain
//! [`Mux::poll_output`] until `None`, then sleep until
//! [`Mux::poll_timeout`] and call [`Mux::handle_timeout`]. Time never goes
//! backwards between calls.
//!
//! The rules:
//! - the channel is opened when the first op asks for a route; until it
//!   said hello, every op goes as a one-shot exec ([`Route::OneShot`]);
//! - an open channel carries every op routed to it, each with its own
//!   frame id; a reply is handed back by that id, and a reply for an op
//!   the caller gave up on ([`Mux::abandon`]) is dropped;
//! - the channel breaks when its stream ends, when it sends garbage, when
//!   it says no hello within [`MuxConfig::hello_timeout`], or when nothing
//!   at all (not even a heartbeat) arrived for [`MuxConfig::stall_after`]:
//!   noticed by a timer while ops are in flight, and by the next op routed
//!   while none is (an idle channel arms no timer). Routing and giving up
//!   on ops never restart that clock: only bytes do;
//! - the channel also breaks when a request frame sent on it is not
//!   acknowledged (by a beat, whose id counts the bytes the agent has
//!   received on this stream, or by a reply) and the acknowledged count
//!   has not grown for [`MuxConfig::stall_after`] since it was sent: the
//!   agent is alive and beats, but what the client sends is lost on the
//!   way (a half-open path, a middlebox that drops bytes). Counting bytes,
//!   not frames, lets a large request on a slow link take as long as it
//!   keeps moving. Ops given up on still count: a lost request is a lost
//!   stream whoever still waits for it.
//!   A break fails every op in flight with a
//!   transport error (the op may have run: the client's retries and
//!   idempotent ops do the rest) and reopens after a backoff that doubles
//!   with each break until a reply comes through again.

use super::frame::{Decoder, Frame, FrameKind, MAX_PAYLOAD};
use crate::client::{backoff, TransportError, TransportErrorKind};
use crate::protocol::PROTOCOL_VERSION;
use crate::time::Timestamp;
use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;

/// The channel's knobs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MuxConfig {
    /// How long a started stream may take to say hello.
    pub hello_timeout: Duration,
    /// With ops in flight, how long the channel may stay silent before it
    /// counts as stalled (the agent beats every [`super::HEARTBEAT`]); and
    /// how long a request sent may go unacknowledged by the agent.
    pub stall_after: Duration,
    /// The first reopen waits this long after a break.
    pub reopen_base: Duration,
    /// Reopen waits never exceed this.
    pub reopen_max: Duration,
    /// The channel opens when this op is routed (1: the first). A short
    /// client process whose one op is the whole cell (`tether run true`)
    /// should not start a channel it will not use: 2 opens it only once
    /// a cell needs more than its submit.
    pub open_at_op: u64,
}

impl Default for MuxConfig {
    fn default() -> Self {
        MuxConfig {
            hello_timeout: Duration::from_secs(10),
            stall_after: Duration::from_secs(5),
            reopen_base: Duration::from_millis(250),
            reopen_max: Duration::from_secs(15),
            open_at_op: 1,
        }
    }
}

/// One attempt at a stream; inputs about an earlier one are ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StreamId(pub u64);

/// Where an op goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum Route {
    /// On the channel, as this frame: its reply or failure comes as a
    /// [`MuxOutput`] with that frame id.
    Channel(u64),
    /// As a one-shot exec (the channel is not open).
    OneShot,
}

/// What the driver must do, or hand back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MuxOutput {
    /// Start the channel command as this stream; report its bytes with
    /// [`Mux::handle_data`] and its end with [`Mux::handle_closed`].
    Open(StreamId),
    /// Stop this stream (kill its command); ignore what it still says.
    Close(StreamId),
    /// Write these bytes to the stream's stdin.
    Transmit(StreamId, Vec<u8>),
    /// The reply to this frame: the agent's reply line.
    Reply {
        /// The frame id [`Route::Channel`] gave.
        frame: u64,
        /// What the one-shot op would have printed on stdout.
        payload: Vec<u8>,
    },
    /// This frame's op ended without a reply.
    Failed {
        /// The frame id [`Route::Channel`] gave.
        frame: u64,
        /// Why (the op may have run).
        error: TransportError,
    },
}

/// Counters, for tests and the benchmark.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MuxStats {
    /// Streams that said hello.
    pub opened: u64,
    /// Breaks (of a stream that was opening or open).
    pub broken: u64,
    /// Ops routed to the channel.
    pub on_channel: u64,
    /// Ops routed to one-shot execs.
    pub one_shot: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum State {
    /// Nobody asked for a route yet.
    Idle,
    /// No stream; the next one may start at `retry_at`.
    Closed { retry_at: Timestamp },
    /// Started, no hello yet.
    Opening {
        stream: StreamId,
        deadline: Timestamp,
    },
    /// Carrying ops. `heard_at`: the last byte received (the hello at
    /// first). Never moved by anything but bytes: a stream that died
    /// silently stays silent however many ops are routed to it, given up
    /// on and routed again.
    Open {
        stream: StreamId,
        heard_at: Timestamp,
    },
}

/// A request frame the agent has not acknowledged yet.
#[derive(Debug)]
struct Unacked {
    frame: u64,
    /// The stream's byte count once it was written.
    end: u64,
    sent_at: Timestamp,
}

/// The client side of one channel. See the module doc for the drain order.
#[derive(Debug)]
pub struct Mux {
    config: MuxConfig,
    state: State,
    next_stream: u64,
    next_frame: u64,
    pending: BTreeSet<u64>,
    /// Request frames sent on the current stream that the agent has not
    /// said it received, oldest first (one ordered stream: acknowledging
    /// one covers those before).
    unacked: VecDeque<Unacked>,
    /// Bytes written to the current stream.
    sent_bytes: u64,
    /// Bytes the agent said it received on it, and when that last grew.
    acked_bytes: u64,
    acked_at: Timestamp,
    decoder: Decoder,
    /// Breaks since the last reply that came through a channel.
    failures: u32,
    last_break: Option<String>,
    outputs: VecDeque<MuxOutput>,
    stats: MuxStats,
}

impl Mux {
    /// A channel that opens when the first op is routed.
    pub fn new(config: MuxConfig) -> Mux {
        Mux {
            config,
            state: State::Idle,
            next_stream: 1,
            next_frame: 1,
            pending: BTreeSet::new(),
            unacked: VecDeque::new(),
            sent_bytes: 0,
            acked_bytes: 0,
            acked_at: Timestamp(0),
            decoder: Decoder::new(),
            failures: 0,
            last_break: None,
            outputs: VecDeque::new(),
            stats: MuxStats::default(),
        }
    }

    /// Whether ops go on the channel now.
    pub fn is_open(&self) -> bool {
        matches!(self.state, State::Open { .. })
    }

    /// Counters so far.
    pub fn stats(&self) -> &MuxStats {
        &self.stats
    }

    /// Why the channel last broke, if it did.
    pub fn last_break(&self) -> Option<&str> {
        self.last_break.as_deref()
    }

    /// Opens the channel now if nothing asked for it yet (to warm it up
    /// before the first op); otherwise changes nothing.
    pub fn start(&mut self, now: Timestamp) {
        if self.state == State::Idle {
            self.state = State::Closed { retry_at: now };
            self.handle_timeout(now);
        }
    }

    /// Routes one op whose one-shot stdin is `request` (the envelope).
    pub fn route(&mut self, request: &[u8], now: Timestamp) -> Route {
        if request.len() > MAX_PAYLOAD {
            // The agent would refuse the frame and close the channel.
            self.stats.one_shot += 1;
            return Route::OneShot;
        }
        match self.state {
            State::Open { heard_at, .. } if now >= heard_at + self.config.stall_after => {
                // The agent beats every second: a channel silent this long
                // is dead (a stream that lost its bytes, a half-open
                // connection), idle or not. Nothing goes on it.
                let reason = format!(
                    "stalled: nothing received for {} ms",
                    now.saturating_since(heard_at).as_millis()
                );
                self.break_channel(now, reason);
                self.stats.one_shot += 1;
                Route::OneShot
            }
            State::Open { .. } if self.deaf(now).is_some() => {
                // Beating, but deaf to us: nothing goes on it either.
                let reason = self.deaf(now).unwrap_or_default();
                self.break_channel(now, reason);
                self.stats.one_shot += 1;
                Route::OneShot
            }
            State::Open { stream, .. } => {
                let frame = self.next_frame;
                self.next_frame += 1;
                self.pending.insert(frame);
                self.stats.on_channel += 1;
                let bytes = Frame::new(FrameKind::Request, frame, request.to_vec()).encode();
                self.sent_bytes += bytes.len() as u64;
                self.unacked.push_back(Unacked {
                    frame,
                    end: self.sent_bytes,
                    sent_at: now,
                });
                self.outputs.push_back(MuxOutput::Transmit(stream, bytes));
                Route::Channel(frame)
            }
            State::Idle => {
                self.stats.one_shot += 1;
                if self.stats.one_shot >= self.config.open_at_op {
                    self.start(now);
                }
                Route::OneShot
            }
            State::Closed { .. } | State::Opening { .. } => {
                self.handle_timeout(now);
                self.stats.one_shot += 1;
                Route::OneShot
            }
        }
    }

    /// The caller gave up on `frame` (its deadline passed, it was
    /// dropped): a late reply is dropped, and it no longer counts for
    /// stall detection.
    pub fn abandon(&mut self, frame: u64) {
        self.pending.remove(&frame);
    }

    /// Bytes the stream's stdout produced.
    pub fn handle_data(&mut self, stream: StreamId, bytes: &[u8], now: Timestamp) {
        if self.current() != Some(stream) {
            return;
        }
        self.decoder.push(bytes);
        loop {
            let frame = match self.decoder.next_frame() {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(e) => return self.break_channel(now, e.to_string()),
            };
            match (frame.kind, &self.state) {
                (FrameKind::Hello, State::Opening { .. }) => {
                    let want = PROTOCOL_VERSION.to_string();
                    if frame.payload != want.as_bytes() {
                        let got = String::from_utf8_lossy(&frame.payload).into_owned();
                        return self.break_channel(
                            now,
                            format!("the agent's channel speaks protocol {got:?}, not {want}"),
                        );
                    }
                    self.stats.opened += 1;
                    self.state = State::Open {
                        stream,
                        heard_at: now,
                    };
                }
                (FrameKind::Reply, State::Open { .. }) => {
                    // A reply means its request arrived, and so did every
                    // one sent before it on this stream.
                    let end = self
                        .unacked
                        .iter()
                        .take_while(|u| u.frame <= frame.id)
                        .last()
                        .map(|u| u.end);
                    if let Some(end) = end {
                        self.acknowledge(end, now);
                    }
                    if self.pending.remove(&frame.id) {
                        self.failures = 0;
                        self.outputs.push_back(MuxOutput::Reply {
                            frame: frame.id,
                            payload: frame.payload,
                        });
                    }
                }
                (FrameKind::Beat, State::Open { .. } | State::Opening { .. }) => {
                    self.acknowledge(frame.id, now);
                }
                (kind, _) => {
                    return self
                        .break_channel(now, format!("the agent sent an unexpected {kind:?} frame"))
                }
            }
        }
        if let State::Open { heard_at, .. } = &mut self.state {
            *heard_at = now;
        }
    }

    /// The stream ended (its stdout closed, its command exited, a write
    /// failed, or it could not be started), for `reason`.
    pub fn handle_closed(&mut self, stream: StreamId, reason: &str, now: Timestamp) {
        if self.current() == Some(stream) {
            self.break_channel(now, reason.to_owned());
        }
    }

    /// Time passed: open, give up on a hello, or declare a stall.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        match self.state {
            State::Closed { retry_at } if now >= retry_at => {
                let stream = StreamId(self.next_stream);
                self.next_stream += 1;
                self.decoder = Decoder::new();
                self.state = State::Opening {
                    stream,
                    deadline: now + self.config.hello_timeout,
                };
                self.outputs.push_back(MuxOutput::Open(stream));
            }
            State::Opening { deadline, .. } if now >= deadline => {
                let reason = format!(
                    "no hello within {} ms",
                    self.config.hello_timeout.as_millis()
                );
                self.break_channel(now, reason);
            }
            State::Open { heard_at, .. }
                if !self.pending.is_empty() && now >= heard_at + self.config.stall_after =>
            {
                let reason = format!(
                    "stalled: nothing received for {} ms with {} op(s) in flight",
                    now.saturating_since(heard_at).as_millis(),
                    self.pending.len()
                );
                self.break_channel(now, reason);
            }
            State::Open { .. } => {
                if let Some(reason) = self.deaf(now) {
                    self.break_channel(now, reason);
                }
            }
            _ => {}
        }
    }

    /// The next thing to do.
    #[must_use]
    pub fn poll_output(&mut self) -> Option<MuxOutput> {
        self.outputs.pop_front()
    }

    /// When [`Mux::handle_timeout`] has something to do.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        match self.state {
            State::Idle => None,
            State::Closed { retry_at } => Some(retry_at),
            State::Opening { deadline, .. } => Some(deadline),
            State::Open { heard_at, .. } => {
                let silent = (!self.pending.is_empty()).then(|| heard_at + self.config.stall_after);
                let deaf = self
                    .unacked
                    .front()
                    .map(|u| u.sent_at.max(self.acked_at) + self.config.stall_after);
                silent.into_iter().chain(deaf).min()
            }
        }
    }

    /// The agent says it received the stream's first `bytes` bytes.
    fn acknowledge(&mut self, bytes: u64, now: Timestamp) {
        if bytes > self.acked_bytes {
            self.acked_bytes = bytes;
            self.acked_at = now;
        }
        while self.unacked.front().is_some_and(|u| u.end <= bytes) {
            self.unacked.pop_front();
        }
    }

    /// Why the open channel counts as deaf at `now`: a request sent, not
    /// acknowledged, and no progress in what the agent received for
    /// [`MuxConfig::stall_after`] since.
    fn deaf(&self, now: Timestamp) -> Option<String> {
        let oldest = self.unacked.front()?;
        let since = oldest.sent_at.max(self.acked_at);
        (now >= since + self.config.stall_after).then(|| {
            format!(
                "deaf: the agent received {} of {} bytes sent, none more for {} ms \
                 ({} request(s) unacknowledged, first frame {})",
                self.acked_bytes,
                self.sent_bytes,
                now.saturating_since(since).as_millis(),
                self.unacked.len(),
                oldest.frame
            )
        })
    }

    fn current(&self) -> Option<StreamId> {
        match self.state {
            State::Opening { stream, .. } | State::Open { stream, .. } => Some(stream),
            State::Idle | State::Closed { .. } => None,
        }
    }

    fn break_channel(&mut self, now: Timestamp, reason: String) {
        let Some(stream) = self.current() else {
            return;
        };
        self.outputs.push_back(MuxOutput::Close(stream));
        for frame in std::mem::take(&mut self.pending) {
            self.outputs.push_back(MuxOutput::Failed {
                frame,
                error: TransportError {
                    kind: TransportErrorKind::Io,
                    detail: format!("the channel broke with the op in flight: {reason}"),
                },
            });
        }
        self.failures = self.failures.saturating_add(1);
        self.stats.broken += 1;
        self.unacked.clear();
        self.sent_bytes = 0;
        self.acked_bytes = 0;
        self.decoder = Decoder::new();
        let wait = backoff(
            self.config.reopen_base,
            self.config.reopen_max,
            self.failures,
        );
        self.state = State::Closed {
            retry_at: now + wait,
        };
        self.last_break = Some(reason);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Timestamp = Timestamp(1_000);

    fn at(ms: u64) -> Timestamp {
        Timestamp(T0.0 + ms)
    }

    fn drain(mux: &mut Mux) -> Vec<MuxOutput> {
        std::iter::from_fn(|| mux.poll_output()).collect()
    }

    fn hello() -> Vec<u8> {
        Frame::new(
            FrameKind::Hello,
            0,
            PROTOCOL_VERSION.to_string().into_bytes(),
        )
        .encode()
    }

    fn reply(id: u64, text: &str) -> Vec<u8> {
        Frame::new(FrameKind::Reply, id, text.as_bytes().to_vec()).encode()
    }

    /// A mux whose stream 1 said hello at T0.
    fn open_mux() -> Mux {
        let mut mux = Mux::new(MuxConfig::default());
        assert_eq!(mux.route(b"first", T0), Route::OneShot);
        assert_eq!(drain(&mut mux), vec![MuxOutput::Open(StreamId(1))]);
        mux.handle_data(StreamId(1), &hello(), T0);
        assert!(mux.is_open());
        mux
    }

    #[test]
    fn ops_go_one_shot_until_hello_then_on_the_channel_with_replies_by_frame() {
        let mut mux = Mux::new(MuxConfig::default());
        assert_eq!(mux.poll_timeout(), None, "idle until asked");
        assert_eq!(mux.route(b"a", T0), Route::OneShot);
        assert_eq!(drain(&mut mux), vec![MuxOutput::Open(StreamId(1))]);
        assert_eq!(mux.route(b"b", at(1)), Route::OneShot, "still opening");
        assert!(drain(&mut mux).is_empty(), "one stream at a time");
        // The hello arrives split in two.
        let h = hello();
        mux.handle_data(StreamId(1), &h[..2], at(2));
        assert!(!mux.is_open());
        mux.handle_data(StreamId(1), &h[2..], at(3));
        assert!(mux.is_open());

        let Route::Channel(f1) = mux.route(b"op one", at(4)) else {
            panic!("open: on the channel")
        };
        let Route::Channel(f2) = mux.route(b"op two", at(4)) else {
            panic!("open: on the channel")
        };
        assert_ne!(f1, f2);
        assert_eq!(
            drain(&mut mux),
            vec![
                MuxOutput::Transmit(
                    StreamId(1),
                    Frame::new(FrameKind::Request, f1, b"op one".to_vec()).encode()
                ),
                MuxOutput::Transmit(
                    StreamId(1),
                    Frame::new(FrameKind::Request, f2, b"op two".to_vec()).encode()
                ),
            ]
        );
        // Out of order, with a beat in between, in one read.
        let mut bytes = reply(f2, "two");
        bytes.extend(Frame::new(FrameKind::Beat, 0, Vec::new()).encode());
        bytes.extend(reply(f1, "one"));
        mux.handle_data(StreamId(1), &bytes, at(9));
        assert_eq!(
            drain(&mut mux),
            vec![
                MuxOutput::Reply {
                    frame: f2,
                    payload: b"two".to_vec()
                },
                MuxOutput::Reply {
                    frame: f1,
                    payload: b"one".to_vec()
                },
            ]
        );
        assert_eq!(mux.stats().on_channel, 2);
        assert_eq!(mux.stats().one_shot, 2);
        // A request larger than a frame may be goes one-shot.
        let huge = vec![b' '; MAX_PAYLOAD + 1];
        assert_eq!(mux.route(&huge, at(10)), Route::OneShot);
        assert!(drain(&mut mux).is_empty());
        assert!(mux.is_open());
    }

    #[test]
    fn a_break_fails_every_op_in_flight_and_reopens_after_a_growing_backoff() {
        let mut mux = open_mux();
        let Route::Channel(f1) = mux.route(b"x", at(1)) else {
            panic!()
        };
        let Route::Channel(f2) = mux.route(b"y", at(1)) else {
            panic!()
        };
        drain(&mut mux);
        mux.handle_closed(StreamId(1), "end of stream", at(10));
        let out = drain(&mut mux);
        assert_eq!(out[0], MuxOutput::Close(StreamId(1)));
        let failed: Vec<u64> = out[1..]
            .iter()
            .map(|o| match o {
                MuxOutput::Failed { frame, error } => {
                    assert_eq!(error.kind, TransportErrorKind::Io, "it may have run");
                    assert!(error.detail.contains("end of stream"), "{error}");
                    *frame
                }
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(failed, vec![f1, f2]);
        assert!(!mux.is_open());
        assert_eq!(mux.route(b"z", at(11)), Route::OneShot);
        // A late reply of the dead stream changes nothing.
        mux.handle_data(StreamId(1), &reply(f1, "late"), at(12));
        assert!(drain(&mut mux).is_empty());

        // Reopens at the backoff (250 ms), breaks again (no hello), and
        // waits twice as long the second time.
        assert_eq!(mux.poll_timeout(), Some(at(260)));
        mux.handle_timeout(at(259));
        assert!(drain(&mut mux).is_empty());
        mux.handle_timeout(at(260));
        assert_eq!(drain(&mut mux), vec![MuxOutput::Open(StreamId(2))]);
        mux.handle_closed(StreamId(2), "exit 127", at(300));
        assert_eq!(drain(&mut mux), vec![MuxOutput::Close(StreamId(2))]);
        assert_eq!(mux.poll_timeout(), Some(at(800)));
        mux.handle_timeout(at(800));
        assert_eq!(drain(&mut mux), vec![MuxOutput::Open(StreamId(3))]);
        mux.handle_data(StreamId(3), &hello(), at(801));
        // A reply through the channel resets the backoff.
        let Route::Channel(f) = mux.route(b"w", at(802)) else {
            panic!()
        };
        mux.handle_data(StreamId(3), &reply(f, "ok"), at(803));
        mux.handle_closed(StreamId(3), "gone", at(900));
        drain(&mut mux);
        assert_eq!(mux.poll_timeout(), Some(at(1150)));
        assert_eq!(mux.stats().broken, 3);
        assert_eq!(mux.last_break(), Some("gone"));
    }

    /// The bytes these outputs write to the stream.
    fn sent(out: &[MuxOutput]) -> u64 {
        out.iter()
            .map(|o| match o {
                MuxOutput::Transmit(_, bytes) => bytes.len() as u64,
                _ => 0,
            })
            .sum()
    }

    /// A beat at `ms` acknowledging the stream's first `ack` bytes.
    fn beat(mux: &mut Mux, ms: u64, ack: u64) {
        let bytes = Frame::new(FrameKind::Beat, ack, Vec::new()).encode();
        mux.handle_data(StreamId(1), &bytes, at(ms));
    }

    #[test]
    fn silence_is_a_stall_beats_are_not() {
        let mut mux = open_mux();
        // Idle, beating: no timer, still open.
        assert_eq!(mux.poll_timeout(), None);
        for s in 1..=60 {
            beat(&mut mux, s * 1000, 0);
        }
        let Route::Channel(f) = mux.route(b"wait", at(60_000)) else {
            panic!()
        };
        let total = sent(&drain(&mut mux));
        assert_eq!(mux.poll_timeout(), Some(at(65_000)));
        // Beats that acknowledge the request keep it alive through a long
        // poll.
        for s in 61..=80 {
            beat(&mut mux, s * 1000, total);
            mux.handle_timeout(at(s * 1000));
        }
        assert!(mux.is_open());
        // Then nothing for 5 s.
        mux.handle_timeout(at(84_999));
        assert!(mux.is_open());
        mux.handle_timeout(at(85_000));
        let out = drain(&mut mux);
        assert_eq!(out[0], MuxOutput::Close(StreamId(1)));
        assert!(
            matches!(&out[1], MuxOutput::Failed { frame, error } if *frame == f && error.detail.contains("stalled")),
            "{out:?}"
        );
    }

    #[test]
    fn a_channel_silent_while_idle_takes_no_op_and_reopens() {
        let mut mux = open_mux();
        beat(&mut mux, 1_000, 0);
        // Idle silence arms nothing...
        mux.handle_timeout(at(60_000));
        assert!(mux.is_open());
        // ...but the next op finds a channel silent for 59 s: dead. The
        // op goes one-shot (no op fails) and a new stream opens later.
        assert_eq!(mux.route(b"submit", at(60_000)), Route::OneShot);
        assert_eq!(drain(&mut mux), vec![MuxOutput::Close(StreamId(1))]);
        assert!(mux.last_break().unwrap().contains("stalled"));
        assert_eq!(mux.poll_timeout(), Some(at(60_250)));
        mux.handle_timeout(at(60_250));
        assert_eq!(drain(&mut mux), vec![MuxOutput::Open(StreamId(2))]);
    }

    #[test]
    fn a_dead_channel_is_found_though_every_op_gives_up_before_the_stall_bound() {
        // Found by the simulation: a stream that silently lost its bytes
        // (a partition of 82 ms), ops whose deadline (2.5 s) is shorter
        // than the stall bound (5 s). Each op was given up and routed
        // again, restarting the silence clock: the channel took every op
        // forever and the client gave up on a healthy sandbox.
        let mut mux = open_mux();
        let mut t = 0;
        let mut out = Vec::new();
        while let Route::Channel(f) = mux.route(b"wait", at(t)) {
            assert!(t < 5_000, "still on a channel silent for {t} ms");
            t += 2_500;
            // The deadline passes: given up (the timer may see the stall
            // first).
            mux.handle_timeout(at(t));
            mux.abandon(f);
            out.extend(drain(&mut mux));
        }
        out.extend(drain(&mut mux));
        assert_eq!(t, 5_000);
        assert!(out.contains(&MuxOutput::Close(StreamId(1))), "{out:?}");
        assert!(mux.last_break().unwrap().contains("stalled"));
    }

    #[test]
    fn a_channel_that_beats_but_never_receives_what_is_sent_breaks() {
        // Found by the simulation (background_log seed 100038): a
        // partition emptied the link while the client's frames were held,
        // so no request after it reached the agent, whose beats kept
        // coming. Every op waited out its deadline on that stream for 86 s
        // and the channel never broke.
        let mut mux = open_mux();
        let mut out = Vec::new();
        let mut t = 0;
        let mut sent = Vec::new();
        while let Route::Channel(f) = mux.route(b"wait", at(t)) {
            assert!(t < 5_000, "still on a channel deaf for {t} ms");
            sent.push(f);
            // Beats every second, acknowledging nothing; each op is given
            // up at its 2.5 s deadline (so none is in flight at a stall
            // check), and the next is routed.
            for _ in 0..5 {
                t += 500;
                if t % 1_000 == 0 {
                    beat(&mut mux, t, 0);
                }
                if mux.poll_timeout().is_some_and(|due| due <= at(t)) {
                    mux.handle_timeout(at(t));
                }
            }
            mux.abandon(f);
            out.extend(drain(&mut mux));
        }
        out.extend(drain(&mut mux));
        assert!(out.contains(&MuxOutput::Close(StreamId(1))), "{out:?}");
        let why = mux.last_break().unwrap();
        assert!(why.contains("deaf"), "{why}");
        assert_eq!(t, 5_000, "broken at the bound, not before: {why}");
        assert_eq!(sent.len(), 2);
        // It reopens at the backoff, like any break.
        assert_eq!(mux.poll_timeout(), Some(at(5_250)));

        // With an op in flight, the timer alone finds it.
        let mut mux = open_mux();
        let Route::Channel(f) = mux.route(b"wait", at(100)) else {
            panic!()
        };
        drain(&mut mux);
        for s in 1..=5 {
            beat(&mut mux, s * 1_000, 0);
        }
        // Not silent (the last beat was at 5 s), but deaf since 100 ms.
        assert_eq!(mux.poll_timeout(), Some(at(5_100)));
        mux.handle_timeout(at(5_099));
        assert!(mux.is_open());
        mux.handle_timeout(at(5_100));
        let out = drain(&mut mux);
        assert_eq!(out[0], MuxOutput::Close(StreamId(1)));
        assert!(
            matches!(&out[1], MuxOutput::Failed { frame, error } if *frame == f && error.detail.contains("deaf")),
            "{out:?}"
        );
    }

    #[test]
    fn an_acknowledged_request_or_a_later_reply_keeps_the_channel_open() {
        let mut mux = open_mux();
        let Route::Channel(f1) = mux.route(b"slow", at(0)) else {
            panic!()
        };
        let Route::Channel(f2) = mux.route(b"quick", at(0)) else {
            panic!()
        };
        let mut total = sent(&drain(&mut mux));
        // The reply to the later request says the earlier one arrived
        // too (one ordered stream).
        mux.handle_data(StreamId(1), &reply(f2, "ok"), at(10));
        drain(&mut mux);
        // The caller gives up on the slow op, and a long poll runs for a
        // minute with beats acknowledging its request: no deaf break.
        mux.abandon(f1);
        let Route::Channel(_) = mux.route(b"wait", at(20)) else {
            panic!()
        };
        total += sent(&drain(&mut mux));
        for s in 1..=60 {
            beat(&mut mux, s * 1_000, total);
            mux.handle_timeout(at(s * 1_000));
        }
        assert!(mux.is_open(), "{:?}", mux.last_break());
        assert_eq!(
            mux.poll_timeout(),
            Some(at(65_000)),
            "only silence is timed"
        );
        assert_eq!(mux.stats().broken, 0);
    }

    #[test]
    fn a_large_request_may_take_long_while_it_moves_and_breaks_once_it_stops() {
        let mut mux = open_mux();
        let Route::Channel(_) = mux.route(&[b'x'; 1_000], at(0)) else {
            panic!()
        };
        let total = sent(&drain(&mut mux));
        // A slow link: 100 bytes a second arrive, for ten seconds.
        for s in 1..=10 {
            beat(&mut mux, s * 1_000, s * 100);
            mux.handle_timeout(at(s * 1_000));
        }
        assert!(mux.is_open(), "{:?}", mux.last_break());
        // Then nothing more arrives (the beats still do): deaf 5 s after
        // the last progress.
        for s in 11..=14 {
            beat(&mut mux, s * 1_000, 1_000);
            mux.handle_timeout(at(s * 1_000));
        }
        assert_eq!(mux.poll_timeout(), Some(at(15_000)));
        mux.handle_timeout(at(14_999));
        assert!(mux.is_open());
        mux.handle_timeout(at(15_000));
        assert!(!mux.is_open());
        let why = mux.last_break().unwrap();
        assert!(
            why.contains("deaf") && why.contains(&format!("1000 of {total} bytes")),
            "{why}"
        );
    }

    #[test]
    fn an_abandoned_op_neither_stalls_the_channel_nor_gets_its_late_reply() {
        let mut mux = open_mux();
        let Route::Channel(f) = mux.route(b"x", at(1)) else {
            panic!()
        };
        let total = sent(&drain(&mut mux));
        mux.abandon(f);
        // No silence timer for it; only its request must still be
        // acknowledged (a beat says it arrived)...
        assert_eq!(mux.poll_timeout(), Some(at(5_001)));
        beat(&mut mux, 1_000, total);
        assert_eq!(mux.poll_timeout(), None);
        // ...and its late reply is dropped.
        mux.handle_data(StreamId(1), &reply(f, "late"), at(10_000));
        assert!(drain(&mut mux).is_empty());
        assert!(mux.is_open());
    }

    #[test]
    fn a_channel_asked_to_wait_for_the_second_op_opens_only_then() {
        let mut mux = Mux::new(MuxConfig {
            open_at_op: 2,
            ..MuxConfig::default()
        });
        assert_eq!(mux.route(b"submit", T0), Route::OneShot);
        assert!(drain(&mut mux).is_empty());
        assert_eq!(mux.poll_timeout(), None);
        assert_eq!(mux.route(b"wait", at(5)), Route::OneShot);
        assert_eq!(drain(&mut mux), vec![MuxOutput::Open(StreamId(1))]);
        // Asked for explicitly, it opens at once.
        let mut mux = Mux::new(MuxConfig {
            open_at_op: 2,
            ..MuxConfig::default()
        });
        mux.start(T0);
        assert_eq!(drain(&mut mux), vec![MuxOutput::Open(StreamId(1))]);
    }

    #[test]
    fn no_hello_in_time_garbage_or_a_wrong_version_break_the_channel() {
        let mut mux = Mux::new(MuxConfig::default());
        let _ = mux.route(b"x", T0);
        drain(&mut mux);
        assert_eq!(mux.poll_timeout(), Some(at(10_000)));
        mux.handle_timeout(at(10_000));
        assert_eq!(drain(&mut mux), vec![MuxOutput::Close(StreamId(1))]);
        assert!(mux.last_break().unwrap().contains("no hello"));

        let mut mux = open_mux();
        mux.handle_data(StreamId(1), b"bash: tether-agent: not found\n", at(1));
        assert_eq!(drain(&mut mux), vec![MuxOutput::Close(StreamId(1))]);
        assert!(mux.last_break().unwrap().contains("not a channel frame"));

        let mut mux = Mux::new(MuxConfig::default());
        let _ = mux.route(b"x", T0);
        drain(&mut mux);
        mux.handle_data(
            StreamId(1),
            &Frame::new(FrameKind::Hello, 0, b"99".to_vec()).encode(),
            at(1),
        );
        assert!(!mux.is_open());
        assert!(mux.last_break().unwrap().contains("protocol"));
    }
}
