"""Workers that fail, for tests/test_failures_exit.py: stand-ins for depthscale.train.training.run_pack
(a test sets `depthscale.train.training.run_pack` to one of them, and the sweep's default worker is then
this one: module-level, so the process executor's spawned workers import it by name).

raising_pack: every run raises. kill_self_pack: the pack of the linear L=1 run SIGKILLs its own worker
process (one pack only: two dying packs would race for which death broke the pool); the other packs finish like fake_worker. kill_tracker_pack: the first run (per store)
SIGKILLs multiprocessing's resource tracker of the sweep's process, then every run finishes.
kill_once_pack: like kill_self_pack, but only the first time (the pool's retry then finishes it).
full_disk_pack: the first run's write meets a full disk (OSError ENOSPC).
Run as a script: `python tests/failure_workers.py WORKER depthscale-args...` sets the worker and
runs the CLI in a fresh process (exit code: the CLI's)."""

from __future__ import annotations

import errno
import os
import signal
import sys
from pathlib import Path

import fake_worker


def raising_pack(configs, store, device="cpu", progress=None, loggers=()) -> None:
    for cfg in configs:
        store.write_config(cfg, device=device)
    raise RuntimeError(f"scripted failure in a pack of {len(configs)} runs")


def kill_self_pack(configs, store, device="cpu", progress=None, loggers=()) -> None:
    if any(c.L == 1 and c.model == "linear" for c in configs):
        for cfg in configs:
            store.write_config(cfg, device=device)
        os.kill(os.getpid(), signal.SIGKILL)
    fake_worker.run_pack(configs, store, device, progress)


def kill_once_pack(configs, store, device="cpu", progress=None, loggers=()) -> None:
    """The pack of the linear L=1 run SIGKILLs its worker the first time it starts (a marker file in
    the store says it did), then trains like fake_worker: a worker killed once, mid-sweep."""
    marker = Path(store.root) / "killed-once"
    if any(c.L == 1 and c.model == "linear" for c in configs) and not marker.exists():
        for cfg in configs:
            store.write_config(cfg, device=device)
        marker.write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)
    fake_worker.run_pack(configs, store, device, progress)


def _tracker_pid(parent: int) -> int | None:
    """The resource tracker among `parent`'s children (its command line names it)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmd = (proc / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == parent and b"resource_tracker" in cmd:
            return int(proc.name)
    return None


def kill_tracker_pack(configs, store, device="cpu", progress=None, loggers=()) -> None:
    flag = Path(store.root) / "tracker-killed"
    try:
        fd = os.open(flag, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        pass
    else:
        os.close(fd)
        pid = _tracker_pid(os.getppid())
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            flag.write_text(str(pid))
    fake_worker.run_pack(configs, store, device, progress)


def full_disk_pack(configs, store, device="cpu", progress=None, loggers=()) -> None:
    """The disk fills up as the first run's metrics are written (the OSError a write gives)."""
    store.write_config(configs[0], device=device)
    where = store.run_dir(configs[0].run_id) / "metrics.json"
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(where))


WORKERS = {"raising": raising_pack, "kill_self": kill_self_pack, "kill_tracker": kill_tracker_pack,
           "full_disk": full_disk_pack}


def main() -> int:
    import depthscale.train.training
    from depthscale.cli import main as cli

    depthscale.train.training.run_pack = WORKERS[sys.argv[1]]
    return cli.main(sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
