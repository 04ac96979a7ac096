//! Tool calls: code in a cell asks the host to run one of its tools.
//!
//! The caller (`tether-call NAME JSON` in a shell cell, `tether.call(name,
//! args)` in Python) writes a [`CallRequest`] file into the cell's calls
//! directory; the cell's shim checks it (credential, limits) and journals
//! it as [`super::EntryKind::ToolCall`], or writes a refusal answer and
//! journals nothing. The client sees the entry on the long-poll that
//! carries the cell's output, and its [`CallAnswer`] rides on the cell's
//! next [`super::Op::Wait`]; the agent writes it as the call's answer file
//! (once: the first answer for an id wins) while the cell is running, and
//! the shim journals [`super::EntryKind::ToolAnswered`] when it appears.
//!
//! Files in `{cell}/calls/` (mode 0700): `ID.req` (a request, written to a
//! temporary name and renamed), `ID.ans` (its [`CallReply`], created
//! exclusively).

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Calls one cell may make; the next one is refused.
pub const MAX_CALLS: usize = 256;
/// Bytes of a request's arguments (as JSON) at most.
pub const MAX_ARGS: usize = 1024 * 1024;
/// Bytes of an answer's result (as JSON) at most.
pub const MAX_RESULT: usize = 4 * 1024 * 1024;
/// Bytes of a tool's name at most.
pub const MAX_NAME: usize = 256;
/// How long a caller waits for its answer unless `TETHER_CALL_TIMEOUT`
/// (seconds) says otherwise.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(600);
/// How often a caller looks for its answer.
pub const CALLER_POLL: Duration = Duration::from_millis(10);

/// The environment variable that names the cell's calls directory.
pub const ENV_DIR: &str = "TETHER_CALL";
/// The environment variable that holds the cell's credential.
pub const ENV_TOKEN: &str = "TETHER_CALL_TOKEN";
/// The environment variable that overrides a caller's deadline (seconds).
pub const ENV_TIMEOUT: &str = "TETHER_CALL_TIMEOUT";

/// A call as the caller writes it (`ID.req`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallRequest {
    /// Chosen by the caller ([`valid_id`]); also the file's name.
    pub id: String,
    /// The cell's credential, from the caller's environment.
    pub token: String,
    /// The tool.
    pub name: String,
    /// Its arguments.
    pub args: serde_json::Value,
}

/// What a call came to (`ID.ans`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "status")]
pub enum CallReply {
    /// The tool's result.
    Ok {
        /// The value the tool returned.
        value: serde_json::Value,
    },
    /// The tool failed, or the call was refused.
    Error {
        /// Why, for a person.
        message: String,
    },
}

/// The host's answer to one call, carried by a wait.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallAnswer {
    /// The call.
    pub id: String,
    /// The answer.
    pub reply: CallReply,
}

/// Is `id` usable as a call id (it names files): 1 to 64 of
/// `[A-Za-z0-9_-]`.
pub fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A reply held to [`MAX_RESULT`]: a larger result becomes an error that
/// says so.
pub fn bounded(reply: CallReply) -> CallReply {
    match &reply {
        CallReply::Ok { value } => {
            let size = serde_json::to_vec(value).map_or(usize::MAX, |v| v.len());
            if size > MAX_RESULT {
                return CallReply::Error {
                    message: format!(
                        "the tool's result is {size} bytes, over the limit of {MAX_RESULT}"
                    ),
                };
            }
            reply
        }
        CallReply::Error { message } if message.len() > MAX_RESULT => CallReply::Error {
            message: message.chars().take(MAX_RESULT / 4).collect(),
        },
        CallReply::Error { .. } => reply,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_file_names() {
        assert!(valid_id("a1_B-2"));
        assert!(!valid_id(""));
        assert!(!valid_id("../x"));
        assert!(!valid_id("a.req"));
        assert!(!valid_id(&"a".repeat(65)));
    }

    #[test]
    fn a_result_over_the_limit_is_an_error() {
        let big = CallReply::Ok {
            value: serde_json::Value::String("x".repeat(MAX_RESULT)),
        };
        assert!(
            matches!(bounded(big), CallReply::Error { message } if message.contains("over the limit"))
        );
        let small = CallReply::Ok {
            value: serde_json::json!({"a": 1}),
        };
        assert_eq!(bounded(small.clone()), small);
    }
}
