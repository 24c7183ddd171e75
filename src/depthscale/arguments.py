"""Command-line input: every flag parsed and checked before any work is done, bad input raised as a
UsageError (one line; the CLI prints it and exits with code 2), the run options generated from
RunConfig's fields. cli.py builds the parser and runs the commands with these."""

from __future__ import annotations

import argparse
import dataclasses
import math
from pathlib import Path

from depthscale.config import FIELD_CHOICES, RunConfig, field_docs, make_config
from depthscale.errors import UserError

MAX_SEED = 2**60  # seeds are mixed into 64-bit generator seeds (contexts.step_seed, model init)
MAX_SAMPLES = 10**8  # theory: Monte Carlo samples (2e5 take seconds; memory is checked as well)
MAX_BENCH_STEPS = 100_000  # bench: timed steps (the default is 20)
MAX_EXPONENT = 100.0  # spectrum exponents a, b: k^-a underflows to 0 far beyond (the paper's are <= 2)


class UsageError(UserError):
    """Bad input from the command line."""


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (argparse's default prints the usage too)
        raise UsageError(message)


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
    vals = parse_floats(s, name)
    bad = [v for v in vals if not (v >= 1 and float(v).is_integer())]
    if bad:
        raise UsageError(f"--{name} must be integers >= 1, got {bad[0]!r}")
    return [int(v) for v in vals]


def path_arg(value: str, name: str) -> Path:
    """A --store / --out path: never empty (an empty one would mean the current directory)."""
    if value is None or not str(value).strip():
        raise UsageError(f"--{name} is empty: give a path")
    return Path(value)


def _check_parents(out: Path, value: str) -> None:
    """The nearest existing parent of `out` is a directory (nothing is created here)."""
    for parent in out.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise UsageError(f"--out {value!r}: {parent} is a file, not a directory")
            break


def out_dir(value: str) -> Path:
    """--out of reproduce / report: a directory, existing or to be created (checked before any work)."""
    out = path_arg(value, "out")
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {value!r} is a file, not a directory")
    _check_parents(out, value)
    return out


def out_file(value: str) -> Path:
    """--out of collect: a .parquet or .csv file to (over)write."""
    out = path_arg(value, "out")
    if out.suffix.lower() not in (".parquet", ".csv"):
        raise UsageError(f"--out {value!r}: use a .parquet or .csv suffix")
    if out.is_dir():
        raise UsageError(f"--out {value!r} is a directory")
    _check_parents(out, value)
    return out


def check_int(value, name: str, lo: int, hi: int | None = None) -> None:
    if value is None:
        return
    if value < lo or (hi is not None and value > hi):
        rule = f">= {lo}" if hi is None else f"between {lo} and {hi:,}"
        raise UsageError(f"--{name} must be {rule}, got {value}")


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


def add_config_fields(p: argparse.ArgumentParser) -> None:
    """A flag per RunConfig field (but preset): its comment as help, its choices where it takes one
    of a set of words, and its default: the preset's (and the model's recipe), shown for cpu."""
    docs = field_docs()
    cpu = make_config("cpu")
    g = p.add_argument_group("run configuration (every RunConfig field; unset ones come from --preset)")
    for f in dataclasses.fields(RunConfig):
        if f.name == "preset":
            continue
        typ = {"int": int, "float": float, "str": str, "bool": parse_bool}[str(f.type)]
        names = ["--" + f.name] + (["--depth"] if f.name == "L" else [])
        choices = FIELD_CHOICES.get(f.name)
        metavar = "{true,false}" if str(f.type) == "bool" else (None if choices else f.name)
        value = getattr(cpu, f.name)
        shown = str(value).lower() if isinstance(value, bool) else value
        g.add_argument(*names, dest=f.name, type=typ, default=None, choices=choices, metavar=metavar,
                       help=f"{docs.get(f.name, '')} (default: the preset's; cpu, {cpu.model}, {cpu.task}: {shown})")


def config_from(args) -> RunConfig:
    over = {f.name: getattr(args, f.name) for f in dataclasses.fields(RunConfig)
            if f.name != "preset" and getattr(args, f.name, None) is not None}
    return make_config(args.preset, **over)


def pick_device(name: str) -> str:
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device is available")
    return name


def open_store(path: str):
    from depthscale.store import Store

    return Store(path_arg(path, "store"))


def existing_store(path: str):
    """The store at `path` opened read-only; a missing one is an error (and is not created)."""
    from depthscale.store import Store

    return Store(path_arg(path, "store"), readonly=True)


def store_if_any(path: str):
    """The store at `path` read-only if it exists, else None (nothing is created)."""
    from depthscale.errors import StoreError
    from depthscale.store import Store

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
    from depthscale.training import check_loggers

    return () if value in (None, "none") else check_loggers((value,))


def check_memory(packs, executor: str, workers, device: str, allow: bool) -> None:
    if allow:
        return
    from depthscale.sweeps import check_memory as check_packs_memory

    check_packs_memory(packs, executor, workers, device, flag="--allow-memory")


def parse_shard(s: str | None):
    if s is None:
        return None
    from depthscale.sweeps import parse_shard

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
        from depthscale.errors import MissingExtraError
        from depthscale.executors import import_submitit

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
    from depthscale.memory import available_bytes, fmt_bytes

    taus = 101 if temperatures is None else len(parse_floats(temperatures, "temperatures"))
    # bytes per Monte Carlo sample, measured (floor: 8 float64 per input dimension; softmax-floor:
    # 8 per temperature; the finite-P curve: 2 per entry of a d x d matrix)
    per = {"floor": 64 * args.d, "softmax-floor": 64 * taus,
           "curve": 16 * args.d * args.d if getattr(args, "finite_P", False) else 0}.get(args.what, 0)
    need, avail = per * args.samples, available_bytes("cpu")
    if avail is not None and need > avail and not args.allow_memory:
        raise UsageError(f"theory {args.what} with --samples {args.samples} needs about {fmt_bytes(need)} of "
                         f"memory (estimate); {fmt_bytes(avail)} is available: fewer samples, or --allow-memory")


__all__ = ["UsageError", "Parser", "HelpFormatter", "help_text", "parse_experiments", "parse_loggers", "parse_floats", "parse_depths", "path_arg", "out_dir", "out_file",
           "check_int", "check_real", "add_config_fields", "config_from", "pick_device", "open_store", "existing_store",
           "store_if_any", "check_memory", "parse_shard", "slurm_options", "require_submitit", "check_theory",
           "SLURM_FLAGS", "MAX_SEED", "MAX_SAMPLES", "MAX_BENCH_STEPS", "MAX_EXPONENT"]
