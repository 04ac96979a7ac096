//! [`Config`]: every knob of the client state machine, with defaults that
//! suit a sandbox reached over a network.

use crate::protocol::AgentLocation;
use std::time::Duration;

/// How the client talks to the agent, retries and reaps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Where the agent lives on the sandbox.
    pub location: AgentLocation,
    /// Size of the agent binary in bytes (sent in [`crate::protocol::Op::Install`]).
    pub agent_size: u64,
    /// Long-poll bound sent in submit and wait, in milliseconds.
    pub wait_ms: u64,
    /// Every exec's deadline is `now + wait_ms + exec_slack`.
    pub exec_slack: Duration,
    /// How many times one op is sent before the client gives up on it.
    pub max_attempts: u32,
    /// First retry delay; doubled per attempt.
    pub backoff_base: Duration,
    /// Cap on the retry delay.
    pub backoff_max: Duration,
    /// A kernel with work in flight and no successful exec for this long is
    /// given up on: its cells resolve as `unknown`, its record is kept.
    pub unreachable_after: Duration,
    /// A kernel with no cell in flight for this long is shut down.
    pub kernel_idle_timeout: Duration,
    /// At most this many kernels are kept open (least recently used go first,
    /// never one with a cell in flight).
    pub max_kernels: usize,
    /// The daemon on the sandbox exits by itself after this much idleness.
    pub daemon_idle_timeout: Duration,
    /// Grace between TERM and KILL when the agent cancels a cell.
    pub grace: Duration,
    /// A resolved cell's acknowledgement rides on the kernel's next submit;
    /// when no submit comes for this long, it is sent as an ack of its own.
    pub ack_delay: Duration,
    /// Fail open: when no kernel can start on the sandbox (the agent cannot
    /// be installed or run there, no `python3` for a Python kernel), a
    /// cell that was never submitted runs once as a plain exec instead of
    /// failing. No state is kept, no journal, no resume.
    pub fallback: bool,
    /// How long such a plain exec may run when its cell has no timeout.
    pub fallback_limit: Duration,
}

impl Config {
    /// The defaults: 10 s long-poll, 10 s slack, 6 attempts, backoff
    /// 200 ms → 5 s, unreachable after 60 s, kernels reaped after 30 min idle
    /// or beyond 16, daemons exit after 1 h idle, 2 s grace, acks that find
    /// no submit to ride on sent after 2 s; fail open, a plain exec
    /// bounded by an hour.
    pub fn new(location: AgentLocation, agent_size: u64) -> Config {
        Config {
            location,
            agent_size,
            wait_ms: 10_000,
            exec_slack: Duration::from_secs(10),
            max_attempts: 6,
            backoff_base: Duration::from_millis(200),
            backoff_max: Duration::from_secs(5),
            unreachable_after: Duration::from_secs(60),
            kernel_idle_timeout: Duration::from_secs(30 * 60),
            max_kernels: 16,
            daemon_idle_timeout: Duration::from_secs(60 * 60),
            grace: Duration::from_secs(2),
            ack_delay: Duration::from_secs(2),
            fallback: true,
            fallback_limit: Duration::from_secs(60 * 60),
        }
    }

    /// How long one exec may take before the client treats it as failed.
    pub fn exec_budget(&self) -> Duration {
        Duration::from_millis(self.wait_ms) + self.exec_slack
    }
}
