//! The per-cell journal: append-only JSON lines with a contiguous sequence
//! number `n` starting at 1. Readers ignore a trailing partial line (the
//! writer may be mid-append) and report anything else that is wrong.

use crate::bytes::Bytes;
use crate::ids::RequestId;
use serde::{Deserialize, Serialize};

use super::reply::CellOutcome;

/// Which output stream a chunk came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// What one journal line says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum EntryKind {
    /// The cell was taken for running.
    Accepted {
        /// The submission's request id.
        request_id: RequestId,
    },
    /// The cell's main process started.
    Started {
        /// Its pid.
        pid: u32,
        /// Its process group (= its session).
        pgid: u32,
        /// Its start time, so the pid is not confused with a later one.
        starttime: u64,
    },
    /// Output, exactly as produced.
    Output {
        /// Which stream.
        stream: Stream,
        /// The bytes.
        data: Bytes,
    },
    /// Output past the per-cell cap was dropped.
    Clipped {
        /// How many bytes were dropped.
        dropped: u64,
    },
    /// Processes of the cell still running when it resolved (still owned:
    /// they die with cancel, reset, shutdown and idle reaping).
    Leftovers {
        /// Their pids.
        pids: Vec<u32>,
    },
    /// Processes of a cancelled cell that were still there after the
    /// grace period and a bound of KILL rounds (a process in
    /// uninterruptible sleep, say): the cancel resolved without them.
    Unkillable {
        /// Their pids.
        pids: Vec<u32>,
    },
    /// Code in the cell called a host tool (see [`super::calls`]); the
    /// shim checked the caller's credential and the limits.
    ToolCall {
        /// The call's id, unique in the cell.
        id: String,
        /// The tool.
        name: String,
        /// Its arguments.
        args: serde_json::Value,
    },
    /// The call's answer reached the sandbox (the caller can read it): a
    /// resumed client does not answer it again.
    ToolAnswered {
        /// The call.
        id: String,
    },
    /// How the cell ended.
    Result {
        /// The outcome.
        outcome: CellOutcome,
    },
    /// Nothing more will be written.
    Done,
}

/// One journal line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalEntry {
    /// Contiguous per cell, from 1.
    pub n: u64,
    /// What it says.
    #[serde(flatten)]
    pub kind: EntryKind,
}

impl JournalEntry {
    /// The entry as one JSON line, newline included.
    pub fn to_line(&self) -> Vec<u8> {
        // Serialising plain data to a Vec cannot fail.
        let mut line = serde_json::to_vec(self).unwrap_or_default();
        line.push(b'\n');
        line
    }
}

/// The result of reading a journal file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JournalRead {
    /// Entries of complete, well-formed lines, in file order.
    pub entries: Vec<JournalEntry>,
    /// Bytes of a trailing line without its newline (a write in progress).
    pub partial_tail: usize,
    /// Complete lines that could not be read, by 1-based line number.
    pub bad_lines: Vec<(usize, String)>,
}

/// Reads journal bytes. Never panics; a trailing partial line is skipped,
/// a malformed complete line is reported, never silently dropped.
pub fn parse_journal(bytes: &[u8]) -> JournalRead {
    let mut read = JournalRead::default();
    let complete_len = match bytes.iter().rposition(|&b| b == b'\n') {
        Some(last_newline) => last_newline + 1,
        None => 0,
    };
    read.partial_tail = bytes.len() - complete_len;
    for (index, line) in bytes[..complete_len].split(|&b| b == b'\n').enumerate() {
        if line.is_empty() {
            continue;
        }
        match serde_json::from_slice::<JournalEntry>(line) {
            Ok(entry) => read.entries.push(entry),
            Err(e) => read.bad_lines.push((index + 1, e.to_string())),
        }
    }
    read
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trailing_partial_line_is_skipped_and_bad_lines_reported() {
        let a = JournalEntry {
            n: 1,
            kind: EntryKind::Done,
        }
        .to_line();
        let mut bytes = a.clone();
        bytes.extend_from_slice(b"{not json}\n");
        bytes.extend_from_slice(&a[..5]);
        let read = parse_journal(&bytes);
        assert_eq!(read.entries.len(), 1);
        assert_eq!(read.partial_tail, 5);
        assert_eq!(read.bad_lines.len(), 1);
        assert_eq!(read.bad_lines[0].0, 2);
    }

    #[test]
    fn output_bytes_survive_exactly() {
        let e = JournalEntry {
            n: 7,
            kind: EntryKind::Output {
                stream: Stream::Stderr,
                data: Bytes(vec![0xff, b'\n', 0]),
            },
        };
        let read = parse_journal(&e.to_line());
        assert_eq!(read.entries, vec![e]);
    }
}
