"""`python -m depthscale ARGS` as a process of its own, without paying torch's import each time.

The suite runs the CLI as a real process ≈ 110 times, and each paid ≈ 2 s of CPU importing torch: a
fifth of the suite's CPU (issue 50). `run` asks a template process (tests/cli_template.py, one per
test worker, started at first use) to fork a child that has torch imported already. The child is
still a process of its own: its own memory and exit code, its stdout and stderr, the command's
environment, working directory and argv, `python -m`'s sys.path[0], its own process group; it runs
depthscale's __main__ and exits as an interpreter does. It differs from a fresh interpreter only in
what was fixed when the template started: so where the command's environment differs from the
template's in a variable read then (PYTHON*, OMP_*, MKL_*, KMP_*, GOMP_*, OPENBLAS_*, TORCH_*, LD_*,
MALLOC_*), and wherever DEPTHSCALE_TEST_FORK=0, `run` is a plain `subprocess.run`. Tests of signals,
start-up or the interpreter itself keep their own `subprocess` calls.
"""

from __future__ import annotations

import atexit
import json
import locale
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

_TEMPLATE = Path(__file__).with_name("cli_template.py")
_AT_START = ("PYTHON", "OMP_", "MKL_", "KMP_", "GOMP_", "OPENBLAS_", "TORCH_", "LD_", "MALLOC_")
_state: dict = {"proc": None, "env": None}
_lock = threading.Lock()


@atexit.register
def _close() -> None:
    """The template ends when its stdin closes (at the test worker's exit)."""
    proc = _state["proc"]
    if proc is not None:
        proc.stdin.close()
        proc.stdout.close()
        proc.wait()


def _read_at_start(env: dict) -> dict:
    return {k: v for k, v in env.items() if k.startswith(_AT_START)}


def forkable(env: dict) -> bool:
    """Whether a child of the template is the process `env` would start (see the module's doc)."""
    if os.environ.get("DEPTHSCALE_TEST_FORK", "1") == "0" or not hasattr(os, "fork"):
        return False
    started = _state["env"] if _state["proc"] is not None and _state["proc"].poll() is None else os.environ
    return _read_at_start(env) == _read_at_start(dict(started))


def _template() -> subprocess.Popen:
    proc = _state["proc"]
    if proc is None or proc.poll() is not None:
        _state["env"] = dict(os.environ)
        proc = subprocess.Popen([sys.executable, str(_TEMPLATE)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True, bufsize=1, env=_state["env"])
        _state["proc"] = proc
    return proc


def _answer(proc: subprocess.Popen, timeout: float | None) -> dict | None:
    """The template's next answer, or None after `timeout` seconds."""
    if timeout is not None and not select.select([proc.stdout], [], [], timeout)[0]:
        return None
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError(f"the CLI template process ended (exit {proc.wait()})")
    return json.loads(line)


def _read(path: str) -> str:
    with open(path, encoding=locale.getpreferredencoding(False)) as f:  # universal newlines, as text=True
        return f.read()


def run(args, env: dict | None = None, cwd=None, timeout: float | None = None, input: str | None = None,
        module: str = "depthscale") -> subprocess.CompletedProcess:
    """subprocess.run([sys.executable, "-m", module, *args], env=env, cwd=cwd, timeout=timeout,
    input=input, capture_output=True, text=True), from a child of the template where it is the same."""
    argv = [str(a) for a in args]
    cmd = [sys.executable, "-m", module, *argv]
    env = dict(os.environ if env is None else env)
    if not forkable(env):
        return subprocess.run(cmd, env=env, cwd=cwd, timeout=timeout, input=input, capture_output=True, text=True)
    with _lock, tempfile.TemporaryDirectory(prefix="forked_cli_") as tmp:
        paths = {k: os.path.join(tmp, k) for k in ("stdin", "stdout", "stderr")}
        for k, p in paths.items():
            Path(p).write_text((input or "") if k == "stdin" else "")
        proc = _template()
        req = {"module": module, "argv": argv, "env": env, "cwd": str(Path(cwd or os.getcwd()).resolve()), **paths}
        proc.stdin.write(json.dumps(req) + "\n")
        proc.stdin.flush()
        pid = _answer(proc, None)["pid"]
        done = _answer(proc, timeout)
        if done is None:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:  # it ended just now
                pass
            _answer(proc, None)
            raise subprocess.TimeoutExpired(cmd, timeout, _read(paths["stdout"]), _read(paths["stderr"]))
        return subprocess.CompletedProcess(cmd, done["status"], _read(paths["stdout"]), _read(paths["stderr"]))
