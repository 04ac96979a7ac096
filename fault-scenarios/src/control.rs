//! The switchboard between the fault loop and the two hosts: armed faults
//! that the exec server applies to matching ops, and signals to the client
//! script (crash now, cancel now). Shared as `Arc<Mutex<…>>` because the
//! client's tasks must be `Send`; the world is single-threaded, so the lock
//! never waits.

use crate::faults::OpTarget;
use std::sync::{Arc, Mutex, MutexGuard};

/// Faults armed for the exec server, and requests for the client.
#[derive(Debug, Default)]
pub struct Armed {
    /// The next op matching each target has its reply dropped.
    pub reply_lost: Vec<OpTarget>,
    /// The next op matching each target starts this many ms late.
    pub slow_start: Vec<(OpTarget, u64)>,
    /// Until this virtual ms, every exec call waits `latency_ms` first.
    pub latency_until_ms: u64,
    /// See `latency_until_ms`.
    pub latency_ms: u64,
    /// Hold the next submit until a cancel op has run (or a bound passed),
    /// and ask the client to cancel.
    pub cancel_before_submit: bool,
    /// A cancel op ran since the armed submit arrived.
    pub cancel_op_ran: bool,
    /// The client should crash now and stay down this long.
    pub crash_client: Option<u64>,
    /// The client should cancel its current cell now.
    pub cancel_now: bool,
    /// The client should cancel its last resolved cell.
    pub cancel_after_done: bool,
    /// The script's cells are done: record which cell processes live.
    pub snapshot_now: bool,
    /// Virtual ms after which no fault is active any more.
    pub healed_at_ms: u64,
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

    /// Takes the first armed entry of `list` matching `kind`.
    pub fn take_reply_lost(&self, kind: &str) -> bool {
        let mut a = self.lock();
        if let Some(i) = a.reply_lost.iter().position(|t| t.matches(kind)) {
            a.reply_lost.remove(i);
            return true;
        }
        false
    }

    /// Takes the delay of the first armed slow start matching `kind`.
    pub fn take_slow_start(&self, kind: &str) -> Option<u64> {
        let mut a = self.lock();
        let i = a.slow_start.iter().position(|(t, _)| t.matches(kind))?;
        Some(a.slow_start.remove(i).1)
    }
}
