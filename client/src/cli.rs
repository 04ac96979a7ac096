//! The `tether` command line: argument parsing, what each subcommand does
//! with a [`Driver`], how events are shown, and exit codes.

use crate::agent_bin::{AgentBinary, AgentRef};
use crate::backend::BackendSpec;
use crate::channel::{channel_for, transport_for, ChannelMode};
use crate::driver::{Driver, DriverError};
use crate::duration::parse_duration;
use crate::persist::{self, Attached, MuxPaths};
use crate::records::{FileStore, KernelLock, Locking, RecordStore};
use crate::transport::Transport;
use clap::{Parser, Subcommand, ValueEnum};
use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStringExt;
use std::sync::Arc;
use std::time::Duration;
use tether_core::bytes::Bytes;
use tether_core::channel::MuxConfig;
use tether_core::client::{CellKey, Client, Config, Event, KernelRecord};
use tether_core::ids::KernelName;
use tether_core::protocol::AgentLocation;
use tether_core::protocol::{CellOutcome, Lang, Stream};

/// Exit codes of `tether` (also in `--help` and the README). A cell's own
/// status passes through unchanged (as with `sh -c`, `docker exec`, `ssh`);
/// the others are tether's own, and `--json` tells the two apart.
pub mod exit {
    /// The cell ran to its end and succeeded.
    pub const OK: i32 = 0;
    /// The cell failed without a status of its own (a Python exception,
    /// a shell killed by a signal, a cell the agent refused).
    pub const CELL_ERROR: i32 = 1;
    /// Bad command line: unknown option, hostile kernel name, bad backend.
    pub const USAGE: i32 = 2;
    /// The kernel is busy: another `tether` is driving it, or it has an
    /// unresolved cell from an earlier run. Nothing was run. (EBUSY)
    pub const BUSY: i32 = 16;
    /// The outcome is not known (sandbox unreachable, deadline passed); the
    /// cell is recorded: `tether resume` later. (EX_TEMPFAIL)
    pub const UNKNOWN: i32 = 75;
    /// tether itself could not work: no agent binary, unreadable or corrupt
    /// records, an agent or internal error. (EX_UNAVAILABLE)
    pub const FAILURE: i32 = 69;
    /// The cell ran past `--timeout` and was cancelled (as `timeout(1)`).
    pub const TIMED_OUT: i32 = 124;
    /// The cell was cancelled (Ctrl-C, `tether cancel`), as a shell reports
    /// SIGINT.
    pub const CANCELLED: i32 = 130;

    /// The name `--json` gives a failure of tether's own with `code`.
    pub fn failure_name(code: i32) -> &'static str {
        match code {
            USAGE => "usage",
            BUSY => "busy",
            UNKNOWN => "unknown",
            _ => "unavailable",
        }
    }
}

const AFTER_HELP: &str = "\
Examples:
  tether run 'cd /tmp; export X=1'      # state persists between runs...
  tether run 'pwd; echo $X'             # ...prints /tmp and 1
  echo 'print(6*7)' | tether run --lang python --kernel py
  tether run --timeout 30s 'make test'  # cancelled (not the kernel) after 30s
  tether run 'sleep 100'                # Ctrl-C cancels the cell, the kernel stays
  tether resume                         # after a crash or a lost connection
  tether resume --replay                # the whole output of the unresolved cell
  tether --backend 'local?latency=50ms' run true   # model a remote round trip
  tether --backend docker:mybox run 'uname -a'     # a running container
  tether --backend ssh:me@host:2222 run 'hostname'
  tether ls; tether status; tether reset --kernel py; tether stop

Exit codes (the cell's own status, as `sh -c` gives it, or tether's own):
  0    the cell succeeded
  N    the cell's status: its last command's (`false` 1, a missing command
       127) or its `exit N` / `sys.exit(N)` (`exit 3` gives 3)
  1    the cell failed without a status (Python exception)
  2    usage error (bad option, refused kernel name, unknown backend)
  16   kernel busy: another tether drives it (`run --wait` queues behind
       it) or it has an unresolved cell (`tether resume` / `tether cancel`)
  69   tether could not work (no agent binary, corrupt record, agent error)
  75   outcome unknown (sandbox unreachable): the cell is recorded, `tether resume` later
  124  the cell timed out (--timeout) and was cancelled
  130  the cell was cancelled (Ctrl-C, `tether cancel`)
A cell's own status can collide with tether's codes; with --json the last
line tells them apart: event `exit` with the cell's outcome (`exit` and its
code, `ok`, `error`, `cancelled`, `timed_out`, or `unknown` for tether's 75),
or event `failure` naming tether's own condition (busy, usage, unavailable).
Cells have no stdin (it is /dev/null; Python's input() raises EOFError).

Records of kernels live in $XDG_STATE_HOME/tether (default ~/.local/state/tether).
A background process per sandbox (`tether mux`, socket in $XDG_RUNTIME_DIR/tether)
keeps the channel open between commands; it exits after --persist unused.
The agent binary is $TETHER_AGENT_BIN, or tether-agent next to this program,
or the workspace build (scripts/build-agent).";

/// Keeps a code-execution kernel alive on a sandbox that can only run
/// commands to completion.
#[derive(Debug, Parser)]
#[command(name = "tether", version, after_help = AFTER_HELP)]
pub struct Cli {
    /// The sandbox: `local` (this machine; `local?latency=50ms` injects a
    /// round trip), `docker:NAME` or `docker?image=IMG`,
    /// `ssh:[USER@]HOST[:PORT]`, `modal:SANDBOX_ID`.
    #[arg(long, global = true, default_value = "local", env = "TETHER_BACKEND")]
    pub backend: String,
    /// Absolute directory on the sandbox for the agent and kernel state
    /// [default: /tmp/tether-$UID].
    #[arg(long, global = true, env = "TETHER_ROOT")]
    pub root: Option<String>,
    /// Print events as JSON lines on stdout instead of raw output.
    #[arg(long, global = true)]
    pub json: bool,
    /// Also print the client's notes (installs, retries, ignored replies).
    #[arg(long, short, global = true)]
    pub verbose: bool,
    /// Agent ops over one long-lived channel to the sandbox (`auto`: on
    /// the backends that can stream: local, docker, ssh, modal), or every
    /// op as its own exec (`off`).
    #[arg(
        long,
        global = true,
        value_enum,
        default_value = "auto",
        env = "TETHER_CHANNEL"
    )]
    pub channel: ChannelMode,
    /// Keep the channel open between `tether` commands in a background
    /// process (`tether mux`, one per sandbox, started on first use) that
    /// exits after this long unused (`10m`, `30s`), or `off`: each
    /// `tether` opens its own.
    #[arg(long, global = true, default_value = "10m", env = "TETHER_PERSIST")]
    pub persist: String,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run code as the next cell of a kernel (starting the kernel if needed).
    Run(RunArgs),
    /// Finish an unresolved cell (after a crash or a lost connection).
    Resume(ResumeArgs),
    /// Cancel the unresolved cell of a kernel (the cell, not the kernel).
    Cancel(KernelArg),
    /// Show what this client knows about kernels.
    Status(KernelOpt),
    /// List kernels known to this client.
    Ls,
    /// Stop a kernel and forget it: the next run starts fresh.
    Reset(KernelArg),
    /// Stop every kernel known to this client.
    Stop,
    /// Print what a kernel's background jobs printed after their cell
    /// resolved (a bounded log; oldest output dropped first, with a note).
    Logs(KernelArg),
    /// Measure round trips and latencies (see README).
    #[command(hide = true)]
    Bench(crate::bench::BenchArgs),
    /// The background process that keeps the sandbox's channel open
    /// (started by `tether run`; see --persist).
    #[command(hide = true)]
    Mux(MuxArgs),
}

/// `tether mux`.
#[derive(Debug, clap::Args)]
pub struct MuxArgs {
    /// Exit after this long without a connection [default: --persist].
    #[arg(long, value_parser = parse_duration)]
    pub idle: Option<Duration>,
    /// Print the running one's status as JSON (exit 1 if none runs).
    #[arg(long)]
    pub status: bool,
}

/// A kernel's language, on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LangArg {
    /// POSIX shell: cwd and exported variables persist.
    Shell,
    /// One persistent python3 interpreter.
    Python,
}

impl From<LangArg> for Lang {
    fn from(l: LangArg) -> Lang {
        match l {
            LangArg::Shell => Lang::Shell,
            LangArg::Python => Lang::Python,
        }
    }
}

/// `tether run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The code, byte for byte (read from stdin when absent).
    #[arg(value_parser = clap::value_parser!(OsString))]
    pub code: Option<OsString>,
    /// Language of a new kernel [default: shell, or the kernel's own].
    #[arg(long, value_enum)]
    pub lang: Option<LangArg>,
    /// The kernel: 1-64 of A-Z a-z 0-9 _ . - (not starting with . or -).
    #[arg(long, default_value = "default")]
    pub kernel: String,
    /// Cancel the cell (not the kernel) after this long: 500ms, 30s, 2m.
    #[arg(long, value_parser = parse_duration)]
    pub timeout: Option<Duration>,
    /// If another tether is driving the kernel, wait for it to finish
    /// instead of exiting at once with 16 (busy).
    #[arg(long)]
    pub wait: bool,
    /// When no kernel can start on the sandbox (the agent cannot be
    /// installed or run under --root: read-only or noexec; no python3 for a
    /// Python kernel; not x86_64), fail with the reason instead of running
    /// the cell once as a plain `sh -c` / `python3 -c` exec without a
    /// kernel (which keeps no state, no journal and cannot be resumed).
    #[arg(long)]
    pub no_fallback: bool,
    /// Answer the cells' tool calls (`tether-call NAME JSON` in a shell
    /// cell, `tether.call(name, args)` in Python) by running `sh -c CMD` on
    /// this host for each, the call as JSON on stdin
    /// (`{"cell","id","name","args"}`): its stdout is the result (JSON, or
    /// text), a non-zero exit an error with its stderr. Without it every
    /// call gets the error "no tools".
    #[arg(long, value_name = "CMD")]
    pub tools: Option<String>,
}

/// `tether resume`.
#[derive(Debug, clap::Args)]
pub struct ResumeArgs {
    /// The kernel.
    #[arg(long, default_value = "default")]
    pub kernel: String,
    /// Print the cell's output from its start, not only what is new.
    #[arg(long)]
    pub replay: bool,
    /// Answer the cells' tool calls (`tether-call NAME JSON` in a shell
    /// cell, `tether.call(name, args)` in Python) by running `sh -c CMD` on
    /// this host for each, the call as JSON on stdin
    /// (`{"cell","id","name","args"}`): its stdout is the result (JSON, or
    /// text), a non-zero exit an error with its stderr. Without it every
    /// call gets the error "no tools".
    #[arg(long, value_name = "CMD")]
    pub tools: Option<String>,
}

/// A subcommand about one kernel.
#[derive(Debug, clap::Args)]
pub struct KernelArg {
    /// The kernel.
    #[arg(long, default_value = "default")]
    pub kernel: String,
}

/// A subcommand about one kernel or all.
#[derive(Debug, clap::Args)]
pub struct KernelOpt {
    /// The kernel [default: all].
    #[arg(long)]
    pub kernel: Option<String>,
}

/// A failure that ends the program with an exit code and a message.
#[derive(Debug)]
pub struct Failure {
    /// The exit code.
    pub code: i32,
    /// What to print on stderr (without the `tether: ` prefix).
    pub message: String,
}

impl Failure {
    fn usage(message: impl Into<String>) -> Failure {
        Failure {
            code: exit::USAGE,
            message: message.into(),
        }
    }

    fn busy(message: impl Into<String>) -> Failure {
        Failure {
            code: exit::BUSY,
            message: message.into(),
        }
    }

    fn other(message: impl std::fmt::Display) -> Failure {
        Failure {
            code: exit::FAILURE,
            message: message.to_string(),
        }
    }
}

impl From<DriverError> for Failure {
    fn from(e: DriverError) -> Failure {
        Failure::other(e)
    }
}

impl From<crate::records::RecordError> for Failure {
    fn from(e: crate::records::RecordError) -> Failure {
        Failure::other(e)
    }
}

/// The exit code for a cell's outcome.
pub fn exit_code(outcome: &CellOutcome) -> i32 {
    match outcome {
        CellOutcome::Ok => exit::OK,
        CellOutcome::Error { .. } => exit::CELL_ERROR,
        CellOutcome::Exit { code } => {
            if (0..=255).contains(code) {
                *code
            } else {
                exit::CELL_ERROR
            }
        }
        CellOutcome::Cancelled => exit::CANCELLED,
        CellOutcome::TimedOut => exit::TIMED_OUT,
        CellOutcome::Unknown { .. } => exit::UNKNOWN,
    }
}

/// Parses a kernel name, refusing hostile ones as a usage error.
pub fn kernel_name(raw: &str) -> Result<KernelName, Failure> {
    KernelName::new(raw).map_err(|e| Failure::usage(format!("{e} (got {raw:?})")))
}

/// Everything a subcommand needs to reach the sandbox.
pub struct Context {
    /// The parsed backend.
    pub backend: BackendSpec,
    /// The sandbox root.
    pub root: String,
    /// Events as JSON lines.
    pub json: bool,
    /// Show notes.
    pub verbose: bool,
    /// Whether ops use the channel.
    pub channel: ChannelMode,
    /// `--backend` as given (it names the background process).
    pub backend_raw: String,
    /// How long the background process lives unused (`None`: none).
    pub persist: Option<Duration>,
}

impl Context {
    /// Validates the global options.
    pub fn new(cli: &Cli) -> Result<Context, Failure> {
        let backend =
            BackendSpec::parse(&cli.backend).map_err(|e| Failure::usage(e.to_string()))?;
        let root = match &cli.root {
            Some(root) => root.clone(),
            None => format!("/tmp/tether-{}", current_uid()),
        };
        let trimmed = root.trim_end_matches('/');
        if !root.starts_with('/') || trimmed.is_empty() || root.split('/').any(|part| part == "..")
        {
            return Err(Failure::usage(format!(
                "--root must be an absolute path below / without `..` (got {root:?})"
            )));
        }
        if matches!(backend, BackendSpec::Local(_)) {
            check_local_root(trimmed)?;
        }
        let persist = match cli.persist.trim() {
            "off" => None,
            other => Some(parse_duration(other).map_err(|e| {
                Failure::usage(format!("--persist takes a duration or `off`: {e}"))
            })?),
        };
        Ok(Context {
            backend,
            root: trimmed.to_owned(),
            json: cli.json,
            verbose: cli.verbose,
            channel: cli.channel,
            backend_raw: cli.backend.trim().to_owned(),
            persist,
        })
    }

    /// The record store of this sandbox.
    pub fn store(&self) -> Result<FileStore, Failure> {
        Ok(FileStore::for_sandbox(
            &self.backend.sandbox_id(&self.root),
        )?)
    }

    /// A driver with a fresh client (seeded from the OS: request ids and
    /// nonces must differ between `tether` processes).
    ///
    /// It uses the sandbox's background process if one runs, and never
    /// starts one (`tether stop` should not leave one behind).
    pub fn driver(&self) -> Result<Driver, Failure> {
        self.build_driver(|_| {}, false)
    }

    /// [`Context::driver`] for a command that runs cells (`run`,
    /// `resume`): starts the background process if none answers.
    pub fn cell_driver(&self) -> Result<Driver, Failure> {
        self.build_driver(|_| {}, true)
    }

    /// [`Context::cell_driver`], with the client's configuration adjusted.
    pub fn driver_with(&self, tune: impl FnOnce(&mut Config)) -> Result<Driver, Failure> {
        self.build_driver(tune, true)
    }

    fn build_driver(
        &self,
        tune: impl FnOnce(&mut Config),
        start_mux: bool,
    ) -> Result<Driver, Failure> {
        let agent = self.agent()?;
        let location = agent.location(&self.root);
        let mut config = Config::new(location.clone(), agent.size);
        tune(&mut config);
        let client = Client::new(config, os_seed());
        Ok(Driver::new(
            client,
            self.transport(&agent.hash, &location, start_mux),
            Box::new(self.store()?),
            agent.source.clone(),
            location,
        ))
    }
}

impl Context {
    /// The agent binary, its hash remembered beside the background
    /// processes' sockets (a warm command neither reads nor hashes it).
    fn agent(&self) -> Result<AgentRef, Failure> {
        let found = match persist::dir() {
            Ok(dir) => AgentBinary::find_cached(&dir.join("agent-hashes")),
            Err(_) => AgentBinary::find().map(|agent| AgentRef {
                path: agent.path.clone(),
                hash: agent.hash.clone(),
                size: agent.size(),
                source: agent.bytes.clone().into(),
            }),
        };
        found.map_err(Failure::other)
    }

    /// The transport of a command: through the sandbox's background
    /// process when one answers; else this process's own (starting a
    /// background process for the next command if `start_mux`).
    fn transport(
        &self,
        agent_hash: &str,
        location: &AgentLocation,
        start_mux: bool,
    ) -> Arc<dyn Transport> {
        let own = transport_for(&self.backend, location, self.channel);
        let Some(idle) = self.persist else {
            return own;
        };
        if self.channel == ChannelMode::Off {
            return own;
        }
        let paths = match self.mux_paths(agent_hash) {
            Ok(paths) => paths,
            Err(note) => {
                self.note(&format!("not using a background process: {note}"));
                return own;
            }
        };
        let args = [
            "--backend".to_owned(),
            self.backend_raw.clone(),
            "--root".to_owned(),
            self.root.clone(),
            "--channel".to_owned(),
            "auto".to_owned(),
        ];
        let start = || {
            if start_mux {
                persist::start(&paths, &args, idle)
            } else {
                Ok(())
            }
        };
        match persist::attach(&paths, Arc::clone(&own), start) {
            Attached::Mux(mux) => mux,
            Attached::Without { note } => {
                if let Some(note) = note {
                    self.note(&note);
                }
                own
            }
        }
    }

    /// Removes the socket of the sandbox's background process, if one
    /// is there: the process sees it gone within a second and exits; the
    /// next `tether run` starts a new one.
    fn retire_mux(&self) {
        use std::os::unix::fs::FileTypeExt;
        let Ok(agent) = self.agent() else { return };
        let Ok(paths) = self.mux_paths(&agent.hash) else {
            return;
        };
        let is_socket =
            std::fs::symlink_metadata(&paths.socket).is_ok_and(|meta| meta.file_type().is_socket());
        if is_socket {
            let _ = std::fs::remove_file(&paths.socket);
        }
    }

    fn mux_paths(&self, agent_hash: &str) -> Result<MuxPaths, String> {
        MuxPaths::new(&self.backend_raw, &self.root, agent_hash)
    }

    /// A message for the user outside any driver (stderr, or a JSON
    /// `note` line).
    fn note(&self, text: &str) {
        Printer::new(self.json, self.verbose).note(text);
    }
}

/// On this machine the root holds the binary we execute: refuse one that
/// another user owns or could write (e.g. a planted `/tmp/tether-$UID`).
/// A missing root is fine: the install creates it with mode 0700.
fn check_local_root(root: &str) -> Result<(), Failure> {
    use std::os::unix::fs::MetadataExt;
    let meta = match std::fs::symlink_metadata(root) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Failure::other(format!("--root {root}: {e}"))),
    };
    let uid = current_uid();
    let problem = if !meta.is_dir() {
        Some("it is not a directory (or is a symlink)".to_owned())
    } else if meta.uid() != uid {
        Some(format!(
            "it belongs to uid {}, not to you ({uid})",
            meta.uid()
        ))
    } else if meta.mode() & 0o022 != 0 {
        Some(format!(
            "others can write to it (mode {:o})",
            meta.mode() & 0o777
        ))
    } else {
        None
    };
    match problem {
        None => Ok(()),
        Some(why) => Err(Failure::other(format!(
            "refusing --root {root}: {why}; pick another --root or remove it"
        ))),
    }
}

fn current_uid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(0)
}

fn os_seed() -> u64 {
    let mut buf = [0u8; 8];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        if f.read_exact(&mut buf).is_ok() {
            return u64::from_le_bytes(buf);
        }
    }
    // No /dev/urandom: the pid and the wall clock still differ per process.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    nanos ^ (u64::from(std::process::id()) << 32)
}

/// Runs the parsed command line; returns the exit code.
pub async fn main(cli: Cli) -> i32 {
    let json = cli.json;
    match dispatch(cli).await {
        Ok(code) => code,
        Err(failure) => {
            if json {
                // The last line, like `exit` for a cell: which of tether's
                // own conditions this code is.
                let line = serde_json::json!({
                    "event": "failure",
                    "failure": exit::failure_name(failure.code),
                    "message": failure.message,
                    "exit_code": failure.code,
                });
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{line}");
            }
            eprintln!("tether: {}", failure.message);
            failure.code
        }
    }
}

/// Takes the lock of `kernel` (waiting for it with `wait`); a kernel
/// driven by another `tether` is refused with [`exit::BUSY`], naming the
/// cell that runs there when its record says.
async fn lock_kernel(
    store: &FileStore,
    kernel: &KernelName,
    wait: bool,
) -> Result<KernelLock, Failure> {
    let attempt = {
        let store = store.clone();
        let kernel = kernel.clone();
        // A blocking flock must not hold up the runtime's thread.
        tokio::task::spawn_blocking(move || store.lock(&kernel, wait))
            .await
            .map_err(Failure::other)??
    };
    match attempt {
        Locking::Held(lock) => Ok(lock),
        Locking::Busy { holder } => {
            // A lock file not yet rewritten by its new holder names the
            // last one, which no longer runs.
            let who = match holder {
                Some(h) if h.is_running() => format!("another tether (pid {})", h.pid),
                _ => "another tether".to_owned(),
            };
            let what = match store.load(kernel) {
                Ok(Some(record)) if !record.cells.is_empty() => {
                    let cells: Vec<String> = record
                        .cells
                        .iter()
                        .map(|c| format!("cell {}", c.seq))
                        .collect();
                    format!("{} is running in {who}", cells.join(", "))
                }
                _ => format!("{who} is driving it"),
            };
            Err(Failure::busy(format!(
                "kernel {kernel} is busy: {what}; `tether run --wait` queues behind it, \
                 `tether cancel --kernel {kernel}` cancels it"
            )))
        }
    }
}

async fn dispatch(cli: Cli) -> Result<i32, Failure> {
    let ctx = Context::new(&cli)?;
    match cli.command {
        Command::Run(args) => run(&ctx, args).await,
        Command::Resume(args) => resume(&ctx, args).await,
        Command::Cancel(args) => cancel(&ctx, args).await,
        Command::Status(args) => status(&ctx, args),
        Command::Ls => ls(&ctx),
        Command::Reset(args) => reset(&ctx, args).await,
        Command::Stop => stop(&ctx).await,
        Command::Logs(args) => logs(&ctx, args).await,
        Command::Bench(args) => crate::bench::run(&ctx, args).await,
        Command::Mux(args) => mux(&ctx, args).await,
    }
}

/// `tether mux`: serve until idle, or (`--status`) show the running one.
async fn mux(ctx: &Context, args: MuxArgs) -> Result<i32, Failure> {
    let agent = ctx.agent()?;
    let paths = ctx.mux_paths(&agent.hash).map_err(Failure::other)?;
    if args.status {
        let status = persist::status(&paths.socket).await.map_err(|e| Failure {
            code: exit::CELL_ERROR,
            message: e,
        })?;
        println!("{status}");
        return Ok(exit::OK);
    }
    // Its own session: the terminal's signals and hangup are not for it.
    let _ = rustix::process::setsid();
    let idle = args
        .idle
        .or(ctx.persist)
        .unwrap_or(tether_core::persist::DEFAULT_IDLE);
    let location = agent.location(&ctx.root);
    let stopped = persist::server::run(&paths, idle, || {
        let Some(channel) = channel_for(&ctx.backend, &location, MuxConfig::default()) else {
            let transport = ctx.backend.transport();
            return persist::server::Served {
                transport,
                status: Box::new(|| serde_json::json!({ "channel": null })),
            };
        };
        // Open it now: the next `tether` finds it warm.
        let opening = Arc::clone(&channel);
        tokio::spawn(async move { opening.open(Duration::from_secs(60)).await });
        let watched = Arc::clone(&channel);
        persist::server::Served {
            transport: channel,
            status: Box::new(move || {
                let status = watched.status();
                serde_json::json!({
                    "helpers_started": watched.helpers_started(),
                    "channel": {
                    "open": status.open,
                    "pid": status.pid,
                    "opened": status.stats.opened,
                    "broken": status.stats.broken,
                    "on_channel": status.stats.on_channel,
                    "one_shot": status.stats.one_shot,
                    "last_break": status.last_break,
                }})
            }),
        }
    })
    .await
    .map_err(Failure::other)?;
    eprintln!("tether mux: stopped: {stopped:?}");
    Ok(exit::OK)
}

async fn run(ctx: &Context, args: RunArgs) -> Result<i32, Failure> {
    let kernel = kernel_name(&args.kernel)?;
    let code = match args.code {
        Some(code) => code.into_vec(),
        None => {
            use std::io::IsTerminal;
            if std::io::stdin().is_terminal() {
                eprintln!("tether: reading the cell's code from stdin (end with Ctrl-D)");
            }
            let mut buf = Vec::new();
            std::io::stdin()
                .read_to_end(&mut buf)
                .map_err(|e| Failure::other(format!("reading the code from stdin: {e}")))?;
            buf
        }
    };
    let _lock = lock_kernel(&ctx.store()?, &kernel, args.wait).await?;
    let mut driver = ctx.driver_with(|config| config.fallback = !args.no_fallback)?;
    driver.set_tools(args.tools.map(crate::tools::command_handler));
    let mut printer = Printer::new(ctx.json, ctx.verbose);
    let record = driver.store().load(&kernel)?;
    let lang = match (&record, args.lang) {
        (Some(record), Some(asked)) if record.lang != Lang::from(asked) => {
            return Err(Failure::usage(format!(
                "kernel {kernel} is a {} kernel; pick another --kernel or `tether reset --kernel {kernel}`",
                record.lang
            )))
        }
        (Some(record), _) => record.lang,
        (None, asked) => asked.map(Lang::from).unwrap_or(Lang::Shell),
    };
    if let Some(record) = record {
        if !record.cells.is_empty() {
            let seqs: Vec<String> = record.cells.iter().map(|c| c.seq.to_string()).collect();
            // No other tether holds the lock: the client that ran it died.
            return Err(Failure::busy(format!(
                "kernel {kernel} is busy: cell {} of an earlier run was never resolved \
                 (its tether died); `tether resume --kernel {kernel}` to finish it \
                 or `tether cancel --kernel {kernel}`",
                seqs.join(", ")
            )));
        }
        driver
            .resume(record, false, &mut |e| printer.event(e))
            .await?;
    }
    let cancel = driver.cancel_handle();
    let mut interrupts = interrupts()?;
    let ctrl_c = tokio::spawn(async move {
        // First Ctrl-C: cancel the cell. Second: leave now; the record
        // is saved, `tether resume` finds the cell.
        if interrupts.recv().await.is_some() {
            cancel.cancel_current();
            if interrupts.recv().await.is_some() {
                eprintln!("tether: interrupted again; the cell may still run: `tether resume`");
                std::process::exit(exit::CANCELLED);
            }
        }
    });
    let result = driver
        .run_cell(&kernel, lang, Bytes(code), args.timeout, &mut |e| {
            printer.event(e)
        })
        .await;
    let outcome = match result {
        Ok((_, outcome)) => outcome,
        Err(e) => {
            ctrl_c.abort();
            return Err(e.into());
        }
    };
    driver.settle(&mut |e| printer.event(e)).await?;
    ctrl_c.abort();
    Ok(printer.finish(&outcome, &driver))
}

/// SIGINT, caught from now on. Registered here, before the cell is
/// submitted, not inside the task that waits for it: a task spawned but not
/// yet polled has no handler, and a Ctrl-C in that window would kill tether
/// outright instead of cancelling the cell.
fn interrupts() -> Result<tokio::signal::unix::Signal, Failure> {
    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .map_err(|e| Failure::other(format!("cannot catch Ctrl-C: {e}")))
}

async fn resume(ctx: &Context, args: ResumeArgs) -> Result<i32, Failure> {
    let kernel = kernel_name(&args.kernel)?;
    let _lock = lock_kernel(&ctx.store()?, &kernel, false).await?;
    let mut driver = ctx.cell_driver()?;
    driver.set_tools(args.tools.map(crate::tools::command_handler));
    let mut printer = Printer::new(ctx.json, ctx.verbose);
    let Some(record) = driver.store().load(&kernel)? else {
        printer.note(&format!("no record of kernel {kernel}: nothing to resume"));
        return Ok(exit::OK);
    };
    if record.cells.is_empty() {
        printer.note(&format!("kernel {kernel} has no unresolved cell"));
        return Ok(exit::OK);
    }
    let cancel = driver.cancel_handle();
    let mut interrupts = interrupts()?;
    let ctrl_c = tokio::spawn(async move {
        if interrupts.recv().await.is_some() {
            cancel.cancel_current();
        }
    });
    let outcomes = driver
        .resume(record, args.replay, &mut |e| printer.event(e))
        .await;
    ctrl_c.abort();
    let outcomes = outcomes?;
    driver.settle(&mut |e| printer.event(e)).await?;
    let last = outcomes
        .last()
        .map(|(_, o)| o.clone())
        .unwrap_or(CellOutcome::Ok);
    Ok(printer.finish(&last, &driver))
}

async fn cancel(ctx: &Context, args: KernelArg) -> Result<i32, Failure> {
    let kernel = kernel_name(&args.kernel)?;
    let store = ctx.store()?;
    let mut printer = Printer::new(ctx.json, ctx.verbose);
    printer.quiet_output = true;
    let _lock = match lock_kernel(&store, &kernel, false).await {
        Ok(lock) => lock,
        Err(busy) if busy.code == exit::BUSY => {
            // Another tether drives the cell: interrupt it as Ctrl-C would
            // (it cancels the cell, never the kernel), then wait for it.
            let Some(holder) = interrupt_holder(&store, &kernel)? else {
                return Err(busy);
            };
            printer.note(&format!(
                "kernel {kernel}: asked the tether running its cell (pid {}) to cancel it",
                holder.pid
            ));
            let lock = lock_kernel(&store, &kernel, true).await?;
            let unresolved = store.load(&kernel)?.is_some_and(|r| !r.cells.is_empty());
            if !unresolved {
                printer.note(&format!("kernel {kernel}: that tether has finished"));
                return Ok(exit::OK);
            }
            lock
        }
        Err(other) => return Err(other),
    };
    let mut driver = ctx.driver()?;
    let Some(record) = driver.store().load(&kernel)? else {
        printer.note(&format!("no record of kernel {kernel}: nothing to cancel"));
        return Ok(exit::OK);
    };
    if record.cells.is_empty() {
        printer.note(&format!("kernel {kernel} has no unresolved cell"));
        return Ok(exit::OK);
    }
    let handle = driver.cancel_handle();
    for cell in &record.cells {
        handle.cancel(CellKey {
            kernel: kernel.clone(),
            seq: cell.seq,
        });
    }
    let outcomes = driver
        .resume(record, false, &mut |e| printer.event(e))
        .await?;
    driver.settle(&mut |e| printer.event(e)).await?;
    let last = outcomes
        .last()
        .map(|(_, o)| o.clone())
        .unwrap_or(CellOutcome::Cancelled);
    Ok(printer.finish(&last, &driver))
}

/// Sends SIGINT to the tether that holds `kernel`'s lock, if its lock
/// file names a process that is still the one that wrote it.
fn interrupt_holder(
    store: &FileStore,
    kernel: &KernelName,
) -> Result<Option<crate::records::Holder>, Failure> {
    let Locking::Busy {
        holder: Some(holder),
    } = store.lock(kernel, false)?
    else {
        return Ok(None);
    };
    if !holder.is_running() {
        return Ok(None);
    }
    let pid = rustix::process::Pid::from_raw(holder.pid as i32)
        .ok_or_else(|| Failure::other(format!("bad pid {} in the lock file", holder.pid)))?;
    rustix::process::kill_process(pid, rustix::process::Signal::INT).map_err(|e| {
        Failure::other(format!(
            "cannot interrupt the tether running kernel {kernel}'s cell (pid {}): {e}",
            holder.pid
        ))
    })?;
    Ok(Some(holder))
}

fn status(ctx: &Context, args: KernelOpt) -> Result<i32, Failure> {
    let store = ctx.store()?;
    let kernels = match args.kernel {
        Some(raw) => vec![kernel_name(&raw)?],
        None => store.list()?,
    };
    let mut out = std::io::stdout().lock();
    for kernel in kernels {
        let record = store.load(&kernel)?;
        if ctx.json {
            let line = serde_json::json!({ "kernel": kernel, "record": record });
            let _ = writeln!(out, "{line}");
            continue;
        }
        match record {
            None => {
                let _ = writeln!(out, "{kernel}: no record");
            }
            Some(r) => {
                let _ = writeln!(out, "{}", describe(&r));
            }
        }
    }
    Ok(exit::OK)
}

/// `tether logs`: the kernel's background log, bytes exactly (with
/// `--json`, one line holding them).
async fn logs(ctx: &Context, args: KernelArg) -> Result<i32, Failure> {
    let kernel = kernel_name(&args.kernel)?;
    let driver = ctx.driver()?;
    let op = tether_core::protocol::Op::Logs {
        kernel: kernel.clone(),
    };
    let reply = driver.query(op, Duration::from_secs(30)).await?;
    let tether_core::protocol::Reply::Logs { data } = reply else {
        return Err(Failure::other(
            "the agent answered the logs op with another reply",
        ));
    };
    let mut out = std::io::stdout().lock();
    let written = if ctx.json {
        let line = serde_json::json!({ "kernel": kernel, "log": data });
        writeln!(out, "{line}")
    } else {
        out.write_all(&data.0).and_then(|()| out.flush())
    };
    written.map_err(|e| Failure::other(format!("writing the log: {e}")))?;
    Ok(exit::OK)
}

fn ls(ctx: &Context) -> Result<i32, Failure> {
    let store = ctx.store()?;
    let mut out = std::io::stdout().lock();
    for kernel in store.list()? {
        if ctx.json {
            let line = serde_json::json!({ "kernel": kernel });
            let _ = writeln!(out, "{line}");
        } else {
            let _ = writeln!(out, "{kernel}");
        }
    }
    Ok(exit::OK)
}

fn describe(r: &KernelRecord) -> String {
    let daemon = match &r.identity {
        Some(id) => format!("daemon pid {}", id.pid),
        None => "no daemon yet".to_owned(),
    };
    let cells = if r.cells.is_empty() {
        "no unresolved cell".to_owned()
    } else {
        let seqs: Vec<String> = r.cells.iter().map(|c| c.seq.to_string()).collect();
        format!("unresolved cell(s) {} (`tether resume`)", seqs.join(", "))
    };
    format!(
        "{}: {} kernel, {daemon}, next cell {}, {cells}",
        r.kernel, r.lang, r.next_seq
    )
}

async fn reset(ctx: &Context, args: KernelArg) -> Result<i32, Failure> {
    let kernel = kernel_name(&args.kernel)?;
    let _lock = lock_kernel(&ctx.store()?, &kernel, false).await?;
    let mut driver = ctx.driver()?;
    let mut printer = Printer::new(ctx.json, ctx.verbose);
    shut_down(&mut driver, &mut printer, &kernel).await?;
    printer.note(&format!("kernel {kernel} stopped and forgotten"));
    Ok(exit::OK)
}

async fn stop(ctx: &Context) -> Result<i32, Failure> {
    let mut driver = ctx.driver()?;
    let mut printer = Printer::new(ctx.json, ctx.verbose);
    let store = ctx.store()?;
    let kernels = driver.store().list()?;
    let mut busy = Vec::new();
    for kernel in &kernels {
        let _lock = match lock_kernel(&store, kernel, false).await {
            Ok(lock) => lock,
            Err(failure) if failure.code == exit::BUSY => {
                printer.note(&failure.message);
                busy.push(kernel.to_string());
                continue;
            }
            Err(failure) => return Err(failure),
        };
        shut_down(&mut driver, &mut printer, kernel).await?;
    }
    printer.note(&format!("{} kernel(s) stopped", kernels.len() - busy.len()));
    if busy.is_empty() {
        // Nothing left to keep the channel for (a busy kernel's tether
        // may still be using it).
        ctx.retire_mux();
        Ok(exit::OK)
    } else {
        Err(Failure::busy(format!(
            "not stopped, busy: {}",
            busy.join(" ")
        )))
    }
}

async fn shut_down(
    driver: &mut Driver,
    printer: &mut Printer,
    kernel: &KernelName,
) -> Result<(), Failure> {
    printer.quiet_output = true;
    if let Some(mut record) = driver.store().load(kernel)? {
        // Cells still recorded die with the kernel; don't wait for them.
        record.cells.clear();
        driver
            .resume(record, false, &mut |e| printer.event(e))
            .await?;
    }
    driver.shutdown(kernel, &mut |e| printer.event(e)).await?;
    driver.store().forget(kernel)?;
    Ok(())
}

/// Shows events: raw output bytes and notes on stderr, or JSON lines.
pub struct Printer {
    json: bool,
    verbose: bool,
    /// Don't print cell output (cancel, reset).
    pub quiet_output: bool,
}

impl Printer {
    /// A printer for human or JSON output.
    pub fn new(json: bool, verbose: bool) -> Printer {
        Printer {
            json,
            verbose,
            quiet_output: false,
        }
    }

    /// A message for the user (stderr, or a JSON `note` line).
    pub fn note(&mut self, text: &str) {
        if self.json {
            self.json_line(serde_json::json!({ "event": "note", "text": text }));
        } else {
            eprintln!("tether: {text}");
        }
    }

    fn json_line(&mut self, value: serde_json::Value) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{value}");
        let _ = out.flush();
    }

    /// Shows one event.
    pub fn event(&mut self, event: &Event) {
        if self.json {
            let value = crate::events::to_json(event);
            self.json_line(value);
            return;
        }
        match event {
            Event::Output { stream, data, .. } => {
                if self.quiet_output {
                    return;
                }
                // Exact bytes; a closed stdout is the reader's choice.
                let _ = match stream {
                    Stream::Stdout => {
                        let mut out = std::io::stdout().lock();
                        out.write_all(data.as_slice()).and_then(|()| out.flush())
                    }
                    Stream::Stderr => {
                        let mut err = std::io::stderr().lock();
                        err.write_all(data.as_slice()).and_then(|()| err.flush())
                    }
                };
            }
            Event::Note { .. } if !self.verbose => {}
            other => {
                if let Some(text) = crate::events::describe(other) {
                    eprintln!("tether: {text}");
                }
            }
        }
    }

    /// Reports the final outcome (in JSON with the exec calls made, by op
    /// kind); returns the exit code.
    pub fn finish(&mut self, outcome: &CellOutcome, driver: &Driver) -> i32 {
        let code = exit_code(outcome);
        if self.json {
            self.json_line(serde_json::json!({
                "event": "exit",
                "outcome": outcome,
                "exit_code": code,
                "execs": driver.stats().execs,
                "helpers_started": driver.helpers_started(),
            }));
        } else {
            match outcome {
                CellOutcome::Ok => {}
                CellOutcome::Exit { code } => eprintln!("tether: cell exited with status {code}"),
                CellOutcome::Unknown { reason } => eprintln!(
                    "tether: outcome unknown ({reason}); the cell is recorded: `tether resume` later"
                ),
                other => eprintln!("tether: cell {other}"),
            }
        }
        code
    }
}
