//! `tether bench` (hidden): the numbers in the README, measured on this
//! machine through the local transport, with and without injected latency.
//!
//! - warm `tether run true`: wall time of the whole CLI process (start,
//!   hash the agent, read the record, one cell, exit), median;
//! - bare `sh -c true` through the same transport, median;
//! - exec round trips a warm short cell costs (counted by the driver);
//! - cancel → last process dead, for a cell whose processes honour TERM;
//! - the kernel daemon's resident memory (`VmRSS` from /proc);
//! - the agent binary's size.
//!
//! Wall-clock measurements use `std::time::Instant`: this module measures,
//! it decides nothing.

use crate::agent_bin::AgentBinary;
use crate::backend::{BackendSpec, LocalOptions};
use crate::cli::{exit, Context, Failure};
use crate::driver::Driver;
use crate::records::MemoryStore;
use crate::transport::ExecRequest;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tether_core::bytes::Bytes;
use tether_core::client::{Client, Config};
use tether_core::ids::KernelName;
use tether_core::protocol::Lang;

/// Options of `tether bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Repetitions per timed measurement.
    #[arg(long, default_value_t = 20)]
    pub iterations: usize,
    /// Injected latencies to compare, e.g. `0ms,50ms`.
    #[arg(long, default_value = "0ms,50ms", value_delimiter = ',',
          value_parser = crate::duration::parse_duration)]
    pub latency: Vec<Duration>,
}

fn fail(message: impl std::fmt::Display) -> Failure {
    Failure {
        code: exit::FAILURE,
        message: message.to_string(),
    }
}

/// Runs the benchmark and prints a table.
pub async fn run(_ctx: &Context, args: BenchArgs) -> Result<i32, Failure> {
    // The agent a sandbox gets: the static release build when there is
    // one (unless $TETHER_AGENT_BIN says otherwise).
    let agent = match crate::agent_bin::workspace_static() {
        Some(path) if std::env::var_os(crate::agent_bin::AGENT_ENV).is_none() => {
            AgentBinary::load(&path).map_err(fail)?
        }
        _ => AgentBinary::find().map_err(fail)?,
    };
    let scratch = std::env::temp_dir().join(format!("tether-bench-{}", std::process::id()));
    let result = run_in(&agent, &scratch, &args).await;
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

async fn run_in(agent: &AgentBinary, scratch: &Path, args: &BenchArgs) -> Result<i32, Failure> {
    println!(
        "agent binary: {} bytes ({})",
        agent.size(),
        agent.path.display()
    );
    println!("iterations per median: {}", args.iterations.max(1));
    for &latency in &args.latency {
        let dir = scratch.join(format!("lat{}", latency.as_millis()));
        std::fs::create_dir_all(&dir).map_err(fail)?;
        let r = measure(agent, &dir, latency, args.iterations.max(1)).await?;
        println!("\n== injected latency {}ms per exec", latency.as_millis());
        let rows = [
            ("warm `tether run true`, whole CLI, median", ms(r.cli_run)),
            (
                "bare `sh -c true` via the transport, median",
                ms(r.bare_exec),
            ),
            ("warm cell `true` in-process, median", ms(r.cell)),
            (
                "exec calls per warm cell, in-process",
                r.round_trips.clone(),
            ),
            ("exec calls per warm `tether run true`", r.cli_execs.clone()),
            ("cancel -> last process dead (TERM honoured)", ms(r.cancel)),
            ("kernel daemon RSS", format!("{} KiB", r.daemon_rss_kib)),
        ];
        for (label, value) in rows {
            println!("{label:<46} {value}");
        }
    }
    Ok(exit::OK)
}

struct Results {
    cli_run: Duration,
    bare_exec: Duration,
    cell: Duration,
    round_trips: String,
    cli_execs: String,
    cancel: Duration,
    daemon_rss_kib: u64,
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples.get(samples.len() / 2).copied().unwrap_or_default()
}

async fn measure(
    agent: &AgentBinary,
    dir: &Path,
    latency: Duration,
    iterations: usize,
) -> Result<Results, Failure> {
    let root = dir.join("root");
    let root_str = root.to_str().ok_or_else(|| fail("temp dir is not UTF-8"))?;
    let spec = BackendSpec::Local(LocalOptions {
        latency,
        ..LocalOptions::default()
    });
    let transport = spec.transport();

    // Bare exec through the same transport.
    let mut bare = Vec::new();
    for _ in 0..iterations {
        let req = ExecRequest::command(vec!["sh".into(), "-c".into(), "true".into()]);
        let t0 = Instant::now();
        transport
            .exec(req)
            .await
            .map_err(|e| fail(format!("{e:?}")))?;
        bare.push(t0.elapsed());
    }

    // In-process driver: round trips, cell time, cancel latency, RSS.
    let location = agent.location(root_str);
    let client = Client::new(Config::new(location.clone(), agent.size()), 7);
    let mut driver = Driver::new(
        client,
        transport.clone(),
        Box::new(MemoryStore::new()),
        agent.bytes.clone(),
        location,
    );
    let kernel = KernelName::new("bench").map_err(fail)?;
    let quiet = &mut |_: &tether_core::client::Event| ();
    // Cold: install, spawn.
    run_ok(&mut driver, &kernel, "true", quiet).await?;
    driver.settle(quiet).await.map_err(fail)?;
    let mut cells = Vec::new();
    let mut per_cell = None;
    for _ in 0..iterations {
        let before = driver.stats().clone();
        let t0 = Instant::now();
        run_ok(&mut driver, &kernel, "true", quiet).await?;
        cells.push(t0.elapsed());
        driver.settle(quiet).await.map_err(fail)?;
        let after = driver.stats();
        let mut kinds = Vec::new();
        for (kind, n) in &after.execs {
            let delta = n - before.execs.get(kind).copied().unwrap_or(0);
            if delta > 0 {
                kinds.push(format!("{kind} {delta}"));
            }
        }
        per_cell = Some(format!(
            "{} ({})",
            after.total() - before.total(),
            kinds.join(", ")
        ));
    }
    let daemon_rss_kib = driver
        .client()
        .record(&kernel)
        .and_then(|r| r.identity)
        .map(|id| rss_kib(id.pid))
        .unwrap_or(0);
    let cancel = cancel_latency(&mut driver, &kernel, dir).await?;
    driver.shutdown(&kernel, quiet).await.map_err(fail)?;

    // The whole CLI, warm.
    let state = dir.join("state");
    let exe = std::env::current_exe().map_err(fail)?;
    let cli = |args: &[&str]| {
        let mut cmd = Command::new(&exe);
        cmd.env("XDG_STATE_HOME", &state)
            .env("TETHER_AGENT_BIN", &agent.path)
            .arg("--backend")
            .arg(spec.to_string())
            .arg("--root")
            .arg(&root)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        cmd
    };
    let warm = cli(&["run", "--kernel", "cli", "true"])
        .status()
        .map_err(fail)?;
    if !warm.success() {
        return Err(fail(format!("`tether run true` failed: {warm}")));
    }
    let mut runs = Vec::new();
    for _ in 0..iterations {
        let t0 = Instant::now();
        let status = cli(&["run", "--kernel", "cli", "true"])
            .status()
            .map_err(fail)?;
        runs.push(t0.elapsed());
        if !status.success() {
            return Err(fail(format!("`tether run true` failed: {status}")));
        }
    }
    let json = cli(&["--json", "run", "--kernel", "cli", "true"])
        .stdout(Stdio::piped())
        .output()
        .map_err(fail)?;
    let cli_execs = String::from_utf8_lossy(&json.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["event"] == "exit")
        .map(|v| describe_execs(&v["execs"]))
        .unwrap_or_else(|| "?".into());
    let _ = cli(&["stop"]).stderr(Stdio::null()).status();

    Ok(Results {
        cli_run: median(runs),
        bare_exec: median(bare),
        cell: median(cells),
        round_trips: per_cell.unwrap_or_default(),
        cli_execs,
        cancel,
        daemon_rss_kib,
    })
}

async fn run_ok(
    driver: &mut Driver,
    kernel: &KernelName,
    code: &str,
    quiet: &mut dyn FnMut(&tether_core::client::Event),
) -> Result<(), Failure> {
    let (_, outcome) = driver
        .run_cell(kernel, Lang::Shell, Bytes::from(code), None, quiet)
        .await
        .map_err(fail)?;
    if outcome != tether_core::protocol::CellOutcome::Ok {
        return Err(fail(format!("bench cell {code:?}: {outcome}")));
    }
    Ok(())
}

/// Starts a cell with three processes that honour TERM, cancels it once all
/// three have written their pids, and measures until the last is gone.
async fn cancel_latency(
    driver: &mut Driver,
    kernel: &KernelName,
    dir: &Path,
) -> Result<Duration, Failure> {
    let pidfile = dir.join("cancel.pids");
    let _ = std::fs::remove_file(&pidfile);
    let code = format!(
        "sleep 300 & echo $! >> {p}; sleep 300 & echo $! >> {p}; echo $$ >> {p}; wait",
        p = pidfile.display()
    );
    let handle = driver.cancel_handle();
    let watcher_file = pidfile.clone();
    let watcher = std::thread::spawn(move || -> Option<Duration> {
        let pids = wait_for_pids(&watcher_file, 3, Duration::from_secs(30))?;
        let t0 = Instant::now();
        handle.cancel_current();
        while pids.iter().any(|&pid| alive(pid)) {
            if t0.elapsed() > Duration::from_secs(60) {
                return None;
            }
            std::thread::sleep(Duration::from_micros(500));
        }
        Some(t0.elapsed())
    });
    let quiet = &mut |_: &tether_core::client::Event| ();
    let (_, outcome) = driver
        .run_cell(kernel, Lang::Shell, Bytes(code.into_bytes()), None, quiet)
        .await
        .map_err(fail)?;
    driver.settle(quiet).await.map_err(fail)?;
    let elapsed = watcher.join().ok().flatten().ok_or_else(|| {
        fail(format!(
            "cancel measurement failed (cell outcome: {outcome})"
        ))
    })?;
    Ok(elapsed)
}

fn wait_for_pids(path: &PathBuf, count: usize, bound: Duration) -> Option<Vec<u32>> {
    let t0 = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            let pids: Vec<u32> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
            if pids.len() >= count {
                return Some(pids);
            }
        }
        if t0.elapsed() > bound {
            return None;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => {
            let state = stat.rsplit_once(')').map(|(_, rest)| rest.trim_start());
            !matches!(
                state.and_then(|s| s.chars().next()),
                Some('Z') | Some('X') | None
            )
        }
    }
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn describe_execs(execs: &serde_json::Value) -> String {
    let Some(map) = execs.as_object() else {
        return "?".into();
    };
    let total: u64 = map.values().filter_map(serde_json::Value::as_u64).sum();
    let kinds: Vec<String> = map
        .iter()
        .map(|(k, v)| format!("{k} {}", v.as_u64().unwrap_or(0)))
        .collect();
    format!("{total} ({})", kinds.join(", "))
}
