"""The context-updates variant (SPEC §3.3): the controlled nonlinear model with mask M(m), in which
context tokens attend (softmax) to all context tokens with weight m, one trainable scalar shared by
all layers; the test row as in M(0). Its own measurements (SPEC §5): the learned m, and the mean of
layer 1's context-to-context attention A_1 with its fit A_1 ~ rho I + (1 - rho) 11^T/P."""

from __future__ import annotations

import torch

from depthscale.config.kind_registry import register_kind
from depthscale.data.measurements import rho_fit
from depthscale.kinds.attention import AttentionStack
from depthscale.kinds.base import ModelOutput, rms_norm


@register_kind
class ContextUpdates(AttentionStack):
    """SPEC §3.3 `context_updates`: O(L P^2 N) per context (the P x P context attention)."""

    kind = "context_updates"
    geometry = "softmax"
    loopable = True
    packs_across_depth = False
    label_linear = True
    depth_set = "variant"
    scalar_params = 1  # m
    layer_cost = 48.0
    cost_P_power = 2

    @classmethod
    def init_params(cls, *args, **kwargs) -> dict:
        p = super().init_params(*args, **kwargs)
        p["m"] = torch.zeros(())
        return p

    @classmethod
    def activation_floats(cls, cfg) -> tuple[int, int]:
        # per layer: the P x P context attention; per model: the context states
        return 2 * cfg.P * cfg.P + 3 * cfg.P * cfg.N, 3 * cfg.P * cfg.N

    @classmethod
    def validate(cls, cfg) -> None:
        """No fields of its own: config.validate checks the shared ones."""

    def extra_measurements(self, m: int, extras: dict) -> dict:
        """The learned m; the mean A_1 over the evaluation contexts (its top-left 64 x 64 block when
        P > 64) and rho, R^2 of its fit (SPEC §5)."""
        res = {"m": float(self.m[m].item())}
        A1 = extras["A1_BxPxP"].cpu().numpy()
        res["A1_mean"] = A1.tolist() if A1.shape[0] <= 64 else A1[:64, :64].tolist()
        res.update(rho_fit(A1))
        return res

    def _test_scores(self, m, Hc_hat_BxPxN, hq_hat_BxN):
        """s_{l,i} = (W_q^l h_test)^T (W_k^l h_i) for all layers of model m at once: BxLxP."""
        Wq, Wk = self._qk(m)
        q_BxLxN = torch.einsum("lkn,bn->blk", Wq, hq_hat_BxN)
        a_BxLxN = torch.einsum("blk,lkj->blj", q_BxLxN, Wk)  # W_k^T q
        return torch.bmm(a_BxLxN, Hc_hat_BxPxN.transpose(1, 2))

    def forward_model(self, m, X, y, xq):
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


__all__ = ["ContextUpdates"]
