"""The house is kept by checks, not by memory: the layer contracts (import-linter, pyproject.toml's
[tool.importlinter]) hold, no module imports in a cycle (imports inside functions included), and
the README's map of the layers is the contract's. Size is by function (tests/test_function_size.py),
not by module."""

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "depthscale"


def _contracts() -> list[dict]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        pytest.skip("tomllib needs Python 3.11")
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def _layers() -> list[str]:
    return next(c for c in _contracts() if c["type"] == "layers")["layers"]


def test_import_linter_contracts_hold():
    exe = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    if not Path(exe).exists():
        pytest.fail("lint-imports is not installed: pip install -e '.[test]' installs import-linter")
    out = subprocess.run([exe], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout


def test_every_module_is_in_a_tier_package():
    """Every module lives in a package that is one tier of the contract (`a | b`: siblings); the top
    of the package holds only its __init__ and __main__ (no flat modules beside the tiers)."""
    named = {m.strip() for line in _layers() for m in line.split("|")}
    flat = sorted(p.name for p in SRC.glob("*.py") if p.stem not in ("__init__", "__main__"))
    assert not flat, f"modules outside a tier package: {flat}"
    packages = {p.relative_to(SRC).parts[0] for p in SRC.rglob("*.py") if len(p.relative_to(SRC).parts) > 1}
    assert packages <= named, sorted(packages - named)
    assert "__main__" in named


def test_the_contract_states_rules_beside_the_order():
    """The order alone says what may import what; the forbidden contracts keep the two branches
    apart where the order would let one in, and each names only packages that exist."""
    rules = [c for c in _contracts() if c["type"] == "forbidden"]
    assert rules
    for c in rules:
        for m in c["source_modules"] + c["forbidden_modules"]:
            assert (SRC / m.removeprefix("depthscale.")).is_dir(), (c["name"], m)


def _plants() -> list[tuple[str, str, str]]:
    """(contract, package, the package it is made to import): for the layers contract, the lowest
    tier imports the one above it; for a forbidden one, each source imports each forbidden module;
    for an independence one, the first module imports the second."""
    out = []
    for c in _contracts():
        if c["type"] == "layers":
            below, above = (c["layers"][i].split("|")[0].strip() for i in (-1, -2))
            out.append((c["name"], f"depthscale.{below}", f"depthscale.{above}"))
        elif c["type"] == "forbidden":
            out += [(c["name"], s, f) for s in c["source_modules"] for f in c["forbidden_modules"]]
        elif c["type"] == "independence":
            out.append((c["name"], c["modules"][0], c["modules"][1]))
        else:
            pytest.fail(f"no planted import for a {c['type']} contract: {c['name']}")
    return out


@pytest.fixture(scope="module")
def src_copy(tmp_path_factory) -> Path:
    """A copy of src/ and pyproject.toml that lint-imports reads instead of the package (PYTHONPATH)."""
    root = tmp_path_factory.mktemp("house")
    shutil.copytree(SRC, root / "src" / "depthscale", ignore=shutil.ignore_patterns("__pycache__", "csrc"))
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


def _lint(root: Path) -> dict[str, str]:
    """Each contract's verdict (KEPT or BROKEN) on the tree under `root`."""
    exe = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    env = {**os.environ, "PYTHONPATH": str(root / "src"), "COLUMNS": "1000"}
    out = subprocess.run([exe, "--no-cache", "pyproject.toml"], cwd=root, env=env, capture_output=True, text=True)
    verdicts = dict(re.findall(r"^(.+) (KEPT|BROKEN)$", out.stdout, re.M))
    assert verdicts, out.stdout[-3000:] + out.stderr[-2000:]
    return verdicts


@pytest.mark.parametrize("contract, source, target", _plants() if sys.version_info >= (3, 11) else [],
                         ids=lambda v: v.removeprefix("depthscale.") if v.startswith("depthscale.") else "")
def test_each_contract_alone_catches_its_planted_import(src_copy, contract, source, target):
    """Every rule forbids something no other contract does: an import planted into a copy of the
    package breaks that contract and no other (a rule the order already states fails here)."""
    init = src_copy / "src" / Path(*source.split(".")) / "__init__.py"
    text = init.read_text()
    init.write_text(text + f"\nimport {target}  # planted\n")
    try:
        verdicts = _lint(src_copy)
    finally:
        init.write_text(text)
    assert contract in verdicts, sorted(verdicts)
    assert {c for c, v in verdicts.items() if v == "BROKEN"} == {contract}, (source, target, verdicts)


def test_the_kinds_package_imports_every_module_that_registers_a_kind():
    """The registry loads the built-in kinds by importing depthscale.kinds (the package root hands
    it that import), so a kind's module that the package does not import would not exist."""
    tree = ast.parse((SRC / "kinds" / "__init__.py").read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "depthscale.kinds"
                for a in n.names}
    registering = {p.stem for p in (SRC / "kinds").glob("*.py") if re.search(r"^@register_kind\b", p.read_text(), re.M)}
    assert registering and registering == imported, (registering, imported)


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


def test_the_moved_table_names_each_old_module_once_and_its_real_home():
    """compat.MOVED maps every module of the 0.1 flat layout to a module that exists now; the old
    flat paths are gone (a package took a few of the names: those hold no module of the old name)."""
    from depthscale.base.compat import MOVED

    assert len(MOVED) == 59  # every flat module of 0.1 but __init__/__main__, and commands/
    for old, new in MOVED.items():
        rel = Path(*new.split(".")[1:])
        assert (SRC / rel).with_suffix(".py").is_file() or (SRC / rel / "__init__.py").is_file(), new
        assert not (SRC / (old.split(".")[1] + ".py")).exists(), old


def test_a_plugin_importing_an_old_path_is_told_the_new_one(tmp_path):
    from depthscale.base.errors import InputError
    from depthscale.base.plugins import load_plugin

    for line, hint in [("from depthscale.records import register", "depthscale.records is now depthscale.config.records"),
                       ("from depthscale.config import RunConfig", "depthscale.config is now depthscale.config.run"),
                       ("import depthscale.commands.runs", "depthscale.commands is now depthscale.cli.commands")]:
        f = tmp_path / f"plug{abs(hash(line))}.py"
        f.write_text(line + "\n")
        with pytest.raises(InputError) as e:
            load_plugin(f, "DEPTHSCALE_EXPERIMENTS", "experiment")
        assert hint in str(e.value) and "\n" not in str(e.value), str(e.value)
    ok = tmp_path / "fine.py"
    ok.write_text("from depthscale.config.records import register\nraise RuntimeError('own')\n")
    with pytest.raises(InputError) as e:
        load_plugin(ok, "DEPTHSCALE_EXPERIMENTS", "experiment")
    assert "is now" not in str(e.value)
