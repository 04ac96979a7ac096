//! The journal writer: appends entries with contiguous `n` from 1 and caps
//! the output a cell may journal.
//!
//! Only one writer owns a cell's journal at a time (the daemon before the
//! shim starts and after it is gone, the shim in between), so the next `n`
//! is recovered from the file when a writer takes over. A trailing partial
//! line (a writer that died mid-append) is cut off first, so the file stays
//! a sequence of whole lines.
//!
//! A write that fails (a full disk, an I/O error) loses nothing: the
//! entries it was to write stay queued, in order, with their numbers, and
//! go out with the next push or [`JournalWriter::flush`]; before that, a
//! torn line the failed write may have left is cut off and entries it did
//! write are not written twice. Until the queue is empty
//! ([`JournalWriter::has_unwritten`]) its owner must not leave the journal.

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
    /// Entries pushed and not yet in the file (a write failed), in order,
    /// with their numbers.
    unwritten: Vec<(u64, Vec<u8>)>,
    /// The done flag is still to write.
    flag_unwritten: bool,
    /// The settle flag is still to write.
    settle_unwritten: bool,
    /// A write failed since the file was last known to hold whole lines.
    failed: bool,
}

impl JournalWriter {
    /// Takes over the journal at `path` (absent is fine), keeping at most
    /// `cap` bytes of output.
    pub fn open(os: &mut dyn Os, path: &str, cap: u64) -> Result<JournalWriter, OsError> {
        // A torn last line is cut so the next entry starts a line; where
        // the cut cannot be written now (the disk that tore the line is
        // still full), the first write repairs it, as after a failed one:
        // taking the journal over never fails for want of space.
        let mut torn = false;
        let read = match os.read_file(path) {
            Ok(bytes) => {
                let read = parse_journal(&bytes);
                torn = read.partial_tail > 0
                    && os
                        .write_atomic(path, &bytes[..bytes.len() - read.partial_tail])
                        .is_err();
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
            unwritten: Vec::new(),
            flag_unwritten: false,
            settle_unwritten: false,
            failed: torn,
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

    /// True when nothing was ever written to the journal (or queued).
    pub fn is_empty(&self) -> bool {
        self.next_n == 1
    }

    /// True when the journal holds a `result`.
    pub fn has_result(&self) -> bool {
        self.has_result
    }

    /// Appends one entry (nothing after `done`). An entry that cannot be
    /// written now is queued, not lost: the error says the journal is
    /// behind, and the next push or [`JournalWriter::flush`] writes it.
    pub fn push(&mut self, os: &mut dyn Os, kind: EntryKind) -> Result<(), OsError> {
        self.enqueue(kind);
        self.flush(os)
    }

    /// Queues one entry (nothing after `done`).
    fn enqueue(&mut self, kind: EntryKind) {
        if self.done {
            return;
        }
        let is_done = matches!(kind, EntryKind::Done);
        self.has_result |= matches!(kind, EntryKind::Result { .. });
        let entry = JournalEntry {
            n: self.next_n,
            kind,
        };
        self.unwritten.push((self.next_n, entry.to_line()));
        self.next_n += 1;
        self.done = is_done;
        // A cheap "resolved" flag for the daemon, which would otherwise
        // re-read a growing journal on every tick.
        self.flag_unwritten |= is_done;
    }

    /// Entries (or the done flag) wait to be written.
    pub fn has_unwritten(&self) -> bool {
        !self.unwritten.is_empty() || self.flag_unwritten || self.settle_unwritten
    }

    /// Writes what waits to be written, in order.
    pub fn flush(&mut self, os: &mut dyn Os) -> Result<(), OsError> {
        if self.failed && !self.unwritten.is_empty() {
            self.repair(os)?;
        }
        if !self.unwritten.is_empty() {
            let bytes: Vec<u8> = self.unwritten.iter().flat_map(|(_, l)| l.clone()).collect();
            if let Err(e) = os.append(&self.path, &bytes) {
                self.failed = true;
                return Err(e);
            }
            self.unwritten.clear();
        }
        if self.settle_unwritten {
            os.write_atomic(&settle_flag(&self.path), b"")?;
            self.settle_unwritten = false;
        }
        if self.flag_unwritten {
            os.write_atomic(&done_flag(&self.path), b"")?;
            self.flag_unwritten = false;
        }
        Ok(())
    }

    /// After a failed write: cuts the torn line it may have left, and
    /// forgets the queued entries it did write.
    fn repair(&mut self, os: &mut dyn Os) -> Result<(), OsError> {
        let bytes = match os.read_file(&self.path) {
            Ok(bytes) => bytes,
            Err(OsError::NotFound) => Vec::new(),
            Err(e) => return Err(e),
        };
        let read = parse_journal(&bytes);
        if read.partial_tail > 0 {
            os.write_atomic(&self.path, &bytes[..bytes.len() - read.partial_tail])?;
        }
        if read.partial_tail > 0 || !rewrites_clean_tear() {
            let last = read.entries.last().map_or(0, |e| e.n);
            self.unwritten.retain(|(n, _)| *n > last);
        }
        self.failed = false;
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

    /// Writes `clipped` (if output was cut), then `entries`, then `done`
    /// (all queued first: one that cannot be written now waits).
    pub fn finish(&mut self, os: &mut dyn Os, entries: Vec<EntryKind>) -> Result<(), OsError> {
        self.enqueue_final(entries);
        self.enqueue(EntryKind::Done);
        self.flush(os)
    }

    /// [`JournalWriter::finish`] without `done`, and the settle flag: the
    /// result of a cancelled cell whose processes are still being killed.
    /// The daemon writes `done` once its escalation is over
    /// ([`JournalWriter::close`]), so the cell resolves when they are gone.
    pub fn settle(&mut self, os: &mut dyn Os, entries: Vec<EntryKind>) -> Result<(), OsError> {
        self.enqueue_final(entries);
        self.settle_unwritten |= !self.done;
        self.flush(os)
    }

    /// `clipped` (if output was cut), then `entries`, queued.
    fn enqueue_final(&mut self, entries: Vec<EntryKind>) {
        if self.dropped > 0 {
            let dropped = self.dropped;
            self.dropped = 0;
            self.enqueue(EntryKind::Clipped { dropped });
        }
        for e in entries {
            self.enqueue(e);
        }
    }

    /// Writes the done flag of a journal that holds `done` without it
    /// (its writer died between the two writes); nothing for one that
    /// does not hold `done`.
    pub fn mark_done(&mut self, os: &mut dyn Os) -> Result<(), OsError> {
        self.flag_unwritten |= self.done;
        self.flush(os)
    }

    /// Ends a journal another writer may have left: a `result` of
    /// `outcome` only if none is there yet (one settled before), then
    /// `extra`, then `done`. One that holds `done` already gets its flag
    /// if that writer died before it (tool_calls seed 501736: a shim
    /// killed right after it journaled its cell's end under a stop, whose
    /// last act left the cell open for want of the flag).
    pub fn close(
        &mut self,
        os: &mut dyn Os,
        outcome: CellOutcome,
        extra: Vec<EntryKind>,
    ) -> Result<(), OsError> {
        if self.done {
            return self.mark_done(os);
        }
        let mut entries = Vec::new();
        if !self.has_result {
            entries.push(EntryKind::Result { outcome });
        }
        entries.extend(extra);
        self.finish(os, entries)
    }
}

/// The planted bug [`crate::mutation::Mutation::JournalRewritesCleanTear`]:
/// never, without the `mutations` feature.
fn rewrites_clean_tear() -> bool {
    #[cfg(feature = "mutations")]
    {
        crate::mutation::active(crate::mutation::Mutation::JournalRewritesCleanTear)
    }
    #[cfg(not(feature = "mutations"))]
    {
        false
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

/// The `started` entry's pid, process group and start time, if any.
pub fn started(read: &JournalRead) -> Option<(u32, u32, u64)> {
    read.entries.iter().find_map(|e| match e.kind {
        EntryKind::Started {
            pid,
            pgid,
            starttime,
        } => Some((pid, pgid, starttime)),
        _ => None,
    })
}

/// The process group recorded by the `started` entry, if any.
pub fn started_pgid(read: &JournalRead) -> Option<u32> {
    read.entries.iter().find_map(|e| match e.kind {
        EntryKind::Started { pgid, .. } => Some(pgid),
        _ => None,
    })
}
