//! Faults on the sandbox's own processes, from outside the agent: SIGKILL
//! to shims, interpreters (an OOM killer, a user's `pkill -9`), SIGTERM to
//! kernel daemons (`docker stop`, a host shutdown), the whole sandbox
//! frozen and thawed (`docker pause`). Op processes are killed where the
//! exec server runs them ([`super::handle`]).
//!
//! Ground truth for the stop: what each TERMed kernel owned when the TERM
//! landed, looked at again when its daemon exits, or once its grace
//! period and a stated slack have passed (frozen time not counted),
//! whichever comes first: whatever still runs then was left behind,
//! orphaned ([`Sandbox::term_survivors`]). A daemon killed during its stop
//! (a fault) is excused: what it owned is orphaned by the kill. A stopped
//! daemon that exits must also leave no cell of its kernel open (its last
//! act resolves them with the stop), unless a write was refused.

use super::Sandbox;
use tether_scenarios::faults::{DISK_FULL_AT_RESULT_WITHIN_MS, KILL_AFTER_WRITE_WITHIN_MS};

/// How long after a shim's death its daemon may take to record what came
/// back to it: a tick (10 ms) stretched by a preemption (up to about
/// 90 ms here).
const RECORD_WINDOW_MS: u64 = 100;
use crate::os::disk::FillAt;
use crate::os::{ProcView, Role};
use std::collections::BTreeSet;
use tether_core::agent::layout::KernelLayout;
use tether_core::agent::{Os, Pid};
use tether_core::ids::CellSeq;

/// How long after a stopped kernel's grace period its processes may still
/// be dying: the exit sweep's STOP + KILL rounds, a tick apart.
pub const STOP_SLACK_MS: u64 = 1_000;

/// A cell a stopped daemon left open that no shim had taken (see
/// [`Sandbox::check_left_open`]).
#[derive(Clone, Debug)]
pub(crate) struct LeftOpen {
    kernel_dir: String,
    seq: u64,
    /// Its submission then (a withdrawn cell's goes; a later cell of the
    /// same number has another).
    submission: Vec<u8>,
    at_ms: u64,
}

/// What a TERMed kernel owned, to be looked at again at `due_ms`.
#[derive(Clone, Debug)]
pub(super) struct TermCheck {
    kernel_dir: String,
    at_ms: u64,
    due_ms: u64,
    /// (pid, start time, what it is).
    owned: Vec<(Pid, u64, String)>,
}

impl Sandbox {
    /// SIGKILL from outside to every live shim (cell shims and interpreter
    /// shims); returns their pids.
    pub fn kill_shims(&mut self) -> Vec<Pid> {
        let shims = self.os.shims();
        for (pid, cell_dir) in &shims {
            self.kill_shim(*pid, cell_dir);
        }
        let pids: Vec<Pid> = shims.into_iter().map(|(pid, _)| pid).collect();
        self.flush_events();
        pids
    }

    /// Kills the shim `pid` of the cell (or interpreter) at `cell_dir`
    /// from outside, with what the judgment of its cell needs.
    fn kill_shim(&mut self, pid: Pid, cell_dir: &str) {
        // Before the kill: a shim that had not journaled its cell's
        // result had not promoted the state its shell saved either.
        let journal = tether_core::agent::layout::CellLayout::from_dir(cell_dir).journal();
        let had_result =
            tether_core::agent::journal::read_journal(&self.os, &journal).is_ok_and(|r| {
                r.entries
                    .iter()
                    .any(|e| matches!(e.kind, tether_core::protocol::EntryKind::Result { .. }))
            });
        self.note_shim_orphans(pid);
        self.os.kill_from_outside(pid);
        // `…/kernels/K/cells/N`: what its pipes held is lost.
        let kernel = cell_dir.rsplit('/').nth(2).unwrap_or_default().to_owned();
        self.note_lossy(Some(&kernel), format!("its shim {pid} was killed"));
        // A cell shim's (an interpreter shim's directory names no cell):
        // its daemon may end what the cell still runs.
        let seq = cell_dir.rsplit('/').next().and_then(|n| n.parse().ok());
        if let Some(seq) = seq {
            if !had_result {
                let at = self.virtual_ms(self.os.now_ts());
                self.state_loss_causes
                    .entry((kernel.clone(), seq))
                    .or_default()
                    .push(format!(
                        "its shim {pid} was killed before its result at {at} ms"
                    ));
            }
            self.shim_killed_cells.insert((kernel, seq));
        }
    }

    /// Runs the simulated OS's processes up to `now`, shims meeting an
    /// armed `kill_after_write` there (a shim stopped after its write is
    /// killed at once, as a shim kill is).
    pub(super) fn run_processes(&mut self, now: tether_core::time::Timestamp) {
        let now_ms = self.virtual_ms(now);
        let armed = self.preempter.armed_kill(now_ms);
        self.os.arm_kill_after_write(armed);
        self.os.advance(now);
        self.os.arm_kill_after_write(None);
        if let Some((pid, name)) = self.os.take_stopped_at_write() {
            self.preempter.disarm_after_write();
            let cell_dir = self
                .os
                .shims()
                .into_iter()
                .find(|(p, _)| *p == pid)
                .map(|(_, dir)| dir)
                .unwrap_or_default();
            self.trace.at(
                now_ms,
                "sandbox",
                format!("shim {pid} KILLED after its write of {name} (fault)"),
            );
            self.kill_shim(pid, &cell_dir);
            self.kills_met.push((now_ms, name));
            self.flush_events();
        }
    }

    /// Before shim `shim` is killed: its untraceable children (a `setsid
    /// env -i` daemon come back to it) are found later only by a record
    /// (`leftovers/orphan-*.json`), which the shim writes at its paced
    /// look and its daemon when they come back to it. With no live daemon
    /// above the shim, they go to PID 1 now; with one, they are at risk
    /// until its next tick ([`Sandbox::note_daemon_killed`]).
    fn note_shim_orphans(&mut self, shim: Pid) {
        let now = self.running_ms();
        let daemon = self.os.view(shim).map(|v| v.ppid).filter(|&p| {
            self.os
                .view(p)
                .is_some_and(|v| matches!(v.role, Role::Daemon { .. }))
        });
        for child in self.os.children_of(shim) {
            if !self.untraceable.contains(&child) {
                continue;
            }
            match daemon {
                // Unless the shim recorded it before (its own paced look;
                // a full disk may have refused that record).
                None if !self.orphan_recorded(child) => {
                    self.unrecordable.insert(child);
                }
                None => {}
                Some(d) => self.shim_orphans.push((child, now, d)),
            }
        }
    }

    /// Whether a kernel holds a record of `child` as an orphan a shim
    /// kept (`leftovers/orphan-<pid>.json`).
    fn orphan_recorded(&self, child: Pid) -> bool {
        let kernels = format!("{}/kernels", self.root);
        self.os
            .list_dir(&kernels)
            .unwrap_or_default()
            .iter()
            .any(|k| {
                self.os
                    .exists(&format!("{kernels}/{k}/leftovers/orphan-{child}.json"))
            })
    }

    /// Virtual ms the sandbox ran (was not frozen) so far: a frozen
    /// daemon records nothing (python_orphans seed 100946: shim and daemon
    /// both killed during one freeze, 2 s apart).
    fn running_ms(&self) -> u64 {
        let now = self.virtual_ms(self.os.now_ts());
        let frozen_now = self.frozen_since_ms.map_or(0, |s| now.saturating_sub(s));
        now.saturating_sub(self.frozen_ms + frozen_now)
    }

    /// A daemon killed within [`RECORD_WINDOW_MS`] of running time after
    /// one of its shims: what that shim's death gave it may have no record
    /// yet.
    pub(crate) fn note_daemon_killed(&mut self, daemon: Pid) {
        let now = self.running_ms();
        for &(child, at, d) in &self.shim_orphans {
            if d == daemon && now <= at + RECORD_WINDOW_MS {
                self.unrecordable.insert(child);
            }
        }
    }

    /// SIGKILL from outside to every live Python interpreter; returns their
    /// pids.
    pub fn kill_interpreters(&mut self) -> Vec<Pid> {
        let pids: Vec<Pid> = self
            .os
            .alive_pids()
            .into_iter()
            .filter(|&pid| {
                self.os
                    .view(pid)
                    .is_some_and(|v| v.role == Role::Interpreter)
            })
            .collect();
        for &pid in &pids {
            self.os.kill_from_outside(pid);
        }
        self.flush_events();
        pids
    }

    /// SIGTERM from outside to every live kernel daemon; returns their
    /// pids. What each kernel owns now is kept, to be looked at again once
    /// its stop is over.
    pub fn term_daemons(&mut self, now_ms: u64) -> Vec<Pid> {
        let daemons: Vec<(Pid, String)> = self
            .daemons
            .iter()
            .filter(|(&pid, _)| self.os.is_alive(pid))
            .map(|(&pid, run)| (pid, run.kernel_dir.clone()))
            .collect();
        // A frozen daemon catches the TERM at the thaw: its grace period
        // starts then (the freeze put off the looks of earlier stops by as
        // long, see `freeze`).
        let caught_ms = self.frozen_until_ms.map_or(now_ms, |t| t.max(now_ms));
        for (pid, kernel_dir) in &daemons {
            let owned = self.owned_by_kernel(*pid, kernel_dir);
            self.term_checks.push(TermCheck {
                kernel_dir: kernel_dir.clone(),
                at_ms: now_ms,
                due_ms: caught_ms
                    .saturating_add(self.grace_ms)
                    .saturating_add(STOP_SLACK_MS),
                owned,
            });
            self.os.term_from_outside(*pid);
            let kernel = super::kernel_name(kernel_dir);
            self.termed_kernels.insert(kernel.clone());
            self.note_lossy(Some(&kernel), format!("its daemon {pid} got SIGTERM"));
        }
        self.flush_events();
        daemons.into_iter().map(|(pid, _)| pid).collect()
    }

    /// Freezes the sandbox; a stop's look is put off by as long.
    pub fn freeze(&mut self, now_ms: u64, for_ms: u64) {
        self.advance(now_ms);
        if !self.os.is_frozen() {
            self.frozen_since_ms = Some(now_ms);
        }
        self.os.freeze();
        let until = now_ms.saturating_add(for_ms);
        self.frozen_until_ms = Some(self.frozen_until_ms.map_or(until, |t| t.max(until)));
        for c in &mut self.term_checks {
            c.due_ms = c.due_ms.saturating_add(for_ms);
        }
    }

    /// Ends a freeze and runs what is due.
    pub fn thaw(&mut self, now_ms: u64) {
        self.os.thaw();
        if !self.os.is_frozen() {
            if let Some(since) = self.frozen_since_ms.take() {
                self.frozen_ms += now_ms.saturating_sub(since);
            }
        }
        self.frozen_until_ms = None;
        self.advance(now_ms);
    }

    /// The disk under the kernels is full from now on (a fault).
    pub fn fill_disk(&mut self, now_ms: u64) {
        self.advance(now_ms);
        let kernels = format!("{}/kernels", self.root);
        self.os.fill_disk(&kernels);
        self.note_lossy(None, "the disk was full".into());
    }

    /// The faults `DiskFull { at_result: true }` and `DiskFullAtWrite`:
    /// the disk under the kernels fills at the next write `at` names (a
    /// result appended to a journal, a file of that name written), or
    /// when [`DISK_FULL_AT_RESULT_WITHIN_MS`] pass without one, for
    /// `for_ms`. One at a time: another while one is armed or in force is
    /// dropped.
    pub fn fill_disk_at(&mut self, now_ms: u64, for_ms: u64, at: FillAt) {
        self.advance(now_ms);
        if self.armed_fill.is_some() {
            self.trace.at(
                now_ms,
                "fault",
                format!(
                    "a disk filling at {} is under way already; dropped",
                    at.describe()
                ),
            );
            return;
        }
        let kernels = format!("{}/kernels", self.root);
        self.os.fill_disk_at(&kernels, at.clone());
        self.note_lossy(None, "the disk was full".into());
        self.armed_fill = Some(ArmedFill {
            at,
            for_ms,
            deadline_ms: now_ms.saturating_add(DISK_FULL_AT_RESULT_WITHIN_MS),
            filled_ms: None,
        });
    }

    /// The fault `PauseAfterWrite`: the next agent step that writes a
    /// file named `file…` (within [`DISK_FULL_AT_RESULT_WITHIN_MS`])
    /// stalls right after the write for `for_ms`.
    pub fn pause_after_write(&mut self, now_ms: u64, file: &str, for_ms: u64) {
        self.advance(now_ms);
        let until_ms = now_ms.saturating_add(DISK_FULL_AT_RESULT_WITHIN_MS);
        self.preempter
            .arm_after_write(file, std::time::Duration::from_millis(for_ms), until_ms);
    }

    /// The fault `KillAfterWrite`: the next daemon tick or op poll that
    /// writes a file named `file…` (within [`KILL_AFTER_WRITE_WITHIN_MS`])
    /// is killed right after the write.
    pub fn kill_after_write(&mut self, now_ms: u64, file: &str) {
        self.advance(now_ms);
        let until_ms = now_ms.saturating_add(KILL_AFTER_WRITE_WITHIN_MS);
        self.preempter.arm_kill_after_write(file, until_ms);
    }

    /// Fills the disk armed by [`Sandbox::fill_disk_at`] at its deadline
    /// (the write it waits for did not come), and frees it when its time
    /// is over.
    pub(super) fn advance_armed_fill(&mut self, now_ms: u64) {
        let Some(armed) = self.armed_fill.as_mut() else {
            return;
        };
        if armed.filled_ms.is_none() {
            if self.os.take_filled_at() {
                armed.filled_ms = Some(now_ms);
                let what = armed.at.describe();
                self.trace
                    .at(now_ms, "fault", format!("the disk filled before {what}"));
            } else if now_ms >= armed.deadline_ms {
                armed.filled_ms = Some(now_ms);
                self.os.disarm_fill_at();
                let kernels = format!("{}/kernels", self.root);
                self.os.fill_disk(&kernels);
                self.trace.at(
                    now_ms,
                    "fault",
                    "the write it waited for did not come in time; the disk fills now".to_owned(),
                );
            }
        }
        let Some(armed) = self.armed_fill.as_ref() else {
            return;
        };
        if armed
            .filled_ms
            .is_some_and(|f| now_ms >= f.saturating_add(armed.for_ms))
        {
            self.armed_fill = None;
            self.os.free_disk();
            self.trace.at(
                now_ms,
                "fault",
                format!(
                    "disk filled at a write has room again ({} writes refused so far)",
                    self.os.refused_writes()
                ),
            );
        }
    }

    /// Removes every kernel's directory from outside (a temp cleaner);
    /// returns the daemons alive then, whose kernels are lost.
    pub fn wipe_kernel_dirs(&mut self, now_ms: u64) -> Vec<Pid> {
        self.advance(now_ms);
        let kernels = format!("{}/kernels", self.root);
        let mut daemons = Vec::new();
        for name in self.os.list_dir(&kernels).unwrap_or_default() {
            let dir = format!("{kernels}/{name}");
            // The documented limit (client/README.md, "Known limit of
            // shutdown"): what only the files going now named. Processes:
            // what the kernel runs outside its live daemon's and its
            // shims' trees (what an earlier daemon or a killed shim left
            // to PID 1). Cgroups: those its files name (an earlier
            // daemon's cells' too, python_orphans seed 100285) and those
            // of its nonce (a shim's cgroup is named to its daemon by a file; one the
            // daemon had not read yet, as tool_calls seed 103399's, whose
            // shim was ended before it could remove it).
            let mut held = match self.os.daemon_pid(&dir) {
                Some(pid) => {
                    daemons.push(pid);
                    self.wiped.daemons.insert(pid);
                    self.tree_of(pid)
                }
                None => BTreeSet::new(),
            };
            // A lingering shim ends its own tree once its kernel's config
            // is gone.
            let inside = format!("{dir}/");
            for (shim, cell_dir) in self.os.shims() {
                if cell_dir.starts_with(&inside) {
                    held.extend(self.tree_of(shim));
                    self.wiped.shims.insert(shim, cell_dir.clone());
                }
            }
            let unnamed: Vec<Pid> = self
                .of_kernel_dir(&dir)
                .into_iter()
                .filter(|p| !held.contains(p))
                .collect();
            self.wiped.unnamed.extend(unnamed);
            let layout = KernelLayout::new(&dir);
            self.wiped
                .unnamed_cgroups
                .extend(tether_core::agent::op::named_cgroups(&self.os, &layout));
            if let Ok(Some(c)) = tether_core::agent::kernel::read_json::<
                tether_core::agent::kernel::KernelConfig,
            >(&self.os, &layout.config())
            {
                let groups = self.cgroups_of_nonce(&c.nonce);
                self.wiped.unnamed_cgroups.extend(groups);
            }
            self.os.remove_from_outside(&dir);
            self.note_lossy(Some(&name), "its directory was removed".into());
        }
        self.flush_events();
        daemons
    }

    /// The disk has room again; runs what is due. Returns how many
    /// writes it refused in all so far.
    pub fn free_disk(&mut self, now_ms: u64) -> u64 {
        self.advance(now_ms);
        self.os.free_disk();
        self.advance(now_ms);
        self.os.refused_writes()
    }

    /// Is the sandbox frozen?
    pub fn is_frozen(&self) -> bool {
        self.os.is_frozen()
    }

    /// The daemon `daemon`, its descendants, the shims, interpreter and
    /// cell processes of `kernel_dir`, alive now.
    pub(super) fn owned_by_kernel(&self, daemon: Pid, kernel_dir: &str) -> Vec<(Pid, u64, String)> {
        let mut owned = self.tree_of(daemon);
        owned.extend(self.of_kernel_dir(kernel_dir));
        owned
            .into_iter()
            .filter_map(|pid| {
                let info = self.os.process(pid).filter(|p| !p.zombie)?;
                let view = self.os.view(pid)?;
                Some((pid, info.starttime, describe(&view)))
            })
            .collect()
    }

    /// `root` and its live descendants.
    fn tree_of(&self, root: Pid) -> BTreeSet<Pid> {
        let table = self.os.processes();
        let mut tree: BTreeSet<Pid> = BTreeSet::new();
        tree.insert(root);
        // Parents have smaller pids only until pids wrap: iterate to a
        // fixed point.
        loop {
            let before = tree.len();
            for p in &table {
                if !p.zombie && tree.contains(&p.ppid) {
                    tree.insert(p.pid);
                }
            }
            if tree.len() == before {
                break;
            }
        }
        tree
    }

    /// The live shims of `kernel_dir` and the live processes its cells
    /// made (ground truth).
    fn of_kernel_dir(&self, kernel_dir: &str) -> BTreeSet<Pid> {
        let dir = kernel_dir.trim_end_matches('/');
        let inside = |path: &str| path == dir || path.starts_with(&format!("{dir}/"));
        let mut of = BTreeSet::new();
        for (pid, cell_dir) in self.os.shims() {
            if inside(&cell_dir) {
                of.insert(pid);
            }
        }
        for pid in self.os.alive_pids() {
            if self
                .os
                .view(pid)
                .and_then(|v| v.cell)
                .is_some_and(|c| c.kernel_dir.trim_end_matches('/') == dir)
            {
                of.insert(pid);
            }
        }
        of
    }

    /// Looks at every stopped kernel whose look is due: what it owned at
    /// the TERM and still runs (same pid, same start time) was orphaned.
    pub(super) fn check_stopped_kernels(&mut self, now_ms: u64) {
        if self.os.is_frozen() {
            return;
        }
        self.check_stops(now_ms, |c| c.due_ms <= now_ms);
    }

    /// The daemon of `kernel_dir` exited after its stop: it must have
    /// left nothing running.
    pub(super) fn stopped_daemon_exited(&mut self, kernel_dir: &str, now_ms: u64) {
        self.check_stops(now_ms, |c| same_dir(&c.kernel_dir, kernel_dir));
        // A stop's last act resolves every cell of the kernel that did not
        // finish, with the stop as its error: a cell left open would be
        // taken (and run) by the next daemon of that directory, or resolved
        // with another reason. A refused write (a full disk) may leave one
        // open: the journal could not be closed.
        // A cell no shim took may have been recorded after the stop's last
        // look: the submit that recorded it finds the exit announced,
        // waits for the daemon to go and withdraws it (`close_stopped`).
        // It is judged by what became of it (`check_left_open`).
        if self.os.refused_writes() == 0 {
            for (seq, taken) in self.unfinished_cells(kernel_dir) {
                let cell = KernelLayout::new(kernel_dir).cell(CellSeq(seq));
                match self.os.read_file(&cell.submission()).ok() {
                    Some(submission) if !taken => self.left_open.push(LeftOpen {
                        kernel_dir: kernel_dir.to_owned(),
                        seq,
                        submission,
                        at_ms: now_ms,
                    }),
                    _ => self.term_survivors.push(format!(
                        "kernel {}'s stopped daemon exited at {now_ms} ms leaving its cell {seq} open (submitted, not done)",
                        super::kernel_name(kernel_dir)
                    )),
                }
            }
        }
    }

    /// Cells a stopped daemon left open and untaken: one withdrawn (its
    /// submission gone or replaced) is done with; one a shim takes under
    /// the same submission was left for the next daemon to run.
    pub(super) fn check_left_open(&mut self, now_ms: u64) {
        let left = std::mem::take(&mut self.left_open);
        for l in left {
            let cell = KernelLayout::new(&l.kernel_dir).cell(CellSeq(l.seq));
            if self.os.read_file(&cell.submission()).ok().as_ref() != Some(&l.submission) {
                continue;
            }
            if tether_core::agent::op::taken(&self.os, &cell) {
                self.term_survivors.push(format!(
                    "kernel {}'s stopped daemon exited at {} ms leaving its cell {} open (submitted, not done); it was taken by {now_ms} ms",
                    super::kernel_name(&l.kernel_dir),
                    l.at_ms,
                    l.seq
                ));
                continue;
            }
            self.left_open.push(l);
        }
    }

    /// A fault killed the daemon of `kernel_dir`: its stop never ends.
    pub(super) fn stop_interrupted(&mut self, kernel_dir: &str) {
        self.term_checks
            .retain(|c| !same_dir(&c.kernel_dir, kernel_dir));
    }

    fn check_stops(&mut self, now_ms: u64, now_due: impl Fn(&TermCheck) -> bool) {
        let (due, later): (Vec<TermCheck>, Vec<TermCheck>) = std::mem::take(&mut self.term_checks)
            .into_iter()
            .partition(|c| now_due(c));
        self.term_checks = later;
        for c in due {
            let left: Vec<String> = c
                .owned
                .iter()
                .filter(|(pid, start, _)| {
                    // What nothing names is out of every stop's reach (the
                    // documented limit), as at an idle exit or a shutdown.
                    !self.named_by_nothing(*pid)
                        && self
                            .os
                            .process(*pid)
                            .is_some_and(|p| !p.zombie && p.starttime == *start)
                })
                .map(|(_, _, what)| what.clone())
                .collect();
            if !left.is_empty() {
                self.term_survivors.push(format!(
                    "kernel {} got SIGTERM at {} ms; at {now_ms} ms still running: {}",
                    super::kernel_name(&c.kernel_dir),
                    c.at_ms,
                    left.join(", ")
                ));
            }
        }
    }

    /// A restart ends every process: nothing of a stopped kernel is left
    /// to look at.
    pub(super) fn forget_stops(&mut self) {
        self.term_checks.clear();
    }
}

fn same_dir(a: &str, b: &str) -> bool {
    a.trim_end_matches('/') == b.trim_end_matches('/')
}

fn describe(v: &ProcView) -> String {
    let role = match v.role {
        Role::Init => "init",
        Role::Exec => "exec",
        Role::Daemon { .. } => "daemon",
        Role::Shim => "shim",
        Role::Cell => "cell process",
        Role::Interpreter => "interpreter",
    };
    let argv = v.argv.first().map(String::as_str).unwrap_or_default();
    format!("{role} {} ({argv})", v.pid)
}

/// A [`Sandbox::fill_disk_at`] armed or in force.
pub(crate) struct ArmedFill {
    /// The write it fills at.
    at: FillAt,
    for_ms: u64,
    /// When the disk fills if no result was journaled by then.
    deadline_ms: u64,
    /// When it filled.
    filled_ms: Option<u64>,
}

impl ArmedFill {
    /// When [`Sandbox::advance_armed_fill`] must look next (virtual ms).
    pub(crate) fn next_wake(&self) -> u64 {
        match self.filled_ms {
            Some(f) => f.saturating_add(self.for_ms),
            None => self.deadline_ms,
        }
    }
}
