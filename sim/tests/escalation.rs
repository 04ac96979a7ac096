//! The oracle's escalation checks (`fault-scenarios/src/oracle/
//! escalation.rs`), each proved on a real run (the client, the daemon's
//! logic and the shims on the simulated OS) of a planted bug, and silent
//! on the product: a cancel's KILL waits for the grace period after its
//! TERM; a daemon that caught SIGTERM starts no cell after it.

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
