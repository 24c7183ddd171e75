"""The controlled linear model (SPEC §3.2): linear attention A = (1/(P N)) M (Q^T K) with the
Bordelon et al. mask, no pre-norm; context label states change from layer to layer.

The whole pack is one computation (`linear_forward`), whatever each model's spectrum and seed:
linear packs mix spectra (`packs_across_spectra`), but need one depth.
"""

from __future__ import annotations

import torch

from depthscale.config.kind_registry import register_kind
from depthscale.kinds.attention import AttentionStack
from depthscale.kinds.base import ModelOutput
from depthscale.kinds.ops import LinearTriangle


@register_kind
class Linear(AttentionStack):
    """SPEC §3.2, computed from (U, y) only (the model is never handed beta)."""

    kind = "linear"
    geometry = "linear"
    loopable = False
    packs_across_depth = False
    label_linear = True
    special_starts = ("gd",)
    packs_across_spectra = True
    layer_cost = 5.0

    @classmethod
    def validate(cls, cfg) -> None:
        """No fields of its own: config.validate checks the shared ones."""

    @classmethod
    def activation_floats(cls, cfg) -> tuple[int, int]:
        # per layer: the N x d label state; per model: S (d x d) and one N x d state
        return 4 * cfg.N * cfg.d, cfg.d * cfg.d + cfg.N * cfg.d

    def forward(self, X_BxPxd, y_BxP, xq_Bxd, models: list[int] | None = None, X_of=None) -> list[ModelOutput]:
        """Predictions of models `models` (default all), as one batched computation for the pack;
        `X_of(m)`, if given, is model m's own batch."""
        ms = list(range(self.M) if models is None else models)
        return self.linear_forward(ms, [(X_BxPxd, y_BxP, xq_Bxd) if X_of is None else X_of(m) for m in ms])

    def forward_model(self, m, X, y, xq):
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
        (`LinearTriangle`). Per context 2 L^2 d^2 FLOPs, whatever N, against (L-1)(2dN^2 + 2d^3 +
        2d^2N) for the recursion on G (6(L-1)d^3 at N = d): fewer while L < 3d - 1, which holds at
        every preset (L/3d <= 2/3; docs/performance.md). Every layer is two batched matmuls over all
        G models: the pack costs L small steps, not G x L.
        The basis is centred at I and normalised (s_k = |u_k^T (W_v - I)| / |u_k|) for float
        rounding: with the plain powers u_k^T = w^T W_v^k (W_v ~ I) the rows are nearly equal and
        their independent rounding errors grow like (1 + |B S|/L)^L where G's decay like
        (1 - |B S|/L)^L (1e17 relative at the gd start, L = 64); centred, they grow like the
        recursion on G itself (same float32 error against float64, docs/performance.md)."""
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
        rows_GxBxLxd = LinearTriangle.apply(H0_GxBxLxd, Bm_GxLxdxd, Sn_GBxdxd, s_Gx1xLx1, torch.is_grad_enabled())
        f_GxBxL = (rows_GxBxLxd * xq_GxBxd.unsqueeze(2)).sum(-1)
        return [ModelOutput(f_GxBxL[g].mean(1), f_GxBxL[g], None) for g in range(G)]


__all__ = ["Linear"]
