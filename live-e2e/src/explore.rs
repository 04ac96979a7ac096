//! Live exploration: the harness runtime's explorer
//! ([`tether_scenarios::explore`]) driving real processes instead of
//! turmoil. Fault schedules are drawn by the runtime's generator
//! ([`FaultSchedule::draw`]) from the fault families a real backend can
//! make ([`sim_run::realisable`]), run against `local` or `docker` and
//! judged by the runtime's oracle.
//!
//! Run `i` of `--seeds N --seed S` uses seed `S + i` and, unless a
//! scenario is named, the scenario `(S + i) mod` the catalog's size
//! ([`Options::rotate`]), so a seed alone names a run; every failure
//! carries the command that replays it (the same seed, or the exact
//! schedule).

use crate::sim_observe::Report;
use crate::sim_run::{self, Host};
use std::collections::BTreeMap;
use std::time::Duration;
use tether_scenarios::explore::{self, Options, RunReport, RunSeed, Summary};
use tether_scenarios::faults::{FaultSchedule, FaultSpace};
use tether_scenarios::oracle::Violation;
use tether_scenarios::scenario::Scenario;
use tether_scenarios::swarm::World;

/// The real-process host, as the explorer drives it.
#[derive(Clone, Debug)]
pub struct Live {
    /// `local` or `docker`.
    pub backend: String,
    /// Run exactly this schedule (JSON) instead of drawing one.
    pub schedule: Option<FaultSchedule>,
}

impl RunSeed for Live {
    fn schedule(&self, scenario: &Scenario, seed: u64, _: &World) -> FaultSchedule {
        self.schedule
            .clone()
            .unwrap_or_else(|| schedule_for(scenario, seed, &self.backend))
    }

    fn run(&self, scenario: &Scenario, seed: u64, schedule: &FaultSchedule) -> RunReport {
        // The explorer's workers are threads: each run gets a runtime of
        // its own (the live host's state is not `Send`).
        match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => {
                let scenario = scenario.for_seed(seed);
                let report = rt.block_on(self.run_async(&scenario, seed, schedule));
                // As the process's end would: reads of pipes that a
                // leftover process of the run still holds open are not
                // waited for.
                rt.shutdown_background();
                report
            }
            Err(e) => skipped(format!("tokio runtime: {e}")),
        }
    }
}

fn skipped(why: String) -> RunReport {
    RunReport {
        skipped: Some(why),
        ..RunReport::default()
    }
}

impl Live {
    /// The explorer's options for `seeds` runs from `first_seed`, `jobs`
    /// at a time: one line per run, one scenario per seed, never
    /// shrinking (a live run takes seconds).
    pub fn options(&self, first_seed: u64, seeds: u64, jobs: usize) -> Options {
        Options {
            first_seed,
            seeds,
            jobs,
            shrink_first: 0,
            progress: true,
            per_run: true,
            rotate: true,
            replay_prefix: format!(
                "cargo run --release -p tether-live -- explore --backend {} --seeds 1",
                self.backend
            ),
            ..Options::default()
        }
    }

    async fn run_async(
        &self,
        scenario: &Scenario,
        seed: u64,
        schedule: &FaultSchedule,
    ) -> RunReport {
        if let Some(why) = sim_run::unrealisable_schedule(scenario, schedule, &self.backend) {
            return skipped(why.why);
        }
        let host = match self.backend.as_str() {
            "local" => Host::local(),
            "docker" => match Host::docker(&format!("x{seed}"), scenario.init_reaps) {
                Ok(h) => h,
                Err(why) => return skipped(why),
            },
            other => return skipped(format!("no backend {other:?} (local or docker)")),
        };
        let run = sim_run::run_schedule(scenario, schedule, &host);
        let report = match tokio::time::timeout(RUN_LIMIT, run).await {
            Ok(report) => report,
            Err(_) => Report {
                scenario: scenario.name.into(),
                backend: self.backend.clone(),
                cells: Vec::new(),
                injected: Vec::new(),
                deaths: String::new(),
                violations: vec![Violation::Harness {
                    detail: format!(
                        "the run did not finish within {RUN_LIMIT:?}: a client call never resolved"
                    ),
                }],
                took: RUN_LIMIT,
                channel_ops: None,
            },
        };
        RunReport {
            violations: report.violations.clone(),
            trace: report.to_string(),
            virtual_ms: u64::try_from(report.took.as_millis()).unwrap_or(u64::MAX),
            channel: BTreeMap::new(),
            skipped: None,
        }
    }

    /// Explores `seeds` runs from `first_seed` (only `scenario`, if
    /// named), `jobs` at a time.
    pub fn explore(
        &self,
        first_seed: u64,
        seeds: u64,
        scenario: Option<&str>,
        jobs: usize,
    ) -> Result<Summary, String> {
        let scenarios = explore::pick(scenario)?;
        let opts = self.options(first_seed, seeds, jobs);
        Ok(explore::explore(&scenarios, &opts, self))
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
