"""The docs point somewhere (issue 34, item 7): every file of the repository a module's text names
(docs/…, tests/…, scripts/…, benchmarks/…, studies/…) exists, every README section it names is a heading of the README, docs/usage.md's module table has
a row for each module of the package and none for a module that is gone, and the README stays
short enough to read (<= 150 lines; detail lives in docs/)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "depthscale"
README_MAX_LINES = 150


def _source_texts():
    return {p.relative_to(ROOT).as_posix(): p.read_text() for p in sorted(SRC.rglob("*.py"))}


def test_every_file_a_module_names_exists():
    # files (a suffix), not the directories a command writes to (studies/results/convergence/)
    pattern = re.compile(r"\b((?:docs|tests|scripts|benchmarks|studies)/[A-Za-z0-9_./-]*\.(?:md|py|sh|cpp|json|toml))\b")
    named = {(path, m) for path, text in _source_texts().items() for m in pattern.findall(text)}
    assert named  # the scan sees the modules' pointers
    missing = sorted((path, m) for path, m in named if not (ROOT / m).exists())
    assert not missing, missing


def test_every_readme_section_a_module_names_is_a_heading():
    headings = set(re.findall(r"^#+ (.+?)\s*$", (ROOT / "README.md").read_text(), re.M))
    named = {(path, m) for path, text in _source_texts().items()
             for m in re.findall(r'README(?:\.md)?, section "([^"]+)"', text)}
    assert named
    assert not [(path, m) for path, m in named if m not in headings], headings


def _module_table_rows() -> list[str]:
    text = (ROOT / "docs" / "usage.md").read_text()
    section = text[text.index("## What each module owns"):]
    section = section[:section.index("\n## ", 1)]
    return re.findall(r"^\| `([^`]+)` \|", section, re.M)


# packages whose __init__ lists their modules: one row each (their doors keep rows of their own)
WHOLE = ("kinds", "experiments", "cli.commands")
OWN_ROWS = ("kinds.lookup", "experiments.registry")


def _module_names() -> set[str]:
    names = set()
    for p in SRC.rglob("*.py"):
        rel = p.relative_to(SRC).with_suffix("").parts
        name = ".".join(rel[:-1] if rel[-1] == "__init__" and len(rel) > 1 else rel)
        whole = next((w for w in WHOLE if name == w or name.startswith(w + ".")), None)
        names.add(name if whole is None or name in OWN_ROWS else whole)
    return names - {p.name for p in SRC.iterdir() if p.is_dir() and p.name not in WHOLE}


def test_the_module_table_has_a_row_for_each_module():
    rows = _module_table_rows()
    modules = _module_names()
    assert {"base.errors", "kinds", "kinds.lookup", "cli.commands", "__main__"} <= modules
    assert len(rows) == len(set(rows)), "a module has two rows"
    assert sorted(modules - set(rows)) == [], "modules without a row in docs/usage.md's table"
    assert sorted(set(rows) - modules) == [], "rows of docs/usage.md's table for modules that are gone"


def test_the_readme_is_short():
    n = len((ROOT / "README.md").read_text().splitlines())
    assert n <= README_MAX_LINES, f"README.md has {n} lines; move detail into docs/*.md and link it"
