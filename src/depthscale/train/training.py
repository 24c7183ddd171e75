"""Training runs (SPEC §4): the entry points the CLI, the sweeps and scripts call.

- `train_pack(cfgs)`: train a pack of runs (one `pack_key`) and return each run's metrics;
- `run_pack(cfgs, store)`: the sweep worker, resuming from the store's checkpoints;
- `train_one(cfg)`: one run (trained, resumed, or loaded when done).

The parts live one level down: the trainer's named pieces (step, evaluate, keep-best, checkpoint,
finish, resume and its planning) and its hooks (on_eval, on_checkpoint, on_finish) in `trainer`,
the row-wise Adam in `optim`, the schedule and the convergence rule in `schedule`, the live log
and TensorBoard that attach to the hooks in `live`, the checkpoint's format in `checkpoint`, what
training needs of a store in `storage` (RunStorage), the monitor in `measurements`; the models in
`models` (the registry of model kinds). Each name is imported from the module that defines it.
"""

from __future__ import annotations

import contextlib

import torch

from depthscale.base.errors import InputError
from depthscale.config.run import RunConfig
from depthscale.data import kernels
from depthscale.kinds.lookup import build_pack, model_class, pack_key
from depthscale.train import checkpoint as ckpt
from depthscale.train.storage import RunStorage
from depthscale.train.trainer import Trainer, batch_order



def train_pack(cfgs: list[RunConfig], device: str = "cpu", store: RunStorage | None = None, progress: bool | None = None,
               resume: dict | None = None, on_finish=None, loggers: tuple[str, ...] = (),
               carried=(), shadows=()) -> list[dict]:
    """Train the pack; returns each run's metrics (None for `carried`, {} for `shadows`). `resume`
    maps run index -> checkpoint dict (all at one step); `carried`: the indices of the other runs,
    finished in an earlier attempt of this pack (Trainer.resume); `shadows`: runs done in the store
    that train again only for their pack-mates' numbers (nothing of theirs is written).
    `on_finish(i, metrics, curves)` is called as soon as a run's result is written. With a store,
    each evaluation's curve row is appended to the run's curves.jsonl as it comes, and a finished
    run's parameters are kept (params.pt); `loggers` (LOGGERS) log the rows too."""
    if len({pack_key(c) for c in cfgs}) != 1:
        raise InputError("configs of one pack must share a pack_key")
    trainer = Trainer(cfgs, build_pack(cfgs).to(device), device, store, loggers, on_finish, shadows)
    if resume:
        trainer.resume(resume, carried)
    return trainer.run(progress)


def run_pack(configs: list[RunConfig], store: RunStorage, device: str = "cpu", progress: bool | None = None,
             loggers: tuple[str, ...] = ()) -> None:
    """Sweep worker: train the configs (one pack_key), resuming from checkpoints in the store and
    writing each result there. Runs whose checkpoints are at different steps train as sub-packs.
    `loggers` as in train_pack (bind it with functools.partial to hand it to a sweep)."""
    todo = [c for c in configs if not store.is_done(c.run_id)]
    todo = [todo[i] for i in batch_order(todo)]
    checkpoints = {}
    for c in todo:
        ck = ckpt.read(store, c.run_id)
        if ck is not None and ck.get("config") == c.to_dict():
            checkpoints[c.run_id] = ck
    # provenance: did the fused CPU kernels train the runs of the kinds that use them (the same
    # numbers to float rounding), the checkpointed steps of a resumed run included
    uses_fused = [model_class(c.model).fused_cpu_kernels for c in todo]
    now = kernels.fused_ops() is not None if torch.device(device).type == "cpu" and any(uses_fused) else None
    for c, u in zip(todo, uses_fused):
        stored = (store.stored_config(c.run_id) or {}).get(FUSED) if u else None
        value = fused_record(stored, now, c.run_id in checkpoints) if u else None
        store.write_config(c, extra=None if value is None else {FUSED: value})
    for cfgs, resume, carried, shadows in Trainer.plan_resume(todo, checkpoints, store):
        try:
            with recorded_threads([checkpoints[c.run_id] for c in cfgs if c.run_id in checkpoints]):
                train_pack(cfgs, device, store, progress, resume, loggers=loggers, carried=carried, shadows=shadows)
        except Exception as exc:  # recorded per run; the sweep goes on
            for c in cfgs:
                if not store.is_done(c.run_id):
                    store.fail(c.run_id, f"{type(exc).__name__}: {exc}")
            raise


FUSED = "fused_cpu_kernels"  # config.json's record: whether the fused CPU kernels trained the run


def fused_record(stored, now: bool | None, resumed: bool) -> bool | str | None:
    """config.json's FUSED for a run the fused kernels train now (`now`; None where they are not in
    play: not on the CPU, no entry). A run resumed from its checkpoint was trained by the kernels
    of its earlier steps too: `stored` (config.json's value, True, False or "mixed") is kept where
    it agrees with now, and "mixed" is recorded where they differ (a resume with DEPTHSCALE_FUSED
    changed); a stored value of another kind (none, a hand edit) says nothing, and now stands."""
    if not resumed or not (isinstance(stored, bool) or stored == "mixed"):
        return now
    return stored if stored == bool(now) else "mixed"


@contextlib.contextmanager
def recorded_threads(checkpoints: list[dict]):
    """Train at the intra-op thread count the checkpoints' pack trained at (their "threads"), so
    that a resume is bit-identical whatever share of the cores this worker got (the process
    executor splits the cores between as many workers as packs remain); unchanged without one
    (a fresh pack, or a checkpoint of an earlier version). Restored afterwards."""
    counts = {ck.get("threads") for ck in checkpoints}
    threads = next(iter(counts)) if len(counts) == 1 else None
    if not isinstance(threads, int) or isinstance(threads, bool) or not 1 <= threads <= 4096 \
            or threads == torch.get_num_threads():
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def train_one(cfg: RunConfig, store: RunStorage | None = None, device: str = "cpu", progress: bool | None = None,
              loggers: tuple[str, ...] = ()) -> dict:
    """Train (or resume, or load) a single run and return its metrics."""
    if store is None:
        return train_pack([cfg], device, None, progress, loggers=loggers)[0]
    if not store.is_done(cfg.run_id):
        run_pack([cfg], store, device, progress, loggers=loggers)
    return store.load_metrics(cfg.run_id)


__all__ = ["train_pack", "run_pack", "train_one", "fused_record", "FUSED"]
