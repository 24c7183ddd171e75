"""The template process of `forked_cli`: it imports torch and numpy once, then forks one child per
command it reads (a JSON line on stdin: the module, argv, env, cwd and the paths of the command's
stdin, stdout and stderr), answers {"pid": ...} when the child starts and {"status": ...} (its exit
code, minus the signal that killed it) when it ends. The child leaves the loop, becomes the command
(`_become`) and runs the module as `python -m` would (depthscale, or a test's probe). It ends as an
interpreter ends (`_finish`: a SystemExit's code, or a traceback and 1; non-daemon threads joined,
atexit handlers run, streams flushed) but without tearing down its modules: that pass touches every
object torch made, and in a forked child copies each page they sit on (0.63 s a command, against
0.01 s for os._exit).
"""

import io
import json
import os
import runpy
import signal
import sys
import threading

import numpy  # noqa: F401  (the imports every command pays for, paid once here)
import torch  # noqa: F401

_REPLY = os.dup(1)  # the answers; fd 1 itself becomes each child's stdout


def _serve() -> dict:
    """Fork a child per request; return the request in the child, exit when stdin closes."""
    reply = os.fdopen(_REPLY, "w", closefd=False)
    for line in sys.stdin:
        req = json.loads(line)
        pid = os.fork()
        if pid == 0:
            return req
        reply.write(json.dumps({"pid": pid}) + "\n")
        reply.flush()
        _, status = os.waitpid(pid, 0)
        reply.write(json.dumps({"status": os.waitstatus_to_exitcode(status)}) + "\n")
        reply.flush()
    raise SystemExit(0)


def _stream(fd: int, mode: str, like) -> io.TextIOWrapper:
    """A new text stream on `fd`, configured as the interpreter configured `like` at start-up."""
    raw = io.FileIO(fd, mode, closefd=False)
    buf = io.BufferedReader(raw) if mode == "r" else io.BufferedWriter(raw)
    return io.TextIOWrapper(buf, encoding=like.encoding, errors=like.errors, line_buffering=like.line_buffering,
                            write_through=getattr(like, "write_through", False))


def _become(req: dict) -> None:
    """This child becomes `python -m depthscale ARGS` run with the request's environment, working
    directory and streams, in a process group of its own (a timeout kills all it started)."""
    os.setpgid(0, 0)
    os.close(_REPLY)
    for fd, path, flags in ((0, req["stdin"], os.O_RDONLY), (1, req["stdout"], os.O_WRONLY),
                            (2, req["stderr"], os.O_WRONLY)):
        f = os.open(path, flags)
        os.dup2(f, fd)
        os.close(f)
    sys.stdin = sys.__stdin__ = _stream(0, "r", sys.__stdin__)
    sys.stdout = sys.__stdout__ = _stream(1, "w", sys.__stdout__)
    sys.stderr = sys.__stderr__ = _stream(2, "w", sys.__stderr__)
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    sys.path[0] = os.getcwd()  # what `python -m` puts first
    sys.argv = ["-m", *req["argv"]]


def _finish(code) -> None:
    """Exit as the interpreter would with SystemExit(code) (what `python -m` does at its end)."""
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:
        print(code, file=sys.stderr)
        status = 1
    threading._shutdown()  # noqa: SLF001 (what Py_Finalize does first: join non-daemon threads)
    import atexit

    atexit._run_exitfuncs()  # noqa: SLF001
    for s in (sys.stdout, sys.stderr):
        try:
            s.flush()
        except (OSError, ValueError):
            pass
    os._exit(status & 0xFF)


if __name__ == "__main__":
    _req = _serve()
    _become(_req)
    try:
        runpy.run_module(_req["module"], run_name="__main__", alter_sys=True)
        code = None
    except SystemExit as e:
        code = e.code
    except KeyboardInterrupt:  # as the interpreter: the traceback, then death by SIGINT
        sys.excepthook(*sys.exc_info())
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        code = 1
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = 1
    _finish(code)
