//! A full disk (or a failing one) under part of the file system: while
//! it lasts, every write through [`tether_core::agent::Os`] (create,
//! write, append) to a path under it fails with an I/O error, as
//! `ENOSPC` or `EIO` would; reads, listings and removals still work.
//! Windows nest: writes work again when the last ends. The workloads'
//! own side-effect files are ground truth, not the agent's, and are
//! never refused. Where the sandbox's writes tear, a refused append may
//! put part of its bytes down first, as `write(2)` does when the space
//! runs out mid-buffer: a torn last line for the journal's repair.

use super::SimOs;
use tether_core::agent::OsError;

impl SimOs {
    /// Writes under `prefix` fail from now on (until [`SimOs::free_disk`]).
    pub fn fill_disk(&mut self, prefix: &str) {
        self.disk_full.push(prefix.trim_end_matches('/').to_owned());
    }

    /// Ends the oldest window of [`SimOs::fill_disk`].
    pub fn free_disk(&mut self) {
        if !self.disk_full.is_empty() {
            self.disk_full.remove(0);
        }
    }

    /// How many bytes of a refused append of `len` bytes reach the file
    /// first: none, a third or two thirds of them in turn (by the count
    /// of refused writes, so a run replays), where the sandbox's writes
    /// tear ([`SimOsConfig::torn_writes`](super::SimOsConfig)); none
    /// elsewhere.
    pub(super) fn torn_prefix(&self, len: usize) -> usize {
        if !self.config.torn_writes {
            return 0;
        }
        let share = usize::try_from(self.refused_writes % 3).unwrap_or(0);
        len * share / 3
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

    /// `Err` when a write to `path` is refused now.
    pub(super) fn check_write(&mut self, path: &str) -> Result<(), OsError> {
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
    fn where_writes_tear_a_refused_append_may_leave_part_of_its_bytes() {
        let mut os = SimOs::new(SimOsConfig {
            torn_writes: true,
            ..SimOsConfig::default()
        });
        os.create_dir_all("/var/tmp/k").unwrap();
        os.write_atomic("/var/tmp/k/j", b"").unwrap();
        os.fill_disk("/var/tmp/k");
        for _ in 0..3 {
            assert!(os.append("/var/tmp/k/j", b"123456\n").is_err());
        }
        // A third of the bytes, then two thirds, then none (the count of
        // refused writes: 1, 2, 3); never the whole line.
        assert_eq!(os.read_file("/var/tmp/k/j").unwrap(), b"121234");
        assert!(os.write_atomic("/var/tmp/k/j", b"x").is_err());
        assert_eq!(
            os.read_file("/var/tmp/k/j").unwrap(),
            b"121234",
            "atomic: all or nothing"
        );
    }
}
