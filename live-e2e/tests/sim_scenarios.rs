//! Every scenario of the simulation (`tether_scenarios::scenario::all()`), run
//! live: its client script through the real driver and agent, its fixed
//! faults made real, judged by the simulation's oracle over what the real
//! sandbox shows (see `tether_live::sim_run`). Every scenario runs on
//! `local`; a subset also on `docker` when docker runs here. A scenario
//! that cannot be made real on a backend prints
//! `SKIPPED <scenario> on <backend>: <why>` and passes without running
//! (fails, when the reason is a missing feature `TETHER_REQUIRE` names).

use std::time::Duration;
use tether_live::sim_run::{self, skip, unrealisable, Host, Ops};
use tether_scenarios::faults::{Fault, FaultKind, FaultSchedule, OpTarget};
use tether_scenarios::scenario::{all, by_name};

/// The seed whose script a scenario that draws its script per seed
/// (`drawn`) plays here; `tether-live explore` plays every seed's.
const DRAWN_SEED: u64 = 1;

/// Runs `name` on `backend`, each op its own exec; fails with the report
/// on any violation.
async fn check(name: &str, backend: &str) {
    check_with(name, backend, Ops::OneShot).await;
}

/// Runs `name` on `backend` with the client's ops carried as `ops` says;
/// how many went on a channel (0 when none, or when the scenario cannot
/// run there).
async fn check_with(name: &str, backend: &str, ops: Ops) -> u64 {
    let scenario = by_name(name)
        .unwrap_or_else(|| panic!("no sim scenario {name}"))
        .for_seed(DRAWN_SEED);
    if let Some(why) = unrealisable(&scenario, backend) {
        skip(name, backend, &why);
        return 0;
    }
    let host = match backend {
        "local" => Host::local(),
        "docker" => match Host::docker(name, scenario.init_reaps) {
            Ok(h) => h,
            Err(why) => {
                tether_require::missing(
                    &format!("{name} on docker"),
                    tether_require::Need::Docker,
                    &why,
                );
                return 0;
            }
        },
        other => panic!("no backend {other}"),
    };
    let limit = Duration::from_secs(120);
    let Ok(report) = tokio::time::timeout(limit, sim_run::run_with(&scenario, &host, ops)).await
    else {
        panic!("{name} on {backend} did not finish within {limit:?}: a call never resolved");
    };
    println!("{report}");
    assert!(report.violations.is_empty(), "{report}");
    report.channel_ops.unwrap_or(0)
}

macro_rules! live {
    ($($test:ident: $name:literal on $backend:literal;)*) => {
        $(
            #[tokio::test]
            async fn $test() {
                check($name, $backend).await;
            }
        )*
        /// Every scenario of the simulation has a local test here.
        #[test]
        fn every_sim_scenario_runs_locally() {
            let covered: Vec<(&str, &str)> = vec![$(($name, $backend)),*];
            for s in all() {
                assert!(
                    covered.contains(&(s.name, "local")),
                    "sim scenario {} has no live test on local: add it to tests/sim_scenarios.rs",
                    s.name
                );
            }
        }
    };
}

live! {
    local_happy: "happy" on "local";
    local_state: "state" on "local";
    local_tool_calls: "tool_calls" on "local";
    local_tool_call_limits: "tool_call_limits" on "local";
    local_cancel_escapes: "cancel_escapes" on "local";
    local_cancel_trap: "cancel_trap" on "local";
    local_cancel_ignorer: "cancel_ignorer" on "local";
    local_shell_state: "shell_state" on "local";
    local_cancel_early: "cancel_early" on "local";
    local_reply_lost: "reply_lost" on "local";
    local_replaced_mid_submit: "replaced_mid_submit" on "local";
    local_client_crash: "client_crash" on "local";
    local_daemon_killed: "daemon_killed" on "local";
    local_sandbox_bounce: "sandbox_bounce" on "local";
    local_sandbox_replaced: "sandbox_replaced" on "local";
    local_timeout: "timeout" on "local";
    local_queued: "queued" on "local";
    local_two_kernels: "two_kernels" on "local";
    local_reaper: "reaper" on "local";
    local_timeout_resume: "timeout_resume" on "local";
    local_leftovers: "leftovers" on "local";
    local_leftovers_no_init: "leftovers_no_init" on "local";
    local_python_state: "python_state" on "local";
    local_python_cancel: "python_cancel" on "local";
    local_python_stuck: "python_stuck" on "local";
    local_python_bystander: "python_bystander" on "local";
    local_python_orphans: "python_orphans" on "local";
    local_fail_open: "fail_open" on "local";
    local_background_log: "background_log" on "local";
    local_shim_killed_escapes: "shim_killed_escapes" on "local";
    local_daemon_then_shim_killed_escapes: "daemon_then_shim_killed_escapes" on "local";
    local_daemon_termed: "daemon_termed" on "local";
    local_daemon_shim_killed: "daemon_shim_killed" on "local";
    local_full_disk: "full_disk" on "local";
    local_idle_exit: "idle_exit" on "local";
    local_drawn: "drawn" on "local";
    local_drawn_clients: "drawn_clients" on "local";
    local_two_clients: "two_clients" on "local";
    docker_happy: "happy" on "docker";
    docker_reply_lost: "reply_lost" on "docker";
    docker_cancel_escapes: "cancel_escapes" on "docker";
    docker_cancel_trap: "cancel_trap" on "docker";
    docker_cancel_ignorer: "cancel_ignorer" on "docker";
    docker_sandbox_bounce: "sandbox_bounce" on "docker";
    docker_sandbox_replaced: "sandbox_replaced" on "docker";
    docker_python_state: "python_state" on "docker";
    docker_leftovers_no_init: "leftovers_no_init" on "docker";
}

/// The catalog again with the client's ops on the sandbox's channel (the
/// transport `tether run` uses on local and docker) instead of one exec
/// each: every scenario on local, the docker subset on docker.
#[tokio::test]
async fn local_catalog_on_the_channel() {
    let mut on_channel = 0;
    for s in all() {
        on_channel += check_with(s.name, "local", Ops::Channel).await;
    }
    assert!(on_channel > 0, "no op went on the channel");
}

/// See [`local_catalog_on_the_channel`].
#[tokio::test]
async fn docker_catalog_on_the_channel() {
    let mut on_channel = 0;
    for name in [
        "happy",
        "reply_lost",
        "cancel_escapes",
        "cancel_trap",
        "sandbox_bounce",
        "sandbox_replaced",
        "python_state",
        "leftovers_no_init",
    ] {
        on_channel += check_with(name, "docker", Ops::Channel).await;
    }
    assert!(
        on_channel > 0 || tether_live::backends::docker().is_err(),
        "no op went on the channel"
    );
}

/// The network faults no fixed schedule carries (partition, hold, dropped
/// connections, latency, slow start) are made real too: `happy` under all
/// of them still runs its cell once, with its output once, and each fault
/// really hit a call.
#[tokio::test]
async fn local_network_faults_are_realised() {
    let mut scenario = by_name("happy").expect("happy");
    let at = |at_ms, kind| Fault { at_ms, kind };
    scenario.fixed = FaultSchedule(vec![
        at(0, FaultKind::PartitionExec { for_ms: 300 }),
        at(
            0,
            FaultKind::SlowStart {
                op: OpTarget::Submit,
                ms: 200,
            },
        ),
        at(
            0,
            FaultKind::ExecLatency {
                ms: 50,
                for_ms: 1_500,
            },
        ),
        at(350, FaultKind::HoldExec { for_ms: 300 }),
        at(400, FaultKind::DropConnection),
    ]);
    let host = Host::local();
    let limit = Duration::from_secs(120);
    let report = tokio::time::timeout(limit, sim_run::run(&scenario, &host))
        .await
        .expect("bounded");
    println!("{report}");
    assert!(report.violations.is_empty(), "{report}");
    let injected = report.injected.join("\n");
    for hit in ["refused (partition)", "submit starts 200 ms late"] {
        assert!(injected.contains(hit), "no {hit:?} in\n{report}");
    }
}

/// A clock jump of the sandbox alone cannot be made on a real machine,
/// and a restart needs docker: such scenarios skip, saying why.
#[test]
fn unrealisable_faults_are_named() {
    let mut s = by_name("happy").expect("happy");
    assert_eq!(unrealisable(&s, "local"), None);
    s.fixed = FaultSchedule(vec![Fault {
        at_ms: 5,
        kind: FaultKind::ClockJump { ms: 60_000 },
    }]);
    let why = unrealisable(&s, "docker").expect("clock jumps skip");
    assert!(why.why.contains("clock jump"), "{why:?}");
    assert_eq!(why.need, None, "no machine has it: never required");
    let bounce = by_name("sandbox_bounce").expect("sandbox_bounce");
    assert!(unrealisable(&bounce, "local").is_some());
    assert_eq!(unrealisable(&bounce, "docker"), None);
}
