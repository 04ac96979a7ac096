//! The planted fault the design must survive: the reply to a `submit` is
//! lost after the op ran. Over many seeds (each with more faults drawn on
//! top), the cell runs exactly once and its output arrives exactly once.

use tether_sim::oracle::Violation;
use tether_sim::scenario;
use tether_sim::world::{run, Variant};

#[test]
fn a_lost_submit_reply_never_runs_the_cell_twice() {
    let s = scenario::by_name("reply_lost").unwrap();
    let mut lost = 0;
    for seed in 0..100 {
        let report = run(&s, seed, &s.schedule(seed), Variant::Real);
        assert!(
            !report
                .violations
                .iter()
                .any(|v| matches!(v, Violation::DoubleExecution { .. })),
            "seed {seed}: {:?}\n{}",
            report.violations,
            report.trace
        );
        if report.trace.contains("submit ran; its reply is LOST") {
            lost += 1;
        }
    }
    // The fault really fired (the submit ran and its reply was dropped).
    assert!(
        lost >= 90,
        "the submit reply was lost in only {lost} of 100 runs"
    );
}
