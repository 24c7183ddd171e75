"""When a finished run counts as diverged, and from which step: its training loss became
non-finite, or its final loss exploded past DIVERGED_FACTOR x Var(y*). A diverged run is finished
(never run again) but it is no result: it is left out of every figure, table and claim."""

from __future__ import annotations

import math
from typing import Any, Callable

from depthscale.base.atomic import as_float

DIVERGED_FACTOR = 1e6  # a finished loss R above this many times Var(y*) has diverged


def diverged(metrics: dict) -> dict | None:
    """{"step", "reason"} if a finished run's metrics say its training diverged, else None: it
    stopped on a non-finite loss (stopped_because "nan" or "diverged"), or its final loss R is
    not finite or above DIVERGED_FACTOR x Var(y*). step is the run's last step (`divergence`
    finds the first logged step where the loss went bad)."""
    steps = metrics.get("steps")
    step = steps if isinstance(steps, int) and not isinstance(steps, bool) else None
    why = metrics.get("stopped_because")
    if why in ("nan", "diverged"):
        reason = metrics.get("diverged_reason")
        return {"step": step, "reason": reason if isinstance(reason, str) and reason
                else "the training loss became non-finite"}
    if "R" not in metrics:
        return None
    R, var = as_float(metrics["R"]), as_float(metrics.get("var_ystar"))
    if not math.isfinite(R):
        return {"step": step, "reason": "the final loss R is not finite", "from_curves": True}
    if math.isfinite(var) and var > 0 and R > DIVERGED_FACTOR * var:
        return {"step": step, "reason": f"the final loss R = {R:.3g} is above {DIVERGED_FACTOR:.0e} x "
                                        f"Var(y*) = {var:.3g}", "from_curves": True}
    return None


def first_bad_step(curves: Any, metrics: dict) -> int | None:
    """First logged step whose monitor loss is non-finite or above DIVERGED_FACTOR x Var(y*)."""
    if not isinstance(curves, dict):
        return None
    steps, losses = curves.get("step"), curves.get("R", curves.get("loss"))  # ("loss": earlier versions)
    if not isinstance(steps, list) or not isinstance(losses, list):
        return None
    var = as_float(metrics.get("var_ystar"))
    limit = DIVERGED_FACTOR * var if math.isfinite(var) and var > 0 else math.inf
    for st, loss in zip(steps, losses):
        v = as_float(loss)
        if (not math.isfinite(v) or v > limit) and isinstance(st, int):
            return st
    return None


def divergence(metrics: dict, curves: Callable[[], Any]) -> dict | None:
    """{"step", "reason"} of a finished run whose training diverged, None otherwise; the step is
    the first bad one of the training curves (`curves()` reads them) where the metrics do not say."""
    found = diverged(metrics)
    if found is None:
        return None
    if found["step"] is None or found.get("from_curves"):
        step = first_bad_step(curves(), metrics)
        if step is not None:
            found["step"] = step
    found.pop("from_curves", None)
    return found


__all__ = ["diverged", "first_bad_step", "divergence", "DIVERGED_FACTOR"]
