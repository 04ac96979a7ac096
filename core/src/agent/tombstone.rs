//! A cell's tombstone: the `cancel` file in its directory, written by
//! whoever cancels the cell (the cancel op, the daemon on a timeout or for
//! an orphaned shim, a fresh daemon for cells its predecessor never
//! started) and read by the shim before the cell starts (a tombstone that
//! got there first means the code never runs) and when it resolves (the
//! reason names the outcome). Written with `O_EXCL`: the first reason wins.

use super::layout::CellLayout;
use super::os::{Os, OsError};
use crate::ids::RequestId;
use crate::protocol::CellOutcome;

/// Why a cell was cancelled (the text of its tombstone).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CancelReason {
    /// The client asked.
    Requested,
    /// Its timeout passed.
    Timeout,
    /// The kernel's daemon was told to stop (SIGTERM: `docker stop`, a
    /// host shutdown) and took its cells with it.
    Stopped,
}

impl CancelReason {
    /// The tombstone's text.
    pub fn as_bytes(self) -> &'static [u8] {
        match self {
            CancelReason::Requested => b"cancel\n",
            CancelReason::Timeout => b"timeout\n",
            CancelReason::Stopped => b"stopped\n",
        }
    }

    /// Reads a tombstone's text: anything but `timeout` is a request (an
    /// unreadable tombstone still cancels).
    pub fn parse(text: &[u8]) -> CancelReason {
        if text.starts_with(b"timeout") {
            CancelReason::Timeout
        } else if text.starts_with(b"stopped") {
            CancelReason::Stopped
        } else {
            CancelReason::Requested
        }
    }

    /// The outcome of a cell cancelled for this reason.
    pub fn outcome(self) -> CellOutcome {
        match self {
            CancelReason::Requested => CellOutcome::Cancelled,
            CancelReason::Timeout => CellOutcome::TimedOut,
            CancelReason::Stopped => CellOutcome::Error {
                message: STOPPED.into(),
            },
        }
    }
}

/// Why a cell of a stopped kernel did not finish.
pub const STOPPED: &str = "the kernel was stopped (its daemon got SIGTERM) before this cell finished; the kernel's state is lost";

/// The tombstone of a cell, if there is one.
pub fn read(os: &dyn Os, cell: &CellLayout) -> Option<CancelReason> {
    os.read_file(&cell.cancel())
        .ok()
        .map(|t| CancelReason::parse(&t))
}

/// Lays the tombstone of `cell` for `reason`. One that is already there
/// stays (its reason wins) and is not an error.
pub fn write(os: &mut dyn Os, cell: &CellLayout, reason: CancelReason) -> Result<(), OsError> {
    write_for(os, cell, reason, None)
}

/// [`write`], naming the request the client submits the cell as (a
/// second line), when the cancel knows it: laid before the submission,
/// it cancels that request's cell only (see [`request`]).
pub fn write_for(
    os: &mut dyn Os,
    cell: &CellLayout,
    reason: CancelReason,
    request: Option<&RequestId>,
) -> Result<(), OsError> {
    let mut text = reason.as_bytes().to_vec();
    if let Some(r) = request {
        text.extend_from_slice(r.0.as_bytes());
        text.push(b'\n');
    }
    match os.create_new(&cell.cancel(), &text) {
        Ok(()) | Err(OsError::AlreadyExists) => Ok(()),
        Err(e) => Err(e),
    }
}

/// The request a tombstone was laid for, if it names one.
pub fn request(os: &dyn Os, cell: &CellLayout) -> Option<RequestId> {
    let text = os.read_file(&cell.cancel()).ok()?;
    let text = String::from_utf8_lossy(&text);
    let id = text.lines().nth(1)?.trim();
    (!id.is_empty()).then(|| RequestId(id.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_round_trip_and_unknown_text_is_a_request() {
        for r in [
            CancelReason::Requested,
            CancelReason::Timeout,
            CancelReason::Stopped,
        ] {
            assert_eq!(CancelReason::parse(r.as_bytes()), r);
        }
        assert_eq!(CancelReason::parse(b""), CancelReason::Requested);
        assert_eq!(CancelReason::Timeout.outcome(), CellOutcome::TimedOut);
    }
}
