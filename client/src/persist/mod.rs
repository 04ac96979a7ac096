//! The background multiplexer (`tether mux`) that keeps a sandbox's channel
//! open across `tether` invocations, as OpenSSH's `ControlPersist` keeps a
//! master connection, and the transport a `tether` uses to reach it.
//!
//! One multiplexer per sandbox spec, root and agent binary: its socket,
//! lock and log live in `$XDG_RUNTIME_DIR/tether/` (else the state dir's
//! `tether/mux/`), a directory of mode 0700 that must be the user's; the
//! socket has mode 0600. A `tether` connects once per exec call
//! ([`PersistTransport`]); where nothing answers it runs on its own
//! transport at once and starts one for the next `tether` ([`attach`]).
//! The decisions (what a failed connect means, when to exit idle, the
//! socket's messages) are [`tether_core::persist`]'s.
//!
//! - [`server`]: the multiplexer process itself.

pub mod server;

use crate::transport::{
    ExecFuture, ExecOutput, ExecRequest, Transport, TransportError, TransportErrorKind,
};
use sha2::{Digest, Sha256};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tether_core::persist::wire::{Request, Response, ACK};
use tether_core::persist::{on_connect, Attach, ACK_WITHIN};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

/// Where one sandbox's multiplexer lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MuxPaths {
    /// The directory (0700, the user's).
    pub dir: PathBuf,
    /// The socket (0600).
    pub socket: PathBuf,
    /// Held (`flock`) by the running multiplexer; holds its pid.
    pub lock: PathBuf,
    /// What the multiplexer printed (its last start).
    pub log: PathBuf,
}

impl MuxPaths {
    /// The paths of the multiplexer for backend `spec` (as given), sandbox
    /// root `root` and the agent whose hash is `agent_hash`: a new agent or
    /// another latency gets its own.
    pub fn new(spec: &str, root: &str, agent_hash: &str) -> Result<MuxPaths, String> {
        let dir = dir()?;
        let mut digest = Sha256::new();
        for part in [spec, root, agent_hash] {
            digest.update(part.as_bytes());
            digest.update([0]);
        }
        let name: String = digest.finalize()[..8]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        Ok(MuxPaths {
            socket: dir.join(format!("mux-{name}.sock")),
            lock: dir.join(format!("mux-{name}.lock")),
            log: dir.join(format!("mux-{name}.log")),
            dir,
        })
    }

    /// Creates the directory (0700) or checks that it is the user's alone.
    pub fn ensure_dir(&self) -> Result<(), String> {
        let dir = &self.dir;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let meta = std::fs::symlink_metadata(dir)
            .map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
        let uid = rustix::process::getuid().as_raw();
        if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o077 != 0 {
            return Err(format!(
                "{} must be a directory of yours with mode 0700 (it is uid {}, mode {:o}); \
                 fix or remove it",
                dir.display(),
                meta.uid(),
                meta.mode() & 0o7777
            ));
        }
        Ok(())
    }
}

/// The directory of the background processes' sockets:
/// `$XDG_RUNTIME_DIR/tether`, else the state dir's `tether/mux`.
pub fn dir() -> Result<PathBuf, String> {
    if let Some(run) = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
    {
        return Ok(run.join("tether"));
    }
    crate::records::state_home()
        .map(|state| state.join("tether").join("mux"))
        .map_err(|e| e.to_string())
}

/// What [`attach`] found.
pub enum Attached {
    /// A multiplexer answers: send the ops through it.
    Mux(Arc<PersistTransport>),
    /// None: run on the process's own transport; say `note` if any.
    Without {
        /// Why, for the user (nothing on a first use).
        note: Option<String>,
    },
}

/// Connects to the multiplexer at `paths`, or starts one (`start`) for the
/// next `tether` when none answers. Never waits for anything but a local
/// connect.
pub fn attach(
    paths: &MuxPaths,
    fallback: Arc<dyn Transport>,
    start: impl FnOnce() -> Result<(), String>,
) -> Attached {
    if let Err(note) = paths.ensure_dir() {
        return Attached::Without {
            note: Some(format!("not using a background process: {note}")),
        };
    }
    let connected = std::os::unix::net::UnixStream::connect(&paths.socket);
    let socket = paths.socket.display().to_string();
    match on_connect(
        &socket,
        connected.as_ref().map(|_| ()).map_err(|e| e.kind()),
    ) {
        Attach::Use => Attached::Mux(Arc::new(PersistTransport {
            socket: paths.socket.clone(),
            fallback,
            lost: AtomicBool::new(false),
        })),
        Attach::StartOne { note } => {
            let note = match start() {
                Ok(()) => note,
                Err(e) => Some(format!(
                    "{}cannot start the background process: {e}",
                    note.map(|n| format!("{n}; ")).unwrap_or_default()
                )),
            };
            Attached::Without { note }
        }
        Attach::Without { note } => Attached::Without { note: Some(note) },
    }
}

/// Starts `tether … mux` detached (its own session, stdio away from the
/// terminal, output to `paths.log`), not waited for. `args` are the global
/// options that name the sandbox.
pub fn start(paths: &MuxPaths, args: &[String], idle: Duration) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find tether itself: {e}"))?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(&paths.log)
        .map_err(|e| format!("cannot open {}: {e}", paths.log.display()))?;
    std::process::Command::new(exe)
        .args(args)
        .args(["mux", "--idle", &crate::duration::format_duration(idle)])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .map(drop)
        .map_err(|e| e.to_string())
}

/// Asks the multiplexer at `socket` what it is doing.
pub async fn status(socket: &Path) -> Result<serde_json::Value, String> {
    match call(socket, &Request::Status).await {
        Ok(Response::Status(value)) => Ok(value),
        Ok(_) => Err("the background process answered something else".into()),
        Err(CallError::Connect(e)) => Err(format!(
            "no background process answers at {}: {e}",
            socket.display()
        )),
        Err(CallError::Lost(e)) => Err(e),
    }
}

/// Exec calls through the multiplexer; through `fallback` once it is gone.
pub struct PersistTransport {
    socket: PathBuf,
    fallback: Arc<dyn Transport>,
    /// The multiplexer went away: every later call uses `fallback`.
    lost: AtomicBool,
}

enum CallError {
    /// Nothing was sent.
    Connect(std::io::Error),
    /// Sent, and the answer never came.
    Lost(String),
}

async fn call(socket: &Path, request: &Request) -> Result<Response, CallError> {
    let mut stream = UnixStream::connect(socket)
        .await
        .map_err(CallError::Connect)?;
    let lost = |what: String| CallError::Lost(what);
    stream
        .write_all(&request.encode())
        .await
        .map_err(|e| lost(format!("cannot write to the background process: {e}")))?;
    let mut ack = [0u8; 1];
    match tokio::time::timeout(ACK_WITHIN, stream.read_exact(&mut ack)).await {
        Ok(Ok(_)) if ack[0] == ACK => {}
        Ok(Ok(_)) => return Err(lost("the background process sent garbage".into())),
        Ok(Err(e)) => {
            return Err(lost(format!(
                "the background process (tether mux) went away: {e}"
            )))
        }
        Err(_) => {
            return Err(lost(format!(
                "the background process (tether mux) did not answer within {} s (stopped or \
                 hung?); going on without it",
                ACK_WITHIN.as_secs()
            )))
        }
    }
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        match Response::decode(&buf) {
            Ok(Some(response)) => return Ok(response),
            Ok(None) => {}
            Err(e) => return Err(lost(e.to_string())),
        }
        match stream.read(&mut chunk).await {
            Ok(0) => {
                return Err(lost(
                    "the background process (tether mux) went away with the op in flight".into(),
                ))
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) => return Err(lost(format!("cannot read the background process: {e}"))),
        }
    }
}

impl PersistTransport {
    async fn exec_via(&self, req: ExecRequest) -> Result<ExecOutput, TransportError> {
        if self.lost.load(Ordering::Relaxed) {
            return self.fallback.exec(req).await;
        }
        let request = Request::Exec {
            argv: req.argv.clone(),
            stdin: req.stdin.clone(),
            op: req.op.map(|op| (op.id, op.kind)),
        };
        match call(&self.socket, &request).await {
            Ok(Response::Exec(result)) => result,
            Ok(Response::Status(_)) => {
                self.lost.store(true, Ordering::Relaxed);
                Err(TransportError {
                    kind: TransportErrorKind::Io,
                    detail: "the background process answered an exec with its status".into(),
                })
            }
            Err(CallError::Connect(_)) => {
                // Nothing was sent: this process's own transport takes it.
                self.lost.store(true, Ordering::Relaxed);
                self.fallback.exec(req).await
            }
            Err(CallError::Lost(detail)) => {
                // It may have run: the client's retries decide.
                self.lost.store(true, Ordering::Relaxed);
                Err(TransportError {
                    kind: TransportErrorKind::Io,
                    detail,
                })
            }
        }
    }

    /// Whether the multiplexer was lost (later calls use the fallback).
    pub fn lost(&self) -> bool {
        self.lost.load(Ordering::Relaxed)
    }
}

impl Transport for PersistTransport {
    fn exec(&self, req: ExecRequest) -> ExecFuture<'_> {
        Box::pin(self.exec_via(req))
    }

    fn describe(&self) -> String {
        format!("{} (via tether mux)", self.fallback.describe())
    }

    /// This process's own (the fallback's): the multiplexer's are its own.
    fn helpers_started(&self) -> u64 {
        self.fallback.helpers_started()
    }
}
