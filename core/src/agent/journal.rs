//! The journal writer: appends entries with contiguous `n` from 1 and caps
//! the output a cell may journal.
//!
//! Only one writer owns a cell's journal at a time (the daemon before the
//! shim starts and after it is gone, the shim in between), so the next `n`
//! is recovered from the file when a writer takes over. A trailing partial
//! line (a writer that died mid-append) is cut off first, so the file stays
//! a sequence of whole lines.

use super::os::{Os, OsError};
use crate::bytes::Bytes;
use crate::protocol::{parse_journal, CellOutcome, EntryKind, JournalEntry, JournalRead, Stream};

/// Default cap on the output bytes journaled per cell: 8 MiB.
pub const DEFAULT_CAP: u64 = 8 * 1024 * 1024;

/// Appends entries to one cell's journal.
#[derive(Clone, Debug)]
pub struct JournalWriter {
    path: String,
    next_n: u64,
    output_bytes: u64,
    cap: u64,
    dropped: u64,
    done: bool,
    has_result: bool,
}

impl JournalWriter {
    /// Takes over the journal at `path` (absent is fine), keeping at most
    /// `cap` bytes of output.
    pub fn open(os: &mut dyn Os, path: &str, cap: u64) -> Result<JournalWriter, OsError> {
        let read = match os.read_file(path) {
            Ok(bytes) => {
                let read = parse_journal(&bytes);
                if read.partial_tail > 0 {
                    // Cut the torn line so the next entry starts a line.
                    os.write_atomic(path, &bytes[..bytes.len() - read.partial_tail])?;
                }
                read
            }
            Err(OsError::NotFound) => JournalRead::default(),
            Err(e) => return Err(e),
        };
        let mut w = JournalWriter {
            path: path.to_owned(),
            next_n: 1,
            output_bytes: 0,
            cap,
            dropped: 0,
            done: false,
            has_result: false,
        };
        for e in &read.entries {
            w.next_n = w.next_n.max(e.n + 1);
            match &e.kind {
                EntryKind::Output { data, .. } => w.output_bytes += data.len() as u64,
                EntryKind::Done => w.done = true,
                EntryKind::Result { .. } => w.has_result = true,
                _ => {}
            }
        }
        Ok(w)
    }

    /// True when the journal already ends with `done`.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// True when the journal holds a `result`.
    pub fn has_result(&self) -> bool {
        self.has_result
    }

    /// Appends one entry (nothing after `done`).
    pub fn push(&mut self, os: &mut dyn Os, kind: EntryKind) -> Result<(), OsError> {
        if self.done {
            return Ok(());
        }
        let is_done = matches!(kind, EntryKind::Done);
        self.has_result |= matches!(kind, EntryKind::Result { .. });
        let entry = JournalEntry {
            n: self.next_n,
            kind,
        };
        os.append(&self.path, &entry.to_line())?;
        self.next_n += 1;
        self.done = is_done;
        if is_done {
            // A cheap "resolved" flag for the daemon, which would otherwise
            // re-read a growing journal on every tick.
            os.write_atomic(&done_flag(&self.path), b"")?;
        }
        Ok(())
    }

    /// Appends output, cut at the cap; what is cut is counted and reported
    /// by [`JournalWriter::finish`] as one `clipped` entry.
    pub fn output(&mut self, os: &mut dyn Os, stream: Stream, data: &[u8]) -> Result<(), OsError> {
        if data.is_empty() {
            return Ok(());
        }
        let room = self.cap.saturating_sub(self.output_bytes);
        let keep = (data.len() as u64).min(room) as usize;
        self.dropped += (data.len() - keep) as u64;
        if keep == 0 {
            return Ok(());
        }
        self.output_bytes += keep as u64;
        self.push(
            os,
            EntryKind::Output {
                stream,
                data: Bytes(data[..keep].to_vec()),
            },
        )
    }

    /// Writes `clipped` (if output was cut), then `entries`, then `done`.
    pub fn finish(&mut self, os: &mut dyn Os, entries: Vec<EntryKind>) -> Result<(), OsError> {
        self.push_final(os, entries)?;
        self.push(os, EntryKind::Done)
    }

    /// [`JournalWriter::finish`] without `done`, and the settle flag: the
    /// result of a cancelled cell whose processes are still being killed.
    /// The daemon writes `done` once its escalation is over
    /// ([`JournalWriter::close`]), so the cell resolves when they are gone.
    pub fn settle(&mut self, os: &mut dyn Os, entries: Vec<EntryKind>) -> Result<(), OsError> {
        self.push_final(os, entries)?;
        if !self.done {
            os.write_atomic(&settle_flag(&self.path), b"")?;
        }
        Ok(())
    }

    /// `clipped` (if output was cut), then `entries`.
    fn push_final(&mut self, os: &mut dyn Os, entries: Vec<EntryKind>) -> Result<(), OsError> {
        if self.dropped > 0 {
            let dropped = self.dropped;
            self.dropped = 0;
            self.push(os, EntryKind::Clipped { dropped })?;
        }
        for e in entries {
            self.push(os, e)?;
        }
        Ok(())
    }

    /// Ends a journal another writer may have left: a `result` of
    /// `outcome` only if none is there yet (one settled before), then
    /// `extra`, then `done`.
    pub fn close(
        &mut self,
        os: &mut dyn Os,
        outcome: CellOutcome,
        extra: Vec<EntryKind>,
    ) -> Result<(), OsError> {
        let mut entries = Vec::new();
        if !self.has_result {
            entries.push(EntryKind::Result { outcome });
        }
        entries.extend(extra);
        self.finish(os, entries)
    }
}

/// The flag file written beside a journal whose `result` is written and
/// whose `done` waits for the cancel's escalation.
pub fn settle_flag(journal: &str) -> String {
    format!("{journal}.settle")
}

/// Reads a cell's journal: absent is an empty journal.
pub fn read_journal(os: &dyn Os, path: &str) -> Result<JournalRead, OsError> {
    match os.read_file(path) {
        Ok(bytes) => Ok(parse_journal(&bytes)),
        Err(OsError::NotFound) => Ok(JournalRead::default()),
        Err(e) => Err(e),
    }
}

/// The flag file written beside a journal once it holds `done`.
pub fn done_flag(journal: &str) -> String {
    format!("{journal}.done")
}

/// True when the entries hold `done`.
pub fn is_done(read: &JournalRead) -> bool {
    read.entries
        .iter()
        .any(|e| matches!(e.kind, EntryKind::Done))
}

/// The process group recorded by the `started` entry, if any.
pub fn started_pgid(read: &JournalRead) -> Option<u32> {
    read.entries.iter().find_map(|e| match e.kind {
        EntryKind::Started { pgid, .. } => Some(pgid),
        _ => None,
    })
}
