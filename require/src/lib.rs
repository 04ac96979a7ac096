//! # tether-require
//!
//! What a test needs of the machine it runs on — docker, a writable cgroup
//! v2, python3, sshd — probed in one place for every test crate, and what
//! happens when it is missing: the test skips *visibly* (a `SKIPPED` line
//! on the real stderr, which the test harness does not capture), unless
//! the environment variable `TETHER_REQUIRE` names the need
//! (`TETHER_REQUIRE=docker,python3,sshd`), in which case the test fails
//! with the reason. CI sets it to what its machine has, so a need that
//! disappears fails the run instead of turning it silently thinner.
//!
//! Also here, [`sshd`]: the private sshd on loopback that the ssh tests
//! of every crate start once [`Need::Sshd`] is met.

#![warn(missing_docs)]

pub mod sshd;

use std::fmt;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

/// The environment variable naming the needs that must be met.
pub const ENV: &str = "TETHER_REQUIRE";

/// Where sshd is.
pub const SSHD: &str = "/usr/sbin/sshd";

/// Something a test needs of the machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Need {
    /// A docker CLI and a reachable daemon.
    Docker,
    /// A cgroup v2 hierarchy in which this process can make a child of
    /// its own cgroup (what the agent's shim does for each cell).
    Cgroup2,
    /// A `python3` on the PATH.
    Python3,
    /// An OpenSSH server and client (the ssh tests start a private sshd).
    Sshd,
}

impl Need {
    /// Every need, in the order `TETHER_REQUIRE` lists them.
    pub const ALL: [Need; 4] = [Need::Docker, Need::Cgroup2, Need::Python3, Need::Sshd];

    /// Its name in `TETHER_REQUIRE`.
    pub fn name(self) -> &'static str {
        match self {
            Need::Docker => "docker",
            Need::Cgroup2 => "cgroup2",
            Need::Python3 => "python3",
            Need::Sshd => "sshd",
        }
    }

    /// `Ok` when the machine meets it; `Err(why not)` otherwise.
    pub fn probe(self) -> Result<(), String> {
        match self {
            Need::Docker => docker(),
            Need::Cgroup2 => cgroup2(),
            Need::Python3 => {
                if runs("python3", &["-c", "pass"]) {
                    Ok(())
                } else {
                    Err("python3 is not installed (or does not run)".into())
                }
            }
            Need::Sshd => sshd(),
        }
    }
}

impl fmt::Display for Need {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A `TETHER_REQUIRE` value that names something unknown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownNeed(pub String);

impl fmt::Display for UnknownNeed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let known: Vec<&str> = Need::ALL.iter().map(|n| n.name()).collect();
        write!(
            f,
            "{ENV} names {:?}, which is none of {}",
            self.0,
            known.join(", ")
        )
    }
}

impl std::error::Error for UnknownNeed {}

/// The needs a `TETHER_REQUIRE` value names (comma separated, blanks
/// ignored).
pub fn parse(value: &str) -> Result<Vec<Need>, UnknownNeed> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            Need::ALL
                .into_iter()
                .find(|n| n.name() == s)
                .ok_or_else(|| UnknownNeed(s.to_owned()))
        })
        .collect()
}

/// Does `TETHER_REQUIRE` name `need`?
///
/// # Panics
///
/// When `TETHER_REQUIRE` names something unknown: a typo must not turn a
/// requirement into a skip.
pub fn required(need: Need) -> bool {
    let value = std::env::var(ENV).unwrap_or_default();
    parse(&value)
        .unwrap_or_else(|e| panic!("{e}"))
        .contains(&need)
}

/// `true` when the machine meets `need`. Otherwise `test` skips: a
/// `SKIPPED <test>: <why>` line on the real stderr and `false` — or, when
/// `TETHER_REQUIRE` names `need`, a panic with the reason.
pub fn have(test: &str, need: Need) -> bool {
    match need.probe() {
        Ok(()) => true,
        Err(why) => {
            missing(test, need, &why);
            false
        }
    }
}

/// `test` cannot run because `need` is missing (`why`): a visible skip,
/// or a failure when `TETHER_REQUIRE` names `need`.
///
/// # Panics
///
/// When `TETHER_REQUIRE` names `need`.
pub fn missing(test: &str, need: Need, why: &str) {
    if required(need) {
        panic!("{test} needs {need} ({ENV} requires it), but: {why}");
    }
    skip(test, &format!("no {need}: {why}"));
}

/// Says on the real stderr (not captured by the test harness) that `test`
/// is skipped and why.
pub fn skip(test: &str, why: &str) {
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why}");
}

/// Does `program args…` run and succeed (output discarded)?
pub fn runs(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn docker() -> Result<(), String> {
    if !runs("docker", &["--version"]) {
        return Err("the docker CLI is not installed".into());
    }
    if !runs("docker", &["info"]) {
        return Err("the docker daemon is not reachable (`docker info` fails)".into());
    }
    Ok(())
}

fn sshd() -> Result<(), String> {
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

/// Can this process make a cgroup v2 child of its own cgroup?
fn cgroup2() -> Result<(), String> {
    let own = std::fs::read_to_string("/proc/self/cgroup").map_err(|e| e.to_string())?;
    let own = own
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .ok_or("no cgroup v2 line in /proc/self/cgroup (cgroup v1 only)")?
        .to_owned();
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| e.to_string())?;
    // Fields: id parent dev root mountpoint … - fstype …; a mount of a
    // subtree (root other than /) shows our cgroup with its root cut.
    let dir = mounts
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let dash = f.iter().position(|x| *x == "-")?;
            (f.get(dash + 1) == Some(&"cgroup2")).then(|| (f[3].to_owned(), f[4].to_owned()))
        })
        .find_map(|(root, mount)| {
            let rest = if root == "/" {
                own.as_str()
            } else {
                own.strip_prefix(root.as_str())?
            };
            Some(format!("{mount}{}", rest.trim_end_matches('/')))
        })
        .ok_or("no cgroup2 mount shows our cgroup")?;
    let probe = format!("{dir}/tether-probe-{}", std::process::id());
    std::fs::create_dir(&probe).map_err(|e| format!("cgroup v2 is not writable ({probe}: {e})"))?;
    let _ = std::fs::remove_dir(&probe);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_list_and_refuses_an_unknown_name() {
        assert_eq!(
            parse("docker, python3,,sshd"),
            Ok(vec![Need::Docker, Need::Python3, Need::Sshd])
        );
        assert_eq!(parse(""), Ok(vec![]));
        let err = parse("docker,pyhton3").unwrap_err();
        assert_eq!(err, UnknownNeed("pyhton3".into()));
        assert!(err.to_string().contains("python3"), "{err}");
    }

    #[test]
    fn every_need_is_named_once() {
        let names: Vec<&str> = Need::ALL.iter().map(|n| n.name()).collect();
        assert_eq!(parse(&names.join(",")), Ok(Need::ALL.to_vec()));
    }

    #[test]
    fn a_required_need_that_is_missing_fails_the_test() {
        // The only test of this crate that reads the environment.
        std::env::set_var(ENV, "sshd");
        let failed = std::panic::catch_unwind(|| missing("t", Need::Sshd, "gone"));
        let skipped = std::panic::catch_unwind(|| missing("t", Need::Docker, "gone"));
        std::env::remove_var(ENV);
        let message = failed.expect_err("a required need fails");
        let text = message
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_default();
        assert!(
            text.contains("needs sshd") && text.contains("gone"),
            "{text}"
        );
        assert!(skipped.is_ok(), "a need not required only skips");
    }
}
