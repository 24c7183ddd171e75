"""Reading results back: the theory numbers an experiment needs (`Theory`, computed once and
cached as JSON) and the store's finished runs of one preset as the registry names them
(`Results`: runs by cell; `Series`: seed means and SEs along depth).

Choices where SPEC is silent:
- Points are seed means; SEs are over seeds (nan with one seed).
- A run with non-finite R, or a diverged one (store), is no result: it enters no mean.
- Runs are matched to the registry by cell (model, task, k, a, b, L) and seed within the preset,
  and only runs of the cell's current recipe are read (see `Results`): a cell that holds runs of
  another recipe only is empty (its claims say "missing runs", naming the other recipe), never
  judged on the other recipe's runs.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import socket
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from depthscale.base import timing
from depthscale.base.atomic import as_float, plain, read_json, write_json_atomic
from depthscale.config.run import (FIELD_DEFAULTS, FIELD_NAMES, FLOAT_FIELDS, ID_OPTIONAL_FIELDS, INT_FIELDS,
                               PRESET_DEPTHS, ConfigError, config_dict, make_config)
from depthscale.base.errors import InputError
from depthscale.analysis.paired import RunReader
from depthscale.config.paper import FIG8_SPECTRUM
from depthscale.theory.linear_floor import fig8_sample, linear_floor, sample_linear_floor
from depthscale.config.records import (FINITE_P_SAMPLES, FLOOR_SAMPLES, SOFTMAX_FLOOR_SAMPLES, THEORY_SEED, Experiment,
                                TheoryNeed, check_preset, depth_set, model_depths, preset_shape)
from depthscale.theory.linear import constrained_curve, free_curve, sample_constrained_curve, sample_free_curve, spectra, zeta
from depthscale.theory.softmax_floor import softmax_floor


# --- theory (computed on demand, cached as JSON) ---

def compute_need(need: TheoryNeed, preset: str, device: str = "cpu", progress: bool = False) -> dict:
    """The number(s) a theory need stands for, at the preset's geometry (records.TheoryNeed)."""
    d, P = preset_shape(preset, need.model)
    if need.kind == "softmax_floor":
        return softmax_floor(need.a, need.b, need.k, d, P, samples=SOFTMAX_FLOOR_SAMPLES[preset],
                             seed=THEORY_SEED, depths=PRESET_DEPTHS[preset], device=device, progress=progress)
    if need.kind == "floor":
        R_irr, se = linear_floor(need.a, need.b, need.k, d, P, samples=FLOOR_SAMPLES[preset],
                                 seed=THEORY_SEED, device=device, progress=progress)
        fp = sample_linear_floor(need.a, need.b, need.k, d, P, samples=FLOOR_SAMPLES[preset], seed=THEORY_SEED)
        return {"R_irr": R_irr, "se": se, "samples": FLOOR_SAMPLES[preset], "d": d, "P": P,
                "finite_P": fp["held_out"], "finite_P_se": fp["held_out_se"]}
    if need.kind == "fig8":
        return plain(fig8_sample(d, P, need.k, need.a, need.b, THEORY_SEED), strict=False)
    if need.kind == "curves":
        depths = np.unique(np.round(np.geomspace(1, PRESET_DEPTHS[preset][-1], 40)).astype(int))
        lam, omega = spectra(d, need.a, need.b)
        out = {"depths": depths.tolist(),
               "constrained": constrained_curve(lam, omega, depths).tolist(),
               "free": free_curve(lam, omega, depths).tolist(),
               "zeta": zeta(need.a, need.b),
               "finite_P": sample_free_curve(need.a, need.b, d, P, PRESET_DEPTHS[preset],
                                             samples=FINITE_P_SAMPLES[preset], seed=THEORY_SEED),
               "finite_P_constrained": sample_constrained_curve(
                   need.a, need.b, d, P, PRESET_DEPTHS[preset], samples=FINITE_P_SAMPLES[preset], seed=THEORY_SEED)}
        return out
    raise InputError(f"unknown theory kind {need.kind!r}")


class Theory:
    """Theory results of one preset, computed once and cached in a JSON file (if given)."""

    def __init__(self, preset: str, cache: str | Path | None = None, device: str = "cpu",
                 progress: bool = False):
        check_preset(preset)
        self.preset, self.device, self.progress = preset, device, progress
        self.cache = Path(cache) if cache is not None else None
        self._data: dict = read_theory_cache(self.cache) if self.cache is not None else {}
        # entries other processes computed (compute_theory_entry: reproduce's process pool) and
        # their seconds, counted to the "theory" phase when first served (get)
        self._elsewhere: dict[str, float] = {}
        for key, value, seconds in read_theory_entries(self.cache) if self.cache is not None else ():
            self._data.setdefault(key, value)
            self._elsewhere[key] = seconds

    def has(self, need: TheoryNeed) -> bool:
        """Whether `need` is cached (in the cache file or an entry beside it)."""
        return need.key(self.preset) in self._data

    def get(self, need: TheoryNeed) -> dict:
        key = need.key(self.preset)
        if key not in self._data:
            self._data[key] = compute_need(need, self.preset, self.device, self.progress)
            self._save()
        elif key in self._elsewhere:  # computed by another process: its seconds, counted once
            timing.add("theory", self._elsewhere.pop(key))
        return self._data[key]

    def floor(self, a: float, b: float, k: int, model: str = "linear") -> dict:
        """R_irr of the linear model at the geometry of `model`'s runs."""
        return self.get(TheoryNeed("floor", float(a), float(b), int(k), model))

    def softmax_floor(self, a: float, b: float, k: int) -> dict:
        """The softmax-ensemble floor at the nonlinear geometry (softmax_floor.softmax_floor)."""
        return self.get(TheoryNeed("softmax_floor", float(a), float(b), int(k), "nonlinear"))

    def curves(self, a: float, b: float) -> dict:
        return self.get(TheoryNeed("curves", float(a), float(b)))

    def fig8(self) -> dict:
        return self.get(TheoryNeed("fig8", *FIG8_SPECTRUM, 2))

    def _save(self) -> None:
        if self.cache is None:
            return
        self.cache.parent.mkdir(parents=True, exist_ok=True)
        entries = _canonical(self._data)
        write_json_atomic(self.cache, {"format": THEORY_CACHE_FORMAT, "sha256": _digest(entries), "entries": entries})


# The cache file: {"format": THEORY_CACHE_FORMAT, "sha256": <of the entries' canonical JSON>,
# "entries": {key: value}}. A cache is validated, never trusted: a file that is not this (junk,
# an edit, another version's layout) is ignored with a one-line warning and rebuilt.
THEORY_CACHE_FORMAT = "depthscale-theory-cache/1"


class StaleCacheWarning(UserWarning):
    """A cache in the report's output directory was junk (unreadable, edited, another layout):
    ignored and rebuilt."""


def _canonical(entries: dict) -> dict:
    """`entries` as JSON reads them back (plain numbers, lists, string keys): what the digest covers."""
    from depthscale.base.atomic import dumps

    return json.loads(dumps(entries, indent=None, strict=False))


def _digest(entries: dict) -> str:
    return hashlib.sha256(json.dumps(entries, sort_keys=True, allow_nan=True).encode()).hexdigest()


def read_checked_cache(path: str | Path, valid, what: str, then: str):
    """The JSON document of the cache file at `path` if `valid(doc)`; None if there is none, and
    None with one StaleCacheWarning ("ignoring the <what> <path>: <then>") if it is junk, fails
    `valid`, or is not a regular file (read without blocking). A cache is validated, never trusted."""
    if not os.path.lexists(path):
        return None
    try:
        doc = read_json(path, follow=True)  # bounded in size and depth (DamagedJSON: a ValueError)
        ok = bool(valid(doc))
    except (OSError, ValueError):
        ok = False
    if not ok:
        warnings.warn(f"ignoring the {what} {path}: {then}", StaleCacheWarning, stacklevel=3)
        return None
    return doc


def read_theory_cache(cache: str | Path) -> dict:
    """The entries of the theory cache file `cache` ({} if there is none): a file that is no valid
    cache (not JSON, not THEORY_CACHE_FORMAT, its sha256 not its entries', a FIFO or a directory)
    is ignored with one StaleCacheWarning naming it, and the theory is computed again."""
    doc = read_checked_cache(
        Path(cache), lambda d: (isinstance(d, dict) and d.get("format") == THEORY_CACHE_FORMAT
                                and isinstance(d.get("entries"), dict) and d.get("sha256") == _digest(d["entries"])),
        "theory cache", f"not a valid {THEORY_CACHE_FORMAT} file (junk, edited or from another version); its "
        "theory is computed again")
    return {} if doc is None else doc["entries"]


# Theory computed outside the report (reproduce computes the needs in its process pool while the
# sweep runs, executors.run_process): each need is written as its own file, atomically, into a
# directory beside the cache (theory.json -> theory.d/), so that processes computing needs side by
# side never overwrite one another's; `Theory` reads the entries with the cache. Entry:
# {"key", "value", "seconds" (wall seconds of the computation), "pid", "host"}.
THEORY_ENTRY_SUFFIX = ".d"
# rough wall seconds of a need at the cpu preset (the timed main job of 46b396d: fig3's seven
# curves 132 s, the floors 9-10 s each at the linear geometry, 2.3 at the nonlinear one, the
# softmax floors 1.4 s): the order in which reproduce computes them, longest first
THEORY_COST = {("curves", "linear"): 19.0, ("floor", "linear"): 9.5, ("floor", "nonlinear"): 2.3,
               ("softmax_floor", "nonlinear"): 1.4, ("fig8", "linear"): 0.01}


def theory_entries_dir(cache: str | Path) -> Path:
    """The directory of the entries beside the cache file `cache` (theory.json -> theory.d)."""
    cache = Path(cache)
    return cache.with_name(cache.stem + THEORY_ENTRY_SUFFIX)


def theory_entry_path(cache: str | Path, key: str) -> Path:
    return theory_entries_dir(cache) / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}.json"


def read_theory_entries(cache: str | Path) -> list[tuple[str, object, float]]:
    """(key, value, seconds) of every entry beside `cache` (unreadable or partial files skipped)."""
    d = theory_entries_dir(cache)
    out = []
    for f in sorted(d.glob("*.json")) if d.is_dir() else ():
        if not f.is_file():  # (a FIFO would block the read)
            continue
        try:
            e = read_json(f)
            out.append((str(e["key"]), e["value"], float(e.get("seconds") or 0.0)))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return out


def compute_theory_entry(need: TheoryNeed, preset: str, cache: str | Path, device: str = "cpu") -> float:
    """Compute `need` at `preset` unless the cache `cache` (or an entry beside it) has it, and write
    it as its own entry file (theory_entry_path, atomic). What `Theory(preset, cache).get(need)`
    would compute, with the same key and seed. Returns the seconds it took (0.0 if cached).
    A module-level function: reproduce submits it to its process pool."""
    if Theory(preset, cache=cache).has(need):
        return 0.0
    key = need.key(preset)
    t0 = time.perf_counter()
    with timing.phase("theory"):
        value = compute_need(need, preset, device)
    seconds = time.perf_counter() - t0
    path = theory_entry_path(cache, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, {"key": key, "value": value, "seconds": seconds, "pid": os.getpid(),
                             "host": socket.gethostname()})
    return seconds


def theory_jobs(needs: Iterable[TheoryNeed], preset: str, cache: str | Path, device: str = "cpu") -> list[tuple]:
    """(compute_theory_entry, args) for every theory need of `needs` (registry.theory_needs of the
    experiments) at `preset` that the cache lacks, the longest first (THEORY_COST)."""
    th = Theory(preset, cache=cache)
    needs = [n for n in needs if not th.has(n)]
    needs.sort(key=lambda n: THEORY_COST.get((n.kind, n.model), 1.0), reverse=True)
    return [(compute_theory_entry, (n, preset, str(cache), device)) for n in needs]


# --- reading results back ---

_CELL = ("model", "task", "k", "a", "b", "L")
SCALARS = ("R", "R_se", "A", "C", "gap", "var_ystar", "R_rel", "top1_mass", "selection_mean",
           "m", "rho", "rho_r2", "mode_R_sum", "specialisation", "class_cv", "specialisation_null",
           "steps", "identity_residual")
ARRAYS = ("mode_R", "selection_percentiles", "A1_mean", "R_class", "selection_class", "selection_layer_class")


def _normalise(dct: dict) -> dict:
    """Config values with the types of RunConfig (JSON and pandas may turn 0.0 into 0 or 1 into 1.0)."""
    out = dict(dct)
    for f in FLOAT_FIELDS:
        if f in out:
            out[f] = float(out[f])
    for f in INT_FIELDS:
        if f in out and out[f] == out[f]:
            out[f] = int(out[f])
    return out


def _recipe_key(row: dict) -> str:
    """Hash of a run's config without its cell (model, task, k, a, b, L) and seed."""
    dct = config_dict(_normalise(row), _CELL + ("seed", "preset"))
    return hashlib.sha256(json.dumps(dct, sort_keys=True, default=str).encode()).hexdigest()[:12]


def split_diverged(df):
    """(the finished runs that count, the diverged ones) of a `Store.collect` frame: a diverged
    run (a finite but exploded R included) is finished but no result."""
    if not len(df) or "state" not in df.columns:
        return df, df.iloc[0:0]
    bad = df["state"] == "diverged"
    return df[~bad].reset_index(drop=True), df[bad]


@dataclass
class Series:
    """One (model, task, k, a, b) over depth: seed means and SEs over seeds per metric."""

    depths: np.ndarray  # depths with at least one finite run
    mean: dict  # metric -> array over depths
    se: dict  # metric -> SE over seeds (nan with one seed)
    n: np.ndarray  # finite runs per depth
    run_ids: list  # per depth, the run ids used
    missing: tuple = ()  # expected depths with no finite run
    arrays: dict = field(default_factory=dict)  # metric -> list over depths of (mean array, se array)

    def __bool__(self) -> bool:
        return len(self.depths) > 0

    def get(self, metric: str) -> np.ndarray:
        return self.mean.get(metric, np.full(len(self.depths), np.nan))


class Results:
    """The finished runs of one preset, as the registry names them (from `Store.collect`).

    A cell (model, task, k, a, b, L) may hold several seeds. Only the runs whose config equals the
    registry's current one (with `overrides`) are read; a cell whose runs are all of other recipes
    is empty, and `other_recipe` records it (a claim's "missing runs" then says so). A run of
    another recipe is never read in the current one's place (issue 33: with only spread runs in
    the store, 5a used to pass on them).
    """

    def __init__(self, df, preset: str, reader=None, overrides: dict | None = None, diverged=None):
        import pandas as pd

        check_preset(preset)
        if reader is not None and not isinstance(reader, RunReader):
            raise InputError(f"Results reads runs through a paired.RunReader (runs.per_context.StoredRuns(store)), "
                             f"not a {type(reader).__name__}")
        self.preset, self.reader, self.overrides = preset, reader, dict(overrides or {})
        df = df if df is not None else pd.DataFrame()
        if len(df) and "preset" in df.columns:
            df = df[df["preset"] == preset]
        # diverged runs (in `df` or given apart): no result, kept aside so a claim can name them
        df, bad = split_diverged(df)
        self.diverged_df = pd.concat([bad, diverged]) if diverged is not None and len(diverged) else bad
        self.df = df.reset_index(drop=True)
        self.other_recipe: set = set()  # cells read as empty: their runs are all of other recipes
        self.cell_recipes: dict = {}  # cell key -> RunConfig fields of that cell's recipe (with_recipes)
        self.selection: dict | None = None  # the recipe selection behind cell_recipes (selection.main_envelope)
        self._index: dict[tuple, list[dict]] = {}
        records = self.df.to_dict("records") if len(self.df) else []
        for row in records:
            for k in ID_OPTIONAL_FIELDS:  # a run stored before the field existed: its default
                if k not in row or (isinstance(row[k], float) and row[k] != row[k]):
                    row[k] = FIELD_DEFAULTS[k]
            row.update(_normalise({k: row[k] for k in FIELD_NAMES if k in row}))
            row["_recipe"] = _recipe_key({k: row[k] for k in FIELD_NAMES if k in row})
            key = self._cell_key(row["model"], row["task"], row["k"], row["a"], row["b"], row["L"])
            self._index.setdefault(key, []).append(row)
        self._curves: dict = {}

    def view(self, **fields) -> "Results":
        """The same results read with further RunConfig fields (`fields`) in every cell's recipe,
        e.g. `res.view(clusters=4)`: what a beyond-the-paper group with `RunGroup.fields` trained.
        A cell without runs of exactly that recipe is empty (never the default recipe's runs)."""
        import copy

        v = copy.copy(self)
        v.overrides = {**self.overrides, **fields}
        v.cell_recipes = {}  # a view names its recipe: a selection's per-cell recipes do not carry into it
        v.other_recipe = set()
        # an unknown field or a bad value: ConfigError now (at a depth a loop = B recipe allows)
        make_config(self.preset, **{"L": max(1, int(v.overrides.get("loop") or 1)), **v.overrides})
        return v

    def with_recipes(self, recipes: dict) -> "Results":
        """The same results read with a recipe per cell: `recipes` maps (model, task, k, a, b, L)
        to RunConfig fields (e.g. {"lr": 1e-3, "qk_init": ...}), on top of this view's overrides.
        What a recipe selection (SPEC §4: the grid chosen by the monitor, per depth and spectrum)
        hands the claims: the envelope. A cell without runs of its recipe is empty. A later
        `view(**fields)` reads `fields` everywhere, without these per-cell recipes. A cell mapped to
        None has no recipe (a selection found no eligible point there): it reads no runs, and the
        claims report it missing, never another recipe's runs in its place."""
        import copy

        v = copy.copy(self)
        v.cell_recipes = {**self.cell_recipes, **{self._cell_key(*key): None if f is None else dict(f)
                                                   for key, f in recipes.items()}}
        v.other_recipe = set()
        for key, f in v.cell_recipes.items():  # a bad field or value: ConfigError now
            if f is not None:
                make_config(self.preset, **{**self.overrides, **f, "L": key[-1]})
        return v

    @classmethod
    def from_store(cls, runs, preset: str, overrides: dict | None = None) -> "Results":
        """The finished runs of a store behind its read-only door (`runs`: runs.per_context.StoredRuns,
        a RunReader whose collect() is the store's table); diverged ones (a finite but exploded R
        included) are left out of every cell (`diverged_runs` names them)."""
        return cls(runs.collect(), preset, runs, overrides)

    def diverged_runs(self, model: str, task: str, k: int, a: float, b: float, L: int) -> list[dict]:
        """The diverged runs of one cell of the current recipe (finished, but no result)."""
        if self.diverged_df is None or not len(self.diverged_df):
            return []
        other = Results(self.diverged_df.drop(columns=["state"], errors="ignore"), self.preset, None, self.overrides)
        other.cell_recipes = self.cell_recipes
        return other.runs(model, task, k, a, b, L)

    @staticmethod
    def _cell_key(model, task, k, a, b, L) -> tuple:
        return (model, task, 1 if task == "easy" else int(k), float(a), float(b), int(L))

    def has_other_recipe(self, model: str, task: str, k: int, a: float, b: float, L: int) -> bool:
        """Whether the store holds runs of this cell, none of them of the current recipe."""
        self.runs(model, task, k, a, b, L)
        return self._cell_key(model, task, k, a, b, L) in self.other_recipe

    def __len__(self) -> int:
        return len(self.df)

    def runs(self, model: str, task: str, k: int, a: float, b: float, L: int) -> list[dict]:
        """The finished runs of one cell of the current recipe (one per seed), config fields and
        metrics as a dict; [] when the cell has none (`other_recipe` records a cell whose runs are
        all of other recipes)."""
        rows = self._index.get(self._cell_key(model, task, k, a, b, L), [])
        if not rows:
            return []
        per_cell = self.cell_recipes.get(self._cell_key(model, task, k, a, b, L), {})
        if per_cell is None:  # a selection chose nothing here: the cell's runs are of no chosen recipe
            self.other_recipe.add(self._cell_key(model, task, k, a, b, L))
            return []
        try:
            want = make_config(self.preset, **{**self.overrides, **per_cell, "model": model, "task": task, "k": k,
                                               "a": float(a), "b": float(b), "L": int(L), "seed": 0})
        except ConfigError:  # a cell this view's recipe cannot have (loop = B at a depth B does not divide)
            return []
        want_recipe = _recipe_key(want.to_dict())
        chosen = [r for r in rows if r["_recipe"] == want_recipe]
        if not chosen:  # runs of other recipes only: never read in this recipe's place
            self.other_recipe.add(self._cell_key(model, task, k, a, b, L))
            return []
        by_seed: dict[int, dict] = {}
        for r in sorted(chosen, key=lambda r: r["run_id"]):
            by_seed.setdefault(r["seed"], r)
        return [by_seed[s] for s in sorted(by_seed)]

    def series(self, model: str, task: str, k: int, a: float, b: float,
               depths: Sequence[int] | str | None = None) -> Series:
        """Seed means and SEs over seeds of every scalar metric (and arrays) along depth
        (default: the model's registered depth set, `model_depths`).
        A run with non-finite R (diverged) is left out; a depth with none is `missing`."""
        if depths is None:
            depths = model_depths(model)
        if isinstance(depths, str):
            depths = depth_set(self.preset, depths)
        Ls, n, ids, missing = [], [], [], []
        vals: dict[str, list] = {m: [] for m in SCALARS}
        arrs: dict[str, list] = {m: [] for m in ARRAYS}
        for L in depths:
            rows = [r for r in self.runs(model, task, k, a, b, L) if _finite(r.get("R"))]
            if not rows:
                missing.append(int(L))
                continue
            Ls.append(int(L))
            n.append(len(rows))
            ids.append([r["run_id"] for r in rows])
            for m in SCALARS:
                if m == "gap":
                    x = [as_float(r.get("A")) - as_float(r.get("C")) for r in rows]
                else:
                    x = [as_float(r.get(m)) for r in rows]
                vals[m].append(mean_se(np.array(x, dtype=float)))
            for m in ARRAYS:
                got = [as_array(r.get(m)) for r in rows]
                got = [g for g in got if g is not None]
                if got and len({g.shape for g in got}) == 1:
                    st = np.stack(got)
                    se = st.std(0, ddof=1) / math.sqrt(len(got)) if len(got) > 1 else np.full(st.shape[1:], np.nan)
                    arrs[m].append((st.mean(0), se))
                else:
                    arrs[m].append(None)
        mean = {m: np.array([v[0] for v in vals[m]]) for m in SCALARS}
        se = {m: np.array([v[1] for v in vals[m]]) for m in SCALARS}
        return Series(np.array(Ls, dtype=int), mean, se, np.array(n, dtype=int), ids,
                      tuple(missing), {m: arrs[m] for m in ARRAYS})

    def curves(self, run_id: str) -> dict | None:
        """Training curves of a run from the store (None without a reader or if unreadable)."""
        if self.reader is None:
            return None
        if run_id not in self._curves:
            try:
                self._curves[run_id] = self.reader.load_curves(run_id)
            except Exception:  # noqa: BLE001 - a missing curves file is a missing panel
                self._curves[run_id] = None
        return self._curves[run_id]

    def used_rows(self, experiments: Iterable[Experiment]) -> list[dict]:
        """Every run the experiments (records, registry.REGISTRY's) use (deduplicated)."""
        seen: dict[str, dict] = {}
        for e in experiments:
            for g in e.groups_for(self.preset):
                res = self.view(**dict(g.fields)) if g.fields else self
                for a, b in g.spectra:
                    for L in g.depths_for(self.preset):
                        for r in res.runs(g.model, g.task, g.k, a, b, L):
                            seen.setdefault(r["run_id"], r)
        return list(seen.values())


def _finite(x) -> bool:
    return math.isfinite(as_float(x))


def mean_se(x) -> tuple[float, float]:
    """The mean of the finite values of `x` and its standard error (nan where there are none, the SE
    nan for one)."""
    x = np.asarray(x, dtype=float)
    x = x[np.isfinite(x)]
    if x.size == 0:
        return float("nan"), float("nan")
    se = float(x.std(ddof=1) / math.sqrt(x.size)) if x.size > 1 else float("nan")
    return float(x.mean()), se


def as_array(x) -> np.ndarray | None:
    """A stored array metric (a list, or the JSON string collect makes of it) as an array; None if absent."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return None
    if isinstance(x, str):
        try:
            x = json.loads(x)
        except ValueError:
            return None
    try:
        return np.asarray(x, dtype=float)
    except (TypeError, ValueError):
        return None


__all__ = ["Theory", "Results", "Series", "compute_need", "compute_theory_entry", "theory_jobs",
           "read_theory_entries", "theory_entries_dir", "theory_entry_path", "split_diverged", "as_array",
           "SCALARS", "ARRAYS", "mean_se", "read_theory_cache", "read_checked_cache", "StaleCacheWarning", "THEORY_CACHE_FORMAT"]
