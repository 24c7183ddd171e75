"""A throwaway single-node SLURM cluster for tests (Debian's slurm-wlm: slurmctld + slurmd).

Everything lives in a temp directory: a generated slurm.conf (found through $SLURM_CONF), state,
spool, logs and pid files, on free localhost ports. Authentication is auth/none with cred/none,
so no munge daemon is needed (the node and the controller are the same machine, and root).
`start_cluster` raises ClusterUnavailable with the reason where SLURM cannot be started; tests
turn that into pytest.skip. Install: `apt-get install -y slurm-wlm`.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path


class ClusterUnavailable(RuntimeError):
    """SLURM is not installed here, or its daemons would not start."""


@dataclass
class Cluster:
    root: Path
    conf: Path
    partition: str = "debug"
    procs: list = field(default_factory=list)

    @property
    def env(self) -> dict:
        return {"SLURM_CONF": str(self.conf)}

    def logs(self, lines: int = 15) -> str:
        out = []
        for name in ("slurmctld.log", "slurmd.log"):
            path = self.root / name
            if path.exists():
                tail = path.read_text(errors="replace").splitlines()[-lines:]
                out.append(f"--- {name}\n" + "\n".join(tail))
        return "\n".join(out)

    def stop(self) -> None:
        subprocess.run(["scancel", "--full", "--quiet", f"--partition={self.partition}"],
                       env={**os.environ, **self.env}, capture_output=True, timeout=10)
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _node_line(host: str) -> str:
    """The node as slurmd sees it (CPUs, sockets, cores), with a modest RealMemory."""
    out = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, timeout=20).stdout
    line = next((ln for ln in out.splitlines() if ln.startswith("NodeName=")), "")
    keep = [w for w in line.split()[1:] if w.split("=")[0] in
            ("CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore")]
    return " ".join([f"NodeName={host}", "NodeAddr=127.0.0.1", *keep, "RealMemory=1000",
                     "State=UNKNOWN"])


def start_cluster(root: Path, timeout: float = 30.0) -> Cluster:
    """Write a config under `root`, start slurmctld and slurmd, wait until the node is idle."""
    missing = [t for t in ("slurmctld", "slurmd", "sbatch", "sinfo", "scancel") if not shutil.which(t)]
    if missing:
        raise ClusterUnavailable(f"SLURM is not installed ({', '.join(missing)} missing): "
                                 "apt-get install -y slurm-wlm")
    if os.geteuid() != 0:
        raise ClusterUnavailable("starting a private SLURM cluster needs root")
    host = socket.gethostname().split(".")[0]
    root = Path(root)
    for sub in ("state", "spool"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    conf = root / "slurm.conf"
    conf.write_text("\n".join([
        "ClusterName=depthscaletest",
        f"SlurmctldHost={host}(127.0.0.1)",
        f"SlurmctldPort={_free_port()}",
        f"SlurmdPort={_free_port()}",
        "AuthType=auth/none",
        "CredType=cred/none",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"StateSaveLocation={root / 'state'}",
        f"SlurmdSpoolDir={root / 'spool'}",
        f"SlurmctldPidFile={root / 'slurmctld.pid'}",
        f"SlurmdPidFile={root / 'slurmd.pid'}",
        f"SlurmctldLogFile={root / 'slurmctld.log'}",
        f"SlurmdLogFile={root / 'slurmd.log'}",
        "ProctrackType=proctrack/pgid",
        "TaskPlugin=task/none",
        "MpiDefault=none",
        "SchedulerType=sched/builtin",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "ReturnToService=2",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "MaxArraySize=1000",
        "SlurmctldTimeout=30",
        "SlurmdTimeout=30",
        "InactiveLimit=0",
        "KillWait=2",
        _node_line(host),
        f"PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP",
        "",
    ]))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    cluster = Cluster(root=root, conf=conf)
    try:
        for cmd in (["slurmctld", "-D", "-i", "-f", str(conf)],
                    ["slurmd", "-D", "-f", str(conf), "-N", host]):
            cluster.procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                                                  stderr=subprocess.DEVNULL, start_new_session=True))
            time.sleep(0.5)
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in cluster.procs):
                raise ClusterUnavailable(f"a SLURM daemon exited at start\n{cluster.logs()}")
            res = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], env=env, capture_output=True,
                                 text=True, timeout=10)
            state = res.stdout.strip()
            if state.startswith("idle"):
                return cluster
            time.sleep(0.5)
        raise ClusterUnavailable(f"the SLURM node did not become idle (state {state!r})\n{cluster.logs()}")
    except BaseException:
        cluster.stop()
        raise
