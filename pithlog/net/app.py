"""``pithlog serve``: a store's log on HTTP (``docs/network.md``), as a Starlette ASGI app.

The log is served as C2SP ``tlog-tiles`` (``/checkpoint``, ``/tile/<L>/<N>[.p/<W>]``,
``/tile/entries/<N>[.p/<W>]``) with the copies beside it (``/copies/...``, ``/copy/<hex>``,
``/event/sha256:<hex>``), state documents, proofs against the published checkpoint, and,
with ``submit``, ``POST /submit``. Other routes (``POST /sync``) are mounted through
``extra_routes``.

Every store read runs in a worker thread (:func:`starlette.concurrency.run_in_threadpool`),
so a slow read never holds the event loop. Every error is JSON ``{"error": code,
"message": ...}`` with a code of ``docs/errors.md``, never a traceback. Nothing is read
from the file system: every answer comes from the :class:`~pithlog.store.Store`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import re
from collections.abc import AsyncIterator
from typing import Any

import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from pithlog.errors import ServeError, TileError, register
from pithlog.net.answers import (
    IMPLEMENTED_METHODS,
    JSON,
    JSON_LINES,
    NO_STORE,
    answer_headers,
    not_implemented_message,
    send_error,
)
from pithlog.net.body_bytes import HeldAnswer, HeldStream
from pithlog.net.encoding import (
    APART_BYTES,
    apart_coding,
    compressed,
    encodes,
    packed_apart,
    packed_stream,
)
from pithlog.net.error_answers import error_handlers, error_response
from pithlog.net.large_answers import head_coded, head_only, packed_held
from pithlog.net.served_log import Log, ServeConfig
from pithlog.net.submit_route import PATH as SUBMIT_PATH
from pithlog.net.submit_route import SubmitRoute
from pithlog.protocol.canonical import MAX_ENVELOPE_BYTES
from pithlog.protocol.events import is_event_id
from pithlog.protocol.records import is_pith_number
from pithlog.store import PendingPith
from pithlog.transparency import tiles
from pithlog.transparency.checkpoint import decimal_of
from pithlog.transparency.proofs import ConsistencyProof, InclusionProof

register(
    {
        "serve.not_found": "nothing at that path: see docs/network.md for the endpoints "
        "(a tile or leaf beyond the tree is not there yet)",
        "serve.bad_path": "the path names no resource: a malformed event_id, copy hash, pith "
        "number or tree size (docs/network.md)",
        "serve.method": "that method is not allowed on this path (docs/network.md)",
        "serve.not_implemented": "the server implements no path for that method: it "
        "takes GET, HEAD and POST only (docs/network.md)",
        "serve.pending": "the pith is pending: it has events but no valid record_created yet, "
        "so no state document",
        "serve.internal": "the server failed to answer; the operator's log has the details",
        "serve.stopping": "the server stopped before it answered: send the request again "
        "(to the restarted server; a copy already stored is answered duplicate)",
    }
)

IMMUTABLE = "public, max-age=31536000, immutable"
"""Tiles, bundles and copies of a given width, a copy by hash, a consistency proof: the
bytes at such a URL never change in an append-only log."""
CHECKPOINT_CACHE = "public, max-age=2"
"""tlog-tiles: the checkpoint SHOULD NOT be cached beyond a few seconds."""
REVALIDATE = "no-cache"
"""Stored by a cache, but checked again (``If-None-Match``) before each use."""

OCTETS = "application/octet-stream"
TEXT = "text/plain; charset=utf-8"

COPIES_READ_BYTES = 1 << 20
"""Bytes of copies that one store read of ``/copies/`` gathers (up to the copy that passes
it): a bundle of 256 copies of a few KB in one read, and at most 2 MiB held for one
request, a copy being 1 MiB at most. Read 16 copies at a time instead, a mirror's pull of
50,000 events cost the server 25-29 us of CPU per event (worker-thread hand-offs, and the
compressor fed 16 times a bundle); one read a bundle, 14."""
COPIES_CHUNK_MOST = COPIES_READ_BYTES + MAX_ENVELOPE_BYTES + tiles.WIDTH
"""The most bytes one chunk of ``/copies/`` may be: a read's bytes, up to the copy (of
1 MiB at most) that passes :data:`COPIES_READ_BYTES`, and a newline after each copy."""
_HEX64 = re.compile(r"[0-9a-f]{64}")


def _log(request: Request) -> Log:
    log: Log = request.app.state.log
    return log


def respond(body: bytes, media: str, cache: str, **headers: str) -> Response:
    return Response(body, media_type=media, headers={**answer_headers(cache), **headers})


def _not_found(what: str) -> ServeError:
    return ServeError("not_found", what)


# --- the log: checkpoint, tiles, bundles, copies ------------------------------------------


async def get_checkpoint(request: Request) -> Response:
    published = await _log(request).checkpoint()
    return respond(published.note, TEXT, CHECKPOINT_CACHE)


def _tile_ref(request: Request, prefix: str = "", asked: str | None = None) -> tiles.Tile:
    """The tile the path names, in its one spelling: a path with a percent-encoded byte
    (``/tile/0%2F000``) names the tile of its decoded form under another URL, a second
    copy in every cache, and is refused. ``asked``: the path's prefix as the client wrote
    it, named in the error where it is not ``prefix`` (``copies/``, read as ``entries/``)."""
    if b"%" in request.scope.get("raw_path", b""):
        raise ServeError("bad_path", "a tile's path is written without percent-encoding")
    rest = request.path_params["rest"]
    try:
        return tiles.parse_tile_path(prefix + rest)
    except TileError as exc:
        if asked is None:
            raise
        read, said = repr((prefix + rest)[:200]), repr((asked + rest)[:200])
        raise TileError("path", exc.message.replace(read, said, 1)) from None


async def get_tile(request: Request) -> Response:
    """``/tile/<L>/<N>[.p/<W>]``: hashes, exactly ``W * 32`` bytes."""
    log = _log(request)
    tile = _tile_ref(request)
    if tile.level == tiles.ENTRIES:  # only reached without the entries route
        return await _entries(log, tile)
    hashes = await log.tile(tile)
    if hashes is None:
        raise _not_found(f"{tile.path()}: the tree has not that many hashes at that level")
    return respond(hashes, OCTETS, IMMUTABLE)


async def get_entries(request: Request) -> Response:
    """``/tile/entries/<N>[.p/<W>]``: the 64-byte leaf data, uint16-length prefixed."""
    return await _entries(_log(request), _tile_ref(request, "entries/"))


async def _entries(log: Log, tile: tiles.Tile) -> Response:
    data = await log.read(log.store.leaf_data, tile.index * tiles.WIDTH, tile.width)
    if data is None:
        raise _not_found(f"{tile.path()}: the tree has not that many leaves")
    return respond(tiles.encode_bundle(data), OCTETS, IMMUTABLE)


async def get_copies(request: Request) -> Response:
    """``/copies/<N>[.p/<W>]``: the copies of the leaves of bundle N, JSON Lines, streamed
    about :data:`COPIES_READ_BYTES` at a time (a copy may be 1 MiB: 256 of them are not
    held at once). The answer holds its bytes out of the worker's room for copies
    (:data:`~pithlog.net.served_log.COPY_BYTES`): those of its one chunk, or
    :data:`COPIES_CHUNK_MOST` while it streams several; ``503 serve.busy`` before it
    starts when there is no room."""
    log = _log(request)
    tile = _tile_ref(request, "entries/", "copies/")
    first, end = tile.index * tiles.WIDTH, tile.index * tiles.WIDTH + tile.width
    if end > await log.read(log.store.tree_size):
        raise _not_found(f"copies {tile.index} of width {tile.width}: the tree has not that "
                         "many leaves")  # fmt: skip

    async def chunk(start: int) -> tuple[bytes, int]:
        copies = await log.read_copies(log.store.leaf_copies, start, end - start,
                                COPIES_READ_BYTES)  # fmt: skip
        if not copies:  # cannot happen in an append-only log: end <= size
            raise _not_found(f"leaves {start} to {end}")
        # one pass over the copies (each with its own "\n" first made a copy of each: 0.17
        # ms of a bundle's 2.2 ms in the server, against 0.013 ms joined this way)
        return b"\n".join([*copies, b""]), start + len(copies)

    async def lines(data: bytes, start: int) -> AsyncIterator[bytes]:
        yield data
        del data
        while start < end:
            data, start = await chunk(start)
            yield data
            del data

    data, after = await chunk(first)
    headers = answer_headers(IMMUTABLE)
    # a large bundle is compressed chunk by chunk in a worker thread (packed_stream), as
    # a large whole answer is (packed_apart); a small one is left to the middleware
    coding = apart_coding(request.headers)
    if len(data) < APART_BYTES and after >= end:
        coding = None
    if coding is not None:
        headers.update({"Content-Encoding": coding, "Vary": "Accept-Encoding"})
    if request.method == "HEAD" and (coding is not None or after < end):
        # not one the middleware compresses, though it says that it varies, as the GET's
        return head_only({**headers, "Vary": "Accept-Encoding"}, JSON_LINES)
    held = await log.copies.hold(len(data) if after >= end else COPIES_CHUNK_MOST)
    body = lines(data, after)
    if coding is not None:
        body = packed_stream(body, coding)
    del data
    return HeldStream(body, JSON_LINES, headers, log.copies, held)


async def get_copy(request: Request) -> Response:
    """``/copy/<64 hex>``: a copy by the SHA-256 of its JCS bytes, its bytes held
    out of the worker's room for copies until they are sent
    (:data:`~pithlog.net.served_log.COPY_BYTES`)."""
    log = _log(request)
    h = request.path_params["hash"]
    if not _HEX64.fullmatch(h):
        raise ServeError("bad_path", "a copy is named by 64 lowercase hex digits (its SHA-256)")
    copy = await log.read_copies(log.store.copy, bytes.fromhex(h))
    if copy is None:
        raise _not_found(f"no copy {h}")
    if (coded := head_coded(request, len(copy))) is not None:
        return head_only({**answer_headers(IMMUTABLE), **coded}, JSON)
    body, coded, held = await packed_held(request, copy)
    del copy  # the answer's bytes are what is held from here
    return HeldAnswer(body, JSON, {**answer_headers(IMMUTABLE), **coded}, log.copies, held)


async def get_event(request: Request) -> Response:
    """``/event/sha256:<hex>``: the preferred copy of an event."""
    log = _log(request)
    event_id = request.path_params["event_id"]
    if not is_event_id(event_id):
        raise ServeError("bad_path", "an event is named sha256: and 64 lowercase hex digits")
    copy = await log.read_copies(log.store.event, event_id)
    if copy is None:
        raise _not_found(f"no event {event_id}")
    return await _conditional(request, copy, _copy_etag(copy), JSON)


def _copy_etag(copy: bytes) -> str:
    return '"' + hashlib.sha256(copy).hexdigest() + '"'


async def _conditional(request: Request, body: bytes, etag: str, media: str) -> Response:
    """A revalidated answer: ``304`` when the client holds this ETag already, with the
    headers the ``200`` would have carried (RFC 9110 15.4.5; ``Vary``: the ``200`` may be
    compressed, and its ETag is then weak, :class:`~pithlog.net.encoding.WeakTags`). Its
    bytes are held out of the copies' room until they are sent (a copy is up to 1 MiB)."""
    if _none_match(request.headers.get("if-none-match"), etag):
        return _not_modified(request, len(body), etag)
    if (coded := head_coded(request, len(body))) is not None:
        return head_only({**answer_headers(REVALIDATE), "ETag": etag, **coded}, media)
    body, coded, held = await packed_held(request, body)
    log = _log(request)
    return HeldAnswer(body, media, {**answer_headers(REVALIDATE), "ETag": etag, **coded},
                      log.copies, held)  # fmt: skip


def _not_modified(request: Request, size: int, etag: str) -> Response:
    """The ``304`` of an answer of ``size`` bytes tagged ``etag`` (:func:`_conditional`)."""
    sent = "W/" + etag if encodes(request.headers, size) else etag
    return Response(status_code=304, headers={**answer_headers(REVALIDATE), "ETag": sent,
                                              "Vary": "Accept-Encoding"})  # fmt: skip


def _none_match(header: str | None, etag: str) -> bool:
    """Whether ``If-None-Match`` holds ``*`` or ``etag`` by the weak comparison of RFC 9110
    13.1.2 and 8.8.3.2: a ``W/`` prefix is ignored, since a proxy or a CDN that compresses
    an answer passes its tag on as a weak one."""
    if header is None:
        return False
    return any(tag == "*" or tag.removeprefix("W/") == etag
               for tag in (part.strip() for part in header.split(",")))  # fmt: skip


class _Digest(msgspec.Struct):
    state_sha256: str


async def get_state(request: Request) -> Response:
    """``/state/<pith>``: the state document, byte for byte ``pithlog state``'s, built and
    held within the worker's bounds (:mod:`pithlog.net.state_builds`)."""
    log = _log(request)
    pith = request.path_params["pith"]
    if not is_pith_number(pith):
        raise ServeError("bad_path", f"{pith[:80]!r} is not a pith number")
    async with log.states.place():
        # the state, or else the pith's status, in one snapshot (Store.lookup)
        state = await log.read(log.store.lookup, pith)
        if state is None:
            raise _not_found(f"the log holds no event of {pith}")
        if isinstance(state, PendingPith):
            status = {**dataclasses.asdict(state), "status": "pending"}
            return error_response(404, "serve.pending", f"{pith} is pending: "
                                  f"{state.event_count} events, no valid record_created yet",
                                  pith=status)  # fmt: skip
        digest = msgspec.json.decode(state, type=_Digest).state_sha256
        etag = f'"{digest}"'
        if _none_match(request.headers.get("if-none-match"), etag):
            return _not_modified(request, len(state) + 1, etag)
        if (coded := head_coded(request, len(state) + 1)) is not None:
            return head_only({**answer_headers(REVALIDATE), "ETag": etag, **coded}, JSON)
        body, coded = await packed_apart(request.headers, state + b"\n")
        del state  # the answer's bytes are what is held from here
    # out of its place: a state waiting for the bytes of others unread holds no place that
    # a small state (which takes none) waits for
    held = await log.states.hold(len(body))
    headers = {**answer_headers(REVALIDATE), "ETag": etag, **coded}
    return HeldAnswer(body, JSON, headers, log.states.answers, held)


# --- proofs against the published checkpoint ----------------------------------------------


async def get_inclusion(request: Request) -> Response:
    """``/proof/inclusion/sha256:<hex>[?copy=<hex>]``: a tlog-proof@v1 of the event's first
    copy (or of the copy named) against the checkpoint the server publishes now."""
    log = _log(request)
    event_id = request.path_params["event_id"]
    wanted = request.query_params.get("copy")
    if not is_event_id(event_id) or (wanted is not None and not _HEX64.fullmatch(wanted)):
        raise ServeError("bad_path", "sha256: and 64 lowercase hex digits (and ?copy= 64 hex)")
    published = await log.checkpoint()
    leaves = [leaf for leaf in await log.read(log.store.leaves_of, event_id)
              if leaf[0] < published.size
              and (wanted is None or leaf[1].hex() == wanted)]  # fmt: skip
    if not leaves:
        raise _not_found(f"no copy of {event_id} among the {published.size} leaves of the "
                         "published checkpoint")  # fmt: skip
    index, h = leaves[0]
    _, path = await log.read(log.store.inclusion_path, index, published.size)
    extra = bytes.fromhex(event_id[len("sha256:") :]) + h
    proof = InclusionProof(index, tuple(path), published.note, extra).encoded()
    return respond(proof, TEXT, REVALIDATE)


async def get_consistency(request: Request) -> Response:
    """``/proof/consistency/<OLD>/<NEW>``: RFC 9162 ``PROOF(OLD, D[NEW])``, pithlog's
    format, for sizes up to the tree's."""
    log = _log(request)
    old, new = request.path_params["old"], request.path_params["new"]
    first, second = decimal_of(old), decimal_of(new)
    if first is None or second is None or first > second:
        raise ServeError("bad_path", "OLD and NEW are tree sizes, decimals without leading "
                         "zeros up to 2**63-1, OLD <= NEW")  # fmt: skip
    size, path = await log.read(log.store.consistency_path, first, second)
    return respond(ConsistencyProof(first, size, tuple(path)).encoded(), TEXT, IMMUTABLE)


# --- the rest -----------------------------------------------------------------------------


async def get_stats(request: Request) -> Response:
    """What ``pithlog stats`` prints, without the store's path on the server's disk."""
    log = _log(request)
    stats = await log.read(log.store.stats)
    stats.pop("path", None)
    if log.submissions is not None:  # this worker's, since it started
        stats["submissions"] = {"requests": log.submissions.requests,
                                "commits": log.submissions.commits}  # fmt: skip
    return respond(msgspec.json.encode(stats) + b"\n", JSON, NO_STORE)


async def get_healthz(request: Request) -> Response:
    log = _log(request)
    size = await log.read(log.store.tree_size)
    return respond(msgspec.json.encode({"ok": True, "tree_size": size}) + b"\n", JSON, NO_STORE)


def routes(submit: SubmitRoute) -> list[Route]:
    out: list[Route] = [
        Route("/checkpoint", get_checkpoint),
        # JSON and JSON Lines compress; tiles of hashes and entry bundles (leaf data:
        # hashes) do not, and their routes go without
        Route("/tile/entries/{rest:path}", get_entries),
        Route("/tile/{rest:path}", get_tile),
        Route("/copies/{rest:path}", get_copies, middleware=compressed()),
        Route("/copy/{hash}", get_copy, middleware=compressed()),
        Route("/event/{event_id}", get_event, middleware=compressed()),
        Route("/state/{pith}", get_state, middleware=compressed()),
        Route("/proof/inclusion/{event_id}", get_inclusion),
        Route("/proof/consistency/{old}/{new}", get_consistency),
        Route("/stats", get_stats),
        Route("/healthz", get_healthz),
        Route(SUBMIT_PATH, submit, methods=["POST"]),  # reached straight by LogApp
    ]
    return out


FIRST = ("/tile/entries/{rest:path}", "/tile/{rest:path}", "/checkpoint")
"""The routes tried first, in this order: Starlette tries each route's pattern in turn (with
the pages and ``/sync`` before it, a route went through 17 patterns, about 7 us of the
event loop's time per request), and these are what mirrors and tile clients ask for most.
A ``POST /submit`` does not go through the router at all (:class:`LogApp`)."""


class ServeApp(Starlette):
    """A Starlette app of ``pithlog serve`` (the log's, the witness's): a request whose
    method no path takes is ``501 serve.not_implemented`` (RFC 9110 9.1 and 15.6.2), not
    a ``405`` naming the methods of its path; a request still open when the server stops
    is ``503 serve.stopping``."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await self.dispatch(scope, receive, send)
        except asyncio.CancelledError:
            # uvicorn's graceful shutdown cancels the requests still open after its 5 s (a
            # slow sender, a body waiting for room), the one way a request is cancelled:
            # raised on, each printed an 'Exception in ASGI application' traceback. An
            # answer begun already cannot be replaced, and uvicorn closes its connection.
            if scope["type"] == "http":
                with contextlib.suppress(Exception):
                    await send_error(send, 503, "serve.stopping", "the server stopped "
                                     "before it answered: send the request again",
                                     close=True)  # fmt: skip

    async def dispatch(self, scope: Any, receive: Any, send: Any) -> None:
        """What :meth:`__call__` does with a request."""
        if scope["type"] == "http" and scope["method"] not in IMPLEMENTED_METHODS:
            await send_error(send, 501, "serve.not_implemented",
                             not_implemented_message(scope["method"]))  # fmt: skip
        else:
            await super().__call__(scope, receive, send)


class LogApp(ServeApp):
    """The app of ``pithlog serve``: a Starlette app that hands each ``POST /submit``
    straight to its route (:mod:`pithlog.net.submit_route`), ahead of the middleware and
    the router, and every other request to Starlette."""

    def __init__(self, submit: SubmitRoute, **options: Any) -> None:
        super().__init__(**options)
        self.submit = submit

    async def dispatch(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == SUBMIT_PATH \
                and scope["method"] == "POST":  # fmt: skip
            await self.submit(scope, receive, send)
        else:
            await super().dispatch(scope, receive, send)


def create_app(config: ServeConfig) -> Starlette:
    """The ASGI app of ``pithlog serve`` over ``config.store``."""
    log = Log(config)
    submit = SubmitRoute(log.submissions, config.limits)
    own = routes(submit)
    first = [route for path in FIRST for route in own if route.path == path]
    rest = [route for route in own if route.path not in FIRST]
    app = LogApp(
        submit,
        routes=[*first, *config.extra_routes, *rest],
        exception_handlers=error_handlers(),
    )
    app.router.redirect_slashes = False  # one URL per resource: no 307 to another
    app.state.log = log
    return app
