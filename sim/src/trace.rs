//! The trace of one run: every client effect and event, exec RPC, fault and
//! process event, stamped with virtual time, as text lines. `replay` prints
//! it; the determinism check compares two of them byte for byte.
//!
//! [`entries`] splits a rendered trace back into time, actor and text, for
//! `replay --json`; it reads the text, so the trace stays the one format.
//!
//! The sink is shared by every host of the world (and by the client's tokio
//! tasks, which need `Send`), hence `Arc<Mutex<…>>`; the world is
//! single-threaded, so the lock is never contended.

use serde::Serialize;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

/// Width the actor is padded to in a trace line.
const ACTOR_WIDTH: usize = 7;

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
            "{:>5}.{:03}s {:<width$} {}",
            ms / 1000,
            ms % 1000,
            actor,
            text,
            width = ACTOR_WIDTH
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

pub use tether_scenarios::excerpt::excerpt;

/// One entry of a rendered trace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Entry {
    /// Virtual time, ms since the run began.
    pub ms: u64,
    /// Who logged it (`client`, `sandbox`, `proc`, `fault`, `oracle`, …).
    pub actor: String,
    /// What happened.
    pub text: String,
}

/// Splits a rendered trace (as [`Trace::render`] writes it) back into its
/// entries. A line that does not start like an entry continues the one
/// before it (an entry whose text held a newline), so nothing is dropped.
pub fn entries(rendered: &str) -> Vec<Entry> {
    let mut out: Vec<Entry> = Vec::new();
    for line in rendered.lines() {
        match (parse_line(line), out.last_mut()) {
            (Some(entry), _) => out.push(entry),
            (None, Some(last)) => {
                last.text.push('\n');
                last.text.push_str(line);
            }
            (None, None) => out.push(Entry {
                ms: 0,
                actor: String::new(),
                text: line.to_owned(),
            }),
        }
    }
    out
}

/// Parses `"{secs:>5}.{ms:03}s {actor:<7} {text}"`.
fn parse_line(line: &str) -> Option<Entry> {
    let (secs, rest) = line.trim_start_matches(' ').split_once('.')?;
    let millis = rest.get(..3)?;
    let rest = rest.get(3..)?.strip_prefix("s ")?;
    if secs.is_empty()
        || !secs.bytes().all(|b| b.is_ascii_digit())
        || !millis.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let ms = secs.parse::<u64>().ok()?.checked_mul(1000)? + millis.parse::<u64>().ok()?;
    let actor = rest.split(' ').next().filter(|a| !a.is_empty())?;
    let pad = ACTOR_WIDTH.saturating_sub(actor.len()) + 1;
    let text = rest.get(actor.len()..)?;
    if text.len() < pad || !text.as_bytes()[..pad].iter().all(|&b| b == b' ') {
        return None;
    }
    Some(Entry {
        ms,
        actor: actor.to_owned(),
        text: text[pad..].to_owned(),
    })
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

    #[test]
    fn entries_give_back_what_was_logged() {
        let t = Trace::new();
        t.at(1234, "client", "exec x1 submit");
        t.at(5, "sandbox", "  indented text");
        t.at(123_456_789, "longactor", "x");
        t.at(7, "fault", "");
        let mut rendered = t.render();
        rendered.push_str("a continuation line\n");
        let got = entries(&rendered);
        let want = [
            (1234, "client", "exec x1 submit"),
            (5, "sandbox", "  indented text"),
            (123_456_789, "longactor", "x"),
            (7, "fault", "\na continuation line"),
        ];
        assert_eq!(got.len(), want.len(), "{got:?}");
        for (e, (ms, actor, text)) in got.iter().zip(want) {
            assert_eq!((e.ms, e.actor.as_str(), e.text.as_str()), (ms, actor, text));
        }
    }
}
