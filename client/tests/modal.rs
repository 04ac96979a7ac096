//! The `modal` transport's whole client-side code path — the bridge
//! process, its JSON-lines protocol, one-shot execs and the channel's
//! streaming exec — against the stand-in `modal` package in
//! `tests/fixtures/modal-standin` (put on `PYTHONPATH` for the bridge by a
//! wrapper interpreter), which runs local processes: only Modal's servers
//! are missing. The stand-in logs every Python process that imports it and
//! every `Sandbox.exec`, so the tests count both.

mod common;

use common::mux;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tether::agent_bin::AgentBinary;
use tether::backend::BackendSpec;
use tether::channel::{ChannelTransport, StreamExec};
use tether::modal::{ModalOptions, ModalTransport};
use tether::transport::{ExecRequest, Transport, TransportErrorKind};
use tether::{Driver, MemoryStore};
use tether_core::bytes::Bytes;
use tether_core::channel::MuxConfig;
use tether_core::client::{Client, Config, Event};
use tether_core::ids::KernelName;
use tether_core::protocol::{CellOutcome, Lang, Stream};
use tether_require::{have, Need};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A stand-in Modal: `dir/sandboxes/sb-test` is the sandbox (its
/// directory), `dir/python` an interpreter that finds the stand-in
/// `modal`, `dir/root` the agent's root.
struct StandIn {
    dir: tempfile::TempDir,
}

impl StandIn {
    fn new() -> StandIn {
        let dir = tempfile::Builder::new()
            .prefix("tether-modal")
            .tempdir()
            .unwrap();
        std::fs::create_dir_all(dir.path().join("sandboxes/sb-test")).unwrap();
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/modal-standin");
        let python = dir.path().join("python");
        std::fs::write(
            &python,
            format!(
                "#!/bin/sh\nPYTHONPATH='{}' TETHER_MODAL_STANDIN='{}' exec python3 \"$@\"\n",
                fixtures.display(),
                dir.path().join("sandboxes").display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
        StandIn { dir }
    }

    fn spec(&self, sandbox: &str) -> String {
        format!(
            "modal:{sandbox}?python={}",
            self.dir.path().join("python").display()
        )
    }

    fn options(&self) -> ModalOptions {
        match BackendSpec::parse(&self.spec("sb-test")).unwrap() {
            BackendSpec::Modal(opts) => opts,
            other => panic!("not modal: {other}"),
        }
    }

    fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    fn log_lines(&self, name: &str) -> usize {
        std::fs::read_to_string(self.dir.path().join("sandboxes").join(name))
            .map(|s| s.lines().count())
            .unwrap_or(0)
    }

    /// Python processes that imported `modal`.
    fn imports(&self) -> usize {
        self.log_lines("imports.log")
    }

    /// `Sandbox.exec` calls.
    fn execs(&self) -> usize {
        self.log_lines("execs.log")
    }
}

fn python3(test: &str) -> bool {
    have(test, Need::Python3)
}

/// A seed no other driver on this machine uses: kernel nonces (and so the
/// cells' env markers and cgroup names) come from it, and two kernels with
/// one nonce would take each other's processes for their own.
fn unique_seed() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    (u64::from(std::process::id()) << 16) ^ n
}

fn driver(root: &Path, agent: &AgentBinary, transport: Arc<dyn Transport>) -> Driver {
    let location = agent.location(root.to_str().unwrap());
    let client = Client::new(Config::new(location.clone(), agent.size()), unique_seed());
    Driver::new(
        client,
        transport,
        Box::new(MemoryStore::new()),
        agent.bytes.clone(),
        location,
    )
}

async fn cell(driver: &mut Driver, code: &str) -> (CellOutcome, String) {
    let kernel = KernelName::new("k").unwrap();
    let mut out = Vec::new();
    let (_, outcome) = driver
        .run_cell(&kernel, Lang::Shell, Bytes::from(code), None, &mut |e| {
            if let Event::Output {
                stream: Stream::Stdout,
                data,
                ..
            } = e
            {
                out.extend_from_slice(data.as_slice());
            }
        })
        .await
        .unwrap();
    (outcome, String::from_utf8_lossy(&out).into_owned())
}

async fn shutdown(driver: &mut Driver) {
    let kernel = KernelName::new("k").unwrap();
    driver.shutdown(&kernel, &mut |_| ()).await.unwrap();
}

/// Bytes both ways exactly, exit statuses apart from transport errors,
/// several execs in flight at once, and one Python process for all of
/// them.
#[test]
fn one_bridge_runs_every_exec_with_exact_bytes() {
    if !python3("one_bridge_runs_every_exec_with_exact_bytes") {
        return;
    }
    let standin = StandIn::new();
    let t = ModalTransport::new(standin.options());
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    rt().block_on(async {
        let req = |argv: &[&str], stdin: &[u8]| ExecRequest {
            argv: argv.iter().map(|s| s.to_string()).collect(),
            stdin: stdin.to_vec(),
            op: None,
        };
        let out = t.exec(req(&["cat"], &data)).await.unwrap();
        assert!(out.stdout == data, "cat changed the bytes");
        let out = t
            .exec(req(&["sh", "-c", "printf 'e\\377' >&2; exit 255"], b""))
            .await
            .unwrap();
        assert_eq!((out.exit_code, out.stderr), (255, b"e\xff".to_vec()));
        // Ten at once, each waiting until all ten have started: they
        // complete only if they are in flight together.
        let t0 = std::time::Instant::now();
        let calls: Vec<_> = (0..10)
            .map(|i| {
                let code = format!(
                    "mkdir -p together; touch together/{i}; \
                     while [ $(ls together | wc -l) -lt 10 ]; do sleep 0.02; done; echo {i}"
                );
                let r = req(&["sh", "-c", &code], b"");
                let t = &t;
                async move { t.exec(r).await }
            })
            .collect();
        let outs = tokio::time::timeout(Duration::from_secs(60), futures_join_all(calls))
            .await
            .expect("ten execs in flight at once (they wait for each other)");
        for (i, out) in outs.into_iter().enumerate() {
            assert_eq!(out.unwrap().stdout, format!("{i}\n").into_bytes());
        }
        println!("10 concurrent execs took {:?}", t0.elapsed());
    });
    assert_eq!(standin.imports(), 1, "one Python process for every exec");
    assert_eq!(t.bridges_started(), 1);
    assert_eq!(standin.execs(), 12);
}

/// Runs the futures concurrently on this task (no extra crate).
async fn futures_join_all<F: std::future::Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut pinned: Vec<_> = futures.into_iter().map(Box::pin).collect();
    let mut results: Vec<Option<F::Output>> = pinned.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (i, f) in pinned.iter_mut().enumerate() {
            if results[i].is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => results[i] = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    results.into_iter().map(Option::unwrap).collect()
}

/// What is not there is `unreachable` with the reason: a sandbox that
/// does not exist, a Python without `modal`.
#[test]
fn a_missing_sandbox_or_modal_package_is_unreachable_with_the_reason() {
    if !python3("a_missing_sandbox_or_modal_package_is_unreachable_with_the_reason") {
        return;
    }
    let standin = StandIn::new();
    rt().block_on(async {
        let spec = BackendSpec::parse(&standin.spec("sb-nosuch")).unwrap();
        let err = spec
            .transport()
            .exec(ExecRequest::command(vec!["true".into()]))
            .await
            .unwrap_err();
        assert_eq!(err.kind, TransportErrorKind::Unreachable, "{err}");
        assert!(err.detail.contains("NotFoundError"), "{err}");
        let bare = BackendSpec::parse("modal:sb-test?python=python3").unwrap();
        let err = bare
            .transport()
            .exec(ExecRequest::command(vec!["true".into()]))
            .await
            .unwrap_err();
        assert_eq!(err.kind, TransportErrorKind::Unreachable, "{err}");
        assert!(err.detail.contains("pip install modal"), "{err}");
        // Not a Python at all: it cannot start, or it says nothing the
        // bridge would.
        for (python, want) in [
            ("/nonexistent/python3", "cannot run"),
            ("/bin/echo", "not a JSON line"),
            ("/bin/true", "exited"),
        ] {
            let spec = BackendSpec::parse(&format!("modal:sb-test?python={python}")).unwrap();
            let err = spec
                .transport()
                .exec(ExecRequest::command(vec!["true".into()]))
                .await
                .unwrap_err();
            assert_eq!(err.kind, TransportErrorKind::Unreachable, "{python}: {err}");
            assert!(err.detail.contains(want), "{python}: {err}");
        }
    });
}

/// Warm cells, one-shot and on the channel: no Python process per cell
/// (one bridge, one import), no `Sandbox.exec` per cell on the channel.
#[test]
fn warm_cells_start_no_python_and_on_the_channel_no_exec() {
    if !python3("warm_cells_start_no_python_and_on_the_channel_no_exec") {
        return;
    }
    let standin = StandIn::new();
    let agent = AgentBinary::load(common::agent_bin()).unwrap();
    let root = standin.root();
    // One-shot.
    let modal = Arc::new(ModalTransport::new(standin.options()));
    let mut d = driver(&root, &agent, modal.clone());
    rt().block_on(async {
        assert_eq!(cell(&mut d, "x=1").await.0, CellOutcome::Ok);
        let execs = standin.execs();
        for i in 0..5 {
            let (outcome, out) = cell(&mut d, &format!("echo $((x + {i}))")).await;
            assert_eq!((outcome, out), (CellOutcome::Ok, format!("{}\n", 1 + i)));
        }
        let per_cell = (standin.execs() - execs) as f64 / 5.0;
        println!("one-shot: {per_cell} Sandbox.exec per warm cell");
        assert!(per_cell >= 1.0, "each one-shot cell is an exec");
        shutdown(&mut d).await;
    });
    assert_eq!(modal.bridges_started(), 1);
    assert_eq!(standin.imports(), 1, "one Python process for every cell");
    drop(d);
    drop(modal);

    // On the channel.
    let modal = Arc::new(ModalTransport::new(standin.options()));
    let location = agent.location(root.to_str().unwrap());
    let channel = Arc::new(ChannelTransport::new(
        modal.clone(),
        &location,
        MuxConfig::default(),
    ));
    let mut d = driver(&root, &agent, channel.clone());
    rt().block_on(async {
        assert_eq!(cell(&mut d, "y=10").await.0, CellOutcome::Ok);
        assert!(
            channel.open(Duration::from_secs(30)).await,
            "{:?}",
            channel.status()
        );
        assert_eq!(channel.status().pid, modal.bridge_pid());
        let (execs, before) = (standin.execs(), channel.status().stats);
        for i in 0..5 {
            let (outcome, out) = cell(&mut d, &format!("echo $((y + {i}))")).await;
            assert_eq!((outcome, out), (CellOutcome::Ok, format!("{}\n", 10 + i)));
        }
        let after = channel.status().stats;
        assert_eq!(standin.execs(), execs, "no Sandbox.exec for a warm cell");
        assert_eq!(after.one_shot, before.one_shot, "{after:?}");
        assert!(after.on_channel >= before.on_channel + 5, "{after:?}");
        shutdown(&mut d).await;
    });
    assert_eq!(modal.bridges_started(), 1);
    assert_eq!(standin.imports(), 2, "one more Python process: this bridge");
}

/// The cell: prints 12 numbered lines 0.1 s apart, writes its side
/// effect, prints its end.
fn slow_cell(i: usize, side: &Path) -> String {
    format!(
        "echo start {i}; for j in 1 2 3 4 5 6 7 8 9 10 11 12; do echo {i}.$j; sleep 0.1; done; \
         echo ran >> {side}; echo end {i}",
        side = side.display()
    )
}

fn expected(i: usize) -> String {
    let mut s = format!("start {i}\n");
    for j in 1..=12 {
        s.push_str(&format!("{i}.{j}\n"));
    }
    s.push_str(&format!("end {i}\n"));
    s
}

/// Runs cell `i` and SIGKILLs the bridge 0.5 s into it; the cell
/// completes once with its whole output, in order.
async fn killed_mid_wait(driver: &mut Driver, modal: &ModalTransport, root: &Path, i: usize) {
    let pid = modal.bridge_pid().expect("a bridge is running");
    let side = root.join(format!("side-{i}"));
    let killer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        common::kill("KILL", pid);
    });
    let (outcome, out) = cell(driver, &slow_cell(i, &side)).await;
    killer.await.unwrap();
    assert_eq!(outcome, CellOutcome::Ok, "cell {i}");
    assert_eq!(out, expected(i), "cell {i}");
    assert_eq!(
        std::fs::read_to_string(&side).unwrap(),
        "ran\n",
        "cell {i} ran exactly once"
    );
    assert_ne!(modal.bridge_pid(), Some(pid), "a new bridge took over");
}

#[test]
fn the_bridge_killed_mid_wait_loses_nothing_and_runs_nothing_twice() {
    if !python3("the_bridge_killed_mid_wait_loses_nothing_and_runs_nothing_twice") {
        return;
    }
    let standin = StandIn::new();
    let agent = AgentBinary::load(common::agent_bin()).unwrap();
    let root = standin.root();

    // One-shot execs.
    let modal = Arc::new(ModalTransport::new(standin.options()));
    let mut d = driver(&root, &agent, modal.clone());
    rt().block_on(async {
        assert_eq!(cell(&mut d, "true").await.0, CellOutcome::Ok);
        for i in 1..=2 {
            killed_mid_wait(&mut d, &modal, &root, i).await;
        }
        shutdown(&mut d).await;
    });
    assert_eq!(modal.bridges_started(), 3, "restarted after each kill");

    // On the channel: the kill breaks it, the cell goes on one-shot
    // through a new bridge, and the channel reopens on it.
    let modal = Arc::new(ModalTransport::new(standin.options()));
    let location = agent.location(root.to_str().unwrap());
    let channel = Arc::new(ChannelTransport::new(
        modal.clone(),
        &location,
        MuxConfig::default(),
    ));
    let mut d = driver(&root, &agent, channel.clone());
    rt().block_on(async {
        assert_eq!(cell(&mut d, "true").await.0, CellOutcome::Ok);
        for i in 3..=4 {
            assert!(
                channel.open(Duration::from_secs(30)).await,
                "{:?}",
                channel.status()
            );
            let before = channel.status().stats;
            killed_mid_wait(&mut d, &modal, &root, i).await;
            let after = channel.status().stats;
            assert_eq!(after.broken, before.broken + 1, "{after:?}");
        }
        assert!(channel.open(Duration::from_secs(30)).await);
        let before = channel.status().stats;
        assert_eq!(cell(&mut d, "echo again").await.1, "again\n");
        let after = channel.status().stats;
        assert!(after.on_channel > before.on_channel, "{after:?}");
        shutdown(&mut d).await;
    });
    assert_eq!(modal.bridges_started(), 3, "restarted after each kill");
}

/// The stream the channel rides on: a command with open pipes through
/// the bridge; dropping it ends the command's stdin (nothing killed).
#[test]
fn a_stream_through_the_bridge_has_open_pipes_and_ends_by_eof() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    if !python3("a_stream_through_the_bridge_has_open_pipes_and_ends_by_eof") {
        return;
    }
    let standin = StandIn::new();
    let t = ModalTransport::new(standin.options());
    let marker = standin.dir.path().join("eof-seen");
    rt().block_on(async {
        let mut s = t
            .open_stream(vec![
                "/bin/sh".into(),
                "-c".into(),
                "head -c 5; echo !; echo oops >&2".into(),
            ])
            .await
            .unwrap();
        s.stdin.write_all(b"hello").await.unwrap();
        let mut got = String::new();
        s.stdout.read_to_string(&mut got).await.unwrap();
        assert_eq!(got, "hello!\n");
        let mut err = String::new();
        s.stderr.read_to_string(&mut err).await.unwrap();
        assert_eq!(err, "oops\n");
        // Dropped: the command's stdin ends and it finishes by itself.
        let s = t
            .open_stream(vec![
                "/bin/sh".into(),
                "-c".into(),
                format!("cat >/dev/null; touch {}", marker.display()),
            ])
            .await
            .unwrap();
        drop(s);
        let seen = async {
            while !marker.exists() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(30), seen)
            .await
            .expect("the command saw its stdin end");
    });
}

/// The client goes away (its runtime, and so its end of the bridge's
/// pipes, dropped) with a stream open: the bridge ends that command's
/// stdin — it never kills it — and exits by itself.
#[test]
fn a_client_that_goes_away_leaves_the_bridge_to_close_its_streams_and_exit() {
    if !python3("a_client_that_goes_away_leaves_the_bridge_to_close_its_streams_and_exit") {
        return;
    }
    let standin = StandIn::new();
    let t = ModalTransport::new(standin.options());
    let marker = standin.dir.path().join("eof-seen");
    let runtime = rt();
    let stream = runtime
        .block_on(t.open_stream(vec![
            "/bin/sh".into(),
            "-c".into(),
            format!("cat >/dev/null; touch {}", marker.display()),
        ]))
        .unwrap();
    let bridge = t.bridge_pid().expect("a bridge runs");
    drop(runtime);
    let start = std::time::Instant::now();
    while !marker.exists() || common::alive(bridge) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the command saw no EOF ({}) or the bridge {bridge} is still alive ({})",
            marker.exists(),
            common::alive(bridge)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // Ended by the bridge's write_eof (a killed bridge's pipes would
    // close too, but on Modal nothing would end the command).
    assert_eq!(
        standin.log_lines("eofs.log"),
        1,
        "the bridge closed its stdin"
    );
    drop((stream, t));
}

/// The CLI over the stand-in goes through the background process (`tether
/// mux`): state persists across `tether run` processes; the first one
/// starts a bridge of its own and the background process, whose bridge
/// carries the channel; the warm ones after it start no Python process
/// and make no `Sandbox.exec`, however many ops their cells take.
#[test]
fn the_cli_goes_through_the_background_process_and_starts_no_python() {
    if !python3("the_cli_goes_through_the_background_process_and_starts_no_python") {
        return;
    }
    let standin = StandIn::new();
    let world = common::World::with_backend(&standin.spec("sb-test"));
    mux::ok(&world.run("k", "cd /tmp; x=7"));
    mux::open_mux(&world);
    let (imports, execs) = (standin.imports(), standin.execs());
    assert_eq!(
        imports, 2,
        "the first `tether`'s bridge and the background process's"
    );
    mux::warm_runs_use_the_background_process(&world);
    // Waits past its submit: more ops, all on the background channel.
    let out = world.run("k", "pwd; echo $x; sleep 1; echo done");
    mux::ok(&out);
    assert_eq!(common::text(&out.stdout), "/tmp\n7\ndone\n");
    assert_eq!(
        standin.imports(),
        imports,
        "no Python process for warm runs"
    );
    assert_eq!(standin.execs(), execs, "no Sandbox.exec for warm runs");
}

/// On the stand-in, through the CLI: the background process killed with
/// `kill -9` while a cell waits (its bridge ends with it, and so does the
/// channel), and the channel's process in the sandbox killed while a cell
/// waits: each cell completes once, its output whole and in order.
#[test]
fn the_background_process_or_its_channel_killed_mid_cell_loses_nothing() {
    if !python3("the_background_process_or_its_channel_killed_mid_cell_loses_nothing") {
        return;
    }
    let standin = StandIn::new();
    let world = common::World::with_backend(&standin.spec("sb-test"));
    let sandbox = mux::Sandbox {
        dir: standin
            .dir
            .path()
            .join("sandboxes/sb-test")
            .to_string_lossy()
            .into_owned(),
        sh: &mux::local_sh,
    };
    let cut = mux::mux_killed_mid_cell(&world, &sandbox);
    let bridge = mux::num(&cut.before, &["channel", "pid"]) as u32;
    mux::wait_until("the killed background process's bridge exits", || {
        !common::alive(bridge)
    });
    mux::channel_killed_mid_cell(&world, &sandbox);
}
