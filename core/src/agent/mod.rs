//! The agent's decision logic, over the [`Os`] trait: what the op commands,
//! the kernel daemon and the cell shim decide, independent of how the
//! operating system is reached.
//!
//! - [`calls`]: tool calls (the shim's desk, answers written by an op);
//! - [`layout`]: paths of kernel and cell directories;
//! - [`journal`]: the journal writer (contiguous `n`, output cap);
//! - [`kernel`]: config, launch record, the identity check (probe);
//! - [`procs`]: which processes belong to a cell, which are protected;
//! - [`op`]: one op command ([`OpRun`]);
//! - [`daemon`]: the kernel daemon ([`Daemon`]);
//! - [`orphans`]: what a gone daemon left running, ended;
//! - [`shell`]: the script a shell cell runs;
//! - [`shim`]: the cell shim: its machines (shell cell, Python
//!   interpreter), journal and outcome decisions;
//! - [`tombstone`]: a cell's `cancel` file and its reason;
//! - [`background`]: the kernel's log of background output;
//! - [`no_tty`]: what a cell gets instead of a terminal.

pub mod background;
pub mod calls;
pub mod daemon;
pub mod journal;
pub mod kernel;
pub mod kernel_lock;
pub mod layout;
pub mod no_tty;
pub mod op;
pub mod orphans;
pub mod os;
pub mod procs;
pub mod python;
pub mod shell;
pub mod shim;
pub mod tombstone;

pub use daemon::{Daemon, DaemonStep};
pub use op::OpRun;
pub use os::{CellLaunch, Os, OsError, Pid, ProcInfo, Signal};
pub use shim::cell::{CellShim, ShimStep};
pub use shim::interp::{InterpShim, InterpStep};
pub use shim::{ExitStatus, ShimCore};

#[cfg(test)]
pub(crate) mod tests;
