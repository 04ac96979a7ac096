//! The one ssh connection per host that every exec and channel of the
//! `ssh` backend shares: an OpenSSH `ControlMaster`, started on first use
//! and again whenever its socket stops answering, and kept by
//! `ControlPersist` for an idle period after the last session, so the
//! next `tether` command finds it warm.
//!
//! Sessions go over the master's control socket with the `openssh`
//! crate's native multiplexing client: no `ssh` process per exec.
//!
//! The control socket lives in a private directory (mode 0700, owned by
//! this user): `control_dir=PATH` from the spec, else
//! `$XDG_RUNTIME_DIR/tether-ssh`, else `/tmp/tether-ssh-UID`. Its name is a
//! hash of everything that picks the connection (user, host, port, key,
//! known-hosts file), so two specs that differ in any of them never share
//! a master. A lock file beside it keeps two `tether` processes from
//! starting two masters on one socket.

use crate::docker::short_hash;
use crate::ssh::SshOptions;
use crate::transport::{TransportError, TransportErrorKind};
use openssh::{Session, Stdio};
use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The longest control socket path this accepts: `sun_path` is 108 bytes
/// and ssh binds a temporary name 17 bytes longer first.
const MAX_SOCKET_PATH: usize = 90;

/// A remote command started over the master.
pub(crate) type RemoteChild = openssh::Child<Arc<Session>>;

/// The master of one host's connection.
#[derive(Debug)]
pub(crate) struct Master {
    /// The control socket, or why there can be none.
    ctl: Result<PathBuf, String>,
    /// The `ssh` options that make the connection (without the control
    /// options, the separator and the host).
    connect_args: Vec<String>,
    host: String,
    persist_secs: u64,
    starting: tokio::sync::Mutex<()>,
    /// Masters this process started (each a new connection).
    started: AtomicU64,
}

impl Master {
    /// The master for `opts` (nothing is started yet).
    pub(crate) fn new(opts: &SshOptions, connect_args: Vec<String>) -> Master {
        let ctl = control_dir(opts.control_dir.as_deref()).and_then(|dir| {
            let key = connect_args.join("\0") + "\0" + &opts.host;
            let path = dir.join(format!("m-{}", short_hash(&[&key])));
            if path.as_os_str().len() > MAX_SOCKET_PATH {
                return Err(format!(
                    "the ssh control socket path {} is too long for a unix socket; \
                     set control_dir=PATH to a shorter directory",
                    path.display()
                ));
            }
            Ok(path)
        });
        Master {
            ctl,
            connect_args,
            host: opts.host.clone(),
            persist_secs: opts.persist.as_secs().max(1),
            starting: tokio::sync::Mutex::new(()),
            started: AtomicU64::new(0),
        }
    }

    /// How many masters (connections) this process started.
    pub(crate) fn started(&self) -> u64 {
        self.started.load(Ordering::Relaxed)
    }

    /// The control socket's path.
    pub(crate) fn control_path(&self) -> Result<&Path, TransportError> {
        self.ctl.as_deref().map_err(|why| TransportError {
            kind: TransportErrorKind::Unreachable,
            detail: format!("ssh {}: {why}", self.host),
        })
    }

    /// Starts `remote` (one string for the remote login shell) in a new
    /// session on the master, with its stdin, stdout and stderr piped;
    /// starts the master first when its socket does not answer. An error
    /// before the session exists means the command did not run
    /// ([`TransportErrorKind::Unreachable`]) unless the master answered
    /// and still refused the session ([`TransportErrorKind::Io`]).
    pub(crate) async fn spawn(&self, remote: &str) -> Result<RemoteChild, TransportError> {
        let ctl = self.control_path()?.to_owned();
        match self.try_spawn(&ctl, remote).await {
            Ok(child) => return Ok(child),
            Err(e) if answers(&ctl) => {
                return Err(TransportError {
                    kind: TransportErrorKind::Io,
                    detail: format!("ssh {}: the connection refused a session: {e}", self.host),
                })
            }
            Err(_) => {}
        }
        self.start(&ctl).await?;
        self.try_spawn(&ctl, remote)
            .await
            .map_err(|e| TransportError {
                kind: TransportErrorKind::Io,
                detail: format!("ssh {}: no session on a new connection: {e}", self.host),
            })
    }

    async fn try_spawn(&self, ctl: &Path, remote: &str) -> Result<RemoteChild, openssh::Error> {
        let session = Arc::new(Session::resume_mux(ctl.into(), None));
        Session::to_raw_command(session, remote)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .await
    }

    /// Starts the master unless someone (this process or another) just
    /// did. Returns once its socket answers, or with why it could not
    /// connect.
    async fn start(&self, ctl: &Path) -> Result<(), TransportError> {
        let _one_here = self.starting.lock().await;
        if answers(ctl) {
            return Ok(());
        }
        let unreachable = |detail: String| TransportError {
            kind: TransportErrorKind::Unreachable,
            detail: format!("ssh {}: {detail}", self.host),
        };
        let lock_path = ctl.with_extension("lock");
        let _one_anywhere = tokio::task::spawn_blocking(move || lock_file(&lock_path))
            .await
            .map_err(|e| unreachable(format!("cannot lock the control socket: {e}")))?
            .map_err(|e| unreachable(format!("cannot lock the control socket: {e}")))?;
        if answers(ctl) {
            return Ok(());
        }
        // A socket that does not answer belongs to a master that died:
        // ssh will not bind over it.
        let _ = std::fs::remove_file(ctl);
        let log = ctl.with_extension("log");
        let _ = std::fs::remove_file(&log);
        self.started.fetch_add(1, Ordering::Relaxed);
        let status = tokio::process::Command::new("ssh")
            .args(&self.connect_args)
            .args(["-N", "-f", "-o", "ControlMaster=yes", "-o"])
            .arg(format!("ControlPath={}", ctl.display()))
            .arg("-o")
            .arg(format!("ControlPersist={}", self.persist_secs))
            .arg("-E")
            .arg(&log)
            .args(["--", &self.host])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .status()
            .await
            .map_err(|e| {
                let hint = if e.kind() == ErrorKind::NotFound {
                    " (install the OpenSSH client)"
                } else {
                    ""
                };
                unreachable(format!("cannot run the ssh client{hint}: {e}"))
            })?;
        let said = std::fs::read_to_string(&log).unwrap_or_default();
        let said = said.trim();
        if status.success() && answers(ctl) {
            return Ok(());
        }
        // The master runs no command: whatever failed, nothing ran.
        Err(unreachable(format!(
            "cannot connect (ssh exit {}): {}",
            status.code().unwrap_or(-1),
            if said.is_empty() {
                "ssh said nothing"
            } else {
                said
            }
        )))
    }
}

/// Whether a master listens on `ctl`.
fn answers(ctl: &Path) -> bool {
    UnixStream::connect(ctl).is_ok()
}

/// Holds an exclusive lock on `path` until the file is dropped.
fn lock_file(path: &Path) -> std::io::Result<std::fs::File> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)?;
    rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)?;
    Ok(file)
}

/// The private directory for control sockets; created if missing.
fn control_dir(explicit: Option<&Path>) -> Result<PathBuf, String> {
    let uid = rustix::process::getuid().as_raw();
    let dir = match explicit {
        Some(dir) => dir.to_owned(),
        None => match std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
            Some(run) if run.is_absolute() => run.join("tether-ssh"),
            _ => PathBuf::from(format!("/tmp/tether-ssh-{uid}")),
        },
    };
    match std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
    {
        Ok(()) => {}
        Err(e) => return Err(format!("cannot create {}: {e}", dir.display())),
    }
    let meta = std::fs::symlink_metadata(&dir)
        .map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o077 != 0 {
        return Err(format!(
            "the ssh control directory {} is not a private directory of this user \
             (it must be owned by uid {uid} with mode 0700); set control_dir=PATH",
            dir.display()
        ));
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn opts(dir: &Path) -> SshOptions {
        let mut o = SshOptions::parse("u@h:22", "").unwrap();
        o.control_dir = Some(dir.to_owned());
        o
    }

    #[test]
    fn the_control_directory_is_created_private_and_a_shared_one_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ctl");
        let m = Master::new(&opts(&dir), vec!["-p".into(), "22".into()]);
        let ctl = m.control_path().unwrap();
        assert!(ctl.starts_with(&dir));
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let m = Master::new(&opts(&dir), Vec::new());
        let e = m.control_path().unwrap_err();
        assert_eq!(e.kind, TransportErrorKind::Unreachable);
        assert!(e.detail.contains("not a private directory"), "{e}");
    }

    #[test]
    fn specs_that_pick_another_connection_get_another_socket_and_long_paths_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ctl");
        let a = Master::new(&opts(&dir), vec!["-p".into(), "22".into()]);
        let b = Master::new(&opts(&dir), vec!["-p".into(), "23".into()]);
        assert_ne!(a.control_path().unwrap(), b.control_path().unwrap());
        let deep = tmp.path().join("d".repeat(100));
        let e = Master::new(&opts(&deep), Vec::new())
            .control_path()
            .unwrap_err();
        assert!(e.detail.contains("control_dir=PATH"), "{e}");
    }
}
