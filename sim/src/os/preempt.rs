//! An agent step preempted at one of its [`Os`] calls: the rest of the
//! sandbox (op commands, daemons, shims, the client over the network)
//! runs meanwhile, for a while of virtual time, and then the step goes on.
//!
//! Everywhere else in [`super`], nothing runs while agent logic calls into
//! the [`Os`] trait, so each agent step (an op's poll, a daemon's tick) is
//! atomic. Real processes are not: a daemon's tick on a slow filesystem
//! spans milliseconds, in which a client can read a cell's end and ack it
//! (the race 830edee fixed: the daemon saw the shim gone, then the journal
//! gone, and took an acked cell for a killed shim's).
//!
//! How: the step (a closure over the agent's logic, which it owns and
//! hands back) runs on a thread of its own whose [`Os`] is a proxy: each
//! call is shipped to the thread that owns the [`SimOs`] and answered
//! there, one at a time, while that thread waits. The handoff is strict
//! (exactly one of the two threads runs at any moment), so a seed replays
//! the same way: the step sees the same answers in the same order. At the
//! drawn call the owner stops answering and keeps the call; the world runs
//! on; [`Paused::resume`] answers it (against the sandbox as it is then)
//! and the rest of the step runs to its end, unpreempted.
//!
//! Where a step runs on no thread of its own (no preemption drawn), it
//! runs directly on the [`SimOs`] as before: a seed whose world never
//! preempts runs exactly as it did.
//!
//! What is preempted ([`crate::sandbox`]): a kernel daemon's tick and an
//! op command's poll (one-shot execs). Shims are not (their driver works
//! on the simulated OS's internals); they run inside the others' pauses.
//! An armed kill after a write is not a preemption: every step meets it
//! on the simulated OS itself, on no thread of its own
//! (`super::step_kill`): an armed kill waits seconds for its write, and
//! every step run on a thread meanwhile made `drawn` and `full_disk`
//! three to five times slower with two kills armed a seed.

use super::SimOs;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::any::Any;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::thread::JoinHandle;
use std::time::Duration;
use tether_core::agent::{CellLaunch, Os, OsError, Pid, ProcInfo, Signal};
use tether_core::time::Timestamp;

/// One [`Os`] call of a preempted step, answered by the [`SimOs`]'s owner.
type Call = Box<dyn FnOnce(&mut SimOs) -> Box<dyn Any + Send> + Send>;

/// What the step's thread says to the owner.
enum Msg<R> {
    /// Please answer this call (a write names its path).
    Call(Call, Option<String>),
    /// The step is over.
    Done(R),
}

/// Ends a step abandoned mid-way (its process died while it was paused)
/// without the panic hook's message.
struct Abandoned;

/// The [`Os`] a preempted step sees: every call goes to the owner.
struct Proxy<R> {
    to_owner: Sender<Msg<R>>,
    answers: Receiver<Box<dyn Any + Send>>,
    /// Answered without a round trip (it never changes).
    self_pid: Pid,
}

impl<R: Send + 'static> Proxy<R> {
    fn call<T: Send + 'static>(&self, f: impl FnOnce(&mut SimOs) -> T + Send + 'static) -> T {
        self.call_writing(None, f)
    }

    /// A call that writes `path` (`None`: none).
    fn call_writing<T: Send + 'static>(
        &self,
        path: Option<String>,
        f: impl FnOnce(&mut SimOs) -> T + Send + 'static,
    ) -> T {
        let call: Call = Box::new(move |os| Box::new(f(os)));
        if self.to_owner.send(Msg::Call(call, path)).is_err() {
            std::panic::resume_unwind(Box::new(Abandoned));
        }
        match self.answers.recv() {
            Ok(answer) => *answer
                .downcast::<T>()
                .expect("the owner answers each call with its own type"),
            // The owner dropped the step (its process is gone).
            Err(_) => std::panic::resume_unwind(Box::new(Abandoned)),
        }
    }
}

impl<R: Send + 'static> Os for Proxy<R> {
    fn now(&self) -> Timestamp {
        self.call(|os| os.now())
    }
    fn boot_id(&self) -> Result<String, OsError> {
        self.call(|os| os.boot_id())
    }
    fn self_pid(&self) -> Pid {
        self.self_pid
    }
    fn read_file(&self, path: &str) -> Result<Vec<u8>, OsError> {
        let path = path.to_owned();
        self.call(move |os| os.read_file(&path))
    }
    fn create_new(&mut self, path: &str, data: &[u8]) -> Result<(), OsError> {
        let (path, data) = (path.to_owned(), data.to_vec());
        self.call_writing(Some(path.clone()), move |os| os.create_new(&path, &data))
    }
    fn write_atomic(&mut self, path: &str, data: &[u8]) -> Result<(), OsError> {
        let (path, data) = (path.to_owned(), data.to_vec());
        self.call_writing(Some(path.clone()), move |os| os.write_atomic(&path, &data))
    }
    fn append(&mut self, path: &str, data: &[u8]) -> Result<(), OsError> {
        let (path, data) = (path.to_owned(), data.to_vec());
        self.call_writing(Some(path.clone()), move |os| os.append(&path, &data))
    }
    fn exists(&self, path: &str) -> bool {
        let path = path.to_owned();
        self.call(move |os| os.exists(&path))
    }
    fn list_dir(&self, path: &str) -> Result<Vec<String>, OsError> {
        let path = path.to_owned();
        self.call(move |os| os.list_dir(&path))
    }
    fn create_dir_all(&mut self, path: &str) -> Result<(), OsError> {
        let path = path.to_owned();
        self.call(move |os| os.create_dir_all(&path))
    }
    fn create_dir(&mut self, path: &str) -> Result<(), OsError> {
        let path = path.to_owned();
        self.call(move |os| os.create_dir(&path))
    }
    /// As `remove_dir_all` does it: what a directory holds, one entry at
    /// a time (each a call, so a pause can land between two), then the
    /// directory, which fails if something was made in it meanwhile.
    fn remove_all(&mut self, path: &str) -> Result<(), OsError> {
        let dir = path.to_owned();
        if !self.call(move |os| os.is_dir(&dir)) {
            let file = path.to_owned();
            return self.call(move |os| os.remove_all(&file));
        }
        let names = match self.list_dir(path) {
            Ok(names) => names,
            Err(OsError::NotFound) => return Ok(()),
            Err(e) => return Err(e),
        };
        for name in names {
            self.remove_all(&format!("{}/{name}", path.trim_end_matches('/')))?;
        }
        let dir = path.to_owned();
        self.call(move |os| os.remove_empty_dir(&dir))
    }
    fn process(&self, pid: Pid) -> Option<ProcInfo> {
        self.call(move |os| os.process(pid))
    }
    fn processes(&self) -> Vec<ProcInfo> {
        self.call(|os| os.processes())
    }
    fn children(&self, pid: Pid) -> Vec<ProcInfo> {
        self.call(move |os| os.children(pid))
    }
    fn has_env(&self, pid: Pid, name: &str, value: &str) -> bool {
        let (name, value) = (name.to_owned(), value.to_owned());
        self.call(move |os| os.has_env(pid, &name, &value))
    }
    fn env_var(&self, pid: Pid, name: &str) -> Option<String> {
        let name = name.to_owned();
        self.call(move |os| os.env_var(pid, &name))
    }
    fn has_arg(&self, pid: Pid, arg: &str) -> bool {
        let arg = arg.to_owned();
        self.call(move |os| os.has_arg(pid, &arg))
    }
    fn signal(&mut self, pid: Pid, signal: Signal) -> Result<(), OsError> {
        self.call(move |os| os.signal(pid, signal))
    }
    fn cgroup_members(&self, group: &str) -> Vec<Pid> {
        let group = group.to_owned();
        self.call(move |os| os.cgroup_members(&group))
    }
    fn remove_cgroup(&mut self, group: &str) -> Result<(), OsError> {
        let group = group.to_owned();
        self.call(move |os| os.remove_cgroup(&group))
    }
    /// Named as a write of [`DAEMON_STARTED`] in the kernel's directory,
    /// for a pause or kill right after it.
    fn spawn_daemon(&mut self, kernel_dir: &str, nonce: &str) -> Result<Pid, OsError> {
        let (kernel_dir, nonce) = (kernel_dir.to_owned(), nonce.to_owned());
        let named = format!("{kernel_dir}/{DAEMON_STARTED}");
        self.call_writing(Some(named), move |os| os.spawn_daemon(&kernel_dir, &nonce))
    }
    /// Named as a write of [`SHIM_STARTED`] in the cell's directory.
    fn spawn_cell(&mut self, launch: &CellLaunch) -> Result<Pid, OsError> {
        let launch = launch.clone();
        let named = format!("{}/{SHIM_STARTED}", launch.cell_dir);
        self.call_writing(Some(named), move |os| os.spawn_cell(&launch))
    }
    fn random_token(&mut self) -> String {
        self.call(|os| os.random_token())
    }
    fn has_program(&self, program: &str) -> bool {
        let program = program.to_owned();
        self.call(move |os| os.has_program(&program))
    }
    fn wake(&mut self, path: &str) {
        let path = path.to_owned();
        self.call(move |os| os.wake(&path));
    }
    fn stop_requested(&self) -> bool {
        self.call(|os| os.stop_requested())
    }
}

/// The name a daemon's start goes by for a pause or kill after a write
/// (no file is written: the spawn is the step's act that matters).
pub const DAEMON_STARTED: &str = tether_scenarios::faults::DAEMON_STARTED;

/// The name a cell shim's start goes by, likewise.
pub const SHIM_STARTED: &str = tether_scenarios::faults::SHIM_STARTED;

/// Where and for how long one step is preempted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Preemption {
    /// The step pauses before this [`Os`] call (0: the first); a step
    /// that makes fewer calls runs to its end unpaused.
    pub at_call: u32,
    /// How long the rest of the sandbox runs before the step goes on.
    pub pause: Duration,
    /// Instead of `at_call`: the step pauses at the call after its first
    /// write of a file whose name (the last part of its path) starts
    /// with this (the write done, nothing after it yet); a step that
    /// writes no such file runs to its end unpaused.
    pub after_write: Option<String>,
}

impl Preemption {
    /// Where it pauses, as a trace says it.
    pub fn describe(&self) -> String {
        match &self.after_write {
            Some(name) => format!("after its write of {name}"),
            None => format!("at its OS call {}", self.at_call + 1),
        }
    }
}

/// Draws, from the seed's own stream, which agent steps are preempted.
#[derive(Debug)]
pub struct Preempter {
    rng: ChaCha8Rng,
    permille: u32,
    /// A pause after a write, armed by a fault: every step is run to
    /// see whether it makes the write, until one pauses there or the
    /// deadline passes.
    after_write: Option<ArmedWrite>,
}

/// A [`Preempter::arm_after_write`] not yet met.
#[derive(Debug)]
struct ArmedWrite {
    name: String,
    pause: Duration,
    /// Virtual time (ms): the sandbox's clock may jump.
    until_ms: u64,
    /// Killed there instead of paused.
    kill: bool,
}

/// The most calls into a step a pause lands at.
const MAX_AT_CALL: u32 = 40;

/// The longest pause (ms): a process descheduled on a loaded host, a
/// tick or op over a slow filesystem.
const MAX_PAUSE_MS: u64 = 120;

impl Preempter {
    /// Preempts each step with chance `permille`/1000 (0: never, and no
    /// draw is made).
    pub fn new(seed: u64, permille: u32) -> Preempter {
        Preempter {
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0x7072_6565_6d70_7421),
            permille,
            after_write: None,
        }
    }

    /// The next step that writes a file named `name…` (before virtual
    /// time `until_ms`) pauses right after that write for `pause` (the
    /// fault `pause_after_write`). One at a time: a later arming
    /// replaces it.
    pub fn arm_after_write(&mut self, name: &str, pause: Duration, until_ms: u64) {
        self.after_write = Some(ArmedWrite {
            name: name.to_owned(),
            pause,
            until_ms,
            kill: false,
        });
    }

    /// The next step that writes a file named `name…` (before virtual
    /// time `until_ms`) stops right after that write, for its process to
    /// be killed there (the fault `kill_after_write`). One at a time, as
    /// [`Preempter::arm_after_write`].
    pub fn arm_kill_after_write(&mut self, name: &str, until_ms: u64) {
        self.after_write = Some(ArmedWrite {
            name: name.to_owned(),
            pause: Duration::ZERO,
            until_ms,
            kill: true,
        });
    }

    /// The step run with `at` paused: an armed write is met.
    pub fn paused(&mut self, at: &Preemption) {
        if at.after_write.is_some() {
            self.after_write = None;
        }
    }

    /// Is the next step (at virtual time `now_ms`) preempted, and where?
    /// Never while a kill after a write is armed (the step meets it on
    /// the simulated OS), nor is the seed's stream drawn then.
    pub fn draw(&mut self, now_ms: u64) -> Option<Preemption> {
        if self.armed_kill(now_ms).is_some() {
            return None;
        }
        if let Some(armed) = self.draw_armed(now_ms) {
            return Some(armed);
        }
        if self.permille == 0 || self.rng.random_range(0..1000) >= self.permille {
            return None;
        }
        // Early calls more often than late ones (a short step has few);
        // short pauses more often than long ones (a process descheduled
        // on a loaded host, a sync on a slow filesystem).
        let calls = self.rng.random_range(1..=MAX_AT_CALL);
        let at_call = self.rng.random_range(0..calls);
        let pause_ms = if self.rng.random_bool(0.5) {
            self.rng.random_range(1..=10)
        } else {
            self.rng.random_range(10..=MAX_PAUSE_MS)
        };
        Some(Preemption {
            at_call,
            pause: Duration::from_millis(pause_ms),
            after_write: None,
        })
    }
}

impl Preempter {
    /// The file name an armed `kill_after_write` waits for, while it may
    /// still be met at `now_ms` (every step meets it on the simulated OS).
    pub fn armed_kill(&self, now_ms: u64) -> Option<String> {
        self.after_write
            .as_ref()
            .filter(|a| a.kill && now_ms < a.until_ms)
            .map(|a| a.name.clone())
    }

    /// An armed kill was met (on the simulated OS): no step meets it now.
    pub fn disarm_after_write(&mut self) {
        self.after_write = None;
    }

    /// As [`Preempter::draw`], but only a pause a fault armed
    /// (no random draw, so the seed's stream is left as it was).
    pub fn draw_armed(&mut self, now_ms: u64) -> Option<Preemption> {
        let armed = self.after_write.as_ref()?;
        if now_ms < armed.until_ms {
            return (!armed.kill).then(|| Preemption {
                at_call: 0,
                pause: armed.pause,
                after_write: Some(armed.name.clone()),
            });
        }
        self.after_write = None;
        None
    }
}

/// How a preempted step went so far.
pub enum Outcome<R> {
    /// It ran to its end.
    Done(R),
    /// It waits at a call; the rest of the sandbox runs.
    Paused(Paused<R>),
}

/// A step stopped at one of its calls. Dropping it abandons the step, as
/// the death of its process would (its thread unwinds quietly).
pub struct Paused<R> {
    thread: Option<Thread<R>>,
    call: Option<Call>,
}

struct Thread<R> {
    from_step: Receiver<Msg<R>>,
    answers: Sender<Box<dyn Any + Send>>,
    handle: JoinHandle<()>,
}

/// Runs `step` as process `pid`, preempted at `at.at_call`.
pub fn run<R, S>(os: &mut SimOs, pid: Pid, at: Preemption, step: S) -> Outcome<R>
where
    R: Send + 'static,
    S: FnOnce(&mut dyn Os) -> R + Send + 'static,
{
    let (to_owner, from_step) = channel();
    let (answers, from_owner) = channel();
    let handle = std::thread::Builder::new()
        .name(format!("preempted-{pid}"))
        .spawn(move || {
            let mut proxy = Proxy {
                to_owner,
                answers: from_owner,
                self_pid: pid,
            };
            let r = step(&mut proxy);
            let _ = proxy.to_owner.send(Msg::Done(r));
        })
        .expect("a thread for a preempted step");
    let thread = Thread {
        from_step,
        answers,
        handle,
    };
    let pause_at = match at.after_write {
        Some(name) => PauseAt::AfterWrite(name),
        None => PauseAt::Call(at.at_call),
    };
    drive(os, pid, thread, Some(pause_at))
}

/// Where [`drive`] stops a step.
enum PauseAt {
    /// Before this call (counting down as calls are answered).
    Call(u32),
    /// Before the call after a write of a file named so.
    AfterWrite(String),
}

impl<R: Send + 'static> Paused<R> {
    /// Answers the call it waits at, as `pid` against the sandbox as it
    /// is now, and runs the rest of the step to its end.
    pub fn resume(mut self, os: &mut SimOs, pid: Pid) -> R {
        let thread = self.thread.take().expect("a paused step has its thread");
        let call = self.call.take().expect("a paused step waits at a call");
        let answer = as_process(os, pid, call);
        // A send fails only if the step is gone, which `drive` reports.
        let _ = thread.answers.send(answer);
        match drive(os, pid, thread, None) {
            Outcome::Done(r) => r,
            Outcome::Paused(_) => unreachable!("a step is preempted once"),
        }
    }
}

impl<R> Drop for Paused<R> {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            // Closing both ends unwinds the step at its call.
            let Thread {
                from_step,
                answers,
                handle,
            } = thread;
            drop(answers);
            drop(from_step);
            let _ = handle.join();
        }
    }
}

fn as_process(os: &mut SimOs, pid: Pid, call: Call) -> Box<dyn Any + Send> {
    let previous = os.current();
    os.set_current(pid);
    let answer = call(os);
    os.set_current(previous);
    answer
}

/// Answers the step's calls until it ends or reaches call `pause_at`.
fn drive<R: Send + 'static>(
    os: &mut SimOs,
    pid: Pid,
    thread: Thread<R>,
    mut pause_at: Option<PauseAt>,
) -> Outcome<R> {
    // The step's last call wrote the file `AfterWrite` waits for.
    let mut wrote = false;
    loop {
        match thread.from_step.recv() {
            Ok(Msg::Call(call, writes)) => {
                let here = match &pause_at {
                    Some(PauseAt::Call(n)) => *n == 0,
                    Some(PauseAt::AfterWrite(_)) => wrote,
                    None => false,
                };
                if here {
                    return Outcome::Paused(Paused {
                        thread: Some(thread),
                        call: Some(call),
                    });
                }
                match &mut pause_at {
                    Some(PauseAt::Call(n)) => *n -= 1,
                    Some(PauseAt::AfterWrite(name)) => {
                        wrote = writes.as_deref().is_some_and(|path| {
                            path.rsplit('/')
                                .next()
                                .is_some_and(|last| last.starts_with(name.as_str()))
                        });
                    }
                    None => {}
                }
                let answer = as_process(os, pid, call);
                let _ = thread.answers.send(answer);
            }
            Ok(Msg::Done(r)) => {
                let _ = thread.handle.join();
                return Outcome::Done(r);
            }
            // The step panicked: the panic is the caller's, as it would be
            // had the step run on this thread.
            Err(_) => match thread.handle.join() {
                Err(panic) => std::panic::resume_unwind(panic),
                Ok(()) => unreachable!("a step that ends says so"),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::os::SimOsConfig;

    #[test]
    fn a_paused_step_sees_what_ran_during_its_pause_and_a_dropped_one_stops() {
        let mut os = SimOs::new(SimOsConfig::default());
        os.create_dir_all("/k").unwrap();
        os.write_atomic("/k/a", b"1").unwrap();
        let step = |os: &mut dyn Os| {
            let before = os.exists("/k/a");
            let after = os.exists("/k/a");
            (before, after, os.self_pid())
        };
        let Outcome::Paused(paused) = run(
            &mut os,
            7,
            Preemption {
                at_call: 1,
                pause: Duration::from_millis(1),
                after_write: None,
            },
            step,
        ) else {
            panic!("two calls, paused before the second");
        };
        // Another actor removes the file between the step's two looks.
        os.remove_all("/k/a").unwrap();
        assert_eq!(paused.resume(&mut os, 7), (true, false, 7));

        // Past its last call: it runs to its end.
        let Outcome::Done(r) = run(
            &mut os,
            7,
            Preemption {
                at_call: 5,
                pause: Duration::from_millis(1),
                after_write: None,
            },
            step,
        ) else {
            panic!("it makes two calls only");
        };
        assert_eq!(r, (false, false, 7));

        // Abandoned at its first call: its write never happens.
        let writes = |os: &mut dyn Os| os.write_atomic("/k/b", b"2").is_ok();
        let at = Preemption {
            at_call: 0,
            pause: Duration::from_millis(1),
            after_write: None,
        };
        let Outcome::Paused(paused) = run(&mut os, 7, at, writes) else {
            panic!("paused at its first call");
        };
        drop(paused);
        assert!(!os.exists("/k/b"));
    }

    #[test]
    fn a_step_pauses_right_after_its_write_of_the_named_file() {
        let mut os = SimOs::new(SimOsConfig::default());
        os.create_dir_all("/k").unwrap();
        let step = |os: &mut dyn Os| {
            os.write_atomic("/k/other", b"0").unwrap();
            os.write_atomic("/k/exiting", b"n").unwrap();
            os.exists("/k/submission")
        };
        let at = Preemption {
            at_call: 0,
            pause: Duration::from_millis(1),
            after_write: Some("exiting".into()),
        };
        let Outcome::Paused(paused) = run(&mut os, 7, at.clone(), step) else {
            panic!("paused after the write");
        };
        assert!(os.exists("/k/exiting"), "the write is done");
        os.write_atomic("/k/submission", b"s").unwrap();
        assert!(
            paused.resume(&mut os, 7),
            "its next call sees the world after the pause"
        );
        // A step that writes no such file runs to its end.
        let other = |os: &mut dyn Os| os.write_atomic("/k/other", b"1").is_ok();
        assert!(matches!(run(&mut os, 7, at, other), Outcome::Done(true)));
    }

    #[test]
    fn the_same_seed_preempts_the_same_steps_and_zero_never() {
        let draws = |seed, permille| {
            let mut p = Preempter::new(seed, permille);
            (0..200).map(|i| p.draw(i)).collect::<Vec<_>>()
        };
        assert_eq!(draws(3, 300), draws(3, 300));
        assert!(draws(3, 300).iter().any(Option::is_some));
        assert!(draws(3, 300).iter().any(Option::is_none));
        assert!(draws(3, 0).iter().all(Option::is_none));
        // An armed write: every step until it is met or its time is up,
        // whatever the density.
        let mut p = Preempter::new(3, 0);
        p.arm_after_write("exiting", Duration::from_millis(5), 100);
        let armed = p.draw(10).expect("armed");
        assert_eq!(armed.after_write.as_deref(), Some("exiting"));
        assert!(p.draw(20).is_some(), "not met yet");
        p.paused(&armed);
        assert!(p.draw(30).is_none(), "met once");
        // A kill after a write: armed the same way, met on the simulated
        // OS, so no step is preempted for it, nor is the stream drawn.
        let mut q = Preempter::new(3, 1000);
        q.arm_kill_after_write("launch.json", 100);
        assert!(q.draw(40).is_none());
        assert_eq!(q.armed_kill(40).as_deref(), Some("launch.json"));
        assert_eq!(q.armed_kill(100), None, "its time is up");
        p.arm_after_write("exiting", Duration::from_millis(5), 100);
        assert!(p.draw(100).is_none(), "its time is up");
    }
}
