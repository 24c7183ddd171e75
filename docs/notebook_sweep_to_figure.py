# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # From a sweep to a paper-style figure
#
# A notebook in jupytext's percent format: plain Python, one cell per `# %%` line. Open it in
# Jupyter with jupytext, in VS Code or PyCharm (they read `# %%` cells), or run it whole:
# `python docs/notebook_sweep_to_figure.py` (`tests/test_plots.py` does, at the smoke preset).
#
# It goes from a grid of runs to the paper's kind of figure, loss R_L against depth L on log-log
# axes with the fitted law R_L = L0 + c L^-alpha (SPEC §6.1), through the public API only:
# `depthscale.runs.sweeps` (expand a grid, run it), `depthscale.store.store.Store` (read it back),
# `depthscale.theory.fits` (the fit) and `depthscale.cli.plots` (training curves).
#
# The settings are the smoke preset's (d = 8, P = 16) and 60 steps: they prove the pipeline in
# well under a minute, **not the science**. For results use `PRESET = "cpu"` (or "paper" on GPUs)
# and drop `TINY`.

# %%
import os
import tempfile
from pathlib import Path

import numpy as np

from depthscale.runs.sweeps import expand_grid, plan, run_sweep
from depthscale.store import collect
from depthscale.store.store import Store
from depthscale.theory.fits import fit_power_law

PRESET = os.environ.get("DEPTHSCALE_NOTEBOOK_PRESET", "smoke")
OUT = Path(os.environ.get("DEPTHSCALE_NOTEBOOK_OUT") or tempfile.mkdtemp(prefix="depthscale-notebook-"))
OUT.mkdir(parents=True, exist_ok=True)
TINY = dict(max_steps=60, eval_every=10, checkpoint_every=20, eval_contexts=256, monitor_contexts=128)
print(f"preset {PRESET}; store and figures in {OUT}")

# %% [markdown]
# ## 1. The grid and the sweep
#
# The controlled nonlinear (softmax) model on the easy task (copy the matching token), two input
# spectra and four depths. `expand_grid` crosses the lists over the preset's defaults (the same
# expansion as `depthscale sweep --grid`); `plan` packs what the store does not hold yet (all depths
# of one geometry as one packed computation) and checks its memory; `run_sweep` trains that plan,
# and is resumable.

# %%
grid = {"model": "nonlinear", "task": "easy", "a": [0.0, 1.0], "b": 0.0, "depths": [1, 2, 4, 8], "seed": 0,
        **(TINY if PRESET == "smoke" else {})}
configs = expand_grid(grid, preset=PRESET)
store = Store(OUT / "store")
counts = run_sweep(plan(configs, store, executor="inline"), store, name="notebook", progress=False)
print(f"{len(configs)} runs: {counts}")

# %% [markdown]
# ## 2. Back as a table
#
# One row per finished run: every config field and every scalar metric (docs/columns.md).

# %%
df = collect.collect(store, sweep="notebook").sort_values(["a", "L"]).reset_index(drop=True)
print(df[["a", "b", "L", "R", "R_se", "A", "C", "steps"]].to_string(index=False))
assert len(df) == len(configs)

# %% [markdown]
# ## 3. The fit per spectrum
#
# `fit_power_law` fits R_L = L0 + c L^-alpha by least squares on log R and judges the fit: a
# `"degenerate"` one (alpha or L0 on a bound, no finite SE, too few points) is data, not a law, and
# is drawn as points only, as the paper's figures are here.

# %%
fits = {}
for a, g in df.groupby("a"):
    fits[a] = fit_power_law(g["L"], g["R"])
    f = fits[a]
    print(f"a = {a:g}: L0 = {f.L0:.4g}, c = {f.c:.4g}, alpha = {f.alpha:.3g} ± {f.alpha_se:.2g}, "
          f"R² = {f.r2:.3g}, {f.status} {f.reason}")

# %% [markdown]
# ## 4. The figure
#
# Loss against depth, log-log, with error bars (the SE over evaluation contexts) and the fitted law
# where it is well posed, alpha ± SE in the legend. Built like the report's figures: matplotlib's
# object API on the Agg canvas (no pyplot state), TrueType fonts in the PDF.

# %%
from matplotlib import rc_context
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

with rc_context({"pdf.fonttype": 42, "mathtext.fontset": "dejavusans"}):
    fig = Figure(figsize=(4.5, 3.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for (a, g), marker in zip(df.groupby("a"), "os^D"):
        f = fits[a]
        text = (rf"$a = {a:g}$: $\alpha = {f.alpha:.2f} \pm {f.alpha_se:.2f}$" if f.ok
                else rf"$a = {a:g}$ (degenerate fit: {f.reason})")
        bars = ax.errorbar(g["L"], g["R"], yerr=g["R_se"], marker=marker, ms=4, capsize=2,
                           ls="none" if f.ok else "-", lw=1, label=text)
        if f.ok:
            Lg = np.geomspace(1, g["L"].max(), 100)
            ax.plot(Lg, f.predict(Lg), color=bars[0].get_color(), lw=1.2)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(sorted(df["L"].unique()), [str(v) for v in sorted(df["L"].unique())])
    plain = FuncFormatter(lambda v, _: f"{v:g}")  # 0.6, 2, 3 rather than 6×10⁻¹, 2×10⁰, 3×10⁰
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(plain)
    ax.set_xlabel("depth $L$")
    ax.set_ylabel("loss $R_L$")
    ax.legend(title=r"easy task, $b = 0$", fontsize=8, title_fontsize=8)
    figure_png, figure_pdf = OUT / "loss_vs_depth.png", OUT / "loss_vs_depth.pdf"
    fig.savefig(figure_png, dpi=200)
    fig.savefig(figure_pdf)
print(f"wrote {figure_png} and {figure_pdf}")

# %% [markdown]
# ## 5. How the runs trained
#
# The training curves of the same runs, one line per run, labelled by what differs between them
# (`depthscale plot curves --store S --sweep notebook` draws the same from the shell).

# %%
from depthscale.cli.plots import plot_curves

drawn = plot_curves(store, OUT / "curves.png", sweep="notebook", metrics=["R", "gap", "top1_mass"])
print(f"wrote {drawn['out']}: {len(drawn['runs'])} runs labelled by {', '.join(drawn['fields'])}")
