use super::*;
use std::time::Duration;
use tether_core::agent::procs::{self, CellScope, Table};
use tether_core::protocol::{parse_journal, CellOutcome, EntryKind, Lang, Stream};
use tether_scenarios::workload::{Step, Workload};

const KDIR: &str = "/agent/kernels/k";

fn at(ms: u64) -> Timestamp {
    Timestamp(ms)
}

fn print(text: &str) -> Step {
    Step::Print {
        stream: Stream::Stdout,
        text: text.into(),
    }
}

fn sleep(ms: u64) -> Step {
    Step::Sleep { ms }
}

/// An exec call that spawns the kernel daemon, as `spawn` does.
fn boot_daemon(os: &mut SimOs) -> Pid {
    let exec = os
        .begin_exec(&["tether-agent".into(), "op".into()])
        .unwrap();
    os.create_dir_all(&format!("{KDIR}/cells")).unwrap();
    os.create_dir_all(&format!("{KDIR}/state")).unwrap();
    // The kernel's config names the nonce its cells' state belongs to.
    let config = tether_core::agent::kernel::KernelConfig {
        lang: Lang::Shell,
        nonce: "nonce-1".into(),
        idle_timeout_ms: 600_000,
        grace_ms: 300,
    };
    os.write_atomic(
        &format!("{KDIR}/config.json"),
        &serde_json::to_vec(&config).unwrap(),
    )
    .unwrap();
    let daemon = os.spawn_daemon(KDIR, "nonce-1").unwrap();
    os.end_exec(exec, 0);
    assert_eq!(os.take_daemon_spawns().len(), 1);
    daemon
}

fn marker(seq: u64) -> (String, String) {
    ("TETHER_CELL".into(), format!("nonce-1:{seq}"))
}

/// The daemon starts cell `seq` running `workload` under `/bin/sh` (dash).
fn start_cell(os: &mut SimOs, daemon: Pid, seq: u64, workload: &Workload) -> Pid {
    start_cell_in(os, daemon, seq, workload, "/bin/sh")
}

/// The same, under the shell `shell`.
fn start_cell_in(os: &mut SimOs, daemon: Pid, seq: u64, workload: &Workload, shell: &str) -> Pid {
    let cell_dir = format!("{KDIR}/cells/{seq}");
    os.create_dir_all(&cell_dir).unwrap();
    os.write_atomic(&format!("{cell_dir}/code"), &workload.encode())
        .unwrap();
    os.set_current(daemon);
    let argv = tether_core::agent::shell::argv(
        shell,
        &tether_core::agent::layout::KernelLayout::new(KDIR),
        &tether_core::agent::layout::CellLayout::from_dir(&cell_dir),
    );
    os.spawn_cell(&CellLaunch {
        kernel_dir: KDIR.into(),
        cell_dir,
        lang: Lang::Shell,
        argv,
        marker: marker(seq),
    })
    .unwrap()
}

fn journal(os: &SimOs, seq: u64) -> Vec<EntryKind> {
    let bytes = os
        .read_file(&format!("{KDIR}/cells/{seq}/journal"))
        .unwrap_or_default();
    let read = parse_journal(&bytes);
    assert!(read.bad_lines.is_empty());
    for (i, e) in read.entries.iter().enumerate() {
        assert_eq!(e.n, i as u64 + 1, "contiguous n");
    }
    read.entries.into_iter().map(|e| e.kind).collect()
}

fn stdout_of(entries: &[EntryKind]) -> String {
    entries
        .iter()
        .filter_map(|e| match e {
            EntryKind::Output {
                stream: Stream::Stdout,
                data,
            } => Some(String::from_utf8_lossy(data.as_slice()).into_owned()),
            _ => None,
        })
        .collect()
}

fn result_of(entries: &[EntryKind]) -> Option<CellOutcome> {
    entries.iter().find_map(|e| match e {
        EntryKind::Result { outcome } => Some(outcome.clone()),
        _ => None,
    })
}

fn leftovers_of(entries: &[EntryKind]) -> Vec<Pid> {
    entries
        .iter()
        .find_map(|e| match e {
            EntryKind::Leftovers { pids } => Some(pids.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

fn main_pid(entries: &[EntryKind]) -> Pid {
    entries
        .iter()
        .find_map(|e| match e {
            EntryKind::Started { pid, .. } => Some(*pid),
            _ => None,
        })
        .expect("started")
}

fn sent(os: &mut SimOs, from: Pid, to: Pid, sig: Signal) {
    os.set_current(from);
    os.signal(to, sig).unwrap();
}

#[test]
fn a_cell_runs_in_virtual_time_and_journals_output_then_result() {
    let mut os = SimOs::new(SimOsConfig::default());
    let daemon = boot_daemon(&mut os);
    let w = Workload::new(vec![
        print("one\n"),
        sleep(100),
        print("two\n"),
        Step::WriteSideEffect {
            name: "runs".into(),
        },
    ]);
    let shim = start_cell(&mut os, daemon, 1, &w);
    os.advance(at(50));
    let j = journal(&os, 1);
    assert_eq!(stdout_of(&j), "one\n");
    assert_eq!(result_of(&j), None);
    assert_eq!(os.next_wake(), Some(at(100)));
    os.advance(at(1_000));
    let j = journal(&os, 1);
    assert_eq!(stdout_of(&j), "one\ntwo\n");
    assert_eq!(result_of(&j), Some(CellOutcome::Ok));
    assert!(matches!(j.last(), Some(EntryKind::Done)));
    assert_eq!(os.side_effect_count("runs"), 1);
    // The wrapper's end file holds the last status; the shim is gone.
    assert_eq!(
        os.read_file(&format!("{KDIR}/cells/1/end")).unwrap(),
        b"0\n"
    );
    assert!(!os.is_alive(shim));
    assert!(os.processes_of_cell(KDIR, 1).is_empty());
    assert!(os.processes_of_cell("k", 1).is_empty());
}

#[test]
fn exit_n_skips_the_end_file_and_resolves_as_exit() {
    let mut os = SimOs::new(SimOsConfig::default());
    let daemon = boot_daemon(&mut os);
    let w = Workload::new(vec![
        Step::SetExitTrap {
            text: "trap!".into(),
        },
        Step::Exit { code: 3 },
        print("never"),
    ]);
    start_cell(&mut os, daemon, 1, &w);
    os.advance(at(10));
    let j = journal(&os, 1);
    assert_eq!(stdout_of(&j), "trap!");
    assert_eq!(result_of(&j), Some(CellOutcome::Exit { code: 3 }));
    assert!(!os.exists(&format!("{KDIR}/cells/1/end")));
}

#[test]
fn code_that_is_not_a_workload_fails_like_a_syntax_error() {
    let mut os = SimOs::new(SimOsConfig::default());
    let daemon = boot_daemon(&mut os);
    let cell_dir = format!("{KDIR}/cells/1");
    os.create_dir_all(&cell_dir).unwrap();
    os.write_atomic(&format!("{cell_dir}/code"), b"echo hi")
        .unwrap();
    os.set_current(daemon);
    os.spawn_cell(&CellLaunch {
        kernel_dir: KDIR.into(),
        cell_dir,
        lang: Lang::Shell,
        argv: vec!["sh".into()],
        marker: marker(1),
    })
    .unwrap();
    os.advance(at(10));
    let j = journal(&os, 1);
    assert_eq!(result_of(&j), Some(CellOutcome::Exit { code: 2 }));
    assert!(j.iter().any(|e| matches!(
        e,
        EntryKind::Output {
            stream: Stream::Stderr,
            ..
        }
    )));
}

#[test]
fn background_child_holds_stdout_until_it_exits_or_the_drain_bound() {
    let mut os = SimOs::new(SimOsConfig::default());
    let daemon = boot_daemon(&mut os);
    // Short holder: EOF comes at 100 ms, before the 200 ms drain bound.
    let short = Workload::new(vec![
        Step::BackgroundChildHoldingStdout { sleep_ms: 100 },
        print("x"),
    ]);
    start_cell(&mut os, daemon, 1, &short);
    os.advance(at(99));
    assert_eq!(result_of(&journal(&os, 1)), None, "stdout still open");
    os.advance(at(100));
    let j = journal(&os, 1);
    assert_eq!(result_of(&j), Some(CellOutcome::Ok));
    assert!(leftovers_of(&j).is_empty());

    // Long holder: the cell resolves at the drain bound, the holder is a
    // leftover and stays in the shim's subtree.
    let long = Workload::new(vec![
        Step::BackgroundChildHoldingStdout { sleep_ms: 60_000 },
        print("y"),
    ]);
    let shim = start_cell(&mut os, daemon, 2, &long);
    let t0 = os.now_ts();
    os.advance(t0 + Duration::from_millis(199));
    assert_eq!(result_of(&journal(&os, 2)), None);
    os.advance(t0 + Duration::from_millis(200));
    let j = journal(&os, 2);
    assert_eq!(result_of(&j), Some(CellOutcome::Ok));
    let left = leftovers_of(&j);
    assert_eq!(left, os.processes_of_cell(KDIR, 2));
    assert_eq!(left.len(), 1);
    assert!(os.is_alive(shim), "the shim stays while leftovers run");
    // SIGINT does not reach a background job of a non-interactive shell.
    sent(&mut os, daemon, left[0], Signal::Int);
    assert!(os.is_alive(left[0]));
    os.advance(t0 + Duration::from_millis(60_000));
    assert!(os.processes_of_cell(KDIR, 2).is_empty());
    assert!(
        !os.is_alive(shim),
        "the shim leaves once its subtree is empty"
    );
}

#[test]
fn escapes_are_reparented_to_the_shim_and_keep_or_lose_the_marker() {
    let mut os = SimOs::new(SimOsConfig::default());
    let daemon = boot_daemon(&mut os);
    let w = Workload::new(vec![
        Step::SetsidDoubleForkDaemon { sleep_ms: 60_000 },
        Step::EnvIDaemon { sleep_ms: 60_000 },
        Step::SetpgidOrphan { sleep_ms: 60_000 },
        Step::BusyLoop { ms: None },
    ]);
    let shim = start_cell(&mut os, daemon, 1, &w);
    os.advance(at(1));
    let main = main_pid(&journal(&os, 1));
    let main_view = os.view(main).unwrap();
    assert_eq!((main_view.pgid, main_view.sid), (main, main));
    let escapees: Vec<ProcView> = os
        .processes_of_cell(KDIR, 1)
        .into_iter()
        .filter(|&p| p != main)
        .map(|p| os.view(p).unwrap())
        .collect();
    assert_eq!(escapees.len(), 3, "{escapees:?}");
    let (m_name, m_value) = marker(1);
    for e in &escapees {
        assert_eq!(e.ppid, shim, "orphan reparented to the subreaper shim");
        assert_eq!(e.argv[0], "sleep");
    }
    let setsid = &escapees[0];
    assert_ne!(setsid.sid, main);
    assert_eq!(setsid.env.get(&m_name), Some(&m_value));
    let env_i = &escapees[1];
    assert_ne!(env_i.sid, main);
    assert!(!os.has_env(env_i.pid, &m_name, &m_value));
    let pgid = &escapees[2];
    assert_eq!(pgid.sid, main);
    assert_ne!(pgid.pgid, main);
    assert!(os.has_env(pgid.pid, &m_name, &m_value));

    // With the shim gone, orphans move to the next subreaper (the daemon).
    sent(&mut os, daemon, shim, Signal::Kill);
    for e in &escapees {
        assert_eq!(os.view(e.pid).unwrap().ppid, daemon);
    }
    // The main process's parent was the shim: now the daemon too.
    assert_eq!(os.view(main).unwrap().ppid, daemon);
    // And without any subreaper, pid 1.
    sent(&mut os, daemon, daemon, Signal::Kill);
    for e in &escapees {
        assert_eq!(os.view(e.pid).unwrap().ppid, 1);
    }
}

#[test]
fn a_builtin_busy_loop_never_forks() {
    let mut os = SimOs::new(SimOsConfig::default());
    let daemon = boot_daemon(&mut os);
    let w = Workload::new(vec![Step::BusyLoop { ms: None }]);
    start_cell(&mut os, daemon, 1, &w);
    os.advance(at(10_000));
    assert_eq!(os.processes_of_cell(KDIR, 1).len(), 1);
    assert_eq!(os.next_wake(), None, "nothing is due: it spins");
}

#[test]
fn dispositions_ignore_trap_stop_and_kill() {
    let mut os = SimOs::new(SimOsConfig::default());
    let daemon = boot_daemon(&mut os);

    // IgnoreTerm: TERM does nothing, KILL kills, and the ignore is
    // inherited by a child started later.
    let w = Workload::new(vec![Step::IgnoreTerm, sleep(60_000)]);
    start_cell(&mut os, daemon, 1, &w);
    os.advance(at(1));
    let procs = os.processes_of_cell(KDIR, 1);
    assert_eq!(procs.len(), 2, "shell + sleep");
    for &p in &procs {
        sent(&mut os, daemon, p, Signal::Term);
        assert!(os.is_alive(p));
    }
    for &p in &procs {
        sent(&mut os, daemon, p, Signal::Kill);
    }
    os.advance(at(2));
    assert!(os.processes_of_cell(KDIR, 1).is_empty());

    // TrapTerm while sleeping: the trap runs once the foreground sleep is
    // done (the sleep itself has the default action: TERM kills it).
    let w = Workload::new(vec![
        Step::TrapTerm {
            then: vec![print("bye"), Step::Exit { code: 9 }],
        },
        sleep(1_000),
        print("not reached"),
    ]);
    start_cell(&mut os, daemon, 2, &w);
    os.advance(at(10));
    let main = main_pid(&journal(&os, 2));
    sent(&mut os, daemon, main, Signal::Term);
    os.advance(at(500));
    assert!(os.is_alive(main), "trap deferred while the sleep runs");
    os.advance(at(1_010));
    let j = journal(&os, 2);
    assert_eq!(stdout_of(&j), "bye");
    assert_eq!(result_of(&j), Some(CellOutcome::Exit { code: 9 }));

    // TrapTerm in a busy loop: the trap runs at once, then the loop goes on.
    let w = Workload::new(vec![
        Step::TrapTerm {
            then: vec![print("t;")],
        },
        Step::BusyLoop { ms: None },
    ]);
    start_cell(&mut os, daemon, 3, &w);
    os.advance(at(1_020));
    let main = main_pid(&journal(&os, 3));
    sent(&mut os, daemon, main, Signal::Term);
    sent(&mut os, daemon, main, Signal::Term);
    os.advance(at(1_030));
    assert_eq!(stdout_of(&journal(&os, 3)), "t;");
    assert!(os.is_alive(main));
    sent(&mut os, daemon, main, Signal::Term);
    os.advance(at(1_040));
    assert_eq!(stdout_of(&journal(&os, 3)), "t;t;");

    // STOP freezes: a stopped sleep does not exit at its deadline, TERM to
    // it stays pending, CONT delivers it.
    sent(&mut os, daemon, main, Signal::Stop);
    sent(&mut os, daemon, main, Signal::Term);
    os.advance(at(1_050));
    assert_eq!(stdout_of(&journal(&os, 3)), "t;t;");
    assert_eq!(os.view(main).unwrap().state, RunState::Stopped);
    sent(&mut os, daemon, main, Signal::Cont);
    os.advance(at(1_060));
    assert_eq!(stdout_of(&journal(&os, 3)), "t;t;t;");
    // KILL kills a stopped process too.
    sent(&mut os, daemon, main, Signal::Stop);
    sent(&mut os, daemon, main, Signal::Kill);
    assert!(!os.is_alive(main));
}

#[test]
fn a_dash_cells_exit_trap_replaces_the_save_and_a_kill_runs_nothing() {
    let mut os = SimOs::new(SimOsConfig::default());
    let daemon = boot_daemon(&mut os);
    let w = Workload::new(vec![
        Step::SetExitTrap {
            text: "cleanup".into(),
        },
        Step::BusyLoop { ms: None },
    ]);
    start_cell(&mut os, daemon, 1, &w);
    os.advance(at(1));
    let main = main_pid(&journal(&os, 1));
    // TERM: the wrapper's `exit 143` runs the user's trap, not the save.
    sent(&mut os, daemon, main, Signal::Term);
    os.advance(at(300));
    let j = journal(&os, 1);
    assert_eq!(stdout_of(&j), "cleanup");
    assert_eq!(result_of(&j), Some(CellOutcome::Exit { code: 143 }));
    assert!(!os
        .read_file(&format!("{KDIR}/state/note"))
        .unwrap()
        .is_empty());
    // KILL: nothing runs.
    start_cell(&mut os, daemon, 2, &w);
    os.advance(at(301));
    let main = main_pid(&journal(&os, 2));
    sent(&mut os, daemon, main, Signal::Kill);
    os.advance(at(600));
    let j = journal(&os, 2);
    assert_eq!(stdout_of(&j), "");
    assert!(matches!(result_of(&j), Some(CellOutcome::Error { .. })));
}

#[test]
fn zombies_wait_for_their_parent_and_init_may_not_reap() {
    let mut os = SimOs::new(SimOsConfig::default());
    let daemon = boot_daemon(&mut os);
    // The shell does not reap while it spins in a builtin loop.
    let w = Workload::new(vec![
        Step::ForkBurst { count: 3 },
        Step::BusyLoop { ms: Some(100) },
    ]);
    start_cell(&mut os, daemon, 1, &w);
    os.advance(at(50));
    let main = main_pid(&journal(&os, 1));
    let zombies: Vec<ProcInfo> = os
        .processes()
        .into_iter()
        .filter(|p| p.ppid == main && p.zombie)
        .collect();
    assert_eq!(zombies.len(), 3);
    assert!(!os.has_env(zombies[0].pid, "TETHER_CELL", "nonce-1:1"));
    assert!(
        os.processes_of_cell(KDIR, 1) == vec![main],
        "zombies are not alive"
    );
    os.advance(at(150));
    assert!(!os.is_alive(main));
    assert!(
        os.processes().iter().all(|p| p.ppid != main),
        "reaped with it"
    );

    // A pid 1 that does not reap (`sleep infinity`) keeps orphans' zombies.
    let mut os = SimOs::new(SimOsConfig {
        init_reaps: false,
        daemon_subreaper: false,
        ..SimOsConfig::default()
    });
    let daemon = boot_daemon(&mut os);
    assert_eq!(os.view(daemon).unwrap().ppid, 1);
    sent(&mut os, 1, daemon, Signal::Kill);
    assert!(os.process(daemon).unwrap().zombie);
}

#[test]
fn a_dead_reader_kills_the_writer_with_sigpipe() {
    let mut os = SimOs::new(SimOsConfig::default());
    let daemon = boot_daemon(&mut os);
    let w = Workload::new(vec![sleep(100), print("late")]);
    let shim = start_cell(&mut os, daemon, 1, &w);
    os.advance(at(1));
    let main = main_pid(&journal(&os, 1));
    sent(&mut os, daemon, shim, Signal::Kill);
    os.advance(at(200));
    assert!(!os.is_alive(main));
    assert!(os.events().iter().any(|e| matches!(
        e.kind,
        ProcEventKind::Exit {
            pid,
            status: ExitStatus::Signaled(SimSignal::Pipe)
        } if pid == main
    )));
}

/// A sleeping process forked from `parent`, in a new session or group.
fn sleeper(os: &mut SimOs, parent: Pid, new_session: bool, new_group: bool) -> Pid {
    let mut spec = ForkSpec::new(
        &["sleep", "600"],
        Program::Sleep { until: at(600_000) },
        Role::Cell,
    );
    spec.new_session = new_session;
    spec.new_group = new_group;
    os.fork(parent, spec).unwrap()
}

#[test]
fn a_group_its_exit_orphans_is_hung_up_if_a_member_is_stopped() {
    // Linux's `kill_orphaned_pgrp`: `leader` is the link of `child`'s
    // group (another group, same session) to the session; its death
    // orphans that group, whose stopped member gets SIGHUP + SIGCONT.
    let mut os = SimOs::new(SimOsConfig::default());
    let leader = sleeper(&mut os, 1, true, false);
    let child = sleeper(&mut os, leader, false, true);
    let bystander = sleeper(&mut os, leader, false, true);
    sent(&mut os, 1, child, Signal::Stop);
    os.exit_proc(leader, ExitStatus::Code(0));
    assert!(!os.is_alive(child), "SIGHUP + SIGCONT killed it");
    assert!(os.is_alive(bystander), "its group held no stopped member");
}

#[test]
fn a_group_orphaned_all_along_is_never_hung_up() {
    // A session leader's own group has no link out (its parent is in
    // another session): the leader's death changes nothing for it, and a
    // stopped member stays stopped (the simulation once hung it up, and
    // killed a daemon mid-sweep with it).
    let mut os = SimOs::new(SimOsConfig::default());
    let leader = sleeper(&mut os, 1, true, false);
    let member = sleeper(&mut os, leader, false, false);
    sent(&mut os, 1, member, Signal::Stop);
    os.exit_proc(leader, ExitStatus::Code(0));
    assert!(
        os.is_alive(member),
        "no SIGHUP: the group was orphaned before"
    );
}

#[test]
fn a_child_that_dies_with_its_parent_is_killed_at_its_exit_and_its_child_is_not() {
    // `PR_SET_PDEATHSIG` (the interpreter shim sets it for its
    // interpreter): KILL at the parent's exit, not inherited on fork.
    let mut os = SimOs::new(SimOsConfig::default());
    let parent = sleeper(&mut os, 1, true, false);
    let mut spec = ForkSpec::new(
        &["sleep", "600"],
        Program::Sleep { until: at(600_000) },
        Role::Cell,
    );
    spec.dies_with_parent = true;
    let child = os.fork(parent, spec).unwrap();
    let grandchild = sleeper(&mut os, child, false, false);
    let sibling = sleeper(&mut os, parent, false, false);
    os.exit_proc(parent, ExitStatus::Code(0));
    assert!(!os.is_alive(child), "killed with its parent");
    assert!(os.is_alive(grandchild), "the flag is not inherited");
    assert!(os.is_alive(sibling), "reparented, alive");
}

#[test]
fn a_bounce_kills_everything_keeps_files_and_reuses_pids() {
    let mut os = SimOs::new(SimOsConfig::default());
    os.advance(at(5_000));
    let daemon = boot_daemon(&mut os);
    let before = os.process(daemon).unwrap();
    let boot1 = os.boot_id().unwrap();
    start_cell(
        &mut os,
        daemon,
        1,
        &Workload::new(vec![Step::BusyLoop { ms: None }]),
    );
    os.advance(at(6_000));
    assert!(!os.processes_of_cell(KDIR, 1).is_empty());

    os.bounce();
    assert_eq!(os.alive_pids(), vec![1]);
    assert_ne!(os.boot_id().unwrap(), boot1);
    assert!(os.exists(&format!("{KDIR}/cells/1/code")), "files survive");
    assert!(os.processes_of_cell(KDIR, 1).is_empty());

    // The same spawns after the bounce get the same pid: only the boot id
    // and the start time tell the new daemon from the old one.
    os.advance(at(7_000));
    let again = boot_daemon(&mut os);
    assert_eq!(again, daemon);
    let after = os.process(again).unwrap();
    assert_ne!(after.starttime, before.starttime);
    assert!(matches!(
        os.events().iter().find(|e| matches!(e.kind, ProcEventKind::Boot { .. } if e.at == at(6_000))),
        Some(ProcEvent { kind: ProcEventKind::Boot { killed, .. }, .. }) if killed.contains(&daemon)
    ));
}

#[test]
fn kill_daemon_finds_the_daemon_by_kernel() {
    let mut os = SimOs::new(SimOsConfig::default());
    let daemon = boot_daemon(&mut os);
    assert!(os.has_arg(daemon, "nonce-1"));
    assert_eq!(os.daemon_pid(&format!("{KDIR}/")), Some(daemon));
    assert_eq!(os.kill_daemon(KDIR), Some(daemon));
    assert!(os.process(daemon).is_none(), "reaped by pid 1");
    assert_eq!(os.kill_daemon(KDIR), None);
}

#[test]
fn pids_wrap_and_skip_those_in_use() {
    let mut os = SimOs::new(SimOsConfig {
        pid_max: 10,
        ..SimOsConfig::default()
    });
    let daemon = boot_daemon(&mut os);
    let w = Workload::new(vec![
        Step::ForkBurst { count: 20 },
        Step::BusyLoop { ms: None },
    ]);
    start_cell(&mut os, daemon, 1, &w);
    os.advance(at(1));
    // Pid space full of zombies: the burst stops with an error on stderr.
    let j = journal(&os, 1);
    assert!(j.iter().any(|e| matches!(
        e,
        EntryKind::Output {
            stream: Stream::Stderr,
            ..
        }
    )));
}

#[test]
fn same_calls_same_events() {
    let run = || {
        let mut os = SimOs::new(SimOsConfig::default());
        let daemon = boot_daemon(&mut os);
        let w = Workload::new(vec![
            Step::ForkBurst { count: 5 },
            Step::SetsidDoubleForkDaemon { sleep_ms: 300 },
            Step::EnvIDaemon { sleep_ms: 200 },
            print("x"),
            sleep(50),
        ]);
        start_cell(&mut os, daemon, 1, &w);
        start_cell(&mut os, daemon, 2, &w);
        os.advance(at(1_000));
        os.events()
            .iter()
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
    };
    let a = run();
    assert!(a.len() > 30);
    assert_eq!(a, run());
}

/// Kills what a naive cancel would find; returns the cell's survivors.
fn naive_cancel(os: &mut SimOs, daemon: Pid, pick: impl Fn(&ProcView, Pid) -> bool) -> Vec<Pid> {
    let main = main_pid(&journal(os, 1));
    let targets: Vec<Pid> = os
        .alive_pids()
        .into_iter()
        .filter_map(|p| os.view(p))
        .filter(|v| pick(v, main))
        .map(|v| v.pid)
        .collect();
    for p in targets {
        sent(os, daemon, p, Signal::Kill);
    }
    os.advance(os.now_ts() + Duration::from_millis(10));
    os.processes_of_cell(KDIR, 1)
}

#[test]
fn naive_cancels_miss_the_escapes_they_miss_on_linux() {
    let w = Workload::new(vec![
        Step::SetsidDoubleForkDaemon { sleep_ms: 60_000 },
        Step::EnvIDaemon { sleep_ms: 60_000 },
        Step::SetpgidOrphan { sleep_ms: 60_000 },
        Step::BusyLoop { ms: None },
    ]);
    // Process group only: all three escapes survive.
    let mut os = SimOs::new(SimOsConfig::default());
    let daemon = boot_daemon(&mut os);
    start_cell(&mut os, daemon, 1, &w);
    os.advance(at(1));
    let left = naive_cancel(&mut os, daemon, |v, main| v.pgid == main);
    assert_eq!(left.len(), 3);
    // Env marker only: the env -i daemon survives.
    let mut os = SimOs::new(SimOsConfig::default());
    let daemon = boot_daemon(&mut os);
    start_cell(&mut os, daemon, 1, &w);
    os.advance(at(1));
    let (name, value) = marker(1);
    let left = naive_cancel(&mut os, daemon, |v, _| v.env.get(&name) == Some(&value));
    assert_eq!(left.len(), 1);
    assert!(!os.view(left[0]).unwrap().env.contains_key(&name));
    // Session only: the setsid and env -i daemons survive.
    let mut os = SimOs::new(SimOsConfig::default());
    let daemon = boot_daemon(&mut os);
    start_cell(&mut os, daemon, 1, &w);
    os.advance(at(1));
    let left = naive_cancel(&mut os, daemon, |v, main| v.sid == main);
    assert_eq!(left.len(), 2);
}

#[test]
fn bash_cells_behave_as_bash_does() {
    let mut os = SimOs::new(SimOsConfig::default());
    let daemon = boot_daemon(&mut os);
    // A user's EXIT trap is kept aside: a cancel's TERM saves the state.
    let w = Workload::new(vec![
        Step::SetExitTrap {
            text: "cleanup".into(),
        },
        Step::ForkBurst { count: 3 },
        Step::BackgroundChildHoldingStdout { sleep_ms: 60_000 },
        Step::BusyLoop { ms: None },
    ]);
    start_cell_in(&mut os, daemon, 1, &w, "bash");
    os.advance(at(1));
    let main = main_pid(&journal(&os, 1));
    // Finished background jobs are reaped at once, even in a builtin loop.
    assert!(os.processes().iter().all(|p| !(p.ppid == main && p.zombie)));
    // Background jobs keep SIGINT.
    let bg = *os
        .processes_of_cell(KDIR, 1)
        .iter()
        .find(|&&p| p != main)
        .unwrap();
    sent(&mut os, daemon, bg, Signal::Int);
    assert!(!os.is_alive(bg));
    sent(&mut os, daemon, main, Signal::Term);
    os.advance(at(300));
    assert_eq!(stdout_of(&journal(&os, 1)), "");
    assert!(os.read_file(&format!("{KDIR}/state/shell")).is_ok());
}

#[test]
fn a_cell_cgroup_is_inherited_on_fork_and_finds_what_nothing_else_does() {
    let mut os = SimOs::new(SimOsConfig::default());
    let daemon = boot_daemon(&mut os);
    let w = Workload::new(vec![
        Step::EnvIDaemon { sleep_ms: 60_000 },
        Step::BusyLoop { ms: None },
    ]);
    let shim = start_cell(&mut os, daemon, 1, &w);
    os.advance(at(1));
    let main = main_pid(&journal(&os, 1));
    let group = os
        .read_file(&format!("{KDIR}/cells/1/cgroup"))
        .map(|b| String::from_utf8(b).unwrap())
        .unwrap();
    let group = group.trim_end().to_owned();
    assert_eq!(group, "/sys/fs/cgroup/tether-nonce-1-1");
    assert_eq!(os.cgroups(), vec![group.clone()]);
    // Inherited on fork: the main process and what it started; not the
    // shim, not the daemon.
    let escaped = os
        .processes_of_cell(KDIR, 1)
        .into_iter()
        .find(|&p| p != main)
        .unwrap();
    assert_eq!(os.cgroup_members(&group), vec![main, escaped]);
    assert_eq!(os.view(escaped).unwrap().cgroup.as_deref(), Some(&*group));
    assert_eq!(os.view(shim).unwrap().cgroup, None);
    // The shim is killed: the env -i daemon goes to the kernel daemon, with
    // no marker and a session of its own; the main process is killed too.
    sent(&mut os, daemon, shim, Signal::Kill);
    sent(&mut os, daemon, main, Signal::Kill);
    os.advance(at(2));
    let v = os.view(escaped).unwrap();
    let (name, value) = marker(1);
    assert!(v.ppid == daemon && v.sid != main && !v.env.contains_key(&name));
    assert_eq!(os.remove_cgroup(&group).map_err(|_| ()), Err(()));
    let table = Table::snapshot(&os);
    let protected = procs::protected(&table, daemon);
    let mut scope = CellScope {
        shim: None,
        pgid: Some(main),
        marker: value,
        other_markers: vec!["nonce-1:2".into()],
        extra: vec![],
        cgroup: None,
    };
    assert!(procs::cell_processes(&os, &table, &scope, &protected).is_empty());
    scope.cgroup = Some(group.clone());
    let set = procs::cell_processes(&os, &table, &scope, &protected);
    assert_eq!(set.into_iter().collect::<Vec<_>>(), vec![escaped]);
    // Once its last member is gone the cgroup can be removed.
    sent(&mut os, daemon, escaped, Signal::Kill);
    os.advance(at(3));
    assert!(os.cgroup_members(&group).is_empty());
    assert_eq!(os.remove_cgroup(&group), Ok(()));
    assert!(os.cgroups().is_empty());
}

#[test]
fn without_writable_cgroups_a_cell_has_none_and_the_shim_removes_its_own() {
    // Not writable: no cgroup, no file, the cell runs as before.
    let mut os = SimOs::new(SimOsConfig {
        cgroup_root: None,
        ..SimOsConfig::default()
    });
    let daemon = boot_daemon(&mut os);
    start_cell(&mut os, daemon, 1, &Workload::new(vec![print("hi")]));
    os.advance(at(500));
    assert_eq!(stdout_of(&journal(&os, 1)), "hi");
    assert!(!os.exists(&format!("{KDIR}/cells/1/cgroup")));
    assert!(os.cgroups().is_empty());
    // Writable: the shim removes the cell's cgroup once its tree is gone.
    let mut os = SimOs::new(SimOsConfig::default());
    let daemon = boot_daemon(&mut os);
    let w = Workload::new(vec![print("hi"), sleep(100)]);
    let shim = start_cell(&mut os, daemon, 1, &w);
    os.advance(at(1));
    assert_eq!(os.cgroups().len(), 1);
    os.advance(at(500));
    assert!(!os.is_alive(shim));
    assert_eq!(stdout_of(&journal(&os, 1)), "hi");
    assert!(os.cgroups().is_empty());
}

#[test]
fn a_killed_daemons_pid_is_reused_only_once_its_session_is_empty() {
    let mut os = SimOs::new(SimOsConfig::default());
    let daemon = boot_daemon(&mut os);
    let w = Workload::new(vec![sleep(500)]);
    start_cell(&mut os, daemon, 1, &w);
    os.advance(at(1));
    assert_eq!(os.kill_daemon(KDIR), Some(daemon));
    assert!(os.process(daemon).is_none(), "reaped by pid 1");
    os.reuse_pid_next(daemon);
    // The cell's shim is still in the daemon's session: its number stays
    // taken, as on Linux.
    let next = os.begin_exec(&["true".into()]).unwrap();
    assert_ne!(next, daemon);
    os.end_exec(next, 0);
    os.advance(at(2_000));
    assert!(
        !os.processes().iter().any(|p| p.sid == daemon),
        "the session emptied"
    );
    let reused = os.begin_exec(&["true".into()]).unwrap();
    assert_eq!(reused, daemon, "the next birth takes the freed pid");
    assert!(os.pids_wrapped(), "ground truth: a pid was reused");
}

#[test]
fn a_shim_stopped_after_its_write_does_nothing_more_until_killed() {
    // Armed at the journal, after the cell's first output was journaled:
    // the next journal write (the append with its result and `done`)
    // stops the shim there, before the done flag.
    let mut os = SimOs::new(SimOsConfig::default());
    let daemon = boot_daemon(&mut os);
    let w = Workload::new(vec![print("one\n"), sleep(100), print("two\n")]);
    let shim = start_cell(&mut os, daemon, 1, &w);
    os.advance(at(50));
    assert_eq!(stdout_of(&journal(&os, 1)), "one\n");
    os.arm_kill_after_write(Some("journal".into()));
    os.advance(at(1_000));
    // One more append landed (the rest of the output, or the end), and
    // nothing after it: the shim is alive, stopped, and not done.
    let j = journal(&os, 1);
    assert!(os.is_alive(shim));
    let flag = tether_core::agent::journal::done_flag(&format!("{KDIR}/cells/1/journal"));
    assert!(!os.exists(&flag), "{j:?}");
    // Running on changes nothing of it until it is killed.
    os.advance(at(2_000));
    assert_eq!(journal(&os, 1), j);
    assert!(!os.exists(&flag));
    let stopped = os.take_stopped_at_write();
    assert_eq!(stopped, Some((shim, "journal".to_owned())));
    os.kill_from_outside(shim);
    assert!(!os.is_alive(shim));
    assert!(!os.exists(&flag));
    // Unarmed, another shim runs its cell to the end.
    os.arm_kill_after_write(None);
    let other = start_cell(&mut os, daemon, 2, &w);
    os.advance(at(5_000));
    assert_eq!(result_of(&journal(&os, 2)), Some(CellOutcome::Ok));
    assert!(!os.is_alive(other));
}
