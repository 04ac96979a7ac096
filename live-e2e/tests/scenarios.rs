//! Catalog scenarios against real backends through the real client driver
//! and agent: local (this machine), docker (a container from
//! tether-sandbox:latest), ssh (a private sshd on loopback), Modal (with
//! credentials) and the Modal stand-in (Modal's client as the bridge uses
//! it, on local processes), one-shot and on the channel. Observations
//! come from the sandbox itself: its `ps`, its side-effect files.

use tether_core::client::Event;
use tether_core::protocol::{CellOutcome, Lang, Stream};
use tether_live::backends::{self, skip};
use tether_live::container::Container;
use tether_live::harness::{unique, Live};
use tether_live::modal_box::{ModalBox, ModalStandIn};
use tether_live::sshd::Sshd;
use tether_require::{missing, Need};
use tether_scenarios::{render_shell, Step, Workload};

/// What keeps a backend alive for a test.
#[allow(dead_code)]
enum Sandbox {
    Local(tempfile::TempDir),
    Docker(Container),
    Ssh(Sshd, tempfile::TempDir),
    Modal(ModalBox),
    ModalStandIn(ModalStandIn),
}

fn host_root() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("tether-live")
        .tempdir()
        .expect("tempdir")
}

/// A session on `backend`, or `None` (after saying why) when that backend
/// cannot run here.
fn open(backend: &str, test: &str) -> Option<(Sandbox, Live)> {
    match backend {
        "local" => {
            let dir = host_root();
            let live = Live::new("local", &dir.path().display().to_string());
            Some((Sandbox::Local(dir), live))
        }
        "docker" => {
            if let Err(why) = backends::docker() {
                missing(test, Need::Docker, &why);
                return None;
            }
            let c = Container::start(test.rsplit("::").next().unwrap_or("t"));
            let live = Live::new(&c.spec(), "/tmp/tether-live");
            Some((Sandbox::Docker(c), live))
        }
        "ssh" => {
            if let Err(why) = backends::sshd() {
                missing(test, Need::Sshd, &why);
                return None;
            }
            let sshd = Sshd::start();
            let dir = host_root();
            let live = Live::new(&sshd.spec(), &dir.path().display().to_string());
            Some((Sandbox::Ssh(sshd, dir), live))
        }
        "modal" => {
            if let Err(why) = backends::modal() {
                skip(test, &why);
                return None;
            }
            let sb = ModalBox::create();
            let live = Live::new(&sb.spec(), "/tmp/tether-live");
            Some((Sandbox::Modal(sb), live))
        }
        "modal-standin" | "modal-standin-channel" => {
            if let Err(why) = Need::Python3.probe() {
                missing(test, Need::Python3, &why);
                return None;
            }
            let standin = ModalStandIn::new();
            let (spec, root) = (standin.spec(), standin.root());
            let live = if backend.ends_with("-channel") {
                let location = tether_live::harness::agent().location(&root);
                let parsed = tether::backend::BackendSpec::parse(&spec).expect("a modal spec");
                let channel = tether::channel::channel_for(
                    &parsed,
                    &location,
                    tether_core::channel::MuxConfig::default(),
                )
                .expect("modal carries a channel");
                Live::with_driver(&spec, &root, move |_| channel, |_| ())
            } else {
                Live::new(&spec, &root)
            };
            Some((Sandbox::ModalStandIn(standin), live))
        }
        other => panic!("no backend {other}"),
    }
}

fn shell(steps: Vec<Step>, live: &Live) -> String {
    render_shell(&Workload::new(steps), &live.side_dir())
}

fn print(text: &str) -> Step {
    Step::Print {
        stream: Stream::Stdout,
        text: text.into(),
    }
}

fn secs(ms: u64) -> String {
    format!("{}.{:03}", ms / 1000, ms % 1000)
}

/// Shell state (exported variables, cwd) persists across cells; `exit N`
/// ends a cell with N and keeps the state; each cell ran exactly once.
async fn state_persists_across_cells(live: &mut Live) {
    live.prepare().await;
    let value = format!("v-{}", unique());
    let dir = live.side_dir();
    let first = shell(
        vec![
            Step::SetVar {
                name: "TW_LIVE".into(),
                value: value.clone(),
            },
            Step::ChangeDir { path: dir.clone() },
            Step::WriteSideEffect {
                name: "state".into(),
            },
            print("one\n"),
        ],
        live,
    );
    let run = live.run("k", Lang::Shell, &first).await;
    assert_eq!(run.outcome, CellOutcome::Ok, "{run:?}");
    assert_eq!(run.out(), "one\n");

    let run = live
        .run(
            "k",
            Lang::Shell,
            "printf '%s|%s\\n' \"$TW_LIVE\" \"$(pwd)\"",
        )
        .await;
    assert_eq!(run.outcome, CellOutcome::Ok, "{run:?}");
    assert_eq!(run.out(), format!("{value}|{dir}\n"));

    let run = live
        .run("k", Lang::Shell, &shell(vec![Step::Exit { code: 3 }], live))
        .await;
    assert_eq!(run.outcome, CellOutcome::Exit { code: 3 });
    let run = live.run("k", Lang::Shell, "echo \"$TW_LIVE\"").await;
    assert_eq!(run.out(), format!("{value}\n"), "state kept after exit 3");
    assert_eq!(
        live.side_effect_count("state").await,
        1,
        "the cell ran once"
    );

    // A Python kernel keeps its namespace too.
    let run = live.run("py", Lang::Python, "x = 41").await;
    assert_eq!(run.outcome, CellOutcome::Ok, "{run:?}");
    let run = live.run("py", Lang::Python, "print(x + 1)").await;
    assert_eq!(run.out(), "42\n", "{run:?}");

    live.shutdown("k").await;
    live.shutdown("py").await;
}

/// Cancel of a cell that started escaping daemons (setsid double fork,
/// env -i daemon, background child holding stdout, setpgid orphan) and
/// ignores TERM leaves none of them alive, and the kernel keeps working.
async fn cancel_leaves_zero_survivors(live: &mut Live) {
    live.prepare().await;
    let base = 7_000_000 + unique() * 10;
    let tags: Vec<String> = (0..5).map(|i| secs(base + i)).collect();
    let code = shell(
        vec![
            Step::SetsidDoubleForkDaemon { sleep_ms: base },
            Step::EnvIDaemon { sleep_ms: base + 1 },
            Step::BackgroundChildHoldingStdout { sleep_ms: base + 2 },
            Step::SetpgidOrphan { sleep_ms: base + 3 },
            Step::IgnoreTerm,
            print("go\n"),
            Step::Sleep { ms: base + 4 },
        ],
        live,
    );
    let (run, before) = live
        .run_observe_cancel("k", Lang::Shell, &code, b"go\n")
        .await;
    assert_eq!(run.outcome, CellOutcome::Cancelled, "{run:?}");
    for tag in &tags {
        assert!(
            before
                .iter()
                .any(|p| p.args.contains(tag.as_str()) && !p.is_zombie()),
            "before the cancel, a process tagged {tag} ran: {before:#?}"
        );
    }
    let mut left = Vec::new();
    for tag in &tags {
        left.extend(live.survivors(tag).await);
    }
    assert!(
        left.is_empty(),
        "survivors of the cancelled cell: {left:#?}"
    );

    let run = live.run("k", Lang::Shell, "echo alive").await;
    assert_eq!(run.outcome, CellOutcome::Ok, "{run:?}");
    assert_eq!(run.out(), "alive\n");
    live.shutdown("k").await;
}

/// The client dies mid-cell; a new client resumes the cell from its record
/// and gets its whole output exactly once; the cell ran once.
async fn output_survives_a_client_crash(live: &mut Live) {
    live.prepare().await;
    let code = shell(
        vec![
            print("first\n"),
            Step::Sleep { ms: 1500 },
            print("second\n"),
            Step::WriteSideEffect {
                name: "crash".into(),
            },
        ],
        live,
    );
    let seen = live
        .run_and_crash_at("k", Lang::Shell, &code, b"first\n")
        .await;
    assert_eq!(seen.out(), "first\n");
    let run = live.resume("k").await;
    assert_eq!(run.outcome, CellOutcome::Ok, "{run:?}");
    assert_eq!(run.out(), "first\nsecond\n", "the whole output, once");
    assert_eq!(live.side_effect_count("crash").await, 1, "never ran twice");
    live.shutdown("k").await;
}

/// Runs `scenario`, failing (not hanging) if it takes longer than any
/// scenario should: a cell that never resolves is a bug to report.
async fn bounded(test: &str, scenario: impl std::future::Future<Output = ()>) {
    let limit = std::time::Duration::from_secs(150);
    if tokio::time::timeout(limit, scenario).await.is_err() {
        panic!("{test} did not finish within {limit:?}: a call never resolved");
    }
}

macro_rules! on_backends {
    ($($name:ident: $scenario:ident on $backend:literal;)*) => {$(
        #[tokio::test]
        async fn $name() {
            let test = concat!(stringify!($name), " (", $backend, ")");
            let Some((_sandbox, mut live)) = open($backend, test) else { return };
            bounded(test, $scenario(&mut live)).await;
        }
    )*};
}

on_backends! {
    local_state_persists: state_persists_across_cells on "local";
    docker_state_persists: state_persists_across_cells on "docker";
    ssh_state_persists: state_persists_across_cells on "ssh";
    local_cancel_leaves_zero_survivors: cancel_leaves_zero_survivors on "local";
    docker_cancel_leaves_zero_survivors: cancel_leaves_zero_survivors on "docker";
    ssh_cancel_leaves_zero_survivors: cancel_leaves_zero_survivors on "ssh";
    local_output_survives_a_client_crash: output_survives_a_client_crash on "local";
    docker_output_survives_a_client_crash: output_survives_a_client_crash on "docker";
    ssh_output_survives_a_client_crash: output_survives_a_client_crash on "ssh";
    modal_state_persists: state_persists_across_cells on "modal";
    modal_cancel_leaves_zero_survivors: cancel_leaves_zero_survivors on "modal";
    modal_standin_state_persists: state_persists_across_cells on "modal-standin";
    modal_standin_cancel_leaves_zero_survivors: cancel_leaves_zero_survivors on "modal-standin";
    modal_standin_output_survives_a_client_crash: output_survives_a_client_crash on "modal-standin";
    modal_standin_channel_state_persists: state_persists_across_cells on "modal-standin-channel";
    modal_standin_channel_cancel_leaves_zero_survivors: cancel_leaves_zero_survivors on "modal-standin-channel";
    modal_standin_channel_output_survives_a_client_crash: output_survives_a_client_crash on "modal-standin-channel";
}

/// Why the kernel could not start, from the fail-open event (the cell then
/// ran once without a kernel).
fn ran_without_kernel(run: &tether_live::harness::CellRun) -> String {
    run.events
        .iter()
        .find_map(|e| match e {
            tether_core::client::Event::RanWithoutKernel { reason, .. } => Some(reason.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("expected the cell to run without a kernel: {run:?}"))
}

/// A sandbox that is not x86_64 gets a clear reason, not a crash loop, and
/// the cell runs once without a kernel (fail open).
#[tokio::test]
async fn docker_wrong_architecture_is_a_clear_error() {
    bounded(
        "docker_wrong_architecture_is_a_clear_error",
        docker_wrong_architecture_is_a_clear_error_body(),
    )
    .await;
}

async fn docker_wrong_architecture_is_a_clear_error_body() {
    let Some((sandbox, mut live)) = open("docker", "docker_wrong_architecture_is_a_clear_error")
    else {
        return;
    };
    let Sandbox::Docker(c) = &sandbox else {
        unreachable!()
    };
    // The install step asks `uname -m`; this container answers aarch64.
    c.sh("printf '#!/bin/sh\\necho aarch64\\n' >/usr/local/bin/uname && chmod 755 /usr/local/bin/uname");
    let run = live.run("k", Lang::Shell, "echo hi").await;
    let reason = ran_without_kernel(&run);
    assert!(
        reason.contains("aarch64") && reason.contains("x86_64"),
        "{reason}"
    );
    assert_eq!(
        (run.outcome.clone(), run.out()),
        (CellOutcome::Ok, "hi\n".into())
    );
}

/// A Python kernel on a sandbox without python3 says so (and its cell's
/// plain `python3 -c` fails as it would there: 127).
#[tokio::test]
async fn docker_missing_python3_is_a_clear_error() {
    bounded(
        "docker_missing_python3_is_a_clear_error",
        docker_missing_python3_is_a_clear_error_body(),
    )
    .await;
}

async fn docker_missing_python3_is_a_clear_error_body() {
    let Some((sandbox, mut live)) = open("docker", "docker_missing_python3_is_a_clear_error")
    else {
        return;
    };
    let Sandbox::Docker(c) = &sandbox else {
        unreachable!()
    };
    c.sh("rm -f /usr/bin/python3 /usr/bin/python3.*");
    let run = live.run("py", Lang::Python, "1 + 1").await;
    let reason = ran_without_kernel(&run);
    assert!(reason.contains("python3"), "{reason}");
    assert_eq!(run.outcome, CellOutcome::Exit { code: 127 }, "{run:?}");
    // The shell still works there.
    let run = live.run("sh", Lang::Shell, "echo ok").await;
    assert_eq!(run.out(), "ok\n", "{run:?}");
    live.shutdown("sh").await;
}

/// A container restart kills the kernel's processes but keeps its files
/// (and may reuse its pids): the client reports the state as lost, with
/// evidence, and the next cell runs on a fresh kernel.
#[tokio::test]
async fn docker_restart_is_reported_as_state_lost() {
    bounded(
        "docker_restart_is_reported_as_state_lost",
        docker_restart_is_reported_as_state_lost_body(),
    )
    .await;
}

async fn docker_restart_is_reported_as_state_lost_body() {
    let Some((sandbox, mut live)) = open("docker", "docker_restart_is_reported_as_state_lost")
    else {
        return;
    };
    let Sandbox::Docker(c) = &sandbox else {
        unreachable!()
    };
    let run = live.run("k", Lang::Shell, "export KEEP=1; echo set").await;
    assert_eq!(run.outcome, CellOutcome::Ok, "{run:?}");
    let out = std::process::Command::new("docker")
        .args(["restart", "-t", "0", &c.name])
        .output()
        .expect("docker restart");
    assert!(out.status.success());
    let run = live.run("k", Lang::Shell, "echo \"[$KEEP]\"").await;
    let lost = run
        .events
        .iter()
        .any(|e| matches!(e, Event::StateLost { .. }));
    assert!(lost, "no StateLost event: {:#?}", run.events);
    live.shutdown("k").await;
}

/// A sandbox that stops answering (a paused container: every exec is
/// refused) gives `unknown` — never success, never a silent respawn, never
/// "state lost" — and keeps the record; once it answers again the kernel
/// is the same (state intact), and resuming the cell runs it at most once.
#[tokio::test]
async fn docker_unreachable_gives_unknown_and_keeps_the_kernel() {
    bounded(
        "docker_unreachable_gives_unknown_and_keeps_the_kernel",
        docker_unreachable_gives_unknown_and_keeps_the_kernel_body(),
    )
    .await;
}

async fn docker_unreachable_gives_unknown_and_keeps_the_kernel_body() {
    let Some((sandbox, mut live)) = open(
        "docker",
        "docker_unreachable_gives_unknown_and_keeps_the_kernel",
    ) else {
        return;
    };
    let Sandbox::Docker(c) = &sandbox else {
        unreachable!()
    };
    live.prepare().await;
    let run = live.run("k", Lang::Shell, "export KEEP=kept").await;
    assert_eq!(run.outcome, CellOutcome::Ok, "{run:?}");
    let docker = |verb: &str| {
        let ok = std::process::Command::new("docker")
            .args([verb, &c.name])
            .output()
            .expect("docker")
            .status
            .success();
        assert!(ok, "docker {verb}");
    };
    docker("pause");
    let code = shell(
        vec![
            Step::WriteSideEffect {
                name: "paused".into(),
            },
            print("ran\n"),
        ],
        &live,
    );
    let run = live.run("k", Lang::Shell, &code).await;
    docker("unpause");
    let CellOutcome::Unknown { reason } = &run.outcome else {
        panic!("a paused sandbox must give unknown, got {run:?}")
    };
    assert!(reason.contains("paused"), "{reason}");
    assert!(
        !run.events
            .iter()
            .any(|e| matches!(e, Event::StateLost { .. })),
        "unreachable is not evidence of a lost kernel: {:#?}",
        run.events
    );
    // A new client resumes the cell. Its submit never reached the
    // sandbox; whatever the client concludes, the cell runs at most once
    // and success is claimed only with its output.
    live.new_client();
    let run = live.resume("k").await;
    let runs = live.side_effect_count("paused").await;
    match &run.outcome {
        CellOutcome::Ok => {
            assert_eq!(run.out(), "ran\n");
            assert_eq!(runs, 1, "ran exactly once");
        }
        CellOutcome::Unknown { .. } | CellOutcome::Error { .. } => {
            assert_eq!(
                runs, 0,
                "not reported as run, so it must not have run: {run:?}"
            );
        }
        other => panic!("resume gave {other:?}"),
    }
    let run = live.run("k", Lang::Shell, "echo $KEEP").await;
    assert_eq!(run.out(), "kept\n", "the same kernel, state intact");
    live.shutdown("k").await;
}
