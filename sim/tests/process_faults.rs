//! The faults on the sandbox's own processes, each injected into a real
//! run (the client, the agent's logic and the shims on the simulated OS)
//! and what happened checked: the shim, the interpreter and an op killed
//! from outside, a daemon stopped by SIGTERM, the sandbox frozen. And the
//! oracle's stop check, proved on a planted bug: a daemon that exits at
//! TERM without stopping what it owns.

use tether_sim::faults::FaultSchedule;
use tether_sim::scenario;
use tether_sim::swarm::World;
use tether_sim::world::{run_in, Variant};

/// Runs `scenario` (in its classic world, with or without cgroups) with
/// only `schedule`; returns the violations (as text) and the trace.
fn run(scenario: &str, cgroups: bool, schedule: &str, variant: Variant) -> (Vec<String>, String) {
    let s = scenario::by_name(scenario).unwrap();
    let world = World {
        cgroups,
        ..World::classic(&s)
    };
    let schedule = FaultSchedule::from_json(schedule).unwrap();
    let report = run_in(&s, 1, &world, &schedule, variant);
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

/// Virtual ms at the start of a trace line (`  1.234s actor …`).
fn at_ms(line: &str) -> u64 {
    let secs = line
        .split_whitespace()
        .next()
        .unwrap()
        .trim_end_matches('s');
    (secs.parse::<f64>().unwrap() * 1000.0).round() as u64
}

#[test]
fn a_termed_python_kernel_stops_its_interpreter_and_reports_the_loss() {
    for cgroups in [true, false] {
        let (violations, trace) = run(
            "python_state",
            cgroups,
            r#"[{"at_ms":500,"kind":"term_daemon"}]"#,
            Variant::Real,
        );
        assert_eq!(violations, Vec::<String>::new(), "{trace}");
        assert_eq!(lines(&trace, "sandbox", "caught TERM").len(), 1, "{trace}");
        // The cell that ran is resolved with the stop as its reason …
        let stopped = lines(
            &trace,
            "client",
            "resolved sim#2 error: the kernel was stopped",
        );
        assert_eq!(stopped.len(), 1, "{trace}");
        // … the interpreter dies before the daemon exits …
        let exit = lines(&trace, "sandbox", "exits")[0];
        let interp_pid = lines(&trace, "proc", "\"python3 -u -c\"")[0]
            .split_whitespace()
            .nth(3)
            .unwrap()
            .to_owned();
        let interp_exit = lines(&trace, "proc", &format!("exit {interp_pid} killed by"));
        assert!(
            interp_exit.first().is_some_and(|l| at_ms(l) <= at_ms(exit)),
            "{trace}"
        );
        // … and the client says the state is lost before a cell reads it.
        assert!(!lines(&trace, "client", "STATE LOST").is_empty(), "{trace}");
    }
}

#[test]
fn a_termed_shell_kernel_resolves_its_running_cell_and_the_next_cell_runs() {
    let (violations, trace) = run(
        "daemon_killed",
        false,
        r#"[{"at_ms":1000,"kind":"term_daemon"}]"#,
        Variant::Real,
    );
    assert_eq!(violations, Vec::<String>::new(), "{trace}");
    assert_eq!(
        lines(
            &trace,
            "client",
            "resolved sim#2 error: the kernel was stopped"
        )
        .len(),
        1,
        "{trace}"
    );
    assert_eq!(
        lines(&trace, "client", "resolved sim#3 ok").len(),
        1,
        "{trace}"
    );
}

#[test]
fn a_daemon_that_exits_at_term_and_leaves_its_interpreter_running_is_caught() {
    let (violations, trace) = run(
        "python_state",
        true,
        r#"[{"at_ms":500,"kind":"term_daemon"}]"#,
        Variant::parse("daemon-exits-at-term").unwrap(),
    );
    assert!(
        violations
            .iter()
            .any(|v| v.starts_with("a stopped kernel left processes running")
                && v.contains("interpreter")),
        "{violations:?}\n{trace}"
    );
}

#[test]
fn a_killed_shell_shim_resolves_its_cell_as_an_error_and_the_next_cell_runs() {
    for cgroups in [true, false] {
        let (violations, trace) = run(
            "daemon_killed",
            cgroups,
            r#"[{"at_ms":1000,"kind":"kill_shim"}]"#,
            Variant::Real,
        );
        assert_eq!(violations, Vec::<String>::new(), "{trace}");
        let resolved = lines(
            &trace,
            "client",
            "resolved sim#2 error: the cell's shim died",
        );
        assert_eq!(resolved.len(), 1, "{trace}");
        assert!(at_ms(resolved[0]) < 1_100, "{trace}");
        assert_eq!(lines(&trace, "client", "resolved sim#3 ok").len(), 1);
    }
}

#[test]
fn a_killed_interpreter_shim_takes_the_interpreter_and_the_loss_is_noted() {
    // During a cell, and between cells (the next cell hears of it).
    for (at, noted_in) in [(500, "sim#2"), (2_500, "sim#6")] {
        let (violations, trace) = run(
            "python_state",
            true,
            &format!(r#"[{{"at_ms":{at},"kind":"kill_shim"}}]"#),
            Variant::Real,
        );
        assert_eq!(violations, Vec::<String>::new(), "{trace}");
        let note = format!("output {noted_in} n=");
        assert!(
            lines(&trace, "client", &note)
                .iter()
                .any(|l| l.contains("tether: the Python interpreter")),
            "{trace}"
        );
    }
}

#[test]
fn a_killed_interpreter_is_reported_and_the_next_cell_runs_fresh() {
    let (violations, trace) = run(
        "python_state",
        false,
        r#"[{"at_ms":500,"kind":"kill_interpreter"}]"#,
        Variant::Real,
    );
    assert_eq!(violations, Vec::<String>::new(), "{trace}");
    assert_eq!(
        lines(
            &trace,
            "client",
            "resolved sim#2 error: the Python interpreter was killed"
        )
        .len(),
        1,
        "{trace}"
    );
    assert_eq!(
        lines(&trace, "client", "resolved sim#3 error: NameError").len(),
        1,
        "{trace}"
    );
}

#[test]
fn a_killed_op_is_one_failed_exec_and_the_cell_runs_once() {
    for op in ["submit", "wait"] {
        let (violations, trace) = run(
            "python_state",
            true,
            &format!(r#"[{{"at_ms":0,"kind":"kill_op","op":"{op}"}}]"#),
            Variant::Real,
        );
        assert_eq!(violations, Vec::<String>::new(), "{trace}");
        assert_eq!(
            lines(&trace, "sandbox", "KILLED from outside").len(),
            1,
            "{trace}"
        );
        assert!(
            !lines(&trace, "client", "-> exit 137").is_empty(),
            "{trace}"
        );
    }
}

#[test]
fn a_frozen_sandbox_runs_nothing_until_it_thaws() {
    let (violations, trace) = run(
        "python_state",
        true,
        r#"[{"at_ms":500,"kind":"freeze_sandbox","for_ms":3000}]"#,
        Variant::Real,
    );
    assert_eq!(violations, Vec::<String>::new(), "{trace}");
    // The sleeping cell (1.5 s from about 40 ms) ends only after the thaw,
    // and no process of the sandbox does anything while frozen.
    let thaw = at_ms(lines(&trace, "fault", "sandbox thawed")[0]);
    assert_eq!(thaw, 3_500);
    let work = lines(&trace, "client", "resolved sim#2 ok");
    assert!(at_ms(work[0]) >= thaw, "{trace}");
    assert!(
        lines(&trace, "proc", "")
            .iter()
            .all(|l| !(501..thaw).contains(&at_ms(l))),
        "{trace}"
    );
}
