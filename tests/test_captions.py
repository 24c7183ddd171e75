"""The report's caption lines come from the claims' verdicts and numbers (issue 36), not fixed text."""

from depthscale.report.pages import _caption_html, _caption_md, caption_lines, measured_summary


def _claim(verdict, alpha=0.57, se=1.33, r2=0.62, uses=("fig6",)):
    return {"id": "5a", "claim": "Nonlinear, difficult: inverse-depth scaling", "preset": "smoke",
            "expected": "α ∈ [0.8, 1.2]", "uses": list(uses), "detail": "d", "verdict": verdict,
            "pass": verdict == "PASS",
            "measured": {"(0,0)": {"alpha": alpha, "alpha_se": se, "r2": r2, "fit_status": "ok"}}}


def test_caption_reflects_verdict_and_numbers():
    line, = caption_lines("fig6", [_claim("FAIL")])
    assert "FAIL" in line and "α = 0.57 ± 1.33 (R² 0.62)" in line
    assert "the paper's: Nonlinear, difficult: inverse-depth scaling" in line
    line2, = caption_lines("fig6", [_claim("INCONCLUSIVE", alpha=0.93, se=0.05, r2=0.995)])
    assert "INCONCLUSIVE" in line2 and "α = 0.93 ± 0.05 (R² 0.99)" in line2 and "FAIL" not in line2
    assert line != line2


def test_caption_only_claims_that_use_the_experiment():
    assert caption_lines("fig3", [_claim("FAIL")]) == []


def test_measured_summary_shapes():
    assert measured_summary(None) == "no data"
    assert measured_summary({"a": 1.23456, "b": [1, 2]}) == "a: 1.23"
    s = measured_summary({f"k{i}": float(i) for i in range(6)}, most=4)
    assert s.startswith("k0: 0; k1: 1; k2: 2; k3: 3") and "(2 more)" in s
    deg = measured_summary({"x": {"alpha": 0.01, "alpha_se": None, "r2": 0.9, "fit_status": "degenerate"}})
    assert deg == "x: α = 0.01 ± ? (R² 0.90, degenerate)"


def test_page_carries_the_caption_and_the_figure_check():
    sec = {"preset": "smoke", "ids": ["fig6"], "artifacts": {"fig6": ["smoke/fig6.png"]}, "tables": {},
           "claims": [_claim("FAIL")], "errors": {}, "notes": {},
           "provenance": {"commit": "x", "store": "s", "models": 0, "runs": 0},
           "figure_checks": {"fig6": ["(b): 2 points outside the y range"]}}
    md = "\n".join(_caption_md(sec, "fig6")) + "\n".join(_caption_html(sec, "fig6"))
    assert "**Measured at this preset:**" in md and "claim 5a FAIL" in md
    assert "Figure check: (b): 2 points outside the y range" in md
    assert "<strong>Measured at this preset:</strong>" in md and "<li>claim 5a FAIL" in md
