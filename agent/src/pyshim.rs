//! The Python kernel's interpreter shim (`tether-agent shim` with a Python
//! launch): the IO driver of [`InterpShim`], which decides everything
//! (which cell runs next, tombstones, cgroup record, what the output and
//! the reports mean, the outcome and the loss, leftovers, linger). Here:
//! starting `python3` with the bootstrap of `tether_core::agent::python`
//! (stdin, stdout, stderr and the report pipe on fd 3), making each cell's
//! cgroup and moving the interpreter in and out of it (see
//! [`crate::linux_os::cgroup`]), writing to its stdin, reading its pipes
//! and reaping.

use crate::linux_os::cgroup::{self, CellCgroup};
use crate::linux_os::LinuxOs;
use crate::shim::{raw, read_pipes, to_exit, Pipe};
use rustix::io::Errno;
use rustix::process::{wait, WaitOptions};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use tether_core::agent::{CellLaunch, InterpShim, InterpStep, Os, Pid};
use tether_core::protocol::Stream;

use tether_core::agent::shim::{LINGER_MS, PUMP_MS};

/// The interpreter's descriptors, as the shim holds them.
struct Fds {
    stdin: Option<OwnedFd>,
    /// stdout, stderr and (at [`REPORTS`]) the report pipe.
    pipes: Vec<Pipe>,
}

/// The index of the report pipe in [`Fds::pipes`].
const REPORTS: usize = 2;

pub(crate) fn run(launch: CellLaunch) -> u8 {
    let mut os = LinuxOs::new();
    let kernel_dir = launch.kernel_dir.clone();
    let mut shim = InterpShim::new(launch);
    // Where the interpreter goes back to between cells: the shim's own
    // cgroup (none: cells get no cgroup).
    let home = cgroup::own_procs().ok();
    let mut fds = Fds {
        stdin: None,
        pipes: Vec::new(),
    };
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match shim.poll_step(&mut os) {
            InterpStep::StartInterpreter { argv, marker } => {
                let env = crate::call::cell_env(&kernel_dir, Vec::new());
                let started = start(&argv, &marker, &env).map(|(pid, f)| {
                    fds = f;
                    (pid, os.process(pid).map_or(0, |p| p.starttime))
                });
                if let Err(e) = &started {
                    eprintln!("tether-agent shim (python): {e}");
                }
                shim.handle_interpreter(started);
            }
            InterpStep::EnterCgroup { name, pid } => {
                let made = home.as_ref().and_then(|_| CellCgroup::create(&name).ok());
                let made = made.and_then(|g| match g.admit(pid) {
                    Ok(()) => Some(g),
                    Err(_) => {
                        g.discard();
                        None
                    }
                });
                let path = made.as_ref().map(|g| g.path.clone());
                if !shim.handle_cgroup(&mut os, path) {
                    if let (Some(g), Some(home)) = (made, home.as_ref()) {
                        let _ = cgroup::move_into(home, pid);
                        g.discard();
                    }
                }
            }
            InterpStep::Send { line } => {
                let sent = fds
                    .stdin
                    .as_ref()
                    .is_some_and(|fd| rustix::io::write(fd, &line).is_ok_and(|n| n == line.len()));
                if !sent {
                    fds.stdin = None;
                }
                shim.handle_sent(sent);
            }
            InterpStep::Pump => {
                read(&mut os, &mut shim, &mut fds, &mut buf, PUMP_MS);
                reap(&mut shim);
            }
            InterpStep::Drain => {
                // Up to a bound: a flooding writer cannot hold the cell.
                for _ in 0..64 {
                    if !read(&mut os, &mut shim, &mut fds, &mut buf, 0) {
                        break;
                    }
                }
            }
            InterpStep::LeaveCgroup { path, pid } => {
                let Some(home) = home.as_ref() else { continue };
                if let Err(e) = cgroup::move_into(home, pid) {
                    if cgroup::members(&path).contains(&pid) {
                        eprintln!(
                            "tether-agent shim (python): the interpreter stays in {path}: {e}"
                        );
                    }
                }
            }
            InterpStep::CloseInput => {
                fds.stdin = None;
                if let Some(p) = fds.pipes.get_mut(REPORTS) {
                    p.fd = None;
                }
            }
            InterpStep::Linger => {
                if fds.pipes.iter().any(|p| p.fd.is_some()) {
                    read(&mut os, &mut shim, &mut fds, &mut buf, LINGER_MS);
                    if reap(&mut shim) {
                        while read(&mut os, &mut shim, &mut fds, &mut buf, 0) {}
                        shim.handle_tree_empty(&mut os);
                    }
                } else if reap(&mut shim) {
                    shim.handle_tree_empty(&mut os);
                } else {
                    // Stay until the tree is empty (leftovers remain our
                    // descendants), looking again every LINGER_MS: the
                    // machine's end of the tree if the kernel's directory
                    // went.
                    std::thread::sleep(std::time::Duration::from_millis(LINGER_MS));
                }
            }
            InterpStep::Exit(code) => return code,
        }
    }
}

fn pipe() -> Result<(OwnedFd, OwnedFd), String> {
    rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| format!("pipe: {e}"))
}

/// Starts the interpreter in a new session, the report pipe on its fd 3.
fn start(
    argv: &[String],
    marker: &(String, String),
    env: &[(String, String)],
) -> Result<(Pid, Fds), String> {
    let (program, rest) = argv.split_first().ok_or("empty argv")?;
    let (in_r, in_w) = pipe()?;
    let (out_r, out_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    let (ctl_r, ctl_w) = pipe()?;
    let ctl_fd = ctl_w.as_raw_fd();
    let shim = rustix::process::getpid();
    let mut cmd = Command::new(program);
    cmd.args(rest)
        .env(&marker.0, &marker.1)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::from(in_r))
        .stdout(Stdio::from(out_w))
        .stderr(Stdio::from(err_w));
    // SAFETY: setsid, signal, dup2 and fcntl are async-signal-safe;
    // nothing is allocated in the child.
    unsafe {
        cmd.pre_exec(move || {
            rustix::process::setsid()?;
            // The interpreter dies with its shim, at whatever point of
            // its start: a shim killed while a fresh interpreter still
            // started (a wrapper such as pyenv's shim first, then the
            // imports), the first cell already in its pipe, left an
            // interpreter that ran that cell for nobody, its processes
            // out of every shutdown's reach (python_orphans seed 1079).
            // The bootstrap's own look at its parent covers an
            // interpreter a forking wrapper starts. The shim is single
            // threaded: the signal follows the shim, not a thread of it.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if rustix::process::getppid() != Some(shim) {
                // Gone before the signal was armed.
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            // SIGINT ignored until the bootstrap takes it (its handler
            // raises KeyboardInterrupt only while a cell runs): the shim
            // hands the first cell over while the interpreter may still
            // be starting, and a cancel then killed it (python's default
            // handler, or none yet) with the fresh namespace. An ignored
            // disposition survives the exec; python keeps it until the
            // bootstrap sets its own.
            libc::signal(libc::SIGINT, libc::SIG_IGN);
            if ctl_fd == 3 {
                let flags = libc::fcntl(3, libc::F_GETFD);
                libc::fcntl(3, libc::F_SETFD, flags & !libc::FD_CLOEXEC);
            } else if libc::dup2(ctl_fd, 3) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {program}: {e}"))?;
    drop(cmd);
    drop(ctl_w);
    let pid = child.id();
    drop(child);
    let pipe = |fd, stream| Pipe {
        fd: Some(fd),
        stream,
    };
    let fds = Fds {
        stdin: Some(in_w),
        pipes: vec![
            pipe(out_r, Stream::Stdout),
            pipe(err_r, Stream::Stderr),
            // Its stream tag is unused.
            pipe(ctl_r, Stream::Stdout),
        ],
    };
    Ok((pid, fds))
}

/// Waits up to `ms` for output or reports and hands the shim what is
/// there. True if anything was read.
fn read(os: &mut LinuxOs, shim: &mut InterpShim, fds: &mut Fds, buf: &mut [u8], ms: u64) -> bool {
    read_pipes(&mut fds.pipes, buf, ms, |i, stream, data| match data {
        Some(data) if i == REPORTS => shim.handle_report(data),
        Some(data) => {
            if let Err(e) = shim.handle_output(os, stream, data) {
                eprintln!("tether-agent shim (python): cannot journal output: {e}");
            }
        }
        None if i == REPORTS => {}
        None => shim.handle_eof(stream),
    })
}

/// `waitpid(-1, WNOHANG)` until nothing is left to reap. True when the
/// shim has no child left at all.
fn reap(shim: &mut InterpShim) -> bool {
    loop {
        match wait(WaitOptions::NOHANG) {
            Ok(Some((pid, status))) => shim.handle_exit(raw(pid), to_exit(status)),
            Ok(None) => return false,
            Err(Errno::INTR) => {}
            Err(_) => return true,
        }
    }
}
