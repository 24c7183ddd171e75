"""Issue 47 item 4: the report opens with the answer — what reproduces (the floor), what does not
(the shape), the convergence study's outcome, rule, drops per doubling and the faithful start —
every number read from claims.json and the study's export, never judged again."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from depthscale.experiments import convergence as cv
from depthscale.report import answer
from depthscale.report.pages import ANSWER_TITLE

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "studies" / "results" / "convergence"


def _claims():
    return [
        {"id": "5c", "preset": "cpu", "verdict": "FAIL", "measured": {
            "(0,0)": {"L0": 2.0168, "paper_L0": 2.007, "L0_vs_paper": 2.0168 / 2.007 - 1, "fit_status": "ok"},
            "(1,0)": {"L0": 0.3421, "paper_L0": 0.341, "L0_vs_paper": 0.3421 / 0.341 - 1, "fit_status": "ok"},
            "k=16 (0,0.5)": {"L0": 0.0, "paper_L0": 0.1, "L0_vs_paper": -1.0, "fit_status": "ok"}}},
        {"id": "5a", "preset": "cpu", "verdict": "FAIL", "measured": {
            "(0,0)": {"alpha": 0.48, "alpha_se": 0.12, "verdict": "FAIL", "power": {"power": 1.0}},
            "(1,0)": {"alpha": 0.60, "alpha_se": 0.13, "verdict": "INCONCLUSIVE", "power": {"power": 0.87}}}},
    ]


def test_the_floor_and_the_shape_lines_quote_the_claims_numbers():
    floor = " ".join(answer.floor_lines(_claims(), "cpu"))
    assert "within +0.3% to +0.5% of the paper's on 2 top-2 spectra" in floor
    assert "(0,0) 2.0168 vs 2.0070 (+0.5%)" in floor and "(1,0) 0.3421 vs 0.3410 (+0.3%)" in floor
    assert "k=16 (0,0.5)" in floor and "L0 on its bound" in floor
    shape = " ".join(answer.shape_lines(_claims(), "cpu"))
    assert "α 0.48 to 0.60" in shape and "(0,0) 0.48 ± 0.12 (FAIL)" in shape and "(1,0) 0.60 ± 0.13 (INCONCLUSIVE)" in shape
    assert "power under the paper's law 0.87 to 1.00" in shape and "Claim 5a as a whole: FAIL" in shape
    assert "missing runs" in answer.floor_lines([], "cpu")[0] and "missing runs" in answer.shape_lines([], "cpu")[0]
    # a degenerate fit (the smoke preset's) has no SE: said, never a crash
    cl = _claims()
    cl[1]["measured"]["(0,0)"]["alpha_se"] = None
    assert "(0,0) 0.48 (no SE) (FAIL)" in " ".join(answer.shape_lines(cl, "cpu"))


@pytest.mark.skipif(not (STUDY / "curves.csv").is_file(), reason="the cpu study's export is not committed")
def test_the_drops_read_from_curves_csv_equal_the_studys_own_computation():
    """answer.study_drops (plain Python over curves.csv) against convergence.drops (numpy over a row)."""
    study = answer.load_study(STUDY)
    study = {**study, "decision": {k: v for k, v in study["decision"].items() if k != "drops"}}
    which, mine = answer.study_drops(study)
    curves = pd.read_csv(STUDY / "curves.csv")
    top = curves[(curves["series"] == "envelope") & (curves["steps"] == curves["steps"].max())].sort_values("L")
    row = {"depths": list(top["L"]), "R": list(top["R"]), "R_seeds": [[float(x) for x in s.split()] for s in top["R_seeds"]]}
    theirs = cv.drops(row)
    assert which == "the envelope at 20,000 steps" and len(mine) == len(theirs) == 6
    for a, b in zip(mine, theirs):
        assert a["L"] == b["L"] and a["drop"] == pytest.approx(b["drop"], abs=1e-5)  # (curves.csv's seeds: 6 digits)
        assert a["se"] == pytest.approx(b["se"], rel=1e-3)
        assert (math.isnan(a["ratio"]) and math.isnan(b["ratio"])) or a["ratio"] == pytest.approx(b["ratio"], rel=1e-2)


def _study(tmp_path, outcome="not reproduced"):
    d = tmp_path / "study"
    d.mkdir()
    (d / "decision.json").write_text(json.dumps({"rule": "RULE TEXT", "decisions": [
        {"outcome": outcome, "text": "(0,0): " + outcome + " — details",
         "drops": [{"L": 1, "drop": 0.047, "se": 0.0002, "ratio": float("nan")},
                   {"L": 2, "drop": 0.0123, "se": 0.0004, "ratio": 0.26}]}]}))
    pd.DataFrame([{"series": "faithful", "steps": 20000, "alpha": 0.68, "alpha SE": 0.12, "R2": 0.987},
                  {"series": "faithful", "steps": 5000, "alpha": 0.06, "alpha SE": 0.3, "R2": 0.9}]).to_csv(
        d / "budgets.csv", index=False)
    (d / "budgets.md").write_text("| series | steps |\n|---|---|\n| envelope | 20000 |\n")
    return d


def test_the_study_lines_state_outcome_rule_drops_faithful_and_what_would_change_it(tmp_path):
    lines = answer.study_lines(answer.load_study(_study(tmp_path)))
    text = "\n".join(lines)
    assert lines[0].startswith("**The convergence study's outcome: not reproduced.** (0,0): not reproduced — details")
    assert "Its rule: RULE TEXT" in text
    assert "L=1→2: 0.0470 ± 0.0002, L=2→4: 0.0123 ± 0.0004; successive ratios 0.26" in text
    assert "α 0.68 ± 0.12, R² 0.987 at 20,000 steps" in text  # the largest budget's faithful row
    assert "What would change it" in text
    assert "What would decide it" in answer.change_line({"outcome": "undetermined"})
    assert answer.load_study(tmp_path / "nowhere") is None and "no exported results" in answer.study_lines(None)[0]


def test_the_report_opens_with_the_answer_in_markdown_and_html(tmp_path):
    d = _study(tmp_path)
    shutil.copyfile(ROOT / "docs" / "report" / "cpu" / "cpu" / "fig6.png", d / "convergence.png")
    out = tmp_path / "out"
    out.mkdir()
    header = {"paper": "P", "date": "today", "versions": {}, "answer": answer.answer_section(_claims(), d, "cpu", out)}
    from depthscale.report.pages import answer_md

    md = "\n".join(answer_md(header))
    assert md.startswith(f"## {ANSWER_TITLE}")
    assert "![the convergence study](study/convergence.png)" in md and (out / "study" / "convergence.png").is_file()
    assert "| envelope | 20000 |" in md
    from depthscale.report.pages import answer_html

    page = "\n".join(answer_html(header, out))
    assert "<strong>What reproduces — the floor.</strong>" in page and "data:image/png;base64," in page
    assert not re.search(r"\*\*", page)


def test_the_answer_covers_every_spectrum_studied_and_names_the_command_for_the_rest(tmp_path):
    """Issue 48: one line per spectrum of SPEC §9's "more spectra", in its order — the exported decision
    with γ where studies/results/convergence_spectra/<tag>/decision.json exists beside the (0,0) study,
    else the command that studies it and its estimated cost."""
    from depthscale.experiments import convergence_spectra as cs

    d = _study(tmp_path)
    gamma = cs.gamma_fit([1, 2, 4, 8], [3.0, 3.2, 3.5, 3.7])
    one = tmp_path / "convergence_spectra" / "1-0"
    one.mkdir(parents=True)
    (one / "decision.json").write_text(json.dumps({
        "spectrum": "(1,0)", "seeds": [0, 1, 2], "gamma": gamma,
        "decisions": [{"outcome": "reproduced", "text": "(1,0): reproduced — (a) all depths: α 0.98 ± 0.05"}]}))
    lines = answer.spectra_lines(d)
    assert len(lines) == len(cs.SPECTRA) == 4
    assert lines[0] == (f"**(1,0): reproduced** (3 seeds) — (a) all depths: α 0.98 ± 0.05; {gamma['text']}. "
                        "The paper: L0 0.341, α 0.994 (its Table 5, of L0 − C_L).")  # the decision's opening not repeated
    assert "γ = 0.1" in lines[0]  # A_L − C_L grows as about L^0.1 here
    for line, tag, cost in zip(lines[1:], ("0-1", "05-05", "top16"), ("40 min", "40 min", "1 h 35 min")):
        assert "not studied yet" in line and f"depthscale reproduce convergence-spectra-{tag} --preset cpu" in line
        assert "--out report/convergence-spectra" in line  # (reproduce requires --out: the command must run as given)
        assert f"--spectrum {tag}" in line and cost in line, line
    assert "(0,0.5) (top-16): not studied yet" in lines[3]
    assert answer.spectra_lines(None) == []
    # the paper's L0 beside part (a)'s, and Table 4's α where it has the spectrum's row
    from depthscale.experiments.convergence_spectra import SPECTRA

    assert answer.paper_text(SPECTRA[0], {"all_depths": {"L0": 0.3415}}) == (
        "The paper: L0 0.341 (ours 0.3415, +0.1%), α 0.994 (its Table 5, of L0 − C_L).")
    assert answer.paper_text(SPECTRA[2], {"all_depths": {"L0": 0.38}}) == (
        "The paper: L0 0.3822 (ours 0.3800, -0.6%), α 0.97 (its Table 4).")
    assert answer.paper_text(SPECTRA[3], {}) == "The paper: L0 0.1144, α 0.88 (its Table 4)."  # no fit of ours
    out = tmp_path / "out"
    out.mkdir()
    assert answer.answer_section(_claims(), d, "cpu", out)["lines"][-4:] == lines  # the report's section ends with them


def test_a_refined_decision_replaces_the_first_rules_outcome_in_the_studys_table(tmp_path):
    """The committed study's budgets.md says "Outcome — undetermined" (the first rule); the answer says
    "not reproduced" (decision_refined.json): the report must not state both."""
    d = _study(tmp_path)
    (d / "budgets.md").write_text("| series | steps |\n|---|---|\n| envelope | 20000 |\n\nDecision rule — OLD RULE\n\n"
                                  "Chosen by the final monitor loss — L=1: x\n\nOutcome — (0,0): undetermined — old\n")
    assert "undetermined — old" in answer.load_study(d)["table_md"]  # no refined decision: the export as it is
    (d / "decision_refined.json").write_text(json.dumps({"rule": "REFINED", "decision": {
        "outcome": "not reproduced", "text": "(0,0): not reproduced — refined"}}))
    table = answer.load_study(d)["table_md"]
    assert "| envelope | 20000 |" in table and "Chosen by the final monitor loss — L=1: x" in table
    assert "undetermined" not in table and "OLD RULE" not in table
    assert table.rstrip().endswith("Outcome (SPEC §9's refined rule, decision_refined.json) — (0,0): not reproduced — refined")
