"""Does R_L = C_L + (A_L - C_L)/L hold, and how do A_L, C_L, R_L scale, in a standard pre-LN
Transformer trained on the difficult task (issue 16, item 3; docs/decompose.md)?

    python studies/transformer_decomposition.py [--depths 1,2,4,8,16] [--steps 1000] [--D 32]
        [--name transformer_decomposition]

Trains one Transformer per depth (a RunConfig with model = "transformer" at the cpu preset: d = 16,
P = 64, k = 2, (a, b) = (0, 0) by default; N the stream width, --heads; every depth sees the same
training stream and the same evaluation contexts) with the package's trainer (training.train_pack:
row-wise Adam, warmup and cosine schedule, monitor curves, keep-best), whose measurement decomposes
each with depthscale.data.decompose, and writes studies/results/NAME.json: per depth R_L (+- SE),
A_L, C_L, A_L - C_L, the identity's residual, monitor curve and time; the fit R_L = L0 + c L^-alpha
(depthscale.theory.fits) where it converges. (Earlier versions trained with a standalone loop, torch's Adam
and no monitor: their result files are not comparable number for number.)
One thread: run it with `nice` on a shared machine.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from depthscale import versions
from depthscale.base.atomic import write_json_atomic
from depthscale.config.run import make_config
from depthscale.train.training import train_pack

OUT = Path(__file__).parent / "results"


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--depths", default="1,2,4,8,16")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--N", "--D", dest="N", type=int, default=32, help="stream width")
    ap.add_argument("--heads", "--H", dest="heads", type=int, default=4)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--eval", type=int, default=4096, help="evaluation contexts")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--a", type=float, default=0.0)
    ap.add_argument("--b", type=float, default=0.0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--name", default="transformer_decomposition")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    depths = [int(x) for x in args.depths.split(",")]
    base = make_config("cpu", model="transformer", a=args.a, b=args.b, N=args.N, heads=args.heads, lr=args.lr,
                       batch=args.batch, max_steps=args.steps, eval_contexts=args.eval, seed=args.seed,
                       eval_every=max(1, args.steps // 20), patience=10 ** 6)
    out = {"what": "pre-LN Transformer on the difficult task: R_L = C_L + (A_L - C_L)/L (docs/decompose.md)",
           "config": base.to_dict(), "depths": depths, "rows": [], **versions(("torch",)),
           "threads": args.threads}
    path = OUT / f"{args.name}.json"
    t0 = time.perf_counter()
    for L in depths:
        curves = {}
        met = train_pack([base.replace(L=L)], progress=False, on_finish=lambda i, m, c: curves.update(c))[0]
        met["curve"] = curves
        out["rows"].append(met)
        print(f"L={L:3d}  R={met['R']:.4f} +- {met['R_se']:.4f}  A={met['A']:.4f}  C={met['C']:.4f}  "
              f"identity residual={met['identity_residual']:.2e}  ({met['train_seconds']:.0f} s)", flush=True)
        out["wall_seconds"] = time.perf_counter() - t0
        write_json_atomic(path, out)  # after every depth: a partial run still leaves its rows
    rows = out["rows"]
    if len(rows) >= 3:
        from depthscale.theory.fits import fit_dict

        try:
            out["fit_R"] = fit_dict([r["L"] for r in rows], [r["R"] for r in rows])
        except Exception as exc:  # a fit that cannot be made is recorded, not fatal
            out["fit_R"] = {"status": f"{type(exc).__name__}: {exc}"}
    out["max_abs_identity_residual"] = max(abs(r["identity_residual"]) for r in rows)
    out["wall_seconds"] = time.perf_counter() - t0
    write_json_atomic(path, out)
    print(f"wrote {path}")
    return out


if __name__ == "__main__":
    main()
