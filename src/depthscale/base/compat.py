"""Names of earlier versions: where the modules of depthscale 0.1's flat layout live now (issue 34: packages by tier), for the
one-line message a plug-in file or script gets when it imports an old path. No old name is importable:
an old path fails as it would, and the message names its new home."""

from __future__ import annotations

_TIERS = {
    "base": "errors atomic formatting provenance plugins timing userpaths seeds",
    "theory": "softmax_floor linear_floor fits",
    "config": "kind_registry records paper",
    "data": "contexts philox measurements decompose kernels",
    "train": "trainer training optim schedule live prefetch memory",
    "store": "store_verify lease collect divergence",
    "runs": "sweeps executors",
    "analysis": "results paired certificates power selection claims plotting",
    "report": "pages figures tables figcheck",
    "bench": "naive roofline machine",
    "cli": "arguments plots compare commands",
}
# module -> its home; the modules renamed on the way (a package took their name) listed as such
MOVED = {f"depthscale.{m}": f"depthscale.{tier}.{m}" for tier, names in _TIERS.items() for m in names.split()} | {
    "depthscale.theory": "depthscale.theory.linear", "depthscale.config": "depthscale.config.run",
    "depthscale.models": "depthscale.kinds.lookup", "depthscale.store": "depthscale.store.store",
    "depthscale.analysis": "depthscale.analysis.curves", "depthscale.registry": "depthscale.experiments.registry",
    "depthscale.report": "depthscale.report.reproduce", "depthscale.bench": "depthscale.bench.speed",
    "depthscale.cli": "depthscale.cli.main",
}


def moved_hint(error: BaseException) -> str:
    """' (depthscale.records is now depthscale.config.records)' for an import of an old module path or of a
    name the old module held; '' otherwise."""
    if not isinstance(error, ImportError):
        return ""
    name = getattr(error, "name", None) or ""
    return f" ({name} is now {MOVED[name]})" if name in MOVED else ""


RENAMED_CURVES = {"loss": "R"}  # curve names of earlier versions -> today's (stored curves and checkpoints)


def renamed_curves(curves):
    """`curves` with the names of earlier versions renamed to today's (RENAMED_CURVES): the one
    home of that rename, for the store's curves.json and the trainer's checkpoints alike."""
    if isinstance(curves, dict) and any(k in curves for k in RENAMED_CURVES):
        return {RENAMED_CURVES.get(k, k): v for k, v in curves.items()}
    return curves


__all__ = ["MOVED", "moved_hint", "RENAMED_CURVES", "renamed_curves"]
