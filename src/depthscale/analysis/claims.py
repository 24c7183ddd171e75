"""The claim engine: checks a claim (records.Claim, kept in its experiment's record) on one
preset's stored results, PASS / FAIL / INCONCLUSIVE with the numbers, and the helpers every check
writes its detail with.

Each check returns a dict {id, claim, preset, measured, expected, verdict, pass, detail, uses}.
`verdict` is "PASS", "FAIL" or "INCONCLUSIVE" (SPEC §9); `pass` is True only for PASS (kept for
readers of older claims.json). `expected` is SPEC §9's criterion; `detail` restates the criterion
as applied, with its thresholds, and then every item's numbers and verdict. Every threshold is
SPEC §9's; where SPEC leaves an operational choice, the claim's experiment module writes it down,
once (depthscale/experiments/*.py).

A claim function returns (measured, ok, detail) with ok True (PASS), False (FAIL), None
(INCONCLUSIVE) or one of the three verdict names. INCONCLUSIVE is for the shape claims (5a, 6, 11):
an item that reads a depth failing a certificate of SPEC §4 (depthscale.analysis.certificates) is
INCONCLUSIVE naming the certificate and the depths; an item that fails with power < 0.8
(depthscale.analysis.power) is INCONCLUSIVE "underpowered" with the seeds that would reach 0.8. Items
combine (`combine`): FAIL if any item FAILs (on certified depths, with power), else INCONCLUSIVE if
any item is, else PASS. Counting (`count`, `count_text`) gives the three separately.

General rules:
- Missing data: a claim any of whose cells has no finite run (not run, failed, diverged) is
  INCONCLUSIVE with measured None and detail "missing runs: ..." (issue 51: a report never judges
  what was not measured; the report adds how many of the claim's runs are missing and where their
  ids are listed); it is never passed, nor failed, on partial data. A cell holding runs of another recipe
  only is missing (results.Results reads the current recipe's runs only) and the detail says so. Items with k not in the preset (k = 16
  at smoke) are left out of a claim and the detail says so; a claim with no items left is
  INCONCLUSIVE "missing runs".
- Seeds: every number is a seed mean (results.Results.series). An SE is the SE over seeds where a
  cell has two or more seeds, else the run's own evaluation SE (R_se) or the paired/bootstrap SE
  named by the claim. Fits (SPEC §6.1) are made to the seed means.
- Degenerate fits (SPEC §9): a claim built on a fit judges only a well-posed one; a degenerate fit
  (fits.FitResult.status: too few points, a parameter on its bound, no finite SE, R² undefined)
  makes its item INCONCLUSIVE with the reason and what would make the fit possible, or FAIL where
  the depth effect itself is absent (R_1 - R_Lmax within 2 combined SEs; that FAIL is not
  downgraded for power) — `degenerate`, through `shape_verdict`.
- Certificates (SPEC §4, §9): every claim on trained depths reads the certificates of the series
  it judges (`gate`, `certified`: doubling for every model, construction for CONSTRUCTION_KINDS);
  an item reading a failing depth, or one whose certificates cannot be computed, is INCONCLUSIVE
  naming the series, certificate and depths. On the converged envelope (nonlinear, difficult) an
  item with fewer than 3 seeds is INCONCLUSIVE "seeds" (`seeds_problem`).
- Paired tests (claims 3, 10) and the floor on the run's own evaluation contexts (5c) need the
  trained models (depthscale.analysis.paired on `res.reader`); without a store, or without that module, or
  where it cannot read a run's model, the claim FAILs "needs the store's models for the paired
  test: ...", never passes.
- Beyond the paper: every claim states its seeds per cell and, with fewer than 3, the reason
  (the preset's budget: records.PRESET_SEEDS). Differences are judged against 2 combined SEs
  (seed SEs where there are seeds, else evaluation SEs; runs of one spectrum share their
  evaluation contexts, so the combined SE is conservative for a difference). The identities the
  beyond experiments rest on (one tied nonlinear layer is one head; R = C + (A - C)/L in the
  Transformer) are true by construction and are tests (tests/test_looped.py,
  tests/test_transformer_experiment.py, tests/test_decompose.py), not claims.

The lookup by id (`registry.check_claim`, `registry.check_claims`, `registry.CLAIMS`) is the registry's:
this module knows no experiment.
"""

from __future__ import annotations

import math
import re
import warnings
from typing import Iterable

import numpy as np

from depthscale.analysis.power import MAX_SEEDS, TARGET
from depthscale.analysis.results import Results, Series, Theory
from depthscale.base.atomic import plain
from depthscale.base.formatting import label, number
from depthscale.config.records import PARTS, PRESET_KS, Claim


class MissingRuns(Exception):
    """A claim's data are not in the store."""


class CannotJudge(Exception):
    """A claim cannot be judged on these results (no store for a paired test, another geometry):
    FAIL with the reason."""


NEEDS_STORE = "needs the store's models for the paired test"

PASS, FAIL, INCONCLUSIVE = "PASS", "FAIL", "INCONCLUSIVE"
VERDICTS = (PASS, FAIL, INCONCLUSIVE)


def as_verdict(ok) -> str:
    """A claim function's `ok` as a verdict name: True PASS, False FAIL, None INCONCLUSIVE (a
    verdict name passes through)."""
    if ok is None:
        return INCONCLUSIVE
    if isinstance(ok, str):
        if ok not in VERDICTS:
            raise ValueError(f"unknown verdict {ok!r} (one of {', '.join(VERDICTS)})")
        return ok
    return PASS if bool(ok) else FAIL


def combine(verdicts: Iterable) -> str:
    """Items of one claim: FAIL if any FAILs, else INCONCLUSIVE if any is, else PASS (no items: FAIL)."""
    vs = [as_verdict(v) for v in verdicts]
    if not vs or FAIL in vs:
        return FAIL
    return INCONCLUSIVE if INCONCLUSIVE in vs else PASS


def claim_verdict(c: dict) -> str:
    """The verdict of a checked claim (`check`'s dict; an old dict without "verdict": by its "pass")."""
    return as_verdict(c.get("verdict") or bool(c.get("pass")))


def count(checked: Iterable[dict]) -> dict[str, int]:
    """{"PASS": n, "FAIL": n, "INCONCLUSIVE": n} of checked claims."""
    out = dict.fromkeys(VERDICTS, 0)
    for c in checked:
        out[claim_verdict(c)] += 1
    return out


def count_text(checked: Iterable[dict]) -> str:
    """'4 PASS, 9 FAIL, 3 INCONCLUSIVE of 16'."""
    checked = list(checked)
    n = count(checked)
    return f"{n[PASS]} PASS, {n[FAIL]} FAIL, {n[INCONCLUSIVE]} INCONCLUSIVE of {len(checked)}"


def mark(v) -> str:
    """An item's outcome at the end of its detail: 'ok', 'NO' or 'INCONCLUSIVE'."""
    return {PASS: "ok", FAIL: "NO", INCONCLUSIVE: "INCONCLUSIVE"}[as_verdict(v)]


def num(x) -> str:
    """A number in a claim's detail: 4 significant digits, 'nan' for NaN."""
    return number(x, table=False)


def fit_problem(f) -> str:
    """Why fit `f` cannot carry a claim ('' when it can): no fit, or a degenerate one and its reason."""
    if f is None:
        return "no fit"
    return "" if f.ok else f"degenerate fit: {f.reason}"


def yes(good: bool) -> str:
    return "ok" if good else "NO"


def verdict(good: bool, f) -> str:
    """'ok', 'NO', or 'NO (degenerate fit: reason)' at the end of an item's detail."""
    why = fit_problem(f)
    return "ok" if good else f"NO ({why})" if why else "NO"


def fitted(f, name: str = "α") -> str:
    """'α=0.95±0.03, R²=0.998' of a fit ('—' for each number where there is no fit)."""
    return (f"{name}={num(f.alpha if f else None)}±{num(f.alpha_se if f else None)}, "
            f"R²={num(f.r2 if f else None)}")


def cells_text(miss: list[str]) -> str:
    more = f" (+{len(miss) - 4} more)" if len(miss) > 4 else ""
    return f"missing runs: {len(miss)} cell(s): " + "; ".join(miss[:4]) + more


def require(res: Results, model: str, task: str, k: int, spectra, depths=None, what: str = "") -> None:
    """Raise MissingRuns naming the cells (model, task, k, spectrum, L) without a finite run."""
    miss = []
    for a, b in spectra:
        s = res.series(model, task, k, a, b, depths)
        miss += [f"{model}{what}/{task}{'' if task == 'easy' else f' k={k}'} {label(a, b)} L={L}"
                 + (" (the store holds runs of another recipe there: not read)"
                    if res.has_other_recipe(model, task, k, a, b, L) else "")
                 for L in s.missing]
    if miss:
        raise MissingRuns(cells_text(miss))


def present_ks(res: Results, pairs):
    """The (k, spectra) items of a claim that exist at this preset."""
    kept = [(k, sp) for k, sp in pairs if k in PRESET_KS[res.preset]]
    if not kept:
        raise MissingRuns(f"missing runs (k={','.join(str(k) for k, _ in pairs)} is not part of "
                          f"the {res.preset} preset)")
    return kept


def item_label(a: float, b: float, k: int) -> str:
    """A top-2 spectrum as '(a,b)', any other k as 'k=16 (a,b)' (claims mixing k = 2 and 16)."""
    return label(a, b) if k == 2 else label(a, b, k)


def left_out(res: Results, ks) -> str:
    """'; k=16 is not part of the smoke preset: its items are left out' (or '')."""
    gone = [k for k in ks if k not in PRESET_KS[res.preset]]
    return "".join(f"; k={k} is not part of the {res.preset} preset: its items are left out" for k in gone)


def point_se(s: Series, j: int, metric: str = "R") -> tuple[float, str]:
    """The SE of a seed-mean point: over seeds with >= 2 seeds, else the run's evaluation SE."""
    if s.n[j] > 1:
        return float(s.se[metric][j]), f"SE over {int(s.n[j])} seeds"
    ev = s.get(metric + "_se")
    return (float(ev[j]) if ev is not None and len(ev) > j else math.nan), "evaluation SE (one seed)"


def seeds_text(res: Results, ns: Iterable[int]) -> str:
    """'seeds per cell: 1 (one seed: the cpu preset's budget)', the reason with fewer than 3."""
    ns = [int(n) for n in ns]
    if not ns:
        return "seeds per cell: none"
    lo, hi = min(ns), max(ns)
    text = f"seeds per cell: {lo}" if lo == hi else f"seeds per cell: {lo}-{hi}"
    if lo == 1:
        text += f" (one seed: the {res.preset} preset's budget)"
    elif lo < 3:
        text += f" (fewer than 3: the {res.preset} preset's budget)"
    return text


def _paired():
    """depthscale.analysis.paired, or None where it is not installed (a claim that needs it then FAILs)."""
    try:
        from depthscale.analysis import paired
    except ImportError:
        return None
    return paired


def paired_or_fail(res: Results):
    """The paired module and the results' reader, or CannotJudge naming what is missing."""
    if res.reader is None:
        raise CannotJudge(f"{NEEDS_STORE} (these results have no store)")
    pm = _paired()
    if pm is None:
        raise CannotJudge(f"{NEEDS_STORE} (depthscale.analysis.paired is not available)")
    return pm


def call_paired(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - a run without its model cannot be paired: FAIL with why
        raise CannotJudge(f"{NEEDS_STORE} ({fn.__name__}: {type(e).__name__}: {e})") from None


def finite_runs(res: Results, model: str, task: str, k: int, a: float, b: float, L: int) -> dict:
    """{seed: row} of a cell's finite runs."""
    out = {}
    for r in res.runs(model, task, k, a, b, L):
        try:
            if math.isfinite(float(r.get("R"))):
                out[r["seed"]] = r
        except (TypeError, ValueError):
            continue
    return out


# ---------------------------------------------------------------- shape claims: certificates and power

def _certificates():
    """depthscale.analysis.certificates, or None where it is not available (the shape claims are then
    INCONCLUSIVE: certificates not computed)."""
    try:
        from depthscale.analysis import certificates
    except ImportError:
        return None
    return certificates


# the kinds of which an equal-weight stack of cosine-softmax heads is a setting (SPEC §4 (ii): the
# softmax family, where B_L is defined): the controlled nonlinear model, its per-layer values and its
# context updates at m = 0. Not the linear model, nor the single stream (its layers are cascaded).
CONSTRUCTION_KINDS = ("nonlinear", "layer_values", "context_updates")
ENVELOPE_SEEDS = 3  # SPEC §9: a claim judged on the envelope with fewer seeds is INCONCLUSIVE


def certified(res: Results, model: str, task: str, k: int, a: float, b: float, read=None,
              construction: bool | None = None) -> tuple[dict | None, str]:
    """(the series' certificates (certificates.series_certificates) as stored with a claim, why its
    items are INCONCLUSIVE or ''): 'uncertified: construction fails at L=2, 4' for failures at the
    depths the claim reads (`read`, default all), or 'certificates not computed (why)'.
    `construction`: whether the best cosine stack is a setting of the series' model (None: by the
    model, CONSTRUCTION_KINDS; the doubling certificate is computed for every model)."""
    if construction is None:
        construction = model in CONSTRUCTION_KINDS
    cm = _certificates()
    if cm is None:
        return None, "certificates not computed (depthscale.analysis.certificates is not available)"
    try:
        cert = cm.series_certificates(res, model, task, k, a, b, construction=construction)
    except Exception as e:  # noqa: BLE001 - no models, no store: the item cannot be certified, so not judged
        return None, f"certificates not computed ({type(e).__name__}: {e})"
    if read is not None:
        want = {int(L) for L in read}
        cert = dict(cert, failing={n: [L for L in Ls if L in want] for n, Ls in cert["failing"].items()})
    bad = cm.failing_text(cert)
    stored = {"per_depth": cm.curve(cert), "failing": cert["failing"], "computed": cert["computed"]}
    return stored, (f"uncertified: {bad}" if bad else "")


def series_name(model: str, task: str, k: int, a: float, b: float) -> str:
    """'nonlinear/difficult k=2 (0,0)' ('linear/easy (2,1)' on the easy task)."""
    return f"{model}/{task}{'' if task == 'easy' else f' k={k}'} {label(a, b)}"


def seeds_problem(res: Results, model: str, task: str, k: int, a: float, b: float, read=None) -> str:
    """'' or why a series read on the converged envelope (SPEC §9: the nonlinear difficult-task
    claims) is INCONCLUSIVE: 'seeds: 1 < 3 at L=1, 64' (fewer than ENVELOPE_SEEDS finite runs)."""
    if (model, task) != ("nonlinear", "difficult"):
        return ""
    s = res.series(model, task, k, a, b)
    want = None if read is None else {int(L) for L in read}
    few = [(int(L), int(n)) for L, n in zip(s.depths, s.n) if (want is None or int(L) in want) and n < ENVELOPE_SEEDS]
    if not few:
        return ""
    return (f"seeds: {min(n for _, n in few)} < {ENVELOPE_SEEDS} on the envelope at "
            f"L={', '.join(str(L) for L, _ in few)}")


def gate(res: Results, reads) -> tuple[dict, str]:
    """Certificates (and, on the envelope, seeds) of every series an item of a claim reads (SPEC §9:
    no claim is PASS or FAIL on a depth that fails a certificate): `reads` is a list of (model,
    task, k, a, b, depths read or None for all). Returns ({series name: stored certificates},
    '' or the problem naming each series, certificate and depth, which makes the item INCONCLUSIVE)."""
    stored, problems = {}, []
    for model, task, k, a, b, read in reads:
        name = series_name(model, task, k, a, b)
        stored[name], problem = certified(res, model, task, k, a, b, read)
        problems += [f"{name} {p}" for p in (problem, seeds_problem(res, model, task, k, a, b, read)) if p]
    return stored, "; ".join(problems)


def gated(good, problem: str) -> str:
    """An item's verdict under `gate`: INCONCLUSIVE where its series are not certified, else PASS or FAIL."""
    return INCONCLUSIVE if problem else as_verdict(good)


def series_se(s: Series, metric: str = "R") -> np.ndarray:
    """`point_se` at every depth of a series (SE over seeds, else the evaluation SE)."""
    return np.array([point_se(s, j, metric)[0] for j in range(len(s.depths))], dtype=float)


def cert_text(cert: dict | None, problem: str) -> str:
    """'certified (doubling, construction)' for an item whose depths pass; '' otherwise (the
    INCONCLUSIVE outcome names the problem)."""
    return "" if problem or cert is None else f"certified ({', '.join(cert['computed']) or 'none applies'}); "


def power_text(pw: dict | None) -> str:
    """'power 0.35 (400 simulations of the paper's law; 9 seeds would reach 0.8)'."""
    if pw is None or not math.isfinite(pw.get("power", math.nan)):
        return "power unknown (" + ((pw or {}).get("why") or "no finite seed SE") + ")"
    text = f"power {pw['power']:.2f} ({pw['sims']} simulations of the paper's law with these SEs"
    if pw["power"] < pw["target"]:
        need = pw["seeds_for_target"]
        text += (f"; {need} seeds would reach {pw['target']:g}" if need else
                 f"; no seed count up to {MAX_SEEDS} reaches {pw['target']:g}")
    return text + ")"


def problems(*texts: str) -> str:
    """The non-empty problems of an item, joined: what its INCONCLUSIVE outcome names."""
    return "; ".join(t for t in texts if t)


def beyond_2se(diff: float, se: float) -> bool:
    """A difference beyond 2 SE, an unknown one counting as beyond (SPEC §9's depth effect)."""
    return not (math.isfinite(diff) and math.isfinite(se)) or abs(diff) > 2 * se


def depth_effect(s: Series) -> tuple[bool, str]:
    """(whether depth changes the loss: R_1 - R_Lmax beyond 2 SE, the SEs of the two points
    combined; unknown SE counts as present, the text 'R_1 - R_64 = 0.5±0.01')."""
    if s is None or len(s.depths) < 2:
        return True, "depth effect unknown (fewer than 2 depths)"
    R = s.get("R")
    diff = float(R[0] - R[-1])
    se = math.hypot(point_se(s, 0)[0], point_se(s, len(s.depths) - 1)[0])
    text = f"R_{int(s.depths[0])} - R_{int(s.depths[-1])} = {num(diff)}±{num(se)}"
    return beyond_2se(diff, se), text


def degenerate_why(why: str, present: bool, effect: str, Lmax) -> str:
    """A degenerate fit's reason under SPEC §9, with the depth effect's text `effect`: absent (the
    claim's FAIL) or present, with what would make the fit possible."""
    if not present:
        return f"{why}; the depth effect is absent: {effect} within 2 SE"
    return f"{why}; {effect}: a fit needs more depths (beyond L={Lmax}, where the curve still bends) or a longer budget"


def degenerate(fits, s: Series) -> tuple[str, str]:
    """SPEC §9 on a degenerate fit among `fits`: ('', '') when every fit is well posed; (FAIL, why)
    where the depth effect itself is absent (R_1 - R_Lmax within 2 SE: a statement about the depth
    range, not about the law); else (INCONCLUSIVE, the reason and what would make the fit possible)."""
    why = next((fit_problem(f) for f in fits if fit_problem(f)), "")
    if not why:
        return "", ""
    present, text = depth_effect(s)
    Lmax = int(s.depths[-1]) if s is not None and len(s.depths) else "Lmax"
    return (INCONCLUSIVE if present else FAIL), degenerate_why(why, present, text, Lmax)


def shape_verdict(good: bool, problem: str, pw: dict | None, fits=(), s: Series | None = None) -> tuple[str, str]:
    """An item of a claim (SPEC §9): INCONCLUSIVE naming the problem when its depths are not
    certified (or the envelope has too few seeds); PASS when the criterion holds; a degenerate fit
    among `fits` INCONCLUSIVE, or FAIL where the depth effect is absent (`degenerate`; that FAIL is
    not a matter of power); INCONCLUSIVE 'underpowered' for a FAIL whose power is below 0.8; else
    FAIL (a FAIL with unknown power stays FAIL). Returns (verdict, why)."""
    if problem:
        return INCONCLUSIVE, problem
    if good:
        return PASS, ""
    v, why = degenerate(fits, s)
    if v:
        return v, why
    p = (pw or {}).get("power", math.nan)
    if math.isfinite(p) and p < TARGET:
        return INCONCLUSIVE, f"underpowered: power {p:.2f} < {TARGET:g}"
    return FAIL, ""


def outcome(v: str, why: str, good: bool, f=None) -> str:
    """The end of a shape item's detail: 'ok', 'NO' / 'NO (degenerate fit: ...)', or
    'INCONCLUSIVE (why)'."""
    if v == INCONCLUSIVE:
        extra = fit_problem(f) if f is not None else ""
        return f"INCONCLUSIVE ({why}{'; ' + extra if extra and extra not in why else ''})"
    if v == FAIL:
        return f"NO ({why})" if why else verdict(good, f) if f is not None else "NO"
    return "ok"


def judged(criterion: str, parts: list[str], extra: str = "") -> str:
    """The detail: the criterion as applied, then every item."""
    return f"criterion: {criterion}{extra} | " + "; ".join(parts)


# ---------------------------------------------------------------- checking

def check(claim: Claim, res: Results, th: Theory) -> dict:
    """One claim on one preset's results: never raises; a claim whose runs are missing (not run,
    failed, diverged) is INCONCLUSIVE "missing runs: ...", one that cannot judge what it has is a
    FAIL with its reason, a broken one a FAIL 'error while checking'. "verdict" is PASS / FAIL /
    INCONCLUSIVE; "pass" is True only for PASS."""
    out = {"id": claim.id, "claim": claim.claim, "preset": res.preset, "expected": claim.expected,
           "uses": list(claim.uses)}
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore", RuntimeWarning)  # nan in, nan out: judged below
            measured, ok, detail = claim.check(res, th)
    except MissingRuns as e:  # never judged on what was not measured (issue 51): INCONCLUSIVE
        measured, ok, detail = None, None, f"{e} (criterion: {claim.expected})"
    except CannotJudge as e:
        measured, ok, detail = None, False, f"{e} (criterion: {claim.expected})"
    except Exception as e:  # noqa: BLE001 - a broken check is a FAIL with its reason, never a PASS
        measured, ok = None, False
        detail = f"error while checking: {type(e).__name__}: {e} (criterion: {claim.expected})"
    try:
        v = as_verdict(ok)
    except ValueError as e:  # a claim function returning something else is broken: FAIL, never PASS
        v, detail = FAIL, f"error while checking: {e} (criterion: {claim.expected})"
    out.update(measured=plain(measured), detail=detail, verdict=v)
    out["pass"] = v == PASS
    return out


def claim_order(claim_id: str) -> tuple:
    """The order of ids within a part: by number (4a before 4b, 10 after 9), a letter prefix first
    (B1a, B1b, ..., B2a)."""
    m = re.fullmatch(r"([A-Z]*)(\d+)(.*)", claim_id)
    return (m.group(1), int(m.group(2)), m.group(3)) if m else ("~", 0, claim_id)


def claim_key(claim: Claim) -> tuple:
    """SPEC §9's order: the paper's claims (1 .. 11), then ours beyond it, then the studies' (each part
    by claim_order)."""
    return (PARTS.index(claim.part), *claim_order(claim.id))


def check_all(res: Results, th: Theory, claims: Iterable[Claim], uses: Iterable[str] | None = None) -> list[dict]:
    """Every claim of `claims` (those that use one of the experiments `uses`, when given), in
    SPEC §9 order."""
    wanted = None if uses is None else set(uses)
    todo = sorted((c for c in claims if wanted is None or wanted & set(c.uses)), key=claim_key)
    return [check(c, res, th) for c in todo]


__all__ = ["PASS", "FAIL", "INCONCLUSIVE", "VERDICTS", "as_verdict", "combine", "claim_verdict", "count", "count_text", "mark",
           "check", "check_all", "claim_order", "claim_key", "require", "MissingRuns", "CannotJudge", "NEEDS_STORE", "fit_problem",
           "num", "yes", "verdict", "fitted", "cells_text", "present_ks", "item_label", "left_out", "point_se",
           "seeds_text", "paired_or_fail", "call_paired", "finite_runs", "judged", "certified", "series_se",
           "power_text", "shape_verdict", "outcome", "cert_text", "gate", "gated", "series_name", "seeds_problem",
           "depth_effect", "degenerate", "degenerate_why", "beyond_2se", "problems", "CONSTRUCTION_KINDS", "ENVELOPE_SEEDS"]
