//! [`SimOs`]: a deterministic simulated Linux sandbox that implements the
//! agent's [`Os`] trait, so the agent's real decision logic runs against it.
//!
//! - [`process`]: the process table (fork, exit, reparenting to the nearest
//!   subreaper or pid 1, zombies and reaping, pipes);
//! - [`signals`]: delivery by disposition (default / ignore / trap, stop);
//! - [`fs`]: files and directories (O_EXCL, atomic replace);
//! - [`interp`]: the workload interpreter (a simulated `sh`);
//! - [`late`]: ground truth of what background children printed after
//!   their cell resolved (the background log's);
//! - [`plain`]: a plain exec of a cell's code, outside any kernel (fail
//!   open);
//! - [`shim`]: the cell shim, the IO driver of the agent's [`tether_core::agent::CellShim`];
//! - [`pyshim`]: the interpreter shim, the IO driver of the agent's
//!   [`tether_core::agent::InterpShim`];
//! - [`python`]: the Python interpreter the interpreter shim runs;
//! - [`events`]: the process event log for traces and the oracle;
//! - [`freeze`]: the whole sandbox frozen and thawed (`docker pause`);
//! - [`preempt`]: an agent step paused at one of its [`Os`] calls while the
//!   rest of the sandbox runs on.
//!
//! Time comes from outside: [`SimOs::advance`] runs every process that is
//! due up to a time (in time order, so causes come before effects), and
//! [`SimOs::next_wake`] says when something is next due. Nothing runs while
//! agent logic calls into the [`Os`] trait, so each agent step is atomic
//! with respect to the simulated processes — unless the seed's world
//! preempts it ([`preempt`]: the sandbox host pauses a daemon's tick or an
//! op's poll at one of its calls and lets everything else run meanwhile).
//! Every collection is ordered, so the same calls give the same pids,
//! events and files.
//!
//! Who is calling: the [`Os`] methods act as [`SimOs::current`] (see
//! [`SimOs::set_current`]): an op command started with
//! [`SimOs::begin_exec`], a daemon from [`SimOs::take_daemon_spawns`], or a
//! shim (set internally while the shim runs).

pub mod caller;
pub mod disk;
pub mod events;
pub mod freeze;
pub mod fs;
pub mod interp;
pub mod late;
pub mod orphans;
pub mod plain;
pub mod preempt;
pub mod process;
pub mod pyshim;
pub mod python;
pub mod shim;
pub mod signals;
mod step_kill;

#[cfg(test)]
mod e2e_tests;
#[cfg(test)]
mod tests;

pub use events::{ProcEvent, ProcEventKind};
pub use process::{CellRef, ExitStatus, Role, RunState};
pub use signals::{SignalEffect, SimSignal};

use self::disk::WriteMode;
use self::process::{ForkSpec, Pipe, Proc, Program};
use std::collections::{BTreeMap, BTreeSet};
use tether_core::agent::{CellLaunch, Os, OsError, Pid, ProcInfo, Signal};
use tether_core::time::Timestamp;

/// How a journal line that holds a cell's result begins its kind (see
/// `tether_core::protocol::EntryKind`).
const RESULT_ENTRY: &[u8] = b"\"kind\":\"result\"";

/// How a simulated sandbox is set up.
#[derive(Clone, Debug)]
pub struct SimOsConfig {
    /// Mixed into boot ids, so two sandboxes never share one.
    pub seed: u64,
    /// Pids wrap here (and are reused).
    pub pid_max: Pid,
    /// Does pid 1 reap orphans (tini, systemd) or not (`sleep infinity`)?
    pub init_reaps: bool,
    /// Daemons are child subreapers (as the agent's daemon makes itself).
    pub daemon_subreaper: bool,
    /// Programs found on PATH ([`Os::has_program`]).
    pub programs: BTreeSet<String>,
    /// Where workloads write their side-effect files.
    pub side_effect_dir: String,
    /// argv[0] of the agent's roles (daemon, shim).
    pub agent_exe: String,
    /// The environment of exec'd commands.
    pub exec_env: BTreeMap<String, String>,
    /// A bounce keeps the boot id and the start-time clock: a container
    /// restart on the same host (`docker restart`) shares the host kernel,
    /// so only start times and nonces tell a reused pid apart. False: the
    /// sandbox's kernel rebooted (a VM, a replaced sandbox).
    pub bounce_keeps_boot_id: bool,
    /// A writable cgroup v2 directory under which shims make each cell's
    /// own cgroup; `None`: cgroups are not writable (docker's read-only
    /// `/sys/fs/cgroup`) and cells have none.
    pub cgroup_root: Option<String>,
    /// How long a shim takes from its fork to its first step (the exec of
    /// the agent binary): a cancel can land between the daemon's look at
    /// the tombstone and the shim's.
    pub shim_start: std::time::Duration,
    /// Mount points whose filesystem is read-only: nothing under them can
    /// be created or written through [`Os`] (the agent's root on a
    /// read-only mount).
    pub read_only: Vec<String>,
    /// Mount points whose filesystem is `noexec`: a file under them is
    /// written but cannot be run ([`SimOs::can_exec`]; exec gives 126).
    pub noexec: Vec<String>,
    /// An append refused by a full disk may have put part of its bytes
    /// down first (see `disk.rs`).
    pub torn_writes: bool,
    /// Processes due at the same instant run highest pid first (else
    /// lowest first): see `World::high_pids_first`.
    pub high_pids_first: bool,
    /// How late a shell cell shim's poll timeout fires after its deadline
    /// (see `World::timer_slack_ms`).
    pub timer_slack: std::time::Duration,
    /// How long a fresh interpreter takes to its first read of a cell
    /// (see `World::interp_start_ms`).
    pub interp_start: std::time::Duration,
}

impl Default for SimOsConfig {
    fn default() -> Self {
        SimOsConfig {
            seed: 0,
            pid_max: 32_768,
            init_reaps: true,
            daemon_subreaper: true,
            programs: ["sh", "bash", "python3", "setsid", "env", "sleep", "perl"]
                .into_iter()
                .map(str::to_owned)
                .collect(),
            side_effect_dir: "/sim/side-effects".into(),
            agent_exe: "/opt/tether/bin/tether-agent".into(),
            exec_env: BTreeMap::from([
                ("PATH".to_owned(), "/usr/local/bin:/usr/bin:/bin".to_owned()),
                ("HOME".to_owned(), "/root".to_owned()),
            ]),
            bounce_keeps_boot_id: false,
            cgroup_root: Some("/sys/fs/cgroup".into()),
            shim_start: std::time::Duration::ZERO,
            read_only: Vec::new(),
            noexec: Vec::new(),
            torn_writes: false,
            high_pids_first: false,
            timer_slack: std::time::Duration::ZERO,
            interp_start: std::time::Duration::ZERO,
        }
    }
}

/// Is `path` strictly under one of the mount points `mounts`?
fn under_mount(mounts: &[String], path: &str) -> bool {
    mounts.iter().any(|m| {
        path.strip_prefix(m.trim_end_matches('/'))
            .is_some_and(|rest| rest.starts_with('/'))
    })
}

/// A kernel daemon started through [`Os::spawn_daemon`]: the world runs the
/// daemon logic as this process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DaemonSpawn {
    /// Its pid.
    pub pid: Pid,
    /// The kernel directory it serves.
    pub kernel_dir: String,
    /// The nonce in its argv.
    pub nonce: String,
}

/// A public view of one process (for traces, tests and the oracle).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcView {
    /// Its pid.
    pub pid: Pid,
    /// Parent.
    pub ppid: Pid,
    /// Group.
    pub pgid: Pid,
    /// Session.
    pub sid: Pid,
    /// Command line.
    pub argv: Vec<String>,
    /// Environment.
    pub env: BTreeMap<String, String>,
    /// Run state.
    pub state: RunState,
    /// Is it a child subreaper?
    pub subreaper: bool,
    /// Its role.
    pub role: Role,
    /// The cell it was born from (ground truth).
    pub cell: Option<CellRef>,
    /// Its cgroup (`None`: the root one).
    pub cgroup: Option<String>,
}

/// The simulated sandbox.
#[derive(Debug)]
pub struct SimOs {
    config: SimOsConfig,
    now: Timestamp,
    boots: u64,
    boot_id: String,
    boot_at: Timestamp,
    next_pid: Pid,
    /// The pid allocator wrapped at `pid_max` at least once: a pid may
    /// name another process than before without a boot.
    pids_wrapped: bool,
    /// A pid the next birth takes once it is free
    /// ([`SimOs::reuse_pid_next`]).
    reuse_pid: Option<Pid>,
    procs: BTreeMap<Pid, Proc>,
    pipes: BTreeMap<u64, Pipe>,
    next_pipe: u64,
    fs: fs::Fs,
    /// Cgroups that exist (made by shims; gone with a bounce).
    cgroups: BTreeSet<String>,
    current: Pid,
    events: Vec<ProcEvent>,
    daemon_spawns: Vec<DaemonSpawn>,
    /// How many freezes are in force ([`SimOs::freeze`]): while any is,
    /// no process runs.
    frozen: u32,
    /// What cell processes wrote to their stderr, by (kernel directory,
    /// cell seq), over every boot: ground truth for the oracle.
    stderr_written: BTreeMap<(String, u64), Vec<u8>>,
    /// Cells (kernel dir, seq) whose shell ran its TERM trap: they left
    /// their scripted path (the trap may end them early).
    trapped: BTreeSet<(String, u64)>,
    /// When each journal (by path) was first appended a result: ground
    /// truth of when a cell ended on the sandbox.
    results_journaled: BTreeMap<String, Timestamp>,
    /// Tool-call credentials handed out ([`Os::random_token`]).
    tokens: u64,
    /// Paths under which writes fail now ([`SimOs::fill_disk`]).
    disk_full: Vec<String>,
    /// Writes refused by a full disk so far.
    refused_writes: u64,
    /// Refused appends of one line that tore so far.
    line_tears: u64,
    /// Refused appends of several lines that tore so far.
    batch_tears: u64,
    /// A refused append tore since the disk last filled.
    space_ran_out: bool,
    /// Journals removed with their cell (an acknowledged cell) or kernel
    /// whose entries were not contiguous from 1: the sandbox's journal
    /// check could no longer see them.
    removed_journal_gaps: Vec<String>,
    /// Where the disk fills, and at which write
    /// ([`SimOs::fill_disk_at`]).
    fill_at: Option<(String, disk::FillAt)>,
    /// The disk filled at its write since the last
    /// [`SimOs::take_filled_at`].
    filled_at: bool,
    /// Every tool call a simulated caller made (ground truth).
    tool_calls: Vec<caller::ToolCallTruth>,
    /// Every answer file written (ground truth).
    answers: Vec<caller::AnswerWrite>,
    /// Every write of a late printer (ground truth, [`late`]).
    late_writes: Vec<late::LateWrite>,
    /// When each daemon died ([`orphans`]).
    daemon_deaths: BTreeMap<orphans::DaemonId, Timestamp>,
    /// Cells taken by interpreters of dead daemons ([`orphans`]).
    orphan_runs: Vec<orphans::OrphanRun>,
    /// Whether the last shell of each shell cell (by directory) that
    /// ended by itself (its code's end, `exit`, a trapped TERM) saved its
    /// state: ground truth for the oracle's judgment of "not kept" notes.
    /// A shell killed by a signal it does not trap never gets here.
    shell_saves: BTreeMap<String, bool>,
    /// Cells whose main process a shim started though the cell's cancel
    /// was recorded when the shim looked (ground truth, see
    /// `drive_shim`).
    started_after_cancel: Vec<String>,
    /// Processes found spinning ([`SimOs::note_spinning`]).
    spinning: Vec<(Pid, String)>,
    /// Hold the next shell cell's shim before its first look
    /// ([`SimOs::arm_hold`]).
    hold_next_shim: bool,
    /// The shim held so (until [`SimOs::release_held_shim`], or the bound).
    held_shim: Option<Pid>,
    /// The fault `kill_after_write` as every step meets it ([`step_kill`]).
    step_kill: step_kill::StepKill,
}

/// Rounds of "run everything runnable" at one instant before giving up (a
/// runaway loop in the simulation itself).
const ROUND_LIMIT: usize = 10_000;

impl SimOs {
    /// A freshly booted sandbox at time zero: pid 1 and the side-effect
    /// directory.
    pub fn new(config: SimOsConfig) -> SimOs {
        let mut os = SimOs {
            config,
            now: Timestamp::ZERO,
            boots: 0,
            boot_id: String::new(),
            boot_at: Timestamp::ZERO,
            next_pid: 1,
            pids_wrapped: false,
            reuse_pid: None,
            procs: BTreeMap::new(),
            pipes: BTreeMap::new(),
            next_pipe: 0,
            fs: fs::Fs::default(),
            results_journaled: BTreeMap::new(),
            cgroups: BTreeSet::new(),
            current: 1,
            events: Vec::new(),
            daemon_spawns: Vec::new(),
            frozen: 0,
            disk_full: Vec::new(),
            started_after_cancel: Vec::new(),
            spinning: Vec::new(),
            hold_next_shim: false,
            held_shim: None,
            step_kill: step_kill::StepKill::default(),
            refused_writes: 0,
            line_tears: 0,
            batch_tears: 0,
            space_ran_out: false,
            removed_journal_gaps: Vec::new(),
            fill_at: None,
            filled_at: false,
            stderr_written: BTreeMap::new(),
            trapped: BTreeSet::new(),
            tokens: 0,
            tool_calls: Vec::new(),
            answers: Vec::new(),
            late_writes: Vec::new(),
            daemon_deaths: BTreeMap::new(),
            orphan_runs: Vec::new(),
            shell_saves: BTreeMap::new(),
        };
        let dir = os.config.side_effect_dir.clone();
        let _ = os.fs.create_dir_all(&dir);
        os.boot(Vec::new(), true);
        os
    }

    /// The configuration.
    pub fn config(&self) -> &SimOsConfig {
        &self.config
    }

    /// Can the file at `path` be run (it exists and is not on a `noexec`
    /// mount)?
    pub fn can_exec(&self, path: &str) -> bool {
        self.fs.exists(path) && !under_mount(&self.config.noexec, path)
    }

    /// A write to `path` through [`Os`] fails on a read-only mount (EROFS).
    fn writable(&self, path: &str) -> Result<(), OsError> {
        if under_mount(&self.config.read_only, path) {
            return Err(OsError::Other(format!("{path}: read-only file system")));
        }
        Ok(())
    }

    fn boot(&mut self, killed: Vec<Pid>, new_kernel: bool) {
        if new_kernel {
            self.boots += 1;
            self.boot_id = format!(
                "{:08x}-5157-4000-8000-{:012x}",
                (self.config.seed as u32) ^ 0x7e7e_7e7e,
                self.boots
            );
            self.boot_at = self.now;
        }
        self.next_pid = 1;
        self.current = 1;
        self.log(ProcEventKind::Boot {
            boot_id: self.boot_id.clone(),
            killed,
        });
        let mut init = ForkSpec::new(&["/sbin/init"], Program::Init, Role::Init);
        init.env = Some(self.config.exec_env.clone());
        // Pid 1 is always free right after a boot.
        let _ = self.fork(0, init);
    }

    /// Container restart: every process is gone at once (no signals, no
    /// cleanup), files stay, pids start again from 1 so the same spawns get
    /// the same pids as before, and the boot id changes (unless
    /// [`SimOsConfig::bounce_keeps_boot_id`]).
    pub fn bounce(&mut self) {
        let killed: Vec<Pid> = self
            .procs
            .values()
            .filter(|p| p.alive())
            .map(|p| p.pid)
            .collect();
        self.procs.clear();
        self.pipes.clear();
        self.cgroups.clear();
        self.daemon_spawns.clear();
        // A restarted container runs: a freeze ends with its processes.
        self.frozen = 0;
        let new_kernel = !self.config.bounce_keeps_boot_id;
        self.boot(killed, new_kernel);
    }

    /// The sandbox is replaced by a new machine at the same address: every
    /// process and file is gone and the boot id is new, so the agent must be
    /// installed again. Only the side-effect directory survives: it stands
    /// for the world outside the sandbox, which the oracle reads as ground
    /// truth of how often each cell ran.
    pub fn replace(&mut self) {
        let keep = self.config.side_effect_dir.clone();
        self.fs.keep_only(&keep);
        let keeps_boot_id = self.config.bounce_keeps_boot_id;
        self.config.bounce_keeps_boot_id = false;
        self.bounce();
        self.config.bounce_keeps_boot_id = keeps_boot_id;
    }

    /// SIGKILL from outside the sandbox's processes (an OOM killer, a
    /// user's `pkill -9`) to `pid` (a fault).
    pub fn kill_from_outside(&mut self, pid: Pid) {
        let _ = self.deliver(0, pid, SimSignal::Kill);
    }

    /// Removes `path` and everything under it from outside the agent (a
    /// temp cleaner, a user's `rm -rf`).
    pub fn remove_from_outside(&mut self, path: &str) {
        let _ = self.fs.remove_all(path);
    }

    /// SIGTERM from outside (`docker stop`, a host shutdown) to `pid`.
    pub fn term_from_outside(&mut self, pid: Pid) {
        let _ = self.deliver(0, pid, SimSignal::Term);
    }

    /// Takes a TERM the daemon `pid` caught and has not handled yet (the
    /// agent's daemon catches TERM; see [`Os::spawn_daemon`] here).
    pub fn take_caught_term(&mut self, pid: Pid) -> bool {
        match self.procs.get_mut(&pid) {
            Some(p) if p.alive() && matches!(p.role, Role::Daemon { .. }) => {
                std::mem::take(&mut p.trap_pending)
            }
            _ => false,
        }
    }

    /// SIGKILL to the live daemon of `kernel_dir` (a fault). Returns its pid.
    pub fn kill_daemon(&mut self, kernel_dir: &str) -> Option<Pid> {
        let pid = self.daemon_pid(kernel_dir)?;
        let _ = self.deliver(0, pid, SimSignal::Kill);
        Some(pid)
    }

    /// The live daemon serving `kernel_dir`, if any.
    pub fn daemon_pid(&self, kernel_dir: &str) -> Option<Pid> {
        let want = kernel_dir.trim_end_matches('/');
        self.procs
            .values()
            .find(|p| {
                p.alive()
                    && matches!(&p.role, Role::Daemon { kernel_dir } if kernel_dir.trim_end_matches('/') == want)
            })
            .map(|p| p.pid)
    }

    /// Daemons started since the last call (the world runs their logic).
    pub fn take_daemon_spawns(&mut self) -> Vec<DaemonSpawn> {
        std::mem::take(&mut self.daemon_spawns)
    }

    // ---- time ----

    /// The current virtual time.
    pub fn now_ts(&self) -> Timestamp {
        self.now
    }

    /// Sets the clock without running anything (time never goes back).
    pub fn set_now(&mut self, now: Timestamp) {
        self.now = self.now.max(now);
    }

    /// Runs every process that is due up to `now`, in time order, and sets
    /// the clock to `now`.
    pub fn advance(&mut self, now: Timestamp) {
        loop {
            self.run_ready();
            match self.next_wake() {
                Some(t) if t > self.now && t <= now => self.now = t,
                _ => break,
            }
        }
        self.set_now(now);
        self.run_ready();
    }

    /// When a process next has something to do (now, if one is runnable).
    pub fn next_wake(&self) -> Option<Timestamp> {
        if self.is_frozen() {
            return None;
        }
        self.procs
            .values()
            .filter(|p| p.state == RunState::Running)
            .filter_map(|p| self.wake_of(p))
            .min()
    }

    fn wake_of(&self, p: &Proc) -> Option<Timestamp> {
        match &p.program {
            Program::Sleep { until } => Some(*until),
            Program::Caller(c) => c.wake(),
            Program::Shell(shell) => shell.wake(self, p.pid),
            Program::Shim(shim) => shim.wake(self, p.pid),
            Program::Python(py) => py.wake(self, p.pid),
            Program::Init | Program::External | Program::Running => None,
        }
    }

    fn run_ready(&mut self) {
        if self.is_frozen() {
            return;
        }
        for _ in 0..ROUND_LIMIT {
            let mut due: Vec<Pid> = self
                .procs
                .values()
                .filter(|p| p.state == RunState::Running)
                .filter(|p| self.wake_of(p).is_some_and(|t| t <= self.now))
                .map(|p| p.pid)
                .collect();
            if self.config.high_pids_first {
                due.reverse();
            }
            let mut progress = false;
            for &pid in &due {
                progress |= self.run_proc(pid);
            }
            if !progress {
                self.note_spinning(&due);
                return;
            }
        }
    }

    /// Processes due now that did nothing when run and are due still: a
    /// real one would be woken again at once, for ever (a busy loop the
    /// simulation's stepping would otherwise hide). Each noted once.
    fn note_spinning(&mut self, due: &[Pid]) {
        for &pid in due {
            let Some(p) = self.procs.get(&pid) else {
                continue;
            };
            // Still due: one that did nothing but pushed its wake-up on
            // (a paced look) is not spinning.
            let still_due = self.wake_of(p).is_some_and(|t| t <= self.now);
            if p.state != RunState::Running
                || !still_due
                || self.spinning.iter().any(|(s, _)| *s == pid)
            {
                continue;
            }
            let what = p.argv.first().cloned().unwrap_or_default();
            let mode = p.argv.get(1).cloned().unwrap_or_default();
            self.spinning.push((
                pid,
                format!(
                    "process {pid} ({what} {mode}) asked to be woken at {:?} and did nothing when run: a busy loop",
                    self.now
                ),
            ));
        }
    }

    /// What [`SimOs::note_spinning`] found.
    pub fn spinning(&self) -> impl Iterator<Item = &String> {
        self.spinning.iter().map(|(_, s)| s)
    }

    fn run_proc(&mut self, pid: Pid) -> bool {
        let Some(p) = self.procs.get(&pid) else {
            return false;
        };
        if p.state != RunState::Running {
            return false;
        }
        match &p.program {
            Program::Sleep { until } => {
                if *until <= self.now {
                    self.exit_proc(pid, ExitStatus::Code(0));
                    true
                } else {
                    false
                }
            }
            Program::Shell(_) => self.run_shell(pid),
            Program::Caller(_) => self.run_caller(pid),
            Program::Shim(_) => self.run_shim(pid),
            Program::Python(_) => self.run_python(pid),
            Program::Init | Program::External | Program::Running => false,
        }
    }

    // ---- who is calling ----

    /// The process the [`Os`] methods act as.
    pub fn current(&self) -> Pid {
        self.current
    }

    /// Acts as `pid` from now on (an op command, a daemon).
    pub fn set_current(&mut self, pid: Pid) {
        self.current = pid;
    }

    /// An exec call arrives: its command becomes a process (from outside
    /// the sandbox's pid namespace, own session), and the current one.
    pub fn begin_exec(&mut self, argv: &[String]) -> Result<Pid, OsError> {
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        let mut spec = ForkSpec::new(&argv, Program::External, Role::Exec);
        spec.env = Some(self.config.exec_env.clone());
        let pid = self.fork(0, spec)?;
        self.current = pid;
        Ok(pid)
    }

    /// The exec call's command exits with `code` (reaped by the runtime
    /// outside the sandbox; what it spawned is reparented).
    pub fn end_exec(&mut self, pid: Pid, code: i32) {
        self.exit_proc(pid, ExitStatus::Code(code));
        if self.current == pid {
            self.current = 1;
        }
    }

    /// `pid` exits by itself with `code` (a daemon's idle exit).
    pub fn exit_process(&mut self, pid: Pid, code: i32) {
        self.exit_proc(pid, ExitStatus::Code(code));
    }

    // ---- observation (ground truth, for the oracle and traces) ----

    /// Live (not zombie) pids, sorted.
    pub fn alive_pids(&self) -> Vec<Pid> {
        self.procs
            .values()
            .filter(|p| p.alive())
            .map(|p| p.pid)
            .collect()
    }

    /// Is `pid` alive (not a zombie)?
    pub fn is_alive(&self, pid: Pid) -> bool {
        self.procs.get(&pid).is_some_and(|p| p.alive())
    }

    /// One process, for inspection.
    pub fn view(&self, pid: Pid) -> Option<ProcView> {
        self.procs.get(&pid).map(|p| ProcView {
            pid: p.pid,
            ppid: p.ppid,
            pgid: p.pgid,
            sid: p.sid,
            argv: p.argv.clone(),
            env: p.env.clone(),
            state: p.state,
            subreaper: p.subreaper,
            role: p.role.clone(),
            cell: p.origin.clone(),
            cgroup: p.cgroup.clone(),
        })
    }

    /// Live processes born from cell `seq` of `kernel` (the kernel
    /// directory, or its last component), whatever they did to their
    /// group, session or environment. The shim is not one of them.
    pub fn processes_of_cell(&self, kernel: &str, seq: u64) -> Vec<Pid> {
        let kernel = kernel.trim_end_matches('/');
        self.procs
            .values()
            .filter(|p| p.alive() && p.role == Role::Cell)
            .filter(|p| {
                p.origin.as_ref().is_some_and(|c| {
                    c.seq == Some(seq)
                        && (c.kernel_dir == kernel
                            || c.kernel_dir.rsplit('/').next() == Some(kernel))
                })
            })
            .map(|p| p.pid)
            .collect()
    }

    /// Live processes of any cell (ground truth).
    pub fn cell_processes(&self) -> Vec<(Pid, CellRef)> {
        self.procs
            .values()
            .filter(|p| p.alive() && p.role == Role::Cell)
            .filter_map(|p| p.origin.clone().map(|c| (p.pid, c)))
            .collect()
    }

    /// Whether the last shell of the cell at `cell_dir` that ended by
    /// itself saved its state (`None`: none did, or a signal killed it).
    pub fn shell_saved(&self, cell_dir: &str) -> Option<bool> {
        self.shell_saves.get(cell_dir).copied()
    }

    /// Every shell cell's directory whose last shell ended by itself, and
    /// whether it saved its state.
    pub fn shell_saves(&self) -> &BTreeMap<String, bool> {
        &self.shell_saves
    }

    /// Live shims (pid and cell directory).
    pub fn shims(&self) -> Vec<(Pid, String)> {
        self.procs
            .values()
            .filter(|p| p.alive() && p.role == Role::Shim)
            .map(|p| {
                let dir = match &p.program {
                    Program::Shim(s) => s.cell_dir().to_owned(),
                    _ => String::new(),
                };
                (p.pid, dir)
            })
            .collect()
    }

    /// Everything the processes of cell `seq` of the kernel at
    /// `kernel_dir` wrote to their stderr (the cell's pipe).
    pub fn stderr_written(&self, kernel_dir: &str, seq: u64) -> Vec<u8> {
        self.stderr_written
            .get(&(kernel_dir.to_owned(), seq))
            .cloned()
            .unwrap_or_default()
    }

    /// Did a shell of the cell `seq` of `kernel_dir` run its TERM trap?
    pub fn ran_term_trap(&self, kernel_dir: &str, seq: u64) -> bool {
        self.trapped.contains(&(kernel_dir.to_owned(), seq))
    }

    /// Lines in side-effect file `name` (how many times it was written).
    pub fn side_effect_count(&self, name: &str) -> usize {
        let path = format!("{}/{name}", self.config.side_effect_dir);
        self.fs
            .read(&path)
            .map(|b| b.iter().filter(|&&c| c == b'\n').count())
            .unwrap_or(0)
    }

    /// Every event so far.
    pub fn events(&self) -> &[ProcEvent] {
        &self.events
    }

    /// Takes the events logged since the last call.
    pub fn take_events(&mut self) -> Vec<ProcEvent> {
        std::mem::take(&mut self.events)
    }

    /// Is there a directory at `path`?
    pub fn is_dir(&self, path: &str) -> bool {
        self.fs.is_dir(path)
    }

    /// `rmdir`: removes the directory at `path` if it is empty (absent is
    /// fine).
    pub fn remove_empty_dir(&mut self, path: &str) -> Result<(), OsError> {
        match self.fs.list_dir(path) {
            Ok(names) if !names.is_empty() => {
                Err(OsError::Other(format!("rmdir {path}: directory not empty")))
            }
            Ok(_) => self.fs.remove_all(path),
            Err(OsError::NotFound) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Every file under `dir`, recursively, sorted.
    pub fn files_under(&self, dir: &str) -> Vec<String> {
        self.fs.files_under(dir)
    }

    /// Checks the journals a removal of `path` takes with it (a cell's
    /// directory, or a kernel's with its cells): the cell's journal must
    /// have held its entries contiguous from 1 to the end.
    fn judge_removed_journals(&mut self, path: &str) {
        let path = path.trim_end_matches('/');
        let mut journals = vec![format!("{path}/journal")];
        let cells = format!("{path}/cells");
        for seq in self.fs.list_dir(&cells).unwrap_or_default() {
            journals.push(format!("{cells}/{seq}/journal"));
        }
        for journal in journals {
            let Ok(bytes) = self.fs.read(&journal) else {
                continue;
            };
            let read = tether_core::protocol::parse_journal(&bytes);
            if let Some(gap) = crate::sandbox::journal_gap(&read) {
                self.removed_journal_gaps
                    .push(format!("{journal}, removed: {gap}"));
            }
        }
    }

    /// What [`SimOs::judge_removed_journals`] found.
    pub fn removed_journal_gaps(&self) -> &[String] {
        &self.removed_journal_gaps
    }

    /// How many journals have been appended a result so far.
    pub fn results_journaled(&self) -> usize {
        self.results_journaled.len()
    }

    /// When the journal at `path` was first appended a result, if ever.
    pub fn result_journaled_at(&self, path: &str) -> Option<Timestamp> {
        self.results_journaled.get(path).copied()
    }

    /// Cancel tombstones the agent wrote over (see `fs::Fs`).
    pub fn tombstones_replaced(&self) -> &[String] {
        self.fs.tombstones_replaced()
    }

    /// Paths the agent asked for that were not absolute (a bug of the
    /// agent, see `fs::Fs`).
    pub fn relative_paths(&self) -> Vec<String> {
        self.fs.relative_paths()
    }

    /// The current boot id.
    pub fn current_boot_id(&self) -> &str {
        &self.boot_id
    }

    /// Has the pid allocator wrapped (pids reused without a boot)?
    pub fn pids_wrapped(&self) -> bool {
        self.pids_wrapped
    }

    /// Cgroups that exist now, sorted (a leak check: none should be left
    /// once a kernel is shut down).
    pub fn cgroups(&self) -> Vec<String> {
        self.cgroups.iter().cloned().collect()
    }

    /// Makes the cgroup `name` under the cgroup of `pid` (a shim), if
    /// cgroups are writable here ([`SimOsConfig::cgroup_root`]). Returns
    /// its path.
    pub(crate) fn make_cgroup(&mut self, pid: Pid, name: &str) -> Option<String> {
        let root = self.config.cgroup_root.clone()?;
        let parent = self
            .procs
            .get(&pid)
            .and_then(|p| p.cgroup.clone())
            .unwrap_or(root);
        let path = format!("{parent}/{name}");
        self.cgroups.insert(path.clone());
        Some(path)
    }

    /// Moves `pid` back into the cgroup of `home` (the Python interpreter's
    /// shim), as writing its pid to the shim's own `cgroup.procs` does.
    pub(crate) fn join_cgroup_of(&mut self, pid: Pid, home: Pid) {
        let group = self.procs.get(&home).and_then(|p| p.cgroup.clone());
        if let Some(p) = self.procs.get_mut(&pid).filter(|p| p.alive()) {
            p.cgroup = group;
        }
    }

    /// Moves `pid` into the existing cgroup `group` (writing its
    /// `cgroup.procs`).
    pub(crate) fn join_cgroup(&mut self, pid: Pid, group: &str) -> Result<(), OsError> {
        if !self.cgroups.contains(group) {
            return Err(OsError::NotFound);
        }
        let p = self.procs.get_mut(&pid).ok_or(OsError::NotFound)?;
        p.cgroup = Some(group.to_owned());
        Ok(())
    }
}

impl Os for SimOs {
    /// A TERM the calling daemon trapped and has not acted on yet (it
    /// acts between ticks: [`SimOs::take_caught_term`]).
    fn stop_requested(&self) -> bool {
        self.procs
            .get(&self.current)
            .is_some_and(|p| p.alive() && matches!(p.role, Role::Daemon { .. }) && p.trap_pending)
    }
    fn now(&self) -> Timestamp {
        self.now
    }

    fn boot_id(&self) -> Result<String, OsError> {
        Ok(self.boot_id.clone())
    }

    fn self_pid(&self) -> Pid {
        self.current
    }

    fn read_file(&self, path: &str) -> Result<Vec<u8>, OsError> {
        self.fs.read(path)
    }

    fn create_new(&mut self, path: &str, data: &[u8]) -> Result<(), OsError> {
        self.refuse_if_stopped()?;
        self.disk_write(path, data, WriteMode::CreateNew)?;
        if path.ends_with(".ans") {
            self.note_answer(path);
        }
        self.note_write(path);
        Ok(())
    }

    fn write_atomic(&mut self, path: &str, data: &[u8]) -> Result<(), OsError> {
        self.refuse_if_stopped()?;
        self.disk_write(path, data, WriteMode::Replace)?;
        if path.ends_with(".ans") {
            self.note_answer(path);
        }
        self.note_write(path);
        Ok(())
    }

    fn append(&mut self, path: &str, data: &[u8]) -> Result<(), OsError> {
        self.refuse_if_stopped()?;
        let result = disk::is_result_append(path, data);
        self.disk_write(path, data, WriteMode::Append)?;
        if result && !self.results_journaled.contains_key(path) {
            self.results_journaled.insert(path.to_owned(), self.now);
        }
        self.note_write(path);
        Ok(())
    }

    fn exists(&self, path: &str) -> bool {
        self.fs.exists(path)
    }

    fn list_dir(&self, path: &str) -> Result<Vec<String>, OsError> {
        self.fs.list_dir(path)
    }

    fn create_dir_all(&mut self, path: &str) -> Result<(), OsError> {
        self.refuse_if_stopped()?;
        self.writable(path)?;
        self.fs.create_dir_all(path)
    }

    fn create_dir(&mut self, path: &str) -> Result<(), OsError> {
        self.refuse_if_stopped()?;
        self.writable(path)?;
        self.fs.create_dir(path)
    }

    fn remove_all(&mut self, path: &str) -> Result<(), OsError> {
        self.refuse_if_stopped()?;
        self.judge_removed_journals(path);
        self.fs.remove_all(path)
    }

    fn process(&self, pid: Pid) -> Option<ProcInfo> {
        self.procs.get(&pid).map(info)
    }

    fn processes(&self) -> Vec<ProcInfo> {
        self.procs.values().map(info).collect()
    }

    fn has_env(&self, pid: Pid, name: &str, value: &str) -> bool {
        self.procs
            .get(&pid)
            .is_some_and(|p| p.alive() && p.env.get(name).is_some_and(|v| v == value))
    }

    fn env_var(&self, pid: Pid, name: &str) -> Option<String> {
        self.procs
            .get(&pid)
            .filter(|p| p.alive())
            .and_then(|p| p.env.get(name).cloned())
    }

    fn has_arg(&self, pid: Pid, arg: &str) -> bool {
        self.procs
            .get(&pid)
            .is_some_and(|p| p.alive() && p.argv.iter().any(|a| a == arg))
    }

    /// Live members of an existing cgroup, by pid (an exited process has
    /// left its cgroup, as on Linux).
    fn cgroup_members(&self, group: &str) -> Vec<Pid> {
        if !self.cgroups.contains(group) {
            return Vec::new();
        }
        self.procs
            .values()
            .filter(|p| p.alive() && p.cgroup.as_deref() == Some(group))
            .map(|p| p.pid)
            .collect()
    }

    /// `rmdir`: only a cgroup without live members (nor child cgroups)
    /// goes.
    fn remove_cgroup(&mut self, group: &str) -> Result<(), OsError> {
        self.refuse_if_stopped()?;
        if !self.cgroups.contains(group) {
            return Ok(());
        }
        let child = format!("{group}/");
        if !self.cgroup_members(group).is_empty()
            || self.cgroups.iter().any(|g| g.starts_with(&child))
        {
            return Err(OsError::Other(format!("rmdir {group}: EBUSY")));
        }
        self.cgroups.remove(group);
        Ok(())
    }

    /// As `kill(2)` on one pid; pid 0 is refused (it would mean the
    /// caller's group).
    fn signal(&mut self, pid: Pid, signal: Signal) -> Result<(), OsError> {
        self.refuse_if_stopped()?;
        if pid == 0 {
            return Err(OsError::Other("refusing to signal pid 0".into()));
        }
        self.deliver(self.current, pid, signal.into()).map(|_| ())
    }

    fn spawn_daemon(&mut self, kernel_dir: &str, nonce: &str) -> Result<Pid, OsError> {
        self.refuse_if_stopped()?;
        let exe = self.config.agent_exe.clone();
        let [a, b, c, d, e] = tether_core::agent::kernel::daemon_args(kernel_dir, nonce);
        let mut spec = ForkSpec::new(
            &[&exe, &a, &b, &c, &d, &e],
            Program::External,
            Role::Daemon {
                kernel_dir: kernel_dir.trim_end_matches('/').to_owned(),
            },
        );
        spec.new_session = true;
        spec.stdio = Some((process::Fd::Null, process::Fd::Null));
        let pid = self.fork(self.current, spec)?;
        if let Some(p) = self.procs.get_mut(&pid) {
            p.subreaper = self.config.daemon_subreaper;
            // The agent resets every disposition for its roles; the
            // daemon catches TERM (its stop, `Daemon::terminate`), which
            // the sandbox host takes with `take_caught_term`.
            p.term = process::Disposition::Trap(Vec::new());
            p.int = process::Disposition::Default;
            p.hup = process::Disposition::Default;
        }
        self.daemon_spawns.push(DaemonSpawn {
            pid,
            kernel_dir: kernel_dir.to_owned(),
            nonce: nonce.to_owned(),
        });
        // Named as a write, for a kill right after it (see `preempt`).
        self.note_write(&format!(
            "{}/{}",
            kernel_dir.trim_end_matches('/'),
            preempt::DAEMON_STARTED
        ));
        Ok(pid)
    }

    fn spawn_cell(&mut self, launch: &CellLaunch) -> Result<Pid, OsError> {
        self.refuse_if_stopped()?;
        let exe = self.config.agent_exe.clone();
        let json = serde_json::json!({
            "kernel_dir": launch.kernel_dir,
            "cell_dir": launch.cell_dir,
            "lang": launch.lang,
            "argv": launch.argv,
            "marker": [launch.marker.0, launch.marker.1],
        })
        .to_string();
        let held = launch.lang == tether_core::protocol::Lang::Shell
            && std::mem::take(&mut self.hold_next_shim);
        let start_at = if held {
            self.now + shim::HOLD_BOUND
        } else {
            self.now + self.config.shim_start
        };
        let program = Program::Shim(Box::new(shim::Shim::new(launch.clone(), start_at)));
        let mut spec = ForkSpec::new(&[&exe, "shim", "--launch", &json], program, Role::Shim);
        spec.stdio = Some((process::Fd::Null, process::Fd::Null));
        let pid = self.fork(self.current, spec)?;
        if held {
            self.held_shim = Some(pid);
        }
        if let Some(p) = self.procs.get_mut(&pid) {
            p.term = process::Disposition::Default;
            p.int = process::Disposition::Default;
            p.hup = process::Disposition::Default;
        }
        self.note_write(&format!(
            "{}/{}",
            launch.cell_dir.trim_end_matches('/'),
            preempt::SHIM_STARTED
        ));
        Ok(pid)
    }

    fn random_token(&mut self) -> String {
        // Deterministic (a seed replays); no simulated process guesses it.
        self.tokens += 1;
        format!("{:016x}{:08x}", self.config.seed, self.tokens)
    }

    fn has_program(&self, program: &str) -> bool {
        let name = program.rsplit('/').next().unwrap_or(program);
        self.config.programs.contains(name)
    }
}

fn info(p: &Proc) -> ProcInfo {
    ProcInfo {
        pid: p.pid,
        ppid: p.ppid,
        pgid: p.pgid,
        sid: p.sid,
        starttime: p.starttime,
        zombie: !p.alive(),
    }
}
