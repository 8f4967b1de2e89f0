"""Replay's scratch index: a throwaway LMDB environment in ``$TMPDIR`` holding the
temporary on-disk index of copy -> seq that the structure pass fills
(:class:`pithlog.store.replay_structure.ScratchIndex`; ``docs/store.md``, "Replay").
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
from collections.abc import Iterator

import lmdb

from pithlog.errors import StoreError
from pithlog.store.environment_errors import _lmdb_errors, _store_error
from pithlog.store.replay_structure import ScratchIndex

SCRATCH_BYTES_PER_ENTRY = 256
"""Room reserved in replay's scratch index per ``seq`` entry: a key of 64 bytes and a value
of 8 take about 120 bytes of B-tree leaf in random order; twice that, and a MiB besides."""


@contextlib.contextmanager
def scratch_index(entries: int) -> Iterator[ScratchIndex]:
    """The temporary on-disk index of replay's structure pass
    (:data:`pithlog.store.replay_structure.ScratchFactory`): a write transaction on a throwaway
    environment in ``$TMPDIR``, for ``entries`` keys or so.

    One write transaction holds every seq entry; ``writemap`` puts its dirty pages in the
    file's mapping instead of the heap, so memory does not grow with the log (without it,
    a replay of 1M events held 135 MiB of them). A write into a mapping of a sparse file on
    a full disk kills the process with SIGBUS, so the whole file is allocated first
    (``posix_fallocate``): no room is ``store.disk`` before any work. The files are unlinked
    as soon as LMDB holds them open, so no exit (an error, an interrupt, a kill) leaves them
    behind."""
    map_size = entries * SCRATCH_BYTES_PER_ENTRY + (1 << 20)
    tmp = tempfile.mkdtemp(prefix="pithlog-replay-")
    try:
        try:
            index_env = lmdb.open(tmp, map_size=map_size, sync=False, metasync=False,
                                  lock=False, subdir=True, writemap=True)  # fmt: skip
        except lmdb.Error as exc:
            raise _store_error(exc) from exc
        try:
            _allocate(os.path.join(tmp, "data.mdb"), map_size)
        except BaseException:
            index_env.close()
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    try:
        with _lmdb_errors(), index_env.begin(write=True) as itx:
            yield itx
    finally:
        index_env.close()


def _allocate(path: str, size: int) -> None:
    """Give every byte of the file at ``path`` up to ``size`` its blocks on disk."""
    try:
        fd = os.open(path, os.O_RDWR)
        try:
            os.posix_fallocate(fd, 0, size)
        finally:
            os.close(fd)
    except OSError as exc:
        where = os.path.dirname(os.path.dirname(path))
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG):
            raise StoreError("disk", f"no room for replay's scratch index ({size} bytes) in "
                             f"{where}: free space there or set TMPDIR to a larger "
                             f"disk ({exc.strerror})") from exc  # fmt: skip
        raise StoreError("io", f"cannot allocate replay's scratch index in {where}: "
                         f"{exc.strerror or exc}") from exc  # fmt: skip
