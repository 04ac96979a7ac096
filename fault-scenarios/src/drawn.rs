//! The `drawn` scenario's scripts: cells made from each seed's own
//! stream, out of the workload steps the other scenarios use.
//!
//! Every other scenario's cells were written together with the bug or race
//! they show, so the processes in them are the ones their authors thought
//! of. Here a seed draws them: output on both streams around sleeps, a
//! daemon or an orphan that dies before the main process or outlives the
//! kernel, a background child still holding stdout at the exit, an exit
//! status after all that, a cancel or a timeout in the middle of it (of a
//! shell that ignores or traps TERM, an interpreter that ignores SIGINT), names
//! bound in one cell and read in a later one, in a shell kernel and a
//! Python one. The oracle judges them as any scenario's: what was printed
//! and how each cell ended follow from its steps ([`crate::scenario`]'s
//! expected output, the `Expect` drawn with them), and everything the
//! ground-truth checks look at holds for any workload.

use crate::scenario::{cell, on, print_name, py_cell, set_name, Action, CellSpec, Expect};
use crate::workload::Step;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tether_core::protocol::{Lang, Stream};

/// A stream of its own ("drawn"), apart from the world's and the
/// faults' draws of the same seed.
const STREAM: u64 = 0x6472_6177_6e21_2121;

/// The kernel the Python cells run in (the shell cells run in the main
/// one).
const PY_KERNEL: &str = "py";

/// The script of `seed`: two to five cells, some with a pause after them.
pub fn script(seed: u64) -> Vec<Action> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ STREAM);
    let cells = rng.random_range(2..=5);
    let mut names: Vec<(bool, String)> = Vec::new();
    let mut script = Vec::new();
    for i in 0..cells {
        let python = rng.random_bool(0.3);
        script.push(Action::Run(draw_cell(&mut rng, i, python, &mut names)));
        if rng.random_bool(0.3) {
            script.push(Action::Idle {
                ms: rng.random_range(100..2_500),
            });
        }
    }
    let script = with_late_cancels(with_harder_steps(script, seed), seed);
    with_queued_pairs(with_edge_printers(with_nul_bytes(script, seed), seed), seed)
}

/// The stream that queues some pairs of cells at once, apart from the
/// cells' (as [`NUL_BYTES`]: of the constants counting up from "queue",
/// the first that changes no `drawn` race file's script).
const QUEUED_PAIRS: u64 = 0x71_7565_a373;

/// `script` with, on a coin of [`QUEUED_PAIRS`], two cells in a row of
/// one kernel queued at once ([`Action::Together`]): the second is
/// submitted while the first runs, and waits its turn on the sandbox.
/// Only cells without a scripted cancel (a fault's cancel reaches both),
/// and a second without a timeout (it would count its wait).
fn with_queued_pairs(script: Vec<Action>, seed: u64) -> Vec<Action> {
    let mut coin = ChaCha8Rng::seed_from_u64(seed ^ QUEUED_PAIRS);
    let pairable = |a: &CellSpec, b: &CellSpec| {
        a.kernel == b.kernel
            && a.lang == b.lang
            && b.timeout_ms.is_none()
            && [a, b]
                .iter()
                .all(|c| c.cancel_after_ms.is_none() && !c.nul_byte && !c.second_client)
    };
    let mut out = Vec::new();
    let mut actions = script.into_iter().peekable();
    while let Some(action) = actions.next() {
        if let (Action::Run(a), Some(Action::Run(b))) = (&action, actions.peek()) {
            if pairable(a, b) && coin.random_bool(0.3) {
                let pair = vec![a.clone(), b.clone()];
                actions.next();
                out.push(Action::Together(pair));
                continue;
            }
        }
        out.push(action);
    }
    out
}

/// The stream that makes some cells' cancels race their end, apart from
/// the cells' (as [`NUL_BYTES`]: the first constant counting up from
/// "late" that changes no `drawn` race file's script).
const LATE_CANCELS: u64 = 0x6c61_748c;

/// `script` with, on coins of [`LATE_CANCELS`], a shell cell that would
/// end `ok` made one whose cancel is sent about when it ends: it ignores
/// TERM and leaves a daemon (which inherits that) before its steps, so a
/// cancel that lands after its result finds only its leftovers, and ends
/// them as a cancel does, KILL only after the grace period (a daemon idle
/// for less than that must still wait for it). Either end is right: no
/// expectation. Only a cell that binds no name (a later cell may read it).
fn with_late_cancels(script: Vec<Action>, seed: u64) -> Vec<Action> {
    each_cell(script, seed ^ LATE_CANCELS, |coin, mut c| {
        let eligible =
            c.lang == Lang::Shell && c.expect == Some(Expect::Ok) && c.binds().next().is_none();
        if !(eligible && coin.random_bool(0.2)) {
            return c;
        }
        let slept: u64 = c
            .workload
            .steps
            .iter()
            .map(|s| match s {
                Step::Sleep { ms } | Step::BusyLoop { ms: Some(ms) } => *ms,
                _ => 0,
            })
            .sum();
        c.workload.steps.splice(
            0..0,
            [
                Step::IgnoreTerm,
                Step::SetsidDoubleForkDaemon { sleep_ms: 600_000 },
            ],
        );
        c.cancel_after_ms = Some((slept + coin.random_range(0..60)).saturating_sub(20));
        c.expect = None;
        c.cancel_races_end = true;
        c
    })
}

/// `script` with each cell passed through `change`, which draws from a
/// coin of its own stream (`seed` mixed with the stream's constant): a
/// stream apart from the cells' keeps every other draw of the seed, and
/// so the scripts of race files, as they were.
fn each_cell(
    script: Vec<Action>,
    stream_seed: u64,
    mut change: impl FnMut(&mut ChaCha8Rng, CellSpec) -> CellSpec,
) -> Vec<Action> {
    let mut coin = ChaCha8Rng::seed_from_u64(stream_seed);
    script
        .into_iter()
        .map(|action| match action {
            Action::Run(c) => Action::Run(change(&mut coin, c)),
            idle => idle,
        })
        .collect()
}

/// The stream that makes some of the shell cells' steps harder to stop,
/// apart from the cells' (as [`NUL_BYTES`], so that no `drawn` race
/// file's script changes: the first constant counting up from "harder"
/// that changes none of them).
const HARDER_STEPS: u64 = 0x6861_7264_7167;

/// `script` with, on coins of [`HARDER_STEPS`], a shell cell's orphan in
/// its own process group made one without the marker and stdio
/// ([`Step::SetpgidEnvIOrphan`]: without cgroups, once its shim is gone,
/// only the cell's session still names it), and a TERM trap that does
/// nothing made one that starts a child holding stdout (a process born
/// after the TERM, which the KILL at the end of the grace must still
/// reach).
fn with_harder_steps(script: Vec<Action>, seed: u64) -> Vec<Action> {
    each_cell(script, seed ^ HARDER_STEPS, |coin, mut c| {
        if c.lang != Lang::Shell {
            return c;
        }
        for step in &mut c.workload.steps {
            match step {
                Step::SetpgidOrphan { sleep_ms } if coin.random_bool(0.5) => {
                    *step = Step::SetpgidEnvIOrphan {
                        sleep_ms: *sleep_ms,
                    };
                }
                Step::TrapTerm { then } if then.is_empty() && coin.random_bool(0.5) => {
                    then.push(Step::BackgroundChildHoldingStdout { sleep_ms: 600_000 });
                }
                _ => {}
            }
        }
        c
    })
}

/// The stream that marks cells whose code carries a NUL byte, apart from
/// the cells' (so that the scripts of `drawn`'s race files stay as they
/// were drawn: of the streams near "nullbyte", the first that marks a
/// cell of none of them; about 15 % of seeds get one).
const NUL_BYTES: u64 = 0x6e75_6c6c_6279_7468;

/// `script` with, on a coin of [`NUL_BYTES`], a shell cell that would
/// end on its own submitted with a NUL byte and more code after it
/// ([`CellSpec::nul_byte`]): the kernel refuses it, nothing of it runs,
/// and the cells after it find the kernel as the cells before left it.
/// Only a cell that binds no name is marked: a later cell reading a name
/// that was never bound fails (drawn_clients seed 500501 of the
/// `--max-faults 8` long run: `parameter not set`, exit 127).
fn with_nul_bytes(script: Vec<Action>, seed: u64) -> Vec<Action> {
    each_cell(script, seed ^ NUL_BYTES, |coin, c| {
        let eligible = c.lang == Lang::Shell
            && matches!(c.expect, Some(Expect::Ok | Expect::Exit(_)))
            && c.binds().next().is_none();
        if eligible && coin.random_bool(0.08) {
            CellSpec {
                nul_byte: true,
                expect: Some(Expect::Refused),
                ..c
            }
        } else {
            c
        }
    })
}

/// The stream that gives some shell cells a background printer timed to
/// the shim's drain bound, apart from the cells' (as [`NUL_BYTES`]: of
/// the constants counting up from "edge", the first that changes no
/// `drawn` race file's script).
const EDGE_PRINTERS: u64 = 0x6564_6766_4cbe;

/// `script` with, on a coin of [`EDGE_PRINTERS`], a shell cell that ends
/// by itself given a last step that forks a background child holding its
/// stdout, which prints two lines exactly as long after as the shim waits
/// for its pipes once the main process exited
/// ([`tether_core::agent::shim::DEFAULT_DRAIN`]): the lines reach the
/// pipe in the instant the shim's drain bound passes: before the shim's
/// last read of its pipes where its poll wakes late (the world's
/// `timer_slack_ms`), after it where it wakes on time; the cell's output
/// or the kernel's background log accordingly (the oracle's ground truth
/// says which).
fn with_edge_printers(script: Vec<Action>, seed: u64) -> Vec<Action> {
    let after_ms =
        u64::try_from(tether_core::agent::shim::DEFAULT_DRAIN.as_millis()).unwrap_or(u64::MAX);
    each_cell(script, seed ^ EDGE_PRINTERS, |coin, mut c| {
        let eligible = c.lang == Lang::Shell
            && matches!(c.expect, Some(Expect::Ok | Expect::Exit(_)))
            && !c.nul_byte;
        if !(eligible && coin.random_bool(0.25)) {
            return c;
        }
        let steps = &mut c.workload.steps;
        let at = match steps.last() {
            Some(Step::Exit { .. }) => steps.len() - 1,
            _ => steps.len(),
        };
        steps.insert(
            at,
            Step::LatePrint {
                after_ms,
                tag: format!("{}-edge", c.label),
                lines: 2,
            },
        );
        c
    })
}

/// The frontends' stream of `drawn_clients`, apart from the cells'.
const FRONTENDS: u64 = 0x6672_6f6e_7465_6e64;

/// The script of `seed` for two frontends (`drawn_clients`): the cells
/// [`script`] draws for the seed, each run by the first frontend or the
/// second ([`CellSpec::second_client`]) as a coin of its own stream
/// says. Each frontend's first cell after the other ran is refused and run
/// again, as the refusal asks: the paths of two client records on one
/// kernel, with cells nobody wrote.
pub fn script_two_frontends(seed: u64) -> Vec<Action> {
    each_cell(script(seed), seed ^ FRONTENDS, |coin, c| CellSpec {
        second_client: coin.random_bool(0.5),
        ..c
    })
}

/// How the drawn cell is to end.
enum Ending {
    /// Runs its steps to the end, then exits with this status (0: `ok`).
    Exit(u8),
    /// Cancelled this long after it was submitted, while it sleeps on.
    Cancel(u64),
    /// Times out after this long, while it sleeps on.
    Timeout(u64),
}

fn draw_cell(
    rng: &mut ChaCha8Rng,
    index: u32,
    python: bool,
    names: &mut Vec<(bool, String)>,
) -> CellSpec {
    let label = format!("d{index}");
    let known = names.len();
    let mut steps = Vec::new();
    for n in 0..rng.random_range(1..=6) {
        steps.push(draw_step(rng, python, &label, n, names));
    }
    let ending = match rng.random_range(0..10) {
        0 => Ending::Cancel(rng.random_range(50..1_500)),
        1 => Ending::Timeout(rng.random_range(200..1_500)),
        2..=4 => Ending::Exit([1, 2, 7, 42][rng.random_range(0..4)]),
        _ => Ending::Exit(0),
    };
    let (expect, timeout_ms, cancel_after_ms) = match ending {
        Ending::Exit(0) => (Expect::Ok, None, None),
        Ending::Exit(code) => {
            steps.push(Step::Exit { code });
            (Expect::Exit(i32::from(code)), None, None)
        }
        // What a stopped cell bound is not read later: a KILLed shell
        // (TERM ignored) saves nothing, and says so, as it should.
        Ending::Cancel(after) => {
            names.truncate(known);
            stop_loses_names(stopped_by_the_kernel(rng, python, &mut steps), names);
            (Expect::Cancelled, None, Some(after))
        }
        Ending::Timeout(after) => {
            names.truncate(known);
            stop_loses_names(stopped_by_the_kernel(rng, python, &mut steps), names);
            (Expect::TimedOut, Some(after), None)
        }
    };
    let spec = if python {
        on(PY_KERNEL, py_cell(&label, steps, expect))
    } else {
        cell(&label, steps, expect)
    };
    CellSpec {
        timeout_ms,
        cancel_after_ms,
        ..spec
    }
}

/// A cell the kernel is to stop (a cancel, a timeout) blocks at its end
/// for longer than any run, and may make the stop harder first: a shell
/// that ignores TERM (KILL after the grace period) or traps it, an
/// interpreter that ignores SIGINT (only killing it ends the cell, and its
/// namespace goes with it). The model takes the stop to land where the
/// cell first blocks ([`crate::shell_model::play_cell`]): that block is
/// its only one.
/// True when the stop kills the interpreter (it ignores SIGINT).
fn stopped_by_the_kernel(rng: &mut ChaCha8Rng, python: bool, steps: &mut Vec<Step>) -> bool {
    steps.retain(|s| !matches!(s, Step::Sleep { .. } | Step::BusyLoop { .. }));
    let hardening = match (python, rng.random_range(0..6)) {
        (false, 0) => Some(Step::IgnoreTerm),
        (false, 1) => Some(Step::TrapTerm { then: Vec::new() }),
        (true, 0) => Some(Step::IgnoreInt),
        _ => None,
    };
    let kills_interpreter = hardening == Some(Step::IgnoreInt);
    if let Some(step) = hardening {
        let at = rng.random_range(0..=steps.len());
        steps.insert(at, step);
    }
    steps.push(match (python, rng.random_bool(0.3)) {
        (false, true) => Step::BusyLoop { ms: None },
        _ => Step::Sleep { ms: 600_000 },
    });
    kills_interpreter
}

/// A stop that killed the interpreter took every name the Python
/// kernel's earlier cells bound with it (the loss is told in the stopped
/// cell): no later cell reads them (drawn seed 200510, no faults: a cell
/// read a name two cells before an `IgnoreInt` timeout had bound, and
/// met a NameError the script did not expect).
fn stop_loses_names(kills_interpreter: bool, names: &mut Vec<(bool, String)>) {
    if kills_interpreter {
        names.retain(|(python, _)| !python);
    }
}

/// A daemon or child lives for a moment (it ends before its cell, or just
/// after) or for longer than any run (it is the kernel's to end).
fn lifetime(rng: &mut ChaCha8Rng) -> u64 {
    if rng.random_bool(0.6) {
        rng.random_range(20..1_500)
    } else {
        600_000
    }
}

fn draw_step(
    rng: &mut ChaCha8Rng,
    python: bool,
    label: &str,
    n: u32,
    names: &mut Vec<(bool, String)>,
) -> Step {
    match rng.random_range(0..12) {
        0..=2 => Step::Print {
            stream: if rng.random_bool(0.3) {
                Stream::Stderr
            } else {
                Stream::Stdout
            },
            text: format!("{label}.{n}\n"),
        },
        3 | 4 => Step::Sleep {
            ms: rng.random_range(10..800),
        },
        5 => Step::SetsidDoubleForkDaemon {
            sleep_ms: lifetime(rng),
        },
        6 => Step::EnvIDaemon {
            sleep_ms: lifetime(rng),
        },
        7 => Step::SetpgidOrphan {
            sleep_ms: lifetime(rng),
        },
        8 => Step::BackgroundChildHoldingStdout {
            sleep_ms: rng.random_range(20..1_500),
        },
        9 => match rng.random_range(0..3) {
            0 => Step::ForkBurst {
                count: rng.random_range(1..=4),
            },
            1 => Step::EnvIGrandchild {
                sleep_ms: lifetime(rng),
            },
            _ => Step::BusyLoop {
                ms: Some(rng.random_range(10..300)),
            },
        },
        10 => {
            // Bound here, read by a later cell of the same kernel.
            let name = format!("tw_{label}_{n}");
            names.push((python, name.clone()));
            set_name(&name, &format!("{label} {n}"))
        }
        _ => {
            let mine: Vec<&String> = names
                .iter()
                .filter(|(p, _)| *p == python)
                .map(|(_, name)| name)
                .collect();
            match mine.is_empty() {
                true => Step::Sleep {
                    ms: rng.random_range(10..300),
                },
                false => print_name(mine[rng.random_range(0..mine.len())]),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_draws_the_same_script_every_time_and_seeds_differ() {
        assert_eq!(script(7), script(7));
        let distinct: std::collections::BTreeSet<String> =
            (0..50).map(|s| format!("{:?}", script(s))).collect();
        assert!(distinct.len() > 45, "{} distinct of 50", distinct.len());
    }

    /// Over many seeds the draws cover what the scenario is for: every
    /// ending, both kernels, daemons that die first and ones that outlive
    /// the run, names read back.
    #[test]
    fn the_draws_cover_every_ending_both_kernels_and_both_lifetimes() {
        let mut seen = std::collections::BTreeSet::new();
        for seed in 0..300 {
            for action in script(seed) {
                let Action::Run(c) = action else { continue };
                seen.insert(match c.expect {
                    Some(Expect::Exit(_)) => "ending Exit".to_owned(),
                    other => format!("ending {other:?}"),
                });
                seen.insert(format!("kernel {:?}", c.kernel));
                assert_eq!(c.nul_byte, c.expect == Some(Expect::Refused), "{c:?}");
                for step in &c.workload.steps {
                    match step {
                        Step::EnvIDaemon { sleep_ms }
                        | Step::SetsidDoubleForkDaemon { sleep_ms }
                        | Step::SetpgidOrphan { sleep_ms } => {
                            seen.insert(format!("daemon long {}", *sleep_ms > 100_000));
                        }
                        Step::PrintName { .. } => {
                            seen.insert("read".into());
                        }
                        _ => {}
                    }
                }
            }
        }
        for want in [
            "kernel None",
            "kernel Some(\"py\")",
            "daemon long true",
            "daemon long false",
            "read",
        ] {
            assert!(seen.contains(want), "{want} never drawn: {seen:?}");
        }
        for ending in [
            "Some(Ok)",
            "Exit",
            "Some(Cancelled)",
            "Some(TimedOut)",
            "Some(Refused)",
        ] {
            let want = format!("ending {ending}");
            assert!(seen.contains(&want), "{want} never drawn: {seen:?}");
        }
    }
}
