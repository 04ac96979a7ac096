//! The background process (`tether mux`) that keeps a sandbox's channel
//! open between `tether` commands, end to end with real processes on the
//! local backend, on docker and over ssh (the Modal stand-in's are in
//! `tests/modal.rs`): warm runs go through it (no new exec, no new
//! connection), its death by `kill -9` mid-cell, or its channel's process
//! killed on the sandbox, loses nothing and runs nothing twice, a stopped
//! one costs a bounded wait, it exits when idle, and a stale or bad
//! socket costs a note, never a hang or a failed cell.

mod common;

use common::mux::{
    channel_killed_mid_cell, cut_mid_cell, local_sh, mux_killed_mid_cell, num, ok, open_mux,
    status, stop_muxes, wait_until, warm_runs_use_the_background_process, Sandbox,
};
use common::{alive, finish, kill, show, text, World};
use std::path::Path;
use tether_require::sshd::Sshd;
use tether_require::{have, Need};

/// With `--persist 1s`, the background process exits a second after the
/// last `tether` left, and removes its socket; the next run starts a new
/// one without a note.
fn idle_exit(w: &World) {
    stop_muxes(w);
    ok(&w.tether(&["--persist", "1s", "run", "--kernel", "idle", "true"]));
    // Its log says why it stopped: under load it may be gone before a
    // poll for its pid would see it run.
    let logs = |w: &World| -> String {
        std::fs::read_dir(w.runtime_dir().join("tether"))
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
            .filter_map(|e| std::fs::read_to_string(e.path()).ok())
            .collect()
    };
    wait_until("the idle background process exits", || {
        logs(w).contains("stopped: Idle") && w.mux_pids().is_empty()
    });
    let sockets = |w: &World| -> Vec<String> {
        std::fs::read_dir(w.runtime_dir().join("tether"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".sock"))
            .collect()
    };
    assert_eq!(sockets(w), Vec::<String>::new(), "its socket is removed");
    let out = w.tether(&["--persist", "1s", "run", "--kernel", "idle", "echo back"]);
    ok(&out);
    assert_eq!(text(&out.stdout), "back\n");
    assert_eq!(text(&out.stderr), "", "{}", show(&out));
}

/// `tether stop` stops the kernels and retires the background process.
fn stop_retires_it(w: &World) {
    ok(&w.run("k", "true"));
    let pid = num(&open_mux(w), &["pid"]) as u32;
    ok(&w.tether(&["stop"]));
    wait_until("the background process exits after `tether stop`", || {
        !alive(pid)
    });
}

/// A socket path that holds a plain file: the run works, with a note, and
/// a new background process replaces the file. A socket directory others
/// may read: the run works, with a note, and starts none.
fn bad_socket_and_bad_dir(w: &World) {
    ok(&w.run("k", "true"));
    let first = open_mux(w);
    let pid = num(&first, &["pid"]) as u32;
    kill("KILL", pid);
    let dir = w.runtime_dir().join("tether");
    let socket = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "sock"))
        .expect("the socket is left behind");
    std::fs::remove_file(&socket).unwrap();
    std::fs::write(&socket, "not a socket").unwrap();
    let out = w.run("k", "echo works");
    ok(&out);
    assert_eq!(text(&out.stdout), "works\n");
    assert!(
        text(&out.stderr).contains("does not answer"),
        "{}",
        show(&out)
    );
    let second = open_mux(w);
    assert_ne!(second["pid"], first["pid"]);
    stop_muxes(w);
    set_mode(&dir, 0o755);
    let out = w.run("k", "echo still works");
    ok(&out);
    assert_eq!(text(&out.stdout), "still works\n");
    assert!(text(&out.stderr).contains("mode 0700"), "{}", show(&out));
    assert_eq!(w.mux_pids(), Vec::<u32>::new(), "none started");
    set_mode(&dir, 0o700);
}

/// A background process that is stopped (`SIGSTOP`) accepts connections
/// and never answers: the `tether` gives up on it within its ack bound and
/// runs the cell on its own transport, once.
fn stopped_mux(w: &World, sandbox: &Sandbox) {
    let side = format!("{}/stopped-side", sandbox.dir);
    ok(&w.run("k", "true"));
    let pid = num(&open_mux(w), &["pid"]) as u32;
    kill("STOP", pid);
    let out = w.run("k", &format!("echo ran >> {side}; echo done"));
    kill("CONT", pid);
    ok(&out);
    assert_eq!(text(&out.stdout), "done\n", "{}", show(&out));
    assert_eq!((sandbox.sh)(&format!("cat {side}")), "ran\n", "ran once");
    stop_muxes(w);
}

/// Three `tether mux` for one sandbox started at once: one serves, the
/// other two see its lock and exit at once.
fn one_per_sandbox(w: &World) {
    stop_muxes(w);
    let mut muxes: Vec<_> = (0..3)
        .map(|_| {
            w.cmd()
                .args(["mux", "--idle", "60s"])
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut exited = Vec::new();
    wait_until("two of the three exit", || {
        for (i, mux) in muxes.iter_mut().enumerate() {
            if !exited.contains(&i) && mux.try_wait().unwrap().is_some() {
                exited.push(i);
            }
        }
        exited.len() >= 2
    });
    assert_eq!(exited.len(), 2, "one keeps serving");
    let serving = (0..3).find(|i| !exited.contains(i)).unwrap();
    let status = status(w).expect("the third serves");
    assert_eq!(num(&status, &["pid"]), u64::from(muxes[serving].id()));
    stop_muxes(w);
    let refused = muxes
        .into_iter()
        .map(|mux| text(&finish(mux, "tether mux").stderr))
        .filter(|said| said.contains("AlreadyRunning"))
        .count();
    assert_eq!(refused, 2, "two saw the lock held");
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn local_warm_runs_use_the_background_process() {
    warm_runs_use_the_background_process(&World::new());
}

#[test]
fn local_background_process_killed_mid_cell_loses_nothing() {
    let w = World::new();
    let scratch = tempfile::tempdir().unwrap();
    let sandbox = Sandbox {
        dir: scratch.path().to_string_lossy().into_owned(),
        sh: &local_sh,
    };
    let _ = mux_killed_mid_cell(&w, &sandbox);
}

#[test]
fn local_channel_killed_mid_cell_loses_nothing() {
    let w = World::new();
    let scratch = tempfile::tempdir().unwrap();
    let sandbox = Sandbox {
        dir: scratch.path().to_string_lossy().into_owned(),
        sh: &local_sh,
    };
    channel_killed_mid_cell(&w, &sandbox);
}

#[test]
fn local_stopped_background_process_costs_a_bounded_wait() {
    let w = World::new();
    let scratch = tempfile::tempdir().unwrap();
    let sandbox = Sandbox {
        dir: scratch.path().to_string_lossy().into_owned(),
        sh: &local_sh,
    };
    stopped_mux(&w, &sandbox);
}

#[test]
fn local_one_background_process_per_sandbox() {
    one_per_sandbox(&World::new());
}

#[test]
fn local_background_process_exits_when_idle() {
    idle_exit(&World::new());
}

#[test]
fn local_stop_retires_the_background_process() {
    stop_retires_it(&World::new());
}

#[test]
fn local_bad_socket_or_directory_falls_back_with_a_note() {
    bad_socket_and_bad_dir(&World::new());
}

/// A container of the test image, removed on drop.
struct Container(String);

impl Drop for Container {
    fn drop(&mut self) {
        let _ = std::process::Command::new("docker")
            .args(["rm", "-f", "-v", &self.0])
            .output();
    }
}

/// All of the above on docker, in one container.
#[test]
fn on_docker_the_background_process_keeps_the_channel() {
    if !have(module_path!(), Need::Docker) {
        return;
    }
    let name = format!("tether-persist-test-{}", std::process::id());
    let container = Container(name.clone());
    let w = World::with_backend(&format!("docker:{name}?image=tether-sandbox:latest"));
    let sh = |script: &str| {
        let out = std::process::Command::new("docker")
            .args(["exec", &container.0, "sh", "-c", script])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    warm_runs_use_the_background_process(&w);
    sh("mkdir -p /tmp/persist-test");
    let sandbox = Sandbox {
        dir: "/tmp/persist-test".into(),
        sh: &sh,
    };
    let _ = mux_killed_mid_cell(&w, &sandbox);
    channel_killed_mid_cell(&w, &sandbox);
    stopped_mux(&w, &sandbox);
    one_per_sandbox(&w);
    stop_retires_it(&w);
    idle_exit(&w);
    bad_socket_and_bad_dir(&w);
    drop(w);
}

/// Over ssh (a private sshd on loopback, whose log counts connections):
/// the background process holds the channel as a session on the host's
/// one connection, so warm `tether run`s open no connection and no
/// session of their own; the background process killed, the channel's
/// process on the host killed, or the ssh master killed while a cell
/// waits: the cell completes once, its output whole and in order; only
/// the killed master costs a connection (its successor's).
#[test]
fn over_ssh_the_background_process_keeps_the_connection_and_the_channel() {
    if !have(module_path!(), Need::Sshd) {
        return;
    }
    let sshd = Sshd::start();
    let w = World::with_backend(&sshd.spec());
    let scratch = tempfile::tempdir().unwrap();
    let sandbox = Sandbox {
        dir: scratch.path().to_string_lossy().into_owned(),
        sh: &local_sh,
    };
    let connections = sshd.connections();
    warm_runs_use_the_background_process(&w);
    assert_eq!(
        sshd.connections() - connections,
        1,
        "one connection for the first `tether`, the background process and the warm \
         runs:\n{}",
        sshd.log()
    );
    let _ = mux_killed_mid_cell(&w, &sandbox);
    channel_killed_mid_cell(&w, &sandbox);
    assert_eq!(
        sshd.connections() - connections,
        1,
        "neither a killed background process nor a killed channel costs a connection:\n{}",
        sshd.log()
    );
    let cut = cut_mid_cell(&w, &sandbox, "master-killed", |_| {
        let masters = sshd.masters();
        assert_eq!(masters.len(), 1, "one master: {masters:?}");
        kill("KILL", masters[0]);
    });
    ok(&cut.run);
    let after = open_mux(&w);
    assert_eq!(
        after["pid"], cut.before["pid"],
        "the same background process"
    );
    assert_eq!(
        sshd.connections() - connections,
        2,
        "one new connection after the master was killed:\n{}",
        sshd.log()
    );
    stop_retires_it(&w);
    drop(w);
}
