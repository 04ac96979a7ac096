//! The Modal bridge: one long-lived `python3` per [`super::ModalTransport`]
//! running [`SCRIPT`], which imports Modal's client once and runs every
//! exec and streaming exec of that transport, several in flight at once,
//! over JSON lines on its stdin and stdout (the protocol is written at the
//! top of `bridge.py`).
//!
//! This side owns the process and routes what it says to the callers
//! waiting for it, by request id. It decides nothing about the ops:
//!
//! - started on first use; a bridge that is gone (killed, crashed, its
//!   runtime dropped) is started again on the next use;
//! - when it ends, every call in flight fails with a transport error
//!   (`unreachable` if it never said it was ready, so nothing was started;
//!   `io` otherwise: the command may have run) and every open stream ends;
//!   the client's retries do the rest;
//! - a call abandoned by its caller is forgotten here (its late reply is
//!   dropped); a stream dropped by its owner is closed (its stdin ends)
//!   — the bridge never terminates anything;
//! - dropping the transport (or its runtime, or this process ending)
//!   closes the bridge's stdin: it ends its streams' stdin and exits by
//!   itself within about 2 s. It is never killed from here (but for a
//!   bridge that prints garbage): on Modal a channel whose stdin never
//!   ends would stay in the sandbox.

use crate::channel::ChannelStream;
use crate::transport::{ExecOutput, TransportError, TransportErrorKind};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io;
use std::pin::Pin;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, oneshot};

/// The bridge's source, run with `python3 -c`.
pub const SCRIPT: &str = include_str!("bridge.py");

/// How much of the bridge's stderr an error quotes.
const STDERR_KEPT: usize = 4096;

/// The bridge of one transport: the current process, if any.
pub(crate) struct Bridge {
    python: String,
    /// The sandbox, as the script's argv[1].
    target: String,
    live: Mutex<Option<Live>>,
    next_id: AtomicU64,
    started: AtomicU64,
}

/// A running bridge process.
#[derive(Clone)]
struct Live {
    /// Lines for its stdin; the writer task ends (closing it) when the
    /// last sender is dropped.
    requests: mpsc::UnboundedSender<Vec<u8>>,
    shared: Arc<Shared>,
    pid: Option<u32>,
}

/// What the reader task and the callers share.
#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    stderr: Mutex<Vec<u8>>,
}

#[derive(Default)]
struct State {
    /// Why the bridge ended, once it has.
    ended: Option<TransportError>,
    waiting: BTreeMap<u64, Waiter>,
}

enum Waiter {
    Exec(oneshot::Sender<Result<ExecOutput, TransportError>>),
    Stream {
        opened: Option<oneshot::Sender<Result<(), TransportError>>>,
        stdout: Option<mpsc::UnboundedSender<Vec<u8>>>,
        stderr: Option<mpsc::UnboundedSender<Vec<u8>>>,
    },
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking holder leaves plain data behind: still usable.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn io_error(detail: String) -> TransportError {
    TransportError {
        kind: TransportErrorKind::Io,
        detail,
    }
}

impl Live {
    fn usable(&self) -> bool {
        !self.requests.is_closed() && lock(&self.shared.state).ended.is_none()
    }

    /// Registers `waiter` as `id` and sends `request`; the error the
    /// bridge ended with if it has.
    fn send(&self, id: u64, waiter: Waiter, request: &Value) -> Result<(), TransportError> {
        {
            let mut state = lock(&self.shared.state);
            if let Some(e) = &state.ended {
                return Err(e.clone());
            }
            state.waiting.insert(id, waiter);
        }
        let mut line = request.to_string().into_bytes();
        line.push(b'\n');
        if self.requests.send(line).is_err() {
            lock(&self.shared.state).waiting.remove(&id);
            return Err(TransportError {
                kind: TransportErrorKind::Unreachable,
                detail: "the Modal bridge's stdin is closed; the request was not sent".into(),
            });
        }
        Ok(())
    }

    fn forget(&self, id: u64) {
        lock(&self.shared.state).waiting.remove(&id);
    }
}

/// Forgets a call whose caller stopped waiting.
struct Forget {
    live: Live,
    id: u64,
}

impl Drop for Forget {
    fn drop(&mut self) {
        self.live.forget(self.id);
    }
}

impl Bridge {
    pub(crate) fn new(python: String, target: Value) -> Bridge {
        Bridge {
            python,
            target: target.to_string(),
            live: Mutex::new(None),
            next_id: AtomicU64::new(1),
            started: AtomicU64::new(0),
        }
    }

    /// The pid of the bridge process now running, if one is.
    pub(crate) fn pid(&self) -> Option<u32> {
        lock(&self.live)
            .as_ref()
            .filter(|l| l.usable())
            .and_then(|l| l.pid)
    }

    /// How many bridge processes this transport has started.
    pub(crate) fn started(&self) -> u64 {
        self.started.load(Ordering::Relaxed)
    }

    /// The running bridge, started if there is none (or it is gone).
    fn live(&self) -> Result<Live, TransportError> {
        let mut slot = lock(&self.live);
        if let Some(live) = slot.as_ref().filter(|l| l.usable()) {
            return Ok(live.clone());
        }
        let live = self.spawn()?;
        *slot = Some(live.clone());
        Ok(live)
    }

    fn spawn(&self) -> Result<Live, TransportError> {
        let mut command = Command::new(&self.python);
        command
            .args(["-c", SCRIPT])
            .arg(&self.target)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // A Ctrl-C at the terminal is for tether, not for the bridge.
            .process_group(0);
        // Not killed when dropped (nor when this process dies): it sees
        // its stdin end, closes its commands' stdin and exits by itself.
        // Killed, it could not, and on Modal a channel left without EOF
        // would stay in the sandbox.
        let mut child = spawn_retrying(&mut command).map_err(|e| TransportError {
            kind: TransportErrorKind::Unreachable,
            detail: format!("cannot run {} for the Modal bridge: {e}", self.python),
        })?;
        self.started.fetch_add(1, Ordering::Relaxed);
        let missing = || TransportError {
            kind: TransportErrorKind::Unreachable,
            detail: "a pipe of the Modal bridge is missing".into(),
        };
        let stdin = child.stdin.take().ok_or_else(missing)?;
        let stdout = child.stdout.take().ok_or_else(missing)?;
        let stderr = child.stderr.take().ok_or_else(missing)?;
        let shared = Arc::new(Shared::default());
        let (requests, lines) = mpsc::unbounded_channel();
        let pid = child.id();
        tokio::spawn(write_requests(stdin, lines));
        tokio::spawn(keep_stderr(stderr, Arc::clone(&shared)));
        tokio::spawn(read_replies(
            child,
            stdout,
            Arc::clone(&shared),
            self.python.clone(),
        ));
        Ok(Live {
            requests,
            shared,
            pid,
        })
    }

    fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Runs `argv` to completion with `stdin` written to it.
    pub(crate) async fn exec(
        &self,
        argv: &[String],
        stdin: &[u8],
    ) -> Result<ExecOutput, TransportError> {
        let live = self.live()?;
        let id = self.next_id();
        let (tx, rx) = oneshot::channel();
        let request =
            json!({"id": id, "op": "exec", "argv": argv, "stdin": STANDARD.encode(stdin)});
        live.send(id, Waiter::Exec(tx), &request)?;
        let _forget = Forget { live, id };
        rx.await
            .unwrap_or_else(|_| Err(io_error("the Modal bridge dropped the call".into())))
    }

    /// Starts `argv` with open pipes.
    pub(crate) async fn open_stream(
        &self,
        argv: &[String],
    ) -> Result<ChannelStream, TransportError> {
        let live = self.live()?;
        let id = self.next_id();
        let (opened_tx, opened) = oneshot::channel();
        let (out_tx, out_rx) = mpsc::unbounded_channel();
        let (err_tx, err_rx) = mpsc::unbounded_channel();
        let waiter = Waiter::Stream {
            opened: Some(opened_tx),
            stdout: Some(out_tx),
            stderr: Some(err_tx),
        };
        live.send(id, waiter, &json!({"id": id, "op": "open", "argv": argv}))?;
        // Until it is open, an abandoned open forgets the stream and ends
        // its stdin if it opens after all.
        let writer = BridgeWriter {
            live: live.clone(),
            id,
            closed: false,
        };
        opened
            .await
            .unwrap_or_else(|_| Err(io_error("the Modal bridge dropped the stream".into())))?;
        Ok(ChannelStream {
            stdin: Box::new(writer),
            stdout: Box::new(ChunkReader::new(out_rx)),
            stderr: Box::new(ChunkReader::new(err_rx)),
            keep: Box::new(()),
            pid: live.pid,
            send_delay: Duration::ZERO,
        })
    }
}

async fn write_requests(
    mut stdin: tokio::process::ChildStdin,
    mut lines: mpsc::UnboundedReceiver<Vec<u8>>,
) {
    while let Some(line) = lines.recv().await {
        if stdin.write_all(&line).await.is_err() || stdin.flush().await.is_err() {
            // It is gone: the reader sees its stdout end and says so.
            return;
        }
    }
    // Every sender is gone (the transport was dropped): the bridge sees
    // its stdin end, closes its streams and exits.
}

async fn keep_stderr(mut stderr: tokio::process::ChildStderr, shared: Arc<Shared>) {
    let mut buf = [0u8; 1024];
    while let Ok(n) = stderr.read(&mut buf).await {
        if n == 0 {
            return;
        }
        let mut kept = lock(&shared.stderr);
        kept.extend_from_slice(&buf[..n]);
        let excess = kept.len().saturating_sub(STDERR_KEPT);
        kept.drain(..excess);
    }
}

/// Routes each line the bridge prints; when it ends, fails everyone
/// still waiting.
async fn read_replies(
    mut child: Child,
    stdout: tokio::process::ChildStdout,
    shared: Arc<Shared>,
    python: String,
) {
    let mut lines = tokio::io::BufReader::new(stdout);
    let mut line = Vec::new();
    let mut ready = false;
    let mut fatal: Option<TransportError> = None;
    let mut garbage: Option<String> = None;
    loop {
        line.clear();
        match lines.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let Ok(msg) = serde_json::from_slice::<Value>(&line) else {
            garbage = Some(
                String::from_utf8_lossy(&line)
                    .trim()
                    .chars()
                    .take(200)
                    .collect(),
            );
            break;
        };
        if msg.get("ready").is_some() {
            ready = true;
        } else if let Some(f) = msg.get("fatal") {
            fatal = Some(error_of(f));
        } else if let Some(id) = msg.get("id").and_then(Value::as_u64) {
            route(&shared, id, &msg);
        }
    }
    if garbage.is_some() {
        let _ = child.start_kill();
    }
    // It closed its stdout: it is exiting (or was killed).
    let status = match tokio::time::timeout(Duration::from_secs(2), child.wait()).await {
        Ok(Ok(status)) => status.to_string(),
        _ => {
            let _ = child.start_kill();
            "still running; killed".into()
        }
    };
    // Give its last words a moment to arrive.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let said = String::from_utf8_lossy(&lock(&shared.stderr))
        .trim()
        .to_owned();
    let error = fatal.unwrap_or_else(|| {
        let what = match &garbage {
            Some(g) => format!("printed something that is not a JSON line ({g:?})"),
            None => format!("exited ({status})"),
        };
        let detail = if said.is_empty() {
            format!("the Modal bridge ({python}) {what}")
        } else {
            format!("the Modal bridge ({python}) {what}: {said}")
        };
        TransportError {
            // Before it said it was ready it read no request: nothing ran.
            kind: if ready {
                TransportErrorKind::Io
            } else {
                TransportErrorKind::Unreachable
            },
            detail,
        }
    });
    let waiting = {
        let mut state = lock(&shared.state);
        state.ended = Some(error.clone());
        std::mem::take(&mut state.waiting)
    };
    for (_, waiter) in waiting {
        match waiter {
            Waiter::Exec(tx) => {
                let _ = tx.send(Err(error.clone()));
            }
            Waiter::Stream {
                opened: Some(tx), ..
            } => {
                let _ = tx.send(Err(error.clone()));
            }
            // An open stream ends: its stdout and stderr senders drop.
            Waiter::Stream { stderr, .. } => {
                if let Some(stderr) = stderr {
                    let _ = stderr.send(error.detail.clone().into_bytes());
                }
            }
        }
    }
}

fn error_of(e: &Value) -> TransportError {
    let kind = match e.get("kind").and_then(Value::as_str) {
        Some("unreachable") => TransportErrorKind::Unreachable,
        _ => TransportErrorKind::Io,
    };
    let detail = e
        .get("detail")
        .and_then(Value::as_str)
        .unwrap_or("unknown error");
    TransportError {
        kind,
        detail: format!("modal: {detail}"),
    }
}

fn bytes_of(msg: &Value, key: &str) -> Option<Vec<u8>> {
    STANDARD.decode(msg.get(key)?.as_str()?).ok()
}

fn route(shared: &Shared, id: u64, msg: &Value) {
    let mut state = lock(&shared.state);
    let Some(waiter) = state.waiting.get_mut(&id) else {
        // Abandoned by its caller: dropped.
        return;
    };
    match waiter {
        Waiter::Exec(_) => {
            let result = if let Some(e) = msg.get("error") {
                Err(error_of(e))
            } else {
                match (
                    msg.get("rc").and_then(Value::as_i64),
                    bytes_of(msg, "stdout"),
                    bytes_of(msg, "stderr"),
                ) {
                    (Some(rc), Some(stdout), Some(stderr)) => Ok(ExecOutput {
                        stdout,
                        stderr,
                        exit_code: i32::try_from(rc).unwrap_or(-1),
                    }),
                    _ => Err(io_error(format!(
                        "the Modal bridge's reply lacks rc/stdout/stderr: {}",
                        truncated(msg)
                    ))),
                }
            };
            if let Some(Waiter::Exec(tx)) = state.waiting.remove(&id) {
                let _ = tx.send(result);
            }
        }
        Waiter::Stream {
            opened,
            stdout,
            stderr,
        } => {
            if let Some(e) = msg.get("error") {
                let error = error_of(e);
                match opened.take() {
                    Some(tx) => {
                        let _ = tx.send(Err(error));
                    }
                    None => {
                        // Writing failed: the stream is over; say why.
                        if let Some(err) = stderr.take() {
                            let _ = err.send(error.detail.into_bytes());
                        }
                        stdout.take();
                    }
                }
            } else if msg.get("opened").is_some() {
                if let Some(tx) = opened.take() {
                    let _ = tx.send(Ok(()));
                }
            } else {
                let pipe = match msg.get("fd").and_then(Value::as_u64) {
                    Some(1) => stdout,
                    _ => stderr,
                };
                if let Some(data) = bytes_of(msg, "data") {
                    if let Some(tx) = pipe.as_ref() {
                        let _ = tx.send(data);
                    }
                }
                if msg.get("eof").is_some() {
                    if let Some(tx) = pipe.take() {
                        if let Some(detail) = msg.get("detail").and_then(Value::as_str) {
                            let _ = tx.send(format!("modal: {detail}").into_bytes());
                        }
                    }
                }
            }
            if let Waiter::Stream {
                opened: None,
                stdout: None,
                stderr: None,
            } = waiter
            {
                state.waiting.remove(&id);
            }
        }
    }
}

fn truncated(v: &Value) -> String {
    v.to_string().chars().take(200).collect()
}

/// A stream's stdin: each write is a `write` request; shutdown or drop
/// is `close` (its stdin ends; nothing is terminated).
struct BridgeWriter {
    live: Live,
    id: u64,
    closed: bool,
}

impl BridgeWriter {
    fn close(&mut self) {
        if !self.closed {
            self.closed = true;
            let mut line = json!({"id": self.id, "op": "close"})
                .to_string()
                .into_bytes();
            line.push(b'\n');
            let _ = self.live.requests.send(line);
        }
    }
}

impl AsyncWrite for BridgeWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let broken = |what: &str| Poll::Ready(Err(io::Error::new(io::ErrorKind::BrokenPipe, what)));
        if self.closed {
            return broken("the stream's stdin is closed");
        }
        if !self.live.usable() {
            return broken("the Modal bridge is gone");
        }
        let request = json!({"id": self.id, "op": "write", "data": STANDARD.encode(buf)});
        let mut line = request.to_string().into_bytes();
        line.push(b'\n');
        if self.live.requests.send(line).is_err() {
            return broken("the Modal bridge is gone");
        }
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.close();
        Poll::Ready(Ok(()))
    }
}

impl Drop for BridgeWriter {
    fn drop(&mut self) {
        self.close();
        self.live.forget(self.id);
    }
}

/// Bytes that arrive as chunks on a channel, read as a pipe; the
/// channel's end is EOF.
struct ChunkReader {
    chunks: mpsc::UnboundedReceiver<Vec<u8>>,
    current: Vec<u8>,
    at: usize,
}

impl ChunkReader {
    fn new(chunks: mpsc::UnboundedReceiver<Vec<u8>>) -> ChunkReader {
        ChunkReader {
            chunks,
            current: Vec::new(),
            at: 0,
        }
    }
}

impl AsyncRead for ChunkReader {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            if self.at < self.current.len() {
                let n = buf.remaining().min(self.current.len() - self.at);
                let at = self.at;
                buf.put_slice(&self.current[at..at + n]);
                self.at += n;
                return Poll::Ready(Ok(()));
            }
            match self.chunks.poll_recv(cx) {
                Poll::Ready(Some(chunk)) => {
                    self.current = chunk;
                    self.at = 0;
                }
                // EOF: nothing put in `buf`.
                Poll::Ready(None) => return Poll::Ready(Ok(())),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// Spawns `command`, again while the executable is busy (ETXTBSY): a
/// program written just before (the interpreter a test or an installer
/// put there) stays busy while another thread's fork, which inherited its
/// still-open descriptor, has not exec'd yet.
fn spawn_retrying(command: &mut Command) -> io::Result<Child> {
    let mut attempt = 0u64;
    loop {
        match command.spawn() {
            Err(e) if e.kind() == io::ErrorKind::ExecutableFileBusy && attempt < 20 => {
                attempt += 1;
                std::thread::sleep(std::time::Duration::from_millis(5 * attempt));
            }
            other => return other,
        }
    }
}
