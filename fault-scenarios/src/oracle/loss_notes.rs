//! A note that a shell cell's state was not kept is a claim about what
//! happened in the sandbox, judged on ground truth: the kernel dropped the
//! state a cell reached only for a cause the world shows. The agent's
//! notes (`tether_core::agent::shell`):
//!
//! - "the shell state cell N reached was not kept (…)", on a later cell
//!   of the kernel: justified when cell N's shell was killed by a signal,
//!   ended by itself without a save (`exec`, an EXIT trap of its own
//!   under dash), or its shim was killed before it journaled the cell's
//!   result (the state is promoted before the result); or when a daemon
//!   of the kernel died, the client evicted the kernel, or the disk was
//!   full (a write of the save refused) before the noting cell ended;
//! - "the shell state of this cell was not kept: …", on the cell itself
//!   (its promotion failed): justified by a full disk, or one of the
//!   causes above for that cell.
//!
//! An unjustified note is `loss_unjustified`: the agent threw away a
//! state nothing had lost (a shim judged killed that finished its cell,
//! a journal read as resultless that had its result), and the next cell
//! starts from an older state than the one the client saw reached.
//!
//! The converse, `state_note_missing`: a shell that ended by itself
//! without a save (its only cause) is named by the next cell of its
//! kernel that ran, unless something else may have taken the note's
//! place or its file (a daemon's death, an eviction, a full disk) or the
//! client did not see that cell to its end.

use super::{Observations, Violation};
use serde::Serialize;
use std::collections::BTreeMap;

/// Ground truth about what may cost a shell kernel its state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StateLossObs {
    /// The host records the causes (false: notes are not judged).
    pub judged: bool,
    /// Causes by cell key (`kernel#seq`): its shell killed by a signal or
    /// ended without a save, its shim killed before its result.
    pub causes: BTreeMap<String, Vec<String>>,
    /// When a daemon of a kernel died (killed, stopped, its sandbox
    /// restarted, an idle exit), by kernel name (virtual ms).
    pub daemon_deaths: Vec<(u64, String)>,
    /// Cells the client ran that no scenario lists (the liveness cell):
    /// their notes are judged too.
    pub unscripted: Vec<NoteCell>,
}

/// What a cell carried, for the judgment of its notes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct NoteCell {
    /// Its label.
    pub label: String,
    /// Its key (`kernel#seq`), once accepted.
    pub key: Option<String>,
    /// The stderr the client delivered.
    pub stderr: Vec<u8>,
    /// When its `run_cell` returned, if it did (virtual ms).
    pub ended_ms: Option<u64>,
}

/// The cause a host records for a shell that ended by itself without its
/// save (`exec`, an EXIT trap of its own under dash).
pub const ENDED_WITHOUT_SAVE: &str = "its shell ended without a save";

/// The start of the note a later cell carries; the cell's number follows.
const LATER_NOTE: &str = "tether: the shell state cell ";
/// What follows the number.
const LATER_NOTE_END: &str = " reached was not kept (";
/// The note of a cell whose own state could not be promoted.
const OWN_NOTE: &str = "tether: the shell state of this cell was not kept";

/// The cell numbers the "not kept" notes in `stderr` name (`None`: the
/// cell's own note).
pub(super) fn noted_cells(stderr: &[u8]) -> Vec<Option<u64>> {
    let text = String::from_utf8_lossy(stderr);
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with(OWN_NOTE) {
            out.push(None);
        } else if let Some(rest) = line.strip_prefix(LATER_NOTE) {
            if let Some((n, _)) = rest.split_once(LATER_NOTE_END) {
                if let Ok(n) = n.parse() {
                    out.push(Some(n));
                }
            }
        }
    }
    out
}

pub(super) fn check(obs: &Observations, v: &mut Vec<Violation>) {
    let truth = &obs.state_loss;
    if !truth.judged {
        return;
    }
    check_required(obs, v);
    let scripted = obs.cells.iter().filter(|c| !c.python).map(|c| NoteCell {
        label: c.label.clone(),
        key: c.key.clone(),
        stderr: c.client_stderr.clone(),
        ended_ms: c.ended_ms,
    });
    let cells: Vec<NoteCell> = scripted.chain(truth.unscripted.iter().cloned()).collect();
    for cell in &cells {
        let Some((kernel, own)) = cell.key.as_deref().and_then(|k| k.rsplit_once('#')) else {
            continue;
        };
        let end = cell.ended_ms.unwrap_or(u64::MAX);
        for noted in noted_cells(&cell.stderr) {
            let seq = match noted {
                Some(n) => n.to_string(),
                None => own.to_owned(),
            };
            let key = format!("{kernel}#{seq}");
            let cause = truth.causes.get(&key).is_some_and(|c| !c.is_empty());
            if !(cause || kernel_lost_state(obs, kernel, end)) {
                let whose = match noted {
                    Some(n) => format!("cell {n}'s"),
                    None => "its own".into(),
                };
                v.push(Violation::LossUnjustified {
                    cell: cell.label.clone(),
                    detail: format!(
                        "it says {whose} shell state (key {key}) was not kept, but that cell's shell saved, its shim was not killed before its result, no daemon of {kernel} died and the disk never filled"
                    ),
                });
            }
        }
    }
}

/// Could `kernel` have lost its shell state (and its note file) by `end`
/// for a reason beside one cell's shell: a daemon of it died, the client
/// evicted it, or the disk filled?
fn kernel_lost_state(obs: &Observations, kernel: &str, end: u64) -> bool {
    let died = obs
        .state_loss
        .daemon_deaths
        .iter()
        .any(|(at, k)| k == kernel && *at <= end);
    let evicted = obs
        .evictions
        .iter()
        .any(|(at, e)| e == kernel && *at <= end);
    died || evicted || obs.disk_filled
}

/// A shell that ended without a save, and nothing else about it, is named
/// by the next cell (the next number) of its kernel, when that cell ran
/// once and the client saw it to its end with nothing between that could
/// have cost the note.
fn check_required(obs: &Observations, v: &mut Vec<Violation>) {
    let truth = &obs.state_loss;
    for (key, causes) in &truth.causes {
        if causes.iter().any(|c| c != ENDED_WITHOUT_SAVE) {
            continue;
        }
        let Some((kernel, seq)) = key.rsplit_once('#') else {
            continue;
        };
        let Ok(seq) = seq.parse::<u64>() else {
            continue;
        };
        let next_key = format!("{kernel}#{}", seq + 1);
        let Some(next) = obs
            .cells
            .iter()
            .find(|c| !c.python && c.key.as_deref() == Some(next_key.as_str()))
        else {
            continue;
        };
        let seen_to_end = matches!(&next.outcome, Some(o) if !matches!(o, tether_core::protocol::CellOutcome::Unknown { .. }));
        if next.truth.executions != 1 || !seen_to_end {
            continue;
        }
        if kernel_lost_state(obs, kernel, next.ended_ms.unwrap_or(u64::MAX)) {
            continue;
        }
        if !noted_cells(&next.client_stderr).contains(&Some(seq)) {
            v.push(Violation::StateNoteMissing {
                cell: next.label.clone(),
                detail: format!(
                    "cell {seq} of {kernel} ended without saving its shell state, and {} (the next cell, {next_key}) did not say it was not kept",
                    next.label
                ),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{check, CellObs, Observations};
    use super::*;

    fn cell(label: &str, key: &str, stderr: &str) -> CellObs {
        CellObs {
            label: label.into(),
            key: Some(key.into()),
            client_stderr: stderr.as_bytes().to_vec(),
            ended_ms: Some(1_000),
            ..CellObs::default()
        }
    }

    fn run(causes: &[(&str, &str)]) -> Observations {
        let note = "tether: the shell state cell 1 reached was not kept (its shim was killed before the cell ended); this cell starts from the state before it\n";
        Observations {
            cells: vec![cell("a", "k#1", ""), cell("b", "k#2", note)],
            state_loss: StateLossObs {
                judged: true,
                causes: causes
                    .iter()
                    .map(|(k, c)| ((*k).to_owned(), vec![(*c).to_owned()]))
                    .collect(),
                daemon_deaths: Vec::new(),
                unscripted: Vec::new(),
            },
            finished: true,
            ..Observations::default()
        }
    }

    /// The kinds of this module's violations (a hand-made run breaks
    /// others: no liveness cell).
    fn kinds(o: &Observations) -> Vec<&'static str> {
        check(o)
            .iter()
            .map(Violation::kind)
            .filter(|k| *k == "loss_unjustified")
            .collect()
    }

    #[test]
    fn a_shell_that_ended_without_a_save_is_named_by_the_next_cell() {
        let required = |o: &Observations| -> Vec<&'static str> {
            check(o)
                .iter()
                .map(Violation::kind)
                .filter(|k| *k == "state_note_missing")
                .collect()
        };
        let ran = |c: &mut CellObs| {
            c.truth.executions = 1;
            c.outcome = Some(tether_core::protocol::CellOutcome::Ok);
        };
        let mut o = run(&[("k#1", ENDED_WITHOUT_SAVE)]);
        o.cells.iter_mut().for_each(ran);
        assert!(required(&o).is_empty(), "cell 2 names cell 1");
        o.cells[1].client_stderr.clear();
        assert_eq!(required(&o), vec!["state_note_missing"]);
        // Not where the note may have gone another way, or the next cell
        // was not seen to its end.
        let mut died = o.clone();
        died.state_loss.daemon_deaths.push((500, "k".into()));
        assert!(required(&died).is_empty());
        let mut full = o.clone();
        full.disk_filled = true;
        assert!(required(&full).is_empty());
        let mut unknown = o.clone();
        unknown.cells[1].outcome = Some(tether_core::protocol::CellOutcome::Unknown {
            reason: "gone".into(),
        });
        assert!(required(&unknown).is_empty());
        let mut never = o.clone();
        never.cells[1].truth.executions = 0;
        assert!(required(&never).is_empty());
        // A shell killed by a signal is not this check's.
        let mut killed = o.clone();
        killed.state_loss.causes.insert(
            "k#1".into(),
            vec!["its shell 7 was killed by KILL at 9 ms".into()],
        );
        assert!(required(&killed).is_empty());
    }

    #[test]
    fn notes_are_parsed_with_the_cell_they_name() {
        let s = b"x\ntether: the shell state cell 12 reached was not kept (its shell was killed by signal 9); this cell starts from the state before it\ntether: the shell state of this cell was not kept: disk full\n";
        assert_eq!(noted_cells(s), vec![Some(12), None]);
        assert!(noted_cells(b"tether: the shell state cell x reached").is_empty());
    }

    #[test]
    fn a_note_with_no_cause_in_the_world_is_unjustified() {
        // 830edee's bug: a shim that finished its cell (the client acked
        // it between the daemon's look and its journal read) taken for a
        // killed one: nothing happened to cell 1, yet cell 2 says its
        // state was not kept.
        assert_eq!(kinds(&run(&[])), vec!["loss_unjustified"]);
        // A cause of another cell does not count.
        assert_eq!(
            kinds(&run(&[("k#2", "its shell was killed by KILL")])),
            vec!["loss_unjustified"]
        );
        // Not judged where the host cannot say.
        let mut blind = run(&[]);
        blind.state_loss.judged = false;
        assert!(kinds(&blind).is_empty());
    }

    #[test]
    fn an_unscripted_cells_note_is_judged_too() {
        let mut o = run(&[("k#1", "x")]);
        o.state_loss.unscripted.push(NoteCell {
            label: "liveness".into(),
            key: Some("k#3".into()),
            stderr: b"tether: the shell state cell 2 reached was not kept (its shim was killed before the cell ended); this cell starts from the state before it\n".to_vec(),
            ended_ms: None,
        });
        assert_eq!(kinds(&o), vec!["loss_unjustified"]);
        o.state_loss.causes.insert("k#2".into(), vec!["y".into()]);
        assert!(kinds(&o).is_empty());
    }

    #[test]
    fn a_cause_a_daemon_death_or_a_full_disk_justifies_it() {
        assert!(kinds(&run(&[("k#1", "its shim was killed before its result")])).is_empty());
        let mut died = run(&[]);
        died.state_loss.daemon_deaths.push((500, "k".into()));
        assert!(kinds(&died).is_empty());
        // A death after the noting cell ended, or of another kernel, does not.
        died.state_loss.daemon_deaths = vec![(1_500, "k".into()), (500, "other".into())];
        assert_eq!(kinds(&died), vec!["loss_unjustified"]);
        let mut full = run(&[]);
        full.disk_filled = true;
        assert!(kinds(&full).is_empty());
    }

    #[test]
    fn a_cells_own_note_needs_a_full_disk_or_a_cause() {
        let mut o = run(&[("k#1", "x")]);
        o.cells[1].client_stderr =
            b"tether: the shell state of this cell was not kept: no space\n".to_vec();
        assert_eq!(kinds(&o), vec!["loss_unjustified"]);
        o.cells[1].client_stderr = Vec::new();
        o.cells[0].client_stderr =
            b"tether: the shell state of this cell was not kept: no space\n".to_vec();
        assert!(kinds(&o).is_empty());
        o.state_loss.causes.clear();
        assert_eq!(kinds(&o), vec!["loss_unjustified"]);
        o.disk_filled = true;
        assert!(kinds(&o).is_empty());
    }
}
