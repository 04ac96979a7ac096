//! Every reviewer race under `sim/races/` replays without a violation.

use tether_sim::race::{race_files, Race};
use tether_sim::scenario;
use tether_sim::world::{run_in, Variant};

#[test]
fn every_race_file_passes() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/races");
    let files = race_files(std::path::Path::new(dir)).unwrap();
    assert!(!files.is_empty(), "no race files in {dir}");
    for f in files {
        let race = Race::load(f.to_str().unwrap()).unwrap();
        let s = scenario::by_name(&race.scenario)
            .unwrap_or_else(|| panic!("{}: no scenario {}", f.display(), race.scenario));
        // In the world the file keeps, as `tether-sim race` replays it:
        // the seed's own world is drawn again by today's swarm, which may
        // have changed since the race was saved.
        let world = race.world_for(&s);
        let report = run_in(&s, race.seed, &world, &race.schedule, Variant::Real);
        assert!(
            report.violations.is_empty(),
            "{}: {:?}\n{}",
            f.display(),
            report.violations,
            report.trace
        );
    }
}
