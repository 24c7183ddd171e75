"""What the command modules share: how a command prints (one JSON line with --json, else text;
the preset it used on stderr) and the flags several commands take."""

from __future__ import annotations

import json
import sys

from depthscale.base.atomic import plain
from depthscale.config.run import PRESETS

STORE_HELP = "store directory: it holds runs/ and sweeps/ (a path to its runs/ directory works too)"


def print_json(obj) -> None:
    print(json.dumps(plain(obj), separators=(", ", ": ")))


def emit(args, obj: dict, text: str | None = None) -> None:
    """One JSON line with --json, else a human line (default: key=value pairs)."""
    if getattr(args, "json", False):
        print_json(obj)
    else:
        print(text if text is not None else "  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                                       for k, v in obj.items()))


def say_preset(preset) -> None:
    """Which preset a command used: one line on stderr (stdout stays clean for --json)."""
    print(f"depthscale: preset {preset}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- flags several commands take
def preset_flag(sp, required=False):
    sp.add_argument("--preset", choices=PRESETS, default=None if required else "cpu", required=required,
                    help="smoke (seconds: proves the pipeline, not the science), cpu (2 cores), "
                         "paper (full scale: GPUs); the command says on stderr which it used")


def device_flag(sp):
    sp.add_argument("--device", choices=["cpu", "cuda", "auto"], default="cpu",
                    help="where to train (auto: cuda if available)")


def store_flag(sp, hlp=STORE_HELP):  # the --store flag of each command
    sp.add_argument("--store", required=True, help=hlp)


def json_flag(sp, hlp="print JSON on stdout (messages go to stderr)"):
    sp.add_argument("--json", action="store_true", help=hlp)


def log_flag(sp):
    sp.add_argument("--log", choices=["none", "tensorboard"], default="none",
                    help="also write each run's curves as TensorBoard event files into <run dir>/tensorboard "
                         "(needs pip install 'depthscale[tensorboard]')")


def allow_memory_flag(sp):
    sp.add_argument("--allow-memory", dest="allow_memory", action="store_true",
                    help="run even where the memory estimate exceeds the available memory")
