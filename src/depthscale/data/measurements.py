"""Measurements on fresh evaluation contexts (SPEC §5).

R_L with its standard error; the exact decomposition R_L = C_L + (A_L - C_L)/L; mode-wise losses;
top-1 attention mass; selection loss and its percentiles; learned m, mean A_1 and its rho fit; and
the training monitor (`monitor`: R, A, C and top-1 mass on the fixed monitor contexts).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from depthscale.base import seeds
from depthscale.data.context_sets import CHUNK, ContextSet
from depthscale.data.contexts import Contexts

PERCENTILES = tuple(range(0, 101, 5))


# Rows of f the decomposition turns into float64 errors at a time: its temporaries stay a few MB
# (the whole 102,400-context set of an L = 64 model made four 52 MB float64 arrays per model, issue 51).
DECOMPOSITION_ROWS = 8192


def _row_errors(f_BxL: torch.Tensor, ystar_B: torch.Tensor):
    """(rows, e) for blocks of DECOMPOSITION_ROWS contexts: e_l = f_l - y* in f's dtype, then float64."""
    n = f_BxL.shape[0]
    for s in range(0, n, DECOMPOSITION_ROWS):
        r = slice(s, min(n, s + DECOMPOSITION_ROWS))
        yield r, (f_BxL[r] - ystar_B[r].unsqueeze(1)).double()


def squared_errors(f_BxL: torch.Tensor, ystar_B: torch.Tensor) -> torch.Tensor:
    """((1/L) sum_l f_l - y*)^2 per context, float64: e_l = f_l - y* in f's dtype, the mean over
    layers in float64 (row by row; blocks of rows change no bit)."""
    out = torch.empty(f_BxL.shape[0], dtype=torch.float64, device=f_BxL.device)
    for r, e_BxL in _row_errors(f_BxL, ystar_B):
        out[r] = e_BxL.mean(1).pow(2)
    return out


def decomposition(f_BxL: torch.Tensor, ystar_B: torch.Tensor) -> dict:
    """R_L, its SE, A_L, C_L from per-layer predictors; R_L = C_L + (A_L - C_L)/L exactly.
    In blocks of DECOMPOSITION_ROWS contexts: R and its SE are the same bits as on the whole
    array; A's and C's float64 sums are added block by block (a different order: the last bits)."""
    n, L = f_BxL.shape
    sq_B = torch.empty(n, dtype=torch.float64, device=f_BxL.device)  # squared_errors, from the same blocks
    A_sum = C_sum = 0.0
    for r, e_BxL in _row_errors(f_BxL, ystar_B):
        sq_B[r] = e_BxL.mean(1).pow(2)
        e2 = e_BxL.pow(2)
        A_sum += e2.sum().item()
        if L > 1:
            C_sum += (e_BxL.sum(1).pow(2) - e2.sum(1)).sum().item()  # sum over l != m of e_l e_m
    R = sq_B.mean().item()
    se = (sq_B.std(unbiased=True).item() / math.sqrt(n)) if n > 1 else float("nan")
    C = C_sum / (n * L * (L - 1)) if L > 1 else float("nan")
    return {"R": R, "R_se": se, "A": A_sum / (n * L), "C": C}


def input_weights(pack, m: int, ctx: Contexts) -> tuple[torch.Tensor, torch.Tensor]:
    """w = d y_hat / d y_in (exact: y_hat is linear in the labels for every model but
    single_stream), and the model's output. Returns (w_BxP, y_hat_B). Read off a forward without
    gradients where the kind says w exactly (`exact_label_weights`, ModelKind.label_weights: the
    softmax ensembles), else by differentiating the forward."""
    if getattr(pack, "exact_label_weights", False):
        with torch.no_grad():
            out = pack(ctx.X_BxPxd, ctx.y_BxP, ctx.xq_Bxd, models=[m])[0]
            w = pack.label_weights(m, out)
        if w is not None:
            return w, out
    y = ctx.y_BxP.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        out = pack(ctx.X_BxPxd, y, ctx.xq_Bxd, models=[m])[0]
        (w,) = torch.autograd.grad(out.y_hat_B.sum(), y)
    return w, out


def modewise(u_Bxd: torch.Tensor, ctx: Contexts) -> torch.Tensor:
    """Per-context mode losses omega_k ((O^T (u - t))_k)^2, Bxd; their mean over contexts is R_k."""
    v = torch.einsum("bij,bi->bj", ctx.O_Bxdxd, u_Bxd - ctx.t_Bxd)
    return ctx.omega_d * v.pow(2)


def mode_sums(outs: list, ctx: Contexts) -> list:
    """Each output's mode-wise losses summed over the slice's contexts (float64, d; `modewise` of
    u = sum_i w_i x_i), None where it has no input weights w_BxP: every model's at once (two batched
    products, not two einsums per model: issue 50)."""
    if not outs or any(o.w_BxP is None for o in outs):
        return [None if o.w_BxP is None else modewise(torch.einsum("bp,bpd->bd", o.w_BxP, ctx.X_BxPxd), ctx)
                .double().sum(0) for o in outs]
    u_BxGxd = torch.bmm(torch.stack([o.w_BxP for o in outs], 1), ctx.X_BxPxd)
    v = torch.einsum("bij,bgi->bgj", ctx.O_Bxdxd, u_BxGxd - ctx.t_Bxd.unsqueeze(1))
    return list((ctx.omega_d * v.pow(2)).double().sum(0).unbind(0))


def selection_loss(p_BxLxP: torch.Tensor, sel_Bxk: torch.Tensor) -> torch.Tensor:
    """E_L(c) = || p_bar_L(c) - p* ||^2, p* = 1/k on the selected tokens (SPEC §5)."""
    return selection_of_mean(p_BxLxP.mean(1), sel_Bxk)


def selection_of_mean(pbar_BxP: torch.Tensor, sel_Bxk: torch.Tensor) -> torch.Tensor:
    """`selection_loss` from the rows' layer mean p_bar_L itself."""
    k = sel_Bxk.shape[1]
    pstar = torch.zeros_like(pbar_BxP).scatter_(1, sel_Bxk, 1.0 / k)
    return (pbar_BxP - pstar).pow(2).sum(1)


def mean_row(out) -> torch.Tensor | None:
    """The layer mean of a ModelOutput's attention rows: p_mean_BxP where the forward gave it
    (`ModelKind.measure_forward`), else p_BxLxP's mean over the layers; None without rows."""
    if out.p_mean_BxP is not None:
        return out.p_mean_BxP
    return out.p_BxLxP.mean(1) if out.p_BxLxP is not None else None


def slice_outputs(pack, models: list[int], ctx: Contexts, weights: bool, layer_rows: bool = False) -> list:
    """Each of `models`' ModelOutput on the slice `ctx` for the final measurement, without gradients
    but where w = d y_hat / d y_in is differentiated: the kind's joint forward of all of them
    (`ModelKind.measure_forward`, its rows' layer mean and, with `weights`, its input weights w_BxP)
    where it has one and `layer_rows` (each layer's own row read) is False; else model by model, the
    forward with its rows and, with `weights`, `input_weights` (w_BxP set)."""
    if not layer_rows:
        outs = pack.measure_forward(models, ctx.X_BxPxd, ctx.y_BxP, ctx.xq_Bxd, mean_row=True, weights=weights)
        if outs is not None:
            return outs
    res = []
    for m in models:
        if weights:
            w, out = input_weights(pack, m, ctx)
            res.append(dataclasses.replace(out, w_BxP=w))
        else:
            with torch.no_grad():
                res.append(pack(ctx.X_BxPxd, ctx.y_BxP, ctx.xq_Bxd, models=[m])[0])
    return res


def layer_selection_loss(p_BxLxP: torch.Tensor, sel_Bxk: torch.Tensor) -> torch.Tensor:
    """Each layer's own selection loss || p_l(c) - p* ||^2, BxL (`selection_loss` on p_BxLxP[:, l])."""
    k = sel_Bxk.shape[1]
    pstar = torch.zeros_like(p_BxLxP[:, 0]).scatter_(1, sel_Bxk, 1.0 / k)
    return (p_BxLxP - pstar.unsqueeze(1)).pow(2).sum(2)


def class_means(v_BxL: np.ndarray, cls_B: np.ndarray, K: int) -> np.ndarray:
    """Mean of v over the contexts of each class, LxK (NaN for a class without contexts)."""
    v = np.asarray(v_BxL, dtype=float)
    v = v[:, None] if v.ndim == 1 else v
    out = np.full((v.shape[1], K), np.nan)
    for c in range(K):
        sel = cls_B == c
        if sel.any():
            out[:, c] = v[sel].mean(0)
    return out


def specialisation_index(E_LxK: np.ndarray) -> dict:
    """How unevenly each layer's selection loss spreads over the context classes (clustered contexts).

    E[l, c]: layer l's mean selection loss on the contexts of class c. Per layer the coefficient of
    variation over classes (population std / mean), averaged over layers:
    - class_cv: of E[l, :] itself; > 0 also when some classes are harder for every layer alike;
    - specialisation: of E[l, c] / mean_l' E[l', c], each class divided by its mean over layers,
      which removes how hard the class is for the model as a whole: it is 0 when every layer has the
      same profile over the classes (no layer is relatively better at some class than the others),
      exactly 0 at L = 1 and at K = 1, and grows as layers divide the classes between them.
    Classes without contexts (NaN) are left out."""
    E = np.asarray(E_LxK, dtype=float)
    E = E[:, ~np.isnan(E).any(0)]
    if E.size == 0:
        return {"class_cv": float("nan"), "specialisation": float("nan")}

    def cv(M):
        m = M.mean(1)
        return float(np.mean(np.where(m > 0, M.std(1) / np.where(m > 0, m, 1.0), 0.0)))

    colmean = E.mean(0, keepdims=True)
    rel = E / np.where(colmean > 0, colmean, 1.0)
    return {"class_cv": cv(E), "specialisation": cv(rel)}




def top1_mass(p_BxLxP: torch.Tensor, sel_Bxk: torch.Tensor) -> torch.Tensor:
    """Attention on the matching token, averaged over layers, per context (easy task)."""
    return top1_of_mean(p_BxLxP.mean(1), sel_Bxk)


def top1_of_mean(pbar_BxP: torch.Tensor, sel_Bxk: torch.Tensor) -> torch.Tensor:
    """`top1_mass` from the rows' layer mean: the mean row's weight on the matching token."""
    return pbar_BxP.gather(1, sel_Bxk[:, :1]).squeeze(1)


def rho_fit(A_PxP: np.ndarray) -> dict:
    """Least squares A ~ rho I + (1 - rho) 11^T/P: rho and R^2 over the matrix entries."""
    P = A_PxP.shape[0]
    J = np.full((P, P), 1.0 / P)
    D = np.eye(P) - J
    rho = float(((A_PxP - J) * D).sum() / (D * D).sum())
    fit = rho * np.eye(P) + (1 - rho) * J
    ss_res = float(((A_PxP - fit) ** 2).sum())
    ss_tot = float(((A_PxP - A_PxP.mean()) ** 2).sum())
    return {"rho": rho, "rho_r2": 1 - ss_res / ss_tot if ss_tot > 0 else float("nan")}


def eval_contexts(cfg, n: int, seed: int, device="cpu", chunk: int = CHUNK, hold: bool = True) -> ContextSet:
    """The fixed evaluation set of a data config, as chunks (same for every model and depth);
    `hold`=False streams it (context_sets.ContextSet: each reading draws its chunk again, the same bits)."""
    return ContextSet(cfg, n, seed, device, chunk, hold)


# Contexts one evaluation forward takes at a time on the CPU. The evaluation and monitor sets come
# in chunks of 1,024 (eval_contexts); a whole chunk's per-layer temporaries (the linear model's
# B x d x N label states: 4 MB per layer and model at d = N = 32) fall out of the caches, and the
# same forward, or forward and backward (input_weights), costs 1.5-2x more CPU than in slices of
# 256 (docs/performance.md, issue 15). Every measurement is per context, so slicing changes no
# number. On a GPU the whole chunk is one batch (None).
CPU_EVAL_BATCH = 256


def eval_batch(device) -> int | None:
    """Contexts per evaluation forward on `device`: CPU_EVAL_BATCH on the CPU, else None (a whole chunk)."""
    return CPU_EVAL_BATCH if torch.device(device).type == "cpu" else None


def split_contexts(ctx: Contexts, size: int | None) -> list[Contexts]:
    """`ctx` as consecutive slices of at most `size` contexts (views; the spectra and the other
    per-set fields are shared). Batch fields are those whose shape suffix starts with B (X_BxPxd,
    cls_B, ...). With size None, or no more contexts than that, [ctx] itself."""
    if size is None or ctx.B <= size:
        return [ctx]
    batch = [f.name for f in dataclasses.fields(ctx)
             if f.name.rsplit("_", 1)[-1].startswith("B") and isinstance(getattr(ctx, f.name), torch.Tensor)]
    return [dataclasses.replace(ctx, **{n: getattr(ctx, n)[s:s + size] for n in batch})
            for s in range(0, ctx.B, size)]


def per_context_arrays(f_NxL: torch.Tensor, ystar_N: torch.Tensor, sel_N: torch.Tensor | None) -> dict:
    """One number per evaluation context, numpy float64, as runs.per_context.evaluate computes them
    from a stored model: "sq_err" ((1/L) sum_l f_l - y*)^2 (decomposition's arithmetic: e_l = f_l - y*
    in float32, the layer mean in float64), "ystar", and "sel_E" (the selection losses, None without)."""
    return {"sq_err": squared_errors(f_NxL, ystar_N).cpu().numpy(),
            "ystar": ystar_N.double().cpu().numpy(),
            "sel_E": sel_N.double().cpu().numpy() if sel_N is not None else None}


def measure(pack, m: int, chunks: list[Contexts], task: str, keep: dict | None = None) -> dict:
    """Every SPEC §5 measurement of model m of the pack on the evaluation chunks. What the kind
    allows is the pack's to say (kinds.base.ModelKind): `label_linear` (input weights and the
    mode-wise loss), `readout_by_hooks` (the identity checked against the model's own readout),
    `extra_measurements` (the kind's own numbers, from the means of its outputs' extras).
    `keep`, a dict given, receives the per-context arrays (`per_context_arrays`)."""
    return measure_many(pack, [m], chunks, task, [keep])[0]


def measure_many(pack, models: list[int], chunks, task: str, keeps: list | None = None) -> list[dict]:
    """`measure` of each of `models` (of one evaluation set), in one pass over the chunks: each chunk
    is read once and every model measured on it before the next, so a streamed set (ContextSet with
    hold=False) is drawn once for all of them, not once per model (issue 50: a pack's runs that
    finish together). The same numbers as `measure` model by model, bit for bit (each model sees
    the same slices in the same order)."""
    keeps = list(keeps) if keeps is not None else [None] * len(models)
    n = chunks.n if hasattr(chunks, "n") else sum(c.B for c in chunks)  # (a streamed set is not drawn to count)
    parts = [_Measurement(pack, m, task, n) for m in models]
    device = getattr(chunks, "device", None)  # a ContextSet's (a streamed one would draw chunk 0 to tell)
    size = eval_batch(device if device is not None else chunks[0].X_BxPxd.device) if len(chunks) else None
    for chunk in chunks:
        for ctx in split_contexts(chunk, size):
            outs = slice_outputs(pack, models, ctx, pack.label_linear, layer_rows=ctx.cls_B is not None)
            for part, out, modes in zip(parts, outs, mode_sums(outs, ctx)):
                part.add(ctx, out, modes)
    return [part.result(keep) for part, keep in zip(parts, keeps)]


class _Measurement:
    """One model's measurement (`measure`) on `n` contexts, slice by slice: `add` reads a slice,
    `result` gives the numbers. The per-context values go into arrays of n rows made at the first
    slice, not into lists of slices joined at the end: a list's small slices kept between each
    forward's temporaries fragmented the heap (a worker's final pass over a 102,400-context set grew
    by 700 MiB, issue 51), and the join copied them once more."""

    def __init__(self, pack, m: int, task: str, n: int) -> None:
        self.pack, self.m, self.task, self.n = pack, m, task, int(n)
        self.cols: dict[str, torch.Tensor] = {}  # name -> n x ... array, rows [0, pos) filled
        self.pos = 0
        self.mode_all: list = []  # per slice, the mode-wise losses summed over its contexts (float64, d)
        self.extra_sum: dict = {}  # per-context extras of the kind, summed over the contexts (float64)
        self.n_extra, self.clusters = 0, 0

    def _put(self, name: str, t: torch.Tensor) -> None:
        """Rows pos .. pos + B of column `name` (made at its first slice, of t's dtype and device)."""
        col = self.cols.get(name)
        if col is None:
            col = self.cols[name] = t.new_empty((self.n, *t.shape[1:]))
        col[self.pos:self.pos + t.shape[0]] = t

    def col(self, name: str) -> torch.Tensor | None:
        """The filled rows of column `name`, None where no slice gave it."""
        return self.cols[name][:self.pos] if name in self.cols else None

    def add(self, ctx: Contexts, out, modes: torch.Tensor | None = None) -> None:
        """Read the model's output `out` on the slice `ctx` (`slice_outputs`: w_BxP set where the kind is
        label_linear) and its mode-wise losses summed over the slice (`mode_sums`; None: none)."""
        if modes is not None:
            self.mode_all.append(modes)
        self._put("f", out.f_BxL.detach())
        self._put("yhat", out.y_hat_B.detach())  # the model's own readout (readout_by_hooks: beside the hooks' f_l)
        self._put("ystar", ctx.ystar_B)
        pbar = mean_row(out)
        if pbar is not None:
            pbar = pbar.detach()
            if self.task == "easy":
                self._put("top1", top1_of_mean(pbar, ctx.sel_Bxk))
            else:
                self._put("sel", selection_of_mean(pbar, ctx.sel_Bxk))
                if ctx.cls_B is not None:  # clustered contexts: per-layer selection loss
                    self._put("layer_sel", layer_selection_loss(out.p_BxLxP.detach(), ctx.sel_Bxk).double().cpu())
        if ctx.cls_B is not None:
            self._put("cls", ctx.cls_B.cpu())
            self.clusters = ctx.clusters
        if out.extras:
            for key, t in out.extras.items():
                s = t.detach().double().sum(0)
                self.extra_sum[key] = s if key not in self.extra_sum else self.extra_sum[key] + s
            self.n_extra += ctx.B
        self.pos += ctx.B

    def result(self, keep: dict | None = None) -> dict:
        pack, L = self.pack, self.pack.depths[self.m]
        f, ystar, sel = self.col("f"), self.col("ystar"), self.col("sel")
        if keep is not None:
            keep.update(per_context_arrays(f, ystar, sel))
        res = decomposition(f, ystar)
        n = f.shape[0]
        res.update(L=L, n_eval=n, var_ystar=ystar.double().var().item())
        res["R_rel"] = res["R"] / res["var_ystar"]
        if pack.readout_by_hooks:  # f_l read by hooks (depthscale.data.decompose): checked against the model's own loss
            R_model = (self.col("yhat").double() - ystar.double()).pow(2).mean().item()
            res["R_model"] = R_model
            res["identity_residual"] = R_model - (res["C"] + (res["A"] - res["C"]) / L if L > 1 else res["A"])
        if self.mode_all:
            Rk = (torch.stack(self.mode_all).sum(0) / n).cpu().numpy()
            res["mode_R"] = Rk.tolist()
            res["mode_R_sum"] = float(Rk.sum())
        if "top1" in self.cols:
            res["top1_mass"] = self.col("top1").double().mean().item()
        E = sel.double().cpu().numpy() if sel is not None else None
        if E is not None:
            res["selection_mean"] = float(E.mean())
            res["selection_percentiles"] = np.percentile(E, PERCENTILES).tolist()
        if "cls" in self.cols:
            res.update(self._by_class(f, ystar, E))
        res.update(pack.extra_measurements(self.m, {key: t / self.n_extra for key, t in self.extra_sum.items()}))
        return res

    def _by_class(self, f, ystar, E) -> dict:
        """Clustered contexts (RunConfig.clusters = K): per-class loss and layer specialisation."""
        K, res = self.clusters, {}
        cls = self.col("cls").numpy()
        e2 = ((f.double().mean(1) - ystar.double()) ** 2).cpu().numpy()
        res["R_class"] = class_means(e2, cls, K)[0].tolist()
        if E is not None:
            res["selection_class"] = class_means(E, cls, K)[0].tolist()
        if "layer_sel" in self.cols:
            El = self.col("layer_sel").numpy()
            E_LxK = class_means(El, cls, K)
            res["selection_layer_class"] = E_LxK.tolist()
            res.update(specialisation_index(E_LxK))
            perm = np.random.default_rng(seeds.SPECIALISATION_NULL_SEED).permutation(cls)
            res["specialisation_null"] = specialisation_index(class_means(El, perm, K))["specialisation"]
        return res


def _reads_top1(ctx) -> bool:
    """Whether the monitor reads the top-1 mass (and so the attention rows p) on `ctx`: at k = 1 only."""
    return ctx.sel_Bxk.shape[1] == 1


def _monitor_add(o, ctx, ys: list, f_acc: list, t1: list) -> None:
    """Append one forward's monitor quantities (targets, per-layer predictors, top-1 mass)."""
    ys.append(ctx.ystar_B)
    f_acc.append(o.f_BxL)
    pbar = mean_row(o) if _reads_top1(ctx) else None
    if pbar is not None:
        t1.append(top1_of_mean(pbar, ctx.sel_Bxk))


def _monitor_chunk(pack, group: list[int], by_model: dict, size: int | None, ys: dict, f_acc: dict, t1: dict) -> None:
    """The forward of the models `group` on their chunks (`by_model`), in slices of `size` contexts."""
    parts = {m: split_contexts(by_model[m], size) for m in group}
    for s in range(len(parts[group[0]])):
        need_p = any(_reads_top1(parts[m][s]) for m in group)
        outs = pack.monitor_forward(group, lambda m: (parts[m][s].X_BxPxd, parts[m][s].y_BxP, parts[m][s].xq_Bxd),
                                    need_p)
        for m, o in zip(group, outs):
            _monitor_add(o, parts[m][s], ys[m], f_acc[m], t1[m])


@torch.no_grad()
def monitor(pack, models: list[int], chunks_of) -> dict:
    """Monitor loss, A, C and top-1 mass for each model in `models` on fixed contexts;
    `chunks_of(m)` is model m's set of context chunks (models with one spectrum share one, and
    each chunk of a set is read once per call: a streamed set draws it once, not once per model)."""
    f_acc = {m: [] for m in models}
    t1 = {m: [] for m in models}
    ys = {m: [] for m in models}
    sets: dict[int, tuple] = {}  # one entry per distinct set: (the set, its models)
    for m in models:
        chunks = chunks_of(m)
        sets.setdefault(id(chunks), (chunks, []))[1].append(m)
    # on the CPU in slices of eval_batch contexts, model by model (cache-sized: the linear pack's
    # forward of all models on whole chunks cost 1.5-3x more CPU) unless the kind has a joint forward
    # (the softmax ensembles' fused kernels: 2.4x faster, issue 50); elsewhere all models at once
    size = eval_batch(next(pack.parameters()).device)
    if size is None:  # all models at once, chunk by chunk
        for c in range(len(chunks_of(models[0]))):
            by_model = {m: chunk for chunks, ms in sets.values() for chunk in [chunks[c]] for m in ms}
            _monitor_chunk(pack, models, by_model, size, ys, f_acc, t1)
    else:  # set by set, each chunk read once, slice by slice: all its models at once where the kind
        for chunks, ms in sets.values():  # has a joint forward (measure_forward), else one at a time
            for chunk in chunks:
                for ctx in split_contexts(chunk, size):
                    outs = pack.measure_forward(ms, ctx.X_BxPxd, ctx.y_BxP, ctx.xq_Bxd, mean_row=_reads_top1(ctx),
                                                weights=False)
                    if outs is None:
                        for m in ms:  # (one slice: _monitor_chunk splits it no further)
                            _monitor_chunk(pack, [m], {m: ctx}, size, ys, f_acc, t1)
                        continue
                    for m, o in zip(ms, outs):
                        _monitor_add(o, ctx, ys[m], f_acc[m], t1[m])
    res = {}
    for m in models:
        dec = decomposition(torch.cat(f_acc[m]), torch.cat(ys[m]))
        dec["top1_mass"] = torch.cat(t1[m]).double().mean().item() if t1[m] else float("nan")
        res[m] = dec
    return res


__all__ = ["decomposition", "squared_errors", "per_context_arrays", "input_weights", "measure_many", "modewise", "selection_loss", "top1_mass",
           "selection_of_mean", "top1_of_mean", "mean_row", "slice_outputs", "mode_sums",
           "layer_selection_loss", "class_means", "specialisation_index", "rho_fit",
           "eval_contexts", "measure", "monitor", "eval_batch", "split_contexts", "CPU_EVAL_BATCH", "PERCENTILES"]
