//! The faults at the boundaries of the product, each injected into a real
//! run (the client, the agent's logic and the shims on the simulated OS)
//! and what happened checked: a reply cut short or with a byte changed on
//! the way (the client retries, never takes it for a result), a full disk
//! under the kernels (the agent says what it could not keep and runs no
//! cell twice).

use tether_sim::faults::FaultSchedule;
use tether_sim::scenario;
use tether_sim::swarm::World;
use tether_sim::world::{run_in, Variant};

/// Runs `scenario` in its classic world with only `schedule`; returns
/// the violations (as text) and the trace.
fn run(scenario: &str, schedule: &str) -> (Vec<String>, String) {
    let s = scenario::by_name(scenario).unwrap();
    let world = World::classic(&s);
    let schedule = FaultSchedule::from_json(schedule).unwrap();
    let report = run_in(&s, 1, &world, &schedule, Variant::Real);
    let violations = report.violations.iter().map(|v| v.to_string()).collect();
    (violations, report.trace)
}

/// The trace's lines from `actor` that contain `what`.
fn lines<'a>(trace: &'a str, actor: &str, what: &str) -> Vec<&'a str> {
    trace
        .lines()
        .filter(|l| l.split_whitespace().nth(1) == Some(actor) && l.contains(what))
        .collect()
}

#[test]
fn a_damaged_reply_is_retried_never_taken_for_a_result() {
    // Cut short, and one byte changed in the middle (in a cell's output,
    // a journal number or the JSON around them), of a submit and a wait.
    for (op, at, flip) in [
        ("submit", 500, 0),
        ("submit", 700, 1),
        ("wait", 300, 0),
        ("wait", 600, 4),
        ("submit", 999, 0x20),
    ] {
        let schedule = format!(
            r#"[{{"at_ms":0,"kind":"damage_reply","op":"{op}","at_permille":{at},"flip":{flip}}}]"#
        );
        for scenario in ["happy", "state", "python_state"] {
            let (violations, trace) = run(scenario, &schedule);
            assert_eq!(violations, Vec::<String>::new(), "{schedule}\n{trace}");
            if scenario == "happy" && op == "wait" {
                // A cell that ends within its submit needs no wait.
                continue;
            }
            assert_eq!(
                lines(&trace, "sandbox", "DAMAGED on the way").len(),
                1,
                "{scenario} {schedule}\n{trace}"
            );
        }
    }
}

#[test]
fn a_full_disk_under_the_kernels_refuses_writes_and_nothing_is_lost_silently() {
    for (scenario, at, for_ms) in [
        ("happy", 0, 500),
        ("state", 250, 2_000),
        ("python_state", 20, 1_500),
        // The daemon cannot write the next cell's code: it starts the
        // cell once the disk has room (it used to drop it for good).
        ("python_state", 50, 3_000),
        ("python_state", 700, 1_500),
        ("daemon_killed", 0, 1_500),
    ] {
        let schedule = format!(r#"[{{"at_ms":{at},"kind":"disk_full","for_ms":{for_ms}}}]"#);
        let (violations, trace) = run(scenario, &schedule);
        assert_eq!(
            violations,
            Vec::<String>::new(),
            "{scenario} {schedule}\n{trace}"
        );
        let freed = lines(&trace, "fault", "disk has room again");
        assert_eq!(freed.len(), 1, "{trace}");
        assert!(
            !freed[0].contains("(0 writes refused"),
            "{scenario} {schedule}: the fault refused nothing\n{trace}"
        );
    }
}
