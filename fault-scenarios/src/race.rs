//! Race files: a reviewer's race (a scenario, a seed, a fault schedule
//! and the world it was found in) kept as JSON under `sim/races/`, read,
//! checked and written the same way by every host and command.

use crate::faults::{FaultKind, FaultSchedule};
use crate::scenario::{self, Scenario};
use crate::swarm::World;
use serde::{Deserialize, Serialize};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A reviewer's race: a scenario and a fault schedule, kept as a file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Race {
    /// What the race is about.
    #[serde(default)]
    pub about: String,
    /// The scenario.
    pub scenario: String,
    /// The seed (for the parts of the world the schedule does not fix).
    #[serde(default)]
    pub seed: u64,
    /// The faults.
    pub schedule: FaultSchedule,
    /// The world it ran in; a race file written before the swarm has
    /// none and runs in [`World::classic`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub world: Option<World>,
    /// The fingerprint of its scenario's script when it was saved
    /// ([`script_digest`]); absent in files older than it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script: Option<String>,
}

impl Race {
    /// Its scenario's script changed since it was saved: a race file
    /// replays the scenario as it is now, and a changed workload (a step
    /// more, a cell less) moves every pid and time, so the file may no
    /// longer reach its race and pass for nothing (python_cancel's files
    /// when a leftover was added to its first cell: one stopped reaching
    /// its race). Save it again from a replay that reaches the race.
    pub fn stale(&self, scenario: &Scenario) -> bool {
        self.script
            .as_ref()
            .is_some_and(|d| *d != script_digest(&scenario.for_seed(self.seed)))
    }

    /// The world to replay it in.
    pub fn world_for(&self, scenario: &Scenario) -> World {
        self.world
            .clone()
            .unwrap_or_else(|| World::classic(scenario))
    }

    /// Reads a race file, its schedule in time order (as
    /// [`FaultSchedule::from_json`] gives one).
    pub fn load(path: &str) -> Result<Race, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))?;
        let mut race: Race = serde_json::from_str(&text).map_err(|e| {
            format!(
                "{path} is not a race file: {e} (expected JSON {{\"scenario\": NAME, \"seed\": N, \
                 \"schedule\": [FAULT, …]}}; see `tether-sim race --help`)"
            )
        })?;
        race.schedule.0.sort();
        Ok(race)
    }

    /// [`Race::load`], with its scenario looked up and its schedule
    /// checked against a run of `run_length` ([`check_schedule`]).
    pub fn load_checked(path: &str, run_length: Duration) -> Result<(Race, Scenario), String> {
        let race = Race::load(path)?;
        let s = scenario::by_name(&race.scenario).ok_or_else(|| {
            format!(
                "{path} names scenario {:?}, which does not exist; there are: {}",
                race.scenario,
                scenario_names()
            )
        })?;
        check_schedule(&race.schedule, run_length).map_err(|e| format!("{path}: {e}"))?;
        Ok((race, s))
    }

    /// The file's text, in the layout of `sim/races/*.json`: one fault a
    /// line.
    pub fn text(&self) -> Result<String, String> {
        let faults = self
            .schedule
            .0
            .iter()
            .map(compact)
            .collect::<Result<Vec<_>, _>>()?;
        let schedule = if faults.is_empty() {
            "[]".to_owned()
        } else {
            format!("[\n    {}\n  ]", faults.join(",\n    "))
        };
        let world = match &self.world {
            Some(w) => format!(",\n  \"world\": {}", compact(w)?),
            None => String::new(),
        };
        let script = match &self.script {
            Some(d) => format!(",\n  \"script\": {}", compact(d)?),
            None => String::new(),
        };
        Ok(format!(
            "{{\n  \"about\": {},\n  \"scenario\": {},\n  \"seed\": {},\n  \"schedule\": {schedule}{world}{script}\n}}\n",
            compact(&self.about)?,
            compact(&self.scenario)?,
            self.seed,
        ))
    }

    /// Writes it to `path` (a new file: a race is never overwritten).
    pub fn save(&self, path: &str) -> Result<(), String> {
        let text = self.text()?;
        if let Some(dir) = Path::new(path).parent() {
            if !dir.as_os_str().is_empty() {
                std::fs::create_dir_all(dir).map_err(|e| {
                    format!("--save-race {path}: cannot create {}: {e}", dir.display())
                })?;
            }
        }
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::AlreadyExists => {
                    format!("--save-race {path}: the file exists; pick another name or remove it")
                }
                _ => format!("--save-race {path}: cannot create it: {e}"),
            })?;
        file.write_all(text.as_bytes())
            .map_err(|e| format!("--save-race {path}: cannot write it: {e}"))
    }
}

fn compact(value: &impl Serialize) -> Result<String, String> {
    serde_json::to_string(value).map_err(|e| e.to_string())
}

/// A fingerprint of `scenario`'s script (its cells, their workloads and
/// order) and of whether its PID 1 reaps: what a race file's replay
/// depends on besides its seed, world and schedule. FNV-1a over its
/// debug text: stable for a given build of the workspace.
pub fn script_digest(scenario: &Scenario) -> String {
    let text = format!("{:?} {}", scenario.script, scenario.init_reaps);
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// The catalog's scenario names, for error messages.
pub fn scenario_names() -> String {
    let names: Vec<_> = scenario::all().iter().map(|s| s.name).collect();
    names.join(", ")
}

/// The race files (`*.json`) directly in `dir`, sorted by name (not
/// below it: `races/open/` holds the ones not fixed yet).
pub fn race_files(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    let mut files = Vec::new();
    for entry in entries {
        let path = entry
            .map_err(|e| format!("cannot read {}: {e}", dir.display()))?
            .path();
        if path.is_file() && path.extension().is_some_and(|x| x == "json") {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// A fault schedule given by hand: inline JSON, or a file holding one;
/// checked against a run of `run_length`.
pub fn load_schedule(text: &str, run_length: Duration) -> Result<FaultSchedule, String> {
    let json = if text.trim_start().starts_with('[') {
        text.to_owned()
    } else {
        std::fs::read_to_string(text).map_err(|e| format!("cannot read schedule {text}: {e}"))?
    };
    let schedule = FaultSchedule::from_json(&json).map_err(|e| {
        format!(
            "schedule {text:?} is not a fault schedule: {e} (expected a JSON array like \
             [{{\"at_ms\":0,\"kind\":\"reply_lost\",\"op\":\"submit\"}}])"
        )
    })?;
    check_schedule(&schedule, run_length).map_err(|e| format!("schedule {text:?}: {e}"))?;
    Ok(schedule)
}

/// Times and durations of a schedule must lie within one run (a run
/// ends after `run_length`); anything past it is a typo.
pub fn check_schedule(schedule: &FaultSchedule, run_length: Duration) -> Result<(), String> {
    let end = u64::try_from(run_length.as_millis()).unwrap_or(u64::MAX);
    for (i, f) in schedule.0.iter().enumerate() {
        let spans: &[(&str, u64)] = match f.kind {
            FaultKind::PartitionExec { for_ms } | FaultKind::HoldExec { for_ms } => {
                &[("for_ms", for_ms)]
            }
            FaultKind::ExecLatency { ms, for_ms } => &[("ms", ms), ("for_ms", for_ms)],
            FaultKind::SlowStart { ms, .. } => &[("ms", ms)],
            FaultKind::CrashClient { down_ms } => &[("down_ms", down_ms)],
            // A clock jump may be any length (a suspend of days); the
            // other kinds have no duration. New kinds: add their spans.
            _ => &[],
        };
        for (field, value) in std::iter::once(&("at_ms", f.at_ms)).chain(spans) {
            if *value > end {
                return Err(format!(
                    "fault {} ({f}): {field} {value} is past the end of a run \
                     (at most {end} ms)",
                    i + 1
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUN: Duration = Duration::from_secs(240);

    #[test]
    fn schedules_past_the_end_of_a_run_are_refused() {
        let bad = FaultSchedule::from_json(
            r#"[{"at_ms":0,"kind":"partition_exec","for_ms":18446744073709551615}]"#,
        )
        .unwrap();
        let e = check_schedule(&bad, RUN).unwrap_err();
        assert!(e.contains("for_ms") && e.contains("fault 1"), "{e}");
        let late = FaultSchedule::from_json(r#"[{"at_ms":240001,"kind":"kill_daemon"}]"#).unwrap();
        assert!(check_schedule(&late, RUN).unwrap_err().contains("at_ms"));
        let jump =
            FaultSchedule::from_json(r#"[{"at_ms":5,"kind":"clock_jump","ms":99999999}]"#).unwrap();
        assert_eq!(check_schedule(&jump, RUN), Ok(()));
    }

    #[test]
    fn a_saved_race_reads_back() {
        let race = Race {
            about: "a \"quoted\" race".into(),
            scenario: "reply_lost".into(),
            seed: 7,
            schedule: FaultSchedule::from_json(
                r#"[{"at_ms":0,"kind":"reply_lost","op":"submit"},{"at_ms":9,"kind":"kill_daemon"}]"#,
            )
            .unwrap(),
            world: Some(scenario::by_name("reply_lost").unwrap().world(7)),
            script: Some(script_digest(&scenario::by_name("reply_lost").unwrap())),
        };
        let text = race.text().unwrap();
        assert_eq!(serde_json::from_str::<Race>(&text).unwrap(), race);
        let empty = Race {
            schedule: FaultSchedule::empty(),
            ..race
        };
        assert_eq!(
            serde_json::from_str::<Race>(&empty.text().unwrap()).unwrap(),
            empty
        );
    }

    #[test]
    fn a_race_whose_scenario_changed_since_it_was_saved_is_stale() {
        let mut s = scenario::by_name("python_cancel").unwrap();
        let race = Race {
            about: String::new(),
            scenario: s.name.into(),
            seed: 0,
            schedule: FaultSchedule::empty(),
            world: None,
            script: Some(script_digest(&s)),
        };
        assert!(!race.stale(&s));
        s.script.truncate(1);
        assert!(race.stale(&s), "a cell less");
        let old = Race {
            script: None,
            ..race
        };
        assert!(!old.stale(&s), "a file older than the fingerprint");
    }
}
