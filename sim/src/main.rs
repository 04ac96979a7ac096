//! `tether-sim`: explore fault schedules, replay one seed or a race file,
//! list scenarios.
//!
//! Exit codes (the same for every subcommand): [`OK`] every run kept every
//! invariant, [`VIOLATION`] an invariant broke, [`USAGE`] the command could
//! not run as asked. Machine output (`--json`) goes to stdout; progress and
//! diagnostics go to stderr.

use clap::{Parser, Subcommand};
use serde::Serialize;
use std::io::Write as _;
use std::process::ExitCode;
use tether_sim::corpus;
use tether_sim::explore::{self, Options, RunReport, Shard};
use tether_sim::faults::FaultSchedule;
use tether_sim::race::{self, race_files, Race};
use tether_sim::scenario::{self, Scenario};
use tether_sim::swarm::World;
use tether_sim::trace;
use tether_sim::world::{self, Variant, MAX_VIRTUAL};

/// Every run kept every invariant.
const OK: u8 = 0;
/// An invariant broke in some run.
const VIOLATION: u8 = 1;
/// The command could not run as asked; nothing was judged.
const USAGE: u8 = 2;

const EXIT_CODES: &str = "\
Exit codes:
  0  every run kept every invariant
  1  an invariant broke (explore, replay, race); the report on stderr
     (or the JSON on stdout) says which, with a command that replays it
  2  the command could not run as asked: an unknown scenario or variant,
     a bad --shard, an unreadable or malformed schedule or race file, an
     output file that cannot be written; nothing was run or judged";

const TOP_HELP: &str = "\
Examples (from the workspace: cargo run --release -p tether-sim -- …):
  tether-sim explore                               the race corpus, then every scenario x 300 seeds
  tether-sim explore --scenario reply_lost --seeds 1000
  tether-sim explore --shard 3/8 --seeds 10000     one of 8 CI shards
  tether-sim replay --scenario happy --seed 3      the trace of one run
  tether-sim race sim/races/reply-lost-after-submit.json
  tether-sim list

Exit codes:
  0  every run kept every invariant
  1  an invariant broke (explore, replay, race)
  2  the command could not run as asked (bad arguments or input file)

JSON (--json) goes to stdout, progress and reports to stderr.";

const EXPLORE_HELP: &str = "\
Examples:
  tether-sim explore                                   the race corpus, then every scenario x 300 seeds
  tether-sim explore --scenario cancel_early --seeds 1000
  tether-sim explore --shard 3/8 --seeds 10000         seeds with seed % 8 == 2
  tether-sim explore --check-determinism --seeds 20    each seed twice, traces compared
  tether-sim explore --max-faults 8                    denser fault schedules
  tether-sim explore --json --quiet > summary.json

Every exploration first replays the race corpus: the race files of
sim/races/ (built into the binary; `--no-corpus` skips them), the ones of
the scenarios explored and of this shard. About a second for all of them.

A failing seed is reported on stderr with its schedule, the shrunk schedule
(fewest and shortest faults that still fail) and the replay command; add
`--save-race FILE` to that command to keep it as a race file.

Progress: a bar on a terminal, one line per tenth of the runs elsewhere
(CI logs), none with --quiet; always on stderr.";

const REPLAY_HELP: &str = "\
Examples:
  tether-sim replay --scenario happy --seed 3
  tether-sim replay --scenario happy --seed 3 --json
  tether-sim replay --scenario reply_lost --seed 0 \\
      --schedule '[{\"at_ms\":0,\"kind\":\"reply_lost\",\"op\":\"submit\"}]'
  tether-sim replay --scenario reply_lost --seed 0 --schedule sched.json \\
      --save-race sim/races/open/my-race.json --about \"what it shows\"

The trace is identical on every replay of the same seed and schedule.";

const RACE_HELP: &str = "\
A race file is JSON: {\"about\": \"…\", \"scenario\": \"<name>\", \"seed\": N,
\"schedule\": [{\"at_ms\": …, \"kind\": \"…\", …}]} (\"about\" and \"seed\" may be
left out). `replay … --save-race FILE` writes one. Given a directory, it replays every
*.json in it (not below it: races/open/ holds the ones not fixed yet) and
prints one line each.

A race replays its scenario as the catalog has it now. `--save-race` also
writes \"script\", a fingerprint of the scenario's script; when the script
has changed since (a step more, a cell less moves every pid and time), the
replay may no longer reach the race, and `race` prints a WARNING for the
file (it still runs it; save it again from a replay that reaches the race).

Examples:
  tether-sim race sim/races/                      every known race, one line each
  tether-sim race sim/races/reply-lost-after-submit.json
  tether-sim race --json sim/races/cancel-lost-in-partition.json";

const LIST_HELP: &str = "\
Examples:
  tether-sim list
  tether-sim list --json     scenarios with their fault spaces, and the variants of this build

Exit codes:
  0  listed
  2  a flag it does not take";

#[derive(Parser)]
#[command(
    name = "tether-sim",
    version,
    about = "Deterministic simulation of tether under injected faults",
    long_about = "Deterministic simulation of tether under injected faults: the real \
                  client driver and agent logic in a turmoil world with a simulated \
                  sandbox OS, judged by an oracle. Every run is a function of its \
                  scenario, seed and fault schedule.",
    after_help = TOP_HELP
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run every scenario (or one) over many seeds and check the invariants.
    #[command(after_help = format!("{EXPLORE_HELP}\n\n{EXIT_CODES}"))]
    Explore {
        /// Only this scenario (see `list`).
        #[arg(long, value_name = "NAME")]
        scenario: Option<String>,
        /// Seeds per scenario (before sharding).
        #[arg(long, default_value_t = 300, value_name = "N",
              value_parser = clap::value_parser!(u64).range(1..))]
        seeds: u64,
        /// First seed (with --seeds 1: exactly this seed).
        #[arg(long, default_value_t = 0, value_name = "N")]
        seed: u64,
        /// Worker threads.
        #[arg(long, default_value_t = default_jobs(), value_name = "N")]
        jobs: usize,
        /// Explore only seeds with seed % N == K-1 (1 <= K <= N).
        #[arg(long, default_value = "1/1", value_name = "K/N")]
        shard: String,
        /// Run every seed twice and compare the traces byte for byte.
        #[arg(long)]
        check_determinism: bool,
        /// Print the summary as JSON on stdout (instead of the table).
        #[arg(long)]
        json: bool,
        /// No progress and no header on stderr (failures are still reported).
        #[arg(long, short)]
        quiet: bool,
        /// Explore a deliberately broken variant (builds with --features mutations only).
        #[arg(long, default_value = "real", value_name = "NAME")]
        variant: String,
        /// At most this many drawn faults per run (default 8; each seed draws how many, 0 to N, with the rest of its world).
        #[arg(long, value_name = "N")]
        max_faults: Option<usize>,
        /// Do not replay the race corpus (the race files of sim/races/,
        /// built in) before the seeds.
        #[arg(long)]
        no_corpus: bool,
    },
    /// Print the full trace of one run.
    #[command(after_help = format!("{REPLAY_HELP}\n\n{EXIT_CODES}"))]
    Replay {
        /// The scenario (see `list`).
        #[arg(long, value_name = "NAME")]
        scenario: String,
        /// The seed.
        #[arg(long, value_name = "N")]
        seed: u64,
        /// A fault schedule (inline JSON array, or a file holding one)
        /// instead of the seed's own.
        #[arg(long, value_name = "JSON|FILE")]
        schedule: Option<String>,
        /// The world to run in (JSON, as a failure report prints it)
        /// instead of the seed's own.
        #[arg(long, value_name = "JSON")]
        world: Option<String>,
        /// Replay a deliberately broken variant (builds with --features mutations only).
        #[arg(long, default_value = "real", value_name = "NAME")]
        variant: String,
        /// Print the run as one JSON document: trace entries, violations, schedule.
        #[arg(long)]
        json: bool,
        /// Also write the run's scenario, seed and schedule as a race file
        /// (refuses to overwrite one).
        #[arg(long, value_name = "FILE")]
        save_race: Option<String>,
        /// What the saved race shows (default: the violations it found).
        #[arg(long, value_name = "TEXT", requires = "save_race")]
        about: Option<String>,
    },
    /// Replay a race file (sim/races/*.json) on the real product.
    #[command(after_help = format!("{RACE_HELP}\n\n{EXIT_CODES}"))]
    Race {
        /// The race file, or a directory of them.
        file: String,
        /// Print the run as one JSON document, as `replay --json` does.
        #[arg(long)]
        json: bool,
    },
    /// List the scenarios.
    #[command(after_help = LIST_HELP)]
    List {
        /// Print them as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
}

fn default_jobs() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli.command) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("tether-sim: {e}");
            ExitCode::from(USAGE)
        }
    }
}

/// Writes to stdout. A reader that went away (`| head`) is not an error:
/// the exit code still reports the verdict.
fn emit(text: &str) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(format!("cannot write to stdout: {e}"))
        }
        _ => Ok(()),
    }
}

fn emit_json(value: &impl Serialize) -> Result<(), String> {
    let text = serde_json::to_string_pretty(value).map_err(|e| e.to_string())?;
    emit(&format!("{text}\n"))
}

/// Replays every race file of `dir`: one line each (or one JSON array),
/// exit 1 if any run breaks an invariant. Every file is checked before
/// any runs, so a malformed one is a usage error, not a half-done run.
fn race_dir(dir: &str, json: bool) -> Result<u8, String> {
    let files = race_files(std::path::Path::new(dir))?;
    if files.is_empty() {
        return Err(format!("{dir} holds no race files (*.json)"));
    }
    let mut races = Vec::new();
    for f in &files {
        races.push((
            f.display().to_string(),
            Race::load_checked(&f.display().to_string(), MAX_VIRTUAL)?,
        ));
    }
    let mut rows = Vec::new();
    let mut failed = 0;
    let mut stale = 0;
    for (path, (race, s)) in races {
        let report = corpus::replay_race(&race, &s, Variant::Real);
        if warn_if_stale(&path, &race, &s) {
            stale += 1;
        }
        if !report.violations.is_empty() {
            failed += 1;
        }
        if json {
            rows.push(serde_json::json!({
                "file": path,
                "scenario": s.name,
                "seed": race.seed,
                "violations": report.violations.iter().map(|v| v.to_string()).collect::<Vec<_>>(),
            }));
        } else {
            let verdict = if report.violations.is_empty() {
                "ok  "
            } else {
                "FAIL"
            };
            emit(&format!(
                "{verdict} {path} ({} seed {})\n",
                s.name, race.seed
            ))?;
            for v in &report.violations {
                emit(&format!("       {v}\n"))?;
            }
        }
    }
    if json {
        emit_json(&rows)?;
    }
    eprintln!(
        "tether-sim: {} race file(s), {failed} failing, {stale} saved for a scenario that changed since",
        files.len()
    );
    Ok(u8::from(failed > 0))
}

/// `list --json`.
#[derive(Serialize)]
struct Listing {
    scenarios: Vec<ScenarioInfo>,
    /// The `--variant`s this build runs.
    variants: Vec<&'static str>,
}

#[derive(Serialize)]
struct ScenarioInfo {
    name: &'static str,
    about: &'static str,
    /// Faults every run carries.
    fixed: FaultSchedule,
    /// Families the per-seed faults are drawn from.
    families: Vec<tether_sim::faults::Family>,
    /// At most this many drawn faults per run.
    max_faults: usize,
    /// Drawn faults start before this time.
    window_ms: u64,
}

/// `replay --json` and `race --json`.
#[derive(Serialize)]
struct RunJson<'a> {
    scenario: &'a str,
    seed: u64,
    variant: &'a str,
    schedule: &'a FaultSchedule,
    virtual_ms: u64,
    violations: &'a [tether_sim::oracle::Violation],
    trace: Vec<trace::Entry>,
}

/// Prints one run (trace then violations, or JSON); its exit code.
fn show_run(
    report: &RunReport,
    json: bool,
    scenario: &str,
    seed: u64,
    variant: Variant,
    schedule: &FaultSchedule,
) -> Result<u8, String> {
    if json {
        emit_json(&RunJson {
            scenario,
            seed,
            variant: variant.name(),
            schedule,
            virtual_ms: report.virtual_ms,
            violations: &report.violations,
            trace: trace::entries(&report.trace),
        })?;
    } else {
        let mut text = report.trace.clone();
        for v in &report.violations {
            text.push_str(&format!("VIOLATION {v}\n"));
        }
        emit(&text)?;
    }
    Ok(if report.violations.is_empty() {
        OK
    } else {
        VIOLATION
    })
}

fn run(command: Command) -> Result<u8, String> {
    match command {
        Command::List { json } => {
            if json {
                let scenarios = scenario::all()
                    .into_iter()
                    .map(|s| ScenarioInfo {
                        name: s.name,
                        about: s.about,
                        fixed: s.fixed,
                        families: s.space.families,
                        max_faults: s.space.max_faults,
                        window_ms: s.space.window_ms,
                    })
                    .collect();
                emit_json(&Listing {
                    scenarios,
                    variants: Variant::built(),
                })?;
            } else {
                let mut text = String::new();
                for s in scenario::all() {
                    text.push_str(&format!("{:<16} {}\n", s.name, s.about));
                }
                emit(&text)?;
            }
            Ok(OK)
        }
        Command::Explore {
            scenario,
            seeds,
            seed,
            jobs,
            shard,
            check_determinism,
            json,
            quiet,
            variant: variant_name,
            max_faults,
            no_corpus,
        } => {
            let mut scenarios = explore::pick(scenario.as_deref())?;
            if let Some(n) = max_faults {
                for s in &mut scenarios {
                    s.space.max_faults = n;
                }
            }
            let variant = Variant::parse(&variant_name)?;
            let opts = Options {
                first_seed: seed,
                seeds,
                jobs: jobs.max(1),
                shard: Shard::parse(&shard)?,
                check_determinism,
                progress: !quiet,
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
            if !quiet {
                eprintln!(
                    "exploring {} scenarios x {} seeds ({} jobs, shard {}/{}, variant {})",
                    scenarios.len(),
                    seeds,
                    opts.jobs,
                    opts.shard.k,
                    opts.shard.n,
                    variant.name()
                );
            }
            // The corpus first: a second, and a broken known race shows at once.
            let corpus = if no_corpus {
                None
            } else {
                if !quiet {
                    eprintln!("replaying the race corpus ({}/*.json)", corpus::DIR);
                }
                Some(corpus::replay(&scenarios, opts.shard, variant, false))
            };
            for f in corpus.iter().flat_map(|c| &c.failures) {
                eprint!("{}", f.render());
            }
            for path in corpus.iter().flat_map(|c| &c.stale) {
                warn_stale(path);
            }
            let summary = explore::explore(&scenarios, &opts, &world::Sim(variant));
            for f in &summary.failures {
                eprint!("{}", f.render());
            }
            let corpus_failed = corpus.as_ref().is_some_and(|c| !c.failures.is_empty());
            if json {
                let mut value = serde_json::to_value(&summary).map_err(|e| e.to_string())?;
                if let Some(obj) = value.as_object_mut() {
                    obj.insert(
                        "corpus".into(),
                        serde_json::to_value(&corpus).map_err(|e| e.to_string())?,
                    );
                }
                // Each failure carries the command that replays it.
                if let Some(failures) = value
                    .get_mut("failures")
                    .and_then(serde_json::Value::as_array_mut)
                {
                    for (v, f) in failures.iter_mut().zip(&summary.failures) {
                        if let Some(obj) = v.as_object_mut() {
                            obj.insert("replay".into(), f.replay_command().into());
                        }
                    }
                }
                emit_json(&value)?;
            } else {
                let mut table = summary.table();
                match &corpus {
                    Some(c) => table.push_str(&format!("{}\n", c.line())),
                    None => table.push_str("corpus: not replayed (--no-corpus)\n"),
                }
                emit(&table)?;
            }
            Ok(if summary.failures.is_empty() && !corpus_failed {
                OK
            } else {
                VIOLATION
            })
        }
        Command::Replay {
            scenario,
            seed,
            schedule,
            world: world_text,
            variant: variant_name,
            json,
            save_race: save_to,
            about,
        } => {
            let s = explore::pick(Some(&scenario))?.remove(0);
            let world = match world_text {
                Some(text) => serde_json::from_str::<World>(&text)
                    .map_err(|e| format!("--world {text:?} is not a world: {e}"))?,
                None => s.world(seed),
            };
            let schedule = match schedule {
                Some(text) => race::load_schedule(&text, MAX_VIRTUAL)?,
                None => s.schedule_in(seed, &world),
            };
            let variant = Variant::parse(&variant_name)?;
            let report = world::run_in(&s, seed, &world, &schedule, variant);
            if let Some(path) = &save_to {
                let about = about.unwrap_or_else(|| {
                    let found: Vec<String> =
                        report.violations.iter().map(|v| v.to_string()).collect();
                    if found.is_empty() {
                        String::new()
                    } else {
                        format!("found: {}", found.join("; "))
                    }
                });
                let race = Race {
                    about,
                    scenario: s.name.into(),
                    seed,
                    schedule: schedule.clone(),
                    world: Some(world.clone()),
                    script: Some(tether_scenarios::race::script_digest(&s.for_seed(seed))),
                };
                race.save(path)?;
                eprintln!(
                    "tether-sim: saved the race to {path}; replay it with: tether-sim race {path}"
                );
            }
            show_run(&report, json, s.name, seed, variant, &schedule)
        }
        Command::Race { file, json } if std::path::Path::new(&file).is_dir() => {
            race_dir(&file, json)
        }
        Command::Race { file, json } => {
            let (race, s) = Race::load_checked(&file, MAX_VIRTUAL)?;
            warn_if_stale(&file, &race, &s);
            let report = corpus::replay_race(&race, &s, Variant::Real);
            show_run(
                &report,
                json,
                s.name,
                race.seed,
                Variant::Real,
                &race.schedule,
            )
        }
    }
}

/// Warns on stderr when `race`'s scenario changed since it was saved
/// ([`Race::stale`]); true if so.
fn warn_if_stale(path: &str, race: &Race, s: &Scenario) -> bool {
    let stale = race.stale(s);
    if stale {
        warn_stale(path);
    }
    stale
}

/// The warning for a race file whose scenario changed since it was saved.
fn warn_stale(path: &str) {
    eprintln!(
        "tether-sim: WARNING {path}: its scenario changed since this race was saved; \
         its replay may no longer reach the race (save it again from a replay that does)"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_built_parses_by_its_name_and_an_unknown_one_says_what_there_is() {
        for name in Variant::built() {
            assert_eq!(Variant::parse(name).map(Variant::name), Ok(name));
        }
        let e = Variant::parse("nope").unwrap_err();
        assert!(e.contains("\"nope\"") && e.contains("real"), "{e}");
        if Variant::built().len() == 1 {
            assert!(e.contains("--features mutations"), "{e}");
        }
    }
}
