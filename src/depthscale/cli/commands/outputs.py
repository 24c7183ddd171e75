"""The commands that draw, compare and write: plot, compare, reproduce, report; and bench (handlers
and parsers)."""

from __future__ import annotations

import sys
from pathlib import Path

from depthscale.cli.arguments import (MAX_BENCH_STEPS, Parser, check_int, check_workers, existing_store, help_text,
                                  parse_experiments, pick_device, require_submitit, store_if_any)
from depthscale.base.userpaths import UsageError, out_dir, out_file, path_arg
from depthscale.cli.commands.common import (STORE_HELP, allow_memory_flag, device_flag, emit, json_flag, preset_flag,
                                        print_json, say_preset, store_flag)
from depthscale.cli.commands.runs import EXIT_FAILED_RUNS, failed_runs_exit
from depthscale.config.run import PRESETS


def cmd_reproduce(args) -> int:
    from depthscale.experiments.registry import parse_ids
    from depthscale.report.reproduce import reproduce

    path_arg(args.store, "store")
    out_dir(args.out)
    check_workers(args.workers)
    require_submitit(args.executor)
    ids = parse_ids(parse_experiments(args.id))
    # SLURM jobs pick their device on the node (and a submission that does not wait builds nothing here)
    device = args.device if args.executor == "slurm" else pick_device(args.device)
    sweep_plan = None
    if not args.no_run:  # planned once, and refused if it cannot fit, before the store is created
        from depthscale.experiments.registry import all_configs
        from depthscale.runs.sweeps import plan

        sweep_plan = plan(all_configs(ids, args.preset), store_if_any(args.store), executor=args.executor,
                          workers=args.workers, device=device, memory_flag="--allow-memory")
        sweep_plan.check_memory(args.allow_memory)
    say_preset(args.preset)
    res = reproduce(ids, args.preset, args.store, args.out, executor=args.executor, device=device,
                    workers=args.workers, run=not args.no_run, allow_memory=args.allow_memory, plan=sweep_plan,
                    study="auto")
    if args.json:
        print_json(res)
    else:
        print(f"figures, tables and claims.json written to {args.out}")
        if "report_md" in res:
            print(_report_text(res))
    code = failed_runs_exit(res.get("sweep"), args.store) or incomplete_exit(ids, args.preset, args.store)  # 3: why
    return plugin_failures_exit(res) or code


def incomplete_exit(ids, preset: str, store_arg) -> int:
    """EXIT_FAILED_RUNS, with one line on stderr, if a run of the experiments `ids` asked for at `preset`
    is not finished in the store (reproduce --no-run on a store that is not complete, or a SLURM
    submission that did not wait): a reproduction with its runs missing is not a finished one, even
    though its report was written; else 0. (The report's other claims, of experiments not asked for,
    are INCONCLUSIVE where their runs are missing and do not count here.)"""
    from depthscale.experiments.registry import all_configs

    store = store_if_any(store_arg)
    cfgs = all_configs(ids, preset)
    missing = len(cfgs) if store is None else sum(not store.is_done(c.run_id) for c in cfgs)
    if not missing:
        return 0
    what = ids[0] if len(ids) == 1 else f"the {len(ids)} experiments asked for"
    print(f"depthscale: {missing} of {len(cfgs)} runs of {what} at preset {preset} are not finished in {store_arg} "
          f"(the same command without --no-run finishes them)", file=sys.stderr)
    return EXIT_FAILED_RUNS


def plugin_failures_exit(res: dict) -> int:
    """A line on stderr for each plug-in experiment whose figure, table or notes raised (naming its
    file), and exit code 2 if there was one (0 if none): the rest of the report is written."""
    for line in res.get("plugin_errors", []):
        print(f"depthscale: error: {line}", file=sys.stderr)
    return 2 if res.get("plugin_errors") else 0  # (cli.EXIT_USAGE: bad input, here the plug-in)


def _report_text(res: dict) -> str:
    """What `report` (and `reproduce`) wrote, as lines of text."""
    lines = [f"report: {res['report_md']} and {res['report_html']}",
             f"claims: {res['claims_json']}: {res['passed']} PASS, {res['failed']} FAIL, "
             f"{res.get('inconclusive', 0)} INCONCLUSIVE",
             f"presets: {', '.join(res['presets'])}"]
    for key in ("diverged", "broken"):
        if res.get(key):
            lines.append(f"{key} runs (left out): {', '.join(res[key])}")
    lines += [f"error: {e}" for e in res.get("errors", [])]
    return "\n".join(lines)


def cmd_report(args) -> int:
    from depthscale.report.reproduce import report

    from depthscale.experiments.registry import parse_ids

    out_dir(args.out)
    existing_store(args.store)
    ids = parse_ids(parse_experiments(args.experiment))
    study = "auto" if args.study is None else (None if args.study == "none" else args.study)
    if study not in ("auto", None) and not (Path(study) / "decision.json").is_file():
        raise UsageError(f"--study {args.study}: no decision.json there (the convergence study's export: "
                         f"python studies/convergence_study.py), or 'none'")
    res = report(args.store, args.out, preset=args.preset, ids=ids, study=study)
    say_preset(", ".join(res["presets"]) if args.preset is None else args.preset)
    if args.json:
        print_json(res)
    else:
        print(_report_text(res))
    return plugin_failures_exit(res)


def cmd_bench(args) -> int:
    from depthscale.bench.speed import bench

    check_int(args.steps, "steps", 1, MAX_BENCH_STEPS)
    say_preset(args.preset)
    res = bench(preset=args.preset, device=pick_device(args.device), dtype=args.dtype, steps=args.steps)
    emit(args, res, None if args.json else "\n".join(f"{k}: {v}" for k, v in res.items()))
    return 0


def cmd_plot(args) -> int:
    from depthscale.cli.plots import parse_metrics, plot_curves

    out = out_file(args.out, (".png", ".pdf"))  # a directory, a FIFO, a link to /dev/full, /proc/x: one line
    metrics = parse_metrics(args.metric)
    store = existing_store(args.store)
    out.parent.mkdir(parents=True, exist_ok=True)
    res = plot_curves(store, out, sweep=args.sweep, runs=args.run, metrics=metrics)
    for rid in res["skipped"]:
        print(f"depthscale: warning: run {rid} has no curves yet (left out)", file=sys.stderr)
    emit(args, res, f"wrote {out}: {', '.join(metrics)} against step for {len(res['runs'])} runs"
         + (f" (labelled by {', '.join(res['fields'])})" if res["fields"] else ""))
    return 0


def cmd_compare(args) -> int:
    from depthscale.cli.compare import compare, format_text

    if args.store is not None:
        existing_store(args.store)
    res = compare(args.a, args.b, args.store)
    if args.json:
        print_json(res)
    else:
        print(format_text(res))
    return 0


# ---------------------------------------------------------------- parsers
def _add_report_parser(sub) -> None:
    sp = sub.add_parser("report", help="write the reproduction report", **help_text(
        "One Markdown and one self-contained HTML report: figures, tables, the paper's numbers beside "
        "ours, PASS/FAIL/INCONCLUSIVE per claim.", "depthscale report --store runs/cpu --out report/cpu"))
    store_flag(sp)
    sp.add_argument("--out", required=True, help="directory for figures, tables, claims.json and the report")
    sp.add_argument("--preset", choices=PRESETS, default=None,
                    help="the preset to report (default: every preset with finished runs in the store)")
    sp.add_argument("--experiment", default="all",
                    help="the experiments to report: all (the paper's figures and tables), beyond, "
                         "all,beyond, or a comma list of ids (default: all)")
    sp.add_argument("--study", default=None, metavar="DIR",
                    help="the convergence study's export the report opens with (default: "
                         "studies/results/convergence under the current directory, where it exists; 'none': without)")
    json_flag(sp, "print what was written (paths, PASS/FAIL/INCONCLUSIVE counts) as one JSON line")
    sp.set_defaults(fn=cmd_report)


def add_parsers(sub) -> None:
    """The parsers of plot, compare, reproduce, report and bench."""
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
    store_flag(pp)
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
    preset_flag(sp)
    store_flag(sp, STORE_HELP + "; created if missing")
    sp.add_argument("--out", required=True, help="directory for figures, tables, claims.json and the report")
    sp.add_argument("--executor", choices=["inline", "process", "slurm"], default="process",
                    help="inline: this process; process: a pool of local workers; slurm: a job array")
    sp.add_argument("--workers", type=int, default=None,
                    help="process executor: worker processes (default: one per core, at most one per pack)")
    sp.add_argument("--no-run", action="store_true", help="only draw from what is stored")
    json_flag(sp, "print what was run and written as one JSON line")
    allow_memory_flag(sp)
    device_flag(sp)
    sp.set_defaults(fn=cmd_reproduce)

    _add_report_parser(sub)

    sp = sub.add_parser("bench", help="packed engine vs a naive loop", **help_text(
        "Time the fig6 depth sweep trained one model at a time and as one pack.",
        "depthscale bench --preset cpu --json"))
    preset_flag(sp)
    sp.add_argument("--dtype", choices=["float32", "tf32", "bf16"], default="float32",
                    help="arithmetic of the timed steps")
    sp.add_argument("--steps", type=int, default=None, help="timed steps (default: 20)")
    json_flag(sp)
    device_flag(sp)
    sp.set_defaults(fn=cmd_bench)
