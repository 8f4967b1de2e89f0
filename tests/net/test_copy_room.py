"""The bytes of /copy/ and /event/ answers a worker holds until their clients read them are
bounded (pithlog/net/served_log.py COPY_BYTES; docs/network.md, limits), against a real
uvicorn on 127.0.0.1."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

from served import in_thread
from slow_clients import answer, asked, get_request, until

from pithlog import Store, load_keyring, sign_event
from pithlog.net.app import COPIES_CHUNK_MOST, create_app
from pithlog.net.body_bytes import AnswerRoom
from pithlog.net.served_log import ServeConfig
from pithlog.testing import test_key, test_keyring_entries

CASES = Path(__file__).resolve().parents[2] / "vectors" / "cases"
SEED = (CASES / "seed-2411.00284" / "events.jsonl").read_text().splitlines()
PITH = json.loads(SEED[0])["pith_number"]
ORIGIN = "registry.test.invalid/pith"


def _store(path: Path, large: int = 1) -> tuple[Store, str, bytes]:
    """A store with ``large`` copies of about 550 KB (graph snapshots of 70,000 edges) after
    the seed's events: the store, the first's event id and copy."""
    keyring = load_keyring(json.dumps({"keyring_version": "1",
                                       "keys": test_keyring_entries()}).encode())  # fmt: skip
    snapshot = json.loads(SEED[1])["payload"]
    events = []
    for n in range(large):
        graph = {**snapshot["graph_snapshot"],
                 "edges": [[n, i % 900] for i in range(70_000)]}  # fmt: skip
        events.append(sign_event(test_key("registry"), "graph_snapshot", PITH, "graph",
                                 f"2026-08-01T00:00:0{n}Z",
                                 {**snapshot, "graph_snapshot": graph}))  # fmt: skip
    store = Store.open(path)
    store.append([*(line.encode() for line in SEED),
                  *(json.dumps(event).encode() for event in events)], keyring)  # fmt: skip
    copy = store.event(events[0]["event_id"])
    assert copy is not None and len(copy) > 500_000
    return store, events[0]["event_id"], copy


def test_copies_not_read_are_bounded_by_their_bytes(tmp_path: Path) -> None:
    """A /copy/ or /event/ answer (a copy is up to 1 MiB) was handed whole to the
    connection and held there until its client read it: 300 clients that read nothing of
    a copy of 850 KB grew the worker by 252 MB. The answers take their bytes out of the
    worker's room for copies; past it, a few wait, one more is 503 serve.busy at once, a
    small answer takes none, and a client gone gives its bytes back."""
    store, event_id, copy = _store(tmp_path / "store")
    small = json.loads(SEED[0])["event_id"]
    app = create_app(ServeConfig(store, test_key("registry"), ORIGIN))
    room = AnswerRoom(2 * len(copy), 1, 5.0, "busy")  # room for two copies, one waiting
    app.state.log.copies = room
    by_hash = "/copy/" + hashlib.sha256(copy).hexdigest()
    try:
        with in_thread(app) as url:
            address = ("127.0.0.1", int(url.rsplit(":", 1)[1]))
            unread = [asked(address, get_request(by_hash), unread=True),
                      asked(address, get_request(f"/event/{event_id}"), unread=True)]  # fmt: skip
            until(lambda: room.held == room.most)
            unread.append(asked(address, get_request(by_hash), unread=True))
            until(lambda: room.waiting == 1)
            began = time.monotonic()
            for path in (by_hash, f"/event/{event_id}"):
                status, body = answer(asked(address, get_request(path)))
                assert (status, json.loads(body)["error"]) == (503, "serve.busy")
            status, body = answer(asked(address, get_request(f"/event/{small}")))
            assert status == 200 and json.loads(body)["event_id"] == small
            assert time.monotonic() - began < 2.0
            for sock in unread:
                sock.close()
            until(lambda: room.held == 0)
            assert answer(asked(address, get_request(f"/event/{event_id}"))) == (200, copy)
            until(lambda: room.held == 0)  # given back once the last piece is sent
    finally:
        store.close()


def test_copies_streams_not_read_are_bounded_by_their_bytes(tmp_path: Path) -> None:
    """/copies/ streamed its chunks (a megabyte and a copy each) to the connection as they
    were read, uncounted: each client that read nothing held two of them, and 300 of them
    on a bundle of copies of 550 KB grew the worker by 649 MB. A stream of several chunks
    takes COPIES_CHUNK_MOST out of the room for copies before it starts (a stream of one
    chunk, that chunk's bytes), and past the room is 503 serve.busy before it starts; a
    client gone gives the bytes back."""
    store, _, _ = _store(tmp_path / "store", large=3)
    app = create_app(ServeConfig(store, test_key("registry"), ORIGIN))
    room = AnswerRoom(2 * COPIES_CHUNK_MOST, 1, 5.0, "busy")  # two streams, one waiting
    app.state.log.copies = room
    size = store.tree_size()
    bundle = f"/copies/000.p/{size}"
    seed_only = f"/copies/000.p/{size - 3}"  # a few KB: takes nothing
    try:
        with in_thread(app) as url:
            address = ("127.0.0.1", int(url.rsplit(":", 1)[1]))
            whole = answer(asked(address, get_request(bundle)))
            assert whole[0] == 200 and len(whole[1].splitlines()) == size
            until(lambda: room.held == 0)  # given back once the last piece is sent
            unread = [asked(address, get_request(bundle), unread=True) for _ in range(2)]
            until(lambda: room.held == room.most)
            unread.append(asked(address, get_request(bundle), unread=True))
            until(lambda: room.waiting == 1)
            began = time.monotonic()
            status, body = answer(asked(address, get_request(bundle)))
            assert (status, json.loads(body)["error"]) == (503, "serve.busy")
            status, body = answer(asked(address, get_request(seed_only)))
            assert status == 200 and len(body.splitlines()) == size - 3
            assert time.monotonic() - began < 2.0
            for sock in unread:
                sock.close()
            until(lambda: room.held == 0)
            assert answer(asked(address, get_request(bundle))) == whole
    finally:
        store.close()
