//! Cases taken from the public test suites of sandbox and code-executor
//! tools that run an agent's commands: inspect_ai's sandbox self-check
//! (`src/inspect_ai/util/_sandbox/self_check.py`), bash tool tests
//! (`tests/tools/test_bash_tool.py`) and sandbox tools' tests
//! (`src/inspect_sandbox_tools/tests/test_exec_remote.py`,
//! `test_process_tree.py`), Modal's sandbox tests
//! (`test/sandbox_test.py`), autogen's code executors
//! (`autogen-ext` `tests/code_executors/test_jupyter_code_executor.py`,
//! `test_commandline_code_executor.py`; autogen 0.2
//! `test/coding/test_embedded_ipython_code_executor.py`), mini-swe-agent's
//! local environment (`tests/environments/test_local.py`) and LangChain
//! experimental's `BashProcess` (`tests/unit_tests/test_bash.py`),
//! written in tether's shape: each case names the test it comes from and
//! checks tether's exact output where the source checks a substring.
//! Those tools run each command in a fresh process with optional stdin,
//! cwd and env; here a command is a cell of a kernel, so the data goes in
//! the code (README: cells have no stdin), and the working directory and
//! environment are what earlier cells left.

use super::{err, exits, ok, py, sh, show, shows, streams, timed};
use std::time::{Duration, Instant};
use tether_core::protocol::{CellOutcome, Lang};
use tether_live::harness::{unique, CellRun, Live};

/// The events of `run` other than its output (for messages about a run
/// with megabytes of output).
fn not_output(run: &CellRun) -> String {
    let events: Vec<String> = run
        .events
        .iter()
        .map(|e| format!("{e:?}"))
        .filter(|e| !e.starts_with("Output"))
        .collect();
    events.join("\n")
}

/// inspect_ai's sandbox self-check (`self_check.py`), its exec checks:
/// stdout and stderr apart, the exit status, a command that kills itself
/// with TERM (not a timeout), a timeout that kills the command and its
/// children, a file that is not executable, and the working directory
/// (`cwd=`) as a `cd` of an earlier cell; and the bash tool's
/// `test_bash_chmodless_script`.
pub(super) async fn inspect_sandbox_exec_cases(live: &mut Live) {
    live.prepare().await;
    let dir = format!("{}/inspect-{}", live.side_dir(), unique());
    ok(live, &format!("mkdir -p {dir} && cd {dir}"), "").await;
    // test_exec_output
    ok(live, "sh -c 'echo foo; echo bar'", "foo\nbar\n").await;
    // test_exec_stderr: stderr is its own stream, exact.
    streams(
        live,
        "sh -c 'echo boof; echo baz >&2'",
        CellOutcome::Ok,
        "boof\n",
        "baz\n",
    )
    .await;
    // test_exec_returncode: 70 from the command, and from the cell's own
    // `exit`; the next cell's `$?` is that status.
    exits(live, "sh -c 'echo foo; exit 70'", 70, "foo\n").await;
    exits(live, "echo foo; exit 70", 70, "foo\n").await;
    ok(live, "echo $?", "70\n").await;
    // test_exec_timeout_not_raised_on_fast_signal_death: a command that
    // TERMs itself at once ends with 143, well inside its timeout; it is
    // not reported as timed out.
    let (run, _) = timed(
        live,
        "k",
        Lang::Shell,
        "sh -c 'kill -TERM $$'",
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(
        run.outcome,
        CellOutcome::Exit { code: 143 },
        "{}",
        show(&run)
    );
    // The same in the cell's own shell (`$$` is the cell's: README, "Per
    // cell"): 143 as well, and what the cell did before is kept, as for
    // a cancel's TERM (README, "What ends a cell early").
    let (run, _) = timed(
        live,
        "k",
        Lang::Shell,
        "KEPT=1; kill -TERM $$; echo never",
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(
        (run.outcome.clone(), run.out()),
        (CellOutcome::Exit { code: 143 }, String::new()),
        "{}",
        show(&run)
    );
    ok(live, "echo $KEPT $?", "1 143\n").await;
    // test_exec_timeout: `sleep 4` with a timeout of 2 s times out.
    let (run, took) = timed(live, "k", Lang::Shell, "sleep 4", Duration::from_secs(2)).await;
    assert_eq!(run.outcome, CellOutcome::TimedOut, "{}", show(&run));
    assert!(took >= Duration::from_secs(2), "never early: {took:?}");
    // test_exec_timeout_kills_process, test_exec_timeout_kills_child_processes:
    // once the timeout resolved, neither the foreground command nor a
    // child it started in the background is left (a `sh` named by a
    // marker each, so `ps` finds them; `; :` keeps sh from exec'ing sleep).
    let tag = unique() + 90_000;
    let (parent, child) = (format!("tmo-parent-{tag}"), format!("tmo-child-{tag}"));
    let (run, _) = timed(
        live,
        "k",
        Lang::Shell,
        &format!("sh -c 'sleep 30; :' {child} &\nsh -c 'sleep 30; :' {parent}"),
        Duration::from_secs(2),
    )
    .await;
    assert_eq!(run.outcome, CellOutcome::TimedOut, "{}", show(&run));
    for marker in [&parent, &child] {
        let left = live.survivors(marker).await;
        assert!(left.is_empty(), "{marker} still runs: {left:?}");
    }
    // test_exec_permission_error: `/etc/passwd` is not executable: 126,
    // and bash says why (in the cell's name: README, "Messages speak of
    // the cell").
    let e = exits(live, "/etc/passwd", 126, "").await;
    assert!(
        e.starts_with("cell ") && e.ends_with(": line 1: /etc/passwd: Permission denied\n"),
        "{e}"
    );
    // test_bash.py test_bash_chmodless_script: a script written without
    // `chmod +x`.
    let e = exits(live, "echo 'true' > myscript && ./myscript", 126, "").await;
    assert!(e.ends_with("./myscript: Permission denied\n"), "{e}");
    // test_cwd_custom: `ls` in /usr/bin lists `env`.
    ok(live, "cd /usr/bin", "").await;
    ok(live, "ls | grep -x env", "env\n").await;
    // test_cwd_relative / test_cwd_absolute: a relative `cd` from the
    // directory an earlier cell left, then an absolute one.
    ok(
        live,
        &format!("cd {dir} && mkdir subdir && echo 'ls me plz' > subdir/test_cwd_relative.file"),
        "",
    )
    .await;
    ok(live, "cd subdir", "").await;
    ok(
        live,
        "ls; cat test_cwd_relative.file",
        "test_cwd_relative.file\nls me plz\n",
    )
    .await;
    ok(
        live,
        &format!("mkdir {dir}/abs && touch {dir}/abs/test_cwd_absolute.file && cd {dir}/abs"),
        "",
    )
    .await;
    ok(
        live,
        "ls; pwd",
        &format!("test_cwd_absolute.file\n{dir}/abs\n"),
    )
    .await;
    live.shutdown("k").await;
}

/// inspect_ai's sandbox self-check, its input and output checks, and the
/// bash tool's byte cases: what `exec(input=…)` sends on stdin is, in a
/// kernel without stdin, data in the code (text with shell-special
/// characters verbatim, binary bytes, 1 MiB); the UTF-8 text and binary
/// file round trips; non-UTF-8 and 5 MB outputs byte for byte; and the
/// bash tool's NUL byte, in a Python cell.
pub(super) async fn inspect_sandbox_io_cases(live: &mut Live) {
    live.prepare().await;
    let dir = format!("{}/inspect-io-{}", live.side_dir(), unique());
    ok(live, &format!("mkdir -p {dir} && cd {dir}"), "").await;
    // test_exec_input_text: `cat` with empty input prints nothing (here:
    // no stdin at all); with text, as a quoted heredoc.
    ok(live, "cat", "").await;
    ok(live, "cat <<'EOF'\nhello\nworld\nEOF", "hello\nworld\n").await;
    // test_exec_input_shell_special: nothing is expanded.
    let special = "$HOME `whoami` 'single' \"double\" \\backslash\nnewline\n";
    ok(live, &format!("cat <<'EOF'\n{special}EOF"), special).await;
    // inspect_sandbox_tools test_exec_remote.py test_submit_with_input:
    // special_chars, wc_line_count, grep_filter.
    ok(
        live,
        "cat <<'EOF'\nhello\tworld\n\"quotes\" and 'apostrophes'\n$variables\nEOF",
        "hello\tworld\n\"quotes\" and 'apostrophes'\n$variables\n",
    )
    .await;
    ok(live, "wc -l <<'EOF'\none\ntwo\nthree\nEOF", "3\n").await;
    ok(
        live,
        "grep ^a <<'EOF'\napple\nbanana\napricot\ncherry\nEOF",
        "apple\napricot\n",
    )
    .await;
    // test_exec_input_binary: invalid UTF-8 and NUL bytes reach the file.
    ok(
        live,
        "printf '\\xc3\\x28\\x00\\xff\\x01\\x02bytes' > test_exec_input_binary.file\nod -An -tx1 test_exec_input_binary.file",
        " c3 28 00 ff 01 02 62 79 74 65 73\n",
    )
    .await;
    // test_exec_input_large: 1 MiB of data in one cell.
    let mib = "a".repeat(1 << 20);
    ok(
        live,
        &format!("tr -d '\\n' <<'EOF' | wc -c\n{mib}\nEOF"),
        "1048576\n",
    )
    .await;
    shows(live, &format!("len('{mib}')"), "1048576\n").await;
    // test_write_file_text_utf: a UTF-8 text written and read back, by
    // the shell and by Python (whose stdout is UTF-8 on every backend).
    let utf = "✨☽︎✨🌞︎︎✨🚀✨";
    ok(
        live,
        &format!("printf '%s' '{utf}' > test_write_file_text_utf.file; cat test_write_file_text_utf.file"),
        utf,
    )
    .await;
    shows(
        live,
        &format!(
            "import os\nos.chdir({dir:?})\nwith open('test_write_file_text_utf.file', encoding='utf-8') as f:\n    text = f.read()\nprint(text)\ntext == '{utf}'"
        ),
        &format!("{utf}\nTrue\n"),
    )
    .await;
    // test_read_and_write_file_binary (b"\xc3\x28", invalid UTF-8), from
    // Python's binary stdout; test_bash.py test_bash_invalid_utf8
    // (`printf '\xff'`).
    let run = py(
        live,
        "import sys; sys.stdout.buffer.write(b'\\xc3\\x28'); sys.stdout.flush()",
    )
    .await;
    assert_eq!(run.stdout, b"\xc3\x28", "{}", show(&run));
    let run = sh(live, "printf '\\xff'").await;
    assert_eq!(run.stdout, b"\xff", "{}", show(&run));
    // test_read_and_write_large_file_binary: 5,000,000 bytes of \xc3.
    let run = sh(live, "head -c 5000000 /dev/zero | tr '\\0' '\\303'").await;
    assert_eq!(run.outcome, CellOutcome::Ok, "{:?}", run.outcome);
    assert_eq!(run.stdout.len(), 5_000_000);
    assert!(run.stdout.iter().all(|&b| b == 0xc3));
    // test_bash.py test_bash_null_byte, in Python: the compiler refuses a
    // NUL in the code (a ValueError or a SyntaxError, by CPython patch
    // release), nothing of the cell runs, and the kernel goes on.
    let run = py(live, "print(1)\0").await;
    let said = match &run.outcome {
        CellOutcome::Error { message } => message.clone(),
        _ => String::new(),
    };
    assert!(
        ["SyntaxError", "ValueError"]
            .map(|e| format!("{e}: source code string cannot contain null bytes"))
            .contains(&said)
            && run.stdout.is_empty(),
        "{}",
        show(&run)
    );
    shows(live, "print(2)", "2\n").await;
    live.shutdown("k").await;
    live.shutdown("py").await;
}

/// Modal's sandbox tests (`test/sandbox_test.py`): a command's stdout,
/// stderr and status apart (test_sandbox, test_sandbox_async_for), a loop
/// reading stdin (test_sandbox_stdin: here no stdin, or the lines as a
/// heredoc), line-buffered reads and a partial line (test_sandbox_stdout),
/// waiting for the status (test_sandbox_exec_wait), a timeout that ends
/// the command on time with what it printed
/// (test_sandbox_exec_wait_timeout, test_sandbox_exec_output_timeout) and
/// terminate (test_sandbox_terminate).
pub(super) async fn modal_sandbox_cases(live: &mut Live) {
    live.prepare().await;
    // test_sandbox: the cell waits for the command (over 1 s), then its
    // streams and status.
    let start = Instant::now();
    let run = sh(live, "echo bye >&2 && sleep 1 && echo hi && exit 42").await;
    let took = start.elapsed();
    assert_eq!(
        (run.outcome.clone(), run.out(), err(&run)),
        (
            CellOutcome::Exit { code: 42 },
            "hi\n".into(),
            "bye\n".into()
        ),
        "{}",
        show(&run)
    );
    assert!(took >= Duration::from_secs(1), "{took:?}");
    // test_sandbox_from_id: `echo foo && exit 42`.
    exits(live, "echo foo && exit 42", 42, "foo\n").await;
    // test_sandbox_stdin: `while read line; do echo $line; done && exit
    // 13`. A cell has no stdin (README), so the loop ends at once; the
    // lines Modal writes to stdin go in the code.
    exits(
        live,
        "while read line; do echo $line; done && exit 13",
        13,
        "",
    )
    .await;
    exits(
        live,
        "while read line; do echo $line; done <<'EOF' && exit 13\nfoo\nbar\nEOF",
        13,
        "foo\nbar\n",
    )
    .await;
    // test_sandbox_stdout: three lines from a loop, three from one echo,
    // and a partial line joined to the next by `read`.
    ok(
        live,
        "for i in $(seq 1 3); do echo foo $i; done",
        "foo 1\nfoo 2\nfoo 3\n",
    )
    .await;
    ok(live, "echo 'foo 1\nfoo 2\nfoo 3'", "foo 1\nfoo 2\nfoo 3\n").await;
    ok(
        live,
        "{ printf 'foo 1\\n'; printf 'foo 2'; printf 'foo 3\\n'; } | while read line; do echo $line; done",
        "foo 1\nfoo 2foo 3\n",
    )
    .await;
    // test_sandbox_async_for, test_app_sandbox
    streams(
        live,
        "echo hello && echo world && echo bye >&2",
        CellOutcome::Ok,
        "hello\nworld\n",
        "bye\n",
    )
    .await;
    // test_sandbox_exec_stdout_bytes_mode
    let run = sh(live, "echo foo").await;
    assert_eq!(run.stdout, b"foo\n");
    // test_sandbox_exec_wait: the status comes after the command's 0.5 s.
    let start = Instant::now();
    exits(live, "sleep 0.5 && exit 42", 42, "").await;
    assert!(start.elapsed() >= Duration::from_millis(500));
    // test_sandbox_exec_wait_timeout: `sleep 999` with a timeout of 1 s
    // ends after 1 s (never before: README), not much later (Modal: at
    // most 1.2 s; here the TERM ends `sleep` at once, and the bound
    // allows for a loaded machine).
    let (run, took) = timed(live, "k", Lang::Shell, "sleep 999", Duration::from_secs(1)).await;
    assert_eq!(run.outcome, CellOutcome::TimedOut, "{}", show(&run));
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(10),
        "{took:?}"
    );
    // test_sandbox_exec_output_timeout: what it printed before is there.
    let (run, took) = timed(
        live,
        "k",
        Lang::Shell,
        "echo hi; sleep 999",
        Duration::from_secs(1),
    )
    .await;
    assert_eq!(
        (run.outcome.clone(), run.out()),
        (CellOutcome::TimedOut, "hi\n".into()),
        "{}",
        show(&run)
    );
    assert!(took < Duration::from_secs(10), "{took:?}");
    // test_sandbox_terminate: `sleep 10000` terminated has a status that
    // is not 0: cancelled, and the next cell's `$?` is 143 (the cancel is
    // a TERM: README, "A timeout cancels").
    let run = live
        .run_cancelling_at("k", Lang::Shell, "echo up; sleep 10000", Some(b"up\n"))
        .await;
    assert_eq!(run.outcome, CellOutcome::Cancelled, "{}", show(&run));
    ok(live, "echo $?", "143\n").await;
    live.shutdown("k").await;
}

/// autogen's code executors: the Jupyter executor
/// (`test_jupyter_code_executor.py`: test_execute_code,
/// test_execute_code_error, test_execute_multiple_code_blocks(_error),
/// test_depedent_executions, the timeout and restart tests), the embedded
/// IPython executor of autogen 0.2 (`test_embedded_ipython_code_executor.py`:
/// test_execute_code_multiple_code_blocks, test_timeout, test_restart)
/// and the local command-line executor's cancellation
/// (`test_commandline_code_executor.py`): each code block a cell of one
/// Python kernel.
pub(super) async fn autogen_executor_cases(live: &mut Live) {
    live.prepare().await;
    // test_execute_code
    shows(live, "import sys; print('hello world!')", "hello world!\n").await;
    // test_execute_code_error: exit code 1 there, the traceback naming
    // the cell and its line; an error outcome with the exception's last
    // line here (README, "Errors").
    let run = py(live, "print(undefined_variable)").await;
    assert_eq!(
        run.outcome,
        CellOutcome::Error {
            message: "NameError: name 'undefined_variable' is not defined".into()
        },
        "{}",
        show(&run)
    );
    assert!(
        err(&run)
            .contains("File \"<cell 2>\", line 1, in <module>\n    print(undefined_variable)\n"),
        "{}",
        show(&run)
    );
    assert_eq!(run.out(), "", "{}", show(&run));
    // test_execute_multiple_code_blocks_error: the second block prints
    // 200, then fails; what it printed is kept, and so is what it
    // assigned before the error.
    shows(live, "import sys; print('hello world!')", "hello world!\n").await;
    let run = py(live, "a = 100 + 100; print(a); print(undefined_variable)").await;
    assert_eq!(
        (run.outcome.clone(), run.out()),
        (
            CellOutcome::Error {
                message: "NameError: name 'undefined_variable' is not defined".into()
            },
            "200\n".into()
        ),
        "{}",
        show(&run)
    );
    shows(live, "a", "200\n").await;
    // test_depedent_executions
    shows(live, "a = 'hello world!'", "").await;
    shows(live, "print(a)", "hello world!\n").await;
    // test_execute_code_multiple_code_blocks (embedded IPython): an
    // import and an assignment, then a function used by a later block.
    shows(live, "import sys\na = 123 + 123\n", "").await;
    shows(live, "print(a)", "246\n").await;
    shows(live, "\ndef test_function(a, b):\n    return a + b\n", "").await;
    shows(live, "test_function(431, 423)", "854\n").await;
    // test_timeout / test_commandline_code_executor_timeout: the cell
    // times out before its print; the kernel keeps its namespace (the
    // interpreter gets SIGINT: client/README.md) and runs the next cell
    // at once, which sees what the timed-out cell assigned before.
    let (run, took) = timed(
        live,
        "py",
        Lang::Python,
        "during = 1\nimport time; time.sleep(10); print('hello world!')",
        Duration::from_secs(2),
    )
    .await;
    assert_eq!(
        (run.outcome.clone(), run.out()),
        (CellOutcome::TimedOut, String::new()),
        "{}",
        show(&run)
    );
    assert!(took < Duration::from_secs(10), "{took:?}");
    shows(live, "print(a, during)", "246 1\n").await;
    // The same with a child process the block started and did not wait
    // for (inspect_ai's test_exec_timeout_kills_child_processes, in a
    // Python kernel): the timeout ends it too, the namespace stays.
    let tag = unique() + 97_000;
    let (run, _) = timed(
        live,
        "py",
        Lang::Python,
        &format!(
            "import subprocess, time\nchild = subprocess.Popen(['sleep', '{tag}'])\ntime.sleep(30)"
        ),
        Duration::from_secs(2),
    )
    .await;
    assert_eq!(run.outcome, CellOutcome::TimedOut, "{}", show(&run));
    let left = live.survivors(&format!("sleep {tag}")).await;
    assert!(left.is_empty(), "{left:?}");
    shows(live, "child.poll() is not None", "True\n").await;
    // test_commandline_code_executor_cancellation: a block that sleeps
    // and then writes hello.txt, cancelled while it sleeps, never writes
    // it.
    let file = format!("{}/autogen-hello-{}.txt", live.side_dir(), unique());
    let run = live
        .run_cancelling_at(
            "py",
            Lang::Python,
            &format!(
                "import time\nprint('sleeping', flush=True)\ntime.sleep(3)\nwith open({file:?}, 'w') as f:\n    f.write('hello world!')"
            ),
            Some(b"sleeping\n"),
        )
        .await;
    assert_eq!(run.outcome, CellOutcome::Cancelled, "{}", show(&run));
    shows(
        live,
        &format!("import os, time\ntime.sleep(4)\nos.path.exists({file:?})"),
        "False\n",
    )
    .await;
    // test_restart (embedded IPython) / test_execute_code_after_restart:
    // a restarted kernel runs code, and `x` of before is gone.
    shows(live, "x = 123", "").await;
    live.shutdown("py").await;
    shows(live, "import sys; print('hello world!')", "hello world!\n").await;
    let run = py(live, "print(x)").await;
    assert_eq!(
        run.outcome,
        CellOutcome::Error {
            message: "NameError: name 'x' is not defined".into()
        },
        "{}",
        show(&run)
    );
    live.shutdown("py").await;
}

/// mini-swe-agent's local environment (`tests/environments/test_local.py`)
/// and its docker environment's env cases (`test_docker.py`): each
/// `execute` a cell of one shell kernel. mini-swe-agent merges stderr
/// into its output; a cell keeps them apart.
pub(super) async fn mini_swe_agent_cases(live: &mut Live) {
    live.prepare().await;
    let dir = format!("{}/mini-{}", live.side_dir(), unique());
    ok(live, &format!("mkdir -p {dir} && cd {dir}"), "").await;
    // test_local_environment_basic_execution
    ok(live, "echo 'hello world'", "hello world\n").await;
    // test_local_environment_set_env_variables (there set by the
    // environment's config; here by an earlier cell's export).
    ok(
        live,
        "export TEST_VAR=test_value ANOTHER_VAR=another_value",
        "",
    )
    .await;
    ok(live, "echo $TEST_VAR", "test_value\n").await;
    ok(
        live,
        "echo $TEST_VAR $ANOTHER_VAR",
        "test_value another_value\n",
    )
    .await;
    // test_local_environment_env_variable_override: a variable the
    // environment already has (tether sets PAGER to cat unless set) is
    // overridden, for the cell's children too.
    ok(live, "echo $PAGER", "cat\n").await;
    ok(live, "export PAGER=override_value", "").await;
    ok(live, "sh -c 'echo $PAGER'", "override_value\n").await;
    // test_docker_environment_forward_nonexistent_env_variables
    ok(live, "echo \"[$NONEXISTENT_VAR]\"", "[]\n").await;
    // test_local_environment_command_failure, test_local_environment_return_codes
    exits(live, "exit 1", 1, "").await;
    ok(live, "echo 'test'", "test\n").await;
    exits(live, "exit 42", 42, "").await;
    // test_local_environment_nonexistent_command: 127, the name said.
    let e = exits(live, "nonexistent_command_12345", 127, "").await;
    assert!(
        e.ends_with(": line 1: nonexistent_command_12345: command not found\n"),
        "{e}"
    );
    // test_local_environment_stderr_capture: status 0, the message on
    // stderr only.
    streams(
        live,
        "echo 'error message' >&2",
        CellOutcome::Ok,
        "",
        "error message\n",
    )
    .await;
    // test_local_environment_timeout: `sleep 2` with a timeout of 1 s.
    let (run, _) = timed(live, "k", Lang::Shell, "sleep 2", Duration::from_secs(1)).await;
    assert_eq!(run.outcome, CellOutcome::TimedOut, "{}", show(&run));
    // test_local_environment_multiline_output
    ok(
        live,
        "echo -e 'line1\\nline2\\nline3'",
        "line1\nline2\nline3\n",
    )
    .await;
    // test_local_environment_file_operations: a file one cell writes in
    // the working directory, the next reads.
    ok(live, "echo 'test content' > test.txt", "").await;
    ok(live, "cat test.txt", "test content\n").await;
    ok(live, &format!("cat {dir}/test.txt"), "test content\n").await;
    // test_local_environment_shell_features: a pipe, command substitution.
    ok(live, "echo 'hello world' | grep 'world'", "hello world\n").await;
    ok(live, "echo $(echo 'nested')", "nested\n").await;
    live.shutdown("k").await;
}

/// LangChain experimental's `BashProcess` (`tests/unit_tests/test_bash.py`):
/// `pwd`, then `cd ..` in one call and `pwd` in the next
/// (test_pwd_command_persistent), a missing command
/// (test_incorrect_command, its `return_err_output` variant), files made
/// and listed (test_create_directory_and_files) and two calls in one
/// session (test_create_bash_persistent).
pub(super) async fn langchain_bash_process_cases(live: &mut Live) {
    live.prepare().await;
    let dir = format!("{}/lc-{}", live.side_dir(), unique());
    ok(live, &format!("mkdir -p {dir}/child && cd {dir}/child"), "").await;
    // test_pwd_command, test_pwd_command_persistent
    ok(live, "pwd", &format!("{dir}/child\n")).await;
    ok(live, "cd ..", "").await;
    ok(live, "pwd", &format!("{dir}\n")).await;
    // test_incorrect_command: status 127. test_incorrect_command_return_err_output:
    // `/bin/sh: … invalid_command: not found` there; bash's message in
    // the cell's name here (README, "Messages speak of the cell").
    let run = sh(live, "invalid_command").await;
    assert_eq!(
        run.outcome,
        CellOutcome::Exit { code: 127 },
        "{}",
        show(&run)
    );
    let e = err(&run);
    assert!(
        e.starts_with("cell ") && e.ends_with(": line 1: invalid_command: command not found\n"),
        "{e}"
    );
    // test_create_directory_and_files: the commands of one call run in
    // order, and the last one's output is the call's.
    ok(
        live,
        "mkdir test_dir\ntouch test_dir/file1.txt\ntouch test_dir/file2.txt\necho 'hello world' > test_dir/file2.txt\ncat test_dir/file2.txt",
        "hello world\n",
    )
    .await;
    ok(live, "ls test_dir", "file1.txt\nfile2.txt\n").await;
    // test_create_bash_persistent
    ok(live, "echo hello", "hello\n").await;
    ok(live, "echo world", "world\n").await;
    live.shutdown("k").await;
}

/// inspect_ai's bash tool, `tests/tools/test_bash_tool.py`
/// test_bash_null_byte: a command with a NUL byte in it (`echo -n
/// '<NUL>' > /tmp/poc`) is an error that says so ("embedded null byte"),
/// not run in part; the session goes on. A shell cannot hold a NUL in
/// its code, so the cell is refused or fails saying why, and no part of
/// it runs (the Python case is in `inspect_sandbox_io_cases`).
pub(super) async fn inspect_bash_null_byte(live: &mut Live) {
    live.prepare().await;
    let dir = format!("{}/nul-{}", live.side_dir(), unique());
    ok(live, &format!("mkdir -p {dir} && cd {dir}"), "").await;
    for code in ["echo -n '\0' > poc", "echo before\0; touch poc"] {
        let run = sh(live, code).await;
        let said = match &run.outcome {
            CellOutcome::Error { message } => format!("{message}\n{}", err(&run)),
            _ => err(&run),
        };
        assert!(
            run.outcome != CellOutcome::Ok && said.to_lowercase().contains("null byte"),
            "{code:?}: {}",
            show(&run)
        );
        assert_eq!(run.out(), "", "nothing of it ran: {code:?}: {}", show(&run));
        ok(live, "[ -e poc ] || echo absent", "absent\n").await;
    }
    live.shutdown("k").await;
}

/// inspect_ai's sandbox self-check, test_exec_stdout_is_limited and
/// test_exec_stderr_is_limited: 10 MiB + 1 KiB of `yes` on each stream.
/// inspect_ai keeps 10 MiB and raises `OutputLimitExceededError`, so the
/// caller knows. tether keeps a cell's first 8 MiB (the agent's journal
/// cap, README "A cell is a script") and says how much it dropped (a
/// `clipped` event), and the cell ends as its code did.
pub(super) async fn inspect_output_limit_cases(live: &mut Live) {
    live.prepare().await;
    let cap = tether_core::agent::journal::DEFAULT_CAP as usize;
    let size = 10 * (1 << 20) + 1024;
    let clipped = |run: &CellRun| -> u64 {
        run.events
            .iter()
            .filter_map(|e| match e {
                tether_core::client::Event::Clipped { dropped, .. } => Some(*dropped),
                _ => None,
            })
            .sum()
    };
    let run = sh(live, &format!("yes | head -c {size}")).await;
    assert_eq!(run.outcome, CellOutcome::Ok, "{:?}", run.outcome);
    assert_eq!(run.stdout.len(), cap, "{}", not_output(&run));
    assert!(run.stdout.chunks(2).all(|c| c == b"y\n"));
    assert_eq!(clipped(&run), (size - cap) as u64, "the drop is said");
    let run = sh(live, &format!("yes | head -c {size} 1>&2")).await;
    assert_eq!(run.outcome, CellOutcome::Ok, "{:?}", run.outcome);
    assert_eq!(
        (run.stdout.len(), run.stderr.len()),
        (0, cap),
        "{}",
        not_output(&run)
    );
    assert!(run.stderr.chunks(2).all(|c| c == b"y\n"));
    assert_eq!(clipped(&run), (size - cap) as u64, "the drop is said");
    // Under the cap, every byte.
    let run = sh(live, &format!("yes | head -c {}", cap - 2)).await;
    assert_eq!((run.stdout.len(), clipped(&run)), (cap - 2, 0));
    live.shutdown("k").await;
}

/// inspect_ai's sandbox tools, `src/inspect_sandbox_tools/tests/`:
/// `test_exec_remote.py` (a killed job's output so far, both streams)
/// and `test_process_tree.py` (terminating a tree finds a child that the
/// TERM handler starts in a session of its own during the grace period,
/// and a TERM-ignoring child whose parent already exited). Here the kill
/// is a cancel, which resolves only once the cell's processes are gone
/// (client/README.md).
pub(super) async fn inspect_process_tree_cases(live: &mut Live) {
    live.prepare().await;
    // test_kill_returns_buffered_output
    let run = live
        .run_cancelling_at(
            "k",
            Lang::Shell,
            "echo hello_from_kill && echo err_from_kill >&2 && sleep 100",
            Some(b"hello_from_kill\n"),
        )
        .await;
    // (bash then says its foreground `sleep` was `Terminated`.)
    assert_eq!(
        (run.outcome.clone(), run.out()),
        (CellOutcome::Cancelled, "hello_from_kill\n".into()),
        "{}",
        show(&run)
    );
    assert!(err(&run).starts_with("err_from_kill\n"), "{}", show(&run));
    // test_terminate_process_tree_finds_children_spawned_during_grace_period:
    // the TERM handler starts `sleep` in a new session and goes on
    // sleeping; neither outlives the cancel.
    let tag = unique() + 95_000;
    let script = format!(
        "python3 - grace-{tag} <<'EOF'\n\
         import signal, subprocess, time\n\
         def spawn(*_):\n    \
             print(subprocess.Popen(['sleep', '{tag}'], start_new_session=True).pid, flush=True)\n\
         signal.signal(signal.SIGTERM, spawn)\n\
         print('ready', flush=True)\n\
         time.sleep(300)\n\
         EOF"
    );
    let run = live
        .run_cancelling_at("k", Lang::Shell, &script, Some(b"ready\n"))
        .await;
    assert_eq!(run.outcome, CellOutcome::Cancelled, "{}", show(&run));
    let left = live.survivors(&format!("sleep {tag}")).await;
    assert!(left.is_empty(), "{left:?}: {}", show(&run));
    let left = live.survivors(&format!("grace-{tag}")).await;
    assert!(left.is_empty(), "{left:?}");
    // test_terminate_process_tree_kills_group_after_root_exits: a child
    // that ignores TERM, whose parent printed its pid and exited.
    let tag = unique() + 96_000;
    let script = format!(
        "python3 - <<'EOF'\n\
         import subprocess, sys\n\
         child = subprocess.Popen([sys.executable, '-c', 'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(\"ready\", flush=True); time.sleep(300)', 'orphan-{tag}'], stdout=subprocess.PIPE, text=True)\n\
         child.stdout.readline()\n\
         print(child.pid, flush=True)\n\
         EOF\n\
         echo root-gone; sleep 100"
    );
    let run = live
        .run_cancelling_at("k", Lang::Shell, &script, Some(b"root-gone\n"))
        .await;
    assert_eq!(run.outcome, CellOutcome::Cancelled, "{}", show(&run));
    let left = live.survivors(&format!("orphan-{tag}")).await;
    assert!(left.is_empty(), "{left:?}: {}", show(&run));
    ok(live, "echo after", "after\n").await;
    live.shutdown("k").await;
}
