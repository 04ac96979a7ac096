//! The client host: the one client script ([`tether_scenarios::script`])
//! on the turmoil host — the real [`tether::Driver`] over a
//! [`SimTransport`] (exec on `turmoil::net`), its records in a
//! [`MemoryStore`] that outlives a client crash, virtual time, and every
//! effect and event written into the trace and the [`ClientLog`] the
//! oracle reads.

use crate::control::Control;
use crate::observe::ClientLog;
use crate::scenario::{CellSpec, Scenario};
use crate::swarm::World;
use crate::trace::{excerpt, now_ms, Trace};
use crate::transport::{call, WireRequest, EXEC_PORT};
use std::cell::{RefCell, RefMut};
use std::rc::Rc;
use std::sync::{Arc, Weak};
use std::time::Duration;
use tether::channel::ChannelTransport;
use tether::transport::{ExecFuture, ExecRequest, Transport};
use tether::{Driver, MemoryStore};
use tether_core::bytes::Bytes;
use tether_core::client::{
    Client, Config, Event, KernelRecord, TransportError, TransportErrorKind,
};
use tether_core::ids::KernelName;
use tether_core::protocol::{AgentLocation, ExecOutput};
use tether_scenarios::script::{self, Frontend, Host};
pub use tether_scenarios::script::{
    kernel_of, kernels, liveness_cell, poll_until, unless_crashed, with_canceller, KERNEL, POLL,
};

/// The agent "binary" the client ships.
pub const AGENT_BINARY: &[u8] = b"\x7fELF tether-agent (simulated)";
/// Where the agent lives on the sandbox.
pub const ROOT: &str = "/var/tmp/tether";

/// The agent's location on the simulated sandbox.
pub fn location() -> AgentLocation {
    use sha2::Digest;
    let hash = sha2::Sha256::digest(AGENT_BINARY);
    let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
    AgentLocation {
        root: ROOT.into(),
        hash: hex,
    }
}

/// The client configuration used in the simulation: the defaults scaled
/// down so that runs stay short in virtual time ([`script::timing`]).
pub fn config() -> Config {
    let mut c = Config::new(location(), AGENT_BINARY.len() as u64);
    script::timing(&mut c);
    c
}

/// [`config`] with the knobs `world` drew.
pub fn config_in(world: &World) -> Config {
    let mut c = config();
    c.wait_ms = world.wait_ms;
    c.grace = Duration::from_millis(world.grace_ms);
    c.daemon_idle_timeout = Duration::from_millis(world.daemon_idle_ms);
    c.max_kernels = world.max_kernels;
    c.kernel_idle_timeout = Duration::from_millis(world.kernel_idle_ms);
    c.fallback = world.fallback;
    c
}

/// Exec over `turmoil::net` to the sandbox's exec server.
pub struct SimTransport {
    trace: Trace,
}

impl SimTransport {
    /// One-shot execs that write into `trace`.
    pub fn new(trace: Trace) -> SimTransport {
        SimTransport { trace }
    }
}

impl Transport for SimTransport {
    fn exec(&self, req: ExecRequest) -> ExecFuture<'_> {
        let trace = self.trace.clone();
        Box::pin(async move {
            let what = describe_request(&req);
            trace.log("client", format!("exec {what}"));
            let wire = WireRequest {
                argv: req.argv,
                stdin: Bytes(req.stdin),
                op: req.op.map(|op| op.kind),
            };
            match call(&format!("sandbox:{EXEC_PORT}"), &wire).await {
                Ok(resp) => {
                    trace.log("client", format!("exec {what} -> exit {}", resp.exit_code));
                    Ok(ExecOutput {
                        stdout: resp.stdout.0,
                        stderr: resp.stderr.0,
                        exit_code: resp.exit_code,
                    })
                }
                Err(e) => {
                    let kind = match e.kind() {
                        std::io::ErrorKind::ConnectionRefused => TransportErrorKind::Unreachable,
                        _ => TransportErrorKind::Io,
                    };
                    trace.log("client", format!("exec {what} -> transport error: {e}"));
                    Err(TransportError {
                        kind,
                        detail: e.to_string(),
                    })
                }
            }
        })
    }

    fn describe(&self) -> String {
        "sim (turmoil)".into()
    }
}

/// `x7 submit` for an agent op, `install` for the install script.
fn describe_request(req: &ExecRequest) -> String {
    match req.op {
        Some(op) => format!("x{} {}", op.id, op.kind),
        None => "x0 ?".into(),
    }
}

/// The client's record store: a [`MemoryStore`] (it outlives a client
/// crash) whose writes go into the trace.
pub struct LoggingStore {
    inner: MemoryStore,
    trace: Trace,
    /// How its lines begin: `""` for the first frontend's, `"second "`.
    whose: &'static str,
}

impl tether::RecordStore for LoggingStore {
    fn load(
        &self,
        kernel: &KernelName,
    ) -> Result<Option<KernelRecord>, tether::records::RecordError> {
        self.inner.load(kernel)
    }

    fn save(&mut self, record: &KernelRecord) -> Result<(), tether::records::RecordError> {
        let cells: Vec<String> = record
            .cells
            .iter()
            .map(|c| {
                format!(
                    "#{}{}{}@{}",
                    c.seq,
                    if c.submitted { " sent" } else { "" },
                    if c.cancel_requested { " cancel" } else { "" },
                    c.cursor
                )
            })
            .collect();
        self.trace.log(
            "client",
            format!(
                "{}persist {} daemon={} next_seq={} cells=[{}]",
                self.whose,
                record.kernel,
                record.identity.as_ref().map_or(0, |i| i.pid),
                record.next_seq,
                cells.join(", ")
            ),
        );
        self.inner.save(record)
    }

    fn forget(&mut self, kernel: &KernelName) -> Result<(), tether::records::RecordError> {
        self.trace
            .log("client", format!("{}forget {kernel}", self.whose));
        self.inner.forget(kernel)
    }

    fn list(&self) -> Result<Vec<KernelName>, tether::records::RecordError> {
        self.inner.list()
    }
}

fn describe(event: &Event) -> String {
    match event {
        Event::Output {
            cell,
            n,
            stream,
            data,
        } => format!(
            "event output {cell} n={n} {stream:?} \"{}\"",
            excerpt(&data.0, 60)
        ),
        Event::CellResolved { cell, outcome } => format!("event resolved {cell} {outcome}"),
        Event::CellAccepted { cell, acceptance } => {
            format!("event accepted {cell} {acceptance:?}")
        }
        Event::KernelReady {
            kernel,
            identity,
            fresh,
        } => format!(
            "event kernel ready {kernel} pid={} fresh={fresh}",
            identity.pid
        ),
        Event::StateLost { kernel, evidence } => format!("event STATE LOST {kernel}: {evidence}"),
        Event::KernelReplaced { kernel, evidence } => {
            format!("event kernel replaced {kernel}: {evidence}")
        }
        Event::Leftovers { cell, pids } => format!("event leftovers {cell} {pids:?}"),
        Event::Unkillable { cell, pids } => format!("event unkillable {cell} {pids:?}"),
        Event::Clipped { cell, dropped } => format!("event clipped {cell} {dropped}"),
        Event::KernelEvicted { kernel, reason } => format!("event evicted {kernel}: {reason}"),
        Event::RanWithoutKernel { cell, reason } => {
            format!("event RAN WITHOUT KERNEL {cell}: {reason}")
        }
        Event::Note { text, .. } => format!("event note: {text}"),
        Event::ToolCall { cell, id, name, .. } => format!("event tool call {cell} {id} {name}"),
        Event::ToolReplied { cell, id, .. } => format!("event tool replied {cell} {id}"),
        Event::ToolAnswered { cell, id } => format!("event tool answered {cell} {id}"),
    }
}

/// Everything the client host needs.
#[derive(Clone)]
pub struct ClientCtx {
    /// The scenario.
    pub scenario: Rc<Scenario>,
    /// The run's seed.
    pub seed: u64,
    /// The seed's world.
    pub world: World,
    /// The trace.
    pub trace: Trace,
    /// The switchboard.
    pub control: Control,
    /// What the client saw.
    pub log: Rc<RefCell<ClientLog>>,
    /// The persisted records (they survive a client crash).
    pub store: MemoryStore,
    /// The second frontend's records ([`Frontend::Second`]).
    pub second_store: MemoryStore,
    /// The current client process's channel, on a seed that runs on it
    /// (weak: a crashed client's channel goes with it).
    pub channel: Rc<RefCell<Option<Weak<ChannelTransport>>>>,
}

impl Host for ClientCtx {
    fn now_ms(&self) -> u64 {
        now_ms()
    }

    fn control(&self) -> &Control {
        &self.control
    }

    fn log(&self) -> RefMut<'_, ClientLog> {
        self.log.borrow_mut()
    }

    fn scenario(&self) -> &Scenario {
        &self.scenario
    }

    fn new_client(&self, incarnation: u64, frontend: Frontend) -> Driver {
        let (store, seed, whose) = match frontend {
            Frontend::First => (&self.store, self.seed.wrapping_add(incarnation), ""),
            Frontend::Second => (
                &self.second_store,
                !self.seed.wrapping_add(incarnation),
                "second ",
            ),
        };
        let client = Client::new(config_in(&self.world), seed);
        let one_shot = SimTransport::new(self.trace.clone());
        // The second frontend execs each op: the channel's faults and
        // its checks at the end are the first's.
        let transport: Arc<dyn Transport> = if self.world.channel && frontend == Frontend::First {
            let channel =
                crate::channel::transport(one_shot, self.trace.clone(), self.control.clone());
            *self.channel.borrow_mut() = Some(Arc::downgrade(&channel));
            channel
        } else {
            Arc::new(one_shot)
        };
        Driver::new(
            client,
            transport,
            Box::new(LoggingStore {
                inner: store.clone(),
                trace: self.trace.clone(),
                whose,
            }),
            Arc::from(AGENT_BINARY),
            location(),
        )
    }

    fn records(&self, frontend: Frontend) -> Vec<KernelRecord> {
        script::records_of(match frontend {
            Frontend::First => &self.store,
            Frontend::Second => &self.second_store,
        })
    }

    fn code(&self, cell: &CellSpec) -> Bytes {
        let code = cell.full_workload().encode();
        if !self.world.crlf {
            return Bytes(code);
        }
        // One JSON token a line, each line ended by CRLF: whitespace to
        // the decoder, a CRLF text to the agent.
        let pretty = serde_json::from_slice::<serde_json::Value>(&code)
            .and_then(|v| serde_json::to_vec_pretty(&v))
            .unwrap_or(code);
        let mut crlf = Vec::with_capacity(pretty.len() * 11 / 10);
        for b in pretty {
            if b == b'\n' {
                crlf.push(b'\r');
            }
            crlf.push(b);
        }
        Bytes(crlf)
    }

    fn note(&self, what: &str) {
        self.trace.log("client", what.to_owned());
    }

    fn on_event(&self, event: &Event) {
        self.trace.log("client", describe(event));
        self.log.borrow_mut().on_event(now_ms(), event);
    }

    async fn snapshot(&self) {
        // The world reads the simulated OS when it sees the flag.
        self.control.lock().snapshot_now = true;
        tokio::time::sleep(POLL).await;
    }

    async fn after_shutdown(&self) {
        // The client is done: its channel goes, as when `tether` exits
        // (the sandbox's end of it must then leave nothing behind).
        let channel = self.channel.borrow_mut().take();
        if let Some(channel) = channel.and_then(|c| c.upgrade()) {
            self.trace
                .log("client", format!("channel closed: {:?}", channel.status()));
            channel.close();
        }
        // Let exec calls still in flight on the sandbox drain.
        tokio::time::sleep(Duration::from_millis(3_000)).await;
    }
}

/// The client host's program: the script, restarting after crashes.
pub async fn client_main(ctx: ClientCtx) -> turmoil::Result {
    script::client_main(&ctx).await;
    Ok(())
}
