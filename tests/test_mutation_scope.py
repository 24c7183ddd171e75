"""scripts/mutation_scope.py: which functions mutation testing scores as verdict-making (issue 47)."""
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("mutation_scope", ROOT / "scripts" / "mutation_scope.py")
scope = importlib.util.module_from_spec(spec)
spec.loader.exec_module(scope)
EXP = ROOT / "src" / "depthscale" / "experiments"


def test_the_verdict_functions_are_the_checks_and_what_they_reach_not_the_figures(tmp_path):
    inside, outside = scope.verdict_functions(EXP / "nonlinear_floor.py")
    assert {"c5b", "c5c", "c11", "_row_5b", "_item_11", "power_11", "comparator_problem"} <= set(inside)
    assert {"table1", "table5", "table6"} <= set(outside) and not set(inside) & set(outside)
    inside, outside = scope.verdict_functions(EXP / "convergence.py")
    assert {"decision", "drops", "certify_row", "monitor_best_picks"} <= set(inside)
    assert {"figure", "export", "_excess_panel"} <= set(outside)
    inside, outside = scope.verdict_functions(ROOT / "src" / "depthscale" / "analysis" / "claims.py")
    assert outside == [] and "check" in inside
    mod = tmp_path / "m.py"  # reached through a helper two calls down, and handed on by name
    mod.write_text("def c1(r, t):\n    return a(r)\n\ndef a(r):\n    return map(b, r)\n\ndef b(x):\n    return x\n\n"
                   "def fig(r, t):\n    return b(r)\n\nCLAIMS = (Claim('1', 't', 'r', c1, ()),)\n")
    assert scope.verdict_functions(mod) == (["a", "b", "c1"], ["fig"])
    mod.write_text("def fig(r, t):\n    return r\n")
    with pytest.raises(SystemExit, match="no verdict functions"):
        scope.verdict_functions(mod)


def test_the_score_counts_only_the_verdict_mutants(tmp_path):
    f = EXP / "selection.py"
    m = scope.module_name(f)
    assert m == "depthscale.experiments.selection"
    res = tmp_path / "r.txt"
    res.write_text(f"    {m}.x_c10__mutmut_1: killed\n    {m}.x_c10__mutmut_2: survived\n"
                   f"    {m}.x_judged_tail__mutmut_3: timeout\n    {m}.x_fig13__mutmut_1: survived\n"
                   f"    {m}.x_delta_q__mutmut_9: not checked\n")
    line = scope.score(f, res)
    assert line.startswith("verdict functions: 4 mutants, killed 1, timeout 1, survived 1, other {'not checked': 1}")
    assert line.endswith("33.3% killed without timeouts")


def test_a_rerun_of_the_survivors_overrides_them_and_leaves_the_first_verdicts(tmp_path, capsys):
    f = EXP / "selection.py"
    m = scope.module_name(f)
    first, again = tmp_path / "first.txt", tmp_path / "again.txt"
    first.write_text(f"    {m}.x_c10__mutmut_1: killed\n    {m}.x_c10__mutmut_2: survived\n"
                     f"    {m}.x_c10__mutmut_3: survived\n")
    again.write_text(f"    {m}.x_c10__mutmut_1: not checked\n    {m}.x_c10__mutmut_2: killed\n"
                     f"    {m}.x_c10__mutmut_3: survived\n    {m}.x_c10__mutmut_4: not checked\n")
    assert scope.statuses([first, again]) == {f"{m}.x_c10__mutmut_{i}": s for i, s in
                                              ((1, "killed"), (2, "killed"), (3, "survived"), (4, "not checked"))}
    assert scope.score(f, first, again).startswith("verdict functions: 4 mutants, killed 2, timeout 0, survived 1")
    scope.main(["merged", str(f), str(first), str(again)])  # the listing committed per module: verdict mutants only
    assert capsys.readouterr().out.splitlines() == [f"{m}.x_c10__mutmut_{i}: {s}" for i, s in
                                                    ((1, "killed"), (2, "killed"), (3, "survived"), (4, "not checked"))]
