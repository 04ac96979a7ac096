//! A [`Transport`] that injects the simulation's network faults around a
//! real one: the client's driver execs through it, observations do not.
//!
//! What each armed fault does to the calls (see
//! [`tether_scenarios::faults::FaultKind`] for what the simulation does):
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
use tether_scenarios::control::{Armed, Control};
use tokio::sync::watch;
use tokio::time::Instant;

/// The switchboard shared by the fault loop, the script and the
/// transport: the runtime's [`Control`] (deadlines in ms since the run
/// began), and the signal that drops every connection. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Switch {
    control: Control,
    drops: Arc<watch::Sender<u64>>,
    /// Shared by every clone: the transport and the run see one clock.
    start: Arc<Mutex<Instant>>,
}

impl Switch {
    /// Nothing armed; the run begins now.
    pub fn new() -> Switch {
        Switch {
            control: Control::new(),
            drops: Arc::new(watch::channel(0).0),
            start: Arc::new(Mutex::new(Instant::now())),
        }
    }

    /// The run begins now (fault times count from here).
    pub fn restart_clock(&self) {
        *self.start.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    /// Ms since the run began.
    pub fn now_ms(&self) -> u64 {
        u64::try_from(self.start().elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// When the run began.
    pub fn start(&self) -> Instant {
        *self.start.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The switchboard.
    pub fn control(&self) -> &Control {
        &self.control
    }

    /// The armed faults.
    pub fn lock(&self) -> MutexGuard<'_, Armed> {
        self.control.lock()
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

    /// Logs one line, stamped with the run's ms.
    pub fn note(&self, what: String) {
        let at = self.now_ms();
        self.lock().injected.push(format!("{at} ms: {what}"));
    }

    fn partitioned(&self) -> bool {
        self.now_ms() < self.lock().partition_until_ms
    }

    async fn wait_hold(&self) {
        let until = self.lock().hold_until_ms;
        let now = self.now_ms();
        if now < until {
            tokio::time::sleep(Duration::from_millis(until - now)).await;
        }
    }
}

impl Default for Switch {
    fn default() -> Switch {
        Switch::new()
    }
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
            let op = req.op.map(|op| op.kind);
            let kind = op.map_or_else(|| "exec".to_owned(), |k| k.to_string());
            if sw.partitioned() {
                sw.note(format!("{kind}: refused (partition)"));
                // Not a hot loop: the client backs off between attempts.
                tokio::time::sleep(Duration::from_millis(10)).await;
                return Err(error(TransportErrorKind::Unreachable, "partitioned"));
            }
            sw.wait_hold().await;
            let latency = {
                let now = sw.now_ms();
                let a = sw.lock();
                (now < a.latency_until_ms).then_some(a.latency_ms)
            };
            if let Some(ms) = latency {
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            if let Some(op) = op {
                sw.control.before_op(op, |what| sw.note(what)).await;
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
            if op.is_some_and(|op| sw.control.after_op(op)) {
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
