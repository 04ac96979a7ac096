//! Two truths of a Python kernel's interpreter, on ground truth: each
//! interpreter death is reported on one cell at most (the note that the
//! namespace is lost is not said again by the next cell), and an
//! interpreter whose daemon died never takes a cell the client submitted
//! after that death (the new daemon ends the old interpreter first; left
//! alive it would run the cell in the namespace the client was told is
//! lost).

use super::{CellObs, Observations, Violation};
use serde::Serialize;

/// A Python cell that an interpreter took after the daemon that started
/// it had died (ground truth).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct OrphanRunObs {
    /// The cell's key (`kernel#seq`).
    pub key: String,
    /// When the interpreter's daemon died (virtual ms).
    pub daemon_died_ms: u64,
    /// When the interpreter took the cell (virtual ms).
    pub at_ms: u64,
}

pub(super) fn check(obs: &Observations, v: &mut Vec<Violation>) {
    check_one_note_per_death(obs, v);
    check_orphan_runs(obs, v);
    check_notes_say_how(obs, v);
}

/// The start and end of the agent's note that the interpreter died
/// (`tether_core::agent::python::loss_note`).
const NOTE_START: &str = "tether: the Python interpreter ";
const NOTE_END: &str = "; the kernel's namespace is lost";

/// A note that the interpreter died says how: its exit status or signal,
/// which a death the sandbox saw had (a cell may carry two notes, one
/// delivered late: python_stuck seed 501143); or one of
/// the agent's fixed accounts (lost with its shim, died between cells).
fn check_notes_say_how(obs: &Observations, v: &mut Vec<Violation>) {
    use tether_core::agent::python::{LOST_BETWEEN_CELLS, SHIM_DIED};
    if obs.interpreter_ends.is_empty() {
        return; // a host that does not say how they ended
    }
    for cell in obs.cells.iter().filter(|c| c.python) {
        let stderr = String::from_utf8_lossy(&cell.client_stderr);
        for line in stderr.lines() {
            let Some(detail) = line
                .strip_prefix(NOTE_START)
                .and_then(|l| l.strip_suffix(NOTE_END))
            else {
                continue;
            };
            let how = detail
                .strip_prefix("was killed by signal ")
                .map(|n| format!("signal {n}"))
                .or_else(|| {
                    detail
                        .strip_prefix("exited with status ")
                        .map(|c| format!("status {c}"))
                });
            let true_to_the_world = match how {
                Some(how) => obs.interpreter_ends.iter().any(|(_, h)| *h == how),
                None => detail == SHIM_DIED || detail == LOST_BETWEEN_CELLS,
            };
            if !true_to_the_world {
                v.push(Violation::LossNoteUntrue {
                    cell: cell.label.clone(),
                    detail: format!(
                        "{detail:?} (interpreter ends seen: {:?})",
                        obs.interpreter_ends
                    ),
                });
            }
        }
    }
}

/// Each cell's loss note is matched with a distinct interpreter death
/// before it (the earliest unmatched one: notes in the order the client
/// delivered them). A note with no death before it at all is
/// `false_state_lost` (`check_namespace`); one whose deaths were all
/// reported already says one loss twice.
fn check_one_note_per_death(obs: &Observations, v: &mut Vec<Violation>) {
    let mut notes: Vec<(u64, &CellObs)> = obs
        .cells
        .iter()
        .filter_map(|c| Some((c.loss_reported_at?, c)))
        .collect();
    notes.sort_by_key(|(at, _)| *at);
    let mut deaths = obs.interpreter_deaths.clone();
    deaths.sort_unstable();
    let mut used = vec![false; deaths.len()];
    for (at, cell) in notes {
        let free = deaths
            .iter()
            .zip(used.iter_mut())
            .find(|(d, u)| **d <= at && !**u);
        match free {
            Some((_, u)) => *u = true,
            None if deaths.iter().any(|&d| d <= at) => v.push(Violation::LossReportedTwice {
                cell: cell.label.clone(),
                at_ms: at,
            }),
            None => {}
        }
    }
}

/// A cell the client started running after the interpreter's daemon died
/// was submitted to another daemon: the old interpreter must not take it.
fn check_orphan_runs(obs: &Observations, v: &mut Vec<Violation>) {
    for r in &obs.orphan_runs {
        // A key may be reused after a sandbox restart: the cell of that
        // key the client started last before the run.
        let cell = obs
            .cells
            .iter()
            .filter(|c| c.key.as_deref() == Some(r.key.as_str()) && c.started_ms <= r.at_ms)
            .max_by_key(|c| c.started_ms);
        if let Some(c) = cell.filter(|c| c.started_ms > r.daemon_died_ms) {
            v.push(Violation::OrphanInterpreterRan {
                cell: c.label.clone(),
                detail: format!(
                    "started by the client at {} ms, taken at {} ms by an interpreter whose daemon died at {} ms",
                    c.started_ms, r.at_ms, r.daemon_died_ms
                ),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{check, CellObs, Observations, Violation};
    use super::OrphanRunObs;
    use tether_core::protocol::CellOutcome;

    fn cell(label: &str, started_ms: u64, loss_reported_at: Option<u64>) -> CellObs {
        CellObs {
            label: label.into(),
            key: Some(format!("py#{}", label.len())),
            python: true,
            outcome: Some(CellOutcome::Ok),
            resolutions: 1,
            started_ms,
            ended_ms: Some(started_ms + 100),
            loss_reported_at,
            ..CellObs::default()
        }
    }

    fn run(cells: Vec<CellObs>, interpreter_deaths: Vec<u64>) -> Observations {
        Observations {
            cells,
            interpreter_deaths,
            finished: true,
            liveness: Some(CellOutcome::Ok),
            ..Observations::default()
        }
    }

    fn kinds(o: &Observations) -> Vec<&'static str> {
        check(o).iter().map(Violation::kind).collect()
    }

    #[test]
    fn a_death_note_says_how_the_interpreter_ended() {
        let noted = |detail: &str| {
            let mut c = cell("a", 0, Some(50));
            c.client_stderr = format!(
                "x\ntether: the Python interpreter {detail}; the kernel's namespace is lost\n"
            )
            .into_bytes();
            let mut o = run(vec![c], vec![40]);
            o.interpreter_ends = vec![(40, "signal 9".into())];
            check(&o)
                .iter()
                .filter(|v| v.kind() == "loss_note_untrue")
                .count()
        };
        assert_eq!(noted("was killed by signal 9"), 0);
        assert_eq!(noted(tether_core::agent::python::SHIM_DIED), 0);
        assert_eq!(noted("was killed by signal 15"), 1, "another signal");
        assert_eq!(noted("exited with status 0"), 1, "no such exit");
        assert_eq!(noted(""), 1, "says nothing");
        // A host that does not say how interpreters ended is not judged.
        let mut c = cell("a", 0, Some(50));
        c.client_stderr =
            b"tether: the Python interpreter ; the kernel's namespace is lost\n".to_vec();
        assert!(!kinds(&run(vec![c], vec![40])).contains(&"loss_note_untrue"));
    }

    #[test]
    fn one_death_reported_by_two_cells_fires() {
        let o = run(
            vec![cell("a", 0, Some(500)), cell("bb", 600, Some(700))],
            vec![400],
        );
        assert_eq!(kinds(&o), vec!["loss_reported_twice"]);
        assert!(check(&o)[0].to_string().contains("bb reported"));
    }

    #[test]
    fn two_deaths_each_reported_once_pass() {
        let o = run(
            vec![cell("a", 0, Some(500)), cell("bb", 600, Some(700))],
            vec![400, 650],
        );
        assert_eq!(check(&o), vec![]);
        // A death reported by nobody (the daemon's, say) excuses nothing
        // later, nor is it needed.
        let o = run(vec![cell("a", 0, Some(500))], vec![400, 450]);
        assert_eq!(check(&o), vec![]);
    }

    #[test]
    fn a_cell_submitted_after_the_daemon_died_taken_by_its_interpreter_fires() {
        let mut o = run(vec![cell("a", 0, None), cell("bb", 2_000, None)], vec![]);
        o.orphan_runs = vec![OrphanRunObs {
            key: "py#2".into(),
            daemon_died_ms: 1_500,
            at_ms: 2_050,
        }];
        assert_eq!(kinds(&o), vec!["orphan_interpreter_ran"]);
        // Started before the death: the old daemon may have handed it.
        o.orphan_runs[0].daemon_died_ms = 2_010;
        assert_eq!(check(&o), vec![]);
    }
}
