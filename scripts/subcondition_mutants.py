"""Every sub-condition of SPEC §9 that issue 33 found untested has a test that fails without it.

Applies, one at a time and then all at once, a mutant that removes one sub-condition from a claim
(the ten of issue 33 item 9), to a copy of src/ in a temporary directory, and runs the claim tests
against the copy. A mutant that no test kills is printed and the script exits 1. The working tree
is never changed. Takes ~1-2 min on 2 cores.

    python scripts/subcondition_mutants.py [-k PATTERN]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXP = "src/depthscale/experiments/"
# (name, file, the text of the sub-condition, the text without it); the 5a "side" mutants remove
# one side of the window each (alone only: they edit the same text as "5a: top-2 window")
MUTANTS = [
    ("1: α range", EXP + "linear_easy.py", "and lo - 2 * se <= f.alpha <= hi + 2 * se)", "and True)"),
    ("3: R_1 < 1%", EXP + "nonlinear_easy.py", "good = bool(R1 < 0.01 and not helps and top1_ok)",
     "good = bool(not helps and top1_ok)"),
    ("4b: lower side", EXP + "linear_difficult.py", "good = bool(abs(rel) <= 0.05)", "good = bool(rel <= 0.05)"),
    ("5a: top-2 window", EXP + "inverse_depth.py", "a_ok = f is not None and lo <= f.alpha <= hi",
     "a_ok = f is not None"),
    ("5a: top-2 lower side", EXP + "inverse_depth.py", "a_ok = f is not None and lo <= f.alpha <= hi",
     "a_ok = f is not None and f.alpha <= hi"),
    ("5a: top-2 upper side", EXP + "inverse_depth.py", "a_ok = f is not None and lo <= f.alpha <= hi",
     "a_ok = f is not None and lo <= f.alpha"),
    ("5c: paper side", EXP + "nonlinear_floor.py", "abs(rp) <= 0.05 and abs(rf) <= 0.05)", "abs(rf) <= 0.05)"),
    ("6: C side", EXP + "inverse_depth.py", "good = bool(dC < 0.1 and dG < 0.1)", "good = bool(dG < 0.1)"),
    ("8a: α window", EXP + "variants.py", "a_ok = f is not None and 0.6 <= f.alpha <= 1.3", "a_ok = f is not None"),
    ("8b: saturation", EXP + "variants.py", "ok = sat and neg and flat", "ok = neg and flat"),
    ("9: ρ_2", EXP + "variants.py", '(2, lambda r: r > 0.9, "> 0.9")', '(2, lambda r: True, "> 0.9")'),
    ("11: α window", EXP + "nonlinear_floor.py", "a_ok = 0.8 <= g.alpha <= 1.2", "a_ok = True"),
]
TESTS = "tests/test_claims.py"


def claim_tests(names) -> list[str]:
    """Node ids of test_claim's cases of the claims the mutants named `names` touch ('5a: ...' -> 5a)."""
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", TESTS],
                         cwd=ROOT, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT / "src")))
    ids = {n.split(":")[0] for n in names}
    return [line for line in out.stdout.splitlines()
            if "::test_claim[" in line and line.split("[", 1)[1].split("-", 1)[0] in ids]


def apply(tree: Path, mutants) -> None:
    for name, rel, old, new in mutants:
        f = tree / rel
        text = f.read_text()
        if text.count(old) != 1:
            sys.exit(f"mutant {name!r}: {old!r} occurs {text.count(old)} times in {rel} (the claim changed: update "
                     f"scripts/subcondition_mutants.py)")
        f.write_text(text.replace(old, new))


def killed(mutants) -> tuple[bool, float]:
    """Whether the claim's tests fail against src/ with `mutants` applied, and the seconds it took."""
    tests = claim_tests([m[0] for m in mutants])
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp)
        shutil.copytree(ROOT / "src", tree / "src", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
        apply(tree, mutants)
        env = dict(os.environ, PYTHONPATH=f"{tree / 'src'}{os.pathsep}{ROOT / 'tests'}")
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests],
                           cwd=ROOT, env=env, capture_output=True, text=True)
        return r.returncode != 0, time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-k", default="", help="only the mutants whose name contains this")
    args = ap.parse_args()
    todo = [m for m in MUTANTS if args.k in m[0]]
    survivors = []
    for m in todo:
        dead, sec = killed([m])
        print(f"{'killed ' if dead else 'SURVIVED'} {m[0]} ({sec:.0f} s)", flush=True)
        if not dead:
            survivors.append(m[0])
    if not args.k:  # issue 33: all ten removed at once and every claim test still passed
        dead, sec = killed([m for m in MUTANTS if "side" not in m[0] or m[0].startswith("4b")])
        print(f"{'killed ' if dead else 'SURVIVED'} all at once ({sec:.0f} s)")
        survivors += [] if dead else ["all at once"]
    print(f"{len(todo) - len(survivors)} of {len(todo)} killed" + (f"; survivors: {survivors}" if survivors else ""))
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
