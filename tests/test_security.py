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

from depthscale.base.atomic import RefusedPickle, load_torch_data
from depthscale.base.errors import StoreError
from depthscale.cli import main as cli
from depthscale.config.run import make_config
from depthscale.store.store import Store
from depthscale.train import checkpoint

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
    assert len(err) == 1 and err[0].startswith("depthscale: warning: ignoring unreadable checkpoint of run ") \
        and rid in err[0]
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
            assert checkpoint.read(store, rid) is None


def test_malicious_params_are_refused(tmp_path):
    """params.pt replaced by a pickle that runs code, with DONE's checksum made to match: loading
    the model refuses it (StoreError, one line) and nothing runs."""
    from depthscale.train.training import run_pack

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


# --- symbolic links: nothing is read, written or deleted through one ---------------------------

GRID2 = [dict(TINY, L=[1, 2])]


def _snapshot(root: Path) -> dict:
    """Every entry under `root` (links not followed): its kind and, for files, its bytes."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        out[rel] = ("link", os.readlink(p)) if p.is_symlink() else ("file", p.read_bytes()) if p.is_file() else ("dir",)
    return out


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict:
    """A store with two finished runs (L = 1, 2) and its grid."""
    root = tmp_path_factory.mktemp("links")
    grid = root / "grid.json"
    grid.write_text(json.dumps({"grid": GRID2}))
    assert cli.main(["sweep", "--grid", str(grid), "--preset", "smoke", "--store", str(root / "store")]) == 0
    ids = [make_config("smoke", **dict(TINY, L=L)).run_id for L in (1, 2)]
    return {"root": root / "store", "grid": grid, "ids": ids}


@pytest.fixture
def store_copy(trained, tmp_path) -> Path:
    import shutil

    dst = tmp_path / "store"
    shutil.copytree(trained["root"], dst, symlinks=True)
    return dst


def _status(capsys, root: Path) -> dict:
    code, out, err = run_cli(capsys, "status", "--store", root, "--json")
    assert code == 0 and err == [], err
    return json.loads(out)[0]


def test_run_directory_linked_outside_the_store(trained, store_copy, tmp_path, capsys):
    """runs/<id> a symlink to a directory elsewhere holding a run's five files: status names the
    run broken; the sweep removes the link (only the link), trains the run in a real directory,
    and the directory outside is untouched, byte for byte."""
    import shutil

    rid = trained["ids"][0]
    outside = tmp_path / "outside"
    shutil.copytree(store_copy / "runs" / rid, outside)
    shutil.rmtree(store_copy / "runs" / rid)
    (store_copy / "runs" / rid).symlink_to(outside)
    before = _snapshot(outside)
    rec = _status(capsys, store_copy)
    assert rec["done"] == 1 and rec["broken"] == 1
    info = Store(store_copy, readonly=True).run_info(rid)
    assert info["state"] == "broken" and "symbolic link" in info["reason"] and rid in info["reason"]
    code, out, err = run_cli(capsys, "sweep", "--grid", trained["grid"], "--preset", "smoke", "--store",
                             store_copy)
    assert code == 0, err
    assert len(err) == 1 and "symbolic link" in err[0] and rid in err[0], err  # one line names it
    assert _snapshot(outside) == before
    d = store_copy / "runs" / rid
    assert d.is_dir() and not d.is_symlink() and Store(store_copy, readonly=True).run_state(rid) == "done"


def test_two_runs_linked_to_one_directory(trained, store_copy, capsys):
    """runs/B a symlink to runs/A: B is broken (named), A stays done; a sweep trains B in its own
    directory and A's files are not rewritten."""
    a, b = trained["ids"]
    import shutil

    shutil.rmtree(store_copy / "runs" / b)
    (store_copy / "runs" / b).symlink_to(a)  # relative: runs/<a>
    before = _snapshot(store_copy / "runs" / a)
    store = Store(store_copy, readonly=True)
    assert store.run_state(a) == "done" and store.run_state(b) == "broken"
    assert "symbolic link" in store.broken_reason(b) and not store.is_done(b)
    assert b in store.run_ids()
    rec = _status(capsys, store_copy)
    assert rec["done"] == 1 and rec["broken"] == 1
    code, _, err = run_cli(capsys, "sweep", "--grid", trained["grid"], "--preset", "smoke", "--store", store_copy)
    assert code == 0, err
    assert _snapshot(store_copy / "runs" / a) == before
    assert not (store_copy / "runs" / b).is_symlink() and Store(store_copy, readonly=True).run_state(b) == "done"


@pytest.mark.parametrize("name", ["metrics.json", "DONE", "params.pt", "config.json", "curves.json"])
def test_finished_run_file_that_is_a_link(trained, store_copy, tmp_path, capsys, name):
    """A finished run's file replaced by a link to a copy of itself outside the store: the run is
    broken (the file named: a link is not the run's file), and the sweep's rerun replaces the link,
    never writing or deleting the file it names."""
    rid = trained["ids"][0]
    f = store_copy / "runs" / rid / name
    target = tmp_path / f"outside-{name}"
    target.write_bytes(f.read_bytes())
    f.unlink()
    f.symlink_to(target)
    before = target.read_bytes()
    store = Store(store_copy, readonly=True)
    assert store.run_state(rid) == "broken" and name in store.broken_reason(rid)
    code, _, err = run_cli(capsys, "sweep", "--grid", trained["grid"], "--preset", "smoke", "--store", store_copy)
    assert code == 0, err
    assert target.read_bytes() == before and not f.is_symlink()
    assert Store(store_copy, readonly=True).run_state(rid) == "done"


def test_unfinished_run_files_that_are_links(trained, tmp_path, capsys):
    """An unfinished run whose checkpoint.pt, curves.jsonl, FAILED and config.json are links to
    files outside: its sweep removes the links and trains the run; the files are untouched."""
    rid = make_config("smoke", **dict(TINY, L=3)).run_id
    root = tmp_path / "store"
    d = root / "runs" / rid
    d.mkdir(parents=True)
    targets = {}
    for name in ("checkpoint.pt", "curves.jsonl", "FAILED", "config.json"):
        targets[name] = tmp_path / f"outside-{name}"
        targets[name].write_text("precious\n")
        (d / name).symlink_to(targets[name])
    assert "symbolic link" in Store(root, readonly=True).broken_reason(rid)
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps({"grid": [dict(TINY, L=3)]}))
    code, _, err = run_cli(capsys, "sweep", "--grid", grid, "--preset", "smoke", "--store", root)
    assert code == 0, err
    assert all(t.read_text() == "precious\n" for t in targets.values())
    assert Store(root, readonly=True).run_state(rid) == "done" and not any(p.is_symlink() for p in d.iterdir())


def test_append_never_goes_through_a_link(tmp_path):
    store = Store(tmp_path / "s")
    rid = make_config("smoke", **TINY).run_id
    target = tmp_path / "outside"
    target.write_text("x\n")
    (store.run_dir(rid) / "curves.jsonl").symlink_to(target)
    with pytest.raises(OSError):
        store.append_curves(rid, [{"step": 1, "R": 1.0}])
    assert target.read_text() == "x\n"


def test_runs_directory_that_is_a_link_is_refused(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "runs").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(StoreError, match="symbolic link"):
        Store(tmp_path / "s")
    assert list((tmp_path / "elsewhere").iterdir()) == []


# --- a run path that is no directory; compare's reads (issue 37 item 5) -----------------------

@pytest.mark.parametrize("what", ["dangling link", "file", "fifo"])
def test_run_path_that_is_not_a_directory(trained, store_copy, tmp_path, capsys, what):
    """runs/<id> a dangling symlink, a regular file or a FIFO: status calls the run broken and
    names it (not pending), and the sweep replaces it with the run's directory (exit 0, no
    FileExistsError)."""
    import shutil

    rid = trained["ids"][1]
    p = store_copy / "runs" / rid
    shutil.rmtree(p)
    if what == "dangling link":
        p.symlink_to(tmp_path / "nowhere")
    elif what == "file":
        p.write_text("not a run\n")
    else:
        os.mkfifo(p)
    store = Store(store_copy, readonly=True)
    assert store.run_state(rid) == "broken" and rid in store.run_ids()
    word = {"dangling link": "symbolic link", "file": "not a directory", "fifo": "a FIFO"}[what]
    assert word in store.broken_reason(rid)
    rec = _status(capsys, store_copy)
    assert rec["broken"] == 1 and rec["pending"] == 0
    assert [b["run_id"] for b in rec["broken_runs"]] == [rid] and word in rec["broken_runs"][0]["reason"]
    code, _, err = run_cli(capsys, "sweep", "--grid", trained["grid"], "--preset", "smoke", "--store", store_copy)
    assert code == 0, err
    assert p.is_dir() and not p.is_symlink() and Store(store_copy, readonly=True).run_state(rid) == "done"
    assert not (tmp_path / "nowhere").exists()


def test_compare_never_blocks_on_a_fifo_config(trained, store_copy):
    """compare of a run whose config.json is a FIFO: one line naming the run, exit 2, no hang
    (a subprocess with a time limit: a blocking read would hang the test otherwise)."""
    import subprocess
    import sys

    a, b = trained["ids"]
    cfg = store_copy / "runs" / b / "config.json"
    cfg.unlink()
    os.mkfifo(cfg)
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = dict(os.environ, PYTHONPATH=src + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-m", "depthscale", "compare", a, b, "--store", str(store_copy)],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and b in lines[0] and "config.json" in lines[0]


@pytest.mark.parametrize("versions", [["torch", "2.1"], "torch 2.1", 7, {"torch": ["2", "1"]}])
def test_compare_with_versions_not_a_mapping(trained, store_copy, capsys, versions):
    a, b = trained["ids"]
    cfg = store_copy / "runs" / b / "config.json"
    doc = json.loads(cfg.read_text())
    doc["versions"] = versions
    cfg.write_text(json.dumps(doc))
    for argv in (("compare", a, b, "--store", store_copy), ("compare", store_copy, trained["root"])):
        code, out, err = run_cli(capsys, *argv)
        assert code == 0 and err == [], err
        assert "R_B/R_A" in out
