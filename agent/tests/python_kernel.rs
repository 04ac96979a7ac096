//! Python kernels through the real binary: one persistent interpreter, the
//! final expression shown, cancel by KeyboardInterrupt with the namespace
//! kept, an interpreter that ignores SIGINT killed after the grace period
//! (loss reported), a cell's subprocesses killed with it.

mod common;

use common::*;
use serde_json::json;
use std::path::Path;
use std::time::Duration;

fn python_root() -> Root {
    let mut r = Root::new();
    r.spawn_lang("py", "python", 300, 600_000);
    r
}

#[test]
fn namespace_persists_and_the_last_expression_is_shown() {
    let mut r = python_root();
    let (o, out, _) = r.run("py", 1, "x = 41\nprint('hi')\nx + 1");
    assert_eq!(o, json!({"outcome": "ok"}));
    assert_eq!(out, b"hi\n42\n");
    let (o, out, e) = r.run("py", 2, "1/0");
    assert_eq!(o["outcome"], "error");
    assert!(o["message"].as_str().unwrap().contains("ZeroDivisionError"));
    assert!(out.is_empty(), "{e:?}");
    let (o, _, _) = r.run("py", 3, "import sys; sys.exit(3)");
    assert_eq!(o, json!({"outcome": "exit", "code": 3}));
    let (o, out, _) = r.run(
        "py",
        4,
        "import os; print(os.environ['TETHER_CELL'].endswith(':4')); x",
    );
    assert_eq!(o, json!({"outcome": "ok"}));
    assert_eq!(out, b"True\n41\n");
}

#[test]
fn interrupt_keeps_the_namespace_and_kills_the_cells_subprocesses() {
    let mut r = python_root();
    let pids = r.file("pids");
    r.run("py", 1, "x = 5");
    let code = format!(
        "import subprocess, time\n\
         a = subprocess.Popen(['sleep', '1000'])\n\
         b = subprocess.Popen(['sh', '-c', 'trap \"\" TERM; while :; do sleep 1; done'], start_new_session=True, env={{}})\n\
         open({p:?}, 'w').write('%d\\n%d\\n' % (a.pid, b.pid))\n\
         time.sleep(1000)",
        p = pids.display().to_string()
    );
    r.submit("py", 2, code.as_bytes(), 0);
    assert!(eventually(Duration::from_secs(20), || pids_in(&pids).len() == 2));
    assert_eq!(r.cancel("py", 2), "escalating");
    let e = r.wait_done("py", 2);
    assert_eq!(outcome(&e), json!({"outcome": "cancelled"}));
    assert!(eventually(Duration::from_secs(20), || pids_in(&pids)
        .iter()
        .all(|p| !alive(*p))));
    let (o, out, _) = r.run("py", 3, "x");
    assert_eq!(o, json!({"outcome": "ok"}));
    assert_eq!(out, b"5\n", "the namespace survived the interrupt");
}

#[test]
fn an_interpreter_that_ignores_sigint_is_killed_and_the_loss_reported() {
    let mut r = python_root();
    r.run("py", 1, "x = 5");
    let flag = r.file("flag");
    let code = format!(
        "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nopen({:?}, 'w').write('1')\nwhile True: pass",
        flag.display().to_string()
    );
    r.submit("py", 2, code.as_bytes(), 0);
    assert!(eventually(Duration::from_secs(20), || flag.exists()));
    r.cancel("py", 2);
    let e = r.wait_done("py", 2);
    assert_eq!(outcome(&e), json!({"outcome": "cancelled"}));
    let err: String = e
        .iter()
        .filter(|e| e["kind"] == "output" && e["stream"] == "stderr")
        .map(|e| e["data"]["text"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert!(err.contains("namespace is lost"), "{e:?}");
    let (o, _, _) = r.run("py", 3, "x");
    assert_eq!(o["outcome"], "error", "a fresh interpreter has no x: {o}");
    let (o, out, _) = r.run("py", 4, "y = 2\ny * 3");
    assert_eq!(o, json!({"outcome": "ok"}));
    assert_eq!(out, b"6\n");
}

#[test]
fn python_timeout() {
    let mut r = python_root();
    r.submit_with(
        "py",
        1,
        "req-1",
        b"import time\ntime.sleep(1000)",
        100,
        Some(300),
    );
    let e = r.wait_done("py", 1);
    assert_eq!(outcome(&e), json!({"outcome": "timed_out"}));
}

/// Field `n` of `/proc/PID/stat` after `comm` (0 state, 1 ppid, 2 pgrp,
/// 3 session).
fn stat_field(pid: u32, n: usize) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .nth(n)?
        .parse()
        .ok()
}

/// Pids listed in `{group}/cgroup.procs`.
fn cgroup_procs(group: &str) -> Vec<u32> {
    std::fs::read_to_string(format!("{group}/cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.parse().ok())
        .collect()
}

/// The pid of the `started` entry (the interpreter).
fn started_pid(entries: &[serde_json::Value]) -> u32 {
    entries
        .iter()
        .find(|e| e["kind"] == "started")
        .and_then(|e| e["pid"].as_u64())
        .unwrap_or_else(|| panic!("no started entry: {entries:?}")) as u32
}

/// A Python cell starts a `setsid` + `env -i` daemon (stdio on
/// /dev/null) through `os.system` and blocks. The daemon drops the marker,
/// has a session of its own and is reparented to the interpreter's shim
/// (the subreaper), not to the interpreter: only the cell's cgroup, which
/// held the interpreter while the cell ran, still knows it. Cancel:
/// KeyboardInterrupt keeps the namespace, and nothing of the cell
/// survives.
#[test]
fn a_setsid_env_i_daemon_of_a_python_cell_dies_with_the_cancel() {
    if !tether_require::have(
        "a_setsid_env_i_daemon_of_a_python_cell_dies_with_the_cancel",
        tether_require::Need::Cgroup2,
    ) {
        return;
    }
    let mut r = python_root();
    let (o, _, first) = r.run("py", 1, "x = 7");
    assert_eq!(o, json!({"outcome": "ok"}));
    let interp = started_pid(&first);
    let pids = r.file("pids");
    let p = pids.display().to_string();
    let code = format!(
        "import os, time\n\
         os.system(\"setsid env -i /bin/sh -c 'echo $$ >> {p}; while :; do sleep 1; done' </dev/null >/dev/null 2>&1 &\")\n\
         time.sleep(300)"
    );
    r.submit("py", 2, code.as_bytes(), 0);
    assert!(
        eventually(Duration::from_secs(20), || pids_in(&pids).len() == 1),
        "the daemon never registered: {:?}",
        pids_in(&pids)
    );
    let daemon = pids_in(&pids)[0];
    let cell = r.path().join("kernels/py/cells/2");
    let group = std::fs::read_to_string(cell.join("cgroup"))
        .unwrap_or_else(|e| panic!("cgroup v2 is writable but no cgroup was recorded: {e}"));
    let group = group.trim_end().to_owned();
    let launch: serde_json::Value =
        serde_json::from_slice(&std::fs::read(cell.join("launch.json")).unwrap()).unwrap();
    let shim = launch["shim_pid"].as_u64().unwrap() as u32;
    // The escape class: alive, no marker, its own session, a child of the
    // interpreter's shim; a member of the cell's cgroup, as the
    // interpreter is while the cell runs (the shim is not).
    let marker = format!("TETHER_CELL={}:2", r.nonce("py"));
    assert!(alive(daemon));
    assert!(
        !procs_mentioning(&marker).contains(&daemon),
        "it has no marker"
    );
    assert_eq!(stat_field(daemon, 3), Some(daemon), "its own session");
    assert_eq!(stat_field(daemon, 1), Some(shim), "reparented to the shim");
    let members = cgroup_procs(&group);
    assert!(members.contains(&daemon), "{members:?}");
    assert!(members.contains(&interp), "{members:?}");
    assert!(!members.contains(&shim), "{members:?}");

    assert_eq!(r.cancel("py", 2), "escalating");
    let e = r.wait_done("py", 2);
    assert_eq!(outcome(&e), json!({"outcome": "cancelled"}), "{e:?}");
    let survivors = || -> Vec<u32> {
        let mut s: Vec<u32> = pids_in(&pids).into_iter().filter(|p| alive(*p)).collect();
        s.extend(procs_mentioning(&marker));
        s.extend(procs_mentioning(&p));
        s.extend(cgroup_procs(&group));
        s.sort();
        s.dedup();
        s
    };
    assert!(
        eventually(Duration::from_secs(20), || survivors().is_empty()),
        "survivors of the cancelled cell: {:?}",
        survivors()
    );
    assert!(alive(interp), "the interpreter is spared");
    let (o, out, e) = r.run("py", 3, "x");
    assert_eq!(o, json!({"outcome": "ok"}), "{e:?}");
    assert_eq!(out, b"7\n", "the namespace survived the cancel");
    assert_eq!(started_pid(&e), interp, "the same interpreter");
    assert!(
        eventually(Duration::from_secs(20), || !Path::new(&group).exists()),
        "the cancelled cell's empty cgroup {group} was not removed"
    );
}

/// Cancelling a later Python cell never touches what an earlier, finished
/// cell of the same kernel left running: a subprocess that carries the
/// earlier cell's marker, and one started with an empty environment. Both
/// are children of the one interpreter, as the later cell's own are. The
/// earlier cell's own cancel then kills them.
#[test]
fn cancelling_a_later_python_cell_spares_an_earlier_cells_leftovers() {
    let cgroups = cgroup_v2_writable();
    let mut r = python_root();
    let (one, two) = (r.file("one"), r.file("two"));
    let spawn = |file: &Path, env: &str| {
        format!(
            "subprocess.Popen(['sh', '-c', 'echo $$ >> {}; while :; do sleep 1; done']{env})\n",
            file.display()
        )
    };
    let mut code = String::from("import subprocess\n");
    code.push_str(&spawn(&one, ""));
    if cgroups.is_ok() {
        // Without a cell cgroup nothing tells this one apart from the
        // later cell's own children.
        code.push_str(&spawn(&one, ", env={}"));
    }
    let n = if cgroups.is_ok() { 2 } else { 1 };
    let (o, _, e) = r.run("py", 1, &code);
    assert_eq!(o, json!({"outcome": "ok"}), "{e:?}");
    assert!(eventually(Duration::from_secs(20), || pids_in(&one).len() == n));
    let code = format!(
        "import subprocess, time\n{}time.sleep(300)",
        spawn(&two, "")
    );
    r.submit("py", 2, code.as_bytes(), 0);
    assert!(eventually(Duration::from_secs(20), || pids_in(&two).len() == 1));
    assert_eq!(r.cancel("py", 2), "escalating");
    let e = r.wait_done("py", 2);
    assert_eq!(outcome(&e), json!({"outcome": "cancelled"}), "{e:?}");
    assert!(eventually(Duration::from_secs(20), || pids_in(&two)
        .iter()
        .all(|p| !alive(*p))));
    for pid in pids_in(&one) {
        assert!(
            alive(pid),
            "cell 1's process {pid} was killed by cell 2's cancel"
        );
    }
    assert_eq!(r.cancel("py", 1), "already_done");
    assert!(
        eventually(Duration::from_secs(20), || pids_in(&one)
            .iter()
            .all(|p| !alive(*p))),
        "cell 1's own cancel left {:?}",
        pids_in(&one)
    );
    if let Err(why) = cgroups {
        tether_require::missing(
            "cancelling_a_later_python_cell_spares_an_earlier_cells_leftovers (its env -i child)",
            tether_require::Need::Cgroup2,
            &why,
        );
    }
}

/// The daemon of an idle Python kernel is killed -9: its interpreter and
/// the interpreter's shim live on, still polling `py/run`. A new daemon
/// (spawn again) must kill them (recorded in `py/launch.json`) before it
/// hands out the next cell, or the old interpreter runs it too.
#[test]
fn a_new_daemon_kills_the_interpreter_an_earlier_daemon_left() {
    let mut r = python_root();
    let (o, _, e) = r.run("py", 1, "x = 1");
    assert_eq!(o, json!({"outcome": "ok"}));
    let old_interp = started_pid(&e);
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(r.path().join("kernels/py/py/launch.json")).unwrap())
            .unwrap();
    let old_shim = record["shim_pid"].as_u64().unwrap() as u32;
    let identity: serde_json::Value =
        serde_json::from_slice(&std::fs::read(r.path().join("kernels/py/identity.json")).unwrap())
            .unwrap();
    let daemon = identity["pid"].as_u64().unwrap() as u32;
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &daemon.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    assert!(eventually(Duration::from_secs(20), || !alive(daemon)));
    assert!(alive(old_shim) && alive(old_interp), "the orphans live on");

    r.spawn_lang("py", "python", 300, 600_000);
    let side = r.file("side");
    let code = format!(
        "open({:?}, 'a').write('ran\\n')",
        side.display().to_string()
    );
    let (o, _, e) = r.run("py", 2, &code);
    assert_eq!(o, json!({"outcome": "ok"}), "{e:?}");
    assert_ne!(started_pid(&e), old_interp, "a new interpreter ran it");
    assert!(
        eventually(Duration::from_secs(20), || !alive(old_shim)
            && !alive(old_interp)),
        "the old interpreter's shim {old_shim} or interpreter {old_interp} survived"
    );
    assert_eq!(
        std::fs::read_to_string(&side).unwrap(),
        "ran\n",
        "the cell ran exactly once"
    );
}

/// What the interactive prompt and IPython do that a namespace dict alone
/// would not (live-e2e's conformance suite has the cases and their
/// sources): the namespace is the `__main__` module (a cell's function
/// pickles by name), a trailing `;` hides the value, `sys.exit("msg")`
/// prints msg and gives 1, and IPython's `!cmd` runs in the shell.
#[test]
fn the_namespace_is_main_and_cells_follow_the_prompts_rules() {
    let mut r = python_root();
    let (o, out, _) = r.run(
        "py",
        1,
        "import pickle\ndef f():\n    return 7\npickle.loads(pickle.dumps(f))()",
    );
    assert_eq!(o, json!({"outcome": "ok"}));
    assert_eq!(out, b"7\n");
    let (o, out, _) = r.run("py", 2, "x = 5\nx;  # hidden");
    assert_eq!(o, json!({"outcome": "ok"}));
    assert!(out.is_empty(), "{}", String::from_utf8_lossy(&out));
    let (o, _, e) = r.run("py", 3, "import sys; sys.exit('bye')");
    assert_eq!(o, json!({"outcome": "exit", "code": 1}));
    let err: String = e
        .iter()
        .filter(|x| x["kind"] == "output" && x["stream"] == "stderr")
        .map(|x| x["data"]["text"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(err, "bye\n");
    let (o, out, _) = r.run("py", 4, "!echo $x {x + 1}\n_exit_code");
    assert_eq!(o, json!({"outcome": "ok"}));
    assert_eq!(out, b"5 6\n0\n");
}

/// The interpreter's shim killed -9 while a Python cell runs a thread and
/// two subprocesses (one its own session without the marker, ignoring
/// TERM): the interpreter goes with its shim (its namespace is the
/// kernel's state: a reported loss), and the cell's subprocesses are
/// ended as a cancel ends them before the cell resolves — none runs on
/// after the result. The next cell gets a fresh interpreter.
#[test]
fn a_python_cells_processes_are_gone_when_its_killed_shim_resolves_it() {
    let mut r = python_root();
    let pids = r.file("pids");
    r.run("py", 1, "x = 5");
    let code = format!(
        "import subprocess, threading, time\n\
         threading.Thread(target=lambda: time.sleep(1000), daemon=True).start()\n\
         a = subprocess.Popen(['sleep', '1000'])\n\
         b = subprocess.Popen(['sh', '-c', 'trap \"\" TERM; while :; do sleep 1; done'], start_new_session=True, env={{}})\n\
         open({p:?}, 'w').write('%d\\n%d\\n' % (a.pid, b.pid))\n\
         time.sleep(1000)",
        p = pids.display().to_string()
    );
    r.submit("py", 2, code.as_bytes(), 0);
    assert!(eventually(Duration::from_secs(20), || pids_in(&pids).len() == 2));
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(r.path().join("kernels/py/py/launch.json")).unwrap())
            .unwrap();
    let shim = record["shim_pid"].as_u64().unwrap().to_string();
    assert!(std::process::Command::new("kill")
        .args(["-KILL", &shim])
        .status()
        .unwrap()
        .success());
    let e = r.wait_done("py", 2);
    let survivors: Vec<u32> = pids_in(&pids).into_iter().filter(|p| alive(*p)).collect();
    assert_eq!(survivors, Vec::<u32>::new(), "ran on after the result");
    let died = tether_core::agent::python::died(None, tether_core::agent::python::SHIM_DIED);
    assert_eq!(outcome(&e), serde_json::to_value(&died).unwrap(), "{e:?}");
    let (o, out, e) = r.run("py", 3, "'x' in globals()");
    assert_eq!(o, json!({"outcome": "ok"}), "{e:?}");
    assert_eq!(out, b"False\n", "a fresh interpreter");
}

/// The shim records a cell `started` as it hands it to the interpreter,
/// and a fresh interpreter may still be starting then: a cancel that
/// lands before the bootstrap has its SIGINT handler must not kill it
/// (live `python_orphans` seed 1066: the first cell of a fresh daemon,
/// cancelled at once, told of an interpreter death nobody caused but the
/// cancel). The interpreter starts with SIGINT ignored until the
/// bootstrap takes it.
#[test]
fn a_cancel_as_a_fresh_interpreter_starts_leaves_it_alive() {
    for round in 0..3 {
        // A grace long enough for any interpreter to start here: the
        // SIGINT is what is judged, not the escalation after it.
        let mut r = Root::new();
        r.spawn_lang("py", "python", 10_000, 600_000);
        let journal = r.path().join("kernels/py/cells/1/journal");
        r.submit("py", 1, b"import time\ntime.sleep(30)", 0);
        assert!(eventually(Duration::from_secs(20), || {
            std::fs::read_to_string(&journal).is_ok_and(|j| j.contains("\"started\""))
        }));
        r.cancel("py", 1);
        let e = r.wait_done("py", 1);
        let said = format!("{e:?}");
        assert!(
            !said.contains("namespace is lost"),
            "round {round}: the interpreter died: {said}"
        );
        let (o, out, e) = r.run("py", 2, "print('alive')");
        assert_eq!(o, json!({"outcome": "ok"}), "{e:?}");
        assert_eq!(out, b"alive\n");
        assert!(!format!("{e:?}").contains("namespace is lost"), "{e:?}");
    }
}

/// Where a held start of the interpreter waits ([`held_start`]).
enum Hold {
    /// In `sitecustomize`, which Python imports as it starts: before the
    /// bootstrap's first line.
    BeforeBootstrap,
    /// In the bootstrap's `import json`, after it noted its parent.
    InBootstrap,
}

/// A fresh interpreter held in its start (`hold`, through a module first
/// on `PYTHONPATH` that waits for a gate file, then loads the real one),
/// its first cell already in its pipe, when its daemon and then its shim
/// are killed -9; `wrapper`: `python3` is a shell script that forks the
/// real one (not `exec`). Once the gate opens, nothing of it may run the
/// cell (nobody reads what it reports, and what it starts would be out of
/// every shutdown's reach: simulated `python_orphans` seed 1079), and
/// every process of it must end.
fn held_start(hold: Hold, wrapper: bool) {
    let mut r = Root::new();
    let slow = r.file("slow-imports");
    std::fs::create_dir_all(&slow).unwrap();
    let (gate, reached) = (r.file("gate"), r.file("reached"));
    let module = match hold {
        Hold::BeforeBootstrap => "sitecustomize",
        Hold::InBootstrap => "json",
    };
    std::fs::write(
        slow.join(format!("{module}.py")),
        format!(
            "import os, sys, time\n\
             open({reached:?}, 'w').close()\n\
             while not os.path.exists({gate:?}):\n    time.sleep(0.02)\n\
             if __name__ == 'json':\n\
             \x20   sys.path.remove(os.path.dirname(os.path.abspath(__file__)))\n\
             \x20   del sys.modules['json']\n\
             \x20   import json\n\
             \x20   sys.modules['json'] = json\n",
            reached = reached.display().to_string(),
            gate = gate.display().to_string(),
        ),
    )
    .unwrap();
    let slow_dir = slow.display().to_string();
    r.extra_env.push(("PYTHONPATH".into(), slow_dir.clone()));
    if wrapper {
        let real = std::process::Command::new("sh")
            .args(["-c", "command -v python3"])
            .output()
            .unwrap();
        let real = String::from_utf8(real.stdout).unwrap().trim().to_owned();
        let bin = r.file("wrapper-bin");
        std::fs::create_dir_all(&bin).unwrap();
        let script = bin.join("python3");
        std::fs::write(&script, format!("#!/bin/sh\n{real} \"$@\"\n")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = std::env::var("PATH").unwrap_or_default();
        r.path_env = Some(format!("{}:{path}", bin.display()).into());
    }
    r.spawn_lang("py", "python", 300, 600_000);
    let ran = r.file("ran");
    let code = format!("open({:?}, 'w').write('ran')", ran.display().to_string());
    r.submit("py", 1, code.as_bytes(), 0);
    let journal = r.path().join("kernels/py/cells/1/journal");
    assert!(eventually(Duration::from_secs(20), || {
        reached.exists()
            && std::fs::read_to_string(&journal).is_ok_and(|j| j.contains("\"started\""))
    }));
    let pid_in = |file: &str, field: &str| -> u32 {
        let v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(r.path().join(file)).unwrap()).unwrap();
        v[field].as_u64().unwrap() as u32
    };
    let daemon = pid_in("kernels/py/identity.json", "pid");
    let shim = pid_in("kernels/py/py/launch.json", "shim_pid");
    for pid in [daemon, shim] {
        assert!(std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .unwrap()
            .success());
        assert!(eventually(Duration::from_secs(20), || !alive(pid)));
    }
    std::fs::write(&gate, "").unwrap();
    assert!(
        eventually(Duration::from_secs(20), || procs_mentioning(&slow_dir)
            .is_empty()),
        "the interpreter ran on: {:?}",
        procs_mentioning(&slow_dir)
    );
    assert!(!ran.exists(), "the cell ran under a dead shim");
}

/// Killed before the bootstrap's first line (a slow wrapper such as
/// pyenv's shim, then Python's own start): the interpreter dies with its
/// shim.
#[test]
fn an_interpreter_whose_shim_died_before_its_bootstrap_runs_no_cell() {
    held_start(Hold::BeforeBootstrap, false);
}

/// Started by a wrapper that forks it: the wrapper dies with the shim,
/// and the bootstrap, its parent gone, runs no cell.
#[test]
fn an_interpreter_a_wrapper_forked_runs_no_cell_once_its_shim_died() {
    held_start(Hold::InBootstrap, true);
}
