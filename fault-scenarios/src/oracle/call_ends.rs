//! How a tool call ends, beyond its answer: a call made by a process of
//! a cell that has ended is refused at once, never left waiting for its
//! deadline (the caller looks for its cell's end before it writes a
//! request, and at each poll after); and a call answered in its cell
//! before the cell's result is journaled answered before that result, so
//! the client reports it answered (`tool_answered`) and knows its answer
//! reached the cell (it stops re-sending it, and a resumed client does
//! not keep it).

use super::{completed, Observations, Violation};
use tether_core::protocol::calls::CALLER_POLL;

/// How long past its start a call of an ended cell may take to be
/// refused: two of the caller's polls.
fn bound_ms() -> u64 {
    2 * u64::try_from(CALLER_POLL.as_millis()).unwrap_or(u64::MAX)
}

pub(super) fn check(obs: &Observations, v: &mut Vec<Violation>) {
    check_refused_at_once(obs, v);
    check_answers_reported(obs, v);
}

/// A call of an ended cell ends within two polls: one made after its
/// cell ended (from its start), and one still waiting when its cell ended
/// (from the first look of its caller that found the cell ended: a
/// request the shim never journaled, or an answer the host could no
/// longer deliver, must not wait for the call's deadline).
fn check_refused_at_once(obs: &Observations, v: &mut Vec<Violation>) {
    for c in &obs.tools.calls {
        let Some(started) = c.started_ms else {
            continue;
        };
        let from = match (c.cell_ended_at_start, c.cell_ended_ms) {
            (true, _) => started,
            (false, Some(seen)) => seen.max(started),
            (false, None) => continue,
        };
        let took = c.ended_ms.map(|e| e.saturating_sub(from));
        if took.is_none_or(|t| t > bound_ms()) {
            let when = if c.cell_ended_at_start {
                format!("started at {started} ms after its cell ended")
            } else {
                format!("started at {started} ms, still waiting when its caller found its cell ended at {from} ms")
            };
            v.push(Violation::ToolCallLingered {
                detail: format!(
                    "call {:?} of {} {when}, {}",
                    c.id,
                    c.key.as_deref().unwrap_or(&c.cell),
                    match took {
                        Some(t) => format!("ended {t} ms later (bound {} ms)", bound_ms()),
                        None => "never ended".into(),
                    }
                ),
            });
        }
    }
}

/// A call its caller got the answer of, written in the sandbox for the
/// journaled call before its cell's result, in a cell that ran once to
/// its end and resolved complete: the client reported it answered. A
/// full disk excuses it (the `tool_answered` entry may not be written).
fn check_answers_reported(obs: &Observations, v: &mut Vec<Violation>) {
    if obs.disk_filled {
        return;
    }
    let tools = &obs.tools;
    for c in tools
        .calls
        .iter()
        .filter(|c| !c.leftover && c.answered.is_some())
    {
        let in_cell = tools
            .answers
            .iter()
            .any(|a| a.id == c.id && a.journaled && !a.after_result);
        let cell = c.key.as_ref().and_then(|k| {
            obs.cells
                .iter()
                .filter(|o| o.key.as_ref() == Some(k))
                .filter(|o| c.started_ms.is_none_or(|s| o.started_ms <= s))
                .max_by_key(|o| o.started_ms)
        });
        let ran_once = cell.is_some_and(|o| {
            o.outcome.as_ref().is_some_and(completed)
                && o.truth.executions == 1
                && o.truth.ran_to_end
        });
        if in_cell && ran_once && !tools.reported_answered.contains(&c.id) {
            v.push(Violation::ToolAnswerUnreported {
                detail: format!(
                    "call {:?} of {}",
                    c.id,
                    cell.map_or(c.cell.as_str(), |o| o.label.as_str())
                ),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{check, Observations, ToolCallObs, Violation};
    use tether_core::protocol::CellOutcome;

    fn run(call: ToolCallObs) -> Observations {
        let mut o = Observations {
            finished: true,
            liveness: Some(CellOutcome::Ok),
            ..Observations::default()
        };
        o.tools.calls.push(call);
        o
    }

    fn leftover(ended_ms: Option<u64>) -> ToolCallObs {
        ToolCallObs {
            id: "x".into(),
            cell: "/k/1".into(),
            key: Some("k#1".into()),
            leftover: true,
            failed: ended_ms.map(|_| "refused".into()),
            started_ms: Some(1_000),
            ended_ms,
            cell_ended_at_start: true,
            ..ToolCallObs::default()
        }
    }

    fn kinds(o: &Observations) -> Vec<&'static str> {
        check(o).iter().map(Violation::kind).collect()
    }

    #[test]
    fn a_call_of_an_ended_cell_refused_at_once_passes() {
        assert_eq!(check(&run(leftover(Some(1_000)))), vec![]);
        assert_eq!(check(&run(leftover(Some(1_020)))), vec![]);
    }

    #[test]
    fn a_call_of_an_ended_cell_that_waits_fires() {
        assert_eq!(
            kinds(&run(leftover(Some(31_000)))),
            vec!["tool_call_lingered"]
        );
        let never = run(leftover(None));
        assert_eq!(kinds(&never), vec!["tool_call_lingered"]);
        assert!(check(&never)[0].to_string().contains("never ended"));
    }

    #[test]
    fn a_call_still_waiting_when_its_cell_ended_ends_then() {
        // Started while the cell ran; its caller found the cell ended at
        // 1.5 s: it must end within two polls of that, not at its deadline.
        let waiting = |ended_ms| ToolCallObs {
            cell_ended_at_start: false,
            cell_ended_ms: Some(1_500),
            ..leftover(ended_ms)
        };
        assert_eq!(check(&run(waiting(Some(1_500)))), vec![]);
        assert_eq!(
            kinds(&run(waiting(Some(31_000)))),
            vec!["tool_call_lingered"]
        );
        assert_eq!(kinds(&run(waiting(None))), vec!["tool_call_lingered"]);
        // One whose caller never saw its cell end (killed first) is not judged.
        let unseen = ToolCallObs {
            cell_ended_ms: None,
            ..waiting(None)
        };
        assert_eq!(check(&run(unseen)), vec![]);
    }

    #[test]
    fn an_answered_call_the_client_never_reported_answered_fires() {
        use super::super::{CellObs, CellTruth, ToolAnswerObs, ToolRunObs};
        let mut o = run(ToolCallObs {
            id: "a".into(),
            cell: "/k/1".into(),
            key: Some("k#1".into()),
            answered: Some("r\n".into()),
            ..ToolCallObs::default()
        });
        o.tools.runs.push(ToolRunObs {
            incarnation: 0,
            id: "a".into(),
            result: "r".into(),
            name_len: 1,
            args_len: 2,
        });
        o.tools.answers.push(ToolAnswerObs {
            id: "a".into(),
            journaled: true,
            after_result: false,
        });
        o.cells.push(CellObs {
            label: "c".into(),
            key: Some("k#1".into()),
            outcome: Some(CellOutcome::Ok),
            resolutions: 1,
            truth: CellTruth {
                executions: 1,
                ran_to_end: true,
                ..CellTruth::default()
            },
            ..CellObs::default()
        });
        assert_eq!(kinds(&o), vec!["tool_answer_unreported"]);
        let mut reported = o.clone();
        reported.tools.reported_answered.push("a".into());
        assert_eq!(check(&reported), vec![]);
        // Excused: a full disk; a cell cancelled before its end.
        let mut full = o.clone();
        full.disk_filled = true;
        assert_eq!(check(&full), vec![]);
        let mut cancelled = o;
        cancelled.cells[0].outcome = Some(CellOutcome::Cancelled);
        cancelled.cells[0].cancel_requested = true;
        assert_eq!(check(&cancelled), vec![]);
    }

    #[test]
    fn a_call_of_a_running_cell_may_wait() {
        let mut call = leftover(None);
        call.cell_ended_at_start = false;
        assert_eq!(check(&run(call)), vec![]);
    }
}
