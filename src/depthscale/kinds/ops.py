"""Hand-written autograd functions of the attention forwards (kinds.ensemble, kinds.linear).

Each is written out, forward and backward, where autograd's generic backward would take many more
passes over the large tensors (docs/performance.md); tests/test_kernels.py and tests/test_models.py
check them against autograd and against the literal token form.
"""

from __future__ import annotations

import torch

from depthscale.kinds.base import RMS_EPS


class RmsScale(torch.autograd.Function):
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


class RowReadout(torch.autograd.Function):
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


class LinearTriangle(torch.autograd.Function):
    """The row recursion of `Linear.linear_forward` for G models of B contexts: from the
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


class SegmentMean(torch.autograd.Function):
    """yhat[..., g] = the mean of f[..., t] over segment g of the last axis (the layers of model g;
    `sizes` the segments' lengths, `seg_T` each position's segment). Forward: the per-segment means
    `f.split(sizes, -1)` then `.mean(-1)` would give, the same bits; backward: one division and one
    gather -- the mean's backward (the gradient expanded, divided by the length) without a node per
    segment and a concatenation. Nothing mixes segments (a NaN in one stays in its own)."""

    @staticmethod
    def forward(ctx, f: torch.Tensor, sizes: list[int], seg_T: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(seg_T)
        ctx.sizes = sizes
        return torch.stack([piece.mean(-1) for piece in f.split(sizes, -1)], -1)

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        (seg_T,) = ctx.saved_tensors
        h = g / torch.tensor(ctx.sizes, dtype=g.dtype, device=g.device)
        # (a gather of the same values: index_select along the last axis took 72 us at 3 x 256 x 127)
        return torch.gather(h, -1, seg_T.expand(*h.shape[:-1], seg_T.numel())), None, None


__all__ = ["RmsScale", "RowReadout", "LinearTriangle", "SegmentMean"]
