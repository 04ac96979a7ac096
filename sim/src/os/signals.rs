//! Signal delivery by disposition: KILL always kills (stopped or not), STOP
//! freezes and CONT thaws, a catchable signal is dropped when ignored, kept
//! pending while the target is stopped, runs a shell trap when trapped, and
//! otherwise terminates. A frozen sandbox (see [`super::freeze`]) keeps
//! catchable signals pending as a stopped process does. Pid 1 takes no signal it has no handler for (as
//! inside a pid namespace); a zombie takes none at all.

use super::events::ProcEventKind;
use super::process::{Disposition, ExitStatus, Program, RunState};
use super::SimOs;
use std::fmt;
use tether_core::agent::{OsError, Pid, Signal};

/// The signals the simulation knows (the agent's, plus what the kernel
/// itself sends).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SimSignal {
    /// SIGHUP (an orphaned stopped group).
    Hup,
    /// SIGINT.
    Int,
    /// SIGKILL.
    Kill,
    /// SIGPIPE (a write to a pipe without a reader).
    Pipe,
    /// SIGTERM.
    Term,
    /// SIGCONT.
    Cont,
    /// SIGSTOP.
    Stop,
}

impl SimSignal {
    /// The Linux signal number.
    pub fn number(self) -> i32 {
        match self {
            SimSignal::Hup => 1,
            SimSignal::Int => 2,
            SimSignal::Kill => 9,
            SimSignal::Pipe => 13,
            SimSignal::Term => 15,
            SimSignal::Cont => 18,
            SimSignal::Stop => 19,
        }
    }
}

impl From<Signal> for SimSignal {
    fn from(s: Signal) -> SimSignal {
        match s {
            Signal::Int => SimSignal::Int,
            Signal::Term => SimSignal::Term,
            Signal::Stop => SimSignal::Stop,
            Signal::Cont => SimSignal::Cont,
            Signal::Kill => SimSignal::Kill,
        }
    }
}

impl fmt::Display for SimSignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SimSignal::Hup => "HUP",
            SimSignal::Int => "INT",
            SimSignal::Kill => "KILL",
            SimSignal::Pipe => "PIPE",
            SimSignal::Term => "TERM",
            SimSignal::Cont => "CONT",
            SimSignal::Stop => "STOP",
        })
    }
}

/// What a delivered signal did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SignalEffect {
    /// The process died of it.
    Killed,
    /// Its disposition is "ignore".
    Ignored,
    /// A shell trap will run.
    Trapped,
    /// The process is now stopped.
    Stopped,
    /// The process runs again.
    Continued,
    /// Kept until the stopped process continues.
    Pending,
    /// Nothing to do (a zombie, pid 1, STOP to a stopped process, …).
    NoEffect,
}

impl fmt::Display for SignalEffect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SignalEffect::Killed => "killed",
            SignalEffect::Ignored => "ignored",
            SignalEffect::Trapped => "trapped",
            SignalEffect::Stopped => "stopped",
            SignalEffect::Continued => "continued",
            SignalEffect::Pending => "pending",
            SignalEffect::NoEffect => "no effect",
        })
    }
}

impl SimOs {
    /// Sends `sig` from `from` (0: the kernel) to `to`.
    pub(crate) fn deliver(
        &mut self,
        from: Pid,
        to: Pid,
        sig: SimSignal,
    ) -> Result<SignalEffect, OsError> {
        let effect = self.apply(to, sig)?;
        self.log(ProcEventKind::Signal {
            from,
            to,
            signal: sig,
            effect,
        });
        Ok(effect)
    }

    pub(crate) fn apply(&mut self, to: Pid, sig: SimSignal) -> Result<SignalEffect, OsError> {
        let frozen = self.is_frozen();
        let Some(p) = self.procs.get_mut(&to) else {
            return Err(OsError::NotFound);
        };
        if !p.alive() || matches!(p.program, Program::Init) {
            return Ok(SignalEffect::NoEffect);
        }
        match sig {
            SimSignal::Kill => {
                self.exit_proc(to, ExitStatus::Signaled(SimSignal::Kill));
                Ok(SignalEffect::Killed)
            }
            SimSignal::Stop => {
                if p.state == RunState::Stopped {
                    return Ok(SignalEffect::NoEffect);
                }
                p.state = RunState::Stopped;
                Ok(SignalEffect::Stopped)
            }
            SimSignal::Cont => {
                if p.state != RunState::Stopped {
                    return Ok(SignalEffect::NoEffect);
                }
                p.state = RunState::Running;
                let pending = std::mem::take(&mut p.pending);
                for s in pending {
                    // Applied in arrival order; a kill ends the list.
                    if self.apply(to, s)? == SignalEffect::Killed {
                        break;
                    }
                }
                Ok(SignalEffect::Continued)
            }
            SimSignal::Hup | SimSignal::Int | SimSignal::Pipe | SimSignal::Term => {
                let disposition = match sig {
                    SimSignal::Term => p.term.clone(),
                    SimSignal::Int => p.int.clone(),
                    SimSignal::Hup => p.hup.clone(),
                    _ => Disposition::Default,
                };
                if disposition == Disposition::Ignore {
                    return Ok(SignalEffect::Ignored);
                }
                // A frozen process takes a catchable signal when it thaws.
                if p.state == RunState::Stopped || frozen {
                    if !p.pending.contains(&sig) {
                        p.pending.push(sig);
                    }
                    return Ok(SignalEffect::Pending);
                }
                if sig == SimSignal::Int && disposition == Disposition::Default && p.int_handler {
                    // Python's handler: KeyboardInterrupt when the
                    // interpreter next runs (if it is running a cell).
                    p.int_pending = true;
                    return Ok(SignalEffect::Trapped);
                }
                match disposition {
                    Disposition::Trap(_) => {
                        // Only shells install traps; the shell runs it when
                        // it next gets to run a command.
                        p.trap_pending = true;
                        Ok(SignalEffect::Trapped)
                    }
                    _ => {
                        // bash catches fatal signals to run its EXIT trap
                        // before it dies of them; dash does not.
                        let trap = match &mut p.program {
                            Program::Shell(shell) if shell.bash && sig != SimSignal::Pipe => {
                                shell.take_exit_trap()
                            }
                            _ => None,
                        };
                        if let Some(text) = trap {
                            let out = p.stdout;
                            self.write_fd(to, out, text.as_bytes());
                        }
                        self.exit_proc(to, ExitStatus::Signaled(sig));
                        Ok(SignalEffect::Killed)
                    }
                }
            }
        }
    }
}
