"""A record's page reads what it shows of a state, not the whole document (docs/pages.md
"Cost"; pithlog/net/page_state.py)."""

from __future__ import annotations

import json
import random
import tracemalloc
import warnings
from pathlib import Path
from typing import Any

import msgspec
import pytest

with warnings.catch_warnings():  # Starlette would have httpx2; httpx is what pithlog uses
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from pithlog import Store, __version__, load_keyring, sign_event
from pithlog.net.app import create_app
from pithlog.net.page_layout import MOST_LISTED, Layout, _values
from pithlog.net.page_state import raw_values, title_of
from pithlog.net.pages import Pages, page_routes
from pithlog.net.served_log import ServeConfig
from pithlog.testing import test_key, test_keyring_entries

CASES = Path(__file__).resolve().parents[2] / "vectors" / "cases"
SEED = (CASES / "seed-2411.00284" / "events.jsonl").read_text().splitlines()
PITH = json.loads(SEED[0])["pith_number"]
ORIGIN = "registry.test.invalid/pith"
HTML = {"accept": "text/html"}


def test_a_record_page_decodes_what_it_shows_not_the_whole_state(tmp_path: Path) -> None:
    """The page decoded the whole state document on every request: a record of 20 graph
    snapshots of 75,000 edges each and 3,000 attestations (a state of 20 MB) took 0.7 s of
    decoding and 250 MB a request, holding the interpreter lock every other request waits
    for, for a page that lays out none of the snapshots (each is past MOST_LAID_OUT) and
    200 of the attestations. It reads the lists as raw slices of the document and decodes
    the items it shows, and of them the payloads it lays out: what a page of such a state
    holds at its peak is a small part of the state's bytes, not many times them."""
    registry, author = test_key("registry"), test_key("author")
    keyring = load_keyring(json.dumps({"keyring_version": "1",
                                       "keys": test_keyring_entries()}).encode())  # fmt: skip
    snapshot = json.loads(SEED[1])["payload"]
    lines = [SEED[0].encode()]
    for n in range(4):
        # a graph of small values, as a real one is: each a Python object once decoded
        graph = {**snapshot["graph_snapshot"], "edges": [[n, i % 900] for i in range(80_000)]}
        lines.append(json.dumps(sign_event(registry, "graph_snapshot", PITH, "graph",
                                           f"2026-08-01T00:00:0{n}Z",
                                           {**snapshot, "graph_snapshot": graph})).encode())
    lines += [json.dumps(sign_event(author, "author_attestation", PITH, f"claim:{n}",
                                    "2026-08-02T00:00:00Z", {"statement": f"s{n}"})).encode()
              for n in range(MOST_LISTED + 100)]  # fmt: skip
    with Store.open(tmp_path / "store") as store:
        store.append(lines, keyring)
        state = store.state(PITH)
        assert state is not None and len(state) > 2_500_000
        with TestClient(create_app(ServeConfig(store, test_key("registry"), ORIGIN,
                                               extra_routes=page_routes()))) as client:  # fmt: skip
            served = client.get("/pith/" + PITH, headers=HTML).text
            log = client.app.state.log  # type: ignore[attr-defined]
            pages = Pages()

            def page() -> str:
                return pages.env.get_template("pith.html").render(
                    origin=ORIGIN, version=__version__, root="../", query="", layout=Layout(),
                    **pages._pith_context(log, PITH, state))

            page()  # its templates compiled before the count
            tracemalloc.start()
            try:
                shown = page()
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
    assert served == shown
    assert "<h1>Distributed training" not in shown  # the seed's snapshot has no paper title
    assert '<h2 id="graph_snapshots">Graph snapshots <span class="muted">(4)</span>' in shown
    assert shown.count("too many to lay out here") == 4
    assert f'<span class="muted">({MOST_LISTED + 100})</span>' in shown
    assert f"The first {MOST_LISTED} of {MOST_LISTED + 100};" in shown
    # decoded whole, the state was 10 times its bytes in Python objects
    assert peak < len(state) // 2, (peak, len(state))


def _json_value(rnd: random.Random, depth: int = 0) -> Any:
    """A JSON value whose strings hold what a scan of JSON text could mistake for tokens."""
    kind = rnd.randrange(7 if depth < 5 else 4)
    if kind == 0:
        return rnd.choice(['a"b:', 'x\\"y', "\\", '":{[', "ü€😀", "", "\n\t", "1,2", "null"])
    if kind == 1:
        return rnd.choice([0, -1, 7, 2**53 - 1, -(2**40), 1.5, -2.5e-7, 1e300])
    if kind == 2:
        return rnd.choice([True, False, None])
    if kind == 3:
        return "s" * rnd.randrange(3)
    if kind in (4, 5):
        return [_json_value(rnd, depth + 1) for _ in range(rnd.randrange(5))]
    return {rnd.choice(['k"', "k:", "k{", "\\", "[", "k"]) + str(i): _json_value(rnd, depth + 1)
            for i in range(rnd.randrange(5))}  # fmt: skip


@pytest.mark.parametrize("seed", range(40))
def test_raw_values_counts_what_values_counts_of_the_decoded_value(seed: int) -> None:
    """A payload not decoded is counted from its bytes (``raw_values``) for the page's
    layout bounds: the count, and where it stops, are those of its decoded value, compact
    or spaced, whatever its strings hold."""
    rnd = random.Random(seed)
    payload = [_json_value(rnd) for _ in range(rnd.randrange(1, 30))]
    value = {"payload": payload}
    total = _values(payload, 10**9)
    assert total is not None
    for text in (json.dumps(value, separators=(",", ":")), json.dumps(value, indent=1),
                 json.dumps(value, ensure_ascii=False)):  # fmt: skip
        raw = msgspec.json.decode(text.encode(), type=dict[str, msgspec.Raw])["payload"]
        for most in (0, 1, total - 1, total, total + 1, rnd.randrange(total + 1)):
            assert raw_values(raw, most) == _values(payload, most), (text, most)


def _snapshot(paper: Any) -> msgspec.Raw:
    graph: dict[str, Any] = {"source": {}, "edges": [[1, 2]] * 50}
    if paper is not ...:
        graph["paper"] = paper
    return msgspec.Raw(json.dumps({"event_id": "x", "payload": {"graph_snapshot": graph,
                                                                "verdict_id": None}}).encode())


@pytest.mark.parametrize(("papers", "title"), [
    ([{"title": "A"}, {"title": "B"}], "B"),
    ([{"title": "A"}, ...], "A"),
    ([{"title": "A"}, {"title": ""}], "A"),
    ([{"title": "A"}, {"title": 5}], "A"),
    ([{"title": "A"}, {"title": ["B"]}], "A"),
    ([{"title": "A"}, "B"], "A"),
    ([{"title": "A"}, None], "A"),
    ([{"title": "A"}, {"name": "B"}], "A"),
    ([{"title": 'C"\\ ü'}], 'C"\\ ü'),
    ([{"title": ""}, ...], None),
    ([], None),
])  # fmt: skip
def test_the_title_is_that_of_the_latest_snapshot_that_has_one(
    papers: list[Any], title: str | None
) -> None:
    """The page's title: the latest graph snapshot's ``paper.title`` that is a non-empty
    string, a snapshot of any other paper passed over."""
    assert title_of([_snapshot(p) for p in papers]) == title
