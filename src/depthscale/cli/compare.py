"""Two runs, or two stores, side by side (`depthscale compare A B`).

Two runs: the config fields that differ, the provenance that differs (device, package versions,
fused CPU kernels: where and how each ran), and the metrics side by side with the ratio
R_B / R_A. Two stores: the runs finished in both with the same config apart from provenance
(the same run id: the id hashes every field but the preset label), each with R_A, R_B and
R_B / R_A, and a summary of the ratios. Reads only: nothing in either store is written.

A and B are each a run directory (<store>/runs/<run_id>), a store, or, with `store`, a run id
(or a unique prefix of one) in that store. Bad input raises InputError (one line naming it).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from depthscale.base.errors import InputError, StoreError
from depthscale.config.run import FIELD_NAMES

METRICS = ("R", "R_se", "A", "C", "steps", "stopped_because")  # shown side by side for two runs
PROVENANCE = ("device", "fused_cpu_kernels", "versions")  # config.json's entries besides the config


def differing_fields(configs: list[dict], drop: tuple[str, ...] = ("preset",)) -> list[str]:
    """The fields (in RunConfig order) whose values are not all equal across `configs` (dicts of
    config fields); `drop` is left out (the preset label changes no number)."""
    if len(configs) < 2:
        return []
    names = [n for n in FIELD_NAMES if n not in drop]
    return [n for n in names if len({json.dumps(c.get(n), sort_keys=True) for c in configs}) > 1]


def _value_text(v) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def run_label(config: dict, fields: list[str]) -> str:
    """'a=0.5, L=4': the values of `fields` in this config."""
    return ", ".join(f"{n}={_value_text(config.get(n))}" for n in fields)


def find_run(store, text: str) -> str:
    """The run id `text` names in `store`: an exact id or a unique prefix of one."""
    try:
        if store.run_path(text).is_dir():
            return text
    except StoreError:
        raise InputError(f"bad run id {text!r}") from None
    hits = [r for r in store.run_ids() if r.startswith(text)]
    if len(hits) == 1:
        return hits[0]
    if not hits:
        raise InputError(f"no run {text!r} in store {store.root}")
    raise InputError(f"run id prefix {text!r} is ambiguous in store {store.root} ({len(hits)} runs: "
                     f"{', '.join(hits[:3])}{', ...' if len(hits) > 3 else ''})")


def resolve(value: str, store: str | None = None) -> tuple:
    """("run", Store, run_id) or ("store", Store) for one argument of `compare`."""
    from depthscale.store.store import Store

    if value is None or not str(value).strip():
        raise InputError("compare: an empty argument: give a run directory, a store or a run id")
    p = Path(value).expanduser()
    if p.is_dir() and (p / "config.json").is_file() and p.parent.name == "runs":
        try:
            return "run", Store(p.parent.parent, readonly=True), p.name
        except StoreError:
            pass
    if p.is_dir():
        try:
            return "store", Store(p, readonly=True)
        except StoreError:
            pass
    if store is not None:
        st = Store(store, readonly=True)  # StoreError (one line) if it is not a store
        return "run", st, find_run(st, str(value))
    raise InputError(f"compare: {value!r} is neither a run directory nor a store (for a run id, give --store)")


def _config_doc(store, rid: str) -> dict:
    """The run's config.json, read as the store reads its files (a regular file, never a FIFO,
    which would block, nor through a link; a run directory that is a link is broken); provenance
    entries of the wrong type ("versions" not a mapping of names to versions, "device" not a
    string) are left out."""
    from depthscale.base.atomic import read_json

    why = store.run_dir_problem(rid)
    if why is not None:
        raise InputError(f"run {store.run_path(rid)} is broken: {why}")
    path = store.run_path(rid) / "config.json"
    try:
        doc = read_json(path)
        if not isinstance(doc, dict) or not isinstance(doc.get("config"), dict):
            raise ValueError
    except (OSError, ValueError):
        raise InputError(f"run {store.run_path(rid)} has no readable config.json") from None
    versions = doc.get("versions")
    if versions is not None and not (isinstance(versions, dict) and all(
            isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in versions.values())):
        doc = {k: v for k, v in doc.items() if k != "versions"}
    for key in ("device", "fused_cpu_kernels"):
        if key in doc and not isinstance(doc[key], (str, bool)):
            doc = {k: v for k, v in doc.items() if k != key}
    return doc


def run_summary(store, rid: str) -> dict:
    """A run's config, provenance, state and metrics (None where it has not finished)."""
    doc = _config_doc(store, rid)
    state = store.run_state(rid)
    metrics = store.load_metrics(rid) if store.is_done(rid) else {}
    return {"run_id": rid, "store": str(store.root), "state": state, "config": doc["config"],
            "provenance": {k: doc.get(k) for k in PROVENANCE}, "metrics": {k: metrics.get(k) for k in METRICS}}


def ratio(b, a) -> float | None:
    """b / a, None where either is missing or not finite or a is 0."""
    ok = all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in (a, b))
    return b / a if ok and a != 0 else None


def compare_runs(store_a, rid_a: str, store_b, rid_b: str) -> dict:
    a, b = run_summary(store_a, rid_a), run_summary(store_b, rid_b)
    diff = differing_fields([a["config"], b["config"]], drop=())
    prov = {k: [a["provenance"].get(k), b["provenance"].get(k)] for k in PROVENANCE
            if a["provenance"].get(k) != b["provenance"].get(k)}
    return {"kind": "runs", "a": {k: a[k] for k in ("run_id", "store", "state")},
            "b": {k: b[k] for k in ("run_id", "store", "state")},
            "config_diff": {n: [a["config"].get(n), b["config"].get(n)] for n in diff},
            "provenance_diff": prov,
            "metrics": {k: [a["metrics"][k], b["metrics"][k]] for k in METRICS},
            "R_ratio": ratio(b["metrics"]["R"], a["metrics"]["R"])}


def _finished(store) -> dict[str, dict]:
    """run id -> its config.json, for the store's finished runs (done or diverged)."""
    out = {}
    for rid in store.run_ids():
        if store.is_done(rid):
            try:
                out[rid] = _config_doc(store, rid)
            except InputError:
                continue
    return out


def _provenance_sets(docs: dict[str, dict]) -> dict[str, list]:
    dev = sorted({str(d.get("device")) for d in docs.values() if d.get("device") is not None})
    ver = {}
    for d in docs.values():
        for pkg, v in (d.get("versions") or {}).items():
            if pkg != "platform":
                ver.setdefault(pkg, set()).add(str(v))
    return {"device": dev, **{pkg: sorted(v) for pkg, v in sorted(ver.items())}}


def compare_stores(store_a, store_b) -> dict:
    """The runs finished in both stores with the same config (run id), each with R_A, R_B and
    R_B / R_A; the ratios' geometric mean, median and range; the provenance of each store."""
    da, db = _finished(store_a), _finished(store_b)
    both = sorted(set(da) & set(db))
    fields = differing_fields([da[r]["config"] for r in both])
    rows = []
    for rid in both:
        ra, rb = store_a.load_metrics(rid).get("R"), store_b.load_metrics(rid).get("R")
        rows.append({"run_id": rid, **{n: da[rid]["config"].get(n) for n in fields},
                     "state_a": store_a.run_state(rid), "state_b": store_b.run_state(rid),
                     "R_a": ra, "R_b": rb, "R_ratio": ratio(rb, ra)})
    ratios = sorted(r["R_ratio"] for r in rows if r["R_ratio"] is not None and r["R_ratio"] > 0)
    summary = None
    if ratios:
        n = len(ratios)
        median = ratios[n // 2] if n % 2 else 0.5 * (ratios[n // 2 - 1] + ratios[n // 2])
        summary = {"n": n, "geomean": math.exp(sum(math.log(r) for r in ratios) / n), "median": median,
                   "min": ratios[0], "max": ratios[-1]}
    pa, pb = _provenance_sets({r: da[r] for r in both} or da), _provenance_sets({r: db[r] for r in both} or db)
    return {"kind": "stores", "a": str(store_a.root), "b": str(store_b.root),
            "finished_a": len(da), "finished_b": len(db), "matched": len(both),
            "only_a": len(set(da) - set(db)), "only_b": len(set(db) - set(da)), "fields": fields,
            "provenance_diff": {k: [pa.get(k, []), pb.get(k, [])] for k in dict.fromkeys([*pa, *pb])
                                if pa.get(k, []) != pb.get(k, [])},
            "runs": rows, "R_ratio": summary}


def compare(a: str, b: str, store: str | None = None) -> dict:
    """compare_runs or compare_stores, as the two arguments name (see the module's doc)."""
    ra, rb = resolve(a, store), resolve(b, store)
    if ra[0] != rb[0]:
        raise InputError(f"compare: {a!r} is a {ra[0]} and {b!r} a {rb[0]}: give two runs or two stores")
    if ra[0] == "run":
        return compare_runs(ra[1], ra[2], rb[1], rb[2])
    return compare_stores(ra[1], rb[1])


def _num(v, spec: str = ".4g") -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "—"
    return format(v, spec) if isinstance(v, float) else str(v)


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def _prov_text(v) -> str:
    if isinstance(v, dict):
        return ", ".join(f"{k} {x}" for k, x in v.items())
    if isinstance(v, list):
        return ", ".join(map(str, v)) or "—"
    return _value_text(v) if v is not None else "—"


def format_text(res: dict) -> str:
    """What `compare` prints without --json."""
    lines = []
    if res["kind"] == "runs":
        a, b = res["a"], res["b"]
        lines.append(f"A: run {a['run_id']} ({a['state']}) in {a['store']}")
        lines.append(f"B: run {b['run_id']} ({b['state']}) in {b['store']}")
        if res["config_diff"]:
            lines.append("config fields that differ:")
            lines += _table([["field", "A", "B"]] + [[n, _value_text(va), _value_text(vb)]
                                                     for n, (va, vb) in res["config_diff"].items()])
        else:
            lines.append("config: the same in every field")
        for k, (va, vb) in res["provenance_diff"].items():
            lines.append(f"provenance {k}: A {_prov_text(va)}; B {_prov_text(vb)}")
        lines.append("metrics:")
        lines += _table([["", "A", "B"]] + [[k, _num(va), _num(vb)] for k, (va, vb) in res["metrics"].items()])
        lines.append(f"R_B/R_A = {_num(res['R_ratio'])}")
        return "\n".join(lines)
    lines.append(f"A: store {res['a']} ({res['finished_a']} finished runs)")
    lines.append(f"B: store {res['b']} ({res['finished_b']} finished runs)")
    lines.append(f"matched runs (same config apart from provenance): {res['matched']}; "
                 f"only in A: {res['only_a']}; only in B: {res['only_b']}")
    for k, (va, vb) in res["provenance_diff"].items():
        lines.append(f"provenance {k}: A {_prov_text(va)}; B {_prov_text(vb)}")
    if res["runs"]:
        head = ["run_id", *res["fields"], "R_A", "R_B", "R_B/R_A"]
        body = [[r["run_id"], *(_value_text(r[n]) for n in res["fields"]), _num(r["R_a"]), _num(r["R_b"]),
                 _num(r["R_ratio"])] for r in res["runs"]]
        lines += _table([head] + body)
    s = res["R_ratio"]
    if s:
        lines.append(f"R_B/R_A over {s['n']} runs: geometric mean {s['geomean']:.4g}, median {s['median']:.4g}, "
                     f"range {s['min']:.4g} .. {s['max']:.4g}")
    else:
        lines.append("R_B/R_A: no matched run with a finite R in both")
    return "\n".join(lines)


__all__ = ["compare", "compare_runs", "compare_stores", "resolve", "find_run", "differing_fields", "run_label",
           "run_summary", "format_text", "ratio", "METRICS", "PROVENANCE"]
