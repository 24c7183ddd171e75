"""A stored run's model evaluated on evaluation contexts, one number per context (SPEC §5, §9), and
`StoredRuns`: the read-only door through which analysis reads a store (analysis.paired.RunReader).

Building and running a model is executing work, so it lives here and not in analysis; the arrays
are cached in this process and in the store's cache (store.cache), keyed by the run's params.pt
(mtime and size). Files named per_context.npz inside run directories (earlier versions wrote them
there) are ignored."""

from __future__ import annotations

from collections import OrderedDict

import torch

from depthscale.base.errors import InputError
from depthscale.config.run import RunConfig
from depthscale.data.measurements import (eval_batch, eval_contexts, mean_row, per_context_arrays, selection_of_mean,
                                         slice_outputs, split_contexts)
from depthscale.store import cache, collect

_memo: OrderedDict[tuple[str, str], tuple[tuple, dict, bool]] = OrderedDict()  # (root, run id) -> (signature, arrays, on disk)
MEMO_BYTES = 512 << 20  # the arrays held in this process, the least recently read dropped first (issue 51:
# unbounded, a cpu report held all 686 runs' 102,400-context arrays, 1.7 GB); the store's cache file stays


def evaluate(store, run_id: str, device="cpu", cfg: RunConfig | None = None) -> dict:
    """Every evaluation context through the stored model of `run_id`, in measure()'s order and
    slicing: "sq_err" ((y_hat - y*)^2, y_hat the layer mean of f_l), "ystar" and "sel_E" (the
    selection loss on the difficult task for a model with attention, else None), numpy float64.
    `cfg`: the evaluation contexts of that config instead of the run's own (e.g. another eval_seed)."""
    cfg = store.load_config(run_id) if cfg is None else cfg
    if not isinstance(cfg, RunConfig):
        raise InputError(f"cfg must be a RunConfig, got {type(cfg).__name__}")
    pack = store.load_model(run_id, device)
    # streamed: each chunk drawn when read, once (the same bits), never the whole set held (issue 51)
    chunks = eval_contexts(cfg, cfg.eval_contexts, cfg.eval_seed, device, hold=False)
    f, ystar, sel = [], [], []
    for ctx in (part for chunk in chunks for part in split_contexts(chunk, eval_batch(device))):
        out = slice_outputs(pack, [0], ctx, weights=False)[0]  # (the final measurement's forward: the same bits)
        f.append(out.f_BxL.cpu())
        ystar.append(ctx.ystar_B.cpu())
        pbar = mean_row(out)
        if cfg.task == "difficult" and pbar is not None:
            sel.append(selection_of_mean(pbar, ctx.sel_Bxk).cpu())
    # the arithmetic of the final measurement's arrays (one definition: the store's cache holds either)
    return per_context_arrays(torch.cat(f), torch.cat(ystar), torch.cat(sel) if sel else None)


def _signature(store, run_id: str) -> tuple:
    """(mtime in ns, size) of the run's params.pt: the stored model the arrays were computed from."""
    try:
        return cache.params_signature(store.run_path(run_id))
    except OSError:
        return ()


def per_context(store, run_id: str, device="cpu") -> dict:
    """`evaluate` on the run's own evaluation contexts, read-only arrays. Cached in this process and
    (unless the store is read-only) in <store>/cache/per_context/<run_id>.npz; both are recomputed
    when params.pt changes. The numbers agree across devices to float rounding (the cache keeps the first)."""
    sig = _signature(store, run_id)
    ck = (str(store.root), run_id)
    hit = _memo.get(ck)
    if sig and hit is not None and hit[0] == sig:
        _memo.move_to_end(ck)
        return dict(hit[1])
    cfg = store.load_config(run_id)
    arrays = cache.read_per_context(store.root, run_id, sig, cfg.eval_contexts)
    on_disk = arrays is not None  # read back at the cost of a file read, if dropped from the process
    if arrays is None:
        arrays = evaluate(store, run_id, device, cfg)
        if sig and not store.readonly and _signature(store, run_id) == sig:
            on_disk = cache.write_per_context(store.root, run_id, sig, arrays)
    for v in arrays.values():
        if v is not None:
            v.flags.writeable = False
    if sig:
        _memo[ck] = (sig, arrays, on_disk)
        _memo.move_to_end(ck)
        _bound_memo()
    return dict(arrays)


def _bound_memo() -> None:
    """Drop the least recently read arrays that the store's cache holds while those held exceed
    MEMO_BYTES (the newest always stays). Arrays no file holds (a read-only store trained before
    training cached them) stay: dropping them would mean evaluating the model again."""
    held = sum(_nbytes(a) for _, a, _ in _memo.values())
    for ck in [k for k in list(_memo)[:-1] if _memo[k][2]]:
        if held <= MEMO_BYTES:
            break
        held -= _nbytes(_memo.pop(ck)[1])


def _nbytes(arrays: dict) -> int:
    return sum(v.nbytes for v in arrays.values() if v is not None)


def clear_cache() -> None:
    """Forget the arrays held in this process (the store's cache files stay)."""
    _memo.clear()


class StoredRuns:
    """A store as analysis reads it (analysis.paired.RunReader): a run's config, its curves and its
    per-context arrays, and `collect` (the finished runs as a table, for Results.from_store).
    Nothing it offers writes a run; only the store's cache is written."""

    def __init__(self, store) -> None:
        self.store = store

    def __repr__(self) -> str:
        return f"StoredRuns({self.store!r})"

    def collect(self):
        return collect.collect(self.store)

    def load_config(self, run_id: str) -> RunConfig:
        return self.store.load_config(run_id)

    def load_curves(self, run_id: str) -> dict:
        return self.store.load_curves(run_id)

    def per_context(self, run_id: str, device="cpu") -> dict:
        return per_context(self.store, run_id, device)

    def cached_floor(self, name: str) -> dict | None:
        """The floor on one evaluation set cached in the store under `name` (paired.floor_on_eval), or None."""
        return cache.read_floor(self.store.root, name)

    def floor_names(self, prefix: str) -> list[str]:
        return cache.floor_names(self.store.root, prefix)

    def cache_floor(self, name: str, res: dict, seconds: float = 0.0) -> bool:
        """Keep a floor and the seconds it took in the store's cache (not in a read-only store: False)."""
        return False if self.store.readonly else cache.write_floor(self.store.root, name, res, seconds)


__all__ = ["StoredRuns", "per_context", "evaluate", "clear_cache"]
