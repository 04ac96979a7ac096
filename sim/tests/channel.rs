//! The channel in the simulation: the real client's multiplexer over a
//! simulated stream to core's channel server on the simulated sandbox.
//! Each channel fault is made to happen (counted by the sandbox where it
//! hit an open channel) and every run is judged by the oracle.

use tether_sim::faults::{Fault, FaultKind, FaultSchedule, OpTarget};
use tether_sim::scenario;
use tether_sim::swarm::World;
use tether_sim::world::{run_in, Variant};

/// Runs `scenario` on the channel in its classic world with `faults`;
/// the counts of what happened on the channel.
fn on_channel(
    name: &str,
    seed: u64,
    faults: Vec<(u64, FaultKind)>,
) -> std::collections::BTreeMap<String, u64> {
    let s = scenario::by_name(name).unwrap();
    let world = World {
        channel: true,
        ..World::classic(&s)
    };
    let mut schedule = s.fixed.0.clone();
    schedule.extend(
        faults
            .into_iter()
            .map(|(at_ms, kind)| Fault { at_ms, kind }),
    );
    schedule.sort();
    let schedule = FaultSchedule(schedule);
    let report = run_in(&s, seed, &world, &schedule, Variant::Real);
    assert!(
        report.violations.is_empty(),
        "{name} seed {seed} {schedule}: {:?}\n{}",
        report.violations,
        report.trace
    );
    report.channel
}

#[test]
fn without_faults_the_ops_ride_the_channel_and_it_closes_when_the_client_is_done() {
    for name in ["happy", "state", "python_state", "cancel_escapes"] {
        let counts = on_channel(name, 1, vec![]);
        assert_eq!(counts.get("opened"), Some(&1), "{name}: {counts:?}");
        assert!(
            counts.get("ops").copied().unwrap_or(0) >= 2,
            "{name}: {counts:?}"
        );
    }
}

#[test]
fn each_channel_fault_happens_and_the_oracle_passes_it() {
    // Each fault with a size that grows with the run's index `i`.
    type Sized = Box<dyn Fn(u64) -> FaultKind>;
    let kinds: Vec<(&str, Sized)> = vec![
        (
            "cut",
            Box::new(|i| FaultKind::ChannelCut {
                at_permille: (i * 137 % 1_000) as u16,
            }),
        ),
        (
            "half_open",
            Box::new(|i| FaultKind::ChannelHalfOpen {
                for_ms: 300 + i * 700,
            }),
        ),
        (
            "stalled",
            Box::new(|i| FaultKind::ChannelStall {
                for_ms: 500 + i * 900,
            }),
        ),
        (
            "late_reply",
            Box::new(|i| FaultKind::ChannelLateReply { ms: 500 + i * 900 }),
        ),
        (
            "reorder",
            Box::new(|i| FaultKind::ChannelReorder {
                hold_ms: 100 + i * 600,
            }),
        ),
    ];
    for (what, kind) in &kinds {
        let mut hit = 0;
        for i in 0..10u64 {
            let at = 200 + i * 250;
            let counts = on_channel("state", i, vec![(at, kind(i))]);
            hit += u64::from(counts.get(*what).copied().unwrap_or(0) > 0);
        }
        assert!(hit >= 5, "{what} hit an open channel in {hit} of 10 runs");
    }
}

#[test]
fn the_faults_aimed_at_ops_hit_ops_on_the_channel_too() {
    // A lost reply ends the stream before it (as a one-shot exec's
    // connection closes); a killed op kills the channel process that
    // carries it; a damaged reply arrives in an intact frame and is
    // retried. Each once, the cell run once, its output whole.
    for (fault, what) in [
        (
            FaultKind::ReplyLost {
                op: OpTarget::Submit,
            },
            "reply_lost",
        ),
        (FaultKind::ReplyLost { op: OpTarget::Wait }, "reply_lost"),
        (
            FaultKind::KillOp {
                op: OpTarget::Submit,
            },
            "killed",
        ),
        (FaultKind::KillOp { op: OpTarget::Wait }, "killed"),
        (
            FaultKind::DamageReply {
                op: OpTarget::Submit,
                at_permille: 500,
                flip: 4,
            },
            "damaged",
        ),
        (
            FaultKind::DamageReply {
                op: OpTarget::Wait,
                at_permille: 300,
                flip: 0,
            },
            "damaged",
        ),
    ] {
        for name in ["state", "python_state"] {
            let counts = on_channel(name, 1, vec![(0, fault.clone())]);
            assert_eq!(counts.get(what), Some(&1), "{name} {fault:?}: {counts:?}");
        }
    }
}
