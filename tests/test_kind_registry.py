"""One registration per model kind (issue 34, item 1): `@register_kind` refuses a class that does not
state a fact of kind_registry.FACTS itself (or through a registered kind it extends), states one
outside its values, lacks a method of METHODS, or takes a registered name; config and the model
layer read the registry; DEPTHSCALE_KINDS plug-ins are loaded as DEPTHSCALE_EXPERIMENTS's are."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import forked_cli

from depthscale.base.errors import InputError
from depthscale.base.plugins import plugin_files
from depthscale.config import kind_registry
from depthscale.config.kind_registry import FACTS, METHODS, find_kind, kind_names, register_kind
from depthscale.config.run import FIELD_CHOICES, ConfigError, make_config
from depthscale.kinds.attention import AttentionStack
from depthscale.kinds.base import ModelKind
from depthscale.kinds.ensemble import Nonlinear

STATED = dict(geometry="softmax", loopable=False, packs_across_depth=False, label_linear=True)


def _methods() -> dict:
    return {"activation_floats": classmethod(lambda cls, cfg: (1, 1)), "layer_matrices": classmethod(lambda cls, cfg: 0),
            "validate": classmethod(lambda cls, cfg: None)}


def toy(name: str = "toy_kind", base: type = ModelKind, **body) -> type:
    return type("Toy", (base,), {"kind": name, **STATED, **_methods(), **body})


@pytest.fixture
def registry(monkeypatch):
    """A copy of the registry for the test: what it registers is gone after it."""
    kind_names()  # the built-in kinds loaded first
    monkeypatch.setattr(kind_registry, "_KINDS", dict(kind_registry._KINDS))


def test_a_class_stating_everything_registers_and_config_reads_it(registry):
    cls = register_kind(toy())
    assert find_kind("toy_kind") is cls and "toy_kind" in kind_names() and "toy_kind" in FIELD_CHOICES["model"]
    assert register_kind(cls) is cls  # registering the same class again changes nothing
    assert make_config("smoke", model="toy_kind").d == make_config("smoke", model="nonlinear").d  # its geometry


@pytest.mark.parametrize("name", list(FACTS) + list(METHODS))
def test_a_kind_that_lacks_a_fact_or_a_method_is_refused(registry, name):
    cls = toy()
    delattr(cls, name)
    what = f"does not state {name} " if name in FACTS else f"does not write the class method {name} "
    with pytest.raises(InputError, match=rf"model kind 'toy_kind' \(Toy\) {what}"):
        register_kind(cls)
    assert find_kind("toy_kind") is None


@pytest.mark.parametrize("fact, value", [("geometry", "cubic"), ("loopable", 1), ("label_linear", None),
                                         ("packs_across_depth", "yes")])
def test_a_fact_outside_its_values_is_refused(registry, fact, value):
    with pytest.raises(InputError, match=f"model kind 'toy_kind': {fact} must be one of .*, got {value!r}"):
        register_kind(toy(**{fact: value}))


def test_a_fact_of_a_shared_base_is_no_statement_but_a_registered_kinds_is(registry):
    """A kind inherits a fact only from a registered kind it extends (layer_values from nonlinear),
    never from a base class that is no kind (whose default could be silently wrong for it)."""
    base = type("Base", (ModelKind,), {"loopable": True})
    cls = toy(base=base)
    delattr(cls, "loopable")
    with pytest.raises(InputError, match="does not state loopable"):
        register_kind(cls)
    sub = register_kind(type("Sub", (Nonlinear,), {"kind": "sub_kind"}))
    assert (sub.geometry, sub.loopable, sub.packs_across_depth) == ("softmax", True, True)
    assert not any(fact in vars(AttentionStack) or fact in vars(ModelKind) for fact in FACTS)  # no defaults there


def test_a_name_is_registered_once(registry):
    with pytest.raises(InputError, match="model kind 'nonlinear' is registered twice"):
        register_kind(toy("nonlinear"))
    with pytest.raises(InputError, match="must state kind = '<name>'"):
        register_kind(toy("not a name"))


def test_the_kinds_validate_is_configs(registry):
    def validate(cls, cfg):
        if cfg.k != 2:
            raise ConfigError(f"k must be 2 for model = toy_kind, got {cfg.k}")

    register_kind(toy(validate=classmethod(validate)))
    assert make_config("smoke", model="toy_kind", k=2).k == 2
    with pytest.raises(ConfigError, match="k must be 2 for model = toy_kind, got 3"):
        make_config("smoke", model="toy_kind", k=3)
    with pytest.raises(ConfigError, match="heads must be a divisor of N = 8"):  # the Transformer's own rule
        make_config("smoke", model="transformer", heads=3)


def test_importing_config_loads_no_kind():
    code = "import sys, depthscale.config.run; print(sorted(m for m in sys.modules if m == 'torch' or 'kinds' in m))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_plugin_files_and_a_broken_plugin_are_named(tmp_path):
    assert plugin_files(kind_registry.PLUGIN_ENV, "model kind", "") == []
    with pytest.raises(InputError, match="DEPTHSCALE_KINDS: no model kind file or directory"):
        plugin_files(kind_registry.PLUGIN_ENV, "model kind", str(tmp_path / "nope.py"))
    bad = tmp_path / "bad.py"
    bad.write_text("from depthscale.config.kind_registry import register_kind\nfrom depthscale.kinds.base import ModelKind\n"
                   "@register_kind\nclass Half(ModelKind):\n    kind = 'half'\n    geometry = 'softmax'\n")
    r = forked_cli.run(["train", "--preset", "smoke", "--store", tmp_path / "s"],
                       env={**os.environ, kind_registry.PLUGIN_ENV: str(bad)})
    lines = r.stderr.splitlines()
    assert r.returncode == 2 and len(lines) == 1 and str(bad) in lines[0] and "does not state loopable" in lines[0]
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["sweep", "--help"], ["theory", "--help"],
                                  ["fit", "--help"], ["report", "--help"]])
def test_a_command_other_than_train_builds_its_parser_without_the_kinds(argv):
    # train's per-field flags read defaults from the kinds' registrations (torch, ≈ 2 s); only train builds them
    code = ("import sys; from depthscale.cli import main\ntry:\n    main.main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('depthscale.kinds')), file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, check=True)
    assert out.stderr.strip().splitlines()[-1] == "[]"
    train = subprocess.run([sys.executable, "-c", code, "train", "--help"], capture_output=True, text=True, check=True)
    assert "--qk_std" in train.stdout.replace("--qk-std", "--qk_std") and "'torch'" in train.stderr
