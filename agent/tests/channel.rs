//! `tether-agent channel` with real processes: the ops of a one-shot exec,
//! framed, several in flight on one process, each answered exactly as the
//! one-shot op answers it.

mod common;

use common::*;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};
use tether_core::channel::{Decoder, Frame, FrameKind};

/// A running channel and the frames it sent, read by a thread.
struct Channel {
    child: Child,
    stdin: Option<ChildStdin>,
    frames: Receiver<Frame>,
}

impl Channel {
    fn start(root: &Root) -> Channel {
        let mut child = Command::new(AGENT)
            .args(["channel", "--root"])
            .arg(root.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdout = child.stdout.take().unwrap();
        let (tx, frames) = mpsc::channel();
        std::thread::spawn(move || {
            let mut decoder = Decoder::new();
            let mut buf = [0u8; 4096];
            while let Ok(n) = stdout.read(&mut buf) {
                if n == 0 {
                    return;
                }
                decoder.push(&buf[..n]);
                while let Ok(Some(frame)) = decoder.next_frame() {
                    if tx.send(frame).is_err() {
                        return;
                    }
                }
            }
        });
        let stdin = child.stdin.take();
        Channel {
            child,
            stdin,
            frames,
        }
    }

    fn send_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(bytes).unwrap();
        stdin.flush().unwrap();
    }

    fn request(&mut self, frame: u64, op: Value) {
        let env = json!({"v": 1, "id": frame * 100, "op": op});
        self.send_raw(
            &Frame::new(FrameKind::Request, frame, env.to_string().into_bytes()).encode(),
        );
    }

    /// The next frame other than a beat (beats are counted).
    fn next(&mut self, beats: &mut u32) -> Frame {
        loop {
            let frame = self
                .frames
                .recv_timeout(Duration::from_secs(30))
                .expect("the channel said nothing for 30 s");
            if frame.kind == FrameKind::Beat {
                *beats += 1;
                continue;
            }
            return frame;
        }
    }

    /// Waits for the process to exit (bounded), returns its code.
    fn exit_code(&mut self) -> Option<i32> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("the channel did not exit");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn reply_of(frame: &Frame) -> Value {
    assert_eq!(frame.kind, FrameKind::Reply, "{frame:?}");
    let text = String::from_utf8(frame.payload.clone()).unwrap();
    assert!(text.ends_with('\n'), "a reply line: {text:?}");
    serde_json::from_str(&text).unwrap()
}

#[test]
fn ops_in_flight_together_are_answered_each_as_the_one_shot_op_answers() {
    let mut r = Root::new();
    r.spawn("k");
    let mut ch = Channel::start(&r);
    let mut beats = 0;
    let hello = ch.next(&mut beats);
    assert_eq!(
        (hello.kind, hello.payload.as_slice()),
        (FrameKind::Hello, &b"1"[..])
    );

    // A cell that sleeps 1.5 s, long-polled on the channel; while it is in
    // flight, a probe and a bad request are answered.
    let side = r.file("side");
    // (Silent until it ends: a long poll replies soon after the first output.)
    let code = format!(
        "sleep 1.5; echo x >> {}; echo one; echo two",
        side.display()
    );
    let code: Value = serde_json::to_value(tether_core::bytes::Bytes(code.into_bytes())).unwrap();
    ch.request(
        1,
        json!({"submit": {"kernel": "k", "wait_ms": 10_000,
            "submission": {"request_id": "req-1", "seq": 1, "code": code}}}),
    );
    ch.request(2, json!({"probe": {"kernel": "k"}}));
    ch.send_raw(&Frame::new(FrameKind::Request, 3, b"not json".to_vec()).encode());
    let mut replies = std::collections::BTreeMap::new();
    let mut order = Vec::new();
    while replies.len() < 3 {
        let f = ch.next(&mut beats);
        order.push(f.id);
        replies.insert(f.id, reply_of(&f));
    }
    assert_eq!(
        *order.last().unwrap(),
        1,
        "the long poll ends last: {order:?}"
    );
    // The envelope's own id is echoed, as by a one-shot op.
    assert_eq!(replies[&1]["id"], 100);
    let batch = &replies[&1]["reply"]["submitted"]["batch"];
    let mut entries = batch["entries"].as_array().unwrap().clone();
    let mut done = batch["done"] == true;
    let mut frame = 10;
    while !done {
        // The reply lingers 50 ms after the first output; the rest of the
        // journal comes by waits on the same channel.
        let cursor = entries.last().map_or(0, |e| e["n"].as_u64().unwrap());
        ch.request(
            frame,
            json!({"wait": {"kernel": "k", "seq": 1, "cursor": cursor, "wait_ms": 5_000}}),
        );
        frame += 1;
        let waited = reply_of(&ch.next(&mut beats));
        let batch = &waited["reply"]["waited"]["batch"];
        entries.extend(batch["entries"].as_array().unwrap().iter().cloned());
        done = batch["done"] == true;
    }
    assert_eq!(stdout(&entries), b"one\ntwo\n");
    assert!(beats >= 1, "a heartbeat during the 1.5 s wait");

    // The same probe and the same bad request as one-shot ops: the same
    // replies, ids aside.
    let one_shot_probe = r.try_op(json!({"probe": {"kernel": "k"}}));
    assert_eq!(replies[&2]["reply"], one_shot_probe["reply"]);
    let status = &replies[&2]["reply"]["probed"]["status"];
    assert_eq!(status["status"], "alive", "{status}");
    let one_shot_bad = r.raw(b"not json");
    assert_eq!(replies[&3]["error"]["kind"], one_shot_bad["error"]["kind"]);
    assert_eq!(replies[&3]["error"]["kind"], "bad_request");

    // Idempotence is the op's: the same submit again runs nothing.
    ch.request(
        4,
        json!({"submit": {"kernel": "k", "wait_ms": 2_000,
            "submission": {"request_id": "req-1", "seq": 1, "code": code}}}),
    );
    let again = reply_of(&ch.next(&mut beats));
    assert_eq!(
        again["reply"]["submitted"]["acceptance"],
        "already_accepted"
    );
    assert_eq!(std::fs::read_to_string(&side).unwrap(), "x\n", "ran once");

    // End of stdin: the channel exits 0.
    ch.stdin = None;
    assert_eq!(ch.exit_code(), Some(0));
}

#[test]
fn a_stream_that_is_not_frames_ends_the_channel_with_a_reason() {
    let r = Root::new();
    let mut ch = Channel::start(&r);
    let mut beats = 0;
    assert_eq!(ch.next(&mut beats).kind, FrameKind::Hello);
    ch.send_raw(b"{\"v\":1,\"id\":1,\"op\":\"gc\"}\n");
    assert_eq!(ch.exit_code(), Some(2));
    let mut err = String::new();
    ch.child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(err.contains("not a channel frame header"), "{err}");
}
