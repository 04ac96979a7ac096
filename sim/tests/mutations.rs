//! Each deliberately broken variant is caught by the explorer within 200
//! seeds, and its failing schedule shrinks to at most 3 faults (4 where a
//! test says why). (The variants exist only with the `mutations` feature,
//! which the tests turn on through the crate's dev-dependency on itself.)

use tether_sim::explore::{explore, Options};
use tether_sim::scenario;
use tether_sim::world::{run, Sim, Variant};

fn caught(variant: &str, scenarios: &[&str]) {
    caught_within(variant, scenarios, 3);
}

/// As [`caught`], with a schedule that shrinks to at most `max_faults`.
fn caught_within(variant: &str, scenarios: &[&str], max_faults: usize) {
    let variant = Variant::parse(variant).unwrap();
    let scenarios: Vec<_> = scenarios
        .iter()
        .map(|n| scenario::by_name(n).unwrap())
        .collect();
    let opts = Options {
        seeds: 200,
        jobs: 2,
        stop_at_first: true,
        shrink_first: 1,
        ..Options::default()
    };
    let summary = explore(&scenarios, &opts, &Sim(variant));
    let failure = summary
        .failures
        .iter()
        .find(|f| f.shrunk.is_some())
        .unwrap_or_else(|| panic!("{variant:?} was not caught:\n{}", summary.table()));
    let shrunk = failure.shrunk.as_ref().unwrap();
    assert!(
        shrunk.len() <= max_faults,
        "{variant:?}: shrunk schedule has {} faults:\n{}",
        shrunk.len(),
        failure.render()
    );
    eprintln!("{variant:?} caught:\n{}", failure.render());
}

/// Caught fast, not by the run's end: the driver stops a client whose
/// timers stay due after it handled them (`Driver::check_timers`), and
/// the run reports the driver's error.
#[test]
fn a_client_whose_timer_spins_is_caught() {
    caught("reaper-spins", &["reaper"]);
}

#[test]
fn cancel_that_only_signals_the_process_group_is_caught() {
    caught("cancel-pgid-only", &["cancel_escapes"]);
}

#[test]
fn resubmit_with_a_new_request_id_is_caught() {
    caught("resubmit-new-id", &["happy", "reply_lost"]);
}

#[test]
fn transport_error_taken_for_kernel_death_is_caught() {
    caught("transport-error-is-death", &["happy", "reply_lost"]);
}

/// Caught by the fail-open check alone: a cell that must be refused with
/// the reason ran without a kernel.
#[test]
fn falling_back_with_the_fallback_off_is_caught() {
    caught("fallback-when-off", &["fail_open"]);
}

/// Caught by the side effects' count: a plain exec whose reply was lost
/// ran, and ran again.
#[test]
fn a_plain_exec_sent_again_is_caught() {
    caught("plain-exec-resent", &["fail_open"]);
}

/// Caught by the ground truth of boots: a daemon killed by a boot that
/// changed the boot id was reported only dead.
#[test]
fn a_reboot_taken_for_a_death_is_caught() {
    caught(
        "reboot-taken-for-death",
        &["sandbox_bounce", "sandbox_replaced"],
    );
}

/// Caught by the ground truth of starts (`started_after_cancel`), under
/// the fault that holds a shim until a cancel lands
/// (`CancelPoint::BeforeCellStarts`): ended once it runs, the cell would
/// otherwise pass as cancelled.
#[test]
fn a_shim_that_starts_a_cancelled_cell_is_caught() {
    caught("shim-ignores-tombstone", &["cancel_early", "happy"]);
}

/// Caught by the journal's numbering (a removed journal is judged too),
/// where the disk fills as a result and its `done` are appended as one
/// batch and the write tears after the result (`full_disk`'s fixed
/// `disk_full` at a result, in a world whose writes tear).
#[test]
fn a_journal_that_writes_whole_torn_entries_again_is_caught() {
    caught("journal-rewrites-clean-tear", &["full_disk"]);
}

/// Caught by the count of runs (`once` ran twice), where the machine is
/// replaced between the submit's end and its reply (`ReplacedAfterOp`).
#[test]
fn an_io_error_taken_for_an_unsent_submit_is_caught() {
    caught("io-error-taken-as-unsent", &["replaced_mid_submit"]);
}

/// Caught by the cell's output and the background log (lines the shim
/// read after the cell was complete but before it resolved went to the
/// log), where a background child prints as the drain bound passes and
/// the shim's poll wakes late (`drawn`'s edge printers, a world with
/// timer slack).
#[test]
fn a_shim_that_skips_its_final_read_is_caught() {
    caught("shim-skips-final-read", &["drawn"]);
}

/// Caught by the sandbox's check of every idle exit's announcement,
/// where the disk fills as the daemon writes it (`idle_exit`'s fixed
/// `disk_full_at_write` of `exiting`). The shrinker stops at four faults
/// here: the fill and the clock jumps that make the daemon idle while
/// it lasts (one jump would do; removing them one at a time finds no
/// path down to it).
#[test]
fn an_idle_exit_without_its_announcement_is_caught() {
    caught_within("idle-exit-unannounced", &["idle_exit"], 4);
}

#[test]
fn the_real_product_passes_where_the_variants_fail() {
    for name in ["cancel_escapes", "happy", "reply_lost", "fail_open"] {
        let s = scenario::by_name(name).unwrap();
        for seed in 0..3 {
            let r = run(&s, seed, &s.schedule(seed), Variant::Real);
            assert!(r.violations.is_empty(), "{name} {seed}: {:?}", r.violations);
        }
    }
}
