//! What a fault schedule does to the client's exec calls: the spans in
//! which every exec failed and the single failed execs, with the
//! client's retry budget — the oracle's measure of an honest `unknown`
//! ([`Outages`]).

use crate::faults::{FaultKind, FaultSchedule, DISK_FULL_AT_RESULT_WITHIN_MS};
use crate::oracle::Outages;
use std::time::Duration;
use tether_core::client::Config;

/// What in `schedule` kept the sandbox from answering a client run with
/// `config`, for the oracle's judgement of `unknown` outcomes.
pub fn outages(schedule: &FaultSchedule, config: &Config) -> Outages {
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let budget = ms(config.exec_budget());
    let backoffs = (1..config.max_attempts)
        .map(|n| {
            ms(tether_core::client::backoff(
                config.backoff_base,
                config.backoff_max,
                n,
            ))
        })
        .collect();
    let mut out = Outages {
        spans: Vec::new(),
        blips: Vec::new(),
        backoffs_ms: backoffs,
        attempts: config.max_attempts,
        budget_ms: budget,
        silences: Vec::new(),
        give_up_ms: ms(config.unreachable_after),
        client_down: Vec::new(),
    };
    for f in &schedule.0 {
        let at = f.at_ms;
        match f.kind {
            FaultKind::PartitionExec { for_ms }
            | FaultKind::HoldExec { for_ms }
            | FaultKind::FreezeSandbox { for_ms } => {
                out.silences.push((at, at.saturating_add(for_ms)));
            }
            FaultKind::CrashClient { down_ms } => {
                out.client_down.push((at, at.saturating_add(down_ms)));
            }
            _ => {}
        }
        match f.kind {
            // A call sent during a partition fails at once; one in flight
            // when it begins fails at its deadline (one failure, not an
            // outage: that is a blip).
            FaultKind::PartitionExec { for_ms } => {
                out.spans.push((at, at.saturating_add(for_ms)));
                out.blips.push(at);
            }
            // A call held back fails at its deadline; calls up to a second
            // old (the longest injected latency) may still be on the way.
            FaultKind::HoldExec { for_ms } => out.spans.push((
                at.saturating_sub(1_000),
                at.saturating_add(for_ms).saturating_add(budget),
            )),
            FaultKind::DropConnection
            | FaultKind::ReplyLost { .. }
            | FaultKind::SlowStart { .. }
            | FaultKind::BounceSandbox
            | FaultKind::ReplaceSandbox
            | FaultKind::ReplacedAfterOp { .. } => out.blips.push(at),
            // Slower calls, not failed ones (latency stays far below an
            // exec's budget); the rest never cost the client an exec.
            FaultKind::ExecLatency { .. }
            | FaultKind::KillDaemon
            | FaultKind::CrashClient { .. }
            | FaultKind::Cancel { .. }
            | FaultKind::ClockJump { .. } => {}
            // A killed op, a damaged reply: one failed exec (a killed
            // writer: an op's, or a daemon's which costs none).
            FaultKind::KillOp { .. }
            | FaultKind::DamageReply { .. }
            | FaultKind::KillAfterWrite { .. } => out.blips.push(at),
            // Exec calls wait out a freeze; those up to a second old may
            // still be on the way, and the last fail at their deadline.
            FaultKind::FreezeSandbox { for_ms } => out.spans.push((
                at.saturating_sub(1_000),
                at.saturating_add(for_ms).saturating_add(budget),
            )),
            // The agent's processes die; the exec server answers on.
            FaultKind::KillShim
            | FaultKind::KillInterpreter
            | FaultKind::TermDaemon
            | FaultKind::WipeKernelDirs => {}
            // The agent answers, with I/O errors: it can neither take a
            // cell nor record what one did, so the client cannot learn
            // more than a sandbox that does not answer would tell it.
            FaultKind::DiskFullAtWrite { for_ms, .. }
            | FaultKind::PauseAfterWrite { for_ms, .. } => out.spans.push((
                at,
                at.saturating_add(DISK_FULL_AT_RESULT_WITHIN_MS)
                    .saturating_add(for_ms)
                    .saturating_add(budget),
            )),
            FaultKind::DiskFull { for_ms, at_result } => {
                let fills_by = if at_result {
                    DISK_FULL_AT_RESULT_WITHIN_MS
                } else {
                    0
                };
                out.spans.push((
                    at,
                    at.saturating_add(fills_by)
                        .saturating_add(for_ms)
                        .saturating_add(budget),
                ))
            }
            // One op on the channel fails (at the cut, at its deadline,
            // when the stream ends under it).
            FaultKind::ChannelCut { .. }
            | FaultKind::ChannelLateReply { .. }
            | FaultKind::ChannelReorder { .. } => out.blips.push(at),
            // Ops on the channel get no answer until it ends (or until
            // the client breaks a silent channel): those sent up to a
            // second before may still be on the way, the last fail at
            // their deadline.
            FaultKind::ChannelHalfOpen { for_ms } | FaultKind::ChannelStall { for_ms } => {
                out.spans.push((
                    at.saturating_sub(1_000),
                    at.saturating_add(for_ms).saturating_add(budget),
                ))
            }
        }
    }
    out
}
