"""Every experiment of SPEC §7 as one entry of one registry, and the paper's numbers (SPEC §8).

The registry is data: an `Experiment` names its runs as `RunGroup`s (model, task, k, spectra,
which depths) and the theory it needs as `TheoryNeed`s. `Experiment.configs(preset)` expands the
groups into RunConfigs through `make_config`, so a run's id (a hash of its config) is the same
whichever experiment asks for it: fig13 is two depths of fig6, the tables are the figures' runs,
and `all_configs` trains each shared run once.

Choices where SPEC is silent:
- seeds: 3 (0, 1, 2) at the paper preset, 1 (0) at cpu and smoke (`PRESET_SEEDS`): the cpu preset
  must finish on 2 cores, so its error bars are the evaluation SE, not the spread over seeds.
- the unpackable variants (fig9 single_stream, fig11/12 context_updates) train depths up to
  `VARIANT_MAX_DEPTH[preset]` (16 at cpu), and context_updates uses batch 64 at cpu (config
  recipe): at depths 1-64 and batch 256 those two alone would cost ~6 single-core hours.
- k = 16 is not part of the smoke preset (SPEC §1 table: smoke k = 2), so k = 16 groups expand
  to nothing there and their claims report "missing runs".
- fig7 uses (a, b) = (1, 0), a fig6 spectrum with a > 0, and also the linear model at (1, 0)
  (fig5's run) for the spread comparison of claim 7; fig8 draws (1, 0) too.
- table3 trains its spectra at depths 1, 2 and Lmax only ("plateau" depths): enough for the
  plateau R_Lmax and the plateau-by-L=2 check; the (0, 0) k = 2 row shares fig5's runs.
- fig3c shows modes 1, 2, 4, 8 of the fig3 spectrum (1, 2).
- The linear floor R_irr is a Monte Carlo at the preset's d, P with `FLOOR_SAMPLES[preset]`
  (context, query) samples, theory seed 0: 100k at cpu (15 floors, ~30 s on 2 cores, SE ~1% of
  R_irr), 200k at paper (SE ~0.02 at (0,0), like the paper's; ~40 s per floor on a CPU).
- The measured plateau of table3 / claim 4 is the seed-mean R at Lmax.
- Runs are matched to the registry by cell (model, task, k, a, b, L) and seed within the preset;
  where a cell has runs of several recipes, the current recipe's are used (results.Results).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from depthscale.config import (GEOMETRIES, PRESET_DEPTHS, PRESETS, RECIPE_VARIANTS, SPREAD_K16, RunConfig,
                               geometry, geometry_kind, make_config)
from depthscale.errors import InputError

Spectrum = tuple[float, float]  # (a, b)

PRESET_SEEDS: dict[str, tuple[int, ...]] = {"smoke": (0,), "cpu": (0,), "paper": (0, 1, 2)}
PRESET_KS: dict[str, tuple[int, ...]] = {"smoke": (2,), "cpu": (2, 16), "paper": (2, 16)}
FLOOR_SAMPLES: dict[str, int] = {"smoke": 4_000, "cpu": 100_000, "paper": 200_000}
# contexts of the softmax-ensemble floor (theory.softmax_floor; SE ~0.7% of the floor at 20,000)
SOFTMAX_FLOOR_SAMPLES: dict[str, int] = {"smoke": 2_000, "cpu": 20_000, "paper": 20_000}
# contexts for the finite-P free curve (theory.sample_free_curve): fit on n, measure on n more
FINITE_P_SAMPLES: dict[str, int] = {"smoke": 2_000, "cpu": 10_000, "paper": 10_000}
THEORY_SEED = 0  # seed of every theory Monte Carlo
DEPTH_SETS = ("all", "ends", "plateau", "variant", "deepest")  # all | (1, Lmax) | (1, 2, Lmax) | up to VARIANT_MAX_DEPTH | (Lmax,)
# The variants that cannot be packed across depths (single_stream, context_updates) cost O(L) per
# model and context_updates O(L P^2 N) per step: at the cpu preset their depths stop at 16, which
# keeps the main job on 2 cores (a depth-64 context_updates model costs 3.4 s per step there).
VARIANT_MAX_DEPTH: dict[str, int] = {"smoke": 4, "cpu": 16, "paper": 256}
# Models whose registry groups use the "variant" depth set (unpackable, the costliest per layer).
VARIANT_CAPPED = ("single_stream", "context_updates")


def model_depths(model: str) -> str:
    """The depth set a model is registered with: what its figures and claims read by default."""
    return "variant" if model in VARIANT_CAPPED else "all"


def _sp(*pairs) -> tuple[Spectrum, ...]:
    return tuple((float(a), float(b)) for a, b in pairs)


# Why each geometry (SPEC §1; docs/geometry.md has the numbers): one line for the report.
GEOMETRY_EVIDENCE = (
    "linear runs at the paper's linear geometry d = 128, P = 1024 (its Table 3 theory values are "
    "reproduced there) or, at cpu, d = 32 with the same P/d = 8; softmax models at d = 16, P = 64, "
    "where the paper's fitted L0 lies 1-4% below the best infinitely deep ensemble of cosine-softmax "
    "heads on all ten top-2 spectra (at d = 128, P = 1024 that floor is ten times the paper's "
    "L0). See docs/geometry.md.")

# --- the spectra of SPEC §7 ---
FIG3_SPECTRA = _sp((2, 0.5), (2, 1), (2, 1.5), (2, 2), (0.5, 2), (1, 2), (1.5, 2))  # = table2's
FIG4_SPECTRA = _sp((0, 0), (0.25, 0), (0.5, 0), (1, 0), (0, 0.25), (0, 0.5), (0, 1))
FIG56_SPECTRA = _sp((0, 0), (0, 0.25), (0, 0.5), (0, 1), (0.25, 0), (0.5, 0), (1, 0))  # table1's order
FIG7_SPECTRUM = (1.0, 0.0)
FIG8_SPECTRUM = (1.0, 0.0)
FIG3C_SPECTRUM = (1.0, 2.0)
FIG3C_MODES = (1, 2, 4, 8)
FIG7_MODES = (1, 2, 4, 8)
FIG14_K2 = _sp((0.25, 0.25), (0.25, 0.5), (0.5, 0.5))
FIG14_K16 = _sp((0, 0.25), (0, 0.5), (0.25, 0.25), (0.25, 0.5))
TOP2_SPECTRA = FIG56_SPECTRA + FIG14_K2  # every top-2 spectrum of Tables 1 and 4
TABLE3_K2 = _sp((0, 0), (0.25, 0.25), (0.5, 0.5), (1, 0.25), (1, 1))
TABLE3_K16 = _sp((0.5, 0.5), (1, 0), (1, 0.25), (1.25, 0))
ORIGIN = _sp((0, 0))
# time and width beside depth (beyond the paper, issue 16 item 4): fig6's runs at two spectra give
# the depth law and the training curves (loss vs step); the width groups add N > d at two depths
# (N = d is fig6's own runs: same configs, same run ids). Widths are absolute: at smoke (d = 8) the
# axis is 8, 24, ..., 64; depths above the preset's deepest are dropped (smoke keeps L = 4)
SCALING_SPECTRA = _sp((0, 0), (1, 0))
SCALING_WIDTHS = (24, 32, 48, 64)  # N beyond the preset's N = d
SCALING_DEPTHS = (4, 16)
# clustered contexts (beyond the paper, App. D.2): a fig6 spectrum with a > 0, so that the rotation
# changes the inputs (at a = 0 Sigma is isotropic and every rotation gives the same inputs; b = 0
# keeps the teacher isotropic, so the classes differ only in their input covariance); K = inf is
# fig6's own runs at these depths (same configs, same run ids)
CLUSTERED_SPECTRUM = (1.0, 0.0)
CLUSTERED_KS = (1, 2, 4, 8)
CLUSTERED_DEPTHS = (1, 2, 4, 8, 16, 64)  # 32 left out: 25% of the layers of a pack, 3 residual dof kept
# looped stacks (beyond the paper, docs/beyond.md): B distinct layers repeated L/B times. The untied
# models are fig9's / fig11's / fig6's own runs at the same depths (same configs, same ids); a
# loop = B model at L = B is the untied B-layer model (same init, same rate: training.base_lr), so
# each looped group starts at L = 2B. Depths stop at 8: the looped runs then cost about eight
# core-minutes at the cpu preset on a quiet machine (a depth-16 run of a cascaded variant costs
# 1-1.5 min, and four of them more than doubled that).
LOOPED_B = (1, 2, 4)
LOOPED_MAX_DEPTH = 8
LOOPED_DEPTHS: dict[int, tuple[int, ...]] = {1: (2, 4, 8), 2: (4, 8), 4: (8,)}
LOOPED_MODELS = ("single_stream", "context_updates")
# a standard pre-LN Transformer (beyond the paper, issue 16 item 3; depthscale.transformer): fig6's
# task and spectrum (0,0), k = 2; depths 1-8 keep it near 15 core-minutes at the cpu preset (a depth-8
# step costs ~8x a depth-1 step: no packing across depth)
TRANSFORMER_DEPTHS = (1, 2, 4, 8)
# the budget ladder (SPEC §9, a study; docs/recipe.md §12): top-2, d = N = 16, P = 64, batch 512,
# budgets x2 up to the paper's 20,000 steps; every run goes to its cap (min_steps = max_steps), on the
# cosine schedule of its own budget; both starts, 3 seeds at every preset. cpu: (0, 0), depths 1-64;
# paper: the ten top-2 spectra, depths 1-256
BUDGET_BATCH = 512
BUDGET_STEPS = (1250, 2500, 5000, 10000, 20000)
BUDGET_SEEDS = (0, 1, 2)
BUDGET_RECIPES = ("faithful", "spread")


def variant_fields(recipe: str, k: int = 2) -> tuple[tuple[str, object], ...]:
    """RunGroup fields of a named start (config.RECIPE_VARIANTS), k = 16's temperatures for spread."""
    out = dict(RECIPE_VARIANTS[recipe])
    if recipe == "spread" and k == 16:
        out.update(SPREAD_K16)
    return tuple(sorted(out.items()))


def budget_groups() -> tuple[RunGroup, ...]:
    out = []
    for recipe in BUDGET_RECIPES:
        for steps in BUDGET_STEPS:
            f = variant_fields(recipe) + (("batch", BUDGET_BATCH), ("max_steps", steps), ("min_steps", steps))
            out.append(RunGroup("nonlinear", "difficult", 2, ORIGIN, "all", f, ("cpu",)))
            out.append(RunGroup("nonlinear", "difficult", 2, TOP2_SPECTRA, "all", f, ("paper",)))
    return tuple(out)


def transformer_depths(preset: str) -> tuple[int, ...]:
    """The transformer experiment's depths at `preset`: TRANSFORMER_DEPTHS up to the preset's deepest
    (what RunGroup.depths_for gives its group)."""
    return tuple(L for L in TRANSFORMER_DEPTHS if L <= max(PRESET_DEPTHS[preset]))


@dataclass(frozen=True)
class RunGroup:
    """Runs of one model on one task: every spectrum x depth x seed."""

    model: str
    task: str  # easy | difficult
    k: int  # selected tokens (difficult task); 1 on the easy task
    spectra: tuple[Spectrum, ...]
    depths: str | tuple[int, ...] | None = None  # one of DEPTH_SETS, explicit depths, or None: the model's own (`model_depths`)
    # further RunConfig fields of every run of the group (beyond-the-paper experiments: tied weights,
    # clustered contexts, width, ...), as (name, value) pairs; () for the paper's own runs
    fields: tuple[tuple[str, object], ...] = ()
    presets: tuple[str, ...] | None = None  # the presets the group runs at (None: every preset)

    def depths_for(self, preset: str) -> tuple[int, ...]:
        if isinstance(self.depths, tuple):  # explicit depths, capped like the preset's own
            return tuple(L for L in self.depths if L <= max(PRESET_DEPTHS[preset]))
        return depth_set(preset, self.depths or model_depths(self.model))

    def in_preset(self, preset: str) -> bool:
        if self.presets is not None and preset not in self.presets:
            return False
        return self.task == "easy" or self.k in PRESET_KS[preset]


@dataclass(frozen=True)
class TheoryNeed:
    """A theory computation an experiment draws or tabulates (SPEC §6.2, §6.3)."""

    kind: str  # curves (constrained/free reference curves) | floor (R_irr) | fig8 (one sample)
    # | softmax_floor (best cosine-softmax head and ensemble, SPEC §3.4)
    a: float
    b: float
    k: int = 2
    model: str = "linear"  # whose geometry (d, P) the number is computed at (config.geometry)

    def key(self, preset: str) -> str:
        """Cache key: everything the number depends on at this preset."""
        d, P = preset_shape(preset, self.model)
        if self.kind == "floor":
            return f"floor2:a={self.a}:b={self.b}:k={self.k}:d={d}:P={P}:n={FLOOR_SAMPLES[preset]}:seed={THEORY_SEED}"
        if self.kind == "softmax_floor":
            return (f"softmax_floor2:a={self.a}:b={self.b}:k={self.k}:d={d}:P={P}"
                    f":n={SOFTMAX_FLOOR_SAMPLES[preset]}:L={','.join(map(str, PRESET_DEPTHS[preset]))}"
                    f":seed={THEORY_SEED}")
        if self.kind == "fig8":
            return f"fig8:a={self.a}:b={self.b}:k={self.k}:d={d}:P={P}:seed={THEORY_SEED}"
        return (f"curves2:a={self.a}:b={self.b}:d={d}:L={','.join(map(str, PRESET_DEPTHS[preset]))}"
                f":P={P}:n={FINITE_P_SAMPLES[preset]}:seed={THEORY_SEED}")


@dataclass(frozen=True)
class Experiment:
    """One figure or table of the paper (SPEC §7)."""

    id: str
    title: str
    models: tuple[str, ...]
    task: str  # easy | difficult | both | theory
    ks: tuple[int, ...]
    spectra_text: str  # the spectra as SPEC §7 states them
    shows: str  # what the figure or table shows
    groups: tuple[RunGroup, ...] = ()
    theory: tuple[TheoryNeed, ...] = ()
    reuses: tuple[str, ...] = ()  # experiments whose runs these are (documentation)
    part: str = "paper"  # paper (a figure or table of the paper: `all`) | beyond (the report's "Beyond the paper": `beyond`) | study (run only when named)
    seeds: tuple[int, ...] | None = None  # the experiment's own seeds at every preset (None: PRESET_SEEDS)

    @property
    def kind(self) -> str:
        return "table" if self.id.startswith("table") else "figure"

    @property
    def spectra(self) -> tuple[Spectrum, ...]:
        out: list[Spectrum] = []
        for g in self.groups:
            out += [s for s in g.spectra if s not in out]
        return tuple(out)

    def groups_for(self, preset: str) -> tuple[RunGroup, ...]:
        check_preset(preset)
        return tuple(g for g in self.groups if g.in_preset(preset))

    def configs(self, preset: str, seeds: int | Sequence[int] | None = None,
                **overrides) -> list[RunConfig]:
        """The runs of this experiment at `preset`: group x spectrum x depth x seed, in that
        order. `seeds`: a count, a list of seeds, or None for PRESET_SEEDS[preset].
        `overrides` are further RunConfig fields passed to make_config."""
        out: list[RunConfig] = []
        for g in self.groups_for(preset):
            for a, b in g.spectra:
                for L in g.depths_for(preset):
                    for s in resolve_seeds(preset, self.seeds if seeds is None else seeds):
                        out.append(make_config(preset, **{**overrides, **dict(g.fields), "model": g.model,
                                                          "task": g.task, "k": g.k, "a": a,
                                                          "b": b, "L": L, "seed": s}))
        return out

    def geometry(self, preset: str) -> str:
        """The (d, P, N) of this experiment's runs and theory at `preset`, as one line."""
        models = [m for m in self.models if m != "transformer"]  # the Transformer's recipe sets its own width
        kinds = {geometry_kind(m) for m in models} or {geometry_kind(t.model) for t in self.theory}
        parts = [geometry_line(preset, sorted(kinds))] if kinds or "transformer" not in self.models else []
        if "transformer" in self.models:
            c = make_config(preset, model="transformer")
            parts.append(f"transformer: d={c.d}, P={c.P}, N={c.N}, heads={c.heads}, MLP {c.mlp}N")
        return "; ".join(parts)

    def theory_for(self, preset: str) -> tuple[TheoryNeed, ...]:
        check_preset(preset)
        return tuple(t for t in self.theory if t.kind not in ("floor", "softmax_floor")
                     or t.k in PRESET_KS[preset])


# The paper's numbers (SPEC §8), for side-by-side reporting; identical to shared/paper_values.json
# (a test checks it). Kept in the package so a report needs nothing outside it.
PAPER: dict = {
    "source": "Peng, Liu, Liu, Gore. Emergent Inverse-Depth Scaling From Nonlinearity In Attention. arXiv 2610.11063",
    "table1_L0_difficult_k2": {
        "spectra": [[0, 0], [0, 0.25], [0, 0.5], [0, 1], [0.25, 0], [0.5, 0], [1, 0]],
        "nonlinear": [2.007, 1.268, 0.836, 0.424, 1.255, 0.798, 0.341],
        "linear": [59.853, 23.055, 9.766, 2.504, 22.962, 9.501, 2.12],
    },
    "table2_linear_easy": [
        {"a": 2, "b": 0.5, "zeta": 0.75, "alpha": 1.121, "two_zeta": 1.5},
        {"a": 2, "b": 1, "zeta": 1.0, "alpha": 1.485, "two_zeta": 2.0},
        {"a": 2, "b": 1.5, "zeta": 1.25, "alpha": 1.684, "two_zeta": 2.5},
        {"a": 2, "b": 2, "zeta": 1.5, "alpha": 1.987, "two_zeta": 3.0},
        {"a": 0.5, "b": 2, "zeta": 3.0, "alpha": 3.31, "two_zeta": 6.0},
        {"a": 1, "b": 2, "zeta": 2.0, "alpha": 2.552, "two_zeta": 4.0},
        {"a": 1.5, "b": 2, "zeta": 1.667, "alpha": 2.163, "two_zeta": 3.333},
    ],
    "table3_linear_floor": [
        {"k": 2, "a": 0, "b": 0, "theory": 59.3714, "theory_se": 0.0213, "measured": 59.8502},
        {"k": 2, "a": 0.25, "b": 0.25, "theory": 9.7004, "theory_se": 0.0049, "measured": 9.7387},
        {"k": 2, "a": 0.5, "b": 0.5, "theory": 2.2715, "theory_se": 0.0061, "measured": 2.3274},
        {"k": 2, "a": 1, "b": 0.25, "theory": 1.2246, "theory_se": 0.0106, "measured": 1.2259},
        {"k": 2, "a": 1, "b": 1, "theory": 0.4975, "theory_se": 0.0102, "measured": 0.5036},
        {"k": 16, "a": 0.5, "b": 0.5, "theory": 0.3218, "theory_se": 0.0042, "measured": 0.3083},
        {"k": 16, "a": 1, "b": 0, "theory": 0.4481, "theory_se": 0.0086, "measured": 0.4452},
        {"k": 16, "a": 1, "b": 0.25, "theory": 0.3186, "theory_se": 0.0085, "measured": 0.3222},
        {"k": 16, "a": 1.25, "b": 0, "theory": 0.3595, "theory_se": 0.009, "measured": 0.3659},
    ],
    "table4_nonlinear_fits": [
        {"k": 2, "a": 0.25, "b": 0.25, "L0": 0.818068, "alpha": 0.97, "alpha_se": 0.01, "r2": 0.9998},
        {"k": 2, "a": 0.25, "b": 0.5, "L0": 0.559694, "alpha": 0.93, "alpha_se": 0.06, "r2": 0.9984},
        {"k": 2, "a": 0.5, "b": 0.5, "L0": 0.382188, "alpha": 0.97, "alpha_se": 0.01, "r2": 0.9999},
        {"k": 16, "a": 0, "b": 0.25, "L0": 0.173237, "alpha": 0.79, "alpha_se": 0.02, "r2": 0.9999},
        {"k": 16, "a": 0, "b": 0.5, "L0": 0.114436, "alpha": 0.88, "alpha_se": 0.03, "r2": 0.9998},
        {"k": 16, "a": 0.25, "b": 0.25, "L0": 0.115248, "alpha": 0.81, "alpha_se": 0.02, "r2": 0.9998},
        {"k": 16, "a": 0.25, "b": 0.5, "L0": 0.079785, "alpha": 0.81, "alpha_se": 0.04, "r2": 0.9994},
    ],
    "table5_gap_fits": [
        {"a": 0, "b": 0, "alpha": 0.98, "alpha_se": 0.007, "r2": 0.99981},
        {"a": 0, "b": 0.25, "alpha": 0.983, "alpha_se": 0.038, "r2": 0.99396},
        {"a": 0, "b": 0.5, "alpha": 0.977, "alpha_se": 0.014, "r2": 0.99923},
        {"a": 0, "b": 1, "alpha": 0.982, "alpha_se": 0.011, "r2": 0.99946},
        {"a": 0.25, "b": 0, "alpha": 0.99, "alpha_se": 0.015, "r2": 0.99904},
        {"a": 0.5, "b": 0, "alpha": 0.986, "alpha_se": 0.005, "r2": 0.99988},
        {"a": 1, "b": 0, "alpha": 0.994, "alpha_se": 0.005, "r2": 0.99992},
    ],
    "context_updates": {"m_top16": -2.3, "rho_top2": 0.9999, "rho_top2_r2_min": 0.9999, "rho_top16": 0.0989, "rho_top16_r2": 0.99996},
}


def paper_L0_top2() -> dict[Spectrum, float]:
    """The paper's fitted nonlinear L0 for every top-2 spectrum (Table 1 and the k = 2 rows of Table 4)."""
    t1 = PAPER["table1_L0_difficult_k2"]
    out = {(float(a), float(b)): v for (a, b), v in zip(t1["spectra"], t1["nonlinear"])}
    out.update({(float(r["a"]), float(r["b"])): r["L0"] for r in PAPER["table4_nonlinear_fits"] if r["k"] == 2})
    return out


def geometry_line(preset: str, kinds: Sequence[str] = ("linear", "softmax")) -> str:
    """'linear: d=.., P=.., N=..; softmax models: ...' for the geometry kinds given."""
    names = {"linear": "linear", "softmax": "softmax models"}
    return "; ".join(f"{names[k]}: d={g['d']}, P={g['P']}, N={g['N']}"
                     for k in kinds for g in [GEOMETRIES[(preset, k)]])


def check_preset(preset: str) -> None:
    if preset not in PRESETS:
        raise InputError(f"preset must be one of {', '.join(PRESETS)}, got {preset!r}")


def depth_set(preset: str, which: str) -> tuple[int, ...]:
    check_preset(preset)
    depths = PRESET_DEPTHS[preset]
    if which == "all":
        return tuple(depths)
    if which == "ends":
        return (depths[0], depths[-1])
    if which == "plateau":
        return tuple(sorted({depths[0], 2, depths[-1]} & set(depths)))
    if which == "variant":
        return tuple(L for L in depths if L <= VARIANT_MAX_DEPTH[preset])
    if which == "deepest":
        return (depths[-1],)
    raise InputError(f"depths must be one of {', '.join(DEPTH_SETS)}, got {which!r}")


def resolve_seeds(preset: str, seeds: int | Sequence[int] | None) -> tuple[int, ...]:
    if seeds is None:
        return PRESET_SEEDS[preset]
    if isinstance(seeds, int) and not isinstance(seeds, bool):
        if seeds < 1:
            raise InputError(f"seeds must be >= 1, got {seeds}")
        return tuple(range(seeds))
    out = tuple(int(s) for s in seeds)
    if not out or any(s < 0 for s in out):
        raise InputError(f"seeds must be a count >= 1 or a non-empty list of seeds >= 0, got {seeds!r}")
    return out


def preset_shape(preset: str, model: str) -> tuple[int, int]:
    """(d, P) of a model's runs at a preset (config.geometry)."""
    check_preset(preset)
    g = geometry(preset, model)
    return g["d"], g["P"]


def _floors(k: int, spectra, model: str = "linear") -> tuple[TheoryNeed, ...]:
    """R_irr of the linear model, at the geometry of `model`'s runs."""
    return tuple(TheoryNeed("floor", a, b, k, model) for a, b in spectra)


def _softmax_floors(k: int, spectra) -> tuple[TheoryNeed, ...]:
    return tuple(TheoryNeed("softmax_floor", a, b, k, "nonlinear") for a, b in spectra)


# --- the registry (SPEC §7) ---
_G3 = RunGroup("linear", "easy", 1, FIG3_SPECTRA)
_G4 = RunGroup("nonlinear", "easy", 1, FIG4_SPECTRA)
_G5 = RunGroup("linear", "difficult", 2, FIG56_SPECTRA)
_G6 = RunGroup("nonlinear", "difficult", 2, FIG56_SPECTRA)
_G14 = (RunGroup("nonlinear", "difficult", 2, FIG14_K2), RunGroup("nonlinear", "difficult", 16, FIG14_K16))
# the spread start (a named variant, SPEC §3.4): beside fig6 and fig14, never in the claims
_G6_SPREAD = RunGroup("nonlinear", "difficult", 2, FIG56_SPECTRA, None, variant_fields("spread", 2))
_G14_SPREAD = (RunGroup("nonlinear", "difficult", 2, FIG14_K2, None, variant_fields("spread", 2)),
               RunGroup("nonlinear", "difficult", 16, FIG14_K16, None, variant_fields("spread", 16)))
# claim 5b: the linear model trained at the nonlinear geometry (d = N = 16, P = 64), every fig5 spectrum
SOFTMAX_GEOMETRY_FIELDS = (("d", 16), ("P", 64), ("N", 16))
_G5_SOFTMAX_GEOMETRY = RunGroup("linear", "difficult", 2, FIG56_SPECTRA, "all", SOFTMAX_GEOMETRY_FIELDS)
_G_CU = (RunGroup("context_updates", "difficult", 2, ORIGIN),
         RunGroup("context_updates", "difficult", 16, ORIGIN))

LOOPED_GROUPS = (
    (RunGroup("nonlinear", "difficult", 2, ORIGIN, (1,)),
     RunGroup("nonlinear", "difficult", 2, ORIGIN, (4,), (("loop", 1),)))
    + tuple(RunGroup(m, "difficult", 2, ORIGIN, (1, 2, 4, LOOPED_MAX_DEPTH)) for m in LOOPED_MODELS)
    + tuple(RunGroup(m, "difficult", 2, ORIGIN, LOOPED_DEPTHS[B], (("loop", B),))
            for m in LOOPED_MODELS for B in LOOPED_B))

_ENTRIES = (
    Experiment("fig1", "Overview: loss vs depth for both models on both tasks",
               ("linear", "nonlinear"), "both", (2,), "those of figs 3-6",
               "2x2 overview, loss vs L, log-log", (_G3, _G4, _G5, _G6),
               reuses=("fig3", "fig4", "fig5", "fig6")),
    Experiment("fig3", "Linear attention, easy task: power laws in depth",
               ("linear",), "easy", (), "a=2: b in {0.5,1,1.5,2}; b=2: a in {0.5,1,1.5,2}",
               "loss vs L with power-law fits and the finite-size references at the same d, P (best shared "
               "GD step, best polynomial in the empirical S); "
               "(c) normalised mode-wise loss for a few modes, floor 2%", (_G3,),
               tuple(TheoryNeed("curves", a, b) for a, b in FIG3_SPECTRA)),
    Experiment("fig4", "Nonlinear attention, easy task: one layer suffices",
               ("nonlinear",), "easy", (), "b=0: a in {0,0.25,0.5,1}; a=0: b in {0,0.25,0.5,1}",
               "loss vs L; (c) top-1 attention mass vs training step at (1,0)", (_G4,)),
    Experiment("fig5", "Linear attention, difficult task: plateau within 1-2 layers",
               ("linear",), "difficult", (2,), "a=0: b in {0,0.25,0.5,1}; b=0: a in {0.25,0.5,1}",
               "loss vs L with the theory floor R_irr", (_G5,), _floors(2, FIG56_SPECTRA)),
    Experiment("fig6", "Nonlinear attention, difficult task: inverse-depth scaling",
               ("nonlinear",), "difficult", (2,), "as fig5",
               "loss vs L with fits (alpha ~ 1) and the softmax-ensemble floor; (c, d) C_L and "
               "A_L - C_L at b = 0", (_G6,), _softmax_floors(2, FIG56_SPECTRA)),
    Experiment("fig7", "Mode-wise loss of nonlinear attention: modes learn in parallel",
               ("nonlinear", "linear"), "difficult", (2,), "(1,0)",
               "(a) raw mode-wise loss vs L; (b) normalised reducible loss collapses; "
               "(c) the same normalisation for the linear model",
               (RunGroup("nonlinear", "difficult", 2, (FIG7_SPECTRUM,)),
                RunGroup("linear", "difficult", 2, (FIG7_SPECTRUM,))), reuses=("fig5", "fig6")),
    Experiment("fig8", "Geometry of the top-k target (theory)", (), "theory", (2,), "(1,0), one sample",
               "query q, selected x's, target t, predictable part t_bar = c Sigma q, residual",
               theory=(TheoryNeed("fig8", *FIG8_SPECTRUM, 2),)),
    Experiment("fig9", "Variant: single stream", ("single_stream",), "difficult", (2,), "(0,0)",
               "loss, C_L, A_L - C_L vs L", (RunGroup("single_stream", "difficult", 2, ORIGIN),)),
    Experiment("fig10", "Variant: per-layer values", ("layer_values",), "difficult", (2,), "(0,0)",
               "loss, C_L, A_L - C_L vs L", (RunGroup("layer_values", "difficult", 2, ORIGIN),)),
    Experiment("fig11", "Variant: context updates", ("context_updates",), "difficult", (2, 16),
               "(0,0)", "loss vs L; learned m vs L", _G_CU),
    Experiment("fig12", "Context updates: layer-1 context attention", ("context_updates",),
               "difficult", (2, 16), "(0,0)", "mean A_1 heat maps; rho_k and R^2", _G_CU,
               reuses=("fig11",)),
    Experiment("fig13", "Selection loss: one layer vs the deepest", ("nonlinear",), "difficult",
               (2,), "(0,0)", "Q_L(q) and Delta Q(q) = Q_1(q) - Q_Lmax(q)",
               (RunGroup("nonlinear", "difficult", 2, ORIGIN, "ends"),), reuses=("fig6",)),
    Experiment("fig14", "Nonlinear attention on more spectra and k = 16", ("nonlinear",),
               "difficult", (2, 16),
               "k=2: (0.25,0.25),(0.25,0.5),(0.5,0.5); k=16: (0,0.25),(0,0.5),(0.25,0.25),(0.25,0.5)",
               "loss vs L with fits; C_L, A_L - C_L for the k=2 ones", _G14,
               _softmax_floors(2, FIG14_K2) + _softmax_floors(16, FIG14_K16)),
    Experiment("fig6-spread", "Variant start: fig6 with the spread start (never used for the claims)",
               ("nonlinear",), "difficult", (2,), "as fig6",
               "fig6's runs with each layer started at its own temperature around the theory-optimal head "
               "and the rate tapered as L^-1/2 (config.RECIPE_VARIANTS['spread']): drawn beside the faithful "
               "runs in fig6", (_G6_SPREAD,), reuses=("fig6",)),
    Experiment("fig14-spread", "Variant start: fig14 with the spread start (never used for the claims)",
               ("nonlinear",), "difficult", (2, 16), "as fig14",
               "fig14's runs with the spread start (k = 16: temperatures around its own tau*): drawn beside "
               "the faithful runs in fig14", _G14_SPREAD, reuses=("fig14",)),
    Experiment("table1", "L0 on the difficult task: nonlinear vs linear", ("nonlinear", "linear"),
               "difficult", (2,), "fig5/6 spectra",
               "L0 nonlinear vs linear, each at its own geometry, and the linear floor R_irr at the "
               "nonlinear geometry (the ratio at equal d and P). The paper's Table 1 sets its d = 16 "
               "nonlinear L0 beside its d = 128 linear one: its ratios 5.9-29.8 compare two "
               "geometries; ratio_equal_geometry is the comparison at equal d and P", (_G6, _G5, _G5_SOFTMAX_GEOMETRY),
               _floors(2, FIG56_SPECTRA, "nonlinear"), reuses=("fig5", "fig6")),
    Experiment("table2", "Linear, easy task: zeta <= alpha <= 2 zeta", ("linear",), "easy", (),
               "fig3 spectra", "zeta, measured alpha, 2 zeta, the finite-size reference slopes",
               (_G3,), reuses=("fig3",)),
    Experiment("table3", "Linear floor: theory R_irr vs measured plateau", ("linear",), "difficult",
               (2, 16), "k=2: (0,0),(0.25,0.25),(0.5,0.5),(1,0.25),(1,1); "
               "k=16: (0.5,0.5),(1,0),(1,0.25),(1.25,0)",
               "R_irr +- SE vs measured plateau, % difference",
               (RunGroup("linear", "difficult", 2, TABLE3_K2, "plateau"),
                RunGroup("linear", "difficult", 16, TABLE3_K16, "plateau")),
               _floors(2, TABLE3_K2) + _floors(16, TABLE3_K16), reuses=("fig5",)),
    Experiment("table4", "Nonlinear fits on the fig14 spectra", ("nonlinear",), "difficult", (2, 16),
               "fig14", "L0, alpha +- SE, R^2", _G14, reuses=("fig14",)),
    Experiment("table5", "Fit of L0 - C_L", ("nonlinear",), "difficult", (2,), "fig6 spectra",
               "alpha +- SE, R^2 of L0 - C_L = c L^-alpha", (_G6,), reuses=("fig6",)),
    Experiment("table6", "Beyond the paper: the nonlinear floor against the softmax-ensemble theory",
               ("nonlinear",), "difficult", (2,), "the top-2 spectra of tables 1 and 4",
               "paper L0, the best cosine head and the best infinitely deep ensemble of them (SPEC "
               "§3.4), our fitted L0 and deepest loss", (_G6, _G14[0]),
               _softmax_floors(2, TOP2_SPECTRA), reuses=("fig6", "fig14")),
    Experiment("clustered", "Beyond the paper: clustered contexts (App. D.2)", ("nonlinear",), "difficult",
               (2,), "(1,0); K = 1, 2, 4, 8 fixed rotations and K = inf (a fresh Haar rotation: fig6's runs)",
               "R_L vs L per K with fits; the specialisation index vs L per K; the per-layer, per-class "
               "selection loss of the deepest model",
               (RunGroup("nonlinear", "difficult", 2, (CLUSTERED_SPECTRUM,), CLUSTERED_DEPTHS),)
               + tuple(RunGroup("nonlinear", "difficult", 2, (CLUSTERED_SPECTRUM,), CLUSTERED_DEPTHS,
                                (("clusters", K),)) for K in CLUSTERED_KS)
               # the untrained control of claim B2a: the same models at step 0, deepest depth
               + tuple(RunGroup("nonlinear", "difficult", 2, (CLUSTERED_SPECTRUM,), "deepest",
                                (("clusters", K), ("max_steps", 0))) for K in CLUSTERED_KS if K >= 2),
               reuses=("fig6",), part="beyond"),
    Experiment("looped", "Beyond the paper: looped stacks (weights tied across depth)",
               ("nonlinear", "single_stream", "context_updates"), "difficult", (2,), "(0,0)",
               "loss, C_L and A_L - C_L vs L and loss vs parameter count for single_stream and "
               "context_updates untied and looped (B distinct layers repeated L/B times, B = 1, 2, 4); "
               "nonlinear with one layer repeated at L = 4 against L = 1 (A_L = C_L by construction)",
               LOOPED_GROUPS, reuses=("fig6", "fig9", "fig11"), part="beyond"),
    Experiment("scaling", "Beyond the paper: loss vs training time and width beside depth", ("nonlinear",),
               "difficult", (2,), "(0,0), (1,0); N = d (fig6's runs) and N = 24, 32, 48, 64 at L = 4, 16",
               "(a) R vs depth L at N = d with fits (fig6's runs); (b) R vs width N at L = 4 and 16 with "
               "fits; (c, d) the monitor loss vs training step t at fixed depths, fits R_inf + c t^-beta "
               "after warmup (the cosine decay of the learning rate confounds the late part)",
               (RunGroup("nonlinear", "difficult", 2, SCALING_SPECTRA),)
               + tuple(RunGroup("nonlinear", "difficult", 2, SCALING_SPECTRA, SCALING_DEPTHS, (("N", N),))
                       for N in SCALING_WIDTHS),
               reuses=("fig6",), part="beyond"),
    Experiment("transformer", "Beyond the paper: the decomposition in a pre-LN Transformer", ("transformer",),
               "difficult", (2,), "(0,0)",
               "a standard pre-LN Transformer (softmax attention + MLP blocks, one token stream) read as an "
               "ensemble through the decomposition f_l = z_0 + L d_l (depthscale.decompose): loss, C_L, "
               "A_L - C_L vs L beside the controlled nonlinear model (fig6's runs at (0,0))",
               (RunGroup("transformer", "difficult", 2, ORIGIN, TRANSFORMER_DEPTHS),),
               reuses=("fig6",), part="beyond"),
    Experiment("budget", "Study: the budget ladder (faithful start vs spread variant)", ("nonlinear",),
               "difficult", (2,), "cpu: (0,0); paper: the ten top-2 spectra",
               "alpha +- SE over seeds, R^2, L0, C_L and A_L - C_L per training budget (steps x 512) for "
               "both starts; SPEC §9's decision rule", budget_groups(), part="study", seeds=BUDGET_SEEDS),
)

REGISTRY: dict[str, Experiment] = {e.id: e for e in _ENTRIES}
IDS: tuple[str, ...] = tuple(e.id for e in _ENTRIES if e.part == "paper")  # `all`: the paper's figures and tables
BEYOND_IDS: tuple[str, ...] = tuple(e.id for e in _ENTRIES if e.part == "beyond")  # `beyond`
GROUP_WORDS = {"all": IDS, "beyond": BEYOND_IDS}  # what --experiment accepts besides ids


def check_ids(ids: Iterable[str]) -> list[str]:
    """The ids as given, each checked against the registry (InputError naming the first unknown)."""
    ids = list(ids)
    for i in ids:
        if i not in REGISTRY:
            raise InputError(f"unknown experiment {i!r} (known: {', '.join(REGISTRY)}, or all, beyond)")
    return ids


def parse_ids(text: str) -> list[str]:
    """'all' (the paper's ids), 'beyond' (the beyond-the-paper ids), or a comma list of ids and
    those words (in the order given), checked."""
    out: list[str] = []
    for i in text.split(","):
        for j in GROUP_WORDS.get(i.strip(), (i.strip(),)):
            if j not in out:
                out.append(j)
    return check_ids(out)


def resolve_ids(ids: str | Iterable[str] | None) -> tuple[str, ...]:
    """'all' / None -> the paper's ids; 'beyond' -> the beyond-the-paper ids; else the given ids
    (and words), checked, in registry order."""
    if ids is None:
        return IDS
    if isinstance(ids, str):
        ids = [i.strip() for i in ids.split(",")]
    wanted: set[str] = set()
    for i in ids:
        wanted.update(GROUP_WORDS.get(i, (i,)))
    check_ids(sorted(wanted))
    return tuple(i for i in REGISTRY if i in wanted)


def all_configs(ids: str | Iterable[str] | None, preset: str,
                seeds: int | Sequence[int] | None = None, **overrides) -> list[RunConfig]:
    """The configs of the experiments `ids` at `preset`, each run once (first appearance order)."""
    seen: dict[str, RunConfig] = {}
    for i in resolve_ids(ids):
        for cfg in REGISTRY[i].configs(preset, seeds, **overrides):
            seen.setdefault(cfg.run_id, cfg)
    return list(seen.values())


def theory_needs(ids: str | Iterable[str] | None, preset: str) -> list[TheoryNeed]:
    out: list[TheoryNeed] = []
    for i in resolve_ids(ids):
        out += [t for t in REGISTRY[i].theory_for(preset) if t not in out]
    return out


def summary(presets: Sequence[str] = PRESETS) -> list[dict]:
    """Runs per experiment per preset (default seeds), and the unique runs of all of them (the
    report shows each experiment's count)."""
    rows = []
    for e in _ENTRIES:
        row = {"id": e.id, "title": e.title}
        for p in presets:
            row[p] = len(e.configs(p))
        rows.append(row)
    rows.append({"id": "all (unique)", "title": "",
                 **{p: len(all_configs("all", p)) for p in presets}})
    if BEYOND_IDS:
        rows.append({"id": "beyond (unique)", "title": "",
                     **{p: len(all_configs("beyond", p)) for p in presets}})
    return rows


__all__ = ["Experiment", "RunGroup", "TheoryNeed", "REGISTRY", "IDS", "BEYOND_IDS", "PRESET_SEEDS", "PRESET_KS",
           "FLOOR_SAMPLES", "SOFTMAX_FLOOR_SAMPLES", "FINITE_P_SAMPLES", "THEORY_SEED", "PAPER",
           "resolve_ids", "parse_ids", "check_ids", "all_configs", "theory_needs", "summary", "depth_set",
           "resolve_seeds", "preset_shape", "check_preset", "GEOMETRY_EVIDENCE", "TOP2_SPECTRA", "paper_L0_top2",
           "geometry_line", "model_depths", "VARIANT_MAX_DEPTH", "LOOPED_B", "LOOPED_DEPTHS", "LOOPED_MODELS"]
