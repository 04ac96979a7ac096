//! Live exploration in CI: a few random fault schedules per change, on
//! `local` and (when docker runs here) `docker`, drawn by the runtime's
//! generator and judged by its oracle (see `tether_live::explore`). The
//! long run is the documented command:
//! `cargo run --release -p tether-live -- explore --backend local --seeds 200 --seed 1000 --jobs 2`.
//!
//! `TETHER_LIVE_SEED` moves the first seed (to explore other schedules
//! with the same tests).

use tether_live::explore::{self, Live};
use tether_require::Need;

fn first_seed(default: u64) -> u64 {
    std::env::var("TETHER_LIVE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn explore_on(backend: &str, seed: u64, seeds: u64) {
    let live = Live {
        backend: backend.into(),
        schedule: None,
    };
    let summary = live.explore(seed, seeds, None, 1).expect("catalog");
    let ran: u64 = summary.rows.iter().map(|r| r.seeds - r.skipped).sum();
    assert!(ran > 0, "no schedule ran on {backend}");
    let bad: Vec<String> = summary.failures.iter().map(|f| f.render()).collect();
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// Four random schedules on this machine.
#[test]
fn random_schedules_on_local_hold_every_invariant() {
    explore_on("local", first_seed(1_000), 4);
}

/// Two random schedules (restarts and replacements included) in a
/// container.
#[test]
fn random_schedules_on_docker_hold_every_invariant() {
    if !tether_require::have(
        "random_schedules_on_docker_hold_every_invariant",
        Need::Docker,
    ) {
        return;
    }
    explore_on("docker", first_seed(5_000), 2);
}

/// A seed names its run: the same seed draws the same schedule, from
/// the faults the backend can make, and a failure's replay command
/// carries the seed, its scenario and its schedule.
#[test]
fn a_seed_names_its_run() {
    let a = tether_scenarios::scenario::all().remove(0);
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
    let live = Live {
        backend: "local".into(),
        schedule: None,
    };
    let failure = tether_scenarios::explore::Failure {
        scenario: a.name.into(),
        seed: 42,
        schedule: s1.clone(),
        shrunk: None,
        world: a.world(42),
        violations: Vec::new(),
        replay_prefix: live.options(42, 1, 1).replay_prefix,
    };
    let replay = failure.replay_command();
    assert!(
        replay.contains("--backend local")
            && replay.contains(&format!("--scenario {} --seed 42", a.name))
            && replay.contains(&s1.to_json()),
        "{replay}"
    );
    assert!(live.explore(1, 1, Some("no_such"), 1).is_err());
}
