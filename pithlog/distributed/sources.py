"""The SOURCEs of ``pithlog reduce --dask``, cut into byte ranges that workers read directly.

A SOURCE is a local path, a glob, or any URL that fsspec (Dask's file layer) opens:
``s3://bucket/export-*.jsonl``, ``gs://...``, ``https://...``. The client only lists the
files and their sizes (:func:`expand`); the bytes are read by the workers
(:func:`range_stream`), each a range of one file, so no event passes through the client.

A range ``[start, end)`` owns the JSON Lines lines that *start* inside it (a line starts
at offset 0 or after an LF). The ranges of a file therefore frame it exactly as one
reader framing the whole file would (``pithlog.lines``): each line is read by exactly one
range, whole, however the cuts fall, and a range's memory is bounded by the read chunk and
the line limit, never by the line (an overlong line is dropped as it is read).

Each file is framed on its own: a file whose last line has no final LF ends that line
at its end, as ``pithlog reduce`` ends the last line of its input (docs/distributed.md).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import fsspec

from pithlog.errors import UsageError

CHUNK = 1 << 20
"""Bytes per read from a file (the framing's own chunk: :data:`pithlog.lines.CHUNK`)."""

GLOB_CHARS = "*?["


@dataclass(frozen=True)
class Block:
    """One byte range of one file: what one worker task reads."""

    source: int
    """The file's place among all files (SOURCE order, a glob's matches sorted)."""
    index: int
    """The range's place in its file."""
    fs: Any
    """The fsspec filesystem (picklable: a worker opens the file through it)."""
    path: str
    start: int
    end: int


@dataclass(frozen=True)
class SourceFile:
    name: str
    """As the user named it (with the glob expanded): for messages."""
    fs: Any
    path: str
    size: int


def expand(sources: list[str]) -> list[SourceFile]:
    """Every file the SOURCEs name, in order: a glob's matches sorted by path, as a shell
    lists them. A SOURCE that names nothing is an error: an audit that silently skipped a
    shard would certify less than it claims."""
    files: list[SourceFile] = []
    for source in sources:
        if source == "-":
            raise UsageError("arguments", "--dask reads files the workers can open, not "
                             "stdin; write the events to a file (or object storage)")  # fmt: skip
        try:
            fs, path = fsspec.core.url_to_fs(source)
            paths = sorted(fs.glob(path)) if any(c in path for c in GLOB_CHARS) else [path]
            found = [(p, fs.info(p)) for p in paths]
        except (OSError, ValueError, ImportError) as exc:
            raise UsageError("unreadable", f"cannot list {source}: {exc}; check the path, its "
                             "permissions and the fsspec backend it needs") from exc  # fmt: skip
        found = [(p, info) for p, info in found if info.get("type") != "directory"]
        if not found:
            raise UsageError("unreadable", f"{source} names no file; check the path")
        protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
        for p, info in found:
            name = p if protocol in ("file", "local") else fs.unstrip_protocol(p)
            files.append(SourceFile(shown(name), fs, p, int(info.get("size") or 0)))
    return files


def shown(name: str) -> str:
    """``name`` as messages and ``--compare``'s report (UTF-8 JSON) show it: a local name
    that is not UTF-8 (bytes the system could not decode, which a glob may match) as its
    bytes, ``p\\xff.jsonl``, as the CLI shows such an argument; it could not be written."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return repr(os.fsencode(name))[2:-1]
    return name


def blocks(files: list[SourceFile], blocksize: int) -> list[Block]:
    """The files cut into ranges of about ``blocksize`` bytes (an empty file is one empty
    range, so that every file is accounted for)."""
    out: list[Block] = []
    for number, f in enumerate(files):
        starts = list(range(0, max(f.size, 1), max(1, blocksize)))
        for index, start in enumerate(starts):
            end = min(f.size, start + blocksize)
            out.append(Block(number, index, f.fs, f.path, start, end))
    return out


class RangeStream:
    """The lines a :class:`Block` owns, as a binary stream with ``read``, counting the LFs
    it hands out (:attr:`lfs`: the lines it framed, so the client can number them across
    ranges)."""

    def __init__(self, handle: Any, start: int, end: int, chunk: int = CHUNK) -> None:
        self._chunks = _owned(handle, start, end, chunk)
        self.lfs = 0

    def read(self, size: int = -1) -> bytes:
        data = next(self._chunks, b"")
        self.lfs += data.count(b"\n")
        return data


def _owned(handle: Any, start: int, end: int, chunk: int) -> Iterator[bytes]:
    """The bytes from the first line starting at or after ``start`` through the LF ending
    the line that holds byte ``end - 1`` (the last line starting before ``end``)."""
    if end <= start:
        return
    at = start
    rest = b""
    if start > 0:
        # The line holding byte start - 1 belongs to the range before, unless that byte is
        # its LF: then the first owned line starts exactly at start.
        handle.seek(start - 1)
        at = start - 1
        while True:
            data = handle.read(chunk)
            if not data:
                return
            cut = data.find(b"\n")
            if cut >= 0:
                at += cut + 1
                rest = data[cut + 1 :]
                break
            at += len(data)
            if at >= end:
                # No LF before the range's end: the line goes on past it, and no line
                # starts inside the range. Its end is not looked for: each range of a long
                # line read the rest of it (a 1 MiB line cut every 4 KiB: 128 times over).
                return
        if at >= end:
            return  # no line starts inside the range
    else:
        handle.seek(0)
    while True:
        if not rest:
            rest = handle.read(chunk)
            if not rest:
                return
        if at + len(rest) > end - 1:
            cut = rest.find(b"\n", max(0, end - 1 - at))
            if cut >= 0:
                yield rest[: cut + 1]
                return
        yield rest
        at += len(rest)
        rest = b""
