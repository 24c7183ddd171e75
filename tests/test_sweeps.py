"""Sweeps: grids, shards, plans, and execution that is resumable and runs every config once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from depthscale.base.errors import MissingExtraError
from depthscale.config.run import PRESET_DEPTHS, ConfigError, make_config, run_id
from depthscale.runs.executors import available_cores, execute_pack, pack_cost
from depthscale.runs.sweeps import expand_grid, load_grid, make_packs, parse_shard, plan, run_sweep
from depthscale.store import collect, manifests
from depthscale.store.lease import Leases
from depthscale.store.store import Store

import fake_worker
from fake_worker import events

TESTS = Path(__file__).resolve().parent


@pytest.fixture
def logdir(tmp_path, monkeypatch) -> Path:
    d = tmp_path / "log"
    d.mkdir()
    monkeypatch.setenv("FAKE_WORKER_LOG", str(d))
    return d


RUN_KEYS = ("worker", "name", "progress", "allow_memory", "extra_jobs")  # run_sweep's; the rest are plan's


def _sweep(cfgs, store, **kw):
    kw = {"worker": fake_worker.run_pack, "pack_key": fake_worker.pack_key, "progress": False, **kw}
    run = {k: kw.pop(k) for k in RUN_KEYS if k in kw}
    return run_sweep(plan(cfgs, store, **kw), store, **run)


def _done_snapshot(store: Store) -> dict:
    """Bytes and mtimes of every file of every done run."""
    out = {}
    for rid in store.run_ids():
        if store.is_done(rid):
            for p in sorted(store.run_dir(rid).iterdir()):
                out[f"{rid}/{p.name}"] = (p.read_bytes(), p.stat().st_mtime_ns)
    return out


def _script(store_root: Path, logdir: Path, *args: str, sleep: float = 0.0) -> subprocess.Popen:
    env = {**os.environ, "FAKE_WORKER_LOG": str(logdir), "FAKE_WORKER_SLEEP": str(sleep),
           "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, str(TESTS / "fake_worker.py"), str(store_root), *args],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finished_once(store: Store, logdir: Path, cfgs) -> None:
    for c in cfgs:
        rid = run_id(c)
        assert store.is_done(rid), rid
        assert [e for e, _ in events(logdir, rid)].count("finish") == 1, (rid, events(logdir, rid))


# --- grids ---

def test_expand_grid_product_alias_and_order():
    grid = {"model": ["linear", "nonlinear"], "a": [0, 0.5], "depths": [1, 2, 4], "seed": 3}
    cfgs = expand_grid(grid, preset="smoke")
    assert len(cfgs) == 12
    assert [(c.model, c.a, c.L) for c in cfgs[:4]] == [("linear", 0.0, 1), ("linear", 0.0, 2),
                                                       ("linear", 0.0, 4), ("linear", 0.5, 1)]
    assert all(c.seed == 3 and c.preset == "smoke" and c.d == 8 for c in cfgs)
    # an integer for a float field is the same run as the float: no duplicate run ids
    assert cfgs[0].run_id == make_config("smoke", model="linear", a=0.0, L=1, seed=3).run_id


def test_expand_grid_union_dedupe_preset_depths_and_preset_key():
    grid = [{"L": "preset", "seed": [0, 1]}, {"L": [1, 2], "seed": 0}]
    cfgs = expand_grid(grid, preset="smoke")
    assert len(cfgs) == 2 * len(PRESET_DEPTHS["smoke"])  # the second table adds nothing new
    assert len({c.run_id for c in cfgs}) == len(cfgs)
    both = expand_grid({"preset": ["smoke", "cpu"], "L": 2})
    assert [(c.preset, c.d) for c in both] == [("smoke", 8), ("cpu", 16)]  # the nonlinear geometry


@pytest.mark.parametrize("grid, message", [
    ({"a": 0, "depth": [1, 2]}, "unknown grid key 'depth'"),
    ({"L": [1], "depths": [2]}, "either 'depths' or 'L'"),
    ({"seed": []}, "grid key 'seed' has an empty list"),
    ({"L": [0, 1]}, "L must be >= 1, got 0"),
    ([], "grid is empty"),
])
def test_expand_grid_errors(grid, message):
    with pytest.raises(ConfigError, match=message):
        expand_grid(grid, preset="smoke")


def test_load_grid_json_and_toml(tmp_path):
    (tmp_path / "g.json").write_text(json.dumps({"model": ["linear", "nonlinear"], "L": [1, 2]}))
    (tmp_path / "g.toml").write_text('model = ["linear", "nonlinear"]\nL = [1, 2]\n')
    (tmp_path / "u.toml").write_text('[[grid]]\nseed = [0, 1]\n\n[[grid]]\nseed = 5\nL = 2\n')
    a = expand_grid(load_grid(tmp_path / "g.json"), "smoke")
    b = expand_grid(load_grid(tmp_path / "g.toml"), "smoke")
    assert [c.run_id for c in a] == [c.run_id for c in b] and len(a) == 4
    assert [(c.seed, c.L) for c in expand_grid(load_grid(tmp_path / "u.toml"), "smoke")] == \
        [(0, 1), (1, 1), (5, 2)]
    (tmp_path / "bad.toml").write_text("model = [\n")
    with pytest.raises(ConfigError, match=r"bad\.toml is not valid TOML"):
        load_grid(tmp_path / "bad.toml")
    with pytest.raises(ConfigError, match="must end in .json or .toml"):
        load_grid(tmp_path / "g.yaml")


# --- shards and plans ---

@pytest.mark.parametrize("text, expected", [("0/1", (0, 1)), ("1/2", (1, 2)), ("9/10", (9, 10)),
                                            ((0, 3), (0, 3)), (None, None)])
def test_parse_shard_good(text, expected):
    assert parse_shard(text) == expected


@pytest.mark.parametrize("text", ["2/2", "3/2", "-1/2", "0/0", "1", "a/b", "0/2/3", " 0/2", "0 / 2",
                                  "1.0/2", "", (2, 2), (0, -1), (True, 2), "0/2\n"])
def test_parse_shard_bad(text):
    with pytest.raises(ConfigError, match="shard must"):
        parse_shard(text)


def test_shards_partition_the_runs_whatever_is_done(tmp_path):
    store = Store(tmp_path / "s")
    cfgs = fake_worker.configs(23)
    all_ids = {c.run_id for c in cfgs}
    for n in (1, 2, 3, 5):
        shares = [{c.run_id for p in make_packs(cfgs, store, (i, n), pack_key=fake_worker.pack_key) for c in p}
                  for i in range(n)]
        assert set().union(*shares) == all_ids and sum(map(len, shares)) == len(all_ids)
    # a shard planning after some runs are done still never takes another shard's run
    before = {c.run_id for p in make_packs(cfgs, store, (1, 3), pack_key=fake_worker.pack_key) for c in p}
    _sweep(cfgs[:7], store, shard=None)
    after = {c.run_id for p in make_packs(cfgs, store, (1, 3), pack_key=fake_worker.pack_key) for c in p}
    assert after <= before and before - after == before & {c.run_id for c in cfgs[:7]}


def test_plan_dedupes_drops_done_and_packs_evenly(tmp_path):
    store = Store(tmp_path / "s")
    cfgs = fake_worker.configs(10) + fake_worker.configs(10, model="linear")
    _sweep(cfgs[:3], store)
    packs = make_packs(cfgs + cfgs[:5], store, max_pack=4, pack_key=fake_worker.pack_key)
    assert packs == make_packs(list(reversed(cfgs)), store, max_pack=4, pack_key=fake_worker.pack_key)
    sizes = [len(p) for p in packs]
    assert sorted(sizes) == [3, 3, 3, 4, 4] and sum(sizes) == 17  # 7 nonlinear runs left, 10 linear
    for p in packs:
        assert len({fake_worker.pack_key(c) for c in p}) == 1
        assert not any(store.is_done(c.run_id) for c in p)
    with pytest.raises(ConfigError, match="max_pack"):
        make_packs(cfgs, store, max_pack=0, pack_key=fake_worker.pack_key)


def test_pack_cost_orders_by_layers_steps_and_model():
    one = [make_config("cpu", model="nonlinear", L=64)]
    assert pack_cost(one) == pytest.approx(64 * pack_cost([make_config("cpu", model="nonlinear", L=1)]))
    assert pack_cost(one + [make_config("cpu", model="nonlinear", L=2)]) == pytest.approx(pack_cost(one) * 66 / 64)
    assert pack_cost([make_config("cpu", model="nonlinear", L=64, max_steps=3000)]) == pytest.approx(
        2 * pack_cost([make_config("cpu", model="nonlinear", L=64, max_steps=1500)]))
    cu = make_config("cpu", model="context_updates", L=16, batch=256, max_steps=1500, P=128)
    nl = make_config("cpu", model="nonlinear", L=16, batch=256, max_steps=1500, P=128)
    assert pack_cost([cu]) > 10 * pack_cost([nl])  # O(L P^2 N) against O(L P d) per context
    assert pack_cost([make_config("cpu", model="context_updates", L=16, batch=256, max_steps=1500, P=256)]) \
        == pytest.approx(4 * pack_cost([cu]))


# --- execution ---

def test_inline_sweep_then_rerun_changes_nothing(tmp_path, logdir):
    store = Store(tmp_path / "s")
    cfgs = fake_worker.configs(6)
    counts = _sweep(cfgs, store, max_pack=4, name="six")
    assert counts == {"planned": 6, "packs": 2, "ran": 6, "skipped_done": 0, "skipped_claimed": 0,
                      "skipped_unreadable": 0, "failed": 0, "skipped_failed": 0}
    _finished_once(store, logdir, cfgs)
    assert store.leases.held() == [] and not list(store.root.rglob("lease*"))
    before = _done_snapshot(store)
    again = _sweep(cfgs, store, name="six")
    assert again["planned"] == 0 and again["skipped_done"] == 6
    assert _done_snapshot(store) == before
    assert collect.status(store).loc["six"].to_dict() == {"total": 6, "done": 6, "diverged": 0, "broken": 0,
                                                   "unloaded": 0, "running": 0, "failed": 0, "pending": 0}
    df = collect.collect(store, sweep="six")
    assert sorted(df["R_L"]) == sorted(fake_worker.expected_R(c) for c in cfgs)


def test_failures_are_recorded_and_retried(tmp_path, logdir):
    store = Store(tmp_path / "s")
    good = fake_worker.configs(3)
    failing = make_config("smoke", noise=0.5)  # the worker records store.fail and goes on
    crashing = make_config("smoke", noise=0.25)  # the worker raises
    nan = make_config("smoke", lr=2.0)  # a NaN run is finished, not failed
    counts = _sweep(good + [failing, nan], store, max_pack=64)
    assert counts["failed"] == 1 and counts["ran"] == 4
    assert store.failure(failing.run_id).startswith("ValueError: fake failure")
    assert store.is_done(nan.run_id) and store.load_metrics(nan.run_id)["stopped_because"] == "nan"
    assert store.run_state(nan.run_id) == "diverged"  # finished, never run again, but not "done"
    crashed = _sweep([crashing], store)
    assert crashed["failed"] == 1 and store.failure(crashing.run_id).startswith("RuntimeError: fake crash")
    assert store.leases.held() == [] and not list(store.root.rglob("lease"))
    kept = _sweep(good + [failing, crashing, nan], store, retry_failed=False)
    assert kept["planned"] == 0 and kept["skipped_failed"] == 2
    retried = _sweep(good + [failing, nan], store)
    assert retried["planned"] == 1 and retried["ran"] == 0 and retried["failed"] == 1  # `failing` again


def test_worker_leaving_a_run_unfinished_is_recorded(tmp_path):
    store = Store(tmp_path / "s")
    cfg = make_config("smoke")
    counts = execute_pack([cfg], store, worker=_lazy_worker)
    assert counts["failed"] == 1 and "without finishing" in store.failure(cfg.run_id)
    assert store.leases.holder(cfg.run_id) is None


def _lazy_worker(configs, store, device="cpu", progress=None):
    pass


def test_heartbeat_runs_while_the_worker_works(tmp_path, monkeypatch):
    store = Store(tmp_path / "s", lease_timeout=0.5)  # heartbeat every 0.1 s
    cfg = make_config("smoke")
    monkeypatch.setenv("FAKE_WORKER_SLEEP", "1.2")
    beats = []
    original = Leases.heartbeat

    def counting(self, rid):
        beats.append(rid)
        return original(self, rid)

    monkeypatch.setattr(Leases, "heartbeat", counting)
    assert execute_pack([cfg], store, worker=fake_worker.run_pack)["ran"] == 1
    assert len(beats) >= 5


def test_skips_runs_held_by_someone_else(tmp_path, logdir):
    store = Store(tmp_path / "s")
    cfgs = fake_worker.configs(4)
    holder = Store(store.root)
    assert holder.leases.claim(cfgs[1].run_id, "other")
    counts = _sweep(cfgs, store)
    assert counts["ran"] == 3 and counts["skipped_claimed"] == 1
    assert not store.is_done(cfgs[1].run_id) and events(logdir, cfgs[1].run_id) == []
    holder.leases.release(cfgs[1].run_id)


def test_sweep_killed_halfway_resumes_and_finishes_each_run_once(tmp_path, logdir):
    store = Store(tmp_path / "s")
    cfgs = fake_worker.configs(10)
    proc = _script(store.root, logdir, "--n", "10", "--max-pack", "3", sleep=0.15)
    deadline = time.monotonic() + 20
    while sum(store.is_done(c.run_id) for c in cfgs) < 4:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done_before = {c.run_id for c in cfgs if store.is_done(c.run_id)}
    assert 4 <= len(done_before) < 10
    snapshot = _done_snapshot(store)
    assert list(store.root.rglob("lease"))  # the killed process left its lease behind
    counts = _sweep(cfgs, store, max_pack=3, name="fake")
    assert counts["skipped_done"] == len(done_before) and counts["ran"] == 10 - len(done_before)
    assert all(store.is_done(c.run_id) for c in cfgs)
    me = os.getpid()
    for c in cfgs:  # finished runs were not started again, the others finished once, here
        mine = [e for e, pid in events(logdir, c.run_id) if pid == me]
        assert mine == ([] if c.run_id in done_before else ["start", "finish"]), c.run_id
        assert store.load_metrics(c.run_id)["pid"] == (proc.pid if c.run_id in done_before else me)
    assert {k: v for k, v in _done_snapshot(store).items() if k.split("/")[0] in done_before} == snapshot
    # a lease is left only where the kill fell between writing DONE and releasing (harmless)
    assert {p.parent.name for p in store.root.rglob("lease*")} <= done_before
    assert not list(store.root.rglob(".*.tmp"))


@pytest.mark.parametrize("mode", ["same sweep", "shards"])
def test_two_processes_run_each_config_once(tmp_path, logdir, mode):
    store = Store(tmp_path / "s")
    cfgs = fake_worker.configs(12)
    extra = [[], []] if mode == "same sweep" else [["--shard", "0/2"], ["--shard", "1/2"]]
    # 0.2 s a run: one process alone would need 2.4 s, more than the two start-ups can differ by
    # on a loaded 2-core machine, so "both did work" is not a race with the second's import
    procs = [_script(store.root, logdir, "--n", "12", "--max-pack", "2", *extra[i], sleep=0.2)
             for i in range(2)]
    outs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    _finished_once(store, logdir, cfgs)
    for c in cfgs:
        assert [e for e, _ in events(logdir, c.run_id)] == ["start", "finish"]
    pids = {c.run_id: events(logdir, c.run_id)[0][1] for c in cfgs}
    assert set(pids.values()) == {p.pid for p in procs}  # both did work
    if mode == "shards":
        ordered = sorted(pids)
        for i, p in enumerate(procs):
            assert {rid for rid, pid in pids.items() if pid == p.pid} == set(ordered[i::2])


def test_process_executor_splits_threads(tmp_path, logdir, monkeypatch):
    # slow enough that the first worker cannot take both packs before the second has started
    monkeypatch.setenv("FAKE_WORKER_SLEEP", "0.5")
    store = Store(tmp_path / "s")
    cfgs = fake_worker.configs(6)
    counts = _sweep(cfgs, store, executor="process", workers=2, max_pack=3)
    assert counts["ran"] == 6 and counts["packs"] == 2 and counts["failed"] == 0
    _finished_once(store, logdir, cfgs)
    df = collect.collect(store)
    threads = max(1, available_cores() // 2)
    assert set(df["omp_threads"]) == {str(threads)}  # set before torch would be imported
    assert df["pid"].nunique() == 2 and os.getpid() not in set(df["pid"])


class _FakeTorch:
    """Stands in for torch in sys.modules (importing the real one takes seconds)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def get_num_threads(self) -> int:
        return self.n

    def set_num_threads(self, n: int) -> None:
        self.n = n


def test_worker_process_sets_torch_threads(tmp_path, monkeypatch):
    from depthscale.runs import executors

    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        monkeypatch.delenv(var, raising=False)  # all restored after the test
    monkeypatch.setattr(executors, "_THREADS", None)
    cfgs = fake_worker.configs(1)  # (validating a config loads the model kinds, and they the real torch)
    torch = _FakeTorch(8)
    monkeypatch.setitem(sys.modules, "torch", torch)
    executors._init_process_worker(1)
    assert torch.n == 1 and os.environ["OMP_NUM_THREADS"] == os.environ["MKL_NUM_THREADS"] == "1"
    torch.n = 8  # as if torch were imported after the initializer, with its own default
    assert execute_pack(cfgs, Store(tmp_path / "s"), fake_worker.run_pack)["ran"] == 1
    assert torch.n == 1


def test_bad_executor_and_missing_submitit(tmp_path, monkeypatch):
    store = Store(tmp_path / "s")
    with pytest.raises(ConfigError, match="executor must be one of inline, process, slurm"):
        _sweep(fake_worker.configs(1), store, executor="threads")
    monkeypatch.setitem(sys.modules, "submitit", None)  # import submitit now fails
    before = sorted(p.relative_to(store.root) for p in store.root.rglob("*"))
    with pytest.raises(MissingExtraError, match=r"pip install 'depthscale\[slurm\]'"):
        _sweep(fake_worker.configs(1), store, executor="slurm", name="nothing-written")
    assert sorted(p.relative_to(store.root) for p in store.root.rglob("*")) == before  # no manifest


def test_slurm_options_are_checked_before_anything_is_written(tmp_path):
    pytest.importorskip("submitit")
    store = Store(tmp_path / "s")
    for opts, match in (({"parallelism": 4}, "unknown slurm option 'parallelism'"),
                        ({"time": 5}, "unknown slurm option 'time'"),
                        ({"time_min": 0}, "time_min must be an integer >= 1"),
                        ({"array_parallelism": "4"}, "array_parallelism must be an integer")):
        with pytest.raises(ConfigError, match=match):
            _sweep(fake_worker.configs(1), store, executor="slurm", slurm=opts, name="x")
    assert manifests.names(store) == []


def test_empty_grids_are_refused():
    for grid in ({}, [], [{}], {"grid": []}, 3):
        with pytest.raises(ConfigError, match="grid"):
            expand_grid(grid, preset="smoke")


def test_sweep_refuses_packs_that_do_not_fit_before_writing(tmp_path, monkeypatch):
    from depthscale.train import memory
    from depthscale.train.memory import MemoryRefused

    store = Store(tmp_path / "s")
    cfgs = fake_worker.configs(6)
    one = min(memory.pack_bytes([c]) for c in cfgs)
    monkeypatch.setattr(memory, "available_bytes", lambda device="cpu": one // 2)
    # not even one run fits: refused before anything is written
    with pytest.raises(MemoryRefused, match=r"needs about .* of memory \(estimate\); .* is available on cpu"):
        _sweep(cfgs, store, name="big")
    assert manifests.names(store) == [] and store.run_ids() == []
    monkeypatch.setattr(memory, "available_bytes", lambda device="cpu": 1)
    assert _sweep(fake_worker.configs(1), store, allow_memory=True)["ran"] == 1  # allowed: tried anyway


def test_sweep_splits_packs_to_fit_memory(tmp_path, monkeypatch):
    from depthscale.train import memory
    from depthscale.runs.sweeps import pack_memory_budget

    cfgs = fake_worker.configs(6)
    whole = make_packs(cfgs, None)
    need = max(memory.pack_bytes(p) for p in whole)
    single = max(memory.pack_bytes([c]) for c in cfgs)  # the evaluation set is a fixed cost
    assert single < need
    budget = (single + need) // 2
    split = make_packs(cfgs, None, pack_memory=budget)
    assert len(split) > len(whole)
    assert all(memory.pack_bytes(p) <= budget for p in split)
    assert sorted(c.run_id for p in split for c in p) == sorted(c.run_id for p in whole for c in p)
    assert make_packs(cfgs, None, pack_memory=1) == [[c] for p in whole for c in p]  # at worst one run a pack
    # the sweep uses a share of the machine's memory split over its workers, less a worker's
    # imports, at most WORKER_CAP a worker: split, then all run
    avail = int(2 * (budget + memory.WORKER_BASE) / memory.WORKER_SHARE) + 2
    monkeypatch.setattr(memory, "available_bytes", lambda device="cpu": avail)
    assert pack_memory_budget("process", 2) == int(memory.WORKER_SHARE * avail / 2) - memory.WORKER_BASE
    assert abs(pack_memory_budget("process", 2) - budget) <= 1
    monkeypatch.setattr(memory, "available_bytes", lambda device="cpu": 10**13)
    assert pack_memory_budget("process", 2) == memory.WORKER_CAP - memory.WORKER_BASE
    monkeypatch.setattr(memory, "available_bytes", lambda device="cpu": avail)
    assert pack_memory_budget("process", 2, device="cuda") == int(memory.HEADROOM * avail / 2)  # a GPU's own
    assert pack_memory_budget("slurm", slurm={"mem_gb": 4}) == int(memory.HEADROOM * 4e9)
    assert pack_memory_budget("slurm", device="cuda", slurm={"mem_gb": 4}) is None
    store = Store(tmp_path / "s")
    res = _sweep(cfgs, store, executor="process", workers=2)
    assert res["ran"] == 6 and res["packs"] > len(whole)


def _children(pid: int) -> set[int]:
    """Every live descendant of `pid` (from /proc)."""
    parent = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
                parent[int(d.name)] = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        kids = {c for c, pp in parent.items() if pp == p}
        todo += list(kids - out)
        out |= kids
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"  # a zombie has exited (its new parent may not have reaped it yet)


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc to find the worker processes")
def test_process_workers_exit_when_the_sweep_is_killed(tmp_path, logdir):
    store_root = tmp_path / "s"
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import fake_worker; "
            "from depthscale.runs.sweeps import plan, run_sweep\n"
            "if __name__ == '__main__':\n"
            "    run_sweep(plan(fake_worker.configs(6), sys.argv[2], executor='process', workers=2, max_pack=3,"
            " pack_key=fake_worker.pack_key), sys.argv[2], worker=fake_worker.run_pack, progress=False)\n")
    env = {**os.environ, "FAKE_WORKER_LOG": str(logdir), "FAKE_WORKER_SLEEP": "30"}
    proc = subprocess.Popen([sys.executable, "-c", code, str(TESTS), str(store_root)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    kids: set[int] = set()
    try:
        deadline = time.monotonic() + 60
        while True:  # both workers have started a run
            started = {pid for f in logdir.iterdir() for e, pid in events(logdir, f.name) if e == "start"} \
                if logdir.exists() else set()
            if len(started) == 2:
                break
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        kids = _children(proc.pid)
        assert started <= kids
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 5  # the kernel's death signal is immediate; the watchdog polls
        while any(_alive(p) for p in kids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [p for p in kids if _alive(p)], "orphaned workers still running"
    finally:  # never leave a process behind, whatever failed
        if proc.poll() is None:
            kids = _children(proc.pid)
            proc.kill()
            proc.wait()
        for p in kids:
            if _alive(p):
                os.kill(p, signal.SIGKILL)
    # the killed runs are not lost: their leases name dead processes, so a rerun takes them at once
    store = Store(store_root)
    counts = _sweep(fake_worker.configs(6), store, max_pack=3)
    assert counts["ran"] == 6 and counts["skipped_claimed"] == 0


def test_worker_watchdog_exits_when_the_parent_is_gone():
    """The fallback where prctl is missing: a worker whose parent is already gone exits at once,
    and the watchdog thread exits it when the parent dies later (run in a child process)."""
    code = ("import os, sys, time\n"
            "from depthscale.runs import executors\n"
            "executors.sys.platform = 'other'  # no prctl: the watchdog alone\n"
            "executors.ORPHAN_POLL = 0.05\n"
            "if sys.argv[1] == 'gone':\n"
            "    executors._die_with_parent(os.getppid() + 1)\n"
            "else:\n"
            "    pid = os.fork()\n"
            "    if pid == 0:\n"
            "        executors._die_with_parent(os.getppid())\n"
            "        print(os.getpid(), flush=True)\n"
            "        time.sleep(30)\n"
            "        os._exit(0)\n"
            "    time.sleep(0.5)\n"
            "    os._exit(0)  # the parent dies; its child must follow\n"
            "print('still here')\n")
    gone = subprocess.run([sys.executable, "-c", code, "gone"], capture_output=True, text=True, timeout=60)
    assert gone.returncode == 1 and "still here" not in gone.stdout
    later = subprocess.run([sys.executable, "-c", code, "later"], capture_output=True, text=True, timeout=60)
    child = int(later.stdout.split()[0])
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)


def test_a_sweep_is_planned_once_and_that_plan_is_run(tmp_path, monkeypatch, capsys):
    """`depthscale sweep` computes the memory budget, the packs and their memory check once
    (sweeps.plan), and run_sweep runs that very Plan: nothing is planned again; --dry-run prints
    the plan it would run."""
    from collections import Counter

    from depthscale.cli import main as cli
    from depthscale.runs import sweeps

    calls: Counter = Counter()
    for name in ("pack_memory_budget", "make_packs", "check_memory"):
        monkeypatch.setattr(sweeps, name, lambda *a, _fn=getattr(sweeps, name), _n=name, **k:
                            calls.update([_n]) or _fn(*a, **k))
    plans, runs = [], []
    real_plan, real_run = sweeps.plan, sweeps.run_sweep
    monkeypatch.setattr(sweeps, "plan", lambda *a, **k: plans.append(real_plan(*a, **k)) or plans[-1])
    monkeypatch.setattr(sweeps, "run_sweep", lambda p, *a, **k: runs.append(p) or real_run(p, *a, **k))
    grid = tmp_path / "g.json"
    grid.write_text(json.dumps({"model": "linear", "depths": [1, 2], "max_steps": 4, "eval_every": 2,
                                "checkpoint_every": 2, "monitor_contexts": 64, "eval_contexts": 64}))
    argv = ["sweep", "--grid", str(grid), "--preset", "smoke", "--store", str(tmp_path / "s"), "--json"]
    assert cli.main(argv + ["--dry-run"]) == 0
    dry = json.loads(capsys.readouterr().out)
    assert calls == {"pack_memory_budget": 1, "make_packs": 1, "check_memory": 1} and runs == []
    assert dry["planned"] == plans[0].planned == 2 and [r["run_id"] for r in dry["runs"]] == \
        [c.run_id for p in plans[0].packs for c in p]
    calls.clear()
    assert cli.main(argv) == 0
    assert calls == {"pack_memory_budget": 1, "make_packs": 1, "check_memory": 1}
    assert len(plans) == 2 and runs == [plans[1]] and json.loads(capsys.readouterr().out)["ran"] == 2


def test_run_sweep_runs_the_plan_it_is_given(tmp_path, monkeypatch, logdir):
    """The library's run_sweep plans nothing: the Plan's packs run as they are, its memory refusal
    stands unless allow_memory, and anything but a Plan is refused."""
    from depthscale.train import memory
    from depthscale.runs import sweeps

    store = Store(tmp_path / "s")
    cfgs = fake_worker.configs(5)
    p = plan(cfgs, store, max_pack=2, pack_key=fake_worker.pack_key)
    assert p.planned == 5 and p.refusal is None
    names = ("pack_memory_budget", "make_packs", "check_memory")
    real = {name: getattr(sweeps, name) for name in names}
    for name in names:
        monkeypatch.setattr(sweeps, name, lambda *a, **k: pytest.fail("planned again"))
    res = run_sweep(p, store, worker=fake_worker.run_pack, progress=False)
    assert res["ran"] == 5 and res["packs"] == len(p.packs)
    for name in names:  # planning again, with no memory at all: the plan's verdict is a refusal
        monkeypatch.setattr(sweeps, name, real[name])
    monkeypatch.setattr(memory, "available_bytes", lambda device="cpu": 1)
    big = plan(fake_worker.configs(7), store, pack_key=fake_worker.pack_key)
    assert isinstance(big.refusal, memory.MemoryRefused) and "allow_memory=True" in str(big.refusal)
    with pytest.raises(memory.MemoryRefused):
        run_sweep(big, store, worker=fake_worker.run_pack, progress=False)
    assert run_sweep(big, store, worker=fake_worker.run_pack, progress=False, allow_memory=True)["ran"] == 2
    with pytest.raises(TypeError, match="sweeps.Plan"):
        run_sweep(cfgs, store)
