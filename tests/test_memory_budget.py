"""Issue 51, "memory is a budget": streamed context sets give the held sets' bits, a pack trained
under a small budget gives the numbers of one trained with everything held, the budget decides what
is held, a finished pack's memory goes back to the OS, and the worker pool outlives its workers
(a death retried on a new worker, a worker over its budget retired, a task's SystemExit an error)."""

from __future__ import annotations

import dataclasses
import gc
import os
import signal

import pytest
import torch

from depthscale.base import seeds
from depthscale.config.run import make_config
from depthscale.data.context_sets import ContextSet, set_bytes
from depthscale.data.contexts import make_generator, sample_for
from depthscale.data.measurements import eval_contexts, monitor
from depthscale.kinds.lookup import build_pack
from depthscale.runs.pool import Task, WorkerPool
from depthscale.train import memory
from depthscale.train.training import train_pack

TINY = dict(max_steps=12, eval_every=4, checkpoint_every=4, batch=16, monitor_contexts=300, eval_contexts=300)


def _same(a, b) -> bool:
    return all(torch.equal(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a)
               if isinstance(getattr(a, f.name), torch.Tensor))


@pytest.mark.parametrize("task", ["difficult", "easy"])
def test_a_streamed_set_is_the_held_set_and_the_sequential_draw(task):
    """Chunk i of a streamed set, read in any order and twice, equals the held set's chunk i and
    the contexts one generator gives when read from the start in chunks (the old way)."""
    cfg = make_config("smoke", model="linear", task=task, d=8, P=16, a=0.5, b=0.25)
    held = ContextSet(cfg, 700, cfg.eval_seed, chunk=256, hold=True)
    streamed = ContextSet(cfg, 700, cfg.eval_seed, chunk=256, hold=False)
    gen = make_generator(cfg.eval_seed)
    sequential = [sample_for(cfg, b, gen) for b in (256, 256, 188)]
    assert len(held) == len(streamed) == 3
    for i in (2, 0, 1, 2):
        assert _same(streamed[i], held[i]) and _same(held[i], sequential[i])
    assert streamed[2].B == 188 and streamed[-1].B == 188
    assert streamed.nbytes == set_bytes(cfg, 256) < held.nbytes == set_bytes(cfg, 700)
    with pytest.raises(IndexError):
        streamed[3]


def test_the_monitor_on_streamed_sets_equals_the_monitor_on_held_sets(monkeypatch):
    cfgs = [make_config("smoke", model="nonlinear", L=L, a=a, **TINY) for L in (1, 2) for a in (0, 1)]
    pack = build_pack(cfgs)
    models = list(range(len(cfgs)))
    key = lambda c: (c.a, c.b)  # noqa: E731

    def sets(hold):
        out = {}
        for c in cfgs:
            out.setdefault(key(c), eval_contexts(c, 300, seeds.monitor_seed(c.eval_seed), chunk=128, hold=hold))
        return out

    held, streamed = sets(True), sets(False)
    a = monitor(pack, models, lambda m: held[key(cfgs[m])])
    draws = []
    real = ContextSet._draw
    monkeypatch.setattr(ContextSet, "_draw", lambda self, i: draws.append(i) or real(self, i))
    b = monitor(pack, models, lambda m: streamed[key(cfgs[m])])
    assert sorted(draws) == [0, 0, 1, 1, 2, 2]  # each chunk of each set drawn once, not once per model
    assert repr(a) == repr(b)  # (C is NaN at L = 1: NaN != NaN)


def test_a_pack_trained_under_a_tiny_budget_gives_the_numbers_of_one_with_everything_held():
    """Under a budget that holds no set, every monitor and evaluation set streams: the curves and
    the final measurements are the same bits."""
    cfgs = [make_config("smoke", model="linear", L=2, a=a, b=b, seed=0, **TINY) for a in (0, 1) for b in (0, 0.5)]
    assert memory.held_sets([set_bytes(cfgs[0], 300)] * 2, nbytes=1) == [False, False]
    assert not memory.hold_eval(set_bytes(cfgs[0], 300), nbytes=1)
    free = train_pack(cfgs)
    with memory.budget(1):
        assert memory.current_budget() == 1
        tight = train_pack(cfgs)
    assert memory.current_budget() is None
    for x, y in zip(free, tight):
        drop = ("train_seconds",)
        assert repr({k: v for k, v in x.items() if k not in drop}) == repr({k: v for k, v in y.items() if k not in drop})


def test_the_budget_decides_what_is_held_and_the_estimate_follows():
    cfg = make_config("cpu", model="linear", d=32, P=256, L=4)
    one = set_bytes(cfg, cfg.monitor_contexts)  # 395 MB
    assert one == 4 * cfg.monitor_contexts * (256 * 32 + 32 * 32 + 256 + 5 * 32 + 2 * cfg.k)
    with memory.budget(None):
        assert memory.held_sets([one] * 3) == [True] * 3  # no budget declared: everything held
    assert memory.held_sets([one] * 3, nbytes=int(2 * one / memory.HELD_SHARE)) == [True, True, False]
    # with early stopping a run may stop alone and be measured on a held evaluation set (below); without
    # it the pack's runs stop together and stream the set (Trainer.final_measurements): a chunk, whatever
    # the budget
    cfgs = [cfg.replace(a=a, early_stop=True) for a in (0, 0.25, 0.5, 1)]
    together = [c.replace(early_stop=False) for c in cfgs]
    per = 4 * memory.stored_floats(cfg) * 1.5
    assert memory.pack_bytes(cfgs) - memory.pack_bytes(together) == pytest.approx((cfg.eval_contexts - 1024) * per, abs=8)
    assert memory.pack_bytes(cfgs, nbytes=1 << 28) == memory.pack_bytes(together, nbytes=1 << 28)
    every = memory.pack_bytes(cfgs)
    tight = memory.pack_bytes(cfgs, nbytes=1 << 30)
    # a 1 GiB pack budget holds one monitor set (half of it) and the evaluation set (at most half):
    # the other three monitor sets stream, a chunk each instead of 10,240 contexts
    assert every - tight == pytest.approx(3 * (cfg.monitor_contexts - 1024) * per, abs=8)
    # a quarter of a GiB: no set fits, all four monitor sets and the evaluation set stream
    small = memory.pack_bytes(cfgs, nbytes=1 << 28)
    assert every - small == pytest.approx((4 * (cfg.monitor_contexts - 1024) + cfg.eval_contexts - 1024) * per, abs=8)


def test_a_finished_packs_cycles_and_free_pages_go_back_to_the_os():
    class Holder:
        pass

    before = memory.release_memory()
    h = Holder()
    h.me, h.big = h, torch.ones(64 << 20, dtype=torch.float32)  # 256 MiB in a reference cycle
    h.big.add_(1)
    del h
    assert memory.rss_bytes() > before + (200 << 20)  # not freed by reference counting
    assert memory.release_memory() < before + (64 << 20)


# --- the pool -------------------------------------------------------------------------------------

def _pid(_=None) -> int:
    return os.getpid()


def _die_once(marker: str) -> int:
    if not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
    return os.getpid()


def _die(_=None) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _exit(code) -> None:
    raise SystemExit(code)


def _grow(mib: int) -> int:
    _grow.keep = bytearray(mib << 20)  # held by the module: release_memory cannot free it
    return os.getpid()


def _run(pool, tasks, retry=True):
    results, deaths = {}, []

    def on_death(task, code):
        deaths.append((task.key, code))
        return [dataclasses.replace(task, attempts=task.attempts + 1)] if retry and task.attempts == 0 else []

    pool.run(tasks, lambda t, o: results.__setitem__(t.key, o), on_death)
    return results, deaths


def test_a_worker_that_dies_is_replaced_and_its_task_given_back(tmp_path):
    pool = WorkerPool(2)
    tasks = [Task("die", _die_once, (str(tmp_path / "m"),))] + [Task(i, _pid, ()) for i in range(4)]
    results, deaths = _run(pool, tasks)
    assert deaths == [("die", -signal.SIGKILL)]
    assert set(results) == {"die", 0, 1, 2, 3} and all(o.ok for o in results.values())
    # a new worker is started only if tasks still wait when the death is seen (the other may have run them all)
    assert pool.started in (2, 3) and pool.deaths[0][1] == -signal.SIGKILL and not pool.workers


def test_a_task_that_kills_every_worker_is_reported_twice_and_the_rest_run():
    results, deaths = _run(WorkerPool(1), [Task("die", _die, ()), Task(1, _pid, ())])
    assert deaths == [("die", -signal.SIGKILL), ("die", -signal.SIGKILL)]
    assert list(results) == [1] and results[1].ok


def test_a_tasks_systemexit_is_its_error_and_the_worker_lives_on():
    results, deaths = _run(WorkerPool(1), [Task("zero", _exit, (0,)), Task("bye", _exit, ("bye",)), Task(1, _pid, ())])
    assert not deaths
    assert not results["zero"].ok and isinstance(results["zero"].value, SystemExit)
    assert not results["bye"].ok and results["bye"].value.code == "bye"
    assert results[1].ok


def _rss(_=None) -> int:
    return memory.rss_bytes()


def test_a_worker_above_its_budget_retires_and_a_fresh_one_takes_the_next_task():
    base, _ = _run(WorkerPool(1), [Task("base", _rss, ())])  # a worker's own resident memory (its imports)
    pool = WorkerPool(1, retire_above=base["base"].value + (300 << 20))
    results, _ = _run(pool, [Task("small", _grow, (1,)), Task("big", _grow, (600,)), Task("after", _pid, ())])
    assert not results["small"].retired and results["big"].retired and pool.retired == 1
    assert results["big"].rss > 600 << 20
    assert results["after"].value != results["big"].value == results["small"].value  # a new process
    gc.collect()


_FLOOR_GROWTH = """
import torch
from depthscale.theory.softmax_floor import floor_from_chunks
from depthscale.train.memory import rss_bytes
g = torch.Generator().manual_seed(0)
n, P, d = 40960, 64, 16
def chunks():
    for lo in range(0, n, 1024):
        x, q, y = torch.randn(1024, P, d, generator=g), torch.randn(1024, d, generator=g), torch.randn(1024, P, generator=g)
        yield x, q, y, y[:, 0].clone()
before = rss_bytes()
floor_from_chunks(chunks(), n, depths=(1, 2))
print((rss_bytes() - before) >> 20)
"""


def test_the_streamed_floor_does_not_pin_the_heap_with_its_kept_heads():
    """B_L on a streamed set with glibc's default allocator, in a fresh process: each slice's head
    predictions kept in a list between the slices' 33 MB temporaries pinned the heap above them (the
    report's process: 0.6 -> 4.4 GB on one 102,400-context set; here +433 MiB on 40,960 contexts);
    one array made up front keeps the growth to the heads themselves (33 MiB) and a few slices."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run([sys.executable, "-c", _FLOOR_GROWTH], capture_output=True, text=True, env=env,
                         timeout=600, check=True)
    grown = int(out.stdout.split()[-1])
    assert grown < 200, f"the floor grew the process by {grown} MiB"


_RETURNING = """
import torch
from depthscale.train import memory
assert memory.tune_allocator()
def grown(block):
    before = memory.rss_bytes()
    with block():
        x = torch.ones(50_000_000, dtype=torch.float32)  # 200 MB, freed inside the block
        del x
    return (memory.rss_bytes() - before) >> 20
import contextlib
kept = grown(contextlib.nullcontext)   # tuned: the freed block stays in the process
memory.release_memory()
returned = grown(memory.returning_memory)
again = grown(contextlib.nullcontext)  # tune_allocator's thresholds back after the block
print(kept, returned, again)
"""


def test_returning_memory_hands_a_freed_block_back_and_then_restores_the_tuned_thresholds():
    """Under tune_allocator a freed 200 MB tensor stays resident (the packs' steps reuse it); inside
    returning_memory (a final measurement, a theory job) it goes back to the OS at once; after the
    block the tuned behaviour is back. A fresh process: glibc's thresholds are process-wide."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run([sys.executable, "-c", _RETURNING], capture_output=True, text=True, env=env,
                         timeout=600, check=True)
    kept, returned, again = (int(v) for v in out.stdout.split())
    assert kept > 150 and again > 150, (kept, again)
    assert returned < 50, returned


def test_release_memory_collects_once_the_resident_set_grew_collect_growth_since_its_last_collection(monkeypatch):
    import gc

    calls = []
    real = gc.collect
    monkeypatch.setattr(memory.gc, "collect", lambda *a: calls.append(1) or real(*a))
    rss = {"now": 1 << 30}
    monkeypatch.setattr(memory, "rss_bytes", lambda: rss["now"])
    monkeypatch.setattr(memory, "_trim", lambda: None)
    monkeypatch.setitem(memory._COLLECTED, "rss", -1)
    assert memory.release_memory() == 1 << 30 and len(calls) == 1  # the first release always collects
    for grown in (8 << 20, 40 << 20, memory.COLLECT_GROWTH):  # small packs: their growth adds up ...
        rss["now"] = (1 << 30) + grown
        memory.release_memory()
    assert len(calls) == 1
    rss["now"] = (1 << 30) + memory.COLLECT_GROWTH + 1  # ... until it passes COLLECT_GROWTH
    assert memory.release_memory() == rss["now"] and len(calls) == 2
    assert memory._COLLECTED["rss"] == rss["now"]  # the baseline moves only with a collection
    rss["now"] += memory.COLLECT_GROWTH // 2
    memory.release_memory()
    assert len(calls) == 2
