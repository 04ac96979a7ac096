//! Which backends can run on this machine, and a clear line when a test
//! skips because one can't.
//!
//! A backend is skipped only when it truly cannot run here: the docker CLI
//! or daemon is absent, the OpenSSH server or client is not installed,
//! Modal credentials are not set. Anything else that is missing (the
//! `tether-sandbox` image when docker runs) is a failure that says how to
//! fix it.

use tether_require::{runs, Need};

/// The docker image the docker tests start containers from.
pub const IMAGE: &str = "tether-sandbox:latest";

pub use tether_require::skip;

/// `Ok` when docker can run containers here; `Err(why not)` otherwise.
///
/// # Panics
///
/// When docker runs but the image is missing: that is a setup step not
/// done (`scripts/setup`), not a reason to skip.
pub fn docker() -> Result<(), String> {
    Need::Docker.probe()?;
    assert!(
        runs("docker", &["image", "inspect", IMAGE]),
        "docker runs but the image {IMAGE} is missing: run scripts/setup (or scripts/docker-image)"
    );
    Ok(())
}

/// `Ok` when this machine gives cells their own cgroup (cgroup v2 with our
/// cgroup writable), as the agent's shim will find it; `Err(why not)`.
pub fn local_cell_cgroups() -> Result<(), String> {
    Need::Cgroup2.probe()
}

pub use tether_require::SSHD;

/// `Ok` when a private sshd can be started here; `Err(why not)` otherwise.
pub fn sshd() -> Result<(), String> {
    Need::Sshd.probe()
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
