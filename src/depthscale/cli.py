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

from depthscale.arguments import (MAX_BENCH_STEPS, Parser, UsageError, add_config_fields, add_spelling_aliases,
                                  check_int, check_memory, check_parents, check_theory, config_from, config_overrides, config_sources,
                                  existing_store, grid_from_records, help_context, help_text, open_store, out_dir,
                                  out_file, parse_depths, parse_experiments, parse_floats, parse_loggers, parse_shard,
                                  path_arg, pick_device, require_submitit, slurm_options, store_if_any)
from depthscale.atomic import plain
from depthscale.config import PRESETS, ConfigError, make_config
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
TRAIN_SWEEP = "train"  # the manifest `depthscale train` adds its runs to


def _say_preset(preset) -> None:
    """Which preset a command used: one line on stderr (stdout stays clean for --json)."""
    print(f"depthscale: preset {preset}", file=sys.stderr, flush=True)


def _num(x, spec: str) -> str:
    return "nan" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, spec)


def _shown(v) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def print_config(args) -> int:
    """train --print-config: the resolved config, each field's value and source; nothing is run."""
    given = config_overrides(args)
    cfg = make_config(args.preset, **given)
    src = config_sources(args.preset, given)
    state = None
    if args.store is not None:
        st = store_if_any(args.store)
        state = "new" if st is None or not st.run_path(cfg.run_id).is_dir() else st.run_state(cfg.run_id)
    dct = cfg.to_dict()
    if args.json:
        _print_json({"run_id": cfg.run_id, "state": state, "config": dct, "source": src})
        return 0
    where = f"; in --store: {state}" if state is not None else ""
    print(f"run {cfg.run_id} (nothing trained{where}); field, value, source:")
    w, wv = max(map(len, dct)), max(len(_shown(v)) for v in dct.values())
    for k, v in dct.items():
        print(f"  {k:<{w}}  {_shown(v):<{wv}}  {src[k]}")
    return 0


def cmd_train(args) -> int:
    from depthscale.divergence import diverged
    from depthscale.training import train_one

    if args.print_config:
        return print_config(args)
    if args.store is None:
        raise UsageError("the following arguments are required: --store")
    cfg = config_from(args)
    device = pick_device(args.device)
    loggers = parse_loggers(args.log)
    existing = store_if_any(args.store)
    if existing is None or not existing.is_done(cfg.run_id):  # a finished run is only loaded
        check_memory([[cfg]], "inline", None, device, args.allow_memory)
    store = open_store(args.store)
    _say_preset(args.preset)
    store.add_to_manifest(TRAIN_SWEEP, [cfg.run_id])  # `status` and `collect --sweep train` see it
    met = train_one(cfg, store, device, progress=None if not args.json else False, loggers=loggers)
    div = store.divergence(cfg.run_id) or diverged(met)
    keys = ["run_id", "R", "R_se", "A", "C", "steps", "stopped_because", "R_rel", "L", "model", "task",
            "state", "diverged_step", "diverged_reason"]
    # L, model and task come from the config: a diverged run's metrics hold no measurements
    out = dict(met, L=cfg.L, model=cfg.model, task=cfg.task,
               state="diverged" if div else "done", diverged_step=div["step"] if div else None,
               diverged_reason=div["reason"] if div else None)
    if args.json:
        _print_json({k: out.get(k) for k in keys})
    elif div:
        print(f"run {out['run_id']}: {cfg.model} {cfg.task} L={cfg.L} DIVERGED at step {div['step']}: "
              f"{div['reason']} ({out['stopped_because']}); stored in {store.run_dir(out['run_id'])}")
    else:
        print(f"run {out['run_id']}: {cfg.model} {cfg.task} L={cfg.L} R={_num(out.get('R'), '.4g')} "
              f"± {_num(out.get('R_se'), '.2g')} ({_num(out.get('R_rel'), '.1%')} of Var y*) after "
              f"{out['steps']} steps ({out['stopped_because']}); stored in {store.run_dir(out['run_id'])}")
    return 0


def _sweep_configs(args) -> tuple[list, str]:
    if bool(args.experiment) == bool(args.grid):
        raise UsageError("give exactly one of --experiment ID or --grid FILE")
    if args.experiment:
        from depthscale.registry import all_configs, parse_ids

        text = parse_experiments(args.experiment)
        ids = parse_ids(text)
        # a comma list names its manifest with '_' (sweep names allow no commas)
        return all_configs(ids, args.preset), f"{'_'.join(ids) if text != 'all' else 'all'}-{args.preset}"
    from depthscale.sweeps import expand_grid, load_grid

    if not os.path.isfile(args.grid):
        raise UsageError(f"--grid {args.grid!r}: no such file")
    if os.path.getsize(args.grid) == 0:
        raise UsageError(f"--grid {args.grid!r} is empty")
    name = os.path.splitext(os.path.basename(args.grid))[0]
    # a run's config.json, or a collected row as JSON, is that run's config (same run id)
    grid = grid_from_records(load_grid(args.grid), f"grid file {args.grid}")
    return expand_grid(grid, args.preset), f"{name}-{args.preset}"


def _n(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _print_plan(args, name: str, cfgs: list, packs: list, shard, store, memory_note: str | None) -> int:
    """sweep --dry-run: the runs the sweep would train, pack by pack, and what varies between them."""
    from depthscale.compare import differing_fields, run_label
    from depthscale.memory import fmt_bytes, pack_bytes
    from depthscale.plots import sort_key

    ids = sorted({c.run_id for c in cfgs})
    share = ids if shard is None else ids[shard[0]::shard[1]]
    done = sum(store.is_done(r) for r in share) if store is not None else 0
    runs = [c for p in packs for c in p]
    vary = differing_fields([c.to_dict() for c in runs]) or ["model", "task", "L"]
    sizes = [pack_bytes(p) for p in packs]
    rows = [{"run_id": c.run_id, "pack": i, **{f: getattr(c, f) for f in vary}}
            for i, p in enumerate(packs) for c in p]
    if args.json:
        _print_json({"sweep": name, "dry_run": True, "planned": len(runs), "packs": len(packs), "total": len(share),
                     "skipped_done": done, "vary": vary, "pack_bytes": sizes, "memory": memory_note, "runs": rows})
        return 0
    print(f"sweep {name}: {_n(len(runs), 'run')} to train in {_n(len(packs), 'pack')} ({done} of {len(share)} "
          f"already done; dry run: nothing trained)" + (f"; fields that vary: {', '.join(vary)}" if runs else ""))
    for i, p in enumerate(packs):
        # the pack's line names what its runs share of the varying fields, each run's line the rest
        dicts = [c.to_dict() for c in p]
        inner = [f for f in differing_fields(dicts) if f in vary] if len(p) > 1 else []
        shared = [f for f in vary if f not in inner]
        head = f"pack {i + 1} of {len(packs)}: {_n(len(p), 'run')}, about {fmt_bytes(sizes[i])} (estimate)"
        print(head + (f"; {run_label(dicts[0], shared)}" if shared else ""))
        for c, dct in sorted(zip(p, dicts), key=lambda cd: (*(sort_key(cd[1][f]) for f in inner), cd[0].run_id)):
            print(f"  {c.run_id}" + (f"  {run_label(dct, inner)}" if inner else ""))
    if memory_note:
        print(f"memory: {memory_note}")
    return 0


def cmd_sweep(args) -> int:
    from depthscale.sweeps import pack_memory_budget, plan, run_sweep

    path_arg(args.store, "store")
    check_int(args.workers, "workers", 1)
    slurm = slurm_options(args)
    require_submitit(args.executor)
    loggers = parse_loggers(args.log)
    cfgs, name = _sweep_configs(args)
    shard = parse_shard(args.shard)
    # SLURM jobs pick their device on the node (the submitting host may have no GPU)
    device = args.device if args.executor == "slurm" else pick_device(args.device)
    # refuse a sweep that cannot fit before the store is created or its manifest written
    if args.pack_memory is not None:
        if not math.isfinite(args.pack_memory) or args.pack_memory <= 0:
            raise UsageError(f"--pack-memory must be a finite number > 0 (GB), got {args.pack_memory!r}")
        budget = int(args.pack_memory * 1e9)
    else:
        budget = pack_memory_budget(args.executor, args.workers, device, slurm)  # packs split to fit it
    packs = plan(cfgs, store_if_any(args.store), shard=shard, pack_memory=budget)
    if args.dry_run:  # nothing is created, written or trained
        note = None
        try:
            check_memory(packs, args.executor, args.workers, device, args.allow_memory)
        except UserError as e:
            note = "the sweep would be refused: " + str(e).splitlines()[0]
        _say_preset(args.preset)
        return _print_plan(args, name, cfgs, packs, shard, store_if_any(args.store), note)
    check_memory(packs, args.executor, args.workers, device, args.allow_memory)
    store = open_store(args.store)
    _say_preset(args.preset)
    worker = None
    if loggers:  # the default worker with its loggers bound (a partial pickles to the workers)
        from functools import partial

        from depthscale.training import run_pack

        worker = partial(run_pack, loggers=loggers)
    counts = run_sweep(cfgs, store, executor=args.executor, shard=shard, workers=args.workers,
                       device=device, name=name, slurm=slurm, allow_memory=True, worker=worker,
                       pack_memory=budget)
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
    if args.sweep is not None:
        store.load_manifest(args.sweep)  # an unknown sweep: one line naming it, before anything is written
    if args.curves:
        df = store.collect_curves_to(out, sweep=args.sweep)
        runs = int(df["run_id"].nunique()) if len(df) else 0
        _emit(args, {"out": str(out), "rows": len(df), "runs": runs, "columns": list(df.columns)},
              f"wrote {len(df)} curve rows of {runs} runs to {args.out} (columns run_id, step, metric, value)")
        return 0
    df = store.collect_to(out, sweep=args.sweep)
    div = int((df["state"] == "diverged").sum()) if len(df) else 0
    _emit(args, {"out": str(out), "runs": len(df), "diverged": div, "columns": list(df.columns)},
          f"wrote {len(df)} runs to {args.out}" + (f" ({div} diverged: column state)" if div else ""))
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
    # alpha_se may be missing: the fit is then reported as degenerate (status, reason), not refused
    bad = [k for k in ("L0", "c", "alpha") if not math.isfinite(res[k])]
    if bad:
        raise UsageError(f"the fit gives a non-finite {bad[0]}: rescale --losses")
    _emit(args, res)
    return 0


SOFTMAX_FLOOR_DATA = ("a", "b", "d", "P", "k", "samples", "seed")  # theory softmax-floor flags a --run sets


def _softmax_floor_inputs(args):
    """theory softmax-floor: the RunConfig of --store/--run (its data fields and evaluation set
    fill the flags, which may then not be given), or None, the flags' defaults filled in (d, P: the
    cpu preset's nonlinear geometry)."""
    from depthscale.config import geometry

    if (args.store is None) != (args.run is None):
        raise UsageError("--store and --run go together: give both (the floor on a run's evaluation contexts) or neither")
    given = [n for n in SOFTMAX_FLOOR_DATA if getattr(args, n) is not None]
    if args.run is None:
        if args.a is None or args.b is None:
            raise UsageError(f"--{'a' if args.a is None else 'b'} is required (or --store and --run: the floor "
                             f"on a run's evaluation contexts)")
        defaults = dict(geometry("cpu", "nonlinear"), k=2, samples=4096, seed=0)
        for n in SOFTMAX_FLOOR_DATA[2:]:
            if getattr(args, n) is None:
                setattr(args, n, defaults[n])
        return None
    if given:
        raise UsageError(f"--{given[0]} cannot be given with --run: the run's config sets the data and its "
                         f"evaluation contexts")
    store = existing_store(args.store)
    if not store.run_path(args.run).is_dir():
        raise UsageError(f"--run {args.run!r}: no such run in store {store.root}")
    cfg = store.load_config(args.run)
    args.a, args.b, args.d, args.P, args.k = cfg.a, cfg.b, cfg.d, cfg.P, cfg.k
    args.samples, args.seed = cfg.eval_contexts, cfg.eval_seed  # (for check_theory's memory estimate)
    return cfg


def cmd_theory(args) -> int:
    from depthscale import linear_floor, softmax_floor, theory

    run_cfg = _softmax_floor_inputs(args) if args.what == "softmax-floor" else None
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
        if run_cfg is not None:  # on the run's own evaluation contexts (SPEC §3.4), not a fresh sample
            from depthscale.paired import floor_on_eval

            res = floor_on_eval(run_cfg, temperatures=taus, depths=parse_depths(args.depths))
            res = {k: v for k, v in res.items() if not k.startswith("sq_err")}  # per-context arrays
            res["run_id"] = args.run
        else:
            res = softmax_floor.softmax_floor(args.a, args.b, args.k, args.d, args.P, samples=args.samples,
                                              seed=args.seed, temperatures=taus, depths=parse_depths(args.depths))
        if not args.json:
            i = res["iid_depth"]
            where = (f"on the {res['n']} evaluation contexts of run {args.run}: " if run_cfg is not None
                     else f"on {res['samples']} Monte Carlo contexts: ")
            print(where + f"single head {res['single_head']:.4f} ± {res['single_head_se']:.4f} "
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
    ids = parse_ids(parse_experiments(args.id))
    # SLURM jobs pick their device on the node (and a submission that does not wait builds nothing here)
    device = args.device if args.executor == "slurm" else pick_device(args.device)
    if not args.no_run:  # refuse what cannot fit before the store is created
        from depthscale.registry import all_configs
        from depthscale.sweeps import pack_memory_budget, plan

        budget = pack_memory_budget(args.executor, args.workers, device)  # packs split to fit it
        check_memory(plan(all_configs(ids, args.preset), store_if_any(args.store), pack_memory=budget),
                     args.executor, args.workers, device, args.allow_memory)
    _say_preset(args.preset)
    res = reproduce(ids, args.preset, args.store, args.out, executor=args.executor, device=device,
                    workers=args.workers, run=not args.no_run, allow_memory=True)
    if args.json:
        _print_json(res)
    else:
        print(f"figures, tables and claims.json written to {args.out}")
        if "report_md" in res:
            print(_report_text(res))
    return 0


def _report_text(res: dict) -> str:
    """What `report` (and `reproduce`) wrote, as lines of text."""
    lines = [f"report: {res['report_md']} and {res['report_html']}",
             f"claims: {res['claims_json']}: {res['passed']} PASS, {res['failed']} FAIL",
             f"presets: {', '.join(res['presets'])}"]
    for key in ("diverged", "broken"):
        if res.get(key):
            lines.append(f"{key} runs (left out): {', '.join(res[key])}")
    lines += [f"error: {e}" for e in res.get("errors", [])]
    return "\n".join(lines)


def cmd_report(args) -> int:
    from depthscale.report import report

    from depthscale.registry import parse_ids

    out_dir(args.out)
    existing_store(args.store)
    ids = parse_ids(parse_experiments(args.experiment))
    res = report(args.store, args.out, preset=args.preset, ids=ids)
    _say_preset(", ".join(res["presets"]) if args.preset is None else args.preset)
    if args.json:
        _print_json(res)
    else:
        print(_report_text(res))
    return 0


def cmd_bench(args) -> int:
    from depthscale.bench import bench

    check_int(args.steps, "steps", 1, MAX_BENCH_STEPS)
    _say_preset(args.preset)
    res = bench(preset=args.preset, device=pick_device(args.device), dtype=args.dtype, steps=args.steps)
    _emit(args, res, None if args.json else "\n".join(f"{k}: {v}" for k, v in res.items()))
    return 0


def cmd_plot(args) -> int:
    from depthscale.plots import parse_metrics, plot_curves

    out = path_arg(args.out, "out")
    if out.suffix.lower() not in (".png", ".pdf"):
        raise UsageError(f"--out {args.out!r}: use a .png or .pdf suffix")
    if out.is_dir():
        raise UsageError(f"--out {args.out!r} is a directory")
    check_parents(out, args.out)  # a parent that is a file: one line
    metrics = parse_metrics(args.metric)
    store = existing_store(args.store)
    out.parent.mkdir(parents=True, exist_ok=True)
    res = plot_curves(store, out, sweep=args.sweep, runs=args.run, metrics=metrics)
    for rid in res["skipped"]:
        print(f"depthscale: warning: run {rid} has no curves yet (left out)", file=sys.stderr)
    _emit(args, res, f"wrote {out}: {', '.join(metrics)} against step for {len(res['runs'])} runs"
          + (f" (labelled by {', '.join(res['fields'])})" if res["fields"] else ""))
    return 0


def cmd_compare(args) -> int:
    from depthscale.compare import compare, format_text

    if args.store is not None:
        existing_store(args.store)
    res = compare(args.a, args.b, args.store)
    if args.json:
        _print_json(res)
    else:
        print(format_text(res))
    return 0


# ---------------------------------------------------------------- parser
STORE_HELP = "store directory: it holds runs/ and sweeps/ (a path to its runs/ directory works too)"


def build_parser(help_for: tuple[str, dict] | None = None) -> argparse.ArgumentParser:
    """The command's parser. `help_for`: (preset, fields among arguments.CONTEXT_FIELDS) whose
    defaults `train --help` shows (main reads them from the command line; default: cpu)."""
    p = Parser(prog="depthscale", description="Inverse-depth scaling in attention (arXiv 2610.11063).")
    p.add_argument("--version", action="store_true", help="print the package version and exit")
    sub = p.add_subparsers(dest="cmd", required=False, parser_class=Parser)

    def common_preset(sp, required=False):
        sp.add_argument("--preset", choices=PRESETS, default=None if required else "cpu", required=required,
                        help="smoke (seconds: proves the pipeline, not the science), cpu (2 cores), "
                             "paper (full scale: GPUs); the command says on stderr which it used")

    def device(sp):
        sp.add_argument("--device", choices=["cpu", "cuda", "auto"], default="cpu",
                        help="where to train (auto: cuda if available)")

    def store(sp, hlp=STORE_HELP):  # the --store flag of each command
        sp.add_argument("--store", required=True, help=hlp)

    def json_flag(sp, hlp="print JSON on stdout (messages go to stderr)"):
        sp.add_argument("--json", action="store_true", help=hlp)

    def log(sp):
        sp.add_argument("--log", choices=["none", "tensorboard"], default="none",
                        help="also write each run's curves as TensorBoard event files into <run dir>/tensorboard "
                             "(needs pip install 'depthscale[tensorboard]')")

    def allow_memory(sp):
        sp.add_argument("--allow-memory", dest="allow_memory", action="store_true",
                        help="run even where the memory estimate exceeds the available memory")

    sp = sub.add_parser("train", help="train one model", **help_text(
        "Train one model on fresh contexts until it converges (or hits the step cap), measure it on "
        "the evaluation contexts and store the run. A finished run is loaded, not retrained; a killed "
        "run resumes from its checkpoint. --help shows the defaults of the --preset, --model, --task, "
        "--k and --depth given with it; --print-config shows the whole config and where each value "
        "comes from, without training. Every flag is spelt with - or _ (--max-steps, --max_steps).",
        "depthscale train --model nonlinear --task difficult --k 2 --a 0 --b 0 --depth 4 --preset smoke --store runs/smoke --json\n"
        "  depthscale train --preset smoke --model linear --depth 4 --print-config"))
    common_preset(sp)
    sp.add_argument("--store", default=None,
                    help=STORE_HELP + '; created if missing; the run is added to its sweep "train" '
                                      "(default: none; required unless --print-config)")
    sp.add_argument("--print-config", dest="print_config", action="store_true",
                    help="print the resolved config, each field's value and its source (default, preset, geometry, "
                         "recipe, depth or flag), and train nothing; with --store, whether the run is there")
    json_flag(sp, "print one JSON line: run_id, R, R_se, A, C, steps, ... (messages go to stderr); with "
                  "--print-config: run_id, state, config, source")
    log(sp)
    allow_memory(sp)
    device(sp)
    add_config_fields(sp, *(help_for or ("cpu", {})))
    sp.set_defaults(fn=cmd_train)

    sp = sub.add_parser("sweep", help="run an experiment or a grid of runs", **help_text(
        "Expand an experiment id (SPEC §7) or a grid file into runs, skip finished ones, and train the "
        "rest in packs. Safe to run many at once on one store; resumes after any failure.",
        "depthscale sweep --experiment fig6,fig5 --preset cpu --store runs/cpu --executor process\n"
        "  depthscale sweep --grid grid.toml --preset smoke --store runs/smoke --shard 0/4"))
    sp.add_argument("--experiment", help="an experiment id (fig1, fig3..fig14, table1..table6, or a "
                                         "beyond-the-paper id), a comma list (fig6,fig5), all (the paper's) or "
                                         "beyond (default: none; give this or --grid)")
    sp.add_argument("--grid", help="JSON or TOML grid of RunConfig fields, lists crossed "
                                   "(default: none; give this or --experiment)")
    common_preset(sp)
    store(sp)
    sp.add_argument("--executor", choices=["inline", "process", "slurm"], default="inline",
                    help="inline: this process; process: a pool of local workers; slurm: a job array")
    sp.add_argument("--workers", type=int, default=None,
                    help="process executor: worker processes (default: one per core, at most one per pack)")
    sp.add_argument("--shard", help="i/n: run only shard i of n, for hand-written job arrays (default: all)")
    for opt, typ, hlp in (("partition", str, "SLURM partition (default: the cluster's)"),
                          ("time", int, "minutes per job (default: 60)"),
                          ("parallelism", int, "max array tasks at once (default: no limit)"),
                          ("gpus", int, "GPUs per job (default: 0)"), ("cpus", int, "CPUs per job (default: 1)"),
                          ("mem", float, "GB of memory per job (default: the cluster's)")):
        sp.add_argument(f"--slurm-{opt}", dest=f"slurm_{opt}", type=typ, default=None, help=hlp)
    sp.add_argument("--pack-memory", dest="pack_memory", type=float, default=None, metavar="GB",
                    help="split packs until each one's memory estimate fits this many GB (default: this "
                         "machine's memory shared by the workers, or --slurm-mem; set it for GPUs on a cluster)")
    sp.add_argument("--dry-run", dest="dry_run", action="store_true",
                    help="print the runs the sweep would train (their count, the packs, one line per run: its id "
                         "and the fields that vary) and train nothing; the store is not created or written")
    json_flag(sp, "print the counts as one JSON line (messages go to stderr); with --dry-run the plan")
    log(sp)
    allow_memory(sp)
    device(sp)
    sp.set_defaults(fn=cmd_sweep)

    sp = sub.add_parser("status", help="done / running / failed per experiment", **help_text(
        "Count the runs of each sweep in a store by state (runs of `depthscale train` are the sweep "
        "'train'), and list the diverged and broken ones.", "depthscale status --store runs/cpu"))
    store(sp)
    json_flag(sp, "print one JSON list: a record per sweep")
    sp.set_defaults(fn=cmd_status)

    sp = sub.add_parser("collect", help="gather runs into one table", **help_text(
        "One row per finished run: every config field, its state, sweeps and finish time, and every "
        "metric (list-valued ones as native list columns in Parquet, JSON strings in CSV); with "
        "--curves, every run's training curves (finished or still training) as one long table: "
        "run_id, step, metric, value. docs/columns.md describes every column.",
        "depthscale collect --store runs/cpu --out runs.parquet\n"
        "  depthscale collect --store runs/cpu --curves --sweep fig6-cpu --out curves.csv"))
    store(sp)
    sp.add_argument("--out", required=True, help="FILE.parquet or FILE.csv (by suffix)")
    sp.add_argument("--sweep", default=None, help="only the runs of this sweep, as `status` names it (default: every run)")
    sp.add_argument("--curves", action="store_true",
                    help="write the training curves (run_id, step, metric, value) instead of one row per run")
    json_flag(sp, "print what was written as one JSON line")
    sp.set_defaults(fn=cmd_collect)

    sp = sub.add_parser("fit", help="fit R = L0 + c L^-alpha", **help_text(
        "Least squares on log R with bounds and several starts (SPEC §6.1). status is 'degenerate', "
        "with the reason, when there are fewer points than parameters + 1, alpha or L0 ends on a bound, "
        "the SE of alpha is missing or R^2 is undefined: then the numbers are not a law.",
        "depthscale fit --depths 1,2,4,8 --losses 10,6,4,3 --json"))
    sp.add_argument("--depths", required=True, help="comma list of depths L")
    sp.add_argument("--losses", required=True, help="comma list of losses R_L, one per depth")
    sp.add_argument("--no-floor", action="store_true", help="fix L0 = 0")
    json_flag(sp)
    sp.set_defaults(fn=cmd_fit)

    sp = sub.add_parser("theory", help="linear-attention theory and the softmax-ensemble floor", **help_text(
        "exponents: zeta and 2 zeta; curve: constrained and free reference curves (--finite-P: and the "
        "free curve of the empirical S at P); floor: the linear model's R_irr by "
        "Monte Carlo (SPEC §6.2-6.3); softmax-floor: the best single cosine-softmax head and the best "
        "infinitely deep ensemble of them (nonnegative mixture of temperatures, one gain; SPEC §3.4), "
        "with the loss of L layers drawn from that mixture.",
        "depthscale theory softmax-floor --a 0 --b 0 --k 2 --d 16 --P 64 --samples 20000 --seed 0 --json"))
    sp.set_defaults(fn=cmd_theory)
    what = sp.add_subparsers(dest="what", required=True, parser_class=Parser, metavar="{exponents,curve,floor,softmax-floor}")

    from depthscale.config import geometry

    def theory_sub(name, hlp, desc, example, flags):
        tp = what.add_parser(name, help=hlp, **help_text(desc, example))
        run = "run" in flags  # softmax-floor: the data may come from a stored run; defaults filled in later
        geo = geometry("cpu", "nonlinear")

        def data_help(text, default=None):  # a flag a --run sets: its default said here, filled in later
            return text + (f" (default: {default}; not with --run)" if default is not None else " (not with --run)") \
                if run else text

        needed = " (default: none; required without --run, which sets it)" if run else ""
        tp.add_argument("--a", type=float, required=not run, help="input-spectrum exponent, lambda_k = k^-a" + needed)
        tp.add_argument("--b", type=float, required=not run, help="teacher-spectrum exponent, omega_k = k^-b" + needed)
        if "d" in flags:
            tp.add_argument("--d", type=int, default=None if run else 32,
                            help=data_help("input dimension", f"{geo['d']}, the cpu preset's nonlinear geometry"))
        if "P" in flags:
            tp.add_argument("--P", type=int, default=None if run else 128,
                            help=data_help("context length", f"{geo['P']}, the cpu preset's nonlinear geometry"))
        if "k" in flags:
            tp.add_argument("--k", type=int, default=None if run else 2,
                            help=data_help("tokens averaged by the top-k target", 2))
        if "depths" in flags:
            tp.add_argument("--depths", default="1,2,4,8,16,32,64", help="comma list of depths L")
        if "samples" in flags:
            tp.add_argument("--samples", type=int, default=None if run else 4096, help=data_help(flags["samples"], 4096))
            tp.add_argument("--seed", type=int, default=None if run else 0,
                            help=data_help("seed of the Monte Carlo samples", 0))
        if run:
            tp.add_argument("--store", default=None, help="with --run: the store holding the run (default: none)")
            tp.add_argument("--run", default=None, help="a run id: compute the floor on that run's own evaluation "
                                                        "contexts (its data fields, eval_contexts, eval_seed) "
                                                        "(default: none: Monte Carlo contexts)")
        if "temperatures" in flags:
            tp.add_argument("--temperatures", default=None,
                            help="comma list of head temperatures (default: -10 ... 500, 101 values)")
        if "finite_P" in flags:
            tp.add_argument("--finite-P", dest="finite_P", action="store_true",
                            help="add the free curve of the empirical S at this P (easy task; "
                                 "--samples contexts to fit, as many to measure)")
        json_flag(tp)
        if "samples" in flags:
            allow_memory(tp)

    theory_sub("exponents", "zeta and 2 zeta of a spectrum", "zeta and 2 zeta of the spectrum (a, b): the "
               "bounds of the linear model's depth exponent alpha on the easy task (SPEC §6.2).",
               "depthscale theory exponents --a 2 --b 1 --json", {})
    theory_sub("curve", "constrained and free reference curves", "The linear model's reference curves of R_L "
               "over depth at dimension d (population Sigma; --finite-P: and the free curve of the empirical "
               "S at P).", "depthscale theory curve --a 2 --b 1 --d 32 --P 128 --finite-P --samples 10000 --json",
               {"d": 1, "P": 1, "depths": 1, "finite_P": 1,
                "samples": "--finite-P: contexts to fit the free curve (as many again to measure it)"})
    theory_sub("floor", "the linear model's floor R_irr (difficult task)", "R_irr of the top-k task by Monte "
               "Carlo, and its finite-P counterpart (SPEC §6.3).",
               "depthscale theory floor --a 0 --b 0 --k 2 --d 128 --P 1024 --samples 20000 --seed 0 --json",
               {"d": 1, "P": 1, "k": 1, "samples": "Monte Carlo contexts"})
    theory_sub("softmax-floor", "the softmax-ensemble floor", "The best single cosine-softmax head and the best "
               "infinitely deep ensemble of them (nonnegative mixture of temperatures, one gain; SPEC §3.4), "
               "with the loss of L layers drawn from that mixture and the best stack of L heads; on Monte Carlo "
               "contexts, or with --store and --run on that run's own evaluation contexts.",
               "depthscale theory softmax-floor --a 0 --b 0 --k 2 --d 16 --P 64 --samples 20000 --seed 0 --json",
               {"d": 1, "P": 1, "k": 1, "depths": 1, "temperatures": 1, "samples": "Monte Carlo contexts", "run": 1})

    sp = sub.add_parser("plot", help="draw training curves from a store", **help_text(
        "curves: the monitor loss R, the layers' disagreement A - C and the top-1 attention mass (or A, C, lr) "
        "against the training step, one line per run, labelled by the config fields that differ between "
        "the runs; finished runs and runs still training (their rows so far). PNG or PDF at 200 dpi.",
        "depthscale plot curves --store runs/smoke --sweep train --out curves.png"))
    sp.set_defaults(fn=cmd_plot)
    plots = sp.add_subparsers(dest="what", required=True, parser_class=Parser, metavar="{curves}")
    pp = plots.add_parser("curves", help="R, A - C and top-1 mass against step, one line per run", **help_text(
        "One panel per metric, one line per run, labelled by the config fields that differ between the runs "
        "drawn (e.g. L=4). Runs: --run, else the --sweep's, else every run in the store; runs without curves "
        "yet are left out with a warning.",
        "depthscale plot curves --store runs/smoke --sweep grid-smoke --metric R,gap --out curves.pdf"))
    store(pp)
    pp.add_argument("--sweep", default=None, help="only the runs of this sweep, as `status` names it (default: every run)")
    pp.add_argument("--run", nargs="+", action="extend", default=None, metavar="ID",
                    help="these runs (ids or unique prefixes; repeatable) (default: the sweep's, or every run)")
    pp.add_argument("--out", default="curves.png", help="FILE.png or FILE.pdf (by suffix)")
    pp.add_argument("--metric", default="R,gap,top1_mass",
                    help="comma list of panels: R, gap (A - C), top1_mass, A, C, lr")
    json_flag(pp, "print what was drawn as one JSON line: out, metrics, runs (id -> label), fields, skipped")

    sp = sub.add_parser("compare", help="two runs or two stores side by side", **help_text(
        "Two runs (run directories, or run ids with --store): the config fields that differ, the provenance "
        "that differs (device, versions), and R, R_se, A, C, steps, stopped_because side by side with "
        "R_B/R_A. Two stores: the runs finished in both with the same config apart from provenance, each "
        "with R_A, R_B and R_B/R_A, and a summary of the ratios. Reads only.",
        "depthscale compare 1a2b3c4d 5e6f7a8b --store runs/smoke\n"
        "  depthscale compare runs/cpu runs/cpu-gpu --json"))
    sp.add_argument("a", help="run A: a run directory (<store>/runs/<id>), a run id (or a unique prefix) in "
                              "--store; or store A")
    sp.add_argument("b", help="run B or store B, as A")
    sp.add_argument("--store", default=None, help="the store that holds A and B when they are run ids (default: none)")
    json_flag(sp, "print the comparison as one JSON object")
    sp.set_defaults(fn=cmd_compare)

    sp = sub.add_parser("reproduce", help="run and draw figures/tables of the paper", **help_text(
        "Run whatever is missing for the experiments (resumable), then write each figure (PNG, PDF), "
        "table (CSV, Markdown) and claims.json.",
        "depthscale reproduce all --preset cpu --store runs/cpu --out report/cpu"))
    sp.add_argument("id", help="an experiment id (fig1, fig3..fig14, table1..table6, or a beyond-the-paper id), "
                                "a comma list (fig6,fig5), all (every figure and table of the paper) or beyond "
                                "(the report's 'Beyond the paper' experiments)")
    common_preset(sp)
    store(sp, STORE_HELP + "; created if missing")
    sp.add_argument("--out", required=True, help="directory for figures, tables, claims.json and the report")
    sp.add_argument("--executor", choices=["inline", "process", "slurm"], default="process",
                    help="inline: this process; process: a pool of local workers; slurm: a job array")
    sp.add_argument("--workers", type=int, default=None,
                    help="process executor: worker processes (default: one per core, at most one per pack)")
    sp.add_argument("--no-run", action="store_true", help="only draw from what is stored")
    json_flag(sp, "print what was run and written as one JSON line")
    allow_memory(sp)
    device(sp)
    sp.set_defaults(fn=cmd_reproduce)

    sp = sub.add_parser("report", help="write the reproduction report", **help_text(
        "One Markdown and one self-contained HTML report: figures, tables, the paper's numbers beside "
        "ours, PASS/FAIL per claim.", "depthscale report --store runs/cpu --out report/cpu"))
    store(sp)
    sp.add_argument("--out", required=True, help="directory for figures, tables, claims.json and the report")
    sp.add_argument("--preset", choices=PRESETS, default=None,
                    help="the preset to report (default: every preset with finished runs in the store)")
    sp.add_argument("--experiment", default="all",
                    help="the experiments to report: all (the paper's figures and tables), beyond, "
                         "all,beyond, or a comma list of ids (default: all)")
    json_flag(sp, "print what was written (paths, PASS/FAIL counts) as one JSON line")
    sp.set_defaults(fn=cmd_report)

    sp = sub.add_parser("bench", help="packed engine vs a naive loop", **help_text(
        "Time the fig6 depth sweep trained one model at a time and as one pack.",
        "depthscale bench --preset cpu --json"))
    common_preset(sp)
    sp.add_argument("--dtype", choices=["float32", "tf32", "bf16"], default="float32",
                    help="arithmetic of the timed steps")
    sp.add_argument("--steps", type=int, default=None, help="timed steps (default: 20)")
    json_flag(sp)
    device(sp)
    sp.set_defaults(fn=cmd_bench)
    add_spelling_aliases(p)  # --max-steps and --max_steps, --pack-memory and --pack_memory, ...
    return p


def _one_line_warning(message, category, filename, lineno, file=None, line=None) -> None:
    text = str(message).splitlines()[0] if str(message) else category.__name__
    print(f"depthscale: warning: {text}", file=sys.stderr if file is None else file)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else [str(a) for a in argv]
    shown = warnings.showwarning
    warnings.showwarning = _one_line_warning
    try:
        parser = build_parser(help_context(argv))  # train --help: the defaults of its preset and model
        args = parser.parse_args(argv)
        if args.version:
            from depthscale import __version__

            print(f"depthscale {__version__}")
            return 0
        if args.cmd is None:
            raise UsageError("the following arguments are required: cmd")
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
