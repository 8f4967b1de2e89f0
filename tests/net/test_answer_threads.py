"""Large answers (copies read and compressed) run in threads of their own, and take their
room before they are compressed, so that a flood of them leaves ``/checkpoint``, the tiles
and the commits of submissions answering (docs/network.md, limits), against a real
uvicorn on 127.0.0.1."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import jinja2
import pytest
from served import in_thread
from slow_clients import answer, asked, until

from pithlog import Store, load_keyring, sign_event
from pithlog.net import encoding
from pithlog.net.app import create_app
from pithlog.net.body_bytes import AnswerRoom
from pithlog.net.page_layout import PAGE_MAKING, PAGE_SHOWN, making
from pithlog.net.pages import page_routes
from pithlog.net.served_log import ServeConfig
from pithlog.parallel.cores import ENV
from pithlog.testing import test_key, test_keyring_entries

CASES = Path(__file__).resolve().parents[2] / "vectors" / "cases"
SEED = (CASES / "seed-2411.00284" / "events.jsonl").read_text().splitlines()
PITH = json.loads(SEED[0])["pith_number"]
ORIGIN = "registry.test.invalid/pith"
KEYRING = load_keyring(json.dumps({"keyring_version": "1",
                                   "keys": test_keyring_entries()}).encode())  # fmt: skip
FLOOD = 48
"""Requests for a large copy at once: more than anyio's 40 threads."""
HELD_SECONDS = 120.0
"""How long a flood of large copies or of event pages holds its state (four answers blocked
while made, two waiting for room) until the test has seen the log answer and lets it go: a
bound against a test that never ends, not a time the test expects. At 10 s, the time the
test also gave itself to see that state, the two waiting answers gave up (503) on a loaded
machine before it was seen ("the server never came to the state awaited"), or before the
test let them go (five or four answers of 200, not six)."""


def _snapshot(n: int, edges: int) -> dict[str, object]:
    snapshot = json.loads(SEED[1])["payload"]
    graph = {**snapshot["graph_snapshot"], "edges": [[n, i % 900] for i in range(edges)]}
    payload = {**snapshot, "graph_snapshot": graph}
    return sign_event(test_key("registry"), "graph_snapshot", PITH, "graph",
                      f"2026-08-01T00:00:{n:02d}Z", payload)  # fmt: skip


@pytest.fixture
def blocked(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """Every compression waits until the event is set (at most HELD_SECONDS); one core, so that
    submissions are judged in the commit's thread, and 8 threads for the copies, so that
    those in the room block 4 and the others are read meanwhile."""
    monkeypatch.setenv(ENV, "1")
    monkeypatch.setattr(encoding, "usable_cores", lambda: 8)
    release = threading.Event()
    pack = encoding.pack

    def slow(body: bytes, coding: str) -> bytes:
        release.wait(HELD_SECONDS)
        return pack(body, coding)

    monkeypatch.setattr(encoding, "pack", slow)
    yield release
    release.set()


def _asking(room: AnswerRoom) -> list[int]:
    """The requests that have asked ``room`` for their bytes (the size each asked): once
    all of the flood have, while two wait, each of the others has been refused (503) at
    once, and none can find the room free later, once the test lets the first go."""
    asked_for: list[int] = []
    hold = room.hold

    async def counted(size: int) -> int:
        asked_for.append(size)
        return await hold(size)

    room.hold = counted  # type: ignore[method-assign]
    return asked_for


def _request(path: str) -> bytes:
    return (f"GET {path} HTTP/1.1\r\nHost: x\r\nAccept-Encoding: zstd\r\n"
            "Connection: close\r\n\r\n").encode()  # fmt: skip


def _log_answers(url: str) -> None:
    """``/checkpoint``, a tile and the commit of a submission of one event answer, all
    three within 3 s."""
    began = time.monotonic()
    with httpx.Client(base_url=url, timeout=5) as client:
        assert client.get("/checkpoint").status_code == 200
        assert client.get("/tile/0/000.p/1").status_code == 200
        event = _snapshot(1, 10)
        got = client.post("/submit", content=json.dumps(event).encode() + b"\n")
        assert got.status_code == 200, got.text
        assert json.loads(got.text.splitlines()[0])["status"] == "stored"
    assert time.monotonic() - began < 3.0


def test_a_flood_of_large_copies_leaves_the_log_answering(
    tmp_path: Path, blocked: threading.Event
) -> None:
    """48 requests at once for a copy of 550 KB in zstd each took a thread of anyio's 40
    to compress it (after reading it in another), and /checkpoint, the tiles and the
    commit of a submission of one event waited for a thread behind them all; each held
    its copy while it waited, and learnt that the room for copies was full (503) only
    once compressed. Now copies are read and compressed in threads of their own, and a
    copy takes its room before it is compressed: the rest are 503 at once."""
    store = Store.open(tmp_path / "store")
    large = _snapshot(0, 70_000)
    store.append([*(line.encode() for line in SEED), json.dumps(large).encode()], KEYRING)
    copy = store.event(str(large["event_id"]))
    assert copy is not None and len(copy) > 500_000
    app = create_app(ServeConfig(store, test_key("registry"), ORIGIN, keyring=KEYRING))
    room = AnswerRoom(4 * len(copy), 2, HELD_SECONDS, "busy")  # four copies, two waiting
    app.state.log.copies = room
    asking = _asking(room)
    path = "/copy/" + hashlib.sha256(copy).hexdigest()
    try:
        with in_thread(app) as url:
            address = ("127.0.0.1", int(url.rsplit(":", 1)[1]))
            flood = [asked(address, _request(path), timeout=HELD_SECONDS) for _ in range(FLOOD)]
            # every request of the flood has asked for room: four hold it, two wait
            until(lambda: len(asking) == FLOOD and room.held == room.most
                  and room.waiting == 2, HELD_SECONDS / 2)  # fmt: skip
            _log_answers(url)
            blocked.set()
            statuses = [answer(sock)[0] for sock in flood]
            # the requests past the room and its waiters were refused before compressing
            assert statuses.count(200) == 6 and statuses.count(503) == FLOOD - 6
            until(lambda: room.held == 0, HELD_SECONDS / 2)
    finally:
        store.close()


def test_head_of_a_large_answer_compresses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A HEAD of a copy, an event or a state of 550 KB compressed it, and a HEAD of a bundle of
    copies read and compressed the whole bundle, only to drop the bytes. Now a HEAD has
    the GET's headers, without the Content-Length that only the compression would tell,
    and nothing is compressed."""
    store = Store.open(tmp_path / "store")
    events = [_snapshot(n, 70_000) for n in range(3)]
    store.append([*(line.encode() for line in SEED),
                  *(json.dumps(event).encode() for event in events)], KEYRING)  # fmt: skip
    copy = store.event(str(events[0]["event_id"]))
    state = store.lookup(PITH)
    assert copy is not None and isinstance(state, bytes) and len(state) > 500_000
    size = store.tree_size()
    packed: list[int] = []
    pack, stream = encoding.pack, encoding._stream_packer
    monkeypatch.setattr(encoding, "pack", lambda b, c: packed.append(len(b)) or pack(b, c))
    monkeypatch.setattr(encoding, "_stream_packer",
                        lambda c: packed.append(0) or stream(c))  # fmt: skip
    app = create_app(ServeConfig(store, test_key("registry"), ORIGIN))
    paths = ["/copy/" + hashlib.sha256(copy).hexdigest(), f"/event/{events[0]['event_id']}",
             f"/copies/000.p/{size}", f"/state/{PITH}"]  # fmt: skip
    try:
        with in_thread(app) as url, httpx.Client(base_url=url, timeout=10) as client:
            for path in paths:
                for coding in ("zstd", "br", "gzip", "identity"):
                    accept = {"Accept-Encoding": coding}
                    head = client.head(path, headers=accept)
                    assert not packed, (path, coding)
                    got = client.get(path, headers=accept)
                    assert head.status_code == got.status_code == 200
                    assert got.content.startswith(b'{"')  # decoded by httpx
                    # framing: uvicorn sends a HEAD no Transfer-Encoding (RFC 9112 6.1)
                    expected = {k: v for k, v in got.headers.items() if k not in
                                ("content-length", "date", "transfer-encoding")}  # fmt: skip
                    sent = {k: v for k, v in head.headers.items() if k != "date"}
                    if "content-length" in sent:
                        assert sent.pop("content-length") == got.headers["content-length"]
                    assert sent == expected, (path, coding)
                    packed.clear()
    finally:
        store.close()


def test_a_flood_of_event_pages_leaves_the_log_answering(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """48 browsers at once asking for the page of an event of 550 KB (``Accept:
    text/html``) each read its copy and rendered its page in anyio's 40 threads, the copy
    decoded on the event loop meanwhile, with no room taken: against a real server, 400 of
    them for a copy of 960 KB kept a /checkpoint waiting 15 s. Now a page is read and
    rendered in the threads of the large answers, holding the room for copies: the
    requests past the room are a 503 page at once, and the log answers meanwhile."""
    monkeypatch.setenv(ENV, "1")
    monkeypatch.setattr(encoding, "usable_cores", lambda: 8)
    release = threading.Event()
    generate = jinja2.Template.generate

    def slow(self: jinja2.Template, *args: object, **kwargs: object) -> Iterator[str]:
        if self.name == "event.html":  # the 503 pages are rendered at once
            release.wait(HELD_SECONDS)
        return generate(self, *args, **kwargs)

    monkeypatch.setattr(jinja2.Template, "generate", slow)
    store = Store.open(tmp_path / "store")
    large = _snapshot(0, 70_000)
    store.append([*(line.encode() for line in SEED), json.dumps(large).encode()], KEYRING)
    copy = store.event(str(large["event_id"]))
    assert copy is not None and len(copy) > 500_000
    app = create_app(ServeConfig(store, test_key("registry"), ORIGIN, keyring=KEYRING,
                                 extra_routes=page_routes()))  # fmt: skip
    # four pages being made (what making one takes: page_layout.making), two waiting
    # (waiting until the test lets the four go, however slow the machine)
    room = AnswerRoom(4 * making(len(copy), PAGE_MAKING, PAGE_SHOWN), 2, HELD_SECONDS, "busy")
    app.state.log.copies = room
    asking = _asking(room)
    request = (f"GET /event/{large['event_id']} HTTP/1.1\r\nHost: x\r\n"
               "Accept: text/html\r\nConnection: close\r\n\r\n").encode()  # fmt: skip
    try:
        with in_thread(app) as url:
            address = ("127.0.0.1", int(url.rsplit(":", 1)[1]))
            flood = [asked(address, request, timeout=HELD_SECONDS) for _ in range(FLOOD)]
            # every request of the flood has asked for room: four hold it, two wait
            until(lambda: len(asking) == FLOOD and room.held == room.most
                  and room.waiting == 2, HELD_SECONDS / 2)  # fmt: skip
            _log_answers(url)
            release.set()
            answers = [answer(sock) for sock in flood]
            statuses = [status for status, _ in answers]
            assert statuses.count(200) == 6 and statuses.count(503) == FLOOD - 6
            busy = next(body for status, body in answers if status == 503)
            assert busy.startswith(b"<!doctype html>") and b"Busy" in busy
            until(lambda: room.held == 0, HELD_SECONDS / 2)
    finally:
        release.set()
        store.close()
