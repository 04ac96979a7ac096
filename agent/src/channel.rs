//! `tether-agent channel --root R`: one long-lived process whose stdin
//! carries framed op requests and whose stdout carries their replies
//! (`tether_core::channel::frame`), several ops in flight at once.
//!
//! Each request is exactly what a one-shot `op` reads on stdin and runs as
//! the same [`OpRun`] (same validation, journal and idempotence); only the
//! transport differs. One thread polls every op in flight, each at its own
//! wake-up, and sends a heartbeat every [`HEARTBEAT`] so the client can
//! tell a slow op from a stalled channel. A reader thread cuts frames out
//! of stdin.
//!
//! It exits when stdin ends (the client went away: ops still in flight are
//! abandoned, as a killed one-shot exec's would be — each is idempotent),
//! when stdout is closed, or on a stream that is not frames (exit 2, the
//! reason on stderr: the stream cannot be resynchronised). The kernel
//! daemons a spawn starts are this process's children while it lives: it
//! reaps them when they exit.

use crate::linux_os::LinuxOs;
use rustix::process::{wait, WaitOptions};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{Read, Write};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::Duration;
use tether_core::agent::{OpRun, Os};
use tether_core::channel::{Decoder, Frame, FrameError, FrameKind, HEARTBEAT};
use tether_core::protocol::PROTOCOL_VERSION;
use tether_core::time::Timestamp;

/// What the reader thread hands over.
enum Incoming {
    Frame(Frame),
    End,
    Garbage(FrameError),
}

pub(crate) fn run(args: &[OsString]) -> u8 {
    let Some(root) = crate::flag(args, "--root") else {
        eprintln!("tether-agent channel: --root DIR is required");
        return 2;
    };
    let incoming = read_frames();
    let mut out = std::io::stdout().lock();
    let mut os = LinuxOs::new();
    let hello = Frame::new(
        FrameKind::Hello,
        0,
        PROTOCOL_VERSION.to_string().into_bytes(),
    );
    if send(&mut out, &hello).is_err() {
        return 0;
    }
    let mut ops: BTreeMap<u64, OpRun> = BTreeMap::new();
    let mut next_beat = os.now() + HEARTBEAT;
    loop {
        // Poll every op that is due, oldest frame first.
        let now = os.now();
        let mut finished = Vec::new();
        for (&id, op) in ops.iter_mut() {
            if op.next_wake().is_some_and(|wake| wake > now) {
                continue;
            }
            if let Some(line) = op.poll(&mut os) {
                finished.push((id, line));
            }
        }
        for (id, line) in finished {
            ops.remove(&id);
            if send(&mut out, &Frame::new(FrameKind::Reply, id, line)).is_err() {
                return 0;
            }
        }
        reap_children();
        let now = os.now();
        if now >= next_beat {
            if send(&mut out, &Frame::new(FrameKind::Beat, 0, Vec::new())).is_err() {
                return 0;
            }
            next_beat = now + HEARTBEAT;
        }
        let wake = ops
            .values()
            .map(|op| op.next_wake().unwrap_or(now))
            .chain([next_beat])
            .min()
            .unwrap_or(next_beat);
        match next_incoming(&incoming, now, wake) {
            Ok(Incoming::Frame(frame)) if frame.kind == FrameKind::Request => {
                // A repeated id replaces nothing: the client never reuses
                // one, and an op already running keeps its reply.
                ops.entry(frame.id)
                    .or_insert_with(|| OpRun::new(&root, &frame.payload));
            }
            Ok(Incoming::Frame(frame)) => {
                eprintln!(
                    "tether-agent channel: ignored a {:?} frame from the client",
                    frame.kind
                );
            }
            Ok(Incoming::End) => return 0,
            Ok(Incoming::Garbage(e)) => {
                eprintln!("tether-agent channel: {e}");
                return 2;
            }
            Err(()) => {}
        }
    }
}

/// The next frame if one arrives before `wake` (at least 1 ms from now:
/// op wake-ups are whole milliseconds); `Err` when the time came first.
fn next_incoming(
    incoming: &Receiver<Incoming>,
    now: Timestamp,
    wake: Timestamp,
) -> Result<Incoming, ()> {
    let timeout = wake
        .saturating_since(now)
        .clamp(Duration::from_millis(1), HEARTBEAT);
    match incoming.recv_timeout(timeout) {
        Ok(got) => Ok(got),
        Err(RecvTimeoutError::Timeout) => Err(()),
        Err(RecvTimeoutError::Disconnected) => Ok(Incoming::End),
    }
}

/// Starts the thread that cuts frames out of stdin.
fn read_frames() -> Receiver<Incoming> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut decoder = Decoder::new();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match stdin.read(&mut buf) {
                Ok(0) | Err(_) => {
                    let _ = tx.send(Incoming::End);
                    return;
                }
                Ok(n) => n,
            };
            decoder.push(&buf[..n]);
            loop {
                let got = match decoder.next_frame() {
                    Ok(Some(frame)) => Incoming::Frame(frame),
                    Ok(None) => break,
                    Err(e) => Incoming::Garbage(e),
                };
                let stop = matches!(got, Incoming::Garbage(_));
                if tx.send(got).is_err() || stop {
                    return;
                }
            }
        }
    });
    rx
}

fn send(out: &mut impl Write, frame: &Frame) -> std::io::Result<()> {
    out.write_all(&frame.encode())?;
    out.flush()
}

/// Reaps the daemons this process started that have exited since.
fn reap_children() {
    while let Ok(Some(_)) = wait(WaitOptions::NOHANG) {}
}
