"""The house is kept by checks, not by memory: the layer contracts (import-linter, pyproject.toml's
[tool.importlinter]) hold, no module imports in a cycle (imports inside functions included), and
the README's map of the layers is the contract's. Size is by function (tests/test_function_size.py),
not by module."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "depthscale"


def _layers() -> list[str]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        pytest.skip("tomllib needs Python 3.11")
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return next(c for c in cfg["contracts"] if c["type"] == "layers")["layers"]


def test_import_linter_contracts_hold():
    exe = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    if not Path(exe).exists():
        pytest.fail("lint-imports is not installed: pip install -e '.[test]' installs import-linter")
    out = subprocess.run([exe], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout


def test_every_module_is_in_a_layer():
    named = {m.strip() for line in _layers() for m in line.split(":")}
    modules = set()
    for p in SRC.rglob("*.py"):
        rel = p.relative_to(SRC.parent).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        if len(parts) > 1:
            modules.add(".".join(parts[:2]))  # a package (kinds, experiments) is one layer entry
    assert modules - {"depthscale.__init__"} <= named, sorted(modules - named)


def test_no_import_cycles_lazy_imports_included():
    grimp = pytest.importorskip("grimp")
    g = grimp.build_graph("depthscale")
    mods = sorted(m for m in g.modules if m != "depthscale")
    deps = {m: {d for d in g.find_modules_directly_imported_by(m) if d in g.modules and d != "depthscale"}
            for m in mods}
    state, cycles = {}, []

    def visit(m, path):
        state[m] = 1
        for d in sorted(deps[m]):
            if d.startswith(m + ".") or m.startswith(d + "."):
                continue  # a package and its own modules
            if state.get(d) == 1:
                cycles.append(path[path.index(d):] + [d] if d in path else [m, d])
            elif not state.get(d):
                visit(d, path + [d])
        state[m] = 2

    for m in mods:
        if not state.get(m):
            visit(m, [m])
    assert not cycles, cycles[:5]


def test_the_readme_map_is_the_contract():
    text = (ROOT / "README.md").read_text()
    block = re.search(r"<!-- layers:begin -->\n```text\n(.*?)```\n<!-- layers:end -->", text, re.S)
    assert block, "README.md lacks the generated layer block (python scripts/layers.py --write)"
    from importlib.util import module_from_spec, spec_from_file_location

    spec = spec_from_file_location("layers", ROOT / "scripts" / "layers.py")
    mod = module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert block.group(1) == mod.render(_layers()), "README's layer map differs from pyproject's contract: " \
                                                    "run python scripts/layers.py --write"


def test_the_readme_links_resolve():
    """Every relative link and image of the README names a file of the repository (the committed
    figure at its top included)."""
    text = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    rel = [t for t in targets if not t.startswith(("http://", "https://", "mailto:"))]
    assert rel and any(t.endswith(".png") for t in rel)
    missing = [t for t in rel if not (ROOT / t).exists()]
    assert not missing, missing
