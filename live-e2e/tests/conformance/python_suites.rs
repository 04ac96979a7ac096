//! Python cases taken from the public test suites of jupyter_kernel_test
//! (`test_ipykernel.py`, the samples it runs against ipykernel), ipykernel
//! (`tests/test_kernel.py`), IPython (`IPython/core/tests/test_displayhook.py`,
//! `IPython/core/tests/test_interactiveshell.py`), e2b code-interpreter
//! (`python/tests/sync/*.py`), OpenHands (`tests/runtime/test_ipython.py`),
//! pexpect (`tests/test_replwrap.py`), LangChain experimental
//! (`tests/unit_tests/python/test_python_{1,2}.py`), smolagents
//! (`tests/test_local_python_executor.py`) and CPython
//! (`Lib/test/test_sys.py`, `Lib/test/test_code_module.py`,
//! `test_traceback.py`, `test_future_stmt/test_future.py`,
//! `test_warnings`, `test_exceptions.py`, `test_generators.py`,
//! `test_asyncgen.py`, `test_contextlib.py`, `test_pprint.py`,
//! `test_print.py`, `test_logging.py`, `test_weakref.py`,
//! `test_importlib/test_api.py`), IPython's `test_interactiveshell.py` run_cell cases,
//! ipykernel's `test_async.py` and `test_message_spec.py`, the Jupyter
//! notebook's interrupt test and nbclient's test notebooks
//! (`tests/files/*.ipynb`), written in tether's shape: each case names
//! its source; expectations are exact where the source checks a substring.

use super::{err, py};
use std::time::Duration;
use tether_core::protocol::{CellOutcome, Lang};
use tether_live::harness::{CellRun, Live};

fn show(run: &CellRun) -> String {
    format!("{run:?}\nstderr: {}", err(run))
}

/// Runs `code` in the Python kernel and checks it resolved `ok` with
/// exactly `stdout` and nothing on stderr.
async fn shows(live: &mut Live, code: &str, stdout: &str) {
    let run = py(live, code).await;
    assert_eq!(run.outcome, CellOutcome::Ok, "{code:?}: {}", show(&run));
    assert_eq!(run.out(), stdout, "{code:?}: {}", show(&run));
    assert_eq!(err(&run), "", "{code:?}: {}", show(&run));
}

/// Runs `code` and checks that it failed with an exception whose last
/// traceback line is `last`.
async fn raises(live: &mut Live, code: &str, last: &str) -> CellRun {
    let run = py(live, code).await;
    assert!(
        matches!(run.outcome, CellOutcome::Error { .. }),
        "{code:?}: {}",
        show(&run)
    );
    assert_eq!(
        err(&run).lines().last(),
        Some(last),
        "{code:?}: {}",
        show(&run)
    );
    run
}

/// jupyter_kernel_test's samples for ipykernel and ipykernel's own
/// `tests/test_kernel.py`.
pub(super) async fn jupyter_kernel_cases(live: &mut Live) {
    // code_hello_world, code_stderr (test_ipykernel.py); test_simple_print.
    shows(live, "print('hello, world')", "hello, world\n").await;
    shows(live, "print('hi')", "hi\n").await;
    let run = py(live, "import sys; print('test', file=sys.stderr)").await;
    assert_eq!((run.out(), err(&run)), (String::new(), "test\n".into()));
    // code_execute_result: the value of the last expression is shown.
    shows(live, "1+2+3", "6\n").await;
    shows(live, "[n*n for n in range(1, 4)]", "[1, 4, 9]\n").await;
    // code_generate_error: a bare `raise`.
    raises(
        live,
        "raise",
        "RuntimeError: No active exception to reraise",
    )
    .await;
    // complete_code_samples run; the unterminated string of
    // incomplete_code_samples and invalid_code_samples are syntax errors
    // (a cell is the whole input: no console waits for more lines). Its
    // other incomplete sample (`def f(x):\n  x*2`) is a whole function.
    shows(live, "1", "1\n").await;
    shows(live, "def f(x):\n  return x*2\n\n\n", "").await;
    shows(live, "f(21)", "42\n").await;
    for bad in ["print('''hello", "import = 7q"] {
        let run = py(live, bad).await;
        assert!(
            matches!(run.outcome, CellOutcome::Error { .. }) && err(&run).contains("Error:"),
            "{bad:?}: {}",
            show(&run)
        );
    }
    shows(live, "f(1)", "2\n").await;
    // test_sys_path: the working directory ('') is on sys.path.
    shows(live, "import sys; '' in sys.path", "True\n").await;
    // The prompt's sys.argv (the tutorial, "Argument Passing": no script
    // given, argv[0] is ''): not the '-c' and code of the bootstrap.
    shows(live, "import sys; sys.argv", "['']\n").await;
    // test_subprocess_print: forked mp.Process children print into the
    // cell; test_subprocess_noprint; test_subprocess_error.
    let run = py(
        live,
        "import multiprocessing as mp\npool = [mp.Process(target=print, args=('hello', i,)) for i in range(5)]\nfor p in pool: p.start()\nfor p in pool: p.join()",
    )
    .await;
    let out = run.out();
    assert_eq!(out.matches("hello").count(), 5, "{}", show(&run));
    for n in 0..5 {
        assert_eq!(out.matches(&n.to_string()).count(), 1, "{}", show(&run));
    }
    shows(
        live,
        "import multiprocessing as mp\npool = [mp.Process(target=range, args=(i,)) for i in range(5)]\nfor p in pool: p.start()\nfor p in pool: p.join()",
        "",
    )
    .await;
    let run = py(
        live,
        "import multiprocessing as mp\np = mp.Process(target=int, args=('hi',))\np.start()\np.join()",
    )
    .await;
    assert_eq!(run.outcome, CellOutcome::Ok, "{}", show(&run));
    assert!(
        run.stdout.is_empty() && err(&run).contains("ValueError"),
        "{}",
        show(&run)
    );
    // test_capture_fd, test_subprocess_peek_at_stream_fileno: what
    // subprocesses write to fd 1 is the cell's stdout. ipykernel sends the
    // value of `os.system(...)` apart (execute_result); here the value is
    // printed after the output, so the second case ends in `;`.
    shows(live, "import os; os.system('echo capsys')", "capsys\n0\n").await;
    shows(
        live,
        "import subprocess, sys; subprocess.run([sys.executable, '-c', 'import os; os.system(\"echo CAP1\"); print(\"CAP2\")'], stderr=sys.stderr);",
        "CAP1\nCAP2\n",
    )
    .await;
    // test_smoke_faulthandler
    shows(
        live,
        "import sys\nimport faulthandler\nimport signal\nfaulthandler.enable()\nif not sys.platform.startswith(\"win32\"):\n    faulthandler.register(signal.SIGTERM)",
        "",
    )
    .await;
    // test_message_order: cells submitted back to back run in order.
    shows(live, "a = 1", "").await;
    for i in 2..12 {
        shows(live, "a += 1\na", &format!("{i}\n")).await;
    }
    // test_interrupt_during_input / test_interrupt_during_pdb_set_trace:
    // the kernel must not hang in input() or pdb. Cells have no stdin, so
    // both return at once (EOFError; pdb quits at EOF) and the next cell
    // (`3 + 4` there) runs.
    let run = py(live, "input()").await;
    assert!(err(&run).contains("EOFError"), "{}", show(&run));
    let run = py(live, "import pdb; pdb.set_trace()").await;
    assert!(err(&run).contains("BdbQuit"), "{}", show(&run));
    shows(live, "3 + 4", "7\n").await;
    // test_print_to_correct_cell_from_thread: ipykernel routes a thread's
    // print to the cell that started the thread. A tether cell's output
    // ends when the cell does: what a leftover thread prints while a
    // later cell runs is that cell's (client/README.md).
    shows(
        live,
        "from threading import Thread, Event\ngo = Event()\ndef target():\n    go.wait()\n    print('from the thread', flush=True)\nt = Thread(target=target)\nt.start()",
        "",
    )
    .await;
    shows(live, "go.set(); t.join()", "from the thread\n").await;
    live.shutdown("py").await;
}

/// The displayed value, as IPython shows it (`test_displayhook.py`), and
/// the REPL-style cases of e2b, OpenHands, pexpect, LangChain and
/// smolagents.
pub(super) async fn display_cases(live: &mut Live) {
    // test_output_displayed / test_output_quiet: a trailing `;` (comments
    // aside) hides the value; one inside a comment does not.
    shows(live, "1+1", "2\n").await;
    shows(live, "1+1 # comment with a semicolon;", "2\n").await;
    shows(live, "1+1\n#commented_out_function();", "2\n").await;
    shows(live, "1+1;", "").await;
    shows(live, "1+1; # comment with a semicolon", "").await;
    shows(live, "1+1;\n#commented_out_function()", "").await;
    // test_underscore_no_overrite_user: a user's `_` wins over the last
    // value; once deleted, `_` is the last value again.
    shows(live, "_ = 42", "").await;
    shows(live, "1+1", "2\n").await;
    shows(live, "print(_)", "42\n").await;
    shows(live, "del _", "").await;
    shows(live, "6+6", "12\n").await;
    shows(live, "_", "12\n").await;
    // e2b test_basic.py, test_statefulness.py, test_streaming.py
    shows(live, "x =1; x", "1\n").await;
    shows(live, "test_stateful = 1", "").await;
    shows(live, "test_stateful+=1; test_stateful", "2\n").await;
    shows(live, "print(1)", "1\n").await;
    let run = py(live, "import sys;print(1, file=sys.stderr)").await;
    assert_eq!((run.out(), err(&run)), (String::new(), "1\n".into()));
    // e2b test_env_vars.py (test_env_vars_override): an environment
    // variable a cell sets is there in the next. A str is shown with its
    // repr, as IPython's Out[] shows it.
    shows(live, "import os; os.environ['RUNTIME_ENV'] = 'value'", "").await;
    shows(live, "import os; os.getenv('RUNTIME_ENV')", "'value'\n").await;
    // OpenHands test_ipython.py: print with an escaped newline; a `with`
    // block's value is not shown.
    shows(live, "print('Hello, `World`!\\n')", "Hello, `World`!\n\n").await;
    let file = format!(
        "{}/test-{}.txt",
        live.side_dir(),
        tether_live::harness::unique()
    );
    live.prepare().await;
    shows(
        live,
        &format!("with open({file:?}, 'w') as f: f.write('Hello, world!')"),
        "",
    )
    .await;
    // pexpect test_python / test_no_change_prompt.
    shows(live, "4+7", "11\n").await;
    shows(live, "for a in range(3): print(a)\n", "0\n1\n2\n").await;
    // LangChain test_python_1.py: test_python_repl, test_function,
    // test_python_ast_repl_multi_statement; test_python_2.py: the print
    // and one-line exception cases.
    shows(live, "foo = 1", "").await;
    shows(live, "bar = foo * 2\nbar", "2\n").await;
    shows(live, "def add(a, b):     return a + b", "").await;
    shows(live, "print(add(1, 2))", "3\n").await;
    shows(
        live,
        "def multiply(a, b):\n    return(5*6)\na = 5\nb = 6\n\nmultiply(a, b)\n",
        "30\n",
    )
    .await;
    shows(
        live,
        "print(\"The dot product is {:d}.\".format(32))",
        "The dot product is 32.\n",
    )
    .await;
    shows(
        live,
        "string = \"racecar\"\nif string == string[::-1]:\n    print(string, \"is a palindrome\")\nelse:\n    print(string, \"is not a palindrome\")",
        "racecar is a palindrome\n",
    )
    .await;
    raises(live, "[1, 2, 3][4]", "IndexError: list index out of range").await;
    // smolagents tests/test_local_python_executor.py: the value of a final
    // expression. Its executor also returns the value of a final
    // assignment (test_evaluate_assign: `x = 3` gives 3); the prompt and
    // IPython show nothing for an assignment, and so does tether.
    shows(live, "x = 3", "").await;
    shows(live, "y = 6\ny + x", "9\n").await;
    shows(
        live,
        "def recur_fibo(n):\n    if n <= 1:\n        return n\n    else:\n        return(recur_fibo(n-1) + recur_fibo(n-2))\nrecur_fibo(6)",
        "8\n",
    )
    .await;
    shows(
        live,
        "'hello'.replace('h', 'o').split('e')",
        "['o', 'llo']\n",
    )
    .await;
    shows(live, "'hello'[1:3][::-1]", "'le'\n").await;
    shows(live, "f = lambda x: x + 2\nf(3)", "5\n").await;
    shows(
        live,
        "for i in range(10):\n    if i == 5:\n        break\ni",
        "5\n",
    )
    .await;
    shows(live, "x = (1, 2, 3)\nx[1]", "2\n").await;
    shows(live, "import math\nstr(math.ceil(149))", "'149'\n").await;
    shows(
        live,
        "class MyClass:\n    \"\"\"A class with a value.\"\"\"\n\n    def __init__(self, value):\n        self.value = value\n\n    def get_value(self):\n        return self.value\n\ninstance = MyClass(42)\nresult = instance.get_value()",
        "",
    )
    .await;
    shows(
        live,
        "result, instance.__doc__",
        "(42, 'A class with a value.')\n",
    )
    .await;
    live.shutdown("py").await;
}

/// How a cell ends: CPython's `sys.exit` rules (`Lib/test/test_sys.py`
/// test_exit), e2b's timeout cases (`test_interrupt.py`,
/// `test_timeout.py`: after a cell runs out of time the next one runs at
/// once) and kernel cases (`test_kernels.py`: kernels do not share names,
/// a restarted one starts empty), and the namespace as `__main__`, which ipykernel's
/// multiprocessing cases rely on (test_subprocess_print: a cell's
/// function given to a Pool is pickled by its `__main__` name).
pub(super) async fn python_process_cases(live: &mut Live) {
    shows(live, "kept = 5", "").await;
    for (code, status, stderr) in [
        ("import sys; sys.exit(0)", 0, ""),
        ("import sys; sys.exit(42)", 42, ""),
        ("raise SystemExit(47)", 47, ""),
        ("import sys; sys.exit()", 0, ""),
        (
            "import sys; sys.stderr.write(\"unflushed,\"); sys.exit(\"message\")",
            1,
            "unflushed,message\n",
        ),
        ("import sys; sys.exit((17, 23))", 1, "(17, 23)\n"),
    ] {
        let run = py(live, code).await;
        assert_eq!(
            run.outcome,
            CellOutcome::Exit { code: status },
            "{code}: {}",
            show(&run)
        );
        assert_eq!(err(&run), stderr, "{code}: {}", show(&run));
    }
    shows(live, "kept", "5\n").await;
    // The builtin `exit()` (site's Quitter, which the README names beside
    // sys.exit) closes sys.stdin before it raises SystemExit, for shells
    // such as IDLE; the interpreter stays, so a later `input()` must still
    // be the no-stdin EOFError that says why (ipykernel test_raw_input's
    // cell, after the exit).
    let run = py(live, "exit()").await;
    assert_eq!(run.outcome, CellOutcome::Exit { code: 0 }, "{}", show(&run));
    raises(
        live,
        "input('prompt> ')",
        "EOFError: EOF when reading a line: tether cells have no stdin (put the data in the code or in a file)",
    )
    .await;
    // e2b test_streaming.py (test_streaming_output): a print reaches the
    // client while the cell still runs (cancelled on seeing it here).
    let run = live
        .run_cancelling_at(
            "py",
            Lang::Python,
            "import time\nprint('ready', flush=True)\ntime.sleep(100)",
            Some(b"ready\n"),
        )
        .await;
    assert_eq!(run.outcome, CellOutcome::Cancelled, "{}", show(&run));
    // OpenHands test_long_output's 5000 lines, and one line of 1 MB, from
    // Python: every byte, in order.
    let run = py(live, "for i in range(1, 5001): print(f'Line {i}')").await;
    let lines: Vec<String> = run.out().lines().map(str::to_owned).collect();
    assert_eq!(
        (lines.len(), lines[0].as_str(), lines[4999].as_str()),
        (5000, "Line 1", "Line 5000")
    );
    let run = py(live, "print('x' * 1_000_000)").await;
    assert_eq!(run.stdout.len(), 1_000_001, "{:?}", run.outcome);
    assert!(run.stdout[..1_000_000].iter().all(|&b| b == b'x'));
    // e2b test_subsequent_execution_works_after_client_timeout,
    // test_execution_after_timeout_is_not_blocked.
    let run = live
        .run_with_timeout(
            "py",
            Lang::Python,
            "import time; time.sleep(30)",
            Duration::from_secs(2),
        )
        .await;
    assert_eq!(run.outcome, CellOutcome::TimedOut, "{}", show(&run));
    shows(live, "1 + 1", "2\n").await;
    shows(live, "x = 1; x", "1\n").await;
    // e2b test_kernels.py: test_independence_of_kernels (another kernel
    // does not see `x`), test_restart_kernel (a restarted one neither).
    let other = live.run("py2", Lang::Python, "x").await;
    assert_eq!(
        other.outcome,
        CellOutcome::Error {
            message: "NameError: name 'x' is not defined".into()
        },
        "{}",
        show(&other)
    );
    live.shutdown("py2").await;
    // The namespace is the `__main__` module: a function a cell defines
    // pickles by name (a Pool's map), and `unittest.main()` finds a cell's
    // tests.
    shows(
        live,
        "import multiprocessing as mp, pickle\ndef square(n):\n    return n * n\nwith mp.get_context('fork').Pool(2) as pool:\n    print(pool.map(square, range(5)))\npickle.loads(pickle.dumps(square)) is square",
        "[0, 1, 4, 9, 16]\nTrue\n",
    )
    .await;
    let run = py(
        live,
        "import unittest\nclass T(unittest.TestCase):\n    def test_one(self):\n        self.assertEqual(1 + 1, 2)\nr = unittest.main(argv=['cell'], exit=False)\nr.result.testsRun",
    )
    .await;
    assert_eq!(run.out(), "1\n", "{}", show(&run));
    assert!(err(&run).contains("Ran 1 test"), "{}", show(&run));
    shows(live, "import sys; sys.modules['__main__'].kept", "5\n").await;
    shows(
        live,
        "import typing\nclass Node:\n    next: 'Node'\ntyping.get_type_hints(Node)['next'] is Node",
        "True\n",
    )
    .await;
    live.shutdown("py").await;
    raises(live, "x", "NameError: name 'x' is not defined").await;
    live.shutdown("py").await;
}

/// IPython's syntax in a Python cell: shell escapes (e2b's `test_bash.py`
/// `!pwd`; IPython's `test_interactiveshell.py` ExitCodeChecks:
/// `_exit_code` after `!exit 0` and `!exit 1`), `name?`, and the magics
/// the suites use (`%pip`, `%cd`, `%env`, `%%writefile`, `%%bash`).
pub(super) async fn shell_escape_cases(live: &mut Live) {
    let cwd = py(live, "import os; print(os.getcwd())").await.out();
    shows(live, "!pwd", &cwd).await;
    shows(live, "!exit 0\n_exit_code", "0\n").await;
    shows(live, "!exit 1\n_exit_code", "1\n").await;
    // `$name` and `{expr}` expand from the namespace; where one cannot,
    // the line goes to the shell as written, as in IPython.
    shows(
        live,
        "name = 'world'\n!echo hello $name {6 * 7}",
        "hello world 42\n",
    )
    .await;
    shows(live, "!echo $HOME | grep -c /", "1\n").await;
    shows(live, "files = !printf 'a\\nb\\n'\nfiles", "['a', 'b']\n").await;
    shows(
        live,
        "def f():\n    n = 3\n    !echo in f $n\nf()",
        "in f 3\n",
    )
    .await;
    // Valid Python is never rewritten.
    shows(live, "x = 2\nprint(x != 3)", "True\n").await;
    // jupyter_kernel_test's code_page_something: `zip?` shows its help.
    let run = py(live, "zip?").await;
    assert!(run.out().contains("class zip"), "{}", show(&run));
    // OpenHands test_ipython_package_install: a missing module fails, then
    // `%pip install` runs this interpreter's pip (offline here: `--version`;
    // the docker image has no pip, and says so).
    raises(
        live,
        "import pymsgbox",
        "ModuleNotFoundError: No module named 'pymsgbox'",
    )
    .await;
    let run = py(live, "%pip --version\nprint('exit', _exit_code)").await;
    let out = run.out();
    assert!(
        (out.starts_with("pip ") && out.ends_with("exit 0\n"))
            || (out == "exit 1\n" && err(&run).contains("No module named pip")),
        "{}",
        show(&run)
    );
    // ... and the install itself, offline: a hand-made wheel into a
    // target directory already on sys.path, where the sandbox has pip;
    // the module imports in the same kernel, no restart.
    live.prepare().await;
    let site = format!(
        "{}/site-{}",
        live.side_dir(),
        tether_live::harness::unique()
    );
    shows(
        live,
        &format!(
            "import importlib.util, os, sys, zipfile\n\
             has_pip = importlib.util.find_spec('pip') is not None\n\
             site = {site:?}\n\
             os.makedirs(site)\n\
             sys.path.insert(0, site)\n\
             wheel = os.path.join(site, 'tethermsgbox-1.0.9-py3-none-any.whl')\n\
             with zipfile.ZipFile(wheel, 'w') as z:\n\
             \x20   z.writestr('tethermsgbox/__init__.py', 'VERSION = \"1.0.9\"\\n')\n\
             \x20   z.writestr('tethermsgbox-1.0.9.dist-info/METADATA', 'Metadata-Version: 2.1\\nName: tethermsgbox\\nVersion: 1.0.9\\n')\n\
             \x20   z.writestr('tethermsgbox-1.0.9.dist-info/WHEEL', 'Wheel-Version: 1.0\\nGenerator: hand\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n')\n\
             \x20   z.writestr('tethermsgbox-1.0.9.dist-info/RECORD', '')"
        ),
        "",
    )
    .await;
    raises(
        live,
        "import tethermsgbox",
        "ModuleNotFoundError: No module named 'tethermsgbox'",
    )
    .await;
    let run = py(
        live,
        "if has_pip:\n    %pip install -q --no-index --no-deps --target $site $wheel\nelse:\n    os.makedirs(os.path.join(site, 'tethermsgbox'))\n    open(os.path.join(site, 'tethermsgbox', '__init__.py'), 'w').write('VERSION = \"1.0.9\"\\n')",
    )
    .await;
    assert_eq!(run.outcome, CellOutcome::Ok, "{}", show(&run));
    shows(
        live,
        "import tethermsgbox; tethermsgbox.VERSION",
        "'1.0.9'\n",
    )
    .await;
    // IPython test_magic.py: test_dirops (`%cd` a quoted path, `%cd -`),
    // test_env_get_set_simple, test_file / test_file_var_expand /
    // test_file_amend / test_file_spaces (`%%writefile`, `%%file`); an
    // unknown magic is a UsageError, one line, as in IPython.
    live.prepare().await;
    let dir = format!(
        "{}/magic dir {}",
        live.side_dir(),
        tether_live::harness::unique()
    );
    let start = py(live, "import os; print(os.getcwd())").await.out();
    shows(live, &format!("os.makedirs({dir:?}); d = {dir:?}"), "").await;
    shows(live, "%cd $d", &format!("{dir}\n")).await;
    shows(live, "%cd -", &start).await;
    shows(live, "%env var val1", "env: var=val1\n").await;
    shows(live, "%env var", "'val1'\n").await;
    shows(
        live,
        "%env var=val2\nos.environ['var']",
        "env: var=val2\n'val2'\n",
    )
    .await;
    let file = format!("{dir}/file name");
    shows(live, &format!("filename = {file:?}"), "").await;
    shows(
        live,
        "%%writefile $filename\nline1\nline2",
        &format!("Writing {file}\n"),
    )
    .await;
    shows(
        live,
        &format!("%%file -a \"{file}\"\nline3\nline4"),
        &format!("Appending to {file}\n"),
    )
    .await;
    shows(
        live,
        "open(filename).read()",
        "'line1\\nline2\\nline3\\nline4\\n'\n",
    )
    .await;
    shows(
        live,
        "%%bash\necho \"$BASH_VERSION\" | grep -c .\nexit 3",
        "1\n",
    )
    .await;
    shows(live, "_exit_code", "3\n").await;
    let run = py(live, "%timeit 1").await;
    assert!(
        matches!(run.outcome, CellOutcome::Error { .. }),
        "{}",
        show(&run)
    );
    assert!(
        err(&run).starts_with("UsageError: Line magic function `%timeit` not found")
            && err(&run).lines().count() == 1,
        "{}",
        show(&run)
    );
    live.shutdown("py").await;
}

/// IPython's `IPython/core/tests/test_interactiveshell.py` (the cells its
/// `run_cell` tests run, with the values they check, shown here as a
/// cell shows them), ipykernel's `tests/test_kernel.py` (test_save_history,
/// test_raw_input, test_print_to_correct_cell_from_child_thread) and the
/// Jupyter notebook's interrupt test (`notebook/tests/selenium/
/// test_interrupt.py`).
pub(super) async fn ipython_shell_cases(live: &mut Live) {
    // test_naked_string_cells: a cell of only a string shows it and keeps
    // it as `_`, also over several lines.
    shows(live, "\"a\"\n", "'a'\n").await;
    shows(live, "_", "'a'\n").await;
    shows(live, "\"\"\"a\nb\"\"\"\n", "'a\\nb'\n").await;
    // test_run_cell_multiline
    shows(live, "x=1\ny=2\nif 1:\n    x += 1\n    y += 1", "").await;
    shows(live, "x, y", "(2, 3)\n").await;
    // test_multiline_string_cells (GH-306)
    shows(live, "tmp=0", "").await;
    shows(live, "tmp=1;\"\"\"a\nb\"\"\"\n", "'a\\nb'\n").await;
    shows(live, "tmp", "1\n").await;
    // test_dont_cache_with_semicolon (GH-307): `1;` and `1;1;` show
    // nothing and do not become `_`; `1;1` shows its last value.
    shows(live, "7", "7\n").await;
    shows(live, "1;", "").await;
    shows(live, "1;1;", "").await;
    shows(live, "_", "7\n").await;
    shows(live, "1;1", "1\n").await;
    // test_syntax_error: `raise = 3` fails before anything of the cell
    // runs.
    raises(
        live,
        "x_before = 1\nraise = 3",
        "SyntaxError: invalid syntax",
    )
    .await;
    raises(
        live,
        "x_before",
        "NameError: name 'x_before' is not defined",
    )
    .await;
    // TestSyntaxErrorTransformer: a plain syntax error, then the next
    // cell shows its value.
    let run = py(live, "1 2 3").await;
    assert!(
        matches!(run.outcome, CellOutcome::Error { .. })
            && err(&run)
                .lines()
                .last()
                .is_some_and(|l| l.starts_with("SyntaxError: invalid syntax")),
        "{}",
        show(&run)
    );
    shows(live, "3456", "3456\n").await;
    // test_magic_names_in_string: a magic's name inside a string is not a
    // magic (the cell is valid Python, never rewritten).
    shows(live, "a = \"\"\"\n%exit\n\"\"\"", "").await;
    shows(live, "a", "'\\n%exit\\n'\n").await;
    // test_trailing_newline: `!(true)` followed by blank lines.
    shows(live, "!(true)\n", "").await;
    shows(live, "!(true)\n\n\n", "").await;
    shows(live, "_exit_code", "0\n").await;
    // test_can_pickle (GH-29): an instance of a class a cell defined.
    shows(
        live,
        "class Mylist(list):\n    def __init__(self,x=[]):\n        list.__init__(self,x)",
        "",
    )
    .await;
    shows(live, "w=Mylist([1,2,3])", "").await;
    shows(
        live,
        "import pickle\nv = pickle.loads(pickle.dumps(w))\ntype(v).__name__, v",
        "('Mylist', [1, 2, 3])\n",
    )
    .await;
    // test_global_ns: a function sees the names of other cells.
    shows(live, "a = 10", "").await;
    shows(live, "def f(x):\n    return x + a", "").await;
    shows(live, "b = f(12)", "").await;
    shows(live, "b", "22\n").await;
    // test_var_expand_local, test_var_expand_self: `!cmd` in a function
    // and a method expands their local names and attributes.
    shows(
        live,
        "def test():\n    lvar = \"ttt\"\n    ret = !echo {lvar}\n    return ret[0]\n",
        "",
    )
    .await;
    shows(live, "test()", "'ttt'\n").await;
    shows(
        live,
        "class cTest:\n  classvar=\"see me\"\n  def test(self):\n    res = !echo Variable: {self.classvar}\n    return res[0]\n",
        "",
    )
    .await;
    shows(live, "cTest().test()", "'Variable: see me'\n").await;
    // test_bad_var_expand: a field that cannot be evaluated (NameError,
    // ZeroDivisionError, SyntaxError) leaves the line as written.
    shows(live, "!echo {asdf}", "{asdf}\n").await;
    shows(live, "!echo {1/0}", "{1/0}\n").await;
    shows(live, "!echo \"{'a':5}\"", "{'a':5}\n").await;
    // test_last_execution_result (GH-10702): a failed assignment leaves
    // the name as it was.
    shows(live, "a = 5; a", "5\n").await;
    raises(
        live,
        "a = x_invalid_id_x",
        "NameError: name 'x_invalid_id_x' is not defined",
    )
    .await;
    shows(live, "a", "5\n").await;
    // ExitCodeChecks.test_exit_code_signal: a command killed by a signal
    // leaves `_exit_code` as minus the signal (SIGALRM, 14).
    shows(
        live,
        "!python3 -c \"import signal, time; signal.setitimer(signal.ITIMER_REAL, 0.1); time.sleep(1)\"\n_exit_code",
        "-14\n",
    )
    .await;
    // test_future_flags (gh-777): a `__future__` import holds for the
    // later cells, as at the prompt.
    shows(live, "from __future__ import barry_as_FLUFL", "").await;
    shows(
        live,
        "prfunc_return_val = 1 <> 2\nprfunc_return_val",
        "True\n",
    )
    .await;
    // test_warning_suppression: the same warning from another cell is
    // shown again (a warning shows once per cell, not once per session);
    // test_deprecation_warning: a DeprecationWarning raised in a cell's
    // function is shown.
    shows(live, "import warnings", "").await;
    for _ in 0..2 {
        let run = py(live, "warnings.warn('asdf')").await;
        assert!(
            run.outcome == CellOutcome::Ok && err(&run).contains("UserWarning: asdf\n"),
            "{}",
            show(&run)
        );
    }
    shows(
        live,
        "def wrn():\n    warnings.warn(\n        \"I AM  A WARNING\",\n        DeprecationWarning\n    )\n",
        "",
    )
    .await;
    for _ in 0..2 {
        let run = py(live, "wrn()").await;
        assert!(
            run.outcome == CellOutcome::Ok
                && err(&run).contains("DeprecationWarning: I AM  A WARNING\n"),
            "{}",
            show(&run)
        );
    }
    // ipykernel test_raw_input: `input(prompt)` prints the prompt; here
    // it then fails at once (no stdin), with a traceback of the cell's
    // own frames: none of tether's `input` (README, "Errors").
    let run = raises(
        live,
        "print(input(\"prompt> \"))",
        "EOFError: EOF when reading a line: tether cells have no stdin (put the data in the code or in a file)",
    )
    .await;
    let frames: Vec<&str> = std::str::from_utf8(&run.stderr)
        .unwrap()
        .lines()
        .filter(|l| l.trim_start().starts_with("File "))
        .collect();
    assert!(
        run.out() == "prompt> " && frames.len() == 1 && frames[0].contains("File \"<cell "),
        "{}",
        show(&run)
    );
    // ipykernel test_save_history: a cell with a non-ASCII string.
    shows(live, "b=\"abcþ\"", "").await;
    shows(live, "print(b); b", "abcþ\n'abcþ'\n").await;
    // ipykernel test_print_to_correct_cell_from_child_thread: a thread's
    // thread prints without newlines; the cell waits for it here, so all
    // of it is the cell's.
    shows(
        live,
        "from threading import Thread\nfrom time import sleep\n\ndef child_target():\n    for i in range(5):\n        print(i, end='', flush=True)\n        sleep(0.05)\n\ndef parent_target():\n    sleep(0.05)\n    thread = Thread(target=child_target)\n    thread.start()\n    thread.join()\n\nt = Thread(target=parent_target)\nt.start()\nt.join()",
        "01234",
    )
    .await;
    // The notebook's test_interrupt: a loop of sleeps, interrupted; the
    // kernel stays, with the state the loop reached (tether: `cancelled`).
    let run = live
        .run_cancelling_at(
            "py",
            Lang::Python,
            "import time\nfor x in range(300):\n    if x == 2:\n        print('go', flush=True)\n    time.sleep(0.1)",
            Some(b"go\n"),
        )
        .await;
    assert_eq!(run.outcome, CellOutcome::Cancelled, "{}", show(&run));
    shows(live, "2 <= x < 299", "True\n").await;
    live.shutdown("py").await;
}

/// `text` with each cell's number replaced by `N` (`<cell 12>` is
/// `<cell N>`), so a traceback compares whatever cell it came from.
fn any_cell(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("<cell ") {
        out.push_str(&rest[..at + 6]);
        rest = rest[at + 6..].trim_start_matches(|c: char| c.is_ascii_digit());
        out.push('N');
    }
    out.push_str(rest);
    out
}

/// CPython's `Lib/test/test_code_module.py` (what the interactive console
/// prints for a syntax error, an indentation error and chained
/// exceptions), IPython's `tests/test_interactiveshell.py`
/// (test_run_empty_cell, test_run_cell_asyncio_run,
/// test_stream_performance), and ipykernel's `tests/test_async.py`
/// (test_async_interrupt) and `tests/test_message_spec.py`
/// (test_execute_error). The console's file is `<console>`, which has no
/// source to show; a cell's is `<cell N>`, whose lines tracebacks show
/// (README, "Python kernels").
pub(super) async fn console_and_async_cases(live: &mut Live) {
    // test_code_module.py test_syntax_error: the place, the line and the
    // caret, no "Traceback" header; the cell before and after are fine.
    shows(live, "before = 1", "").await;
    let run = py(live, "def f():\n    x = ?\n").await;
    assert!(
        matches!(run.outcome, CellOutcome::Error { .. }),
        "{}",
        show(&run)
    );
    assert_eq!(
        any_cell(&err(&run)),
        "  File \"<cell N>\", line 2\n    x = ?\n        ^\nSyntaxError: invalid syntax\n",
        "{}",
        show(&run)
    );
    // test_indentation_error
    let run = py(live, "  1").await;
    assert_eq!(
        any_cell(&err(&run)),
        "  File \"<cell N>\", line 1\n    1\nIndentationError: unexpected indent\n",
        "{}",
        show(&run)
    );
    // test_cause_tb: the cause (never raised: no traceback of its own),
    // then the exception it caused.
    let run = raises(
        live,
        "raise ValueError('') from AttributeError",
        "ValueError",
    )
    .await;
    assert_eq!(
        any_cell(&err(&run)),
        "AttributeError\n\nThe above exception was the direct cause of the following exception:\n\nTraceback (most recent call last):\n  File \"<cell N>\", line 1, in <module>\n    raise ValueError('') from AttributeError\nValueError\n",
        "{}",
        show(&run)
    );
    // test_context_tb: both tracebacks, each with its line in the cell;
    // without the source and caret lines (the console has none), the
    // console's text exactly.
    let run = raises(
        live,
        "try: ham\nexcept: eggs\n",
        "NameError: name 'eggs' is not defined",
    )
    .await;
    let text: String = any_cell(&err(&run))
        .lines()
        .filter(|l| !l.starts_with("    "))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(
        text,
        "Traceback (most recent call last):\n  File \"<cell N>\", line 1, in <module>\nNameError: name 'ham' is not defined\n\nDuring handling of the above exception, another exception occurred:\n\nTraceback (most recent call last):\n  File \"<cell N>\", line 2, in <module>\nNameError: name 'eggs' is not defined\n",
        "{}",
        show(&run)
    );
    assert!(err(&run).contains("    try: ham\n"), "{}", show(&run));
    shows(live, "before", "1\n").await;
    // test_message_spec.py test_execute_error: the error is named.
    let run = py(live, "1/0").await;
    assert_eq!(
        run.outcome,
        CellOutcome::Error {
            message: "ZeroDivisionError: division by zero".into()
        },
        "{}",
        show(&run)
    );
    // test_interactiveshell.py test_run_empty_cell: an empty cell runs,
    // shows nothing and leaves `_` as it was.
    shows(live, "41 + 1", "42\n").await;
    shows(live, "", "").await;
    shows(live, "_", "42\n").await;
    // test_run_cell_asyncio_run: top-level `await`, then `asyncio.run` in
    // a cell without one (no loop runs between cells), then `await` again
    // on the kernel's loop; each value shown and kept as `_`.
    shows(live, "import asyncio", "").await;
    shows(live, "await asyncio.sleep(0.01); 1", "1\n").await;
    shows(live, "asyncio.run(asyncio.sleep(0.01)); 2", "2\n").await;
    shows(live, "await asyncio.sleep(0.01); 3", "3\n").await;
    shows(live, "_", "3\n").await;
    // test_async.py test_async_interrupt: interrupted while it awaits,
    // once "begin" is out; the kernel and its loop go on.
    let run = live
        .run_cancelling_at(
            "py",
            Lang::Python,
            "print('begin'); import asyncio; await asyncio.sleep(5)",
            Some(b"begin\n"),
        )
        .await;
    assert_eq!(run.outcome, CellOutcome::Cancelled, "{}", show(&run));
    assert_eq!(run.out(), "begin\n", "{}", show(&run));
    shows(live, "await asyncio.sleep(0.01); 'after'", "'after'\n").await;
    // test_interactiveshell.py test_stream_performance: 250 000 prints in
    // well under its bound of 10 s, every line there.
    let started = std::time::Instant::now();
    let run = py(live, "for i in range(250_000): print(i)").await;
    let took = started.elapsed();
    assert_eq!(run.outcome, CellOutcome::Ok, "{:?}", run.outcome);
    let out = run.out();
    assert_eq!(
        (out.lines().count(), out.lines().last()),
        (250_000, Some("249999"))
    );
    assert!(took < Duration::from_secs(10), "took {took:?}");
    live.shutdown("py").await;
}

/// CPython's `Lib/test/test_code_module.py` (test_syntax_error,
/// test_cause_tb, test_context_tb, test_sysexcepthook): after a failed
/// input the console leaves the exception in `sys.last_type`,
/// `sys.last_value` and `sys.last_traceback` (`sys.last_exc` too from
/// 3.12), as the plain prompt and IPython (`InteractiveShell._get_exc_info`)
/// do; `pdb.pm()` and `traceback.print_last()` read them in the next input.
pub(super) async fn last_exception_is_kept(live: &mut Live) {
    let last = "import sys\n(sys.last_type.__name__, type(sys.last_value).__name__, sys.last_traceback is sys.last_value.__traceback__, getattr(sys, 'last_exc', sys.last_value) is sys.last_value)";
    raises(
        live,
        "raise ValueError('') from AttributeError",
        "ValueError",
    )
    .await;
    shows(live, last, "('ValueError', 'ValueError', True, True)\n").await;
    raises(
        live,
        "try: ham\nexcept: eggs\n",
        "NameError: name 'eggs' is not defined",
    )
    .await;
    shows(live, last, "('NameError', 'NameError', True, True)\n").await;
    shows(
        live,
        "str(sys.last_value), str(sys.last_value.__context__)",
        "(\"name 'eggs' is not defined\", \"name 'ham' is not defined\")\n",
    )
    .await;
    let run = py(live, "def f():\n    x = ?\n").await;
    assert!(
        matches!(run.outcome, CellOutcome::Error { .. }),
        "{}",
        show(&run)
    );
    shows(
        live,
        "sys.last_type is SyntaxError, sys.last_traceback is None",
        "(True, True)\n",
    )
    .await;
    live.shutdown("py").await;
}

/// CPython's `Lib/test/test_traceback.py` test_basic_caret,
/// test_caret_for_binary_operators and the known-depth part of
/// `_check_recursive_traceback_display`: a cell's traceback carries the
/// 3.11 position markers under the failing expression, at the columns
/// the interpreter gives them for a file, also where the failing line is
/// the last of its cell (no newline after it); the repeated frames of a
/// recursion are folded. The function of one cell, called from the next,
/// shows both cells' lines.
pub(super) async fn cpython_traceback_carets(live: &mut Live) {
    let tb = |run: &CellRun| any_cell(&err(run));
    // test_basic_caret
    shows(
        live,
        "def f():\n    if True: raise ValueError(\"basic caret tests\")",
        "",
    )
    .await;
    let run = raises(live, "f()", "ValueError: basic caret tests").await;
    assert_eq!(
        tb(&run),
        "Traceback (most recent call last):\n  File \"<cell N>\", line 1, in <module>\n    f()\n  File \"<cell N>\", line 2, in f\n    if True: raise ValueError(\"basic caret tests\")\n             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\nValueError: basic caret tests\n",
        "{}",
        show(&run)
    );
    // test_caret_for_binary_operators
    shows(
        live,
        "def f_with_binary_operator():\n    divisor = 20\n    return 10 + divisor / 0 + 30",
        "",
    )
    .await;
    let run = raises(
        live,
        "f_with_binary_operator()",
        "ZeroDivisionError: division by zero",
    )
    .await;
    assert_eq!(
        tb(&run),
        "Traceback (most recent call last):\n  File \"<cell N>\", line 1, in <module>\n    f_with_binary_operator()\n  File \"<cell N>\", line 3, in f_with_binary_operator\n    return 10 + divisor / 0 + 30\n                ~~~~~~~~^~~\nZeroDivisionError: division by zero\n",
        "{}",
        show(&run)
    );
    // _check_recursive_traceback_display: a known number of recursive
    // calls (three shown, "[Previous line repeated 7 more times]").
    shows(
        live,
        "def g(count=10):\n    if count:\n        return g(count-1)\n    raise ValueError",
        "",
    )
    .await;
    let run = raises(live, "g()", "ValueError").await;
    let frame = "  File \"<cell N>\", line 3, in g\n    return g(count-1)\n           ^^^^^^^^^^\n";
    assert_eq!(
        tb(&run),
        format!(
            "Traceback (most recent call last):\n  File \"<cell N>\", line 1, in <module>\n    g()\n{frame}{frame}{frame}  [Previous line repeated 7 more times]\n  File \"<cell N>\", line 4, in g\n    raise ValueError\nValueError\n"
        ),
        "{}",
        show(&run)
    );
    live.shutdown("py").await;
}

/// CPython's `Lib/test/test_traceback.py` (the recursion-limit part of
/// `_check_recursive_traceback_display`, test_exception_with_note,
/// test_exception_group_basic) and nbclient's `tests/files/Skip
/// Exceptions.ipynb`: a cell's traceback is the interpreter's own text
/// (the file is `<cell N>`, the source's is its own file; no frame of
/// tether's): a recursion that hits the limit is folded and the kernel
/// goes on, a note follows the message, an exception group is boxed.
pub(super) async fn cpython_traceback_cases(live: &mut Live) {
    let tb = |run: &CellRun| any_cell(&err(run));
    // ... and hitting the recursion limit: three frames of `f`, then the
    // repeat count (within 60 of the limit: the kernel's own frames are
    // below the cell's), then the error; the kernel goes on.
    shows(live, "def f():\n    f()", "").await;
    let run = py(live, "f()").await;
    let text = tb(&run);
    let lines: Vec<&str> = text.lines().collect();
    let f = ["  File \"<cell N>\", line 2, in f", "    f()"];
    assert_eq!(
        lines[..9],
        [
            "Traceback (most recent call last):",
            "  File \"<cell N>\", line 1, in <module>",
            "    f()",
            f[0],
            f[1],
            f[0],
            f[1],
            f[0],
            f[1]
        ],
        "{}",
        show(&run)
    );
    let repeated: usize = lines[9]
        .strip_prefix("  [Previous line repeated ")
        .and_then(|l| l.strip_suffix(" more times]"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{}", show(&run)));
    assert!((940..1000).contains(&repeated), "{}", show(&run));
    assert_eq!(
        (lines.len(), lines[10], &run.outcome),
        (
            11,
            "RecursionError: maximum recursion depth exceeded",
            &CellOutcome::Error {
                message: "RecursionError: maximum recursion depth exceeded".into()
            }
        ),
        "{}",
        show(&run)
    );
    shows(live, "import sys; sys.getrecursionlimit()", "1000\n").await;
    // test_exception_with_note: the note follows the message.
    let run = raises(
        live,
        "e = ValueError(123)\ne.add_note('My Note')\nraise e",
        "My Note",
    )
    .await;
    assert_eq!(
        (tb(&run), run.outcome.clone()),
        (
            "Traceback (most recent call last):\n  File \"<cell N>\", line 3, in <module>\n    raise e\nValueError: 123\nMy Note\n".into(),
            CellOutcome::Error {
                message: "ValueError: 123".into()
            }
        ),
        "{}",
        show(&run)
    );
    // test_exception_group_basic
    shows(
        live,
        "def exc():\n    raise ExceptionGroup(\"eg\", [ValueError(1), TypeError(2)])",
        "",
    )
    .await;
    let run = raises(live, "exc()", "    +------------------------------------").await;
    assert_eq!(
        (tb(&run), run.outcome.clone()),
        (
            concat!(
                "  + Exception Group Traceback (most recent call last):\n",
                "  |   File \"<cell N>\", line 1, in <module>\n",
                "  |     exc()\n",
                "  |   File \"<cell N>\", line 2, in exc\n",
                "  |     raise ExceptionGroup(\"eg\", [ValueError(1), TypeError(2)])\n",
                "  | ExceptionGroup: eg (2 sub-exceptions)\n",
                "  +-+---------------- 1 ----------------\n",
                "    | ValueError: 1\n",
                "    +---------------- 2 ----------------\n",
                "    | TypeError: 2\n",
                "    +------------------------------------\n",
            )
            .into(),
            CellOutcome::Error {
                message: "ExceptionGroup: eg (2 sub-exceptions)".into()
            }
        ),
        "{}",
        show(&run)
    );
    // nbclient "Skip Exceptions.ipynb": a non-ASCII comment, then the
    // raise; the next cell prints.
    let run = raises(
        live,
        "# üñîçø∂é\nraise Exception(\"message\")",
        "Exception: message",
    )
    .await;
    assert_eq!(
        tb(&run),
        "Traceback (most recent call last):\n  File \"<cell N>\", line 2, in <module>\n    raise Exception(\"message\")\nException: message\n",
        "{}",
        show(&run)
    );
    shows(live, "print(\"ok\")", "ok\n").await;
    live.shutdown("py").await;
}

/// CPython's `Lib/test/test_future_stmt/test_future.py`
/// (AnnotationsFutureTestCase's template, test_badfuture3) and
/// `Lib/test/test_warnings/__init__.py` (FilterTests test_error,
/// test_ignore, test_once, test_always), split across cells: a
/// `from __future__ import annotations` cell makes the later cells' annotations strings (as
/// at the prompt: README, "Python kernels"); a filter one cell sets
/// decides what the next cell's warning does (`once` is once per
/// session, as its registry is the `warnings` module's).
pub(super) async fn cpython_future_warning_cases(live: &mut Live) {
    // AnnotationsFutureTestCase: the template's annotations, the import in
    // a cell before.
    shows(live, "from __future__ import annotations", "").await;
    let ann = "Name1 and (Name2 or Name3)";
    shows(
        live,
        &format!(
            "def f() -> {ann}:\n    ...\ndef g(arg: {ann}) -> None:\n    ...\nasync def f2() -> {ann}:\n    ...\nasync def g2(arg: {ann}) -> None:\n    ...\nclass H:\n    var: {ann}\n    object.attr: {ann}\nvar: {ann}\nvar2: {ann} = None\nobject.attr: {ann}\n"
        ),
        "",
    )
    .await;
    shows(
        live,
        "{f.__annotations__['return'], g.__annotations__['arg'], f2.__annotations__['return'], g2.__annotations__['arg'], __annotations__['var'], __annotations__['var2']}",
        &format!("{{'{ann}'}}\n"),
    )
    .await;
    // test_badfuture3: an unknown feature is a syntax error at its line.
    let run = raises(
        live,
        "\"\"\"This is a test\"\"\"\nfrom __future__ import nested_scopes\nfrom __future__ import rested_snopes\n\ndef f(x):\n    def g(y):\n        return x + y\n    return g\n\nresult = f(2)(4)",
        "SyntaxError: future feature rested_snopes is not defined",
    )
    .await;
    assert!(
        any_cell(&err(&run)).starts_with("  File \"<cell N>\", line 3\n"),
        "{}",
        show(&run)
    );
    raises(live, "result", "NameError: name 'result' is not defined").await;
    // FilterTests.test_error: the filter of one cell, the warning of the next.
    shows(
        live,
        "import warnings\nwarnings.resetwarnings()\nwarnings.filterwarnings(\"error\", category=UserWarning)",
        "",
    )
    .await;
    raises(
        live,
        "warnings.warn(\"FilterTests.test_error\")",
        "UserWarning: FilterTests.test_error",
    )
    .await;
    // test_ignore
    shows(
        live,
        "warnings.resetwarnings()\nwarnings.filterwarnings(\"ignore\", category=UserWarning)",
        "",
    )
    .await;
    shows(
        live,
        "warnings.warn(\"FilterTests.test_ignore\", UserWarning)",
        "",
    )
    .await;
    // test_once: shown the first time only, whatever the line or file.
    shows(
        live,
        "warnings.resetwarnings()\nwarnings.filterwarnings(\"once\", category=UserWarning)\nmessage = UserWarning(\"FilterTests.test_once\")",
        "",
    )
    .await;
    let run = py(
        live,
        "warnings.warn_explicit(message, UserWarning, \"__init__.py\", 42)",
    )
    .await;
    assert_eq!(
        (run.outcome.clone(), err(&run)),
        (
            CellOutcome::Ok,
            "__init__.py:42: UserWarning: FilterTests.test_once\n".into()
        ),
        "{}",
        show(&run)
    );
    shows(
        live,
        "warnings.warn_explicit(message, UserWarning, \"__init__.py\", 13)",
        "",
    )
    .await;
    shows(
        live,
        "warnings.warn_explicit(message, UserWarning, \"test_warnings2.py\", 42)",
        "",
    )
    .await;
    // test_always: twice from one place, shown twice.
    shows(
        live,
        "warnings.resetwarnings()\nwarnings.filterwarnings(\"always\", category=UserWarning)\nmessage = \"FilterTests.test_always\"\ndef f():\n    warnings.warn(message, UserWarning)",
        "",
    )
    .await;
    let run = py(live, "f()\nf()").await;
    let shown =
        "<cell N>:5: UserWarning: FilterTests.test_always\n  warnings.warn(message, UserWarning)\n";
    assert_eq!(
        (run.outcome.clone(), any_cell(&err(&run))),
        (CellOutcome::Ok, format!("{shown}{shown}")),
        "{}",
        show(&run)
    );
    shows(live, "warnings.resetwarnings()", "").await;
    live.shutdown("py").await;
}

/// nbclient's test notebooks (`tests/files/`: Factorials, Unicode, Empty
/// Cell, HelloWorld, Sleep1s of test_execution_timing, Autokill of
/// test_kernel_death_during_execution), each cell a cell: the outputs
/// the notebooks record. A kernel killed during a cell (Autokill's
/// `os.kill(pid, SIGTERM)`) fails that cell, saying so, instead of
/// hanging (nbclient raises `DeadKernelError`); the next cell runs in a
/// fresh interpreter, as after Jupyter's restart (README, "Python
/// kernels").
pub(super) async fn nbclient_notebook_cases(live: &mut Live) {
    // Factorials.ipynb
    shows(live, "i, j = 1, 1", "").await;
    shows(
        live,
        "for m in range(10):\n    i, j = j, i + j\n    print(j)",
        "2\n3\n5\n8\n13\n21\n34\n55\n89\n144\n",
    )
    .await;
    // Unicode.ipynb, HelloWorld.ipynb
    shows(live, "print(\"☃\")", "☃\n").await;
    shows(live, "print(\"Hello World\")", "Hello World\n").await;
    // Empty Cell.ipynb
    shows(live, "\"Code 1\"", "'Code 1'\n").await;
    shows(live, "", "").await;
    shows(live, "\"Code 2\"", "'Code 2'\n").await;
    // Sleep1s.ipynb: the times printed without a newline, each its cell's
    // whole output; a second apart at least.
    shows(live, "import datetime\nimport time", "").await;
    shows(
        live,
        "t0 = datetime.datetime.utcnow()\ntime.sleep(1)\nt1 = datetime.datetime.utcnow()",
        "",
    )
    .await;
    let start = py(
        live,
        "time_format = \"%Y-%m-%dT%H:%M:%S.%fZ\"\nprint(t0.strftime(time_format), end=\"\")",
    )
    .await
    .out();
    let end = py(live, "print(t1.strftime(time_format), end=\"\")")
        .await
        .out();
    shows(
        live,
        &format!(
            "d = datetime.datetime.strptime({end:?}, time_format) - datetime.datetime.strptime({start:?}, time_format)\nd >= datetime.timedelta(seconds=1)"
        ),
        "True\n",
    )
    .await;
    // Autokill.ipynb
    let run = py(
        live,
        "import os\nimport signal\n\npid = os.getpid()\nos.kill(pid, signal.SIGTERM)",
    )
    .await;
    let died = "the Python interpreter was killed by signal 15; the kernel's namespace is lost";
    assert_eq!(
        (run.outcome.clone(), err(&run)),
        (
            CellOutcome::Error {
                message: died.into()
            },
            format!("tether: {died}\n")
        ),
        "{}",
        show(&run)
    );
    shows(live, "'pid' in dir(), 'i' in dir()", "(False, False)\n").await;
    shows(live, "print(\"Hello World\")", "Hello World\n").await;
    live.shutdown("py").await;
}

/// CPython's `Lib/test/test_threading.py` ThreadJoinOnShutdown
/// test_2_join_in_forked_process: the script forks; the child starts a
/// thread that waits for the main thread, says `end of main` and comes
/// to the end of the script; the parent waits for the child's status 0
/// (the source's `support.wait_process`, written out: the docker image
/// has no `test` package) and exits 0. The script as a cell: a child
/// forked in a cell that comes to the end of the cell's code ends there
/// as at the end of a script (its threads joined, status 0), and only
/// the parent goes on as the kernel: the next cell is the parent's, with
/// its namespace, and nothing is left running.
pub(super) async fn cpython_forked_child_cases(live: &mut Live) {
    shows(live, "import os\nkept = 1\npid0 = os.getpid()", "").await;
    let script = concat!(
        "import sys, os, time, threading\n",
        "\n",
        "# a thread, which waits for the main program to terminate\n",
        "def joiningfunc(mainthread):\n",
        "    mainthread.join()\n",
        "    print('end of thread')\n",
        "    # stdout is fully buffered because not a tty, we have to flush\n",
        "    # before exit.\n",
        "    sys.stdout.flush()\n",
        "\n",
        "childpid = os.fork()\n",
        "if childpid != 0:\n",
        "    # parent process\n",
        "    _, status = os.waitpid(childpid, 0)\n",
        "    assert os.waitstatus_to_exitcode(status) == 0, status\n",
        "    sys.exit(0)\n",
        "\n",
        "# child process\n",
        "t = threading.Thread(target=joiningfunc,\n",
        "                     args=(threading.current_thread(),))\n",
        "t.start()\n",
        "print('end of main')\n",
    );
    let run = live
        .run_with_timeout("py", Lang::Python, script, Duration::from_secs(30))
        .await;
    assert_eq!(
        (run.outcome.clone(), run.out(), err(&run)),
        (
            CellOutcome::Exit { code: 0 },
            "end of main\nend of thread\n".into(),
            String::new()
        ),
        "{}",
        show(&run)
    );
    shows(live, "kept, os.getpid() == pid0", "(1, True)\n").await;
    shows(live, "kept += 1\nkept", "2\n").await;
    live.shutdown("py").await;
}

/// Runs each `(code, stdout)` in turn as its own cell, each checked as by
/// `shows`: a test split across cells.
async fn shows_all(live: &mut Live, cells: &[(&str, &str)]) {
    for (code, stdout) in cells {
        shows(live, code, stdout).await;
    }
}

/// CPython's `Lib/test/test_exceptions.py` (ExceptionTests test_notes,
/// testChainingAttrs, testChainingDescriptors, test_exception_cleanup_names),
/// split across cells: an exception kept in a variable keeps its
/// traceback (its frame's line is shown from the cell that raised it) and
/// its notes, and a later cell chains to it; `raise … from None` hides the
/// context; the name bound by `except … as e` is gone after the block, also
/// at a cell's top level.
pub(super) async fn cpython_exception_cases(live: &mut Live) {
    shows_all(
        live,
        &[
            // test_exception_cleanup_names
            (
                "try:\n    raise Exception()\nexcept Exception as e:\n    saved = e\n    print(type(e).__name__)",
                "Exception\n",
            ),
            ("'e' in dir(), 'saved' in dir()", "(False, True)\n"),
            // test_notes: notes added over several cells
            ("e = ValueError(123)\ne.add_note('My Note')", ""),
            ("e.__notes__", "['My Note']\n"),
            ("e.add_note('Your Note')", ""),
            ("e.__notes__", "['My Note', 'Your Note']\n"),
        ],
    )
    .await;
    // (the message's wording changed between versions)
    let run = py(live, "e.add_note(42)").await;
    assert!(
        matches!(&run.outcome, CellOutcome::Error { message } if message.starts_with("TypeError: ")),
        "{}",
        show(&run)
    );
    let run = raises(live, "raise e", "Your Note").await;
    assert!(
        any_cell(&err(&run)).ends_with("    raise e\nValueError: 123\nMy Note\nYour Note\n"),
        "{}",
        show(&run)
    );
    // testChainingAttrs: a caught exception of one cell, the cause of the
    // next cell's; the cause's traceback shows its own cell's line.
    shows(
        live,
        "try:\n    1/0\nexcept ZeroDivisionError as z:\n    first = z",
        "",
    )
    .await;
    shows(
        live,
        "first.__cause__, first.__context__, first.__suppress_context__, first.__traceback__.tb_lineno",
        "(None, None, False, 2)\n",
    )
    .await;
    let run = raises(live, "raise KeyError('k') from first", "KeyError: 'k'").await;
    assert_eq!(
        any_cell(&err(&run)),
        "Traceback (most recent call last):\n  File \"<cell N>\", line 2, in <module>\n    1/0\n    ~^~\nZeroDivisionError: division by zero\n\nThe above exception was the direct cause of the following exception:\n\nTraceback (most recent call last):\n  File \"<cell N>\", line 1, in <module>\n    raise KeyError('k') from first\nKeyError: 'k'\n",
        "{}",
        show(&run)
    );
    // testChainingDescriptors: `from None` suppresses the context.
    let run = raises(
        live,
        "try:\n    first.missing\nexcept AttributeError:\n    raise KeyError('quiet') from None",
        "KeyError: 'quiet'",
    )
    .await;
    assert!(
        !err(&run).contains("During handling") && !err(&run).contains("AttributeError"),
        "{}",
        show(&run)
    );
    shows(
        live,
        "import sys\nv = sys.last_value\nv.__suppress_context__, type(v.__context__).__name__",
        "(True, 'AttributeError')\n",
    )
    .await;
    live.shutdown("py").await;
}

/// CPython's `Lib/test/test_generators.py` (the doctests' "Generators
/// can call other generators", `send`, `close` and `throw` of
/// ExceptionTest and GeneratorTest) and `Lib/test/test_asyncgen.py`
/// (AsyncGenAsyncioTest: `__anext__` and `aclose` on the loop), split
/// across cells: a generator made in one cell is advanced, sent to, thrown
/// into and closed in the next ones, its frame alive in between; an async
/// generator likewise with top-level `await` on the kernel's loop
/// (README, "Python kernels"), its `finally` run by `aclose`.
pub(super) async fn cpython_generator_cases(live: &mut Live) {
    shows_all(
        live,
        &[
            (
                "def g1():\n    try:\n        x = yield 1\n        print('got', x)\n        yield 2\n        yield 3\n    except ValueError as v:\n        print('caught', v)\n        yield 'recovered'\n    finally:\n        print('closing')",
                "",
            ),
            ("gen = g1()\nnext(gen)", "1\n"),
            ("gen.gi_frame is not None, gen.gi_running", "(True, False)\n"),
            ("gen.send('sent')", "got sent\n2\n"),
            ("gen.throw(ValueError('bad'))", "caught bad\n'recovered'\n"),
            ("gen.close()", "closing\n"),
            ("gen.gi_frame is None", "True\n"),
            (
                "def yrange(n):\n    for i in range(n):\n        yield i\ndef zrange(n):\n    for i in yrange(n):\n        yield i",
                "",
            ),
            ("z = zrange(5)\nnext(z), next(z)", "(0, 1)\n"),
            ("list(z)", "[2, 3, 4]\n"),
        ],
    )
    .await;
    raises(live, "next(z)", "StopIteration").await;
    shows_all(
        live,
        &[
            (
                "import asyncio\nasync def agen():\n    try:\n        for i in range(3):\n            await asyncio.sleep(0)\n            yield i\n    finally:\n        print('agen finally')",
                "",
            ),
            ("ag = agen()\nawait ag.__anext__()", "0\n"),
            ("await ag.__anext__()", "1\n"),
            ("await ag.aclose()", "agen finally\n"),
            ("[x async for x in agen()]", "agen finally\n[0, 1, 2]\n"),
        ],
    )
    .await;
    live.shutdown("py").await;
}

/// CPython's `Lib/test/test_contextlib.py` (ContextManagerTestCase
/// test_contextmanager_plain, TestExitStack test_callback and
/// test_enter_context, TestRedirectStdout test_redirect_to_string_io,
/// TestSuppress test_exception_hierarchy), split across cells: a context
/// entered in one cell is left in a later one; an `ExitStack` collects
/// callbacks and a file over several cells and runs them last in, first
/// out when closed; `redirect_stdout` catches a cell's prints.
pub(super) async fn cpython_contextlib_cases(live: &mut Live) {
    shows_all(
        live,
        &[
            (
                "from contextlib import contextmanager, ExitStack, redirect_stdout, suppress\nimport io\nstate = []\n@contextmanager\ndef woohoo():\n    state.append(1)\n    yield 42\n    state.append(999)",
                "",
            ),
            ("cm = woohoo()\nx = cm.__enter__()\nstate, x", "([1], 42)\n"),
            ("state.append(x)", ""),
            ("cm.__exit__(None, None, None)\nstate", "[1, 42, 999]\n"),
            ("stack = ExitStack()\nstack.callback(print, 'first in');", ""),
            (
                "f = stack.enter_context(open('tether-conf-ctx.txt', 'w'))\nstack.callback(print, 'last in');",
                "",
            ),
            ("f.write('kept'); f.closed", "False\n"),
            ("stack.close()", "last in\nfirst in\n"),
            (
                "f.closed, open('tether-conf-ctx.txt').read()",
                "(True, 'kept')\n",
            ),
            (
                "buf = io.StringIO()\nwith redirect_stdout(buf):\n    help(pow)\nprint('pow' in buf.getvalue())",
                "True\n",
            ),
            (
                "with suppress(LookupError):\n    {}['missing']\nprint('suppressed')",
                "suppressed\n",
            ),
            ("import os; os.remove('tether-conf-ctx.txt')", ""),
        ],
    )
    .await;
    live.shutdown("py").await;
}

/// CPython's `Lib/test/test_pprint.py` (QueryTestCase test_basic,
/// test_knotted, test_width) and `Lib/test/test_sys.py`
/// (test_original_displayhook, with the hook a cell sets): `pprint` of a
/// structure an earlier cell built, a recursive one shown with `[...]`
/// (repr) and `<Recursion on list …>` (pprint); the value of a cell's last
/// expression is its one-line repr, as at the prompt (IPython's pretty
/// printer would wrap a long list at 79 columns); a `sys.displayhook` a
/// cell sets shows the later cells' values, as at the prompt.
pub(super) async fn cpython_pprint_displayhook_cases(live: &mut Live) {
    shows_all(
        live,
        &[
            (
                "import pprint\nstuff = ['spam', 'eggs', 'lumberjack', 'knights', 'ni']\nstuff.insert(0, stuff[:])",
                "",
            ),
            (
                "pprint.pprint(stuff, width=40)",
                "[['spam',\n  'eggs',\n  'lumberjack',\n  'knights',\n  'ni'],\n 'spam',\n 'eggs',\n 'lumberjack',\n 'knights',\n 'ni']\n",
            ),
            ("a = [1]\na.append(a)", ""),
            ("a", "[1, [...]]\n"),
            (
                "pprint.isrecursive(a), pprint.isreadable(a), pprint.pformat(a).startswith('[1, <Recursion on list with id=')",
                "(True, False, True)\n",
            ),
            (
                "list(range(30))",
                "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29]\n",
            ),
            (
                "import sys\nseen = []\ndef hook(value):\n    if value is not None:\n        seen.append(value)\n        print('hook:', repr(value))\nsys.displayhook = hook",
                "",
            ),
            ("6 * 7", "hook: 42\n"),
            ("sys.displayhook = sys.__displayhook__\nseen", "[42]\n"),
            ("'back'", "'back'\n"),
        ],
    )
    .await;
    live.shutdown("py").await;
}

/// CPython's `Lib/test/test_print.py` (TestPrint test_print and
/// test_print_flush, TestPy2MigrationHint), split across cells: each
/// `x(expected, args, sep, end)` of test_print printed to the cell's
/// stdout (the source captures it) and to a `StringIO` an earlier cell
/// made; a class with `__str__` from an earlier cell; `flush=True` on a
/// file-like object counted over cells; Python 2's `print "…"` and
/// `print >> f` are the interpreter's errors with their hints, and the
/// `__rrshift__` of a class of an earlier cell is shown as the value.
pub(super) async fn cpython_print_cases(live: &mut Live) {
    shows_all(
        live,
        &[
            (
                "import io\nclass ClassWith__str__:\n    def __init__(self, x):\n        self.x = x\n\n    def __str__(self):\n        return self.x\no = io.StringIO()",
                "",
            ),
            ("print()\nprint('a')\nprint(None)\nprint(1, 2)\nprint(1, ' ', 2)", "\na\nNone\n1 2\n1   2\n"),
            ("print(1, 2, sep='*')\nprint(1, 's', end='')", "1*2\n1 s"),
            ("print('a', 'b', sep='\\n')\nprint(1.0, 1, sep='', end='')", "a\nb\n1.01"),
            ("print(1, 'a', 1.3, sep='*', end='+')\nprint('a\\n', 'b', sep='\\n')", "1*a*1.3+a\n\nb\n"),
            ("print('\\0', ' ', '\\0', sep='+')", "\0+ +\0\n"),
            (
                "print('a\\n', 'b')\nprint('a\\n', 'b', sep=None)\nprint('a\\n', 'b', end=None)\nprint('a\\n', 'b', sep=None, end=None)",
                "a\n b\na\n b\na\n b\na\n b\n",
            ),
            ("print(ClassWith__str__('*'))\nprint(ClassWith__str__('abc'), 1)", "*\nabc 1\n"),
            ("print(1, 2, sep='*', file=o)\nprint(1, 's', end='', file=o)", ""),
            ("o.getvalue()", "'1*2\\n1 s'\n"),
        ],
    )
    .await;
    for (code, last) in [
        (
            "print('', sep=3)",
            "TypeError: sep must be None or a string, not int",
        ),
        (
            "print('', end=3)",
            "TypeError: end must be None or a string, not int",
        ),
        (
            "print('', file='')",
            "AttributeError: 'str' object has no attribute 'write'",
        ),
    ] {
        raises(live, code, last).await;
    }
    // test_print_flush
    shows_all(
        live,
        &[
            (
                "class filelike:\n    def __init__(self):\n        self.written = ''\n        self.flushed = 0\n\n    def write(self, str):\n        self.written += str\n\n    def flush(self):\n        self.flushed += 1\n\nf = filelike()\nprint(1, file=f, end='', flush=True)",
                "",
            ),
            ("print(2, file=f, end='', flush=True)\nprint(3, file=f, flush=False)", ""),
            ("f.written, f.flushed", "('123\\n', 2)\n"),
            (
                "class noflush:\n    def write(self, str):\n        pass\n\n    def flush(self):\n        raise RuntimeError",
                "",
            ),
        ],
    )
    .await;
    raises(live, "print(1, file=noflush(), flush=True)", "RuntimeError").await;
    // TestPy2MigrationHint: the hint's wording is the interpreter's own
    // (3.11: `print(...)`; later: the call written out)
    for code in [
        "print \"Hello World\"",
        "print \"Hello World\",",
        "if 1:\n    print \"Hello World\"",
        "for i in s: print i",
    ] {
        let run = py(live, code).await;
        assert!(
            matches!(run.outcome, CellOutcome::Error { .. }),
            "{code:?}: {}",
            show(&run)
        );
        let last = err(&run).lines().last().unwrap_or_default().to_owned();
        assert!(
            last.starts_with(
                "SyntaxError: Missing parentheses in call to 'print'. Did you mean print("
            ),
            "{code:?}: {}",
            show(&run)
        );
    }
    let run = raises(
        live,
        "import sys\nprint >> sys.stderr, \"message\"",
        "TypeError: unsupported operand type(s) for >>: 'builtin_function_or_method' and '_io.TextIOWrapper'. Did you mean \"print(<message>, file=<output_stream>)\"?",
    )
    .await;
    assert!(err(&run).contains("File \"<cell "), "{}", show(&run));
    raises(
        live,
        "max >> sys.stderr",
        "TypeError: unsupported operand type(s) for >>: 'builtin_function_or_method' and '_io.TextIOWrapper'",
    )
    .await;
    shows_all(
        live,
        &[
            (
                "class OverrideRRShift:\n    def __rrshift__(self, lhs):\n        return 42 # Force result independent of LHS",
                "",
            ),
            ("print >> OverrideRRShift()", "42\n"),
        ],
    )
    .await;
    live.shutdown("py").await;
}

/// CPython's `Lib/test/test_logging.py` BasicConfigTest (test_no_kwargs,
/// test_level, test_force, test_strformatstyle), split across cells: the
/// handler `basicConfig()` makes in one cell writes to stderr in the
/// later ones (the cell's own, not the one it was made in), a second
/// `basicConfig(level=…)` does nothing, `force=True` replaces the handler
/// with one on stdout whose level and style hold in the next cell.
pub(super) async fn cpython_logging_cases(live: &mut Live) {
    shows_all(
        live,
        &[
            ("import logging, sys\nlogging.basicConfig()", ""),
            (
                "h = logging.root.handlers[0]\n(len(logging.root.handlers), type(h).__name__, h.stream is sys.stderr,\n h.formatter._style._fmt == logging.BASIC_FORMAT, h.formatter.datefmt,\n isinstance(h.formatter._style, logging.PercentStyle), logging.root.level)",
                "(1, 'StreamHandler', True, True, None, True, 30)\n",
            ),
        ],
    )
    .await;
    for (code, stderr) in [
        (
            "logging.warning('warn')\nlogging.info('info')\nlogging.debug('debug')",
            "WARNING:root:warn\n",
        ),
        (
            "logging.getLogger('x').error('Log an error')",
            "ERROR:x:Log an error\n",
        ),
    ] {
        let run = py(live, code).await;
        assert_eq!(run.outcome, CellOutcome::Ok, "{code:?}: {}", show(&run));
        assert_eq!(
            (run.out(), err(&run)),
            (String::new(), stderr.into()),
            "{code:?}: {}",
            show(&run)
        );
    }
    shows_all(
        live,
        &[
            ("logging.basicConfig(level=57)", ""),
            (
                "logging.root.level, len(logging.root.handlers)",
                "(30, 1)\n",
            ),
            (
                "logging.basicConfig(stream=sys.stdout, style='{', level=logging.INFO, force=True)",
                "",
            ),
            (
                "logging.error('Log an error')\nlogging.info('info')\nlogging.debug('debug')",
                "ERROR:root:Log an error\nINFO:root:info\n",
            ),
            (
                "logging.root.level, len(logging.root.handlers)",
                "(20, 1)\n",
            ),
        ],
    )
    .await;
    live.shutdown("py").await;
}

/// CPython's `Lib/test/test_weakref.py` (ReferencesTestCase
/// check_basic_ref and check_basic_callback, FinalizeTestCase
/// test_finalize) and `Lib/test/test_sys.py` (test_original_displayhook:
/// the shown value is kept as `builtins._`), split across cells: an
/// object an earlier cell made dies when a later cell drops its last
/// reference, and its weakref callback and finalizer run in that cell; a
/// value a cell showed stays alive as `_` until the next shown value
/// replaces it, as at the prompt: `sys.displayhook` drops the old `_`
/// before it prints the new value, so the callback prints first.
pub(super) async fn cpython_weakref_cases(live: &mut Live) {
    shows_all(
        live,
        &[
            (
                "import weakref\nclass C:\n    pass\ncbcalled = 0\ndef callback(ref):\n    global cbcalled\n    cbcalled += 1\no = C()\nref = weakref.ref(o, callback)\nfin = weakref.finalize(o, print, 'finalized')",
                "",
            ),
            ("ref() is o, cbcalled, fin.alive", "(True, 0, True)\n"),
            ("del o", "finalized\n"),
            ("cbcalled, ref() is None, fin.alive", "(1, True, False)\n"),
            (
                "class D:\n    def __repr__(self):\n        return 'D()'\no2 = D()\nr2 = weakref.ref(o2, lambda r: print('o2 gone'))\no2",
                "D()\n",
            ),
            ("del o2", ""),
            ("r2() is not None", "o2 gone\nTrue\n"),
            ("r2() is None", "True\n"),
        ],
    )
    .await;
    live.shutdown("py").await;
}

/// CPython's `Lib/test/test_importlib/test_api.py` ReloadTests
/// test_reload_location_changed, split across cells: a module file one
/// cell writes in the working directory it moved to is found by the next
/// (`''` on `sys.path`, README "Python kernels") with the namespace the
/// source expects; turned into a package by a later cell, `reload` gives
/// the same module object with the package's `__file__` and `__path__`,
/// and a later `import` finds that module.
pub(super) async fn cpython_import_reload_cases(live: &mut Live) {
    shows_all(
        live,
        &[
            (
                "import importlib, importlib.util, os, sys, tempfile\nos.chdir(tempfile.mkdtemp())\nname = 'spam'\npath = os.path.join(os.getcwd(), name + '.py')\nopen(path, 'w').close()\nimportlib.invalidate_caches()",
                "",
            ),
            (
                "module = importlib.import_module(name)\nns = vars(module).copy()\nloader = ns.pop('__loader__')\nspec = ns.pop('__spec__')\nns.pop('__builtins__', None)\n(ns == {'__name__': name, '__package__': '', '__file__': path,\n        '__cached__': importlib.util.cache_from_source(path), '__doc__': None},\n spec.name == name, spec.loader == loader, loader.path == path)",
                "(True, True, True, True)\n",
            ),
            (
                "init_path = os.path.join(os.getcwd(), name, '__init__.py')\nos.mkdir(name)\nos.rename(path, init_path)\nimportlib.invalidate_caches()",
                "",
            ),
            (
                "reloaded = importlib.reload(module)\nns = vars(reloaded).copy()\nloader = ns.pop('__loader__')\nspec = ns.pop('__spec__')\nns.pop('__builtins__', None)\n(ns == {'__name__': name, '__package__': name, '__file__': init_path,\n        '__cached__': importlib.util.cache_from_source(init_path),\n        '__path__': [os.path.dirname(init_path)], '__doc__': None},\n spec.name == name, spec.loader == loader, reloaded is module, loader.path == init_path)",
                "(True, True, True, True, True)\n",
            ),
            ("import spam\nspam is module, spam.__file__ == init_path", "(True, True)\n"),
        ],
    )
    .await;
    live.shutdown("py").await;
}
