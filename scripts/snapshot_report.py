"""Copy a built report into the repository so a reader can look without running: report.md,
report.html with its figures linked as files (not inlined: the page stays small), the PNG figures
scaled to at most --width pixels, the tables' CSVs, claims.json and the recipe selection (selection.json); PDFs and the theory cache stay out.

    python scripts/snapshot_report.py --src report/cpu --dst docs/report/cpu

tests/test_browser.py opens the committed page in Chromium and checks that every image loads;
tests/test_report.py checks that every figure the committed report names is there."""

from __future__ import annotations

import argparse
import base64
import hashlib
import re
import shutil
from pathlib import Path


def snapshot(src: Path, dst: Path, width: int = 1400) -> list[Path]:
    from PIL import Image

    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    written = []
    for sub in sorted(p for p in src.iterdir() if p.is_dir() and not p.name.endswith(".d")):
        (dst / sub.name).mkdir()
        for f in sorted(sub.iterdir()):
            if f.suffix == ".png":
                im = Image.open(f).convert("RGB")
                if im.width > width:
                    im = im.resize((width, round(im.height * width / im.width)), Image.LANCZOS)
                # a 256-colour palette: a figure's few colours and their anti-aliasing, at a third of the bytes
                im.quantize(256).save(dst / sub.name / f.name, optimize=True)
            elif f.suffix in (".csv", ".md") or f.name in ("claims.json", "selection.json"):
                shutil.copy(f, dst / sub.name / f.name)
            else:
                continue
            written.append(dst / sub.name / f.name)
    md = (src / "report.md").read_text()
    md = re.sub(r"\n\[PDF\]\([^)]*\.pdf\)\n", "\n", md)  # the PDFs are not committed
    (dst / "report.md").write_text(md)
    page = (src / "report.html").read_text()
    # each inlined figure back to the file it was read from, found by its bytes (the answer's study
    # figure sits in study/, the experiments' in their preset's folder: names cannot tell)
    by_bytes = {hashlib.sha256(f.read_bytes()).hexdigest(): f.relative_to(src).as_posix() for f in src.rglob("*.png")}
    out = []
    for part in re.split(r"(<img alt=\"[^\"]*\" src=\"data:image/png;base64,[^\"]*\">)", page):
        m = re.match(r"<img alt=\"([^\"]*)\" src=\"data:image/png;base64,([^\"]*)\">", part)
        if m:
            rel = by_bytes.get(hashlib.sha256(base64.b64decode(m.group(2))).hexdigest())
            if rel is None or not (dst / rel).exists():
                raise SystemExit(f"snapshot_report: the figure {m.group(1)!r} of report.html is no PNG file of {src}")
            part = f'<img alt="{m.group(1)}" src="{rel}">'
        out.append(part)
    (dst / "report.html").write_text("".join(out))
    for f in ("claims.json",):
        if (src / f).exists():
            shutil.copy(src / f, dst / f)
    return written + [dst / "report.md", dst / "report.html"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", default="report/cpu")
    ap.add_argument("--dst", default="docs/report/cpu")
    ap.add_argument("--width", type=int, default=1400)
    args = ap.parse_args()
    paths = snapshot(Path(args.src), Path(args.dst), args.width)
    size = sum(p.stat().st_size for p in paths)
    print(f"{len(paths)} files, {size / 1e6:.1f} MB in {args.dst}")


if __name__ == "__main__":
    main()
