//! `tether bench` (hidden): the numbers in the README, measured on this
//! machine through the local transport, with and without injected latency,
//! through docker when `--docker SPEC` names a container, through ssh
//! when `--ssh SPEC` names a host, and through Modal (or its test
//! stand-in) when `--modal SPEC` names a sandbox.
//!
//! - warm `tether run true`: wall time of the whole CLI process (start,
//!   hash the agent, read the record, one cell, exit), median, with the
//!   channel off, on for the process only (`--persist off`), and through
//!   the sandbox's background process (`tether mux`, warm), on every
//!   backend, with the ssh masters and Modal bridges each mode started
//!   (from the runs' `--json` exit lines and the background process's
//!   status);
//! - bare `sh -c true` through the same transport, median; on ssh also
//!   `ssh host true` on a new connection each time, and through the
//!   transport's master with one `ssh` process per exec (process-mux); on
//!   docker also `docker exec CONTAINER true` from the shell's point of
//!   view (a new `docker` process each time), and on ssh `ssh host true`
//!   again, in the same interleaved loop as the CLI (the ratio of a warm
//!   `tether run true` via the background process to it);
//! - a warm cell `true` in-process, one-shot execs and on an open channel;
//! - output latency: the first byte of a cell that prints then sleeps,
//!   in-process, one-shot and on the channel;
//! - exec round trips a warm short cell costs (counted by the driver);
//! - output latency: the first byte of a warm cell that prints and then
//!   sleeps, one-shot and on the channel;
//! - a tool call's round trip: a warm cell making ten `tether-call`s
//!   (answered at once in-process) less a warm cell `true`, per call, and
//!   the exec calls each call adds;
//! - cancel → last process dead, for a cell whose processes honour TERM;
//! - the kernel daemon's resident memory (`VmRSS` from /proc);
//! - the agent binary's size.
//!
//! Wall-clock measurements use `std::time::Instant`: this module measures,
//! it decides nothing.

use crate::agent_bin::AgentBinary;
use crate::backend::{BackendSpec, LocalOptions};
use crate::channel::{channel_for, ChannelTransport};
use crate::cli::{exit, Context, Failure};
use crate::driver::Driver;
use crate::records::MemoryStore;
use crate::transport::ExecRequest;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tether_core::bytes::Bytes;
use tether_core::channel::MuxConfig;
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
    /// Also measure this docker backend (e.g.
    /// `docker?image=tether-sandbox:latest`); its root is
    /// `/tmp/tether-bench` in the container.
    #[arg(long)]
    pub docker: Option<String>,
    /// Also measure this ssh backend (e.g.
    /// `ssh:me@127.0.0.1:2222?key=…&known_hosts=…`); its root is
    /// `/tmp/tether-bench-ssh` on the host.
    #[arg(long)]
    pub ssh: Option<String>,
    /// Also measure this Modal backend (e.g. `modal:sb-…`, or the test
    /// stand-in: see the README's Benchmarks); its root is
    /// `/tmp/tether-bench-modal` in the sandbox.
    #[arg(long)]
    pub modal: Option<String>,
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
    let mut targets = Vec::new();
    for &latency in &args.latency {
        let dir = scratch.join(format!("lat{}", latency.as_millis()));
        std::fs::create_dir_all(&dir).map_err(fail)?;
        let root = dir
            .join("root")
            .to_str()
            .ok_or_else(|| fail("temp dir is not UTF-8"))?
            .to_owned();
        let spec = BackendSpec::Local(LocalOptions {
            latency,
            ..LocalOptions::default()
        });
        let title = format!("local, injected latency {}ms per exec", latency.as_millis());
        targets.push((title, spec, root, dir));
    }
    if let Some(docker) = &args.docker {
        let spec = BackendSpec::parse(docker).map_err(fail)?;
        if !matches!(spec, BackendSpec::Docker(_)) {
            return Err(fail(format!("--docker {docker}: not a docker backend")));
        }
        let dir = scratch.join("docker");
        std::fs::create_dir_all(&dir).map_err(fail)?;
        targets.push((spec.to_string(), spec, "/tmp/tether-bench".into(), dir));
    }
    if let Some(ssh) = &args.ssh {
        let spec = BackendSpec::parse(ssh).map_err(fail)?;
        if !matches!(spec, BackendSpec::Ssh(_)) {
            return Err(fail(format!("--ssh {ssh}: not an ssh backend")));
        }
        let dir = scratch.join("ssh");
        std::fs::create_dir_all(&dir).map_err(fail)?;
        targets.push((spec.to_string(), spec, "/tmp/tether-bench-ssh".into(), dir));
    }
    if let Some(modal) = &args.modal {
        let spec = BackendSpec::parse(modal).map_err(fail)?;
        if !matches!(spec, BackendSpec::Modal(_)) {
            return Err(fail(format!("--modal {modal}: not a modal backend")));
        }
        let dir = scratch.join("modal");
        std::fs::create_dir_all(&dir).map_err(fail)?;
        targets.push((
            spec.to_string(),
            spec,
            "/tmp/tether-bench-modal".into(),
            dir,
        ));
    }
    for (title, spec, root, dir) in targets {
        let r = measure(agent, &spec, &root, &dir, args.iterations.max(1)).await?;
        println!("\n== {title}");
        let mut rows = vec![
            (
                "warm `tether run true`, whole CLI, --channel off",
                ms(r.cli_run_off),
            ),
            (
                "warm `tether run true`, whole CLI, --persist off",
                ms(r.cli_run_auto),
            ),
            (
                "warm `tether run true`, whole CLI, via tether mux",
                ms(r.cli_run_mux),
            ),
            (
                "… ops per run on the mux's channel; one-shot execs",
                r.mux_ops.clone(),
            ),
            (
                "… ssh masters / Modal bridges started (off; own; mux)",
                r.helpers.clone(),
            ),
            (
                "bare `sh -c true` via the transport, median",
                ms(r.bare_exec),
            ),
            ("warm cell `true` in-process, one-shot, median", ms(r.cell)),
            (
                "warm cell `true` in-process, on the channel, median",
                ms(r.channel_cell),
            ),
            (
                "exec calls per warm cell, in-process",
                r.round_trips.clone(),
            ),
            (
                "per warm cell on the channel (execs; ops on it)",
                r.channel_ops.clone(),
            ),
            ("exec calls per warm `tether run true`", r.cli_execs.clone()),
            (
                "first output byte of `echo x; sleep 0.5`, one-shot",
                ms(r.first_byte_one_shot),
            ),
            (
                "first output byte of `echo x; sleep 0.5`, on the channel",
                ms(r.first_byte_channel),
            ),
        ];
        rows.push((
            "tool call round trip (10 calls in a cell), per call",
            ms(r.tool_call),
        ));
        rows.push(("exec calls per tool call", r.tool_execs.clone()));
        if let Some((fresh, process_mux)) = r.ssh_client {
            rows.push(("`ssh host true`, a new connection each, median", ms(fresh)));
            rows.push((
                "`ssh -o ControlPath=… host true` (process-mux)",
                ms(process_mux),
            ));
        }
        let bare_label = match spec {
            BackendSpec::Ssh(_) => Some((
                "bare `ssh host true` (new connection), CLI's loop",
                "via tether mux / `ssh host true`",
            )),
            BackendSpec::Docker(_) => Some((
                "bare `docker exec C true`, median",
                "via tether mux / `docker exec C true`",
            )),
            _ => None,
        };
        if let (Some(bare), Some((label, ratio))) = (r.bare_cli, bare_label) {
            rows.push((label, ms(bare)));
            rows.push((
                ratio,
                format!(
                    "{:.2}",
                    r.cli_run_mux.as_secs_f64() / bare.as_secs_f64().max(1e-9)
                ),
            ));
        }
        if let Some((bare, mux)) = r.cpu {
            rows.push(("CPU per `docker exec C true`, all processes", ms(bare)));
            rows.push((
                "CPU per warm `tether run true` via tether mux, all",
                ms(mux),
            ));
            rows.push((
                "… ratio (CPU)",
                format!("{:.2}", mux.as_secs_f64() / bare.as_secs_f64().max(1e-9)),
            ));
        }
        if let Some(cancel) = r.cancel {
            rows.push(("cancel -> last process dead (TERM honoured)", ms(cancel)));
        }
        if let Some(import) = r.python_import {
            rows.push((
                "new python3 + `import modal` (an exec's cost before the bridge)",
                ms(import),
            ));
        }
        if let Some(rss) = r.daemon_rss_kib {
            rows.push(("kernel daemon RSS", format!("{rss} KiB")));
        }
        for (label, value) in rows {
            println!("{label:<52} {value}");
        }
    }
    Ok(exit::OK)
}

struct Results {
    cli_run_off: Duration,
    cli_run_auto: Duration,
    cli_run_mux: Duration,
    mux_ops: String,
    /// Helper processes the warm `tether run`s started: off; auto; mux.
    helpers: String,
    /// The backend's bare command from a shell (`docker exec C true`,
    /// `ssh host true`), in the CLI's loop.
    bare_cli: Option<Duration>,
    /// CPU per `docker exec C true` and per warm `tether run true` via
    /// the background process, every process involved on this machine.
    cpu: Option<(Duration, Duration)>,
    bare_exec: Duration,
    cell: Duration,
    channel_cell: Duration,
    /// On ssh: `ssh host true` on a new connection, and through the master
    /// with an `ssh` process per exec.
    ssh_client: Option<(Duration, Duration)>,
    round_trips: String,
    channel_ops: String,
    cli_execs: String,
    tool_call: Duration,
    tool_execs: String,
    cancel: Option<Duration>,
    daemon_rss_kib: Option<u64>,
    python_import: Option<Duration>,
    first_byte_one_shot: Duration,
    first_byte_channel: Duration,
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
    spec: &BackendSpec,
    root_str: &str,
    dir: &Path,
    iterations: usize,
) -> Result<Results, Failure> {
    let local = matches!(spec, BackendSpec::Local(_));
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
    let ssh_client = match spec {
        BackendSpec::Ssh(opts) => Some(ssh_client_times(opts, iterations)?),
        _ => None,
    };

    // In-process driver: round trips, cell time, cancel latency, RSS.
    let location = agent.location(root_str);
    let client = Client::new(Config::new(location.clone(), agent.size()), 7);
    let mut driver = Driver::new(
        client,
        transport.clone(),
        Box::new(MemoryStore::new()),
        agent.bytes.clone(),
        location.clone(),
    );
    let kernel = KernelName::new("bench").map_err(fail)?;
    let quiet = &mut |_: &tether_core::client::Event| ();
    // Cold: install, spawn.
    run_ok(&mut driver, &kernel, "true", quiet).await?;
    driver.settle(quiet).await.map_err(fail)?;
    // The same warm cell on an open channel (its own driver and kernel),
    // interleaved with the one-shot cells so that a load that comes and
    // goes hits both alike.
    let channel_kernel = KernelName::new("bench-channel").map_err(fail)?;
    let (channel, mut channel_driver) =
        channel_driver(agent, spec, &location, &channel_kernel).await?;
    let (mut channel_cells, mut channel_ops) = (Vec::new(), String::new());
    let mut cells = Vec::new();
    let mut per_cell = None;
    for _ in 0..iterations {
        let (took, ops) = channel_cell(&channel, &mut channel_driver, &channel_kernel).await?;
        channel_cells.push(took);
        channel_ops = ops;
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
    // Output latency: the first byte of a cell that prints, then sleeps.
    let (mut first_one_shot, mut first_channel) = (Vec::new(), Vec::new());
    for _ in 0..iterations.min(5) {
        first_channel.push(first_byte(&mut channel_driver, &channel_kernel).await?);
        first_one_shot.push(first_byte(&mut driver, &kernel).await?);
    }
    let (tool_call, tool_execs) = tool_latency(&mut driver, &kernel, iterations).await?;
    let daemon_rss_kib = driver
        .client()
        .record(&kernel)
        .and_then(|r| r.identity)
        .map(|id| rss_kib(id.pid))
        .filter(|_| local);
    let cancel = if local {
        Some(cancel_latency(&mut driver, &kernel, dir).await?)
    } else {
        None
    };
    driver.shutdown(&kernel, quiet).await.map_err(fail)?;
    channel_driver
        .shutdown(&channel_kernel, quiet)
        .await
        .map_err(fail)?;
    drop((driver, channel_driver));

    // The whole CLI, warm.
    let state = dir.join("state");
    let exe = std::env::current_exe().map_err(fail)?;
    // `off`: no channel; `auto`: this process's own; `mux`: through the
    // sandbox's background process.
    let cli = |mode: &str, args: &[&str]| {
        let mut cmd = Command::new(&exe);
        let (channel, persist) = match mode {
            "mux" => ("auto", "10m"),
            other => (other, "off"),
        };
        cmd.env("XDG_STATE_HOME", &state)
            .env("XDG_RUNTIME_DIR", state.join("run"))
            .env("TETHER_AGENT_BIN", &agent.path)
            .arg("--backend")
            .arg(spec.to_string())
            .arg("--root")
            .arg(root_str)
            .arg("--channel")
            .arg(channel)
            .arg("--persist")
            .arg(persist)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        cmd
    };
    let run_true = ["run", "--kernel", "cli", "true"];
    let run_true_json = ["--json", "run", "--kernel", "cli", "true"];
    let warm = cli("off", &run_true).status().map_err(fail)?;
    if !warm.success() {
        return Err(fail(format!("`tether run true` failed: {warm}")));
    }
    // The background process: started by this run, warm once its
    // channel is open.
    let mux_status = || -> Option<serde_json::Value> {
        let out = cli("mux", &["mux", "--status"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .output()
            .ok()?;
        serde_json::from_slice(&out.stdout).ok()
    };
    let started = cli("mux", &run_true).status().map_err(fail)?;
    if !started.success() {
        return Err(fail(format!("`tether run true` failed: {started}")));
    }
    let warm_until = Instant::now() + Duration::from_secs(60);
    let before = loop {
        match mux_status() {
            Some(s) if s["channel"]["open"] == true => break s,
            _ if Instant::now() > warm_until => {
                return Err(fail("the background process's channel did not open"))
            }
            _ => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    let docker_exec = match spec {
        BackendSpec::Docker(opts) => Some(opts.container.clone()),
        _ => None,
    };
    // The backend's own bare command from a shell, timed in the same
    // loop as the CLI: `docker exec C true`, `ssh host true` (a new
    // connection each).
    let bare_command = || -> Option<Command> {
        match spec {
            BackendSpec::Docker(opts) => {
                let mut cmd = Command::new("docker");
                cmd.args(["exec", &opts.container, "true"]);
                Some(cmd)
            }
            BackendSpec::Ssh(opts) => Some(opts.client_command(None, &["true"])),
            _ => None,
        }
    };
    // Interleaved, so a load that comes and goes hits all alike.
    let (mut runs_off, mut runs_auto, mut runs_mux, mut bare_runs) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    // Helper processes (ssh masters, Modal bridges) the `tether`s
    // themselves started, per mode, from their `--json` exit lines.
    let mut helpers = [0u64; 3];
    for _ in 0..iterations {
        for (i, (mode, runs)) in [
            ("off", &mut runs_off),
            ("auto", &mut runs_auto),
            ("mux", &mut runs_mux),
        ]
        .into_iter()
        .enumerate()
        {
            let t0 = Instant::now();
            let out = cli(mode, &run_true_json)
                .stdout(Stdio::piped())
                .output()
                .map_err(fail)?;
            runs.push(t0.elapsed());
            if !out.status.success() {
                return Err(fail(format!("`tether run true` failed: {}", out.status)));
            }
            helpers[i] += exit_line(&out.stdout)["helpers_started"]
                .as_u64()
                .unwrap_or(0);
        }
        if let Some(mut bare) = bare_command() {
            let t0 = Instant::now();
            let status = bare.stdin(Stdio::null()).status().map_err(fail)?;
            bare_runs.push(t0.elapsed());
            if !status.success() {
                return Err(fail(format!("{bare:?}: {status}")));
            }
        }
    }
    let after = mux_status().ok_or_else(|| fail("the background process is gone"))?;
    let mux_pid = after["pid"].as_u64().map(|p| p as u32);
    // CPU, which a loaded machine does not inflate: three rounds of each,
    // the least disturbed (others' containers use the same daemons) kept.
    let mut cpu = None;
    if let (Some(container), Some(mux_pid)) = (&docker_exec, mux_pid) {
        if let Some(usage) = container_cpu_file(container) {
            let (mut bare_cpu, mut mux_cpu) = (Vec::new(), Vec::new());
            for _ in 0..3 {
                let c0 = docker_cpu(&usage, mux_pid);
                for _ in 0..iterations {
                    let _ = Command::new("docker")
                        .args(["exec", container, "true"])
                        .stdin(Stdio::null())
                        .status();
                }
                let c1 = docker_cpu(&usage, mux_pid);
                for _ in 0..iterations {
                    let _ = cli("mux", &run_true).status();
                }
                let c2 = docker_cpu(&usage, mux_pid);
                bare_cpu.push(c1.saturating_sub(c0) / iterations as u32);
                mux_cpu.push(c2.saturating_sub(c1) / iterations as u32);
            }
            cpu = bare_cpu.into_iter().min().zip(mux_cpu.into_iter().min());
        }
    }
    let delta = |key: &str| {
        let n = |s: &serde_json::Value| s["channel"][key].as_u64().unwrap_or(0);
        n(&after).saturating_sub(n(&before))
    };
    let mux_ops = format!(
        "{:.2}; {} (channels opened {})",
        delta("on_channel") as f64 / iterations as f64,
        delta("one_shot"),
        delta("opened")
    );
    let mux_helpers = after["helpers_started"]
        .as_u64()
        .unwrap_or(0)
        .saturating_sub(before["helpers_started"].as_u64().unwrap_or(0));
    let helpers = format!(
        "{}; {}; {} (+{mux_helpers} in tether mux)",
        helpers[0], helpers[1], helpers[2]
    );
    if let Some(pid) = after["pid"]
        .as_u64()
        .and_then(|p| rustix::process::Pid::from_raw(p as i32))
    {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    }
    let json = cli("off", &["--json", "run", "--kernel", "cli", "true"])
        .stdout(Stdio::piped())
        .output()
        .map_err(fail)?;
    let cli_execs = describe_execs(&exit_line(&json.stdout)["execs"]);
    let _ = cli("off", &["stop"]).stderr(Stdio::null()).status();

    // What every Modal exec paid before the bridge: a new interpreter
    // importing Modal's client.
    let python_import = match spec {
        BackendSpec::Modal(opts) => {
            let mut samples = Vec::new();
            for _ in 0..iterations.min(5) {
                let t0 = Instant::now();
                let status = Command::new(opts.python())
                    .args(["-c", "import modal"])
                    .stdin(Stdio::null())
                    .status()
                    .map_err(fail)?;
                samples.push(t0.elapsed());
                if !status.success() {
                    return Err(fail(format!("{} cannot import modal", opts.python())));
                }
            }
            Some(median(samples))
        }
        _ => None,
    };

    Ok(Results {
        cli_run_off: median(runs_off),
        cli_run_auto: median(runs_auto),
        cli_run_mux: median(runs_mux),
        mux_ops,
        bare_cli: (!bare_runs.is_empty()).then(|| median(bare_runs)),
        helpers,
        cpu,
        bare_exec: median(bare),
        cell: median(cells),
        channel_cell: median(channel_cells),
        ssh_client,
        round_trips: per_cell.unwrap_or_default(),
        channel_ops,
        cli_execs,
        tool_call,
        tool_execs,
        cancel,
        daemon_rss_kib,
        python_import,
        first_byte_one_shot: median(first_one_shot),
        first_byte_channel: median(first_channel),
    })
}

/// Calls per cell in [`tool_latency`].
const TOOL_CALLS: u32 = 10;

/// A warm cell making [`TOOL_CALLS`] calls (answered at once by an
/// in-process handler, no output between them) against a warm cell
/// `true`, interleaved: the median difference per call, and the exec
/// calls each call added.
async fn tool_latency(
    driver: &mut Driver,
    kernel: &KernelName,
    iterations: usize,
) -> Result<(Duration, String), Failure> {
    driver.set_tools(Some(Arc::new(|call: crate::driver::ToolCall| {
        Box::pin(async move { tether_core::protocol::CallReply::Ok { value: call.args } })
            as crate::driver::ToolFuture
    })));
    let quiet = &mut |_: &tether_core::client::Event| ();
    let code = format!(
        "i=0; while [ $i -lt {TOOL_CALLS} ]; do r=$(tether-call ping '{{}}') || exit 9; i=$((i+1)); done"
    );
    let (mut with, mut without) = (Vec::new(), Vec::new());
    let mut execs = 0;
    for _ in 0..iterations {
        let t0 = Instant::now();
        run_ok(driver, kernel, "true", quiet).await?;
        without.push(t0.elapsed());
        driver.settle(quiet).await.map_err(fail)?;
        let before = driver.stats().total();
        let t0 = Instant::now();
        run_ok(driver, kernel, &code, quiet).await?;
        with.push(t0.elapsed());
        driver.settle(quiet).await.map_err(fail)?;
        execs = driver.stats().total() - before;
    }
    driver.set_tools(None);
    let per_call = median(with).saturating_sub(median(without)) / TOOL_CALLS;
    // The cell's own submit, then one wait per call.
    let added = f64::from(u32::try_from(execs.saturating_sub(1)).unwrap_or(u32::MAX))
        / f64::from(TOOL_CALLS);
    Ok((per_call, format!("{added:.1} ({execs} for the cell)")))
}

/// A driver whose transport is an open channel over `spec`, its kernel
/// warm.
async fn channel_driver(
    agent: &AgentBinary,
    spec: &BackendSpec,
    location: &tether_core::protocol::AgentLocation,
    kernel: &KernelName,
) -> Result<(Arc<ChannelTransport>, Driver), Failure> {
    let channel = channel_for(spec, location, MuxConfig::default())
        .ok_or_else(|| fail(format!("{spec} cannot carry a channel")))?;
    let client = Client::new(Config::new(location.clone(), agent.size()), 8);
    let mut driver = Driver::new(
        client,
        channel.clone(),
        Box::new(MemoryStore::new()),
        agent.bytes.clone(),
        location.clone(),
    );
    let quiet = &mut |_: &tether_core::client::Event| ();
    run_ok(&mut driver, kernel, "true", quiet).await?;
    driver.settle(quiet).await.map_err(fail)?;
    if !channel.open(Duration::from_secs(30)).await {
        return Err(fail(format!(
            "the channel did not open: {:?}",
            channel.status()
        )));
    }
    Ok((channel, driver))
}

/// One warm cell `true` on the channel: how long it took, and what it
/// cost (one-shot execs; ops on the channel).
async fn channel_cell(
    channel: &ChannelTransport,
    driver: &mut Driver,
    kernel: &KernelName,
) -> Result<(Duration, String), Failure> {
    let quiet = &mut |_: &tether_core::client::Event| ();
    let before = channel.status().stats;
    let t0 = Instant::now();
    run_ok(driver, kernel, "true", quiet).await?;
    let took = t0.elapsed();
    driver.settle(quiet).await.map_err(fail)?;
    let after = channel.status().stats;
    let ops = format!(
        "{}; {}",
        after.one_shot - before.one_shot,
        after.on_channel - before.on_channel
    );
    Ok((took, ops))
}

/// `ssh host true` on a new connection each time, then through the
/// transport's master with an `ssh` process per exec: medians.
fn ssh_client_times(
    opts: &crate::ssh::SshOptions,
    iterations: usize,
) -> Result<(Duration, Duration), Failure> {
    let ctl = crate::ssh::SshTransport::new(opts.clone())
        .control_path()
        .map_err(fail)?;
    let time = |master: Option<&Path>| -> Result<Duration, Failure> {
        let mut samples = Vec::new();
        for _ in 0..iterations {
            let t0 = Instant::now();
            let status = opts
                .client_command(master, &["true"])
                .stdin(Stdio::null())
                .status()
                .map_err(fail)?;
            samples.push(t0.elapsed());
            if !status.success() {
                return Err(fail(format!("ssh ... true failed: {status}")));
            }
        }
        Ok(median(samples))
    };
    Ok((time(None)?, time(Some(&ctl))?))
}

/// From the start of a warm cell that prints and then sleeps to its
/// first output byte.
async fn first_byte(driver: &mut Driver, kernel: &KernelName) -> Result<Duration, Failure> {
    let t0 = Instant::now();
    let mut first = None;
    let mut on_event = |e: &tether_core::client::Event| {
        if first.is_none() && matches!(e, tether_core::client::Event::Output { .. }) {
            first = Some(t0.elapsed());
        }
    };
    run_ok(driver, kernel, "echo x; sleep 0.5", &mut on_event).await?;
    let quiet = &mut |_: &tether_core::client::Event| ();
    driver.settle(quiet).await.map_err(fail)?;
    first.ok_or_else(|| fail("the cell `echo x; sleep 0.5` printed nothing"))
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

/// The `exit` line of a `tether --json` run's stdout (null if none).
fn exit_line(stdout: &[u8]) -> serde_json::Value {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["event"] == "exit")
        .unwrap_or_default()
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

/// The container's cgroup v1 `cpuacct.usage` file (nanoseconds of CPU of
/// every process that ran in it), if this machine has one.
fn container_cpu_file(container: &str) -> Option<PathBuf> {
    let out = Command::new("docker")
        .args(["inspect", "-f", "{{.Id}}", container])
        .output()
        .ok()?;
    let id = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let path = PathBuf::from(format!("/sys/fs/cgroup/cpuacct/docker/{id}/cpuacct.usage"));
    path.is_file().then_some(path)
}

/// CPU (user + system, including reaped children) of everything a docker
/// exec involves on this machine: this process's reaped children (the
/// `tether` and `docker` commands), dockerd, containerd, the containerd
/// shims (they reap runc), the container's cgroup, and the background
/// process `mux` (whose channel is an Engine API exec, no child).
fn docker_cpu(container_usage: &Path, mux: u32) -> Duration {
    /// `USER_HZ` on Linux.
    const TICK: Duration = Duration::from_millis(10);
    let fields = |pid: &str| -> Vec<u64> {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rsplit_once(')').map(|(_, rest)| rest.to_owned()))
            .map(|rest| {
                rest.split_whitespace()
                    .filter_map(|f| f.parse().ok())
                    .collect()
            })
            .unwrap_or_default()
    };
    // After the state: ppid pgrp session tty tpgid flags minflt cminflt
    // majflt cmajflt utime stime cutime cstime (the state is not numeric).
    let own = |pid: &str| -> u64 { fields(pid).get(10..12).map_or(0, |f| f.iter().sum()) };
    let reaped = |pid: &str| -> u64 { fields(pid).get(12..14).map_or(0, |f| f.iter().sum()) };
    let mut ticks = reaped("self");
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let pid = entry.file_name().to_string_lossy().into_owned();
        if !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        if matches!(comm.trim(), "dockerd" | "containerd" | "containerd-shim") {
            ticks += own(&pid) + reaped(&pid);
        }
    }
    ticks += own(&mux.to_string()) + reaped(&mux.to_string());
    let children =
        std::fs::read_to_string(format!("/proc/{mux}/task/{mux}/children")).unwrap_or_default();
    for child in children.split_whitespace() {
        ticks += own(child) + reaped(child);
    }
    let container_ns: u64 = std::fs::read_to_string(container_usage)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    TICK * ticks as u32 + Duration::from_nanos(container_ns)
}
