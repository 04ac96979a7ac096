//! The agent's decision logic, over the [`Os`] trait: what the op commands,
//! the kernel daemon and the cell shim decide, independent of how the
//! operating system is reached.

pub mod os;

pub use os::{CellLaunch, Os, OsError, Pid, ProcInfo, Signal};
