"""The `depthscale` command. Run options are generated from RunConfig's fields, so the CLI and the
stored configuration can never disagree. Bad input (any errors.UserError: arguments.py checks
the flags, the library the rest): one line on stderr, exit code 2, and the store is left as it was
(docs/bad_inputs.md lists every bad input tested and what it gets); so is a write the filesystem
refuses (full, read-only, no permission: "depthscale: error: cannot write: no space left on device
(<path>)"). A sweep or reproduce in which runs failed exits 3 (commands.runs.EXIT_FAILED_RUNS). Any
other exception is a bug and shows its traceback. Ctrl-C (SIGINT) ends a command with one line
(for train, sweep and reproduce: the command that resumes it) and exit code 130. Warnings are one line each on stderr ("depthscale: warning: ...")."""

from __future__ import annotations

import argparse
import os
import sys
import warnings

from depthscale.base.userpaths import UsageError
from depthscale.cli.arguments import Parser, add_spelling_aliases, help_context
from depthscale.cli.commands import outputs, runs, theory
# the commands' handlers and names, as this module held them before they moved to depthscale.cli.commands
from depthscale.base.errors import UserError, first_refused, is_storage_error
from depthscale.config.run import ConfigError

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # Ctrl-C (SIGINT): 128 + 2, as a shell reports it
RESUMABLE = ("train", "sweep", "reproduce")  # commands that, run again, take up where they stopped


def build_parser(help_for: tuple[str, dict] | None = None, train_fields: bool = True) -> argparse.ArgumentParser:
    """The command's parser. `help_for`: (preset, fields among arguments.CONTEXT_FIELDS) whose
    defaults `train --help` shows (main reads them from the command line; default: cpu).
    `train_fields`: give train its flag per RunConfig field — their defaults come from the model
    kinds' registrations, which load torch (≈ 2 s), so main asks for them only when the command
    is train."""
    p = Parser(prog="depthscale", description="Inverse-depth scaling in attention (arXiv 2610.11063).")
    p.add_argument("--version", action="store_true", help="print the package version and exit")
    sub = p.add_subparsers(dest="cmd", required=False, parser_class=Parser)
    runs.add_parsers(sub, help_for, train_fields)  # train, sweep, status, collect
    theory.add_parsers(sub)  # fit, theory
    outputs.add_parsers(sub)  # plot, compare, reproduce, report, bench
    add_spelling_aliases(p)  # --max-steps and --max_steps, --pack-memory and --pack_memory, ...
    return p


def _one_line_warning(message, category, filename, lineno, file=None, line=None) -> None:
    text = str(message).splitlines()[0] if str(message) else category.__name__
    print(f"depthscale: warning: {text}", file=sys.stderr if file is None else file)


def interrupted_line(argv: list[str]) -> str:
    """The one line a Ctrl-C ends a command with: for a command that resumes (train, sweep,
    reproduce: finished runs are kept, a killed run resumes from its checkpoint), the command
    line that resumes it."""
    import shlex

    cmd = next((a for a in argv if not a.startswith("-")), None)
    if cmd in RESUMABLE:
        return (f"depthscale: interrupted; the runs finished so far are kept, and the others resume from their "
                f"last checkpoint with: {shlex.join(['depthscale', *argv])}")
    return "depthscale: interrupted"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else [str(a) for a in argv]
    shown = warnings.showwarning
    warnings.showwarning = _one_line_warning
    try:
        cmd = next((a for a in argv if not a.startswith("-")), None)
        parser = build_parser(help_context(argv), cmd == "train")  # train --help: its preset's and model's defaults
        args = parser.parse_args(argv)
        if args.version:
            from depthscale.base.provenance import __version__

            print(f"depthscale {__version__}")
            return 0
        if args.cmd is None:
            raise UsageError("the following arguments are required: cmd")
        if args.cmd in ("train", "sweep", "reproduce"):  # a bad $DEPTHSCALE_FUSED: refused before any run starts
            from depthscale.data.kernels import enabled

            enabled()
        return args.fn(args) or 0
    except UserError as exc:  # the user's input; anything else is a bug and shows its traceback
        if os.environ.get("DEPTHSCALE_DEBUG") and not isinstance(exc, (UsageError, ConfigError)):
            raise
        if is_storage_error(exc):  # the write that first met the full disk, not the record of it
            exc = first_refused(exc)
        print(f"depthscale: error: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:  # Ctrl-C: a normal way to stop; nothing is lost (resume from the store)
        pass  # (below, once the interrupt's traceback and what its frames hold are dropped)
    except OSError as exc:  # a write (or mkdir) the filesystem refused: full, read-only, no permission
        if not is_storage_error(exc) or os.environ.get("DEPTHSCALE_DEBUG"):
            raise
        print(f"depthscale: error: {first_refused(exc)}", file=sys.stderr)  # as a StorageError would
        return EXIT_USAGE
    finally:
        warnings.showwarning = shown
    print(interrupted_line(argv), file=sys.stderr)
    return EXIT_INTERRUPTED


__all__ = ["main", "build_parser", "EXIT_USAGE", "EXIT_INTERRUPTED", "interrupted_line"]


if __name__ == "__main__":
    sys.exit(main())

