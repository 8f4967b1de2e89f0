"""Content-Encoding on pithlog's HTTP (``docs/network.md``, "Compression"): what the server
sends, and the one way its clients read an answer.

**Serving.** :func:`compressed` answers a request that accepts ``zstd`` (RFC 8878,
section 7.2) with zstd, else brotli or gzip as it accepts them, else as is
(starlette-compress, which weighs the header's q-values and streams bodies). zstd at its
default level compresses the JSON Lines of ``/copies`` about twice as far as gzip level 6
for a tenth of the CPU (9.6x at 3.7 us per copy against 5.4x at 29 us, the bench's copies
in the server's chunks of 16): gzip had been half of the server's work in a mirror's pull.

**Reading.** A client asks for ``zstd, gzip`` itself and decodes the raw bytes here
(:func:`read_answer`), so that an answer is bounded after decoding as well as before: httpx
decodes each network chunk whole, and a zstd frame of 16 KB can stand for 512 MB (zstd's
blocks may repeat one byte 128 KiB times each); through httpx, a mirror asking for its
checkpoint grew by 1 GB before its limit of 1 MiB was checked. Here a decoder never yields
more than the limit allows, and a zstd frame may not ask for a window over
:data:`MAX_WINDOW`.
"""

from __future__ import annotations

import asyncio
import gzip
import io
import time
import zlib
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from typing import IO, cast

import anyio
import brotli  # type: ignore[import-untyped]
import httpx
import zstandard
from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from starlette_compress import CompressMiddleware, add_compress_type

# the middleware's own reading of Accept-Encoding, so that an answer compressed apart is
# negotiated as the middleware negotiates the rest
from starlette_compress._utils import parse_accept_encoding

from pithlog.parallel.cores import usable_cores

ACCEPT_ENCODING = "zstd, gzip"
"""What pithlog's clients ask for; they decode it themselves (:func:`read_answer`)."""

LEVEL = 3
"""zstd's default level."""

BROTLI_QUALITY = 4
"""brotli's quality, starlette-compress's default."""

MAX_WINDOW = 8 << 20
"""The largest zstd window a client allocates for an answer: a frame that asks for more is
refused (the server's frames, at :data:`LEVEL`, ask for 2 MiB at most)."""

READ = 64 << 10
"""Bytes decoded at a time."""


# --- serving ---------------------------------------------------------------------------

COMPRESSED_TYPES = ("application/x-ndjson",)
"""Media types of pithlog's answers that starlette-compress does not list itself (JSON,
text and HTML it does)."""

for _media in COMPRESSED_TYPES:
    add_compress_type(_media)


APART_BYTES = 256 << 10
"""Answers at least this large are compressed by their route in a worker thread
(:func:`packed_apart`); starlette-compress passes an answer that says its
``Content-Encoding`` through. On the event loop, gzip of a 7.6 MB state document held
every other request of the worker for 111-131 ms, and brotli of a 5.9 MB one 389 ms."""


_packers: tuple[asyncio.AbstractEventLoop, anyio.CapacityLimiter] | None = None


def packers() -> anyio.CapacityLimiter:
    """The worker threads that read copies and compress large answers, as many at once as
    the usable cores (:func:`~pithlog.parallel.cores.usable_cores`; more work no faster),
    per event loop (a limiter binds to the loop it first waits on). Their own, not the 40
    of anyio's pool that the other store reads and the commits of submissions run in: 900
    clients asking at once for copies of 960 KB in brotli filled the pool with their reads
    and compressions, and a ``/checkpoint`` waited 3.8 s for a thread, a submission of one
    event 6.0 s."""
    global _packers
    loop = asyncio.get_running_loop()
    if _packers is None or _packers[0] is not loop:
        _packers = (loop, anyio.CapacityLimiter(usable_cores()))
    return _packers[1]


def pack(body: bytes, coding: str) -> bytes:
    """``body`` in ``coding`` (``zstd``, ``br`` or ``gzip``), at the levels of
    :func:`compressed`."""
    if coding == "zstd":
        return zstandard.ZstdCompressor(level=LEVEL).compress(body)
    if coding == "br":
        packed: bytes = brotli.compress(body, quality=BROTLI_QUALITY)
        return packed
    return gzip.compress(body, compresslevel=6, mtime=0)


async def packed_apart(request_headers: Headers,
                       body: bytes) -> tuple[bytes, dict[str, str]]:  # fmt: skip
    """``body``, and the headers to send it with: compressed in a worker thread of
    :func:`packers` when it is
    at least :data:`APART_BYTES` and the request accepts zstd, brotli or gzip (the first
    of them, as the middleware chooses); else as it is, for :func:`compressed` to weigh.
    Every coding the middleware answers in is made here: a request that accepted only
    ``br`` had its large answers compressed by the middleware, on the event loop."""
    if len(body) < APART_BYTES:
        return body, {}
    coding = apart_coding(request_headers)
    if coding is None:
        return body, {}
    packed = await anyio.to_thread.run_sync(pack, body, coding, limiter=packers())
    return packed, {"Content-Encoding": coding, "Vary": "Accept-Encoding"}


def apart_coding(request_headers: Headers) -> str | None:
    """The coding the middleware would answer in: the first of zstd, brotli and gzip that
    the request accepts (``None``: none)."""
    # every Accept-Encoding line, as the middleware reads them: the first alone left a
    # coding of a second line to the middleware, on the event loop
    accepted = parse_accept_encoding(",".join(request_headers.getlist("accept-encoding")))
    return next((c for c in ("zstd", "br", "gzip") if c in accepted), None)


def _stream_packer(coding: str) -> tuple[Callable[[bytes], bytes], Callable[[], bytes]]:
    """One stream in ``coding``, at the levels of :func:`compressed`: what takes each
    chunk, and what ends the stream."""
    if coding == "zstd":
        zstd = zstandard.ZstdCompressor(level=LEVEL).compressobj()
        return zstd.compress, zstd.flush
    if coding == "br":
        br = brotli.Compressor(quality=BROTLI_QUALITY)
        return br.process, br.finish
    deflate = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)  # a gzip member
    return deflate.compress, deflate.flush


async def packed_stream(chunks: AsyncIterator[bytes], coding: str) -> AsyncIterator[bytes]:
    """``chunks`` as one stream in ``coding``, each compressed in a worker thread (the
    streamed :func:`packed_apart`; the answer says its ``Content-Encoding``, and
    starlette-compress passes it through). A ``/copies/`` bundle of 9.4 MB, streamed a
    chunk of about 1 MiB at a time and compressed by the middleware on the event loop,
    held the worker's other requests up to 531 ms in gzip, 296 ms in brotli and 86 ms in
    zstd."""
    feed, end = _stream_packer(coding)
    async for chunk in chunks:
        packed = await anyio.to_thread.run_sync(feed, chunk, limiter=packers())
        del chunk  # not held while the next one is read
        if packed:
            yield packed
        # nor its compressed bytes, as many again for copies that do not compress: the
        # answer holds one chunk's bytes in its room (HeldStream)
        del packed
    yield await anyio.to_thread.run_sync(end, limiter=packers())


MINIMUM_BYTES = 1024
"""Answers shorter than this go as they are: compressing them saves less than it costs."""
CODINGS = frozenset({"zstd", "br", "gzip"})
"""What :func:`compressed` answers in, as the request accepts them."""


def compressed() -> list[Middleware]:
    """The middleware of a route whose answers compress: the first of zstd (level 3, zstd's
    default), brotli and gzip (level 6) that the request's ``Accept-Encoding`` accepts,
    for answers of :data:`MINIMUM_BYTES` or more (starlette-compress), their ETag made
    weak (:class:`WeakTags`)."""
    return [Middleware(WeakTags),
            Middleware(CompressMiddleware, minimum_size=MINIMUM_BYTES, zstd_level=LEVEL,
                       brotli_quality=BROTLI_QUALITY, gzip_level=6)]  # fmt: skip


def encodes(request_headers: Headers, size: int) -> bool:
    """Whether an answer of ``size`` bytes to a request with these headers goes out
    compressed by :func:`compressed` (or :func:`packed_apart`): what its ETag is."""
    accepted = parse_accept_encoding(",".join(request_headers.getlist("accept-encoding")))
    return size >= MINIMUM_BYTES and not accepted.isdisjoint(CODINGS)


class WeakTags:
    """ASGI middleware: an answer sent with a ``Content-Encoding`` has its strong ETag made
    weak (``W/"..."``), as nginx's gzip does. RFC 9110 8.8.3: a strong ETag names one
    representation, byte for byte, content coding included; the tag of a state or an event
    names the document (its ``state_sha256``, its SHA-256), which its identity answer
    keeps, and its compressed answers, whose bytes depend on the encoder and its version,
    share weakly. ``If-None-Match`` compares weakly, so either tag revalidates either
    answer."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = message.get("headers", [])
                if any(name.lower() == b"content-encoding" for name, _ in headers):
                    message["headers"] = [
                        (name, b"W/" + value if name.lower() == b"etag"
                         and not value.startswith(b"W/") else value)
                        for name, value in headers
                    ]  # fmt: skip
            await send(message)

        await self.app(scope, receive, sending)


# --- reading ---------------------------------------------------------------------------


class _Chunks:
    """A file-like ``read`` over an iterator of byte chunks (what zstd's reader takes)."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._held = b""

    def read(self, size: int = -1) -> bytes:
        if not self._held:
            self._held = next(self._chunks, b"")
        if size < 0 or size >= len(self._held):
            out, self._held = self._held, b""
        else:
            out, self._held = self._held[:size], self._held[size:]
        return out


def _zstd(raw: Iterator[bytes]) -> Iterator[bytes]:
    ends = _FrameEnds()  # the frames' ends, checked as they come, last

    def walked() -> Iterator[bytes]:
        for chunk in raw:
            ends.feed(chunk)
            yield chunk

    decompressor = zstandard.ZstdDecompressor(max_window_size=MAX_WINDOW)
    source = cast("IO[bytes]", _Chunks(walked()))  # all that zstd's reader calls is read()
    with decompressor.stream_reader(source, read_size=READ, read_across_frames=True,
                                    closefd=False) as reader:  # fmt: skip
        while chunk := reader.read(READ):
            yield chunk
    if not ends.whole():  # zstd's reader ends quietly where its input does
        raise ValueError("the zstd stream ends inside a frame")


_MAGIC = 0xFD2FB528
_SKIPPABLE = 0x184D2A50  # ... to 0x184D2A5F (RFC 8878, 3.1.2)


class _FrameEnds:
    """Whether the bytes :meth:`feed` was given are whole zstd frames (RFC 8878, 3.1):
    each frame's header, its blocks up to the last, and its checksum when it has one,
    ending where the bytes do. Only headers are read (the decoder checks what they frame),
    as the bytes come, and only a header not yet whole is kept: the frames were kept
    until the answer's end to be walked then, as many bytes again as the answer for
    frames of stored blocks (an origin's incompressible bytes)."""

    def __init__(self) -> None:
        self._head = bytearray()  # a frame or block header, not yet whole
        self._in_frame = False  # next: a block header (else a frame header)
        self._checksum = False  # the frame being read ends in a checksum
        self._skip = 0  # bytes framed by the last header, not yet come
        self._bad = False  # not a frame where one begins

    def _needed(self) -> int:
        """The bytes of the header being read, as far as those come tell."""
        head = self._head
        if self._in_frame:
            return 3
        if len(head) < 4:
            return 4
        magic = int.from_bytes(head[:4], "little")
        if magic & 0xFFFFFFF0 == _SKIPPABLE:
            return 8
        if magic != _MAGIC:
            return 4
        if len(head) < 5:
            return 5
        descriptor = head[4]
        single = descriptor >> 5 & 1
        fcs = (0 if not single else 1, 2, 4, 8)[descriptor >> 6]
        return 5 + (0 if single else 1) + (0, 1, 2, 4)[descriptor & 3] + fcs

    def feed(self, data: bytes) -> None:
        at = 0
        while at < len(data) and not self._bad:
            if self._skip:
                n = min(self._skip, len(data) - at)
                at += n
                self._skip -= n
                continue
            while len(self._head) < (needed := self._needed()) and at < len(data):
                take = min(needed - len(self._head), len(data) - at)
                self._head += data[at : at + take]
                at += take
            if len(self._head) == self._needed():
                self._header()

    def _header(self) -> None:
        head, self._head = self._head, bytearray()
        if self._in_frame:
            header = int.from_bytes(head, "little")
            kind, size = header >> 1 & 3, header >> 3
            self._skip = 1 if kind == 1 else size
            if header & 1:  # the frame's last block
                self._skip += 4 if self._checksum else 0  # Content_Checksum
                self._in_frame = False
            return
        magic = int.from_bytes(head[:4], "little")
        if magic & 0xFFFFFFF0 == _SKIPPABLE:
            self._skip = int.from_bytes(head[4:8], "little")
        elif magic != _MAGIC:
            self._bad = True
        else:
            self._in_frame = True
            self._checksum = bool(head[4] >> 2 & 1)

    def whole(self) -> bool:
        """The bytes fed end where a frame does."""
        return not (self._bad or self._in_frame or self._head or self._skip)


def _gzip(raw: Iterator[bytes]) -> Iterator[bytes]:
    """The members of a gzip stream, one after the other (RFC 1952 2.2: a gzip file is a
    series of members, and Python's gzip reads them all); bytes after a member that do not
    begin another are refused by the next one's header check. Only the first was read, and
    the rest dropped unread: two members were taken as the first one's bytes alone, and a
    member followed by junk as the member."""
    decompressor = zlib.decompressobj(16 + zlib.MAX_WBITS)
    for data in raw:
        while data:
            yield decompressor.decompress(data, READ)  # at most READ bytes each time
            data = decompressor.unconsumed_tail
            if decompressor.eof:
                data = decompressor.unused_data
                if data:  # the next member begins here
                    decompressor = zlib.decompressobj(16 + zlib.MAX_WBITS)
    if not decompressor.eof:
        raise ValueError("the gzip stream ends early")


ANSWER_GRACE = 60.0
"""Seconds any answer may take, beyond :data:`SLOWEST_RATE` for its cap."""
SLOWEST_RATE = 512 << 10
"""Bytes per second of its cap an answer must come at, on average, after the grace: the
client's time-out holds each read (60 s), and this the whole, so that an origin that
sends a byte a minute cannot hold a mirror, a sync or a poll for ever."""


def answer_seconds(limit: int) -> float:
    """The longest an answer capped at ``limit`` bytes may take (a 256 MiB bundle of
    copies: about 9.5 minutes; a checkpoint of 1 MiB: 62 s)."""
    return ANSWER_GRACE + limit / SLOWEST_RATE


def read_answer(
    response: httpx.Response,
    limit: int,
    refuse: Callable[[str], Exception],
    too_long: Callable[[str], Exception] | None = None,
    prefix: bool = False,
) -> bytes:
    """The body of a streamed ``response``, decoded by its ``Content-Encoding`` (none,
    ``gzip`` or ``zstd``): at most ``limit`` bytes before and after decoding, or
    ``refuse(why)`` is raised as soon as more arrive, or when the body cannot be decoded,
    or once it has taken longer than :func:`answer_seconds` of ``limit``.
    Read raw (httpx decodes nothing); the request asks for :data:`ACCEPT_ENCODING`, and
    an answer in another encoding is refused.

    ``too_long(why)``, when given, is raised in place of ``refuse`` when the body itself
    (decoded, or sent unencoded) passes ``limit``: for a caller that knows how long the
    answer can be (``pithlog audit``), that is a wrong answer, where too many encoded
    bytes, like the other refusals, are only an answer it could not read.

    ``prefix``: the caller keeps the first ``limit`` bytes of a body that may be longer (a
    full tile, bundle or bundle of copies served in place of a dropped partial one, C2SP
    tlog-tiles): those are returned, and nothing after them is read (the caller closes the
    answer). Encoded, it is read to :func:`prefix_raw` of ``limit`` at most, or refused."""
    longer = too_long or refuse
    if response.is_stream_consumed:  # made in memory (a transport of the caller's), read
        if prefix:
            return response.content[:limit]
        if len(response.content) > limit:
            raise longer(f"an answer of over {limit} bytes")
        return response.content
    coding = response.headers.get("content-encoding", "identity").strip().lower()
    sent = longer if coding in ("", "identity") else refuse  # raw bytes: the body, or not
    # a prefix unencoded is its own bound: the decoded bytes stop it at the chunk that
    # passes ``limit``, before its raw bound is passed
    most = prefix_raw(limit) if prefix and coding not in ("", "identity") else limit
    raw = _in_time(_bounded(response.iter_raw(), most, sent, prefix), answer_seconds(most),
                   refuse)  # fmt: skip
    decoded: Iterator[bytes]
    if coding in ("", "identity"):
        decoded = raw
    elif coding in ("gzip", "x-gzip"):
        decoded = _gzip(raw)
    elif coding == "zstd":
        decoded = _zstd(raw)
    else:
        raise refuse(f"an answer in Content-Encoding {coding[:40]!r}, which was not asked for")
    # a BytesIO hands its buffer over as the bytes (getvalue() copies nothing when nothing
    # else holds it): a bytearray made bytes at the end held every answer twice at its
    # peak, two bundles of copies of 256 MiB for each of the mirror's fetches
    body = io.BytesIO()
    try:
        for chunk in decoded:
            if body.tell() + len(chunk) > limit:
                if not prefix:
                    raise longer(f"an answer of over {limit} bytes")
                body.write(memoryview(chunk)[: limit - body.tell()])
            else:
                body.write(chunk)
            if prefix and body.tell() >= limit:
                break  # the rest is not asked for
    except (zlib.error, zstandard.ZstdError, ValueError) as exc:
        raise refuse(f"an answer whose {coding} encoding does not decode: {exc}") from None
    finally:
        if isinstance(decoded, Generator):  # its decoder let go now, not when collected
            decoded.close()
    return body.getvalue()


PREFIX_SLACK = 4 * READ
"""The raw bytes past a prefix's own that :func:`prefix_raw` allows: what a decoder reads
ahead (a chunk of its input) and the end of the last block it decodes."""


def prefix_raw(limit: int) -> int:
    """The most read of an encoded answer whose first ``limit`` bytes are kept
    (:func:`read_answer`'s ``prefix``): ``limit``, what the encoding adds to bytes that do
    not compress (zstd's and gzip's stored blocks: 3 and 5 bytes a block of 128 and 64
    KiB, well under 1/64), and :data:`PREFIX_SLACK`. A bundle of copies of width 1 (1 MiB
    + 1) is read to 1.27 MiB, where the whole full one was read to 256 MiB."""
    return limit + limit // 64 + PREFIX_SLACK


def _in_time(
    chunks: Iterator[bytes], seconds: float, refuse: Callable[[str], Exception]
) -> Iterator[bytes]:
    deadline = time.monotonic() + seconds
    for chunk in chunks:
        if time.monotonic() > deadline:
            raise refuse(f"an answer that took over {seconds:.0f} s")
        yield chunk


def _bounded(
    chunks: Iterator[bytes], limit: int, refuse: Callable[[str], Exception],
    prefix: bool = False,
) -> Iterator[bytes]:
    """``chunks`` up to ``limit`` bytes; past it, ``refuse``. A ``prefix``'s reader stops
    by itself, so the chunk that passes ``limit`` is still given it: past it, only the next
    one asked for is refused."""
    seen = 0
    while not (prefix and seen >= limit):  # not another chunk asked for past a prefix's
        chunk = next(chunks, None)
        if chunk is None:
            return
        seen += len(chunk)
        if seen > limit and not prefix:
            raise refuse(f"an answer of over {limit} bytes")
        yield chunk
    raise refuse(f"an answer of over {limit} bytes")
