//! `tether-agent channel --root R`: one long-lived process whose stdin
//! carries framed op requests and whose stdout carries their replies
//! (`tether_core::channel::frame`), several ops in flight at once.
//!
//! Every decision is core's [`Server`] (the simulation drives the same
//! one): each request runs as the same `OpRun` a one-shot `op` would
//! (same validation, journal and idempotence), several at once, with a
//! heartbeat every [`HEARTBEAT`]. This thread polls it at its wake-ups and
//! writes its frames; a reader thread hands over stdin's bytes.
//!
//! It exits when stdin ends (the client went away: ops still in flight are
//! abandoned, as a killed one-shot exec's would be — each is idempotent),
//! when stdout is closed, or on a stream that is not frames (exit 2, the
//! reason on stderr: the stream cannot be resynchronised). The kernel
//! daemons a spawn starts are this process's children while it lives: it
//! reaps them when they exit.

use crate::linux_os::LinuxOs;
use rustix::process::{wait, WaitOptions};
use std::ffi::OsString;
use std::io::{Read, Write};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::Duration;
use tether_core::agent::Os;
use tether_core::channel::{Frame, Server, ServerOutput, HEARTBEAT};
use tether_core::time::Timestamp;

/// What the reader thread hands over.
enum Incoming {
    Bytes(Vec<u8>),
    End,
}

pub(crate) fn run(args: &[OsString]) -> u8 {
    let Some(root) = crate::flag(args, "--root") else {
        eprintln!("tether-agent channel: --root DIR is required");
        return 2;
    };
    let incoming = read_frames();
    let mut out = std::io::stdout().lock();
    let mut os = LinuxOs::new();
    let mut server = Server::new(&root, os.now());
    loop {
        server.poll(&mut os);
        while let Some(output) = server.poll_output() {
            match output {
                ServerOutput::Send { frame, .. } => {
                    if send(&mut out, &frame).is_err() {
                        return 0;
                    }
                }
                ServerOutput::Accepted { .. } => {}
                ServerOutput::Note(note) => eprintln!("tether-agent channel: {note}"),
            }
        }
        reap_children();
        let now = os.now();
        match next_incoming(&incoming, now, server.next_wake(now)) {
            Ok(Incoming::Bytes(bytes)) => {
                if let Err(e) = server.handle_input(&bytes) {
                    eprintln!("tether-agent channel: {e}");
                    return 2;
                }
            }
            Ok(Incoming::End) => return 0,
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

/// Starts the thread that reads stdin (the server cuts the frames).
fn read_frames() -> Receiver<Incoming> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let got = match stdin.read(&mut buf) {
                Ok(0) | Err(_) => Incoming::End,
                Ok(n) => Incoming::Bytes(buf[..n].to_vec()),
            };
            let end = matches!(got, Incoming::End);
            if tx.send(got).is_err() || end {
                return;
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
