//! # tether-sim
//!
//! The deterministic simulation: the real client driver and the real agent
//! logic in a turmoil world, with injected faults and an oracle.
//!
//! - [`faults`]: fault kinds, schedules drawn per seed, shrinking;
//! - [`trace`]: the virtual-time trace of a run;
//! - [`transport`]: exec over `turmoil::net` (client call, sandbox server).

pub mod faults;
pub mod trace;
pub mod transport;
