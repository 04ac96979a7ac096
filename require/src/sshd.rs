//! A private OpenSSH server on a free loopback port, for the ssh
//! backend's tests: its own temporary host key, a temporary client key
//! in its `authorized_keys`, a `known_hosts` with its host key (so the
//! client checks it strictly), and a config file of its own. Nothing of
//! the system's ssh configuration is read or changed. Killed when dropped.

use crate::SSHD;
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running sshd.
#[derive(Debug)]
pub struct Sshd {
    child: Child,
    dir: tempfile::TempDir,
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// The user to log in as (the current one).
    pub user: String,
}

fn keygen(path: &std::path::Path) {
    let status = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "tether-live", "-f"])
        .arg(path)
        .stdin(Stdio::null())
        .status()
        .expect("run ssh-keygen");
    assert!(status.success(), "ssh-keygen failed");
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    listener.local_addr().expect("local addr").port()
}

impl Sshd {
    /// Starts one and waits (bounded) until it accepts connections.
    ///
    /// # Panics
    ///
    /// When it cannot start (the caller checked [`crate::Need::Sshd`]).
    pub fn start() -> Sshd {
        let dir = tempfile::Builder::new()
            .prefix("tether-sshd")
            .tempdir()
            .expect("tempdir");
        let host_key = dir.path().join("host_key");
        let client_key = dir.path().join("client_key");
        keygen(&host_key);
        keygen(&client_key);
        let pubkey = std::fs::read_to_string(client_key.with_extension("pub")).expect("pubkey");
        std::fs::write(dir.path().join("authorized_keys"), pubkey).expect("authorized_keys");
        // Privilege separation needs this directory when sshd runs as root
        // (the package creates it only when its service starts).
        let _ = std::fs::create_dir_all("/run/sshd");
        let user = String::from_utf8(
            Command::new("id")
                .arg("-un")
                .output()
                .expect("id -un")
                .stdout,
        )
        .expect("user name")
        .trim()
        .to_owned();
        for _attempt in 0..3 {
            let port = free_port();
            let config = dir.path().join("sshd_config");
            std::fs::write(
                &config,
                format!(
                    "ListenAddress 127.0.0.1:{port}\n\
                     HostKey {host}\n\
                     AuthorizedKeysFile {keys}\n\
                     PidFile {dir}/sshd.pid\n\
                     PermitRootLogin prohibit-password\n\
                     PubkeyAuthentication yes\n\
                     PasswordAuthentication no\n\
                     KbdInteractiveAuthentication no\n\
                     UsePAM no\n\
                     StrictModes no\n\
                     MaxStartups 64\n\
                     MaxSessions 64\n\
                     LogLevel VERBOSE\n",
                    host = host_key.display(),
                    keys = dir.path().join("authorized_keys").display(),
                    dir = dir.path().display(),
                ),
            )
            .expect("sshd_config");
            let log = std::fs::File::create(dir.path().join("sshd.log")).expect("log");
            let mut child = Command::new(SSHD)
                .args(["-D", "-e", "-f"])
                .arg(&config)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("start sshd");
            let until = Instant::now() + Duration::from_secs(10);
            loop {
                if let Ok(Some(_)) = child.try_wait() {
                    break; // exited: the port was taken, or the config is bad
                }
                if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    let host_pub =
                        std::fs::read_to_string(host_key.with_extension("pub")).expect("host pub");
                    let mut fields = host_pub.split_whitespace();
                    let line = format!(
                        "[127.0.0.1]:{port} {} {}\n",
                        fields.next().unwrap_or_default(),
                        fields.next().unwrap_or_default()
                    );
                    std::fs::write(dir.path().join("known_hosts"), line).expect("known_hosts");
                    return Sshd {
                        child,
                        dir,
                        port,
                        user,
                    };
                }
                if Instant::now() > until {
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        panic!(
            "sshd did not start; its log:\n{}",
            std::fs::read_to_string(dir.path().join("sshd.log")).unwrap_or_default()
        );
    }

    /// The client's private key.
    pub fn key(&self) -> PathBuf {
        self.dir.path().join("client_key")
    }

    /// The known-hosts file holding this server's key.
    pub fn known_hosts(&self) -> PathBuf {
        self.dir.path().join("known_hosts")
    }

    /// The backend spec that reaches it (its masters' control sockets in
    /// [`Sshd::control_dir`]).
    pub fn spec(&self) -> String {
        format!(
            "ssh:{}@127.0.0.1:{}?key={}&known_hosts={}&control_dir={}",
            self.user,
            self.port,
            self.key().display(),
            self.known_hosts().display(),
            self.control_dir().display()
        )
    }

    /// Where the masters of [`Sshd::spec`] keep their control sockets.
    pub fn control_dir(&self) -> PathBuf {
        self.dir.path().join("ctl")
    }

    /// How many ssh connections it authenticated so far (sessions on a
    /// connection are not counted, nor is the readiness probe's bare TCP
    /// connection).
    pub fn connections(&self) -> usize {
        self.log()
            .lines()
            .filter(|l| l.starts_with("Accepted publickey for "))
            .count()
    }

    /// Pids of its processes that each serve one connection (its
    /// listener's children).
    pub fn connection_pids(&self) -> Vec<u32> {
        let listener = self.child.id();
        let mut pids = Vec::new();
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            // Fields after the last `)`: state, ppid, …
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            if ppid == Some(listener) {
                pids.push(pid);
            }
        }
        pids
    }

    /// The pid of the multiplexing master listening on each control
    /// socket in [`Sshd::control_dir`] (as `ssh -O check` reports it).
    pub fn masters(&self) -> Vec<u32> {
        let Ok(entries) = std::fs::read_dir(self.control_dir()) else {
            return Vec::new();
        };
        let mut pids = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_some() {
                continue; // its lock and log
            }
            let out = Command::new("ssh")
                .arg("-S")
                .arg(&path)
                .args(["-O", "check", "tether-master"])
                .stdin(Stdio::null())
                .output();
            let Ok(out) = out else { continue };
            let said = String::from_utf8_lossy(&out.stderr).into_owned();
            if let Some(pid) = said
                .split("pid=")
                .nth(1)
                .and_then(|rest| rest.split(')').next())
                .and_then(|p| p.parse().ok())
            {
                pids.push(pid);
            }
        }
        pids
    }

    /// What sshd logged so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("sshd.log")).unwrap_or_default()
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        for pid in self.masters() {
            let _ = Command::new("kill").arg(pid.to_string()).status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
