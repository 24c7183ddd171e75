"""The packs that OOM-killed the main job (issue 51), through today's process executor: the three
largest cpu linear d=32, P=256 packs as the old planner made them (11 x L=64, 7 x L=32, 11 x L=2),
20 steps each, 2 workers, the default budget; every process's RSS sampled every 0.5 s."""
import dataclasses, shutil, sys, threading, time, os
from depthscale.runs.sweeps import make_packs, pack_memory_budget
from depthscale.runs.executors import run_process
from depthscale.experiments import registry
from depthscale.train import memory as M
from depthscale.store.store import Store

def tree_rss(root):
    out = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                st = open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()
                rss = int(open(f"/proc/{d}/statm").read().split()[1]) * 4096
            except OSError:
                continue
            out[int(d)] = (int(st[1]), rss)
    kids, todo, total, per = {}, [root], 0, {}
    for p, (pp, _) in out.items(): kids.setdefault(pp, []).append(p)
    while todo:
        p = todo.pop(); 
        if p in out: total += out[p][1]; per[p] = out[p][1]
        todo += kids.get(p, [])
    return total, per

if __name__ == "__main__":
    cfgs = registry.all_configs("all", "cpu")
    old = sorted(make_packs(cfgs, None), key=lambda p: -M.pack_bytes(p))[:5]
    old = [p for p in old if p[0].task == "difficult"][:3]
    packs = [[dataclasses.replace(c, max_steps=20, eval_every=10, checkpoint_every=20, min_steps=0) for c in p] for p in old]
    budget = pack_memory_budget("process", 2)
    split = make_packs([c for p in packs for c in p], None, pack_memory=budget)
    print("old packs:", [len(p) for p in packs], "-> under the budget:", len(split), "packs", flush=True)
    peak = [0, {}]; stop = threading.Event()
    def poll():
        while not stop.wait(0.5):
            t, per = tree_rss(os.getpid())
            if t > peak[0]: peak[0], peak[1] = t, per
    threading.Thread(target=poll, daemon=True).start()
    shutil.rmtree("/tmp/oomstore", ignore_errors=True)
    class Bar:
        def update(self, n): pass
    t0 = time.time()
    counts = run_process(split, Store("/tmp/oomstore"), None, "cpu", 2, Bar(), (), budget)
    stop.set()
    print(counts, f"{time.time()-t0:.0f} s; peak {peak[0]/2**30:.2f} GiB all processes:",
          {p: round(v/2**20) for p, v in peak[1].items() if v > 50 << 20})
