//! `tether-agent shim --launch JSON`: one cell's shim. A child subreaper:
//! starts the cell's main process in a new session with the cell's env
//! marker, in the cell's own cgroup when one can be made (recorded in the
//! cell's `cgroup` file first; see [`crate::linux_os::cgroup`]), and its
//! stdout/stderr on pipes, journals what the pipes carry,
//! runs the `waitpid(-1)` loop itself, and when the main process has exited
//! and the pipes reached EOF (or the drain bound passed) journals the
//! result, the leftovers and `done` through [`ShimCore`]. It then stays,
//! reaping, until its whole tree is gone, so every leftover keeps being a
//! descendant of the shim (and so a process of the cell); then it removes
//! the cell's cgroup if that is empty.

use crate::linux_os::cgroup::CellCgroup;
use crate::linux_os::spawn_into::{self, Entry, MainProcess};
use crate::linux_os::LinuxOs;
use rustix::event::{poll, PollFd, PollFlags};
use rustix::process::{wait, WaitOptions, WaitStatus};
use std::ffi::OsString;
use std::os::fd::OwnedFd;
use tether_core::agent::procs::{self, CellScope, Table};
use tether_core::agent::shim::{complete, DEFAULT_DRAIN};
use tether_core::agent::{CellLaunch, ExitStatus, Os, ShimCore};
use tether_core::protocol::{CellOutcome, Stream};
use tether_core::time::Timestamp;

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
    let mut os = LinuxOs::new();
    let mut core = match ShimCore::new(&mut os, launch.clone()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("tether-agent shim: cannot open the journal: {e}");
            return 1;
        }
    };
    if let Some(reason) = core.tombstone(&os) {
        let _ = core.never_started(&mut os, reason.outcome());
        return 0;
    }
    let group = cell_cgroup(&mut os, &mut core);
    match run_cell(&mut os, &mut core, &launch, group.as_ref()) {
        Ok(()) => {}
        Err(message) => {
            eprintln!("tether-agent shim: {message}");
            let _ = core.never_started(&mut os, CellOutcome::Error { message });
        }
    }
    let group = group.map(CellCgroup::into_path);
    // Stay until the tree is empty: leftovers remain our descendants.
    while wait(WaitOptions::empty()).is_ok() {}
    // Only an empty cgroup goes; one that still holds a process that left
    // our tree stays for the daemon, ack, gc or shutdown to remove.
    if let Some(path) = group {
        let _ = os.remove_cgroup(&path);
    }
    0
}

/// The cell's own cgroup, made and recorded in the cell directory before
/// the main process starts; `None` (silently: the cell runs as before)
/// when cgroup v2 is not there or not writable.
fn cell_cgroup(os: &mut LinuxOs, core: &mut ShimCore) -> Option<CellCgroup> {
    let group = CellCgroup::create(&core.cgroup_name()).ok()?;
    if core.record_cgroup(os, &group.path).is_err() {
        group.discard();
        return None;
    }
    Some(group)
}

struct Pipe {
    fd: Option<OwnedFd>,
    stream: Stream,
}

fn run_cell(
    os: &mut LinuxOs,
    core: &mut ShimCore,
    launch: &CellLaunch,
    group: Option<&CellCgroup>,
) -> Result<(), String> {
    if launch.argv.is_empty() {
        return Err("the cell has an empty argv".to_owned());
    }
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
        argv: &launch.argv,
        marker: (&launch.marker.0, &launch.marker.1),
        stdout: out_w,
        stderr: err_w,
    };
    let main_pid = spawn_into::start(main, group, Entry::Clone3)?;
    let start = os.process(main_pid).map_or(0, |p| p.starttime);
    let _ = core.started(os, main_pid, main_pid, start);

    let mut pipes = [
        Pipe {
            fd: Some(out_r),
            stream: Stream::Stdout,
        },
        Pipe {
            fd: Some(err_r),
            stream: Stream::Stderr,
        },
    ];
    let mut exit: Option<ExitStatus> = None;
    let mut exited_at: Option<Timestamp> = None;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if exit.is_none() && pipes.iter().all(|p| p.fd.is_none()) {
            // Nothing left to read: sleep until a child exits (the main
            // one ends the cell; an orphan is just reaped).
            match wait(WaitOptions::empty()) {
                Ok(Some((pid, status))) if pid.as_raw_nonzero().get() as u32 == main_pid => {
                    exit = Some(to_exit(status));
                    exited_at = Some(os.now());
                }
                Ok(_) => {}
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(1)),
            }
        } else {
            read_ready(os, core, &mut pipes, &mut buf);
        }
        while let Ok(Some((pid, status))) = wait(WaitOptions::NOHANG) {
            if pid.as_raw_nonzero().get() as u32 == main_pid {
                exit = Some(to_exit(status));
                exited_at = Some(os.now());
            }
        }
        let eof = pipes.iter().all(|p| p.fd.is_none());
        if complete(exited_at, eof, os.now(), DEFAULT_DRAIN) {
            break;
        }
    }
    // One last non-blocking read of what is already buffered.
    read_ready(os, core, &mut pipes, &mut buf);
    drop(pipes);
    let table = Table::snapshot(os);
    let protected = procs::protected(&table, os.self_pid());
    let scope = CellScope {
        shim: Some(os.self_pid()),
        pgid: Some(main_pid),
        marker: launch.marker.1.clone(),
        other_markers: Vec::new(),
        extra: Vec::new(),
        cgroup: group.map(|g| g.path.clone()),
    };
    let leftovers: Vec<u32> = procs::cell_processes(os, &table, &scope, &protected)
        .into_iter()
        .collect();
    core.finish(os, exit.unwrap_or(ExitStatus::Signal(9)), leftovers)
        .map_err(|e| format!("cannot write the journal: {e}"))?;
    Ok(())
}

/// Waits up to 20 ms for output (not at all when every pipe is closed),
/// journals what is there.
fn read_ready(os: &mut LinuxOs, core: &mut ShimCore, pipes: &mut [Pipe], buf: &mut [u8]) {
    let open: Vec<usize> = (0..pipes.len())
        .filter(|&i| pipes[i].fd.is_some())
        .collect();
    if open.is_empty() {
        // Nothing to wait for here: the caller blocks in wait() while the
        // main process runs, and stops once it has exited.
        return;
    }
    let ready: Vec<bool> = {
        let mut fds: Vec<PollFd<'_>> = open
            .iter()
            .filter_map(|&i| pipes[i].fd.as_ref())
            .map(|fd| PollFd::new(fd, PollFlags::IN))
            .collect();
        let timeout = rustix::time::Timespec {
            tv_sec: 0,
            tv_nsec: 20_000_000,
        };
        let _ = poll(&mut fds, Some(&timeout));
        fds.iter().map(|f| !f.revents().is_empty()).collect()
    };
    for (k, &i) in open.iter().enumerate() {
        if !ready[k] {
            continue;
        }
        let Some(fd) = pipes[i].fd.as_ref() else {
            continue;
        };
        match rustix::io::read(fd, &mut *buf) {
            Ok(0) => pipes[i].fd = None,
            Ok(n) => {
                if let Err(e) = core.output(os, pipes[i].stream, &buf[..n]) {
                    eprintln!("tether-agent shim: cannot journal output: {e}");
                }
            }
            Err(rustix::io::Errno::INTR) | Err(rustix::io::Errno::AGAIN) => {}
            Err(_) => pipes[i].fd = None,
        }
    }
}

fn to_exit(status: WaitStatus) -> ExitStatus {
    match (status.exit_status(), status.terminating_signal()) {
        (Some(code), _) => ExitStatus::Code(code),
        (None, Some(sig)) => ExitStatus::Signal(sig),
        (None, None) => ExitStatus::Signal(0),
    }
}
