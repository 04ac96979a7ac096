//! Live exploration in CI: a few random fault schedules per change, on
//! `local` and (when docker runs here) `docker`, drawn by the runtime's
//! generator and judged by its oracle (see `tether_live::explore`). The
//! long run is the documented command:
//! `cargo run --release -p tether-live -- explore --backend local --seeds 200 --seed 1000 --jobs 2`.
//!
//! `TETHER_LIVE_SEED` moves the first seed (to explore other schedules
//! with the same tests).

use tether_live::explore::{self, Options};
use tether_require::Need;

fn first_seed(default: u64) -> u64 {
    std::env::var("TETHER_LIVE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

async fn explore_on(backend: &str, seed: u64, seeds: u64) {
    let opts = Options {
        backend: backend.into(),
        seed,
        seeds,
        scenario: None,
        jobs: 1,
        schedule: None,
    };
    let outcomes = explore::explore(&opts, |o| println!("{}", explore::describe(o, backend))).await;
    let ran = outcomes.iter().filter(|o| o.report.is_some()).count();
    assert!(ran > 0, "no schedule ran on {backend}");
    let bad: Vec<String> = outcomes
        .iter()
        .filter(|o| !o.violations().is_empty())
        .map(|o| explore::describe(o, backend))
        .collect();
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// Four random schedules on this machine.
#[tokio::test]
async fn random_schedules_on_local_hold_every_invariant() {
    explore_on("local", first_seed(1_000), 4).await;
}

/// Two random schedules (restarts and replacements included) in a
/// container.
#[tokio::test]
async fn random_schedules_on_docker_hold_every_invariant() {
    if !tether_require::have(
        "random_schedules_on_docker_hold_every_invariant",
        Need::Docker,
    ) {
        return;
    }
    explore_on("docker", first_seed(5_000), 2).await;
}

/// A seed names its run: the same seed draws the same scenario and
/// schedule, and its replay command carries both.
#[test]
fn a_seed_names_its_run() {
    let a = explore::scenario_for(42, None).expect("catalog");
    let b = explore::scenario_for(42, None).expect("catalog");
    assert_eq!(a.name, b.name);
    let s1 = explore::schedule_for(&a, 42, "local");
    assert_eq!(s1, explore::schedule_for(&a, 42, "local"));
    // The drawn faults (all but the scenario's fixed ones) are ones the
    // backend can make.
    for f in s1.0.iter().filter(|f| !a.fixed.0.contains(f)) {
        assert!(
            tether_live::sim_run::realisable("local").contains(&f.kind.family()),
            "{f} cannot be made on local"
        );
    }
    assert!(explore::scenario_for(1, Some("no_such")).is_err());
}
