"""What the routes of large answers (:mod:`pithlog.net.app`: copies, events, states) share:
the room a copy's answer takes before it is compressed, and the answers to a ``HEAD``
whose ``GET`` would be compressed apart (docs/network.md, "Endpoints" and limits)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from pithlog.net.encoding import APART_BYTES, apart_coding, packed_apart
from pithlog.net.served_log import Log


def head_coded(request: Request, size: int) -> dict[str, str] | None:
    """For a ``HEAD`` whose ``GET`` would be compressed apart
    (:func:`~pithlog.net.encoding.packed_apart`), the headers that say so (``None``:
    answered as a ``GET``): its body of ``size`` bytes is not compressed only to be
    dropped."""
    if request.method != "HEAD" or size < APART_BYTES:
        return None
    coding = apart_coding(request.headers)
    return None if coding is None else {"Content-Encoding": coding, "Vary": "Accept-Encoding"}


def head_only(headers: dict[str, str], media: str) -> Response:
    """The answer to a ``HEAD`` whose ``GET`` is compressed apart, or streamed: the
    ``GET``'s headers without its body, nor the ``Content-Length`` that only compressing
    it would tell (RFC 9110 9.3.2 lets a ``HEAD`` omit it). A ``HEAD`` of a bundle of
    copies read and compressed all of it (256 copies, up to 1 MiB each), a ``HEAD`` of a
    copy compressed it, each to drop the bytes."""
    answer = Response(None, media_type=media, headers=headers)
    del answer.headers["content-length"]
    return answer


async def packed_held(request: Request, copy: bytes) -> tuple[bytes, dict[str, str], int]:
    """A copy's answer (:func:`~pithlog.net.encoding.packed_apart`), its headers, and the
    bytes it holds out of the worker's room for copies, taken before it is compressed, so
    that a request finds the room full (``503 serve.busy``, or a wait among
    :data:`~pithlog.net.served_log.COPY_WAITERS`) before it uses a thread to compress:
    taken after, 900 clients asking at once for copies of 960 KB each held its copy while
    it waited for a thread to compress it, and grew the worker to 1.26 GB."""
    log: Log = request.app.state.log
    held = await log.copies.hold(len(copy))
    try:
        body, coded = await packed_apart(request.headers, copy)
    except BaseException:
        log.copies.give(held)
        raise
    return body, coded, log.copies.keep(held, len(body))
