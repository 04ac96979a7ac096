//! The `docker` transport: the sandbox is a container, an exec is an
//! exec of the Docker Engine API (the `bollard` crate, over the daemon's
//! socket: `DOCKER_HOST` or `/var/run/docker.sock`) with its pipes
//! attached, and the channel one such exec that stays open.
//!
//! Specs: `docker:NAME` (an existing container, by name or id),
//! `docker:NAME?image=IMG` (that container, created from IMG when it does
//! not exist, started when it is stopped) and `docker?image=IMG` (the same
//! with a name derived from the image). A created container runs
//! `sleep infinity` under docker's init (which reaps orphans) and stays
//! after tether exits: its kernels live in it, on an anonymous volume at
//! `/tmp` (the default root's place; file operations there skip the
//! container's storage driver). Remove both with `docker rm -f -v NAME`.
//!
//! Docker's failures are typed, not read from a CLI's stderr: an exec that
//! could not be created or started (no such container, container stopped
//! or paused, daemon not reachable) never ran →
//! [`TransportErrorKind::Unreachable`]; a failure once it started (the
//! connection cut mid-stream, its status unreadable) →
//! [`TransportErrorKind::Io`] (the command may have run). The exit status
//! is the exec's own, whatever the command printed. A command the runtime
//! cannot start is exit 127 (126 when it cannot be executed), as a shell
//! reports it, with docker's message on stderr.

use crate::backend::BackendError;
use crate::transport::{
    ExecFuture, ExecOutput, ExecRequest, Transport, TransportError, TransportErrorKind,
};
use bollard::container::LogOutput;
use bollard::errors::Error as EngineError;
use bollard::exec::{StartExecOptions, StartExecResults};
use bollard::models::{ContainerCreateBody, ExecConfig, HostConfig, Mount, MountType};
use bollard::query_parameters::CreateContainerOptionsBuilder;
use bollard::Docker;
use futures_util::{Stream, StreamExt};
use sha2::{Digest, Sha256};
use std::fmt;
use std::pin::Pin;
use std::time::Duration;
use tokio::io::{AsyncWrite, AsyncWriteExt};
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
    /// The Engine API client, its version agreed with the daemon on first
    /// use (a failure is tried again on the next exec).
    engine: OnceCell<Docker>,
    /// The container was found or made (only with `image`).
    ready: OnceCell<()>,
}

/// An exec that started, its pipes attached.
pub(crate) struct Attached {
    /// The exec's id (for its exit status).
    pub id: String,
    /// What it writes: stdout and stderr frames, demultiplexed.
    pub output: Pin<Box<dyn Stream<Item = Result<LogOutput, EngineError>> + Send>>,
    /// Its stdin; shut down to close it.
    pub input: Pin<Box<dyn AsyncWrite + Send>>,
}

impl DockerTransport {
    /// A transport for the container `opts` names.
    pub fn new(opts: DockerOptions) -> DockerTransport {
        DockerTransport {
            opts,
            engine: OnceCell::new(),
            ready: OnceCell::new(),
        }
    }

    /// The container and how it is made.
    pub fn options(&self) -> &DockerOptions {
        &self.opts
    }

    async fn engine(&self) -> Result<&Docker, TransportError> {
        self.engine
            .get_or_try_init(|| async {
                let cannot =
                    |e: EngineError| unreachable(format!("cannot reach the Docker daemon: {e}"));
                Docker::connect_with_defaults()
                    .map_err(cannot)?
                    .negotiate_version()
                    .await
                    .map_err(cannot)
            })
            .await
    }

    /// Makes sure the container exists and runs (with `image` only; a
    /// named container without one is the user's to start).
    async fn ensure(&self) -> Result<(), TransportError> {
        let Some(image) = &self.opts.image else {
            return Ok(());
        };
        let engine = self.engine().await?;
        self.ready
            .get_or_try_init(|| ensure_container(engine, &self.opts.container, image))
            .await
            .map(|_| ())
    }

    /// Creates and starts an exec of `argv` with stdin, stdout and stderr
    /// attached. An error means it never started.
    pub(crate) async fn start(&self, argv: &[String]) -> Result<Attached, TransportError> {
        if argv.is_empty() {
            return Err(io_error("empty argv".into()));
        }
        self.ensure().await?;
        let engine = self.engine().await?;
        let container = &self.opts.container;
        let config = ExecConfig {
            attach_stdin: Some(true),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            cmd: Some(argv.to_vec()),
            ..ExecConfig::default()
        };
        let exec = engine
            .create_exec(container, config)
            .await
            .map_err(|e| not_started(container, &e))?;
        let options = StartExecOptions {
            detach: false,
            tty: false,
            output_capacity: None,
        };
        match engine.start_exec(&exec.id, Some(options)).await {
            Ok(StartExecResults::Attached { output, input }) => Ok(Attached {
                id: exec.id,
                output,
                input,
            }),
            Ok(StartExecResults::Detached) => Err(io_error(format!(
                "container {container}: docker started the exec detached"
            ))),
            // The daemon answered and refused: nothing started.
            Err(e @ EngineError::DockerResponseServerError { .. }) => {
                Err(not_started(container, &e))
            }
            Err(e) => Err(io_error(format!("container {container}: {e}"))),
        }
    }

    /// The exit status of a finished exec, and whether its process ever
    /// started (the daemon's pid for it is 0 when the runtime could not
    /// start it). Its output ends a moment before the daemon records the
    /// status, so a still-running answer is asked again (bounded).
    async fn exit_status(&self, id: &str) -> Result<(i32, bool), TransportError> {
        let engine = self.engine().await?;
        let container = &self.opts.container;
        for _ in 0..200 {
            let info = engine
                .inspect_exec(id)
                .await
                .map_err(|e| io_error(format!("container {container}: exit status: {e}")))?;
            if info.running != Some(true) {
                let code = info
                    .exit_code
                    .and_then(|c| i32::try_from(c).ok())
                    .ok_or_else(|| {
                        io_error(format!(
                            "container {container}: the exec has no exit status"
                        ))
                    })?;
                return Ok((code, info.pid != Some(0)));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Err(io_error(format!(
            "container {container}: the exec's output ended but it still runs"
        )))
    }
}

impl Transport for DockerTransport {
    fn exec(&self, req: ExecRequest) -> ExecFuture<'_> {
        Box::pin(async move {
            let Attached {
                id,
                mut output,
                mut input,
            } = self.start(&req.argv).await?;
            let feed = async move {
                // A command that exits without reading its stdin breaks
                // the write: its exit status says what happened.
                let _ = input.write_all(&req.stdin).await;
                let _ = input.shutdown().await;
            };
            let collect = async {
                let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
                while let Some(frame) = output.next().await {
                    match frame
                        .map_err(|e| io_error(format!("container {}: {e}", self.opts.container)))?
                    {
                        LogOutput::StdOut { message } | LogOutput::Console { message } => {
                            stdout.extend_from_slice(&message);
                        }
                        LogOutput::StdErr { message } => stderr.extend_from_slice(&message),
                        LogOutput::StdIn { .. } => {}
                    }
                }
                Ok::<_, TransportError>((stdout, stderr))
            };
            let ((), collected) = tokio::join!(feed, collect);
            let (stdout, stderr) = collected?;
            let (exit_code, started) = self.exit_status(&id).await?;
            if !started {
                return not_run(&self.opts.container, &stdout);
            }
            Ok(ExecOutput {
                stdout,
                stderr,
                exit_code,
            })
        })
    }

    fn describe(&self) -> String {
        self.opts.to_string()
    }
}

fn unreachable(detail: String) -> TransportError {
    TransportError {
        kind: TransportErrorKind::Unreachable,
        detail,
    }
}

fn io_error(detail: String) -> TransportError {
    TransportError {
        kind: TransportErrorKind::Io,
        detail,
    }
}

/// An exec the daemon did not create or start: it never ran. The daemon's
/// own message when it gave one (`No such container: c`, `Container c is
/// paused, …`, `… is not running`).
fn not_started(container: &str, e: &EngineError) -> TransportError {
    let why = match e {
        EngineError::DockerResponseServerError { message, .. } => message.clone(),
        other => other.to_string(),
    };
    unreachable(format!("container {container}: {why}"))
}

/// The runtime could not start the command: docker writes why where its
/// stdout would be. Reported as a shell would: 127 for not found, 126 for
/// not executable, the message on stderr; any other reason is the
/// sandbox's (`Unreachable`: nothing ran).
fn not_run(container: &str, docker_said: &[u8]) -> Result<ExecOutput, TransportError> {
    let message = String::from_utf8_lossy(docker_said).trim().to_owned();
    let code = if message.contains("no such file or directory")
        || message.contains("executable file not found")
    {
        127
    } else if message.contains("permission denied") {
        126
    } else {
        return Err(unreachable(format!(
            "container {container}: the command did not start: {message}"
        )));
    };
    Ok(ExecOutput {
        stdout: Vec::new(),
        stderr: format!("{message}\n").into_bytes(),
        exit_code: code,
    })
}

/// Where a container tether creates mounts an anonymous volume.
pub const SCRATCH_VOLUME: &str = "/tmp";

/// Finds, starts or creates the container `name` (from `image`).
async fn ensure_container(engine: &Docker, name: &str, image: &str) -> Result<(), TransportError> {
    let server_status = |e: &EngineError| match e {
        EngineError::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    };
    for _ in 0..3 {
        match engine.inspect_container(name, None).await {
            Ok(info) => {
                if info.state.and_then(|s| s.running) == Some(true) {
                    return Ok(());
                }
                return engine
                    .start_container(name, None)
                    .await
                    .map_err(|e| unreachable(format!("cannot start container {name}: {e}")));
            }
            Err(e) if server_status(&e) == Some(404) => {}
            Err(e) => return Err(unreachable(format!("cannot inspect container {name}: {e}"))),
        }
        let config = ContainerCreateBody {
            image: Some(image.to_owned()),
            entrypoint: Some(vec!["sleep".into()]),
            cmd: Some(vec!["infinity".into()]),
            labels: Some([("tether.sandbox".to_owned(), "1".to_owned())].into()),
            host_config: Some(HostConfig {
                init: Some(true),
                // `/tmp` (where the default root lives) on a volume of its
                // own: the agent's journal, records and shell snapshots
                // (dozens of file operations a cell) skip the container's
                // storage driver, which on fuse-overlayfs cost 15 ms of
                // its daemon's CPU a warm cell against 1 ms on a volume.
                // A volume, unlike a tmpfs, outlives `docker restart`.
                mounts: Some(vec![Mount {
                    target: Some(SCRATCH_VOLUME.to_owned()),
                    typ: Some(MountType::VOLUME),
                    ..Mount::default()
                }]),
                ..HostConfig::default()
            }),
            ..ContainerCreateBody::default()
        };
        let options = CreateContainerOptionsBuilder::new().name(name).build();
        match engine.create_container(Some(options), config).await {
            // Started on the next turn (inspect sees it stopped).
            Ok(_) => {}
            // Another client created it meanwhile: look again.
            Err(e) if server_status(&e) == Some(409) => {}
            Err(e) => {
                return Err(unreachable(format!(
                    "cannot create container {name} from {image}: {e}"
                )))
            }
        }
    }
    Err(unreachable(format!(
        "container {name} keeps changing; try again"
    )))
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

    #[test]
    fn a_command_the_runtime_could_not_start_reads_as_a_shell_would_say_it() {
        let oci = "OCI runtime exec failed: exec failed: unable to start container process: \
                   exec: \"/nope\": stat /nope: no such file or directory: unknown\r\n";
        let out = not_run("c", oci.as_bytes()).unwrap();
        assert_eq!(out.exit_code, 127);
        assert!(out.stdout.is_empty());
        assert!(String::from_utf8_lossy(&out.stderr).contains("/nope"));
        let denied = "OCI runtime exec failed: exec failed: unable to start container process: \
                      exec: \"/etc/passwd\": permission denied: unknown\r\n";
        assert_eq!(not_run("c", denied.as_bytes()).unwrap().exit_code, 126);
        let other = "OCI runtime exec failed: exec failed: cgroup gone: unknown";
        let e = not_run("c", other.as_bytes()).unwrap_err();
        assert_eq!(e.kind, TransportErrorKind::Unreachable);
        assert!(e.detail.contains("cgroup gone"), "{e}");
    }
}
