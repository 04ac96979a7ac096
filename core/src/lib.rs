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
//! - [`channel`]: one long-lived, multiplexed exec of the agent per sandbox
//!   (framing, and the client side's decisions);
//! - [`persist`]: the background multiplexer that keeps the channel open
//!   across `tether` invocations (its socket protocol, idle exit, stale
//!   sockets);
//! - [`ids`]: validated names and identifiers;
//! - [`bytes`]: exact bytes in JSON;
//! - [`shell_quote`]: quoting for `sh -c` command lines;
//! - [`time`]: [`time::Timestamp`], time as a value.
//!
//! ## Driving a cell by hand
//!
//! The [`client::Client`] never does IO: the caller runs each
//! [`client::Effect::Exec`] (here a hand-written agent answers it) and feeds
//! the result back with the time. This is all a driver does, minus the
//! transport and the record store.
//!
//! ```
//! use tether_core::bytes::Bytes;
//! use tether_core::client::{Client, Config, Effect, Event};
//! use tether_core::ids::{ExecId, KernelName};
//! use tether_core::protocol::{
//!     Acceptance, AgentLocation, CellOutcome, EntryKind, ExecOutput, Identity, JournalBatch,
//!     JournalEntry, Lang, Op, Reply, ReplyEnvelope, Stream,
//! };
//! use tether_core::time::Timestamp;
//!
//! // What the agent would print for op `id`.
//! fn agent(id: ExecId, op: &Op) -> ExecOutput {
//!     let entry = |n, kind| JournalEntry { n, kind };
//!     let reply = match op {
//!         Op::Spawn { nonce, .. } => Reply::Spawned {
//!             identity: Identity { boot_id: "b".into(), pid: 42, starttime: 7, nonce: nonce.clone() },
//!             fresh: true,
//!             ran_before: 0,
//!         },
//!         Op::Submit { submission, .. } => Reply::Submitted {
//!             acceptance: Acceptance::Accepted,
//!             batch: JournalBatch {
//!                 entries: vec![
//!                     entry(1, EntryKind::Accepted { request_id: submission.request_id.clone() }),
//!                     entry(2, EntryKind::Output { stream: Stream::Stdout, data: Bytes::from("hi\n") }),
//!                     entry(3, EntryKind::Result { outcome: CellOutcome::Ok }),
//!                     entry(4, EntryKind::Done),
//!                 ],
//!                 done: true,
//!             },
//!         },
//!         Op::Ack { .. } => Reply::Acked,
//!         other => panic!("this example does not expect {other:?}"),
//!     };
//!     let envelope = ReplyEnvelope { v: 1, id: id.0, reply: Some(reply), error: None };
//!     // Sealed with its checksum, as the agent prints it.
//!     ExecOutput { stdout: envelope.to_line(), stderr: Vec::new(), exit_code: 0 }
//! }
//!
//! let location = AgentLocation { root: "/tmp/tether".into(), hash: "ab".repeat(32) };
//! let mut client = Client::new(Config::new(location, 1_000_000), 7);
//! let kernel = KernelName::new("demo").unwrap();
//! let mut now = Timestamp(0);
//! client.open(kernel.clone(), Lang::Shell, now);
//! let cell = client.run_cell(&kernel, Bytes::from("echo hi"), None, now).unwrap();
//!
//! let (mut output, mut outcome) = (Vec::new(), None);
//! while outcome.is_none() {
//!     // 1. Effects, in order: run execs, persist records.
//!     let mut results = Vec::new();
//!     while let Some(effect) = client.poll_effect() {
//!         match effect {
//!             Effect::Exec { id, op, .. } => results.push((id, agent(id, &op))),
//!             Effect::Persist(_record) => {} // a driver writes it durably here
//!             Effect::Forget(_kernel) => {}
//!         }
//!     }
//!     // 2. Events, for the frontend.
//!     while let Some(event) = client.poll_event() {
//!         match event {
//!             Event::Output { data, .. } => output.extend_from_slice(data.as_slice()),
//!             Event::CellResolved { cell: c, outcome: o } if c == cell => outcome = Some(o),
//!             _ => {}
//!         }
//!     }
//!     // 3. Results come back 10 ms later.
//!     now = Timestamp(now.0 + 10);
//!     for (id, out) in results {
//!         client.handle_exec(id, Ok(out), now);
//!     }
//! }
//! assert_eq!(output, b"hi\n");
//! assert_eq!(outcome, Some(CellOutcome::Ok));
//! assert_eq!(client.in_flight(), 0);
//! ```

#![warn(missing_docs)]

pub mod agent;
pub mod bytes;
pub mod channel;
pub mod client;
pub mod ids;
#[cfg(feature = "mutations")]
pub mod mutation;
pub mod persist;
pub mod protocol;
pub mod shell_quote;
pub mod time;
