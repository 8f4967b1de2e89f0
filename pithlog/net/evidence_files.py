"""Evidence files (``docs/evidence.md``) as ``mirror`` and ``audit`` write them: whole or
not at all, and never lost to a folder that cannot take them."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def _write(folder: Path, name: str, data: bytes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    tmp = folder / f".{name}.{os.getpid()}.tmp"
    try:
        # renamed into place once written: a reader (a publishing job) never sees half a
        # proof; synced before the rename, and the folder after it, so that a crash leaves
        # neither an empty file under the name nor a file named in a message gone
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        where = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(where)
        finally:
            os.close(where)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def write_evidence(folder: Path, name: str, data: bytes) -> tuple[Path | None, str | None]:
    """Write ``data`` as ``folder/name``: ``(path, None)``. A folder that cannot take it (a
    file in its place, no permission, a full disk) does not lose the finding: the file goes
    to the system's temporary folder instead, and the second member says why, for the
    message that names the file. ``(None, why)`` only when neither can be written."""
    try:
        return _write(Path(folder), name, data), None
    except OSError as exc:
        first = f"{folder} could not take it: {exc.strerror or exc}"
    spare = Path(tempfile.gettempdir())
    try:
        return _write(spare, name, data), first
    except OSError as exc:
        return None, f"{first}; nor could {spare}: {exc.strerror or exc}"
