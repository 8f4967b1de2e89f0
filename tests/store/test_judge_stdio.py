"""The judging helper over pipes (pithlog.store.judge_stdio, run by ``python -m
pithlog.cli.judge_helper``): frames in, the judgements of judge_lines out, in order; the
end of its input, or a frame cut short, ends it."""

from __future__ import annotations

import io
import os
import pickle
import random
import subprocess
import sys
from pathlib import Path

import eventgen as g

from pithlog.store import Store
from pithlog.store.append_judging import judge_lines
from pithlog.store.judge_stdio import FRAME, frame, read_frame, serve_frames


def _lines(seed: int) -> list[bytes]:
    events = g.mixed_events(random.Random(seed), piths=2, per_pith=4)
    return [g.encoded(e) for e in events] + [g.encoded(g.forged(events[0])), b"[1, 2"]


def _frames(data: bytes) -> list[object]:
    stream, out = io.BytesIO(data), []
    while (one := read_frame(stream)) is not None:
        out.append(pickle.loads(one))
    return out


def test_frames_round_trip_and_a_cut_frame_is_the_end() -> None:
    data = frame(["a"]) + frame({"b": 1})
    assert _frames(data) == [["a"], {"b": 1}]
    assert _frames(data + frame("c")[:-1]) == [["a"], {"b": 1}]  # cut short: the end
    assert _frames(data + FRAME.pack(5)[:2]) == [["a"], {"b": 1}]
    assert read_frame(io.BytesIO(b"")) is None


def test_serve_frames_answers_each_part_as_judge_lines_would(tmp_path: Path) -> None:
    lines = _lines(1)
    with Store.open(tmp_path / "s") as store:
        store.append(lines[:2], g.KEYRING)
        parts = [lines[:3], lines[3:4], lines[4:]]
        expected = [judge_lines(p, g.KEYRING, store._read) for p in parts]
    entries = [key.entry() for key in g.KEYRING.values()]
    source = io.BytesIO(frame((str(tmp_path / "s"), entries)) + b"".join(map(frame, parts)))
    out = io.BytesIO()
    serve_frames(source, out)
    assert [repr(x) for x in _frames(out.getvalue())] == [repr(x) for x in expected]


def test_the_helper_process_answers_on_its_output_and_ends_with_its_input(
    tmp_path: Path,
) -> None:
    lines = _lines(2)
    with Store.open(tmp_path / "s"):
        pass
    entries = [key.entry() for key in g.KEYRING.values()]
    sent = frame((str(tmp_path / "s"), entries)) + frame(lines[:3]) + frame(lines[3:])
    done = subprocess.run([sys.executable, "-m", "pithlog.cli.judge_helper"], input=sent,
                          capture_output=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    answers = _frames(done.stdout)
    assert [len(judgements) for _, judgements in answers] == [3, len(lines) - 3]
    with Store.open(tmp_path / "s") as store:
        expected = [judge_lines(p, g.KEYRING, store._read) for p in (lines[:3], lines[3:])]
    assert [repr(a) for a in answers] == [repr(e) for e in expected]


def test_a_helper_that_cannot_open_the_store_says_so_in_one_line(tmp_path: Path) -> None:
    """The store gone from under ``serve --submit`` (or refused to a reader): the helper
    ends with the error's one line on the server's standard error, not a traceback; the
    server judges the parts it held itself."""
    entries = [key.entry() for key in g.KEYRING.values()]
    done = subprocess.run([sys.executable, "-m", "pithlog.cli.judge_helper"],
                          input=frame((str(tmp_path / "gone"), entries)),
                          capture_output=True, timeout=60)  # fmt: skip
    assert done.stdout == b"" and done.returncode == 2
    assert done.stderr.decode().splitlines() == [
        f"pithlog: judge helper: [store.missing] no store at {tmp_path / 'gone'} (no data.mdb)"]


def test_a_helper_whose_server_ended_ends_without_a_word(tmp_path: Path) -> None:
    """The server worker killed (``kill -9``) while its helper judges a part: the helper's
    answer meets a pipe no one reads. It ends quietly, as when its input ends, where it
    printed a BrokenPipeError traceback on the server's standard error (the service's log)
    for every helper that had a part in hand."""
    lines = _lines(3)
    with Store.open(tmp_path / "s"):
        pass
    entries = [key.entry() for key in g.KEYRING.values()]
    read_end, write_end = os.pipe()
    os.close(read_end)  # the worker is gone: nobody will read the answers
    try:
        done = subprocess.run([sys.executable, "-m", "pithlog.cli.judge_helper"],
                              input=frame((str(tmp_path / "s"), entries)) + frame(lines),
                              stdout=write_end, stderr=subprocess.PIPE, timeout=120,
                              check=False)  # fmt: skip
    finally:
        os.close(write_end)
    assert done.stderr == b""
    assert done.returncode == 0
