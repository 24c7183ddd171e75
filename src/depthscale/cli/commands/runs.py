"""The commands that train and read back runs: train, sweep, status, collect (handlers and parsers)."""

from __future__ import annotations

import math
import os
import shlex
import sys
from contextlib import contextmanager, nullcontext
from pathlib import Path

from depthscale.cli.arguments import (add_config_fields, check_memory, check_workers, config_from, config_overrides,
                                  existing_store, grid_from_records, help_text, open_store, parse_experiments,
                                  parse_loggers, parse_shard, pick_device, require_submitit, slurm_options,
                                  store_if_any)
from depthscale.base.userpaths import UsageError, out_file, path_arg
from depthscale.cli.commands.common import (STORE_HELP, allow_memory_flag, device_flag, emit, json_flag, log_flag,
                                        preset_flag, print_json, say_preset, store_flag)
from depthscale.config.run import config_and_sources

TRAIN_SWEEP = "train"  # the manifest `depthscale train` adds its runs to
EXIT_FAILED_RUNS = 3  # sweep and reproduce: everything ran, and some runs failed (bad input: 2; a bug: 1)


def failed_runs_exit(counts: dict | None, store_arg) -> int:
    """The exit code of a sweep (or reproduce) that ran `counts` (run_sweep's): EXIT_FAILED_RUNS,
    with one line on stderr saying how many failed and where their errors are, if any run
    failed; else 0."""
    failed = (counts or {}).get("failed", 0)
    if not failed:
        return 0
    planned = (counts or {}).get("planned", failed)
    print(f"depthscale: {failed} of {_n(planned, 'run')} failed; each one's error is in its run directory's "
          f"FAILED file (runs/<run id>/FAILED); list them with: depthscale status --store {shlex.quote(str(store_arg))}; "
          "the same command run again retries them", file=sys.stderr)
    return EXIT_FAILED_RUNS


def _new_dirs(path) -> list[Path]:
    """The store directories (and parents) at `path` that do not exist yet, deepest first."""
    from depthscale.base.errors import StoreError
    from depthscale.store.store import store_root

    try:
        root = store_root(path)
    except (StoreError, OSError, RuntimeError):  # the command refuses it itself
        return []
    new = [d for d in (root / "runs", root / "sweeps") if not d.exists()]
    while not root.exists() and root != root.parent:
        new.append(root)
        root = root.parent
    return new


@contextmanager
def created_store_cleanup(path):
    """Run a command that may create the store at `path`: if it fails (a full disk, a refusal),
    the directories it created are removed again where they hold no file (nothing finished),
    so a failed command leaves no empty store behind."""
    new = _new_dirs(path)
    try:
        yield
    except BaseException:
        for d in new:
            for sub, _, _ in os.walk(d, topdown=False):  # empty run directories first, then d
                try:
                    os.rmdir(sub)
                except OSError:
                    pass
        raise


def _num(x, spec: str) -> str:
    return "nan" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, spec)


def _shown(v) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def print_config(args) -> int:
    """train --print-config: the resolved config, each field's value and source; nothing is run."""
    cfg, src = config_and_sources(args.preset, **config_overrides(args))  # the run's own fold (config_from's)
    state = None
    if args.store is not None:
        st = store_if_any(args.store)
        state = "new" if st is None or not st.run_path(cfg.run_id).is_dir() else st.run_state(cfg.run_id)
    dct = cfg.to_dict()
    if args.json:
        print_json({"run_id": cfg.run_id, "state": state, "config": dct, "source": src})
        return 0
    where = f"; in --store: {state}" if state is not None else ""
    print(f"run {cfg.run_id} (nothing trained{where}); field, value, source:")
    w, wv = max(map(len, dct)), max(len(_shown(v)) for v in dct.values())
    for k, v in dct.items():
        print(f"  {k:<{w}}  {_shown(v):<{wv}}  {src[k]}")
    return 0


TRAIN_KEYS = ("run_id", "R", "R_se", "A", "C", "steps", "stopped_because", "R_rel", "L", "model", "task",
              "state", "diverged_step", "diverged_reason")


def cmd_train(args) -> int:
    """Train one run into --store (a finished one is only loaded); without --store the run trains in
    memory, its numbers are printed and a note on stderr says nothing was saved."""
    from depthscale.store import manifests
    from depthscale.store.divergence import diverged
    from depthscale.train.training import train_one

    if args.print_config:
        return print_config(args)
    cfg = config_from(args)
    device = pick_device(args.device)
    if args.store is None and args.log not in (None, "none", ()):
        raise UsageError("--log needs --store (the event files go into the run's directory)")
    loggers = parse_loggers(args.log)
    existing = store_if_any(args.store) if args.store is not None else None
    if existing is None or not existing.is_done(cfg.run_id):  # a finished run is only loaded
        check_memory([[cfg]], "inline", None, device, args.allow_memory)
    with created_store_cleanup(args.store) if args.store is not None else nullcontext():
        store = open_store(args.store) if args.store is not None else None
        say_preset(args.preset)
        if store is None:
            print("depthscale: no --store: the run is trained in memory and not saved", file=sys.stderr)
        else:
            manifests.add(store, TRAIN_SWEEP, [cfg.run_id])  # `status` and `collect --sweep train` see it
        met = train_one(cfg, store, device, progress=None if not args.json else False, loggers=loggers)
    div = (store.divergence(cfg.run_id) if store is not None else None) or diverged(met)
    # L, model and task come from the config: a diverged run's metrics hold no measurements
    out = dict(met, L=cfg.L, model=cfg.model, task=cfg.task,
               state="diverged" if div else "done", diverged_step=div["step"] if div else None,
               diverged_reason=div["reason"] if div else None)
    where = f"stored in {store.run_dir(out['run_id'])}" if store is not None else "not saved"
    if args.json:
        print_json({k: out.get(k) for k in TRAIN_KEYS})
    elif div:
        print(f"run {out['run_id']}: {cfg.model} {cfg.task} L={cfg.L} DIVERGED at step {div['step']}: "
              f"{div['reason']} ({out['stopped_because']}); {where}")
    else:
        print(f"run {out['run_id']}: {cfg.model} {cfg.task} L={cfg.L} R={_num(out.get('R'), '.4g')} "
              f"± {_num(out.get('R_se'), '.2g')} ({_num(out.get('R_rel'), '.1%')} of Var y*) after "
              f"{out['steps']} steps ({out['stopped_because']}); {where}")
    return 0


def _sweep_configs(args) -> tuple[list, str]:
    if bool(args.experiment) == bool(args.grid):
        raise UsageError("give exactly one of --experiment ID or --grid FILE")
    if args.experiment:
        from depthscale.experiments.registry import all_configs, parse_ids

        text = parse_experiments(args.experiment)
        ids = parse_ids(text)
        # a comma list names its manifest with '_' (sweep names allow no commas)
        return all_configs(ids, args.preset), f"{'_'.join(ids) if text != 'all' else 'all'}-{args.preset}"
    from depthscale.runs.sweeps import expand_grid, load_grid

    if not os.path.isfile(args.grid):
        from depthscale.base.atomic import file_kind

        what = f"{file_kind(os.stat(args.grid).st_mode)}, not a grid file" if os.path.exists(args.grid) else "no such file"
        raise UsageError(f"--grid {args.grid!r}: {what}")
    if os.path.getsize(args.grid) == 0:
        raise UsageError(f"--grid {args.grid!r} is empty")
    name = os.path.splitext(os.path.basename(args.grid))[0]
    # a run's config.json, or a collected row as JSON, is that run's config (same run id)
    grid = grid_from_records(load_grid(args.grid), f"grid file {args.grid}")
    return expand_grid(grid, args.preset), f"{name}-{args.preset}"


def _n(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _print_plan(args, name: str, plan) -> int:
    """sweep --dry-run: the runs the sweep would train (the sweeps.Plan it would run), pack by pack,
    and what varies between them."""
    from depthscale.cli.compare import differing_fields, run_label
    from depthscale.train.memory import fmt_bytes, pack_bytes
    from depthscale.cli.plots import sort_key

    packs, done, total = plan.packs, plan.skipped_done, len(plan.share)
    memory_note = None if plan.refusal is None or args.allow_memory else \
        "the sweep would be refused: " + str(plan.refusal).splitlines()[0]
    runs = [c for p in packs for c in p]
    vary = differing_fields([c.to_dict() for c in runs]) or ["model", "task", "L"]
    sizes = [pack_bytes(p) for p in packs]
    rows = [{"run_id": c.run_id, "pack": i, **{f: getattr(c, f) for f in vary}}
            for i, p in enumerate(packs) for c in p]
    if args.json:
        print_json({"sweep": name, "dry_run": True, "planned": len(runs), "packs": len(packs), "total": total,
                    "skipped_done": done, "vary": vary, "pack_bytes": sizes, "memory": memory_note, "runs": rows})
        return 0
    print(f"sweep {name}: {_n(len(runs), 'run')} to train in {_n(len(packs), 'pack')} ({done} of {total} "
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


def _pack_memory(args) -> int | None:
    """--pack-memory in bytes (None: not given, the sweep's plan takes this machine's budget)."""
    if args.pack_memory is None:
        return None
    if not math.isfinite(args.pack_memory * 1e9) or args.pack_memory <= 0:  # (1e308 GB: inf bytes)
        raise UsageError(f"--pack-memory must be a finite number > 0 (GB), got {args.pack_memory!r}")
    return int(args.pack_memory * 1e9)


def cmd_sweep(args) -> int:
    from depthscale.runs.sweeps import plan, run_sweep

    path_arg(args.store, "store")
    check_workers(args.workers)  # (issue 28: 10^400 overflowed the memory budget)
    slurm = slurm_options(args)
    require_submitit(args.executor)
    if args.executor == "slurm":
        from depthscale.runs.executors import check_slurm_cluster

        check_slurm_cluster()  # submitit would run the jobs locally instead: refuse before anything is written
    loggers = parse_loggers(args.log)
    cfgs, name = _sweep_configs(args)
    shard = parse_shard(args.shard)
    # SLURM jobs pick their device on the node (the submitting host may have no GPU)
    device = args.device if args.executor == "slurm" else pick_device(args.device)
    # planned once (the memory budget, the packs, their memory check): the dry run prints this plan,
    # the sweep runs it; a sweep that cannot fit is refused before the store is created or its manifest written
    sweep_plan = plan(cfgs, store_if_any(args.store), shard, executor=args.executor, workers=args.workers,
                      device=device, slurm=slurm, pack_memory=_pack_memory(args), memory_flag="--allow-memory")
    if args.dry_run:  # nothing is created, written or trained
        say_preset(args.preset)
        return _print_plan(args, name, sweep_plan)
    sweep_plan.check_memory(args.allow_memory)
    worker = None
    if loggers:  # the default worker with its loggers bound (a partial pickles to the workers)
        from functools import partial

        from depthscale.train.training import run_pack

        worker = partial(run_pack, loggers=loggers)
    with created_store_cleanup(args.store):
        store = open_store(args.store)
        say_preset(args.preset)
        counts = run_sweep(sweep_plan, store, worker=worker, name=name, allow_memory=args.allow_memory)
    emit(args, counts)
    return failed_runs_exit(counts, args.store)


PROBLEM_STATES = ("diverged", "broken", "unloaded", "failed")  # the runs `status` lists, with where and why


def cmd_status(args) -> int:
    from depthscale.store import collect, manifests

    store = existing_store(args.store)
    st = collect.status(store).reset_index()  # one row per sweep: total, then a count per state
    problems = collect.problems(store, states=PROBLEM_STATES)  # diverged, broken, unloaded and failed runs: where and why
    if args.json:
        recs = st.to_dict(orient="records")
        for rec in recs:
            ids = set(manifests.load(store, rec["sweep"]))
            for state in PROBLEM_STATES:
                rec[f"{state}_runs"] = [{k: p[k] for k in ("run_id", "step", "reason")}
                                        for p in problems if p["state"] == state and p["run_id"] in ids]
        print_json(recs)
    else:
        print(st.to_string(index=False) if len(st) else "no sweeps in this store")
        for p in problems:
            at = f" at step {p['step']}" if p["step"] is not None else ""
            print(f"{p['state']} {p['run_id']}{at}: {p['reason']}")
    return 0


def cmd_collect(args) -> int:
    from depthscale.store import collect, manifests

    out = out_file(args.out)
    store = existing_store(args.store)
    if args.sweep is not None:
        manifests.load(store, args.sweep)  # an unknown sweep: one line naming it, before anything is written
    if args.curves:
        df = collect.collect_curves_to(store, out, sweep=args.sweep)
        runs = int(df["run_id"].nunique()) if len(df) else 0
        emit(args, {"out": str(out), "rows": len(df), "runs": runs, "columns": list(df.columns)},
             f"wrote {len(df)} curve rows of {runs} runs to {args.out} (columns run_id, step, metric, value)")
        return 0
    df = collect.collect_to(store, out, sweep=args.sweep)
    div = int((df["state"] == "diverged").sum()) if len(df) else 0
    emit(args, {"out": str(out), "runs": len(df), "diverged": div, "columns": list(df.columns)},
         f"wrote {len(df)} runs to {args.out}" + (f" ({div} diverged: column state)" if div else ""))
    return 0


# ---------------------------------------------------------------- parsers
def add_parsers(sub, help_for: tuple[str, dict] | None = None, config_fields: bool = True) -> None:
    """The parsers of train, sweep, status and collect; `help_for` and `config_fields` as
    cli.build_parser's."""
    _add_train_parser(sub, help_for, config_fields)
    _add_sweep_parser(sub)
    _add_read_parsers(sub)


def _add_train_parser(sub, help_for: tuple[str, dict] | None, config_fields: bool = True) -> None:
    """train: its flags, then (with `config_fields`) one per RunConfig field (arguments.add_config_fields)."""
    sp = sub.add_parser("train", help="train one model", **help_text(
        "Train one model on fresh contexts until it converges (or hits the step cap), measure it on "
        "the evaluation contexts and store the run. A finished run is loaded, not retrained; a killed "
        "run resumes from its checkpoint. --help shows the defaults of the --preset, --model, --task, "
        "--k and --depth given with it; --print-config shows the whole config and where each value "
        "comes from, without training. Every flag is spelt with - or _ (--max-steps, --max_steps).",
        "depthscale train --model nonlinear --task difficult --k 2 --a 0 --b 0 --depth 4 --preset smoke --store runs/smoke --json\n"
        "  depthscale train --preset smoke --model linear --depth 4 --print-config"))
    preset_flag(sp)
    sp.add_argument("--store", default=None,
                    help=STORE_HELP + '; created if missing; the run is added to its sweep "train" '
                                      "(default: none; required unless --print-config)")
    sp.add_argument("--print-config", dest="print_config", action="store_true",
                    help="print the resolved config, each field's value and its source (default, preset, geometry, "
                         "recipe, depth or flag), and train nothing; with --store, whether the run is there")
    json_flag(sp, "print one JSON line: run_id, R, R_se, A, C, steps, ... (messages go to stderr); with "
                  "--print-config: run_id, state, config, source")
    log_flag(sp)
    allow_memory_flag(sp)
    device_flag(sp)
    if config_fields:
        add_config_fields(sp, *(help_for or ("cpu", {})))
    sp.set_defaults(fn=cmd_train)


def _add_sweep_parser(sub) -> None:
    """sweep: what to run (--experiment or --grid), where and how (executor, shard, SLURM, memory)."""
    sp = sub.add_parser("sweep", help="run an experiment or a grid of runs", **help_text(
        "Expand an experiment id (SPEC §7) or a grid file into runs, skip finished ones, and train the "
        "rest in packs. Safe to run many at once on one store; resumes after any failure. Exit code: 0 "
        "when no run failed; 3 when some runs failed (how many, and how to list them, on stderr; the next "
        "sweep retries them); 2 for bad input, a full or read-only disk, or --executor slurm without SLURM.",
        "depthscale sweep --experiment fig6,fig5 --preset cpu --store runs/cpu --executor process\n"
        "  depthscale sweep --grid grid.toml --preset smoke --store runs/smoke --shard 0/4"))
    sp.add_argument("--experiment", help="an experiment id (fig1, fig3..fig14, table1..table6, or a "
                                         "beyond-the-paper id), a comma list (fig6,fig5), all (the paper's) or "
                                         "beyond (default: none; give this or --grid)")
    sp.add_argument("--grid", help="JSON or TOML grid of RunConfig fields, lists crossed "
                                   "(default: none; give this or --experiment)")
    preset_flag(sp)
    store_flag(sp)
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
    log_flag(sp)
    allow_memory_flag(sp)
    device_flag(sp)
    sp.set_defaults(fn=cmd_sweep)


def _add_read_parsers(sub) -> None:
    """status and collect: what a store holds."""
    sp = sub.add_parser("status", help="done / running / failed per experiment", **help_text(
        "Count the runs of each sweep in a store by state (runs of `depthscale train` are the sweep "
        "'train'), and list the diverged, broken, unloaded and failed ones (a failed run's line: the first line "
        "of its FAILED file).", "depthscale status --store runs/cpu"))
    store_flag(sp)
    json_flag(sp, "print one JSON list: a record per sweep")
    sp.set_defaults(fn=cmd_status)

    sp = sub.add_parser("collect", help="gather runs into one table", **help_text(
        "One row per finished run: every config field, its state, sweeps and finish time, and every "
        "metric (list-valued ones as native list columns in Parquet, JSON strings in CSV); with "
        "--curves, every run's training curves (finished or still training) as one long table: "
        "run_id, step, metric, value. docs/columns.md describes every column.",
        "depthscale collect --store runs/cpu --out runs.parquet\n"
        "  depthscale collect --store runs/cpu --curves --sweep fig6-cpu --out curves.csv"))
    store_flag(sp)
    sp.add_argument("--out", required=True, help="FILE.parquet or FILE.csv (by suffix)")
    sp.add_argument("--sweep", default=None, help="only the runs of this sweep, as `status` names it (default: every run)")
    sp.add_argument("--curves", action="store_true",
                    help="write the training curves (run_id, step, metric, value) instead of one row per run")
    json_flag(sp, "print what was written as one JSON line")
    sp.set_defaults(fn=cmd_collect)
