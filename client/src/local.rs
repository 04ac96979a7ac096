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

    /// The injected delays.
    pub fn options(&self) -> &LocalOptions {
        &self.opts
    }

    fn delay_for(&self, req: &ExecRequest) -> Duration {
        let extra = req
            .op
            .and_then(|op| self.opts.delays.get(&op.kind).copied())
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
    use tether_core::protocol::OpKind;

    fn req(argv: &[&str], stdin: &[u8]) -> ExecRequest {
        ExecRequest {
            argv: argv.iter().map(|s| s.to_string()).collect(),
            stdin: stdin.to_vec(),
            op: None,
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
        let op = |kind| ExecRequest {
            op: Some(crate::transport::ExecOp { id: 1, kind }),
            ..req(&["x"], b"")
        };
        assert_eq!(t.delay_for(&op(OpKind::Gc)), Duration::ZERO);
        assert_eq!(t.delay_for(&op(OpKind::Submit)), Duration::from_secs(5));
        assert_eq!(t.delay_for(&req(&["x"], b"")), Duration::ZERO);
    }
}
