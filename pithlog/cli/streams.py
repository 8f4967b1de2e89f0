"""What a command reads and writes, each failure one line instead of a traceback: input
files and standard input (``usage.unreadable``, a read that fails after the open
included), a keyring file read no further than the door allows, standard output
(``usage.output``; :class:`ClosedOutput` when the command was started without one) and
standard error, whose failures lose the diagnostics and not the command (:class:`Out`);
a private key file, with a warning when group or others may read or write it
(:func:`read_key_file`)."""

from __future__ import annotations

import contextlib
import errno
import os
import shlex
import stat
import sys
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING, Any, BinaryIO, cast

from pithlog.errors import KeyringError, UsageError
from pithlog.protocol.canonical import MAX_LINE_BYTES
from pithlog.protocol.keys import Keyring, SigningKey, load_key_file, load_keyring

if TYPE_CHECKING:
    from pithlog.cli.edge import Bar


_READ_PIECE = 1 << 20
"""The bytes :func:`read_bytes` asks for at once under a limit."""


def _read_up_to(stream: BinaryIO, size: int) -> bytes:
    """At most ``size`` bytes of ``stream``, read a piece at a time: ``read(size)``
    allocates ``size`` bytes before it reads any, so a large limit (``verify-state
    --max-bytes 4611686018427387904``) was a MemoryError, one past the index range an
    OverflowError, each a traceback, for a file of a few bytes."""
    pieces = []
    while size > 0:
        piece = stream.read(min(size, _READ_PIECE))
        if not piece:
            break
        pieces.append(piece)
        size -= len(piece)
    return b"".join(pieces)


def read_bytes(path: str, limit: int | None = None) -> bytes:
    """The bytes of ``path`` (``-``: standard input); with ``limit``, at most ``limit + 1``
    of them, so that a caller refusing more than ``limit`` never holds a huge file."""
    return _read(path, limit, with_status=False)[0]


def read_bytes_and_status(
    path: str, limit: int | None = None
) -> tuple[bytes, os.stat_result | None]:
    """:func:`read_bytes`, with the status of the file read (``fstat`` of the descriptor
    the bytes came from), ``None`` for standard input."""
    return _read(path, limit, with_status=True)


def _read(path: str, limit: int | None, with_status: bool) -> tuple[bytes, os.stat_result | None]:
    try:
        if path == "-":
            if sys.stdin is None:  # started with standard input closed (`<&-`)
                raise OSError(errno.EBADF, "standard input is closed")
            stream = sys.stdin.buffer
            return (stream.read() if limit is None else _read_up_to(stream, limit + 1)), None
        with open(path, "rb") as stream:
            status = os.fstat(stream.fileno()) if with_status else None
            data = stream.read() if limit is None else _read_up_to(stream, limit + 1)
            return data, status
    except OSError as exc:
        raise UsageError("unreadable", f"cannot read {path}: {exc.strerror or exc}; "
                         "check the path and its permissions") from exc


EXPOSED_KEY_FILE = ("pithlog: warning: key file {path} has mode {mode}: group or others can "
                    "read or write it; make it private: chmod 600 {path}")  # fmt: skip
"""The line said on stderr when a private key file is used that group or others may read
or write (docs/cli.md, "Key files group or others may read"); ``path`` as given, quoted
for a shell when it needs to be, ``mode`` its permission bits in four octal digits
(``0644``)."""

_WARNED: set[tuple[int, int]] = set()
"""The key files (device, inode) warned about in this process: each is warned about once,
however often it is read (a program that calls ``pithlog.cli.main`` again and again)."""


def read_key_file(path: str, out: Out) -> SigningKey:
    """The private key of the key file ``path`` (``-``: standard input), read no further
    than the door allows (spec section 1: 8 MiB), warning when it is exposed
    (:func:`warn_if_exposed`)."""
    data, status = read_bytes_and_status(path, MAX_LINE_BYTES)
    key = load_key_file(data)
    warn_if_exposed(path, status, out)
    return key


def warn_if_exposed(path: str, status: os.stat_result | None, out: Out) -> None:
    """Say :data:`EXPOSED_KEY_FILE` once when ``status``, that of a private key file read
    at ``path``, is a regular file that group or others may read or write, as OpenSSH and
    GnuPG warn; the command goes on, so that a workflow that worked keeps working. A key
    read from standard input, a pipe or a device (``None``, or not a regular file) has no
    mode of its own to judge; nor has a file where modes are not POSIX's."""
    if status is None or os.name != "posix" or not stat.S_ISREG(status.st_mode):
        return
    if not status.st_mode & 0o077 or (status.st_dev, status.st_ino) in _WARNED:
        return
    _WARNED.add((status.st_dev, status.st_ino))
    shown = shlex.quote(path) if path.isprintable() else ascii(path)
    out.say(EXPOSED_KEY_FILE.format(path=shown, mode=f"{stat.S_IMODE(status.st_mode):04o}"))


class _Reading:
    """An input stream whose read errors are ``usage.unreadable`` naming the input: a
    file opened fine can still fail as it is read (EIO of a failing disk or a network
    file system, a terminal hung up), which was a traceback. The rest is the stream's."""

    def __init__(self, stream: BinaryIO, path: str) -> None:
        self._stream = stream
        self._path = path

    def _failed(self, exc: OSError) -> UsageError:
        return UsageError("unreadable", f"reading {self._path} failed: {exc.strerror or exc}")

    def read(self, size: int = -1) -> bytes:
        try:
            return self._stream.read(size)
        except OSError as exc:
            raise self._failed(exc) from exc

    def readline(self, size: int = -1) -> bytes:
        try:
            return self._stream.readline(size)
        except OSError as exc:
            raise self._failed(exc) from exc

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def open_input(path: str) -> Iterator[BinaryIO]:
    if path == "-":
        if sys.stdin is None:  # started with standard input closed (`<&-`)
            raise UsageError("unreadable", "standard input is closed: give a file, or "
                             "open standard input")  # fmt: skip
        yield cast(BinaryIO, _Reading(sys.stdin.buffer, "standard input"))
        return
    try:
        stream = open(path, "rb")  # noqa: SIM115 - closed by the with below
    except OSError as exc:
        raise UsageError("unreadable", f"cannot read {path}: {exc.strerror or exc}; "
                         "check the path and its permissions") from exc
    with stream:
        yield cast(BinaryIO, _Reading(stream, path))


def keyring_bytes(path: str) -> bytes:
    """A keyring file's bytes, read no further than the door allows (spec section 1: 8 MiB),
    so that a huge file given as ``--keyring`` (an export, ``/dev/zero``) is refused
    without being read whole."""
    data = read_bytes(path, MAX_LINE_BYTES)
    if len(data) > MAX_LINE_BYTES:
        raise KeyringError("not_json", f"keyring file: {path} is longer than the "
                           f"{MAX_LINE_BYTES} bytes allowed")  # fmt: skip
    return data


def read_keyring(path: str) -> Keyring:
    return load_keyring(keyring_bytes(path))


class Out:
    """stdout and stderr as bytes and lines."""

    def __init__(self, stdout: IO[bytes], stderr: IO[str]) -> None:
        self.stdout = stdout
        self.stderr = cast(IO[str], _Diagnostics(stderr))
        self.bar: Bar | None = None
        """A progress bar on stderr while one is shown: lines are printed above it."""

    def write(self, data: bytes) -> None:
        """``data`` on stdout, all of it. A buffered stdout given more than its buffer
        writes it straight through and, when the descriptor takes part of it (a file
        reaching the disk's end or its size limit), returns the count taken without an
        error: ignored, ``export`` went on and said every line written (exit 0, the file
        cut at 1,536,000 of 1,920,158 bytes). The rest is written again, and the error of
        that write is the command's."""
        try:
            taken = self.stdout.write(data)
            while taken is not None and 0 <= taken < len(data):
                if taken == 0:
                    raise OSError(errno.EIO, "standard output took none of the bytes given")
                data = data[taken:]
                taken = self.stdout.write(data)
        except BrokenPipeError:  # the reader stopped: the command decides (main, append)
            raise
        except OSError as exc:
            raise _unwritable(exc) from exc

    def flush(self) -> None:
        """What is written so far, out to standard output: a full disk is then this
        command's error, not a traceback when the interpreter flushes at its exit."""
        try:
            self.stdout.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise _unwritable(exc) from exc

    def say(self, line: str) -> None:
        """One line of diagnostics on stderr."""
        if self.bar is None or not self.bar.write(line):
            print(line, file=self.stderr)


class _Diagnostics:
    """Standard error, whose write errors lose the diagnostics, not the command. A stderr
    that cannot be written (a log file on a full disk, ``2>/dev/full``) made the first line
    said, or a progress bar's first draw, end the command with a traceback nobody could
    read, status 1 and its output unprinted; now its output and exit status stand. A
    closed pipe (``2>&1 | head``) is left to stop the command, as it does on stdout."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            raise
        except OSError:
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise
        except OSError:
            pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _unwritable(exc: OSError) -> UsageError:
    return UsageError("output", f"standard output cannot be written: {exc.strerror or exc}; "
                      "check where it goes (a full disk, a closed descriptor)")  # fmt: skip


class ClosedOutput:
    """Standard output when the command was started with it closed (``>&-``): every
    write is ``usage.output``."""

    def write(self, data: bytes) -> int:
        raise OSError(errno.EBADF, "standard output is closed")

    def flush(self) -> None:
        pass
