//! Exec output to a typed reply. Total: any bytes at all give either the
//! reply or a [`ReplyError`] that says what was wrong; never a panic.

use super::ops::OpKind;
use super::reply::{AgentError, Reply, ReplyEnvelope};
use super::PROTOCOL_VERSION;
use std::fmt;

/// What an exec call returned.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ExecOutput {
    /// Standard output.
    pub stdout: Vec<u8>,
    /// Standard error.
    pub stderr: Vec<u8>,
    /// Exit status (127 when the command was not found).
    pub exit_code: i32,
}

impl fmt::Debug for ExecOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExecOutput")
            .field("stdout", &String::from_utf8_lossy(&self.stdout))
            .field("stderr", &String::from_utf8_lossy(&self.stderr))
            .field("exit_code", &self.exit_code)
            .finish()
    }
}

/// Why exec output is not a usable reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplyError {
    /// The agent binary is not there (exit 126/127): install it.
    AgentMissing {
        /// The first bytes of stderr.
        stderr: String,
    },
    /// No complete reply line: the agent died or the output was cut short.
    NoReply {
        /// Exit status.
        exit_code: i32,
        /// The first bytes of stderr.
        stderr: String,
    },
    /// The reply line is not valid UTF-8.
    NotUtf8,
    /// The reply line is not the JSON we expect.
    Malformed {
        /// The parser's complaint.
        detail: String,
    },
    /// The agent speaks another protocol version: reinstall it.
    Version {
        /// The version it speaks.
        got: u32,
    },
    /// The reply answers another request (a stale or crossed reply).
    WrongId {
        /// The id we sent.
        expected: u64,
        /// The id it carries.
        got: u64,
    },
    /// The reply is of the wrong kind for the op.
    WrongKind {
        /// The op sent.
        op: OpKind,
    },
    /// The agent reported a failure.
    Agent(AgentError),
}

impl fmt::Display for ReplyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplyError::AgentMissing { stderr } => {
                write!(f, "the agent is not installed on the sandbox ({stderr})")
            }
            ReplyError::NoReply { exit_code, stderr } => {
                write!(f, "the agent gave no reply (exit {exit_code}): {stderr}")
            }
            ReplyError::NotUtf8 => f.write_str("the agent's reply is not UTF-8"),
            ReplyError::Malformed { detail } => write!(f, "the agent's reply is malformed: {detail}"),
            ReplyError::Version { got } => write!(
                f,
                "the agent speaks protocol v{got}, this client v{PROTOCOL_VERSION}: reinstall the agent"
            ),
            ReplyError::WrongId { expected, got } => {
                write!(f, "reply for request {got} arrived for request {expected}")
            }
            ReplyError::WrongKind { op } => write!(f, "the reply does not answer a {op} op"),
            ReplyError::Agent(e) => write!(f, "the agent reports {e}"),
        }
    }
}

impl std::error::Error for ReplyError {}

fn head(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(200)]);
    text.trim().to_owned()
}

/// Parses the output of the exec that carried op `id` of kind `op`.
///
/// The reply is the last complete line of stdout; earlier lines and a
/// trailing partial line are ignored.
pub fn parse_reply(id: u64, op: OpKind, out: &ExecOutput) -> Result<Reply, ReplyError> {
    let complete = match out.stdout.iter().rposition(|&b| b == b'\n') {
        Some(end) => &out.stdout[..end],
        None => &[][..],
    };
    let line = complete
        .rsplit(|&b| b == b'\n')
        .find(|l| !l.iter().all(u8::is_ascii_whitespace));
    let Some(line) = line else {
        if matches!(out.exit_code, 126 | 127) {
            return Err(ReplyError::AgentMissing {
                stderr: head(&out.stderr),
            });
        }
        return Err(ReplyError::NoReply {
            exit_code: out.exit_code,
            stderr: head(&out.stderr),
        });
    };
    let text = std::str::from_utf8(line).map_err(|_| ReplyError::NotUtf8)?;
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| ReplyError::Malformed {
            detail: e.to_string(),
        })?;
    // Check the version before the shape: a newer agent may say more.
    let v = value.get("v").and_then(serde_json::Value::as_u64);
    match v {
        Some(v) if v == u64::from(PROTOCOL_VERSION) => {}
        Some(v) => {
            return Err(ReplyError::Version {
                got: u32::try_from(v).unwrap_or(u32::MAX),
            })
        }
        None => {
            return Err(ReplyError::Malformed {
                detail: "no version field".into(),
            })
        }
    }
    let envelope: ReplyEnvelope =
        serde_json::from_value(value).map_err(|e| ReplyError::Malformed {
            detail: e.to_string(),
        })?;
    if envelope.id != id {
        return Err(ReplyError::WrongId {
            expected: id,
            got: envelope.id,
        });
    }
    match (envelope.reply, envelope.error) {
        (_, Some(error)) => Err(ReplyError::Agent(error)),
        (Some(reply), None) if reply.answers(op) => Ok(reply),
        (Some(_), None) => Err(ReplyError::WrongKind { op }),
        (None, None) => Err(ReplyError::Malformed {
            detail: "neither reply nor error".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::reply::ErrorKind;
    use proptest::prelude::*;

    fn out(stdout: &[u8], exit_code: i32) -> ExecOutput {
        ExecOutput {
            stdout: stdout.to_vec(),
            stderr: b"boom".to_vec(),
            exit_code,
        }
    }

    #[test]
    fn good_reply_parses() {
        let r = parse_reply(
            3,
            OpKind::Ack,
            &out(b"noise\n{\"v\":1,\"id\":3,\"reply\":\"acked\"}\n", 0),
        );
        assert_eq!(r, Ok(Reply::Acked));
    }

    type Case = (&'static [u8], i32, fn(&ReplyError) -> bool);

    #[test]
    fn each_kind_of_bad_output_has_its_error() {
        let cases: Vec<Case> = vec![
            (b"", 127, |e| matches!(e, ReplyError::AgentMissing { .. })),
            (b"", 1, |e| matches!(e, ReplyError::NoReply { .. })),
            (b"{\"v\":1,\"id\":3,\"rep", 0, |e| {
                matches!(e, ReplyError::NoReply { .. })
            }),
            (b"\xff\xfe\n", 0, |e| matches!(e, ReplyError::NotUtf8)),
            (b"{oops\n", 0, |e| matches!(e, ReplyError::Malformed { .. })),
            (b"{\"v\":9,\"id\":3}\n", 0, |e| {
                matches!(e, ReplyError::Version { got: 9 })
            }),
            (b"{\"v\":1,\"id\":2,\"reply\":\"acked\"}\n", 0, |e| {
                matches!(
                    e,
                    ReplyError::WrongId {
                        expected: 3,
                        got: 2
                    }
                )
            }),
            (
                b"{\"v\":1,\"id\":3,\"reply\":{\"shut_down\":{\"killed\":0}}}\n",
                0,
                |e| matches!(e, ReplyError::WrongKind { .. }),
            ),
            (
                b"{\"v\":1,\"id\":3,\"error\":{\"kind\":\"conflict\",\"detail\":\"x\"}}\n",
                0,
                |e| {
                    matches!(
                        e,
                        ReplyError::Agent(AgentError {
                            kind: ErrorKind::Conflict,
                            ..
                        })
                    )
                },
            ),
        ];
        for (stdout, rc, check) in cases {
            let err = parse_reply(3, OpKind::Ack, &out(stdout, rc)).unwrap_err();
            assert!(
                check(&err),
                "{:?} gave {err:?}",
                String::from_utf8_lossy(stdout)
            );
            assert!(!err.to_string().is_empty());
        }
    }

    proptest! {
        #[test]
        fn any_bytes_give_a_value_not_a_panic(stdout in proptest::collection::vec(any::<u8>(), 0..300), rc in any::<i32>()) {
            let _ = parse_reply(1, OpKind::Wait, &out(&stdout, rc));
        }

        #[test]
        fn any_prefix_of_a_good_reply_is_handled(cut in 0usize..200) {
            let good = b"{\"v\":1,\"id\":1,\"reply\":{\"waited\":{\"batch\":{\"entries\":[{\"n\":1,\"kind\":\"done\"}],\"done\":true}}}}\n";
            let cut = cut.min(good.len());
            let r = parse_reply(1, OpKind::Wait, &out(&good[..cut], 0));
            prop_assert_eq!(r.is_ok(), cut == good.len());
        }
    }
}
