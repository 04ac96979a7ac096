//! What a live run of a scenario saw, and the verdict.
//!
//! The client's side is the runtime's [`ClientLog`], inside
//! [`Log`]; the client's half of the observations and each cell's
//! observation are made by the runtime's [`observe`] functions. The
//! sandbox's side comes from the sandbox itself, through the backend's
//! own transport (never the faulty one): `ps` after every cell,
//! at the end of the script and after shutdown, and the side-effect files
//! (one line per run of a cell).
//!
//! A cell's processes are found by what they carry on their command line:
//! every long sleep of a scenario is renamed to a duration unique to this
//! run ([`Tagged`]), and a shell cell's main process and shim name the
//! cell's directory. A Python kernel's interpreter is the child of its
//! shim; a change of that child between two cells is a real death of the
//! interpreter.
//!
//! [`judge`] fills the oracle's [`Observations`] with what was
//! observed and runs [`oracle::check`], the scenario's own expectations,
//! and the checks only a live run can add (side-effect counts of cells
//! that ran, of a cell cancelled before it registered; a bystander's
//! leftovers still alive).

use crate::procs::{parse_ps, Proc, PS_ARGV};
use crate::sim_run::Ctx;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tether::transport::{ExecOutput, ExecRequest};
use tether_core::client::CellKey;
use tether_core::protocol::{CellOutcome, Lang};
use tether_scenarios::faults::{CancelPoint, FaultKind};
use tether_scenarios::observe::{self, CellSeen, ClientLog};
use tether_scenarios::oracle::{self, CellTruth, Observations, Violation};
use tether_scenarios::scenario::{CellSpec, Expect, Scenario};
use tether_scenarios::script::{kernel_of, GRACE};
use tether_scenarios::shell_model::Flavor;
use tether_scenarios::workload::{render_python, render_shell, Step, Workload};

/// A sleep at least this long outlives any run: it gets a unique tag.
const LONG_MS: u64 = 10_000;

/// A scripted cell rendered for a real kernel, its long sleeps renamed to
/// durations no other process on the machine has.
#[derive(Clone, Debug)]
pub struct Tagged {
    /// The cell as the scenario has it.
    pub spec: CellSpec,
    /// Its code: the full workload (side effect first), tagged, rendered.
    pub code: String,
    /// The `sleep` argument of each of its long sleeps.
    pub tags: Vec<String>,
    /// Those of them that are leftovers (background child, daemons,
    /// orphans): they outlive the cell's main process.
    pub leftover_tags: Vec<String>,
}

impl Tagged {
    /// Renders `spec` with side effects in `side_dir`.
    pub fn new(spec: CellSpec, side_dir: &str) -> Tagged {
        let mut tags = Vec::new();
        let mut leftover_tags = Vec::new();
        let steps = spec
            .full_workload()
            .steps
            .into_iter()
            .map(|s| tag(s, &mut tags, &mut leftover_tags))
            .collect();
        let workload = Workload { steps };
        let code = match spec.lang {
            Lang::Shell => render_shell(&workload, side_dir),
            Lang::Python => render_python(&workload, side_dir),
        };
        Tagged {
            spec,
            code,
            tags,
            leftover_tags,
        }
    }
}

/// A sleep duration (ms) no other run has: 9 000 000 s and up, the
/// process id and a counter in the digits, so every tag prints with the
/// same width and one tag is never part of another.
/// The shell of the live backends' shell cells: `local` here and the
/// `docker` image (Debian) both have bash.
const SHELL: Flavor = Flavor::Bash;

fn unique_ms() -> u64 {
    static N: AtomicU64 = AtomicU64::new(0);
    let pid = u64::from(std::process::id() % 10_000);
    9_000_000_000 + pid * 100_000 + N.fetch_add(1, Ordering::Relaxed) % 100_000
}

fn secs(ms: u64) -> String {
    format!("{}.{:03}", ms / 1000, ms % 1000)
}

fn tag(step: Step, tags: &mut Vec<String>, leftovers: &mut Vec<String>) -> Step {
    let mut renamed = |ms: u64, leftover: bool| {
        if ms < LONG_MS {
            return ms;
        }
        let new = unique_ms();
        tags.push(secs(new));
        if leftover {
            leftovers.push(secs(new));
        }
        new
    };
    match step {
        Step::Sleep { ms } => Step::Sleep {
            ms: renamed(ms, false),
        },
        Step::BackgroundChildHoldingStdout { sleep_ms } => Step::BackgroundChildHoldingStdout {
            sleep_ms: renamed(sleep_ms, true),
        },
        Step::SetsidDoubleForkDaemon { sleep_ms } => Step::SetsidDoubleForkDaemon {
            sleep_ms: renamed(sleep_ms, true),
        },
        Step::EnvIDaemon { sleep_ms } => Step::EnvIDaemon {
            sleep_ms: renamed(sleep_ms, true),
        },
        Step::EnvIGrandchild { sleep_ms } => Step::EnvIGrandchild {
            sleep_ms: renamed(sleep_ms, true),
        },
        Step::SetpgidOrphan { sleep_ms } => Step::SetpgidOrphan {
            sleep_ms: renamed(sleep_ms, true),
        },
        Step::SetpgidEnvIOrphan { sleep_ms } => Step::SetpgidEnvIOrphan {
            sleep_ms: renamed(sleep_ms, true),
        },
        Step::TrapTerm { then } => Step::TrapTerm {
            then: then.into_iter().map(|s| tag(s, tags, leftovers)).collect(),
        },
        other => other,
    }
}

/// What only a live run records of one cell, beside what the client saw
/// of it ([`CellSeen`]).
#[derive(Clone, Debug, Default)]
pub struct LiveCell {
    /// Its side-effect count right after it resolved.
    pub runs_at_resolution: Option<usize>,
    /// Its processes alive after it was cancelled or timed out, and at
    /// the end of the script.
    pub survivors: Vec<Proc>,
    /// Leftover tags of a bystander that were no longer alive at the end
    /// of the script.
    pub leftovers_gone: Vec<String>,
}

/// Everything the client saw (kept as the simulation keeps it), and the
/// sandbox events the run caused.
#[derive(Debug, Default)]
pub struct Log {
    /// What the client saw; failed observations go to its errors.
    pub client: ClientLog,
    /// What only a live run records, per cell label.
    pub live: BTreeMap<String, LiveCell>,
    /// Daemons the run killed (ms, pid).
    pub kernel_deaths: Vec<(u64, u32)>,
    /// The interpreter of each Python kernel at the last observation.
    pub interpreters: BTreeMap<String, Option<u32>>,
    /// Every interpreter seen.
    pub interpreter_pids: BTreeSet<u32>,
    /// When an interpreter was found dead (ms; the earliest it can have
    /// died: just after the observation before).
    pub interpreter_deaths: Vec<u64>,
    /// When the sandbox was last observed (ms).
    pub last_observed: u64,
    /// Runs of each cell counted on sandboxes that were replaced since
    /// (their side-effect files went with them).
    pub runs_on_replaced: BTreeMap<String, usize>,
    /// The command lines of the shims a `kill_shim` fault killed.
    pub killed_shims: Vec<String>,
    /// Processes (pid, command line) that only the kernel files a
    /// `wipe_kernel_dirs` removed tied to their kernel: the documented
    /// limit (client/README.md, "A kernel's directory removed from under
    /// it"), so no leak.
    pub named_only_by_wiped_files: BTreeSet<(u32, String)>,
}

/// Runs `argv` on the sandbox (observation transport); `None` (and a
/// harness error) when the transport fails.
pub(crate) async fn exec(ctx: &Ctx<'_>, argv: Vec<String>) -> Option<ExecOutput> {
    let what = argv.join(" ");
    let mut last = String::new();
    // A sandbox being restarted refuses execs for a moment.
    for _ in 0..10 {
        let req = ExecRequest::command(argv.clone());
        match tokio::time::timeout(Duration::from_secs(30), ctx.obs.exec(req)).await {
            Ok(Ok(out)) => return Some(out),
            Ok(Err(e)) => last = e.to_string(),
            Err(_) => last = "took over 30 s".into(),
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    ctx.log
        .borrow_mut()
        .client
        .errors
        .push(format!("observing {what}: {last}"));
    None
}

async fn ps(ctx: &Ctx<'_>) -> Option<Vec<Proc>> {
    let out = exec(ctx, PS_ARGV.iter().map(|s| s.to_string()).collect()).await?;
    Some(parse_ps(&String::from_utf8_lossy(&out.stdout)))
}

/// How often the cell `label` ran, on this sandbox and any it replaced.
async fn runs(ctx: &Ctx<'_>, label: &str) -> Option<usize> {
    let here = runs_here(ctx, label).await?;
    Some(here + runs_replaced(ctx, label))
}

/// How often the cell `label` ran on sandboxes replaced since.
fn runs_replaced(ctx: &Ctx<'_>, label: &str) -> usize {
    ctx.log
        .borrow()
        .runs_on_replaced
        .get(label)
        .copied()
        .unwrap_or(0)
}

async fn runs_here(ctx: &Ctx<'_>, label: &str) -> Option<usize> {
    Some(side_lines(ctx, label).await?.len())
}

/// The lines of the side-effect file of the cell `label` on this sandbox,
/// one per run (a Python cell's line is its interpreter's pid).
async fn side_lines(ctx: &Ctx<'_>, label: &str) -> Option<Vec<String>> {
    let path = format!("{}/{label}", ctx.side_dir());
    // A file that is not there is a cell that never ran; any other failure
    // (an exec killed by a container on its way down) is no observation,
    // not a count of 0 (shell_state seed 5022 on docker, during a bounce:
    // a later count then looked like a run after the resolution).
    let script = r#"if [ -e "$1" ]; then exec cat "$1"; fi"#;
    let argv = ["sh", "-c", script, "sh", &path].map(str::to_owned);
    let out = exec(ctx, argv.to_vec()).await?;
    (out.exit_code == 0).then(|| {
        String::from_utf8_lossy(&out.stdout)
            .split_terminator('\n')
            .map(str::to_owned)
            .collect()
    })
}

/// The sandbox died on its way to being replaced, its side-effect files
/// held `counts` (line counts by file name): they count for their cells
/// from now on. Recorded before the new machine starts, and read from the
/// dead one, so no observation ever counts a run twice (the old files and
/// the saved count) or misses one written after a live read.
pub(crate) fn replaced_with(ctx: &Ctx<'_>, counts: &BTreeMap<String, usize>) {
    let mut log = ctx.log.borrow_mut();
    for t in &ctx.cells {
        if let Some(&n) = counts.get(&t.spec.label) {
            *log.runs_on_replaced
                .entry(t.spec.label.clone())
                .or_default() += n;
        }
    }
}

/// Before the kernels' directories are removed from outside: the
/// processes outside every live daemon's and shim's tree (what an earlier
/// daemon or a killed shim left to PID 1), which only the files going now
/// name ([`Log::named_only_by_wiped_files`]). The simulation's sandbox
/// draws the same line (`wipe_kernel_dirs`), on every process: so does
/// this, as a Python interpreter carries no cell's tag and no root in its
/// command line (drawn seed 1010 live: kill_daemon, kill_shim, then the
/// removal; the orphaned interpreter was judged a leak). The leak check
/// still counts only the session's processes; a foreign one excused here
/// changes nothing.
pub(crate) async fn before_wipe(ctx: &Ctx<'_>) {
    let Some(table) = ps(ctx).await else { return };
    let kernels = format!("{}/kernels/", ctx.root);
    let owners: Vec<u32> = table
        .iter()
        .filter(|p| {
            !p.is_zombie()
                && (is_shim(ctx, p) || (p.args.contains(" serve ") && p.args.contains(&kernels)))
        })
        .map(|p| p.pid)
        .collect();
    let held = crate::procs::trees_of(&table, &owners);
    let unnamed: Vec<(u32, String)> = table
        .into_iter()
        .filter(|p| !p.is_zombie() && !held.contains(&p.pid))
        .map(|p| (p.pid, p.args))
        .collect();
    ctx.log
        .borrow_mut()
        .named_only_by_wiped_files
        .extend(unnamed);
}

/// Pids of this session's kernel daemons.
pub(crate) async fn daemons(ctx: &Ctx<'_>) -> Vec<u32> {
    let kernels = format!("{}/kernels/", ctx.root);
    ps(ctx)
        .await
        .unwrap_or_default()
        .into_iter()
        .filter(|p| !p.is_zombie() && p.args.contains(" serve ") && p.args.contains(&kernels))
        .map(|p| p.pid)
        .collect()
}

/// The kernels' shims alive now, by kind, and their Python interpreters,
/// from one look at the process table.
pub(crate) struct Shims {
    /// Every shim (cell shims and interpreter shims).
    pub(crate) all: Vec<u32>,
    /// The interpreter shims (a Python kernel's), with or without their
    /// interpreter yet.
    pub(crate) of_interpreters: Vec<u32>,
    /// The interpreters (`python3` children of an interpreter shim).
    pub(crate) interpreters: Vec<u32>,
    /// The command line of each shim of [`Shims::all`] (it names the cell
    /// or kernel it serves).
    pub(crate) cmdlines: Vec<String>,
}

/// See [`Shims`].
pub(crate) async fn shims(ctx: &Ctx<'_>) -> Shims {
    let table = ps(ctx).await.unwrap_or_default();
    let live: Vec<&Proc> = table
        .iter()
        .filter(|p| !p.is_zombie() && is_shim(ctx, p))
        .collect();
    let all: Vec<u32> = live.iter().map(|p| p.pid).collect();
    let of_interpreters = live
        .iter()
        .filter(|p| p.args.contains("\"lang\":\"python\""))
        .map(|p| p.pid)
        .collect();
    let interpreters = table
        .iter()
        .filter(|p| !p.is_zombie() && all.contains(&p.ppid) && runs_python3(&p.args))
        .map(|p| p.pid)
        .collect();
    Shims {
        all,
        of_interpreters,
        interpreters,
        cmdlines: live.iter().map(|p| p.args.clone()).collect(),
    }
}

/// Does the shim with command line `cmdline` serve cell `key` (its cell
/// shim, or, for a Python cell, its kernel's interpreter shim)?
fn serves(root: &str, cmdline: &str, key: &CellKey, python: bool) -> bool {
    let kernel = format!("{root}/kernels/{}/", key.kernel);
    let cell = format!("{kernel}cells/{}", key.seq.0);
    let names_cell = cmdline
        .match_indices(&cell)
        .any(|(at, _)| !cmdline[at + cell.len()..].starts_with(|c: char| c.is_ascii_digit()));
    names_cell || (python && cmdline.contains(&kernel) && cmdline.contains("\"lang\":\"python\""))
}

/// Is the command line `python3`'s, by whatever path it was found (a
/// pyenv machine runs `/root/.pyenv/versions/3.11.7/bin/python3`)?
fn runs_python3(args: &str) -> bool {
    args.split_whitespace()
        .next()
        .is_some_and(|program| program.rsplit('/').next() == Some("python3"))
}

fn is_shim(ctx: &Ctx<'_>, p: &Proc) -> bool {
    p.args.contains(" shim ") && p.args.contains(&format!("{}/kernels/", ctx.root))
}

/// A word of a command line without the shell punctuation around it.
fn words(args: &str) -> impl Iterator<Item = &str> {
    args.split_whitespace()
        .map(|w| w.trim_matches(|c: char| "'\"()&;<>".contains(c)))
}

/// Is `p` one of the processes of the cell with these tags, run as `key`?
fn of_cell(ctx: &Ctx<'_>, p: &Proc, tags: &[String], key: Option<&CellKey>) -> bool {
    if p.is_zombie() {
        return false;
    }
    if words(&p.args).any(|w| tags.iter().any(|t| t == w)) {
        return true;
    }
    let Some(key) = key else { return false };
    let dir = format!("{}/kernels/{}/cells/{}", ctx.root, key.kernel, key.seq.0);
    words(&p.args).any(|w| w == dir)
        || p.args.contains(&format!("{dir}/"))
        || p.args.contains(&format!("\"{dir}\""))
}

/// After a cell resolved (or a resume ended): its side-effect count, its
/// survivors if it was stopped, and the Python interpreters.
pub(crate) async fn after_cell(ctx: &Ctx<'_>) {
    let Some(procs) = ps(ctx).await else { return };
    let now = ctx.now_ms();
    let current = ctx.log.borrow().client.current.clone();
    let lines = match &current {
        Some(label) => side_lines(ctx, label).await,
        None => None,
    };
    let ran_on = current
        .as_deref()
        .zip(lines.as_deref())
        .and_then(|(label, lines)| ran_on(ctx, label, lines));
    observe_interpreters(ctx, &procs, now, ran_on.as_ref());
    let (Some(label), Some(lines)) = (current, lines) else {
        return;
    };
    let count = lines.len() + runs_replaced(ctx, &label);
    let tagged = ctx.cells.iter().find(|t| t.spec.label == label);
    let mut log = ctx.log.borrow_mut();
    let Some(seen) = log.client.cells.get(&label) else {
        return;
    };
    if seen.resolutions.is_empty() {
        return;
    }
    let key = seen.key.clone();
    let stopped = stopped(seen);
    let live = log.live.entry(label).or_default();
    live.runs_at_resolution.get_or_insert(count);
    if let (true, Some(tagged)) = (stopped, tagged) {
        // The cell's shim journals the end and then exits: right after the
        // resolution it may still be on its way out (the end-of-script
        // snapshot counts it).
        let left: Vec<Proc> = procs
            .into_iter()
            .filter(|p| of_cell(ctx, p, &tagged.tags, key.as_ref()) && !p.args.contains(" shim "))
            .collect();
        live.survivors.extend(left);
    }
}

/// The cell's last resolution stopped it (cancelled, timed out).
fn stopped(seen: &CellSeen) -> bool {
    matches!(
        seen.resolutions.last(),
        Some(CellOutcome::Cancelled | CellOutcome::TimedOut)
    )
}

/// The interpreters a Python cell ran on, by its side-effect lines.
struct RanOn {
    /// The cell's kernel.
    kernel: String,
    /// Each interpreter that ran it.
    pids: BTreeSet<u32>,
    /// When the cell's call began: every run of it came later.
    since: u64,
}

/// Which interpreters ran the Python cell `label` (`None` for a shell
/// cell, or one that never ran here).
fn ran_on(ctx: &Ctx<'_>, label: &str, lines: &[String]) -> Option<RanOn> {
    let spec = &ctx.cells.iter().find(|t| t.spec.label == label)?.spec;
    if spec.lang != Lang::Python {
        return None;
    }
    let pids: BTreeSet<u32> = lines.iter().filter_map(|l| l.parse().ok()).collect();
    let since = ctx.log.borrow().client.cells.get(label)?.started_at?;
    (!pids.is_empty()).then(|| RanOn {
        kernel: kernel_of(spec).as_str().to_owned(),
        pids,
        since,
    })
}

/// Finds the Python kernels' interpreters in `procs` and records a death
/// for each that is gone: the one the observation before saw (dead since
/// then at the earliest), and those that ran the cell just resolved
/// (`ran`; dead since the cell began at the earliest). The latter is how
/// an interpreter is known that lived only between two observations (a
/// kernel respawned after a loss, its interpreter then killed by a
/// cancel's escalation).
fn observe_interpreters(ctx: &Ctx<'_>, procs: &[Proc], now: u64, ran: Option<&RanOn>) {
    let mut log = ctx.log.borrow_mut();
    let kernels: BTreeSet<String> = ctx
        .scenario
        .cells()
        .filter(|c| c.lang == Lang::Python)
        .map(|c| kernel_of(c).as_str().to_owned())
        .collect();
    let since = log.last_observed;
    for k in kernels {
        let shim = format!("\"kernel_dir\":\"{}/kernels/{k}\"", ctx.root);
        let interp = procs
            .iter()
            .filter(|s| s.args.contains(" shim ") && s.args.contains(&shim))
            .find_map(|s| {
                procs
                    .iter()
                    .find(|p| p.ppid == s.pid && !p.is_zombie() && runs_python3(&p.args))
            })
            .map(|p| p.pid);
        let before = log.interpreters.insert(k.clone(), interp).flatten();
        if before.is_some() && before != interp {
            log.interpreter_deaths.push(since + 1);
        }
        log.interpreter_pids.extend(interp);
        if let Some(r) = ran.filter(|r| r.kernel == k) {
            for &pid in &r.pids {
                if Some(pid) != interp && Some(pid) != before {
                    log.interpreter_deaths.push(r.since);
                }
                log.interpreter_pids.insert(pid);
            }
        }
    }
    log.last_observed = now;
}

/// How long after a stopped cell resolved its processes may still be on
/// their way out, beyond the cancel's grace period: the agent resolves a
/// cancelled cell when its main process is gone and KILLs the rest after
/// the grace, and a loaded machine takes a moment more.
pub const CANCEL_SLACK: Duration = Duration::from_millis(1_000);

/// At the end of the script: what each cell left alive.
pub(crate) async fn snapshot(ctx: &Ctx<'_>) {
    let Some(procs) = ps(ctx).await else { return };
    record_snapshot(ctx, &procs);
    settle_survivors(ctx).await;
}

/// Survivors of stopped cells count only if they are still alive
/// [`GRACE`] + [`CANCEL_SLACK`] after their cell resolved.
async fn settle_survivors(ctx: &Ctx<'_>) {
    let deadline = {
        let log = ctx.log.borrow();
        log.live
            .iter()
            .filter(|(_, l)| !l.survivors.is_empty())
            .filter_map(|(label, _)| log.client.cells.get(label)?.resolved_at)
            .max()
    };
    let Some(resolved) = deadline else { return };
    let bound = u64::try_from((GRACE + CANCEL_SLACK).as_millis()).unwrap_or(u64::MAX);
    let deadline = resolved.saturating_add(bound);
    loop {
        let Some(procs) = ps(ctx).await else { return };
        let still = |s: &Proc| {
            procs
                .iter()
                .any(|p| p.pid == s.pid && p.args == s.args && !p.is_zombie())
        };
        let any = {
            let mut log = ctx.log.borrow_mut();
            for live in log.live.values_mut() {
                live.survivors.retain(still);
            }
            log.live.values().any(|l| !l.survivors.is_empty())
        };
        if !any || ctx.now_ms() >= deadline {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn record_snapshot(ctx: &Ctx<'_>, procs: &[Proc]) {
    let mut log = ctx.log.borrow_mut();
    for tagged in &ctx.cells {
        let Some(seen) = log.client.cells.get(&tagged.spec.label) else {
            continue;
        };
        let key = seen.key.clone();
        let stopped = stopped(seen);
        let live = log.live.entry(tagged.spec.label.clone()).or_default();
        if stopped {
            for p in procs
                .iter()
                .filter(|p| of_cell(ctx, p, &tagged.tags, key.as_ref()))
            {
                if !live.survivors.iter().any(|s| s.pid == p.pid) {
                    live.survivors.push(p.clone());
                }
            }
        }
        if tagged.spec.bystander {
            live.leftovers_gone = tagged
                .leftover_tags
                .iter()
                .filter(|t| {
                    !procs
                        .iter()
                        .any(|p| !p.is_zombie() && words(&p.args).any(|w| w == t.as_str()))
                })
                .cloned()
                .collect();
        }
    }
}

/// What processes and kernel files of the session are left (after the
/// final shutdown).
async fn leaks(ctx: &Ctx<'_>) -> (Vec<String>, Vec<String>) {
    let Some(procs) = ps(ctx).await else {
        return (Vec::new(), Vec::new());
    };
    let tags: Vec<String> = ctx.cells.iter().flat_map(|t| t.tags.clone()).collect();
    let interpreters = ctx.log.borrow().interpreter_pids.clone();
    let excused = ctx.log.borrow().named_only_by_wiped_files.clone();
    let procs = procs
        .into_iter()
        .filter(|p| {
            !p.is_zombie()
                && !excused.contains(&(p.pid, p.args.clone()))
                && (p.args.contains(&ctx.root)
                    || words(&p.args).any(|w| tags.iter().any(|t| t == w))
                    || (interpreters.contains(&p.pid) && p.args.contains("python3")))
        })
        .map(|p| format!("{} {}", p.pid, excerpt(&p.args)))
        .collect();
    let kernels = format!("{}/kernels", ctx.root);
    let files = match exec(ctx, vec!["ls".into(), "-A".into(), kernels.clone()]).await {
        Some(out) if out.exit_code == 0 => String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| format!("{kernels}/{l}"))
            .collect(),
        _ => Vec::new(),
    };
    (procs, files)
}

fn excerpt(s: &str) -> String {
    let mut out: String = s.chars().take(120).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    out
}

/// The verdict on one live run.
#[derive(Clone, Debug)]
pub struct Report {
    /// The scenario.
    pub scenario: String,
    /// The backend.
    pub backend: String,
    /// One line per cell: outcome, stdout, runs.
    pub cells: Vec<String>,
    /// The faults as they were made real, and what the script did.
    pub injected: Vec<String>,
    /// What the client reported and the sandbox showed of kernel deaths.
    pub deaths: String,
    /// Broken invariants and expectations.
    pub violations: Vec<Violation>,
    /// How long the run took.
    pub took: Duration,
    /// Ops the client's channel carried, when its ops went on one
    /// ([`crate::sim_run::Ops::Channel`]).
    pub channel_ops: Option<u64>,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "scenario {} on {} ({:.1} s): {} violation(s)",
            self.scenario,
            self.backend,
            self.took.as_secs_f64(),
            self.violations.len()
        )?;
        for c in &self.cells {
            writeln!(f, "  cell {c}")?;
        }
        for i in &self.injected {
            writeln!(f, "  log {i}")?;
        }
        writeln!(f, "  {}", self.deaths)?;
        for v in &self.violations {
            writeln!(f, "  VIOLATION {v}")?;
        }
        Ok(())
    }
}

fn completed(outcome: Option<&CellOutcome>) -> bool {
    matches!(outcome, Some(CellOutcome::Ok | CellOutcome::Exit { .. }))
}

/// After the script: observes what is left and judges the whole run.
pub(crate) async fn judge(ctx: &Ctx<'_>, backend: &str) -> Report {
    let mut left = leaks(ctx).await;
    // Processes killed by the shutdown may take a moment to be reaped.
    for _ in 0..20 {
        if left.0.is_empty() && left.1.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
        left = leaks(ctx).await;
    }
    let end = ctx.now_ms();
    let mut final_runs = BTreeMap::new();
    for t in &ctx.cells {
        if let Some(n) = runs(ctx, &t.spec.label).await {
            final_runs.insert(t.spec.label.clone(), n);
        }
    }
    let log = ctx.log.borrow();
    let scenario = ctx.scenario;
    let mut extra = Vec::new();
    let mut cells = Vec::new();
    let mut lines = Vec::new();
    let mut collateral = Vec::new();
    for spec in scenario.cells() {
        let seen = log
            .client
            .cells
            .get(&spec.label)
            .cloned()
            .unwrap_or_default();
        let live = log.live.get(&spec.label).cloned().unwrap_or_default();
        let at_resolution = live.runs_at_resolution.unwrap_or(0);
        let now_runs = final_runs.get(&spec.label).copied().unwrap_or(0);
        let executions = u32::try_from(at_resolution.max(now_runs)).unwrap_or(u32::MAX);
        let outcome = seen.resolutions.last().cloned();
        let stdout = seen.stdout();
        lines.push(format!(
            "{} ({}): {} stdout={:?} runs={executions}{}",
            spec.label,
            seen.key.as_ref().map_or("-".into(), ToString::to_string),
            outcome
                .as_ref()
                .map_or("unresolved".into(), ToString::to_string),
            String::from_utf8_lossy(&stdout),
            if live.survivors.is_empty() {
                String::new()
            } else {
                format!(" survivors={}", live.survivors.len())
            }
        ));
        // Checks only a live run adds.
        if (completed(outcome.as_ref()) || !stdout.is_empty()) && executions != 1 {
            extra.push(format!(
                "{} ran (resolved {}, stdout {:?}) but its side-effect file shows {executions} runs",
                spec.label,
                outcome.as_ref().map_or("never".into(), ToString::to_string),
                String::from_utf8_lossy(&stdout)
            ));
        }
        if seen.cancelled_early
            && outcome == Some(CellOutcome::Cancelled)
            && (executions != 0 || !stdout.is_empty())
        {
            extra.push(format!(
                "{} was cancelled before its submit registered, yet ran {executions} times \
                 (stdout {:?})",
                spec.label,
                String::from_utf8_lossy(&stdout)
            ));
        }
        if expects_no_run(scenario, spec) && executions != 0 {
            extra.push(format!("{} must never run, ran {executions}", spec.label));
        }
        // A restarted or replaced sandbox takes every process with it, and
        // so does a stopped kernel: a daemon that gets SIGTERM (live, every
        // daemon of the sandbox gets it, as `docker stop` sends it) ends
        // everything its kernel owns, leftovers included (core's
        // `agent::daemon` module doc, "Stop"); and so does a lingering
        // shim whose kernel's directory was removed (it ends its own
        // tree; the simulation's `ended_by_its_shim_after_a_wipe`).
        let leftovers_may_end = ctx.schedule.0.iter().any(|f| {
            matches!(
                f.kind,
                FaultKind::BounceSandbox
                    | FaultKind::ReplaceSandbox
                    | FaultKind::TermDaemon
                    | FaultKind::WipeKernelDirs
            )
        });
        // A cell the client was asked to cancel (a fault can cancel the
        // bystander while a new client resumes it) is no bystander, nor
        // one whose own shim a fault killed: its daemon ends it as a
        // cancel does (the simulation's `ended_for_its_killed_shim`).
        let own_shim_killed = seen.key.as_ref().is_some_and(|key| {
            log.killed_shims
                .iter()
                .any(|cmdline| serves(&ctx.root, cmdline, key, spec.lang == Lang::Python))
        });
        // Nor may a cell's leftovers outlive a kernel death under them:
        // live, `kill_daemon` kills every daemon of the sandbox, and what a
        // dead daemon's kernel left is ended by the next op or daemon that
        // finds it dead (a Python kernel's interpreter with what it holds:
        // the simulation's `ended_as_its_daemons_orphan`; python_bystander
        // seed 2006 live).
        let orphaned = log
            .kernel_deaths
            .iter()
            .any(|&(at, _)| seen.started_at.is_some_and(|started| started <= at));
        let spared = !leftovers_may_end && !orphaned && !seen.cancel_requested && !own_shim_killed;
        for t in live.leftovers_gone.iter().filter(|_| spared) {
            collateral.push(format!(
                "leftover `sleep {t}` of {} (a cell nobody cancelled) is gone",
                spec.label
            ));
        }
        if !live.survivors.is_empty() {
            let procs: Vec<String> = live
                .survivors
                .iter()
                .map(|p| format!("{} {}", p.pid, excerpt(&p.args)))
                .collect();
            lines.push(format!("  {} survivors: {}", spec.label, procs.join("; ")));
        }
        // Live, a run after the resolution shows as a side-effect count
        // that grew since; it is dated at the end (the sim knows when).
        let ran_after = live
            .runs_at_resolution
            .is_some_and(|n| u32::try_from(n).unwrap_or(u32::MAX) < executions);
        let truth = CellTruth {
            executions,
            stdout: observe::truth_stdout(scenario, spec, executions, SHELL),
            // Live, only the client's side of stderr is seen.
            stderr: None,
            ran_to_end: executions == 1,
            alive_at_end: live.survivors.iter().map(|p| p.pid).collect(),
            spawned_after_resolution: ran_after.then_some(end),
            // Live, exits are not dated; the CLI test
            // `cancel_settles` checks this on real processes.
            died_after_resolution: None,
            // Live, journals are not read: a cell failed as lost with its
            // kernel is not judged by what it left running.
            unfinished: false,
        };
        let mut cell = observe::cell(scenario, &log.client, spec, truth, SHELL);
        let edge = edge_lines_delivered(spec, &cell);
        cell.truth.stdout.extend(edge);
        cells.push(cell);
    }
    let mut extra_executions = BTreeMap::new();
    for l in ["liveness", "liveness2"] {
        let n = final_runs.get(l).copied().unwrap_or(0);
        if n > 1 {
            extra_executions.insert(l.to_owned(), u32::try_from(n).unwrap_or(u32::MAX));
        }
    }
    let background = background(ctx, &log.client, &cells);
    let obs = Observations {
        background,
        cells,
        extra_executions,
        collateral,
        leaked_processes: left.0,
        leaked_files: left.1,
        leaked_cgroups: Vec::new(),
        interpreter_deaths: log.interpreter_deaths.clone(),
        ..observe::client_observations(&log.client, &log.kernel_deaths)
    };
    let mut violations = oracle::check(&obs);
    violations.extend(oracle::expectations(scenario, &ctx.schedule, &obs));
    violations.extend(
        extra
            .into_iter()
            .map(|detail| Violation::Expectation { detail }),
    );
    Report {
        scenario: scenario.name.into(),
        backend: backend.into(),
        cells: lines,
        injected: ctx.switch.injected(),
        deaths: format!(
            "daemons killed at {:?} ms, interpreters found dead at {:?} ms, state lost reported at {:?} ms",
            obs.kernel_deaths, obs.interpreter_deaths, obs.state_lost_reports
        ),
        violations,
        took: ctx.start.elapsed(),
        channel_ops: None,
    }
}

/// A background printer timed to the shim's drain bound (`drawn`'s edge
/// printers): its lines land on either side of it, the cell's output or
/// the kernel's background log, and live nothing says which (seeds 1109,
/// 1145, 1182, 1183 of `explore --backend local --seed 1000`).
fn at_the_drain_bound(step: &Step) -> bool {
    matches!(step, Step::LatePrint { after_ms, .. }
        if Duration::from_millis(*after_ms) <= tether_core::agent::shim::DEFAULT_DRAIN)
}

/// What the cell's printers at the drain bound print.
fn drain_bound_text(spec: &CellSpec) -> Vec<u8> {
    spec.workload
        .steps
        .iter()
        .filter(|s| at_the_drain_bound(s))
        .filter_map(|s| match s {
            Step::LatePrint { tag, lines, .. } => {
                Some(tether_scenarios::workload::late_text(tag, *lines).into_bytes())
            }
            _ => None,
        })
        .flatten()
        .collect()
}

/// The whole lines of the cell's printers at the drain bound the client
/// delivered after what its code printed: the cell wrote them (those it
/// did not deliver are its kernel's background log's).
fn edge_lines_delivered(spec: &CellSpec, cell: &oracle::CellObs) -> Vec<u8> {
    let edge = drain_bound_text(spec);
    match cell
        .client_stdout
        .strip_prefix(cell.truth.stdout.as_slice())
    {
        Some(rest) if !rest.is_empty() && rest.ends_with(b"\n") && edge.starts_with(rest) => {
            rest.to_vec()
        }
        _ => Vec::new(),
    }
}

/// The background logs the script read, against what the late printers
/// of the cells that ran once print (live, nothing says when each
/// printed: the scenario spaces them so the order is sure). Any fault
/// made live may lose some (not judged then); so may a cell that ran
/// but did not complete as far as the client knows (`unknown` after a
/// lost reply: it may have run to its end, its printer with it).
fn background(
    ctx: &Ctx<'_>,
    client: &tether_scenarios::observe::ClientLog,
    cells: &[oracle::CellObs],
) -> Vec<oracle::BackgroundObs> {
    let faulted: Vec<String> = if ctx.schedule.0.is_empty() {
        Vec::new()
    } else {
        vec!["faults were made".into()]
    };
    tether_scenarios::script::background_kernels(ctx.scenario)
        .into_iter()
        .map(|k| {
            let mut written = Vec::new();
            let mut either = Vec::new();
            let mut writers = 0;
            let mut lossy = faulted.clone();
            for (spec, obs) in ctx.scenario.cells().zip(cells) {
                if kernel_of(spec) != k || obs.truth.executions != 1 {
                    continue;
                }
                if !completed(obs.outcome.as_ref()) {
                    lossy.push(format!(
                        "{} ran but did not complete as far as the client knows",
                        spec.label
                    ));
                }
                for step in &spec.workload.steps {
                    if let Step::LatePrint { tag, lines, .. } = step {
                        if !at_the_drain_bound(step) {
                            written.extend(
                                tether_scenarios::workload::late_text(tag, *lines).into_bytes(),
                            );
                        }
                        writers += 1;
                    }
                }
                either.extend(drain_bound_text(spec));
            }
            oracle::BackgroundObs {
                kernel: k.to_string(),
                log: client
                    .background
                    .get(k.as_str())
                    .cloned()
                    .unwrap_or_else(|| Err("never read".into())),
                written,
                later: Vec::new(),
                either,
                writers,
                lossy,
            }
        })
        .collect()
}

/// The scenario cancels `spec` before its submit registers (its fixed
/// faults hold that cancel, and `spec` is its first cell).
fn expects_no_run(scenario: &Scenario, spec: &CellSpec) -> bool {
    let early = scenario.fixed.0.iter().any(|f| {
        f.at_ms == 0
            && f.kind
                == FaultKind::Cancel {
                    point: CancelPoint::BeforeSubmitRegisters,
                }
    });
    early
        && spec.expect == Some(Expect::Cancelled)
        && scenario
            .cells()
            .next()
            .is_some_and(|c| c.label == spec.label)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_core::ids::{CellSeq, KernelName};

    #[test]
    fn a_shim_serves_its_own_cell_and_a_python_kernels_interpreter_shim_all_its_cells() {
        let key = |kernel: &str, seq| CellKey {
            kernel: KernelName::new(kernel).unwrap(),
            seq: CellSeq(seq),
        };
        let cell_shim = r#"/a/tether-agent shim --launch {"kernel_dir":"/r/kernels/other","cell_dir":"/r/kernels/other/cells/1","lang":"shell"}"#;
        assert!(serves("/r", cell_shim, &key("other", 1), false));
        assert!(!serves("/r", cell_shim, &key("other", 12), false));
        assert!(!serves("/r", cell_shim, &key("sim", 1), false));
        let interp = r#"/a/tether-agent shim --launch {"kernel_dir":"/r/kernels/py","cell_dir":"/r/kernels/py/py","lang":"python"}"#;
        assert!(serves("/r", interp, &key("py", 7), true));
        assert!(!serves("/r", interp, &key("py", 7), false));
        assert!(!serves("/r", interp, &key("sim", 7), true));
    }
}
