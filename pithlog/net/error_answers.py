"""The JSON errors of the Starlette apps ``pithlog serve`` runs (a log, or a witness): the
answer of an error code (``{"error": code, "message": ...}``, never cached) and the
exception handlers that turn every failure of a route into one (docs/network.md,
"Errors"): a :class:`~pithlog.errors.PithlogError` its own code, Starlette's 404 and 405
theirs, a client gone mid-body a 400, anything else a 500 without a traceback (a page's
route, :mod:`pithlog.net.pages`, answers a browser with a page of its error, known or not:
:data:`ERROR_PAGE`)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from pithlog.errors import PithlogError, StoreError
from pithlog.net.answers import JSON, NO_STORE, answer_headers, error_body, status_of

ERROR_PAGE = "pithlog.error_page"
"""The key of a request's ASGI scope under which a route that answers with pages puts
what answers its errors, a :class:`~pithlog.errors.PithlogError` (``503
store.readers_full``, ``503 serve.busy``, ...) or an unexpected failure (``500
serve.internal``): ``page(request, status, code, message)``, an HTML page of the error,
or ``None`` for a client that did not ask for HTML (it gets the JSON). The handler of
unexpected failures runs outside the router (Starlette's ``ServerErrorMiddleware``), where
the route is known only by what it put in the scope; both handlers read it there."""

ErrorPage = Callable[[Request, int, str, str], Response | None]


def error_response(status: int, code: str, message: str, **extra: Any) -> Response:
    """``{"error": code, "message": ...}``; never cached (a tile missing now is there
    after the next append)."""
    return Response(error_body(code, message, **extra), status_code=status, media_type=JSON,
                    headers=answer_headers(NO_STORE))


def _error_answer(request: Request, status: int, code: str, message: str) -> Response:
    """The answer of the error ``code``: the JSON of :func:`error_response`, or, on a page's
    route for a client that asks for HTML, the route's page of it (:data:`ERROR_PAGE`), of
    the same status and with the JSON answer's ``Retry-After`` if it has one."""
    answer = error_response(status, code, message)
    page: ErrorPage | None = request.scope.get(ERROR_PAGE)
    if page is not None:
        # a page that cannot be made either is the JSON answer (an unexpected failure,
        # raised on past the answer to the server's log, is the first)
        with contextlib.suppress(Exception):
            shown = page(request, status, code, message)
            if shown is not None:
                if "retry-after" in answer.headers:
                    shown.headers["Retry-After"] = answer.headers["retry-after"]
                return shown
    return answer


async def _pithlog_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, PithlogError)
    return _error_answer(request, status_of(exc), exc.code, exc.message)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 405:
        answer = error_response(405, "serve.method", f"{request.method} is not allowed here")
        if exc.headers and "Allow" in exc.headers:  # RFC 9110 15.5.6: a 405 says what is
            answer.headers["Allow"] = exc.headers["Allow"]
        return answer
    if exc.status_code == 404:
        return error_response(404, "serve.not_found", "no such endpoint")
    return error_response(exc.status_code, "serve.bad_request", str(exc.detail))


async def _gone(request: Request, exc: Exception) -> Response:
    # the client closed the connection mid-body: nothing was stored, nobody reads this
    return error_response(400, "serve.bad_request", "the client went away mid-request")


async def _internal(request: Request, exc: Exception) -> Response:
    if isinstance(exc, StoreError):
        return await _pithlog_error(request, exc)
    return _error_answer(request, 500, "serve.internal", "the server failed to answer")


def error_handlers() -> dict[Any, Any]:
    """Starlette's exception handlers of every app ``pithlog serve`` runs (a log, or a
    witness): each error a JSON answer with a stable code (docs/network.md, "Errors")."""
    return {PithlogError: _pithlog_error, HTTPException: _http_error,
            ClientDisconnect: _gone, Exception: _internal}  # fmt: skip
