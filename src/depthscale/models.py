"""The attention-stack family (SPEC §3), stored as a *pack*: M models of one kind side by side.

Every parameter has a leading axis that is either the model axis (M rows) or the flattened layer
axis (T = sum of depths rows). A pack of one model is an ordinary single model; a pack of many is
the packed engine of the speed work (models of different depths and seeds as one computation).
Row `r` of every parameter belongs to exactly one model (`owner` maps rows to models), so the
per-model losses have disjoint gradients and an elementwise optimiser sees each model alone.

Shapes: B contexts, P context pairs, d input dims, N width, L depth of one model.
Each forward returns, per model, the prediction y_hat_B, the parallel-form per-layer predictors
f_BxL (y_hat = mean_l f_l), and the test token's attention rows p_BxLxP where they exist.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from depthscale import kernels
from depthscale.config import ENSEMBLE_MODELS, LOOP_MODELS, MODELS
from depthscale.errors import InputError

RMS_EPS = 1e-6


def rms_norm(h: torch.Tensor) -> torch.Tensor:
    """Per-token RMS normalisation (pre-norm of SPEC §3.1), no learned gain."""
    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + RMS_EPS)


class _RmsScale(torch.autograd.Function):
    """r_RxG = 1/rms(h) per row and group of N columns, h = X_Rxd @ WT_dxGN: the pre-norm scales
    of G models at once. Forward and backward are written out so that the R x G x N projection is
    read once forward and written once backward (autograd's norm takes several passes)."""

    @staticmethod
    def forward(ctx, X_Rxd, WT_dxGN, N: int):
        R, G = X_Rxd.shape[0], WT_dxGN.shape[1] // N
        h_RxGxN = (X_Rxd @ WT_dxGN).view(R, G, N)
        r_RxG = torch.rsqrt(torch.linalg.vector_norm(h_RxGxN, dim=-1).square_().div_(N).add_(RMS_EPS))
        ctx.save_for_backward(X_Rxd, WT_dxGN, h_RxGxN, r_RxG)
        ctx.N = N
        return r_RxG

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dr_RxG):
        X_Rxd, WT_dxGN, h_RxGxN, r_RxG = ctx.saved_tensors
        R, G, N = h_RxGxN.shape
        dt = dr_RxG.dtype  # under autocast h may be lower precision: the backward runs in dr's
        # d r / d h = -r^3 h / N
        dh_RxGN = (h_RxGxN.to(dt) * (dr_RxG * r_RxG.pow(3)).div_(-N).unsqueeze(-1)).view(R, G * N)
        dX = dh_RxGN @ WT_dxGN.to(dt).T if ctx.needs_input_grad[0] else None
        dWT = X_Rxd.to(dt).T @ dh_RxGN if ctx.needs_input_grad[1] else None
        return dX, dWT, None


class _TestRowReadout(torch.autograd.Function):
    """The test row of every layer: p_t = softmax_i(rc_{m(t),i} (u_t . x_i)) and py_t = p_t . y,
    for T layers of G models on one batch (model j owns the layers bounds[j]; rc_BxGxP are its
    scales, r_test r_i). Written out so the B x T x P scores take few passes: no gathered copy of
    rc, in-place scaling, and the softmax-times-labels backward in three in-place passes."""

    @staticmethod
    def forward(ctx, u_BxTxd, X_BxPxd, rc_BxGxP, y_BxP, bounds):
        s_BxTxP = torch.bmm(u_BxTxd, X_BxPxd.transpose(1, 2))
        for j, (t0, t1) in enumerate(bounds):
            s_BxTxP[:, t0:t1].mul_(rc_BxGxP[:, j:j + 1])
        p_BxTxP = torch.softmax(s_BxTxP, dim=-1)
        py_BxT = torch.bmm(y_BxP.unsqueeze(1), p_BxTxP.transpose(1, 2)).squeeze(1)  # (the fast gemv)
        ctx.save_for_backward(u_BxTxd, X_BxPxd, rc_BxGxP, y_BxP, s_BxTxP, p_BxTxP, py_BxT)
        ctx.bounds = bounds
        ctx.set_materialize_grads(False)
        return py_BxT, p_BxTxP

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dpy_BxT, dp_BxTxP):
        u, X, rc, y, s, p, py = ctx.saved_tensors
        B, T, P = p.shape
        dt = p.dtype  # the softmax's dtype (float32 under autocast); the backward runs in it
        u, X, rc, y, py = u.to(dt), X.to(dt), rc.to(dt), y.to(dt), py.to(dt)
        dpy_BxT = torch.zeros(B, T, dtype=dt, device=p.device) if dpy_BxT is None else dpy_BxT.to(dt)
        dp_BxTxP = None if dp_BxTxP is None else dp_BxTxP.to(dt)
        if dp_BxTxP is None:  # ds = p (dpy y - dpy py): softmax backward of the readout
            # (the addcmul in place on a materialised first operand: bit for bit the out-of-place
            # addcmul of three broadcast operands, 2.7x faster)
            ds = (-(py * dpy_BxT)).unsqueeze(-1).expand(B, T, P).contiguous()
            ds.addcmul_(y.unsqueeze(1), dpy_BxT.unsqueeze(-1)).mul_(p)
        else:
            gp = torch.addcmul(dp_BxTxP, y.unsqueeze(1), dpy_BxT.unsqueeze(-1))
            ds = torch._softmax_backward_data(gp, p, -1, p.dtype)
        dy = torch.bmm(dpy_BxT.unsqueeze(1), p).squeeze(1) if ctx.needs_input_grad[3] else None
        drc = None
        if ctx.needs_input_grad[2]:  # d rc = sum over the model's layers of ds * s / rc
            ds_s = ds * s
            drc = torch.stack([ds_s[:, t0:t1].sum(1) for t0, t1 in ctx.bounds], 1).div_(rc)
        for j, (t0, t1) in enumerate(ctx.bounds):  # ds -> d(u . x)
            ds[:, t0:t1].mul_(rc[:, j:j + 1])
        du = torch.bmm(ds, X) if ctx.needs_input_grad[0] else None
        dX = torch.bmm(ds.transpose(1, 2), u) if ctx.needs_input_grad[1] else None
        return du, dX, drc, dy, None


class _LinearTriangle(torch.autograd.Function):
    """The row recursion of `AttentionPack.linear_forward` for G models of B contexts: from the
    rows h_{k,0} (H0, G x B x L x d), layer l + 1 (l = 0..L-1) computes R = h_{.,l} B_{l+1} for the
    K = L - l rows of the triangle, returns its row 0 (r_l = h_{0,l} B_{l+1}, the readout's) and
    updates h_{k,l+1} = h_{k,l} + (R_k + s_k R_{k+1}) Sn for k < K - 1, with Sn = -S/L per context
    (G B x d x d) and the basis scales s (G x 1 x L-1 x 1); neither takes a gradient. Output
    G x B x L x d. `keep`: save the triangle for the backward (grad mode; in evaluation it is
    dropped layer by layer). Written out so that the backward is the adjoint recursion on two
    buffers per layer: autograd's backward of the row slices zero-fills, copies and accumulates a
    full-size gradient per slice (1.2-1.35x slower at L = 16-64)."""

    @staticmethod
    def forward(ctx, H0_GxBxLxd, Bm_GxLxdxd, Sn_GBxdxd, s_Gx1xLx1, keep: bool):
        G, B, L, d = H0_GxBxLxd.shape
        dt = H0_GxBxLxd.dtype  # (under autocast: the dtype the rows were made in, as before)
        Bm, Sn, s = Bm_GxLxdxd.to(dt), Sn_GBxdxd.to(dt), s_Gx1xLx1.to(dt)
        rows = H0_GxBxLxd.new_empty(G, B, L, d)
        H, Hs = H0_GxBxLxd, []
        with torch.autocast(H.device.type, enabled=False):
            for l in range(L):
                K = L - l
                if keep:
                    Hs.append(H)
                # every row of every context of a model times its B_{l+1}: one matmul per model
                R = torch.bmm(H.view(G, B * K, d), Bm[:, l]).view(G, B, K, d)
                rows[:, :, l] = R[:, :, 0]
                if K > 1:  # the rows combined, then G B small (K-1 x d)(d x d) products
                    Q = torch.addcmul(R[:, :, :K - 1], s[:, :, :K - 1], R[:, :, 1:])
                    H = torch.baddbmm(H[:, :, :K - 1].reshape(G * B, K - 1, d), Q.view(G * B, K - 1, d),
                                      Sn).view(G, B, K - 1, d)
        ctx.save_for_backward(Bm_GxLxdxd, Sn, s, *Hs)
        return rows

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, drows_GxBxLxd):
        Bm0, Sn, s, *Hs = ctx.saved_tensors
        G, B, L, d = drows_GxBxLxd.shape
        dt = drows_GxBxLxd.dtype
        Bm, SnT, s = Bm0.to(dt), Sn.to(dt).transpose(1, 2), s.to(dt)
        dB = torch.empty(G, L, d, d, dtype=dt, device=Bm.device)
        dH = None  # gradient of h_{., l+1}
        for l in range(L - 1, -1, -1):
            K = L - l
            H = Hs[l].to(dt)
            dR = H.new_empty(G, B, K, d)
            if dH is None:
                dR.zero_()
            else:  # R_k feeds Q_k and, times s_{k-1}, Q_{k-1}
                dQ = torch.bmm(dH.view(G * B, K - 1, d), SnT).view(G, B, K - 1, d)
                dR[:, :, 0].zero_()
                torch.mul(dQ, s[:, :, :K - 1], out=dR[:, :, 1:])
                dR[:, :, :K - 1] += dQ
            dR[:, :, 0] += drows_GxBxLxd[:, :, l]
            dB[:, l] = torch.bmm(H.view(G, B * K, d).transpose(1, 2), dR.view(G, B * K, d))
            dHl = torch.bmm(dR.view(G, B * K, d), Bm[:, l].transpose(1, 2)).view(G, B, K, d)
            if dH is not None:
                dHl[:, :, :K - 1] += dH
            dH = dHl
        return dH, dB, None, None, None


@dataclass
class ModelOutput:
    y_hat_B: torch.Tensor
    f_BxL: torch.Tensor
    p_BxLxP: torch.Tensor | None  # test-row attention over the context (None for `linear`)
    extras: dict | None = None  # e.g. context_updates: A1_BxPxP (layer 1 context attention)


def init_model_params(kind: str, d: int, N: int, L: int, qk_std: float, seed: int,
                      qk_init: str = "independent", wx_init: str = "gaussian",
                      gain_init: str = "random", spread: tuple = (7.0, 30.0, 0.5), gd_step: float = 0.5) -> dict:
    """One model's parameters, drawn on the CPU from its own seed: identical whether the model is
    trained alone or inside a pack, on any device."""
    g = torch.Generator().manual_seed(int(seed) * 7 + 3)
    r = lambda *shape: torch.randn(*shape, generator=g)  # noqa: E731
    p = {
        "Wx": r(N, d) / d**0.5,  # "orthogonal": replaced below by orthonormal columns (N >= d)
        "Wy": r(N),
        "Wo": r(N) / N**0.5,
    }
    if kind == "layer_values":
        p["Wv"] = r(L, N, N) / N**0.5
    else:
        p["Wv"] = r(N, N) / N**0.5
    p["Wq"] = r(L, N, N) * qk_std
    if wx_init == "orthogonal":  # RMS-normed W_x x is then sqrt(N) x/|x|: scores see cosines
        Q, R = torch.linalg.qr(p["Wx"])
        p["Wx"] = Q * torch.sign(torch.diagonal(R)).unsqueeze(0)
    if gain_init == "positive":
        # The data are symmetric under x -> -x, so a model can also learn to attend to the most
        # *anti*-aligned tokens and flip the sign through g = W_o W_v W_y < 0: a mirror basin that is
        # much worse on the easy task (cos = -0.5 at best instead of +1). Start in the aligned one.
        gain = torch.einsum("n,...nk,k->...", p["Wo"], p["Wv"], p["Wy"]).mean()
        if gain < 0:
            p["Wo"] = -p["Wo"]
    # "tied": W_k^l starts equal to W_q^l (then trained freely), so each layer's score matrix
    # W_q^T W_k starts as a small random positive semi-definite metric, a different one per layer
    p["Wk"] = p["Wq"].clone() if qk_init == "tied" else r(L, N, N) * qk_std
    if qk_init == "spread":
        base = spread_metric_factors(p["Wx"], L, *spread, g)
        p["Wq"], p["Wk"] = base + p["Wq"], base + p["Wk"]
    if qk_init == "gd":  # linear model: layer l starts as one in-context gradient-descent step
        p.update(gd_start(p["Wy"], L, N, gd_step, qk_std, g))
    if kind == "context_updates":
        p["m"] = torch.zeros(())
    return p


def gd_start(Wy_N: torch.Tensor, L: int, N: int, step: float, noise: float, g: torch.Generator) -> dict:
    """The linear model's gradient-descent start (qk_init = gd): W_q = W_k = sqrt(step L N) I, so
    B_l = W_x^T W_k^T W_q W_x / N = step L I (orthonormal W_x), W_v = I and W_o = W_y / |W_y|^2
    (W_o . W_y = 1), each plus `noise` times a standard Gaussian. Then (SPEC §3.2)
    G_l = G_{l-1} (I - step S): L steps of in-context gradient descent of size `step` on the
    least-squares loss of the context, y_hat = beta^T (I - (I - step S)^L) x_test — the shared-step
    (constrained) residual polynomial of SPEC §6.2 at gamma = step L. Training starts from there."""
    r = lambda *shape: torch.randn(*shape, generator=g)  # noqa: E731
    s = math.sqrt(step * L * N)
    eye = torch.eye(N)
    return {"Wq": s * eye.expand(L, N, N) + noise * r(L, N, N), "Wk": s * eye.expand(L, N, N) + noise * r(L, N, N),
            "Wv": eye + noise * r(N, N), "Wo": Wy_N / Wy_N.pow(2).sum()}


def spread_metric_factors(Wx_Nxd: torch.Tensor, L: int, tau_min: float, tau_max: float, sigma: float,
                          g: torch.Generator) -> torch.Tensor:
    """Per-layer factors F_l (N x N) with W_x^T F_l^T F_l W_x = (tau_l / N) R_l D_l R_l^T: layer l
    starts as a head of cosine temperature tau_l (geometric over [tau_min, tau_max]; the geometric
    mean at L = 1) whose metric has a random orientation R_l (Haar) and log-normal eigenvalues D_l
    (log-std sigma, mean 1). W_x must have orthonormal columns: RMS-normed W_x x is sqrt(N) x/|x|,
    so the score s_i = N x_hat_test^T E_l x_hat_i is tau_l times a (distorted) cosine."""
    N, d = Wx_Nxd.shape
    if L == 1:
        taus = torch.tensor([math.sqrt(tau_min * tau_max)])
    else:
        taus = tau_min * (tau_max / tau_min) ** (torch.arange(L, dtype=torch.float64) / (L - 1))
    out = torch.zeros(L, N, N)
    for l in range(L):
        Q, Rr = torch.linalg.qr(torch.randn(d, d, generator=g))
        R = Q * torch.sign(torch.diagonal(Rr)).unsqueeze(0)
        D = torch.exp(sigma * torch.randn(d, generator=g))
        D = D / D.mean()
        # F = sqrt(tau/N) [ (W_x R D^1/2)^T ; 0 ]: F^T F = (tau/N) W_x R D R^T W_x^T
        out[l, :d] = math.sqrt(float(taus[l]) / N) * (Wx_Nxd @ R * D.sqrt().unsqueeze(0)).T
    return out


class AttentionPack(nn.Module):
    """M models of kind `kind` with depths `depths` and init seeds `seeds`.

    Ensemble kinds (nonlinear, layer_values) accept mixed depths; the cascaded kinds
    (linear, single_stream, context_updates) need one depth for the whole pack.
    """

    def __init__(self, kind: str, d: int, N: int, depths: list[int], seeds: list[int],
                 qk_std: float = 0.02, qk_init: str = "independent", wx_init: str = "gaussian",
                 gain_init: str = "random", spread: tuple = (7.0, 30.0, 0.5), gd_step: float = 0.5,
                 loop: int = 0):
        super().__init__()
        if loop and kind not in LOOP_MODELS:
            raise InputError(f"loop is not implemented for model {kind!r} (only {', '.join(LOOP_MODELS)})")
        if loop and any(L % loop for L in depths):
            raise InputError(f"loop = {loop} must divide every depth, got {sorted(set(depths))}")
        if kind not in MODELS:
            raise InputError(f"model must be one of {', '.join(MODELS)}, got {kind!r}")
        if len(depths) != len(seeds) or not depths:
            raise InputError("depths and seeds must be non-empty lists of equal length")
        if kind not in ENSEMBLE_MODELS and len(set(depths)) != 1:
            raise InputError(f"a {kind} pack needs one depth, got {sorted(set(depths))}")
        self.kind, self.d, self.N = kind, d, N
        self.depths = [int(L) for L in depths]
        self.M = len(depths)
        # weight tying across depth (RunConfig.loop): loop = B >= 1 gives each model B distinct
        # layers, layer l (0-based) using row l % B; loop = 0: one row per layer
        self.loop = int(loop)
        self.rows = [self.loop or L for L in self.depths]  # per-layer parameter rows of each model
        offs = [0]
        for n in self.rows:
            offs.append(offs[-1] + n)
        self.offsets = offs  # rows of model m are offsets[m]:offsets[m+1] of per-layer params
        # a looped model is initialised as its B distinct layers: exactly the untied B-layer model
        per = [init_model_params(kind, d, N, n, qk_std, s, qk_init, wx_init,
                                 gain_init, spread, gd_step) for n, s in zip(self.rows, seeds)]
        self.layer_params = {"Wq", "Wk"} | ({"Wv"} if kind == "layer_values" else set())
        for name in per[0]:
            if name in self.layer_params:
                t = torch.cat([p[name] for p in per], 0)
            else:
                t = torch.stack([p[name] for p in per], 0)
            self.register_parameter(name, nn.Parameter(t))
        owner_T = torch.repeat_interleave(torch.arange(self.M), torch.tensor(self.rows))
        self.register_buffer("owner_T", owner_T, persistent=False)

    # ---- bookkeeping for the optimiser ----
    def row_owner(self, name: str) -> torch.Tensor:
        """Model index of each leading row of parameter `name`."""
        if name in self.layer_params:
            return self.owner_T
        return torch.arange(self.M, device=self.owner_T.device)

    def model_slice(self, name: str, m: int, t: torch.Tensor | None = None) -> torch.Tensor:
        """Model m's rows of parameter `name`, or of `t`, a tensor laid out like it (e.g. the
        optimiser's moments of that parameter)."""
        t = getattr(self, name) if t is None else t
        if name in self.layer_params:
            return t[self.offsets[m]:self.offsets[m + 1]]
        return t[m]

    def state_of(self, m: int) -> dict:
        """Model m's parameters as a plain dict (a single-model pack can load it)."""
        return {n: self.model_slice(n, m).detach().clone() for n, _ in self.named_parameters()}

    def load_model_state(self, m: int, state: dict) -> None:
        with torch.no_grad():
            for n, _ in self.named_parameters():
                self.model_slice(n, m).copy_(state[n])

    # ---- forward ----
    def forward(self, X_BxPxd: torch.Tensor, y_BxP: torch.Tensor, xq_Bxd: torch.Tensor,
                models: list[int] | None = None, X_of=None) -> list[ModelOutput]:
        """Predictions of models `models` (default all) on one batch of contexts.

        `X_of`, if given, maps a model index to its own (X, y, xq) batch (packs whose models were
        seeded differently see different data streams)."""
        ms = list(range(self.M) if models is None else models)
        if self.kind == "linear":  # one batched computation for the whole pack
            return self.linear_forward(ms, [(X_BxPxd, y_BxP, xq_Bxd) if X_of is None else X_of(m) for m in ms])
        out = []
        for m in ms:
            X, y, xq = (X_BxPxd, y_BxP, xq_Bxd) if X_of is None else X_of(m)
            out.append(getattr(self, f"_forward_{self.kind}")(m, X, y, xq))
        return out

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

    def n_params(self, m: int = 0) -> int:
        """Trained scalars of model m (a looped model counts its B distinct layers once)."""
        return sum(self.model_slice(n, m).numel() for n, _ in self.named_parameters())

    def _test_scores(self, m, Hc_hat_BxPxN, hq_hat_BxN):
        """s_{l,i} = (W_q^l h_test)^T (W_k^l h_i) for all layers of model m at once: BxLxP."""
        Wq, Wk = self._qk(m)
        q_BxLxN = torch.einsum("lkn,bn->blk", Wq, hq_hat_BxN)
        a_BxLxN = torch.einsum("blk,lkj->blj", q_BxLxN, Wk)  # W_k^T q
        return torch.bmm(a_BxLxN, Hc_hat_BxPxN.transpose(1, 2))

    def _forward_nonlinear(self, m, X, y, xq):
        # SPEC §3.1 / paper eqs. 9-10 with M(0): the layers are a parallel ensemble, so all L
        # attention rows are computed at once; f_l = g p_l . y with g = W_o W_v W_y.
        f, p = self.ensemble_forward(X, y, xq, [m])
        return ModelOutput(f.mean(1), f, p)

    def groups_of(self, models: list[int], K: int, X_BxPxd: torch.Tensor, need_p: bool = False) -> bool:
        """Whether `ensemble_forward(..., models, groups=K)` can run the K blocks of `models` as
        one computation: the fused path (training, CPU float32, the kernels built; X_BxPxd is one
        block's batch or all), K equal blocks of consecutive models with the same depths and no
        looped tiling."""
        n = len(models)
        if K < 1 or n == 0 or n % K:
            return False
        G = n // K
        if any(b != a + 1 for a, b in zip(models, models[1:])):
            return False
        if any(self.rows[models[j]] != self.rows[models[j % G]] for j in range(n)):
            return False
        if self.loop and any(self.rows[m] != self.depths[m] for m in models):
            return False
        return not need_p and not X_BxPxd.requires_grad and kernels.use_fused(X_BxPxd)

    def ensemble_forward(self, X_BxPxd: torch.Tensor, y_BxP: torch.Tensor, xq_Bxd: torch.Tensor,
                         models: list[int], need_p: bool = True,
                         groups: int = 1) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Per-layer predictors f_BxT and test-row attention p_BxTxP of the ensemble models
        `models` (nonlinear, layer_values), all on one batch, as one computation; T = their layers,
        model by model in the order given (SPEC §3.1). need_p=False (training): p is None, and on
        the CPU in float32 the fused kernel (`kernels.FusedTestRow`) computes the readout without
        the B x T x P scores in memory.

        With h = W_x x and the pre-norm scale r = 1/rms(h) (h_hat = r h), layer l's test-row score
        is s_li = (W_q^l h_hat_test) . (W_k^l h_hat_i) = r_test r_i x_test^T E_l x_i with
        E_l = W_x^T W_q^l^T W_k^l W_x (d x d). Every layer of every model then shares the raw
        inputs, so the batch-sized work is a few large matmuls: the scales (X @ [W_x^1 .. W_x^G]),
        u = x_test @ [E_1 .. E_T] and u X^T (B batches of T x d times d x P).

        groups = K > 1 runs K batches at once (the seed groups of a pack, `groups_of`): `models`
        is K equal blocks of consecutive models with the same depths, the B rows of X, y, x_test
        are K blocks of B / K contexts, and block k's contexts meet only block k's models. T is
        then one block's layers and f_BxT's rows of block k hold block k's models (the fused path
        only: one call of each kernel instead of K, and K times fewer autograd nodes)."""
        if self.kind not in ENSEMBLE_MODELS:
            raise ValueError(f"ensemble_forward needs an ensemble kind, not {self.kind!r}")
        B, P, d = X_BxPxd.shape
        K = int(groups)
        fused = not need_p and not (X_BxPxd.requires_grad or xq_Bxd.requires_grad) and kernels.use_fused(X_BxPxd)
        if K > 1 and (B % K or not fused or not self.groups_of(models, K, X_BxPxd, need_p)):
            raise ValueError(f"ensemble_forward: groups = {K} needs the fused path, {K} equal blocks of contexts "
                             f"and of consecutive models with equal depths and no loop; got B = {B}, models {models}")
        N, G = self.N, len(models) // K
        Bk = B // K
        dev = X_BxPxd.device
        depths = [self.rows[m] for m in models[:G]]  # computed rows (a looped model's B; tiled to L below)
        T = sum(depths)
        contiguous = all(b == a + 1 for a, b in zip(models, models[1:]))
        if contiguous:  # slices are views: no gather, and a cheaper backward
            m0, m1 = models[0], models[-1] + 1
            sel_M = lambda t: t[m0:m1]  # noqa: E731
            sel_T = lambda t: t[self.offsets[m0]:self.offsets[m1]]  # noqa: E731
        else:
            idx_G = torch.tensor(models, device=dev)
            idx_T = torch.cat([torch.arange(self.offsets[m], self.offsets[m + 1]) for m in models]).to(dev)
            sel_M = lambda t: t.index_select(0, idx_G)  # noqa: E731
            sel_T = lambda t: t.index_select(0, idx_T)  # noqa: E731
        local_T = torch.repeat_interleave(torch.arange(G, device=dev), torch.tensor(depths, device=dev))
        # each layer's model among all K G selected (block k's layers belong to models k G ..)
        owner_T = local_T if K == 1 else (local_T + G * torch.arange(K, device=dev).unsqueeze(1)).view(-1)
        Wx_GxNxd = sel_M(self.Wx)
        # pre-norm scales r = 1/rms(W_x x) of every model, context and test tokens; the test token's
        # scale joins the context scales, s_li = (r_test r_i) x_test^T E_l x_i: a B x G x P product
        # instead of a pass over u (B x T x d) forward and two backward; and the layers' forms
        # E_l = (W_q^l W_x)^T (W_k^l W_x)
        if fused:  # scales from M_g = W_x^gT W_x^g (d x d), no B x P x G x N projections; E in one call
            M_Gxdxd = torch.bmm(Wx_GxNxd.transpose(1, 2), Wx_GxNxd)
            rcq_BxGxP = kernels.FusedTestScales.apply(X_BxPxd, xq_Bxd, M_Gxdxd if K == 1 else M_Gxdxd.view(K, G, d, d),
                                                      N, RMS_EPS)
            E_Txdxd = kernels.FusedLayerForms.apply(sel_T(self.Wq), sel_T(self.Wk), Wx_GxNxd, owner_T)
        else:
            WxT_dxGN = Wx_GxNxd.reshape(G * N, d).T
            rc_BxGxP = _RmsScale.apply(X_BxPxd.reshape(B * P, d), WxT_dxGN, N).view(B, P, G).transpose(1, 2)
            rq_BxG = _RmsScale.apply(xq_Bxd, WxT_dxGN, N)
            rcq_BxGxP = rc_BxGxP * rq_BxG.unsqueeze(-1)
            # (a cat of expanded rows: its backward is G small sums, an index_select's is a slow scatter)
            Wx_TxNxd = Wx_GxNxd.expand(T, N, d) if G == 1 else torch.cat(
                [Wx_GxNxd[j].expand(L, N, d) for j, L in enumerate(depths)])
            E_Txdxd = torch.bmm(torch.bmm(sel_T(self.Wq), Wx_TxNxd).transpose(1, 2),
                                torch.bmm(sel_T(self.Wk), Wx_TxNxd))
        if K == 1:
            u_BxTxd = (xq_Bxd @ E_Txdxd.transpose(0, 1).reshape(d, T * d)).view(B, T, d)
        else:  # block k: its contexts' test tokens times its layers' forms
            u_BxTxd = torch.bmm(xq_Bxd.view(K, Bk, d), E_Txdxd.view(K, T, d, d).transpose(1, 2).reshape(K, d, T * d))
            u_BxTxd = u_BxTxd.view(B, T, d)
        bounds, t0 = [], 0
        for L in depths:
            bounds.append((t0, t0 + L))
            t0 += L
        if fused:
            py_BxT, p_BxTxP = kernels.FusedTestRow.apply(u_BxTxd, X_BxPxd, rcq_BxGxP, y_BxP, local_T), None
        else:
            py_BxT, p_BxTxP = _TestRowReadout.apply(u_BxTxd, X_BxPxd, rcq_BxGxP, y_BxP, bounds)
        # gains g = W_o W_v W_y, per model (shared W_v) or per layer (layer_values)
        Wo, Wy = sel_M(self.Wo), sel_M(self.Wy)
        if self.kind == "layer_values":
            Wo, Wy = Wo.index_select(0, owner_T), Wy.index_select(0, owner_T)
            Wv = sel_T(self.Wv)
        else:
            Wv = sel_M(self.Wv)
        g = torch.bmm(torch.bmm(Wo.unsqueeze(1), Wv), Wy.unsqueeze(-1)).view(-1)
        g_T = g if self.kind == "layer_values" or G * K == 1 else g.index_select(0, owner_T)
        f_BxT = py_BxT * g_T if K == 1 else (py_BxT.view(K, Bk, T) * g_T.view(K, 1, T)).view(B, T)
        if self.loop and any(self.rows[m] != self.depths[m] for m in models):
            # looped models: layer l is row l % B, so f and p of the L layers are the B rows tiled
            fs, ps = [], []
            for j, (m, (t0, t1)) in enumerate(zip(models, bounds)):
                fs.append(self._tile(m, f_BxT[:, t0:t1]))
                if p_BxTxP is not None:
                    ps.append(self._tile(m, p_BxTxP[:, t0:t1]))
            f_BxT, p_BxTxP = torch.cat(fs, 1), (torch.cat(ps, 1) if ps else None)
        return f_BxT, p_BxTxP

    _forward_layer_values = _forward_nonlinear

    def _forward_linear(self, m, X, y, xq):
        return self.linear_forward([m], [(X, y, xq)])[0]

    def linear_forward(self, models: list[int], data: list[tuple]) -> list[ModelOutput]:
        """SPEC §3.2 for the models `models` (one depth) as one computation; model models[g] reads
        the batch data[g] = (X_BxPxd, y_BxP, xq_Bxd). Batches passed as the same tensor objects
        (models that share a seed and a spectrum) are reduced once.

        The cheapest exact association: the context label states are Z_l = F_l U, so the model only
        ever needs G_l = Z_l U^T / P = F_l S (N x d), computed from the context alone:
        G_0 = W_y (U y / P)^T, G_l = G_{l-1} - (1/L) W_v G_{l-1} B_l S, with S = U U^T / P and
        B_l = W_x^T W_k^T W_q W_x / N. The test row (mask +1) reads z_l - z_{l-1} =
        (1/L) W_v G_{l-1} B_l x_test, so f_l = L d_l = w^T G_{l-1} B_l x_test with w^T = W_o W_v
        (z_0 = 0).

        Only the scalars f_l are read, so G is never formed: it is read through the rows u_k^T
        (N-vectors) of a Krylov basis of W_v from w, as the d-vectors h_{k,j} = u_k^T G_j. With
        u_0 = w and u_{k+1}^T = u_k^T (W_v - I) / s_k (any constants s_k > 0), u_k^T W_v =
        u_k^T + s_k u_{k+1}^T and the recursion on G becomes
            h_{k,0} = (u_k . W_y) c,   h_{k,j} = h_{k,j-1} - (1/L) (h_{k,j-1} + s_k h_{k+1,j-1}) B_j S,
            f_l = (h_{0,l-1} B_l) . x_test,
        where f_1..f_L need h_{k,j} for k <= L-1-j only: a triangle of L(L+1)/2 rows per context
        (`_LinearTriangle`). Per context 2 L^2 d^2 FLOPs, whatever N, against (L-1)(2dN^2 + 2d^3 +
        2d^2N) for the recursion on G (6(L-1)d^3 at N = d): fewer while L < 3d - 1, which holds at
        every preset (L/3d <= 2/3; docs/performance.md). Every layer is two batched matmuls over all
        G models: the pack costs L small steps, not G x L.
        The basis is centred at I and normalised (s_k = |u_k^T (W_v - I)| / |u_k|) for float
        rounding: with the plain powers u_k^T = w^T W_v^k (W_v ~ I) the rows are nearly equal and
        their independent rounding errors grow like (1 + |B S|/L)^L where G's decay like
        (1 - |B S|/L)^L (1e17 relative at the gd start, L = 64); centred, they grow like the
        recursion on G itself (same float32 error against float64, docs/performance.md)."""
        if self.kind != "linear":
            raise ValueError(f"linear_forward needs a linear pack, not {self.kind!r}")
        G, N = len(models), self.N
        L = self.depths[models[0]]
        if any(self.depths[m] != L for m in models):
            raise ValueError("linear_forward needs models of one depth")
        # the distinct batches, reduced once each: S = U U^T / P, c = U y / P
        slot, uniq = [], {}
        for X, y, xq in data:
            slot.append(uniq.setdefault(id(X), (len(uniq), X, y, xq))[0])
        Xs = [u[1] for u in uniq.values()]
        X_KxBxPxd = torch.stack(Xs) if len(Xs) > 1 else Xs[0].unsqueeze(0)
        K, B, P, d = X_KxBxPxd.shape
        y_KxBxP = torch.stack([u[2] for u in uniq.values()])
        xq_KxBxd = torch.stack([u[3] for u in uniq.values()])
        S_KxBxdxd = torch.matmul(X_KxBxPxd.transpose(-1, -2), X_KxBxPxd) / P
        c_KxBxd = torch.einsum("kbpd,kbp->kbd", X_KxBxPxd, y_KxBxP) / P
        if K == G and slot == list(range(G)):
            S_GxBxdxd, c_GxBxd, xq_GxBxd = S_KxBxdxd, c_KxBxd, xq_KxBxd
        else:
            sl = torch.tensor(slot, device=X_KxBxPxd.device)
            S_GxBxdxd, c_GxBxd, xq_GxBxd = S_KxBxdxd[sl], c_KxBxd[sl], xq_KxBxd[sl]
        idx_G = torch.tensor(models, device=self.Wx.device)
        Wx_GxNxd, Wv_GxNxN = self.Wx.index_select(0, idx_G), self.Wv.index_select(0, idx_G)
        Wo_GxN, Wy_GxN = self.Wo.index_select(0, idx_G), self.Wy.index_select(0, idx_G)
        rows = torch.cat([torch.arange(self.offsets[m], self.offsets[m + 1]) for m in models]).to(idx_G.device)
        Wq_GxLxNxN = self.Wq.index_select(0, rows).view(G, L, N, N)
        Wk_GxLxNxN = self.Wk.index_select(0, rows).view(G, L, N, N)
        # B_l = (W_k W_x)^T (W_q W_x) / N for every layer of every model
        Bm_GxLxdxd = torch.matmul(torch.matmul(Wk_GxLxNxN, Wx_GxNxd.unsqueeze(1)).transpose(-1, -2),
                                  torch.matmul(Wq_GxLxNxN, Wx_GxNxd.unsqueeze(1))) / N
        # the basis u_0 = (W_o W_v)^T, u_{k+1} = (W_v - I)^T u_k / s_k, s_k = |(W_v - I)^T u_k| / |u_k|
        # (a constant: any s_k > 0 gives the same f, so it takes no gradient), and h_{k,0} = (u_k . W_y) c
        E_GxNxN = Wv_GxNxN - torch.eye(N, dtype=Wv_GxNxN.dtype, device=Wv_GxNxN.device)
        u = [torch.bmm(Wo_GxN.unsqueeze(1), Wv_GxNxN)]  # G x 1 x N rows
        s = []
        for k in range(L - 1):
            t = torch.bmm(u[-1], E_GxNxN)
            with torch.no_grad():
                norm = lambda v: torch.linalg.vector_norm(v, dim=-1, keepdim=True)  # noqa: E731
                sk = norm(t) / norm(u[-1])
                sk = torch.where(sk > 0, sk, torch.ones_like(sk))  # (W_v = I: the rows k >= 1 are 0)
            u.append(t / sk)
            s.append(sk)
        a_GxL = torch.bmm(torch.cat(u, 1), Wy_GxN.unsqueeze(-1)).view(G, L)
        s_Gx1xLx1 = torch.cat(s, 1).view(G, 1, L - 1, 1) if L > 1 else a_GxL.new_ones(G, 1, 0, 1).detach()
        # the triangle from the rows h_{k,0} of every context (G x B x L x d): its readout rows
        # h_{0,l} B_{l+1}, then f_{l+1} = h_{0,l} B_{l+1} x_test
        H0_GxBxLxd = a_GxL.view(G, 1, L, 1) * c_GxBxd.unsqueeze(2)
        Sn_GBxdxd = (S_GxBxdxd / -L).reshape(G * B, d, d)
        rows_GxBxLxd = _LinearTriangle.apply(H0_GxBxLxd, Bm_GxLxdxd, Sn_GBxdxd, s_Gx1xLx1, torch.is_grad_enabled())
        f_GxBxL = (rows_GxBxLxd * xq_GxBxd.unsqueeze(2)).sum(-1)
        return [ModelOutput(f_GxBxL[g].mean(1), f_GxBxL[g], None) for g in range(G)]

    def _forward_single_stream(self, m, X, y, xq):
        # SPEC §3.3: one stream H = W_x X + W_y y_in; context tokens stay fixed under M(0), the test
        # token's state is cascaded through the layers.
        L = self.depths[m]
        Wx, Wy, Wv, Wo = self.Wx[m], self.Wy[m], self.Wv[m], self.Wo[m]
        Wq, Wk = self._qk(m)
        Hc = X @ Wx.T + y.unsqueeze(-1) * Wy
        Hc_hat = rms_norm(Hc)
        V_BxPxN = Hc @ Wv.T
        h = xq @ Wx.T  # test label input is 0
        z_prev = h @ Wo
        z0 = z_prev
        fs, ps = [], []
        B = self.rows[m]  # looped: layer l uses row l % B
        for l in range(L):
            q = rms_norm(h) @ Wq[l % B].T
            a = q @ Wk[l % B]  # W_k^T q
            p = torch.softmax(torch.einsum("bpn,bn->bp", Hc_hat, a), dim=-1)
            h = h + torch.einsum("bp,bpn->bn", p, V_BxPxN) / L
            z = h @ Wo
            fs.append(z0 + L * (z - z_prev))
            ps.append(p)
            z_prev = z
        f = torch.stack(fs, 1)
        return ModelOutput(z_prev, f, torch.stack(ps, 1))

    def _forward_context_updates(self, m, X, y, xq):
        # SPEC §3.3: mask M(m) — context tokens attend (softmax) to all context tokens with weight
        # m, one trainable scalar shared by all layers; the test row as in M(0).
        L, N = self.depths[m], self.N
        Wx, Wv, Wo, mm = self.Wx[m], self.Wv[m], self.Wo[m], self.m[m]
        Wq, Wk = self._qk(m)
        Hc_hat = rms_norm(X @ Wx.T)
        hq_hat = rms_norm(xq @ Wx.T)
        # BxLxP (a looped model's B rows of test scores, tiled to its L layers)
        p_all = self._tile(m, torch.softmax(self._test_scores(m, Hc_hat, hq_hat), dim=-1))
        B = self.rows[m]  # looped: layer l uses row l % B
        Z = y.unsqueeze(-1) * self.Wy[m]  # BxPxN context label states
        fs, A1, As = [], None, []
        for l in range(L):
            V = Z @ Wv.T
            fs.append(torch.einsum("bp,bpn,n->b", p_all[:, l], V, Wo))  # f_l = L d_l
            if l < B:  # the context attention reads the fixed inputs only: a looped model's B
                # distinct matrices are computed once and reused by every repeat
                Qc, Kc = Hc_hat @ Wq[l].T, Hc_hat @ Wk[l].T
                As.append(torch.softmax(torch.bmm(Qc, Kc.transpose(1, 2)), dim=-1))  # BxPxP, row i over j
            A = As[l % B]
            if l == 0:
                A1 = A
            Z = Z + mm * torch.bmm(A, V) / L
        f = torch.stack(fs, 1)
        return ModelOutput(f.mean(1), f, p_all, {"A1_BxPxP": A1})


def build_pack(cfgs: list) -> AttentionPack:
    """A pack for RunConfigs that share a pack key (same kind, d, N, init)."""
    c0 = cfgs[0]
    if c0.model == "transformer":  # a standard pre-LN Transformer behind the same interface
        from depthscale.transformer import TransformerPack

        return TransformerPack(cfgs)
    return AttentionPack(c0.model, c0.d, c0.N, [c.L for c in cfgs], [c.seed for c in cfgs], c0.qk_std,
                         c0.qk_init, c0.wx_init, c0.gain_init, (c0.tau_min, c0.tau_max, c0.metric_sigma), c0.gd_step,
                         c0.loop)


__all__ = ["AttentionPack", "ModelOutput", "build_pack", "rms_norm", "init_model_params"]
