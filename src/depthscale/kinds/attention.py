"""What the five controlled attention kinds share (SPEC §3): their parameters, laid out as a pack.

Every parameter has a leading axis that is either the model axis (M rows) or the flattened layer
axis (T = sum of the models' distinct layers rows). A pack of one model is an ordinary single model;
a pack of many is the packed engine of the speed work (models of different depths and seeds as one
computation). Row `r` of every parameter belongs to exactly one model (`row_owner`), so the
per-model losses have disjoint gradients and an elementwise optimiser sees each model alone.

Weight tying across depth (RunConfig.loop = B >= 1, the kinds with `loopable`): each model has B
distinct layers, layer l (0-based) using row l % B; loop = 0: one row per layer.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn

from depthscale.base.errors import InputError
from depthscale.kinds.base import ModelKind, ModelOutput
from depthscale.kinds.init import draw_params


class AttentionStack(ModelKind):
    """M models of one controlled attention kind with depths `depths` and init seeds `seeds`.

    A subclass says what differs: `forward_model` (or `forward` for a kind that runs the whole pack
    as one computation), its class facts (ModelKind: `loopable` among them; the tied layers are
    implemented here, for the kinds whose forward reads layer l's row l % B), and the class facts
    below. Kinds that do not pack across depth need one depth for the whole pack."""

    packs_across_seeds = True  # every model is drawn from its own seed (init_params)
    per_layer_values: ClassVar[bool] = False  # W_v per layer (a layer parameter, like W_q and W_k)
    scalar_params: ClassVar[int] = 0  # trained scalars beside the matrices (context_updates: m)

    def __init__(self, d: int, N: int, depths: list[int], seeds: list[int], qk_std: float = 0.02,
                 qk_init: str = "independent", wx_init: str = "gaussian", gain_init: str = "random",
                 spread: tuple = (7.0, 30.0, 0.5), gd_step: float = 0.5, loop: int = 0,
                 starts: list[dict] | None = None):
        super().__init__()
        if loop and not self.loopable:
            raise InputError(f"loop is not implemented for model {self.kind!r} (tied layers: RunConfig.loop)")
        if loop and any(L % loop for L in depths):
            raise InputError(f"loop = {loop} must divide every depth, got {sorted(set(depths))}")
        if len(depths) != len(seeds) or not depths:
            raise InputError("depths and seeds must be non-empty lists of equal length")
        if not self.packs_across_depth and len(set(depths)) != 1:
            raise InputError(f"a {self.kind} pack needs one depth, got {sorted(set(depths))}")
        self.d, self.N = d, N
        self.depths = [int(L) for L in depths]
        self.M = len(depths)
        self.loop = int(loop)
        self.rows = [self.loop or L for L in self.depths]  # per-layer parameter rows of each model
        offs = [0]
        for n in self.rows:
            offs.append(offs[-1] + n)
        self.offsets = offs  # rows of model m are offsets[m]:offsets[m+1] of per-layer params
        # a looped model is initialised as its B distinct layers: exactly the untied B-layer model
        # starts: each model's constructive stack (qk_init = constructive, kinds.constructive)
        starts = starts if starts is not None else [None] * self.M
        per = [self.init_params(d, N, n, qk_std, s, qk_init, wx_init, gain_init, spread, gd_step, construct=st)
               for n, s, st in zip(self.rows, seeds, starts)]
        self.layer_params = {"Wq", "Wk"} | ({"Wv"} if self.per_layer_values else set())
        for name in per[0]:
            if name in self.layer_params:
                t = torch.cat([p[name] for p in per], 0)
            else:
                t = torch.stack([p[name] for p in per], 0)
            self.register_parameter(name, nn.Parameter(t))
        owner_T = torch.repeat_interleave(torch.arange(self.M), torch.tensor(self.rows))
        self.register_buffer("owner_T", owner_T, persistent=False)

    @classmethod
    def from_configs(cls, cfgs: list) -> "AttentionStack":
        c0 = cfgs[0]
        starts = None
        if c0.qk_init == "constructive":  # the best cosine stack of each depth on the run's monitor contexts
            from depthscale.kinds.constructive import constructive_stack

            starts = [constructive_stack(c) for c in cfgs]
        return cls(c0.d, c0.N, [c.L for c in cfgs], [c.seed for c in cfgs], c0.qk_std, c0.qk_init, c0.wx_init,
                   c0.gain_init, (c0.tau_min, c0.tau_max, c0.metric_sigma), c0.gd_step, c0.loop, starts=starts)

    @classmethod
    def init_params(cls, d: int, N: int, L: int, qk_std: float, seed: int, qk_init: str = "independent",
                    wx_init: str = "gaussian", gain_init: str = "random", spread: tuple = (7.0, 30.0, 0.5),
                    gd_step: float = 0.5, construct: dict | None = None) -> dict:
        """One model's parameters, drawn on the CPU from its own seed (kinds.init.draw_params)."""
        return draw_params(d, N, L, qk_std, seed, qk_init, wx_init, gain_init, spread, gd_step,
                           layer_values=cls.per_layer_values, construct=construct)

    @classmethod
    def count_params(cls, d: int, N: int, L: int, loop: int = 0) -> int:
        """Trained scalars of one model (SPEC §3): W_x (N d), W_y, W_o (N each), W_v (N^2, or one
        per distinct layer), W_q and W_k per distinct layer (2 N^2 each), and the kind's scalars. A
        looped model counts its B distinct layers once."""
        rows = loop or L
        per_layer = 2 * N * N + (N * N if cls.per_layer_values else 0)
        shared_v = 0 if cls.per_layer_values else N * N
        return N * d + 2 * N + shared_v + rows * per_layer + cls.scalar_params

    @classmethod
    def layer_matrices(cls, cfg) -> int:
        return 3 if cls.per_layer_values else 2

    # ---- bookkeeping for the optimiser ----
    def row_owner(self, name: str) -> torch.Tensor:
        if name in self.layer_params:
            return self.owner_T
        return torch.arange(self.M, device=self.owner_T.device)

    def model_slice(self, name: str, m: int, t: torch.Tensor | None = None) -> torch.Tensor:
        t = getattr(self, name) if t is None else t
        if name in self.layer_params:
            return t[self.offsets[m]:self.offsets[m + 1]]
        return t[m]

    # ---- forward ----
    def forward(self, X_BxPxd: torch.Tensor, y_BxP: torch.Tensor, xq_Bxd: torch.Tensor,
                models: list[int] | None = None, X_of=None) -> list[ModelOutput]:
        """Predictions of models `models` (default all) on one batch of contexts.

        `X_of`, if given, maps a model index to its own (X, y, xq) batch (packs whose models were
        seeded differently see different data streams)."""
        out = []
        for m in (range(self.M) if models is None else models):
            X, y, xq = (X_BxPxd, y_BxP, xq_Bxd) if X_of is None else X_of(m)
            out.append(self.forward_model(m, X, y, xq))
        return out

    def forward_model(self, m: int, X_BxPxd, y_BxP, xq_Bxd) -> ModelOutput:
        """Model m alone on one batch."""
        raise NotImplementedError(f"{type(self).__name__} must define forward_model or forward")

    def _qk(self, m: int):
        """Model m's W_q, W_k rows (B of them for a looped model: layer l uses row l % B)."""
        return self.model_slice("Wq", m), self.model_slice("Wk", m)

    def _tile(self, m: int, t: torch.Tensor, dim: int = 1) -> torch.Tensor:
        """A per-row tensor of model m (rows along `dim`) expanded to its L layers (layer l reads
        row l % B); unchanged for an untied model."""
        reps = self.depths[m] // self.rows[m]
        if reps == 1:
            return t
        sizes = [1] * t.dim()
        sizes[dim] = reps
        return t.repeat(*sizes)


__all__ = ["AttentionStack"]
