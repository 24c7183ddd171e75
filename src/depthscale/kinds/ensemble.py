"""The ensemble kinds (SPEC §3.1, §3.3): the controlled nonlinear model and its per-layer-values variant.

Under the mask M(0) only the test token's label state changes and every layer reads the fixed
inputs, so the layers form a parallel ensemble: y_hat = (1/L) sum_l f_l, f_l = g_l p_l . y with
p_l layer l's test-row attention and g_l = W_o W_v W_y (W_v^l for LayerValues). All layers of all
models of a pack are computed at once (`ensemble_forward`); tests/test_models.py checks that this
equals the layer-by-layer recursion. Models of different depths pack together.
"""

from __future__ import annotations

from typing import Callable

import torch

from depthscale.config.kind_registry import register_kind
from depthscale.data import kernels
from depthscale.data.contexts import joined
from depthscale.kinds.attention import AttentionStack
from depthscale.kinds.base import RMS_EPS, ModelOutput
from depthscale.kinds.ops import RmsScale, RowReadout, SegmentMean


def fused_scale_flops(B: int, P: int, G: int, d: int) -> int:
    """FLOPs of the fused scales over B(P + 1) tokens and G models, each way: forward
    x^T M x = sum_l x_l sum_{k <= l} M'_kl x_k (d(d+1)/2 + d multiply-adds), backward the upper
    triangle of d M = sum c x x^T and c x (d(d+1)/2 + d). The kernel's d = 16 path does this
    (its backward at vector granularity: 24 of 32 half-rows, a little more); other d take the
    full d^2 form, for which this count is a lower bound."""
    return 2 * B * (P + 1) * G * (d * (d + 1) // 2 + d)


@register_kind
class Nonlinear(AttentionStack):
    """The controlled nonlinear model (SPEC §3.1, the paper's main model): two streams, pre-norm on
    the input stream, per-layer W_q, W_k, one shared W_v, 1/L residual branches, mask M(0)."""

    kind = "nonlinear"
    geometry = "softmax"
    loopable = True
    packs_across_depth = True
    label_linear = True
    special_starts = ("constructive",)
    fused_cpu_kernels = True
    exact_label_weights = True

    @classmethod
    def validate(cls, cfg) -> None:
        """No fields of its own: config.validate checks the shared ones."""

    @classmethod
    def activation_floats(cls, cfg) -> tuple[int, int]:
        # per layer: scores and probabilities over P with their gradients; per model: y_hat and the scales
        return 4 * cfg.P + 3 * cfg.d, 2 * cfg.P

    @classmethod
    def flops_per_step(cls, d: int, N: int, P: int, B: int, groups: list[list[int]], fused: bool = False) -> dict:
        """Matmul FLOPs of one packed training step (forward and backward), counted for the
        algorithm `ensemble_forward` executes; `groups` lists the depths of the models that share
        one batch. Elementwise work (norms, softmax, Adam) and data sampling are not counted.

        Per group of G models with T layers in all (each multiply-add is 2 FLOPs):
          scales       X W_x^T, x_test W_x^T        fwd 2BPdGN + 2BdGN   bwd the same (dW_x only)
          E_l          (W_q W_x)^T (W_k W_x)        fwd 4TN^2d + 2Td^2N  bwd twice that (all params)
          u, scores    x_test E, u X^T              fwd 2BTd^2 + 2BTdP   bwd the same (no input grads)
          readout      p . y                        fwd 2BTP             bwd elementwise
          gains        W_o W_v W_y                  fwd 2G'N^2 + 2G'N    bwd twice that (G' = T with
                                                                         per-layer values, else G)
        `fused` (`kernels`): the test row's backward recomputes the scores (2BTdP more), and the scales
        are x^T M_g x with M_g = W_x^T W_x from M's folded upper triangle (`fused_scale_flops`) plus
        2GNd^2 forward, 4GNd^2 backward for M.
        """
        fwd = bwd = 0
        for depths in groups:
            G, T = len(depths), sum(depths)
            Gv = T if cls.per_layer_values else G
            scales = 2 * B * P * d * G * N + 2 * B * d * G * N
            scales_bwd = scales
            if fused:  # x^T M_g x for every token and model, M_g = W_x^T W_x; d M_g = sum c x x^T
                M = 2 * G * N * d * d
                scales, scales_bwd = fused_scale_flops(B, P, G, d) + M, fused_scale_flops(B, P, G, d) + 2 * M
            E = 4 * T * N * N * d + 2 * T * d * d * N
            scores = 2 * B * T * d * d + 2 * B * T * d * P
            gains = 2 * Gv * N * N + 2 * Gv * N
            fwd += scales + E + scores + 2 * B * T * P + gains
            bwd += scales_bwd + 2 * E + scores + 2 * gains + (2 * B * T * d * P if fused else 0)
        return {"forward": fwd, "backward": bwd, "total": fwd + bwd}

    def forward_model(self, m, X, y, xq, need_p: bool = True):
        # SPEC §3.1 / paper eqs. 9-10 with M(0): the layers are a parallel ensemble, so all L
        # attention rows are computed at once; f_l = g p_l . y with g = W_o W_v W_y.
        f, p = self.ensemble_forward(X, y, xq, [m], need_p=need_p)
        return ModelOutput(f.mean(1), f, p)

    def monitor_forward(self, models: list[int], X_of: Callable, need_p: bool) -> list[ModelOutput]:
        """Without the attention rows (need_p False: every monitor set but k = 1's), the fused test-row
        kernel where it runs, as in training: issue 50, the unfused readout that writes the B x L x P
        rows was half of the monitor's time. The same losses to float32 rounding (a test)."""
        if need_p or type(self).forward_model is not Nonlinear.forward_model:  # (a subclass's own forward stands)
            return super().monitor_forward(models, X_of, need_p)
        return [self.forward_model(m, *X_of(m), need_p=False) for m in models]

    def label_weights(self, m: int, out) -> torch.Tensor | None:
        """y_hat = (1/L) sum_l g_l p_l . y (`ensemble_forward`: p_l does not depend on the labels), so
        w = (1/L) sum_l g_l p_l exactly, from the forward's attention rows and the layers' gains: no
        backward pass (issue 50: the evaluation's input weights cost a forward, not a forward and a
        backward). None for a looped model whose rows are tiled (the backward says it there)."""
        p = out.p_BxLxP
        if p is None or self.rows[m] != self.depths[m] or p.shape[1] != self.depths[m]:
            return None
        dev = p.device
        sel_M, sel_T = self._selectors([m], dev)
        _, owner_T = self._layer_owners((self.rows[m],), 1, dev)
        g = self._layer_gains(sel_M, sel_T, owner_T, 1).detach()  # (1,) shared W_v, (L,) per-layer values
        return (p * g.to(p.dtype).view(1, -1, 1)).mean(1)

    def train_losses(self, models: list[int], batch_of: Callable) -> torch.Tensor:
        """Every model that shares a batch runs as one computation (`ensemble_forward`), and the
        batches of equal blocks of models (the seeds of a sweep) as one call where `groups_of`
        allows; the loss of each model in `models`, in that order."""
        by_batch: dict[int, list[int]] = {}  # the models by the batch they share, in order of first appearance
        ctx_of: dict[int, object] = {}
        for i in models:
            c = batch_of(i)
            by_batch.setdefault(id(c), []).append(i)
            ctx_of.setdefault(id(c), c)
        ctxs = [ctx_of[key] for key in by_batch]
        blocks = list(by_batch.values())
        flat = [i for ms in blocks for i in ms]
        K = len(blocks)
        order, parts = [], []
        if K > 1 and len({c.B for c in ctxs}) == 1 and self.groups_of(flat, K, ctxs[0].X_BxPxd):
            # every batch's models in one call (equal blocks: the seeds of a sweep): K times fewer ops
            X, y, xq, ystar = (joined([getattr(c, n) for c in ctxs])  # (views where drawn as one)
                               for n in ("X_BxPxd", "y_BxP", "xq_Bxd", "ystar_B"))
            runs = [(X, y, xq, ystar, flat, K)]
        else:
            runs = [(c.X_BxPxd, c.y_BxP, c.xq_Bxd, c.ystar_B, ms, 1) for c, ms in zip(ctxs, blocks)]
        for X, y, xq, ystar, ms, k in runs:
            f_BxT, _ = self.ensemble_forward(X, y, xq, ms, need_p=False, groups=k)
            f_KxBxT = f_BxT.view(k, -1, f_BxT.shape[1])
            # y_hat = mean of each model's f_l, slice by slice: nothing here mixes models, so a model
            # whose loss is NaN (masked by the trainer) cannot leak NaN into another model's gradient
            # (SegmentMean: one node, not a slice and a mean per model, whose backwards filled zero
            # K x B x T tensors and then summed them)
            sizes = [self.depths[i] for i in ms[:len(ms) // k]]
            yhat_KxBxG = SegmentMean.apply(f_KxBxT, sizes, self._layer_owners(tuple(sizes), 1, f_KxBxT.device)[0])
            parts.append((yhat_KxBxG - ystar.view(k, -1, 1)).pow(2).mean(1).view(-1))
            order += ms
        losses = torch.cat(parts)
        if order != list(models):
            pos = {i: j for j, i in enumerate(order)}
            losses = losses[torch.tensor([pos[i] for i in models], device=losses.device)]
        return losses

    def _layer_gains(self, sel_M, sel_T, owner_T: torch.Tensor, n_models: int) -> torch.Tensor:
        """g_T = W_o W_v W_y of each selected layer's model (one shared W_v per model)."""
        Wo, Wy, Wv = sel_M(self.Wo), sel_M(self.Wy), sel_M(self.Wv)
        g = torch.bmm(torch.bmm(Wo.unsqueeze(1), Wv), Wy.unsqueeze(-1)).view(-1)
        return g if n_models == 1 else g.index_select(0, owner_T)

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
        B, P, d = X_BxPxd.shape
        K = int(groups)
        fused = not need_p and not (X_BxPxd.requires_grad or xq_Bxd.requires_grad) and kernels.use_fused(X_BxPxd)
        if K > 1 and (B % K or not fused or not self.groups_of(models, K, X_BxPxd, need_p)):
            raise ValueError(f"ensemble_forward: groups = {K} needs the fused path, {K} equal blocks of contexts "
                             f"and of consecutive models with equal depths and no loop; got B = {B}, models {models}")
        Bk = B // K
        depths, sel_M, sel_T, local_T, owner_T, rcq_BxGxP, u_BxTxd = self._row_inputs(X_BxPxd, xq_Bxd, models, fused,
                                                                                     K)
        G, T = len(depths), sum(depths)
        bounds, t0 = [], 0
        for L in depths:
            bounds.append((t0, t0 + L))
            t0 += L
        if fused:
            py_BxT, p_BxTxP = kernels.FusedTestRow.apply(u_BxTxd, X_BxPxd, rcq_BxGxP, y_BxP, local_T), None
        else:
            py_BxT, p_BxTxP = RowReadout.apply(u_BxTxd, X_BxPxd, rcq_BxGxP, y_BxP, bounds)
        g_T = self._layer_gains(sel_M, sel_T, owner_T, G * K)
        f_BxT = py_BxT * g_T if K == 1 else (py_BxT.view(K, Bk, T) * g_T.view(K, 1, T)).view(B, T)
        if self.loop and any(self.rows[m] != self.depths[m] for m in models):
            f_BxT, p_BxTxP = self._tile_looped(models, bounds, f_BxT, p_BxTxP)
        return f_BxT, p_BxTxP

    def _row_inputs(self, X_BxPxd: torch.Tensor, xq_Bxd: torch.Tensor, models: list[int], fused: bool, K: int):
        """What the test rows of `models` read (`ensemble_forward`, `measure_forward`): (depths: each of
        one block's models' computed rows, sel_M, sel_T, local_T, owner_T, rcq_BxGxP, u_BxTxd)."""
        B, P, d = X_BxPxd.shape
        G = len(models) // K
        dev = X_BxPxd.device
        depths = [self.rows[m] for m in models[:G]]  # computed rows (a looped model's B; tiled to L by the caller)
        T = sum(depths)
        sel_M, sel_T = self._selectors(models, dev)
        local_T, owner_T = self._layer_owners(tuple(depths), K, dev)
        rcq_BxGxP, E_Txdxd = self._scales_and_forms(X_BxPxd, xq_Bxd, sel_M(self.Wx), sel_T, owner_T, depths,
                                                     fused, K)
        if fused:  # the same sums in the same order as the products below (csrc/forms.cpp)
            u_BxTxd = kernels.FusedForms.apply(xq_Bxd, E_Txdxd.view(K, T, d, d))
        elif K == 1:
            u_BxTxd = (xq_Bxd @ E_Txdxd.transpose(0, 1).reshape(d, T * d)).view(B, T, d)
        else:  # block k: its contexts' test tokens times its layers' forms
            u_BxTxd = torch.bmm(xq_Bxd.view(K, B // K, d),
                                E_Txdxd.view(K, T, d, d).transpose(1, 2).reshape(K, d, T * d)).view(B, T, d)
        return depths, sel_M, sel_T, local_T, owner_T, rcq_BxGxP, u_BxTxd

    @torch.no_grad()
    def measure_forward(self, models: list[int], X_BxPxd: torch.Tensor, y_BxP: torch.Tensor, xq_Bxd: torch.Tensor,
                        mean_row: bool, weights: bool) -> list[ModelOutput] | None:
        """All `models` on one batch as one fused computation (issue 50: the evaluation's forward had
        run model by model through the unfused readout that writes the B x L x P rows, six times the
        training forward's cost a context). The rows are read only through their layer sums
        (`kernels.test_row_sums`): the mean row (1/L) sum_l p_l and the input weights
        w = (1/L) sum_l g_l p_l (`label_weights`' formula, summed in the kernel). f, y_hat equal
        `forward_model`'s fused path bit for bit; the sums agree with the rows' to float32 rounding
        (tests). None off the CPU float32 path, for a looped model whose rows are tiled, and for a
        subclass with its own forward_model."""
        if (type(self).forward_model is not Nonlinear.forward_model or not kernels.use_fused(X_BxPxd)
                or any(self.rows[m] != self.depths[m] for m in models)):
            return None
        depths, sel_M, sel_T, local_T, owner_T, rcq_BxGxP, u_BxTxd = self._row_inputs(X_BxPxd, xq_Bxd, models, True, 1)
        g_T = self._layer_gains(sel_M, sel_T, owner_T, len(models))
        inv_L_T = (1.0 / torch.tensor(depths, dtype=g_T.dtype, device=g_T.device)).index_select(0, local_T)
        coef = ([inv_L_T] if mean_row else []) + ([g_T * inv_L_T] if weights else [])
        if coef:
            py_BxT, S_BxCxGxP = kernels.test_row_sums(u_BxTxd, X_BxPxd, rcq_BxGxP, y_BxP, local_T, torch.stack(coef))
        else:
            py_BxT, S_BxCxGxP = kernels.FusedTestRow.apply(u_BxTxd, X_BxPxd, rcq_BxGxP, y_BxP, local_T), None
        f_BxT = py_BxT * g_T
        outs, t0 = [], 0
        for j, L in enumerate(depths):
            f = f_BxT[:, t0:t0 + L]
            t0 += L
            sums = iter(S_BxCxGxP[:, :, j].unbind(1)) if coef else iter(())
            outs.append(ModelOutput(f.mean(1), f, None, p_mean_BxP=next(sums) if mean_row else None,
                                    w_BxP=next(sums) if weights else None))
        return outs

    def _layer_owners(self, depths: tuple, K: int, dev: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """(local_T, owner_T) of `ensemble_forward`: each of one block's layers' model among the block's
        G, and each layer's model among all K G selected (block k's layers belong to models k G ..).
        The same every step of a pack: made once per (depths, K, device)."""
        key = (depths, K, str(dev))
        cache = self.__dict__.setdefault("_owners", {})
        if key not in cache:
            G = len(depths)
            local_T = torch.repeat_interleave(torch.arange(G, device=dev), torch.tensor(depths, device=dev))
            owner_T = local_T if K == 1 else (local_T + G * torch.arange(K, device=dev).unsqueeze(1)).view(-1)
            cache[key] = (local_T, owner_T)
        return cache[key]

    def _selectors(self, models: list[int], dev: torch.device) -> tuple[Callable, Callable]:
        """(sel_M, sel_T): functions taking the rows of `models`, in their order, from a per-model
        parameter (M, ...) and from a per-layer one (all models' layer rows, ...). Consecutive models
        are slices (views: no gather, and a cheaper backward), others an index_select."""
        if all(b == a + 1 for a, b in zip(models, models[1:])):
            m0, m1 = models[0], models[-1] + 1
            if m0 == 0 and m1 == self.M:  # every model (a whole pack): the parameters themselves
                return (lambda t: t), (lambda t: t)  # (a full slice's backward copies into zeros)
            return (lambda t: t[m0:m1]), (lambda t: t[self.offsets[m0]:self.offsets[m1]])
        idx_G = torch.tensor(models, device=dev)
        idx_T = torch.cat([torch.arange(self.offsets[m], self.offsets[m + 1]) for m in models]).to(dev)
        return (lambda t: t.index_select(0, idx_G)), (lambda t: t.index_select(0, idx_T))

    def _scales_and_forms(self, X_BxPxd: torch.Tensor, xq_Bxd: torch.Tensor, Wx_GxNxd: torch.Tensor,
                          sel_T: Callable, owner_T: torch.Tensor, depths: list[int], fused: bool,
                          K: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(rcq_BxGxP, E_Txdxd) of `ensemble_forward`: the pre-norm scales r = 1/rms(W_x x) of the G
        models' W_x (Wx_GxNxd) on every context and test token, the test token's joined to the
        context scales (s_li = (r_test r_i) x_test^T E_l x_i: a B x G x P product instead of a pass
        over u (B x T x d) forward and two backward), and the layers' forms
        E_l = (W_q^l W_x)^T (W_k^l W_x) of the T = sum(depths) selected layers (sel_T, owner_T:
        each layer's model). `fused`: the CPU kernels, K blocks as in `ensemble_forward`."""
        B, P, d = X_BxPxd.shape
        G, N = len(depths), self.N
        if fused:  # scales from M_g = W_x^gT W_x^g (d x d), no B x P x G x N projections; E in one call
            M_Gxdxd = torch.bmm(Wx_GxNxd.transpose(1, 2), Wx_GxNxd)
            rcq_BxGxP = kernels.FusedTestScales.apply(X_BxPxd, xq_Bxd, M_Gxdxd if K == 1 else M_Gxdxd.view(K, G, d, d),
                                                      N, RMS_EPS)
            E_Txdxd = kernels.FusedLayerForms.apply(sel_T(self.Wq), sel_T(self.Wk), Wx_GxNxd, owner_T)
            return rcq_BxGxP, E_Txdxd
        WxT_dxGN = Wx_GxNxd.reshape(G * N, d).T
        rc_BxGxP = RmsScale.apply(X_BxPxd.reshape(B * P, d), WxT_dxGN, N).view(B, P, G).transpose(1, 2)
        rq_BxG = RmsScale.apply(xq_Bxd, WxT_dxGN, N)
        rcq_BxGxP = rc_BxGxP * rq_BxG.unsqueeze(-1)
        # (a cat of expanded rows: its backward is G small sums, an index_select's is a slow scatter)
        Wx_TxNxd = Wx_GxNxd.expand(sum(depths), N, d) if G == 1 else torch.cat(
            [Wx_GxNxd[j].expand(L, N, d) for j, L in enumerate(depths)])
        E_Txdxd = torch.bmm(torch.bmm(sel_T(self.Wq), Wx_TxNxd).transpose(1, 2),
                            torch.bmm(sel_T(self.Wk), Wx_TxNxd))
        return rcq_BxGxP, E_Txdxd

    def _tile_looped(self, models: list[int], bounds: list[tuple[int, int]], f_BxT: torch.Tensor,
                     p_BxTxP: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """f and p of looped models over all their L layers: layer l is computed row l % B, so each
        model's B computed columns (`bounds`: its columns of f_BxT, p_BxTxP) are tiled to L."""
        fs, ps = [], []
        for m, (t0, t1) in zip(models, bounds):
            fs.append(self._tile(m, f_BxT[:, t0:t1]))
            if p_BxTxP is not None:
                ps.append(self._tile(m, p_BxTxP[:, t0:t1]))
        return torch.cat(fs, 1), (torch.cat(ps, 1) if ps else None)


@register_kind
class LayerValues(Nonlinear):
    """SPEC §3.3 `layer_values`: the controlled nonlinear model with W_v^l per layer, so
    f_l = g_l p_l . y with g_l = W_o W_v^l W_y (every other fact and estimate is Nonlinear's)."""

    kind = "layer_values"
    per_layer_values = True
    special_starts = ()  # the constructive start needs one shared W_v

    def _layer_gains(self, sel_M, sel_T, owner_T: torch.Tensor, n_models: int) -> torch.Tensor:
        """g_l = W_o W_v^l W_y of each selected layer."""
        Wo, Wy = sel_M(self.Wo).index_select(0, owner_T), sel_M(self.Wy).index_select(0, owner_T)
        Wv = sel_T(self.Wv)
        return torch.bmm(torch.bmm(Wo.unsqueeze(1), Wv), Wy.unsqueeze(-1)).view(-1)


__all__ = ["Nonlinear", "LayerValues", "fused_scale_flops"]
