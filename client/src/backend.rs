//! Backend specs: which sandbox to use and how to reach it, as one string
//! (`--backend`): `local`, `local?latency=50ms`,
//! `local?latency=50ms&delay.submit=3s`.
//!
//! `latency` is added before every exec (a remote round trip);
//! `delay.<op>` is added before execs of one op kind only (a slow start of
//! that call, used by tests to let a later call overtake it). Remote
//! sandboxes: `docker:NAME[?image=IMG]` / `docker?image=IMG`
//! ([`crate::docker`]), `ssh:[USER@]HOST[:PORT][?key=…&known_hosts=…]`
//! ([`crate::ssh`]), `modal:SANDBOX_ID` / `modal?app=A&name=N`
//! ([`crate::modal`]).

use crate::docker::{DockerOptions, DockerTransport};
use crate::duration::{format_duration, parse_duration};
use crate::local::LocalTransport;
use crate::modal::{ModalOptions, ModalTransport};
use crate::ssh::{SshOptions, SshTransport};
use crate::transport::Transport;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use tether_core::protocol::OpKind;

/// A parsed `--backend` value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BackendSpec {
    /// Real processes on this machine.
    Local(LocalOptions),
    /// A docker container.
    Docker(DockerOptions),
    /// A host reached over ssh.
    Ssh(SshOptions),
    /// A Modal sandbox.
    Modal(ModalOptions),
}

/// Options of the `local` backend.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LocalOptions {
    /// Added before every exec.
    pub latency: Duration,
    /// Added before execs of one op kind.
    pub delays: BTreeMap<OpKind, Duration>,
}

/// Why a backend spec was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BackendError {
    /// The spec is empty.
    Empty,
    /// No backend of that name exists.
    Unknown(String),
    /// The backend is planned but not built yet.
    NotAvailable(String),
    /// The backend has no such parameter.
    UnknownParam {
        /// The backend.
        backend: String,
        /// The parameter.
        key: String,
    },
    /// The parameter's value is not valid.
    BadValue {
        /// The parameter.
        key: String,
        /// Why.
        reason: String,
    },
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackendError::Empty => write!(f, "the backend spec is empty; use e.g. `local`"),
            BackendError::Unknown(name) => write!(
                f,
                "unknown backend {name:?}; available: local, docker:NAME, docker?image=IMG, \
                 ssh:[USER@]HOST[:PORT], modal:SANDBOX_ID"
            ),
            BackendError::NotAvailable(name) => write!(
                f,
                "the {name} backend is not available yet; use `local` (this machine)"
            ),
            BackendError::UnknownParam { backend, key } => {
                let takes = match backend.as_str() {
                    "docker" => "image=IMG",
                    "ssh" => "key=PATH, known_hosts=PATH and connect_timeout=DUR",
                    "modal" => "app=APP, name=NAME and python=PATH",
                    _ => {
                        "latency=DUR and delay.OP=DUR (OP one of install, probe, spawn, \
                         submit, wait, cancel, shutdown, gc, ack)"
                    }
                };
                write!(
                    f,
                    "the {backend} backend has no parameter {key:?}; it takes {takes}"
                )
            }
            BackendError::BadValue { key, reason } => write!(f, "bad value for {key}: {reason}"),
        }
    }
}

impl std::error::Error for BackendError {}

impl BackendSpec {
    /// Parses `name[?key=value&key=value…]`.
    pub fn parse(spec: &str) -> Result<BackendSpec, BackendError> {
        let spec = spec.trim();
        let (name, query) = match spec.split_once('?') {
            Some((name, query)) => (name, query),
            None => (spec, ""),
        };
        match name {
            "" => Err(BackendError::Empty),
            "local" => parse_local(query).map(BackendSpec::Local),
            n if n == "docker" || n.starts_with("docker:") => {
                DockerOptions::parse(&n["docker".len()..], query).map(BackendSpec::Docker)
            }
            n if n.starts_with("ssh:") => {
                SshOptions::parse(&n["ssh:".len()..], query).map(BackendSpec::Ssh)
            }
            n if n == "modal" || n.starts_with("modal:") => {
                ModalOptions::parse(&n["modal".len()..], query).map(BackendSpec::Modal)
            }
            other => Err(BackendError::Unknown(other.to_owned())),
        }
    }

    /// Which sandbox this is, as a file-name-safe id for the client's
    /// records: the backend plus a short hash of the remote root, so two
    /// roots on one machine keep separate kernels. Latency and delays are
    /// not part of it (they change the path, not the sandbox).
    pub fn sandbox_id(&self, root: &str) -> String {
        let digest = Sha256::digest(root.as_bytes());
        let short: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
        match self {
            BackendSpec::Local(_) => format!("local-{short}"),
            BackendSpec::Docker(opts) => opts.sandbox_id(root),
            BackendSpec::Ssh(opts) => opts.sandbox_id(root),
            BackendSpec::Modal(opts) => opts.sandbox_id(root),
        }
    }

    /// Builds the transport.
    pub fn transport(&self) -> Arc<dyn Transport> {
        match self {
            BackendSpec::Local(opts) => Arc::new(LocalTransport::new(opts.clone())),
            BackendSpec::Docker(opts) => Arc::new(DockerTransport::new(opts.clone())),
            BackendSpec::Ssh(opts) => Arc::new(SshTransport::new(opts.clone())),
            BackendSpec::Modal(opts) => Arc::new(ModalTransport::new(opts.clone())),
        }
    }
}

impl fmt::Display for BackendSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackendSpec::Local(opts) => {
                f.write_str("local")?;
                let mut sep = '?';
                if !opts.latency.is_zero() {
                    write!(f, "{sep}latency={}", format_duration(opts.latency))?;
                    sep = '&';
                }
                for (kind, d) in &opts.delays {
                    write!(f, "{sep}delay.{kind}={}", format_duration(*d))?;
                    sep = '&';
                }
                Ok(())
            }
            BackendSpec::Docker(opts) => write!(f, "{opts}"),
            BackendSpec::Ssh(opts) => write!(f, "{opts}"),
            BackendSpec::Modal(opts) => write!(f, "{opts}"),
        }
    }
}

fn parse_local(query: &str) -> Result<LocalOptions, BackendError> {
    let mut opts = LocalOptions::default();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').ok_or_else(|| BackendError::BadValue {
            key: pair.to_owned(),
            reason: "expected key=value".into(),
        })?;
        let duration = |v: &str| {
            parse_duration(v).map_err(|e| BackendError::BadValue {
                key: key.to_owned(),
                reason: e.to_string(),
            })
        };
        if key == "latency" {
            opts.latency = duration(value)?;
        } else if let Some(op) = key.strip_prefix("delay.") {
            let kind: OpKind = serde_json::from_value(serde_json::Value::String(op.to_owned()))
                .map_err(|_| BackendError::UnknownParam {
                    backend: "local".into(),
                    key: key.to_owned(),
                })?;
            opts.delays.insert(kind, duration(value)?);
        } else {
            return Err(BackendError::UnknownParam {
                backend: "local".into(),
                key: key.to_owned(),
            });
        }
    }
    Ok(opts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_with_latency_and_delays_round_trips() {
        let spec = BackendSpec::parse("local?latency=50ms&delay.submit=3s").unwrap();
        let BackendSpec::Local(opts) = &spec else {
            panic!("a local spec parses as local")
        };
        assert_eq!(opts.latency, Duration::from_millis(50));
        assert_eq!(opts.delays[&OpKind::Submit], Duration::from_secs(3));
        assert_eq!(spec.to_string(), "local?latency=50ms&delay.submit=3s");
        assert_eq!(BackendSpec::parse("local").unwrap().to_string(), "local");
    }

    #[test]
    fn bad_specs_say_what_is_wrong() {
        let cases = [
            ("", "empty"),
            ("docker", "say which container"),
            ("modal?x=1", "no parameter \"x\""),
            ("ssh:-oProxyCommand=x", "not a host name"),
            ("kubernetes", "unknown backend"),
            ("local?speed=fast", "no parameter \"speed\""),
            ("local?delay.teleport=1s", "no parameter"),
            ("local?latency=soon", "not a duration"),
            ("local?latency", "key=value"),
        ];
        for (spec, want) in cases {
            let err = BackendSpec::parse(spec).unwrap_err().to_string();
            assert!(err.contains(want), "{spec:?}: {err}");
        }
    }

    #[test]
    fn sandbox_id_depends_on_root_only() {
        let a = BackendSpec::parse("local").unwrap();
        let b = BackendSpec::parse("local?latency=1s").unwrap();
        assert_eq!(a.sandbox_id("/tmp/x"), b.sandbox_id("/tmp/x"));
        assert_ne!(a.sandbox_id("/tmp/x"), a.sandbox_id("/tmp/y"));
        assert!(a.sandbox_id("/tmp/x").starts_with("local-"));
    }
}
