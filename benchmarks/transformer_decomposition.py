"""Does R_L = C_L + (A_L - C_L)/L hold, and how do A_L, C_L, R_L scale, in a standard pre-LN
Transformer trained on the difficult task (issue 16, item 3; docs/decompose.md)?

    python benchmarks/transformer_decomposition.py [--depths 1,2,4,8,16] [--steps 1000] [--D 32]
        [--name transformer_decomposition]

Trains one Transformer per depth (depthscale.transformer: d = 16, P = 64, k = 2, (a, b) = (0, 0)
by default, the cpu preset's nonlinear geometry; every depth sees the same training stream and the
same evaluation contexts), decomposes each with depthscale.decompose and writes
benchmarks/results/NAME.json: per depth R_L (+- SE), A_L, C_L, A_L - C_L, the identity's residual,
training curve and time; the fit R_L = L0 + c L^-alpha (depthscale.fits) where it converges.
One thread: run it with `nice` on a shared machine.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from depthscale import versions
from depthscale.atomic import write_json_atomic
from depthscale.transformer import TransformerConfig, train_transformer

OUT = Path(__file__).parent / "results"


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--depths", default="1,2,4,8,16")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--D", type=int, default=32)
    ap.add_argument("--H", type=int, default=4)
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
    base = TransformerConfig(a=args.a, b=args.b, D=args.D, H=args.H, lr=args.lr, batch=args.batch,
                             max_steps=args.steps, eval_contexts=args.eval, seed=args.seed)
    out = {"what": "pre-LN Transformer on the difficult task: R_L = C_L + (A_L - C_L)/L (docs/decompose.md)",
           "config": base.to_dict(), "depths": depths, "rows": [], **versions(("torch",)),
           "threads": args.threads}
    path = OUT / f"{args.name}.json"
    t0 = time.perf_counter()
    for L in depths:
        _, met = train_transformer(base.replace(L=L), log_every=max(1, args.steps // 20))
        out["rows"].append(met)
        print(f"L={L:3d}  R={met['R']:.4f} +- {met['R_se']:.4f}  A={met['A']:.4f}  C={met['C']:.4f}  "
              f"identity residual={met['identity_residual']:.2e}  ({met['train_seconds']:.0f} s)", flush=True)
        out["wall_seconds"] = time.perf_counter() - t0
        write_json_atomic(path, out)  # after every depth: a partial run still leaves its rows
    rows = out["rows"]
    if len(rows) >= 3:
        from depthscale.fits import fit_dict

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
