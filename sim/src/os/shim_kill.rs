//! The fault `kill_after_write` met by a shim: the shim whose step next
//! writes the armed file (its cgroup record, a journal append, a journal's
//! done flag, an orphan record) stops right after that write. Nothing it
//! would do after lands: every later call of that step that changes the
//! world is refused, its driver returns, and it is not run again until
//! the sandbox kills it with what a shim kill records
//! ([`SimOs::take_shim_stopped_at_write`]). A real shim killed there (an
//! OOM kill) leaves the same: a journal holding `done` without its flag,
//! a cgroup recorded with no cell started in it.
//!
//! Daemon ticks and op polls meet the same fault through their
//! preemption ([`super::preempt`]); shims run on the simulated OS's
//! internals, so they meet it here.

use super::process::Role;
use super::SimOs;
use tether_core::agent::{OsError, Pid};

/// The fault as the simulated OS holds it.
#[derive(Debug, Default)]
pub(crate) struct ShimKill {
    /// Armed: the start of the file name whose write stops its shim.
    armed: Option<String>,
    /// The shim stopped so, and the name it wrote, until the sandbox
    /// takes it.
    stopped: Option<(Pid, String)>,
}

impl SimOs {
    /// Arms (or, with `None`, disarms) the fault for the shims that run
    /// next. The sandbox arms it before each run of the processes, from
    /// the one arming that daemons and ops meet too.
    pub fn arm_shim_kill_after_write(&mut self, name: Option<String>) {
        self.shim_kill.armed = name;
    }

    /// A write of `path` by the current process is done: a shim that
    /// meets the armed name stops here.
    pub(super) fn note_shim_write(&mut self, path: &str) {
        let Some(armed) = &self.shim_kill.armed else {
            return;
        };
        let name = path.rsplit('/').next().unwrap_or(path);
        let shim = self
            .procs
            .get(&self.current)
            .is_some_and(|p| p.alive() && p.role == Role::Shim);
        if shim && name.starts_with(armed.as_str()) {
            self.shim_kill.stopped = Some((self.current, armed.clone()));
            self.shim_kill.armed = None;
        }
    }

    /// Is `pid` a shim stopped after its write, not yet killed?
    pub(crate) fn shim_stopped(&self, pid: Pid) -> bool {
        self.shim_kill
            .stopped
            .as_ref()
            .is_some_and(|(p, _)| *p == pid)
    }

    /// The shim `pid`'s machine's next step, `None` once the shim is
    /// stopped after its write (before the step, or by a write the step
    /// made): nothing after that write happens, and its driver returns.
    pub(super) fn step_unless_stopped<S>(
        &mut self,
        pid: Pid,
        poll: impl FnOnce(&mut SimOs) -> S,
    ) -> Option<S> {
        if self.shim_stopped(pid) {
            return None;
        }
        let step = poll(self);
        (!self.shim_stopped(pid)).then_some(step)
    }

    /// A call that would change the world, made by a shim stopped after
    /// its write: refused (the process is dying; nothing of it lands).
    pub(super) fn refuse_if_stopped(&self) -> Result<(), OsError> {
        if self.shim_stopped(self.current) {
            return Err(OsError::Other("the process was killed".into()));
        }
        Ok(())
    }

    /// The shim stopped after its write, and the name it wrote: the
    /// sandbox kills it now (and disarms the fault for daemons and ops).
    pub fn take_shim_stopped_at_write(&mut self) -> Option<(Pid, String)> {
        self.shim_kill.stopped.take()
    }
}
