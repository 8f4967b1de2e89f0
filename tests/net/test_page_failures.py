"""A page that fails to be made (docs/pages.md, "Errors"): a browser is answered an HTML
page of ``500`` that names the code ``serve.internal`` and nothing of the failure, an API
client the JSON ``500 serve.internal`` of every other route (docs/network.md, "Errors")."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from markupsafe import escape

with warnings.catch_warnings():  # Starlette would have httpx2; httpx is what pithlog uses
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from pithlog import Store, load_keyring
from pithlog.errors import PithlogError, ServeError, StoreError
from pithlog.net.answers import status_of
from pithlog.net.app import create_app
from pithlog.net.pages import Pages, page_routes
from pithlog.net.served_log import ServeConfig
from pithlog.store import Store as StoreClass
from pithlog.testing import test_key

CASES = Path(__file__).resolve().parents[2] / "vectors" / "cases"
KEYRING = load_keyring((CASES / "equivocations" / "keyring.json").read_bytes())
SEED = CASES / "seed-2411.00284"
PITH = json.loads((SEED / "expected.jsonl").read_text())["pith_number"]
EVENT = json.loads((SEED / "events.jsonl").read_text().splitlines()[0])["event_id"]
ORIGIN = "registry.test.invalid/pith"
HTML = {"accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}
SECRET = "the-failure-detail-7f3a"
"""What the failure says: in no answer."""


class Failure(RuntimeError):
    pass


def _fail(*args: Any, **kwargs: Any) -> Any:
    raise Failure(SECRET)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "store") as s:
        s.append([line.encode() for line in (SEED / "events.jsonl").read_text().splitlines()
                  if line], KEYRING)  # fmt: skip
        yield s


def _app(store: Store) -> Any:
    return create_app(ServeConfig(store, test_key("registry"), ORIGIN,
                                  extra_routes=page_routes()))  # fmt: skip


# each page, and the part of its making made to fail
FAILING = [
    ("/", Pages, "recent"),
    (f"/pith/{PITH}", Pages, "_pith_context"),
    (f"/event/{EVENT}", Pages, "_event_page"),
    ("/search?q=2411.00284", StoreClass, "piths_for_alias"),
]


@pytest.mark.parametrize(("path", "owner", "name"), FAILING)
def test_a_page_that_fails_is_an_html_page_of_500_for_a_browser(
    store: Store, monkeypatch: pytest.MonkeyPatch, path: str, owner: type, name: str
) -> None:
    """A failure while a page was made was the JSON ``{"error": "serve.internal", ...}``
    shown raw in the browser that asked for the page. It is an HTML page of ``500`` now,
    with the code, never cached, nosniff, with the pages' CSP, and no word of the failure;
    the failure still reaches the server's log (raised on past the answer, as before)."""
    assert _app_ok(store, path)
    monkeypatch.setattr(owner, name, _fail)
    with TestClient(_app(store), raise_server_exceptions=False) as client:
        got = client.get(path, headers=HTML)
    assert got.status_code == 500, got.text[:300]
    assert got.headers["content-type"] == "text/html; charset=utf-8", got.text[:300]
    assert got.text.startswith("<!doctype html>")
    assert "serve.internal" in got.text
    assert SECRET not in got.text and "Traceback" not in got.text
    assert "Failure" not in got.text
    assert got.headers["cache-control"] == "no-store"
    assert got.headers["x-content-type-options"] == "nosniff"
    assert "default-src 'none'" in got.headers["content-security-policy"]
    assert "Accept" in got.headers["vary"]
    # the operator's log has the details: the failure is raised on past the answer
    with TestClient(_app(store)) as client, pytest.raises(Failure, match=SECRET):
        client.get(path, headers=HTML)


def _app_ok(store: Store, path: str) -> bool:
    with TestClient(_app(store)) as client:
        return client.get(path, headers=HTML, follow_redirects=False).status_code in (200, 303)


@pytest.mark.parametrize(("path", "owner", "name"), FAILING)
@pytest.mark.parametrize("accept", ["application/json", "*/*", None])
def test_a_page_that_fails_is_json_for_a_client_that_does_not_ask_for_html(
    store: Store, monkeypatch: pytest.MonkeyPatch, path: str, owner: type, name: str,
    accept: str | None,
) -> None:
    """A client that does not ask for HTML (an API client, curl) keeps the JSON of every
    other route's failure."""
    monkeypatch.setattr(owner, name, _fail)
    if path.startswith("/event/"):  # its JSON route is the one that fails for them
        monkeypatch.setattr(StoreClass, "event", _fail)
    headers = {"accept": accept} if accept else {}
    with TestClient(_app(store), raise_server_exceptions=False) as client:
        got = client.get(path, headers=headers)
    assert got.status_code == 500
    assert got.headers["content-type"] == "application/json"
    assert got.json() == {"error": "serve.internal", "message": "the server failed to answer"}
    assert got.headers["cache-control"] == "no-store"


def test_a_json_route_that_fails_is_json_whatever_the_client_accepts(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the pages answer a failure with a page: a JSON route asked with a browser's
    ``Accept`` is the JSON ``500 serve.internal``, as it was."""
    monkeypatch.setattr(StoreClass, "state", _fail)
    monkeypatch.setattr(StoreClass, "lookup", _fail)
    with TestClient(_app(store), raise_server_exceptions=False) as client:
        got = client.get(f"/state/{PITH}", headers=HTML)
    assert got.status_code == 500
    assert got.headers["content-type"] == "application/json"
    assert got.json()["error"] == "serve.internal"


def test_a_page_whose_error_page_fails_too_is_the_json_500(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where no page can be made at all (the templates fail), the failure is still
    answered: the JSON ``500 serve.internal``, with nothing of either failure."""
    monkeypatch.setattr(Pages, "_page", _fail)
    with TestClient(_app(store), raise_server_exceptions=False) as client:
        got = client.get("/", headers=HTML)
    assert got.status_code == 500
    assert got.json() == {"error": "serve.internal", "message": "the server failed to answer"}


# each page, the part of its making made to fail with a known error, and that error
KNOWN = [
    ("/", Pages, "recent", StoreError("readers_full", "too many processes are reading the "
                                      "store at once <b>&</b>; retry")),
    (f"/pith/{PITH}", Pages, "_pith_context", ServeError("busy", "4 state documents are being "
                                                         "built; retry later")),
    (f"/event/{EVENT}", Pages, "_event_page", StoreError("corrupted", "the store's index "
                                                         "disagrees with its log")),
    ("/search?q=2411.00284", StoreClass, "piths_for_alias",
     StoreError("keyring_changed", "the store was brought under another keyring")),
]


def _raise(exc: Exception) -> Any:
    def raising(*args: Any, **kwargs: Any) -> Any:
        raise exc

    return raising


@pytest.mark.parametrize(("path", "owner", "name", "exc"), KNOWN)
def test_a_page_that_meets_a_known_error_is_an_html_page_of_it_for_a_browser(
    store: Store, monkeypatch: pytest.MonkeyPatch, path: str, owner: type, name: str,
    exc: PithlogError,
) -> None:
    """A known error while a page was made (``503 store.readers_full``, ``503 serve.busy``,
    ``500 store.corrupted``, ``503 store.keyring_changed``) was the JSON ``{"error": ...}``
    shown raw in the browser that asked for the page. It is an HTML page now, of the JSON
    answer's status, naming its code and saying its message (escaped), never cached,
    nosniff, with the pages' CSP and ``Vary: Accept``."""
    assert _app_ok(store, path)
    monkeypatch.setattr(owner, name, _raise(exc))
    with TestClient(_app(store), raise_server_exceptions=False) as client:
        got = client.get(path, headers=HTML)
        if path.startswith("/event/"):  # its JSON route is the one that fails for JSON
            monkeypatch.setattr(StoreClass, "event", _raise(exc))
        want = client.get(path, headers={"accept": "application/json"})
    assert want.headers["content-type"] == "application/json"
    assert want.json() == {"error": exc.code, "message": exc.message}
    assert got.status_code == want.status_code == status_of(exc), got.text[:300]
    assert got.headers["content-type"] == "text/html; charset=utf-8", got.text[:300]
    assert got.text.startswith("<!doctype html>")
    assert exc.code in got.text
    assert str(escape(exc.message)) in got.text
    assert "<b>" not in got.text and "Traceback" not in got.text
    assert got.headers["cache-control"] == "no-store"
    assert got.headers["x-content-type-options"] == "nosniff"
    assert "default-src 'none'" in got.headers["content-security-policy"]
    assert "Accept" in got.headers["vary"]
    assert ("retry-after" in got.headers) == ("retry-after" in want.headers)
    if "retry-after" in want.headers:
        assert got.headers["retry-after"] == want.headers["retry-after"]


@pytest.mark.parametrize(("path", "owner", "name", "exc"), KNOWN)
@pytest.mark.parametrize("accept", ["application/json", "*/*", None])
def test_a_page_that_meets_a_known_error_is_json_for_a_client_that_does_not_ask_for_html(
    store: Store, monkeypatch: pytest.MonkeyPatch, path: str, owner: type, name: str,
    exc: PithlogError, accept: str | None,
) -> None:
    """A client that does not ask for HTML keeps the JSON answer of the error."""
    monkeypatch.setattr(owner, name, _raise(exc))
    if path.startswith("/event/"):  # its JSON route is the one that fails for them
        monkeypatch.setattr(StoreClass, "event", _raise(exc))
    headers = {"accept": accept} if accept else {}
    with TestClient(_app(store), raise_server_exceptions=False) as client:
        got = client.get(path, headers=headers)
    assert got.status_code == status_of(exc)
    assert got.headers["content-type"] == "application/json"
    assert got.json() == {"error": exc.code, "message": exc.message}
    assert got.headers["cache-control"] == "no-store"


def test_a_json_route_that_meets_a_known_error_is_json_whatever_the_client_accepts(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the pages answer a known error with a page: a JSON route asked with a
    browser's ``Accept`` is the JSON answer, as it was."""
    exc = StoreError("readers_full", "too many processes are reading the store at once")
    monkeypatch.setattr(StoreClass, "lookup", _raise(exc))
    with TestClient(_app(store), raise_server_exceptions=False) as client:
        got = client.get(f"/state/{PITH}", headers=HTML)
    assert got.status_code == 503
    assert got.headers["content-type"] == "application/json"
    assert got.json() == {"error": "store.readers_full", "message": exc.message}


@pytest.mark.parametrize("failure", [_fail, _raise(StoreError("readers_full", "too many "
                                                               "readers; retry"))])
def test_an_event_asked_as_json_that_fails_is_json_for_a_browser(
    store: Store, monkeypatch: pytest.MonkeyPatch, failure: Any
) -> None:
    """``?format=json`` asks an event's route for its JSON whatever ``Accept`` says
    (docs/pages.md): its failure, known or not, is the JSON error, not a page."""
    monkeypatch.setattr(StoreClass, "event", failure)
    with TestClient(_app(store), raise_server_exceptions=False) as client:
        got = client.get(f"/event/{EVENT}?format=json", headers=HTML)
    assert got.headers["content-type"] == "application/json", got.text[:300]
    assert got.json()["error"] in ("serve.internal", "store.readers_full")
