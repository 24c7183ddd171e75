"""The report's pages: report.md and a self-contained report.html (images inlined as data URIs)
from the sections `report.build_preset` built, one per preset: provenance, run states, timing,
the claims (the paper's, and beyond it), then every experiment's figure, table and notes.

Under each figure, a caption line generated from the claims that use the experiment (issue 36):
"Measured at this preset:" each claim's verdict and a short summary of its `measured` numbers, the
paper's statement beside it as the paper's, never a fixed sentence of the paper's conclusion; and
the figure check's problems (depthscale.report.figcheck) where the figure has any.
"""

from __future__ import annotations

import base64
import html
from pathlib import Path

from depthscale.analysis.claims import claim_verdict, count_text
from depthscale.base import timing
from depthscale.base.formatting import markdown_table, number
from depthscale.config.paper import GEOMETRY_EVIDENCE
from depthscale.experiments.registry import BEYOND_IDS, REGISTRY


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


def timing_lines(prov: dict) -> list[str]:
    tab = prov.get("phase_timing")
    if not tab or not tab["rows"]:
        return []
    return ["", "Where the time went (seconds; training phases from the packs' own records, runs shared "
            "by several experiments counted under the first; 'train wall' is the packs' wall time summed "
            "over packs — packs run side by side, so it exceeds the job's wall time):", ""] + timing.markdown_lines(tab)


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
        "why the runs stopped: " + (", ".join(f"{k} ({v} runs)" for k, v in prov["stopped_because"].items()) or "—"),
        "devices: " + (", ".join(f"{k} ({v})" for k, v in prov["devices"].items()) or "—"),
        "run versions: " + (", ".join(f"{k} ({v})" for k, v in prov["run_versions"].items()) or "—"),
        f"cells with runs of another recipe only (not read: missing): {prov.get('cells_only_other_recipe', 0)}",
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
    from depthscale.config.run import PRESET_DEPTHS, geometry, preset_fields

    g, depths = geometry(preset, "linear"), PRESET_DEPTHS[preset]
    return (f"The smoke preset proves the pipeline, not the science: tiny models (d = {g['d']}, "
            f"P = {g['P']}), depths {', '.join(map(str, depths))} only, a step cap of "
            f"{preset_fields(preset)['max_steps']}. With {len(depths)} depths a fit with a floor (L0, c, α) has no residual "
            "degree of freedom: such fits are degenerate and drawn as data only, and the claims built "
            "on them are INCONCLUSIVE for that reason (FAIL only where the depth effect itself is absent). No verdict here says anything about the paper: use the cpu "
            "or paper preset for results.")


def incomplete_text(sections: list[dict]) -> str:
    """The report's first words where the store lacks runs its claims read (issue 51), or ''."""
    parts = [f"preset {sec['preset']}: {sec['incomplete']['missing']} of {sec['incomplete']['expected']} runs that "
             f"the claims read are not finished (their ids in {sec['incomplete']['file']}); finish it with the "
             f"command that produced this report, which resumes where it stopped: {sec['incomplete']['shown']}"
             for sec in sections if sec.get("incomplete")]
    if not parts:
        return ""
    return ("This store is incomplete. " + "; ".join(parts) + ". A claim that reads a missing run is INCONCLUSIVE "
            "(missing runs), never PASS or FAIL: nothing here judges what was not measured.")


ANSWER_TITLE = "The answer: what reproduces and what does not"


def answer_md(header: dict) -> list[str]:
    """The section the report opens with (report/answer.py): its paragraphs, the study's figure and table."""
    ans = header.get("answer")
    if not ans:
        return []
    out = [f"## {ANSWER_TITLE}", ""] + [f"{line}\n" for line in ans["lines"]]
    if ans.get("figure"):
        out += [f"![the convergence study]({ans['figure']})", "",
                f"*The convergence study ({ans['study_dir']}): (a) the envelope per budget and the monitor-best "
                "envelope, (b) the faithful start, beside the reference B_L; (c) the excess R_L − L0 with slope −1; "
                "(d) the drops per doubling of depth; (e) α per budget; (f) A_L − C_L.*", ""]
    if ans.get("table_md"):
        out += ["The study per budget:", "", ans["table_md"].strip(), ""]
    return out


def render_markdown(header: dict, sections: list[dict]) -> str:
    out = ["# depthscale report", ""]
    if incomplete_text(sections):
        out += [f"> **{incomplete_text(sections)}**", ""]
    out += answer_md(header)
    out += [
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
        out += timing_lines(sec["provenance"])[1:] + ([""] if timing_lines(sec["provenance"]) else [])
        if sec.get("not_run"):
            out += [f"Not run in this store (not drawn; their claims are INCONCLUSIVE: missing runs): "
                    f"{', '.join(sec['not_run'])}.", ""]
        paper_claims, beyond_claims = split_claims(sec["claims"])
        if paper_claims or not beyond_claims:
            out += _md_claims(f"### Claims (SPEC §9): {count_text(paper_claims)}", paper_claims)
        if sec["errors"]:
            out += ["### Errors while building", ""] + [f"- {k}: {v}" for k, v in sec["errors"].items()] + [""]
        for i in sec["ids"]:
            e = REGISTRY[i]
            h = "###"
            if e.part == "beyond":
                if i == next(j for j in sec["ids"] if REGISTRY[j].part == "beyond"):
                    out += ["### Beyond the paper", "", BEYOND_INTRO, ""]
                    out += _md_claims(f"#### Claims beyond the paper: {count_text(beyond_claims)}", beyond_claims)
                h = "####"
            out += [f"{h} {i}: {e.title}", "", f"*{e.shows}* — models: {', '.join(e.models) or 'theory'}; "
                    f"task: {e.task}; spectra: {e.spectra_text}; geometry: {e.geometry(p)}{_runs_text(sec, i)}", ""]
            if i in sec["errors"]:
                out += [f"(not built: {sec['errors'][i]})", ""]
                continue
            png = next((a for a in sec["artifacts"].get(i, []) if a.endswith(".png")), None)
            pdf = next((a for a in sec["artifacts"].get(i, []) if a.endswith(".pdf")), None)
            if png:
                out += [f"![{i}]({png})", "", f"[PDF]({pdf})" if pdf else "", ""] + _caption_md(sec, i)
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
                   f"**{claim_verdict(c)}** | {_md_cell(c['detail'])} |")
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
.inconclusive{color:#000;background:#f9a825;font-weight:bold;padding:0 .4em;border-radius:3px}
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
             "<h1>depthscale report</h1>"]
    if incomplete_text(sections):
        parts.append(f"<p class=\"banner\"><strong>{esc(incomplete_text(sections))}</strong></p>")
    parts += answer_html(header, out_dir)
    parts += [
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
        if timing_lines(sec["provenance"]):
            parts.append(f"<p class=\"small\">{esc(timing_lines(sec['provenance'])[1])}</p>"
                         + timing.html_table(sec["provenance"]["phase_timing"]))
        if sec.get("not_run"):
            parts.append(f"<p>Not run in this store (not drawn; their claims are INCONCLUSIVE: missing runs): "
                         f"{esc(', '.join(sec['not_run']))}.</p>")
        paper_claims, beyond_claims = split_claims(sec["claims"])
        if paper_claims or not beyond_claims:
            parts += _html_claims(f"<h3>Claims (SPEC §9): {count_text(paper_claims)}</h3>", paper_claims)
        if sec["errors"]:
            parts.append("<h3>Errors while building</h3><ul>" + "".join(
                f"<li>{esc(k)}: {esc(v)}</li>" for k, v in sec["errors"].items()) + "</ul>")
        for i in sec["ids"]:
            e = REGISTRY[i]
            h = "h3"
            if e.part == "beyond":
                if i == next(j for j in sec["ids"] if REGISTRY[j].part == "beyond"):
                    parts.append(f"<h3 id=\"{esc(p)}-beyond\">Beyond the paper</h3><p>{esc(BEYOND_INTRO)}</p>")
                    parts += _html_claims(f"<h4>Claims beyond the paper: {count_text(beyond_claims)}</h4>",
                                          beyond_claims)
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
                parts += _caption_html(sec, i)
            if i in sec["tables"]:
                if e.part == "paper":
                    parts.append("<p class=\"small\">Shaded <code>paper_*</code> columns are the paper's "
                                 "values (SPEC §8); the others are ours.</p>")
                parts.append(_html_table(sec["tables"][i]))
            parts += [f"<p class=\"note\">{esc(line)}</p>" for line in sec.get("notes", {}).get(i, [])]
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def answer_html(header: dict, out_dir: Path) -> list[str]:
    """answer_md's section in HTML (the paragraphs' **bold** leads as <strong>; the study's figure inlined)."""
    ans = header.get("answer")
    if not ans:
        return []
    esc = html.escape
    parts = [f"<h2 id=\"answer\">{esc(ANSWER_TITLE)}</h2>"]
    parts += [f"<p>{_strong(esc(line))}</p>" for line in ans["lines"]]
    if ans.get("figure"):
        parts.append(f"<img alt=\"the convergence study\" src=\"{_img_data_uri(out_dir / ans['figure'])}\">")
    if ans.get("table_md"):
        parts += ["<p>The study per budget:</p>", *md_blocks_html(ans["table_md"])]
    return parts


def md_blocks_html(text: str) -> list[str]:
    """Markdown's paragraphs as HTML: a block of `| ... |` lines (a header row, its rule, the rows) as a
    <table>, any other block as a <p> with its **bold** as <strong>."""
    out = []
    for block in (b.strip() for b in text.strip().split("\n\n")):
        lines = block.splitlines()
        if lines and all(ln.startswith("|") for ln in lines):
            cells = [[html.escape(c.strip()) for c in ln.strip().strip("|").split("|")] for ln in lines]
            body = [r for r in cells[1:] if not all(set(c) <= set(":-") for c in r)]
            head = "".join(f"<th>{c}</th>" for c in cells[0])
            rows = "".join("<tr>" + "".join(f'<td class="num">{c}</td>' for c in r) + "</tr>" for r in body)
            out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
        elif block:
            out.append(f"<p>{_strong(html.escape(block))}</p>")
    return out


def _strong(text: str) -> str:
    """Markdown's **bold** pairs in `text` (already escaped) as <strong>."""
    while text.count("**") >= 2:
        text = text.replace("**", "<strong>", 1).replace("**", "</strong>", 1)
    return text


def _html_claims(title: str, cl: list[dict]) -> list[str]:
    esc = html.escape
    parts = [title, "<table><thead><tr><th>#</th><th>claim</th><th>expected</th><th>result</th>"
                    "<th>measured</th></tr></thead><tbody>"]
    for c in cl:
        v = claim_verdict(c)
        badge = f'<span class="{v.lower()}">{v}</span>'
        parts.append(f"<tr><td>{esc(c['id'])}</td><td>{esc(c['claim'])}</td>"
                     f"<td>{esc(c['expected'])}</td><td>{badge}</td>"
                     f"<td class=\"detail\">{esc(c['detail'])}</td></tr>")
    return parts + ["</tbody></table>"]


def _num(x) -> str:
    return f"{x:.3g}" if isinstance(x, (int, float)) and not isinstance(x, bool) else str(x)


def _fit_summary(m: dict) -> str:
    """'α = 0.57 ± 1.33 (R² 0.62)', with the fit's status where it is not ok."""
    se = m.get("alpha_se")
    text = f"α = {m['alpha']:.2f}" + (f" ± {se:.2f}" if isinstance(se, (int, float)) else " ± ?")
    extra = [f"R² {m['r2']:.2f}"] if isinstance(m.get("r2"), (int, float)) else []
    extra += [m["fit_status"]] if m.get("fit_status") not in (None, "ok") else []
    return text + (f" ({', '.join(extra)})" if extra else "")


def _value_summary(v) -> str | None:
    if isinstance(v, dict):
        if isinstance(v.get("alpha"), (int, float)):
            return _fit_summary(v)
        nums = [f"{k} {_num(x)}" for k, x in v.items() if isinstance(x, (int, float)) and not isinstance(x, bool)]
        return ", ".join(nums[:2]) or None
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return _num(v)
    return None


def measured_summary(measured, most: int = 4) -> str:
    """A short text of a claim's `measured`: its first `most` entries with numbers, fits as α ± SE
    (R²); 'no data' where nothing was measured."""
    if measured is None:
        return "no data"
    if not isinstance(measured, dict):
        return _value_summary(measured) or str(measured)
    parts = [(k, _value_summary(v)) for k, v in measured.items()]
    parts = [f"{k}: {t}" for k, t in parts if t is not None] or [f"{k}: none" for k in list(measured)[:most]]
    more = len(parts) - most
    return "; ".join(parts[:most]) + (f"; … ({more} more)" if more > 0 else "")


def caption_lines(exp_id: str, cl: list[dict]) -> list[str]:
    """One line per claim that uses `exp_id`: its verdict and what was measured, then the paper's
    statement as the paper's (a beyond claim's, as the question asked)."""
    beyond = set(BEYOND_IDS)
    out = []
    for c in cl:
        if exp_id not in (c.get("uses") or []):
            continue
        whose = "the question" if set(c["uses"]) <= beyond else "the paper's"
        out.append(f"claim {c['id']} {claim_verdict(c)}: {measured_summary(c.get('measured'))} "
                   f"({whose}: {c['claim']})")
    return out


def _caption_md(sec: dict, exp_id: str) -> list[str]:
    lines = caption_lines(exp_id, sec["claims"])
    out = (["**Measured at this preset:**", ""] + [f"- {_md_cell(x)}" for x in lines] + [""]) if lines else []
    problems = (sec.get("figure_checks") or {}).get(exp_id)
    return out + ([f"Figure check: {_md_cell('; '.join(problems))}", ""] if problems else [])


def _caption_html(sec: dict, exp_id: str) -> list[str]:
    esc = html.escape
    lines = caption_lines(exp_id, sec["claims"])
    out = ([f"<p class=\"small\"><strong>Measured at this preset:</strong></p><ul class=\"small\">"
            + "".join(f"<li>{esc(x)}</li>" for x in lines) + "</ul>"] if lines else [])
    problems = (sec.get("figure_checks") or {}).get(exp_id)
    return out + ([f"<p class=\"small\">Figure check: {esc('; '.join(problems))}</p>"] if problems else [])


__all__ = ["render_markdown", "render_html", "md_blocks_html", "banner", "split_claims", "BEYOND_INTRO", "caption_lines",
           "measured_summary"]
