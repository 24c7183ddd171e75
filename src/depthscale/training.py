"""Online training of a pack of models (SPEC §4), with per-model optimiser state, learning rate,
stopping and checkpoints.

A pack is a list of RunConfigs with one `pack_key`; a single run is a pack of one. Every model
sees fresh contexts each step, drawn from a stream that depends only on (seed, step), so models
that share a seed share their data whatever their depth and a resumed run needs no RNG state.
The optimiser is Adam applied row-wise: each parameter row belongs to one model, so a model in a
pack is updated exactly as it would be alone, and a stopped model's rows are frozen.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field

import torch

from depthscale import kernels, versions
from depthscale.config import RunConfig
from depthscale.contexts import make_generator, sample_for, step_seed
from depthscale.errors import InputError, MissingExtraError
from depthscale.measurements import decomposition, eval_batch, eval_contexts, measure, split_contexts, top1_mass
from depthscale.models import ModelKind, build_pack, model_class, pack_key
from depthscale.timing import phase

ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8
MONITOR_SEED_OFFSET = 1


def spectrum_key(cfg: RunConfig) -> tuple:
    """Runs with equal spectra share their evaluation and monitor contexts."""
    return (cfg.a, cfg.b)


def data_key(cfg: RunConfig) -> tuple:
    """Runs with equal keys share their training data stream (seed and spectrum)."""
    return (cfg.seed, cfg.a, cfg.b)


def batch_groups(cfgs: list[RunConfig], idx: list[int]) -> dict[tuple, list[int]]:
    """The models `idx` by the training batch they share (data_key), batches in order of first
    appearance."""
    groups: dict[tuple, list[int]] = {}
    for i in idx:
        groups.setdefault(data_key(cfgs[i]), []).append(i)
    return groups


def batch_order(cfgs: list[RunConfig]) -> list[int]:
    """The indices of `cfgs` with the models that share a training batch next to each other
    (`batch_groups`). A pack built in this order runs each batch's models on slices of its
    parameters (the ensemble kinds' contiguous case): no gathers forward, no scatters
    backward. The numbers are the same in any order."""
    return [i for g in batch_groups(cfgs, list(range(len(cfgs)))).values() for i in g]


def base_lr(cfg: RunConfig) -> float:
    """A run's learning rate before the schedule: lr (at L = 1) scaled to its depth, lr * L^lr_depth_exp.
    A looped run (loop = B) scales with its B distinct layers: each shared row's gradient sums its
    L/B copies of a 1/L branch, as a B-layer model's does, so a loop = B model at any depth starts
    and trains as the untied B-layer model would (for the nonlinear ensemble it *is* that model)."""
    return cfg.lr * (cfg.loop or cfg.L) ** cfg.lr_depth_exp


def base_lrs(cfgs: list[RunConfig]) -> torch.Tensor:
    """`base_lr` of every run of a pack (float32, M)."""
    return torch.tensor([base_lr(c) for c in cfgs], dtype=torch.float32)


def lr_factor(cfg: RunConfig, step: int) -> float:
    """Linear warmup, then cosine decay to 0 at max_steps (or constant)."""
    if cfg.warmup and step < cfg.warmup:
        return (step + 1) / cfg.warmup
    if cfg.schedule == "constant":
        return 1.0
    span = max(1, cfg.max_steps - cfg.warmup)
    return 0.5 * (1 + math.cos(math.pi * min(1.0, (step - cfg.warmup) / span)))


def converged(history: list[float], patience: int, rel_tol: float) -> bool:
    """No relative improvement > rel_tol of the best monitor loss over the last `patience` evals."""
    if len(history) <= patience:
        return False
    before = min(history[:-patience])
    recent = min(history[-patience:])
    return recent > before * (1 - rel_tol)


class RowAdam:
    """Adam over pack parameters with a learning rate per model and a mask of active models."""

    def __init__(self, pack: ModelKind, lr_mult: dict | None = None):
        self.pack = pack
        self.params = dict(pack.named_parameters())
        # optional per-parameter, per-model rate multipliers {name: tensor (M,)} (qk_lr = relative)
        self.lr_mult = {n: t.to(next(iter(self.params.values())).device) for n, t in (lr_mult or {}).items()}
        self.m = {n: torch.zeros_like(p) for n, p in self.params.items()}
        self.v = {n: torch.zeros_like(p) for n, p in self.params.items()}
        self.t = torch.zeros(pack.M, dtype=torch.float64)  # steps taken per model
        self.owner = {n: pack.row_owner(n) for n in self.params}

    @torch.no_grad()
    def step(self, lr_M: torch.Tensor, active_M: torch.Tensor, clip: float) -> None:
        dev = next(iter(self.params.values())).device
        all_active = bool(active_M.all())  # (read before the copy to the device: no sync)
        lr_M, active_M = lr_M.to(dev), active_M.to(dev)
        if clip > 0:  # per-model global grad-norm clipping
            sq = torch.zeros(self.pack.M, device=dev)
            for n, p in self.params.items():
                if p.grad is not None:  # every parameter has a leading row axis (models or layers)
                    sq.index_add_(0, self.owner[n], p.grad.pow(2).reshape(p.shape[0], -1).sum(1))
            scale_M = torch.clamp(clip / (sq.sqrt() + 1e-12), max=1.0)
        else:
            scale_M = torch.ones(self.pack.M, device=dev)
        self.t += active_M.cpu().double()
        t = self.t.clamp(min=1).to(dev)
        bc1 = 1 - ADAM_BETAS[0] ** t
        bc2 = 1 - ADAM_BETAS[1] ** t
        if all_active:  # the common case: in place, in torch.optim.Adam's arithmetic
            step_M = (-lr_M.double() / bc1).to(lr_M.dtype)
            sqrt_bc2_M = bc2.sqrt().to(lr_M.dtype)
            for n, p in self.params.items():
                if p.grad is None:
                    continue
                own = self.owner[n]
                shape = (-1,) + (1,) * (p.dim() - 1)
                g = p.grad
                if clip > 0:
                    g.mul_(scale_M[own].view(shape).to(p.dtype))
                self.m[n].lerp_(g, 1 - ADAM_BETAS[0])
                self.v[n].mul_(ADAM_BETAS[1]).addcmul_(g, g, value=1 - ADAM_BETAS[1])
                denom = self.v[n].sqrt().div_(sqrt_bc2_M[own].view(shape)).add_(ADAM_EPS)
                step_n = step_M * self.lr_mult[n] if n in self.lr_mult else step_M
                p.addcmul_(self.m[n].div(denom), step_n[own].view(shape).to(p.dtype))
                p.grad = None
            return
        for n, p in self.params.items():
            if p.grad is None:
                continue
            own = self.owner[n]
            shape = (-1,) + (1,) * (p.dim() - 1)
            g = p.grad * scale_M[own].view(shape).to(p.dtype)
            act = active_M[own].view(shape)
            m_new = ADAM_BETAS[0] * self.m[n] + (1 - ADAM_BETAS[0]) * g
            v_new = ADAM_BETAS[1] * self.v[n] + (1 - ADAM_BETAS[1]) * g * g
            self.m[n] = torch.where(act, m_new, self.m[n])
            self.v[n] = torch.where(act, v_new, self.v[n])
            lr_n = lr_M * self.lr_mult[n] if n in self.lr_mult else lr_M
            upd = (lr_n[own] / bc1[own]).view(shape) * self.m[n] / ((self.v[n] / bc2[own].view(shape)).sqrt() + ADAM_EPS)
            p.sub_(torch.where(act, upd.to(p.dtype), torch.zeros_like(p)))
            p.grad = None

    def state_of(self, m: int) -> dict:
        """Model m's moments and step count (the pack knows which rows are model m's)."""
        return {"m": {n: self.pack.model_slice(n, m, self.m[n]).clone() for n in self.params},
                "v": {n: self.pack.model_slice(n, m, self.v[n]).clone() for n in self.params},
                "t": float(self.t[m])}

    def load_state(self, m: int, st: dict) -> None:
        for n in self.params:
            self.pack.model_slice(n, m, self.m[n]).copy_(st["m"][n])
            self.pack.model_slice(n, m, self.v[n]).copy_(st["v"][n])
        self.t[m] = st["t"]


# what each monitor evaluation records per run (curves.json, the live curves.jsonl, TensorBoard):
# the step, the monitor loss R (same name as the final R of metrics.json), A, C, the top-1 mass
# (difficult task at k = 1: NaN otherwise) and the learning rate of that step
CURVE_KEYS = ("step", "R", "A", "C", "top1_mass", "lr")
LOGGERS = ("tensorboard",)  # optional loggers of train_pack(loggers=...)
HEARTBEAT_SECONDS = 60.0  # without a terminal: at least one progress line on stderr this often


@dataclass
class RunState:
    """Per-model bookkeeping during training (goes into checkpoints)."""

    history: list = field(default_factory=list)  # monitor losses
    curves: dict = field(default_factory=lambda: {k: [] for k in CURVE_KEYS})
    stopped_because: str | None = None
    steps: int = 0
    seconds: float = 0.0
    best_loss: float = math.inf  # keep_best: the lowest monitor loss seen, its step and parameters
    best_step: int = 0
    best_params: dict | None = None


def _monitor_add(o, ctx, ys: list, f_acc: list, t1: list) -> None:
    """Append one forward's monitor quantities (targets, per-layer predictors, top-1 mass)."""
    ys.append(ctx.ystar_B)
    f_acc.append(o.f_BxL)
    if o.p_BxLxP is not None and ctx.sel_Bxk.shape[1] == 1:
        t1.append(top1_mass(o.p_BxLxP, ctx.sel_Bxk))


@torch.no_grad()
def _monitor(pack: ModelKind, models: list[int], chunks_of) -> dict:
    """Monitor loss, A, C and top-1 mass for each model in `models` on fixed contexts;
    `chunks_of(m)` is model m's list of context chunks (models with one spectrum share one)."""
    f_acc = {m: [] for m in models}
    t1 = {m: [] for m in models}
    ys = {m: [] for m in models}
    chunks = {m: chunks_of(m) for m in models}
    # on the CPU model by model, in slices of eval_batch contexts (cache-sized: the linear pack's
    # forward of all models on whole chunks cost 1.5-3x more CPU); elsewhere all models at once
    size = eval_batch(next(pack.parameters()).device)
    for group in ([models] if size is None else [[m] for m in models]):
        for c in range(len(chunks[group[0]])):
            parts = {m: split_contexts(chunks[m][c], size) for m in group}
            for s in range(len(parts[group[0]])):
                outs = pack(None, None, None, models=group,
                            X_of=lambda m: (parts[m][s].X_BxPxd, parts[m][s].y_BxP, parts[m][s].xq_Bxd))
                for m, o in zip(group, outs):
                    _monitor_add(o, parts[m][s], ys[m], f_acc[m], t1[m])
    res = {}
    for m in models:
        dec = decomposition(torch.cat(f_acc[m]), torch.cat(ys[m]))
        dec["top1_mass"] = torch.cat(t1[m]).double().mean().item() if t1[m] else float("nan")
        res[m] = dec
    return res


def _pack_losses(pack: ModelKind, cfgs: list[RunConfig], idx: list[int], batches: dict) -> torch.Tensor:
    """Training MSE of each model in `idx` on its own batch (`batches` maps data_key -> Contexts;
    the pack's `train_losses` may run the models that share a batch as one computation)."""
    return pack.train_losses(idx, lambda i: batches[data_key(cfgs[i])])


def step_batches(cfgs: list[RunConfig], idx: list[int], step: int, device) -> dict:
    """The training contexts of `step` for the models `idx`: one batch per data_key (seed and
    spectrum), drawn from the seed's stream exactly as for a run trained alone."""
    firsts: dict[tuple, RunConfig] = {}
    for i in idx:
        firsts.setdefault(data_key(cfgs[i]), cfgs[i])
    return {key: sample_for(c, c.batch, make_generator(step_seed(c.seed, step), device), device)
            for key, c in sorted(firsts.items())}


def qk_lr_mults(cfgs: list[RunConfig]) -> dict:
    """RowAdam's rate multipliers for qk_lr = relative: W_q and W_k of a gradient-descent start
    (entries sqrt(gd_step L N) on the diagonal) learn at lr times that scale, so the start's step
    size gd_step can change by a fixed fraction per optimiser step at any depth; 1 elsewhere."""
    mult = torch.tensor([math.sqrt(c.gd_step * c.L * c.N) if c.qk_lr == "relative" and c.qk_init == "gd" else 1.0
                         for c in cfgs], dtype=torch.float32)
    return {} if bool((mult == 1).all()) else {"Wq": mult, "Wk": mult}


def train_step(pack: ModelKind, opt: "RowAdam", cfgs: list[RunConfig], idx: list[int], step: int,
                lr0_M: torch.Tensor, device, autocast: torch.dtype | None = None,
                batches: dict | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """One optimiser step of the models `idx`: fresh batches (one per seed; `step_batches` unless
    given), forward, backward, row-wise Adam. Returns the training losses (detached) and whether
    each was finite. `autocast` (e.g. torch.bfloat16) runs the forward under torch.autocast."""
    c0 = cfgs[0]
    if batches is None:
        with phase("sampling"):
            batches = step_batches(cfgs, idx, step, device)
    with phase("forward"), torch.autocast(torch.device(device).type, dtype=autocast, enabled=autocast is not None):
        losses = _pack_losses(pack, cfgs, idx, batches).float()
    with phase("backward"):
        finite = torch.isfinite(losses)
        losses.masked_fill(~finite, 0.0).sum().backward()
    with phase("optimiser"):
        active_M = torch.zeros(pack.M, dtype=torch.bool)
        active_M[torch.tensor(idx)] = finite.cpu()
        opt.step(lr0_M * lr_factor(c0, step), active_M, c0.grad_clip)
    return losses.detach(), finite


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
    """What a pack reports while it trains: each run's curve rows appended to its run directory
    (store.append_curves) and to TensorBoard (`loggers`), the current loss on the progress bar,
    and, when stderr is not a terminal (a log file, a batch job), one plain line per finished run
    and a progress line at least every HEARTBEAT_SECONDS."""

    def __init__(self, cfgs: list[RunConfig], store, loggers, states: list, start: int, bar=None) -> None:
        self.cfgs, self.store, self.states, self.bar = cfgs, store, states, bar
        self.start, self.t0 = start, time.monotonic()
        self.last_line = self.t0
        self.plain = not _isatty(sys.stderr)
        self.loggers = check_loggers(loggers)
        if self.loggers and store is None:
            raise InputError("loggers need a store: their files go into each run's directory")
        self.writers: dict[int, object] = {}
        if store is not None:  # the live curves restart from what the checkpoint holds: no row twice
            for c, st in zip(cfgs, states):
                store.start_curves(c.run_id, st.curves)

    def _writer(self, i: int):
        if i not in self.writers:
            from torch.utils.tensorboard import SummaryWriter

            # purge_step: a resumed run's events after its checkpoint step are dropped, not doubled
            self.writers[i] = SummaryWriter(str(self.store.run_dir(self.cfgs[i].run_id) / "tensorboard"),
                                            purge_step=self.start or None)
        return self.writers[i]

    def row(self, i: int, row: dict) -> None:
        """One evaluation's curve row of run i ({key: value} over CURVE_KEYS)."""
        if self.store is not None:
            self.store.append_curves(self.cfgs[i].run_id, [row])
        if "tensorboard" in self.loggers:
            w = self._writer(i)
            for key, val in row.items():
                if key != "step" and val is not None and math.isfinite(val):
                    w.add_scalar(f"train/{key}", val, row["step"])

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

    def finished(self, i: int, met: dict) -> None:
        c = self.cfgs[i]
        if "tensorboard" in self.loggers and i in self.writers:
            self.writers.pop(i).close()
        if self.plain:
            R = met.get("R")
            val = f"R={R:.5g}" if isinstance(R, float) and math.isfinite(R) else "R=nan"
            self.line(f"run {c.run_id} done: {c.model} {c.task} L={c.L} (a, b)=({c.a:g}, {c.b:g}) "
                      f"seed={c.seed}: {val} after {met.get('steps')} steps ({met.get('stopped_because')}), "
                      f"{_clock(self.states[i].seconds)} of training")

    def line(self, text: str) -> None:
        print(f"depthscale: {text}", file=sys.stderr, flush=True)
        self.last_line = time.monotonic()

    def close(self) -> None:
        for w in self.writers.values():
            w.close()
        self.writers.clear()


def train_pack(cfgs: list[RunConfig], device: str = "cpu", store=None, progress: bool | None = None,
               resume: dict | None = None, on_finish=None, loggers: tuple[str, ...] = ()) -> list[dict]:
    """Train the pack; returns each run's metrics. `resume` maps run index -> checkpoint dict
    (all at one step). `on_finish(i, metrics, curves)` is called as soon as a run stops. With a
    store, each evaluation's curve row is appended to the run's curves.jsonl as it comes, and a
    finished run's parameters are kept (params.pt); `loggers` (LOGGERS) log the rows too."""
    if len({pack_key(c) for c in cfgs}) != 1:
        raise InputError("configs of one pack must share a pack_key")
    c0 = cfgs[0]
    M = len(cfgs)
    pack = build_pack(cfgs).to(device)
    opt = RowAdam(pack, qk_lr_mults(cfgs))
    states = [RunState() for _ in cfgs]
    start = 0
    if resume:
        steps = {ck["step"] for ck in resume.values()}
        if len(steps) != 1 or len(resume) != M:
            raise InputError("a resumed pack needs one checkpoint per run, all at one step")
        start = steps.pop()
        for i, ck in resume.items():
            pack.load_model_state(i, {n: t.to(device) for n, t in ck["params"].items()})
            opt.load_state(i, {"m": {n: t.to(device) for n, t in ck["adam"]["m"].items()},
                               "v": {n: t.to(device) for n, t in ck["adam"]["v"].items()},
                               "t": ck["adam"]["t"]})
            states[i] = RunState(**ck["state"])
            if "loss" in states[i].curves:  # a checkpoint of an earlier version: the loss is R now
                states[i].curves["R"] = states[i].curves.pop("loss")
    live = LiveLog(cfgs, store, loggers, states, start)
    # monitor and evaluation contexts per spectrum (shared by every seed and depth of it)
    monitor: dict[tuple, list] = {}
    for c in cfgs:
        if spectrum_key(c) not in monitor:
            monitor[spectrum_key(c)] = eval_contexts(c, c.monitor_contexts, c.eval_seed + MONITOR_SEED_OFFSET, device)
    lr0_M = base_lrs(cfgs)
    active = [s.stopped_because is None for s in states]
    results: list[dict | None] = [None] * M

    # the evaluation set of one spectrum at a time (10,240 contexts each: a pack of many spectra
    # must not hold them all); runs that stop together are measured spectrum by spectrum
    eval_chunks: dict[tuple, list] = {}

    def finish(i: int, reason: str, step: int) -> None:
        st = states[i]
        st.stopped_because, st.steps = reason, step
        active[i] = False
        key = spectrum_key(cfgs[i])
        if reason != "nan" and key not in eval_chunks:
            eval_chunks.clear()
            with phase("evaluation"):
                eval_chunks[key] = eval_contexts(cfgs[i], c0.eval_contexts, c0.eval_seed, device)
        if reason != "nan" and cfgs[i].keep_best and st.best_params is not None and st.history \
                and st.best_loss < st.history[-1]:
            pack.load_model_state(i, {n: t.to(device) for n, t in st.best_params.items()})
        with phase("evaluation"):
            met = measure(pack, i, eval_chunks[key], c0.task) if reason != "nan" else {}
        if cfgs[i].keep_best:
            met.update(best_step=st.best_step if st.best_params is not None else step)
        met.update(run_id=cfgs[i].run_id, steps=step, stopped_because=reason,
                   train_seconds=st.seconds, final_monitor_loss=st.history[-1] if st.history else float("nan"),
                   lr_used=float(lr0_M[i]), **versions(("torch",)), device=str(device))
        if reason == "nan":
            met.update(R=float("nan"), R_se=float("nan"), A=float("nan"), C=float("nan"))
        results[i] = met
        if store is not None:
            store.finish(cfgs[i].run_id, met, st.curves,
                         params={n: t.cpu() for n, t in pack.state_of(i).items()} if reason != "nan" else None)
        live.finished(i, met)
        if on_finish is not None:
            on_finish(i, met, st.curves)

    from tqdm.auto import tqdm

    bar = tqdm(total=c0.max_steps, initial=start, disable=None if progress is None else not progress,
               desc=f"{c0.model} x{M}", leave=False)
    live.bar = bar
    t_last = time.perf_counter()
    step = start
    try:
        for step in range(start, c0.max_steps):
            idx = [i for i in range(M) if active[i]]
            if not idx:
                break
            _, finite = train_step(pack, opt, cfgs, idx, step, lr0_M, device)
            now = time.perf_counter()
            for i in idx:
                states[i].seconds += (now - t_last) / len(idx)
            t_last = now
            for j, i in enumerate(idx):
                if not bool(finite[j]):
                    finish(i, "nan", step + 1)
            done_step = step + 1
            if done_step % c0.eval_every == 0 or done_step == c0.max_steps:
                idx = [i for i in range(M) if active[i]]
                with phase("evaluation"):
                    mon = _monitor(pack, idx, lambda m: monitor[spectrum_key(cfgs[m])]) if idx else {}
                for i in idx:
                    st, r = states[i], mon[i]
                    if not math.isfinite(r["R"]):
                        finish(i, "nan", done_step)
                        continue
                    st.history.append(r["R"])
                    if cfgs[i].keep_best and r["R"] < st.best_loss:
                        st.best_loss, st.best_step = r["R"], done_step
                        st.best_params = {n: t.cpu() for n, t in pack.state_of(i).items()}
                    row = {"step": done_step, "R": r["R"], "A": r["A"], "C": r["C"], "top1_mass": r["top1_mass"],
                           "lr": float(lr0_M[i] * lr_factor(c0, step))}
                    for key in CURVE_KEYS:
                        st.curves[key].append(row[key])
                    live.row(i, row)
                    if done_step >= c0.min_steps and converged(st.history, c0.patience, c0.rel_tol):
                        finish(i, "converged", done_step)
                live.postfix([mon[i]["R"] for i in idx if math.isfinite(mon[i]["R"])])
            if store is not None and done_step % c0.checkpoint_every == 0 and done_step < c0.max_steps:
                for i in range(M):
                    if active[i]:
                        states[i].steps = done_step
                        adam = opt.state_of(i)
                        store.save_checkpoint(cfgs[i].run_id, {
                            "step": done_step, "params": {n: t.cpu() for n, t in pack.state_of(i).items()},
                            "adam": {"m": {n: t.cpu() for n, t in adam["m"].items()},
                                     "v": {n: t.cpu() for n, t in adam["v"].items()}, "t": adam["t"]},
                            "state": states[i].__dict__, "config": cfgs[i].to_dict()})
            bar.update(1)
            live.tick(done_step, active)
        for i in sorted(range(M), key=lambda j: spectrum_key(cfgs[j])):
            if active[i]:
                finish(i, "max_steps", c0.max_steps)
    finally:
        bar.close()
        live.close()
    return results  # type: ignore[return-value]


def run_pack(configs: list[RunConfig], store, device: str = "cpu", progress: bool | None = None,
             loggers: tuple[str, ...] = ()) -> None:
    """Sweep worker: train the configs (one pack_key), resuming from checkpoints in the store and
    writing each result there. Runs whose checkpoints are at different steps train as sub-packs.
    `loggers` as in train_pack (bind it with functools.partial to hand it to a sweep)."""
    todo = [c for c in configs if not store.is_done(c.run_id)]
    todo = [todo[i] for i in batch_order(todo)]
    # provenance: did the fused CPU kernels train the runs of the kinds that use them (the same
    # numbers to float rounding)
    uses_fused = [model_class(c.model).fused_cpu_kernels for c in todo]
    fused = None
    if torch.device(device).type == "cpu" and any(uses_fused):
        fused = {"fused_cpu_kernels": kernels.fused_ops() is not None}
    for c, u in zip(todo, uses_fused):
        store.write_config(c, extra=fused if u else None)
    by_step: dict[int, list[tuple[RunConfig, dict | None]]] = {}
    for c in todo:
        ck = store.load_checkpoint(c.run_id)
        if ck is not None and ck.get("config") != c.to_dict():
            ck = None
        by_step.setdefault(ck["step"] if ck else 0, []).append((c, ck))
    for step in sorted(by_step):
        group = by_step[step]
        cfgs = [c for c, _ in group]
        resume = {i: ck for i, (_, ck) in enumerate(group)} if step > 0 else None
        try:
            train_pack(cfgs, device, store, progress, resume, loggers=loggers)
        except Exception as exc:  # recorded per run; the sweep goes on
            for c in cfgs:
                if not store.is_done(c.run_id):
                    store.fail(c.run_id, f"{type(exc).__name__}: {exc}")
            raise


def train_one(cfg: RunConfig, store=None, device: str = "cpu", progress: bool | None = None,
              loggers: tuple[str, ...] = ()) -> dict:
    """Train (or resume, or load) a single run and return its metrics."""
    if store is None:
        return train_pack([cfg], device, None, progress, loggers=loggers)[0]
    if not store.is_done(cfg.run_id):
        run_pack([cfg], store, device, progress, loggers=loggers)
    return store.load_metrics(cfg.run_id)


__all__ = ["train_pack", "run_pack", "train_one", "LiveLog", "check_loggers", "CURVE_KEYS", "LOGGERS", "pack_key", "qk_lr_mults", "lr_factor", "base_lr", "base_lrs", "converged", "RowAdam",
           "train_step", "step_batches"]
