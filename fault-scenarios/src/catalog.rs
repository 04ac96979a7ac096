//! Named workloads, shared by the simulation and the live backends: the
//! ordinary cells (output, exit codes, side effects) and one cell per
//! escape class a cancel must catch.

use crate::workload::{Step, Workload};
use tether_core::protocol::Stream;

/// What a named workload is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// Finishes by itself; its output and outcome are checked.
    Finishes,
    /// Runs until cancelled, trying to survive the cancel in one way.
    Escape,
}

/// A workload with a name and a purpose.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Named {
    /// Unique, `snake_case`.
    pub name: &'static str,
    /// What it exercises, for a person.
    pub what: &'static str,
    /// Finishes or escapes.
    pub kind: Kind,
    /// The steps.
    pub workload: Workload,
}

/// How long escape processes live: longer than any run.
pub const FOREVER_MS: u64 = 3_600_000;

fn print(stream: Stream, text: &str) -> Step {
    Step::Print {
        stream,
        text: text.to_owned(),
    }
}

fn spin() -> Step {
    Step::BusyLoop { ms: None }
}

/// Every named workload, in a fixed order.
pub fn all() -> Vec<Named> {
    let fin = |name, what, steps| Named {
        name,
        what,
        kind: Kind::Finishes,
        workload: Workload::new(steps),
    };
    let esc = |name, what, steps| Named {
        name,
        what,
        kind: Kind::Escape,
        workload: Workload::new(steps),
    };
    vec![
        fin(
            "hello",
            "one line of stdout, ok",
            vec![print(Stream::Stdout, "hello\n")],
        ),
        fin(
            "both_streams",
            "stdout and stderr interleaved",
            vec![
                print(Stream::Stdout, "out 1\n"),
                print(Stream::Stderr, "err 1\n"),
                print(Stream::Stdout, "out 2\n"),
            ],
        ),
        fin(
            "exit_3",
            "exit N is a definitive completion",
            vec![print(Stream::Stdout, "before\n"), Step::Exit { code: 3 }],
        ),
        fin(
            "side_effect",
            "counts its executions in a side-effect file",
            vec![
                Step::WriteSideEffect {
                    name: "side_effect".into(),
                },
                print(Stream::Stdout, "done\n"),
            ],
        ),
        fin(
            "slow_output",
            "output spread over time (several journal reads)",
            vec![
                print(Stream::Stdout, "a\n"),
                Step::Sleep { ms: 300 },
                print(Stream::Stdout, "b\n"),
                Step::Sleep { ms: 300 },
                print(Stream::Stdout, "c\n"),
            ],
        ),
        fin(
            "short_background_holder",
            "a background child holds stdout a little after the shell exits",
            vec![
                Step::BackgroundChildHoldingStdout { sleep_ms: 100 },
                print(Stream::Stdout, "main done\n"),
            ],
        ),
        esc(
            "ignore_term",
            "ignores SIGTERM (and so does its sleep child)",
            vec![Step::IgnoreTerm, Step::Sleep { ms: FOREVER_MS }],
        ),
        esc(
            "trap_term",
            "traps SIGTERM and goes on spinning",
            vec![
                Step::TrapTerm {
                    then: vec![print(Stream::Stdout, "caught TERM\n")],
                },
                spin(),
            ],
        ),
        esc(
            "builtin_loop",
            "a shell-builtin loop that never forks",
            vec![spin()],
        ),
        esc(
            "background_holder",
            "a background child in the group, holding stdout",
            vec![
                Step::BackgroundChildHoldingStdout {
                    sleep_ms: FOREVER_MS,
                },
                spin(),
            ],
        ),
        esc(
            "setsid_double_fork",
            "a setsid double-forked daemon (new session, marker kept)",
            vec![
                Step::SetsidDoubleForkDaemon {
                    sleep_ms: FOREVER_MS,
                },
                spin(),
            ],
        ),
        esc(
            "env_i_daemon",
            "a setsid env -i daemon (new session, no marker, stdio on /dev/null)",
            vec![
                Step::EnvIDaemon {
                    sleep_ms: FOREVER_MS,
                },
                spin(),
            ],
        ),
        esc(
            "setpgid_orphan",
            "an orphan in its own process group",
            vec![
                Step::SetpgidOrphan {
                    sleep_ms: FOREVER_MS,
                },
                spin(),
            ],
        ),
        esc(
            "exit_trap",
            "sets its own EXIT trap (replacing any wrapper cleanup)",
            vec![
                Step::SetExitTrap {
                    text: "exit trap\n".into(),
                },
                spin(),
            ],
        ),
        esc(
            "fork_burst",
            "many fast forks, then a TERM-proof background child",
            vec![
                Step::ForkBurst { count: 50 },
                Step::IgnoreTerm,
                Step::BackgroundChildHoldingStdout {
                    sleep_ms: FOREVER_MS,
                },
                spin(),
            ],
        ),
        esc(
            "leftovers_after_exit",
            "every escape, then the main shell exits: all of them are leftovers",
            vec![
                Step::IgnoreTerm,
                Step::BackgroundChildHoldingStdout {
                    sleep_ms: FOREVER_MS,
                },
                Step::SetsidDoubleForkDaemon {
                    sleep_ms: FOREVER_MS,
                },
                Step::EnvIDaemon {
                    sleep_ms: FOREVER_MS,
                },
                Step::SetpgidOrphan {
                    sleep_ms: FOREVER_MS,
                },
                Step::Exit { code: 0 },
            ],
        ),
    ]
}

/// The named workload `name`.
pub fn by_name(name: &str) -> Option<Named> {
    all().into_iter().find(|n| n.name == name)
}

/// The escape classes only.
pub fn escapes() -> Vec<Named> {
    all()
        .into_iter()
        .filter(|n| n.kind == Kind::Escape)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_every_workload_is_valid() {
        let all = all();
        let mut names: Vec<&str> = all.iter().map(|n| n.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), all.len());
        for n in &all {
            assert_eq!(
                Workload::decode(&n.workload.encode()),
                Ok(n.workload.clone())
            );
        }
        assert_eq!(by_name("env_i_daemon").map(|n| n.kind), Some(Kind::Escape));
        assert!(escapes().len() >= 9);
    }
}
