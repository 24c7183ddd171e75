"""Files written whole or not at all, and the JSON in them.

Every file depthscale writes goes through `write_atomic`: a temp file beside the target, fsync,
then ``os.replace``, so a reader sees the old content or the new one, never a part. New files get
the mode open() would give under the umask (mkstemp alone gives 0600, which would hide results
from collaborators on a shared filesystem).

JSON: `plain` turns numpy and torch values into Python ones; with strict=True (the store's files,
the CLI's output, claims) every non-finite number becomes null, never a bare NaN or Infinity.
`as_float` reads a number back (null, a string or a bool read as NaN).
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import math
import os
import shutil
import stat
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from depthscale.base.errors import is_storage_error, storage_error


def _file_mode() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


FILE_MODE = _file_mode()  # mode of every new file (what open() gives under the umask)


def fsync_dir(directory: Path) -> None:
    """Make a rename inside `directory` durable (best effort: not every filesystem allows it)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_atomic(path: str | os.PathLike, write: Callable) -> None:
    """Call write(binary file) on a temp file beside `path`, fsync it, then rename it over `path`.
    A write the filesystem refuses (full, read-only, ...: errors.STORAGE_ERRNOS) raises
    errors.StorageError naming `path`; the temp file is removed and `path` is left as it was."""
    path = Path(path)
    try:
        _replace_with(path, write)
    except OSError as e:
        if is_storage_error(e):
            raise storage_error(e, path) from None
        raise
    fsync_dir(path.parent)


def _replace_with(path: Path, write: Callable) -> None:
    """write_atomic's temp file and rename (tests replace it to simulate a full disk)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, FILE_MODE)
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _to_python(obj: Any) -> Any:
    """numpy and torch scalars and arrays as Python numbers and lists; sets and tuples as lists."""
    if hasattr(obj, "tolist"):  # numpy arrays and scalars, torch tensors
        return obj.tolist()
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"object of type {type(obj).__name__} is not JSON serializable")


def plain(obj: Any, strict: bool = True) -> Any:
    """`obj` with numpy/torch values as plain Python ones; strict: every non-finite float as None."""
    if isinstance(obj, float):
        return obj if not strict or math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: plain(v, strict) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [plain(v, strict) for v in obj]
    if obj is None or isinstance(obj, (str, int, bool)):
        return obj
    return plain(_to_python(obj), strict)


def dumps(obj: Any, indent: int | None = 1, strict: bool = True) -> bytes:
    """JSON bytes; strict: non-finite numbers become null (never a bare NaN or Infinity)."""
    if strict:
        return (json.dumps(plain(obj), indent=indent, allow_nan=False) + "\n").encode()
    return (json.dumps(obj, indent=indent, default=_to_python) + "\n").encode()


def write_json_atomic(path: str | os.PathLike, obj: Any, indent: int | None = 1,
                      strict: bool = False) -> None:
    """Write `obj` as JSON to `path` atomically (numpy/torch values converted to plain numbers).
    strict=True writes non-finite numbers as null (the store's own files are always strict)."""
    blob = dumps(obj, indent, strict)
    write_atomic(path, lambda fh: fh.write(blob))


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    blob = text.encode()
    write_atomic(path, lambda fh: fh.write(blob))


def save_torch_atomic(path: str | os.PathLike, obj: Any) -> tuple[str, int]:
    """torch.save `obj` to `path` atomically; returns the file's sha256 (hex) and size in bytes."""
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    blob = buf.getvalue()
    write_atomic(path, lambda fh: fh.write(blob))
    return hashlib.sha256(blob).hexdigest(), len(blob)


class RefusedPickle(ValueError):
    """A torch file whose pickle names something other than tensors and plain data (a function, a
    class): refused unread, so nothing it names is imported or called."""


def _refusal_detail(text: str) -> str:
    """What torch's weights-only error says failed (the reason, not its advice), one short line."""
    text = text.replace("\x1b[1m", "").replace("\x1b[0m", "")
    _, found, after = text.partition("WeightsUnpickler error:")
    lines = [ln.strip() for ln in (after if found else text).splitlines() if ln.strip()]
    if not found:
        lines = [ln for ln in lines if "global" in ln.lower()]
    if not lines:
        return "not a torch file of tensors and plain data"
    return lines[0].split(". ")[0].rstrip(".")[:160]


class UnreadableTorchFile(ValueError):
    """A torch file that is not one (garbage, truncated, an opcode the data-only reader lacks)."""


def load_torch_data(path: str | os.PathLike, map_location: Any = "cpu", follow: bool = False) -> Any:
    """The tensors and plain data (dicts, lists, numbers, strings) in the torch file at `path`,
    read as data only (torch.load with weights_only=True, from the bytes of a regular file,
    read_regular: a symbolic link at the name is followed only if `follow`):
    a pickle that names a function or a class (one that would run code when loaded) raises
    RefusedPickle, one line, and nothing it names runs. Other bytes the data-only reader cannot
    read (garbage, an unknown opcode) raise UnreadableTorchFile; a truncated file what torch raises."""
    import pickle
    import warnings

    import torch

    blob = read_regular(path, follow)
    try:
        with warnings.catch_warnings():  # torch warns about a pickle protocol it does not expect
            warnings.simplefilter("ignore")
            return torch.load(io.BytesIO(blob), map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        detail = _refusal_detail(str(e))
        if "global" in detail.lower():  # the pickle names a module's attribute: code, not data
            raise RefusedPickle(f"{path}: refused to load: it holds more than tensors and plain data "
                                f"({detail})") from None
        raise UnreadableTorchFile(detail) from None


def remove_path(path: Path) -> None:
    """Remove a file, or a directory squatting on a file's name; nothing if it is gone. A
    symbolic link is removed itself (never what it names, nor a directory through it)."""
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink()
    except FileNotFoundError:
        pass


def remove_unless_file(path: Path) -> str | None:
    """Remove whatever squats on a file's name and is not a regular file (a directory, a FIFO, a
    device, a symbolic link: a write or a read there would fail, block or go through the link);
    returns what it was ("a directory", "a FIFO", "a symbolic link", ...: file_kind), or None if
    the name is free or holds a regular file. A link is removed itself, never what it names."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    if stat.S_ISREG(mode):
        return None
    remove_path(path)
    return file_kind(mode)


def remove_temp_files(directory: Path, spare_prefix: str = "", spare_seconds: float = 0.0) -> None:
    """Delete the temp files (``.*.tmp``) a killed writer left in `directory`; those whose name
    starts with `spare_prefix` are left until they are `spare_seconds` old."""
    for p in directory.glob(".*.tmp"):
        try:
            if not (spare_prefix and p.name.startswith(spare_prefix)) or time.time() - p.stat().st_mtime > spare_seconds:
                p.unlink()
        except FileNotFoundError:
            pass


class SpecialFileError(OSError):
    """A store file's name holds a directory, a FIFO, a socket or a device instead of a file."""


def file_kind(mode: int) -> str:
    """What a non-regular file is, in words ("a FIFO", "a directory", ...), from its st_mode."""
    for test, word in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return word
    return "a special file"


def read_regular(path: str | os.PathLike, follow: bool = False) -> bytes:
    """The bytes of the regular file at `path`: the store's reader. Opened without blocking, so a
    FIFO (or a device) at the name never hangs the reader, and (unless `follow`) without
    following a symbolic link at the name: SpecialFileError (an OSError whose strerror says what
    is there) for anything but a regular file."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if e.errno == errno.ELOOP and not follow and os.path.islink(path):
            raise SpecialFileError(errno.ELOOP, "it is a symbolic link, not a file", str(path)) from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise SpecialFileError(0, f"it is {file_kind(mode)}, not a file", str(path))
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return fh.read()
    finally:
        os.close(fd)


def as_float(x: Any) -> float:
    """x as a float; NaN where it is no number (null, a string, a bool)."""
    if isinstance(x, bool):
        return math.nan
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


__all__ = ["FILE_MODE", "write_atomic", "write_json_atomic", "write_text_atomic", "save_torch_atomic",
           "plain", "dumps", "fsync_dir", "as_float", "remove_path", "remove_unless_file", "remove_temp_files", "read_regular", "file_kind",
           "load_torch_data", "RefusedPickle", "UnreadableTorchFile",
           "SpecialFileError"]
