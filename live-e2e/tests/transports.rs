//! The remote transports on their own, against the real thing: bytes in
//! and out exactly, the command's exit status kept apart from the
//! transport's failures.

use std::sync::Arc;
use tether::backend::BackendSpec;
use tether::transport::{ExecOutput, ExecRequest, Transport, TransportError, TransportErrorKind};
use tether_live::backends::{self, skip};
use tether_live::container::Container;
use tether_live::modal_box::ModalBox;
use tether_live::sshd::Sshd;
use tether_require::{missing, Need};

fn transport(spec: &str) -> Arc<dyn Transport> {
    BackendSpec::parse(spec)
        .unwrap_or_else(|e| panic!("{spec}: {e}"))
        .transport()
}

async fn exec(
    t: &Arc<dyn Transport>,
    argv: &[&str],
    stdin: &[u8],
) -> Result<ExecOutput, TransportError> {
    t.exec(ExecRequest {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        stdin: stdin.to_vec(),
        op: None,
    })
    .await
}

/// Every byte value, a megabyte of them.
fn all_bytes() -> Vec<u8> {
    (0..1_048_576u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect()
}

const HOSTILE: [&str; 16] = [
    "",
    " ",
    "a b",
    "it's",
    "'",
    "''",
    "\"",
    "$(touch /tmp/tether-pwned)",
    "`id`",
    "$HOME",
    "back\\slash",
    "line\nbreak",
    "-n",
    "*",
    "; exit 3",
    "ünïcödé ✓",
];

#[tokio::test]
async fn docker_exec_round_trips_bytes_and_keeps_exit_codes_apart_from_docker_errors() {
    let test = "docker_exec_round_trips_bytes";
    if let Err(why) = backends::docker() {
        missing(test, Need::Docker, &why);
        return;
    }
    let c = Container::start("transport");
    let t = transport(&c.spec());
    let data = all_bytes();
    let out = exec(&t, &["cat"], &data).await.unwrap();
    assert_eq!(out.exit_code, 0);
    assert!(out.stdout == data, "cat changed the bytes");
    let out = exec(&t, &["sh", "-c", "printf 'e\\377' >&2; exit 255"], b"")
        .await
        .unwrap();
    assert_eq!((out.exit_code, out.stderr.as_slice()), (255, &b"e\xff"[..]));
    let out = exec(&t, &["sh", "-c", "exit 1"], b"").await.unwrap();
    assert_eq!(
        out.exit_code, 1,
        "the command's own 1 is not a docker error"
    );
    let out = exec(&t, &["/nonexistent/tether-agent", "op"], b"")
        .await
        .unwrap();
    assert_eq!(out.exit_code, 127, "a missing agent is 127: {out:?}");
    // A command that prints what docker prints when it cannot start one,
    // and exits as docker would: still the command's own output and
    // status (the exec's process started; a CLI's text could not tell).
    let mimic = "echo 'OCI runtime exec failed: no such file or directory'; exit 126";
    let out = exec(&t, &["sh", "-c", mimic], b"").await.unwrap();
    assert_eq!(out.exit_code, 126, "{out:?}");
    assert!(
        out.stdout.starts_with(b"OCI runtime exec failed"),
        "{out:?}"
    );
    let mut args = vec!["printf", "%s\\0"];
    args.extend(HOSTILE);
    let out = exec(&t, &args, b"").await.unwrap();
    let want: Vec<u8> = HOSTILE
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    assert_eq!(out.stdout, want);

    c.remove();
    let err = exec(&t, &["true"], b"").await.unwrap_err();
    assert_eq!(err.kind, TransportErrorKind::Unreachable, "{err}");
    assert!(err.detail.contains("No such container"), "{err}");
}

#[tokio::test]
async fn docker_image_spec_creates_the_container_once() {
    let test = "docker_image_spec_creates_the_container_once";
    if let Err(why) = backends::docker() {
        missing(test, Need::Docker, &why);
        return;
    }
    let name = format!("tether-live-img-{}", std::process::id());
    let guard = Container {
        name: name.clone(),
        init: false,
    };
    let t = transport(&format!("docker:{name}?image={}", backends::IMAGE));
    let (a, b) = tokio::join!(
        exec(&t, &["cat", "/etc/debian_version"], b""),
        exec(&t, &["sh", "-c", "echo $$"], b"")
    );
    assert_eq!(a.unwrap().exit_code, 0);
    assert_eq!(b.unwrap().exit_code, 0);
    // It is a real container of that image, running docker's init.
    let out = exec(&t, &["ps", "-o", "args=", "-p", "1"], b"")
        .await
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("init"),
        "{out:?}"
    );
    // Its /tmp (the default root's place) is a volume of its own, not the
    // storage driver's file system that `/` is on, and it keeps its files
    // across a restart.
    let mounted = |path: &'static str| {
        let t = &t;
        async move {
            let out = exec(t, &["stat", "-c", "%d", path], b"").await.unwrap();
            String::from_utf8_lossy(&out.stdout).trim().to_owned()
        }
    };
    let (tmp, root) = (mounted("/tmp").await, mounted("/").await);
    assert!(
        !tmp.is_empty() && tmp != root,
        "/tmp on device {tmp}, / on {root}"
    );
    let out = exec(&t, &["sh", "-c", "echo kept > /tmp/mark"], b"")
        .await
        .unwrap();
    assert_eq!(out.exit_code, 0);
    tether_live::container::restart(&name);
    let out = exec(&t, &["cat", "/tmp/mark"], b"").await.unwrap();
    assert_eq!(out.stdout, b"kept\n", "{out:?}");
    drop(guard);
}

#[tokio::test]
async fn ssh_exec_round_trips_hostile_args_stdin_and_every_exit_status() {
    let test = "ssh_exec_round_trips_hostile_args";
    if let Err(why) = backends::sshd() {
        missing(test, Need::Sshd, &why);
        return;
    }
    let sshd = Sshd::start();
    let t = transport(&sshd.spec());
    for arg in HOSTILE {
        let out = exec(&t, &["printf", "%s", arg], b"")
            .await
            .unwrap_or_else(|e| panic!("{e}\nsshd log: {}", sshd.log()));
        assert_eq!(out.stdout, arg.as_bytes(), "printf %s {arg:?}");
        assert_eq!(out.exit_code, 0);
    }
    assert!(
        !std::path::Path::new("/tmp/tether-pwned").exists(),
        "an argument was run as code"
    );
    let data = all_bytes();
    let out = exec(&t, &["cat"], &data).await.unwrap();
    assert!(out.stdout == data, "cat over ssh changed the bytes");
    // The remote command's own 255 is its status, not an ssh failure.
    let out = exec(&t, &["sh", "-c", "printf x >&2; exit 255"], b"")
        .await
        .unwrap();
    assert_eq!((out.exit_code, out.stderr.as_slice()), (255, &b"x"[..]));
    let out = exec(&t, &["/nonexistent/tether-agent", "op"], b"")
        .await
        .unwrap();
    assert_eq!(out.exit_code, 127, "{out:?}");
}

#[tokio::test]
async fn ssh_failures_to_connect_are_unreachable() {
    let test = "ssh_failures_to_connect_are_unreachable";
    if let Err(why) = backends::sshd() {
        missing(test, Need::Sshd, &why);
        return;
    }
    let sshd = Sshd::start();
    // A host key that is not the server's: refused before any command.
    let other = tempfile::tempdir().unwrap();
    let kh = other.path().join("known_hosts");
    std::fs::write(
        &kh,
        format!(
            "[127.0.0.1]:{} ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n",
            sshd.port
        ),
    )
    .unwrap();
    let spec = format!(
        "ssh:{}@127.0.0.1:{}?key={}&known_hosts={}",
        sshd.user,
        sshd.port,
        sshd.key().display(),
        kh.display()
    );
    let err = exec(&transport(&spec), &["true"], b"").await.unwrap_err();
    assert_eq!(err.kind, TransportErrorKind::Unreachable, "{err}");
    assert!(err.detail.contains("Host key verification failed"), "{err}");
    // Nobody listens there any more.
    let port = sshd.port;
    drop(sshd);
    let spec = format!("ssh:127.0.0.1:{port}?connect_timeout=3s");
    let err = exec(&transport(&spec), &["true"], b"").await.unwrap_err();
    assert_eq!(err.kind, TransportErrorKind::Unreachable, "{err}");
}

/// Without the `modal` package (or without credentials) the helper says
/// so, as "unreachable": the command was not started. This runs here.
#[tokio::test]
async fn modal_without_client_or_credentials_is_unreachable_with_the_reason() {
    if backends::modal().is_ok() {
        return; // the real test below runs instead
    }
    let t = transport("modal:sb-tetherlivenosuch?python=python3");
    let err = exec(&t, &["true"], b"").await.unwrap_err();
    assert_eq!(err.kind, TransportErrorKind::Unreachable, "{err}");
    assert!(
        err.detail.contains("pip install modal") || err.detail.contains("Token"),
        "{err}"
    );
}

/// A real Modal sandbox: created for the test, bytes round-tripped,
/// terminated. Needs MODAL_TOKEN_ID / MODAL_TOKEN_SECRET and a python3
/// with `modal` ($TETHER_MODAL_PYTHON).
#[tokio::test]
async fn modal_exec_round_trips_bytes() {
    let test = "modal_exec_round_trips_bytes";
    if let Err(why) = backends::modal() {
        skip(test, &why);
        return;
    }
    let sb = ModalBox::create();
    let t = transport(&sb.spec());
    let data = all_bytes();
    let out = exec(&t, &["cat"], &data).await;
    let status = exec(&t, &["sh", "-c", "exit 255"], b"").await;
    drop(sb);
    assert!(
        out.unwrap().stdout == data,
        "cat over modal changed the bytes"
    );
    assert_eq!(status.unwrap().exit_code, 255);
}

/// Warm cells on the channel in a real Modal sandbox: the channel rides on
/// `Sandbox.exec` through the transport's one bridge, so a warm cell starts
/// no Python process and no exec. Needs MODAL_TOKEN_ID /
/// MODAL_TOKEN_SECRET and a python3 with `modal` ($TETHER_MODAL_PYTHON).
#[tokio::test]
async fn modal_warm_cells_ride_the_channel_through_one_bridge() {
    use std::time::{Duration, Instant};
    use tether::channel::ChannelTransport;
    use tether::modal::ModalTransport;
    use tether_core::bytes::Bytes;
    use tether_core::channel::MuxConfig;
    use tether_core::client::{Client, Config, Event};
    use tether_core::ids::KernelName;
    use tether_core::protocol::{CellOutcome, Lang, Stream};

    let test = "modal_warm_cells_ride_the_channel_through_one_bridge";
    if let Err(why) = backends::modal() {
        skip(test, &why);
        return;
    }
    let sb = ModalBox::create();
    let BackendSpec::Modal(opts) = BackendSpec::parse(&sb.spec()).unwrap() else {
        panic!("{} is not a modal spec", sb.spec())
    };
    let modal = Arc::new(ModalTransport::new(opts));
    let agent = tether_live::harness::agent();
    let location = agent.location("/tmp/tether-live-channel");
    let channel = Arc::new(ChannelTransport::new(
        modal.clone(),
        &location,
        MuxConfig::default(),
    ));
    let seed = u64::from(std::process::id()) << 8;
    let client = Client::new(Config::new(location.clone(), agent.size()), seed);
    let mut driver = tether::Driver::new(
        client,
        channel.clone(),
        Box::new(tether::MemoryStore::new()),
        agent.bytes.clone(),
        location,
    );
    let kernel = KernelName::new("k").unwrap();
    async fn cell(
        driver: &mut tether::Driver,
        kernel: &KernelName,
        code: &str,
    ) -> (CellOutcome, String) {
        let mut out = Vec::new();
        let (_, outcome) = driver
            .run_cell(kernel, Lang::Shell, Bytes::from(code), None, &mut |e| {
                if let Event::Output {
                    stream: Stream::Stdout,
                    data,
                    ..
                } = e
                {
                    out.extend_from_slice(data.as_slice());
                }
            })
            .await
            .unwrap();
        (outcome, String::from_utf8_lossy(&out).into_owned())
    }
    assert_eq!(cell(&mut driver, &kernel, "x=41").await.0, CellOutcome::Ok);
    assert!(
        channel.open(Duration::from_secs(120)).await,
        "{:?}",
        channel.status()
    );
    let before = channel.status().stats;
    for _ in 0..5 {
        let t0 = Instant::now();
        let got = cell(&mut driver, &kernel, "echo $((x + 1))").await;
        println!("warm cell on the channel over Modal: {:?}", t0.elapsed());
        assert_eq!(got, (CellOutcome::Ok, "42\n".to_owned()));
    }
    let after = channel.status().stats;
    assert_eq!(after.one_shot, before.one_shot, "{after:?}");
    assert!(after.on_channel >= before.on_channel + 5, "{after:?}");
    assert_eq!(modal.bridges_started(), 1, "one Python process for all");
    driver.shutdown(&kernel, &mut |_| ()).await.unwrap();
    drop(sb);
}
