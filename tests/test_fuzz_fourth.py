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
