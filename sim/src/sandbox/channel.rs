//! The channel in the simulation, sandbox half: `tether-agent channel` as
//! a simulated process. Each connection to [`CHANNEL_PORT`] starts with
//! the command's argv (as a streaming exec starts a command); the process
//! then runs core's [`Server`] — the same dispatch the real agent's
//! channel runs — on [`SimOs`](crate::os::SimOs), its stdin and stdout
//! being the connection. Each op on it runs as the `OpRun` a one-shot
//! exec would run, with the same faults aimed at ops (a lost or damaged
//! reply, an op's process killed: here the channel's, which carries it),
//! and the channel's own faults ([`ChannelFaults`]): a frame cut short, a
//! half-open stream, a stall, a late reply, a request run after the
//! stream that carried it ended.
//!
//! Like the real agent it exits when its stdin ends, abandoning its ops
//! (each is idempotent), unless a fault holds one back.

use super::{preemptible_step, wait_while_frozen, ExecGuard, Sandbox};
use crate::channel::CHANNEL_PORT;
use crate::control::Control;
use crate::os::preempt::Preempter;
use crate::trace::{excerpt, now_ms, Trace};
use crate::transport::{read_frame, WireRequest};
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;
use tether_core::agent::Os;
use tether_core::channel::{Frame, FrameKind, Server, ServerOutput};
use tether_core::protocol::OpKind;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

/// How often the channel process looks at its ops and its input when
/// nothing wakes it sooner (as a one-shot op's long poll does).
const TICK_MS: u64 = 5;

/// Counts of what happened on channels in one run (for the explorer's
/// table and the tests that make each channel fault happen).
pub type ChannelCounts = std::collections::BTreeMap<&'static str, u64>;

/// Accepts channel connections forever, one task each.
pub(super) async fn listen(
    sb: Rc<RefCell<Sandbox>>,
    trace: Trace,
    control: Control,
) -> std::io::Result<()> {
    let listener = turmoil::net::TcpListener::bind(("0.0.0.0", CHANNEL_PORT)).await?;
    loop {
        let (stream, _) = listener.accept().await?;
        tokio::task::spawn_local(serve(sb.clone(), trace.clone(), control.clone(), stream));
    }
}

fn count(sb: &Rc<RefCell<Sandbox>>, what: &'static str) {
    *sb.borrow_mut().channel_counts.entry(what).or_default() += 1;
}

/// What the fault switchboard says about this channel now.
struct ChannelFaults {
    control: Control,
}

impl ChannelFaults {
    fn half_open(&self) -> bool {
        now_ms() < self.control.lock().channel_half_open_until_ms
    }

    fn stalled(&self) -> bool {
        now_ms() < self.control.lock().channel_stall_until_ms
    }

    fn take<T>(&self, pick: impl FnOnce(&mut crate::control::Armed) -> &mut Vec<T>) -> Option<T> {
        let mut a = self.control.lock();
        let list = pick(&mut a);
        (!list.is_empty()).then(|| list.remove(0))
    }
}

/// How a channel process ends.
enum End {
    /// Its stdin ended (the client closed the stream) or stdout broke.
    Closed,
    /// The stream was cut by a fault.
    Cut,
    /// Killed from outside (a fault aimed at an op it carried).
    Killed,
}

async fn serve(
    sb: Rc<RefCell<Sandbox>>,
    trace: Trace,
    control: Control,
    mut stream: turmoil::net::TcpStream,
) {
    let Ok(start) = read_frame::<_, WireRequest>(&mut stream).await else {
        return;
    };
    wait_while_frozen(&sb).await;
    let argv = start.argv;
    let root = super::root_arg(&argv);
    let (pid, boot, mut server) = {
        let mut s = sb.borrow_mut();
        s.advance(now_ms());
        let runnable = argv
            .first()
            .is_some_and(|exe| s.os.exists(exe) && s.os.can_exec(exe))
            && argv.get(1).map(String::as_str) == Some("channel");
        if !runnable {
            // As `sh` would: nothing on stdout, the stream ends.
            trace.log("sandbox", "channel: the agent cannot run; the stream ends");
            return;
        }
        let Ok(pid) = s.os.begin_exec(&argv) else {
            trace.log("sandbox", "channel: fork failed; the stream ends");
            return;
        };
        s.flush_events();
        s.note_op(pid, None, None, true);
        let now = s.os.now();
        (
            pid,
            s.os.current_boot_id().to_owned(),
            Server::new(&root, now),
        )
    };
    trace.log("sandbox", format!("channel opens as pid {pid}"));
    count(&sb, "opened");
    let mut guard = ExecGuard {
        sb: sb.clone(),
        pid,
        boot,
        done: false,
    };
    let faults = ChannelFaults { control };
    let (mut stdin, mut stdout) = stream.into_split();
    // The reader: what the client writes waits here until the process
    // reads it (a half-open channel does not).
    let (input_tx, mut input) = mpsc::unbounded_channel::<Option<Vec<u8>>>();
    let reader = tokio::task::spawn_local(async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match stdin.read(&mut buf).await {
                Ok(0) | Err(_) => {
                    let _ = input_tx.send(None);
                    return;
                }
                Ok(n) => {
                    if input_tx.send(Some(buf[..n].to_vec())).is_err() {
                        return;
                    }
                }
            }
        }
    });
    // The writer: frames in order; a late reply joins the queue later.
    let (output_tx, mut output) = mpsc::unbounded_channel::<Vec<u8>>();
    let writer = tokio::task::spawn_local(async move {
        while let Some(bytes) = output.recv().await {
            if stdout.write_all(&bytes).await.is_err() || stdout.flush().await.is_err() {
                return;
            }
        }
    });
    let mut held_out: Vec<Vec<u8>> = Vec::new();
    let mut stall_counted = false;
    let mut half_open_counted = false;
    let mut kill_after_poll = false;
    // A reorder fault: the stream is gone; the process lives on until its
    // held-back ops ran (their replies go nowhere).
    let mut detached_until: Option<u64> = None;
    let end = 'run: loop {
        wait_while_frozen(&sb).await;
        let now = now_ms();
        // First what the last input started (a shutdown is noted before
        // its first step kills anything), then a poll and what it said.
        for polled in [false, true] {
            if polled && detached_until.is_none_or(|until| now >= until) {
                // Preempted only where a fault armed a pause or a kill
                // after a write: a random preemption of the channel's
                // polls would redraw every channel seed's world.
                let armed = |p: &mut Preempter| p.draw_armed(now);
                let step = move |os: &mut dyn Os| {
                    server.poll(os);
                    server
                };
                match preemptible_step(&sb, &trace, "channel", pid, &guard.boot, armed, step).await
                {
                    Some(polled) => server = polled,
                    None => {
                        guard.done = true;
                        break 'run End::Killed;
                    }
                }
            }
            if polled && std::mem::take(&mut kill_after_poll) {
                let mut s = sb.borrow_mut();
                if s.os.current_boot_id() == guard.boot && s.os.is_alive(pid) {
                    s.os.kill_from_outside(pid);
                }
                s.flush_events();
                guard.done = true;
                break 'run End::Killed;
            }
            while let Some(out) = server.poll_output() {
                match out {
                    ServerOutput::Accepted { frame, op, kernel } => {
                        count(&sb, "ops");
                        let op_kernel = kernel.as_ref().map(|k| k.as_str().to_owned());
                        sb.borrow_mut().note_op(pid, op, op_kernel, false);
                        if op == Some(OpKind::Shutdown) {
                            let kernel = kernel.map(|k| k.as_str().to_owned()).unwrap_or_default();
                            sb.borrow_mut().shutdown_seen(kernel);
                        } else if op == Some(OpKind::Logs) {
                            // The op reads the log as it runs, at this instant.
                            let kernel = kernel.map(|k| k.as_str().to_owned()).unwrap_or_default();
                            sb.borrow_mut().note_logs_read(&kernel);
                        }
                        trace.log(
                            "sandbox",
                            format!("channel {pid}: frame {frame} {}", kind_name(op)),
                        );
                        if op.is_some_and(|op| faults.control.take_kill_op(op)) {
                            trace.log(
                                "sandbox",
                                format!(
                                    "channel {pid} carrying {} KILLED from outside after its \
                                 first step (fault)",
                                    kind_name(op)
                                ),
                            );
                            count(&sb, "killed");
                            kill_after_poll = true;
                        }
                        if detached_until.is_none() {
                            if let Some(hold_ms) = faults.take(|a| &mut a.channel_reorder) {
                                trace.log(
                                    "sandbox",
                                    format!(
                                        "channel {pid}: its stream ENDS; frame {frame} starts \
                                     {hold_ms} ms late (fault)"
                                    ),
                                );
                                count(&sb, "reorder");
                                detached_until = Some(now.saturating_add(hold_ms));
                                // Both ends of the stream close: the client
                                // sees it end with this op in flight.
                                reader.abort();
                                writer.abort();
                            }
                        }
                    }
                    ServerOutput::Note(note) => {
                        trace.log("sandbox", format!("channel {pid}: {note}"));
                    }
                    ServerOutput::Send { frame, op } => {
                        let Some(bytes) = outgoing(&sb, &trace, &faults, pid, frame, op) else {
                            if detached_until.is_some() {
                                continue;
                            }
                            // As a one-shot exec's connection closes before
                            // its reply: the stream ends under every op on it.
                            break 'run End::Cut;
                        };
                        if detached_until.is_some() {
                            continue;
                        }
                        if let Some(at) = faults.take(|a| &mut a.channel_cut) {
                            let cut = bytes.len() * usize::from(at.min(999)) / 1_000;
                            trace.log(
                                "sandbox",
                                format!(
                                    "channel {pid}: stream CUT after {cut} of a frame's {} \
                                 bytes (fault)",
                                    bytes.len()
                                ),
                            );
                            count(&sb, "cut");
                            let _ = output_tx.send(bytes[..cut].to_vec());
                            break 'run End::Cut;
                        }
                        if faults.stalled() {
                            if !stall_counted {
                                trace.log("sandbox", format!("channel {pid}: STALLED (fault)"));
                                count(&sb, "stalled");
                                stall_counted = true;
                            }
                            held_out.push(bytes);
                            continue;
                        }
                        if frame_is_reply(&bytes) {
                            if let Some(ms) = faults.take(|a| &mut a.channel_late_reply) {
                                trace.log(
                                    "sandbox",
                                    format!("channel {pid}: a reply held back {ms} ms (fault)"),
                                );
                                count(&sb, "late_reply");
                                let tx = output_tx.clone();
                                tokio::task::spawn_local(async move {
                                    tokio::time::sleep(Duration::from_millis(ms)).await;
                                    let _ = tx.send(bytes);
                                });
                                continue;
                            }
                        }
                        let _ = output_tx.send(bytes);
                    }
                }
            }
        }
        if !faults.stalled() && !held_out.is_empty() {
            stall_counted = false;
            trace.log(
                "sandbox",
                format!("channel {pid}: sends {} held frames", held_out.len()),
            );
            for bytes in held_out.drain(..) {
                let _ = output_tx.send(bytes);
            }
        }
        if let Some(until) = detached_until {
            if now >= until && server.in_flight() == 0 {
                break 'run End::Closed;
            }
            sleep_tick(&sb, &server).await;
            continue;
        }
        if faults.half_open() {
            if !half_open_counted {
                trace.log("sandbox", format!("channel {pid}: stops reading (fault)"));
                count(&sb, "half_open");
                half_open_counted = true;
            }
            sleep_tick(&sb, &server).await;
            continue;
        }
        half_open_counted = false;
        let wait = tick(&sb, &server);
        tokio::select! {
            biased;
            got = input.recv() => match got {
                Some(Some(bytes)) => {
                    if let Err(e) = server.handle_input(&bytes) {
                        trace.log("sandbox", format!("channel {pid}: {e}; exits 2"));
                        break 'run End::Closed;
                    }
                }
                Some(None) | None => break 'run End::Closed,
            },
            () = tokio::time::sleep(wait) => {}
        }
    };
    reader.abort();
    match end {
        End::Killed => {}
        End::Closed | End::Cut => {
            let mut s = sb.borrow_mut();
            if s.os.current_boot_id() == guard.boot && s.os.is_alive(pid) {
                s.os.end_exec(pid, 0);
            }
            s.flush_events();
            guard.done = true;
        }
    }
    if matches!(end, End::Cut) {
        // What was written before the cut goes; then the connection ends.
        drop(output_tx);
        let _ = writer.await;
    } else {
        writer.abort();
    }
    trace.log("sandbox", format!("channel {pid} ends"));
}

/// The bytes of `frame` on their way out, after the faults aimed at the
/// op it answers (`None`: the reply is lost, the stream ends before it).
fn outgoing(
    sb: &Rc<RefCell<Sandbox>>,
    trace: &Trace,
    faults: &ChannelFaults,
    pid: tether_core::agent::Pid,
    mut frame: Frame,
    op: Option<OpKind>,
) -> Option<Vec<u8>> {
    if frame.kind != FrameKind::Reply {
        return Some(frame.encode());
    }
    let kind = kind_name(op);
    if op.is_some_and(|op| faults.control.after_op(op)) {
        trace.log(
            "sandbox",
            format!(
                "channel {pid}: {kind} ran; its reply is LOST: the stream ends before it (fault)"
            ),
        );
        count(sb, "reply_lost");
        return None;
    }
    trace.log(
        "sandbox",
        format!(
            "channel {pid}: reply frame {} {kind}: {}",
            frame.id,
            excerpt(&frame.payload, 160)
        ),
    );
    if let Some((at, flip)) = op.and_then(|op| faults.control.take_damage_reply(op)) {
        tether_scenarios::faults::damage(&mut frame.payload, at, flip);
        trace.log(
            "sandbox",
            format!(
                "channel {pid}: {kind}'s reply DAMAGED on the way (fault): {}",
                excerpt(&frame.payload, 160)
            ),
        );
        count(sb, "damaged");
    }
    Some(frame.encode())
}

fn frame_is_reply(bytes: &[u8]) -> bool {
    bytes.first() == Some(&b'R')
}

fn kind_name(op: Option<OpKind>) -> String {
    op.map_or_else(|| "?".to_owned(), |k| k.to_string())
}

/// How long the process may sleep: until its server's next wake-up, at
/// most [`TICK_MS`], at least 1 ms.
fn tick(sb: &Rc<RefCell<Sandbox>>, server: &Server) -> Duration {
    let s = sb.borrow();
    let now = s.os_time(now_ms());
    let wake = server.next_wake(now);
    let ms = wake.saturating_since(now).as_millis();
    Duration::from_millis(u64::try_from(ms).unwrap_or(TICK_MS).clamp(1, TICK_MS))
}

async fn sleep_tick(sb: &Rc<RefCell<Sandbox>>, server: &Server) {
    let wait = tick(sb, server);
    tokio::time::sleep(wait).await;
}
