"""A pool's results' folder under ``$TMPDIR`` (:meth:`pithlog.parallel.pool.Pool.submit`),
and the removal of the folders that killed commands left behind.

A command's pool removes its folder at shutdown, and its workers remove it when the
command is killed alone; a ``kill -9`` of the whole process group (or a machine that loses
power) ends every process that could, and the folder stayed for good. So each process that
uses a folder holds a shared ``flock`` on it for as long as it lives (the kernel lets go of
it however the process ends), and each new pool first removes the folders of this user
whose lock it can take exclusively (:func:`remove_stale`, a bounded number per start): no
process that may still write or read there is alive. ``flock`` rather than the owner's
pid in the name: a pid says nothing of a process in another pid namespace sharing
``/tmp`` (a container), nor after it is reused; the pid in the name is for the human who
lists ``$TMPDIR``.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import secrets
import shutil
import stat
import threading

try:
    import fcntl
except ImportError:  # Windows: no flock, folders are never removed by a later run
    fcntl = None  # type: ignore[assignment]

PREFIX = "pithlog-results-"

_NAME = re.compile(re.escape(PREFIX) + r"[0-9]+-[0-9a-f]{16}")
"""The folders :func:`remove_stale` may remove: only those named by :func:`name` (a folder
named otherwise may belong to a live command of a pithlog that did not lock it)."""


MAX_REMOVED = 64
"""Stale folders :func:`remove_stale` removes at most per pool start: a ``$TMPDIR`` holding
thousands (a machine where commands are killed often) delays no start by more than this
many removals; the rest go at later starts."""
MAX_EXAMINED = 4 * MAX_REMOVED
"""Folders it opens (and tries the lock of) at most per start, chosen at random among
those named as results' folders, so that folders it cannot remove (in use, or another
user's in a shared ``/tmp``) neither cost each start an open apiece nor hide, by coming
first in every listing, the stale ones behind them."""


def name() -> str:
    """A new folder's name: this process's pid, and 64 random bits so that a pid reused
    cannot meet a folder left behind."""
    return f"{PREFIX}{os.getpid()}-{secrets.token_hex(8)}"


_MADE = False
LOCK = threading.Lock()
"""Held while this worker makes the pool's folder, and for good by the worker's thread
that removes it when the parent is killed: a folder is never made after that removal."""
_HELD: int | None = None
"""The folder's descriptor, open (and its shared lock held) until this worker ends."""


def made(folder: str) -> bool:
    """In a worker: whether the pool's results' folder exists and this process holds its
    shared lock, made now if no worker of the pool has made it yet (only this process's
    user may enter it, like ``mkdtemp``'s). A name taken by anything but such a folder is
    not used, nor a folder being removed (:func:`remove_stale`)."""
    global _MADE, _HELD
    with LOCK:
        if not _MADE:
            try:
                os.mkdir(folder, 0o700)
            except FileExistsError:  # another worker of the pool made it
                pass
            except OSError:
                return False
            held = _locked(folder)
            if held is None:
                return False
            _HELD, _MADE = held, True
    return True


def write(name: str, data: bytes) -> bool:
    """In a worker, after :func:`made`: ``data`` written to the new file ``name`` of the
    pool's folder, through the descriptor this worker holds rather than the folder's name;
    False when it cannot be (a full disk), and then no part of it is left there to take
    the disk's space until the command ends."""
    assert _HELD is not None
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(name, flags, 0o600, dir_fd=_HELD)
    except OSError:
        return False
    try:
        with open(fd, "wb") as f:
            f.write(data)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=_HELD)
        return False
    return True


def _locked(folder: str) -> int | None:
    """A descriptor of ``folder`` with its shared lock held, or None when it is not a
    folder of this user or it is being (or was, meanwhile) removed by another process."""
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(folder, flags)
    except OSError:  # a link, gone, not a folder
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            raise OSError
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # fails while being removed
        # Removed between the mkdir and the lock: the name is no longer this folder.
        now = os.lstat(folder)
        if (now.st_dev, now.st_ino) != (info.st_dev, info.st_ino):
            raise OSError
    except OSError:
        os.close(fd)
        return None
    return fd


class Reader:
    """The pool's own process's side of its results' folder: the spilled results read and
    removed (:func:`pithlog.parallel.pool._unspill`). From the first one read it holds the
    folder's shared lock too, until :meth:`close`: with every helper of the pool dead the
    folder would otherwise be free for another command's :func:`remove_stale` while this
    one still runs, and its name then free for anyone to take (a link elsewhere). Each
    file is read through the folder's descriptor, never its name again."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self._fd: int | None = None
        self._closed = False
        self._lock = threading.Lock()  # results are read by the pool's thread, or the caller's

    def take(self, name: str) -> bytes | None:
        """The bytes of the folder's file ``name``, removed once read; None when the folder
        or the file is gone (removed while no process of the pool held it) or is not this
        process's user's: the helper that wrote it is then as good as lost."""
        with self._lock:
            if self._fd is None and not self._closed:
                self._fd = _locked(self.folder)
            fd = self._fd
            if fd is None:
                return None
            try:
                file = os.open(name, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0), dir_fd=fd)
                with open(file, "rb") as f:
                    data = f.read()
                os.unlink(name, dir_fd=fd)
            except OSError:
                return None
            return data

    def close(self) -> None:
        """Let go of the folder's lock (after it was removed, or when the pool is done)."""
        with self._lock:
            self._closed = True
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


def remove(folder: str, reader: Reader) -> None:
    """Remove the pool's folder, then let go of its lock: at shutdown, or when the pool is
    collected or the program ends first."""
    shutil.rmtree(folder, ignore_errors=True)
    reader.close()


def remove_stale(tmpdir: str) -> None:
    """Remove the results' folders under ``tmpdir`` that no live process holds the lock of
    (:func:`made`): left by commands killed with all their workers. Only this user's, and
    never one in use: its lock is taken exclusively first, which fails while any process
    holds it, and the folder is removed while that lock is held, so no worker can take it
    up meanwhile (its shared lock fails and it sends its results through the pipe).
    Bounded per call (:data:`MAX_REMOVED`, :data:`MAX_EXAMINED`); the listing of
    ``tmpdir`` is not, but reads names only."""
    if fcntl is None:
        return
    try:
        entries = [e.name for e in os.scandir(tmpdir) if _NAME.fullmatch(e.name)]
    except OSError:
        return
    if len(entries) > MAX_EXAMINED:
        # a generator of its own: the shared one's sequence is the embedding program's
        entries = random.Random().sample(entries, MAX_EXAMINED)
    removed = 0
    for entry in entries:
        if removed == MAX_REMOVED:
            return
        path = os.path.join(tmpdir, entry)
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
        try:
            fd = os.open(path, flags)
        except OSError:
            continue
        try:
            info = os.fstat(fd)
            if info.st_uid != os.getuid():  # another user's (closed below)
                raise OSError
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            # Removed (by another pool) between the open and the lock, and the name made
            # again by a live pool's helper: the lock is the old folder's, not the new one's.
            now = os.lstat(path)
            if (now.st_dev, now.st_ino) != (info.st_dev, info.st_ino):
                raise OSError
        except OSError:  # not ours, or in use: some process of its command is alive
            os.close(fd)
            continue
        try:
            shutil.rmtree(path, ignore_errors=True)
            removed += 1
        finally:
            os.close(fd)
