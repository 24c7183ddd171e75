"""The single-stream variant (SPEC §3.3, paper Appendix C): one stream H = W_x X + W_y y_in; Q, K, V
all from the previous layer's states (pre-norm for Q, K), mask M(0). The test token's state is
cascaded through the layers, so they are no longer a parallel ensemble, and y_hat is not linear in
the context labels (no input weights, no mode-wise loss)."""

from __future__ import annotations

import torch

from depthscale.config.kind_registry import register_kind
from depthscale.kinds.attention import AttentionStack
from depthscale.kinds.base import ModelOutput, rms_norm


@register_kind
class SingleStream(AttentionStack):
    """SPEC §3.3 `single_stream`; f_l = z_0 + L d_l, the general parallel form."""

    kind = "single_stream"
    geometry = "softmax"
    loopable = True
    packs_across_depth = False
    label_linear = False
    depth_set = "variant"
    layer_cost = 5.0

    @classmethod
    def validate(cls, cfg) -> None:
        """No fields of its own: config.validate checks the shared ones."""

    @classmethod
    def activation_floats(cls, cfg) -> tuple[int, int]:
        # per layer: the test token's attention row and states; per model: the context states
        return 3 * cfg.P + 5 * cfg.N, 3 * cfg.P * cfg.N

    def forward_model(self, m, X, y, xq):
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


__all__ = ["SingleStream"]
