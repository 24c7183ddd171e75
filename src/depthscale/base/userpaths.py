"""The paths a command is given (--store, --out), checked before any work: one line naming the
path and what is wrong with it (a UsageError: the CLI prints it and exits with code 2), nothing
left behind. UsageError is defined here (and imported from here, not from arguments) so that
these checks sit below the parser in the layers.

What is refused: an empty path; a `~user` whose home cannot be found; a path with a component
longer than the filesystem's NAME_MAX (255 bytes) or longer as a whole than PATH_MAX (4,096) less
room for the files a store or a report puts under it; an --out that cannot be created or written
(a missing or read-only parent, /proc); a collect --out that exists and is not a regular file
(a directory, a FIFO, a device) or is a symbolic link to one. A symbolic link to a regular file
(or to a path that does not exist yet) is followed: the file it points to is written and the link
stays a link.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path

from depthscale.base.atomic import file_kind
from depthscale.base.errors import UserError

NAME_MAX = 255  # bytes of one path component, where the filesystem does not say (os.pathconf)
PATH_MAX = 4096  # bytes of a whole path, where the system does not say
ROOM = 128  # bytes kept free under a --store or --out for what is written there (runs/<id>/metrics.json.tmp...)


class UsageError(UserError):
    """Bad input from the command line."""


def shown(value: str, width: int = 60) -> str:
    """A path as a message shows it: a very long one cut in the middle."""
    value = str(value)
    return value if len(value) <= width else f"{value[:width // 2]}...{value[-width // 3:]} ({len(value):,} characters)"


def _limit(path: Path, name: str, default: int) -> int:
    """os.pathconf(name) of the nearest existing ancestor of `path` (default where it cannot be told)."""
    for p in (path, *path.parents):
        try:
            if p.exists():
                return int(os.pathconf(p, name))
        except (OSError, ValueError):  # (a component too long to look up: its parent is asked)
            continue
    return default


def check_length(path: Path, value: str, name: str) -> None:
    """Refuse a path the system cannot open: a component over NAME_MAX bytes, or the whole over
    PATH_MAX less ROOM (what a store or a report writes below it)."""
    absolute = Path(os.path.abspath(os.fsdecode(path)))
    for part in absolute.parts:
        size = len(os.fsencode(part))
        if size > NAME_MAX:
            limit = _limit(absolute, "PC_NAME_MAX", NAME_MAX)
            if size > limit:
                raise UsageError(f"--{name} {shown(value)!r}: the path component {shown(part, 30)!r} is {size:,} "
                                 f"bytes, longer than the {limit:,} this filesystem allows")
    size = len(os.fsencode(str(absolute)))
    limit = _limit(absolute, "PC_PATH_MAX", PATH_MAX)
    if size + ROOM > limit:
        raise UsageError(f"--{name} {shown(value)!r}: the path is {size:,} bytes long; this system allows "
                         f"{limit:,} (less {ROOM} for the files written under it)")


def no_home(head: str) -> str:
    """Why a path starting with `head` ("~user") cannot be expanded."""
    return f"{head!r} names no home directory (no such user, or no HOME)"


def path_arg(value: str, name: str) -> Path:
    """A --store / --out path: never empty (an empty one would mean the current directory), a
    `~user` that exists, a length the system can open."""
    if value is None or not str(value).strip():
        raise UsageError(f"--{name} is empty: give a path")
    value = str(value)
    if "\0" in value:
        raise UsageError(f"--{name} {shown(value)!r}: a path cannot hold a NUL character")
    if value.startswith("~"):
        head = value.split(os.sep, 1)[0]
        if os.path.expanduser(head) == head:  # os.path leaves an unknown user as it was (Path raises)
            raise UsageError(f"--{name} {shown(value)!r}: {no_home(head)}")
        check_length(Path(os.path.expanduser(value)), value, name)
    else:
        check_length(Path(value), value, name)
    return Path(value)


def check_parents(out: Path, value: str) -> None:
    """The nearest existing parent of `out` is a directory (nothing is created here)."""
    for parent in out.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise UsageError(f"--out {value!r}: {parent} is a file, not a directory")
            break


def _reason(e: OSError) -> str:
    return e.strerror or errno.errorcode.get(e.errno or 0, "") or str(e)


def probe_dir(directory: Path, value: str) -> None:
    """`directory` can be created (as far as it is missing) and written: tried by creating it and
    a temporary file in it, then removing all of that again. One line naming --out and the reason
    (no such file or directory under /proc, a read-only filesystem, no permission) otherwise."""
    made = []
    try:
        missing = [p for p in (directory, *directory.parents) if not p.exists()]
        for p in reversed(missing):
            p.mkdir()
            made.append(p)
        fd, probe = tempfile.mkstemp(prefix=".probe.", dir=directory)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise UsageError(f"--out {shown(value)!r}: cannot write there: {_reason(e)}") from None
    finally:
        for p in reversed(made):
            try:
                p.rmdir()
            except OSError:
                pass


def out_dir(value: str) -> Path:
    """--out of reproduce / report: a directory, existing or to be created, that can be written
    (checked before any work; nothing is left behind by the check)."""
    out = path_arg(value, "out")
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {value!r} is a file, not a directory")
    check_parents(out, value)
    probe_dir(out.absolute(), value)
    return out


def out_file(value: str, suffixes: tuple[str, ...] = (".parquet", ".csv")) -> Path:
    """--out of collect: a .parquet or .csv file to (over)write. An existing one must be a regular
    file; a symbolic link to a regular file (or to a path not there yet) is followed (the path it
    points to is returned: its target is written, the link stays), a link to anything else is
    refused, as is a directory, a FIFO or a device (written through, /dev/full would fail; replaced,
    the link would be lost)."""
    out = path_arg(value, "out")
    if out.suffix.lower() not in suffixes:
        raise UsageError(f"--out {value!r}: use a {' or '.join(suffixes)} suffix")
    if out.is_dir():
        raise UsageError(f"--out {value!r} is a directory")
    target = out
    if out.is_symlink():
        target = Path(os.path.realpath(out))
        check_length(target, value, "out")
    try:
        st = os.stat(target) if target.exists() else None
    except OSError as e:
        raise UsageError(f"--out {shown(value)!r}: {_reason(e)}") from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        via = f" (a link to {target})" if target != out else ""
        raise UsageError(f"--out {value!r}{via} is {file_kind(st.st_mode)}, not a regular file to write")
    check_parents(target, value)
    probe_dir(target.absolute().parent, value)
    return target


__all__ = ["UsageError", "path_arg", "check_parents", "check_length", "probe_dir", "out_dir", "out_file", "shown", "no_home",
           "NAME_MAX", "PATH_MAX", "ROOM"]
