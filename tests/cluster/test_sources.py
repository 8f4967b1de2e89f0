"""The byte ranges that Dask's workers read (``pithlog.distributed.sources``): however a
file is cut, its ranges frame exactly the lines one reader of the whole file frames, each
once, and the client can number them."""

from __future__ import annotations

from pathlib import Path

import fsspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pithlog.distributed.sources import RangeStream, blocks, expand
from pithlog.errors import UsageError
from pithlog.lines import iter_lines

PIECES = st.lists(
    st.sampled_from([b"\n", b"\n\n", b"a", b"bc", b" \t", b"\r\n", b"x" * 9, b"{}"]), max_size=40
)


def framed_in_ranges(data: bytes, cut: int, limit: int) -> list[tuple[int, bytes | None]]:
    """Every range's lines, numbered in the file as the client numbers them."""
    out: list[tuple[int, bytes | None]] = []
    base = 0
    with fsspec.open("memory://f.jsonl", "wb") as handle:
        handle.write(data)
    fs = fsspec.filesystem("memory")
    size = fs.size("/f.jsonl")
    for start in range(0, max(size, 1), cut):
        with fs.open("/f.jsonl", "rb") as handle:
            stream = RangeStream(handle, start, min(size, start + cut), chunk=3)
            out.extend((base + n, line) for n, line in iter_lines(stream, limit=limit, chunk=4))
            base += stream.lfs
    return out


@settings(max_examples=300, deadline=None)
@given(pieces=PIECES, cut=st.integers(1, 40), limit=st.integers(1, 12))
def test_ranges_frame_the_file_as_one_reader(pieces: list[bytes], cut: int, limit: int) -> None:
    data = b"".join(pieces)

    class Whole:
        def __init__(self) -> None:
            self.at = 0

        def read(self, size: int = -1) -> bytes:
            chunk = data[self.at : self.at + 5]
            self.at += len(chunk)
            return chunk

    whole = list(iter_lines(Whole(), limit=limit, chunk=5))  # type: ignore[arg-type]
    assert framed_in_ranges(data, cut, limit) == whole


def test_a_cut_inside_a_line_leaves_it_to_the_range_it_starts_in() -> None:
    data = b"first line\nsecond\n\nthird"
    # cut at 3 (inside "first"), 11 (exactly where "second" starts), 19 (blank line's end)
    assert framed_in_ranges(data, 11, 100) == [(1, b"first line"), (2, b"second"), (4, b"third")]
    assert framed_in_ranges(data, 3, 100) == [(1, b"first line"), (2, b"second"), (4, b"third")]


def test_sources_expand_globs_in_order_and_refuse_what_names_nothing(tmp_path: Path) -> None:
    for name in ("b.jsonl", "a.jsonl", "c.txt"):
        (tmp_path / name).write_bytes(b"x\n" * 3)
    files = expand([str(tmp_path / "*.jsonl"), str(tmp_path / "c.txt")])
    assert [Path(f.name).name for f in files] == ["a.jsonl", "b.jsonl", "c.txt"]
    assert [(b.source, b.index, b.start, b.end) for b in blocks(files, 4)] == [
        (0, 0, 0, 4), (0, 1, 4, 6), (1, 0, 0, 4), (1, 1, 4, 6), (2, 0, 0, 4), (2, 1, 4, 6),
    ]  # fmt: skip
    for missing in (str(tmp_path / "none-*.jsonl"), str(tmp_path / "none.jsonl"), "-"):
        with pytest.raises(UsageError):
            expand([missing])


def test_a_line_across_many_ranges_is_read_once_not_once_per_range() -> None:
    """A range inside a line that began before it owns nothing; it looked for the line's
    end however far past its own end that was, so each range of a long line without LF
    (a hostile shard: one line of 100 GB) read the rest of it: the file was read about
    ranges / 2 times over, where one reader reads it once."""
    size, cut = 1 << 20, 1 << 12
    data = b"ok\n" + b"x" * size + b"\nlast\n"
    read = 0

    class Counted:
        def __init__(self) -> None:
            self.at = 0

        def seek(self, at: int) -> None:
            self.at = at

        def read(self, n: int = -1) -> bytes:
            nonlocal read
            chunk = data[self.at : self.at + n]
            self.at += len(chunk)
            read += len(chunk)
            return chunk

    lines: list[bytes | None] = []
    for start in range(0, len(data), cut):
        stream = RangeStream(Counted(), start, min(len(data), start + cut), chunk=1 << 10)
        lines.extend(line for _, line in iter_lines(stream, limit=size // 2))  # type: ignore[arg-type]
    assert lines == [b"ok", None, b"last"]
    assert read <= 2 * len(data) + len(range(0, len(data), cut)) * (1 << 10)
