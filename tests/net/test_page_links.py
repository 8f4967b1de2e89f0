"""The links of the pages for people (docs/pages.md, "Links") are relative to the page, so
that the pages work behind a reverse proxy that serves the log under a prefix
(docs/network.md, "Running a registry": ``/pith/``): in process, every kind of page; then
a real ``pithlog serve`` behind a proxy on 127.0.0.1 that takes the prefix off, every link
of every page followed through it."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

import httpx
import pytest
from served import prefix_proxy, serve_process, two_versions

with warnings.catch_warnings():  # Starlette would have httpx2; httpx is what pithlog uses
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient


from pithlog import Store, load_keyring, sign_event
from pithlog.errors import ServeError
from pithlog.net.app import create_app
from pithlog.net.pages import page_routes
from pithlog.net.served_log import ServeConfig
from pithlog.testing import test_key, write_key_file

CASES = Path(__file__).resolve().parents[2] / "vectors" / "cases"
KEYRING = load_keyring((CASES / "equivocations" / "keyring.json").read_bytes())
PITH = json.loads((CASES / "seed-2411.00284" / "expected.jsonl").read_text())["pith_number"]
EQUIVOCATED = json.loads((CASES / "equivocations" / "expected.jsonl").read_text()
                         .splitlines()[0])["pith_number"]  # fmt: skip
ORIGIN = "registry.test.invalid/pith"
HTML = {"accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}
VERSIONED = "2607.00001"
"""An arXiv id of two records: its search lists them."""
PREFIX = "/pith"
"""The prefix of docs/network.md's nginx example."""
TIMEOUT = 30.0


class Links(HTMLParser):
    """Every URL an HTML page names: ``href``, ``src``, ``action``."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [v for k, v in attrs if k in ("href", "src", "action") and v is not None]


def links(html: str) -> list[str]:
    parser = Links()
    parser.feed(html)
    parser.close()
    return parser.urls


def _lines() -> list[bytes]:
    lines = []
    for case in ("seed-2411.00284", "equivocations"):
        lines += (CASES / case / "events.jsonl").read_text().splitlines()
    # two versions of one paper: a search of its arXiv id lists both records
    lines += [json.dumps(version) for version in two_versions(VERSIONED)]
    # a payload of more values than a page lays out: a link to its JSON
    lines.append(json.dumps(sign_event(test_key("author"), "author_attestation", PITH,
                                       "record", "2026-08-01T00:00:20Z",
                                       {"statement": "many", "list": list(range(3000))})))
    return [line.encode() for line in lines if line]


def _pages(event_id: str) -> dict[str, int]:
    """Each kind of page -> its status (a search that finds one record: its 303)."""
    return {
        "/": 200, f"/pith/{PITH}": 200, f"/pith/{EQUIVOCATED}": 200,
        f"/event/{event_id}": 200, f"/search?q={PITH}": 303, "/search?q=2411.00284": 303,
        f"/search?q={VERSIONED}": 200, "/search?q=doi:10.1/none": 404, "/search?q=": 400,
        "/pith/pith:2024:AAAAAAAAAAAAAAAAAAAAAAAAAA": 404, "/pith/nope": 400,
        "/event/sha256:" + "0" * 64: 404, "/event/nope": 400,
    }  # fmt: skip


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "store") as s:
        s.append(_lines(), KEYRING, keep_invalid=True)
        yield s


def _client(store: Store) -> TestClient:
    return TestClient(create_app(ServeConfig(store, test_key("registry"), ORIGIN,
                                             extra_routes=page_routes())))  # fmt: skip


def _under_prefix(page: str, url: str) -> str:
    """The path on the server that ``url``, a link of the page at ``page`` (a path on the
    server) reaches when the pages are served under :data:`PREFIX`; fails if it leaves it."""
    base = "https://registry.example" + PREFIX + page
    resolved = urlsplit(urljoin(base, url))
    assert resolved.netloc == "registry.example", (page, url)
    assert resolved.path.startswith(PREFIX + "/"), (page, url, resolved.path)
    rest = resolved.path.removeprefix(PREFIX)
    return rest + ("?" + resolved.query if resolved.query else "")


def _at_root(page: str, url: str) -> str:
    """The path on the server that ``url``, a link of the page at ``page``, reaches when the
    pages are served at the root."""
    resolved = urlsplit(urljoin("http://registry.example" + page, url))
    return resolved.path + ("?" + resolved.query if resolved.query else "")


def test_every_link_and_redirect_of_the_pages_is_relative(store: Store) -> None:
    """Every link of every page was from the server's root (``/static/style.css``,
    ``/pith/...``, the search's ``action="/search"`` and its ``303`` to ``/pith/...``):
    under the prefix of docs/network.md's nginx example, each led to the proxy's own root,
    and the pages lost their stylesheet, links and search. Each is relative now, and
    reaches under the prefix what it reaches at the root."""
    event_id = json.loads(_lines()[0])["event_id"]
    with _client(store) as client:
        seen = 0
        for page, status in _pages(event_id).items():
            got = client.get(page, headers=HTML, follow_redirects=False)
            assert got.status_code == status, (page, got.text[:300])
            if status == 303:
                urls = [got.headers["location"]]
            else:
                assert got.headers["content-type"].startswith("text/html"), page
                urls = links(got.text)
                assert "static/style.css" in " ".join(urls), page
            for url in urls:
                assert not url.startswith("/") and not urlsplit(url).scheme, (page, url)
                # under the prefix, the path it reaches at the server's root
                assert _under_prefix(page, url) == _at_root(page, url), (page, url)
                seen += 1
        assert seen > 100
        # the Busy pages (503) of a record and of an event
        log = client.app.state.log  # type: ignore[attr-defined]

        class Full:
            async def hold(self, size: int) -> int:
                raise ServeError("busy", "the room is full")

        log.copies = Full()
        for page in (f"/pith/{PITH}", f"/event/{event_id}"):
            got = client.get(page, headers=HTML)
            assert got.status_code == 503 and "Busy" in got.text, page
            urls = links(got.text)
            assert urls and not [u for u in urls if u.startswith("/")], (page, urls)
            assert _under_prefix(page, urls[0]) == "/static/style.css"


def test_behind_a_proxy_that_serves_the_log_under_a_prefix_every_link_is_reached(
    tmp_path: Path,
) -> None:
    """A real ``pithlog serve`` behind a proxy on 127.0.0.1 that serves it under ``/pith/``
    (docs/network.md's nginx example): every link of every page, the stylesheet, the
    search form's action and its ``303``, followed through the proxy, is answered ``200``
    (a page or the JSON of the log), and the search lands on the record's page. With links
    from the root, the stylesheet and every link were the proxy's ``404``."""
    event_id = json.loads(_lines()[0])["event_id"]
    with Store.open(tmp_path / "store") as store:
        store.append(_lines(), KEYRING, keep_invalid=True)
    key = tmp_path / "registry.key"
    write_key_file(key, test_key("registry"))
    with (serve_process(tmp_path / "store", "--key", str(key), "--origin", ORIGIN) as server,
          prefix_proxy(server.url, PREFIX) as proxy,
          httpx.Client(timeout=TIMEOUT, headers=HTML,
                       follow_redirects=True) as client):  # fmt: skip
        followed: dict[str, int] = {}
        for page, status in _pages(event_id).items():
            got = client.get(proxy + page)
            assert got.status_code == (200 if status == 303 else status), (page, got.text[:300])
            if status == 303:  # the search lands on the record's page, under the prefix
                assert [r.status_code for r in got.history] == [303]
                assert got.url.path.startswith(f"{PREFIX}/pith/pith:"), got.url
                assert "<h1>" in got.text and "The canonical record" in got.text
            for url in links(got.text):
                target = urljoin(str(got.url), url)
                if urlsplit(target).path.endswith("/search"):  # the form: with a query
                    target += "?q=2411.00284"
                if target not in followed:
                    followed[target] = client.get(target).status_code
        broken = {url: status for url, status in followed.items() if status != 200}
        assert not broken, broken
        kinds = {urlsplit(u).path.removeprefix(PREFIX).split("/")[1] for u in followed}
        assert kinds >= {"", "static", "search", "checkpoint", "stats", "pith", "event",
                         "state", "proof"}, kinds  # fmt: skip
        # the stylesheet is the server's, through the proxy
        style = client.get(f"{proxy}/static/style.css")
        assert style.headers["content-type"].startswith("text/css") and "{" in style.text
        # the search form as a browser sends it: its action resolved against the page
        home = client.get(f"{proxy}/")
        [action] = [u for u in links(home.text) if u.endswith("search")]
        found = client.get(urljoin(str(home.url), action), params={"q": "2411.00284"})
        assert found.status_code == 200 and str(found.url) == f"{proxy}/pith/{PITH}"


HOSTILE = ["../../x", "..", ".", "", "?q=1", "#top", "a/b", "%2e%2e", ".%2E", "..\\x",
           "//evil.example/x", "javascript:alert(1)", ".\t.", "pith:2024:Å ok",
           "a b&c"]  # fmt: skip
"""Values no link of a page should step out of its route with: the door stores no copy
whose event_id or pith_number is not of its form, but a page should not count on it."""
_ROUTES = {"pith", "event", "state"}
_DOTS = {".", "..", "%2e", "%2e%2e", ".%2e", "%2e."}
"""Dot segments, as RFC 3986 5.2.4 and the WHATWG URL standard (which reads ``%2e`` as a
dot) remove them."""


def _hostile(value: object, names: Iterator[str]) -> object:
    """``value`` (a state or a copy, decoded) with each event id and pith number in it
    replaced by the next of ``names``."""
    if isinstance(value, dict):
        return {k: next(names) if k in ("event_id", "applied_event_id", "pith_number")
                else [next(names) for _ in v] if k == "event_ids" else _hostile(v, names)
                for k, v in value.items()}  # fmt: skip
    if isinstance(value, list):
        return [_hostile(v, names) for v in value]
    return value


def _stays_in_its_route(page: str, url: str) -> str | None:
    """The value ``url``, a link of the page at ``page``, names in a route of a record or
    an event (``None`` for a link to a fixed page); fails if it leaves its route."""
    # a browser takes tabs and newlines out of a URL and reads a backslash as a slash
    assert not set(url) & {"\t", "\n", "\r", "\\"}, (page, url)
    resolved = urlsplit(urljoin("https://registry.example" + PREFIX + page, url))
    assert resolved.netloc == "registry.example" and not resolved.fragment, (page, url)
    assert resolved.query in ("", "format=json"), (page, url)
    parts = resolved.path.removeprefix(PREFIX).split("/")
    assert resolved.path.startswith(PREFIX + "/") and parts[0] == "", (page, url)
    if len(parts) == 2 or parts[1] == "static":
        assert parts[1] in ("", "search", "checkpoint", "stats", "static"), (page, url)
        return None
    route = parts[1:-1]
    assert route in (["pith"], ["event"], ["state"], ["proof", "inclusion"]), (page, url)
    assert parts[-1].lower() not in _DOTS, (page, url)
    return unquote(parts[-1])


def test_a_value_in_a_link_stays_in_its_segment(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Event ids and pith numbers were put into links as they were: an event id of
    ``../../x``, ``?q=`` or ``#`` made a link to elsewhere on the site. Each is now one
    percent-encoded path segment of its route (``:`` kept), and a value that would be a dot
    segment is not one; a link of a value of its form is what it was."""
    real = {name: getattr(Store, name) for name in ("lookup", "event", "export")}
    names = iter(HOSTILE * 10_000)

    def lookup(self: Store, pith: str) -> object:
        state = real["lookup"](self, EQUIVOCATED)
        return json.dumps(_hostile(json.loads(state), names)).encode()

    def event(self: Store, event_id: str) -> bytes | None:
        copy = real["event"](self, json.loads(_lines()[-1])["event_id"])  # a large payload
        return json.dumps(_hostile(json.loads(copy), names)).encode()

    def export(self: Store, after: int = 0, chunk: int = 1000) -> Iterator[tuple[int, bytes]]:
        for seq, copy in real["export"](self, after, chunk):
            yield seq, json.dumps(_hostile(json.loads(copy), names)).encode()

    monkeypatch.setattr(Store, "lookup", lookup)
    monkeypatch.setattr(Store, "event", event)
    monkeypatch.setattr(Store, "export", export)
    found: list[str] = []
    monkeypatch.setattr(Store, "piths_for_alias", lambda self, alias: list(found))
    shown: set[str] = set()
    with _client(store) as client:
        for page in ("/", f"/pith/{EQUIVOCATED}", "/event/sha256:" + "1" * 64):
            got = client.get(page, headers=HTML)
            assert got.status_code == 200, (page, got.text[:300])
            shown |= {v for url in links(got.text) if (v := _stays_in_its_route(page, url))}
        found[:] = HOSTILE
        got = client.get("/search?q=2411.00284", headers=HTML)
        assert got.status_code == 200 and "Several records match" in got.text
        shown |= {v for url in links(got.text) if (v := _stays_in_its_route("/search", url))}
        for value in HOSTILE:
            found[:] = [value]
            got = client.get("/search?q=2411.00284", headers=HTML, follow_redirects=False)
            assert got.status_code == 303, got.text
            assert _stays_in_its_route("/search", got.headers["location"]) is not None
    assert {v.rstrip(" ") for v in shown} >= set(HOSTILE) - {""}, shown
