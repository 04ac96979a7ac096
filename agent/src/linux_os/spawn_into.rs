//! Starting a shell cell's main process, born inside the cell's cgroup.
//!
//! Why `clone3(CLONE_INTO_CGROUP)` (Linux 5.7+): the alternative, a
//! forked child writing `0` to the cgroup's `cgroup.procs` before it execs,
//! is a migration. A migration takes the kernel's
//! `cgroup_threadgroup_rwsem` for writing, and that waits for an RCU grace
//! period unless another migration happened just before: about 10 ms
//! (measured) for every cell when cells come a round trip apart. With
//! `CLONE_INTO_CGROUP` the child is created in the cgroup (given as an
//! `O_DIRECTORY` descriptor of its directory), so nothing migrates, and
//! it is a member before it runs a single instruction.
//!
//! Where the kernel refuses `clone3` (older than 5.7 or 5.3: `ENOSYS`,
//! `E2BIG`, `EINVAL`; a container's seccomp filter: `ENOSYS`, `EPERM`; or
//! anything else it might say about the cgroup), the child is forked and
//! writes `0` to `cgroup.procs` before it execs, as before (see
//! [`cgroup::enter`]). Without a cell cgroup it is a plain fork.
//!
//! The child is a copy of the shim and may only make async-signal-safe
//! calls: everything it needs (the program's candidate paths, argv, envp
//! with the cell's marker, `/dev/null`, the pipes) is built before the
//! clone, and the child only makes raw system calls (see [`child`]). An
//! exec failure comes back through a close-on-exec pipe, as with std's
//! `Command`, so the caller still gets "cannot start …".

use crate::linux_os::cgroup::{self, CellCgroup};
use crate::linux_os::spawn::reset_signal_dispositions;
use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use tether_core::agent::{no_tty, Pid};

/// `CLONE_INTO_CGROUP` (include/uapi/linux/sched.h); not in every target
/// of the `libc` crate.
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// `struct clone_args` up to its `cgroup` field
/// (`CLONE_ARGS_SIZE_VER2`, 88 bytes); the kernel takes its size as the
/// second argument.
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// How the child gets into the cell's cgroup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Entry {
    /// `clone3(CLONE_INTO_CGROUP)`, falling back to [`Entry::Write`] when
    /// the kernel refuses it.
    Clone3,
    /// fork, then the child writes `0` to `cgroup.procs` (a migration).
    /// What [`Entry::Clone3`] falls back to; only tests ask for it
    /// directly.
    Write,
}

/// The main process of a cell, to start.
pub(crate) struct MainProcess<'a> {
    /// argv; `argv[0]` is the program, looked up in `PATH` when it has
    /// no `/` (as `execvp` does).
    pub(crate) argv: &'a [String],
    /// The cell's env marker `(name, value)`, added to our environment.
    pub(crate) marker: (&'a str, &'a str),
    /// More `(name, value)` pairs that replace ours (tool calls, PATH).
    pub(crate) env: &'a [(String, String)],
    /// Becomes the child's stdout.
    pub(crate) stdout: OwnedFd,
    /// Becomes the child's stderr.
    pub(crate) stderr: OwnedFd,
}

/// Everything the child uses, made before the clone (the child allocates
/// nothing).
struct Prepared {
    /// Paths to try with execve, in order.
    candidates: Vec<CString>,
    /// Kept alive for the pointer arrays below.
    _argv: Vec<CString>,
    _envp: Vec<CString>,
    argv_ptrs: Vec<*const libc::c_char>,
    envp_ptrs: Vec<*const libc::c_char>,
    devnull: OwnedFd,
    stdout: OwnedFd,
    stderr: OwnedFd,
}

/// Starts `main` in a new session with stdin on `/dev/null` and the
/// environment defaults of [`no_tty`] where unset, inside
/// `group` when there is one, and returns its pid (a child of ours, to be
/// reaped by the caller). Errors are "cannot start …" messages.
pub(crate) fn start(
    main: MainProcess<'_>,
    group: Option<&CellCgroup>,
    entry: Entry,
) -> Result<Pid, String> {
    start_via(main, group, entry).map(|(pid, _)| pid)
}

/// [`start`], also saying how the child got into `group` (`None`: no
/// group).
fn start_via(
    main: MainProcess<'_>,
    group: Option<&CellCgroup>,
    entry: Entry,
) -> Result<(Pid, Option<Entry>), String> {
    let program = main.argv.first().map_or("", String::as_str).to_owned();
    let fail = |e: io::Error| format!("cannot start {program}: {e}");
    let prepared = prepare(main).map_err(fail)?;
    // Reports the child's exec errno; close-on-exec, so a successful exec
    // shows up as EOF.
    let (report_r, report_w) =
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| fail(e.into()))?;
    let (pid, via) = spawn(&prepared, group, entry, report_w.as_raw_fd()).map_err(fail)?;
    drop(report_w);
    drop(prepared); // our copies of the child's stdio
    match read_errno(&report_r) {
        None => Ok((pid, via)),
        Some(errno) => {
            // The child has exited (127); reap it here.
            let _ = rustix::process::waitpid(
                rustix::process::Pid::from_raw(pid as i32),
                rustix::process::WaitOptions::empty(),
            );
            Err(fail(io::Error::from_raw_os_error(errno)))
        }
    }
}

/// Builds the child's arguments, environment, candidate paths and stdio.
fn prepare(main: MainProcess<'_>) -> io::Result<Prepared> {
    let cstring = |b: &[u8]| {
        CString::new(b).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "nul byte"))
    };
    let program = main.argv.first().map_or("", String::as_str);
    let argv = main
        .argv
        .iter()
        .map(|a| cstring(a.as_bytes()))
        .collect::<io::Result<Vec<_>>>()?;
    let (key, value) = main.marker;
    let mut envp = Vec::new();
    for (k, v) in std::env::vars_os() {
        let replaced = main
            .env
            .iter()
            .any(|(name, _)| name.as_bytes() == k.as_bytes());
        if k.as_bytes() != key.as_bytes() && !replaced {
            envp.push(cstring(&[k.as_bytes(), b"=", v.as_bytes()].concat())?);
        }
    }
    envp.push(cstring(format!("{key}={value}").as_bytes())?);
    for (name, value) in main.env {
        envp.push(cstring(format!("{name}={value}").as_bytes())?);
    }
    for (name, value) in no_tty::missing_defaults(|name| std::env::var_os(name).is_some()) {
        envp.push(cstring(format!("{name}={value}").as_bytes())?);
    }
    let candidates = if program.contains('/') {
        vec![cstring(program.as_bytes())?]
    } else if program.is_empty() {
        return Err(io::ErrorKind::NotFound.into());
    } else {
        // execvp's search: each PATH entry, an empty one meaning ".".
        let path = std::env::var_os("PATH");
        let path = path.as_deref().unwrap_or(OsStr::new("/bin:/usr/bin"));
        path.as_bytes()
            .split(|&b| b == b':')
            .map(|dir| {
                let dir = if dir.is_empty() { b"." as &[u8] } else { dir };
                cstring(&[dir, b"/", program.as_bytes()].concat())
            })
            .collect::<io::Result<Vec<_>>>()?
    };
    let devnull = rustix::fs::open(
        "/dev/null",
        rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?;
    let nul_terminated = |v: &[CString]| {
        let mut p: Vec<*const libc::c_char> = v.iter().map(|c| c.as_ptr()).collect();
        p.push(std::ptr::null());
        p
    };
    Ok(Prepared {
        argv_ptrs: nul_terminated(&argv),
        envp_ptrs: nul_terminated(&envp),
        candidates,
        _argv: argv,
        _envp: envp,
        devnull: above_stdio(devnull)?,
        stdout: above_stdio(main.stdout)?,
        stderr: above_stdio(main.stderr)?,
    })
}

/// The descriptor itself, or a close-on-exec copy of it numbered 3 or
/// more, so that the child's `dup2`s onto 0, 1 and 2 never overwrite a
/// source they still need.
fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    Ok(rustix::io::fcntl_dupfd_cloexec(&fd, 3)?)
}

/// Clones (or forks) the child; returns its pid in the parent, and how it
/// entered `group`. The child never returns from here.
fn spawn(
    p: &Prepared,
    group: Option<&CellCgroup>,
    entry: Entry,
    report: RawFd,
) -> io::Result<(Pid, Option<Entry>)> {
    let mut enter = None;
    if let Some(group) = group {
        if entry == Entry::Clone3 {
            let args = CloneArgs {
                flags: CLONE_INTO_CGROUP,
                exit_signal: libc::SIGCHLD as u64,
                cgroup: group.dir_fd() as u64,
                ..CloneArgs::default()
            };
            // SAFETY: without CLONE_VM this is a fork (the child gets a
            // copy of our memory and runs on its copy of this stack), with
            // a valid, fully initialised clone_args of the size we pass.
            let ret = unsafe {
                libc::syscall(
                    libc::SYS_clone3,
                    &args as *const CloneArgs,
                    std::mem::size_of::<CloneArgs>(),
                )
            };
            match ret {
                0 => child(p, None, report),
                pid if pid > 0 => return Ok((pid as Pid, Some(Entry::Clone3))),
                // Refused (see the module doc): migrate instead.
                _ => {}
            }
        }
        enter = Some(group.procs_fd());
    }
    let via = enter.map(|_| Entry::Write);
    // SAFETY: the child only runs `child`, which is async-signal-safe.
    match unsafe { libc::fork() } {
        0 => child(p, enter, report),
        pid if pid > 0 => Ok((pid as Pid, via)),
        _ => Err(io::Error::last_os_error()),
    }
}

/// The child, from the clone to the exec. Every call here is a plain
/// system call on memory prepared before the clone (write, setsid, dup2,
/// fcntl, sigaction, sigprocmask, execve, _exit): async-signal-safe, no
/// allocation, no lock. It never returns.
fn child(p: &Prepared, enter: Option<RawFd>, report: RawFd) -> ! {
    // SAFETY: raw system calls on descriptors and NUL-terminated arrays
    // that stay alive in our copy of the parent's memory.
    unsafe {
        if let Some(procs_fd) = enter {
            cgroup::enter(procs_fd);
        }
        // Its own session and process group: the cell's pgid is its pid.
        if libc::setsid() < 0 {
            give_up(report);
        }
        // The sources are all 3 or above (see `above_stdio`), so dup2 makes
        // fresh descriptors 0, 1, 2 without close-on-exec.
        for (from, to) in [
            (p.devnull.as_raw_fd(), 0),
            (p.stdout.as_raw_fd(), 1),
            (p.stderr.as_raw_fd(), 2),
        ] {
            if libc::dup2(from, to) < 0 {
                give_up(report);
            }
        }
        // What std's Command did for us: SIGPIPE back to its default (the
        // Rust runtime ignores it in the shim, and an ignored signal
        // survives exec: `yes | head` would never end) and an empty signal
        // mask. Every other disposition is reset too, as for the shim
        // itself (see `spawn::reset_signal_dispositions`).
        reset_signal_dispositions();
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        // execvp's search over the prepared paths: a missing one moves on,
        // EACCES is remembered, anything else stops.
        let mut denied = false;
        for path in &p.candidates {
            libc::execve(path.as_ptr(), p.argv_ptrs.as_ptr(), p.envp_ptrs.as_ptr());
            match *libc::__errno_location() {
                libc::EACCES => denied = true,
                libc::ENOENT | libc::ENOTDIR | libc::ELOOP | libc::ENAMETOOLONG => {}
                _ => break,
            }
        }
        if denied {
            *libc::__errno_location() = libc::EACCES;
        }
        give_up(report)
    }
}

/// Sends errno to the parent and exits 127 (async-signal-safe).
fn give_up(report: RawFd) -> ! {
    // SAFETY: errno read, write(2) of four bytes on the stack, _exit(2).
    unsafe {
        let errno = (*libc::__errno_location()).to_ne_bytes();
        libc::write(report, errno.as_ptr().cast(), errno.len());
        libc::_exit(127)
    }
}

/// The errno the child sent before it gave up, or `None` once the pipe
/// reaches EOF (the exec closed it).
fn read_errno(report: &OwnedFd) -> Option<i32> {
    let mut buf = [0u8; 4];
    let mut got = 0;
    while got < buf.len() {
        match rustix::io::read(report, &mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => break,
        }
    }
    (got == buf.len()).then(|| i32::from_ne_bytes(buf))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::process::{waitpid, WaitOptions};

    /// Runs `argv` as a cell's main process and returns how it entered
    /// `group`, its pid, its exit code and its stdout.
    fn run(
        argv: &[&str],
        group: Option<&CellCgroup>,
        entry: Entry,
    ) -> (Option<Entry>, Pid, i32, String) {
        let argv: Vec<String> = argv.iter().map(|a| a.to_string()).collect();
        let cloexec = rustix::pipe::PipeFlags::CLOEXEC;
        let (out_r, out_w) = rustix::pipe::pipe_with(cloexec).unwrap();
        let (_err_r, err_w) = rustix::pipe::pipe_with(cloexec).unwrap();
        let main = MainProcess {
            argv: &argv,
            marker: ("TETHER_SPAWN_TEST", "m-1"),
            env: &[],
            stdout: out_w,
            stderr: err_w,
        };
        let (pid, via) = start_via(main, group, entry).unwrap();
        let mut out = Vec::new();
        std::io::Read::read_to_end(&mut std::fs::File::from(out_r), &mut out).unwrap();
        let status = waitpid(
            rustix::process::Pid::from_raw(pid as i32),
            WaitOptions::empty(),
        )
        .unwrap()
        .unwrap()
        .1;
        let code = status.exit_status().unwrap_or(-1);
        (via, pid, code, String::from_utf8(out).unwrap())
    }

    fn group(tag: &str) -> Option<CellCgroup> {
        let name = format!("tether-test-{tag}-{}", std::process::id());
        match CellCgroup::create(&name) {
            Ok(g) => Some(g),
            Err(why) => {
                eprintln!("skipped: cgroup v2 is not writable here: {why}");
                None
            }
        }
    }

    /// The program's first read is `/proc/self/cgroup`: it names the
    /// cell's cgroup whichever way the child got in.
    fn first_instruction_in(entry: Entry, tag: &str) -> Option<Entry> {
        let group = group(tag)?;
        let (via, _, code, out) = run(&["cat", "/proc/self/cgroup"], Some(&group), entry);
        assert_eq!(code, 0);
        let line = out.lines().find(|l| l.starts_with("0::")).unwrap();
        assert!(
            line.ends_with(&format!("/{}", group.path.rsplit('/').next().unwrap())),
            "{out}"
        );
        let path = group.path.clone();
        group.discard(); // empty once the child is reaped
        assert!(!std::path::Path::new(&path).exists(), "{path} stayed");
        via
    }

    #[test]
    fn main_process_is_in_the_cell_cgroup_from_its_first_instruction() {
        let Some(via) = first_instruction_in(Entry::Clone3, "clone3") else {
            return;
        };
        // clone3(CLONE_INTO_CGROUP) needs Linux 5.7 and no seccomp filter
        // against clone3; only then is it what got the child in.
        assert_eq!(
            via,
            if clone3_into_cgroup_available() {
                Entry::Clone3
            } else {
                Entry::Write
            }
        );
    }

    /// clone3 is there (a NULL, size-0 call fails with EINVAL rather than
    /// ENOSYS or EPERM) and the kernel is 5.7 or newer.
    fn clone3_into_cgroup_available() -> bool {
        // SAFETY: with size 0 the kernel rejects the call before reading.
        let ret = unsafe { libc::syscall(libc::SYS_clone3, std::ptr::null::<CloneArgs>(), 0) };
        let probe = io::Error::last_os_error().raw_os_error();
        let release = rustix::system::uname()
            .release()
            .to_string_lossy()
            .into_owned();
        let mut numbers = release
            .split(|c: char| !c.is_ascii_digit())
            .map(|n| n.parse::<u32>().unwrap_or(0));
        let version = (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0));
        ret < 0 && probe == Some(libc::EINVAL) && version >= (5, 7)
    }

    #[test]
    fn the_fallback_moves_the_child_in_before_it_execs() {
        if let Some(via) = first_instruction_in(Entry::Write, "write") {
            assert_eq!(via, Entry::Write);
        }
    }

    #[test]
    fn without_a_cgroup_it_is_a_session_leader_with_the_marker_and_default_signals() {
        let (via, pid, code, out) = run(
            &[
                "cat",
                "/proc/self/stat",
                "/proc/self/status",
                "/proc/self/environ",
            ],
            None,
            Entry::Clone3,
        );
        assert_eq!((via, code), (None, 0));
        let stat = out.lines().next().unwrap();
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        let fields: Vec<&str> = after.split(' ').collect();
        // state ppid pgrp session: pgid and sid are its own pid.
        assert_eq!(
            (fields[2], fields[3]),
            (&*pid.to_string(), &*pid.to_string())
        );
        // No standard signal ignored (our SIGPIPE, ignored by the Rust
        // runtime, is not handed on; real-time ones are left as they
        // were, as std does), nothing blocked.
        let mask = |name: &str| {
            let line = out.lines().find(|l| l.starts_with(name)).unwrap();
            u64::from_str_radix(line[name.len()..].trim(), 16).unwrap()
        };
        assert_eq!(mask("SigIgn:") & 0x7fff_ffff, 0, "{out}");
        assert_eq!(mask("SigBlk:"), 0, "{out}");
        assert!(out.contains("TETHER_SPAWN_TEST=m-1\0"), "{out}");
    }

    #[test]
    fn stdin_is_dev_null() {
        let (_, _, code, out) = run(&["readlink", "/proc/self/fd/0"], None, Entry::Clone3);
        assert_eq!((code, out.trim()), (0, "/dev/null"));
    }

    #[test]
    fn a_program_that_cannot_be_executed_is_reported() {
        for (program, entry) in [
            ("/nonexistent/prog", Entry::Clone3),
            ("tether-no-such-program", Entry::Clone3),
            ("tether-no-such-program", Entry::Write),
            ("/dev/null", Entry::Clone3),
        ] {
            let group = group(&format!("noexec-{entry:?}"));
            let (_, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).unwrap();
            let (_, w2) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).unwrap();
            let argv = vec![program.to_owned()];
            let main = MainProcess {
                argv: &argv,
                marker: ("TETHER_SPAWN_TEST", "x"),
                env: &[],
                stdout: w,
                stderr: w2,
            };
            let err = start(main, group.as_ref(), entry).unwrap_err();
            let why = if program == "/dev/null" {
                "Permission denied"
            } else {
                "No such file or directory"
            };
            assert!(
                err.starts_with(&format!("cannot start {program}: {why}")),
                "{err}"
            );
            if let Some(g) = group {
                let path = g.path.clone();
                g.discard(); // the failed child was reaped: the group is empty
                assert!(!std::path::Path::new(&path).exists(), "{path} stayed");
            }
        }
    }
}
