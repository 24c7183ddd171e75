"""The registry of model kinds (SPEC §3): each kind's class registers here once (`@register_kind`,
which checks that it states every fact of FACTS and writes every method of METHODS), and config,
the model layer, the memory estimate and the experiments ask it by RunConfig.model, never by name.

It sits in config, below the kinds, so it imports none: the built-in kinds are loaded by the
loader the package root installs (`use_builtins`), the DEPTHSCALE_KINDS plug-ins by base.plugins,
both on the first question, so importing config loads no torch.
"""

from __future__ import annotations

import hashlib
from itertools import combinations
from pathlib import Path
from typing import Callable, Sequence

from depthscale.base.errors import InputError
from depthscale.base.plugins import guard_class, load_plugin, plugin_files

PLUGIN_ENV = "DEPTHSCALE_KINDS"
# the geometries config.GEOMETRIES has presets for: the linear model's, and every softmax model's
GEOMETRY_KINDS = ("linear", "softmax")
# the starts (RunConfig.qk_init) beyond independent, tied and spread: implemented only by the kinds
# whose special_starts name them
SPECIAL_STARTS = ("gd", "constructive")
# the class facts every kind states: name -> (what it says, its values)
FACTS: dict[str, tuple[str, tuple]] = {
    "geometry": ("the presets' (d, P, N) it runs at", GEOMETRY_KINDS),
    "loopable": ("whether tied layers (RunConfig.loop >= 1) are implemented", (True, False)),
    "packs_across_depth": ("whether models of different depths share a pack", (True, False)),
    "label_linear": ("whether y_hat is linear in the context labels (SPEC §5's mode-wise loss)", (True, False)),
}
# the class facts a kind states where it differs from the default: name -> (what it says, its values,
# the default, which registering sets on a class that states none)
DEFAULT_FACTS: dict[str, tuple[str, tuple, object]] = {
    "special_starts": ("the SPECIAL_STARTS (RunConfig.qk_init) it implements",
                       tuple(c for n in range(len(SPECIAL_STARTS) + 1) for c in combinations(SPECIAL_STARTS, n)), ()),
    "depth_set": ("the depth set its experiment groups train by default (records.DEPTH_SETS; 'variant' stops at "
                  "records.VARIANT_MAX_DEPTH, for kinds whose layers cost the most)", ("all", "variant"), "all"),
}
# the class methods every kind writes: name -> what it is
METHODS: dict[str, str] = {
    "activation_floats": "its memory estimate: floats one context keeps for the backward pass, per layer and per model",
    "layer_matrices": "its memory estimate: N x N parameter matrices per layer",
    "validate": "its own rules on a RunConfig's fields (raise config.ConfigError; nothing to check: return None)",
}

_KINDS: dict[str, type] = {}
PLUGIN_SOURCES: dict[str, Path] = {}  # the kinds the plug-ins registered: name -> the file
PLUGIN_CODE: dict[str, str] = {}  # ... -> the sha256 (16 hex digits) of that file's bytes as loaded
_loaded = False
_builtins: Callable[[], object] = lambda: None  # imports the built-in kinds: use_builtins


def use_builtins(load: Callable[[], object]) -> None:
    """Load the built-in kinds by calling `load` on the first question (the package root hands it
    a function importing depthscale.kinds, whose modules register themselves)."""
    global _builtins
    _builtins = load


def _stated_by(cls: type, name: str) -> type | None:
    """The class whose body states attribute `name` for `cls`: `cls` itself or a registered kind it
    extends (None where no class does, or only a base that is no kind)."""
    owner = next((c for c in cls.__mro__ if name in vars(c)), None)
    return owner if owner is cls or owner in _KINDS.values() else None


def _one_of(kind: str, fact: str, value: object, values: tuple) -> None:
    if not any(value is v or (isinstance(v, (str, tuple)) and value == v) for v in values):
        raise InputError(f"model kind {kind!r}: {fact} must be one of {', '.join(map(repr, values))}, got {value!r}")


def _check(cls: type) -> str:
    """The kind's name, after checking that it states every fact and method; InputError otherwise."""
    kind = vars(cls).get("kind")
    if not isinstance(kind, str) or not kind.isidentifier():
        raise InputError(f"model kind {cls.__qualname__}: its class must state kind = '<name>' (RunConfig.model, "
                         f"an identifier), got {kind!r}")
    for fact, (what, values) in FACTS.items():
        if _stated_by(cls, fact) is None:
            raise InputError(f"model kind {kind!r} ({cls.__qualname__}) does not state {fact} ({what}: one of "
                             f"{', '.join(map(repr, values))}); every kind states it (kind_registry.FACTS)")
        _one_of(kind, fact, getattr(cls, fact), values)
    for fact, (_, values, default) in DEFAULT_FACTS.items():
        _one_of(kind, fact, getattr(cls, fact, default), values)
    for method, what in METHODS.items():
        if not callable(getattr(cls, method, None)):
            raise InputError(f"model kind {kind!r} ({cls.__qualname__}) does not write the class method {method} "
                             f"({what}); every kind writes it (kind_registry.METHODS)")
    old = _KINDS.get(kind)
    if old is not None and old is not cls:
        raise InputError(f"model kind {kind!r} is registered twice ({old.__module__}.{old.__qualname__} and "
                         f"{cls.__module__}.{cls.__qualname__})")
    return kind


def register_kind(cls: type) -> type:
    """Class decorator: register the model kind `cls` under its `kind` (checked: _check); returns it."""
    _KINDS[_check(cls)] = cls
    for fact, (_, _, default) in DEFAULT_FACTS.items():
        if not hasattr(cls, fact):
            setattr(cls, fact, default)
    return cls


def _load() -> None:
    """Load the built-in kinds, then the plug-in files (once; again after a failure)."""
    global _loaded
    if _loaded:
        return
    _loaded = True  # set first: a kind module that asks while it loads sees the kinds registered so far
    try:
        _builtins()
        for path in plugin_files(PLUGIN_ENV, "model kind"):
            before = set(_KINDS)
            load_plugin(path, PLUGIN_ENV, "model kind")
            code = hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
            for kind in set(_KINDS) - before:  # its methods (forward, validate, ...) guarded: plugins.guarded
                PLUGIN_SOURCES[kind] = path
                PLUGIN_CODE[kind] = code
                guard_class(_KINDS[kind], path, PLUGIN_ENV, "model kind")
    except BaseException:
        _loaded = False
        raise


def plugin_code(name: object) -> str | None:
    """The hash of the plug-in file that registered kind `name` (None for a kind of the package):
    part of its runs' ids (config.run.run_id), so that results of edited plug-in code are never
    read as the new code's."""
    _load()
    return PLUGIN_CODE.get(name) if isinstance(name, str) else None


def kind_names() -> tuple[str, ...]:
    """Every registered kind's name (RunConfig.model), sorted."""
    _load()
    return tuple(sorted(_KINDS))


def find_kind(name: object) -> type | None:
    """The class registered as `name`, or None where none is."""
    _load()
    return _KINDS.get(name) if isinstance(name, str) else None


class KindNames(Sequence):
    """kind_names() as a sequence read when it is used (config.FIELD_CHOICES: importing config loads no kind)."""

    def __getitem__(self, i):
        return kind_names()[i]

    def __len__(self) -> int:
        return len(kind_names())

    def __repr__(self) -> str:
        return repr(kind_names())


__all__ = ["register_kind", "kind_names", "find_kind", "KindNames", "FACTS", "DEFAULT_FACTS", "METHODS", "GEOMETRY_KINDS",
           "SPECIAL_STARTS",
           "PLUGIN_ENV", "PLUGIN_SOURCES", "PLUGIN_CODE", "plugin_code", "use_builtins"]
