"""The fused kernel's first-use build (issue 28 item 7): a build directory per install, a lock
that a dead holder does not keep, and no compiler left running when a build is killed."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from depthscale.data import kernels


def test_two_installs_build_in_two_directories(tmp_path, monkeypatch):
    monkeypatch.setenv(kernels.KERNEL_DIR_ENV, str(tmp_path))
    a, b = kernels.build_directory(tmp_path / "a" / "depthscale"), kernels.build_directory(tmp_path / "b" / "depthscale")
    assert a != b and a.parent == b.parent == tmp_path
    assert a.name.startswith(kernels.extension_name()) and b.name.startswith(kernels.extension_name())
    assert kernels.build_directory() == kernels.build_directory(Path(kernels.__file__).parents[1])  # this install's


def test_a_dead_holders_lock_is_taken_over_at_once(tmp_path, capsys):
    d = tmp_path / "build"
    d.mkdir()
    # what a SIGKILLed build leaves: our lock file naming a process that is gone, and torch's lock
    # (which makes torch's builder wait for ever)
    (d / "depthscale.lock").write_text(json.dumps({"pid": 2 ** 22 + 12345, "host": "here", "started": 0}))
    (d / "lock").write_text("")
    fd = kernels.acquire_build_lock(d, poll=60)  # a wait would take a minute per poll
    try:
        assert json.loads((d / "depthscale.lock").read_text())["pid"] == os.getpid()
        assert not (d / "lock").exists()
        assert capsys.readouterr().err == ""  # taken over without a word
    finally:
        os.close(fd)


HOLD = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
os.write(fd, b'{"pid": %d, "host": "h", "started": 0}' % os.getpid())
print("held", flush=True)
sys.stdin.readline()
"""


def test_a_live_holder_is_waited_for_with_one_line(tmp_path, capsys):
    d = tmp_path / "build"
    d.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(d / "depthscale.lock")], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        import threading

        got = []
        t = threading.Thread(target=lambda: got.append(kernels.acquire_build_lock(d, poll=0.05)))
        t.start()
        t.join(1.0)
        assert not got and t.is_alive()  # waiting while the holder lives
        holder.stdin.write("go\n")
        holder.stdin.flush()
        t.join(60)
        assert got
        os.close(got[0])
    finally:
        holder.kill()
        holder.wait()
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("depthscale: waiting for the fused kernel's build by pid "
                                               f"{holder.pid} on h")


def _builders(root: str) -> list[tuple[int, str]]:
    """The live processes of a build under `root` (its environment names it), with their command."""
    found = []
    for d in Path("/proc").glob("[0-9]*"):
        try:
            if f"{kernels.KERNEL_DIR_ENV}={root}".encode() in (d / "environ").read_bytes().split(b"\0"):
                stat = (d / "stat").read_text()
                if stat[stat.rindex(")") + 2] != "Z":
                    found.append((int(d.name), Path((d / "cmdline").read_bytes().split(b"\0")[0].decode()).name))
        except (OSError, IndexError):
            pass
    return found


STATUS = "from depthscale.data import kernels; print(kernels.status()['available'])"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("g++") is None or not kernels.enabled() or not Path("/proc/self/environ").exists(),
                    reason="needs g++, the kernel on, and /proc")
def test_a_build_killed_mid_compile_leaves_no_compiler_and_the_next_build_does_not_wait(tmp_path):
    root = str(tmp_path / "kernels")  # a build of its own: the shared one is not disturbed
    env = dict(os.environ, **{kernels.KERNEL_DIR_ENV: root})
    for attempt in ("first", "next"):
        # the next build takes the dead build's lock at once (a stale torch lock would make torch's
        # builder wait before any compiler starts) and reaches its compiler; it is killed there too, so
        # the test does not pay for a whole build (the shared kernel's build, once per test run, and
        # the main job's prove that a build finishes)
        build = subprocess.Popen([sys.executable, "-c", STATUS], env=env, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, text=True)
        try:
            for _ in range(1200):  # the compiler starts within seconds (at most 2 minutes on a crowded machine)
                if any(name == "cc1plus" for _, name in _builders(root)):
                    break
                assert build.poll() is None, (attempt, build.stderr.read())
                time.sleep(0.1)
            else:
                pytest.fail(f"{attempt} build: no compiler started: {_builders(root)}")
            build.send_signal(signal.SIGKILL)
            build.wait()
            for _ in range(100):
                left = _builders(root)
                if not left:
                    break
                time.sleep(0.1)
            assert left == [], (attempt, left)  # no ninja, c++ or cc1plus left running
            assert "waiting" not in build.stderr.read(), attempt
        finally:
            build.kill()
            build.wait()
