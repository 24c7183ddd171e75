"""The `depthscale` command. Run options are generated from RunConfig's fields, so the CLI and the
stored configuration can never disagree. Bad input: one line on stderr, exit code 2."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys

from depthscale.config import PRESETS, ConfigError, RunConfig, field_docs, make_config

EXIT_USAGE = 2


class UsageError(Exception):
    """Bad input from the command line."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (argparse's default prints the usage too)
        raise UsageError(message)


def _fmt(desc: str, example: str) -> dict:
    return dict(description=desc, epilog="example:\n  " + example,
                formatter_class=argparse.RawDescriptionHelpFormatter)


def _jsonable(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x


def _print_json(obj) -> None:
    print(json.dumps(_jsonable(obj), separators=(", ", ": ")))


def _emit(args, obj: dict, text: str | None = None) -> None:
    """One JSON line with --json, else a human line (default: key=value pairs)."""
    if getattr(args, "json", False):
        _print_json(obj)
    else:
        print(text if text is not None else "  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                                       for k, v in obj.items()))


def _parse_floats(s: str, name: str) -> list[float]:
    try:
        vals = [float(v) for v in s.split(",") if v.strip()]
    except ValueError:
        raise UsageError(f"--{name} must be a comma-separated list of numbers, got {s!r}") from None
    if not vals:
        raise UsageError(f"--{name} is empty")
    return vals


def _add_config_fields(p: argparse.ArgumentParser) -> None:
    docs = field_docs()
    for f in dataclasses.fields(RunConfig):
        if f.name == "preset":
            continue
        typ = {"int": int, "float": float, "str": str}[str(f.type)]
        names = ["--" + f.name] + (["--depth"] if f.name == "L" else [])
        p.add_argument(*names, dest=f.name, type=typ, default=None, metavar=f.name.upper() if len(f.name) > 1 else f.name,
                       help=f"{docs.get(f.name, '')} [preset default]")


def _config_from(args) -> RunConfig:
    over = {f.name: getattr(args, f.name) for f in dataclasses.fields(RunConfig)
            if f.name != "preset" and getattr(args, f.name, None) is not None}
    return make_config(args.preset, **over)


def _device(name: str) -> str:
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device is available")
    return name


def _store(path: str):
    from depthscale.store import Store

    return Store(path)


# ---------------------------------------------------------------- commands
def cmd_train(args) -> int:
    from depthscale.training import train_one

    cfg = _config_from(args)
    store = _store(args.store)
    met = train_one(cfg, store, _device(args.device), progress=None if not args.json else False)
    keys = ["run_id", "loss", "loss_se", "A", "C", "steps", "stopped_because", "R_rel", "L", "model", "task"]
    out = dict(met, loss=met.get("R"), loss_se=met.get("R_se"), model=cfg.model, task=cfg.task)
    if args.json:
        _print_json({k: out.get(k) for k in keys})
    else:
        print(f"run {out['run_id']}: {cfg.model} {cfg.task} L={cfg.L} loss={out['loss']:.4g} "
              f"± {out['loss_se']:.2g} ({out['R_rel']:.1%} of Var y*) after {out['steps']} steps "
              f"({out['stopped_because']}); stored in {store.run_dir(out['run_id'])}")
    return 0


def _sweep_configs(args) -> tuple[list[RunConfig], str]:
    if bool(args.experiment) == bool(args.grid):
        raise UsageError("give exactly one of --experiment ID or --grid FILE")
    if args.experiment:
        from depthscale.experiments import all_configs, experiment_ids

        ids = experiment_ids() if args.experiment == "all" else args.experiment.split(",")
        for i in ids:
            if i not in experiment_ids():
                raise UsageError(f"unknown experiment {i!r} (known: {', '.join(experiment_ids())})")
        # a comma list names its manifest with '_' (sweep names allow no commas)
        return all_configs(ids, args.preset), f"{'_'.join(ids) if args.experiment != 'all' else 'all'}-{args.preset}"
    from depthscale.sweeps import expand_grid, load_grid

    if not os.path.isfile(args.grid):
        raise UsageError(f"--grid {args.grid!r}: no such file")
    name = os.path.splitext(os.path.basename(args.grid))[0]
    return expand_grid(load_grid(args.grid), args.preset), f"{name}-{args.preset}"


def _parse_shard(s: str | None):
    if s is None:
        return None
    from depthscale.sweeps import parse_shard

    return parse_shard(s)


def cmd_sweep(args) -> int:
    from depthscale.sweeps import run_sweep

    cfgs, name = _sweep_configs(args)
    store = _store(args.store)
    slurm = {k: getattr(args, "slurm_" + k) for k in ("partition", "time", "parallelism", "gpus", "cpus")
             if getattr(args, "slurm_" + k) is not None}
    counts = run_sweep(cfgs, store, executor=args.executor, shard=_parse_shard(args.shard),
                       workers=args.workers, device=_device(args.device), name=name, slurm=slurm)
    _emit(args, counts)
    return 0


def cmd_status(args) -> int:
    store = _store(args.store)
    st = store.status().reset_index()  # one row per sweep: total, done, running, failed, pending
    if args.json:
        _print_json(st.to_dict(orient="records"))
    else:
        print(st.to_string(index=False) if len(st) else "no sweeps in this store")
    return 0


def cmd_collect(args) -> int:
    store = _store(args.store)
    df = store.collect_to(args.out)
    print(f"wrote {len(df)} runs to {args.out}")
    return 0


def cmd_fit(args) -> int:
    from depthscale.fits import fit_dict

    L = _parse_floats(args.depths, "depths")
    R = _parse_floats(args.losses, "losses")
    if len(L) != len(R):
        raise UsageError(f"--depths has {len(L)} values but --losses has {len(R)}")
    _emit(args, fit_dict(L, R, floor=not args.no_floor))
    return 0


def cmd_theory(args) -> int:
    from depthscale import theory

    if args.what == "exponents":
        res = theory.exponents(args.a, args.b)
    elif args.what == "curve":
        depths = [int(x) for x in _parse_floats(args.depths, "depths")]
        res = theory.curve(args.a, args.b, args.d, depths)
        if args.finite_P:
            res["finite_P"] = theory.sample_free_curve(args.a, args.b, args.d, args.P, depths,
                                                       samples=args.samples, seed=args.seed)
    elif args.what == "softmax-floor":
        taus = None if args.temperatures is None else _parse_floats(args.temperatures, "temperatures")
        res = theory.softmax_floor(args.a, args.b, args.k, args.d, args.P, samples=args.samples,
                                   seed=args.seed, temperatures=taus,
                                   depths=[int(x) for x in _parse_floats(args.depths, "depths")])
        if not args.json:
            i = res["iid_depth"]
            print(f"single head {res['single_head']:.4f} ± {res['single_head_se']:.4f} "
                  f"(tau {res['single_head_temperature']:.3g}); ensemble floor {res['ensemble_floor']:.4f} "
                  f"± {res['se']:.4f} (ensemble - single {res['ensemble_minus_single']:+.4f} ± "
                  f"{res['ensemble_minus_single_se']:.4f}); Var(y*) {res['var_ystar']:.4f}; family {res['family']}; "
                  f"layers drawn from the mixture: R_L = {i['C']:.4f} + {i['delta']:.4f}/L; best stack of L heads: "
                  + ", ".join(f"L={L}: {R:.4f}" for L, R in zip(res["best_stack"]["depths"], res["best_stack"]["R"])))
            return 0
    else:
        res = theory.floor(args.a, args.b, args.k, args.d, args.P, args.samples, args.seed)
    _emit(args, res)
    return 0


def cmd_reproduce(args) -> int:
    from depthscale.experiments import experiment_ids
    from depthscale.report import reproduce

    ids = experiment_ids() if args.id == "all" else args.id.split(",")
    for i in ids:
        if i not in experiment_ids():
            raise UsageError(f"unknown experiment {i!r} (known: {', '.join(experiment_ids())})")
    reproduce(ids, args.preset, args.store, args.out, executor=args.executor, device=_device(args.device),
              workers=args.workers, run=not args.no_run)
    print(f"figures, tables and claims.json written to {args.out}")
    return 0


def cmd_report(args) -> int:
    from depthscale.report import report

    paths = report(args.store, args.out, preset=args.preset)
    print(f"report written: {paths}")
    return 0


def cmd_bench(args) -> int:
    from depthscale.bench import bench

    res = bench(preset=args.preset, device=_device(args.device), dtype=args.dtype, steps=args.steps)
    _emit(args, res, None if args.json else "\n".join(f"{k}: {v}" for k, v in res.items()))
    return 0


# ---------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="depthscale", description="Inverse-depth scaling in attention (arXiv 2610.11063).")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)

    def common_preset(sp, required=False):
        sp.add_argument("--preset", choices=PRESETS, default=None if required else "cpu", required=required,
                        help="smoke (seconds), cpu (minutes on 2 cores), paper (GPU)")

    def device(sp):
        sp.add_argument("--device", choices=["cpu", "cuda", "auto"], default="cpu")

    sp = sub.add_parser("train", help="train one model", **_fmt(
        "Train one model on fresh contexts until it converges (or hits the step cap), measure it on "
        "the evaluation contexts and store the run. A finished run is loaded, not retrained; a killed "
        "run resumes from its checkpoint.",
        "depthscale train --model nonlinear --task difficult --k 2 --a 0 --b 0 --depth 4 --preset smoke --store runs --json"))
    common_preset(sp)
    _add_config_fields(sp)
    sp.add_argument("--store", required=True, help="run store directory")
    sp.add_argument("--json", action="store_true", help="print one JSON line")
    device(sp)
    sp.set_defaults(fn=cmd_train)

    sp = sub.add_parser("sweep", help="run an experiment or a grid of runs", **_fmt(
        "Expand an experiment id (SPEC §7) or a grid file into runs, skip finished ones, and train the "
        "rest in packs. Safe to run many at once on one store; resumes after any failure.",
        "depthscale sweep --experiment fig6 --preset cpu --store runs --executor process\n"
        "  depthscale sweep --grid grid.toml --preset smoke --store runs --shard 0/4"))
    sp.add_argument("--experiment", help="experiment id, comma list, or all")
    sp.add_argument("--grid", help="JSON or TOML grid of RunConfig fields (lists are crossed)")
    common_preset(sp)
    sp.add_argument("--store", required=True)
    sp.add_argument("--executor", choices=["inline", "process", "slurm"], default="inline")
    sp.add_argument("--workers", type=int, default=None, help="process executor: worker processes")
    sp.add_argument("--shard", help="i/n: run only shard i of n (for hand-written job arrays)")
    for opt, typ, hlp in (("partition", str, "SLURM partition"), ("time", int, "minutes per job"),
                          ("parallelism", int, "max array tasks at once"), ("gpus", int, "GPUs per job"),
                          ("cpus", int, "CPUs per job")):
        sp.add_argument(f"--slurm-{opt}", dest=f"slurm_{opt}", type=typ, default=None, help=hlp)
    sp.add_argument("--json", action="store_true")
    device(sp)
    sp.set_defaults(fn=cmd_sweep)

    sp = sub.add_parser("status", help="done / running / failed per experiment", **_fmt(
        "Count the runs of each sweep in a store by state.", "depthscale status --store runs"))
    sp.add_argument("--store", required=True)
    sp.add_argument("--json", action="store_true")
    sp.set_defaults(fn=cmd_status)

    sp = sub.add_parser("collect", help="gather finished runs into one table", **_fmt(
        "One row per finished run: every config field and every scalar metric.",
        "depthscale collect --store runs --out runs.parquet"))
    sp.add_argument("--store", required=True)
    sp.add_argument("--out", required=True, help="FILE.parquet or FILE.csv")
    sp.set_defaults(fn=cmd_collect)

    sp = sub.add_parser("fit", help="fit R = L0 + c L^-alpha", **_fmt(
        "Least squares on log R with bounds and several starts (SPEC §6.1).",
        "depthscale fit --depths 1,2,4,8 --losses 10,6,4,3 --json"))
    sp.add_argument("--depths", required=True)
    sp.add_argument("--losses", required=True)
    sp.add_argument("--no-floor", action="store_true", help="fix L0 = 0")
    sp.add_argument("--json", action="store_true")
    sp.set_defaults(fn=cmd_fit)

    sp = sub.add_parser("theory", help="linear-attention theory and the softmax-ensemble floor", **_fmt(
        "exponents: zeta and 2 zeta; curve: constrained and free reference curves (--finite-P: and the "
        "free curve of the empirical S at P); floor: the linear model's R_irr by "
        "Monte Carlo (SPEC §6.2-6.3); softmax-floor: the best single cosine-softmax head and the best "
        "infinitely deep ensemble of them (nonnegative mixture of temperatures, one gain; SPEC §3.4), "
        "with the loss of L layers drawn from that mixture.",
        "depthscale theory softmax-floor --a 0 --b 0 --k 2 --d 16 --P 64 --samples 20000 --seed 0 --json"))
    sp.add_argument("what", choices=["exponents", "curve", "floor", "softmax-floor"])
    sp.add_argument("--a", type=float, required=True)
    sp.add_argument("--b", type=float, required=True)
    sp.add_argument("--d", type=int, default=32)
    sp.add_argument("--P", type=int, default=128)
    sp.add_argument("--k", type=int, default=2)
    sp.add_argument("--depths", default="1,2,4,8,16,32,64")
    sp.add_argument("--samples", type=int, default=4096)
    sp.add_argument("--seed", type=int, default=0)
    sp.add_argument("--temperatures", default=None,
                    help="softmax-floor: comma list of head temperatures (default: -10 ... 500, 101 values)")
    sp.add_argument("--finite-P", dest="finite_P", action="store_true",
                    help="curve: add the free curve of the empirical S at this P (easy task; "
                         "--samples contexts to fit, as many to measure)")
    sp.add_argument("--json", action="store_true")
    sp.set_defaults(fn=cmd_theory)

    sp = sub.add_parser("reproduce", help="run and draw figures/tables of the paper", **_fmt(
        "Run whatever is missing for the experiments (resumable), then write each figure (PNG, PDF), "
        "table (CSV, Markdown) and claims.json.",
        "depthscale reproduce all --preset cpu --store runs --out out"))
    sp.add_argument("id", help="experiment id (fig1..fig14, table1..table5), comma list, or all")
    common_preset(sp)
    sp.add_argument("--store", required=True)
    sp.add_argument("--out", required=True)
    sp.add_argument("--executor", choices=["inline", "process", "slurm"], default="process")
    sp.add_argument("--workers", type=int, default=None)
    sp.add_argument("--no-run", action="store_true", help="only draw from what is stored")
    device(sp)
    sp.set_defaults(fn=cmd_reproduce)

    sp = sub.add_parser("report", help="write the reproduction report", **_fmt(
        "One Markdown and one self-contained HTML report: figures, tables, the paper's numbers beside "
        "ours, PASS/FAIL per claim.", "depthscale report --store runs --out out"))
    sp.add_argument("--store", required=True)
    sp.add_argument("--out", required=True)
    sp.add_argument("--preset", choices=PRESETS, default=None)
    sp.set_defaults(fn=cmd_report)

    sp = sub.add_parser("bench", help="packed engine vs a naive loop", **_fmt(
        "Time the fig6 depth sweep trained one model at a time and as one pack.",
        "depthscale bench --preset cpu --json"))
    common_preset(sp)
    sp.add_argument("--dtype", choices=["float32", "tf32", "bf16"], default="float32")
    sp.add_argument("--steps", type=int, default=None)
    sp.add_argument("--json", action="store_true")
    device(sp)
    sp.set_defaults(fn=cmd_bench)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        return args.fn(args) or 0
    except (UsageError, ConfigError) as exc:
        print(f"depthscale: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:  # known user-facing errors from the library
        from depthscale.errors import is_user_error

        if is_user_error(exc):
            print(f"depthscale: error: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}", file=sys.stderr)
            return EXIT_USAGE
        raise


if __name__ == "__main__":
    sys.exit(main())
