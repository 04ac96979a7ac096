//! The Python kernel's interpreter shim (`tether-agent shim` with a Python
//! launch): one per kernel, a child subreaper. Runs `python3` with the
//! bootstrap of `tether_core::agent::python`, takes the cells the daemon
//! hands it through `{kernel}/py/run` one at a time, journals each cell's
//! output and the outcome the bootstrap reports on fd 3 (through
//! [`ShimCore`]), and reports the namespace lost when the interpreter dies
//! during a cell. When the interpreter is gone it reaps its tree and exits.
//!
//! Each cell gets its own cgroup when cgroup v2 is writable (named and
//! recorded as a shell cell's, see [`crate::linux_os::cgroup`]): before the
//! cell is handed over, the shim moves the *interpreter* into it, so all
//! the cell forks is born inside (a `setsid` + `env -i` daemon included,
//! which drops the marker, leaves the session and is reparented to this
//! shim); when the cell's report comes (or the interpreter died) the
//! interpreter goes back to the shim's own cgroup before the leftovers are
//! counted and the cell is marked done. What stays in the cell's cgroup is
//! that cell's leftovers. An empty cell cgroup is removed right away; the
//! others when they are empty at the shim's end (or by the daemon, ack,
//! gc or shutdown).

use crate::linux_os::cgroup::{self, CellCgroup};
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
    /// The cell's cgroup, which holds the interpreter while the cell runs.
    group: Option<CellCgroup>,
}

/// Per-cell cgroups: where the interpreter goes back to between cells (the
/// shim's own cgroup), and the cell cgroups that still had members when
/// their cell ended.
struct Cgroups {
    home: Option<OwnedFd>,
    pending: Vec<String>,
}

impl Cgroups {
    /// Makes, records and enters cell `core`'s cgroup: the interpreter is
    /// a member before the cell is handed to it. `None` (the cell runs
    /// without one) when cgroup v2 is not writable here.
    fn enter(&self, os: &mut LinuxOs, core: &mut ShimCore, py_pid: u32) -> Option<CellCgroup> {
        self.home.as_ref()?;
        let group = CellCgroup::create(&core.cgroup_name()).ok()?;
        if core.record_cgroup(os, &group.path).is_err() || group.admit(py_pid).is_err() {
            group.discard();
            return None;
        }
        Some(group)
    }

    /// The interpreter leaves the cell's cgroup, back to the shim's own
    /// (a dead interpreter has left it already).
    fn leave(&self, c: &Current, py_pid: u32) {
        let (Some(home), Some(group)) = (self.home.as_ref(), c.group.as_ref()) else {
            return;
        };
        if let Err(e) = cgroup::move_into(home, py_pid) {
            if cgroup::members(&group.path).contains(&py_pid) {
                eprintln!(
                    "tether-agent shim (python): the interpreter stays in {}: {e}",
                    group.path
                );
            }
        }
    }

    /// After the cell is done: removes its cgroup if it is empty, else
    /// keeps it for later.
    fn done(&mut self, os: &mut LinuxOs, group: Option<CellCgroup>) {
        if let Some(path) = group.map(CellCgroup::into_path) {
            if os.remove_cgroup(&path).is_err() {
                self.pending.push(path);
            }
        }
    }
}

pub(crate) fn run(launch: CellLaunch) -> u8 {
    match run_interpreter(&launch) {
        Ok(()) => {}
        Err(e) => eprintln!("tether-agent shim (python): {e}"),
    }
    0
}

fn pipe() -> Result<(OwnedFd, OwnedFd), String> {
    rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| format!("pipe: {e}"))
}

fn run_interpreter(launch: &CellLaunch) -> Result<(), String> {
    let mut os = LinuxOs::new();
    let mut groups = Cgroups {
        home: cgroup::own_procs().ok(),
        pending: Vec::new(),
    };
    let result = interpreter_loop(&mut os, launch, &mut groups);
    // Stay until the tree is empty: leftovers remain our descendants.
    while wait(WaitOptions::empty()).is_ok() {}
    for path in std::mem::take(&mut groups.pending) {
        let _ = os.remove_cgroup(&path);
    }
    result
}

fn interpreter_loop(
    os: &mut LinuxOs,
    launch: &CellLaunch,
    groups: &mut Cgroups,
) -> Result<(), String> {
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
                        let _ = c.core.output(os, stream, &buf[..n]);
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
                    drain(os, &mut c, &mut fds, &mut buf);
                    finish(os, groups, c, py_pid, Ok(report.outcome));
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
                    os,
                    groups,
                    &kernel,
                    &nonce,
                    CellSeq(seq),
                    (py_pid, py_start),
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
                drain(os, &mut c, &mut fds, &mut buf);
                finish(os, groups, c, py_pid, Err(detail));
            }
            return Ok(());
        }
    }
}

fn start_cell(
    os: &mut LinuxOs,
    groups: &mut Cgroups,
    kernel: &KernelLayout,
    nonce: &str,
    seq: CellSeq,
    (py_pid, py_start): (u32, u64),
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
    // The cell's cgroup holds the interpreter before the cell's code runs.
    let group = groups.enter(os, &mut core, py_pid);
    let _ = core.started(os, py_pid, py_pid, py_start);
    let line = format!("{} {} {}\n", seq.0, cell.dir(), marker);
    let sent = stdin
        .as_ref()
        .is_some_and(|fd| rustix::io::write(fd, line.as_bytes()).is_ok_and(|n| n == line.len()));
    let c = Current {
        seq,
        core,
        marker,
        group,
    };
    if !sent {
        *stdin = None;
        finish(os, groups, c, py_pid, Err("does not take input".into()));
        return None;
    }
    Some(c)
}

/// Ends the current cell: the interpreter leaves the cell's cgroup, the
/// leftovers (by marker and cgroup) are counted, the outcome journaled
/// with `done`; then the cgroup goes if it is empty.
fn finish(
    os: &mut LinuxOs,
    groups: &mut Cgroups,
    mut c: Current,
    py_pid: u32,
    reported: Result<CellOutcome, String>,
) {
    groups.leave(&c, py_pid);
    let left = leftovers(os, &c, py_pid);
    let _ = c.core.finish_python(os, reported, left);
    groups.done(os, c.group.take());
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

/// The cell's processes that still run: those carrying its marker and the
/// members of its cgroup (never the interpreter).
fn leftovers(os: &LinuxOs, c: &Current, py_pid: u32) -> Vec<u32> {
    let table = Table::snapshot(os);
    let mut protected = procs::protected(&table, os.self_pid());
    protected.insert(py_pid);
    let scope = CellScope {
        shim: None,
        pgid: None,
        marker: c.marker.clone(),
        other_markers: Vec::new(),
        extra: Vec::new(),
        cgroup: c.group.as_ref().map(|g| g.path.clone()),
    };
    procs::cell_processes(os, &table, &scope, &protected)
        .into_iter()
        .collect()
}
