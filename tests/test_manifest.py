"""DONE is the run's manifest (issue 37 item 3): the sha256 and size of every file it vouches for
and the run id. Every edit the issue lists is caught by the next status, collect and sweep;
random single-file edits of a finished run are always caught; a Store's cached verdict notices
an edit whose mtime was set back (the cache is keyed by inode, size, mtime and ctime); a
negative or non-finite R is broken, not diverged."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from pathlib import Path

import pytest

from depthscale.cli import main as cli
from depthscale.config.run import make_config
from depthscale.store.store import Store
from depthscale.store.store_verify import MANIFEST, VOUCHED

TINY = {"model": "nonlinear", "max_steps": 8, "eval_contexts": 64, "monitor_contexts": 64, "batch": 16,
        "eval_every": 4, "checkpoint_every": 4}
GRID = [dict(TINY, L=2, seed=[0, 1]), dict(TINY, L=1, seed=0)]  # seeds 0, 1: two runs of one shape


def run_cli(capsys, *argv) -> tuple[int, str, list[str]]:
    capsys.readouterr()
    code = cli.main([str(a) for a in argv])
    out = capsys.readouterr()
    progress = re.compile(r"^depthscale: (preset |run [0-9a-f]{16} done: |\S+ \S+ pack of \d+: step )")
    return code, out.out, [ln for ln in out.err.splitlines() if not progress.match(ln)]


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("manifest")
    grid = root / "grid.json"
    grid.write_text(json.dumps({"grid": GRID}))
    assert cli.main(["sweep", "--grid", str(grid), "--preset", "smoke", "--store", str(root / "store")]) == 0
    ids = [make_config("smoke", **dict(TINY, L=2, seed=s)).run_id for s in (0, 1)]
    ids.append(make_config("smoke", **dict(TINY, L=1, seed=0)).run_id)
    return {"root": root / "store", "grid": grid, "ids": ids}


@pytest.fixture
def store(base, tmp_path) -> Path:
    dst = tmp_path / "store"
    shutil.copytree(base["root"], dst, symlinks=True)
    return dst


def _edit_json(path: Path, fn) -> None:
    doc = json.loads(path.read_text())
    fn(doc)
    path.write_text(json.dumps(doc))


def _keep_times(path: Path, fn) -> None:
    """fn(path), then the file's mtime set back to what it was."""
    st = os.stat(path)
    fn(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _flip_byte(path: Path, at: int | None = None) -> None:
    blob = bytearray(path.read_bytes())
    i = len(blob) // 2 if at is None else at
    blob[i] ^= 0x01
    path.write_bytes(bytes(blob))


def test_done_is_the_manifest(base):
    d = base["root"] / "runs" / base["ids"][0]
    done = json.loads((d / "DONE").read_text())
    import hashlib

    assert done["run_id"] == base["ids"][0]
    for name in VOUCHED:
        blob = (d / name).read_bytes()
        assert done[MANIFEST][name]["sha256"] == hashlib.sha256(blob).hexdigest()
        assert done[MANIFEST][name]["bytes"] == len(blob)


def _swap(a: Path, b: Path) -> None:
    tmp = a.with_name(".swap")
    os.replace(a, tmp)
    os.replace(b, a)
    os.replace(tmp, b)


def _tampers(ids: list[str]):
    """(name, edit(runs dir), the runs it breaks, words in the reason): the issue's list."""
    def R_to(v):
        return lambda r: _edit_json(r / ids[0] / "metrics.json", lambda m: m.update(R=v))
    return [
        ("R edited to 1.0", R_to(1.0), [0], "metrics.json"),
        ("R = -5", R_to(-5), [0], "negative"),
        ("R = 1e400", lambda r: (r / ids[0] / "metrics.json").write_text(
            (r / ids[0] / "metrics.json").read_text().replace('"R": ', '"R": 1e400, "R_old": ', 1)), [0], "R is inf"),
        ("metrics from another run, run_id removed", lambda r: _edit_json(r / ids[0] / "metrics.json", lambda m: (
            m.clear(), m.update({k: v for k, v in json.loads((r / ids[1] / "metrics.json").read_text()).items()
                                 if k != "run_id"}))), [0], "metrics.json"),
        ("curves value edited", lambda r: _edit_json(r / ids[0] / "curves.json", lambda c: c["R"].__setitem__(0, 0.5)),
         [0], "curves.json"),
        ("curves swapped", lambda r: _swap(r / ids[0] / "curves.json", r / ids[1] / "curves.json"), [0, 1],
         "curves.json"),
        ("params swapped (same shape)", lambda r: _swap(r / ids[0] / "params.pt", r / ids[1] / "params.pt"), [0, 1],
         "params.pt"),
        ("params replaced, mtime set back", lambda r: _keep_times(
            r / ids[0] / "params.pt", lambda p: p.write_bytes((r / ids[1] / "params.pt").read_bytes())), [0],
         "params.pt"),
        ("one byte flipped, mtime restored", lambda r: _keep_times(r / ids[0] / "params.pt", _flip_byte), [0],
         "params.pt"),
        ("DONE a link to another run's", lambda r: ((r / ids[0] / "DONE").unlink(),
                                                    (r / ids[0] / "DONE").symlink_to(r / ids[1] / "DONE")), [0], "DONE"),
        ("DONE copied from another run", lambda r: shutil.copy(r / ids[1] / "DONE", r / ids[0] / "DONE"), [0], "DONE"),
        ("params_sha256 deleted beside a foreign params.pt", lambda r: (
            shutil.copy(r / ids[1] / "params.pt", r / ids[0] / "params.pt"),
            _edit_json(r / ids[0] / "DONE", lambda d: (d.pop("params_sha256"), d.pop("params_bytes")))), [0],
         "params.pt"),
    ]


CASES = [t[0] for t in _tampers(["a", "b"])]


@pytest.mark.parametrize("case", CASES)
def test_every_listed_edit_is_caught(base, store, capsys, case):
    name, edit, broken, word = next(t for t in _tampers(base["ids"]) if t[0] == case)
    edit(store / "runs")
    s = Store(store, readonly=True)
    for i, rid in enumerate(base["ids"]):
        want = "broken" if i in broken else "done"
        assert s.run_state(rid) == want, (case, rid, s.broken_reason(rid))
    assert word in s.broken_reason(base["ids"][broken[0]])
    # collect skips the broken runs with a warning naming each, and exports the others
    code, out, err = run_cli(capsys, "collect", "--store", store, "--out", store.parent / "t.csv")
    assert code == 0 and out.startswith(f"wrote {3 - len(broken)} runs"), (out, err)
    assert all(any(base["ids"][i] in e for e in err) for i in broken), err
    # the sweep runs them again
    code, out, err = run_cli(capsys, "sweep", "--grid", base["grid"], "--preset", "smoke", "--store", store)
    assert code == 0, err
    s = Store(store, readonly=True)
    assert all(s.run_state(rid) == "done" for rid in base["ids"])


def test_cached_verdict_notices_an_edit_with_its_mtime_set_back(base, store):
    rid = base["ids"][0]
    s = Store(store, readonly=True)
    assert s.run_state(rid) == "done" and s.is_done(rid)
    for name in ("metrics.json", "params.pt"):
        _keep_times(store / "runs" / rid / name, _flip_byte)
        assert s.run_state(rid) == "broken" and name in s.broken_reason(rid)
        _keep_times(store / "runs" / rid / name, _flip_byte)  # flipped back: the same bytes, verified again
        assert s.run_state(rid) == "done"


def test_random_single_file_edits_are_always_caught(base, store):
    """200 random edits, each of one vouched file of a finished run (a byte flipped anywhere, bytes
    cut, appended, or inserted; the file replaced by another run's; its mtime kept or not): every
    one makes the run broken, through a Store that had verified it before (its cache)."""
    rng = random.Random(3701)
    rid, other = base["ids"][0], base["ids"][1]
    d = store / "runs" / rid
    originals = {name: (d / name).read_bytes() for name in VOUCHED}
    s = Store(store, readonly=True)
    kinds = set()
    for trial in range(200):
        name = rng.choice(VOUCHED)
        blob = bytearray(originals[name])
        how = rng.choice(["flip", "cut", "append", "insert", "foreign"])
        if how == "flip":
            blob[rng.randrange(len(blob))] ^= 1 << rng.randrange(8)
        elif how == "cut":
            i = rng.randrange(len(blob))
            del blob[i:i + rng.randrange(1, 8)]
        elif how == "append":
            blob += rng.choice([b" ", b"\n", b"0", b"}"])
        elif how == "insert":
            blob[rng.randrange(len(blob)):rng.randrange(len(blob))] = b" "
        else:
            blob = bytearray((store / "runs" / other / name).read_bytes())
        if bytes(blob) == originals[name]:
            continue
        assert s.run_state(rid) == "done", trial
        st = os.stat(d / name)
        (d / name).write_bytes(bytes(blob))
        if rng.random() < 0.5:
            os.utime(d / name, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert s.run_state(rid) == "broken", (trial, name, how)
        kinds.add((name, how))
        (d / name).write_bytes(originals[name])
    assert len(kinds) >= 15  # most (file, edit) pairs were tried


@pytest.mark.parametrize("R", ["-5", "-0.001", "1e400", "-1e400", "NaN", "Infinity"])
def test_R_the_trainer_could_not_write_is_broken_not_diverged(base, store, R):
    rid = base["ids"][2]
    path = store / "runs" / rid / "metrics.json"
    text = re.sub(r'"R": [^,\n]+', f'"R": {R}', path.read_text(), count=1)
    path.write_text(text)
    s = Store(store, readonly=True)
    assert s.run_state(rid) == "broken", s.broken_reason(rid)
    assert "metrics.json" in s.broken_reason(rid) and "R" in s.broken_reason(rid)


def _edited(blob: bytes, how: str, at: float, bit: int, n: int, foreign: bytes) -> bytes:
    """One edit of a file's bytes; `at` in [0, 1) places it."""
    b = bytearray(blob)
    i = int(at * len(b))
    if how == "flip":
        b[i] ^= 1 << bit
    elif how == "cut":
        del b[i:i + n]
    elif how == "append":
        b += b" \n0}"[bit % 4:bit % 4 + 1] * n
    elif how == "insert":
        b[i:i] = b" " * n
    else:
        b = bytearray(foreign)
    return bytes(b)


def test_any_single_file_edit_is_caught_property(base, store):
    """Property (hypothesis, issue 37): for every vouched file of a finished run and every edit —
    a bit flipped, bytes cut, appended or inserted anywhere, the file replaced by another run's —
    with its mtime kept or not, a Store that had verified the run calls it broken; the original
    bytes put back, it is done again."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    rid, other = base["ids"][0], base["ids"][1]
    d = store / "runs" / rid
    originals = {name: (d / name).read_bytes() for name in VOUCHED}
    s = Store(store, readonly=True)

    @settings(max_examples=150, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(name=st.sampled_from(VOUCHED), how=st.sampled_from(["flip", "cut", "append", "insert", "foreign"]),
           at=st.floats(0, 1, exclude_max=True), bit=st.integers(0, 7), n=st.integers(1, 16),
           keep_mtime=st.booleans())
    def edit_is_caught(name, how, at, bit, n, keep_mtime):
        blob = _edited(originals[name], how, at, bit, n, (store / "runs" / other / name).read_bytes())
        if blob == originals[name]:
            return
        assert s.run_state(rid) == "done"
        st_ = os.stat(d / name)
        try:
            (d / name).write_bytes(blob)
            if keep_mtime:
                os.utime(d / name, ns=(st_.st_atime_ns, st_.st_mtime_ns))
            assert s.run_state(rid) == "broken", (name, how)
        finally:
            (d / name).write_bytes(originals[name])

    edit_is_caught()
