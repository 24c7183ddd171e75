"""The `depthscale` command. Run options are generated from RunConfig's fields, so the CLI and the
stored configuration can never disagree. Bad input (any errors.UserError: arguments.py checks
the flags, the library the rest): one line on stderr, exit code 2, and the store is left as it was
(docs/bad_inputs.md lists every bad input tested and what it gets); any other exception is a bug
and shows its traceback. Warnings are one line each on stderr ("depthscale: warning: ...")."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import warnings

from depthscale.arguments import (MAX_BENCH_STEPS, Parser, UsageError, add_config_fields, check_int, check_memory,
                                  check_theory, config_from, existing_store, help_text, open_store, out_dir, out_file,
                                  parse_depths, parse_floats, parse_shard, path_arg, pick_device, require_submitit,
                                  slurm_options, store_if_any)
from depthscale.atomic import plain
from depthscale.config import PRESETS, ConfigError
from depthscale.errors import UserError

EXIT_USAGE = 2


def _print_json(obj) -> None:
    print(json.dumps(plain(obj), separators=(", ", ": ")))


def _emit(args, obj: dict, text: str | None = None) -> None:
    """One JSON line with --json, else a human line (default: key=value pairs)."""
    if getattr(args, "json", False):
        _print_json(obj)
    else:
        print(text if text is not None else "  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                                       for k, v in obj.items()))


# ---------------------------------------------------------------- commands
def _num(x, spec: str) -> str:
    return "nan" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, spec)


def cmd_train(args) -> int:
    from depthscale.divergence import diverged
    from depthscale.training import train_one

    cfg = config_from(args)
    device = pick_device(args.device)
    existing = store_if_any(args.store)
    if existing is None or not existing.is_done(cfg.run_id):  # a finished run is only loaded
        check_memory([[cfg]], "inline", None, device, args.allow_memory)
    store = open_store(args.store)
    met = train_one(cfg, store, device, progress=None if not args.json else False)
    div = store.divergence(cfg.run_id) or diverged(met)
    keys = ["run_id", "loss", "loss_se", "A", "C", "steps", "stopped_because", "R_rel", "L", "model", "task",
            "state", "diverged_step", "diverged_reason"]
    # L, model and task come from the config: a diverged run's metrics hold no measurements
    out = dict(met, loss=met.get("R"), loss_se=met.get("R_se"), L=cfg.L, model=cfg.model, task=cfg.task,
               state="diverged" if div else "done", diverged_step=div["step"] if div else None,
               diverged_reason=div["reason"] if div else None)
    if args.json:
        _print_json({k: out.get(k) for k in keys})
    elif div:
        print(f"run {out['run_id']}: {cfg.model} {cfg.task} L={cfg.L} DIVERGED at step {div['step']}: "
              f"{div['reason']} ({out['stopped_because']}); stored in {store.run_dir(out['run_id'])}")
    else:
        print(f"run {out['run_id']}: {cfg.model} {cfg.task} L={cfg.L} loss={_num(out['loss'], '.4g')} "
              f"± {_num(out['loss_se'], '.2g')} ({_num(out.get('R_rel'), '.1%')} of Var y*) after "
              f"{out['steps']} steps ({out['stopped_because']}); stored in {store.run_dir(out['run_id'])}")
    return 0


def _sweep_configs(args) -> tuple[list, str]:
    if bool(args.experiment) == bool(args.grid):
        raise UsageError("give exactly one of --experiment ID or --grid FILE")
    if args.experiment:
        from depthscale.registry import all_configs, parse_ids

        ids = parse_ids(args.experiment)
        # a comma list names its manifest with '_' (sweep names allow no commas)
        return all_configs(ids, args.preset), f"{'_'.join(ids) if args.experiment != 'all' else 'all'}-{args.preset}"
    from depthscale.sweeps import expand_grid, load_grid

    if not os.path.isfile(args.grid):
        raise UsageError(f"--grid {args.grid!r}: no such file")
    if os.path.getsize(args.grid) == 0:
        raise UsageError(f"--grid {args.grid!r} is empty")
    name = os.path.splitext(os.path.basename(args.grid))[0]
    return expand_grid(load_grid(args.grid), args.preset), f"{name}-{args.preset}"


def cmd_sweep(args) -> int:
    from depthscale.sweeps import plan, run_sweep

    path_arg(args.store, "store")
    check_int(args.workers, "workers", 1)
    slurm = slurm_options(args)
    require_submitit(args.executor)
    cfgs, name = _sweep_configs(args)
    shard = parse_shard(args.shard)
    # SLURM jobs pick their device on the node (the submitting host may have no GPU)
    device = args.device if args.executor == "slurm" else pick_device(args.device)
    # refuse a sweep that cannot fit before the store is created or its manifest written
    check_memory(plan(cfgs, store_if_any(args.store), shard=shard), args.executor, args.workers,
                 device, args.allow_memory)
    store = open_store(args.store)
    counts = run_sweep(cfgs, store, executor=args.executor, shard=shard, workers=args.workers,
                       device=device, name=name, slurm=slurm, allow_memory=True)
    _emit(args, counts)
    return 0


def cmd_status(args) -> int:
    store = existing_store(args.store)
    st = store.status().reset_index()  # one row per sweep: total, then a count per state
    problems = store.problems()  # diverged and broken runs: where and why
    if args.json:
        recs = st.to_dict(orient="records")
        for rec in recs:
            ids = set(store.load_manifest(rec["sweep"]))
            for state in ("diverged", "broken"):
                rec[f"{state}_runs"] = [{k: p[k] for k in ("run_id", "step", "reason")}
                                        for p in problems if p["state"] == state and p["run_id"] in ids]
        _print_json(recs)
    else:
        print(st.to_string(index=False) if len(st) else "no sweeps in this store")
        for p in problems:
            at = f" at step {p['step']}" if p["step"] is not None else ""
            print(f"{p['state']} {p['run_id']}{at}: {p['reason']}")
    return 0


def cmd_collect(args) -> int:
    out = out_file(args.out)
    store = existing_store(args.store)
    df = store.collect_to(out)
    div = int((df["state"] == "diverged").sum()) if len(df) else 0
    print(f"wrote {len(df)} runs to {args.out}" + (f" ({div} diverged: column state)" if div else ""))
    return 0


def cmd_fit(args) -> int:
    from depthscale.fits import fit_dict

    L = parse_floats(args.depths, "depths")
    R = parse_floats(args.losses, "losses")
    if len(L) != len(R):
        raise UsageError(f"--depths has {len(L)} values but --losses has {len(R)}")
    if min(L) <= 0:
        raise UsageError(f"--depths must be > 0, got {min(L)!r}")
    if min(R) <= 0:
        raise UsageError(f"--losses must be > 0, got {min(R)!r}")
    need = 2 if args.no_floor else 3
    if len(set(L)) < need:
        raise UsageError(f"--depths needs at least {need} distinct depths to fit "
                         f"{'c and alpha' if args.no_floor else 'L0, c and alpha'}, got {len(set(L))}")
    if len(set(R)) == 1:
        raise UsageError(f"--losses are all equal ({R[0]!r}): no decay with depth to fit")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # SciPy's overflow warnings: a fit on these numbers fails
        try:
            res = fit_dict(L, R, floor=not args.no_floor)
        except (ArithmeticError, Warning) as e:
            raise UsageError(f"cannot fit these numbers ({type(e).__name__}: "
                             f"{str(e).splitlines()[0] if str(e) else 'overflow'}); rescale --losses") from None
    bad = [k for k, v in res.items() if k != "alpha_se" and not (isinstance(v, float) and math.isfinite(v))]
    if bad:
        raise UsageError(f"the fit gives a non-finite {bad[0]}: rescale --losses")
    _emit(args, res)
    return 0


def cmd_theory(args) -> int:
    from depthscale import linear_floor, softmax_floor, theory

    check_theory(args)
    if args.what == "exponents":
        res = theory.exponents(args.a, args.b)
        bad = [k for k, v in res.items() if not math.isfinite(v)]
        if bad:
            raise UsageError(f"--a {args.a!r} --b {args.b!r}: {bad[0]} is not finite (overflow)")
    elif args.what == "curve":
        depths = parse_depths(args.depths)
        res = theory.curve(args.a, args.b, args.d, depths)
        if args.finite_P:
            res["finite_P"] = theory.sample_free_curve(args.a, args.b, args.d, args.P, depths,
                                                       samples=args.samples, seed=args.seed)
    elif args.what == "softmax-floor":
        taus = None if args.temperatures is None else parse_floats(args.temperatures, "temperatures")
        res = softmax_floor.softmax_floor(args.a, args.b, args.k, args.d, args.P, samples=args.samples,
                                   seed=args.seed, temperatures=taus,
                                   depths=parse_depths(args.depths))
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
        res = linear_floor.floor(args.a, args.b, args.k, args.d, args.P, args.samples, args.seed)
    _emit(args, res)
    return 0


def cmd_reproduce(args) -> int:
    from depthscale.registry import parse_ids
    from depthscale.report import reproduce

    path_arg(args.store, "store")
    out_dir(args.out)
    check_int(args.workers, "workers", 1)
    require_submitit(args.executor)
    ids = parse_ids(args.id)
    # SLURM jobs pick their device on the node (and a submission that does not wait builds nothing here)
    device = args.device if args.executor == "slurm" else pick_device(args.device)
    if not args.no_run:  # refuse what cannot fit before the store is created
        from depthscale.registry import all_configs
        from depthscale.sweeps import plan

        check_memory(plan(all_configs(ids, args.preset), store_if_any(args.store)), args.executor,
                     args.workers, device, args.allow_memory)
    reproduce(ids, args.preset, args.store, args.out, executor=args.executor, device=device,
              workers=args.workers, run=not args.no_run, allow_memory=True)
    print(f"figures, tables and claims.json written to {args.out}")
    return 0


def cmd_report(args) -> int:
    from depthscale.report import report

    out_dir(args.out)
    existing_store(args.store)
    paths = report(args.store, args.out, preset=args.preset)
    print(f"report written: {paths}")
    return 0


def cmd_bench(args) -> int:
    from depthscale.bench import bench

    check_int(args.steps, "steps", 1, MAX_BENCH_STEPS)
    res = bench(preset=args.preset, device=pick_device(args.device), dtype=args.dtype, steps=args.steps)
    _emit(args, res, None if args.json else "\n".join(f"{k}: {v}" for k, v in res.items()))
    return 0


# ---------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="depthscale", description="Inverse-depth scaling in attention (arXiv 2610.11063).")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=Parser)

    def common_preset(sp, required=False):
        sp.add_argument("--preset", choices=PRESETS, default=None if required else "cpu", required=required,
                        help="smoke (seconds), cpu (minutes on 2 cores), paper (GPU)")

    def device(sp):
        sp.add_argument("--device", choices=["cpu", "cuda", "auto"], default="cpu")

    def allow_memory(sp):
        sp.add_argument("--allow-memory", dest="allow_memory", action="store_true",
                        help="run even where the memory estimate exceeds the available memory")

    sp = sub.add_parser("train", help="train one model", **help_text(
        "Train one model on fresh contexts until it converges (or hits the step cap), measure it on "
        "the evaluation contexts and store the run. A finished run is loaded, not retrained; a killed "
        "run resumes from its checkpoint.",
        "depthscale train --model nonlinear --task difficult --k 2 --a 0 --b 0 --depth 4 --preset smoke --store runs --json"))
    common_preset(sp)
    add_config_fields(sp)
    sp.add_argument("--store", required=True, help="run store directory")
    sp.add_argument("--json", action="store_true", help="print one JSON line")
    allow_memory(sp)
    device(sp)
    sp.set_defaults(fn=cmd_train)

    sp = sub.add_parser("sweep", help="run an experiment or a grid of runs", **help_text(
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
                          ("cpus", int, "CPUs per job"), ("mem", float, "GB of memory per job")):
        sp.add_argument(f"--slurm-{opt}", dest=f"slurm_{opt}", type=typ, default=None, help=hlp)
    sp.add_argument("--json", action="store_true")
    allow_memory(sp)
    device(sp)
    sp.set_defaults(fn=cmd_sweep)

    sp = sub.add_parser("status", help="done / running / failed per experiment", **help_text(
        "Count the runs of each sweep in a store by state.", "depthscale status --store runs"))
    sp.add_argument("--store", required=True)
    sp.add_argument("--json", action="store_true")
    sp.set_defaults(fn=cmd_status)

    sp = sub.add_parser("collect", help="gather finished runs into one table", **help_text(
        "One row per finished run: every config field and every scalar metric.",
        "depthscale collect --store runs --out runs.parquet"))
    sp.add_argument("--store", required=True)
    sp.add_argument("--out", required=True, help="FILE.parquet or FILE.csv")
    sp.set_defaults(fn=cmd_collect)

    sp = sub.add_parser("fit", help="fit R = L0 + c L^-alpha", **help_text(
        "Least squares on log R with bounds and several starts (SPEC §6.1).",
        "depthscale fit --depths 1,2,4,8 --losses 10,6,4,3 --json"))
    sp.add_argument("--depths", required=True)
    sp.add_argument("--losses", required=True)
    sp.add_argument("--no-floor", action="store_true", help="fix L0 = 0")
    sp.add_argument("--json", action="store_true")
    sp.set_defaults(fn=cmd_fit)

    sp = sub.add_parser("theory", help="linear-attention theory and the softmax-ensemble floor", **help_text(
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
    allow_memory(sp)
    sp.set_defaults(fn=cmd_theory)

    sp = sub.add_parser("reproduce", help="run and draw figures/tables of the paper", **help_text(
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
    allow_memory(sp)
    device(sp)
    sp.set_defaults(fn=cmd_reproduce)

    sp = sub.add_parser("report", help="write the reproduction report", **help_text(
        "One Markdown and one self-contained HTML report: figures, tables, the paper's numbers beside "
        "ours, PASS/FAIL per claim.", "depthscale report --store runs --out out"))
    sp.add_argument("--store", required=True)
    sp.add_argument("--out", required=True)
    sp.add_argument("--preset", choices=PRESETS, default=None)
    sp.set_defaults(fn=cmd_report)

    sp = sub.add_parser("bench", help="packed engine vs a naive loop", **help_text(
        "Time the fig6 depth sweep trained one model at a time and as one pack.",
        "depthscale bench --preset cpu --json"))
    common_preset(sp)
    sp.add_argument("--dtype", choices=["float32", "tf32", "bf16"], default="float32")
    sp.add_argument("--steps", type=int, default=None)
    sp.add_argument("--json", action="store_true")
    device(sp)
    sp.set_defaults(fn=cmd_bench)
    return p


def _one_line_warning(message, category, filename, lineno, file=None, line=None) -> None:
    text = str(message).splitlines()[0] if str(message) else category.__name__
    print(f"depthscale: warning: {text}", file=sys.stderr if file is None else file)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    shown = warnings.showwarning
    warnings.showwarning = _one_line_warning
    try:
        args = parser.parse_args(argv)
        return args.fn(args) or 0
    except UserError as exc:  # the user's input; anything else is a bug and shows its traceback
        if os.environ.get("DEPTHSCALE_DEBUG") and not isinstance(exc, (UsageError, ConfigError)):
            raise
        print(f"depthscale: error: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        warnings.showwarning = shown


if __name__ == "__main__":
    sys.exit(main())
