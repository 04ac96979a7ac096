//! The kernel's background log: what a cell's processes print after the
//! cell resolved (a `cmd &` job, a Python thread or subprocess) goes to
//! `{kernel}/background.log`, never into a later cell's output and never
//! to a closed pipe (which would kill the writer with SIGPIPE). The shims
//! append to it while they linger; the `logs` op reads it.
//!
//! Bounded: a writer that has appended [`CHECK_EVERY`] bytes since it last
//! looked reads the file, and one over [`CAP`] keeps its newest
//! [`KEEP`] bytes (from a line start where one is near) behind a note
//! saying how much older output was dropped. Several shims append at once
//! (each `append` is one `O_APPEND` write, so chunks never tear, but on a
//! full disk a refused write may put part of its bytes down: the writer
//! cuts that unfinished line before it appends again); a trim racing
//! another shim's append may lose that chunk, which the bound accepts.
//! A known limit: while the disk is still full the cut cannot be written,
//! and another shim whose append lands first (the disk just freed) runs
//! its line into that unfinished one, part of what the full disk lost.

use super::layout::KernelLayout;
use super::os::{Os, OsError};

/// The most the log holds, give or take [`CHECK_EVERY`] per writer.
pub const CAP: u64 = 1024 * 1024;
/// What a trim keeps.
pub const KEEP: u64 = CAP * 3 / 4;
/// How much one writer appends between two looks at the log's size.
pub const CHECK_EVERY: u64 = 64 * 1024;
/// The start of the note that heads a trimmed log.
pub const DROPPED_NOTE: &str = "[tether: ";

/// One writer of a kernel's background log.
#[derive(Clone, Debug)]
pub struct BackgroundLog {
    kernel_dir: String,
    path: String,
    since_check: u64,
    /// The bytes of an append that failed: a refused `write(2)` (a full
    /// disk) may have put a part of them down, a line nobody wrote.
    torn: Option<Vec<u8>>,
}

impl BackgroundLog {
    /// The writer for the kernel at `kernel`.
    pub fn new(kernel: &KernelLayout) -> BackgroundLog {
        BackgroundLog {
            kernel_dir: kernel.dir().to_owned(),
            path: kernel.background_log(),
            since_check: 0,
            torn: None,
        }
    }

    /// Appends `data`. Nothing is written once the kernel directory is
    /// gone (a shim lingering past its kernel's shutdown leaves no file).
    pub fn append(&mut self, os: &mut dyn Os, data: &[u8]) -> Result<(), OsError> {
        if data.is_empty() || !os.exists(&self.kernel_dir) {
            return Ok(());
        }
        if let Some(torn) = self.torn.take() {
            // Before anything more goes after it (background_log seed
            // 500303: a torn line ran into the next one).
            if let Err(e) = self.cut_torn(os, &torn) {
                self.torn = Some(torn);
                return Err(e);
            }
        }
        if let Err(e) = os.append(&self.path, data) {
            // Lost, as a failed append's bytes are; what it may have put
            // down is cut now if the disk lets it, else before the next.
            if self.cut_torn(os, data).is_err() {
                self.torn = Some(data.to_vec());
            }
            return Err(e);
        }
        self.since_check += data.len() as u64;
        if self.since_check >= CHECK_EVERY {
            self.since_check = 0;
            self.trim(os)?;
        }
        Ok(())
    }

    /// Cuts the unfinished line a failed append of `data` left at the end
    /// of the log: a tail after the last newline that starts one of
    /// `data`'s lines without being all of it. Whole lines it put down
    /// stay (they were written); a tail that is no part of `data` is
    /// someone else's line in the making, and stays.
    fn cut_torn(&self, os: &mut dyn Os, data: &[u8]) -> Result<(), OsError> {
        let text = match os.read_file(&self.path) {
            Ok(text) => text,
            Err(OsError::NotFound) => return Ok(()),
            Err(e) => return Err(e),
        };
        let start = text.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        let tail = &text[start..];
        let torn = !tail.is_empty()
            && data
                .split_inclusive(|&b| b == b'\n')
                .any(|line| line.len() > tail.len() && line.starts_with(tail));
        if torn {
            os.write_atomic(&self.path, &text[..start])?;
        }
        Ok(())
    }

    fn trim(&self, os: &mut dyn Os) -> Result<(), OsError> {
        let text = os.read_file(&self.path)?;
        if (text.len() as u64) <= CAP {
            return Ok(());
        }
        let mut cut = text.len() - KEEP as usize;
        // Start at a line if one starts within 4 KiB of the cut.
        if let Some(nl) = text[cut..].iter().take(4096).position(|&b| b == b'\n') {
            cut += nl + 1;
        }
        let mut kept = format!(
            "{DROPPED_NOTE}{cut} bytes of older background output dropped (the log keeps about {CAP} bytes)]\n"
        )
        .into_bytes();
        kept.extend_from_slice(&text[cut..]);
        os.write_atomic(&self.path, &kept)
    }
}

/// The kernel's background log as it is now (empty when nothing was
/// logged).
pub fn read(os: &dyn Os, kernel: &KernelLayout) -> Result<Vec<u8>, OsError> {
    match os.read_file(&kernel.background_log()) {
        Ok(bytes) => Ok(bytes),
        Err(OsError::NotFound) => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}
