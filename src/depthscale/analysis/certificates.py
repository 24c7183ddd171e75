"""Convergence certificates of a set of runs along depth (SPEC §4), each a necessary condition for
convergence, computed on the evaluation contexts and paired by context:

- doubling: R_2L <= R_L + 2 SE(R_2L - R_L). A 2L stack can copy an L stack exactly (each layer
  twice, the same averaged attention), so at convergence depth never hurts. A failure is marked
  at the deeper depth 2L (the run that has not reached what its shallower neighbour shows).
- construction: R_L <= B_L + 2 SE(R_L - B_L), B_L the best equal-weight stack of L cosine-softmax
  heads with one gain on the same contexts (softmax_floor.floor_from_contexts' best_stack,
  cross-fitted; at L = 1 the best single head). Each such stack is one setting of the model.
  B_L here is the mean over contexts of the held-out stack's errors (paired with R_L context by
  context); best_stack's R weights its cross-fitting batches equally, which differs from it only
  when the batches are of unequal sizes (by ~0.05% at 512 contexts in 10 batches).
- budget (where a study has budgets): the seed-mean R_L at the largest budget is not above the
  one at half that budget by more than 2 paired SE.

The pure functions take per-context squared errors (numpy arrays in one context order); with
several seeds, a depth's array is the seed mean per context (runs of one spectrum share their
evaluation contexts) and the SE combines the seeds' spread of the difference with its contexts'
SE (SPEC §4; `paired_gap`, `seed_variance`); with one seed, the contexts' alone. `certify`
combines them per depth; `series_certificates` reads a series' runs through the store's models
(paired.per_context) and B_L on their evaluation contexts (paired.floor_on_eval with depths).
`curve` gives what a figure draws (per depth: R_L, B_L, and which certificates pass).
"""

from __future__ import annotations

import math
from typing import Mapping

import numpy as np

from depthscale.analysis import paired
from depthscale.analysis.results import Results
from depthscale.base.errors import InputError

NAMES = ("doubling", "construction", "budget")


def paired_gap(sq_a, sq_b, seeds_a: Mapping | None = None, seeds_b: Mapping | None = None) -> dict:
    """mean(sq_a - sq_b) over contexts and the SE of that paired difference; ok iff the mean is
    at most 2 SE (a above b by no more than noise). With the sets' per-seed means (`seeds_a`,
    `seeds_b`: {seed: R of that seed's run}; None for a reference without seeds, B_L), the SE
    combines the seeds' spread with the contexts' sampling (SPEC §4, 2026-12-06):
    SE² = s²(per-seed differences)/n + SE²(the context-paired difference of the seed means)."""
    a, b = np.asarray(sq_a, dtype=np.float64), np.asarray(sq_b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1 or a.size < 2:
        raise InputError(f"paired arrays must be 1-D of one length >= 2, got shapes {a.shape} and {b.shape}")
    d = a - b
    diff, se_ctx = float(d.mean()), float(d.std(ddof=1) / math.sqrt(d.size))
    var_seeds, n = seed_variance(seeds_a, seeds_b)
    se = math.sqrt(se_ctx ** 2 + var_seeds)
    return {"diff": diff, "se": se, "ok": bool(diff <= 2 * se), "se_contexts": se_ctx, "seeds": n}


def seed_variance(seeds_a: Mapping | None, seeds_b: Mapping | None) -> tuple[float, int]:
    """(s²(per-seed differences)/n, n): seeds common to both sets paired (the same seed number:
    the same training stream); a reference without seeds (None) is a constant; sets with no seed in
    common, the two sets' variances of the mean added. 0 with fewer than 2 seeds (one seed: the
    contexts' SE alone)."""
    a = {s: float(v) for s, v in (seeds_a or {}).items()}
    b = None if seeds_b is None else {s: float(v) for s, v in seeds_b.items()}
    if b is None:
        vals = list(a.values())
        return (float(np.var(vals, ddof=1)) / len(vals), len(vals)) if len(vals) >= 2 else (0.0, len(vals))
    common = sorted(set(a) & set(b))
    if len(common) >= 2:
        d = [a[s] - b[s] for s in common]
        return float(np.var(d, ddof=1)) / len(d), len(d)
    var = sum(float(np.var(list(x.values()), ddof=1)) / len(x) for x in (a, b) if len(x) >= 2)
    return var, min(len(a), len(b))


def doubling(sq: Mapping[int, np.ndarray], seeds: Mapping | None = None) -> dict[int, dict]:
    """{2L: paired_gap(sq[2L], sq[L]) with "vs": L} for every L whose double is present."""
    s = seeds or {}
    return {2 * L: dict(paired_gap(sq[2 * L], sq[L], s.get(2 * L), s.get(L)), vs=int(L))
            for L in sorted(sq) if 2 * L in sq}


def construction(sq: Mapping[int, np.ndarray], stack: Mapping[int, np.ndarray],
                 seeds: Mapping | None = None) -> dict[int, dict]:
    """{L: paired_gap(sq[L], stack[L]) with "B": mean of stack[L]} for every L in both."""
    s = seeds or {}
    return {L: dict(paired_gap(sq[L], stack[L], s.get(L), None), B=float(np.mean(stack[L])))
            for L in sorted(sq) if L in stack}


def budget(sq: Mapping[int, np.ndarray], half: Mapping[int, np.ndarray], seeds: Mapping | None = None,
           half_seeds: Mapping | None = None) -> dict[int, dict]:
    """{L: paired_gap(sq[L], half[L])}: the largest budget against half of it, every L in both."""
    s, h = seeds or {}, half_seeds or {}
    return {L: paired_gap(sq[L], half[L], s.get(L), h.get(L)) for L in sorted(sq) if L in half}


def certify(sq: Mapping[int, np.ndarray], stack: Mapping[int, np.ndarray] | None = None,
            half: Mapping[int, np.ndarray] | None = None, seeds: Mapping | None = None,
            half_seeds: Mapping | None = None) -> dict:
    """Every certificate per depth: {"depths", "R", "per_depth": {L: {"R", "B", "doubling",
    "construction", "budget", "ok"}}, "failing": {name: [depths]}}; `seeds` ({L: {seed: R}}) and
    `half_seeds`: the per-seed means whose spread each SE combines (paired_gap). A certificate that does not
    apply at a depth (doubling at the shallowest, no stack, no budgets) is None there and counts
    as passed; "computed" lists those that were computed at all."""
    dbl = doubling(sq, seeds)
    con = construction(sq, stack, seeds) if stack is not None else {}
    bud = budget(sq, half, seeds, half_seeds) if half is not None else {}
    per = {}
    for L in sorted(sq):
        c = {"doubling": dbl.get(L), "construction": con.get(L), "budget": bud.get(L)}
        per[int(L)] = {"R": float(np.mean(sq[L])), "B": con[L]["B"] if L in con else math.nan, **c,
                       "ok": all(v is None or v["ok"] for v in c.values())}
    failing = {n: [L for L, p in per.items() if p[n] is not None and not p[n]["ok"]] for n in NAMES}
    computed = [n for n, got in zip(NAMES, (dbl, con, bud)) if got]
    return {"depths": sorted(per), "per_depth": per, "failing": failing, "computed": computed}


def failing_text(cert: dict) -> str:
    """'doubling fails at L=8, 32; construction fails at L=2' ('' when every depth passes)."""
    return "; ".join(f"{n} fails at L={', '.join(map(str, Ls))}" for n, Ls in cert["failing"].items() if Ls)


def summary_text(cert: dict) -> str:
    """'certificates (doubling, construction): L=2 construction +0.032±0.004 NO, ...' listing every
    failing depth's numbers, or 'all pass'."""
    bad = []
    for L, p in cert["per_depth"].items():
        for n in NAMES:
            if p[n] is not None and not p[n]["ok"]:
                bad.append(f"L={L} {n} {p[n]['diff']:+.4g}±{p[n]['se']:.2g}")
    head = f"certificates ({', '.join(cert['computed']) or 'none computed'})"
    return f"{head}: " + (", ".join(bad) + " > 2 SE" if bad else "all pass")


def curve(cert: dict) -> list[dict]:
    """What a figure draws beside a claim's curve: per depth L, R_L, B_L (nan without a stack) and
    each certificate's pass (True/False, None where it does not apply)."""
    return [{"L": L, "R": p["R"], "B": p["B"], "ok": p["ok"],
             **{n: (None if p[n] is None else bool(p[n]["ok"])) for n in NAMES}}
            for L, p in cert["per_depth"].items()]


# ---------------------------------------------------------------- reading the store

def series_contexts(res: Results, model: str, task: str, k: int, a: float, b: float, depths,
                    device="cpu", seeds: dict | None = None) -> tuple[dict[int, np.ndarray], object]:
    """{L: seed-mean squared error per evaluation context} of a series' runs (paired.per_context
    through the store's models) and the config of one run (for B_L on the same contexts); `seeds`,
    a dict given, receives {L: {seed: that seed's mean over the contexts}}. InputError when runs of
    the series do not share their evaluation contexts."""
    out, key, cfg = {}, None, None
    for L in depths:
        rows = res.runs(model, task, k, a, b, L)
        if not rows:
            continue
        got = [paired.per_context(res.reader, r["run_id"], device) for r in rows]
        for g in got:
            if key is None:
                key, cfg = g["key"], res.reader.load_config(g["run_id"])
            elif g["key"] != key:
                raise InputError(f"run {g['run_id']} does not share the series' evaluation contexts")
        out[int(L)] = np.mean([g["sq_err"] for g in got], axis=0)
        if seeds is not None:
            seeds[int(L)] = {r.get("seed", i): float(np.mean(g["sq_err"])) for i, (r, g) in enumerate(zip(rows, got))}
    return out, cfg


def series_certificates(res: Results, model: str, task: str, k: int, a: float, b: float, depths=None,
                        half: Results | None = None, device="cpu", construction: bool = True) -> dict:
    """`certify` on a series of stored runs: doubling; construction against the best stacks on
    their evaluation contexts when `construction` (the caller says whether a stack of cosine heads
    is a setting of the runs' model: the controlled nonlinear model on the difficult task, SPEC
    §4); budget against the same series in `half` (a Results view of the runs at half the budget)
    when given."""
    if res.reader is None:
        raise InputError("certificates need the store's models (these results have no store)")
    depths = [int(L) for L in (depths if depths is not None else res.series(model, task, k, a, b).depths)]
    seeds, half_seeds = {}, {}
    sq, cfg = series_contexts(res, model, task, k, a, b, depths, device, seeds)
    if not sq:
        raise InputError(f"no runs of {model}/{task} k={k} ({a}, {b}) to certify")
    stack = None
    if construction:
        fl = paired.floor_on_eval(cfg, device, depths=tuple(sorted(sq)), reader=res.reader)
        stack = fl["sq_err_stack"]
    halved = series_contexts(half, model, task, k, a, b, sorted(sq), device, half_seeds)[0] if half is not None else None
    return certify(sq, stack, halved, seeds, half_seeds)


__all__ = ["paired_gap", "doubling", "construction", "budget", "certify", "failing_text", "summary_text", "curve",
           "series_contexts", "series_certificates", "NAMES"]
