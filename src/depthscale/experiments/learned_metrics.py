"""The learned metrics of a trained stack's layers beside the best cosine stack's (issue 48 item 4).

A layer of the controlled nonlinear model attends with softmax over x̂_iᵀ W_xᵀ W_qᵀ W_k W_x x̂_test
(SPEC §3). Its metric here is the symmetric part of N W_xᵀ W_qᵀ W_k W_x (d x d): for a cosine head
at temperature τ (the constructive setting: W_qᵀ W_k = (τ/N) I, W_x with orthonormal columns) it is
τ I, every eigenvalue τ. A learned layer's eigenvalues say how far it is from a cosine head: their
mean is the temperature it acts at on average, their spread (std over the d directions, relative
to the mean's size) how anisotropic its metric is — 0 for every head of a cosine stack.

`layer_metrics` reads one model's parameters; `summarise` puts a trained model's layers beside the
cosine stack of its depth (kinds.constructive.constructive_stack: the stack the constructive start
begins at, fitted on the run's monitor contexts); `figure` draws a series of depths. Descriptive: no
claim is judged on these numbers.
"""

from __future__ import annotations

import math

import numpy as np

from depthscale.analysis import plotting as pl


def layer_metrics(params: dict) -> list[dict]:
    """Per layer of one model (params: name -> array, W_q and W_k of L x N x N or N x N, W_x of N x d
    or 1 x N x d): the eigenvalues (ascending) of sym(N W_xᵀ W_qᵀ W_k W_x), their mean, their std
    and the relative spread std / |mean| (nan where the mean is 0)."""
    p = {k: np.asarray(v, dtype=np.float64) for k, v in params.items() if k in ("Wq", "Wk", "Wx")}
    missing = {"Wq", "Wk", "Wx"} - set(p)
    if missing:
        raise ValueError(f"the parameters have no {', '.join(sorted(missing))}: not an attention stack with W_x")
    Wx = p["Wx"][0] if p["Wx"].ndim == 3 else p["Wx"]
    N = Wx.shape[0]
    out = []
    for q, k in zip(p["Wq"].reshape(-1, N, N), p["Wk"].reshape(-1, N, N)):
        M = N * Wx.T @ q.T @ k @ Wx
        ev = np.linalg.eigvalsh((M + M.T) / 2)
        mean, std = float(ev.mean()), float(ev.std())
        out.append({"eigenvalues": ev.tolist(), "mean": mean, "std": std,
                    "spread": std / abs(mean) if mean != 0 else math.nan})
    return out


def summarise(layers: list[dict], stack_temperatures) -> dict:
    """One trained model's layers beside the cosine stack of its depth: the layers' mean eigenvalues
    (sorted) and the stack's temperatures (sorted), the spread of each across layers (std), the
    layers' median within-layer spread (the stack's is 0), and the number of distinct temperatures
    in the stack."""
    means = np.sort([float(x["mean"]) for x in layers])
    taus = np.sort(np.asarray(stack_temperatures, dtype=np.float64))
    if means.size != taus.size:
        raise ValueError(f"{means.size} layers beside a stack of {taus.size} heads")
    return {"L": int(means.size), "layer_means": means.tolist(), "stack_temperatures": taus.tolist(),
            "layers_std": float(means.std()), "stack_std": float(taus.std()),
            "within_spread_median": float(np.median([x["spread"] for x in layers])),
            "stack_distinct": int(np.unique(taus).size)}


def figure(rows: list[dict], title: str):
    """(a) per depth, each layer's mean eigenvalue (dots) beside the cosine stack's temperatures
    (crosses); (b) each layer's within-layer spread std/|mean| of its eigenvalues (0 for a cosine
    head). `rows`: {"L", "seed", "layers" (layer_metrics), "stack_temperatures"} per trained model."""
    fig, (ax, bx) = pl.new_figure(2, 1, width=5.0, height=4.0)
    for r in rows:
        L = int(r["L"])
        jitter = 1 + 0.04 * (int(r.get("seed", 0)) - 1)
        ax.plot(np.full(len(r["layers"]), L * jitter), [x["mean"] for x in r["layers"]], "o", ms=3.5,
                color="C0", alpha=0.6, label="trained layers' mean eigenvalue" if r is rows[0] else None)
        ax.plot(np.full(len(r["stack_temperatures"]), L / jitter), r["stack_temperatures"], "x", ms=5,
                color="C3", label="cosine stack's temperatures" if r is rows[0] else None)
        bx.plot(np.full(len(r["layers"]), L * jitter), [x["spread"] for x in r["layers"]], "o", ms=3.5,
                color="C0", alpha=0.6)
    for a in (ax, bx):
        a.set_xscale("log", base=2)
        a.set_xlabel("depth $L$ (log axis)")
    ax.set_ylabel("temperature: mean eigenvalue of $N W_x^T W_q^T W_k W_x$")
    bx.set_ylabel("within-layer spread: std / |mean| of its eigenvalues")
    ax.set_title("(a) layer temperatures", fontsize=9)
    bx.set_title("(b) anisotropy of each layer's metric (cosine head: 0)", fontsize=9)
    bx.set_ylim(bottom=0)  # the cosine head's 0 in view
    ax.legend(fontsize=7, loc="best")
    fig.suptitle(title, fontsize=9)
    return fig


__all__ = ["layer_metrics", "summarise", "figure"]
