//! The reaper: kernels idle for `kernel_idle_timeout` are shut down, and
//! beyond `max_kernels` the least recently used go first. Driven by the
//! [`Timer::Reap`] timer, never only on lookup. A kernel with a cell in
//! flight (or an `unknown` cell kept in its record) is never evicted.

use super::event::Event;
use super::kernel::Phase;
use super::retry::Task;
use super::timer::Timer;
use super::Client;
use crate::ids::KernelName;
use crate::protocol::CellOutcome;
use crate::time::Timestamp;

impl Client {
    /// Kernels that count against the cap.
    fn live(&self) -> usize {
        self.kernels
            .values()
            .filter(|k| k.phase != Phase::ShuttingDown)
            .count()
    }

    /// Kernels the reaper may take, with their last use: any without
    /// cells, even with its spawn or probe still out (the shutdown waits
    /// for a spawn's answer). Drawn seed 501595: a kernel whose only cell
    /// timed out on the client while its spawn was held was kept over the
    /// cap, and the kernel that had just run a cell was evicted instead.
    fn reapable(&self) -> Vec<(Timestamp, KernelName)> {
        let mut v: Vec<_> = self
            .kernels
            .values()
            .filter(|k| k.phase != Phase::ShuttingDown && k.cells.is_empty())
            .map(|k| (k.last_used, k.name.clone()))
            .collect();
        v.sort();
        v
    }

    /// Sets the reap timer to the next moment something may be reaped.
    pub(crate) fn arm_reap(&mut self) {
        let idle = self.config.kernel_idle_timeout;
        let candidates = self.reapable();
        let over_cap = self.live() > self.config.max_kernels && !candidates.is_empty();
        let next = if over_cap {
            Some(self.now)
        } else {
            candidates.first().map(|(used, _)| *used + idle)
        };
        match next {
            Some(at) => self.timers.set(Timer::Reap, at),
            None => self.timers.stop(&Timer::Reap),
        }
    }

    /// The reap timer fired.
    pub(crate) fn reap(&mut self) {
        #[cfg(feature = "mutations")]
        if crate::mutation::active(crate::mutation::Mutation::ReaperSpins) {
            return;
        }
        let idle = self.config.kernel_idle_timeout;
        let now = self.now;
        for (used, name) in self.reapable() {
            if used + idle <= now {
                let secs = idle.as_secs();
                self.evict(&name, format!("idle for {secs} s"));
            }
        }
        while self.live() > self.config.max_kernels {
            let Some((_, name)) = self.reapable().into_iter().next() else {
                break; // every kernel over the cap has a cell in flight
            };
            let cap = self.config.max_kernels;
            self.evict(
                &name,
                format!("least recently used beyond the cap of {cap} kernels"),
            );
        }
    }

    fn evict(&mut self, name: &KernelName, reason: String) {
        self.events.push_back(Event::KernelEvicted {
            kernel: name.clone(),
            reason,
        });
        self.begin_shutdown(name);
    }

    /// Resolves the kernel's cells as cancelled, persists its record as
    /// shutting down (no cells) and sends the shutdown; the kernel is
    /// dropped, and its record forgotten, when that is answered
    /// ([`Client::shut_down`]).
    pub(crate) fn begin_shutdown(&mut self, name: &KernelName) {
        let Some(k) = self.kernels.get(name) else {
            return;
        };
        let keys: Vec<_> = k
            .cells
            .iter()
            .filter(|(_, c)| !c.resolved)
            .map(|(seq, _)| super::CellKey {
                kernel: name.clone(),
                seq: *seq,
            })
            .collect();
        for key in keys {
            self.resolve(&key, CellOutcome::Cancelled, false);
        }
        // A spawn sent and not answered yet may start a daemon after the
        // shutdown has swept the kernel (full_disk seed 103509: a respawn
        // after a probe found the daemon dead ran late, and its daemon
        // outlived the shutdown sent meanwhile): the shutdown waits for
        // its answer ([`Client::shutdown_held_for`]).
        let spawn = Task::Spawn(name.clone());
        let spawn_in_flight = self.tasks.get(&spawn).is_some_and(|s| s.exec.is_some());
        let held = spawn_in_flight.then(|| self.tasks.remove(&spawn)).flatten();
        self.drop_kernel_tasks(name, false);
        if let Some(state) = held {
            self.tasks.insert(spawn, state);
        }
        if let Some(k) = self.kernels.get_mut(name) {
            k.phase = Phase::ShuttingDown;
            k.cells.clear();
            // The shutdown removes every journal.
            k.acked.clear();
        }
        self.timers.stop(&Timer::GiveUp(name.clone()));
        self.timers.stop(&Timer::FlushAcks(name.clone()));
        // Kept until the shutdown is answered: a client process that
        // crashes before then leaves it to the next one (two_kernels seed
        // 100281: an eviction forgotten at once left the kernel's daemon,
        // shim and files running after a crash).
        if let Some(k) = self.kernels.get(name) {
            self.effects.push_back(super::Effect::Persist(k.record()));
        }
        if !spawn_in_flight {
            self.start(Task::Shutdown(name.clone()));
        }
    }

    /// An exec of `task` ended (answered, failed or past its deadline):
    /// if it is a spawn a shutdown waits for, the spawn is dropped and the
    /// shutdown goes now. Returns whether it was.
    pub(crate) fn shutdown_held_for(&mut self, task: &Task) -> bool {
        let Task::Spawn(name) = task else {
            return false;
        };
        if !self
            .kernels
            .get(name)
            .is_some_and(|k| k.phase == Phase::ShuttingDown)
        {
            return false;
        }
        let name = name.clone();
        self.drop_task(task);
        self.start(Task::Shutdown(name));
        true
    }

    /// The agent answered `name`'s shutdown (or has nothing left of it):
    /// the kernel and its record go.
    pub(crate) fn shut_down(&mut self, name: &KernelName) {
        self.remove_kernel(name);
        // Its record goes too, so its calls can never be asked again. Not
        // in `remove_kernel`: a resume replaces a kernel with its record,
        // whose calls this process asked already (tool_calls seeds 3, 5,
        // 37: forgotten there, the handler ran twice).
        self.forget_calls(|c| &c.kernel == name);
        self.effects.push_back(super::Effect::Forget(name.clone()));
    }

    /// Remembers that `name`'s shutdown was given up on: it is sent again
    /// once the sandbox answers ([`Client::resend_owed_shutdowns`]). Its
    /// record stays, marked shutting down, for a later client process.
    pub(crate) fn owe_shutdown(&mut self, name: &KernelName) {
        if let Some(k) = self.kernels.get(name) {
            self.owed_shutdowns.insert(name.clone(), k.lang);
        }
        self.remove_kernel(name);
    }

    /// The sandbox answered: every shutdown given up on is sent again
    /// (with a fresh set of attempts; if they fail too, it is owed again).
    pub(crate) fn resend_owed_shutdowns(&mut self) {
        let names: Vec<KernelName> = self.owed_shutdowns.keys().cloned().collect();
        for name in names {
            self.resend_owed_shutdown(&name);
        }
    }

    /// Sends `name`'s owed shutdown again: the client holds the kernel,
    /// shutting down, until it is answered (as after an eviction).
    pub(crate) fn resend_owed_shutdown(&mut self, name: &KernelName) {
        let Some(lang) = self.owed_shutdowns.remove(name) else {
            return;
        };
        if self.kernels.contains_key(name) {
            return; // opened again: its own shutdown covers it
        }
        let mut k = super::kernel::Kernel::new(name.clone(), lang, self.now);
        k.next_seq = self.retired.get(name).copied().unwrap_or(1);
        k.phase = Phase::ShuttingDown;
        self.kernels.insert(name.clone(), k);
        self.note(
            Some(name.clone()),
            format!("shutting kernel {name} down again (an earlier shutdown was not answered)"),
        );
        self.start(Task::Shutdown(name.clone()));
    }

    /// Drops every trace of a kernel.
    pub(crate) fn remove_kernel(&mut self, name: &KernelName) {
        self.drop_kernel_tasks(name, false);
        if let Some(k) = self.kernels.remove(name) {
            self.retired.insert(name.clone(), k.next_seq);
        }
        self.timers.retain(|t| match t {
            Timer::GiveUp(k) | Timer::FlushAcks(k) => k != name,
            Timer::CellTimeout(c) => &c.kernel != name,
            _ => true,
        });
    }
}
