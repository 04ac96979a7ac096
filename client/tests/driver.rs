//! The driver as a library, in-process, against the real agent through
//! the local transport: ordering of record writes and execs, exec counts,
//! cancel through a handle, and a new driver resuming from the records a
//! dropped one left behind.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;
use tether::agent_bin::AgentBinary;
use tether::backend::LocalOptions;
use tether::local::LocalTransport;
use tether::records::RecordError;
use tether::transport::{ExecFuture, ExecRequest, Transport};
use tether::{Driver, MemoryStore, RecordStore};
use tether_core::bytes::Bytes;
use tether_core::client::{Client, Config, Event, KernelRecord};
use tether_core::ids::KernelName;
use tether_core::protocol::{CellOutcome, Envelope, Lang, OpKind, Stream};

type Log = Arc<Mutex<Vec<String>>>;

/// Logs every save before doing it.
struct LoggingStore {
    inner: MemoryStore,
    log: Log,
}

impl RecordStore for LoggingStore {
    fn load(&self, kernel: &KernelName) -> Result<Option<KernelRecord>, RecordError> {
        self.inner.load(kernel)
    }
    fn save(&mut self, record: &KernelRecord) -> Result<(), RecordError> {
        let cells: Vec<u64> = record.cells.iter().map(|c| c.seq.0).collect();
        let mut log = self.log.lock().unwrap();
        log.push(format!("persist {cells:?}"));
        for c in &record.cells {
            log.push(format!("cursor {}", c.cursor));
        }
        drop(log);
        self.inner.save(record)
    }
    fn sync(&mut self) -> Result<(), RecordError> {
        self.log.lock().unwrap().push("sync".into());
        self.inner.sync()
    }
    fn forget(&mut self, kernel: &KernelName) -> Result<(), RecordError> {
        self.inner.forget(kernel)
    }
    fn list(&self) -> Result<Vec<KernelName>, RecordError> {
        self.inner.list()
    }
}

/// Logs every exec's op kind when it starts.
struct LoggingTransport {
    inner: LocalTransport,
    log: Log,
}

impl Transport for LoggingTransport {
    fn exec(&self, req: ExecRequest) -> ExecFuture<'_> {
        let kind = serde_json::from_slice::<Envelope>(&req.stdin)
            .map(|e| e.op.kind().to_string())
            .unwrap_or_else(|_| "install".into());
        self.log.lock().unwrap().push(format!("exec {kind}"));
        self.inner.exec(req)
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
}

struct Rig {
    root: tempfile::TempDir,
    agent: AgentBinary,
    store: MemoryStore,
    log: Log,
}

impl Rig {
    fn new() -> Rig {
        Rig {
            root: tempfile::Builder::new()
                .prefix("tether-driver")
                .tempdir()
                .unwrap(),
            agent: AgentBinary::load(common::agent_bin()).unwrap(),
            store: MemoryStore::new(),
            log: Log::default(),
        }
    }

    fn driver(&self, seed: u64) -> Driver {
        let location = self.agent.location(self.root.path().to_str().unwrap());
        let client = Client::new(Config::new(location.clone(), self.agent.size()), seed);
        Driver::new(
            client,
            Arc::new(LoggingTransport {
                inner: LocalTransport::new(LocalOptions::default()),
                log: self.log.clone(),
            }),
            Box::new(LoggingStore {
                inner: self.store.clone(),
                log: self.log.clone(),
            }),
            self.agent.bytes.clone(),
            location,
        )
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn kernel() -> KernelName {
    KernelName::new("k").unwrap()
}

/// Runs one shell cell on the test kernel to its outcome.
fn shell_cell(
    rt: &tokio::runtime::Runtime,
    driver: &mut Driver,
    code: &str,
    on_event: &mut dyn FnMut(&Event),
) -> CellOutcome {
    rt.block_on(driver.run_cell(&kernel(), Lang::Shell, Bytes::from(code), None, on_event))
        .unwrap()
        .1
}

fn stdout_of(events: &[Event]) -> Vec<u8> {
    let mut out = Vec::new();
    for e in events {
        if let Event::Output {
            stream: Stream::Stdout,
            data,
            ..
        } = e
        {
            out.extend_from_slice(data.as_slice());
        }
    }
    out
}

#[test]
fn the_record_is_saved_before_the_submit_and_a_warm_cell_costs_one_exec() {
    let rig = Rig::new();
    let rt = rt();
    let mut driver = rig.driver(1);
    let mut events = Vec::new();
    let outcome = shell_cell(&rt, &mut driver, "echo hi", &mut |e| events.push(e.clone()));
    assert_eq!(outcome, CellOutcome::Ok);
    assert_eq!(stdout_of(&events), b"hi\n");
    rt.block_on(driver.settle(&mut |_| ())).unwrap();
    {
        let log = rig.log.lock().unwrap();
        let persist = log.iter().position(|l| l == "persist [1]");
        let submit = log.iter().position(|l| l == "exec submit");
        assert!(
            persist.is_some() && persist < submit,
            "the record must be saved before the submit: {log:?}"
        );
        // ... and synced: a sync between that save and the submit (an
        // exec logs when its task runs, so one issued before the save may
        // log after it; the submit is issued after).
        let (persist, submit) = (persist.unwrap(), submit.unwrap());
        assert!(
            log[persist..submit].iter().any(|l| l == "sync"),
            "the record must be synced before the submit: {log:?}"
        );
    }

    // Warm cells: one exec each, a submit that carries the expected
    // daemon (no probe) and the previous cell's acknowledgement (no ack).
    for _ in 0..3 {
        let before = driver.stats().clone();
        let outcome = shell_cell(&rt, &mut driver, "true", &mut |_| ());
        assert_eq!(outcome, CellOutcome::Ok);
        rt.block_on(driver.settle(&mut |_| ())).unwrap();
        let after = driver.stats();
        assert_eq!(after.total() - before.total(), 1, "{before:?} -> {after:?}");
        assert_eq!(
            after.execs[&OpKind::Submit] - before.execs[&OpKind::Submit],
            1
        );
    }
    let record = rig.store.load(&kernel()).unwrap().unwrap();
    assert!(record.cells.is_empty());
    assert_eq!(record.acked.len(), 1, "the last ack waits for a submit");

    // A new driver (a new `tether run` process) with that record: still
    // one exec for the cell. A silent cell: a wait returns a short linger
    // after a cell's first output, so a printing cell whose exit comes later
    // than that (a loaded machine) takes a second exec to collect its end.
    drop(driver);
    let mut driver = rig.driver(11);
    rt.block_on(driver.resume(record, false, &mut |_| ()))
        .unwrap();
    let outcome = shell_cell(&rt, &mut driver, "true", &mut |_| ());
    rt.block_on(driver.settle(&mut |_| ())).unwrap();
    assert_eq!(outcome, CellOutcome::Ok);
    assert_eq!(driver.stats().total(), 1, "{:?}", driver.stats());
    assert_eq!(driver.stats().execs.get(&OpKind::Submit), Some(&1));
    rt.block_on(driver.shutdown(&kernel(), &mut |_| ()))
        .unwrap();
}

/// Every record the driver saves has a cursor that covers only output it
/// has already handed to `on_event`: a crash right after a save never
/// loses output for a plain `tether resume`.
#[test]
fn a_saved_cursor_never_covers_output_not_yet_delivered() {
    let rig = Rig::new();
    let rt = rt();
    let mut driver = rig.driver(12);
    let log = rig.log.clone();
    let mut events = Vec::new();
    let outcome = shell_cell(
        &rt,
        &mut driver,
        "echo one; echo two >&2; sleep 0.2; echo three",
        &mut |e| {
            if let Event::Output { n, .. } = e {
                log.lock().unwrap().push(format!("output {n}"));
            }
            events.push(e.clone());
        },
    );
    assert_eq!(outcome, CellOutcome::Ok);
    let log = rig.log.lock().unwrap();
    let mut delivered: Vec<u64> = Vec::new();
    let mut saved = 0;
    for line in log.iter() {
        if let Some(n) = line.strip_prefix("output ") {
            delivered.push(n.parse().unwrap());
        } else if let Some(c) = line.strip_prefix("cursor ") {
            let cursor: u64 = c.parse().unwrap();
            saved += 1;
            let outputs_later: Vec<&String> = log
                .iter()
                .skip_while(|l| *l != line)
                .filter(|l| {
                    l.strip_prefix("output ")
                        .is_some_and(|n| n.parse::<u64>().unwrap() <= cursor)
                })
                .collect();
            assert!(
                outputs_later.is_empty(),
                "saved cursor {cursor} before delivering {outputs_later:?}: {log:?}"
            );
        }
    }
    assert!(saved > 0, "{log:?}");
    // All of it, each entry once, whatever the shim's reads cut it into
    // (a loaded machine may read `one` and `three` as one chunk).
    assert!(delivered.windows(2).all(|w| w[0] < w[1]), "{log:?}");
    let text = |want: Stream| -> String {
        events
            .iter()
            .filter_map(|e| match e {
                Event::Output { stream, data, .. } if *stream == want => {
                    Some(String::from_utf8_lossy(&data.0).into_owned())
                }
                _ => None,
            })
            .collect()
    };
    assert_eq!(text(Stream::Stdout), "one\nthree\n", "{log:?}");
    assert_eq!(text(Stream::Stderr), "two\n", "{log:?}");
    drop(log);
    rt.block_on(driver.shutdown(&kernel(), &mut |_| ()))
        .unwrap();
}

#[test]
fn a_cancel_handle_cancels_the_running_cell() {
    let rig = Rig::new();
    let rt = rt();
    let mut driver = rig.driver(2);
    let handle = driver.cancel_handle();
    let outcome = rt.block_on(async {
        let mut started = false;
        let mut on_event = |e: &Event| {
            if let Event::Output { data, .. } = e {
                if data.as_slice() == b"started\n" && !started {
                    started = true;
                    handle.cancel_current();
                }
            }
        };
        driver
            .run_cell(
                &kernel(),
                Lang::Shell,
                Bytes::from("echo started; sleep 300"),
                None,
                &mut on_event,
            )
            .await
            .unwrap()
            .1
    });
    assert_eq!(outcome, CellOutcome::Cancelled);
    let outcome = shell_cell(&rt, &mut driver, "true", &mut |_| ());
    assert_eq!(outcome, CellOutcome::Ok);
    rt.block_on(driver.shutdown(&kernel(), &mut |_| ()))
        .unwrap();
}

/// A driver dropped mid-cell (a crashed client process); a new one with
/// the same records resumes the cell, which ran once, and gets the rest.
#[test]
fn a_new_driver_resumes_from_the_records_of_a_dropped_one() {
    let rig = Rig::new();
    let rt = rt();
    let counter = rig.root.path().join("counter");
    let code = format!(
        "echo ran >> {}; echo first; sleep 2; echo second",
        counter.display()
    );
    let mut first = Vec::new();
    {
        let mut driver = rig.driver(3);
        let k = kernel();
        let mut on_event = |e: &Event| first.push(e.clone());
        rt.block_on(async {
            let run = driver.run_cell(
                &k,
                Lang::Shell,
                Bytes(code.into_bytes()),
                None,
                &mut on_event,
            );
            // Give up on the call part-way: the driver is dropped below.
            let _ = tokio::time::timeout(Duration::from_millis(1000), run).await;
        });
    }
    let record = rig.store.load(&kernel()).unwrap().expect("record kept");
    assert_eq!(record.cells.len(), 1, "{record:?}");
    let mut driver = rig.driver(4);
    let mut rest = Vec::new();
    let outcomes = rt
        .block_on(driver.resume(record, false, &mut |e| rest.push(e.clone())))
        .unwrap();
    assert_eq!(outcomes.len(), 1);
    assert_eq!(outcomes[0].1, CellOutcome::Ok);
    let mut all = stdout_of(&first);
    all.extend(stdout_of(&rest));
    assert_eq!(all, b"first\nsecond\n");
    assert_eq!(std::fs::read_to_string(&counter).unwrap(), "ran\n");
    rt.block_on(driver.shutdown(&kernel(), &mut |_| ()))
        .unwrap();
}
