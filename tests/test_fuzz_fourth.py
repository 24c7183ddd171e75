"""Issue 51, item 4: every fuzz case clean. Each case was reproducible from one line (its input is
in fuzz_fourth_cases.py); each is a test here, and each class of case a hypothesis property.
None prints a traceback; bad input is one line naming the bad value, exit code 2."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from depthscale.base.plugins import PluginError, guard_class, guarded

import fuzz_fourth_cases as cases
from fuzz_fourth_cases import depthscale, one_line_error

HYPO = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


# --- 1. a BaseException from plug-in code is the plug-in's one-line error ---------------------------

@pytest.mark.parametrize("method, raised, executor", [
    ("forward", "SystemExit(0)", "inline"), ("forward", "SystemExit('bye')", "process"),
    ("forward", "GeneratorExit", "inline"), ("from_configs", "custom", "process")])
def test_a_kind_method_raising_a_base_exception_fails_its_run_naming_the_file(tmp_path, method, raised, executor):
    (tmp_path / "kinds").mkdir()
    plugin = tmp_path / "kinds" / "toy.py"
    plugin.write_text(cases.kind_raising(method, cases.RAISES[raised]))
    (tmp_path / "grid.json").write_text('{"model": "cosine_heads", "L": [1]}')
    r = depthscale("sweep", "--grid", tmp_path / "grid.json", "--preset", "smoke", "--store", tmp_path / "s",
                   "--executor", executor, env={"DEPTHSCALE_KINDS": str(tmp_path / "kinds")})
    assert r.returncode == 3 and "Traceback" not in r.stderr, (r.returncode, r.stderr)  # 3: a run failed
    assert f"PluginError: DEPTHSCALE_KINDS: model kind file {plugin}: CosineHeads.{method} raised" in r.stderr, r.stderr


@pytest.mark.parametrize("dry", [True, False])
def test_a_kind_validate_raising_system_exit_0_is_one_line_exit_2(tmp_path, dry):
    (tmp_path / "kinds").mkdir()
    plugin = tmp_path / "kinds" / "toy.py"
    plugin.write_text(cases.kind_raising("validate", cases.RAISES["SystemExit(0)"]))
    (tmp_path / "grid.json").write_text('{"model": "cosine_heads", "L": [1]}')
    r = depthscale("sweep", "--grid", tmp_path / "grid.json", "--preset", "smoke", "--store", tmp_path / "s",
                   *(["--dry-run"] if dry else []), env={"DEPTHSCALE_KINDS": str(tmp_path / "kinds")})
    one_line_error(r, str(plugin), "CosineHeads.validate raised SystemExit: 0")


@pytest.fixture(scope="module")
def toy_store(tmp_path_factory) -> Path:
    """A store holding the toy experiment's two smoke runs."""
    root = tmp_path_factory.mktemp("toy")
    (root / "toy.py").write_text(cases.TOY)
    r = depthscale("sweep", "--experiment", "toy", "--preset", "smoke", "--store", root / "store", "--executor",
                   "inline", env={"DEPTHSCALE_EXPERIMENTS": str(root / "toy.py")})
    assert r.returncode == 0, r.stderr
    return root / "store"


@pytest.mark.parametrize("where, raised", [("figure", "SystemExit(0)"), ("table", "SystemExit('bye')"),
                                           ("figure", "custom")])
def test_an_experiment_figure_raising_a_base_exception_is_its_one_line_error(tmp_path, toy_store, where, raised):
    plugin = tmp_path / "toy.py"
    plugin.write_text(cases.experiment_raising(where, cases.RAISES[raised]))
    r = depthscale("report", "--store", toy_store, "--out", tmp_path / "out", "--experiment", "toy", "--preset",
                   "smoke", env={"DEPTHSCALE_EXPERIMENTS": str(plugin)})
    one_line_error(r, f"experiment toy of plug-in {plugin}", f"{where} raised")
    assert (tmp_path / "out" / "report.md").is_file()  # the rest of the report is written


def test_an_experiment_claim_raising_system_exit_0_is_a_fail_naming_the_file(tmp_path, toy_store):
    plugin = tmp_path / "toy.py"
    plugin.write_text(cases.experiment_raising("claim", cases.RAISES["SystemExit(0)"]))
    r = depthscale("report", "--store", toy_store, "--out", tmp_path / "out", "--experiment", "toy", "--preset",
                   "smoke", env={"DEPTHSCALE_EXPERIMENTS": str(plugin)})
    assert "Traceback" not in r.stderr and (tmp_path / "out" / "report.md").is_file(), r.stderr
    (t1,) = [c for c in json.loads((tmp_path / "out" / "claims.json").read_text()) if c["id"] == "T1"]
    assert t1["verdict"] == "FAIL" and f"experiment file {plugin}: deeper_is_no_worse raised SystemExit: 0" in t1["detail"]


_BASE = st.sampled_from([SystemExit, GeneratorExit, type("Custom", (BaseException,), {})])
_ARG = st.one_of(st.none(), st.integers(), st.text(max_size=20))


@HYPO
@given(kind=_BASE, arg=_ARG)
def test_guarded_turns_every_base_exception_into_one_line_naming_the_file(kind, arg):
    def fn():
        raise kind() if arg is None else kind(arg)

    with pytest.raises(PluginError) as e:
        guarded(fn, Path("/p/x.py"), "ENV", "kind")()
    assert "/p/x.py" in str(e.value) and kind.__name__ in str(e.value)


@HYPO
@given(exc=st.sampled_from([KeyboardInterrupt(), ValueError("v"), RuntimeError()]))
def test_guarded_leaves_ctrl_c_and_exceptions_as_they_are(exc):
    def fn():
        raise exc

    with pytest.raises(type(exc)):
        guarded(fn, Path("/p/x.py"), "ENV", "kind")()


def test_guard_class_guards_methods_class_and_static_methods():
    class K:
        def forward(self):
            raise SystemExit(0)

        @classmethod
        def validate(cls):
            raise SystemExit(0)

        @staticmethod
        def helper():
            raise GeneratorExit

    guard_class(K, Path("/p/k.py"), "ENV", "kind")
    for call in (K().forward, K.validate, K.helper):
        with pytest.raises(PluginError, match="/p/k.py"):
            call()


# --- 4. a plug-in source that is no regular file, or too large, is refused unread ---------------------

@pytest.mark.parametrize("make", ["fifo", "dev_zero", "huge"])
def test_a_plugin_source_that_is_no_regular_file_or_too_large_is_one_line(tmp_path, make):
    (tmp_path / "plugins").mkdir()
    a = tmp_path / "plugins" / "a.py"
    if make == "fifo":
        os.mkfifo(a)
    elif make == "dev_zero":
        a.symlink_to("/dev/zero")
    else:
        with open(a, "wb") as fh:  # sparse: 4 kB on disk, 17 MiB to read
            fh.truncate(17 * 2**20)
    word = {"fifo": "is a FIFO, not a regular file", "dev_zero": "is a character device, not a regular file",
            "huge": "bytes, over the"}[make]
    for env in ("DEPTHSCALE_EXPERIMENTS", "DEPTHSCALE_KINDS"):
        r = depthscale("sweep", "--experiment", "fig6", "--preset", "smoke", "--store", tmp_path / "s", "--dry-run",
                       env={env: str(tmp_path / "plugins")}, timeout=60)
        one_line_error(r, env, str(a), word)


@HYPO
@given(kind=st.sampled_from(["fifo", "dir.py", "dangling"]), name=st.from_regex(r"[a-z]{1,8}", fullmatch=True))
def test_plugin_files_refuses_every_source_that_is_no_regular_file(tmp_path_factory, kind, name):
    from depthscale.base.errors import InputError
    from depthscale.base.plugins import plugin_files

    d = tmp_path_factory.mktemp("p")
    path = d / f"{name}.py"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dir.py":
        path.mkdir()
        (d / "ok.py").write_text("")
    else:
        path.symlink_to(d / "nowhere")
    if kind == "dir.py":  # a directory named *.py in a plug-in directory is no source: refused too
        with pytest.raises(InputError, match="is a directory"):
            plugin_files("ENV", "kind", str(d))
        return
    with pytest.raises(InputError, match=str(path) if kind == "fifo" else "cannot be read"):
        plugin_files("ENV", "kind", str(d))


# --- 2. a damaged JSON file (nested 100,000 deep, of the wrong shape) is broken and named ------------

@pytest.fixture
def store2(tmp_path):
    return cases.finished_store(tmp_path / "store")


@pytest.mark.parametrize("name", ["metrics.json", "config.json", "curves.json", "DONE"])
def test_a_deeply_nested_run_file_is_a_broken_run_named_and_the_rest_is_read(tmp_path, store2, name):
    root, (bad, good) = store2
    (root / "runs" / bad / name).write_text(cases.DEEP_JSON)
    r = depthscale("status", "--store", root)
    assert r.returncode == 0 and "Traceback" not in r.stderr and "broken" in r.stdout, r.stdout + r.stderr
    r = depthscale("collect", "--store", root, "--out", tmp_path / "runs.csv")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert f"skipping broken run {root / 'runs' / bad}: {name} is nested too deeply" in r.stderr
    assert good in (tmp_path / "runs.csv").read_text() and bad not in (tmp_path / "runs.csv").read_text()


@pytest.mark.parametrize("damage", ["deep", "list", "string_ids"])
def test_a_damaged_manifest_is_named_and_never_a_pending_run_per_character(tmp_path, store2, damage):
    root, ids = store2
    (root / "sweeps" / "other.json").write_text(cases.DAMAGED[damage])
    r = depthscale("status", "--store", root)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert f"corrupted sweep manifest {root / 'sweeps' / 'other.json'}" in r.stderr and "other" not in r.stdout
    r = depthscale("collect", "--store", root, "--sweep", "other", "--out", tmp_path / "runs.csv")
    one_line_error(r, "corrupted sweep manifest", "other.json")


def test_a_sweep_reruns_a_run_whose_config_is_nested_too_deeply(tmp_path, store2):
    root, (bad, _) = store2
    (root / "runs" / bad / "config.json").write_text(cases.DEEP_JSON)
    (tmp_path / "g.json").write_text('{"L": [1, 2]}')
    r = depthscale("sweep", "--preset", "smoke", "--store", root, "--grid", tmp_path / "g.json", "--dry-run")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr


def test_damaged_timing_records_and_caches_are_skipped_by_report_naming_them(tmp_path, store2):
    root, _ = store2
    (root / "timing").mkdir()
    for k in ("deep", "list", "runs5"):
        (root / "timing" / f"{k}.json").write_text(cases.DAMAGED[k])
    r = depthscale("report", "--store", root, "--out", tmp_path / "out", "--experiment", "fig6", "--preset", "smoke")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    for k in ("deep", "list", "runs5"):
        assert f"skipping the damaged timing record {root / 'timing' / k}.json" in r.stderr, r.stderr
    for name in ("theory.json", "build_timing.json"):
        (tmp_path / "out" / "smoke" / name).write_text(cases.DEEP_JSON)
    r = depthscale("report", "--store", root, "--out", tmp_path / "out", "--experiment", "fig6", "--preset", "smoke")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert "ignoring the theory cache" in r.stderr and "ignoring the build timing cache" in r.stderr, r.stderr


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
                     lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=5), kids, max_size=3),
                     max_leaves=20)


@HYPO
@given(depth=st.integers(0, 3000), opener=st.sampled_from(["[", '{"a": ']), shape=st.sampled_from([None, dict, list]))
def test_loads_json_gives_a_document_or_damaged_json_at_any_depth(depth, opener, shape):
    from depthscale.base.atomic import MAX_JSON_DEPTH, DamagedJSON, loads_json

    text = opener * depth + "1" + ("]" if opener == "[" else "}") * depth
    try:
        doc = loads_json(text, shape)
    except DamagedJSON as e:
        assert depth > MAX_JSON_DEPTH or (shape is not None and str(e).startswith("is ")), (depth, e)
        return
    assert depth <= MAX_JSON_DEPTH and (shape is None or isinstance(doc, shape))


@HYPO
@given(docs=st.lists(_JSON, min_size=1, max_size=4))
def test_read_records_keeps_records_and_skips_every_other_document(tmp_path_factory, docs):
    import warnings

    from depthscale.base import timing

    root = tmp_path_factory.mktemp("t")
    (root / "timing").mkdir()
    for i, doc in enumerate(docs):
        (root / "timing" / f"{i}.json").write_text(json.dumps(doc))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        recs = timing.read_records(root)
    assert len(recs) + len(seen) == len(docs) and all(timing.record_problem(r) is None for r in recs)
    timing.experiment_table(recs, {"e": {"x"}})  # never a TypeError or AttributeError


@pytest.mark.filterwarnings("ignore::UserWarning")  # collect's BrokenRunWarning
@HYPO
@given(doc=_JSON, name=st.sampled_from(["metrics.json", "config.json", "curves.json", "DONE"]))
def test_any_json_in_a_run_file_gives_a_state_never_an_exception(tmp_path_factory, doc, name):
    from depthscale.store import collect
    from depthscale.store.store import Store

    root, (rid, _) = cases.finished_store(tmp_path_factory.mktemp("s"))
    (root / "runs" / rid / name).write_text(json.dumps(doc))
    store = Store(root, readonly=True)
    assert store.run_state(rid) in ("done", "broken", "diverged") and collect.collect(store) is not None


# --- 5. sizes bounded before reading: a too-large file is broken and named ------------------------

def test_a_checkpoint_whose_records_decompress_past_its_size_is_refused_unread(tmp_path):
    from depthscale.config.run import make_config, run_id
    from depthscale.store.store import Store
    from depthscale.train import checkpoint

    store, cfg = Store(tmp_path / "s"), make_config("smoke")
    store.write_config(cfg)
    blob = cases.torch_blob(2**22, compress=True)  # 16 MB of tensor in a file of some kB
    assert len(blob) < 2**20
    (store.run_path(run_id(cfg)) / "checkpoint.pt").write_bytes(blob)
    with pytest.warns(UserWarning, match=r"ignoring unreadable checkpoint of run \w+: .*records declare \d+ bytes"):
        assert checkpoint.read(store, run_id(cfg)) is None


@settings(max_examples=12, deadline=None)
@given(numel=st.integers(0, 2**16), compress=st.booleans())
def test_load_torch_data_reads_torch_files_and_refuses_records_larger_than_the_file(tmp_path_factory, numel, compress):
    from depthscale.base.atomic import UnreadableTorchFile, load_torch_data

    path = tmp_path_factory.mktemp("t") / "x.pt"
    blob = cases.torch_blob(numel, compress)
    path.write_bytes(blob)
    if not compress:
        assert load_torch_data(path)["x"].numel() == numel
    elif numel * 4 > len(blob):
        with pytest.raises(UnreadableTorchFile, match="records declare"):
            load_torch_data(path)


def test_a_sparse_3gb_curves_jsonl_is_a_broken_run_named_at_once(tmp_path):
    import time

    from depthscale.config.run import make_config, run_id

    root, ids = cases.finished_store(tmp_path / "store", depths=(1,))
    from depthscale.store import manifests
    from depthscale.store.store import Store

    cfg = make_config("smoke", L=3)
    Store(root).write_config(cfg)
    manifests.add(Store(root), "train", [run_id(cfg)])
    cases.sparse(root / "runs" / run_id(cfg) / "curves.jsonl", 3 * 2**30)
    t0 = time.perf_counter()
    r = depthscale("status", "--store", root)
    assert r.returncode == 0 and "Traceback" not in r.stderr and "curves.jsonl" in r.stdout, r.stdout + r.stderr
    assert time.perf_counter() - t0 < 20
    r = depthscale("collect", "--store", root, "--curves", "--out", tmp_path / "curves.csv")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert f"skipping broken run {root / 'runs' / run_id(cfg)}: curves.jsonl cannot be read: it is over" in r.stderr


@HYPO
@given(name=st.sampled_from(["metrics.json", "config.json", "curves.json", "DONE"]),
       extra=st.integers(1, 2**30))
def test_a_run_file_over_the_json_bound_is_broken_by_its_apparent_size(tmp_path_factory, name, extra):
    from depthscale.base.atomic import MAX_JSON_BYTES
    from depthscale.store.store import Store

    root, (rid, _) = cases.finished_store(tmp_path_factory.mktemp("s"))
    cases.sparse(root / "runs" / rid / name, MAX_JSON_BYTES + extra)
    why = Store(root, readonly=True).broken_reason(rid)
    assert why == f"{name} cannot be read: it is over {MAX_JSON_BYTES} bytes, the most it may hold", why


# --- 6. a lease's times are bounded by the reader's clock ------------------------------------------

def _far_lease(path: Path, reported: float, mtime: float) -> None:
    path.write_text(json.dumps({"owner": "far", "host": "some-other-node", "pid": 1, "start": None,
                                "time": reported, "token": "far-token"}))
    os.utime(path, (mtime, mtime))


def test_a_lease_whose_heartbeat_is_in_the_future_goes_stale(tmp_path):
    import time

    from depthscale.config.run import make_config, run_id
    from depthscale.store.store import Store

    store = Store(tmp_path / "s", lease_timeout=5.0)
    rid = run_id(make_config("smoke"))
    _far_lease(store.run_dir(rid) / "lease", reported=time.time() + 10 * 365 * 86400, mtime=time.time() - 60)
    assert store.run_state(rid) == "pending" and store.leases.claim(rid, "me")


@HYPO
@given(reported=st.floats(-1e4, 1e12), age=st.floats(-1e6, 1e4))
def test_a_foreign_lease_is_live_only_for_a_heartbeat_within_the_timeout_of_now(tmp_path_factory, reported, age):
    import time

    from depthscale.store import lease

    timeout, now = 100.0, time.time()
    path = tmp_path_factory.mktemp("l") / "lease"
    _far_lease(path, now + reported, now - age)
    beats = [t for t in (now + reported, now - age) if t <= now + timeout]
    doc, mtime = lease.read_lease(path)
    stale = lease.is_stale(doc, mtime, timeout)
    if not beats or now - max(beats) > timeout + 5:  # (5 s: the clock moves while this runs)
        assert stale
    if beats and 0 <= now - max(beats) < timeout - 5:
        assert not stale


# --- 3. nothing is written outside the store, nor a report inside one -----------------------------

@pytest.mark.parametrize("sub", ["sweeps", "timing"])
def test_a_store_whose_sweeps_or_timing_is_a_link_is_refused_before_anything_is_written(tmp_path, sub):
    root, _ = cases.finished_store(tmp_path / "store")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    if (root / sub).exists():
        (root / sub).rename(tmp_path / "old")
    (root / sub).symlink_to(elsewhere)
    (tmp_path / "g.json").write_text('{"L": [3]}')
    r = depthscale("sweep", "--preset", "smoke", "--store", root, "--grid", tmp_path / "g.json", "--executor", "inline")
    one_line_error(r, f"{sub}/ is a symbolic link")
    assert list(elsewhere.iterdir()) == []


def test_a_pack_record_is_never_written_through_a_linked_timing_directory(tmp_path):
    from depthscale.base import timing

    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "timing").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError, match="symbolic link"):
        timing.write_pack_record(tmp_path, [object()], timing.Record())
    assert list((tmp_path / "elsewhere").iterdir()) == []


@pytest.mark.parametrize("where", ["runs", "run", "root", "sweeps"])
def test_report_out_inside_a_store_is_refused(tmp_path, where):
    root, (rid, _) = cases.finished_store(tmp_path / "store")
    out = {"runs": root / "runs", "run": root / "runs" / rid, "root": root, "sweeps": root / "sweeps" / "r"}[where]
    before = sorted(p for p in root.rglob("*"))
    r = depthscale("report", "--store", root, "--out", out, "--experiment", "fig6", "--preset", "smoke")
    one_line_error(r, f"--out {out} is inside the store {root}")
    assert sorted(p for p in root.rglob("*")) == before


@HYPO
@given(parts=st.lists(st.sampled_from(["runs", "sweeps", "timing", "slurm", "x", "report"]), max_size=3))
def test_store_part_names_every_path_in_a_store_directory(tmp_path_factory, parts):
    from depthscale.store.store import STORE_DIRS, Store, store_part

    root = Store(tmp_path_factory.mktemp("s") / "store").root
    path = root.joinpath(*parts)
    inside = store_part(path)
    assert (inside is not None) == (not parts or parts[0] in STORE_DIRS)
    assert store_part(root.parent / "elsewhere") is None


# --- 9. bad numbers and environment values refused at parse time, one line ------------------------

@pytest.mark.parametrize("depths, no_floor", [("1e-300,1,1e300,1e301", False), ("1e-320,1,1e200,3", True),
                                              ("1e-320,1,1e200,3", False), ("1,2,1e300,1e301", True)])
def test_fit_refuses_depths_whose_fit_cannot_be_finite(capsys, depths, no_floor):
    from depthscale.cli.main import main

    assert main(["fit", "--depths", depths, "--losses", "1,2,3,4", *(["--no-floor"] if no_floor else [])]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--depths must be in" in err, err


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(L=st.lists(st.floats(1e-320, 1e308), min_size=3, max_size=5, unique=True),
       R=st.lists(st.floats(1e-320, 1e308), min_size=5, max_size=5), no_floor=st.booleans())
def test_fit_on_any_positive_numbers_is_a_result_or_one_line(capsys, L, R, no_floor):
    from depthscale.cli.main import main

    rc = main(["fit", "--depths", ",".join(map(repr, L)), "--losses", ",".join(map(repr, R[:len(L)])),
               *(["--no-floor"] if no_floor else [])])
    err = capsys.readouterr().err
    assert rc in (0, 2) and (rc == 0 or err.count("\n") == 1), err


@pytest.mark.parametrize("grid, message", [('{"a": 1' + "0" * 400 + "}", "a must be a finite number, got 1.000e+400"),
                                           ('{"stream": "legacy"}', "stream must be 'philox-4x32-10' for a new run")])
def test_a_grid_of_a_huge_float_or_the_legacy_stream_is_refused_by_dry_run(tmp_path, grid, message):
    (tmp_path / "g.json").write_text(grid)
    r = depthscale("sweep", "--grid", tmp_path / "g.json", "--preset", "smoke", "--store", tmp_path / "s", "--dry-run")
    one_line_error(r, message)


@pytest.mark.parametrize("value", ["false", "no", "2", " 0"])
def test_depthscale_fused_other_than_0_or_1_is_one_line(tmp_path, value):
    (tmp_path / "g.json").write_text('{"L": [1]}')
    r = depthscale("sweep", "--grid", tmp_path / "g.json", "--preset", "smoke", "--store", tmp_path / "s", "--dry-run",
                   env={"DEPTHSCALE_FUSED": value})
    one_line_error(r, f"DEPTHSCALE_FUSED must be 0 (the torch path) or 1 (the fused kernels), got {value!r}")


@HYPO
@given(value=st.text(max_size=4))
def test_kernels_enabled_accepts_exactly_0_1_or_nothing(monkeypatch, value):
    from depthscale.base.errors import InputError
    from depthscale.data import kernels

    monkeypatch.setenv("DEPTHSCALE_FUSED", value.replace("\x00", ""))
    value = value.replace("\x00", "")
    if value in ("", "0", "1"):
        assert kernels.enabled() is (value != "0")
    else:
        with pytest.raises(InputError, match="DEPTHSCALE_FUSED must be 0"):
            kernels.enabled()


@HYPO
@given(exp=st.integers(309, 2000), field=st.sampled_from(["a", "b", "noise", "lr"]))
def test_an_integer_too_large_for_a_float_field_is_a_config_error(exp, field):
    from depthscale.config.run import ConfigError, make_config

    with pytest.raises(ConfigError, match=f"{field} must be a finite number"):
        make_config("smoke", **{field: 10**exp})


# --- the rest of item 4 ------------------------------------------------------------------------------
# permissions: an unreadable run is named (broken) and skipped; a read-only command writes nothing

import contextlib
import errno


@contextlib.contextmanager
def unreadable(run_dir: Path):
    """As if `run_dir` had mode 000 for this process (root reads it anyway): every lookup of a file
    in it (stat, lstat, open) and every listing of it is refused with EACCES."""
    inside, listing = str(run_dir) + os.sep, str(run_dir)

    def refusing(real, itself: bool):
        def call(path, *args, **kwargs):
            p = os.fspath(path) if isinstance(path, (str, os.PathLike)) else None
            if isinstance(p, str) and (p.startswith(inside) or (itself and p.rstrip(os.sep) == listing)):
                raise PermissionError(errno.EACCES, "Permission denied", p)
            return real(path, *args, **kwargs)
        return call

    with pytest.MonkeyPatch.context() as mp:
        for name, itself in (("stat", False), ("lstat", False), ("open", False), ("scandir", True), ("listdir", True)):
            mp.setattr(os, name, refusing(getattr(os, name), itself))
        yield


def _files(root: Path) -> list:
    return sorted((str(p), p.lstat().st_mtime_ns) for p in root.rglob("*"))


def test_an_unreadable_run_is_broken_named_and_status_collect_and_report_read_the_rest(tmp_path, capsys):
    from depthscale.cli.main import main

    root, (bad, *good) = cases.finished_store(tmp_path / "store", depths=(1, 2, 3))
    before = _files(root)
    with unreadable(root / "runs" / bad):
        assert main(["status", "--store", root]) == 0
        out, err = capsys.readouterr()
        assert f"broken {bad}: runs/{bad} cannot be read: Permission denied" in out and "error" not in err, out + err
        assert main(["collect", "--store", root, "--out", tmp_path / "runs.csv"]) == 0
        err = capsys.readouterr().err
        assert f"skipping broken run {root / 'runs' / bad}: runs/{bad} cannot be read: Permission denied" in err, err
        assert main(["report", "--store", root, "--out", tmp_path / "out", "--experiment", "fig6", "--preset", "smoke"]) == 0
        assert f"broken runs (left out): {bad}" in capsys.readouterr().out
    table = (tmp_path / "runs.csv").read_text()
    assert all(g in table for g in good) and bad not in table
    assert _files(root) == before  # read-only commands: nothing written into the store


def test_a_sweep_skips_an_unreadable_run_naming_it_and_runs_the_rest(tmp_path, capsys):
    from depthscale.cli.main import main
    from depthscale.config.run import make_config, run_id
    from depthscale.store.store import Store

    root, done = cases.finished_store(tmp_path / "store", depths=(1,))
    bad = make_config("smoke", L=2)
    Store(root).write_config(bad)  # a run begun, whose directory then became unreadable
    (tmp_path / "g.json").write_text('{"L": [1, 2, 3]}')
    with unreadable(root / "runs" / run_id(bad)):
        rc = main(["sweep", "--grid", tmp_path / "g.json", "--preset", "smoke", "--store", root, "--executor", "inline",
                   "--json"])
    out, err = capsys.readouterr()
    assert rc == 0 and "Traceback" not in err, err
    counts = json.loads(out)  # counted as unreadable, not as held by another process
    assert (counts["skipped_unreadable"], counts["skipped_claimed"], counts["ran"]) == (1, 0, 1), counts
    assert f"skipping run {root / 'runs' / run_id(bad)}: runs/{run_id(bad)} cannot be read: Permission denied" in err, err
    store = Store(root, readonly=True)
    assert store.is_done(run_id(make_config("smoke", L=3))) and not store.is_done(run_id(bad))


def test_claim_skips_a_run_whose_lease_cannot_be_written_naming_it(tmp_path, monkeypatch):
    from depthscale.config.run import make_config, run_id
    from depthscale.store import lease
    from depthscale.store.store import Store

    store, rid = Store(tmp_path / "s"), run_id(make_config("smoke"))

    def refused(path, *args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(lease, "take", refused)
    with pytest.warns(UserWarning, match=f"skipping run {store.run_path(rid)}: its lease cannot be written"):
        assert store.leases.claim(rid, "me") is False


def _unprivileged() -> list[str]:
    """A command prefix under which mode 000 stops reads: none for a user; for root, setpriv without
    the capabilities that override file permissions (skipped where that cannot be done)."""
    if os.geteuid() != 0:
        return []
    import shutil
    import subprocess

    prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-dac_override,-dac_read_search"]
    if shutil.which("setpriv") is None or subprocess.run([*prefix, "true"], capture_output=True).returncode != 0:
        pytest.skip("running as root, where mode 000 does not stop reads")
    return prefix


def test_a_run_of_mode_000_blocks_no_command(tmp_path):
    import subprocess
    import sys

    prefix = _unprivileged()
    root, (bad, good) = cases.finished_store(tmp_path / "store")
    (tmp_path / "g.json").write_text('{"L": [1, 2]}')
    (root / "runs" / bad).chmod(0)
    try:
        def run(*args):
            return subprocess.run([*prefix, sys.executable, "-m", "depthscale", *map(str, args)], capture_output=True,
                                  text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300)

        r = run("status", "--store", root)
        assert r.returncode == 0 and f"broken {bad}: runs/{bad} cannot be read" in r.stdout, r.stdout + r.stderr
        r = run("collect", "--store", root, "--out", tmp_path / "runs.csv")
        assert r.returncode == 0 and f"skipping broken run {root / 'runs' / bad}" in r.stderr, r.stderr
        r = run("sweep", "--grid", tmp_path / "g.json", "--preset", "smoke", "--store", root, "--executor", "inline")
        assert r.returncode == 0 and f"skipping run {root / 'runs' / bad}" in r.stderr, r.stderr
        assert "cannot write" not in r.stderr and good in (tmp_path / "runs.csv").read_text()
    finally:
        (root / "runs" / bad).chmod(0o755)


@pytest.mark.filterwarnings("ignore::UserWarning")  # collect's BrokenRunWarning
@HYPO
@given(hidden=st.sets(st.integers(0, 2), max_size=3))
def test_any_set_of_unreadable_runs_is_counted_broken_and_the_rest_collected(tmp_path_factory, hidden):
    from depthscale.store import collect
    from depthscale.store.store import Store

    root, ids = cases.finished_store(tmp_path_factory.mktemp("s"), depths=(1, 2, 3))
    bad = {ids[i] for i in hidden}
    with contextlib.ExitStack() as stack:
        for rid in bad:
            stack.enter_context(unreadable(root / "runs" / rid))
        store = Store(root, readonly=True)
        status = collect.status(store).loc["train"]
        assert (status["broken"], status["done"]) == (len(bad), 3 - len(bad))
        assert {p["run_id"] for p in collect.problems(store)} == bad
        assert all(p["reason"].endswith("cannot be read: Permission denied") for p in collect.problems(store))
        assert set(collect.collect(store)["run_id"]) == set(ids) - bad
        assert not any(store.is_done(r) or store.is_failed(r) for r in bad)


# leftovers: the temp file of a collect or report killed with -9 is removed by the next run

def _plant(directory: Path, name: str, age: float) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text("partial")
    os.utime(path, (path.stat().st_atime - age, path.stat().st_mtime - age))
    return path


@pytest.mark.parametrize("command", ["collect", "report"])
def test_a_killed_runs_temp_files_are_removed_by_the_next_run(tmp_path, store2, command):
    root, _ = store2
    out = tmp_path / "out"
    if command == "collect":
        dirs, target, args = [out], out / "runs.csv", ["--out", out / "runs.csv"]
    else:
        dirs, target = [out, out / "smoke", out / "smoke" / "theory.d"], out / "report.md"
        args = ["--out", out, "--experiment", "fig6", "--preset", "smoke"]
    stale = [_plant(d, f".{target.name}.k9x_2ab7.tmp", 120) for d in dirs]
    young = _plant(out, f".{target.name}.y0ung_ab.tmp", 0)  # a live writer's
    other = [_plant(out, name, 120) for name in (".notes.tmp", "data.k9x_2ab7.tmp", ".runs.csv.tmp")]  # not ours
    r = depthscale(command, "--store", root, *args)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert target.is_file() and not any(p.exists() for p in stale), [p for p in stale if p.exists()]
    assert young.exists() and all(p.exists() for p in other)


@HYPO
@given(names=st.lists(st.one_of(st.sampled_from([".runs.csv.ab_12cd3.tmp", ".runs.csv.ab.tmp", ".report.md.zz9_0000.tmp"]),
                                 st.from_regex(r"\.[a-z.]{1,8}\.[a-z0-9_]{8}\.tmp", fullmatch=True),
                                 st.from_regex(r"\.?[a-z.]{0,8}(\.[a-z0-9_]{1,10})?(\.tmp)?", fullmatch=True)),
                      min_size=1, max_size=6, unique=True),
       ages=st.lists(st.sampled_from([0.0, 30.0, 90.0, 1e6]), min_size=6, max_size=6),
       named=st.booleans())
def test_remove_stale_temp_files_removes_exactly_our_old_temp_files(tmp_path_factory, names, ages, named):
    import re

    from depthscale.base.atomic import STALE_TEMP_SECONDS, remove_stale_temp_files

    d = tmp_path_factory.mktemp("o")
    names = [n for n in names if n not in ("", ".", "..")]
    for n, age in zip(names, ages):
        _plant(d, n, age)
    target = "runs.csv" if named else None
    ours = re.compile(rf"\.{re.escape(target) if named else '.+'}\.[a-z0-9_]{{8}}\.tmp")
    removed = {p.name for p in remove_stale_temp_files(d, target)}
    want = {n for n, age in zip(names, ages) if ours.fullmatch(n) and age > STALE_TEMP_SECONDS}
    assert removed == want and {p.name for p in d.iterdir()} == set(names) - want


# fused provenance: a resume never rewrites what trained the checkpointed steps

class _Killed(Exception):
    pass


def _fused_doc(store, cfg) -> dict:
    return json.loads((store.run_path(cfg.run_id) / "config.json").read_text())


@pytest.mark.parametrize("before, resume_env, want", [(True, "0", "mixed"), (False, "0", False), ("mixed", "1", "mixed")])
def test_a_resume_with_depthscale_fused_changed_records_that_the_run_mixed(tmp_path, monkeypatch, before, resume_env, want):
    from depthscale.config.run import make_config
    from depthscale.data import kernels
    from depthscale.store.store import Store
    from depthscale.train.training import run_pack

    cfg = make_config("smoke", model="nonlinear", L=1, max_steps=20, eval_every=5, checkpoint_every=5)
    store = Store(tmp_path / "s")
    save = store.save_checkpoint

    def save_then_die(rid, obj):
        save(rid, obj)
        raise _Killed  # killed right after the first checkpoint

    store.save_checkpoint = save_then_die
    with pytest.raises(_Killed):
        run_pack([cfg], store, "cpu", progress=False)
    doc = _fused_doc(store, cfg)
    assert doc["fused_cpu_kernels"] is (kernels.fused_ops() is not None)
    doc["fused_cpu_kernels"] = before  # what trained the checkpointed steps (whether or not the kernels build here)
    (store.run_path(cfg.run_id) / "config.json").write_text(json.dumps(doc))
    monkeypatch.setenv("DEPTHSCALE_FUSED", resume_env)
    if resume_env == "1" and kernels.fused_ops() is None:
        pytest.skip("the fused kernels cannot be built here")
    run_pack([cfg], Store(tmp_path / "s"), "cpu", progress=False)
    assert store.is_done(cfg.run_id) and _fused_doc(store, cfg)["fused_cpu_kernels"] == want


def test_a_fresh_run_and_a_run_whose_checkpoint_is_unreadable_record_the_kernels_of_now(tmp_path, monkeypatch):
    from depthscale.config.run import make_config
    from depthscale.store.store import Store
    from depthscale.train.training import run_pack

    monkeypatch.setenv("DEPTHSCALE_FUSED", "0")
    cfgs = [make_config("smoke", model="nonlinear", L=L, max_steps=5, eval_every=5) for L in (1, 2)]
    store = Store(tmp_path / "s")
    for c in cfgs:
        store.write_config(c, extra={"fused_cpu_kernels": True})
    (store.run_path(cfgs[1].run_id) / "checkpoint.pt").write_bytes(b"garbage")  # ignored: the run starts again
    with pytest.warns(UserWarning, match="ignoring unreadable checkpoint"):
        run_pack(cfgs, store, "cpu", progress=False)
    assert [_fused_doc(store, c)["fused_cpu_kernels"] for c in cfgs] == [False, False]


@HYPO
@given(stored=st.sampled_from([None, True, False, "mixed", 1, "yes", [True]]), now=st.sampled_from([None, True, False]),
       resumed=st.booleans())
def test_fused_record_is_mixed_exactly_when_the_steps_were_trained_both_ways(stored, now, resumed):
    from depthscale.train.training import fused_record

    got = fused_record(stored, now, resumed)
    known = resumed and (isinstance(stored, bool) or stored == "mixed")
    if not known:
        assert got is now
    elif stored == "mixed" or stored != bool(now):
        assert got == "mixed"
    else:
        assert got is stored and got == bool(now)


@pytest.mark.parametrize("opener, closer", [("[", "]"), ('{"a": ', "}")])
def test_json_nested_exactly_max_depth_is_read_and_one_level_more_is_damaged(opener, closer):
    # the boundary Hypothesis found: 101 levels of lists were read although at most 100 are allowed
    from depthscale.base.atomic import MAX_JSON_DEPTH, DamagedJSON, loads_json

    def nested(depth):
        return opener * depth + "1" + closer * depth

    assert loads_json(nested(MAX_JSON_DEPTH)) is not None and loads_json(nested(1)) is not None
    with pytest.raises(DamagedJSON, match=f"over {MAX_JSON_DEPTH} levels"):
        loads_json(nested(MAX_JSON_DEPTH + 1))
