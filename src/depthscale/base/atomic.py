"""Files written whole or not at all, and the JSON in them.

Every file depthscale writes goes through `write_atomic`: a temp file beside the target, fsync,
then ``os.replace``, so a reader sees the old content or the new one, never a part. New files get
the mode open() would give under the umask (mkstemp alone gives 0600, which would hide results
from collaborators on a shared filesystem). A writer killed with -9 leaves its temp file; the next
run of the command removes it (`remove_stale_temp_files`, once it is a minute old).

JSON: `plain` turns numpy and torch values into Python ones; with strict=True (the store's files,
the CLI's output, claims) every non-finite number becomes null, never a bare NaN or Infinity.
`as_float` reads a number back (null, a string or a bool read as NaN). Every JSON file is read
through `read_json` (or `loads_json` on bytes already read): at most MAX_JSON_BYTES (by the file's
apparent size, before a byte is read), nested at most MAX_JSON_DEPTH levels, of the shape asked for;
anything else is DamagedJSON, whose message says what is wrong, never a RecursionError.
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import math
import os
import re
import shutil
import stat
import tempfile
import time
import zipfile
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


MAX_FILE_BYTES = 8 * 2**30  # any file the store reads (a checkpoint, params.pt), by its apparent size
MAX_JSON_BYTES = 256 * 2**20  # a JSON file (a run's metrics or curves, a manifest, a cache, curves.jsonl)
MAX_JSON_DEPTH = 100  # levels of nesting in a JSON file (ours use at most 4)


class TooLargeError(OSError):
    """A file larger than its reader's bound (read_regular's max_bytes); the strerror says so."""


class DamagedJSON(ValueError):
    """A JSON file that is no document of ours: its message says what is wrong, as a predicate of
    the file ("is not valid JSON", "is nested too deeply (...)", "is a list, not a JSON object")."""


_JSON_KINDS = ((dict, "a JSON object"), (list, "a list"), (str, "a string"), (bool, "true/false"),
               ((int, float), "a number"), (type(None), "null"))


def _json_kind(x: Any) -> str:
    return next(word for kind, word in _JSON_KINDS if isinstance(x, kind))


def _nested_over(doc: Any, limit: int) -> bool:
    """Whether lists or objects nest more than `limit` levels in `doc` (level by level, no recursion)."""
    level = [doc]  # the containers at nesting level 1; after k passes, those at level k + 1
    for _ in range(limit):
        level = [v for x in level for v in (x.values() if isinstance(x, dict) else x) if isinstance(v, (dict, list))]
        if not level:
            return False
    return True


def loads_json(blob: bytes | str, shape: type | None = None) -> Any:
    """The JSON document in `blob`; DamagedJSON if it is empty, not valid JSON, nested more than
    MAX_JSON_DEPTH levels, or (with `shape`: dict or list) not of that type."""
    if not blob.strip():
        raise DamagedJSON("is empty")
    try:
        doc = json.loads(blob)
    except RecursionError:  # json's parser recurses once per level
        raise DamagedJSON(f"is nested too deeply (over {MAX_JSON_DEPTH} levels)") from None
    except ValueError:  # JSONDecodeError, UnicodeDecodeError
        raise DamagedJSON("is not valid JSON") from None
    if isinstance(doc, (dict, list)) and _nested_over(doc, MAX_JSON_DEPTH):
        raise DamagedJSON(f"is nested too deeply (over {MAX_JSON_DEPTH} levels)")
    if shape is not None and not isinstance(doc, shape):
        raise DamagedJSON(f"is {_json_kind(doc)}, not {dict(_JSON_KINDS)[shape]}")
    return doc


def read_json(path: str | os.PathLike, shape: type | None = None, follow: bool = False) -> Any:
    """The JSON document in the regular file `path` (read_regular, at most MAX_JSON_BYTES):
    OSError if it cannot be read (TooLargeError if it is too large), DamagedJSON (loads_json)."""
    return loads_json(read_regular(path, follow, MAX_JSON_BYTES), shape)


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
    return load_torch_bytes(read_regular(path, follow), map_location, str(path))


def load_torch_bytes(blob: bytes, map_location: Any = "cpu", name: str = "torch data") -> Any:
    """`load_torch_data` on bytes already read (`name` says what they are in a RefusedPickle)."""
    import pickle
    import warnings

    import torch

    _check_records(blob)
    try:
        with warnings.catch_warnings():  # torch warns about a pickle protocol it does not expect
            warnings.simplefilter("ignore")
            return torch.load(io.BytesIO(blob), map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        detail = _refusal_detail(str(e))
        if "global" in detail.lower():  # the pickle names a module's attribute: code, not data
            raise RefusedPickle(f"{name}: refused to load: it holds more than tensors and plain data "
                                f"({detail})") from None
        raise UnreadableTorchFile(detail) from None


def _check_records(blob: bytes) -> None:
    """UnreadableTorchFile if the records of a torch zip file declare more bytes than the file
    holds: torch stores its records uncompressed, so only a crafted file compresses one (2 GB of
    tensor in a 2 MB file), and nothing is decompressed past the file's own size."""
    if not blob.startswith(b"PK"):
        return
    try:
        with zipfile.ZipFile(io.BytesIO(blob)) as z:
            declared = sum(i.file_size for i in z.infolist())
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        return  # not a zip file torch can read either: torch.load says so
    if declared > len(blob):
        raise UnreadableTorchFile(f"its records declare {declared} bytes, more than the file's {len(blob)} "
                                  f"(a compressed record: torch writes none)")


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


STALE_TEMP_SECONDS = 60.0  # a temp file of write_atomic this old has no live writer (a write takes well under it)


def remove_stale_temp_files(directory: str | os.PathLike, name: str | None = None,
                            older_than: float = STALE_TEMP_SECONDS) -> list[Path]:
    """Delete the temp files write_atomic's writer left in `directory` when it was killed (-9: no
    cleanup ran): regular files named as it names them (``.<target>.<8 characters>.tmp``, only
    those of the target `name` if given) and not modified for `older_than` seconds, so a live
    writer's is left alone and nothing else is touched. Returns the paths removed."""
    target = re.escape(name) if name is not None else ".+"
    pattern = re.compile(rf"\.{target}\.[a-z0-9_]{{8}}\.tmp")  # tempfile.mkstemp's 8 random characters
    removed = []
    try:
        entries = list(os.scandir(directory))
    except OSError:  # no directory (yet), or one we may not list: nothing of ours to find
        return removed
    for entry in entries:
        if not pattern.fullmatch(entry.name):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISREG(st.st_mode) and time.time() - st.st_mtime > older_than:
                os.unlink(entry.path)
                removed.append(Path(entry.path))
        except OSError:  # gone already (another run removed it), or not ours to remove
            pass
    return removed


class SpecialFileError(OSError):
    """A store file's name holds a directory, a FIFO, a socket or a device instead of a file."""


def file_kind(mode: int) -> str:
    """What a non-regular file is, in words ("a FIFO", "a directory", ...), from its st_mode."""
    for test, word in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return word
    return "a special file"


def read_regular(path: str | os.PathLike, follow: bool = False, max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of the regular file at `path`: the store's reader. Opened without blocking, so a
    FIFO (or a device) at the name never hangs the reader, and (unless `follow`) without
    following a symbolic link at the name: SpecialFileError (an OSError whose strerror says what
    is there) for anything but a regular file, TooLargeError for one over `max_bytes` (by its
    apparent size, before a byte is read: a sparse file of 3 GB is refused, not read)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if e.errno == errno.ELOOP and not follow and os.path.islink(path):
            raise SpecialFileError(errno.ELOOP, "it is a symbolic link, not a file", str(path)) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SpecialFileError(0, f"it is {file_kind(st.st_mode)}, not a file", str(path))
        too_large = TooLargeError(0, f"it is over {max_bytes} bytes, the most it may hold", str(path))
        if st.st_size > max_bytes:
            raise too_large
        with os.fdopen(fd, "rb", closefd=False) as fh:
            blob = fh.read(max_bytes + 1)  # (a file growing while it is read)
        if len(blob) > max_bytes:
            raise too_large
        return blob
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
           "plain", "dumps", "fsync_dir", "as_float", "remove_path", "remove_unless_file", "remove_temp_files", "remove_stale_temp_files", "STALE_TEMP_SECONDS", "read_regular", "file_kind",
           "load_torch_data", "RefusedPickle", "UnreadableTorchFile",
           "SpecialFileError", "TooLargeError", "load_torch_bytes", "DamagedJSON", "read_json", "loads_json", "MAX_FILE_BYTES",
           "MAX_JSON_BYTES", "MAX_JSON_DEPTH"]
