"""The suite's forked CLI processes (tests/forked_cli.py) against real ones: the same exit code,
stdout and stderr for every way a `python -m` module can end, the command's environment, working
directory, argv, stdin and sys.path[0]; a timeout that kills the command and all it started; and a
plain subprocess wherever a variable read at start-up differs."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

import forked_cli

PROBE = r'''
import atexit, os, sys, threading, time
what = sys.argv[1]
print("argv", sys.argv[1:], "torch-before", "torch" in sys.modules)
print("cwd", os.getcwd(), "path0", sys.path[0], "env", os.environ.get("PROBE_VALUE"))
if what == "stdin":
    print("stdin", sys.stdin.read().upper())
elif what == "atexit":
    atexit.register(lambda: print("atexit ran", flush=True))
elif what == "thread":
    threading.Thread(target=lambda: (time.sleep(0.3), print("thread done", flush=True))).start()
elif what == "partial":
    sys.stdout.write("no newline at the end")
elif what == "exit3":
    sys.exit(3)
elif what == "exit-text":
    sys.exit("bye in words")
elif what == "raise":
    raise ValueError("probe failed")
elif what == "stderr":
    print("to stderr", file=sys.stderr)
elif what == "hang":
    child = __import__("subprocess").Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    open(sys.argv[2], "w").write(f"{os.getpid()} {child.pid}")
    time.sleep(60)
'''


@pytest.fixture
def probe_dir(tmp_path):
    (tmp_path / "probe_mod.py").write_text(PROBE)
    return tmp_path


def _plain(args, env, cwd, input=None):
    return subprocess.run([sys.executable, "-m", "probe_mod", *args], env=env, cwd=cwd, input=input,
                          capture_output=True, text=True)


@pytest.mark.parametrize("what", ["plain", "stdin", "atexit", "thread", "partial", "exit3", "exit-text", "stderr"])
def test_a_forked_command_ends_as_a_real_process(probe_dir, what):
    env = {**os.environ, "PROBE_VALUE": "x y"}
    forked = forked_cli.run([what], env=env, cwd=probe_dir, input="abc", module="probe_mod")
    real = _plain([what], env, probe_dir, input="abc")
    assert forked.stdout.replace("torch-before True", "torch-before False") == real.stdout
    assert (forked.returncode, forked.stderr) == (real.returncode, real.stderr)
    assert "torch-before True" in forked.stdout  # forked from the template, not started afresh


def test_an_uncaught_exception_is_a_traceback_and_exit_1(probe_dir):
    forked = forked_cli.run(["raise"], cwd=probe_dir, module="probe_mod")
    real = _plain(["raise"], dict(os.environ), probe_dir)
    assert forked.returncode == real.returncode == 1
    assert forked.stderr.startswith("Traceback") and real.stderr.startswith("Traceback")
    assert forked.stderr.splitlines()[-1] == real.stderr.splitlines()[-1] == "ValueError: probe failed"


def test_a_timeout_kills_the_command_and_what_it_started(probe_dir):
    pids = probe_dir / "pids"
    with pytest.raises(subprocess.TimeoutExpired):
        forked_cli.run(["hang", pids], cwd=probe_dir, timeout=3, module="probe_mod")
    for pid in map(int, pids.read_text().split()):
        for _ in range(50):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"pid {pid} outlived the timeout")
    assert forked_cli.run(["plain"], cwd=probe_dir, module="probe_mod").returncode == 0  # the template lives on


def test_a_variable_read_at_start_up_takes_a_plain_subprocess(monkeypatch):
    forked_cli.run(["--version"])  # the template started with this worker's environment
    env = dict(os.environ)
    assert forked_cli.forkable(env)
    for var, value in (("OMP_NUM_THREADS", "7"), ("PYTHONHASHSEED", "5"), ("LD_PRELOAD", "x.so"), ("TORCH_X", "1")):
        assert not forked_cli.forkable({**env, var: value}), var
    assert forked_cli.forkable({**env, "DEPTHSCALE_KERNEL_DIR": "/elsewhere"})  # read when a command runs
    monkeypatch.setenv("DEPTHSCALE_TEST_FORK", "0")
    assert not forked_cli.forkable(env)


def test_the_depthscale_command_forked_and_real_agree(tmp_path):
    for args in (["--version"], ["train", "--preset", "smoke", "--a", "-1", "--store", tmp_path / "s"]):
        forked = forked_cli.run(args)
        real = subprocess.run([sys.executable, "-m", "depthscale", *map(str, args)], capture_output=True, text=True)
        assert (forked.returncode, forked.stdout, forked.stderr) == (real.returncode, real.stdout, real.stderr)
    assert forked.returncode == 2 and not (tmp_path / "s").exists()
