"""Reproduce the paper's experiments and write the report (SPEC §7-§9).

`reproduce(ids, preset, store_dir, out_dir)` trains whatever runs of the experiments are missing
from the store (through sweeps.run_sweep: resumable, shardable, any executor), then writes every
figure, table and the claims. `report(store_dir, out_dir)` rebuilds all of that from the store
alone and writes `report.md` and a self-contained `report.html` (images inlined as data URIs).

Layout of out_dir::

    <preset>/fig3.png, fig3.pdf, ...     figures
    <preset>/table1.csv, table1.md, ...  tables, ours beside the paper's
    <preset>/claims.json                 SPEC §9 checks of that preset
    <preset>/theory.json                 cached theory (linear floors, reference curves, fig8)
    <preset>/theory.d/                   theory reproduce computed during its sweep, a file per need
    claims.json                          the checks of every preset in this report
    report.md, report.html
"""

from __future__ import annotations

import base64
import html
import json
import logging
import math
import time
import traceback
import warnings
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from depthscale import claims, timing, versions
from depthscale.atomic import as_float, write_json_atomic
from depthscale.config import PRESETS
from depthscale.errors import InputError
from depthscale.figures import FIGURES, write_figure
from depthscale.formatting import number
from depthscale.registry import (BEYOND_IDS, FLOOR_SAMPLES, GEOMETRY_EVIDENCE, IDS, PAPER, REGISTRY, all_configs, check_preset,
                                 geometry_line, resolve_ids, resolve_seeds, summary, theory_needs)
from depthscale.results import Results, Theory, split_diverged, theory_jobs
from depthscale.store import Store
from depthscale.tables import TABLES, markdown_table, write_table
from depthscale import budget

# the studies (registry part "study": run only when named) draw and tabulate here
FIGURES["budget"] = budget.figure
TABLES["budget"] = budget.table_frame
# lines of text shown under a study's figure and table: its decision rule and outcome
NOTES = {"budget": budget.notes}

log = logging.getLogger(__name__)


def sweep_name(ids: Sequence[str], preset: str) -> str:
    """Manifest name of a reproduce sweep (store.status() reports it)."""
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
              build: bool | None = None, overrides: dict | None = None, allow_memory: bool = False) -> dict:
    """Run the missing runs of experiments `ids` at `preset`, then write their figures, tables,
    claims and the report.

    ids: 'all', an id, a comma-separated string or a list (SPEC §7 ids: fig1, fig3..fig14,
    table1..table5). seeds: a count or a list (default registry.PRESET_SEEDS[preset]).
    executor/shard/workers/max_pack/slurm/device: passed to sweeps.run_sweep. run=False only
    builds from what is stored. build: write the artifacts (default: yes, except for a shard or
    a SLURM submission that does not wait, whose runs are not finished when this returns).
    overrides: further RunConfig fields for every run (e.g. {"max_steps": 500}).
    allow_memory: run packs whose memory estimate exceeds the available memory (see run_sweep).
    With the process executor (and a build to follow) the theory the report needs and its cache
    lacks is computed in the sweep's worker pool after the packs (results.theory_jobs).
    Returns {"configs", "sweep" (run_sweep's counts or None), "out_dir", "theory_in_sweep" (theory
    needs submitted to the pool), "claims", ...}.
    """
    ids = resolve_ids(ids)
    overrides = dict(overrides or {})
    configs = all_configs(ids, preset, seeds, **overrides)
    store = Store(store_dir)
    counts = None
    if build is None:
        build = shard is None and not (executor == "slurm" and not (slurm or {}).get("wait"))
    # the report's theory, computed in the process pool while the sweep runs (after its packs, in
    # the tail where a worker would idle), each need into its own file beside the report's cache
    # (results.compute_theory_entry): the report then finds it cached
    jobs = theory_jobs(ids, preset, Path(out_dir) / preset / "theory.json", device) \
        if run and configs and build and executor == "process" else []
    if run and configs:
        from depthscale.sweeps import run_sweep

        counts = run_sweep(configs, store, executor=executor, shard=shard, workers=workers,
                           device=device, max_pack=max_pack, progress=progress,
                           name=sweep_name(ids, preset), slurm=slurm, allow_memory=allow_memory,
                           extra_jobs=jobs)
    out = {"ids": list(ids), "preset": preset, "seeds": list(resolve_seeds(preset, seeds)),
           "configs": len(configs), "sweep": counts, "out_dir": str(Path(out_dir)),
           "theory_in_sweep": len(jobs)}
    if build:
        out.update(report(store_dir, out_dir, preset=preset, ids=ids, overrides=overrides,
                          device=device, progress=progress))
    return out


def report(store_dir: str | Path, out_dir: str | Path, preset: str | None = None,
           ids: str | Iterable[str] = "all", *, overrides: dict | None = None,
           device: str = "cpu", progress: bool | None = None) -> dict:
    """Rebuild figures, tables and claims from the store and write report.md and report.html.

    preset None: every preset with finished runs in the store (paper, cpu, smoke order).
    Never trains and never writes to the store. Theory (linear floors, reference curves) is
    computed on `device` the first time and cached in <out_dir>/<preset>/theory.json.
    Returns {"report_md", "report_html", "claims_json", "presets", "passed", "failed", "errors"}.
    """
    ids = resolve_ids(ids)
    store = Store(store_dir, readonly=True)
    # a broken run is skipped with a warning naming it; a diverged one is finished, but no result:
    # kept out of every figure, table and claim
    df, diverged = split_diverged(store.collect())
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
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # the user's path (e.g. not writable)
        raise InputError(str(e)) from None
    sections, all_claims, errors = [], [], []
    for p in presets:
        sec = build_preset(p, df, store, out_dir, with_studies(ids, df, p), overrides, device, progress)
        sec["run_states"] = run_states(df, diverged, p)
        sections.append(sec)
        all_claims += sec["claims"]
        errors += [f"{p}/{k}: {v}" for k, v in sec["errors"].items()]
    claims_path = out_dir / "claims.json"
    write_json_atomic(claims_path, all_claims)
    header = _header()
    header["broken"] = broken
    md = render_markdown(header, sections)
    (out_dir / "report.md").write_text(md)
    (out_dir / "report.html").write_text(render_html(header, sections, out_dir))
    return {"report_md": str(out_dir / "report.md"), "report_html": str(out_dir / "report.html"),
            "claims_json": str(claims_path), "presets": presets,
            "passed": sum(c["pass"] for c in all_claims),
            "failed": sum(not c["pass"] for c in all_claims), "errors": errors,
            "diverged": sorted(diverged["run_id"]) if len(diverged) else [],
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


def _state_lines(sec: dict, header: dict) -> list[str]:
    st = sec.get("run_states") or {"done": 0, "diverged": []}
    out = [f"run states: {st['done']} done, {len(st['diverged'])} diverged (left out of every figure, "
           f"table and claim), {len(header.get('broken') or [])} broken in the store (skipped)"]
    for r in st["diverged"]:
        at = f" at step {r['step']}" if r["step"] is not None else ""
        out.append(f"diverged: run {r['run_id']} ({r['model']}, L = {r['L']}){at}: {r['reason']}")
    for b in header.get("broken") or []:
        out.append(f"broken: run {b['run_id']}: {b['reason']}")
    return out


def build_preset(preset: str, df, store, out_dir: Path, ids: Sequence[str],
                 overrides: dict | None = None, device: str = "cpu",
                 progress: bool | None = None) -> dict:
    """Figures, tables, claims and provenance of one preset, written under out_dir/<preset>/."""
    pdir = out_dir / preset
    pdir.mkdir(parents=True, exist_ok=True)
    res = Results(df, preset, store, overrides)
    th = Theory(preset, cache=pdir / "theory.json", device=device, progress=bool(progress))
    th.get = timing.timed(th.get, "theory")  # the build's phases, for the provenance's timing table
    artifacts, tables, errs, build = {}, {}, {}, {}
    t0 = time.perf_counter()
    for i in ids:
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore", RuntimeWarning)  # partial data: nan, not noise
                with timing.record() as rec, timing.phase("figures"):
                    paths = _write_one(i, res, th, pdir, tables)
                build[i] = rec.phases
            artifacts[i] = [str(pp.relative_to(out_dir)) for pp in paths]
        except Exception as e:  # noqa: BLE001 - one broken artifact must not sink the report
            errs[i] = f"{type(e).__name__}: {e}"
            log.error("building %s/%s failed:\n%s", preset, i, traceback.format_exc())
    notes = {}
    for i in ids:
        if i in NOTES and i not in errs:
            try:
                notes[i] = NOTES[i](res)
            except Exception as e:  # noqa: BLE001
                errs[i] = f"{type(e).__name__}: {e}"
    with timing.record() as rec, timing.phase("report"):
        # one count of claims per store, whichever command asks: every paper claim (and the beyond
        # claims of the beyond experiments built), not only those of the ids drawn
        cl = claims.check_all(res, th, claim_ids(ids))
        write_json_atomic(pdir / "claims.json", cl)
    build["claims"] = rec.phases
    prov = provenance(res, ids, time.perf_counter() - t0)
    prov["phase_timing"] = phase_timing(store, preset, ids, build, pdir, overrides)
    runs = {row["id"]: row[preset] for row in summary((preset,))}
    return {"preset": preset, "ids": list(ids), "artifacts": artifacts, "tables": tables,
            "claims": cl, "errors": errs, "provenance": prov, "runs": runs, "notes": notes}


def claim_ids(ids: Sequence[str]) -> tuple[str, ...]:
    """The experiments whose claims a report checks: the paper's always, the beyond ones built."""
    return tuple(IDS) + tuple(i for i in ids if REGISTRY[i].part == "beyond")


def with_studies(ids: Sequence[str], df, preset: str) -> tuple[str, ...]:
    """`ids` and every study (registry part "study") with a finished run of `preset` in the store."""
    have = set(df["run_id"]) if len(df) and "run_id" in df.columns else set()
    extra = [i for i, e in REGISTRY.items() if e.part == "study" and i not in ids
             and any(c.run_id in have for c in e.configs(preset))]
    return tuple(ids) + tuple(extra)


def _write_one(exp_id: str, res: Results, th: Theory, pdir: Path, tables: dict) -> list[Path]:
    """The experiment's figure, its table, or both (a beyond-the-paper experiment may have both)."""
    paths: list[Path] = []
    if exp_id in FIGURES or exp_id not in TABLES:
        paths += write_figure(exp_id, res, th, pdir)
    if exp_id in TABLES:
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
    rows = res.used_rows(ids)
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
        "cells_with_non_current_recipe": len(res.non_default),
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
    try:
        old = json.loads(path.read_text()) if path.exists() else {}
    except (OSError, ValueError):
        old = {}
    for e, ph in build.items():
        ph["theory"] = max(ph.get("theory", 0.0), (old.get(e) or {}).get("theory", 0.0))
    write_json_atomic(path, build)
    experiments = {i: {c.run_id for c in REGISTRY[i].configs(preset, None, **(overrides or {}))} for i in ids}
    return timing.experiment_table(timing.read_records(store.root), experiments, build)


def _timing_lines(prov: dict) -> list[str]:
    tab = prov.get("phase_timing")
    if not tab or not tab["rows"]:
        return []
    return ["", "Where the time went (seconds; training phases from the packs' own records, runs shared "
            "by several experiments counted under the first; 'train wall' is the packs' wall time summed "
            "over packs — packs run side by side, so it exceeds the job's wall time):", ""] + timing.markdown_lines(tab)


def _isnum(x) -> bool:
    return not math.isnan(as_float(x))


# ---------------------------------------------------------------- rendering

def _fmt_seconds(s: float) -> str:
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.2f} h"


def _prov_lines(prov: dict) -> list[str]:
    return [
        f"runs used: {prov['runs_used']} (registry expects {prov['runs_expected_default_seeds']} with "
        f"the default seeds; {prov['runs_in_store_for_preset']} finished runs of this preset in the store)",
        f"seeds: {', '.join(map(str, prov['seeds'])) or '—'}",
        f"total train time: {_fmt_seconds(prov['train_seconds_total'])}",
        "stopped because: " + (", ".join(f"{k} {v}" for k, v in prov["stopped_because"].items()) or "—"),
        "devices: " + (", ".join(f"{k} ({v})" for k, v in prov["devices"].items()) or "—"),
        "run versions: " + (", ".join(f"{k} ({v})" for k, v in prov["run_versions"].items()) or "—"),
        f"cells that used a recipe other than the current one: {prov['cells_with_non_current_recipe']}",
        f"linear-floor Monte Carlo samples: {prov['floor_samples']}",
        f"geometry: {prov['geometry']}. Why: {GEOMETRY_EVIDENCE}",
    ]


def _versions_line(header: dict) -> str:
    v = header["versions"]
    return ", ".join(f"{k} {v[k]}" for k in ("depthscale", "torch", "numpy", "scipy", "pandas",
                                            "matplotlib", "python") if v.get(k)) + f"; {v['platform']}"


def banner(preset: str) -> str | None:
    """The warning shown at the top of a preset's section (the smoke preset's), or None."""
    if preset != "smoke":
        return None
    from depthscale.config import PRESET_DEPTHS, geometry, preset_fields

    g, depths = geometry(preset, "linear"), PRESET_DEPTHS[preset]
    return (f"The smoke preset proves the pipeline, not the science: tiny models (d = {g['d']}, "
            f"P = {g['P']}), depths {', '.join(map(str, depths))} only, a step cap of "
            f"{preset_fields(preset)['max_steps']}. With {len(depths)} depths a fit with a floor (L0, c, α) has no residual "
            "degree of freedom: such fits are degenerate and drawn as data only, and the claims built "
            "on them FAIL for that reason. No verdict here says anything about the paper: use the cpu "
            "or paper preset for results.")


def render_markdown(header: dict, sections: list[dict]) -> str:
    out = ["# depthscale report", "",
           f"Reproduction of *{header['paper']}*.", "",
           f"- generated: {header['date']}",
           f"- software: {_versions_line(header)}",
           f"- presets: {', '.join(s['preset'] for s in sections)}", ""]
    for sec in sections:
        p = sec["preset"]
        out += [f"## Preset `{p}`", ""]
        if banner(p):
            out += [f"> **Warning.** {banner(p)}", ""]
        out += [f"- {line}" for line in _prov_lines(sec["provenance"]) + _state_lines(sec, header)] + [""]
        out += _timing_lines(sec["provenance"])[1:] + ([""] if _timing_lines(sec["provenance"]) else [])
        paper_claims, beyond_claims = split_claims(sec["claims"])
        if paper_claims or not beyond_claims:
            out += _md_claims(f"### Claims (SPEC §9): {sum(c['pass'] for c in paper_claims)} of "
                              f"{len(paper_claims)} pass", paper_claims)
        if sec["errors"]:
            out += ["### Errors while building", ""] + [f"- {k}: {v}" for k, v in sec["errors"].items()] + [""]
        for i in sec["ids"]:
            e = REGISTRY[i]
            h = "###"
            if e.part == "beyond":
                if i == next(j for j in sec["ids"] if REGISTRY[j].part == "beyond"):
                    out += ["### Beyond the paper", "", BEYOND_INTRO, ""]
                    out += _md_claims(f"#### Claims beyond the paper: {sum(c['pass'] for c in beyond_claims)} "
                                      f"of {len(beyond_claims)} pass", beyond_claims)
                h = "####"
            out += [f"{h} {i}: {e.title}", "", f"*{e.shows}* — models: {', '.join(e.models) or 'theory'}; "
                    f"task: {e.task}; spectra: {e.spectra_text}; geometry: {e.geometry(p)}{_runs_text(sec, i)}", ""]
            if i in sec["errors"]:
                out += [f"(not built: {sec['errors'][i]})", ""]
                continue
            png = next((a for a in sec["artifacts"].get(i, []) if a.endswith(".png")), None)
            pdf = next((a for a in sec["artifacts"].get(i, []) if a.endswith(".pdf")), None)
            if png:
                out += [f"![{i}]({png})", "", f"[PDF]({pdf})" if pdf else "", ""]
            if i in sec["tables"]:
                out += (["Columns `paper_*` are the paper's values (SPEC §8); the others are ours.", ""]
                        if e.part == "paper" else []) + [markdown_table(sec["tables"][i]), ""]
            out += [f"> {line}\n" for line in sec.get("notes", {}).get(i, [])]
    return "\n".join(out) + "\n"


BEYOND_INTRO = ("Experiments the paper leaves open (its §6 and Appendix D.2), run with the same "
                "harness: `depthscale reproduce beyond --preset cpu`. Each says what was measured, "
                "including no effect.")


def split_claims(cl: list[dict]) -> tuple[list[dict], list[dict]]:
    """(the paper's claims, the beyond-the-paper ones: every experiment they use is a beyond one)."""
    beyond = set(BEYOND_IDS)
    is_beyond = [bool(c.get("uses")) and set(c["uses"]) <= beyond for c in cl]
    return [c for c, b in zip(cl, is_beyond) if not b], [c for c, b in zip(cl, is_beyond) if b]


def _md_claims(title: str, cl: list[dict]) -> list[str]:
    out = [title, "", "| # | claim | expected | result | measured |", "|---|---|---|---|---|"]
    for c in cl:
        out.append(f"| {c['id']} | {_md_cell(c['claim'])} | {_md_cell(c['expected'])} | "
                   f"**{'PASS' if c['pass'] else 'FAIL'}** | {_md_cell(c['detail'])} |")
    return out + [""]


def _runs_text(sec: dict, exp_id: str) -> str:
    n = (sec.get("runs") or {}).get(exp_id)
    return "" if n is None else f"; runs: {n} (default seeds)"


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;max-width:1200px;
margin:2em auto;padding:0 1em;color:#222;line-height:1.4}
h1,h2,h3{line-height:1.2} h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0 1.5em} td,th{border:1px solid #ccc;
padding:.25em .5em;vertical-align:top} th{background:#f3f3f3} td.num{text-align:right;
font-variant-numeric:tabular-nums} td.paper,th.paper{background:#f7f3e8}
.pass{color:#fff;background:#2e7d32;font-weight:bold;padding:0 .4em;border-radius:3px}
.fail{color:#fff;background:#c62828;font-weight:bold;padding:0 .4em;border-radius:3px}
img{max-width:100%;height:auto;border:1px solid #eee} .small{color:#555;font-size:.85em}
.detail{font-size:.8em;color:#333}
.banner{background:#fff4d6;border:1px solid #e0b000;border-left:6px solid #e0b000;padding:.6em .9em;
margin:1em 0}
"""


def _html_table(df) -> str:
    cols = list(df.columns)
    head = "".join(f'<th class="{"paper" if c.startswith("paper") else ""}">{html.escape(c)}</th>'
                   for c in cols)
    body = []
    for _, row in df.iterrows():
        cells = "".join(f'<td class="num{" paper" if c.startswith("paper") else ""}">'
                        f"{html.escape(number(row[c]))}</td>" for c in cols)
        body.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _img_data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def render_html(header: dict, sections: list[dict], out_dir: Path) -> str:
    esc = html.escape
    parts = ["<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">",
             "<title>depthscale report</title>", f"<style>{_CSS}</style></head><body>",
             "<h1>depthscale report</h1>",
             f"<p>Reproduction of <em>{esc(header['paper'])}</em>.</p>",
             "<ul class=\"small\">",
             f"<li>generated: {esc(header['date'])}</li>",
             f"<li>software: {esc(_versions_line(header))}</li>",
             f"<li>presets: {esc(', '.join(s['preset'] for s in sections))}</li></ul>"]
    for sec in sections:
        p = sec["preset"]
        parts.append(f"<h2 id=\"{esc(p)}\">Preset <code>{esc(p)}</code></h2>")
        if banner(p):
            parts.append(f"<p class=\"banner\"><strong>Warning.</strong> {esc(banner(p))}</p>")
        parts.append("<ul class=\"small\">")
        parts += [f"<li>{esc(line)}</li>" for line in _prov_lines(sec["provenance"]) + _state_lines(sec, header)]
        parts.append("</ul>")
        if _timing_lines(sec["provenance"]):
            parts.append(f"<p class=\"small\">{esc(_timing_lines(sec['provenance'])[1])}</p>"
                         + timing.html_table(sec["provenance"]["phase_timing"]))
        paper_claims, beyond_claims = split_claims(sec["claims"])
        if paper_claims or not beyond_claims:
            parts += _html_claims(f"<h3>Claims (SPEC §9): {sum(c['pass'] for c in paper_claims)} of "
                                  f"{len(paper_claims)} pass</h3>", paper_claims)
        if sec["errors"]:
            parts.append("<h3>Errors while building</h3><ul>" + "".join(
                f"<li>{esc(k)}: {esc(v)}</li>" for k, v in sec["errors"].items()) + "</ul>")
        for i in sec["ids"]:
            e = REGISTRY[i]
            h = "h3"
            if e.part == "beyond":
                if i == next(j for j in sec["ids"] if REGISTRY[j].part == "beyond"):
                    parts.append(f"<h3 id=\"{esc(p)}-beyond\">Beyond the paper</h3><p>{esc(BEYOND_INTRO)}</p>")
                    parts += _html_claims(f"<h4>Claims beyond the paper: {sum(c['pass'] for c in beyond_claims)} "
                                          f"of {len(beyond_claims)} pass</h4>", beyond_claims)
                h = "h4"
            parts.append(f"<{h} id=\"{esc(p)}-{esc(i)}\">{esc(i)}: {esc(e.title)}</{h}>")
            parts.append(f"<p class=\"small\"><em>{esc(e.shows)}</em> — models: "
                         f"{esc(', '.join(e.models) or 'theory')}; task: {esc(e.task)}; "
                         f"spectra: {esc(e.spectra_text)}; geometry: {esc(e.geometry(p))}"
                         f"{esc(_runs_text(sec, i))}</p>")
            if i in sec["errors"]:
                parts.append(f"<p>(not built: {esc(sec['errors'][i])})</p>")
                continue
            png = next((a for a in sec["artifacts"].get(i, []) if a.endswith(".png")), None)
            if png:
                parts.append(f"<img alt=\"{esc(i)}\" src=\"{_img_data_uri(out_dir / png)}\">")
            if i in sec["tables"]:
                if e.part == "paper":
                    parts.append("<p class=\"small\">Shaded <code>paper_*</code> columns are the paper's "
                                 "values (SPEC §8); the others are ours.</p>")
                parts.append(_html_table(sec["tables"][i]))
            parts += [f"<p class=\"note\">{esc(line)}</p>" for line in sec.get("notes", {}).get(i, [])]
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _html_claims(title: str, cl: list[dict]) -> list[str]:
    esc = html.escape
    parts = [title, "<table><thead><tr><th>#</th><th>claim</th><th>expected</th><th>result</th>"
                    "<th>measured</th></tr></thead><tbody>"]
    for c in cl:
        badge = '<span class="pass">PASS</span>' if c["pass"] else '<span class="fail">FAIL</span>'
        parts.append(f"<tr><td>{esc(c['id'])}</td><td>{esc(c['claim'])}</td>"
                     f"<td>{esc(c['expected'])}</td><td>{badge}</td>"
                     f"<td class=\"detail\">{esc(c['detail'])}</td></tr>")
    return parts + ["</tbody></table>"]


__all__ = ["reproduce", "report", "build_preset", "provenance", "render_markdown", "render_html",
           "sweep_name", "run_states"]
