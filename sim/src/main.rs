//! `tether-sim`: explore fault schedules, replay one seed, list scenarios.

use clap::{Parser, Subcommand};
use std::process::ExitCode;
use tether_sim::explore::{self, Options, Shard};
use tether_sim::faults::FaultSchedule;
use tether_sim::scenario::{self, Scenario};
use tether_sim::world::{self, Variant};

#[derive(Parser)]
#[command(
    name = "tether-sim",
    about = "deterministic simulation of tether under faults"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run every scenario (or one) over many seeds and check the invariants.
    Explore {
        /// Only this scenario.
        #[arg(long)]
        scenario: Option<String>,
        /// Seeds per scenario.
        #[arg(long, default_value_t = 100)]
        seeds: u64,
        /// First seed (with --seeds 1: exactly this seed).
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Worker threads.
        #[arg(long, default_value_t = default_jobs())]
        jobs: usize,
        /// Explore only seeds with seed % N == K-1.
        #[arg(long, default_value = "1/1")]
        shard: String,
        /// Run every seed twice and compare the traces byte for byte.
        #[arg(long)]
        check_determinism: bool,
        /// Print the summary as JSON on stdout.
        #[arg(long)]
        json: bool,
        /// Explore a deliberately broken variant (test builds only).
        #[arg(long, default_value = "real")]
        variant: String,
        /// At most this many drawn faults per run (default: each scenario's, 3).
        #[arg(long)]
        max_faults: Option<usize>,
    },
    /// Print the full trace of one run.
    Replay {
        /// The scenario.
        #[arg(long)]
        scenario: String,
        /// The seed.
        #[arg(long)]
        seed: u64,
        /// A fault schedule (inline JSON, or a file) instead of the seed's own.
        #[arg(long)]
        schedule: Option<String>,
        /// Replay a deliberately broken variant.
        #[arg(long, default_value = "real")]
        variant: String,
    },
    /// Replay a race file (sim/races/*.json).
    Race {
        /// The file.
        file: String,
    },
    /// List the scenarios.
    List,
}

fn default_jobs() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli.command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tether-sim: {e}");
            ExitCode::from(2)
        }
    }
}

fn pick(name: Option<&str>) -> Result<Vec<Scenario>, String> {
    match name {
        None => Ok(scenario::all()),
        Some(n) => scenario::by_name(n).map(|s| vec![s]).ok_or_else(|| {
            let names: Vec<_> = scenario::all().iter().map(|s| s.name).collect();
            format!("no scenario {n:?}; there are: {}", names.join(", "))
        }),
    }
}

fn load_schedule(text: &str) -> Result<FaultSchedule, String> {
    let json = if text.trim_start().starts_with('[') {
        text.to_owned()
    } else {
        std::fs::read_to_string(text).map_err(|e| format!("cannot read {text}: {e}"))?
    };
    FaultSchedule::from_json(&json).map_err(|e| format!("bad schedule {text:?}: {e}"))
}

fn run(command: Command) -> Result<ExitCode, String> {
    match command {
        Command::List => {
            for s in scenario::all() {
                println!("{:<16} {}", s.name, s.about);
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Explore {
            scenario,
            seeds,
            seed,
            jobs,
            shard,
            check_determinism,
            json,
            variant,
            max_faults,
        } => {
            let mut scenarios = pick(scenario.as_deref())?;
            if let Some(n) = max_faults {
                for s in &mut scenarios {
                    s.space.max_faults = n;
                }
            }
            let variant = Variant::parse(&variant)?;
            let opts = Options {
                first_seed: seed,
                seeds,
                jobs: jobs.max(1),
                shard: Shard::parse(&shard)?,
                check_determinism,
                progress: true,
                replay_prefix: if variant == Variant::Real {
                    "cargo run -p tether-sim -- replay".into()
                } else {
                    format!(
                        "cargo run -p tether-sim --features mutations -- replay --variant {}",
                        variant.name()
                    )
                },
                ..Options::default()
            };
            eprintln!(
                "exploring {} scenarios x {} seeds ({} jobs, shard {}/{}, variant {variant:?})",
                scenarios.len(),
                seeds,
                opts.jobs,
                opts.shard.k,
                opts.shard.n
            );
            let summary = explore::explore(&scenarios, &opts, &|s, seed, schedule| {
                world::run(s, seed, schedule, variant)
            });
            for f in &summary.failures {
                eprint!("{}", f.render());
            }
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&summary).map_err(|e| e.to_string())?
                );
            } else {
                print!("{}", summary.table());
            }
            Ok(if summary.failures.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Command::Replay {
            scenario,
            seed,
            schedule,
            variant,
        } => {
            let s = pick(Some(&scenario))?.remove(0);
            let schedule = match schedule {
                Some(text) => load_schedule(&text)?,
                None => s.schedule(seed),
            };
            let variant = Variant::parse(&variant)?;
            let report = world::run(&s, seed, &schedule, variant);
            print!("{}", report.trace);
            for v in &report.violations {
                println!("VIOLATION {v}");
            }
            Ok(if report.violations.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Command::Race { file } => {
            let race = world::Race::load(&file)?;
            let s = pick(Some(&race.scenario))?.remove(0);
            let report = world::run(&s, race.seed, &race.schedule, Variant::Real);
            print!("{}", report.trace);
            for v in &report.violations {
                println!("VIOLATION {v}");
            }
            Ok(if report.violations.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
    }
}
