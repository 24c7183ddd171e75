"""Issue 28, "failures that say so": a sweep with failed runs exits 3 and says how many and where;
a worker process that dies leaves its runs *failed* with the reason, not pending; a killed resource
tracker is one warning line; --executor slurm without SLURM refuses in one line; a full (read-only,
unwritable, over-quota) disk is one line and exit 2 in train, sweep (before and mid-sweep) and
report, with no empty store left behind. The failing workers are tests/failure_workers.py; a full
disk is simulated by making depthscale.base.atomic's write (every file depthscale writes) raise."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

import depthscale.base.atomic
import depthscale.train.training
from depthscale.base.errors import StorageError, SubmissionError
from depthscale.cli import main as cli
from depthscale.config.run import make_config
from depthscale.store.store import Store

import failure_workers

TESTS = Path(__file__).resolve().parent
TINY = {"max_steps": 20, "eval_contexts": 64, "monitor_contexts": 64, "batch": 16, "eval_every": 10}
# four runs in three packs (nonlinear L=1,2 share one; linear L=1 and L=2 one each)
GRID = dict(TINY, model=["nonlinear", "linear"], L=[1, 2])
FAILED_LINE = "depthscale: {n} of {of} runs failed; each one's error is in its run directory's FAILED file"


def run_cli(capsys, *argv) -> tuple[int, str, list[str]]:
    """cli.main here: (exit code, stdout, the stderr lines but the progress ones)."""
    capsys.readouterr()
    code = cli.main([str(a) for a in argv])
    out = capsys.readouterr()
    keep = [ln for ln in out.err.splitlines()
            if not ln.startswith(("depthscale: preset", "depthscale: run ")) and " pack of " not in ln]
    return code, out.out, keep


@pytest.fixture
def grid(tmp_path) -> Path:
    path = tmp_path / "grid.json"
    path.write_text(json.dumps(GRID))
    return path


def status(capsys, root) -> dict:
    code, out, err = run_cli(capsys, "status", "--store", root, "--json")
    assert code == 0, err
    return json.loads(out)[0]


# --- failed runs: exit 3, the count, where ----------------------------------------------------

@pytest.mark.parametrize("executor", ["inline", "process"])
def test_sweep_with_failed_runs_exits_3_and_says_how_many_and_where(tmp_path, grid, capsys, monkeypatch, executor):
    monkeypatch.setattr(depthscale.train.training, "run_pack", failure_workers.raising_pack)
    store = tmp_path / "store"
    code, out, err = run_cli(capsys, "sweep", "--grid", grid, "--preset", "smoke", "--store", store,
                             "--executor", executor, "--workers", 2)
    assert code == 3, err
    assert "failed=4" in out
    (line,) = [ln for ln in err if ln.startswith("depthscale: 4 of")]
    assert line.startswith(FAILED_LINE.format(n=4, of=4)) and f"depthscale status --store {store}" in line
    rec = status(capsys, store)
    assert rec["failed"] == 4 and rec["pending"] == 0
    assert len(rec["failed_runs"]) == 4
    assert all(r["reason"].startswith("RuntimeError: scripted failure") for r in rec["failed_runs"]), rec
    code, text, _ = run_cli(capsys, "status", "--store", store)
    assert code == 0 and text.count("\nfailed ") == 4 and "RuntimeError: scripted failure" in text
    # the next sweep retries them: with a worker that trains, all finish and it exits 0
    monkeypatch.setattr(depthscale.train.training, "run_pack", failure_workers.fake_worker.run_pack)
    code, out, err = run_cli(capsys, "sweep", "--grid", grid, "--preset", "smoke", "--store", store)
    assert code == 0 and "ran=4" in out and "failed=0" in out, err


@pytest.mark.slow
def test_reproduce_with_failed_runs_exits_3(tmp_path, capsys, monkeypatch):
    """reproduce's sweep failed every run: the report is still written (it lists what it lacks),
    and the exit code and the line say the runs failed."""
    monkeypatch.setattr(depthscale.train.training, "run_pack", failure_workers.raising_pack)
    store = tmp_path / "store"
    code, out, err = run_cli(capsys, "reproduce", "fig3", "--preset", "smoke", "--store", store,
                             "--out", tmp_path / "out")
    assert code == 3, err
    assert (tmp_path / "out" / "report.md").is_file()
    (line,) = [ln for ln in err if ln.startswith("depthscale: 21 of 21 runs failed")]
    assert f"depthscale status --store {store}" in line
    assert status(capsys, store)["failed"] == 21


def test_a_pack_that_kills_its_worker_twice_leaves_its_runs_failed_with_the_reason(tmp_path, grid, capsys, monkeypatch,
                                                                                      caplog):
    """The linear L=1 run's pack kills its own worker process (SIGKILL) every time: the pool gives it
    to a new worker once, it kills that one too, and its run is failed with "worker process died
    (signal 9) twice"; every other pack finishes (a death stops nothing else); none is left pending
    or running, and the sweep exits 3 with the count."""
    monkeypatch.setattr(depthscale.train.training, "run_pack", failure_workers.kill_self_pack)
    store = tmp_path / "store"
    code, out, err = run_cli(capsys, "sweep", "--grid", grid, "--preset", "smoke", "--store", store,
                             "--executor", "process", "--workers", 2)
    assert code == 3, err
    rec = status(capsys, store)
    assert rec["pending"] == 0 and rec["running"] == 0 and rec["done"] == 3 and rec["failed"] == 1, rec
    assert [ln for ln in err if ln.startswith("depthscale: 1 of 4 runs failed")]
    killer = make_config("smoke", **dict(TINY, model="linear", L=1)).run_id  # the only pack that kills
    reasons = {r["run_id"]: r["reason"] for r in rec["failed_runs"]}
    assert list(reasons) == [killer] and reasons[killer].startswith("worker process died (signal 9) twice"), reasons
    assert (store / "runs" / killer / "FAILED").read_text().startswith("worker process died (signal 9) twice")
    assert [r for r in caplog.records if "killed its worker twice (signal 9)" in r.getMessage()
            and killer in r.getMessage()], caplog.text


def test_a_worker_killed_mid_sweep_is_replaced_and_the_sweep_ends_with_every_run_done(tmp_path, grid, capsys,
                                                                                  monkeypatch, caplog):
    """Issue 51: a worker SIGKILLed once mid-sweep is an event, not an end: a new worker takes its
    place, the pack it held runs again there, and the same sweep ends with every run done, exit 0."""
    monkeypatch.setattr(depthscale.train.training, "run_pack", failure_workers.kill_once_pack)
    store = tmp_path / "store"
    code, out, err = run_cli(capsys, "sweep", "--grid", grid, "--preset", "smoke", "--store", store,
                             "--executor", "process", "--workers", 2)
    assert (store / "killed-once").read_text().isdigit()  # the worker was killed
    assert code == 0, err
    assert "ran=4" in out and "failed=0" in out, out
    rec = status(capsys, store)
    assert rec["done"] == 4 and rec["failed"] == 0 and rec["pending"] == 0, rec
    assert [r for r in caplog.records if "died (signal 9)" in r.getMessage() and "new worker" in r.getMessage()], \
        caplog.text


def test_killed_resource_tracker_is_one_warning_not_tracebacks(tmp_path, grid):
    """The first run SIGKILLs multiprocessing's resource tracker mid-sweep. Left alone, the pool's
    semaphores would be unregistered with a tracker started afresh and each print a KeyError
    traceback; now: one warning line, the sweep finishes, exit 0 (no run failed)."""
    store = tmp_path / "store"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, str(TESTS / "failure_workers.py"), "kill_tracker", "sweep", "--grid",
                           str(grid), "--preset", "smoke", "--store", str(store), "--executor", "process",
                           "--workers", "2"], capture_output=True, text=True, env=env, timeout=300)
    assert (store / "tracker-killed").read_text().isdigit()  # the tracker was found and killed
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "KeyError" not in proc.stderr, proc.stderr
    warned = [ln for ln in proc.stderr.splitlines() if "resource tracker" in ln]
    assert len(warned) == 1 and warned[0].startswith("depthscale: warning: "), proc.stderr
    assert "ran=4" in proc.stdout and "failed=0" in proc.stdout


# --- --executor slurm without SLURM ------------------------------------------------------------

@pytest.fixture
def fake_submitit(monkeypatch) -> types.ModuleType:
    """submitit "installed": a stand-in whose AutoExecutor records the cluster it was asked for
    and whose submission fails (as sbatch does without a controller)."""
    mod = types.ModuleType("submitit")
    mod.asked = []

    class AutoExecutor:
        def __init__(self, folder, cluster=None):
            mod.asked.append(cluster)

        def update_parameters(self, **kw):
            pass

        def map_array(self, fn, *args):
            raise RuntimeError("sbatch: error: Batch job submission failed: fake controller down")

    mod.AutoExecutor = AutoExecutor
    monkeypatch.setitem(sys.modules, "submitit", mod)
    return mod


def test_slurm_without_a_cluster_refuses_in_one_line_before_writing(tmp_path, grid, capsys, monkeypatch,
                                                                    fake_submitit):
    monkeypatch.setenv("PATH", str(tmp_path / "bin-without-slurm"))
    store = tmp_path / "store"
    code, out, err = run_cli(capsys, "sweep", "--grid", grid, "--preset", "smoke", "--store", store,
                             "--executor", "slurm")
    assert code == 2 and out == ""
    assert err == ["depthscale: error: --executor slurm: no SLURM cluster here (sbatch and srun not found on "
                   "PATH); submit from a login node of the cluster, or use --executor process"], err
    assert not store.exists() and fake_submitit.asked == []
    # the library refuses too, before the store is written
    from depthscale.runs.sweeps import plan

    lib = Store(tmp_path / "lib")
    with pytest.raises(SubmissionError, match="no SLURM cluster here"):
        plan([make_config("smoke", **TINY)], lib, executor="slurm")
    assert list(lib.runs_root.iterdir()) == [] and list(lib.sweeps_root.iterdir()) == []


def _fake_slurm_commands(tmp_path, monkeypatch) -> None:
    """sbatch and srun on PATH (and nothing else): what check_slurm_cluster looks for."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sbatch", "srun"):
        (bin_dir / tool).write_text("#!/bin/sh\nexit 1\n")
        (bin_dir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))


def test_slurm_with_sbatch_and_srun_submits_to_slurm_never_locally(tmp_path, grid, capsys, monkeypatch,
                                                                   fake_submitit):
    _fake_slurm_commands(tmp_path, monkeypatch)
    code, out, err = run_cli(capsys, "sweep", "--grid", grid, "--preset", "smoke", "--store", tmp_path / "store",
                             "--executor", "slurm")
    assert code == 2 and err == ["depthscale: error: SLURM submission failed: RuntimeError: sbatch: error: "
                                 "Batch job submission failed: fake controller down"], err
    assert fake_submitit.asked == ["slurm"]  # not None: submitit's own choice would fall back to local


def test_a_slurm_job_that_dies_leaves_its_runs_failed_with_the_reason(tmp_path, monkeypatch, fake_submitit):
    from depthscale.runs.sweeps import plan, run_sweep

    class DeadJob:
        job_id = "4242_0"

        def result(self):
            raise RuntimeError("Job 4242_0 (task: 0) with path /x\nhas not produced any output (state: TIMEOUT)")

    fake_submitit.AutoExecutor.map_array = lambda self, fn, packs, *args: [DeadJob() for _ in packs]
    _fake_slurm_commands(tmp_path, monkeypatch)
    store = Store(tmp_path / "store")
    cfgs = [make_config("smoke", **dict(TINY, L=L)) for L in (1, 2)]
    counts = run_sweep(plan(cfgs, store, executor="slurm", slurm={"wait": True}), store, name="x", progress=False)
    assert counts["failed"] == 2
    for c in cfgs:  # submitted twice (a dead task is requeued once), dead twice
        assert store.run_state(c.run_id) == "failed"
        assert store.failure(c.run_id) == ("SLURM job 4242_0 failed: Job 4242_0 (task: 0) with path /x has not produced any "
                                            "output (state: TIMEOUT) (its first task had died too; submitted once more)")


def test_a_slurm_task_killed_once_is_requeued_and_its_runs_finish(tmp_path, monkeypatch, fake_submitit):
    """Issue 51: on the SLURM path a killed task is requeued (once): the sweep ends with every run done."""
    from depthscale.runs.sweeps import plan, run_sweep

    class DeadJob:
        job_id = "7_0"

        def result(self):
            raise RuntimeError("Job 7_0 killed (state: OUT_OF_MEMORY)")

    class LocalJob:
        def __init__(self, fn, args):
            self.job_id, self.fn, self.args = "8_0", fn, args

        def result(self):
            return self.fn(*self.args)

    calls = []

    def map_array(self, fn, packs, *rest):
        calls.append(len(packs))
        if len(calls) == 1:
            return [DeadJob() for _ in packs]
        return [LocalJob(fn, (p, *(r[i] for r in rest))) for i, p in enumerate(packs)]

    fake_submitit.AutoExecutor.map_array = map_array
    monkeypatch.setattr(depthscale.train.training, "run_pack", failure_workers.fake_worker.run_pack)
    _fake_slurm_commands(tmp_path, monkeypatch)
    store = Store(tmp_path / "store")
    cfgs = [make_config("smoke", **dict(TINY, L=L)) for L in (1, 2)]
    counts = run_sweep(plan(cfgs, store, executor="slurm", slurm={"wait": True}), store, name="x", progress=False)
    assert counts["failed"] == 0 and counts["ran"] == 2 and calls == [len(calls) and calls[0], calls[0]]
    assert all(store.is_done(c.run_id) for c in cfgs) and counts["job_ids"][-1] == "8_0"


# --- a full (read-only, unwritable, over-quota) disk --------------------------------------------

REFUSALS = [errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EDQUOT]


class FullDisk:
    """depthscale.base.atomic's write: the first `ok` writes succeed, every later one raises OSError(code)
    (as a full disk's write or fsync does); `written` lists the paths of the successful ones."""

    def __init__(self, monkeypatch, code: int = errno.ENOSPC, ok: int = 0):
        self.code, self.ok, self.written = code, ok, []
        self._orig = depthscale.base.atomic._replace_with
        monkeypatch.setattr(depthscale.base.atomic, "_replace_with", self)

    def __call__(self, path, write):
        if len(self.written) >= self.ok:
            raise OSError(self.code, os.strerror(self.code))
        self._orig(path, write)
        self.written.append(Path(path))


def _one_line(err: list[str], code: int, path: Path | None = None) -> str:
    assert len(err) == 1, err
    line = err[0]
    assert line.startswith("depthscale: error: cannot write: ") and "Traceback" not in line
    assert f"{os.strerror(code).lower()} (" in line, line
    if path is not None:
        assert f"({path}" in line, line
    return line


@pytest.mark.parametrize("code", REFUSALS, ids=errno.errorcode.get)
def test_train_on_a_full_disk_is_one_line_and_leaves_no_store(tmp_path, capsys, monkeypatch, code):
    FullDisk(monkeypatch, code)
    store = tmp_path / "new" / "store"
    rc, out, err = run_cli(capsys, "train", "--preset", "smoke", "--store", store, "--max_steps", 20)
    assert rc == 2 and out == ""
    _one_line(err, code, store)
    assert list(tmp_path.iterdir()) == []  # no empty runs/ or sweeps/ (nor the parent it made)


@pytest.mark.parametrize("ok", [2, 3])
def test_train_meeting_a_full_disk_names_the_write_not_the_failure_record(tmp_path, capsys, monkeypatch, ok):
    """Training records an exception in FAILED, which a full disk refuses too: the line names the
    write that met the full disk first (the run's curves or checkpoint), and no FAILED is left."""
    full = FullDisk(monkeypatch, ok=ok)
    store = tmp_path / "store"
    rc, _, err = run_cli(capsys, "train", "--preset", "smoke", "--store", store, "--max_steps", 20,
                         "--checkpoint_every", 10)
    assert rc == 2
    line = _one_line(err, errno.ENOSPC, store / "runs")
    assert "FAILED" not in line and [p.name for p in full.written][:2] == ["train.json", "config.json"]
    assert list(store.rglob("FAILED")) == [] and list(store.rglob("*.tmp")) == []


@pytest.mark.parametrize("code", REFUSALS, ids=errno.errorcode.get)
def test_sweep_on_a_full_disk_is_one_line_and_leaves_no_store(tmp_path, grid, capsys, monkeypatch, code):
    FullDisk(monkeypatch, code)
    store = tmp_path / "store"
    rc, out, err = run_cli(capsys, "sweep", "--grid", grid, "--preset", "smoke", "--store", store)
    assert rc == 2 and out == ""
    _one_line(err, code, store / "sweeps")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["grid.json"]


def test_sweep_into_an_existing_store_on_a_full_disk_keeps_it(tmp_path, grid, capsys, monkeypatch):
    store = Store(tmp_path / "store")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    FullDisk(monkeypatch)
    rc, _, err = run_cli(capsys, "sweep", "--grid", grid, "--preset", "smoke", "--store", store.root)
    assert rc == 2
    _one_line(err, errno.ENOSPC)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # its dirs are not removed


def _finished(root: Path) -> set[str]:
    return {p.parent.name for p in (root / "runs").glob("*/DONE")}


def test_disk_full_mid_sweep_inline_keeps_finished_runs_and_resumes(tmp_path, grid, capsys, monkeypatch):
    """The disk fills up two writes after the first run finished: one line, exit 2, the finished
    run kept whole, the interrupted one unfinished (no DONE, no temp file), and a sweep after the
    disk is grown finishes every run."""
    with monkeypatch.context() as m:  # where the first DONE is written, on a disk with room
        probe = FullDisk(m, ok=10**6)
        assert run_cli(capsys, "sweep", "--grid", grid, "--preset", "smoke", "--store", tmp_path / "probe")[0] == 0
        first_done = next(i for i, p in enumerate(probe.written) if p.name == "DONE")
    store = tmp_path / "store"
    with monkeypatch.context() as m:
        FullDisk(m, ok=first_done + 3)
        rc, out, err = run_cli(capsys, "sweep", "--grid", grid, "--preset", "smoke", "--store", store)
    assert rc == 2 and out == ""
    _one_line(err, errno.ENOSPC, store / "runs")
    done = _finished(store)
    assert len(done) == 1
    st = Store(store, readonly=True)
    for rid in done:
        assert st.run_state(rid) == "done" and st.load_metrics(rid)["steps"] == 20
    assert list(store.rglob("*.tmp")) == [] and list(store.rglob("FAILED")) == []
    states = {p.name: st.run_state(p.name) for p in (store / "runs").iterdir()}
    assert sorted(states.values()) == ["done"] + ["pending"] * (len(states) - 1), states
    rc, out, err = run_cli(capsys, "sweep", "--grid", grid, "--preset", "smoke", "--store", store)
    assert rc == 0 and "ran=3" in out and "failed=0" in out, err
    assert len(_finished(store)) == 4


def test_disk_full_in_a_process_worker_stops_the_sweep_in_one_line(tmp_path, grid, capsys, monkeypatch):
    monkeypatch.setattr(depthscale.train.training, "run_pack", failure_workers.full_disk_pack)
    store = tmp_path / "store"
    rc, out, err = run_cli(capsys, "sweep", "--grid", grid, "--preset", "smoke", "--store", store,
                           "--executor", "process", "--workers", 2)
    assert rc == 2 and out == ""
    _one_line(err, errno.ENOSPC, store / "runs")
    assert list(store.rglob("FAILED")) == []  # not recorded as the runs' failure: the disk's


@pytest.fixture(scope="module")
def finished_store(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("finished")
    grid = root / "grid.json"
    grid.write_text(json.dumps(dict(TINY, model="nonlinear", L=[1, 2])))
    assert cli.main(["sweep", "--grid", str(grid), "--preset", "smoke", "--store", str(root / "store")]) == 0
    return root / "store"


@pytest.mark.parametrize("ok", [0, 2])
def test_report_to_a_full_disk_is_one_line(finished_store, tmp_path, capsys, monkeypatch, ok):
    FullDisk(monkeypatch, ok=ok)
    out_dir = tmp_path / "report"
    rc, out, err = run_cli(capsys, "report", "--store", finished_store, "--out", out_dir)
    assert rc == 2 and out == ""
    _one_line(err, errno.ENOSPC, out_dir)
    assert list(out_dir.rglob("*.tmp")) == []


@pytest.mark.parametrize("ok", [0, 2])
def test_report_to_a_full_disk_leaves_no_directory_it_made(finished_store, tmp_path, capsys, monkeypatch, ok):
    """Nothing partial is left (issue 37, item 10): the directories the report created go, with
    whatever it wrote there before the disk filled up."""
    FullDisk(monkeypatch, ok=ok)
    rc, _, err = run_cli(capsys, "report", "--store", finished_store, "--out", tmp_path / "new" / "report")
    assert rc == 2
    _one_line(err, errno.ENOSPC, tmp_path / "new" / "report")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("suffix", [".png", ".pdf"])
def test_plot_to_a_full_disk_leaves_no_file(finished_store, tmp_path, capsys, monkeypatch, suffix):
    """A figure is written whole or not at all (issue 37, item 10): no 0-byte PNG or PDF."""
    FullDisk(monkeypatch)
    out = tmp_path / f"curves{suffix}"
    rc, _, err = run_cli(capsys, "plot", "curves", "--store", finished_store, "--out", out)
    assert rc == 2
    _one_line(err, errno.ENOSPC, out)
    assert list(tmp_path.iterdir()) == []


def test_report_figures_and_tables_are_written_through_write_atomic(finished_store, tmp_path, capsys, monkeypatch):
    """Every file of a report goes through atomic.write_atomic (so a full disk cannot leave a part)."""
    full = FullDisk(monkeypatch, ok=10**6)
    out_dir = tmp_path / "report"
    assert run_cli(capsys, "report", "--store", finished_store, "--out", out_dir)[0] == 0
    files = {p for p in out_dir.rglob("*") if p.is_file()}
    assert files and files <= set(full.written), sorted(str(p) for p in files - set(full.written))


def test_storage_error_is_the_oserror_it_was():
    err = StorageError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/x/y")
    assert isinstance(err, OSError) and err.errno == errno.ENOSPC and err.filename == "/x/y"
    assert str(err) == "cannot write: no space left on device (/x/y)"


def test_a_raw_refused_write_prints_the_same_line_as_a_storage_error(tmp_path, capsys, monkeypatch):
    """An OSError the filesystem raised where no StorageError wraps it (a mkdir deep in a command)
    is printed by cli.main in the same words as a StorageError: one line, exit 2."""
    def refuse(self, *args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(tmp_path / "s" / "runs"))

    monkeypatch.setattr(Store, "__init__", refuse)
    code, out, err = run_cli(capsys, "status", "--store", tmp_path / "s")
    assert code == 2 and out == ""
    assert _one_line(err, errno.EROFS, tmp_path / "s" / "runs") == \
        f"depthscale: error: cannot write: read-only file system ({tmp_path / 's' / 'runs'})"
    monkeypatch.setenv("DEPTHSCALE_DEBUG", "1")  # the traceback, for whoever debugs
    with pytest.raises(OSError):
        cli.main(["status", "--store", str(tmp_path / "s")])
