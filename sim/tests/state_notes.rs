//! The oracle's judgment of "the shell state … was not kept" notes
//! (`fault-scenarios/src/oracle/loss_notes.rs`) on real runs: a note with
//! no cause in the world is `loss_unjustified` (the planted
//! `note-kept-state-lost`: a cancelled cell whose shim settled its result
//! and left taken for one whose shim was killed), and a note the world
//! justifies (the shim killed before the cell's result) is none.

use tether_sim::faults::FaultSchedule;
use tether_sim::scenario;
use tether_sim::swarm::World;
use tether_sim::world::{run_in, Variant};

fn run(scenario: &str, cgroups: bool, schedule: &str, variant: &str) -> (Vec<String>, String) {
    let s = scenario::by_name(scenario).unwrap();
    let world = World {
        cgroups,
        ..World::classic(&s)
    };
    let schedule = FaultSchedule::from_json(schedule).unwrap();
    let report = run_in(&s, 1, &world, &schedule, Variant::parse(variant).unwrap());
    let violations = report.violations.iter().map(|v| v.to_string()).collect();
    (violations, report.trace)
}

fn unjustified(violations: &[String]) -> usize {
    violations
        .iter()
        .filter(|v| v.starts_with("an unjustified state loss note"))
        .count()
}

#[test]
fn a_kept_state_said_lost_is_caught() {
    // The ignorer's background child ignores TERM: the shim settles the
    // cancelled cell's result (its shell saved at the TERM) and leaves.
    for cgroups in [true, false] {
        let (violations, trace) = run("cancel_ignorer", cgroups, "[]", "note-kept-state-lost");
        assert!(trace.contains("was not kept"), "{trace}");
        assert!(unjustified(&violations) > 0, "{violations:?}\n{trace}");
        let (violations, trace) = run("cancel_ignorer", cgroups, "[]", "real");
        assert!(!trace.contains("was not kept"), "{trace}");
        assert_eq!(violations, Vec::<String>::new(), "{trace}");
    }
}

#[test]
fn a_state_lost_with_its_killed_shim_is_no_violation() {
    // The shim is killed while the cell runs: the next cell says the
    // state was not kept, and the world shows why.
    let schedule = r#"[{"at_ms":500,"kind":"kill_shim"}]"#;
    for cgroups in [true, false] {
        let (violations, trace) = run("shim_killed_escapes", cgroups, schedule, "real");
        assert!(trace.contains("was not kept"), "{trace}");
        assert_eq!(violations, Vec::<String>::new(), "{trace}");
    }
}
