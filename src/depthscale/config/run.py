"""Run configuration: one frozen dataclass, named presets, validation and the run id.

Field names are the paper's symbols (SPEC §1). A run's config is stored with its results and
hashed into its id, so everything that changes the numbers lives here; how a run is executed
(device, threads, progress bars) does not.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass, fields
from typing import Sequence

from depthscale.base.errors import InputError
from depthscale.config.kind_registry import SPECIAL_STARTS, KindNames, find_kind, kind_names, plugin_code

TASKS = ("easy", "difficult")
SCHEDULES = ("cosine", "constant")
QK_LRS = ("absolute", "relative")
QK_INITS = ("independent", "tied", "spread") + SPECIAL_STARTS
WX_INITS = ("gaussian", "orthogonal")
GAIN_INITS = ("random", "positive")
PRESETS = ("smoke", "cpu", "paper")
# the context stream a run's data come from (RunConfig.stream; seeds.py, philox.py): the
# counter-based Philox stream of issue 35, or "legacy" — the torch-generator stream of earlier
# versions, which a config stored without the field came from and which this version cannot draw
CONTEXT_STREAM = "philox-4x32-10"
LEGACY_STREAM = "legacy"
STREAMS = (CONTEXT_STREAM, LEGACY_STREAM)
# the fields that take one of a fixed set of words (the CLI shows them as choices)
FIELD_CHOICES: dict[str, Sequence[str]] = {"model": KindNames(), "task": TASKS, "schedule": SCHEDULES,
                                             "qk_init": QK_INITS, "wx_init": WX_INITS, "gain_init": GAIN_INITS,
                                             "qk_lr": QK_LRS, "stream": STREAMS}
# field names of earlier versions -> today's (stored configs are read with them renamed)
RENAMED_FIELDS: dict[str, str] = {"init_qk": "qk_std"}


class ConfigError(InputError):
    """A bad configuration value; the message is one line naming the field and the value."""


# Whether a RunConfig field enters the run id (every field decides: `_field`'s run_id, checked by
# tests/test_config.py): "always" hashed; "when_set" hashed only away from its default (a field added
# after stores were written: every run that does not use it keeps the id it had before the field
# existed); "never" (the preset label: it changes no number)
RUN_ID_RULES = ("always", "when_set", "never")


def _field(default, help: str, *, run_id: str):
    """A RunConfig field: its default, its help (the CLI flag's) and its place in the run id
    (one of RUN_ID_RULES; there is no default: a new field must say)."""
    if run_id not in RUN_ID_RULES:
        raise ValueError(f"run_id must be one of {', '.join(RUN_ID_RULES)}, got {run_id!r}")
    return dataclasses.field(default=default, metadata={"help": help, "run_id": run_id})


@dataclass(frozen=True)
class RunConfig:
    # --- data (SPEC §2) ---
    d: int = _field(32, "input dimension", run_id="always")
    P: int = _field(128, "context length (number of context pairs)", run_id="always")
    a: float = _field(0.0, "input-spectrum exponent, lambda_k = k^-a", run_id="always")
    b: float = _field(0.0, "teacher-spectrum exponent, omega_k = k^-b", run_id="always")
    task: str = _field("difficult", "easy (exact-match copy) | difficult (top-k average by cosine)", run_id="always")
    k: int = _field(2, "number of selected tokens (difficult task)", run_id="always")
    noise: float = _field(0.0, "label noise std", run_id="always")
    clusters: int = _field(0, "context classes: 0 = a fresh Haar rotation per context; K >= 1 = each context's rotation is one of K fixed ones (paper App. D.2)", run_id="when_set")
    # --- model (SPEC §3) ---
    model: str = _field("nonlinear", "the attention stack: nonlinear (the paper's controlled model), linear, or a variant (SPEC §3)", run_id="always")
    N: int = _field(32, "hidden width (N >= d)", run_id="always")
    L: int = _field(1, "depth (number of attention layers)", run_id="always")
    loop: int = _field(0, "weight tying across depth: 0 = every layer its own weights; B >= 1 = B distinct layers looped L/B times (1: one layer repeated L times)", run_id="when_set")
    heads: int = _field(4, "model=transformer: attention heads per block (N divisible by heads)", run_id="when_set")
    mlp: int = _field(4, "model=transformer: MLP hidden width mlp * N per block (0: attention-only blocks)", run_id="when_set")
    qk_std: float = _field(0.02, "init std of the W_q, W_k entries (small: attention starts near uniform); qk_init picks the init mode", run_id="always")
    qk_init: str = _field("independent", "independent | tied (W_k starts equal to W_q; trained freely) | spread (layer l's metric starts at tau_l R_l D_l R_l^T, tau_l geometric over [tau_min, tau_max]) | constructive (layer l starts as one head of the best equal-weight stack of L cosine heads on the monitor contexts, plus qk_std noise)", run_id="always")
    tau_min: float = _field(7.0, "qk_init=spread: cosine temperature of the first layer at init", run_id="always")
    tau_max: float = _field(30.0, "qk_init=spread: cosine temperature of the last layer at init", run_id="always")
    metric_sigma: float = _field(0.5, "qk_init=spread: log-normal spread of the metric's eigenvalues D (0 = isotropic)", run_id="always")
    gd_step: float = _field(0.5, "qk_init=gd (linear model): every layer starts as one in-context gradient step of this size (B_l = gd_step L I, W_v = I)", run_id="always")
    construct_heads: int = _field(0, "qk_init=constructive: start from the best stack of this many cosine heads, copied to every L / construct_heads layers (0 = L heads; 1 = the best single head in every layer)", run_id="when_set")
    wx_init: str = _field("gaussian", "gaussian | orthogonal (orthonormal columns of W_x at init)", run_id="always")
    gain_init: str = _field("random", "random | positive (flip W_o at init so that g = W_o W_v W_y > 0)", run_id="always")
    # --- training (SPEC §4) ---
    lr: float = _field(3e-3, "Adam learning rate at L = 1", run_id="always")
    lr_depth_exp: float = _field(0.0, "lr(L) = lr * L^lr_depth_exp (depth-aware learning rate)", run_id="always")
    batch: int = _field(256, "fresh contexts per step", run_id="always")
    max_steps: int = _field(3000, "step cap", run_id="always")
    warmup: int = _field(100, "linear warmup steps", run_id="always")
    schedule: str = _field("cosine", "lr schedule after warmup, over max_steps", run_id="always")
    eval_every: int = _field(250, "steps between monitor evaluations (one at 10,240 contexts costs ~14-20 training steps on a CPU: ~6-8%)", run_id="always")
    monitor_contexts: int = _field(10240, "fixed monitor contexts (SPEC §4: >= 10,240, disjoint from the evaluation set; seeds.monitor_seed)", run_id="always")
    patience: int = _field(10, "monitor evaluations without relative improvement > rel_tol => converged", run_id="always")
    rel_tol: float = _field(1e-3, "relative improvement that counts as progress", run_id="always")
    min_steps: int = _field(0, "the convergence rule cannot stop a run before this step (an early plateau is not convergence)", run_id="always")
    early_stop: bool = _field(False, "let the convergence rule stop a run before max_steps (off: SPEC §4 reports the final model, after the schedule has annealed the rate)", run_id="always")
    checkpoint_every: int = _field(500, "steps between checkpoints", run_id="always")
    qk_lr: str = _field("absolute", "absolute | relative (qk_init=gd: W_q, W_k learn at lr times their start scale sqrt(gd_step L N), so the step size of the gradient-descent start can move by a fixed fraction per step at any depth)", run_id="always")
    keep_best: bool = _field(False, "True: measure the parameters of the lowest monitor loss seen instead of the final ones (SPEC §4: the reported model is the final one; the best step is always recorded as a diagnostic, best_step / best_monitor)", run_id="always")
    grad_clip: float = _field(0.0, "per-model grad-norm clip (0 = off; Adam is scale-free, and a clip dominated by one large gradient starves the small W_q, W_k gradients below Adam's eps)", run_id="always")
    # --- evaluation (SPEC §5) ---
    eval_contexts: int = _field(10240, "fresh evaluation contexts", run_id="always")
    eval_seed: int = _field(1_000_003, "seed of the evaluation set (shared by all runs of one data config)", run_id="always")
    stream: str = _field(CONTEXT_STREAM, 'the context stream every context of the run is drawn from (in the run id: runs on another stream are other runs; a config stored without it is "legacy")', run_id="always")
    # --- identity ---
    seed: int = _field(0, "model init and training-data stream", run_id="always")
    preset: str = _field("cpu", "informational: which preset the fields came from", run_id="never")

    def __post_init__(self) -> None:
        # a = 0 and a = 0.0 are one configuration: store floats as floats so the run id agrees
        for f in fields(self):
            v = getattr(self, f.name)
            if f.type in ("float", float) and isinstance(v, int) and not isinstance(v, bool):
                _require(abs(v) < 2**1024, f.name, v, "a finite number")  # (10^400: float() overflows)
                object.__setattr__(self, f.name, float(v))
        validate(self)

    # convenience views
    @property
    def run_id(self) -> str:
        return run_id(self)

    def replace(self, **changes) -> "RunConfig":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        # every field is a str, int, float or bool: dataclasses.asdict's recursive deep copy gives the
        # same dict ~20x slower (2.3 s of a 27 s smoke reproduction, issue 50)
        return {name: getattr(self, name) for name in FIELD_NAMES}

    @classmethod
    def from_dict(cls, dct: dict) -> "RunConfig":
        dct = {RENAMED_FIELDS.get(k, k): v for k, v in dct.items()}
        dct.setdefault("stream", LEGACY_STREAM)  # stored before the field existed: the earlier stream
        unknown = sorted(set(dct) - set(FIELD_NAMES))
        if unknown:
            raise ConfigError(f"unknown config field {unknown[0]!r}")
        return cls(**dct)


FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in fields(RunConfig))
FLOAT_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(RunConfig) if f.type in ("float", float))
INT_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(RunConfig) if f.type in ("int", int))
FIELD_DEFAULTS: dict = {f.name: f.default for f in fields(RunConfig)}


def config_dict(cfg: "RunConfig | dict", drop: tuple[str, ...] = ()) -> dict:
    """The fields of a config (a RunConfig or its dict) without the fields `drop`: what a run id,
    a pack key or a recipe key is made of."""
    dct = cfg.to_dict() if isinstance(cfg, RunConfig) else dict(cfg)
    for name in drop:
        dct.pop(name, None)
    return dct


# Upper bounds of the integer fields: far beyond any run, low enough that every number made from
# them (a memory estimate, a schedule, a tensor's size) stays finite and fits in 64 bits
MAX_STEPS = 10**9  # max_steps, min_steps, warmup, eval_every, checkpoint_every, patience
MAX_SIZE = 10**12  # d, P, N, L, k, batch, contexts, clusters, heads, mlp, loop (memory refuses far less)
STEP_FIELDS = ("max_steps", "min_steps", "warmup", "eval_every", "checkpoint_every", "patience")
SIZE_FIELDS = ("d", "P", "N", "L", "k", "batch", "monitor_contexts", "eval_contexts", "clusters", "heads", "mlp", "loop")


def shown(value) -> str:
    """repr(value) for a message, at most 80 characters: an integer of more than 30 digits by its
    leading digits and length, a value nested too deeply to print (a grid 100,000 brackets deep) by
    its type."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**30:
        digits = str(abs(value))
        return f"{'-' if value < 0 else ''}{digits[0]}.{digits[1:4]}e+{len(digits) - 1} (an integer of {len(digits)} digits)"
    try:
        text = repr(value)
    except RecursionError:
        text = f"<{type(value).__name__} nested too deeply to show>"
    return text if len(text) <= 80 else text[:80] + "..."


def _require(cond: bool, name: str, value, rule: str) -> None:
    if not cond:
        raise ConfigError(f"{name} must be {rule}, got {shown(value)}")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_real(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def validate(cfg: RunConfig) -> None:
    """Check every field; raise ConfigError naming the first bad one."""
    for f in fields(cfg):
        v = getattr(cfg, f.name)
        if f.type in ("int", int):
            _require(_is_int(v), f.name, v, "an integer")
        elif f.type in ("float", float):
            _require(_is_real(v), f.name, v, "a finite number")
        elif f.type in ("bool", bool):
            _require(isinstance(v, bool), f.name, v, "true or false")
    # max_steps = 0: the model at its initialisation, measured (an untrained control)
    _require(cfg.max_steps >= 0, "max_steps", cfg.max_steps, ">= 0 (0: the untrained model, measured)")
    for name in ("d", "P", "N", "L", "k", "batch", "eval_every", "monitor_contexts",
                 "patience", "checkpoint_every", "eval_contexts"):
        _require(getattr(cfg, name) >= 1, name, getattr(cfg, name), ">= 1")
    for name in ("a", "b", "noise", "qk_std", "warmup", "rel_tol", "grad_clip", "metric_sigma", "min_steps"):
        _require(getattr(cfg, name) >= 0, name, getattr(cfg, name), ">= 0 and finite")
    for name in ("loop", "clusters", "mlp"):
        _require(getattr(cfg, name) >= 0, name, getattr(cfg, name), ">= 0")
    _require(cfg.heads >= 1, "heads", cfg.heads, ">= 1")
    for name in STEP_FIELDS:
        _require(getattr(cfg, name) <= MAX_STEPS, name, getattr(cfg, name), f"<= {MAX_STEPS:,} (steps)")
    for name in SIZE_FIELDS:
        _require(getattr(cfg, name) <= MAX_SIZE, name, getattr(cfg, name), f"<= {MAX_SIZE:,}")
    kind = find_kind(cfg.model)  # the kind's class (kind_registry); None for an unknown model, refused below
    if kind is not None:
        kind.validate(cfg)  # the kind's own fields (the Transformer: H heads of width N / H)
    if cfg.loop:
        _require(cfg.L % cfg.loop == 0, "loop", cfg.loop, f"a divisor of L = {cfg.L} (B distinct layers looped L/B times)")
        loopable = [n for n in kind_names() if find_kind(n).loopable]
        _require(kind is not None and kind.loopable, "loop", cfg.loop,
                 f"0 for model = {cfg.model} (tied layers are implemented for {', '.join(loopable)})")
    _require(cfg.lr > 0, "lr", cfg.lr, "> 0")
    depth_lr = scaled_lr(cfg.lr, cfg.loop or cfg.L, cfg.lr_depth_exp)  # schedule.base_lr: lr * L^lr_depth_exp
    _require(math.isfinite(depth_lr) and depth_lr > 0, "lr_depth_exp", cfg.lr_depth_exp,
             f"such that lr * L^lr_depth_exp is finite and > 0 (lr = {cfg.lr!r}, L = {cfg.loop or cfg.L}: {depth_lr!r})")
    _require(cfg.N >= cfg.d, "N", cfg.N, f">= d = {cfg.d}")
    _require(cfg.k <= cfg.P, "k", cfg.k, f"<= P = {cfg.P}")
    _require(kind is not None, "model", cfg.model, f"one of {', '.join(kind_names())}")
    _require(cfg.task in TASKS, "task", cfg.task, f"one of {', '.join(TASKS)}")
    _require(cfg.gain_init in GAIN_INITS, "gain_init", cfg.gain_init, f"one of {', '.join(GAIN_INITS)}")
    _require(cfg.wx_init in WX_INITS, "wx_init", cfg.wx_init, f"one of {', '.join(WX_INITS)}")
    _require(cfg.qk_init in QK_INITS, "qk_init", cfg.qk_init, f"one of {', '.join(QK_INITS)}")
    _require(cfg.schedule in SCHEDULES, "schedule", cfg.schedule, f"one of {', '.join(SCHEDULES)}")
    _require(cfg.qk_lr in QK_LRS, "qk_lr", cfg.qk_lr, f"one of {', '.join(QK_LRS)}")
    _require(cfg.preset in PRESETS + ("custom",), "preset", cfg.preset, f"one of {', '.join(PRESETS)}")
    _require(cfg.seed >= 0, "seed", cfg.seed, ">= 0")
    for name in ("seed", "eval_seed"):  # mixed into 64-bit generator seeds (seeds.step_seed, model init)
        _require(0 <= getattr(cfg, name) < 2**60, name, getattr(cfg, name), "an integer in [0, 2**60)")
    for name in ("a", "b"):
        _require(getattr(cfg, name) <= 100, name, getattr(cfg, name), "<= 100 (k^-100 underflows float32 at k = 3)")
    _require(cfg.tau_min > 0, "tau_min", cfg.tau_min, "> 0")
    _require(cfg.tau_max >= cfg.tau_min, "tau_max", cfg.tau_max, f">= tau_min = {cfg.tau_min}")
    _require(cfg.gd_step > 0, "gd_step", cfg.gd_step, "> 0")
    if cfg.qk_init in ("spread", "gd", "constructive"):
        _require(cfg.wx_init == "orthogonal", "wx_init", cfg.wx_init, f"orthogonal when qk_init = {cfg.qk_init}")
    if cfg.qk_init in SPECIAL_STARTS:  # the starts some kinds implement (their registration's special_starts)
        able = " or ".join(n for n in kind_names() if cfg.qk_init in find_kind(n).special_starts)
        _require(kind is not None and cfg.qk_init in kind.special_starts, "qk_init", cfg.qk_init,
                 f"used with model = {able} only ({cfg.qk_init})")
    if cfg.qk_init == "constructive":  # a stack of cosine heads: the test row's softmax over the context (SPEC §3.1)
        _require(cfg.task == "difficult" and not cfg.loop, "qk_init", cfg.qk_init,
                 "used on the difficult task and loop = 0 only (constructive)")
    _require(cfg.construct_heads >= 0, "construct_heads", cfg.construct_heads, ">= 0")
    if cfg.construct_heads:
        _require(cfg.qk_init == "constructive" and cfg.L % cfg.construct_heads == 0, "construct_heads", cfg.construct_heads,
                 f"used with qk_init = constructive and a divisor of L = {cfg.L}")


def scaled_lr(lr: float, depth: int, exponent: float) -> float:
    """lr * depth^exponent (schedule.base_lr's rate), inf where it overflows a float."""
    try:
        return lr * float(depth) ** exponent
    except OverflowError:
        return math.inf


# Fields added after stores were written (the beyond-the-paper experiments' switches; run_id="when_set"):
# at their default they are left out of the run id, so every run that does not use them keeps the id
# it had before they existed (a store resumes; `Results` fills them in with their defaults when reading).
ID_OPTIONAL_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(RunConfig) if f.metadata.get("run_id") == "when_set")
# fields never in the run id (run_id="never": the preset label)
ID_EXCLUDED_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(RunConfig) if f.metadata.get("run_id") == "never")


def undecided_fields(cls=None) -> list[str]:
    """The fields of `cls` (default RunConfig) that do not say whether they enter the run id
    (`_field`'s run_id): each one is a decision still to make (tests/test_config.py)."""
    return [f.name for f in fields(cls or RunConfig) if f.metadata.get("run_id") not in RUN_ID_RULES]


# each field's help (the CLI's flag help; RunConfig's `_field`)
FIELD_HELP: dict[str, str] = {f.name: f.metadata.get("help", "") for f in fields(RunConfig)}


def _id_value(v):
    """A config value as the run id hashes it: a number by its value, so -0.0 is 0.0 (the one
    float that equals another yet prints differently; an int in a float field is a float
    already: RunConfig.__post_init__); lists and dicts item by item; anything else as it is."""
    if isinstance(v, float) and v == 0.0:
        return 0.0
    if isinstance(v, dict):
        return {k: _id_value(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_id_value(x) for x in v]
    return v


def run_id(cfg: RunConfig) -> str:
    """Hash of the full configuration: the first 16 hex digits of the sha256 of its fields as
    compact JSON with sorted keys, numbers normalised first (-0.0 hashes as 0.0, so a = -0.0 and
    a = 0.0 are one run; every other number as json writes it, so ids of earlier versions
    stand). Left out: the `preset` label (it changes no number: ID_EXCLUDED_FIELDS) and a field of
    ID_OPTIONAL_FIELDS at its default (it did not exist when older runs were hashed). A run of a
    plug-in kind also hashes its plug-in file (kind_registry.plugin_code): edited code, new runs."""
    dct = config_dict(cfg, ID_EXCLUDED_FIELDS)
    for name in ID_OPTIONAL_FIELDS:
        if dct[name] == FIELD_DEFAULTS[name]:
            del dct[name]
    code = plugin_code(dct.get("model"))
    if code is not None:  # a plug-in kind's runs: its file's hash, so edited code never reuses old results
        dct["kind_code"] = code
    blob = json.dumps(_id_value(dct), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


# --- presets (SPEC §1). Each is a set of field overrides on the dataclass defaults. ---
# Training fields only: the geometry (d, P, N) of a run depends on its model too (GEOMETRIES).
_PRESET_FIELDS: dict[str, dict] = {
    "smoke": dict(batch=64, max_steps=60, warmup=5, eval_every=20,
                  monitor_contexts=256, patience=3, checkpoint_every=20, eval_contexts=512,
                  lr=1e-2),
    "cpu": dict(),
    "paper": dict(batch=512, max_steps=20000, eval_every=250, patience=12, checkpoint_every=1000),
}
# The paper's experiments do not share one geometry (SPEC §1; docs/geometry.md has the evidence):
# its linear numbers (Table 3) are d = 128, P = 1024; its nonlinear top-2 floors (Tables 1, 4) equal
# the best softmax-head ensemble at d = 16, P = 64. Every softmax-attention model (the controlled
# nonlinear model and its variants) runs at the nonlinear geometry, the linear model at the linear
# one. cpu: the nonlinear geometry is the paper's own (it is cheap); linear keeps d = 32 (at d = 16
# a degree-16 polynomial interpolates the whole spectrum, leaving no power law to measure) at
# P/d = 8, the paper's ratio (P = 256 costs the same per step as P = 128: the linear model's
# per-layer cost does not grow with P).
GEOMETRIES: dict[tuple[str, str], dict] = {
    ("smoke", "linear"): dict(d=8, P=16, N=8),
    ("smoke", "softmax"): dict(d=8, P=16, N=8),
    ("cpu", "linear"): dict(d=32, P=256, N=32),
    ("cpu", "softmax"): dict(d=16, P=64, N=16),
    ("paper", "linear"): dict(d=128, P=1024, N=128),
    ("paper", "softmax"): dict(d=16, P=64, N=16),
}


def geometry(preset: str, model: str) -> dict:
    """(d, P, N) of a model's runs at a preset: those of its kind's `geometry` (kind_registry)."""
    preset_fields(preset)  # validates the preset name
    kind = find_kind(model)
    _require(kind is not None, "model", model, f"one of {', '.join(kind_names())}")
    return dict(GEOMETRIES[(preset, kind.geometry)])


PRESET_DEPTHS: dict[str, tuple[int, ...]] = {
    "smoke": (1, 2, 4),
    "cpu": (1, 2, 4, 8, 16, 32, 64),
    "paper": (1, 2, 4, 8, 16, 32, 64, 128, 256),
}


def preset_fields(preset: str) -> dict:
    if not isinstance(preset, str) or preset not in _PRESET_FIELDS:
        raise ConfigError(f"preset must be one of {', '.join(PRESETS)}, got {shown(preset)}")
    return dict(_PRESET_FIELDS[preset], preset=preset)


# Training recipe per (preset, model, task): the part of the configuration that is tuned, not
# given by the paper (SPEC §3.4). Keys are matched most-specific first; see docs/recipe.md.
_SOFTMAX_RECIPE = dict(wx_init="orthogonal", qk_std=0.02, lr=3e-3, gain_init="positive")  # recipe.md §3, §5
# SPEC §5: the experiments that compare nonlinear losses across depths or with the paper's L0 (fig6,
# fig14, tables 1, 4, 5, the convergence study: every nonlinear difficult-task run) evaluate on this
# many contexts at the cpu and paper presets (smoke keeps its small set). Measured on one core:
# measuring a depth-64 model on 102,400 contexts takes ~5 s (L = 1: ~1 s), drawing them ~1.7 s.
SHAPE_EVAL_CONTEXTS = 102_400
# Two named starts of the controlled softmax models (SPEC §3.4, docs/recipe.md §12):
# - faithful (the paper's: the default everywhere): W_q, W_k small and independent, so attention
#   starts near uniform, and one learning rate for every depth;
# - spread (a variant, never used for the paper's claims): layer l starts at cosine temperature
#   tau_l in [tau*/2, 2 tau*] around the theory-optimal single head with a random metric, and the
#   rate falls as L^-1/2 — diversity injected at step 0, picked by the fitted alpha (recipe.md §9).
RECIPE_VARIANTS: dict[str, dict] = {
    "faithful": dict(qk_init="independent", lr_depth_exp=0.0),
    "spread": dict(qk_init="spread", tau_min=7.0, tau_max=30.0, metric_sigma=0.5, lr_depth_exp=-0.5),
}
# The recipe grid of the nonlinear shape experiments (SPEC §3.4, §4), fixed in advance and reported
# whole: start x peak rate x taper (lr(L) = lr L^taper), each point a named variant (`grid_variant`).
# The starts: faithful (W_q, W_k entries N(0, 0.02^2): attention near uniform), default scale (the
# frameworks' default 1/sqrt(3N), 0.144 at N = 16) and constructive (layer l of a depth-L model starts
# as one head of the best equal-weight stack of L cosine heads, computed on the monitor contexts,
# plus 0.02 noise: kinds.constructive). depthscale.analysis.selection picks one per depth by the final monitor loss.
GRID_STARTS = ("faithful", "default", "constructive")
GRID_RATES = (1e-3, 3e-3, 1e-2)
GRID_TAPERS = (0.0, -0.5)
_RATE_NAMES = {1e-3: "1e-3", 3e-3: "3e-3", 1e-2: "1e-2"}
_TAPER_NAMES = {0.0: "flat", -0.5: "taper"}


def grid_name(start: str, lr: float, taper: float) -> str:
    """The name of one grid point, e.g. 'faithful-3e-3-flat' (taper L^0) or 'constructive-1e-2-taper' (L^-1/2)."""
    return f"{start}-{_RATE_NAMES[lr]}-{_TAPER_NAMES[taper]}"


def grid_names() -> tuple[str, ...]:
    """Every point of the recipe grid, in a fixed order (start, then rate, then taper)."""
    return tuple(grid_name(s, r, t) for s in GRID_STARTS for r in GRID_RATES for t in GRID_TAPERS)


def main_grid(preset: str) -> tuple[str, ...]:
    """The recipe grid the main job's nonlinear shape experiments (fig6, fig14, the tables reading
    them) train at `preset`: the preset's own recipe of the nonlinear difficult task (a grid point:
    faithful start, its rate, no taper) and the constructive start at the same rate and taper — a
    two-point slice of the 18-point grid, fixed in advance (the convergence study searches all 18).
    depthscale.analysis.selection.main_envelope picks one per depth and spectrum by the final monitor loss."""
    c = make_config(preset, model="nonlinear", task="difficult")
    if c.qk_init != "independent" or c.qk_std != 0.02 or c.lr not in GRID_RATES or c.lr_depth_exp not in GRID_TAPERS:
        raise ConfigError(f"the {preset} preset's nonlinear recipe is not a point of the recipe grid")
    return (grid_name("faithful", c.lr, c.lr_depth_exp), grid_name("constructive", c.lr, c.lr_depth_exp))


def grid_variant(name: str, N: int) -> dict:
    """The RunConfig fields of grid point `name` at width N (the default scale's qk_std is 1/sqrt(3N))."""
    for s in GRID_STARTS:
        for r in GRID_RATES:
            for t in GRID_TAPERS:
                if grid_name(s, r, t) == name:
                    qk_std = 1.0 / math.sqrt(3 * N) if s == "default" else 0.02
                    return dict(qk_init="constructive" if s == "constructive" else "independent",
                                qk_std=qk_std, lr=r, lr_depth_exp=t)
    raise ConfigError(f"recipe must be one of the grid's {len(grid_names())} points, e.g. {grid_names()[0]!r}; got {shown(name)}")


# the spread start's temperatures at k = 16 (records.variant_fields sets them on the spread groups): the
# spread start is centred on the best single cosine head's temperature tau* of the top-k task
# (theory.softmax_floor at d = 16, P = 64: tau* = 14.8 for k = 2, 3.8 for k = 16), over [tau*/2, 2 tau*]
SPREAD_K16 = dict(tau_min=1.9, tau_max=7.6)
_RECIPES: dict[tuple[str, str, str], dict] = {
    # cpu: the measured recipe (docs/recipe.md); 1,500 steps (800 at batch 64 for linear) keep the main job on 2 cores
    ("cpu", "*", "*"): dict(_SOFTMAX_RECIPE, max_steps=1500, warmup=100),
    # linear: every layer starts as one step of in-context gradient descent (qk_init = gd), the rate
    # falls as L^-1/4 (L^0 blew up at L = 64, L^-1 stalled), and the step budget grows with depth
    # (_DEPTH_STEPS); from a random start L = 64 was 16x above this after 3,000 steps (recipe.md §10)
    ("cpu", "linear", "*"): dict(wx_init="orthogonal", qk_init="gd", gd_step=0.5, qk_std=0.01, lr=1e-3,
                                 lr_depth_exp=-0.25, batch=64, max_steps=800, warmup=50),
    # top-1 mass of the deep easy-task ensembles was still rising at 1,500 steps (L = 64: 0.947 ->
    # 0.978 at 3,000): recipe.md §7
    ("cpu", "nonlinear", "easy"): dict(max_steps=3000),
    # from the gradient-descent start the plateau is reached within 100-600 steps at L <= 8; deeper
    # runs get more (_DEPTH_STEPS; recipe.md §10, §11)
    ("cpu", "linear", "difficult"): dict(max_steps=500),
    # the deep ensembles were still improving at 1,500 and 3,000 steps, and the convergence rule
    # stopped depths 2 and 4 inside plateaus that later break: 4,000 steps, run to the cap (recipe.md §6).
    # The faithful start (RECIPE_VARIANTS; recipe.md §12): attention near uniform, one rate for every depth
    ("cpu", "nonlinear", "difficult"): dict(max_steps=4000, patience=40, eval_contexts=SHAPE_EVAL_CONTEXTS),
    ("cpu", "layer_values", "difficult"): dict(max_steps=4000, patience=40),
    # context_updates costs O(L P^2 N) per context (the context-to-context attention): batch 64
    ("cpu", "context_updates", "*"): dict(batch=64),
    # paper: the cpu recipe carried over (the softmax models share the cpu geometry; the linear
    # recipe was not tuned at d = 128: no GPU was available to tune it)
    ("paper", "*", "*"): dict(_SOFTMAX_RECIPE),
    ("paper", "nonlinear", "difficult"): dict(eval_contexts=SHAPE_EVAL_CONTEXTS),
    ("paper", "linear", "*"): dict(wx_init="orthogonal", qk_init="gd", gd_step=0.5, qk_std=0.01, lr=1e-3,
                                   lr_depth_exp=-0.25),
    ("smoke", "*", "*"): dict(wx_init="orthogonal", gain_init="positive"),
    # the pre-LN Transformer (depthscale.kinds.transformer; docs/beyond.md): the recipe of its first study
    # (studies/transformer_decomposition.py: N = 32, 4 heads, lr 3e-3, batch 64, warmup 50,
    # grad clip 1), 1,000 steps run to the cap (patience beyond the budget) to keep depths 1-8 near
    # 12 core-minutes; no run converges there (docs/decompose.md: 800 -> 1,600 steps still gained
    # 0.9-1.3 at every depth). The controlled models' init fields (wx_init, gain_init, qk_*) do not apply
    ("cpu", "transformer", "*"): dict(N=32, lr=3e-3, batch=64, max_steps=1000, warmup=50, grad_clip=1.0,
                                      patience=40, wx_init="gaussian", gain_init="random"),
    ("paper", "transformer", "*"): dict(N=32, lr=3e-3, warmup=50, grad_clip=1.0, wx_init="gaussian",
                                        gain_init="random"),
    ("smoke", "transformer", "*"): dict(grad_clip=1.0, wx_init="gaussian", gain_init="random"),
}


# Step budgets that grow with depth: max_steps = base * max(1, L / L_ref)^exponent (rounded to a
# multiple of 100), for the (preset, model, task) listed; an explicit max_steps wins.
_DEPTH_STEPS: dict[tuple[str, str, str], tuple[int, int, float]] = {
    ("cpu", "linear", "easy"): (1000, 8, 0.25),  # 1,000 steps to L = 8, then 1,200, 1,400, 1,700 at L = 16, 32, 64
    # the deep difficult-task runs were still falling at 500 steps ((0.5, 0.5), k = 16, L = 64: 0.231
    # at 500, 0.2105 at 1,000 against a finite-P floor of 0.204): 500 to L = 8, then 600, 800, 1,000
    ("cpu", "linear", "difficult"): (500, 8, 1 / 3),
}


def depth_steps(preset: str, model: str, task: str, L: int) -> int | None:
    """The depth-dependent step budget of a recipe (None where the recipe has a flat one)."""
    rule = _DEPTH_STEPS.get((preset, model, task))
    if rule is None:
        return None
    base, L_ref, exponent = rule
    return int(round(base * max(1.0, L / L_ref) ** exponent / 100.0)) * 100


def recipe_fields(preset: str, model: str, task: str) -> dict:
    """The tuned fields of (preset, model, task), the most specific key last (_RECIPES)."""
    out: dict = {}
    for key in ((preset, "*", "*"), (preset, model, "*"), (preset, "*", task), (preset, model, task)):
        out.update(_RECIPES.get(key, {}))
    return out


# where a field's value comes from: make_config's layers, in the order it folds them
SOURCES = ("default", "preset", "geometry", "recipe", "depth", "flag")


def _layers(preset: str, overrides: dict) -> list[tuple[str, dict]]:
    """make_config's layers over the dataclass defaults, in order, each (source, fields it sets):
    the preset's training fields, its geometry for the model, the tuned recipe of (preset, model,
    task), the step budget that grows with L, the overrides ("flag"); last, on the easy task, k = 1
    (k has no meaning there: one value, so run ids do not split on it), counted as the recipe's
    unless the overrides gave that very value."""
    model = overrides.get("model", RunConfig.model)
    task = overrides.get("task", RunConfig.task)
    layers = [("preset", preset_fields(preset)), ("geometry", geometry(preset, model)),
              ("recipe", recipe_fields(preset, model, task))]
    L = overrides.get("L", RunConfig.L)
    steps = depth_steps(preset, model, task, L) if _is_int(L) and 1 <= L <= MAX_SIZE else None  # (a bad L: validate says so)
    if steps is not None:  # the convergence rule (with early_stop) judges only the second half of the budget
        layers.append(("depth", {"max_steps": steps, "min_steps": steps // 2}))
    layers.append(("flag", overrides))
    if task == "easy":
        layers.append(("flag" if overrides.get("k") == 1 else "recipe", {"k": 1}))
    return layers


def config_and_sources(preset: str = "cpu", **overrides) -> tuple[RunConfig, dict[str, str]]:
    """make_config's config and where each field's value comes from (one of SOURCES: the last
    layer to set a field names it, even where it sets the value an earlier one had), from one
    fold of its layers (`_layers`); `train --print-config` shows both."""
    for name in overrides:
        if name not in FIELD_NAMES:
            raise ConfigError(f"unknown config field {name!r}")
    overrides = {k: v for k, v in overrides.items() if v is not None}
    if overrides.get("stream", CONTEXT_STREAM) != CONTEXT_STREAM:  # a new run: only a stored one reads as another
        raise ConfigError(f"stream must be {CONTEXT_STREAM!r} for a new run (this version draws no other), got "
                          f"{shown(overrides['stream'])}")
    for name, words in (("model", kind_names()), ("task", TASKS)):  # they pick the recipe: a list or table cannot
        if name in overrides and not isinstance(overrides[name], str):
            raise ConfigError(f"{name} must be one of {', '.join(words)}, got {shown(overrides[name])}")
    values, sources = {}, dict.fromkeys(FIELD_NAMES, "default")
    for source, layer in _layers(preset, overrides):
        values.update(layer)
        sources.update(dict.fromkeys(layer, source))
    return RunConfig(**values), sources


def make_config(preset: str = "cpu", **overrides) -> RunConfig:
    """A preset's config, with the tuned recipe for its model and task, then any field
    overridden; unknown fields are a ConfigError (config_and_sources: with each field's source)."""
    return config_and_sources(preset, **overrides)[0]


__all__ = ["RunConfig", "ConfigError", "RECIPE_VARIANTS", "GRID_STARTS", "GRID_RATES", "GRID_TAPERS", "grid_name", "main_grid",
           "grid_names", "grid_variant", "SHAPE_EVAL_CONTEXTS", "SPREAD_K16", "make_config", "config_and_sources", "SOURCES", "preset_fields", "run_id", "validate", "config_dict",
           "FIELD_NAMES", "FLOAT_FIELDS", "INT_FIELDS", "FIELD_CHOICES", "RENAMED_FIELDS", "FIELD_HELP", "RUN_ID_RULES",
           "ID_OPTIONAL_FIELDS", "ID_EXCLUDED_FIELDS", "undecided_fields",
           "TASKS", "PRESETS", "PRESET_DEPTHS", "geometry",
           "GEOMETRIES", "MAX_STEPS", "MAX_SIZE", "STEP_FIELDS", "SIZE_FIELDS", "scaled_lr", "shown"]
