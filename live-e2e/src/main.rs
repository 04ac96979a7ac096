//! `tether-live`: live exploration from the command line (see
//! [`tether_live::explore`]).
//!
//! ```sh
//! scripts/build-agent
//! cargo run --release -p tether-live -- explore --backend local --seeds 200 --seed 1000 --jobs 2
//! cargo run --release -p tether-live -- explore --backend docker --seeds 50 --seed 5000
//! ```
//!
//! Exit status: 0 when no run broke an invariant, 1 otherwise, 2 on bad
//! arguments.

use clap::{Parser, Subcommand};
use std::process::ExitCode;
use tether_live::explore::{self, Options};
use tether_scenarios::faults::FaultSchedule;

#[derive(Parser)]
#[command(
    name = "tether-live",
    about = "Runs the harness runtime's scenarios on real backends under random fault schedules"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Random fault schedules against a real backend, judged by the oracle.
    Explore {
        /// `local` or `docker`.
        #[arg(long, default_value = "local")]
        backend: String,
        /// How many runs.
        #[arg(long, default_value_t = 20)]
        seeds: u64,
        /// The first seed.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Only this scenario (else each seed picks one).
        #[arg(long)]
        scenario: Option<String>,
        /// Runs at once.
        #[arg(long, default_value_t = 1)]
        jobs: usize,
        /// Exactly this schedule (JSON, as a report prints it).
        #[arg(long)]
        schedule: Option<String>,
        /// Print every run's full report, not only those that fail.
        #[arg(long)]
        verbose: bool,
    },
}

fn main() -> ExitCode {
    let Command::Explore {
        backend,
        seeds,
        seed,
        scenario,
        jobs,
        schedule,
        verbose,
    } = Cli::parse().command;
    let schedule = match schedule.map(|s| FaultSchedule::from_json(&s)).transpose() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("--schedule: {e}");
            return ExitCode::from(2);
        }
    };
    let opts = Options {
        backend,
        seed,
        seeds,
        scenario,
        jobs,
        schedule,
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tokio runtime: {e}");
            return ExitCode::from(2);
        }
    };
    println!(
        "exploring {} seed(s) from {} on {} ({} at once)",
        opts.seeds, opts.seed, opts.backend, opts.jobs
    );
    let start = std::time::Instant::now();
    let outcomes = rt.block_on(explore::explore(&opts, |o| {
        println!("{}", explore::describe(o, &opts.backend));
        if let (true, Some(r)) = (verbose, &o.report) {
            if o.violations().is_empty() {
                println!("{r}");
            }
        }
    }));
    let ran = outcomes.iter().filter(|o| o.report.is_some()).count();
    let skipped = outcomes.len() - ran;
    let bad: Vec<_> = outcomes
        .iter()
        .filter(|o| !o.violations().is_empty())
        .collect();
    let faults: usize = outcomes
        .iter()
        .filter(|o| o.report.is_some())
        .map(|o| o.schedule.len())
        .sum();
    println!(
        "{ran} run(s) on {} ({faults} faults), {skipped} skipped, {} with violations, {:.0} s",
        opts.backend,
        bad.len(),
        start.elapsed().as_secs_f64()
    );
    for o in &bad {
        println!("  replay: {}", o.replay(&opts.backend));
    }
    if bad.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
