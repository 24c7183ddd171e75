"""Adding a model kind is one file (issue 34, item 1): the toy kind of docs/usage.md's "Adding a model
kind", saved in tmp_path and named by DEPTHSCALE_KINDS, is trained by `depthscale sweep`, read back
by `collect` and `plot curves`, sits in a store the report reads, has its `validate` applied by
config, and passes the model layer's tests of every registered kind; without the variable its name
is unknown. The section's blocks are run as written (the ```python block is the file, the ```bash
block the commands), so the doc says what this test does; nothing of the toolkit is touched."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd

import forked_cli

from depthscale.config.kind_registry import PLUGIN_ENV

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```(\w+)\n(.*?)^```\n", re.S | re.M)


def section_blocks() -> list[tuple[str, str]]:
    text = (ROOT / "docs" / "usage.md").read_text()
    section = text.split("\n## Adding a model kind\n", 1)[1].split("\n## ", 1)[0]
    return FENCE.findall(section)


def depthscale(*args, env, cwd):
    return forked_cli.run(args, env=env, cwd=cwd, timeout=900)


def test_a_toy_kind_in_one_file_sweeps_reports_and_passes_the_kind_tests(tmp_path):
    blocks = section_blocks()
    assert [lang for lang, _ in blocks] == ["python", "bash"]
    (tmp_path / "kinds").mkdir()
    (tmp_path / "kinds" / "cosine_heads.py").write_text(blocks[0][1])
    plain = {k: v for k, v in os.environ.items() if k != PLUGIN_ENV}
    plain.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}", OMP_NUM_THREADS="1",
                 MPLBACKEND="Agg")
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", blocks[1][1]], cwd=tmp_path, env=plain, capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr

    # (read as files: this process has not loaded the plug-in, so RunConfig would not know the kind)
    runs = [json.loads((d / "config.json").read_text())["config"] for d in (tmp_path / "store" / "runs").iterdir()
            if (d / "DONE").is_file()]
    assert sorted((c["model"], c["L"]) for c in runs) == [("cosine_heads", 1), ("cosine_heads", 2)]
    df = pd.read_csv(tmp_path / "runs.csv")
    assert sorted(df["L"]) == [1, 2] and set(df["model"]) == {"cosine_heads"}
    assert all(math.isfinite(R) and R > 0 for R in df["R"]) and df["mode_R"].notna().all()  # label_linear: modes
    assert (tmp_path / "curves.png").stat().st_size > 0

    env = {**plain, PLUGIN_ENV: str(tmp_path / "kinds")}
    r = depthscale("report", "--store", "store", "--out", "out", "--preset", "smoke", "--experiment", "fig6",
                   env=env, cwd=tmp_path)
    assert r.returncode == 0 and (tmp_path / "out" / "report.md").is_file(), r.stdout + r.stderr
    # the kind's validate and its facts are config's: one line, exit 2
    for flags, message in ((("--d", "1", "--N", "1"), "d must be >= 2 for model = cosine_heads"),
                           (("--depth", "2", "--loop", "1"), "loop must be 0 for model = cosine_heads")):
        r = depthscale("train", "--preset", "smoke", "--model", "cosine_heads", *flags, "--store", "other", env=env,
                       cwd=tmp_path)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and message in r.stderr, r.stderr
    # the model layer's tests of every registered kind, run with it
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider",
                        str(ROOT / "tests" / "test_model_layer.py"), "-k", "cosine_heads"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0 and re.search(r"\b[2-9] passed", r.stdout), r.stdout[-3000:] + r.stderr[-2000:]

    # without the plug-in the name is unknown: the file was the only change
    r = depthscale("sweep", "--grid", "grid.json", "--preset", "smoke", "--store", "store", "--dry-run", env=plain,
                   cwd=tmp_path)
    assert r.returncode == 2 and "model must be one of" in r.stderr and "'cosine_heads'" in r.stderr, r.stderr


def test_an_edited_plugin_kind_gets_new_run_ids_and_a_builtin_kind_keeps_its_own(tmp_path):
    """Issue 49: after a plug-in kind's file changed, its runs' ids change (the file's hash is part of
    them), so `sweep` never reads the old code's results as the new code's; a kind of the package
    hashes as before, with or without plug-ins."""
    blocks = section_blocks()
    kinds = tmp_path / "kinds"
    kinds.mkdir()
    source = kinds / "cosine_heads.py"
    source.write_text(blocks[0][1])
    code = ("from depthscale.config.run import make_config\n"
            "print(make_config('smoke', model='cosine_heads', L=2).run_id, make_config('smoke', model='linear', L=2).run_id)")
    env = {**os.environ, PLUGIN_ENV: str(kinds)}

    def ids():
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        return r.stdout.split()

    first = ids()
    assert ids() == first  # the same file: the same ids
    source.write_text(blocks[0][1] + "\n# edited: the kind's code changed\n")
    second = ids()
    assert second[0] != first[0] and second[1] == first[1]
    from depthscale.config.run import make_config

    assert make_config("smoke", model="linear", L=2).run_id == first[1]  # no plug-ins here: the same id
