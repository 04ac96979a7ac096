//! The Python kernel: one persistent `python3` per kernel, run under a
//! long-lived shim (the "interpreter shim", launched like a cell with the
//! pseudo cell directory `{kernel}/py`). The daemon hands it one cell at a
//! time by writing the cell's sequence number to `{kernel}/py/run`; the
//! shim passes `seq cell_dir marker token` on the interpreter's stdin; the
//! bootstrap runs the cell in the kernel's one namespace (the value of a
//! final expression is printed), sets the cell's env marker so subprocesses
//! carry it, and reports the outcome as one JSON line on fd 3. It also
//! provides the module `tether` (`tether.call(name, args)`, stdlib only):
//! the cell's tool-call credential (`token`) lives in a context variable
//! while the cell runs.
//!
//! Cells have no stdin: the bootstrap keeps its command pipe on a private
//! close-on-exec descriptor and puts `/dev/null` on fd 0, so `input()`
//! raises `EOFError` at once (saying why) and the cells' subprocesses
//! read EOF instead of the next cell's command.
//!
//! Cancel: SIGINT to the interpreter (KeyboardInterrupt, namespace kept)
//! and TERM to the cell's subprocesses; if the cell is not done after the
//! grace period the interpreter is killed too and the loss is reported.

use super::layout::KernelLayout;
use super::tombstone::CancelReason;
use crate::protocol::CellOutcome;

/// The bootstrap the interpreter runs (`python3 -u -c BOOTSTRAP`).
pub const BOOTSTRAP: &str = r#"
import os
# Its shim, before the slow imports: see the look before each cell.
_shim = os.getppid()
import ast, builtins, inspect, json, linecache, os, signal, sys, traceback
_ctl = os.fdopen(3, "w")
_cmds = os.fdopen(os.dup(0), "r")
_null = os.open(os.devnull, os.O_RDONLY)
os.dup2(_null, 0)
os.close(_null)
_input = builtins.input
def input(prompt=""):
    try:
        return _input(prompt)
    except EOFError:
        raise EOFError("EOF when reading a line: tether cells have no stdin "
                       "(put the data in the code or in a file)") from None
builtins.input = input
del input
# The namespace is the dict of a module installed as `__main__`, as at the
# interactive prompt and in IPython: pickle, multiprocessing, dataclasses
# and `unittest.main()` look names up through sys.modules["__main__"].
# The bootstrap's own module stays alive (its functions hold its dict).
import types
# As at the interactive prompt (and `python3 -i`): no script, so argv is
# [''] ('-c' and the bootstrap are this process's, not the user's).
sys.argv[:] = [""]
_boot = sys.modules["__main__"]
_main = types.ModuleType("__main__")
_ns = _main.__dict__
_ns["__builtins__"] = __builtins__
sys.modules["__main__"] = _main
_busy = [False]
_loop = [None]
_pid = os.getpid()
def _run(code):
    # Top-level `await` (as in IPython): such a cell compiles to a
    # coroutine, run on one event loop the kernel keeps across cells.
    if code.co_flags & inspect.CO_COROUTINE:
        if _loop[0] is None:
            import asyncio
            _loop[0] = asyncio.new_event_loop()
        return _loop[0].run_until_complete(eval(code, _ns))
    return eval(code, _ns)
def _on_int(signum, frame):
    if _busy[0]:
        raise KeyboardInterrupt
signal.signal(signal.SIGINT, _on_int)
import contextvars, io, time, tokenize
import __future__
# `from __future__ import ...` in a cell holds for the later cells too, as
# at the prompt (codeop) and in IPython: the flags of each compiled cell
# that name a future feature are kept and given to the next compiles.
_FEATURES = 0
for _f in __future__.all_feature_names:
    _FEATURES |= getattr(__future__, _f).compiler_flag
_future = [0]
_G = globals()
def _print_tb(e, tb):
    # The bootstrap's own frames (the `input` wrapper, the magics) are not
    # the user's: the traceback shows the cell's and the libraries' only.
    te = traceback.TracebackException(type(e), e, tb)
    frames = [f for f, _ in traceback.walk_tb(tb)]
    if len(frames) == len(te.stack):
        te.stack = traceback.StackSummary.from_list(
            [s for s, f in zip(te.stack, frames) if f.f_globals is not _G])
    sys.stderr.write("".join(te.format()))
def _quiet(text):
    # IPython's rule: a cell whose last token (comments aside) is `;`
    # shows no value (`plt.plot(x);`).
    last = None
    try:
        for _t in tokenize.generate_tokens(io.StringIO(text).readline):
            if _t.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
                               tokenize.DEDENT, tokenize.ENDMARKER):
                last = _t
    except (tokenize.TokenError, SyntaxError):
        return False
    return last is not None and last.type == tokenize.OP and last.string == ";"
def _exit_code(code):
    # What the interpreter does with SystemExit: None is 0, an int is the
    # status (as the OS keeps it, 0-255), anything else is printed to stderr
    # and gives 1.
    if code is None:
        return 0
    if isinstance(code, int):
        return int(code) & 0xFF
    try:
        print(code, file=sys.stderr)
    except BaseException:
        pass
    return 1
# Tool calls: the running cell's calls directory and credential, in a
# context variable (a thread or task left by an earlier cell does not
# carry the current cell's credential).
_cred = contextvars.ContextVar("tether_call", default=None)
class _ToolError(Exception):
    """A tool call failed: the host's error, a refusal, a limit or the deadline."""
_ToolError.__name__ = _ToolError.__qualname__ = "ToolError"
_ToolError.__module__ = "tether"
def _call(name, args=None):
    """Calls the host tool `name` with `args` (JSON-able); returns its result."""
    c = _cred.get()
    if c is None:
        raise _ToolError("tether.call: no cell credential here (calls work in a cell's own "
                        "code and its asyncio tasks; run a thread with contextvars.copy_context().run)")
    d, tok = c
    ended = lambda: os.path.exists(os.path.join(os.path.dirname(d), "journal.done")) or not os.path.isdir(d)
    if ended():
        raise _ToolError("refused: the cell this call belongs to has ended")
    if not isinstance(name, str) or not name:
        raise _ToolError("a tool's name is a non-empty string")
    args = {} if args is None else args
    # The limit is on the arguments alone, as compact UTF-8 JSON: the size
    # the shim measures (the whole request, spaced and escaped, refused a
    # call of exactly the limit that `tether-call` gets answered).
    size = len(json.dumps(args, separators=(",", ":"), ensure_ascii=False).encode())
    if size > @MAX_ARGS@:
        raise _ToolError("the call's arguments are %d bytes, over the limit of @MAX_ARGS@" % size)
    cid = os.urandom(12).hex()
    body = json.dumps({"id": cid, "token": tok, "name": name, "args": args})
    tmp = os.path.join(d, "." + cid + ".tmp")
    with open(tmp, "w") as f:
        f.write(body)
    os.rename(tmp, os.path.join(d, cid + ".req"))
    try:
        limit = float(os.environ.get("TETHER_CALL_TIMEOUT", "@TIMEOUT@"))
    except ValueError:
        limit = @TIMEOUT@
    if not 0 < limit < float("inf"):
        # As `tether-call` reads it: a negative, zero, infinite or NaN
        # deadline is no deadline a caller can use (NaN fails this too).
        limit = @TIMEOUT@
    ans = os.path.join(d, cid + ".ans")
    start = time.monotonic()
    while True:
        try:
            with open(ans) as f:
                reply = json.load(f)
            if reply.get("status") == "ok":
                return reply.get("value")
            raise _ToolError("%s: %s" % (name, reply.get("message")))
        except (FileNotFoundError, ValueError):
            pass
        if ended() and not os.path.exists(ans):
            raise _ToolError("refused: the cell ended before the host answered")
        if time.monotonic() - start >= limit:
            raise _ToolError("%s: no answer within %g s (the deadline per call; "
                            "TETHER_CALL_TIMEOUT sets it in seconds)" % (name, limit))
        time.sleep(@POLL@)
import re, shlex, subprocess
# IPython's syntax, for cells written for a notebook: `!cmd` runs cmd in
# the shell (its output is the cell's; `_exit_code` keeps its status),
# `x = !cmd` keeps its output lines, `%pip`, `%cd` and `%env` line
# magics, `%%bash`, `%%sh` and `%%writefile` cell magics, `name?` shows
# help. Only a cell that is not Python without them is rewritten, line
# for line (tracebacks show the cell's own lines); `$name`, `$$` and
# `{expr}` expand from the namespace, and where one cannot, the line is
# used as written (as in IPython: `!echo $HOME` is the shell's $HOME).
_bang = re.compile(r"^([ \t]*)(?:([A-Za-z_][\w.]*)[ \t]*=[ \t]*)?!(?!=)(.*?)(\r?\n)?$")
_line_magic = re.compile(r"^([ \t]*)%([A-Za-z_]\w*)(.*?)(\r?\n)?$")
_help = re.compile(r"^([ \t]*)(?:\?\??([A-Za-z_][\w.]*)|([A-Za-z_][\w.]*)\?\??)[ \t]*(\r?\n)?$")
_field = re.compile(r"\$\$|\$([A-Za-z_]\w*)|\{([^{}]*)\}")
def _escaped(text, name, flags):
    first, _, body = text.partition("\n")
    m = re.match(r"^%%([A-Za-z_]\w*)(.*?)\r?$", first)
    if m is not None:
        return ast.parse("__import__('tether').cell_magic(%r, %r, %r)" % (m.group(1), m.group(2).strip(), body))
    lines, changed = [], False
    for line in text.splitlines(True):
        m = _bang.match(line)
        if m is not None:
            indent, target, cmd, end = m.group(1), m.group(2), m.group(3), m.group(4) or ""
            call = "__import__('tether').%s(%r)" % ("getoutput" if target else "system", cmd)
            lines.append(indent + (target + " = " if target else "") + call + end)
            changed = True
            continue
        m = _line_magic.match(line)
        if m is not None:
            call = "__import__('tether').magic(%r, %r)" % (m.group(2), m.group(3).strip())
            lines.append(m.group(1) + call + (m.group(4) or ""))
            changed = True
            continue
        m = _help.match(line)
        if m is not None:
            lines.append(m.group(1) + "help(%s)" % (m.group(2) or m.group(3)) + (m.group(4) or ""))
            changed = True
            continue
        lines.append(line)
    if not changed:
        return None
    try:
        return compile("".join(lines), name, "exec", ast.PyCF_ONLY_AST | flags)
    except SyntaxError:
        return None
def _expand(cmd, frame):
    scope = dict(frame.f_globals)
    scope.update(frame.f_locals)
    def one(m):
        if m.group(0) == "$$":
            return "$"
        return str(eval(m.group(1) or m.group(2), scope))
    try:
        return _field.sub(one, cmd)
    except Exception:
        return cmd
def _shell():
    return "/bin/bash" if os.path.exists("/bin/bash") else "/bin/sh"
def _system(cmd):
    """Runs cmd in the shell, its output the cell's (IPython's `!cmd`)."""
    cmd = _expand(cmd, sys._getframe(1))
    sys.stdout.flush()
    sys.stderr.flush()
    _ns["_exit_code"] = subprocess.call([_shell(), "-c", cmd])
def _getoutput(cmd):
    """Runs cmd in the shell; returns its output lines, stderr included (`x = !cmd`)."""
    cmd = _expand(cmd, sys._getframe(1))
    r = subprocess.run([_shell(), "-c", cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    _ns["_exit_code"] = r.returncode
    return r.stdout.decode("utf-8", "replace").splitlines()
class _UsageError(Exception):
    """An IPython magic this kernel does not have, or a wrong use of one."""
_UsageError.__name__ = _UsageError.__qualname__ = "UsageError"
_UsageError.__module__ = "tether"
_MAGICS = "%pip, %cd, %env, %%bash, %%sh, %%writefile, !cmd and name?"
_last_dir = [None]
def _magic(name, args):
    """IPython's line magics %pip, %cd and %env."""
    frame = sys._getframe(1)
    # Words split as the shell would, then each expanded: a `$path` with a
    # space in it stays one argument.
    words = [_expand(w, frame) for w in shlex.split(args)]
    args = _expand(args, frame)
    if name == "pip":
        # As IPython's %pip: this interpreter's own pip; what it installs
        # imports in the next line or cell, with no restart.
        sys.stdout.flush()
        sys.stderr.flush()
        _ns["_exit_code"] = subprocess.call([sys.executable, "-m", "pip"] + words)
        import importlib
        importlib.invalidate_caches()
    elif name == "cd":
        to = os.path.expanduser(words[0] if words else "~")
        if to == "-":
            to = _last_dir[0] or os.getcwd()
        here = os.getcwd()
        os.chdir(to)
        _last_dir[0] = here
        print(os.getcwd())
    elif name == "env":
        m = re.match(r"^([A-Za-z_]\w*)(?:\s*=\s*|\s+)(.*)$", args)
        if m is not None:
            os.environ[m.group(1)] = m.group(2)
            print("env: %s=%s" % (m.group(1), m.group(2)))
        elif args:
            return os.environ[args]
        else:
            return dict(os.environ)
    else:
        raise _UsageError("Line magic function `%%%s` not found (tether's Python kernel has %s)" % (name, _MAGICS))
def _cell_magic(name, line, body):
    """IPython's cell magics %%bash, %%sh and %%writefile."""
    frame = sys._getframe(1)
    sys.stdout.flush()
    sys.stderr.flush()
    if name in ("bash", "sh"):
        _ns["_exit_code"] = subprocess.call(["/bin/bash" if name == "bash" else "/bin/sh", "-c", body])
    elif name in ("writefile", "file"):
        args = [_expand(w, frame) for w in shlex.split(line)]
        if not args:
            raise _UsageError("%%writefile needs a file name")
        append = args[0] in ("-a", "--append")
        path = os.path.expanduser(args[-1])
        print("%s %s" % ("Appending to" if append else ("Overwriting" if os.path.exists(path) else "Writing"), path))
        with open(path, "a" if append else "w") as f:
            # IPython's cells end with a newline by the time a magic gets them.
            f.write(body if body.endswith("\n") or not body else body + "\n")
    else:
        raise _UsageError("Cell magic `%%%%%s` not found (tether's Python kernel has %s)" % (name, _MAGICS))
_tether = types.ModuleType("tether", "Calls to the host's tools from a tether cell.")
_tether.call = _call
_tether.system = _system
_tether.getoutput = _getoutput
_tether.magic = _magic
_tether.cell_magic = _cell_magic
_tether.UsageError = _UsageError
_tether.ToolError = _ToolError
sys.modules["tether"] = _tether
for _line in _cmds:
    if os.getppid() != _shim:
        # Its shim is gone (killed while this interpreter started, with
        # the cell already in the pipe): nobody reads what the cell would
        # report, and what it starts would be nobody's, out of every
        # shutdown's reach. It exits instead; the next interpreter takes
        # the kernel over (python_orphans seed 1079).
        os._exit(1)
    _seq, _dir, _marker, _token = _line.rstrip("\n").split(" ", 3)
    os.environ["TETHER_CELL"] = _marker
    if _token == "-":
        _ctok = _cred.set(None)
        os.environ.pop("TETHER_CALL", None)
        os.environ.pop("TETHER_CALL_TOKEN", None)
    else:
        _ctok = _cred.set((os.path.join(_dir, "calls"), _token))
        os.environ["TETHER_CALL"] = os.path.join(_dir, "calls")
        os.environ["TETHER_CALL_TOKEN"] = _token
    if sys.stdin is None or sys.stdin.closed:
        # `exit()` (site's Quitter) closes sys.stdin before it raises
        # SystemExit; the interpreter stays, so the next cells get the
        # no-stdin stream again (fd 0, /dev/null, was not closed).
        sys.stdin = sys.__stdin__ = open(0, "r", closefd=False)
    _out = {"outcome": "ok"}
    _busy[0] = True
    try:
        # A cancel recorded before this look (its SIGINT came while the
        # interpreter was starting, ignored until the handler above was
        # set): the cell never runs, the namespace is kept.
        if os.path.exists(os.path.join(_dir, "@TOMBSTONE@")):
            raise KeyboardInterrupt
        with open(os.path.join(_dir, "code"), "rb") as _f:
            _src = _f.read()
        # Each cell's source stays known under its own name, so tracebacks
        # show its lines, also from a function an earlier cell defined. The
        # lines are a file's as linecache reads one (split where Python's
        # tokenizer splits, each ending in a newline, the last one too):
        # the traceback places its markers under a failing expression by
        # counting that newline.
        _name = "<cell %s>" % _seq
        _text = _src.decode("utf-8", "replace")
        _lines = io.StringIO(_text, newline=None).readlines()
        if _lines and not _lines[-1].endswith("\n"):
            _lines[-1] += "\n"
        linecache.cache[_name] = (len(_text), None, _lines, _name)
        del _lines
        _flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT | _future[0]
        # A warning shows once per cell, not once per session: the
        # registry that remembers which were shown is the namespace's, and
        # cells reuse line numbers (IPython clears it per cell, gh-6611).
        _ns.pop("__warningregistry__", None)
        try:
            _tree = compile(_src, _name, "exec", ast.PyCF_ONLY_AST | _flags)
        except SyntaxError:
            _tree = _escaped(_text, _name, _flags)
            if _tree is None:
                raise
        _last = None
        if _tree.body and isinstance(_tree.body[-1], ast.Expr):
            _last = ast.Expression(_tree.body.pop().value)
        _code = compile(_tree, _name, "exec", _flags)
        _future[0] |= _code.co_flags & _FEATURES
        _flags |= _future[0]
        _run(_code)
        del _code
        if _last is not None:
            _value = _run(compile(_last, _name, "eval", _flags))
            if not _quiet(_text):
                # As at the interactive prompt: shown with its repr and
                # kept as `_` (sys.displayhook does both; None is not shown).
                sys.displayhook(_value)
            del _value
    except KeyboardInterrupt:
        _out = {"outcome": "cancelled"}
    except SystemExit as _e:
        _out = {"outcome": "exit", "code": _exit_code(_e.code)}
    except BaseException as _e:
        # The bootstrap's own frames (and the event loop's, for a cell that
        # awaits) lead the traceback; the user's start at their cell.
        _tb = _e.__traceback__
        while _tb is not None and not _tb.tb_frame.f_code.co_filename.startswith("<cell "):
            _tb = _tb.tb_next
        if isinstance(_e, _UsageError):
            # As IPython: a magic's misuse is one line, no traceback.
            print("UsageError: %s" % _e, file=sys.stderr)
        else:
            _print_tb(_e, _tb)
            # As the interactive prompt keeps it for `pdb.pm()` and
            # `traceback.print_last()`: the last uncaught exception, its
            # whole traceback, and none for a cell that did not compile
            # (its error has no frame of the cell).
            sys.last_type, sys.last_value = type(_e), _e
            sys.last_traceback = _e.__traceback__ if _tb is not None else None
            if sys.version_info >= (3, 12):
                sys.last_exc = _e
        _out = {"outcome": "error", "message": "%s: %s" % (type(_e).__name__, _e)}
    finally:
        _busy[0] = False
        _cred.reset(_ctok)
    if os.getpid() != _pid:
        # A child the cell forked (os.fork) that came to the end of the
        # cell's code ends here, as a script's child ends at the end of the
        # script (its threads joined, atexit run), with the status of how
        # the code ended: it never reports the parent's cell nor reads the
        # kernel's next ones.
        sys.exit(_out["code"] if _out["outcome"] == "exit" else int(_out["outcome"] != "ok"))
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        pass
    _ctl.write(json.dumps({"seq": int(_seq), "outcome": _out}) + "\n")
    _ctl.flush()
"#;

/// The interpreter shim's pseudo cell directory.
pub fn py_dir(kernel: &KernelLayout) -> String {
    format!("{}/py", kernel.dir())
}

/// The file through which the daemon hands the shim its next cell.
pub fn run_file(kernel: &KernelLayout) -> String {
    format!("{}/run", py_dir(kernel))
}

/// Made by the interpreter shim when it tells a cell that the
/// interpreter died during it (the loss note), before the cell's result:
/// the daemon, finding the interpreter gone before the next cell, then
/// knows its death was told. Kept on the kernel, not read from the cell's
/// journal: the client may ack that journal away (and submit the next
/// cell) before the daemon ever looks at it (python_stuck, fault-free:
/// the loss said twice).
pub fn told_file(kernel: &KernelLayout) -> String {
    format!("{}/loss-told", py_dir(kernel))
}

/// Made by the daemon when an interpreter was lost with its shim and no
/// cell's journal told it (the cell had its result already: a cancel the
/// shim settled before it was killed): the next Python cell carries the
/// note. On disk beside [`told_file`], so a restarted daemon still tells it.
pub fn untold_file(kernel: &KernelLayout) -> String {
    format!("{}/loss-untold", py_dir(kernel))
}

/// The record of the interpreter shim the daemon started
/// ([`super::kernel::LaunchRecord`]), so that a later daemon of the kernel
/// can find it and kill it.
pub fn launch_file(kernel: &KernelLayout) -> String {
    format!("{}/launch.json", py_dir(kernel))
}

/// Argv of the interpreter: the bootstrap after the environment
/// defaults of [`super::no_tty`].
pub fn argv() -> Vec<String> {
    use crate::protocol::calls::{CALLER_POLL, DEFAULT_CALL_TIMEOUT, MAX_ARGS};
    let bootstrap = BOOTSTRAP
        .replace("@MAX_ARGS@", &MAX_ARGS.to_string())
        .replace("@TIMEOUT@", &DEFAULT_CALL_TIMEOUT.as_secs().to_string())
        .replace("@POLL@", &format!("{}", CALLER_POLL.as_secs_f64()))
        .replace("@TOMBSTONE@", super::layout::TOMBSTONE_FILE);
    let code = format!("import os\n{}{bootstrap}", super::no_tty::python_prelude());
    vec!["python3".into(), "-u".into(), "-c".into(), code]
}

/// The marker suffix of the interpreter itself (`<nonce>:py`).
pub const INTERPRETER_MARK: &str = "py";

/// A Python cell's outcome: what the bootstrap reported, with a cancel
/// (KeyboardInterrupt, or an error it caused) named by its reason.
pub fn outcome(reported: CellOutcome, cancel: Option<CancelReason>) -> CellOutcome {
    match (cancel, reported) {
        (_, CellOutcome::Ok) => CellOutcome::Ok,
        (Some(reason), CellOutcome::Cancelled | CellOutcome::Error { .. }) => reason.outcome(),
        (None, CellOutcome::Cancelled) => CellOutcome::Error {
            message: "KeyboardInterrupt".into(),
        },
        (_, other) => other,
    }
}

/// A cell whose fresh interpreter's shim was killed before the cell's
/// code started: nothing of the kernel's was lost.
pub const SHIM_DIED_BEFORE_START: &str = "the Python interpreter's shim was killed (from outside) before the cell started; the next cell starts a fresh interpreter";

/// How the interpreter was lost when its shim was killed during a cell.
pub const SHIM_DIED: &str = "was lost with its shim (killed)";

/// How the interpreter was lost when it died between cells (killed from
/// outside, or its shim was).
pub const LOST_BETWEEN_CELLS: &str =
    "died after the last cell (killed from outside); this cell runs in a fresh one";

/// The end of every loss note.
const LOSS: &str = "; the kernel's namespace is lost\n";

/// The note a cell's stderr carries when the interpreter died: `detail`
/// says how.
pub fn loss_note(detail: &str) -> Vec<u8> {
    format!("tether: the Python interpreter {detail}{LOSS}").into_bytes()
}

/// Is `output` (a chunk of a cell's stderr) a loss note?
pub fn is_loss_note(output: &[u8]) -> bool {
    output.starts_with(b"tether: the Python interpreter") && output.ends_with(LOSS.as_bytes())
}

/// Does a cell's journal carry a loss note (on stderr)? Then the death of
/// its interpreter was told, and the next cell does not say it again.
pub fn carries_loss_note(read: &crate::protocol::JournalRead) -> bool {
    read.entries.iter().any(|e| {
        matches!(&e.kind, crate::protocol::EntryKind::Output { data, .. } if is_loss_note(data.as_slice()))
    })
}

/// The outcome when the interpreter died during a cell.
pub fn died(cancel: Option<CancelReason>, detail: &str) -> CellOutcome {
    match cancel {
        Some(reason) => reason.outcome(),
        None => CellOutcome::Error {
            message: format!("the Python interpreter {detail}; the kernel's namespace is lost"),
        },
    }
}
