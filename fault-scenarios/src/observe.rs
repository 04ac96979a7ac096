//! What a scenario's client saw ([`ClientLog`]), and how that becomes the
//! client's half of the oracle's [`Observations`].
//!
//! Shared by the simulation ([`crate::world`], whose client host fills
//! the log in virtual time) and the live runner (live-e2e, real time).
//! Time is an argument: each caller stamps events with its own clock.
//! The sandbox's half (ground truth: how often a cell ran, what it left
//! alive) is the caller's, because the two get it in genuinely different
//! ways (the simulated OS's books versus `ps` on a real machine).

use crate::oracle::{CallObs, CellObs, CellTruth, Observations};
use crate::scenario::{CellSpec, Scenario};
use crate::shell_model::Flavor;
use crate::workload::Step;
use std::collections::BTreeMap;
use tether::driver::DriverError;
use tether_core::client::{CellKey, Event};
use tether_core::protocol::{CellOutcome, Lang, Stream};

/// Every client call must return within this bound (the client gives up on
/// an unreachable sandbox after 15 s; cells run at most a few seconds).
pub const CALL_BUDGET_MS: u64 = 90_000;

/// What one scripted cell looked like from the client (across client
/// restarts).
#[derive(Clone, Debug, Default)]
pub struct CellSeen {
    /// Its key, once the client named it.
    pub key: Option<CellKey>,
    /// Output entries delivered: (n, stream, bytes).
    pub output: Vec<(u64, Stream, Vec<u8>)>,
    /// Every resolution reported.
    pub resolutions: Vec<CellOutcome>,
    /// When the script started it (ms).
    pub started_at: Option<u64>,
    /// When the client first said the agent took it (ms), or when a
    /// restarted client resumed it without having seen that: the script's
    /// cancel counts from here, so a slow install or spawn (a real
    /// backend's first cell) does not move the cancel before the cell's
    /// code runs.
    pub accepted_at: Option<u64>,
    /// When it was first resolved (ms).
    pub resolved_at: Option<u64>,
    /// When it was last resolved (ms): a resumed client resolves a cell
    /// it had written off again, with its final outcome.
    pub last_resolved_at: Option<u64>,
    /// The script (or a fault) asked to cancel it.
    pub cancel_requested: bool,
    /// When the agent's note that the interpreter died (and the kernel's
    /// namespace with it) was delivered for it (ms), if it was: a resumed
    /// client may deliver it long after the cell was written off.
    pub loss_noted_at: Option<u64>,
    /// The client delivered the agent's list of processes the cell left
    /// running when it resolved.
    pub leftovers_reported: bool,
    /// Bytes of output the client said the agent dropped at the journal's
    /// cap (`clipped`).
    pub clipped: u64,
    /// When the client resolved it as timed out (ms), if it did.
    pub timed_out_at: Option<u64>,
    /// It was cancelled while its submit was held back (live).
    pub cancelled_early: bool,
    /// No kernel could start, so it ran as a plain exec (fail open): the
    /// reason the client gave.
    pub ran_without_kernel: Option<String>,
    /// When the script first started it, its frontend had never seen a
    /// daemon of its kernel ready (see [`crate::oracle::CellObs::newcomer`]).
    pub newcomer: Option<bool>,
}

impl CellSeen {
    /// Stdout delivered, concatenated.
    pub fn stdout(&self) -> Vec<u8> {
        self.output
            .iter()
            .filter(|(_, s, _)| *s == Stream::Stdout)
            .flat_map(|(_, _, d)| d.iter().copied())
            .collect()
    }
}

/// What the agent's note says when a Python cell's interpreter died
/// (`ShimCore::finish_python`).
const LOSS_NOTE: &str = "the kernel's namespace is lost";

/// Whose records a client process works from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub enum Frontend {
    /// The script's own: every cell but a
    /// [`crate::scenario::CellSpec::second_client`] one.
    #[default]
    First,
    /// A second frontend beside it, with records of its own (another
    /// state directory) on the same sandbox and kernels.
    Second,
}

/// Everything the client saw.
#[derive(Clone, Debug, Default)]
pub struct ClientLog {
    /// Per cell label.
    pub cells: BTreeMap<String, CellSeen>,
    /// (frontend, key) → label: two frontends' records number their
    /// cells on their own (a number one was refused is the other's).
    pub labels: BTreeMap<(Frontend, CellKey), String>,
    /// The frontend whose call is under way: its events are its cells'.
    pub frontend: Frontend,
    /// The label of the cell being run.
    pub current: Option<String>,
    /// (name, start ms, end ms) of each call.
    pub calls: Vec<(String, u64, Option<u64>)>,
    /// When state lost was reported.
    pub state_lost: Vec<u64>,
    /// Each state-lost report: when, for which kernel, and the evidence
    /// if the client said the kernel was replaced (pid reused, another
    /// boot, another nonce).
    pub losses: Vec<(u64, String, Option<String>)>,
    /// When a daemon was reported ready, its pid and its kernel.
    pub ready: Vec<(u64, u32, String)>,
    /// The frontends that saw a daemon of a kernel ready, by kernel.
    pub ready_to: std::collections::BTreeSet<(Frontend, String)>,
    /// When a frontend that had never seen its kernel's daemon reported
    /// the kernel's state lost (a second frontend told how far the kernel
    /// ran before the fresh daemon it started): it knows no daemon, so
    /// not how the one before died.
    pub unseen_losses: Vec<u64>,
    /// When a frontend reported the state lost of a kernel the other
    /// frontend had evicted before (its cap or its reaper shut the kernel
    /// down: the reporter's record still held it).
    pub lost_to_other_frontend: Vec<u64>,
    /// Each eviction's frontend (`evictions` in the same order).
    pub evicted_by: Vec<Frontend>,
    /// The frontend each `ready` report went to (in the same order).
    pub ready_by: Vec<Frontend>,
    /// Driver errors (and, live, failed observations).
    pub errors: Vec<String>,
    /// The script ran to its end.
    pub finished: bool,
    /// The liveness cell's outcome.
    pub liveness: Option<CellOutcome>,
    /// When the client's reaper evicted a kernel (ms), and which.
    pub evictions: Vec<(u64, String)>,
    /// The evictions whose reason is the kernel cap (the least recently
    /// used beyond it), a subset of `evictions`.
    pub cap_evictions: Vec<(u64, String)>,
    /// When the script began its final shutdown (ms).
    pub shutdown_at: Option<u64>,
    /// When the script ran a cell on a kernel (ms), and which: a use that
    /// opens the kernel or counts as its latest use.
    pub kernel_uses: Vec<(u64, String)>,
    /// Kernels whose record the client still kept after the final
    /// shutdown.
    pub records_left: Vec<String>,
    /// The background logs the script read (`logs` op) once every fault
    /// had healed, by kernel: the bytes, or why the read failed.
    pub background: BTreeMap<String, Result<Vec<u8>, String>>,
    /// The tool calls the client reported answered (`tool_answered`: the
    /// journal says the answer reached the cell), by id.
    pub tool_answered: Vec<String>,
    /// Processes the client reported unkillable: (when, cell, pids).
    pub unkillable: Vec<(u64, CellKey, Vec<u32>)>,
    /// When a client process crashed (ms).
    pub crashes: Vec<u64>,
    /// The tool calls the last client process still counted as awaiting
    /// its frontend after the final shutdown.
    pub calls_awaiting_at_end: usize,
    /// Cells refused because another client record had run the kernel
    /// past the number the cell was sent under (a second frontend), and
    /// when; the script ran each again.
    pub refused_behind: Vec<(String, u64)>,
}

impl ClientLog {
    /// The label of the cell `key` names: the one it was first seen with,
    /// else the cell being run (if that has no key yet).
    ///
    /// A kernel evicted and opened again under its name (by a later
    /// client process, which never knew the old one's numbers) starts
    /// over at #1: a key whose cell was resolved (not `unknown`: that one
    /// a resume may still finish) names the cell being run now, whatever
    /// that cell's first event is: its acceptance, or a refusal with no
    /// acceptance before it (fail_open seed 200519: `plain_after`, refused
    /// with the fallback off, got `plain_hello`'s key `sim#1`).
    fn label_of(&mut self, key: &CellKey) -> Option<String> {
        let Some(l) = self.labels.get(&(self.frontend, key.clone())).cloned() else {
            return self.claim(key);
        };
        let resolved = self.cells.get(&l).is_some_and(|c| {
            c.resolutions
                .iter()
                .any(|o| !matches!(o, CellOutcome::Unknown { .. }))
        });
        if resolved {
            if let Some(now) = self.claim(key) {
                return Some(now);
            }
        }
        Some(l)
    }

    /// Names `key` after the cell `label`, queued with others at once
    /// ([`crate::scenario::Action::Together`]): the cell being run is not
    /// the only one whose events come.
    pub fn name(&mut self, label: &str, key: &CellKey) {
        self.labels
            .insert((self.frontend, key.clone()), label.to_owned());
        self.cells.entry(label.to_owned()).or_default().key = Some(key.clone());
    }

    /// Names `key` after the cell being run, if that has no key yet.
    fn claim(&mut self, key: &CellKey) -> Option<String> {
        let current = self.current.clone()?;
        if self.cells.get(&current).is_some_and(|c| c.key.is_some()) {
            return None;
        }
        self.labels
            .insert((self.frontend, key.clone()), current.clone());
        self.cells.entry(current.clone()).or_default().key = Some(key.clone());
        Some(current)
    }

    /// Takes one event of the driver, seen at `now_ms`.
    pub fn on_event(&mut self, now_ms: u64, event: &Event) {
        match event {
            Event::StateLost { kernel, .. } => {
                self.state_lost.push(now_ms);
                self.losses.push((now_ms, kernel.as_str().to_owned(), None));
                let by_other = self
                    .evictions
                    .iter()
                    .zip(&self.evicted_by)
                    .any(|((_, k), f)| k == kernel.as_str() && *f != self.frontend);
                if by_other {
                    self.lost_to_other_frontend.push(now_ms);
                }
                if !self
                    .ready_to
                    .contains(&(self.frontend, kernel.as_str().to_owned()))
                {
                    self.unseen_losses.push(now_ms);
                }
            }
            Event::KernelReplaced { kernel, evidence } => {
                if let Some(loss) = self
                    .losses
                    .iter_mut()
                    .rev()
                    .find(|l| l.1 == kernel.as_str())
                {
                    loss.2 = Some(evidence.clone());
                }
            }
            Event::KernelReady {
                kernel, identity, ..
            } => {
                self.ready
                    .push((now_ms, identity.pid, kernel.as_str().to_owned()));
                self.ready_by.push(self.frontend);
                self.ready_to
                    .insert((self.frontend, kernel.as_str().to_owned()));
            }
            Event::KernelEvicted { kernel, reason } => {
                self.evictions.push((now_ms, kernel.as_str().to_owned()));
                self.evicted_by.push(self.frontend);
                if reason.contains(CAP_REASON) {
                    self.cap_evictions
                        .push((now_ms, kernel.as_str().to_owned()));
                }
            }
            Event::CellAccepted { cell, .. } => {
                if let Some(l) = self.label_of(cell) {
                    let seen = self.cells.entry(l).or_default();
                    seen.accepted_at.get_or_insert(now_ms);
                }
            }
            Event::Output {
                cell,
                n,
                stream,
                data,
            } => {
                if let Some(l) = self.label_of(cell) {
                    let seen = self.cells.entry(l).or_default();
                    if *stream == Stream::Stderr
                        && String::from_utf8_lossy(&data.0).contains(LOSS_NOTE)
                    {
                        seen.loss_noted_at.get_or_insert(now_ms);
                    }
                    seen.output.push((*n, *stream, data.0.clone()));
                }
            }
            Event::RanWithoutKernel { cell, reason } => {
                if let Some(l) = self.label_of(cell) {
                    let seen = self.cells.entry(l).or_default();
                    seen.ran_without_kernel
                        .get_or_insert_with(|| reason.clone());
                }
            }
            Event::Leftovers { cell, pids } => {
                if let Some(l) = self.label_of(cell) {
                    let seen = self.cells.entry(l).or_default();
                    seen.leftovers_reported |= !pids.is_empty();
                }
            }
            Event::ToolAnswered { id, .. } => self.tool_answered.push(id.clone()),
            Event::Clipped { cell, dropped } => {
                if let Some(l) = self.label_of(cell) {
                    self.cells.entry(l).or_default().clipped += dropped;
                }
            }
            Event::Unkillable { cell, pids } => {
                self.unkillable.push((now_ms, cell.clone(), pids.clone()));
            }
            Event::CellResolved { cell, outcome } => {
                if let Some(l) = self.label_of(cell) {
                    let seen = self.cells.entry(l).or_default();
                    if *outcome == CellOutcome::TimedOut {
                        seen.timed_out_at.get_or_insert(now_ms);
                    }
                    seen.resolutions.push(outcome.clone());
                    seen.resolved_at.get_or_insert(now_ms);
                    seen.last_resolved_at = Some(now_ms);
                }
            }
            _ => {}
        }
    }

    /// Records a client call from `start` to `end` (ms) and its error, if
    /// any.
    pub fn call(&mut self, name: &str, start: u64, end: u64, err: Option<DriverError>) {
        self.calls.push((name.into(), start, Some(end)));
        if let Some(e) = err {
            self.errors.push(format!("{name}: {e}"));
        }
    }

    /// Does the script run `label` again after `outcome`? Once, when the
    /// outcome is a refusal that asks for it
    /// ([`tether_core::client::asks_to_run_again`]): another client record
    /// had run its kernel further. Then the refusal (the last resolution)
    /// is taken back, and the cell is judged by the run that follows; the
    /// refusal's key named no cell of its own, the run names the next.
    pub fn follow_run_again(&mut self, label: &str, outcome: &CellOutcome, now_ms: u64) -> bool {
        if !tether_core::client::asks_to_run_again(outcome)
            || self.refused_behind.iter().any(|(l, _)| l == label)
        {
            return false;
        }
        self.refused_behind.push((label.to_owned(), now_ms));
        if let Some(seen) = self.cells.get_mut(label) {
            seen.resolutions.pop();
            if seen.resolutions.is_empty() {
                seen.resolved_at = None;
                seen.last_resolved_at = None;
            }
            seen.key = None;
        }
        true
    }

    /// The cell the script was running when its client crashed, and how
    /// long after its acceptance the script means to cancel it (its
    /// `cancel_after_ms`), for the canceller of a resume.
    pub fn pending_cancel(&self, scenario: &Scenario) -> (String, Option<u64>) {
        let label = self.current.clone().unwrap_or_default();
        let after = scenario
            .cells()
            .find(|c| c.label == label)
            .and_then(|c| c.cancel_after_ms);
        (label, after)
    }
}

/// What a cell's processes wrote to stdout over `executions` runs (at
/// least one), as the scenario scripts it, its shell cells run by
/// `flavor`.
pub fn truth_stdout(
    scenario: &Scenario,
    spec: &CellSpec,
    executions: u32,
    flavor: Flavor,
) -> Vec<u8> {
    let mut stdout = Vec::new();
    for _ in 0..executions.max(1) {
        stdout.extend(scenario.expected_stdout(spec, flavor));
    }
    stdout
}

/// `stdout` less one occurrence of each of `lines`: what a cell printed
/// when those of its tool calls failed (each prints its result's line
/// only when answered).
pub fn without_lines(stdout: Vec<u8>, lines: &[String]) -> Vec<u8> {
    let mut out = stdout;
    for line in lines {
        let needle = line.as_bytes();
        if let Some(at) = out.windows(needle.len()).position(|w| w == needle) {
            out.drain(at..at + needle.len());
        }
    }
    out
}

/// What the agent's note says when a shell cell's state could not be
/// kept (`tether_core::agent::shell::promote_state`).
const NOT_KEPT_NOTE: &str = "was not kept";

/// A cell the agent ended before its end: a cancel, a timeout, its shim
/// (shell or Python) killed from outside (the daemon ends the cell as a
/// cancel does before it resolves it), or its kernel's stop (a daemon
/// that got SIGTERM resolves its unfinished cells once its exit sweep is
/// over). Each resolves only once the cell's processes are gone, and
/// what it printed may stop anywhere.
pub fn ended_by_the_agent(outcome: &CellOutcome) -> bool {
    use tether_core::agent::{daemon, python, tombstone};
    match outcome {
        CellOutcome::Cancelled | CellOutcome::TimedOut => true,
        CellOutcome::Error { message } => {
            *message == daemon::SHIM_DIED
                || *message == tombstone::STOPPED
                || python::died(None, python::SHIM_DIED) == *outcome
        }
        _ => false,
    }
}

/// The oracle's view of `spec`: what the client saw of it (from `log`)
/// and the sandbox's `truth`.
pub fn cell(
    scenario: &Scenario,
    log: &ClientLog,
    spec: &CellSpec,
    truth: CellTruth,
    flavor: Flavor,
) -> CellObs {
    let seen = log.cells.get(&spec.label).cloned().unwrap_or_default();
    let outcome = seen.resolutions.last().cloned();
    // A shell cell that read back a state its kernel lost (what earlier
    // cells did is missing, exactly as after a fresh kernel or a cell
    // that was not kept) printed what that state shows: the shell-state
    // check judges the loss, the output checks what it printed.
    // A cell resolved unknown shows only a prefix of what it printed (the
    // client gave up before the rest came): a prefix of what it did print
    // is no sign of a loss, even one that looks like a lost state's
    // output (reaper seed 103747: `a_read` ran in its kernel after a long
    // hold, printed `A`, and the client, which had given up, saw nothing).
    // So is one the agent stopped mid-way (a cancel, a timeout, its shim
    // killed: drawn seed 792, where what the cell printed before its shim
    // was killed read like a lost state's output).
    let stopped = outcome
        .as_ref()
        .is_some_and(|o| matches!(o, CellOutcome::Unknown { .. }) || ended_by_the_agent(o));
    let cut_short = stopped && truth.stdout.starts_with(&seen.stdout());
    let mut truth = truth;
    let shell_state_lost = truth.executions == 1
        && seen.stdout() != truth.stdout
        && !cut_short
        && scenario
            .shell_stdout_after_a_loss(spec, flavor)
            .contains(&seen.stdout());
    if shell_state_lost {
        truth.stdout = seen.stdout();
    }
    // A shell cell stopped by `${NAME?}` (a name an earlier cell was to
    // bind, lost with the kernel or never bound because that cell never
    // ran) did not run to its end: its stdout is a prefix of a full run's.
    if spec.lang == Lang::Shell
        && outcome.as_ref().is_some_and(unbound_exit)
        && contains(&seen_stderr(&seen), b": parameter not set")
    {
        truth.ran_to_end = false;
    }
    let call = format!("run_cell {}", spec.label);
    let (started_ms, ended_ms) = log
        .calls
        .iter()
        .find(|(name, _, _)| *name == call)
        // A call its client crashed under never finished: it started when
        // the script started the cell.
        .map_or((seen.started_at.unwrap_or(0), None), |(_, s, e)| (*s, *e));
    let frontend = if spec.second_client {
        Frontend::Second
    } else {
        Frontend::First
    };
    let met_kernel_ms = seen.key.as_ref().and_then(|key| {
        log.ready
            .iter()
            .zip(&log.ready_by)
            .filter(|((_, _, k), f)| *k == key.kernel.as_str() && **f == frontend)
            .map(|((at, _, _), _)| *at)
            .min()
    });
    CellObs {
        second_client: spec.second_client,
        nul_byte: spec.nul_byte,
        newcomer: seen.newcomer.unwrap_or(false),
        met_kernel_ms,
        label: spec.label.clone(),
        key: seen.key.as_ref().map(ToString::to_string),
        python: spec.lang == Lang::Python,
        ran_without_kernel: seen.ran_without_kernel.clone(),
        resolved_by_resume: ended_ms.is_none()
            || seen.resolutions.len() > 1
                && matches!(seen.resolutions.first(), Some(CellOutcome::Unknown { .. })),
        cancel_requested: seen.cancel_requested,
        written_off_unknown: matches!(seen.resolutions.first(), Some(CellOutcome::Unknown { .. })),
        output_ns: seen.output.iter().map(|(n, _, _)| *n).collect(),
        client_stdout: seen.stdout(),
        client_stderr: seen_stderr(&seen),
        namespace_lost: namespace_lost(scenario, log, spec, outcome.as_ref()),
        shell_state_lost,
        state_not_kept_noted: contains(&seen_stderr(&seen), NOT_KEPT_NOTE.as_bytes()),
        complete_output: seen.stdout() == scenario.expected_stdout(spec, flavor),
        loss_reported_at: seen.loss_noted_at,
        leftovers_reported: seen.leftovers_reported,
        clipped: seen.clipped,
        timeout_ms: spec.timeout_ms,
        timed_out_at: seen.timed_out_at,
        outcome,
        resolutions: u32::try_from(
            seen.resolutions
                .iter()
                .filter(|o| !matches!(o, CellOutcome::Unknown { .. }))
                .count(),
        )
        .unwrap_or(u32::MAX),
        started_ms,
        resolved_ms: seen.resolved_at,
        ended_ms,
        last_resolved_ms: seen.last_resolved_at,
        truth,
    }
}

/// `spec` failed on a name an earlier cell of its kernel bound (and the
/// client saw complete): the namespace (a Python kernel's) or the shell
/// state (a shell kernel's: `${NAME?}` ends the shell, with 127 under
/// bash and 2 under dash) is gone.
fn namespace_lost(
    scenario: &Scenario,
    log: &ClientLog,
    spec: &CellSpec,
    outcome: Option<&CellOutcome>,
) -> bool {
    if !spec.reads_names() {
        return false;
    }
    let stderr = log.cells.get(&spec.label).map_or(Vec::new(), seen_stderr);
    let failed_on = |n: &str| match outcome {
        Some(CellOutcome::Error { message }) if spec.lang == Lang::Python => {
            *message == format!("NameError: name '{n}' is not defined")
        }
        Some(o) if spec.lang == Lang::Shell && unbound_exit(o) => {
            contains(&stderr, format!("{n}: parameter not set").as_bytes())
        }
        _ => false,
    };
    let names = scenario.names_before(spec);
    scenario
        .cells()
        .take_while(|c| c.label != spec.label)
        .filter(|c| c.kernel == spec.kernel)
        .filter(|c| {
            log.cells
                .get(&c.label)
                .and_then(|s| s.resolutions.last())
                .is_some_and(|o| *o == CellOutcome::Ok)
        })
        .any(|c| {
            names.keys().any(|n| {
                c.workload
                    .steps
                    .iter()
                    .any(|s| matches!(s, Step::SetName { name, .. } if name == n))
                    && failed_on(n)
            })
        })
}

/// The status of a shell that `${NAME?}` stopped: 127 under bash, 2
/// under dash ([`crate::shell_model::Flavor::unbound_status`]).
fn unbound_exit(outcome: &CellOutcome) -> bool {
    [Flavor::Bash, Flavor::Dash].iter().any(|f| {
        *outcome
            == CellOutcome::Exit {
                code: i32::from(f.unbound_status()),
            }
    })
}

/// What the client delivered of a cell's stderr.
/// What the client delivered of a cell no scenario lists (the liveness
/// cell), for the judgment of the notes it carried.
pub fn note_cell(log: &ClientLog, label: &str, seen: &CellSeen) -> crate::oracle::NoteCell {
    let call = format!("run_cell {label}");
    crate::oracle::NoteCell {
        label: label.to_owned(),
        key: seen.key.as_ref().map(ToString::to_string),
        stderr: seen_stderr(seen),
        ended_ms: log
            .calls
            .iter()
            .find(|(name, _, _)| *name == call)
            .and_then(|(_, _, e)| *e),
    }
}

fn seen_stderr(seen: &CellSeen) -> Vec<u8> {
    seen.output
        .iter()
        .filter(|(_, s, _)| *s == Stream::Stderr)
        .flat_map(|(_, _, d)| d.iter().copied())
        .collect()
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// What the client's reaper says of a kernel it evicts for the cap
/// (`tether_core::client` reaper).
const CAP_REASON: &str = "least recently used beyond the cap";

/// Losses the client reported as a death where the sandbox had been
/// replaced or rebooted under the daemon (ground truth: `boot_deaths`,
/// the daemons killed by a boot that changed the boot id): the daemon
/// the client last heard was ready for the kernel lived until such a
/// boot, so no probe can have found it merely dead, and the caller must
/// hear that the sandbox under it is another one.
pub fn unreported_replacements(
    log: &ClientLog,
    kernel_deaths: &[(u64, u32)],
    boot_deaths: &[(u64, u32)],
) -> Vec<String> {
    let mut out = Vec::new();
    for (at, kernel, replaced) in &log.losses {
        if replaced.is_some() || log.unseen_losses.contains(at) {
            continue;
        }
        let Some((ready_at, pid, _)) = log
            .ready
            .iter()
            .rev()
            .find(|(t, _, k)| k == kernel && t <= at)
        else {
            continue;
        };
        // A death the report can be about: before it (drawn_clients seed
        // 500688: the killed daemon's pid went to the next daemon, ready
        // in the very ms of the report, and that one's death by a later
        // replacement was taken for the reported one).
        let death = kernel_deaths
            .iter()
            .find(|(d, p)| p == pid && d >= ready_at && d <= at);
        if let Some(death) = death.filter(|d| boot_deaths.contains(d)) {
            out.push(format!(
                "kernel {kernel} at {at} ms: its daemon (pid {pid}) died when the sandbox was replaced or rebooted at {} ms (a new boot id), but the client reported it only dead",
                death.0
            ));
        }
    }
    out
}

/// Processes the client reported unkillable that died by a KILL before the
/// report reached it (`kill_deaths`: pid and when, ground truth of a host
/// whose processes all die by KILL, as the simulated OS's do): the agent
/// said a process outlived its KILL rounds that one of them had ended.
pub fn false_unkillable(log: &ClientLog, kill_deaths: &[(u32, u64)]) -> Vec<String> {
    let mut out = Vec::new();
    for (at, cell, pids) in &log.unkillable {
        for pid in pids {
            // The last death of that pid by then: a pid reused later
            // names another process.
            let death = kill_deaths
                .iter()
                .filter(|(p, d)| p == pid && d <= at)
                .map(|(_, d)| *d)
                .max();
            if let Some(died) = death {
                out.push(format!(
                    "{cell}: pid {pid} died by KILL at {died} ms, reported unkillable at {at} ms"
                ));
            }
        }
    }
    out
}

/// A cell recorded but not taken when its daemon exited idle.
#[derive(Clone, Debug)]
pub struct Stranded {
    /// Its kernel's name.
    pub kernel: String,
    /// Its number.
    pub seq: u64,
    /// When its daemon exited (ms).
    pub at_ms: u64,
    /// What happened.
    pub detail: String,
    /// When its submission was first seen gone (ms): withdrawn by the
    /// submit's handshake, or removed with the kernel by a fault.
    pub gone_at_ms: Option<u64>,
}

/// Cells recorded but not taken when their daemon exited idle, and never
/// started after, that the client resolved as an error: the daemon's own
/// exit lost them, where the submit's handshake with the exiting daemon
/// should have sent each to the next daemon. (Cancelled, timed out or
/// unknown is judged elsewhere.) One whose submission was gone before the
/// client resolved it was not left there: withdrawn (replace_mid_submit
/// seed 100991 of the long run: the withdrawal's answer lost, the sandbox
/// replaced just after), or removed with its kernel by a fault, whose
/// loss the client reported. A kernel opened again numbers its cells from
/// 1: the cell is the last one of that key the script started by then.
pub fn stranded_losses(log: &ClientLog, stranded: &[Stranded]) -> Vec<String> {
    let mut out = Vec::new();
    for s in stranded {
        let (kernel, seq, at, detail) = (&s.kernel, &s.seq, &s.at_ms, &s.detail);
        let cell = log
            .cells
            .values()
            .filter(|c| {
                c.key
                    .as_ref()
                    .is_some_and(|k| k.kernel.as_str() == kernel && k.seq.0 == *seq)
                    && c.started_at.is_some_and(|t| t <= *at)
            })
            .max_by_key(|c| c.started_at);
        let gone_first = s.gone_at_ms.is_some_and(|gone| {
            cell.and_then(|c| c.last_resolved_at)
                .is_some_and(|r| gone <= r)
        });
        if gone_first {
            continue;
        }
        if let Some(CellOutcome::Error { message }) = cell.and_then(|c| c.resolutions.last()) {
            out.push(format!(
                "{detail}, not yet taken, and the client resolved it as an error: {message}"
            ));
        }
    }
    out
}

/// Replacements the client reported on the evidence of a pid that names
/// another process now (reused, or without the daemon's nonce) where no
/// pid can have been reused: no boot (`boots`, ms) before the report and
/// a pid allocator that never wrapped. (A replacement on other evidence,
/// another boot id or another daemon in the kernel's identity file, is
/// not judged here.)
pub fn unfounded_replacements(log: &ClientLog, boots: &[u64], pids_wrapped: bool) -> Vec<String> {
    if pids_wrapped {
        return Vec::new();
    }
    log.losses
        .iter()
        .filter_map(|(at, kernel, replaced)| {
            let evidence = replaced.as_ref()?;
            let pid_claim = evidence.contains(" was reused") || evidence.contains("does not carry the nonce");
            let booted = boots.iter().any(|b| b <= at);
            (pid_claim && !booted).then(|| {
                format!("kernel {kernel} at {at} ms, on the evidence \"{evidence}\", with no boot before it and no pid reused")
            })
        })
        .collect()
}

/// The client's half of the observations: calls, state-lost reports,
/// liveness, whether the script finished, its errors as harness errors,
/// and the `kernel_deaths` (ms, pid) the caller saw, with those of
/// daemons a client had heard of. The sandbox's fields (`cells`,
/// `extra_executions`, `collateral`, leaks, `interpreter_deaths`) are
/// left empty for the caller.
pub fn client_observations(log: &ClientLog, kernel_deaths: &[(u64, u32)]) -> Observations {
    Observations {
        calls: log
            .calls
            .iter()
            .map(|(name, start, end)| CallObs {
                name: name.clone(),
                started_ms: *start,
                ended_ms: *end,
                budget_ms: CALL_BUDGET_MS,
            })
            .collect(),
        state_lost_reports: log.state_lost.clone(),
        lost_to_other_frontend: log.lost_to_other_frontend.clone(),
        kernel_deaths: kernel_deaths.iter().map(|(at, _)| *at).collect(),
        // A death matters only if a client knew the daemon (it held state
        // the client relied on): a daemon spawned by a client that crashed
        // before hearing of it holds nothing.
        known_kernel_deaths: kernel_deaths
            .iter()
            .filter(|(at, pid)| log.ready.iter().any(|(t, p, _)| p == pid && t <= at))
            .map(|(at, _)| *at)
            .collect(),
        // The kernel is the one the client last heard the daemon was
        // ready for before it died.
        known_deaths_by_kernel: kernel_deaths
            .iter()
            .filter_map(|(at, pid)| {
                log.ready
                    .iter()
                    .rev()
                    .find(|(t, p, _)| p == pid && t <= at)
                    .map(|(_, _, k)| (*at, k.clone()))
            })
            .collect(),
        // With two frontends: each death once per frontend that had
        // heard the daemon was ready, with the kernel it heard of.
        known_deaths_by_frontend: kernel_deaths
            .iter()
            .flat_map(|(at, pid)| {
                let mut heard: Vec<(u64, String, Frontend)> = Vec::new();
                for ((t, p, k), f) in log.ready.iter().zip(&log.ready_by) {
                    if p == pid && t <= at {
                        heard.retain(|(_, _, g)| g != f);
                        heard.push((*at, k.clone(), *f));
                    }
                }
                heard
            })
            .collect(),
        liveness: log.liveness.clone(),
        evictions: log.evictions.clone(),
        cap_evictions: log.cap_evictions.clone(),
        kernel_uses: log.kernel_uses.clone(),
        client_crashes: log.crashes.clone(),
        shutdown_ms: log.shutdown_at,
        leaked_records: log.records_left.clone(),
        finished: log.finished,
        harness_errors: log.errors.clone(),
        second_frontend: log.labels.keys().any(|(f, _)| *f == Frontend::Second),
        ..Observations::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_core::ids::{CellSeq, KernelName};

    #[test]
    fn a_loss_is_judged_by_a_death_before_it_not_by_a_reused_pids_later_one() {
        // Daemon 25 killed at 1135 ms; the next daemon got pid 25 and was
        // ready in the ms the loss was reported; a replacement killed it
        // at 11955 ms (drawn_clients seed 500688).
        let log = ClientLog {
            ready: vec![(1_120, 25, "sim".into()), (2_870, 25, "sim".into())],
            losses: vec![(2_870, "sim".into(), None)],
            ..ClientLog::default()
        };
        let deaths = [(1_135, 25), (11_955, 25)];
        let boots = [(11_955, 25)];
        assert!(unreported_replacements(&log, &deaths, &boots).is_empty());
        // A loss reported after that replacement as a death only is one.
        let later = ClientLog {
            losses: vec![(12_000, "sim".into(), None)],
            ..log
        };
        assert_eq!(unreported_replacements(&later, &deaths, &boots).len(), 1);
    }

    fn key(kernel: &str, seq: u64) -> CellKey {
        CellKey {
            kernel: KernelName::new(kernel).unwrap(),
            seq: CellSeq(seq),
        }
    }

    fn refused(cell: CellKey) -> Event {
        Event::CellResolved {
            cell,
            outcome: CellOutcome::Error {
                message: "the kernel could not be started".into(),
            },
        }
    }

    fn run(log: &mut ClientLog, label: &str) {
        log.current = Some(label.into());
        log.cells.entry(label.into()).or_default();
    }

    #[test]
    fn a_cell_stranded_by_an_idle_exit_and_resolved_as_an_error_is_a_loss() {
        let mut log = ClientLog::default();
        run(&mut log, "lost");
        log.cells.get_mut("lost").unwrap().started_at = Some(5);
        log.on_event(10, &refused(key("sim", 1)));
        // A later cell of the same key (the kernel opened again) ran.
        run(&mut log, "later");
        log.cells.get_mut("later").unwrap().started_at = Some(50);
        log.on_event(60, &refused(key("sim", 1)));
        let stranded = |at| {
            vec![Stranded {
                kernel: "sim".to_string(),
                seq: 1,
                at_ms: at,
                detail: "daemon 4 of sim exited".to_string(),
                gone_at_ms: None,
            }]
        };
        let found = stranded_losses(&log, &stranded(8));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("could not be started"), "{found:?}");
        // Resolved as anything but an error: judged elsewhere.
        log.cells.get_mut("lost").unwrap().resolutions = vec![CellOutcome::Cancelled];
        assert!(stranded_losses(&log, &stranded(8)).is_empty());
        // Stranded before any cell of that key was started: none is judged.
        assert!(stranded_losses(&log, &stranded(2)).is_empty());
        // Its submission gone (withdrawn) before the client resolved it
        // as an error: not left there; gone only after: stranded.
        log.cells.get_mut("lost").unwrap().resolutions = vec![CellOutcome::Error {
            message: "the kernel could not be started".into(),
        }];
        let mut gone = stranded(8);
        gone[0].gone_at_ms = Some(9);
        assert!(stranded_losses(&log, &gone).is_empty());
        gone[0].gone_at_ms = Some(11);
        assert_eq!(stranded_losses(&log, &gone).len(), 1);
    }

    #[test]
    fn a_key_reused_by_a_reopened_kernel_names_the_cell_being_run() {
        let mut log = ClientLog::default();
        run(&mut log, "first");
        log.on_event(10, &refused(key("sim", 1)));
        // The kernel is evicted and opened again by a later client
        // process: its numbers start over, and this cell's first event
        // is its refusal (no acceptance before it).
        run(&mut log, "again");
        log.on_event(20, &refused(key("sim", 1)));
        assert_eq!(log.cells["first"].resolutions.len(), 1);
        assert_eq!(log.cells["again"].resolutions.len(), 1);
        assert_eq!(log.labels[&(Frontend::First, key("sim", 1))], "again");
    }

    /// reaper seed 100736 and four more: `a_read`, written off as unknown
    /// in a long hold, delivered nothing, which reads like the state of a
    /// fresh kernel; nothing (a prefix of what it printed) is no read-back.
    #[test]
    fn an_unknown_shell_cell_read_back_no_state() {
        let scenario = crate::scenario::by_name("reaper").unwrap();
        let spec = scenario
            .cells()
            .find(|c| c.label == "a_read")
            .unwrap()
            .clone();
        let mut log = ClientLog::default();
        run(&mut log, "a_read");
        log.on_event(
            10,
            &Event::CellResolved {
                cell: key("a", 2),
                outcome: CellOutcome::Unknown {
                    reason: "the sandbox did not answer".into(),
                },
            },
        );
        let truth = CellTruth {
            executions: 1,
            stdout: truth_stdout(&scenario, &spec, 1, Flavor::Bash),
            ran_to_end: true,
            ..CellTruth::default()
        };
        let obs = cell(&scenario, &log, &spec, truth.clone(), Flavor::Bash);
        assert!(!obs.shell_state_lost);
        assert!(obs.written_off_unknown);
        // Its end seen with nothing printed: the state was lost.
        log.on_event(20, &refused(key("a", 2)));
        let obs = cell(&scenario, &log, &spec, truth, Flavor::Bash);
        assert!(obs.shell_state_lost);
    }

    #[test]
    fn a_key_written_off_as_unknown_stays_with_its_cell() {
        let mut log = ClientLog::default();
        run(&mut log, "first");
        let unknown = Event::CellResolved {
            cell: key("sim", 1),
            outcome: CellOutcome::Unknown {
                reason: "the sandbox did not answer".into(),
            },
        };
        log.on_event(10, &unknown);
        // A resume finishes it while the next cell runs: still its own.
        run(&mut log, "next");
        log.on_event(20, &refused(key("sim", 1)));
        assert_eq!(log.cells["first"].resolutions.len(), 2);
        assert!(log.cells["next"].resolutions.is_empty());
        // A cell resolved for good keeps a late event of its own while it
        // is still the one being run.
        run(&mut log, "third");
        log.on_event(30, &refused(key("sim", 2)));
        log.on_event(31, &refused(key("sim", 2)));
        assert_eq!(log.cells["third"].resolutions.len(), 2);
    }
}
