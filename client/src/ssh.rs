//! The `ssh` transport: the sandbox is a host reached with the OpenSSH
//! client (`BatchMode`: never a prompt) over one multiplexed connection
//! per host ([`crate::ssh_master`]): an exec is a session on it, not a
//! new connection, and the channel's stream is one more.
//!
//! Spec: `ssh:[USER@]HOST[:PORT]` (`[ADDR]:PORT` for IPv6) with optional
//! `key=PATH` (identity file, and only it), `known_hosts=PATH` (host keys
//! checked strictly against that file), `connect_timeout=DUR`,
//! `persist=DUR` (how long the connection outlives its last session,
//! default 10m) and `control_dir=PATH` (where its control socket lives).
//! Without them, ssh's own configuration decides.
//!
//! A session's command is one string for the remote login shell
//! (which must be POSIX: sh, dash, bash, zsh), so every argv element is
//! single-quoted. The command is followed, in the same remote shell, by a
//! trailer on stderr carrying its exit status and a per-call nonce; the
//! trailer is removed before the output is returned. It tells the remote
//! command's own status (even 255 or 127) from the connection's: with the
//! trailer the command ran and that is its status; a connection that
//! could not be made is [`TransportErrorKind::Unreachable`] (the command
//! did not run), and anything else is [`TransportErrorKind::Io`] (the
//! command may have run).

use crate::backend::BackendError;
use crate::docker::short_hash;
use crate::duration::{format_duration, parse_duration};
use crate::ssh_master::{Master, RemoteChild};
use crate::subprocess::{nonce, sh_quote, HelperOutput};
use crate::transport::{
    ExecFuture, ExecOutput, ExecRequest, Transport, TransportError, TransportErrorKind,
};
use std::fmt;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

/// How long the connection outlives its last session by default.
const DEFAULT_PERSIST: Duration = Duration::from_secs(600);

/// Options of the `ssh` backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SshOptions {
    /// The remote user; ssh's default when absent.
    pub user: Option<String>,
    /// Host name or address (IPv6 without brackets).
    pub host: String,
    /// Port; ssh's default when absent.
    pub port: Option<u16>,
    /// Identity file, used alone (`IdentitiesOnly`).
    pub key: Option<PathBuf>,
    /// Known-hosts file, checked strictly.
    pub known_hosts: Option<PathBuf>,
    /// How long to wait for the connection.
    pub connect_timeout: Duration,
    /// How long the connection outlives its last session.
    pub persist: Duration,
    /// Where the connection's control socket lives (a private directory;
    /// see [`crate::ssh_master`] for the default).
    pub control_dir: Option<PathBuf>,
}

impl SshOptions {
    /// Parses `[USER@]HOST[:PORT]` and the query.
    pub fn parse(target: &str, query: &str) -> Result<SshOptions, BackendError> {
        let bad = |key: &str, reason: String| BackendError::BadValue {
            key: key.to_owned(),
            reason,
        };
        let (user, hostport) = match target.rsplit_once('@') {
            Some((user, rest)) => (Some(user), rest),
            None => (None, target),
        };
        if let Some(user) = user {
            let ok = user.chars().next().is_some_and(|c| c != '-')
                && user
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
            if !ok {
                return Err(bad("ssh user", format!("{user:?} is not a user name")));
            }
        }
        let (host, port) = if let Some(rest) = hostport.strip_prefix('[') {
            let (addr, after) = rest
                .split_once(']')
                .ok_or_else(|| bad("ssh host", format!("unclosed `[` in {hostport:?}")))?;
            match after {
                "" => (addr, None),
                _ => match after.strip_prefix(':') {
                    Some(p) => (addr, Some(p)),
                    None => return Err(bad("ssh host", format!("junk after `]` in {hostport:?}"))),
                },
            }
        } else {
            match hostport.split_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (hostport, None),
            }
        };
        let host_ok = host.chars().next().is_some_and(|c| c != '-')
            && host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | ':' | '%'));
        if !host_ok {
            return Err(bad(
                "ssh host",
                format!("{host:?} is not a host name; use ssh:[USER@]HOST[:PORT]"),
            ));
        }
        let port = match port {
            None => None,
            Some(p) => Some(
                p.parse::<u16>()
                    .ok()
                    .filter(|p| *p != 0)
                    .ok_or_else(|| bad("ssh port", format!("{p:?} is not a port")))?,
            ),
        };
        let mut opts = SshOptions {
            user: user.map(str::to_owned),
            host: host.to_owned(),
            port,
            key: None,
            known_hosts: None,
            connect_timeout: Duration::from_secs(10),
            persist: DEFAULT_PERSIST,
            control_dir: None,
        };
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| bad(pair, "expected key=value".into()))?;
            match key {
                "key" => opts.key = Some(PathBuf::from(value)),
                "known_hosts" => opts.known_hosts = Some(PathBuf::from(value)),
                "connect_timeout" => {
                    opts.connect_timeout = parse_duration(value)
                        .map_err(|e| bad(key, e.to_string()))?
                        .max(Duration::from_secs(1));
                }
                "persist" => {
                    opts.persist = parse_duration(value)
                        .map_err(|e| bad(key, e.to_string()))?
                        .max(Duration::from_secs(1));
                }
                "control_dir" => {
                    let dir = PathBuf::from(value);
                    if !dir.is_absolute() {
                        return Err(bad(key, format!("{value:?} is not an absolute path")));
                    }
                    opts.control_dir = Some(dir);
                }
                _ => {
                    return Err(BackendError::UnknownParam {
                        backend: "ssh".into(),
                        key: key.to_owned(),
                    })
                }
            }
        }
        Ok(opts)
    }

    /// The sandbox id for records: user, host, port and root.
    pub fn sandbox_id(&self, root: &str) -> String {
        let port = self.port.map(|p| p.to_string()).unwrap_or_default();
        let user = self.user.as_deref().unwrap_or("");
        format!("ssh-{}", short_hash(&[user, &self.host, &port, root]))
    }

    /// The `ssh` options that make the connection (no control options,
    /// no host).
    fn connect_args(&self) -> Vec<String> {
        let mut args: Vec<String> = vec![
            "-T".into(),
            "-o".into(),
            "BatchMode=yes".into(),
            "-o".into(),
            format!("ConnectTimeout={}", self.connect_timeout.as_secs().max(1)),
            "-o".into(),
            "ServerAliveInterval=15".into(),
            "-o".into(),
            "ServerAliveCountMax=3".into(),
            "-o".into(),
            "LogLevel=ERROR".into(),
        ];
        if let Some(port) = self.port {
            args.extend(["-p".into(), port.to_string()]);
        }
        if let Some(key) = &self.key {
            args.extend([
                "-i".into(),
                key.display().to_string(),
                "-o".into(),
                "IdentitiesOnly=yes".into(),
            ]);
        }
        if let Some(kh) = &self.known_hosts {
            args.extend([
                "-o".into(),
                format!("UserKnownHostsFile={}", kh.display()),
                "-o".into(),
                "StrictHostKeyChecking=yes".into(),
                "-o".into(),
                "GlobalKnownHostsFile=/dev/null".into(),
            ]);
        }
        if let Some(user) = &self.user {
            args.extend(["-l".into(), user.clone()]);
        }
        args
    }
}

impl SshOptions {
    /// The OpenSSH client command that runs `argv` on the host (for
    /// comparisons): on a connection of its own when `master` is `None`,
    /// else as a session of the master listening on that control socket
    /// (one `ssh` process per command, as the `openssh` crate's
    /// process-mux does it).
    pub fn client_command(&self, master: Option<&std::path::Path>, argv: &[&str]) -> Command {
        let mut cmd = Command::new("ssh");
        cmd.args(self.connect_args());
        match master {
            None => cmd.args(["-o", "ControlMaster=no", "-o", "ControlPath=none"]),
            Some(ctl) => cmd
                .args(["-o", "ControlMaster=no", "-o"])
                .arg(format!("ControlPath={}", ctl.display())),
        };
        cmd.args(["--", &self.host]).args(argv);
        cmd
    }
}

impl fmt::Display for SshOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ssh:")?;
        if let Some(user) = &self.user {
            write!(f, "{user}@")?;
        }
        if self.host.contains(':') {
            write!(f, "[{}]", self.host)?;
        } else {
            f.write_str(&self.host)?;
        }
        if let Some(port) = self.port {
            write!(f, ":{port}")?;
        }
        let mut sep = '?';
        if let Some(key) = &self.key {
            write!(f, "{sep}key={}", key.display())?;
            sep = '&';
        }
        if let Some(kh) = &self.known_hosts {
            write!(f, "{sep}known_hosts={}", kh.display())?;
            sep = '&';
        }
        if self.connect_timeout != Duration::from_secs(10) {
            write!(
                f,
                "{sep}connect_timeout={}",
                format_duration(self.connect_timeout)
            )?;
            sep = '&';
        }
        if self.persist != DEFAULT_PERSIST {
            write!(f, "{sep}persist={}", format_duration(self.persist))?;
            sep = '&';
        }
        if let Some(dir) = &self.control_dir {
            write!(f, "{sep}control_dir={}", dir.display())?;
        }
        Ok(())
    }
}

/// Runs execs on a host over ssh, all on one connection.
#[derive(Clone, Debug)]
pub struct SshTransport {
    opts: SshOptions,
    master: Arc<Master>,
}

impl SshTransport {
    /// A transport to the host `opts` names (nothing connects yet).
    pub fn new(opts: SshOptions) -> SshTransport {
        let master = Arc::new(Master::new(&opts, opts.connect_args()));
        SshTransport { opts, master }
    }

    /// Where the connection's control socket is (or why there is none).
    pub fn control_path(&self) -> Result<PathBuf, TransportError> {
        self.master.control_path().map(PathBuf::from)
    }

    /// Starts `argv` in a session on the connection, pipes open (the
    /// channel's stream).
    pub(crate) async fn start(&self, argv: &[String]) -> Result<RemoteChild, TransportError> {
        if argv.is_empty() {
            return Err(TransportError {
                kind: TransportErrorKind::Io,
                detail: "empty argv".into(),
            });
        }
        let quoted: Vec<String> = argv.iter().map(|a| sh_quote(a)).collect();
        self.master.spawn(&quoted.join(" ")).await
    }

    async fn run(&self, req: ExecRequest) -> Result<ExecOutput, TransportError> {
        if req.argv.is_empty() {
            return Err(TransportError {
                kind: TransportErrorKind::Io,
                detail: "empty argv".into(),
            });
        }
        let marker = format!("tether-exit-{}", nonce());
        let mut child = self
            .master
            .spawn(&remote_command(&req.argv, &marker))
            .await?;
        let stdin = child.stdin().take();
        let write = async move {
            if let Some(mut pipe) = stdin {
                // A command that stops reading closes the pipe: its exit
                // status says what happened, not this write.
                let _ = pipe.write_all(&req.stdin).await;
                let _ = pipe.shutdown().await;
            }
        };
        let stdout = child.stdout().take();
        let stderr = child.stderr().take();
        let ((), stdout, stderr) = tokio::join!(write, read_all(stdout), read_all(stderr));
        let code = match child.wait().await {
            Ok(status) => status.code().unwrap_or(255),
            Err(_) => 255,
        };
        classify(
            &self.opts.host,
            &marker,
            HelperOutput {
                stdout,
                stderr,
                code,
            },
        )
    }
}

async fn read_all<R: AsyncRead + Unpin>(pipe: Option<R>) -> Vec<u8> {
    let mut buf = Vec::new();
    if let Some(mut pipe) = pipe {
        // A cut connection ends the pipe early: the missing trailer says so.
        let _ = pipe.read_to_end(&mut buf).await;
    }
    buf
}

impl Transport for SshTransport {
    fn exec(&self, req: ExecRequest) -> ExecFuture<'_> {
        Box::pin(self.run(req))
    }

    fn describe(&self) -> String {
        self.opts.to_string()
    }

    fn helpers_started(&self) -> u64 {
        self.master.started()
    }
}

/// The one string for the remote shell: the quoted argv, then the
/// trailer with its exit status on stderr.
fn remote_command(argv: &[String], marker: &str) -> String {
    let quoted: Vec<String> = argv.iter().map(|a| sh_quote(a)).collect();
    format!(
        "{}\n_tw_rc=$?; printf '%s:%d\\n' {} \"$_tw_rc\" >&2; exit \"$_tw_rc\"",
        quoted.join(" "),
        sh_quote(marker)
    )
}

fn classify(host: &str, marker: &str, out: HelperOutput) -> Result<ExecOutput, TransportError> {
    let needle = format!("{marker}:");
    if let Some(at) = find_last(&out.stderr, needle.as_bytes()) {
        let rest = &out.stderr[at + needle.len()..];
        let end = rest.iter().position(|b| *b == b'\n').unwrap_or(rest.len());
        if let Some(code) = std::str::from_utf8(&rest[..end])
            .ok()
            .and_then(|s| s.parse::<i32>().ok())
        {
            let mut stderr = out.stderr[..at].to_vec();
            stderr.extend_from_slice(rest.get(end + 1..).unwrap_or_default());
            return Ok(ExecOutput {
                stdout: out.stdout,
                stderr,
                exit_code: code,
            });
        }
    }
    // The session was established, so the command may have run.
    Err(TransportError {
        kind: TransportErrorKind::Io,
        detail: format!(
            "ssh {host}: the remote shell gave no exit status (the session ended with {}): {}",
            out.code,
            out.stderr_text()
        ),
    })
}

fn find_last(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || hay.len() < needle.len() {
        return None;
    }
    (0..=hay.len() - needle.len())
        .rev()
        .find(|&i| &hay[i..i + needle.len()] == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_print() {
        let o = SshOptions::parse("alice@example.org:2222", "key=/k&known_hosts=/kh").unwrap();
        assert_eq!(o.user.as_deref(), Some("alice"));
        assert_eq!(o.host, "example.org");
        assert_eq!(o.port, Some(2222));
        assert_eq!(
            o.to_string(),
            "ssh:alice@example.org:2222?key=/k&known_hosts=/kh"
        );
        let o = SshOptions::parse("[::1]:22", "").unwrap();
        assert_eq!(o.host, "::1");
        assert_eq!(o.to_string(), "ssh:[::1]:22");
        let o = SshOptions::parse("h", "persist=30s&control_dir=/run/t").unwrap();
        assert_eq!(o.persist, Duration::from_secs(30));
        assert_eq!(o.to_string(), "ssh:h?persist=30s&control_dir=/run/t");
        let o = SshOptions::parse("h", "connect_timeout=3s").unwrap();
        assert_eq!(o.port, None);
        assert_eq!(o.connect_timeout, Duration::from_secs(3));
        assert_ne!(
            SshOptions::parse("a@h:1", "").unwrap().sandbox_id("/r"),
            SshOptions::parse("b@h:1", "").unwrap().sandbox_id("/r")
        );
    }

    #[test]
    fn hostile_specs_are_refused() {
        for (target, query) in [
            ("", ""),
            ("-oProxyCommand=x", ""),
            ("u@-h", ""),
            ("-u@h", ""),
            ("h:0", ""),
            ("h:99999", ""),
            ("h:x", ""),
            ("a b", ""),
            ("[::1", ""),
            ("h", "proxy=x"),
            ("h", "connect_timeout=soon"),
            ("h", "control_dir=relative"),
        ] {
            assert!(
                SshOptions::parse(target, query).is_err(),
                "{target:?} {query:?}"
            );
        }
    }

    #[test]
    fn the_trailer_gives_the_status_even_255() {
        let out = HelperOutput {
            stdout: b"out".to_vec(),
            stderr: b"err\ntether-exit-n:255\n".to_vec(),
            code: 255,
        };
        let got = classify("h", "tether-exit-n", out).unwrap();
        assert_eq!(got.exit_code, 255);
        assert_eq!(got.stderr, b"err\n");
        let cut = HelperOutput {
            stdout: b"partial".to_vec(),
            stderr: b"Connection to h closed by remote host.\n".to_vec(),
            code: 255,
        };
        let e = classify("h", "tether-exit-n", cut).unwrap_err();
        assert_eq!(e.kind, TransportErrorKind::Io);
    }
}
