//! Conformance of shell kernels with the persistent shells agents already
//! use, on `local` and `docker`: command sequences taken from the public
//! test suites of SWE-ReX (`tests/test_session.py`, `split_bash_command`
//! tests), OpenHands (`tests/runtime/test_bash.py`,
//! `tests/unit/test_bash_session.py`), Daytona (session command tests)
//! and jupyter_client (`tests/test_kernelmanager.py` interrupt tests).
//! Each case names its source; the expectations are tether's (issue 7).
//! More groups, by source suite: `conformance/shell_suites.rs` (OpenHands'
//! terminal tests, pexpect's replwrap, more of SWE-ReX, the Oils shell
//! spec tests, also split across cells) and `conformance/python_suites.rs`
//! (jupyter_kernel_test, ipykernel, IPython, e2b, OpenHands' IPython
//! tests, LangChain, smolagents, CPython, the notebook's interrupt test,
//! nbclient's test notebooks) and `conformance/exec_suites.rs` (the
//! sandbox and code-executor tools: inspect_ai, Modal, autogen,
//! mini-swe-agent, LangChain's BashProcess) and `conformance/agent_suites.rs`
//! (agent tools with a persistent session: bash_kernel, SWE-agent, Open
//! Interpreter).
//! Cases where tether differs from the source in a way the README does
//! not document are product bugs: such a case stays as the source
//! expects, `#[ignore = "product bug: …"]` until it is fixed (README
//! "Conformance" lists the ones fixed).

use tether_core::protocol::{CellOutcome, Lang};
use tether_live::backends::{self, skip};
use tether_live::container::Container;
use tether_live::harness::{unique, CellRun, Live};

#[path = "conformance/agent_suites.rs"]
mod agent_suites;
#[path = "conformance/exec_suites.rs"]
mod exec_suites;
#[path = "conformance/python_suites.rs"]
mod python_suites;
#[path = "conformance/shell_suites.rs"]
mod shell_suites;

#[allow(dead_code)]
enum Sandbox {
    Local(tempfile::TempDir),
    Docker(Container),
}

fn open(backend: &str, test: &str) -> Option<(Sandbox, Live)> {
    match backend {
        "local" => {
            let dir = tempfile::Builder::new()
                .prefix("tether-conf")
                .tempdir()
                .expect("tempdir");
            let live = Live::new("local", &dir.path().display().to_string());
            Some((Sandbox::Local(dir), live))
        }
        "docker" => {
            if let Err(why) = backends::docker() {
                skip(test, &why);
                return None;
            }
            let c = Container::start(test.rsplit("::").next().unwrap_or("conf"));
            let live = Live::new(&c.spec(), "/tmp/tether-live");
            Some((Sandbox::Docker(c), live))
        }
        other => panic!("no backend {other}"),
    }
}

async fn sh(live: &mut Live, code: &str) -> CellRun {
    live.run("k", Lang::Shell, code).await
}

async fn py(live: &mut Live, code: &str) -> CellRun {
    live.run("py", Lang::Python, code).await
}

/// Runs `code` and checks its stdout exactly and that it resolved `ok`.
async fn ok(live: &mut Live, code: &str, stdout: &str) {
    let run = sh(live, code).await;
    assert_eq!(run.outcome, CellOutcome::Ok, "{code:?}: {run:?}");
    assert_eq!(run.out(), stdout, "{code:?}: {run:?}");
}

fn err(run: &CellRun) -> String {
    String::from_utf8_lossy(&run.stderr).into_owned()
}

fn show(run: &CellRun) -> String {
    format!("{run:?}\nstderr: {}", err(run))
}

/// Runs `code` in the shell kernel and checks that it ended with
/// `exit status` and printed `stdout` exactly; returns its stderr.
async fn exits(live: &mut Live, code: &str, status: i32, stdout: &str) -> String {
    let run = sh(live, code).await;
    assert_eq!(
        (run.outcome.clone(), run.out()),
        (CellOutcome::Exit { code: status }, stdout.to_owned()),
        "{code:?}: {}",
        show(&run)
    );
    err(&run)
}

/// Runs `code` in the shell kernel and checks its outcome, stdout and
/// stderr exactly.
async fn streams(live: &mut Live, code: &str, outcome: CellOutcome, stdout: &str, stderr: &str) {
    let run = sh(live, code).await;
    assert_eq!(
        (run.outcome.clone(), run.out(), err(&run)),
        (outcome, stdout.to_owned(), stderr.to_owned()),
        "{code:?}: {}",
        show(&run)
    );
}

/// Runs `code` in the Python kernel and checks it resolved `ok` with
/// exactly `stdout` and nothing on stderr.
async fn shows(live: &mut Live, code: &str, stdout: &str) {
    let run = py(live, code).await;
    assert_eq!(
        (run.outcome.clone(), run.out(), err(&run)),
        (CellOutcome::Ok, stdout.to_owned(), String::new()),
        "{code:?}: {}",
        show(&run)
    );
}

/// Runs `code` with a cell timeout; returns the run and how long it took.
async fn timed(
    live: &mut Live,
    kernel: &str,
    lang: Lang,
    code: &str,
    timeout: std::time::Duration,
) -> (CellRun, std::time::Duration) {
    let start = std::time::Instant::now();
    let run = live.run_with_timeout(kernel, lang, code, timeout).await;
    (run, start.elapsed())
}

/// Every kind of state persists (OpenHands test_bash.py
/// `test_stateful_cmd`/`test_cmd_run`: cd and variables across calls;
/// SWE-ReX test_session.py: `export`, functions and aliases in one
/// session).
async fn state_of_each_kind_persists(live: &mut Live) {
    live.prepare().await;
    ok(
        live,
        concat!(
            "X=1; export E='a b'; nl=$'l1\\nl2'; q=\"it's \\\"q\\\"\"; raw=$'\\xff\\xfe'\n",
            "arr=(1 '2 3'); declare -A m=([k]='v v' [j]=2)\n",
            "greet() { echo \"hi $1\"; }\n",
            "alias ll='echo LL'\n",
            "ll\n",
            "set -o pipefail; shopt -s extglob; umask 027\n",
            "trap 'echo int' INT\n",
            "mkdir -p /tmp/conf-d1 /tmp/conf-d2; cd /tmp/conf-d1; pushd /tmp/conf-d2 >/dev/null\n",
            "readonly RO=5\n",
        ),
        "LL\n",
    )
    .await;
    ok(
        live,
        concat!(
            "echo \"$X|$E|$nl|$q\"; printf '%s' \"$raw\" | od -An -tx1\n",
            "declare -p arr; echo \"${m[k]}|${m[j]}\"\n",
            "greet you; ll\n",
            "[[ -o pipefail ]] && echo pipefail; shopt -q extglob && echo extglob; umask\n",
            "trap -p INT; pwd; dirs -l -p | tail -1\n",
            "echo \"$RO\"; (RO=6) 2>/dev/null || echo still readonly\n",
        ),
        concat!(
            "1|a b|l1\nl2|it's \"q\"\n ff fe\n",
            "declare -a arr=([0]=\"1\" [1]=\"2 3\")\nv v|2\n",
            "hi you\nLL\n",
            "pipefail\nextglob\n0027\n",
            "trap -- 'echo int' SIGINT\n/tmp/conf-d2\n/tmp/conf-d1\n",
            "5\nstill readonly\n",
        ),
    )
    .await;
    // Unset and un-export persist too; shell-managed variables are the
    // new shell's own; the marker is this cell's.
    ok(
        live,
        "unset X; export -n E; BASHPID=1 2>/dev/null; true",
        "",
    )
    .await;
    ok(
        live,
        "echo \"[${X-unset}]\"; env | grep -c '^E=' ; [ \"$BASHPID\" != 1 ] && echo own; echo \"${TETHER_CELL##*:}\"",
        "[unset]\n0\nown\n4\n",
    )
    .await;
    live.shutdown("k").await;
}

/// Whatever ends a cell early keeps the state it reached and the next
/// cell works (OpenHands test_bash.py `test_exit_code`-style `exit`,
/// SWE-ReX test_session.py error cases; the list: exit, exec,
/// set -e, set -u, syntax errors).
async fn early_ends_keep_the_state_reached(live: &mut Live) {
    live.prepare().await;
    let run = sh(live, "A=1; exit 3").await;
    assert_eq!(run.outcome, CellOutcome::Exit { code: 3 }, "{run:?}");
    ok(live, "echo $A", "1\n").await;
    let run = sh(live, "set -e; B=2; false; echo never").await;
    assert_eq!(run.outcome, CellOutcome::Exit { code: 1 }, "{run:?}");
    ok(live, "set +e; echo $B", "2\n").await;
    let run = sh(live, "set -u; C=3; echo $nope; echo never").await;
    assert!(!run.out().contains("never"), "{run:?}");
    assert!(err(&run).contains("nope: unbound variable"), "{run:?}");
    ok(live, "set +u; echo $C", "3\n").await;
    // bash runs an unterminated heredoc to the end of the input, with a
    // warning; the other two are syntax errors.
    for (bad, fails) in [("(a", true), ("a='", true), ("cat <<EOF\nno end", false)] {
        let run = sh(live, &format!("D=4\n{bad}")).await;
        assert_eq!(
            !matches!(run.outcome, CellOutcome::Ok),
            fails,
            "{bad:?}: {run:?}"
        );
        assert!(!err(&run).contains("/cells/"), "no internal path: {run:?}");
        ok(live, "echo alive $D", "alive 4\n").await;
    }
    // exec replaces the shell: no shell is left to save, so the state of
    // the cell before stays and the next cell says so.
    let run = sh(live, "F=5; exec true").await;
    assert!(
        matches!(run.outcome, CellOutcome::Exit { code: 0 }),
        "{run:?}"
    );
    let run = sh(live, "echo \"[${F-}] $D\"").await;
    assert_eq!(run.out(), "[] 4\n", "{run:?}");
    assert!(err(&run).contains("was not kept"), "{run:?}");
    ok(live, "echo quiet", "quiet\n").await;
    // A user's EXIT trap never fires at the end of a cell, not even on exit.
    let run = sh(live, "trap 'echo bye' EXIT; G=6; exit 2").await;
    assert_eq!(run.out(), "", "{run:?}");
    ok(
        live,
        "echo $G; trap -p EXIT",
        "6\ntrap -- 'echo bye' EXIT\n",
    )
    .await;
    live.shutdown("k").await;
}

/// Messages speak of the cell (OpenHands test_bash_session.py
/// `test_basic_command`: `nonexistent_command` says "command not found").
async fn messages_name_the_cell(live: &mut Live) {
    live.prepare().await;
    let run = sh(live, "greet").await;
    assert_eq!(
        err(&run),
        "cell 1: line 1: greet: command not found\n",
        "{run:?}"
    );
    live.shutdown("k").await;
}

/// Heredocs and multi-line input (SWE-ReX `split_bash_command` heredoc
/// tests; OpenHands test_bash.py `test_multiline_commands`,
/// `test_complex_commands`), with an alias defined on one line used on the
/// next.
async fn heredocs_and_multiline(live: &mut Live) {
    live.prepare().await;
    ok(
        live,
        "cat <<EOF\na\n  b\nEOF\ncat <<'EOF' | tr a-z A-Z\n$HOME\nEOF\nif true; then\n  echo yes\nfi\necho 'multi\nline'\nalias hey='echo hey'\nhey\n",
        "a\n  b\n$HOME\nyes\nmulti\nline\nhey\n",
    )
    .await;
    live.shutdown("k").await;
}

/// Exact bytes (OpenHands test_bash.py output tests; jupyter_client
/// stream tests): empty output, no newline added, leading blank lines,
/// 1 MB in one line, a UTF-8 sequence split over writes, NUL, invalid
/// UTF-8.
async fn exact_bytes(live: &mut Live) {
    live.prepare().await;
    ok(live, "true", "").await;
    ok(live, "printf 'no newline'", "no newline").await;
    ok(live, "printf '\\n\\n\\nx\\n'", "\n\n\nx\n").await;
    let run = sh(live, "head -c 1048576 /dev/zero | tr '\\0' a").await;
    assert_eq!(run.stdout.len(), 1 << 20);
    assert!(run.stdout.iter().all(|&b| b == b'a'));
    let run = sh(live, "printf '\\xc3'; sleep 0.2; printf '\\xa9\\n'").await;
    assert_eq!(run.stdout, "é\n".as_bytes());
    let run = sh(live, "printf 'a\\0b\\377\\376\\n'").await;
    assert_eq!(run.stdout, b"a\0b\xff\xfe\n");
    live.shutdown("k").await;
}

/// Cancel keeps what the cell did (jupyter_client test_kernelmanager.py
/// interrupt tests: the kernel survives an interrupt with its state;
/// OpenHands test_bash_session.py `test_ctrl_c` on a `while true` loop):
/// a pipeline, a busy loop, and a TERM-ignoring child, each followed by a
/// cell that sees the earlier state.
async fn cancel_keeps_the_state(live: &mut Live) {
    live.prepare().await;
    let run = live
        .run_cancelling_at(
            "k",
            Lang::Shell,
            "export KEEP=1; echo go; sleep 100 | cat",
            Some(b"go\n"),
        )
        .await;
    assert_eq!(run.outcome, CellOutcome::Cancelled, "{run:?}");
    ok(live, "echo $KEEP", "1\n").await;
    let run = live
        .run_cancelling_at(
            "k",
            Lang::Shell,
            "LOOP=2; echo go; while :; do :; done",
            Some(b"go\n"),
        )
        .await;
    assert_eq!(run.outcome, CellOutcome::Cancelled, "{run:?}");
    ok(live, "echo $LOOP $KEEP", "2 1\n").await;
    // The shell waits for a foreground child that ignores TERM until the
    // KILL: nothing is left to save, so the state before the cell stays
    // and the next cell says so.
    let run = live
        .run_cancelling_at(
            "k",
            Lang::Shell,
            "LOST=3; echo go; sh -c 'trap \"\" TERM; sleep 100'",
            Some(b"go\n"),
        )
        .await;
    assert_eq!(run.outcome, CellOutcome::Cancelled, "{run:?}");
    let run = sh(live, "echo \"[${LOST-}] $LOOP $KEEP\"").await;
    assert_eq!(run.out(), "[] 2 1\n", "{run:?}");
    assert!(err(&run).contains("was not kept"), "{run:?}");
    live.shutdown("k").await;
}

/// 30 cells in quick succession (Daytona session tests run many commands
/// in one session) and a 100 KB environment variable.
async fn many_cells_and_a_big_variable(live: &mut Live) {
    live.prepare().await;
    for i in 0..30 {
        ok(live, "N=$((${N:-0} + 1)); echo $N", &format!("{}\n", i + 1)).await;
    }
    ok(
        live,
        "export BIG=$(head -c 102400 /dev/zero | tr '\\0' b); echo ${#BIG}",
        "102400\n",
    )
    .await;
    ok(
        live,
        "echo ${#BIG}; sh -c 'echo ${#BIG}'",
        "102400\n102400\n",
    )
    .await;
    live.shutdown("k").await;
}

/// Commands that read stdin see EOF and return at once (OpenHands
/// test_bash.py `test_python_interactive_input` and the `read -p` prompt of
/// `test_stress_long_output_with_soft_and_hard_timeout` wait for input an
/// agent sends later; tether cells have no stdin, so they must not wait:
/// issue 7 point 6). The pager defaults to `cat`, the editor to `false`.
async fn stdin_readers_return_at_once(live: &mut Live) {
    live.prepare().await;
    ok(
        live,
        concat!(
            "cat; read -p 'continue? [Y/n] ' answer; echo \"read=$? [$answer]\"\n",
            "python3 -c 'input()' 2>/dev/null; echo \"py=$?\"\n",
            "echo \"$PAGER\"\n",
        ),
        "read=1 []\npy=1\ncat\n",
    )
    .await;
    // An editor would draw a screen into the output and wait for keys:
    // `git commit` without `-m` fails at once instead, saying why (where
    // the sandbox has git; the docker image has none).
    ok(
        live,
        concat!(
            "echo \"$EDITOR $VISUAL\"\n",
            "if command -v git >/dev/null; then cd \"$(mktemp -d)\" && git init -q . && ",
            "git -c user.email=a@b -c user.name=a commit -q --allow-empty 2>&1 | grep -c 'problem with the editor'; ",
            "else echo 1; fi\n",
        ),
        "false false\n1\n",
    )
    .await;
    live.shutdown("k").await;
    let run = py(live, "x = 41").await;
    assert_eq!(run.outcome, CellOutcome::Ok, "{run:?}");
    let run = py(live, "name = input('Enter your name: ')").await;
    assert!(matches!(run.outcome, CellOutcome::Error { .. }), "{run:?}");
    assert!(err(&run).contains("EOFError"), "{run:?}");
    assert!(err(&run).contains("no stdin"), "a hint says why: {run:?}");
    let run = py(live, "print(x + 1)").await;
    assert_eq!(run.outcome, CellOutcome::Ok, "{run:?}");
    assert_eq!(run.out(), "42\n", "the namespace survives: {run:?}");
    live.shutdown("py").await;
}

/// Background jobs return at once and outlive their cell (OpenHands
/// test_bash.py `test_bash_background_server`: `python3 -m http.server
/// 8081 &`, then `curl` from a later command answers; issue 7 point 7: the
/// server logs each request to the cell's stderr, which must not kill it
/// once its cell is done). Also `nohup cmd &` and a plain `cmd &` holding
/// the cell's stdout. Stopping the kernel kills them all.
async fn background_jobs_return_and_survive(live: &mut Live) {
    live.prepare().await;
    let tag = unique() + 40_000;
    let port = 20_000 + tag % 20_000;
    let run = sh(
        live,
        &format!(
            "python3 -m http.server {port} --bind 127.0.0.1 &\n\
             nohup sleep {tag} >/dev/null 2>&1 &\n\
             sleep {tag}.5 &\n\
             echo started"
        ),
    )
    .await;
    assert_eq!(run.outcome, CellOutcome::Ok, "{run:?}");
    // The server's banner goes to the cell's stdout, which the `&` job
    // shares: it is part of the cell when it lands within the drain bound
    // after `echo` ends (a loaded machine), of the background log if later.
    let out = run.out();
    assert!(
        out.lines().filter(|l| *l == "started").count() == 1
            && out
                .lines()
                .all(|l| l == "started" || l.starts_with("Serving HTTP on 127.0.0.1")),
        "{run:?}"
    );
    let get = format!(
        "python3 -c \"import time, urllib.request as u\n\
         for _ in range(100):\n    \
             try:\n        print(u.urlopen('http://127.0.0.1:{port}/').status); break\n    \
             except OSError: time.sleep(0.1)\""
    );
    for _ in 0..3 {
        ok(live, &get, "200\n").await;
    }
    let alive = live.survivors(&format!("sleep {tag}")).await;
    assert_eq!(alive.len(), 2, "nohup and & jobs alive: {alive:?}");
    live.shutdown("k").await;
    assert!(
        live.survivors(&format!("sleep {tag}")).await.is_empty()
            && live
                .survivors(&format!("http.server {port}"))
                .await
                .is_empty(),
        "stopping the kernel kills its background jobs"
    );
}

/// Command shapes other tools got wrong (OpenHands test_bash.py
/// `test_complex_commands`, `test_multiline_command_loop` (its issue
/// 3143), `test_command_backslash` (`find -exec … \;`), `test_long_output`
/// (5000 lines)).
async fn command_shapes(live: &mut Live) {
    live.prepare().await;
    ok(
        live,
        "count=0; tries=0; while [ $count -lt 3 ]; do result=$(echo \"Heads\"); tries=$((tries+1)); if [ \"$result\" = \"Heads\" ]; then count=$((count+1)); else count=0; fi; done; echo \"Got 3 heads in a row after $tries flips!\";",
        "Got 3 heads in a row after 3 flips!\n",
    )
    .await;
    let dir = format!("{}/loop", live.side_dir());
    ok(
        live,
        &format!(
            "mkdir -p {dir} && cd {dir} && \\\nfor month in {{01..04}}; do\n    for day in {{01..05}}; do\n        touch \"2024-${{month}}-${{day}}-sample.md\"\n    done\ndone && ls | wc -l"
        ),
        "20\n",
    )
    .await;
    ok(
        live,
        "echo implemented_function > f1.txt; find . -type f -exec grep -l implemented_function {} \\;",
        "./f1.txt\n",
    )
    .await;
    let run = sh(live, "for i in $(seq 1 5000); do echo \"Line $i\"; done").await;
    assert_eq!(run.outcome, CellOutcome::Ok, "{run:?}");
    let lines: Vec<String> = run.out().lines().map(str::to_owned).collect();
    assert_eq!(lines.len(), 5000);
    assert_eq!(lines[0], "Line 1");
    assert_eq!(lines[4999], "Line 5000");
    live.shutdown("k").await;
}

/// A Python kernel behaves like the interactive prompt people know
/// (jupyter_client and IPython's own tests run cells such as `1+1` and
/// read back the displayed result; OpenHands' tests/runtime/test_ipython.py
/// runs cells that build on earlier ones): the last expression is shown
/// with its repr and kept as `_`; tracebacks show the cell's lines, named
/// by cell, also from a function an earlier cell defined, and no frame of
/// tether's; top-level `await` works (as in IPython); `sys.exit(3)` ends
/// the cell with 3 and keeps the namespace.
async fn python_behaves_like_the_prompt(live: &mut Live) {
    let show = |run: &CellRun| format!("{run:?}\nstderr: {}", err(run));
    let run = py(live, "x = 41\nx + 1").await;
    assert_eq!(run.out(), "42\n", "{}", show(&run));
    let run = py(live, "_ * 2").await;
    assert_eq!(
        run.out(),
        "84\n",
        "`_` is the last shown value: {}",
        show(&run)
    );
    let run = py(live, "print('a'); None").await;
    assert_eq!(run.out(), "a\n", "None is not shown: {}", show(&run));
    let run = py(live, "def f():\n    return 1/0").await;
    assert_eq!(run.outcome, CellOutcome::Ok, "{}", show(&run));
    let run = py(live, "y = 2\nf()").await;
    assert!(
        matches!(run.outcome, CellOutcome::Error { .. }),
        "{}",
        show(&run)
    );
    let e = err(&run);
    assert!(
        e.contains("line 2, in <module>\n    f()")
            && e.contains("line 2, in f\n    return 1/0")
            && e.contains("ZeroDivisionError: division by zero"),
        "{}",
        show(&run)
    );
    assert!(
        !e.contains("<string>"),
        "no frame of tether's: {}",
        show(&run)
    );
    let run = py(live, "import asyncio\nawait asyncio.sleep(0.01)\n'awaited'").await;
    assert_eq!(run.out(), "'awaited'\n", "{}", show(&run));
    let run = py(live, "import sys\nsys.exit(3)").await;
    assert_eq!(run.outcome, CellOutcome::Exit { code: 3 }, "{}", show(&run));
    let run = py(live, "print(x, y)").await;
    assert_eq!(run.out(), "41 2\n", "{}", show(&run));
    live.shutdown("py").await;
}

/// SWE-ReX tests/test_execution.py, session cases: empty and blank
/// commands, leading and trailing blank lines, a comment alone, `A=();
/// false`, `[[ $env == $env ]]`, `bash -n` on a heredoc, a Python heredoc,
/// `(sleep 10) &` returning at once, a pager fed by a pipe (`less -+F` there), `false &&
/// true` (1), `false || true` (0), a missing command (127), and two
/// sessions that do not see each other's variables
/// (`test_multiple_isolated_shells`).
async fn swe_rex_session_cases(live: &mut Live) {
    live.prepare().await;
    for blank in [
        "",
        "\n",
        "\n\n \n",
        "# echo 'hello world'",
        "[[ $env == $env ]]",
    ] {
        ok(live, blank, "").await;
    }
    ok(live, "\n echo 'test'\n\n", "test\n").await;
    ok(
        live,
        "\n\n\n echo 'test1' \n  \n \n echo 'test2' \n\n\n",
        "test1\ntest2\n",
    )
    .await;
    ok(
        live,
        "/usr/bin/env bash -n <<'EOF'\necho 'hello world'\nEOF",
        "",
    )
    .await;
    ok(
        live,
        "python3 <<EOF\nprint('hello world')\nprint('hello world 2')\nEOF",
        "hello world\nhello world 2\n",
    )
    .await;
    ok(live, "echo 'hello\nworld'", "hello\nworld\n").await;
    // (`less` is not in the docker image; `more` is a pager everywhere)
    ok(live, "echo 'blargh' | more", "blargh\n").await;
    let tag = unique() + 70_000;
    ok(live, &format!("(sleep {tag}) &"), "").await;
    for (code, status) in [
        ("A=(); false", 1),
        ("false && true", 1),
        ("doesntexit", 127),
    ] {
        let run = sh(live, code).await;
        assert_eq!(
            run.outcome,
            CellOutcome::Exit { code: status },
            "{code}: {run:?}"
        );
        assert_eq!(run.out(), "", "{code}: {run:?}");
    }
    ok(live, "false || true", "").await;
    let one = live.run("shell1", Lang::Shell, "x=42").await;
    let two = live.run("shell2", Lang::Shell, "y=24").await;
    assert_eq!(
        (one.outcome, two.outcome),
        (CellOutcome::Ok, CellOutcome::Ok)
    );
    let one = live.run("shell1", Lang::Shell, "echo \"$x|$y\"").await;
    let two = live.run("shell2", Lang::Shell, "echo \"$x|$y\"").await;
    assert_eq!((one.out(), two.out()), ("42|\n".into(), "|24\n".into()));
    for k in ["k", "shell1", "shell2"] {
        live.shutdown(k).await;
    }
    assert!(live.survivors(&format!("sleep {tag}")).await.is_empty());
}

async fn bounded(test: &str, case: impl std::future::Future<Output = ()>) {
    let limit = std::time::Duration::from_secs(150);
    if tokio::time::timeout(limit, case).await.is_err() {
        panic!("{test} did not finish within {limit:?}");
    }
}

macro_rules! on_backends {
    ($($(#[$attr:meta])* $name:ident: $($case:ident)::+ on $backend:literal;)*) => {$(
        #[tokio::test]
        $(#[$attr])*
        async fn $name() {
            let test = concat!(stringify!($name), " (", $backend, ")");
            let Some((_sandbox, mut live)) = open($backend, test) else { return };
            bounded(test, $($case)::+(&mut live)).await;
        }
    )*};
}

on_backends! {
    local_state_of_each_kind_persists: state_of_each_kind_persists on "local";
    docker_state_of_each_kind_persists: state_of_each_kind_persists on "docker";
    local_early_ends_keep_the_state_reached: early_ends_keep_the_state_reached on "local";
    docker_early_ends_keep_the_state_reached: early_ends_keep_the_state_reached on "docker";
    local_messages_name_the_cell: messages_name_the_cell on "local";
    docker_messages_name_the_cell: messages_name_the_cell on "docker";
    local_heredocs_and_multiline: heredocs_and_multiline on "local";
    docker_heredocs_and_multiline: heredocs_and_multiline on "docker";
    local_exact_bytes: exact_bytes on "local";
    docker_exact_bytes: exact_bytes on "docker";
    local_cancel_keeps_the_state: cancel_keeps_the_state on "local";
    docker_cancel_keeps_the_state: cancel_keeps_the_state on "docker";
    local_many_cells_and_a_big_variable: many_cells_and_a_big_variable on "local";
    docker_many_cells_and_a_big_variable: many_cells_and_a_big_variable on "docker";
    local_stdin_readers_return_at_once: stdin_readers_return_at_once on "local";
    docker_stdin_readers_return_at_once: stdin_readers_return_at_once on "docker";
    local_background_jobs_return_and_survive: background_jobs_return_and_survive on "local";
    docker_background_jobs_return_and_survive: background_jobs_return_and_survive on "docker";
    local_python_behaves_like_the_prompt: python_behaves_like_the_prompt on "local";
    docker_python_behaves_like_the_prompt: python_behaves_like_the_prompt on "docker";
    local_swe_rex_session_cases: swe_rex_session_cases on "local";
    docker_swe_rex_session_cases: swe_rex_session_cases on "docker";
    local_command_shapes: command_shapes on "local";
    docker_command_shapes: command_shapes on "docker";
    local_openhands_terminal_cases: shell_suites::openhands_terminal_cases on "local";
    docker_openhands_terminal_cases: shell_suites::openhands_terminal_cases on "docker";
    local_pexpect_replwrap_cases: shell_suites::pexpect_replwrap_cases on "local";
    docker_pexpect_replwrap_cases: shell_suites::pexpect_replwrap_cases on "docker";
    local_swe_rex_more_cases: shell_suites::swe_rex_more_cases on "local";
    docker_swe_rex_more_cases: shell_suites::swe_rex_more_cases on "docker";
    local_session_state_rules: shell_suites::session_state_rules on "local";
    docker_session_state_rules: shell_suites::session_state_rules on "docker";
    local_oils_spec_cases: shell_suites::oils_spec_cases on "local";
    docker_oils_spec_cases: shell_suites::oils_spec_cases on "docker";
    local_openhands_sdk_cases: shell_suites::openhands_sdk_cases on "local";
    docker_openhands_sdk_cases: shell_suites::openhands_sdk_cases on "docker";
    local_jupyter_kernel_cases: python_suites::jupyter_kernel_cases on "local";
    docker_jupyter_kernel_cases: python_suites::jupyter_kernel_cases on "docker";
    local_display_cases: python_suites::display_cases on "local";
    docker_display_cases: python_suites::display_cases on "docker";
    local_python_process_cases: python_suites::python_process_cases on "local";
    docker_python_process_cases: python_suites::python_process_cases on "docker";
    local_ipython_shell_cases: python_suites::ipython_shell_cases on "local";
    docker_ipython_shell_cases: python_suites::ipython_shell_cases on "docker";
    local_shell_escape_cases: python_suites::shell_escape_cases on "local";
    docker_shell_escape_cases: python_suites::shell_escape_cases on "docker";
    local_oils_cd_dirs_alias_cases: shell_suites::oils_cd_dirs_alias_cases on "local";
    docker_oils_cd_dirs_alias_cases: shell_suites::oils_cd_dirs_alias_cases on "docker";
    local_oils_trap_option_var_cases: shell_suites::oils_trap_option_var_cases on "local";
    docker_oils_trap_option_var_cases: shell_suites::oils_trap_option_var_cases on "docker";
    local_console_and_async_cases: python_suites::console_and_async_cases on "local";
    docker_console_and_async_cases: python_suites::console_and_async_cases on "docker";
    local_last_exception_is_kept: python_suites::last_exception_is_kept on "local";
    docker_last_exception_is_kept: python_suites::last_exception_is_kept on "docker";
    local_oils_trap_numeric_first_operand: shell_suites::oils_trap_numeric_first_operand on "local";
    docker_oils_trap_numeric_first_operand: shell_suites::oils_trap_numeric_first_operand on "docker";
    local_oils_declared_assoc_array: shell_suites::oils_declared_assoc_array on "local";
    docker_oils_declared_assoc_array: shell_suites::oils_declared_assoc_array on "docker";
    local_oils_pwd_variable: shell_suites::oils_pwd_variable on "local";
    docker_oils_pwd_variable: shell_suites::oils_pwd_variable on "docker";
    local_oils_removed_working_dir: shell_suites::oils_removed_working_dir on "local";
    docker_oils_removed_working_dir: shell_suites::oils_removed_working_dir on "docker";
    local_oils_getopts_read_printf_cases: shell_suites::oils_getopts_read_printf_cases on "local";
    docker_oils_getopts_read_printf_cases: shell_suites::oils_getopts_read_printf_cases on "docker";
    local_oils_getopts_inside_a_group: shell_suites::oils_getopts_inside_a_group on "local";
    docker_oils_getopts_inside_a_group: shell_suites::oils_getopts_inside_a_group on "docker";
    local_oils_heredoc_source_cases: shell_suites::oils_heredoc_source_cases on "local";
    docker_oils_heredoc_source_cases: shell_suites::oils_heredoc_source_cases on "docker";
    local_oils_array_nameref_cases: shell_suites::oils_array_nameref_cases on "local";
    docker_oils_array_nameref_cases: shell_suites::oils_array_nameref_cases on "docker";
    local_oils_glob_option_cases: shell_suites::oils_glob_option_cases on "local";
    docker_oils_glob_option_cases: shell_suites::oils_glob_option_cases on "docker";
    local_cpython_traceback_carets: python_suites::cpython_traceback_carets on "local";
    docker_cpython_traceback_carets: python_suites::cpython_traceback_carets on "docker";
    local_cpython_traceback_cases: python_suites::cpython_traceback_cases on "local";
    docker_cpython_traceback_cases: python_suites::cpython_traceback_cases on "docker";
    local_cpython_future_warning_cases: python_suites::cpython_future_warning_cases on "local";
    docker_cpython_future_warning_cases: python_suites::cpython_future_warning_cases on "docker";
    local_nbclient_notebook_cases: python_suites::nbclient_notebook_cases on "local";
    docker_nbclient_notebook_cases: python_suites::nbclient_notebook_cases on "docker";
    local_cpython_forked_child_cases: python_suites::cpython_forked_child_cases on "local";
    docker_cpython_forked_child_cases: python_suites::cpython_forked_child_cases on "docker";
    local_oils_err_trap_cases: shell_suites::oils_err_trap_cases on "local";
    docker_oils_err_trap_cases: shell_suites::oils_err_trap_cases on "docker";
    local_cpython_exception_cases: python_suites::cpython_exception_cases on "local";
    docker_cpython_exception_cases: python_suites::cpython_exception_cases on "docker";
    local_cpython_generator_cases: python_suites::cpython_generator_cases on "local";
    docker_cpython_generator_cases: python_suites::cpython_generator_cases on "docker";
    local_cpython_contextlib_cases: python_suites::cpython_contextlib_cases on "local";
    docker_cpython_contextlib_cases: python_suites::cpython_contextlib_cases on "docker";
    local_cpython_pprint_displayhook_cases: python_suites::cpython_pprint_displayhook_cases on "local";
    docker_cpython_pprint_displayhook_cases: python_suites::cpython_pprint_displayhook_cases on "docker";
    local_oils_word_split_cases: shell_suites::oils_word_split_cases on "local";
    docker_oils_word_split_cases: shell_suites::oils_word_split_cases on "docker";
    local_oils_assign_export_cases: shell_suites::oils_assign_export_cases on "local";
    docker_oils_assign_export_cases: shell_suites::oils_assign_export_cases on "docker";
    local_oils_set_allexport_cases: shell_suites::oils_set_allexport_cases on "local";
    docker_oils_set_allexport_cases: shell_suites::oils_set_allexport_cases on "docker";
    local_oils_case_nocasematch_cases: shell_suites::oils_case_nocasematch_cases on "local";
    docker_oils_case_nocasematch_cases: shell_suites::oils_case_nocasematch_cases on "docker";
    local_oils_dbracket_cases: shell_suites::oils_dbracket_cases on "local";
    docker_oils_dbracket_cases: shell_suites::oils_dbracket_cases on "docker";
    local_oils_pipeline_loop_cases: shell_suites::oils_pipeline_loop_cases on "local";
    docker_oils_pipeline_loop_cases: shell_suites::oils_pipeline_loop_cases on "docker";
    local_oils_type_command_cases: shell_suites::oils_type_command_cases on "local";
    docker_oils_type_command_cases: shell_suites::oils_type_command_cases on "docker";
    local_oils_redirect_cases: shell_suites::oils_redirect_cases on "local";
    docker_oils_redirect_cases: shell_suites::oils_redirect_cases on "docker";
    local_oils_brace_quote_cases: shell_suites::oils_brace_quote_cases on "local";
    docker_oils_brace_quote_cases: shell_suites::oils_brace_quote_cases on "docker";
    local_oils_strip_status_cases: shell_suites::oils_strip_status_cases on "local";
    docker_oils_strip_status_cases: shell_suites::oils_strip_status_cases on "docker";
    local_oils_globignore_cases: shell_suites::oils_globignore_cases on "local";
    docker_oils_globignore_cases: shell_suites::oils_globignore_cases on "docker";
    local_oils_special_builtin_cases: shell_suites::oils_special_builtin_cases on "local";
    docker_oils_special_builtin_cases: shell_suites::oils_special_builtin_cases on "docker";
    local_oils_builtin_redefined: shell_suites::oils_builtin_redefined on "local";
    docker_oils_builtin_redefined: shell_suites::oils_builtin_redefined on "docker";
    local_oils_append_cases: shell_suites::oils_append_cases on "local";
    docker_oils_append_cases: shell_suites::oils_append_cases on "docker";
    local_oils_var_op_cases: shell_suites::oils_var_op_cases on "local";
    docker_oils_var_op_cases: shell_suites::oils_var_op_cases on "docker";
    local_oils_var_ref_cases: shell_suites::oils_var_ref_cases on "local";
    docker_oils_var_ref_cases: shell_suites::oils_var_ref_cases on "docker";
    local_oils_shellopts_cases: shell_suites::oils_shellopts_cases on "local";
    docker_oils_shellopts_cases: shell_suites::oils_shellopts_cases on "docker";
    local_oils_echo_cases: shell_suites::oils_echo_cases on "local";
    docker_oils_echo_cases: shell_suites::oils_echo_cases on "docker";
    local_oils_tilde_cases: shell_suites::oils_tilde_cases on "local";
    docker_oils_tilde_cases: shell_suites::oils_tilde_cases on "docker";
    local_oils_array_sparse_cases: shell_suites::oils_array_sparse_cases on "local";
    docker_oils_array_sparse_cases: shell_suites::oils_array_sparse_cases on "docker";
    local_oils_serialize_cases: shell_suites::oils_serialize_cases on "local";
    docker_oils_serialize_cases: shell_suites::oils_serialize_cases on "docker";
    local_oils_function_source_cases: shell_suites::oils_function_source_cases on "local";
    docker_oils_function_source_cases: shell_suites::oils_function_source_cases on "docker";
    local_oils_regex_cases: shell_suites::oils_regex_cases on "local";
    docker_oils_regex_cases: shell_suites::oils_regex_cases on "docker";
    local_oils_introspect_cases: shell_suites::oils_introspect_cases on "local";
    docker_oils_introspect_cases: shell_suites::oils_introspect_cases on "docker";
    local_oils_vars_special_cases: shell_suites::oils_vars_special_cases on "local";
    docker_oils_vars_special_cases: shell_suites::oils_vars_special_cases on "docker";
    local_cpython_print_cases: python_suites::cpython_print_cases on "local";
    docker_cpython_print_cases: python_suites::cpython_print_cases on "docker";
    local_cpython_logging_cases: python_suites::cpython_logging_cases on "local";
    docker_cpython_logging_cases: python_suites::cpython_logging_cases on "docker";
    local_cpython_weakref_cases: python_suites::cpython_weakref_cases on "local";
    docker_cpython_weakref_cases: python_suites::cpython_weakref_cases on "docker";
    local_cpython_import_reload_cases: python_suites::cpython_import_reload_cases on "local";
    docker_cpython_import_reload_cases: python_suites::cpython_import_reload_cases on "docker";
    local_inspect_sandbox_exec_cases: exec_suites::inspect_sandbox_exec_cases on "local";
    docker_inspect_sandbox_exec_cases: exec_suites::inspect_sandbox_exec_cases on "docker";
    local_inspect_sandbox_io_cases: exec_suites::inspect_sandbox_io_cases on "local";
    docker_inspect_sandbox_io_cases: exec_suites::inspect_sandbox_io_cases on "docker";
    local_modal_sandbox_cases: exec_suites::modal_sandbox_cases on "local";
    docker_modal_sandbox_cases: exec_suites::modal_sandbox_cases on "docker";
    local_autogen_executor_cases: exec_suites::autogen_executor_cases on "local";
    docker_autogen_executor_cases: exec_suites::autogen_executor_cases on "docker";
    local_mini_swe_agent_cases: exec_suites::mini_swe_agent_cases on "local";
    docker_mini_swe_agent_cases: exec_suites::mini_swe_agent_cases on "docker";
    local_langchain_bash_process_cases: exec_suites::langchain_bash_process_cases on "local";
    docker_langchain_bash_process_cases: exec_suites::langchain_bash_process_cases on "docker";
    local_inspect_process_tree_cases: exec_suites::inspect_process_tree_cases on "local";
    docker_inspect_process_tree_cases: exec_suites::inspect_process_tree_cases on "docker";
    local_inspect_bash_null_byte: exec_suites::inspect_bash_null_byte on "local";
    docker_inspect_bash_null_byte: exec_suites::inspect_bash_null_byte on "docker";
    local_inspect_output_limit_cases: exec_suites::inspect_output_limit_cases on "local";
    docker_inspect_output_limit_cases: exec_suites::inspect_output_limit_cases on "docker";
    local_bash_kernel_cases: agent_suites::bash_kernel_cases on "local";
    docker_bash_kernel_cases: agent_suites::bash_kernel_cases on "docker";
    local_swe_agent_env_cases: agent_suites::swe_agent_env_cases on "local";
    docker_swe_agent_env_cases: agent_suites::swe_agent_env_cases on "docker";
    local_open_interpreter_cases: agent_suites::open_interpreter_cases on "local";
    docker_open_interpreter_cases: agent_suites::open_interpreter_cases on "docker";
    local_swe_agent_interrupt_idle_session: agent_suites::swe_agent_interrupt_idle_session on "local";
    docker_swe_agent_interrupt_idle_session: agent_suites::swe_agent_interrupt_idle_session on "docker";
    #[ignore = "product bug: a function restored from the snapshot counts its lines ($LINENO, BASH_LINENO) from the snapshot, not from the cell that defined it"]
    local_oils_function_line_numbers: shell_suites::oils_function_line_numbers on "local";
    #[ignore = "product bug: a function restored from the snapshot counts its lines ($LINENO, BASH_LINENO) from the snapshot, not from the cell that defined it"]
    docker_oils_function_line_numbers: shell_suites::oils_function_line_numbers on "docker";
}
