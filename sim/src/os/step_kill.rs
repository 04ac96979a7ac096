//! The fault `kill_after_write` as every process's step meets it: the
//! shim, daemon tick or op whose step next writes the armed file (its
//! cgroup record, a journal append, a launch record, a spawn named as a
//! write) stops right after that write. Nothing it would do after lands:
//! every later call of that step that changes the world is refused, the
//! step runs to its end with nothing of it seen, and the sandbox kills
//! its process ([`SimOs::take_stopped_at_write`]). A real process killed
//! there (an OOM kill, a `kill -9`) leaves the same: a journal holding
//! `done` without its flag, a cell's shim started and its launch not
//! recorded.
//!
//! On the simulated OS and not by a preemption ([`super::preempt`]): a
//! step run on a thread of its own costs far more than one run directly,
//! and an armed kill waits seconds for its write.

use super::process::Role;
use super::SimOs;
use tether_core::agent::{OsError, Pid};

/// The fault as the simulated OS holds it.
#[derive(Debug, Default)]
pub(crate) struct StepKill {
    /// Armed: the start of the file name whose write stops its writer.
    armed: Option<String>,
    /// The process stopped so, and the name it wrote, until the sandbox
    /// takes it.
    stopped: Option<(Pid, String)>,
}

impl SimOs {
    /// Arms (or, with `None`, disarms) the fault for the steps that run
    /// next. The sandbox arms it before each run of the processes, each
    /// daemon tick and each op step, from the one arming the fault made.
    pub fn arm_kill_after_write(&mut self, name: Option<String>) {
        self.step_kill.armed = name;
    }

    /// A write of `path` by the current process is done: a shim, daemon
    /// or op that meets the armed name stops here.
    pub(super) fn note_write(&mut self, path: &str) {
        let Some(armed) = &self.step_kill.armed else {
            return;
        };
        let name = path.rsplit('/').next().unwrap_or(path);
        let agent = self.procs.get(&self.current).is_some_and(|p| {
            p.alive() && matches!(p.role, Role::Shim | Role::Daemon { .. } | Role::Exec)
        });
        if agent && name.starts_with(armed.as_str()) {
            self.step_kill.stopped = Some((self.current, armed.clone()));
            self.step_kill.armed = None;
        }
    }

    /// Is `pid` stopped after its write, not yet killed?
    pub(crate) fn stopped_at_write(&self, pid: Pid) -> bool {
        self.step_kill
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
        if self.stopped_at_write(pid) {
            return None;
        }
        let step = poll(self);
        (!self.stopped_at_write(pid)).then_some(step)
    }

    /// A call that would change the world, made by a process stopped
    /// after its write: refused (it is dying; nothing of it lands).
    pub(super) fn refuse_if_stopped(&self) -> Result<(), OsError> {
        if self.stopped_at_write(self.current) {
            return Err(OsError::Other("the process was killed".into()));
        }
        Ok(())
    }

    /// The process stopped after its write, and the name it wrote: the
    /// sandbox kills it now (and disarms the fault).
    pub fn take_stopped_at_write(&mut self) -> Option<(Pid, String)> {
        self.step_kill.stopped.take()
    }
}
