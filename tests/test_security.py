"""A store cannot be turned against its user (issue 37, security): a checkpoint or a params.pt is
read as data only, so a pickle that would run code is refused in one line naming the file and
nothing in it runs; a run directory (or a file in one) that is a symlink is never written or
deleted through."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
from pathlib import Path

import pytest
import torch

from depthscale import cli
from depthscale.atomic import RefusedPickle, load_torch_data
from depthscale.config import make_config
from depthscale.store import Store, StoreError

TINY = {"model": "nonlinear", "max_steps": 20, "eval_contexts": 64, "monitor_contexts": 64, "batch": 16,
        "eval_every": 10, "checkpoint_every": 10}


class _Evil:
    """Unpickled by a full unpickler, it creates the marker file (through os.system)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


class _EvilExec:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return exec, (f"open({str(self.marker)!r}, 'w').close()",)


def _evil_torch_file(path: Path, marker: Path, evil=_Evil, wrap=True) -> bytes:
    """A torch file (zip format) whose pickle would create `marker` if loaded unsafely."""
    buf = io.BytesIO()
    torch.save({"step": 10, "params": {}, "x": evil(marker)} if wrap else evil(marker), buf)
    path.write_bytes(buf.getvalue())
    return buf.getvalue()


def run_cli(capsys, *argv) -> tuple[int, str, list[str]]:
    capsys.readouterr()
    code = cli.main([str(a) for a in argv])
    out = capsys.readouterr()
    progress = re.compile(r"^depthscale: (preset |run [0-9a-f]{16} done: |\S+ \S+ pack of \d+: step )")
    return code, out.out, [ln for ln in out.err.splitlines() if not progress.match(ln)]


@pytest.mark.parametrize("evil", [_Evil, _EvilExec])
def test_load_torch_data_refuses_code(tmp_path, evil):
    marker = tmp_path / "marker"
    _evil_torch_file(tmp_path / "a.pt", marker, evil)
    with pytest.raises(RefusedPickle) as e:
        load_torch_data(tmp_path / "a.pt")
    assert not marker.exists()
    msg = str(e.value)
    assert "\n" not in msg and str(tmp_path / "a.pt") in msg and "refused" in msg
    # a bare pickle (not torch's zip format) is refused the same way
    import pickle

    (tmp_path / "b.pt").write_bytes(pickle.dumps(evil(marker), protocol=2))
    with pytest.raises(RefusedPickle):
        load_torch_data(tmp_path / "b.pt")
    for protocol in (0, 4, 5):  # opcodes the data-only reader does not know: unreadable, nothing runs
        (tmp_path / "c.pt").write_bytes(pickle.dumps(evil(marker), protocol=protocol))
        with pytest.raises(ValueError):
            load_torch_data(tmp_path / "c.pt")
    assert not marker.exists()


def test_load_torch_data_reads_tensors_and_plain_data(tmp_path):
    obj = {"step": 3, "t": 2.5, "inf": float("inf"), "none": None, "s": "x", "l": [1, 2.0],
           "w": {"a": torch.arange(4.0)}}
    torch.save(obj, tmp_path / "ok.pt")
    back = load_torch_data(tmp_path / "ok.pt")
    assert torch.equal(back["w"]["a"], obj["w"]["a"]) and {k: v for k, v in back.items() if k != "w"} == {
        k: v for k, v in obj.items() if k != "w"}


def test_malicious_checkpoint_is_refused_and_the_run_restarts(tmp_path, capsys):
    """A checkpoint.pt whose pickle runs os.system, in the directory of a run the sweep will
    train: the sweep refuses it in one warning line naming the file, nothing runs, and the run
    trains from step 0 to done (exit 0)."""
    marker = tmp_path / "marker"
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps({"grid": [TINY]}))
    root = tmp_path / "store"
    rid = make_config("smoke", **TINY).run_id
    (root / "runs" / rid).mkdir(parents=True)
    ck = root / "runs" / rid / "checkpoint.pt"
    _evil_torch_file(ck, marker)
    code, out, err = run_cli(capsys, "sweep", "--grid", grid, "--preset", "smoke", "--store", root)
    assert code == 0, err
    assert not marker.exists()
    assert len(err) == 1 and err[0].startswith("depthscale: warning: ignoring checkpoint ") and str(ck) in err[0]
    assert "refused" in err[0] and "posix.system" in err[0]
    assert Store(root, readonly=True).run_state(rid) == "done"


def test_checkpoint_of_wrong_shape_is_ignored(tmp_path):
    """A checkpoint that loads as data but is not one the trainer wrote (a list; a dict naming a
    config without the trainer's entries, or with a negative step) is ignored with a warning,
    never handed to the trainer."""
    store = Store(tmp_path / "s")
    rid = make_config("smoke", **TINY).run_id
    d = store.run_dir(rid)
    for obj in ([1, 2], {"step": 1, "config": {}}, {"step": -1, "params": {}, "adam": {"m": {}, "v": {}, "t": 1},
                                        "state": {}, "config": {}, "pack": []}):
        torch.save(obj, d / "checkpoint.pt")
        with pytest.warns(UserWarning, match="ignoring unreadable checkpoint"):
            assert store.load_checkpoint(rid) is None


def test_malicious_params_are_refused(tmp_path):
    """params.pt replaced by a pickle that runs code, with DONE's checksum made to match: loading
    the model refuses it (StoreError, one line) and nothing runs."""
    from depthscale.training import run_pack

    store = Store(tmp_path / "s")
    cfg = make_config("smoke", **TINY)
    run_pack([cfg], store)
    d = store.run_path(cfg.run_id)
    marker = tmp_path / "marker"
    blob = _evil_torch_file(d / "params.pt", marker, wrap=False)
    done = json.loads((d / "DONE").read_text())
    done.update(params_sha256=hashlib.sha256(blob).hexdigest(), params_bytes=len(blob))
    (d / "DONE").write_text(json.dumps(done))
    with pytest.raises(StoreError) as e:
        Store(store.root, readonly=True).load_params(cfg.run_id)
    assert not marker.exists() and "\n" not in str(e.value) and "params.pt" in str(e.value)
