"""A standard pre-LN Transformer on the in-context retrieval tasks (SPEC §2), beside the paper's
controlled models: one shared token stream, multi-head softmax attention and MLP blocks, LayerNorm
before each sublayer, no 1/L branch scaling — the architecture the controlled models abstract.

Tokens (T = P + 1, the test token last): h_i = W_x x_i + (y_i / s) w_y for the context pairs,
h_test = W_x x_test + e_test (a learned flag: the test token carries no label). s = sqrt(tr(Sigma
Omega)) = sqrt(sum_k lambda_k omega_k), the labels' standard deviation, is a fixed constant of the
spectrum. Every token attends to every token (no mask; the test token has no label, so nothing
leaks). Block l: h <- h + Attn(LN(h)); h <- h + MLP(LN(h)). Prediction y_hat = s (w_o . h_test^L
+ b_o).

**No final LayerNorm.** Pre-LN Transformers usually normalise the stream once more before the head.
That makes the prediction a nonlinear function of the stream, and the readout increments
d_l = z(h_l) - z(h_{l-1}) would then measure layer l's branch at a scale set by all the other
layers, not layer l's own contribution. Without it the readout is affine, d_l = s w_o . (branch
output of block l at the test token), and the decomposition of depthscale.data.decompose reads the
paper's ensemble f_l = z_0 + L d_l directly. (At depth <= 16 the stream's growth is mild; the
readout is learned, so the missing normalisation costs nothing measurable here.) The network meets
the contract of `depthscale.data.decompose`: `blocks` (one module per layer) and `readout`.

A Transformer run is a RunConfig with model = "transformer" (N the stream width, `heads`, `mlp`)
and trains through the trainer like every other kind (`TransformerPack`, a pack of one run).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from depthscale.base import seeds
from depthscale.base.errors import InputError
from depthscale.config.kind_registry import register_kind
from depthscale.config.run import ConfigError, shown
from depthscale.data.contexts import spectrum
from depthscale.data.decompose import Decomposition, decomposition_stats, per_layer_predictors
from depthscale.kinds.base import ModelKind, ModelOutput


def label_scale(d: int, a: float, b: float) -> float:
    """s = sqrt(sum_k lambda_k omega_k): the standard deviation of a label y = beta . x."""
    return math.sqrt(float((spectrum(d, a, torch.float64) * spectrum(d, b, torch.float64)).sum()))


class TokenEmbedding(nn.Module):
    """(X, y, x_test) -> the initial stream h_0, B x (P+1) x D, the test token last."""

    def __init__(self, d: int, D: int, y_scale: float):
        super().__init__()
        self.Wx = nn.Linear(d, D, bias=False)
        self.wy = nn.Parameter(torch.zeros(D))
        self.e_test = nn.Parameter(torch.zeros(D))
        self.register_buffer("y_scale", torch.tensor(float(y_scale)))

    def forward(self, X_BxPxd, y_BxP, xq_Bxd):
        h_ctx = self.Wx(X_BxPxd) + (y_BxP / self.y_scale).unsqueeze(-1) * self.wy
        h_test = self.Wx(xq_Bxd) + self.e_test
        return torch.cat([h_ctx, h_test.unsqueeze(1)], 1)


class Block(nn.Module):
    """One pre-LN layer: h + Attn(LN(h)), then + MLP(LN(h)). Returns the new stream."""

    def __init__(self, D: int, H: int, mlp: int):
        super().__init__()
        self.H = H
        self.ln1 = nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        if mlp:  # mlp = 0: an attention-only block
            self.ln2 = nn.LayerNorm(D)
            self.fc = nn.Linear(D, mlp * D)
            self.out = nn.Linear(mlp * D, D)
        self.mlp = mlp

    def attention(self, h_BxTxD):
        B, T, D = h_BxTxD.shape
        q, k, v = self.qkv(h_BxTxD).view(B, T, 3, self.H, D // self.H).permute(2, 0, 3, 1, 4)  # each BxHxTx(D/H)
        o = F.scaled_dot_product_attention(q, k, v)  # softmax(q k^T / sqrt(D/H)) v, every token to every token
        return self.proj(o.transpose(1, 2).reshape(B, T, D))

    def forward(self, h_BxTxD):
        h = h_BxTxD + self.attention(self.ln1(h_BxTxD))
        return h + self.out(F.gelu(self.fc(self.ln2(h)))) if self.mlp else h


class QueryReadout(nn.Module):
    """y_hat = s (w_o . h_test + b_o): affine in the stream (no final LayerNorm; module docstring)."""

    def __init__(self, D: int, y_scale: float):
        super().__init__()
        self.head = nn.Linear(D, 1)
        self.register_buffer("y_scale", torch.tensor(float(y_scale)))

    def forward(self, h_BxTxD):
        return self.y_scale * self.head(h_BxTxD[:, -1]).squeeze(-1)


class Transformer(nn.Module):
    """Pre-LN Transformer for in-context retrieval: forward(X_BxPxd, y_BxP, xq_Bxd) -> y_hat_B.
    Meets the contract of depthscale.data.decompose (`blocks`, `readout`)."""

    def __init__(self, d: int, D: int = 32, H: int = 4, L: int = 1, mlp: int = 4, y_scale: float = 1.0,
                 seed: int = 0):
        super().__init__()
        if D % H:
            raise InputError(f"D must be a multiple of H = {H}, got {D}")
        self.embed = TokenEmbedding(d, D, y_scale)
        self.blocks = nn.ModuleList(Block(D, H, mlp) for _ in range(L))
        self.readout = QueryReadout(D, y_scale)
        self.init_params(seed)

    @classmethod
    def from_config(cls, cfg) -> "Transformer":
        """The network of a RunConfig (model = transformer): stream width N, `heads`, `mlp`, L."""
        return cls(cfg.d, cfg.N, cfg.heads, cfg.L, cfg.mlp, label_scale(cfg.d, cfg.a, cfg.b), cfg.seed)

    @torch.no_grad()
    def init_params(self, seed: int) -> None:
        """Weights N(0, 1/fan_in) from the model's own generator; the branch outputs (attention
        projection, MLP output) scaled down by sqrt(2L) as in GPT-2, so the stream's variance at
        init does not grow with depth; biases, label and flag vectors zero; the head small."""
        g = seeds.generator(seeds.transformer_init_seed(seed))
        L = len(self.blocks)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = p.shape[1] ** -0.5
                if name.endswith(("proj.weight", "out.weight")):
                    std /= math.sqrt(2 * L)
                if name.startswith("readout"):
                    std = 0.02
                nn.init.normal_(p, 0.0, std, generator=g)
            elif name.endswith("weight"):  # LayerNorm gains
                p.fill_(1.0)
            else:
                p.zero_()
        nn.init.normal_(self.embed.wy, 0.0, 1.0, generator=g)  # the label and test-flag directions start nonzero
        nn.init.normal_(self.embed.e_test, 0.0, 1.0, generator=g)

    def forward(self, X_BxPxd, y_BxP, xq_Bxd):
        h = self.embed(X_BxPxd, y_BxP, xq_Bxd)
        for blk in self.blocks:
            h = blk(h)
        return self.readout(h)


@register_kind
class TransformerPack(ModelKind):
    """The `transformer` kind: one Transformer run behind the model protocol (M = 1; its seed stays
    in the pack key, so every run is a pack of its own).

    RunConfig's fields map to the network's: N is the stream width D, `heads` H, `mlp` the MLP width
    factor; init from `seed` (Transformer.init_params). Under gradients the forward is the plain one
    (y_hat only); without them (monitor, evaluation) it is read through the hooks of
    depthscale.data.decompose, so f_BxL holds f_l = z_0 + L d_l (float64) and y_hat_B the model's own
    readout. `self.model` is the network (decompose(pack.model, ...) works on it)."""

    kind = "transformer"
    geometry = "softmax"  # the presets' d, P of the softmax models; its recipe sets its own width N
    loopable = False
    packs_across_depth = False
    label_linear = False
    packs_across_seeds = False
    readout_by_hooks = True

    @classmethod
    def validate(cls, cfg) -> None:
        """H heads of width N / H."""
        if cfg.N % cfg.heads:
            raise ConfigError(f"heads must be a divisor of N = {cfg.N} (model = transformer: N / heads per head), "
                              f"got {shown(cfg.heads)}")

    def __init__(self, cfgs: list):
        super().__init__()
        if len(cfgs) != 1:
            raise InputError(f"a transformer pack holds one run, got {len(cfgs)} (kinds.lookup.pack_key keeps seeds apart)")
        c = cfgs[0]
        self.M, self.depths, self.seeds = 1, [c.L], [c.seed]
        self.model = Transformer.from_config(c)

    @classmethod
    def from_configs(cls, cfgs: list) -> "TransformerPack":
        return cls(cfgs)

    @classmethod
    def activation_floats(cls, cfg) -> tuple[int, int]:
        # per layer, every token: H attention rows, qkv, LayerNorms, the MLP; per model: the embedding
        P, N = cfg.P, cfg.N
        return (P + 1) * (2 * cfg.heads * (P + 1) + (10 + 3 * cfg.mlp) * N), 3 * P * N

    @classmethod
    def layer_matrices(cls, cfg) -> int:
        return 4 + 2 * cfg.mlp  # a block's N x N matrices: qkv, the projection, the MLP's two

    def row_owner(self, name: str) -> torch.Tensor:
        p = self.get_parameter(name)
        return torch.zeros(p.shape[0], dtype=torch.long, device=p.device)

    def model_slice(self, name: str, m: int, t: torch.Tensor | None = None) -> torch.Tensor:
        return self.get_parameter(name) if t is None else t

    def forward(self, X_BxPxd, y_BxP, xq_Bxd, models: list[int] | None = None, X_of=None) -> list:
        X, y, xq = (X_BxPxd, y_BxP, xq_Bxd) if X_of is None else X_of(0)
        if torch.is_grad_enabled():
            return [ModelOutput(self.model(X, y, xq), None, None)]
        f, _, y_hat = per_layer_predictors(self.model, (X, y, xq))
        return [ModelOutput(y_hat, f, None)]


def evaluate(model: Transformer, chunks: list, check_readout: bool = True) -> Decomposition:
    """The decomposition (depthscale.data.decompose) of the model over evaluation chunks (Contexts)."""
    fs, ys, zs, ts = [], [], [], []
    for ctx in chunks:
        f, z0, y_hat = per_layer_predictors(model, (ctx.X_BxPxd, ctx.y_BxP, ctx.xq_Bxd), check_readout=check_readout)
        fs.append(f), zs.append(z0), ys.append(y_hat), ts.append(ctx.ystar_B)
    return decomposition_stats(torch.cat(fs), torch.cat(ys), torch.cat(ts), torch.cat(zs))


__all__ = ["Transformer", "TransformerPack", "TokenEmbedding", "Block", "QueryReadout", "label_scale", "evaluate"]
