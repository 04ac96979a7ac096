//! The trace of one run: every client effect and event, exec RPC, fault and
//! process event, stamped with virtual time, as text lines. `replay` prints
//! it; the determinism check compares two of them byte for byte.
//!
//! The sink is shared by every host of the world (and by the client's tokio
//! tasks, which need `Send`), hence `Arc<Mutex<…>>`; the world is
//! single-threaded, so the lock is never contended.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

/// A shared, append-only trace.
#[derive(Clone, Default)]
pub struct Trace {
    lines: Arc<Mutex<Vec<String>>>,
}

impl Trace {
    /// An empty trace.
    pub fn new() -> Trace {
        Trace::default()
    }

    /// Appends one line from `actor` at virtual time `ms`.
    pub fn at(&self, ms: u64, actor: &str, text: impl std::fmt::Display) {
        let mut line = String::new();
        let _ = write!(
            line,
            "{:>5}.{:03}s {:<7} {}",
            ms / 1000,
            ms % 1000,
            actor,
            text
        );
        if let Ok(mut lines) = self.lines.lock() {
            lines.push(line);
        }
    }

    /// Appends one line at the current virtual time of the host this runs on
    /// (zero outside a simulation).
    pub fn log(&self, actor: &str, text: impl std::fmt::Display) {
        self.at(now_ms(), actor, text);
    }

    /// Every line so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// The whole trace as text, one line per entry.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for line in self.lines() {
            out.push_str(&line);
            out.push('\n');
        }
        out
    }
}

/// Virtual milliseconds since the simulation began, read on a host; zero
/// outside a simulation.
pub fn now_ms() -> u64 {
    turmoil::sim_elapsed()
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Shortens bytes for a trace line: at most `max` characters, control
/// characters escaped (so one entry stays one line).
pub fn excerpt(bytes: &[u8], max: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut out = String::new();
    for (i, c) in text.chars().enumerate() {
        if i == max {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_carry_time_and_actor() {
        let t = Trace::new();
        t.at(1234, "client", "exec x1 submit");
        t.at(5, "fault", "partition");
        assert_eq!(
            t.render(),
            "    1.234s client  exec x1 submit\n    0.005s fault   partition\n"
        );
        assert_eq!(excerpt(b"ab\ncd", 3), "ab\\n…");
    }
}
