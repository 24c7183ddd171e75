"""The model layer's door to the model kinds (SPEC §3): which class implements each RunConfig.model.

Every kind is one class meeting the protocol of `kinds.base.ModelKind` (parameters and init,
forward, what the measurements need, memory and cost estimates), registered once with
`@kind_registry.register_kind` in its own file (`src/depthscale/kinds/`, or a plug-in named by
DEPTHSCALE_KINDS). Code outside the model layer finds a kind's class here (`model_class`, which asks
the registry) and asks it; it never tests the kind's name:

    from depthscale.kinds.lookup import build_pack, model_class
    pack = build_pack(cfgs)                  # the pack of runs that share a pack_key
    outs = pack(X_BxPxd, y_BxP, xq_Bxd)      # [ModelOutput] per model
    model_class(cfg.model).label_linear      # a class fact

A pack holds M models of one kind side by side (M = 1: a single model); which runs may share a pack
is the kind's to say (`pack_key`).
"""

from __future__ import annotations

from depthscale.base.errors import InputError
from depthscale.config.kind_registry import find_kind, kind_names
from depthscale.config.run import RunConfig, config_dict
from depthscale.kinds.attention import AttentionStack
from depthscale.kinds.base import ModelKind


def model_class(kind: str) -> type[ModelKind]:
    """The class of the model kind `kind` (RunConfig.model), as registered (kind_registry)."""
    cls = find_kind(kind)
    if cls is None:
        raise InputError(f"model must be one of {', '.join(kind_names())}, got {kind!r}")
    return cls


def build_pack(cfgs: list[RunConfig]) -> ModelKind:
    """A pack for RunConfigs that share a pack key, initialised from their seeds."""
    return model_class(cfgs[0].model).from_configs(cfgs)


def pack_key(cfg: RunConfig) -> tuple:
    """Runs with equal keys can be trained as one pack: every field but those the kind lets differ
    inside a pack (`ModelKind.pack_free_fields`: the seed; for the ensemble kinds the depth; for the
    linear model the spectrum; none for a Transformer) and the preset label must agree."""
    drop = ("preset",) + model_class(cfg.model).pack_free_fields()
    return tuple(sorted(config_dict(cfg, drop).items()))


# ---- the names of earlier versions (scripts, tests and stored notebooks use them) ----

def AttentionPack(kind: str, d: int, N: int, depths: list[int], seeds: list[int], *args, **kwargs) -> AttentionStack:
    """A pack of the controlled attention kind `kind` (its class's constructor): the constructor
    of earlier versions, where one class held every controlled kind."""
    cls = model_class(kind)
    if not issubclass(cls, AttentionStack):
        raise InputError(f"AttentionPack builds the controlled attention kinds, not {kind!r} (use build_pack)")
    return cls(d, N, depths, seeds, *args, **kwargs)


def init_model_params(kind: str, d: int, N: int, L: int, qk_std: float, seed: int, *args, **kwargs) -> dict:
    """One model's initial parameters of the controlled kind `kind` (its class's `init_params`)."""
    return model_class(kind).init_params(d, N, L, qk_std, seed, *args, **kwargs)


__all__ = ["model_class", "build_pack", "pack_key", "AttentionPack", "init_model_params"]
