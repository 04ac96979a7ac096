//! A full disk (or a failing one) under part of the file system: while
//! it lasts, every write through [`tether_core::agent::Os`] (create,
//! write, append) to a path under it fails with an I/O error, as
//! `ENOSPC` or `EIO` would; reads, listings and removals still work.
//! Windows nest: writes work again when the last ends. The workloads'
//! own side-effect files are ground truth, not the agent's, and are
//! never refused. Where the sandbox's writes tear, a refused append may
//! put part of its bytes down first, as `write(2)` does when the space
//! runs out mid-buffer: a torn last line, or whole lines of a batch, for
//! the journal's repair.

use super::SimOs;
use tether_core::agent::OsError;

/// Which write fills the disk ([`SimOs::fill_disk_at`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FillAt {
    /// The next append of a cell's result to its journal.
    Result,
    /// The next write of a file whose name (the last part of its path)
    /// starts with this.
    Write(String),
}

impl FillAt {
    /// As a trace says it.
    pub fn describe(&self) -> String {
        match self {
            FillAt::Result => "a result".into(),
            FillAt::Write(name) => format!("a write of {name}"),
        }
    }
}

/// How [`SimOs::disk_write`] puts its bytes down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum WriteMode {
    /// A new file (`O_EXCL`).
    CreateNew,
    /// The whole file, atomically (a rename over it).
    Replace,
    /// At the file's end (made if missing).
    Append,
}

/// Is appending `data` to `path` the journaling of a cell's result?
pub(super) fn is_result_append(path: &str, data: &[u8]) -> bool {
    path.ends_with("/journal")
        && data
            .windows(super::RESULT_ENTRY.len())
            .any(|w| w == super::RESULT_ENTRY)
}

impl SimOs {
    /// Writes under `prefix` fail from now on (until [`SimOs::free_disk`]).
    pub fn fill_disk(&mut self, prefix: &str) {
        self.disk_full.push(prefix.trim_end_matches('/').to_owned());
        self.space_ran_out = false;
    }

    /// The disk under `prefix` fills at the next write `at` names, before
    /// that write: it is refused (a result with what goes with it).
    pub fn fill_disk_at(&mut self, prefix: &str, at: FillAt) {
        self.fill_at = Some((prefix.trim_end_matches('/').to_owned(), at));
    }

    /// Takes back [`SimOs::fill_disk_at`] if it did not fire.
    pub fn disarm_fill_at(&mut self) {
        self.fill_at = None;
    }

    /// Whether the disk filled at its write since the last call.
    pub fn take_filled_at(&mut self) -> bool {
        std::mem::take(&mut self.filled_at)
    }

    /// Whether the disk filled at its write and nobody took it yet.
    pub fn filled_at(&self) -> bool {
        self.filled_at
    }

    /// Fills the disk if `path` (about to be written, `data` appended if
    /// `append`) is the write [`SimOs::fill_disk_at`] waits for.
    fn fill_if_awaited(&mut self, path: &str, data: &[u8], append: bool) {
        let Some((prefix, at)) = &self.fill_at else {
            return;
        };
        let hit = match at {
            FillAt::Result => append && is_result_append(path, data),
            FillAt::Write(name) => {
                path.starts_with(prefix.as_str())
                    && path
                        .rsplit('/')
                        .next()
                        .is_some_and(|last| last.starts_with(name.as_str()))
            }
        };
        if hit {
            let prefix = prefix.clone();
            self.fill_at = None;
            self.fill_disk(&prefix);
            self.filled_at = true;
        }
    }

    /// Ends the oldest window of [`SimOs::fill_disk`].
    pub fn free_disk(&mut self) {
        if !self.disk_full.is_empty() {
            self.disk_full.remove(0);
        }
    }

    /// How many bytes of a refused append of `data` reach the file
    /// first, where the sandbox's writes tear
    /// ([`SimOsConfig::torn_writes`](super::SimOsConfig)); none elsewhere.
    /// Only the first refused append after the disk fills tears (the
    /// space ran out under it; later ones find none left). Chosen by
    /// counts, so a run replays: of one line, a third of it, two thirds
    /// or none (the count of such tears mod 3); of several lines, exactly
    /// its first line, then two thirds of it, in turn. A tear on a line boundary leaves no
    /// partial line to tell the writer that whole entries of the batch it
    /// was refused are in the file already.
    fn torn_prefix(&mut self, data: &[u8]) -> usize {
        if !self.config.torn_writes || std::mem::replace(&mut self.space_ran_out, true) {
            return 0;
        }
        let len = data.len();
        match data.iter().position(|&b| b == b'\n').map(|i| i + 1) {
            Some(end) if end < len => {
                self.batch_tears += 1;
                if self.batch_tears % 2 == 1 {
                    end
                } else {
                    len * 2 / 3
                }
            }
            _ => {
                self.line_tears += 1;
                len * usize::try_from(self.line_tears % 3).unwrap_or(0) / 3
            }
        }
    }

    /// How many writes were refused so far (the fault is applied).
    pub fn refused_writes(&self) -> u64 {
        self.refused_writes
    }

    /// Whether a write to `path` would be refused now.
    pub fn refuses_writes(&self, path: &str) -> bool {
        self.disk_full.iter().any(|p| {
            path == p
                || path
                    .strip_prefix(p.as_str())
                    .is_some_and(|r| r.starts_with('/'))
        })
    }

    /// One write to the sandbox's disk, by the agent or by a shell it
    /// runs: the fault `disk_full_at_write` fills the disk at it, a full
    /// disk refuses it (a refused append tears first, where writes tear),
    /// a read-only mount refuses it. What only the agent's own writes
    /// meet (a stopped process, a kill after the write) is its caller's.
    pub(super) fn disk_write(
        &mut self,
        path: &str,
        data: &[u8],
        mode: WriteMode,
    ) -> Result<(), OsError> {
        self.fill_if_awaited(path, data, mode == WriteMode::Append);
        if let Err(e) = self.check_write(path) {
            if mode == WriteMode::Append {
                let torn = self.torn_prefix(data);
                if torn > 0 && self.fs.exists(path) {
                    self.fs.append(path, &data[..torn])?;
                }
            }
            return Err(e);
        }
        self.writable(path)?;
        match mode {
            WriteMode::CreateNew => self.fs.create_new(path, data),
            WriteMode::Replace => self.fs.write_atomic(path, data),
            WriteMode::Append => self.fs.append(path, data),
        }
    }

    /// `Err` when a write to `path` is refused now.
    fn check_write(&mut self, path: &str) -> Result<(), OsError> {
        if self.refuses_writes(path) {
            self.refused_writes += 1;
            return Err(OsError::Other(format!(
                "writing {path}: No space left on device"
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::os::{SimOs, SimOsConfig};
    use tether_core::agent::Os;

    #[test]
    fn writes_under_a_full_disk_fail_until_it_is_freed() {
        let mut os = SimOs::new(SimOsConfig::default());
        os.create_dir_all("/var/tmp/k").unwrap();
        os.create_dir_all("/var/tmp/kx").unwrap();
        os.write_atomic("/var/tmp/k/j", b"a").unwrap();
        os.fill_disk("/var/tmp/k");
        assert!(os.append("/var/tmp/k/j", b"b").is_err());
        assert!(os.write_atomic("/var/tmp/k/j", b"b").is_err());
        assert!(os.create_new("/var/tmp/k/new", b"b").is_err());
        // Another directory that merely shares the prefix is not full.
        os.write_atomic("/var/tmp/kx/f", b"ok").unwrap();
        assert_eq!(os.read_file("/var/tmp/k/j").unwrap(), b"a");
        assert_eq!(os.refused_writes(), 3);
        os.free_disk();
        os.append("/var/tmp/k/j", b"b").unwrap();
        assert_eq!(os.read_file("/var/tmp/k/j").unwrap(), b"ab");
    }

    #[test]
    fn where_writes_tear_the_first_refused_append_may_leave_part_of_its_bytes() {
        let mut os = SimOs::new(SimOsConfig {
            torn_writes: true,
            ..SimOsConfig::default()
        });
        os.create_dir_all("/var/tmp/k").unwrap();
        os.write_atomic("/var/tmp/k/j", b"").unwrap();
        let refuse = |os: &mut SimOs, data: &[u8]| {
            os.fill_disk("/var/tmp/k");
            for _ in 0..2 {
                assert!(os.append("/var/tmp/k/j", data).is_err());
            }
            os.free_disk();
            let all = os.read_file("/var/tmp/k/j").unwrap();
            os.write_atomic("/var/tmp/k/j", b"").unwrap();
            all
        };
        // The first refused append of each fill tears, the second finds
        // no space left. One line: a third, two thirds, none, in turn;
        // several lines: exactly the first, then two thirds, in turn.
        assert_eq!(refuse(&mut os, b"123456"), b"12");
        assert_eq!(refuse(&mut os, b"12\n3456\n"), b"12\n");
        assert_eq!(refuse(&mut os, b"12\n3456\n"), b"12\n34");
        assert_eq!(refuse(&mut os, b"123456"), b"1234");
        assert_eq!(refuse(&mut os, b"123456"), b"");
        assert_eq!(refuse(&mut os, b"12\n3456\n"), b"12\n");
        os.fill_disk("/var/tmp/k");
        assert!(os.write_atomic("/var/tmp/k/j", b"x").is_err());
        assert_eq!(
            os.read_file("/var/tmp/k/j").unwrap(),
            b"",
            "atomic: all or nothing"
        );
    }
}
