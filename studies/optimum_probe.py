"""Export the optimum probe at L = 1, 2, 4 (issue 48 items 2, 3; depthscale.experiments.optimum_probe).

    depthscale reproduce optimum-probe --preset cpu --store runs/optimum-probe --out report/optimum-probe --executor process
    python studies/optimum_probe.py --store runs/optimum-probe [--out studies/results/optimum_probe]

Writes runs.csv (every start: R_L, final monitor loss, B_L, R_L − B_L ± SE), summary.csv and
probe.md (per depth), probe.png, metrics.json (for each run more than 2 SE below B_L: the learned
metric of each layer, the eigenvalues of the symmetric part of N W_xᵀ W_qᵀ W_k W_x — the cosine
temperatures a cosine stack would have, exact where W_x has orthonormal columns) and
alpha_range.json: convergence.law_alpha_range with R_1 and R_2 the lowest of the probe's and the
(0,0) envelope's (studies/results/convergence) and the envelope's deeper depths as achieved bounds.
"""

from __future__ import annotations

import functools
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
from convergence_redecide import largest_envelope
from study_export import read_args, write_study

from depthscale.base.atomic import write_json_atomic, write_text_atomic
from depthscale.experiments import convergence as cv
from depthscale.experiments import learned_metrics as lm
from depthscale.experiments import optimum_probe as op
from depthscale.store.store import Store

ENVELOPE = Path("studies/results/convergence")


def layer_metrics(store: Store, rid: str) -> list[dict]:
    """Per layer: eigenvalues (ascending) of sym(N W_xᵀ W_qᵀ W_k W_x) and their mean (learned_metrics)."""
    return [{"eigenvalues": np.round(x["eigenvalues"], 4).tolist(), "mean": x["mean"]}
            for x in lm.layer_metrics(store.load_params(rid))]


def export(res, out: Path, store: Store, envelope: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    rows, summ = op.rows(res), op.summary(res)
    paths = [out / "runs.csv", out / "summary.csv", out / "metrics.json", out / "alpha_range.json"]
    write_text_atomic(paths[0], pd.DataFrame(rows).to_csv(index=False))
    write_text_atomic(paths[1], pd.DataFrame(summ).to_csv(index=False))
    write_json_atomic(paths[2], {r["run_id"]: {"L": r["L"], "start": r["start"], "seed": r["seed"],
                                               "R_minus_B": r["R_minus_B"], "se": r["se"],
                                               "layers": layer_metrics(store, r["run_id"])}
                                 for r in rows if r["below_B_2se"]})
    steps, env = largest_envelope(envelope)
    depths, R = [int(L) for L in env["L"]], [float(x) for x in env["R"]]
    best = {s["L"]: s["R_min"] for s in summ}
    pinned = [min(R[i], best.get(L, np.inf)) if L in (1, 2) else R[i] for i, L in enumerate(depths)]
    write_json_atomic(paths[3], {
        "envelope_steps": steps, "depths": depths, "R_envelope": R, "R_probe_min": best, "R_used": pinned,
        "range": cv.law_alpha_range(depths, pinned),
        "note": "R_1, R_2: the lower of the probe's lowest R_L (a minimum over starts: biased low by about its SE) and the "
                "envelope's; every deeper R_L the envelope's (achieved, so an upper bound on the optimum)"})
    return paths


def main() -> None:
    res, out = read_args(__doc__.splitlines()[0], "studies/results/optimum_probe")
    store = res.reader.store
    study = SimpleNamespace(export=functools.partial(export, store=store, envelope=ENVELOPE), figure=op.figure,
                            table_frame=op.table_frame, notes=op.notes)
    paths = write_study(study, res, out, "probe.png", "probe.md")
    print("\n".join(op.notes(res)))
    print("wrote", ", ".join(str(p) for p in paths))


if __name__ == "__main__":
    main()
