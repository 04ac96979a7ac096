//! `tether mux`: the background process that keeps one sandbox's channel
//! open. It holds the sandbox's lock file (one multiplexer per sandbox:
//! a second one exits at once), listens on the socket, runs each
//! connection's exec call through its [`crate::channel::ChannelTransport`]
//! (a call whose `tether` hangs up is abandoned), and exits once no
//! connection was open for its idle period ([`Idle`]) or when its socket
//! is removed or replaced.

use super::MuxPaths;
use crate::transport::{ExecOp, ExecRequest, Transport};
use serde_json::json;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tether_core::persist::wire::{Request, Response, ACK};
use tether_core::persist::Idle;
use tether_core::time::Timestamp;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// How often the multiplexer checks that its socket is still its own.
const SOCKET_CHECK: Duration = Duration::from_secs(1);

/// What the multiplexer serves with.
pub struct Served {
    /// Runs the exec calls.
    pub transport: Arc<dyn Transport>,
    /// Its status as JSON, for `tether mux --status`.
    pub status: Box<dyn Fn() -> serde_json::Value + Send + Sync>,
}

/// Why the multiplexer stopped.
#[derive(Debug, PartialEq, Eq)]
pub enum Stopped {
    /// Another multiplexer holds the lock.
    AlreadyRunning,
    /// Idle for its whole idle period.
    Idle,
    /// Its socket was removed or replaced.
    SocketGone,
    /// SIGTERM, SIGINT or SIGHUP.
    Signalled,
}

/// Serves at `paths` until idle for `idle_after`; `serve` is built once
/// the lock is held (so a second multiplexer opens no channel).
pub async fn run(
    paths: &MuxPaths,
    idle_after: Duration,
    serve: impl FnOnce() -> Served,
) -> Result<Stopped, String> {
    paths.ensure_dir()?;
    let _lock = match take_lock(paths)? {
        Some(lock) => lock,
        None => return Ok(Stopped::AlreadyRunning),
    };
    // Whatever is at the path (a stale socket, a stray file) is ours to
    // replace: the directory is the user's alone and we hold the lock.
    match std::fs::remove_file(&paths.socket) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("cannot remove {}: {e}", paths.socket.display())),
    }
    let listener = UnixListener::bind(&paths.socket)
        .map_err(|e| format!("cannot listen on {}: {e}", paths.socket.display()))?;
    std::fs::set_permissions(&paths.socket, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("cannot chmod {}: {e}", paths.socket.display()))?;
    let inode = std::fs::metadata(&paths.socket)
        .map_err(|e| format!("cannot stat {}: {e}", paths.socket.display()))?
        .ino();
    let served = serve();
    let transport = served.transport;
    let counters = Arc::new(Counters::default());
    let status = {
        let counters = Arc::clone(&counters);
        let inner = served.status;
        Arc::new(move || {
            let mut value = inner();
            value["pid"] = json!(std::process::id());
            value["idle_after_ms"] = json!(idle_after.as_millis() as u64);
            value["connections"] = json!(counters.connections.load(Ordering::Relaxed));
            value["execs"] = json!(counters.execs.load(Ordering::Relaxed));
            value
        })
    };
    let epoch = Instant::now();
    let now = || Timestamp(epoch.elapsed().as_millis() as u64);
    let mut idle = Idle::new(idle_after, now());
    let (ended_tx, mut ended) = mpsc::unbounded_channel::<()>();
    let mut check = tokio::time::interval(SOCKET_CHECK);
    let signal =
        |kind| tokio::signal::unix::signal(kind).map_err(|e| format!("cannot catch signals: {e}"));
    use tokio::signal::unix::SignalKind;
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut hup = signal(SignalKind::hangup())?;
    loop {
        let wake = idle
            .poll_timeout()
            .map(|t| epoch + Duration::from_millis(t.0));
        tokio::select! {
            biased;
            Some(()) = ended.recv() => idle.handle_end(now()),
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                idle.handle_begin();
                counters.connections.fetch_add(1, Ordering::Relaxed);
                let transport = Arc::clone(&transport);
                let status = Arc::clone(&status);
                let counters = Arc::clone(&counters);
                let ended = ended_tx.clone();
                tokio::spawn(async move {
                    serve_one(stream, transport, &*status, &counters).await;
                    let _ = ended.send(());
                });
            }
            () = sleep_until_opt(wake) => {
                if idle.expired(now()) {
                    return Ok(stop(paths, inode, Stopped::Idle));
                }
            }
            _ = term.recv() => return Ok(stop(paths, inode, Stopped::Signalled)),
            _ = int.recv() => return Ok(stop(paths, inode, Stopped::Signalled)),
            _ = hup.recv() => return Ok(stop(paths, inode, Stopped::Signalled)),
            _ = check.tick() => {
                let ours = std::fs::metadata(&paths.socket).is_ok_and(|m| m.ino() == inode);
                if !ours {
                    return Ok(Stopped::SocketGone);
                }
            }
        }
    }
}

#[derive(Default)]
struct Counters {
    connections: AtomicU64,
    execs: AtomicU64,
}

/// The lock file, held: `None` if another multiplexer holds it.
fn take_lock(paths: &MuxPaths) -> Result<Option<std::fs::File>, String> {
    use rustix::fs::{flock, FlockOperation};
    use std::io::Write;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&paths.lock)
        .map_err(|e| format!("cannot open {}: {e}", paths.lock.display()))?;
    loop {
        match flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => break,
            Err(rustix::io::Errno::INTR) => continue,
            Err(rustix::io::Errno::WOULDBLOCK) => return Ok(None),
            Err(e) => return Err(format!("cannot lock {}: {e}", paths.lock.display())),
        }
    }
    let mut writer = &file;
    file.set_len(0)
        .and_then(|()| writeln!(writer, "{}", std::process::id()))
        .map_err(|e| format!("cannot write {}: {e}", paths.lock.display()))?;
    Ok(Some(file))
}

/// Removes the socket (a newer multiplexer's is not ours to remove), so
/// the next `tether` finds none rather than a stale one.
fn stop(paths: &MuxPaths, inode: u64, why: Stopped) -> Stopped {
    if std::fs::metadata(&paths.socket).is_ok_and(|m| m.ino() == inode) {
        let _ = std::fs::remove_file(&paths.socket);
    }
    why
}

async fn serve_one(
    stream: UnixStream,
    transport: Arc<dyn Transport>,
    status: &(dyn Fn() -> serde_json::Value + Send + Sync),
    counters: &Counters,
) {
    let (mut reader, mut writer) = stream.into_split();
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let request = loop {
        match Request::decode(&buf) {
            Ok(Some(request)) => break request,
            Ok(None) => {}
            // A confused peer: hang up on it.
            Err(_) => return,
        }
        match reader.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    if writer.write_all(&[ACK]).await.is_err() {
        return;
    }
    let response = match request {
        Request::Status => Response::Status(status()),
        Request::Exec { argv, stdin, op } => {
            counters.execs.fetch_add(1, Ordering::Relaxed);
            let req = ExecRequest {
                argv,
                stdin,
                op: op.map(|(id, kind)| ExecOp { id, kind }),
            };
            let hung_up = async {
                // Nothing more is expected: EOF or an error means the
                // `tether` left, and its call is abandoned.
                while let Ok(n) = reader.read(&mut chunk).await {
                    if n == 0 {
                        break;
                    }
                }
            };
            // A `tether` that already left (it gave up waiting for the
            // ack) is noticed before its call starts.
            tokio::select! {
                biased;
                () = hung_up => return,
                result = transport.exec(req) => Response::Exec(result),
            }
        }
    };
    let _ = writer.write_all(&response.encode()).await;
    let _ = writer.shutdown().await;
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
