//! The explorer: runs scenarios over many seeds (in parallel, sharded),
//! shows progress on stderr, shrinks the schedules of failing seeds and
//! ends with a table per scenario.
//!
//! It is generic over the host's way of running one seed ([`RunSeed`]):
//! the turmoil world of `tether-sim` and the real processes of
//! `tether-live` drive the same loop, and the explorer itself is tested
//! without either.

use crate::faults::{shrink, FaultSchedule};
use crate::oracle::Violation;
use crate::scenario::Scenario;
use crate::swarm::World;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What one run gives.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RunReport {
    /// Broken invariants (empty: the run passed).
    pub violations: Vec<Violation>,
    /// The trace.
    pub trace: String,
    /// Virtual time the run covered, in ms.
    pub virtual_ms: u64,
    /// What happened on the channel, by what (`seeds`: 1 when the run's
    /// client used it; streams `opened`, `ops` carried, and each channel
    /// fault that hit one); empty for a run without it.
    pub channel: BTreeMap<String, u64>,
    /// Why the host could not run it (nothing was judged); `None` for a
    /// run that ran.
    pub skipped: Option<String>,
}

/// A host's way of running one seed.
pub trait RunSeed: Sync {
    /// The faults `seed` runs under in `world`: by default the scenario's
    /// own draw ([`Scenario::schedule_in`]); a host that cannot make
    /// every fault real draws from the ones it can.
    fn schedule(&self, scenario: &Scenario, seed: u64, world: &World) -> FaultSchedule {
        scenario.schedule_in(seed, world)
    }

    /// Runs `scenario` with `seed` under `schedule` and judges it.
    fn run(&self, scenario: &Scenario, seed: u64, schedule: &FaultSchedule) -> RunReport;
}

/// Which part of the seed space this process explores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    /// 1-based index.
    pub k: u64,
    /// Number of shards.
    pub n: u64,
}

impl Shard {
    /// Parses `K/N` (1 ≤ K ≤ N).
    pub fn parse(text: &str) -> Result<Shard, String> {
        let (k, n) = text
            .split_once('/')
            .ok_or_else(|| format!("shard {text:?}: expected K/N, e.g. 2/8"))?;
        let k: u64 = k
            .trim()
            .parse()
            .map_err(|_| format!("shard {text:?}: K is not a number"))?;
        let n: u64 = n
            .trim()
            .parse()
            .map_err(|_| format!("shard {text:?}: N is not a number"))?;
        if n == 0 || k == 0 || k > n {
            return Err(format!("shard {text:?}: need 1 <= K <= N"));
        }
        Ok(Shard { k, n })
    }

    /// Whether item `seed` (a seed, or a race file's index) is this shard's.
    pub fn owns(self, seed: u64) -> bool {
        seed % self.n == self.k - 1
    }
}

/// What to explore.
#[derive(Clone, Debug)]
pub struct Options {
    /// Seeds `first_seed .. first_seed + seeds` (before sharding).
    pub first_seed: u64,
    /// How many seeds per scenario.
    pub seeds: u64,
    /// Worker threads.
    pub jobs: usize,
    /// This process's shard.
    pub shard: Shard,
    /// Run each seed twice and compare traces.
    pub check_determinism: bool,
    /// Runs spent shrinking each failing seed.
    pub shrink_budget: usize,
    /// Failing seeds shrunk per scenario (the rest are only listed).
    pub shrink_first: usize,
    /// Print progress on stderr.
    pub progress: bool,
    /// Stop a scenario's exploration at its first failing seed.
    pub stop_at_first: bool,
    /// How a failure's replay command starts (up to the subcommand's flags).
    pub replay_prefix: String,
    /// Each seed runs one scenario, the seed modulo the number of
    /// scenarios (a seed alone names a run: for hosts whose runs are too
    /// slow to run every scenario on every seed), instead of every one.
    pub rotate: bool,
    /// One line per run on stderr instead of a progress bar (for hosts
    /// whose runs take seconds each), with the whole trace of a run that
    /// fails.
    pub per_run: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            first_seed: 0,
            seeds: 100,
            jobs: 2,
            shard: Shard { k: 1, n: 1 },
            check_determinism: false,
            shrink_budget: 60,
            shrink_first: 1,
            progress: false,
            stop_at_first: false,
            replay_prefix: "cargo run -p tether-sim -- replay".into(),
            rotate: false,
            per_run: false,
        }
    }
}

/// A failing seed.
#[derive(Clone, Debug, Serialize)]
pub struct Failure {
    /// The scenario.
    pub scenario: String,
    /// The seed.
    pub seed: u64,
    /// Its schedule.
    pub schedule: FaultSchedule,
    /// The smallest schedule found that still fails (if shrunk).
    pub shrunk: Option<FaultSchedule>,
    /// The world the seed drew (its replay runs in it again).
    pub world: World,
    /// What broke.
    pub violations: Vec<Violation>,
    /// How the replay command starts.
    #[serde(skip)]
    pub replay_prefix: String,
}

impl Failure {
    /// The one command that replays it.
    pub fn replay_command(&self) -> String {
        let schedule = self.shrunk.as_ref().unwrap_or(&self.schedule);
        format!(
            "{} --scenario {} --seed {} --schedule '{}'",
            self.replay_prefix,
            self.scenario,
            self.seed,
            schedule.to_json()
        )
    }

    /// A readable report.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "VIOLATION scenario={} seed={}", self.scenario, self.seed);
        for v in &self.violations {
            let _ = writeln!(s, "  - {v}");
        }
        let _ = writeln!(s, "  world    {}", self.world);
        let _ = writeln!(
            s,
            "  schedule ({} faults): {}",
            self.schedule.len(),
            self.schedule
        );
        if let Some(shrunk) = &self.shrunk {
            let _ = writeln!(s, "  shrunk   ({} faults): {}", shrunk.len(), shrunk);
        }
        let _ = writeln!(s, "  replay: {}", self.replay_command());
        s
    }
}

/// One scenario's row of the final table.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Row {
    /// The scenario.
    pub scenario: String,
    /// Seeds run.
    pub seeds: u64,
    /// Seeds that failed.
    pub failing_seeds: u64,
    /// Virtual time covered, ms.
    pub virtual_ms: u64,
    /// Wall time spent, ms (summed over workers).
    pub wall_ms: u64,
    /// Seeds the host could not run (counted in `seeds`).
    pub skipped: u64,
}

impl Row {
    /// Virtual seconds per wall second.
    pub fn speedup(&self) -> f64 {
        self.virtual_ms as f64 / (self.wall_ms.max(1) as f64)
    }
}

/// Everything an exploration found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Summary {
    /// One row per scenario.
    pub rows: Vec<Row>,
    /// Failing seeds, by scenario then seed.
    pub failures: Vec<Failure>,
    /// Wall time of the whole exploration, ms.
    pub wall_ms: u64,
    /// [`RunReport::channel`] summed over every run.
    pub channel: BTreeMap<String, u64>,
}

impl Summary {
    /// The final table.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{:<16} {:>6} {:>10} {:>11} {:>9} {:>12}",
            "scenario", "seeds", "violations", "virtual s", "wall s", "virtual/wall"
        );
        let mut total = Row {
            scenario: "total".into(),
            ..Row::default()
        };
        for r in &self.rows {
            let _ = writeln!(
                s,
                "{:<16} {:>6} {:>10} {:>11.1} {:>9.2} {:>11.0}x",
                r.scenario,
                r.seeds,
                r.failing_seeds,
                r.virtual_ms as f64 / 1000.0,
                r.wall_ms as f64 / 1000.0,
                r.speedup()
            );
            total.seeds += r.seeds;
            total.failing_seeds += r.failing_seeds;
            total.virtual_ms += r.virtual_ms;
            total.wall_ms += r.wall_ms;
        }
        let _ = writeln!(
            s,
            "{:<16} {:>6} {:>10} {:>11.1} {:>9.2} {:>11.0}x",
            "total",
            total.seeds,
            total.failing_seeds,
            total.virtual_ms as f64 / 1000.0,
            self.wall_ms as f64 / 1000.0,
            total.virtual_ms as f64 / (self.wall_ms.max(1) as f64)
        );
        let _ = writeln!(s, "{}", self.channel_line(total.seeds));
        let skipped: u64 = self.rows.iter().map(|r| r.skipped).sum();
        if skipped > 0 {
            let _ = writeln!(s, "{skipped} of {} runs skipped (not judged)", total.seeds);
        }
        s
    }

    /// How many of `seeds` runs used the channel, and what happened on it.
    pub fn channel_line(&self, seeds: u64) -> String {
        let on = self.channel.get("seeds").copied().unwrap_or(0);
        let rest: Vec<String> = self
            .channel
            .iter()
            .filter(|(k, _)| k.as_str() != "seeds")
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        format!(
            "channel: {on} of {seeds} runs on the channel; {}",
            if rest.is_empty() {
                "nothing happened on it".to_owned()
            } else {
                rest.join(", ")
            }
        )
    }
}

struct Job<'s> {
    scenario: &'s Scenario,
    seed: u64,
}

struct Done {
    /// The run's line for [`Options::per_run`].
    line: String,
    failed: Option<Failure>,
    skipped: bool,
    virtual_ms: u64,
    wall: Duration,
    channel: BTreeMap<String, u64>,
}

/// The scenarios an exploration runs: the whole catalog, or the one
/// `name`d.
pub fn pick(name: Option<&str>) -> Result<Vec<Scenario>, String> {
    match name {
        None => Ok(crate::scenario::all()),
        Some(n) => crate::scenario::by_name(n).map(|s| vec![s]).ok_or_else(|| {
            format!(
                "no scenario {n:?}; there are: {}",
                crate::race::scenario_names()
            )
        }),
    }
}

/// Explores `scenarios` on `host`.
pub fn explore(scenarios: &[Scenario], opts: &Options, host: &dyn RunSeed) -> Summary {
    let started = Instant::now();
    let seeds = || {
        (opts.first_seed..opts.first_seed.saturating_add(opts.seeds))
            .filter(|&seed| opts.shard.owns(seed))
    };
    let jobs: Vec<Job<'_>> = if opts.rotate {
        let len = u64::try_from(scenarios.len()).unwrap_or(u64::MAX);
        seeds()
            .filter_map(|seed| {
                let i = usize::try_from(seed.checked_rem(len)?).ok()?;
                Some(Job {
                    scenario: &scenarios[i],
                    seed,
                })
            })
            .collect()
    } else {
        scenarios
            .iter()
            .flat_map(|scenario| seeds().map(move |seed| Job { scenario, seed }))
            .collect()
    };
    let results: Mutex<Vec<Option<Done>>> = Mutex::new((0..jobs.len()).map(|_| None).collect());
    let next = AtomicUsize::new(0);
    let finished = AtomicUsize::new(0);
    let failing = AtomicUsize::new(0);
    let stopped: Mutex<Vec<&str>> = Mutex::new(Vec::new());
    let workers = opts.jobs.max(1).min(jobs.len().max(1));
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(job) = jobs.get(i) else { break };
                if opts.stop_at_first
                    && stopped
                        .lock()
                        .map(|s| s.contains(&job.scenario.name))
                        .unwrap_or(false)
                {
                    finished.fetch_add(1, Ordering::SeqCst);
                    continue;
                }
                let done = run_one(job, opts, host);
                if opts.per_run {
                    eprintln!("{}", done.line);
                }
                if done.failed.is_some() {
                    failing.fetch_add(1, Ordering::SeqCst);
                    if let Ok(mut s) = stopped.lock() {
                        s.push(job.scenario.name);
                    }
                }
                if let Ok(mut r) = results.lock() {
                    r[i] = Some(done);
                }
                let n = finished.fetch_add(1, Ordering::SeqCst) + 1;
                if opts.progress && !opts.per_run {
                    progress(n, jobs.len(), failing.load(Ordering::SeqCst), started);
                }
            });
        }
    });
    if opts.progress && !opts.per_run && std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        eprintln!();
    }
    let results = results.into_inner().unwrap_or_default();
    let mut summary = Summary::default();
    for scenario in scenarios {
        let mut row = Row {
            scenario: scenario.name.into(),
            ..Row::default()
        };
        let mut shrunk = 0;
        for (job, done) in jobs.iter().zip(&results) {
            let Some(done) = done else { continue };
            if job.scenario.name != scenario.name {
                continue;
            }
            row.seeds += 1;
            row.skipped += u64::from(done.skipped);
            row.virtual_ms += done.virtual_ms;
            for (k, v) in &done.channel {
                *summary.channel.entry(k.clone()).or_default() += v;
            }
            row.wall_ms += u64::try_from(done.wall.as_millis()).unwrap_or(u64::MAX);
            if let Some(failure) = &done.failed {
                row.failing_seeds += 1;
                let mut failure = failure.clone();
                if shrunk < opts.shrink_first {
                    shrunk += 1;
                    let small = shrink(&failure.schedule, opts.shrink_budget, |s| {
                        !run_guarded(host, scenario, failure.seed, s)
                            .violations
                            .is_empty()
                    });
                    failure.shrunk = Some(small);
                }
                summary.failures.push(failure);
            }
        }
        // Rotating, a scenario no seed fell on has nothing to show.
        if row.seeds > 0 || !opts.rotate {
            summary.rows.push(row);
        }
    }
    summary.wall_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    summary
}

/// `host.run`, with a panic of the run (the product's code or the
/// simulation's) turned into a violation: the exploration goes on, and the
/// seed is reported, shrunk and replayable like any other failing seed.
fn run_guarded(
    host: &dyn RunSeed,
    scenario: &Scenario,
    seed: u64,
    schedule: &FaultSchedule,
) -> RunReport {
    let run = std::panic::AssertUnwindSafe(|| host.run(scenario, seed, schedule));
    match std::panic::catch_unwind(run) {
        Ok(report) => report,
        Err(payload) => {
            let detail = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic with no message".to_owned());
            RunReport {
                violations: vec![Violation::Panicked { detail }],
                ..RunReport::default()
            }
        }
    }
}

fn run_one(job: &Job<'_>, opts: &Options, host: &dyn RunSeed) -> Done {
    let t = Instant::now();
    let world = job.scenario.world(job.seed);
    let schedule = host.schedule(job.scenario, job.seed, &world);
    let mut report = run_guarded(host, job.scenario, job.seed, &schedule);
    if opts.check_determinism {
        let again = run_guarded(host, job.scenario, job.seed, &schedule);
        if let Some(detail) = first_difference(&report.trace, &again.trace) {
            report.violations.push(Violation::Harness {
                detail: format!("same seed, different trace: {detail}"),
            });
        }
    }
    let verdict = match (&report.skipped, report.violations.len()) {
        (Some(why), _) => format!("SKIPPED ({why})"),
        (None, 0) => "ok".to_owned(),
        (None, n) => format!("{n} VIOLATION(S)"),
    };
    // A failing run's line carries its whole report (a live run is too
    // slow to replay just to read it).
    let line = format!(
        "seed {} {}: {verdict}, {} fault(s), {:.1} s{}",
        job.seed,
        job.scenario.name,
        schedule.len(),
        t.elapsed().as_secs_f64(),
        if report.violations.is_empty() || !opts.per_run {
            String::new()
        } else {
            format!("\n{}", report.trace)
        }
    );
    Done {
        line,
        skipped: report.skipped.is_some(),
        failed: (!report.violations.is_empty()).then(|| Failure {
            scenario: job.scenario.name.into(),
            seed: job.seed,
            schedule,
            world,
            shrunk: None,
            violations: report.violations,
            replay_prefix: opts.replay_prefix.clone(),
        }),
        virtual_ms: report.virtual_ms,
        wall: t.elapsed(),
        channel: report.channel,
    }
}

/// Where two traces first differ, if they do.
pub fn first_difference(a: &str, b: &str) -> Option<String> {
    if a == b {
        return None;
    }
    let (mut la, mut lb) = (a.lines(), b.lines());
    let mut line = 1;
    loop {
        match (la.next(), lb.next()) {
            (Some(x), Some(y)) if x == y => line += 1,
            (x, y) => {
                return Some(format!(
                    "line {line}: {:?} vs {:?}",
                    x.unwrap_or("<end>"),
                    y.unwrap_or("<end>")
                ))
            }
        }
    }
}

/// A progress bar on a terminal (redrawn every 10 runs); elsewhere (CI
/// logs) one line per tenth of the runs.
fn progress(done: usize, total: usize, failing: usize, started: Instant) {
    use std::io::IsTerminal;
    let tty = std::io::stderr().is_terminal();
    let step = (total / 10).max(1);
    let due = if tty {
        done.is_multiple_of(10) || done == total
    } else {
        done.is_multiple_of(step) || done == total
    };
    if !due {
        return;
    }
    let width = 30;
    let filled = done * width / total.max(1);
    let bar: String = "#".repeat(filled) + &"-".repeat(width - filled);
    let line = format!(
        "[{bar}] {done}/{total} runs, {failing} failing, {:.1}s",
        started.elapsed().as_secs_f64()
    );
    let mut err = std::io::stderr().lock();
    let _ = if tty {
        write!(err, "\r{line}")
    } else {
        writeln!(err, "{line}")
    };
    let _ = err.flush();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::FaultKind;
    use crate::scenario;

    /// A fake host: fails whenever the schedule kills the daemon, and
    /// cannot run the `timeout` scenario.
    struct Fake;

    impl RunSeed for Fake {
        fn run(&self, s: &Scenario, seed: u64, schedule: &FaultSchedule) -> RunReport {
            let bad = schedule.0.iter().any(|f| f.kind == FaultKind::KillDaemon);
            RunReport {
                violations: if bad {
                    vec![Violation::Harness {
                        detail: "killed".into(),
                    }]
                } else {
                    vec![]
                },
                trace: format!("seed {seed}\n"),
                virtual_ms: 1000,
                channel: BTreeMap::new(),
                skipped: (s.name == "timeout").then(|| "no timeouts here".into()),
            }
        }
    }

    #[test]
    fn a_rotating_exploration_runs_one_scenario_per_seed_and_counts_skips() {
        let scenarios = vec![
            scenario::by_name("happy").unwrap(),
            scenario::by_name("timeout").unwrap(),
        ];
        let opts = Options {
            first_seed: 10,
            seeds: 7,
            rotate: true,
            per_run: true,
            ..Options::default()
        };
        let summary = explore(&scenarios, &opts, &Fake);
        // Seeds 10, 12, 14, 16 are even: `happy`; 11, 13, 15: `timeout`.
        let counts: Vec<_> = summary
            .rows
            .iter()
            .map(|r| (r.scenario.as_str(), r.seeds, r.skipped))
            .collect();
        assert_eq!(counts, [("happy", 4, 0), ("timeout", 3, 3)]);
        assert!(summary.table().contains("3 of 7 runs skipped"));
    }

    #[test]
    fn explorer_finds_shrinks_and_tabulates() {
        let scenarios = vec![scenario::by_name("state").unwrap()];
        let opts = Options {
            seeds: 60,
            jobs: 2,
            check_determinism: true,
            ..Options::default()
        };
        let summary = explore(&scenarios, &opts, &Fake);
        assert_eq!(summary.rows[0].seeds, 60);
        assert!(summary.rows[0].failing_seeds > 0);
        let first = &summary.failures[0];
        let shrunk = first.shrunk.as_ref().unwrap();
        assert_eq!(shrunk.len(), 1);
        assert!(first.replay_command().contains("--seed"));
        assert!(summary.table().contains("state"));
    }

    /// Panics whenever the schedule kills the daemon (as a product bug
    /// that panics would).
    struct Panicky;

    impl RunSeed for Panicky {
        fn run(&self, s: &Scenario, seed: u64, schedule: &FaultSchedule) -> RunReport {
            let report = Fake.run(s, seed, schedule);
            assert!(report.violations.is_empty(), "index out of bounds");
            report
        }
    }

    #[test]
    fn a_run_that_panics_is_a_violation_and_the_exploration_goes_on() {
        let scenarios = vec![scenario::by_name("state").unwrap()];
        let opts = Options {
            seeds: 60,
            jobs: 2,
            ..Options::default()
        };
        let summary = explore(&scenarios, &opts, &Panicky);
        assert_eq!(summary.rows[0].seeds, 60, "every seed ran");
        assert!(summary.rows[0].failing_seeds > 0);
        let first = &summary.failures[0];
        assert_eq!(first.violations[0].kind(), "panicked");
        assert!(first.render().contains("index out of bounds"));
        assert_eq!(first.shrunk.as_ref().map(FaultSchedule::len), Some(1));
    }

    #[test]
    fn shards_split_the_seeds() {
        let scenarios = vec![scenario::by_name("happy").unwrap()];
        let total: u64 = (1..=3)
            .map(|k| {
                let opts = Options {
                    seeds: 10,
                    shard: Shard { k, n: 3 },
                    ..Options::default()
                };
                explore(&scenarios, &opts, &Fake).rows[0].seeds
            })
            .sum();
        assert_eq!(total, 10);
        assert!(Shard::parse("0/3").is_err());
        assert!(Shard::parse("x").is_err());
        assert_eq!(Shard::parse("2/3"), Ok(Shard { k: 2, n: 3 }));
    }

    #[test]
    fn traces_are_compared_line_by_line() {
        assert_eq!(first_difference("a\nb\n", "a\nb\n"), None);
        assert!(first_difference("a\nb\n", "a\nc\n")
            .unwrap()
            .starts_with("line 2"));
    }
}
