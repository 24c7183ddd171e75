"""A pool of worker processes that outlives its workers (the process executor's; executors.run_process).

concurrent.futures' ProcessPoolExecutor treats a worker's death as the end of the pool: every
pending task fails with BrokenProcessPool, and the other workers are stopped mid-task. Here a death
is an event about one task: the pool starts a new worker in its place and hands the task back to
its owner (`on_death`), which may give it, or parts of it, again; every other task goes on.

A worker runs one task at a time, sent over its own pipe, and answers with the result (or the
exception), its resident memory after `memory.release_memory` and whether it retires. A worker
whose resident memory after a task is above `retire_above` bytes retires: it exits after answering and a
fresh one takes its place, so memory a task left behind (allocator fragments, caches) never adds up
across tasks. Workers are spawned (never forked: torch's threads) and start with `initializer`.

    pool = WorkerPool(2, init, (threads, os.getpid()), retire_above=1 << 30)
    pool.run([Task(0, fn, (a,)), Task(1, fn, (b,))], on_result, on_death)
"""

from __future__ import annotations

import logging
import multiprocessing
import pickle
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Any, Callable

log = logging.getLogger(__name__)

JOIN_SECONDS = 10.0  # how long a worker that answered "retiring" (or died) is waited for


@dataclass
class Task:
    """One call `fn(*args)` for a worker; `attempts`: how many workers died running it so far;
    `data`: the owner's (the pack it runs, say)."""

    key: Any
    fn: Callable
    args: tuple
    attempts: int = 0
    data: Any = None


@dataclass
class Outcome:
    """A task's answer: `ok` and `value` (the result, or the exception it raised), the worker's
    resident bytes after it (`rss`) and whether that worker retired."""

    ok: bool
    value: Any
    rss: int = 0
    retired: bool = False


def _answer(conn, key, ok: bool, value, rss: int, retire: bool) -> None:
    """Send a task's answer; an exception (or result) that cannot be pickled goes as a RuntimeError
    naming it, never as a worker that dies of a PicklingError."""
    try:
        conn.send((key, ok, value, rss, retire))
    except (pickle.PicklingError, TypeError, AttributeError) as e:
        what = f"{type(value).__name__}: {value}" if not ok else f"an unpicklable result ({e})"
        conn.send((key, False, RuntimeError(what), rss, retire))


def worker_main(conn, initializer, initargs, retire_above: int | None) -> None:
    """A worker: `initializer(*initargs)`, then tasks from `conn` until None (or the pipe closes).
    Any exception a task raises is its answer, BaseExceptions included (a task's SystemExit is an
    error of that task, never the worker's exit); after each task, the memory it left is released
    and, above `retire_above` bytes resident, the worker retires."""
    from depthscale.train.memory import release_memory

    if initializer is not None:
        initializer(*initargs)
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        key, fn, args = msg
        try:
            ok, value = True, fn(*args)
        except BaseException as e:  # noqa: BLE001 - the task's error is its answer; the worker lives on
            ok, value = False, e
        rss = release_memory()
        retire = retire_above is not None and rss > retire_above
        _answer(conn, key, ok, value, rss, retire)
        del value
        if retire:
            return


@dataclass
class _Worker:
    process: Any
    conn: Any
    task: Task | None = None


class WorkerPool:
    """`n` spawned workers that run Tasks (see the module docstring). `retire_above`: resident
    bytes after a task above which a worker retires (None: never)."""

    def __init__(self, n: int, initializer=None, initargs: tuple = (), retire_above: int | None = None):
        self.n, self.initializer, self.initargs = max(1, int(n)), initializer, initargs
        self.retire_above = retire_above
        self.ctx = multiprocessing.get_context("spawn")
        self.workers: list[_Worker] = []
        self.started = 0  # workers started in all (replacements included)
        self.deaths: list[tuple[int, int | None]] = []  # (pid, exit code) of each worker that died mid-task
        self.retired = 0
        self.queue: deque = deque()  # the tasks not started yet (cancel() empties it)

    def _spawn(self) -> _Worker:
        parent, child = self.ctx.Pipe()
        proc = self.ctx.Process(target=worker_main, args=(child, self.initializer, self.initargs, self.retire_above),
                                daemon=True, name=f"depthscale-worker-{self.started}")
        proc.start()
        child.close()
        self.started += 1
        w = _Worker(proc, parent)
        self.workers.append(w)
        return w

    def run(self, tasks, on_result: Callable[[Task, Outcome], None],
            on_death: Callable[[Task, int | None], list]) -> None:
        """Run `tasks` (in order, each on the first free worker) to the end. `on_result(task,
        outcome)` for each answer; `on_death(task, exitcode)` when a worker dies running `task`:
        it returns the Tasks to run instead (first, before the rest; [] for none)."""
        self.queue = queue = deque(tasks)
        try:
            while queue or any(w.task is not None for w in self.workers):
                self._fill(queue)
                self._wait_once(queue, on_result, on_death)
        finally:
            self.close()

    def cancel(self) -> list[Task]:
        """Start no more tasks (those running go on to their end); returns the ones dropped."""
        dropped = list(self.queue)
        self.queue.clear()
        return dropped

    def _fill(self, queue: deque) -> None:
        """Give each idle worker the next task, starting workers up to n while tasks wait."""
        idle = [w for w in self.workers if w.task is None]
        while queue and len(self.workers) < self.n and len(idle) < len(queue):
            idle.append(self._spawn())
        for w in idle:
            if not queue:
                break
            task = queue.popleft()
            try:
                w.conn.send((task.key, task.fn, task.args))
            except (BrokenPipeError, OSError):  # died while idle: its place is taken below
                queue.appendleft(task)
                w.process.join(JOIN_SECONDS)
                log.warning("a worker process (pid %s) died between tasks (%s); a new one takes its place",
                            w.process.pid, exit_text(w.process.exitcode))
                self._drop(w)
                continue
            w.task = task

    def _wait_once(self, queue: deque, on_result, on_death) -> None:
        """Wait for the next answer or death and act on it."""
        busy = [w for w in self.workers if w.task is not None]
        if not busy:
            return
        ready = set(wait([w.conn for w in busy] + [w.process.sentinel for w in busy]))
        for w in busy:
            if w.conn in ready or w.process.sentinel in ready:
                self._settle(w, ready, queue, on_result, on_death)

    def _settle(self, w: _Worker, ready: set, queue: deque, on_result, on_death) -> None:
        task = w.task
        msg = None
        if w.conn in ready or w.conn.poll():
            try:
                msg = w.conn.recv()
            except (EOFError, OSError):
                msg = None
        if msg is None:  # the worker died with the task
            w.process.join(JOIN_SECONDS)
            code = w.process.exitcode
            self.deaths.append((w.process.pid, code))
            self._drop(w)
            log.debug("a worker process (pid %s) died (%s) running a task; a new one takes its place",
                        w.process.pid, exit_text(code))
            queue.extendleft(reversed(list(on_death(task, code))))
            return
        _, ok, value, rss, retire = msg
        w.task = None
        if retire:
            self.retired += 1
            w.process.join(JOIN_SECONDS)
            self._drop(w)
        on_result(task, Outcome(ok, value, rss, retire))

    def _drop(self, w: _Worker) -> None:
        if w in self.workers:
            self.workers.remove(w)
        try:
            w.conn.close()
        except OSError:
            pass

    def close(self, terminate: bool = False) -> None:
        """Stop every worker: a None to each idle one (or SIGTERM with `terminate`), then join."""
        for w in list(self.workers):
            if terminate or w.task is not None:
                w.process.terminate()
            else:
                try:
                    w.conn.send(None)
                except (BrokenPipeError, OSError):
                    pass
        for w in list(self.workers):
            w.process.join(JOIN_SECONDS)
            if w.process.is_alive():
                w.process.kill()
                w.process.join(JOIN_SECONDS)
            self._drop(w)


def exit_text(code: int | None) -> str:
    """How a process ended, in words: 'signal 9', 'exit code 1', 'exit status unknown'."""
    if code is None:
        return "exit status unknown"
    return f"signal {-code}" if code < 0 else f"exit code {code}"


__all__ = ["WorkerPool", "Task", "Outcome", "worker_main", "exit_text", "JOIN_SECONDS"]
