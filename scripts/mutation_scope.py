"""Which functions of a module make its verdicts, as mutmut name patterns, and the score over them (issue 47).

    python scripts/mutation_scope.py patterns FILE           # fnmatch patterns of the module's verdict mutants
    python scripts/mutation_scope.py score FILE RESULTS [RERUN ...]   # one line: the score over those mutants
    python scripts/mutation_scope.py functions FILE          # the verdict functions, then the others
    python scripts/mutation_scope.py merged FILE RESULTS [RERUN ...]  # 'mutant: status' of the verdict mutants

The verdict functions of a module are its roots and every module-level function they reach (a call,
or a function handed on by name, followed transitively). The roots: the check functions its `Claim(...)`
entries name (the experiments' modules); the convergence study's decision (ROOTS below); every function
of a module whose whole purpose is the verdict (claims, certificates, power, fits). The rest of an
experiments module draws its figure and writes its tables: mutmut still generates those mutants, but
mutation.sh runs and scores only the verdict ones (the figures are checked by the figure checks, not
by the claim tests these mutants run against).
"""
from __future__ import annotations

import ast
import fnmatch
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WHOLE = {"claims.py", "certificates.py", "power.py", "fits.py"}
ROOTS = {  # modules without Claim entries: the functions the study's decision is made by
    "convergence.py": ("decision", "study_rows", "followup", "selection_at", "law_alpha_range"),
}
STATUS = re.compile(r"^\s*(\S+): (.+?)\s*$")


def module_name(path: Path) -> str:
    rel = path.resolve().relative_to(ROOT / "src")
    return ".".join(rel.with_suffix("").parts)


def _functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _claim_roots(tree: ast.Module, names: set[str]) -> set[str]:
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Claim":
            roots |= {a.id for a in node.args if isinstance(a, ast.Name) and a.id in names}
    return roots


def verdict_functions(path: Path) -> tuple[list[str], list[str]]:
    """(the verdict functions, the others) of the module at `path`, each sorted."""
    tree = ast.parse(path.read_text())
    funcs = _functions(tree)
    if path.name in WHOLE:
        return sorted(funcs), []
    roots = set(ROOTS.get(path.name, ())) or _claim_roots(tree, set(funcs))
    if not roots:
        raise SystemExit(f"mutation_scope: no verdict functions found in {path} (add its roots to ROOTS)")
    missing = roots - set(funcs)
    if missing:
        raise SystemExit(f"mutation_scope: ROOTS names functions {path} does not define: {sorted(missing)}")
    seen, todo = set(), list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo += [n.id for n in ast.walk(funcs[name]) if isinstance(n, ast.Name) and n.id in funcs]
    return sorted(seen), sorted(set(funcs) - seen)


def patterns(path: Path) -> list[str]:
    mod = module_name(path)
    return [f"{mod}.x_{name}__mutmut_*" for name in verdict_functions(path)[0]]


def statuses(results: list[Path]) -> dict[str, str]:
    """{mutant: status} from mutmut's `results` listings, a later listing overriding an earlier one
    except where it says "not checked" (a re-run of the survivors by name, after new tests, lists
    every other mutant so: their first run's verdict stands, the tests having only grown)."""
    out: dict[str, str] = {}
    for f in results:
        for line in f.read_text().splitlines():
            m = STATUS.match(line)
            if m and (m.group(2) != "not checked" or m.group(1) not in out):
                out[m.group(1)] = m.group(2)
    return out


def verdict_statuses(path: Path, results: list[Path]) -> dict[str, str]:
    """`statuses` of the module's verdict mutants only."""
    pats = patterns(path)
    return {n: st for n, st in statuses(results).items() if any(fnmatch.fnmatch(n, p) for p in pats)}


def score(path: Path, *results: Path) -> str:
    """The score line over the verdict mutants in mutmut's `results` listings (see statuses)."""
    counts: dict[str, int] = {}
    for status in verdict_statuses(path, list(results)).values():
        counts[status] = counts.get(status, 0) + 1
    k, t, s = (counts.get(x, 0) for x in ("killed", "timeout", "survived"))
    checked = k + t + s
    pct = f"{100 * k / checked:.1f}% killed without timeouts" if checked else "none checked"
    other = {st: n for st, n in counts.items() if st not in ("killed", "timeout", "survived")}
    return (f"verdict functions: {sum(counts.values())} mutants, killed {k}, timeout {t}, survived {s}, "
            f"other {other or 0}; {pct}")


ARGS = {"patterns": 2, "functions": 2, "score": 3, "merged": 3}  # each command's least argument count


def main(argv: list[str]) -> None:
    if not argv or argv[0] not in ARGS or len(argv) < ARGS[argv[0]]:
        raise SystemExit(__doc__)
    path = Path(argv[1])
    if not path.is_file():
        raise SystemExit(f"mutation_scope: no such file: {path}")
    if argv[0] == "patterns":
        print("\n".join(patterns(path)))
    elif argv[0] == "functions":
        inside, outside = verdict_functions(path)
        print("verdict: " + " ".join(inside))
        print("not mutated (figures, tables, notes): " + (" ".join(outside) or "none"))
    elif argv[0] == "merged":
        print("\n".join(f"{n}: {st}" for n, st in sorted(verdict_statuses(path, list(map(Path, argv[2:]))).items())))
    else:
        print(score(path, *map(Path, argv[2:])))


if __name__ == "__main__":
    main(sys.argv[1:])
