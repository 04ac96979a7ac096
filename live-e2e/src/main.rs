//! `tether-live`: live exploration from the command line (see
//! [`tether_live::explore`]).
//!
//! ```sh
//! scripts/build-agent
//! cargo run --release -p tether-live -- explore --backend local --seeds 200 --seed 1000 --jobs 2
//! cargo run --release -p tether-live -- explore --backend docker --seeds 50 --seed 5000
//! ```
//!
//! One line per run on stderr (the whole report of a run that breaks an
//! invariant), then the explorer's table and the replay command of each
//! failure. Exit status: 0 when no run broke an invariant, 1 otherwise, 2
//! on bad arguments.

use clap::{Parser, Subcommand};
use std::process::ExitCode;
use tether_live::explore::Live;
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
        /// Print the summary as JSON on stdout (instead of the table).
        #[arg(long)]
        json: bool,
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
        json,
    } = Cli::parse().command;
    let schedule = match schedule.map(|s| FaultSchedule::from_json(&s)).transpose() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("--schedule: {e}");
            return ExitCode::from(2);
        }
    };
    let live = Live { backend, schedule };
    eprintln!(
        "exploring {seeds} seed(s) from {seed} on {} ({jobs} at once)",
        live.backend
    );
    let summary = match live.explore(seed, seeds, scenario.as_deref(), jobs) {
        Ok(summary) => summary,
        Err(e) => {
            eprintln!("tether-live: {e}");
            return ExitCode::from(2);
        }
    };
    for f in &summary.failures {
        eprint!("{}", f.render());
    }
    if json {
        match serde_json::to_string_pretty(&summary) {
            Ok(text) => println!("{text}"),
            Err(e) => {
                eprintln!("tether-live: {e}");
                return ExitCode::from(2);
            }
        }
    } else {
        print!("{}", summary.table());
    }
    if summary.failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
