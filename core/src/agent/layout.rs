//! Where the agent keeps its state: one directory per kernel under the
//! agent root, one directory per cell under its kernel. Kernel names are
//! validated [`KernelName`]s, so every path built here stays inside root.
//!
//! ```text
//! {root}/kernels/{kernel}/identity.json   who the daemon is (probe)
//!                        /config.json     lang, nonce, grace, idle timeout
//!                        /lang            the language, as text
//!                        /state/shell     the shell's snapshot (a script)
//!                        /state/note      what the next cell says first
//!                        /cells/{seq}/    submission.json, code, journal,
//!                                         cancel, launch.json, end, cgroup,
//!                                         shell.new (the cell's snapshot)
//! {root}/shut/{kernel}                    nonces of its shut-down daemons
//! ```

use crate::ids::{CellSeq, KernelName};

/// The name of a cell's tombstone (its cancel) in its directory: written
/// by a cancel, read by the shims, the daemon and the Python bootstrap.
pub const TOMBSTONE_FILE: &str = "cancel";

/// Paths of the agent root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    root: String,
}

impl Layout {
    /// The layout under `root` (an absolute directory; trailing `/` ignored).
    pub fn new(root: &str) -> Layout {
        let trimmed = root.trim_end_matches('/');
        Layout {
            root: if trimmed.is_empty() {
                "/".into()
            } else {
                trimmed.into()
            },
        }
    }

    /// `{root}/kernels`.
    pub fn kernels_dir(&self) -> String {
        format!("{}/kernels", self.root)
    }

    /// `{root}/shut/{kernel}`: the nonces under which `kernel` was shut
    /// down or whose dead daemon a fresh one replaced, one a line (see [`super::kernel::was_shut`]). Outside the
    /// kernel directory, which shutdown removes.
    pub fn shut(&self, kernel: &KernelName) -> String {
        self.kernel(kernel)
            .shut()
            .expect("a kernel directory of the layout is {root}/kernels/{kernel}")
    }

    /// The paths of one kernel.
    pub fn kernel(&self, kernel: &KernelName) -> KernelLayout {
        KernelLayout::new(&format!("{}/{}", self.kernels_dir(), kernel.as_str()))
    }
}

/// Paths of one kernel directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelLayout {
    dir: String,
}

impl KernelLayout {
    /// The layout of the kernel directory `dir` (as the daemon is given it).
    pub fn new(dir: &str) -> KernelLayout {
        KernelLayout {
            dir: dir.trim_end_matches('/').to_owned(),
        }
    }

    /// The kernel directory.
    pub fn dir(&self) -> &str {
        &self.dir
    }

    /// The kernel's shut list ([`Layout::shut`]) for a directory laid out
    /// as `{root}/kernels/{kernel}`; `None` for one laid out otherwise.
    /// How a daemon, given only its directory, finds the list.
    pub fn shut(&self) -> Option<String> {
        let (parent, name) = self.dir.rsplit_once('/')?;
        let root = parent.strip_suffix("/kernels")?;
        Some(format!(
            "{}/shut/{name}",
            if root.is_empty() { "/" } else { root }
        ))
    }

    /// `identity.json`: the daemon's [`crate::protocol::Identity`].
    pub fn identity(&self) -> String {
        format!("{}/identity.json", self.dir)
    }

    /// `config.json`: the [`super::KernelConfig`] given at spawn.
    pub fn config(&self) -> String {
        format!("{}/config.json", self.dir)
    }

    /// `wake`: a FIFO the daemon sleeps on; an op that records a
    /// submission or a tombstone writes a byte to it (see
    /// [`super::Os::wake`]).
    pub fn wake(&self) -> String {
        format!("{}/wake", self.dir)
    }

    /// `exiting`: the nonce of a daemon that decided to exit idle and is
    /// about to, written before its last look for submissions: a submit
    /// that finds it after recording its cell waits to see whether that
    /// daemon took the cell, stayed, or left it to the next daemon (see
    /// `op::Handshake`). Removed by the daemon that stays and by a spawn.
    pub fn exiting(&self) -> String {
        format!("{}/exiting", self.dir)
    }

    /// `spawning`: the pid and start time of the spawn or shutdown op at
    /// work on this kernel; they exclude each other through it (see
    /// `kernel_lock`).
    pub fn spawn_lock(&self) -> String {
        format!("{}/spawning", self.dir)
    }

    /// `lang`: the language as text.
    pub fn lang(&self) -> String {
        format!("{}/lang", self.dir)
    }

    /// `state/`: the shell kernel's state.
    pub fn state_dir(&self) -> String {
        format!("{}/state", self.dir)
    }

    /// `background.log`: what a kernel's background jobs printed after
    /// their cell resolved ([`super::background`]).
    pub fn background_log(&self) -> String {
        format!("{}/background.log", self.dir)
    }

    /// `state/shell`: the snapshot the next shell cell restores (see
    /// [`super::shell`]).
    pub fn snapshot(&self) -> String {
        format!("{}/state/shell", self.dir)
    }

    /// `state/note`: a note the next shell cell prints on stderr first.
    pub fn note(&self) -> String {
        format!("{}/state/note", self.dir)
    }

    /// `cells/`.
    pub fn cells_dir(&self) -> String {
        format!("{}/cells", self.dir)
    }

    /// `seqs/`: empty files named by the highest sequence numbers the
    /// kernel has used; the largest name is its high-water mark, kept
    /// after the cells' directories are acknowledged away (see
    /// `op::mark_used`).
    pub fn seqs_dir(&self) -> String {
        format!("{}/seqs", self.dir)
    }

    /// The paths of one cell.
    pub fn cell(&self, seq: CellSeq) -> CellLayout {
        CellLayout {
            dir: format!("{}/{}", self.cells_dir(), seq.0),
        }
    }
}

/// Paths of one cell directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CellLayout {
    dir: String,
}

impl CellLayout {
    /// The layout of the cell directory `dir` (as the shim is given it).
    pub fn from_dir(dir: &str) -> CellLayout {
        CellLayout {
            dir: dir.trim_end_matches('/').to_owned(),
        }
    }

    /// The cell directory.
    pub fn dir(&self) -> &str {
        &self.dir
    }

    /// `submission.json`: the [`crate::protocol::Submission`], created O_EXCL.
    pub fn submission(&self) -> String {
        format!("{}/submission.json", self.dir)
    }

    /// `code`: the code, byte for byte, as the cell's process reads it.
    pub fn code(&self) -> String {
        format!("{}/code", self.dir)
    }

    /// `journal`: JSON lines, see [`crate::protocol::journal`].
    pub fn journal(&self) -> String {
        format!("{}/journal", self.dir)
    }

    /// `cancel`: the tombstone; its text says why (`cancel` or `timeout`).
    pub fn cancel(&self) -> String {
        format!("{}/{TOMBSTONE_FILE}", self.dir)
    }

    /// `launch.json`: the shim the daemon started for the cell.
    pub fn launch(&self) -> String {
        format!("{}/launch.json", self.dir)
    }

    /// `cgroup`: the path of the cell's own cgroup (cgroup v2), written by
    /// the shim before the cell's main process starts, absent when no
    /// cgroup could be made (see [`super::procs::read_cgroup`]).
    pub fn cgroup(&self) -> String {
        format!("{}/cgroup", self.dir)
    }

    /// `end`: written by the shell script when the user's code reached its
    /// end (holds the last status).
    pub fn end(&self) -> String {
        format!("{}/end", self.dir)
    }

    /// `shell.new`: the snapshot the cell's shell wrote as it ended; the
    /// shim makes it the kernel's when it is complete.
    pub fn snapshot_new(&self) -> String {
        format!("{}/shell.new", self.dir)
    }

    /// `scratch.*`: where the bash wrapper lists names (the variables
    /// before the restore and at the save, the declared ones, the
    /// functions; `fn` holds a user's function named `builtin`, set aside
    /// at the save) to read them back
    /// without starting a process. One file each, written once: `>|` over
    /// a file just written makes ext4 write the old data back to disk
    /// first (its replace-by-truncate heuristic), and a cell then waited
    /// for the disk: 100-850 ms under I/O load, measured.
    pub fn scratch_files(&self) -> [String; 5] {
        ["tmp", "vars", "decl", "fns", "fn"].map(|name| format!("{}/scratch.{name}", self.dir))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_nest_under_the_root() {
        let l = Layout::new("/tmp/t/");
        let k = l.kernel(&KernelName::new("k1").unwrap());
        assert_eq!(k.dir(), "/tmp/t/kernels/k1");
        assert_eq!(
            k.cell(CellSeq(7)).journal(),
            "/tmp/t/kernels/k1/cells/7/journal"
        );
        assert_eq!(k.state_dir(), "/tmp/t/kernels/k1/state");
    }

    #[test]
    fn a_daemon_finds_its_kernels_shut_list_from_its_directory() {
        let name = KernelName::new("k1").unwrap();
        for root in ["/tmp/t", "/"] {
            let l = Layout::new(root);
            assert_eq!(l.kernel(&name).shut().as_deref(), Some(&*l.shut(&name)));
        }
        assert_eq!(Layout::new("/tmp/t").shut(&name), "/tmp/t/shut/k1");
        assert_eq!(KernelLayout::new("/elsewhere/k1").shut(), None);
    }
}
