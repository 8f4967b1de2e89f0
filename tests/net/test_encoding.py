"""Content-Encoding (pithlog.net.encoding): the clients' answers are bounded after decoding,
against a hostile server on 127.0.0.1 (uvicorn, in a thread) whose small bodies decode to
hundreds of megabytes; encodings not asked for, cut frames and oversized windows are
refused with the client's own error code."""

from __future__ import annotations

import contextlib
import gzip
import tracemalloc
import zlib
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
import zstandard
from served import in_thread
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from pithlog.errors import MirrorError, SyncError
from pithlog.net.encoding import MAX_WINDOW, read_answer
from pithlog.net.mirror import Origin
from pithlog.net.sync import Limits
from pithlog.net.sync_http import HttpTransport
from pithlog.net.witness_client import MAX_ANSWER_BYTES, ask_witness

ZEROS = 256 << 20
"""What each bomb decodes to."""
FULL = 32 << 20
"""What an answer read up to its cap decodes to."""


def _zstd_bomb() -> bytes:
    compressor = zstandard.ZstdCompressor(level=1).compressobj()
    block = bytes(1 << 20)
    return b"".join(compressor.compress(block) for _ in range(ZEROS >> 20)) + compressor.flush()


def _gzip_bomb() -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = bytes(1 << 20)
    return b"".join(compressor.compress(block) for _ in range(64)) + compressor.flush()


def _wide_window() -> bytes:
    params = zstandard.ZstdCompressionParameters.from_level(3, window_log=27)
    compressor = zstandard.ZstdCompressor(compression_params=params).compressobj()
    return compressor.compress(b"\1" * (MAX_WINDOW * 2)) + compressor.flush()


@pytest.fixture(scope="module")
def hostile() -> Iterator[str]:
    """A server whose every answer is one of the bodies below, by path."""
    plain = b"a checkpoint\n" * 1000
    bodies = {
        "zstd-bomb": (_zstd_bomb(), "zstd"),
        "gzip-bomb": (_gzip_bomb(), "gzip"),
        "brotli": (b"\x1b\x03\x00", "br"),
        "zstd-cut": (zstandard.ZstdCompressor().compress(plain)[:-4], "zstd"),
        "zstd-wide": (_wide_window(), "zstd"),
        "zstd-ok": (zstandard.ZstdCompressor().compress(plain), "zstd"),
        "gzip-ok": (zlib.compress(plain, wbits=31), "gzip"),
        "zstd-full": (zstandard.ZstdCompressor().compress(bytes(FULL)), "zstd"),
    }
    assert all(len(body) < 1 << 20 for body, _ in bodies.values())

    async def answer(request: Request) -> Response:
        name = request.url.path.strip("/").split("/")[0]
        body, coding = bodies[name]
        return Response(body, headers={"Content-Encoding": coding})

    app = Starlette(routes=[Route("/{rest:path}", answer, methods=["GET", "POST"])])
    with in_thread(app) as url:
        yield url


@contextlib.contextmanager
def peak(bound: int) -> Iterator[None]:
    """The Python memory allocated meanwhile stays under ``bound`` bytes at its peak."""
    tracemalloc.start()
    try:
        yield
        _, top = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert top < bound, f"{top:,} bytes at the peak"


@pytest.mark.parametrize("bomb", ["zstd-bomb", "gzip-bomb"])
def test_a_bomb_is_refused_at_the_limit_after_decoding(hostile: str, bomb: str) -> None:
    with Origin(hostile) as origin, peak(8 << 20), pytest.raises(MirrorError) as caught:
        origin.get(bomb, 1 << 20)
    assert caught.value.code == "mirror.fetch"
    assert "an answer of over 1048576 bytes" in caught.value.message


@pytest.mark.parametrize(("path", "why"), [
    ("brotli", "Content-Encoding 'br', which was not asked for"),
    ("zstd-cut", "ends inside a frame"),
    ("zstd-wide", "does not decode"),
])  # fmt: skip
def test_what_does_not_decode_is_refused(hostile: str, path: str, why: str) -> None:
    with Origin(hostile) as origin, pytest.raises(MirrorError) as caught:
        origin.get(path, 1 << 30)
    assert caught.value.code == "mirror.fetch" and why in caught.value.message


@pytest.mark.parametrize("path", ["zstd-ok", "gzip-ok"])
def test_encoded_answers_are_read_whole(hostile: str, path: str) -> None:
    with Origin(hostile) as origin:
        assert origin.get(path, 13_000) == b"a checkpoint\n" * 1000
        with pytest.raises(MirrorError):
            origin.get(path, 12_999)


def test_an_answer_at_its_cap_is_held_once(hostile: str) -> None:
    """The body is handed over as it was gathered: an answer of its cap in full is held
    once at the peak (it was twice, a bytearray and its copy as bytes)."""
    with Origin(hostile) as origin, peak(FULL * 3 // 2):
        assert len(origin.get("zstd-full", FULL)) == FULL


def test_a_zstd_answer_that_does_not_compress_is_held_once() -> None:
    """A zstd answer's frames are checked to end whole as they come, not kept to be walked
    at the end: an origin that sent its cap in zstd frames of incompressible bytes (stored
    blocks, as many bytes as they decode to) had them held twice, its frames and the body,
    and a mirror's five bundles of copies in flight grew it to 2.6 GB, against 1.6 GB for
    the same bytes sent unencoded."""
    import os

    body = os.urandom(FULL)
    raw = zstandard.ZstdCompressor(level=1).compress(body)
    assert len(raw) > FULL  # stored blocks: no smaller than the body
    chunks = [raw[at : at + (64 << 10)] for at in range(0, len(raw), 64 << 10)]
    answer = httpx.Response(200, headers={"Content-Encoding": "zstd"}, stream=_Chunked(chunks))
    with peak(FULL * 3 // 2):
        got = read_answer(answer, 2 * FULL, ValueError)
    assert got == body


def test_the_sync_and_witness_clients_are_bounded_too(hostile: str) -> None:
    limits = Limits(max_message=1 << 20)
    transport = HttpTransport(hostile + "/zstd-bomb", limits)
    with transport, peak(8 << 20), pytest.raises(SyncError) as caught:
        transport.request(b"{}")
    assert caught.value.code == "sync.limit"
    with httpx.Client() as client, peak(8 << 20):
        asked = ask_witness(client, hostile + "/zstd-bomb", b"note", 1, lambda old: [], [])
    assert asked.problem == f"an answer of over {MAX_ANSWER_BYTES} bytes"
    assert not asked.cosigned


def test_an_answer_made_in_memory_is_taken_as_read() -> None:
    answer = httpx.Response(200, content=b"x" * 10)
    assert read_answer(answer, 10, ValueError) == b"x" * 10
    with pytest.raises(ValueError, match="over 9 bytes"):
        read_answer(httpx.Response(200, content=b"x" * 10), 9, ValueError)


class _Longer(Exception):
    pass


def test_a_body_over_its_limit_is_too_long_and_too_many_encoded_bytes_are_refused() -> None:
    """``too_long`` is for the body itself past the limit (sent as is, or decoded); encoded
    bytes past it, which an encoding of the right body may take, are ``refuse``d. The cap
    of a served state leaves room for zstd or gzip of a state that does not compress."""
    import os

    from pithlog.net.audit import state_cap

    def sent(body: bytes, coding: str | None) -> httpx.Response:
        raw = body if coding is None else zstandard.ZstdCompressor().compress(body) \
            if coding == "zstd" else gzip.compress(body)  # fmt: skip
        headers = {} if coding is None else {"Content-Encoding": coding}
        return httpx.Response(200, headers=headers, stream=httpx.ByteStream(raw))

    for coding in (None, "zstd", "gzip"):
        with pytest.raises(_Longer, match="over 500 bytes"):
            read_answer(sent(b"x" * 1000, coding), 500, ValueError, _Longer)
        noise = os.urandom(100_000)
        if coding is not None:  # the encoded noise is longer than the noise
            with pytest.raises(ValueError, match="over 100000 bytes"):
                read_answer(sent(noise, coding), len(noise), ValueError, _Longer)
        assert read_answer(sent(noise, coding), state_cap(noise), ValueError, _Longer) == noise


def test_the_server_compresses_whole_and_streamed_answers_alike() -> None:
    """A 2 MiB answer and a streamed one of JSON Lines, through the middleware that the
    routes of pithlog serve use: zstd, brotli or gzip as accepted, the same bytes."""
    from starlette.responses import StreamingResponse

    from pithlog.net.encoding import compressed

    large = b"".join(b'{"n":%d}\n' % i for i in range(250_000))

    async def whole(request: Request) -> Response:
        return Response(large, media_type="application/x-ndjson")

    async def streamed(request: Request) -> StreamingResponse:
        async def parts() -> AsyncIterator[bytes]:
            for at in range(0, len(large), 300_000):
                yield large[at : at + 300_000]

        return StreamingResponse(parts(), media_type="application/x-ndjson")

    app = Starlette(routes=[Route("/whole", whole, middleware=compressed()),
                            Route("/streamed", streamed, middleware=compressed())])  # fmt: skip
    with in_thread(app) as url, httpx.Client(base_url=url) as client:
        for path in ("/whole", "/streamed"):
            for accept, coding in (("zstd, br, gzip", "zstd"), ("br, gzip", "br"),
                                   ("gzip", "gzip"), ("identity", None)):  # fmt: skip
                with client.stream("GET", path, headers={"Accept-Encoding": accept}) as got:
                    raw = b"".join(got.iter_raw())
                assert got.headers.get("content-encoding") == coding, (path, accept)
                if coding in (None, "zstd", "gzip"):  # what pithlog's clients decode
                    assert read_answer_of(got, raw) == large, (path, accept)
                assert coding is None or len(raw) < len(large) / 3


def read_answer_of(response: httpx.Response, raw: bytes) -> bytes:
    """:func:`read_answer` of an answer already read raw: the same headers, its bytes."""
    again = httpx.Response(response.status_code, headers=response.headers,
                           stream=httpx.ByteStream(raw))  # fmt: skip
    return read_answer(again, 1 << 30, ValueError)


def test_a_cut_gzip_answer_is_refused_not_taken_as_its_first_part() -> None:
    """A gzip stream that ends before its trailer (a connection cut, a truncating proxy)
    decodes to a prefix of the answer: refused, as a cut zstd frame is, never handed on
    as the whole."""
    plain = b"a checkpoint\n" * 1000
    whole = gzip.compress(plain)
    for cut in (whole[:-8], whole[: len(whole) // 2]):
        answer = httpx.Response(200, headers={"Content-Encoding": "gzip"},
                                stream=httpx.ByteStream(cut))  # fmt: skip
        with pytest.raises(ValueError, match="gzip stream ends early"):
            read_answer(answer, 1 << 20, ValueError)
    answer = httpx.Response(200, headers={"Content-Encoding": "gzip"},
                            stream=httpx.ByteStream(whole))  # fmt: skip
    assert read_answer(answer, 1 << 20, ValueError) == plain


def test_a_gzip_answer_of_several_members_is_read_whole_and_junk_after_one_refused() -> None:
    """RFC 1952 2.2: a gzip stream is a series of members (a proxy that compresses as it
    streams may send several), read one after the other as Python's gzip reads them, even
    when a member ends at the end of a network chunk; bytes after a member that are not
    another are refused. The first member alone was taken as the answer, and what followed
    it dropped unread."""
    first, second = gzip.compress(b"origin\n"), gzip.compress(b"42\n")

    def read(raw: bytes, step: int) -> bytes:
        chunks = [raw[at : at + step] for at in range(0, len(raw), step)]
        answer = httpx.Response(200, headers={"Content-Encoding": "gzip"},
                                stream=_Chunked(chunks))  # fmt: skip
        return read_answer(answer, 1 << 20, ValueError)

    for step in (1, len(first), 1 << 20):
        assert read(first + second, step) == b"origin\n42\n"
        with pytest.raises(ValueError, match="does not decode"):
            read(first + b"junk", step)
        with pytest.raises(ValueError, match="gzip stream ends early"):
            read(first + second[:-4], step)


class _Chunked(httpx.SyncByteStream):
    """A body that comes in the chunks given."""

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = chunks

    def __iter__(self) -> Iterator[bytes]:
        yield from self._chunks


def test_encoded_bytes_are_bounded_at_the_limit_exactly() -> None:
    """``limit`` bounds the bytes received as well as the decoded ones: exactly ``limit``
    encoded bytes are read, one more refused, however small the body they decode to."""
    body = b"x" * 10
    raw = gzip.compress(body)
    for limit, taken in ((len(raw), True), (len(raw) - 1, False)):
        answer = httpx.Response(200, headers={"Content-Encoding": "gzip"},
                                stream=httpx.ByteStream(raw))  # fmt: skip
        if taken:
            assert read_answer(answer, limit, ValueError, _Longer) == body
        else:
            with pytest.raises(ValueError, match=f"over {limit} bytes"):
                read_answer(answer, limit, ValueError, _Longer)


@pytest.mark.parametrize("coding", ["zstd", "br", "gzip"])
def test_a_stream_compressed_apart_holds_one_chunk_while_the_next_is_read(coding: str) -> None:
    """/copies/ holds the bytes of one chunk out of the room for copies while it streams
    (COPIES_CHUNK_MOST). packed_stream kept the last chunk's compressed bytes while the
    next chunk was read: as many bytes again, uncounted, for copies that do not compress.
    Its output is given up once yielded; the stream is still the chunks, whole."""
    import asyncio
    import os

    import brotli

    from pithlog.net.encoding import packed_stream

    chunks = [os.urandom(1 << 20), os.urandom(1 << 20), b"", os.urandom(1000)]
    held: list[object] = []

    async def source() -> AsyncIterator[bytes]:
        for chunk in chunks:
            frame = stream.ag_frame  # the compressed stream, as it asks for the next chunk
            held.append(None if frame is None else frame.f_locals.get("packed"))
            yield chunk

    stream = packed_stream(source(), coding)

    async def drain() -> bytes:
        return b"".join([part async for part in stream])

    body = asyncio.run(drain())
    assert all(packed is None for packed in held), [type(p) for p in held]
    decoded = {"zstd": lambda b: zstandard.ZstdDecompressor().decompressobj().decompress(b),
               "br": brotli.decompress, "gzip": gzip.decompress}[coding](body)  # fmt: skip
    assert decoded == b"".join(chunks)


def test_a_prefix_is_read_to_its_limit_and_no_further() -> None:
    """``prefix``: the first ``limit`` bytes of a longer body (a full tile, bundle or bundle
    of copies served in place of a dropped partial one), plain, zstd or gzip, read to a
    chunk past them and no further (encoded: to :func:`prefix_raw` at most); a body of
    ``limit`` bytes or fewer whole; encoded bytes that decode to nothing refused at
    :func:`prefix_raw`, not read on."""
    import os

    from pithlog.net.encoding import prefix_raw

    step = 64 << 10
    body = os.urandom(4 << 20)  # does not compress: its encoding is longer than it
    limit = 1 << 20

    taken = [0]  # the raw bytes of the last answer read

    def read(raw: bytes, coding: str | None) -> bytes:
        chunks = [raw[at : at + step] for at in range(0, len(raw), step)]
        taken[0] = 0

        class Counted(_Chunked):
            def __iter__(self) -> Iterator[bytes]:
                for chunk in chunks:
                    taken[0] += len(chunk)
                    yield chunk

        headers = {} if coding is None else {"Content-Encoding": coding}
        answer = httpx.Response(200, headers=headers, stream=Counted(chunks))
        return read_answer(answer, limit, ValueError, _Longer, prefix=True)

    def encoded(data: bytes, coding: str | None) -> bytes:
        return data if coding is None else zstandard.ZstdCompressor().compress(data) \
            if coding == "zstd" else gzip.compress(data)  # fmt: skip

    for coding in (None, "zstd", "gzip"):
        assert read(encoded(body, coding), coding) == body[:limit]
        assert taken[0] <= (limit + step if coding is None else prefix_raw(limit) + step)
        for short in (body[:limit], body[:1000], b""):
            assert read(encoded(short, coding), coding) == short
    skippable = (0x184D2A50).to_bytes(4, "little") + (step - 8).to_bytes(4, "little")
    nothing = {"zstd": (skippable + bytes(step - 8)) * 64, "gzip": gzip.compress(b"") * 300_000}
    for coding, raw in nothing.items():
        with pytest.raises(ValueError, match=f"over {prefix_raw(limit)} bytes"):
            read(raw, coding)
        assert prefix_raw(limit) < taken[0] <= prefix_raw(limit) + step < len(raw)
