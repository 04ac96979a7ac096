//! A schedule read from a file may hold any number: the world saturates
//! instead of overflowing, and the run still ends and is judged.

use tether_sim::faults::{Fault, FaultKind, FaultSchedule};
use tether_sim::scenario;
use tether_sim::world::{run, Variant};

#[test]
fn durations_near_u64_max_do_not_overflow() {
    let s = scenario::by_name("happy").unwrap();
    for kind in [
        FaultKind::PartitionExec { for_ms: u64::MAX },
        FaultKind::HoldExec { for_ms: u64::MAX },
        FaultKind::ExecLatency {
            ms: u64::MAX,
            for_ms: u64::MAX,
        },
        FaultKind::CrashClient { down_ms: u64::MAX },
    ] {
        let schedule = FaultSchedule(vec![Fault {
            at_ms: 10,
            kind: kind.clone(),
        }]);
        let report = run(&s, 0, &schedule, Variant::Real);
        assert!(
            report.trace.contains("fault"),
            "{kind:?}: the fault never fired\n{}",
            report.trace
        );
    }
}
