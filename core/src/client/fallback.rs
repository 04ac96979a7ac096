//! Fail open: when no kernel can start on the sandbox for a reason a retry
//! will not fix (the agent cannot be installed or cannot run there, no
//! `python3` for a Python kernel), a cell that was never submitted runs once
//! as a plain exec of the backend instead of failing, and says so
//! ([`Event::RanWithoutKernel`]).
//!
//! Exactly once still holds: only a cell no agent ever saw falls back (a
//! kernel that never started accepted nothing), it leaves the kernel's
//! record first (so no resume submits it to a kernel later), and its exec is
//! never re-sent — after a transport error it may have run, and without a
//! journal nothing could tell, so the cell is `unknown`.

use super::event::{CellKey, Event, TransportError, TransportErrorKind};
use super::retry::Task;
use super::timer::Timer;
use super::Client;
use crate::ids::KernelName;
use crate::protocol::{CellOutcome, ExecOutput, Op, Stream};
use crate::time::Timestamp;

impl Client {
    /// The kernel cannot start, for good: its never-submitted cells run
    /// without it (when [`super::Config::fallback`] allows), the others
    /// fail with the reason.
    pub(crate) fn kernel_cannot_start(&mut self, name: &KernelName, why: String) {
        let mut fresh = Vec::new();
        #[cfg(feature = "mutations")]
        let off_anyway = crate::mutation::active(crate::mutation::Mutation::FallbackWhenOff);
        #[cfg(not(feature = "mutations"))]
        let off_anyway = false;
        if self.config.fallback || off_anyway {
            if let Some(k) = self.kernels.get_mut(name) {
                for (seq, cell) in &mut k.cells {
                    if !cell.resolved && !cell.resumed && !cell.rec.submitted {
                        cell.fallback = true;
                        fresh.push(CellKey {
                            kernel: name.clone(),
                            seq: *seq,
                        });
                    }
                }
            }
        }
        self.kernel_failed(name, why.clone());
        for key in fresh {
            // A shell cell with a NUL byte runs without a kernel no more
            // than with one: an argv ends at the NUL (a backend refuses
            // it, or hands the shell the part before it).
            let shell_code = self
                .kernels
                .get(&key.kernel)
                .filter(|k| k.lang == crate::protocol::Lang::Shell)
                .and_then(|k| k.cells.get(&key.seq))
                .map(|c| c.rec.code.clone());
            if let Some(message) =
                shell_code.and_then(|code| crate::agent::shell::unrunnable(code.as_slice()))
            {
                self.resolve(&key, CellOutcome::Error { message }, false);
                continue;
            }
            // The plain exec's deadline is the cell's timeout.
            self.timers.stop(&Timer::CellTimeout(key.clone()));
            self.events.push_back(Event::RanWithoutKernel {
                cell: key.clone(),
                reason: why.clone(),
            });
            self.start(Task::Fallback(key));
        }
        self.persist(name);
    }

    /// The plain exec that carries a fallen-back cell.
    pub(crate) fn plain_op(&self, key: &CellKey) -> Option<Op> {
        let k = self.kernels.get(&key.kernel)?;
        let cell = k.cells.get(&key.seq).filter(|c| !c.resolved)?;
        Some(Op::Plain {
            lang: k.lang,
            code: cell.rec.code.clone(),
        })
    }

    /// When a fallen-back cell's exec is given up on: its own timeout, or
    /// [`super::Config::fallback_limit`].
    pub(crate) fn plain_deadline(&self, key: &CellKey) -> Timestamp {
        let limit = self
            .cell(key)
            .and_then(|c| c.rec.timeout_ms)
            .map_or(self.config.fallback_limit, std::time::Duration::from_millis);
        self.now + limit
    }

    /// A fallen-back cell's exec finished (or failed to): its output and
    /// status are the cell's.
    pub(crate) fn on_plain_exec(
        &mut self,
        key: &CellKey,
        result: Result<ExecOutput, TransportError>,
    ) {
        self.drop_task(&Task::Fallback(key.clone()));
        let timed = self.cell(key).is_some_and(|c| c.rec.timeout_ms.is_some());
        let outcome = match result {
            Ok(out) => {
                for (n, stream, data) in [
                    (1, Stream::Stdout, out.stdout),
                    (2, Stream::Stderr, out.stderr),
                ] {
                    if !data.is_empty() {
                        self.events.push_back(Event::Output {
                            cell: key.clone(),
                            n,
                            stream,
                            data: crate::bytes::Bytes(data),
                        });
                    }
                }
                match out.exit_code {
                    0 => CellOutcome::Ok,
                    code => CellOutcome::Exit { code },
                }
            }
            Err(e) if e.kind == TransportErrorKind::TimedOut && timed => {
                self.note(
                    Some(key.kernel.clone()),
                    format!("cell {key} ran past its timeout without a kernel; tether cannot stop what a plain exec started, it may still run"),
                );
                CellOutcome::TimedOut
            }
            Err(e) => CellOutcome::Unknown {
                reason: format!(
                    "the plain exec (no kernel) failed and is not sent again, it may have run: {e}"
                ),
            },
        };
        self.resolve(key, outcome, false);
    }
}
