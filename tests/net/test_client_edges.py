"""The HTTP clients (mirror and audit's Origin, sync's HttpTransport, the witness client)
against servers on 127.0.0.1 that do what an origin, a sync source or a witness should
not, or that stand where the environment's settings send them (docs/network.md, "Running
a mirror")."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from served import in_thread
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from pithlog.errors import MirrorError, SyncError, WitnessError
from pithlog.net.origin import Origin
from pithlog.net.sync_http import HttpTransport
from pithlog.net.witness_client import collect

PROXY_VARIABLES = ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY",
                   "all_proxy", "NO_PROXY", "no_proxy")  # fmt: skip


def _app(status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> Starlette:
    """Answers every GET and POST with ``status``, ``body`` and ``headers``."""

    async def answer(request: Request) -> Response:
        return Response(body, status, headers=headers)

    return Starlette(routes=[Route("/{rest:path}", answer, methods=["GET", "POST"])])


@pytest.fixture
def proxied(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """HTTP_PROXY names a proxy on 127.0.0.1 that answers every request 502."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    with in_thread(_app(502, b"the proxy's")) as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy)
        monkeypatch.setenv("ALL_PROXY", proxy)
        yield


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_the_loopback_is_never_reached_through_the_environment_s_proxy(
    proxied: None, host: str
) -> None:
    """HTTP_PROXY and ALL_PROXY are for the network: a log, a sync source or a witness on
    this machine's loopback is asked straight, as Go's httpproxy does (a proxy elsewhere
    would reach its own loopback, or nothing: the mirror said "answered 502", naming the
    origin's URL, for a server that was up)."""
    with in_thread(_app(200, b"the origin's")) as url:
        url = url.replace("127.0.0.1", host)
        with Origin(url) as origin:
            assert origin.get("checkpoint", 1 << 10) == b"the origin's"
        with HttpTransport(url) as transport:
            assert transport.request(b"R") == b"the origin's"
        with pytest.raises(WitnessError) as caught:
            collect([url], b"note\n", 1, lambda old: [], [], 1)
        # the witness was asked (its answer is no cosignature), not the proxy (502)
        assert "502" not in caught.value.message and "the proxy's" not in caught.value.message


def test_another_host_still_goes_through_the_environment_s_proxy(proxied: None) -> None:
    """Only the loopback is asked straight: a host elsewhere goes through the proxy."""
    with Origin("http://origin.invalid") as origin, pytest.raises(MirrorError) as caught:
        origin.get("checkpoint", 1 << 10)
    assert "answered 502" in caught.value.message, caught.value
    with HttpTransport("http://origin.invalid") as transport, \
            pytest.raises(SyncError) as sync_caught:  # fmt: skip
        transport.request(b"R")
    assert "answered 502" in sync_caught.value.message, sync_caught.value


@pytest.mark.parametrize("location", ["/elsewhere/checkpoint", "http://other.invalid/pith",
                                      "file:///etc/passwd", "ftp://x/y"])  # fmt: skip
@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirect_is_not_followed_and_its_location_is_named(location: str,
                                                              status: int) -> None:  # fmt: skip
    """No client follows a redirect (to another path, host or scheme, or to itself): each
    stops on it with its one code, and says where it pointed, the operator's next URL to
    try (it said "answered 302" alone, or "(no body)")."""
    with in_thread(_app(status, headers={"Location": location})) as url:
        with Origin(url) as origin, pytest.raises(MirrorError) as caught:
            origin.get("checkpoint", 1 << 10)
        assert caught.value.code == "mirror.fetch"
        assert f"answered {status}: a redirect to {location}, not followed" in \
            caught.value.message, caught.value  # fmt: skip
        with HttpTransport(url) as transport, pytest.raises(SyncError) as sync_caught:
            transport.request(b"R")
        assert sync_caught.value.code == "sync.remote"
        assert f"answered {status}: a redirect to {location}, not followed" in \
            sync_caught.value.message, sync_caught.value  # fmt: skip
        with pytest.raises(WitnessError) as witness_caught:
            collect([url], b"note\n", 1, lambda old: [], [], 1)
        assert f"status {status}: a redirect to {location}, not followed" in \
            witness_caught.value.message, witness_caught.value  # fmt: skip


def test_a_redirect_s_location_is_cut_and_shown_escaped() -> None:
    """The Location is the server's words on the operator's terminal: cut, and what is not
    printable in it shown escaped (httpx refuses control characters in it itself)."""
    with in_thread(_app(302, headers={"Location": "/" + "\u00e9" * 5000})) as url, \
            Origin(url) as origin, pytest.raises(MirrorError) as caught:  # fmt: skip
        origin.get("checkpoint", 1 << 10)
    assert len(caught.value.message) < 400 and "a redirect to /" in caught.value.message
