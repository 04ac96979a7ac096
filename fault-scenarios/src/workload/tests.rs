use super::*;
use std::process::{Command, Output};

fn print(text: &str) -> Step {
    Step::Print {
        stream: Stream::Stdout,
        text: text.to_owned(),
    }
}

/// The shells the agent runs cells with: bash when present, else sh.
const SHELLS: [&str; 2] = ["/bin/sh", "bash"];

fn run_in(shell: &str, script: &str) -> Output {
    Command::new(shell)
        .arg("-c")
        .arg(script)
        .output()
        .expect("the shell runs")
}

/// Runs `script` in every shell; they must agree exactly; returns the output.
fn run_sh(script: &str) -> Output {
    let outs: Vec<Output> = SHELLS.iter().map(|sh| run_in(sh, script)).collect();
    for (sh, out) in SHELLS.iter().zip(&outs).skip(1) {
        assert_eq!(out, &outs[0], "{sh} differs from {}", SHELLS[0]);
    }
    outs.into_iter().next().expect("at least one shell")
}

fn count_lines(path: &std::path::Path) -> usize {
    std::fs::read_to_string(path)
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

#[test]
fn encode_decode_round_trip() {
    let w = Workload::new(vec![
        print("hi\n"),
        Step::TrapTerm {
            then: vec![print("bye"), Step::Exit { code: 3 }],
        },
        Step::BusyLoop { ms: None },
        Step::BusyLoop { ms: Some(5) },
        Step::EnvIDaemon { sleep_ms: 300_000 },
        Step::WriteSideEffect {
            name: "runs".into(),
        },
    ]);
    assert_eq!(Workload::decode(&w.encode()), Ok(w.clone()));
    assert_eq!(w.side_effects(), vec!["runs".to_owned()]);
    let text = String::from_utf8(w.encode()).unwrap();
    assert!(text.contains(r#"{"step":"busy_loop"}"#), "{text}");
}

#[test]
fn bad_workloads_give_typed_errors() {
    type Check = fn(&WorkloadError) -> bool;
    let cases: Vec<(&[u8], Check)> = vec![
        (b"echo hi", |e| matches!(e, WorkloadError::Json { .. })),
        (b"{\"steps\":[{\"step\":\"nope\"}]}", |e| {
            matches!(e, WorkloadError::Json { .. })
        }),
        (
            b"{\"steps\":[{\"step\":\"write_side_effect\",\"name\":\"../x\"}]}",
            |e| matches!(e, WorkloadError::BadSideEffectName { .. }),
        ),
        (
            b"{\"steps\":[{\"step\":\"set_var\",\"name\":\"1a\",\"value\":\"\"}]}",
            |e| matches!(e, WorkloadError::BadVarName { .. }),
        ),
        (
            b"{\"steps\":[{\"step\":\"change_dir\",\"path\":\"\"}]}",
            |e| matches!(e, WorkloadError::BadPath { .. }),
        ),
        (
            b"{\"steps\":[{\"step\":\"fork_burst\",\"count\":99999}]}",
            |e| matches!(e, WorkloadError::TooManyForks { .. }),
        ),
        (b"{\"steps\":[{\"step\":\"exit\",\"code\":256}]}", |e| {
            matches!(e, WorkloadError::Json { .. })
        }),
    ];
    for (bytes, check) in cases {
        let err = Workload::decode(bytes).unwrap_err();
        assert!(check(&err), "{}: {err}", String::from_utf8_lossy(bytes));
        assert!(!err.to_string().is_empty());
    }
    let mut deep = vec![print("x")];
    for _ in 0..MAX_DEPTH {
        deep = vec![Step::TrapTerm { then: deep }];
    }
    assert_eq!(
        Workload::decode(&Workload::new(deep).encode()),
        Err(WorkloadError::TooDeep)
    );
}

#[test]
fn rendered_shell_prints_exactly_and_exits() {
    let tricky = "it's 100% \\n \"quoted\"\nline two $HOME `id`";
    let w = Workload::new(vec![
        print(tricky),
        Step::Print {
            stream: Stream::Stderr,
            text: "to stderr".into(),
        },
        print("a\0b"),
        Step::Exit { code: 7 },
        print("never"),
    ]);
    let out = run_sh(&render_shell(&w, "/nonexistent"));
    let mut expected = tricky.as_bytes().to_vec();
    expected.extend_from_slice(b"a\0b");
    assert_eq!(out.stdout, expected);
    assert_eq!(out.stderr, b"to stderr");
    assert_eq!(out.status.code(), Some(7));
}

#[test]
fn rendered_shell_writes_side_effects_and_runs_traps() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let w = Workload::new(vec![
        Step::WriteSideEffect {
            name: "runs".into(),
        },
        Step::WriteSideEffect {
            name: "runs".into(),
        },
        Step::SetVar {
            name: "TW_X".into(),
            value: "it's".into(),
        },
        Step::SetExitTrap {
            text: "exit trap: 'q'".into(),
        },
        Step::TrapTerm {
            then: vec![
                print("got term;"),
                Step::WriteSideEffect {
                    name: "term".into(),
                },
            ],
        },
        Step::Print {
            stream: Stream::Stdout,
            text: String::new(),
        },
        Step::BusyLoop { ms: Some(30) },
        Step::ChangeDir { path: d.to_owned() },
        Step::Exit { code: 0 },
    ]);
    let mut script = render_shell(&w, d);
    // Exercise the TERM trap before the final exit.
    script = script.replace(
        "exit 0\n",
        "kill -TERM $$\nprintf '%s' \"$TW_X\"; pwd\nexit 0\n",
    );
    let out = run_sh(&script);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("got term;it's{d}\nexit trap: 'q'")
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // Once per shell.
    assert_eq!(count_lines(&dir.path().join("runs")), 2 * SHELLS.len());
    assert_eq!(count_lines(&dir.path().join("term")), SHELLS.len());
}

#[test]
fn rendered_shell_ignore_term_survives_term() {
    let w = Workload::new(vec![Step::IgnoreTerm, print("alive")]);
    let script = render_shell(&w, "/x").replace("printf", "kill -TERM $$; printf");
    let out = run_sh(&script);
    assert_eq!(out.stdout, b"alive");
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn rendered_shell_fork_burst_and_daemons_run() {
    // The escape steps run for real (short sleeps) and the shell goes on.
    let w = Workload::new(vec![
        Step::ForkBurst { count: 5 },
        Step::SetsidDoubleForkDaemon { sleep_ms: 10 },
        Step::EnvIDaemon { sleep_ms: 10 },
        Step::SetpgidOrphan { sleep_ms: 10 },
        print("done"),
    ]);
    let out = run_sh(&render_shell(&w, "/x"));
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
    assert_eq!(out.stdout, b"done");
}

#[test]
fn rendered_python_does_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let w = Workload::new(vec![
        print("it's \"100%\"\n"),
        Step::Print {
            stream: Stream::Stderr,
            text: "err".into(),
        },
        Step::WriteSideEffect {
            name: "runs".into(),
        },
        Step::TrapTerm {
            then: vec![print("term!")],
        },
        Step::BusyLoop { ms: Some(10) },
        Step::Sleep { ms: 1 },
        Step::Exit { code: 4 },
    ]);
    let code = render_python(&w, d);
    if !tether_require::have("render_python", tether_require::Need::Python3) {
        return;
    }
    let child = Command::new("python3")
        .arg("-c")
        .arg(&code)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "it's \"100%\"\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "err", "{code}");
    assert_eq!(out.status.code(), Some(4));
    // One line, naming the interpreter that ran it (the live observer's
    // evidence of which interpreter a cell ran on).
    let runs = std::fs::read_to_string(dir.path().join("runs")).unwrap();
    assert_eq!(runs, format!("{pid}\n"));
}

/// `(pgid, sid)` from `/proc/PID/stat`, cut after the last `)`.
fn pgid_sid(pid: u32) -> Option<(u32, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    Some((f.get(2)?.parse().ok()?, f.get(3)?.parse().ok()?))
}

fn has_marker(pid: u32, marker: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/environ"))
        .map(|env| env.split(|&b| b == 0).any(|kv| kv == marker.as_bytes()))
        .unwrap_or(false)
}

/// Pids of live processes whose command line is exactly `argv`.
fn pids_running(argv: &[&str]) -> Vec<u32> {
    let want: Vec<u8> = argv
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want) {
            out.push(pid);
        }
    }
    out
}

/// The escape steps do on Linux what the simulation says they do: the
/// setsid daemon leaves the session and keeps the env, the `env -i` daemon
/// leaves the session and loses the env, the setpgid orphan leaves the
/// group and stays in the session (the `env -i` one without the env).
#[test]
fn rendered_escapes_leave_group_session_and_env_as_simulated() {
    let marker = format!("TW_SCENARIO_MARK={}", std::process::id());
    let cases = [
        (Step::SetsidDoubleForkDaemon { sleep_ms: 7_101 }, "7.101"),
        (Step::EnvIDaemon { sleep_ms: 7_102 }, "7.102"),
        (Step::SetpgidOrphan { sleep_ms: 7_103 }, "7.103"),
        (
            Step::BackgroundChildHoldingStdout { sleep_ms: 7_104 },
            "7.104",
        ),
        (Step::SetpgidEnvIOrphan { sleep_ms: 7_105 }, "7.105"),
    ];
    let w = Workload::new(cases.iter().map(|(s, _)| s.clone()).collect());
    // The cell's shell as the shim starts it: a session leader.
    let script = format!("{}echo $$", render_shell(&w, "/x"));
    let mut child = Command::new("setsid")
        .args(["-w", "sh", "-c", &script])
        .env("TW_SCENARIO_MARK", std::process::id().to_string())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Read only the first line: the background holder keeps stdout open.
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let shell: u32 = line.trim().parse().unwrap();
    let mut found = Vec::new();
    for (_, secs) in &cases {
        // A background child execs `sleep` a moment after its parent
        // moved on: look again until it has.
        let mut pids = pids_running(&["sleep", secs]);
        for _ in 0..200 {
            if !pids.is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
            pids = pids_running(&["sleep", secs]);
        }
        assert_eq!(pids.len(), 1, "sleep {secs}: {pids:?}");
        let pid = pids[0];
        found.push((pid, pgid_sid(pid).unwrap(), has_marker(pid, &marker)));
    }
    for (pid, _, _) in &found {
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    }
    let _ = child.wait();
    let [setsid, env_i, setpgid, background, setpgid_env_i] = found.try_into().unwrap();
    assert!(setsid.1 .1 != shell && setsid.2, "setsid: {setsid:?}");
    assert!(env_i.1 .1 != shell && !env_i.2, "env -i: {env_i:?}");
    assert_eq!(setpgid.1 .0, setpgid.0, "setpgid: own group");
    assert!(setpgid.1 .1 == shell && setpgid.2, "setpgid: {setpgid:?}");
    assert_eq!(
        background.1,
        (shell, shell),
        "background: group and session kept"
    );
    assert!(background.2);
    assert_eq!(
        setpgid_env_i.1 .0, setpgid_env_i.0,
        "setpgid env -i: own group"
    );
    assert!(
        setpgid_env_i.1 .1 == shell && !setpgid_env_i.2,
        "setpgid env -i: {setpgid_env_i:?}"
    );
}

#[test]
fn rendered_names_print_their_value_and_fail_when_unbound() {
    let set = Step::SetName {
        name: "greeting".into(),
        value: "it's 100%\\".into(),
    };
    let show = |name: &str| Step::PrintName { name: name.into() };
    let bound = Workload::new(vec![set.clone(), show("greeting"), Step::IgnoreInt]);
    let unbound = Workload::new(vec![show("missing"), print("not reached\n")]);
    bound.validate().unwrap();
    let out = run_sh(&render_shell(&bound, "/x"));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "it's 100%\\\n");
    assert!(out.status.success());
    // The shells word their error differently; both stop there.
    for sh in SHELLS {
        let out = run_in(sh, &render_shell(&unbound, "/x"));
        assert!(out.stdout.is_empty(), "{sh}: {out:?}");
        assert!(!out.status.success(), "{sh}");
    }
    // A name is a shell variable, not an export: a child does not see it.
    let child = format!(
        "{}sh -c 'printf %s \"$greeting\"'",
        render_shell(&bound, "/x")
    );
    assert_eq!(
        String::from_utf8_lossy(&run_sh(&child).stdout),
        "it's 100%\\\n"
    );
    let python = |w: &Workload| {
        Command::new("python3")
            .arg("-c")
            .arg(render_python(w, "/x"))
            .output()
    };
    if !tether_require::have("python half", tether_require::Need::Python3) {
        return;
    }
    let out = python(&bound).unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "it's 100%\\\n");
    let out = python(&unbound).unwrap();
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("NameError"));
    assert!(
        Workload::new(vec![show("1x")]).validate().is_err(),
        "a name must be an identifier"
    );
}

/// A late print's rendered code runs in the background: the shell is done
/// first, and its child prints exactly `late_text` after the wait.
#[test]
fn a_late_print_prints_its_lines_after_the_shell_is_done() {
    let w = Workload::new(vec![
        Step::LatePrint {
            after_ms: 100,
            tag: "t-1".into(),
            lines: 3,
        },
        print("main\n"),
    ]);
    w.validate().unwrap();
    let out = run_sh(&render_shell(&w, "/nonexistent"));
    let want = format!("main\n{}", late_text("t-1", 3));
    assert_eq!(String::from_utf8_lossy(&out.stdout), want);
    assert_eq!(late_line("t", 7), format!("t 000007 {LATE_PAD}\n"));
    let bad = Workload::new(vec![Step::LatePrint {
        after_ms: 1,
        tag: "a b".into(),
        lines: 1,
    }]);
    assert!(bad.validate().is_err());
}
