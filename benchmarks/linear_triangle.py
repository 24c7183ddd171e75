"""The linear model's forward on row vectors (issue 15): `AttentionPack.linear_forward` (the
triangle h_{k,j} = u_k^T G_j, `models._LinearTriangle`) against the recursion on the N x d matrices
G_l it replaced (kept here as `linear_forward_old`: HEAD's code, its comments shortened), on the
cpu preset's fig3 packs.

    OMP_WAIT_POLICY=PASSIVE nice -n 5 python benchmarks/linear_triangle.py [--reps 10] [--depths 4 16 32 64]

Prints three tables:
  1. FLOPs per context of both forms at every preset depth (the matrix form never wins there);
  2. CPU time (time.process_time, 1 thread) of one training step's forward + backward
     (`training._pack_losses` + backward, the path `train_step` runs) of the fig3 pack (7 models,
     one per FIG3_SPECTRA, d = N = 32, P = 256, batch 64), old and new interleaved in one process on
     the same batches (median of --reps), with the largest relative differences of the losses and
     of the gradients (per parameter tensor) between the two;
  3. float32 error of both forms against a float64 evaluation of the old one (L = 64: the gd_start
     init, random perturbations of it, W_v far from I, W_v of spectral radius 1.5; `perturbed`).
Takes ~4 minutes on one free core.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
import types

import torch

from depthscale.bench import linear_configs
from depthscale.config import GEOMETRIES, PRESET_DEPTHS
from depthscale.models import ModelOutput, build_pack
from depthscale.training import _pack_losses, step_batches


def linear_forward_old(self, models: list[int], data: list[tuple]) -> list[ModelOutput]:
    """The recursion on G^T (HEAD before this change): per layer G^T W_v^T, S^T B_l^T and the
    batched d x d times d x N product, for every context."""
    G, N = len(models), self.N
    L = self.depths[models[0]]
    if any(self.depths[m] != L for m in models):
        raise ValueError("linear_forward needs models of one depth")
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
    Bm_GxLxdxd = torch.matmul(torch.matmul(Wk_GxLxNxN, Wx_GxNxd.unsqueeze(1)).transpose(-1, -2),
                              torch.matmul(Wq_GxLxNxN, Wx_GxNxd.unsqueeze(1))) / N
    Gt_GxBdxN = (c_GxBxd.unsqueeze(-1) * Wy_GxN.view(G, 1, 1, N)).view(G, B * d, N)
    WvT_GxNxN = Wv_GxNxN.transpose(1, 2)
    St_GxBdxd = S_GxBxdxd.transpose(-1, -2).reshape(G, B * d, d)
    oV_GxNx1 = torch.matmul(Wo_GxN.unsqueeze(1), Wv_GxNxN).view(G, N, 1)
    u_GxLxBxd = torch.matmul(xq_GxBxd.unsqueeze(1), Bm_GxLxdxd.transpose(-1, -2))
    oVG = []
    for l in range(L):
        oVG.append(torch.bmm(Gt_GxBdxN, oV_GxNx1).view(G, B, d))
        if l < L - 1:
            GV_GxBxdxN = torch.bmm(Gt_GxBdxN, WvT_GxNxN).view(G, B, d, N)
            SB_GxBxdxd = torch.bmm(St_GxBdxd, Bm_GxLxdxd[:, l].transpose(-1, -2)).view(G, B, d, d)
            Gt_GxBdxN = Gt_GxBdxN - torch.matmul(SB_GxBxdxd, GV_GxBxdxN).view(G, B * d, N) / L
    f_GxBxL = (torch.stack(oVG, 1) * u_GxLxBxd).sum(-1).transpose(1, 2)
    return [ModelOutput(f_GxBxL[g].mean(1), f_GxBxL[g], None) for g in range(G)]


def flops_old(L: int, d: int, N: int) -> int:
    """Matmul FLOPs per context of the recursion on G (forward): L - 1 layers of G^T W_v^T,
    S^T B_l^T and (S^T B_l^T)(G^T W_v^T), and L readouts G^T (W_o W_v)^T."""
    return (L - 1) * (2 * d * N * N + 2 * d ** 3 + 2 * d * d * N) + L * 2 * d * N


def flops_new(L: int, d: int, N: int) -> int:
    """Matmul FLOPs per context of the triangle (forward): L(L+1)/2 rows times B_l and L(L-1)/2
    rows times S, 2 d^2 each (the basis u_k, per model, is not per context)."""
    return d * d * L * (L + 1) + d * d * L * (L - 1)


def flop_table() -> None:
    print("1. forward FLOPs per context, triangle / matrix recursion (N = d at every preset)")
    print(f"{'preset':>7} {'d':>4} {'N':>4} " + "".join(f"{f'L={L}':>7}" for L in PRESET_DEPTHS["paper"]))
    for preset in ("smoke", "cpu", "paper"):
        g = GEOMETRIES[(preset, "linear")]
        row = [f"{flops_new(L, g['d'], g['N']) / flops_old(L, g['d'], g['N']):.2f}" if L > 1 else "-"
               for L in PRESET_DEPTHS[preset]]
        print(f"{preset:>7} {g['d']:>4} {g['N']:>4} " + "".join(f"{r:>7}" for r in row))
    g = GEOMETRIES[("cpu", "linear")]
    cross = next(L for L in range(2, 10 ** 4) if flops_new(L, g["d"], g["N"]) > flops_old(L, g["d"], g["N"]))
    print(f"   (at d = N = {g['d']} the matrix form needs fewer FLOPs from L = {cross} on, beyond every preset)\n")


def as_double(batches: dict) -> dict:
    return {k: types.SimpleNamespace(X_BxPxd=c.X_BxPxd.double(), y_BxP=c.y_BxP.double(),
                                     xq_Bxd=c.xq_Bxd.double(), ystar_B=c.ystar_B.double())
            for k, c in batches.items()}


def step(pack, cfgs, batches, old: bool):
    """Forward + backward of one training step; returns (losses, grads, CPU seconds)."""
    if old:
        pack.linear_forward = types.MethodType(linear_forward_old, pack)
    pack.zero_grad(set_to_none=True)
    t0 = time.process_time()
    losses = _pack_losses(pack, cfgs, list(range(len(cfgs))), batches)
    losses.sum().backward()
    dt = time.process_time() - t0
    if old:
        del pack.linear_forward
    return losses.detach(), {n: p.grad.clone() for n, p in pack.named_parameters()}, dt


def timing_table(depths, reps: int) -> None:
    print(f"2. CPU time of one training step (forward + backward), fig3 pack of 7 models, cpu preset, "
          f"1 thread, median of {reps}, interleaved")
    print(f"{'L':>4} {'old ms':>9} {'new ms':>9} {'speedup':>8} {'FLOP ratio':>10} "
          f"{'max rel dloss':>14} {'max rel dgrad':>14}")
    for L in depths:
        cfgs = linear_configs("cpu", L)
        pack = build_pack(cfgs)
        c0 = cfgs[0]
        batches = [step_batches(cfgs, list(range(len(cfgs))), s, "cpu") for s in range(3)]
        times = {True: [], False: []}
        dl = dg = 0.0
        for r in range(reps + 1):
            bt = batches[r % len(batches)]
            res = {}
            for old in ((True, False) if r % 2 else (False, True)):
                res[old] = step(pack, cfgs, bt, old)
                if r:  # the first round is a warm-up
                    times[old].append(res[old][2])
            dl = max(dl, ((res[True][0] - res[False][0]).abs() / res[True][0].abs()).max().item())
            dg = max(dg, max(((res[True][1][n] - res[False][1][n]).norm() / res[True][1][n].norm()).item()
                             for n in res[True][1]))
        to, tn = statistics.median(times[True]), statistics.median(times[False])
        print(f"{L:>4} {to * 1e3:>9.1f} {tn * 1e3:>9.1f} {to / tn:>7.2f}x "
              f"{flops_new(L, c0.d, c0.N) / flops_old(L, c0.d, c0.N):>10.2f} {dl:>14.1e} {dg:>14.1e}")
        sys.stdout.flush()
    print()


CASES = ("gd", "perturbed", "I+0.3", "rho1.5", "sym1.5")


def perturbed(pack, case: str, gen: torch.Generator):
    """A copy of `pack` with trained-like parameters: `gd` as initialised (cpu recipe: gd_start,
    noise 0.01); `perturbed`: every parameter moved by 3% of its RMS (W_q, W_k: of their diagonal
    scale) in random directions; the others are that with W_v replaced: `I+0.3` I plus 0.3 times a
    Gaussian matrix over sqrt(N) (|W_v - I| ~ 0.6, far beyond what training moves it), `rho1.5` a
    Gaussian matrix scaled to spectral radius 1.5, `sym1.5` a symmetric one scaled to 1.5 (both
    make the recursion explode: the losses are 1e23 and more times Var(y*))."""
    pk = copy.deepcopy(pack)
    if case == "gd":
        return pk
    with torch.no_grad():
        for name, p in pk.named_parameters():
            for r in range(p.shape[0]):
                scale = p[r].diagonal().abs().mean() if name in ("Wq", "Wk") else p[r].pow(2).mean().sqrt()
                p[r].add_(0.03 * scale * torch.randn(p[r].shape, generator=gen))
        for r in range(pk.Wv.shape[0]):
            R = torch.randn(pk.N, pk.N, generator=gen, dtype=torch.float64)
            if case == "rho1.5":
                pk.Wv[r].copy_(1.5 * R / torch.linalg.eigvals(R).abs().max())
            elif case == "sym1.5":
                R = R + R.T
                pk.Wv[r].copy_(1.5 * R / torch.linalg.eigvalsh(R).abs().max())
            elif case == "I+0.3":
                pk.Wv[r].copy_(torch.eye(pk.N) + 0.3 * R / pk.N ** 0.5)
    return pk


def error_table(L: int, trials: int) -> None:
    print(f"3. float32 error against a float64 evaluation of the old form, fig3 pack, L = {L}, "
          f"{trials} batches x 7 models")
    print(f"{'params':>10} {'loss64/Var(y*)':>19}  {'dloss max':>16} {'dloss median':>16} "
          f"{'dres max':>16} {'dgrad max':>16}")
    print(f"{'':>10} {'':>19}  {'old':>8}{'new':>8} {'old':>8}{'new':>8} {'old':>8}{'new':>8} {'old':>8}{'new':>8}")
    cfgs = linear_configs("cpu", L)
    models = list(range(len(cfgs)))
    base = build_pack(cfgs)
    gen = torch.Generator().manual_seed(0)
    for case in CASES:
        pk = perturbed(base, case, gen)
        pk64 = copy.deepcopy(pk).double()
        dloss = {True: [], False: []}
        dres = {True: 0.0, False: 0.0}
        dgrad = {True: 0.0, False: 0.0}
        lo, hi = float("inf"), 0.0
        for t in range(trials):
            bt = step_batches(cfgs, models, 100 + t, "cpu")
            b64 = as_double(bt)
            l64, g64, _ = step(pk64, cfgs, b64, old=True)
            with torch.no_grad():
                yh64 = [o.y_hat_B for o in linear_forward_old(pk64, models, [
                    (b64[_key(c)].X_BxPxd, b64[_key(c)].y_BxP, b64[_key(c)].xq_Bxd) for c in cfgs])]
            var = torch.stack([b64[_key(c)].ystar_B.var() for c in cfgs])
            lo, hi = min(lo, (l64 / var).min().item()), max(hi, (l64 / var).max().item())
            for old in (True, False):
                l32, g32, _ = step(pk, cfgs, bt, old)
                with torch.no_grad():
                    fwd = linear_forward_old if old else type(pk).linear_forward
                    yh32 = [o.y_hat_B for o in fwd(pk, models, [
                        (bt[_key(c)].X_BxPxd, bt[_key(c)].y_BxP, bt[_key(c)].xq_Bxd) for c in cfgs])]
                dloss[old] += ((l32.double() - l64).abs() / l64).tolist()
                dres[old] = max(dres[old], max(((a.double() - b).norm() / (b - b64[_key(c)].ystar_B).norm()).item()
                                               for a, b, c in zip(yh32, yh64, cfgs)))
                dgrad[old] = max(dgrad[old], max(((g32[n].double() - g64[n]).norm() / g64[n].norm()).item()
                                                 for n in g64))
        cols = [max(dloss[True]), max(dloss[False]), statistics.median(dloss[True]), statistics.median(dloss[False]),
                dres[True], dres[False], dgrad[True], dgrad[False]]
        print(f"{case:>10} {lo:>8.1e} – {hi:>8.1e}  " + "".join(f"{v:>8.1e}" for v in cols))
        sys.stdout.flush()
    print("   dloss: |loss32 - loss64| / loss64 per model and batch; dres: |y_hat32 - y_hat64| / |y_hat64 - y*|\n"
          "   (the error against the residual the loss measures); dgrad: |g32 - g64| / |g64| per parameter tensor")


def _key(c):
    from depthscale.training import data_key
    return data_key(c)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=10, help="timed steps per form and depth")
    ap.add_argument("--depths", type=int, nargs="+", default=[4, 16, 32, 64])
    ap.add_argument("--error-depth", type=int, default=64)
    ap.add_argument("--trials", type=int, default=3, help="batches of the float64 comparison")
    ap.add_argument("--skip", nargs="*", default=[], choices=["flops", "timing", "error"])
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    if "flops" not in args.skip:
        flop_table()
    if "timing" not in args.skip:
        timing_table(args.depths, args.reps)
    if "error" not in args.skip:
        error_table(args.error_depth, args.trials)


if __name__ == "__main__":
    main()
