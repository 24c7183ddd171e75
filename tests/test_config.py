"""Configuration: validation with one-line errors, presets, run ids."""

import pytest

from depthscale.config.run import PRESET_DEPTHS, ConfigError, RunConfig, make_config


@pytest.mark.parametrize("field,value,fragment", [
    ("a", -0.5, "a must be"), ("b", float("inf"), "b must be"), ("b", float("nan"), "b must be"),
    ("d", 0, "d must be >= 1"), ("P", 0, "P must be >= 1"), ("N", 4, "N must be >= d"),
    ("L", 0, "L must be >= 1"), ("k", 0, "k must be >= 1"), ("k", 999, "k must be <= P"),
    ("model", "gpt", "model must be one of"), ("task", "medium", "task must be one of"),
    ("lr", 0.0, "lr must be > 0"), ("L", 2.5, "L must be an integer"),
])
def test_bad_values_name_field_and_value(field, value, fragment):
    with pytest.raises(ConfigError) as exc:
        make_config("cpu", **{field: value})
    msg = str(exc.value)
    assert fragment in msg and "\n" not in msg
    assert repr(value) in msg or str(value) in msg


def test_unknown_field():
    with pytest.raises(ConfigError, match="unknown config field 'depth_of_field'"):
        make_config("cpu", depth_of_field=3)


def test_presets_match_spec_table():
    # SPEC §1: a geometry per model family (linear / softmax models)
    want = {("paper", "linear"): (128, 1024, 128), ("paper", "nonlinear"): (16, 64, 16),
            ("cpu", "linear"): (32, 256, 32), ("cpu", "nonlinear"): (16, 64, 16),
            ("smoke", "linear"): (8, 16, 8), ("smoke", "nonlinear"): (8, 16, 8)}
    for (name, model), (d, P, N) in want.items():
        for m in ([model] if model == "linear" else ["nonlinear", "single_stream", "layer_values", "context_updates"]):
            c = make_config(name, model=m)
            assert (c.d, c.P, c.N) == (d, P, N), (name, m)
    assert make_config("cpu", model="linear").P >= 8 * make_config("cpu", model="linear").d
    assert PRESET_DEPTHS["paper"][-1] == 256 and PRESET_DEPTHS["cpu"][-1] == 64 and PRESET_DEPTHS["smoke"] == (1, 2, 4)


def test_run_id_is_a_hash_of_the_config():
    a = make_config("smoke", L=2)
    assert a.run_id == make_config("smoke", L=2).run_id
    assert a.run_id != make_config("smoke", L=4).run_id
    assert a.run_id != make_config("smoke", L=2, seed=1).run_id
    assert RunConfig.from_dict(a.to_dict()) == a


def test_easy_task_normalises_k():
    assert make_config("smoke", task="easy", k=2).k == 1


def test_int_and_float_spell_one_config():
    assert RunConfig(a=0).run_id == RunConfig(a=0.0).run_id
    assert isinstance(RunConfig(lr=1).lr, float)


def test_faithful_start_is_the_default_and_spread_a_named_variant():
    # SPEC §3.4, §9 (issue 25): every nonlinear and layer_values run starts near uniform (small
    # independent W_q, W_k) with one rate for every depth, at every preset; the spread start is a
    # variant that only its own experiments use, centred per k on the best single head's temperature
    from depthscale.experiments.registry import REGISTRY

    for preset in ("smoke", "cpu", "paper"):
        for model in ("nonlinear", "layer_values"):
            for k in (2, 16):
                c = make_config(preset, model=model, task="difficult", k=k, L=64 if preset != "smoke" else 4)
                assert c.qk_init == "independent" and c.lr_depth_exp == 0.0 and c.qk_std == 0.02, (preset, model, k)
    assert make_config("cpu", model="nonlinear", task="easy").qk_init == "independent"
    assert make_config("cpu", model="linear", task="difficult", k=16).qk_init == "gd"  # the linear start
    spread = {c.k: c for c in REGISTRY["fig14-spread"].configs("cpu")}
    assert spread[2].qk_init == spread[16].qk_init == "spread" and spread[2].lr_depth_exp == -0.5
    assert (spread[2].tau_min, spread[2].tau_max) == (7.0, 30.0) and (spread[16].tau_min, spread[16].tau_max) == (1.9, 7.6)
    # the claims' experiments hold no spread run
    for i in ("fig6", "fig14", "table1", "table4", "table5", "fig13"):
        assert all(c.qk_init != "spread" for c in REGISTRY[i].configs("cpu")), i


def test_linear_step_budget_grows_with_depth():
    """The cpu linear budgets: flat to L = 8, then ~L^1/4 (easy) and ~L^1/3 (difficult); the
    convergence rule (off unless early_stop: SPEC §4 reports the final, annealed model) would judge
    only their second half; an explicit max_steps wins; other recipes keep their flat budget."""
    budgets = [make_config("cpu", model="linear", task="easy", L=L).max_steps for L in (1, 8, 16, 32, 64)]
    assert budgets == [1000, 1000, 1200, 1400, 1700]
    c = make_config("cpu", model="linear", task="easy", L=64)
    assert c.min_steps == 850 and c.qk_init == "gd" and not c.early_stop
    assert make_config("cpu", model="linear", task="easy", L=64, max_steps=300).max_steps == 300
    hard = [make_config("cpu", model="linear", task="difficult", k=2, L=L).max_steps for L in (1, 8, 16, 32, 64)]
    assert hard == [500, 500, 600, 800, 1000]  # ~L^1/3 past L = 8
    assert make_config("cpu", model="nonlinear", task="difficult", L=64).max_steps == \
        make_config("cpu", model="nonlinear", task="difficult", L=1).max_steps
    with pytest.raises(ConfigError, match="qk_init"):
        make_config("cpu", model="nonlinear", qk_init="gd")


def test_late_fields_at_their_default_leave_the_run_id_alone():
    """clusters, loop, heads, mlp, construct_heads came after stores were written: at their defaults they are not in
    the hash (the id is the one the config had before they existed), set they are."""
    import hashlib
    import json

    from depthscale.config.run import FIELD_DEFAULTS, ID_OPTIONAL_FIELDS, config_dict, make_config

    cfg = make_config("cpu", model="nonlinear", L=4)
    old = config_dict(cfg, ("preset",) + ID_OPTIONAL_FIELDS)  # the config as it was hashed before
    expect = hashlib.sha256(json.dumps(old, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]
    assert cfg.run_id == expect
    needs = {"construct_heads": dict(qk_init="constructive", wx_init="orthogonal", task="difficult")}
    for name in ID_OPTIONAL_FIELDS:
        base = cfg.replace(**needs.get(name, {}))
        other = base.replace(**{name: FIELD_DEFAULTS[name] + 1 if name != "loop" else 2})
        assert other.run_id != base.run_id, name


def test_loop_must_divide_the_depth():
    from depthscale.config.run import make_config

    with pytest.raises(ValueError, match=r"loop must be a divisor of L = 4"):
        make_config("cpu", L=4, loop=3)
    with pytest.raises(ValueError, match=r"clusters must be >= 0, got -1"):
        make_config("cpu", clusters=-1)


def test_every_field_decides_whether_it_enters_the_run_id():
    """Each RunConfig field says, in its metadata, whether the run id hashes it (RUN_ID_RULES) and
    what it means (its help): a field added without deciding (a plain `name: int = 0`, which would
    change every stored run id) fails here, and `_field` has no default for the decision."""
    import dataclasses

    from depthscale.config.run import (FIELD_HELP, ID_EXCLUDED_FIELDS, ID_OPTIONAL_FIELDS, RUN_ID_RULES, _field,
                                   undecided_fields)

    assert undecided_fields(RunConfig) == []
    assert all(FIELD_HELP[f.name].strip() for f in dataclasses.fields(RunConfig))
    assert ID_OPTIONAL_FIELDS == ("clusters", "loop", "heads", "mlp", "construct_heads") and ID_EXCLUDED_FIELDS == ("preset",)
    assert {f.metadata["run_id"] for f in dataclasses.fields(RunConfig)} == set(RUN_ID_RULES)
    # a new field without the decision is named; `_field` refuses a missing or unknown one
    grown = dataclasses.make_dataclass("Grown", [("width2", int, dataclasses.field(default=0))], bases=(RunConfig,),
                                       frozen=True)
    assert undecided_fields(grown) == ["width2"]
    with pytest.raises(TypeError):
        _field(0, "a new field")  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="run_id must be one of"):
        _field(0, "a new field", run_id="sometimes")


def test_to_dict_is_dataclasses_asdict_because_every_field_is_a_scalar():
    # RunConfig.to_dict copies the fields shallowly (issue 50: asdict's deep copy cost seconds per
    # reproduction); exact only while no field holds a list, dict or dataclass
    import dataclasses

    assert {f.type for f in dataclasses.fields(RunConfig)} <= {"str", "int", "float", "bool"}
    for cfg in (make_config("smoke"), make_config("cpu", model="linear", task="easy", L=8),
                make_config("paper", k=16, a=1.0, b=0.5, seed=3)):
        d = cfg.to_dict()
        assert d == dataclasses.asdict(cfg) and list(d) == [f.name for f in dataclasses.fields(RunConfig)]
        assert RunConfig.from_dict(d) == cfg
