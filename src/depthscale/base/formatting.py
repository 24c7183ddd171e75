"""How numbers and spectra are written in figures, tables, claims and the report: one place, so
a spectrum reads the same in a legend, a table and a claim's detail."""

from __future__ import annotations

import math

import numpy as np


def label(a: float, b: float, k: int | None = None) -> str:
    """A spectrum as '(a,b)', or 'k=2 (a,b)' where k tells items apart."""
    s = f"({a:g},{b:g})"
    return s if k is None else f"k={k} {s}"


def number(x, digits: int = 4, table: bool = True) -> str:
    """A number as text with `digits` significant digits; None is '—', infinities 'inf'/'-inf'.

    table=True (a table cell): NaN is '—', integers and integral floats below 1e6 are written in
    full, booleans as yes/no and anything else that is not a number as itself. table=False (a
    claim's detail): NaN is 'nan' and every number gets `digits` significant digits."""
    if x is None:
        return "—"
    if table:
        if isinstance(x, (bool, np.bool_)):
            return "yes" if x else "no"
        if isinstance(x, (int, np.integer)):
            return str(int(x))
        try:
            v = float(x)
        except (TypeError, ValueError):
            return str(x)
    else:
        v = float(x)
    if math.isnan(v):
        return "—" if table else "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if table and v == int(v) and abs(v) < 1e6:
        return f"{v:g}"
    return f"{v:.{digits}g}"




def fit_status(f) -> str:
    """A table cell saying whether fit `f` is a law: 'ok', 'degenerate: <reason>' or 'no fit'."""
    if f is None:
        return "no fit"
    return "ok" if f.ok else f"degenerate: {f.reason}"


def markdown_table(df) -> str:
    """A DataFrame as a Markdown table, numbers through `number`."""
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for _, row in df.iterrows():
        lines.append("| " + " | ".join(number(row[c]) for c in cols) + " |")
    return "\n".join(lines) + "\n"


__all__ = ["label", "number", "fit_status", "markdown_table"]
