//! The Python kernel's interpreter shim (`tether-agent shim` with a Python
//! launch): one per kernel, a child subreaper. Runs `python3` with the
//! bootstrap of `tether_core::agent::python`, takes the cells the daemon
//! hands it through `{kernel}/py/run` one at a time, journals each cell's
//! output and the outcome the bootstrap reports on fd 3 (through
//! [`ShimCore`]), and reports the namespace lost when the interpreter dies
//! during a cell. When the interpreter is gone it reaps its tree and exits.

use crate::linux_os::LinuxOs;
use rustix::event::{poll, PollFd, PollFlags};
use rustix::process::{wait, WaitOptions};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use tether_core::agent::layout::KernelLayout;
use tether_core::agent::procs::{self, CellScope, Table};
use tether_core::agent::{python, CellLaunch, Os, ShimCore};
use tether_core::ids::CellSeq;
use tether_core::protocol::{CellOutcome, Lang, Stream};

#[derive(serde::Deserialize)]
struct Report {
    seq: u64,
    outcome: CellOutcome,
}

struct Current {
    seq: CellSeq,
    core: ShimCore,
    marker: String,
}

pub(crate) fn run(launch: CellLaunch) -> u8 {
    match run_interpreter(&launch) {
        Ok(()) => {}
        Err(e) => eprintln!("tether-agent shim (python): {e}"),
    }
    while wait(WaitOptions::empty()).is_ok() {}
    0
}

fn pipe() -> Result<(OwnedFd, OwnedFd), String> {
    rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| format!("pipe: {e}"))
}

fn run_interpreter(launch: &CellLaunch) -> Result<(), String> {
    let mut os = LinuxOs::new();
    let kernel = KernelLayout::new(&launch.kernel_dir);
    let suffix = format!(":{}", python::INTERPRETER_MARK);
    let nonce = launch
        .marker
        .1
        .strip_suffix(&suffix)
        .unwrap_or(&launch.marker.1)
        .to_owned();
    let (program, rest) = launch
        .argv
        .split_first()
        .ok_or_else(|| "empty argv".to_owned())?;
    let (in_r, in_w) = pipe()?;
    let (out_r, out_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    let (ctl_r, ctl_w) = pipe()?;
    let ctl_fd = ctl_w.as_raw_fd();
    let mut cmd = Command::new(program);
    cmd.args(rest)
        .env(&launch.marker.0, &launch.marker.1)
        .stdin(Stdio::from(in_r))
        .stdout(Stdio::from(out_w))
        .stderr(Stdio::from(err_w));
    // SAFETY: setsid, dup2 and fcntl are async-signal-safe; nothing is
    // allocated in the child.
    unsafe {
        cmd.pre_exec(move || {
            rustix::process::setsid()?;
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
    let py_pid = child.id();
    drop(child);
    let py_start = os.process(py_pid).map_or(0, |p| p.starttime);
    let mut stdin = Some(in_w);
    let mut fds: [Option<OwnedFd>; 3] = [Some(out_r), Some(err_r), Some(ctl_r)];
    let mut ctl_buf: Vec<u8> = Vec::new();
    let mut current: Option<Current> = None;
    let mut last_seq = 0u64;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let readable = ready(&fds, 20);
        for i in 0..3 {
            if !readable[i] {
                continue;
            }
            let Some(fd) = fds[i].as_ref() else { continue };
            let n = match rustix::io::read(fd, &mut buf[..]) {
                Ok(0) | Err(_) => {
                    fds[i] = None;
                    continue;
                }
                Ok(n) => n,
            };
            match i {
                0 | 1 => {
                    if let Some(c) = current.as_mut() {
                        let stream = if i == 0 {
                            Stream::Stdout
                        } else {
                            Stream::Stderr
                        };
                        let _ = c.core.output(&mut os, stream, &buf[..n]);
                    }
                }
                _ => ctl_buf.extend_from_slice(&buf[..n]),
            }
        }
        while let Some(end) = ctl_buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = ctl_buf.drain(..=end).collect();
            let Ok(report) = serde_json::from_slice::<Report>(&line) else {
                eprintln!("tether-agent shim (python): bad report {line:?}");
                continue;
            };
            if current.as_ref().is_some_and(|c| c.seq.0 == report.seq) {
                if let Some(mut c) = current.take() {
                    drain(&mut os, &mut c, &mut fds, &mut buf);
                    let left = leftovers(&os, &c.marker, py_pid);
                    let _ = c.core.finish_python(&mut os, Ok(report.outcome), left);
                }
            }
        }
        if current.is_none() {
            if let Some(seq) = os
                .read_file(&python::run_file(&kernel))
                .ok()
                .and_then(|b| String::from_utf8_lossy(&b).trim().parse::<u64>().ok())
                .filter(|&s| s > last_seq)
            {
                last_seq = seq;
                current = start_cell(
                    &mut os,
                    &kernel,
                    &nonce,
                    CellSeq(seq),
                    py_pid,
                    py_start,
                    &mut stdin,
                );
            }
        }
        let mut died = None;
        while let Ok(Some((pid, status))) = wait(WaitOptions::NOHANG) {
            if pid.as_raw_nonzero().get() as u32 == py_pid {
                died = Some(match (status.exit_status(), status.terminating_signal()) {
                    (Some(code), _) => format!("exited with status {code}"),
                    (None, Some(sig)) => format!("was killed by signal {sig}"),
                    _ => "ended".to_owned(),
                });
            }
        }
        if let Some(detail) = died {
            if let Some(mut c) = current.take() {
                drain(&mut os, &mut c, &mut fds, &mut buf);
                let left = leftovers(&os, &c.marker, py_pid);
                let _ = c.core.finish_python(&mut os, Err(detail), left);
            }
            return Ok(());
        }
    }
}

fn start_cell(
    os: &mut LinuxOs,
    kernel: &KernelLayout,
    nonce: &str,
    seq: CellSeq,
    py_pid: u32,
    py_start: u64,
    stdin: &mut Option<OwnedFd>,
) -> Option<Current> {
    let cell = kernel.cell(seq);
    let marker = procs::marker_value(nonce, seq);
    let launch = CellLaunch {
        kernel_dir: kernel.dir().to_owned(),
        cell_dir: cell.dir().to_owned(),
        lang: Lang::Python,
        argv: Vec::new(),
        marker: (procs::MARKER_NAME.to_owned(), marker.clone()),
    };
    let mut core = ShimCore::new(os, launch).ok()?;
    if let Some(reason) = core.tombstone(os) {
        let _ = core.never_started(os, reason.outcome());
        return None;
    }
    let _ = core.started(os, py_pid, py_pid, py_start);
    let line = format!("{} {} {}\n", seq.0, cell.dir(), marker);
    let sent = stdin
        .as_ref()
        .is_some_and(|fd| rustix::io::write(fd, line.as_bytes()).is_ok_and(|n| n == line.len()));
    if !sent {
        *stdin = None;
        let _ = core.finish_python(os, Err("does not take input".into()), Vec::new());
        return None;
    }
    Some(Current { seq, core, marker })
}

/// Which descriptors are readable (or at EOF) within `ms` milliseconds.
fn ready(fds: &[Option<OwnedFd>; 3], ms: i64) -> [bool; 3] {
    let mut out = [false; 3];
    let idx: Vec<usize> = (0..3).filter(|&i| fds[i].is_some()).collect();
    if idx.is_empty() {
        std::thread::sleep(std::time::Duration::from_millis(ms as u64));
        return out;
    }
    let mut pfds: Vec<PollFd<'_>> = idx
        .iter()
        .filter_map(|&i| fds[i].as_ref())
        .map(|fd| PollFd::new(fd, PollFlags::IN))
        .collect();
    let timeout = rustix::time::Timespec {
        tv_sec: 0,
        tv_nsec: ms * 1_000_000,
    };
    let _ = poll(&mut pfds, Some(&timeout));
    for (k, &i) in idx.iter().enumerate() {
        out[i] = !pfds[k].revents().is_empty();
    }
    out
}

/// Journals what stdout/stderr already hold (the bootstrap flushed them
/// before it reported).
fn drain(os: &mut LinuxOs, c: &mut Current, fds: &mut [Option<OwnedFd>; 3], buf: &mut [u8]) {
    loop {
        let readable = ready(fds, 0);
        let mut any = false;
        for i in 0..2 {
            if !readable[i] {
                continue;
            }
            let Some(fd) = fds[i].as_ref() else { continue };
            match rustix::io::read(fd, &mut *buf) {
                Ok(0) | Err(_) => fds[i] = None,
                Ok(n) => {
                    any = true;
                    let stream = if i == 0 {
                        Stream::Stdout
                    } else {
                        Stream::Stderr
                    };
                    let _ = c.core.output(os, stream, &buf[..n]);
                }
            }
        }
        if !any {
            return;
        }
    }
}

/// Processes carrying the cell's marker that still run.
fn leftovers(os: &LinuxOs, marker: &str, py_pid: u32) -> Vec<u32> {
    let table = Table::snapshot(os);
    let mut protected = procs::protected(&table, os.self_pid());
    protected.insert(py_pid);
    let scope = CellScope {
        shim: None,
        pgid: None,
        marker: marker.to_owned(),
        other_markers: Vec::new(),
        extra: Vec::new(),
        // The interpreter serves every cell of the kernel: a cgroup of its
        // own would hold all of them, not one cell (its cells are found by
        // marker).
        cgroup: None,
    };
    procs::cell_processes(os, &table, &scope, &protected)
        .into_iter()
        .collect()
}
