//! The client host: the real [`tether::Driver`] over a [`SimTransport`]
//! (exec on `turmoil::net`), running a scenario's script, crashing and
//! restarting from its persisted records when the fault loop says so, and
//! logging every effect and event it sees into the trace and the
//! [`ClientLog`] the oracle reads.

use crate::control::Control;
use crate::observe::ClientLog;
use crate::scenario::{Action, CellSpec, Scenario};
use crate::swarm::World;
use crate::trace::{excerpt, now_ms, Trace};
use crate::transport::{call, WireRequest, EXEC_PORT};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use tether::driver::DriverError;
use tether::transport::{ExecFuture, ExecRequest, Transport};
use tether::{Driver, MemoryStore, RecordStore};
use tether_core::bytes::Bytes;
use tether_core::client::{Client, Config, Event, TransportError, TransportErrorKind};
use tether_core::ids::KernelName;
use tether_core::protocol::{AgentLocation, CellOutcome, ExecOutput, Lang, Stream};

/// The kernel every scenario uses.
pub const KERNEL: &str = "sim";
/// The agent "binary" the client ships.
pub const AGENT_BINARY: &[u8] = b"\x7fELF tether-agent (simulated)";
/// Where the agent lives on the sandbox.
pub const ROOT: &str = "/var/tmp/tether";

/// The agent's location on the simulated sandbox.
pub fn location() -> AgentLocation {
    use sha2::Digest;
    let hash = sha2::Sha256::digest(AGENT_BINARY);
    let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
    AgentLocation {
        root: ROOT.into(),
        hash: hex,
    }
}

/// The client configuration used in the simulation: the defaults scaled
/// down so that runs stay short in virtual time.
pub fn config() -> Config {
    let mut c = Config::new(location(), AGENT_BINARY.len() as u64);
    c.wait_ms = 2_000;
    c.exec_slack = Duration::from_millis(2_000);
    c.max_attempts = 6;
    c.backoff_base = Duration::from_millis(100);
    c.backoff_max = Duration::from_millis(1_000);
    c.unreachable_after = Duration::from_secs(15);
    c.grace = Duration::from_millis(300);
    c
}

/// [`config`] with the knobs `world` drew.
pub fn config_in(world: &World) -> Config {
    let mut c = config();
    c.wait_ms = world.wait_ms;
    c.grace = Duration::from_millis(world.grace_ms);
    c.daemon_idle_timeout = Duration::from_millis(world.daemon_idle_ms);
    c
}

/// Exec over `turmoil::net` to the sandbox's exec server.
pub struct SimTransport {
    trace: Trace,
}

impl Transport for SimTransport {
    fn exec(&self, req: ExecRequest) -> ExecFuture<'_> {
        let trace = self.trace.clone();
        Box::pin(async move {
            let what = describe_request(&req.argv, &req.stdin);
            trace.log("client", format!("exec {what}"));
            let wire = WireRequest {
                argv: req.argv,
                stdin: Bytes(req.stdin),
            };
            match call(&format!("sandbox:{EXEC_PORT}"), &wire).await {
                Ok(resp) => {
                    trace.log("client", format!("exec {what} -> exit {}", resp.exit_code));
                    Ok(ExecOutput {
                        stdout: resp.stdout.0,
                        stderr: resp.stderr.0,
                        exit_code: resp.exit_code,
                    })
                }
                Err(e) => {
                    let kind = match e.kind() {
                        std::io::ErrorKind::ConnectionRefused => TransportErrorKind::Unreachable,
                        _ => TransportErrorKind::Io,
                    };
                    trace.log("client", format!("exec {what} -> transport error: {e}"));
                    Err(TransportError {
                        kind,
                        detail: e.to_string(),
                    })
                }
            }
        })
    }

    fn describe(&self) -> String {
        "sim (turmoil)".into()
    }
}

/// `x7 submit` for an agent op, `install` for the install script.
fn describe_request(argv: &[String], stdin: &[u8]) -> String {
    if argv.get(3).map(String::as_str) == Some("tether-install") {
        return format!("x{} install", argv.get(7).map_or("?", String::as_str));
    }
    let v: serde_json::Value = serde_json::from_slice(stdin).unwrap_or_default();
    let id = v.get("id").and_then(serde_json::Value::as_u64).unwrap_or(0);
    let kind = op_of(&v).unwrap_or_else(|| "?".into());
    format!("x{id} {kind}")
}

/// The agent op an op request (its stdin, as JSON) carries: `submit`,
/// `wait`, …; `None` when it names none.
pub fn request_op(stdin: &[u8]) -> Option<String> {
    op_of(&serde_json::from_slice(stdin).unwrap_or_default())
}

fn op_of(v: &serde_json::Value) -> Option<String> {
    match v.get("op") {
        Some(serde_json::Value::String(s)) => Some(s.clone()),
        Some(serde_json::Value::Object(m)) => Some(m.keys().next().cloned().unwrap_or_default()),
        _ => None,
    }
}

/// The client's record store: a [`MemoryStore`] (it outlives a client
/// crash) whose writes go into the trace.
pub struct LoggingStore {
    inner: MemoryStore,
    trace: Trace,
}

impl tether::RecordStore for LoggingStore {
    fn load(
        &self,
        kernel: &KernelName,
    ) -> Result<Option<tether_core::client::KernelRecord>, tether::records::RecordError> {
        self.inner.load(kernel)
    }

    fn save(
        &mut self,
        record: &tether_core::client::KernelRecord,
    ) -> Result<(), tether::records::RecordError> {
        let cells: Vec<String> = record
            .cells
            .iter()
            .map(|c| {
                format!(
                    "#{}{}{}@{}",
                    c.seq,
                    if c.submitted { " sent" } else { "" },
                    if c.cancel_requested { " cancel" } else { "" },
                    c.cursor
                )
            })
            .collect();
        self.trace.log(
            "client",
            format!(
                "persist {} daemon={} next_seq={} cells=[{}]",
                record.kernel,
                record.identity.as_ref().map_or(0, |i| i.pid),
                record.next_seq,
                cells.join(", ")
            ),
        );
        self.inner.save(record)
    }

    fn forget(&mut self, kernel: &KernelName) -> Result<(), tether::records::RecordError> {
        self.trace.log("client", format!("forget {kernel}"));
        self.inner.forget(kernel)
    }

    fn list(&self) -> Result<Vec<KernelName>, tether::records::RecordError> {
        self.inner.list()
    }
}

fn describe(event: &Event) -> String {
    match event {
        Event::Output {
            cell,
            n,
            stream,
            data,
        } => format!(
            "event output {cell} n={n} {stream:?} \"{}\"",
            excerpt(&data.0, 60)
        ),
        Event::CellResolved { cell, outcome } => format!("event resolved {cell} {outcome}"),
        Event::CellAccepted { cell, acceptance } => {
            format!("event accepted {cell} {acceptance:?}")
        }
        Event::KernelReady {
            kernel,
            identity,
            fresh,
        } => format!(
            "event kernel ready {kernel} pid={} fresh={fresh}",
            identity.pid
        ),
        Event::StateLost { kernel, evidence } => format!("event STATE LOST {kernel}: {evidence}"),
        Event::KernelReplaced { kernel, evidence } => {
            format!("event kernel replaced {kernel}: {evidence}")
        }
        Event::Leftovers { cell, pids } => format!("event leftovers {cell} {pids:?}"),
        Event::Unkillable { cell, pids } => format!("event unkillable {cell} {pids:?}"),
        Event::Clipped { cell, dropped } => format!("event clipped {cell} {dropped}"),
        Event::KernelEvicted { kernel, reason } => format!("event evicted {kernel}: {reason}"),
        Event::Note { text, .. } => format!("event note: {text}"),
    }
}

/// Everything the client script needs.
#[derive(Clone)]
pub struct ClientCtx {
    /// The scenario.
    pub scenario: Rc<Scenario>,
    /// The run's seed.
    pub seed: u64,
    /// The seed's world.
    pub world: World,
    /// The trace.
    pub trace: Trace,
    /// The switchboard.
    pub control: Control,
    /// What the client saw.
    pub log: Rc<RefCell<ClientLog>>,
    /// The persisted records (they survive a client crash).
    pub store: MemoryStore,
}

fn kernel() -> KernelName {
    kernel_named(KERNEL)
}

fn kernel_named(name: &str) -> KernelName {
    // Scenario kernel names are constants checked by the scenario tests.
    KernelName::new(name).unwrap_or_else(|e| unreachable!("scenario kernel name {name:?}: {e}"))
}

/// The kernel `cell` runs in ([`KERNEL`] unless it names one).
pub fn kernel_of(cell: &CellSpec) -> KernelName {
    cell.kernel.as_deref().map_or_else(kernel, kernel_named)
}

/// Every kernel the script shuts down at its end: the scenario's and
/// [`KERNEL`] (where the liveness cell runs), sorted, once each.
pub fn kernels(scenario: &Scenario) -> Vec<KernelName> {
    let mut kernels: Vec<KernelName> = scenario.cells().map(kernel_of).collect();
    kernels.push(kernel());
    kernels.sort();
    kernels.dedup();
    kernels
}

/// The liveness cell `label` (`liveness`, or `liveness2` after a reported
/// loss): it prints `alive`, in the language of the scenario's main
/// kernel.
pub fn liveness_cell(scenario: &Scenario, label: &str) -> CellSpec {
    CellSpec {
        label: label.into(),
        workload: tether_scenarios::workload::Workload {
            steps: vec![tether_scenarios::workload::Step::Print {
                stream: Stream::Stdout,
                text: "alive\n".into(),
            }],
        },
        timeout_ms: None,
        cancel_after_ms: None,
        expect: None,
        kernel: None,
        bystander: false,
        lang: scenario
            .cells()
            .find(|c| c.kernel.is_none())
            .map_or(Lang::Shell, |c| c.lang),
    }
}

/// The client host's program: runs the script, restarting after crashes.
pub async fn client_main(ctx: ClientCtx) -> turmoil::Result {
    let next = Rc::new(std::cell::Cell::new(0usize));
    let mut incarnation = 0u64;
    loop {
        let client = Client::new(config_in(&ctx.world), ctx.seed.wrapping_add(incarnation));
        let transport = Arc::new(SimTransport {
            trace: ctx.trace.clone(),
        });
        let mut driver = Driver::new(
            client,
            transport,
            Box::new(LoggingStore {
                inner: ctx.store.clone(),
                trace: ctx.trace.clone(),
            }),
            Arc::from(AGENT_BINARY),
            location(),
        );
        ctx.trace
            .log("client", format!("client process #{incarnation} starts"));
        let crashed = unless_crashed(
            run_script(&ctx, &mut driver, &next, incarnation > 0),
            wait_crash(&ctx.control),
        )
        .await;
        let Some(down) = crashed else {
            return Ok(());
        };
        drop(driver);
        ctx.trace
            .log("client", format!("client process #{incarnation} CRASHED"));
        // The calls in progress never return.
        tokio::time::sleep(Duration::from_millis(down)).await;
        incarnation += 1;
    }
}

async fn wait_crash(control: &Control) -> u64 {
    poll_until(|| control.lock().crash_client.take()).await
}

/// How often the client script looks at the switchboard.
pub const POLL: Duration = Duration::from_millis(5);

/// Looks at `ready` every [`POLL`] until it gives a value (how the client
/// script waits for a request of the fault loop: crash, cancel).
pub async fn poll_until<T>(mut ready: impl FnMut() -> Option<T>) -> T {
    loop {
        if let Some(v) = ready() {
            return v;
        }
        tokio::time::sleep(POLL).await;
    }
}

async fn run_script(
    ctx: &ClientCtx,
    driver: &mut Driver,
    next: &Rc<std::cell::Cell<usize>>,
    restarted: bool,
) {
    let log = ctx.log.clone();
    let trace = ctx.trace.clone();
    let mut on_event = |e: &Event| {
        trace.log("client", describe(e));
        log.borrow_mut().on_event(now_ms(), e);
    };
    if restarted {
        // A new client process: pick its kernels up from their records.
        let names = ctx.store.list().unwrap_or_default();
        for name in names {
            let Some(record) = ctx.store.load(&name).ok().flatten() else {
                continue;
            };
            // The script still means to cancel the cell it was running.
            let (label, cancel_at) = ctx.log.borrow().pending_cancel(&ctx.scenario);
            let start = now_ms();
            let canceller = cancel_watch(ctx, driver.cancel_handle(), label, cancel_at);
            let r = with_canceller(driver.resume(record, false, &mut on_event), canceller).await;
            finish_call(ctx, "resume", start, r.err());
        }
    }
    while let Some(action) = ctx.scenario.script.get(next.get()) {
        match action {
            Action::Idle { ms } => {
                tokio::time::sleep(Duration::from_millis(*ms)).await;
            }
            Action::Run(cell) => {
                if ctx
                    .log
                    .borrow()
                    .cells
                    .get(&cell.label)
                    .is_some_and(|c| !c.resolutions.is_empty())
                {
                    // Resolved by the resume above.
                } else {
                    run_one(ctx, driver, cell, &mut on_event).await;
                }
            }
        }
        next.set(next.get() + 1);
    }
    // Ground truth of what the script's cells left running.
    ctx.control.lock().snapshot_now = true;
    tokio::time::sleep(POLL).await;
    // Liveness: once every fault has healed, a fresh cell must run.
    let healed = ctx.control.lock().healed_at_ms;
    let now = now_ms();
    if healed > now {
        tokio::time::sleep(Duration::from_millis(healed - now)).await;
    }
    {
        // Faults armed for ops that never came are over too.
        let mut a = ctx.control.lock();
        a.reply_lost.clear();
        a.slow_start.clear();
        a.cancel_before_submit = false;
        a.cancel_now = false;
        a.cancel_after_done = false;
        a.crash_client = None;
    }
    let alive = liveness_cell(&ctx.scenario, "liveness");
    let mut outcome = run_one(ctx, driver, &alive, &mut on_event).await;
    if outcome.as_ref() != Some(&CellOutcome::Ok) && !ctx.log.borrow().state_lost.is_empty() {
        // After a reported loss the first cell may go down with the old
        // kernel; the next one must run on a fresh kernel.
        let again = liveness_cell(&ctx.scenario, "liveness2");
        outcome = run_one(ctx, driver, &again, &mut on_event).await;
    }
    ctx.log.borrow_mut().liveness = outcome;
    let start = now_ms();
    for k in kernels(&ctx.scenario) {
        let r = driver.shutdown(&k, &mut on_event).await;
        finish_call(ctx, "shutdown", start, r.err());
    }
    // Let exec calls still in flight on the sandbox drain.
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    ctx.log.borrow_mut().finished = true;
    ctx.trace.log("client", "script done");
}

fn finish_call(ctx: &ClientCtx, name: &str, start: u64, err: Option<DriverError>) {
    if let Some(e) = &err {
        ctx.trace.log("client", format!("{name} failed: {e}"));
    }
    ctx.log.borrow_mut().call(name, start, now_ms(), err);
}

async fn run_one(
    ctx: &ClientCtx,
    driver: &mut Driver,
    cell: &CellSpec,
    on_event: &mut dyn FnMut(&Event),
) -> Option<CellOutcome> {
    {
        let mut log = ctx.log.borrow_mut();
        log.current = Some(cell.label.clone());
        log.cells.entry(cell.label.clone()).or_default().started_at = Some(now_ms());
    }
    ctx.trace.log("client", format!("run_cell {}", cell.label));
    let start = now_ms();
    let handle = driver.cancel_handle();
    let code = Bytes(cell.full_workload().encode());
    let timeout = cell.timeout_ms.map(Duration::from_millis);
    let cancel_at = cell.cancel_after_ms.map(|ms| start + ms);
    let canceller = cancel_watch(ctx, handle, cell.label.clone(), cancel_at);
    let name = kernel_of(cell);
    let run = driver.run_cell(&name, cell.lang, code, timeout, &mut *on_event);
    let result = with_canceller(run, canceller).await;
    let outcome = match result {
        Ok((_, outcome)) => Some(outcome),
        Err(e) => {
            finish_call(ctx, &format!("run_cell {}", cell.label), start, Some(e));
            return None;
        }
    };
    finish_call(ctx, &format!("run_cell {}", cell.label), start, None);
    let after_done = std::mem::take(&mut ctx.control.lock().cancel_after_done);
    if after_done {
        let key = ctx
            .log
            .borrow()
            .cells
            .get(&cell.label)
            .and_then(|c| c.key.clone());
        if let Some(key) = key {
            ctx.trace
                .log("client", format!("cancel {} after it resolved", cell.label));
            let now = driver.now();
            driver.client().cancel(&key, now);
            let start = now_ms();
            let r = driver.settle(on_event).await;
            finish_call(ctx, "cancel after done", start, r.err());
        }
    }
    outcome
}

/// Runs the client `call` with the script's `canceller` beside it, and
/// gives the call's result. The call is polled first, so a call that is
/// ready wins; the canceller (which never ends) only asks the driver to
/// cancel.
pub async fn with_canceller<T>(
    call: impl std::future::Future<Output = T>,
    canceller: impl std::future::Future<Output = ()>,
) -> T {
    tokio::pin!(call);
    tokio::pin!(canceller);
    tokio::select! {
        biased;
        r = &mut call => r,
        () = &mut canceller => unreachable!("the canceller never ends"),
    }
}

/// Runs `script` unless `crash` fires first: `Some(how long the client
/// stays down)` when it crashed, `None` when the script ran to its end. A
/// crash wins a tie (`biased`), so a run replays the same way.
pub async fn unless_crashed(
    script: impl std::future::Future<Output = ()>,
    crash: impl std::future::Future<Output = u64>,
) -> Option<u64> {
    tokio::pin!(script);
    tokio::pin!(crash);
    tokio::select! {
        biased;
        down = &mut crash => Some(down),
        () = &mut script => None,
    }
}

/// Cancels the current cell (`label`) at `at` (virtual ms) and whenever
/// the fault loop asks for it; never returns.
async fn cancel_watch(
    ctx: &ClientCtx,
    handle: tether::CancelHandle,
    label: String,
    at: Option<u64>,
) {
    let mut scripted = at;
    loop {
        let wait = async {
            match scripted {
                Some(at) => {
                    let now = now_ms();
                    tokio::time::sleep(Duration::from_millis(at.saturating_sub(now))).await;
                }
                None => std::future::pending().await,
            }
        };
        let fault = poll_until(|| std::mem::take(&mut ctx.control.lock().cancel_now).then_some(()));
        tokio::select! {
            biased;
            () = wait => scripted = None,
            () = fault => {}
        }
        ctx.trace.log("client", format!("cancel {label}"));
        if let Some(c) = ctx.log.borrow_mut().cells.get_mut(&label) {
            c.cancel_requested = true;
        }
        handle.cancel_current();
    }
}
