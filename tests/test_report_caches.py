"""The report's own caches in its --out directory (issue 37, item 7): the theory cache
(<preset>/theory.json) and the build timing (<preset>/build_timing.json) are validated, never
trusted: junk in either is ignored with a one-line warning naming the file, and rebuilt."""

from __future__ import annotations

import json
import math
import os
import warnings

import pytest

from depthscale.analysis.results import THEORY_CACHE_FORMAT, StaleCacheWarning, Theory, read_theory_cache
from depthscale.cli import main as cli
from depthscale.report.reproduce import read_build_timing

TINY = {"max_steps": 20, "eval_contexts": 64, "monitor_contexts": 64, "batch": 16, "eval_every": 10}

JUNK = {"not JSON": "{oops", "a list": "[1, 2]", "a number": "7", "empty": "",
        "an object of numbers": '{"fig1": 5}', "a string for seconds": '{"fig1": {"theory": "x"}}',
        "a negative seconds": '{"fig1": {"theory": -1.0}}', "NaN seconds": '{"fig1": {"theory": NaN}}'}


def _stale(fn):
    """fn()'s value and the StaleCacheWarnings it gave."""
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        value = fn()
    return value, [w for w in got if issubclass(w.category, StaleCacheWarning)]


@pytest.mark.parametrize("text", JUNK.values(), ids=JUNK.keys())
def test_junk_build_timing_is_ignored_with_a_warning(tmp_path, text):
    path = tmp_path / "build_timing.json"
    path.write_text(text)
    value, warned = _stale(lambda: read_build_timing(path))
    assert value == {} and len(warned) == 1 and str(path) in str(warned[0].message)


def test_a_valid_build_timing_is_read_without_a_warning(tmp_path):
    path = tmp_path / "build_timing.json"
    assert _stale(lambda: read_build_timing(path)) == ({}, [])  # none yet: nothing to say
    path.write_text(json.dumps({"fig1": {"theory": 2.5, "figures": 0.1}, "fig2": {"figures": 1}}))
    assert _stale(lambda: read_build_timing(path)) == ({"fig1": 2.5, "fig2": 0.0}, [])


def test_a_fifo_as_a_cache_is_a_warning_not_a_hang(tmp_path):
    for name, read in (("build_timing.json", read_build_timing), ("theory.json", read_theory_cache)):
        os.mkfifo(tmp_path / name)
        value, warned = _stale(lambda: read(tmp_path / name))
        assert value == {} and len(warned) == 1


def _written_cache(tmp_path) -> tuple:
    """A theory cache as Theory writes it (fig8's sample: the cheapest need), and its value."""
    cache = tmp_path / "theory.json"
    value = Theory("smoke", cache=cache).fig8()
    return cache, json.loads(json.dumps(value))


def test_the_theory_cache_round_trips_without_a_warning(tmp_path):
    cache, value = _written_cache(tmp_path)
    th, warned = _stale(lambda: Theory("smoke", cache=cache))
    assert warned == [] and th.fig8() == value


def _edit_a_number(doc: dict) -> dict:
    """doc with the first number found in its entries changed (a hand edit that keeps the layout)."""
    def edit(x):
        if isinstance(x, dict):
            for k, v in x.items():
                done, x[k] = edit(v)
                if done:
                    return True, x
        elif isinstance(x, list):
            for i, v in enumerate(x):
                done, x[i] = edit(v)
                if done:
                    return True, x
        elif isinstance(x, float) and math.isfinite(x):
            return True, x + 1.0
        return False, x

    assert edit(doc["entries"])[0]
    return doc


THEORY_JUNK = {
    "not JSON": lambda doc: "{oops",
    "a list": lambda doc: "[]",
    "another layout": lambda doc: json.dumps(doc["entries"]),  # the bare entries (no format, no digest)
    "junk entries": lambda doc: json.dumps({"format": THEORY_CACHE_FORMAT, "sha256": doc["sha256"],
                                            "entries": {k: "junk" for k in doc["entries"]}}),
    "a number edited": lambda doc: json.dumps(_edit_a_number(doc)),
    "another format": lambda doc: json.dumps(dict(doc, format="depthscale-theory-cache/0")),
}


@pytest.mark.parametrize("damage", THEORY_JUNK.values(), ids=THEORY_JUNK.keys())
def test_a_junk_theory_cache_is_ignored_with_a_warning_and_rebuilt(tmp_path, damage):
    cache, value = _written_cache(tmp_path)
    cache.write_text(damage(json.loads(cache.read_text())))
    th, warned = _stale(lambda: Theory("smoke", cache=cache))
    assert len(warned) == 1 and str(cache) in str(warned[0].message)
    assert th._data == {}  # nothing of the junk is used
    assert json.loads(json.dumps(th.fig8())) == value  # computed again, the same numbers
    again, warned = _stale(lambda: Theory("smoke", cache=cache))  # and the cache rewritten valid
    assert warned == [] and again._data.keys() == th._data.keys()


@pytest.fixture(scope="module")
def finished_store(tmp_path_factory):
    root = tmp_path_factory.mktemp("caches")
    grid = root / "grid.json"
    grid.write_text(json.dumps(dict(TINY, model="linear", L=[1, 2])))
    assert cli.main(["sweep", "--grid", str(grid), "--preset", "smoke", "--store", str(root / "store")]) == 0
    return root / "store"


@pytest.mark.parametrize("name,text", [("build_timing.json", "[1, 2]"), ("build_timing.json", '{"fig1": 5}'),
                                       ("theory.json", "[]")])
def test_report_over_junk_caches_warns_in_one_line_and_rebuilds(finished_store, tmp_path, capsys, name, text):
    out = tmp_path / "out"
    argv = ["report", "--store", str(finished_store), "--out", str(out), "--json"]
    assert cli.main(argv) == 0
    first = json.loads(capsys.readouterr().out)
    (out / "smoke" / name).write_text(text)
    assert cli.main(argv) == 0
    captured = capsys.readouterr()
    res = json.loads(captured.out)
    warned = [ln for ln in captured.err.splitlines() if "warning" in ln]
    assert len(warned) == 1 and str(out / "smoke" / name) in warned[0], captured.err
    assert "Traceback" not in captured.err
    assert res["errors"] == first["errors"] and res["passed"] == first["passed"]  # nothing dropped
    assert _stale(lambda: (read_build_timing(out / "smoke" / "build_timing.json"),
                           read_theory_cache(out / "smoke" / "theory.json")))[1] == []  # rewritten valid
