"""Content-Encoding (:mod:`pithlog.net.encoding`) against the standard decoders and a model
of the cap: what the server compresses, whole or streamed in any chunks, decodes to
exactly what it was given; what a client reads is the decoded body, in whatever chunks
the network cuts it, or refused: junk after a member or frame, a cut stream, more than
the cap before or after decoding."""

from __future__ import annotations

import gzip
import itertools
import random
from collections.abc import AsyncIterator, Iterator

import anyio
import brotli  # type: ignore[import-untyped]
import httpx
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.datastructures import Headers

from pithlog.net import encoding

_pieces = (st.binary(max_size=300) | st.integers(0, 3000).map(lambda n: b"ab\n" * n)
           | st.integers((1 << 16) - 2, (1 << 16) + 2).map(bytes))  # fmt: skip
"""Bodies that do not compress, bodies that compress far, and bodies about as long as the
64 KiB a client decodes at a time (:data:`pithlog.net.encoding.READ`)."""
_noise = st.integers(1 << 14, 1 << 18).map(lambda n: random.Random(n).randbytes(n))
"""Bodies long enough, and far enough from compressing, that a streaming compressor hands
out bytes before its end."""


def _standard(raw: bytes, coding: str) -> bytes:
    """``raw`` decoded by each coding's own library, reading every member or frame."""
    if coding == "zstd":
        reader = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)
        return reader.read()
    if coding == "br":
        decoded: bytes = brotli.decompress(raw)
        return decoded
    return gzip.decompress(raw)


async def _chunks(chunks: list[bytes]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


@settings(max_examples=60, deadline=None)
@given(st.lists(_pieces | _noise, max_size=6), st.sampled_from(["zstd", "br", "gzip"]))
def test_a_stream_packed_in_any_chunks_decodes_to_them(chunks: list[bytes], coding: str) -> None:
    async def packed() -> bytes:
        return b"".join([part async for part in encoding.packed_stream(_chunks(chunks), coding)])

    assert _standard(anyio.run(packed), coding) == b"".join(chunks)


@settings(max_examples=60, deadline=None)
@given(_pieces, st.sampled_from(["zstd", "br, gzip", "gzip;q=0.5", "identity", "zstd;q=0"]),
       st.integers(0, 2000))  # fmt: skip
def test_an_answer_packed_apart_decodes_to_it(body: bytes, accept: str, apart: int) -> None:
    headers = Headers({"accept-encoding": accept})
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(encoding, "APART_BYTES", apart)
        packed, sent = anyio.run(encoding.packed_apart, headers, body)
    coding = sent.get("Content-Encoding")
    if len(body) < apart or coding is None:
        assert (packed, sent) == (body, {})
        assert len(body) < apart or accept in ("identity", "zstd;q=0")
    else:
        assert coding == encoding.apart_coding(headers) and sent["Vary"] == "Accept-Encoding"
        assert _standard(packed, coding) == body


class _Chunked(httpx.SyncByteStream):
    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = chunks

    def __iter__(self) -> Iterator[bytes]:
        yield from self._chunks


class _Refused(Exception):
    pass


class _TooLong(Exception):
    pass


def _cut(raw: bytes, cuts: list[int]) -> list[bytes]:
    at = sorted({c % (len(raw) + 1) for c in cuts} | {0, len(raw)})
    return [raw[a:b] for a, b in itertools.pairwise(at)]


def _encoded(pieces: list[bytes], coding: str, sized: list[bool]) -> bytes:
    """``pieces`` as members or frames of ``coding``, one each: zstd frames with and
    without their content size, and a skippable frame between some."""
    if coding == "gzip":
        return b"".join(gzip.compress(piece, mtime=0) for piece in pieces)
    if coding == "zstd":
        frames = []
        for piece, with_size in zip(pieces, sized + [True] * len(pieces), strict=False):
            if with_size:
                frames.append(zstandard.ZstdCompressor().compress(piece))
            else:
                stream = zstandard.ZstdCompressor().compressobj()
                frames.append(stream.compress(piece) + stream.flush())
                frames.append(b"\x50\x2a\x4d\x18" + (3).to_bytes(4, "little") + b"pad")
        return b"".join(frames)
    return b"".join(pieces)


_codings = st.sampled_from(["gzip", "zstd", "identity"])


@settings(max_examples=150, deadline=None)
@given(st.lists(_pieces, min_size=1, max_size=4), _codings, st.lists(st.booleans()),
       st.lists(st.integers(0, 1 << 16), max_size=8),
       st.integers(0, 12_000) | st.integers(0, 1 << 18))  # fmt: skip
def test_an_answer_in_any_chunks_is_its_body_or_past_its_cap(
    pieces: list[bytes], coding: str, sized: list[bool], cuts: list[int], limit: int
) -> None:
    body = b"".join(pieces)
    raw = _encoded(pieces, coding, sized)
    headers = {} if coding == "identity" else {"Content-Encoding": coding}
    answer = httpx.Response(200, headers=headers, stream=_Chunked(_cut(raw, cuts)))
    try:
        got = encoding.read_answer(answer, limit, _Refused, _TooLong)
    except _TooLong:
        assert len(body) > limit
    except _Refused as exc:
        assert coding != "identity" and len(raw) > limit, exc
    else:
        assert got == body and len(raw) <= limit and len(body) <= limit


@settings(max_examples=100, deadline=None)
@given(st.lists(_pieces, min_size=1, max_size=3), st.sampled_from(["gzip", "zstd"]),
       st.binary(min_size=1, max_size=20), st.lists(st.integers(0, 1 << 16), max_size=6),
       st.booleans())  # fmt: skip
def test_junk_after_a_member_or_a_cut_one_is_refused(
    pieces: list[bytes], coding: str, junk: bytes, cuts: list[int], cut: bool
) -> None:
    whole, last = _encoded(pieces[:-1], coding, []), _encoded(pieces[-1:], coding, [])
    # cut inside the last member or frame: cut at its start, the ones before are whole
    raw = whole + (last[: -min(len(junk), len(last) - 1)] if cut else last + junk)
    answer = httpx.Response(200, headers={"Content-Encoding": coding},
                            stream=_Chunked(_cut(raw, cuts)))  # fmt: skip
    with pytest.raises(_Refused, match="does not decode"):
        encoding.read_answer(answer, 1 << 20, _Refused, _TooLong)


def test_the_models_decoders_read_every_member() -> None:
    """The standard decoders the properties compare with read several members and
    frames (so a first one alone cannot pass for the whole)."""
    assert gzip.decompress(gzip.compress(b"a") + gzip.compress(b"b")) == b"ab"
    two = zstandard.ZstdCompressor().compress(b"a") + zstandard.ZstdCompressor().compress(b"b")
    assert _standard(two, "zstd") == b"ab"
