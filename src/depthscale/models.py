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

from dataclasses import dataclass

import torch
from torch import nn

from depthscale.config import ENSEMBLE_MODELS, MODELS

RMS_EPS = 1e-6


def rms_norm(h: torch.Tensor) -> torch.Tensor:
    """Per-token RMS normalisation (pre-norm of SPEC §3.1), no learned gain."""
    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + RMS_EPS)


@dataclass
class ModelOutput:
    y_hat_B: torch.Tensor
    f_BxL: torch.Tensor
    p_BxLxP: torch.Tensor | None  # test-row attention over the context (None for `linear`)
    extras: dict | None = None  # e.g. context_updates: A1_BxPxP (layer 1 context attention)


def _init_model_params(kind: str, d: int, N: int, L: int, init_qk: float, seed: int) -> dict:
    """One model's parameters, drawn on the CPU from its own seed: identical whether the model is
    trained alone or inside a pack, on any device."""
    g = torch.Generator().manual_seed(int(seed) * 7 + 3)
    r = lambda *shape: torch.randn(*shape, generator=g)  # noqa: E731
    p = {
        "Wx": r(N, d) / d**0.5,
        "Wy": r(N),
        "Wo": r(N) / N**0.5,
    }
    if kind == "layer_values":
        p["Wv"] = r(L, N, N) / N**0.5
    else:
        p["Wv"] = r(N, N) / N**0.5
    p["Wq"] = r(L, N, N) * init_qk
    p["Wk"] = r(L, N, N) * init_qk
    if kind == "context_updates":
        p["m"] = torch.zeros(())
    return p


class AttentionPack(nn.Module):
    """M models of kind `kind` with depths `depths` and init seeds `seeds`.

    Ensemble kinds (nonlinear, layer_values) accept mixed depths; the cascaded kinds
    (linear, single_stream, context_updates) need one depth for the whole pack.
    """

    def __init__(self, kind: str, d: int, N: int, depths: list[int], seeds: list[int],
                 init_qk: float = 0.02):
        super().__init__()
        if kind not in MODELS:
            raise ValueError(f"model must be one of {', '.join(MODELS)}, got {kind!r}")
        if len(depths) != len(seeds) or not depths:
            raise ValueError("depths and seeds must be non-empty lists of equal length")
        if kind not in ENSEMBLE_MODELS and len(set(depths)) != 1:
            raise ValueError(f"a {kind} pack needs one depth, got {sorted(set(depths))}")
        self.kind, self.d, self.N = kind, d, N
        self.depths = [int(L) for L in depths]
        self.M = len(depths)
        offs = [0]
        for L in self.depths:
            offs.append(offs[-1] + L)
        self.offsets = offs  # layers of model m are rows offsets[m]:offsets[m+1] of per-layer params
        per = [_init_model_params(kind, d, N, L, init_qk, s) for L, s in zip(self.depths, seeds)]
        self.layer_params = {"Wq", "Wk"} | ({"Wv"} if kind == "layer_values" else set())
        for name in per[0]:
            if name in self.layer_params:
                t = torch.cat([p[name] for p in per], 0)
            else:
                t = torch.stack([p[name] for p in per], 0)
            self.register_parameter(name, nn.Parameter(t))
        owner_T = torch.repeat_interleave(torch.arange(self.M), torch.tensor(self.depths))
        self.register_buffer("owner_T", owner_T, persistent=False)

    # ---- bookkeeping for the optimiser ----
    def row_owner(self, name: str) -> torch.Tensor:
        """Model index of each leading row of parameter `name`."""
        if name in self.layer_params:
            return self.owner_T
        return torch.arange(self.M, device=self.owner_T.device)

    def model_slice(self, name: str, m: int) -> torch.Tensor:
        t = getattr(self, name)
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
        out = []
        for m in (range(self.M) if models is None else models):
            X, y, xq = (X_BxPxd, y_BxP, xq_Bxd) if X_of is None else X_of(m)
            out.append(getattr(self, f"_forward_{self.kind}")(m, X, y, xq))
        return out

    def _qk(self, m: int):
        return self.model_slice("Wq", m), self.model_slice("Wk", m)

    def _test_scores(self, m, Hc_hat_BxPxN, hq_hat_BxN):
        """s_{l,i} = (W_q^l h_test)^T (W_k^l h_i) for all layers of model m at once: BxLxP."""
        Wq, Wk = self._qk(m)
        q_BxLxN = torch.einsum("lkn,bn->blk", Wq, hq_hat_BxN)
        a_BxLxN = torch.einsum("blk,lkj->blj", q_BxLxN, Wk)  # W_k^T q
        return torch.bmm(a_BxLxN, Hc_hat_BxPxN.transpose(1, 2))

    def _forward_nonlinear(self, m, X, y, xq):
        # SPEC §3.1 / paper eqs. 9-10 with M(0): the layers are a parallel ensemble, so all L
        # attention rows are computed at once; f_l = g p_l . y with g = W_o W_v W_y.
        Wx = self.Wx[m]
        Hc_hat = rms_norm(X @ Wx.T)
        hq_hat = rms_norm(xq @ Wx.T)
        p = torch.softmax(self._test_scores(m, Hc_hat, hq_hat), dim=-1)  # BxLxP
        py_BxL = torch.einsum("blp,bp->bl", p, y)
        if self.kind == "layer_values":
            g_L = torch.einsum("n,lnk,k->l", self.Wo[m], self.model_slice("Wv", m), self.Wy[m])
        else:
            g_L = (self.Wo[m] @ self.Wv[m] @ self.Wy[m]).reshape(1)
        f = py_BxL * g_L
        return ModelOutput(f.mean(1), f, p)

    _forward_layer_values = _forward_nonlinear

    def _forward_linear(self, m, X, y, xq):
        # SPEC §3.2, token form with the cheap association: Z U^T (NxD) -> B_l -> U.
        P = X.shape[1]
        L, N = self.depths[m], self.N
        Wx, Wv, Wo = self.Wx[m], self.Wv[m], self.Wo[m]
        Wq, Wk = self._qk(m)
        Bmat_Lxdxd = torch.einsum("nd,lkn,lkj,je->lde", Wx, Wk, Wq, Wx) / N  # W_x^T W_k^T W_q W_x / N
        Z_BxNxP = self.Wy[m].view(1, N, 1) * y.unsqueeze(1)  # context label states
        fs = []
        for l in range(L):
            G_BxNxd = torch.bmm(Z_BxNxP, X) / P  # F S (times P: Z U^T / P)
            VGB_BxNxd = torch.einsum("nk,bkd,de->bne", Wv, G_BxNxd, Bmat_Lxdxd[l])  # W_v F S B_l
            dzq_BxN = torch.einsum("bnd,bd->bn", VGB_BxNxd, xq) / L  # test row: mask +1
            fs.append(L * (dzq_BxN @ Wo))  # f_l = z_0 + L d_l, z_0 = 0
            Z_BxNxP = Z_BxNxP - torch.bmm(VGB_BxNxd, X.transpose(1, 2)) / L  # context rows: mask -1
        f = torch.stack(fs, 1)
        return ModelOutput(f.mean(1), f, None)

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
        for l in range(L):
            q = rms_norm(h) @ Wq[l].T
            a = q @ Wk[l]  # W_k^T q
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
        p_all = torch.softmax(self._test_scores(m, Hc_hat, hq_hat), dim=-1)  # BxLxP
        Z = y.unsqueeze(-1) * self.Wy[m]  # BxPxN context label states
        fs, A1 = [], None
        for l in range(L):
            V = Z @ Wv.T
            fs.append(torch.einsum("bp,bpn,n->b", p_all[:, l], V, Wo))  # f_l = L d_l
            Qc, Kc = Hc_hat @ Wq[l].T, Hc_hat @ Wk[l].T
            A = torch.softmax(torch.bmm(Qc, Kc.transpose(1, 2)), dim=-1)  # BxPxP, row i over j
            if l == 0:
                A1 = A
            Z = Z + mm * torch.bmm(A, V) / L
        f = torch.stack(fs, 1)
        return ModelOutput(f.mean(1), f, p_all, {"A1_BxPxP": A1})


def build_pack(cfgs: list) -> AttentionPack:
    """A pack for RunConfigs that share a pack key (same kind, d, N, init)."""
    c0 = cfgs[0]
    return AttentionPack(c0.model, c0.d, c0.N, [c.L for c in cfgs], [c.seed for c in cfgs], c0.init_qk)


__all__ = ["AttentionPack", "ModelOutput", "build_pack", "rms_norm"]
