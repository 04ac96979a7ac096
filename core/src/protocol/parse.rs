//! Exec output to a typed reply. Total: any bytes at all give either the
//! reply or a [`ReplyError`] that says what was wrong; never a panic.

use super::ops::OpKind;
use super::reply::{AgentError, Reply, ReplyEnvelope};
use super::seal;
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
    /// The reply line was cut short or changed on the way: its checksum
    /// ([`super::seal`]) is missing or does not match. Retry the op.
    Corrupt {
        /// What was wrong.
        detail: String,
    },
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
            ReplyError::Corrupt { detail } => {
                write!(f, "the agent's reply was damaged on the way: {detail}")
            }
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
/// trailing partial line are ignored. The line must be sealed
/// ([`super::seal`]) unless it answers the install op (the install script
/// is plain `sh`); an unsealed line of another protocol version is a
/// [`ReplyError::Version`], not a damaged one.
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
    let opened;
    let line = if op == OpKind::Install {
        line
    } else {
        match seal::open(line) {
            Ok(object) => {
                opened = object;
                &opened[..]
            }
            Err(why) => {
                let version = serde_json::from_slice::<serde_json::Value>(line)
                    .ok()
                    .and_then(|v| v.get("v").and_then(serde_json::Value::as_u64));
                if let Some(got) = version.filter(|&v| v != u64::from(PROTOCOL_VERSION)) {
                    return Err(ReplyError::Version {
                        got: u32::try_from(got).unwrap_or(u32::MAX),
                    });
                }
                return Err(ReplyError::Corrupt {
                    detail: match why {
                        seal::SealError::Missing => "no checksum at its end (cut short?)".into(),
                        seal::SealError::Mismatch => "its checksum does not match".into(),
                    },
                });
            }
        }
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

    /// `object` sealed as the agent prints it.
    fn sealed(object: &[u8]) -> Vec<u8> {
        seal::seal(object)
    }

    #[test]
    fn good_reply_parses() {
        let mut stdout = b"noise\n".to_vec();
        stdout.extend(sealed(b"{\"v\":1,\"id\":3,\"reply\":\"acked\"}"));
        assert_eq!(
            parse_reply(3, OpKind::Ack, &out(&stdout, 0)),
            Ok(Reply::Acked)
        );
    }

    type Case = (Vec<u8>, i32, fn(&ReplyError) -> bool);

    #[test]
    fn each_kind_of_bad_output_has_its_error() {
        let cases: Vec<Case> = vec![
            (b"".to_vec(), 127, |e| {
                matches!(e, ReplyError::AgentMissing { .. })
            }),
            (b"".to_vec(), 1, |e| matches!(e, ReplyError::NoReply { .. })),
            (b"{\"v\":1,\"id\":3,\"rep".to_vec(), 0, |e| {
                matches!(e, ReplyError::NoReply { .. })
            }),
            (sealed(b"{\"v\":1,\"id\":3,\"reply\":\"\xff\"}"), 0, |e| {
                matches!(e, ReplyError::NotUtf8)
            }),
            (sealed(b"{oops}"), 0, |e| {
                matches!(e, ReplyError::Malformed { .. })
            }),
            (b"{\"v\":9,\"id\":3}\n".to_vec(), 0, |e| {
                matches!(e, ReplyError::Version { got: 9 })
            }),
            (
                b"{\"v\":1,\"id\":3,\"reply\":\"acked\"}\n".to_vec(),
                0,
                |e| matches!(e, ReplyError::Corrupt { .. }),
            ),
            (sealed(b"{\"v\":1,\"id\":2,\"reply\":\"acked\"}"), 0, |e| {
                matches!(
                    e,
                    ReplyError::WrongId {
                        expected: 3,
                        got: 2
                    }
                )
            }),
            (
                sealed(b"{\"v\":1,\"id\":3,\"reply\":{\"shut_down\":{\"killed\":0}}}"),
                0,
                |e| matches!(e, ReplyError::WrongKind { .. }),
            ),
            (
                sealed(b"{\"v\":1,\"id\":3,\"error\":{\"kind\":\"conflict\",\"detail\":\"x\"}}"),
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
            let err = parse_reply(3, OpKind::Ack, &out(&stdout, rc)).unwrap_err();
            assert!(
                check(&err),
                "{:?} gave {err:?}",
                String::from_utf8_lossy(&stdout)
            );
            assert!(!err.to_string().is_empty());
        }
    }

    #[test]
    fn the_install_script_reply_needs_no_seal() {
        let stdout = b"{\"v\":1,\"id\":3,\"reply\":{\"installed\":{\"path\":\"/x\"}}}\n";
        assert!(parse_reply(3, OpKind::Install, &out(stdout, 0)).is_ok());
    }

    const WAITED: &[u8] = b"{\"v\":1,\"id\":1,\"reply\":{\"waited\":{\"batch\":{\"entries\":[{\"n\":1,\"kind\":\"output\",\"stream\":\"stdout\",\"data\":{\"text\":\"hi\"}},{\"n\":2,\"kind\":\"done\"}],\"done\":true}}}}";

    proptest! {
        #[test]
        fn any_bytes_give_a_value_not_a_panic(stdout in proptest::collection::vec(any::<u8>(), 0..300), rc in any::<i32>()) {
            let _ = parse_reply(1, OpKind::Wait, &out(&stdout, rc));
        }

        #[test]
        fn any_prefix_of_a_good_reply_is_handled(cut in 0usize..300) {
            let good = sealed(WAITED);
            let cut = cut.min(good.len());
            let r = parse_reply(1, OpKind::Wait, &out(&good[..cut], 0));
            prop_assert_eq!(r.is_ok(), cut == good.len());
        }

        /// A reply with one byte changed on the way is never a result.
        #[test]
        fn a_changed_byte_is_never_a_result(pos in 0usize..300, flip in 1u8..=255) {
            let mut bad = sealed(WAITED);
            let pos = pos % bad.len();
            bad[pos] ^= flip;
            let r = parse_reply(1, OpKind::Wait, &out(&bad, 0));
            prop_assert!(r.is_err(), "{:?}", String::from_utf8_lossy(&bad));
        }
    }
}
