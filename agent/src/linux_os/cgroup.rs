//! A cell's own cgroup (cgroup v2 only): the one trace of a cell process
//! that survives `setsid`, `env -i` and its shim being killed, since every
//! process stays in its parent's cgroup unless moved.
//!
//! The shim makes the cell's cgroup as a child of its own (found from the
//! cgroup2 mount in `/proc/self/mountinfo`, which may be
//! `/sys/fs/cgroup/unified` on a hybrid system, and the `0::` line of
//! `/proc/self/cgroup`) and opens the directory and its `cgroup.procs`.
//! The main process is born inside it with `clone3(CLONE_INTO_CGROUP)`
//! (see [`crate::linux_os::spawn_into`]); where the kernel refuses that,
//! the forked child writes `0` to `cgroup.procs` before it execs (see
//! [`enter`]). Anything
//! failing (no cgroup2, a read-only `/sys/fs/cgroup` as in docker, EBUSY
//! from the no-internal-processes rule) means no cgroup: the cell runs as
//! without one, found by its shim's tree, session and marker.
//!
//! A Python cell's cgroup is made the same way by the interpreter's shim,
//! which moves the running interpreter into it ([`CellCgroup::admit`])
//! before handing it the cell and back to its own cgroup ([`own_procs`],
//! [`move_into`]) when the cell is done.

use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use tether_core::agent::{OsError, Pid};

/// `f_type` of a cgroup2 file system (`CGROUP2_SUPER_MAGIC`).
const CGROUP2_SUPER_MAGIC: u64 = 0x6367_7270;

/// A cell cgroup the shim made, with its directory open (for
/// `CLONE_INTO_CGROUP`) and its `cgroup.procs` open for writing.
#[derive(Debug)]
pub(crate) struct CellCgroup {
    /// Its directory.
    pub(crate) path: String,
    dir: OwnedFd,
    procs: OwnedFd,
}

impl CellCgroup {
    /// Makes the cgroup `name` under the caller's own cgroup (an existing
    /// one of that name is used as it is) and opens its `cgroup.procs`.
    pub(crate) fn create(name: &str) -> Result<CellCgroup, String> {
        if name.is_empty() || name.contains('/') || name == "." || name == ".." {
            return Err(format!("bad cgroup name {name:?}"));
        }
        let parent = own_dir().ok_or("no cgroup v2 hierarchy holds this process")?;
        let dir = parent.join(name);
        let path = dir
            .to_str()
            .ok_or("the cgroup path is not UTF-8")?
            .to_owned();
        match rustix::fs::mkdir(&dir, rustix::fs::Mode::from_raw_mode(0o755)) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(format!("mkdir {path}: {e}")),
        }
        use rustix::fs::OFlags;
        let open = |file: &Path, flags: OFlags| {
            rustix::fs::open(file, flags | OFlags::CLOEXEC, rustix::fs::Mode::empty())
                .map_err(|e| format!("open {}: {e}", file.display()))
        };
        let opened = open(&dir, OFlags::RDONLY | OFlags::DIRECTORY)
            .and_then(|d| open(&dir.join("cgroup.procs"), OFlags::WRONLY).map(|procs| (d, procs)));
        match opened {
            Ok((dir, procs)) => Ok(CellCgroup { path, dir, procs }),
            Err(e) => {
                let _ = rustix::fs::rmdir(&dir);
                Err(e)
            }
        }
    }

    /// The descriptor a forked child hands to [`enter`].
    pub(crate) fn procs_fd(&self) -> RawFd {
        self.procs.as_raw_fd()
    }

    /// The cgroup's directory, as `clone3`'s `cgroup` argument wants it.
    pub(crate) fn dir_fd(&self) -> RawFd {
        self.dir.as_raw_fd()
    }

    /// Gives the cgroup up (closes the descriptors, removes the directory
    /// if it is empty).
    pub(crate) fn discard(self) {
        let CellCgroup { path, dir, procs } = self;
        drop((dir, procs));
        let _ = remove(&path);
    }

    /// Moves the running process `pid` (all its threads) into the cgroup;
    /// what it forks from then on is born inside.
    pub(crate) fn admit(&self, pid: Pid) -> Result<(), String> {
        move_into(&self.procs, pid).map_err(|e| format!("{}: {e}", self.path))
    }
}

/// Moves the calling process into the cgroup whose `cgroup.procs` is open
/// as `procs_fd`: writes `0` to it. Meant for a forked child before it
/// execs, so nothing the child ever runs starts outside the cgroup. Only
/// `write(2)`: async-signal-safe, no allocation. Errors are ignored (the
/// cell then simply has no members in its cgroup).
pub(crate) fn enter(procs_fd: RawFd) {
    // SAFETY: writing one byte from a static buffer to a descriptor we
    // were handed; write(2) is async-signal-safe.
    unsafe {
        libc::write(procs_fd, b"0".as_ptr().cast(), 1);
    }
}

/// Moves process `pid` into the cgroup whose `cgroup.procs` is open as
/// `procs` (writes its pid there).
pub(crate) fn move_into(procs: &OwnedFd, pid: Pid) -> Result<(), String> {
    let text = pid.to_string();
    match rustix::io::write(procs, text.as_bytes()) {
        Ok(n) if n == text.len() => Ok(()),
        Ok(_) => Err(format!("short write moving pid {pid}")),
        Err(e) => Err(format!("moving pid {pid}: {e}")),
    }
}

/// The calling process's own cgroup's `cgroup.procs`, open for writing
/// (where the Python interpreter shim moves its interpreter back to after
/// each cell).
pub(crate) fn own_procs() -> Result<OwnedFd, String> {
    let dir = own_dir().ok_or("no cgroup v2 hierarchy holds this process")?;
    let flags = rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::CLOEXEC;
    rustix::fs::open(dir.join("cgroup.procs"), flags, rustix::fs::Mode::empty())
        .map_err(|e| format!("open {}/cgroup.procs: {e}", dir.display()))
}

/// The processes listed in `{path}/cgroup.procs`, sorted (pids that our
/// PID namespace cannot see, listed as 0, are left out). Empty when it
/// cannot be read.
pub(crate) fn members(path: &str) -> Vec<Pid> {
    let Ok(text) = std::fs::read_to_string(Path::new(path).join("cgroup.procs")) else {
        return Vec::new();
    };
    let mut pids: Vec<Pid> = text
        .lines()
        .filter_map(|l| l.trim().parse::<Pid>().ok())
        .filter(|&p| p > 0)
        .collect();
    pids.sort_unstable();
    pids.dedup();
    pids
}

/// Removes the cgroup at `path` (`rmdir`; only an empty one goes). Absent
/// is fine; a directory that is not on a cgroup2 file system is refused.
pub(crate) fn remove(path: &str) -> Result<(), OsError> {
    match rustix::fs::statfs(path) {
        Ok(st) if st.f_type as u64 == CGROUP2_SUPER_MAGIC => {}
        Ok(_) => return Err(OsError::Other(format!("{path} is not a cgroup"))),
        Err(rustix::io::Errno::NOENT) => return Ok(()),
        Err(e) => return Err(OsError::Other(format!("statfs {path}: {e}"))),
    }
    match rustix::fs::rmdir(path) {
        Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
        Err(rustix::io::Errno::BUSY) | Err(rustix::io::Errno::NOTEMPTY) => Err(OsError::Other(
            format!("cgroup {path} still has processes or children"),
        )),
        Err(rustix::io::Errno::ACCESS) | Err(rustix::io::Errno::PERM) => {
            Err(OsError::PermissionDenied)
        }
        Err(e) => Err(OsError::Other(format!("rmdir {path}: {e}"))),
    }
}

/// The directory of the calling process's own cgroup v2, if there is a
/// cgroup2 mount that shows it.
pub(crate) fn own_dir() -> Option<PathBuf> {
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let own = own_path(&cgroup)?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    dir_in_mounts(&mountinfo, own)
}

/// Our path in the v2 hierarchy: the `0::PATH` line of `/proc/self/cgroup`.
fn own_path(proc_cgroup: &str) -> Option<&str> {
    proc_cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .filter(|p| p.starts_with('/') && !p.ends_with(" (deleted)"))
}

/// Where cgroup `own` is visible: under the first cgroup2 mount whose root
/// holds it.
fn dir_in_mounts(mountinfo: &str, own: &str) -> Option<PathBuf> {
    for line in mountinfo.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(dash) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        if fields.get(dash + 1) != Some(&"cgroup2") || dash < 5 {
            continue;
        }
        let root = unescape(fields[3]);
        let mount = unescape(fields[4]);
        let rest = if root == "/" {
            Some(own)
        } else {
            own.strip_prefix(root.as_str())
                .filter(|r| r.is_empty() || r.starts_with('/'))
        };
        if let Some(rest) = rest {
            let mut dir = PathBuf::from(OsString::from_vec(mount.into_bytes()));
            for part in rest.split('/').filter(|p| !p.is_empty()) {
                dir.push(part);
            }
            return Some(dir);
        }
    }
    None
}

/// Undoes mountinfo's octal escapes (`\040` for a space, …).
fn unescape(field: &str) -> String {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let digits = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        if let (b'\\', Some(d)) = (b[i], digits) {
            let v = d.iter().fold(0u32, |acc, c| acc * 8 + u32::from(c - b'0'));
            if let Ok(v) = u8::try_from(v) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_our_cgroup_under_the_cgroup2_mount() {
        let mounts = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n\
                      40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd\n\
                      41 31 0:38 / /sys/fs/cgroup/unified rw,relatime shared:9 - cgroup2 cgroup2 rw\n";
        let own = own_path("9:name=systemd:/\n1:cpu:/\n0::/a/b\n").unwrap();
        assert_eq!(own, "/a/b");
        assert_eq!(
            dir_in_mounts(mounts, own),
            Some(PathBuf::from("/sys/fs/cgroup/unified/a/b"))
        );
        assert_eq!(
            dir_in_mounts(mounts, "/"),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        // A mount of a sub-tree (a container's view), with an escaped space.
        let sub = "50 1 0:40 /docker/x /sys/fs/cg\\040v2 rw - cgroup2 cgroup2 rw\n";
        assert_eq!(
            dir_in_mounts(sub, "/docker/x/y"),
            Some(PathBuf::from("/sys/fs/cg v2/y"))
        );
        assert_eq!(dir_in_mounts(sub, "/docker/xy"), None);
        assert_eq!(own_path("1:cpu:/\n"), None, "cgroup v1 only");
        let v1 = mounts.lines().take(2).collect::<Vec<_>>().join("\n");
        assert_eq!(dir_in_mounts(&v1, "/"), None, "no cgroup2 mount");
    }
}
