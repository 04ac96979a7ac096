//! The background log's truths (`core/src/agent/background.rs`): what a
//! cell's background processes print after the cell resolved is in its
//! kernel's background log (read with the `logs` op, as `tether logs`
//! does) — all of it, once, in order, nothing else — unless the kernel
//! lost it (its daemon died, a shim was killed, the disk was full, the
//! client evicted the kernel); a log over its cap keeps its newest bytes
//! from a line start behind a note saying how many it dropped; and those
//! bytes are never any cell's output.

use super::{BackgroundObs, Observations, Violation};
use crate::excerpt::excerpt;
use tether_core::agent::background::{CAP, CHECK_EVERY, DROPPED_NOTE, KEEP};

/// How far a trim may move its cut to reach a line start.
const LINE_SLACK: u64 = 4096;

fn lines(bytes: &[u8]) -> Vec<&[u8]> {
    bytes.split_inclusive(|&b| b == b'\n').collect()
}

fn show(line: &[u8]) -> String {
    excerpt(line, 60)
}

/// The note a trim put first, and how many bytes it says it dropped:
/// `[tether: N bytes of older background output dropped (…)]`.
fn note(log: &[u8]) -> Option<Result<(u64, usize), String>> {
    if !log.starts_with(DROPPED_NOTE.as_bytes()) {
        return None;
    }
    let end = log
        .iter()
        .position(|&b| b == b'\n')
        .map_or(log.len(), |i| i + 1);
    let text = String::from_utf8_lossy(&log[DROPPED_NOTE.len()..end]);
    Some(
        text.split(' ')
            .next()
            .and_then(|n| n.parse().ok())
            .filter(|_| text.contains("bytes of older background output dropped"))
            .map(|n| (n, end))
            .ok_or_else(|| format!("a malformed trim note {:?}", show(&log[..end]))),
    )
}

/// Checks every kernel's background log, and that no cell delivered
/// what background processes printed after their cell resolved.
pub(super) fn check(obs: &Observations, v: &mut Vec<Violation>) {
    for b in &obs.background {
        let evicted = obs.evictions.iter().any(|(_, k)| *k == b.kernel);
        let lossy = !b.lossy.is_empty() || evicted;
        let mut wrong = |detail: String| {
            v.push(Violation::BackgroundLog {
                kernel: b.kernel.clone(),
                detail,
            })
        };
        match &b.log {
            Ok(log) => check_log(b, log, lossy, &mut wrong),
            // A kernel that never had background output may never have
            // started (its cells never ran): no log to read is no loss.
            Err(e) if !lossy && !b.written.is_empty() => wrong(format!("the logs op failed: {e}")),
            Err(_) => {}
        }
    }
    let late: Vec<&[u8]> = obs
        .background
        .iter()
        .flat_map(|b| lines(&b.written).into_iter().chain(lines(&b.later)))
        .collect();
    // Lines printed at the drain bound, with the log that may hold them.
    let either: Vec<(&[u8], Option<&Vec<u8>>)> = obs
        .background
        .iter()
        .flat_map(|b| {
            lines(&b.either)
                .into_iter()
                .map(move |l| (l, b.log.as_ref().ok()))
        })
        .collect();
    for cell in &obs.cells {
        for (stream, out) in [
            ("stdout", &cell.client_stdout),
            ("stderr", &cell.client_stderr),
        ] {
            if let Some(line) = late.iter().find(|l| contains(out, l)) {
                v.push(Violation::BackgroundInCell {
                    cell: cell.label.clone(),
                    detail: format!(
                        "its {stream} holds {:?}, printed in the background after its cell resolved",
                        show(line)
                    ),
                });
            }
            let twice = either
                .iter()
                .find(|(l, log)| contains(out, l) && log.is_some_and(|log| contains(log, l)));
            if let Some((line, _)) = twice {
                v.push(Violation::BackgroundInCell {
                    cell: cell.label.clone(),
                    detail: format!(
                        "its {stream} holds {:?}, which its kernel's background log holds too",
                        show(line)
                    ),
                });
            }
        }
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

/// The whole line of another writer that `line` ends with, where `line`
/// is a torn part of one writer's line that another writer's append ran
/// into: on a full disk, a refused append may put down part of a line,
/// and the writer cuts it only when the disk lets it; another shim may
/// append first (`core/src/agent/background.rs`, a documented limit).
/// Writers are told apart by a late line's first word, its cell's label.
fn joined_after_tear<'a>(line: &'a [u8], all: &[&[u8]], disk_full: bool) -> Option<&'a [u8]> {
    if !disk_full {
        return None;
    }
    let word = |l: &[u8]| l.split(|&b| b == b' ').next().map(<[u8]>::to_vec);
    all.iter().find_map(|whole| {
        let head = line.strip_suffix(*whole)?;
        let torn_from = all
            .iter()
            .find(|l| l.len() > head.len() && l.starts_with(head) && !head.is_empty())?;
        (word(torn_from) != word(whole)).then(|| &line[head.len()..])
    })
}

fn check_log(b: &BackgroundObs, log: &[u8], lossy: bool, wrong: &mut dyn FnMut(String)) {
    let (dropped, body) = match note(log) {
        None => (None, log),
        Some(Ok((n, end))) => (Some(n), &log[end..]),
        Some(Err(e)) => return wrong(e),
    };
    // Always: each line was written, once, in the order written.
    let written = lines(&b.written);
    let all: Vec<&[u8]> = written.iter().copied().chain(lines(&b.later)).collect();
    let mut got = lines(body);
    // A last line still unfinished: a writer's line in the making, or the
    // part a refused append put down (a full disk) with no append after
    // it to cut it; where output was lost, that is its part of the loss.
    if lossy
        && got.last().is_some_and(|last| {
            !last.ends_with(b"\n")
                && all
                    .iter()
                    .any(|l| l.len() > last.len() && l.starts_with(last))
        })
    {
        got.pop();
    }
    // Printed at the drain bound: the log's, or its cell's (judged with
    // the cells' output).
    let either = lines(&b.either);
    got.retain(|l| !either.contains(l));
    let disk_full = b.lossy.iter().any(|why| why.contains("disk"));
    let mut at = 0;
    let mut first = None;
    for line in &got {
        let line = match joined_after_tear(line, &all, disk_full) {
            Some(whole) => whole,
            None => line,
        };
        match all[at..].iter().position(|l| *l == line) {
            Some(i) => {
                first.get_or_insert(at + i);
                at += i + 1;
            }
            None if all.contains(&line) => {
                return wrong(format!("{:?} is there twice or out of order", show(line)))
            }
            None => return wrong(format!("{:?} was never written", show(line))),
        }
    }
    if lossy {
        return;
    }
    // Nothing lost: what was written before the read, from where the log
    // starts, all of it, with no gap.
    let start = first.unwrap_or(written.len()).min(written.len());
    let need = written.len() - start;
    if got.len() < need || got[..need] != written[start..] {
        let missing = written[start..]
            .iter()
            .find(|l| !got.contains(l))
            .map_or_else(String::new, |l| show(l));
        return wrong(format!(
            "{} of the {} lines written since its start are there; {missing:?} is lost",
            got.len().min(need),
            need
        ));
    }
    let dropped_bytes: u64 = written[..start].iter().map(|l| l.len() as u64).sum();
    let total = b.written.len() as u64;
    let bound = CAP + CHECK_EVERY * u64::from(b.writers.max(1));
    match dropped {
        None if start > 0 => wrong(format!(
            "its first {start} lines are gone and no note says so"
        )),
        None if total > bound => wrong(format!(
            "it holds {total} bytes, over its cap of {CAP} (+{CHECK_EVERY} per writer)"
        )),
        None => {}
        Some(_) if start == 0 => wrong("a trim note, but nothing was dropped".into()),
        // A trim cuts at least what the log holds over what it keeps; one
        // trim drops exactly what its note says; after several, each note
        // counts the one before, and the trims before dropped at least
        // that much more.
        Some(n)
            if n < CAP - KEEP
                || (n != dropped_bytes && dropped_bytes < n + (CAP - KEEP) - 2 * LINE_SLACK) =>
        {
            wrong(format!(
                "its note says {n} bytes were dropped, {dropped_bytes} were"
            ))
        }
        Some(_) if (body.len() as u64) < KEEP - LINE_SLACK => wrong(format!(
            "trimmed to {} bytes, a trim keeps about {KEEP}",
            body.len()
        )),
        Some(_) if log.len() as u64 > bound + 256 => wrong(format!(
            "it holds {} bytes after a trim, over its cap of {CAP}",
            log.len()
        )),
        Some(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::super::{check as check_all, CellObs, CellTruth};
    use super::*;
    use crate::workload::{late_line, late_text};
    use tether_core::protocol::CellOutcome;

    fn obs(written: &str, log: &[u8]) -> Observations {
        Observations {
            cells: vec![CellObs {
                label: "c1".into(),
                key: Some("k#1".into()),
                client_stdout: b"hi\n".to_vec(),
                outcome: Some(CellOutcome::Ok),
                resolutions: 1,
                truth: CellTruth {
                    executions: 1,
                    stdout: b"hi\n".to_vec(),
                    ran_to_end: true,
                    ..CellTruth::default()
                },
                ..CellObs::default()
            }],
            background: vec![BackgroundObs {
                kernel: "k".into(),
                log: Ok(log.to_vec()),
                written: written.as_bytes().to_vec(),
                writers: 1,
                ..BackgroundObs::default()
            }],
            liveness: Some(CellOutcome::Ok),
            finished: true,
            ..Observations::default()
        }
    }

    fn kinds(o: &Observations) -> Vec<&'static str> {
        check_all(o).iter().map(Violation::kind).collect()
    }

    /// A log as a trim leaves it: the note, then `written` from its line
    /// `from` on.
    fn trimmed(written: &str, from: u32, said: Option<u64>) -> Vec<u8> {
        let cut: usize = (0..from).map(|i| late_line("b", i).len()).sum();
        let n = said.unwrap_or(cut as u64);
        let mut log = format!(
            "{DROPPED_NOTE}{n} bytes of older background output dropped (the log keeps about {CAP} bytes)]\n"
        )
        .into_bytes();
        log.extend_from_slice(&written.as_bytes()[cut..]);
        log
    }

    #[test]
    fn a_line_printed_at_the_drain_bound_is_the_cells_or_the_logs_once() {
        let w = late_text("t", 2);
        let edge = late_text("c1-edge", 2);
        // In the log, among the others, or in the cell's output: either.
        let mut o = obs(
            &w,
            format!("{}{edge}{}", late_line("t", 0), late_line("t", 1)).as_bytes(),
        );
        o.background[0].either = edge.clone().into_bytes();
        assert_eq!(kinds(&o), Vec::<&str>::new());
        o.background[0].log = Ok(w.clone().into_bytes());
        o.cells[0].client_stdout = format!("hi\n{edge}").into_bytes();
        // (The host counts the lines delivered as written by the cell.)
        o.cells[0].truth.stdout = o.cells[0].client_stdout.clone();
        assert_eq!(kinds(&o), Vec::<&str>::new());
        // In both: delivered twice.
        o.background[0].log = Ok(format!("{w}{}", late_line("c1-edge", 1)).into_bytes());
        assert_eq!(kinds(&o), ["background_in_cell"]);
        // Neither where it is not one of them.
        let mut plain = obs(&w, format!("{w}{edge}").as_bytes());
        assert_eq!(kinds(&plain), ["background_log"]);
        plain.background[0].either = late_text("other-edge", 1).into_bytes();
        assert_eq!(kinds(&plain), ["background_log"]);
    }

    #[test]
    fn the_log_holds_what_was_printed_after_resolution_exactly() {
        let w = late_text("t", 3);
        assert_eq!(kinds(&obs(&w, w.as_bytes())), Vec::<&str>::new());
        // Lost, repeated, invented, reordered.
        let lost = late_text("t", 2);
        assert_eq!(kinds(&obs(&w, lost.as_bytes())), ["background_log"]);
        let twice = format!("{w}{}", late_line("t", 2));
        assert_eq!(kinds(&obs(&w, twice.as_bytes())), ["background_log"]);
        let invented = format!("{w}nobody wrote this\n");
        assert_eq!(kinds(&obs(&w, invented.as_bytes())), ["background_log"]);
        let swapped = format!(
            "{}{}{}",
            late_line("t", 1),
            late_line("t", 0),
            late_line("t", 2)
        );
        assert_eq!(kinds(&obs(&w, swapped.as_bytes())), ["background_log"]);
        // Nothing read at all, or the read failed.
        assert_eq!(kinds(&obs(&w, b"")), ["background_log"]);
        let mut failed = obs(&w, b"");
        failed.background[0].log = Err("no answer".into());
        assert_eq!(kinds(&failed), ["background_log"]);
        // No kernel, nothing written to it: nothing lost.
        failed.background[0].written.clear();
        assert_eq!(kinds(&failed), Vec::<&str>::new());
        // Printed as the log was read: it may be there, in order, at the end.
        let mut later = obs(&w, w.as_bytes());
        later.background[0].later = late_text("u", 2).into_bytes();
        assert_eq!(kinds(&later), Vec::<&str>::new());
        later.background[0].log = Ok(format!("{w}{}", late_text("u", 1)).into_bytes());
        assert_eq!(kinds(&later), Vec::<&str>::new());
    }

    #[test]
    fn a_kernel_that_lost_its_log_may_miss_lines_but_never_invent_them() {
        let w = late_text("t", 3);
        let mut o = obs(&w, late_line("t", 2).as_bytes());
        o.background[0].lossy = vec!["daemon of k killed".into()];
        assert_eq!(kinds(&o), Vec::<&str>::new());
        o.background[0].log =
            Ok(format!("{}{}", late_line("t", 2), late_line("t", 2)).into_bytes());
        assert_eq!(kinds(&o), ["background_log"]);
        // A last line left unfinished (a refused append on a full disk)
        // is part of the loss; a torn line with more after it is not, nor
        // an unfinished last line of a log that lost nothing.
        let t2 = late_line("t", 2);
        o.background[0].log = Ok(format!("{}{}", late_line("t", 0), &t2[..4]).into_bytes());
        assert_eq!(kinds(&o), Vec::<&str>::new());
        o.background[0].log = Ok(format!("{}{t2}", &t2[..4]).into_bytes());
        assert_eq!(kinds(&o), ["background_log"]);
        // On a full disk another writer's line may run into a torn part
        // (it appended before the tearing writer could cut); the same
        // writer's never does (it cuts before it appends again).
        let u0 = late_line("u", 0);
        let mut two = obs(&format!("{w}{u0}"), b"");
        two.background[0].lossy = vec!["the disk was full".into()];
        two.background[0].log = Ok(format!("{}{u0}", &t2[..4]).into_bytes());
        assert_eq!(kinds(&two), Vec::<&str>::new());
        two.background[0].log = Ok(format!("{}{t2}", &t2[..4]).into_bytes());
        assert_eq!(kinds(&two), ["background_log"]);
        two.background[0].lossy = vec!["daemon of k killed".into()];
        two.background[0].log = Ok(format!("{}{u0}", &t2[..4]).into_bytes());
        assert_eq!(kinds(&two), ["background_log"]);
        let mut unfinished = obs(&w, format!("{}{}", late_text("t", 2), &t2[..4]).as_bytes());
        assert_eq!(kinds(&unfinished), ["background_log"]);
        unfinished.background[0].lossy = vec!["disk full".into()];
        assert_eq!(kinds(&unfinished), Vec::<&str>::new());
        // An eviction of its kernel by the client's reaper excuses a loss.
        let mut evicted = obs(&w, b"");
        evicted.cells[0].resolved_ms = Some(2);
        evicted.evictions = vec![(5, "k".into())];
        assert_eq!(kinds(&evicted), Vec::<&str>::new());
    }

    #[test]
    fn background_bytes_in_a_cells_output_fire() {
        let w = late_text("t", 2);
        let mut o = obs(&w, w.as_bytes());
        o.cells[0].client_stderr = late_line("t", 1).into_bytes();
        assert_eq!(kinds(&o), ["background_in_cell"]);
    }

    #[test]
    fn a_log_over_its_cap_is_trimmed_from_a_line_start_with_a_true_note() {
        let w = late_text("b", 13_000);
        assert!(w.len() as u64 > CAP + CHECK_EVERY);
        // Kept from a line start about KEEP bytes from the end.
        let from = 13_000 - (KEEP / late_line("b", 0).len() as u64) as u32;
        assert_eq!(
            kinds(&obs(&w, &trimmed(&w, from, None))),
            Vec::<&str>::new()
        );
        // Untrimmed over the cap.
        assert_eq!(kinds(&obs(&w, w.as_bytes())), ["background_log"]);
        // A note that lies about what it dropped.
        let lie = trimmed(&w, from, Some(12));
        assert_eq!(kinds(&obs(&w, &lie)), ["background_log"]);
        let cut: u64 = (0..from).map(|i| late_line("b", i).len() as u64).sum();
        let lie = trimmed(&w, from, Some(cut + 900));
        assert_eq!(kinds(&obs(&w, &lie)), ["background_log"]);
        // Cut mid-line, or one byte before a line start.
        let mut mid = trimmed(&w, from, None);
        let at = mid.iter().position(|&b| b == b'\n').unwrap() + 1;
        mid.drain(at..at + 3);
        assert_eq!(kinds(&obs(&w, &mid)), ["background_log"]);
        let cut: usize = (0..from).map(|i| late_line("b", i).len()).sum();
        let mut early = trimmed(&w, from, Some(cut as u64 - 1));
        early.splice(at..at, *b"\n");
        assert_eq!(kinds(&obs(&w, &early)), ["background_log"]);
        // Kept far too little.
        let short = trimmed(&w, 12_900, None);
        assert_eq!(kinds(&obs(&w, &short)), ["background_log"]);
        // A note with nothing dropped.
        assert_eq!(kinds(&obs(&w, &trimmed(&w, 0, None))), ["background_log"]);
    }
}
