"""The paper's numbers (SPEC §8) and the spectra its figures and tables use (SPEC §7), shared by
the experiments that read them (several experiments read one spectrum list: fig5, fig6, table1,
table5 and the claims 4a, 5b, 6, 11 all use FIG56_SPECTRA).

Choices where SPEC is silent:
- fig7 uses (a, b) = (1, 0), a fig6 spectrum with a > 0, and also the linear model at (1, 0)
  (fig5's run) for the spread comparison of claim 7; fig8 draws (1, 0) too.
- table3 trains its spectra at depths 1, 2 and Lmax only ("plateau" depths): enough for the
  plateau R_Lmax and the plateau-by-L=2 check; the (0, 0) k = 2 row shares fig5's runs.
- fig3c shows modes 1, 2, 4, 8 of the fig3 spectrum (1, 2).
"""

from __future__ import annotations

from depthscale.config.records import Spectrum


def _sp(*pairs) -> tuple[Spectrum, ...]:
    return tuple((float(a), float(b)) for a, b in pairs)


# Why each geometry (SPEC §1; docs/geometry.md has the numbers): one line for the report.
GEOMETRY_EVIDENCE = (
    "linear runs at the paper's linear geometry d = 128, P = 1024 (its Table 3 theory values are "
    "reproduced there) or, at cpu, d = 32 with the same P/d = 8; softmax models at d = 16, P = 64, "
    "where the paper's fitted L0 lies 1-4% below the best infinitely deep ensemble of cosine-softmax "
    "heads on all ten top-2 spectra (at d = 128, P = 1024 that floor is ten times the paper's "
    "L0). See docs/geometry.md.")

# --- the spectra of SPEC §7 ---
FIG3_SPECTRA = _sp((2, 0.5), (2, 1), (2, 1.5), (2, 2), (0.5, 2), (1, 2), (1.5, 2))  # = table2's
FIG4_SPECTRA = _sp((0, 0), (0.25, 0), (0.5, 0), (1, 0), (0, 0.25), (0, 0.5), (0, 1))
FIG56_SPECTRA = _sp((0, 0), (0, 0.25), (0, 0.5), (0, 1), (0.25, 0), (0.5, 0), (1, 0))  # table1's order
FIG7_SPECTRUM = (1.0, 0.0)
FIG8_SPECTRUM = (1.0, 0.0)
FIG3C_SPECTRUM = (1.0, 2.0)
FIG3C_MODES = (1, 2, 4, 8)
FIG7_MODES = (1, 2, 4, 8)
FIG14_K2 = _sp((0.25, 0.25), (0.25, 0.5), (0.5, 0.5))
FIG14_K16 = _sp((0, 0.25), (0, 0.5), (0.25, 0.25), (0.25, 0.5))
TOP2_SPECTRA = FIG56_SPECTRA + FIG14_K2  # every top-2 spectrum of Tables 1 and 4
TABLE3_K2 = _sp((0, 0), (0.25, 0.25), (0.5, 0.5), (1, 0.25), (1, 1))
TABLE3_K16 = _sp((0.5, 0.5), (1, 0), (1, 0.25), (1.25, 0))
ORIGIN = _sp((0, 0))
# claim 5b: the linear model trained at the nonlinear geometry (d = N = 16, P = 64), every fig5 spectrum
SOFTMAX_GEOMETRY_FIELDS = (("d", 16), ("P", 64), ("N", 16))


# The paper's numbers (SPEC §8), for side-by-side reporting; identical to shared/paper_values.json
# (a test checks it). Kept in the package so a report needs nothing outside it.
PAPER: dict = {
    "source": "Peng, Liu, Liu, Gore. Emergent Inverse-Depth Scaling From Nonlinearity In Attention. arXiv 2610.11063",
    "table1_L0_difficult_k2": {
        "spectra": [[0, 0], [0, 0.25], [0, 0.5], [0, 1], [0.25, 0], [0.5, 0], [1, 0]],
        "nonlinear": [2.007, 1.268, 0.836, 0.424, 1.255, 0.798, 0.341],
        "linear": [59.853, 23.055, 9.766, 2.504, 22.962, 9.501, 2.12],
    },
    "table2_linear_easy": [
        {"a": 2, "b": 0.5, "zeta": 0.75, "alpha": 1.121, "two_zeta": 1.5},
        {"a": 2, "b": 1, "zeta": 1.0, "alpha": 1.485, "two_zeta": 2.0},
        {"a": 2, "b": 1.5, "zeta": 1.25, "alpha": 1.684, "two_zeta": 2.5},
        {"a": 2, "b": 2, "zeta": 1.5, "alpha": 1.987, "two_zeta": 3.0},
        {"a": 0.5, "b": 2, "zeta": 3.0, "alpha": 3.31, "two_zeta": 6.0},
        {"a": 1, "b": 2, "zeta": 2.0, "alpha": 2.552, "two_zeta": 4.0},
        {"a": 1.5, "b": 2, "zeta": 1.667, "alpha": 2.163, "two_zeta": 3.333},
    ],
    "table3_linear_floor": [
        {"k": 2, "a": 0, "b": 0, "theory": 59.3714, "theory_se": 0.0213, "measured": 59.8502},
        {"k": 2, "a": 0.25, "b": 0.25, "theory": 9.7004, "theory_se": 0.0049, "measured": 9.7387},
        {"k": 2, "a": 0.5, "b": 0.5, "theory": 2.2715, "theory_se": 0.0061, "measured": 2.3274},
        {"k": 2, "a": 1, "b": 0.25, "theory": 1.2246, "theory_se": 0.0106, "measured": 1.2259},
        {"k": 2, "a": 1, "b": 1, "theory": 0.4975, "theory_se": 0.0102, "measured": 0.5036},
        {"k": 16, "a": 0.5, "b": 0.5, "theory": 0.3218, "theory_se": 0.0042, "measured": 0.3083},
        {"k": 16, "a": 1, "b": 0, "theory": 0.4481, "theory_se": 0.0086, "measured": 0.4452},
        {"k": 16, "a": 1, "b": 0.25, "theory": 0.3186, "theory_se": 0.0085, "measured": 0.3222},
        {"k": 16, "a": 1.25, "b": 0, "theory": 0.3595, "theory_se": 0.009, "measured": 0.3659},
    ],
    "table4_nonlinear_fits": [
        {"k": 2, "a": 0.25, "b": 0.25, "L0": 0.818068, "alpha": 0.97, "alpha_se": 0.01, "r2": 0.9998},
        {"k": 2, "a": 0.25, "b": 0.5, "L0": 0.559694, "alpha": 0.93, "alpha_se": 0.06, "r2": 0.9984},
        {"k": 2, "a": 0.5, "b": 0.5, "L0": 0.382188, "alpha": 0.97, "alpha_se": 0.01, "r2": 0.9999},
        {"k": 16, "a": 0, "b": 0.25, "L0": 0.173237, "alpha": 0.79, "alpha_se": 0.02, "r2": 0.9999},
        {"k": 16, "a": 0, "b": 0.5, "L0": 0.114436, "alpha": 0.88, "alpha_se": 0.03, "r2": 0.9998},
        {"k": 16, "a": 0.25, "b": 0.25, "L0": 0.115248, "alpha": 0.81, "alpha_se": 0.02, "r2": 0.9998},
        {"k": 16, "a": 0.25, "b": 0.5, "L0": 0.079785, "alpha": 0.81, "alpha_se": 0.04, "r2": 0.9994},
    ],
    "table5_gap_fits": [
        {"a": 0, "b": 0, "alpha": 0.98, "alpha_se": 0.007, "r2": 0.99981},
        {"a": 0, "b": 0.25, "alpha": 0.983, "alpha_se": 0.038, "r2": 0.99396},
        {"a": 0, "b": 0.5, "alpha": 0.977, "alpha_se": 0.014, "r2": 0.99923},
        {"a": 0, "b": 1, "alpha": 0.982, "alpha_se": 0.011, "r2": 0.99946},
        {"a": 0.25, "b": 0, "alpha": 0.99, "alpha_se": 0.015, "r2": 0.99904},
        {"a": 0.5, "b": 0, "alpha": 0.986, "alpha_se": 0.005, "r2": 0.99988},
        {"a": 1, "b": 0, "alpha": 0.994, "alpha_se": 0.005, "r2": 0.99992},
    ],
    "context_updates": {"m_top16": -2.3, "rho_top2": 0.9999, "rho_top2_r2_min": 0.9999, "rho_top16": 0.0989, "rho_top16_r2": 0.99996},
}


def paper_L0_top2() -> dict[Spectrum, float]:
    """The paper's fitted nonlinear L0 for every top-2 spectrum (Table 1 and the k = 2 rows of Table 4)."""
    t1 = PAPER["table1_L0_difficult_k2"]
    out = {(float(a), float(b)): v for (a, b), v in zip(t1["spectra"], t1["nonlinear"])}
    out.update({(float(r["a"]), float(r["b"])): r["L0"] for r in PAPER["table4_nonlinear_fits"] if r["k"] == 2})
    return out


__all__ = ["PAPER", "paper_L0_top2", "GEOMETRY_EVIDENCE", "FIG3_SPECTRA", "FIG4_SPECTRA", "FIG56_SPECTRA",
           "FIG7_SPECTRUM", "FIG8_SPECTRUM", "FIG3C_SPECTRUM", "FIG3C_MODES", "FIG7_MODES", "FIG14_K2", "FIG14_K16",
           "TOP2_SPECTRA", "TABLE3_K2", "TABLE3_K16", "ORIGIN", "SOFTMAX_GEOMETRY_FIELDS"]
