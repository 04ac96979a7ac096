//! The switchboard between a host's fault loop, the place where faults hit
//! ops (the simulation's exec server, the live faulty transport) and the
//! client script: armed faults, and signals to the script (crash now,
//! cancel now). Shared as `Arc<Mutex<…>>` because the client's tasks must
//! be `Send`; the lock is only ever held for a few field updates.

use crate::faults::OpTarget;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tether_core::protocol::OpKind;

/// Faults armed for the exec server, and requests for the client.
#[derive(Debug, Default)]
pub struct Armed {
    /// The next op matching each target has its reply dropped.
    pub reply_lost: Vec<OpTarget>,
    /// The next op matching each target has its reply dropped, and the
    /// sandbox is replaced at once (the simulation's `ReplacedAfterOp`).
    pub replaced_after_op: Vec<OpTarget>,
    /// Replace the sandbox now (the host's fault loop takes it).
    pub replace_now: bool,
    /// The next op matching each target starts this many ms late.
    pub slow_start: Vec<(OpTarget, u64)>,
    /// Until this ms, every exec call waits `latency_ms` first.
    pub latency_until_ms: u64,
    /// Until this ms, exec calls fail and replies are dropped (live; the
    /// simulation partitions its network instead).
    pub partition_until_ms: u64,
    /// Until this ms, exec calls and replies wait (live; the simulation
    /// holds its network instead).
    pub hold_until_ms: u64,
    /// See `latency_until_ms`.
    pub latency_ms: u64,
    /// Hold the next submit until a cancel op has run (or a bound passed),
    /// and ask the client to cancel.
    pub cancel_before_submit: bool,
    /// Hold the next shell cell's shim before its first look and ask the
    /// client to cancel (the simulation's `CancelPoint::BeforeCellStarts`).
    pub cancel_before_start: bool,
    /// Ask the client to cancel as the next result is appended to a
    /// journal (the simulation's `CancelPoint::AsResultIsJournaled`).
    pub cancel_at_result: bool,
    /// A cancel op ran since the armed submit arrived.
    pub cancel_op_ran: bool,
    /// The client should crash now and stay down this long.
    pub crash_client: Option<u64>,
    /// The client should cancel its current cell now.
    pub cancel_now: bool,
    /// That cancel is the one asked for while a submit is held back (the
    /// cell must never run).
    pub cancel_is_early: bool,
    /// The client should cancel its last resolved cell.
    pub cancel_after_done: bool,
    /// The script's cells are done: record which cell processes live.
    pub snapshot_now: bool,
    /// Ms after which no fault is active any more.
    pub healed_at_ms: u64,
    /// What a live host injected, in order, for its report (the
    /// simulation writes its trace instead).
    pub injected: Vec<String>,
    /// The next op matching each target is killed (SIGKILL from outside)
    /// after its first step.
    pub kill_op: Vec<OpTarget>,
    /// The next op matching each target has its reply damaged: (target,
    /// where in thousandths, 0 to cut or the XOR mask).
    pub damage_reply: Vec<(OpTarget, u16, u8)>,
    /// The next frame a channel sends is cut at this many thousandths of
    /// its length, and the channel ends.
    pub channel_cut: Vec<u16>,
    /// Until this ms, the channel's sandbox end reads nothing.
    pub channel_half_open_until_ms: u64,
    /// Until this ms, the channel's sandbox end sends nothing.
    pub channel_stall_until_ms: u64,
    /// The next reply on a channel is held back this many ms.
    pub channel_late_reply: Vec<u64>,
    /// The next request on a channel starts this many ms late, after the
    /// channel's stream ended.
    pub channel_reorder: Vec<u64>,
    /// Every run of the client's tool handler (ground truth: the script
    /// counts them as they happen, across client processes).
    pub tool_runs: Vec<crate::oracle::ToolRunObs>,
}

/// Shared handle on [`Armed`]. The client script polls it every few
/// virtual milliseconds.
#[derive(Clone, Debug, Default)]
pub struct Control {
    armed: Arc<Mutex<Armed>>,
}

impl Control {
    /// A fresh switchboard.
    pub fn new() -> Control {
        Control::default()
    }

    /// The armed faults.
    pub fn lock(&self) -> MutexGuard<'_, Armed> {
        // A poisoned lock means a host panicked; the run is already lost and
        // the data is still plain values.
        self.armed.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Disarms what was armed for ops or calls that never came: the
    /// script's faults are over once it runs its liveness cells.
    pub fn disarm_script_faults(&self) {
        let mut a = self.lock();
        a.reply_lost.clear();
        a.replaced_after_op.clear();
        a.slow_start.clear();
        a.cancel_before_submit = false;
        a.cancel_before_start = false;
        a.cancel_at_result = false;
        a.cancel_now = false;
        a.cancel_is_early = false;
        a.cancel_after_done = false;
        a.crash_client = None;
        a.kill_op.clear();
        a.damage_reply.clear();
        a.channel_cut.clear();
        a.channel_late_reply.clear();
        a.channel_reorder.clear();
    }

    /// Takes the first armed lost reply matching `kind`.
    pub fn take_reply_lost(&self, kind: OpKind) -> bool {
        take_first(&mut self.lock().reply_lost, kind)
    }

    /// Takes the first armed op kill matching `kind`.
    pub fn take_kill_op(&self, kind: OpKind) -> bool {
        take_first(&mut self.lock().kill_op, kind)
    }

    /// Takes the first armed reply damage matching `kind`: (where in
    /// thousandths, 0 to cut or the XOR mask).
    pub fn take_damage_reply(&self, kind: OpKind) -> Option<(u16, u8)> {
        let mut a = self.lock();
        let i = a
            .damage_reply
            .iter()
            .position(|(t, _, _)| t.matches(kind))?;
        let (_, at, flip) = a.damage_reply.remove(i);
        Some((at, flip))
    }

    /// Takes the delay of the first armed slow start matching `kind`.
    pub fn take_slow_start(&self, kind: OpKind) -> Option<u64> {
        let mut a = self.lock();
        let i = a.slow_start.iter().position(|(t, _)| t.matches(kind))?;
        Some(a.slow_start.remove(i).1)
    }

    /// What the armed faults do to an op of `kind` before it runs, where
    /// the host runs ops (the simulation's exec server, the live faulty
    /// transport): an armed slow start waits first; a submit armed to be
    /// cancelled before it registers asks the script to cancel now and is
    /// held until a cancel op has run (3 s at most). `note` hears each.
    pub async fn before_op(&self, kind: OpKind, note: impl Fn(String)) {
        if let Some(ms) = self.take_slow_start(kind) {
            note(format!("{kind} starts {ms} ms late (fault)"));
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        if kind != OpKind::Submit || !std::mem::take(&mut self.lock().cancel_before_submit) {
            return;
        }
        note("submit held back; the client cancels now (fault)".into());
        {
            let mut a = self.lock();
            a.cancel_op_ran = false;
            a.cancel_now = true;
            a.cancel_is_early = true;
        }
        for _ in 0..600 {
            if self.lock().cancel_op_ran {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        note("submit released".into());
    }

    /// An op of `kind` ran: `true` when its reply is to be lost, because
    /// the reply is, or because the sandbox is to be replaced before it
    /// leaves (then `replace_now` asks the host to). (A cancel op releases
    /// a held submit.)
    pub fn after_op(&self, kind: OpKind) -> bool {
        let mut a = self.lock();
        if kind == OpKind::Cancel {
            a.cancel_op_ran = true;
        }
        if take_first(&mut a.replaced_after_op, kind) {
            a.replace_now = true;
            return true;
        }
        take_first(&mut a.reply_lost, kind)
    }
}

/// Takes the first of `armed` that matches an op of `kind`.
fn take_first(armed: &mut Vec<OpTarget>, kind: OpKind) -> bool {
    match armed.iter().position(|t| t.matches(kind)) {
        Some(i) => {
            armed.remove(i);
            true
        }
        None => false,
    }
}
