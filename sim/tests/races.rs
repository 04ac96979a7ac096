//! Every reviewer race under `sim/races/` (the corpus built into the
//! binary, which `tether-sim explore` replays too) passes.

use tether_sim::corpus;
use tether_sim::explore::Shard;
use tether_sim::scenario;
use tether_sim::world::Variant;

#[test]
fn every_race_file_passes() {
    let summary = corpus::replay(&scenario::all(), Shard { k: 1, n: 1 }, Variant::Real, false);
    assert_eq!(summary.replayed, corpus::entries().len());
    let failures: String = summary.failures.iter().map(|f| f.render()).collect();
    assert!(failures.is_empty(), "{failures}");
}
