//! A deterministic harness for the client state machine: a fake agent that
//! answers ops from a small model of the sandbox, a fake network with
//! latency and faults, and a bounded discrete-event loop that jumps to the
//! next wakeup and stops runaway loops.
//!
//! Cell code is a tiny script, one step per line: `out TEXT`, `err TEXT`,
//! `exit N`, `fail MSG`, `clip N`, `leftover PID,PID`, `tick` (the rest shows up one wait later) and
//! `hang` (never ends unless cancelled).

#![allow(dead_code, unreachable_pub)]

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::time::Duration;
use tether_core::bytes::Bytes;
use tether_core::client::{
    CellKey, Client, Config, Effect, Event, KernelRecord, TransportError, TransportErrorKind,
};
use tether_core::ids::{CellSeq, ExecId, KernelName, RequestId};
use tether_core::protocol::{
    Acceptance, AgentError, AgentLocation, CancelState, CellOutcome, EntryKind, ErrorKind,
    ExecOutput, Identity, JournalBatch, JournalEntry, Op, ProbeStatus, Reply, ReplyEnvelope,
    Stream, Submission,
};
use tether_core::time::Timestamp;

pub fn kname(s: &str) -> KernelName {
    KernelName::new(s).unwrap()
}

pub fn config() -> Config {
    Config::new(
        AgentLocation {
            root: "/tmp/tether".into(),
            hash: "ab".repeat(32),
        },
        1234,
    )
}

/// A cell as the fake agent runs it.
#[derive(Clone, Debug)]
pub struct FakeCell {
    pub request_id: String,
    pub steps: Vec<String>,
    pub pc: usize,
    pub journal: Vec<JournalEntry>,
    pub done: bool,
    /// The tool call the cell waits for (`call NAME` steps).
    pub waiting_call: Option<String>,
    /// Answers written, by call id (the first one wins, as on disk).
    pub answers: BTreeMap<String, tether_core::protocol::CallReply>,
    /// Answers that arrived for a call already answered.
    pub answers_refused: usize,
}

impl FakeCell {
    fn push(&mut self, kind: EntryKind) {
        let n = self.journal.len() as u64 + 1;
        self.journal.push(JournalEntry { n, kind });
    }

    fn finish(&mut self, outcome: CellOutcome) {
        if !self.done {
            self.push(EntryKind::Result { outcome });
            self.push(EntryKind::Done);
            self.done = true;
        }
    }

    /// Runs steps until a `tick`, a `hang`, a `call` not yet answered or
    /// the end.
    fn run(&mut self) {
        while !self.done {
            if self.waiting_call.is_some() {
                return;
            }
            let Some(step) = self.steps.get(self.pc).cloned() else {
                self.finish(CellOutcome::Ok);
                return;
            };
            self.pc += 1;
            let (word, rest) = step.split_once(' ').unwrap_or((step.as_str(), ""));
            match word {
                "out" => self.push(EntryKind::Output {
                    stream: Stream::Stdout,
                    data: Bytes::from(format!("{rest}\n").as_str()),
                }),
                "err" => self.push(EntryKind::Output {
                    stream: Stream::Stderr,
                    data: Bytes::from(format!("{rest}\n").as_str()),
                }),
                "exit" => self.finish(CellOutcome::Exit {
                    code: rest.parse().unwrap_or(1),
                }),
                "fail" => self.finish(CellOutcome::Error {
                    message: rest.into(),
                }),
                "clip" => self.push(EntryKind::Clipped {
                    dropped: rest.parse().unwrap_or(0),
                }),
                "leftover" => self.push(EntryKind::Leftovers {
                    pids: rest.split(',').filter_map(|p| p.parse().ok()).collect(),
                }),
                "call" => {
                    let id = format!("c{}", self.pc);
                    self.push(EntryKind::ToolCall {
                        id: id.clone(),
                        name: rest.into(),
                        args: serde_json::json!({ "step": self.pc }),
                    });
                    self.waiting_call = Some(id);
                    return;
                }
                // A call whose caller gives up at once (its deadline ran
                // out): journaled, never waited for.
                "abandon" => self.push(EntryKind::ToolCall {
                    id: format!("c{}", self.pc),
                    name: rest.into(),
                    args: serde_json::json!({ "step": self.pc }),
                }),
                "tick" => return,
                "hang" => {
                    self.pc -= 1;
                    return;
                }
                _ => {}
            }
        }
    }

    fn after(&self, cursor: u64) -> JournalBatch {
        JournalBatch {
            entries: self
                .journal
                .iter()
                .filter(|e| e.n > cursor)
                .cloned()
                .collect(),
            done: self.done,
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct FakeKernel {
    pub daemon: Option<Identity>,
    /// The last daemon spawned, kept when it dies (its files stay).
    pub spawned: Option<Identity>,
    pub cells: BTreeMap<u64, FakeCell>,
    pub tombstones: BTreeSet<u64>,
    /// Every sequence number a submission took (acknowledged cells too).
    pub used: BTreeSet<u64>,
}

/// The sandbox as the fake agent sees it.
#[derive(Clone, Debug)]
pub struct FakeAgent {
    pub installed: bool,
    pub boot_id: String,
    pub next_pid: u32,
    pub kernels: BTreeMap<KernelName, FakeKernel>,
    /// How many times each request id ran.
    pub runs: BTreeMap<String, u32>,
    /// Ops answered, by kind, for assertions.
    pub ops: Vec<Op>,
    /// What an install reports instead of success (e.g. a wrong arch).
    pub install_error: Option<ErrorKind>,
    /// Every wait answers that the kernel's daemon is gone, whatever the
    /// probes find (an agent that is wrong about it).
    pub dead_on_wait: bool,
}

impl Default for FakeAgent {
    fn default() -> Self {
        FakeAgent {
            installed: true,
            boot_id: "boot-1".into(),
            next_pid: 100,
            kernels: BTreeMap::new(),
            runs: BTreeMap::new(),
            ops: Vec::new(),
            install_error: None,
            dead_on_wait: false,
        }
    }
}

fn err(kind: ErrorKind, detail: &str) -> Result<Reply, AgentError> {
    Err(AgentError {
        kind,
        detail: detail.into(),
        next_seq: None,
    })
}

impl FakeAgent {
    /// Answers one exec as the real agent would print it.
    pub fn exec(&mut self, id: ExecId, op: &Op) -> ExecOutput {
        self.ops.push(op.clone());
        if let Op::Plain { code, .. } = op {
            // A plain exec needs no agent: this sandbox's shell prints the
            // code it was given.
            return ExecOutput {
                stdout: code.as_slice().to_vec(),
                stderr: Vec::new(),
                exit_code: 0,
            };
        }
        if !self.installed && !matches!(op, Op::Install { .. }) {
            return ExecOutput {
                stdout: Vec::new(),
                stderr: b"sh: tether-agent: not found".to_vec(),
                exit_code: 127,
            };
        }
        let (reply, error) = match self.answer(op) {
            Ok(r) => (Some(r), None),
            Err(e) => (None, Some(e)),
        };
        let env = ReplyEnvelope {
            v: 1,
            id: id.0,
            reply,
            error,
        };
        let stdout = env.to_line();
        ExecOutput {
            stdout,
            stderr: Vec::new(),
            exit_code: 0,
        }
    }

    /// The kernel holds the submission of `seq` under `request_id`.
    fn recorded(&self, kernel: &KernelName, seq: CellSeq, request_id: &RequestId) -> bool {
        self.kernels
            .get(kernel)
            .and_then(|k| k.cells.get(&seq.0))
            .is_some_and(|c| c.request_id == request_id.0)
    }

    /// The files of the daemon `e` are kept: its spawn's nonce, this boot.
    fn files_kept(&self, kernel: &KernelName, e: &Identity) -> bool {
        self.kernels.get(kernel).is_some_and(|k| {
            k.spawned
                .as_ref()
                .is_some_and(|s| s.nonce == e.nonce && self.boot_id == e.boot_id)
        })
    }

    fn probe(&self, kernel: &KernelName, expect: Option<&Identity>) -> ProbeStatus {
        let Some(k) = self.kernels.get(kernel) else {
            return ProbeStatus::Absent;
        };
        match (&k.daemon, expect) {
            (None, _) => ProbeStatus::Dead {
                evidence: "no daemon process".into(),
            },
            (Some(d), Some(e)) if d == e => ProbeStatus::Alive {
                identity: d.clone(),
            },
            (Some(d), Some(e)) => ProbeStatus::Replaced {
                evidence: format!(
                    "pid {} is held by another process (starttime {} / boot {} / nonce {}, expected {} / {} / {})",
                    d.pid, d.starttime, d.boot_id, d.nonce, e.starttime, e.boot_id, e.nonce
                ),
            },
            (Some(d), None) => ProbeStatus::Alive {
                identity: d.clone(),
            },
        }
    }

    fn submit(
        &mut self,
        kernel: &KernelName,
        submission: &Submission,
    ) -> Result<Reply, AgentError> {
        let Some(k) = self.kernels.get_mut(kernel) else {
            return err(ErrorKind::NoSuchKernel, "no such kernel");
        };
        let seq = submission.seq.0;
        let next_seq = Some(CellSeq(k.used.last().map_or(1, |s| s + 1).max(seq + 1)));
        let taken = match k.cells.get(&seq) {
            Some(c) => c.request_id != submission.request_id.0,
            None => k.used.contains(&seq),
        };
        if taken {
            return Err(AgentError {
                kind: ErrorKind::Conflict,
                detail: "sequence used by another request".into(),
                next_seq,
            });
        }
        if let Some(c) = k.cells.get(&seq) {
            return Ok(Reply::Submitted {
                acceptance: Acceptance::AlreadyAccepted,
                batch: c.after(0),
            });
        }
        if k.daemon.is_none() {
            return err(ErrorKind::KernelDead, "the kernel's daemon is not running");
        }
        let mut cell = FakeCell {
            request_id: submission.request_id.0.clone(),
            steps: String::from_utf8_lossy(submission.code.as_slice())
                .lines()
                .map(str::to_owned)
                .collect(),
            pc: 0,
            journal: Vec::new(),
            done: false,
            waiting_call: None,
            answers: BTreeMap::new(),
            answers_refused: 0,
        };
        cell.push(EntryKind::Accepted {
            request_id: submission.request_id.clone(),
        });
        let acceptance = if k.tombstones.contains(&seq) {
            cell.finish(CellOutcome::Cancelled);
            Acceptance::CancelledBeforeStart
        } else {
            *self.runs.entry(cell.request_id.clone()).or_default() += 1;
            cell.run();
            Acceptance::Accepted
        };
        let batch = cell.after(0);
        k.cells.insert(seq, cell);
        k.used.insert(seq);
        Ok(Reply::Submitted { acceptance, batch })
    }

    fn answer(&mut self, op: &Op) -> Result<Reply, AgentError> {
        match op {
            Op::Plain { .. } => err(ErrorKind::BadRequest, "not an agent op"),
            Op::Install { .. } => {
                if let Some(kind) = self.install_error {
                    return err(kind, "sandbox is aarch64; the agent is built for x86_64");
                }
                self.installed = true;
                Ok(Reply::Installed {
                    path: "/tmp/tether/bin/tether-agent-abababababababab".into(),
                })
            }
            Op::Probe {
                kernel,
                expect,
                sent,
            } => {
                let status = self.probe(kernel, expect.as_ref());
                let never_recorded = match expect {
                    Some(e)
                        if !matches!(status, ProbeStatus::Alive { .. })
                            && self.files_kept(kernel, e) =>
                    {
                        sent.iter()
                            .filter(|c| !self.recorded(kernel, c.seq, &c.request_id))
                            .map(|c| c.seq)
                            .collect()
                    }
                    _ => Vec::new(),
                };
                Ok(Reply::Probed {
                    status,
                    never_recorded,
                })
            }
            Op::Spawn { kernel, nonce, .. } => {
                let k = self.kernels.entry(kernel.clone()).or_default();
                if let Some(d) = &k.daemon {
                    if &d.nonce == nonce {
                        return Ok(Reply::Spawned {
                            identity: d.clone(),
                            fresh: false,
                            ran_before: 0,
                        });
                    }
                }
                let identity = Identity {
                    boot_id: self.boot_id.clone(),
                    pid: self.next_pid,
                    starttime: 1000 + u64::from(self.next_pid),
                    nonce: nonce.clone(),
                };
                self.next_pid += 1;
                k.daemon = Some(identity.clone());
                k.spawned = Some(identity.clone());
                // As the agent says: how far the kernel ran before.
                let ran_before = k.used.iter().max().copied().unwrap_or(0);
                Ok(Reply::Spawned {
                    identity,
                    fresh: true,
                    ran_before,
                })
            }
            Op::Submit {
                kernel,
                submission,
                ack,
                expect,
                ..
            } => {
                if let Some(e) = expect {
                    let status = self.probe(kernel, Some(e));
                    if !matches!(status, ProbeStatus::Alive { .. }) {
                        return Ok(Reply::IdentityMismatch {
                            status,
                            recorded: self.recorded(kernel, submission.seq, &submission.request_id),
                            files_kept: self.files_kept(kernel, e),
                        });
                    }
                }
                let reply = self.submit(kernel, submission);
                if reply.is_ok() {
                    if let Some(k) = self.kernels.get_mut(kernel) {
                        for seq in ack {
                            if seq != &submission.seq && k.cells.get(&seq.0).is_some_and(|c| c.done)
                            {
                                k.cells.remove(&seq.0);
                            }
                        }
                    }
                }
                reply
            }
            Op::Wait {
                kernel,
                seq,
                cursor,
                answers,
                ..
            } => {
                if self.dead_on_wait {
                    return err(ErrorKind::KernelDead, "the kernel's daemon is not running");
                }
                let Some(k) = self.kernels.get_mut(kernel) else {
                    return err(ErrorKind::NoSuchKernel, "no such kernel");
                };
                let Some(c) = k.cells.get_mut(&seq.0) else {
                    return err(ErrorKind::NoSuchCell, "no such cell");
                };
                // As the agent: an answer only while the cell runs, for a
                // journaled call, once.
                for a in answers {
                    let journaled = c
                        .journal
                        .iter()
                        .any(|e| matches!(&e.kind, EntryKind::ToolCall { id, .. } if *id == a.id));
                    if c.done || !journaled {
                        continue;
                    }
                    if c.answers.contains_key(&a.id) {
                        c.answers_refused += 1;
                        continue;
                    }
                    c.answers.insert(a.id.clone(), a.reply.clone());
                    if c.waiting_call.as_deref() == Some(a.id.as_str()) {
                        c.waiting_call = None;
                        c.push(EntryKind::ToolAnswered { id: a.id.clone() });
                        c.run();
                    }
                }
                if c.after(*cursor).entries.is_empty() {
                    c.run();
                }
                Ok(Reply::Waited {
                    batch: c.after(*cursor),
                })
            }
            Op::Cancel { kernel, seq, .. } => {
                let Some(k) = self.kernels.get_mut(kernel) else {
                    return err(ErrorKind::NoSuchKernel, "no such kernel");
                };
                let state = match k.cells.get_mut(&seq.0) {
                    None => {
                        k.tombstones.insert(seq.0);
                        CancelState::Tombstoned
                    }
                    Some(c) if c.done => CancelState::AlreadyDone,
                    Some(c) => {
                        c.finish(CellOutcome::Cancelled);
                        CancelState::Escalating
                    }
                };
                Ok(Reply::Cancelled { state })
            }
            Op::Shutdown { kernel, .. } => {
                let killed = u32::from(self.kernels.remove(kernel).is_some());
                Ok(Reply::ShutDown { killed })
            }
            Op::Gc => Ok(Reply::Collected {
                removed: Vec::new(),
            }),
            Op::Ack { kernel, seq } => {
                if let Some(k) = self.kernels.get_mut(kernel) {
                    k.cells.remove(&seq.0);
                }
                Ok(Reply::Acked)
            }
            // This fake keeps no background log.
            Op::Logs { kernel } => match self.kernels.get(kernel) {
                Some(_) => Ok(Reply::Logs {
                    data: Vec::new().into(),
                }),
                None => err(ErrorKind::NoSuchKernel, "no such kernel"),
            },
        }
    }

    /// The daemon dies (its files stay).
    pub fn kill_daemon(&mut self, kernel: &KernelName) {
        if let Some(k) = self.kernels.get_mut(kernel) {
            k.daemon = None;
        }
    }

    /// The sandbox is replaced by a new machine: every kernel, file and
    /// the agent itself gone, a new boot id (`runs` is the harness's
    /// ground truth, kept).
    pub fn replace_sandbox(&mut self) {
        self.kernels.clear();
        self.installed = false;
        self.boot_id = "boot-replaced".into();
    }

    /// The agent still holds this cell's journal (not acknowledged yet).
    pub fn has_cell(&self, kernel: &KernelName, seq: CellSeq) -> bool {
        self.kernels
            .get(kernel)
            .is_some_and(|k| k.cells.contains_key(&seq.0))
    }

    /// The container restarts and another process takes the daemon's pid.
    pub fn restart_with_pid_reuse(&mut self, kernel: &KernelName) {
        self.boot_id = "boot-2".into();
        if let Some(k) = self.kernels.get_mut(kernel) {
            if let Some(d) = &mut k.daemon {
                d.boot_id = "boot-2".into();
                d.starttime = 7;
                d.nonce = "someone-else".into();
            }
        }
    }
}

/// How the fake network treats execs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Net {
    /// Every exec reaches the agent and its reply comes back.
    Up,
    /// No exec reaches the agent.
    Down,
    /// The op runs but its reply is lost (the driver sees a timeout at the
    /// deadline).
    LoseReplies,
    /// The op never reaches the agent, and the driver sees a timeout at
    /// the deadline (a connection that hung): the client cannot tell it
    /// from a lost reply.
    LoseRequests,
}

/// The client, the fake agent and a discrete-event clock.
pub struct Harness {
    pub client: Client,
    pub agent: FakeAgent,
    pub now: Timestamp,
    pub net: Net,
    pub latency: Duration,
    /// Exec results not yet delivered: (when, exec) → result.
    pub pending: BTreeMap<(Timestamp, ExecId), Result<ExecOutput, TransportError>>,
    pub ops: BTreeMap<ExecId, Op>,
    pub events: Vec<Event>,
    pub effects: Vec<Effect>,
    pub records: BTreeMap<KernelName, KernelRecord>,
    pub trace: String,
    /// Steps left before the loop is declared runaway.
    pub budget: u32,
    /// Ops of this kind run, but their replies are lost.
    pub lose_kind: Option<tether_core::protocol::OpKind>,
    /// How long after its deadline the driver reports a lost reply's
    /// timeout (0: at the deadline, before the client's own deadline
    /// timer; more: the client's timer fires first).
    pub lost_reply_lag: Duration,
}

impl Harness {
    pub fn new(seed: u64) -> Harness {
        Harness::with(Client::new(config(), seed), FakeAgent::default())
    }

    pub fn with(client: Client, agent: FakeAgent) -> Harness {
        Harness {
            client,
            agent,
            now: Timestamp::ZERO,
            net: Net::Up,
            latency: Duration::from_millis(50),
            pending: BTreeMap::new(),
            ops: BTreeMap::new(),
            events: Vec::new(),
            effects: Vec::new(),
            records: BTreeMap::new(),
            trace: String::new(),
            budget: 10_000,
            lose_kind: None,
            lost_reply_lag: Duration::ZERO,
        }
    }

    pub fn line(&mut self, text: String) {
        let _ = writeln!(self.trace, "{:>8} {text}", self.now.to_string());
    }

    /// Moves every queued effect and event into the harness.
    pub fn drain(&mut self) {
        while let Some(effect) = self.client.poll_effect() {
            match &effect {
                Effect::Exec { id, op, deadline } => {
                    self.line(format!("exec {id} {} (deadline {deadline})", describe(op)));
                    assert!(*deadline >= self.now, "deadline in the past");
                    self.ops.insert(*id, op.clone());
                    let net = if self.lose_kind == Some(op.kind()) {
                        Net::LoseReplies
                    } else {
                        self.net
                    };
                    let result = match net {
                        Net::Up => {
                            let out = self.agent.exec(*id, op);
                            // The agent long-polls a wait that finds nothing new.
                            let idle = matches!(
                                tether_core::protocol::parse_reply(id.0, op.kind(), &out),
                                Ok(tether_core::protocol::Reply::Waited { ref batch })
                                    if batch.entries.is_empty() && !batch.done
                            );
                            let at = if idle {
                                self.now
                                    + self.latency
                                    + Duration::from_millis(self.client.config().wait_ms)
                            } else {
                                self.now + self.latency
                            };
                            Some((at, Ok(out)))
                        }
                        Net::Down => Some((
                            self.now + self.latency,
                            Err(TransportError {
                                kind: TransportErrorKind::Unreachable,
                                detail: "connection refused".into(),
                            }),
                        )),
                        Net::LoseRequests => Some((
                            *deadline,
                            Err(TransportError {
                                kind: TransportErrorKind::TimedOut,
                                detail: "exec deadline passed".into(),
                            }),
                        )),
                        Net::LoseReplies => {
                            let _ = self.agent.exec(*id, op);
                            Some((
                                *deadline + self.lost_reply_lag,
                                Err(TransportError {
                                    kind: TransportErrorKind::TimedOut,
                                    detail: "exec deadline passed".into(),
                                }),
                            ))
                        }
                    };
                    if let Some((at, r)) = result {
                        self.pending.insert((at, *id), r);
                    }
                }
                Effect::Persist(record) => {
                    // The driver's rule: the events queued so far are
                    // delivered before a record is made durable.
                    self.drain_events();
                    let cells: Vec<String> = record
                        .cells
                        .iter()
                        .map(|c| {
                            format!(
                                "{}@{}{}{}",
                                c.seq,
                                c.cursor,
                                if c.submitted { " sent" } else { "" },
                                if c.cancel_requested { " cancel" } else { "" }
                            )
                        })
                        .collect();
                    self.line(format!(
                        "persist {} next={} identity={} cells=[{}] acked=[{}]{}",
                        record.kernel,
                        record.next_seq,
                        record
                            .identity
                            .as_ref()
                            .map_or("-".into(), |i| i.pid.to_string()),
                        cells.join(", "),
                        record
                            .acked
                            .iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>()
                            .join(", "),
                        record
                            .spawning
                            .as_ref()
                            .map_or(String::new(), |n| format!(" spawning={n}")),
                    ));
                    self.records.insert(record.kernel.clone(), record.clone());
                }
                Effect::Forget(k) => {
                    self.line(format!("forget {k}"));
                    self.records.remove(k);
                }
            }
            self.effects.push(effect);
        }
        self.drain_events();
    }

    fn drain_events(&mut self) {
        while let Some(event) = self.client.poll_event() {
            self.line(format!("event {}", describe_event(&event)));
            self.events.push(event);
        }
    }

    /// One step: the earliest exec result or timer, whichever is first.
    /// False when nothing is left to do.
    pub fn step(&mut self) -> bool {
        self.drain();
        assert!(self.budget > 0, "runaway loop: 10000 steps\n{}", self.trace);
        self.budget -= 1;
        let next_exec = self.pending.keys().next().copied();
        let timer = self.client.poll_timeout();
        let take_exec = match (next_exec, timer) {
            (Some((at, _)), Some(t)) => at <= t,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => return false,
        };
        if take_exec {
            let (at, id) = next_exec.unwrap();
            let result = self.pending.remove(&(at, id)).unwrap();
            self.now = self.now.max(at);
            let what = match &result {
                Ok(_) => " ok".to_string(),
                Err(e) => format!(" failed: {e}"),
            };
            self.line(format!("result {id}{what}"));
            self.client.handle_exec(id, result, self.now);
        } else if let Some(t) = timer {
            self.now = self.now.max(t);
            self.line("timeout".into());
            self.client.handle_timeout(self.now);
        }
        self.drain();
        true
    }

    /// Steps until `done` holds (true) or nothing is left (false).
    pub fn run_until(&mut self, mut done: impl FnMut(&Harness) -> bool) -> bool {
        loop {
            self.drain();
            if done(self) {
                return true;
            }
            if !self.step() {
                return done(self);
            }
        }
    }

    /// Steps until no cell is in flight but those held back for a tool
    /// call's answer (within their hold).
    pub fn settle(&mut self) {
        self.run_until(|h| {
            h.client.in_flight() == h.client.awaiting_answers() && h.pending.is_empty()
        });
    }

    pub fn open(&mut self, k: &str, lang: tether_core::protocol::Lang) {
        self.line(format!("open {k}"));
        self.client.open(kname(k), lang, self.now);
        self.drain();
    }

    pub fn run(&mut self, k: &str, code: &str, timeout: Option<Duration>) -> CellKey {
        self.line(format!("run_cell {k} {code:?}"));
        let key = self
            .client
            .run_cell(&kname(k), Bytes::from(code), timeout, self.now)
            .unwrap();
        self.drain();
        key
    }

    pub fn outcome(&self, cell: &CellKey) -> Option<CellOutcome> {
        self.events.iter().find_map(|e| match e {
            Event::CellResolved { cell: c, outcome } if c == cell => Some(outcome.clone()),
            _ => None,
        })
    }

    pub fn resolutions(&self, cell: &CellKey) -> usize {
        self.events
            .iter()
            .filter(|e| matches!(e, Event::CellResolved { cell: c, .. } if c == cell))
            .count()
    }

    /// Everything the cell printed, in delivery order.
    pub fn output(&self, cell: &CellKey) -> String {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::Output { cell: c, data, .. } if c == cell => {
                    Some(String::from_utf8_lossy(data.as_slice()).into_owned())
                }
                _ => None,
            })
            .collect()
    }

    pub fn sent(&self, kind: tether_core::protocol::OpKind) -> usize {
        self.effects
            .iter()
            .filter(|e| matches!(e, Effect::Exec { op, .. } if op.kind() == kind))
            .count()
    }
}

/// A short, stable description of an op for traces.
pub fn describe(op: &Op) -> String {
    match op {
        Op::Install { size, .. } => format!("install size={size}"),
        Op::Probe { kernel, expect, .. } => format!(
            "probe {kernel} expect={}",
            expect
                .as_ref()
                .map_or("-".into(), |i| format!("pid {} nonce {}", i.pid, i.nonce))
        ),
        Op::Spawn {
            kernel,
            lang,
            nonce,
            ..
        } => format!("spawn {kernel} {lang} nonce={nonce}"),
        Op::Submit {
            kernel,
            submission,
            ack,
            expect,
            ..
        } => format!(
            "submit {kernel}#{} rid={} code={:?} ack=[{}] expect={}",
            submission.seq,
            submission.request_id,
            submission.code,
            ack.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            expect
                .as_ref()
                .map_or("-".into(), |i| format!("pid {} nonce {}", i.pid, i.nonce))
        ),
        Op::Wait {
            kernel,
            seq,
            cursor,
            ..
        } => format!("wait {kernel}#{seq} after={cursor}"),
        Op::Cancel { kernel, seq, .. } => format!("cancel {kernel}#{seq}"),
        Op::Shutdown { kernel, .. } => format!("shutdown {kernel}"),
        Op::Gc => "gc".into(),
        Op::Ack { kernel, seq } => format!("ack {kernel}#{seq}"),
        Op::Logs { kernel } => format!("logs {kernel}"),
        Op::Plain { lang, code } => format!("plain {lang} code={code:?}"),
    }
}

pub fn describe_event(e: &Event) -> String {
    match e {
        Event::KernelReady {
            kernel,
            identity,
            fresh,
        } => {
            format!("ready {kernel} pid={} fresh={fresh}", identity.pid)
        }
        Event::StateLost { kernel, evidence } => format!("state-lost {kernel}: {evidence}"),
        Event::KernelReplaced { kernel, evidence } => format!("replaced {kernel}: {evidence}"),
        Event::CellAccepted { cell, acceptance } => format!("accepted {cell} {acceptance:?}"),
        Event::Output {
            cell,
            n,
            stream,
            data,
        } => format!("output {cell} n={n} {stream:?} {data:?}"),
        Event::ToolCall { cell, id, name, .. } => format!("tool-call {cell} {id} {name}"),
        Event::ToolReplied { cell, id, .. } => format!("tool-replied {cell} {id}"),
        Event::ToolAnswered { cell, id } => format!("tool-answered {cell} {id}"),
        Event::Clipped { cell, dropped } => format!("clipped {cell} {dropped}"),
        Event::Leftovers { cell, pids } => format!("leftovers {cell} {pids:?}"),
        Event::Unkillable { cell, pids } => format!("unkillable {cell} {pids:?}"),
        Event::CellResolved { cell, outcome } => format!("resolved {cell}: {outcome}"),
        Event::KernelEvicted { kernel, reason } => format!("evicted {kernel}: {reason}"),
        Event::RanWithoutKernel { cell, reason } => format!("without kernel {cell}: {reason}"),
        Event::Note { text, .. } => format!("note: {text}"),
    }
}
