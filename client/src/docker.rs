//! The `docker` transport: the sandbox is a container, an exec is
//! `docker exec -i CONTAINER argv…` with stdin piped.
//!
//! Specs: `docker:NAME` (an existing container, by name or id),
//! `docker:NAME?image=IMG` (that container, created from IMG when it does
//! not exist, started when it is stopped) and `docker?image=IMG` (the same
//! with a name derived from the image). A created container runs
//! `sleep infinity` under docker's init (which reaps orphans) and stays
//! after tether exits: its kernels live in it. Remove it with
//! `docker rm -f NAME`.
//!
//! Failures of docker itself are told apart from the command's own exit
//! status by docker's messages on stderr (the agent never prints those):
//! no such container, container not running or paused, daemon not
//! reachable → [`TransportErrorKind::Unreachable`]; another daemon error
//! → [`TransportErrorKind::Io`] (the command may have run). A command that
//! cannot be found is exit 127 (126 when it cannot be executed), as a
//! shell reports it, whatever docker's own code for it is.

use crate::backend::BackendError;
use crate::subprocess::{run_helper, HelperOutput};
use crate::transport::{
    ExecFuture, ExecOutput, ExecRequest, Transport, TransportError, TransportErrorKind,
};
use sha2::{Digest, Sha256};
use std::fmt;
use std::io::ErrorKind;
use tokio::process::Command;
use tokio::sync::OnceCell;

/// Options of the `docker` backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DockerOptions {
    /// The container's name or id.
    pub container: String,
    /// Create the container from this image when it does not exist.
    pub image: Option<String>,
}

impl DockerOptions {
    /// Parses what follows `docker` in a spec: `:NAME` or nothing, then
    /// the query (`image=IMG`).
    pub fn parse(after_name: &str, query: &str) -> Result<DockerOptions, BackendError> {
        let mut image = None;
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').ok_or_else(|| BackendError::BadValue {
                key: pair.to_owned(),
                reason: "expected key=value".into(),
            })?;
            match key {
                "image" => {
                    check_image(value)?;
                    image = Some(value.to_owned());
                }
                _ => {
                    return Err(BackendError::UnknownParam {
                        backend: "docker".into(),
                        key: key.to_owned(),
                    })
                }
            }
        }
        let container = match after_name.strip_prefix(':') {
            Some(name) => {
                check_container(name)?;
                name.to_owned()
            }
            None if after_name.is_empty() => match &image {
                Some(image) => derived_name(image),
                None => {
                    return Err(BackendError::BadValue {
                        key: "docker".into(),
                        reason:
                            "say which container: `docker:NAME` (existing), \
                                 `docker:NAME?image=IMG` or `docker?image=IMG` (created if missing)"
                                .into(),
                    })
                }
            },
            None => return Err(BackendError::Unknown(format!("docker{after_name}"))),
        };
        Ok(DockerOptions { container, image })
    }

    /// The sandbox id for records: the container and the root.
    pub fn sandbox_id(&self, root: &str) -> String {
        format!("docker-{}", short_hash(&[&self.container, root]))
    }
}

impl fmt::Display for DockerOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "docker:{}", self.container)?;
        if let Some(image) = &self.image {
            write!(f, "?image={image}")?;
        }
        Ok(())
    }
}

/// `tether-` and a hash of the image: the container `docker?image=IMG`
/// uses, the same for every client of that image.
fn derived_name(image: &str) -> String {
    format!("tether-{}", short_hash(&[image]))
}

pub(crate) fn short_hash(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for part in parts {
        h.update(part.as_bytes());
        h.update([0]);
    }
    h.finalize()[..6]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Docker's rule for names (`[a-zA-Z0-9][a-zA-Z0-9_.-]*`), which ids
/// also follow; never an option (`-…`).
fn check_container(name: &str) -> Result<(), BackendError> {
    let ok = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
        && name.len() <= 128;
    if ok {
        Ok(())
    } else {
        Err(BackendError::BadValue {
            key: "docker container".into(),
            reason: format!("{name:?} is not a container name ([a-zA-Z0-9][a-zA-Z0-9_.-]*)"),
        })
    }
}

/// An image reference: no whitespace, not an option.
fn check_image(image: &str) -> Result<(), BackendError> {
    let ok = !image.is_empty()
        && !image.starts_with('-')
        && image
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | ':' | '/' | '@'));
    if ok {
        Ok(())
    } else {
        Err(BackendError::BadValue {
            key: "image".into(),
            reason: format!("{image:?} is not an image reference"),
        })
    }
}

/// Runs execs in a docker container.
#[derive(Debug)]
pub struct DockerTransport {
    opts: DockerOptions,
    /// The container was found or made (only with `image`).
    ready: OnceCell<()>,
}

impl DockerTransport {
    /// A transport for the container `opts` names.
    pub fn new(opts: DockerOptions) -> DockerTransport {
        DockerTransport {
            opts,
            ready: OnceCell::new(),
        }
    }

    /// The container and how it is made.
    pub fn options(&self) -> &DockerOptions {
        &self.opts
    }

    /// Makes sure the container exists and runs (with `image` only; a
    /// named container without one is the user's to start).
    pub(crate) async fn ensure(&self) -> Result<(), TransportError> {
        let Some(image) = &self.opts.image else {
            return Ok(());
        };
        self.ready
            .get_or_try_init(|| ensure_container(&self.opts.container, image))
            .await
            .map(|_| ())
    }
}

impl Transport for DockerTransport {
    fn exec(&self, req: ExecRequest) -> ExecFuture<'_> {
        Box::pin(async move {
            if req.argv.is_empty() {
                return Err(TransportError {
                    kind: TransportErrorKind::Io,
                    detail: "empty argv".into(),
                });
            }
            self.ensure().await?;
            let mut cmd = Command::new("docker");
            cmd.args(["exec", "-i", &self.opts.container])
                .args(&req.argv);
            let out = docker(cmd, req.stdin).await?;
            classify(&self.opts.container, out)
        })
    }

    fn describe(&self) -> String {
        self.opts.to_string()
    }
}

/// Runs a docker CLI command; a missing CLI means no sandbox is reachable.
async fn docker(cmd: Command, stdin: Vec<u8>) -> Result<HelperOutput, TransportError> {
    run_helper(cmd, stdin).await.map_err(|e| TransportError {
        kind: if e.kind() == ErrorKind::NotFound {
            TransportErrorKind::Unreachable
        } else {
            TransportErrorKind::Io
        },
        detail: if e.kind() == ErrorKind::NotFound {
            "the docker command is not installed on this machine".into()
        } else {
            format!("cannot run docker: {e}")
        },
    })
}

/// Messages with which docker says the command never started because the
/// container or the daemon is not there.
const NOT_THERE: [&str; 6] = [
    "No such container",
    "is not running",
    "is paused",
    "Cannot connect to the Docker daemon",
    "error during connect",
    "is restarting",
];

/// Tells docker's failures from the command's exit status.
fn classify(container: &str, out: HelperOutput) -> Result<ExecOutput, TransportError> {
    if out.code != 0 {
        let err = out.stderr_text();
        let from_docker = err.starts_with("Error response from daemon:")
            || err.starts_with("Error: No such container:")
            || err.starts_with("Cannot connect to the Docker daemon")
            || err.starts_with("error during connect");
        if from_docker && out.stdout.is_empty() && NOT_THERE.iter().any(|m| err.contains(m)) {
            return Err(TransportError {
                kind: TransportErrorKind::Unreachable,
                detail: format!("container {container}: {err}"),
            });
        }
        if from_docker {
            return Err(TransportError {
                kind: TransportErrorKind::Io,
                detail: format!("container {container}: {err}"),
            });
        }
        // The runtime could not start the command: not found is 127,
        // not executable 126, as a shell would say. Docker prints this on
        // the exec's stdout (the command never wrote there), sometimes on
        // stderr: either way it becomes stderr.
        const OCI: &str = "OCI runtime exec failed";
        let message = if out.stdout.starts_with(OCI.as_bytes()) {
            Some(String::from_utf8_lossy(&out.stdout).trim().to_owned())
        } else if err.starts_with(OCI) {
            Some(err.clone())
        } else {
            None
        };
        if let Some(message) = message {
            let code = if message.contains("no such file or directory")
                || message.contains("executable file not found")
            {
                127
            } else if message.contains("permission denied") {
                126
            } else {
                return Err(TransportError {
                    kind: TransportErrorKind::Unreachable,
                    detail: format!("container {container}: {message}"),
                });
            };
            return Ok(ExecOutput {
                stdout: Vec::new(),
                stderr: format!("{message}\n").into_bytes(),
                exit_code: code,
            });
        }
    }
    Ok(ExecOutput {
        stdout: out.stdout,
        stderr: out.stderr,
        exit_code: out.code,
    })
}

/// Finds, starts or creates the container `name` (from `image`).
async fn ensure_container(name: &str, image: &str) -> Result<(), TransportError> {
    for _ in 0..3 {
        let mut inspect = Command::new("docker");
        inspect.args(["container", "inspect", "-f", "{{.State.Running}}", name]);
        let out = docker(inspect, Vec::new()).await?;
        if out.code == 0 {
            if String::from_utf8_lossy(&out.stdout).trim() == "true" {
                return Ok(());
            }
            let mut start = Command::new("docker");
            start.args(["start", name]);
            let started = docker(start, Vec::new()).await?;
            if started.code == 0 {
                return Ok(());
            }
            return Err(TransportError {
                kind: TransportErrorKind::Unreachable,
                detail: format!("cannot start container {name}: {}", started.stderr_text()),
            });
        }
        let err = out.stderr_text();
        if !err.contains("No such") {
            return Err(TransportError {
                kind: TransportErrorKind::Unreachable,
                detail: format!("cannot inspect container {name}: {err}"),
            });
        }
        let mut run = Command::new("docker");
        run.args([
            "run",
            "-d",
            "--init",
            "--name",
            name,
            "--label",
            "tether.sandbox=1",
            "--entrypoint",
            "sleep",
            image,
            "infinity",
        ]);
        let created = docker(run, Vec::new()).await?;
        if created.code == 0 {
            return Ok(());
        }
        let err = created.stderr_text();
        // Another client created it meanwhile: look again.
        if !err.contains("Conflict") && !err.contains("already in use") {
            return Err(TransportError {
                kind: TransportErrorKind::Unreachable,
                detail: format!("cannot create container {name} from {image}: {err}"),
            });
        }
    }
    Err(TransportError {
        kind: TransportErrorKind::Unreachable,
        detail: format!("container {name} keeps changing; try again"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_print() {
        let o = DockerOptions::parse(":box1", "").unwrap();
        assert_eq!(o.container, "box1");
        assert_eq!(o.image, None);
        assert_eq!(o.to_string(), "docker:box1");
        let o = DockerOptions::parse("", "image=tether-sandbox:latest").unwrap();
        assert!(o.container.starts_with("tether-"));
        assert_eq!(o.image.as_deref(), Some("tether-sandbox:latest"));
        let again = DockerOptions::parse(":x", "image=a/b:c").unwrap();
        assert_eq!(again.to_string(), "docker:x?image=a/b:c");
        assert_ne!(o.sandbox_id("/r"), again.sandbox_id("/r"));
        assert_ne!(again.sandbox_id("/r"), again.sandbox_id("/s"));
    }

    #[test]
    fn hostile_specs_are_refused() {
        for (after, query) in [
            ("", ""),
            (":-it", ""),
            (":a b", ""),
            (":", ""),
            (":x", "image=--privileged"),
            (":x", "image=a b"),
            (":x", "user=root"),
            ("x", ""),
        ] {
            assert!(
                DockerOptions::parse(after, query).is_err(),
                "{after:?} {query:?}"
            );
        }
    }

    fn helper(code: i32, stdout: &[u8], stderr: &str) -> HelperOutput {
        HelperOutput {
            stdout: stdout.to_vec(),
            stderr: stderr.as_bytes().to_vec(),
            code,
        }
    }

    #[test]
    fn docker_failures_are_transport_errors_and_exit_codes_are_not() {
        let e = classify(
            "c",
            helper(1, b"", "Error response from daemon: No such container: c\n"),
        )
        .unwrap_err();
        assert_eq!(e.kind, TransportErrorKind::Unreachable);
        let e = classify(
            "c",
            helper(
                1,
                b"",
                "Cannot connect to the Docker daemon at unix:///x. Is the docker daemon running?",
            ),
        )
        .unwrap_err();
        assert_eq!(e.kind, TransportErrorKind::Unreachable);
        let out = classify("c", helper(1, b"x", "boom")).unwrap();
        assert_eq!(out.exit_code, 1);
        // A command's own message that merely sounds like docker's.
        let out = classify("c", helper(1, b"", "Error: the service is not running")).unwrap();
        assert_eq!(out.exit_code, 1);
        let oci = "OCI runtime exec failed: exec failed: unable to start container process: \
                   exec: \"/nope\": stat /nope: no such file or directory: unknown";
        let out = classify("c", helper(126, b"", oci)).unwrap();
        assert_eq!(out.exit_code, 127);
        // Where docker really puts it: on stdout.
        let out = classify("c", helper(126, oci.as_bytes(), "")).unwrap();
        assert_eq!(out.exit_code, 127);
        assert!(out.stdout.is_empty());
        assert!(String::from_utf8_lossy(&out.stderr).contains("/nope"));
    }
}
