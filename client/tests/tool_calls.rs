//! Tool calls (issue 10), live on `local` and `docker`, real processes:
//! shell cells (`tether-call`) and Python cells (`tether.call`) whose calls
//! are answered by a `--tools` handler script on this host. The handler
//! counts its runs in a file, so "ran exactly N times" is observed, not
//! assumed; the sandbox's files are read through the backend (a plain read
//! locally, `docker exec` on docker).

mod common;

use common::{first_line, kill, show, text, wait_bounded, World, BOUND};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const IMAGE: &str = "tether-sandbox:latest";

/// A sandbox (local or a fresh docker container) with its tether world
/// and a host directory holding the handler and its run counter.
struct Sandbox {
    world: World,
    /// Declared after `world`: removed after the world's `tether stop`.
    container: Container,
    host: tempfile::TempDir,
}

/// A docker container of the test, removed on drop.
struct Container(Option<String>);

impl Drop for Container {
    fn drop(&mut self) {
        if let Some(c) = &self.0 {
            let _ = Command::new("docker").args(["rm", "-f", "-v", c]).output();
        }
    }
}

impl Sandbox {
    fn local() -> Sandbox {
        Sandbox::with(World::new(), None)
    }

    /// `None` (after a visible skip, or a failure under `TETHER_REQUIRE`)
    /// when docker is not there.
    fn docker(test: &str) -> Option<Sandbox> {
        if !tether_require::have(test, tether_require::Need::Docker) {
            return None;
        }
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("tether-tools-{}-{n}", std::process::id());
        let world = World::with_backend(&format!("docker:{name}?image={IMAGE}"));
        Some(Sandbox::with(world, Some(name)))
    }

    fn with(world: World, container: Option<String>) -> Sandbox {
        let host = tempfile::Builder::new()
            .prefix("tether-tools")
            .tempdir()
            .unwrap();
        // The call's JSON comes on stdin; the result echoes the tool's
        // name and the call, and the run is counted first.
        let handler = format!(
            "#!/bin/sh\necho run >> {count}\nread -r call\n\
             case \"$TETHER_TOOL\" in\n\
               fail) echo \"no such luck\" >&2; exit 3 ;;\n\
               text) echo \"plain words\" ;;\n\
               slow) sleep 3; echo late ;;\n\
               huge) head -c 5000000 /dev/zero | tr '\\0' x ;;\n\
               *) echo \"{{\\\"tool\\\": \\\"$TETHER_TOOL\\\", \\\"call\\\": $call}}\" ;;\n\
             esac\n",
            count = host.path().join("count").display()
        );
        let path = host.path().join("handler");
        std::fs::write(&path, handler).unwrap();
        Command::new("chmod").arg("+x").arg(&path).status().unwrap();
        Sandbox {
            world,
            container: Container(container),
            host,
        }
    }

    fn handler(&self) -> String {
        self.host.path().join("handler").display().to_string()
    }

    /// `tether [--json] run --lang LANG --kernel LANG --tools HANDLER CODE`.
    fn run_cell(&self, json: bool, lang: &str, code: &str) -> std::process::Output {
        let handler = self.handler();
        let mut args = vec![
            "run", "--lang", lang, "--kernel", lang, "--tools", &handler, code,
        ];
        if json {
            args.insert(0, "--json");
        }
        self.world.tether(&args)
    }

    /// How many times the handler ran.
    fn runs(&self) -> usize {
        std::fs::read_to_string(self.host.path().join("count"))
            .map(|s| s.lines().count())
            .unwrap_or(0)
    }

    /// A path in the sandbox (under the world's root, which is the same
    /// path inside the container).
    fn path(&self, name: &str) -> PathBuf {
        self.world.root.path().join(name)
    }

    /// Creates `path` in the sandbox.
    fn touch(&self, path: &Path) {
        match &self.container.0 {
            None => std::fs::write(path, b"").unwrap(),
            Some(c) => {
                let ok = Command::new("docker")
                    .args(["exec", c, "touch"])
                    .arg(path)
                    .status()
                    .unwrap()
                    .success();
                assert!(ok, "docker exec touch {}", path.display());
            }
        }
    }

    /// The contents of `path` in the sandbox, if it exists.
    fn read(&self, path: &Path) -> Option<String> {
        match &self.container.0 {
            None => std::fs::read_to_string(path).ok(),
            Some(c) => {
                let out = Command::new("docker")
                    .args(["exec", c, "cat"])
                    .arg(path)
                    .output()
                    .unwrap();
                out.status
                    .success()
                    .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
            }
        }
    }

    /// Waits until `path` exists in the sandbox (at most [`BOUND`]).
    fn wait_for(&self, path: &Path) -> String {
        let start = Instant::now();
        loop {
            if let Some(s) = self.read(path) {
                return s;
            }
            assert!(start.elapsed() < BOUND, "{} did not appear", path.display());
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn json_lines(stdout: &[u8]) -> Vec<serde_json::Value> {
    text(stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The stdout text of `output` events.
fn stdout_text(lines: &[serde_json::Value]) -> String {
    lines
        .iter()
        .filter(|l| l["event"] == "output" && l["stream"] == "stdout")
        .filter_map(|l| l["data"]["text"].as_str())
        .collect()
}

/// Checks lines `R1 {json}` … `R3 {json}`: each result is what the handler
/// returned for that call (the tool's name and the call's arguments), once
/// (or, across a killed client, repeated identically: output delivered
/// before the client died may come again on resume, never a second
/// answer).
fn assert_results(out: &str, tool: &str, repeats: bool) {
    for i in 1..=3 {
        let prefix = format!("R{i} ");
        let line = out
            .lines()
            .find(|l| l.starts_with(&prefix))
            .unwrap_or_else(|| panic!("no result {i} in {out:?}"));
        let v: serde_json::Value = serde_json::from_str(&line[prefix.len()..]).unwrap();
        assert_eq!(v["tool"], tool, "{line}");
        assert_eq!(v["call"]["name"], tool, "{line}");
        assert_eq!(v["call"]["args"]["i"], i, "{line}");
        let same: Vec<&str> = out.lines().filter(|l| l.starts_with(&prefix)).collect();
        if repeats {
            assert!(same.iter().all(|l| *l == line), "one answer: {out:?}");
        } else {
            assert_eq!(same.len(), 1, "result {i} once: {out:?}");
        }
    }
}

const SHELL_THREE: &str =
    "for i in 1 2 3; do r=$(tether-call echo \"{\\\"i\\\": $i}\") || exit 9; echo \"R$i $r\"; done";

const PYTHON_THREE: &str = "import json, tether\n\
for i in (1, 2, 3):\n    r = tether.call('echo', {'i': i})\n    print('R%d %s' % (i, json.dumps(r)))\n";

fn three_calls(s: &Sandbox, lang: &str, code: &str) {
    let out = s.run_cell(true, lang, code);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let lines = json_lines(&out.stdout);
    assert_results(&stdout_text(&lines), "echo", false);
    assert_eq!(s.runs(), 3, "the handler ran once per call");
    let kinds = |k: &str| lines.iter().filter(|l| l["event"] == k).count();
    assert_eq!(kinds("tool_call"), 3, "{}", show(&out));
    assert_eq!(kinds("tool_replied"), 3);
    assert_eq!(kinds("tool_answered"), 3);
}

/// The cell makes call 1, then waits for `go` in the sandbox, then makes
/// calls 2 and 3. `tether run` is killed (-9) once call 1's answer reached
/// the sandbox; `tether resume --tools` finishes the cell. The handler ran
/// exactly three times; every result arrived once.
fn killed_after_the_first_call(s: &Sandbox, lang: &str) {
    let go = s.path(&format!("go-{lang}"));
    let code = match lang {
        "shell" => format!(
            "r=$(tether-call echo '{{\"i\": 1}}') && echo \"R1 $r\"\n\
             while [ ! -e {go} ]; do sleep 0.05; done\n\
             for i in 2 3; do r=$(tether-call echo \"{{\\\"i\\\": $i}}\") || exit 9; echo \"R$i $r\"; done",
            go = go.display()
        ),
        _ => format!(
            "import json, os, time, tether\n\
             print('R1 %s' % json.dumps(tether.call('echo', {{'i': 1}})), flush=True)\n\
             while not os.path.exists({go:?}):\n    time.sleep(0.05)\n\
             for i in (2, 3):\n    print('R%d %s' % (i, json.dumps(tether.call('echo', {{'i': i}}))))\n",
            go = go.display().to_string()
        ),
    };
    let kernel = format!("{lang}-kill");
    let mut child = s.world.spawn(&[
        "--json",
        "run",
        "--lang",
        lang,
        "--kernel",
        &kernel,
        "--tools",
        &s.handler(),
        &code,
    ]);
    // Read events until call 1's answer is in the sandbox (R1 printed,
    // its whole line: Python's print may write the newline apart).
    let (mut line, mut reader) = first_line(&mut child);
    let mut first = String::new();
    let start = Instant::now();
    loop {
        first.push_str(&line);
        let printed = stdout_text(&json_lines(first.as_bytes()));
        if printed.contains("R1 ") && printed.ends_with('\n') {
            break;
        }
        assert!(start.elapsed() < BOUND, "no R1 within {BOUND:?}: {first}");
        line.clear();
        if reader.read_line(&mut line).unwrap() == 0 {
            panic!("tether run ended before R1: {first}");
        }
    }
    assert_eq!(s.runs(), 1);
    kill("KILL", child.id());
    wait_bounded(&mut child, "tether run after kill -9");
    s.touch(&go);
    let out = s.world.tether(&[
        "--json",
        "resume",
        "--kernel",
        &kernel,
        "--tools",
        &s.handler(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let all = format!(
        "{}{}",
        stdout_text(&json_lines(first.as_bytes())),
        stdout_text(&json_lines(&out.stdout))
    );
    assert_results(&all, "echo", true);
    assert_eq!(
        s.runs(),
        3,
        "the handler ran exactly three times: {}",
        show(&out)
    );
}

/// A background process started by a finished cell calls a tool: refused
/// in the sandbox (the caller says so and exits 1), and the handler never
/// runs.
fn a_finished_cells_background_process_is_refused(s: &Sandbox) {
    let go = s.path("go-bg");
    let done = s.path("bg-rc");
    let err = s.path("bg-err");
    let code = format!(
        "( while [ ! -e {go} ]; do sleep 0.05; done; tether-call echo '{{}}' 2> {err}; echo $? > {done} ) > /dev/null 2>&1 &\necho started",
        go = go.display(),
        err = err.display(),
        done = done.display()
    );
    let out = s
        .world
        .tether(&["run", "--kernel", "bg", "--tools", &s.handler(), &code]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    s.touch(&go);
    assert_eq!(s.wait_for(&done).trim(), "1", "the caller failed");
    let why = s.read(&err).unwrap_or_default();
    assert!(why.contains("refused"), "{why}");
    // A later cell of the kernel still runs with its own calls.
    let out = s.world.tether(&[
        "run",
        "--kernel",
        "bg",
        "--tools",
        &s.handler(),
        "tether-call text '{}'",
    ]);
    assert_eq!(text(&out.stdout), "plain words\n", "{}", show(&out));
    assert_eq!(s.runs(), 1, "the handler ran for the later cell only");
}

/// A request with a wrong credential (forged in the cell's own calls
/// directory) gets a refusal from the shim and is never journaled: no
/// `tool_call` event, the handler never runs. A handler's error and a
/// text result reach the caller.
fn a_wrong_token_is_refused_and_never_journaled(s: &Sandbox) {
    let code = "printf '{\"id\":\"forged1\",\"token\":\"nope\",\"name\":\"echo\",\"args\":{}}' > \"$TETHER_CALL/.f\"\n\
                mv \"$TETHER_CALL/.f\" \"$TETHER_CALL/forged1.req\"\n\
                while [ ! -e \"$TETHER_CALL/forged1.ans\" ]; do sleep 0.02; done\n\
                cat \"$TETHER_CALL/forged1.ans\"; echo\n\
                tether-call fail '{}'; echo \"fail=$?\"\n\
                tether-call text; echo \"text=$?\"";
    let out = s.world.tether(&[
        "--json",
        "run",
        "--kernel",
        "forged",
        "--tools",
        &s.handler(),
        code,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let lines = json_lines(&out.stdout);
    let got = stdout_text(&lines);
    let refusal: serde_json::Value = serde_json::from_str(got.lines().next().unwrap()).unwrap();
    assert_eq!(refusal["status"], "error", "{got}");
    assert!(
        refusal["message"].as_str().unwrap().contains("credential"),
        "{got}"
    );
    let names: Vec<&str> = lines
        .iter()
        .filter(|l| l["event"] == "tool_call")
        .filter_map(|l| l["name"].as_str())
        .collect();
    assert_eq!(
        names,
        vec!["fail", "text"],
        "the forged call never reached the host"
    );
    assert!(got.contains("fail=1\n"), "{got}");
    assert!(got.contains("plain words\ntext=0\n"), "{got}");
    let stderr: String = lines
        .iter()
        .filter(|l| l["event"] == "output" && l["stream"] == "stderr")
        .filter_map(|l| l["data"]["text"].as_str())
        .collect();
    assert!(
        stderr.contains("tether-call fail: no such luck"),
        "{stderr}"
    );
    assert_eq!(s.runs(), 2);
}

#[test]
fn local_shell_cell_makes_three_calls() {
    three_calls(&Sandbox::local(), "shell", SHELL_THREE);
}

#[test]
fn local_python_cell_makes_three_calls() {
    if !tether_require::have(
        "local_python_cell_makes_three_calls",
        tether_require::Need::Python3,
    ) {
        return;
    }
    three_calls(&Sandbox::local(), "python", PYTHON_THREE);
}

#[test]
fn local_killed_client_resumes_and_the_handler_runs_three_times() {
    let s = Sandbox::local();
    killed_after_the_first_call(&s, "shell");
    if tether_require::have("local_killed_client_python", tether_require::Need::Python3) {
        let s = Sandbox::local();
        killed_after_the_first_call(&s, "python");
    }
}

#[test]
fn local_background_process_of_a_finished_cell_is_refused() {
    a_finished_cells_background_process_is_refused(&Sandbox::local());
}

#[test]
fn local_wrong_token_is_refused_and_never_journaled() {
    a_wrong_token_is_refused_and_never_journaled(&Sandbox::local());
}

/// Each limit is a clear error to the caller: the deadline per call
/// (`TETHER_CALL_TIMEOUT`), the size of the arguments (refused before the
/// host sees them) and of the result.
#[test]
fn limits_are_clear_errors() {
    let s = Sandbox::local();
    let code = "TETHER_CALL_TIMEOUT=1 tether-call slow; echo \"slow=$?\"\n\
                { printf '{\"a\": \"'; head -c 1100000 /dev/zero | tr '\\0' y; printf '\"}'; } | tether-call big -; echo \"big=$?\"\n\
                tether-call huge; echo \"huge=$?\"";
    let out = s
        .world
        .tether(&["run", "--kernel", "limits", "--tools", &s.handler(), code]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(stdout, "slow=1\nbig=1\nhuge=1\n", "{}", show(&out));
    assert!(
        stderr.contains("tether-call slow: no answer within 1 s"),
        "{stderr}"
    );
    assert!(
        stderr.contains("tether-call big: the arguments are"),
        "{stderr}"
    );
    assert!(stderr.contains("over the limit of 1048576"), "{stderr}");
    assert!(
        stderr.contains("tether-call huge: the tool's result is")
            && stderr.contains("over the limit of 4194304"),
        "{stderr}"
    );
    assert_eq!(s.runs(), 2, "the oversized call never reached the handler");
}

/// A `TETHER_CALL_TIMEOUT` no caller can use (zero, negative, infinite,
/// NaN, not a number) means the default deadline, the same in both
/// languages: each call is answered. A reading that took `0` or a
/// negative number at its word would give up before the host could
/// answer; one that took `inf` or NaN would wait for ever on a lost host.
#[test]
fn an_unusable_call_timeout_is_the_default_in_both_languages() {
    const VALUES: [&str; 6] = ["0", "-1", "inf", "nan", "1e400", "soon"];
    let s = Sandbox::local();
    let shell: String = VALUES
        .iter()
        .map(|v| {
            format!("TETHER_CALL_TIMEOUT={v} tether-call echo '{{}}' >/dev/null && echo ok={v}\n")
        })
        .collect();
    let python = format!(
        "import os, tether\nfor v in {VALUES:?}:\n    os.environ['TETHER_CALL_TIMEOUT'] = v\n    \
         tether.call('echo', {{}})\n    print('ok=' + v)\n"
    );
    let mut langs = vec![("shell", shell)];
    if tether_require::have(
        "an_unusable_call_timeout_is_the_default_in_python",
        tether_require::Need::Python3,
    ) {
        langs.push(("python", python));
    }
    let want: String = VALUES.iter().map(|v| format!("ok={v}\n")).collect();
    for (lang, code) in &langs {
        let out = s.run_cell(false, lang, code);
        assert_eq!(text(&out.stdout), want, "{lang}: {}", show(&out));
    }
    assert_eq!(s.runs(), VALUES.len() * langs.len(), "one run per call");
}

/// Without `--tools` a call gets the error "no tools"; the cell goes on.
#[test]
fn without_tools_a_call_is_an_error() {
    let s = Sandbox::local();
    let out = s
        .world
        .tether(&["run", "--kernel", "none", "tether-call x '{}'; echo rc=$?"]);
    assert_eq!(text(&out.stdout), "rc=1\n", "{}", show(&out));
    assert!(text(&out.stderr).contains("no tools"), "{}", show(&out));
}

/// A round trip costs no exec beyond the cell's own long-poll: a warm
/// cell with three calls (and no output between them) is its submit plus
/// one wait per call, the wait that carries the answer and long-polls for
/// what comes next. Counted by the client, channel off (every op is one
/// exec).
#[test]
fn a_call_round_trip_is_one_long_poll() {
    let s = Sandbox::local();
    let run = |code: &str| {
        let out = s.world.tether(&[
            "--channel",
            "off",
            "--json",
            "run",
            "--kernel",
            "execs",
            "--tools",
            &s.handler(),
            code,
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", show(&out));
        json_lines(&out.stdout).last().unwrap()["execs"].clone()
    };
    run("true");
    assert_eq!(run("true"), serde_json::json!({ "submit": 1 }));
    let execs = run(
        "a=$(tether-call echo '{}'); b=$(tether-call echo '{}'); c=$(tether-call echo '{}'); echo done",
    );
    assert_eq!(execs, serde_json::json!({ "submit": 1, "wait": 3 }));
}

#[test]
fn docker_shell_and_python_cells_make_three_calls() {
    let Some(s) = Sandbox::docker("docker_shell_and_python_cells_make_three_calls") else {
        return;
    };
    three_calls(&s, "shell", SHELL_THREE);
    let s = Sandbox::docker("docker_python_three_calls").unwrap();
    three_calls(&s, "python", PYTHON_THREE);
}

#[test]
fn docker_killed_client_resumes_and_the_handler_runs_three_times() {
    let Some(s) = Sandbox::docker("docker_killed_client") else {
        return;
    };
    killed_after_the_first_call(&s, "shell");
    let s = Sandbox::docker("docker_killed_client_python").unwrap();
    killed_after_the_first_call(&s, "python");
}

#[test]
fn docker_background_process_refused_and_wrong_token_never_journaled() {
    let Some(s) = Sandbox::docker("docker_background_and_token") else {
        return;
    };
    a_finished_cells_background_process_is_refused(&s);
    let s = Sandbox::docker("docker_wrong_token").unwrap();
    a_wrong_token_is_refused_and_never_journaled(&s);
}

/// A thread an earlier Python cell left running, holding that cell's
/// context (its credential), calls while a later cell runs: refused, the
/// handler never runs; the later cell's own call is answered.
#[test]
fn local_python_leftover_thread_of_an_earlier_cell_is_refused() {
    if !tether_require::have(
        "local_python_leftover_thread_of_an_earlier_cell_is_refused",
        tether_require::Need::Python3,
    ) {
        return;
    }
    let s = Sandbox::local();
    let go = s.path("go-thread").display().to_string();
    let out_file = s.path("thread-out").display().to_string();
    let first = format!(
        "import contextvars, os, threading, time, tether\n\
         ctx = contextvars.copy_context()\n\
         def later():\n    \
             while not os.path.exists({go:?}):\n        time.sleep(0.05)\n    \
             try:\n        ctx.run(tether.call, 'echo', {{}})\n        res = 'answered'\n    \
             except tether.ToolError as e:\n        res = 'refused: %s' % e\n    \
             with open({out_file:?} + '.tmp', 'w') as f:\n        f.write(res)\n    \
             os.rename({out_file:?} + '.tmp', {out_file:?})\n\
         threading.Thread(target=later, daemon=True).start()\n"
    );
    let args = |code: &str| {
        s.world.tether(&[
            "run",
            "--lang",
            "python",
            "--kernel",
            "thread",
            "--tools",
            &s.handler(),
            code,
        ])
    };
    let out = args(&first);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let second = format!(
        "import os, time, tether\n\
         open({go:?}, 'w').close()\n\
         while not os.path.exists({out_file:?}):\n    time.sleep(0.05)\n\
         print(open({out_file:?}).read())\n\
         print(tether.call('text'))\n"
    );
    let out = args(&second);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let got = text(&out.stdout);
    assert!(got.starts_with("refused"), "{got}");
    assert!(got.ends_with("plain words\n"), "{got}");
    assert_eq!(
        s.runs(),
        1,
        "only the later cell's own call ran the handler"
    );
}
