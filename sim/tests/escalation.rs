//! The oracle's escalation checks (`fault-scenarios/src/oracle/
//! escalation.rs`), each proved on a real run (the client, the daemon's
//! logic and the shims on the simulated OS) of a planted bug, and silent
//! on the product: a cancel's KILL waits for the grace period after its
//! TERM, and so does the escalation of a cell whose shim died; a daemon
//! that caught SIGTERM starts no cell after it, and leaves none open when
//! it exits.

use tether_sim::faults::FaultSchedule;
use tether_sim::scenario;
use tether_sim::swarm::World;
use tether_sim::world::{run_in, Variant};

/// Runs `scenario` in its classic world with `cgroups` and `grace_ms`,
/// under `schedule`; returns the violations (as text) and the trace.
fn run(
    scenario: &str,
    cgroups: bool,
    grace_ms: u64,
    schedule: &str,
    variant: &str,
) -> (Vec<String>, String) {
    let s = scenario::by_name(scenario).unwrap();
    let world = World {
        cgroups,
        grace_ms,
        ..World::classic(&s)
    };
    let schedule = FaultSchedule::from_json(schedule).unwrap();
    let report = run_in(&s, 1, &world, &schedule, Variant::parse(variant).unwrap());
    let violations = report.violations.iter().map(|v| v.to_string()).collect();
    (violations, report.trace)
}

fn early_kills(violations: &[String]) -> usize {
    violations
        .iter()
        .filter(|v| v.starts_with("a cancel killed before its grace period was over"))
        .count()
}

#[test]
fn a_cancel_that_kills_on_the_tick_after_its_term_is_caught() {
    // The ignorer's background child ignores TERM: only the KILL ends it.
    for (scenario, cgroups) in [("cancel_ignorer", true), ("cancel_escapes", false)] {
        let (violations, trace) = run(scenario, cgroups, 1_000, "[]", "kill-before-grace");
        assert!(early_kills(&violations) > 0, "{violations:?}\n{trace}");
        let (violations, trace) = run(scenario, cgroups, 1_000, "[]", "real");
        assert_eq!(violations, Vec::<String>::new(), "{trace}");
    }
}

#[test]
fn a_dead_shims_escalation_that_kills_at_once_is_caught() {
    // The cell ignores TERM, and so does the setsid daemon it left: only
    // the KILL ends them. Its shim is killed; its daemon ends the cell.
    // (A cell whose daemon was killed too is ended by the op that proves
    // the daemon gone, at once, as a shutdown ends it; a next daemon that
    // adopts one still alive escalates as here: core's
    // `a_fresh_daemon_ends_what_a_cell_of_its_dead_predecessor_still_runs`.)
    let shim = r#"[{"at_ms":500,"kind":"kill_shim"}]"#;
    for cgroups in [true, false] {
        let (violations, trace) = run(
            "shim_killed_escapes",
            cgroups,
            1_000,
            shim,
            "kill-before-grace",
        );
        assert!(early_kills(&violations) > 0, "{violations:?}\n{trace}");
        let (violations, trace) = run("shim_killed_escapes", cgroups, 1_000, shim, "real");
        assert_eq!(violations, Vec::<String>::new(), "{trace}");
    }
    let both = r#"[{"at_ms":1000,"kind":"kill_daemon"},{"at_ms":1200,"kind":"kill_shim"}]"#;
    for cgroups in [true, false] {
        let (violations, trace) = run("daemon_shim_killed", cgroups, 1_000, both, "real");
        assert_eq!(violations, Vec::<String>::new(), "{trace}");
    }
}

#[test]
fn a_stopped_daemon_that_exits_leaving_its_cell_open_is_caught() {
    // `during` ignores TERM: the stop ends it by its exit sweep's KILL.
    // The planted daemon exits at the TERM, its cells dropped unresolved.
    let schedule = r#"[{"at_ms":1000,"kind":"term_daemon"}]"#;
    for cgroups in [true, false] {
        let (violations, trace) = run(
            "daemon_termed",
            cgroups,
            1_000,
            schedule,
            "daemon-exits-at-term",
        );
        assert!(
            violations
                .iter()
                .any(|v| v.starts_with("a stopped kernel left") && v.contains("cell 2 open")),
            "{violations:?}\n{trace}"
        );
        let (violations, trace) = run("daemon_termed", cgroups, 1_000, schedule, "real");
        assert_eq!(violations, Vec::<String>::new(), "{trace}");
    }
}

#[test]
fn a_daemon_that_ignores_term_and_starts_the_next_cell_is_caught() {
    for cgroups in [true, false] {
        let schedule = r#"[{"at_ms":500,"kind":"term_daemon"}]"#;
        let (violations, trace) = run(
            "python_state",
            cgroups,
            300,
            schedule,
            "daemon-ignores-term",
        );
        assert!(
            violations
                .iter()
                .any(|v| v.starts_with("a stopped daemon started a cell")),
            "{violations:?}\n{trace}"
        );
        let (violations, trace) = run("python_state", cgroups, 300, schedule, "real");
        assert_eq!(violations, Vec::<String>::new(), "{trace}");
    }
}

#[test]
fn an_idle_exit_that_cuts_a_late_cancels_grace_short_is_caught() {
    // `ignorer_done` ends by itself at about 3.5 s, leaving a daemon that
    // ignores TERM; the cancel fault fires as its result is journaled, so
    // the cancel lands on a finished cell and escalates on the leftover.
    // A daemon idle timeout (300 ms) below the grace (1 s): only a daemon
    // that stays busy until the cancel is over waits out the grace.
    let s = scenario::by_name("cancel_ignorer").unwrap();
    let world = World {
        grace_ms: 1_000,
        daemon_idle_ms: 300,
        ..World::classic(&s)
    };
    let schedule = FaultSchedule::from_json(
        r#"[{"at_ms":2000,"kind":"cancel","point":"as_result_is_journaled"}]"#,
    )
    .unwrap();
    let run = |variant: &str| run_in(&s, 1, &world, &schedule, Variant::parse(variant).unwrap());
    let real = run("real");
    assert!(
        real.trace.contains("\"state\":\"already_done\""),
        "the cancel must cross the result:\n{}",
        real.trace
    );
    assert_eq!(
        real.violations
            .iter()
            .map(|v| v.to_string())
            .collect::<Vec<_>>(),
        Vec::<String>::new(),
        "{}",
        real.trace
    );
    let broken = run("idle-during-cancel");
    let violations: Vec<String> = broken.violations.iter().map(|v| v.to_string()).collect();
    assert!(
        early_kills(&violations) > 0,
        "{violations:?}\n{}",
        broken.trace
    );
}
