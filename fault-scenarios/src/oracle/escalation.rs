//! How a kernel daemon ends processes, judged on the simulated OS's
//! signal log (the host fills the observations; `sim/src/sandbox/
//! escalation.rs`):
//!
//! - a cancel (asked for, a timeout, a killed shim) sends TERM, and STOP
//!   or KILL only once the grace period has passed: a cell that traps
//!   TERM to clean up gets the grace its caller configured, whatever the
//!   scenario and wherever the cancel lands;
//! - a daemon that caught SIGTERM (`docker stop`, a host shutdown) starts
//!   no cell after it: it stops the kernel, and a cell it started would
//!   run in a kernel that is going away (or, ignored, the TERM would leave
//!   the kernel running for nobody);
//! - a shim starts no cell whose cancel was recorded before it looked:
//!   a cancel that lands before the cell starts keeps it from running.

use super::{Observations, Violation};

/// Adds a violation for each early kill and each cell a stopped daemon
/// started.
pub(super) fn check(obs: &Observations, v: &mut Vec<Violation>) {
    for detail in &obs.early_kills {
        v.push(Violation::KillBeforeGrace {
            detail: detail.clone(),
        });
    }
    for detail in &obs.started_after_term {
        v.push(Violation::StartedAfterTerm {
            detail: detail.clone(),
        });
    }
    for detail in &obs.started_after_cancel {
        v.push(Violation::StartedAfterCancel {
            detail: detail.clone(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::super::check as check_all;
    use super::*;
    use tether_core::protocol::CellOutcome;

    fn quiet() -> Observations {
        Observations {
            liveness: Some(CellOutcome::Ok),
            finished: true,
            ..Observations::default()
        }
    }

    #[test]
    fn a_kill_before_the_grace_period_is_a_violation() {
        assert!(check_all(&quiet()).is_empty());
        let mut o = quiet();
        o.early_kills
            .push("daemon 7 sent KILL to 12 of sim#2 at 510 ms, 10 ms after its TERM".into());
        let v = check_all(&o);
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].kind(), "kill_before_grace");
        assert!(v[0].to_string().contains("sim#2"), "{}", v[0]);
    }

    #[test]
    fn a_cell_started_by_a_stopped_daemon_is_a_violation() {
        let mut o = quiet();
        o.started_after_term
            .push("daemon 7 caught SIGTERM at 500 ms and started 30 (shim) at 700 ms".into());
        let v = check_all(&o);
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].kind(), "started_after_term");
    }

    #[test]
    fn a_cell_started_though_cancelled_before_its_shim_looked_is_a_violation() {
        let mut o = quiet();
        o.started_after_cancel.push(
            "shim 30 started /r/kernels/k/cells/2 at 510 ms, its cancel recorded before it looked"
                .into(),
        );
        let v = check_all(&o);
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].kind(), "started_after_cancel");
    }
}
