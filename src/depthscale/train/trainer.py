"""Online training of a pack of models (SPEC §4), in named parts that know nothing of the model kind.

A pack is a list of RunConfigs with one `kinds.lookup.pack_key`; a single run is a pack of one. Every
model sees fresh contexts each step, drawn from a stream that depends only on (seed, step), so
models that share a seed share their data whatever their depth and a resumed run needs no RNG
state. The optimiser is Adam applied row-wise (optim.RowAdam): a model in a pack is updated
exactly as it would be alone, and a stopped model's rows are frozen.

`Trainer` is one pack's training, read top to bottom:
- `resume`: parameters, optimiser moments and bookkeeping from each run's checkpoint; members
  that finished in an earlier attempt are carried along, stopped (`CARRIED`); `plan_resume`
  beside it decides which runs resume in which pack (`replay_plan`);
- `step`: one optimiser step of the running models (`train_step`); a NaN loss stops that run only;
- `evaluate`: the monitor loss, A, C and top-1 mass on fixed contexts (measurements.monitor), a curve row
  per run (the `on_eval` hooks), and the convergence rule (RunConfig.early_stop; off by default);
- `keep_best` (on `on_eval`): the step of the lowest monitor loss seen, a diagnostic (best_step,
  best_monitor), and its parameters only where RunConfig.keep_best asks (SPEC §4: the final model
  is the model);
- `checkpoint` (on `on_checkpoint`, with a store): each unfinished run's checkpoint
  (checkpoint.build) into the store;
- `finish`: a stopped run's final measurement (measurements.measure, on the final parameters, or
  the best ones when kept), its metrics (the final monitor loss `final_monitor_loss` among them),
  its result in the store, then the `on_finish` hooks;
- `run`: the loop that calls them and triggers the hooks (HOOKS): keep-best, the live log
  (live.LiveLog) and TensorBoard (live.TensorBoardLog) attach to them, and so can a caller
  (`add_hook`; train_pack's on_finish).
The pack is reached only through the model protocol (kinds.base.ModelKind), the store only
through the storage protocol (storage.RunStorage).

Resume is bit-identical to an uninterrupted run (issue 28 item 8). A model's numbers depend on its
pack-mates through float rounding (the batched kernels and the optimiser's masked step see the
whole pack), so a resumed pack is the *same* pack: every checkpoint names the pack's members
("pack"), a resumed pack is rebuilt with all of them, and a member that finished before the
checkpoint rides along stopped, as it did in the uninterrupted run. For that, no run's result is
written before every unfinished run of its pack has a checkpoint at that step: a run that stops
(converged, NaN, or max_steps) is checkpointed with all the others first, then finished; so a
kill at any moment leaves the unfinished runs at one step and the finished ones stopped at or
before it. (`Trainer.plan_resume` decides which checkpoints can be replayed that way.)
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch

from depthscale.base import seeds
from depthscale.base.compat import renamed_curves
from depthscale.base.errors import InputError
from depthscale.base.provenance import versions
from depthscale.base.seeds import step_seed
from depthscale.base.timing import phase
from depthscale.config.run import RunConfig
from depthscale.data.context_sets import set_bytes
from depthscale.data.contexts import make_generator, sample_for, sample_streams, spectra_per_seed
from depthscale.data.measurements import eval_contexts, measure, measure_many, monitor
from depthscale.kinds.base import ModelKind
from depthscale.train.memory import held_sets, hold_eval, returning_memory
from depthscale.train import checkpoint as ckpt
from depthscale.train.live import CURVE_KEYS, LiveLog, TensorBoardLog
from depthscale.train.optim import RowAdam, qk_lr_mults
from depthscale.train.prefetch import Prefetcher
from depthscale.train.schedule import base_lrs, converged, lr_factor
from depthscale.train.storage import RunStorage

CARRIED = "carried"  # stopped_because of a member that finished in an earlier attempt of its pack
# the trainer's named hooks, what each is called with, and when (Trainer.add_hook):
# on_eval(i, row): run i's curve row of a monitor evaluation; on_checkpoint(step): the pack's
# checkpoint is due (every checkpoint_every steps, and before any result is written);
# on_finish(i, metrics, curves): run i's result is written
HOOKS = ("on_eval", "on_checkpoint", "on_finish")


# ---- which runs share what ----

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
    parameters (the ensemble kinds' contiguous case): no gathers forward, no scatters backward.
    The numbers are the same in any order."""
    return [i for g in batch_groups(cfgs, list(range(len(cfgs)))).values() for i in g]


# ---- one step ----

def step_batches(cfgs: list[RunConfig], idx: list[int], step: int, device) -> dict:
    """The training contexts of `step` for the models `idx`: one batch per data_key (seed and
    spectrum), drawn from the seed's stream exactly as for a run trained alone."""
    firsts: dict[tuple, RunConfig] = {}
    for i in idx:
        firsts.setdefault(data_key(cfgs[i]), cfgs[i])
    per_seed = spectra_per_seed(firsts.values())
    # seeds whose data differ only by the seed, each serving one spectrum, drawn on the CPU in one
    # kernel call into one buffer (the pack's forward then takes them as one batch without a copy)
    shared: dict[tuple, list[tuple]] = {}
    on_cpu = torch.device(device).type == "cpu"
    for key, c in sorted(firsts.items()):
        joinable = per_seed[c.seed] == 1 and on_cpu
        shared.setdefault((_batch_shape(c),) if joinable else (_batch_shape(c), key), []).append((key, c))
    out = {}
    for group in shared.values():
        c0 = group[0][1]
        made = sample_streams(c0, [step_seed(c.seed, step) for _, c in group], c0.batch) if len(group) > 1 else None
        if made is None:
            made = [sample_for(c, c.batch, make_generator(step_seed(c.seed, step), device), device,
                               cache_draws=per_seed[c.seed] > 1) for _, c in group]
        out.update(zip((key for key, _ in group), made))
    return dict(sorted(out.items()))


def _batch_shape(cfg: RunConfig) -> tuple:
    """What a training batch is a function of, but for its seed (step_batches' shared draws)."""
    return (cfg.batch, cfg.d, cfg.P, cfg.a, cfg.b, cfg.task, cfg.k if cfg.task == "difficult" else 1, cfg.noise,
            getattr(cfg, "clusters", 0), getattr(cfg, "stream", None))


def pack_losses(pack: ModelKind, cfgs: list[RunConfig], idx: list[int], batches: dict) -> torch.Tensor:
    """Training MSE of each model in `idx` on its own batch (`batches` maps data_key -> Contexts;
    the pack's `train_losses` may run the models that share a batch as one computation)."""
    return pack.train_losses(idx, lambda i: batches[data_key(cfgs[i])])


def train_step(pack: ModelKind, opt: RowAdam, cfgs: list[RunConfig], idx: list[int], step: int,
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
        losses = pack_losses(pack, cfgs, idx, batches).float()
    with phase("backward"):
        finite = torch.isfinite(losses)
        losses.masked_fill(~finite, 0.0).sum().backward()
    with phase("optimiser"):
        active_M = torch.zeros(pack.M, dtype=torch.bool)
        active_M[torch.tensor(idx)] = finite.cpu()
        opt.step(lr0_M * lr_factor(c0, step), active_M, c0.grad_clip)
    return losses.detach(), finite


# ---- the trainer ----

@dataclass
class RunState:
    """Per-model bookkeeping during training (goes into checkpoints)."""

    history: list = field(default_factory=list)  # monitor losses
    curves: dict = field(default_factory=lambda: {k: [] for k in CURVE_KEYS})
    stopped_because: str | None = None
    steps: int = 0
    seconds: float = 0.0
    best_loss: float = math.inf  # the lowest monitor loss seen and its step (a diagnostic); its parameters with keep_best
    best_step: int = 0
    best_params: dict | None = None


def _cpu(tensors: dict) -> dict:
    return {n: t.cpu() for n, t in tensors.items()}


# ---- resume planning (Trainer.plan_resume) ----

def _pack_of(ck: dict) -> list[RunConfig] | None:
    """The members of the pack a checkpoint was written in (None: a checkpoint of an earlier
    version, or members this version cannot read)."""
    try:
        return [RunConfig.from_dict(d) for d in ck["pack"]]
    except Exception:  # no "pack", or fields of another version
        return None


def replay_plan(todo: list[RunConfig], checkpoints: dict, store) -> tuple[list, list[RunConfig]]:
    """Which of `todo` (unfinished runs, with their valid `checkpoints`: run id -> dict) train again
    in the very pack they trained in, bit-identical to an uninterrupted run (trainer.py's module
    docstring): [(pack configs, {index: checkpoint} or None, carried indices, shadow indices)], and
    the rest. A pack (named by its members' checkpoints) replays when each member is in `todo` or
    done in the store. It resumes at its checkpoints' step when they are all at one step and every
    done member stopped at or before it (carried); else (a kill while the checkpoints were written
    left two steps) it trains again from step 0, its done members as shadows (trained for their
    pack-mates' numbers, nothing written). The rest (no checkpoint, a member elsewhere, a checkpoint
    of an earlier version) train as sub-packs by step (Trainer.plan_resume)."""
    mine = {c.run_id: c for c in todo}
    packs: dict[tuple, list[RunConfig]] = {}
    for c in todo:
        members = _pack_of(checkpoints[c.run_id]) if c.run_id in checkpoints else None
        if members:
            packs.setdefault(tuple(m.run_id for m in members), members)
    replays, placed = [], set()
    for ids, members in packs.items():
        steps, done, ok = {}, {}, len(set(ids)) == len(ids) and not placed & set(ids)
        for i, m in enumerate(members):
            ck = checkpoints.get(m.run_id)
            if m.run_id in mine and (ck is None or tuple(_run_ids(ck)) == ids):
                steps[i] = ck["step"] if ck is not None else 0
            else:
                done[i] = _stop_step(store, m.run_id) if m.run_id not in mine else None
            ok = ok and done.get(i, 0) is not None
        if not ok or not steps:
            continue
        start = min(steps.values())
        if len(set(steps.values())) == 1 and all(f <= start for f in done.values()) and start > 0:
            replays.append((members, {i: checkpoints[members[i].run_id] for i in steps}, sorted(done), []))
        else:
            replays.append((members, None, [], sorted(done)))
        placed |= set(ids)
    return replays, [c for c in todo if c.run_id not in placed]


def _run_ids(ck: dict) -> list[str]:
    members = _pack_of(ck)
    return [m.run_id for m in members] if members else []


def _stop_step(store, rid: str) -> int | None:
    """The step at which run `rid` stopped, if it is done in `store` (None: not done, or its
    metrics unreadable)."""
    try:
        return int(store.load_metrics(rid)["steps"]) if store.is_done(rid) else None
    except Exception:  # metrics unreadable: not replayable
        return None


class Trainer:
    """The training of one pack: the runs `cfgs` (one pack key) in the model pack `pack`, on `device`.
    With a store, curves go to each run's directory as they come, checkpoints every
    checkpoint_every steps and whenever a run stops, and a finished run's metrics and parameters
    (after that checkpoint); `on_finish(i, metrics, curves)` is called as soon as run i's result
    is written (an `on_finish` hook); `loggers` (live.LOGGERS) log the curve rows too.
    `shadows`: runs (done in the store) that train only for their pack-mates' numbers: nothing of
    theirs is logged, checkpointed or written."""

    def __init__(self, cfgs: list[RunConfig], pack: ModelKind, device="cpu", store: RunStorage | None = None,
                 loggers=(), on_finish=None, shadows=()):
        self.cfgs, self.c0, self.M = cfgs, cfgs[0], len(cfgs)
        self.shadows = set(shadows)
        self.pack, self.device, self.store, self.loggers = pack, device, store, loggers
        # the hooks added by callers (add_hook); `run` calls the trainer's own first (`_active`)
        self.hooks: dict[str, list] = {name: [] for name in HOOKS}
        self._active = self.hooks
        if on_finish is not None:
            self.add_hook("on_finish", on_finish)
        self.opt = RowAdam(pack, qk_lr_mults(cfgs))
        self.states = [RunState() for _ in cfgs]
        self.start = 0  # the step training starts from (a resumed pack: its checkpoints')
        self.lr0_M = base_lrs(cfgs)
        self.results: list[dict | None] = [None] * self.M
        self.pending: list[int] = []  # runs stopped whose results are not written yet (after a checkpoint)
        self.live: LiveLog | None = None
        self.monitor_sets: dict[tuple, list] = {}
        # the evaluation set of one spectrum at a time (10,240 contexts each: a pack of many spectra
        # must not hold them all); runs that stop together are measured spectrum by spectrum
        self.eval_sets: dict[tuple, list] = {}
        # the next step's batches drawn on the CPU while the device trains (prefetch.py; off on the CPU)
        self.prefetch = Prefetcher(lambda idx, step: step_batches(cfgs, idx, step, "cpu"), device)

    def add_hook(self, name: str, fn) -> None:
        """Call `fn` at the hook `name` (one of HOOKS), after the trainer's own (keep-best, the live
        log, TensorBoard, the store's checkpoint) and those added before."""
        if name not in HOOKS:
            raise InputError(f"hook must be one of {', '.join(HOOKS)}, got {name!r}")
        self.hooks[name].append(fn)

    def trigger(self, name: str, *args) -> None:
        """Call the hooks of `name` in order."""
        for fn in self._active[name]:
            fn(*args)

    def running(self) -> list[int]:
        """The runs still training."""
        return [i for i, st in enumerate(self.states) if st.stopped_because is None]

    def unfinished(self) -> list[int]:
        """The runs whose results are not written: the running ones and those stopped since the
        last checkpoint (`pending`)."""
        return [i for i, st in enumerate(self.states)
                if self.results[i] is None and st.stopped_because != CARRIED and i not in self.shadows]

    # ---- resume ----
    def resume(self, checkpoints: dict[int, dict], carried=()) -> None:
        """Continue from `checkpoints` (run index -> checkpoint dict, all at one step); the runs
        `carried` finished in an earlier attempt of this pack (at or before that step) and stay
        stopped: every run is one or the other. A checkpointed run that had stopped is finished
        first (`run`)."""
        steps = {ck["step"] for ck in checkpoints.values()}
        carried = set(carried)
        if len(steps) != 1 or set(checkpoints) | carried != set(range(self.M)) or carried & set(checkpoints):
            raise InputError("a resumed pack needs one checkpoint per unfinished run, all at one step")
        self.start = steps.pop()
        for i in carried:
            self.states[i] = RunState(stopped_because=CARRIED)
        dev = self.device
        for i, ck in checkpoints.items():
            self.pack.load_model_state(i, {n: t.to(dev) for n, t in ck["params"].items()})
            self.opt.load_state(i, {"m": {n: t.to(dev) for n, t in ck["adam"]["m"].items()},
                                    "v": {n: t.to(dev) for n, t in ck["adam"]["v"].items()},
                                    "t": ck["adam"]["t"]})
            st = self.states[i] = RunState(**ck["state"])
            st.curves = renamed_curves(st.curves)  # a checkpoint of an earlier version: its "loss" is R now
            if st.stopped_because is not None:  # stopped at the checkpoint, killed before its result
                self.pending.append(i)

    @staticmethod
    def plan_resume(todo: list[RunConfig], checkpoints: dict, store) -> list[tuple]:
        """How the unfinished runs `todo` (one pack key; their valid `checkpoints`: run id -> dict)
        train again: the attempts (pack configs, {index: checkpoint} or None, carried indices,
        shadow indices) for train_pack, in order. First the packs that replay the very pack they
        trained in (`replay_plan`, bit-identical to an uninterrupted run), then the rest as
        sub-packs by their checkpoints' step (a fresh run at step 0)."""
        replays, rest = replay_plan(todo, checkpoints, store)
        by_step: dict[int, list[tuple[RunConfig, dict | None]]] = {}
        for c in rest:
            ck = checkpoints.get(c.run_id)
            by_step.setdefault(ck["step"] if ck else 0, []).append((c, ck))
        return replays + [([c for c, _ in by_step[step]],
                           {i: ck for i, (_, ck) in enumerate(by_step[step])} if step > 0 else None, [], [])
                          for step in sorted(by_step)]

    # ---- one step ----
    def step(self, step: int, t_last: float) -> float:
        """One optimiser step of the running runs; their wall time since `t_last` is shared among
        them. A run whose loss is not finite stops ("nan"). Returns the time after the step."""
        idx = self.running()
        with phase("sampling"):  # with the prefetcher on: the wait for the batch drawn during the last step
            batches = self.prefetch.get(idx, step)
        _, finite = train_step(self.pack, self.opt, self.cfgs, idx, step, self.lr0_M, self.device, batches=batches)
        now = time.perf_counter()
        for i in idx:
            self.states[i].seconds += (now - t_last) / len(idx)
        for j, i in enumerate(idx):
            if not bool(finite[j]):
                self.stop(i, "nan", step + 1)
        return now

    def stop(self, i: int, reason: str, step: int) -> None:
        """Run i stops after `step` steps; its result is written after the next checkpoint (`run`)."""
        st = self.states[i]
        st.stopped_because, st.steps = reason, step
        self.pending.append(i)

    def finish_pending(self) -> None:
        """The results of the runs stopped since the last checkpoint, in the order they stopped."""
        pending, self.pending = self.pending, []
        for i in pending:
            self.finish(i, self.states[i].stopped_because, self.states[i].steps)

    # ---- evaluate ----
    def evaluate(self, done_step: int) -> None:
        """The monitor after `done_step` steps: each running run's curve row, keep-best, and the
        convergence rule (from min_steps on)."""
        c0, idx = self.c0, self.running()
        with phase("evaluation"):
            mon = monitor(self.pack, idx, lambda m: self.monitor_sets[spectrum_key(self.cfgs[m])]) if idx else {}
        for i in idx:
            st, r = self.states[i], mon[i]
            if not math.isfinite(r["R"]):
                self.stop(i, "nan", done_step)
                continue
            st.history.append(r["R"])
            row = {"step": done_step, "R": r["R"], "A": r["A"], "C": r["C"], "top1_mass": r["top1_mass"],
                   "lr": float(self.lr0_M[i] * lr_factor(c0, done_step - 1))}
            for key in CURVE_KEYS:
                st.curves[key].append(row[key])
            self.trigger("on_eval", i, row)  # keep-best, then the live log and TensorBoard (not a shadow's)
            if c0.early_stop and done_step >= c0.min_steps and converged(st.history, c0.patience, c0.rel_tol):
                self.stop(i, "converged", done_step)
        self.live.postfix([mon[i]["R"] for i in idx if math.isfinite(mon[i]["R"])])

    def _keep_best_row(self, i: int, row: dict) -> None:
        self.keep_best(i, row["R"], row["step"])

    def keep_best(self, i: int, loss: float, step: int) -> None:
        """Record the step if `loss` is the lowest monitor loss run i has seen, and keep its
        parameters there when the run's config asks for them (RunConfig.keep_best)."""
        st = self.states[i]
        if loss < st.best_loss:
            st.best_loss, st.best_step = loss, step
            if self.cfgs[i].keep_best:
                st.best_params = _cpu(self.pack.state_of(i))

    # ---- checkpoint ----
    def checkpoint(self, done_step: int) -> None:
        """Each unfinished run's checkpoint (checkpoint.build: its parameters, Adam moments,
        bookkeeping, config, and the pack it trains in) into the store."""
        pack = [c.to_dict() for c in self.cfgs]
        for i in self.unfinished():
            if self.states[i].stopped_because is None:
                self.states[i].steps = done_step
            adam = self.opt.state_of(i)
            ck = ckpt.build(done_step, _cpu(self.pack.state_of(i)),
                            {"m": _cpu(adam["m"]), "v": _cpu(adam["v"]), "t": adam["t"]},
                            self.states[i].__dict__, self.cfgs[i].to_dict(), pack)
            self.store.save_checkpoint(self.cfgs[i].run_id, ckpt.to_bytes(ck))

    # ---- finish ----
    def finish(self, i: int, reason: str, step: int, measured: tuple | None = None) -> None:
        """Run i stops after `step` steps (`reason`: converged, max_steps or nan): its final
        measurement (or `measured`, (metrics, per-context arrays) from final_measurements), metrics
        and stored result."""
        st = self.states[i]
        st.stopped_because, st.steps = reason, step
        if i in self.shadows:
            self.results[i] = {}
            return
        arrays: dict = {}  # the per-context arrays of the measurement, for the store's cache
        if measured is not None:
            met, arrays = measured
        else:
            met = self.final_measurement(i, arrays) if reason != "nan" else {}
        if math.isfinite(st.best_loss):  # the monitor's best step: a diagnostic, not the reported model
            met.update(best_step=st.best_step, best_monitor=st.best_loss)
        met.update(run_id=self.cfgs[i].run_id, steps=step, stopped_because=reason, train_seconds=st.seconds,
                   final_monitor_loss=st.history[-1] if st.history else float("nan"),
                   lr_used=float(self.lr0_M[i]), **versions(("torch",)), device=str(self.device))
        if reason == "nan":
            met.update(R=float("nan"), R_se=float("nan"), A=float("nan"), C=float("nan"))
        self.results[i] = met
        if self.store is not None:
            params = _cpu(self.pack.state_of(i)) if reason != "nan" else None
            kept = self.store.finish(self.cfgs[i].run_id, met, st.curves, params=params)
            cache = getattr(self.store, "cache_per_context", None)  # optional (storage.RunStorage)
            if kept and params is not None and arrays and cache is not None:
                cache(self.cfgs[i].run_id, arrays)  # the report reads them instead of evaluating again
        self.trigger("on_finish", i, met, st.curves)

    def final_measurement(self, i: int, keep: dict | None = None) -> dict:
        """SPEC §5 on the evaluation set of run i's spectrum, with the kept best parameters when
        they beat the last monitor loss; `keep`, a dict given, receives its per-context arrays."""
        cfg = self.cfgs[i]
        key = spectrum_key(cfg)
        # the measurement's large temporaries come once per run: handed back, not kept for the steps
        with phase("evaluation"), returning_memory():
            if key not in self.eval_sets:
                self.eval_sets.clear()
                hold = hold_eval(set_bytes(cfg, self.c0.eval_contexts))  # else streamed: the same bits
                self.eval_sets[key] = eval_contexts(cfg, self.c0.eval_contexts, self.c0.eval_seed, self.device, hold=hold)
        self._load_best(i)
        with phase("evaluation"), returning_memory():
            return measure(self.pack, i, self.eval_sets[key], self.c0.task, keep=keep)

    def final_measurements(self, idx: list[int]) -> dict[int, tuple[dict, dict]]:
        """The final measurements of the runs `idx` that stop together (the pack's last step): per
        spectrum, one pass over its evaluation set for all of them (measurements.measure_many), the
        set drawn as it is read (streamed, a chunk at a time: the same bits as held), so no set is
        held whole for them and none is drawn twice. {i: (metrics, per-context arrays)}, the same
        numbers as final_measurement run by run."""
        groups: dict = {}
        for i in idx:
            groups.setdefault(spectrum_key(self.cfgs[i]), []).append(i)
        out = {}
        for group in groups.values():
            for i in group:
                self._load_best(i)
            keeps: list[dict] = [{} for _ in group]
            cfg = self.cfgs[group[0]]
            with phase("evaluation"), returning_memory():
                self.eval_sets.clear()
                chunks = eval_contexts(cfg, self.c0.eval_contexts, self.c0.eval_seed, self.device, hold=False)
                mets = measure_many(self.pack, group, chunks, self.c0.task, keeps)
            out.update({i: (met, keep) for i, met, keep in zip(group, mets, keeps)})
        return out

    def _load_best(self, i: int) -> None:
        """Run i's kept best parameters into the pack when they beat its last monitor loss."""
        cfg, st = self.cfgs[i], self.states[i]
        if cfg.keep_best and st.best_params is not None and st.history and st.best_loss < st.history[-1]:
            self.pack.load_model_state(i, {n: t.to(self.device) for n, t in st.best_params.items()})

    # ---- the loop ----
    def run(self, progress: bool | None = None) -> list[dict]:
        """Train from `start` to the step cap or until every run has stopped; each run's metrics."""
        c0 = self.c0
        carried = {c.run_id for i, (c, st) in enumerate(zip(self.cfgs, self.states))
                   if st.stopped_because == CARRIED or i in self.shadows}
        tensorboard = TensorBoardLog(self.cfgs, self.store, self.loggers, self.start)  # (checks the loggers first)
        self.live = LiveLog(self.cfgs, self.store, self.states, self.start, carried=carried)
        self._attach_own_hooks(tensorboard)
        self._monitor_sets()
        from tqdm.auto import tqdm

        bar = tqdm(total=c0.max_steps, initial=self.start, disable=None if progress is None else not progress,
                   desc=f"{c0.model} x{self.M}", leave=False)
        self.live.bar = bar
        t_last = time.perf_counter()
        try:
            self.finish_pending()  # (a resumed pack: runs that had stopped at its checkpoint)
            for step in range(self.start, c0.max_steps):
                if not self.running():
                    break
                t_last = self.step(step, t_last)
                done_step = step + 1
                if done_step % c0.eval_every == 0 or done_step == c0.max_steps:
                    self.evaluate(done_step)
                # every checkpoint_every steps, and before any result is written (a run stopped, or
                # the last step): a kill then never leaves a pack's unfinished runs at two steps
                if done_step % c0.checkpoint_every == 0 or self.pending or done_step == c0.max_steps:
                    self.trigger("on_checkpoint", done_step)
                self.finish_pending()
                bar.update(1)
                self.live.tick(done_step, [st.stopped_because is None for st in self.states])
            last = sorted(self.running(), key=lambda j: spectrum_key(self.cfgs[j]))
            measured = self.final_measurements([i for i in last if i not in self.shadows])
            for i in last:
                self.finish(i, "max_steps", c0.max_steps, measured.get(i))
        finally:
            self.prefetch.close()
            bar.close()
            tensorboard.close()
        return self.results  # type: ignore[return-value]

    def _monitor_sets(self) -> None:
        """The monitor contexts per spectrum (shared by every seed and depth of it): held while they
        fit the pack budget declared in this process (memory.held_sets), streamed beyond it."""
        firsts = {}
        for c in self.cfgs:
            firsts.setdefault(spectrum_key(c), c)
        todo = [c for key, c in firsts.items() if key not in self.monitor_sets]
        keep = held_sets([set_bytes(c, c.monitor_contexts) for c in todo])
        for c, hold in zip(todo, keep):
            self.monitor_sets[spectrum_key(c)] = eval_contexts(c, c.monitor_contexts, seeds.monitor_seed(c.eval_seed),
                                                               self.device, hold=hold)

    def _attach_own_hooks(self, tensorboard: TensorBoardLog) -> None:
        """The trainer's own hooks, ahead of those added (add_hook): keep-best on every evaluation;
        the live log and TensorBoard on each run's evaluations and finish (never a shadow's: it is
        not finished, and nothing of it is logged); the store's checkpoint."""
        def logged(fn):
            return lambda i, *args: None if i in self.shadows else fn(i, *args)

        own = {"on_eval": [self._keep_best_row, logged(self.live.on_eval), logged(tensorboard.on_eval)],
               "on_checkpoint": [self.checkpoint] if self.store is not None else [],
               "on_finish": [self.live.on_finish, tensorboard.on_finish]}
        self._active = {name: own[name] + self.hooks[name] for name in HOOKS}


__all__ = ["Trainer", "RunState", "CARRIED", "HOOKS", "train_step", "step_batches", "pack_losses", "spectrum_key", "data_key", "replay_plan",
           "batch_groups", "batch_order"]
