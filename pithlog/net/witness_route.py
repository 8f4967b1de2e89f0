"""``POST /add-checkpoint`` of ``pithlog serve --witness`` (C2SP tlog-witness,
docs/witness.md): the verdict is :func:`pithlog.transparency.witness.judge_add_checkpoint`,
judged and recorded in one write transaction of the store that keeps the witness's state;
and ``GET /<origin hash>/checkpoint``, the monitoring route (tlog-witness, "Monitor
Retrieval Mechanism"), which serves the checkpoint recorded with that state.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import anyio
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from pithlog.errors import ServeError
from pithlog.net.answers import answer_headers
from pithlog.net.submit import TAKEN_CODINGS, check_coding
from pithlog.protocol.keys import Keyring, SigningKey
from pithlog.store import Store
from pithlog.transparency.checkpoint import checkpoint_keys, parse_checkpoint_text, parse_note
from pithlog.transparency.witness import MAX_BODY_BYTES, Verdict, judge_add_checkpoint

NO_STORE = answer_headers("no-store")
"""The headers of every answer of the route, as of every other route's: ``nosniff`` (a
plain-text error must never be taken for a page), and never cached (a cosignature or a
refusal holds for the witness's state at the moment asked)."""

MONITOR_CACHE = answer_headers("public, max-age=60")
"""The headers of a checkpoint served to monitors: cached a minute at most, by a browser or
a CDN the monitoring prefix is delegated to (tlog-witness: a witness "MAY delay updating
the checkpoint, but SHOULD NOT delay for more than an hour"); a monitor sees a new
cosignature within that minute, and a CDN asks the witness once a minute per origin."""
ORIGIN_HASH = re.compile(r"[0-9a-f]{64}")
"""tlog-witness: "The origin hash is the SHA-256 hash of the log's origin, hex encoded, in
lowercase"."""

BODY_SECONDS = 30.0
"""Seconds a body may take to arrive, as ``POST /sync``'s: a client that sends it a byte at a
time, or stops, holds a connection no longer (``408``)."""


async def _body(request: Request) -> bytes | None:
    """The request body, or ``None`` past :data:`MAX_BODY_BYTES` (read no further)."""
    parts: list[bytes] = []
    held = 0
    async for chunk in request.stream():
        held += len(chunk)
        if held > MAX_BODY_BYTES:
            return None
        parts.append(chunk)
    return b"".join(parts)


def witness_routes(
    store: Store, keyring: Keyring, key: SigningKey, clock: Callable[[], float]
) -> list[Route]:
    """The witness's routes: ``keyring`` names the logs it witnesses (a key allowed to sign
    an origin's checkpoints makes the origin known), ``key`` cosigns, ``clock`` gives the
    cosignatures' time (POSIX seconds)."""

    async def add_checkpoint(request: Request) -> Response:
        try:  # a body in a content coding, at once: read as it came, it was "malformed"
            check_coding(request.headers.getlist("content-encoding"))
        except ServeError as exc:
            return Response(exc.message + "\n", 415, media_type="text/plain",
                            headers={**NO_STORE, "Accept-Encoding": TAKEN_CODINGS})  # fmt: skip
        with anyio.move_on_after(BODY_SECONDS) as reading:
            body = await _body(request)
        if reading.cancelled_caught:
            return Response(f"the body did not arrive within {BODY_SECONDS:g} s\n", 408,
                            media_type="text/plain", headers=NO_STORE)  # fmt: skip
        if body is None:
            return Response(f"the body is over {MAX_BODY_BYTES} bytes\n", 413,
                            media_type="text/plain", headers=NO_STORE)  # fmt: skip

        def judge() -> Verdict:
            return store.witness_add(
                lambda known: judge_add_checkpoint(body, keyring, known, key, int(clock()))
            )

        verdict = await run_in_threadpool(judge)
        # the type as set, charset and all: Starlette adds "; charset=utf-8" to a text/
        # media_type, and tlog-witness's 409 MUST be exactly text/x.tlog.size (clients
        # that check it, sigsum-go's among them, could not recover otherwise)
        return Response(verdict.body, verdict.status,
                        headers={**NO_STORE, "Content-Type": verdict.content_type})  # fmt: skip

    async def monitored_checkpoint(request: Request) -> Response:
        origin_hash: str = request.path_params["origin_hash"]
        if not ORIGIN_HASH.fullmatch(origin_hash):
            return Response("the origin hash is the SHA-256 of the origin, 64 lowercase hex "
                            "digits\n", 400, media_type="text/plain",
                            headers=NO_STORE)  # fmt: skip
        served = await run_in_threadpool(store.witness_checkpoint, bytes.fromhex(origin_hash))
        # a log the keyring no longer names is one the witness no longer follows: as
        # add-checkpoint's, its origin is unknown here (and what it last cosigned of it is
        # no "recent checkpoint")
        if served is None or not checkpoint_keys(
            keyring, parse_checkpoint_text(parse_note(served).text, empty_root=False).origin
        ):
            return Response(f"no checkpoint cosigned for origin hash {origin_hash}\n", 404,
                            media_type="text/plain", headers=NO_STORE)  # fmt: skip
        return Response(served, 200, headers={**MONITOR_CACHE,
                                              "Content-Type": "text/plain; charset=utf-8"})

    return [Route("/add-checkpoint", add_checkpoint, methods=["POST"]),
            Route("/{origin_hash}/checkpoint", monitored_checkpoint, methods=["GET"])]
