//! What goes over the multiplexer's unix socket: one [`Request`] from the
//! `tether` process, the byte [`ACK`] once the multiplexer has read it,
//! one [`Response`], then the connection closes (a `tether` that closes it
//! early abandons the call). Each message is one
//! JSON header line naming the lengths of the raw byte sections that
//! follow it, so stdin and stdout pass exactly, whatever they hold.

use crate::client::{TransportError, TransportErrorKind};
use crate::protocol::{ExecOutput, OpKind};
use serde::{Deserialize, Serialize};
use std::fmt;

/// The multiplexer's first byte on a connection: the request was read.
pub const ACK: u8 = b'+';

/// The longest header line either side accepts.
const MAX_HEADER: usize = 1 << 20;
/// The largest byte section either side accepts.
const MAX_SECTION: usize = 256 << 20;

/// A `tether` process's request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// Run one exec call through the multiplexer's transport.
    Exec {
        /// The command.
        argv: Vec<String>,
        /// Its stdin.
        stdin: Vec<u8>,
        /// The agent op it carries (exec id and kind), if it is one.
        op: Option<(u64, OpKind)>,
    },
    /// Say what the multiplexer is doing (a JSON object).
    Status,
}

/// The multiplexer's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Response {
    /// What the exec call returned.
    Exec(Result<ExecOutput, TransportError>),
    /// The status, a JSON object.
    Status(serde_json::Value),
}

/// A message that cannot be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WireError(pub String);

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "bad message on the background process's socket: {}",
            self.0
        )
    }
}

impl std::error::Error for WireError {}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Header {
    Exec {
        argv: Vec<String>,
        op: Option<(u64, OpKind)>,
        stdin: usize,
    },
    Status,
    Out {
        exit_code: i32,
        stdout: usize,
        stderr: usize,
    },
    Err {
        kind: String,
        detail: String,
    },
    StatusIs(serde_json::Value),
}

fn encode(header: &Header, sections: &[&[u8]]) -> Vec<u8> {
    // A header of plain strings, numbers and JSON values always serializes.
    let mut out = serde_json::to_vec(header).unwrap_or_default();
    out.push(b'\n');
    for section in sections {
        out.extend_from_slice(section);
    }
    out
}

/// A whole message in `buf`: its header and its byte sections, and how
/// many bytes it took; `None` if more bytes are needed.
type Decoded<'a> = Option<(Header, Vec<&'a [u8]>, usize)>;

fn decode(buf: &[u8]) -> Result<Decoded<'_>, WireError> {
    let Some(end) = buf.iter().position(|&b| b == b'\n') else {
        if buf.len() > MAX_HEADER {
            return Err(WireError("header line too long".into()));
        }
        return Ok(None);
    };
    let header: Header = serde_json::from_slice(&buf[..end])
        .map_err(|e| WireError(format!("header is not valid: {e}")))?;
    let lens = match &header {
        Header::Exec { stdin, .. } => vec![*stdin],
        Header::Out { stdout, stderr, .. } => vec![*stdout, *stderr],
        Header::Status | Header::Err { .. } | Header::StatusIs(_) => vec![],
    };
    if lens.iter().any(|&len| len > MAX_SECTION) {
        return Err(WireError("byte section too large".into()));
    }
    let mut at = end + 1;
    let mut sections = Vec::new();
    for len in lens {
        if buf.len() < at + len {
            return Ok(None);
        }
        sections.push(&buf[at..at + len]);
        at += len;
    }
    Ok(Some((header, sections, at)))
}

impl Request {
    /// The bytes on the socket.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Request::Exec { argv, stdin, op } => encode(
                &Header::Exec {
                    argv: argv.clone(),
                    op: *op,
                    stdin: stdin.len(),
                },
                &[stdin],
            ),
            Request::Status => encode(&Header::Status, &[]),
        }
    }

    /// The request at the start of `buf`, if it is all there.
    pub fn decode(buf: &[u8]) -> Result<Option<Request>, WireError> {
        let Some((header, sections, _)) = decode(buf)? else {
            return Ok(None);
        };
        match header {
            Header::Exec { argv, op, .. } => Ok(Some(Request::Exec {
                argv,
                stdin: sections[0].to_vec(),
                op,
            })),
            Header::Status => Ok(Some(Request::Status)),
            _ => Err(WireError("a response where a request belongs".into())),
        }
    }
}

impl Response {
    /// The bytes on the socket.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Response::Exec(Ok(out)) => encode(
                &Header::Out {
                    exit_code: out.exit_code,
                    stdout: out.stdout.len(),
                    stderr: out.stderr.len(),
                },
                &[&out.stdout, &out.stderr],
            ),
            Response::Exec(Err(e)) => encode(
                &Header::Err {
                    kind: kind_name(e.kind).into(),
                    detail: e.detail.clone(),
                },
                &[],
            ),
            Response::Status(value) => encode(&Header::StatusIs(value.clone()), &[]),
        }
    }

    /// The response at the start of `buf`, if it is all there.
    pub fn decode(buf: &[u8]) -> Result<Option<Response>, WireError> {
        let Some((header, sections, _)) = decode(buf)? else {
            return Ok(None);
        };
        match header {
            Header::Out { exit_code, .. } => Ok(Some(Response::Exec(Ok(ExecOutput {
                stdout: sections[0].to_vec(),
                stderr: sections[1].to_vec(),
                exit_code,
            })))),
            Header::Err { kind, detail } => Ok(Some(Response::Exec(Err(TransportError {
                kind: match kind.as_str() {
                    "unreachable" => TransportErrorKind::Unreachable,
                    "timed_out" => TransportErrorKind::TimedOut,
                    _ => TransportErrorKind::Io,
                },
                detail,
            })))),
            Header::StatusIs(value) => Ok(Some(Response::Status(value))),
            _ => Err(WireError("a request where a response belongs".into())),
        }
    }
}

fn kind_name(kind: TransportErrorKind) -> &'static str {
    match kind {
        TransportErrorKind::Unreachable => "unreachable",
        TransportErrorKind::TimedOut => "timed_out",
        TransportErrorKind::Io => "io",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_byte_for_byte_and_wait_for_their_last_byte() {
        let request = Request::Exec {
            argv: vec!["/a/agent".into(), "op".into()],
            stdin: b"\x00\xffline\n{not json".to_vec(),
            op: Some((7, OpKind::Submit)),
        };
        let responses = [
            Response::Exec(Ok(ExecOutput {
                stdout: b"out\n\x00".to_vec(),
                stderr: b"err".to_vec(),
                exit_code: 3,
            })),
            Response::Exec(Err(TransportError {
                kind: TransportErrorKind::TimedOut,
                detail: "late".into(),
            })),
            Response::Status(serde_json::json!({"pid": 1})),
        ];
        let bytes = request.encode();
        for cut in 0..bytes.len() {
            assert_eq!(Request::decode(&bytes[..cut]), Ok(None), "cut at {cut}");
        }
        assert_eq!(Request::decode(&bytes), Ok(Some(request)));
        assert_eq!(
            Request::decode(&Request::Status.encode()),
            Ok(Some(Request::Status))
        );
        for response in responses {
            let bytes = response.encode();
            assert_eq!(Response::decode(&bytes[..bytes.len() - 1]), Ok(None));
            assert_eq!(Response::decode(&bytes), Ok(Some(response)));
        }
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(Request::decode(b"{nope\n").is_err());
        assert!(Response::decode(&Request::Status.encode()).is_err());
        assert!(Request::decode(&vec![b'x'; MAX_HEADER + 1]).is_err());
    }
}
