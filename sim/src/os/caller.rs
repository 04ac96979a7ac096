//! The simulated `tether-call`: a process that makes one tool call with
//! the logic of the real one ([`Caller`], in core): the request written
//! with the cell's credential from its environment, then a look for the
//! answer every [`CALLER_POLL`] until the answer, a refusal, the cell's
//! end or the deadline. What each call came to is ground truth for the
//! oracle ([`ToolCallTruth`]).

use super::process::{CellRef, ExitStatus, Fd};
use super::SimOs;
use tether_core::agent::calls::{CallEnd, Caller};
use tether_core::agent::Pid;
use tether_core::protocol::calls::CALLER_POLL;
use tether_core::time::Timestamp;

/// One `tether-call` process.
#[derive(Debug)]
pub(crate) struct CallerRun {
    name: String,
    args: String,
    /// When it calls (a leftover sleeps first).
    start_at: Timestamp,
    caller: Option<Caller>,
    next_poll: Timestamp,
    leftover: bool,
    /// Its entry in [`SimOs::tool_calls`], once it started.
    truth: Option<usize>,
}

/// What one simulated tool call came to (ground truth), from the moment
/// it starts: a call killed, or still waiting when the script ends, has
/// no end.
#[derive(Clone, Debug)]
pub struct ToolCallTruth {
    /// The cell whose process made it.
    pub cell: Option<CellRef>,
    /// Its id (empty when it never wrote a request).
    pub id: String,
    /// The tool and arguments.
    pub name: String,
    /// Its arguments.
    pub args: String,
    /// Made by a background process of the cell (a leftover).
    pub leftover: bool,
    /// What the caller printed and its status (`None`: it never ended).
    pub end: Option<CallEnd>,
    /// When it ended.
    pub at: Option<Timestamp>,
    /// When it started (looked at its environment and wrote its request).
    pub started: Timestamp,
    /// Its cell had ended when it started: the journal's `done` flag was
    /// there, or the calls directory was gone. Read from the simulated
    /// file system here, not through the caller's own test of it.
    pub cell_ended_at_start: bool,
    /// When a look of the caller's (its start, each poll) first found its
    /// cell ended (ground truth, as for `cell_ended_at_start`): the call
    /// must end then, answered or refused.
    pub cell_ended_at: Option<Timestamp>,
    /// Its calls directory (from its environment).
    pub calls_dir: Option<String>,
    /// Its start plus the `TETHER_CALL_TIMEOUT` of its environment (whole
    /// seconds, as the workloads give it): no look of its may wait on
    /// past this.
    pub deadline: Option<Timestamp>,
    /// The first look at or past `deadline` that still waited.
    pub overran_at: Option<Timestamp>,
}

/// One answer file written in the sandbox (ground truth).
#[derive(Clone, Debug)]
pub struct AnswerWrite {
    /// The call's id.
    pub id: String,
    /// The cell directory.
    pub cell_dir: String,
    /// The call had been journaled (it went to the host) when its answer
    /// was written; false: a refusal by the shim.
    pub journaled: bool,
    /// The cell's result was journaled already.
    pub after_result: bool,
    /// When.
    pub at: Timestamp,
}

impl CallerRun {
    pub(crate) fn new(
        name: String,
        args: String,
        start_at: Timestamp,
        leftover: bool,
    ) -> CallerRun {
        CallerRun {
            name,
            args,
            start_at,
            caller: None,
            next_poll: start_at,
            leftover,
            truth: None,
        }
    }

    pub(crate) fn wake(&self) -> Option<Timestamp> {
        Some(self.next_poll.max(self.start_at))
    }
}

impl SimOs {
    /// Runs the caller `pid` as far as it gets now.
    pub(crate) fn run_caller(&mut self, pid: Pid) -> bool {
        let take = |p| match p {
            super::process::Program::Caller(c) => Ok(c),
            other => Err(other),
        };
        self.step_program(pid, take, super::process::Program::Caller, |os, run| {
            os.as_process(pid, |os| os.drive_caller(pid, run))
        })
    }

    fn drive_caller(&mut self, pid: Pid, run: &mut CallerRun) -> bool {
        let now = self.now;
        if now < run.start_at || now < run.next_poll {
            return false;
        }
        let end = match &run.caller {
            None => {
                let env = self
                    .procs
                    .get(&pid)
                    .map(|p| p.env.clone())
                    .unwrap_or_default();
                self.note_call_start(pid, run, &env);
                let starttime = self.procs.get(&pid).map_or(0, |p| p.starttime);
                let id = format!("s{}p{pid}t{starttime}", self.boots);
                let lookup = |k: &str| env.get(k).cloned();
                match Caller::start(self, &lookup, &run.name, &run.args, id) {
                    Ok(caller) => {
                        run.caller = Some(caller);
                        None
                    }
                    Err(end) => Some(end),
                }
            }
            Some(caller) => {
                self.note_cell_end_seen(run);
                caller.poll(self)
            }
        };
        let Some(end) = end else {
            self.note_overrun(run);
            run.next_poll = now + CALLER_POLL;
            return true;
        };
        let (out, err) = self
            .procs
            .get(&pid)
            .map_or((Fd::Null, Fd::Null), |p| (p.stdout, p.stderr));
        let code = match &end {
            CallEnd::Answered { stdout } => {
                self.write_fd(pid, out, stdout.as_bytes());
                0
            }
            CallEnd::Failed { message, code } => {
                let line = format!("tether-call {}: {message}\n", run.name);
                self.write_fd(pid, err, line.as_bytes());
                i32::from(*code)
            }
        };
        if let Some(t) = run.truth.and_then(|i| self.tool_calls.get_mut(i)) {
            t.id = run
                .caller
                .as_ref()
                .map(|c| c.id().to_owned())
                .unwrap_or_default();
            t.end = Some(end);
            t.at = Some(now);
        }
        self.exit_proc(pid, ExitStatus::Code(code));
        true
    }

    /// Records the call `run` of `pid` as started now, with whether its
    /// cell (named by the calls directory in `env`) had ended by then.
    fn note_call_start(
        &mut self,
        pid: Pid,
        run: &mut CallerRun,
        env: &std::collections::BTreeMap<String, String>,
    ) {
        use tether_core::protocol::calls::ENV_DIR;
        let calls_dir = env.get(ENV_DIR).cloned();
        // What the workload means its `TETHER_CALL_TIMEOUT` to be, not
        // the caller's reading of it (one it cannot use is the default).
        let secs = tether_scenarios::workload::call_timeout_s(&run.name);
        let deadline = Some(self.now + std::time::Duration::from_secs(secs));
        let cell_ended_at_start = calls_dir.as_deref().is_some_and(|d| self.cell_ended(d));
        run.truth = Some(self.tool_calls.len());
        self.tool_calls.push(ToolCallTruth {
            cell: self.procs.get(&pid).and_then(|p| p.origin.clone()),
            id: String::new(),
            name: run.name.clone(),
            args: run.args.clone(),
            leftover: run.leftover,
            end: None,
            at: None,
            started: self.now,
            cell_ended_at_start,
            cell_ended_at: cell_ended_at_start.then_some(self.now),
            calls_dir,
            deadline,
            overran_at: None,
        });
    }

    /// A look of a caller that still waits: past its deadline, it overran.
    fn note_overrun(&mut self, run: &CallerRun) {
        let now = self.now;
        if let Some(t) = run.truth.and_then(|i| self.tool_calls.get_mut(i)) {
            if t.overran_at.is_none() && t.deadline.is_some_and(|d| now >= d) {
                t.overran_at = Some(now);
            }
        }
    }

    /// Has the cell whose calls directory is `dir` ended: its journal's
    /// `done` flag there, or the directory gone (read from the simulated
    /// file system, not through the caller's own test of it)?
    fn cell_ended(&self, dir: &str) -> bool {
        let cell = dir.trim_end_matches('/').trim_end_matches("/calls");
        let journal = tether_core::agent::layout::CellLayout::from_dir(cell).journal();
        self.fs
            .exists(&tether_core::agent::journal::done_flag(&journal))
            || !self.fs.exists(dir)
    }

    /// A look of a waiting caller: notes when it first finds its cell
    /// ended.
    fn note_cell_end_seen(&mut self, run: &CallerRun) {
        let Some(i) = run.truth else { return };
        let due = self
            .tool_calls
            .get(i)
            .filter(|t| t.cell_ended_at.is_none())
            .and_then(|t| t.calls_dir.clone());
        if let Some(dir) = due {
            if self.cell_ended(&dir) {
                let now = self.now;
                if let Some(t) = self.tool_calls.get_mut(i) {
                    t.cell_ended_at = Some(now);
                }
            }
        }
    }

    /// Notes an answer file being written at `path` (ground truth).
    pub(crate) fn note_answer(&mut self, path: &str) {
        let Some((dir, file)) = path.rsplit_once('/') else {
            return;
        };
        let (Some(id), Some(cell_dir)) = (file.strip_suffix(".ans"), dir.strip_suffix("/calls"))
        else {
            return;
        };
        let layout = tether_core::agent::layout::CellLayout::from_dir(cell_dir);
        let entries = tether_core::agent::journal::read_journal(self, &layout.journal())
            .map(|r| r.entries)
            .unwrap_or_default();
        use tether_core::protocol::EntryKind;
        let journaled = entries
            .iter()
            .any(|e| matches!(&e.kind, EntryKind::ToolCall { id: i, .. } if i == id));
        let after_result = entries
            .iter()
            .any(|e| matches!(e.kind, EntryKind::Result { .. }));
        self.answers.push(AnswerWrite {
            id: id.to_owned(),
            cell_dir: cell_dir.to_owned(),
            journaled,
            after_result,
            at: self.now,
        });
    }

    /// Every tool call made, and what it came to.
    pub fn tool_calls(&self) -> &[ToolCallTruth] {
        &self.tool_calls
    }

    /// Every answer file written.
    pub fn answers(&self) -> &[AnswerWrite] {
        &self.answers
    }
}
