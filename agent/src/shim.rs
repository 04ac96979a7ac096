//! `tether-agent shim --launch JSON`: one cell's shim, the IO driver of
//! [`CellShim`] (every decision is there: tombstone, cgroup record,
//! completion, leftovers, result/leftovers/done, linger, cgroup removal).
//! Here: a child subreaper that makes the cell's cgroup (see
//! [`crate::linux_os::cgroup`]), starts the main process in a new session
//! with the env marker, born in that cgroup (`clone3`), reads its stdout
//! and stderr pipes, and runs the `waitpid(-1)` loop itself. While it
//! lingers after the cell resolved it keeps reading the pipes (their bytes
//! go to the kernel's background log), so a background job never writes
//! to a closed pipe. A Python launch goes to [`crate::pyshim`].

use crate::linux_os::cgroup::CellCgroup;
use crate::linux_os::spawn_into::{self, Entry, MainProcess};
use crate::linux_os::LinuxOs;
use rustix::event::{poll, PollFd, PollFlags};
use rustix::io::Errno;
use rustix::process::{wait, WaitOptions, WaitStatus};
use std::ffi::OsString;
use std::os::fd::OwnedFd;
use tether_core::agent::{CellLaunch, CellShim, ExitStatus, Os, Pid, ShimStep};
use tether_core::protocol::Stream;

use tether_core::agent::shim::{LINGER_MS, PUMP_MS};
/// The same while lingering (only background jobs are left).
/// Reads of one final pass at most (a flooding writer cannot hold it).
const FINAL_READS: usize = 64;

pub(crate) fn run(args: &[OsString]) -> u8 {
    let Some(json) = crate::flag(args, "--launch") else {
        eprintln!("tether-agent shim: --launch JSON is required");
        return 2;
    };
    let launch: CellLaunch = match serde_json::from_str(&json) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("tether-agent shim: bad --launch: {e}");
            return 2;
        }
    };
    if let Err(e) = rustix::process::set_child_subreaper(Some(rustix::process::getpid())) {
        eprintln!("tether-agent shim: cannot become a child subreaper: {e}");
    }
    if launch.lang == tether_core::protocol::Lang::Python {
        return crate::pyshim::run(launch);
    }
    let kernel_dir = launch.kernel_dir.clone();
    drive(LinuxOs::new(), CellShim::new(launch), kernel_dir)
}

fn drive(mut os: LinuxOs, mut shim: CellShim, shim_kernel_dir: String) -> u8 {
    let mut group: Option<CellCgroup> = None;
    let mut pipes: Vec<Pipe> = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match shim.poll_step(&mut os) {
            ShimStep::MakeCgroup { name } => {
                // None (silently: the cell runs as before) when cgroup v2
                // is not there or not writable.
                let made = CellCgroup::create(&name).ok();
                let path = made.as_ref().map(|g| g.path.clone());
                if shim.handle_cgroup(&mut os, path) {
                    group = made;
                } else if let Some(g) = made {
                    g.discard();
                }
            }
            ShimStep::Start {
                argv, marker, env, ..
            } => {
                let env = crate::call::cell_env(&shim_kernel_dir, env);
                let started = start(&argv, &marker, &env, group.take().as_ref()).map(|(pid, p)| {
                    pipes = p;
                    (pid, os.process(pid).map_or(0, |p| p.starttime))
                });
                if let Err(message) = &started {
                    eprintln!("tether-agent shim: {message}");
                }
                shim.handle_started(&mut os, started);
            }
            ShimStep::Pump => {
                let main_running = shim.main_pid().is_some();
                if pipes.iter().all(|p| p.fd.is_none()) && main_running {
                    // Nothing left to read: look for exits (the main one
                    // ends the cell; an orphan is just reaped) at the pump's
                    // pace, so tool calls are still seen.
                    std::thread::sleep(std::time::Duration::from_millis(PUMP_MS));
                } else {
                    let ms = shim
                        .poll_timeout(os.now())
                        .map_or(PUMP_MS, |t| {
                            t.as_millis().saturating_sub(os.now().as_millis())
                        })
                        .min(PUMP_MS);
                    read_ready(&mut os, &mut shim, &mut pipes, &mut buf, ms);
                }
                reap(&mut os, &mut shim);
            }
            ShimStep::FinalRead => final_read(&mut os, &mut shim, &mut pipes, &mut buf),
            ShimStep::Retry => {
                // The journal is behind: read and reap until it is time
                // to write it again.
                let ms = shim
                    .poll_timeout(os.now())
                    .map_or(PUMP_MS, |t| {
                        t.as_millis().saturating_sub(os.now().as_millis())
                    })
                    .min(PUMP_MS);
                read_ready(&mut os, &mut shim, &mut pipes, &mut buf, ms);
                reap(&mut os, &mut shim);
            }
            ShimStep::Linger => {
                if pipes.iter().any(|p| p.fd.is_some()) {
                    read_ready(&mut os, &mut shim, &mut pipes, &mut buf, LINGER_MS);
                    if reap(&mut os, &mut shim) {
                        final_read(&mut os, &mut shim, &mut pipes, &mut buf);
                        shim.handle_tree_empty(&mut os);
                    }
                } else if reap(&mut os, &mut shim) {
                    shim.handle_tree_empty(&mut os);
                } else {
                    // Stay until the tree is empty (leftovers remain our
                    // descendants), looking again every LINGER_MS: the
                    // machine's paced look for orphans, and its end of the
                    // tree if the kernel's directory went.
                    std::thread::sleep(std::time::Duration::from_millis(LINGER_MS));
                }
            }
            ShimStep::Exit(code) => return code,
        }
    }
}

/// One pipe of the main process.
pub(crate) struct Pipe {
    pub(crate) fd: Option<OwnedFd>,
    pub(crate) stream: Stream,
}

/// Starts the main process with its stdout and stderr on two new pipes.
fn start(
    argv: &[String],
    marker: &(String, String),
    env: &[(String, String)],
    group: Option<&CellCgroup>,
) -> Result<(Pid, Vec<Pipe>), String> {
    let pipe = || {
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| format!("pipe: {e}"))
    };
    let (out_r, out_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    // The main process is born inside the cell's cgroup (or, where the
    // kernel cannot do that, moves itself in before it execs): it runs no
    // code of the cell before it is a member, so nothing it forks can be
    // born outside. (Moving the shim itself first would make the shim a
    // member: cancel would have to spare it, every process the shim starts
    // would be born inside, and the cgroup could not be removed before the
    // shim moved out again.)
    let main = MainProcess {
        argv,
        marker: (&marker.0, &marker.1),
        env,
        stdout: out_w,
        stderr: err_w,
    };
    let pid = spawn_into::start(main, group, Entry::Clone3)?;
    let pipes = vec![
        Pipe {
            fd: Some(out_r),
            stream: Stream::Stdout,
        },
        Pipe {
            fd: Some(err_r),
            stream: Stream::Stderr,
        },
    ];
    Ok((pid, pipes))
}

/// `waitpid(-1, WNOHANG)` until nothing is left to reap. True when the
/// shim has no child left at all.
fn reap(os: &mut LinuxOs, shim: &mut CellShim) -> bool {
    loop {
        match wait(WaitOptions::NOHANG) {
            Ok(Some((pid, status))) => shim.handle_exit(os.now(), raw(pid), to_exit(status)),
            Ok(None) => return false,
            Err(Errno::INTR) => {}
            Err(_) => return true,
        }
    }
}

/// Reads what the pipes already hold, without waiting.
fn final_read(os: &mut LinuxOs, shim: &mut CellShim, pipes: &mut [Pipe], buf: &mut [u8]) {
    for _ in 0..FINAL_READS {
        if !read_ready(os, shim, pipes, buf, 0) {
            return;
        }
    }
}

/// Waits up to `ms` for output (not at all when every pipe is closed) and
/// hands the shim what is there. True if anything was read.
fn read_ready(
    os: &mut LinuxOs,
    shim: &mut CellShim,
    pipes: &mut [Pipe],
    buf: &mut [u8],
    ms: u64,
) -> bool {
    read_pipes(pipes, buf, ms, |_, stream, data| match data {
        Some(data) => {
            if let Err(e) = shim.handle_output(os, stream, data) {
                eprintln!("tether-agent shim: cannot journal output: {e}");
            }
        }
        None => shim.handle_eof(stream),
    })
}

/// Waits up to `ms` for any open pipe of `pipes` (sleeps `ms` when none
/// is open), reads once from each ready one and passes what it read to `f`
/// with the pipe's index (`None`: EOF, and the pipe is closed). True if
/// anything was read or reached EOF.
pub(crate) fn read_pipes(
    pipes: &mut [Pipe],
    buf: &mut [u8],
    ms: u64,
    mut f: impl FnMut(usize, Stream, Option<&[u8]>),
) -> bool {
    let open: Vec<usize> = (0..pipes.len())
        .filter(|&i| pipes[i].fd.is_some())
        .collect();
    if open.is_empty() {
        std::thread::sleep(std::time::Duration::from_millis(ms));
        return false;
    }
    let ready: Vec<bool> = {
        let mut fds: Vec<PollFd<'_>> = open
            .iter()
            .filter_map(|&i| pipes[i].fd.as_ref())
            .map(|fd| PollFd::new(fd, PollFlags::IN))
            .collect();
        let timeout = rustix::time::Timespec {
            tv_sec: (ms / 1000) as i64,
            tv_nsec: ((ms % 1000) * 1_000_000) as i64,
        };
        let _ = poll(&mut fds, Some(&timeout));
        fds.iter().map(|f| !f.revents().is_empty()).collect()
    };
    let mut any = false;
    for (k, &i) in open.iter().enumerate() {
        if !ready[k] {
            continue;
        }
        let Some(fd) = pipes[i].fd.as_ref() else {
            continue;
        };
        match rustix::io::read(fd, &mut *buf) {
            Ok(0) => {
                pipes[i].fd = None;
                f(i, pipes[i].stream, None);
                any = true;
            }
            Ok(n) => {
                f(i, pipes[i].stream, Some(&buf[..n]));
                any = true;
            }
            Err(Errno::INTR) | Err(Errno::AGAIN) => {}
            Err(_) => {
                pipes[i].fd = None;
                f(i, pipes[i].stream, None);
                any = true;
            }
        }
    }
    any
}

pub(crate) fn raw(pid: rustix::process::Pid) -> Pid {
    pid.as_raw_nonzero().get() as Pid
}

pub(crate) fn to_exit(status: WaitStatus) -> ExitStatus {
    match (status.exit_status(), status.terminating_signal()) {
        (Some(code), _) => ExitStatus::Code(code),
        (None, Some(sig)) => ExitStatus::Signal(sig),
        (None, None) => ExitStatus::Signal(0),
    }
}
