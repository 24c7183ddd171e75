"""What an experiment is: one record (`Experiment`) naming its runs, its theory, its figure, its
table, its claims and its notes, and the preset rules the runs expand with (SPEC §1, §7).

An experiment module of `depthscale.experiments` (or a plug-in file named by the environment
variable DEPTHSCALE_EXPERIMENTS) builds its records and registers each in one line,
`register(Experiment(...))`; `depthscale.experiments.registry` imports those modules and is the lookup.
Nothing here imports an experiment: figures, tables, claims and results all read these records.

A record's runs are `RunGroup`s (model, task, k, spectra, which depths, further RunConfig
fields); `Experiment.configs(preset)` expands them through `config.make_config`, so a run's id (a
hash of its config) is the same whichever experiment asks for it: fig13 is two depths of fig6,
the tables are the figures' runs, and `registry.all_configs` trains each shared run once.

Choices where SPEC is silent:
- seeds: 3 (0, 1, 2) at the paper preset, 1 (0) at cpu and smoke (`PRESET_SEEDS`): the cpu preset
  must finish on 2 cores, so its error bars are the evaluation SE, not the spread over seeds —
  except the nonlinear shape experiments fig6 and fig14 (`SHAPE_SEEDS`: 3 at cpu, issue 33), whose
  depth effect one seed's noise can exceed.
- the unpackable variants (single_stream, context_updates) train depths up to
  `VARIANT_MAX_DEPTH[preset]` (16 at cpu), and context_updates uses batch 64 at cpu (config
  recipe): at depths 1-64 and batch 256 those two alone would cost ~6 single-core hours.
- k = 16 is not part of the smoke preset (SPEC §1 table: smoke k = 2), so k = 16 groups expand
  to nothing there and their claims report "missing runs".
- The linear floor R_irr is a Monte Carlo at the preset's d, P with `FLOOR_SAMPLES[preset]`
  (context, query) samples, theory seed 0: 100k at cpu (15 floors, ~30 s on 2 cores, SE ~1% of
  R_irr), 200k at paper (SE ~0.02 at (0,0), like the paper's; ~40 s per floor on a CPU).
- Runs are matched to the registry by cell (model, task, k, a, b, L) and seed within the preset;
  where a cell has runs of several recipes, the current recipe's are used (results.Results).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, NamedTuple, Sequence

from depthscale.config.run import (GEOMETRIES, PRESET_DEPTHS, PRESETS, RECIPE_VARIANTS, SPREAD_K16, RunConfig,
                               geometry, make_config)
from depthscale.base.errors import InputError
from depthscale.config.kind_registry import find_kind

Spectrum = tuple[float, float]  # (a, b)

PRESET_SEEDS: dict[str, tuple[int, ...]] = {"smoke": (0,), "cpu": (0,), "paper": (0, 1, 2)}
# the nonlinear shape experiments (fig6, fig14: claims 5a, 6 and the tables reading their runs) judge
# a depth effect of a few % of R, which one seed's noise can exceed (SPEC §9): >= 3 seeds at cpu
SHAPE_SEEDS: dict[str, tuple[int, ...]] = {"smoke": (0,), "cpu": (0, 1, 2), "paper": (0, 1, 2)}
PRESET_KS: dict[str, tuple[int, ...]] = {"smoke": (2,), "cpu": (2, 16), "paper": (2, 16)}
FLOOR_SAMPLES: dict[str, int] = {"smoke": 4_000, "cpu": 100_000, "paper": 200_000}
# contexts of the softmax-ensemble floor (theory.softmax_floor; SE ~0.7% of the floor at 20,000)
SOFTMAX_FLOOR_SAMPLES: dict[str, int] = {"smoke": 2_000, "cpu": 20_000, "paper": 20_000}
# contexts for the finite-P free curve (theory.sample_free_curve): fit on n, measure on n more
FINITE_P_SAMPLES: dict[str, int] = {"smoke": 2_000, "cpu": 10_000, "paper": 10_000}
THEORY_SEED = 0  # seed of every theory Monte Carlo
DEPTH_SETS = ("all", "ends", "plateau", "variant", "deepest")  # all | (1, Lmax) | (1, 2, Lmax) | up to VARIANT_MAX_DEPTH | (Lmax,)
# The kinds whose registration says depth_set = "variant" (unpackable across depths and the costliest
# per layer: context_updates costs O(L P^2 N) per step) stop at these depths: at the cpu preset 16,
# which keeps the main job on 2 cores (a depth-64 context_updates model costs 3.4 s per step there).
VARIANT_MAX_DEPTH: dict[str, int] = {"smoke": 4, "cpu": 16, "paper": 256}
PARTS = ("paper", "beyond", "study")  # `all` | `beyond` | run only when named


def model_depths(model: str) -> str:
    """The depth set a model's kind is registered with (its depth_set; "all" for an unknown name):
    what its figures and claims read by default."""
    kind = find_kind(model)
    return kind.depth_set if kind is not None else "all"


def variant_fields(recipe: str, k: int = 2) -> tuple[tuple[str, object], ...]:
    """RunGroup fields of a named start (config.RECIPE_VARIANTS), k = 16's temperatures for spread."""
    out = dict(RECIPE_VARIANTS[recipe])
    if recipe == "spread" and k == 16:
        out.update(SPREAD_K16)
    return tuple(sorted(out.items()))


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


def resolve_seeds(preset: str, seeds: int | Sequence[int] | Mapping[str, Sequence[int]] | None) -> tuple[int, ...]:
    """The seeds of a run group at `preset`: None -> PRESET_SEEDS; a count; a list; or a mapping
    preset -> seeds (an experiment whose seeds depend on the preset, e.g. SHAPE_SEEDS)."""
    if seeds is None:
        return PRESET_SEEDS[preset]
    if isinstance(seeds, Mapping):
        return resolve_seeds(preset, seeds.get(preset))
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


def geometry_line(preset: str, kinds: Sequence[str] = ("linear", "softmax")) -> str:
    """'linear: d=.., P=.., N=..; softmax models: ...' for the geometry kinds given."""
    names = {"linear": "linear", "softmax": "softmax models"}
    return "; ".join(f"{names[k]}: d={g['d']}, P={g['P']}, N={g['N']}"
                     for k in kinds for g in [GEOMETRIES[(preset, k)]])


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


def floor_needs(k: int, spectra, model: str = "linear") -> tuple[TheoryNeed, ...]:
    """R_irr of the linear model, at the geometry of `model`'s runs."""
    return tuple(TheoryNeed("floor", a, b, k, model) for a, b in spectra)


def softmax_floor_needs(k: int, spectra) -> tuple[TheoryNeed, ...]:
    return tuple(TheoryNeed("softmax_floor", a, b, k, "nonlinear") for a, b in spectra)


class Claim(NamedTuple):
    """One claim the report checks (SPEC §9 for the paper's; ours beyond it).

    check(res, th) -> (measured, pass, detail), raising claims.MissingRuns / claims.CannotJudge
    where it cannot judge; `uses`: the experiments whose runs it reads (the report checks a claim
    when one of them is built; the paper's claims always); `part`: whose claim it is, one of PARTS
    (no default; its experiment's part, `register` checks): "paper" for SPEC §9's claims about the
    paper, "beyond" for ours beyond it (the ids say nothing: B1a is a habit, not a rule)."""

    id: str
    claim: str
    expected: str  # the criterion, as SPEC §9 states it
    check: Callable
    uses: tuple[str, ...]
    part: str


@dataclass(frozen=True)
class Experiment:
    """One figure or table of the paper (SPEC §7), or one experiment beyond it: its runs, theory,
    figure, table, claims and notes in one record.

    figure(res, th) -> matplotlib Figure; table(res, th) -> pandas DataFrame; notes(res) -> lines
    of text the report shows under them (a study's decision rule and outcome); claims: the claims
    this record owns (each names the experiments it uses)."""

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
    seeds: tuple[int, ...] | Mapping[str, tuple[int, ...]] | None = None  # the experiment's own seeds (at every preset, or per preset; None: PRESET_SEEDS)
    figure: Callable | None = None
    table: Callable | None = None
    claims: tuple[Claim, ...] = ()
    notes: Callable | None = None
    # followup(res) -> RunConfigs that depend on the runs of `groups` (a study's second phase, e.g.
    # the convergence study's chosen recipes): `reproduce` trains them after the groups' runs
    followup: Callable | None = None

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
        kinds = {find_kind(m).geometry for m in models} or {find_kind(t.model).geometry for t in self.theory}
        parts = [geometry_line(preset, sorted(kinds))] if kinds or "transformer" not in self.models else []
        if "transformer" in self.models:
            c = make_config(preset, model="transformer")
            parts.append(f"transformer: d={c.d}, P={c.P}, N={c.N}, heads={c.heads}, MLP {c.mlp}N")
        return "; ".join(parts)

    def theory_for(self, preset: str) -> tuple[TheoryNeed, ...]:
        check_preset(preset)
        return tuple(t for t in self.theory if t.kind not in ("floor", "softmax_floor")
                     or t.k in PRESET_KS[preset])


# ---------------------------------------------------------------- registration

_REGISTERED: dict[str, Experiment] = {}


def register(e: Experiment) -> Experiment:
    """Add experiment `e` to the registry (depthscale.experiments.registry reads them); returns `e`. An id
    registered twice by different records is an InputError naming it."""
    if not isinstance(e, Experiment):
        raise InputError(f"register() takes an Experiment, got {type(e).__name__}")
    if e.part not in PARTS:
        raise InputError(f"experiment {e.id!r}: part must be one of {', '.join(PARTS)}, got {e.part!r}")
    for c in e.claims:
        if c.part != e.part:
            raise InputError(f"experiment {e.id!r}: its claim {c.id!r} must state part={e.part!r} "
                             f"(the experiment's), got {c.part!r}")
    old = _REGISTERED.get(e.id)
    if old is not None and old != e:
        raise InputError(f"experiment {e.id!r} is registered twice (two records with that id)")
    _REGISTERED[e.id] = e
    return e


def registered() -> dict[str, Experiment]:
    """Every experiment registered so far, by id (in registration order)."""
    return dict(_REGISTERED)


__all__ = ["Experiment", "RunGroup", "TheoryNeed", "Claim", "register", "registered", "Spectrum", "PRESET_SEEDS", "SHAPE_SEEDS",
           "PRESET_KS", "FLOOR_SAMPLES", "SOFTMAX_FLOOR_SAMPLES", "FINITE_P_SAMPLES", "THEORY_SEED", "DEPTH_SETS",
           "VARIANT_MAX_DEPTH", "PARTS", "model_depths", "variant_fields", "check_preset",
           "depth_set", "resolve_seeds", "preset_shape", "geometry_line", "floor_needs", "softmax_floor_needs"]
