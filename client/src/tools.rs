//! The CLI's tool handler (`--tools CMD`): each tool call of a cell runs
//! `sh -c CMD` on the host with the call as one JSON object on stdin
//! (`{"cell": {"kernel", "seq"}, "id", "name", "args"}`) and `TETHER_TOOL`
//! set to the tool's name. Exit 0: stdout is the result (JSON if it parses
//! as JSON, else the text, one trailing newline removed). Any other exit:
//! an error whose message is the handler's stderr (or its status).

use crate::driver::{ToolCall, ToolHandler};
use serde_json::json;
use std::process::Stdio;
use std::sync::Arc;
use tether_core::protocol::CallReply;
use tokio::io::AsyncWriteExt;

/// A handler that runs `command` through `sh -c` for each call.
pub fn command_handler(command: String) -> ToolHandler {
    let command: Arc<str> = command.into();
    Arc::new(move |call: ToolCall| {
        let command = Arc::clone(&command);
        Box::pin(async move { run(&command, call).await })
    })
}

async fn run(command: &str, call: ToolCall) -> CallReply {
    let input = json!({
        "cell": { "kernel": call.cell.kernel, "seq": call.cell.seq },
        "id": call.id,
        "name": call.name,
        "args": call.args,
    });
    let fail = |message: String| CallReply::Error { message };
    let child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .env("TETHER_TOOL", &call.name)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            return fail(format!(
                "cannot start the tool handler `sh -c {command}`: {e}"
            ))
        }
    };
    if let Some(mut stdin) = child.stdin.take() {
        let mut bytes = input.to_string().into_bytes();
        bytes.push(b'\n');
        // A handler that does not read its stdin is fine.
        let _ = stdin.write_all(&bytes).await;
    }
    let out = match child.wait_with_output().await {
        Ok(out) => out,
        Err(e) => return fail(format!("the tool handler failed: {e}")),
    };
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr).trim_end().to_owned();
        let status = match out.status.code() {
            Some(code) => format!("exit {code}"),
            None => "killed by a signal".to_owned(),
        };
        return fail(if stderr.is_empty() {
            format!("the tool handler failed ({status})")
        } else {
            stderr
        });
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let text = text.strip_suffix('\n').unwrap_or(&text);
    let value = serde_json::from_str(text.trim())
        .unwrap_or_else(|_| serde_json::Value::String(text.to_owned()));
    CallReply::Ok { value }
}
