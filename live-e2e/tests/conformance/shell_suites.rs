//! Shell cases taken from the public test suites of OpenHands (runtime
//! `tests/runtime/test_bash.py`; the agent SDK's
//! `tests/tools/terminal/test_terminal_session.py`,
//! `test_heredoc_chunked_send.py`, `test_terminal_env.py`,
//! `test_terminal_reset.py`), pexpect (`tests/test_replwrap.py`), SWE-ReX
//! (`tests/test_execution.py`) and the Oils shell spec tests
//! (`spec/background.test.sh`, `spec/errexit.test.sh`,
//! `spec/builtin-set.test.sh`; split across cells: `spec/builtin-cd`,
//! `builtin-dirs`, `alias`, `builtin-trap`, `sh-options`,
//! `builtin-umask`, `sh-func`, `array-assoc`, `builtin-getopts`,
//! `builtin-read`, `builtin-printf`, `here-doc`, `builtin-eval-source`,
//! `strict-options`, `array`, `arith`, `var-op-test`, `nameref`,
//! `assign-extended`, `glob-bash`, `extglob-files`, `globstar`,
//! `word-split`, `assign`, `builtin-vars`, `case_`,
//! `nocasematch-match`, `dbracket`, `pipeline`, `loop`, `builtin-type`,
//! `command_`, `redirect`, `brace-expansion`, `quote`, `var-op-strip`,
//! `exit-status`, `globignore`, `builtin-special`, `let`,
//! `temp-binding`, `append`, `var-op-patsub`, `var-op-slice`,
//! `var-op-len`, `var-ref`, `sh-options-bash`, `builtin-echo`, `tilde`,
//! `array-sparse`, `serialize`, `print-source-code`, `func-parsing`,
//! `regex`, `introspect` and `vars-special.test.sh`),
//! written in tether's shape: each case names the test it comes from and
//! checks tether's exact output where the source checks a substring.

use super::{err, ok, sh};
use std::time::Duration;
use tether_core::protocol::{CellOutcome, Lang};
use tether_live::harness::{unique, Live};

/// Runs `code` and checks that it ended with `exit code` and printed
/// `stdout` exactly.
async fn exits(live: &mut Live, code: &str, status: i32, stdout: &str) -> String {
    let run = sh(live, code).await;
    assert_eq!(
        run.outcome,
        CellOutcome::Exit { code: status },
        "{code:?}: {run:?}"
    );
    assert_eq!(run.out(), stdout, "{code:?}: {run:?}");
    err(&run)
}

/// OpenHands, runtime `test_bash.py` and the SDK's
/// `test_terminal_session.py`: the commands of their multi-line, basic,
/// stateful and long-output tests, run as one session.
pub(super) async fn openhands_terminal_cases(live: &mut Live) {
    live.prepare().await;
    let dir = format!("{}/oh-{}", live.side_dir(), unique());
    // test_cmd_run / test_multi_cmd_run_in_single_line: `ls -l` in an
    // empty working directory says `total 0`; `mkdir test` shows up.
    ok(live, &format!("mkdir -p {dir} && cd {dir}"), "").await;
    ok(live, "ls -l", "total 0\n").await;
    ok(live, "pwd && ls -l", &format!("{dir}\ntotal 0\n")).await;
    ok(
        live,
        "mkdir test && touch test/foo.txt && ls test",
        "foo.txt\n",
    )
    .await;
    // test_stateful_cmd: `cd test` in one call, `pwd` in the next.
    ok(live, "cd test", "").await;
    ok(live, "pwd", &format!("{dir}/test\n")).await;
    // test_pwd_property: `cd random_dir && pwd` in one call.
    ok(
        live,
        "mkdir -p random_dir && cd random_dir && pwd",
        &format!("{dir}/test/random_dir\n"),
    )
    .await;
    ok(live, &format!("cd {dir} && rm -rf test"), "").await;
    // test_run_as_user_correct_home_dir: `cd ~ && pwd` is $HOME.
    let home = sh(live, "echo \"$HOME\"").await.out();
    assert!(home.starts_with('/'), "HOME is set: {home:?}");
    ok(live, &format!("cd ~ && pwd; cd {dir}"), &home).await;
    // test_multiline_commands: a continued line, `-e` escapes, blank lines.
    ok(live, "echo \\\n -e \"foo\"", "foo\n").await;
    ok(live, "echo -e \"hello\nworld\"", "hello\nworld\n").await;
    ok(live, "echo -e \"a\\n\\n\\nz\"", "a\n\n\nz\n").await;
    // test_no_ps2_in_output: no continuation prompt in the output.
    let run = sh(live, "echo -e \"hello\nworld\"").await;
    assert!(!run.out().contains('>') && err(&run).is_empty(), "{run:?}");
    // test_multiple_multiline_commands: OpenHands' tmux session refuses
    // the seven commands joined by newlines (and its CLIRuntime, a
    // `bash -c`, runs them: test_cliruntime_multiple_newline_commands);
    // a tether cell is a script, so it runs them all, in order.
    let cmds = [
        "ls -l",
        "echo -e \"hello\nworld\"",
        "echo -e \"hello it's me\"",
        "echo \\\n    -e 'hello' \\\n    world",
        "echo -e 'hello\\nworld\\nare\\nyou\\nthere?'",
        "echo -e 'hello\nworld\nare\nyou\n\nthere?'",
        "echo -e 'hello\nworld \"'",
    ];
    let outs = [
        "total 0\n",
        "hello\nworld\n",
        "hello it's me\n",
        "hello world\n",
        "hello\nworld\nare\nyou\nthere?\n",
        "hello\nworld\nare\nyou\n\nthere?\n",
        "hello\nworld \"\n",
    ];
    ok(live, &cmds.join("\n"), &outs.concat()).await;
    for (cmd, out) in cmds.iter().zip(outs) {
        ok(live, cmd, out).await;
    }
    // test_basic_command: a missing command is 127 and says so; spaces
    // and a newline inside quotes are kept; an `&&` chain runs through.
    let e = exits(live, "nonexistent_command", 127, "").await;
    assert!(e.contains("nonexistent_command: command not found"), "{e}");
    ok(
        live,
        "echo 'hello   world    with\nspecial  chars'",
        "hello   world    with\nspecial  chars\n",
    )
    .await;
    ok(
        live,
        "echo \"first\" && echo \"second\" && echo \"third\"",
        "first\nsecond\nthird\n",
    )
    .await;
    // test_multiline_command (SDK): an `if` over three lines.
    ok(live, "if true; then\necho \"inside if\"\nfi", "inside if\n").await;
    // test_history_expansion_disabled (SDK): `!` is not history expansion.
    ok(live, "echo A!B", "A!B\n").await;
    // test_bash_remove_prefix: the output is the command's, never the
    // command line echoed back.
    ok(live, "echo marker-$((6 * 7))", "marker-42\n").await;
    // test_python_version (`python3` here: the docker image has no
    // `python` alias).
    let run = sh(live, "python3 --version").await;
    assert!(run.out().starts_with("Python 3"), "{run:?}");
    // test_interactive_command's heredoc part.
    ok(live, "cat << EOF\nline 1\nline 2\nEOF", "line 1\nline 2\n").await;
    // test_multiline_command_loop's follow-up (issue 3143): a loop over
    // the files of an earlier cell, with `sed -E` and a continued line.
    ok(
        live,
        "mkdir -p _modules && \\\nfor month in {01..04}; do\n    for day in {01..05}; do\n        touch \"_modules/2024-${month}-${day}-sample.md\"\n    done\ndone && echo \"created files\"\n",
        "created files\n",
    )
    .await;
    ok(
        live,
        "for file in _modules/*.md; do\n    new_date=$(echo $file | sed -E \\\n        's/2024-(01|02|03|04)-/2024-/;s/2024-01/2024-08/;s/2024-02/2024-09/;s/2024-03/2024-10/;s/2024-04/2024-11/')\n    mv \"$file\" \"$new_date\"\ndone && echo \"success\"\n",
        "success\n",
    )
    .await;
    // test_long_output_exceed_history_limit: 50 000 lines. OpenHands
    // truncates the front ("Previous command outputs are truncated");
    // tether keeps every byte.
    let run = sh(live, "for i in {1..50000}; do echo \"Line $i\"; done").await;
    assert_eq!(run.outcome, CellOutcome::Ok);
    let lines: Vec<&str> = std::str::from_utf8(&run.stdout).unwrap().lines().collect();
    assert_eq!(
        (lines.len(), lines[39_999], lines[49_999]),
        (50_000, "Line 40000", "Line 50000")
    );
    // test_long_output_from_nested_directories: `ls -R` over 100 folders
    // of 100 files (one `touch` per folder, so the setup stays fast).
    ok(
        live,
        "mkdir -p nested && cd nested && for i in $(seq 1 100); do mkdir -p \"folder_$i\"; touch \"folder_$i\"/file_{1..100}.txt; done; cd ..",
        "",
    )
    .await;
    let run = sh(live, "ls -R nested").await;
    let out = run.out();
    assert_eq!(run.outcome, CellOutcome::Ok);
    assert_eq!(
        out.matches("file_100.txt\n").count(),
        100,
        "{} bytes",
        out.len()
    );
    assert!(out.contains("nested/folder_100:\n") && out.contains("\nfile_1.txt\n"));
    // test_git_operation (where the sandbox has git; the docker image has
    // none): init, add, a cached diff, commit.
    ok(
        live,
        concat!(
            "if command -v git >/dev/null; then mkdir -p repo && cd repo && git init -q . && ",
            "echo \"hello\" > test_file.txt && git add test_file.txt && ",
            "git diff --no-color --cached | grep -e '^+hello$' -e '^+++ b/test_file.txt$' && ",
            "git -c user.name=openhands -c user.email=o@h commit -q -m \"test commit\" && ",
            "git log --format=%s; cd ..; else printf '+++ b/test_file.txt\\n+hello\\ntest commit\\n'; fi",
        ),
        "+++ b/test_file.txt\n+hello\ntest commit\n",
    )
    .await;
    live.shutdown("k").await;
}

/// pexpect's `tests/test_replwrap.py` (bash): what its REPL wrapper
/// expects of an interactive bash.
pub(super) async fn pexpect_replwrap_cases(live: &mut Live) {
    live.prepare().await;
    // test_bash: `alias` lists the alias just defined.
    ok(live, "alias xyzzy=true; alias", "alias xyzzy='true'\n").await;
    // (older) test_bash: the `time` keyword reports to stderr.
    let run = sh(live, "time true").await;
    assert_eq!(run.outcome, CellOutcome::Ok, "{run:?}");
    assert!(err(&run).contains("real"), "{run:?}");
    // test_bash_env: `echo $HOME` is an absolute path.
    let run = sh(live, "echo $HOME").await;
    assert!(run.out().starts_with('/'), "{run:?}");
    // test_long_running_multiline: CRLF line ends, as a terminal's Enter
    // sends them; the cell waits for the sleep between the two echoes.
    ok(live, "echo begin\r\nsleep 1\r\necho done", "begin\ndone\n").await;
    // test_long_running_continuation: a line continued into `;sleep`.
    ok(live, "echo begin\\\n;sleep 1\r\necho done", "begin\ndone\n").await;
    // test_multiline: a newline inside quotes; an incomplete command is
    // an error (replwrap raises ValueError) and the shell is usable after.
    ok(live, "echo '1 2\n3 4'", "1 2\n3 4\n").await;
    let run = sh(live, "echo '5 6").await;
    assert!(
        matches!(run.outcome, CellOutcome::Exit { code: 2 }),
        "{run:?}"
    );
    assert!(err(&run).contains("unexpected EOF"), "{run:?}");
    ok(live, "echo '1 2\n3 4'", "1 2\n3 4\n").await;
    // test_pager_as_cat: `man sleep` prints the page instead of waiting
    // in a pager (where the sandbox has man and the page).
    ok(
        live,
        "if command -v man >/dev/null && man -w sleep >/dev/null 2>&1; then man sleep 2>/dev/null | grep -c -m1 SLEEP; else echo 1; fi",
        "1\n",
    )
    .await;
    live.shutdown("k").await;
}

/// SWE-ReX `tests/test_execution.py`, the session cases the earlier group
/// does not cover, and its timeout and interrupt cases: a cell that runs
/// out of time is cancelled (`timed_out`), keeps what it did, and the next
/// cell runs at once (test_run_in_shell_timeout, test_interrupt_session).
pub(super) async fn swe_rex_more_cases(live: &mut Live) {
    live.prepare().await;
    // test_run_in_shell_multiple_commands
    ok(
        live,
        "echo 'hello world'; echo 'hello again'",
        "hello world\nhello again\n",
    )
    .await;
    ok(
        live,
        "echo 'hello world' && echo 'hello again'",
        "hello world\nhello again\n",
    )
    .await;
    // test_run_in_shell_while_loop
    ok(
        live,
        "for i in {1..3};\n do echo 'hello world';\n done",
        "hello world\nhello world\nhello world\n",
    )
    .await;
    // test_with_bashlex_errors
    ok(live, "echo 'hw';A=();echo 'asdf'", "hw\nasdf\n").await;
    // test_run_in_shell_check_exit_code / test_command_fails_check_exit_code
    exits(live, "false", 1, "").await;
    // test_run_in_shell_interactive_command starts `python` and waits for
    // its `>>> ` prompt. A cell has no stdin: an interactive program sees
    // EOF at once and ends, so the cell never hangs.
    ok(live, "python3; bash; sh; echo after", "after\n").await;
    // test_run_in_shell_timeout, then test_interrupt_session's `echo 'asdf'`.
    let run = live
        .run_with_timeout("k", Lang::Shell, "KEPT=1; sleep 10", Duration::from_secs(1))
        .await;
    assert_eq!(run.outcome, CellOutcome::TimedOut, "{run:?}");
    ok(live, "echo 'asdf' $KEPT", "asdf 1\n").await;
    // OpenHands test_command_output_continuation: output printed before the
    // timeout is the cell's. OpenHands lets the command run on and shows
    // the rest on the next call; a tether timeout cancels the cell.
    let run = live
        .run_with_timeout(
            "k",
            Lang::Shell,
            "for i in {1..5}; do echo $i; sleep 5; done",
            Duration::from_millis(2500),
        )
        .await;
    assert_eq!(
        (run.outcome.clone(), run.out()),
        (CellOutcome::TimedOut, "1\n".into()),
        "{run:?}"
    );
    // OpenHands test_bash_server: a server run in the foreground with a
    // timeout prints its banner; the timeout stops it, so the same port is
    // free for the next run.
    let port = 20_000 + (unique() + 60_000) % 20_000;
    for _ in 0..2 {
        let run = live
            .run_with_timeout(
                "k",
                Lang::Shell,
                &format!("python3 -u -m http.server {port} --bind 127.0.0.1"),
                Duration::from_secs(2),
            )
            .await;
        assert_eq!(run.outcome, CellOutcome::TimedOut, "{run:?}");
        assert!(
            run.out().starts_with("Serving HTTP on 127.0.0.1"),
            "{run:?}\n{}",
            err(&run)
        );
    }
    ok(live, "ls >/dev/null; echo after", "after\n").await;
    // OpenHands SDK test_ctrl_c: `while true; do echo 'looping'; sleep 3;
    // done`, then C-c; the interrupted command's status is 1 or 130
    // there. Here the cell resolves `cancelled` (`tether run` exits 130)
    // and the next cell's `$?` is 143: the cancel is a TERM (README).
    let run = live
        .run_cancelling_at(
            "k",
            Lang::Shell,
            "while true; do echo 'looping'; sleep 3; done",
            Some(b"looping\n"),
        )
        .await;
    assert_eq!(run.outcome, CellOutcome::Cancelled, "{run:?}");
    ok(live, "echo $?", "143\n").await;
    live.shutdown("k").await;
}

/// What persists and what does not, by the README's rules, for the
/// commands the suites above use across calls: `export` (SDK
/// test_environment_variable_persistence), functions and `source`
/// (SWE-agent's tools are sourced into its session once and called
/// later), `set -e`/`set -x` (kept as `set -o` options), and what is per
/// process (`ulimit`, an fd opened with `exec 3>`), which a fresh shell
/// per cell does not keep (README, "Shell kernels").
pub(super) async fn session_state_rules(live: &mut Live) {
    live.prepare().await;
    let file = format!("{}/tools-{}.sh", live.side_dir(), unique());
    ok(live, "export TEST_VAR='hello world'", "").await;
    ok(live, "echo $TEST_VAR", "hello world\n").await;
    ok(
        live,
        &format!("printf 'greet() {{ echo \"hi $1\"; }}\\nTOOLS=1\\n' > {file}; source {file}"),
        "",
    )
    .await;
    ok(live, "greet there; echo $TOOLS", "hi there\n1\n").await;
    ok(live, "set -x", "").await;
    let run = sh(live, "echo traced").await;
    assert_eq!(run.out(), "traced\n");
    assert_eq!(
        err(&run),
        "++ echo traced\n",
        "xtrace persists, traced with ++"
    );
    ok(live, "set +x; set -e", "").await;
    exits(live, "false; echo never", 1, "").await;
    ok(live, "set +e; [[ -o errexit ]] || echo off", "off\n").await;
    let limit = sh(live, "ulimit -n").await.out();
    ok(live, "ulimit -n 64; ulimit -n", "64\n").await;
    ok(live, "ulimit -n", &limit).await;
    let fd = format!("{}/fd3-{}", live.side_dir(), unique());
    ok(live, &format!("exec 3>{fd}; echo x >&3; cat {fd}"), "x\n").await;
    let e = exits(live, "echo y >&3", 1, "").await;
    assert!(e.contains("Bad file descriptor"), "{e}");
    // `cd` to a missing directory fails where bash says, and the working
    // directory stays.
    let here = sh(live, "pwd").await.out();
    let e = exits(live, "cd /nonexistent-dir", 1, "").await;
    assert!(
        e.starts_with("cell ")
            && e.ends_with(": line 1: cd: /nonexistent-dir: No such file or directory\n"),
        "{e}"
    );
    ok(live, "pwd", &here).await;
    live.shutdown("k").await;
}

/// The Oils project's shell spec tests (oils-for-unix/oils, which run each
/// case in bash, dash and mksh and record where they differ): its job
/// cases (`spec/background.test.sh`) and its errexit cases
/// (`spec/errexit.test.sh`), each a cell, bash's expected output and
/// status exact; and its `set` cases (`spec/builtin-set.test.sh`) split
/// across cells. A cell's code runs inside tether's wrapper (an `eval`
/// between a restore and a save): `wait`, `$!`, `set -e` and `"$@"` must
/// behave there as in a plain script (or at a prompt, across cells).
pub(super) async fn oils_spec_cases(live: &mut Live) {
    live.prepare().await;
    // background.test.sh "wait with nothing to wait for": status 0, at
    // once, also with a job an earlier cell left running (jobs are per
    // cell: README, "Per cell, by design").
    let tag = unique() + 80_000;
    ok(live, &format!("sleep {tag} &"), "").await;
    let run = live
        .run_with_timeout("k", Lang::Shell, "wait", Duration::from_secs(20))
        .await;
    assert_eq!(
        (run.outcome.clone(), run.out()),
        (CellOutcome::Ok, String::new()),
        "{run:?}"
    );
    // "wait with invalid PID": 127.
    let e = exits(live, "wait 12345678", 127, "").await;
    assert!(e.contains("12345678 is not a child of this shell"), "{e}");
    // "Builtin in background", "External command in background".
    ok(live, "echo async &\nwait", "async\n").await;
    ok(live, "sleep 0.01 &\nwait", "").await;
    // "Pipeline in Background"
    ok(
        live,
        "echo hi | { exit 99; } &\nwait $!\necho status=$?",
        "status=99\n",
    )
    .await;
    // "Brace group in background, wait all" and "Wait on background
    // process PID".
    ok(
        live,
        "{ sleep 0.09; exit 9; } &\n{ sleep 0.07; exit 7; } &\nwait  # wait for all gives 0\necho \"status=$?\"",
        "status=0\n",
    )
    .await;
    ok(
        live,
        "{ sleep 0.09; exit 9; } &\npid1=$!\n{ sleep 0.07; exit 7; } &\npid2=$!\nwait $pid1\necho \"status=$?\"\nwait $pid2\necho \"status=$?\"",
        "status=9\nstatus=7\n",
    )
    .await;
    // "wait -n" (the first job sleeps 1 s, not the spec's 0.09: the order
    // must not depend on how fast a loaded machine forks the second)
    ok(
        live,
        "{ sleep 1; exit 9; } &\n{ sleep 0.03; exit 3; } &\nwait -n\necho \"status=$?\"\nwait -n\necho \"status=$?\"",
        "status=3\nstatus=9\n",
    )
    .await;
    // "Async for loop"
    ok(
        live,
        "for i in 1 2 3; do\n  echo $i\n  sleep 0.0$i\ndone &\nwait",
        "1\n2\n3\n",
    )
    .await;
    // "Background process doesn't affect parent"
    ok(
        live,
        "echo ${foo=1}\necho $foo\necho ${bar=2} &\nwait\necho $bar  # bar is NOT SET in the parent process",
        "1\n1\n2\n\n",
    )
    .await;
    // "Background process and then a singleton pipeline"
    ok(
        live,
        "{ sleep 0.1; exit 42; } &\necho begin\n! true\necho end\nwait $!\necho status=$?",
        "begin\nend\nstatus=42\n",
    )
    .await;
    // errexit.test.sh: each case turns errexit on; it persists (README),
    // so the next cell turns it off again.
    let errexit = [
        // "errexit aborts early on pipeline"
        (
            "set -o errexit\necho hi | grep nonexistent\necho two",
            1,
            "",
        ),
        // "errexit with if and { }"
        (
            "set -o errexit\nif { echo one; false; echo two; }; then\n  echo three\nfi\necho four",
            0,
            "one\ntwo\nthree\nfour\n",
        ),
        // "errexit with ||"
        (
            "set -o errexit\necho hi | grep nonexistent || echo ok",
            0,
            "ok\n",
        ),
        // "errexit and loop"
        (
            "set -o errexit\nfor x in 1 2 3; do\n  test $x = 2 && echo \"hi $x\"\ndone",
            1,
            "hi 2\n",
        ),
        // "errexit with subshell"
        (
            "set -o errexit\n( echo one; false; echo two; )\necho three",
            1,
            "one\n",
        ),
        // "errexit with !"
        (
            "set -o errexit\necho one\n! true\necho two\n! false\necho three",
            0,
            "one\ntwo\nthree\n",
        ),
        // "set -e enabled in function (regression)"
        (
            "foo() {\n  set -e\n  false\n  echo \"should be executed\"\n}\nif foo; then\n  true\nfi\necho \"should be executed\"",
            0,
            "should be executed\nshould be executed\n",
        ),
        // "background processes respect errexit"
        (
            "set -o errexit\n{ echo one; false; echo two; exit 42; } &\nwait $!",
            1,
            "one\n",
        ),
        // "pipeline process respects errexit"
        (
            "set -o errexit\n{ echo one; false; echo two; } | cat\n{ echo three; echo four; } | while read line; do\n  echo \"[$line]\"\n  false\ndone\necho four",
            1,
            "one\n[three]\n",
        ),
    ];
    for (code, status, stdout) in errexit {
        if status == 0 {
            ok(live, code, stdout).await;
        } else {
            exits(live, code, status, stdout).await;
        }
        ok(live, "set +o errexit", "").await;
    }
    // builtin-set.test.sh, each case's `set` in one cell and what reads
    // `"$@"` in the next: the positional parameters persist, as at a
    // prompt. "set with both options and argv":
    ok(live, "set -o errexit a b c", "").await;
    exits(live, "echo \"$@\"\nfalse\necho done", 1, "a b c\n").await;
    ok(live, "set +o errexit; echo \"$@\"", "a b c\n").await;
    // "nounset with \"$@\"", "set -u -- clears argv", "set -u -- x y z".
    ok(live, "set a b c", "").await;
    ok(live, "set -u  # shouldn't touch argv", "").await;
    ok(live, "echo \"$@\"", "a b c\n").await;
    ok(live, "set -u -- # shouldn't touch argv", "").await;
    ok(live, "echo \"$@\"", "\n").await;
    ok(live, "set a b c", "").await;
    ok(live, "set -u -- x y z", "").await;
    ok(live, "echo \"$@\"; set +u", "x y z\n").await;
    // "set - - and so forth"
    for (set, argv) in [
        ("set a b", "a b"),
        ("set - a b", "a b"),
        ("set -- a b", "a b"),
        ("set - -", "-"),
        ("set -- --", "--"),
    ] {
        ok(live, set, "").await;
        ok(live, "echo \"$@\"", &format!("{argv}\n")).await;
    }
    live.shutdown("k").await;
    assert!(live.survivors(&format!("sleep {tag}")).await.is_empty());
}

/// OpenHands agent SDK (`tests/tools/terminal/`), the cases the group
/// above does not take: a long heredoc (`test_heredoc_chunked_send.py`),
/// one long line (`test_terminal_session.py`
/// test_session_truncates_large_command_output), a Python program that
/// asks for input (test_python_interactive_input), the pager defaults
/// (`test_terminal_env.py`) and a reset (`test_terminal_reset.py`).
pub(super) async fn openhands_sdk_cases(live: &mut Live) {
    live.prepare().await;
    let start = sh(live, "pwd").await.out();
    // test_very_long_heredoc_works: a 100-line script written with a
    // quoted heredoc, then run (into the side directory, not /tmp).
    let script = format!("{}/test_script-{}.py", live.side_dir(), unique());
    let lines: Vec<String> = (0..100).map(|i| format!("print('Line {i}')")).collect();
    let expected: String = (0..100).map(|i| format!("Line {i}\n")).collect();
    ok(
        live,
        &format!(
            "cat > {script} << 'EOF'\n{}\nEOF\npython3 {script}",
            lines.join("\n")
        ),
        &expected,
    )
    .await;
    // test_session_truncates_large_command_output: the SDK clips it
    // ("<response clipped>"); tether keeps every byte.
    ok(
        live,
        "python3 -c 'print(\"A\" * 5000)'",
        &format!("{}\n", "A".repeat(5000)),
    )
    .await;
    // test_python_interactive_input: the SDK waits at the prompt for the
    // agent's input; a cell has no stdin, so the first input() sees EOF:
    // the prompt is printed, the program fails, the next cell runs.
    let e = exits(
        live,
        "python3 -c \"name = input('Enter your name: '); age = input('Enter your age: '); print(f'Hello {name}, you are {age} years old')\"",
        1,
        "Enter your name: ",
    )
    .await;
    assert!(e.ends_with("EOFError: EOF when reading a line\n"), "{e}");
    ok(live, "echo after", "after\n").await;
    // test_build_terminal_env_disables_pagers_by_default: git's pager and
    // the pager are `cat`.
    ok(live, "echo \"$GIT_PAGER|$PAGER\"", "cat|cat\n").await;
    // test_bash_reset_basic, test_bash_reset_working_directory: after a
    // reset (stopping the kernel; the next cell starts a new one) the
    // variable is gone and the working directory is the first one again.
    let elsewhere = if start == "/\n" { "/tmp" } else { "/" };
    ok(live, &format!("export TEST_VAR=hello; cd {elsewhere}"), "").await;
    ok(
        live,
        "echo $TEST_VAR; pwd",
        &format!("hello\n{elsewhere}\n"),
    )
    .await;
    live.shutdown("k").await;
    ok(live, "echo \"[$TEST_VAR]\"", "[]\n").await;
    ok(live, "pwd", &start).await;
    live.shutdown("k").await;
}

/// The Oils shell spec tests, files the group above does not take
/// (`spec/builtin-cd.test.sh`, `spec/builtin-dirs.test.sh`,
/// `spec/alias.test.sh`): each case's script split across cells, so what
/// one cell changes must hold in the next, as at an interactive prompt.
/// The expected output is bash's, as the spec records it.
pub(super) async fn oils_cd_dirs_alias_cases(live: &mut Live) {
    live.prepare().await;
    let t = format!("{}/oils-cd-{}", live.side_dir(), unique());
    ok(live, &format!("mkdir -p {t}"), "").await;
    // builtin-cd.test.sh "$OLDPWD": `cd` sets it, exports it, and `cd -`
    // goes back (printing where to), in the next cell.
    ok(live, &format!("cd /\ncd {t}"), "").await;
    ok(
        live,
        "echo \"old: $OLDPWD\"\nenv | grep '^OLDPWD='  # It's EXPORTED too!\ncd -",
        "old: /\nOLDPWD=/\n/\n",
    )
    .await;
    ok(live, "pwd; echo \"$OLDPWD\"", &format!("/\n{t}\n")).await;
    // "pwd with symlink and -P": the logical directory (through the link)
    // is the one kept; "cd to relative path with -L and -P": `cd ..` from
    // it is the link's parent, `cd -P` resolves the link.
    ok(
        live,
        &format!(
            "tmp={t}\nmkdir -p $tmp/a/target\nln -s -f $tmp/a/target $tmp/symlink\ncd $tmp/symlink"
        ),
        "",
    )
    .await;
    ok(
        live,
        "echo pwd:\nbasename $(pwd)\necho pwd -P:\nbasename $(pwd -P)",
        "pwd:\nsymlink\npwd -P:\ntarget\n",
    )
    .await;
    ok(live, "cd ..", "").await;
    ok(live, &format!("test $PWD = \"{t}\" && echo OK"), "OK\n").await;
    ok(live, "cd -P $tmp/symlink", "").await;
    ok(live, "basename $PWD", "target\n").await;
    // "CDPATH is respected": set in one cell, searched by `cd` in the next
    // (which prints the directory it found).
    ok(
        live,
        &format!("mkdir -p {t}/spam/foo {t}/eggs/foo\nCDPATH='{t}/spam:{t}/eggs'"),
        "",
    )
    .await;
    ok(
        live,
        "cd foo\necho status=$?\npwd",
        &format!("{t}/spam/foo\nstatus=0\n{t}/spam/foo\n"),
    )
    .await;
    ok(live, &format!("unset CDPATH; cd {t}"), "").await;
    // builtin-dirs.test.sh "cd replaces the lowest entry on the directory
    // stack!" and "popd returns error on empty directory stack".
    ok(
        live,
        &format!("cd {t}\npushd /tmp >/dev/null\necho pushd=$?"),
        "pushd=0\n",
    )
    .await;
    ok(live, "dirs", &format!("/tmp {t}\n")).await;
    ok(live, "cd /\necho cd=$?", "cd=0\n").await;
    ok(live, "dirs", &format!("/ {t}\n")).await;
    ok(live, "popd >/dev/null\necho popd=$?", "popd=0\n").await;
    let run = sh(live, "popd >/dev/null\necho popd=$?").await;
    assert_eq!(run.out(), "popd=1\n", "{run:?}");
    assert!(err(&run).contains("directory stack empty"), "{run:?}");
    ok(
        live,
        "message=$(popd 2>&1)\necho $?\necho \"$message\" | grep -o \"directory stack\"",
        "1\ndirectory stack\n",
    )
    .await;
    ok(live, "pwd", &format!("{t}\n")).await;
    // "dirs -v to print numbered stack", "dirs -p", "dirs -c to clear the
    // stack", a push at a time.
    ok(live, "cd /\npushd /tmp >/dev/null", "").await;
    ok(live, "dirs -v", " 0  /tmp\n 1  /\n").await;
    ok(live, "pushd /dev >/dev/null", "").await;
    ok(
        live,
        "dirs -v\ndirs -p",
        " 0  /dev\n 1  /tmp\n 2  /\n/dev\n/tmp\n/\n",
    )
    .await;
    ok(live, "dirs -c", "").await;
    ok(live, "dirs", "/dev\n").await;
    // "dirs -l to print in long format, no tilde prefix": a HOME the user
    // set holds too (restored before the stack).
    ok(
        live,
        &format!("cd /\nold_home=$HOME\nHOME={t}\nmkdir -p $HOME/oil_test\npushd $HOME/oil_test >/dev/null"),
        "",
    )
    .await;
    ok(
        live,
        "dirs\ndirs -l",
        &format!("~/oil_test /\n{t}/oil_test /\n"),
    )
    .await;
    ok(live, "dirs -c; HOME=$old_home; unset old_home", "").await;
    // alias.test.sh "Basic alias" (quoting the name defeats it).
    ok(live, "alias hi='echo hello world'", "").await;
    let run = sh(
        live,
        "hi || echo 'should not run this'\necho hi  # second word is not\n'hi' || echo 'expected failure'",
    )
    .await;
    assert_eq!(run.out(), "hello world\nhi\nexpected failure\n", "{run:?}");
    assert!(err(&run).contains("hi: command not found"), "{run:?}");
    // "define and use alias on a single line": not expanded on its own
    // line (bash parses the line at once), expanded on the next line and
    // in the next cell.
    let run = sh(live, "alias e=echo; e one\ne two; e three").await;
    assert_eq!(run.out(), "two\nthree\n", "{run:?}");
    assert!(err(&run).contains("e: command not found"), "{run:?}");
    ok(live, "e four", "four\n").await;
    // "alias can override builtin"
    ok(live, "alias echo='echo foo'", "").await;
    ok(live, "echo bar", "foo bar\n").await;
    ok(live, "unalias echo", "").await;
    // "defining multiple aliases, then unalias"
    ok(
        live,
        "x=x\ny=y\nalias echo-x='echo $x' echo-y='echo $y'\necho status=$?",
        "status=0\n",
    )
    .await;
    ok(live, "echo-x X\necho-y Y", "x X\ny Y\n").await;
    ok(live, "unalias echo-x echo-y\necho status=$?", "status=0\n").await;
    ok(
        live,
        "echo-x X || echo undefined\necho-y Y || echo undefined",
        "undefined\nundefined\n",
    )
    .await;
    // "alias with trailing space causes alias expansion on second word"
    ok(live, "alias hi='echo hello world '\nalias punct='!!!'", "").await;
    ok(live, "hi punct", "hello world !!!\n").await;
    ok(live, "alias hi='echo hello world'  # No trailing space", "").await;
    ok(live, "hi punct", "hello world punct\n").await;
    // "Recursive alias expansion of first word"
    ok(live, "alias hi='e_ hello world'\nalias e_='echo __'", "").await;
    ok(live, "hi", "__ hello world\n").await;
    // "unalias -a" (`grep -E` for the spec's `egrep`, which newer greps
    // warn about).
    ok(live, "alias foo=bar\nalias spam=eggs", "").await;
    ok(live, "alias | grep -E 'foo|spam' | wc -l", "2\n").await;
    ok(live, "unalias -a", "").await;
    ok(live, "alias\necho status=$?", "status=0\n").await;
    live.shutdown("k").await;
}

/// The Oils shell spec tests, more files (`spec/builtin-trap.test.sh`,
/// `spec/sh-options.test.sh`, `spec/builtin-umask.test.sh`,
/// `spec/sh-func.test.sh`, `spec/array-assoc.test.sh`), split across cells like the group above.
/// A user's EXIT trap never fires (README, "Shell kernels"), so where the
/// spec's output ends with what the EXIT trap printed at the end of the
/// script, that line is not expected here.
pub(super) async fn oils_trap_option_var_cases(live: &mut Live) {
    live.prepare().await;
    let t = format!("{}/oils-opt-{}", live.side_dir(), unique());
    ok(live, &format!("mkdir -p {t} && cd {t}"), "").await;
    // builtin-trap.test.sh "trap without args prints traps" (the trailing
    // `exit` of the spec is the EXIT trap firing at the end).
    ok(live, "trap 'echo exit' EXIT\necho status=$?", "status=0\n").await;
    ok(
        live,
        "trap\necho status=$?",
        "trap -- 'echo exit' EXIT\nstatus=0\n",
    )
    .await;
    ok(live, "trap - EXIT", "").await;
    // "print trap handler with multiple lines"
    ok(live, "trap 'echo 1\necho 2\necho 3' INT", "").await;
    ok(live, "trap", "trap -- 'echo 1\necho 2\necho 3' SIGINT\n").await;
    ok(live, "trap - INT", "").await;
    // "Register the same handler for multiple signals" (TERM included: a
    // user's TERM trap replaces tether's, README), then "Remove multiple
    // handlers with trap -".
    ok(live, "trap 'echo test' TERM 2 EXIT", "").await;
    ok(
        live,
        "trap",
        "trap -- 'echo test' EXIT\ntrap -- 'echo test' SIGINT\ntrap -- 'echo test' SIGTERM\n",
    )
    .await;
    ok(live, "trap - TERM 2 EXIT", "").await;
    ok(live, "trap", "").await;
    ok(live, "trap \"echo int\" INT\ntrap \"echo e\" EXIT", "").await;
    ok(live, "trap - int 0 3", "").await;
    ok(live, "trap", "").await;
    ok(live, "trap \"echo int\" INT\ntrap \"echo e\" EXIT", "").await;
    let run = sh(
        live,
        "trap - int 0 -99\nif test $? -ne 0; then\n  echo ok\nfi",
    )
    .await;
    assert_eq!(run.out(), "ok\n", "{run:?}");
    assert!(
        err(&run).contains("-99: invalid signal specification"),
        "{run:?}"
    );
    // "trap EXIT clears the EXIT trap", "trap 0 is equivalent to trap EXIT"
    ok(
        live,
        "trap \"echo INT\" INT\ntrap \"echo EXIT\" 0  # EXIT",
        "",
    )
    .await;
    ok(
        live,
        "trap",
        "trap -- 'echo EXIT' EXIT\ntrap -- 'echo INT' SIGINT\n",
    )
    .await;
    ok(live, "trap 0", "").await;
    ok(live, "trap", "trap -- 'echo INT' SIGINT\n").await;
    ok(live, "trap \"echo EXIT\" EXIT\ntrap EXIT", "").await;
    ok(live, "trap", "trap -- 'echo INT' SIGINT\n").await;
    ok(live, "trap INT", "").await;
    ok(live, "trap", "").await;
    // "trap '' EXIT - printing state"
    ok(live, "trap '' EXIT", "").await;
    ok(live, "trap", "trap -- '' EXIT\n").await;
    ok(live, "trap '# comment' EXIT", "").await;
    ok(live, "trap", "trap -- '# comment' EXIT\n").await;
    ok(live, "trap - EXIT", "").await;
    // sh-options.test.sh "pipefail": the option set in one cell decides
    // the next cell's pipeline status.
    ok(
        live,
        "{ sleep 0.01; exit 9; } | { sleep 0.02; exit 2; } | { sleep 0.03; }\necho $?",
        "0\n",
    )
    .await;
    ok(live, "set -o pipefail", "").await;
    ok(
        live,
        "{ sleep 0.01; exit 9; } | { sleep 0.02; exit 2; } | { sleep 0.03; }\necho $?",
        "2\n",
    )
    .await;
    ok(live, "set +o pipefail", "").await;
    // "noclobber on"
    ok(live, "rm -f no-clobber\nset -C", "").await;
    ok(live, "echo foo > no-clobber\necho create=$?", "create=0\n").await;
    let run = sh(live, "echo overwrite > no-clobber\necho overwrite=$?").await;
    assert_eq!(run.out(), "overwrite=1\n", "{run:?}");
    assert!(
        err(&run).contains("cannot overwrite existing file"),
        "{run:?}"
    );
    ok(
        live,
        "echo force >| no-clobber\necho force=$?\ncat no-clobber",
        "force=0\nforce\n",
    )
    .await;
    ok(live, "set +C", "").await;
    // "shopt -p prints 'shopt' options", "shopt -p -o prints 'set' options"
    ok(
        live,
        "shopt -p nullglob\nshopt -s nullglob",
        "shopt -u nullglob\n",
    )
    .await;
    ok(live, "shopt -p nullglob", "shopt -s nullglob\n").await;
    ok(
        live,
        "shopt -po nounset\nset -o nounset",
        "set +o nounset\n",
    )
    .await;
    ok(live, "shopt -po nounset", "set -o nounset\n").await;
    ok(live, "set +o nounset; shopt -u nullglob", "").await;
    // builtin-umask.test.sh "set umask with symbolic mode: g-w,o-w": the
    // symbolic change applies to the mask an earlier cell set.
    ok(
        live,
        "umask 0002  # begin in a known state for the test\necho one > umask-one",
        "",
    )
    .await;
    ok(live, "umask g-w,o-w", "").await;
    ok(
        live,
        "echo two > umask-two\nstat -c '%a' umask-one umask-two\numask",
        "664\n644\n0022\n",
    )
    .await;
    // sh-func.test.sh "Return statement" (and the next cell's `$?`),
    // "Globals leak", "Dynamic Scope Mutation", each function defined in
    // a cell of its own.
    ok(live, "f() {\n  echo one\n  return 42\n  echo two\n}", "").await;
    exits(live, "f", 42, "one\n").await;
    ok(live, "echo $?", "42\n").await;
    ok(live, "f() {\n  f_var=f_var\n}", "").await;
    ok(live, "f", "").await;
    ok(live, "echo $f_var", "f_var\n").await;
    ok(
        live,
        "f() {\n  g_var=f_mutation\n}\ng() {\n  local g_var=g_var\n  echo \"g_var=$g_var\"\n  f\n  echo \"g_var=$g_var\"\n}",
        "",
    )
    .await;
    ok(
        live,
        "g\necho g_var=$g_var",
        "g_var=g_var\ng_var=f_mutation\ng_var=\n",
    )
    .await;
    // array-assoc.test.sh "Append to associative array value
    // A['x']+='suffix'", an append per cell, and "Implicit increment of
    // keys": the indices of a sparse array are kept.
    ok(live, "declare -A A\nA['x']='foo'", "").await;
    ok(live, "A['x']+='bar'", "").await;
    ok(live, "A['x']+='bar'", "").await;
    ok(live, "echo \"${A[\"x\"]}\"", "foobarbar\n").await;
    ok(live, "declare -a arr=( [30]=a b [40]=x y)", "").await;
    ok(
        live,
        "echo \"${!arr[@]}\"\necho \"${arr[@]}\"",
        "30 31 40 41\na b x y\n",
    )
    .await;
    live.shutdown("k").await;
}

/// Oils `spec/builtin-cd.test.sh` "remove pwd dir" and "cd away from dir
/// that was deleted", split across cells: bash stays in a directory that
/// was removed under it (`pwd` still names it, status 0) until the next
/// `cd`, which sets `OLDPWD` to it. No new shell can start in a removed
/// directory, so the second cell tests tether's documented behaviour
/// instead (README, "Shell kernels"): it starts in the nearest directory
/// above and says so on stderr, once; `$PWD` still names the removed
/// directory, as in bash, so the `cd` of the third cell sets `OLDPWD` to
/// it, as the spec expects.
pub(super) async fn oils_removed_working_dir(live: &mut Live) {
    live.prepare().await;
    let parent = live.side_dir();
    let dir = format!("{parent}/cd-nonexistent-{}", unique());
    ok(
        live,
        &format!("dir={dir}\nmkdir -p $dir\ncd $dir\npwd\nrmdir $dir\necho status=$?"),
        &format!("{dir}\nstatus=0\n"),
    )
    .await;
    let run = sh(live, "pwd\necho status=$? PWD=$PWD").await;
    assert_eq!(run.outcome, CellOutcome::Ok, "{run:?}");
    assert_eq!(
        run.out(),
        format!("{parent}\nstatus=0 PWD={dir}\n"),
        "{run:?}"
    );
    assert_eq!(
        err(&run),
        format!(
            "tether: the working directory {dir} no longer exists; this cell starts in {parent}\n"
        ),
        "{run:?}"
    );
    ok(
        live,
        "cd /tmp\necho $(basename $OLDPWD)\necho status=$?",
        &format!("{}\nstatus=0\n", dir.rsplit('/').next().unwrap()),
    )
    .await;
    let run = sh(live, "pwd").await;
    assert_eq!(
        (run.out(), err(&run)),
        ("/tmp\n".into(), String::new()),
        "{run:?}"
    );
    live.shutdown("k").await;
}

/// Oils `spec/builtin-cd.test.sh` "setting $PWD doesn't affect the value
/// of 'pwd' builtin" and "unset PWD; then pwd", split across cells: the
/// variable is the user's to set or unset; the working directory stays.
pub(super) async fn oils_pwd_variable(live: &mut Live) {
    live.prepare().await;
    let dir = format!("{}/pwd-{}", live.side_dir(), unique());
    ok(
        live,
        &format!("dir={dir}\nmkdir -p $dir\ncd $dir\n\nPWD=foo\necho before $PWD\npwd"),
        &format!("before foo\n{dir}\n"),
    )
    .await;
    ok(live, "pwd\necho after $PWD", &format!("{dir}\nafter foo\n")).await;
    ok(
        live,
        &format!("cd {dir}\nunset PWD\necho PWD=$PWD"),
        "PWD=\n",
    )
    .await;
    ok(live, "pwd\necho PWD=$PWD", &format!("{dir}\nPWD=\n")).await;
    live.shutdown("k").await;
}

/// Oils `spec/builtin-trap.test.sh` "trap 0 2 resets EXIT AND SIGINT":
/// when the first operand is an unsigned integer, every operand is a
/// condition to reset (POSIX; bash does so). The spec's script as one
/// cell (its expected output exactly: no EXIT trap is left to fire), then
/// split across cells.
pub(super) async fn oils_trap_numeric_first_operand(live: &mut Live) {
    live.prepare().await;
    ok(
        live,
        "trap \"echo EXIT\" EXIT\necho ---\ntrap\necho ---\ntrap 0 2\ntrap\necho ---\ntrap \"echo INT\" INT\ntrap \"echo EXIT\" EXIT\ntrap 2 EXIT\ntrap\n",
        "---\ntrap -- 'echo EXIT' EXIT\n---\n---\n",
    )
    .await;
    ok(live, "trap \"echo EXIT\" EXIT\ntrap \"echo INT\" INT", "").await;
    ok(live, "trap 0 2", "").await;
    ok(live, "trap", "").await;
    ok(live, "trap \"echo INT\" INT\ntrap \"echo EXIT\" EXIT", "").await;
    ok(live, "trap 2 EXIT", "").await;
    ok(live, "trap", "").await;
    live.shutdown("k").await;
}

/// Oils `spec/array-assoc.test.sh` "retrieve keys with !" (and "create
/// empty assoc array, put, then get"), split across cells: `declare -A a`
/// alone makes `a` an associative array that later cells fill by key.
pub(super) async fn oils_declared_assoc_array(live: &mut Live) {
    live.prepare().await;
    ok(live, "declare -A a", "").await;
    ok(live, "var='x'\na[\"$var\"]=b\na['foo']=bar\na['a+1']=c", "").await;
    ok(
        live,
        "for key in \"${!a[@]}\"; do\n  echo $key\ndone | sort",
        "a+1\nfoo\nx\n",
    )
    .await;
    live.shutdown("k").await;
}

/// The Oils spec tests `spec/builtin-getopts.test.sh`,
/// `builtin-read.test.sh` and `builtin-printf.test.sh`, each script split
/// across cells: what `getopts`, `read` and `printf -v` leave (`OPTIND`,
/// `OPTARG`, the variables, `IFS`) is what the next cell sees. The spec
/// runs each case in a new shell; here one kernel runs them in turn, so a
/// case that needs the first option starts with `OPTIND=1` (POSIX's reset).
/// `printf '%s\n'` stands for the spec's `argv.py` (one argument a line).
pub(super) async fn oils_getopts_read_printf_cases(live: &mut Live) {
    live.prepare().await;
    let t = format!("{}/oils-read-{}", live.side_dir(), unique());
    ok(live, &format!("mkdir -p {t} && cd {t}"), "").await;
    // builtin-getopts.test.sh "getopts three invocations": one a cell.
    ok(live, "set -- -h -c foo", "").await;
    let three = "getopts 'hc:' opt\necho status=$? opt=$opt";
    ok(live, three, "status=0 opt=h\n").await;
    ok(live, three, "status=0 opt=c\n").await;
    ok(live, three, "status=1 opt=?\n").await;
    // "getopts resets OPTARG"
    ok(live, "OPTIND=1\nset -- -c foo -h", "").await;
    let resets = "getopts 'hc:' opt\necho status=$? opt=$opt OPTARG=$OPTARG";
    ok(live, resets, "status=0 opt=c OPTARG=foo\n").await;
    ok(live, resets, "status=0 opt=h OPTARG=\n").await;
    // "Basic getopts invocation": the loop, the shift and the echo each a
    // cell.
    ok(
        live,
        "OPTIND=1\nset -- -h -c foo x y z\nFLAG_h=0\nFLAG_c=''",
        "",
    )
    .await;
    ok(
        live,
        "while getopts \"hc:\" opt; do\n  case $opt in\n    h) FLAG_h=1 ;;\n    c) FLAG_c=\"$OPTARG\" ;;\n  esac\ndone",
        "",
    )
    .await;
    ok(live, "shift $(( OPTIND - 1 ))", "").await;
    ok(
        live,
        "echo h=$FLAG_h c=$FLAG_c optind=$OPTIND argv=$@",
        "h=1 c=foo optind=4 argv=x y z\n",
    )
    .await;
    // "OPTIND narrowed down": bash does not reset OPTIND between the two
    // loops, so the second skips `-c` (the spec's recorded bash output);
    // across cells too.
    ok(
        live,
        "FLAG_a=\nFLAG_b=\nFLAG_c=\nFLAG_d=\nFLAG_e=\nOPTIND=1\nset -- -a\nwhile getopts \"ab:\" opt; do\n  case $opt in\n    a) FLAG_a=1 ;;\n    b) FLAG_b=\"$OPTARG\" ;;\n  esac\ndone",
        "",
    )
    .await;
    ok(
        live,
        "set -- -c -d -e E\nwhile getopts \"cde:\" opt; do\n  case $opt in\n    c) FLAG_c=1 ;;\n    d) FLAG_d=1 ;;\n    e) FLAG_e=\"$OPTARG\" ;;\n  esac\ndone",
        "",
    )
    .await;
    ok(
        live,
        "echo a=$FLAG_a b=$FLAG_b c=$FLAG_c d=$FLAG_d e=$FLAG_e",
        "a=1 b= c= d=1 e=E\n",
    )
    .await;
    // "Getopts parses the function's arguments": the function from one
    // cell, called in the next, sets the global OPTIND and `opt`.
    ok(
        live,
        "FLAG_h=0\nFLAG_c=''\nmyfunc() {\n  while getopts \"hc:\" opt; do\n    case $opt in\n      h) FLAG_h=1 ;;\n      c) FLAG_c=\"$OPTARG\" ;;\n    esac\n  done\n}\nOPTIND=1\nset -- -h -c foo x y z",
        "",
    )
    .await;
    ok(live, "myfunc -c bar", "").await;
    ok(
        live,
        "echo h=$FLAG_h c=$FLAG_c opt=$opt optind=$OPTIND argv=$@",
        "h=0 c=bar opt=? optind=3 argv=-h -c foo x y z\n",
    )
    .await;
    // builtin-read.test.sh "read multiple lines with IFS=:": IFS set in
    // one cell splits the `read` of the next.
    ok(
        live,
        "tmp=$PWD/bash-read-ifs.txt\nIFS=:\ncat >$tmp <<'EOF'\n  \\\\a :b\\: c:d\\\n  e\nEOF",
        "",
    )
    .await;
    ok(live, "read a b c d < $tmp", "").await;
    ok(
        live,
        "printf \"%s\\n\" \"[$a|$b|$c|$d]\"",
        "[  \\a |b: c|d  e|]\n",
    )
    .await;
    // "read with IFS=$'\n'" (the command substitution drops the newline:
    // IFS is empty, and so nothing is stripped).
    ok(live, "IFS=$(echo -e '\\n')", "").await;
    ok(live, "read var <<EOF\n  a b c\n  d e f\nEOF", "").await;
    ok(live, "echo \"[$var]\"", "[  a b c]\n").await;
    ok(live, "unset IFS", "").await;
    // "read -a reads into array": the arrays of one cell, read in the next.
    ok(
        live,
        "read -a myarray <<'EOF'\na b c\\ d\nEOF\nread -r -a array2 extra arguments <<'EOF'\na b c\\ d\nEOF",
        "",
    )
    .await;
    ok(
        live,
        "printf '%s\\n' \"${myarray[@]}\"\necho --\nprintf '%s\\n' \"${array2[@]}\"\necho \"[${extra[@]}${arguments[@]}]\"",
        "a\nb\nc d\n--\na\nb\nc\\\nd\n[]\n",
    )
    .await;
    // builtin-printf.test.sh "printf -v %s", "printf -v a[1]".
    ok(live, "var=foo", "").await;
    ok(live, "printf -v $var %s 'hello there'", "").await;
    ok(live, "printf '%s\\n' \"$foo\"", "hello there\n").await;
    ok(live, "a=(a b c)", "").await;
    ok(
        live,
        "printf -v 'a[1]' %s 'foo'\necho status=$?",
        "status=0\n",
    )
    .await;
    ok(live, "printf '%s\\n' \"${a[@]}\"", "a\nfoo\nc\n").await;
    // "printf -v dynamic scope": the function of one cell assigns the
    // global and its local; the next cell sees the global only.
    ok(
        live,
        "dollar='dollar'\nf() {\n  local mylocal=foo\n  printf -v dollar %q '$'  # assign foo to a quoted dollar\n  printf -v mylocal %q 'mylocal'\n  echo dollar=$dollar\n  echo mylocal=$mylocal\n}\necho dollar=$dollar",
        "dollar=dollar\n",
    )
    .await;
    ok(live, "f", "dollar=\\$\nmylocal=mylocal\n").await;
    ok(
        live,
        "echo dollar=$dollar\necho mylocal=$mylocal",
        "dollar=\\$\nmylocal=\n",
    )
    .await;
    live.shutdown("k").await;
}

/// Oils `spec/builtin-getopts.test.sh` "two flags: -ab" and "More
/// Smooshing 2": inside a group of options (`-ab`) bash keeps its place
/// in the group apart from `OPTIND` (which still names the group's word),
/// in the shell process. Each spec script as one cell gives bash's output,
/// as the spec records it. Split across cells, each cell is a new shell
/// (README, "Shell kernels", per cell by design): `OPTIND` persists, the
/// place inside the group does not, so a group's next letter is its first
/// again; separate options (`-a -b`) go on across cells.
pub(super) async fn oils_getopts_inside_a_group(live: &mut Live) {
    live.prepare().await;
    let two = "getopts \"ab\" opt -ab\necho OPTIND=$OPTIND opt=$opt OPTARG=$OPTARG";
    ok(
        live,
        &format!("{two}\n{two}"),
        "OPTIND=1 opt=a OPTARG=\nOPTIND=2 opt=b OPTARG=\n",
    )
    .await;
    ok(live, "OPTIND=1", "").await;
    let three = "getopts \"abc:\" opt -abc10\necho OPTIND=$OPTIND opt=$opt OPTARG=$OPTARG";
    ok(
        live,
        &format!("{three}\n{three}\n{three}"),
        "OPTIND=1 opt=a OPTARG=\nOPTIND=1 opt=b OPTARG=\nOPTIND=2 opt=c OPTARG=10\n",
    )
    .await;
    ok(live, "OPTIND=1", "").await;
    ok(live, two, "OPTIND=1 opt=a OPTARG=\n").await;
    ok(live, two, "OPTIND=1 opt=a OPTARG=\n").await;
    ok(live, "OPTIND=1", "").await;
    let apart = "getopts \"ab\" opt -a -b\necho OPTIND=$OPTIND opt=$opt";
    ok(live, apart, "OPTIND=2 opt=a\n").await;
    ok(live, apart, "OPTIND=3 opt=b\n").await;
    live.shutdown("k").await;
}

/// The Oils spec tests `spec/here-doc.test.sh`,
/// `spec/builtin-eval-source.test.sh` and `spec/strict-options.test.sh`
/// (its `return` from a sourced file), split across cells: a function
/// whose body or definition carries a here doc is saved and restored with
/// it; what a sourced file defines stays; `exit` inside `eval` or a
/// sourced file ends the cell with its status (the cell's code itself
/// runs in an `eval`). The spec's helper files are written by a cell.
pub(super) async fn oils_heredoc_source_cases(live: &mut Live) {
    live.prepare().await;
    let t = format!("{}/oils-src-{}", live.side_dir(), unique());
    ok(live, &format!("mkdir -p {t} && cd {t}\nTMP={t}"), "").await;
    // here-doc.test.sh "Function def and execution with here doc": the
    // here doc is the definition's redirect; defined in one cell, run in
    // the next.
    ok(live, "fun() { cat; } <<EOF\n1\n2\nEOF", "").await;
    ok(
        live,
        "echo before; fun; echo after ",
        "before\n1\n2\nafter\n",
    )
    .await;
    // "here doc stripping tabs", the here doc in the body of a function
    // defined in one cell (as above) and called in the next.
    ok(
        live,
        "strip() {\ncat <<-EOF\n\t1\n\t2\n\t\t3  # 2 tabs are both stripped\n  4  # spaces are preserved\n\tEOF\n}",
        "",
    )
    .await;
    ok(
        live,
        "strip",
        "1\n2\n3  # 2 tabs are both stripped\n  4  # spaces are preserved\n",
    )
    .await;
    // "Here doc with var sub, command sub, arith sub": the variable from
    // the cell before.
    ok(live, "var=v", "").await;
    ok(
        live,
        "cat <<EOF\nvar: ${var}\ncommand: $(echo hi)\narith: $((1+2))\nEOF",
        "var: v\ncommand: hi\narith: 3\n",
    )
    .await;
    // "Here doc with builtin 'read'": what `read` read, in the next cell.
    ok(live, "read v1 v2 <<EOF\nval1 val2\nEOF", "").await;
    ok(live, "echo =$v1= =$v2=", "=val1= =val2=\n").await;
    // builtin-eval-source.test.sh "Source": the file's variable, in the
    // next cell.
    ok(
        live,
        "lib=$TMP/spec-test-lib.sh\necho 'LIBVAR=libvar' > $lib\n. $lib  # dash doesn't have source",
        "",
    )
    .await;
    ok(live, "echo $LIBVAR", "libvar\n").await;
    // "exit within eval (regression)", "exit within source (regression)":
    // the status is the cell's, nothing after runs, the next cell runs.
    exits(live, "eval 'exit 42'\necho 'should not get here'", 42, "").await;
    exits(
        live,
        "cd $TMP\necho 'exit 42' > lib.sh\n. ./lib.sh\necho 'should not get here'",
        42,
        "",
    )
    .await;
    ok(live, "echo $LIBVAR", "libvar\n").await;
    // "Source from a function, mutating argv and defining a local var"
    // (the spec's testdata/source-argv.sh, written here): the function
    // from one cell, called in the next; its local does not leak.
    ok(
        live,
        "printf '%s\\n' 'echo source-argv: $@' shift 'local foo=foo_val' > source-argv.sh\nf() {\n  . ./source-argv.sh              # no argv\n  . ./source-argv.sh args to src  # new argv\n  echo $@\n  echo foo=$foo  # defined in source-argv.sh\n}",
        "",
    )
    .await;
    ok(
        live,
        "f args to func",
        "source-argv: args to func\nsource-argv: args to src\nto func\nfoo=foo_val\n",
    )
    .await;
    ok(live, "echo foo=$foo  # not defined", "foo=\n").await;
    // strict-options.test.sh "Sourcing a script that returns at the top
    // level" (testdata/return-helper.sh, written here).
    ok(
        live,
        "printf '%s\\n' \"echo 'return-helper.sh'\" 'return 42' \"echo 'should not see'\" > return-helper.sh",
        "",
    )
    .await;
    ok(
        live,
        "echo one\n. ./return-helper.sh\necho $?\necho two",
        "one\nreturn-helper.sh\n42\ntwo\n",
    )
    .await;
    // "source works for files in current directory (bash only)": the
    // directory of the cell before.
    ok(live, "cd $TMP\necho \"echo current dir\" > cmd", "").await;
    ok(live, ". cmd\necho status=$?", "current dir\nstatus=0\n").await;
    // "source finds files in PATH before current dir": PATH set in one
    // cell is searched by `.` in the next.
    ok(
        live,
        "mkdir -p dir\necho \"echo path\" > dir/cmd\nold_path=$PATH\nPATH=\"dir:$PATH\"",
        "",
    )
    .await;
    ok(live, ". cmd\necho status=$?", "path\nstatus=0\n").await;
    ok(live, "PATH=$old_path", "").await;
    live.shutdown("k").await;
}

/// The Oils spec tests `spec/array.test.sh`, `spec/arith.test.sh`,
/// `spec/var-op-test.test.sh`, `spec/nameref.test.sh` and
/// `spec/assign-extended.test.sh`, split across cells: indexed arrays
/// (appended to, sparse, elements unset) and namerefs (`declare -n`,
/// set, unset and removed in one cell, followed in the next) keep what
/// bash keeps. `printf '%s\n'` stands for the spec's `argv.py`.
pub(super) async fn oils_array_nameref_cases(live: &mut Live) {
    live.prepare().await;
    let t = format!("{}/oils-arr-{}", live.side_dir(), unique());
    ok(live, &format!("mkdir -p {t} && cd {t}"), "").await;
    // array.test.sh "declare array and then append", a line a cell.
    ok(live, "declare -a array", "").await;
    ok(live, "array+=(a)", "").await;
    ok(live, "array+=(b c)", "").await;
    ok(live, "printf '%s\\n' \"${array[@]}\"", "a\nb\nc\n").await;
    // "Append sparse arrays"
    ok(live, "a=()\n(( a[99]=1 ))", "").await;
    ok(live, "b=()\n(( b[33]=2 ))\n(( b[66]=3 ))", "").await;
    ok(live, "a+=( \"${b[@]}\" )", "").await;
    ok(
        live,
        "printf '%s\\n' \"${a[@]}\"\nprintf '%s\\n' \"${a[99]}\" \"${a[100]}\" \"${a[101]}\"",
        "1\n2\n3\n1\n2\n3\n",
    )
    .await;
    // "Length after unset"
    ok(live, "a=(0 1 2 3)", "").await;
    ok(live, "unset a[-1]\necho len=${#a[@]}", "len=3\n").await;
    ok(live, "unset a[-1]\necho len=${#a[@]}", "len=2\n").await;
    ok(live, "declare -p a", "declare -a a=([0]=\"0\" [1]=\"1\")\n").await;
    // arith.test.sh "Increment and decrement array elements" (the spec's
    // first line, an OSH option, left out).
    ok(live, "a=(5 6 7 8)", "").await;
    ok(live, "(( a[0]++, ++a[1], a[2]--, --a[3] ))", "").await;
    ok(
        live,
        "(( undef[0]++, ++undef[1], undef[2]--, --undef[3] ))",
        "",
    )
    .await;
    ok(
        live,
        "echo \"${a[@]}\" - \"${undef[@]}\"",
        "6 7 6 7 - 1 1 -1 -1\n",
    )
    .await;
    // var-op-test.test.sh "Assign default value when unset": the
    // expansion assigns (its command, `is`, is not found), and the value
    // is there in the next cell.
    let e = exits(live, "${unset=is unset}", 127, "").await;
    assert!(e.contains("is: command not found"), "{e}");
    ok(live, "echo $unset", "is unset\n").await;
    // nameref.test.sh "pass array by reference"
    ok(
        live,
        "show_value() {\n  local -n array_name=$1\n  local idx=$2\n  echo \"${array_name[$idx]}\"\n}",
        "",
    )
    .await;
    ok(live, "shadock=(ga bu zo meu)", "").await;
    ok(live, "show_value shadock 2", "zo\n").await;
    // "mutating through nameref: ref=": `ref` becomes a reference in one
    // cell; later cells read and assign through it.
    ok(
        live,
        "x=XX\ny=YY\n\nref=x\nref=y\necho 1 ref=$ref",
        "1 ref=y\n",
    )
    .await;
    ok(live, "# now it's a reference\ntypeset -n ref", "").await;
    ok(live, "echo 2 ref=$ref  # prints YY", "2 ref=YY\n").await;
    ok(
        live,
        "ref=XXXX\necho 3 ref=$ref  # it actually prints y, which is XXXX",
        "3 ref=XXXX\n",
    )
    .await;
    ok(live, "# now Y is mutated!\necho 4 y=$y", "4 y=XXXX\n").await;
    // "flag -n and +n"
    ok(
        live,
        "unset -n ref\nx=foo\n\nref=x\n\necho ref=$ref",
        "ref=x\n",
    )
    .await;
    ok(live, "typeset -n ref", "").await;
    ok(live, "echo ref=$ref", "ref=foo\n").await;
    ok(live, "# mutate underlying var\nx=bar", "").await;
    ok(live, "echo ref=$ref", "ref=bar\n").await;
    ok(live, "typeset +n ref", "").await;
    ok(live, "echo ref=$ref", "ref=x\n").await;
    // "unset nameref": `unset ref` unsets what it names.
    ok(
        live,
        "unset ref\nx=X\ntypeset -n ref=x\necho ref=$ref",
        "ref=X\n",
    )
    .await;
    ok(live, "# this works\nunset ref", "").await;
    ok(live, "echo ref=$ref\necho x=$x", "ref=\nx=\n").await;
    // assign-extended.test.sh "declare -pnrx": the nameref, readonly and
    // exported variables of one cell, listed by a function of the next
    // (bash's output, as the spec records it).
    ok(
        live,
        "test_var1=111\nreadonly test_var2=222\nexport test_var3=333\ndeclare -n test_var4=test_var1",
        "",
    )
    .await;
    ok(
        live,
        "f1() {\n  local test_var5=555\n  {\n    echo '[declare -pn]'\n    declare -pn\n    echo '[declare -pr]'\n    declare -pr\n    echo '[declare -px]'\n    declare -px\n  } | grep -E '^\\[|^\\b.*test_var.\\b'\n}",
        "",
    )
    .await;
    ok(
        live,
        "f1",
        "[declare -pn]\ndeclare -n test_var4=\"test_var1\"\n[declare -pr]\ndeclare -r test_var2=\"222\"\n[declare -px]\ndeclare -x test_var3=\"333\"\n",
    )
    .await;
    live.shutdown("k").await;
}

/// The Oils spec tests `spec/glob-bash.test.sh`, `spec/extglob-files.test.sh`,
/// `spec/globstar.test.sh` and `spec/sh-options.test.sh` (`$-`), split
/// across cells: the `shopt` globbing options (`nullglob`, `failglob`,
/// `dotglob`, `extglob`, `globstar`) and the `set` flags one cell turns on
/// decide how the next cell's words expand, and extended patterns parse
/// in a later cell. `echo` stands for the spec's `argv.py`.
pub(super) async fn oils_glob_option_cases(live: &mut Live) {
    live.prepare().await;
    let t = format!("{}/oils-glob-{}", live.side_dir(), unique());
    ok(live, &format!("mkdir -p {t} && cd {t}"), "").await;
    // glob-bash.test.sh "shopt -s nullglob"
    ok(
        live,
        "echo _tmp/spec-tmp/*.nonexistent",
        "_tmp/spec-tmp/*.nonexistent\n",
    )
    .await;
    ok(live, "shopt -s nullglob", "").await;
    ok(live, "echo _tmp/spec-tmp/*.nonexistent", "\n").await;
    // sh-options.test.sh "shopt -q", the option set in the cell before.
    ok(
        live,
        "shopt -q nullglob\necho nullglob=$?\nshopt -q nullglob failglob\necho nullglob,failglob=$?",
        "nullglob=0\nnullglob,failglob=1\n",
    )
    .await;
    ok(live, "shopt -u nullglob", "").await;
    // glob-bash.test.sh "shopt -s failglob in command context"
    ok(live, "echo *.ZZ", "*.ZZ\n").await;
    ok(live, "shopt -s failglob", "").await;
    let run = sh(
        live,
        "echo *.ZZ  # nothing is printed, not []\necho status=$?",
    )
    .await;
    assert_eq!(run.out(), "status=1\n", "{run:?}");
    assert!(err(&run).contains("no match: *.ZZ"), "{run:?}");
    ok(live, "shopt -u failglob", "").await;
    // "dotglob"
    ok(live, "mkdir -p dotglob\ncd dotglob\ntouch .foorc other", "").await;
    ok(live, "echo *", "other\n").await;
    ok(live, "shopt -s dotglob", "").await;
    ok(live, "echo * | sort", ".foorc other\n").await;
    ok(live, "shopt -u dotglob; cd ..", "").await;
    // extglob-files.test.sh "@() matches exactly one of the patterns" and
    // "!(*.h|*.cc) to match everything except C++": `shopt -s extglob` in
    // one cell, the patterns parse and match in the next ones.
    ok(live, "shopt -s extglob", "").await;
    ok(
        live,
        "mkdir -p 0\ncd 0\ntouch {foo,bar}.cc {foo,bar,baz}.h",
        "",
    )
    .await;
    ok(
        live,
        "echo @(*.cc|*.h)",
        "bar.cc bar.h baz.h foo.cc foo.h\n",
    )
    .await;
    ok(
        live,
        "mkdir -p extglob2\ntouch extglob2/{foo,bar}.cc extglob2/{foo,bar,baz}.h \\\n      extglob2/{foo,bar,baz}.py",
        "",
    )
    .await;
    ok(
        live,
        "echo extglob2/!(*.h|*.cc)",
        "extglob2/bar.py extglob2/baz.py extglob2/foo.py\n",
    )
    .await;
    ok(live, "cd ..", "").await;
    // globstar.test.sh "each occurrence of ** recurses through all depths"
    ok(
        live,
        "shopt -s globstar\nmkdir -p globstar && cd globstar",
        "",
    )
    .await;
    ok(
        live,
        "mkdir -p c/subdir\ntouch {leaf.md,c/leaf.md,c/subdir/leaf.md}",
        "",
    )
    .await;
    ok(
        live,
        "echo **/*.* | tr ' ' '\\n' | sort\necho\necho **/**/*.* | tr ' ' '\\n' | sort",
        "c/leaf.md\nc/subdir/leaf.md\nleaf.md\n\nc/leaf.md\nc/subdir/leaf.md\nleaf.md\n",
    )
    .await;
    ok(live, "shopt -u globstar extglob", "").await;
    // sh-options.test.sh "$- with pipefail" (a `bash -c` shell, as in
    // "$- with -c": bash's `huBc`), then "$- and more options".
    ok(live, "set -o pipefail -o nounset", "").await;
    ok(live, "echo $-", "huBc\n").await;
    ok(live, "set +o pipefail +o nounset", "").await;
    ok(live, "set -efuC", "").await;
    ok(
        live,
        "o=$-\n[[ $o == *e* ]]; echo yes\n[[ $o == *f* ]]; echo yes\n[[ $o == *u* ]]; echo yes\n[[ $o == *C* ]]; echo yes",
        "yes\nyes\nyes\nyes\n",
    )
    .await;
    ok(live, "set +efuC", "").await;
    live.shutdown("k").await;
}

/// The Oils spec tests `spec/builtin-trap-err.test.sh` ("trap can use
/// original $LINENO", "trap ERR and set -o errexit") and
/// `spec/builtin-trap-bash.test.sh` ("trap -p", "Combine ERR trap and
/// USR1 trap"): each script as one cell (bash's output, as the spec
/// records it), then split across cells: an ERR trap set in one cell
/// fires in the next ones (README: traps other than EXIT persist), with
/// `$LINENO` the line in the cell, and `trap -p` lists it.
pub(super) async fn oils_err_trap_cases(live: &mut Live) {
    live.prepare().await;
    // builtin-trap-err.test.sh "trap can use original $LINENO"
    ok(
        live,
        "trap 'echo line=$LINENO' ERR\n\nfalse\nfalse\necho ok",
        "line=3\nline=4\nok\n",
    )
    .await;
    ok(live, "trap - ERR", "").await;
    ok(live, "trap 'echo line=$LINENO' ERR", "").await;
    // builtin-trap-bash.test.sh "trap -p" (with the ERR trap)
    ok(live, "trap -p", "trap -- 'echo line=$LINENO' ERR\n").await;
    ok(live, "\nfalse\nfalse\necho ok", "line=2\nline=3\nok\n").await;
    exits(live, "false", 1, "line=1\n").await;
    // The next cell starts with `$?` as the one before ended (README), and
    // the trap does not fire for that.
    ok(live, "echo $?", "1\n").await;
    // builtin-trap-err.test.sh "trap ERR and set -o errexit"
    ok(live, "false\necho a", "line=1\na\n").await;
    ok(live, "set -o errexit", "").await;
    exits(
        live,
        "echo b\nfalse   # trap executed, and executation also halts\necho c  # doesn't get here",
        1,
        "b\nline=2\n",
    )
    .await;
    ok(live, "set +o errexit\ntrap - ERR", "").await;
    ok(live, "false\ntrap -p", "").await;
    // builtin-trap-bash.test.sh "Combine ERR trap and USR1 trap"
    let combine = "sh -c \"kill -USR1 $$\"\necho after=$?";
    let traps = "trap 'false; echo $LINENO usr1' USR1\ntrap 'false; echo $LINENO err' ERR";
    ok(
        live,
        &format!("{traps}\n\n{combine}"),
        "1 err\n1 usr1\nafter=0\n",
    )
    .await;
    ok(live, "trap - USR1 ERR", "").await;
    ok(live, traps, "").await;
    ok(live, combine, "1 err\n1 usr1\nafter=0\n").await;
    ok(live, "trap - USR1 ERR\ntrap", "").await;
    live.shutdown("k").await;
}

/// Runs each `(code, stdout)` in turn as its own cell, each checked as by
/// `ok`: a spec script split across cells.
async fn oks(live: &mut Live, cells: &[(&str, &str)]) {
    for (code, stdout) in cells {
        ok(live, code, stdout).await;
    }
}

/// The Oils spec's helpers as shell functions, so that its scripts run as
/// written: `argv.py` prints its arguments as a Python list (plain words
/// only), `printenv.py` each variable's environment value or `None`. A
/// cell defines them; the later cells call them (functions persist).
const SPEC_HELPERS: &str = concat!(
    "argv.py() { local _w _s=; for _w; do _s+=\"${_s:+, }'$_w'\"; done; echo \"[$_s]\"; }\n",
    "printenv.py() { local _v; for _v; do printenv \"$_v\" || echo None; done; }\n",
);

/// A fresh kernel in a scratch directory of its own, with the spec's
/// helpers defined.
async fn spec_kernel(live: &mut Live, name: &str) -> String {
    live.prepare().await;
    let t = format!("{}/oils-{name}-{}", live.side_dir(), unique());
    ok(
        live,
        &format!("mkdir -p {t} && cd {t}\nTMP={t}\n{SPEC_HELPERS}"),
        "",
    )
    .await;
    t
}

/// The Oils spec test `spec/word-split.test.sh`, split across cells: an
/// `IFS` one cell sets (or unsets, or empties) splits the words of the
/// next cells, and `"$*"` joins the positional parameters of an earlier
/// cell with it, as in one shell; a function's `local IFS` stays its own.
/// (tether's own restore and save run with the user's `IFS` in place.)
pub(super) async fn oils_word_split_cases(live: &mut Live) {
    spec_kernel(live, "split").await;
    // "IFS is scoped"
    oks(
        live,
        &[
            ("IFS=b\nword=abcd", ""),
            ("f() { local IFS=c; argv.py $word; }", ""),
            ("f", "['ab', 'd']\n"),
            ("argv.py $word", "['a', 'cd']\n"),
        ],
    )
    .await;
    // "IFS and joining arrays", then "... by assignments" with the same
    // IFS and arguments, a cell later.
    oks(
        live,
        &[
            ("IFS=:", ""),
            ("set -- x 'y z'", ""),
            (
                "argv.py \"$@\"\nargv.py $@\nargv.py \"$*\"\nargv.py $*",
                "['x', 'y z']\n['x', 'y z']\n['x:y z']\n['x', 'y z']\n",
            ),
            (
                "s=\"$@\"\nargv.py \"$s\"\n\ns=$@\nargv.py \"$s\"\n\ns=\"$*\"\nargv.py \"$s\"\n\ns=$*\nargv.py \"$s\"",
                "['x y z']\n['x y z']\n['x:y z']\n['x:y z']\n",
            ),
        ],
    )
    .await;
    // "Empty IFS (regression for bug)" and "no splitting when IFS is
    // empty" (the spec's first line resets the arguments of the case above)
    oks(
        live,
        &[
            ("set --", ""),
            ("IFS=", ""),
            ("echo [\"$*\"]", "[]\n"),
            ("set a b c", ""),
            ("echo [\"$*\"]", "[abc]\n"),
            ("foo=\"a b\"", ""),
            ("argv.py $foo", "['a b']\n"),
        ],
    )
    .await;
    // "IFS unset behaves like $' \t\n'" (python3 for the spec's python2)
    oks(
        live,
        &[
            ("unset IFS", ""),
            ("x=$(python3 -c 'print(\" a b\\tc\\n\")')", ""),
            ("argv.py $x", "['a', 'b', 'c']\n"),
            ("echo \"${IFS-unset}\"", "unset\n"),
        ],
    )
    .await;
    live.shutdown("k").await;
}

/// The Oils spec tests `spec/assign.test.sh` and
/// `spec/builtin-vars.test.sh`, split across cells: a prefix binding
/// (`FOO=foo fun`) lasts for its command only; `export` before the value,
/// `export -n`, `unset` of an exported variable, readonly scalars and
/// arrays and `declare -a` over an existing array keep, a cell later, what
/// bash keeps. A readonly function stays readonly too (not in the spec:
/// tether dropped `readonly -f` at the save, found while writing these).
pub(super) async fn oils_assign_export_cases(live: &mut Live) {
    spec_kernel(live, "assign").await;
    oks(
        live,
        &[
            // assign.test.sh "Env value doesn't persist", "FOO=foo fun"
            ("FOO=foo printenv.py FOO", "foo\n"),
            ("echo -$FOO-", "--\n"),
            ("fun() {\n  echo \"[$FOO]\"\n}", ""),
            ("FOO=foo fun", "[foo]\n"),
            ("echo \"[${FOO-unset}]\"", "[unset]\n"),
            // "'declare -A' and then dict assignment"
            ("declare -A foo", ""),
            ("key=bar", ""),
            ("foo[\"$key\"]=value", ""),
            ("echo ${foo[\"bar\"]}", "value\n"),
            ("unset foo", ""),
            // "declare -a arr does not remove existing arrays"
            ("declare -a arr", ""),
            ("arr=(foo bar baz)", ""),
            ("declare -a arr", ""),
            ("echo arr:${#arr[@]}", "arr:3\n"),
            // "readonly array should not be modified by a+=(1)"
            ("a=(1 2 3)", ""),
            ("readonly -a a", ""),
            ("eval 'a+=(4)'\nargv.py \"${a[@]}\"", "['1', '2', '3']\n"),
            (
                "eval 'declare -n r=a; r+=(4)'\nargv.py \"${a[@]}\"",
                "['1', '2', '3']\n",
            ),
            // builtin-vars.test.sh "Export sets a global variable that
            // persists after export -n"
            ("f() { export GLOBAL=X; }", ""),
            ("f", ""),
            ("echo $GLOBAL\nprintenv.py GLOBAL", "X\nX\n"),
            ("export -n GLOBAL", ""),
            ("echo $GLOBAL\nprintenv.py GLOBAL", "X\nNone\n"),
            // "Export a variable before defining it", then "Unset exported
            // variable, then define it again.  It's NOT still exported."
            ("export U", ""),
            ("U=u", ""),
            ("printenv.py U", "u\n"),
            ("unset U", ""),
            ("printenv.py U", "None\n"),
            ("U=newvalue", ""),
            ("echo $U\nprintenv.py U", "newvalue\nNone\n"),
            // "Unset readonly variable", "assign to readonly variable"
            // (bash goes on, status 1)
            ("readonly R=foo", ""),
            ("unset R\necho status=$?", "status=1\n"),
            ("readonly foo=bar", ""),
            (
                "foo=eggs\necho \"status=$?\"  # nothing happens",
                "status=1\n",
            ),
            ("echo $foo", "bar\n"),
            // a readonly function, a cell later
            ("greet() { echo hi; }\nreadonly -f greet", ""),
            ("greet() { echo bye; }\necho status=$?", "status=1\n"),
            (
                "greet; readonly -f | grep -c '^declare -fr greet$'",
                "hi\n1\n",
            ),
        ],
    )
    .await;
    // "assign to readonly variable - errexit": the cell ends with 1.
    ok(live, "set -o errexit", "").await;
    exits(
        live,
        "foo=eggs\necho \"status=$?\"  # nothing happens",
        1,
        "",
    )
    .await;
    ok(live, "set +o errexit\necho $foo", "bar\n").await;
    live.shutdown("k").await;
}

/// The Oils spec test `spec/builtin-set.test.sh`, its `set -a` cases,
/// split across cells: `allexport` turned on in one cell exports what the
/// next cells assign (also a function's `local`, `declare`), not what was
/// there before; `set +a` in a later cell stops it. tether's restore
/// assigns every variable before it turns the options on, so a restored
/// variable is exported only if it was.
pub(super) async fn oils_set_allexport_cases(live: &mut Live) {
    spec_kernel(live, "allexport").await;
    oks(
        live,
        &[
            // "variables set before set -a are not exported"
            ("BEFORE=before_value", ""),
            // "set -a exports variables"
            ("set -a", ""),
            ("FOO=bar\nBAZ=qux", ""),
            ("printenv.py FOO BAZ", "bar\nqux\n"),
            ("AFTER=after_value", ""),
            ("printenv.py BEFORE AFTER", "None\nafter_value\n"),
            // "set -a exports local variables", "... declare variables"
            ("f() {\n  local ZZZ=zzz\n  printenv.py ZZZ\n}", ""),
            ("f", "zzz\n"),
            ("declare ZZZ=zzz", ""),
            ("printenv.py ZZZ", "zzz\n"),
            // "set +a stops exporting"
            ("FOO=exported", ""),
            ("set +a", ""),
            ("BAR=not_exported", ""),
            ("printenv.py FOO BAR", "exported\nNone\n"),
            // "set -o allexport (long form)"
            ("set -o allexport", ""),
            ("VAR1=value1", ""),
            ("set +o allexport", ""),
            ("VAR2=value2", ""),
            ("printenv.py VAR1 VAR2", "value1\nNone\n"),
        ],
    )
    .await;
    live.shutdown("k").await;
}

/// The Oils spec tests `spec/case_.test.sh` and
/// `spec/nocasematch-match.test.sh`, split across cells: a pattern kept
/// in a variable matches a cell later, and `shopt -s nocasematch` from
/// one cell makes the next cells' `case`, `[[ ]]` and `${x#pat}` match
/// regardless of case (`[ ]` does not). With nocasematch on, variables
/// and a function whose names differ from the shell's own only by case
/// (`uid`, `pwd`, `random`, `TRAP`) are the user's and persist: tether's
/// save dropped them as the shell's (not in the spec; found here).
pub(super) async fn oils_case_nocasematch_cases(live: &mut Live) {
    spec_kernel(live, "case").await;
    oks(
        live,
        &[
            // case_.test.sh "Match a literal with a glob character with a
            // dynamic pattern", "Multiple Patterns Match", ";;&"
            ("x='b.py'\npat='[ab].py'", ""),
            ("case \"$x\" in\n  $pat) echo match ;;\nesac", "match\n"),
            ("x=foo\nresult='-'", ""),
            (
                "case \"$x\" in\n  f*|*o) result=\"$result X\"\nesac\necho $result",
                "- X\n",
            ),
            (
                "case a in\n  a) echo A ;;&\n  *) echo star ;;&\n  *) echo star2 ;;\nesac",
                "A\nstar\nstar2\n",
            ),
            // nocasematch-match.test.sh
            ("shopt -s nocasematch", ""),
            (
                "case a in A) echo 0 ;; *) echo 1 ;; esac\ncase A in a) echo 0 ;; *) echo 1 ;; esac\ncase a in [A]) echo 0 ;; *) echo 1 ;; esac\ncase A in [a]) echo 0 ;; *) echo 1 ;; esac",
                "0\n0\n0\n0\n",
            ),
            (
                "[[ a == A ]]; echo $?\n[[ A == a ]]; echo $?\n[[ A == [a] ]]; echo $?\n[[ a == [A] ]]; echo $?",
                "0\n0\n0\n0\n",
            ),
            ("[ a = A ]; echo $?\n[ A = a ]; echo $?", "1\n1\n"),
            ("foo=a\nbar=A", ""),
            (
                "echo \"${foo#A}\" \"${foo#[A]}\"\necho \"${bar#a}\" \"${bar#[a]}\"",
                "a a\nA A\n",
            ),
            (
                "uid=1000 pwd=/srv random=4 seconds=9\nTRAP() { echo own; }",
                "",
            ),
            ("echo $uid $pwd $random $seconds; TRAP", "1000 /srv 4 9\nown\n"),
            ("shopt -u nocasematch", ""),
            ("echo $uid $pwd; TRAP", "1000 /srv\nown\n"),
        ],
    )
    .await;
    live.shutdown("k").await;
}

/// The Oils spec test `spec/dbracket.test.sh`, split across cells: a glob
/// or regex kept in a variable matches a cell later. `BASH_REMATCH` is
/// set where the match ran; like every `BASH_*` variable it is the
/// shell's and is not restored (README, "Shell kernels"): a later cell
/// that needs a group keeps it in a variable of its own.
pub(super) async fn oils_dbracket_cases(live: &mut Live) {
    spec_kernel(live, "dbracket").await;
    oks(
        live,
        &[
            // "[[ glob matching with unquoted var"
            ("pat=*.py", ""),
            (
                "[[ foo.py == $pat ]] && echo true\n[[ foo.p  == $pat ]] || echo false",
                "true\nfalse\n",
            ),
            // "[[ regex matching"
            ("regex='.*\\.py'", ""),
            (
                "[[ foo.py =~ $regex ]] && echo true\n[[ foo.p  =~ $regex ]] || echo false",
                "true\nfalse\n",
            ),
            (
                "[[ foo123 =~ ([a-z]+)([0-9]+) ]] && echo \"${BASH_REMATCH[2]}\"\ndigits=${BASH_REMATCH[2]}",
                "123\n",
            ),
            ("echo \"[${BASH_REMATCH[*]}] $digits\"", "[] 123\n"),
        ],
    )
    .await;
    // "[[ with op variable": a parse error, status 2.
    ok(live, "op='=='", "").await;
    exits(live, "[[ a $op a ]] && echo true", 2, "").await;
    live.shutdown("k").await;
}

/// The Oils spec tests `spec/pipeline.test.sh` and `spec/loop.test.sh`,
/// split across cells: `shopt -s lastpipe` from one cell runs the next
/// cells' last pipeline command in the shell, so what it reads stays;
/// `$?` of a failed pipeline is the next cell's (README). `PIPESTATUS`
/// is the shell's and is not restored (README, "Shell kernels"): read it
/// in the cell of the pipeline. A loop variable and counters left by a
/// `break 2` are there a cell later.
pub(super) async fn oils_pipeline_loop_cases(live: &mut Live) {
    spec_kernel(live, "pipe").await;
    // "Exit code is last status" (grep -E for the spec's egrep)
    exits(live, "echo a | grep -E '[0-9]+'", 1, "").await;
    oks(
        live,
        &[
            ("echo $?", "1\n"),
            // "shopt -s lastpipe (always on in OSH)", both
            ("shopt -s lastpipe", ""),
            ("echo hi | read line", ""),
            ("echo \"line=$line\"", "line=hi\n"),
            ("i=0", ""),
            ("seq 3 | while read line; do\n  (( i++ ))\ndone", ""),
            ("echo i=$i", "i=3\n"),
            // "PIPESTATUS" (and "with shopt -s lastpipe"), the function
            // from the cell before
            ("return3() {\n  return 3\n}", ""),
            (
                "{ sleep 0.03; exit 1; } | { sleep 0.02; exit 2; } | { sleep 0.01; return3; }\necho ${PIPESTATUS[@]}",
                "1 2 3\n",
            ),
        ],
    )
    .await;
    exits(live, "exit 55 | (exit 44)", 44, "").await;
    oks(
        live,
        &[
            // one status, not the pipeline's two: PIPESTATUS is the new
            // shell's
            ("echo \"${#PIPESTATUS[@]}\"", "1\n"),
            ("shopt -u lastpipe", ""),
            // loop.test.sh "using loop var outside loop"
            (
                "fun() {\n  for i in a b c; do\n    echo $i\n  done\n  echo $i\n}",
                "",
            ),
            ("fun", "a\nb\nc\nc\n"),
            ("echo $i", "c\n"),
            // "multi-level break with argument"
            ("counterA=100\ncounterB=100", ""),
            (
                "while test \"$counterA\" -gt 0\ndo\n    counterA=$((counterA - 1))\n    while test \"$counterB\" -gt 0\n    do\n        counterB=$((counterB - 1))\n        if test \"$counterB\" = 50\n        then\n            break 2\n        fi\n    done\ndone",
                "",
            ),
            ("echo \"$counterA\"\necho \"$counterB\"", "99\n50\n"),
        ],
    )
    .await;
    live.shutdown("k").await;
}

/// The Oils spec tests `spec/builtin-type.test.sh` and
/// `spec/command_.test.sh`, split across cells: `type` names a keyword,
/// a builtin, an alias and a function of earlier cells; a `PATH` set in
/// one cell is searched in the next. The command hash table belongs to
/// the shell process (README, "Shell kernels", per cell by design): a
/// cell starts with it empty, so `hash` of a later cell lists nothing and
/// a command put earlier in `PATH` is found at once (in one shell the
/// cached path runs until `hash -r`).
pub(super) async fn oils_type_command_cases(live: &mut Live) {
    spec_kernel(live, "type").await;
    oks(
        live,
        &[
            // builtin-type.test.sh "type -> keyword builtin", "type ->
            // alias external" (with a function of an earlier cell)
            ("type while cd", "while is a shell keyword\ncd is a shell builtin\n"),
            ("alias ll='ls -l'\nfun() { :; }", ""),
            ("type -t ll fun while cd sh", "alias\nfunction\nkeyword\nbuiltin\nfile\n"),
            ("type ll", "ll is aliased to `ls -l'\n"),
            // command_.test.sh "$PATH lookup"
            (
                "mkdir -p one two\necho 'echo one' > one/mycmd\necho 'echo two' > two/mycmd\nchmod +x one/mycmd two/mycmd",
                "",
            ),
            ("OLDPATH=$PATH\nPATH='one:two'", ""),
            ("mycmd", "one\n"),
            ("PATH=$OLDPATH\nrm one/mycmd", ""),
            // "filling $PATH cache, then insert the same command earlier
            // in cache", a step a cell
            ("PATH=\"one:two:$PATH\"", ""),
            ("mycmd", "two\n"),
            ("echo 'echo one' > one/mycmd\nchmod +x one/mycmd", ""),
            ("mycmd  # a new shell: no cached 'two'", "one\n"),
            ("hash -r\nmycmd", "one\n"),
            // "hash with args" in one cell; `hash` in the next lists none
            ("hash sh\necho status=$?\nhash | grep -c /sh", "status=0\n1\n"),
            ("hash 2>&1", "hash: hash table empty\n"),
            ("PATH=$OLDPATH", ""),
        ],
    )
    .await;
    live.shutdown("k").await;
}

/// The Oils spec test `spec/redirect.test.sh`, split across cells:
/// `set -o noclobber` from one cell keeps `>` of the next from
/// overwriting (status 1, the file as it was) and lets `>|` and
/// `/dev/null` through; `&>>` appends across cells. A descriptor opened
/// with `exec` belongs to the shell process (README, "Shell kernels"):
/// its number stays in the variable (`{myfd}`), the descriptor is gone a
/// cell later.
pub(super) async fn oils_redirect_cases(live: &mut Live) {
    spec_kernel(live, "redir").await;
    oks(
        live,
        &[
            // ">| to clobber"
            ("echo XX >| $TMP/c.txt", ""),
            ("set -o noclobber", ""),
            (
                "echo YY >  $TMP/c.txt  # not clobber\necho status=$?",
                "status=1\n",
            ),
            ("cat $TMP/c.txt\necho ZZ >| $TMP/c.txt", "XX\n"),
            ("cat $TMP/c.txt", "ZZ\n"),
            // "noclobber can still write to non-regular files like
            // /dev/null" (set -C from the cell before still on)
            (
                "echo a  >  /dev/null  # trunc, write stdout\necho a &>  /dev/null\necho a  >> /dev/null\necho a &>> /dev/null\necho a  >| /dev/null\necho status=$?",
                "status=0\n",
            ),
            ("set +C", ""),
            // "&>> appends stdout and stderr", the file from a cell before
            ("echo \"ok\" > $TMP/f.txt", ""),
            ("{ echo STDOUT; echo STDERR >&2; } &>> $TMP/f.txt", ""),
            (
                "grep ok $TMP/f.txt >/dev/null && echo 'ok'\ngrep STDOUT $TMP/f.txt >/dev/null && echo 'ok'\ngrep STDERR $TMP/f.txt >/dev/null && echo 'ok'",
                "ok\nok\nok\n",
            ),
            // "Named file descriptor": in one cell as the spec has it
            (
                "exec {myfd}> $TMP/named-fd.txt\necho named-fd-contents >& $myfd\ncat $TMP/named-fd.txt",
                "named-fd-contents\n",
            ),
        ],
    )
    .await;
    // ... and a cell later: the number is kept, the descriptor is not.
    let run = sh(live, "[[ $myfd -ge 10 ]] && echo kept\necho more >& $myfd").await;
    assert_eq!(run.out(), "kept\n", "{run:?}");
    assert!(err(&run).contains("Bad file descriptor"), "{run:?}");
    live.shutdown("k").await;
}

/// The Oils spec tests `spec/brace-expansion.test.sh` and
/// `spec/quote.test.sh`, split across cells: a variable of an earlier
/// cell inside braces, the counter a brace expansion's side effect left,
/// `~` after `HOME` was set in the cell before, backslashes and newlines
/// stored in one cell and echoed in the next; `set +o braceexpand` holds
/// for the later cells.
pub(super) async fn oils_brace_quote_cases(live: &mut Live) {
    spec_kernel(live, "brace").await;
    oks(
        live,
        &[
            // "expansion with simple var", "Side effect in expansion"
            ("a=A", ""),
            ("echo -{$a,b}-", "-A- -b-\n"),
            ("i=0", ""),
            ("echo {a,b,c}-$((i++))", "a-0 b-1 c-2\n"),
            ("echo $i", "3\n"),
            // "Tilde expansion", "Tilde expansion with brace expansion"
            ("OLDHOME=$HOME\nHOME=/home/foo", ""),
            ("echo ~", "/home/foo\n"),
            ("HOME=/home/bob", ""),
            (
                "echo {foo~,~}/bar\na=({foo~,~}/bar)",
                "foo~/bar /home/bob/bar\n",
            ),
            (
                "for y in \"${a[@]}\"; do\n  echo \"== $y\"\ndone",
                "== foo~/bar\n== /home/bob/bar\n",
            ),
            ("HOME=$OLDHOME", ""),
            // quote.test.sh "Storing backslashes and then echoing them",
            // "$'' with newlines"
            ("one='\\'\ntwo='\\\\'", ""),
            (
                "echo $one $two\necho \"$one\" \"$two\"",
                "\\ \\\\\n\\ \\\\\n",
            ),
            ("cols=$'col1\\ncol2\\ncol3'", ""),
            ("echo \"$cols\"", "col1\ncol2\ncol3\n"),
            // braceexpand off, a cell later (sh-options: `set +B`)
            ("set +o braceexpand", ""),
            ("echo {a,b}", "{a,b}\n"),
            ("set -o braceexpand", ""),
            ("echo {a,b}", "a b\n"),
        ],
    )
    .await;
    live.shutdown("k").await;
}

/// The Oils spec tests `spec/var-op-strip.test.sh` and
/// `spec/exit-status.test.sh`, split across cells: prefix and suffix
/// removal over an array and the positional parameters of an earlier
/// cell, with extglob patterns once a cell turned extglob on; a
/// function's `return N` and a cell's own `exit N` are truncated to 0-255
/// as bash does (the cell's status is what `exit` left).
pub(super) async fn oils_strip_status_cases(live: &mut Live) {
    spec_kernel(live, "strip").await;
    oks(
        live,
        &[
            // "Remove const suffix is vectorized on user array", "... on $@
            // array"
            ("a=(1a 2a 3a)", ""),
            ("argv.py ${a[@]%a}", "['1', '2', '3']\n"),
            ("set -- 1a 2a 3a", ""),
            ("argv.py ${@%a}", "['1', '2', '3']\n"),
            // "extglob in pattern"
            ("shopt -s extglob", ""),
            ("x='foo()'", ""),
            (
                "echo 1 ${x%*(foo|bar)'()'}\necho 2 ${x%%*(foo|bar)'()'}\necho 3 ${x#*(foo|bar)'()'}\necho 4 ${x##*(foo|bar)'()'}",
                "1 foo\n2\n3\n4\n",
            ),
            ("shopt -u extglob", ""),
            // exit-status.test.sh "Truncating 'return' status"
            ("f() { return 256; }", ""),
            ("f; echo status=$?", "status=0\n"),
            ("g() { return -2; }", ""),
            ("g; echo status=$?", "status=254\n"),
        ],
    )
    .await;
    // "Truncating 'exit' status", the cell's own exit.
    for (code, status) in [("exit 255", 255), ("exit 257", 1), ("exit -2", 254)] {
        exits(live, code, status, "").await;
        ok(live, "echo $?", &format!("{status}\n")).await;
    }
    live.shutdown("k").await;
}

/// The Oils spec test `spec/globignore.test.sh`, split across cells:
/// `GLOBIGNORE` set in one cell filters the next cells' globs (and, being
/// non-empty, turns on dotglob: `.` and `..` still filtered), emptied it
/// keeps dotglob, as bash does. Unset, bash turns dotglob off again (the
/// manual): tether kept the dotglob the restore had turned on, as bash
/// does not show the change in `BASHOPTS` (found here, fixed).
pub(super) async fn oils_globignore_cases(live: &mut Live) {
    spec_kernel(live, "globignore").await;
    oks(
        live,
        &[
            // "Ignore *.txt"
            (
                "touch one.md one.txt\nmkdir -p foo\ntouch foo/{two.md,two.txt}",
                "",
            ),
            ("GLOBIGNORE=*.txt", ""),
            ("echo *.* foo/*.*", "one.md foo/two.md foo/two.txt\n"),
            // ". and .. always filtered when GLOBIGNORE is set"
            ("touch .hidden", ""),
            ("echo .*", ".hidden\n"),
            ("shopt -u globskipdots", ""),
            ("echo .*", ".hidden\n"),
            ("shopt -s globskipdots\nrm .hidden", ""),
            // "resetting globignore reverts to default behaviour"
            ("touch reset.txt", ""),
            ("echo *.*", "one.md\n"),
            ("GLOBIGNORE=", ""),
            ("echo *.*", "one.md one.txt reset.txt\n"),
            ("shopt dotglob", "dotglob        \ton\n"),
            // unset: dotglob off, as in one bash
            ("GLOBIGNORE=*.txt", ""),
            ("unset GLOBIGNORE", ""),
            (
                "shopt dotglob\necho *",
                "dotglob        \toff\nfoo one.md one.txt reset.txt\n",
            ),
        ],
    )
    .await;
    live.shutdown("k").await;
}

/// The Oils spec tests `spec/builtin-special.test.sh`, `spec/let.test.sh`
/// and `spec/temp-binding.test.sh`, split across cells: a function that
/// redefines `true` (not a special builtin) is called a cell later, a
/// prefix binding on it does not stay; `let` assignments build on an
/// earlier cell's; a function's temporary bindings over its locals behave
/// as in one bash.
pub(super) async fn oils_special_builtin_cases(live: &mut Live) {
    spec_kernel(live, "special").await;
    oks(
        live,
        &[
            // builtin-special.test.sh "true is not special; prefix
            // assignments don't persist, it can be redefined"
            ("foo=bar true\necho foo=$foo", "foo=\n"),
            ("true() {\n  echo true func\n}", ""),
            ("foo=bar true\necho foo=$foo", "true func\nfoo=\n"),
            ("echo \"[${foo-unset}]\"", "[unset]\n"),
            // "Non-special builtins CAN be redefined as functions" (without
            // the spec's `set -o posix`: README, "Shell kernels")
            ("true hi\necho status=$?", "true func\nstatus=0\n"),
            ("unset -f true", ""),
            // let.test.sh "let", "let with ()"
            ("let x=1", ""),
            ("let y=x+2", ""),
            (
                "let z=y*3  # zsh treats this as a glob; bash doesn't\nlet z2='y*3'",
                "",
            ),
            ("echo $x $y $z $z2", "1 3 9 9\n"),
            ("let x=( 1 )\nlet y=( x + 2 )\nlet z=( y * 3 )", ""),
            ("echo $x $y $z", "1 3 9\n"),
            // temp-binding.test.sh "Temp bindings with local": the function
            // of one cell, called in the next (bash's output, which the
            // spec marks as a bug)
            (
                "f() {\n  local x=x\n  tmp='' local tx=tx\n  eval 'local y=y'\n  tmp='' eval 'local ty=ty'\n  if true; then\n    x='X' unset x\n    tx='TX' unset tx\n    y='Y' unset y\n    ty='TY' unset ty\n  fi\n  echo x=$x\n  echo tx=$tx\n  echo y=$y\n  echo ty=$ty\n}",
                "",
            ),
            ("f", "x=x\ntx=tx\ny=y\nty=ty\n"),
        ],
    )
    .await;
    live.shutdown("k").await;
}

/// Oils `spec/builtin-special.test.sh` "command, builtin - both can be
/// redefined, not special (regression)", split across cells: the user's
/// `builtin` and `command` functions, defined in one cell, are called in
/// the next. tether's wrapper reaches builtins through `builtin` around
/// the code; a user's function of that name is set aside while it does
/// (it printed in every later cell, and the state was not saved right).
/// Then the same with functions named after the other builtins the
/// wrapper calls (`declare`, `printf`, `mapfile`, `compgen`, `shopt`,
/// `local`, `umask`, `alias`, `set`, `eval`), which bash lets a user
/// define alike.
pub(super) async fn oils_builtin_redefined(live: &mut Live) {
    spec_kernel(live, "builtin").await;
    oks(
        live,
        &[
            ("builtin echo b\ncommand echo c", "b\nc\n"),
            (
                "builtin() {\n  echo builtin-redef \"$@\"\n}\n\ncommand() {\n  echo command-redef \"$@\"\n}",
                "",
            ),
            (
                "builtin echo b\ncommand echo c\nkept=1",
                "builtin-redef echo b\ncommand-redef echo c\n",
            ),
            ("echo $kept", "1\n"),
            ("unset -f builtin command\nbuiltin echo b\ncommand echo c", "b\nc\n"),
            (
                concat!(
                    "for f in declare printf mapfile compgen shopt local umask alias set eval; do\n",
                    "  eval \"$f() { echo \\\"$f-redef \\$*\\\"; }\"\n",
                    "done\n",
                    "kept=2",
                ),
                "",
            ),
            ("printf x; set -- a; echo $kept", "printf-redef x\nset-redef -- a\n2\n"),
            (
                "builtin unset -f declare printf mapfile compgen shopt local umask alias set eval\necho $kept",
                "2\n",
            ),
            ("type -t printf set eval; echo $kept", "builtin\nbuiltin\nbuiltin\n2\n"),
        ],
    )
    .await;
    live.shutdown("k").await;
}
/// The Oils spec test `spec/append.test.sh`, split across cells: `+=` on a
/// string, an array, an element (`a[1]+=`, `a[-1]+=`), an unset name
/// (also under a `set -u` an earlier cell turned on), through `export`,
/// `readonly`, `declare` and `local`, each on a value an earlier cell left.
pub(super) async fn oils_append_cases(live: &mut Live) {
    spec_kernel(live, "append").await;
    oks(
        live,
        &[
            // "Append string to string", "Append array to array"
            ("s='abc'", ""),
            ("s+=d\necho $s", "abcd\n"),
            ("a=(x y )", ""),
            (
                "a+=(t 'u v')\nargv.py \"${a[@]}\"",
                "['x', 'y', 't', 'u v']\n",
            ),
            // "Append string to undefined variable" (set -u from an earlier cell)
            ("u+=foo\necho u=$u\n\nset -u", "u=foo\n"),
            ("t+=foo\necho t=$t", "t=foo\n"),
            ("t+=foo\necho t=$t\nset +u", "t=foofoo\n"),
            // "Append to array to undefined variable", "error: s+=(my array)"
            ("y+=(c d)\nargv.py \"${y[@]}\"\nsa='abc'", "['c', 'd']\n"),
            (
                "sa+=(d e f)\nargv.py \"${sa[@]}\"",
                "['abc', 'd', 'e', 'f']\n",
            ),
            // "error: myarray+=s", "myarray[1]+=s", "myarray[-1]+=s"
            ("b=(x y )\nc=(x y )\nd=(1 '2 3')", ""),
            ("b+=z\nargv.py \"${b[@]}\"", "['xz', 'y']\n"),
            ("c[1]+=z\nargv.py \"${c[@]}\"", "['x', 'yz']\n"),
            ("d[-1]+=' 4'\nargv.py \"${d[@]}\"", "['1', '2 3 4']\n"),
            // "Strings have value semantics, not reference semantics"
            ("s1='abc'\ns2=$s1", ""),
            ("s1+='d'\necho $s1 $s2", "abcd abc\n"),
            // "export readonly +=", "assign builtin appending array"
            (
                "export e+=foo\necho e=$e\n\nreadonly r+=bar\necho r=$r",
                "e=foo\nr=bar\n",
            ),
            (
                "set -u\n\nexport e+=foo\necho e=$e\nprintenv.py e\nset +u",
                "e=foofoo\nfoofoo\n",
            ),
            (
                "declare dd+=(d e)\necho \"${dd[@]}\"\nreadonly rr+=(r e)",
                "d e\n",
            ),
            (
                "declare dd+=(c l)\necho \"${dd[@]}\"\necho \"${rr[@]}\"",
                "d e c l\nr e\n",
            ),
            // "local +="
            (
                "f() {\n  local s+=foo\n  echo s=$s\n\n  set -u\n  local s+=foo\n  echo s=$s\n}",
                "",
            ),
            ("f\nset +u", "s=foo\ns=foofoo\n"),
        ],
    )
    .await;
    live.shutdown("k").await;
}

/// The Oils spec tests `spec/var-op-patsub.test.sh`, `var-op-slice.test.sh`
/// and `var-op-len.test.sh`, split across cells: `${v/pat/rep}` (anchored,
/// global, char classes, quoted and unquoted patterns), `${v:i:n}` (negative,
/// out of range, arithmetic) and `${#v}` on the values of an earlier cell;
/// under `set -o nounset` from the cell before, an unset one ends the cell
/// (127, as under `bash -c`; the spec runs a file: 1); the UTF-8 cases in
/// the `LC_ALL` an earlier cell exported.
pub(super) async fn oils_var_op_cases(live: &mut Live) {
    spec_kernel(live, "varop").await;
    oks(
        live,
        &[
            ("v=abcde\ns=xx_xx_xx\nf=xx_xx\nh='begin <html></html> end'\ng='aa*bb+cc'", ""),
            ("echo ${v/c*/XX}\necho ${s/xx?/yy_} ${s//xx?/yy_}\necho ${s/?xx/_yy} ${s/#?xx/_yy}\necho ${s/?xx/_yy} ${s/%?xx/_yy}", "abXX\nyy_xx_xx yy_yy_xx\nxx_yy_xx xx_xx_xx\nxx_yy_xx xx_xx_yy\n"),
            ("echo ${f/xx/yy} ${f//xx/yy} ${f/#xx/yy} ${f/%xx/yy}\necho ${h/<*>/[]}\necho ${s//[[:alpha:]]/y} ${s//[^[:alpha:]]/-}\necho ${g//\\**+/__}", "yy_xx yy_yy yy_xx xx_yy\nbegin [] end\nyy_yy_yy xx-xx-xx\naa__cc\n"),
            // "Pattern replacement on unset variable": nounset from an earlier cell
            ("echo -${nov/x/y}-\necho status=$?\nset -o nounset", "--\nstatus=0\n"),
        ],
    )
    .await;
    exits(live, "echo -${nov/x/y}-\necho never", 127, "").await;
    oks(
        live,
        &[
            ("set +o nounset\nw='[\\f]'\nx='\\f'\ngl='*'\nvs='a*b'", ""),
            ("echo ${w/\"$x\"/_}\necho ${w/$x/_}\necho ${w/\\f/_}\necho ${w/\\\\f/_}\necho ${vs//\"$gl\"/-}\necho ${vs//$gl/-}", "[_]\n[\\_]\n[\\_]\n[_]\na-b\n-\n"),
            // var-op-slice.test.sh
            ("foo=abcdefg\ni=1\nia=(3 4 5)", ""),
            ("echo ${foo:1:3}\necho _${foo:100:3}\necho _${foo:3:100}\necho ${foo: -4:3}\necho ${foo:3:-1} ${foo: 3: -2} ${foo:3 :-3 }\necho ${foo: i+4-2 : i + 2}\necho ${foo:$ia:2}", "bcd\n_\n_defg\ndef\ndef de d\ndef\nde\n"),
            // var-op-len.test.sh and the UTF-8 slices, in a locale one cell sets
            ("export LC_ALL=C.UTF-8\nu=$'_\\u03bc_'\nm='--μ--'\nn=abcd-μ-", ""),
            ("echo ${#u} ${m:1:3} ${n: -4:3} ${n: -5: -3}", "3 -μ- d-μ cd\n"),
        ],
    )
    .await;
    live.shutdown("k").await;
}

/// The Oils spec test `spec/var-ref.test.sh`, split across cells: `${!ref}`
/// to a name, a positional parameter, `@`, `*` and `?` set by an earlier
/// cell, `${!a[@]}` keys, `${!ref:=default}` assigning through the
/// reference for the next cell, `${!ref:?msg}` failing (127, as under
/// `bash -c`).
pub(super) async fn oils_var_ref_cases(live: &mut Live) {
    spec_kernel(live, "varref").await;
    oks(
        live,
        &[
            // "var ref ${!a}", "${!ref-default}": the names of one cell, followed in the next
            ("a=b\nb=c\nref=x", ""),
            ("echo ref ${!a} ${a}\necho x=${!ref-default}", "ref c b\nx=default\n"),
            ("x=''", ""),
            ("echo x=${!ref-default}\nx=foo", "x=\n"),
            ("echo x=${!ref-default}", "x=foo\n"),
            // "comparison to ${!array[@]} keys (similar SYNTAX)"
            ("declare -a ka=(xq yq)\ndeclare -A KA=([A]=a [B]=b)", ""),
            ("argv.py \"${!ka[@]}\"\necho a_keys=$?\nargv.py \"${!ka}\"\necho a_nobrackets=$?\nargv.py $(printf '%s\\n' ${!KA[@]} | sort)\necho A_keys=$?", "['0', '1']\na_keys=0\n['']\na_nobrackets=0\n['A', 'B']\nA_keys=0\n"),
            // "var ref: 1, @, *": the positional parameters of an earlier cell
            ("set -- x y", ""),
            ("ref=1; argv.py \"${!ref}\"\nref=@; argv.py \"${!ref}\"\nref=*; argv.py \"${!ref}\"", "['x']\n['x', 'y']\n['x y']\n"),
            // "var ref to $? with '?'": the function of one cell, called in the next
            ("myfunc() {\n  local ref=$1\n  echo ${!ref}\n}", ""),
            ("myfunc FUNCNAME\nmyfunc '?'", "myfunc\n0\n"),
            // "Var ref, then assignment with ${ := }": kept for the next cell
            ("z=zz\nzz=\necho ${!z:=foo}", "foo\n"),
            ("echo ${!z:=bar} $zz", "foo foo\n"),
            // "Var ref, then error with ${ ? }"
            ("w=ww\nww=", ""),
        ],
    )
    .await;
    exits(live, "echo ${!w:?'my message'}\necho done", 127, "").await;
    live.shutdown("k").await;
}

/// The Oils spec tests `spec/sh-options-bash.test.sh` (SHELLOPTS updated,
/// readonly and non-empty; "export SHELLOPTS does cross-process tracing
/// with bash"; the completion stubs) and `spec/sh-options.test.sh`
/// ("Unimplemented options - print, query, set, unset", bash's output), one
/// step a cell: an `export SHELLOPTS` of one cell makes a later `set -x`
/// trace the child shells of the cells after it, until `export -n` (it was
/// lost at the save).
pub(super) async fn oils_shellopts_cases(live: &mut Live) {
    spec_kernel(live, "shopts").await;
    oks(
        live,
        &[
            // sh-options-bash.test.sh "SHELLOPTS is updated when options are changed"
            ("echo $SHELLOPTS | grep -q xtrace\necho $?\nset -x", "1\n"),
            ("echo $SHELLOPTS | grep -q xtrace\necho $?\nset +x", "0\n"),
            ("echo $SHELLOPTS | grep -q xtrace\necho $?", "1\n"),
            // "SHELLOPTS is readonly", "SHELLOPTS and BASHOPTS are non-empty"
            ("SHELLOPTS=x\necho status=$?", "status=1\n"),
            ("if test -v SHELLOPTS; then\n  echo 'shellopts is set'\nfi\nif test -v BASHOPTS; then\n\techo 'bashopts is set'\nfi\necho shellopts ${SHELLOPTS:?} > /dev/null\necho bashopts ${BASHOPTS:?} > /dev/null", "shellopts is set\nbashopts is set\n"),
            // "export SHELLOPTS does cross-process tracing with bash" (the child's
            // trace on its stderr, here the cell's stdout)
            ("export SHELLOPTS", ""),
            ("set -x", ""),
            ("bash -c \"echo 2\" 2>&1\nset +x", "+ echo 2\n2\n"),
            ("bash -c \"echo 3\" 2>&1\nexport -n SHELLOPTS", "3\n"),
            ("set -x\nbash -c \"echo 4\" 2>&1\nset +x", "4\n"),
            // sh-options.test.sh "Unimplemented options - print, query, set, unset"
            // (bash's output), one step a cell
            ("shopt -p xpg_echo\nshopt -q xpg_echo; echo q=$?\n\nshopt -s xpg_echo", "shopt -u xpg_echo\nq=1\n"),
            ("shopt -p xpg_echo\n\nshopt -u xpg_echo", "shopt -s xpg_echo\n"),
            ("shopt -p xpg_echo\necho p=$?  # weird, bash also returns a status", "shopt -u xpg_echo\np=1\n"),
            ("shopt xpg_echo >/dev/null\necho noflag=$?\n\nshopt -o errexit >/dev/null\necho set=$?", "noflag=1\nset=1\n"),
            // sh-options-bash.test.sh "shopt -s progcomp hostcomplete are stubs"
            ("shopt -s progcomp hostcomplete\necho status=$?", "status=0\n"),
            ("shopt -u progcomp hostcomplete\necho status=$?", "status=0\n"),
        ],
    )
    .await;
    live.shutdown("k").await;
}

/// The Oils spec test `spec/builtin-echo.test.sh`: dashes, backslashes, `-e`
/// escapes (C, whitespace, NUL, hex, octal, unicode, `\c`) as exact bytes,
/// flags kept in a variable of an earlier cell, a directory of an earlier
/// cell as a redirect target.
pub(super) async fn oils_echo_cases(live: &mut Live) {
    spec_kernel(live, "echo").await;
    oks(
        live,
        &[
            // "echo dashes", "echo backslashes", "echo -e backslashes"
            ("echo -\necho --\necho ---", "-\n--\n---\n"),
            ("echo \\\\\necho '\\'\necho '\\\\'\necho \"\\\\\"", "\\\n\\\n\\\\\n\\\n"),
            ("echo -e \\\\\necho -e '\\'\necho -e '\\\\'\necho -e \"\\\\\"\necho\n\necho -e '\\\nline2'", "\\\n\\\n\\\n\\\n\n\\\nline2\n"),
            // "echo -en", "echo -ez (invalid flag)", the flags of one cell used in the next
            ("echo -en 'abc\\ndef\\n'\necho -ez 'abc\\n'\nflags='-e'", "abc\ndef\n-ez abc\\n\n"),
            ("echo $flags 'foo\nbar'\necho $flags 'foo\\\nbar'\necho $flags xy  'ab\\cde'  'zzz'", "foo\nbar\nfoo\\\nbar\nxy ab"),
            // C, whitespace, NUL, hex, octal and unicode escapes (exact bytes)
            ("echo -e '\\a\\b\\d\\e\\f'\necho -e '\\n\\r\\t\\v'\necho -e 'ab\\0cd'", "\u{7}\u{8}\\d\u{1b}\u{c}\n\n\u{d}\t\u{b}\nab\u{0}cd\n"),
            ("echo -e 'abcd\\x65f'\necho $flags 'abcd\\044e'\necho $flags 'abcd\\u0065f'\necho $flags 'abcd\\U00000065f'", "abcdef\nabcd$e\nabcdef\nabcdef\n"),
            ("echo -en '\\03777' | od -A n -t x1 | sed 's/ \\+/ /g'\necho -en '\\04000' | od -A n -t x1 | sed 's/ \\+/ /g'\necho -en 'abcd\\x6' | od -A n -c | sed 's/ \\+/ /g'\necho -e '\\x' '\\xg' | od -A n -c | sed 's/ \\+/ /g'", " ff 37\n 00 30\n a b c d 006\n \\ x \\ x g \\n\n"),
            ("echo -en '\\0' '\\1' '\\8' | od -A n -c | sed 's/ \\+/ /g'", " \\0 \\ 1 \\ 8\n"),
            // "echo to redirected directory is an error": the directory of one cell
            ("mkdir -p dir", ""),
            ("echo foo > ./dir\necho status=$?\nprintf foo > ./dir\necho status=$?", "status=1\nstatus=1\n"),
        ],
    )
    .await;
    live.shutdown("k").await;
}

/// The Oils spec test `spec/tilde.test.sh`, split across cells: `~` in
/// assignments, `readonly`, redirects, `${x:-~}`, `${x//~/~root}`,
/// `foo:~` and array elements expands to the `HOME` an earlier cell set.
pub(super) async fn oils_tilde_cases(live: &mut Live) {
    spec_kernel(live, "tilde").await;
    oks(
        live,
        &[
            // "~ expansion in assignment", "~ expansion in readonly assignment",
            // "No ~ expansion in dynamic assignment": a HOME one cell sets
            ("HOME=/home/bob", ""),
            ("a=~/src\necho $a\nreadonly const=~/src\necho $const", "/home/bob/src\n/home/bob/src\n"),
            ("binding='const2=~/src'\nreadonly \"$binding\"\necho $const2", "~/src\n"),
            ("echo $a $const $const2\necho x=~", "/home/bob/src /home/bob/src ~/src\nx=/home/bob\n"),
            // "tilde expansion of word after redirect", "other user"
            ("HOME=$TMP", ""),
            ("echo hi > ~/tilde1.txt", ""),
            ("cat $HOME/tilde1.txt | wc -c\necho ~nonexistent", "3\n~nonexistent\n"),
            // "${undef:-~}", "${x//~/~root}", "x=foo:~ has tilde expansion",
            // "a[x]=foo:~ has tilde expansion"
            ("HOME=/home/bar", ""),
            ("echo ${undef:-~}\necho ${HOME:+~/z}\necho \"${undef:-~}\"\necho ${undef:-\"~\"}", "/home/bar\n/home/bar/z\n~\n~\n"),
            ("x=~\necho ${x//~/~root}\necho ${HOME//~/~root}\nx=[$HOME]\necho ${x//~/~root}", "/root\n/root\n[/root]\n"),
            ("x=foo:~\necho $x\necho \"$x\"\nx='foo:~'\necho $x\nx=foo:~,\necho $x\nx=~:foo\necho $x\necho foo:~", "foo:/home/bar\nfoo:/home/bar\nfoo:~\nfoo:~,\n/home/bar:foo\nfoo:~\n"),
            ("declare -a ta\nta[0]=foo:~\ndeclare -A TA\nTA['x']=foo:~", ""),
            ("echo ${ta[0]}\necho ${TA['x']}", "foo:/home/bar\nfoo:/home/bar\n"),
        ],
    )
    .await;
    live.shutdown("k").await;
}

/// The Oils spec test `spec/array-sparse.test.sh`, split across cells: a
/// sparse array keeps its indices from cell to cell (`declare -p`), also
/// past 2^62 and after `unset -v 'a[i]'`, `+=` and negative indices.
pub(super) async fn oils_array_sparse_cases(live: &mut Live) {
    spec_kernel(live, "sparse").await;
    oks(
        live,
        &[
            // "test length", "test \"declare -p sp\"": sparse arrays kept with their indices
            ("sp=(x y z)\n\nsp[5]=z", ""),
            ("echo len=${#sp[@]}\n\nsp[10]=z", "len=4\n"),
            ("echo len=${#sp[@]}", "len=5\n"),
            ("a0=()\na1=(1)\na2=(1 2)\na=(x y z w)\na[500]=100\na[1000]=100", ""),
            ("typeset -p a0 a1 a2 a", "declare -a a0=()\ndeclare -a a1=([0]=\"1\")\ndeclare -a a2=([0]=\"1\" [1]=\"2\")\ndeclare -a a=([0]=\"x\" [1]=\"y\" [2]=\"z\" [3]=\"w\" [500]=\"100\" [1000]=\"100\")\n"),
            // "+=", "a[i]=v"
            ("sp1[10]=a\nsp1[20]=b\nsp1[99]=c", ""),
            ("typeset -p sp1 | sed 's/\"//g'\nsp1+=(1 2 3)", "declare -a sp1=([10]=a [20]=b [99]=c)\n"),
            ("typeset -p sp1 | sed 's/\"//g'\nunset sp1", "declare -a sp1=([10]=a [20]=b [99]=c [100]=1 [101]=2 [102]=3)\n"),
            ("sp1[10]=a\nsp1[20]=b\nsp1[30]=c", ""),
            ("typeset -p sp1 | sed 's/\"//g'\nsp1[10]=X\nsp1[25]=Y\nsp1[90]=Z", "declare -a sp1=([10]=a [20]=b [30]=c)\n"),
            ("typeset -p sp1 | sed 's/\"//g'\nunset sp1", "declare -a sp1=([10]=X [20]=b [25]=Y [30]=c [90]=Z)\n"),
            // "Negative index with a[i]=v", "a[i]=v with BigInt"
            ("sp1[9]=x", ""),
            ("typeset -p sp1 | sed 's/\"//g'\nsp1[-1]=A\nsp1[-4]=B\nsp1[-8]=C\nsp1[-10]=D", "declare -a sp1=([9]=x)\n"),
            ("typeset -p sp1 | sed 's/\"//g'\nunset sp1\nsp1[1]=x\nsp1[5]=y\nsp1[9]=z", "declare -a sp1=([0]=D [2]=C [6]=B [9]=A)\n"),
            ("echo \"${#sp1[@]}\"\nsp1[0x7FFFFFFFFFFFFFFF]=a", "3\n"),
            ("echo \"${#sp1[@]}\"\nsp1[0x7FFFFFFFFFFFFFFE]=b\necho \"${#sp1[@]}\"", "4\n5\n"),
            ("sp1[0x7FFFFFFFFFFFFFFD]=c\necho \"${#sp1[@]}\"\necho \"${!sp1[@]}\"", "6\n1 5 9 9223372036854775805 9223372036854775806 9223372036854775807\n"),
            // "unset -v a[i]", "unset -v a[i] for max index"
            ("a=(1 2 3 4 5 6 7 8 9)\nunset -v \"a[1]\"", ""),
            ("declare -p a\nunset -v \"a[9]\"\nunset -v \"a[0]\"", "declare -a a=([0]=\"1\" [2]=\"3\" [3]=\"4\" [4]=\"5\" [5]=\"6\" [6]=\"7\" [7]=\"8\" [8]=\"9\")\n"),
            ("declare -p a", "declare -a a=([2]=\"3\" [3]=\"4\" [4]=\"5\" [5]=\"6\" [6]=\"7\" [7]=\"8\" [8]=\"9\")\n"),
            ("a=({1..9})\nunset -v 'a[-1]'", ""),
            ("a[-1]=x\ndeclare -p a\nunset -v 'a[-1]'", "declare -a a=([0]=\"1\" [1]=\"2\" [2]=\"3\" [3]=\"4\" [4]=\"5\" [5]=\"6\" [6]=\"7\" [7]=\"x\")\n"),
            ("a[-1]=x\ndeclare -p a", "declare -a a=([0]=\"1\" [1]=\"2\" [2]=\"3\" [3]=\"4\" [4]=\"5\" [5]=\"6\" [6]=\"x\")\n"),
        ],
    )
    .await;
    live.shutdown("k").await;
}

/// The Oils spec test `spec/serialize.test.sh`, split across cells:
/// `printf %q`, `set`, `typeset -p` and `${v@Q}` of values (newlines,
/// quotes, `\xff`, UTF-8 and broken UTF-8) an earlier cell assigned, with
/// bash's quoting, and `printf %q` round trips through `eval`. (The
/// spec's `set | grep zz` is anchored, `grep '^zz='`: unanchored it found
/// the code itself in the wrapper's variable, and on a CI machine whose
/// random `CONTAINER_NAME` held "zz", that variable too.)
pub(super) async fn oils_serialize_cases(live: &mut Live) {
    spec_kernel(live, "serialize").await;
    oks(
        live,
        &[
            // the values of one cell (in the UTF-8 locale it sets), quoted in the next
            ("export LC_ALL=C.UTF-8\nnewline=$'one\\ntwo'\nspaces='one two'\nquotes=\\'\\\"\nunprintable=$'\\xff'\nunicode=$'\\xce\\xbc'\nzz=$'one\\ntwo'\nzu=$'one\\ntwo \\u03bc'", ""),
            // "printf %q newline", "printf %q spaces", "printf %q quotes"
            ("printf '%q\\n' \"$newline\"\n\nquoted=\"$(printf '%q\\n' \"$newline\")\"\nrestored=$(eval \"echo $quoted\")\ntest \"$newline\" = \"$restored\" && echo roundtrip-ok", "$'one\\ntwo'\nroundtrip-ok\n"),
            ("printf '%q\\n' \"$spaces\"", "one\\ two\n"),
            ("printf '%q\\n' \"$quotes\"\n\nquoted=\"$(printf '%q\\n' \"$quotes\")\"\nrestored=$(eval \"echo $quoted\")\ntest \"$quotes\" = \"$restored\" && echo roundtrip-ok", "\\'\\\"\nroundtrip-ok\n"),
            // "printf %q unprintable", "printf %q unicode", "printf %q invalid unicode"
            ("printf '%q\\n' \"$unprintable\"\nprintf '%q\\n' \"$unicode\"", "$'\\377'\nμ\n"),
            ("unicode=$'\\xce'\nprintf '%q\\n' \"$unicode\"\n\nunicode=$'\\xce\\xce\\xbc'\nprintf '%q\\n' \"$unicode\"\n\nunicode=$'\\xce\\xbc\\xce'\nprintf '%q\\n' \"$unicode\"\n\nunicode=$'\\xcea'\nprintf '%q\\n' \"$unicode\"\nunicode=$'a\\xce'\nprintf '%q\\n' \"$unicode\"", "$'\\316'\n$'\\316μ'\n$'μ\\316'\n$'\\316a'\n$'a\\316'\n"),
            // "set", "declare", "${var@Q}"
            ("set | grep '^zz='", "zz=$'one\\ntwo'\n"),
            ("typeset | grep '^zz='\ntypeset -p zz", "zz=$'one\\ntwo'\ndeclare -- zz=$'one\\ntwo'\n"),
            ("echo ${zu@Q}\necho \"${zu@Q}\"", "$'one\\ntwo μ'\n$'one\\ntwo μ'\n"),
        ],
    )
    .await;
    live.shutdown("k").await;
}

/// The Oils spec tests `spec/print-source-code.test.sh` and
/// `spec/func-parsing.test.sh`, split across cells: functions of each shape
/// (ksh `function f {`, a subshell body, nested definitions, names with
/// `.`, `=`, `!`, `-`, a `}` token, a newline after `( )`) defined in one
/// cell are called, or printed by `typeset -f` and run by a new bash, in
/// the next.
pub(super) async fn oils_function_source_cases(live: &mut Live) {
    spec_kernel(live, "funcs").await;
    oks(
        live,
        &[
            // print-source-code.test.sh: a function of one cell, printed by `typeset -f`
            // in the next and run by a new shell ($SH, set here)
            ("SH=bash\n: prefix; myfunc() { echo serialized; }", ""),
            ("code=$(typeset -f myfunc)\n\n$SH -c \"$code; myfunc\"", "serialized\n"),
            ("unset -f myfunc\n: prefix; function myfunc {\n\techo serialized\n}", ""),
            ("code=$(typeset -f myfunc)\n\n$SH -c \"$code; myfunc\"", "serialized\n"),
            ("outer() {\n  echo outer\n  : prefix; inner() {\n    echo inner\n  }\n}", ""),
            ("code=$(typeset -f outer)\n\n$SH -c \"$code; outer; inner\"", "outer\ninner\n"),
            ("f() ( echo 'subshell body' )", ""),
            ("code=$(typeset -f f)\n\n$SH -c \"$code; f\"", "subshell body\n"),
            // func-parsing.test.sh: functions of each shape, defined in one cell and
            // called in the next
            ("fun ( ) { echo in-func; }", ""),
            ("fun", "in-func\n"),
            ("i=0\nj=0\ninc() { i=$((i+5)); }\ninc_subshell() ( j=$((j+5)); )", ""),
            ("inc\ninc_subshell\necho $i $j", "5 0\n"),
            ("rbrace() { echo }; }", ""),
            ("rbrace", "}\n"),
            ("func-name.ext ( ) { echo func-name.ext; }\nfunc-name=ext ( ) { echo func-name=ext; }", ""),
            ("func-name.ext\nfunc-name=ext", "func-name.ext\nfunc-name=ext\n"),
            ("foo!bar() { ls ; }\nfoo-bar() { ls ; }", ""),
            ("declare -F 'foo!bar' foo-bar", "foo!bar\nfoo-bar\n"),
            ("echo hi; fun2 ( )\n{ echo in-func; }", "hi\n"),
            ("fun2", "in-func\n"),
            ("fun3() {\n  nested_func() { echo nested; }\n  nested_func\n}", ""),
            ("fun3", "nested\n"),
            ("nested_func", "nested\n"),
        ],
    )
    .await;
    live.shutdown("k").await;
}

/// The Oils spec test `spec/regex.test.sh`: `[[ =~ ]]` with `BASH_REMATCH`
/// (read in the cell of the match), quoted and unquoted patterns (status 1
/// where bash does not match a quoted one, 2 for a malformed one), and a
/// pattern kept in a variable of an earlier cell.
pub(super) async fn oils_regex_cases(live: &mut Live) {
    spec_kernel(live, "regex").await;
    oks(
        live,
        &[
            // "BASH_REMATCH" (in the cell of the match: README, "Shell kernels")
            ("[[ foo123 =~ ([a-z]+)([0-9]+) ]]\necho status=$?\nargv.py \"${BASH_REMATCH[@]}\"\n\n[[ failed =~ ([a-z]+)([0-9]+) ]]\necho status=$?\nargv.py \"${BASH_REMATCH[@]}\"  # not cleared!", "status=0\n['foo123', 'foo', '123']\nstatus=1\n[]\n"),
            // "Match is unanchored at both ends", "Failed match", "Regex quoted with \\"
            ("[[ 'bar' =~ a ]] && echo true\n[[ 'a b' =~ ^(a\\ b)$ ]] && echo true", "true\ntrue\n"),
        ],
    )
    .await;
    exits(live, "[[ 'bar' =~ X ]] && echo true", 1, "").await;
    oks(
        live,
        &[
            // "Regex quoted with single quotes", "... double quotes" (status 1), then
            // "Fix single quotes by storing in variable": the pattern of one cell
        ],
    )
    .await;
    exits(live, "[[ 'a b' =~ '^(a b)$' ]] && echo true", 1, "").await;
    exits(live, "[[ 'a b' =~ \"^(a b)$\" ]] && echo true", 1, "").await;
    oks(
        live,
        &[
            ("pat='^(a b)$'\npat2=\"^(a b)$\"\npat3='\\[\\]'", ""),
            ("[[ 'a b' =~ $pat ]] && echo true\n[[ 'a b' =~ $pat2 ]] && echo true\n[[ '[]' =~ $pat3 ]] && echo true", "true\ntrue\ntrue\n"),
        ],
    )
    .await;
    exits(live, "[[ 'a b' =~ \"$pat2\" ]] && echo true", 1, "").await;
    oks(
        live,
        &[
            // "Mixing quoted and unquoted parts", "Omitting ( )", "Regex with |",
            // "Regex to match literal brackets []", "Malformed regex" (status 2)
            ("[[ 'a b' =~ 'a 'b ]] && echo true\n[[ \"a b\" =~ \"a \"'b' ]] && echo true\n[[ '^a b$' == ^a\\ b$ ]] && echo true\n[[ 'bar' =~ foo|bar ]] && echo true\n[[ '[]' =~ \\[\\] ]] && echo true", "true\ntrue\ntrue\ntrue\ntrue\n"),
        ],
    )
    .await;
    exits(live, "[[ 'a b' =~ ^)a\\ b($ ]] && echo true", 2, "").await;
    live.shutdown("k").await;
}

/// The Oils spec test `spec/introspect.test.sh`, split across cells:
/// `FUNCNAME` and its operators in functions of an earlier cell,
/// `$((BASH_LINENO))` the line of the call in the calling cell, and
/// `"$FUNCNAME"` at top level under `set -u` (127, as under `bash -c`).
pub(super) async fn oils_introspect_cases(live: &mut Live) {
    spec_kernel(live, "introspect").await;
    oks(
        live,
        &[
            // "${FUNCNAME[@]} array": the functions of one cell, called in the next
            ("g() {\n  argv.py \"${FUNCNAME[@]}\"\n}\nf() {\n  argv.py \"${FUNCNAME[@]}\"\n  g\n  argv.py \"${FUNCNAME[@]}\"\n}", ""),
            ("f", "['f']\n['g', 'f']\n['f']\n"),
            // "${FUNCNAME} with prefix/suffix operators", "operators on FUNCNAME"
            ("check() {\n  argv.py \"${FUNCNAME}\"\n  argv.py \"${#FUNCNAME}\"\n  argv.py \"${FUNCNAME::1}\"\n  argv.py \"${FUNCNAME:1}\"\n}", ""),
            ("check", "['check']\n['5']\n['c']\n['heck']\n"),
            // "var ref to $? with '?'" (var-ref.test.sh) and "$((BASH_LINENO))": the
            // line of the call, in the cell that calls
            ("lcheck() {\n  echo $((BASH_LINENO))\n}", ""),
            ("\n\n\nlcheck", "4\n"),
            // "${FUNCNAME} and \"set -u\" (OSH regression)"
        ],
    )
    .await;
    exits(live, "set -u\nargv.py \"$FUNCNAME\"", 127, "").await;
    live.shutdown("k").await;
}

/// The Oils spec test `spec/vars-special.test.sh`, split across cells:
/// `PWD` after a cell's `cd`, `UID`/`EUID`/`PPID` readonly, `HOSTNAME`
/// and `OSTYPE` for a child, `$?` and `$#` as the cell before left them,
/// `$$` and `BASHPID` in subshells, `PIPESTATUS`, and `$_` within a cell.
pub(super) async fn oils_vars_special_cases(live: &mut Live) {
    spec_kernel(live, "vars").await;
    oks(
        live,
        &[
            ("SH=bash", ""),
            // "$PWD is set", "$PWD is not only set, but exported": after a cell's `cd`
            ("mkdir -p sub && cd sub", ""),
            ("echo $PWD | grep -q /sub\necho status=$?\nenv | grep -q PWD\necho status=$?\ncd ..", "status=0\nstatus=0\n"),
            // "UID EUID PPID can't be changed", "HOSTNAME OSTYPE can be changed"
            ("{\n  UID=xx $SH -c 'echo uid=$UID'\n\n  EUID=xx $SH -c 'echo euid=$EUID'\n\n  PPID=xx $SH -c 'echo ppid=$PPID'\n\n} > out.txt", ""),
            ("grep '=xx' out.txt\necho status=$?", "status=1\n"),
            ("HOSTNAME=x $SH -c 'echo hostname=$HOSTNAME'\nOSTYPE=x $SH -c 'echo ostype=$OSTYPE'\necho", "hostname=x\nostype=x\n\n"),
            // "$?", "$#": the status and the parameters of the cell before
        ],
    )
    .await;
    exits(
        live,
        "echo $?  # starts out as 0\nsh -c 'exit 33'",
        33,
        "0\n",
    )
    .await;
    oks(
        live,
        &[
            ("echo $?\nset -- 1 2 3 4", "33\n"),
            ("echo $#", "4\n"),
            // "$$ doesn't change with subshell or command sub", "$BASHPID DOES change
            // with subshell and command sub" (each ends with `exit 3`)
        ],
    )
    .await;
    exits(live, "set -o errexit\ndie() {\n  echo 1>&2 \"$@\"; exit 1\n}\nparent=$$\ntest -n \"$parent\" || die \"empty PID in parent\"\n( child=$$\n  test -n \"$child\" || die \"empty PID in subshell\"\n  test \"$parent\" = \"$child\" || die \"should be equal: $parent != $child\"\n  echo 'subshell OK'\n)\necho $( child=$$\n        test -n \"$child\" || die \"empty PID in command sub\"\n        test \"$parent\" = \"$child\" || die \"should be equal: $parent != $child\"\n        echo 'command sub OK'\n      )\nexit 3  # make sure we got here", 3, "subshell OK\ncommand sub OK\n").await;
    exits(live, "parent=$BASHPID\ntest -n \"$parent\" || die \"empty BASHPID in parent\"\n( child=$BASHPID\n  test -n \"$child\" || die \"empty BASHPID in subshell\"\n  test \"$parent\" != \"$child\" || die \"should not be equal: $parent = $child\"\n  echo 'subshell OK'\n)\necho $( child=$BASHPID\n        test -n \"$child\" || die \"empty BASHPID in command sub\"\n        test \"$parent\" != \"$child\" ||\n          die \"should not be equal: $parent = $child\"\n        echo 'command sub OK'\n      )\nexit 3  # make sure we got here", 3, "subshell OK\ncommand sub OK\n").await;
    oks(
        live,
        &[
            // "$PIPESTATUS" (in the cell of the pipeline), "$_ with simple command and
            // evaluation", "$_ and ${_}", "$_ with && and ||", "$_ is not reset with ((
            // and [[", "$_ with loop" (`$_` within a cell: README, "Shell kernels")
            ("set +o errexit\necho hi | sh -c 'cat; exit 33' | wc -l >/dev/null\nargv.py \"${PIPESTATUS[@]}\"", "['0', '33', '0']\n"),
            ("name=world\necho \"hi $name\"\necho \"$_\"\n_var=value\n\n: 42\necho $_ $_var ${_}var\n\n: 'foo'\"bar\"\necho $_", "hi world\nhi world\n42 value 42var\nfoobar\n"),
            ("echo hi && echo last=$_\necho and=$_\n\necho hi || echo last=$_\necho or=$_", "hi\nlast=hi\nand=last=hi\nhi\nor=hi\n"),
            ("echo simple\n(( a = 2 + 3 ))\necho \"(( $_\"\n\n[[ a == *.py ]]\necho \"[[ $_\"", "simple\n(( simple\n[[ (( simple\n"),
            ("echo init\necho begin=$_\nfor x in 1 2 3; do\n  echo prev=$_\ndone", "init\nbegin=init\nprev=begin=init\nprev=prev=begin=init\nprev=prev=prev=begin=init\n"),
        ],
    )
    .await;
    live.shutdown("k").await;
}

/// The Oils spec tests `spec/vars-special.test.sh` ("$LINENO is the current
/// line, not line of function call") and `spec/introspect.test.sh`
/// ("${BASH_LINENO[@]} is a stack of line numbers for function calls"),
/// split across cells: in a function of an earlier cell, `$LINENO` and
/// the line of a call it makes are the lines of the cell that defined it,
/// as when each cell is a script one shell reads. tether restores a
/// function from the snapshot, where `declare -f` wrote it: its lines are
/// the snapshot's (88 for 6). Product bug, ignored.
pub(super) async fn oils_function_line_numbers(live: &mut Live) {
    spec_kernel(live, "lineno").await;
    oks(
        live,
        &[
            // vars-special.test.sh "$LINENO is the current line, not line of function
            // call": the functions of one cell, called in the next
            ("echo $LINENO  # first line\ng() {\n  argv.py $LINENO  # line 3\n}\nf() {\n  argv.py $LINENO  # line 6\n  g\n  argv.py $LINENO  # line 8\n}", "1\n"),
            ("f", "['6']\n['3']\n['8']\n"),
            // introspect.test.sh "${BASH_LINENO[@]} is a stack of line numbers for
            // function calls" (`f` called on line 2 of its cell)
            ("g() {\n  argv.py G \"${BASH_LINENO[@]}\"\n}\nf() {\n  argv.py 'begin F' \"${BASH_LINENO[@]}\"\n  g  # line 6\n  argv.py 'end F' \"${BASH_LINENO[@]}\"\n}", ""),
            ("argv.py ${BASH_LINENO[@]}\nf  # line 2", "[]\n['begin F', '2']\n['G', '6', '2']\n['end F', '2']\n"),
        ],
    )
    .await;
    live.shutdown("k").await;
}
