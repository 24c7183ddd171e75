"""Plug-in files: Python files an environment variable names, imported like modules of the package.

Two registries load them the same way: the experiments' (DEPTHSCALE_EXPERIMENTS, depthscale.experiments.registry)
and the model kinds' (DEPTHSCALE_KINDS, depthscale.config.kind_registry). The variable names files or
directories (of *.py files, those starting with '_' left out), separated by the OS path separator
(':' on Linux). A file that fails to import (any exception but KeyboardInterrupt: SystemExit and
GeneratorExit too) is an InputError naming the variable and the file, one line; an import of a module
path of depthscale 0.1's flat layout names the module's new home (`compat.MOVED`). A plug-in source
must be a regular file of at most MAX_SOURCE_BYTES (a FIFO would block its read, /dev/zero never end).

What a plug-in registered runs under `guarded` (its figure, table, claims, its kind's methods): a
BaseException other than KeyboardInterrupt (SystemExit, GeneratorExit, a subclass of its own) is
turned into a PluginError naming the file, so it fails as an error, never exits the program (a
SystemExit(0) is no success) and never shows a traceback.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import re
import stat
import sys
from pathlib import Path
from typing import Callable

from depthscale.base.atomic import file_kind
from depthscale.base.compat import moved_hint
from depthscale.base.errors import InputError

MAX_SOURCE_BYTES = 16 * 2**20  # a plug-in's source (a .py file of 16 MiB is no hand-written plug-in)


class PluginError(InputError):
    """Plug-in code raised a BaseException that is no Exception (SystemExit, GeneratorExit, ...)."""


def plugin_files(env: str, what: str, value: str | None = None) -> list[Path]:
    """The plug-in files the variable `env` (or `value`) names: files as given, directories as their
    *.py files (sorted), in order. `what` names a plug-in in the message of a path that is neither."""
    value = os.environ.get(env, "") if value is None else value
    out: list[Path] = []
    for part in (p for p in value.split(os.pathsep) if p.strip()):
        path = Path(part).expanduser()
        if path.is_dir():
            out += sorted(f for f in path.glob("*.py") if not f.name.startswith("_"))
        elif os.path.exists(path):
            out.append(path)
        else:
            raise InputError(f"{env}: no {what} file or directory {part!r}")
    for f in out:
        _check_source(f, env, what)
    return out


def _check_source(path: Path, env: str, what: str) -> None:
    """InputError unless `path` is a regular file (after links) of at most MAX_SOURCE_BYTES."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise InputError(f"{env}: {what} file {path} cannot be read: {e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{env}: {what} file {path} is {file_kind(st.st_mode)}, not a regular file")
    if st.st_size > MAX_SOURCE_BYTES:
        raise InputError(f"{env}: {what} file {path} is {st.st_size} bytes, over the {MAX_SOURCE_BYTES} "
                         f"a plug-in source may hold")


def _why(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


def load_plugin(path: Path, env: str, what: str) -> None:
    """Import the file `path` as a module (once per file: a second call does nothing)."""
    name = "depthscale_plugin_" + re.sub(r"\W", "_", path.stem) + "_" + hashlib.sha1(
        str(path.resolve()).encode()).hexdigest()[:8]
    if name in sys.modules:
        return
    _check_source(path, env, what)
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
        raise InputError(f"{env}: {what} file {path} failed to load: {_why(e)}{moved_hint(e)}") from None


def guarded(fn: Callable, path: Path, env: str, what: str) -> Callable:
    """`fn` (a function of the plug-in file `path`) called so that a BaseException other than
    KeyboardInterrupt and Exception's own becomes a PluginError naming the file, one line."""
    if getattr(fn, "__plugin_guard__", False) or not callable(fn):
        return fn

    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (KeyboardInterrupt, Exception):
            raise
        except BaseException as e:  # noqa: BLE001 - SystemExit(0) from a plug-in is an error, never success
            raise PluginError(f"{env}: {what} file {path}: {getattr(fn, '__qualname__', fn)} raised "
                              f"{_why(e)}") from None

    call.__plugin_guard__ = True
    return call


def guard_class(cls: type, path: Path, env: str, what: str) -> type:
    """Every function the body of `cls` states (methods, class and static methods) `guarded`, in place."""
    for name, attr in list(vars(cls).items()):
        if name.startswith("__") and name not in ("__init__", "__call__"):
            continue
        if isinstance(attr, (classmethod, staticmethod)):
            setattr(cls, name, type(attr)(guarded(attr.__func__, path, env, what)))
        elif callable(attr) and not isinstance(attr, type):
            setattr(cls, name, guarded(attr, path, env, what))
    return cls


__all__ = ["plugin_files", "load_plugin", "guarded", "guard_class", "PluginError", "MAX_SOURCE_BYTES"]
