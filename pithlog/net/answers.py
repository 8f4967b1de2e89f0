"""What the answers of ``pithlog serve`` share: the headers every answer carries, the HTTP
status of each error code and the bytes of a JSON error (``{"error": code, "message":
...}``, ``docs/errors.md``). The Starlette routes (:mod:`pithlog.net.app`, the pages of
:mod:`pithlog.net.pages`) and the bare ``POST /submit`` (:mod:`pithlog.net.submit_route`)
answer alike through these."""

from __future__ import annotations

from typing import Any

import msgspec

from pithlog.errors import PithlogError, TileError

NO_STORE = "no-store"
JSON = "application/json"
JSON_LINES = "application/x-ndjson"

STATUS = {
    "serve.not_found": 404, "serve.pending": 404, "serve.bad_path": 400,
    "serve.bad_request": 400, "serve.method": 405, "serve.not_implemented": 501,
    "serve.read_only": 403, "serve.unsupported_encoding": 415,
    "serve.too_large": 413, "serve.too_many_lines": 413, "serve.timeout": 408,
    "serve.busy": 503, "serve.stopping": 503,
    "tile.path": 400, "store.tree_size": 404, "store.readers_full": 503,
    # no checkpoint published yet, too few witnesses cosigned the first one: not a
    # failure of the server, and it passes once they answer
    "witness.quorum": 503,
    # the store was brought under another keyring beside a server with --submit: its
    # submissions wait for the operator to restart it with the store's keyring
    "store.keyring_changed": 503,
}  # fmt: skip
"""The status of an error code; other codes: ``400`` for a tile path, else ``500``."""


IMPLEMENTED_METHODS = frozenset({"GET", "HEAD", "POST"})
"""The methods some path of ``pithlog serve`` takes (the log's, the witness's). RFC 9110
9.1: a method the server does not implement on any path is ``501``, one it implements but
not on the path asked is ``405`` with ``Allow``."""


def answer_headers(cache: str) -> dict[str, str]:
    """The headers every answer carries: its ``Cache-Control``, and ``nosniff`` (a browser
    takes each body as the type it is served with, never as one it guesses)."""
    return {"Cache-Control": cache, "X-Content-Type-Options": "nosniff"}


def status_of(exc: PithlogError) -> int:
    """The HTTP status that answers ``exc``."""
    return STATUS.get(exc.code, 400 if isinstance(exc, TileError) else 500)


def error_body(code: str, message: str, **extra: Any) -> bytes:
    """``{"error": code, "message": ...}`` and a newline."""
    return msgspec.json.encode({"error": code, "message": message, **extra}) + b"\n"


def not_implemented_message(method: str | None = None) -> str:
    """The message of ``501 serve.not_implemented``."""
    named = f"{method[:40]!r} is" if method else "the request's method is"
    return f"{named} not a method this server implements (GET, HEAD, POST)"


async def send_error(send: Any, status: int, code: str, message: str,
                     close: bool = False) -> None:  # fmt: skip
    """A JSON error sent as a bare ASGI answer (no Starlette ``Response``), with the
    headers every answer carries; ``close``: the connection is closed after it."""
    body = error_body(code, message)
    headers = [(b"content-length", b"%d" % len(body)), (b"content-type", JSON.encode()),
               *((name.lower().encode(), value.encode())
                 for name, value in answer_headers(NO_STORE).items())]  # fmt: skip
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
