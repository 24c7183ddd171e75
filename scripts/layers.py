"""Write the README's map of the package's tiers from the import-linter contracts (pyproject.toml):
the contracts are the source of truth, the README shows them. `python scripts/layers.py --write`
rewrites the block between <!-- layers:begin --> and <!-- layers:end -->; without --write it
prints the block. tests/test_architecture.py checks that the two agree."""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "depthscale"


def contracts() -> list[dict]:
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def layers() -> list[str]:
    return next(c for c in contracts() if c["type"] == "layers")["layers"]


def modules(name: str) -> str:
    """A tier's package's modules (without __init__), or '' for a module."""
    d = PACKAGE / name
    if not d.is_dir():
        return ""
    found = sorted(p.stem for p in d.glob("*.py") if p.stem != "__init__")
    found += sorted(f"{p.name}/" for p in d.iterdir() if p.is_dir() and (p / "__init__.py").exists())
    return " ".join(found)


def render(lines: list[str]) -> str:
    out = []
    for i, line in enumerate(lines):
        for j, name in enumerate(m.strip() for m in line.split("|")):
            lead = f"{i + 1:>2}  " if j == 0 else "  | "
            text = textwrap.fill(modules(name), 84, initial_indent=f"{lead}{name:<12}", subsequent_indent=" " * 16)
            out.append((text or f"{lead}{name}").rstrip() + "\n")
    rules = [c["name"] for c in contracts() if c["type"] == "forbidden"]
    return "".join(out) + "\nrules:\n" + "".join(f"  - {r}\n" for r in rules)


def main() -> None:
    block = "<!-- layers:begin -->\n```text\n" + render(layers()) + "```\n<!-- layers:end -->"
    if "--write" not in sys.argv:
        print(block)
        return
    readme = ROOT / "README.md"
    text = readme.read_text()
    new, n = re.subn(r"<!-- layers:begin -->.*?<!-- layers:end -->", lambda _: block, text, flags=re.S)
    if n != 1:
        raise SystemExit("README.md has no <!-- layers:begin --> ... <!-- layers:end --> block")
    readme.write_text(new)


if __name__ == "__main__":
    main()
