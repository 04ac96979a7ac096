//! [`LinuxOs`] against real processes and files.

use super::procfs;
use super::spawn::{spawn_retrying, Detached};
use super::*;
use std::io::{BufRead, BufReader, Read};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

fn raw(pid: Pid) -> rustix::process::Pid {
    rustix::process::Pid::from_raw(pid as i32).expect("positive pid")
}

/// A child of this test process, killed with its children (and its
/// group, when it leads one) and reaped when dropped, so that a failing
/// test leaks nothing. It is stopped first so it cannot fork meanwhile;
/// KILL, not TERM, because a shell's TERM trap can lose a signal sent to a
/// child that has not exec'd yet.
struct Owned {
    pid: Pid,
    group: bool,
}

impl Drop for Owned {
    fn drop(&mut self) {
        use rustix::process::{kill_process, kill_process_group, Signal as S};
        let _ = kill_process(raw(self.pid), S::STOP);
        for child in procfs::processes().iter().filter(|p| p.ppid == self.pid) {
            let _ = kill_process(raw(child.pid), S::KILL);
        }
        if self.group {
            let _ = kill_process_group(raw(self.pid), S::KILL);
        }
        let _ = kill_process(raw(self.pid), S::KILL);
        let _ =
            rustix::process::waitpid(Some(raw(self.pid)), rustix::process::WaitOptions::empty());
    }
}

fn own(child: Child) -> Owned {
    Owned {
        pid: child.id(),
        group: false,
    }
}

/// [`own`] for a child that leads its own process group.
fn own_group(child: Child) -> Owned {
    Owned {
        pid: child.id(),
        group: true,
    }
}

/// Waits until `pid` (our child) has exited, without reaping it.
fn wait_exited_keep_zombie(pid: Pid) {
    use rustix::process::{waitid, WaitId, WaitIdOptions};
    waitid(
        WaitId::Pid(raw(pid)),
        WaitIdOptions::EXITED | WaitIdOptions::NOWAIT,
    )
    .expect("waitid");
}

fn reap(pid: Pid) -> rustix::process::WaitStatus {
    let (_, status) =
        rustix::process::waitpid(Some(raw(pid)), rustix::process::WaitOptions::empty())
            .expect("waitpid")
            .expect("a status");
    status
}

/// Writes an executable file `name` in `dir`.
fn executable(dir: &Path, name: &str, contents: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// A stand-in for the agent binary: keeps its argv in `/proc/PID/cmdline`
/// while it waits for a child.
const STAND_IN: &[u8] = b"#!/bin/sh\nsleep 300 &\nwait\n";

/// Our session id as procfs reports it. Not `getsid`: in a container whose
/// session leader lives outside our PID namespace the kernel reports 0, which
/// rustix's `Pid` cannot hold (it panics), while procfs says 0 plainly.
fn own_sid() -> Pid {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let after_comm = &stat[stat.rfind(')').unwrap() + 1..];
    // After the comm: state, ppid, pgrp, session.
    after_comm
        .split_whitespace()
        .nth(3)
        .unwrap()
        .parse()
        .unwrap()
}

/// Where `/proc/PID/fd/FD` points.
fn fd_target(pid: Pid, fd: &str) -> String {
    std::fs::read_link(format!("/proc/{pid}/fd/{fd}"))
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn all_fd_targets(pid: Pid) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .map(|e| {
            let fd = e.unwrap().file_name().to_string_lossy().into_owned();
            let target = fd_target(pid, &fd);
            (fd, target)
        })
        .collect();
    v.sort();
    v
}

#[test]
fn clock_and_identity() {
    let os = LinuxOs::new();
    let a = os.now();
    let b = os.now();
    assert!(b >= a);
    assert!(a > Timestamp::ZERO);
    let id = os.boot_id().unwrap();
    assert_eq!(id.len(), 36, "{id}");
    assert_eq!(id, os.boot_id().unwrap());
    assert_eq!(os.self_pid(), std::process::id());
}

#[test]
fn a_real_process_whose_comm_has_spaces_and_parens_is_read_right() {
    let dir = tempfile::tempdir().unwrap();
    let tricky = dir.path().join("x) y (z");
    std::fs::copy("/bin/sleep", &tricky).unwrap();
    let os = LinuxOs::new();
    let me = std::process::id();
    let my_start = os.process(me).unwrap().starttime;

    // In a new session: pid == pgid == sid.
    let pid = Detached {
        program: tricky.clone(),
        arg0: "x) y (z".into(),
        args: vec!["60".into()],
        new_session: true,
        stderr_log: None,
    }
    .spawn()
    .unwrap();
    let _guard = Owned { pid, group: false };
    let stat = std::fs::read(format!("/proc/{pid}/stat")).unwrap();
    assert!(
        stat.starts_with(format!("{pid} (x) y (z) ").as_bytes()),
        "exec done"
    );
    let info = os.process(pid).unwrap();
    assert_eq!(
        (info.pid, info.ppid, info.pgid, info.sid),
        (pid, me, pid, pid)
    );
    assert!(!info.zombie);
    assert!(info.starttime >= my_start, "child started after us");
    assert!(os.processes().contains(&info));

    // In our session, own group.
    let child = spawn_retrying(
        Command::new(&tricky)
            .arg0("x) y (z")
            .arg("60")
            .process_group(0),
    )
    .unwrap();
    let pid2 = child.id();
    let _guard2 = own(child);
    let info2 = os.process(pid2).unwrap();
    assert_eq!((info2.ppid, info2.pgid, info2.sid), (me, pid2, own_sid()));
    assert!(info2.starttime >= info.starttime);
}

#[test]
fn processes_see_a_child_then_its_zombie_then_nothing() {
    let os = LinuxOs::new();
    let child = spawn_retrying(Command::new("sleep").arg("60")).unwrap();
    let pid = child.id();
    let guard = own(child);
    let all = os.processes();
    assert!(all.windows(2).all(|w| w[0].pid < w[1].pid), "sorted by pid");
    let found = all.iter().find(|p| p.pid == pid).expect("child listed");
    assert_eq!(found.ppid, std::process::id());
    assert!(!found.zombie);

    rustix::process::kill_process(raw(pid), rustix::process::Signal::KILL).unwrap();
    wait_exited_keep_zombie(pid);
    assert!(os.process(pid).unwrap().zombie);
    assert!(os.processes().iter().any(|p| p.pid == pid && p.zombie));

    assert_eq!(reap(pid).terminating_signal(), Some(libc::SIGKILL));
    std::mem::forget(guard);
    assert_eq!(os.process(pid), None);
    assert!(!os.processes().iter().any(|p| p.pid == pid));
}

#[test]
fn children_lists_a_child_of_any_thread_and_not_its_zombie() {
    // A test runs on a thread of its own: the child is that thread's, and
    // `children` reads every thread's list.
    let os = LinuxOs::new();
    let me = std::process::id();
    let child = spawn_retrying(Command::new("sleep").arg("60")).unwrap();
    let pid = child.id();
    let guard = own(child);
    let kids = os.children(me);
    assert!(
        kids.iter().any(|p| p.pid == pid && p.ppid == me),
        "{kids:?}"
    );
    assert!(
        kids.windows(2).all(|w| w[0].pid < w[1].pid),
        "sorted by pid"
    );
    // The kernel's lists where it keeps them (CONFIG_PROC_CHILDREN), the
    // scan else: the same answer.
    if let Some(direct) = procfs::children(me) {
        assert!(direct.iter().any(|p| p.pid == pid));
    }
    let scanned: Vec<ProcInfo> = os
        .processes()
        .into_iter()
        .filter(|p| p.ppid == me && !p.zombie)
        .collect();
    assert!(scanned.iter().any(|p| p.pid == pid));
    rustix::process::kill_process(raw(pid), rustix::process::Signal::KILL).unwrap();
    wait_exited_keep_zombie(pid);
    assert!(
        !os.children(me).iter().any(|p| p.pid == pid),
        "a zombie is no live child"
    );
    reap(pid);
    std::mem::forget(guard);
}

/// Starts `sh -c 'echo ready; sleep 60; :'` (through `prefix`, e.g.
/// `env -i`) in its own group, with `env` added, and waits for "ready":
/// from then on the pid is that shell.
fn ready_shell(prefix: &[&str], env: (&str, &str)) -> (Pid, Owned) {
    ready_shell_with_args(prefix, env, &[])
}

/// [`ready_shell`] with `args` after the script (`$0`, `$1`, …).
fn ready_shell_with_args(prefix: &[&str], env: (&str, &str), args: &[&str]) -> (Pid, Owned) {
    let mut argv: Vec<&str> = prefix.to_vec();
    argv.extend(["/bin/sh", "-c", "echo ready; sleep 60; :"]);
    argv.extend(args);
    let mut child = spawn_retrying(
        Command::new(argv[0])
            .args(&argv[1..])
            .env(env.0, env.1)
            .stdout(Stdio::piped())
            .process_group(0),
    )
    .unwrap();
    let pid = child.id();
    let stdout = child.stdout.take().unwrap();
    let guard = own_group(child);
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    (pid, guard)
}

#[test]
fn has_env_finds_a_marker_and_not_after_env_i() {
    let os = LinuxOs::new();
    let (with, _g1) = ready_shell(&[], ("TETHER_TEST_MARK", "cell-41"));
    assert!(os.has_env(with, "TETHER_TEST_MARK", "cell-41"));
    assert!(!os.has_env(with, "TETHER_TEST_MARK", "cell-4"));
    assert!(!os.has_env(with, "TETHER_TEST_MAR", "cell-41"));
    assert!(!os.has_env(with, "TETHER_TEST_MARK", "cell-41x"));

    let (without, _g2) = ready_shell(&["env", "-i"], ("TETHER_TEST_MARK", "cell-41"));
    assert!(!os.has_env(without, "TETHER_TEST_MARK", "cell-41"));
    assert!(os.process(without).is_some());
}

#[test]
fn has_arg_matches_whole_argv_elements() {
    let os = LinuxOs::new();
    let (pid, _g) = ready_shell(&[], ("X", "1"));
    assert!(os.has_arg(pid, "/bin/sh"));
    assert!(os.has_arg(pid, "-c"));
    assert!(os.has_arg(pid, "echo ready; sleep 60; :"));
    assert!(!os.has_arg(pid, "ready"));
    assert!(!os.has_arg(pid, ""));

    let (pid, _g) = ready_shell_with_args(&[], ("X", "1"), &["name", ""]);
    assert!(os.has_arg(pid, "name"));
    assert!(os.has_arg(pid, ""), "a real empty argument");
}

#[test]
fn signal_kills_one_real_child_and_a_dead_pid_is_not_found() {
    let mut os = LinuxOs::new();
    let child = spawn_retrying(Command::new("sleep").arg("60")).unwrap();
    let pid = child.id();
    let guard = own(child);
    os.signal(pid, Signal::Term).unwrap();
    assert_eq!(reap(pid).terminating_signal(), Some(libc::SIGTERM));
    std::mem::forget(guard);
    assert_eq!(os.signal(pid, Signal::Kill), Err(OsError::NotFound));
}

#[test]
fn stop_and_cont_reach_the_process() {
    use rustix::process::{waitid, WaitId, WaitIdOptions};
    let mut os = LinuxOs::new();
    let mut sleep = Command::new("sleep");
    sleep.arg("60");
    // The SIGINT below must be able to end it: a test run started in the
    // background of a non-interactive shell inherits SIGINT ignored.
    // SAFETY: the reset only calls sigaction(2).
    unsafe {
        sleep.pre_exec(|| {
            super::spawn::reset_signal_dispositions();
            Ok(())
        });
    }
    let child = spawn_retrying(&mut sleep).unwrap();
    let pid = child.id();
    let guard = own(child);
    os.signal(pid, Signal::Stop).unwrap();
    waitid(WaitId::Pid(raw(pid)), WaitIdOptions::STOPPED).unwrap();
    os.signal(pid, Signal::Cont).unwrap();
    waitid(WaitId::Pid(raw(pid)), WaitIdOptions::CONTINUED).unwrap();
    os.signal(pid, Signal::Int).unwrap();
    assert_eq!(reap(pid).terminating_signal(), Some(libc::SIGINT));
    std::mem::forget(guard);
}

#[test]
fn signal_refuses_pid_0_1_and_negative_like_values() {
    let mut os = LinuxOs::new();
    for pid in [0, 1, u32::MAX, 1 << 31, (1 << 31) + 1] {
        match os.signal(pid, Signal::Kill) {
            Err(OsError::Other(msg)) => assert!(msg.contains("refusing"), "{msg}"),
            other => panic!("pid {pid}: {other:?}"),
        }
    }
}

#[test]
fn has_program_searches_path_for_executables() {
    let os = LinuxOs::new();
    assert!(os.has_program("sh"));
    assert!(os.has_program("/bin/sh"));
    assert!(!os.has_program("tether-no-such-program-3f9a"));
    assert!(!os.has_program(""));
    assert!(!os.has_program("/etc/passwd"), "not executable");
    assert!(!os.has_program("/tmp"), "a directory");
}

#[test]
fn spawn_daemon_starts_a_new_session_with_private_stdio() {
    let dir = tempfile::tempdir().unwrap();
    let exe = executable(dir.path(), "agent", STAND_IN);
    let kernel_dir = dir.path().join("k");
    std::fs::create_dir(&kernel_dir).unwrap();
    let kernel_dir = kernel_dir.to_str().unwrap();

    // An inheritable copy of a pipe, like an op command's stdout or any
    // descriptor its parent left open.
    let (mut reader, writer) = std::io::pipe().unwrap();
    rustix::io::fcntl_setfd(&writer, rustix::io::FdFlags::empty()).unwrap();
    let pipe = fd_target(std::process::id(), &writer.as_raw_fd().to_string());
    assert!(pipe.starts_with("pipe:"), "{pipe}");

    let mut os = LinuxOs::with_exe(&exe);
    let pid = os.spawn_daemon(kernel_dir, "nonce-5ee").unwrap();
    let _guard = Owned { pid, group: true };
    drop(writer);

    let info = os.process(pid).unwrap();
    assert_eq!(
        (info.ppid, info.pgid, info.sid),
        (std::process::id(), pid, pid)
    );
    assert!(os.has_arg(pid, "nonce-5ee"));
    assert!(os.has_arg(pid, "serve"));
    assert!(os.has_arg(pid, kernel_dir));

    let fds = all_fd_targets(pid);
    assert!(
        !fds.iter().any(|(_, t)| *t == pipe),
        "daemon holds the pipe: {fds:?}"
    );
    assert_eq!(fd_target(pid, "0"), "/dev/null");
    assert_eq!(fd_target(pid, "1"), "/dev/null");
    assert_eq!(fd_target(pid, "2"), format!("{kernel_dir}/{DAEMON_STDERR}"));
    // Nobody else holds the write end (the daemon is running): EOF now.
    let mut rest = Vec::new();
    reader.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty());
}

#[test]
fn spawn_daemon_resets_ignored_signals() {
    let dir = tempfile::tempdir().unwrap();
    let exe = executable(dir.path(), "agent", STAND_IN);
    // SAFETY: ignoring SIGUSR2, which nothing in these tests uses.
    unsafe { libc::signal(libc::SIGUSR2, libc::SIG_IGN) };
    let mut os = LinuxOs::with_exe(&exe);
    let pid = os.spawn_daemon(dir.path().to_str().unwrap(), "n").unwrap();
    let _guard = Owned { pid, group: true };
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let ignored = status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .map(|hex| u64::from_str_radix(hex.trim(), 16).unwrap())
        .unwrap();
    assert_eq!(
        ignored & (1 << (libc::SIGUSR2 - 1)),
        0,
        "SigIgn {ignored:#x}"
    );
}

#[test]
fn spawn_daemon_without_a_kernel_dir_logs_to_dev_null() {
    let dir = tempfile::tempdir().unwrap();
    let exe = executable(dir.path(), "agent", STAND_IN);
    let missing = dir.path().join("missing");
    let mut os = LinuxOs::with_exe(&exe);
    let pid = os.spawn_daemon(missing.to_str().unwrap(), "n").unwrap();
    let _guard = Owned { pid, group: true };
    assert_eq!(fd_target(pid, "2"), "/dev/null");
    assert!(!missing.exists());
}

#[test]
fn spawn_of_a_missing_program_is_an_error() {
    let mut os = LinuxOs::with_exe("/nonexistent/tether-agent");
    match os.spawn_daemon("/tmp", "n") {
        Err(OsError::Other(msg)) => assert!(msg.contains("/nonexistent/tether-agent"), "{msg}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn spawn_cell_starts_the_shim_as_our_child_in_our_session() {
    let dir = tempfile::tempdir().unwrap();
    let exe = executable(dir.path(), "agent", STAND_IN);
    let cell_dir = dir.path().join("cells").join("3");
    std::fs::create_dir_all(&cell_dir).unwrap();
    let launch = CellLaunch {
        kernel_dir: dir.path().to_str().unwrap().to_owned(),
        cell_dir: cell_dir.to_str().unwrap().to_owned(),
        lang: tether_core::protocol::Lang::Shell,
        argv: vec!["/bin/sh".into(), "-c".into(), "echo 'hi there'".into()],
        marker: ("TETHER_CELL".into(), "k1-3".into()),
    };
    let mut os = LinuxOs::with_exe(&exe);
    let pid = os.spawn_cell(&launch).unwrap();
    let _guard = Owned { pid, group: false };
    let info = os.process(pid).unwrap();
    assert_eq!((info.ppid, info.sid), (std::process::id(), own_sid()));
    assert!(
        os.has_arg(pid, "shim"),
        "{:?} {:?}",
        std::fs::read_to_string(format!("/proc/{pid}/cmdline")),
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
    );
    assert_eq!(fd_target(pid, "1"), "/dev/null");
    assert_eq!(
        fd_target(pid, "2"),
        format!("{}/{SHIM_STDERR}", launch.cell_dir)
    );

    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    let json = cmdline
        .split(|&b| b == 0)
        .find(|a| a.starts_with(b"{"))
        .expect("launch arg");
    let back: CellLaunch = serde_json::from_slice(json).unwrap();
    assert_eq!(back, launch);
}

/// Environment variable that turns [`helper_op_command_spawns_daemon`] on.
const OP_DIR_ENV: &str = "TETHER_TEST_OP_COMMAND_DIR";

/// Not a test by itself: the "op command" that
/// [`an_op_command_that_spawned_a_daemon_reaches_eof`] runs in a child
/// process with its stdout and stderr on pipes.
#[test]
#[ignore = "helper, run by an_op_command_that_spawned_a_daemon_reaches_eof"]
fn helper_op_command_spawns_daemon() {
    let Some(dir) = std::env::var_os(OP_DIR_ENV) else {
        return;
    };
    let dir = PathBuf::from(dir);
    // An extra inheritable copy of stdout, as a careless parent might leave.
    // SAFETY: dup of our own stdout; the new descriptor is leaked on purpose.
    let extra = unsafe { libc::dup(1) };
    assert!(extra > 2);
    let mut os = LinuxOs::with_exe(dir.join("agent"));
    let pid = os.spawn_daemon(dir.to_str().unwrap(), "nonce-op").unwrap();
    println!("daemon-pid {pid}");
}

#[test]
fn an_op_command_that_spawned_a_daemon_reaches_eof() {
    let dir = tempfile::tempdir().unwrap();
    executable(dir.path(), "agent", STAND_IN);
    let child = spawn_retrying(
        Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "linux_os::tests::helper_op_command_spawns_daemon",
            ])
            .args(["--ignored", "--nocapture", "--test-threads=1"])
            .env(OP_DIR_ENV, dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    )
    .unwrap();
    // Like a client's exec: collect stdout and stderr until EOF. If the
    // daemon held either pipe this would never finish; bound it so the
    // test fails instead of hanging.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("op command output never reached EOF: the daemon holds its pipe")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pid: Pid = stdout
        .split_once("daemon-pid ")
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no daemon pid in {stdout}"));

    // The daemon outlived the op command, in its own session.
    let os = LinuxOs::new();
    let info = os
        .process(pid)
        .expect("daemon alive after the op command exited");
    assert_eq!((info.pgid, info.sid), (pid, pid));
    assert!(os.has_arg(pid, "nonce-op"));
    // It is no longer our grandchild's child we can reap; kill its group
    // and let its new parent reap it.
    rustix::process::kill_process_group(raw(pid), rustix::process::Signal::KILL).unwrap();
}

#[test]
fn a_cell_cgroup_holds_the_process_that_entered_it_and_is_removed_after() {
    let name = format!("tether-test-{}", std::process::id());
    let group = match cgroup::CellCgroup::create(&name) {
        Ok(g) => g,
        Err(why) => {
            tether_require::missing(
                "a_cell_cgroup_holds_the_process_that_entered_it_and_is_removed_after",
                tether_require::Need::Cgroup2,
                &why.to_string(),
            );
            return;
        }
    };
    let path = group.path.clone();
    let procs_fd = group.procs_fd();
    let mut cmd = Command::new("sleep");
    cmd.arg("300");
    // SAFETY: enter only calls write(2).
    unsafe {
        cmd.pre_exec(move || {
            cgroup::enter(procs_fd);
            Ok(())
        });
    }
    let child = cmd.spawn().unwrap();
    let pid = child.id();
    let guard = own(child);
    let mut os = LinuxOs::new();
    assert_eq!(os.cgroup_members(&path), vec![pid]);
    let own_line = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    assert!(
        own_line
            .lines()
            .any(|l| l.starts_with("0::") && l.ends_with(&name)),
        "{own_line}"
    );
    // Not ours: the test process itself stayed where it was.
    assert!(!os.cgroup_members(&path).contains(&std::process::id()));
    assert!(
        os.remove_cgroup(&path).is_err(),
        "a cgroup with a member stays"
    );
    assert!(Path::new(&path).is_dir());
    drop(guard); // killed and reaped
    assert_eq!(os.cgroup_members(&path), Vec::<Pid>::new());
    group.discard(); // closes the fd; the directory is empty now
    assert!(!Path::new(&path).exists(), "{path} was not removed");
    assert_eq!(os.remove_cgroup(&path), Ok(()), "absent is fine");
    // A directory that is not a cgroup is never removed.
    let plain = tempfile::tempdir().unwrap();
    assert!(os.remove_cgroup(plain.path().to_str().unwrap()).is_err());
    assert!(plain.path().is_dir());
}

#[test]
fn create_dir_makes_one_level_in_a_parent_that_exists() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().display().to_string();
    let mut os = LinuxOs::new();
    let deep = format!("{base}/gone/cells");
    assert_eq!(os.create_dir(&deep), Err(OsError::NotFound));
    assert!(!Path::new(&format!("{base}/gone")).exists());
    let one = format!("{base}/one");
    os.create_dir(&one).unwrap();
    os.create_dir(&one).unwrap();
    let mode = std::fs::metadata(&one).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
    std::fs::write(format!("{base}/file"), b"").unwrap();
    assert!(os.create_dir(&format!("{base}/file")).is_err());
}
