"""Ctrl-C mid-sweep (issue 37 item 11): one line with the command that resumes, exit code 130, no
traceback (from the sweep's process or from any worker), and the command run again finishes
the sweep."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from depthscale.cli.main import interrupted_line

GRID = {"grid": [{"model": "nonlinear", "L": [1, 2], "max_steps": 4000, "eval_every": 20, "checkpoint_every": 20,
                  "eval_contexts": 64, "monitor_contexts": 64, "batch": 16, "min_steps": 4000}]}


def _env() -> dict:
    src = str(Path(__file__).resolve().parents[1] / "src")
    return dict(os.environ, PYTHONPATH=src + os.pathsep + os.environ.get("PYTHONPATH", ""))


def _wait_for_checkpoint(root: Path, proc, timeout: float = 180.0) -> None:
    t0 = time.monotonic()
    while not list(root.glob("runs/*/checkpoint.pt")):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() - t0 < timeout, "no checkpoint written"
        time.sleep(0.2)


@pytest.mark.parametrize("executor", ["inline", "process"])
def test_ctrl_c_mid_sweep(tmp_path, executor):
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps(GRID))
    root = tmp_path / "store"
    argv = ["sweep", "--grid", str(grid), "--preset", "smoke", "--store", str(root), "--executor", executor,
            "--workers", "2"] if executor == "process" else ["sweep", "--grid", str(grid), "--preset", "smoke",
                                                              "--store", str(root)]
    # its own process group, as a terminal's foreground job: Ctrl-C reaches every process in it. A
    # shell's background job (`... &`, as a CI runner may start the suite) ignores SIGINT and its
    # children inherit that; a terminal's job does not, so the child gets SIGINT's default back
    proc = subprocess.Popen([sys.executable, "-m", "depthscale", *argv], env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        _wait_for_checkpoint(root, proc)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    last = err.strip().splitlines()[-1]
    assert last == interrupted_line(argv) and last.endswith(" ".join(["depthscale", *argv]))
    time.sleep(0.5)  # the workers (process executor) are gone: none holds a live lease
    from depthscale.store.store import Store

    store = Store(root, readonly=True)
    assert all(store.leases.holder(r) is None for r in store.run_ids())


def test_interrupted_line():
    assert interrupted_line(["status", "--store", "s"]) == "depthscale: interrupted"
    line = interrupted_line(["sweep", "--grid", "my grid.json", "--store", "s"])
    assert line.endswith("with: depthscale sweep --grid 'my grid.json' --store s") and "\n" not in line
