//! A throwaway docker container from [`crate::backends::IMAGE`], removed
//! (with everything in it) when dropped.

use crate::backends::IMAGE;
use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// A running container.
#[derive(Debug)]
pub struct Container {
    /// Its name.
    pub name: String,
    /// Whether its PID 1 is an init that reaps orphans (`--init`).
    pub init: bool,
}

impl Container {
    /// Starts one (`docker run -d --init … sleep infinity`), named after
    /// `label`, this process and a counter.
    ///
    /// # Panics
    ///
    /// When docker refuses (the caller checked [`crate::backends::docker`]).
    pub fn start(label: &str) -> Container {
        Container::start_with(label, true)
    }

    /// As [`Container::start`]; without `init`, PID 1 is `sleep` itself,
    /// which never reaps an orphan (as in many real containers).
    ///
    /// # Panics
    ///
    /// When docker refuses.
    pub fn start_with(label: &str, init: bool) -> Container {
        static N: AtomicU32 = AtomicU32::new(0);
        let label: String = label
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .take(40)
            .collect();
        let name = format!(
            "tether-live-{label}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        run(&name, init);
        Container { name, init }
    }

    /// The backend spec that reaches it.
    pub fn spec(&self) -> String {
        format!("docker:{}", self.name)
    }

    /// Runs `sh -c script` in it as root (for test setup), returning
    /// stdout.
    ///
    /// # Panics
    ///
    /// When the script fails.
    pub fn sh(&self, script: &str) -> String {
        let out = Command::new("docker")
            .args(["exec", &self.name, "sh", "-c", script])
            .stdin(Stdio::null())
            .output()
            .expect("run docker exec");
        assert!(
            out.status.success(),
            "docker exec {script:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Removes it now (also done on drop).
    pub fn remove(&self) {
        let _ = Command::new("docker")
            .args(["rm", "-f", "-v", &self.name])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        self.remove();
    }
}

/// `docker run -d [--init] --name NAME … sleep infinity`.
fn run(name: &str, init: bool) {
    let out = Command::new("docker")
        .args(["run", "-d"])
        .args(init.then_some("--init"))
        .args(["--name", name, "--label", "tether.live=1"])
        .args(["--entrypoint", "sleep", IMAGE, "infinity"])
        .stdin(Stdio::null())
        .output()
        .expect("run docker");
    assert!(
        out.status.success(),
        "docker run {IMAGE}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Stops every process of the container `name` at once (`docker kill`:
/// the machine dies) and returns how many lines each file directly in
/// `dir` held then, read from the dead machine's disk: nothing runs any
/// more that could add one, and nothing reads them again (the files go
/// with [`replace`]). A missing `dir` holds nothing. Blocking.
///
/// # Panics
///
/// When docker refuses the kill.
pub fn kill_and_count_lines(name: &str, dir: &str) -> BTreeMap<String, usize> {
    let out = Command::new("docker")
        .args(["kill", name])
        .stdin(Stdio::null())
        .output()
        .expect("run docker kill");
    assert!(
        out.status.success(),
        "docker kill {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let copy = tempfile::tempdir().expect("a temporary directory");
    let dest = copy.path().join("dir");
    let copied = Command::new("docker")
        .args(["cp", &format!("{name}:{dir}")])
        .arg(&dest)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let mut counts = BTreeMap::new();
    let entries = copied
        .then(|| std::fs::read_dir(&dest).ok())
        .flatten()
        .into_iter()
        .flatten()
        .flatten();
    for entry in entries {
        let Ok(bytes) = std::fs::read(entry.path()) else {
            continue;
        };
        let lines = bytes.iter().filter(|b| **b == b'\n').count();
        counts.insert(entry.file_name().to_string_lossy().into_owned(), lines);
    }
    counts
}

/// Replaces the container `name` by a new one of the same name (a new
/// machine at the same address: processes and files gone, another boot).
/// Blocking.
///
/// # Panics
///
/// When docker refuses.
pub fn replace(name: &str, init: bool) {
    let _ = Command::new("docker")
        .args(["rm", "-f", "-v", name])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    run(name, init);
}

/// Restarts the container `name` (`docker restart -t 0`: processes
/// killed, files kept, pids reused). Blocking.
///
/// # Panics
///
/// When docker refuses.
pub fn restart(name: &str) {
    let out = Command::new("docker")
        .args(["restart", "-t", "0", name])
        .stdin(Stdio::null())
        .output()
        .expect("run docker restart");
    assert!(
        out.status.success(),
        "docker restart {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Freezes every process of the container `name` (`docker pause`: the
/// cgroup freezer). Blocking.
pub fn pause(name: &str) {
    docker_must(&["pause", name]);
}

/// Thaws the container `name` (`docker unpause`). Blocking.
pub fn unpause(name: &str) {
    docker_must(&["unpause", name]);
}

fn docker_must(args: &[&str]) {
    let out = Command::new("docker")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run docker");
    assert!(
        out.status.success(),
        "docker {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}
