"""Every experiment of the toolkit, one record each (records.Experiment): its runs, theory,
figure, table, claims and notes in one place, a module per experiment or per family.

Adding an experiment is one file: write a module here (or anywhere, and name it in the
environment variable DEPTHSCALE_EXPERIMENTS) that builds its record and registers it in one line,

    register(Experiment("toy", "Toy: ...", ("nonlinear",), "difficult", (2,), "(0,0)", "loss vs L",
                        groups=(RunGroup("nonlinear", "difficult", 2, ((0.0, 0.0),)),),
                        part="beyond", figure=draw, table=tabulate, claims=(Claim(..., part="beyond"),)))

`depthscale.experiments.registry` imports every module of this package (pkgutil) and every plug-in file at
load; the experiment then appears in `depthscale sweep --experiment`, `reproduce`, the report and
its claims. A module here may import the layers below it (records, paper, plotting, analysis,
results, claims, formatting, fits, theory) and the other modules of this package; nothing below
imports this package. docs/experiments.md walks through one (where the file goes, what the record
holds, the commands that run it).
"""
