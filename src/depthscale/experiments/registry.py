"""The lookup of every experiment (SPEC §7) and every claim (SPEC §9): filled, when this module
loads, by the experiment records of `depthscale.experiments` and of the plug-in files named by
DEPTHSCALE_EXPERIMENTS.

What an experiment is lives in `records` (Experiment, RunGroup, TheoryNeed, Claim, the preset
rules); the paper's numbers and spectra in `paper`; each experiment's runs, figure, table, claims
and notes in its own module of `depthscale.experiments`. This module finds those modules, orders
their records and answers: which ids (`IDS`: the paper's, `all`; `BEYOND_IDS`: `beyond`; studies
run only when named), which runs (`all_configs`), which theory (`theory_needs`), which claims
(`CLAIMS`, `check_claim`, `check_claims`).

Plug-ins: DEPTHSCALE_EXPERIMENTS names extra experiment files or directories (of *.py files),
loaded at load as `depthscale.base.plugins` says (as DEPTHSCALE_KINDS's model kinds are); each registers
its records like a module of the package. A plug-in file that fails to import is an InputError
naming it, one line; PLUGIN_SOURCES keeps the file of each experiment a plug-in registered.

Order: the paper's figures by number, then their variants (fig6-spread, ...), then its tables;
then the beyond experiments and the studies by id. Claims in SPEC §9 order (claims.claim_key).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import pkgutil
import re
from pathlib import Path
from typing import Iterable, Sequence

import depthscale.experiments as _package
from depthscale.analysis import claims as _claims
from depthscale.base import plugins
from depthscale.base.errors import InputError
from depthscale.config.records import Claim, Experiment, PARTS, TheoryNeed, registered
from depthscale.config.run import PRESETS, RunConfig


PLUGIN_ENV = "DEPTHSCALE_EXPERIMENTS"


def plugin_files(value: str | None = None) -> list[Path]:
    """The plug-in files DEPTHSCALE_EXPERIMENTS (or `value`) names (depthscale.base.plugins)."""
    return plugins.plugin_files(PLUGIN_ENV, "experiment", value)


def _load_plugin(path: Path) -> None:
    before = set(registered())
    plugins.load_plugin(path, PLUGIN_ENV, "experiment")
    for i in set(registered()) - before:
        PLUGIN_SOURCES[i] = path


# the experiments the plug-ins registered: id -> the file that registered it (a failure of its
# figure, table or notes names the file, and the report's command exits 2)
PLUGIN_SOURCES: dict[str, Path] = {}


def _order(e: Experiment) -> tuple:
    m = re.fullmatch(r"([a-z]+)(\d+)(.*)", e.id)
    paper = e.part == "paper"
    return (PARTS.index(e.part), e.kind == "table" if paper else False, bool(m and m.group(3)) if paper else False,
            int(m.group(2)) if m and paper else 0, e.id)


def _load() -> tuple[Experiment, ...]:
    for info in pkgutil.iter_modules(_package.__path__):
        importlib.import_module(f"{_package.__name__}.{info.name}")
    for path in plugin_files():
        _load_plugin(path)
    return tuple(sorted((_guarded(e) for e in registered().values()), key=_order))


def _guarded(e: Experiment) -> Experiment:
    """A plug-in's record with its figure, table, notes, followup and claims' checks run under
    plugins.guarded (a SystemExit from them is an error naming the file); a built-in's as it is."""
    if e.id not in PLUGIN_SOURCES:
        return e
    guard = functools.partial(plugins.guarded, path=PLUGIN_SOURCES[e.id], env=PLUGIN_ENV, what="experiment")
    fns = {f: guard(getattr(e, f)) for f in ("figure", "table", "notes", "followup") if getattr(e, f) is not None}
    return dataclasses.replace(e, **fns, claims=tuple(c._replace(check=guard(c.check)) for c in e.claims))


_ENTRIES = _load()
REGISTRY: dict[str, Experiment] = {e.id: e for e in _ENTRIES}
IDS: tuple[str, ...] = tuple(e.id for e in _ENTRIES if e.part == "paper")  # `all`: the paper's figures and tables
BEYOND_IDS: tuple[str, ...] = tuple(e.id for e in _ENTRIES if e.part == "beyond")  # `beyond`
GROUP_WORDS = {"all": IDS, "beyond": BEYOND_IDS}  # what --experiment accepts besides ids
# every claim of every record, in SPEC §9 order
CLAIMS: tuple[Claim, ...] = tuple(sorted((c for e in _ENTRIES for c in e.claims), key=_claims.claim_key))
_twice = sorted({c.id for c in CLAIMS if [d.id for d in CLAIMS].count(c.id) > 1})
if _twice:
    raise InputError(f"two claims share an id: {', '.join(_twice)}")


def check_ids(ids: Iterable[str]) -> list[str]:
    """The ids as given, each checked against the registry (InputError naming the first unknown)."""
    ids = list(ids)
    for i in ids:
        if i not in REGISTRY:
            raise InputError(f"unknown experiment {i!r} (known: {', '.join(REGISTRY)}, or all, beyond)")
    return ids


def parse_ids(text: str) -> list[str]:
    """'all' (the paper's ids), 'beyond' (the beyond-the-paper ids), or a comma list of ids and
    those words (in the order given), checked."""
    out: list[str] = []
    for i in text.split(","):
        for j in GROUP_WORDS.get(i.strip(), (i.strip(),)):
            if j not in out:
                out.append(j)
    return check_ids(out)


def resolve_ids(ids: str | Iterable[str] | None) -> tuple[str, ...]:
    """'all' / None -> the paper's ids; 'beyond' -> the beyond-the-paper ids; else the given ids
    (and words), checked, in registry order."""
    if ids is None:
        return IDS
    if isinstance(ids, str):
        ids = [i.strip() for i in ids.split(",")]
    wanted: set[str] = set()
    for i in ids:
        wanted.update(GROUP_WORDS.get(i, (i,)))
    check_ids(sorted(wanted))
    return tuple(i for i in REGISTRY if i in wanted)


def all_configs(ids: str | Iterable[str] | None, preset: str,
                seeds: int | Sequence[int] | None = None, **overrides) -> list[RunConfig]:
    """The configs of the experiments `ids` at `preset`, each run once (first appearance order)."""
    seen: dict[str, RunConfig] = {}
    for i in resolve_ids(ids):
        for cfg in REGISTRY[i].configs(preset, seeds, **overrides):
            seen.setdefault(cfg.run_id, cfg)
    return list(seen.values())


def theory_needs(ids: str | Iterable[str] | None, preset: str) -> list[TheoryNeed]:
    out: list[TheoryNeed] = []
    for i in resolve_ids(ids):
        out += [t for t in REGISTRY[i].theory_for(preset) if t not in out]
    return out


def summary(presets: Sequence[str] = PRESETS) -> list[dict]:
    """Runs per experiment per preset (default seeds), and the unique runs of all of them (the
    report shows each experiment's count)."""
    rows = []
    for e in _ENTRIES:
        row = {"id": e.id, "title": e.title}
        for p in presets:
            row[p] = len(e.configs(p))
        rows.append(row)
    rows.append({"id": "all (unique)", "title": "",
                 **{p: len(all_configs("all", p)) for p in presets}})
    if BEYOND_IDS:
        rows.append({"id": "beyond (unique)", "title": "",
                     **{p: len(all_configs("beyond", p)) for p in presets}})
    return rows


# ---------------------------------------------------------------- claims by id

def claim(claim_id: str) -> Claim:
    for c in CLAIMS:
        if c.id == claim_id:
            return c
    raise InputError(f"unknown claim {claim_id!r}; known: {', '.join(c.id for c in CLAIMS)}")


def claims_of(ids: str | Iterable[str] | None) -> tuple[Claim, ...]:
    """The claims that use one of the experiments `ids`, in SPEC §9 order."""
    wanted = set(resolve_ids(ids))
    return tuple(c for c in CLAIMS if wanted & set(c.uses))


def check_claim(claim_id: str, res, th) -> dict:
    """One claim, by id, on one preset's results (claims.check)."""
    return _claims.check(claim(claim_id), res, th)


def check_claims(res, th, ids: str | Iterable[str] | None = "all") -> list[dict]:
    """Every claim that uses one of the experiments `ids`, in SPEC §9 order."""
    return _claims.check_all(res, th, claims_of(ids))


__all__ = ["PLUGIN_ENV", "PLUGIN_SOURCES", "plugin_files", "REGISTRY", "IDS", "BEYOND_IDS", "CLAIMS", "resolve_ids",
           "parse_ids", "check_ids", "all_configs", "theory_needs", "summary", "claim", "claims_of", "check_claim",
           "check_claims"]
