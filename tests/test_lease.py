"""Leases (lease.py): the protocol on a bare file, and through the store (claim, heartbeat, release,
stale holders on this host and on others, one winner when many contend)."""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import threading
import time

import pytest

from depthscale.base.atomic import write_json_atomic
from depthscale.config.run import make_config, run_id
from depthscale.store import lease
from depthscale.store.store import Store


@pytest.fixture
def store(tmp_path) -> Store:
    return Store(tmp_path / "store")


# --- the protocol on a bare file ---

def test_take_refresh_drop_on_a_bare_path(tmp_path):
    path = tmp_path / "lease"
    token = lease.take(path, "me", timeout=5.0)
    assert token and lease.holder(path, 5.0)["owner"] == "me"
    assert lease.take(path, "other", timeout=5.0) is None  # our pid is alive: not stale
    assert lease.refresh(path, token) and not lease.refresh(path, "another-token")
    assert lease.still_held(path, token) and not lease.still_held(path, "another-token")
    lease.drop(path, "another-token")  # not ours: left alone
    assert path.exists()
    lease.drop(path, token)
    assert not path.exists() and lease.holder(path, 5.0) is None
    assert lease.still_held(path, token)  # gone: nobody else holds it either
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_create_exclusive_has_one_winner(tmp_path):
    path = tmp_path / "x"
    assert lease.create_exclusive(path, b"first")
    assert not lease.create_exclusive(path, b"second")
    assert path.read_bytes() == b"first" and sorted(p.name for p in tmp_path.iterdir()) == ["x"]


def test_process_identity():
    me = lease.identity()
    assert me["host"] == socket.gethostname() and me["pid"] == os.getpid()
    assert lease.pid_alive(os.getpid(), me["start"])
    assert not lease.pid_alive(0, None)
    if me["start"] is not None:  # /proc tells start times: a reused pid is told apart
        assert not lease.pid_alive(os.getpid(), me["start"] + 1)
    assert lease.same_machine({"host": me["host"], "boot": me["boot"]})
    assert not lease.same_machine({"host": "some-other-node"})


def test_staleness_rules():
    now, me = time.time(), lease.identity()
    assert lease.is_stale(None, now, 600.0)  # unreadable: names no holder
    assert not lease.is_stale({**me, "time": now}, now, 600.0)  # a live pid here
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    assert lease.is_stale({**me, "pid": int(dead.stdout), "start": None}, now, 600.0)  # a dead pid here
    far = {"host": "some-other-node", "pid": 1, "time": now - 60}
    assert lease.is_stale(far, now - 60, 5.0) and not lease.is_stale(far, now - 60, 600.0)
    assert not lease.is_stale({**far, "time": now}, now - 60, 5.0)  # the heartbeat in the file counts


def test_a_live_lease_is_never_broken(tmp_path):
    path = tmp_path / "lease"
    token = lease.take(path, "me", timeout=5.0)
    seen, _ = lease.read_lease(path)
    assert not lease.break_stale(path, seen, 5.0)
    assert lease.still_held(path, token) and not (tmp_path / "lease.break").exists()
    lease.drop(path, token)


# --- leases through the store ---

def test_claim_release_and_live_lease_in_same_host(store, tmp_path):
    rid = run_id(make_config("smoke"))
    other = Store(store.root)  # another holder; this process's pid is alive
    assert store.leases.claim(rid, "first")
    assert store.run_state(rid) == "running"
    lease = store.leases.holder(rid)
    assert lease["host"] == socket.gethostname() and lease["pid"] == os.getpid() and lease["owner"] == "first"
    assert not other.leases.claim(rid, "second")
    other.leases.release(rid)  # not its lease: left alone
    assert store.leases.holder(rid) is not None
    assert store.leases.heartbeat(rid) and not other.leases.heartbeat(rid)
    store.leases.release(rid)
    assert store.leases.holder(rid) is None and store.run_state(rid) == "pending"
    assert other.leases.claim(rid, "second")
    other.leases.release(rid)


def test_stale_lease_of_dead_process_is_taken_over(store):
    rid = run_id(make_config("smoke"))
    code = ("import sys; from depthscale.store.store import Store; "
            "assert Store(sys.argv[1]).leases.claim(sys.argv[2], 'doomed')")  # exits without release
    subprocess.run([sys.executable, "-c", code, str(store.root), rid], check=True)
    lease = json.loads((store.run_dir(rid) / "lease").read_text())
    assert lease["owner"] == "doomed" and lease["pid"] != os.getpid()
    assert store.run_state(rid) == "pending"  # a dead holder's lease does not count as running
    assert store.leases.claim(rid, "heir")
    assert store.leases.holder(rid)["owner"] == "heir"
    assert not list(store.run_dir(rid).glob("lease.stale.*"))
    store.leases.release(rid)


def test_claim_removes_temp_files_a_killed_writer_left(store):
    rid = run_id(make_config("smoke"))
    d = store.run_dir(rid)
    (d / ".metrics.json.abc123.tmp").write_text('{"R_L": 1')
    (d / ".lease.fresh.tmp").write_text("{}")  # a contender's, mid-claim: left alone
    assert store.leases.claim(rid, "me")
    assert sorted(p.name for p in d.iterdir()) == [".lease.fresh.tmp", "lease"]
    store.leases.release(rid)


def test_same_hostname_after_a_reboot_is_another_machine(tmp_path):
    store = Store(tmp_path / "s", lease_timeout=5.0)
    rid = run_id(make_config("smoke"))
    lease = {"owner": "before-reboot", "host": socket.gethostname(), "boot": "another-boot",
             "pid": os.getpid(), "start": None, "time": time.time(), "token": "t"}
    write_json_atomic(store.run_dir(rid) / "lease", lease)
    assert not store.leases.claim(rid, "me")  # judged by its heartbeat, which is fresh
    lease["time"] -= 60
    write_json_atomic(store.run_dir(rid) / "lease", lease)
    os.utime(store.run_dir(rid) / "lease", (time.time() - 60, time.time() - 60))
    assert store.leases.claim(rid, "me")
    store.leases.release(rid)


def test_reused_pid_does_not_keep_a_lease(store):
    rid = run_id(make_config("smoke"))
    lease = {"owner": "ghost", "host": socket.gethostname(), "pid": os.getpid(), "start": -1,
             "time": time.time(), "token": "t"}
    write_json_atomic(store.run_dir(rid) / "lease", lease)  # our pid, but another start time
    assert store.leases.claim(rid, "me")
    store.leases.release(rid)


def foreign_lease(store, rid, age):
    path = store.run_dir(rid) / "lease"
    write_json_atomic(path, {"owner": "far", "host": "some-other-node", "pid": 1,
                             "start": None, "time": time.time() - age, "token": "far-token"})
    os.utime(path, (time.time() - age, time.time() - age))


def test_lease_on_another_host_expires_after_timeout(tmp_path):
    store = Store(tmp_path / "s", lease_timeout=5.0)
    rid = run_id(make_config("smoke"))
    foreign_lease(store, rid, age=1.0)
    assert not store.leases.claim(rid, "me") and store.run_state(rid) == "running"
    foreign_lease(store, rid, age=60.0)
    assert store.run_state(rid) == "pending"
    assert store.leases.claim(rid, "me")
    store.leases.release(rid)


def test_breaking_a_stale_lease_has_one_winner(tmp_path, monkeypatch):
    root = tmp_path / "s"
    rid = run_id(make_config("smoke"))
    read_lease, rng = lease.read_lease, random.Random(0)

    def slow_read_lease(path):  # a slow shared filesystem: widen every race window
        out = read_lease(path)
        time.sleep(rng.uniform(0, 0.003))
        return out

    monkeypatch.setattr(lease, "read_lease", slow_read_lease)
    for _ in range(10):
        foreign_lease(Store(root, lease_timeout=5.0), rid, age=60.0)
        stores = [Store(root, lease_timeout=5.0) for _ in range(8)]
        barrier, wins = threading.Barrier(len(stores)), []

        def contend(s):
            barrier.wait()
            if s.leases.claim(rid, "contender"):
                wins.append(s)

        threads = [threading.Thread(target=contend, args=(s,)) for s in stores]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(wins) == 1
        assert wins[0].leases.heartbeat(rid)
        assert not any(s.leases.heartbeat(rid) for s in stores if s is not wins[0])
        wins[0].leases.release(rid)
        assert sorted(p.name for p in (root / "runs" / rid).iterdir()) == []


def test_heartbeat_keeps_lease_fresh_and_lost_lease_discards_result(tmp_path):
    store = Store(tmp_path / "s", lease_timeout=5.0)
    cfg = make_config("smoke")
    rid = run_id(cfg)
    assert store.leases.claim(rid, "slow")
    path = store.run_dir(rid) / "lease"
    os.utime(path, (time.time() - 60, time.time() - 60))
    assert store.leases.heartbeat(rid)
    assert time.time() - path.stat().st_mtime < 5
    # another host breaks the lease (here: we fake one that saw it stale) and takes the run
    path.unlink()
    foreign_lease(store, rid, age=0.0)
    assert not store.leases.heartbeat(rid)
    with pytest.warns(UserWarning, match="lost the lease"):
        assert not store.finish(rid, {"R_L": 1.0}, {})
    assert not store.is_done(rid)
    store.leases.release(rid)  # leaves the other holder's lease alone
    assert store.leases.holder(rid)["owner"] == "far"


def test_done_run_is_never_claimed(store):
    cfg = make_config("smoke")
    rid = run_id(cfg)
    store.write_config(cfg)
    store.finish(rid, {"R": 1.0, "stopped_because": "converged"}, {})
    assert not store.leases.claim(rid, "late")
    assert not (store.run_dir(rid) / "lease").exists()


@pytest.mark.parametrize("content", [b"", b"\x00garbage", b"[1, 2]", b'{"host": 3'])
def test_unreadable_lease_is_stale_at_once(store, content):
    cfg = make_config("smoke")
    rid = run_id(cfg)
    path = store.run_dir(rid) / "lease"
    path.write_bytes(content)
    if not content:  # an empty lease may be a lease being written (O_EXCL fallback): a short grace
        assert store.run_state(rid) == "running"
        os.utime(path, (time.time() - 2, time.time() - 2))
    assert store.leases.holder(rid) is None and store.run_state(rid) == "pending"
    assert store.leases.claim(rid, "me") and store.leases.held() == [rid]
    store.leases.release(rid)


