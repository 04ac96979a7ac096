//! # tether-scenarios
//!
//! The scenario catalog, backend-agnostic: the simulation interprets it,
//! the live backends render it into real code.
//!
//! - [`workload`]: what a cell does ([`workload::Workload`]), its encoding
//!   as cell code, and its rendering to shell and Python;
//! - [`catalog`]: named workloads, one per escape class among them.

#![warn(missing_docs)]

pub mod catalog;
pub mod workload;

pub use workload::{render_python, render_shell, Step, Workload, WorkloadError};
