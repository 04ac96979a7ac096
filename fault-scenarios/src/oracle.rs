//! The oracle: checks one run's [`Observations`] — what the client saw and
//! what really happened on the simulated sandbox — against the invariants
//! of DESIGN.md, and lists every [`Violation`].
//!
//! The world fills the observations; the oracle only judges them, so it can
//! be tested on hand-made observations.

use crate::faults::FaultSchedule;
use crate::scenario::{CellSpec, Scenario};
use crate::swarm::Flaw;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;
use tether_core::agent::tombstone::STOPPED;
use tether_core::protocol::calls::{MAX_ARGS, MAX_CALLS, MAX_NAME};
use tether_core::protocol::CellOutcome;
use tether_core::protocol::Lang;

mod background;
mod call_ends;
mod interpreter;
pub mod loss_notes;

pub use loss_notes::{NoteCell, StateLossObs};

pub use interpreter::OrphanRunObs;
mod escalation;

/// What happened to one scripted cell.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CellObs {
    /// Run by the second frontend ([`crate::scenario::CellSpec::second_client`]).
    pub second_client: bool,
    /// Its frontend had never seen a daemon of its kernel ready when the
    /// script first started it. A kernel it first met on a sandbox with no
    /// trace of its past (a replaced sandbox, its directories removed) is
    /// new to it: only the frontend that knew the daemon can say its state
    /// was lost, and it says so at its own next call (drawn_clients seed
    /// 47: the second frontend ran the first cells, the sandbox was
    /// replaced, and the first frontend's first cell met a fresh kernel).
    pub newcomer: bool,
    /// When its frontend first saw a daemon of its kernel ready (any
    /// time in the run), if it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub met_kernel_ms: Option<u64>,
    /// Its code carries a NUL byte ([`crate::scenario::CellSpec::nul_byte`]):
    /// nothing of it may run, under any fault.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub nul_byte: bool,
    /// The scenario's name for the cell (unique in a run).
    pub label: String,
    /// The client's key for it (`kernel#seq`), once accepted.
    pub key: Option<String>,
    /// It runs in a Python kernel (else a shell kernel).
    pub python: bool,
    /// The client ran it as a plain exec because no kernel could start
    /// (fail open), for this reason.
    pub ran_without_kernel: Option<String>,
    /// Its last resolution came from a resume: the call that ran it never
    /// returned (its client crashed), or it was `unknown` first.
    pub resolved_by_resume: bool,
    /// The client asked to cancel it.
    pub cancel_requested: bool,
    /// The client's first resolution of it was `unknown` (at
    /// `resolved_ms`); a resume may have resolved it again since.
    pub written_off_unknown: bool,
    /// Journal numbers of the output entries the client delivered, in order.
    pub output_ns: Vec<u64>,
    /// Stdout the client delivered, concatenated.
    pub client_stdout: Vec<u8>,
    /// Stderr the client delivered, concatenated.
    pub client_stderr: Vec<u8>,
    /// How the client resolved it (the last resolution seen).
    pub outcome: Option<CellOutcome>,
    /// It failed on a name that an earlier cell of its (Python) kernel
    /// bound and the client saw complete: the namespace was gone.
    pub namespace_lost: bool,
    /// A shell cell printed the state its kernel would have after a
    /// loss (a fresh kernel, or an earlier cell's changes not kept)
    /// instead of the state the cells before it left.
    pub shell_state_lost: bool,
    /// Its stderr carries the agent's note that the state a cell before
    /// it reached was not kept.
    pub state_not_kept_noted: bool,
    /// The client delivered all of its scripted stdout (a cancelled cell
    /// got at least as far as its last print).
    pub complete_output: bool,
    /// When the client delivered the agent's note that the interpreter
    /// died and the kernel's namespace is lost (ms), if it did.
    pub loss_reported_at: Option<u64>,
    /// The client reported processes the cell left running.
    pub leftovers_reported: bool,
    /// Bytes of its output the client said were dropped at the journal's
    /// cap.
    pub clipped: u64,
    /// Its timeout, if it has one.
    pub timeout_ms: Option<u64>,
    /// When the client resolved it as timed out (virtual ms), if it did.
    pub timed_out_at: Option<u64>,
    /// How many resolutions other than `unknown` the client reported for
    /// it (an `unknown` cell may be resolved again by a resume).
    pub resolutions: u32,
    /// When the client started running it (virtual ms).
    pub started_ms: u64,
    /// When the client first resolved it (virtual ms), if it did (a
    /// crashed client's call never returns; its successor resolves it).
    pub resolved_ms: Option<u64>,
    /// When the client's call returned, if it did.
    pub ended_ms: Option<u64>,
    /// When the client last resolved it (a resume resolves an `unknown`
    /// cell again), if it did.
    pub last_resolved_ms: Option<u64>,
    /// Ground truth from the sandbox.
    pub truth: CellTruth,
}

impl CellObs {
    /// When the client delivered the outcome the oracle judges: its last
    /// resolution (a resume's, for a cell written off as `unknown`), or
    /// when its call returned; never, for a call that never returned and
    /// a cell nobody resolved. A loss told before it was told in time.
    pub fn delivered_ms(&self) -> u64 {
        self.last_resolved_ms.max(self.ended_ms).unwrap_or(u64::MAX)
    }
}

/// Ground truth about one cell, from the simulated OS.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CellTruth {
    /// How many times the cell's code was started.
    pub executions: u32,
    /// Everything the cell's processes wrote to stdout, over all executions.
    pub stdout: Vec<u8>,
    /// Everything the cell's processes wrote to stderr, where the host
    /// knows it (`None`: not judged).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stderr: Option<Vec<u8>>,
    /// The cell's main process exited (rather than being killed or lost).
    pub ran_to_end: bool,
    /// Pids of the cell's processes alive at the end of the script (before
    /// the final shutdown).
    pub alive_at_end: Vec<u32>,
    /// When a process of the cell was spawned after the client had
    /// resolved it as not run to completion (virtual ms), if ever.
    pub spawned_after_resolution: Option<u64>,
    /// When the cell's last process ended, if that was after the client
    /// had resolved the cell (virtual ms): a cancel must resolve only once
    /// its escalation is over.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub died_after_resolution: Option<u64>,
    /// The cell had not ended on the sandbox when the client resolved it:
    /// its journal held no result yet (false where the host does not read
    /// journals). What a finished cell left running is its leftovers, which
    /// no loss of its kernel ends.
    pub unfinished: bool,
}

/// One call the client script made and how long it took.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CallObs {
    /// What was called (`run_cell c1`, `shutdown`, …).
    pub name: String,
    /// When it began (virtual ms).
    pub started_ms: u64,
    /// When it returned, if it did.
    pub ended_ms: Option<u64>,
    /// It must return within this many ms.
    pub budget_ms: u64,
}

/// Everything the oracle looks at.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Observations {
    /// Scripted cells, in script order.
    pub cells: Vec<CellObs>,
    /// Client calls.
    pub calls: Vec<CallObs>,
    /// How far the sandbox's clock jumped forward in all (ms): timeouts
    /// on the sandbox see the jump, so a cell may time out that much early.
    pub sandbox_clock_jumps_ms: u64,
    /// Times (virtual ms) the client reported "state lost".
    pub state_lost_reports: Vec<u64>,
    /// Times (virtual ms) a kernel daemon really died (killed, sandbox bounced).
    pub kernel_deaths: Vec<u64>,
    /// The deaths of daemons a client had already heard of (their state
    /// was relied on); a subset of `kernel_deaths`.
    pub known_kernel_deaths: Vec<u64>,
    /// The same deaths with the kernel whose daemon died: with several
    /// kernels, a death matters to the cells of its own kernel.
    pub known_deaths_by_kernel: Vec<(u64, String)>,
    /// Those deaths by the frontend that had heard the daemon was ready
    /// (once for each that had): a frontend that started its kernel
    /// afresh after the other's daemon died lost nothing it knew.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub known_deaths_by_frontend: Vec<(u64, String, crate::observe::Frontend)>,
    /// Unscripted cells (liveness) that ran more than once, and cells no
    /// script accounts for, by label, with how many times they ran.
    pub extra_executions: BTreeMap<String, u32>,
    /// Processes that a cancel killed but did not belong to the cancelled
    /// cell (other cells, the daemon, the agent, PID 1).
    pub collateral: Vec<String>,
    /// Processes left after the final shutdown (other than PID 1).
    pub leaked_processes: Vec<String>,
    /// Kernel directories left after the final shutdown.
    pub leaked_files: Vec<String>,
    /// Cgroups (made by shims) left after the final shutdown.
    pub leaked_cgroups: Vec<String>,
    /// Times (virtual ms) a Python interpreter really died (before any
    /// shutdown).
    pub interpreter_deaths: Vec<u64>,
    /// How each interpreter death came (ms, `status C` or `signal N`),
    /// where the host knows.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub interpreter_ends: Vec<(u64, String)>,
    /// When the sandbox could not be reached, from the fault schedule:
    /// `None` where the host cannot say (a live backend), and then an
    /// `unknown` outcome is not judged.
    pub outages: Option<Outages>,
    /// Kernel deaths the agent caused itself while the kernel had work
    /// (a daemon's idle exit with a cell unfinished): never an excuse.
    pub self_inflicted: Vec<String>,
    /// Outcome of the liveness cell run after every fault healed.
    pub liveness: Option<CellOutcome>,
    /// When the client's reaper evicted a kernel (virtual ms), and which:
    /// the loss of its state is the client's own, reported doing.
    pub evictions: Vec<(u64, String)>,
    /// Those evictions whose reason was the kernel cap.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cap_evictions: Vec<(u64, String)>,
    /// When the script ran a cell on a kernel (ms), and which.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub kernel_uses: Vec<(u64, String)>,
    /// When a client process crashed (ms).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub client_crashes: Vec<u64>,
    /// The client's kernel cap, where the host knows it (`None`: the cap
    /// evictions are not judged).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_kernels: Option<usize>,
    /// The client's idle timeout for kernels (ms), where the host knows it
    /// (`None`: idle evictions are not required).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_idle_ms: Option<u64>,
    /// When the script began its final shutdown (ms), if it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shutdown_ms: Option<u64>,
    /// Journals whose entry numbers were not contiguous from 1.
    pub journal_gaps: Vec<String>,
    /// Kernels that had two live daemons at once.
    pub two_daemons: Vec<String>,
    /// State-lost reports that did not say the kernel was replaced where
    /// its daemon died with a boot that changed the boot id
    /// ([`crate::observe::unreported_replacements`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub replacements_unreported: Vec<String>,
    /// Replacements reported on the evidence of a reused pid where no pid
    /// was reused ([`crate::observe::unfounded_replacements`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub replacements_unfounded: Vec<String>,
    /// Processes the client reported unkillable that a KILL had ended
    /// before the report reached it
    /// ([`crate::observe::false_unkillable`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub false_unkillable: Vec<String>,
    /// A cell's note that an earlier cell's shim was killed before that
    /// cell ended, where that shim finished its cell and exited by itself
    /// (ground truth): a loss note with no cause.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub false_notes: Vec<String>,
    /// Client records left after the final shutdown.
    pub leaked_records: Vec<String>,
    /// The script finished (did not hang until the simulation's end).
    pub finished: bool,
    /// The sandbox's disk was full at some time (writes failed).
    pub disk_filled: bool,
    /// Driver errors, stalls, simulation errors.
    pub harness_errors: Vec<String>,
    /// What a kernel whose daemon got SIGTERM still ran once its stop
    /// should have been over (its grace period and a stated slack later):
    /// processes left behind, orphaned.
    pub stop_survivors: Vec<String>,
    /// STOP or KILL a kernel daemon sent to a cell's processes sooner
    /// than the grace period after its own TERM to that cell (see
    /// [`escalation`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub early_kills: Vec<String>,
    /// The kernels whose daemon got SIGTERM from outside, where the host
    /// knows (`None`: not judged).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub termed_kernels: Option<Vec<String>>,
    /// Shims a kernel daemon started after it caught SIGTERM.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub started_after_term: Vec<String>,
    /// Cells whose main process started though their cancel was recorded
    /// before the shim looked, where the host can tell.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub started_after_cancel: Vec<String>,
    /// Tool calls: what the sandbox's callers got, the answer files
    /// written there, and the runs of the client's tool handler.
    pub tools: ToolObs,
    /// The sandbox could not start some kernels, and whether the client
    /// was to fail open (`None`: a sound sandbox, or one the host cannot
    /// say about).
    pub flawed: Option<Flawed>,
    /// A second frontend with records of its own drove a kernel too: a
    /// number one of them sent may be the other's, and a cell refused for
    /// it (asking to be run again: nothing ran) is no flaw.
    pub second_frontend: bool,
    /// State-lost reports of a kernel the other frontend had evicted
    /// (shut down) before: a loss with no death, and no false one.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub lost_to_other_frontend: Vec<u64>,
    /// The background logs of the kernels whose cells print after they
    /// resolved, read at the end of the script.
    pub background: Vec<BackgroundObs>,
    /// Python cells taken by an interpreter whose daemon had died (empty
    /// where the host cannot say).
    pub orphan_runs: Vec<OrphanRunObs>,
    /// What may have cost a shell kernel its state, for the judgment of
    /// the agent's "not kept" notes ([`loss_notes`]).
    pub state_loss: StateLossObs,
}

/// One kernel's background log and what its cells' background processes
/// printed after their cell resolved.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BackgroundObs {
    /// The kernel.
    pub kernel: String,
    /// What the `logs` op answered once every fault had healed (before
    /// the final shutdown), or why it failed.
    pub log: Result<Vec<u8>, String>,
    /// What was printed after the cells resolved and before the log was
    /// read, in order: the log holds all of it (from a line start, behind
    /// a note, once over its cap) unless the kernel lost it.
    pub written: Vec<u8>,
    /// What was printed as the log was read or later: the log may hold
    /// some of it, in order, at its end.
    pub later: Vec<u8>,
    /// What a printer timed to the shim's drain bound printed, where the
    /// host cannot tell on which side of it the lines landed (live: no
    /// clock says): each line is its cell's output or the log's, once
    /// (`drawn`'s edge printers).
    pub either: Vec<u8>,
    /// How many cells wrote to it (each writer looks at its size every
    /// [`tether_core::agent::background::CHECK_EVERY`] bytes).
    pub writers: u32,
    /// What may have lost some of it (its daemon died, a shim was killed,
    /// the disk was full, the sandbox restarted); empty: nothing. The
    /// client's evictions of the kernel count too.
    pub lossy: Vec<String>,
}

impl Default for BackgroundObs {
    fn default() -> Self {
        BackgroundObs {
            kernel: String::new(),
            log: Ok(Vec::new()),
            written: Vec::new(),
            later: Vec::new(),
            either: Vec::new(),
            writers: 0,
            lossy: Vec::new(),
        }
    }
}

/// A sandbox that cannot start some kernels, and the client's choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Flawed {
    /// What keeps a kernel from starting.
    pub flaw: Flaw,
    /// The client falls back to a plain exec (else it refuses the cell).
    pub fallback: bool,
}

/// Ground truth of the tool calls of a run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ToolObs {
    /// Every call a process in the sandbox made.
    pub calls: Vec<ToolCallObs>,
    /// Every answer file written in the sandbox.
    pub answers: Vec<ToolAnswerObs>,
    /// Every run of the client's tool handler.
    pub runs: Vec<ToolRunObs>,
    /// The calls the client reported answered (`tool_answered`), by id.
    pub reported_answered: Vec<String>,
    /// The calls the client still counted as awaiting the frontend once
    /// every kernel was shut down.
    pub awaiting_at_end: usize,
}

/// One call, as its caller saw it end.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ToolCallObs {
    /// The call's id (empty: it never wrote a request).
    pub id: String,
    /// The cell (its directory) whose process made it.
    pub cell: String,
    /// That cell's key (`kernel#seq`), where the host knows it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Made by a background process of the cell.
    pub leftover: bool,
    /// Its name or arguments are past the protocol's limits: the sandbox
    /// must refuse it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub past_limits: bool,
    /// What the caller printed on success (the result and a newline).
    pub answered: Option<String>,
    /// Its error otherwise.
    pub failed: Option<String>,
    /// When it started (virtual ms), where the host knows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_ms: Option<u64>,
    /// When it ended (`None`: killed, or still waiting at the end).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended_ms: Option<u64>,
    /// Its cell had ended (journal done, or calls directory gone) when it
    /// started.
    pub cell_ended_at_start: bool,
    /// When its caller first found its cell ended (at its start or at a
    /// poll while it waited), where the host knows (virtual ms).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cell_ended_ms: Option<u64>,
    /// A call of the tool the host never answers
    /// ([`crate::workload::STALLED_TOOL`]): it ends at its deadline.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stalled: bool,
    /// When a look of its caller still waited at or past its deadline
    /// (its start plus its `TETHER_CALL_TIMEOUT`), where the host knows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overran_ms: Option<u64>,
}

/// One answer file written.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ToolAnswerObs {
    /// The call's id.
    pub id: String,
    /// The call was journaled (went to the host) when it was written;
    /// false: the sandbox refused it.
    pub journaled: bool,
    /// The cell's result was journaled already when it was written.
    pub after_result: bool,
}

/// One run of the client's tool handler.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ToolRunObs {
    /// Which client process ran it (0 first).
    pub incarnation: u64,
    /// The call's id.
    pub id: String,
    /// What it returned (a string result).
    pub result: String,
    /// Bytes of the tool's name.
    #[serde(default)]
    pub name_len: usize,
    /// Bytes of its arguments, as compact JSON.
    #[serde(default)]
    pub args_len: usize,
}

/// What made the sandbox unreachable in a run: the only excuse for an
/// `unknown` outcome.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Outages {
    /// Spans (virtual ms, inclusive) during which every exec failed:
    /// partitions, held connections (until the held calls' deadline).
    pub spans: Vec<(u64, u64)>,
    /// Single failed execs (a dropped connection, a lost reply, a slow
    /// start past the deadline, a restarted exec server), by when they
    /// were armed.
    pub blips: Vec<u64>,
    /// The client's waits between attempts, in order: the sandbox must
    /// have been unreachable for their sum before it gives up (less those
    /// a single failure accounts for).
    pub backoffs_ms: Vec<u64>,
    /// How many failed attempts in a row make the client give up.
    pub attempts: u32,
    /// The longest one attempt may take before it fails (its deadline).
    pub budget_ms: u64,
    /// Spans in which the sandbox answered nothing at all (a partition, a
    /// hold, a freeze: not an agent that answers with errors), from their
    /// start to when they healed.
    pub silences: Vec<(u64, u64)>,
    /// The client gives up on a sandbox that has not answered for this
    /// long (`Config::unreachable_after`; 0: not judged).
    pub give_up_ms: u64,
    /// When the client was down (crashed, not yet resumed): a resumed
    /// client counts its give-up time from its start.
    pub client_down: Vec<(u64, u64)>,
}

impl Outages {
    /// Could the client honestly have given up at `at`? Every exec failed
    /// for as long as the client retries before it gives up, where each
    /// single failure before `at` stands for one attempt (and its wait).
    ///
    /// The attempts a span does not cover may come after it as well as
    /// before it: a call in flight when a partition begins fails at its
    /// deadline (before the span's attempts), a lost reply can fail the
    /// first call after it heals (after them). So each split of the
    /// single failures into `j` last attempts and the rest first is
    /// tried: the covered attempts then ended before the last `j`
    /// started, that is their backoffs (and at most one deadline each)
    /// before `at` (fail_open seed 100502: x6 hung into a partition, x7–x10
    /// failed in it, x11's reply was lost after it healed).
    pub fn excuse(&self, at: u64) -> bool {
        let n = self.attempts as usize;
        let blips = self.blips.iter().filter(|&&b| b <= at).count();
        if blips >= n {
            return true;
        }
        let left = n.saturating_sub(1 + blips);
        // The smallest waits: the oracle errs toward excusing.
        let needed: u64 = self.backoffs_ms.iter().take(left).sum();
        // A partition's own blip is the call in flight when it began: it
        // failed before the span's attempts, never after them.
        let after = self
            .blips
            .iter()
            .filter(|&&b| b <= at && !self.spans.iter().any(|&(a, _)| a == b))
            .count();
        (0..=after.min(self.backoffs_ms.len())).any(|j| {
            let last: u64 = self.backoffs_ms.iter().rev().take(j).sum();
            let hi = at.saturating_sub(last);
            let lo = hi.saturating_sub(self.budget_ms.saturating_mul(j as u64));
            self.covered_ending_in(needed, lo, hi)
        }) || (0..=blips).any(|k| {
            // Or each attempt met a span of its own, the first `k` failed
            // by single failures: the waits between the others are the
            // later backoffs.
            let gaps = self.backoffs_ms.get(k..n.saturating_sub(1)).unwrap_or(&[]);
            self.attempts_fall_in_spans(gaps, at, at)
        })
    }

    /// Nothing in `[from, to]` kept the client from its work: no outage, no
    /// failed exec (to within a call's deadline), the client up.
    pub fn quiet(&self, from: u64, to: u64) -> bool {
        let overlaps = |&(a, b): &(u64, u64)| a <= to && b >= from;
        !self.spans.iter().any(overlaps)
            && !self.silences.iter().any(overlaps)
            && !self.client_down.iter().any(overlaps)
            && !self
                .blips
                .iter()
                .any(|&b| b + self.budget_ms >= from && b <= to)
    }

    /// The latest each silence lets a cell that was unresolved when it
    /// began stay so: `(start, deadline)`. The client gives up on a
    /// sandbox that has not answered for its give-up time, counted from
    /// its last answer — at most a second into the silence (a call already
    /// on its way) plus one call's deadline — so a silence that outlasts
    /// that must end such a cell (`unknown`) by then. Silences the client
    /// was down in are not judged.
    pub fn give_up_deadlines(&self) -> Vec<(u64, u64)> {
        if self.give_up_ms == 0 {
            return Vec::new();
        }
        self.silences
            .iter()
            .map(|&(a, b)| (a, b, a + 1_000 + self.give_up_ms + self.budget_ms + 1_000))
            .filter(|&(a, b, deadline)| {
                b >= deadline
                    && !self
                        .client_down
                        .iter()
                        .any(|&(x, y)| x <= deadline && y >= a)
            })
            .map(|(a, _, deadline)| (a, deadline))
            .collect()
    }

    /// Could one failed exec have been sent in `[from, to]`: a failure
    /// armed by then, or a span that reaches into it? (A plain exec of
    /// fail open is sent once: one failure makes it `unknown`.)
    pub fn one_failure(&self, from: u64, to: u64) -> bool {
        self.blips.iter().any(|&b| b <= to)
            || self
                .spans
                .iter()
                .any(|&(a, b)| a <= to.saturating_add(100) && b.saturating_add(100) >= from)
    }

    /// Is some `[e - needed, e]` with `lo <= e <= hi` covered by the
    /// union of the spans (to within the 100 ms an exec and a retry timer
    /// may straddle)?
    fn covered_ending_in(&self, needed: u64, lo: u64, hi: u64) -> bool {
        let mut spans = self.spans.clone();
        spans.sort_unstable();
        // The union, spans within 100 ms of each other joined.
        let mut union: Vec<(u64, u64)> = Vec::new();
        for (a, b) in spans {
            match union.last_mut() {
                Some((_, reach)) if a <= reach.saturating_add(100) => *reach = (*reach).max(b),
                _ => union.push((a, b)),
            }
        }
        union.iter().any(|&(a, b)| {
            let earliest = lo.max((a + needed).saturating_sub(100));
            let latest = hi.min(b.saturating_add(100));
            earliest <= latest
        })
    }

    /// Could attempts `gaps` apart (in order: the first attempt, then one
    /// after each wait), the last at some `e` with `lo <= e <= hi`, each
    /// have met a span (to within the 100 ms an exec and a retry timer may
    /// straddle)? Each attempt, not the stretch between them: a client
    /// whose backoff carried it over a short reachable gap between two
    /// partitions failed every attempt it made (drawn seed 400751: five
    /// attempts in one partition, the sixth in the next, 480 ms later).
    fn attempts_fall_in_spans(&self, gaps: &[u64], lo: u64, hi: u64) -> bool {
        // How long before the last attempt each attempt came.
        let mut before_last: Vec<u64> = vec![0];
        for gap in gaps.iter().rev() {
            before_last.push(before_last.last().copied().unwrap_or(0) + gap);
        }
        let met = |t: u64| {
            self.spans
                .iter()
                .any(|&(a, b)| a.saturating_sub(100) <= t && t <= b.saturating_add(100))
        };
        let fits = |e: u64| before_last.iter().all(|&d| e >= d && met(e - d));
        // The last attempts' times that fit form intervals whose ends are
        // where some attempt meets a span's end: trying those (and the
        // bounds) tries every interval.
        let mut candidates = vec![lo, hi];
        for &(a, b) in &self.spans {
            for &d in &before_last {
                candidates.push(a.saturating_sub(100) + d);
                candidates.push(b.saturating_add(100) + d);
            }
        }
        candidates
            .into_iter()
            .filter(|e| (lo..=hi).contains(e))
            .any(fits)
    }
}

/// A broken invariant.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case", tag = "violation")]
pub enum Violation {
    /// A cell that completed delivered less output than it wrote.
    LostOutput {
        /// The cell.
        cell: String,
        /// What the cell wrote.
        wrote: String,
        /// What the client delivered.
        delivered: String,
    },
    /// The client delivered output the cell did not write (twice, or out of order).
    DuplicatedOutput {
        /// The cell.
        cell: String,
        /// What was wrong.
        detail: String,
    },
    /// One cell's code ran more than once.
    DoubleExecution {
        /// The cell.
        cell: String,
        /// How many times it started.
        executions: u32,
    },
    /// A process of a cancelled cell is still alive.
    CancelSurvivor {
        /// The cell.
        cell: String,
        /// The survivors.
        pids: Vec<u32>,
    },
    /// A cancelled cell (or one whose shim was killed) resolved while a
    /// process of it still ran.
    CancelResolvedEarly {
        /// The cell.
        cell: String,
        /// When its last process ended (virtual ms).
        at_ms: u64,
    },
    /// A cancel killed something that was not the cell's.
    Collateral {
        /// What was hit.
        detail: String,
    },
    /// A client call took longer than its bound.
    MissedDeadline {
        /// The call.
        call: String,
        /// How long it took, or `None` if it never returned.
        took_ms: Option<u64>,
        /// Its bound.
        budget_ms: u64,
    },
    /// The client said the kernel's state was lost, but no kernel died.
    FalseStateLost {
        /// When it said so.
        at_ms: u64,
    },
    /// A kernel died and the client carried on as if nothing had happened.
    MissedStateLost {
        /// The cell that resolved `ok` on a dead kernel's state.
        cell: String,
    },
    /// The client reported a kernel dead whose sandbox was replaced or
    /// rebooted under it, without saying so.
    ReplacementUnreported {
        /// Which kernel, when, and what the sandbox did.
        detail: String,
    },
    /// The client reported a kernel replaced by another process under
    /// its daemon's pid where no pid had been reused.
    ReplacementUnfounded {
        /// Which kernel, when, on what evidence.
        detail: String,
    },
    /// A Python kernel's namespace was gone, yet neither its interpreter
    /// nor its daemon had died.
    NamespaceLost {
        /// The cell that found a bound name unbound.
        cell: String,
    },
    /// A cell found the Python namespace gone, and no cell before it
    /// carried the note that the interpreter died, nor was state lost
    /// reported.
    UnreportedLoss {
        /// The cell.
        cell: String,
    },
    /// A shell cell ended by itself without saving its state, and the
    /// next cell of its kernel did not say the state was not kept
    /// ([`loss_notes`]).
    StateNoteMissing {
        /// The next cell.
        cell: String,
        /// Which cell, and why the note was due.
        detail: String,
    },
    /// A shell cell read back a state without what earlier cells of its
    /// kernel did, and nothing accounts for the loss: no reported death
    /// of the kernel, no note that a cell's state was not kept, no earlier
    /// cell that may have stopped before its save.
    ShellStateLost {
        /// The cell.
        cell: String,
    },
    /// A cell the client had written off (error, cancelled, timed out) ran
    /// afterwards. (`unknown` promises nothing either way.)
    RanAfterResolution {
        /// The cell.
        cell: String,
        /// When a process of it was spawned.
        at_ms: u64,
    },
    /// A cell resolved more than once, or never.
    BadResolution {
        /// The cell.
        cell: String,
        /// What was wrong.
        detail: String,
    },
    /// Processes or files were left after shutdown.
    Leak {
        /// What was left.
        detail: String,
    },
    /// After every fault healed, a fresh cell did not run.
    NoProgress {
        /// What the liveness cell gave.
        detail: String,
    },
    /// A cell stayed unresolved well past the client's give-up time while
    /// the sandbox answered nothing: a silence must end in `unknown` within
    /// `Config::unreachable_after` of the last answer, not when the
    /// attempts happen to run out (or never).
    LateGiveUp {
        /// The cell.
        cell: String,
        /// When the silence began, and the deadline it was still
        /// unresolved at.
        detail: String,
    },
    /// A kernel stayed open, idle, well past the client's idle timeout
    /// while nothing kept the client from shutting it down.
    KernelNotReaped {
        /// The kernel.
        kernel: String,
        /// Since when it was idle, and the deadline it outlived.
        detail: String,
    },
    /// A cell resolved `unknown` though the sandbox answered all along:
    /// the client gave up on a healthy kernel.
    NeedlessUnknown {
        /// The cell.
        cell: String,
        /// When it was resolved so.
        at_ms: u64,
    },
    /// A cell resolved as run to its end while processes of it kept
    /// running, and nobody was told (they die with its cancel, a reset
    /// or shutdown, so the caller must know they exist).
    UnreportedLeftovers {
        /// The cell.
        cell: String,
        /// Its processes still alive when the script ended.
        pids: Vec<u32>,
    },
    /// The agent killed a kernel that had work (an idle exit while a cell
    /// ran): a loss it caused itself, whatever it then reported.
    SelfInflictedLoss {
        /// What happened.
        detail: String,
    },
    /// The scenario's own expectation failed (fault-free runs only).
    Expectation {
        /// What was expected and seen.
        detail: String,
    },
    /// The harness itself failed (driver error, stall, simulation error).
    Harness {
        /// What failed.
        detail: String,
    },
    /// The run panicked: the product's code (an agent or client state
    /// machine) or the simulation's.
    Panicked {
        /// The panic's message.
        detail: String,
    },
    /// A kernel's daemon got SIGTERM and processes of the kernel (shims,
    /// the interpreter, cell processes) outlived its stop, or the stopped
    /// daemon exited leaving a cell of the kernel unresolved; or a daemon
    /// exited idle leaving processes of its kernel running.
    StopSurvivor {
        /// The kernel, when, and what still ran.
        detail: String,
    },
    /// The client evicted a kernel for the cap while it held no more
    /// kernels than the cap.
    EvictedUnderCap {
        /// The kernel.
        kernel: String,
        /// When.
        at_ms: u64,
        /// Kernels open then (the evicted one included), at most.
        open: usize,
        /// The cap.
        cap: usize,
    },
    /// Beyond the cap the client evicted a kernel while another idle one
    /// had been used less recently.
    EvictedNotLeastRecent {
        /// The kernel evicted.
        kernel: String,
        /// The idle kernel used before it, and when each was last used.
        detail: String,
    },
    /// A cell took the client past its kernel cap while another kernel
    /// was idle, and no kernel was evicted.
    CapNotKept {
        /// The kernel the cell ran on.
        kernel: String,
        /// How many were open, which was idle, until when.
        detail: String,
    },
    /// The client's reaper evicted a kernel while a cell of it was in
    /// flight.
    ReapedBusyKernel {
        /// The kernel.
        kernel: String,
        /// The cell in flight.
        cell: String,
        /// When (virtual ms).
        at_ms: u64,
    },
    /// A cell's journal numbers were not contiguous from 1 (an entry lost
    /// or written twice).
    JournalGap {
        /// Which journal and its numbers.
        detail: String,
    },
    /// Two daemons owned one kernel at once.
    TwoDaemons {
        /// Which kernel, which daemons, when.
        detail: String,
    },
    /// The agent reported a process unkillable that a KILL had ended by
    /// the time the report reached the client.
    FalseUnkillable {
        /// Which cell, which process, when it died and when it was reported.
        detail: String,
    },
    /// The agent said a cell's state was not kept, for want of a cause
    /// that did not happen.
    FalseStateNote {
        /// Which note, and what really happened.
        detail: String,
    },
    /// Fail open went wrong: a cell that could not get a kernel did not
    /// run once without one, saying why (or, with the fallback off, was
    /// not refused with the reason), or one that could ran without.
    FailOpen {
        /// The cell.
        cell: String,
        /// What was wrong.
        detail: String,
    },
    /// A cell refused for good (its kernel not started, the cell refused,
    /// its journal unreadable) in a sandbox with no flaw.
    NeedlessRefusal {
        /// The cell.
        cell: String,
        /// The refusal.
        detail: String,
    },
    /// Every cell resolved, yet the client still counted tool calls
    /// awaiting its frontend's answer (`Client::calls_awaiting_frontend`:
    /// what a CLI shows as "waiting on N tool calls").
    ToolCallsLeftAwaiting {
        /// How many.
        count: usize,
    },
    /// The client said a cell's output was cut at the journal's cap,
    /// though its processes wrote less than the cap.
    FalseClip {
        /// The cell.
        cell: String,
        /// What was said and written.
        detail: String,
    },
    /// Code a shell cannot take whole (a NUL byte) ran, or resolved as
    /// if it had.
    RefusedCodeRan {
        /// The cell.
        cell: String,
        /// What ran, or how it resolved.
        detail: String,
    },
    /// A tool call's answer file was written more than once.
    ToolAnsweredTwice {
        /// The call and how often.
        detail: String,
    },
    /// A tool call was answered after its cell's result was journaled.
    ToolAnsweredOutsideCell {
        /// The call.
        detail: String,
    },
    /// The client's handler ran for a call the sandbox refused.
    RefusedToolCallRan {
        /// The call.
        detail: String,
    },
    /// A caller got a result no run of the handler returned for its call.
    ToolResultMismatch {
        /// The call, what it got, what the handler returned.
        detail: String,
    },
    /// One client process ran the handler twice for one call.
    ToolHandlerRepeated {
        /// The call, the client process, how often.
        detail: String,
    },
    /// A kernel's background log lost, invented, repeated or reordered
    /// what its cells' background processes printed after they resolved,
    /// or broke its cap.
    BackgroundLog {
        /// The kernel.
        kernel: String,
        /// What was wrong.
        detail: String,
    },
    /// A cell delivered what a background process printed after its own
    /// cell resolved (the background log's, never a cell's output).
    BackgroundInCell {
        /// The cell that delivered it.
        cell: String,
        /// What.
        detail: String,
    },
    /// A call a cell made while it ran, with its credential, was refused
    /// by the sandbox, or never answered though its cell ran to its end.
    ToolCallFailed {
        /// The call, its cell, how it ended.
        detail: String,
    },
    /// A call answered in the sandbox before its cell's result, in a
    /// cell that ran once to its end, was never reported answered by the
    /// client.
    ToolAnswerUnreported {
        /// The call and its cell.
        detail: String,
    },
    /// A call made after its cell ended was not refused at once.
    ToolCallLingered {
        /// The call, its cell, how long it took.
        detail: String,
    },
    /// A caller went on waiting for its answer past its own deadline
    /// (`TETHER_CALL_TIMEOUT` from its start).
    ToolCallOverran {
        /// The call, its cell, when.
        detail: String,
    },
    /// A cell's note that the Python interpreter died says how in words
    /// that match no death the sandbox saw (or in none).
    LossNoteUntrue {
        /// The cell.
        cell: String,
        /// What the note said.
        detail: String,
    },
    /// A cell carried the note that the interpreter died for a death an
    /// earlier cell had reported already.
    LossReportedTwice {
        /// The cell.
        cell: String,
        /// When the client delivered its note.
        at_ms: u64,
    },
    /// An interpreter whose daemon had died took a cell the client
    /// started after that death.
    OrphanInterpreterRan {
        /// The cell.
        cell: String,
        /// When it started, was taken, and the daemon died.
        detail: String,
    },
    /// A daemon sent STOP or KILL to a cell's processes before the grace
    /// period after its TERM had passed.
    KillBeforeGrace {
        /// Which daemon, cell and process, when.
        detail: String,
    },
    /// A daemon that caught SIGTERM started a cell after it.
    StartedAfterTerm {
        /// Which daemon, what it started, when.
        detail: String,
    },
    /// A shim started a cell whose cancel was recorded before it looked:
    /// a cancel that lands before the cell starts must keep it from
    /// running at all.
    StartedAfterCancel {
        /// Which shim, which cell, when.
        detail: String,
    },
    /// A cell said a shell cell's state was not kept, and nothing in the
    /// world lost it ([`loss_notes`]).
    LossUnjustified {
        /// The cell that carried the note.
        cell: String,
        /// What it said, and what the world shows.
        detail: String,
    },
    /// A cell the client failed as lost with its kernel (the op that
    /// proved the daemon gone ends what the cell runs before it answers)
    /// still had processes running at the end.
    LostCellRanOn {
        /// The cell.
        cell: String,
        /// Its processes still alive.
        pids: Vec<u32>,
    },
}

impl Violation {
    /// The violation's kind, for tables.
    pub fn kind(&self) -> &'static str {
        match self {
            Violation::LostOutput { .. } => "lost_output",
            Violation::DuplicatedOutput { .. } => "duplicated_output",
            Violation::DoubleExecution { .. } => "double_execution",
            Violation::CancelSurvivor { .. } => "cancel_survivor",
            Violation::CancelResolvedEarly { .. } => "cancel_resolved_early",
            Violation::Collateral { .. } => "collateral",
            Violation::MissedDeadline { .. } => "missed_deadline",
            Violation::FalseStateLost { .. } => "false_state_lost",
            Violation::MissedStateLost { .. } => "missed_state_lost",
            Violation::NamespaceLost { .. } => "namespace_lost",
            Violation::UnreportedLoss { .. } => "unreported_loss",
            Violation::StateNoteMissing { .. } => "state_note_missing",
            Violation::ShellStateLost { .. } => "shell_state_lost",
            Violation::RanAfterResolution { .. } => "ran_after_resolution",
            Violation::BadResolution { .. } => "bad_resolution",
            Violation::Leak { .. } => "leak",
            Violation::NoProgress { .. } => "no_progress",
            Violation::NeedlessUnknown { .. } => "needless_unknown",
            Violation::LateGiveUp { .. } => "late_give_up",
            Violation::KernelNotReaped { .. } => "kernel_not_reaped",
            Violation::UnreportedLeftovers { .. } => "unreported_leftovers",
            Violation::SelfInflictedLoss { .. } => "self_inflicted_loss",
            Violation::Expectation { .. } => "expectation",
            Violation::Harness { .. } => "harness",
            Violation::Panicked { .. } => "panicked",
            Violation::StopSurvivor { .. } => "stop_survivor",
            Violation::ReapedBusyKernel { .. } => "reaped_busy_kernel",
            Violation::CapNotKept { .. } => "cap_not_kept",
            Violation::EvictedUnderCap { .. } => "evicted_under_cap",
            Violation::EvictedNotLeastRecent { .. } => "evicted_not_least_recent",
            Violation::JournalGap { .. } => "journal_gap",
            Violation::TwoDaemons { .. } => "two_daemons",
            Violation::FalseUnkillable { .. } => "false_unkillable",
            Violation::ReplacementUnreported { .. } => "replacement_unreported",
            Violation::ReplacementUnfounded { .. } => "replacement_unfounded",
            Violation::FalseStateNote { .. } => "false_state_note",
            Violation::FailOpen { .. } => "fail_open",
            Violation::NeedlessRefusal { .. } => "needless_refusal",
            Violation::ToolAnsweredTwice { .. } => "tool_answered_twice",
            Violation::FalseClip { .. } => "false_clip",
            Violation::RefusedCodeRan { .. } => "refused_code_ran",
            Violation::ToolCallsLeftAwaiting { .. } => "tool_calls_left_awaiting",
            Violation::ToolAnsweredOutsideCell { .. } => "tool_answered_outside_cell",
            Violation::RefusedToolCallRan { .. } => "refused_tool_call_ran",
            Violation::ToolResultMismatch { .. } => "tool_result_mismatch",
            Violation::ToolHandlerRepeated { .. } => "tool_handler_repeated",
            Violation::BackgroundLog { .. } => "background_log",
            Violation::BackgroundInCell { .. } => "background_in_cell",
            Violation::ToolCallFailed { .. } => "tool_call_failed",
            Violation::ToolCallLingered { .. } => "tool_call_lingered",
            Violation::ToolCallOverran { .. } => "tool_call_overran",
            Violation::ToolAnswerUnreported { .. } => "tool_answer_unreported",
            Violation::LossReportedTwice { .. } => "loss_reported_twice",
            Violation::LossNoteUntrue { .. } => "loss_note_untrue",
            Violation::OrphanInterpreterRan { .. } => "orphan_interpreter_ran",
            Violation::KillBeforeGrace { .. } => "kill_before_grace",
            Violation::StartedAfterTerm { .. } => "started_after_term",
            Violation::StartedAfterCancel { .. } => "started_after_cancel",
            Violation::LossUnjustified { .. } => "loss_unjustified",
            Violation::LostCellRanOn { .. } => "lost_cell_ran_on",
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::LostOutput {
                cell,
                wrote,
                delivered,
            } => write!(
                f,
                "lost output in {cell}: it wrote {wrote:?}, the client delivered {delivered:?}"
            ),
            Violation::DuplicatedOutput { cell, detail } => {
                write!(f, "duplicated output in {cell}: {detail}")
            }
            Violation::DoubleExecution { cell, executions } => {
                write!(f, "{cell} ran {executions} times (at most once allowed)")
            }
            Violation::CancelSurvivor { cell, pids } => {
                write!(f, "{cell} was cancelled (or its shim killed) but pids {pids:?} survive")
            }
            Violation::CancelResolvedEarly { cell, at_ms } => write!(
                f,
                "{cell} resolved as cancelled (or as its shim's death) while its processes ran (the last ended at {at_ms} ms)"
            ),
            Violation::Collateral { detail } => write!(f, "cancel hit a bystander: {detail}"),
            Violation::MissedDeadline {
                call,
                took_ms,
                budget_ms,
            } => match took_ms {
                Some(t) => write!(f, "{call} took {t} ms, bound {budget_ms} ms"),
                None => write!(f, "{call} never returned (bound {budget_ms} ms)"),
            },
            Violation::FalseStateLost { at_ms } => write!(
                f,
                "client reported state lost at {at_ms} ms but no kernel died"
            ),
            Violation::MissedStateLost { cell } => write!(
                f,
                "the kernel died, yet {cell} resolved ok without a state-lost report"
            ),
            Violation::NamespaceLost { cell } => write!(
                f,
                "{cell} found its kernel's names gone (a Python namespace, a shell's variables), but no interpreter or kernel died"
            ),
            Violation::UnreportedLoss { cell } => write!(
                f,
                "{cell} found its kernel's names gone (a Python namespace, a shell's variables), but their loss was never reported"
            ),
            Violation::StateNoteMissing { cell, detail } => {
                write!(f, "{cell} did not report a shell state that was not kept: {detail}")
            }
            Violation::ShellStateLost { cell } => write!(
                f,
                "{cell} read back a shell state without what earlier cells did, and no death, note or unfinished cell accounts for it"
            ),
            Violation::RanAfterResolution { cell, at_ms } => write!(
                f,
                "{cell} was resolved as not completed, yet its code started at {at_ms} ms"
            ),
            Violation::BadResolution { cell, detail } => write!(f, "{cell}: {detail}"),
            Violation::Leak { detail } => write!(f, "left after shutdown: {detail}"),
            Violation::NoProgress { detail } => {
                write!(f, "no progress after faults healed: {detail}")
            }
            Violation::KernelNotReaped { kernel, detail } => {
                write!(f, "kernel {kernel} was not reaped: {detail}")
            }
            Violation::LateGiveUp { cell, detail } => write!(
                f,
                "{cell} was not given up on in time: {detail}"
            ),
            Violation::NeedlessUnknown { cell, at_ms } => write!(
                f,
                "{cell} resolved unknown at {at_ms} ms, but no fault kept the sandbox from answering"
            ),
            Violation::UnreportedLeftovers { cell, pids } => write!(
                f,
                "{cell} resolved as complete, its processes {pids:?} ran on, and no leftovers were reported"
            ),
            Violation::SelfInflictedLoss { detail } => {
                write!(f, "the agent killed its own kernel: {detail}")
            }
            Violation::Expectation { detail } => write!(f, "expectation failed: {detail}"),
            Violation::Harness { detail } => write!(f, "harness: {detail}"),
            Violation::Panicked { detail } => write!(f, "the run panicked: {detail}"),
            Violation::StopSurvivor { detail } => {
                write!(f, "a stopped kernel left processes running or a cell open: {detail}")
            }
            Violation::EvictedNotLeastRecent { kernel, detail } => write!(
                f,
                "the client evicted kernel {kernel} beyond its cap, not the least recently used: {detail}"
            ),
            Violation::EvictedUnderCap {
                kernel,
                at_ms,
                open,
                cap,
            } => write!(
                f,
                "the client evicted kernel {kernel} at {at_ms} ms for the cap of {cap} kernels with at most {open} open"
            ),
            Violation::CapNotKept { kernel, detail } => {
                write!(f, "a cell on {kernel} took the client past its kernel cap: {detail}")
            }
            Violation::ReapedBusyKernel {
                kernel,
                cell,
                at_ms,
            } => write!(
                f,
                "the client evicted kernel {kernel} at {at_ms} ms while its cell {cell} was in flight"
            ),
            Violation::JournalGap { detail } => {
                write!(f, "journal not contiguous or not begun by its acceptance: {detail}")
            }
            Violation::TwoDaemons { detail } => write!(f, "two daemons for one kernel: {detail}"),
            Violation::FalseUnkillable { detail } => {
                write!(f, "a killable process reported unkillable: {detail}")
            }
            Violation::ReplacementUnreported { detail } => {
                write!(f, "a replaced sandbox reported as a dead daemon: {detail}")
            }
            Violation::ReplacementUnfounded { detail } => {
                write!(f, "a dead daemon reported as replaced: {detail}")
            }
            Violation::FalseStateNote { detail } => {
                write!(f, "a state-not-kept note with no cause: {detail}")
            }
            Violation::FailOpen { cell, detail } => write!(f, "fail open, {cell}: {detail}"),
            Violation::NeedlessRefusal { cell, detail } => {
                write!(f, "refused for good, {cell}: {detail}")
            }
            Violation::RefusedCodeRan { cell, detail } => {
                write!(f, "{cell} holds a NUL byte, which no shell can take whole, yet {detail}")
            }
            Violation::FalseClip { cell, detail } => {
                write!(f, "{cell}'s output said cut at the cap, though it was not: {detail}")
            }
            Violation::ToolAnsweredTwice { detail } => {
                write!(f, "a tool call answered twice in the sandbox: {detail}")
            }
            Violation::ToolCallsLeftAwaiting { count } => write!(
                f,
                "every cell resolved, yet the client still counts {count} tool call(s) awaiting the frontend"
            ),
            Violation::ToolAnsweredOutsideCell { detail } => {
                write!(f, "a tool call answered after its cell ended: {detail}")
            }
            Violation::RefusedToolCallRan { detail } => {
                write!(f, "the host's tool handler ran for a refused call: {detail}")
            }
            Violation::ToolResultMismatch { detail } => write!(
                f,
                "a cell got a tool result its handler never returned: {detail}"
            ),
            Violation::ToolCallFailed { detail } => {
                write!(f, "a tool call of a running cell failed: {detail}")
            }
            Violation::ToolHandlerRepeated { detail } => write!(
                f,
                "one client process ran the tool handler twice for one call: {detail}"
            ),
            Violation::BackgroundLog { kernel, detail } => {
                write!(f, "the background log of kernel {kernel}: {detail}")
            }
            Violation::BackgroundInCell { cell, detail } => write!(f, "{cell}: {detail}"),
            Violation::ToolAnswerUnreported { detail } => write!(
                f,
                "a tool call answered in its cell was never reported answered: {detail}"
            ),
            Violation::ToolCallOverran { detail } => {
                write!(f, "a tool call waited on past its deadline: {detail}")
            }
            Violation::ToolCallLingered { detail } => {
                write!(f, "a tool call of an ended cell was not refused at once: {detail}")
            }
            Violation::LossNoteUntrue { cell, detail } => {
                write!(f, "{cell}'s note of the interpreter's death is untrue: {detail}")
            }
            Violation::LossReportedTwice { cell, at_ms } => write!(
                f,
                "{cell} reported the interpreter's death at {at_ms} ms, a death an earlier cell reported"
            ),
            Violation::OrphanInterpreterRan { cell, detail } => write!(
                f,
                "{cell} ran in the interpreter of a dead daemon (its old namespace): {detail}"
            ),
            Violation::KillBeforeGrace { detail } => {
                write!(f, "a cancel killed before its grace period was over: {detail}")
            }
            Violation::StartedAfterTerm { detail } => {
                write!(f, "a stopped daemon started a cell: {detail}")
            }
            Violation::StartedAfterCancel { detail } => {
                write!(f, "a cell cancelled before it started ran: {detail}")
            }
            Violation::LossUnjustified { cell, detail } => {
                write!(f, "an unjustified state loss note in {cell}: {detail}")
            }
            Violation::LostCellRanOn { cell, pids } => write!(
                f,
                "{cell} was failed as lost with its kernel, yet its processes {pids:?} ran on"
            ),
        }
    }
}

fn show(bytes: &[u8]) -> String {
    crate::excerpt::excerpt(bytes, 80)
}

/// Outcomes that claim the cell ran to its end.
fn completed(outcome: &CellOutcome) -> bool {
    matches!(outcome, CellOutcome::Ok | CellOutcome::Exit { .. })
}

/// Checks every invariant; returns the violations, sorted, without duplicates.
pub fn check(obs: &Observations) -> Vec<Violation> {
    let mut v = Vec::new();
    for e in &obs.harness_errors {
        v.push(Violation::Harness { detail: e.clone() });
    }
    let first_death = obs.kernel_deaths.iter().min().copied();
    for cell in &obs.cells {
        check_cell(cell, &mut v);
        if let (Some(timeout), Some(at)) = (cell.timeout_ms, cell.timed_out_at) {
            let ran = at.saturating_sub(cell.started_ms);
            if ran.saturating_add(obs.sandbox_clock_jumps_ms) < timeout {
                v.push(Violation::BadResolution {
                    cell: cell.label.clone(),
                    detail: format!(
                        "timed out {ran} ms after it started, its timeout is {timeout} ms"
                    ),
                });
            }
        }
    }
    for (label, n) in &obs.extra_executions {
        v.push(Violation::DoubleExecution {
            cell: label.clone(),
            executions: *n,
        });
    }
    if let Some(outages) = &obs.outages {
        // A sandbox that cannot start a kernel (fail open) runs cells as
        // plain execs, bounded by `Config::fallback_limit`, not the
        // give-up time (fail_open seed 103885).
        let deadlines = if obs.flawed.is_some() {
            Vec::new()
        } else {
            outages.give_up_deadlines()
        };
        for (start, deadline) in deadlines {
            for cell in &obs.cells {
                let unresolved =
                    |at: u64| cell.resolved_ms.or(cell.ended_ms).is_none_or(|e| e > at);
                if cell.ran_without_kernel.is_none()
                    && cell.started_ms < start
                    && unresolved(start)
                    && unresolved(deadline)
                {
                    v.push(Violation::LateGiveUp {
                        cell: cell.label.clone(),
                        detail: format!(
                            "the sandbox answered nothing from {start} ms on, yet it was still unresolved at {deadline} ms (give-up time {} ms)",
                            outages.give_up_ms
                        ),
                    });
                }
            }
        }
        for cell in &obs.cells {
            if let (Some(CellOutcome::Unknown { .. }), Some(at)) = (&cell.outcome, cell.ended_ms) {
                // A plain exec is sent once: one failure excuses it.
                let plain =
                    cell.ran_without_kernel.is_some() && outages.one_failure(cell.started_ms, at);
                if !outages.excuse(at) && !plain {
                    v.push(Violation::NeedlessUnknown {
                        cell: cell.label.clone(),
                        at_ms: at,
                    });
                }
            }
        }
    }
    for detail in &obs.self_inflicted {
        v.push(Violation::SelfInflictedLoss {
            detail: detail.clone(),
        });
    }
    for c in &obs.collateral {
        v.push(Violation::Collateral { detail: c.clone() });
    }
    for detail in &obs.stop_survivors {
        v.push(Violation::StopSurvivor {
            detail: detail.clone(),
        });
    }
    for call in &obs.calls {
        let took = call.ended_ms.map(|e| e.saturating_sub(call.started_ms));
        if took.is_none_or(|t| t > call.budget_ms) {
            v.push(Violation::MissedDeadline {
                call: call.name.clone(),
                took_ms: took,
                budget_ms: call.budget_ms,
            });
        }
    }
    // "State lost" only with a real death before it.
    for &at in &obs.state_lost_reports {
        if first_death.is_none_or(|d| d > at) && !obs.lost_to_other_frontend.contains(&at) {
            v.push(Violation::FalseStateLost { at_ms: at });
        }
    }
    // A death must be reported before a cell that was started after it
    // passes as ok (it ran on a fresh kernel, or on nothing).
    for cell in &obs.cells {
        let end = cell.delivered_ms();
        // A death of another kernel's daemon (known by kernel) took
        // nothing of this cell's.
        let frontend = if cell.second_client {
            crate::observe::Frontend::Second
        } else {
            crate::observe::Frontend::First
        };
        let died_before = match kernel_of(cell) {
            // drawn_clients seed 1227: the second frontend's daemon died
            // with its sandbox; the first started the kernel afresh after
            // and ran two cells on it.
            Some(k) if obs.second_frontend => obs
                .known_deaths_by_frontend
                .iter()
                .any(|(d, dk, f)| dk == k && *f == frontend && *d < cell.started_ms),
            Some(k) if !obs.known_deaths_by_kernel.is_empty() => obs
                .known_deaths_by_kernel
                .iter()
                .any(|(d, dk)| dk == k && *d < cell.started_ms),
            _ => obs.known_kernel_deaths.iter().any(|&d| d < cell.started_ms),
        };
        let reported = |end: u64| {
            obs.state_lost_reports
                .iter()
                .any(|&r| first_death.is_some_and(|d| r >= d) && r <= end)
                || evicted_before(obs, cell, end)
        };
        // A frontend new to the kernel cannot be told: the other one,
        // which knew the daemon, says so at its own next call.
        let by = if never_saw_the_lost_state(obs, cell, end) {
            u64::MAX
        } else {
            end
        };
        if died_before && cell.outcome == Some(CellOutcome::Ok) && !reported(by) {
            v.push(Violation::MissedStateLost {
                cell: cell.label.clone(),
            });
        }
    }
    check_stops(obs, &mut v);
    check_namespace(obs, &mut v);
    check_shell_state(obs, &mut v);
    check_tools(&obs.tools, &mut v);
    background::check(obs, &mut v);
    check_tool_calls_work(obs, &mut v);
    call_ends::check(obs, &mut v);
    interpreter::check(obs, &mut v);
    loss_notes::check(obs, &mut v);
    // The reaper and the cap are one client record's: its kernels, its
    // uses, its timers. With two frontends each keeps its own, which the
    // script's uses and calls do not tell apart (a kernel the other
    // frontend used is idle to this one): judged with one frontend only.
    if !obs.second_frontend {
        check_evictions(obs, &mut v);
        check_cap_evictions(obs, &mut v);
        check_cap_kept(obs, &mut v);
        check_idle_evictions(obs, &mut v);
    }
    escalation::check(obs, &mut v);
    // What the host judged on its own ground truth, a finding a line.
    let found: [(&[String], MakeViolation); 6] = [
        (&obs.journal_gaps, |detail| Violation::JournalGap { detail }),
        (&obs.two_daemons, |detail| Violation::TwoDaemons { detail }),
        (&obs.false_unkillable, |detail| Violation::FalseUnkillable {
            detail,
        }),
        (&obs.replacements_unreported, |detail| {
            Violation::ReplacementUnreported { detail }
        }),
        (&obs.replacements_unfounded, |detail| {
            Violation::ReplacementUnfounded { detail }
        }),
        (&obs.false_notes, |detail| Violation::FalseStateNote {
            detail,
        }),
    ];
    for (details, violation) in found {
        v.extend(details.iter().cloned().map(violation));
    }
    if !obs.leaked_records.is_empty() {
        v.push(Violation::Leak {
            detail: format!("client records {}", obs.leaked_records.join(", ")),
        });
    }
    if !obs.leaked_cgroups.is_empty() {
        v.push(Violation::Leak {
            detail: format!("cgroups {}", obs.leaked_cgroups.join(", ")),
        });
    }
    if !obs.leaked_processes.is_empty() {
        v.push(Violation::Leak {
            detail: format!("processes {}", obs.leaked_processes.join(", ")),
        });
    }
    if !obs.leaked_files.is_empty() {
        v.push(Violation::Leak {
            detail: format!("files {}", obs.leaked_files.join(", ")),
        });
    }
    check_fail_open(obs, &mut v);
    // With the fallback off, a sandbox that cannot start the main (shell)
    // kernel refuses the liveness cell too: with the reason, that is its
    // progress.
    let refused = obs
        .flawed
        .filter(|f| !f.fallback && f.flaw.blocks(Lang::Shell))
        .map(|f| f.flaw.reason_says());
    if obs.finished {
        match &obs.liveness {
            Some(CellOutcome::Ok) if refused.is_none() => {}
            Some(CellOutcome::Error { message })
                if refused.is_some_and(|why| message.contains(why)) => {}
            Some(other) => v.push(Violation::NoProgress {
                detail: format!("liveness cell resolved {other}"),
            }),
            None => v.push(Violation::NoProgress {
                detail: "liveness cell did not resolve".into(),
            }),
        }
    } else if obs.harness_errors.is_empty() {
        v.push(Violation::Harness {
            detail: "the client script did not finish before the simulation's end".into(),
        });
    }
    v.sort();
    v.dedup();
    v
}

/// The kernel a cell's key (`kernel#seq`) names.
fn kernel_of(cell: &CellObs) -> Option<&str> {
    cell.key
        .as_deref()
        .and_then(|k| k.rsplit_once('#'))
        .map(|(k, _)| k)
}

/// A cell resolved as its kernel's stop (its daemon got SIGTERM) only if
/// that daemon got one: a daemon that takes its idle exit for a stop
/// fails its cells with a SIGTERM nobody sent.
fn check_stops(obs: &Observations, v: &mut Vec<Violation>) {
    let Some(termed) = &obs.termed_kernels else {
        return;
    };
    for cell in &obs.cells {
        let stop =
            matches!(&cell.outcome, Some(CellOutcome::Error { message }) if *message == STOPPED);
        let kernel = kernel_of(cell);
        if stop && kernel.is_some_and(|k| !termed.iter().any(|t| t == k)) {
            v.push(Violation::BadResolution {
                cell: cell.label.clone(),
                detail: format!(
                    "resolved as its kernel's stop by SIGTERM, but no SIGTERM reached kernel {}'s daemon",
                    kernel.unwrap_or_default()
                ),
            });
        }
    }
}

/// Was `cell`'s kernel evicted by the client's reaper before `end` (ms)?
/// Its state went with it, and the client said so.
fn evicted_before(obs: &Observations, cell: &CellObs, end: u64) -> bool {
    kernel_of(cell).is_some_and(|k| obs.evictions.iter().any(|(at, e)| e == k && *at <= end))
}

/// Fail open (`core/src/client/fallback.rs`), against the sandbox's
/// flaw: a cell whose kernel cannot start runs once as a plain exec, with
/// the reason in its `ran_without_kernel` event, and its outcome is the
/// exec's (127 for `python3 -c` without `python3`); with the fallback off
/// it is refused with the reason and never runs; a cell whose kernel can
/// start never runs without it. No cell runs twice across the fallback and
/// a kernel: the generic double-execution check counts its side effects.
/// `unknown` promises nothing (the plain exec may have been lost).
fn check_fail_open(obs: &Observations, v: &mut Vec<Violation>) {
    let Some(Flawed { flaw, fallback }) = obs.flawed else {
        check_kernels_start(obs, v);
        return;
    };
    let why = flaw.reason_says();
    for cell in &obs.cells {
        let mut wrong = |detail: String| {
            v.push(Violation::FailOpen {
                cell: cell.label.clone(),
                detail,
            });
        };
        let lang = if cell.python {
            Lang::Python
        } else {
            Lang::Shell
        };
        let decided = cell
            .outcome
            .as_ref()
            .filter(|o| !matches!(o, CellOutcome::Unknown { .. }));
        if !flaw.blocks(lang) || !fallback {
            if let Some(reason) = &cell.ran_without_kernel {
                let when = if fallback {
                    format!("its {lang:?} kernel can start ({flaw:?})")
                } else {
                    "the fallback is off".to_owned()
                };
                wrong(format!("ran without a kernel ({reason}), though {when}"));
            }
        }
        if !flaw.blocks(lang) {
            continue;
        }
        // Cancelled before any exec carried it: nothing ran, nothing to say.
        let cancelled_unsent = cell.cancel_requested
            && decided == Some(&CellOutcome::Cancelled)
            && cell.ran_without_kernel.is_none()
            && cell.truth.executions == 0;
        if cancelled_unsent {
            continue;
        }
        if !fallback {
            if cell.truth.executions > 0 {
                wrong(format!(
                    "ran {} times with the fallback off (must be refused)",
                    cell.truth.executions
                ));
            }
            match decided {
                None => {}
                Some(CellOutcome::Error { message }) if message.contains(why) => {}
                Some(o) => wrong(format!(
                    "with the fallback off it must be refused naming {why:?}, resolved {o}"
                )),
            }
            continue;
        }
        // A cell whose client crashed under it, or that was written off as
        // `unknown` with its record kept, is resumed by a client process,
        // and a resumed cell never falls back: it may be refused with the
        // reason, never run.
        let resumed = cell.resolved_by_resume;
        match (&cell.ran_without_kernel, decided) {
            (Some(reason), _) if !reason.contains(why) => wrong(format!(
                "ran without a kernel, the reason {reason:?} does not name {why:?}"
            )),
            (None, Some(CellOutcome::Error { message }))
                if resumed && message.contains(why) && cell.truth.executions == 0 => {}
            (None, Some(o)) => wrong(format!(
                "no kernel can start here ({flaw:?}), yet it resolved {o} without the ran-without-kernel event"
            )),
            _ => {}
        }
        // The plain exec's own status: `python3 -c` where there is none
        // is 127 and runs nothing; anything else runs the code once.
        let no_interpreter = flaw == Flaw::NoPython3 && lang == Lang::Python;
        match decided {
            None => {}
            Some(_) if cell.ran_without_kernel.is_none() => {}
            Some(CellOutcome::Exit { code: 127 }) if no_interpreter => {}
            Some(o) if no_interpreter => wrong(format!(
                "python3 -c without python3 exits 127, resolved {o}"
            )),
            Some(o) if !completed(o) => {
                wrong(format!("a plain exec that returned resolved {o}"));
            }
            Some(_) if cell.truth.executions != 1 => wrong(format!(
                "resolved as run, but its code ran {} times",
                cell.truth.executions
            )),
            Some(_) => {}
        }
        if no_interpreter && cell.truth.executions > 0 {
            wrong(format!(
                "its code ran {} times with no python3 to run it",
                cell.truth.executions
            ));
        }
    }
}

/// A sandbox with no flaw starts every kernel it is asked for and takes
/// every cell, whatever the faults: an outage ends in `unknown` (a give-up
/// keeps the record), a dead daemon is respawned, a spawn that meets
/// another spawn of the same kernel adopts its daemon, a full disk is
/// retried. So no cell there runs without a kernel (`fail_open`), and none
/// is refused for good: its kernel not started, the cell refused, its
/// journal unreadable (`needless_refusal`): the client took a passing
/// condition, or the agent a good request, for a flaw.
fn check_kernels_start(obs: &Observations, v: &mut Vec<Violation>) {
    use tether_core::client::{CELL_REFUSED, JOURNAL_UNREADABLE, KERNEL_NOT_STARTED};
    const FLAWLESS: &str = "though nothing in this sandbox keeps a kernel from starting";
    for cell in &obs.cells {
        if let Some(reason) = &cell.ran_without_kernel {
            v.push(Violation::FailOpen {
                cell: cell.label.clone(),
                detail: format!("ran without a kernel ({reason}), {FLAWLESS}"),
            });
        }
        let refusal = match &cell.outcome {
            Some(CellOutcome::Error { message })
                if message.starts_with(KERNEL_NOT_STARTED) || message.starts_with(CELL_REFUSED) =>
            {
                message
            }
            Some(CellOutcome::Unknown { reason }) if reason.starts_with(JOURNAL_UNREADABLE) => {
                reason
            }
            _ => continue,
        };
        if obs.second_frontend
            && cell
                .outcome
                .as_ref()
                .is_some_and(tether_core::client::asks_to_run_again)
        {
            continue;
        }
        v.push(Violation::NeedlessRefusal {
            cell: cell.label.clone(),
            detail: format!("resolved {refusal:?}, {FLAWLESS}"),
        });
    }
}

/// The reaper's promise (`core/src/client/reaper.rs`): a kernel with a
/// cell in flight is never evicted. A cell is in flight from its call's
/// start to its resolution; one the eviction itself resolved (cancelled,
/// though nobody asked, at the eviction's instant) was in flight too.
fn check_evictions(obs: &Observations, v: &mut Vec<Violation>) {
    for (at, kernel) in &obs.evictions {
        // A cell whose client crashed during its plain exec (fail open)
        // never resolves, and is no kernel's: it left the record first.
        let abandoned = |c: &CellObs| c.ran_without_kernel.is_some() && c.outcome.is_none();
        for cell in obs
            .cells
            .iter()
            .filter(|c| kernel_of(c) == Some(kernel) && !abandoned(c))
        {
            // A cell written off as `unknown` stays in its kernel's record
            // until a resume resolves it: in flight until then.
            // (A planted `cells.values().all(resolved)` in `reapable`
            // was caught by one `drawn` seed in 150.)
            // One run without a kernel (fail open) left the record first.
            // A loss told after the write-off drops it with the kernel's
            // state (drawn seed 501837: the daemon died during a long
            // hold, and the next cell found it gone).
            let end = if cell.written_off_unknown && cell.ran_without_kernel.is_none() {
                let written_off = cell.resolved_ms.unwrap_or(0);
                let lost = obs
                    .state_lost_reports
                    .iter()
                    .copied()
                    .filter(|&r| r >= written_off)
                    .min()
                    .unwrap_or(u64::MAX);
                let again = match (cell.resolutions, cell.last_resolved_ms) {
                    (1.., Some(again)) => again,
                    _ => u64::MAX,
                };
                lost.min(again)
            } else {
                cell.resolved_ms.or(cell.ended_ms).unwrap_or(u64::MAX)
            };
            let during = cell.started_ms < *at && *at < end;
            let by_it = end == *at
                && !cell.cancel_requested
                && cell.outcome == Some(CellOutcome::Cancelled);
            if during || by_it {
                v.push(Violation::ReapedBusyKernel {
                    kernel: kernel.clone(),
                    cell: cell.label.clone(),
                    at_ms: *at,
                });
            }
        }
    }
}

/// The reaper's other promise: a kernel left idle for the idle timeout is
/// shut down, by a client that is being driven (its timers run only
/// then). After each use of a kernel whose cells all resolved (none
/// `unknown`, none run without a kernel), a quiet stretch — no outage, no
/// failed exec, the client up — as long as the idle timeout from the use
/// or the cells' end, plus a second, ends
/// with the kernel evicted if a call of the script (on another kernel)
/// was under way then, unless the script used the kernel again or began
/// its final shutdown first.
fn check_idle_evictions(obs: &Observations, v: &mut Vec<Violation>) {
    /// A resolved cell leaves the kernel's cells at once (its
    /// acknowledgement may follow later): a second covers the timer's
    /// wake and the last exec.
    const SLACK_MS: u64 = 1_000;
    let (Some(idle), Some(shutdown), Some(outages)) =
        (obs.kernel_idle_ms, obs.shutdown_ms, obs.outages.as_ref())
    else {
        return;
    };
    for (i, (used, kernel)) in obs.kernel_uses.iter().enumerate() {
        let next = obs.kernel_uses[i + 1..]
            .iter()
            .filter(|(_, k)| k == kernel)
            .map(|(t, _)| *t)
            .min()
            .unwrap_or(shutdown)
            .min(shutdown);
        let cells: Vec<&CellObs> = obs
            .cells
            .iter()
            .filter(|c| kernel_of(c) == Some(kernel.as_str()))
            .filter(|c| c.started_ms >= *used && c.started_ms < next)
            .collect();
        let settled = cells.iter().all(|c| {
            c.ran_without_kernel.is_none()
                && c.resolved_ms.is_some()
                && !matches!(c.outcome, Some(CellOutcome::Unknown { .. }))
        });
        if cells.is_empty() || !settled {
            continue;
        }
        let from = cells
            .iter()
            .filter_map(|c| c.last_resolved_ms.or(c.resolved_ms))
            .fold(*used, u64::max);
        let deadline = from + idle + SLACK_MS;
        let evicted = obs
            .evictions
            .iter()
            .any(|(t, k)| k == kernel && *t > *used && *t <= deadline);
        // The client runs its timers while it is driven: only a call of the
        // script that spans the deadline (a cell on another kernel) shows
        // a client that should have reaped by then.
        let driven = obs
            .calls
            .iter()
            .any(|c| c.started_ms <= deadline && c.ended_ms.is_some_and(|e| e >= deadline + 100));
        if deadline < next && driven && !evicted && outages.quiet(*used, deadline) {
            v.push(Violation::KernelNotReaped {
                kernel: kernel.clone(),
                detail: format!(
                    "idle since {from} ms, not evicted by {deadline} ms (idle timeout {idle} ms; used again or shut down at {next} ms)"
                ),
            });
        }
    }
}

/// The cap's converse: a cell run on a kernel that takes the client past
/// the cap evicts one of the others before that cell's call returns, when
/// another was idle all along (its cells resolved before, none ever
/// `unknown`, none run without a kernel, its daemon never known dead), the client process did not crash by then
/// (a new one holds what its records say) and the call returned.
fn check_cap_kept(obs: &Observations, v: &mut Vec<Violation>) {
    let Some(cap) = obs.max_kernels else {
        return;
    };
    for (at, kernel) in &obs.kernel_uses {
        let open = open_kernels(obs, *at);
        if open.len() <= cap || !open.contains(kernel) {
            continue;
        }
        let Some(end) = obs
            .calls
            .iter()
            .filter(|c| c.started_ms == *at && c.name.starts_with("run_cell"))
            .find_map(|c| c.ended_ms)
        else {
            continue;
        };
        if obs.client_crashes.iter().any(|&t| t <= end) {
            continue;
        }
        // A kernel whose daemon died keeps its resolved cells until they
        // are acknowledged, which needs a daemon: not reapable meanwhile
        // (tool_call_limits seed 500459).
        let died = |k: &String| {
            obs.known_deaths_by_kernel
                .iter()
                .any(|(t, d)| d == k && *t <= end)
        };
        let idle = |k: &String| {
            let cells: Vec<&CellObs> = obs
                .cells
                .iter()
                .filter(|c| kernel_of(c) == Some(k.as_str()) && c.started_ms <= end)
                .collect();
            !cells.is_empty()
                && cells.iter().all(|c| {
                    c.ran_without_kernel.is_none()
                        && !c.written_off_unknown
                        && c.resolved_ms.is_some_and(|r| r < *at)
                        && !matches!(c.outcome, Some(CellOutcome::Unknown { .. }))
                })
        };
        let idle_other = open
            .iter()
            .filter(|k| *k != kernel)
            .find(|k| idle(k) && !died(k));
        let evicted = obs
            .evictions
            .iter()
            .any(|(t, e)| e != kernel && *t >= *at && *t <= end);
        if let (Some(other), false) = (idle_other, evicted) {
            v.push(Violation::CapNotKept {
                kernel: kernel.clone(),
                detail: format!(
                    "{} kernels open from {at} ms (cap {cap}), {other} idle, none evicted by {end} ms",
                    open.len()
                ),
            });
        }
    }
}

/// The kernels the script ran a cell on by `at` and that no eviction
/// took since their last use before `at`.
fn open_kernels(obs: &Observations, at: u64) -> Vec<String> {
    let mut names: Vec<&String> = obs
        .kernel_uses
        .iter()
        .filter(|(t, _)| *t <= at)
        .map(|(_, k)| k)
        .collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .filter(|k| {
            let last_use = obs
                .kernel_uses
                .iter()
                .filter(|(t, u)| u == *k && *t <= at)
                .map(|(t, _)| *t)
                .max()
                .unwrap_or(0);
            !obs.evictions
                .iter()
                .any(|(t, e)| e == *k && *t >= last_use && *t < at)
        })
        .cloned()
        .collect()
}

/// Makes a violation of one kind from a finding's text.
type MakeViolation = fn(String) -> Violation;

/// The cap's promise: a kernel is evicted for the cap only while the
/// client holds more kernels than the cap. The kernels counted are those
/// the script ran a cell on by then and that no eviction took since their
/// last use: at least as many as the client holds (a client process that
/// crashed may have left some without a record).
fn check_cap_evictions(obs: &Observations, v: &mut Vec<Violation>) {
    let Some(cap) = obs.max_kernels else {
        return;
    };
    for (i, (at, kernel)) in obs.cap_evictions.iter().enumerate() {
        let mut names: Vec<&String> = obs
            .kernel_uses
            .iter()
            .filter(|(t, _)| t <= at)
            .map(|(_, k)| k)
            .collect();
        names.sort();
        names.dedup();
        let open = names
            .into_iter()
            .filter(|k| {
                let last_use = obs
                    .kernel_uses
                    .iter()
                    .filter(|(t, u)| u == *k && t <= at)
                    .map(|(t, _)| *t)
                    .max()
                    .unwrap_or(0);
                // Evicted since: before this eviction, or at its instant
                // by one the client made first. A use at the instant of an
                // earlier eviction came after it (a cell that opens the
                // kernel again: the client evicts only kernels other than
                // the one a cell is run on; drawn seed 103643, `py`
                // evicted idle and opened again in one virtual ms).
                let earlier_now = obs.cap_evictions[..i]
                    .iter()
                    .any(|(t, e)| e == *k && t == at);
                let evicted = obs
                    .evictions
                    .iter()
                    .any(|(t, e)| e == *k && *t > last_use && t < at);
                !(evicted || earlier_now)
            })
            .collect::<Vec<_>>();
        if open.len() <= cap {
            v.push(Violation::EvictedUnderCap {
                kernel: kernel.clone(),
                at_ms: *at,
                open: open.len(),
                cap,
            });
        }
        check_least_recent(obs, *at, kernel, &open, v);
    }
}

/// The kernel a cap eviction takes is the least recently used of the idle
/// ones (`core/src/client/reaper.rs`): a use is a cell's start (or the
/// kernel's opening for it), ties go by name. Judged while the script's
/// uses are the client's: no client process crashed and no record was
/// resumed by then (a resumed kernel counts as used at its resume).
fn check_least_recent(
    obs: &Observations,
    at: u64,
    kernel: &String,
    open: &[&String],
    v: &mut Vec<Violation>,
) {
    let resumed = obs
        .calls
        .iter()
        .any(|c| c.name.starts_with("resume") && c.started_ms <= at);
    if resumed || obs.client_crashes.iter().any(|&t| t <= at) {
        return;
    }
    let last_use = |k: &String| {
        obs.kernel_uses
            .iter()
            .filter(|(t, u)| u == k && *t <= at)
            .map(|(t, _)| *t)
            .max()
            .unwrap_or(0)
    };
    let busy = |k: &String| {
        obs.cells.iter().any(|c| {
            kernel_of(c) == Some(k.as_str())
                && c.started_ms <= at
                && (c.written_off_unknown || c.resolved_ms.or(c.ended_ms).is_none_or(|e| e > at))
        })
    };
    let evicted = (last_use(kernel), kernel);
    if let Some(older) = open
        .iter()
        .filter(|k| **k != kernel && !busy(k))
        .find(|k| (last_use(k), **k) < evicted)
    {
        v.push(Violation::EvictedNotLeastRecent {
            kernel: kernel.clone(),
            detail: format!(
                "at {at} ms; {older} was idle, last used at {} ms, {kernel} at {} ms",
                last_use(older),
                evicted.0
            ),
        });
    }
}

/// Its frontend cannot be told of a loss before `end`: new to the kernel
/// when the script started the cell, or it met the kernel only after the
/// last death before `end` (it never saw the daemon whose state died;
/// drawn_clients seed 300881: the sandbox replaced, the second frontend
/// started a fresh kernel there, and its next cell read names the first
/// had bound before). The frontend that knew the daemon says so at its
/// own next call.
fn never_saw_the_lost_state(obs: &Observations, cell: &CellObs, end: u64) -> bool {
    let last_death = obs
        .kernel_deaths
        .iter()
        .copied()
        .filter(|&d| d <= end)
        .max();
    cell.newcomer || matches!((cell.met_kernel_ms, last_death), (Some(met), Some(d)) if met >= d)
}

/// The Python kernel's truths: its namespace is lost only when its
/// interpreter or daemon really died; a loss is reported (the agent's note
/// in a cell's stderr, or "state lost") before a cell finds it; the note
/// never comes without a real death of the interpreter.
fn check_namespace(obs: &Observations, v: &mut Vec<Violation>) {
    let first_py_death = obs.interpreter_deaths.iter().min().copied();
    let first_death = obs.kernel_deaths.iter().min().copied();
    // A note counts for the cells that ended after it was delivered (a
    // resumed client may deliver an earlier cell's note late).
    let notes: Vec<u64> = obs
        .cells
        .iter()
        .filter_map(|c| c.loss_reported_at)
        .collect();
    let mut noted = false;
    for (i, cell) in obs.cells.iter().enumerate() {
        let end = cell.delivered_ms();
        // A shell state an earlier cell of the kernel could not keep (a
        // full disk as its save was promoted), which that cell's own note
        // said: no death behind it, and reported (two_clients seed
        // 102860: the reading cell was another frontend's).
        let not_kept = obs.cells[..i]
            .iter()
            .any(|c| c.state_not_kept_noted && kernel_of(c) == kernel_of(cell));
        if cell.namespace_lost && !not_kept {
            // An eviction by the client's reaper is a death the client
            // caused and reported (`KernelEvicted`).
            let evicted = evicted_before(obs, cell, end);
            let died = evicted
                || first_py_death
                    .into_iter()
                    .chain(first_death)
                    .any(|d| d <= end);
            let reported = evicted
                || noted
                || notes.iter().any(|&r| r <= end)
                || obs.state_lost_reports.iter().any(|&r| r <= end)
                || never_saw_the_lost_state(obs, cell, end) && !obs.state_lost_reports.is_empty();
            if !died {
                v.push(Violation::NamespaceLost {
                    cell: cell.label.clone(),
                });
            } else if !reported {
                v.push(Violation::UnreportedLoss {
                    cell: cell.label.clone(),
                });
            }
        }
        if let Some(at) = cell.loss_reported_at {
            // Its interpreter died, or its kernel's daemon did (a stop's
            // TERM ends the interpreter with the kernel: live, where no
            // look at the process table sees that death, drawn_clients
            // seed 1139's cell resolved as its kernel's stop).
            let kernel_died = obs
                .known_deaths_by_kernel
                .iter()
                .any(|(d, k)| *d <= at && Some(k.as_str()) == kernel_of(cell));
            if first_py_death.is_none_or(|d| d > at) && !kernel_died {
                v.push(Violation::FalseStateLost { at_ms: at });
            }
        }
        // A cell the client wrote off as unknown may have lost the
        // interpreter under it, the loss told in its journal, which nobody
        // read then: its cancel's kill may come after the client stopped
        // reading, and a death from outside while it ran is its own to
        // tell. `unknown` promises nothing, the kernel's state included,
        // until a resume (a later client, or never) reads that journal.
        if let (true, Some(written_off)) = (cell.written_off_unknown, cell.resolved_ms) {
            let died_under_it = obs
                .interpreter_deaths
                .iter()
                .any(|&d| cell.started_ms <= d && d <= written_off);
            if cell.cancel_requested || died_under_it {
                noted = true;
            }
        }
    }
}

/// A shell kernel's truths: a cell reads back the state the cells before
/// it left — through `exit N`, a cancel, a crash and resume of the client
/// — unless the loss is accounted for: the kernel really died and the
/// client said state lost before the cell ended, the agent's note said a
/// cell's state was not kept, or an earlier cell may have stopped before
/// its save (it did not run exactly once, it resolved unknown or as an
/// error, or it was stopped before it printed all it prints).
fn check_shell_state(obs: &Observations, v: &mut Vec<Violation>) {
    let first_death = obs.kernel_deaths.iter().min().copied();
    let kernel_of = |c: &CellObs| {
        c.key
            .as_ref()
            .map(|k| k.rsplit_once('#').map_or(k.clone(), |(k, _)| k.to_owned()))
    };
    for (i, cell) in obs.cells.iter().enumerate() {
        if !cell.shell_state_lost {
            continue;
        }
        // A cell resolved by a resume got its last word when the resume
        // ended it, after its `run_cell` returned: a loss reported then
        // accounts for it too (reaper 101507: `a_read` written off in a
        // long hold, its daemon's idle exit took its output, and the
        // resume reported the state lost).
        let end = if cell.resolved_by_resume {
            u64::MAX
        } else {
            cell.ended_ms.unwrap_or(u64::MAX)
        };
        let kernel = kernel_of(cell);
        // A cell with no key never got a kernel: it may be this one's.
        let earlier: Vec<&CellObs> = obs.cells[..i]
            .iter()
            .filter(|c| kernel.is_none() || kernel_of(c).is_none() || kernel_of(c) == kernel)
            .collect();
        let death_reported = first_death.is_some_and(|d| {
            let by = if never_saw_the_lost_state(obs, cell, end) {
                u64::MAX
            } else {
                end
            };
            d <= end && obs.state_lost_reports.iter().any(|&r| r >= d && r <= by)
        });
        let noted = cell.state_not_kept_noted || earlier.iter().any(|c| c.state_not_kept_noted);
        let unfinished = earlier.iter().any(|c| {
            let stopped = matches!(
                c.outcome,
                Some(CellOutcome::Cancelled | CellOutcome::TimedOut)
            );
            c.truth.executions != 1
                || !matches!(
                    c.outcome,
                    Some(
                        CellOutcome::Ok
                            | CellOutcome::Exit { .. }
                            | CellOutcome::Cancelled
                            | CellOutcome::TimedOut
                    )
                )
                || (stopped && !c.complete_output)
        });
        // The client's reaper evicted the kernel and said so.
        let evicted = evicted_before(obs, cell, end);
        if !(death_reported || noted || unfinished || evicted) {
            v.push(Violation::ShellStateLost {
                cell: cell.label.clone(),
            });
        }
    }
}

fn check_cell(cell: &CellObs, v: &mut Vec<Violation>) {
    let name = cell.label.clone();
    // The eleventh mutants sample's `JournalWriter::output` counting
    // `len + keep` dropped: every cell said cut.
    let wrote = cell.truth.stdout.len() + cell.truth.stderr.as_ref().map_or(0, Vec::len);
    if cell.clipped > 0 && wrote as u64 <= tether_core::agent::journal::DEFAULT_CAP {
        v.push(Violation::FalseClip {
            cell: name.clone(),
            detail: format!(
                "{} bytes said dropped; its processes wrote {wrote}, the cap is {}",
                cell.clipped,
                tether_core::agent::journal::DEFAULT_CAP
            ),
        });
    }
    if cell.nul_byte {
        let resolved = cell
            .outcome
            .as_ref()
            .filter(|o| matches!(o, CellOutcome::Ok | CellOutcome::Exit { .. }));
        if cell.truth.executions > 0 || resolved.is_some() {
            v.push(Violation::RefusedCodeRan {
                cell: name.clone(),
                detail: format!(
                    "it started {} times and resolved {}",
                    cell.truth.executions,
                    cell.outcome
                        .as_ref()
                        .map_or("never".into(), ToString::to_string)
                ),
            });
        }
    }
    if cell.truth.executions > 1 {
        v.push(Violation::DoubleExecution {
            cell: name.clone(),
            executions: cell.truth.executions,
        });
    }
    if cell.output_ns.windows(2).any(|w| w[0] >= w[1]) {
        v.push(Violation::DuplicatedOutput {
            cell: name.clone(),
            detail: format!("journal numbers not increasing: {:?}", cell.output_ns),
        });
    }
    if !cell.truth.stdout.starts_with(&cell.client_stdout) {
        v.push(Violation::DuplicatedOutput {
            cell: name.clone(),
            detail: format!(
                "delivered {:?}, which the cell never wrote (it wrote {:?})",
                show(&cell.client_stdout),
                show(&cell.truth.stdout)
            ),
        });
    } else if cell.outcome.as_ref().is_some_and(completed)
        && cell.truth.ran_to_end
        && cell.client_stdout != cell.truth.stdout
    {
        v.push(Violation::LostOutput {
            cell: name.clone(),
            wrote: show(&cell.truth.stdout),
            delivered: show(&cell.client_stdout),
        });
    }
    if let Some(wrote) = &cell.truth.stderr {
        check_stderr(cell, wrote, v);
    }
    if cell.outcome.as_ref().is_some_and(completed)
        && !cell.cancel_requested
        && !cell.truth.alive_at_end.is_empty()
        && !cell.leftovers_reported
    {
        v.push(Violation::UnreportedLeftovers {
            cell: name.clone(),
            pids: cell.truth.alive_at_end.clone(),
        });
    }
    if let Some(at_ms) = cell.truth.spawned_after_resolution {
        let written_off = matches!(
            cell.outcome,
            Some(CellOutcome::Error { .. } | CellOutcome::Cancelled | CellOutcome::TimedOut)
        );
        if written_off {
            v.push(Violation::RanAfterResolution {
                cell: name.clone(),
                at_ms,
            });
        }
    }
    if cell.resolutions > 1 {
        v.push(Violation::BadResolution {
            cell: name.clone(),
            detail: format!("resolved {} times", cell.resolutions),
        });
    }
    // A cancel the client asked for, or any other end the agent made.
    let stopped = cell.outcome.as_ref().is_some_and(|o| {
        crate::observe::ended_by_the_agent(o)
            && (*o != CellOutcome::Cancelled || cell.cancel_requested)
    });
    if let Some(at_ms) = cell.truth.died_after_resolution.filter(|_| stopped) {
        v.push(Violation::CancelResolvedEarly {
            cell: name.clone(),
            at_ms,
        });
    }
    if stopped && !cell.truth.alive_at_end.is_empty() {
        v.push(Violation::CancelSurvivor {
            cell: name.clone(),
            pids: cell.truth.alive_at_end.clone(),
        });
    }
    let lost_in_flight = cell.outcome.as_ref().is_some_and(|o| {
        matches!(o, CellOutcome::Error { message }
            if message.starts_with(tether_core::client::LOST_IN_FLIGHT))
    });
    if lost_in_flight && cell.truth.unfinished && !cell.truth.alive_at_end.is_empty() {
        v.push(Violation::LostCellRanOn {
            cell: name,
            pids: cell.truth.alive_at_end.clone(),
        });
    }
}

/// The agent's own notes on a cell's stderr (`tether: …` lines: a lost
/// shell state, a dead interpreter) are the agent's, not the cell's; the
/// rest must be what the cell's processes wrote, nothing invented or
/// repeated, and all of it once the cell ran to its end.
fn check_stderr(cell: &CellObs, wrote: &[u8], v: &mut Vec<Violation>) {
    let own = |bytes: &[u8]| -> Vec<u8> {
        bytes
            .split_inclusive(|&b| b == b'\n')
            .filter(|line| !line.starts_with(b"tether: "))
            .flatten()
            .copied()
            .collect()
    };
    let (wrote, delivered) = (own(wrote), own(&cell.client_stderr));
    if !wrote.starts_with(&delivered) {
        v.push(Violation::DuplicatedOutput {
            cell: cell.label.clone(),
            detail: format!(
                "stderr delivered {:?}, which the cell never wrote (it wrote {:?})",
                show(&delivered),
                show(&wrote)
            ),
        });
    } else if cell.outcome.as_ref().is_some_and(completed)
        && cell.truth.ran_to_end
        && delivered != wrote
    {
        v.push(Violation::LostOutput {
            cell: cell.label.clone(),
            wrote: format!("stderr {}", show(&wrote)),
            delivered: format!("stderr {}", show(&delivered)),
        });
    }
}

/// How much later than its timeout a fault-free cell may resolve: the
/// longest grace a world draws (1 s), the exec calls of the cancel and
/// the wait that reads the result, preemptions.
const TIMEOUT_SLACK_MS: u64 = 2_500;

/// Checks a scenario's own expectations. They hold only when the run's
/// faults cannot change the outcome class: no faults beyond the fixed
/// ones, or only faults that merely delay.
pub fn expectations(
    scenario: &Scenario,
    schedule: &FaultSchedule,
    obs: &Observations,
) -> Vec<Violation> {
    if schedule != &scenario.fixed {
        return Vec::new();
    }
    let mut v = Vec::new();
    let cells: Vec<(&CellSpec, &CellObs)> = scenario.cells().zip(&obs.cells).collect();
    for (i, &(spec, cell)) in cells.iter().enumerate() {
        let Some(expect) = spec.expect else { continue };
        if names_evicted(obs, &cells[..i], spec, cell) {
            continue;
        }
        // A kernel death the client reported by the cell's end changes
        // what the cell can read, fault-free too where the world's daemon
        // idle timeout is short (python_bystander seed 102671: the daemon
        // exited idle while the next submit was on its way); the loss
        // rules judge such a cell.
        let end = cell.delivered_ms();
        let lost_by_end = obs.known_kernel_deaths.iter().any(|&d| d <= end)
            && obs.state_lost_reports.iter().any(|&r| r <= end);
        // The other frontend's eviction shut the kernel down under the
        // cell (its cap; drawn_clients seed 501729, fault-free): the loss
        // was told, and no death is the agent's.
        let shut_by_other = obs
            .lost_to_other_frontend
            .iter()
            .any(|&r| cell.started_ms <= r && r <= end);
        if lost_by_end || shut_by_other {
            continue;
        }
        // A timeout counts from the call that queued the cell (its wait
        // behind the cells before it included), and its cancel takes at
        // most the grace and the journal's way back.
        if let (Some(timeout), Some(at)) = (spec.timeout_ms, cell.resolved_ms) {
            let took = at.saturating_sub(cell.started_ms);
            if took > timeout + TIMEOUT_SLACK_MS {
                v.push(Violation::Expectation {
                    detail: format!(
                        "{} resolved {took} ms after it was queued; its timeout is {timeout} ms (slack {TIMEOUT_SLACK_MS} ms)",
                        spec.label
                    ),
                });
            }
        }
        match &cell.outcome {
            Some(o) if expect.admits(o) => {}
            other => v.push(Violation::Expectation {
                detail: format!(
                    "{} should resolve {expect:?}, resolved {}",
                    spec.label,
                    other
                        .as_ref()
                        .map_or("never".to_string(), CellOutcome::to_string)
                ),
            }),
        }
    }
    v
}

/// The client's reaper evicted the cell's kernel (a shutdown it
/// announces: the kernel cap, the idle timeout) after an earlier cell of
/// it bound a name this cell reads, and before this cell's end: the name
/// went with the kernel, as the eviction said.
fn names_evicted(
    obs: &Observations,
    earlier: &[(&CellSpec, &CellObs)],
    spec: &CellSpec,
    cell: &CellObs,
) -> bool {
    let Some(kernel) = kernel_of(cell) else {
        return false;
    };
    let read: Vec<&String> = spec.reads().collect();
    let bound_at = earlier
        .iter()
        .filter(|(s, c)| {
            kernel_of(c) == Some(kernel) && s.binds().any(|(name, _)| read.contains(&name))
        })
        .map(|(_, c)| c.started_ms)
        .min();
    let end = cell.delivered_ms();
    bound_at.is_some_and(|bound| {
        obs.evictions
            .iter()
            .any(|(at, k)| k == kernel && bound < *at && *at <= end)
    })
}

/// The tool-call rules, on ground truth: each call answered at most once
/// in the sandbox (answer files written), and only while its cell runs;
/// a call the sandbox refused never reaches the handler; what a caller
/// got is what a run of the handler returned for its call; the handler
/// runs at most once per call *in one client process*. A crash may run
/// it again: a handler's answer that was not yet in the kernel's record
/// when the client died is gone with it, and the resumed client, seeing
/// the call unanswered, can only ask again (the first answer to reach the
/// sandbox wins, the rule above).
fn check_tools(tools: &ToolObs, v: &mut Vec<Violation>) {
    if tools.awaiting_at_end > 0 {
        v.push(Violation::ToolCallsLeftAwaiting {
            count: tools.awaiting_at_end,
        });
    }
    let mut written: BTreeMap<&str, u32> = BTreeMap::new();
    for a in &tools.answers {
        *written.entry(&a.id).or_default() += 1;
        if a.journaled && a.after_result {
            v.push(Violation::ToolAnsweredOutsideCell {
                detail: format!("call {}", a.id),
            });
        }
    }
    for (id, n) in &written {
        if *n > 1 {
            v.push(Violation::ToolAnsweredTwice {
                detail: format!("call {id}, {n} answer files"),
            });
        }
    }
    let refused: std::collections::BTreeSet<&str> = tools
        .answers
        .iter()
        .filter(|a| !a.journaled)
        .map(|a| a.id.as_str())
        .collect();
    let mut runs: BTreeMap<(&str, u64), u32> = BTreeMap::new();
    for r in &tools.runs {
        *runs.entry((&r.id, r.incarnation)).or_default() += 1;
        if refused.contains(r.id.as_str()) {
            v.push(Violation::RefusedToolCallRan {
                detail: format!("call {} (client process #{})", r.id, r.incarnation),
            });
        }
        // The limits are the protocol's: a call past them is refused in
        // the sandbox (by its caller or its shim), never run by the host.
        if r.name_len == 0 || r.name_len > MAX_NAME || r.args_len > MAX_ARGS {
            v.push(Violation::RefusedToolCallRan {
                detail: format!(
                    "call {} (client process #{}) is past the limits: a {}-byte name (1 to {MAX_NAME}), {} bytes of arguments (at most {MAX_ARGS})",
                    r.id, r.incarnation, r.name_len, r.args_len
                ),
            });
        }
    }
    // At most `MAX_CALLS` calls of one cell reach the host.
    let mut per_cell: BTreeMap<&str, usize> = BTreeMap::new();
    for c in tools
        .calls
        .iter()
        .filter(|c| tools.runs.iter().any(|r| r.id == c.id))
    {
        *per_cell.entry(c.cell.as_str()).or_default() += 1;
    }
    for (cell, n) in per_cell.into_iter().filter(|&(_, n)| n > MAX_CALLS) {
        v.push(Violation::RefusedToolCallRan {
            detail: format!("{n} calls of cell {cell} ran, past the limit of {MAX_CALLS} a cell"),
        });
    }
    for ((id, incarnation), n) in runs {
        if n > 1 {
            v.push(Violation::ToolHandlerRepeated {
                detail: format!("call {id}, client process #{incarnation}, {n} runs"),
            });
        }
    }
    for c in &tools.calls {
        let Some(got) = &c.answered else { continue };
        let returned: Vec<&str> = tools
            .runs
            .iter()
            .filter(|r| r.id == c.id)
            .map(|r| r.result.as_str())
            .collect();
        if !returned.iter().any(|r| format!("{r}\n") == *got) {
            v.push(Violation::ToolResultMismatch {
                detail: format!(
                    "call {} of {} got {:?}, the handler returned {returned:?}",
                    c.id, c.cell, got
                ),
            });
        }
    }
}

/// How a caller says its deadline ran out (`tether_core`'s `Caller::poll`).
const DEADLINE_MESSAGE: &str = "no answer within";

/// An outage at least this long (ms) may run a tool call's deadline out.
const LONG_OUTAGE_MS: u64 = 10_000;

/// The other half of tool calls: they work. A call a cell's own process
/// made while the cell ran (not a leftover of an ended cell) carries the
/// cell's credential, so the sandbox never refuses it; and one whose cell
/// ran to its end once and resolved `ok` was answered, unless the world
/// excuses it: a full disk (no calls directory, no request written), a
/// clock jump, or a long outage that ran the caller's deadline out. Cancels, killed shims and
/// lost sandboxes end the cell otherwise than `ok`, so they need no excuse.
/// And no caller waits past its own deadline (`tool_call_overran`).
fn check_tool_calls_work(obs: &Observations, v: &mut Vec<Violation>) {
    let tools = &obs.tools;
    let excused = obs.disk_filled || obs.sandbox_clock_jumps_ms > 0;
    // A call ends at its deadline (the workloads' 30 s) when the host's
    // answer cannot reach it in time: a long outage, the client's
    // retries after it, and the cell may still end `ok` (a resume).
    let long_outage = obs.outages.as_ref().is_some_and(|o| {
        o.spans
            .iter()
            .any(|&(from, to)| to.saturating_sub(from) >= LONG_OUTAGE_MS)
    });
    // A call past the limits fails by design (and the handler must not
    // run it: `check_tools`).
    for c in &tools.calls {
        if let Some(at) = c.overran_ms {
            v.push(Violation::ToolCallOverran {
                detail: format!(
                    "call {:?} of {} (started at {} ms) still waited at {at} ms",
                    c.id,
                    c.cell,
                    c.started_ms.unwrap_or_default()
                ),
            });
        }
    }
    // The host never answers a stalled call: it fails at its deadline.
    for c in tools
        .calls
        .iter()
        .filter(|c| !c.leftover && !c.past_limits && !c.stalled)
    {
        let Some(failed) = &c.failed else { continue };
        let deadline = failed.starts_with(DEADLINE_MESSAGE);
        let refused =
            !c.id.is_empty() && tools.answers.iter().any(|a| a.id == c.id && !a.journaled);
        let cell = c
            .key
            .as_ref()
            .and_then(|k| obs.cells.iter().find(|o| o.key.as_ref() == Some(k)));
        let ran_ok = cell.is_some_and(|o| {
            o.outcome == Some(CellOutcome::Ok) && o.truth.executions == 1 && o.truth.ran_to_end
        });
        if refused || (ran_ok && !excused && !(deadline && long_outage)) {
            let label = cell.map_or(c.cell.as_str(), |o| o.label.as_str());
            v.push(Violation::ToolCallFailed {
                detail: format!(
                    "call {:?} of {label} {}: {failed}",
                    c.id,
                    if refused {
                        "was refused by the sandbox"
                    } else {
                        "was never answered, its cell resolved ok"
                    }
                ),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn good() -> Observations {
        Observations {
            cells: vec![CellObs {
                label: "c1".into(),
                key: Some("k#1".into()),
                output_ns: vec![3, 4],
                client_stdout: b"hello\n".to_vec(),
                outcome: Some(CellOutcome::Ok),
                resolutions: 1,
                truth: CellTruth {
                    executions: 1,
                    stdout: b"hello\n".to_vec(),
                    ran_to_end: true,
                    ..CellTruth::default()
                },
                ..CellObs::default()
            }],
            calls: vec![CallObs {
                name: "run_cell c1".into(),
                started_ms: 10,
                ended_ms: Some(20),
                budget_ms: 100,
            }],
            liveness: Some(CellOutcome::Ok),
            finished: true,
            ..Observations::default()
        }
    }

    /// A cell failed as lost with its kernel must have had its processes
    /// ended by the op that proved the daemon gone, unless it had ended
    /// on the sandbox first (then what runs on is its leftovers).
    #[test]
    fn a_cell_failed_as_lost_whose_processes_ran_on_is_caught() {
        let mut o = good();
        o.cells[0].outcome = Some(CellOutcome::Error {
            message: format!("{}: no process 4", tether_core::client::LOST_IN_FLIGHT),
        });
        o.cells[0].truth.alive_at_end = vec![15];
        let ran_on = |o: &Observations| {
            check(o)
                .iter()
                .filter(|v| v.kind() == "lost_cell_ran_on")
                .count()
        };
        assert_eq!(
            ran_on(&o),
            0,
            "a cell that had finished keeps its leftovers"
        );
        o.cells[0].truth.unfinished = true;
        assert_eq!(ran_on(&o), 1);
        o.cells[0].truth.alive_at_end.clear();
        assert_eq!(ran_on(&o), 0);
    }

    #[test]
    fn a_cell_resolved_by_its_kernels_stop_while_a_process_of_it_ran_is_early() {
        let mut o = good();
        o.cells[0].outcome = Some(CellOutcome::Error {
            message: STOPPED.into(),
        });
        let early = |o: &Observations| {
            check(o)
                .iter()
                .filter(|v| v.kind() == "cancel_resolved_early")
                .count()
        };
        assert_eq!(early(&o), 0);
        o.cells[0].truth.died_after_resolution = Some(900);
        assert_eq!(early(&o), 1);
        o.cells[0].outcome = Some(CellOutcome::Error {
            message: "some other error".into(),
        });
        assert_eq!(early(&o), 0);
    }

    #[test]
    fn processes_a_complete_cell_left_running_must_be_reported() {
        let mut o = good();
        o.cells[0].truth.alive_at_end = vec![8, 11];
        let v = check(&o);
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].kind(), "unreported_leftovers");
        o.cells[0].leftovers_reported = true;
        assert!(check(&o).is_empty());
    }

    #[test]
    fn a_kernel_idle_past_its_timeout_while_the_client_is_driven_is_reaped() {
        let mut o = good();
        o.cells[0].started_ms = 10;
        o.cells[0].resolved_ms = Some(20);
        o.kernel_uses = vec![(10, "k".into())];
        o.kernel_idle_ms = Some(500);
        o.shutdown_ms = Some(10_000);
        o.outages = Some(Outages::default());
        // A cell on another kernel runs from 1 s to 5 s: the client is
        // driven past the deadline (20 + 500 + 1000 ms).
        o.calls.push(CallObs {
            name: "run_cell other".into(),
            started_ms: 1_000,
            ended_ms: Some(5_000),
            budget_ms: 10_000,
        });
        assert_eq!(kinds(&check(&o)), ["kernel_not_reaped"]);
        o.evictions = vec![(600, "k".into())];
        assert_eq!(check(&o), vec![]);
        o.evictions.clear();
        // Not judged: a client nobody drove then, the kernel used again
        // first, a fault in the stretch, a host that does not say.
        let mut undriven = o.clone();
        undriven.calls.truncate(1);
        let mut used = o.clone();
        used.kernel_uses.push((1_200, "k".into()));
        let mut faulted = o.clone();
        faulted.outages = Some(Outages {
            blips: vec![900],
            ..Outages::default()
        });
        let mut unknown = o.clone();
        unknown.kernel_idle_ms = None;
        for excused in [undriven, used, faulted, unknown] {
            assert!(!kinds(&check(&excused)).contains(&"kernel_not_reaped"));
        }
    }

    #[test]
    fn a_silence_past_the_give_up_time_must_end_the_cells_in_flight() {
        let mut o = good();
        o.cells[0].started_ms = 100;
        o.cells[0].resolved_ms = Some(30_000);
        o.cells[0].ended_ms = Some(30_000);
        let outages = Outages {
            silences: vec![(1_000, 40_000)],
            give_up_ms: 15_000,
            budget_ms: 4_000,
            spans: vec![(1_000, 40_000)],
            attempts: 6,
            ..Outages::default()
        };
        o.outages = Some(outages.clone());
        // Still unresolved 21 s into a 39 s silence (the client waited
        // for its attempts to run out, or for the sandbox).
        assert_eq!(kinds(&check(&o)), ["late_give_up"]);
        // Given up within the give-up time, a second and a deadline.
        o.cells[0].resolved_ms = Some(20_500);
        o.cells[0].ended_ms = Some(20_500);
        o.cells[0].outcome = Some(CellOutcome::Unknown {
            reason: "gave up".into(),
        });
        assert_eq!(check(&o), vec![]);
        o.cells[0].resolved_ms = Some(30_000);
        o.cells[0].ended_ms = Some(30_000);
        // Not judged: a silence that heals first (the cell may go on), a
        // client down in it (its successor counts from its start), a cell
        // started in it, a host that does not say its give-up time.
        for excused in [
            Outages {
                silences: vec![(1_000, 20_000)],
                ..outages.clone()
            },
            Outages {
                client_down: vec![(5_000, 6_000)],
                ..outages.clone()
            },
            Outages {
                silences: vec![(50, 40_000)],
                ..outages.clone()
            },
            Outages {
                give_up_ms: 0,
                ..outages.clone()
            },
        ] {
            o.outages = Some(excused);
            assert!(
                !kinds(&check(&o)).contains(&"late_give_up"),
                "{:?}",
                o.outages
            );
        }
    }

    #[test]
    fn unknown_needs_an_outage_as_long_as_the_clients_retries() {
        let mut o = good();
        o.cells[0].outcome = Some(CellOutcome::Unknown {
            reason: "gave up".into(),
        });
        o.cells[0].ended_ms = Some(20_000);
        // Not judged where the host cannot say.
        assert!(check(&o).is_empty());
        let outages = Outages {
            // Ends 1 s before the give-up: the client retried past it.
            spans: vec![(1_000, 2_000), (18_000, 19_000)],
            blips: vec![],
            backoffs_ms: vec![100, 200, 400, 800, 1_000],
            attempts: 6,
            budget_ms: 2_500,
            ..Outages::default()
        };
        o.outages = Some(outages.clone());
        let v = check(&o);
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].kind(), "needless_unknown");
        // A partition from 17 s to the give-up excuses it.
        o.outages = Some(Outages {
            spans: vec![(1_000, 2_000), (17_000, 18_500), (18_400, 20_000)],
            ..outages.clone()
        });
        assert!(check(&o).is_empty());
        // So do as many dropped replies as the client has attempts.
        o.outages = Some(Outages {
            blips: vec![1, 2, 3, 4, 5, 6],
            ..outages.clone()
        });
        assert!(check(&o).is_empty());
        // Or a shorter partition, with a lost reply standing for the
        // attempts its span does not cover.
        o.outages = Some(Outages {
            spans: vec![(19_200, 20_000)],
            blips: vec![700, 800],
            ..outages.clone()
        });
        assert!(check(&o).is_empty());
        // A partition that healed before the give-up, with a call in
        // flight when it began (its blip) and a reply lost after it
        // healed: the last attempt failed by the lost reply, the four
        // before it in the partition, the first at its deadline
        // (fail_open seed 100502).
        o.cells[0].ended_ms = Some(5_614);
        o.outages = Some(Outages {
            spans: vec![(812, 4_785)],
            blips: vec![812, 2_279],
            ..outages.clone()
        });
        assert!(check(&o).is_empty());
        // The same partition with no lost reply: the client gave up
        // 800 ms after it healed, with an attempt that should have worked.
        o.outages = Some(Outages {
            spans: vec![(812, 4_785)],
            blips: vec![812],
            ..outages.clone()
        });
        assert_eq!(kinds(&check(&o)), ["needless_unknown"]);
        // A lost reply far before the partition covers one attempt, not
        // the gap after the partition.
        o.cells[0].ended_ms = Some(9_000);
        o.outages = Some(Outages {
            spans: vec![(812, 4_785)],
            blips: vec![812, 2_279],
            ..outages.clone()
        });
        assert_eq!(kinds(&check(&o)), ["needless_unknown"]);
        // Two partitions 480 ms apart, the backoff carrying the client
        // over the gap: attempts at 1,257, 1,357, 1,557, 1,957 and 2,757
        // ms failed in the first, the last at 3,757 in the second (drawn
        // seed 400751). Every attempt failed: an honest give-up.
        o.cells[0].ended_ms = Some(3_757);
        let two = Outages {
            spans: vec![(1_202, 3_075), (3_555, 3_823)],
            // Each partition's start: a call in flight then would fail.
            blips: vec![1_202, 3_555],
            ..outages
        };
        o.outages = Some(two.clone());
        assert!(check(&o).is_empty());
        // The same give-up with the second partition 300 ms earlier: the
        // last attempt would have met a sandbox that answers.
        o.outages = Some(Outages {
            spans: vec![(1_202, 3_075), (3_255, 3_523)],
            blips: vec![1_202, 3_255],
            ..two
        });
        assert_eq!(kinds(&check(&o)), ["needless_unknown"]);
    }

    #[test]
    fn a_kernel_the_agent_killed_itself_is_a_violation() {
        let mut o = good();
        assert!(check(&o).is_empty());
        o.self_inflicted.push(
            "daemon 4 of k exited by itself at 900 ms while its cell 2 was unfinished".into(),
        );
        let v = check(&o);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].kind(), "self_inflicted_loss");
    }

    #[test]
    fn a_shell_state_lost_needs_a_death_a_note_or_an_unfinished_cell() {
        let mut o = good();
        let mut reader = o.cells[0].clone();
        reader.label = "c2".into();
        reader.key = Some("k#2".into());
        reader.shell_state_lost = true;
        reader.ended_ms = Some(900);
        o.cells.push(reader);
        let v = check(&o);
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].kind(), "shell_state_lost");
        // The kernel died and the client said so before the cell ended.
        let mut died = o.clone();
        died.kernel_deaths.push(300);
        died.known_kernel_deaths.push(300);
        died.state_lost_reports.push(400);
        assert!(check(&died).is_empty(), "{:?}", check(&died));
        // The agent's note said a cell's state was not kept.
        let mut noted = o.clone();
        noted.cells[1].state_not_kept_noted = true;
        assert!(check(&noted).is_empty());
        // The cell before was cancelled before it printed all it prints.
        let mut cut = o.clone();
        cut.cells[0].outcome = Some(CellOutcome::Cancelled);
        cut.cells[0].cancel_requested = true;
        assert!(check(&cut).is_empty());
        // ... but one that got that far must have kept its state.
        cut.cells[0].complete_output = true;
        assert_eq!(check(&cut)[0].kind(), "shell_state_lost");
    }

    #[test]
    fn a_kernel_evicted_with_a_cell_in_flight_is_a_violation() {
        let mut o = good();
        o.cells[0].started_ms = 10;
        o.cells[0].resolved_ms = Some(20);
        o.cells[0].ended_ms = Some(20);
        // After the cell resolved: the reaper may take it.
        o.evictions = vec![(25, "k".into())];
        assert!(check(&o).is_empty());
        // Another kernel, while it ran: nothing of this cell's.
        o.evictions = vec![(15, "other".into())];
        assert!(check(&o).is_empty());
        // Its own kernel, while it ran.
        o.evictions = vec![(15, "k".into())];
        let v = check(&o);
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].kind(), "reaped_busy_kernel");
        // Resolved as cancelled by the eviction itself, nobody asked.
        o.evictions = vec![(20, "k".into())];
        o.cells[0].outcome = Some(CellOutcome::Cancelled);
        o.cells[0].truth.ran_to_end = false;
        let v = check(&o);
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].kind(), "reaped_busy_kernel");
    }

    #[test]
    fn a_kernel_evicted_while_its_record_keeps_an_unknown_cell_is_a_violation() {
        let mut o = good();
        o.cells[0].started_ms = 10;
        o.cells[0].resolved_ms = Some(20);
        o.cells[0].ended_ms = Some(20);
        o.cells[0].outcome = Some(CellOutcome::Unknown {
            reason: "the sandbox did not answer".into(),
        });
        o.cells[0].written_off_unknown = true;
        o.cells[0].truth = CellTruth::default();
        o.cells[0].client_stdout.clear();
        o.evictions = vec![(25, "k".into())];
        let kinds: Vec<&str> = check(&o).iter().map(Violation::kind).collect();
        assert!(kinds.contains(&"reaped_busy_kernel"), "{kinds:?}");
        // Once a resume resolved it, the kernel may go.
        o.cells[0].outcome = Some(CellOutcome::Cancelled);
        o.cells[0].resolutions = 1;
        o.cells[0].last_resolved_ms = Some(22);
        let kinds: Vec<&str> = check(&o).iter().map(Violation::kind).collect();
        assert!(!kinds.contains(&"reaped_busy_kernel"), "{kinds:?}");
    }

    #[test]
    fn a_lost_namespace_is_excused_by_a_reported_eviction_of_its_own_kernel() {
        let mut o = good();
        o.cells[0].namespace_lost = true;
        o.cells[0].started_ms = 10;
        o.cells[0].ended_ms = Some(20);
        let v = check(&o);
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].kind(), "namespace_lost");
        // Another kernel's eviction is no excuse.
        o.evictions = vec![(5, "other".into())];
        assert_eq!(check(&o)[0].kind(), "namespace_lost");
        o.evictions = vec![(5, "k".into())];
        assert_eq!(check(&o), vec![]);
    }

    /// A copy of the first cell, `c2` (`k#2`), run from 40 to 50 ms, that
    /// finds the names of the kernel's earlier cells gone.
    fn push_later_cell_finding_names_gone(o: &mut Observations) -> &mut CellObs {
        let mut later = o.cells[0].clone();
        later.label = "c2".into();
        later.key = Some("k#2".into());
        later.namespace_lost = true;
        later.started_ms = 40;
        later.ended_ms = Some(50);
        o.cells.push(later);
        o.cells.last_mut().expect("just pushed")
    }

    /// two_clients seed 102860: an earlier cell of the kernel said its
    /// shell state was not kept (a full disk as it was saved); a later
    /// cell, another frontend's, finds that cell's names gone.
    #[test]
    fn names_an_earlier_cell_said_it_could_not_keep_are_no_unexplained_loss() {
        let mut o = good();
        o.cells[0].started_ms = 10;
        o.cells[0].ended_ms = Some(20);
        push_later_cell_finding_names_gone(&mut o);
        assert_eq!(check(&o)[0].kind(), "namespace_lost");
        o.cells[0].state_not_kept_noted = true;
        assert_eq!(check(&o), vec![]);
        // Another kernel's note is no excuse.
        o.cells[0].key = Some("other#1".into());
        assert!(check(&o).iter().any(|v| v.kind() == "namespace_lost"));
    }

    /// python_stuck seeds 101272, 101360, 501857 and python_state 103974:
    /// the interpreter's loss is told in the journal of a cell the client
    /// wrote off as unknown (read only by a later resume, or never). It
    /// excuses a later cell's finding only if the death may be that
    /// cell's to tell: its cancel (which may kill after the write-off) or
    /// a death while the client still waited for it.
    #[test]
    fn a_loss_under_a_cell_written_off_as_unknown_is_that_cells_to_tell() {
        let mut o = good();
        o.cells[0].python = true;
        o.cells[0].started_ms = 10;
        o.cells[0].resolved_ms = Some(20);
        o.cells[0].ended_ms = Some(20);
        push_later_cell_finding_names_gone(&mut o).resolved_ms = Some(50);
        let unreported = |o: &Observations| {
            check(o)
                .iter()
                .filter(|v| v.kind() == "unreported_loss")
                .count()
        };
        // A death after the write-off, no cancel: the next cell's to tell.
        o.interpreter_deaths = vec![30];
        o.cells[0].written_off_unknown = true;
        assert_eq!(unreported(&o), 1);
        // Its cancel may kill the interpreter after the write-off.
        o.cells[0].cancel_requested = true;
        assert_eq!(unreported(&o), 0);
        // A death while the client waited for it.
        o.cells[0].cancel_requested = false;
        o.interpreter_deaths = vec![15];
        assert_eq!(unreported(&o), 0);
        // Resolved the first time: its note was read, and was no note.
        o.cells[0].written_off_unknown = false;
        assert_eq!(unreported(&o), 1);
    }

    #[test]
    fn a_death_matters_to_the_cells_of_its_own_kernel() {
        let mut o = good();
        o.kernel_deaths = vec![5];
        o.known_kernel_deaths = vec![5];
        o.cells[0].started_ms = 10;
        o.known_deaths_by_kernel = vec![(5, "other".into())];
        assert!(check(&o).is_empty());
        o.known_deaths_by_kernel = vec![(5, "k".into())];
        let v = check(&o);
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].kind(), "missed_state_lost");
        // Its eviction, reported, stands for the report of the loss.
        o.evictions = vec![(7, "k".into())];
        assert!(check(&o).is_empty());
    }

    #[test]
    fn a_cell_resumed_to_ok_needs_the_loss_told_before_its_last_resolution() {
        // sandbox_bounce seed 50: the cell was written off as unknown at
        // 7,565 ms (its call returned then); the resume's probe told the
        // loss at 8,490 and ran the cell on the fresh daemon, ok at 8,535.
        let mut o = good();
        o.kernel_deaths = vec![5];
        o.known_kernel_deaths = vec![5];
        o.cells[0].started_ms = 10;
        o.cells[0].ended_ms = Some(7_565);
        o.cells[0].last_resolved_ms = Some(8_535);
        o.state_lost_reports = vec![8_490];
        assert!(check(&o).is_empty(), "{:?}", check(&o));
        // Told only after the ok: missed.
        o.state_lost_reports = vec![8_600];
        assert_eq!(kinds(&check(&o)), ["missed_state_lost"]);
    }

    #[test]
    fn a_resumed_cell_that_finds_the_names_gone_needs_the_loss_told_before_its_last_resolution() {
        // idle_exit seed 50: i_read written off as unknown at 7,565 ms;
        // the resume told the loss at 8,490 and ran it on a fresh daemon,
        // where `x` was unbound (exit 127 at 8,535).
        let mut o = good();
        o.kernel_deaths = vec![360];
        o.known_kernel_deaths = vec![360];
        o.cells[0].started_ms = 465;
        o.cells[0].namespace_lost = true;
        o.cells[0].outcome = Some(CellOutcome::Exit { code: 127 });
        o.cells[0].ended_ms = Some(7_565);
        o.cells[0].last_resolved_ms = Some(8_535);
        o.state_lost_reports = vec![8_490];
        assert!(
            !kinds(&check(&o)).contains(&"unreported_loss"),
            "{:?}",
            check(&o)
        );
        o.state_lost_reports = vec![8_600];
        assert!(kinds(&check(&o)).contains(&"unreported_loss"));
    }

    #[test]
    fn a_frontend_that_met_the_kernel_only_after_its_death_is_told_by_the_other() {
        // drawn_clients seed 300881: the sandbox was replaced at 2,055 ms;
        // the second frontend first saw a (fresh) daemon at 2,200, and its
        // cell at 2,510 found the first frontend's names gone; the first
        // told the loss at 3,120.
        let mut o = good();
        o.kernel_deaths = vec![2_055];
        o.cells[0].started_ms = 2_220;
        o.cells[0].ended_ms = Some(2_510);
        o.cells[0].namespace_lost = true;
        o.cells[0].outcome = Some(CellOutcome::Exit { code: 2 });
        o.state_lost_reports = vec![3_120];
        o.cells[0].met_kernel_ms = Some(2_200);
        assert!(
            !kinds(&check(&o)).contains(&"unreported_loss"),
            "{:?}",
            check(&o)
        );
        // One that knew the daemon before it died must be told by its
        // cell's end.
        o.cells[0].met_kernel_ms = Some(1_000);
        assert!(kinds(&check(&o)).contains(&"unreported_loss"));
        // And one that met it after a death, but before a later one.
        o.cells[0].met_kernel_ms = Some(2_200);
        o.kernel_deaths = vec![2_055, 2_300];
        assert!(kinds(&check(&o)).contains(&"unreported_loss"));
    }

    #[test]
    fn a_stop_error_needs_a_sigterm_to_the_cells_daemon() {
        let mut o = good();
        o.cells[0].outcome = Some(CellOutcome::Error {
            message: STOPPED.into(),
        });
        // A host that does not know which daemons got one: not judged.
        assert!(!kinds(&check(&o)).contains(&"bad_resolution"));
        o.termed_kernels = Some(vec!["k".into()]);
        assert!(
            !kinds(&check(&o)).contains(&"bad_resolution"),
            "{:?}",
            check(&o)
        );
        // Another kernel's daemon got it, or none did: the idle exit taken
        // for a stop.
        o.termed_kernels = Some(vec!["other".into()]);
        assert!(kinds(&check(&o)).contains(&"bad_resolution"));
        o.termed_kernels = Some(Vec::new());
        assert!(kinds(&check(&o)).contains(&"bad_resolution"));
    }

    #[test]
    fn a_cap_eviction_needs_more_kernels_open_than_the_cap() {
        let mut o = good();
        o.max_kernels = Some(2);
        o.kernel_uses = vec![(0, "a".into()), (10, "b".into()), (20, "c".into())];
        // Three open at 20 ms: evicting the least recently used is right.
        o.evictions = vec![(20, "a".into())];
        o.cap_evictions = o.evictions.clone();
        assert!(check(&o).is_empty(), "{:?}", check(&o));
        // At 15 ms only two were open.
        o.evictions = vec![(15, "a".into())];
        o.cap_evictions = o.evictions.clone();
        assert_eq!(check(&o)[0].kind(), "evicted_under_cap");
        // A kernel evicted before (and not used since) is not open.
        o.evictions = vec![(12, "a".into()), (20, "b".into())];
        o.cap_evictions = vec![(20, "b".into())];
        assert_eq!(check(&o)[0].kind(), "evicted_under_cap");
        // A host that does not know the cap is not judged.
        o.max_kernels = None;
        assert!(check(&o).is_empty());
    }

    #[test]
    fn a_cap_eviction_of_a_kernel_used_after_an_idle_one_fires() {
        let mut o = good();
        o.max_kernels = Some(2);
        o.kernel_uses = vec![(0, "a".into()), (10, "b".into()), (20, "c".into())];
        // b went though a was used before it (and is idle: `good`'s cell
        // is `k`'s).
        o.evictions = vec![(20, "b".into())];
        o.cap_evictions = o.evictions.clone();
        assert_eq!(kinds(&check(&o)), ["evicted_not_least_recent"]);
        // A busy one is not a candidate: a runs a cell from 5 ms on.
        o.cells[0].key = Some("a#1".into());
        o.cells[0].started_ms = 5;
        o.cells[0].resolved_ms = Some(30);
        o.cells[0].ended_ms = Some(30);
        assert!(check(&o).is_empty(), "{:?}", check(&o));
        // Nor judged after a crash (a resume makes its own uses).
        o.cells[0].resolved_ms = Some(15);
        o.cells[0].ended_ms = Some(15);
        assert_eq!(kinds(&check(&o)), ["evicted_not_least_recent"]);
        o.client_crashes = vec![12];
        assert!(!kinds(&check(&o)).contains(&"evicted_not_least_recent"));
    }

    #[test]
    fn a_kernel_past_the_cap_evicts_an_idle_one_before_its_cell_returns() {
        let cell = |label: &str, key: &str, started: u64, resolved: u64| CellObs {
            label: label.into(),
            key: Some(key.into()),
            outcome: Some(CellOutcome::Ok),
            resolutions: 1,
            started_ms: started,
            resolved_ms: Some(resolved),
            ended_ms: Some(resolved),
            ..CellObs::default()
        };
        let mut o = Observations {
            cells: vec![cell("a1", "a#1", 0, 5), cell("b1", "b#1", 10, 20)],
            calls: vec![
                CallObs {
                    name: "run_cell a1".into(),
                    started_ms: 0,
                    ended_ms: Some(5),
                    budget_ms: 100,
                },
                CallObs {
                    name: "run_cell b1".into(),
                    started_ms: 10,
                    ended_ms: Some(20),
                    budget_ms: 100,
                },
            ],
            kernel_uses: vec![(0, "a".into()), (10, "b".into())],
            max_kernels: Some(1),
            finished: true,
            ..Observations::default()
        };
        let kept = |o: &Observations| !check(o).iter().any(|v| v.kind() == "cap_not_kept");
        assert!(
            !kept(&o),
            "b took the client past the cap of 1; idle a stayed"
        );
        o.evictions = vec![(10, "a".into())];
        o.cap_evictions = o.evictions.clone();
        assert!(kept(&o), "{:?}", check(&o));
        o.evictions.clear();
        o.cap_evictions.clear();
        // Not judged: a cap of 2, a client that crashed, a kernel not idle.
        let mut wide = o.clone();
        wide.max_kernels = Some(2);
        assert!(kept(&wide));
        let mut crashed = o.clone();
        crashed.client_crashes = vec![15];
        assert!(kept(&crashed));
        let mut unknown = o.clone();
        unknown.cells[0].outcome = Some(CellOutcome::Unknown {
            reason: "gone".into(),
        });
        assert!(kept(&unknown));
        let mut resumed = o.clone();
        resumed.cells[0].written_off_unknown = true;
        assert!(kept(&resumed), "resolved by a resume later, unknown then");
    }

    #[test]
    fn ground_truth_of_the_sandbox_is_judged() {
        let mut o = good();
        o.journal_gaps = vec!["journal of k#1: entry numbers [1, 2, 4]".into()];
        assert_eq!(check(&o)[0].kind(), "journal_gap");
        let mut o = good();
        o.two_daemons = vec!["kernel k had daemons [4, 9] alive at once".into()];
        assert_eq!(check(&o)[0].kind(), "two_daemons");
        o.two_daemons.clear();
        o.false_unkillable = vec!["k#1: pid 12 died by KILL at 900 ms, reported at 950 ms".into()];
        assert_eq!(check(&o)[0].kind(), "false_unkillable");
        o.false_unkillable.clear();
        o.replacements_unreported = vec![
            "kernel k at 900 ms: its daemon (pid 5) died when the sandbox was replaced".into(),
        ];
        assert_eq!(check(&o)[0].kind(), "replacement_unreported");
        o.replacements_unreported.clear();
        o.replacements_unfounded =
            vec!["kernel k at 900 ms, on the evidence \"pid 5 was reused\"".into()];
        assert_eq!(check(&o)[0].kind(), "replacement_unfounded");
        o.replacements_unfounded.clear();
        o.false_notes = vec!["c2 says cell 1 of k lost its shim; it exited 0".into()];
        assert_eq!(check(&o)[0].kind(), "false_state_note");
        let mut o = good();
        o.leaked_records = vec!["k".into()];
        assert_eq!(check(&o)[0].kind(), "leak");
    }

    #[test]
    fn stderr_is_judged_against_what_the_cells_processes_wrote() {
        let mut o = good();
        o.cells[0].truth.stderr = Some(b"warn\n".to_vec());
        o.cells[0].client_stderr = b"tether: a note of the agent's\nwarn\n".to_vec();
        assert_eq!(check(&o), vec![]);
        o.cells[0].client_stderr = b"warn\nwarn\n".to_vec();
        assert_eq!(check(&o)[0].kind(), "duplicated_output");
        o.cells[0].client_stderr = b"wa".to_vec();
        assert_eq!(check(&o)[0].kind(), "lost_output");
        // Not run to its end: a prefix is all it owes.
        o.cells[0].truth.ran_to_end = false;
        assert_eq!(check(&o), vec![]);
    }

    fn kinds(v: &[Violation]) -> Vec<&'static str> {
        v.iter().map(Violation::kind).collect()
    }

    /// A sandbox with no flaw starts kernels and takes cells: a cell there
    /// that ran without a kernel is fail open gone wrong, one refused for
    /// good a needless refusal (a spawn Conflict taken for good: the ninth mutants sample's
    /// `exec.rs:323`, race file `a-spawn-that-meets-another-adopts-its-daemon.json`).
    #[test]
    fn a_sandbox_without_a_flaw_starts_every_kernel() {
        let o = good();
        assert_eq!(o.flawed, None);
        assert_eq!(check(&o), vec![]);
        let mut fell_back = o.clone();
        fell_back.cells[0].ran_without_kernel = Some("Conflict: another spawn".into());
        assert_eq!(kinds(&check(&fell_back)), ["fail_open"]);
        let mut refused = o.clone();
        refused.cells[0].outcome = Some(CellOutcome::Error {
            message: format!(
                "{}: Conflict: another spawn",
                tether_core::client::KERNEL_NOT_STARTED
            ),
        });
        refused.cells[0].client_stdout.clear();
        refused.cells[0].truth.executions = 0;
        refused.cells[0].truth.ran_to_end = false;
        assert_eq!(kinds(&check(&refused)), ["needless_refusal"]);
        let mut cell_refused = refused.clone();
        cell_refused.cells[0].outcome = Some(CellOutcome::Error {
            message: format!(
                "{}: Invalid: bad request",
                tether_core::client::CELL_REFUSED
            ),
        });
        assert_eq!(kinds(&check(&cell_refused)), ["needless_refusal"]);
        let mut unreadable = refused.clone();
        unreadable.cells[0].outcome = Some(CellOutcome::Unknown {
            reason: format!("{}: Io: torn", tether_core::client::JOURNAL_UNREADABLE),
        });
        assert_eq!(kinds(&check(&unreadable)), ["needless_refusal"]);
        // Behind a second frontend that took the cell's number: nothing
        // ran, and the refusal asks for the cell again.
        let mut behind = refused.clone();
        behind.cells[0].outcome = Some(CellOutcome::Error {
            message: format!(
                "{}: kernel sim already ran cells up to 3 under another client's record: nothing ran; {} (Conflict)",
                tether_core::client::CELL_REFUSED,
                tether_core::client::RUN_AGAIN
            ),
        });
        assert_eq!(kinds(&check(&behind)), ["needless_refusal"]);
        behind.second_frontend = true;
        assert_eq!(kinds(&check(&behind)), Vec::<&str>::new());
        // The user's own error is not a refusal.
        let mut own = refused.clone();
        own.cells[0].outcome = Some(CellOutcome::Error {
            message: "NameError: name 'x' is not defined".into(),
        });
        assert!(!kinds(&check(&own)).contains(&"needless_refusal"));
    }

    #[test]
    fn fail_open_is_judged_against_the_sandbox_flaw() {
        const ROOT: &str =
            "installing the agent failed: CannotInstall: cannot create directories under the root";
        // Ran once without a kernel, and said why.
        let mut o = good();
        o.flawed = Some(Flawed {
            flaw: Flaw::ReadOnlyRoot,
            fallback: true,
        });
        o.cells[0].ran_without_kernel = Some(ROOT.into());
        assert_eq!(check(&o), vec![]);
        // Resolved, but never said it ran without a kernel.
        let mut silent = o.clone();
        silent.cells[0].ran_without_kernel = None;
        assert_eq!(kinds(&check(&silent)), ["fail_open"]);
        // Said so, with a reason that is not the sandbox's.
        let mut vague = o.clone();
        vague.cells[0].ran_without_kernel = Some("it did not work".into());
        assert_eq!(kinds(&check(&vague)), ["fail_open"]);
        // A resumed cell does not fall back: refused with the reason, and
        // never run, it is honest.
        let mut resumed = silent.clone();
        resumed.cells[0].outcome = Some(CellOutcome::Error {
            message: format!("the kernel could not be started: {ROOT}"),
        });
        resumed.cells[0].client_stdout.clear();
        resumed.cells[0].truth.executions = 0;
        resumed.cells[0].truth.ran_to_end = false;
        assert_eq!(kinds(&check(&resumed)), ["fail_open"]);
        resumed.cells[0].resolved_by_resume = true;
        assert_eq!(check(&resumed), vec![]);
        // Ran twice across the fallback and a kernel (side effects).
        let mut twice = o.clone();
        twice.cells[0].truth.executions = 2;
        assert_eq!(kinds(&check(&twice)), ["double_execution", "fail_open"]);
        // A lost plain exec is unknown and may have run; one failure
        // excuses it (it is never sent again).
        let mut lost = o.clone();
        lost.cells[0].outcome = Some(CellOutcome::Unknown {
            reason: "lost".into(),
        });
        lost.cells[0].started_ms = 10;
        lost.cells[0].ended_ms = Some(20);
        lost.outages = Some(Outages {
            blips: vec![15],
            attempts: 6,
            ..Outages::default()
        });
        assert_eq!(check(&lost), vec![]);
        lost.outages = Some(Outages {
            attempts: 6,
            ..Outages::default()
        });
        assert_eq!(kinds(&check(&lost)), ["needless_unknown"]);

        // The fallback off: refused with the reason, never run; the
        // liveness cell is refused too.
        let mut off = good();
        off.flawed = Some(Flawed {
            flaw: Flaw::ReadOnlyRoot,
            fallback: false,
        });
        let refused = CellOutcome::Error {
            message: format!("the kernel could not be started: {ROOT}"),
        };
        off.cells[0].outcome = Some(refused.clone());
        off.cells[0].client_stdout.clear();
        off.cells[0].truth.executions = 0;
        off.cells[0].truth.ran_to_end = false;
        off.liveness = Some(refused);
        assert_eq!(check(&off), vec![]);
        let mut ran = off.clone();
        ran.cells[0].truth.executions = 1;
        ran.cells[0].ran_without_kernel = Some(ROOT.into());
        // It ran, and it fell back: both wrong.
        assert_eq!(kinds(&check(&ran)), ["fail_open", "fail_open"]);
        let mut live = off.clone();
        live.liveness = Some(CellOutcome::Ok);
        assert_eq!(kinds(&check(&live)), ["no_progress"]);

        // No python3: a shell kernel starts (no fallback for it), a Python
        // cell's `python3 -c` is 127 and runs nothing.
        let mut py = good();
        py.flawed = Some(Flawed {
            flaw: Flaw::NoPython3,
            fallback: true,
        });
        let mut pc = py.cells[0].clone();
        pc.label = "py".into();
        pc.python = true;
        pc.ran_without_kernel = Some("PythonMissing: python3 is not on the sandbox's PATH".into());
        pc.outcome = Some(CellOutcome::Exit { code: 127 });
        pc.client_stdout.clear();
        pc.truth.executions = 0;
        pc.truth.ran_to_end = false;
        py.cells.push(pc);
        assert_eq!(check(&py), vec![]);
        let mut shell_fell = py.clone();
        shell_fell.cells[0].ran_without_kernel = Some("python3".into());
        assert_eq!(kinds(&check(&shell_fell)), ["fail_open"]);
        let mut py_ok = py.clone();
        py_ok.cells[1].outcome = Some(CellOutcome::Ok);
        assert_eq!(kinds(&check(&py_ok)), ["fail_open"]);
    }

    #[test]
    fn a_clean_run_passes() {
        assert_eq!(check(&good()), vec![]);
    }

    #[test]
    fn each_broken_invariant_is_named() {
        let mut o = good();
        o.cells[0].truth.executions = 2;
        o.cells[0].client_stdout = b"hel".to_vec();
        o.state_lost_reports.push(5);
        o.calls[0].ended_ms = None;
        o.leaked_processes.push("pid 7 sleep".into());
        o.liveness = Some(CellOutcome::Unknown { reason: "x".into() });
        let kinds: Vec<_> = check(&o).iter().map(Violation::kind).collect();
        assert_eq!(
            kinds,
            [
                "lost_output",
                "double_execution",
                "missed_deadline",
                "false_state_lost",
                "leak",
                "no_progress"
            ]
        );
    }

    #[test]
    fn a_python_cells_loss_note_needs_its_interpreters_or_its_kernels_death() {
        let mut o = good();
        o.cells[0].python = true;
        o.cells[0].key = Some("py#1".into());
        o.cells[0].loss_reported_at = Some(116);
        assert_eq!(kinds(&check(&o)), ["false_state_lost"]);
        // Its kernel's daemon got TERM at 103 ms (a stop ends the
        // interpreter with it): told truly.
        let mut stopped = o.clone();
        stopped.known_deaths_by_kernel.push((103, "py".into()));
        assert_eq!(check(&stopped), vec![]);
        // Another kernel's death tells nothing of this one.
        let mut other = o.clone();
        other.known_deaths_by_kernel.push((103, "sim".into()));
        assert_eq!(kinds(&check(&other)), ["false_state_lost"]);
        // Its interpreter's death does.
        let mut died = o;
        died.interpreter_deaths.push(100);
        assert_eq!(check(&died), vec![]);
    }

    #[test]
    fn output_never_written_is_a_duplicate() {
        let mut o = good();
        o.cells[0].client_stdout = b"hello\nhello\n".to_vec();
        assert_eq!(check(&o)[0].kind(), "duplicated_output");
        let mut o = good();
        o.cells[0].output_ns = vec![3, 3];
        assert_eq!(check(&o)[0].kind(), "duplicated_output");
    }

    #[test]
    fn cancel_survivors_and_real_deaths() {
        let mut o = good();
        o.cells[0].cancel_requested = true;
        o.cells[0].outcome = Some(CellOutcome::Cancelled);
        o.cells[0].truth.alive_at_end = vec![42];
        o.kernel_deaths.push(1);
        o.known_kernel_deaths.push(1);
        o.state_lost_reports.push(5);
        let v = check(&o);
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].kind(), "cancel_survivor");
    }

    #[test]
    fn a_stopped_kernel_that_left_processes_running_is_caught() {
        let mut obs = good();
        assert_eq!(check(&obs), Vec::new());
        obs.stop_survivors.push(
            "kernel k got SIGTERM at 100 ms; at 1400 ms still running: interpreter 9 (python3)"
                .into(),
        );
        let v = check(&obs);
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].kind(), "stop_survivor");
        assert!(v[0].to_string().contains("interpreter 9"));
    }

    /// A call answered once by the first client, the handler run again by
    /// the resumed one (allowed), and a refused leftover.
    fn tools_good() -> Observations {
        let mut o = good();
        o.tools = ToolObs {
            calls: vec![
                ToolCallObs {
                    id: "a".into(),
                    cell: "/k/1".into(),
                    key: Some("k#1".into()),
                    answered: Some("tool t {}\n".into()),
                    ..ToolCallObs::default()
                },
                ToolCallObs {
                    id: "b".into(),
                    cell: "/k/1".into(),
                    key: Some("k#1".into()),
                    leftover: true,
                    failed: Some("refused".into()),
                    ..ToolCallObs::default()
                },
            ],
            answers: vec![
                ToolAnswerObs {
                    id: "a".into(),
                    journaled: true,
                    after_result: false,
                },
                ToolAnswerObs {
                    id: "b".into(),
                    journaled: false,
                    after_result: true,
                },
            ],
            runs: vec![
                ToolRunObs {
                    incarnation: 0,
                    id: "a".into(),
                    result: "tool t {}".into(),
                    name_len: 1,
                    args_len: 2,
                },
                ToolRunObs {
                    incarnation: 1,
                    id: "a".into(),
                    result: "tool t {}".into(),
                    name_len: 1,
                    args_len: 2,
                },
            ],
            reported_answered: vec!["a".into()],
            awaiting_at_end: 0,
        };
        o
    }

    fn tool_kinds(o: &Observations) -> Vec<&'static str> {
        check(o).iter().map(Violation::kind).collect()
    }

    #[test]
    fn tool_calls_by_the_rules_pass() {
        assert_eq!(check(&tools_good()), vec![]);
    }

    #[test]
    fn a_second_answer_file_fires() {
        let mut o = tools_good();
        o.tools.answers.push(o.tools.answers[0].clone());
        assert_eq!(tool_kinds(&o), vec!["tool_answered_twice"]);
    }

    /// The eleventh mutants sample's `Client::forget_calls` -> `()`:
    /// the calls of a resolved cell stayed counted as awaiting.
    #[test]
    fn calls_still_awaiting_after_the_end_fire() {
        let mut o = tools_good();
        o.tools.awaiting_at_end = 1;
        assert_eq!(tool_kinds(&o), vec!["tool_calls_left_awaiting"]);
    }

    #[test]
    fn code_with_a_nul_byte_that_ran_fires() {
        let mut o = good();
        o.cells[0].nul_byte = true;
        assert_eq!(kinds(&check(&o)), ["refused_code_ran"]);
        o.cells[0].truth = CellTruth::default();
        o.cells[0].client_stdout.clear();
        o.cells[0].outcome = Some(CellOutcome::Error {
            message: "null byte".into(),
        });
        assert!(kinds(&check(&o)).is_empty(), "{:?}", check(&o));
    }

    #[test]
    fn output_said_cut_below_the_cap_fires() {
        let mut o = good();
        o.cells[0].clipped = 10;
        assert_eq!(kinds(&check(&o)), ["false_clip"]);
        o.cells[0].truth.stdout = vec![b'x'; 9 * 1024 * 1024];
        o.cells[0].client_stdout = o.cells[0].truth.stdout.clone();
        assert!(!kinds(&check(&o)).contains(&"false_clip"), "really cut");
    }

    #[test]
    fn an_answer_after_the_result_fires() {
        let mut o = tools_good();
        o.tools.answers[0].after_result = true;
        assert_eq!(tool_kinds(&o), vec!["tool_answered_outside_cell"]);
    }

    #[test]
    fn a_handler_run_for_a_refused_call_fires() {
        let mut o = tools_good();
        o.tools.runs.push(ToolRunObs {
            incarnation: 0,
            id: "b".into(),
            result: "x".into(),
            name_len: 1,
            args_len: 2,
        });
        assert_eq!(tool_kinds(&o), vec!["refused_tool_call_ran"]);
    }

    #[test]
    fn a_handler_run_for_a_call_past_the_limits_fires_and_one_at_them_does_not() {
        for (name_len, args_len, fires) in [
            (MAX_NAME, MAX_ARGS, false),
            (MAX_NAME + 1, 2, true),
            (1, MAX_ARGS + 1, true),
            (0, 2, true),
        ] {
            let mut o = tools_good();
            o.tools.runs[0].name_len = name_len;
            o.tools.runs[0].args_len = args_len;
            o.tools.runs[1].name_len = name_len;
            o.tools.runs[1].args_len = args_len;
            let kinds = tool_kinds(&o);
            assert_eq!(
                kinds.contains(&"refused_tool_call_ran"),
                fires,
                "{name_len}/{args_len}: {kinds:?}"
            );
        }
    }

    #[test]
    fn more_calls_of_one_cell_than_its_limit_fire() {
        let mut o = tools_good();
        o.tools.runs.truncate(1);
        assert_eq!(check(&o), vec![]);
        for i in 0..MAX_CALLS {
            let id = format!("c{i}");
            o.tools.calls.push(ToolCallObs {
                id: id.clone(),
                cell: "/k/1".into(),
                key: Some("k#1".into()),
                answered: Some("tool t {}\n".into()),
                ..ToolCallObs::default()
            });
            o.tools.runs.push(ToolRunObs {
                id,
                ..o.tools.runs[0].clone()
            });
        }
        assert_eq!(tool_kinds(&o), vec!["refused_tool_call_ran"]);
    }

    #[test]
    fn a_result_the_handler_never_returned_fires() {
        let mut o = tools_good();
        o.tools.calls[0].answered = Some("forged\n".into());
        assert_eq!(tool_kinds(&o), vec!["tool_result_mismatch"]);
    }

    #[test]
    fn two_handler_runs_in_one_client_process_fire() {
        let mut o = tools_good();
        o.tools.runs[1].incarnation = 0;
        assert_eq!(tool_kinds(&o), vec!["tool_handler_repeated"]);
    }

    #[test]
    fn a_refused_call_of_the_running_cell_fires() {
        let mut o = tools_good();
        o.tools.calls[0].answered = None;
        o.tools.calls[0].failed = Some("refused".into());
        o.tools.answers[0].journaled = false;
        o.tools.runs.clear();
        // Even where the world could excuse an unanswered call.
        o.disk_filled = true;
        assert_eq!(tool_kinds(&o), vec!["tool_call_failed"]);
    }

    #[test]
    fn an_unanswered_call_of_a_cell_that_ran_ok_fires_unless_excused() {
        let mut o = tools_good();
        o.tools.calls[0].answered = None;
        o.tools.calls[0].failed = Some("not inside a tether cell".into());
        o.tools.calls[0].id = String::new();
        o.tools.answers.remove(0);
        o.tools.runs.clear();
        assert_eq!(tool_kinds(&o), vec!["tool_call_failed"]);
        let mut full = o.clone();
        full.disk_filled = true;
        assert_eq!(check(&full), vec![]);
        let mut jumped = o.clone();
        jumped.sandbox_clock_jumps_ms = 5_000;
        assert_eq!(check(&jumped), vec![]);
        let mut cancelled = o.clone();
        cancelled.cells[0].outcome = Some(CellOutcome::Cancelled);
        assert_eq!(check(&cancelled), vec![]);
        let mut late = o;
        late.tools.calls[0].failed = Some("no answer within 30 s (the deadline per call)".into());
        assert_eq!(tool_kinds(&late), vec!["tool_call_failed"]);
        late.outages = Some(Outages {
            spans: vec![(1_000, 31_000)],
            ..Outages::default()
        });
        assert_eq!(check(&late), vec![]);
    }
}
