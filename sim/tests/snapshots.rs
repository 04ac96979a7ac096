//! The replay trace of a few named seeds, as insta snapshots: any change in
//! what the client or the agent does under these faults shows up in review.
//! Record writes are left out: how often the driver persists is its own
//! business (the races and the oracle check that resume works).

use tether_sim::scenario;
use tether_sim::world::{run, Variant};

fn trace_of(name: &str, seed: u64) -> String {
    let s = scenario::by_name(name).unwrap();
    let report = run(&s, seed, &s.schedule(seed), Variant::Real);
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    report
        .trace
        .lines()
        .filter(|l| !l.contains(" client  persist "))
        .map(|l| format!("{l}\n"))
        .collect()
}

#[test]
fn happy_seed_3() {
    insta::assert_snapshot!(trace_of("happy", 3));
}

#[test]
fn reply_lost_seed_1() {
    insta::assert_snapshot!(trace_of("reply_lost", 1));
}

#[test]
fn cancel_escapes_seed_2() {
    insta::assert_snapshot!(trace_of("cancel_escapes", 2));
}

#[test]
fn client_crash_seed_5() {
    insta::assert_snapshot!(trace_of("client_crash", 5));
}
