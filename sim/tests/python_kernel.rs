//! The Python kernel under faults, on the real daemon logic: regressions
//! the simulation found.

use tether_sim::faults::{Fault, FaultKind, FaultSchedule};
use tether_sim::scenario;
use tether_sim::swarm::World;
use tether_sim::world::{run_in, Variant};

/// The daemon of a Python kernel is killed while idle. Its interpreter
/// shim used to survive it, still polling `py/run`: the next cell the new
/// daemon handed to its own interpreter ran a second time in the old
/// interpreter (and its old namespace), both writing one journal. The op
/// that proves the daemon gone, and a new daemon, kill the interpreter
/// shim recorded in `py/launch.json`.
#[test]
fn an_orphaned_interpreter_never_runs_the_next_cell() {
    let s = scenario::by_name("python_state").unwrap();
    let schedule = FaultSchedule(vec![
        Fault {
            at_ms: 179,
            kind: FaultKind::CrashClient { down_ms: 722 },
        },
        Fault {
            at_ms: 878,
            kind: FaultKind::ClockJump { ms: 60_000 },
        },
        Fault {
            at_ms: 1_440,
            kind: FaultKind::KillDaemon,
        },
    ]);
    // The world it was found in (pids as the assertions below name them).
    let r = run_in(&s, 98, &World::classic(&s), &schedule, Variant::Real);
    assert!(r.violations.is_empty(), "{:?}\n{}", r.violations, r.trace);
    // The old interpreter shim (pid 6) is killed before a cell is handed
    // out, not only by the final shutdown: by the submit that finds its
    // daemon gone (or else by the new daemon).
    let killed = r
        .trace
        .lines()
        .position(|l| l.contains("signal KILL ") && l.ends_with("->6 killed"));
    let handed = r.trace.lines().position(|l| l.contains("accepted sim#6"));
    assert!(
        killed.is_some() && killed < handed,
        "the orphaned interpreter shim was not killed first:\n{}",
        r.trace
    );
}
