//! One op command (`tether-agent op`): the request read from stdin, the
//! reply line it prints. [`OpRun`] is a small state machine so that long
//! polls and shutdown's kill sweep need no clock or sleep here: the driver
//! calls [`OpRun::poll`] until it yields the reply line, sleeping until
//! [`OpRun::next_wake`] (or a short interval) in between.
//!
//! Bad input (not JSON, unknown version, a hostile kernel name) gives a
//! reply line with an [`AgentError`], never a panic.

use super::background;
use super::journal::{self, read_journal};
use super::kernel::{self, probe, read_json, to_json, KernelConfig, LaunchRecord};
use super::kernel_lock;
use super::layout::{CellLayout, KernelLayout, Layout};
use super::orphans;
use super::os::{still_runs, Os, OsError, Pid, Signal};
use super::procs::{self, marker_value, CellScope, Table};
use super::tombstone::{self, CancelReason};
use crate::ids::{CellSeq, KernelName, RequestId};
use crate::protocol::{
    Acceptance, AgentError, CancelState, EntryKind, Envelope, ErrorKind, Identity, JournalBatch,
    JournalEntry, Lang, Op, ProbeStatus, Reply, ReplyEnvelope, SentCell, Submission,
    PROTOCOL_VERSION,
};
use crate::time::Timestamp;
use std::collections::BTreeSet;
use std::time::Duration;

/// Once a long poll has news (output or the end), it lingers this long for
/// more, so a short cell's whole journal comes back in one reply.
pub const LINGER: Duration = Duration::from_millis(50);
/// How often a waiting op looks again when nothing else wakes it, while
/// the wait is young (a short cell ends within a few ms: look often).
pub const POLL_INTERVAL_YOUNG: Duration = Duration::from_millis(1);
/// A wait is young for this long.
pub const YOUNG: Duration = Duration::from_millis(100);
/// How often a waiting op looks again once the wait is no longer young
/// (and how often shutdown sweeps).
pub const POLL_INTERVAL: Duration = Duration::from_millis(5);
/// How often a long wait looks, after [`SLOW_AFTER`].
pub const POLL_INTERVAL_SLOW: Duration = Duration::from_millis(10);
/// A wait looks at [`POLL_INTERVAL_SLOW`] after this long.
pub const SLOW_AFTER: Duration = Duration::from_secs(2);
/// Shutdown gives up sweeping after this long (and removes the directory).
pub const SHUTDOWN_BOUND: Duration = Duration::from_secs(10);

/// How many bytes of journal entries one submit or wait answers with (at
/// least one entry): a cell's output is capped, but up to
/// [`crate::protocol::calls::MAX_CALLS`] tool calls of up to
/// [`crate::protocol::calls::MAX_ARGS`] each are not, and an answer that
/// large is more than an exec backend carries. The rest comes on the
/// next wait, from the cursor.
pub const MAX_BATCH_BYTES: usize = 16 * 1024 * 1024;

/// The entries in order, up to [`MAX_BATCH_BYTES`] (the first always);
/// true when some were left for the next batch.
fn within_batch_bytes(entries: impl Iterator<Item = JournalEntry>) -> (Vec<JournalEntry>, bool) {
    let mut taken = Vec::new();
    let mut bytes = 0;
    for entry in entries {
        bytes += entry.to_line().len();
        if bytes > MAX_BATCH_BYTES && !taken.is_empty() {
            return (taken, true);
        }
        taken.push(entry);
    }
    (taken, false)
}

/// One op command in progress. Drain order: call [`OpRun::poll`] with the
/// OS; `Some(line)` is the reply (print it and stop); `None` means call
/// again at [`OpRun::next_wake`].
#[derive(Debug)]
pub struct OpRun {
    id: u64,
    layout: Layout,
    state: State,
}

#[derive(Debug)]
enum State {
    Start(Op),
    Waiting(Waiting),
    ShuttingDown(ShuttingDown),
    Reply(Vec<u8>),
    Finished,
}

#[derive(Debug)]
struct Waiting {
    cell: CellLayout,
    cursor: u64,
    since: Timestamp,
    deadline: Timestamp,
    acceptance: Option<Acceptance>,
    /// A submit whose cell was recorded while its daemon announced an
    /// idle exit: the kernel, until the cell is taken, or the daemon
    /// stays, or it is gone (see [`Handshake`]).
    handshake: Option<Handshaking>,
    news_at: Option<Timestamp>,
    next_wake: Timestamp,
}

/// What became of a cell recorded while its daemon announced an idle exit
/// ([`KernelLayout::exiting`]).
enum Handshake {
    /// Not known yet: the daemon is still deciding, or exiting.
    Pending,
    /// The cell was taken, or will be: the daemon stayed (or another runs).
    Kept,
    /// The daemon exited without taking it, and nothing will: the
    /// submission is withdrawn, its sequence number left free, and the
    /// client told the cell was not recorded, so it goes to the next daemon.
    Withdrawn(ProbeStatus),
}

#[derive(Debug)]
struct Handshaking {
    kernel: KernelLayout,
    seq: CellSeq,
    /// Looks left before the cell is taken for kept. Counted in looks,
    /// not by the clock: the sandbox's clock counts a suspended
    /// machine's sleep, and a jump of it past the op's deadline ended
    /// the wait at its first look, while the daemon was still exiting
    /// (seed 100991: the cell was answered accepted, the daemon exited
    /// and the cell was lost).
    looks_left: u32,
}

impl Handshaking {
    fn new(kernel: KernelLayout, seq: CellSeq, wait: Duration) -> Handshaking {
        let bound = wait + super::daemon::EXIT_BOUND;
        let looks = bound.as_millis() / POLL_INTERVAL.as_millis();
        Handshaking {
            kernel,
            seq,
            looks_left: u32::try_from(looks).unwrap_or(u32::MAX),
        }
    }
}

#[derive(Debug)]
struct ShuttingDown {
    kernel: KernelLayout,
    /// The daemon's nonce the client shuts down, if it named one.
    nonce: Option<String>,
    /// Whether the sweep holds the kernel's lock: until then it waits for
    /// a spawn at work (bounded by `deadline`), and kills nothing.
    locked: bool,
    deadline: Timestamp,
    killed: BTreeSet<(Pid, u64)>,
    next_wake: Timestamp,
}

type OpResult = Result<State, AgentError>;

fn err(kind: ErrorKind, detail: impl Into<String>) -> AgentError {
    AgentError {
        kind,
        detail: detail.into(),
        next_seq: None,
    }
}

fn io(what: &str, e: OsError) -> AgentError {
    err(ErrorKind::Io, format!("{what}: {e}"))
}

impl OpRun {
    /// Reads the request (`stdin` of the op command) for the agent `root`.
    pub fn new(root: &str, stdin: &[u8]) -> OpRun {
        let layout = Layout::new(root);
        let value: serde_json::Value = match serde_json::from_slice(stdin) {
            Ok(v) => v,
            Err(e) => {
                return OpRun::error_run(
                    layout,
                    0,
                    err(
                        ErrorKind::BadRequest,
                        format!("the request is not JSON: {e}"),
                    ),
                )
            }
        };
        let id = value
            .get("id")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0);
        match value.get("v").and_then(serde_json::Value::as_u64) {
            Some(v) if v == u64::from(PROTOCOL_VERSION) => {}
            other => {
                return OpRun::error_run(
                    layout,
                    id,
                    err(
                        ErrorKind::UnsupportedVersion,
                        format!(
                            "this agent speaks protocol v{PROTOCOL_VERSION}, the request says {other:?}: install the matching agent"
                        ),
                    ),
                )
            }
        }
        match serde_json::from_value::<Envelope>(value) {
            Ok(env) => OpRun {
                id: env.id,
                layout,
                state: State::Start(env.op),
            },
            Err(e) => OpRun::error_run(
                layout,
                id,
                err(
                    ErrorKind::BadRequest,
                    format!("the request is not a valid op: {e}"),
                ),
            ),
        }
    }

    fn error_run(layout: Layout, id: u64, error: AgentError) -> OpRun {
        OpRun {
            id,
            layout,
            state: State::Reply(line(id, Err(error))),
        }
    }

    /// When to poll again (`None`: now, or finished).
    pub fn next_wake(&self) -> Option<Timestamp> {
        match &self.state {
            State::Waiting(w) => Some(w.next_wake),
            State::ShuttingDown(s) => Some(s.next_wake),
            _ => None,
        }
    }

    /// Advances the op; returns the reply line once it is ready.
    #[must_use]
    pub fn poll(&mut self, os: &mut dyn Os) -> Option<Vec<u8>> {
        let state = std::mem::replace(&mut self.state, State::Finished);
        let next = match state {
            State::Start(op) => self.start(os, op),
            State::Waiting(w) => self.wait_step(os, w),
            State::ShuttingDown(s) => self.shutdown_step(os, s),
            other => Ok(other),
        };
        let next = next.unwrap_or_else(|e| State::Reply(line(self.id, Err(e))));
        match next {
            State::Reply(bytes) => {
                self.state = State::Finished;
                Some(bytes)
            }
            other => {
                self.state = other;
                None
            }
        }
    }

    fn reply(&self, reply: Reply) -> OpResult {
        Ok(State::Reply(line(self.id, Ok(reply))))
    }

    fn kernel_dir(&self, os: &dyn Os, kernel: &KernelName) -> Result<KernelLayout, AgentError> {
        let k = self.layout.kernel(kernel);
        if !os.exists(&k.config()) {
            return Err(err(
                ErrorKind::NoSuchKernel,
                format!("no kernel {kernel} here (spawn it first)"),
            ));
        }
        Ok(k)
    }

    fn start(&mut self, os: &mut dyn Os, op: Op) -> OpResult {
        let now = os.now();
        match op {
            Op::Install { .. } => Err(err(
                ErrorKind::BadRequest,
                "install is done by the install script, not by the agent",
            )),
            Op::Plain { .. } => Err(err(
                ErrorKind::BadRequest,
                "a plain command runs without the agent; it is not an agent op",
            )),
            Op::Probe {
                kernel,
                expect,
                sent,
            } => {
                let k = self.layout.kernel(&kernel);
                let status = probe(os, &k, expect.as_ref());
                // Of the cells sent to a daemon that is gone, those it
                // never recorded never ran, if its files tell (the answer
                // a submit of each under its identity would give).
                let never_recorded = match &expect {
                    Some(e)
                        if !matches!(status, ProbeStatus::Alive { .. })
                            && gone_with_files_kept(os, &k, e) =>
                    {
                        let missing: Vec<CellSeq> = sent
                            .iter()
                            .filter(|c| !recorded(os, &k, c))
                            .map(|c| c.seq)
                            .collect();
                        // Looked at again after the reads: files removed
                        // meanwhile (a temp cleaner) took the submissions
                        // with them, which tells nothing (daemon_then_shim_
                        // killed_escapes seed 100847: the kernel dirs wiped
                        // during the probe, its cell said never recorded
                        // and run again).
                        if files_kept(os, &k, e) {
                            missing
                        } else {
                            Vec::new()
                        }
                    }
                    _ => Vec::new(),
                };
                self.reply(Reply::Probed {
                    status,
                    never_recorded,
                })
            }
            Op::Spawn {
                kernel,
                lang,
                nonce,
                idle_timeout_ms,
                grace_ms,
            } => {
                let config = KernelConfig {
                    lang,
                    nonce,
                    idle_timeout_ms,
                    grace_ms,
                };
                if kernel::was_shut(os, &self.layout.shut(&kernel), &config.nonce) {
                    // Its client shut this daemon's kernel down: this
                    // spawn is a stale copy that arrived late.
                    return Err(err(
                        ErrorKind::Conflict,
                        format!(
                            "kernel {kernel} was shut down, or re-spawned, after a spawn with nonce {}; a spawn of a new daemon needs a new nonce",
                            config.nonce
                        ),
                    ));
                }
                let shut = self.layout.shut(&kernel);
                let k = self.layout.kernel(&kernel);
                let (identity, fresh) = spawn(os, &k, &config, &shut)?;
                let ran_before = if fresh {
                    UsedSeqs::read(os, &k).next().0 - 1
                } else {
                    0
                };
                self.reply(Reply::Spawned {
                    identity,
                    fresh,
                    ran_before,
                })
            }
            Op::Submit {
                kernel,
                submission,
                wait_ms,
                ack,
                expect,
            } => {
                if let Some(expect) = &expect {
                    // The liveness check of a probe, before anything is
                    // recorded: a submit to a daemon that is not the one
                    // the client knows records nothing.
                    let k = self.layout.kernel(&kernel);
                    let status = probe(os, &k, Some(expect));
                    if !matches!(status, ProbeStatus::Alive { .. }) {
                        let sent = SentCell {
                            seq: submission.seq,
                            request_id: submission.request_id.clone(),
                        };
                        let recorded = recorded(os, &k, &sent);
                        // After the read: files removed in between took
                        // the submission with them (as a probe's
                        // `never_recorded`).
                        let files_kept = gone_with_files_kept(os, &k, expect);
                        return self.reply(Reply::IdentityMismatch {
                            status,
                            files_kept,
                            recorded,
                        });
                    }
                }
                let k = self.kernel_dir(os, &kernel)?;
                let cell = k.cell(submission.seq);
                let acceptance = submit(os, &k, &cell, &submission)?;
                if acceptance == Acceptance::Accepted {
                    os.wake(&k.wake());
                }
                let recorded = matches!(
                    acceptance,
                    Acceptance::Accepted | Acceptance::AlreadyAccepted
                );
                let announced = recorded && os.exists(&k.exiting()) && !taken(os, &cell);
                if recorded && !announced {
                    mark_used(os, &k, submission.seq)?;
                }
                for seq in ack {
                    if seq != submission.seq {
                        // Best effort: a journal left behind is removed by
                        // gc or shutdown; the submission is recorded.
                        let _ = ack_cell(os, &k, seq);
                    }
                }
                self.wait_step(
                    os,
                    Waiting {
                        cell,
                        cursor: 0,
                        since: now,
                        deadline: now + Duration::from_millis(wait_ms),
                        acceptance: Some(acceptance),
                        handshake: announced.then(|| {
                            Handshaking::new(k, submission.seq, Duration::from_millis(wait_ms))
                        }),
                        news_at: None,
                        next_wake: now,
                    },
                )
            }
            Op::Wait {
                kernel,
                seq,
                cursor,
                wait_ms,
                answers,
            } => {
                let k = self.kernel_dir(os, &kernel)?;
                let cell = k.cell(seq);
                if !os.exists(&cell.submission()) && !os.exists(&cell.journal()) {
                    return Err(err(
                        ErrorKind::NoSuchCell,
                        format!(
                            "kernel {kernel} has no cell {seq} (never submitted, or acknowledged)"
                        ),
                    ));
                }
                let read =
                    read_journal(os, &cell.journal()).map_err(|e| io("reading the journal", e))?;
                // The journal once more after the daemon is found gone: it
                // may have ended the cell and exited between the two looks
                // (idle_exit seed 104918: the cell was taken for lost).
                let unresolved = |os: &dyn Os| {
                    read_journal(os, &cell.journal()).map_or(true, |r| !journal::is_done(&r))
                };
                if !journal::is_done(&read)
                    && kernel::live_daemon(os, &k).is_none()
                    && unresolved(os)
                {
                    return Err(err(
                        ErrorKind::KernelDead,
                        format!(
                            "kernel {kernel}'s daemon is not running and cell {seq} is unresolved"
                        ),
                    ));
                }
                super::calls::deliver(os, &cell, &answers)
                    .map_err(|e| io("writing a tool call's answer", e))?;
                self.wait_step(
                    os,
                    Waiting {
                        cell,
                        cursor,
                        since: now,
                        deadline: now + Duration::from_millis(wait_ms),
                        acceptance: None,
                        handshake: None,
                        news_at: None,
                        next_wake: now,
                    },
                )
            }
            Op::Cancel {
                kernel,
                seq,
                request,
            } => {
                let k = self.kernel_dir(os, &kernel)?;
                let state = cancel(os, &k, &k.cell(seq), request.as_ref())?;
                if state != CancelState::AlreadyDone {
                    os.wake(&k.wake());
                }
                self.reply(Reply::Cancelled { state })
            }
            Op::Shutdown {
                kernel,
                nonce,
                unanswered_spawn,
            } => {
                if let Some(spawn) = &unanswered_spawn {
                    // Whatever else this shutdown finds: a copy of that
                    // spawn arriving later must start nothing (drawn seed
                    // 500997: a channel read it 19 s late, after the
                    // kernel was shut down under a newer nonce, and its
                    // daemon outlived the run).
                    let _ = kernel::record_shut(os, &self.layout.shut(&kernel), spawn);
                }
                let k = self.layout.kernel(&kernel);
                if !os.exists(k.dir()) {
                    return self.reply(Reply::ShutDown { killed: 0 });
                }
                let config = read_json::<KernelConfig>(os, &k.config()).ok().flatten();
                if spawned_again(config.as_ref(), nonce.as_deref()) {
                    // The kernel was spawned again (a new nonce) after the
                    // client sent this: a late copy, whose daemon is gone
                    // already (reaper seed 100620).
                    return self.reply(Reply::ShutDown { killed: 0 });
                }
                if let Some(config) = config {
                    // Before the sweep, so that a spawn running alongside
                    // it already refuses. Best effort: a shutdown that
                    // cannot write the list (disk full) still stops the
                    // kernel, which matters more.
                    let _ = kernel::record_shut(os, &self.layout.shut(&kernel), &config.nonce);
                }
                self.shutdown_step(
                    os,
                    ShuttingDown {
                        kernel: k,
                        nonce,
                        locked: false,
                        deadline: now + SHUTDOWN_BOUND,
                        killed: BTreeSet::new(),
                        next_wake: now,
                    },
                )
            }
            Op::Gc => {
                let removed = gc(os, &self.layout)?;
                self.reply(Reply::Collected { removed })
            }
            Op::Ack { kernel, seq } => {
                ack_cell(os, &self.layout.kernel(&kernel), seq)?;
                self.reply(Reply::Acked)
            }
            Op::Logs { kernel } => {
                let k = self.kernel_dir(os, &kernel)?;
                let data =
                    background::read(os, &k).map_err(|e| io("reading the background log", e))?;
                self.reply(Reply::Logs { data: data.into() })
            }
        }
    }

    fn wait_step(&mut self, os: &mut dyn Os, mut w: Waiting) -> OpResult {
        let now = os.now();
        if let Some(h) = &mut w.handshake {
            h.looks_left = h.looks_left.saturating_sub(1);
            match handshake(os, &h.kernel, h.seq, h.looks_left == 0)? {
                Handshake::Pending => {
                    w.next_wake = now + POLL_INTERVAL;
                    return Ok(State::Waiting(w));
                }
                Handshake::Kept => w.handshake = None,
                Handshake::Withdrawn(status) => {
                    // Withdrawn by this very look: it never ran, whatever
                    // an earlier send of it did not hear back.
                    return self.reply(Reply::IdentityMismatch {
                        status,
                        recorded: false,
                        files_kept: true,
                    });
                }
            }
        }
        let read = read_journal(os, &w.cell.journal()).map_err(|e| io("reading the journal", e))?;
        let (entries, cut) =
            within_batch_bytes(read.entries.into_iter().filter(|e| e.n > w.cursor));
        let done = entries.iter().any(|e| matches!(e.kind, EntryKind::Done));
        // `tool_answered` is no news: the wait that carried the answer
        // goes on to the cell's next output, call or end.
        let news = entries.iter().any(|e| {
            !matches!(
                e.kind,
                EntryKind::Accepted { .. }
                    | EntryKind::Started { .. }
                    | EntryKind::ToolAnswered { .. }
            )
        });
        if news && w.news_at.is_none() {
            w.news_at = Some(now);
        }
        // A tool call blocks its caller until the host answers: no linger.
        let call = entries
            .iter()
            .any(|e| matches!(e.kind, EntryKind::ToolCall { .. }));
        let linger_over = call || w.news_at.is_some_and(|t| now >= t + LINGER);
        if done || cut || linger_over || now >= w.deadline {
            let batch = JournalBatch { entries, done };
            return match w.acceptance {
                Some(acceptance) => self.reply(Reply::Submitted { acceptance, batch }),
                None => self.reply(Reply::Waited { batch }),
            };
        }
        let age = now.saturating_since(w.since);
        let interval = if age < YOUNG {
            POLL_INTERVAL_YOUNG
        } else if age < SLOW_AFTER {
            POLL_INTERVAL
        } else {
            POLL_INTERVAL_SLOW
        };
        let mut wake = (now + interval).min(w.deadline);
        if let Some(t) = w.news_at {
            wake = wake.min(t + LINGER);
        }
        w.next_wake = wake;
        Ok(State::Waiting(w))
    }

    fn shutdown_step(&mut self, os: &mut dyn Os, mut s: ShuttingDown) -> OpResult {
        let now = os.now();
        if !s.locked {
            // A spawn at work may start a daemon of another nonce (another
            // client record's): the sweep would kill it. Wait for it, then
            // leave alone a kernel it started under another nonce.
            match kernel_lock::claim(os, &s.kernel) {
                kernel_lock::Claim::Held(_) if now < s.deadline => {
                    s.next_wake = now + POLL_INTERVAL;
                    return Ok(State::ShuttingDown(s));
                }
                _ => s.locked = true,
            }
            let config = read_json::<KernelConfig>(os, &s.kernel.config())
                .ok()
                .flatten();
            if spawned_again(config.as_ref(), s.nonce.as_deref()) {
                kernel_lock::release(os, &s.kernel);
                return self.reply(Reply::ShutDown { killed: 0 });
            }
        }
        let table = Table::snapshot(os);
        let protected = procs::protected(&table, os.self_pid());
        let mut set = kernel_processes(os, &table, &s.kernel, &protected);
        // Processes seen before keep being killed while they exist (same
        // start time: not a reused pid).
        for &(pid, start) in &s.killed {
            if table
                .get(pid)
                .is_some_and(|p| p.starttime == start && !p.zombie && !protected.contains(&pid))
            {
                set.insert(pid);
            }
        }
        if set.is_empty() || now >= s.deadline {
            remove_cgroups(os, &s.kernel);
            let removed = os.remove_all(s.kernel.dir());
            // Gone with the directory, unless its removal failed: a lock
            // left held by a live channel would refuse every spawn.
            kernel_lock::release(os, &s.kernel);
            removed.map_err(|e| io("removing the kernel directory", e))?;
            let killed = u32::try_from(s.killed.len()).unwrap_or(u32::MAX);
            return self.reply(Reply::ShutDown { killed });
        }
        procs::stop_and_kill(os, &set);
        for pid in set {
            if let Some(p) = table.get(pid) {
                s.killed.insert((pid, p.starttime));
            }
        }
        s.next_wake = now + POLL_INTERVAL;
        Ok(State::ShuttingDown(s))
    }
}

/// A shutdown of the daemon of `nonce` finds the kernel run under another
/// nonce (spawned again since): it leaves that kernel alone. Without a
/// nonce, or a config, whatever runs the kernel is the shutdown's.
fn spawned_again(config: Option<&KernelConfig>, nonce: Option<&str>) -> bool {
    matches!((config, nonce), (Some(c), Some(n)) if c.nonce != n)
}

/// The reply line for op `id`, sealed with its checksum.
fn line(id: u64, result: Result<Reply, AgentError>) -> Vec<u8> {
    let (reply, error) = match result {
        Ok(r) => (Some(r), None),
        Err(e) => (None, Some(e)),
    };
    ReplyEnvelope {
        v: PROTOCOL_VERSION,
        id,
        reply,
        error,
    }
    .to_line()
}

fn spawn(
    os: &mut dyn Os,
    k: &KernelLayout,
    config: &KernelConfig,
    shut: &str,
) -> Result<(Identity, bool), AgentError> {
    if config.lang == Lang::Python && !os.has_program("python3") {
        return Err(err(
            ErrorKind::PythonMissing,
            "python3 is not on the sandbox's PATH; install it or use --lang shell",
        ));
    }
    let spawned = take_spawn_lock(os, k).and_then(|()| {
        let spawned = spawn_alone(os, k, config, shut);
        kernel_lock::release(os, k);
        spawned
    });
    if spawned
        .as_ref()
        .is_err_and(|e| e.kind == ErrorKind::Conflict)
    {
        // A spawn refused for a conflict spends its nonce: the client
        // probes and adopts what runs, and spawns under a new nonce from
        // then on. A copy of this spawn that arrives later (a channel's
        // frame read after the client's one-shot retry was refused) must
        // start nothing either (drawn_clients seed 100067: it started a
        // daemon after both clients had shut the kernel down, nobody's).
        let _ = kernel::record_shut(os, shut, &config.nonce);
    }
    spawned
}

/// Takes the kernel's lock ([`kernel_lock`]); one found held answers
/// Conflict: its client probes, and adopts the daemon the other starts (or
/// spawns again once the other's shutdown has removed the kernel).
fn take_spawn_lock(os: &mut dyn Os, k: &KernelLayout) -> Result<(), AgentError> {
    os.create_dir_all(k.dir())
        .map_err(|e| io("creating the kernel directory", e))?;
    match kernel_lock::claim(os, k) {
        kernel_lock::Claim::Taken => Ok(()),
        kernel_lock::Claim::Held(Some(pid)) => Err(err(
            ErrorKind::Conflict,
            format!("another spawn or shutdown of this kernel is at work (op pid {pid}); probe the kernel to adopt its daemon"),
        )),
        kernel_lock::Claim::Held(None) => Err(err(
            ErrorKind::Conflict,
            "another spawn or shutdown of this kernel took its lock; probe the kernel to adopt its daemon",
        )),
    }
}

/// [`spawn`], holding the kernel's spawn lock.
fn spawn_alone(
    os: &mut dyn Os,
    k: &KernelLayout,
    config: &KernelConfig,
    shut: &str,
) -> Result<(Identity, bool), AgentError> {
    if let Some(identity) = kernel::live_daemon(os, k) {
        if identity.nonce == config.nonce {
            return Ok((identity, false));
        }
        return Err(err(
            ErrorKind::Conflict,
            format!(
                "the kernel already runs (daemon pid {}) under another nonce; probe it to adopt it, or shut it down first",
                identity.pid
            ),
        ));
    }
    // The dead daemon's nonce is retired with it: its client moved on to
    // this one and never spawns under it again, so a copy of its spawn
    // that arrives late (held by the network, or read by a channel after
    // the client's one-shot retry) is stale and must start nothing,
    // however this kernel ends (its shutdown records only the new nonce;
    // sandbox_replaced seed 103926). Best effort, as in a shutdown.
    if let Ok(Some(old)) = read_json::<KernelConfig>(os, &k.config()) {
        if old.nonce != config.nonce {
            let _ = kernel::record_shut(os, shut, &old.nonce);
            // No daemon of it runs: its interpreter (if it lives) is an
            // orphan no record may name.
            orphans::kill_interpreters_of(os, &old.nonce, None);
        }
    }
    // A daemon of this kernel that no identity names is one a spawn
    // started and died before recording (killed between the two: an OOM
    // kill, its exec's connection gone). No probe finds it, so no cell
    // reached it; left beside the one this spawn starts, under the same
    // nonce, it would take the next cell too (two daemons, cells run
    // twice: drawn seed 101317, `kill_after_write` at the daemon's start).
    let unrecorded = kernel::daemons_by_command_line(os, k, os.self_pid());
    if !unrecorded.is_empty() {
        procs::stop_and_kill(os, &unrecorded);
    }
    // A fresh daemon starts from a fresh state: the old one's is lost.
    os.remove_all(&k.state_dir())
        .map_err(|e| io("clearing the old state", e))?;
    let _ = os.remove_all(&k.identity());
    for dir in [k.state_dir(), k.cells_dir()] {
        os.create_dir_all(&dir)
            .map_err(|e| io("creating the kernel directory", e))?;
    }
    // Cells the old daemon accepted but never started died with it (the
    // client reports them lost): the fresh daemon must never run them. A
    // directory without a submission holds no accepted cell (a submit that
    // failed after making it, on a full disk): its client sends the cell
    // again, to run here (fail_open seed 100542: it came back cancelled).
    for seq in cell_seqs(os, k) {
        let cell = k.cell(seq);
        if os.exists(&cell.submission())
            && !os.exists(&cell.journal())
            && !os.exists(&cell.launch())
        {
            let _ = tombstone::write(os, &cell, CancelReason::Requested);
        }
    }
    // The dead daemon's announced exit is over.
    let _ = os.remove_all(&k.exiting());
    os.write_atomic(&k.config(), &to_json(config))
        .map_err(|e| io("writing config.json", e))?;
    os.write_atomic(&k.lang(), format!("{}\n", config.lang).as_bytes())
        .map_err(|e| io("writing lang", e))?;
    let pid = os
        .spawn_daemon(k.dir(), &config.nonce)
        .map_err(|e| io("starting the kernel daemon", e))?;
    let recorded = record_identity(os, k, config, pid);
    if recorded.is_err() {
        // A daemon whose identity is not on disk is one no probe finds,
        // while it runs the kernel's config as its own: the client's
        // spawn again under the same nonce would start a second daemon
        // beside it, and both would run the next cell (drawn seed 250,
        // `identity.json` refused by a full disk). Just started, it holds
        // nothing yet: it goes, and the spawn fails as the write did.
        let _ = os.signal(pid, Signal::Kill);
    }
    Ok((recorded?, true))
}

/// Records the identity of the daemon `pid` just started
/// (`identity.json`), by which probes and submits find it.
fn record_identity(
    os: &mut dyn Os,
    k: &KernelLayout,
    config: &KernelConfig,
    pid: Pid,
) -> Result<Identity, AgentError> {
    let info = os.process(pid).ok_or_else(|| {
        err(
            ErrorKind::Io,
            format!(
                "the kernel daemon (pid {pid}) exited at once; see {}/daemon.stderr",
                k.dir()
            ),
        )
    })?;
    let identity = Identity {
        boot_id: os.boot_id().map_err(|e| io("reading the boot id", e))?,
        pid,
        starttime: info.starttime,
        nonce: config.nonce.clone(),
    };
    os.write_atomic(&k.identity(), &to_json(&identity))
        .map_err(|e| io("writing identity.json", e))?;
    Ok(identity)
}

fn submit(
    os: &mut dyn Os,
    k: &KernelLayout,
    cell: &CellLayout,
    sub: &Submission,
) -> Result<Acceptance, AgentError> {
    let seq = sub.seq;
    if let Some(existing) = read_json::<Submission>(os, &cell.submission())
        .map_err(|e| io("reading the submission", e))?
    {
        return if existing.request_id == sub.request_id {
            Ok(Acceptance::AlreadyAccepted)
        } else {
            let next = UsedSeqs::read(os, k).next().max(CellSeq(seq.0 + 1));
            Err(AgentError {
                next_seq: Some(next),
                ..err(
                    ErrorKind::Conflict,
                    format!(
                        "cell {seq} already holds request {}; this is request {} (the next free sequence number is {next})",
                        existing.request_id, sub.request_id
                    ),
                )
            })
        };
    }
    if tombstone::request(os, cell).is_some_and(|owner| owner != sub.request_id) {
        // Another client record cancelled its own cell of this number
        // before submitting it: the number is that cell's (its resend is
        // told it was cancelled), and this one goes on after it.
        mark_used(os, k, seq)?;
        let next = UsedSeqs::read(os, k).next().max(CellSeq(seq.0 + 1));
        return Err(AgentError {
            next_seq: Some(next),
            ..err(
                ErrorKind::Conflict,
                format!(
                    "cell {seq} was cancelled as another request before it was submitted; this is request {} (the next free sequence number is {next})",
                    sub.request_id
                ),
            )
        });
    }
    if os.exists(&cell.cancel()) {
        // Cancelled before it was ever submitted: it will never run.
        let mut bytes = JournalEntry {
            n: 1,
            kind: EntryKind::Result {
                outcome: crate::protocol::CellOutcome::Cancelled,
            },
        }
        .to_line();
        bytes.extend(
            JournalEntry {
                n: 2,
                kind: EntryKind::Done,
            }
            .to_line(),
        );
        match os.create_new(&cell.journal(), &bytes) {
            Ok(()) | Err(OsError::AlreadyExists) => {}
            Err(e) => return Err(io("writing the journal", e)),
        }
        mark_used(os, k, seq)?;
        return Ok(Acceptance::CancelledBeforeStart);
    }
    if kernel::live_daemon(os, k).is_none() {
        return Err(err(
            ErrorKind::KernelDead,
            "the kernel's daemon is not running; probe and spawn it again",
        ));
    }
    // The cell's directory is gone once acknowledged, but its sequence
    // number stays used: a submission there would never run (the daemon
    // has handled that number) and would answer "accepted" to a client
    // that then waits forever. A second client with no record of this
    // kernel starts at 1: tell it where the kernel is.
    let used = UsedSeqs::read(os, k);
    if used.contains(seq) {
        let next = used.next();
        return Err(AgentError {
            next_seq: Some(next),
            ..err(
                ErrorKind::Conflict,
                format!(
                    "cell {seq} of this kernel was used before (by another client record, or acknowledged); its next free sequence number is {next}"
                ),
            )
        });
    }
    kernel::make_dir(os, k, cell.dir()).map_err(|e| io("creating the cell directory", e))?;
    let acceptance = match os.create_new(&cell.submission(), &to_json(sub)) {
        Ok(()) => Acceptance::Accepted,
        Err(OsError::AlreadyExists) => {
            // A concurrent submit won the race: same answer as a resend.
            match read_json::<Submission>(os, &cell.submission()) {
                Ok(Some(e)) if e.request_id == sub.request_id => Acceptance::AlreadyAccepted,
                _ => {
                    return Err(err(
                        ErrorKind::Conflict,
                        format!("cell {seq} is taken by another request"),
                    ))
                }
            }
        }
        Err(e) => return Err(io("writing the submission", e)),
    };
    // The caller marks the number used (`mark_used`) unless the daemon
    // announced its exit: a withdrawn cell leaves it free.
    Ok(acceptance)
}

/// Are the expected daemon's kernel files still here: the same boot, and
/// the config the spawn of that daemon wrote (its nonce)? See
/// [`Reply::IdentityMismatch`]'s `files_kept`.
fn files_kept(os: &dyn Os, k: &KernelLayout, expect: &Identity) -> bool {
    os.boot_id().is_ok_and(|b| b == expect.boot_id)
        && read_json::<KernelConfig>(os, &k.config())
            .ok()
            .flatten()
            .is_some_and(|c| c.nonce == expect.nonce)
}

/// For an op that found the expected daemon gone: are its files kept
/// ([`files_kept`])? If so, what its cells still run is ended first
/// ([`orphans::end_orphaned_cells`]).
fn gone_with_files_kept(os: &mut dyn Os, k: &KernelLayout, expect: &Identity) -> bool {
    let kept = files_kept(os, k, expect);
    if kept {
        orphans::end_orphaned_cells(os, k);
    }
    kept
}

/// The kernel holds `cell`'s submission (under its request id: another
/// cell in its place is not it).
fn recorded(os: &dyn Os, k: &KernelLayout, cell: &SentCell) -> bool {
    read_json::<Submission>(os, &k.cell(cell.seq).submission())
        .ok()
        .flatten()
        .is_some_and(|s| s.request_id == cell.request_id)
}

/// A daemon took the cell (it opened its journal, or launched it); a cell
/// submitted and not taken has neither.
pub fn taken(os: &dyn Os, cell: &CellLayout) -> bool {
    os.exists(&cell.journal()) || os.exists(&cell.launch())
}

/// One look at a cell recorded while its daemon announced an idle exit
/// (see [`Handshake`]); `give_up`: past any exit's bound, the cell is
/// taken for kept (as before the handshake existed).
fn handshake(
    os: &mut dyn Os,
    k: &KernelLayout,
    seq: CellSeq,
    give_up: bool,
) -> Result<Handshake, AgentError> {
    let cell = &k.cell(seq);
    if taken(os, cell) || !os.exists(&k.exiting()) || give_up {
        mark_used(os, k, seq)?;
        return Ok(Handshake::Kept);
    }
    if kernel::live_daemon(os, k).is_some() {
        // Still exiting, or about to withdraw its announcement.
        return Ok(Handshake::Pending);
    }
    if taken(os, cell) {
        // It withdrew its announcement, took the cell and exited after
        // the first look (idle_exit seed 210: a cell run to its end taken
        // for withdrawn, and run again on the next daemon). Seen after
        // its death, untaken is final.
        mark_used(os, k, seq)?;
        return Ok(Handshake::Kept);
    }
    // Gone without taking it: no daemon ever will (a spawn tombstones
    // what the dead one left untaken). The submission goes first, as in
    // an ack, so that nothing finds a cell directory half removed.
    os.remove_all(&cell.submission())
        .map_err(|e| io("withdrawing the submission", e))?;
    let _ = os.remove_all(cell.dir());
    Ok(Handshake::Withdrawn(probe(os, k, None)))
}

/// The sequence numbers a kernel has used, as files in `seqs/`: `N` for
/// one used number, `floor-N` for "every number up to N". Lockless: a
/// number's file is created before its floor covers it and removed only
/// after, and a floor file is removed only by an op that has made a
/// larger one, so a reader always sees a used number as used and floors
/// never go down.
#[derive(Debug, Default)]
struct UsedSeqs {
    floor: u64,
    marks: BTreeSet<u64>,
}

impl UsedSeqs {
    fn read(os: &dyn Os, k: &KernelLayout) -> UsedSeqs {
        let mut used = UsedSeqs::default();
        for name in os.list_dir(&k.seqs_dir()).unwrap_or_default() {
            if let Some(n) = name.strip_prefix("floor-").and_then(|n| n.parse().ok()) {
                used.floor = used.floor.max(n);
            } else if let Ok(n) = name.parse() {
                used.marks.insert(n);
            }
        }
        used
    }

    fn contains(&self, seq: CellSeq) -> bool {
        seq.0 <= self.floor || self.marks.contains(&seq.0)
    }

    /// The lowest number above every used one.
    fn next(&self) -> CellSeq {
        CellSeq(self.floor.max(self.marks.last().copied().unwrap_or(0)) + 1)
    }
}

/// Records that `seq` is used (see [`UsedSeqs`]), then folds the numbers
/// used without a gap into the floor.
fn mark_used(os: &mut dyn Os, k: &KernelLayout, seq: CellSeq) -> Result<(), AgentError> {
    if UsedSeqs::read(os, k).contains(seq) {
        // Marked already (a resend): nothing to add.
        return Ok(());
    }
    let dir = k.seqs_dir();
    match kernel::make_dir(os, k, &dir) {
        Ok(()) => {}
        // Shut down meanwhile (a late submit's handshake): nothing to mark.
        Err(OsError::NotFound) => return Ok(()),
        Err(e) => return Err(io("creating the seqs directory", e)),
    }
    match os.create_new(&format!("{dir}/{seq}"), b"") {
        Ok(()) | Err(OsError::AlreadyExists) => {}
        Err(e) => return Err(io("recording the sequence number", e)),
    }
    let used = UsedSeqs::read(os, k);
    let mut top = used.floor;
    while used.marks.contains(&(top + 1)) {
        top += 1;
    }
    if top > used.floor {
        match os.create_new(&format!("{dir}/floor-{top}"), b"") {
            Ok(()) | Err(OsError::AlreadyExists) => {}
            Err(e) => return Err(io("recording the sequence floor", e)),
        }
        // Best effort: a file left behind is only redundant.
        let _ = os.remove_all(&format!("{dir}/floor-{}", used.floor));
        for n in used.marks.range(..=top) {
            let _ = os.remove_all(&format!("{dir}/{n}"));
        }
    }
    Ok(())
}

/// Deletes a cell whose journal the client has whole; idempotent (a cell
/// already gone is fine), refused while the journal is not done.
/// Where the launch records of acknowledged cells whose shim still runs
/// (holding leftovers) are kept, so that shutdown and idle exit still find
/// them after the cell's directory is gone, even when the daemon that
/// started them is gone too; and the daemon's records of processes a
/// killed shim left to it ([`super::daemon`], `orphan-<pid>.json`).
pub(crate) fn leftovers_dir(k: &KernelLayout) -> String {
    format!("{}/leftovers", k.dir())
}

fn ack_cell(os: &mut dyn Os, k: &KernelLayout, seq: CellSeq) -> Result<(), AgentError> {
    let cell = k.cell(seq);
    if !os.exists(cell.dir()) {
        return Ok(());
    }
    let read = read_journal(os, &cell.journal()).map_err(|e| io("reading the journal", e))?;
    if !journal::is_done(&read) {
        return Err(err(
            ErrorKind::BadRequest,
            format!("cell {seq} is not done yet; wait for it or cancel it first"),
        ));
    }
    let launch = read_json::<LaunchRecord>(os, &cell.launch()).ok().flatten();
    let launch = launch.filter(|l| l.of_this_boot(os));
    let running = launch
        .as_ref()
        .is_some_and(|l| still_runs(os, l.shim_pid, l.shim_starttime));
    // A cgroup that cannot be removed still has members (the shim, or a
    // daemon that escaped its tree): they stay owned.
    let cgroup = procs::read_cgroup(os, &cell)
        .filter(|g| os.remove_cgroup(g).is_err() && !os.cgroup_members(g).is_empty());
    // Leftovers whose shim is gone (killed from outside) still carry
    // the cell's marker; each was forked after the shim started, so older
    // processes' environments are not read (on a busy host, hundreds).
    let marked = |os: &dyn Os| {
        launch.as_ref().is_some_and(|l| {
            !l.marker.is_empty()
                && os.processes().iter().any(|p| {
                    !p.zombie
                        && p.starttime >= l.shim_starttime
                        && os.has_env(p.pid, procs::MARKER_NAME, &l.marker)
                })
        })
    };
    if running || cgroup.is_some() || marked(os) {
        let record = match launch {
            Some(l) => LaunchRecord { cgroup, ..l },
            None => LaunchRecord {
                cgroup,
                ..LaunchRecord::new(os, 0, 0, String::new())
            },
        };
        let dir = leftovers_dir(k);
        kernel::make_dir(os, k, &dir).map_err(|e| io("creating the leftovers directory", e))?;
        os.write_atomic(&format!("{dir}/{seq}.json"), &to_json(&record))
            .map_err(|e| io("keeping the leftovers' launch record", e))?;
    }
    // The submission goes first: a daemon that finds the journal gone
    // then finds the submission gone too, and takes the cell for acked
    // rather than for a cell whose shim died before writing anything.
    os.remove_all(&cell.submission())
        .map_err(|e| io("removing the cell's submission", e))?;
    os.remove_all(cell.dir())
        .map_err(|e| io("removing the cell", e))
}

fn cancel(
    os: &mut dyn Os,
    k: &KernelLayout,
    cell: &CellLayout,
    request: Option<&RequestId>,
) -> Result<CancelState, AgentError> {
    // Another client record's cell holds this number: this request's cell
    // never reached it and never will (its submit is refused), and the
    // other's is not this cancel's (drawn_clients seed 478).
    if let (Some(request), Ok(Some(sub))) =
        (request, read_json::<Submission>(os, &cell.submission()))
    {
        if sub.request_id != *request {
            return Ok(CancelState::AlreadyDone);
        }
    }
    // A cancel can come before its cell's submission: the tombstone waits
    // for it in the cell's directory.
    match kernel::make_dir(os, k, cell.dir()) {
        Ok(()) => {}
        Err(OsError::NotFound) => {
            return Err(err(
                ErrorKind::NoSuchKernel,
                format!(
                    "{} was removed meanwhile (the kernel was shut down)",
                    k.dir()
                ),
            ))
        }
        Err(e) => return Err(io("creating the cell directory", e)),
    }
    tombstone::write_for(os, cell, CancelReason::Requested, request)
        .map_err(|e| io("writing the tombstone", e))?;
    let read = read_journal(os, &cell.journal()).map_err(|e| io("reading the journal", e))?;
    Ok(if journal::is_done(&read) {
        CancelState::AlreadyDone
    } else if os.exists(&cell.launch()) || journal::started_pgid(&read).is_some() {
        CancelState::Escalating
    } else {
        CancelState::Tombstoned
    })
}

/// The process group a cell's `started` entry names, while it is still
/// the cell's: a live process leading that group id that started at
/// another time than the cell's leader (the started process, or the shim
/// whose group it is) is a later process's group, the id reused (pids
/// wrap, a rebooted sandbox starts over: kernel a's journal from before a
/// bounce named the group of the shutdown op itself, reaper seed 500199).
/// A group whose leader is gone keeps its id while any member lives.
fn cells_group(
    table: &Table,
    (pid, pgid, starttime): (u32, u32, u64),
    launch: Option<&LaunchRecord>,
) -> Option<u32> {
    let leader_start = if pid == pgid {
        Some(starttime)
    } else {
        launch
            .filter(|l| l.shim_pid == pgid)
            .map(|l| l.shim_starttime)
    };
    match (table.get(pgid), leader_start) {
        (Some(p), Some(start)) if p.starttime != start => None,
        _ => Some(pgid),
    }
}

/// Everything a kernel owns: its daemon and the daemon's descendants, and
/// every process of each of its cells.
pub fn kernel_processes(
    os: &dyn Os,
    table: &Table,
    k: &KernelLayout,
    protected: &BTreeSet<Pid>,
) -> BTreeSet<Pid> {
    let mut set = BTreeSet::new();
    if let Some(id) = kernel::live_daemon(os, k) {
        if !protected.contains(&id.pid) {
            set.extend(table.tree_but(id.pid, protected));
        }
    }
    let nonce = kernel_nonce(os, k);
    for seq in cell_seqs(os, k) {
        set.extend(recorded_cell_processes(
            os,
            table,
            k,
            nonce.as_deref(),
            seq,
            protected,
        ));
    }
    // Shims of acknowledged cells that still hold leftovers.
    let dir = leftovers_dir(k);
    for name in os.list_dir(&dir).unwrap_or_default() {
        let Ok(Some(l)) = read_json::<LaunchRecord>(os, &format!("{dir}/{name}")) else {
            continue;
        };
        if !l.of_this_boot(os) {
            // Its processes ended with the boot they ran in.
            continue;
        }
        if let Some(g) = l.cgroup.as_deref().filter(|g| procs::valid_cgroup_path(g)) {
            set.extend(
                os.cgroup_members(g)
                    .into_iter()
                    .filter(|p| !protected.contains(p) && table.get(*p).is_some_and(|i| !i.zombie)),
            );
        }
        if !l.marker.is_empty() {
            // Leftovers whose shim was killed (from outside) left its
            // tree for PID 1's; they still carry the cell's marker.
            set.extend(
                table
                    .iter()
                    .filter(|p| !p.zombie && !protected.contains(&p.pid))
                    .filter(|p| os.has_env(p.pid, procs::MARKER_NAME, &l.marker))
                    .map(|p| p.pid),
            );
        }
        let live = table
            .get(l.shim_pid)
            .is_some_and(|p| p.starttime == l.shim_starttime);
        if live && !protected.contains(&l.shim_pid) {
            set.extend(table.tree_but(l.shim_pid, protected));
        }
    }
    with_sessions(table, &mut set, protected);
    // A zombie is dead already; its parent reaps it, or never does (a PID 1
    // that does not reap, as in many containers): waiting for it to go
    // would stall every shutdown to its bound.
    set.retain(|p| table.get(*p).is_some_and(|i| !i.zombie));
    set
}

/// The nonce of the kernel's config (its cells' markers name it).
pub(crate) fn kernel_nonce(os: &dyn Os, k: &KernelLayout) -> Option<String> {
    read_json::<KernelConfig>(os, &k.config())
        .ok()
        .flatten()
        .map(|c| c.nonce)
}

/// Every live process of cell `seq` its files name: its launched shim
/// (of this boot) and what descends from it, its journal's process group
/// while it is still the cell's, its marker, its cgroup.
pub(crate) fn recorded_cell_processes(
    os: &dyn Os,
    table: &Table,
    k: &KernelLayout,
    nonce: Option<&str>,
    seq: CellSeq,
    protected: &BTreeSet<Pid>,
) -> BTreeSet<Pid> {
    let cell = k.cell(seq);
    let launch = read_json::<LaunchRecord>(os, &cell.launch()).ok().flatten();
    let pgid = kernel::started_this_boot(os, &cell, launch.as_ref())
        .and_then(|started| cells_group(table, started, launch.as_ref()));
    let shim = launch.filter(|l| recorded_runs(os, table, l));
    let marker = nonce.map(|n| marker_value(n, seq)).unwrap_or_default();
    let mut extra: Vec<Pid> = shim.map(|l| l.shim_pid).into_iter().collect();
    extra.extend(orphans_recorded_for(os, table, k, &marker));
    let scope = CellScope {
        shim: None,
        pgid,
        marker,
        other_markers: Vec::new(),
        extra,
        cgroup: procs::read_cgroup(os, &cell),
    };
    if scope.marker.is_empty()
        && scope.pgid.is_none()
        && scope.extra.is_empty()
        && scope.cgroup.is_none()
    {
        return BTreeSet::new();
    }
    procs::cell_processes(os, table, &scope, protected)
}

/// The live processes a cell's shim recorded as its orphans
/// ([`super::shim::orphans`]) under the cell's `marker`: without a cgroup,
/// once that shim is gone, a `setsid env -i` daemon of the cell has
/// nothing else that names it.
fn orphans_recorded_for(os: &dyn Os, table: &Table, k: &KernelLayout, marker: &str) -> Vec<Pid> {
    if marker.is_empty() {
        return Vec::new();
    }
    let dir = leftovers_dir(k);
    os.list_dir(&dir)
        .unwrap_or_default()
        .iter()
        .filter(|name| name.starts_with("orphan-"))
        .filter_map(|name| {
            read_json::<LaunchRecord>(os, &format!("{dir}/{name}"))
                .ok()
                .flatten()
        })
        .filter(|l| l.marker == marker && recorded_runs(os, table, l))
        .map(|l| l.shim_pid)
        .collect()
}

/// Does the process a record names still run (this boot's, its pid not
/// reused since)?
fn recorded_runs(os: &dyn Os, table: &Table, l: &LaunchRecord) -> bool {
    l.of_this_boot(os)
        && table
            .get(l.shim_pid)
            .is_some_and(|p| p.starttime == l.shim_starttime)
}

/// Adds to `set` everything in a session one of its processes is in.
fn with_sessions(table: &Table, set: &mut BTreeSet<Pid>, protected: &BTreeSet<Pid>) {
    // Everything in a session one of them is in: a kernel's sessions are
    // its own (its daemon's, each shell cell's, its interpreter's: each
    // made by setsid), and a process that dropped the marker keeps its
    // session (python_cancel seed 1692: an earlier cell's `env -i`
    // grandchild under the interpreter, whose journal was acked, was left
    // after the shutdown). Never session 0 or 1 (see `cell_processes`).
    let sessions: BTreeSet<Pid> = set
        .iter()
        .filter_map(|p| table.get(*p))
        .map(|p| p.sid)
        .filter(|&sid| sid > 1)
        .collect();
    set.extend(
        table
            .iter()
            .filter(|p| sessions.contains(&p.sid) && !protected.contains(&p.pid))
            .map(|p| p.pid),
    );
}

/// Removes the cgroups of the kernel's cells and of its kept leftovers
/// records, before the directories that name them go (only empty ones can
/// be removed; a cgroup with members stays, as its processes do).
pub(crate) fn remove_cgroups(os: &mut dyn Os, k: &KernelLayout) {
    for g in named_cgroups(os, k) {
        let _ = os.remove_cgroup(&g);
    }
}

/// The cgroups the kernel's files name: its cells' and its kept
/// leftovers records'. Only these files name the cgroups of an earlier
/// daemon's cells, so what removes the files first leaves those cgroups
/// for good (the known limit of a removed kernel directory).
pub fn named_cgroups(os: &dyn Os, k: &KernelLayout) -> Vec<String> {
    let mut groups: Vec<String> = cell_seqs(os, k)
        .into_iter()
        .filter_map(|seq| procs::read_cgroup(os, &k.cell(seq)))
        .collect();
    let dir = leftovers_dir(k);
    for name in os.list_dir(&dir).unwrap_or_default() {
        if let Ok(Some(l)) = read_json::<LaunchRecord>(os, &format!("{dir}/{name}")) {
            groups.extend(l.cgroup.filter(|g| procs::valid_cgroup_path(g)));
        }
    }
    groups
}

/// The cells of a kernel, by sequence number.
pub fn cell_seqs(os: &dyn Os, k: &KernelLayout) -> Vec<CellSeq> {
    let mut seqs: Vec<CellSeq> = os
        .list_dir(&k.cells_dir())
        .unwrap_or_default()
        .iter()
        .filter_map(|n| n.parse().ok().map(CellSeq))
        .collect();
    seqs.sort();
    seqs
}

fn gc(os: &mut dyn Os, layout: &Layout) -> Result<Vec<KernelName>, AgentError> {
    let mut removed = Vec::new();
    let names = match os.list_dir(&layout.kernels_dir()) {
        Ok(n) => n,
        Err(OsError::NotFound) => return Ok(removed),
        Err(e) => return Err(io("listing kernels", e)),
    };
    for name in names {
        let Ok(kernel) = KernelName::new(&name) else {
            continue;
        };
        let k = layout.kernel(&kernel);
        if !os.exists(&k.identity()) {
            continue;
        }
        if matches!(probe(os, &k, None), ProbeStatus::Alive { .. }) {
            continue;
        }
        let unresolved = cell_seqs(os, &k).into_iter().any(|seq| {
            let cell = k.cell(seq);
            os.exists(&cell.submission())
                && !read_journal(os, &cell.journal()).is_ok_and(|r| journal::is_done(&r))
        });
        if unresolved {
            continue;
        }
        remove_cgroups(os, &k);
        os.remove_all(k.dir())
            .map_err(|e| io("removing a stale kernel", e))?;
        removed.push(kernel);
    }
    Ok(removed)
}
