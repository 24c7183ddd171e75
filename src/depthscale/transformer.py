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
output of block l at the test token), and the decomposition of depthscale.decompose reads the
paper's ensemble f_l = z_0 + L d_l directly. (At depth <= 16 the stream's growth is mild; the
readout is learned, so the missing normalisation costs nothing measurable here.) The model meets
the contract of `depthscale.decompose`: `blocks` (one module per layer) and `readout`.

`train_transformer` is a compact standalone loop (Adam, fresh contexts every step from
`contexts.step_seed`, so every depth sees the same data; warmup and cosine schedule from
`training.lr_factor`): benchmarks/transformer_decomposition.py's. A Transformer run of the store
(RunConfig model = "transformer", the registered `transformer` experiment) is trained instead by
training.train_pack like every other model, through `TransformerPack` (checkpoints, resume, curves,
monitor, keep-best, measurements.measure).
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from depthscale.contexts import make_generator, sample_for, spectrum, step_seed
from depthscale.decompose import Decomposition, decomposition_stats, per_layer_predictors
from depthscale.errors import InputError
from depthscale.measurements import eval_contexts
from depthscale.models import ModelOutput
from depthscale.training import lr_factor


@dataclass(frozen=True)
class TransformerConfig:
    """One Transformer run. Data and schedule fields carry RunConfig's names, so the package's
    samplers (contexts.sample_for, measurements.eval_contexts) and training.lr_factor read them."""

    # --- data (SPEC §2) ---
    d: int = 16  # input dimension
    P: int = 64  # context pairs
    a: float = 0.0  # input-spectrum exponent
    b: float = 0.0  # teacher-spectrum exponent
    task: str = "difficult"  # easy | difficult
    k: int = 2  # selected tokens (difficult task)
    noise: float = 0.0  # label noise std
    # --- model ---
    D: int = 32  # width of the token stream
    H: int = 4  # attention heads (D % H == 0)
    L: int = 1  # blocks (attention + MLP)
    mlp: int = 4  # MLP hidden width = mlp * D
    # --- training ---
    lr: float = 1e-3  # Adam peak learning rate
    batch: int = 64  # fresh contexts per step
    max_steps: int = 1000  # steps
    warmup: int = 50  # linear warmup steps
    schedule: str = "cosine"  # cosine | constant after warmup
    grad_clip: float = 1.0  # global grad-norm clip (0 = off)
    eval_contexts: int = 2048  # fresh evaluation contexts
    eval_seed: int = 1_000_003  # seed of the evaluation set (the controlled models' default)
    seed: int = 0  # init and training-data stream

    def __post_init__(self) -> None:
        for name in ("d", "P", "k", "D", "H", "L", "mlp", "batch", "max_steps", "eval_contexts"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < (0 if name == "mlp" else 1):
                raise InputError(f"{name} must be an integer >= {0 if name == 'mlp' else 1}, got {v!r}")
        if self.D % self.H:
            raise InputError(f"D must be a multiple of H = {self.H}, got {self.D}")
        if self.task not in ("easy", "difficult"):
            raise InputError(f"task must be easy or difficult, got {self.task!r}")
        if self.k > self.P:
            raise InputError(f"k must be <= P = {self.P}, got {self.k}")
        if self.schedule not in ("cosine", "constant"):
            raise InputError(f"schedule must be cosine or constant, got {self.schedule!r}")
        for name in ("a", "b", "noise", "warmup", "grad_clip", "seed", "eval_seed"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
                raise InputError(f"{name} must be a finite number >= 0, got {v!r}")
        if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr > 0):
            raise InputError(f"lr must be > 0, got {self.lr!r}")

    def replace(self, **changes) -> "TransformerConfig":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


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
    Meets the contract of depthscale.decompose (`blocks`, `readout`)."""

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
    def from_config(cls, cfg: TransformerConfig) -> "Transformer":
        return cls(cfg.d, cfg.D, cfg.H, cfg.L, cfg.mlp, label_scale(cfg.d, cfg.a, cfg.b), cfg.seed)

    @torch.no_grad()
    def init_params(self, seed: int) -> None:
        """Weights N(0, 1/fan_in) from the model's own generator; the branch outputs (attention
        projection, MLP output) scaled down by sqrt(2L) as in GPT-2, so the stream's variance at
        init does not grow with depth; biases, label and flag vectors zero; the head small."""
        g = torch.Generator().manual_seed(int(seed) * 7 + 5)
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


class TransformerPack(nn.Module):
    """One Transformer run (a RunConfig with model = "transformer") behind the pack interface that
    training.train_pack, its RowAdam, checkpoints and measurements.measure use for the controlled
    models (models.AttentionPack): M = 1, `depths`, `row_owner`, `model_slice`, `state_of`,
    `load_model_state`, and a forward returning [ModelOutput]. So a Transformer trains, resumes,
    is monitored, measured and stored by the same code as every other model.

    RunConfig's fields map to the Transformer's: N is the stream width D, `heads` H, `mlp` the MLP
    width factor; init from `seed` (Transformer.init_params). Under gradients the forward is the
    plain one (ŷ only); without them (monitor, evaluation) it is read through the hooks of
    depthscale.decompose, so f_BxL holds f_l = z_0 + L d_l (float64) and y_hat_B the model's own
    readout. `self.model` is the Transformer (decompose(pack.model, ...) works on it)."""

    kind = "transformer"

    def __init__(self, cfgs: list):
        super().__init__()
        if len(cfgs) != 1:
            raise InputError(f"a transformer pack holds one run, got {len(cfgs)} (training.pack_key keeps seeds apart)")
        c = cfgs[0]
        self.M, self.depths, self.seeds = 1, [c.L], [c.seed]
        self.model = Transformer(c.d, c.N, c.heads, c.L, c.mlp, label_scale(c.d, c.a, c.b), c.seed)

    def row_owner(self, name: str) -> torch.Tensor:
        p = self.get_parameter(name)
        return torch.zeros(p.shape[0], dtype=torch.long, device=p.device)

    def model_slice(self, name: str, m: int, t: torch.Tensor | None = None) -> torch.Tensor:
        return self.get_parameter(name) if t is None else t

    def state_of(self, m: int) -> dict:
        return {n: p.detach().clone() for n, p in self.named_parameters()}

    def load_model_state(self, m: int, state: dict) -> None:
        with torch.no_grad():
            for n, p in self.named_parameters():
                p.copy_(state[n])

    def n_params(self, m: int = 0) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(self, X_BxPxd, y_BxP, xq_Bxd, models: list[int] | None = None, X_of=None) -> list:
        X, y, xq = (X_BxPxd, y_BxP, xq_Bxd) if X_of is None else X_of(0)
        if torch.is_grad_enabled():
            return [ModelOutput(self.model(X, y, xq), None, None)]
        f, _, y_hat = per_layer_predictors(self.model, (X, y, xq))
        return [ModelOutput(y_hat, f, None)]


def evaluate(model: Transformer, chunks: list, check_readout: bool = True) -> Decomposition:
    """The decomposition (depthscale.decompose) of the model over evaluation chunks (Contexts)."""
    fs, ys, zs, ts = [], [], [], []
    for ctx in chunks:
        f, z0, y_hat = per_layer_predictors(model, (ctx.X_BxPxd, ctx.y_BxP, ctx.xq_Bxd), check_readout=check_readout)
        fs.append(f), zs.append(z0), ys.append(y_hat), ts.append(ctx.ystar_B)
    return decomposition_stats(torch.cat(fs), torch.cat(ys), torch.cat(ts), torch.cat(zs))


def train_transformer(cfg: TransformerConfig, device: str = "cpu", log_every: int = 100,
                      progress=None) -> tuple[Transformer, dict]:
    """Train one Transformer online (fresh contexts each step) and measure it on cfg.eval_contexts
    fresh contexts. Returns the model and its metrics: R, R_se, A, C, identity_residual, Var(y*),
    the training curve, parameters, seconds and why it stopped (max_steps, or nan)."""
    model = Transformer.from_config(cfg).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    curve = {"step": [], "train_loss": []}
    t0 = time.perf_counter()
    running, n_run, stopped = 0.0, 0, "max_steps"
    for step in range(cfg.max_steps):
        for group in opt.param_groups:
            group["lr"] = cfg.lr * lr_factor(cfg, step)
        ctx = sample_for(cfg, cfg.batch, make_generator(step_seed(cfg.seed, step), device), device)
        loss = (model(ctx.X_BxPxd, ctx.y_BxP, ctx.xq_Bxd) - ctx.ystar_B).pow(2).mean()
        if not torch.isfinite(loss):
            stopped = "nan"
            break
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.grad_clip > 0:
            nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        running += loss.item()
        n_run += 1
        if (step + 1) % log_every == 0 or step + 1 == cfg.max_steps:
            curve["step"].append(step + 1)
            curve["train_loss"].append(running / n_run)
            if progress is not None:
                progress(cfg, step + 1, running / n_run)
            running, n_run = 0.0, 0
    seconds = time.perf_counter() - t0
    met = {"L": cfg.L, "stopped_because": stopped, "steps": step + 1, "train_seconds": seconds,
           "n_params": sum(p.numel() for p in model.parameters()), "curve": curve}
    if stopped == "nan":
        met.update(R=float("nan"), A=float("nan"), C=float("nan"), identity_residual=float("nan"))
        return model, met
    chunks = eval_contexts(cfg, cfg.eval_contexts, cfg.eval_seed, device, chunk=512)
    dec = evaluate(model, chunks)
    var = torch.cat([c.ystar_B for c in chunks]).double().var().item()
    met.update(dec.as_dict(), var_ystar=var, R_rel=dec.R / var)
    return model, met


__all__ = ["TransformerConfig", "Transformer", "TransformerPack", "TokenEmbedding", "Block", "QueryReadout", "label_scale",
           "evaluate", "train_transformer"]
