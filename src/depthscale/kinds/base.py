"""The protocol every model kind meets, with its defaults (SPEC §3).

A model kind is one class, a torch module holding a *pack*: M models of that kind side by side (a
pack of one is an ordinary single model). Everything outside the model layer — the trainer, the
measurements, the memory and cost estimates, the pack key — talks to a model through this
protocol and asks the class what it needs to know; none of it tests the kind's name.

Shapes: B contexts, P context pairs, d input dims, N width, L depth of one model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, ClassVar

import torch
from torch import nn

if TYPE_CHECKING:
    from depthscale.config.run import RunConfig
    from depthscale.data.contexts import Contexts

RMS_EPS = 1e-6


def rms_norm(h: torch.Tensor) -> torch.Tensor:
    """Per-token RMS normalisation (pre-norm of SPEC §3.1), no learned gain."""
    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + RMS_EPS)


@dataclass
class ModelOutput:
    """What one model's forward returns on a batch: the prediction, the parallel-form per-layer
    predictors f_l (y_hat = mean_l f_l; SPEC §3.3) and the test token's attention rows; from the
    evaluation's joint forward (`ModelKind.measure_forward`) the rows' layer mean and the input
    weights instead of the rows."""

    y_hat_B: torch.Tensor
    f_BxL: torch.Tensor | None  # None only under gradients where a kind reads f by hooks (transformer)
    p_BxLxP: torch.Tensor | None  # test-row attention over the context (None where there is none)
    extras: dict | None = None  # per-context tensors (leading axis B) the kind's measurements average
    p_mean_BxP: torch.Tensor | None = None  # the rows' mean over the layers, where the rows are not kept
    w_BxP: torch.Tensor | None = None  # the input weights d y_hat / d y_in, where the forward said them


class ModelKind(nn.Module):
    """A pack of M models of one kind. The protocol, in five parts.

    A kind registers its class once, `@kind_registry.register_kind`, which refuses a class that
    lacks one of the facts and methods without a default below (kind_registry.FACTS, METHODS).

    **Class facts** (class attributes; what the rest of the package asks instead of the name):
    - `kind`: the name, RunConfig.model.
    - no default (each kind states them): `geometry` ("linear" or "softmax": the presets' d, P, N
      of its runs, config.GEOMETRIES); `loopable` (weights tied across depth, RunConfig.loop, are
      implemented); `packs_across_depth` (models of different depths share a pack); `label_linear`
      (y_hat is linear in the context labels, so `measurements.measure` takes the input weights
      w = d y_hat / d y_in and the mode-wise loss, SPEC §5).
    - `packs_across_seeds`, `packs_across_spectra`: with `packs_across_depth`, which of a run's
      fields may differ between the models of one pack (`pack_free_fields`, `kinds.lookup.pack_key`);
      False by default (a pack per seed, per spectrum: always right, only slower).
    - `readout_by_hooks`: f_l is read off the forward by hooks (depthscale.data.decompose) beside the
      model's own readout; the measurement checks the identity against that readout.
    - `fused_cpu_kernels`: training may run depthscale.data.kernels (recorded in each run's config.json).
    - `exact_label_weights`: `label_weights` reads w = d y_hat / d y_in off a forward without a
      backward pass (the evaluation then runs one forward per chunk).
    - `layer_cost`, `cost_P_power`: the relative training cost of one layer of one context
      (times `cost_scale(cfg)`; the process executor starts the longest packs first).

    **Construction and parameters**: `from_configs(cfgs)` (runs of one pack key); `M`, `depths`;
    `row_owner(name)` (the model of each leading row of a parameter: the row-wise optimiser),
    `model_slice(name, m, t)`, `state_of(m)`, `load_model_state(m, state)`, `n_params(m)`.

    **Forward**: `forward(X, y, xq, models, X_of) -> [ModelOutput]` (per model; `X_of(m)` gives
    model m its own batch), `train_losses(models, batch_of)`, the training MSE of each model
    (a kind may batch it as one computation; the default runs the forward), and
    `monitor_forward(models, X_of, need_p)` (the default runs the forward), and
    `measure_forward(models, X, y, xq, mean_row, weights)`, the evaluation's joint forward of
    several models on one batch (the default: none, model by model).

    **Measurements and estimates**: `extra_measurements(m, extras)` (the kind's own SPEC §5
    numbers), `cost_scale(cfg)` (executors.pack_cost) and `flops_per_step(...)` (the kinds that
    have one); no default: `activation_floats(cfg)` (floats one context keeps for the backward
    pass: per layer of one model, and per model whatever its depth) and `layer_matrices(cfg)` (N x N
    parameter matrices per layer), memory.pack_bytes's estimate.

    **Validation** (no default): `validate(cfg)`, the kind's own rules on a RunConfig (its fields,
    e.g. the Transformer's heads), raising config.ConfigError; config.validate calls it.
    """

    kind: ClassVar[str]
    geometry: ClassVar[str]
    loopable: ClassVar[bool]
    packs_across_depth: ClassVar[bool]
    label_linear: ClassVar[bool]
    packs_across_seeds: ClassVar[bool] = False
    packs_across_spectra: ClassVar[bool] = False
    readout_by_hooks: ClassVar[bool] = False
    fused_cpu_kernels: ClassVar[bool] = False
    exact_label_weights: ClassVar[bool] = False  # label_weights says w without a backward pass
    layer_cost: ClassVar[float] = 1.0
    cost_P_power: ClassVar[int] = 1

    M: int
    depths: list[int]

    # ---- construction ----
    @classmethod
    def from_configs(cls, cfgs: list[RunConfig]) -> "ModelKind":
        """The pack of the runs `cfgs` (one pack key), initialised from their seeds."""
        raise NotImplementedError(f"{cls.__name__} must define from_configs")

    @classmethod
    def pack_free_fields(cls) -> tuple[str, ...]:
        """RunConfig fields that may differ between the models of one pack (besides `preset`)."""
        return ((("seed",) if cls.packs_across_seeds else ()) + (("L",) if cls.packs_across_depth else ())
                + (("a", "b") if cls.packs_across_spectra else ()))

    # ---- parameters (the optimiser, checkpoints and the store go through these) ----
    def row_owner(self, name: str) -> torch.Tensor:
        """Model index of each leading row of parameter `name`."""
        raise NotImplementedError

    def model_slice(self, name: str, m: int, t: torch.Tensor | None = None) -> torch.Tensor:
        """Model m's rows of parameter `name`, or of `t`, a tensor laid out like it (e.g. the
        optimiser's moments of that parameter)."""
        raise NotImplementedError

    def state_of(self, m: int) -> dict:
        """Model m's parameters as a plain dict (a single-model pack can load it)."""
        return {n: self.model_slice(n, m).detach().clone() for n, _ in self.named_parameters()}

    def load_model_state(self, m: int, state: dict) -> None:
        with torch.no_grad():
            for n, _ in self.named_parameters():
                self.model_slice(n, m).copy_(state[n])

    def n_params(self, m: int = 0) -> int:
        """Trained scalars of model m."""
        return sum(self.model_slice(n, m).numel() for n, _ in self.named_parameters())

    # ---- forward ----
    def train_losses(self, models: list[int], batch_of: Callable[[int], Contexts]) -> torch.Tensor:
        """Training MSE of each model in `models` on its own batch `batch_of(m)` (models that share
        a batch get the same object), one value per model in that order."""
        outs = self(None, None, None, models=models,
                    X_of=lambda m: (batch_of(m).X_BxPxd, batch_of(m).y_BxP, batch_of(m).xq_Bxd))
        return torch.stack([(o.y_hat_B - batch_of(m).ystar_B).pow(2).mean() for m, o in zip(models, outs)])

    def monitor_forward(self, models: list[int], X_of: Callable, need_p: bool) -> list[ModelOutput]:
        """The monitor's forward of `models` (`X_of(m)`: model m's (X, y, xq)), without gradients;
        `need_p`: whether the attention rows are read (the top-1 mass, at k = 1). The default is the
        forward; a kind whose forward is faster without the rows overrides it."""
        return self(None, None, None, models=models, X_of=X_of)

    def measure_forward(self, models: list[int], X_BxPxd: torch.Tensor, y_BxP: torch.Tensor, xq_Bxd: torch.Tensor,
                        mean_row: bool, weights: bool) -> "list[ModelOutput] | None":
        """The evaluation's forward of `models` on one shared batch as one computation, without
        gradients: each model's output with its rows' layer mean (`mean_row`: p_mean_BxP) and its
        input weights (`weights`: w_BxP), the rows themselves not kept. None (the default, and where
        a kind's joint path does not run): measurements takes each model's forward on its own."""
        return None

    # ---- measurements (SPEC §5) ----
    def label_weights(self, m: int, out) -> "torch.Tensor | None":
        """The input weights w = d y_hat / d y_in (B x P) of model m read off its forward's output
        `out` (computed without gradients), where the kind can say them exactly; None (the default):
        measurements.input_weights differentiates the forward instead."""
        return None

    def extra_measurements(self, m: int, extras: dict) -> dict:
        """The kind's own numbers for model m, from the means over the evaluation contexts of its
        outputs' `extras` (float64, the leading B axis averaged away). None by default."""
        return {}

    # ---- estimates ----
    @classmethod
    def cost_scale(cls, cfg: RunConfig) -> float:
        """How one layer's cost scales with the geometry: `layer_cost` is measured at the cpu
        preset's P = 128, N = 32 (one thread), in units of a nonlinear layer there; a layer costs
        layer_cost * cost_scale(cfg) (executors.pack_cost)."""
        return (cfg.P / 128) ** cls.cost_P_power * (cfg.N / 32)

    @classmethod
    def flops_per_step(cls, d: int, N: int, P: int, B: int, groups: list[list[int]], fused: bool = False) -> dict:
        """Matmul FLOPs of one packed training step (bench.flops_per_step)."""
        raise NotImplementedError(f"no FLOP count for model {cls.kind!r}")


__all__ = ["ModelKind", "ModelOutput", "rms_norm", "RMS_EPS"]
