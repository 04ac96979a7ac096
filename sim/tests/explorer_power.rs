//! The explorer as a test command for `cargo mutants` (see
//! `scripts/mutants`): the race corpus, then every scenario over a short
//! run of seeds, failing at the first violation. A mutant of `core` that this test does not fail
//! survived the explorer.
//!
//! It is `#[ignore]`d so `cargo test --workspace` does not pay for it
//! twice (the CI explorer already covers these seeds); run it with
//! `cargo test --release -p tether-sim --test explorer_power -- --ignored`.
//! `TETHER_POWER_SEEDS` sets the seeds per scenario (default 10) and
//! `TETHER_POWER_JOBS` the worker threads (default 1).

use tether_sim::corpus;
use tether_sim::explore::{explore, Options, Shard};
use tether_sim::scenario;
use tether_sim::world::{Sim, Variant};

fn env_number(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(text) => text
            .parse()
            .unwrap_or_else(|_| panic!("{name}={text:?}: expected a number")),
        Err(_) => default,
    }
}

#[test]
#[ignore = "the mutation-testing command; run with --ignored (scripts/mutants)"]
fn the_explorer_finds_no_violation() {
    let seeds = env_number("TETHER_POWER_SEEDS", 10);
    let jobs = usize::try_from(env_number("TETHER_POWER_JOBS", 1)).unwrap_or(1);
    let opts = Options {
        seeds,
        jobs,
        stop_at_first: true,
        // A mutant is killed by any violation; shrinking would only cost time.
        shrink_first: 0,
        ..Options::default()
    };
    // The race corpus first, as `tether-sim explore` replays it: a second.
    let corpus = corpus::replay(&scenario::all(), Shard { k: 1, n: 1 }, Variant::Real, true);
    if let Some(failure) = corpus.failures.first() {
        panic!("{}", failure.render());
    }
    eprintln!("{}", corpus.line());
    // One scenario at a time, so a killed mutant stops at its first
    // failing scenario instead of running the others.
    for s in scenario::all() {
        let summary = explore(std::slice::from_ref(&s), &opts, &Sim(Variant::Real));
        if let Some(failure) = summary.failures.first() {
            panic!(
                "{} failed at seed {}:\n{}",
                s.name,
                failure.seed,
                failure.render()
            );
        }
        eprint!("{}", summary.table());
    }
}
