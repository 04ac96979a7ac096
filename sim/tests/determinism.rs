//! The same seed twice gives a byte-identical trace, for a sample of seeds
//! of every scenario.

use tether_sim::explore::first_difference;
use tether_sim::scenario;
use tether_sim::world::{run, Variant};

#[test]
fn same_seed_same_trace() {
    for s in scenario::all() {
        for seed in [1u64, 7, 42] {
            let schedule = s.schedule(seed);
            let a = run(&s, seed, &schedule, Variant::Real);
            let b = run(&s, seed, &schedule, Variant::Real);
            assert!(
                a.trace.lines().count() > 5,
                "{} seed {seed}: trace too short:\n{}",
                s.name,
                a.trace
            );
            if let Some(d) = first_difference(&a.trace, &b.trace) {
                panic!("{} seed {seed}: traces differ at {d}", s.name);
            }
        }
    }
}

/// The Python kernel's scenarios on more seeds: the interpreter shim, the
/// interpreter and its KeyboardInterrupt are as deterministic as the rest.
#[test]
fn python_scenarios_same_seed_same_trace() {
    for name in ["python_state", "python_cancel", "python_stuck"] {
        let s = scenario::by_name(name).unwrap();
        for seed in [3u64, 16, 98] {
            let schedule = s.schedule(seed);
            let a = run(&s, seed, &schedule, Variant::Real);
            let b = run(&s, seed, &schedule, Variant::Real);
            assert!(
                a.trace.contains("python3"),
                "{name} seed {seed}: no interpreter"
            );
            if let Some(d) = first_difference(&a.trace, &b.trace) {
                panic!("{name} seed {seed}: traces differ at {d}");
            }
        }
    }
}
