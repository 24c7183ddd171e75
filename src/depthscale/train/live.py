"""What a training pack reports while it trains (SPEC §4): each evaluation's curve row appended to its
run's live curves and to the loggers (TensorBoard), the current loss on the progress bar, and, without a
terminal, one plain line per finished run and a heartbeat line at least every HEARTBEAT_SECONDS.
"""

from __future__ import annotations

import math
import sys
import time

from depthscale.base.errors import InputError, MissingExtraError
from depthscale.config.run import RunConfig

# what each monitor evaluation records per run (curves.json, the live curves.jsonl, TensorBoard):
# the step, the monitor loss R (same name as the final R of metrics.json), A, C, the top-1 mass
# (difficult task at k = 1: NaN otherwise) and the learning rate of that step
CURVE_KEYS = ("step", "R", "A", "C", "top1_mass", "lr")
LOGGERS = ("tensorboard",)  # optional loggers of train_pack(loggers=...)
HEARTBEAT_SECONDS = 60.0  # without a terminal: at least one progress line on stderr this often


def check_loggers(loggers) -> tuple[str, ...]:
    """The loggers named, checked: each one of LOGGERS, and its package installed
    (MissingExtraError naming the extra, else)."""
    loggers = tuple(loggers or ())
    for name in loggers:
        if name not in LOGGERS:
            raise InputError(f"logger must be one of {', '.join(LOGGERS)}, got {name!r}")
    if "tensorboard" in loggers:
        try:
            from torch.utils.tensorboard import SummaryWriter  # noqa: F401
        except ImportError:
            raise MissingExtraError("--log tensorboard needs the tensorboard package: "
                                    "pip install 'depthscale[tensorboard]'") from None
    return loggers


def _isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}h{s // 60 % 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


class LiveLog:
    """What a pack reports while it trains: each run's curve rows appended to its live curves
    (RunStorage.append_curves), the current loss on the progress bar, and, when stderr is not a
    terminal (a log file, a batch job), one plain line per finished run and a progress line at
    least every HEARTBEAT_SECONDS. It attaches to the trainer's hooks (`on_eval`, `on_finish`).
    `carried`: run ids of members finished in an earlier attempt (their curves are left alone)."""

    def __init__(self, cfgs: list[RunConfig], store, states: list, start: int, bar=None,
                 carried: set[str] = frozenset()) -> None:
        self.cfgs, self.store, self.states, self.bar = cfgs, store, states, bar
        self.start, self.t0 = start, time.monotonic()
        self.last_line = self.t0
        self.plain = not _isatty(sys.stderr)
        if store is not None:  # the live curves restart from what the checkpoint holds: no row twice
            for c, st in zip(cfgs, states):
                if c.run_id not in carried:
                    store.start_curves(c.run_id, st.curves)

    def on_eval(self, i: int, row: dict) -> None:
        """One evaluation's curve row of run i ({key: value} over CURVE_KEYS)."""
        if self.store is not None:
            self.store.append_curves(self.cfgs[i].run_id, [row])

    def postfix(self, losses: list[float]) -> None:
        """The progress bar shows the current monitor loss (a pack: its range)."""
        if losses and self.bar is not None:
            self.bar.set_postfix_str(f"R={losses[0]:.4g}" if len(losses) == 1
                                     else f"R={min(losses):.4g}..{max(losses):.4g}", refresh=False)

    def tick(self, step: int, active: list[bool]) -> None:
        """After each step: a progress line when none was printed for HEARTBEAT_SECONDS."""
        now = time.monotonic()
        if not self.plain or now - self.last_line < HEARTBEAT_SECONDS:
            return
        c0, total = self.cfgs[0], self.cfgs[0].max_steps
        losses = [st.history[-1] for st, a in zip(self.states, active) if a and st.history]
        rate = (step - self.start) / max(now - self.t0, 1e-9)
        loss = "" if not losses else (f", R={losses[0]:.4g}" if len(losses) == 1
                                      else f", R={min(losses):.4g}..{max(losses):.4g}")
        self.line(f"{c0.model} {c0.task} pack of {len(self.cfgs)}: step {step}/{total} "
                  f"({step / total:.0%}), {sum(active)} running{loss}, {rate:.3g} steps/s, "
                  f"elapsed {_clock(now - self.t0)}")

    def on_finish(self, i: int, met: dict, curves: dict | None = None) -> None:
        """Run i finished: without a terminal, one line saying so."""
        c = self.cfgs[i]
        if self.plain:
            R = met.get("R")
            val = f"R={R:.5g}" if isinstance(R, float) and math.isfinite(R) else "R=nan"
            self.line(f"run {c.run_id} done: {c.model} {c.task} L={c.L} (a, b)=({c.a:g}, {c.b:g}) "
                      f"seed={c.seed}: {val} after {met.get('steps')} steps ({met.get('stopped_because')}), "
                      f"{_clock(self.states[i].seconds)} of training")

    def line(self, text: str) -> None:
        print(f"depthscale: {text}", file=sys.stderr, flush=True)
        self.last_line = time.monotonic()


class TensorBoardLog:
    """The TensorBoard logger (`loggers`: LOGGERS, checked; a store is needed): each run's curve
    rows as scalars train/<key> in its run's log directory tensorboard/ (`on_eval`), its writer closed
    when it finishes (`on_finish`). A resumed pack (`start` > 0) drops a run's events after its
    checkpoint step rather than doubling them."""

    def __init__(self, cfgs: list[RunConfig], store, loggers, start: int) -> None:
        self.cfgs, self.store, self.start = cfgs, store, start
        self.loggers = check_loggers(loggers)
        if self.loggers and store is None:
            raise InputError("loggers need a store: their files go into each run's directory")
        self.writers: dict[int, object] = {}

    def _writer(self, i: int):
        if i not in self.writers:
            from torch.utils.tensorboard import SummaryWriter

            # purge_step: a resumed run's events after its checkpoint step are dropped, not doubled
            self.writers[i] = SummaryWriter(str(self.store.log_dir(self.cfgs[i].run_id, "tensorboard")),
                                            purge_step=self.start or None)
        return self.writers[i]

    def on_eval(self, i: int, row: dict) -> None:
        if "tensorboard" in self.loggers:
            w = self._writer(i)
            for key, val in row.items():
                if key != "step" and val is not None and math.isfinite(val):
                    w.add_scalar(f"train/{key}", val, row["step"])

    def on_finish(self, i: int, met: dict | None = None, curves: dict | None = None) -> None:
        if "tensorboard" in self.loggers and i in self.writers:
            self.writers.pop(i).close()

    def close(self) -> None:
        for w in self.writers.values():
            w.close()
        self.writers.clear()


__all__ = ["LiveLog", "TensorBoardLog", "check_loggers", "CURVE_KEYS", "LOGGERS", "HEARTBEAT_SECONDS"]
