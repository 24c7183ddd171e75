"""benchmarks/gpu_check.sh (issue 29, item 4) in its dry mode on the CPU: every part runs and the
JSON holds what the device run will be judged by. CI never needs a GPU."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_check_dry_run_writes_every_part(tmp_path):
    # the script runs `python`: the interpreter running these tests, whatever PATH the suite was started with
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    p = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--dry", str(tmp_path)],
                       capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    res = json.loads((tmp_path / "gpu_check.json").read_text())
    assert res["mode"] == "dry" and res["device"] == "cpu"
    par = res["parity"]
    assert "error" not in par, par  # a part that raised is recorded as its error: name it
    assert set(par["runs"]) == {"nonlinear difficult k=2 (0,0) L=4", "linear easy (2,1) L=4",
                                "layer_values difficult L=2"}
    for name, run in par["runs"].items():  # the CPU against itself: the same numbers, bit for bit
        assert run["R_cpu"] is not None and run["R_cpu"] == run["R_device"] and run["ok"], (name, run)
    assert par["stream_bit_for_bit"] and all(par["stream_bit_for_bit"].values())
    assert par["pass"] is True
    b = res["bench_smoke"]
    assert b["packed_ms"] > 0 and b["speedup"] > 0 and "error" not in b
    pk = res["pack"]
    assert pk["rc"] == 0 and pk["runs"] >= 2 and all(r is not None for r in pk["R"].values()), pk
    assert pk["ms_per_step"] > 0 and "pass" not in pk  # speed targets are judged on the device only
    sp = res["sampler"]  # the host's sampler, timed; its target is judged on the device machine only
    assert sp["contexts"] == 32 and sp["ms_per_batch"] > 0 and sp["ms_per_seed_three_in_one_call"] > 0, sp
    assert "pass" not in sp
    assert res["pass"] == {"parity": True}
    assert "gpu_check pack:" in p.stdout


def test_the_cpu_reference_is_a_committed_two_core_bench():
    # the device's ">= 5x the 2-core step" is read against this file: it must exist (gpu_check skips the
    # ratio without it) and be a 2-thread cpu-preset bench of the packed engine
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks" / "gpu_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    ref = json.loads(mod.CPU_REFERENCE.read_text())
    assert ref["machine"]["threads"] == 2
    assert 0.001 < ref["packed_seconds_per_sweep_step"] < 0.1
    assert ref["work"]["preset"] == "cpu"
