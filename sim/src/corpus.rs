//! The race corpus: every race file of `sim/races/` (the fixed races,
//! not `open/`), embedded in the binary at build time, replayed by
//! `tether-sim explore` before it draws new seeds — as a fuzzer replays
//! its corpus before it mutates. Each file is a schedule an exploration
//! or a reviewer once found breaking the product; replaying them all
//! costs about a second, and a change that breaks any of them again is
//! caught by the default exploration, not only by the test that replays
//! the directory.

use crate::explore::Shard;
use crate::race::Race;
use crate::scenario::Scenario;
use crate::world::{self, Variant};
use serde::Serialize;
use std::fmt::Write as _;
use std::time::Instant;

/// `(file name, its text)` of every race file, sorted by name.
const FILES: &[(&str, &str)] = include!(concat!(env!("OUT_DIR"), "/corpus_files.rs"));

/// Where the files live in the workspace (for the commands that replay one).
pub const DIR: &str = "sim/races";

/// One race of the corpus, read.
pub struct Entry {
    /// Its path in the workspace (`sim/races/NAME.json`).
    pub path: String,
    /// The race.
    pub race: Race,
}

/// Every race of the corpus. A file that does not read as a race is a
/// build of the workspace with a broken corpus: it panics, saying which
/// (the test `every_corpus_file_reads` keeps that from landing).
pub fn entries() -> Vec<Entry> {
    FILES
        .iter()
        .map(|(name, text)| {
            let path = format!("{DIR}/{name}");
            let mut race: Race = serde_json::from_str(text)
                .unwrap_or_else(|e| panic!("{path} is not a race file: {e}"));
            race.schedule.0.sort();
            Entry { path, race }
        })
        .collect()
}

/// Replays `race` on the product (or a broken `variant`), in the world it
/// was found in.
pub fn replay_race(race: &Race, s: &Scenario, variant: Variant) -> crate::explore::RunReport {
    world::run_in(s, race.seed, &race.world_for(s), &race.schedule, variant)
}

/// A race of the corpus that broke an invariant again.
#[derive(Clone, Debug, Serialize)]
pub struct Failure {
    /// The race file.
    pub file: String,
    /// Its scenario.
    pub scenario: String,
    /// Its seed.
    pub seed: u64,
    /// What broke.
    pub violations: Vec<String>,
}

impl Failure {
    /// A readable report, with the command that replays it.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "VIOLATION race file {} (scenario={} seed={})",
            self.file, self.scenario, self.seed
        );
        for v in &self.violations {
            let _ = writeln!(s, "  - {v}");
        }
        let _ = writeln!(s, "  replay: cargo run -p tether-sim -- race {}", self.file);
        s
    }
}

/// What replaying the corpus found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Summary {
    /// Races replayed.
    pub replayed: usize,
    /// Those whose scenario changed since they were saved (they may no
    /// longer reach their race).
    pub stale: Vec<String>,
    /// Races that broke an invariant.
    pub failures: Vec<Failure>,
    /// Wall time, ms.
    pub wall_ms: u64,
}

impl Summary {
    /// The line under the explorer's table.
    pub fn line(&self) -> String {
        let stale = if self.stale.is_empty() {
            String::new()
        } else {
            format!(
                "; {} saved for a scenario that changed since",
                self.stale.len()
            )
        };
        format!(
            "corpus: {} race files of {DIR}/ replayed, {} failing{stale} ({:.2} s)",
            self.replayed,
            self.failures.len(),
            self.wall_ms as f64 / 1000.0
        )
    }
}

/// The races of `scenarios` in this `shard` (file i belongs to shard
/// i % N + 1, so N shards replay the corpus once between them), each
/// with its scenario.
fn owned(scenarios: &[Scenario], shard: Shard) -> Vec<(Entry, &Scenario)> {
    (0u64..)
        .zip(entries())
        .filter(|(i, _)| shard.owns(*i))
        .filter_map(|(_, e)| {
            let s = scenarios.iter().find(|s| s.name == e.race.scenario)?;
            Some((e, s))
        })
        .collect()
}

/// Replays the races of `scenarios` in this `shard` ([`owned`]).
/// `stop_at_first`: stop at the first failing race.
pub fn replay(
    scenarios: &[Scenario],
    shard: Shard,
    variant: Variant,
    stop_at_first: bool,
) -> Summary {
    let started = Instant::now();
    let mut summary = Summary::default();
    for (entry, s) in owned(scenarios, shard) {
        if entry.race.stale(s) {
            summary.stale.push(entry.path.clone());
        }
        summary.replayed += 1;
        let report = replay_race(&entry.race, s, variant);
        if !report.violations.is_empty() {
            summary.failures.push(Failure {
                file: entry.path,
                scenario: s.name.into(),
                seed: entry.race.seed,
                violations: report.violations.iter().map(|v| v.to_string()).collect(),
            });
            if stop_at_first {
                break;
            }
        }
    }
    summary.wall_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    summary
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_corpus_file_reads_and_names_a_scenario() {
        let entries = entries();
        assert!(entries.len() > 50, "the corpus holds {}", entries.len());
        for e in entries {
            assert!(
                crate::scenario::by_name(&e.race.scenario).is_some(),
                "{}: no scenario {}",
                e.path,
                e.race.scenario
            );
        }
    }

    #[test]
    fn shards_split_the_corpus_once_between_them() {
        let all = crate::scenario::all();
        let names = |k, n| -> Vec<String> {
            owned(&all, Shard { k, n })
                .into_iter()
                .map(|(e, _)| e.path)
                .collect()
        };
        let whole = names(1, 1);
        assert_eq!(whole.len(), entries().len());
        let mut parts: Vec<String> = (1..=3).flat_map(|k| names(k, 3)).collect();
        parts.sort();
        assert_eq!(parts, whole);
    }

    #[test]
    fn only_the_races_of_the_scenarios_explored() {
        let one = crate::explore::pick(Some("reply_lost")).unwrap();
        let picked = owned(&one, Shard { k: 1, n: 1 });
        assert!(!picked.is_empty());
        assert!(picked.iter().all(|(e, _)| e.race.scenario == "reply_lost"));
    }
}
