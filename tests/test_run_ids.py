"""Run ids (issue 37 item 8): numbers are normalised before hashing, so a = -0.0 and a = 0.0 are
one run, and the ids of ordinary configs do not change (pinned: a changed id orphans every
finished run in every store)."""

from __future__ import annotations

import hashlib
import json
import random

from depthscale.cli import main as cli
from depthscale.config.run import RunConfig, make_config, run_id
from depthscale.store.store import Store
from depthscale.store.store_verify import stored_id

# a typical config, every field explicit (so changing a preset's defaults does not change it)
TYPICAL = {"d": 8, "P": 16, "a": 0.0, "b": 0.0, "task": "difficult", "k": 2, "noise": 0.0, "clusters": 0,
           "model": "nonlinear", "N": 8, "L": 4, "loop": 0, "heads": 4, "mlp": 4, "qk_std": 0.02,
           "qk_init": "independent", "tau_min": 7.0, "tau_max": 30.0, "metric_sigma": 0.5, "gd_step": 0.5,
           "wx_init": "orthogonal", "gain_init": "positive", "lr": 0.01, "lr_depth_exp": 0.0, "batch": 64,
           "max_steps": 60, "warmup": 5, "schedule": "cosine", "eval_every": 20, "monitor_contexts": 256,
           "patience": 3, "rel_tol": 0.001, "min_steps": 0, "checkpoint_every": 20, "qk_lr": "absolute",
           "keep_best": True, "grad_clip": 0.0, "eval_contexts": 512, "eval_seed": 1000003, "seed": 1,
           "early_stop": False, "stream": "philox-4x32-10", "preset": "smoke"}
# Its id since the counter-based context stream (issue 35) and early_stop (issue 33) became fields:
# a run drawn from another stream is another run. Before them the same fields hashed to
# db494cc8c5130893 (LEGACY, the config as an earlier version stored it), which still verifies.
TYPICAL_ID = "3436417812f57c52"
LEGACY = {k: v for k, v in TYPICAL.items() if k not in ("early_stop", "stream")}
LEGACY_ID = "db494cc8c5130893"


def _independent_id(dct: dict) -> str:
    """The id's formula written out again: sha256 of the compact, key-sorted JSON of the fields
    but preset and the optional ones at their defaults (clusters, loop, construct_heads, heads, mlp: 0, 0, 0, 4, 4)."""
    kept = {k: v for k, v in dct.items() if k != "preset"
            and not (k in ("clusters", "loop", "construct_heads") and v == 0) and not (k in ("heads", "mlp") and v == 4)}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def test_typical_id_is_pinned():
    cfg = RunConfig.from_dict(TYPICAL)
    assert run_id(cfg) == TYPICAL_ID == _independent_id(TYPICAL) == stored_id(TYPICAL)


def test_a_run_stored_before_the_stream_field_verifies_and_is_refused_new_contexts():
    """A config.json of an earlier version (no stream, no early_stop) still verifies under the id
    it was stored with, reads back as the "legacy" stream, and drawing its contexts is one line of
    refusal (this version cannot draw that stream: never contexts of another stream in its place)."""
    import pytest

    from depthscale.data.contexts import make_generator, sample_for
    from depthscale.base.errors import InputError
    from depthscale.store.store_verify import config_problem

    assert config_problem(LEGACY_ID, {"run_id": LEGACY_ID, "config": LEGACY}) is None
    old = RunConfig.from_dict(LEGACY)
    assert old.stream == "legacy" and run_id(old) != LEGACY_ID != TYPICAL_ID
    with pytest.raises(InputError, match="'legacy' context stream"):
        sample_for(old, 4, make_generator(1))
    assert sample_for(RunConfig.from_dict(TYPICAL), 4, make_generator(1)).X_BxPxd.shape[0] == 4


def test_ids_of_configs_without_negative_zero_are_unchanged():
    """Random configs (values of every kind a grid can give, none a -0.0): the id is the plain
    formula's, so no finished run of an earlier version loses its directory."""
    rng = random.Random(37)
    for _ in range(200):
        kw = {"L": rng.choice([1, 2, 4, 8, 16]), "seed": rng.randrange(10**6), "a": rng.choice([0.0, 0.5, 1.0, 2.25]),
              "b": rng.choice([0.0, 1.0, 1.5]), "lr": rng.choice([1e-3, 0.01, 3e-2, 0.1]),
              "model": rng.choice(["nonlinear", "linear"]), "noise": rng.choice([0.0, 0.1, 1e-7])}
        cfg = make_config(rng.choice(["smoke", "cpu"]), **kw)
        assert run_id(cfg) == _independent_id(cfg.to_dict())


def test_negative_zero_is_zero():
    for field in ("a", "b", "noise", "lr_depth_exp", "grad_clip"):
        plus, minus = make_config("smoke", **{field: 0.0}), make_config("smoke", **{field: -0.0})
        assert run_id(plus) == run_id(minus), field
    # a nonzero value keeps its sign
    assert run_id(make_config("smoke", a=0.5)) != run_id(make_config("smoke", a=0.5, b=0.5))


def test_negative_zero_run_still_verifies(tmp_path):
    """A config.json written with -0.0 (by an earlier version, under the id its -0.0 hashed to)
    still verifies: store_verify falls back to the id as stored."""
    from depthscale.store.store_verify import config_problem

    raw = dict(TYPICAL, a=-0.0)
    old = _independent_id(raw)
    assert old != TYPICAL_ID and config_problem(old, {"run_id": old, "config": raw}) is None
    assert config_problem(TYPICAL_ID, {"run_id": TYPICAL_ID, "config": raw}) is None
    raw = dict(LEGACY, a=-0.0)  # stored by a version before the stream field, under its -0.0 id
    old = _independent_id(raw)
    assert old != LEGACY_ID and config_problem(old, {"run_id": old, "config": raw}) is None


def test_grid_of_zero_and_negative_zero_trains_one_run(tmp_path, capsys):
    tiny = {"model": "nonlinear", "max_steps": 10, "eval_contexts": 64, "monitor_contexts": 64, "batch": 16,
            "eval_every": 5, "checkpoint_every": 5}
    grid = tmp_path / "grid.json"
    grid.write_text('{"grid": [{"model": "nonlinear", "max_steps": 10, "eval_contexts": 64, "monitor_contexts": 64, '
                    '"batch": 16, "eval_every": 5, "checkpoint_every": 5, "a": [0.0, -0.0]}]}')
    assert json.loads(grid.read_text())["grid"][0]["a"][1] == 0.0  # -0.0 == 0.0, but it is -0.0 in the file
    capsys.readouterr()
    code = cli.main(["sweep", "--grid", str(grid), "--preset", "smoke", "--store", str(tmp_path / "s"), "--json"])
    out = capsys.readouterr().out
    assert code == 0
    counts = json.loads(out.strip().splitlines()[-1])
    assert counts["planned"] == 1 and counts["ran"] == 1
    store = Store(tmp_path / "s", readonly=True)
    assert store.run_ids() == [make_config("smoke", **tiny).run_id]


def _random_value(rng: random.Random, depth: int = 0):
    kind = rng.choice(["int", "float", "zero", "str", "bool", "none"] + (["list", "dict"] if depth < 3 else []))
    if kind == "int":
        return rng.randrange(-10**6, 10**6)
    if kind == "float":
        return rng.choice([0.5, -2.25, 1e-300, 1e300, 0.1, -0.0001, 3.0])
    if kind == "zero":
        return rng.choice([0.0, -0.0])
    if kind == "str":
        return "".join(rng.choice("aZ0 _-é∑漢\u0301🙂\\\"") for _ in range(rng.randrange(6)))
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "none":
        return None
    if kind == "list":
        return [_random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {f"k{i}": _random_value(rng, depth + 1) for i in range(rng.randrange(4))}


def _without_negative_zero(v):
    if isinstance(v, float) and v == 0.0:
        return 0.0
    if isinstance(v, list):
        return [_without_negative_zero(x) for x in v]
    if isinstance(v, dict):
        return {k: _without_negative_zero(x) for k, x in v.items()}
    return v


def _flip_zeros(v):
    if isinstance(v, float) and v == 0.0:
        return -v
    if isinstance(v, list):
        return [_flip_zeros(x) for x in v]
    if isinstance(v, dict):
        return {k: _flip_zeros(x) for k, x in v.items()}
    return v


def test_id_normalisation_changes_only_negative_zero():
    """Random nested values (numbers, strings with unicode, lists, dicts): the id's normal form
    writes as the value does once each -0.0 is 0.0, and a value and its copy with every zero's
    sign flipped have one normal form."""
    from depthscale.config.run import _id_value

    rng = random.Random(8)
    for _ in range(500):
        v = _random_value(rng)
        dump = lambda x: json.dumps(x, sort_keys=True, separators=(",", ":"))  # noqa: E731
        assert dump(_id_value(v)) == dump(_without_negative_zero(v))
        assert dump(_id_value(v)) == dump(_id_value(_flip_zeros(v)))


def test_id_normal_form_property():
    """Property (hypothesis, issue 37): for any JSON-like value — numbers of every size and sign,
    unicode strings, booleans, None, nested lists and dicts — the id's normal form writes as the
    value does with each -0.0 made 0.0, and flipping the sign of every zero leaves it unchanged."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from depthscale.config.run import _id_value

    scalars = (st.none() | st.booleans() | st.integers() | st.text()
               | st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from([0.0, -0.0]))
    values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                          | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=20)
    dump = lambda x: json.dumps(x, sort_keys=True, separators=(",", ":"))  # noqa: E731

    @settings(max_examples=300, deadline=None, derandomize=True, database=None)
    @given(values)
    def normal_form(v):
        assert dump(_id_value(v)) == dump(_without_negative_zero(v))
        assert dump(_id_value(v)) == dump(_id_value(_flip_zeros(v)))

    normal_form()
