//! A [`Transport`] that injects the simulation's network faults around a
//! real one: the client's driver execs through it, observations do not.
//!
//! What each armed fault does to the calls (see
//! [`tether_sim::faults::FaultKind`] for what the simulation does):
//!
//! - **partition** (until a deadline): a call made then fails at once as
//!   unreachable, without running; a reply that comes back then is
//!   dropped (the op ran, the client hears a transport error);
//! - **hold** (until a deadline): calls and replies wait for the deadline;
//! - **drop connection**: every call in flight is abandoned (its future
//!   dropped) and fails with an i/o error;
//! - **latency** (`ms`, until a deadline): each call made then waits `ms`
//!   before it runs;
//! - **slow start** (`op`, `ms`): the next call of that op waits `ms`;
//! - **reply lost** (`op`): the next call of that op runs to its end, then
//!   its reply is replaced by an i/o error;
//! - **cancel before submit registers**: the next `submit` is held back,
//!   the script is asked to cancel now, and the submit goes on once a
//!   `cancel` op has run (or after 3 s).
//!
//! Every injection is logged ([`Switch::injected`]), so a run can show
//! that its fault really happened.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tether::transport::{ExecFuture, ExecRequest, Transport};
use tether_core::client::{TransportError, TransportErrorKind};
use tether_sim::faults::OpTarget;
use tokio::sync::watch;
use tokio::time::Instant;

/// Faults armed for the calls, and requests for the script.
#[derive(Debug, Default)]
pub struct Armed {
    /// The next op matching each target has its reply dropped.
    pub reply_lost: Vec<OpTarget>,
    /// The next op matching each target starts this many ms late.
    pub slow_start: Vec<(OpTarget, u64)>,
    /// Until then, every call waits `latency_ms` first.
    pub latency_until: Option<Instant>,
    /// See `latency_until`.
    pub latency_ms: u64,
    /// Until then, calls fail and replies are dropped.
    pub partition_until: Option<Instant>,
    /// Until then, calls and replies wait.
    pub hold_until: Option<Instant>,
    /// Hold the next submit until a cancel op has run, and ask the script
    /// to cancel.
    pub cancel_before_submit: bool,
    /// A cancel op ran since the held submit arrived.
    pub cancel_op_ran: bool,
    /// The script should cancel its current cell now.
    pub cancel_now: bool,
    /// That cancel is the one asked for while a submit is held back (the
    /// cell must never run).
    pub cancel_is_early: bool,
    /// The script should cancel its cell again after it resolved.
    pub cancel_after_done: bool,
    /// The client should crash now and stay down this long (ms).
    pub crash_client: Option<u64>,
    /// What was injected, in order.
    pub injected: Vec<String>,
}

/// The switchboard shared by the fault loop, the script and the
/// transport. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Switch {
    armed: Arc<Mutex<Armed>>,
    drops: Arc<watch::Sender<u64>>,
}

impl Default for Switch {
    fn default() -> Switch {
        Switch::new()
    }
}

impl Switch {
    /// Nothing armed.
    pub fn new() -> Switch {
        Switch {
            armed: Arc::default(),
            drops: Arc::new(watch::channel(0).0),
        }
    }

    /// The armed faults.
    pub fn lock(&self) -> MutexGuard<'_, Armed> {
        // Plain values: a panic elsewhere leaves them usable.
        self.armed.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Abandons every call in flight now.
    pub fn drop_connections(&self) {
        self.drops.send_modify(|n| *n += 1);
        self.note("connections dropped".into());
    }

    /// Every injection so far.
    pub fn injected(&self) -> Vec<String> {
        self.lock().injected.clone()
    }

    fn note(&self, what: String) {
        self.lock().injected.push(what);
    }

    fn take_reply_lost(&self, kind: &str) -> bool {
        let mut a = self.lock();
        let i = a.reply_lost.iter().position(|t| t.matches(kind));
        i.map(|i| a.reply_lost.remove(i)).is_some()
    }

    fn take_slow_start(&self, kind: &str) -> Option<u64> {
        let mut a = self.lock();
        let i = a.slow_start.iter().position(|(t, _)| t.matches(kind))?;
        Some(a.slow_start.remove(i).1)
    }

    fn partitioned(&self) -> bool {
        self.lock()
            .partition_until
            .is_some_and(|u| Instant::now() < u)
    }

    async fn wait_hold(&self) {
        let until = self.lock().hold_until;
        if let Some(until) = until.filter(|u| Instant::now() < *u) {
            tokio::time::sleep_until(until).await;
        }
    }
}

/// The agent op an exec request carries (`submit`, `wait`, …), `install`
/// for the install script, empty for anything else.
pub fn op_kind(req: &ExecRequest) -> String {
    if req.argv.iter().any(|a| a == "tether-install") {
        return "install".into();
    }
    if req.argv.get(1).map(String::as_str) != Some("op") {
        return String::new();
    }
    tether_sim::client_host::request_op(&req.stdin).unwrap_or_default()
}

/// A transport with faults injected around `inner`.
pub struct Faulty {
    inner: Arc<dyn Transport>,
    switch: Switch,
}

impl Faulty {
    /// Wraps `inner`; faults come from `switch`.
    pub fn new(inner: Arc<dyn Transport>, switch: Switch) -> Faulty {
        Faulty { inner, switch }
    }
}

fn error(kind: TransportErrorKind, detail: &str) -> TransportError {
    TransportError {
        kind,
        detail: format!("{detail} (injected fault)"),
    }
}

impl Transport for Faulty {
    fn exec(&self, req: ExecRequest) -> ExecFuture<'_> {
        Box::pin(async move {
            let sw = &self.switch;
            let kind = op_kind(&req);
            if sw.partitioned() {
                sw.note(format!("{kind}: refused (partition)"));
                // Not a hot loop: the client backs off between attempts.
                tokio::time::sleep(Duration::from_millis(10)).await;
                return Err(error(TransportErrorKind::Unreachable, "partitioned"));
            }
            sw.wait_hold().await;
            let latency = {
                let a = sw.lock();
                a.latency_until
                    .is_some_and(|u| Instant::now() < u)
                    .then_some(a.latency_ms)
            };
            if let Some(ms) = latency {
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            if let Some(ms) = sw.take_slow_start(&kind) {
                sw.note(format!("{kind}: starts {ms} ms late"));
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            if kind == "submit" && std::mem::take(&mut sw.lock().cancel_before_submit) {
                sw.note("submit held back; cancel requested".into());
                {
                    let mut a = sw.lock();
                    a.cancel_op_ran = false;
                    a.cancel_now = true;
                    a.cancel_is_early = true;
                }
                for _ in 0..600 {
                    if sw.lock().cancel_op_ran {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                sw.note(format!(
                    "submit released (a cancel op ran first: {})",
                    sw.lock().cancel_op_ran
                ));
            }
            let mut drops = sw.drops.subscribe();
            drops.mark_unchanged();
            let result = tokio::select! {
                biased;
                _ = drops.changed() => {
                    sw.note(format!("{kind}: abandoned (connection dropped)"));
                    return Err(error(TransportErrorKind::Io, "connection dropped"));
                }
                r = self.inner.exec(req) => r,
            };
            let Ok(out) = result else { return result };
            if kind == "cancel" {
                sw.lock().cancel_op_ran = true;
            }
            if sw.take_reply_lost(&kind) {
                sw.note(format!("{kind}: ran, reply lost"));
                return Err(error(TransportErrorKind::Io, "reply lost"));
            }
            if sw.partitioned() {
                sw.note(format!("{kind}: ran, reply lost (partition)"));
                return Err(error(TransportErrorKind::Io, "partitioned"));
            }
            sw.wait_hold().await;
            Ok(out)
        })
    }

    fn describe(&self) -> String {
        format!("{} with injected faults", self.inner.describe())
    }
}
