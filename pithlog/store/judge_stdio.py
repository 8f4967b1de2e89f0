"""A judging helper that talks over two pipes (:func:`serve_frames`): the process
``python -m pithlog.cli.judge_helper`` runs it on its standard input and output, started
by a program whose event loop feeds it (``pithlog serve --submit``:
:mod:`pithlog.net.judges`).

It judges raw lines as the helpers of :mod:`pithlog.store.append_judging` do (the door,
checks 1-12, the store's packing), one part after another, in the order the parts come.
Every message, both ways, is a frame: a big-endian uint32 length and that many bytes of
pickle (the parent is the program that started this process and trusts it, as a
``concurrent.futures`` pool trusts its workers). The first frame the parent sends is
``(store path, keyring entries)``; each later one a list of lines, answered by one frame
of their :data:`~pithlog.store.append_judging.JudgedPart`. The end of the input (the
parent closed the pipe, or ended however it ended) ends the helper: it never outlives
the program that feeds it.
"""

from __future__ import annotations

import pickle
import struct
from typing import BinaryIO

from pithlog.store.append_judging import helper_judge, helper_start

FRAME = struct.Struct("!I")
"""The length before each frame."""


def read_frame(stream: BinaryIO) -> bytes | None:
    """The next frame of ``stream``; ``None`` at its end (a frame cut short included)."""
    head = stream.read(FRAME.size)
    if len(head) < FRAME.size:
        return None
    (length,) = FRAME.unpack(head)
    data = stream.read(length)
    return data if len(data) == length else None


def frame(value: object) -> bytes:
    """``value`` pickled, with its length before it."""
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    return FRAME.pack(len(data)) + data


def serve_frames(source: BinaryIO, out: BinaryIO) -> None:
    """Judge the parts that ``source`` brings and answer each on ``out``, until
    ``source`` ends."""
    first = read_frame(source)
    if first is None:
        return
    path, entries = pickle.loads(first)
    helper_start(path, entries)
    while (data := read_frame(source)) is not None:
        out.write(frame(helper_judge(pickle.loads(data))))
        out.flush()
