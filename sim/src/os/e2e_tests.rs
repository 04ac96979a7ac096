//! The agent's real logic (`OpRun` for op commands, `Daemon` for the
//! kernel daemon, `CellShim` and `InterpShim` inside the simulated shims) running on
//! [`SimOs`], with a minimal discrete-event loop standing in for the
//! world: op commands and daemons are processes of the simulated sandbox,
//! time jumps to the next wake-up.

use super::*;
use std::time::Duration;
use tether_core::agent::{Daemon, DaemonStep, OpRun};
use tether_core::bytes::Bytes;
use tether_core::ids::{CellSeq, KernelName, RequestId};
use tether_core::protocol::{
    Acceptance, CancelState, CellOutcome, EntryKind, Envelope, JournalEntry, Lang, Op, Reply,
    ReplyEnvelope, Stream, Submission,
};
use tether_scenarios::shell_model::{self, Flavor, ShellState};
use tether_scenarios::workload::{Step, Workload};

const ROOT: &str = "/root/.tether";
const GRACE_MS: u64 = 500;

struct Harness {
    os: SimOs,
    daemons: BTreeMap<Pid, (Daemon, Timestamp)>,
    next_id: u64,
}

impl Harness {
    fn new() -> Harness {
        Harness::with(SimOsConfig::default())
    }

    fn with(config: SimOsConfig) -> Harness {
        Harness {
            os: SimOs::new(config),
            daemons: BTreeMap::new(),
            next_id: 0,
        }
    }

    fn now(&self) -> Timestamp {
        self.os.now_ts()
    }

    fn adopt_daemons(&mut self) {
        let now = self.now();
        for d in self.os.take_daemon_spawns() {
            self.daemons
                .insert(d.pid, (Daemon::new(&d.kernel_dir, &d.nonce), now));
        }
    }

    /// Runs processes and daemons up to `until`, event by event.
    fn run_until(&mut self, until: Timestamp) {
        for _ in 0..1_000_000 {
            self.adopt_daemons();
            let now = self.now();
            let due: Vec<Pid> = self
                .daemons
                .iter()
                .filter(|(_, (_, wake))| *wake <= now)
                .map(|(pid, _)| *pid)
                .collect();
            for pid in due {
                if !self.os.is_alive(pid) {
                    self.daemons.remove(&pid);
                    continue;
                }
                self.os.set_current(pid);
                let Some((daemon, wake)) = self.daemons.get_mut(&pid) else {
                    continue;
                };
                match daemon.tick(&mut self.os) {
                    DaemonStep::Continue { next_wake } => *wake = next_wake.max(now),
                    DaemonStep::Exit => {
                        self.daemons.remove(&pid);
                        self.os.exit_process(pid, 0);
                    }
                }
                // Whatever the tick started runs at once.
                self.os.advance(now);
            }
            self.daemons.retain(|pid, _| self.os.is_alive(*pid));
            let next = [
                self.os.next_wake(),
                self.daemons.values().map(|(_, w)| *w).min(),
                Some(until),
            ]
            .into_iter()
            .flatten()
            .filter(|t| *t > now)
            .min();
            match next {
                Some(t) if t <= until => {
                    self.os.advance(t);
                    // Nothing is left runnable at the instant just run.
                    let after = self.os.next_wake();
                    assert!(after.is_none_or(|w| w > t), "stuck at {t}: {after:?}");
                }
                _ => return,
            }
        }
        panic!("runaway simulation loop");
    }

    /// One exec call running an op command to its reply.
    fn op(&mut self, op: Op) -> Result<Reply, String> {
        self.next_id += 1;
        let stdin = serde_json::to_vec(&Envelope {
            v: 1,
            id: self.next_id,
            op,
        })
        .unwrap();
        let pid = self
            .os
            .begin_exec(&["tether-agent".into(), "op".into()])
            .unwrap();
        let mut run = OpRun::new(ROOT, &stdin);
        let line = loop {
            self.os.set_current(pid);
            if let Some(line) = run.poll(&mut self.os) {
                break line;
            }
            let wake = run
                .next_wake()
                .unwrap_or(self.now() + Duration::from_millis(5));
            self.run_until(wake.max(self.now() + Duration::from_millis(1)));
        };
        self.os.end_exec(pid, 0);
        self.adopt_daemons();
        let reply: ReplyEnvelope = serde_json::from_slice(&line).unwrap();
        match (reply.reply, reply.error) {
            (Some(r), _) => Ok(r),
            (_, Some(e)) => Err(e.to_string()),
            _ => Err("empty reply".into()),
        }
    }

    fn spawn(&mut self, kernel: &str) -> Pid {
        self.spawn_lang(kernel, Lang::Shell)
    }

    fn spawn_lang(&mut self, kernel: &str, lang: Lang) -> Pid {
        match self.op(Op::Spawn {
            kernel: KernelName::new(kernel).unwrap(),
            lang,
            nonce: format!("nonce-{kernel}"),
            idle_timeout_ms: 600_000,
            grace_ms: GRACE_MS,
        }) {
            Ok(Reply::Spawned {
                identity, fresh, ..
            }) => {
                assert!(fresh);
                identity.pid
            }
            other => panic!("spawn: {other:?}"),
        }
    }

    fn submit(&mut self, kernel: &str, seq: u64, w: &Workload, wait_ms: u64) -> Reply {
        self.op(Op::Submit {
            kernel: KernelName::new(kernel).unwrap(),
            submission: Submission {
                request_id: RequestId(format!("req-{kernel}-{seq}")),
                seq: CellSeq(seq),
                code: Bytes(w.encode()),
                timeout_ms: None,
            },
            wait_ms,
            ack: Vec::new(),
            expect: None,
        })
        .unwrap()
    }

    fn cancel(&mut self, kernel: &str, seq: u64) -> CancelState {
        match self.op(Op::Cancel {
            kernel: KernelName::new(kernel).unwrap(),
            seq: CellSeq(seq),
            request: None,
        }) {
            Ok(Reply::Cancelled { state }) => state,
            other => panic!("cancel: {other:?}"),
        }
    }

    fn wait_all(&mut self, kernel: &str, seq: u64) -> Vec<JournalEntry> {
        match self.op(Op::Wait {
            kernel: KernelName::new(kernel).unwrap(),
            seq: CellSeq(seq),
            cursor: 0,
            wait_ms: 5_000,
            answers: Vec::new(),
        }) {
            Ok(Reply::Waited { batch }) => batch.entries,
            other => panic!("wait: {other:?}"),
        }
    }

    fn run_for(&mut self, ms: u64) {
        let t = self.now() + Duration::from_millis(ms);
        self.run_until(t);
    }
}

fn stdout(entries: &[JournalEntry]) -> String {
    entries
        .iter()
        .filter_map(|e| match &e.kind {
            EntryKind::Output {
                stream: Stream::Stdout,
                data,
            } => Some(String::from_utf8_lossy(data.as_slice()).into_owned()),
            _ => None,
        })
        .collect()
}

fn outcome(entries: &[JournalEntry]) -> Option<CellOutcome> {
    entries.iter().find_map(|e| match &e.kind {
        EntryKind::Result { outcome } => Some(outcome.clone()),
        _ => None,
    })
}

#[test]
fn a_short_cell_is_one_submit_round_trip_and_runs_once() {
    let mut h = Harness::new();
    h.spawn("k");
    let w = Workload::new(vec![
        Step::Print {
            stream: Stream::Stdout,
            text: "hello\n".into(),
        },
        Step::WriteSideEffect {
            name: "runs".into(),
        },
    ]);
    let Reply::Submitted { acceptance, batch } = h.submit("k", 1, &w, 2_000) else {
        panic!("submit")
    };
    assert_eq!(acceptance, Acceptance::Accepted);
    assert!(batch.done, "{batch:?}");
    assert_eq!(stdout(&batch.entries), "hello\n");
    assert_eq!(outcome(&batch.entries), Some(CellOutcome::Ok));
    assert!(matches!(batch.entries[0].kind, EntryKind::Accepted { .. }));
    assert_eq!(h.os.side_effect_count("runs"), 1);

    // A resend of the same submission is recognised; nothing runs again.
    let Reply::Submitted { acceptance, batch } = h.submit("k", 1, &w, 2_000) else {
        panic!("resubmit")
    };
    assert_eq!(acceptance, Acceptance::AlreadyAccepted);
    assert_eq!(stdout(&batch.entries), "hello\n");
    h.run_for(1_000);
    assert_eq!(h.os.side_effect_count("runs"), 1);
}

#[test]
fn exports_and_cwd_persist_across_cells_and_exit_n_keeps_the_state_it_reached() {
    let mut h = Harness::new();
    h.spawn("k");
    let w1 = Workload::new(vec![
        Step::SetVar {
            name: "FOO".into(),
            value: "it's".into(),
        },
        Step::ChangeDir {
            path: "/tmp".into(),
        },
    ]);
    h.os.create_dir_all("/tmp").unwrap();
    h.submit("k", 1, &w1, 2_000);
    let w2 = Workload::new(vec![
        Step::SetVar {
            name: "BAR".into(),
            value: "before exit".into(),
        },
        Step::Exit { code: 4 },
    ]);
    let Reply::Submitted { batch, .. } = h.submit("k", 2, &w2, 2_000) else {
        panic!()
    };
    assert_eq!(outcome(&batch.entries), Some(CellOutcome::Exit { code: 4 }));
    // Cell 3 starts from the state cell 2 reached: look at its main process.
    let w3 = Workload::new(vec![Step::BusyLoop { ms: None }]);
    h.submit("k", 3, &w3, 50);
    let procs = h.os.processes_of_cell("k", 3);
    let view = h.os.view(procs[0]).unwrap();
    assert_eq!(view.env.get("FOO").map(String::as_str), Some("it's"));
    assert_eq!(view.env.get("BAR").map(String::as_str), Some("before exit"));
    assert_eq!(
        view.env.get("TETHER_CELL").map(String::as_str),
        Some("nonce-k:3")
    );
    let saved =
        h.os.read_file(&format!("{ROOT}/kernels/k/state/shell"))
            .unwrap();
    let state = ShellState::from_snapshot(&saved).expect("a complete snapshot");
    assert_eq!(state.cwd.as_deref(), Some("/tmp"));
    assert_eq!(state.get("BAR"), Some("before exit"));
    let saved = String::from_utf8_lossy(&saved);
    assert!(!saved.contains("TETHER_CELL"), "{saved}");
}

fn stderr(entries: &[JournalEntry]) -> String {
    entries
        .iter()
        .filter_map(|e| match &e.kind {
            EntryKind::Output {
                stream: Stream::Stderr,
                data,
            } => Some(String::from_utf8_lossy(data.as_slice()).into_owned()),
            _ => None,
        })
        .collect()
}

/// The simulated kernel (the real daemon, shim and state promotion over
/// the simulated shell) plays the differential corpus exactly as
/// [`shell_model::run_cells`] says, under bash and under dash: so what
/// live-e2e's differential test holds against real shells is what the
/// simulation does.
#[test]
fn the_simulated_kernel_plays_the_shell_corpus_as_the_model_says() {
    for case in shell_model::corpus() {
        for flavor in [Flavor::Bash, Flavor::Dash] {
            if case.bash_only && flavor == Flavor::Dash {
                continue;
            }
            let name = format!("{} ({flavor:?})", case.name);
            let expected = shell_model::run_cells(flavor, &case.cells).unwrap();
            let mut config = SimOsConfig::default();
            if flavor == Flavor::Dash {
                config.programs.remove("bash");
            }
            let mut h = Harness::with(config);
            for dir in shell_model::CORPUS_DIRS {
                h.os.create_dir_all(dir).unwrap();
            }
            h.spawn("k");
            for (i, (cell, want)) in case.cells.iter().zip(&expected).enumerate() {
                let seq = i as u64 + 1;
                let entries = if cell.cancel {
                    h.submit("k", seq, &cell.workload, 0);
                    h.run_for(300);
                    h.cancel("k", seq);
                    h.run_for(GRACE_MS + 1_000);
                    h.wait_all("k", seq)
                } else {
                    h.submit("k", seq, &cell.workload, 0);
                    h.wait_all("k", seq)
                };
                assert_eq!(stdout(&entries), want.stdout, "{name} cell {seq}");
                assert_eq!(
                    outcome(&entries).as_ref(),
                    Some(&want.outcome),
                    "{name} cell {seq}"
                );
                assert_eq!(
                    stderr(&entries).contains("was not kept"),
                    want.state_lost,
                    "{name} cell {seq}: {}",
                    stderr(&entries)
                );
            }
        }
    }
}

#[test]
fn cancel_of_each_escape_class_leaves_nothing_of_the_cell() {
    for named in tether_scenarios::catalog::escapes() {
        let name = named.name;
        let mut h = Harness::new();
        let daemon = h.spawn("k");
        // A bystander: another kernel's running cell must not be touched.
        let other = h.spawn("other");
        let bystander = Workload::new(vec![
            Step::IgnoreTerm,
            Step::BackgroundChildHoldingStdout {
                sleep_ms: 3_600_000,
            },
            Step::BusyLoop { ms: None },
        ]);
        h.submit("other", 1, &bystander, 50);
        h.submit("k", 1, &named.workload, 50);
        h.run_for(300);
        let before = h.os.processes_of_cell("k", 1);
        assert!(!before.is_empty(), "{name}: the cell runs");
        let others_before = h.os.processes_of_cell("other", 1);
        assert_eq!(others_before.len(), 2, "{name}");

        let state = h.cancel("k", 1);
        assert!(
            matches!(state, CancelState::Escalating | CancelState::AlreadyDone),
            "{name}: {state:?}"
        );
        h.run_for(GRACE_MS + 1_000);
        let left: Vec<ProcView> =
            h.os.processes_of_cell("k", 1)
                .into_iter()
                .filter_map(|p| h.os.view(p))
                .collect();
        assert!(left.is_empty(), "{name}: survivors {left:#?}");
        let entries = h.wait_all("k", 1);
        assert!(
            entries.iter().any(|e| matches!(e.kind, EntryKind::Done)),
            "{name}"
        );
        if name != "leftovers_after_exit" {
            assert_eq!(outcome(&entries), Some(CellOutcome::Cancelled), "{name}");
        }
        // Nothing else was touched.
        assert!(h.os.is_alive(daemon), "{name}: the daemon lives");
        assert!(h.os.is_alive(other), "{name}");
        assert_eq!(h.os.processes_of_cell("other", 1), others_before, "{name}");
        for e in h.os.events() {
            if let ProcEventKind::Signal { from, to, .. } = &e.kind {
                assert!(
                    *to != 1 && *to != daemon && *to != other,
                    "{name}: {from} signalled {to}"
                );
                assert!(
                    !others_before.contains(to),
                    "{name}: bystander {to} signalled"
                );
            }
        }
    }
}

#[test]
fn a_cancel_before_the_cell_starts_means_it_never_runs() {
    let mut h = Harness::new();
    h.spawn("k");
    assert_eq!(h.cancel("k", 1), CancelState::Tombstoned);
    let w = Workload::new(vec![Step::WriteSideEffect {
        name: "runs".into(),
    }]);
    let Reply::Submitted { acceptance, batch } = h.submit("k", 1, &w, 500) else {
        panic!()
    };
    assert_eq!(acceptance, Acceptance::CancelledBeforeStart);
    assert_eq!(outcome(&batch.entries), Some(CellOutcome::Cancelled));
    h.run_for(1_000);
    assert_eq!(h.os.side_effect_count("runs"), 0);
}

/// A fresh interpreter is slow to start (imports): a cancel sent as it
/// starts meets SIGINT ignored, and the bootstrap, once up, finds the
/// cell's tombstone: the cell never runs, the interpreter lives on, and
/// the next cell runs in it.
#[test]
fn a_cancel_during_a_slow_interpreter_start_leaves_the_interpreter_alive() {
    let mut h = Harness::with(SimOsConfig {
        interp_start: Duration::from_millis(300),
        ..SimOsConfig::default()
    });
    h.spawn_lang("py", Lang::Python);
    let first = Workload::new(vec![Step::WriteSideEffect {
        name: "first".into(),
    }]);
    let Reply::Submitted { acceptance, .. } = h.submit("py", 1, &first, 0) else {
        panic!()
    };
    assert_eq!(acceptance, Acceptance::Accepted);
    let launch = format!("{ROOT}/kernels/py/py/launch.json");
    let started = h.now();
    while !h.os.exists(&launch) {
        assert!(h.now() < started + Duration::from_secs(1), "never launched");
        h.run_for(1);
    }
    h.run_for(50);
    h.cancel("py", 1);
    h.run_for(1_000);
    assert_eq!(h.os.side_effect_count("first"), 0, "the cancelled cell ran");
    assert_eq!(outcome(&h.wait_all("py", 1)), Some(CellOutcome::Cancelled));
    let next = Workload::new(vec![
        Step::WriteSideEffect {
            name: "next".into(),
        },
        Step::Print {
            stream: Stream::Stdout,
            text: "here\n".into(),
        },
    ]);
    h.submit("py", 2, &next, 0);
    h.run_for(1_000);
    let entries = h.wait_all("py", 2);
    assert_eq!(outcome(&entries), Some(CellOutcome::Ok), "{entries:?}");
    assert_eq!(stdout(&entries), "here\n");
    assert!(
        !stderr(&entries).contains("lost"),
        "the interpreter died: {entries:?}"
    );
}

/// The daemon saw no tombstone and started the shim; the cancel lands
/// while the shim's exec is still under way. The shim's own look at the
/// tombstone is all that keeps the code from running.
#[test]
fn a_cancel_between_the_daemons_look_and_the_shims_start_means_it_never_runs() {
    let mut h = Harness::with(SimOsConfig {
        shim_start: Duration::from_millis(5),
        ..SimOsConfig::default()
    });
    h.spawn("k");
    let w = Workload::new(vec![Step::WriteSideEffect {
        name: "runs".into(),
    }]);
    let Reply::Submitted { acceptance, .. } = h.submit("k", 1, &w, 0) else {
        panic!()
    };
    assert_eq!(acceptance, Acceptance::Accepted);
    let launch = format!("{ROOT}/kernels/k/cells/1/launch.json");
    let started = h.now();
    while !h.os.exists(&launch) {
        assert!(h.now() < started + Duration::from_secs(1), "never launched");
        h.run_for(1);
    }
    assert_eq!(h.cancel("k", 1), CancelState::Escalating);
    h.run_for(1_000);
    assert_eq!(h.os.side_effect_count("runs"), 0);
    assert_eq!(outcome(&h.wait_all("k", 1)), Some(CellOutcome::Cancelled));
}

#[test]
fn a_bounce_shows_as_replaced_or_dead_on_probe() {
    for keep_boot_id in [false, true] {
        bounce_probe(keep_boot_id);
    }
}

fn bounce_probe(keep_boot_id: bool) {
    let mut h = Harness::new();
    h.os = SimOs::new(SimOsConfig {
        bounce_keeps_boot_id: keep_boot_id,
        ..SimOsConfig::default()
    });
    h.run_for(2_000);
    let daemon = h.spawn("k");
    let Ok(Reply::Probed {
        status: tether_core::protocol::ProbeStatus::Alive { identity },
        ..
    }) = h.op(Op::Probe {
        kernel: KernelName::new("k").unwrap(),
        expect: None,
        sent: Vec::new(),
    })
    else {
        panic!("alive")
    };
    assert_eq!(identity.pid, daemon);
    let boot = h.os.current_boot_id().to_owned();
    h.os.bounce();
    assert_eq!(h.os.current_boot_id() == boot, keep_boot_id);
    h.daemons.clear();
    // The same spawns again: the daemon's pid is reused by a stranger.
    h.run_for(500);
    let stranger = h.spawn("k2");
    assert_eq!(stranger, identity.pid);
    let status = h.op(Op::Probe {
        kernel: KernelName::new("k").unwrap(),
        expect: Some(identity),
        sent: Vec::new(),
    });
    assert!(
        matches!(
            status,
            Ok(Reply::Probed {
                status: tether_core::protocol::ProbeStatus::Replaced { .. },
                ..
            })
        ),
        "{status:?}"
    );
}

/// The script appends its save line by line, the end marker last: on a
/// full disk the cell's `shell.new` is torn (or empty) and its `end` file
/// is not written. The shim takes neither for the state: the kernel keeps
/// the state before the cell, and once there is room the next cell starts
/// from it.
#[test]
fn a_save_on_a_full_disk_is_torn_and_the_state_before_it_stays() {
    let mut h = Harness::with(SimOsConfig {
        torn_writes: true,
        ..SimOsConfig::default()
    });
    h.spawn("k");
    let set = |name: &str, value: &str| {
        Workload::new(vec![Step::SetVar {
            name: name.into(),
            value: value.into(),
        }])
    };
    h.submit("k", 1, &set("FOO", "kept"), 2_000);
    h.os.fill_disk_at(ROOT, super::disk::FillAt::Write("shell.new".into()));
    h.submit("k", 2, &set("BAR", "torn"), 2_000);
    assert!(h.os.take_filled_at(), "the shell's save filled the disk");
    assert!(!h.os.exists(&format!("{ROOT}/kernels/k/cells/2/end")));
    h.os.free_disk();
    let saved =
        h.os.read_file(&format!("{ROOT}/kernels/k/state/shell"))
            .unwrap();
    let state = ShellState::from_snapshot(&saved).expect("a complete snapshot");
    assert_eq!(state.get("FOO"), Some("kept"));
    assert_eq!(state.get("BAR"), None);
    h.submit(
        "k",
        3,
        &Workload::new(vec![Step::BusyLoop { ms: None }]),
        50,
    );
    let procs = h.os.processes_of_cell("k", 3);
    let view = h.os.view(procs[0]).unwrap();
    assert_eq!(view.env.get("FOO").map(String::as_str), Some("kept"));
    assert_eq!(view.env.get("BAR"), None);
}
