"""The resident memory of a command and every process it starts, sampled every few seconds.

    python benchmarks/rss_timeline.py --out benchmarks/results/rss_main_job --interval 5 -- \
        bash scripts/reproduce_cpu.sh

writes OUT/timeline.csv as it goes (seconds since start, pid, parent pid, role, resident MiB: one
row per live process of the tree per sample) and, at the end, OUT/summary.json: the peak of the
sum over all processes (the job's footprint, what the machine must have), when it happened and
which processes made it, the peak of each process, and the command's exit code and wall time.
`--summarize` writes summary.json from the timeline so far (a job still running, or one stopped).
Linux only (/proc). The command's own exit code is this script's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

PAGE = os.sysconf("SC_PAGE_SIZE")


def _procs() -> dict[int, tuple[int, int, str]]:
    """pid -> (parent pid, resident bytes, command line) of every process readable now."""
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            rss = int((d / "statm").read_text().split()[1]) * PAGE
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, ValueError, IndexError):
            continue
        out[int(d.name)] = (ppid, rss, cmd)
    return out


def _tree(root: int, procs: dict) -> list[int]:
    kids: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in procs.items():
        kids.setdefault(ppid, []).append(pid)
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid in procs:
            out.append(pid)
        todo.extend(kids.get(pid, []))
    return out


def role(cmd: str) -> str:
    """A short name for a process of the job (the worker pool's are spawned Python processes)."""
    if "multiprocessing.spawn" in cmd or "spawn_main" in cmd:
        return "worker"
    if "resource_tracker" in cmd:
        return "tracker"
    if "depthscale" in cmd:
        return "main"
    return cmd.split(" ")[0].rsplit("/", 1)[-1][:24] or "?"


def summarize(timeline: Path) -> dict:
    """From a timeline.csv (a finished job's, or one still being written): the peak of the sum over
    the job's processes, when, which processes made it, and each process's peak."""
    samples: dict[str, dict[str, tuple[str, float]]] = {}
    per_pid: dict[str, tuple[str, float]] = {}
    with open(timeline) as fh:
        next(fh)
        for line in fh:
            parts = line.rstrip("\n").split(",")
            if len(parts) != 5:
                continue  # a line being written
            t, pid, _, who, mib = parts
            samples.setdefault(t, {})[pid] = (who, float(mib))
            per_pid[pid] = (who, max(per_pid.get(pid, ("", 0.0))[1], float(mib)))
    totals = {t: sum(m for _, m in ps.values()) for t, ps in samples.items()}
    at = max(totals, key=totals.get) if totals else "0"
    return {"samples": len(totals), "covered_seconds": max(map(float, totals), default=0.0),
            "peak_total_mib": round(totals.get(at, 0.0), 1), "peak_at_seconds": float(at),
            "peak_processes_mib": {p: [w, m] for p, (w, m) in samples.get(at, {}).items()},
            "per_process_peak_mib": {p: [w, m] for p, (w, m) in per_pid.items()}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="directory for timeline.csv and summary.json")
    ap.add_argument("--interval", type=float, default=5.0, help="seconds between samples (default 5)")
    ap.add_argument("--summarize", action="store_true",
                    help="only write OUT/summary.json from OUT/timeline.csv so far (a job still running: complete false)")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command")
    args = ap.parse_args(argv)
    out = Path(args.out)
    if args.summarize:
        summary = {**summarize(out / "timeline.csv"), "complete": False}
        (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
        print(f"rss_timeline: peak {summary['peak_total_mib'] / 1024:.2f} GiB so far", file=sys.stderr)
        return 0
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        ap.error("give the command after --")
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    child = subprocess.Popen(cmd)
    with open(out / "timeline.csv", "w") as fh:
        fh.write("seconds,pid,ppid,role,rss_mib\n")
        while True:
            procs = _procs()
            now = time.monotonic() - t0
            for p in _tree(child.pid, procs):
                ppid, rss, c = procs[p]
                fh.write(f"{now:.1f},{p},{ppid},{role(c)},{rss / 2**20:.1f}\n")
            fh.flush()
            if child.poll() is not None:
                break
            time.sleep(args.interval)
    summary = {"command": cmd, "exit_code": child.returncode, "wall_seconds": round(time.monotonic() - t0, 1),
               "interval_seconds": args.interval, "complete": True, **summarize(out / "timeline.csv")}
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(f"rss_timeline: peak {summary['peak_total_mib'] / 1024:.2f} GiB (all processes) at "
          f"{summary['peak_at_seconds']:.0f} s; exit {child.returncode}", file=sys.stderr)
    return child.returncode


if __name__ == "__main__":
    sys.exit(main())
