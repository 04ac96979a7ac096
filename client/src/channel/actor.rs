//! The task behind a [`super::ChannelTransport`]: it owns the
//! [`Mux`], the stream (its owner, its reader and writer tasks) and
//! the callers waiting for replies, and moves bytes and time between them.
//! It ends, killing the stream, when the transport is dropped.

use super::stream::{ChannelStream, StreamExec};
use super::{lock, ChannelStatus};
use crate::transport::TransportError;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tether_core::channel::{Mux, MuxConfig, MuxOutput, Route, StreamId};
use tether_core::time::Timestamp;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// How much of the stream's stderr a break message quotes.
const STDERR_KEPT: usize = 2048;

/// A caller's request to the actor.
pub(super) enum Command {
    /// Route this op (its one-shot stdin); the answer says where it went.
    Route {
        request: Vec<u8>,
        answer: oneshot::Sender<Routed>,
    },
    /// The caller stopped waiting for this frame.
    Abandon(u64),
    /// Open the channel now if nothing did yet.
    Start,
}

/// Where an op went.
pub(super) enum Routed {
    /// Run it as a one-shot exec.
    OneShot,
    /// On the channel: its reply (the agent's reply line) or failure.
    Channel {
        frame: u64,
        reply: oneshot::Receiver<Result<Vec<u8>, TransportError>>,
    },
}

/// What the stream's tasks report.
enum StreamEvent {
    Opened(StreamId, Box<ChannelStream>),
    Data(StreamId, Vec<u8>),
    Closed(StreamId, String),
}

/// A started stream: dropping it kills the process and stops its tasks.
struct Live {
    writer: mpsc::UnboundedSender<(Instant, Vec<u8>)>,
    pid: Option<u32>,
    _keep: Box<dyn std::any::Any + Send>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Live {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

struct Actor {
    mux: Mux,
    epoch: Instant,
    opener: Arc<dyn StreamExec>,
    argv: Vec<String>,
    /// The stream being opened or open (at most one).
    current: Option<StreamId>,
    live: Option<(StreamId, Live)>,
    waiters: BTreeMap<u64, oneshot::Sender<Result<Vec<u8>, TransportError>>>,
    events_tx: mpsc::UnboundedSender<StreamEvent>,
    status: Arc<Mutex<ChannelStatus>>,
}

/// Starts the actor; its mailbox.
pub(super) fn spawn(
    opener: Arc<dyn StreamExec>,
    argv: Vec<String>,
    config: MuxConfig,
    status: Arc<Mutex<ChannelStatus>>,
) -> mpsc::UnboundedSender<Command> {
    let (tx, commands) = mpsc::unbounded_channel();
    let (events_tx, events) = mpsc::unbounded_channel();
    let actor = Actor {
        mux: Mux::new(config),
        epoch: Instant::now(),
        opener,
        argv,
        current: None,
        live: None,
        waiters: BTreeMap::new(),
        events_tx,
        status,
    };
    tokio::spawn(actor.run(commands, events));
    tx
}

impl Actor {
    fn now(&self) -> Timestamp {
        let ms = Instant::now()
            .saturating_duration_since(self.epoch)
            .as_millis();
        Timestamp(u64::try_from(ms).unwrap_or(u64::MAX))
    }

    async fn run(
        mut self,
        mut commands: mpsc::UnboundedReceiver<Command>,
        mut events: mpsc::UnboundedReceiver<StreamEvent>,
    ) {
        loop {
            self.flush();
            let wake = self
                .mux
                .poll_timeout()
                .map(|t| self.epoch + Duration::from_millis(t.0));
            // What the stream said first: an op is routed knowing every
            // byte that arrived before it (a process resumed after a
            // suspend must not take its buffered beats for silence).
            tokio::select! {
                biased;
                Some(event) = events.recv() => self.on_event(event),
                command = commands.recv() => match command {
                    Some(command) => self.on_command(command),
                    // The transport is gone: so is the stream (dropped).
                    None => return,
                },
                () = sleep_until_opt(wake) => {
                    let now = self.now();
                    self.mux.handle_timeout(now);
                }
            }
        }
    }

    fn on_command(&mut self, command: Command) {
        let now = self.now();
        match command {
            Command::Route { request, answer } => {
                let routed = match self.mux.route(&request, now) {
                    Route::OneShot => Routed::OneShot,
                    Route::Channel(frame) => {
                        let (tx, reply) = oneshot::channel();
                        self.waiters.insert(frame, tx);
                        Routed::Channel { frame, reply }
                    }
                };
                if let Err(Routed::Channel { frame, .. }) = answer.send(routed) {
                    // The caller left before hearing where its op went.
                    self.abandon(frame);
                }
            }
            Command::Abandon(frame) => self.abandon(frame),
            Command::Start => self.mux.start(now),
        }
    }

    fn abandon(&mut self, frame: u64) {
        self.mux.abandon(frame);
        self.waiters.remove(&frame);
    }

    fn on_event(&mut self, event: StreamEvent) {
        let now = self.now();
        match event {
            StreamEvent::Opened(id, stream) => {
                if self.current == Some(id) {
                    self.live = Some((id, self.start_tasks(id, *stream)));
                }
                // Otherwise the mux gave up on it while it started: the
                // dropped stream kills its process.
            }
            StreamEvent::Data(id, bytes) => self.mux.handle_data(id, &bytes, now),
            StreamEvent::Closed(id, reason) => self.mux.handle_closed(id, &reason, now),
        }
    }

    /// Carries out everything the mux asks, then publishes the status.
    fn flush(&mut self) {
        while let Some(output) = self.mux.poll_output() {
            match output {
                MuxOutput::Open(id) => self.open(id),
                MuxOutput::Close(id) => {
                    if self.current == Some(id) {
                        self.current = None;
                    }
                    if self.live.as_ref().is_some_and(|(live, _)| *live == id) {
                        self.live = None;
                    }
                }
                MuxOutput::Transmit(id, bytes) => {
                    if let Some((live_id, live)) = &self.live {
                        if *live_id == id {
                            // A writer that is gone reports the close itself.
                            let _ = live.writer.send((Instant::now(), bytes));
                        }
                    }
                }
                MuxOutput::Reply { frame, payload } => {
                    if let Some(waiter) = self.waiters.remove(&frame) {
                        let _ = waiter.send(Ok(payload));
                    }
                }
                MuxOutput::Failed { frame, error } => {
                    if let Some(waiter) = self.waiters.remove(&frame) {
                        let _ = waiter.send(Err(error));
                    }
                }
            }
        }
        let mut status = lock(&self.status);
        status.open = self.mux.is_open();
        status.pid = self.live.as_ref().and_then(|(_, live)| live.pid);
        status.stats = self.mux.stats().clone();
        status.last_break = self.mux.last_break().map(str::to_owned);
    }

    fn open(&mut self, id: StreamId) {
        self.current = Some(id);
        self.live = None;
        let opener = Arc::clone(&self.opener);
        let argv = self.argv.clone();
        let events = self.events_tx.clone();
        tokio::spawn(async move {
            let event = match opener.open_stream(argv).await {
                Ok(stream) => StreamEvent::Opened(id, Box::new(stream)),
                Err(e) => StreamEvent::Closed(id, e.to_string()),
            };
            let _ = events.send(event);
        });
    }

    fn start_tasks(&self, id: StreamId, stream: ChannelStream) -> Live {
        let ChannelStream {
            mut stdin,
            stdout,
            stderr,
            pid,
            keep,
            send_delay,
        } = stream;
        let said = Arc::new(Mutex::new(Vec::new()));
        let stderr_task = tokio::spawn(keep_stderr(stderr, Arc::clone(&said)));
        let events = self.events_tx.clone();
        let reader = tokio::spawn(read_stream(id, stdout, said, events));
        let (writer, mut frames) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
        let events = self.events_tx.clone();
        let writer_task = tokio::spawn(async move {
            while let Some((sent, bytes)) = frames.recv().await {
                if !send_delay.is_zero() {
                    tokio::time::sleep_until(sent + send_delay).await;
                }
                let wrote = async {
                    stdin.write_all(&bytes).await?;
                    stdin.flush().await
                };
                if let Err(e) = wrote.await {
                    let _ = events.send(StreamEvent::Closed(
                        id,
                        format!("cannot write to the channel: {e}"),
                    ));
                    return;
                }
            }
        });
        Live {
            writer,
            pid,
            _keep: keep,
            tasks: vec![stderr_task, reader, writer_task],
        }
    }
}

async fn read_stream(
    id: StreamId,
    mut stdout: Box<dyn AsyncRead + Send + Unpin>,
    said: Arc<Mutex<Vec<u8>>>,
    events: mpsc::UnboundedSender<StreamEvent>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    let reason = loop {
        match stdout.read(&mut buf).await {
            Ok(0) => break "the channel's stream ended".to_owned(),
            Ok(n) => {
                if events
                    .send(StreamEvent::Data(id, buf[..n].to_vec()))
                    .is_err()
                {
                    return;
                }
            }
            Err(e) => break format!("cannot read the channel: {e}"),
        }
    };
    // Whatever the command said on its way out, briefly.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let said = String::from_utf8_lossy(&lock(&said)).trim().to_owned();
    let reason = if said.is_empty() {
        reason
    } else {
        format!("{reason}: {said}")
    };
    let _ = events.send(StreamEvent::Closed(id, reason));
}

async fn keep_stderr(mut stderr: Box<dyn AsyncRead + Send + Unpin>, said: Arc<Mutex<Vec<u8>>>) {
    let mut buf = [0u8; 1024];
    while let Ok(n) = stderr.read(&mut buf).await {
        if n == 0 {
            return;
        }
        let mut kept = lock(&said);
        let room = STDERR_KEPT.saturating_sub(kept.len());
        kept.extend_from_slice(&buf[..n.min(room)]);
    }
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
