//! # tether-sim
//!
//! The deterministic simulation: the real client driver and the real agent
//! logic in a turmoil world, with injected faults and an oracle.
//!
//! - [`faults`]: fault kinds, schedules drawn per seed, shrinking;
//! - [`trace`]: the virtual-time trace of a run;
//! - [`transport`]: exec over `turmoil::net` (client call, sandbox server);
//! - [`scenario`]: the named scenarios (client scripts, fixed faults, fault spaces);
//! - [`oracle`]: observations of a run and the invariants they must meet;
//! - [`explore`]: many seeds, in parallel and sharded, shrinking, the table.

pub mod explore;
pub mod faults;
pub mod oracle;
pub mod os;
pub mod scenario;
pub mod trace;
pub mod transport;
