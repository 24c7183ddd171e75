"""The decomposition R_L = C_L + (A_L - C_L)/L for any residual model (SPEC §3.3's general parallel
form, §5's A_L and C_L), read off the model's own forward through hooks.

A residual stack h_l = h_{l-1} + branch_l(h_{l-1}) read out by an affine map z(h) has, exactly,
y_hat = z(h_L) = z_0 + sum_l d_l with z_0 = z(h_0) and d_l = z(h_l) - z(h_{l-1}). Then the
per-layer predictors f_l = z_0 + L d_l average to y_hat, and with e_l = f_l - y*

    A_L = (1/L) sum_l E[e_l^2],   C_L = (1/(L(L-1))) sum_{l != m} E[e_l e_m],
    R_L = E[(y_hat - y*)^2] = C_L + (A_L - C_L)/L          (exact, also for sample means).

**The contract** (checked on every call; a model that breaks it gets a `UserError` naming what
is wrong). The model exposes

- `model.blocks`: an ordered sequence (`nn.ModuleList`, `nn.Sequential`, list) of L >= 1
  `nn.Module`s. One forward calls each block exactly once, in order. Block l receives the
  residual stream h_{l-1} as its first positional argument (further arguments, e.g. a mask, are
  allowed) and returns h_l, a tensor of the same shape (or a tuple/list whose first element is
  that tensor). Block l+1 receives exactly what block l returned: nothing else touches the stream
  between blocks. h_0 is what block 1 receives (the embedded input).
- `model.readout`: an `nn.Module` called exactly once per forward, on h_L, returning the
  prediction, shape (B,) or (B, 1) — one scalar per example. It must be affine in the stream,
  z(u + v) = z(u) + z(v) - z(0) (a linear map of the query token's state plus a bias); checked
  layer by layer unless `check_readout=False`. A final LayerNorm before the linear head breaks
  this: the sum of the d_l is still exact (it telescopes), but d_l is then no longer layer l's
  own contribution — it depends on the scale set by every other layer.
- If the forward returns a tensor, it must be the readout's output (the model's prediction).

Other names can be given for the blocks and the readout (`blocks=model.transformer.h`, ...).
The decomposition runs under `torch.no_grad()` and does not change the model's train/eval mode:
call `model.eval()` first if it has dropout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from depthscale.base.errors import UserError
from depthscale.data.measurements import decomposition


class ContractError(UserError):
    """A model that does not meet the contract of `decompose` (the message says what is missing)."""


@dataclass
class Decomposition:
    """Per-layer predictors and the decomposition of one evaluation set (float64)."""

    f_BxL: torch.Tensor  # f_l = z_0 + L d_l
    z0_B: torch.Tensor  # readout of the stream before the first block
    y_hat_B: torch.Tensor  # the model's own prediction, readout(h_L)
    L: int
    R: float  # E[(y_hat - y*)^2], from the model's own prediction
    R_se: float  # its standard error over examples
    A: float  # A_L = (1/L) sum_l E[e_l^2]
    C: float  # C_L (NaN for L = 1)
    identity_residual: float  # R - (C + (A - C)/L); R - A at L = 1 (f_1 = y_hat)
    A_l: list  # E[e_l^2] per layer (A_L is their mean)

    def as_dict(self) -> dict:
        """The numbers (no tensors), e.g. for a JSON result."""
        return {"L": self.L, "R": self.R, "R_se": self.R_se, "A": self.A, "C": self.C,
                "A_minus_C": self.A - self.C if self.L > 1 else float("nan"),
                "identity_residual": self.identity_residual, "A_l": list(self.A_l), "n": int(self.f_BxL.shape[0])}


def _call(model: nn.Module, batch):
    if isinstance(batch, dict):
        return model(**batch)
    if isinstance(batch, (tuple, list)):
        return model(*batch)
    return model(batch)


def _stream_of(out, what: str) -> torch.Tensor:
    """The stream in a block's output: the tensor, or the first element of a tuple/list."""
    if isinstance(out, (tuple, list)) and out:
        out = out[0]
    if not isinstance(out, torch.Tensor):
        raise ContractError(f"{what} must return the residual stream as a tensor (or a tuple starting "
                            f"with it), got {type(out).__name__}")
    return out


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a is b or (a.shape == b.shape and torch.equal(a, b))


def _resolve(model, blocks, readout) -> tuple[list[nn.Module], nn.Module]:
    if not isinstance(model, nn.Module):
        raise ContractError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if blocks is None:
        if not hasattr(model, "blocks"):
            raise ContractError(f"{type(model).__name__} has no attribute 'blocks' (an ordered list of its "
                                "residual blocks; or pass blocks=...)")
        blocks = model.blocks
    if readout is None:
        if not hasattr(model, "readout"):
            raise ContractError(f"{type(model).__name__} has no attribute 'readout' (the affine map from the "
                                "residual stream to the prediction; or pass readout=...)")
        readout = model.readout
    if isinstance(blocks, nn.Module) and not isinstance(blocks, (nn.ModuleList, nn.Sequential)):
        raise ContractError(f"blocks must be a sequence of modules (nn.ModuleList, nn.Sequential, list), "
                            f"got one {type(blocks).__name__}")
    try:
        blocks = list(blocks)
    except TypeError:
        raise ContractError(f"blocks must be a sequence of modules, got {type(blocks).__name__}") from None
    if not blocks:
        raise ContractError("blocks is empty: the model needs at least one residual block")
    for i, blk in enumerate(blocks):
        if not isinstance(blk, nn.Module):
            raise ContractError(f"block {i + 1} is a {type(blk).__name__}, not an nn.Module")
    if len({id(b) for b in blocks}) != len(blocks):
        raise ContractError("blocks contains one module twice (a looped stack): give each application "
                            "its own module, or wrap them, so that each layer is hooked once")
    if not isinstance(readout, nn.Module):
        raise ContractError(f"readout must be an nn.Module, got {type(readout).__name__}")
    if any(readout is b for b in blocks):
        raise ContractError("readout is one of the blocks")
    return blocks, readout


class _Capture:
    """Forward hooks on the blocks and the readout: z_l = readout(h_l) as the forward goes, and the
    contract checks (order, one stream, affine readout). Streams are not kept, only z_l."""

    def __init__(self, blocks: list[nn.Module], readout: nn.Module, check_readout: bool, rtol: float):
        self.blocks, self.readout = blocks, readout
        self.check_readout, self.rtol = check_readout, rtol
        self.next = 0  # index of the block expected next
        self.prev: torch.Tensor | None = None  # the stream last returned by a block
        self.z: list[torch.Tensor] = []  # z_0 .. z_L, float64, shape (B,)
        self.z_zero: torch.Tensor | None = None
        self.y_hat: torch.Tensor | None = None
        self.readout_calls = 0
        self.internal = False  # readout calls made by the hooks themselves

    def z_of(self, h: torch.Tensor, what: str) -> torch.Tensor:
        self.internal = True
        try:
            out = self.readout(h)
        finally:
            self.internal = False
        return self.as_prediction(out, what).double()

    @staticmethod
    def as_prediction(out, what: str) -> torch.Tensor:
        if not isinstance(out, torch.Tensor):
            raise ContractError(f"{what}: readout must return a tensor, got {type(out).__name__}")
        if out.dim() == 2 and out.shape[1] == 1:
            out = out[:, 0]
        if out.dim() != 1:
            raise ContractError(f"{what}: readout must return one scalar per example, shape (B,) or (B, 1), "
                                f"got {tuple(out.shape)}")
        return out

    def pre(self, i: int):
        def hook(module, args):
            if self.internal:
                return
            if i != self.next:
                raise ContractError(f"block {i + 1} was called when block {self.next + 1} was expected: "
                                    "each block must run exactly once, in the order of blocks")
            if not args or not isinstance(args[0], torch.Tensor):
                raise ContractError(f"block {i + 1} must receive the residual stream as its first positional "
                                    "argument")
            h = args[0]
            if i == 0:
                self.z.append(self.z_of(h, "h_0"))
                if self.check_readout:
                    self.z_zero = self.z_of(torch.zeros_like(h), "h = 0")
            elif not _same(h, self.prev):
                raise ContractError(f"block {i + 1} did not receive block {i}'s output: the blocks must form "
                                    "one residual stream, with nothing between them")
            self.prev = h
        return hook

    def post(self, i: int):
        def hook(module, args, out):
            if self.internal:
                return
            h = _stream_of(out, f"block {i + 1}")
            if h.shape != self.prev.shape:
                raise ContractError(f"block {i + 1} changed the stream's shape {tuple(self.prev.shape)} -> "
                                    f"{tuple(h.shape)}: a residual block returns a stream like its input")
            z = self.z_of(h, f"h_{i + 1}")
            if self.check_readout:  # affine: z(h_l) - z(h_{l-1}) = z(h_l - h_{l-1}) - z(0)
                dz = z - self.z[-1]
                lin = self.z_of(h - self.prev, f"h_{i + 1} - h_{i}") - self.z_zero
                scale = max(float(z.abs().max()), float(self.z[-1].abs().max()), float(lin.abs().max()), 1e-30)
                err = float((dz - lin).abs().max())
                if not err <= self.rtol * scale:
                    raise ContractError(f"readout is not affine in the stream (layer {i + 1}: z(h_l) - z(h_l-1) "
                                        f"differs from z(h_l - h_l-1) - z(0) by {err:.3g}, scale {scale:.3g}); a "
                                        "final LayerNorm does this — put it inside the blocks or pass "
                                        "check_readout=False")
            self.z.append(z)
            self.prev = h
            self.next = i + 1
        return hook

    def on_readout(self, module, args, out):
        if self.internal:
            return
        self.readout_calls += 1
        if self.readout_calls > 1:
            raise ContractError("readout was called more than once in one forward")
        if self.next != len(self.blocks):
            raise ContractError(f"readout was called after {self.next} of {len(self.blocks)} blocks: it must "
                                "read the stream after the last block")
        if not args or not isinstance(args[0], torch.Tensor) or not _same(args[0], self.prev):
            raise ContractError("readout did not receive the last block's output: it must read the residual "
                                "stream h_L itself")
        self.y_hat = self.as_prediction(out, "the model's readout")


def per_layer_predictors(model: nn.Module, batch, *, blocks=None, readout=None, check_readout: bool = True,
                         rtol: float = 1e-3) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """f_BxL (f_l = z_0 + L d_l), z0_B and the model's prediction y_hat_B on one batch, all float64.

    `batch` is passed to the model as `model(*batch)` (tuple or list), `model(**batch)` (dict) or
    `model(batch)`. `rtol` is the tolerance of the affine-readout check, relative to the largest
    readout value of the layer."""
    blocks, readout = _resolve(model, blocks, readout)
    cap = _Capture(blocks, readout, check_readout, rtol)
    handles = [readout.register_forward_hook(cap.on_readout)]
    for i, blk in enumerate(blocks):
        handles.append(blk.register_forward_pre_hook(cap.pre(i)))
        handles.append(blk.register_forward_hook(cap.post(i)))
    try:
        with torch.no_grad():
            out = _call(model, batch)
    finally:
        for h in handles:
            h.remove()
    L = len(blocks)
    if cap.next != L:
        raise ContractError(f"the forward ran {cap.next} of the {L} blocks: each block must run exactly once")
    if cap.y_hat is None:
        raise ContractError("the forward never called readout: the prediction must be readout(h_L)")
    if isinstance(out, torch.Tensor):
        o = out[:, 0] if out.dim() == 2 and out.shape[1] == 1 else out
        if o.shape != cap.y_hat.shape or not torch.equal(o, cap.y_hat):
            raise ContractError("the model's output is not its readout's output: the prediction must be "
                                "readout(h_L), returned as is")
    z = torch.stack(cap.z, 1)  # B x (L+1)
    z0 = z[:, 0]
    f = z0.unsqueeze(1) + L * (z[:, 1:] - z[:, :-1])
    return f, z0, cap.y_hat.double()


def decomposition_stats(f_BxL: torch.Tensor, y_hat_B: torch.Tensor, ystar_B: torch.Tensor,
                        z0_B: torch.Tensor | None = None) -> Decomposition:
    """R, A_L, C_L and the identity's residual from per-layer predictors (e.g. several batches of
    `per_layer_predictors`, concatenated). R is the model's own loss, from y_hat, so the residual
    checks that the f_l really average to the prediction."""
    if f_BxL.dim() != 2 or y_hat_B.shape != (f_BxL.shape[0],):
        raise UserError(f"need f of shape (B, L) and y_hat of shape (B,), got {tuple(f_BxL.shape)} and "
                        f"{tuple(y_hat_B.shape)}")
    ystar = ystar_B.reshape(-1) if ystar_B.dim() == 2 and ystar_B.shape[1] == 1 else ystar_B
    if ystar.shape != y_hat_B.shape:
        raise UserError(f"target must have one value per example, shape ({y_hat_B.shape[0]},), got "
                        f"{tuple(ystar_B.shape)}")
    ystar = ystar.to(device=f_BxL.device, dtype=torch.float64)
    L = f_BxL.shape[1]
    dec = decomposition(f_BxL.double(), ystar)
    sq = (y_hat_B.double() - ystar).pow(2)
    n = sq.numel()
    R = sq.mean().item()
    R_se = sq.std(unbiased=True).item() / math.sqrt(n) if n > 1 else float("nan")
    resid = R - (dec["C"] + (dec["A"] - dec["C"]) / L) if L > 1 else R - dec["A"]
    z0 = z0_B if z0_B is not None else torch.full_like(y_hat_B, float("nan"), dtype=torch.float64)
    A_l = (f_BxL.double() - ystar.unsqueeze(1)).pow(2).mean(0).tolist()
    return Decomposition(f_BxL.double(), z0.double(), y_hat_B.double(), L, R, R_se, dec["A"], dec["C"], resid, A_l)


def decompose(model: nn.Module, batch, target: torch.Tensor, *, blocks=None, readout=None,
              check_readout: bool = True, rtol: float = 1e-3) -> Decomposition:
    """The decomposition of a residual model on one batch: f_l = z_0 + L d_l per layer, A_L, C_L,
    the model's loss R_L and the residual of R_L = C_L + (A_L - C_L)/L (float rounding only).

    The model must meet the contract of this module's docstring (`model.blocks`, `model.readout`;
    or pass `blocks=` and `readout=`). `batch` goes to the forward as `model(*batch)` (tuple),
    `model(**batch)` (dict) or `model(batch)`; `target` is y*, one value per example.

        >>> dec = decompose(model, (X, y, xq), ystar)
        >>> dec.R, dec.A, dec.C, dec.identity_residual
    """
    f, z0, y_hat = per_layer_predictors(model, batch, blocks=blocks, readout=readout,
                                        check_readout=check_readout, rtol=rtol)
    if not isinstance(target, torch.Tensor):
        raise UserError(f"target must be a tensor of y*, got {type(target).__name__}")
    return decomposition_stats(f, y_hat, target, z0)


__all__ = ["decompose", "per_layer_predictors", "decomposition_stats", "Decomposition", "ContractError"]
