//! One tether session over one real backend: the real [`Driver`] with a
//! fresh client, the real agent binary, records in a [`MemoryStore`] that
//! outlives the client (so a test can drop the client mid-cell and resume
//! with another), and observations through the backend's own transport
//! (`ps`, `cat` of side-effect files).

use crate::procs::{parse_ps, Proc, PS_ARGV};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tether::agent_bin::AgentBinary;
use tether::backend::BackendSpec;
use tether::transport::{ExecOutput, ExecRequest, Transport};
use tether::{Driver, MemoryStore, RecordStore};
use tether_core::bytes::Bytes;
use tether_core::client::{Client, Config, Event};
use tether_core::ids::KernelName;
use tether_core::protocol::{CellOutcome, Lang, Stream};
use tokio::sync::mpsc;

/// The agent binary the tests ship: `$TETHER_AGENT_BIN`, else a debug
/// build made now (`cargo build -p tether-agent`, a no-op when fresh).
/// It links only libc, so it also runs in the bookworm image.
///
/// # Panics
///
/// When the build fails.
pub fn agent() -> &'static AgentBinary {
    static AGENT: OnceLock<AgentBinary> = OnceLock::new();
    AGENT.get_or_init(|| {
        let path = match std::env::var_os("TETHER_AGENT_BIN").filter(|p| !p.is_empty()) {
            Some(path) => PathBuf::from(path),
            None => {
                let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
                let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
                let out = Command::new(cargo)
                    .args([
                        "build",
                        "-p",
                        "tether-agent",
                        "--bin",
                        "tether-agent",
                        "--message-format=short",
                    ])
                    .current_dir(&workspace)
                    .output()
                    .expect("run cargo build -p tether-agent");
                assert!(
                    out.status.success(),
                    "cargo build -p tether-agent failed:\n{}",
                    String::from_utf8_lossy(&out.stderr)
                );
                let target = std::env::var_os("CARGO_TARGET_DIR")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| workspace.join("target"));
                target.join("debug").join("tether-agent")
            }
        };
        AgentBinary::load(&path).unwrap_or_else(|e| panic!("{e}"))
    })
}

/// The `tether` command line program, built now in the debug profile
/// (`cargo build -p tether --bin tether`, a no-op when fresh), for tests
/// that run whole `tether` processes.
///
/// # Panics
///
/// When the build fails.
pub fn tether_cli() -> &'static Path {
    static CLI: OnceLock<PathBuf> = OnceLock::new();
    CLI.get_or_init(|| {
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let out = Command::new(cargo)
            .args([
                "build",
                "-p",
                "tether",
                "--bin",
                "tether",
                "--message-format=short",
            ])
            .current_dir(&workspace)
            .output()
            .expect("run cargo build -p tether");
        assert!(
            out.status.success(),
            "cargo build -p tether failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| workspace.join("target"))
            .join("debug")
            .join("tether")
    })
}

/// A number no other test of this process uses (for sleep tags, names).
pub fn unique() -> u64 {
    static N: AtomicU64 = AtomicU64::new(0);
    u64::from(std::process::id() % 1000) * 1000 + N.fetch_add(1, Ordering::Relaxed) % 1000
}

/// What one cell did, as the client reported it.
#[derive(Clone, Debug)]
pub struct CellRun {
    /// How it ended.
    pub outcome: CellOutcome,
    /// Its stdout, in journal order.
    pub stdout: Vec<u8>,
    /// Its stderr, in journal order.
    pub stderr: Vec<u8>,
    /// Every event, in order.
    pub events: Vec<Event>,
}

impl CellRun {
    fn new() -> CellRun {
        CellRun {
            outcome: CellOutcome::Unknown {
                reason: "not resolved".into(),
            },
            stdout: Vec::new(),
            stderr: Vec::new(),
            events: Vec::new(),
        }
    }

    fn take(&mut self, event: &Event) {
        if let Event::Output { stream, data, .. } = event {
            match stream {
                Stream::Stdout => self.stdout.extend_from_slice(data.as_slice()),
                Stream::Stderr => self.stderr.extend_from_slice(data.as_slice()),
            }
        }
        self.events.push(event.clone());
    }

    /// stdout as text.
    pub fn out(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
}

/// A tether session on one backend.
pub struct Live {
    /// The backend.
    pub spec: BackendSpec,
    /// Its transport, for observations (the driver's goes through
    /// [`Live::with_driver`]'s wrapper, if any).
    pub transport: Arc<dyn Transport>,
    /// The sandbox root (agent and kernel state).
    pub root: String,
    /// Records; survives the client.
    pub store: MemoryStore,
    /// A second frontend's records (another state directory).
    pub second_store: MemoryStore,
    driver: Driver,
    /// What the driver execs through.
    driver_transport: Arc<dyn Transport>,
    /// Applied to every new client's configuration.
    tune: fn(&mut Config),
}

impl Live {
    /// A session on `spec` with its state under `root` on the sandbox.
    ///
    /// # Panics
    ///
    /// On a bad spec.
    pub fn new(spec: &str, root: &str) -> Live {
        Live::with_driver(spec, root, |t| t, |_| ())
    }

    /// A session whose driver execs through `wrap(backend transport)`
    /// (observations still use the backend's own transport) and whose
    /// clients take `tune`d configurations.
    ///
    /// # Panics
    ///
    /// On a bad spec.
    pub fn with_driver(
        spec: &str,
        root: &str,
        wrap: impl FnOnce(Arc<dyn Transport>) -> Arc<dyn Transport>,
        tune: fn(&mut Config),
    ) -> Live {
        let spec = BackendSpec::parse(spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
        let transport = spec.transport();
        let driver_transport = wrap(Arc::clone(&transport));
        let store = MemoryStore::new();
        let driver = new_driver(&driver_transport, root, &store, tune);
        Live {
            spec,
            transport,
            root: root.to_owned(),
            store,
            second_store: MemoryStore::new(),
            driver,
            driver_transport,
            tune,
        }
    }

    /// The current client's driver.
    pub fn driver(&mut self) -> &mut Driver {
        &mut self.driver
    }

    /// Where side-effect files go on the sandbox.
    pub fn side_dir(&self) -> String {
        format!("{}/side", self.root)
    }

    /// Exec calls the current client made so far, by op kind.
    pub fn stats(&self) -> &tether::driver::DriverStats {
        self.driver.stats()
    }

    /// A fresh client (another process) over the driver's transport that
    /// shares the records; the session's own driver stays as it is.
    pub fn client(&self) -> Driver {
        self.client_with(&self.store)
    }

    /// A fresh client over the records of `store` (a second frontend's).
    pub fn client_with(&self, store: &MemoryStore) -> Driver {
        new_driver(&self.driver_transport, &self.root, store, self.tune)
    }

    /// Replaces the client by a fresh one (another process, as after a
    /// crash) that shares the records.
    pub fn new_client(&mut self) {
        self.driver = new_driver(&self.driver_transport, &self.root, &self.store, self.tune);
    }

    /// Runs `code` as the next cell of `kernel` (opened with `lang` if
    /// new) to its end.
    pub async fn run(&mut self, kernel: &str, lang: Lang, code: &str) -> CellRun {
        self.run_cancelling_at(kernel, lang, code, None).await
    }

    /// Runs `code` with a cell timeout (the client's `--timeout`).
    pub async fn run_with_timeout(
        &mut self,
        kernel: &str,
        lang: Lang,
        code: &str,
        timeout: Duration,
    ) -> CellRun {
        self.run_cell_as(kernel, lang, code, None, Some(timeout))
            .await
    }

    /// Runs `code`, and cancels the cell once its stdout contains `at`.
    pub async fn run_cancelling_at(
        &mut self,
        kernel: &str,
        lang: Lang,
        code: &str,
        at: Option<&[u8]>,
    ) -> CellRun {
        self.run_cell_as(kernel, lang, code, at, None).await
    }

    async fn run_cell_as(
        &mut self,
        kernel: &str,
        lang: Lang,
        code: &str,
        at: Option<&[u8]>,
        timeout: Option<Duration>,
    ) -> CellRun {
        let name = kernel_name(kernel);
        let handle = self.driver.cancel_handle();
        let mut run = CellRun::new();
        let mut cancelled = false;
        let mut on_event = |event: &Event| {
            run.take(event);
            if let (Some(at), false) = (at, cancelled) {
                if contains(&run.stdout, at) {
                    cancelled = true;
                    handle.cancel_current();
                }
            }
        };
        let result = self
            .driver
            .run_cell(&name, lang, Bytes::from(code), timeout, &mut on_event)
            .await;
        match result {
            Ok((_, outcome)) => run.outcome = outcome,
            Err(e) => panic!("driver error on {}: {e}", self.spec),
        }
        run
    }

    /// Runs `code`; once its stdout contains `at`, lists the sandbox's
    /// processes (through the transport, while the cell runs) and then
    /// cancels the cell. Returns the run and that listing.
    pub async fn run_observe_cancel(
        &mut self,
        kernel: &str,
        lang: Lang,
        code: &str,
        at: &[u8],
    ) -> (CellRun, Vec<Proc>) {
        let name = kernel_name(kernel);
        let handle = self.driver.cancel_handle();
        let transport = Arc::clone(&self.transport);
        let (tx, mut rx) = mpsc::unbounded_channel::<()>();
        let mut run = CellRun::new();
        let mut sent = false;
        let mut on_event = |event: &Event| {
            run.take(event);
            if !sent && contains(&run.stdout, at) {
                sent = true;
                let _ = tx.send(());
            }
        };
        let cell = self
            .driver
            .run_cell(&name, lang, Bytes::from(code), None, &mut on_event);
        let observe = async {
            if rx.recv().await.is_none() {
                return Vec::new();
            }
            let procs = ps_with(&transport).await;
            handle.cancel_current();
            procs
        };
        let (result, procs) = tokio::join!(cell, observe);
        match result {
            Ok((_, outcome)) => run.outcome = outcome,
            Err(e) => panic!("driver error on {}: {e}", self.spec),
        }
        (run, procs)
    }

    /// Starts `code` and drops the client (its exec calls abandoned, as
    /// when the process dies) as soon as stdout contains `at`. Returns
    /// what it saw. The cell goes on on the sandbox; [`Live::resume`]
    /// with a new client picks it up.
    pub async fn run_and_crash_at(
        &mut self,
        kernel: &str,
        lang: Lang,
        code: &str,
        at: &[u8],
    ) -> CellRun {
        let name = kernel_name(kernel);
        let (tx, mut rx) = mpsc::unbounded_channel::<()>();
        let mut run = CellRun::new();
        {
            let mut on_event = |event: &Event| {
                run.take(event);
                if contains(&run.stdout, at) {
                    let _ = tx.send(());
                }
            };
            let cell = self
                .driver
                .run_cell(&name, lang, Bytes::from(code), None, &mut on_event);
            tokio::select! {
                biased;
                _ = rx.recv() => {}
                result = cell => {
                    panic!("the cell ended before the crash point: {:?}", result.map(|r| r.1));
                }
            }
        }
        // The old driver goes with its in-flight calls.
        self.new_client();
        run
    }

    /// Resumes `kernel` from its record with a fresh client, replaying
    /// its output from the start.
    pub async fn resume(&mut self, kernel: &str) -> CellRun {
        let name = kernel_name(kernel);
        let record = self
            .store
            .load(&name)
            .expect("load record")
            .unwrap_or_else(|| panic!("no record of {kernel}"));
        let mut run = CellRun::new();
        let mut on_event = |event: &Event| run.take(event);
        let outcomes = self
            .driver
            .resume(record, true, &mut on_event)
            .await
            .unwrap_or_else(|e| panic!("resume: {e}"));
        if let Some((_, outcome)) = outcomes.into_iter().last() {
            run.outcome = outcome;
        }
        run
    }

    /// Shuts `kernel` down (daemon and everything it owns).
    pub async fn shutdown(&mut self, kernel: &str) {
        let name = kernel_name(kernel);
        let mut ignore = |_: &Event| ();
        let _ = self.driver.shutdown(&name, &mut ignore).await;
    }

    /// Runs `argv` on the sandbox through the transport.
    ///
    /// # Panics
    ///
    /// On a transport error.
    pub async fn exec(&self, argv: &[&str]) -> ExecOutput {
        let req = ExecRequest::command(argv.iter().map(|s| s.to_string()).collect());
        tokio::time::timeout(Duration::from_secs(60), self.transport.exec(req))
            .await
            .unwrap_or_else(|_| panic!("exec {argv:?} on {} took over 60s", self.spec))
            .unwrap_or_else(|e| panic!("exec {argv:?} on {}: {e}", self.spec))
    }

    /// Every process on the sandbox, from its own `ps`.
    pub async fn ps(&self) -> Vec<Proc> {
        ps_with(&self.transport).await
    }

    /// Live (not zombie) processes whose command line contains `tag`.
    pub async fn survivors(&self, tag: &str) -> Vec<Proc> {
        self.ps()
            .await
            .into_iter()
            .filter(|p| p.args.contains(tag) && !p.is_zombie() && !p.args.contains("ps -eo"))
            .collect()
    }

    /// The side-effect file `name`: how many lines (= how many runs).
    pub async fn side_effect_count(&self, name: &str) -> usize {
        let path = format!("{}/{name}", self.side_dir());
        let out = self.exec(&["cat", &path]).await;
        if out.exit_code != 0 {
            return 0;
        }
        out.stdout.iter().filter(|b| **b == b'\n').count()
    }

    /// Creates the side-effect directory.
    pub async fn prepare(&self) {
        let dir = self.side_dir();
        let out = self.exec(&["mkdir", "-p", &dir]).await;
        assert_eq!(out.exit_code, 0, "mkdir {dir}: {:?}", out);
    }
}

async fn ps_with(transport: &Arc<dyn Transport>) -> Vec<Proc> {
    let req = ExecRequest::command(PS_ARGV.iter().map(|s| s.to_string()).collect());
    let out = transport
        .exec(req)
        .await
        .unwrap_or_else(|e| panic!("ps on {}: {e}", transport.describe()));
    assert_eq!(
        out.exit_code,
        0,
        "ps: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    parse_ps(&String::from_utf8_lossy(&out.stdout))
}

fn new_driver(
    transport: &Arc<dyn Transport>,
    root: &str,
    store: &MemoryStore,
    tune: fn(&mut Config),
) -> Driver {
    let agent = agent();
    let location = agent.location(root);
    let mut config = Config::new(location.clone(), agent.size());
    config.wait_ms = 2_000;
    // A test that panics before its shutdown leaves no daemon for long.
    config.daemon_idle_timeout = Duration::from_secs(120);
    tune(&mut config);
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(7)
        ^ unique();
    Driver::new(
        Client::new(config, seed),
        Arc::clone(transport),
        Box::new(store.clone()),
        agent.bytes.clone(),
        location,
    )
}

fn kernel_name(name: &str) -> KernelName {
    KernelName::new(name).unwrap_or_else(|e| panic!("kernel name {name:?}: {e}"))
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || hay.windows(needle.len()).any(|w| w == needle)
}
