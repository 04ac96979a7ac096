//! Live exploration: random fault schedules, drawn by the runtime's
//! generator ([`FaultSchedule::draw`]) from the fault families a real
//! backend can make ([`sim_run::realisable`]), run against `local` or
//! `docker` and judged by the runtime's oracle — the simulation's
//! explorer, with real processes instead of turmoil.
//!
//! Run `i` of `--seeds N --seed S` uses seed `S + i` and, unless a
//! scenario is named, the scenario `(S + i) mod` the catalog's size, so
//! a seed alone names a run; every report carries the command that
//! replays it (the same seed, or the exact schedule).

use crate::sim_observe::Report;
use crate::sim_run::{self, Host};
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;
use tether_scenarios::faults::{FaultSchedule, FaultSpace};
use tether_scenarios::scenario::{self, Scenario};

/// What to explore.
#[derive(Clone, Debug)]
pub struct Options {
    /// `local` or `docker`.
    pub backend: String,
    /// The first seed.
    pub seed: u64,
    /// How many runs.
    pub seeds: u64,
    /// Only this scenario (else the seed picks one).
    pub scenario: Option<String>,
    /// Runs at once.
    pub jobs: usize,
    /// Run exactly this schedule (JSON) instead of drawing one.
    pub schedule: Option<FaultSchedule>,
}

/// One run's verdict.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The seed.
    pub seed: u64,
    /// The scenario.
    pub scenario: String,
    /// The schedule it ran under.
    pub schedule: FaultSchedule,
    /// The verdict (`None`: skipped, with `skipped` saying why).
    pub report: Option<Report>,
    /// Why it did not run.
    pub skipped: Option<String>,
}

impl Outcome {
    /// The command that runs this again.
    pub fn replay(&self, backend: &str) -> String {
        format!(
            "cargo run --release -p tether-live -- explore --backend {backend} --scenario {} \
             --seed {} --seeds 1 --schedule '{}'",
            self.scenario,
            self.seed,
            self.schedule.to_json()
        )
    }

    /// Broken invariants (none when skipped).
    pub fn violations(&self) -> &[String] {
        self.report.as_ref().map_or(&[], |r| &r.violations)
    }
}

/// The scenario run `seed` explores.
pub fn scenario_for(seed: u64, only: Option<&str>) -> Result<Scenario, String> {
    match only {
        Some(name) => scenario::by_name(name).ok_or_else(|| format!("no scenario {name:?}")),
        None => {
            let all = scenario::all();
            let len = u64::try_from(all.len()).unwrap_or(1).max(1);
            let i = usize::try_from(seed % len).unwrap_or(0);
            all.into_iter()
                .nth(i)
                .ok_or_else(|| "the scenario catalog is empty".into())
        }
    }
}

/// The schedule of `seed` on `backend`: the scenario's fixed faults and
/// faults drawn from every family the backend can make real, in the
/// scenario's window and number.
pub fn schedule_for(scenario: &Scenario, seed: u64, backend: &str) -> FaultSchedule {
    let space = FaultSpace {
        families: sim_run::realisable(backend),
        ..scenario.space.clone()
    };
    let mut all = scenario.fixed.0.clone();
    all.extend(FaultSchedule::draw(seed, &space).0);
    all.sort();
    FaultSchedule(all)
}

/// How long one run may take before it counts as hung.
pub const RUN_LIMIT: Duration = Duration::from_secs(180);

/// Runs one seed.
pub async fn run_one(opts: &Options, seed: u64) -> Outcome {
    let scenario = match scenario_for(seed, opts.scenario.as_deref()) {
        Ok(s) => s,
        Err(e) => {
            return Outcome {
                seed,
                scenario: opts.scenario.clone().unwrap_or_default(),
                schedule: FaultSchedule::empty(),
                report: None,
                skipped: Some(e),
            }
        }
    };
    let schedule = opts
        .schedule
        .clone()
        .unwrap_or_else(|| schedule_for(&scenario, seed, &opts.backend));
    let mut outcome = Outcome {
        seed,
        scenario: scenario.name.into(),
        schedule: schedule.clone(),
        report: None,
        skipped: None,
    };
    if let Some(why) = sim_run::unrealisable_schedule(&scenario, &schedule, &opts.backend) {
        outcome.skipped = Some(why.why);
        return outcome;
    }
    let host = match opts.backend.as_str() {
        "local" => Host::local(),
        "docker" => match Host::docker(&format!("x{seed}"), scenario.init_reaps) {
            Ok(h) => h,
            Err(why) => {
                outcome.skipped = Some(why);
                return outcome;
            }
        },
        other => {
            outcome.skipped = Some(format!("no backend {other:?} (local or docker)"));
            return outcome;
        }
    };
    let run = sim_run::run_schedule(&scenario, &schedule, &host);
    outcome.report = Some(match tokio::time::timeout(RUN_LIMIT, run).await {
        Ok(report) => report,
        Err(_) => Report {
            scenario: scenario.name.into(),
            backend: opts.backend.clone(),
            cells: Vec::new(),
            injected: Vec::new(),
            deaths: String::new(),
            violations: vec![format!(
                "the run did not finish within {RUN_LIMIT:?}: a client call never resolved"
            )],
            took: RUN_LIMIT,
            channel_ops: None,
        },
    });
    outcome
}

/// Runs every seed of `opts`, `jobs` at a time, handing each outcome to
/// `done` as it comes; gives them all, in seed order.
pub async fn explore(opts: &Options, done: impl FnMut(&Outcome)) -> Vec<Outcome> {
    let done = RefCell::new(done);
    let next = Rc::new(std::cell::Cell::new(0u64));
    let results = RefCell::new(Vec::new());
    let worker = || async {
        loop {
            let i = next.get();
            if i >= opts.seeds {
                return;
            }
            next.set(i + 1);
            let outcome = run_one(opts, opts.seed.wrapping_add(i)).await;
            (done.borrow_mut())(&outcome);
            results.borrow_mut().push(outcome);
        }
    };
    let workers: Vec<_> = (0..opts.jobs.max(1)).map(|_| worker()).collect();
    join_all(workers).await;
    let mut all = results.into_inner();
    all.sort_by_key(|o| o.seed);
    all
}

/// Polls every future to its end on this task (they share `RefCell`s, so
/// no spawning).
async fn join_all<F: std::future::Future<Output = ()>>(futures: Vec<F>) {
    let mut pinned: Vec<_> = futures.into_iter().map(Box::pin).map(Some).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for slot in &mut pinned {
            if let Some(f) = slot {
                if f.as_mut().poll(cx).is_ready() {
                    *slot = None;
                } else {
                    pending = true;
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
}

/// One line for a run that held, the full report and the replay command
/// for one that did not.
pub fn describe(outcome: &Outcome, backend: &str) -> String {
    match (&outcome.report, &outcome.skipped) {
        (_, Some(why)) => format!(
            "seed {} {}: SKIPPED ({why})",
            outcome.seed, outcome.scenario
        ),
        (Some(r), None) if r.violations.is_empty() => format!(
            "seed {} {}: ok, {} fault(s), {:.1} s",
            outcome.seed,
            outcome.scenario,
            outcome.schedule.len(),
            r.took.as_secs_f64()
        ),
        (Some(r), None) => format!(
            "seed {} {}: {} VIOLATION(S) under {}\n{r}  replay: {}",
            outcome.seed,
            outcome.scenario,
            r.violations.len(),
            outcome.schedule.to_json(),
            outcome.replay(backend)
        ),
        (None, None) => format!("seed {} {}: no verdict", outcome.seed, outcome.scenario),
    }
}
