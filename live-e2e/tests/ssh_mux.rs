//! The ssh backend over one multiplexed connection per host, on a real
//! sshd on loopback: cells (one-shot execs, the channel, whole `tether`
//! processes) never open a connection of their own, and the connection's
//! master or the channel killed while a cell waits costs nothing: each
//! cell completes exactly once (its side-effect file counted) with its
//! whole output, in order. Connections are counted in sshd's own log.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tether::backend::BackendSpec;
use tether::channel::{channel_for, ChannelTransport};
use tether::transport::Transport;
use tether_core::bytes::Bytes;
use tether_core::channel::MuxConfig;
use tether_core::client::Event;
use tether_core::ids::KernelName;
use tether_core::protocol::{CellOutcome, Lang, Stream};
use tether_live::backends;
use tether_live::harness::{agent, tether_cli, Live};
use tether_live::sshd::Sshd;
use tether_require::{missing, Need};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// An sshd, or `None` (and a `SKIPPED` line, or a failure under
/// `TETHER_REQUIRE`) without one.
fn sshd(test: &str) -> Option<Sshd> {
    if let Err(why) = backends::sshd() {
        missing(test, Need::Sshd, &why);
        return None;
    }
    Some(Sshd::start())
}

/// A tether session on `sshd` whose ops go over the channel (`channel`)
/// or all as one-shot execs; the channel, when there is one.
fn session(sshd: &Sshd, root: &Path, channel: bool) -> (Live, Option<Arc<ChannelTransport>>) {
    let root = root.to_str().unwrap();
    let spec = BackendSpec::parse(&sshd.spec()).unwrap();
    let transport = channel
        .then(|| channel_for(&spec, &agent().location(root), MuxConfig::default()))
        .flatten();
    let wrapped = transport.clone();
    let live = Live::with_driver(
        &sshd.spec(),
        root,
        move |t| match wrapped {
            Some(ch) => ch as Arc<dyn Transport>,
            None => t,
        },
        |_| (),
    );
    (live, transport)
}

/// The cell: prints 12 numbered lines 0.1 s apart, writes its side
/// effect, prints its end.
fn code(i: usize, side: &Path) -> String {
    format!(
        "echo start {i}; for j in 1 2 3 4 5 6 7 8 9 10 11 12; do echo {i}.$j; sleep 0.1; done; \
         echo ran >> {side}; echo end {i}",
        side = side.display()
    )
}

fn expected(i: usize) -> String {
    let mut s = format!("start {i}\n");
    for j in 1..=12 {
        s.push_str(&format!("{i}.{j}\n"));
    }
    s.push_str(&format!("end {i}\n"));
    s
}

/// Runs cell `i`; once its output has reached line 3 (a wait is in
/// flight or about to be), `interfere` runs. Checks that the cell ran
/// once with its whole output.
async fn run_interfered(live: &mut Live, root: &Path, i: usize, interfere: impl FnOnce()) {
    let side = root.join(format!("side-{i}"));
    let kernel = KernelName::new("k").unwrap();
    let mut out = Vec::new();
    let mut interfere = Some(interfere);
    let trigger = format!("{i}.3\n");
    let (_, outcome) = live
        .driver()
        .run_cell(
            &kernel,
            Lang::Shell,
            Bytes::from(code(i, &side).as_str()),
            None,
            &mut |e| {
                if let Event::Output {
                    stream: Stream::Stdout,
                    data,
                    ..
                } = e
                {
                    out.extend_from_slice(data.as_slice());
                    if String::from_utf8_lossy(&out).contains(&trigger) {
                        if let Some(f) = interfere.take() {
                            f();
                        }
                    }
                }
            },
        )
        .await
        .unwrap();
    assert!(interfere.is_none(), "cell {i}: the interference never ran");
    assert_eq!(outcome, CellOutcome::Ok, "cell {i}");
    assert_eq!(String::from_utf8_lossy(&out), expected(i), "cell {i}");
    assert_eq!(
        std::fs::read_to_string(&side).unwrap(),
        "ran\n",
        "cell {i} ran exactly once"
    );
}

async fn warm(live: &mut Live) {
    let run = live.run("k", Lang::Shell, "true").await;
    assert_eq!(run.outcome, CellOutcome::Ok);
}

fn kill9(pid: u32) {
    let status = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -9 {pid}");
}

/// Pids of this root's `tether-agent channel` processes.
fn channel_pids(root: &Path) -> Vec<u32> {
    let root = root.to_str().unwrap();
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        if args.get(1) == Some(&&b"channel"[..]) && args.contains(&root.as_bytes()) {
            pids.push(pid);
        }
    }
    pids
}

fn host_root() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("tether-sshmux")
        .tempdir()
        .unwrap()
}

#[test]
fn cells_over_ssh_share_one_connection_in_process_and_across_tether_processes() {
    let Some(sshd) = sshd("cells_over_ssh_share_one_connection") else {
        return;
    };
    let root = host_root();
    let before = sshd.connections();
    rt().block_on(async {
        for channel in [false, true] {
            let root = root
                .path()
                .join(if channel { "channel" } else { "one-shot" });
            let (mut live, ch) = session(&sshd, &root, channel);
            for i in 0..5 {
                let run = live.run("k", Lang::Shell, &format!("echo cell {i}")).await;
                assert_eq!(run.outcome, CellOutcome::Ok, "{}", sshd.log());
                assert_eq!(run.out(), format!("cell {i}\n"));
            }
            if let Some(ch) = ch {
                assert!(ch.open(Duration::from_secs(20)).await, "{:?}", ch.status());
                let before = ch.status().stats;
                warm(&mut live).await;
                let after = ch.status().stats;
                assert!(after.on_channel > before.on_channel, "{after:?}");
                assert_eq!(after.one_shot, before.one_shot, "{after:?}");
            }
            let kernel = KernelName::new("k").unwrap();
            live.driver().shutdown(&kernel, &mut |_| ()).await.unwrap();
        }
    });
    assert_eq!(
        sshd.connections() - before,
        1,
        "one connection for every cell, one-shot or on the channel:\n{}",
        sshd.log()
    );
    // Whole `tether` processes find the same master (ControlPersist), and
    // from the second on go through the background process (`tether mux`),
    // whose channel is a session on it.
    let state = tempfile::tempdir().unwrap();
    // The last one waits past its submit: its channel opens (a session on
    // the same connection) and carries the wait.
    for i in 0..3 {
        let code = match i {
            2 => format!("echo cli {i}; sleep 1; echo waited"),
            _ => format!("echo cli {i}"),
        };
        let out = std::process::Command::new(tether_cli())
            .args(["--backend", &sshd.spec(), "--root"])
            .arg(root.path().join("cli"))
            .args(["run", &code])
            .env("XDG_STATE_HOME", state.path())
            .env("XDG_RUNTIME_DIR", state.path().join("run"))
            .env("TETHER_AGENT_BIN", &agent().path)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let waited = if i == 2 { "waited\n" } else { "" };
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("cli {i}\n{waited}")
        );
    }
    assert_eq!(
        sshd.connections() - before,
        1,
        "`tether run` reuses the connection:\n{}",
        sshd.log()
    );
    // The first `tether` started the sandbox's background process: `stop`
    // retires it with the kernel (tests/persist.rs covers it on ssh).
    let stop = std::process::Command::new(tether_cli())
        .args(["--backend", &sshd.spec(), "--root"])
        .arg(root.path().join("cli"))
        .arg("stop")
        .env("XDG_STATE_HOME", state.path())
        .env("XDG_RUNTIME_DIR", state.path().join("run"))
        .env("TETHER_AGENT_BIN", &agent().path)
        .output()
        .unwrap();
    assert!(stop.status.success(), "{stop:?}");
}

/// What is killed under a waiting cell.
#[derive(Clone, Copy, Debug)]
enum Cut {
    /// The ssh master on the client (`kill -9`).
    Master,
    /// The server's process for the connection (`kill -9`): the
    /// connection drops and the master exits by itself.
    ServerSide,
}

#[test]
fn the_ssh_master_killed_or_its_connection_dropped_mid_wait_loses_nothing() {
    let Some(sshd) = sshd("the_ssh_master_killed_mid_wait") else {
        return;
    };
    for (channel, cut) in [
        (true, Cut::Master),
        (false, Cut::Master),
        (true, Cut::ServerSide),
        (false, Cut::ServerSide),
    ] {
        let root = host_root();
        let (mut live, ch) = session(&sshd, root.path(), channel);
        rt().block_on(async {
            warm(&mut live).await;
            for i in 1..=2 {
                if let Some(ch) = &ch {
                    assert!(ch.open(Duration::from_secs(20)).await, "{:?}", ch.status());
                }
                let masters = sshd.masters();
                assert_eq!(masters.len(), 1, "one master: {masters:?}");
                let victims = match cut {
                    Cut::Master => masters,
                    Cut::ServerSide => sshd.connection_pids(),
                };
                assert_eq!(victims.len(), 1, "{cut:?}: one to kill: {victims:?}");
                let connections = sshd.connections();
                let broken = ch.as_ref().map(|ch| ch.status().stats.broken);
                run_interfered(&mut live, root.path(), i, || kill9(victims[0])).await;
                assert_eq!(
                    sshd.connections(),
                    connections + 1,
                    "channel {channel}, {cut:?}: one new connection after the kill"
                );
                if let (Some(ch), Some(broken)) = (&ch, broken) {
                    assert_eq!(ch.status().stats.broken, broken + 1, "{:?}", ch.status());
                }
            }
            let kernel = KernelName::new("k").unwrap();
            live.driver().shutdown(&kernel, &mut |_| ()).await.unwrap();
        });
    }
}

#[test]
fn the_channel_killed_on_the_host_mid_wait_loses_nothing_and_opens_no_connection() {
    let Some(sshd) = sshd("the_channel_killed_on_the_host_mid_wait") else {
        return;
    };
    let root = host_root();
    let (mut live, ch) = session(&sshd, root.path(), true);
    let ch = ch.expect("ssh carries a channel");
    rt().block_on(async {
        warm(&mut live).await;
        let connections = sshd.connections();
        for i in 1..=3 {
            assert!(ch.open(Duration::from_secs(20)).await, "{:?}", ch.status());
            let pids = channel_pids(root.path());
            assert_eq!(pids.len(), 1, "one channel process: {pids:?}");
            let before = ch.status().stats;
            run_interfered(&mut live, root.path(), i, || kill9(pids[0])).await;
            let after = ch.status().stats;
            assert_eq!(after.broken, before.broken + 1, "{after:?}");
        }
        assert!(ch.open(Duration::from_secs(20)).await);
        let before = ch.status().stats;
        warm(&mut live).await;
        let after = ch.status().stats;
        assert!(after.on_channel > before.on_channel, "{after:?}");
        assert_eq!(
            sshd.connections(),
            connections,
            "the channel reopens on the same connection"
        );
        let kernel = KernelName::new("k").unwrap();
        live.driver().shutdown(&kernel, &mut |_| ()).await.unwrap();
    });
}
