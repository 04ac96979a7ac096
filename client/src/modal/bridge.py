# tether's Modal bridge: one long-lived process per client that runs every
# exec of that client in one Modal sandbox through Modal's Python client,
# so `import modal` and the sandbox lookup are paid once, not per exec.
#
# argv[1]: the sandbox, as JSON: {"id": "sb-..."} or {"app": A, "name": N}.
# stdin: requests, one JSON object per line; stdout: replies and stream
# chunks, one JSON object per line, each tagged with its request's id.
# Bytes travel as base64. Several requests are in flight at once (one
# thread each); replies come in any order.
#
#   {"id":1,"op":"exec","argv":[...],"stdin":B64}
#       -> {"id":1,"rc":N,"stdout":B64,"stderr":B64}
#   {"id":2,"op":"open","argv":[...]}          a command with open pipes
#       -> {"id":2,"opened":true}
#       -> {"id":2,"fd":1|2,"data":B64} ...   its output, as it comes
#       -> {"id":2,"fd":1|2,"eof":true}        ("detail" when reading failed)
#   {"id":2,"op":"write","data":B64}           to its stdin, in order
#   {"id":2,"op":"close"}                      ends its stdin (EOF)
#   any failure: {"id":N,"error":{"kind":"unreachable"|"io","detail":...}}
#       "unreachable": the command was not started; "io": it may have run.
#
# First line out: {"ready":true}, or {"fatal":{...}} and exit 3 when the
# `modal` package cannot be imported. The bridge never calls
# `terminate()`: a command is stopped by closing its stdin, and the
# sandbox is not the bridge's to end. When its own stdin ends (the client
# went away) it closes the stdin of every open command and exits.
#
# Standard library and `modal` only: it runs in whatever python3 the user
# points tether at.

import base64
import json
import os
import queue
import sys
import threading

_out = sys.stdout.buffer
_out_lock = threading.Lock()
# Only protocol lines go to stdout: anything else printed (a library's
# warning) goes to stderr, which the client quotes when the bridge fails.
sys.stdout = sys.stderr


def send(obj):
    line = (json.dumps(obj, separators=(",", ":")) + "\n").encode()
    with _out_lock:
        try:
            _out.write(line)
            _out.flush()
        except (BrokenPipeError, OSError):
            # Nobody reads us any more: the client is gone.
            os._exit(0)


def b64(data):
    if isinstance(data, str):
        data = data.encode()
    return base64.b64encode(bytes(data or b"")).decode("ascii")


def describe(e):
    return "%s: %s" % (type(e).__name__, e)


target = json.loads(sys.argv[1])

try:
    import modal
    import modal.exception as mexc
except Exception as e:
    send({"fatal": {"kind": "unreachable", "detail":
          "the modal Python package is not importable by %s (%s); install it with "
          "`pip install modal` or point TETHER_MODAL_PYTHON at a python3 that has it"
          % (sys.executable, e)}})
    sys.exit(3)

# Errors that say the command was never started (when raised before it was).
NOT_STARTED = tuple(getattr(mexc, n) for n in (
    "AuthError", "NotFoundError", "SandboxTerminatedError",
    "PermissionDeniedError", "InvalidError") if hasattr(mexc, n))

_sandbox = None
_sandbox_lock = threading.Lock()


def sandbox():
    global _sandbox
    with _sandbox_lock:
        if _sandbox is None:
            if "id" in target:
                _sandbox = modal.Sandbox.from_id(target["id"])
            else:
                _sandbox = modal.Sandbox.from_name(target["app"], target["name"])
        return _sandbox


def forget_sandbox():
    # Looked up again next time (a named sandbox may have been replaced).
    global _sandbox
    with _sandbox_lock:
        _sandbox = None


def start(rid, argv):
    """The started process, or None after replying with the error."""
    try:
        return sandbox().exec(*argv, text=False)
    except NOT_STARTED as e:
        forget_sandbox()
        send({"id": rid, "error": {"kind": "unreachable", "detail": describe(e)}})
    except Exception as e:
        send({"id": rid, "error": {"kind": "io", "detail": describe(e)}})
    return None


def run_exec(rid, argv, data):
    proc = start(rid, argv)
    if proc is None:
        return
    try:
        if data:
            proc.stdin.write(data)
        proc.stdin.write_eof()
        proc.stdin.drain()
        out = proc.stdout.read()
        err = proc.stderr.read()
        rc = proc.wait()
    except Exception as e:
        send({"id": rid, "error": {"kind": "io", "detail": describe(e)}})
        return
    send({"id": rid, "rc": -1 if rc is None else rc, "stdout": b64(out), "stderr": b64(err)})


_streams = {}
_streams_lock = threading.Lock()


def run_stream(rid, argv):
    proc = start(rid, argv)
    if proc is None:
        return
    writes = queue.Queue()
    feeder = threading.Thread(target=feed, args=(rid, proc, writes), daemon=True)
    feeder.start()
    with _streams_lock:
        _streams[rid] = (writes, feeder)
    send({"id": rid, "opened": True})
    threading.Thread(target=pump, args=(rid, proc.stderr, 2), daemon=True).start()
    pump(rid, proc.stdout, 1)


def pump(rid, reader, fd):
    end = {"id": rid, "fd": fd, "eof": True}
    try:
        for chunk in reader:
            if chunk:
                send({"id": rid, "fd": fd, "data": b64(chunk)})
    except Exception as e:
        end["detail"] = describe(e)
    send(end)


def feed(rid, proc, writes):
    while True:
        data = writes.get()
        try:
            if data is None:
                proc.stdin.write_eof()
                proc.stdin.drain()
                return
            proc.stdin.write(data)
            proc.stdin.drain()
        except Exception as e:
            send({"id": rid, "error": {"kind": "io", "detail": "writing: " + describe(e)}})
            return


def close_stream(rid):
    with _streams_lock:
        entry = _streams.pop(rid, None)
    if entry is not None:
        entry[0].put(None)
    return entry


def main():
    send({"ready": True})
    for line in sys.stdin.buffer:
        if not line.strip():
            continue
        req = json.loads(line)
        rid, op = req.get("id"), req.get("op")
        if op == "exec":
            data = base64.b64decode(req.get("stdin", ""))
            threading.Thread(target=run_exec, args=(rid, req["argv"], data), daemon=True).start()
        elif op == "open":
            threading.Thread(target=run_stream, args=(rid, req["argv"]), daemon=True).start()
        elif op == "write":
            with _streams_lock:
                entry = _streams.get(rid)
            if entry is not None:
                entry[0].put(base64.b64decode(req.get("data", "")))
        elif op == "close":
            close_stream(rid)
        else:
            send({"id": rid, "error": {"kind": "unreachable", "detail": "unknown op %r" % (op,)}})
    # The client is gone: end every open command's stdin (never terminate),
    # briefly, then go.
    with _streams_lock:
        rids = list(_streams)
    feeders = [e[1] for e in (close_stream(r) for r in rids) if e is not None]
    for f in feeders:
        f.join(timeout=2)
    _out.flush()
    os._exit(0)


main()
