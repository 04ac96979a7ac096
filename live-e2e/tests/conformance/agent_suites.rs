//! Cases taken from the public test suites of agent tools that keep a
//! persistent shell or Python session: bash_kernel
//! (`tests/test_exit_code_checker.py`, and the jupyter_kernel_test
//! samples bash kernels run: Calysto's `test_bash_kernel.py`, pixi-kernel's
//! `tests/integration/bash_kernel/kernel.py`), SWE-agent
//! (`tests/test_env.py`, with the session commands its `SWEEnv` sends, and
//! the interactive dummy of `tests/test_commands/`) and Open Interpreter
//! (`tests/test_interpreter.py`,
//! `tests/core/computer/terminal/languages/test_shell.py`), written in
//! tether's shape: each case names the test it comes from. Those tools
//! drive a shell at a prompt (pexpect, tmux) or an IPython kernel; here
//! each command is a cell, and where tether differs on purpose (README)
//! the case says so and checks tether's documented behaviour.

use super::{err, exits, ok, sh, show, shows, streams};
use std::time::{Duration, Instant};
use tether_core::protocol::{CellOutcome, Lang};
use tether_live::harness::{unique, Live};

/// bash_kernel's exit code checker, as its kernel runs it after each cell
/// (`bash_kernel/exit_code_checker.py`).
const RETCODE: &str = "{ printf \"BASHKERNEL_RETCODE<<<%d>>>\" $?; } 2>/dev/null";

/// bash_kernel (takluyver/bash_kernel): `tests/test_exit_code_checker.py`
/// (the status of the last command, read by the next one, also with a
/// conda env's prompt), the jupyter_kernel_test samples for bash kernels
/// (Calysto/calysto_bash `test_bash_kernel.py`, pixi-kernel
/// `tests/integration/bash_kernel/kernel.py`: `code_hello_world`,
/// `completion_samples`; jupyter_kernel_test's `test_execute_stderr`), and
/// the paths of bash_kernel's `do_execute` those tests go through (a
/// failing status as the cell's error, `exit`, an interrupt, incomplete
/// input, progress bars drawn with `\r`).
pub(super) async fn bash_kernel_cases(live: &mut Live) {
    live.prepare().await;
    // test_get_last_exit_code_command_not_found: 127, and the next
    // command's `$?` says so (README: a cell starts with `$?` as the
    // previous cell ended).
    let e = exits(live, "this-command-does-not-exist", 127, "").await;
    assert!(
        e.starts_with("cell ")
            && e.ends_with(": line 1: this-command-does-not-exist: command not found\n"),
        "{e}"
    );
    ok(live, RETCODE, "BASHKERNEL_RETCODE<<<127>>>").await;
    // test_get_last_exit_code_success: `echo` prints an empty line, 0.
    ok(live, "echo", "\n").await;
    ok(live, RETCODE, "BASHKERNEL_RETCODE<<<0>>>").await;
    // test_get_last_exit_code_command_not_found_conda /
    // test_get_last_exit_code_success_conda: a conda env puts
    // `(condaenv)` in the prompt (PS1, PROMPT_COMMAND); a cell's output
    // never holds a prompt, so the statuses read the same.
    ok(
        live,
        "PS1='(condaenv) \\$ '; PROMPT_COMMAND='echo \"(condaenv)\"'",
        "",
    )
    .await;
    exits(live, "this-command-does-not-exist", 127, "").await;
    ok(live, RETCODE, "BASHKERNEL_RETCODE<<<127>>>").await;
    ok(live, "echo", "\n").await;
    ok(live, RETCODE, "BASHKERNEL_RETCODE<<<0>>>").await;
    ok(
        live,
        "printf '%s|%s\\n' \"$PS1\" \"$PROMPT_COMMAND\"",
        "(condaenv) \\$ |echo \"(condaenv)\"\n",
    )
    .await;
    // jupyter_kernel_test test_execute_stdout with code_hello_world
    // `echo 'hello, world'`: exactly that on stdout, nothing on stderr;
    // test_execute_stderr: text on stderr only.
    streams(
        live,
        "echo 'hello, world'",
        CellOutcome::Ok,
        "hello, world\n",
        "",
    )
    .await;
    streams(live, "echo test >&2", CellOutcome::Ok, "", "test\n").await;
    // completion_samples (`fdis` → `fdisk`): bash_kernel's do_complete asks
    // the session's own `compgen` (`-A arrayvar -A export -A variable` for
    // `$name`, `-cdfa` for commands): names earlier cells defined complete.
    ok(
        live,
        "fdis_var=1; export fdis_exported=2; fdis_arr=(x y); fdis_fn() { :; }; alias fdis_alias='echo a'",
        "",
    )
    .await;
    ok(
        live,
        "compgen -A arrayvar -A export -A variable fdis | sort -u",
        "fdis_arr\nfdis_exported\nfdis_var\n",
    )
    .await;
    ok(
        live,
        "compgen -A function fdis; compgen -a fdis; compgen -c ech | grep -x echo | sort -u",
        "fdis_fn\nfdis_alias\necho\n",
    )
    .await;
    // do_execute: a status other than 0 is the cell's error, its value
    // the status (tether: the cell ends `exit N`).
    exits(live, "false", 1, "").await;
    exits(live, "(exit 42)", 42, "").await;
    // do_execute's EOF path: `exit` ends bash_kernel's bash ("Restarting
    // Bash", the state gone). tether differs on purpose (README, "What
    // ends a cell early keeps the state it reached"): the cell ends with
    // the status and the state stays.
    exits(live, "KEPT=yes; cd /tmp; exit 3", 3, "").await;
    ok(live, "echo \"$KEPT $PWD $?\"", "yes /tmp 3\n").await;
    // do_execute's KeyboardInterrupt path: the running command is
    // interrupted (SIGINT there, status `abort`), the kernel goes on with
    // its state. tether: `cancelled`, and a cancel is a TERM, so the next
    // cell's `$?` is 143 (README, "A timeout cancels"), not 130.
    let run = live
        .run_cancelling_at(
            "k",
            Lang::Shell,
            "BEFORE=1; echo go; sleep 100",
            Some(b"go\n"),
        )
        .await;
    assert_eq!(run.outcome, CellOutcome::Cancelled, "{}", show(&run));
    ok(live, "echo \"$? $BEFORE $KEPT\"", "143 1 yes\n").await;
    // Incomplete input: at a prompt, bash waits with its continuation
    // prompt (bash_kernel's IREPLWrapper watches for PS2; pexpect's
    // replwrap raises "Continuation prompt found - input was
    // incomplete"). A cell is a whole script: it is a syntax error, and
    // nothing of it is left over to glue onto the next cell.
    let run = sh(live, "if true; then echo partial").await;
    assert_eq!(
        (run.outcome.clone(), run.out()),
        (CellOutcome::Exit { code: 2 }, String::new()),
        "{}",
        show(&run)
    );
    assert!(
        err(&run).contains("syntax error: unexpected end of file"),
        "{}",
        show(&run)
    );
    ok(live, "echo after", "after\n").await;
    // Progress bars (bash_kernel 0.9.0: its wrapper splits the output at
    // `\r` too): the bytes come back as written, each `\r` kept.
    let run = sh(live, "printf '10%%\\r50%%\\r100%%\\n'; printf 'done\\r\\n'").await;
    assert_eq!(run.stdout, b"10%\r50%\r100%\ndone\r\n", "{}", show(&run));
    live.shutdown("k").await;
}

/// SWE-agent (`tests/test_env.py`): the session a `SWEEnv` opens and the
/// commands it sends in it (`sweagent/environment/swe_env.py`: the
/// startup source, `set_env_variables`, the reset's `cd` and `export
/// ROOT=$(pwd -P)`), test_startup_commands,
/// test_env_communicate_with_handling (`echo 'hello world'`, and the
/// status `check="raise"` reads), test_env_communicate_with_handling_timeout
/// (`sleep 10` with a timeout of 0.2 s), test_env_interrupt_session
/// while a command runs (idle: [`swe_agent_interrupt_idle_session`]),
/// test_read_file_preserve_newlines, and the interactive dummy of
/// `tests/test_commands/` (a program that reads commands at its own
/// prompt).
pub(super) async fn swe_agent_env_cases(live: &mut Live) {
    live.prepare().await;
    let dir = format!("{}/swe-agent-{}", live.side_dir(), unique());
    ok(live, &format!("mkdir -p {dir}/real"), "").await;
    // _init_deployment: the session starts by sourcing a startup file
    // (`startup_source=["/root/.bashrc"]`); what it defines is there in
    // every later command.
    ok(
        live,
        &format!(
            "cat > {dir}/bashrc <<'EOF'\nexport FROM_RC=rc\nrc_fn() {{ echo \"rc_fn $*\"; }}\nalias rc_alias='echo rc_alias'\nEOF\nsource {dir}/bashrc"
        ),
        "",
    )
    .await;
    ok(
        live,
        "rc_fn a b; rc_alias; sh -c 'echo $FROM_RC'",
        "rc_fn a b\nrc_alias\nrc\n",
    )
    .await;
    // set_env_variables: `export K=shlex.quote(v)` joined by `&&`; child
    // processes of later commands see them, quoting exact; text in UTF-8
    // comes back as written.
    ok(
        live,
        "export LANG=C.UTF-8 && export LC_ALL=C.UTF-8 && export PIP_PROGRESS_BAR=off && export PAGER=cat && export QUOTED='it'\"'\"'s a \"test\" $HOME'",
        "",
    )
    .await;
    ok(
        live,
        "python3 -c 'import os; print(os.environ[\"LC_ALL\"], os.environ[\"PIP_PROGRESS_BAR\"], os.environ[\"PAGER\"]); print(os.environ[\"QUOTED\"])'",
        "C.UTF-8 off cat\nit's a \"test\" $HOME\n",
    )
    .await;
    ok(
        live,
        "echo 'héllo wörld ✓'; python3 -c 'print(\"\\u00e9\\u2713\")'",
        "héllo wörld ✓\né✓\n",
    )
    .await;
    // reset: `cd /{repo} && export ROOT=$(pwd -P) && …`, checked with
    // `check="raise"`; here the repository is reached through a symlink,
    // so `pwd` (the logical directory, which the next command starts in:
    // README, "What persists") and `$ROOT` (the physical one) differ.
    ok(
        live,
        &format!("ln -sfn {dir}/real {dir}/repo && cd {dir}/repo && export ROOT=$(pwd -P)"),
        "",
    )
    .await;
    ok(
        live,
        "pwd; echo \"$ROOT\"; pwd -P",
        &format!("{dir}/repo\n{dir}/real\n{dir}/real\n"),
    )
    .await;
    // test_startup_commands, test_env_communicate_with_handling: `echo
    // 'hello world'` as a post-startup command and with check="raise":
    // its output and status 0.
    streams(
        live,
        "echo 'hello world'",
        CellOutcome::Ok,
        "hello world\n",
        "",
    )
    .await;
    // check="raise" raises on a status other than 0: the status is the
    // command's, and a failed `cd … && export …` changes nothing.
    let e = exits(live, "ls /nonexistent-swe-agent", 2, "").await;
    assert!(e.contains("No such file or directory"), "{e}");
    let e = exits(
        live,
        "cd /nonexistent-swe-agent && export ROOT=wrong",
        1,
        "",
    )
    .await;
    assert!(e.contains("No such file or directory"), "{e}");
    ok(
        live,
        "pwd; echo \"$ROOT\"",
        &format!("{dir}/repo\n{dir}/real\n"),
    )
    .await;
    // test_env_communicate_with_handling_timeout: `sleep 10` with a
    // timeout of 0.2 s raises CommandTimeoutError: here the cell times
    // out, long before the 10 s, and the session goes on at once with
    // its state (README, "A timeout cancels": `$?` is 143).
    let start = Instant::now();
    let run = live
        .run_with_timeout("k", Lang::Shell, "sleep 10", Duration::from_millis(200))
        .await;
    let took = start.elapsed();
    assert_eq!(run.outcome, CellOutcome::TimedOut, "{}", show(&run));
    assert!(
        took >= Duration::from_millis(200) && took < Duration::from_secs(8),
        "{took:?}"
    );
    ok(
        live,
        "echo $?; pwd; echo \"$ROOT\"",
        &format!("143\n{dir}/repo\n{dir}/real\n"),
    )
    .await;
    // test_env_interrupt_session, while a command runs: the interrupt
    // ends that command only (idle: `swe_agent_interrupt_idle_session`).
    let run = live
        .run_cancelling_at("k", Lang::Shell, "echo go; sleep 100", Some(b"go\n"))
        .await;
    assert_eq!(run.outcome, CellOutcome::Cancelled, "{}", show(&run));
    ok(
        live,
        "rc_fn still; echo \"$ROOT\"",
        &format!("rc_fn still\n{dir}/real\n"),
    )
    .await;
    // test_read_file_preserve_newlines: a file with `\r\n` and a lone
    // `\r` read back byte for byte, by `cat` and by the base64 command
    // `read_file` runs, and from Python with `newline=''`.
    ok(
        live,
        "printf 'line1\\r\\nline2\\rline3\\n' > model.patch",
        "",
    )
    .await;
    let run = sh(live, "cat model.patch").await;
    assert_eq!(run.stdout, b"line1\r\nline2\rline3\n", "{}", show(&run));
    ok(
        live,
        "python3 -c \"import base64, pathlib, sys; sys.stdout.write(base64.b64encode(pathlib.Path(sys.argv[1]).read_bytes()).decode('ascii'))\" model.patch",
        "bGluZTENCmxpbmUyDWxpbmUzCg==",
    )
    .await;
    shows(
        live,
        &format!("open('{dir}/real/model.patch', newline='').read()"),
        "'line1\\r\\nline2\\rline3\\n'\n",
    )
    .await;
    // tests/test_commands/_interactive_dummy.py: a program that prints a
    // prompt and reads commands (`send …`, `stop`). A cell has no stdin
    // (README): the program sees EOF at once and ends, it never waits;
    // its commands go in the code, as a heredoc.
    ok(
        live,
        concat!(
            "cat > dummy.py <<'EOF'\n",
            "print('Started interactive dummy command')\n",
            "while True:\n",
            "    cmd, _, args = input('(dummy) ').partition(' ')\n",
            "    if cmd == 'stop':\n",
            "        print('Stopped interactive dummy command')\n",
            "        break\n",
            "    print(f'Received input: {args}' if cmd == 'send' else f'Unknown command: {cmd}')\n",
            "EOF",
        ),
        "",
    )
    .await;
    let start = Instant::now();
    let run = sh(live, "python3 dummy.py").await;
    assert_eq!(
        (run.outcome.clone(), run.out()),
        (
            CellOutcome::Exit { code: 1 },
            "Started interactive dummy command\n(dummy) ".to_owned()
        ),
        "{}",
        show(&run)
    );
    assert!(err(&run).contains("EOFError"), "{}", show(&run));
    assert!(start.elapsed() < Duration::from_secs(20));
    ok(
        live,
        "python3 dummy.py <<'EOF'\nsend hello\nfoo\nstop\nEOF",
        "Started interactive dummy command\n(dummy) Received input: hello\n(dummy) Unknown command: foo\n(dummy) Stopped interactive dummy command\n",
    )
    .await;
    live.shutdown("k").await;
    live.shutdown("py").await;
}

/// Open Interpreter: `tests/core/computer/terminal/languages/test_shell.py`
/// (test_run, test_run_hang) and `tests/test_interpreter.py`, the code its
/// model is asked to write and run, in the shell and in Python
/// (test_hallucinations' `10+12`, test_generator's and test_math's
/// arithmetic, test_skills' function used by a later run,
/// test_delayed_exec, test_nested_loops_and_multiple_newlines,
/// test_write_to_file read back by a fresh conversation,
/// test_break_execution: a run stopped half way).
pub(super) async fn open_interpreter_cases(live: &mut Live) {
    live.prepare().await;
    let dir = format!("{}/oi-{}", live.side_dir(), unique());
    ok(live, &format!("mkdir -p {dir} && cd {dir}"), "").await;
    // test_shell.py test_run
    streams(
        live,
        "echo 'Hello World'",
        CellOutcome::Ok,
        "Hello World\n",
        "",
    )
    .await;
    // test_shell.py test_run_hang: an unmatched quote must not hang the
    // shell waiting for the rest (Open Interpreter gives up after its
    // retries). The source looks for zsh's word "unmatched"; bash says
    // "unexpected EOF while looking for matching `''", a syntax error
    // that only ends the cell (README, "What ends a cell early").
    let start = Instant::now();
    let run = sh(live, "echo World'").await;
    assert_eq!(
        (run.outcome.clone(), run.out()),
        (CellOutcome::Exit { code: 2 }, String::new()),
        "{}",
        show(&run)
    );
    assert!(
        err(&run).contains("unexpected EOF while looking for matching `''"),
        "{}",
        show(&run)
    );
    assert!(start.elapsed() < Duration::from_secs(20));
    ok(live, "echo 'Hello World'", "Hello World\n").await;
    // test_nested_loops_and_multiple_newlines: nested loops with one to
    // three blank lines between the lines, in the shell and in Python (a
    // cell is a script: a blank line does not end a block, as it would at
    // the plain prompt).
    ok(
        live,
        "for i in 1 2\n\ndo\n\n\n  for j in a b\n  do\n\n    echo \"$i$j\";\n\n\n  done\n\ndone\n\n",
        "1a\n1b\n2a\n2b\n",
    )
    .await;
    shows(
        live,
        "for i in range(2):\n\n\n    for j in range(2):\n\n        print(i, j)\n\n\nprint('end')\n",
        "0 0\n0 1\n1 0\n1 1\nend\n",
    )
    .await;
    // test_hallucinations: `10+12` run as Python shows 22 (tether: the
    // last expression's repr, on its own line).
    shows(live, "10+12", "22\n").await;
    // test_generator: "What's 38023*40334? Use Python", and the others.
    shows(live, "38023*40334", "1533619682\n").await;
    shows(live, "print(2334*34335555)", "80139185370\n").await;
    shows(live, "3545*22\n0.0021*3433335555", "7210004.665499999\n").await;
    // test_math: `n1 + n2 * (n1 - n2) / (n2 + n1)` rounded to 2 places.
    shows(
        live,
        "n1, n2 = 37, 4321\nround(n1 + n2 * (n1 - n2) / (n2 + n1), 2)",
        "-4210.63\n",
    )
    .await;
    // test_skills: a function one run defines, a later run calls.
    shows(live, "def testing_skill():\n    print('hi')", "").await;
    shows(live, "testing_skill()", "hi\n").await;
    // test_delayed_exec: print, wait a second, print again, in one block;
    // both lines, in order, after the delay, in the shell and in Python.
    let start = Instant::now();
    ok(live, "echo first; sleep 1; echo second", "first\nsecond\n").await;
    assert!(start.elapsed() >= Duration::from_secs(1));
    let start = Instant::now();
    shows(
        live,
        "import time\nprint('first')\ntime.sleep(1)\nprint('second')",
        "first\nsecond\n",
    )
    .await;
    assert!(start.elapsed() >= Duration::from_secs(1));
    // test_write_to_file: 'Washington' written to file.txt, then read by
    // a fresh conversation (a later run, in the kernel's working
    // directory), and by the shell.
    shows(
        live,
        &format!("import os\nos.chdir({dir:?})\nwith open('file.txt', 'w') as f:\n    f.write('Washington')"),
        "",
    )
    .await;
    shows(
        live,
        "os.path.exists('file.txt'), open('file.txt').read()",
        "(True, 'Washington')\n",
    )
    .await;
    ok(live, "cat file.txt", "Washington").await;
    // test_break_execution: a loop that appends 1 to 5 to numbers.txt
    // with a second's sleep each, stopped once it printed "adding 3 to
    // file" (no flush: a print reaches the client as it happens); the
    // file holds 1 and never 5, nothing is written after the stop, and
    // the interpreter keeps what the loop reached.
    let run = live
        .run_cancelling_at(
            "py",
            Lang::Python,
            concat!(
                "print('starting')\n",
                "import time\n",
                "import os\n",
                "\n",
                "open('numbers.txt', 'w').close()\n",
                "\n",
                "with open('numbers.txt', 'a+') as f:\n",
                "    for i in [1, 2, 3, 4, 5]:\n",
                "        print('adding', i, 'to file')\n",
                "        f.write(str(i) + '\\n')\n",
                "        print('starting to sleep')\n",
                "        time.sleep(1)\n",
                "        f.seek(0, os.SEEK_END)\n",
            ),
            Some(b"adding 3 to file"),
        )
        .await;
    assert_eq!(run.outcome, CellOutcome::Cancelled, "{}", show(&run));
    assert!(
        run.out().starts_with("starting\nadding 1 to file\n") && !run.out().contains("adding 4"),
        "{}",
        show(&run)
    );
    let read = "content = open('numbers.txt').read()\n('1' in content, '5' in content, i)";
    shows(live, read, "(True, False, 3)\n").await;
    shows(live, "time.sleep(1.5)", "").await;
    shows(live, read, "(True, False, 3)\n").await;
    shows(live, "content", "'1\\n2\\n3\\n'\n").await;
    live.shutdown("k").await;
    live.shutdown("py").await;
}

/// SWE-agent `tests/test_env.py` test_env_interrupt_session: the session
/// is interrupted (`BashInterruptAction`, a Ctrl-C) while no command
/// runs; it stays usable and the next command runs to its end. Here the
/// interrupt is the driver's cancel (`CancelHandle::cancel_current`, what
/// Ctrl-C calls), sent between cells. It found a product bug (fixed in
/// session 23): the cancel waited in the driver's channel and took the
/// next cell for "the cell being run", which resolved `cancelled` without
/// running and without a word.
pub(super) async fn swe_agent_interrupt_idle_session(live: &mut Live) {
    live.prepare().await;
    let marker = format!("{}/after-interrupt-{}", live.side_dir(), unique());
    ok(live, "IDLE=1; echo before", "before\n").await;
    live.driver().cancel_handle().cancel_current();
    let run = sh(
        live,
        &format!("touch {marker}; echo 'after interrupt' $IDLE"),
    )
    .await;
    let ran = live.exec(&["test", "-e", &marker]).await.exit_code == 0;
    assert_eq!(
        (run.outcome.clone(), run.out(), ran),
        (CellOutcome::Ok, "after interrupt 1\n".to_owned(), true),
        "{}",
        show(&run)
    );
    live.shutdown("k").await;
}
