//! The `modal` transport: the sandbox is a Modal Sandbox, an exec is
//! `Sandbox.exec(*argv, text=False)` through Modal's Python client (Modal
//! publishes no Rust one), run by this transport's bridge ([`bridge`]):
//! one long-lived local `python3` per transport that imports `modal` once
//! and carries every exec, and the channel's streaming exec, as JSON lines
//! over its stdin and stdout, several in flight. A warm cell so pays no
//! Python start and no `import modal` (1 s and more), only Modal's own
//! round trips.
//!
//! Specs: `modal:SANDBOX_ID` (e.g. `modal:sb-…`) or
//! `modal?app=APP&name=NAME` (a named sandbox), with optional
//! `python=PATH` (an interpreter that can `import modal`; default
//! `$TETHER_MODAL_PYTHON`, else `python3`). Credentials are Modal's own:
//! `MODAL_TOKEN_ID` / `MODAL_TOKEN_SECRET` or `~/.modal.toml`.
//!
//! Failures are transport errors, never exit statuses: `unreachable` when
//! the command was not started (no `modal` package, no credentials, no
//! such sandbox, no python), `io` when it may have run (the bridge died
//! with the call in flight, Modal failed mid-call). A cancel never
//! terminates the sandbox nor a command: the bridge only closes stdin.
//!
//! Tests run the bridge's whole code path against a stand-in `modal`
//! package (`client/tests/fixtures/modal-standin`) that runs local
//! processes.

mod bridge;

use crate::backend::BackendError;
use crate::channel::stream::{OpenFuture, StreamExec};
use crate::docker::short_hash;
use crate::transport::{ExecFuture, ExecRequest, Transport};
use bridge::Bridge;
use std::fmt;
use std::sync::Arc;

pub use bridge::SCRIPT as BRIDGE_SCRIPT;

/// The environment variable naming the Python interpreter for the helper.
pub const PYTHON_ENV: &str = "TETHER_MODAL_PYTHON";

/// Which Modal sandbox.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModalTarget {
    /// By object id (`sb-…`).
    Id(String),
    /// By app and sandbox name.
    Named {
        /// The app.
        app: String,
        /// The sandbox's name.
        name: String,
    },
}

/// Options of the `modal` backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModalOptions {
    /// The sandbox.
    pub target: ModalTarget,
    /// The interpreter that runs the helper (None: `$TETHER_MODAL_PYTHON`
    /// or `python3`).
    pub python: Option<String>,
}

fn check_word(key: &str, value: &str) -> Result<(), BackendError> {
    let ok = !value.is_empty()
        && value.len() <= 128
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if ok {
        Ok(())
    } else {
        Err(BackendError::BadValue {
            key: key.to_owned(),
            reason: format!("{value:?} is not a Modal id or name ([A-Za-z0-9_.-]+)"),
        })
    }
}

impl ModalOptions {
    /// Parses what follows `modal` in a spec: `:ID` or nothing, then the
    /// query (`app=`, `name=`, `python=`).
    pub fn parse(after_name: &str, query: &str) -> Result<ModalOptions, BackendError> {
        let (mut app, mut name, mut python) = (None, None, None);
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').ok_or_else(|| BackendError::BadValue {
                key: pair.to_owned(),
                reason: "expected key=value".into(),
            })?;
            match key {
                "app" => {
                    check_word(key, value)?;
                    app = Some(value.to_owned());
                }
                "name" => {
                    check_word(key, value)?;
                    name = Some(value.to_owned());
                }
                "python" if !value.is_empty() => python = Some(value.to_owned()),
                _ => {
                    return Err(BackendError::UnknownParam {
                        backend: "modal".into(),
                        key: key.to_owned(),
                    })
                }
            }
        }
        let target = match (after_name.strip_prefix(':'), app, name) {
            (Some(id), None, None) => {
                check_word("modal sandbox id", id)?;
                ModalTarget::Id(id.to_owned())
            }
            (None, Some(app), Some(name)) if after_name.is_empty() => {
                ModalTarget::Named { app, name }
            }
            (None, _, _) if !after_name.is_empty() => {
                return Err(BackendError::Unknown(format!("modal{after_name}")))
            }
            _ => {
                return Err(BackendError::BadValue {
                    key: "modal".into(),
                    reason: "say which sandbox: `modal:SANDBOX_ID` or `modal?app=APP&name=NAME`"
                        .into(),
                })
            }
        };
        Ok(ModalOptions { target, python })
    }

    /// The sandbox id for records.
    pub fn sandbox_id(&self, root: &str) -> String {
        let key = match &self.target {
            ModalTarget::Id(id) => format!("id:{id}"),
            ModalTarget::Named { app, name } => format!("name:{app}/{name}"),
        };
        format!("modal-{}", short_hash(&[&key, root]))
    }

    /// The interpreter that runs the bridge.
    pub fn python(&self) -> String {
        self.python
            .clone()
            .or_else(|| std::env::var(PYTHON_ENV).ok().filter(|p| !p.is_empty()))
            .unwrap_or_else(|| "python3".into())
    }
}

impl fmt::Display for ModalOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut sep = '?';
        match &self.target {
            ModalTarget::Id(id) => write!(f, "modal:{id}")?,
            ModalTarget::Named { app, name } => {
                write!(f, "modal?app={app}&name={name}")?;
                sep = '&';
            }
        }
        if let Some(python) = &self.python {
            write!(f, "{sep}python={python}")?;
        }
        Ok(())
    }
}

/// Runs execs in a Modal sandbox through this transport's bridge (one
/// long-lived `python3`, started on first use). Clones share the bridge.
#[derive(Clone)]
pub struct ModalTransport {
    opts: ModalOptions,
    bridge: Arc<Bridge>,
}

impl fmt::Debug for ModalTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModalTransport")
            .field("opts", &self.opts)
            .field("bridge_pid", &self.bridge.pid())
            .finish()
    }
}

impl ModalTransport {
    /// A transport to the sandbox `opts` names.
    pub fn new(opts: ModalOptions) -> ModalTransport {
        let target = match &opts.target {
            ModalTarget::Id(id) => serde_json::json!({ "id": id }),
            ModalTarget::Named { app, name } => serde_json::json!({ "app": app, "name": name }),
        };
        let bridge = Arc::new(Bridge::new(opts.python(), target));
        ModalTransport { opts, bridge }
    }

    /// The pid of the bridge process now running (none before the first
    /// exec, nor after it died until the next).
    pub fn bridge_pid(&self) -> Option<u32> {
        self.bridge.pid()
    }

    /// How many bridge processes this transport has started (one, unless
    /// one died).
    pub fn bridges_started(&self) -> u64 {
        self.bridge.started()
    }
}

impl Transport for ModalTransport {
    fn exec(&self, req: ExecRequest) -> ExecFuture<'_> {
        Box::pin(async move { self.bridge.exec(&req.argv, &req.stdin).await })
    }

    fn describe(&self) -> String {
        self.opts.to_string()
    }

    fn helpers_started(&self) -> u64 {
        self.bridges_started()
    }
}

impl StreamExec for ModalTransport {
    fn open_stream(&self, argv: Vec<String>) -> OpenFuture<'_> {
        Box::pin(async move { self.bridge.open_stream(&argv).await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_print() {
        let o = ModalOptions::parse(":sb-abc123", "").unwrap();
        assert_eq!(o.target, ModalTarget::Id("sb-abc123".into()));
        assert_eq!(o.to_string(), "modal:sb-abc123");
        let o = ModalOptions::parse("", "app=tether&name=box&python=/v/bin/python").unwrap();
        assert_eq!(
            o.to_string(),
            "modal?app=tether&name=box&python=/v/bin/python"
        );
        assert_ne!(
            o.sandbox_id("/r"),
            ModalOptions::parse(":sb-1", "").unwrap().sandbox_id("/r")
        );
        for (after, query) in [
            ("", ""),
            ("", "app=a"),
            (":a b", ""),
            (":x", "zone=eu"),
            ("x", ""),
        ] {
            assert!(
                ModalOptions::parse(after, query).is_err(),
                "{after:?} {query:?}"
            );
        }
    }
}
