//! The client state machine (sans-IO, shaped like `quinn-proto`).
//!
//! - [`config`]: [`Config`] and its defaults;
//! - [`event`]: [`Effect`]s for the driver, [`Event`]s for the frontend;
//! - [`record`]: [`KernelRecord`], what is persisted for resume;
//! - [`timer`]: the timer enum and table;
//! - [`retry`]: tasks, attempts and backoff;
//! - `kernel`: per-kernel state (open, probe, spawn, give up);
//! - `cell`: per-cell state and journal delivery (dedup, gaps);
//! - `reaper`: idle timeout and LRU cap.

pub mod config;
pub mod event;
pub mod record;
pub(crate) mod retry;
pub(crate) mod timer;

pub use config::Config;
pub use event::{CellKey, ClientError, Effect, Event, TransportError, TransportErrorKind};
pub use record::{CellRecord, KernelRecord};

use crate::bytes::Bytes;
use crate::ids::{ExecId, KernelName};
use crate::protocol::{ExecOutput, Lang};
use crate::time::Timestamp;
use std::collections::VecDeque;
use std::time::Duration;

/// Manages many kernels on one sandbox.
pub struct Client {
    config: Config,
    seed: u64,
    now: Timestamp,
    effects: VecDeque<Effect>,
    events: VecDeque<Event>,
}

impl Client {
    /// A client with no kernels; `seed` drives nonces and request ids.
    pub fn new(config: Config, seed: u64) -> Client {
        Client {
            config,
            seed,
            now: Timestamp::ZERO,
            effects: VecDeque::new(),
            events: VecDeque::new(),
        }
    }

    /// Opens (attaches to or spawns) a kernel.
    pub fn open(&mut self, kernel: KernelName, lang: Lang, now: Timestamp) {
        let _ = (kernel, lang, now, self.seed, &self.config);
    }

    /// Queues a cell.
    pub fn run_cell(
        &mut self,
        kernel: &KernelName,
        code: Bytes,
        timeout: Option<Duration>,
        now: Timestamp,
    ) -> Result<CellKey, ClientError> {
        let _ = (code, timeout, now);
        Err(ClientError::UnknownKernel(kernel.clone()))
    }

    /// Cancels a cell.
    pub fn cancel(&mut self, cell: &CellKey, now: Timestamp) {
        let _ = (cell, now);
    }

    /// Rebuilds a kernel from its record.
    pub fn resume(&mut self, record: KernelRecord, replay: bool, now: Timestamp) {
        let _ = (record, replay, now);
    }

    /// Shuts a kernel down.
    pub fn shutdown(&mut self, kernel: &KernelName, now: Timestamp) {
        let _ = (kernel, now);
    }

    /// The result of an exec.
    pub fn handle_exec(
        &mut self,
        id: ExecId,
        result: Result<ExecOutput, TransportError>,
        now: Timestamp,
    ) {
        let _ = (id, result, now);
    }

    /// Timers due at `now` fire.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        let _ = now;
    }

    /// The next effect.
    #[must_use]
    pub fn poll_effect(&mut self) -> Option<Effect> {
        self.effects.pop_front()
    }

    /// The next event.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The next deadline.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        let _ = self.now;
        None
    }

    /// The kernel's record as it would be persisted now.
    pub fn record(&self, kernel: &KernelName) -> Option<KernelRecord> {
        let _ = kernel;
        None
    }

    /// Unresolved cells over all kernels.
    pub fn in_flight(&self) -> usize {
        0
    }
}
