//! The shell kernel's state, modelled: what a cell's shell holds
//! ([`ShellState`]), what the steps of the workload language do to it
//! ([`StateChange`]) and how a later cell reads it back ([`Probe`]), and
//! what the kernel's save and restore keep between cells under bash and
//! under dash ([`Flavor`]), through `exit N`, `set -e`, `set -u` and a
//! cancel's TERM.
//!
//! It is the one statement of those rules on the harness's side: the
//! simulated shell (`tether-sim`'s interpreter) keeps its state in a
//! [`ShellState`] and asks this module what each end of a cell saves, and
//! [`run_cells`] plays a sequence of cells through the same rules without
//! any OS, which is what the differential test (live-e2e
//! `shell_model_differential`) holds against real bash and dash kernels
//! over the [`corpus`]. The real wrappers are `core/src/agent/shell/*.sh`.

use crate::workload::{Step, Workload};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use tether_core::protocol::{CellOutcome, Stream};

/// Which shell runs the cells (the sandbox has bash, or only `/bin/sh`,
/// modelled on dash).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Flavor {
    /// bash: everything an interactive shell keeps.
    Bash,
    /// dash: what POSIX sh can list.
    Dash,
}

impl Flavor {
    /// The exit status of a shell that an unset variable stopped
    /// (`set -u`, `${NAME?}`): bash's non-interactive shell exits 127,
    /// dash 2.
    pub fn unbound_status(self) -> u8 {
        match self {
            Flavor::Bash => 127,
            Flavor::Dash => 2,
        }
    }

    /// Does the save keep functions, aliases, arrays and the directory
    /// stack? dash can list none of them (and has no arrays or `pushd`).
    pub fn keeps_functions(self) -> bool {
        self == Flavor::Bash
    }
}

/// A `set` flag that both shells have and both wrappers keep.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShellOption {
    /// `set -e`.
    Errexit,
    /// `set -u`.
    Nounset,
    /// `set -f`.
    Noglob,
    /// `set -a`.
    Allexport,
    /// `set -C`.
    Noclobber,
}

impl ShellOption {
    /// Its letter in `set -X` and `$-`.
    pub fn letter(self) -> char {
        match self {
            ShellOption::Errexit => 'e',
            ShellOption::Nounset => 'u',
            ShellOption::Noglob => 'f',
            ShellOption::Allexport => 'a',
            ShellOption::Noclobber => 'C',
        }
    }

    /// Its name in `set -o`.
    pub fn name(self) -> &'static str {
        match self {
            ShellOption::Errexit => "errexit",
            ShellOption::Nounset => "nounset",
            ShellOption::Noglob => "noglob",
            ShellOption::Allexport => "allexport",
            ShellOption::Noclobber => "noclobber",
        }
    }
}

/// A signal a cell may trap that is neither EXIT nor TERM (those two are
/// the wrapper's; see `core/src/agent/shell.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum TrapSignal {
    /// SIGHUP.
    Hup,
    /// SIGUSR1.
    Usr1,
    /// SIGUSR2.
    Usr2,
}

impl TrapSignal {
    /// Its name without `SIG`.
    pub fn name(self) -> &'static str {
        match self {
            TrapSignal::Hup => "HUP",
            TrapSignal::Usr1 => "USR1",
            TrapSignal::Usr2 => "USR2",
        }
    }
}

/// A change a cell makes to its shell's state (besides `SetVar`,
/// `SetName` and `ChangeDir`, which are steps of their own).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "change")]
pub enum StateChange {
    /// `unset -v NAME`: the variable goes, exported or not.
    Unset {
        /// The variable.
        name: String,
    },
    /// `NAME=(V1 V2 …)`: an indexed array (bash only).
    Array {
        /// The variable.
        name: String,
        /// Its elements.
        values: Vec<String>,
    },
    /// `NAME() { printf '%s\n' TEXT; }`.
    Function {
        /// The function.
        name: String,
        /// The line it prints.
        text: String,
    },
    /// `alias NAME='printf '%s\n' TEXT'`.
    Alias {
        /// The alias.
        name: String,
        /// The line it prints.
        text: String,
    },
    /// `set -X` (`on`) or `set +X`.
    Option {
        /// The flag.
        option: ShellOption,
        /// On or off.
        on: bool,
    },
    /// `umask MASK` (octal, at most 0777).
    Umask {
        /// The mask.
        mask: u32,
    },
    /// `pushd PATH >/dev/null` (bash only).
    Pushd {
        /// An absolute directory.
        path: String,
    },
    /// `trap 'printf …' SIGNAL`.
    Trap {
        /// The signal.
        signal: TrapSignal,
        /// What the handler prints.
        text: String,
    },
    /// `set -- V1 V2 …` at the top level: the positional parameters.
    Positional {
        /// `$1`, `$2`, … (none: `set --`).
        values: Vec<String>,
    },
}

/// One piece of the shell's state, printed as one line by a later cell.
/// A probe never fails and never changes the state (so it reads the same
/// under `set -e` and `set -u`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "probe")]
pub enum Probe {
    /// `NAME=VALUE` or `NAME unset`.
    Var {
        /// The variable.
        name: String,
    },
    /// `NAME exported` or `NAME not exported` (what a child sees).
    Exported {
        /// The variable.
        name: String,
    },
    /// `NAME=([V1][V2]…)` or `NAME unset` (bash only).
    Array {
        /// The variable.
        name: String,
    },
    /// The function's line, or `function NAME undefined`.
    Function {
        /// The function.
        name: String,
    },
    /// The alias's line, or `alias NAME undefined`.
    Alias {
        /// The alias.
        name: String,
    },
    /// `NAME on` or `NAME off` (the option's `set -o` name).
    Option {
        /// The flag.
        option: ShellOption,
    },
    /// The umask, four octal digits (`0027`).
    Umask,
    /// The working directory.
    Cwd,
    /// The directory stack, one a line, the working directory first
    /// (bash only: `dirs -l -p`).
    Dirs,
    /// `trap SIG set` or `trap SIG unset`.
    Trap {
        /// The signal.
        signal: TrapSignal,
    },
    /// `args N [V1] [V2] …`: `$#` and the positional parameters.
    Positional,
}

/// A variable's value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Value {
    /// A string.
    Str(String),
    /// An indexed array.
    Array(Vec<String>),
}

/// What a shell holds that a later cell can see.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShellState {
    /// Every variable of the user's (the cell marker never is one).
    pub vars: BTreeMap<String, Value>,
    /// The exported ones among them.
    pub exported: BTreeSet<String>,
    /// Function name → the line it prints.
    pub functions: BTreeMap<String, String>,
    /// Alias name → the line it prints.
    pub aliases: BTreeMap<String, String>,
    /// The `set` flags that are on.
    pub options: BTreeSet<ShellOption>,
    /// The umask, once a cell set it (before: the daemon's, not modelled).
    pub umask: Option<u32>,
    /// The working directory, once known.
    pub cwd: Option<String>,
    /// The directory stack below the working directory, top first.
    pub dirs: Vec<String>,
    /// Traps other than EXIT and TERM: signal → what the handler prints.
    pub traps: BTreeMap<TrapSignal, String>,
    /// The positional parameters (`"$@"`), kept by both shells.
    #[serde(default)]
    pub positional: Vec<String>,
}

/// The last line of a complete simulated snapshot (as the real wrappers
/// end theirs: `tether_core::agent::shell::snapshot_complete`).
const SNAPSHOT_END: &str = "\n#tether-end\n";

impl ShellState {
    /// A shell that inherited `env` (every variable exported).
    pub fn from_env<'a>(env: impl IntoIterator<Item = (&'a String, &'a String)>) -> ShellState {
        let mut state = ShellState::default();
        for (k, v) in env {
            state.vars.insert(k.clone(), Value::Str(v.clone()));
            state.exported.insert(k.clone());
        }
        state
    }

    /// What children inherit: the exported string variables.
    pub fn environment(&self) -> BTreeMap<String, String> {
        self.exported
            .iter()
            .filter_map(|k| match self.vars.get(k) {
                Some(Value::Str(v)) => Some((k.clone(), v.clone())),
                _ => None,
            })
            .collect()
    }

    /// A string variable's value.
    pub fn get(&self, name: &str) -> Option<&str> {
        match self.vars.get(name) {
            Some(Value::Str(v)) => Some(v),
            Some(Value::Array(a)) => a.first().map(String::as_str),
            None => None,
        }
    }

    /// Is `option` on?
    pub fn has(&self, option: ShellOption) -> bool {
        self.options.contains(&option)
    }

    /// `NAME=VALUE` (`export`ed when `export` or under `set -a`).
    pub fn assign(&mut self, name: &str, value: &str, export: bool) {
        self.vars
            .insert(name.to_owned(), Value::Str(value.to_owned()));
        if export || self.has(ShellOption::Allexport) {
            self.exported.insert(name.to_owned());
        }
    }

    /// `cd PATH` to a directory that exists (absolute, normalised).
    pub fn chdir(&mut self, dir: &str) {
        self.cwd = Some(dir.to_owned());
    }

    /// Applies `change` (a `Pushd` directory is the caller's to check:
    /// normalised, and there).
    pub fn apply(&mut self, change: &StateChange) {
        match change {
            StateChange::Unset { name } => {
                self.vars.remove(name);
                self.exported.remove(name);
            }
            StateChange::Array { name, values } => {
                self.vars.insert(name.clone(), Value::Array(values.clone()));
            }
            StateChange::Function { name, text } => {
                self.functions.insert(name.clone(), text.clone());
            }
            StateChange::Alias { name, text } => {
                self.aliases.insert(name.clone(), text.clone());
            }
            StateChange::Option { option, on: true } => {
                self.options.insert(*option);
            }
            StateChange::Option { option, on: false } => {
                self.options.remove(option);
            }
            StateChange::Umask { mask } => self.umask = Some(*mask),
            StateChange::Pushd { path } => {
                if let Some(cwd) = self.cwd.replace(path.clone()) {
                    self.dirs.insert(0, cwd);
                }
            }
            StateChange::Trap { signal, text } => {
                self.traps.insert(*signal, text.clone());
            }
            StateChange::Positional { values } => self.positional = values.clone(),
        }
    }

    /// What `probe` prints.
    pub fn show(&self, probe: &Probe) -> String {
        match probe {
            // An array shows as its first element (`$NAME`).
            Probe::Var { name } => match self.get(name) {
                Some(v) => format!("{name}={v}\n"),
                None => format!("{name} unset\n"),
            },
            Probe::Exported { name } => {
                if self.environment().contains_key(name) {
                    format!("{name} exported\n")
                } else {
                    format!("{name} not exported\n")
                }
            }
            Probe::Array { name } => match self.vars.get(name) {
                Some(Value::Array(a)) if !a.is_empty() => {
                    let items: String = a.iter().map(|v| format!("[{v}]")).collect();
                    format!("{name}=({items})\n")
                }
                Some(Value::Str(v)) => format!("{name}=([{v}])\n"),
                _ => format!("{name} unset\n"),
            },
            Probe::Function { name } => match self.functions.get(name) {
                Some(text) => format!("{text}\n"),
                None => format!("function {name} undefined\n"),
            },
            Probe::Alias { name } => match self.aliases.get(name) {
                Some(text) => format!("{text}\n"),
                None => format!("alias {name} undefined\n"),
            },
            Probe::Option { option } => {
                let on = if self.has(*option) { "on" } else { "off" };
                format!("{} {on}\n", option.name())
            }
            Probe::Umask => format!("{:04o}\n", self.umask.unwrap_or(0o022)),
            Probe::Cwd => format!("{}\n", self.cwd.as_deref().unwrap_or("/")),
            Probe::Dirs => {
                let mut out = format!("{}\n", self.cwd.as_deref().unwrap_or("/"));
                for d in &self.dirs {
                    out.push_str(d);
                    out.push('\n');
                }
                out
            }
            Probe::Trap { signal } => {
                let set = if self.traps.contains_key(signal) {
                    "set"
                } else {
                    "unset"
                };
                format!("trap {} {set}\n", signal.name())
            }
            Probe::Positional => {
                let mut out = format!("args {}", self.positional.len());
                for v in &self.positional {
                    out.push_str(&format!(" [{v}]"));
                }
                out.push('\n');
                out
            }
        }
    }

    /// What the kernel's save keeps of this state under `flavor`: all of
    /// it under bash; under dash no functions, aliases, arrays or
    /// directory stack (dash cannot list them).
    pub fn saved(&self, flavor: Flavor) -> ShellState {
        let mut kept = self.clone();
        if !flavor.keeps_functions() {
            kept.functions.clear();
            kept.aliases.clear();
            kept.dirs.clear();
            kept.vars.retain(|_, v| matches!(v, Value::Str(_)));
        }
        kept
    }

    /// The state a cell's shell starts with: `inherited` (its
    /// environment, the marker excluded) and the kernel's snapshot.
    /// bash's restore replaces every variable (an `unset` persists);
    /// dash's assigns the saved ones over the inherited, so an inherited
    /// variable a cell unset comes back.
    pub fn restore(
        flavor: Flavor,
        inherited: &BTreeMap<String, String>,
        snapshot: Option<ShellState>,
    ) -> ShellState {
        let fresh = ShellState::from_env(inherited);
        let Some(saved) = snapshot else {
            return fresh;
        };
        match flavor {
            Flavor::Bash => saved,
            Flavor::Dash => {
                let mut state = saved;
                for (k, v) in fresh.vars {
                    if !state.vars.contains_key(&k) {
                        state.vars.insert(k.clone(), v);
                        state.exported.insert(k);
                    }
                }
                state
            }
        }
    }

    /// The snapshot file's bytes (the simulated wrapper's; complete with
    /// its last line).
    pub fn to_snapshot(&self) -> Vec<u8> {
        let mut text = serde_json::to_string(self).unwrap_or_default();
        text.push_str(SNAPSHOT_END);
        text.into_bytes()
    }

    /// Reads a snapshot [`ShellState::to_snapshot`] wrote; `None` when it
    /// is not one (incomplete, or another format).
    pub fn from_snapshot(bytes: &[u8]) -> Option<ShellState> {
        let text = std::str::from_utf8(bytes).ok()?;
        serde_json::from_str(text.strip_suffix(SNAPSHOT_END)?).ok()
    }
}

/// How a cell's shell ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CellEnd {
    /// The code ran to its end.
    Complete,
    /// It stopped early through the shell's exit path: `exit N`, a
    /// failure under `set -e`, an unset variable under `set -u`, the
    /// wrapper's TERM trap at a cancel.
    Early,
    /// It was killed (it ignored TERM until the KILL), or `exec` replaced
    /// it: no shell was left to save.
    Killed,
}

/// Does the state a cell reached become the kernel's? The wrapper saves
/// at the end of the code and from its EXIT trap; under dash a user's EXIT
/// trap replaced that trap, so an early end runs the user's instead of
/// the save (bash keeps the user's aside and always saves).
pub fn end_saves(flavor: Flavor, end: CellEnd, user_exit_trap: bool) -> bool {
    match end {
        CellEnd::Complete => true,
        CellEnd::Early => flavor == Flavor::Bash || !user_exit_trap,
        CellEnd::Killed => false,
    }
}

/// One cell of a differential case.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaseCell {
    /// What it does.
    pub workload: Workload,
    /// The test cancels it once it prints [`CANCEL_CUE`] (it must then
    /// spin in a busy loop).
    pub cancel: bool,
}

/// What a cancelled cell prints just before it spins: the test's cue.
pub const CANCEL_CUE: &str = "spinning\n";

/// A named sequence of cells whose later cells read back what earlier
/// ones did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Case {
    /// Its name.
    pub name: &'static str,
    /// Only bash has what it uses (arrays, `pushd`, functions and aliases
    /// that persist are still fine under dash: their loss is modelled).
    pub bash_only: bool,
    /// The cells, in order.
    pub cells: Vec<CaseCell>,
}

/// What one cell printed and how it resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CellResult {
    /// Its stdout.
    pub stdout: String,
    /// Its outcome.
    pub outcome: CellOutcome,
    /// The next cell starts from the previous state and says so (the
    /// agent's note on stderr).
    pub state_lost: bool,
}

/// A step [`run_cells`] does not model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unmodelled(pub Step);

/// One cell played through the model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Played {
    /// What it printed.
    pub stdout: String,
    /// How it resolved.
    pub outcome: CellOutcome,
    /// Does the state it reached become the kernel's ([`end_saves`])?
    pub saves: bool,
}

/// Plays one cell's `steps` on `state` (the state its shell restored),
/// which it leaves as the cell left it. A `cancel`led cell is cancelled
/// where it blocks (a busy loop, a sleep). Steps that only touch
/// processes print nothing and change no state: `lenient` skips them,
/// otherwise they are [`Unmodelled`].
pub fn play_cell(
    flavor: Flavor,
    state: &mut ShellState,
    steps: &[Step],
    cancel: bool,
    lenient: bool,
) -> Result<Played, Unmodelled> {
    let mut out = String::new();
    let mut status: u8 = 0;
    let mut user_exit_trap = false;
    let mut term_ignored = false;
    let mut end = None;
    for step in steps {
        // Every modelled command but `false` succeeds.
        status = 0;
        match step {
            Step::Print {
                stream: Stream::Stdout,
                text,
            } => out.push_str(text),
            Step::Print { .. } => {}
            Step::ToolCall { .. } | Step::SizedToolCall { .. } => {
                out.push_str(&crate::workload::tool_call_output(step).unwrap_or_default());
            }
            // Background processes: what they print later is not the cell's.
            Step::LeftoverToolCall { .. } | Step::LatePrint { .. } => {}
            Step::SetVar { name, value } => state.assign(name, value, true),
            Step::SetName { name, value } => state.assign(name, value, false),
            Step::ChangeDir { path } => state.chdir(path),
            Step::SetExitTrap { .. } => user_exit_trap = true,
            Step::IgnoreTerm => term_ignored = true,
            Step::State { change } => state.apply(change),
            Step::Show { probe } => out.push_str(&state.show(probe)),
            Step::Fail => {
                status = 1;
                if state.has(ShellOption::Errexit) {
                    end = Some((CellEnd::Early, CellOutcome::Exit { code: 1 }));
                }
            }
            Step::Expand { name } => {
                if state.get(name).is_none() && state.has(ShellOption::Nounset) {
                    let code = i32::from(flavor.unbound_status());
                    end = Some((CellEnd::Early, CellOutcome::Exit { code }));
                }
            }
            Step::PrintName { name } => match state.get(name) {
                Some(v) => {
                    out.push_str(v);
                    out.push('\n');
                }
                None => {
                    let code = i32::from(flavor.unbound_status());
                    end = Some((CellEnd::Early, CellOutcome::Exit { code }));
                }
            },
            Step::Exit { code } => {
                end = Some((
                    CellEnd::Early,
                    CellOutcome::Exit {
                        code: i32::from(*code),
                    },
                ))
            }
            Step::BusyLoop { ms: None } | Step::Sleep { .. } if cancel => {
                let how = if term_ignored {
                    CellEnd::Killed
                } else {
                    CellEnd::Early
                };
                end = Some((how, CellOutcome::Cancelled));
            }
            _ if lenient => {}
            other => return Err(Unmodelled(other.clone())),
        }
        if end.is_some() {
            break;
        }
    }
    let (how, outcome) = end.unwrap_or_else(|| {
        let outcome = match status {
            0 => CellOutcome::Ok,
            n => CellOutcome::Exit { code: i32::from(n) },
        };
        (CellEnd::Complete, outcome)
    });
    Ok(Played {
        stdout: out,
        outcome,
        saves: end_saves(flavor, how, user_exit_trap),
    })
}

/// Plays `cells` through the model, from a fresh kernel whose shell
/// inherits no variables the cells look at: what each prints and how it
/// resolves. Steps that touch processes (other than the busy loop a
/// cancelled cell spins in) are not modelled.
pub fn run_cells(flavor: Flavor, cells: &[CaseCell]) -> Result<Vec<CellResult>, Unmodelled> {
    let mut kernel: Option<ShellState> = None;
    let mut results = Vec::new();
    let mut lost = false;
    for cell in cells {
        let mut state = ShellState::restore(flavor, &BTreeMap::new(), kernel.clone());
        let played = play_cell(flavor, &mut state, &cell.workload.steps, cell.cancel, false)?;
        results.push(CellResult {
            stdout: played.stdout,
            outcome: played.outcome,
            state_lost: lost,
        });
        lost = !played.saves;
        if played.saves {
            kernel = Some(state.saved(flavor));
        }
    }
    Ok(results)
}

/// The directories the corpus changes to (they exist everywhere).
pub const CORPUS_DIRS: [&str; 3] = ["/tmp", "/usr", "/"];

fn print(text: &str) -> Step {
    Step::Print {
        stream: Stream::Stdout,
        text: text.into(),
    }
}

fn change(change: StateChange) -> Step {
    Step::State { change }
}

fn show(probe: Probe) -> Step {
    Step::Show { probe }
}

fn var(name: &str) -> Probe {
    Probe::Var { name: name.into() }
}

fn cell(steps: Vec<Step>) -> CaseCell {
    CaseCell {
        workload: Workload::new(steps),
        cancel: false,
    }
}

fn cancelled(mut steps: Vec<Step>) -> CaseCell {
    steps.push(print(CANCEL_CUE));
    steps.push(Step::BusyLoop { ms: None });
    CaseCell {
        workload: Workload::new(steps),
        cancel: true,
    }
}

fn set(name: &str, value: &str) -> Step {
    Step::SetName {
        name: name.into(),
        value: value.into(),
    }
}

fn export(name: &str, value: &str) -> Step {
    Step::SetVar {
        name: name.into(),
        value: value.into(),
    }
}

fn option(option: ShellOption, on: bool) -> Step {
    change(StateChange::Option { option, on })
}

fn function(name: &str, text: &str) -> Step {
    change(StateChange::Function {
        name: name.into(),
        text: text.into(),
    })
}

fn alias(name: &str, text: &str) -> Step {
    change(StateChange::Alias {
        name: name.into(),
        text: text.into(),
    })
}

fn positional(values: &[&str]) -> Step {
    change(StateChange::Positional {
        values: values.iter().map(|v| (*v).to_owned()).collect(),
    })
}

fn trap(signal: TrapSignal, text: &str) -> Step {
    change(StateChange::Trap {
        signal,
        text: text.into(),
    })
}

/// The probes a case ends with: everything the corpus's cells touch.
fn read_all(bash: bool) -> Vec<Step> {
    let mut steps = vec![
        show(var("tw_plain")),
        show(var("tw_exp")),
        show(Probe::Exported {
            name: "tw_exp".into(),
        }),
        show(Probe::Exported {
            name: "tw_plain".into(),
        }),
        show(Probe::Exported {
            name: "tw_late".into(),
        }),
        show(var("tw_odd")),
        show(var("tw_late")),
        show(Probe::Function {
            name: "tw_greet".into(),
        }),
        show(Probe::Alias {
            name: "tw_ll".into(),
        }),
        show(Probe::Option {
            option: ShellOption::Noglob,
        }),
        show(Probe::Option {
            option: ShellOption::Allexport,
        }),
        show(Probe::Option {
            option: ShellOption::Noclobber,
        }),
        show(Probe::Umask),
        show(Probe::Cwd),
        show(Probe::Trap {
            signal: TrapSignal::Usr1,
        }),
        show(Probe::Trap {
            signal: TrapSignal::Hup,
        }),
        show(Probe::Positional),
    ];
    if bash {
        steps.push(show(Probe::Array {
            name: "tw_arr".into(),
        }));
        steps.push(show(Probe::Dirs));
    }
    steps
}

/// State-changing snippets, each followed by cells that read back what a
/// later cell sees: variables exported or not, values with newlines and
/// quotes, arrays, functions, aliases, `set` flags, umask, `cd`/`pushd`,
/// traps other than EXIT, then the ends that must keep the state reached:
/// `exit N`, a `set -e` failure, a `set -u` failure, a cancel; and the
/// ones that may not (a user's EXIT trap under dash, a shell that ignored
/// TERM until the KILL).
pub fn corpus() -> Vec<Case> {
    use ShellOption::*;
    let everything = |bash: bool| {
        let mut steps = vec![
            set("tw_plain", "plain value"),
            export("tw_exp", "exported value"),
            set("tw_odd", "it's \"quoted\"\nline two $HOME `x` \\ %s"),
            function("tw_greet", "hello from a function"),
            alias("tw_ll", "hello from an alias"),
            option(Noglob, true),
            option(Allexport, true),
            set("tw_late", "exported by set -a"),
            option(Allexport, false),
            option(Noclobber, true),
            change(StateChange::Umask { mask: 0o027 }),
            Step::ChangeDir {
                path: "/usr".into(),
            },
            trap(TrapSignal::Usr1, "usr1 fired"),
            trap(TrapSignal::Hup, "hup fired"),
            positional(&[
                "one",
                "two words",
                "",
                "-x",
                "it's \"quoted\"\nline two $1 \\",
                "6",
                "7",
                "8",
                "9",
                "ten",
                "eleven",
            ]),
        ];
        if bash {
            steps.push(change(StateChange::Array {
                name: "tw_arr".into(),
                values: vec!["one".into(), "two words".into(), "".into()],
            }));
            steps.push(change(StateChange::Pushd {
                path: "/tmp".into(),
            }));
        }
        steps
    };
    let undo = vec![
        change(StateChange::Unset {
            name: "tw_plain".into(),
        }),
        option(Noglob, false),
        option(Noclobber, false),
        Step::ChangeDir { path: "/".into() },
        positional(&[]),
    ];
    let mut cases = Vec::new();
    for bash in [true, false] {
        let suffix = |s: &'static str, d: &'static str| if bash { s } else { d };
        let mut all = everything(bash);
        all.extend(read_all(bash));
        cases.push(Case {
            name: suffix("every_kind_bash", "every_kind_posix"),
            bash_only: bash,
            cells: vec![
                cell(all.clone()),
                cell(read_all(bash)),
                cell([undo.clone(), read_all(bash)].concat()),
                cell(read_all(bash)),
            ],
        });
        let mut exit = everything(bash);
        exit.push(Step::Exit { code: 3 });
        exit.push(set("tw_never", "not reached"));
        cases.push(Case {
            name: suffix("exit_keeps_bash", "exit_keeps_posix"),
            bash_only: bash,
            cells: vec![cell(exit), cell(read_all(bash))],
        });
        let mut cancel = everything(bash);
        cancel.insert(0, print("start\n"));
        cases.push(Case {
            name: suffix("cancel_keeps_bash", "cancel_keeps_posix"),
            bash_only: bash,
            cells: vec![cancelled(cancel), cell(read_all(bash))],
        });
    }
    cases.extend([
        Case {
            name: "errexit",
            bash_only: false,
            cells: vec![
                cell(vec![option(Errexit, true), set("tw_plain", "before")]),
                cell(vec![
                    show(Probe::Option { option: Errexit }),
                    set("tw_late", "set before the failure"),
                    positional(&["set before", "the failure"]),
                    Step::Fail,
                    set("tw_plain", "not reached"),
                    positional(&["not reached"]),
                ]),
                cell(vec![
                    show(var("tw_plain")),
                    show(var("tw_late")),
                    show(Probe::Positional),
                    show(Probe::Option { option: Errexit }),
                    option(Errexit, false),
                    Step::Fail,
                    print("a failure no longer ends the cell\n"),
                ]),
                cell(vec![show(Probe::Option { option: Errexit }), Step::Fail]),
            ],
        },
        Case {
            name: "nounset",
            bash_only: false,
            cells: vec![
                cell(vec![option(Nounset, true), show(Probe::Positional)]),
                cell(vec![
                    set("tw_plain", "set before the failure"),
                    positional(&["set before the failure"]),
                    Step::Expand {
                        name: "tw_plain".into(),
                    },
                    Step::Expand {
                        name: "tw_missing".into(),
                    },
                    set("tw_late", "not reached"),
                ]),
                cell(vec![
                    show(var("tw_plain")),
                    show(var("tw_late")),
                    show(Probe::Positional),
                    show(Probe::Option { option: Nounset }),
                ]),
                cell(vec![Step::PrintName {
                    name: "tw_missing".into(),
                }]),
            ],
        },
        Case {
            name: "unset_and_reexport",
            bash_only: false,
            cells: vec![
                cell(vec![export("tw_exp", "one"), set("tw_plain", "two")]),
                cell(vec![
                    change(StateChange::Unset {
                        name: "tw_exp".into(),
                    }),
                    export("tw_plain", "two, now exported"),
                ]),
                cell(vec![
                    show(var("tw_exp")),
                    show(Probe::Exported {
                        name: "tw_exp".into(),
                    }),
                    show(var("tw_plain")),
                    show(Probe::Exported {
                        name: "tw_plain".into(),
                    }),
                ]),
            ],
        },
        Case {
            name: "user_exit_trap_then_exit",
            bash_only: false,
            cells: vec![
                cell(vec![set("tw_plain", "first")]),
                cell(vec![
                    Step::SetExitTrap {
                        text: String::new(),
                    },
                    set("tw_plain", "second"),
                    Step::Exit { code: 4 },
                ]),
                cell(vec![show(var("tw_plain"))]),
            ],
        },
        Case {
            name: "positional_parameters",
            bash_only: false,
            cells: vec![
                cell(vec![show(Probe::Positional), positional(&["a", "b c"])]),
                cell(vec![
                    show(Probe::Positional),
                    positional(&[]),
                    show(Probe::Positional),
                ]),
                cell(vec![show(Probe::Positional), positional(&["x"])]),
                cell(vec![
                    Step::SetExitTrap {
                        text: String::new(),
                    },
                    positional(&["with a user's EXIT trap"]),
                    Step::Exit { code: 5 },
                ]),
                cell(vec![show(Probe::Positional)]),
            ],
        },
        Case {
            name: "cancel_of_a_shell_that_ignores_term",
            bash_only: false,
            cells: vec![
                cell(vec![set("tw_plain", "first")]),
                cancelled(vec![Step::IgnoreTerm, set("tw_plain", "second")]),
                cell(vec![show(var("tw_plain"))]),
            ],
        },
    ]);
    cases
}

#[cfg(test)]
mod tests;
