"""The signals `serve` holds between its listening line and uvicorn's own handlers
(pithlog/net/held_signals.py), at the moment the one gives way to the other."""

from __future__ import annotations

import os
import signal
import types
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn
import uvicorn.server

from pithlog.net.held_signals import HeldServer


class Stopped(Exception):
    """What the handler from before hold() raises (the command line's Terminated)."""


def _stopped(signum: int, frame: Any) -> None:
    raise Stopped(signum)


async def _app(scope: Any, receive: Any, send: Any) -> None:  # never called
    raise AssertionError


@pytest.fixture
def handlers() -> Iterator[None]:
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGTERM, _stopped)
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def test_a_sigterm_as_uvicorn_takes_the_signals_stops_the_server_gracefully(
    handlers: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """uvicorn's handlers were installed after the handlers from before hold() had been
    put back: a SIGTERM in between went to those, and was raised inside the event loop's
    start, the server never told to stop gracefully. A SIGTERM at the moment uvicorn
    installs its first handler now reaches the server (``should_exit``), which then raises
    it again with the handlers from before, as on any signal."""
    server = HeldServer(uvicorn.Config(_app))
    real = signal.signal
    sent: list[int] = []

    def signal_then(sig: int, handler: Any) -> Any:
        if getattr(handler, "__func__", None) is HeldServer.handle_exit and not sent:
            sent.append(sig)
            os.kill(os.getpid(), signal.SIGTERM)  # in the middle of the hand-over
        return real(sig, handler)

    patched = types.SimpleNamespace(**{**vars(signal), "signal": signal_then})
    monkeypatch.setattr(uvicorn.server, "signal", patched)
    server.hold()
    seen: dict[str, bool] = {}
    with pytest.raises(Stopped), server.capture_signals():
        seen["should_exit"] = server.should_exit
    assert sent and seen == {"should_exit": True}
    assert signal.getsignal(signal.SIGTERM) is _stopped  # the handlers from before, again


def test_signals_held_before_uvicorn_listens_are_handed_to_it(handlers: None) -> None:
    """A SIGTERM while held is noted, not acted on; uvicorn's handlers get it, and the
    handlers from before hold() raise it once the server has stopped."""
    server = HeldServer(uvicorn.Config(_app))
    server.hold()
    os.kill(os.getpid(), signal.SIGTERM)
    assert not server.should_exit
    with pytest.raises(Stopped), server.capture_signals():
        assert server.should_exit
    assert signal.getsignal(signal.SIGTERM) is _stopped
