//! The install step's refusals, typed. The install script
//! ([`super::render`]) prints them, and any other installer (the
//! simulation's) answers with the same values, so every installer says
//! exactly the same thing for the same reason: the kind, the detail and
//! the reply line come from here.

use super::reply::{AgentError, ErrorKind, Reply, ReplyEnvelope};
use super::PROTOCOL_VERSION;

/// The detail of [`InstallRefusal::NoDirs`].
pub(crate) const NO_DIRS: &str = "cannot create directories under the root";
/// The detail of [`InstallRefusal::NoWrite`].
pub(crate) const NO_WRITE: &str = "cannot write the agent under the root";
/// The detail of [`InstallRefusal::Noexec`].
pub(crate) const NOEXEC: &str = "the agent cannot be executed under the root (noexec mount?)";

/// Why the agent was not put in place, in the order the install script
/// finds out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InstallRefusal {
    /// `uname -m` is not x86_64.
    WrongArch {
        /// What the sandbox said it is.
        arch: String,
    },
    /// `mkdir -p ROOT/bin ROOT/kernels` failed (a read-only root).
    NoDirs,
    /// Writing the agent under the root failed.
    NoWrite,
    /// Fewer (or more) bytes arrived than were sent.
    Truncated {
        /// Bytes received.
        got: u64,
        /// Bytes sent.
        want: u64,
    },
    /// The agent is in place but running it gives 126 (a `noexec` mount).
    Noexec,
}

impl InstallRefusal {
    /// The error kind the client acts on.
    pub fn kind(&self) -> ErrorKind {
        match self {
            InstallRefusal::WrongArch { .. } => ErrorKind::WrongArch,
            InstallRefusal::NoDirs | InstallRefusal::NoWrite | InstallRefusal::Noexec => {
                ErrorKind::CannotInstall
            }
            InstallRefusal::Truncated { .. } => ErrorKind::BadInstall,
        }
    }

    /// What a person reads.
    pub fn detail(&self) -> String {
        match self {
            InstallRefusal::WrongArch { arch } => {
                format!("sandbox is {arch}; the agent is built for x86_64")
            }
            InstallRefusal::NoDirs => NO_DIRS.into(),
            InstallRefusal::NoWrite => NO_WRITE.into(),
            InstallRefusal::Truncated { got, want } => format!("received {got} of {want} bytes"),
            InstallRefusal::Noexec => NOEXEC.into(),
        }
    }

    /// As the agent error the client parses.
    pub fn error(&self) -> AgentError {
        AgentError {
            kind: self.kind(),
            detail: self.detail(),
            next_seq: None,
        }
    }

    /// The line the install script prints for this refusal to op `id`.
    pub fn reply_line(&self, id: u64) -> Vec<u8> {
        line(id, None, Some(self.error()))
    }
}

/// The line the install script prints when the agent is in place at
/// `path`.
pub fn installed_line(id: u64, path: &str) -> Vec<u8> {
    let reply = Reply::Installed { path: path.into() };
    line(id, Some(reply), None)
}

fn line(id: u64, reply: Option<Reply>, error: Option<AgentError>) -> Vec<u8> {
    let envelope = ReplyEnvelope {
        v: PROTOCOL_VERSION,
        id,
        reply,
        error,
    };
    // Serialising plain data to a Vec cannot fail.
    let mut bytes = serde_json::to_vec(&envelope).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{parse_reply, ExecOutput, OpKind, ReplyError};

    #[test]
    fn each_refusal_parses_as_its_kind_and_detail() {
        for r in [
            InstallRefusal::WrongArch {
                arch: "aarch64".into(),
            },
            InstallRefusal::NoDirs,
            InstallRefusal::NoWrite,
            InstallRefusal::Truncated { got: 3, want: 9 },
            InstallRefusal::Noexec,
        ] {
            let out = ExecOutput {
                stdout: r.reply_line(7),
                stderr: Vec::new(),
                exit_code: 0,
            };
            assert_eq!(
                parse_reply(7, OpKind::Install, &out),
                Err(ReplyError::Agent(r.error())),
                "{r:?}"
            );
        }
        let out = ExecOutput {
            stdout: installed_line(8, "/r/bin/a"),
            stderr: Vec::new(),
            exit_code: 0,
        };
        assert_eq!(
            parse_reply(8, OpKind::Install, &out),
            Ok(Reply::Installed {
                path: "/r/bin/a".into()
            })
        );
    }
}
