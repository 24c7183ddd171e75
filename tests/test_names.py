"""One name, one home (issue 34 item 3): inside src/depthscale no module imports another module's
private (underscore) name, either as `from depthscale.x import _name` or as `x._name` on an imported
module. Tests may still reach privates; the rule is for the package."""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PKG = SRC / "depthscale"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def _source_of(node: ast.ImportFrom, module: str, path: Path) -> str:
    """The absolute module a `from ... import` reads from (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    base = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for _ in range(node.level - 1):
        base = base.rpartition(".")[0]
    return base + ("." + node.module if node.module else "")


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_crossings(module: str, path: Path, modules: dict[str, Path]) -> list[str]:
    """Every use in `module` of a private name that lives in another depthscale module."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found, aliases = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            src = _source_of(node, module, path)
            if not src.startswith("depthscale"):
                continue
            for a in node.names:
                if _private(a.name) and src != module:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: from {src} import {a.name}")
                if f"{src}.{a.name}" in modules:
                    aliases[a.asname or a.name] = f"{src}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("depthscale"):
                    aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and _private(node.attr) and isinstance(node.value, ast.Name)
                and node.value.id in aliases and aliases[node.value.id] != module):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value.id}.{node.attr}")
    return found


def test_no_private_name_crosses_a_module():
    modules = _modules()
    found = [line for m, p in modules.items() for line in private_crossings(m, p, modules)]
    assert not found, "private names used outside their module:\n" + "\n".join(found)


def test_the_check_sees_a_private_import(tmp_path):
    """The checker itself: a planted `from depthscale.bench.machine import _x` and `pages._y` are found."""
    pkg = tmp_path / "src" / "depthscale"
    pkg.mkdir(parents=True)
    bad = pkg / "bad.py"
    bad.write_text("from depthscale.bench.machine import _x, ok\nfrom depthscale.report import pages\npages._y()\n"
                   "from .plotting import _z\n_own = 1\n")
    global ROOT
    old = ROOT
    ROOT = tmp_path
    try:
        found = private_crossings("depthscale.bad", bad, {"depthscale.report.pages": pkg / "pages.py"})
    finally:
        ROOT = old
    assert [f.split(": ", 1)[1] for f in found] == [
        "from depthscale.bench.machine import _x", "from depthscale.plotting import _z", "pages._y"]


def test_plot_curves_loads_no_experiment():
    """`plot curves` draws with depthscale.cli.plots: importing it and building a curves figure must not
    load the registry (and with it every experiment and plug-in)."""
    code = ("import sys, matplotlib; matplotlib.use('Agg')\n"
            "import depthscale.cli.plots as p\n"
            "cur = {'step': [0, 1, 2], 'R': [3.0, 2.0, 0.5]}\n"
            "p.curves_figure({'a': cur}, {'a': 'a'}, ['R'])\n"
            "bad = sorted(m for m in sys.modules if m == 'depthscale.experiments.registry' or m.startswith('depthscale.experiments'))\n"
            "print(bad)\n"
            "sys.exit(1 if bad else 0)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**__import__("os").environ, "PYTHONPATH": str(SRC)})
    assert out.returncode == 0, out.stdout + out.stderr[-2000:]


def _defined(body: list[ast.stmt]) -> set[str]:
    """The names a module body binds itself: def, class, assignment (also under if/try)."""
    out = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            out |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.If, ast.Try)):
            handlers = [s for h in getattr(node, "handlers", []) for s in h.body]
            out |= _defined(node.body + node.orelse + handlers + getattr(node, "finalbody", []))
    return out


def reexports(path: Path) -> list[str]:
    """The names of `__all__` that the module does not define (it imports them from elsewhere)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names = next((ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                  and any(isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets)), [])
    own = _defined(tree.body)
    return [n for n in names if n not in own]


def test_every_public_name_has_one_home():
    """A name in a module's `__all__` is defined there: one door per name (the package's
    `__init__` and a `compat` module are the only places that may hand on names from elsewhere)."""
    found = {m: r for m, p in _modules().items() if p.name not in ("__init__.py", "compat.py")
             if (r := reexports(p))}
    assert not found, f"modules re-exporting names defined elsewhere: {found}"


def test_the_reexport_check_sees_one(tmp_path):
    mod = tmp_path / "m.py"
    mod.write_text("from depthscale.store.store import Store\nX = 1\ndef f(): pass\n"
                   "try:\n    import y\n    Y = 2\nexcept ImportError:\n    Y = None\n"
                   "__all__ = ['Store', 'X', 'f', 'Y']\n")
    assert reexports(mod) == ["Store"]
