//! Which backends can run on this machine, and a clear line when a test
//! skips because one can't.
//!
//! A backend is skipped only when it truly cannot run here: the docker CLI
//! or daemon is absent, the OpenSSH server or client is not installed,
//! Modal credentials are not set. Anything else that is missing (the
//! `tether-sandbox` image when docker runs) is a failure that says how to
//! fix it.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

/// The docker image the docker tests start containers from.
pub const IMAGE: &str = "tether-sandbox:latest";

/// Says, on the real stderr (not captured by the test harness), that
/// `test` is skipped and why.
pub fn skip(test: &str, why: &str) {
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why}");
}

fn runs(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `Ok` when docker can run containers here; `Err(why not)` otherwise.
///
/// # Panics
///
/// When docker runs but the image is missing: that is a setup step not
/// done (`scripts/setup`), not a reason to skip.
pub fn docker() -> Result<(), String> {
    if !runs("docker", &["--version"]) {
        return Err("the docker CLI is not installed".into());
    }
    if !runs("docker", &["info"]) {
        return Err("the docker daemon is not reachable (`docker info` fails)".into());
    }
    assert!(
        runs("docker", &["image", "inspect", IMAGE]),
        "docker runs but the image {IMAGE} is missing: run scripts/setup (or scripts/docker-image)"
    );
    Ok(())
}

/// `Ok` when this machine gives cells their own cgroup (cgroup v2 with our
/// cgroup writable), as the agent's shim will find it; `Err(why not)`.
pub fn local_cell_cgroups() -> Result<(), String> {
    let own = std::fs::read_to_string("/proc/self/cgroup").map_err(|e| e.to_string())?;
    let own = own
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .ok_or("cgroup v1 only (no 0:: line in /proc/self/cgroup)")?
        .trim_end_matches('/')
        .to_owned();
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| e.to_string())?;
    // Fields: id parent dev root mountpoint … - fstype …; a root other
    // than / would need our path cut, which the shim does: treat as none.
    let mount = mounts
        .lines()
        .map(|l| l.split(' ').collect::<Vec<_>>())
        .find(|f| {
            let dash = f.iter().position(|x| *x == "-");
            dash.is_some_and(|d| f.get(d + 1) == Some(&"cgroup2")) && f.get(3) == Some(&"/")
        })
        .and_then(|f| f.get(4).map(|m| m.to_string()))
        .ok_or("no cgroup2 mount of the whole hierarchy")?;
    let probe = format!("{mount}{own}/tether-live-probe-{}", std::process::id());
    std::fs::create_dir(&probe).map_err(|e| format!("cgroup v2 is not writable ({probe}: {e})"))?;
    let _ = std::fs::remove_dir(&probe);
    Ok(())
}

/// Where sshd is.
pub const SSHD: &str = "/usr/sbin/sshd";

/// `Ok` when a private sshd can be started here; `Err(why not)` otherwise.
pub fn sshd() -> Result<(), String> {
    if !Path::new(SSHD).is_file() {
        return Err(format!(
            "{SSHD} is not installed (Debian package openssh-server; scripts/setup installs it)"
        ));
    }
    for tool in ["ssh", "ssh-keygen"] {
        if !runs("sh", &["-c", &format!("command -v {tool}")]) {
            return Err(format!(
                "{tool} is not installed (Debian package openssh-client)"
            ));
        }
    }
    Ok(())
}

/// `Ok` when Modal credentials are in the environment.
pub fn modal() -> Result<(), String> {
    let set = |v: &str| std::env::var_os(v).is_some_and(|x| !x.is_empty());
    if set("MODAL_TOKEN_ID") && set("MODAL_TOKEN_SECRET") {
        Ok(())
    } else {
        Err(
            "MODAL_TOKEN_ID / MODAL_TOKEN_SECRET are not set, so no Modal sandbox can be reached"
                .into(),
        )
    }
}
