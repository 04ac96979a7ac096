//! The driver: a thin tokio loop around the sans-IO
//! [`tether_core::client::Client`]. It moves bytes and time and decides
//! nothing:
//!
//! - [`Effect::Exec`] → render the op, start a transport call in a task
//!   (the agent binary replaces [`StdinSource::AgentBinary`]), bounded by the
//!   effect's deadline; its result goes back through `handle_exec`;
//! - [`Effect::Persist`] / [`Effect::Forget`] → the [`RecordStore`], done
//!   synchronously *before* any later effect is looked at, and synced
//!   ([`RecordStore::sync`]) before the next exec starts, so a record is
//!   durable before the submit it describes is sent; the events queued
//!   before a `Persist` are handed to `on_event` before it is saved, so a
//!   persisted cursor never covers output that was not delivered; a
//!   `Persist` followed directly by another of the same kernel is skipped
//!   (the later record is written);
//! - timers → `tokio::time::sleep_until(poll_timeout)`, then
//!   `handle_timeout`;
//! - cancels from a [`CancelHandle`] (Ctrl-C, a test, the simulation) →
//!   `Client::cancel`;
//! - [`Event::ToolCall`] → the embedder's [`ToolHandler`] in a task (set
//!   with [`Driver::set_tools`]; without one, an error answer "no tools"),
//!   whose answer goes to `Client::answer_call`.
//!
//! Time is `tokio::time::Instant` measured from the driver's epoch, so the
//! same driver runs on turmoil's virtual clock. Every `select!` is
//! `biased;` and nothing iterates a hash map, so a seeded simulation
//! replays exactly.

use crate::records::{RecordError, RecordStore};
use crate::transport::{ExecOp, ExecRequest, Transport, TransportError, TransportErrorKind};
use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tether_core::bytes::Bytes;
use tether_core::client::{CellKey, Client, ClientError, Effect, Event, KernelRecord};
use tether_core::ids::{ExecId, KernelName};
use tether_core::protocol::{
    parse_reply, render, AgentLocation, CallReply, CellOutcome, ExecOutput, Lang, Op, OpKind,
    Reply, StdinSource,
};
use tether_core::time::Timestamp;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;

/// A cell for [`Driver::run_cells`].
#[derive(Clone, Debug)]
pub struct NewCell {
    /// Its kernel.
    pub kernel: KernelName,
    /// The kernel's language, should the call open it.
    pub lang: Lang,
    /// Its code.
    pub code: Bytes,
    /// Its timeout, counted from the call.
    pub timeout: Option<Duration>,
}

/// What a cancel request targets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CancelTarget {
    /// The cells the driver is waiting on now ([`Driver::run_cell`],
    /// [`Driver::resume`]); ignored when it waits on none.
    Current,
    /// This cell.
    Cell(CellKey),
}

/// Sends cancel requests to a [`Driver`] from anywhere (a signal handler,
/// a test, a simulated client script) while the driver is busy in
/// [`Driver::run_cell`] or [`Driver::resume`]. Cheap to clone.
#[derive(Clone, Debug)]
pub struct CancelHandle {
    tx: mpsc::UnboundedSender<CancelTarget>,
}

impl CancelHandle {
    /// Cancels the cell being run (the cell, never its kernel); sent while
    /// no cell is being run, it cancels nothing (not the next cell).
    pub fn cancel_current(&self) {
        // The driver is gone: nothing left to cancel.
        let _ = self.tx.send(CancelTarget::Current);
    }

    /// Cancels one cell; sent before the call that runs or resumes it,
    /// it applies once that call begins.
    pub fn cancel(&self, cell: CellKey) {
        let _ = self.tx.send(CancelTarget::Cell(cell));
    }
}

/// Why the driver stopped before the awaited outcome.
#[derive(Debug)]
pub enum DriverError {
    /// The state machine refused the command.
    Client(ClientError),
    /// A record could not be saved or removed.
    Records(RecordError),
    /// The state machine has nothing in flight and no timer, yet the
    /// awaited outcome has not come: a bug in the state machine.
    Stalled {
        /// What was awaited.
        waiting_for: String,
    },
    /// A [`Driver::query`] got no usable reply.
    Query {
        /// The op.
        kind: OpKind,
        /// What went wrong.
        detail: String,
    },
}

impl fmt::Display for DriverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DriverError::Client(e) => write!(f, "{e}"),
            DriverError::Records(e) => write!(f, "cannot persist the kernel record: {e}"),
            DriverError::Stalled { waiting_for } => write!(
                f,
                "internal error: the client state machine stalled while waiting for {waiting_for} \
                 (please report this with the output of --json)"
            ),
            DriverError::Query { kind, detail } => {
                write!(f, "the agent's {kind} op failed: {detail}")
            }
        }
    }
}

impl std::error::Error for DriverError {}

impl From<ClientError> for DriverError {
    fn from(e: ClientError) -> Self {
        DriverError::Client(e)
    }
}

impl From<RecordError> for DriverError {
    fn from(e: RecordError) -> Self {
        DriverError::Records(e)
    }
}

/// Counters, for benchmarks and tests: how many exec calls of each kind
/// the driver made.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DriverStats {
    /// Exec calls started, by op kind.
    pub execs: BTreeMap<OpKind, u64>,
}

impl DriverStats {
    /// All exec calls started.
    pub fn total(&self) -> u64 {
        self.execs.values().sum()
    }
}

type ExecResult = (ExecId, Result<ExecOutput, TransportError>);

/// One tool call from a cell, for a [`ToolHandler`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCall {
    /// The cell that made it.
    pub cell: CellKey,
    /// Its id in the cell.
    pub id: String,
    /// The tool.
    pub name: String,
    /// Its arguments.
    pub args: serde_json::Value,
}

/// What a [`ToolHandler`] returns: the answer, later.
pub type ToolFuture = Pin<Box<dyn Future<Output = CallReply> + Send>>;

/// Answers the tool calls of cells: called once per call (again for a
/// call a resumed client has no answer for), in a task of its own; its
/// answer is kept in the kernel's record before it is sent.
pub type ToolHandler = Arc<dyn Fn(ToolCall) -> ToolFuture + Send + Sync>;

type ToolResult = (CellKey, String, CallReply);

/// The agent binary an install ships.
#[derive(Clone, Debug)]
pub enum AgentSource {
    /// These bytes.
    Bytes(Arc<[u8]>),
    /// This file, read when an install needs it (a warm `tether run`
    /// never does). A file that changed since its hash was taken is
    /// refused by the agent's install, which checks the hash.
    File(std::path::PathBuf),
}

impl From<Arc<[u8]>> for AgentSource {
    fn from(bytes: Arc<[u8]>) -> AgentSource {
        AgentSource::Bytes(bytes)
    }
}

impl AgentSource {
    fn bytes(&self) -> Vec<u8> {
        match self {
            AgentSource::Bytes(bytes) => bytes.to_vec(),
            // Unreadable now: the install ships nothing and the agent
            // refuses it (hash mismatch), which the client reports.
            AgentSource::File(path) => std::fs::read(path).unwrap_or_default(),
        }
    }
}

/// The tokio loop around a [`Client`].
pub struct Driver {
    client: Client,
    transport: Arc<dyn Transport>,
    store: Box<dyn RecordStore>,
    agent: AgentSource,
    location: AgentLocation,
    epoch: Instant,
    tasks: JoinSet<ExecResult>,
    cancel_tx: mpsc::UnboundedSender<CancelTarget>,
    cancel_rx: mpsc::UnboundedReceiver<CancelTarget>,
    /// Cells the caller is waiting on, oldest first.
    current: Vec<CellKey>,
    /// A cancel of the current cell came while `run_cell` had no cell yet
    /// (see [`Driver::queued_cancels`]).
    early_cancel: bool,
    stats: DriverStats,
    tools: Option<ToolHandler>,
    tool_tasks: JoinSet<ToolResult>,
    /// Timer wakes in a row after which a timer was still due (see
    /// [`Driver::check_timers`]).
    still_due: u32,
}

/// Wakes in a row that leave a timer due before the driver calls the state
/// machine stuck: a correct one has popped every due timer when
/// `handle_timeout` returns.
const STILL_DUE_LIMIT: u32 = 1_000;

impl Driver {
    /// A driver for `client`, reaching the sandbox through `transport`,
    /// persisting records in `store`, shipping `agent` (whose location on
    /// the sandbox is `location`) on install. Its epoch is now.
    pub fn new(
        client: Client,
        transport: Arc<dyn Transport>,
        store: Box<dyn RecordStore>,
        agent: impl Into<AgentSource>,
        location: AgentLocation,
    ) -> Driver {
        let (cancel_tx, cancel_rx) = mpsc::unbounded_channel();
        Driver {
            client,
            transport,
            store,
            agent: agent.into(),
            location,
            epoch: Instant::now(),
            tasks: JoinSet::new(),
            cancel_tx,
            cancel_rx,
            current: Vec::new(),
            early_cancel: false,
            stats: DriverStats::default(),
            tools: None,
            tool_tasks: JoinSet::new(),
            still_due: 0,
        }
    }

    /// Who answers the cells' tool calls (`None`: every call gets the
    /// error "no tools").
    pub fn set_tools(&mut self, handler: Option<ToolHandler>) {
        self.tools = handler;
    }

    /// Starts answering a tool call.
    fn on_tool_call(&mut self, event: &Event) {
        let Event::ToolCall {
            cell,
            id,
            name,
            args,
        } = event
        else {
            return;
        };
        let call = ToolCall {
            cell: cell.clone(),
            id: id.clone(),
            name: name.clone(),
            args: args.clone(),
        };
        let handler = self.tools.clone();
        self.tool_tasks.spawn(async move {
            let reply = match handler {
                // In a task of its own, so a handler that panics gives an
                // error answer instead of a call that waits forever.
                Some(h) => match tokio::spawn(h(call.clone())).await {
                    Ok(reply) => reply,
                    Err(e) => CallReply::Error {
                        message: format!("the host's tool handler failed: {e}"),
                    },
                },
                None => CallReply::Error {
                    message: format!(
                        "no tools: the host runs no tool handler (tool {:?} was called)",
                        call.name
                    ),
                },
            };
            (call.cell, call.id, reply)
        });
    }

    /// A handle that cancels cells while this driver runs them.
    pub fn cancel_handle(&self) -> CancelHandle {
        CancelHandle {
            tx: self.cancel_tx.clone(),
        }
    }

    /// The state machine (to read records, or for commands the driver has
    /// no wrapper for; drive it with [`Driver::settle`] afterwards).
    pub fn client(&mut self) -> &mut Client {
        &mut self.client
    }

    /// The record store.
    pub fn store(&mut self) -> &mut dyn RecordStore {
        self.store.as_mut()
    }

    /// Exec calls made so far.
    pub fn stats(&self) -> &DriverStats {
        &self.stats
    }

    /// The local processes (ssh masters, Modal bridges) its transport
    /// started: none for a warm `tether` that goes through `tether mux`.
    pub fn helpers_started(&self) -> u64 {
        self.transport.helpers_started()
    }

    /// Now, on the driver's clock.
    pub fn now(&self) -> Timestamp {
        to_timestamp(self.epoch, Instant::now())
    }

    /// Runs `code` as the next cell of `kernel` (opening the kernel first
    /// if the client does not know it) and drives the client until that
    /// cell resolves. Every event is passed to `on_event` as it comes.
    pub async fn run_cell(
        &mut self,
        kernel: &KernelName,
        lang: Lang,
        code: Bytes,
        timeout: Option<Duration>,
        on_event: &mut dyn FnMut(&Event),
    ) -> Result<(CellKey, CellOutcome), DriverError> {
        let cell = NewCell {
            kernel: kernel.clone(),
            lang,
            code,
            timeout,
        };
        let mut outcomes = self.run_cells(vec![cell], on_event, &mut |_, _| ()).await?;
        // run_cells returns only once every cell has resolved.
        Ok(outcomes.pop().expect("one outcome a cell"))
    }

    /// Queues `cells` at once (each the next cell of its kernel, opened
    /// first if the client does not know it), in order, and drives the
    /// client until all have resolved: a frontend that hands one kernel
    /// several cells, or cells to several kernels, without waiting for
    /// the first. A cell's timeout counts from here, its wait behind the
    /// cells queued before it included. `submitted` hears each cell's key
    /// as it is queued (the index is its place in `cells`). Returns each
    /// cell's outcome, in the order of `cells`; a refusal of any stops
    /// the call (the cells queued before it run on, for a later call).
    pub async fn run_cells(
        &mut self,
        cells: Vec<NewCell>,
        on_event: &mut dyn FnMut(&Event),
        submitted: &mut dyn FnMut(usize, &CellKey),
    ) -> Result<Vec<(CellKey, CellOutcome)>, DriverError> {
        let named = self.queued_cancels();
        let mut keys: Vec<CellKey> = Vec::new();
        let mut early = Vec::new();
        for (i, cell) in cells.into_iter().enumerate() {
            // A kernel still being shut down (the client's reaper evicted
            // it) is opened again once its shutdown has ended, as the
            // client asks.
            while self.shutting_down(&cell.kernel) {
                self.flush(on_event, &mut |event| {
                    // A cell queued before may resolve meanwhile.
                    if let Event::CellResolved { cell, outcome } = event {
                        if keys.contains(cell) {
                            early.push((cell.clone(), outcome.clone()));
                        }
                    }
                })?;
                if !self.shutting_down(&cell.kernel) {
                    break;
                }
                self.wait_once("an evicted kernel's shutdown to finish")
                    .await?;
            }
            let now = self.now();
            if self.client.record(&cell.kernel).is_none() {
                self.client.open(cell.kernel.clone(), cell.lang, now);
            }
            let key = self
                .client
                .run_cell(&cell.kernel, cell.code, cell.timeout, now)?;
            submitted(i, &key);
            keys.push(key);
        }
        self.current = keys.clone();
        let now = self.now();
        if std::mem::take(&mut self.early_cancel) {
            for key in &keys {
                self.client.cancel(key, now);
            }
        }
        for cell in named {
            self.client.cancel(&cell, now);
        }
        let outcomes = self.drive_cells(on_event, early).await;
        self.current.clear();
        let mut outcomes = outcomes?;
        // In the order asked for, not the order they resolved in.
        outcomes.sort_by_key(|(key, _)| keys.iter().position(|k| k == key));
        Ok(outcomes)
    }

    /// The cancels sent while no call was driving the client, taken as a
    /// call begins: those naming a cell, for the call to apply once the
    /// client holds it; a cancel of "the current cell" cancelled nothing
    /// and is dropped (an interrupt of an idle session cancelled the next
    /// cell before it ran: SWE-agent's `test_env_interrupt_session`).
    fn queued_cancels(&mut self) -> Vec<CellKey> {
        self.early_cancel = false;
        let mut named = Vec::new();
        while let Ok(target) = self.cancel_rx.try_recv() {
            if let CancelTarget::Cell(cell) = target {
                named.push(cell);
            }
        }
        named
    }

    /// The client holds `kernel` only until its shutdown is answered.
    fn shutting_down(&self, kernel: &KernelName) -> bool {
        self.client.record(kernel).is_none() && self.client.kernels().any(|k| k == kernel)
    }

    /// Hands `record` (from a store) to the client and drives it until
    /// every cell the record holds resolves; with `replay`, the client
    /// reports each cell's output from its start, not from where the last
    /// client stopped. Returns the outcome of every cell, oldest first.
    pub async fn resume(
        &mut self,
        record: KernelRecord,
        replay: bool,
        on_event: &mut dyn FnMut(&Event),
    ) -> Result<Vec<(CellKey, CellOutcome)>, DriverError> {
        let kernel = record.kernel.clone();
        let cells: Vec<CellKey> = record
            .cells
            .iter()
            .map(|c| CellKey {
                kernel: kernel.clone(),
                seq: c.seq,
            })
            .collect();
        let named = self.queued_cancels();
        let now = self.now();
        self.client.resume(record, replay, now);
        self.current = cells;
        for cell in named {
            self.client.cancel(&cell, now);
        }
        let outcomes = self.drive_cells(on_event, Vec::new()).await;
        self.current.clear();
        outcomes
    }

    /// `op` (whose reply must echo `id`) as an exec call: rendered, the
    /// agent binary in place of [`StdinSource::AgentBinary`].
    fn request(&self, id: u64, op: &Op) -> ExecRequest {
        let rendered = render(id, op, &self.location);
        let stdin = match rendered.stdin {
            StdinSource::Bytes(bytes) => bytes,
            StdinSource::AgentBinary => self.agent.bytes(),
        };
        ExecRequest {
            argv: rendered.argv,
            stdin,
            op: Some(ExecOp {
                id,
                kind: op.kind(),
            }),
        }
    }

    /// Runs one read-only op outside the state machine (one that has no
    /// place in a kernel's life, such as [`Op::Logs`]): rendered, sent
    /// once through the transport within `timeout`, its reply parsed. The
    /// agent must be installed already (a kernel ran on this sandbox).
    pub async fn query(&self, op: Op, timeout: Duration) -> Result<Reply, DriverError> {
        // Nothing else shares this exec call, so any id will do.
        let id = 1;
        let kind = op.kind();
        let failed = |detail: String| DriverError::Query { kind, detail };
        let req = self.request(id, &op);
        let out = tokio::time::timeout(timeout, self.transport.exec(req))
            .await
            .map_err(|_| failed(format!("no answer within {} ms", timeout.as_millis())))?
            .map_err(|e| failed(e.to_string()))?;
        parse_reply(id, kind, &out).map_err(|e| failed(e.to_string()))
    }

    /// Shuts `kernel` down (its daemon and every process it owns) and
    /// drives the client until the kernel is gone (its shutdown answered,
    /// or given up on after every attempt) and nothing is in flight.
    pub async fn shutdown(
        &mut self,
        kernel: &KernelName,
        on_event: &mut dyn FnMut(&Event),
    ) -> Result<(), DriverError> {
        let now = self.now();
        self.client.shutdown(kernel, now);
        // Until the shutdown is answered or given up on: an attempt that
        // failed waits on a retry timer, which `settle` leaves alone (a
        // kernel the reaper evicted was left so, its daemon running on).
        while self.client.kernels().any(|k| k == kernel) {
            self.flush(on_event, &mut |_| ())?;
            if !self.client.kernels().any(|k| k == kernel) {
                break;
            }
            self.wait_once("the kernel's shutdown to finish").await?;
        }
        self.settle(on_event).await
    }

    /// Drives the client until no exec call is in flight and no effect is
    /// queued (timers that are not due are left alone). Used after a
    /// command whose completion has no event of its own, and before
    /// exiting so that acknowledgements reach the sandbox.
    pub async fn settle(&mut self, on_event: &mut dyn FnMut(&Event)) -> Result<(), DriverError> {
        loop {
            self.flush(on_event, &mut |_| ())?;
            if self.tasks.is_empty() {
                return Ok(());
            }
            self.wait_once("in-flight exec calls to finish").await?;
        }
    }

    /// Drives until every cell in `self.current` has resolved.
    /// `outcomes`: those that resolved before (while the call queued the
    /// cells after them).
    async fn drive_cells(
        &mut self,
        on_event: &mut dyn FnMut(&Event),
        mut outcomes: Vec<(CellKey, CellOutcome)>,
    ) -> Result<Vec<(CellKey, CellOutcome)>, DriverError> {
        loop {
            let waiting = self.current.clone();
            self.flush(on_event, &mut |event| {
                if let Event::CellResolved { cell, outcome } = event {
                    if waiting.contains(cell) && !outcomes.iter().any(|(c, _)| c == cell) {
                        outcomes.push((cell.clone(), outcome.clone()));
                    }
                }
            })?;
            if self
                .current
                .iter()
                .all(|c| outcomes.iter().any(|(done, _)| done == c))
            {
                return Ok(outcomes);
            }
            self.wait_once("a cell to resolve").await?;
        }
    }

    /// Carries out every queued effect, then hands every queued event to
    /// `on_event` and `watch`, until both queues are empty.
    fn flush(
        &mut self,
        on_event: &mut dyn FnMut(&Event),
        watch: &mut dyn FnMut(&Event),
    ) -> Result<(), DriverError> {
        loop {
            let mut progressed = false;
            let mut effects = Vec::new();
            while let Some(effect) = self.client.poll_effect() {
                effects.push(effect);
            }
            let superseded = superseded_persists(&effects);
            for (i, effect) in effects.into_iter().enumerate() {
                progressed = true;
                if superseded.contains(&i) {
                    continue;
                }
                match effect {
                    Effect::Exec { id, op, deadline } => {
                        // Every record saved before this exec must be
                        // there after a crash of this machine (the exec
                        // may start what the record says was sent).
                        self.store.sync()?;
                        *self.stats.execs.entry(op.kind()).or_default() += 1;
                        let req = self.request(id.0, &op);
                        let transport = Arc::clone(&self.transport);
                        let deadline = self.epoch + Duration::from_millis(deadline.0);
                        self.tasks.spawn(async move {
                            let result = match tokio::time::timeout_at(
                                deadline,
                                transport.exec(req),
                            )
                            .await
                            {
                                Ok(result) => result,
                                Err(_) => Err(TransportError {
                                    kind: TransportErrorKind::TimedOut,
                                    detail: "exec deadline passed".into(),
                                }),
                            };
                            (id, result)
                        });
                    }
                    Effect::Persist(record) => {
                        // The record may carry a cursor past output queued
                        // as events: hand those over first, so a crash after
                        // the save never loses output (it may repeat some).
                        while let Some(event) = self.client.poll_event() {
                            on_event(&event);
                            watch(&event);
                            self.on_tool_call(&event);
                        }
                        self.store.save(&record)?
                    }
                    Effect::Forget(kernel) => self.store.forget(&kernel)?,
                }
            }
            while let Some(event) = self.client.poll_event() {
                progressed = true;
                on_event(&event);
                watch(&event);
                self.on_tool_call(&event);
            }
            if !progressed {
                return Ok(());
            }
        }
    }

    /// Waits for the next input — an exec result, a cancel request or a
    /// timer — and feeds it to the client.
    async fn wait_once(&mut self, waiting_for: &str) -> Result<(), DriverError> {
        let timer = self.client.poll_timeout();
        let has_tasks = !self.tasks.is_empty();
        let has_tools = !self.tool_tasks.is_empty();
        if !has_tasks && !has_tools && timer.is_none() && self.cancel_rx.is_empty() {
            return Err(DriverError::Stalled {
                waiting_for: waiting_for.to_owned(),
            });
        }
        let wake = timer.map(|t| self.epoch + Duration::from_millis(t.0));
        tokio::select! {
            biased;
            Some(target) = self.cancel_rx.recv() => {
                let now = self.now();
                let cells = match target {
                    // Before `run_cell` has its cell (an evicted kernel's
                    // shutdown still under way): for that cell.
                    CancelTarget::Current if self.current.is_empty() => {
                        self.early_cancel = true;
                        Vec::new()
                    }
                    CancelTarget::Current => self.current.clone(),
                    CancelTarget::Cell(cell) => vec![cell],
                };
                for cell in &cells {
                    self.client.cancel(cell, now);
                }
            }
            Some(joined) = self.tasks.join_next(), if has_tasks => {
                // Exec tasks never panic and are never aborted while the
                // driver lives; a join error means the runtime is shutting
                // down, and then nobody waits for this result.
                if let Ok((id, result)) = joined {
                    let now = self.now();
                    self.client.handle_exec(id, result, now);
                }
            }
            Some(joined) = self.tool_tasks.join_next(), if has_tools => {
                // Tool tasks do not panic (the handler runs in a task of
                // its own); a join error means the runtime is shutting down.
                let Ok((cell, id, reply)) = joined else {
                    return Ok(());
                };
                let now = self.now();
                self.client.answer_call(&cell, &id, reply, now);
            }
            () = sleep_until_opt(wake) => {
                let now = self.now();
                self.client.handle_timeout(now);
                self.check_timers(now, waiting_for)?;
            }
        }
        Ok(())
    }

    /// After `handle_timeout(now)` no timer may still be due at `now`: one
    /// that is would wake the driver again at once, for ever, without
    /// time passing (a state machine that re-arms a timer in the past, or
    /// never pops one). Rather than spin on a core, the driver stops with
    /// [`DriverError::Stalled`] once that happened [`STILL_DUE_LIMIT`]
    /// times in a row.
    fn check_timers(&mut self, now: Timestamp, waiting_for: &str) -> Result<(), DriverError> {
        if self.client.poll_timeout().is_some_and(|t| t <= now) {
            self.still_due += 1;
        } else {
            self.still_due = 0;
        }
        if self.still_due >= STILL_DUE_LIMIT {
            return Err(DriverError::Stalled {
                waiting_for: format!(
                    "{waiting_for} (its timers stayed due after {STILL_DUE_LIMIT} wakes in a row at {} ms: they spin)",
                    now.0
                ),
            });
        }
        Ok(())
    }
}

/// Indexes of [`Effect::Persist`]s that a later `Persist` of the same
/// kernel replaces before any exec or forget is carried out: writing only
/// the later record is as durable for everything that follows it (a record
/// still precedes every exec it describes), with one fsync less.
fn superseded_persists(effects: &[Effect]) -> Vec<usize> {
    let mut out = Vec::new();
    for (i, effect) in effects.iter().enumerate() {
        let Effect::Persist(record) = effect else {
            continue;
        };
        let later = effects[i + 1..]
            .iter()
            .take_while(|e| matches!(e, Effect::Persist(_)))
            .any(|e| matches!(e, Effect::Persist(r) if r.kernel == record.kernel));
        if later {
            out.push(i);
        }
    }
    out
}

fn to_timestamp(epoch: Instant, at: Instant) -> Timestamp {
    Timestamp(u64::try_from(at.saturating_duration_since(epoch).as_millis()).unwrap_or(u64::MAX))
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_core::client::KernelRecord;
    use tether_core::protocol::Op;

    fn persist(kernel: &str, next_seq: u64) -> Effect {
        Effect::Persist(KernelRecord {
            kernel: KernelName::new(kernel).unwrap(),
            lang: Lang::Shell,
            identity: None,
            next_seq,
            cells: Vec::new(),
            acked: Vec::new(),
            shutting_down: false,
            spawning: None,
        })
    }

    #[test]
    fn only_a_persist_replaced_before_any_exec_is_skipped() {
        let exec = Effect::Exec {
            id: ExecId(1),
            op: Op::Gc,
            deadline: Timestamp(0),
        };
        let effects = vec![
            persist("a", 1),
            persist("b", 1),
            persist("a", 2), // replaces 0 (b's record in between is no exec)
            exec,
            persist("a", 3), // precedes nothing of a: kept
            persist("b", 2),
        ];
        assert_eq!(superseded_persists(&effects), vec![0]);
    }
}
