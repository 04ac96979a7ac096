//! Workloads: a small language of what a cell does.
//!
//! A [`Workload`] is a list of [`Step`]s. In the simulation it *is* the
//! cell's code: [`Workload::encode`] gives the bytes the client submits and
//! `SimOs` decodes them ([`Workload::decode`]) and interprets them step by
//! step in virtual time. The live backends run the same workload rendered
//! into real shell ([`render_shell`]) or Python ([`render_python`]) code, so
//! one scenario means the same thing in both worlds.
//!
//! Each step says what it does to processes, because that is what the
//! escape classes are about: which steps fork, which leave the process group
//! or the session, which drop the environment, which hold stdout open.

use crate::shell_model::{Probe, StateChange};
use serde::{Deserialize, Serialize};
use std::fmt;
use tether_core::protocol::Stream;

/// Steps nested deeper than this (traps inside traps) are refused.
pub const MAX_DEPTH: usize = 4;
/// More steps than this (counting nested ones) are refused.
pub const MAX_STEPS: usize = 10_000;
/// A fork burst larger than this is refused.
pub const MAX_FORKS: u32 = 10_000;

/// One thing a cell does.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "step")]
pub enum Step {
    /// Writes `text` to a stream, exactly (no newline added). Shell
    /// builtin: never forks.
    Print {
        /// Which stream.
        stream: Stream,
        /// What to write.
        text: String,
    },
    /// Sleeps. In shell this forks a `sleep` child and waits for it (a TERM
    /// trap runs only after the child is done); Python sleeps in-process.
    Sleep {
        /// How long.
        ms: u64,
    },
    /// Exits with `code` (an EXIT trap runs first).
    Exit {
        /// The exit status.
        code: u8,
    },
    /// Ignores SIGTERM from now on (`trap '' TERM`). Children started later
    /// inherit the ignore (it survives fork and exec).
    IgnoreTerm,
    /// Runs `then` when SIGTERM arrives, and carries on afterwards unless
    /// `then` exits. Children start with the default action.
    TrapTerm {
        /// The handler's steps.
        then: Vec<Step>,
    },
    /// A shell-builtin busy loop: burns CPU and never forks, for `ms` or
    /// forever.
    BusyLoop {
        /// How long; absent = forever.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ms: Option<u64>,
    },
    /// `sleep S &`: a background child in the cell's process group that
    /// inherits stdout and stderr, so they stay open after the main process
    /// exits. A non-interactive shell starts it with SIGINT ignored.
    BackgroundChildHoldingStdout {
        /// How long the child lives.
        sleep_ms: u64,
    },
    /// `setsid sh -c '(sleep S &)'`: a daemon in a new session (out of the
    /// cell's process group and session), double-forked so that its parent
    /// is gone. It keeps the environment (the marker) and stdio.
    SetsidDoubleForkDaemon {
        /// How long the daemon lives.
        sleep_ms: u64,
    },
    /// `setsid env -i sh -c 'sleep S </dev/null >/dev/null 2>&1 &'`: a
    /// daemon in a new session, with an empty environment (no marker) and
    /// stdio on `/dev/null`, orphaned.
    EnvIDaemon {
        /// How long the daemon lives.
        sleep_ms: u64,
    },
    /// An orphan in its own process group (`setpgid(0, 0)`) but still in the
    /// cell's session, with the environment and stdio kept.
    SetpgidOrphan {
        /// How long the orphan lives.
        sleep_ms: u64,
    },
    /// `(env -i PATH=/usr/bin:/bin perl -e 'setpgrp(0, 0); exec @ARGV'
    /// sleep S </dev/null >/dev/null 2>&1 &)`: an orphan in its own
    /// process group with an empty environment (no marker) and stdio on
    /// `/dev/null`, still in the cell's session. Without cgroups, once the
    /// shim that reaped it is gone, only that session ties it to a shell
    /// cell (a Python kernel's cells share one session: there nothing
    /// does, as for [`Step::EnvIDaemon`]).
    SetpgidEnvIOrphan {
        /// How long the orphan lives.
        sleep_ms: u64,
    },
    /// `sh -c 'env -i PATH=/usr/bin:/bin sleep S </dev/null >/dev/null
    /// 2>&1' &`: a background child that keeps the environment (the
    /// marker) and waits for its own child, which has an empty one. The
    /// grandchild is the cell's only by its parent: in a Python kernel,
    /// where every cell's processes descend from the one interpreter, a
    /// later cell's cancel must leave it alone.
    EnvIGrandchild {
        /// How long the grandchild (and so its parent) lives.
        sleep_ms: u64,
    },
    /// `trap 'printf %s TEXT' EXIT`: replaces any EXIT trap of the shell.
    SetExitTrap {
        /// Printed to stdout when the shell exits (not when it is killed).
        text: String,
    },
    /// Starts `count` short-lived children, one after another, without
    /// waiting for them.
    ForkBurst {
        /// How many.
        count: u32,
    },
    /// Appends one line to the side-effect file `name`, to count how many
    /// times the cell really ran. Shell builtin: never forks. Rendered as
    /// Python, the line is the interpreter's pid.
    WriteSideEffect {
        /// The file's name in the side-effect directory (`[A-Za-z0-9_.-]`,
        /// not starting with `.`).
        name: String,
    },
    /// `export NAME=VALUE`.
    SetVar {
        /// The variable (`[A-Za-z_][A-Za-z0-9_]*`).
        name: String,
        /// Its value.
        value: String,
    },
    /// `cd PATH`.
    ChangeDir {
        /// The directory.
        path: String,
    },
    /// Ignores SIGINT from now on: `trap '' INT` in shell,
    /// `signal.signal(SIGINT, SIG_IGN)` in Python (the interpreter can then
    /// not be interrupted: a cancel has to kill it).
    IgnoreInt,
    /// Binds `name` to the string `value` in the kernel's namespace. Python:
    /// `NAME = "VALUE"` (kept by the interpreter for later cells, also after
    /// a KeyboardInterrupt). Shell: `NAME='VALUE'`, a variable of the cell's
    /// shell that is not exported, so it ends with the cell (a shell kernel
    /// keeps only exports and the directory).
    SetName {
        /// The name (`[A-Za-z_][A-Za-z0-9_]*`).
        name: String,
        /// Its value.
        value: String,
    },
    /// Writes the value bound to `name` and a newline to stdout. When the
    /// name is not bound the cell fails there: Python raises `NameError`
    /// (the cell's outcome is an error); shell's `${NAME?}` makes the
    /// non-interactive shell exit with status 2.
    PrintName {
        /// The name.
        name: String,
    },
    /// Changes the shell's state (functions, aliases, arrays, options,
    /// umask, `pushd`, traps, `unset`): see [`StateChange`]. A shell
    /// kernel's step; a Python cell does nothing.
    State {
        /// The change.
        change: StateChange,
    },
    /// Prints one piece of the shell's state as one line (see [`Probe`]);
    /// never fails. A Python cell does nothing.
    Show {
        /// What to print.
        probe: Probe,
    },
    /// `false`: status 1, and under `set -e` the shell exits 1. A Python
    /// cell does nothing.
    Fail,
    /// `: "$NAME"`: under `set -u` an unset variable ends the shell (with
    /// 127 under bash, 2 under dash). A Python cell does nothing.
    Expand {
        /// The variable.
        name: String,
    },
    /// `TETHER_CALL_TIMEOUT=S tether-call NAME 'ARGS'` (Python:
    /// `tether.call(NAME, ARGS)` and the result printed): a tool call of
    /// the cell, answered by the host's handler. The answer is printed
    /// with a newline (a string as it is, see [`tool_result`]); a failed
    /// call writes its error to stderr and the cell goes on. The caller
    /// waits at most [`call_timeout_s`].
    ToolCall {
        /// The tool (`[A-Za-z0-9_-]`).
        name: String,
        /// Its arguments: compact JSON, no `'`.
        args: String,
    },
    /// A tool call of a given size, at or past the limits the sandbox
    /// takes (`MAX_NAME`, `MAX_ARGS`): the name `n` repeated `name_len`
    /// times, the arguments a JSON string of `args_len` bytes in all
    /// ([`sized_call`]), fed on stdin (`… | tether-call NAME -`: a 1 MiB
    /// argument is past what one argv string may hold) or, in Python,
    /// given to `tether.call`. One within the limits is answered as
    /// [`Step::ToolCall`]'s; one past them fails (the caller's or the
    /// shim's refusal on stderr) and never reaches the host.
    SizedToolCall {
        /// Bytes of the tool's name (at least 1).
        name_len: usize,
        /// Bytes of its compact JSON arguments (at least 2).
        args_len: usize,
    },
    /// `(sleep S; tether-call NAME 'ARGS') </dev/null >/dev/null 2>&1 &`:
    /// a background process of the cell that makes a tool call after
    /// `after_ms`, by then usually a leftover of a finished cell (the call
    /// must be refused in the sandbox and never reach the host).
    LeftoverToolCall {
        /// How long it waits before it calls.
        after_ms: u64,
        /// The tool.
        name: String,
        /// Its arguments.
        args: String,
    },
    /// `(sleep S; i=0; while [ $i -lt N ]; do printf …; done) &`: a
    /// background child of the cell that holds its stdout and, `after_ms`
    /// later (mostly after its cell resolved; `drawn`'s edge printers
    /// print as the shim's drain bound passes), prints `lines` numbered
    /// lines ([`late_text`]). What it prints after its cell resolved is
    /// the kernel's background log (`tether logs`), never a cell's
    /// output; what it printed before is the cell's.
    LatePrint {
        /// How long it waits before it prints.
        after_ms: u64,
        /// What its lines start with (`[A-Za-z0-9_-]`, unique in a
        /// scenario, so each line says whose it is).
        tag: String,
        /// How many lines (at most [`MAX_LATE_LINES`]).
        lines: u32,
    },
}

/// The command of [`Step::EnvIGrandchild`]'s child: its grandchild with
/// an empty environment, waited for.
fn env_i_sleep(sleep_ms: u64) -> String {
    format!(
        "env -i PATH=/usr/bin:/bin sleep {} </dev/null >/dev/null 2>&1",
        secs(sleep_ms)
    )
}

/// [`Step::SetpgidEnvIOrphan`]'s orphan, before the `&` that orphans it.
fn env_i_setpgid(sleep_ms: u64) -> String {
    format!(
        "env -i PATH=/usr/bin:/bin perl -e 'setpgrp(0, 0); exec @ARGV' sleep {} </dev/null >/dev/null 2>&1",
        secs(sleep_ms)
    )
}

/// A [`Step::LatePrint`] prints at most this many lines.
pub const MAX_LATE_LINES: u32 = 100_000;

/// What pads each line of a [`Step::LatePrint`], so that a few thousand
/// lines fill the background log past its cap.
const LATE_PAD: &str =
    "................................................................................";

/// Line `i` of [`Step::LatePrint`] `tag`, newline included.
pub fn late_line(tag: &str, i: u32) -> String {
    format!("{tag} {i:06} {LATE_PAD}\n")
}

/// Everything [`Step::LatePrint`] `tag` of `lines` lines prints.
pub fn late_text(tag: &str, lines: u32) -> String {
    (0..lines).map(|i| late_line(tag, i)).collect()
}

/// The shell code of [`Step::LatePrint`] (run in the background by the
/// shell, by `sh -c` from Python): the same bytes as [`late_text`].
fn late_shell(after_ms: u64, tag: &str, lines: u32) -> String {
    format!(
        "sleep {}; _tw_l=0; while [ \"$_tw_l\" -lt {lines} ]; do printf '{tag} %06d {LATE_PAD}\\n' \"$_tw_l\"; _tw_l=$((_tw_l + 1)); done",
        secs(after_ms)
    )
}

/// How long a workload's tool call waits for its answer (seconds, its
/// `TETHER_CALL_TIMEOUT`): past any outage the client survives.
pub const TOOL_CALL_TIMEOUT_S: u64 = 30;

/// A tool the scenarios' host never answers (its handler never returns):
/// the caller must give up at its own deadline and the cell go on.
pub const STALLED_TOOL: &str = "stall";

/// A tool whose calls carry a `TETHER_CALL_TIMEOUT` no caller can use
/// ([`UNUSABLE_CALL_TIMEOUT`]): each waits its default deadline instead,
/// as zero (no deadline at all) must not end the call at once. (The `tool_calls`
/// scenario's second call: the name it had before its calls carried
/// this, so its race files replay the same script.)
pub const LAX_TOOL: &str = "read";

/// What [`LAX_TOOL`]'s calls set `TETHER_CALL_TIMEOUT` to.
pub const UNUSABLE_CALL_TIMEOUT: &str = "0";

/// How long a call of tool `name` waits (seconds): its
/// `TETHER_CALL_TIMEOUT`, [`TOOL_CALL_TIMEOUT_S`], but 2 s for the
/// [`STALLED_TOOL`], whose deadline always runs out, and the callers'
/// default for the [`LAX_TOOL`].
pub fn call_timeout_s(name: &str) -> u64 {
    match name {
        STALLED_TOOL => 2,
        LAX_TOOL => tether_core::protocol::calls::DEFAULT_CALL_TIMEOUT.as_secs(),
        _ => TOOL_CALL_TIMEOUT_S,
    }
}

/// What a call of tool `name` sets `TETHER_CALL_TIMEOUT` to.
pub fn call_timeout_text(name: &str) -> String {
    if name == LAX_TOOL {
        UNUSABLE_CALL_TIMEOUT.to_owned()
    } else {
        call_timeout_s(name).to_string()
    }
}

/// What the scenarios' tool handler returns for a call of `name` with
/// `args` (compact JSON), a string: what the caller prints, before its
/// newline.
pub fn tool_result(name: &str, args: &str) -> String {
    // Long arguments (a call at the size limit) are named by their size:
    // echoed, they would be a megabyte of every cell's output.
    if args.len() > 64 {
        return format!("tool {name} ({} bytes)", args.len());
    }
    format!("tool {name} {args}")
}

/// The name and compact JSON arguments of [`Step::SizedToolCall`].
pub fn sized_call(name_len: usize, args_len: usize) -> (String, String) {
    (
        "n".repeat(name_len),
        format!("\"{}\"", "x".repeat(args_len.saturating_sub(2))),
    )
}

/// Does the sandbox take a call of this name and (compact) arguments, as
/// the protocol's limits say? The oracle's reading of them, apart from
/// the agent's checks.
pub fn within_call_limits(name: &str, args: &str) -> bool {
    use tether_core::protocol::calls::{MAX_ARGS, MAX_NAME};
    (1..=MAX_NAME).contains(&name.len()) && args.len() <= MAX_ARGS
}

/// What a cell's tool call prints when it is answered: `Some` for a call
/// the sandbox takes (its result line), `None` for a step that is no
/// call or one past the limits (its refusal goes to stderr).
pub fn tool_call_output(step: &Step) -> Option<String> {
    let (name, args) = foreground_call(step)?;
    (within_call_limits(&name, &args) && name != STALLED_TOOL)
        .then(|| format!("{}\n", tool_result(&name, &args)))
}

/// The name and arguments of a step that is a tool call in the cell's
/// foreground ([`Step::ToolCall`], [`Step::SizedToolCall`]).
pub fn foreground_call(step: &Step) -> Option<(String, String)> {
    match step {
        Step::ToolCall { name, args } => Some((name.clone(), args.clone())),
        Step::SizedToolCall { name_len, args_len } => Some(sized_call(*name_len, *args_len)),
        _ => None,
    }
}

fn is_tool_call(name: &str, args: &str) -> bool {
    let name_ok = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    let compact = serde_json::from_str::<serde_json::Value>(args)
        .ok()
        .map(|v| v.to_string());
    name_ok && compact.as_deref() == Some(args) && !args.contains('\'') && !args.contains('\\')
}

/// What a cell does, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Workload {
    /// The steps.
    pub steps: Vec<Step>,
}

/// Why bytes are not a workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WorkloadError {
    /// The bytes are not a workload's JSON.
    Json {
        /// The parser's complaint.
        detail: String,
    },
    /// A side-effect name that is not a plain file name.
    BadSideEffectName {
        /// The name.
        name: String,
    },
    /// A variable name that the shell would not accept.
    BadVarName {
        /// The name.
        name: String,
    },
    /// A directory that is empty or holds a NUL byte.
    BadPath {
        /// The path.
        path: String,
    },
    /// A variable value that holds a NUL byte.
    NulInValue {
        /// The variable.
        name: String,
    },
    /// A shell-state step out of range: a umask over 0777, a `pushd` to
    /// a relative directory, a NUL byte in a text.
    BadState {
        /// What was wrong.
        detail: String,
    },
    /// Traps nested deeper than [`MAX_DEPTH`].
    TooDeep,
    /// More than [`MAX_STEPS`] steps.
    TooManySteps {
        /// How many.
        count: usize,
    },
    /// A fork burst over [`MAX_FORKS`].
    TooManyForks {
        /// How many were asked for.
        count: u32,
    },
}

impl fmt::Display for WorkloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WorkloadError::Json { detail } => {
                write!(f, "not a workload (expected JSON {{\"steps\": [...]}}): {detail}")
            }
            WorkloadError::BadSideEffectName { name } => write!(
                f,
                "side-effect name {name:?} is not a plain file name; use [A-Za-z0-9_.-], not starting with '.'"
            ),
            WorkloadError::BadVarName { name } => write!(
                f,
                "variable name {name:?} is not valid; use [A-Za-z_][A-Za-z0-9_]*"
            ),
            WorkloadError::BadPath { path } => {
                write!(f, "directory {path:?} is empty or holds a NUL byte")
            }
            WorkloadError::NulInValue { name } => {
                write!(f, "the value of {name} holds a NUL byte, which no environment can carry")
            }
            WorkloadError::BadState { detail } => write!(f, "bad shell-state step: {detail}"),
            WorkloadError::TooDeep => {
                write!(f, "traps are nested deeper than {MAX_DEPTH} levels")
            }
            WorkloadError::TooManySteps { count } => {
                write!(f, "{count} steps; at most {MAX_STEPS} are allowed")
            }
            WorkloadError::TooManyForks { count } => {
                write!(f, "a fork burst of {count}; at most {MAX_FORKS} are allowed")
            }
        }
    }
}

impl std::error::Error for WorkloadError {}

impl Workload {
    /// A workload of these steps.
    pub fn new(steps: Vec<Step>) -> Workload {
        Workload { steps }
    }

    /// The bytes submitted as the cell's code (JSON).
    pub fn encode(&self) -> Vec<u8> {
        // Serialising plain data to a Vec cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Reads and validates a workload.
    pub fn decode(bytes: &[u8]) -> Result<Workload, WorkloadError> {
        let workload: Workload =
            serde_json::from_slice(bytes).map_err(|e| WorkloadError::Json {
                detail: e.to_string(),
            })?;
        workload.validate()?;
        Ok(workload)
    }

    /// Checks names, paths, nesting and sizes.
    pub fn validate(&self) -> Result<(), WorkloadError> {
        let mut count = 0;
        validate_steps(&self.steps, 1, &mut count)
    }

    /// The names of the side-effect files this workload writes (each write
    /// appends one line), sorted and deduplicated, traps included.
    pub fn side_effects(&self) -> Vec<String> {
        let mut names = std::collections::BTreeSet::new();
        collect_side_effects(&self.steps, &mut names);
        names.into_iter().collect()
    }
}

fn collect_side_effects(steps: &[Step], names: &mut std::collections::BTreeSet<String>) {
    for step in steps {
        match step {
            Step::WriteSideEffect { name } => {
                names.insert(name.clone());
            }
            Step::TrapTerm { then } => collect_side_effects(then, names),
            _ => {}
        }
    }
}

fn validate_steps(steps: &[Step], depth: usize, count: &mut usize) -> Result<(), WorkloadError> {
    if depth > MAX_DEPTH {
        return Err(WorkloadError::TooDeep);
    }
    for step in steps {
        *count += 1;
        if *count > MAX_STEPS {
            return Err(WorkloadError::TooManySteps { count: *count });
        }
        match step {
            Step::WriteSideEffect { name } if !is_file_name(name) => {
                return Err(WorkloadError::BadSideEffectName { name: name.clone() })
            }
            Step::SetVar { name, .. } if !is_var_name(name) => {
                return Err(WorkloadError::BadVarName { name: name.clone() })
            }
            Step::SetName { name, .. } | Step::PrintName { name } if !is_var_name(name) => {
                return Err(WorkloadError::BadVarName { name: name.clone() })
            }
            Step::SetName { name, value } if value.contains('\0') => {
                return Err(WorkloadError::NulInValue { name: name.clone() })
            }
            Step::SetVar { name, value } if value.contains('\0') => {
                return Err(WorkloadError::NulInValue { name: name.clone() })
            }
            Step::ChangeDir { path } if path.is_empty() || path.contains('\0') => {
                return Err(WorkloadError::BadPath { path: path.clone() })
            }
            Step::ForkBurst { count } if *count > MAX_FORKS => {
                return Err(WorkloadError::TooManyForks { count: *count })
            }
            Step::TrapTerm { then } => validate_steps(then, depth + 1, count)?,
            Step::Expand { name } if !is_var_name(name) => {
                return Err(WorkloadError::BadVarName { name: name.clone() })
            }
            Step::LatePrint { tag, lines, .. }
                if *lines > MAX_LATE_LINES
                    || tag.is_empty()
                    || !tag
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') =>
            {
                return Err(WorkloadError::BadState {
                    detail: format!(
                        "late print {tag:?} of {lines} lines: a tag of [A-Za-z0-9_-], at most {MAX_LATE_LINES} lines"
                    ),
                })
            }
            Step::State { change } => validate_change(change)?,
            Step::Show { probe } => validate_probe(probe)?,
            Step::ToolCall { name, args } | Step::LeftoverToolCall { name, args, .. }
                if !is_tool_call(name, args) =>
            {
                return Err(WorkloadError::BadState {
                    detail: format!(
                        "tool call {name:?} {args:?}: a name of [A-Za-z0-9_-] and compact JSON without quotes or backslashes"
                    ),
                })
            }
            Step::SizedToolCall { name_len, args_len } if *name_len == 0 || *args_len < 2 => {
                return Err(WorkloadError::BadState {
                    detail: format!(
                        "sized tool call of a {name_len}-byte name and {args_len}-byte arguments: at least 1 and 2"
                    ),
                })
            }
            _ => {}
        }
    }
    Ok(())
}

fn validate_change(change: &StateChange) -> Result<(), WorkloadError> {
    let bad = |detail: String| Err(WorkloadError::BadState { detail });
    let name_ok = |name: &str| {
        if is_var_name(name) {
            Ok(())
        } else {
            Err(WorkloadError::BadVarName { name: name.into() })
        }
    };
    match change {
        StateChange::Unset { name } => name_ok(name),
        StateChange::Array { name, values } => {
            name_ok(name)?;
            if values.iter().any(|v| v.contains('\0')) {
                return Err(WorkloadError::NulInValue { name: name.clone() });
            }
            Ok(())
        }
        StateChange::Function { name, text } | StateChange::Alias { name, text } => {
            name_ok(name)?;
            if text.contains('\0') {
                return bad(format!("the text of {name} holds a NUL byte"));
            }
            Ok(())
        }
        StateChange::Option { .. } => Ok(()),
        StateChange::Umask { mask } if *mask > 0o777 => bad(format!("umask {mask:o} is over 0777")),
        StateChange::Umask { .. } => Ok(()),
        StateChange::Pushd { path } if !path.starts_with('/') || path.contains('\0') => bad(
            format!("pushd {path:?}: use an absolute directory without NUL"),
        ),
        StateChange::Pushd { .. } => Ok(()),
        StateChange::Trap { text, .. } if text.contains('\0') => {
            bad("a trap's text holds a NUL byte".into())
        }
        StateChange::Trap { .. } => Ok(()),
        StateChange::Positional { values } if values.iter().any(|v| v.contains('\0')) => {
            bad("a positional parameter holds a NUL byte".into())
        }
        StateChange::Positional { .. } => Ok(()),
    }
}

fn validate_probe(probe: &Probe) -> Result<(), WorkloadError> {
    match probe {
        Probe::Var { name }
        | Probe::Exported { name }
        | Probe::Array { name }
        | Probe::Function { name }
        | Probe::Alias { name }
            if !is_var_name(name) =>
        {
            Err(WorkloadError::BadVarName { name: name.clone() })
        }
        _ => Ok(()),
    }
}

/// `[A-Za-z0-9_.-]+`, not starting with `.` or `-`, at most 64 bytes.
pub fn is_file_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && !name.starts_with(['.', '-'])
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// `[A-Za-z_][A-Za-z0-9_]*`.
pub fn is_var_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The shell's `sleep` argument for `ms`: seconds with three decimals.
fn secs(ms: u64) -> String {
    format!("{}.{:03}", ms / 1000, ms % 1000)
}

pub use tether_core::shell_quote::sh_quote;

/// A shell command that writes `text` exactly, NUL bytes included.
fn sh_print(text: &str, stream: Stream) -> String {
    let redirect = match stream {
        Stream::Stdout => "",
        Stream::Stderr => " >&2",
    };
    if text.is_empty() {
        return ":".to_owned();
    }
    // printf's format: '%' doubled, '\' doubled, NUL as \000; everything
    // else (newlines too) stays literal inside single quotes.
    let mut format = String::new();
    for c in text.chars() {
        match c {
            '%' => format.push_str("%%"),
            '\\' => format.push_str("\\\\"),
            '\0' => format.push_str("\\000"),
            c => format.push(c),
        }
    }
    format!("printf {}{redirect}", sh_quote(&format))
}

/// Real POSIX shell code doing what `workload` does. Side-effect files go
/// to `side_effect_dir`. The code runs in the current shell (no wrapper), so
/// `exit`, `cd`, `export` and traps act on the cell's shell itself.
pub fn render_shell(workload: &Workload, side_effect_dir: &str) -> String {
    let mut out = String::new();
    for step in &workload.steps {
        out.push_str(&shell_step(step, side_effect_dir));
        out.push('\n');
    }
    out
}

fn shell_steps(steps: &[Step], side_effect_dir: &str) -> String {
    steps
        .iter()
        .map(|s| shell_step(s, side_effect_dir))
        .collect::<Vec<_>>()
        .join("\n")
}

fn shell_step(step: &Step, dir: &str) -> String {
    match step {
        Step::Print { stream, text } => sh_print(text, *stream),
        Step::Sleep { ms } => format!("sleep {}", secs(*ms)),
        Step::Exit { code } => format!("exit {code}"),
        Step::IgnoreTerm => "trap '' TERM".to_owned(),
        Step::TrapTerm { then } => {
            let body = shell_steps(then, dir);
            let body = if body.is_empty() {
                ":".to_owned()
            } else {
                body
            };
            format!("trap {} TERM", sh_quote(&body))
        }
        // Builtins only: `read` of /proc/uptime (centiseconds) and shell
        // arithmetic, so the loop never forks.
        Step::BusyLoop { ms: None } => "while :; do :; done".to_owned(),
        Step::BusyLoop { ms: Some(ms) } => format!(
            "read _tw_u _tw_x </proc/uptime; _tw_end=$(( ${{_tw_u%.*}}${{_tw_u#*.}} + {cs} ))\n\
             while :; do read _tw_u _tw_x </proc/uptime; \
             [ $(( ${{_tw_u%.*}}${{_tw_u#*.}} )) -ge \"$_tw_end\" ] && break; done",
            cs = ms.div_ceil(10)
        ),
        Step::BackgroundChildHoldingStdout { sleep_ms } => format!("sleep {} &", secs(*sleep_ms)),
        Step::SetsidDoubleForkDaemon { sleep_ms } => format!(
            "setsid sh -c {}",
            sh_quote(&format!("(sleep {} &)", secs(*sleep_ms)))
        ),
        Step::EnvIDaemon { sleep_ms } => format!(
            "setsid env -i PATH=/usr/bin:/bin sh -c {}",
            sh_quote(&format!(
                "sleep {} </dev/null >/dev/null 2>&1 &",
                secs(*sleep_ms)
            ))
        ),
        Step::EnvIGrandchild { sleep_ms } => format!(
            "sh -c {} &",
            sh_quote(&env_i_sleep(*sleep_ms))
        ),
        // dash has no job control without a tty, so setpgid comes from perl
        // (perl-base is essential on Debian); the subshell exits at once, so
        // the sleep is orphaned.
        Step::SetpgidOrphan { sleep_ms } => format!(
            "(perl -e 'setpgrp(0, 0); exec @ARGV' sleep {} &)",
            secs(*sleep_ms)
        ),
        Step::SetpgidEnvIOrphan { sleep_ms } => format!("({} &)", env_i_setpgid(*sleep_ms)),
        Step::SetExitTrap { text } => {
            format!("trap {} EXIT", sh_quote(&sh_print(text, Stream::Stdout)))
        }
        Step::ForkBurst { count } => format!(
            "_tw_i=0; while [ \"$_tw_i\" -lt {count} ]; do true & _tw_i=$((_tw_i + 1)); done"
        ),
        Step::WriteSideEffect { name } => {
            format!("echo x >>{}", sh_quote(&format!("{dir}/{name}")))
        }
        Step::SetVar { name, value } => format!("export {name}={}", sh_quote(value)),
        Step::ChangeDir { path } => format!("cd {}", sh_quote(path)),
        Step::IgnoreInt => "trap '' INT".to_owned(),
        Step::SetName { name, value } => format!("{name}={}", sh_quote(value)),
        Step::PrintName { name } => format!("printf '%s\\n' \"${{{name}?}}\""),
        Step::State { change } => shell_change(change),
        Step::Show { probe } => shell_probe(probe, dir),
        Step::Fail => "false".to_owned(),
        Step::Expand { name } => format!(": \"${name}\""),
        Step::ToolCall { name, args } => format!(
            "TETHER_CALL_TIMEOUT={} tether-call {name} '{args}'",
            call_timeout_text(name)
        ),
        Step::SizedToolCall { name_len, args_len } => {
            let (name, _) = sized_call(*name_len, *args_len);
            format!(
                "{{ printf '\"'; head -c {} /dev/zero | tr '\\0' x; printf '\"'; }} | TETHER_CALL_TIMEOUT={TOOL_CALL_TIMEOUT_S} tether-call {name} -",
                args_len.saturating_sub(2)
            )
        }
        Step::LeftoverToolCall {
            after_ms,
            name,
            args,
        } => format!(
            "(sleep {}; TETHER_CALL_TIMEOUT={} tether-call {name} '{args}') </dev/null >/dev/null 2>&1 &",
            secs(*after_ms),
            call_timeout_text(name)
        ),
        Step::LatePrint {
            after_ms,
            tag,
            lines,
        } => format!("({}) &", late_shell(*after_ms, tag, *lines)),
    }
}

/// `printf '%s\n' TEXT`: prints one line.
fn print_line(text: &str) -> String {
    format!("printf '%s\\n' {}", sh_quote(text))
}

fn shell_change(change: &StateChange) -> String {
    match change {
        StateChange::Unset { name } => format!("unset -v {name}"),
        StateChange::Array { name, values } => {
            let items: Vec<String> = values.iter().map(|v| sh_quote(v)).collect();
            format!("{name}=({})", items.join(" "))
        }
        StateChange::Function { name, text } => format!("{name}() {{ {}; }}", print_line(text)),
        StateChange::Alias { name, text } => {
            format!("alias {name}={}", sh_quote(&print_line(text)))
        }
        StateChange::Option { option, on } => {
            format!("set {}{}", if *on { '-' } else { '+' }, option.letter())
        }
        StateChange::Umask { mask } => format!("umask {mask:04o}"),
        StateChange::Pushd { path } => format!("pushd {} >/dev/null", sh_quote(path)),
        StateChange::Trap { signal, text } => {
            format!("trap {} {}", sh_quote(&print_line(text)), signal.name())
        }
        StateChange::Positional { values } => {
            let mut line = "set --".to_owned();
            for v in values {
                line.push(' ');
                line.push_str(&sh_quote(v));
            }
            line
        }
    }
}

/// A probe in real shell: builtins where both shells have them; `sh -c`
/// for what a child sees; `trap`'s listing goes through a file (dash lists
/// a subshell's own traps, not the shell's).
fn shell_probe(probe: &Probe, dir: &str) -> String {
    let either = |test: String, yes: String, no: String| {
        format!("if {test}; then {yes}; else {}; fi", print_line(&no))
    };
    match probe {
        Probe::Var { name } => either(
            format!("[ -n \"${{{name}+x}}\" ]"),
            format!("printf '{name}=%s\\n' \"${name}\""),
            format!("{name} unset"),
        ),
        Probe::Exported { name } => either(
            format!("sh -c {}", sh_quote(&format!("[ -n \"${{{name}+x}}\" ]"))),
            print_line(&format!("{name} exported")),
            format!("{name} not exported"),
        ),
        Probe::Array { name } => either(
            format!("[ -n \"${{{name}+x}}\" ]"),
            format!("printf '{name}=('; printf '[%s]' \"${{{name}[@]}}\"; printf ')\\n'"),
            format!("{name} unset"),
        ),
        Probe::Function { name } => either(
            format!("command -v {name} >/dev/null 2>&1"),
            name.clone(),
            format!("function {name} undefined"),
        ),
        Probe::Alias { name } => either(
            format!("alias {name} >/dev/null 2>&1"),
            format!("eval {name}"),
            format!("alias {name} undefined"),
        ),
        Probe::Option { option } => format!(
            "case $- in *{}*) {} ;; *) {} ;; esac",
            option.letter(),
            print_line(&format!("{} on", option.name())),
            print_line(&format!("{} off", option.name())),
        ),
        Probe::Umask => "umask".to_owned(),
        Probe::Cwd => "pwd".to_owned(),
        Probe::Dirs => "dirs -l -p".to_owned(),
        Probe::Positional => {
            "printf 'args %s' \"$#\"; if [ $# -gt 0 ]; then printf ' [%s]' \"$@\"; fi; printf '\\n'"
                .to_owned()
        }
        Probe::Trap { signal } => {
            let file = sh_quote(&format!("{dir}/tw_traps"));
            let sig = signal.name();
            format!(
                "trap >|{file}; {}",
                either(
                    format!("grep -q '{sig}$' {file}"),
                    print_line(&format!("trap {sig} set")),
                    format!("trap {sig} unset"),
                )
            )
        }
    }
}

/// `tether.call(NAME, ARGS)` (both Python expressions) and its result
/// printed, or its error on stderr: a tool call step in a Python cell.
fn py_tool_call(label: &str, name: &str, args: &str) -> Vec<String> {
    vec![
        format!(
            "_tw_os.environ['TETHER_CALL_TIMEOUT'] = '{}'",
            call_timeout_text(label)
        ),
        "try:".to_owned(),
        format!("    _tw_r = __import__('tether').call({name}, {args})"),
        "    _tw_sys.stdout.write((_tw_r if isinstance(_tw_r, str) else __import__('json').dumps(_tw_r, separators=(',', ':'))) + '\\n'); _tw_sys.stdout.flush()".to_owned(),
        "except Exception as _tw_e:".to_owned(),
        format!("    _tw_sys.stderr.write('tether-call {label}: ' + str(_tw_e) + '\\n'); _tw_sys.stderr.flush()"),
    ]
}

/// A Python string literal for `s` (JSON string syntax is valid Python).
fn py_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "''".to_owned())
}

/// Real Python code doing what `workload` does, for a persistent
/// interpreter: process steps go through `subprocess`, signals through
/// `signal`, `Exit` raises `SystemExit`.
pub fn render_python(workload: &Workload, side_effect_dir: &str) -> String {
    let mut out = String::from(
        "import os as _tw_os, signal as _tw_signal, subprocess as _tw_sp, sys as _tw_sys, time as _tw_time\n",
    );
    for step in &workload.steps {
        out.push_str(&python_step(step, side_effect_dir, 0));
    }
    out
}

fn python_step(step: &Step, dir: &str, indent: usize) -> String {
    let pad = "    ".repeat(indent);
    let lines: Vec<String> = match step {
        Step::Print { stream, text } => {
            let s = match stream {
                Stream::Stdout => "stdout",
                Stream::Stderr => "stderr",
            };
            vec![format!(
                "_tw_sys.{s}.write({}); _tw_sys.{s}.flush()",
                py_str(text)
            )]
        }
        Step::Sleep { ms } => vec![format!("_tw_time.sleep({})", secs(*ms))],
        Step::Exit { code } => vec![format!("raise SystemExit({code})")],
        Step::IgnoreTerm => {
            vec!["_tw_signal.signal(_tw_signal.SIGTERM, _tw_signal.SIG_IGN)".to_owned()]
        }
        Step::TrapTerm { then } => {
            let mut v = vec!["def _tw_on_term(_signum, _frame):".to_owned()];
            v.push("    pass".to_owned());
            for s in then {
                v.push(python_step(s, dir, 1).trim_end().to_owned());
            }
            v.push("_tw_signal.signal(_tw_signal.SIGTERM, _tw_on_term)".to_owned());
            v
        }
        Step::BusyLoop { ms: None } => vec!["while True:".to_owned(), "    pass".to_owned()],
        Step::BusyLoop { ms: Some(ms) } => vec![
            format!("_tw_end = _tw_time.monotonic() + {}", secs(*ms)),
            "while _tw_time.monotonic() < _tw_end:".to_owned(),
            "    pass".to_owned(),
        ],
        Step::BackgroundChildHoldingStdout { sleep_ms } => {
            vec![format!("_tw_bg = _tw_sp.Popen(['sleep', '{}'])", secs(*sleep_ms))]
        }
        // Assigned: a call's value as a cell's last statement would be
        // echoed, as the kernel echoes a last expression (live drawn seed
        // 1016 printed "0").
        Step::SetsidDoubleForkDaemon { sleep_ms } => vec![format!(
            "_tw_rc = _tw_sp.call(['setsid', 'sh', '-c', '(sleep {} &)'])",
            secs(*sleep_ms)
        )],
        Step::EnvIDaemon { sleep_ms } => vec![format!(
            "_tw_rc = _tw_sp.call(['setsid', 'env', '-i', 'PATH=/usr/bin:/bin', 'sh', '-c', 'sleep {} </dev/null >/dev/null 2>&1 &'])",
            secs(*sleep_ms)
        )],
        Step::EnvIGrandchild { sleep_ms } => vec![format!(
            "_tw_bg = _tw_sp.Popen(['sh', '-c', {}])",
            py_str(&env_i_sleep(*sleep_ms))
        )],
        Step::SetpgidOrphan { sleep_ms } => vec![format!(
            "_tw_rc = _tw_sp.call(['sh', '-c', \"(perl -e 'setpgrp(0, 0); exec @ARGV' sleep {} &)\"])",
            secs(*sleep_ms)
        )],
        Step::SetpgidEnvIOrphan { sleep_ms } => vec![format!(
            "_tw_rc = _tw_sp.call(['sh', '-c', {}])",
            py_str(&format!("({} &)", env_i_setpgid(*sleep_ms)))
        )],
        Step::SetExitTrap { text } => vec![
            "import atexit as _tw_atexit".to_owned(),
            format!(
                "_tw_atexit.register(lambda: (_tw_sys.stdout.write({}), _tw_sys.stdout.flush()))",
                py_str(text)
            ),
        ],
        Step::ForkBurst { count } => vec![
            format!("for _tw_i in range({count}):"),
            "    _tw_sp.Popen(['true'])".to_owned(),
        ],
        // The line is the interpreter's pid: a live observer learns from it
        // which interpreter ran the cell, even one that was born and died
        // between two of its looks at the process table.
        Step::WriteSideEffect { name } => vec![format!(
            "with open({}, 'a') as _tw_f: _tw_f.write('%d\\n' % _tw_os.getpid())",
            py_str(&format!("{dir}/{name}"))
        )],
        Step::SetVar { name, value } => {
            vec![format!("_tw_os.environ[{}] = {}", py_str(name), py_str(value))]
        }
        Step::ChangeDir { path } => vec![format!("_tw_os.chdir({})", py_str(path))],
        Step::IgnoreInt => {
            vec!["_tw_signal.signal(_tw_signal.SIGINT, _tw_signal.SIG_IGN)".to_owned()]
        }
        Step::SetName { name, value } => vec![format!("{name} = {}", py_str(value))],
        Step::PrintName { name } => vec![format!(
            "_tw_sys.stdout.write(str({name}) + \"\\n\"); _tw_sys.stdout.flush()"
        )],
        Step::State { .. } | Step::Show { .. } | Step::Fail | Step::Expand { .. } => {
            vec!["pass  # a shell kernel's step".to_owned()]
        }
        Step::ToolCall { name, args } => py_tool_call(
            name,
            &py_str(name),
            &format!("__import__('json').loads({})", py_str(args)),
        ),
        Step::SizedToolCall { name_len, args_len } => py_tool_call(
            &sized_call(*name_len, 0).0,
            &format!("'n' * {name_len}"),
            &format!("'x' * {}", args_len.saturating_sub(2)),
        ),
        Step::LeftoverToolCall {
            after_ms,
            name,
            args,
        } => vec![format!(
            "_tw_sp.Popen(['sh', '-c', {}], stdin=_tw_sp.DEVNULL, stdout=_tw_sp.DEVNULL, stderr=_tw_sp.DEVNULL)",
            py_str(&format!(
                "sleep {}; TETHER_CALL_TIMEOUT={} tether-call {name} '{args}'",
                secs(*after_ms),
                call_timeout_text(name)
            ))
        )],
        // A subprocess on the interpreter's stdout: between cells that is
        // the background log; while a later cell runs, its output.
        Step::LatePrint {
            after_ms,
            tag,
            lines,
        } => vec![format!(
            "_tw_sp.Popen(['sh', '-c', {}])",
            py_str(&late_shell(*after_ms, tag, *lines))
        )],
    };
    let mut out = String::new();
    for line in lines {
        for sub in line.split('\n') {
            out.push_str(&pad);
            out.push_str(sub);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests;
