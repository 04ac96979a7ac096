//! Events for the outside world: one JSON object per event (`--json`), or
//! a one-line message for a person (output bytes are not handled here:
//! they go to stdout/stderr raw).

use serde_json::{json, Value};
use tether_core::client::{CellKey, Event};

fn cell(key: &CellKey) -> Value {
    json!({ "kernel": key.kernel, "seq": key.seq })
}

/// The event as one JSON object with an `event` field naming its kind.
pub fn to_json(event: &Event) -> Value {
    match event {
        Event::KernelReady {
            kernel,
            identity,
            fresh,
        } => json!({
            "event": "kernel_ready", "kernel": kernel, "identity": identity, "fresh": fresh,
        }),
        Event::StateLost { kernel, evidence } => json!({
            "event": "state_lost", "kernel": kernel, "evidence": evidence.to_string(),
        }),
        Event::KernelReplaced { kernel, evidence } => json!({
            "event": "kernel_replaced", "kernel": kernel, "evidence": evidence.to_string(),
        }),
        Event::CellAccepted {
            cell: key,
            acceptance,
        } => json!({
            "event": "cell_accepted", "cell": cell(key), "acceptance": acceptance,
        }),
        Event::Output {
            cell: key,
            n,
            stream,
            data,
        } => json!({
            "event": "output", "cell": cell(key), "n": n, "stream": stream, "data": data,
        }),
        Event::ToolCall {
            cell: key,
            id,
            name,
            args,
        } => json!({
            "event": "tool_call", "cell": cell(key), "id": id, "name": name, "args": args,
        }),
        Event::ToolReplied {
            cell: key,
            id,
            reply,
        } => json!({
            "event": "tool_replied", "cell": cell(key), "id": id, "reply": reply,
        }),
        Event::ToolAnswered { cell: key, id } => json!({
            "event": "tool_answered", "cell": cell(key), "id": id,
        }),
        Event::Clipped { cell: key, dropped } => json!({
            "event": "clipped", "cell": cell(key), "dropped": dropped,
        }),
        Event::Leftovers { cell: key, pids } => json!({
            "event": "leftovers", "cell": cell(key), "pids": pids,
        }),
        Event::Unkillable { cell: key, pids } => json!({
            "event": "unkillable", "cell": cell(key), "pids": pids,
        }),
        Event::CellResolved { cell: key, outcome } => json!({
            "event": "cell_resolved", "cell": cell(key), "outcome": outcome,
        }),
        Event::KernelEvicted { kernel, reason } => json!({
            "event": "kernel_evicted", "kernel": kernel, "reason": reason.to_string(),
        }),
        Event::RanWithoutKernel { cell: key, reason } => json!({
            "event": "ran_without_kernel", "cell": cell(key), "reason": reason,
        }),
        Event::Note { kernel, text } => json!({
            "event": "note", "kernel": kernel, "text": text,
        }),
    }
}

/// A message for a person, for events worth telling (not output, not
/// routine progress).
pub fn describe(event: &Event) -> Option<String> {
    match event {
        Event::StateLost { kernel, evidence } => Some(format!(
            "kernel {kernel}: state lost ({evidence}); the cell runs in a fresh kernel"
        )),
        Event::KernelReplaced { kernel, evidence } => Some(format!(
            "kernel {kernel}: state lost, the daemon was replaced ({evidence}); \
             the cell runs in a fresh kernel"
        )),
        Event::Clipped { dropped, .. } => Some(format!(
            "output over the per-cell cap: {dropped} bytes dropped"
        )),
        Event::Leftovers { pids, .. } => {
            let pids: Vec<String> = pids.iter().map(u32::to_string).collect();
            Some(format!(
                "the cell left processes running (pids {}); they die with \
                 `tether reset`, `tether stop` or when the kernel idles out",
                pids.join(" ")
            ))
        }
        Event::Unkillable { pids, .. } => {
            let pids: Vec<String> = pids.iter().map(u32::to_string).collect();
            Some(format!(
                "the cancel could not kill processes of the cell (pids {}): \
                 they outlived SIGKILL (stuck in the kernel?)",
                pids.join(" ")
            ))
        }
        Event::KernelEvicted { kernel, reason } => {
            Some(format!("kernel {kernel} was stopped: {reason}"))
        }
        Event::RanWithoutKernel { cell, reason } => Some(format!(
            "kernel {}: no kernel can start here ({reason}); cell {} runs once \
             without one: no state kept, no journal, no resume (--no-fallback refuses instead)",
            cell.kernel, cell.seq
        )),
        Event::Note { kernel, text } => Some(match kernel {
            Some(k) => format!("kernel {k}: {text}"),
            None => text.clone(),
        }),
        Event::KernelReady { .. }
        | Event::ToolCall { .. }
        | Event::ToolReplied { .. }
        | Event::ToolAnswered { .. }
        | Event::CellAccepted { .. }
        | Event::Output { .. }
        | Event::CellResolved { .. } => None,
    }
}
