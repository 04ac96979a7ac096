use super::*;
use std::process::{Command, Output};

fn print(text: &str) -> Step {
    Step::Print {
        stream: Stream::Stdout,
        text: text.to_owned(),
    }
}

fn run_sh(script: &str) -> Output {
    Command::new("/bin/sh")
        .arg("-c")
        .arg(script)
        .output()
        .expect("/bin/sh runs")
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
    assert_eq!(count_lines(&dir.path().join("runs")), 2);
    assert_eq!(count_lines(&dir.path().join("term")), 1);
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
    let out = match Command::new("python3").arg("-c").arg(&code).output() {
        Ok(out) => out,
        Err(e) => {
            eprintln!("python3 not available ({e}); skipping");
            return;
        }
    };
    assert_eq!(String::from_utf8_lossy(&out.stdout), "it's \"100%\"\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "err", "{code}");
    assert_eq!(out.status.code(), Some(4));
    assert_eq!(count_lines(&dir.path().join("runs")), 1);
}
