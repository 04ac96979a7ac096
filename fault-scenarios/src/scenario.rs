//! The named scenarios the explorer runs: each is a client script (cells
//! with their workloads, cancels, shutdown), the faults it always carries,
//! the fault space its seeds draw from, and what a fault-free run must show.
//!
//! Every scripted cell starts by writing a side-effect line named after the
//! cell, so the oracle can count how many times it really ran.

use crate::faults::{CancelPoint, Family, Fault, FaultKind, FaultSchedule, FaultSpace, OpTarget};
use crate::shell_model::{
    play_cell, Flavor, Probe, ShellOption, ShellState, StateChange, TrapSignal,
};
use crate::swarm::World;
use crate::workload::{Step, Workload};
use std::collections::BTreeMap;
use tether_core::protocol::{CellOutcome, Lang, Stream};

/// One scripted cell.
#[derive(Clone, PartialEq, Eq)]
pub struct CellSpec {
    /// Unique in the scenario; also the cell's side-effect file name.
    pub label: String,
    /// What the cell does (a side-effect step is put first).
    pub workload: Workload,
    /// The cell's timeout, if any.
    pub timeout_ms: Option<u64>,
    /// The script cancels the cell this long after submitting it.
    pub cancel_after_ms: Option<u64>,
    /// What a fault-free run must resolve it as (`None`: anything).
    pub expect: Option<Expect>,
    /// The kernel it runs in (`None`: the scenario's main kernel).
    pub kernel: Option<String>,
    /// Its leftovers must still live when the script ends: nothing that
    /// happened to other cells or kernels may touch them.
    pub bystander: bool,
    /// The language of its kernel (the first cell of a kernel opens it).
    pub lang: Lang,
    /// Run by a second frontend (an agent framework beside the CLI, a
    /// second state directory) with records of its own: its first cell on
    /// a kernel the first frontend drove, and the first frontend's next
    /// one after it, are refused and say how far the kernel is; the script
    /// runs a refused cell again, as the refusal asks.
    pub second_client: bool,
    /// Its code carries a NUL byte after the workload (a shell cell): no
    /// shell can be handed it whole (an argv ends at the first NUL, and a
    /// shell handed the part before would run that part alone), so the
    /// kernel refuses it and nothing of it runs.
    pub nul_byte: bool,
    /// Its cancel is sent about when it ends by itself, so it may land
    /// anywhere in it or after its end (on its leftovers): what it printed
    /// is a prefix of its whole output, not what a stop at its first
    /// block would leave.
    pub cancel_races_end: bool,
}

/// As derived, but `second_client`, `nul_byte` and `cancel_races_end` only when set: the debug text is what
/// a race file's script digest hashes ([`crate::race::script_digest`]),
/// and the field's arrival must not make every saved race stale.
impl std::fmt::Debug for CellSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("CellSpec");
        d.field("label", &self.label)
            .field("workload", &self.workload)
            .field("timeout_ms", &self.timeout_ms)
            .field("cancel_after_ms", &self.cancel_after_ms)
            .field("expect", &self.expect)
            .field("kernel", &self.kernel)
            .field("bystander", &self.bystander)
            .field("lang", &self.lang);
        if self.second_client {
            d.field("second_client", &self.second_client);
        }
        if self.nul_byte {
            d.field("nul_byte", &self.nul_byte);
        }
        if self.cancel_races_end {
            d.field("cancel_races_end", &self.cancel_races_end);
        }
        d.finish()
    }
}

/// A class of outcomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// `ok`.
    Ok,
    /// `exit N`.
    Exit(i32),
    /// `cancelled`.
    Cancelled,
    /// `timed out`.
    TimedOut,
    /// `unknown` or an error: the client could not know.
    Unknown,
    /// An error: the kernel refused the cell's code.
    Refused,
}

impl Expect {
    /// Does `outcome` belong to this class?
    pub fn admits(self, outcome: &CellOutcome) -> bool {
        match (self, outcome) {
            (Expect::Ok, CellOutcome::Ok) => true,
            (Expect::Exit(n), CellOutcome::Exit { code }) => *code == n,
            (Expect::Cancelled, CellOutcome::Cancelled) => true,
            (Expect::TimedOut, CellOutcome::TimedOut) => true,
            (Expect::Unknown, CellOutcome::Unknown { .. } | CellOutcome::Error { .. }) => true,
            (Expect::Refused, CellOutcome::Error { .. }) => true,
            _ => false,
        }
    }
}

impl CellSpec {
    /// The workload as submitted: side-effect line first.
    pub fn full_workload(&self) -> Workload {
        let mut steps = vec![Step::WriteSideEffect {
            name: self.label.clone(),
        }];
        steps.extend(self.workload.steps.iter().cloned());
        Workload { steps }
    }

    /// Everything the cell writes to stdout when it runs to its end once,
    /// with no name bound before it (see [`Scenario::expected_stdout`]).
    pub fn full_stdout(&self) -> Vec<u8> {
        self.stdout_with(&BTreeMap::new())
    }

    /// What the cell writes to stdout when it runs to its end once with
    /// `names` bound (`PrintName` of an unbound name ends it there).
    fn stdout_with(&self, names: &BTreeMap<String, String>) -> Vec<u8> {
        let mut names = names.clone();
        let mut out = Vec::new();
        for step in &self.workload.steps {
            match step {
                Step::Print {
                    stream: Stream::Stdout,
                    text,
                } => out.extend_from_slice(text.as_bytes()),
                Step::SetName { name, value } => {
                    names.insert(name.clone(), value.clone());
                }
                Step::PrintName { name } => match names.get(name) {
                    Some(v) => {
                        out.extend_from_slice(v.as_bytes());
                        out.push(b'\n');
                    }
                    None => break,
                },
                Step::ToolCall { .. } | Step::SizedToolCall { .. } => {
                    if let Some(line) = crate::workload::tool_call_output(step) {
                        out.extend_from_slice(line.as_bytes());
                    }
                }
                Step::Exit { .. } => break,
                _ => {}
            }
        }
        // A user's EXIT trap never runs as part of a cell that reaches its
        // end: a Python cell's (atexit) runs when the interpreter exits, a
        // shell cell's is kept aside by the wrapper.
        out
    }

    /// The names the cell binds in its kernel's namespace (Python kernels
    /// keep them for later cells).
    /// Does the model stop it where it first blocks (a cancel or a
    /// timeout of a cell that blocks until stopped)?
    fn stopped_at_first_block(&self) -> bool {
        (self.cancel_after_ms.is_some() && !self.cancel_races_end) || self.timeout_ms.is_some()
    }

    pub(crate) fn binds(&self) -> impl Iterator<Item = (&String, &String)> {
        self.workload.steps.iter().filter_map(|s| match s {
            Step::SetName { name, value } => Some((name, value)),
            _ => None,
        })
    }

    /// Does the cell print a name (so it tells whether its kernel's
    /// namespace survived)?
    pub fn reads_names(&self) -> bool {
        self.reads().next().is_some()
    }

    /// The names the cell prints.
    pub(crate) fn reads(&self) -> impl Iterator<Item = &String> {
        self.workload.steps.iter().filter_map(|s| match s {
            Step::PrintName { name } => Some(name),
            _ => None,
        })
    }
}

/// One action of a client script.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Run a cell to its resolution.
    Run(CellSpec),
    /// Queue these cells of one kernel at once, in order, and wait for all
    /// of them (a frontend that hands the kernel several cells without
    /// waiting): each waits its turn behind the ones before it, and its
    /// timeout counts from the queueing, the wait included. First frontend
    /// only; a scripted cancel (`cancel_after_ms`) is for [`Action::Run`].
    Together(Vec<CellSpec>),
    /// Do nothing for a while (time for leftovers, idle reaping).
    Idle {
        /// How long.
        ms: u64,
    },
}

/// A named scenario.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// Its name (`--scenario`).
    pub name: &'static str,
    /// One line on what it shows.
    pub about: &'static str,
    /// The client script; the world adds the liveness cell and the final
    /// shutdown.
    pub script: Vec<Action>,
    /// Faults every run of the scenario carries.
    pub fixed: FaultSchedule,
    /// Where the per-seed faults come from.
    pub space: FaultSpace,
    /// Does the sandbox's PID 1 reap orphans? Many containers run without
    /// an init, and then every orphan that exits stays a zombie.
    pub init_reaps: bool,
    /// Each seed's sandbox has a flaw that keeps a kernel from starting
    /// ([`crate::swarm::Flaw`]), and the client's fallback is drawn on or
    /// off: the scenario is about failing open.
    pub fails_open: bool,
    /// Draws the script from the seed (`None`: `script` is the script).
    /// A drawn script meets the shim, the cell script and the daemon with
    /// processes nobody arranged for them; [`Scenario::for_seed`] makes the
    /// seed's scenario, and the seed replays it.
    pub draws: Option<fn(u64) -> Vec<Action>>,
}

impl Scenario {
    /// The scenario a run of `seed` plays: itself, or with the script the
    /// seed draws. Every host runs and judges this one.
    pub fn for_seed(&self, seed: u64) -> Scenario {
        match self.draws {
            Some(draw) => Scenario {
                script: draw(seed),
                ..self.clone()
            },
            None => self.clone(),
        }
    }

    /// The world of a seed ([`World::draw`], at most `space.max_faults`
    /// drawn faults).
    pub fn world(&self, seed: u64) -> World {
        World::draw(self, seed, self.space.max_faults)
    }

    /// The schedule of a seed: the fixed faults plus those drawn in the
    /// seed's world.
    pub fn schedule(&self, seed: u64) -> FaultSchedule {
        self.schedule_in(seed, &self.world(seed))
    }

    /// The fixed faults plus those drawn for `seed` with `world`'s density,
    /// window and families.
    pub fn schedule_in(&self, seed: u64, world: &World) -> FaultSchedule {
        let space = FaultSpace {
            families: world.families.clone(),
            window_ms: world.window_ms,
            max_faults: world.faults,
        };
        let mut all = self.fixed.0.clone();
        all.extend(FaultSchedule::draw(seed, &space).0);
        all.extend(world.long_outage.clone());
        all.extend(world.crash_kills.iter().cloned());
        all.sort();
        FaultSchedule(all)
    }

    /// What `cell` writes to stdout when it runs to its end once, with
    /// what earlier cells of its kernel did still there: the names a
    /// Python kernel's cells bound, the shell state a shell kernel's cells
    /// left under `flavor` ([`crate::shell_model`]).
    pub fn expected_stdout(&self, cell: &CellSpec, flavor: Flavor) -> Vec<u8> {
        if cell.nul_byte {
            return Vec::new();
        }
        if cell.lang == Lang::Shell {
            let before = self.kernel_cells_before(cell);
            return shell_stdout(flavor, &before, cell, &|_| true);
        }
        let names = self.names_before(cell);
        cell.stdout_with(&names)
    }

    /// What a shell `cell` may print instead when its kernel lost state
    /// honestly: the changes of some earlier cells of its kernel were not
    /// kept: the kernel started afresh after them (a daemon death, a new
    /// sandbox), or they did not run or their shells could not save
    /// (shell_state seed 500084: `sh_cancelled`'s shim was killed, then
    /// `sh_exit` was cancelled before it started), in any combination
    /// (shell_state seed 102872: a bounce lost `sh_set`'s state, and
    /// `sh_exit`, cancelled before it started, never ran). Which losses
    /// are excused is the oracle's judgement. Empty for a Python cell.
    pub fn shell_stdout_after_a_loss(&self, cell: &CellSpec, flavor: Flavor) -> Vec<Vec<u8>> {
        if cell.lang != Lang::Shell {
            return Vec::new();
        }
        let before = self.kernel_cells_before(cell);
        // Every subset of the earlier cells kept (the scenarios have a
        // handful of cells a kernel; past 12, the later ones always kept).
        let n = before.len().min(12);
        let mut alternatives = Vec::new();
        for kept in 0u32..(1 << n) {
            alternatives.push(shell_stdout(flavor, &before, cell, &|i| {
                i >= n || kept & (1 << i) != 0
            }));
        }
        alternatives.sort();
        alternatives.dedup();
        alternatives
    }

    /// The cells of `cell`'s kernel before it that can run (a cell with a
    /// NUL byte never does).
    fn kernel_cells_before(&self, cell: &CellSpec) -> Vec<&CellSpec> {
        self.cells()
            .take_while(|c| c.label != cell.label)
            .filter(|c| c.kernel == cell.kernel && !c.nul_byte)
            .collect()
    }

    /// Names bound by the cells of `cell`'s kernel before it (a Python
    /// kernel's namespace, a shell kernel's variables).
    pub fn names_before(&self, cell: &CellSpec) -> BTreeMap<String, String> {
        let mut names = BTreeMap::new();
        for c in self.cells() {
            if c.label == cell.label {
                break;
            }
            if c.kernel == cell.kernel && !c.nul_byte {
                for (n, v) in c.binds() {
                    names.insert(n.clone(), v.clone());
                }
            }
        }
        names
    }

    /// The scripted cells, in order.
    pub fn cells(&self) -> impl Iterator<Item = &CellSpec> {
        self.script.iter().flat_map(|a| match a {
            Action::Run(c) => std::slice::from_ref(c),
            Action::Together(cells) => cells.as_slice(),
            Action::Idle { .. } => &[],
        })
    }
}

/// What shell `cell` prints after the cells `before` of its kernel (the
/// ones `kept(i)` admits, each run once, in order) under `flavor`.
fn shell_stdout(
    flavor: Flavor,
    before: &[&CellSpec],
    cell: &CellSpec,
    kept: &dyn Fn(usize) -> bool,
) -> Vec<u8> {
    let empty = BTreeMap::new();
    let mut kernel = None;
    for (i, c) in before.iter().enumerate() {
        if !kept(i) {
            continue;
        }
        let mut state = ShellState::restore(flavor, &empty, kernel.clone());
        let cancel = c.stopped_at_first_block();
        if let Ok(played) = play_cell(flavor, &mut state, &c.workload.steps, cancel, true) {
            if played.saves {
                kernel = Some(state.saved(flavor));
            }
        }
    }
    let mut state = ShellState::restore(flavor, &empty, kernel);
    let cancel = cell.stopped_at_first_block();
    play_cell(flavor, &mut state, &cell.workload.steps, cancel, true)
        .map(|p| p.stdout.into_bytes())
        .unwrap_or_default()
}

pub(crate) fn print(text: &str) -> Step {
    Step::Print {
        stream: Stream::Stdout,
        text: text.into(),
    }
}

pub(crate) fn cell(label: &str, steps: Vec<Step>, expect: Expect) -> CellSpec {
    CellSpec {
        label: label.into(),
        workload: Workload { steps },
        timeout_ms: None,
        cancel_after_ms: None,
        expect: Some(expect),
        kernel: None,
        bystander: false,
        lang: Lang::Shell,
        second_client: false,
        nul_byte: false,
        cancel_races_end: false,
    }
}

pub(crate) fn py_cell(label: &str, steps: Vec<Step>, expect: Expect) -> CellSpec {
    CellSpec {
        lang: Lang::Python,
        ..cell(label, steps, expect)
    }
}

/// `c` in the kernel `kernel` (not the scenario's main one).
pub(crate) fn on(kernel: &str, c: CellSpec) -> CellSpec {
    CellSpec {
        kernel: Some(kernel.into()),
        ..c
    }
}

/// `c`, run by the second frontend ([`CellSpec::second_client`]).
fn second(c: CellSpec) -> CellSpec {
    CellSpec {
        second_client: true,
        ..c
    }
}

fn tool_call(name: &str, args: &str) -> Step {
    Step::ToolCall {
        name: name.into(),
        args: args.into(),
    }
}

pub(crate) fn set_name(name: &str, value: &str) -> Step {
    Step::SetName {
        name: name.into(),
        value: value.into(),
    }
}

pub(crate) fn print_name(name: &str) -> Step {
    Step::PrintName { name: name.into() }
}

fn shell_change(change: StateChange) -> Step {
    Step::State { change }
}

fn show(probe: Probe) -> Step {
    Step::Show { probe }
}

pub(crate) fn network() -> Vec<Family> {
    vec![
        Family::Partition,
        Family::Hold,
        Family::Drop,
        Family::Latency,
        Family::SlowStart,
        Family::ReplyLost,
        Family::ReplyLost,
        Family::CrashClient,
        Family::ClockJump,
    ]
}

/// A cell, 2 s for the sandbox to restart (or be replaced), another cell.
fn cell_restart_cell() -> Vec<Action> {
    vec![
        Action::Run(cell("before", vec![print("x\n")], Expect::Ok)),
        Action::Idle { ms: 2_000 },
        Action::Run(cell("after", vec![print("y\n")], Expect::Ok)),
    ]
}

/// Tool calls at the protocol's size limits and one byte past each.
fn calls_at_the_limits() -> Vec<Step> {
    use tether_core::protocol::calls::{MAX_ARGS, MAX_NAME};
    let sized = |name_len, args_len| Step::SizedToolCall { name_len, args_len };
    vec![
        sized(MAX_NAME, MAX_ARGS),
        sized(MAX_NAME + 1, 2),
        sized(1, MAX_ARGS + 1),
        print("done\n"),
    ]
}

fn late_print(after_ms: u64, tag: &str, lines: u32) -> Step {
    Step::LatePrint {
        after_ms,
        tag: tag.into(),
        lines,
    }
}

/// Background children that print after their cell resolved while
/// later cells run: one past the background log's cap (a trim), a few
/// lines after an `exit 3`, a few more from a later cell. The kernel's
/// log must hold them exactly (the oracle's background check) and no
/// cell's output any of them. One kernel: a second one goes idle and is
/// evicted by the client's reaper, and an eviction whose shutdown a
/// partition defeats leaves the kernel's files (a leak the `reaper`
/// scenario shows too).
fn background_log(all_faults: Vec<Family>) -> Scenario {
    Scenario {
        name: "background_log",
        about: "background children print after their cell resolved (over the log's cap, after exit 3) while later cells run: all of it in the kernel's background log (`tether logs`), once, in order, trimmed from a line start past the cap, none in any cell's output",
        script: vec![
            Action::Run(cell(
                "exits",
                vec![late_print(700, "exits", 3), Step::Exit { code: 3 }],
                Expect::Exit(3),
            )),
            Action::Run(cell(
                "again",
                vec![late_print(900, "again", 2), print("again\n")],
                Expect::Ok,
            )),
            // Resolves at the drain bound (the child holds stdout); the
            // child prints 1.5 MB during the next cell, past the cap with
            // room for what each writer may append between two looks, and
            // last (a later small append would trim for it).
            Action::Run(cell(
                "bulk",
                vec![print("bulk\n"), late_print(1_000, "bulk", 16_000)],
                Expect::Ok,
            )),
            Action::Run(cell(
                "during",
                vec![print("a\n"), Step::Sleep { ms: 1_500 }, print("b\n")],
                Expect::Ok,
            )),
            Action::Run(cell(
                "next",
                vec![print("next\n"), Step::Sleep { ms: 600 }],
                Expect::Ok,
            )),
            Action::Idle { ms: 1_500 },
        ],
        fixed: FaultSchedule::empty(),
        space: space(all_faults),
        init_reaps: true,
        fails_open: false,
        draws: None,
    }
}

/// A cell that prints a line, sleeps, prints the next, `lines` times: a
/// journal append every `gap_ms`, a fork between two (a cell written off
/// with its daemon must fork no more: the op that proves the daemon gone
/// ends it, `orphans`).
fn drip(tag: &str, lines: u32, gap_ms: u64) -> Vec<Step> {
    (1..=lines)
        .flat_map(|i| [print(&format!("{tag}{i}\n")), Step::Sleep { ms: gap_ms }])
        .collect()
}

/// The kernels' disk fills while cells print, a line at a time: a shell
/// cell, then a Python cell in a kernel of its own, each under a window
/// of `disk_full` (and whatever the seed draws besides). Where the
/// sandbox's writes tear (half the worlds), a refused append leaves part
/// of its line in the journal. The journal writer keeps what it could
/// not write and writes it once the disk frees, after cutting the torn
/// line; the reader never delivers a torn line, a line twice or a gap;
/// what could not be kept is said (the oracle's output checks).
fn full_disk(all_faults: Vec<Family>) -> Scenario {
    Scenario {
        name: "full_disk",
        about: "the kernels' disk fills (writes refused, or torn mid-line) while a shell and a Python cell print a line at a time: every line delivered once, in order, or its loss said; nothing runs twice",
        script: vec![
            Action::Run(cell("drip", drip("s", 8, 150), Expect::Ok)),
            Action::Run(on(
                "py",
                py_cell(
                    "py_drip",
                    (1..=8)
                        .flat_map(|i| [print(&format!("p{i}\n")), Step::Sleep { ms: 150 }])
                        .collect(),
                    Expect::Ok,
                ),
            )),
            Action::Run(cell("after", vec![print("after\n")], Expect::Ok)),
        ],
        fixed: fixed(vec![
            (
                400,
                FaultKind::DiskFull {
                    for_ms: 500,
                    at_result: false,
                },
            ),
            // Armed while the shell cell prints: the disk fills as its
            // result is written.
            (
                1_000,
                FaultKind::DiskFull {
                    for_ms: 300,
                    at_result: true,
                },
            ),
            (
                2_000,
                FaultKind::DiskFull {
                    for_ms: 400,
                    at_result: false,
                },
            ),
        ]),
        // The disk may also fill just as a cell's result is written:
        // the result and its `done` refused as one batch.
        space: space(
            all_faults
                .into_iter()
                .chain([
                    Family::DiskFullAtResult,
                    Family::DiskFullAtWrite,
                    Family::PauseAfterWrite,
                    Family::KillAfterWrite,
                ])
                .collect(),
        ),
        init_reaps: true,
        fails_open: false,
        draws: None,
    }
}

/// The sandbox's clock jumps two hours at a time (a suspended machine
/// waking), past any idle timeout the daemon has, between cells and while
/// they are submitted and run: the daemon exits idle only with no cell in
/// flight; a submit racing its exit either has its cell run or withdrawn
/// for the next daemon (the handshake); every loss of the state is
/// reported before a cell reads it (`print_name` of a name the first cell
/// bound fails on a fresh shell).
fn idle_exit(all_faults: Vec<Family>) -> Scenario {
    let jump = FaultKind::ClockJump { ms: 7_200_000 };
    let reads = |label: &str| CellSpec {
        expect: None,
        ..cell(label, vec![print_name("x")], Expect::Ok)
    };
    Scenario {
        name: "idle_exit",
        about: "the sandbox clock jumps past the daemon's idle timeout between and during cells: it exits idle only with no cell in flight, a submit racing the exit runs its cell or withdraws it for the next daemon, and a lost state is reported before a cell reads it",
        script: vec![
            Action::Run(cell(
                "i_set",
                vec![set_name("x", "kept"), print("set\n")],
                Expect::Ok,
            )),
            Action::Idle { ms: 400 },
            Action::Run(reads("i_read")),
            Action::Run(cell(
                "i_work",
                vec![print("a\n"), Step::Sleep { ms: 600 }, print("b\n")],
                Expect::Ok,
            )),
            Action::Idle { ms: 400 },
            Action::Run(reads("i_again")),
        ],
        // A jump every 110 ms: whenever the daemon is idle its timeout has
        // passed, so it decides to exit at its first idle tick, and each
        // submit races that decision somewhere in its course. The first
        // such exit's announcement is refused by a full disk: the daemon
        // must stay (unannounced, a racing submit's cell is stranded).
        fixed: fixed(
            (0..30)
                .map(|i| (200 + i * 110, jump.clone()))
                .chain([(
                    250,
                    FaultKind::DiskFullAtWrite {
                        for_ms: 200,
                        file: "exiting".into(),
                    },
                )])
                .collect(),
        ),
        space: space(
            all_faults
                .into_iter()
                .chain([
                    Family::DiskFullAtWrite,
                    Family::PauseAfterWrite,
                    Family::KillAfterWrite,
                ])
                .collect(),
        ),
        init_reaps: true,
        fails_open: false,
        draws: None,
    }
}

/// A shell cell's shim killed from outside while the cell has escaped
/// its session (a setsid daemon) and its marker too (`setsid env -i`):
/// the daemon ends the cell as a cancel does, and where there is no
/// cgroup (half the swarmed worlds) the only trace of the `env -i`
/// daemon is that it came back to the kernel daemon (a subreaper) when
/// the shim died. Nothing of the cell may survive its resolution. The
/// cell ignores TERM (its daemons inherit that), so only the KILL ends
/// them, and the oracle sees whether it waited for the grace period
/// (`kill_before_grace`), as a cancel's must.
fn shim_killed_escapes() -> Scenario {
    escapes_then(
        "shim_killed_escapes",
        "a shell cell's shim is killed after the cell left a setsid daemon and a setsid env -i daemon: both end before the cell resolves, with or without cgroups",
        vec![(500, FaultKind::KillShim)],
    )
}

/// [`shim_killed_escapes`]'s cell, but the kernel daemon is killed first:
/// where there is no cgroup, the `setsid env -i` daemon (no marker, a
/// session of its own) came back to the shim, a subreaper, and only the
/// orphan record the shim keeps under the cell's marker names it for the
/// op that proves the daemon gone (the race file of `shim_killed_escapes`
/// seed 102038, which no fresh seed reached).
fn daemon_then_shim_killed_escapes() -> Scenario {
    escapes_then(
        "daemon_then_shim_killed_escapes",
        "the kernel daemon, then the shim of a cell that left a setsid daemon and a setsid env -i daemon, are killed: the shim's orphan record names the env -i daemon, which ends before the cell is written off as lost",
        vec![(300, FaultKind::KillDaemon), (600, FaultKind::KillShim)],
    )
}

/// A shell cell that ignores TERM and leaves a setsid daemon and a
/// `setsid env -i` daemon, then `faults`.
fn escapes_then(
    name: &'static str,
    about: &'static str,
    faults: Vec<(u64, FaultKind)>,
) -> Scenario {
    Scenario {
        name,
        about,
        script: vec![
            // No expectation: a fault that delays the submit past the
            // kill lets the cell run to its end (its daemons leftovers).
            Action::Run(CellSpec {
                expect: None,
                ..cell(
                    "orphaned",
                    vec![
                        print("start\n"),
                        Step::IgnoreTerm,
                        Step::SetsidDoubleForkDaemon { sleep_ms: 600_000 },
                        Step::EnvIDaemon { sleep_ms: 600_000 },
                        Step::Sleep { ms: 3_000 },
                    ],
                    Expect::Unknown,
                )
            }),
            Action::Run(cell("after", vec![print("after\n")], Expect::Ok)),
        ],
        fixed: fixed(faults),
        space: space(network()),
        init_reaps: true,
        fails_open: false,
        draws: None,
    }
}

/// The kernel daemon and then the cell's shim are killed while the cell
/// and a setsid daemon it left run on, both ignoring TERM: the next
/// daemon of the kernel adopts the cell (its shim and daemon gone) and
/// ends what it left as a cancel does, TERM and, only once the grace
/// period has passed, KILL (`kill_before_grace` judges the adopted
/// cell's escalation as it judges a cancel's). Nothing of the cell may
/// survive, and the next cell runs.
fn daemon_shim_killed() -> Scenario {
    Scenario {
        name: "daemon_shim_killed",
        about: "the kernel daemon, then the shim of a cell that ignores TERM and left a setsid daemon, are killed: the op that proves the daemon gone ends the cell's processes before the cell is written off (a next daemon adopting one still alive ends it, KILL only after the grace), and the next cell runs on a fresh daemon",
        script: vec![
            Action::Run(cell("before", vec![print("x\n")], Expect::Ok)),
            // No expectation: a long-poll may outlast the cell (ok), a
            // short one finds the kernel gone.
            Action::Run(CellSpec {
                expect: None,
                ..cell(
                    "orphaned",
                    vec![
                        print("start\n"),
                        Step::IgnoreTerm,
                        Step::SetsidDoubleForkDaemon { sleep_ms: 600_000 },
                        Step::SetpgidEnvIOrphan { sleep_ms: 600_000 },
                        Step::Sleep { ms: 3_000 },
                    ],
                    Expect::Unknown,
                )
            }),
            Action::Run(cell("after", vec![print("after\n")], Expect::Ok)),
        ],
        fixed: fixed(vec![
            (1_000, FaultKind::KillDaemon),
            (1_200, FaultKind::KillShim),
        ]),
        space: space(network()),
        init_reaps: true,
        fails_open: false,
        draws: None,
    }
}

/// The kernel daemon gets SIGTERM mid-cell (`docker stop`, a host
/// shutdown): it stops the kernel (the running cell resolves with the
/// stop, nothing of the kernel runs on) and starts no cell after it; the
/// next cell runs on a fresh daemon, which reports the loss.
fn daemon_termed() -> Scenario {
    Scenario {
        name: "daemon_termed",
        about: "the kernel daemon gets SIGTERM mid-cell: the cell resolves with the stop, the stopped daemon starts nothing more, the next cell runs on a fresh daemon that reports the loss",
        script: vec![
            Action::Run(cell("before", vec![print("x\n")], Expect::Ok)),
            // No expectation: a fault that delays the submit past the
            // TERM lets the cell run on a fresh daemon.
            Action::Run(CellSpec {
                expect: None,
                ..cell(
                    "during",
                    // It ignores TERM: the stop ends it only by its exit
                    // sweep's KILL after the grace period, a sweep that
                    // takes more than one tick.
                    vec![print("a\n"), Step::IgnoreTerm, Step::Sleep { ms: 3_000 }],
                    Expect::Unknown,
                )
            }),
            // No expectation either: a submit that reaches the daemon
            // while it stops (live, on the channel: the TERM lands,
            // `during` resolves with the stop, `after` is accepted before the
            // daemon exits) ends with the stop's error, which reports the
            // loss; a stopping daemon still accepts submits (README, live
            // exploration). The stopped daemon must still start nothing
            // (`started_after_term`), and the liveness cell must run on a
            // fresh daemon.
            Action::Run(CellSpec {
                expect: None,
                ..cell("after", vec![print("y\n")], Expect::Ok)
            }),
        ],
        fixed: fixed(vec![(1_000, FaultKind::TermDaemon)]),
        space: space(network()),
        init_reaps: true,
        fails_open: false,
        draws: None,
    }
}

/// A cell that leaves a background child and a setsid daemon behind.
fn leftovers_script() -> Vec<Action> {
    vec![
        Action::Run(cell(
            "bg",
            vec![
                print("bg\n"),
                Step::BackgroundChildHoldingStdout { sleep_ms: 600_000 },
                Step::SetsidDoubleForkDaemon { sleep_ms: 600_000 },
            ],
            Expect::Ok,
        )),
        Action::Idle { ms: 1_000 },
    ]
}

/// The network's families and one a scenario names of its own.
fn network_and(family: Family) -> FaultSpace {
    space(network().into_iter().chain([family]).collect())
}

/// The cells of `queued`: a slow first, a second whose timeout runs out
/// while it waits behind the first (its client cancels it before its
/// turn: it must resolve then, not at the first's end, and never start),
/// a third that runs once the first is done.
fn queued_cells() -> Vec<CellSpec> {
    let first = cell(
        "first",
        vec![print("first\n"), Step::Sleep { ms: 6_000 }, print("done\n")],
        Expect::Ok,
    );
    let mut waiting = cell(
        "waiting",
        vec![print("never\n"), Step::Sleep { ms: 60_000 }],
        Expect::TimedOut,
    );
    waiting.timeout_ms = Some(500);
    let third = cell("third", vec![print("third\n")], Expect::Ok);
    vec![first, waiting, third]
}

pub(crate) fn space(families: Vec<Family>) -> FaultSpace {
    FaultSpace {
        families,
        window_ms: 4_000,
        max_faults: 8,
    }
}

fn fixed(faults: Vec<(u64, FaultKind)>) -> FaultSchedule {
    FaultSchedule(
        faults
            .into_iter()
            .map(|(at_ms, kind)| Fault { at_ms, kind })
            .collect(),
    )
}

/// `families` and the faults that wait for a write of their own (a disk
/// that fills there, a pause or a kill right after it): the Python
/// kernel's writes (the hand-off of a cell to the interpreter, its launch
/// record, a loss left to tell) are points of their own.
fn at_write_points(mut families: Vec<Family>) -> Vec<Family> {
    families.extend([
        Family::DiskFullAtWrite,
        Family::PauseAfterWrite,
        Family::KillAfterWrite,
    ]);
    families
}

/// Every scenario, in the order the explorer runs them.
pub fn all() -> Vec<Scenario> {
    let escapes = vec![
        Step::IgnoreTerm,
        print("start\n"),
        Step::BackgroundChildHoldingStdout { sleep_ms: 600_000 },
        Step::SetsidDoubleForkDaemon { sleep_ms: 600_000 },
        Step::EnvIDaemon { sleep_ms: 600_000 },
        Step::SetpgidOrphan { sleep_ms: 600_000 },
        Step::BusyLoop { ms: None },
    ];
    let mut cancel_escapes = cell("escapes", escapes, Expect::Cancelled);
    cancel_escapes.cancel_after_ms = Some(800);
    let mut trap = cell(
        "trapper",
        vec![
            Step::TrapTerm { then: vec![] },
            Step::SetExitTrap {
                text: String::new(),
            },
            print("trapping\n"),
            Step::Sleep { ms: 600_000 },
        ],
        Expect::Cancelled,
    );
    trap.cancel_after_ms = Some(500);
    // The shell dies at TERM (its trap exits); its background child,
    // started while TERM was ignored, lives until the grace period's KILL.
    let mut ignorer = cell(
        "ignorer",
        vec![
            Step::IgnoreTerm,
            Step::BackgroundChildHoldingStdout { sleep_ms: 600_000 },
            Step::TrapTerm {
                then: vec![Step::Exit { code: 0 }],
            },
            print("started\n"),
            Step::Sleep { ms: 600_000 },
        ],
        Expect::Cancelled,
    );
    ignorer.cancel_after_ms = Some(500);
    // Its leftover ignores TERM: a cancel that lands after its result
    // (`CancelPoint::AsResultIsJournaled`) escalates on it for the grace.
    let ignorer_done = cell(
        "ignorer_done",
        vec![
            Step::IgnoreTerm,
            Step::SetsidDoubleForkDaemon { sleep_ms: 600_000 },
            Step::Sleep { ms: 2_000 },
            print("done\n"),
        ],
        Expect::Ok,
    );
    // A cancel's TERM reaches the wrapper's trap: the shell saves what the
    // cell did before it goes.
    let mut sh_cancelled = cell(
        "sh_cancelled",
        vec![
            set_name("during", "cancelled cell"),
            shell_change(StateChange::Alias {
                name: "tw_ll".into(),
                text: "alias from the cancelled cell".into(),
            }),
            shell_change(StateChange::Umask { mask: 0o027 }),
            print("spinning\n"),
            Step::BusyLoop { ms: None },
        ],
        Expect::Cancelled,
    );
    sh_cancelled.cancel_after_ms = Some(500);
    // It ignores TERM: only the timeout's KILL ends it, which must wait
    // for the grace period (`kill_before_grace`), as a cancel's.
    let mut slow = cell(
        "slow",
        vec![
            print("tick\n"),
            Step::IgnoreTerm,
            Step::Sleep { ms: 60_000 },
        ],
        Expect::TimedOut,
    );
    slow.timeout_ms = Some(1_000);
    let mut bystander = cell(
        "bystander",
        vec![
            print("other kernel\n"),
            Step::BackgroundChildHoldingStdout { sleep_ms: 600_000 },
            Step::SetsidDoubleForkDaemon { sleep_ms: 600_000 },
        ],
        Expect::Ok,
    );
    bystander.kernel = Some("other".into());
    bystander.bystander = true;
    let mut target = cell(
        "target",
        vec![
            Step::IgnoreTerm,
            print("start\n"),
            Step::SetsidDoubleForkDaemon { sleep_ms: 600_000 },
            Step::EnvIDaemon { sleep_ms: 600_000 },
            Step::BusyLoop { ms: None },
        ],
        Expect::Cancelled,
    );
    target.cancel_after_ms = Some(600);
    let mut all_faults = network();
    all_faults.extend([Family::Cancel, Family::KillDaemon, Family::Bounce]);
    let mut py_escapes = py_cell(
        "py_escapes",
        vec![
            print("start\n"),
            set_name("during", "cancelled cell"),
            Step::BackgroundChildHoldingStdout { sleep_ms: 600_000 },
            Step::SetsidDoubleForkDaemon { sleep_ms: 600_000 },
            Step::SetpgidOrphan { sleep_ms: 600_000 },
            Step::EnvIDaemon { sleep_ms: 600_000 },
            Step::BusyLoop { ms: None },
        ],
        Expect::Cancelled,
    );
    py_escapes.cancel_after_ms = Some(800);
    let mut py_stuck = py_cell(
        "py_stuck",
        vec![
            Step::IgnoreInt,
            print("stuck\n"),
            Step::BackgroundChildHoldingStdout { sleep_ms: 600_000 },
            Step::BusyLoop { ms: None },
        ],
        Expect::Cancelled,
    );
    py_stuck.cancel_after_ms = Some(500);
    vec![
        Scenario {
            name: "happy",
            about: "one short cell; network faults must not lose, duplicate or rerun it",
            script: vec![Action::Run(cell(
                "hello",
                vec![print("hello\n")],
                Expect::Ok,
            ))],
            fixed: FaultSchedule::empty(),
            space: space(network()),
            init_reaps: true,
            fails_open: false,
            draws: None,
        },
        Scenario {
            name: "state",
            about: "three cells in one kernel, daemon deaths must be reported as state lost",
            script: vec![
                Action::Run(cell(
                    "set",
                    vec![
                        Step::SetVar {
                            name: "X".into(),
                            value: "1".into(),
                        },
                        print("set\n"),
                    ],
                    Expect::Ok,
                )),
                Action::Run(cell(
                    "work",
                    vec![print("a\n"), Step::Sleep { ms: 1_500 }, print("b\n")],
                    Expect::Ok,
                )),
                Action::Run(cell("exit", vec![Step::Exit { code: 3 }], Expect::Exit(3))),
            ],
            fixed: FaultSchedule::empty(),
            space: space(all_faults.clone()),
            init_reaps: true,
            fails_open: false,
            draws: None,
        },
        Scenario {
            name: "two_clients",
            about: "two frontends with records of their own (a CLI and an agent framework, two state directories) take turns on one kernel: the first cell of each after the other ran (a number whose cell is gone, or one whose cell is there) is refused and says how far the kernel is, nothing of it ran, and run again it sees what the other's cells left",
            script: vec![
                Action::Run(cell(
                    "a_set",
                    vec![set_name("x", "one"), print("a\n")],
                    Expect::Ok,
                )),
                // Its submit acknowledges a_set, whose directory goes: the
                // second frontend's first number is then used but empty.
                Action::Run(cell("a_more", vec![print("more\n")], Expect::Ok)),
                Action::Run(second(cell(
                    "b_read",
                    vec![print_name("x"), set_name("y", "two")],
                    Expect::Ok,
                ))),
                Action::Run(cell("a_read", vec![print_name("y")], Expect::Ok)),
                Action::Run(second(cell("b_again", vec![print("b\n")], Expect::Ok))),
            ],
            fixed: FaultSchedule::empty(),
            space: space(all_faults.clone()),
            init_reaps: true,
            fails_open: false,
            draws: None,
        },
        Scenario {
            name: "tool_calls",
            about: "a shell cell makes three tool calls answered by the client's handler (one with a TETHER_CALL_TIMEOUT no caller can use: it waits its default deadline) and one it never answers (the caller gives up at its deadline) (crashes, lost replies, cancels, partitions between call and answer); a leftover of it calls while the next cell runs and is refused",
            script: vec![
                Action::Run(cell(
                    "calls",
                    vec![
                        tool_call("search", r#"{"q":"a"}"#),
                        // Its `TETHER_CALL_TIMEOUT` is no number a
                        // caller can use: it waits its default deadline.
                        tool_call(crate::workload::LAX_TOOL, r#"{"n":2}"#),
                        // Never answered: the caller gives up at its
                        // deadline and the cell goes on.
                        tool_call(crate::workload::STALLED_TOOL, "{}"),
                        Step::LeftoverToolCall {
                            after_ms: 1_200,
                            name: "stale".into(),
                            args: r#"{"late":true}"#.into(),
                        },
                        tool_call("approve", "[3]"),
                        print("done\n"),
                    ],
                    Expect::Ok,
                )),
                Action::Run(cell(
                    "next",
                    // The leftover above calls during the wait; the call
                    // after it is a process forked late in the cell.
                    // Its own leftover calls as the cell ends: never
                    // answered, refused at the end, not at its deadline.
                    vec![
                        print("next\n"),
                        Step::Sleep { ms: 2_000 },
                        tool_call("search", r#"{"q":"b"}"#),
                        Step::LeftoverToolCall {
                            after_ms: 0,
                            name: "late".into(),
                            args: r#"{"end":true}"#.into(),
                        },
                    ],
                    Expect::Ok,
                )),
            ],
            fixed: FaultSchedule::empty(),
            space: space(all_faults.clone()),
            init_reaps: true,
            fails_open: false,
            draws: None,
        },
        // The protocol's size limits, exactly and one byte past: a
        // mistake at the boundary (`>` for `>=`, the request's whole body
        // counted for its arguments) refuses a call the sandbox must take
        // or runs one it must refuse.
        Scenario {
            name: "tool_call_limits",
            about: "a shell and a Python cell call tools of exactly the size limits (a 256-byte name, 1 MiB of arguments), answered, and one byte past each, refused in the sandbox and never run by the host",
            script: vec![
                Action::Run(cell("sh_limits", calls_at_the_limits(), Expect::Ok)),
                Action::Run(on(
                    "py",
                    py_cell("py_limits", calls_at_the_limits(), Expect::Ok),
                )),
            ],
            fixed: FaultSchedule::empty(),
            space: space(all_faults.clone()),
            init_reaps: true,
            fails_open: false,
            draws: None,
        },
        Scenario {
            name: "cancel_escapes",
            about: "cancel a cell that ignores TERM and leaves every kind of escapee",
            script: vec![Action::Run(cancel_escapes)],
            fixed: FaultSchedule::empty(),
            space: space(network()),
            init_reaps: true,
            fails_open: false,
            draws: None,
        },
        Scenario {
            name: "cancel_trap",
            about: "cancel a cell that traps TERM and sets its own EXIT trap",
            script: vec![Action::Run(trap)],
            fixed: FaultSchedule::empty(),
            space: space(network()),
            init_reaps: true,
            fails_open: false,
            draws: None,
        },
        Scenario {
            name: "cancel_ignorer",
            about: "cancel a cell whose background child ignores TERM: it resolves once KILL got the child; then a cell that ends by itself leaving a daemon that ignores TERM (a cancel that crosses its result ends the daemon as a cancel does, KILL only after the grace)",
            // The pause keeps the kernel up while a late cancel escalates.
            script: vec![
                Action::Run(ignorer),
                Action::Run(ignorer_done),
                Action::Idle { ms: 1_500 },
            ],
            fixed: FaultSchedule::empty(),
            space: network_and(Family::CancelAtResult),
            init_reaps: true,
            fails_open: false,
            draws: None,
        },
        Scenario {
            name: "shell_state",
            about: "a shell kernel's state (variables, functions, aliases, options, umask, traps) survives exit N, a cancel and a client crash (and an exit through the cell's own EXIT trap under bash; under dash it is not kept, and the next cell says so); a later cell reads it back, or the loss was reported",
            script: vec![
                Action::Run(cell(
                    "sh_set",
                    vec![
                        set_name("x", "kept"),
                        shell_change(StateChange::Function {
                            name: "tw_greet".into(),
                            text: "function from sh_set".into(),
                        }),
                        shell_change(StateChange::Trap {
                            signal: TrapSignal::Usr1,
                            text: "usr1".into(),
                        }),
                    ],
                    Expect::Ok,
                )),
                Action::Run(sh_cancelled),
                Action::Run(cell(
                    "sh_exit",
                    vec![
                        set_name("e", "exited"),
                        shell_change(StateChange::Option {
                            option: ShellOption::Noglob,
                            on: true,
                        }),
                        Step::Exit { code: 3 },
                    ],
                    Expect::Exit(3),
                )),
                // Under dash the cell's own EXIT trap replaces the one
                // that saves: its state is not kept, and the next cell
                // must say so.
                Action::Run(cell(
                    "sh_trapped",
                    vec![
                        Step::SetExitTrap {
                            text: String::new(),
                        },
                        set_name("t", "trapped"),
                        Step::Exit { code: 4 },
                    ],
                    Expect::Exit(4),
                )),
                Action::Run(cell(
                    "sh_read",
                    vec![
                        show(Probe::Var { name: "x".into() }),
                        show(Probe::Var { name: "t".into() }),
                        show(Probe::Var {
                            name: "during".into(),
                        }),
                        show(Probe::Var { name: "e".into() }),
                        show(Probe::Function {
                            name: "tw_greet".into(),
                        }),
                        show(Probe::Alias {
                            name: "tw_ll".into(),
                        }),
                        show(Probe::Option {
                            option: ShellOption::Noglob,
                        }),
                        show(Probe::Umask),
                        show(Probe::Trap {
                            signal: TrapSignal::Usr1,
                        }),
                        print_name("x"),
                        print_name("during"),
                        print_name("e"),
                    ],
                    Expect::Ok,
                )),
            ],
            fixed: FaultSchedule::empty(),
            // Daemon deaths and sandbox restarts too: the state is then
            // lost, and must be reported before a cell reads it.
            space: space(all_faults.clone()),
            init_reaps: true,
            fails_open: false,
            draws: None,
        },
        Scenario {
            name: "cancel_early",
            about: "cancel while the submit is still in flight: the cell must never run on",
            script: vec![Action::Run(cell(
                "early",
                vec![print("ran\n"), Step::Sleep { ms: 600_000 }],
                Expect::Cancelled,
            ))],
            fixed: fixed(vec![(
                0,
                FaultKind::Cancel {
                    point: CancelPoint::BeforeSubmitRegisters,
                },
            )]),
            space: space(network()),
            init_reaps: true,
            fails_open: false,
            draws: None,
        },
        Scenario {
            name: "reply_lost",
            about: "the submit's reply is lost after the op ran: no second run",
            script: vec![Action::Run(cell(
                "once",
                vec![print("once\n"), Step::Sleep { ms: 300 }, print("done\n")],
                Expect::Ok,
            ))],
            fixed: fixed(vec![(
                0,
                FaultKind::ReplyLost {
                    op: OpTarget::Submit,
                },
            )]),
            // Also drawn: the machine replaced between an op's end and its
            // reply (the reply lost, then a new sandbox).
            space: network_and(Family::ReplacedAfterOp),
            init_reaps: true,
            fails_open: false,
            draws: None,
        },
        Scenario {
            name: "replaced_mid_submit",
            about: "the machine is replaced right after the submit ran, before its reply left: the cell that may have run is reported lost, never run again unasked",
            // The connection fails, then the agent is missing: the client
            // installs it again, finds the kernel of another boot and,
            // since the submit may have run, fails the cell as lost with
            // the kernel instead of sending it to the fresh one. The
            // next cell runs there.
            script: vec![
                Action::Run(cell(
                    "once",
                    vec![print("once\n"), Step::Sleep { ms: 300 }, print("done\n")],
                    Expect::Unknown,
                )),
                Action::Run(cell("next", vec![print("next\n")], Expect::Ok)),
            ],
            fixed: fixed(vec![(
                0,
                FaultKind::ReplacedAfterOp {
                    op: OpTarget::Submit,
                },
            )]),
            space: network_and(Family::ReplacedAfterOp),
            init_reaps: true,
            fails_open: false,
            draws: None,
        },
        Scenario {
            name: "client_crash",
            about: "the client dies mid-cell and a new one resumes it from the record",
            script: vec![Action::Run(cell(
                "long",
                vec![print("one\n"), Step::Sleep { ms: 2_000 }, print("two\n")],
                Expect::Ok,
            ))],
            fixed: fixed(vec![(700, FaultKind::CrashClient { down_ms: 500 })]),
            space: space(network()),
            init_reaps: true,
            fails_open: false,
            draws: None,
        },
        Scenario {
            name: "daemon_killed",
            about: "the kernel daemon is killed mid-cell: state lost, with evidence",
            script: vec![
                Action::Run(cell("before", vec![print("x\n")], Expect::Ok)),
                // The daemon dies under it, its shim does not: a long-poll
                // that outlasts the cell reads its result (ok), a shorter
                // one finds the kernel gone (unknown or error). Later cells
                // must hear of the loss either way.
                Action::Run(CellSpec {
                    expect: None,
                    ..cell("during", vec![Step::Sleep { ms: 3_000 }], Expect::Unknown)
                }),
            ],
            fixed: fixed(vec![(1_000, FaultKind::KillDaemon)]),
            space: space(network()),
            init_reaps: true,
            fails_open: false,
            draws: None,
        },
        Scenario {
            name: "sandbox_bounce",
            about: "the sandbox restarts (pids reused): the kernel is replaced, not trusted",
            // The client learns of the restart when it sends the second
            // cell (submit carries the expected identity): it reports the
            // loss, spawns a fresh kernel and runs the cell there.
            script: cell_restart_cell(),
            fixed: fixed(vec![(1_000, FaultKind::BounceSandbox)]),
            space: space(network()),
            init_reaps: true,
            fails_open: false,
            draws: None,
        },
        Scenario {
            name: "sandbox_replaced",
            about: "a new machine takes the sandbox's address: state lost, agent installed again",
            // Files are gone too, so the second cell's exec finds no agent:
            // the client installs it again, finds no kernel (another boot),
            // reports the loss and runs the cell in a fresh kernel.
            script: cell_restart_cell(),
            fixed: fixed(vec![(1_000, FaultKind::ReplaceSandbox)]),
            // Also drawn: the machine replaced between an op's end and its
            // reply (the reply lost, then a new sandbox).
            space: network_and(Family::ReplacedAfterOp),
            init_reaps: true,
            fails_open: false,
            draws: None,
        },
        Scenario {
            name: "timeout",
            about: "a cell times out: cancelled, the kernel (and its state) lives on",
            script: vec![
                Action::Run(slow),
                Action::Run(cell("next", vec![print("still here\n")], Expect::Ok)),
            ],
            fixed: FaultSchedule::empty(),
            space: space(network()),
            init_reaps: true,
            fails_open: false,
            draws: None,
        },
        Scenario {
            name: "queued",
            about: "three cells queued at once: the second times out while it waits behind the first and never runs, the third runs after the first",
            script: vec![
                Action::Together(queued_cells()),
                Action::Run(cell("next", vec![print("still here\n")], Expect::Ok)),
            ],
            fixed: FaultSchedule::empty(),
            space: space(
                all_faults
                    .iter()
                    .copied()
                    .chain([Family::CrashClient, Family::KillShim, Family::TermDaemon])
                    .collect(),
            ),
            init_reaps: true,
            fails_open: false,
            draws: None,
        },
        Scenario {
            name: "two_kernels",
            about: "cancel a cell of one kernel: another kernel's cell and leftovers are untouched",
            script: vec![Action::Run(bystander), Action::Run(target)],
            fixed: FaultSchedule::empty(),
            space: space(network()),
            init_reaps: true,
            fails_open: false,
            draws: None,
        },
        Scenario {
            name: "leftovers",
            about: "a cell leaves a background child: reported, owned, gone after shutdown",
            script: leftovers_script(),
            fixed: FaultSchedule::empty(),
            space: space(network()),
            init_reaps: true,
            fails_open: false,
            draws: None,
        },
        Scenario {
            name: "leftovers_no_init",
            about: "as leftovers, on a sandbox whose PID 1 never reaps: killed orphans stay zombies, shutdown must not wait for them",
            script: leftovers_script(),
            // The daemon dies with the leftovers' shim still running: the
            // shim and its tree go to PID 1, which never reaps them.
            fixed: fixed(vec![(600, FaultKind::KillDaemon)]),
            space: space(network()),
            init_reaps: false,
            fails_open: false,
            draws: None,
        },
    ]
    .into_iter()
    .chain([
        shim_killed_escapes(),
        daemon_then_shim_killed_escapes(),
        daemon_shim_killed(),
        daemon_termed(),
    ])
    .chain([
        background_log(all_faults.clone()),
        full_disk(all_faults.clone()),
        idle_exit(all_faults.clone()),
    ])
    .chain(python(at_write_points(all_faults.clone()), py_escapes, py_stuck))
    .chain(client_knobs(all_faults.clone()))
    .chain([fail_open(), drawn(all_faults.clone()), drawn_clients(all_faults)])
    .collect()
}

/// Cells nobody wrote: each seed draws its script ([`crate::drawn`]).
fn drawn(all_faults: Vec<Family>) -> Scenario {
    Scenario {
        name: "drawn",
        about: "two to five cells drawn from the seed (output on both streams, sleeps, daemons and orphans that die first or outlive the kernel, exit statuses, cancels, timeouts, names read back; shell and Python): no scenario was written for them",
        script: Vec::new(),
        fixed: FaultSchedule::empty(),
        // And the faults that wait for a moment of their own: a disk
        // that fills as a result is written, a machine replaced between
        // an op's end and its reply.
        space: space(
            all_faults
                .into_iter()
                .chain([
                    Family::DiskFullAtResult,
                    Family::ReplacedAfterOp,
                    Family::DiskFullAtWrite,
                    Family::PauseAfterWrite,
                    Family::KillAfterWrite,
                ])
                .collect(),
        ),
        init_reaps: true,
        fails_open: false,
        draws: Some(crate::drawn::script),
    }
}

/// Cells nobody wrote, shared by two frontends with records of their own
/// ([`crate::drawn::script_two_frontends`]).
fn drawn_clients(all_faults: Vec<Family>) -> Scenario {
    Scenario {
        name: "drawn_clients",
        about: "the cells `drawn` draws for the seed, each run by one of two frontends with records of their own (as two_clients): a frontend's first cell after the other ran is refused and run again; names bound by one are read by the other",
        draws: Some(crate::drawn::script_two_frontends),
        ..drawn(all_faults)
    }
}

/// Fail open: the seed's sandbox cannot start a kernel (a read-only or
/// `noexec` root for every kernel, no `python3` for a Python one). Each
/// cell runs once as a plain exec, or, with the fallback off, is refused
/// with the reason and never runs; judged by the oracle's fail-open check
/// against the world (so no cell states an outcome here).
fn fail_open() -> Scenario {
    let any = |c: CellSpec| CellSpec { expect: None, ..c };
    Scenario {
        name: "fail_open",
        about: "no kernel can start (read-only or noexec root, no python3): each cell runs once without one, said so, or is refused with the reason when the fallback is off",
        script: vec![
            // Cells that take a while, so that faults land on their execs.
            Action::Run(any(cell(
                "plain_hello",
                vec![print("plain\n"), Step::Sleep { ms: 800 }, print("done\n")],
                Expect::Ok,
            ))),
            Action::Run(any(cell(
                "plain_exit",
                vec![print("before\n"), Step::Sleep { ms: 500 }, Step::Exit { code: 3 }],
                Expect::Exit(3),
            ))),
            Action::Run(CellSpec {
                kernel: Some("py".into()),
                ..any(py_cell("py_plain", vec![print("py\n")], Expect::Ok))
            }),
            // The kernel failed before: it is tried again, and fails again.
            Action::Run(any(cell(
                "plain_after",
                vec![Step::Sleep { ms: 500 }, print("after\n")],
                Expect::Ok,
            ))),
        ],
        fixed: FaultSchedule::empty(),
        // A lost reply of a plain exec too: it ran, and is never sent
        // again (`unknown`).
        space: space(
            network()
                .into_iter()
                .chain([Family::PlainReplyLost, Family::PlainReplyLost])
                .collect(),
        ),
        init_reaps: true,
        fails_open: true,
        draws: None,
    }
}

/// Scenarios about the client's own timers (after the Python ones in
/// [`all`]): its reaper, and a cell timeout across a client restart.
fn client_knobs(all_faults: Vec<Family>) -> Vec<Scenario> {
    let mut slow = cell(
        "slow",
        vec![print("tick\n"), Step::Sleep { ms: 60_000 }],
        Expect::TimedOut,
    );
    slow.timeout_ms = Some(3_000);
    vec![
        Scenario {
            name: "reaper",
            about: "three kernels in turn: a kernel cap of 1-2 or a short idle timeout evicts one; its state is gone only with the eviction reported, never while it has a cell in flight",
            script: vec![
                Action::Run(on(
                    "a",
                    cell("a_set", vec![set_name("A", "kept"), print("a\n")], Expect::Ok),
                )),
                Action::Run(on(
                    "b",
                    cell(
                        "b_work",
                        vec![print("b\n"), Step::Sleep { ms: 2_500 }, print("b done\n")],
                        Expect::Ok,
                    ),
                )),
                // Evicted (cap or idle) while b worked, or kept: either
                // way the answer is honest.
                Action::Run(on(
                    "a",
                    CellSpec {
                        expect: None,
                        ..cell("a_read", vec![print_name("A")], Expect::Ok)
                    },
                )),
                Action::Idle { ms: 1_000 },
                Action::Run(on("c", cell("c_run", vec![print("c\n")], Expect::Ok))),
            ],
            fixed: FaultSchedule::empty(),
            space: space(all_faults),
            init_reaps: true,
            fails_open: false,
            draws: None,
        },
        Scenario {
            name: "timeout_resume",
            about: "the client crashes while a cell with a timeout runs: the resumed client times it out, never before its timeout",
            script: vec![
                Action::Run(slow),
                Action::Run(cell("next", vec![print("still here\n")], Expect::Ok)),
            ],
            fixed: fixed(vec![(1_000, FaultKind::CrashClient { down_ms: 500 })]),
            space: space(network()),
            init_reaps: true,
            fails_open: false,
            draws: None,
        },
    ]
}

/// The Python scenarios (after the shell ones in [`all`]).
fn python(all_faults: Vec<Family>, py_escapes: CellSpec, py_stuck: CellSpec) -> Vec<Scenario> {
    // What python_cancel and python_bystander read back after the cancel.
    let py_after = py_cell(
        "py_after",
        vec![print_name("x"), print_name("during")],
        Expect::Ok,
    );
    vec![
        Scenario {
            name: "python_state",
            about: "a Python kernel's namespace persists across cells; its loss is reported, never invented",
            script: vec![
                Action::Run(py_cell(
                    "py_set",
                    vec![set_name("x", "42"), print("set\n")],
                    Expect::Ok,
                )),
                Action::Run(py_cell(
                    "py_work",
                    vec![print("a\n"), Step::Sleep { ms: 1_500 }, print("b\n")],
                    Expect::Ok,
                )),
                Action::Run(py_cell("py_read", vec![print_name("x")], Expect::Ok)),
                Action::Run(py_cell(
                    "py_exit",
                    vec![Step::Exit { code: 3 }],
                    Expect::Exit(3),
                )),
                Action::Run(py_cell(
                    "py_read_again",
                    vec![print_name("x")],
                    Expect::Ok,
                )),
            ],
            fixed: FaultSchedule::empty(),
            space: space(all_faults),
            init_reaps: true,
            fails_open: false,
            draws: None,
        },
        Scenario {
            name: "python_cancel",
            about: "cancel a Python cell with children, a setsid daemon and a setsid + env -i daemon: KeyboardInterrupt, nothing survives, the namespace stays",
            script: vec![
                Action::Run(py_cell("py_set", vec![set_name("x", "kept")], Expect::Ok)),
                Action::Run(py_escapes.clone()),
                Action::Run(py_after.clone()),
            ],
            fixed: FaultSchedule::empty(),
            space: space(network()),
            init_reaps: true,
            fails_open: false,
            draws: None,
        },
        // A scenario of its own, not a step added to python_cancel: a
        // race file replays its scenario as it is now, and a changed
        // workload would move every race python_cancel's files keep.
        Scenario {
            name: "python_bystander",
            about: "an earlier Python cell's leftover (a child holding the marker, waiting for a grandchild started with env -i) is not a later, cancelled cell's: the cancel leaves both alone, the shutdown takes both",
            script: vec![
                Action::Run(CellSpec {
                    bystander: true,
                    ..py_cell(
                        "py_set",
                        vec![
                            set_name("x", "kept"),
                            Step::EnvIGrandchild { sleep_ms: 600_000 },
                        ],
                        Expect::Ok,
                    )
                }),
                Action::Run(py_escapes),
                Action::Run(py_after),
            ],
            fixed: FaultSchedule::empty(),
            space: space(network()),
            init_reaps: true,
            fails_open: false,
            draws: None,
        },
        // The interpreter's shim is killed as its first cell ends, then
        // the daemon: what the shim held (the cell's `setsid env -i`
        // daemon, which carries nothing that names the kernel, and the
        // interpreter) came back to the daemon, which must record it then
        // (`leftovers/orphan-*.json`) for the shutdown to find it once the
        // daemon is gone too, where there is no cgroup. The kill comes
        // within the shim's own look for orphans (100 ms) in many seeds,
        // before the shim recorded it.
        Scenario {
            name: "python_orphans",
            about: "the interpreter's shim is killed as its first cell ends, then the daemon: the cell's setsid env -i daemon, orphaned twice, is still found and ended by the shutdown; the next cell runs on a fresh daemon that reports the loss",
            script: vec![
                // No expectation: in some seeds the kill lands as the
                // cell starts.
                Action::Run(CellSpec {
                    expect: None,
                    ..py_cell(
                        "py_leave",
                        vec![
                            set_name("x", "kept"),
                            Step::EnvIDaemon { sleep_ms: 600_000 },
                            print("left\n"),
                        ],
                        Expect::Ok,
                    )
                }),
                Action::Idle { ms: 2_500 },
                Action::Run(py_cell("py_fresh", vec![print("fresh\n")], Expect::Ok)),
            ],
            fixed: fixed(vec![
                (120, FaultKind::KillShim),
                (2_200, FaultKind::KillDaemon),
            ]),
            space: space(network()),
            init_reaps: true,
            fails_open: false,
            draws: None,
        },
        Scenario {
            name: "python_stuck",
            about: "a Python cell ignores SIGINT: the interpreter is killed after the grace, the loss reported, the next cell runs fresh",
            script: vec![
                Action::Run(py_cell("py_set", vec![set_name("x", "doomed")], Expect::Ok)),
                Action::Run(py_stuck),
                Action::Run(py_cell("py_fresh", vec![print("fresh\n")], Expect::Ok)),
                Action::Run(py_cell("py_lost", vec![print_name("x")], Expect::Unknown)),
            ],
            fixed: FaultSchedule::empty(),
            space: space(network()),
            init_reaps: true,
            fails_open: false,
            draws: None,
        },
    ]
}

/// The scenario called `name`.
pub fn by_name(name: &str) -> Option<Scenario> {
    all().into_iter().find(|s| s.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_workloads_valid() {
        let all = all();
        let mut names: Vec<_> = all.iter().map(|s| s.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), all.len());
        for s in &all {
            for c in s.cells() {
                c.full_workload().validate().unwrap();
            }
        }
        assert!(by_name("happy").is_some());
        assert!(by_name("nope").is_none());
    }

    #[test]
    fn fixed_faults_are_in_every_seed() {
        let s = by_name("reply_lost").unwrap();
        for seed in 0..20 {
            assert!(s.schedule(seed).0.iter().any(|f| f.kind
                == FaultKind::ReplyLost {
                    op: OpTarget::Submit
                }));
        }
    }
}
