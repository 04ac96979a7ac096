//! # tether-sim
//!
//! The deterministic simulation: the real client driver and the real agent
//! logic in a turmoil world, with injected faults and an oracle.
//!
//! - [`faults`]: fault kinds, schedules drawn per seed, shrinking;
//! - [`trace`]: the virtual-time trace of a run;
//! - [`transport`]: exec over `turmoil::net` (client call, sandbox server);
//! - [`scenario`]: the named scenarios (client scripts, fixed faults, fault spaces);
//! - [`swarm`]: the world each seed draws (sandbox settings, client knobs,
//!   fault density);
//! - [`oracle`]: observations of a run and the invariants they must meet;
//! - [`observe`]: what the client saw, and the client's half of the observations
//!   (shared with the live runner);
//! - [`explore`]: many seeds, in parallel and sharded, shrinking, the table;
//! - [`race`]: race files (a reviewer's race kept as JSON);
//! - [`corpus`]: the race files of `sim/races/`, embedded, replayed by
//!   every exploration;
//! - [`control`]: armed faults shared by the fault loop and the hosts;
//! - [`channel`]: the real client's channel over a simulated stream;
//! - [`client_host`]: the real driver over the simulated transport, the script;
//! - [`sandbox`]: the exec server over `SimOs`, daemons, ground truth;
//! - [`world`]: one run: the turmoil world, the fault loop, observations.

pub mod channel;
pub mod client_host;
pub mod corpus;
pub use tether_scenarios::{
    control, explore, faults, observe, oracle, outages, race, scenario, swarm,
};
pub mod os;
pub mod sandbox;
pub mod trace;
pub mod transport;
pub mod world;
