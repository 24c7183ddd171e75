"""Command-line input: every flag parsed and checked before any work is done, bad input raised as a
UsageError (one line; the CLI prints it and exits with code 2), the run options generated from
RunConfig's fields. cli.py builds the parser and runs the commands with these."""

from __future__ import annotations

import argparse
import dataclasses
import math
import warnings

from depthscale.config.run import (FIELD_CHOICES, FIELD_HELP, FIELD_NAMES, ID_EXCLUDED_FIELDS, ID_OPTIONAL_FIELDS, INT_FIELDS, MAX_SIZE,
                               RENAMED_FIELDS, ConfigError, RunConfig, config_and_sources, make_config, preset_fields, shown)
from depthscale.base.errors import UserError
from depthscale.base.userpaths import UsageError, path_arg

MAX_SEED = 2**60  # seeds are mixed into 64-bit generator seeds (seeds.step_seed, model init)
MAX_SAMPLES = 10**8  # theory: Monte Carlo samples (2e5 take seconds; memory is checked as well)
MAX_BENCH_STEPS = 100_000  # bench: timed steps (the default is 20)
# theory --depths: far past the paper's 256 (softmax-floor's best stack of 10,000 heads takes ~25 s,
# its search grows with L; 1e300 overflowed numpy's integers)
MAX_THEORY_DEPTH = 10_000
MAX_EXPONENT = 100.0  # spectrum exponents a, b: k^-a underflows to 0 far beyond (the paper's are <= 2)


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (argparse's default prints the usage too)
        raise UsageError(message)

    def _get_option_tuples(self, option_string):
        # an abbreviation matching both spellings of one flag (--max_steps, --max-steps) is not ambiguous
        seen, out = set(), []
        for tup in super()._get_option_tuples(option_string):
            if id(tup[0]) not in seen:
                seen.add(id(tup[0]))
                out.append(tup)
        return out


def other_spelling(option: str) -> str | None:
    """--max_steps -> --max-steps and --pack-memory -> --pack_memory (None for a flag of one word)."""
    if not option.startswith("--"):
        return None
    body = option[2:]
    if "_" in body:
        return "--" + body.replace("_", "-")
    if "-" in body:
        return "--" + body.replace("-", "_")
    return None


def add_spelling_aliases(parser: argparse.ArgumentParser) -> None:
    """Every flag of `parser` and its subcommands answers to both spellings, --max_steps and
    --max-steps. The other spelling is registered with the parser only (not on the action), so
    help, usage and error messages name each flag once, as it was declared."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                add_spelling_aliases(sub)
            continue
        for opt in action.option_strings:
            alt = other_spelling(opt)
            if alt is not None and alt not in parser._option_string_actions:
                parser._option_string_actions[alt] = action


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and examples as written; every option's help ends with its default (choices
    are shown by argparse as {a,b,...})."""

    def _get_help_string(self, action):
        text = action.help or ""
        if "default:" in text or action.default in (None, argparse.SUPPRESS) or action.required \
                or isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)) \
                or not action.option_strings:
            return text
        return f"{text} (default: %(default)s)".lstrip()


def help_text(desc: str, example: str) -> dict:
    """A subcommand's description and its example (every --help shows one)."""
    return dict(description=desc, epilog="example:\n  " + example, formatter_class=HelpFormatter)


def parse_floats(s: str, name: str) -> list[float]:
    try:
        vals = [float(v) for v in s.split(",") if v.strip()]
    except ValueError:
        raise UsageError(f"--{name} must be a comma-separated list of numbers, got {s!r}") from None
    if not vals:
        raise UsageError(f"--{name} is empty")
    bad = [v for v in vals if not math.isfinite(v)]
    if bad:
        raise UsageError(f"--{name} must hold finite numbers, got {bad[0]!r}")
    return vals


def parse_depths(s: str, name: str = "depths") -> list[int]:
    """theory's depths: whole numbers from 1 to MAX_THEORY_DEPTH."""
    vals = parse_floats(s, name)
    bad = [v for v in vals if not (1 <= v <= MAX_THEORY_DEPTH and float(v).is_integer())]
    if bad:
        raise UsageError(f"--{name} must be integers >= 1 and <= {MAX_THEORY_DEPTH:,}, got {bad[0]!r}")
    return [int(v) for v in vals]


def check_int(value, name: str, lo: int, hi: int | None = None) -> None:
    if value is None:
        return
    if value < lo or (hi is not None and value > hi):
        rule = f">= {lo}" if hi is None else f"between {lo} and {hi:,}"
        raise UsageError(f"--{name} must be {rule}, got {value}")


def check_workers(value) -> None:
    """--workers: >= 1 and at most sweeps.MAX_WORKERS (10^400 overflowed the memory budget's division)."""
    from depthscale.runs.sweeps import MAX_WORKERS

    check_int(value, "workers", 1)
    if value is not None and value > MAX_WORKERS:
        raise UsageError(f"--workers must be <= {MAX_WORKERS:,}, got {shown(value)}")


def check_real(value, name: str) -> None:
    if value is not None and not math.isfinite(value):
        raise UsageError(f"--{name} must be a finite number, got {value!r}")


def parse_bool(text: str) -> bool:
    """A boolean config flag: true/false, yes/no, 1/0, on/off."""
    low = text.strip().lower()
    if low in ("true", "yes", "1", "on"):
        return True
    if low in ("false", "no", "0", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


SOURCE_HELP = ("default: RunConfig's own default; preset: the preset's training fields; geometry: the preset's "
               "d, P, N for the model; recipe: the tuned recipe of (preset, model, task); depth: the step budget "
               "that grows with L; flag: given on the command line")  # config.SOURCES, in make_config's order
# the fields that pick make_config's layers (and so the defaults --help shows)
CONTEXT_FIELDS = ("model", "task", "k", "L")


def _shown(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def add_config_fields(p: argparse.ArgumentParser, preset: str = "cpu", context: dict | None = None) -> None:
    """A flag per RunConfig field (but preset): its help (config.FIELD_HELP), its choices where it
    takes one of a set of words, and its default: make_config(preset, **context)'s value and where
    it comes from (config.config_and_sources). `context` holds the fields among CONTEXT_FIELDS given on the command
    line (main reads them before it shows --help), so `train --preset smoke --model linear --help`
    shows the defaults a run with those flags gets."""
    context = {k: v for k, v in (context or {}).items() if v is not None}
    try:
        cfg, src = config_and_sources(preset, **context)
    except UserError:  # a bad flag among them: the parse that follows says which
        context = {}
        cfg, src = config_and_sources(preset)
    for_ = ", ".join([f"--preset {preset}"] + [f"--{k} {_shown(getattr(cfg, k))}" for k in CONTEXT_FIELDS])
    g = p.add_argument_group(
        "run configuration",
        f"Every RunConfig field. Defaults shown for {for_}, each with its source in brackets ({SOURCE_HELP}). "
        f"--print-config shows them all for any flags without training.")
    for f in dataclasses.fields(RunConfig):
        if f.name == "preset":
            continue
        typ = {"int": int, "float": float, "str": str, "bool": parse_bool}[str(f.type)]
        names = ["--" + f.name] + (["--depth"] if f.name == "L" else [])
        choices = FIELD_CHOICES.get(f.name)
        metavar = "{true,false}" if str(f.type) == "bool" else (None if choices else f.name)
        shown = _shown(getattr(cfg, f.name))
        tail = f"(given: {shown})" if src[f.name] == "flag" else f"(default: {shown} [{src[f.name]}])"
        text = FIELD_HELP[f.name].replace("%", "%%")  # argparse %-formats help strings
        g.add_argument(*names, dest=f.name, type=typ, default=None, choices=choices, metavar=metavar,
                       help=f"{text} {tail}".strip())


def help_context(argv: list[str]) -> tuple[str, dict] | None:
    """For `train ... --help`: the preset and the CONTEXT_FIELDS given before the help is shown
    (None when no train help is asked for). A bad value is left for the real parse to report."""
    argv = list(argv)
    end = argv.index("--") if "--" in argv else len(argv)
    if not argv or argv[0] != "train" or not any(a in ("-h", "--help") for a in argv[1:end]):
        return None
    p = Parser(add_help=False)
    p.add_argument("--preset", default="cpu")
    p.add_argument("--model")
    p.add_argument("--task")
    p.add_argument("--k", type=int)
    p.add_argument("--L", "--depth", dest="L", type=int)
    add_spelling_aliases(p)
    try:
        ns, _ = p.parse_known_args([a for a in argv[1:end] if a not in ("-h", "--help")])
    except UserError:
        return None
    try:
        preset_fields(ns.preset)
    except ConfigError:
        return None
    return ns.preset, {k: getattr(ns, k) for k in CONTEXT_FIELDS if getattr(ns, k) is not None}


def config_overrides(args) -> dict:
    """The RunConfig fields given as flags (preset apart)."""
    return {f.name: getattr(args, f.name) for f in dataclasses.fields(RunConfig)
            if f.name != "preset" and getattr(args, f.name, None) is not None}


def config_from(args) -> RunConfig:
    return make_config(args.preset, **config_overrides(args))


def _record_fields(rec: dict, where: str) -> dict:
    """A run record as one grid table of scalars: a config.json ({"run_id", "config": {...},
    provenance}) gives its config (an unknown field in it is an error); a collected row (run_id,
    every config field, state and metric columns) gives its config fields and must hold every
    field of a run id (a missing one, e.g. misspelt, is named)."""
    if isinstance(rec.get("config"), dict):
        fields = {RENAMED_FIELDS.get(k, k): v for k, v in rec["config"].items()}
        unknown = sorted(set(fields) - set(FIELD_NAMES))
        if unknown:
            raise ConfigError(f"{where}: unknown config field {unknown[0]!r}")
    else:
        fields = {RENAMED_FIELDS.get(k, k): v for k, v in rec.items() if RENAMED_FIELDS.get(k, k) in FIELD_NAMES}
        missing = [n for n in FIELD_NAMES if n not in fields and n not in ID_EXCLUDED_FIELDS + ID_OPTIONAL_FIELDS]
        if missing:
            raise ConfigError(f"{where}: a run record (it has run_id) without the config field {missing[0]!r}")
    out = {}
    for k, v in fields.items():
        if k == "preset" or v is None or (isinstance(v, float) and math.isnan(v)):
            continue  # the preset is a label (the run id leaves it out); null: an older run without the field
        if k in INT_FIELDS and isinstance(v, float) and v.is_integer():
            v = int(v)  # a table column that held a NaN somewhere is float
        out[k] = v
    try:  # the run id it names, where the config does not give it (a field changed since): say so
        rid = make_config("cpu", **out).run_id
    except UserError:
        return out  # expand_grid reports the bad field
    if isinstance(rec.get("run_id"), str) and rec["run_id"] != rid:
        warnings.warn(f"{where}: its config gives run id {rid}, not the run_id {rec['run_id']!r} it holds")
    return out


def grid_from_records(grid, where: str = "grid"):
    """`sweep --grid` input with run records turned into grid tables: a dict with a run_id (a
    run's config.json, or one collected row as JSON) becomes its config's fields, so the sweep
    is that run again (same run id); a list may mix records and grid tables. Anything else is
    returned as it was, for sweeps.expand_grid to read (and to refuse unknown keys)."""
    if isinstance(grid, dict) and "run_id" in grid:
        return _record_fields(grid, where)
    if isinstance(grid, list):
        return [_record_fields(g, where) if isinstance(g, dict) and "run_id" in g else g for g in grid]
    return grid


def pick_device(name: str) -> str:
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device is available")
    return name


def open_store(path: str):
    from depthscale.store.store import Store

    return Store(path_arg(path, "store"))


def existing_store(path: str):
    """The store at `path` opened read-only; a missing one is an error (and is not created)."""
    from depthscale.store.store import Store

    return Store(path_arg(path, "store"), readonly=True)


def store_if_any(path: str):
    """The store at `path` read-only if it exists, else None (nothing is created)."""
    from depthscale.base.errors import StoreError
    from depthscale.store.store import Store

    root = path_arg(path, "store")
    try:
        return Store(root, readonly=True)
    except StoreError:
        return None


def parse_experiments(text: str) -> str:
    """--experiment / reproduce's id: 'all', 'beyond' or a comma list (spaces around the commas allowed),
    as the registry reads it."""
    parts = [t.strip() for t in str(text).split(",")]
    return ",".join(parts)


def parse_loggers(value: str) -> tuple[str, ...]:
    """--log: 'none' or a logger (the package it needs is checked: MissingExtraError names the extra)."""
    from depthscale.train.live import check_loggers

    return () if value in (None, "none") else check_loggers((value,))


def check_memory(packs, executor: str, workers, device: str, allow: bool) -> None:
    if allow:
        return
    from depthscale.runs.sweeps import check_memory as check_packs_memory

    check_packs_memory(packs, executor, workers, device, flag="--allow-memory")


def parse_shard(s: str | None):
    if s is None:
        return None
    from depthscale.runs.sweeps import parse_shard

    return parse_shard(s)


# --slurm-X flag -> the slurm executor's option (sweeps.SLURM_OPTIONS)
SLURM_FLAGS = {"partition": "partition", "time": "time_min", "parallelism": "array_parallelism",
               "gpus": "gpus", "cpus": "cpus", "mem": "mem_gb"}


def slurm_options(args) -> dict:
    given = {flag: getattr(args, "slurm_" + flag) for flag in SLURM_FLAGS
             if getattr(args, "slurm_" + flag, None) is not None}
    if given and args.executor != "slurm":
        raise UsageError(f"--slurm-{next(iter(given))} needs --executor slurm")
    for flag, v in given.items():
        if flag in ("time", "parallelism", "cpus"):
            check_int(v, "slurm-" + flag, 1)
        elif flag in ("gpus",):
            check_int(v, "slurm-" + flag, 0)
        elif flag == "mem":
            check_real(v, "slurm-mem")
            if v <= 0:
                raise UsageError(f"--slurm-mem must be > 0 (GB), got {v!r}")
        elif not str(v).strip():
            raise UsageError(f"--slurm-{flag} is empty")
    return {SLURM_FLAGS[flag]: v for flag, v in given.items()}


def require_submitit(executor: str) -> None:
    if executor == "slurm":
        from depthscale.base.errors import MissingExtraError
        from depthscale.runs.executors import import_submitit

        try:
            import_submitit()
        except MissingExtraError:
            raise UsageError("--executor slurm needs submitit: pip install 'depthscale[slurm]'") from None


def check_theory(args) -> None:
    """Every theory input, whether or not the chosen computation reads it, and the memory its
    Monte Carlo would take."""
    for name in ("a", "b"):
        v = getattr(args, name)
        check_real(v, name)
        if abs(v) > MAX_EXPONENT:
            raise UsageError(f"--{name} must be between 0 and {MAX_EXPONENT:g}, got {v!r}")
    for name in ("d", "P", "k", "samples"):
        check_int(getattr(args, name, None), name, 1, MAX_SAMPLES if name == "samples" else None)
        if name != "samples" and (getattr(args, name, None) or 0) > MAX_SIZE:  # (config.MAX_SIZE, as a run's)
            raise UsageError(f"--{name} must be <= {MAX_SIZE:,}, got {shown(getattr(args, name))}")
    seed = getattr(args, "seed", 0)
    if not 0 <= seed < MAX_SEED:
        raise UsageError(f"--seed must be an integer in [0, 2**60), got {seed}")
    if getattr(args, "k", None) is not None and args.k > args.P:
        raise UsageError(f"k must be <= P = {args.P}, got {args.k}")
    if getattr(args, "depths", None) is not None:
        parse_depths(args.depths)
    temperatures = getattr(args, "temperatures", None)
    if temperatures is not None:
        parse_floats(temperatures, "temperatures")
    if args.what == "exponents":
        return
    from depthscale.train.memory import available_bytes, fmt_bytes, theory_bytes

    depths = parse_depths(args.depths) if getattr(args, "depths", None) is not None else [64]
    taus = 101 if temperatures is None else len(parse_floats(temperatures, "temperatures"))
    # d and P count: one context of P x d is computed at once however few the samples
    need = theory_bytes(args.what, args.d, getattr(args, "P", 1), getattr(args, "k", 1), getattr(args, "samples", 0) or 0,
                        taus, max(depths), getattr(args, "finite_P", False))
    avail = available_bytes("cpu")
    if avail is not None and need > avail and not getattr(args, "allow_memory", False):
        used = ("d",) if args.what == "curve" and not getattr(args, "finite_P", False) else ("d", "P", "samples")
        size = ", ".join(f"--{n} {getattr(args, n):,}" for n in used)
        raise UsageError(f"theory {args.what} with {size} needs about {fmt_bytes(need)} of memory (estimate); "
                         f"{fmt_bytes(avail)} is available: smaller numbers, or --allow-memory")


__all__ = ["other_spelling", "add_spelling_aliases", "config_overrides", "help_context", "grid_from_records",
           "CONTEXT_FIELDS", "Parser", "HelpFormatter", "help_text", "parse_experiments", "parse_loggers",
           "parse_floats", "parse_depths", "check_int", "check_workers", "check_real", "add_config_fields",
           "config_from", "pick_device", "open_store", "existing_store", "store_if_any", "check_memory", "parse_shard",
           "slurm_options", "require_submitit", "check_theory", "SLURM_FLAGS", "MAX_THEORY_DEPTH", "MAX_SEED",
           "MAX_SAMPLES", "MAX_BENCH_STEPS", "MAX_EXPONENT"]
