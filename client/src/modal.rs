//! The `modal` transport: the sandbox is a Modal Sandbox, an exec is
//! `Sandbox.exec(*argv, text=False)` through Modal's Python client, run by
//! a small helper script ([`HELPER`]) in a local `python3`.
//!
//! Specs: `modal:SANDBOX_ID` (e.g. `modal:sb-…`) or
//! `modal?app=APP&name=NAME` (a named sandbox), with optional
//! `python=PATH` (an interpreter that can `import modal`; default
//! `$TETHER_MODAL_PYTHON`, else `python3`). Credentials are Modal's own:
//! `MODAL_TOKEN_ID` / `MODAL_TOKEN_SECRET` or `~/.modal.toml`.
//!
//! The helper frames its answer so that the remote command's exit status
//! can never be confused with the helper's own failures: on success one
//! JSON header line `{"rc":N,"stdout":LEN,"stderr":LEN}` then the raw
//! bytes; on failure `{"error":{"kind":"unreachable"|"io","detail":…}}`
//! and exit 3. `unreachable` means the command was not started (no
//! `modal` package, no credentials, no such sandbox); `io` that it may
//! have run.

use crate::backend::BackendError;
use crate::docker::short_hash;
use crate::subprocess::run_helper;
use crate::transport::{
    ExecFuture, ExecOutput, ExecRequest, Transport, TransportError, TransportErrorKind,
};
use std::fmt;
use tokio::process::Command;

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

    fn python(&self) -> String {
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

/// The helper: argv[1] is a JSON object (`id` or `app`+`name`, and
/// `argv`); stdin is the command's stdin.
pub const HELPER: &str = r#"
import json, sys

def fail(kind, detail):
    sys.stdout.write(json.dumps({"error": {"kind": kind, "detail": detail}}) + "\n")
    sys.stdout.flush()
    sys.exit(3)

try:
    import modal
    import modal.exception as mexc
except Exception as e:
    fail("unreachable", "the modal Python package is not importable by %s (%s); "
         "install it with `pip install modal` or set TETHER_MODAL_PYTHON" % (sys.executable, e))

spec = json.loads(sys.argv[1])
data = sys.stdin.buffer.read()
not_started = tuple(getattr(mexc, n) for n in ("AuthError", "NotFoundError", "SandboxTerminatedError",
                                               "PermissionDeniedError", "InvalidError") if hasattr(mexc, n))
started = False
try:
    if "id" in spec:
        sb = modal.Sandbox.from_id(spec["id"])
    else:
        sb = modal.Sandbox.from_name(spec["app"], spec["name"])
    proc = sb.exec(*spec["argv"], text=False)
    started = True
    if data:
        proc.stdin.write(data)
    proc.stdin.write_eof()
    proc.stdin.drain()
    out = proc.stdout.read()
    err = proc.stderr.read()
    rc = proc.wait()
except not_started as e:
    fail("io" if started else "unreachable", "%s: %s" % (type(e).__name__, e))
except Exception as e:
    fail("io", "%s: %s" % (type(e).__name__, e))
if isinstance(out, str):
    out = out.encode()
if isinstance(err, str):
    err = err.encode()
head = json.dumps({"rc": rc if rc is not None else -1, "stdout": len(out), "stderr": len(err)})
sys.stdout.buffer.write(head.encode() + b"\n" + out + err)
sys.stdout.buffer.flush()
"#;

/// Runs execs in a Modal sandbox.
#[derive(Clone, Debug)]
pub struct ModalTransport {
    opts: ModalOptions,
}

impl ModalTransport {
    /// A transport to the sandbox `opts` names.
    pub fn new(opts: ModalOptions) -> ModalTransport {
        ModalTransport { opts }
    }
}

impl Transport for ModalTransport {
    fn exec(&self, req: ExecRequest) -> ExecFuture<'_> {
        Box::pin(async move {
            let mut spec = serde_json::Map::new();
            match &self.opts.target {
                ModalTarget::Id(id) => {
                    spec.insert("id".into(), id.clone().into());
                }
                ModalTarget::Named { app, name } => {
                    spec.insert("app".into(), app.clone().into());
                    spec.insert("name".into(), name.clone().into());
                }
            }
            spec.insert("argv".into(), req.argv.clone().into());
            let python = self.opts.python();
            let mut cmd = Command::new(&python);
            cmd.args(["-c", HELPER])
                .arg(serde_json::Value::Object(spec).to_string());
            let out = run_helper(cmd, req.stdin)
                .await
                .map_err(|e| TransportError {
                    kind: TransportErrorKind::Unreachable,
                    detail: format!("cannot run {python} for the Modal helper: {e}"),
                })?;
            parse_reply(&out.stdout, out.code, &out.stderr_text())
        })
    }

    fn describe(&self) -> String {
        self.opts.to_string()
    }
}

/// Reads the helper's framed answer.
pub(crate) fn parse_reply(
    stdout: &[u8],
    code: i32,
    stderr: &str,
) -> Result<ExecOutput, TransportError> {
    let io = |detail: String| TransportError {
        kind: TransportErrorKind::Io,
        detail,
    };
    let nl = stdout.iter().position(|b| *b == b'\n').ok_or_else(|| {
        io(format!(
            "the Modal helper exited {code} without an answer: {stderr}"
        ))
    })?;
    let head: serde_json::Value = serde_json::from_slice(&stdout[..nl]).map_err(|e| {
        io(format!(
            "the Modal helper's answer is not JSON ({e}): {stderr}"
        ))
    })?;
    if let Some(err) = head.get("error") {
        let kind = match err.get("kind").and_then(|k| k.as_str()) {
            Some("unreachable") => TransportErrorKind::Unreachable,
            _ => TransportErrorKind::Io,
        };
        let detail = err
            .get("detail")
            .and_then(|d| d.as_str())
            .unwrap_or("unknown error")
            .to_owned();
        return Err(TransportError {
            kind,
            detail: format!("modal: {detail}"),
        });
    }
    let field = |name: &str| head.get(name).and_then(|v| v.as_i64());
    let (Some(rc), Some(n_out), Some(n_err)) = (field("rc"), field("stdout"), field("stderr"))
    else {
        return Err(io(format!(
            "the Modal helper's answer lacks rc/stdout/stderr: {head}"
        )));
    };
    let body = &stdout[nl + 1..];
    let (n_out, n_err) = (n_out.max(0) as usize, n_err.max(0) as usize);
    if body.len() != n_out + n_err {
        return Err(io(format!(
            "the Modal helper's answer is truncated ({} of {} bytes)",
            body.len(),
            n_out + n_err
        )));
    }
    Ok(ExecOutput {
        stdout: body[..n_out].to_vec(),
        stderr: body[n_out..].to_vec(),
        exit_code: i32::try_from(rc).unwrap_or(-1),
    })
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

    #[test]
    fn framed_answers_parse_exactly() {
        let mut framed = br#"{"rc":255,"stdout":3,"stderr":2}"#.to_vec();
        framed.extend_from_slice(b"\nout\xffe");
        let got = parse_reply(&framed, 0, "").unwrap();
        assert_eq!(got.exit_code, 255);
        assert_eq!(got.stdout, b"out");
        assert_eq!(got.stderr, b"\xffe");
        let e = parse_reply(br#"{"rc":0,"stdout":9,"stderr":0}"#, 0, "").unwrap_err();
        assert_eq!(e.kind, TransportErrorKind::Io);
        let e = parse_reply(
            b"{\"error\":{\"kind\":\"unreachable\",\"detail\":\"AuthError: Token missing\"}}\n",
            3,
            "",
        )
        .unwrap_err();
        assert_eq!(e.kind, TransportErrorKind::Unreachable);
        assert!(e.detail.contains("Token missing"));
        assert!(parse_reply(b"", 1, "Traceback").is_err());
    }
}
