//! The persistent multiplexer (`tether mux`): a per-sandbox background
//! process on the client machine that keeps the channel open across
//! `tether` invocations, as OpenSSH's `ControlPersist` keeps a master
//! connection. This module holds its decisions, sans-IO:
//!
//! - [`wire`]: what a `tether` process and the multiplexer say over the
//!   unix socket (one exec call per connection), acknowledged within
//!   [`ACK_WITHIN`];
//! - [`Idle`]: when the multiplexer exits (no connection for its idle
//!   period);
//! - [`on_connect`]: what a `tether` does with the outcome of connecting
//!   to the socket (use it; run without it and start one; run without it
//!   and say why).
//!
//! The multiplexer holds no state of its own that matters: a `tether` that
//! loses it mid-op sees a transport error (the op may have run) and goes on
//! over its own transport; the client's retries, idempotent ops, records
//! and `tether resume` do the rest, as after a client crash.

pub mod wire;

use crate::time::Timestamp;
use std::io::ErrorKind;
use std::time::Duration;

/// How long an unused multiplexer lives by default.
pub const DEFAULT_IDLE: Duration = Duration::from_secs(600);

/// How long a `tether` waits for the multiplexer to acknowledge a request
/// ([`wire::ACK`], sent once the request is read) before it counts as hung
/// (stopped, wedged): the call is then a transport error (it may have
/// been read) and the `tether` goes on over its own transport, so a hung
/// multiplexer costs at most this, never the op's whole deadline.
pub const ACK_WITHIN: Duration = Duration::from_secs(3);

/// The multiplexer's idle clock: it exits once no connection was open for
/// `idle_after`.
///
/// Drain order: call [`Idle::handle_begin`]/[`Idle::handle_end`] as
/// connections come and go, sleep until [`Idle::poll_timeout`], then ask
/// [`Idle::expired`]. Time never goes backwards.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Idle {
    idle_after: Duration,
    active: u64,
    since: Timestamp,
}

impl Idle {
    /// A clock that starts idle at `now`.
    pub fn new(idle_after: Duration, now: Timestamp) -> Idle {
        Idle {
            idle_after,
            active: 0,
            since: now,
        }
    }

    /// A connection opened.
    pub fn handle_begin(&mut self) {
        self.active += 1;
    }

    /// A connection closed at `now`.
    pub fn handle_end(&mut self, now: Timestamp) {
        self.active = self.active.saturating_sub(1);
        if self.active == 0 {
            self.since = now;
        }
    }

    /// When to look again (`None` while a connection is open).
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        (self.active == 0).then(|| self.since + self.idle_after)
    }

    /// Whether the multiplexer should exit now.
    #[must_use]
    pub fn expired(&self, now: Timestamp) -> bool {
        self.poll_timeout().is_some_and(|at| now >= at)
    }
}

/// What a `tether` does after trying to connect to the socket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attach {
    /// Send the ops through the multiplexer.
    Use,
    /// Run on this process's own transport now, and start a multiplexer
    /// for the next `tether`; `note` (if any) tells the user why.
    StartOne {
        /// Why there was none (`None` on first use: nothing to say).
        note: Option<String>,
    },
    /// Run on this process's own transport; do not start a multiplexer
    /// (it could not bind there either). `note` says what to fix.
    Without {
        /// What is wrong.
        note: String,
    },
}

/// The decision for a connect attempt to `socket` that gave `outcome`
/// (`Ok` when it connected). Never waits: a stale socket (its process is
/// gone) refuses at once, so a `tether` never hangs on it.
pub fn on_connect(socket: &str, outcome: Result<(), ErrorKind>) -> Attach {
    match outcome {
        Ok(()) => Attach::Use,
        Err(ErrorKind::NotFound) => Attach::StartOne { note: None },
        Err(ErrorKind::ConnectionRefused) => Attach::StartOne {
            note: Some(format!(
                "the background process for this sandbox does not answer at {socket} \
                 (a stale socket: its process is gone); running without it and starting \
                 a new one"
            )),
        },
        Err(other) => Attach::Without {
            note: format!(
                "cannot use the background process's socket {socket} ({other}); running \
                 without it. Remove the file if it is not a socket, or pass --persist off"
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_counts_from_the_last_connection_closed() {
        let mut idle = Idle::new(Duration::from_secs(10), Timestamp(0));
        assert_eq!(idle.poll_timeout(), Some(Timestamp(10_000)));
        idle.handle_begin();
        idle.handle_begin();
        assert_eq!(idle.poll_timeout(), None);
        assert!(!idle.expired(Timestamp(50_000)));
        idle.handle_end(Timestamp(51_000));
        assert_eq!(idle.poll_timeout(), None, "one connection still open");
        idle.handle_end(Timestamp(52_000));
        assert!(!idle.expired(Timestamp(61_999)));
        assert!(idle.expired(Timestamp(62_000)));
    }

    #[test]
    fn a_stale_socket_starts_a_new_one_with_a_note_and_a_bad_one_does_not() {
        assert_eq!(on_connect("s", Ok(())), Attach::Use);
        assert_eq!(
            on_connect("s", Err(ErrorKind::NotFound)),
            Attach::StartOne { note: None }
        );
        let Attach::StartOne { note: Some(note) } =
            on_connect("s", Err(ErrorKind::ConnectionRefused))
        else {
            panic!("a refused connect is a stale socket")
        };
        assert!(note.contains("at s (a stale socket"), "{note}");
        let Attach::Without { note } = on_connect("s", Err(ErrorKind::PermissionDenied)) else {
            panic!("a socket we cannot use is not replaced")
        };
        assert!(note.contains("--persist off"), "{note}");
    }
}
