"""TEST FIXTURE for the claim tests (tests/test_claims*.py): synthetic results, theory and paired
statistics, built in memory, so that each claim of SPEC §9 can be shown one input that PASSES and
one that FAILS it. Nothing here is a result of the toolkit.

- `World` collects rows of made-up runs (a config from `make_config` at the cpu preset, its run id,
  and the metrics given) and gives a `results.Results` over them with a `FakeStore` (configs and
  training curves by run id).
- `FakeTheory` answers the few theory calls the claims make (`floor`, `curves`).
- `CertBackend` feeds the real certificates module (depthscale.analysis.certificates) made-up
  per-context errors, with a certificate broken where a test says; tests install it with
  `use_cert_backend`.
- `FakePaired` stands in for `depthscale.analysis.paired` (paired differences, bootstrap of Delta Q, the
  softmax-ensemble floor on a run's evaluation contexts); tests install it with `use_paired`.
"""

from __future__ import annotations

import math
import zlib
from types import SimpleNamespace

import numpy as np
import pandas as pd

from depthscale.analysis import claims
from depthscale.analysis.results import Results
from depthscale.config.records import depth_set, model_depths
from depthscale.config.run import make_config

PRESET = "cpu"
DEPTHS = depth_set(PRESET, "all")  # 1 .. 64
# a fixed pattern of relative noise: fits of made-up laws get a finite SE and a chosen R²
Z = np.array([0.3, -0.5, 0.2, 0.6, -0.4, -0.1, 0.3, -0.2, 0.4])


def noise(n: int, scale: float) -> np.ndarray:
    """exp(scale * Z[:n]): multiplicative noise with a fixed pattern."""
    return np.exp(scale * Z[:n])


def depths_of(model: str, preset: str = PRESET) -> tuple[int, ...]:
    return depth_set(preset, model_depths(model))


class FakeStore:
    def __init__(self):
        self.configs: dict = {}
        self.curves: dict = {}

    def load_config(self, rid):
        return self.configs[rid]

    def load_curves(self, rid):
        return self.curves[rid]

    def per_context(self, rid, device="cpu"):  # (a paired.RunReader: FakePaired and CertBackend stand in for it)
        raise NotImplementedError("a World's runs have no per-context arrays")


class World:
    """Rows of made-up runs at one preset."""

    def __init__(self, preset: str = PRESET):
        self.preset = preset
        self.rows: list[dict] = []
        self.store = FakeStore()
        self.R: dict[str, float] = {}  # run id -> R (FakePaired's differences)

    def add(self, model, task, k, a, b, L, seed=0, fields=None, curves=None, **metrics) -> str:
        cfg = make_config(self.preset, model=model, task=task, k=k, a=float(a), b=float(b), L=int(L), seed=seed,
                          **(fields or {}))
        row = cfg.to_dict()
        row["run_id"] = cfg.run_id
        metrics.setdefault("R_se", 0.01 * metrics["R"])
        row.update(metrics)
        self.rows.append(row)
        self.store.configs[cfg.run_id] = cfg
        self.R[cfg.run_id] = float(metrics["R"])
        if curves is not None:
            self.store.curves[cfg.run_id] = curves
        return cfg.run_id

    def series(self, model, task, k, a, b, values, depths=None, seed=None, fields=None, spread=0.002, **per_depth):
        """One run per depth. `values` (R) and every metric: a callable of L, a sequence over the
        depths, or one value for every depth (an array metric such as mode_R: a callable).
        seed None: seed 0, except on the converged envelope (nonlinear, difficult: SPEC §9 asks >= 3
        seeds) seeds 0, 1, 2 with every scalar times 1 - spread, 1, 1 + spread (the same seed means)."""
        if seed is None and (model, task) == ("nonlinear", "difficult") and not fields:
            return [rid for sd in (0, 1, 2) for rid in
                    self.series(model, task, k, a, b, _scaled(values, 1 + spread * (sd - 1)), depths, sd, fields,
                                **{m: _scaled(v, 1 + spread * (sd - 1)) for m, v in per_depth.items()})]
        seed = 0 if seed is None else seed
        depths = tuple(depths or depths_of(model, self.preset))

        def at(v, i, L):
            if callable(v):
                return v(L)
            if isinstance(v, (list, tuple, np.ndarray)):
                return v[i]
            return v

        return [self.add(model, task, k, a, b, L, seed=seed, fields=fields, R=float(at(values, i, L)),
                         **{m: at(v, i, L) for m, v in per_depth.items()})
                for i, L in enumerate(depths)]

    def results(self, store: bool = True) -> Results:
        return Results(pd.DataFrame(self.rows), self.preset, self.store if store else None)


def _scaled(v, f):
    """A World.series metric times f (callables and sequences of floats; arrays of modes and R_se untouched)."""
    if callable(v):
        return lambda L: _scaled(v(L), f)
    if isinstance(v, (list, tuple, np.ndarray)):
        arr = np.asarray(v, dtype=float)
        return arr * f if arr.ndim == 1 else v
    return v * f if isinstance(v, (int, float)) else v


class FakeTheory:
    """The theory numbers the claims read: linear floors and the finite-size reference curves."""

    def __init__(self):
        self.floors: dict = {}
        self.ref: tuple[float, float] = (1.0, 2.0)  # slopes of the constrained and free references

    def floor(self, a, b, k, model="linear"):
        return self.floors.get((float(a), float(b), int(k), model),
                               {"R_irr": 1.0, "se": 0.005, "finite_P": 1.0, "finite_P_se": 0.01})

    def curves(self, a, b):
        Ls = list(DEPTHS)
        lo, hi = self.ref
        return {"finite_P_constrained": {"depths": Ls, "in_sample": [L ** -lo for L in Ls]},
                "finite_P": {"depths": Ls, "in_sample": [L ** -hi for L in Ls]}}


class FakePaired:
    """depthscale.analysis.paired's three calls on a World's made-up runs."""

    def __init__(self, world: World, se: float = 1e-3):
        self.world, self.se = world, se
        self.dQ: dict = {}  # (rid_1, rid_L) -> {"q", "dQ", "se"}
        self.floor: dict = {}  # (a, b, k) -> ensemble floor
        self.calls: list = []

    def paired_difference(self, store, rid_a, rid_b, device="cpu"):
        self.calls.append(("paired_difference", rid_a, rid_b))
        return {"diff": self.world.R[rid_a] - self.world.R[rid_b], "se": self.se, "n": 10240}

    def bootstrap_dQ(self, store, rid_1, rid_L, percentiles=None, n_boot=1000, seed=0):
        self.calls.append(("bootstrap_dQ", rid_1, rid_L))
        return self.dQ[(rid_1, rid_L)]

    def floor_on_eval(self, cfg, reader=None):
        self.calls.append(("floor_on_eval", cfg.run_id))
        return {"ensemble_floor": self.floor[(cfg.a, cfg.b, cfg.k)], "single_head": math.nan}


class CertBackend:
    """What the real depthscale.analysis.certificates reads through depthscale.analysis.paired
    (per_context, floor_on_eval with depths) on a World's made-up runs, so the claims run the real
    module: each run's per-context squared errors are its R times (1 + 0.5 z) over N_CTX contexts (z
    its own normals, exactly standardised: a paired difference's mean is the difference of the Rs,
    its SE about 3.5% of R), the best stack B_L the series' seed mean times 1.02 (context by
    context). `fail` ({(k, a, b) or (model, k, a, b): {certificate: [depths]}}) breaks a certificate
    at those depths: doubling by raising the runs' errors there tenfold (B_L with them), construction
    by putting B_L 10% below the runs."""

    N_CTX = 400

    def __init__(self, world):
        self.world, self.fail = world, {}
        self.calls: list = []  # (model, task, k, a, b, L) of every run read
        self.floor_calls: list = []
        self._seen: dict = {}  # series key -> {L: {run id: errors}}

    def _bad(self, cfg) -> dict:
        return self.fail.get((cfg.model, cfg.k, cfg.a, cfg.b), self.fail.get((cfg.k, cfg.a, cfg.b), {}))

    @staticmethod
    def _key(cfg) -> tuple:
        return cfg.model, cfg.task, cfg.k, cfg.a, cfg.b, cfg.d, cfg.P

    def per_context(self, store, rid, device="cpu", cache=True):
        cfg = store.load_config(rid)
        self.calls.append((cfg.model, cfg.task, cfg.k, cfg.a, cfg.b, cfg.L))
        z = np.random.default_rng(zlib.crc32(rid.encode())).standard_normal(self.N_CTX)
        z = (z - z.mean()) / z.std()  # exactly mean 0: the errors' mean is the run's R
        bump = 10.0 if cfg.L in self._bad(cfg).get("doubling", ()) else 1.0
        sq = self.world.R[rid] * bump * (1 + 0.5 * z)
        self._seen.setdefault(self._key(cfg), {}).setdefault(cfg.L, {})[rid] = sq
        return {"key": "shared", "run_id": rid, "sq_err": sq}

    def floor_on_eval(self, cfg, device="cpu", temperatures=None, depths=(), batches=10, reader=None):
        self.floor_calls.append((cfg.model, cfg.k, cfg.a, cfg.b, tuple(depths)))
        seen, bad = self._seen[self._key(cfg)], self._bad(cfg).get("construction", ())
        return {"sq_err_stack": {L: np.mean(list(seen[L].values()), axis=0) * (0.9 if L in bad else 1.02)
                                 for L in depths}}


def use_cert_backend(monkeypatch, backend) -> None:
    """Install `backend` as what the real depthscale.analysis.certificates reads (its `paired`)."""
    from depthscale.analysis import certificates

    monkeypatch.setattr(certificates, "paired", backend)


class FakeCertificates:
    """(For figure tests only: the claim tests run the real module through `CertBackend`.) depthscale.analysis.certificates' series_certificates on a World's made-up runs: every depth passes
    except those named in `fail` ({(k, a, b): {certificate name: [depths]}}); failing_text and
    curve are the real module's."""

    def __init__(self):
        from depthscale.analysis import certificates
        self.real = certificates
        self.fail: dict = {}
        self.calls: list = []

    def series_certificates(self, res, model, task, k, a, b, depths=None, half=None, device="cpu",
                            construction=True):
        self.calls.append((model, task, k, float(a), float(b)))
        s = res.series(model, task, k, a, b)
        bad = self.fail.get((int(k), float(a), float(b)), {})
        per = {}
        for L, R in zip(s.depths.tolist(), s.get("R").tolist()):
            c = {n: (None if n == "budget" else {"diff": 0.05 if L in bad.get(n, ()) else -0.01, "se": 0.01,
                                                 "ok": L not in bad.get(n, ())}) for n in self.real.NAMES}
            per[L] = {"R": R, "B": R - 0.01, **c, "ok": all(v is None or v["ok"] for v in c.values())}
        failing = {n: [L for L in per if per[L][n] is not None and not per[L][n]["ok"]] for n in self.real.NAMES}
        return {"depths": sorted(per), "per_depth": per, "failing": failing, "computed": ["doubling", "construction"]}

    def failing_text(self, cert):
        return self.real.failing_text(cert)

    def curve(self, cert):
        return self.real.curve(cert)


def use_certificates(monkeypatch, fake) -> None:
    """Install `fake` as depthscale.analysis.certificates for the claims (None: not available)."""
    monkeypatch.setattr(claims, "_certificates", lambda: fake)


def use_paired(monkeypatch, fake) -> None:
    """Install `fake` as depthscale.analysis.paired for the claims (None: the module is not available)."""
    monkeypatch.setattr(claims, "_paired", lambda: fake)


def ns(**kw) -> SimpleNamespace:
    return SimpleNamespace(**kw)
