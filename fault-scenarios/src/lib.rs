//! # tether-scenarios
//!
//! The harness runtime, backend-agnostic: what a run does and how it is
//! judged, whichever host runs it (the turmoil simulation in `tether-sim`,
//! real processes and containers in `tether-live`).
//!
//! - [`workload`]: what a cell does ([`workload::Workload`]), its encoding
//!   as cell code, and its rendering to shell and Python;
//! - [`catalog`]: named workloads, one per escape class among them;
//! - [`scenario`]: the named scenarios (client scripts, fixed faults,
//!   fault spaces);
//! - [`shell_model`]: a shell kernel's state and what its save and
//!   restore keep under bash and dash, and the differential corpus;
//! - [`swarm`]: the world a seed draws (sandbox configuration, client
//!   knobs, fault density);
//! - [`faults`]: fault kinds, schedules drawn per seed, shrinking;
//! - [`control`]: the switchboard between a host's fault loop, its
//!   transport or sandbox, and the client script;
//! - [`observe`]: what the client saw, and the client's half of the
//!   observations;
//! - [`script`]: the one client script, over a small [`script::Host`]
//!   trait each host implements;
//! - [`oracle`]: observations of a run and the invariants they must meet;
//! - [`outages`]: what a fault schedule does to the client's execs, the
//!   oracle's measure of an honest `unknown`;
//! - [`explore`]: the explorer, over any host's way of running one seed:
//!   seeds in parallel and sharded, progress, shrinking, the table, the
//!   replay command of each failure;
//! - [`race`]: race files (a reviewer's race kept as JSON), read, checked
//!   and written;
//! - [`excerpt`]: one-line excerpts of bytes for traces and reports.

#![warn(missing_docs)]

pub mod catalog;
pub mod control;
pub mod drawn;
pub mod excerpt;
pub mod explore;
pub mod faults;
pub mod observe;
pub mod oracle;
pub mod outages;
pub mod race;
pub mod scenario;
pub mod script;
pub mod shell_model;
pub mod swarm;
pub mod workload;

pub use workload::{render_python, render_shell, Step, Workload, WorkloadError};
