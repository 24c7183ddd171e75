"""The commands that compute: fit (a depth law to given losses) and theory (the linear model's
exponents, curves and floor; the softmax-ensemble floor), handlers and parsers."""

from __future__ import annotations

import math
import warnings

from depthscale.base.userpaths import UsageError
from depthscale.cli.arguments import Parser, check_theory, existing_store, help_text, parse_depths, parse_floats
from depthscale.cli.commands.common import allow_memory_flag, emit, json_flag


FIT_DEPTHS = (1e-6, 1e12)  # depths a fit takes (a depth is a count of layers, at most config's 10^12)
FIT_LOSSES = (1e-100, 1e100)  # losses a fit takes: L^-alpha and its derivatives stay finite in double precision


def cmd_fit(args) -> int:
    from depthscale.theory.fits import fit_dict

    L = parse_floats(args.depths, "depths")
    R = parse_floats(args.losses, "losses")
    if len(L) != len(R):
        raise UsageError(f"--depths has {len(L)} values but --losses has {len(R)}")
    for flag, values, (lo, hi) in (("depths", L, FIT_DEPTHS), ("losses", R, FIT_LOSSES)):
        bad = next((v for v in values if not lo <= v <= hi), None)  # (1e-320, 1e301: the fit's residuals overflow)
        if bad is not None:
            raise UsageError(f"--{flag} must be in [{lo:g}, {hi:g}], got {bad!r}")
    need = 2 if args.no_floor else 3
    if len(set(L)) < need:
        raise UsageError(f"--depths needs at least {need} distinct depths to fit "
                         f"{'c and alpha' if args.no_floor else 'L0, c and alpha'}, got {len(set(L))}")
    if len(set(R)) == 1:
        raise UsageError(f"--losses are all equal ({R[0]!r}): no decay with depth to fit")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # SciPy's overflow warnings: a fit on these numbers fails
        try:
            res = fit_dict(L, R, floor=not args.no_floor)
        except (ArithmeticError, Warning) as e:
            raise UsageError(f"cannot fit these numbers ({type(e).__name__}: "
                             f"{str(e).splitlines()[0] if str(e) else 'overflow'}); rescale --losses") from None
    # alpha_se may be missing: the fit is then reported as degenerate (status, reason), not refused
    bad = [k for k in ("L0", "c", "alpha") if not math.isfinite(res[k])]
    if bad:
        raise UsageError(f"the fit gives a non-finite {bad[0]}: rescale --losses")
    emit(args, res)
    return 0


SOFTMAX_FLOOR_DATA = ("a", "b", "d", "P", "k", "samples", "seed")  # theory softmax-floor flags a --run sets


def _softmax_floor_inputs(args):
    """theory softmax-floor: the RunConfig of --store/--run (its data fields and evaluation set
    fill the flags, which may then not be given), or None, the flags' defaults filled in (d, P: the
    cpu preset's nonlinear geometry)."""
    from depthscale.config.run import geometry

    if (args.store is None) != (args.run is None):
        raise UsageError("--store and --run go together: give both (the floor on a run's evaluation contexts) or neither")
    given = [n for n in SOFTMAX_FLOOR_DATA if getattr(args, n) is not None]
    if args.run is None:
        if args.a is None or args.b is None:
            raise UsageError(f"--{'a' if args.a is None else 'b'} is required (or --store and --run: the floor "
                             f"on a run's evaluation contexts)")
        defaults = dict(geometry("cpu", "nonlinear"), k=2, samples=4096, seed=0)
        for n in SOFTMAX_FLOOR_DATA[2:]:
            if getattr(args, n) is None:
                setattr(args, n, defaults[n])
        return None
    if given:
        raise UsageError(f"--{given[0]} cannot be given with --run: the run's config sets the data and its "
                         f"evaluation contexts")
    store = existing_store(args.store)
    if not store.run_path(args.run).is_dir():
        raise UsageError(f"--run {args.run!r}: no such run in store {store.root}")
    cfg = store.load_config(args.run)
    args.a, args.b, args.d, args.P, args.k = cfg.a, cfg.b, cfg.d, cfg.P, cfg.k
    args.samples, args.seed = cfg.eval_contexts, cfg.eval_seed  # (for check_theory's memory estimate)
    return cfg


def cmd_theory(args) -> int:
    from depthscale.theory import linear_floor, softmax_floor, linear as theory

    run_cfg = _softmax_floor_inputs(args) if args.what == "softmax-floor" else None
    check_theory(args)
    if args.what == "exponents":
        res = theory.exponents(args.a, args.b)
        bad = [k for k, v in res.items() if not math.isfinite(v)]
        if bad:
            raise UsageError(f"--a {args.a!r} --b {args.b!r}: {bad[0]} is not finite (overflow)")
    elif args.what == "curve":
        depths = parse_depths(args.depths)
        res = theory.curve(args.a, args.b, args.d, depths)
        if args.finite_P:
            res["finite_P"] = theory.sample_free_curve(args.a, args.b, args.d, args.P, depths,
                                                       samples=args.samples, seed=args.seed)
    elif args.what == "softmax-floor":
        taus = None if args.temperatures is None else parse_floats(args.temperatures, "temperatures")
        if run_cfg is not None:  # on the run's own evaluation contexts (SPEC §3.4), not a fresh sample
            from depthscale.analysis.paired import floor_on_eval

            res = floor_on_eval(run_cfg, temperatures=taus, depths=parse_depths(args.depths))
            res = {k: v for k, v in res.items() if not k.startswith("sq_err")}  # per-context arrays
            res["run_id"] = args.run
        else:
            res = softmax_floor.softmax_floor(args.a, args.b, args.k, args.d, args.P, samples=args.samples,
                                              seed=args.seed, temperatures=taus, depths=parse_depths(args.depths))
        if not args.json:
            i = res["iid_depth"]
            where = (f"on the {res['n']} evaluation contexts of run {args.run}: " if run_cfg is not None
                     else f"on {res['samples']} Monte Carlo contexts: ")
            print(where + f"single head {res['single_head']:.4f} ± {res['single_head_se']:.4f} "
                  f"(tau {res['single_head_temperature']:.3g}); ensemble floor {res['ensemble_floor']:.4f} "
                  f"± {res['se']:.4f} (ensemble - single {res['ensemble_minus_single']:+.4f} ± "
                  f"{res['ensemble_minus_single_se']:.4f}); Var(y*) {res['var_ystar']:.4f}; family {res['family']}; "
                  f"layers drawn from the mixture: R_L = {i['C']:.4f} + {i['delta']:.4f}/L; best stack of L heads: "
                  + ", ".join(f"L={L}: {R:.4f}" for L, R in zip(res["best_stack"]["depths"], res["best_stack"]["R"])))
            return 0
    else:
        res = linear_floor.floor(args.a, args.b, args.k, args.d, args.P, args.samples, args.seed)
    emit(args, res)
    return 0


# ---------------------------------------------------------------- parsers
def add_parsers(sub) -> None:
    """The parsers of fit and theory (and theory's exponents, curve, floor, softmax-floor)."""
    sp = sub.add_parser("fit", help="fit R = L0 + c L^-alpha", **help_text(
        "Least squares on log R with bounds and several starts (SPEC §6.1). status is 'degenerate', "
        "with the reason, when there are fewer points than parameters + 1, alpha or L0 ends on a bound, "
        "the SE of alpha is missing or R^2 is undefined: then the numbers are not a law.",
        "depthscale fit --depths 1,2,4,8 --losses 10,6,4,3 --json"))
    sp.add_argument("--depths", required=True, help="comma list of depths L")
    sp.add_argument("--losses", required=True, help="comma list of losses R_L, one per depth")
    sp.add_argument("--no-floor", action="store_true", help="fix L0 = 0")
    json_flag(sp)
    sp.set_defaults(fn=cmd_fit)

    sp = sub.add_parser("theory", help="linear-attention theory and the softmax-ensemble floor", **help_text(
        "exponents: zeta and 2 zeta; curve: constrained and free reference curves (--finite-P: and the "
        "free curve of the empirical S at P); floor: the linear model's R_irr by "
        "Monte Carlo (SPEC §6.2-6.3); softmax-floor: the best single cosine-softmax head and the best "
        "infinitely deep ensemble of them (nonnegative mixture of temperatures, one gain; SPEC §3.4), "
        "with the loss of L layers drawn from that mixture.",
        "depthscale theory softmax-floor --a 0 --b 0 --k 2 --d 16 --P 64 --samples 20000 --seed 0 --json"))
    sp.set_defaults(fn=cmd_theory)
    what = sp.add_subparsers(dest="what", required=True, parser_class=Parser, metavar="{exponents,curve,floor,softmax-floor}")

    _theory_parser(what, "exponents", "zeta and 2 zeta of a spectrum", "zeta and 2 zeta of the spectrum (a, b): "
                   "the bounds of the linear model's depth exponent alpha on the easy task (SPEC §6.2).",
                   "depthscale theory exponents --a 2 --b 1 --json", {})
    _theory_parser(what, "curve", "constrained and free reference curves", "The linear model's reference curves "
                   "of R_L over depth at dimension d (population Sigma; --finite-P: and the free curve of the "
                   "empirical S at P).",
                   "depthscale theory curve --a 2 --b 1 --d 32 --P 128 --finite-P --samples 10000 --json",
                   {"d": 1, "P": 1, "depths": 1, "finite_P": 1,
                    "samples": "--finite-P: contexts to fit the free curve (as many again to measure it)"})
    _theory_parser(what, "floor", "the linear model's floor R_irr (difficult task)", "R_irr of the top-k task by "
                   "Monte Carlo, and its finite-P counterpart (SPEC §6.3).",
                   "depthscale theory floor --a 0 --b 0 --k 2 --d 128 --P 1024 --samples 20000 --seed 0 --json",
                   {"d": 1, "P": 1, "k": 1, "samples": "Monte Carlo contexts"})
    _theory_parser(what, "softmax-floor", "the softmax-ensemble floor", "The best single cosine-softmax head and "
                   "the best infinitely deep ensemble of them (nonnegative mixture of temperatures, one gain; "
                   "SPEC §3.4), with the loss of L layers drawn from that mixture and the best stack of L heads; "
                   "on Monte Carlo contexts, or with --store and --run on that run's own evaluation contexts.",
                   "depthscale theory softmax-floor --a 0 --b 0 --k 2 --d 16 --P 64 --samples 20000 --seed 0 --json",
                   {"d": 1, "P": 1, "k": 1, "depths": 1, "temperatures": 1, "samples": "Monte Carlo contexts",
                    "run": 1})


def _theory_parser(what, name: str, hlp: str, desc: str, example: str, flags: dict) -> None:
    """One subcommand of theory (`what`: theory's subparsers) with the flags it takes: --a and --b
    always, and those `flags` names (d, P, k, depths, samples: its help, temperatures, finite_P, run).
    A "run" subcommand may take its data from a stored run, so its data flags' defaults are
    said in their help and filled in later."""
    from depthscale.config.run import GEOMETRIES

    tp = what.add_parser(name, help=hlp, **help_text(desc, example))
    run = "run" in flags  # softmax-floor: the data may come from a stored run; defaults filled in later
    geo = GEOMETRIES[("cpu", "softmax")]  # (the softmax geometry by its name: no model kind, so no torch, loaded)

    def data_help(text, default=None):  # a flag a --run sets: its default said here, filled in later
        return text + (f" (default: {default}; not with --run)" if default is not None else " (not with --run)") \
            if run else text

    needed = " (default: none; required without --run, which sets it)" if run else ""
    tp.add_argument("--a", type=float, required=not run, help="input-spectrum exponent, lambda_k = k^-a" + needed)
    tp.add_argument("--b", type=float, required=not run, help="teacher-spectrum exponent, omega_k = k^-b" + needed)
    if "d" in flags:
        tp.add_argument("--d", type=int, default=None if run else 32,
                        help=data_help("input dimension", f"{geo['d']}, the cpu preset's nonlinear geometry"))
    if "P" in flags:
        tp.add_argument("--P", type=int, default=None if run else 128,
                        help=data_help("context length", f"{geo['P']}, the cpu preset's nonlinear geometry"))
    if "k" in flags:
        tp.add_argument("--k", type=int, default=None if run else 2,
                        help=data_help("tokens averaged by the top-k target", 2))
    if "depths" in flags:
        tp.add_argument("--depths", default="1,2,4,8,16,32,64", help="comma list of depths L")
    if "samples" in flags:
        tp.add_argument("--samples", type=int, default=None if run else 4096, help=data_help(flags["samples"], 4096))
        tp.add_argument("--seed", type=int, default=None if run else 0,
                        help=data_help("seed of the Monte Carlo samples", 0))
    if run:
        tp.add_argument("--store", default=None, help="with --run: the store holding the run (default: none)")
        tp.add_argument("--run", default=None, help="a run id: compute the floor on that run's own evaluation "
                                                    "contexts (its data fields, eval_contexts, eval_seed) "
                                                    "(default: none: Monte Carlo contexts)")
    if "temperatures" in flags:
        tp.add_argument("--temperatures", default=None,
                        help="comma list of head temperatures (default: -10 ... 500, 101 values)")
    if "finite_P" in flags:
        tp.add_argument("--finite-P", dest="finite_P", action="store_true",
                        help="add the free curve of the empirical S at this P (easy task; "
                             "--samples contexts to fit, as many to measure)")
    json_flag(tp)
    if "samples" in flags:
        allow_memory_flag(tp)
