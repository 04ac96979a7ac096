//! # tether-live
//!
//! Runs the scenario catalog ([`tether_scenarios`]) against real backends
//! through the real client [`tether::Driver`] and the real agent, and
//! observes the real system (`ps`, side-effect files) through the same
//! transport the client uses.
//!
//! - [`backends`]: which backends can run here, and why not (a test skips
//!   only when its backend truly can't run: no docker daemon, no Modal
//!   credentials, no sshd binary);
//! - [`container`]: a throwaway docker container from `tether-sandbox:latest`
//!   (built by `scripts/docker-image`), removed when dropped;
//! - [`explore`]: random fault schedules from the runtime's generator on
//!   `local` or `docker`, judged by the same oracle, one replay command
//!   per run (the `tether-live explore` command);
//! - [`sshd`]: a private sshd on a free loopback port with a temporary host
//!   key and authorized key (no system configuration touched);
//! - [`modal_box`]: a throwaway Modal sandbox (only with credentials);
//! - [`harness`]: a [`harness::Live`] kernel session over one backend — run
//!   cells, cancel, drop the client mid-cell, resume, observe;
//! - [`procs`]: `ps` output as rows;
//! - [`sim_run`]: the real-process host of the harness runtime
//!   ([`tether_scenarios::script`]): a scenario run on a real backend,
//!   its faults made real — through [`faulty`], a transport that injects
//!   the network faults — and judged by the runtime's oracle over what
//!   [`sim_observe`] sees.

pub mod backends;
pub mod container;
pub mod explore;
pub mod faulty;
pub mod harness;
pub mod modal_box;
pub mod procs;
pub mod sim_observe;
pub mod sim_run;
/// The private sshd lives with the other test needs (the client's
/// tests start it too).
pub use tether_require::sshd;
