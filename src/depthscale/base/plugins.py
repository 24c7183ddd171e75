"""Plug-in files: Python files an environment variable names, imported like modules of the package.

Two registries load them the same way: the experiments' (DEPTHSCALE_EXPERIMENTS, depthscale.experiments.registry)
and the model kinds' (DEPTHSCALE_KINDS, depthscale.config.kind_registry). The variable names files or
directories (of *.py files, those starting with '_' left out), separated by the OS path separator
(':' on Linux). A file that fails to import (any exception but KeyboardInterrupt: SystemExit and
GeneratorExit too) is an InputError naming the variable and the file, one line; an import of a module
path of depthscale 0.1's flat layout names the module's new home (`compat.MOVED`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import sys
from pathlib import Path

from depthscale.base.compat import moved_hint
from depthscale.base.errors import InputError


def plugin_files(env: str, what: str, value: str | None = None) -> list[Path]:
    """The plug-in files the variable `env` (or `value`) names: files as given, directories as their
    *.py files (sorted), in order. `what` names a plug-in in the message of a path that is neither."""
    value = os.environ.get(env, "") if value is None else value
    out: list[Path] = []
    for part in (p for p in value.split(os.pathsep) if p.strip()):
        path = Path(part).expanduser()
        if path.is_dir():
            out += sorted(f for f in path.glob("*.py") if not f.name.startswith("_"))
        elif path.is_file():
            out.append(path)
        else:
            raise InputError(f"{env}: no {what} file or directory {part!r}")
    return out


def load_plugin(path: Path, env: str, what: str) -> None:
    """Import the file `path` as a module (once per file: a second call does nothing)."""
    name = "depthscale_plugin_" + re.sub(r"\W", "_", path.stem) + "_" + hashlib.sha1(
        str(path.resolve()).encode()).hexdigest()[:8]
    if name in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except KeyboardInterrupt:  # Ctrl-C while it loads: the program stops as on any other Ctrl-C
        del sys.modules[name]
        raise
    except BaseException as e:  # noqa: BLE001 - SystemExit, GeneratorExit too: the plug-in failed, one line
        del sys.modules[name]
        why = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        raise InputError(f"{env}: {what} file {path} failed to load: {why}{moved_hint(e)}") from None


__all__ = ["plugin_files", "load_plugin"]
