"""The answer, stated first (issue 47, SPEC §9): the report opens with what reproduces and what does
not, generated from the claims' verdicts and the convergence study's files, before any table.

- What reproduces: the floor, claim 5c's fitted L0 against the paper's, per spectrum with its %.
- What does not: the shape, claim 5a's α ± SE per spectrum with its verdict and power.
- The study (studies/results/convergence/, `load_study`): its rule, its outcome, the drops per
  doubling of depth with their SE and successive ratios, which depths were still improving, the
  faithful start beside, and what would change the outcome.
- The study at more spectra (studies/results/convergence_spectra/<tag>/, `spectra_lines`): each
  spectrum's outcome and γ, or the command that studies it where it has not been.
Nothing here judges anything: every number is read from claims.json's entries or the study's
exported files, so the section can never disagree with them.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

from depthscale.base.atomic import read_json

STUDY_DIR = Path("studies") / "results" / "convergence"  # where the repository keeps the study's export


def _pct(x) -> str:
    return f"{100 * x:+.1f}%"


def _claim(claims: list[dict], cid: str, preset: str | None = None) -> dict | None:
    return next((c for c in claims if c.get("id") == cid and (preset is None or c.get("preset") == preset)), None)


def floor_lines(claims: list[dict], preset: str | None = None) -> list[str]:
    """What reproduces: 5c's L0 against the paper's, top-2 spectra (well-posed fits), then top-16."""
    c = _claim(claims, "5c", preset)
    if c is None or not isinstance(c.get("measured"), dict):
        return ["The floor: claim 5c was not computed here (missing runs)."]
    top2 = {k: v for k, v in c["measured"].items() if isinstance(v, dict) and not k.startswith("k=")
            and v.get("fit_status") == "ok" and _finite(v.get("L0_vs_paper"))}
    out = []
    if top2:
        rel = [v["L0_vs_paper"] for v in top2.values()]
        out.append(f"**What reproduces — the floor.** The fitted L0 is within {_pct(min(rel))} to {_pct(max(rel))} "
                   f"of the paper's on {len(top2)} top-2 spectra: " + "; ".join(
                       f"{k} {v['L0']:.4f} vs {v['paper_L0']:.4f} ({_pct(v['L0_vs_paper'])})" for k, v in top2.items())
                   + f". Claim 5c reads {c.get('verdict', '?')} (it also asks L0 within 5% of the softmax-ensemble "
                     f"reference on the run's own contexts, and covers the top-16 spectra).")
    k16 = {k: v for k, v in c["measured"].items() if k.startswith("k=") and isinstance(v, dict)}
    bad = [k for k, v in k16.items() if v.get("fit_status") != "ok" or not v.get("L0")]
    if bad:
        out.append(f"The top-16 floors are not measured at this depth range: the fits of {', '.join(bad)} put L0 "
                   f"on its bound (curves still steepening at the deepest depth).")
    return out or ["The floor: no well-posed fit of L0 at this preset."]


def shape_lines(claims: list[dict], preset: str | None = None) -> list[str]:
    """What does not: 5a's α ± SE per top-2 spectrum, its verdicts, its power."""
    c = _claim(claims, "5a", preset)
    if c is None or not isinstance(c.get("measured"), dict):
        return ["The shape: claim 5a was not computed here (missing runs)."]
    top2 = {k: v for k, v in c["measured"].items() if isinstance(v, dict) and not k.startswith("k=")
            and _finite(v.get("alpha"))}
    if not top2:
        return [f"**The shape.** Claim 5a reads {c.get('verdict', '?')}: no top-2 spectrum has a fit."]
    alphas = [v["alpha"] for v in top2.values()]
    verdicts = {}
    for v in top2.values():
        verdicts[v.get("verdict", "?")] = verdicts.get(v.get("verdict", "?"), 0) + 1
    powers = [v["power"]["power"] for v in top2.values() if isinstance(v.get("power"), dict)
              and _finite(v["power"].get("power"))]
    return [f"**What does not reproduce — the shape.** The paper has α ≈ 1 (claim 5a: α in [0.8, 1.2], R² ≥ 0.99); "
            f"our top-2 fits give α {min(alphas):.2f} to {max(alphas):.2f}: " + "; ".join(
                f"{k} {v['alpha']:.2f}" + (f" ± {v['alpha_se']:.2f}" if _finite(v.get("alpha_se")) else " (no SE)")
                + f" ({v.get('verdict', '?')})"
                for k, v in top2.items())
            + ". Per spectrum: " + ", ".join(f"{n} {w}" for w, n in sorted(verdicts.items()))
            + (f"; 5a's power under the paper's law {min(powers):.2f} to {max(powers):.2f}" if powers else "")
            + f". Claim 5a as a whole: {c.get('verdict', '?')}."]


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def load_study(path: str | Path | None) -> dict | None:
    """The convergence study's export at `path` (decision.json, or decision_refined.json where
    studies/convergence_redecide.py applied SPEC §9's refined rule to it; budgets.csv, curves.csv,
    convergence.png), or None where there is none. Drops per doubling are the decision's, or
    computed from curves.csv's envelope at the largest budget (exports of earlier versions)."""
    if path is None:
        return None
    d = Path(path)
    if not (d / "decision.json").is_file():
        return None
    doc = read_json(d / "decision.json", dict)
    decisions = doc.get("decisions") or []
    table = (d / "budgets.md").read_text() if (d / "budgets.md").is_file() else None
    if (d / "decision_refined.json").is_file():  # SPEC §9's refined rule on this export (convergence_redecide.py)
        doc = read_json(d / "decision_refined.json", dict)
        decisions = [doc["decision"]] if isinstance(doc.get("decision"), dict) else decisions
        table = table and refined_table(table, decisions[0] if decisions else None)
    curves = _read_csv(d / "curves.csv")
    budgets = _read_csv(d / "budgets.csv")
    return {"dir": str(d), "rule": doc.get("rule", ""), "decision": decisions[0] if decisions else None,
            "curves": curves, "budgets": budgets,
            "figure": str(d / "convergence.png") if (d / "convergence.png").is_file() else None,
            "table_md": table}


def refined_table(table_md: str, decision: dict | None) -> str:
    """budgets.md with the first rule's "Decision rule —" and "Outcome —" paragraphs (written when the
    study was exported) replaced by the refined decision's outcome: the report states one outcome."""
    keep = [p for p in table_md.strip().split("\n\n") if not p.lstrip().startswith(("Decision rule —", "Outcome —"))]
    if decision:
        keep.append(f"Outcome (SPEC §9's refined rule, decision_refined.json) — {decision.get('text', '')}")
    return "\n\n".join(keep) + "\n"


def _read_csv(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def study_drops(study: dict) -> tuple[str, list[dict]]:
    """(which curve, [{L, drop, se, ratio}]): the decision's drops, else the envelope's at the largest
    budget from curves.csv (seed SEs combined; ratios of successive drops)."""
    dec = study.get("decision") or {}
    if dec.get("drops"):
        return "the monitor-best envelope", dec["drops"]
    env = [r for r in study["curves"] if r.get("series") == "envelope"]
    if not env:
        return "", []
    top = max(int(float(r["steps"])) for r in env)
    pts = {int(float(r["L"])): [float(x) for x in r["R_seeds"].split()] for r in env if int(float(r["steps"])) == top}
    out = []
    for L in sorted(pts):
        if 2 * L in pts:
            a, b = pts[L], pts[2 * L]
            se = math.hypot(_se(a), _se(b))
            out.append({"L": L, "drop": sum(a) / len(a) - sum(b) / len(b), "se": se, "ratio": math.nan})
    for prev, cur in zip(out, out[1:]):
        cur["ratio"] = cur["drop"] / prev["drop"] if prev["drop"] else math.nan
    return f"the envelope at {top:,} steps", out


def _se(v: list[float]) -> float:
    if len(v) < 2:
        return math.nan
    m = sum(v) / len(v)
    return math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1) / len(v))


def study_lines(study: dict | None) -> list[str]:
    """The study's outcome, rule, drops per doubling, the faithful start beside, what would change it."""
    if study is None or study.get("decision") is None:
        return ["**The convergence study** (SPEC §9) has no exported results here: `depthscale reproduce "
                "convergence --preset cpu --store runs/convergence`, then `python studies/convergence_study.py`."]
    dec = study["decision"]
    which, drops = study_drops(study)
    out = [f"**The convergence study's outcome: {dec.get('outcome', '?')}.** {dec.get('text', '')}",
           f"Its rule: {study.get('rule', '')}"]
    if drops:
        out.append(f"Drops per doubling of depth ({which}): " + ", ".join(
            f"L={d['L']}→{2 * d['L']}: {d['drop']:.4f} ± {d['se']:.4f}" for d in drops)
            + "; successive ratios " + ", ".join(f"{d['ratio']:.2f}" for d in drops[1:] if _finite(d["ratio"]))
            + " (α = 1 would halve each drop: ratio 0.5; a logarithmic curve keeps it near 1).")
    faithful = [r for r in study["budgets"] if r.get("series") == "faithful"]
    if faithful:
        top = max(faithful, key=lambda r: int(float(r["steps"])))
        out.append(f"The faithful start as trained (the paper's procedure as far as it is known), beside: α "
                   f"{float(top['alpha']):.2f} ± {float(top['alpha SE']):.2f}, R² {float(top['R2']):.3f} at "
                   f"{int(float(top['steps'])):,} steps (its small depths still catching up; an unfinished deep end "
                   f"makes a curve look more like 1/L, not less).")
    out.append(change_line(dec))
    return out


def change_line(dec: dict) -> str:
    """What would change the outcome, from the decision's own numbers."""
    outcome = dec.get("outcome")
    if outcome == "reproduced":
        return "What would change it: a certified envelope that fails 5a with power ≥ 0.8 at a larger budget or depth range."
    if outcome == "not reproduced":
        return ("What would change it: a start or optimiser reaching lower R_L at small depth than the envelope "
                "(the envelope's L = 1 and 2 sit on the best cosine stacks) or a deep end that bends to slope −1; "
                "more seeds cannot, at power ≥ 0.8.")
    return ("What would decide it: every depth certified at its monitor-best budget (or at least 5 certified "
            "depths spanning 16× that agree with all depths), with 5a's power ≥ 0.8 — more seeds where the power "
            "is short, a longer budget where a depth is still improving.")


# at 3 seeds on 2 cores of the Intel Xeon: (0,1) measured (docs/recipe.md §19); the top-16, depths to 128, scaled
# by the packs' runs × deepest depth (2.4x) from it, not measured
SPECTRA_COST = {2: "≈ 40 min", 16: "≈ 1 h 35 min"}


def spectra_lines(study_dir: Path | None) -> list[str]:
    """The study at more spectra (SPEC §9, issue 48), one line per spectrum in SPEC's order: its
    decision as exported (studies/results/convergence_spectra/<tag>/decision.json, beside the (0,0)
    study's directory) with γ, or the command that studies it and its estimated cost."""
    from depthscale.base.formatting import label
    from depthscale.experiments.convergence_spectra import SPECTRA

    if study_dir is None:
        return []
    root = Path(study_dir).parent / "convergence_spectra"
    out = []
    for spec in SPECTRA:
        name = f"{label(spec.a, spec.b)}" + (f" (top-{spec.k})" if spec.k != 2 else "")
        f = root / spec.tag / "decision.json"
        if not f.is_file():
            out.append(f"**{name}: not studied yet** — `depthscale reproduce convergence-spectra-{spec.tag} --preset cpu "
                       f"--store runs/convergence-spectra --out report/convergence-spectra --executor process`, then `python studies/convergence_spectra.py "
                       f"--store runs/convergence-spectra --spectrum {spec.tag}` ({SPECTRA_COST[spec.k]} on 2 cores).")
            continue
        doc = read_json(f, dict)
        dec = (doc.get("decisions") or [{}])[0]
        g = doc.get("gamma") or {}
        gamma = f"; {g['text']}" if isinstance(g.get("text"), str) else ""  # convergence_spectra.gamma_fit's
        text = str(dec.get("text", ""))
        head = f"{label(spec.a, spec.b)}: {dec.get('outcome', '?')} — "  # convergence.decision's opening
        text = text[len(head):] if text.startswith(head) else text
        out.append(f"**{name}: {dec.get('outcome', '?')}** ({len(doc.get('seeds') or [])} seeds) — "
                   f"{text}{gamma}. {paper_text(spec, dec)}")
    return out


def paper_text(spec, dec: dict) -> str:
    """The paper's numbers at a studied spectrum beside ours: L0 (Table 1, or Table 4's row) against the
    fitted L0 of part (a), and the paper's α with its table (Table 4's fit of R_L; Table 5's of
    L0 − C_L where Table 4 has no row)."""
    from depthscale.config.paper import PAPER, paper_L0_top2

    t4 = [r for r in PAPER["table4_nonlinear_fits"] if (r["k"], r["a"], r["b"]) == (spec.k, spec.a, spec.b)]
    t5 = [r for r in PAPER["table5_gap_fits"] if (r["a"], r["b"]) == (spec.a, spec.b)] if spec.k == 2 else []
    L0 = t4[0]["L0"] if t4 else paper_L0_top2().get((spec.a, spec.b)) if spec.k == 2 else None
    alpha = f"α {t4[0]['alpha']:g} (its Table 4)" if t4 else f"α {t5[0]['alpha']:g} (its Table 5, of L0 − C_L)" if t5 else ""
    ours = (dec.get("all_depths") or {}).get("L0")
    parts = []
    if L0 is not None:
        parts.append(f"L0 {L0:.4g}" + (f" (ours {ours:.4f}, {_pct(ours / L0 - 1)})" if _finite(ours) else ""))
    if alpha:
        parts.append(alpha)
    return f"The paper: {', '.join(parts)}." if parts else ""


def answer_lines(claims: list[dict], study: dict | None, preset: str | None = None,
                 study_dir: Path | None = None) -> list[str]:
    """The answer section's paragraphs, in order."""
    return floor_lines(claims, preset) + shape_lines(claims, preset) + study_lines(study) + spectra_lines(study_dir)


def resolve_study(study) -> Path | None:
    """"auto": the repository's STUDY_DIR where the report is built from a checkout (else None); a
    path: that directory; None: no study."""
    if study == "auto":
        return STUDY_DIR if (STUDY_DIR / "decision.json").is_file() else None
    return None if study is None else Path(study)


def answer_section(claims: list[dict], study_dir, preset: str | None, out_dir: Path) -> dict:
    """What the report opens with: {"lines", "figure" (relative to out_dir, copied there), "table_md",
    "study_dir"}; the study's figure is copied into out_dir/study/."""
    from depthscale.base.atomic import write_atomic, write_text_atomic

    where = resolve_study(study_dir)
    study = load_study(where)
    out = {"lines": answer_lines(claims, study, preset, where), "figure": None, "table_md": None,
           "study_dir": study["dir"] if study else None}
    if study:
        (out_dir / "study").mkdir(exist_ok=True)
    if study and study.get("figure"):
        data = Path(study["figure"]).read_bytes()
        write_atomic(out_dir / "study" / "convergence.png", lambda fh: fh.write(data))
        out["figure"] = "study/convergence.png"
    if study and study.get("table_md"):
        out["table_md"] = study["table_md"]
        write_text_atomic(out_dir / "study" / "budgets.md", study["table_md"])
    return out


__all__ = ["answer_lines", "answer_section", "resolve_study", "floor_lines", "shape_lines", "study_lines", "load_study", "study_drops", "change_line",
           "spectra_lines", "paper_text", "refined_table", "STUDY_DIR"]
