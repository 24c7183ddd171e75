"""Issue 51, item 4 ("every fuzz case clean"): the inputs of tests/test_fuzz_fourth.py, each the
one line that reproduced a traceback, a hang, a silent success or a write outside the store."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from test_experiment_plugin import TOY
import forked_cli

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```(\w+)\n(.*?)^```\n", re.S | re.M)
DEEP = 100_000  # a key nested this deep: json's parser recurses once per level
DEEP_JSON = '{"a": ' * DEEP + "1" + "}" * DEEP


def toy_kind() -> str:
    """The toy kind of docs/usage.md's "Adding a model kind" (the file as the doc writes it)."""
    text = (ROOT / "docs" / "usage.md").read_text()
    section = text.split("\n## Adding a model kind\n", 1)[1].split("\n## ", 1)[0]
    return FENCE.findall(section)[0][1]


# where a raise goes in each plug-in method: the line it is put before
KIND_LINES = {"forward": "        X, y, xq = (X_BxPxd", "validate": "        if cfg.d < 2:",
              "from_configs": "        return cls(cfgs[0])"}
EXPERIMENT_LINES = {"figure": "    fig, ax = pl.new_figure(1)\n", "table": "    s = res.series(",
                    "claim": "    require(res, "}
RAISES = {"SystemExit(0)": "raise SystemExit(0)", "SystemExit('bye')": "raise SystemExit('bye')",
          "GeneratorExit": "raise GeneratorExit", "custom": "raise type('Bye', (BaseException,), {})('custom')"}


def kind_raising(method: str, raise_line: str) -> str:
    line = KIND_LINES[method]
    return toy_kind().replace(line, f"        {raise_line}\n{line}", 1)


def experiment_raising(where: str, raise_line: str) -> str:
    line = EXPERIMENT_LINES[where]
    return TOY.replace(line, f"    {raise_line}\n{line}", 1)


def depthscale(*args, env: dict | None = None, cwd=None, timeout: float = 300) -> subprocess.CompletedProcess:
    full = {**os.environ, "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg", **(env or {})}
    return forked_cli.run(args, env=full, cwd=cwd, timeout=timeout)


def one_line_error(r: subprocess.CompletedProcess, *needles: str) -> str:
    """The one `depthscale: error:` line of a command that exited 2 with no traceback."""
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("depthscale: error:")]
    assert r.returncode == 2 and len(errors) == 1 and "Traceback" not in r.stderr, (r.returncode, r.stdout, r.stderr)
    assert all(n in errors[0] for n in needles), errors[0]
    return errors[0]


def finished_store(root: Path, depths=(1, 2)) -> tuple[Path, list[str]]:
    """A store at `root` with one finished smoke run per depth, all in the manifest "train"."""
    from depthscale.config.run import make_config, run_id
    from depthscale.store import manifests
    from depthscale.store.store import Store

    store, ids = Store(root), []
    for L in depths:
        cfg = make_config("smoke", L=L)
        rid = run_id(cfg)
        store.write_config(cfg)
        store.finish(rid, {"R": 1.0 + 1.0 / L, "R_L": 1.0, "stopped_because": "converged"},
                     {"step": [0, 10], "R": [2.0, 1.0]})
        ids.append(rid)
    manifests.write(store, "train", ids)
    return root, ids


# what a damaged JSON file holds: nested 100,000 deep, valid JSON of the wrong shape
DAMAGED = {"deep": DEEP_JSON, "list": "[1, 2]", "runs5": '{"runs": 5}', "string_ids": '{"run_ids": "30e3abc"}'}


def torch_blob(numel: int, compress: bool) -> bytes:
    """torch.save of one tensor of `numel` zeros; with `compress`, its zip records deflated (what
    torch never writes: 2 GB of tensor fit in 2 MB)."""
    import io
    import zipfile

    import torch

    buf = io.BytesIO()
    torch.save({"step": 0, "x": torch.zeros(numel)}, buf)
    if not compress:
        return buf.getvalue()
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as z, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as w:
        for info in z.infolist():
            w.writestr(info.filename, z.read(info.filename))
    return out.getvalue()


def sparse(path: Path, size: int) -> None:
    """A file of `size` bytes (zeros) that takes almost nothing on disk."""
    with open(path, "wb") as fh:
        fh.truncate(size)
