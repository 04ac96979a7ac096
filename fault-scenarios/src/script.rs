//! The one client script of every scenario, whichever host runs it: the
//! real [`tether::Driver`] runs the scenario's cells, cancels them when
//! the scenario or a fault says so, crashes and restarts from its records
//! when a fault says so, runs the liveness cells once every fault has
//! healed, and shuts every kernel down. What differs between the
//! simulation and a real backend sits behind [`Host`]: the clock, a new
//! client process, where observations come from, and the cell's code.
//!
//! Time is milliseconds since the run began ([`Host::now_ms`]); sleeps are
//! tokio's, virtual under turmoil and real live.

use crate::control::Control;
use crate::observe::ClientLog;
use crate::scenario::{Action, CellSpec, Scenario};
use crate::workload::{Step, Workload};
use std::cell::RefMut;
use std::future::Future;
use std::time::Duration;
use tether::driver::DriverError;
use tether::{Driver, RecordStore};
use tether_core::agent::tombstone::STOPPED;
use tether_core::bytes::Bytes;
use tether_core::client::{CellKey, ClientError, Config, Event, KernelRecord};
use tether_core::ids::{CellSeq, KernelName};
use tether_core::protocol::{CellOutcome, Lang, Stream};

/// The kernel every scenario uses unless a cell names another.
pub const KERNEL: &str = "sim";

/// How often the client script looks at the switchboard.
pub const POLL: Duration = Duration::from_millis(5);

/// The cancel grace period of [`timing`]: TERM, then this long, then KILL.
pub const GRACE: Duration = Duration::from_millis(300);

/// The client timing every host uses: the defaults scaled down so that a
/// run stays short (in virtual time, and in real time live).
pub fn timing(c: &mut Config) {
    c.wait_ms = 2_000;
    c.exec_slack = Duration::from_millis(2_000);
    c.max_attempts = 6;
    c.backoff_base = Duration::from_millis(100);
    c.backoff_max = Duration::from_millis(1_000);
    c.unreachable_after = Duration::from_secs(15);
    c.grace = GRACE;
    // A plain exec (fail open) is never re-sent, so nothing but this bounds
    // one whose connection went silent: well inside a call's budget.
    c.fallback_limit = Duration::from_secs(30);
}

pub use crate::observe::Frontend;

/// What the script needs from the host it runs on.
pub trait Host {
    /// Milliseconds since the run began.
    fn now_ms(&self) -> u64;
    /// The switchboard the host's fault loop arms.
    fn control(&self) -> &Control;
    /// What the client saw so far.
    fn log(&self) -> RefMut<'_, ClientLog>;
    /// The scenario being run.
    fn scenario(&self) -> &Scenario;
    /// A client process of `frontend` (number `incarnation`, 0 first): a
    /// fresh driver over the host's transport sharing the records of that
    /// frontend's processes before it.
    fn new_client(&self, incarnation: u64, frontend: Frontend) -> Driver;
    /// The records `frontend`'s client processes share (they outlive a
    /// crash).
    fn records(&self, frontend: Frontend) -> Vec<KernelRecord>;
    /// The code `cell` runs as.
    fn code(&self, cell: &CellSpec) -> Bytes;
    /// A line for the run's trace or report.
    fn note(&self, what: &str);
    /// The driver reported `event`.
    fn on_event(&self, event: &Event) {
        let now = self.now_ms();
        self.log().on_event(now, event);
    }
    /// A cell resolved, or a resume ended: the host may look at the
    /// sandbox.
    fn after_cell(&self) -> impl Future<Output = ()> {
        async {}
    }
    /// The script's pause between cells ([`Action::Idle`]). A fault takes
    /// no time in the simulation; a live host also waits here for one it
    /// is still making (a container being replaced takes seconds), so the
    /// next cell starts after it, as in the simulation.
    fn idle(&self, ms: u64) -> impl Future<Output = ()> {
        tokio::time::sleep(Duration::from_millis(ms))
    }
    /// The script's cells are done: the host records what they left alive.
    fn snapshot(&self) -> impl Future<Output = ()>;
    /// Every fault is due by now (the liveness cell comes next): the host
    /// waits for one it is still making. A fault takes no time in the
    /// simulation; a live host finds its target first (a `ps`), so under
    /// load a TERM due before the liveness cell may land during it.
    fn faults_made(&self) -> impl Future<Output = ()> {
        async {}
    }
    /// Every kernel was shut down: the host lets what is in flight drain.
    fn after_shutdown(&self) -> impl Future<Output = ()> {
        async {}
    }
}

/// The records of `store`, for [`Host::records`].
pub fn records_of(store: &dyn RecordStore) -> Vec<KernelRecord> {
    let names = store.list().unwrap_or_default();
    names
        .iter()
        .filter_map(|n| store.load(n).ok().flatten())
        .collect()
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
        workload: Workload {
            steps: vec![Step::Print {
                stream: Stream::Stdout,
                text: "alive\n".into(),
            }],
        },
        timeout_ms: None,
        cancel_after_ms: None,
        expect: None,
        kernel: None,
        bystander: false,
        second_client: false,
        nul_byte: false,
        cancel_races_end: false,
        lang: scenario
            .cells()
            .find(|c| c.kernel.is_none())
            .map_or(Lang::Shell, |c| c.lang),
    }
}

/// The client process, again and again: runs the script; on a crash the
/// driver goes with its calls in flight, the client stays down, and a new
/// one picks its kernels up from the records.
pub async fn client_main(host: &impl Host) {
    let next = std::cell::Cell::new(0usize);
    let mut incarnation = 0u64;
    loop {
        let mut driver = client(host, incarnation, Frontend::First);
        host.note(&format!("client process #{incarnation} starts"));
        let crashed = unless_crashed(
            run_script(host, &mut driver, &next, incarnation),
            wait_crash(host.control()),
        )
        .await;
        let Some(down) = crashed else { return };
        drop(driver);
        host.note(&format!("client process #{incarnation} CRASHED"));
        let at = host.now_ms();
        host.log().crashes.push(at);
        // The calls in progress never return.
        tokio::time::sleep(Duration::from_millis(down)).await;
        incarnation += 1;
    }
}

/// A client process of `frontend` with the scenarios' tool handler.
fn client(host: &impl Host, incarnation: u64, frontend: Frontend) -> Driver {
    let mut driver = host.new_client(incarnation, frontend);
    driver.set_tools(Some(tool_handler(host.control().clone(), incarnation)));
    driver
}

/// The scenarios' tool handler for client process `incarnation`: returns
/// [`crate::workload::tool_result`] of the call at once (never, for the
/// [`crate::workload::STALLED_TOOL`]), and counts each
/// run in the switchboard (the oracle's ground truth for the handler).
pub fn tool_handler(control: Control, incarnation: u64) -> tether::driver::ToolHandler {
    std::sync::Arc::new(move |call: tether::driver::ToolCall| {
        let args = call.args.to_string();
        let result = crate::workload::tool_result(&call.name, &args);
        control.lock().tool_runs.push(crate::oracle::ToolRunObs {
            incarnation,
            id: call.id.clone(),
            result: result.clone(),
            name_len: call.name.len(),
            args_len: args.len(),
        });
        let stalled = call.name == crate::workload::STALLED_TOOL;
        Box::pin(async move {
            if stalled {
                std::future::pending::<()>().await;
            }
            tether_core::protocol::calls::CallReply::Ok {
                value: serde_json::Value::String(result),
            }
        })
    })
}

async fn wait_crash(control: &Control) -> u64 {
    poll_until(|| control.lock().crash_client.take()).await
}

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
    host: &impl Host,
    driver: &mut Driver,
    next: &std::cell::Cell<usize>,
    incarnation: u64,
) {
    let mut on_event = |e: &Event| host.on_event(e);
    let scenario = host.scenario();
    // The second frontend's client process, once a cell of its runs (it
    // crashes with the first).
    let mut second: Option<Driver> = None;
    if incarnation > 0 {
        // A new client process: pick its kernels up from their records.
        for (frontend, record) in frontend_records(host) {
            host.log().frontend = frontend;
            let driver = match frontend {
                Frontend::First => &mut *driver,
                Frontend::Second => {
                    second.get_or_insert_with(|| client(host, incarnation, Frontend::Second))
                }
            };
            // The script still means to cancel the cell it was running.
            let (label, cancel_after) = host.log().pending_cancel(scenario);
            let start = host.now_ms();
            // A cell submitted before the crash whose acceptance was never
            // seen (its reply lost) is the agent's, or will be once the
            // resume resends it: its cancel counts from the resume.
            if let Some(seen) = host.log().cells.get_mut(&label) {
                seen.accepted_at.get_or_insert(start);
            }
            // A fault's cancel reaches every cell the resume waits on
            // (several, after a crash during cells queued together).
            let mut labels = vec![label];
            {
                let log = host.log();
                for c in &record.cells {
                    let key = CellKey {
                        kernel: record.kernel.clone(),
                        seq: c.seq,
                    };
                    if let Some(l) = log.labels.get(&(frontend, key)) {
                        if !labels.contains(l) {
                            labels.push(l.clone());
                        }
                    }
                }
            }
            let canceller = cancel_watch(host, driver.cancel_handle(), labels, cancel_after);
            let r = with_canceller(driver.resume(record, false, &mut on_event), canceller).await;
            finish_call(host, "resume", start, r.err());
            host.after_cell().await;
        }
    }
    host.log().frontend = Frontend::First;
    while let Some(action) = scenario.script.get(next.get()) {
        match action {
            Action::Idle { ms } => host.idle(*ms).await,
            Action::Together(cells) => {
                // Those a resume has not resolved yet (see below).
                let left: Vec<&CellSpec> = {
                    let log = host.log();
                    cells
                        .iter()
                        .filter(|c| {
                            log.cells.get(&c.label).is_none_or(|seen| {
                                seen.resolutions.is_empty() && seen.ran_without_kernel.is_none()
                            })
                        })
                        .collect()
                };
                if !left.is_empty() {
                    run_together(host, driver, &left, &mut on_event).await;
                }
            }
            Action::Run(cell) => {
                // A resolved one was resolved by the resume above. One that
                // ran without a kernel left the record before its plain
                // exec, which may have run: it is never run again (as a
                // resume never submits it again).
                // A resume's refusal that asks for the cell again (a second
                // frontend ran the kernel further) is followed.
                let done = {
                    let now = host.now_ms();
                    let mut log = host.log();
                    let refused = log
                        .cells
                        .get(&cell.label)
                        .and_then(|c| c.resolutions.last().cloned());
                    if let Some(refused) = refused {
                        log.follow_run_again(&cell.label, &refused, now);
                    }
                    log.cells.get(&cell.label).is_some_and(|c| {
                        !c.resolutions.is_empty() || c.ran_without_kernel.is_some()
                    })
                };
                if !done {
                    if cell.second_client && second.is_none() {
                        second = Some(client(host, incarnation, Frontend::Second));
                    }
                    let (mine, other, frontend, other_frontend) = match second.as_mut() {
                        Some(second) if cell.second_client => (
                            second,
                            Some(&mut *driver),
                            Frontend::Second,
                            Frontend::First,
                        ),
                        other => (&mut *driver, other, Frontend::First, Frontend::Second),
                    };
                    // The other frontend's cells written off as `unknown`
                    // may still run on a kernel both use: this cell would
                    // wait behind them, which only the other can end. As
                    // its user would, it resumes them first (sending the
                    // cancel it still owes), once the sandbox answers
                    // again (drawn_clients seed 50: a cell queued behind
                    // the other's `sleep 600`, its cancel never sent).
                    if let Some(other) = other {
                        resume_all_kept(host, other, other_frontend, true, &mut on_event).await;
                    }
                    host.log().frontend = frontend;
                    run_one(host, mine, cell, &mut on_event).await;
                    host.log().frontend = Frontend::First;
                }
            }
        }
        next.set(next.get() + 1);
    }
    // Cells written off as `unknown` whose submit may have reached the
    // daemon are not done: they may still run (a loop the script meant to
    // cancel, its acceptance never seen). Once every fault has healed, a
    // user resumes them, as the client asks before it takes another cell
    // on their kernel. (One never sent is not resumed: that would send
    // it, and a cell written off must not start afterwards.)
    let drivers = [
        (Frontend::First, Some(&mut *driver)),
        (Frontend::Second, second.as_mut()),
    ];
    for (frontend, driver) in drivers {
        let Some(driver) = driver else { continue };
        // The second frontend sends the cancels it still owes too: the
        // liveness cell below is the first's, and would wait behind a
        // cell only the second can end (drawn_clients seed 100350: its
        // cancel of a `sleep 600` cut off by a partition, after which it
        // gave the kernel up; the first's client sends its own before
        // its next cell on the kernel).
        let with_cancels = frontend == Frontend::Second;
        resume_all_kept(host, driver, frontend, with_cancels, &mut on_event).await;
    }
    host.log().frontend = Frontend::First;
    // Ground truth of what the script's cells left running.
    host.snapshot().await;
    // Liveness: once every fault has healed, a fresh cell must run.
    sleep_until_healed(host).await;
    host.faults_made().await;
    host.control().disarm_script_faults();
    let alive = liveness_cell(scenario, "liveness");
    let mut outcome = run_one(host, driver, &alive, &mut on_event).await;
    if outcome.as_ref() != Some(&CellOutcome::Ok)
        && (!host.log().state_lost.is_empty() || stopped_under(outcome.as_ref()))
    {
        // After a reported loss the first cell may go down with the old
        // kernel, and a kernel told to stop (SIGTERM) closes a cell that
        // reached it while it stopped with the stop as its error (the
        // cell never ran); the next one must run on a fresh kernel.
        let again = liveness_cell(scenario, "liveness2");
        outcome = run_one(host, driver, &again, &mut on_event).await;
    }
    host.log().liveness = outcome;
    read_background_logs(host, driver).await;
    let start = host.now_ms();
    host.log().shutdown_at = Some(start);
    for k in kernels(scenario) {
        let r = driver.shutdown(&k, &mut on_event).await;
        finish_call(host, "shutdown", start, r.err());
    }
    let mut awaiting = driver.client().calls_awaiting_frontend();
    // Each frontend shuts down the kernels its records hold (one only the
    // second opened is no kernel of the first's), those it is still
    // shutting down too: an eviction whose shutdown waits for a retry
    // (drawn_clients seed 501385: held past the give-up of the other
    // kernel's spawn) is driven to its end.
    if let Some(second) = second.as_mut() {
        host.log().frontend = Frontend::Second;
        let held: Vec<String> = host
            .records(Frontend::Second)
            .iter()
            .map(|r| r.kernel.to_string())
            .collect();
        for k in kernels(scenario) {
            if second.client().record(&k).is_some() || held.contains(&k.to_string()) {
                let r = second.shutdown(&k, &mut on_event).await;
                finish_call(host, "shutdown (second frontend)", start, r.err());
            }
        }
        awaiting += second.client().calls_awaiting_frontend();
        host.log().frontend = Frontend::First;
    }
    host.log().calls_awaiting_at_end = awaiting;
    host.after_shutdown().await;
    let left: Vec<String> = frontend_records(host)
        .iter()
        .map(|(_, r)| r.kernel.to_string())
        .collect();
    host.log().records_left = left;
    host.log().finished = true;
    host.note("script done");
}

/// The records of both frontends, the first's first.
fn frontend_records(host: &impl Host) -> Vec<(Frontend, KernelRecord)> {
    [Frontend::First, Frontend::Second]
        .into_iter()
        .flat_map(|f| host.records(f).into_iter().map(move |r| (f, r)))
        .collect()
}

/// The cells `driver`'s records keep written off as `unknown` whose
/// submit may have reached the daemon, by kernel (with those whose
/// cancel is still to be sent when `with_cancels`).
fn kept_cells(
    scenario: &Scenario,
    driver: &mut Driver,
    with_cancels: bool,
) -> Vec<(KernelName, Vec<CellSeq>)> {
    kernels(scenario)
        .into_iter()
        .filter_map(|k| {
            let record = driver.client().record(&k)?;
            let seqs: Vec<CellSeq> = record
                .cells
                .iter()
                .filter(|c| c.submitted && (with_cancels || !c.cancel_requested))
                .map(|c| c.seq)
                .collect();
            (!seqs.is_empty()).then_some((k, seqs))
        })
        .collect()
}

/// Resumes, as `frontend`, the cells `driver`'s records keep written off
/// ([`kept_cells`]), once every fault has healed.
async fn resume_all_kept(
    host: &impl Host,
    driver: &mut Driver,
    frontend: Frontend,
    with_cancels: bool,
    on_event: &mut dyn FnMut(&Event),
) {
    let kept = kept_cells(host.scenario(), driver, with_cancels);
    if kept.is_empty() {
        return;
    }
    sleep_until_healed(host).await;
    host.log().frontend = frontend;
    for (k, seqs) in &kept {
        resume_kept(host, driver, k, seqs, &mut *on_event).await;
    }
}

/// Sleeps until every fault of the run has healed.
async fn sleep_until_healed(host: &impl Host) {
    let healed = host.control().lock().healed_at_ms;
    let now = host.now_ms();
    if healed > now {
        tokio::time::sleep(Duration::from_millis(healed - now)).await;
    }
}

/// A cell's kernel was stopped (SIGTERM) before the cell finished: the
/// daemon's own error for it.
fn stopped_under(outcome: Option<&CellOutcome>) -> bool {
    matches!(outcome, Some(CellOutcome::Error { message }) if message == STOPPED)
}

/// The kernels whose cells print after they resolved
/// ([`Step::LatePrint`]), sorted, once each.
pub fn background_kernels(scenario: &Scenario) -> Vec<KernelName> {
    let mut kernels: Vec<KernelName> = scenario
        .cells()
        .filter(|c| {
            c.workload
                .steps
                .iter()
                .any(|s| matches!(s, Step::LatePrint { .. }))
        })
        .map(kernel_of)
        .collect();
    kernels.sort();
    kernels.dedup();
    kernels
}

/// Reads the background log of each kernel whose cells print after they
/// resolved, as `tether logs` does (one `logs` op), once every fault has
/// healed: the oracle's view of it.
async fn read_background_logs(host: &impl Host, driver: &Driver) {
    for k in background_kernels(host.scenario()) {
        let op = tether_core::protocol::Op::Logs { kernel: k.clone() };
        let read = match driver.query(op, Duration::from_secs(30)).await {
            Ok(tether_core::protocol::Reply::Logs { data }) => Ok(data.0),
            Ok(other) => Err(format!("the logs op answered {other:?}")),
            Err(e) => Err(e.to_string()),
        };
        let what = match &read {
            Ok(data) => format!("{} bytes", data.len()),
            Err(e) => format!("failed: {e}"),
        };
        host.note(&format!("logs of {k}: {what}"));
        host.log().background.insert(k.to_string(), read);
    }
}

fn finish_call(host: &impl Host, name: &str, start: u64, err: Option<DriverError>) {
    if let Some(e) = &err {
        host.note(&format!("{name} failed: {e}"));
    }
    let now = host.now_ms();
    host.log().call(name, start, now, err);
}

/// The code `cell` is submitted as: the host's, and for a cell with a
/// NUL byte ([`CellSpec::nul_byte`]) a NUL and more code after it. A
/// shell handed that code through an argv would run the part before the
/// NUL alone.
fn code_of(host: &impl Host, cell: &CellSpec) -> Bytes {
    let Bytes(mut code) = host.code(cell);
    if cell.nul_byte {
        code.extend_from_slice(b"\0\necho after the null byte\n");
    }
    Bytes(code)
}

async fn run_one(
    host: &impl Host,
    driver: &mut Driver,
    cell: &CellSpec,
    on_event: &mut dyn FnMut(&Event),
) -> Option<CellOutcome> {
    let name = kernel_of(cell);
    let mut resumes = 0;
    let (start, result) = loop {
        let start = host.now_ms();
        {
            let mut log = host.log();
            log.current = Some(cell.label.clone());
            let newcomer = !log
                .ready_to
                .contains(&(log.frontend, name.as_str().to_owned()));
            let seen = log.cells.entry(cell.label.clone()).or_default();
            seen.started_at = Some(start);
            seen.newcomer.get_or_insert(newcomer);
        }
        host.note(&format!("run_cell {}", cell.label));
        host.log()
            .kernel_uses
            .push((start, name.as_str().to_owned()));
        let handle = driver.cancel_handle();
        let timeout = cell.timeout_ms.map(Duration::from_millis);
        let canceller = cancel_watch(host, handle, vec![cell.label.clone()], cell.cancel_after_ms);
        let run = driver.run_cell(
            &name,
            cell.lang,
            code_of(host, cell),
            timeout,
            &mut *on_event,
        );
        let result = with_canceller(run, canceller).await;
        match &result {
            Err(DriverError::Client(ClientError::UnresolvedCell { seqs, .. }))
                if resumes < MAX_RESUMES =>
            {
                // The kernel keeps a written-off cell that may still run,
                // and the client refuses to queue a new one behind it: as
                // a user of the CLI does, finish it with a resume first,
                // once the sandbox answers again (a resume during the
                // outage would only write it off again).
                resumes += 1;
                let seqs = seqs.clone();
                host.note(&format!("run_cell {} refused: resume first", cell.label));
                sleep_until_healed(host).await;
                resume_kept(host, driver, &name, &seqs, &mut *on_event).await;
            }
            Ok((_, outcome)) => {
                let now = host.now_ms();
                if !host.log().follow_run_again(&cell.label, outcome, now) {
                    break (start, result);
                }
                // Another client record ran the kernel past this one's
                // numbers (a second frontend): nothing ran, and the
                // refusal asks for the cell again, which now goes through.
                let call = format!("run_cell {} refused behind another client", cell.label);
                finish_call(host, &call, start, None);
                host.note(&format!("{call}: again"));
            }
            _ => break (start, result),
        }
    };
    let call = format!("run_cell {}", cell.label);
    let (key, outcome) = match result {
        Ok(r) => r,
        Err(e) => {
            finish_call(host, &call, start, Some(e));
            return None;
        }
    };
    finish_call(host, &call, start, None);
    host.after_cell().await;
    let after_done = std::mem::take(&mut host.control().lock().cancel_after_done);
    if after_done {
        host.note(&format!("cancel {} after it resolved", cell.label));
        let now = driver.now();
        driver.client().cancel(&key, now);
        let start = host.now_ms();
        let r = driver.settle(on_event).await;
        finish_call(host, "cancel after done", start, r.err());
    }
    Some(outcome)
}

/// Queues `cells` (of one kernel, the first frontend's) at once and waits
/// for all ([`crate::scenario::Action::Together`]); a refusal behind a
/// kept `unknown` cell is met as [`run_one`] meets it.
async fn run_together(
    host: &impl Host,
    driver: &mut Driver,
    cells: &[&CellSpec],
    on_event: &mut dyn FnMut(&Event),
) {
    let mut cells = cells.to_vec();
    let mut resumes = 0;
    loop {
        let labels: Vec<String> = cells.iter().map(|c| c.label.clone()).collect();
        let call = format!("run_cells {}", labels.join(" "));
        let start = host.now_ms();
        {
            let mut log = host.log();
            log.current = Some(labels[0].clone());
            for cell in &cells {
                let name = kernel_of(cell).as_str().to_owned();
                let newcomer = !log.ready_to.contains(&(log.frontend, name.clone()));
                let seen = log.cells.entry(cell.label.clone()).or_default();
                seen.started_at = Some(start);
                seen.newcomer.get_or_insert(newcomer);
                log.kernel_uses.push((start, name));
            }
        }
        host.note(&call);
        let new = cells
            .iter()
            .map(|c| tether::NewCell {
                kernel: kernel_of(c),
                lang: c.lang,
                code: code_of(host, c),
                timeout: c.timeout_ms.map(Duration::from_millis),
            })
            .collect();
        let canceller = cancel_watch(host, driver.cancel_handle(), labels.clone(), None);
        let mut name = |i: usize, key: &CellKey| host.log().name(&labels[i], key);
        let run = driver.run_cells(new, &mut *on_event, &mut name);
        match with_canceller(run, canceller).await {
            Err(DriverError::Client(ClientError::UnresolvedCell { seqs, .. }))
                if resumes < MAX_RESUMES =>
            {
                // As in run_one: the refusal came before any cell was
                // queued (they share a kernel).
                resumes += 1;
                host.note(&format!("{call} refused: resume first"));
                sleep_until_healed(host).await;
                let kernel = kernel_of(cells[0]);
                resume_kept(host, driver, &kernel, &seqs, &mut *on_event).await;
            }
            Ok(outcomes) => {
                // Another client record ran the kernel past this one's
                // numbers (a second frontend): those refused ran nothing,
                // and the refusal asks for them again (as in run_one).
                let now = host.now_ms();
                let again: Vec<&CellSpec> = cells
                    .iter()
                    .zip(&outcomes)
                    .filter(|(c, (_, o))| host.log().follow_run_again(&c.label, o, now))
                    .map(|(c, _)| *c)
                    .collect();
                if again.is_empty() {
                    finish_call(host, &call, start, None);
                    break;
                }
                let refused = format!("{call} refused behind another client");
                finish_call(host, &refused, start, None);
                host.note(&format!("{refused}: again"));
                cells = again;
            }
            Err(e) => {
                finish_call(host, &call, start, Some(e));
                break;
            }
        }
    }
    host.after_cell().await;
}

/// How many resumes a cell refused behind a kept `unknown` cell gets
/// (each once every fault healed; a client crash may cut one short).
const MAX_RESUMES: u32 = 4;

/// Resumes `kernel`, which keeps the written-off cells `seqs` (that may
/// still run), until they resolve; the script's cancel of one of them
/// (the first it meant to cancel) counts from the resume when the
/// client never saw it accepted, as after a crash.
async fn resume_kept(
    host: &impl Host,
    driver: &mut Driver,
    kernel: &KernelName,
    seqs: &[CellSeq],
    on_event: &mut dyn FnMut(&Event),
) {
    let Some(record) = driver.client().record(kernel) else {
        return;
    };
    let scenario = host.scenario();
    let labels: Vec<String> = {
        let log = host.log();
        seqs.iter()
            .filter_map(|seq| {
                let key = CellKey {
                    kernel: kernel.clone(),
                    seq: *seq,
                };
                log.labels.get(&(log.frontend, key)).cloned()
            })
            .collect()
    };
    let spec = |label: &String| scenario.cells().find(|c| &c.label == label);
    let cancel_after = |label: &String| spec(label).and_then(|c| c.cancel_after_ms);
    // A cell the script means to cancel: at a time, or by a cancel fault
    // (cancel_early seed 60084: its resume sent the submit the fault
    // held, and nobody cancelled the 600 s cell).
    let to_cancel = |label: &String| {
        spec(label).is_some_and(|c| {
            c.cancel_after_ms.is_some() || c.expect == Some(crate::scenario::Expect::Cancelled)
        })
    };
    let label = labels
        .iter()
        .find(|l| to_cancel(l))
        .or(labels.first())
        .cloned()
        .unwrap_or_default();
    let after = cancel_after(&label);
    let driver_cancel = driver.cancel_handle();
    let start = host.now_ms();
    if let Some(seen) = host.log().cells.get_mut(&label) {
        seen.accepted_at.get_or_insert(start);
    }
    let resume = driver.resume(record, false, on_event);
    // Only a cell the script meant to cancel gets a canceller: a fault's
    // cancel is for the cell the script runs, never a bystander resumed.
    let r = if to_cancel(&label) {
        let canceller = cancel_watch(host, driver_cancel, vec![label], after);
        with_canceller(resume, canceller).await
    } else {
        resume.await
    };
    finish_call(host, "resume", start, r.err());
    host.after_cell().await;
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

/// Cancels the current cells (`labels`, the first the one the script
/// cancels) `after` ms after the agent took the first (counted from
/// acceptance, not from the call, so that the first cell on a real
/// backend, which installs and spawns first, is cancelled while its code
/// runs as it is in the simulation) and whenever the fault loop asks for
/// it (which cancels every current cell); never returns.
async fn cancel_watch(
    host: &impl Host,
    handle: tether::CancelHandle,
    labels: Vec<String>,
    after: Option<u64>,
) {
    let label = labels.first().cloned().unwrap_or_default();
    let mut scripted = after;
    loop {
        let wait = async {
            match scripted {
                Some(after) => {
                    let accepted =
                        poll_until(|| host.log().cells.get(&label).and_then(|c| c.accepted_at))
                            .await;
                    let now = host.now_ms();
                    tokio::time::sleep(Duration::from_millis(
                        (accepted + after).saturating_sub(now),
                    ))
                    .await;
                }
                None => std::future::pending().await,
            }
        };
        let fault = poll_until(|| {
            let mut a = host.control().lock();
            std::mem::take(&mut a.cancel_now).then(|| std::mem::take(&mut a.cancel_is_early))
        });
        let early = tokio::select! {
            biased;
            () = wait => {
                scripted = None;
                false
            }
            early = fault => early,
        };
        host.note(&format!("cancel {}", labels.join(" ")));
        for label in &labels {
            if let Some(c) = host.log().cells.get_mut(label) {
                c.cancel_requested = true;
                c.cancelled_early |= early;
            }
        }
        handle.cancel_current();
    }
}
