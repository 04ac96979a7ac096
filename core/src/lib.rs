//! # tether-core
//!
//! The sans-IO heart of tether. Nothing here reads a clock, draws OS
//! randomness, or touches a file, socket or process: time comes in as an
//! argument, randomness from a seeded `rand_chacha` generator, and the
//! operating system through the [`agent::Os`] trait.
//!
//! - [`client`]: the client state machine ([`client::Client`]);
//! - [`protocol`]: the wire protocol (ops, replies, journal, render, parse);
//! - [`agent`]: the agent's decisions over an [`agent::Os`];
//! - [`ids`]: validated names and identifiers;
//! - [`bytes`]: exact bytes in JSON;
//! - [`time`]: [`time::Timestamp`], time as a value.

#![warn(missing_docs)]

pub mod agent;
pub mod bytes;
pub mod client;
pub mod ids;
pub mod protocol;
pub mod time;
