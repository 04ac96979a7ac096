//! proptest draws fault schedules (and shrinks them when one fails); the
//! oracle is the property. Failing schedules are kept in
//! `sim/proptest-regressions/` and replayed first on every run.

use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence, RngSeed};
use tether_sim::faults::{CancelPoint, Fault, FaultKind, FaultSchedule, OpTarget};
use tether_sim::scenario;
use tether_sim::world::{run, Variant};

fn op() -> impl Strategy<Value = OpTarget> {
    prop_oneof![
        Just(OpTarget::Submit),
        Just(OpTarget::Wait),
        Just(OpTarget::Cancel),
        Just(OpTarget::Any),
    ]
}

fn kind() -> impl Strategy<Value = FaultKind> {
    prop_oneof![
        (50u64..4_000).prop_map(|for_ms| FaultKind::PartitionExec { for_ms }),
        (50u64..4_000).prop_map(|for_ms| FaultKind::HoldExec { for_ms }),
        Just(FaultKind::DropConnection),
        (10u64..800, 100u64..5_000).prop_map(|(ms, for_ms)| FaultKind::ExecLatency { ms, for_ms }),
        (op(), 50u64..3_000).prop_map(|(op, ms)| FaultKind::SlowStart { op, ms }),
        op().prop_map(|op| FaultKind::ReplyLost { op }),
        Just(FaultKind::KillDaemon),
        Just(FaultKind::BounceSandbox),
        (10u64..2_000).prop_map(|down_ms| FaultKind::CrashClient { down_ms }),
        prop_oneof![
            Just(CancelPoint::BeforeSubmitRegisters),
            Just(CancelPoint::DuringWait),
            Just(CancelPoint::AfterDone),
            Just(CancelPoint::BeforeCellStarts),
        ]
        .prop_map(|point| FaultKind::Cancel { point }),
        (100u64..4_000_000).prop_map(|ms| FaultKind::ClockJump { ms }),
    ]
}

fn schedule() -> impl Strategy<Value = FaultSchedule> {
    proptest::collection::vec(
        (0u64..4_000, kind()).prop_map(|(at_ms, kind)| Fault { at_ms, kind }),
        0..4,
    )
    .prop_map(|mut v| {
        v.sort();
        FaultSchedule(v)
    })
}

/// 32 cases from a fixed proptest seed, so CI is repeatable; set
/// `PROPTEST_RNG_SEED` (and `PROPTEST_CASES`) to explore other schedules.
fn config() -> Config {
    let mut c = Config {
        cases: 32,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/schedules.txt",
        ))),
        ..Config::default()
    };
    if std::env::var_os("PROPTEST_RNG_SEED").is_none() {
        c.rng_seed = RngSeed::Fixed(0x7e7e_5157);
    }
    if std::env::var_os("PROPTEST_CASES").is_some() {
        c.cases = Config::default().cases;
    }
    c
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn no_schedule_breaks_an_invariant(
        which in 0..scenario::all().len(),
        seed in any::<u64>().no_shrink(),
        faults in schedule(),
    ) {
        let s = scenario::all().swap_remove(which);
        let name = s.name;
        // The scenario's own faults (e.g. the early cancel) stay.
        let mut all = s.fixed.0.clone();
        all.extend(faults.0);
        all.sort();
        let faults = FaultSchedule(all);
        let report = run(&s, seed, &faults, Variant::Real);
        prop_assert!(
            report.violations.is_empty(),
            "{name} seed {seed} {faults}: {:?}",
            report.violations
        );
    }
}
