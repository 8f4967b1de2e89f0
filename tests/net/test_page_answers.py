"""The pages for people (docs/pages.md) without a browser: the app in process, over a store
of the conformance cases and of kept invalid events whose members are of any JSON type."""

from __future__ import annotations

import gc
import json
import re
import tracemalloc
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import msgspec
import pytest
from served import loop_watched

with warnings.catch_warnings():  # Starlette would have httpx2; httpx is what pithlog uses
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from pithlog import Store, load_keyring, sign_event
from pithlog.cli import main
from pithlog.errors import ServeError, StoreError
from pithlog.net import encoding, served_log
from pithlog.net import server as server_module
from pithlog.net.app import create_app
from pithlog.net.page_layout import (
    MOST_CUT,
    MOST_LAID_OUT,
    MOST_LAID_OUT_ON_A_PAGE,
    MOST_LISTED,
    MOST_SHOWN,
    MOST_SIDE_BY_SIDE,
    PAGE_MAKING,
    Layout,
    fits_layout,
)
from pithlog.net.page_state import raw_chars, string_chars, string_head
from pithlog.net.pages import RECENT, Pages, page_routes
from pithlog.net.served_log import ServeConfig
from pithlog.protocol.event_types import prepare_record_created
from pithlog.testing import test_key, write_key_file

CASES = Path(__file__).resolve().parents[2] / "vectors" / "cases"
KEYRING = load_keyring((CASES / "equivocations" / "keyring.json").read_bytes())
PITH = json.loads((CASES / "seed-2411.00284" / "expected.jsonl").read_text())["pith_number"]
ORIGIN = "registry.test.invalid/pith"
HTML = {"accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}


def _cases() -> list[bytes]:
    lines = []
    for case in ("seed-2411.00284", "equivocations"):
        lines += (CASES / case / "events.jsonl").read_text().splitlines()
    return [line.encode() for line in lines if line]


def _odd(n: int, **members: Any) -> dict[str, Any]:
    """A signed event with ``members`` put in its place afterwards: invalid, kept."""
    event = sign_event(test_key("author"), "author_attestation", PITH, "claim:x",
                       "2026-08-01T00:00:00Z", {"statement": "hi"})  # fmt: skip
    return {**event, **members, "event_id": "sha256:" + format(n, "064x")}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "store") as s:
        s.append(_cases(), KEYRING, keep_invalid=True)
        yield s


def _client(store: Store, **config: Any) -> TestClient:
    return TestClient(create_app(ServeConfig(store, test_key("registry"), ORIGIN,
                                             extra_routes=page_routes(), **config)))  # fmt: skip


@pytest.mark.parametrize("created_at", [5, {"at": 1}, ["2026-08-01T00:00:00Z"], True, "soon"])
def test_a_kept_event_whose_time_is_not_a_timestamp_is_shown_as_text(
    store: Store, created_at: Any
) -> None:
    """A kept invalid event's created_at may be any JSON value: the front page (which lists
    it among the recent events) and its own page were a 500, the time filter calling
    ``str.replace`` on it."""
    odd = _odd(1, created_at=created_at)
    store.append([json.dumps(odd).encode()], KEYRING, keep_invalid=True)
    with _client(store) as client:
        for path in ("/", "/event/" + odd["event_id"]):
            got = client.get(path, headers=HTML)
            assert got.status_code == 200, (path, got.text)
            assert got.headers["content-type"].startswith("text/html")
        assert f'<time datetime="{created_at}"' not in got.text


def test_the_recent_events_are_those_of_the_published_checkpoint(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the witnesses do not cosign a larger tree, the published checkpoint stays
    behind the store: the front page listed every copy stored since (decoded and held for
    one request, however many: the export went on to the store's end, a thousand copies of
    up to 1 MiB a read), with leaves the published tree does not hold."""
    published = store.tree_size()

    def cosign(note: bytes, size: int) -> bytes:
        if size > published:
            raise ServeError("internal", "too few witnesses cosigned")
        return note

    read: list[int] = []
    export = Store.export

    def counted(self: Store, after: int = 0, chunk: int = 1000) -> Iterator[tuple[int, bytes]]:
        for row in export(self, after, chunk):
            read.append(row[0])
            yield row

    monkeypatch.setattr(Store, "export", counted)
    with _client(store, cosign=cosign) as client:
        assert client.get("/", headers=HTML).status_code == 200
        store.append([json.dumps(_odd(n)).encode() for n in range(1, 41)], KEYRING,
                     keep_invalid=True)  # fmt: skip
        assert store.tree_size() == published + 40
        read.clear()
        page = client.get("/", headers=HTML).text
    assert f"<strong>{published}</strong> copies logged" in page
    leaves = [int(leaf) for leaf in re.findall(r"<tr>\s*<td>(\d+)</td>", page)]
    assert leaves == list(range(published - 1, published - 1 - RECENT, -1))
    assert max(read) <= published and len(read) <= RECENT


def test_the_counts_follow_the_store_while_the_published_tree_stays_behind(
    store: Store,
) -> None:
    """The counts sum the store's states, which run ahead of the published checkpoint while
    the witnesses lag; they were cached under the published tree's size, so copies stored
    after the first count were never counted until the witnesses cosigned a larger tree."""
    published = store.tree_size()

    def cosign(note: bytes, size: int) -> bytes:
        if size > published:
            raise ServeError("internal", "too few witnesses cosigned")
        return note

    def invalid(page: str) -> int:
        found = re.search(r"<strong>(\d+)</strong> invalid events", page)
        assert found is not None
        return int(found.group(1))

    with _client(store, cosign=cosign) as client:
        before = invalid(client.get("/", headers=HTML).text)
        store.append([json.dumps(_odd(n)).encode() for n in range(1, 8)], KEYRING,
                     keep_invalid=True)  # fmt: skip
        page = client.get("/", headers=HTML).text
    assert f"<strong>{published}</strong> copies logged" in page
    assert invalid(page) == before + 7


@pytest.mark.parametrize("event_type", ["", " ", ["author_attestation"], None, "x" * 5000])
def test_recent_events_of_an_unknown_type_are_links_with_text(
    store: Store, event_type: Any
) -> None:
    """Each recent event is a link named by its type (docs/pages.md: every link has text): a
    kept invalid event's type outside the nine was printed as it came, an empty one an
    empty link, a list its Python repr; it reads "unknown type", as on the event's page."""
    odd = _odd(1, event_type=event_type)
    store.append([json.dumps(odd).encode()], KEYRING, keep_invalid=True)
    with _client(store) as client:
        page = client.get("/", headers=HTML).text
    assert f'<a href="./event/{odd["event_id"]}">unknown type</a>' in page


def test_a_search_the_store_fails_to_answer_is_not_nothing_found(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store read that failed (too many readers: retry) was a 404 page saying no record
    has the alias; it is the error of its code (a page of it for a browser, the JSON for
    any other client: test_page_failures). A query that is no form of alias is still a
    404 page."""

    def full(alias: str) -> list[str]:
        raise StoreError("readers_full", "too many readers")

    with _client(store) as client:
        assert client.get("/search?q=doi:", headers=HTML).status_code == 404
        monkeypatch.setattr(store, "piths_for_alias", full)
        got = client.get("/search?q=2411.00284", headers=HTML)
        api = client.get("/search?q=2411.00284", headers={"accept": "application/json"})
    assert got.status_code == 503 and "store.readers_full" in got.text
    assert "Nothing found" not in got.text
    assert api.status_code == 503 and api.json()["error"] == "store.readers_full"


def test_a_large_page_is_compressed_apart_from_the_event_loop(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An event's page of megabytes (a kept event of 1 MiB of small values lays out as
    several) went through starlette-compress on the event loop, and a record's page,
    on routes without it, was sent as it is: a page of APART_BYTES or more is compressed
    in a worker thread, as the JSON routes' answers are. (APART_BYTES is 1 here.)"""
    on_loop: list[bool] = []
    monkeypatch.setattr(encoding, "pack", loop_watched(on_loop, encoding.pack))
    monkeypatch.setattr(encoding, "APART_BYTES", 1)
    odd = _odd(1, payload={"a": [[] for _ in range(1000)]})
    store.append([json.dumps(odd).encode()], KEYRING, keep_invalid=True)
    with _client(store) as client:
        for path in ("/event/" + odd["event_id"], f"/pith/{PITH}"):
            got = client.get(path, headers={**HTML, "accept-encoding": "gzip"})
            assert got.status_code == 200 and got.headers["content-encoding"] == "gzip"
            assert got.headers["content-security-policy"].startswith("default-src 'none'")
            assert "Accept-Encoding" in got.headers["vary"]
            assert got.text.startswith("<!doctype html>")  # httpx decodes it
        assert got.headers["vary"] == "Accept-Encoding"
    assert on_loop == [False, False]


def test_a_payload_of_too_many_values_is_a_link_to_its_json(store: Store) -> None:
    """A payload is laid out a few hundred bytes of HTML per value: a 1 MiB copy of 150,000
    empty lists made a page of 8.6 MB and seconds of Jinja on each request. Past
    :data:`MOST_LAID_OUT` values the page links to the JSON instead; up to it, it lays the
    payload out as before."""
    wide = _odd(1, payload={"items": [[] for _ in range(150_000)]})
    # the payload itself, its list and MOST_LAID_OUT - 2 strings: exactly the bound
    fits = _odd(2, payload={"items": [f"v{n}" for n in range(MOST_LAID_OUT - 2)]})
    over = _odd(3, payload={"items": [f"v{n}" for n in range(MOST_LAID_OUT - 1)]})
    store.append([json.dumps(e).encode() for e in (wide, fits, over)], KEYRING,
                 keep_invalid=True)  # fmt: skip
    assert fits_layout(fits["payload"]) and not fits_layout(over["payload"])
    link = 'too many to lay out here: read <a href="../event/{}?format=json">its JSON</a>'
    with _client(store) as client:
        for event, laid_out in ((wide, False), (fits, True), (over, False)):
            page = client.get("/event/" + event["event_id"], headers=HTML)
            assert page.status_code == 200
            assert (link.format(event["event_id"]) in page.text) is not laid_out
            assert ("<li>v1</li>" in page.text) is laid_out
        assert len(client.get("/event/" + wide["event_id"], headers=HTML).content) < 20_000
        as_json = client.get(f"/event/{wide['event_id']}?format=json")
        assert json.loads(as_json.content)["payload"] == wide["payload"]


def test_an_applied_payload_of_too_many_values_is_a_link_on_the_record_page(
    tmp_path: Path,
) -> None:
    """The record's page lays out each applied event's payload: the same bound holds."""
    registry = test_key("registry")
    keyring = load_keyring(json.dumps({"keyring_version": "1", "keys": [
        registry.keyring_entry()]}).encode())  # fmt: skip
    created = json.loads((CASES / "seed-2411.00284" / "events.jsonl").read_text().split("\n")[0])
    big = sign_event(registry, "mirror_hint", PITH, "record", "2026-09-01T00:00:00Z",
                     {"locator": "https://m.example/",
                      "mirrors": [{"url": f"https://m{n}.example/"} for n in range(1500)]})
    with Store.open(tmp_path / "store") as store:
        results = store.append([json.dumps(created).encode(), json.dumps(big).encode()],
                               keyring)  # fmt: skip
        assert [r.status for r in results] == ["stored", "stored"]
        assert json.loads(store.state(PITH))["current"]["mirror_hints"][0]["event_id"] == (
            big["event_id"])
        with _client(store) as client:
            page = client.get("/pith/" + PITH, headers=HTML)
    assert page.status_code == 200
    assert "holds more than 2000 values, too many to lay out here" in page.text
    assert "https://m1.example/" not in page.text


def test_a_section_of_a_record_page_shows_at_most_most_listed_items(tmp_path: Path) -> None:
    """A record's page shows the first :data:`MOST_LISTED` items of a section and says where
    the rest are; the count in the heading stays the state's (a record of 4,000 events took
    1.8 s of Jinja on every request)."""
    registry = test_key("registry")
    keyring = load_keyring(json.dumps({"keyring_version": "1", "keys": [
        registry.keyring_entry()]}).encode())  # fmt: skip
    created = (CASES / "seed-2411.00284" / "events.jsonl").read_text().split("\n")[0]
    hints = [sign_event(registry, "mirror_hint", PITH, "record",
                        f"2026-09-01T{n // 3600:02d}:{n // 60 % 60:02d}:{n % 60:02d}Z",
                        {"locator": f"https://m{n}.example/"})
             for n in range(MOST_LISTED + 5)]  # fmt: skip
    # two hints of one slot (signer, target, time) each: an equivocation, one applied
    twins = [sign_event(registry, "mirror_hint", PITH, "record",
                        f"2026-10-01T{n // 3600:02d}:{n // 60 % 60:02d}:{n % 60:02d}Z",
                        {"locator": f"https://{side}{n}.example/"})
             for n in range(MOST_LISTED + 2) for side in "ab"]  # fmt: skip
    odd = [_odd(n + 1) for n in range(MOST_LISTED + 1)]
    with Store.open(tmp_path / "store") as store:
        store.append([created.encode()] + [json.dumps(e).encode() for e in hints + twins + odd],
                     keyring, keep_invalid=True)  # fmt: skip
        state = json.loads(store.state(PITH))
        with _client(store) as client:
            page = client.get("/pith/" + PITH, headers=HTML).text
    hinted = len(hints) + len(twins) // 2
    assert len(state["current"]["mirror_hints"]) == hinted
    assert len(state["equivocations"]) == MOST_LISTED + 2
    assert len(state["invalid_events"]) == MOST_LISTED + 1
    section = page[page.index('id="mirror_hints"'):page.index('id="equivocations"')]
    assert f'<span class="muted">({hinted})</span>' in section
    assert section.count('<div class="card">') == MOST_LISTED
    assert f"The first {MOST_LISTED} of {hinted}; all of them are in" in section
    twinned = page[page.index('id="equivocations"'):page.index('id="invalid"')]
    assert twinned.count('<span class="badge good">applied</span>') == MOST_LISTED
    assert f"The first {MOST_LISTED} of {MOST_LISTED + 2};" in twinned
    invalid = page[page.index('id="invalid"'):]
    assert invalid.count("<tr><td>") == MOST_LISTED
    assert f"The first {MOST_LISTED} of {MOST_LISTED + 1};" in invalid


def test_a_record_stored_between_two_reads_is_served_not_called_pending(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``/state/`` and the record's page read the state, then, when there was none, the
    pith's status: a record stored between the two reads made an answer that called the
    pith pending. They now read both in one snapshot (``Store.lookup``): a state read
    made to miss, as it would have just before the record's commit, changes nothing."""
    missed: list[str] = []
    state = Store.state

    def late(self: Store, pith_number: str) -> bytes | None:
        if pith_number not in missed:
            missed.append(pith_number)
            return None
        return state(self, pith_number)

    monkeypatch.setattr(Store, "state", late)
    with _client(store) as client:
        got = client.get("/state/" + PITH)
        assert got.status_code == 200 and json.loads(got.content)["pith_number"] == PITH
        missed.clear()
        page = client.get("/pith/" + PITH, headers=HTML)
        assert page.status_code == 200 and "pending" not in page.text.lower()


def test_an_equivocated_slot_shows_at_most_most_side_by_side_events(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One key holder can sign any number of events of one slot (signer, target, time): the
    record's page read every event of each slot and laid each out side by side (a slot of
    3,000 was 3,000 reads and a page of 2.3 MB). It reads and shows the first
    :data:`MOST_SIDE_BY_SIDE`, the applied one first, and says where the rest are."""
    registry, author = test_key("registry"), test_key("author")
    keyring = load_keyring(json.dumps({"keyring_version": "1", "keys": [
        registry.keyring_entry(), author.keyring_entry()]}).encode())  # fmt: skip
    created = (CASES / "seed-2411.00284" / "events.jsonl").read_text().split("\n")[0]
    many = MOST_SIDE_BY_SIDE + 30
    slot = [sign_event(author, "author_attestation", PITH, "claim:x", "2026-08-01T00:00:00Z",
                       {"statement": f"s{n}"}) for n in range(many)]  # fmt: skip
    read: list[str] = []
    event = Store.event

    def counted(self: Store, event_id: str) -> bytes | None:
        read.append(event_id)
        return event(self, event_id)

    with Store.open(tmp_path / "store") as store:
        store.append([created.encode()] + [json.dumps(e).encode() for e in slot], keyring)
        (q,) = json.loads(store.state(PITH))["equivocations"]
        assert len(q["event_ids"]) == many
        monkeypatch.setattr(Store, "event", counted)
        with _client(store) as client:
            page = client.get("/pith/" + PITH, headers=HTML).text
    assert read == q["event_ids"][:MOST_SIDE_BY_SIDE]
    twinned = page[page.index('id="equivocations"'):page.index('id="invalid"')]
    assert twinned.count('<span class="badge good">applied</span>') == 1
    assert twinned.count('<span class="badge warn">not applied</span>') == MOST_SIDE_BY_SIDE - 1
    assert f"The first {MOST_SIDE_BY_SIDE} of the slot's {many} events;" in twinned


def test_a_page_lays_out_at_most_most_laid_out_on_a_page_values(tmp_path: Path) -> None:
    """Each payload was bounded, the page not: 200 valid attestations of 2,000 values each
    made a record's page of 5.5 MB and 4.5 s of Jinja on every request. The payloads past
    :data:`MOST_LAID_OUT_ON_A_PAGE` values on one page are links to their JSON, saying
    why."""
    registry, author = test_key("registry"), test_key("author")
    keyring = load_keyring(json.dumps({"keyring_version": "1", "keys": [
        registry.keyring_entry(), author.keyring_entry()]}).encode())  # fmt: skip
    created = (CASES / "seed-2411.00284" / "events.jsonl").read_text().split("\n")[0]
    fit = MOST_LAID_OUT_ON_A_PAGE // MOST_LAID_OUT
    # each payload of exactly MOST_LAID_OUT values: itself, its two members, the strings
    full = [sign_event(author, "author_attestation", PITH, f"claim:{n}",
                       "2026-08-01T00:00:00Z",
                       {"statement": "s", "items": [f"v{i}" for i in range(MOST_LAID_OUT - 3)]})
            for n in range(fit + 3)]  # fmt: skip
    assert all(fits_layout(e["payload"]) for e in full)
    with Store.open(tmp_path / "store") as store:
        store.append([created.encode()] + [json.dumps(e).encode() for e in full], keyring)
        applied = json.loads(store.state(PITH))["current"]["author_attestations"]
        assert len(applied) == fit + 3
        with _client(store) as client:
            page = client.get("/pith/" + PITH, headers=HTML).text
    section = page[page.index('id="author_attestations"'):page.index('id="timestamp_anchors"')]
    assert section.count("<li>v1</li>") == fit
    links = [e["event_id"] for e in applied[fit:]]
    for event_id in links:
        assert (f"as many payload values as it shows ({MOST_LAID_OUT_ON_A_PAGE}): read "
                f'<a href="../event/{event_id}?format=json">its JSON</a>') in section
    assert "too many to lay out here" not in section


@pytest.mark.parametrize(("cross", "shown"), [
    (5, "cs.DC, 5"), (True, "cs.DC, yes"), ("cs.AI", "cs.DC, cs.AI"), (None, "cs.DC"),
    ("", "cs.DC, <span class=\"muted\">(empty)</span>"),
    (["cs.DC", "cs.AI", "math.CO"], "cs.DC, cs.AI, math.CO"),
])  # fmt: skip
def test_a_record_whose_cross_categories_are_not_a_list_has_a_page(
    tmp_path: Path, cross: Any, shown: str
) -> None:
    """Spec 5.1 asks nothing of a record's metadata but submitted_at: a valid record whose
    cross_cats_sorted was a number made its page a 500 (the template iterated over it), and
    a string was shown letter by letter. A list is shown item by item, any other value as
    it is (each string isolated: ``<bdi>``)."""
    page = re.sub("</?bdi>", "", _record_page(tmp_path, cross))
    assert f"<dt>categories</dt><dd>{shown}</dd>" in page


def _record_page(tmp_path: Path, cross: Any) -> str:
    """The page of a record (the seed's, signed again) whose cross_cats_sorted is ``cross``."""
    registry = test_key("registry")
    keyring = load_keyring(json.dumps({"keyring_version": "1", "keys": [
        registry.keyring_entry()]}).encode())  # fmt: skip
    created = json.loads((CASES / "seed-2411.00284" / "events.jsonl").read_text().split("\n")[0])
    record = created["payload"]["canonical_record"]
    record = {**record, "metadata": {**record["metadata"], "cross_cats_sorted": cross}}
    pith, payload = prepare_record_created(registry, {"canonical_record": record})
    event = sign_event(registry, "record_created", pith, "record", created["created_at"], payload)
    with Store.open(tmp_path / "store") as store:
        assert [r.status for r in store.append([json.dumps(event).encode()], keyring)] == [
            "stored"]  # fmt: skip
        with _client(store) as client:
            page = client.get("/pith/" + pith, headers=HTML)
    assert page.status_code == 200, page.text
    return page.text


@pytest.mark.parametrize("cross", [
    [f"c{n}" for n in range(MOST_LAID_OUT)],
    {f"c{n}": n for n in range(MOST_LAID_OUT)},
])  # fmt: skip
def test_cross_categories_of_more_values_than_a_payload_lays_out_are_a_link(
    tmp_path: Path, cross: Any
) -> None:
    """A record's cross_cats_sorted is laid out within the bound of a payload
    (:data:`MOST_LAID_OUT`), past it a link to the state's JSON: it was laid out whole, and
    a record of 1 MB whose cross_cats_sorted held 450,000 values made its page 1.3 MB and
    1.7 s of Jinja on every request."""
    page = _record_page(tmp_path, cross)
    categories = page.partition("<dt>categories</dt>")[2].partition("<dt>license</dt>")[0]
    assert "more values than a page lays out" in categories and "state's JSON" in categories
    assert "c1" not in categories
    fits = _record_page(tmp_path / "fits", cross[: MOST_LAID_OUT - 2] if isinstance(
        cross, list) else dict(list(cross.items())[: MOST_LAID_OUT // 2 - 1]))  # fmt: skip
    assert "c1" in fits.partition("<dt>categories</dt>")[2].partition("<dt>license</dt>")[0]


def test_a_search_that_finds_one_record_redirects_with_the_headers_of_every_answer(
    store: Store,
) -> None:
    """Every answer carries ``nosniff`` and its ``Cache-Control`` (answers.answer_headers);
    the 303 of a search that names one record (by its pith number or an alias) had neither,
    so a cache between could keep the redirect for a query whose answer may change."""
    with _client(store) as client:
        for query in (PITH, "2411.00284"):
            got = client.get("/search", params={"q": query}, headers=HTML,
                             follow_redirects=False)  # fmt: skip
            assert got.status_code == 303
            assert got.headers["location"] == f"./pith/{PITH}"
            assert got.headers["cache-control"] == "no-cache"
            assert got.headers["x-content-type-options"] == "nosniff"


def test_serve_frees_what_each_request_leaves_in_reference_cycles(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Starlette, anyio and Jinja leave reference cycles on every request (tracebacks and
    their frames, template macros), about 130 objects a page holding what the request
    held. Every command runs with the cyclic collector paused, and so did ``serve``: a
    worker kept all of them, 250 KB more with every record page (400 MB over 6,000). Under
    the collector as ``serve`` leaves it (its server here makes the requests in process),
    300 more pages leave nothing like 300 pages' cycles behind."""
    grown: list[int] = []

    def requests(*args: Any) -> None:
        with _client(store) as client:
            for _ in range(20):
                assert client.get(f"/pith/{PITH}", headers=HTML).status_code == 200
            before = len(gc.get_objects())
            for _ in range(300):
                client.get(f"/pith/{PITH}", headers=HTML)
            grown.append(len(gc.get_objects()) - before)

    monkeypatch.setattr(server_module, "serve", requests)
    key = tmp_path / "registry.key"
    write_key_file(key, test_key("registry"))
    argv = ["--store", str(store.path), "serve", "--key", str(key), "--origin", ORIGIN]
    assert main(argv) == 0
    assert len(grown) == 1 and grown[0] < 300 * 10, grown


def test_the_front_page_counts_hold_no_list_of_every_pith(tmp_path: Path) -> None:
    """The front page's counts sum every pith's summary: they were summed over a list of
    all of them (about 540 bytes a pith: 540 MB for a million, in each worker, on the
    first front page after every commit). They are summed as they are read: what the
    count holds at its peak does not grow with the piths."""
    registry = test_key("registry")
    created = json.loads((CASES / "seed-2411.00284" / "events.jsonl").read_text().split("\n")[0])
    record = created["payload"]["canonical_record"]
    lines = []
    for n in range(2000):
        varied = {**record, "source": {**record["source"], "id": f"2611.{n:05d}"}}
        pith, payload = prepare_record_created(registry, {"canonical_record": varied})
        lines.append(json.dumps(sign_event(registry, "record_created", pith, "record",
                                           created["created_at"], payload)).encode())
    with Store.open(tmp_path / "store") as store:
        store.append(lines, KEYRING)
        with _client(store) as client:
            log = client.app.state.log  # type: ignore[attr-defined]
            tracemalloc.start()
            try:
                totals = Pages().totals(log)
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            assert "<strong>2000</strong>" in client.get("/", headers=HTML).text
    assert totals["piths"] == 2000 and totals["events"] == 2000
    assert peak < 100_000, peak


@pytest.mark.parametrize("forged", ["payload", "signature"])
def test_a_kept_invalid_event_is_not_shown_as_signed_by_the_signer_it_names(
    store: Store, forged: str
) -> None:
    """A kept invalid copy (evidence) names whatever signer its maker wrote: a copy of the
    registry's attestation with its payload changed (event_id_mismatch), or with a signature
    of another key (bad_signature), had a page saying "signed by" the registry over the
    changed payload, and the front page listed it as any other event. Both say it is
    invalid and why; a valid event's page says "signed by"."""
    signed = sign_event(test_key("registry"), "author_attestation", PITH, "record",
                        "2026-08-01T00:00:00Z", {"statement": "hi"})  # fmt: skip
    if forged == "payload":
        copy, reason = {**signed, "payload": {"statement": "The registry retracts it"}}, \
            "event_id_mismatch"  # fmt: skip
    else:
        other = sign_event(test_key("author"), "author_attestation", PITH, "record",
                           "2026-08-01T00:00:00Z", {"statement": "hi"})  # fmt: skip
        copy, reason = {**signed, "signature_b64": other["signature_b64"]}, "bad_signature"
    [kept] = store.append([json.dumps(copy).encode()], KEYRING, keep_invalid=True)
    assert kept.status == "stored" and kept.reason == reason
    with _client(store) as client:
        page = client.get(f"/event/{copy['event_id']}", headers=HTML).text
        home = client.get("/", headers=HTML).text
        valid = client.get(f"/event/{_cases_first_id()}", headers=HTML).text
    assert "<dt>signed by</dt>" not in page and "<dt>names as signer</dt>" in page
    assert "<dt>signed at</dt>" not in page
    assert f"<code>{reason}</code>" in page and '<span class="badge bad">invalid</span>' in page
    row = re.search(rf'<a href="./event/{copy["event_id"]}">[^<]*</a>(.*?)</td>', home)
    assert row is not None and "invalid" in row.group(1)
    assert "<dt>signed by</dt>" in valid and "badge bad" not in valid


def _cases_first_id() -> str:
    """The event id of the seed's record_created (valid)."""
    return str(json.loads(_cases()[0])["event_id"])


def test_an_event_page_larger_than_its_copy_holds_its_own_bytes(store: Store) -> None:
    """An event's page holds room for copies before it is rendered, and kept only its
    copy's bytes: the page of a kept invalid event whose strings are all ``<`` is about
    four times its copy once escaped, held a quarter of what it sent. It takes the more
    it needs, or is the Busy page with what it held given back."""
    from pithlog.net.body_bytes import AnswerRoom

    signed = sign_event(test_key("registry"), "author_attestation", PITH, "record",
                        "2026-08-01T00:00:00Z", {"statement": "hi"})  # fmt: skip
    copy = {**signed, "payload": {"statement": "<" * (250 << 10)}}  # event_id_mismatch
    [kept] = store.append([json.dumps(copy).encode()], KEYRING, keep_invalid=True)
    assert kept.status == "stored"
    asked = {**HTML, "accept-encoding": "identity"}
    with _client(store) as client:
        room = AnswerRoom(2 << 20, 2, 1.0, "the room is full")
        client.app.state.log.copies = room  # type: ignore[attr-defined]
        page = client.get(f"/event/{copy['event_id']}", headers=asked)
        assert page.status_code == 200 and len(page.content) > 3 * (250 << 10)
        assert room.held == 0  # given back once sent
        assert room.take_now(1 << 20)  # half the room held by another answer
        busy = client.get(f"/event/{copy['event_id']}", headers=asked)
        assert busy.status_code == 503 and "Busy" in busy.text, busy.text[:300]
        assert room.held == 1 << 20


@pytest.mark.parametrize("member", ["payload", "target"])
def test_an_event_page_holds_what_making_it_takes_before_its_copy_is_decoded(
    store: Store, monkeypatch: pytest.MonkeyPatch, member: str
) -> None:
    """Making the page of a copy of 250 KiB of ``&`` strings (each escaped to five
    characters, and copied by every macro that lays it out) and an emoji (four bytes a
    character, the whole string) took 64.9 times its copy (45.0 for a target), while the
    room held 28 times it: 400 requests at once for pages of copies of 1 MiB of ``<``,
    holding only their copies' bytes, grew a worker to 277 MB with a room of 64 MiB. The
    room held while the page is made covers what making it takes (its copy, decoded, and
    what it shows, rendered)."""
    signed = sign_event(test_key("registry"), "author_attestation", PITH, "record",
                        "2026-08-01T00:00:00Z", {"statement": "hi"})  # fmt: skip
    text = "&" * (250 << 10) + "\U0001f600"  # within MOST_SHOWN: shown in full
    odd: Any = {"statement": text} if member == "payload" else text
    copy = {**signed, member: odd}  # event_id_mismatch: kept
    [kept] = store.append([json.dumps(copy).encode()], KEYRING, keep_invalid=True)
    assert kept.status == "stored"
    seen = _making_measured(monkeypatch, "_event_page")
    asked = {**HTML, "accept-encoding": "identity"}
    with _client(store) as client:
        room = client.app.state.log.copies  # type: ignore[attr-defined]
        page = client.get(f"/event/{copy['event_id']}", headers=asked)
        assert page.status_code == 200 and len(page.content) > 4 * (250 << 10)
        [(held, _, took, size)] = seen
        assert held >= took > 40 * (250 << 10), (held, took)  # 45 to 65 times the copy
        assert size == len(page.content) and room.held == 0


def _making_measured(monkeypatch: pytest.MonkeyPatch, making: str) -> list[tuple[int, ...]]:
    """``Pages.<making>`` (a page made from its raw bytes, in a thread) patched to note,
    for each page it makes: the room for copies held as it began, its raw bytes, those and
    the peak tracemalloc saw while making it (what making it took), and the page's
    bytes."""
    seen: list[tuple[int, ...]] = []
    make = getattr(Pages, making)

    def measured(self: Pages, request: Any, log: Any, key: str, raw: bytes) -> bytes:
        held = log.copies.held
        gc.collect()
        tracemalloc.start()
        try:
            page: bytes = make(self, request, log, key, raw)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        seen.append((held, len(raw), len(raw) + peak, len(page)))
        return page

    monkeypatch.setattr(Pages, making, measured)
    return seen


_UNSHOWN = {
    "empty objects": lambda n: [{}] * (n // 3),
    "nested arrays": lambda n: [[[[[]]]]] * (n // 9),
    "small strings": lambda n: ["a"] * (n // 4),
    "a string of &": lambda n: "&" * n,
    "a string of & and an emoji": lambda n: "&" * n + "\U0001f600",
}


@pytest.mark.parametrize("member", ["payload", "target", "signer"])
@pytest.mark.parametrize("kind", list(_UNSHOWN))
def test_an_event_page_of_a_copy_of_1_mib_takes_what_it_shows_and_little_more(
    store: Store, monkeypatch: pytest.MonkeyPatch, member: str, kind: str
) -> None:
    """An event's page decoded its copy whole: a copy of 1 MiB of empty objects took 28
    times its copy to make, of nested empty arrays 38.8 (tracemalloc), though its page
    shows none of them, and it took 28 times its copy and 40 more for what it shows
    (46.7 MB of the worker's 64 MiB for a copy of 1 MiB: one such page at a time). It now
    reads only the members it shows, as far as it shows them: what it does not show takes
    at most PAGE_MAKING times its copy (2), and a copy of 1 MiB less than 20 MiB."""
    signed = sign_event(test_key("registry"), "author_attestation", PITH, "record",
                        "2026-08-01T00:00:00Z", {"statement": "hi"})  # fmt: skip
    odd = _UNSHOWN[kind]((1 << 20) - 2_000)
    value = {"payload": {"v": odd}, "target": odd,
             "signer": {**signed["signer"], "signer_id": odd}}[member]  # fmt: skip
    copy = {**signed, member: value}  # event_id_mismatch: kept
    [kept] = store.append([json.dumps(copy).encode()], KEYRING, keep_invalid=True)
    assert kept.status == "stored"
    asked = {**HTML, "accept-encoding": "identity"}
    with _client(store) as client:
        first = json.loads(_cases()[0])["event_id"]  # the templates compiled
        assert client.get(f"/event/{first}", headers=asked).status_code == 200
        seen = _making_measured(monkeypatch, "_event_page")
        page = client.get(f"/event/{copy['event_id']}", headers=asked)
        assert page.status_code == 200 and len(page.content) < 200_000
        [(held, size, took, _)] = seen
        assert size > 1_000_000
        assert took <= PAGE_MAKING * size, (took / size, kind)  # 1.0 to 1.4
        assert took <= held < 20 << 20, (held, took)  # 46.7 MB before


def _long_attestations(tmp_path: Path, count: int, text: str) -> Store:
    """A store of the seed record and ``count`` valid author attestations whose statement
    is ``text``."""
    registry, author = test_key("registry"), test_key("author")
    keyring = load_keyring(json.dumps({"keyring_version": "1", "keys": [
        registry.keyring_entry(), author.keyring_entry()]}).encode())  # fmt: skip
    created = (CASES / "seed-2411.00284" / "events.jsonl").read_text().split("\n")[0]
    said = [sign_event(author, "author_attestation", PITH, f"claim:{n}",
                       "2026-08-01T00:00:00Z", {"statement": text})
            for n in range(count)]  # fmt: skip
    store = Store.open(tmp_path / "store")
    results = store.append([created.encode()] + [json.dumps(e).encode() for e in said], keyring)
    assert {r.status for r in results} == {"stored"}
    return store


def test_a_page_is_encoded_piece_by_piece_not_held_as_one_string(tmp_path: Path) -> None:
    """A page was rendered into one string, then encoded: one character past U+FFFF (an
    emoji in a statement) made that string, and the pieces joined into it, four bytes a
    character. The record's page of 40 attestations of 20,000 ``&`` and one emoji took
    8 times its bytes to make; its pieces are now encoded as they are made (twice its
    bytes: the pieces and the page). (Twelve: the page shows at most MOST_SHOWN
    characters in full.)"""
    with _long_attestations(tmp_path, 12, "&" * 20_000 + "\U0001f600") as store:
        state = store.state(PITH)
        assert state is not None
        with _client(store) as client:
            log = client.app.state.log  # type: ignore[attr-defined]
            pages = Pages()
            asked = SimpleNamespace(query_params={}, scope={"path": f"/pith/{PITH}"})
            context = pages._pith_context(log, PITH, state)
            gc.collect()
            tracemalloc.start()
            try:
                page = pages._page(asked, log, "pith.html", context)  # type: ignore[arg-type]
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            assert page == client.get("/pith/" + PITH, headers=HTML).content
    assert len(page) > 12 * 5 * 20_000 and "\U0001f600".encode() in page
    assert peak < 3 * len(page), (peak, len(page))  # 8 times before


def _titled(tmp_path: Path, title: str) -> Store:
    """A store of the seed record and a graph snapshot of it whose paper's title is
    ``title``."""
    lines = (CASES / "seed-2411.00284" / "events.jsonl").read_text().splitlines()
    snapshot = json.loads(lines[1])["payload"]
    graph = snapshot["graph_snapshot"]
    titled = {**snapshot, "graph_snapshot": {**graph, "paper": {**graph["paper"],
                                                                "title": title}}}  # fmt: skip
    said = sign_event(test_key("registry"), "graph_snapshot", PITH, "graph",
                      "2026-08-01T00:00:00Z", titled)  # fmt: skip
    store = Store.open(tmp_path / "store")
    results = store.append([lines[0].encode(), json.dumps(said).encode()], KEYRING)
    assert {r.status for r in results} == {"stored"}
    return store


@pytest.mark.parametrize("shown", ["attestations", "title"])
def test_a_record_page_holds_what_making_it_takes_before_its_state_is_decoded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shown: str
) -> None:
    """A record's page lays out at most 10,000 values, but a value may be a long string:
    the page of 20 valid attestations of 50,000 ``&`` (each escaped to five characters) was
    five times its state, and took 11 times it to make, sent outside every room (200
    requests for the page of such a state of 1 MB, unread by their clients, grew a worker
    to 1.1 GB), and a title of 64,512 ``&`` and an emoji, shown four times, 78.6 times its
    state. It then took 84 times its state, at most the whole room for copies: any state
    over 0.8 MB took the whole room, and such pages were made one at a time. A page now
    shows at most MOST_SHOWN characters in full (the attestations past them are links to
    their JSON), and takes what making it takes: what its state takes, and what it shows,
    bounded."""
    emoji = "\U0001f600"
    made = (_long_attestations(tmp_path, 20, "&" * 50_000 + emoji) if shown == "attestations"
            else _titled(tmp_path, "&" * (63 << 10) + emoji))  # fmt: skip
    with made as store:
        state = store.state(PITH)
        assert state is not None

        seen = _making_measured(monkeypatch, "_pith_page")  # the state decoded, and rendered
        asked = {**HTML, "accept-encoding": "identity"}
        with _client(store) as client:
            room = client.app.state.log.copies  # type: ignore[attr-defined]
            client.get("/pith/" + PITH, headers=asked)  # the templates compiled
            page = client.get("/pith/" + PITH, headers=asked)
            assert page.status_code == 200
            [_, (held, _, took, size)] = seen
            assert size == len(page.content) and room.held == 0
            if shown == "attestations":  # 1 MB: five shown in full, fifteen links
                assert len(state) > 1_000_000 and held < room.most // 2, (held, room.most)
                assert page.text.count("&amp;" * 50_000) == 5
                assert page.text.count("as many characters as it shows in full") == 15
                assert held >= took > 4 * len(state), (held, took)  # 5.2 times the state
            else:
                assert page.text.count("&amp;" * (63 << 10)) == 4  # shown in full
                assert held >= took > 60 * len(state), (held, took)  # 78.6 times the state
            room.take_now(room.most - 1000)  # the room full and as many waiting as it
            room.waiting = room.waiters  # lets wait: a 503 page at once, nothing made
            busy = client.get("/pith/" + PITH, headers=asked)
            assert busy.status_code == 503 and "Busy" in busy.text and len(seen) == 2


def test_a_record_page_is_made_in_the_threads_of_the_large_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record's page, up to tens of megabytes of Jinja's strings, was decoded and
    rendered in anyio's 40 threads, where the store reads of /checkpoint and the tiles
    run, while an event's page is made in the threads of the large answers, as many as
    the cores (``packers``): it is now made in those too."""
    made: list[tuple[int, int]] = []
    limiter: list[anyio.CapacityLimiter] = []

    def ours() -> anyio.CapacityLimiter:
        if not limiter:
            limiter.append(anyio.CapacityLimiter(3))
        return limiter[0]

    make = Pages._pith_page

    def watched(self: Pages, request: Any, log: Any, pith: str, state: bytes) -> bytes:
        made.append((limiter[0].borrowed_tokens if limiter else 0, len(state)))
        return make(self, request, log, pith, state)

    monkeypatch.setattr(served_log, "packers", ours)
    monkeypatch.setattr(Pages, "_pith_page", watched)
    with _long_attestations(tmp_path, 3, "a statement") as store, _client(store) as client:
        page = client.get("/pith/" + PITH, headers=HTML)
        assert page.status_code == 200 and "a statement" in page.text
    assert [borrowed for borrowed, _ in made] == [1]


@pytest.mark.parametrize("member", ["payload", "target", "signer"])
def test_a_page_shows_at_most_most_shown_characters_in_full(
    store: Store, member: str
) -> None:
    """A page laid out at most 10,000 values, but each may be a string of most of a 1 MiB
    event, escaped (``&`` to five characters), copied by every macro that lays it out, and
    four bytes a character with one emoji: the page of a copy of 600 KB of one such string
    took 65 times its copy to make. A page now shows at most MOST_SHOWN characters of
    strings in full: past them a payload is a link to its JSON, as one past the values a
    page lays out, and any other string is cut, with an ellipsis."""
    signed = sign_event(test_key("registry"), "author_attestation", PITH, "record",
                        "2026-08-01T00:00:00Z", {"statement": "hi"})  # fmt: skip
    long = "&" * (600 << 10) + "\U0001f600"
    odd: Any = {"payload": {"statement": long}, "target": long,
                "signer": {**signed["signer"], "signer_id": long}}[member]  # fmt: skip
    copy = {**signed, member: odd}  # event_id_mismatch: kept
    [kept] = store.append([json.dumps(copy).encode()], KEYRING, keep_invalid=True)
    assert kept.status == "stored"
    with _client(store) as client:
        page = client.get(f"/event/{copy['event_id']}", headers=HTML)
        assert page.status_code == 200 and len(page.content) < 100_000, len(page.content)
        if member == "payload":
            assert (f"This page has shown as many characters as it shows in full "
                    f"({MOST_SHOWN})") in page.text  # fmt: skip
            assert f'<a href="../event/{copy["event_id"]}?format=json">' in page.text
        else:
            assert "&amp;" * MOST_CUT + "…" in page.text
            assert "&amp;" * (MOST_CUT + 1) not in page.text
        assert "\U0001f600" not in page.text
    layout = Layout()
    assert layout.shown("a" * 10) == "a" * 10 and layout.chars == MOST_SHOWN - 10
    assert layout.shown("b" * MOST_SHOWN) == "b" * MOST_CUT + "…"
    assert layout.shown("c" * 10, 2) == "c" * 10  # what is left, twice
    layout.chars = 3
    assert layout.shown("d" * 10) == "ddd…" and layout.chars == 0
    assert layout.shown("e" * 10) == "…" and layout.shown(5) == 5


@pytest.mark.parametrize("text", ["", "plain", "&<'\"\\", "é\x01\n\t\u2028", "\U0001f600" * 50,
                                  "a" * 300 + "\U0001f600", "\\u0041" * 40])  # fmt: skip
def test_a_long_string_of_a_copy_is_counted_and_cut_from_its_bytes(text: str) -> None:
    """An event's page counts a string it may not show from its JSON's bytes and decodes
    only what it shows of it: the same characters as the string decoded."""
    for encoded in (json.dumps(text).encode(), json.dumps(text, ensure_ascii=False).encode()):
        assert string_chars(encoded) == len(text)
        for n in (0, 1, 7, 80):
            assert string_head(encoded, n) == text[:n]
        payload = msgspec.Raw(json.dumps({text: [text, 1, {"k": text}]}).encode())
        assert raw_chars(payload) == 3 * len(text) + 1


def test_a_long_object_where_a_string_belongs_is_not_shown(store: Store) -> None:
    """A kept invalid copy's target, time or signer may be an object of most of 1 MiB:
    decoded to be shown as Python writes it, a copy of 1 MiB of empty objects took 27
    times its copy. One past MOST_DECODED bytes is not decoded and says where it is."""
    odd = _odd(1, target={"v": [{}] * 100_000}, created_at=[[]] * 2_000)
    store.append([json.dumps(odd).encode()], KEYRING, keep_invalid=True)
    with _client(store) as client:
        page = client.get(f"/event/{odd['event_id']}", headers=HTML)
    assert page.status_code == 200
    assert "(an object of more than 4,096 bytes, not shown here" in page.text
    assert "(an array of more than 4,096 bytes, not shown here" in page.text


_ABSENT = object()
_KINDS = [_ABSENT, None, True, False, 0, 7, "", "x", [], [1, "a"], {}, {"a": 1},
          {"a": {"b": [1, {"c": None}], "d": []}}]  # fmt: skip
"""Each JSON kind a member of a kept copy may be (the door takes no fraction), nested
included, and none at all."""
_SHOWN_MEMBERS = ["event_type", "target", "created_at", "signer", "payload",
                  "signer.signer_id", "signer.signer_type", "signer.key_id"]  # fmt: skip
"""What an event's page shows of its copy, but its event_id and pith_number: the door
stores no copy without both, of their forms (door.event_id, door.pith_number)."""


def test_an_event_page_shows_any_kept_copy(store: Store) -> None:
    """A kept invalid copy (``append --keep-invalid``, or a mirror of a log that kept it)
    may lack any member the page shows, or hold any JSON value there. One with no
    ``signer`` was a 500 (``serve.internal``, JSON): the template read ``s.signer_id`` of
    an undefined value. Each page, and the front page that lists the copy, is an HTML
    page of 200."""
    odd = []
    for n, (member, kind) in enumerate(
        ((m, k) for m in _SHOWN_MEMBERS for k in _KINDS), start=1
    ):
        copy = _odd(n)
        outer, _, inner = member.partition(".")
        where = copy
        if inner:
            where = copy[outer] = dict(copy[outer])
        if kind is _ABSENT:
            del where[inner or outer]
        else:
            where[inner or outer] = kind
        odd.append((member, kind, copy))
    app = create_app(ServeConfig(store, test_key("registry"), ORIGIN,
                                 extra_routes=page_routes()))  # fmt: skip
    with TestClient(app, raise_server_exceptions=False) as client:
        for member, kind, copy in odd:
            [kept] = store.append([json.dumps(copy).encode()], KEYRING, keep_invalid=True)
            assert kept.status == "stored", (member, kind, kept)
            for path in ("/event/" + copy["event_id"], "/"):
                got = client.get(path, headers=HTML)
                assert got.status_code == 200, (member, kind, path, got.text[:200])
                assert got.headers["content-type"] == "text/html; charset=utf-8"
                assert got.text.startswith("<!doctype html>")
                # a member the copy lacks reads "none", never Python's None
                assert "<td>None</td>" not in got.text, (member, kind, path)


def test_a_record_page_reads_the_copies_of_its_equivocations_one_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record's page read every copy of the equivocated slots it shows (up to 200 slots of
    6 copies of up to 1 MiB) before it was made, and held them all while it was, outside
    the room it took, which counted its state alone: a record of 40 slots of five copies of
    1 MB took 201.3 MB to make where it held 4 MB. Each copy is now read as the page lays it
    out and let go after, and a record with equivocations takes the room of two copies and
    of what it shows of them (they are not in its state)."""
    registry, author = test_key("registry"), test_key("author")
    keyring = load_keyring(json.dumps({"keyring_version": "1", "keys": [
        registry.keyring_entry(), author.keyring_entry()]}).encode())  # fmt: skip
    created = (CASES / "seed-2411.00284" / "events.jsonl").read_text().split("\n")[0]
    long = "a" * 200_000
    slots, copies = 8, 5
    events = []
    for slot in range(slots):
        at = f"2026-08-01T00:00:{slot:02d}Z"
        large = [sign_event(author, "author_attestation", PITH, "claim:x", at,
                            {"statement": f"{n}{long}"}) for n in range(copies)]  # fmt: skip
        for n in range(1000):  # the applied one, the smallest event id, is short
            small = sign_event(author, "author_attestation", PITH, "claim:x", at,
                               {"statement": f"short {n}"})  # fmt: skip
            if small["event_id"] < min(e["event_id"] for e in large):
                break
        events += [small, *large]
    seen = _making_measured(monkeypatch, "_pith_page")
    with Store.open(tmp_path / "store") as store:
        store.append([created.encode()] + [json.dumps(e).encode() for e in events], keyring)
        state = store.state(PITH)
        assert state is not None and len(json.loads(state)["equivocations"]) == slots
        asked = {**HTML, "accept-encoding": "identity"}
        with _client(store) as client:
            client.get("/pith/" + PITH, headers=asked)  # the templates compiled
            page = client.get("/pith/" + PITH, headers=asked)
    assert page.status_code == 200
    twinned = page.text[page.text.index('id="equivocations"'):page.text.index('id="invalid"')]
    assert twinned.count('<span class="badge warn">not applied</span>') == slots * copies
    assert twinned.count(long) == 1  # one laid out in full, the others links
    assert twinned.count("as many characters as it shows in full") == slots * copies - 1
    held, _, took, _ = seen[-1]
    stored = slots * copies * len(long)
    assert took < stored // 4, (took, stored)
    assert held >= took, (held, took)
