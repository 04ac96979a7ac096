//! The `local` transport: the sandbox is this machine, an exec is a real
//! child process (`tokio::process`, killed if the call is abandoned).
//!
//! Injected latency ([`LocalOptions`]) is slept before the process starts,
//! modelling a remote round trip; per-op delays model one slow call. A
//! command that cannot be found is an [`ExecOutput`] with exit status 127
//! (126 when it is not executable), as a shell would report it; only a
//! failure to start that says nothing about the command is a
//! [`TransportError`].

use crate::backend::LocalOptions;
use crate::subprocess::run_helper;
use crate::transport::{
    ExecFuture, ExecOutput, ExecRequest, Transport, TransportError, TransportErrorKind,
};
use std::io::ErrorKind;
use std::time::Duration;
use tether_core::protocol::{Envelope, OpKind};
use tokio::process::Command;

/// Runs execs as child processes of this process.
#[derive(Clone, Debug, Default)]
pub struct LocalTransport {
    opts: LocalOptions,
}

impl LocalTransport {
    /// A local transport with these injected delays.
    pub fn new(opts: LocalOptions) -> LocalTransport {
        LocalTransport { opts }
    }

    fn delay_for(&self, req: &ExecRequest) -> Duration {
        let kind = op_kind(req);
        let extra = kind
            .and_then(|k| self.opts.delays.get(&k).copied())
            .unwrap_or_default();
        self.opts.latency + extra
    }
}

impl Transport for LocalTransport {
    fn exec(&self, req: ExecRequest) -> ExecFuture<'_> {
        let delay = self.delay_for(&req);
        Box::pin(async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            run(req).await
        })
    }

    fn describe(&self) -> String {
        if self.opts.latency.is_zero() {
            "local".into()
        } else {
            format!("local (latency {:?})", self.opts.latency)
        }
    }
}

/// Which op an exec carries, read back from its rendering (for per-op
/// delays only).
fn op_kind(req: &ExecRequest) -> Option<OpKind> {
    if req.argv.iter().any(|a| a == "tether-install") {
        return Some(OpKind::Install);
    }
    serde_json::from_slice::<Envelope>(&req.stdin)
        .ok()
        .map(|e| e.op.kind())
}

async fn run(req: ExecRequest) -> Result<ExecOutput, TransportError> {
    let Some((program, args)) = req.argv.split_first() else {
        return Err(TransportError {
            kind: TransportErrorKind::Io,
            detail: "empty argv".into(),
        });
    };
    let mut command = Command::new(program);
    command.args(args);
    // The shared runner puts the exec in its own process group (a Ctrl-C
    // at the terminal is for tether, which cancels the cell) and bounds the
    // drain after exit (a background child may hold stdout).
    match run_helper(command, req.stdin).await {
        Ok(out) => Ok(ExecOutput {
            stdout: out.stdout,
            stderr: out.stderr,
            exit_code: out.code,
        }),
        // As a shell would report it, so a missing agent gets installed.
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(not_run(program, &e, 127)),
        Err(e) if e.kind() == ErrorKind::PermissionDenied => Ok(not_run(program, &e, 126)),
        Err(e) => Err(TransportError {
            kind: TransportErrorKind::Io,
            detail: format!("running {program}: {e}"),
        }),
    }
}

fn not_run(program: &str, e: &std::io::Error, code: i32) -> ExecOutput {
    ExecOutput {
        stdout: Vec::new(),
        stderr: format!("{program}: {e}\n").into_bytes(),
        exit_code: code,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(argv: &[&str], stdin: &[u8]) -> ExecRequest {
        ExecRequest {
            argv: argv.iter().map(|s| s.to_string()).collect(),
            stdin: stdin.to_vec(),
        }
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn runs_a_real_process_with_stdin_and_exact_bytes() {
        let t = LocalTransport::default();
        let out = rt()
            .block_on(t.exec(req(
                &["/bin/sh", "-c", "cat; printf '\\377' >&2; exit 7"],
                b"in\x01put",
            )))
            .unwrap();
        assert_eq!(out.stdout, b"in\x01put");
        assert_eq!(out.stderr, b"\xff");
        assert_eq!(out.exit_code, 7);
    }

    #[test]
    fn missing_command_is_exit_127_not_a_transport_error() {
        let t = LocalTransport::default();
        let out = rt()
            .block_on(t.exec(req(&["/nonexistent/tether-agent-x", "op"], b"")))
            .unwrap();
        assert_eq!(out.exit_code, 127);
        assert!(!out.stderr.is_empty());
    }

    #[test]
    fn killed_by_signal_is_128_plus_signal() {
        let t = LocalTransport::default();
        let out = rt()
            .block_on(t.exec(req(&["/bin/sh", "-c", "kill -9 $$"], b"")))
            .unwrap();
        assert_eq!(out.exit_code, 137);
    }

    #[test]
    fn a_background_child_holding_stdout_does_not_hang_the_exec() {
        let t = LocalTransport::default();
        let out = rt()
            .block_on(t.exec(req(&["/bin/sh", "-c", "echo hi; sleep 30 & exit 0"], b"")))
            .unwrap();
        assert_eq!(out.stdout, b"hi\n");
        assert_eq!(out.exit_code, 0);
    }

    #[test]
    fn per_op_delay_applies_to_that_op_only() {
        let mut opts = LocalOptions::default();
        opts.delays.insert(OpKind::Submit, Duration::from_secs(5));
        let t = LocalTransport::new(opts);
        let gc = tether_core::protocol::render(
            1,
            &tether_core::protocol::Op::Gc,
            &tether_core::protocol::AgentLocation {
                root: "/r".into(),
                hash: "00".repeat(32),
            },
        );
        let tether_core::protocol::StdinSource::Bytes(stdin) = gc.stdin else {
            panic!("gc carries JSON");
        };
        assert_eq!(t.delay_for(&req(&["x"], &stdin)), Duration::ZERO);
        assert_eq!(op_kind(&req(&["x"], &stdin)), Some(OpKind::Gc));
    }
}
