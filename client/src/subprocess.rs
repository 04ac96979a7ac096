//! Running a local helper program to completion for a remote transport:
//! `docker exec`, `ssh`. Bytes in on stdin, exact bytes
//! out on stdout and stderr, the exit status — and nothing decided here:
//! each transport reads the result and tells its own failures apart from
//! the remote command's.
//!
//! The helper runs in its own process group (a Ctrl-C at the terminal is
//! for tether, not for an exec in flight) and is killed when the call is
//! abandoned. Once it has exited, its pipes are drained for a short bound
//! only: a process it left behind may hold them open forever.

use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

/// How long to keep reading after the helper exited.
const DRAIN_BOUND: Duration = Duration::from_secs(2);

/// What a helper program did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HelperOutput {
    /// Everything it wrote to stdout.
    pub(crate) stdout: Vec<u8>,
    /// Everything it wrote to stderr.
    pub(crate) stderr: Vec<u8>,
    /// Its exit status; killed by signal S is `128 + S`.
    pub(crate) code: i32,
}

impl HelperOutput {
    /// stderr as text, trimmed, for messages.
    pub(crate) fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr).trim().to_owned()
    }
}

/// Runs `command` with `stdin` written to it (then closed) and collects
/// its output. An error means it could not be started or waited for.
pub(crate) async fn run_helper(mut command: Command, stdin: Vec<u8>) -> io::Result<HelperOutput> {
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = command.spawn()?;
    if let Some(mut pipe) = child.stdin.take() {
        // A helper that stops reading closes the pipe: its exit status
        // says what happened, not this write.
        tokio::spawn(async move {
            let _ = pipe.write_all(&stdin).await;
            let _ = pipe.shutdown().await;
        });
    }
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let mut status = None;
    let mut drain_until = None;
    loop {
        if status.is_some() && stdout.is_none() && stderr.is_none() {
            break;
        }
        let mut out_buf = [0u8; 16 * 1024];
        let mut err_buf = [0u8; 16 * 1024];
        tokio::select! {
            biased;
            got = read_some(&mut stdout, &mut out_buf) => take_chunk(got, &mut stdout, &out_buf, &mut out),
            got = read_some(&mut stderr, &mut err_buf) => take_chunk(got, &mut stderr, &err_buf, &mut err),
            exited = child.wait(), if status.is_none() => {
                status = Some(exited?);
                drain_until = Some(tokio::time::Instant::now() + DRAIN_BOUND);
            }
            () = sleep_until_opt(drain_until) => break,
        }
    }
    let status = status.unwrap_or_default();
    let code = status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(-1);
    Ok(HelperOutput {
        stdout: out,
        stderr: err,
        code,
    })
}

async fn read_some<R: AsyncRead + Unpin>(
    reader: &mut Option<R>,
    buf: &mut [u8],
) -> io::Result<usize> {
    match reader {
        Some(r) => r.read(buf).await,
        None => std::future::pending().await,
    }
}

fn take_chunk<R>(got: io::Result<usize>, reader: &mut Option<R>, buf: &[u8], to: &mut Vec<u8>) {
    match got {
        Ok(0) | Err(_) => *reader = None,
        Ok(n) => to.extend_from_slice(&buf[..n]),
    }
}

async fn sleep_until_opt(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

pub(crate) use tether_core::shell_quote::sh_quote;

/// A short random hex string (from the OS, via std's hasher keys), for
/// markers a remote command cannot guess.
pub(crate) fn nonce() -> String {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    let mut h = RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    h.write_u32(std::process::id());
    format!("{:016x}", h.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn round_trips_stdin_and_keeps_bytes_exact() {
        let mut cmd = Command::new("/bin/sh");
        cmd.args(["-c", "cat; printf '\\377\\000' >&2; exit 9"]);
        let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let out = rt().block_on(run_helper(cmd, big.clone())).unwrap();
        assert_eq!(out.stdout, big);
        assert_eq!(out.stderr, b"\xff\x00");
        assert_eq!(out.code, 9);
    }

    #[test]
    fn quoted_args_survive_a_real_shell() {
        let hostile = [
            "",
            "a b",
            "it's",
            "'",
            "$(touch /tmp/x)",
            "`id`",
            "\\n",
            "line\nbreak",
            "-e",
            "*",
            "; exit 3",
            "\"",
            "ünï",
        ];
        let script: Vec<String> = hostile.iter().map(|a| sh_quote(a)).collect();
        let mut cmd = Command::new("/bin/sh");
        cmd.args([
            "-c",
            &format!(
                "for a in {}; do printf '%s\\0' \"$a\"; done",
                script.join(" ")
            ),
        ]);
        let out = rt().block_on(run_helper(cmd, Vec::new())).unwrap();
        let got: Vec<&[u8]> = out.stdout.split(|b| *b == 0).collect();
        let want: Vec<&[u8]> = hostile
            .iter()
            .map(|s| s.as_bytes())
            .chain([&b""[..]])
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn nonces_differ() {
        assert_ne!(nonce(), nonce());
    }
}
