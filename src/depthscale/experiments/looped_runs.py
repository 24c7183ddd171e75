"""Looped stacks (beyond the paper, docs/beyond.md): the `looped` record's runs (LOOPED_GROUPS) and
their reading back from the store for its figure, table and claims (experiments.looped).

A looped model (RunConfig.loop = B) has B distinct layers; layer l (0-based) uses the weights of
layer l % B, so it owns B rows of W_q, W_k (kinds.attention.AttentionStack) and is initialised and trained at
the rate of the untied B-layer model (training.base_lr). At L = B it *is* the untied B-layer model,
so a tying's depth curve starts at that untied run (the registry trains looped runs from L = 2B).

Loss per parameter. Depth at fixed width adds 2N^2 trained scalars per distinct layer; a looped
model adds compute without them. Two measures follow, both against runs of the same model kind:
- gain = R_1 - R_L: the loss a model buys over the one-layer model (the same run for every tying);
  gain_per_kparam = gain / ((n - n_1) / 1000), per thousand trained scalars it adds over the
  one-layer model; undefined (NaN) for B = 1, which adds none: all of its gain is bought by compute.
- vs_same_params = R_B(untied) - R_L: what looping the B-layer model to depth L buys at an equal
  parameter count (positive: looping helps; 0 by definition at L = B and for untied rows: NaN).
"""

from __future__ import annotations

import math

from depthscale.analysis.results import Results
from depthscale.config.paper import ORIGIN
from depthscale.config.records import RunGroup, preset_shape

LOOPED_B = (1, 2, 4)
LOOPED_MAX_DEPTH = 8
LOOPED_DEPTHS: dict[int, tuple[int, ...]] = {1: (2, 4, 8), 2: (4, 8), 4: (8,)}
LOOPED_MODELS = ("single_stream", "context_updates")
# the `looped` record's runs (experiments.looped registers them)
LOOPED_GROUPS = (
    (RunGroup("nonlinear", "difficult", 2, ORIGIN, (1,)),
     RunGroup("nonlinear", "difficult", 2, ORIGIN, (4,), (("loop", 1),)))
    + tuple(RunGroup(m, "difficult", 2, ORIGIN, (1, 2, 4, LOOPED_MAX_DEPTH)) for m in LOOPED_MODELS)
    + tuple(RunGroup(m, "difficult", 2, ORIGIN, LOOPED_DEPTHS[B], (("loop", B),))
            for m in LOOPED_MODELS for B in LOOPED_B))

TASK, K, SPECTRUM = "difficult", 2, (0.0, 0.0)
TYINGS = (0,) + LOOPED_B  # 0 = untied
COLUMNS = ("model", "tying", "L", "params", "R", "R_se", "A", "C", "A_minus_C", "gain", "gain_per_kparam",
           "vs_same_params")


def tying_name(B: int) -> str:
    return "untied" if B == 0 else f"B={B}"


def n_params(model: str, d: int, N: int, L: int, loop: int = 0) -> int:
    """Trained scalars of one model of kind `model` (its class's `count_params`, SPEC §3): W_x,
    W_y, W_o, W_v (shared, or one per distinct layer), W_q and W_k per distinct layer, and the
    kind's scalars. A looped model counts its B distinct layers once."""
    from depthscale.kinds.lookup import model_class  # (the model layer loads torch)

    return model_class(model).count_params(d, N, L, loop)


def _groups(preset: str) -> tuple[RunGroup, ...]:
    return tuple(g for g in LOOPED_GROUPS if g.in_preset(preset))


def models_of(preset: str) -> tuple[str, ...]:
    """The model kinds the `looped` experiment trains at `preset`, in the registry's order."""
    return tuple(dict.fromkeys(g.model for g in _groups(preset)))


def depths_of(preset: str, model: str, B: int) -> tuple[int, ...]:
    """The depths the `looped` experiment trains for (model, tying B) at `preset` (B = 0: untied)."""
    out: list[int] = []
    for g in _groups(preset):
        if g.model == model and dict(g.fields).get("loop", 0) == B:
            out += [L for L in g.depths_for(preset) if L not in out]
    return tuple(sorted(out))


def _run_row(res: Results, model: str, B: int, L: int) -> dict | None:
    """Seed means of one cell: the untied runs for B = 0 or L = B, the looped ones otherwise."""
    # strict views both: a plain Results would fall back to another recipe's runs of the cell (a
    # looped run where the untied one is missing)
    view = res.view(loop=B if B and L != B else 0)
    s = view.series(model, TASK, K, *SPECTRUM, (L,))
    if not s:
        return None
    return {"R": float(s.get("R")[0]), "R_se": float(s.get("R_se")[0]), "A": float(s.get("A")[0]),
            "C": float(s.get("C")[0]), "A_minus_C": float(s.get("gap")[0]),
            "run": "untied" if not B or L == B else "looped"}


def curve(res: Results, model: str, B: int) -> list[dict]:
    """One tying's depth curve (rows with L and the run's numbers; missing depths left out). A tied
    curve (B >= 1) starts at the untied L = B run when B is an untied depth of the experiment."""
    depths = list(depths_of(res.preset, model, B))
    if B and B in depths_of(res.preset, model, 0):
        depths = sorted({B, *depths})
    out = []
    for L in depths:
        r = _run_row(res, model, B, L)
        if r is not None:
            out.append({"L": L, **r})
    return out


def missing(res: Results) -> list[str]:
    """Cells of the `looped` experiment without a finite run, as 'model B L' strings."""
    miss = []
    for model in models_of(res.preset):
        for B in TYINGS:
            for L in depths_of(res.preset, model, B):
                if _run_row(res, model, B, L) is None:
                    miss.append(f"{model} {tying_name(B)} L={L}")
    return miss


def rows(res: Results) -> list[dict]:
    """Every model x tying x depth of the experiment (COLUMNS), untied first, then B = 1, 2, 4: one
    row per trained run (a tying's L = B point is the untied row of that depth)."""
    out = []
    for model in models_of(res.preset):
        d, _ = preset_shape(res.preset, model)
        N = make_N(res.preset, model)
        one = _run_row(res, model, 0, 1)
        R1 = one["R"] if one else math.nan
        n1 = n_params(model, d, N, 1)
        untied = {r["L"]: r for r in curve(res, model, 0)}
        for B in TYINGS:
            for r in curve(res, model, B):
                if B and r["run"] == "untied":
                    continue
                L = r["L"]
                n = n_params(model, d, N, L, B)
                gain = R1 - r["R"]
                same = untied.get(B) if B else None
                out.append({"model": model, "tying": tying_name(B), "L": L, "params": n,
                            **{k: r[k] for k in ("R", "R_se", "A", "C", "A_minus_C")},
                            "gain": gain, "gain_per_kparam": gain / ((n - n1) / 1000) if n > n1 else math.nan,
                            "vs_same_params": (same["R"] - r["R"]) if same and L != B else math.nan})
    return out


def make_N(preset: str, model: str) -> int:
    from depthscale.config.run import geometry

    return geometry(preset, model)["N"]


def frame(res: Results):
    import pandas as pd

    return pd.DataFrame(rows(res), columns=list(COLUMNS))


__all__ = ["LOOPED_B", "LOOPED_MODELS", "LOOPED_GROUPS", "LOOPED_DEPTHS", "LOOPED_MAX_DEPTH", "n_params", "models_of", "rows", "curve", "frame", "missing", "depths_of", "tying_name", "TYINGS", "COLUMNS"]
