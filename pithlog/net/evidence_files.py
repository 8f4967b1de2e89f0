"""Evidence files (``docs/evidence.md``) as ``mirror`` and ``audit`` write them: whole or
not at all, never over an earlier one, and never lost to a folder that cannot take them."""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path

MAX_NAMES = 1000
"""Names tried for one file: ``NAME``, then ``NAME.2`` (before the suffix) up to this."""
_NO_LINKS = frozenset({errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK})
"""``os.link`` errors of a file system without hard links (FAT, some network mounts)."""


def _named(name: str, number: int) -> str:
    if number == 1:
        return name
    stem, dot, suffix = name.rpartition(".")
    return f"{stem}.{number}.{suffix}" if dot else f"{name}.{number}"


def _holds(path: Path, data: bytes) -> bool:
    """Whether ``path`` is a regular file of exactly ``data`` (not followed if a link)."""
    try:
        handle = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    with os.fdopen(handle, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return False
        return f.read(len(data) + 1) == data


def _place(tmp: Path, folder: Path, name: str, data: bytes) -> Path:
    """Give the written ``tmp`` its name: the first of ``name``, ``name.2``, ... that is
    free, or that already holds ``data`` (the same evidence again is the same file)."""
    for number in range(1, MAX_NAMES + 1):
        path = folder / _named(name, number)
        try:
            # a link is made only under a free name: an earlier evidence file is never
            # replaced (os.replace renamed over it)
            os.link(tmp, path)
            return path
        except FileExistsError:
            if _holds(path, data):
                return path
        except OSError as exc:
            if exc.errno not in _NO_LINKS:
                raise
            if not os.path.lexists(path):
                os.replace(tmp, path)  # no hard links here: renamed once the name is free
                return path
            if _holds(path, data):
                return path
    raise OSError(errno.EEXIST, f"{name} and the {MAX_NAMES - 1} names after it are taken")


def _write(folder: Path, name: str, data: bytes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    # made new (O_EXCL, a random name): a link planted at a name that can be guessed, in
    # a shared folder such as the temporary one, is never written through
    handle, tmp_name = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".tmp")
    tmp = Path(tmp_name)
    try:
        # given its name once written: a reader (a publishing job) never sees half a
        # proof; synced before, and the folder after, so that a crash leaves neither an
        # empty file under the name nor a file named in a message gone
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        path = _place(tmp, folder, name, data)
        where = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(where)
        finally:
            os.close(where)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def write_evidence(folder: Path, name: str, data: bytes) -> tuple[Path | None, str | None]:
    """Write ``data`` as ``folder/name``: ``(path, None)``; when that name holds other
    bytes (an earlier finding's), as ``name.2``, ``name.3``, ... (before the suffix), the
    first that is free. A folder that cannot take it (a file in its place, no permission,
    a full disk) does not lose the finding: the file goes to the system's temporary folder
    instead, and the second member says why, for the message that names the file.
    ``(None, why)`` only when neither can be written."""
    try:
        return _write(Path(folder), name, data), None
    except OSError as exc:
        first = f"{folder} could not take it: {exc.strerror or exc}"
    spare = Path(tempfile.gettempdir())
    try:
        return _write(spare, name, data), first
    except OSError as exc:
        return None, f"{first}; nor could {spare}: {exc.strerror or exc}"
