"""Write the README's map of the package's layers from the import-linter contract (pyproject.toml):
the contract is the source of truth, the README shows it. `python scripts/layers.py --write`
rewrites the block between <!-- layers:begin --> and <!-- layers:end -->; without --write it
prints the block. tests/test_architecture.py checks that the two agree."""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def layers() -> list[str]:
    import tomllib

    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return next(c for c in cfg["contracts"] if c["type"] == "layers")["layers"]


def render(lines: list[str]) -> str:
    out = []
    for i, line in enumerate(lines):
        names = [m.strip().removeprefix("depthscale.") for m in line.split(":")]
        out.append(f"{i + 1:>2}  " + "  ".join(names) + "\n")
    return "".join(out)


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
