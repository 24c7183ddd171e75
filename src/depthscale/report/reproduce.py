"""Reproduce the paper's experiments and write the report (SPEC §7-§9).

`reproduce(ids, preset, store_dir, out_dir)` trains whatever runs of the experiments are missing
from the store (through sweeps.run_sweep: resumable, shardable, any executor), then writes every
figure, table and the claims. `report(store_dir, out_dir)` rebuilds all of that from the store
alone and writes `report.md` and a self-contained `report.html` (images inlined as data URIs).

Layout of out_dir::

    <preset>/fig3.png, fig3.pdf, ...     figures
    <preset>/table1.csv, table1.md, ...  tables, ours beside the paper's
    <preset>/claims.json                 SPEC §9 checks of that preset
    <preset>/selection.json              the recipe chosen per depth and spectrum by the monitor, and
                                         the whole grid's table (where the store holds two points)
    <preset>/theory.json                 cached theory (linear floors, reference curves, fig8; sealed
                                         with its sha256: junk is ignored with a warning, rebuilt)
    <preset>/theory.d/                   theory reproduce computed during its sweep, a file per need
    claims.json                          the checks of every preset in this report
    report.md, report.html

What is built comes from the experiments' records (registry.REGISTRY): each record's figure, table,
claims and notes; the pages are pages.py's.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shlex
import shutil
import time
import traceback
import warnings
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from depthscale.analysis import claims, plotting
from depthscale.analysis.claims import FAIL, INCONCLUSIVE, PASS, count
from depthscale.base import timing
from depthscale.base.atomic import as_float, remove_stale_temp_files, write_json_atomic, write_text_atomic
from depthscale.base.errors import InputError, is_storage_error
from depthscale.base.provenance import versions
from depthscale.config.run import PRESETS
from depthscale.report import figcheck, tail
from depthscale.report.answer import answer_section
from depthscale.report.pages import render_html, render_markdown
from depthscale.experiments.registry import (BEYOND_IDS, IDS, PLUGIN_SOURCES, REGISTRY, all_configs, claims_of, resolve_ids,
                                 summary, theory_needs)
from depthscale.analysis.results import Results, Theory, read_checked_cache, split_diverged, theory_entries_dir, theory_jobs
from depthscale.analysis.selection import main_envelope
from depthscale.config.paper import PAPER
from depthscale.config.records import FLOOR_SAMPLES, check_preset, geometry_line, resolve_seeds
from depthscale.report.tables import write_table
from depthscale.runs.per_context import StoredRuns
from depthscale.store import collect
from depthscale.store.store import Store, store_part

log = logging.getLogger(__name__)


def sweep_name(ids: Sequence[str], preset: str) -> str:
    """Manifest name of a reproduce sweep (collect.status(store) reports it)."""
    ids = tuple(ids)
    tag = "all" if ids == IDS else "beyond" if ids == BEYOND_IDS else "_".join(ids)
    if len(tag) > 80:
        tag = f"{len(ids)}ids"
    return f"reproduce-{preset}-{tag}"


def reproduce(ids: str | Iterable[str] = "all", preset: str = "cpu", store_dir: str | Path = "store",
              out_dir: str | Path = "report", *, executor: str = "inline", device: str = "cpu",
              run: bool = True, seeds: int | Sequence[int] | None = None,
              shard: tuple[int, int] | str | None = None, workers: int | None = None,
              max_pack: int = 64, slurm: dict | None = None, progress: bool | None = None,
              build: bool | None = None, overrides: dict | None = None, allow_memory: bool = False,
              plan=None, study=None) -> dict:
    """Run the missing runs of experiments `ids` at `preset`, then write their figures, tables,
    claims and the report.

    ids: 'all', an id, a comma-separated string or a list (SPEC §7 ids: fig1, fig3..fig14,
    table1..table5). seeds: a count or a list (default registry.PRESET_SEEDS[preset]).
    executor/shard/workers/max_pack/slurm/device: passed to sweeps.plan. run=False only
    builds from what is stored. build: write the artifacts (default: yes, except for a shard or
    a SLURM submission that does not wait, whose runs are not finished when this returns).
    overrides: further RunConfig fields for every run (e.g. {"max_steps": 500}).
    allow_memory: run packs whose memory estimate exceeds the available memory (see run_sweep).
    plan: the sweeps.Plan of these configs, made by the caller (the CLI plans, and checks its
    memory, before the store is created); None: planned here, once (sweeps.plan).
    With the process executor (and a build to follow) the theory the report needs and its cache
    lacks is computed in the sweep's worker pool after the packs (results.theory_jobs), and so are
    the best cosine stacks the certificates read that the store's cache lacks (tail.floor_jobs).
    Returns {"configs", "sweep" (run_sweep's counts or None), "out_dir", "theory_in_sweep" (theory
    needs submitted to the pool), "floors_in_sweep" (floors submitted), "claims", ...}.
    """
    ids = resolve_ids(ids)
    overrides = dict(overrides or {})
    configs = all_configs(ids, preset, seeds, **overrides)
    if build is not False:
        check_out(out_dir)  # before anything is trained (the theory is cached under out_dir)
    store = Store(store_dir)
    counts = None
    if build is None:
        build = shard is None and not (executor == "slurm" and not (slurm or {}).get("wait"))
    # the report's theory, computed in the process pool while the sweep runs (after its packs, in
    # the tail where a worker would idle), each need into its own file beside the report's cache
    # (results.compute_theory_entry): the report then finds it cached
    # and the best cosine stacks the certificates compare with (tail.floor_jobs), into the store's cache
    side = bool(run and configs and build and executor == "process")
    jobs = theory_jobs(theory_needs(ids, preset), preset, Path(out_dir) / preset / "theory.json", device) if side else []
    floors = tail.floor_jobs(configs, store_dir, device) if side else []
    if run and configs:
        from depthscale.runs.sweeps import plan as plan_sweep
        from depthscale.runs.sweeps import run_sweep

        how = dict(executor=executor, workers=workers, device=device, slurm=slurm, max_pack=max_pack)
        if plan is None:
            plan = plan_sweep(configs, store, shard, **how)
        elif [c.run_id for c in plan.configs] != [c.run_id for c in configs]:
            raise InputError("reproduce's plan is not a plan of its configs (sweeps.plan of registry.all_configs)")
        counts = run_sweep(plan, store, progress=progress, name=sweep_name(ids, preset), allow_memory=allow_memory,
                           extra_jobs=jobs + floors)
        # a study's second phase (Experiment.followup: runs chosen from the first phase's results)
        later = _followup_configs(ids, preset, store, overrides) if build else []
        if later:
            more = run_sweep(plan_sweep(later, store, shard, **how), store, progress=progress,
                             name=sweep_name(ids, preset) + "-followup", allow_memory=allow_memory)
            counts = {k: counts.get(k, 0) + more.get(k, 0) if isinstance(counts.get(k, 0), int) else counts[k]
                      for k in {**counts, **more}}
    out = {"ids": list(ids), "preset": preset, "seeds": list(resolve_seeds(preset, seeds)),
           "configs": len(configs), "sweep": counts, "out_dir": str(Path(out_dir)),
           "theory_in_sweep": len(jobs), "floors_in_sweep": len(floors)}
    if build:
        out.update(report(store_dir, out_dir, preset=preset, ids=ids, overrides=overrides,
                          device=device, progress=progress, study=study))
    return out


def _followup_configs(ids, preset: str, store, overrides: dict) -> list:
    """The runs the experiments `ids` add after their own (Experiment.followup), read off the store
    with the reproduce's `overrides`."""
    out = []
    for i in ids:
        e = REGISTRY[i]
        if e.followup is not None:
            out += e.followup(Results.from_store(StoredRuns(store), preset, overrides))
    return out


def report(store_dir: str | Path, out_dir: str | Path, preset: str | None = None,
           ids: str | Iterable[str] = "all", *, overrides: dict | None = None,
           device: str = "cpu", progress: bool | None = None, study=None) -> dict:
    """Rebuild figures, tables and claims from the store and write report.md and report.html.

    The report opens with the answer (report/answer.py): what reproduces and what does not, from the
    claims and the convergence study's export in `study` (a directory; "auto": the checkout's
    studies/results/convergence where it exists, the CLI's default; None: none).

    preset None: every preset with finished runs in the store (paper, cpu, smoke order).
    Never trains and never writes to the store. Theory (linear floors, reference curves) is
    computed on `device` the first time and cached in <out_dir>/<preset>/theory.json.
    Returns {"report_md", "report_html", "claims_json", "presets", "passed", "failed",
    "inconclusive", "errors", "figure_checks"} (claims counted PASS, FAIL and INCONCLUSIVE
    separately; figure_checks: {"<preset>/<id>": [problem, ...]} of the figures that fail
    figcheck.check, each also printed as one "figure check:" line, never failing the build).
    """
    ids = resolve_ids(ids)
    store = Store(store_dir, readonly=True)
    # a broken run is skipped with a warning naming it; a diverged one is finished, but no result:
    # kept out of every figure, table and claim
    df, diverged = split_diverged(collect.collect(store))
    broken = [store.run_info(r) for r in store.run_ids() if store.is_broken(r)]
    if preset is None:
        found = {p for frame in (df, diverged) if len(frame) and "preset" in frame.columns
                 for p in frame["preset"]}
        presets = [p for p in PRESETS[::-1] if p in found]
        if not presets:
            raise InputError(f"store {store.root} has no finished runs of a known preset; pass preset=")
    else:
        check_preset(preset)
        presets = [preset]
    out_dir = Path(out_dir)
    check_out(out_dir)
    made = _first_missing(out_dir)  # the directory this report creates (None: it exists)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # the user's path (e.g. not writable)
        raise InputError(str(e)) from None
    remove_leftovers(out_dir, presets)
    try:
        return _write_report(store, df, diverged, broken, presets, ids, out_dir, overrides, device, progress, study)
    except BaseException:  # nothing partial left behind: a directory this report made goes with it
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)
        raise


def check_out(out_dir: str | os.PathLike) -> None:
    """InputError if `out_dir` is inside a store (its root, runs/, a run's directory, sweeps/...:
    store.store_part): a report is never written into a store."""
    inside = store_part(out_dir)
    if inside is not None:
        raise InputError(f"--out {out_dir} is inside the store {inside[0]} ({inside[1]}); write the report "
                         f"outside the store")


def remove_leftovers(out_dir: Path, presets: Sequence[str]) -> None:
    """The temp files an earlier report (or reproduce) killed with -9 left beside its outputs, removed
    (atomic.remove_stale_temp_files: write_atomic's names, a minute old): in out_dir, each preset's
    directory and its theory entries."""
    for p in presets:
        remove_stale_temp_files(out_dir / p)
        remove_stale_temp_files(theory_entries_dir(out_dir / p / "theory.json"))
    remove_stale_temp_files(out_dir)


def _first_missing(path: Path) -> Path | None:
    """The outermost of `path` and its parents that does not exist yet (what mkdir(parents=True)
    would create first), or None if `path` exists."""
    missing = None
    for p in (path, *path.parents):
        if os.path.lexists(p):
            break
        missing = p
    return missing


def _write_report(store, df, diverged, broken, presets, ids, out_dir: Path, overrides, device, progress,
                  study=None) -> dict:
    """report's body once out_dir exists: every preset's section, claims.json, report.md and .html."""
    sections, all_claims, errors, plugin_errors = [], [], [], []
    for p in presets:
        drawn, not_run = covered(with_studies(ids, df, p), df, p)
        sec = build_preset(p, df, store, out_dir, drawn, overrides, device, progress, diverged=diverged,
                           finished=_finished(df) | _finished(diverged),
                           resume=lambda extra, p=p: resume_command((*ids, *extra), p, store.root, out_dir))
        sec["not_run"] = list(not_run)
        sec["run_states"] = run_states(df, diverged, p)
        sections.append(sec)
        all_claims += sec["claims"]
        errors += [f"{p}/{k}: {v}" for k, v in sec["errors"].items()]
        for k, problems in sec["figure_checks"].items():
            print(f"figure check: {p}/{k} " + "; ".join(problems), flush=True)
        plugin_errors += [f"experiment {k} of plug-in {PLUGIN_SOURCES[k]} failed at preset {p}: "
                          f"{str(v).splitlines()[0] if str(v) else v}" for k, v in sec["errors"].items() if k in PLUGIN_SOURCES]
    claims_path = out_dir / "claims.json"
    write_json_atomic(claims_path, all_claims)
    counted = count(all_claims)
    header = _header()
    header["broken"] = broken
    header["answer"] = answer_section(all_claims, study, presets[0], out_dir)
    md = render_markdown(header, sections)
    write_text_atomic(out_dir / "report.md", md)
    write_text_atomic(out_dir / "report.html", render_html(header, sections, out_dir))
    return {"report_md": str(out_dir / "report.md"), "report_html": str(out_dir / "report.html"),
            "claims_json": str(claims_path), "presets": presets,
            "passed": counted[PASS], "failed": counted[FAIL], "inconclusive": counted[INCONCLUSIVE],
            "errors": errors, "plugin_errors": plugin_errors,
            "figure_checks": {f"{sec['preset']}/{k}": v for sec in sections for k, v in sec["figure_checks"].items()},
            "diverged": sorted(diverged["run_id"]) if len(diverged) else [],
            "incomplete": {sec["preset"]: sec["incomplete"] for sec in sections if sec.get("incomplete")},
            "broken": [b["run_id"] for b in broken]}


def run_states(df, diverged, preset: str) -> dict:
    """Finished runs of `preset` by state: the done count and each diverged run (id, model, L,
    step, reason)."""
    def of(frame):
        return frame[frame["preset"] == preset] if len(frame) and "preset" in frame.columns else frame.iloc[0:0]

    rows = []
    for _, r in of(diverged).sort_values("run_id").iterrows() if len(of(diverged)) else ():
        step = r.get("diverged_step")
        rows.append({"run_id": r["run_id"], "model": r.get("model"), "L": int(r["L"]) if _isnum(r.get("L")) else None,
                     "step": int(step) if _isnum(step) else None, "reason": r.get("diverged_reason")})
    return {"done": int(len(of(df))), "diverged": rows}


def build_preset(preset: str, df, store, out_dir: Path, ids: Sequence[str],
                 overrides: dict | None = None, device: str = "cpu",
                 progress: bool | None = None, finished: set | None = None, resume=None, diverged=None) -> dict:
    """Figures, tables, claims and provenance of one preset, written under out_dir/<preset>/.
    `finished`: the run ids the store has finished (default: df's); `resume(extra_ids)`: the command
    that produced the report with the experiments `extra_ids` added, which finishes the store (said
    where runs the claims read are missing, `incomplete`)."""
    pdir = out_dir / preset
    pdir.mkdir(parents=True, exist_ok=True)
    # the claims, figures and tables read the monitor-chosen recipe per depth and spectrum (SPEC §4)
    res = main_envelope(Results(df, preset, StoredRuns(store), overrides, diverged=diverged))
    if res.selection is not None:
        write_json_atomic(pdir / "selection.json", res.selection)
    th = Theory(preset, cache=pdir / "theory.json", device=device, progress=bool(progress))
    th.get = timing.timed(th.get, "theory")  # the build's phases, for the provenance's timing table
    artifacts, tables, errs, build, checks = {}, {}, {}, {}, {}
    t0 = time.perf_counter()
    for i in ids:
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore", RuntimeWarning)  # partial data: nan, not noise
                with timing.record() as rec, timing.phase("figures"):
                    paths = _write_one(i, res, th, pdir, tables, checks)
                build[i] = rec.phases
            artifacts[i] = [str(pp.relative_to(out_dir)) for pp in paths]
        except Exception as e:  # noqa: BLE001 - one broken artifact must not sink the report
            if is_storage_error(e):  # a full (read-only) disk would fail every artifact: one line
                raise
            errs[i] = f"{type(e).__name__}: {e}"
            if i not in PLUGIN_SOURCES or os.environ.get("DEPTHSCALE_DEBUG"):  # a plug-in's: one line (its command's)
                log.error("building %s/%s failed:\n%s", preset, i, traceback.format_exc())
    notes = {}
    for i in ids:
        if REGISTRY[i].notes is not None and i not in errs:
            try:
                notes[i] = REGISTRY[i].notes(res)
            except Exception as e:  # noqa: BLE001
                errs[i] = f"{type(e).__name__}: {e}"
    with timing.record() as rec, timing.phase("report"):
        # one count of claims per store, whichever command asks: every paper claim (and the beyond
        # claims of the beyond experiments built), not only those of the ids drawn
        cl = claims.check_all(res, th, claims_of(claim_ids(ids)))
        incomplete = note_missing(cl, preset, _finished(df) if finished is None else finished, overrides, pdir, resume)
        write_json_atomic(pdir / "claims.json", cl)
    build["claims"] = rec.phases
    prov = provenance(res, ids, time.perf_counter() - t0)
    prov["phase_timing"] = phase_timing(store, preset, ids, build, pdir, overrides)
    runs = {row["id"]: row[preset] for row in summary((preset,))}
    return {"preset": preset, "ids": list(ids), "artifacts": artifacts, "tables": tables,
            "claims": cl, "errors": errs, "provenance": prov, "runs": runs, "notes": notes, "incomplete": incomplete,
            "figure_checks": {i: v for i, v in checks.items() if v}}


MISSING_FILE = "missing_runs.json"


def resume_command(ids: Sequence[str], preset: str, store_dir, out_dir) -> str:
    """The reproduce of `ids` (each once, in order) at `preset` into `store_dir` and `out_dir`: run again,
    it trains only the runs the store has not finished, then rebuilds the report."""
    ids = tuple(dict.fromkeys(ids))
    which = "all" if set(ids) == set(IDS) else "beyond" if set(ids) == set(BEYOND_IDS) else ",".join(ids)
    return (f"depthscale reproduce {shlex.quote(which)} --preset {preset} --store {shlex.quote(str(store_dir))} "
            f"--out {shlex.quote(str(out_dir))}")


def note_missing(cl: list[dict], preset: str, finished: set, overrides: dict | None, pdir: Path,
                 resume=None) -> dict | None:
    """Issue 51 (a report never judges what was not measured): the runs the claims `cl` read (the
    configs of the experiments they use, default seeds) that the store has not finished, written to
    <preset>/missing_runs.json; each claim that is INCONCLUSIVE for missing runs says how many of
    its runs are missing and where their ids are. Returns {"missing", "expected", "file",
    "command"} for the report's first lines, or None when nothing is missing."""
    uses = sorted({u for c in cl for u in c["uses"]})
    expected = {u: [c.run_id for c in REGISTRY[u].configs(preset, None, **(overrides or {}))] for u in uses}
    missing = {u: [r for r in ids if r not in finished] for u, ids in expected.items()}
    all_missing = {r for ids in missing.values() for r in ids}
    if not all_missing:
        return None
    where = f"{preset}/{MISSING_FILE}"
    for c in cl:
        if not c["detail"].startswith("missing runs"):
            continue
        mine = {r for u in c["uses"] for r in missing.get(u, [])}
        total = {r for u in c["uses"] for r in expected.get(u, [])}
        if mine:
            c["detail"] = (f"missing runs: {len(mine)} of {len(total)} runs of {', '.join(c['uses'])} not finished "
                           f"(run ids in {where}); " + c["detail"][len("missing runs"):].lstrip(": "))
    n_expected = len({r for ids in expected.values() for r in ids})
    # the command that produced the report, with every experiment whose runs are missing added: a report
    # of some experiments still checks every paper claim, and only their runs finish it
    order = list(REGISTRY)
    extra = sorted((u for u, ids in missing.items() if ids), key=lambda u: order.index(u) if u in order else len(order))
    resume = resume(extra) if resume is not None else ""
    write_json_atomic(pdir / MISSING_FILE, {"command": resume, "missing": len(all_missing), "expected": n_expected,
                                            "runs": {u: ids for u, ids in missing.items() if ids}})
    # the report shows the command with its own directory named, not the path (a report is self-contained)
    out = resume.rsplit(" --out ", 1)
    shown = f"{out[0]} --out <this report's directory>" if len(out) == 2 else resume
    return {"missing": len(all_missing), "expected": n_expected, "file": where, "command": resume, "shown": shown}


def claim_ids(ids: Sequence[str]) -> tuple[str, ...]:
    """The experiments whose claims a report checks: the paper's always, the beyond ones built."""
    return tuple(IDS) + tuple(i for i in ids if REGISTRY[i].part == "beyond")


def _finished(df) -> set:
    """The run ids of a collected frame."""
    return set(df["run_id"]) if len(df) and "run_id" in df.columns else set()


def covered(ids: Sequence[str], df, preset: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the experiments of `ids` the store covers at `preset`: with at least one finished run, or
    needing none (theory only); the others, listed in the report as not run). A partial store's
    report draws what it has; its claims are still every paper claim (missing runs: INCONCLUSIVE)."""
    have = _finished(df)
    drawn, not_run = [], []
    for i in ids:
        cfgs = REGISTRY[i].configs(preset)
        (drawn if not cfgs or any(c.run_id in have for c in cfgs) else not_run).append(i)
    return tuple(drawn), tuple(not_run)


def with_studies(ids: Sequence[str], df, preset: str) -> tuple[str, ...]:
    """`ids` and every study (registry part "study") with a finished run of `preset` in the store."""
    have = _finished(df)
    extra = [i for i, e in REGISTRY.items() if e.part == "study" and i not in ids
             and any(c.run_id in have for c in e.configs(preset))]
    return tuple(ids) + tuple(extra)


def _write_one(exp_id: str, res: Results, th: Theory, pdir: Path, tables: dict, checks: dict) -> list[Path]:
    """The experiment's figure, its table, or both (its record's `figure` and `table`)."""
    e = REGISTRY[exp_id]
    paths: list[Path] = []
    if e.figure is not None:
        drawn = []  # the built figure, kept for the figure check (issue 36): it never fails the build
        paths += plotting.write_figure(lambda r, t: drawn.append(e.figure(r, t)) or drawn[-1], exp_id, res, th, pdir)
        checks[exp_id] = figcheck.check(drawn[0])
    if e.table is not None:
        frame, tpaths = write_table(exp_id, res, th, pdir)
        tables[exp_id] = frame
        paths += tpaths
    return paths


# ---------------------------------------------------------------- provenance

def _header() -> dict:
    return {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "versions": versions(("torch", "numpy", "scipy", "pandas", "matplotlib")),
            "paper": PAPER["source"]}


def provenance(res: Results, ids: Sequence[str], build_seconds: float = float("nan")) -> dict:
    rows = res.used_rows([REGISTRY[i] for i in ids])
    secs = [float(r.get("train_seconds")) for r in rows if _isnum(r.get("train_seconds"))]
    expected = len(all_configs(ids, res.preset))
    return {
        "preset": res.preset,
        "runs_used": len(rows),
        "runs_expected_default_seeds": expected,
        "runs_in_store_for_preset": len(res),
        "seeds": sorted({int(r["seed"]) for r in rows}),
        "train_seconds_total": sum(secs),
        "stopped_because": dict(Counter(str(r.get("stopped_because")) for r in rows)),
        "devices": dict(Counter(str(r.get("device")) for r in rows)),
        "run_versions": dict(Counter(f"depthscale {r.get('depthscale')}, torch {r.get('torch')}" for r in rows)),
        "cells_only_other_recipe": len(res.other_recipe),
        "floor_samples": FLOOR_SAMPLES[res.preset],
        "geometry": geometry_line(res.preset),
        "theory_needs": len(theory_needs(ids, res.preset)),
        "build_seconds": build_seconds,
    }


def phase_timing(store, preset: str, ids: Sequence[str], build: dict, pdir: Path,
                 overrides: dict | None = None) -> dict:
    """Seconds per experiment and phase: training phases from the pack records the workers wrote
    into <store>/timing/, build phases (theory, figures, report) of this build. Theory is cached
    in theory.json, so a later build reads it in no time: the theory seconds shown are those of
    the build that computed them (kept in <out>/<preset>/build_timing.json)."""
    path = pdir / "build_timing.json"
    old = read_build_timing(path)
    for e, ph in build.items():
        ph["theory"] = max(ph.get("theory", 0.0), old.get(e, 0.0))
    write_json_atomic(path, build)
    experiments = {i: {c.run_id for c in REGISTRY[i].configs(preset, None, **(overrides or {}))} for i in ids}
    return timing.experiment_table(timing.read_records(store.root), experiments, build)


def read_build_timing(path: Path) -> dict[str, float]:
    """The theory seconds per experiment an earlier build kept in `path` (build_timing.json:
    {experiment: {phase: seconds}}), {} if there is none. A cache is validated, never trusted: a
    file that is not that shape (junk, a FIFO, a negative or non-finite number) is ignored with one
    StaleCacheWarning naming it, and rewritten by this build."""
    doc = read_checked_cache(
        path, lambda d: isinstance(d, dict) and all(
            isinstance(ph, dict) and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                         and math.isfinite(v) and v >= 0 for v in ph.values())
            for ph in d.values()),
        "build timing cache", "not a {experiment: {phase: seconds}} file (junk or edited); rewritten by this build")
    if doc is None:
        return {}
    return {e: float(ph.get("theory", 0.0)) for e, ph in doc.items()}


def _isnum(x) -> bool:
    return not math.isnan(as_float(x))


__all__ = ["reproduce", "report", "build_preset", "provenance", "sweep_name", "run_states", "claim_ids", "with_studies",
           "covered", "phase_timing"]
