//! Ground truth of the kernels' background logs: what late printers wrote
//! after their cell resolved (from [`crate::os::late`]), split at the
//! moment the script's `logs` op read each log, and what may have lost
//! some of it (a death of the kernel's daemon, a killed shim, a full
//! disk, a restarted sandbox).

use super::{kernel_name, Sandbox};
use tether_core::agent::Os;
use tether_core::protocol::Stream;
use tether_core::time::Timestamp;

/// Stands for every kernel in [`Sandbox::note_lossy`].
const EVERY_KERNEL: &str = "*";

/// One kernel's background truth: written before the log was read, and
/// around or after it; how many cells wrote.
pub struct BackgroundTruth {
    /// Before the read: the log must hold it.
    pub written: Vec<u8>,
    /// At the read or after: the log may hold some of it.
    pub later: Vec<u8>,
    /// Cells that wrote.
    pub writers: u32,
}

impl Sandbox {
    /// Something that may lose background output of `kernel` (`None`:
    /// of every kernel) happened.
    pub(crate) fn note_lossy(&mut self, kernel: Option<&str>, why: String) {
        self.background_lossy
            .entry(kernel.unwrap_or(EVERY_KERNEL).to_owned())
            .or_default()
            .insert(why);
    }

    /// The `logs` op of `kernel` reads its log now.
    pub(crate) fn note_logs_read(&mut self, kernel: &str) {
        let now = self.os.now();
        self.logs_reads.insert(kernel.to_owned(), now);
    }

    /// What may have lost background output of `kernel`.
    pub fn background_lossy(&self, kernel: &str) -> Vec<String> {
        [kernel, EVERY_KERNEL]
            .iter()
            .filter_map(|k| self.background_lossy.get(*k))
            .flatten()
            .cloned()
            .collect()
    }

    /// What late printers of `kernel`'s cells wrote after their cell
    /// resolved, split at the last read of its log.
    pub fn background_truth(&self, kernel: &str) -> BackgroundTruth {
        let read = self
            .logs_reads
            .get(kernel)
            .copied()
            .unwrap_or(Timestamp(u64::MAX));
        let mut truth = BackgroundTruth {
            written: Vec::new(),
            later: Vec::new(),
            writers: 0,
        };
        let mut cells = std::collections::BTreeSet::new();
        for w in self.os.late_writes() {
            if !w.background || kernel_name(&w.cell.kernel_dir) != kernel {
                continue;
            }
            cells.insert(w.cell.cell_dir.clone());
            if w.at < read {
                truth.written.extend_from_slice(&w.data);
            } else {
                truth.later.extend_from_slice(&w.data);
            }
        }
        truth.writers = u32::try_from(cells.len()).unwrap_or(u32::MAX);
        truth
    }

    /// What late printers of cell `seq` of `kernel` wrote to its stdout
    /// before it resolved: the cell's output. Only the printers of `tags`
    /// (a cell's own: another cell may have had its key before).
    pub fn early_late_stdout(&self, kernel: &str, seq: u64, tags: &[String]) -> Vec<u8> {
        let own = |data: &[u8]| {
            tags.iter()
                .any(|t| data.starts_with(format!("{t} ").as_bytes()))
        };
        self.os
            .late_writes()
            .iter()
            .filter(|w| {
                !w.background
                    && w.stream == Stream::Stdout
                    && w.cell.seq == Some(seq)
                    && kernel_name(&w.cell.kernel_dir) == kernel
                    && own(&w.data)
            })
            .flat_map(|w| w.data.iter().copied())
            .collect()
    }
}
