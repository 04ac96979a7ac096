//! Deliberately broken variants of the product, for proving that the
//! simulation's explorer catches them. Compiled only with the `mutations`
//! feature, which only the simulation's tests enable: release builds of the
//! product have no switch at all.
//!
//! A variant is switched on per thread (the simulated world runs on one
//! thread) with [`activate`]; the code under test asks [`active`].

use std::cell::Cell;

/// A deliberate bug.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mutation {
    /// Cancel signals only the cell's process group (`kill -PGID`), nothing
    /// that left it.
    CancelPgidOnly,
    /// After an uncertain send, the client submits the cell again under a
    /// new request id (and a new sequence number).
    ResubmitNewId,
    /// The client takes a transport error for the kernel's death.
    TransportErrorIsDeath,
    /// The kernel daemon exits at SIGTERM without stopping what it owns
    /// (the shims and the interpreter run on, orphaned).
    DaemonExitsAtTerm,
    /// A kernel that cannot start runs its cells without it even when the
    /// caller turned the fallback off.
    FallbackWhenOff,
    /// A plain exec (fail open) that failed in transport is sent again,
    /// though it may have run.
    PlainExecResent,
    /// A cancel's STOP + KILL come on the tick after its TERM, not after
    /// the grace period.
    KillBeforeGrace,
    /// The kernel daemon ignores SIGTERM: it runs on, and starts cells.
    DaemonIgnoresTerm,
    /// A shell cell whose shim is gone once it journaled the result (a
    /// cancel's settle) is taken for one whose shim was killed before the
    /// cell ended: the next cell says its state was not kept.
    NoteKeptStateLost,
    /// A probe takes a daemon of another boot for one that merely died:
    /// the client never hears that the sandbox was replaced.
    RebootTakenForDeath,
    /// The client's reaper does nothing when its timer fires, which stays
    /// due: the driver wakes again at once, for ever, without time passing.
    ReaperSpins,
    /// A shell cell's shim does not look for a tombstone before it starts
    /// the cell: a cancel recorded after the daemon launched the shim is
    /// seen only once the cell runs.
    ShimIgnoresTombstone,
    /// The kernel daemon counts itself idle while it still escalates a
    /// cancel of a finished cell's leftovers: an idle timeout below the
    /// grace period ends the cancel's grace early.
    IdleDuringCancel,
    /// A journal writer refused on a full disk forgets the entries the
    /// failed append put down whole unless it also left a partial line:
    /// after a tear on a line boundary it writes them again.
    JournalRewritesCleanTear,
    /// The client takes an exec that failed with an I/O error (a
    /// connection that broke after the command was sent) for one that
    /// never reached the sandbox: after a replaced sandbox it sends the
    /// cell again, though it may have run.
    IoErrorTakenAsUnsent,
    /// A shell cell's shim skips its last read of the pipes once the cell
    /// is complete: what they held then (a background child's output as
    /// the drain bound passed) is read while it lingers, into the
    /// kernel's background log, and the cell's output misses it.
    ShimSkipsFinalRead,
    /// A daemon whose idle-exit announcement could not be written (a
    /// full disk) exits anyway, unannounced: a submit racing the exit
    /// takes its cell for taken.
    IdleExitUnannounced,
}

thread_local! {
    static ACTIVE: Cell<Option<Mutation>> = const { Cell::new(None) };
}

/// Is `m` switched on for this thread?
pub fn active(m: Mutation) -> bool {
    ACTIVE.with(|a| a.get() == Some(m))
}

/// Switches `m` on for this thread until the guard drops.
pub fn activate(m: Option<Mutation>) -> Guard {
    let previous = ACTIVE.with(|a| a.replace(m));
    Guard { previous }
}

/// Restores the previous variant when dropped.
#[derive(Debug)]
pub struct Guard {
    previous: Option<Mutation>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        ACTIVE.with(|a| a.set(self.previous));
    }
}
