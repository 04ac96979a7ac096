//! Fail open on docker (issue 10): a root on a `noexec` mount (docker
//! mounts the container's /dev/shm noexec) takes the agent's file but
//! cannot run it. The install says so, and the cell runs once as a plain
//! exec: its output and status are the command's, the kernel's record
//! never holds it, no kernel state is kept.

use tether::driver::DriverStats;
use tether::records::RecordStore;
use tether_core::client::Event;
use tether_core::protocol::{CellOutcome, Lang, OpKind};
use tether_live::backends::{self, skip};
use tether_live::container::Container;
use tether_live::harness::Live;

fn plain_execs(stats: &DriverStats) -> u64 {
    stats.execs.get(&OpKind::Plain).copied().unwrap_or(0)
}

#[tokio::test]
async fn docker_noexec_root_runs_the_cell_once_without_a_kernel() {
    let test = "docker_noexec_root_runs_the_cell_once_without_a_kernel";
    if let Err(why) = backends::docker() {
        skip(test, &why);
        return;
    }
    let c = Container::start("noexec");
    let mut live = Live::new(&c.spec(), "/dev/shm/tether");
    let run = live
        .run(
            "k",
            Lang::Shell,
            "echo ran >> /tmp/side; echo hi; X=1; exit 4",
        )
        .await;
    assert_eq!(run.outcome, CellOutcome::Exit { code: 4 }, "{run:?}");
    assert_eq!(run.out(), "hi\n", "{run:?}");
    let reason = run.events.iter().find_map(|e| match e {
        Event::RanWithoutKernel { reason, .. } => Some(reason.clone()),
        _ => None,
    });
    let reason = reason.unwrap_or_else(|| panic!("no ran_without_kernel event: {run:?}"));
    assert!(reason.contains("noexec"), "{reason}");
    assert_eq!(plain_execs(live.stats()), 1);
    let side = live.exec(&["cat", "/tmp/side"]).await;
    assert_eq!(side.stdout, b"ran\n", "ran exactly once");
    // No state is kept: the next cell falls back too and sees no X.
    let run = live.run("k", Lang::Shell, "echo \"[${X-}]\"").await;
    assert_eq!(run.out(), "[]\n", "{run:?}");
    let k = tether_core::ids::KernelName::new("k").unwrap();
    let record = live.store.load(&k).unwrap();
    assert!(
        record.is_none_or(|r| r.cells.is_empty()),
        "never in the record"
    );
}
