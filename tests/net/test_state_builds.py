"""The state documents a worker builds and sends at once are bounded
(pithlog/net/state_builds.py; docs/network.md, limits)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

from served import in_thread
from slow_clients import answer, asked, get_request, until

from pithlog import Store, load_keyring, sign_event
from pithlog.net.app import create_app
from pithlog.net.pages import page_routes
from pithlog.net.served_log import ServeConfig
from pithlog.net.state_builds import STATE_BUILDS, StateBuilds
from pithlog.testing import test_key, test_keyring_entries

CASES = Path(__file__).resolve().parents[2] / "vectors" / "cases"
SEED = (CASES / "seed-2411.00284" / "events.jsonl").read_text().splitlines()
PITH = json.loads(SEED[0])["pith_number"]
ORIGIN = "registry.test.invalid/pith"
HTML = "Accept: text/html"


def _big_state(path: Path) -> Store:
    """A store whose one state is about 700 KB: three graph snapshots of 30,000 edges."""
    keyring = load_keyring(json.dumps({"keyring_version": "1",
                                       "keys": test_keyring_entries()}).encode())  # fmt: skip
    snapshot = json.loads(SEED[1])["payload"]
    lines = [SEED[0].encode()]
    for n in range(3):
        graph = {**snapshot["graph_snapshot"], "edges": [[n, i % 900] for i in range(30_000)]}
        lines.append(json.dumps(sign_event(test_key("registry"), "graph_snapshot", PITH,
                                           "graph", f"2026-08-01T00:00:0{n}Z",
                                           {**snapshot, "graph_snapshot": graph})).encode())
    store = Store.open(path)
    store.append(lines, keyring)
    return store


def test_at_most_state_builds_states_are_built_at_once(tmp_path: Path) -> None:
    """Building a state of 20 MB took 106 MB at its peak, for /state/ and the record's page
    alike, and as many were built at once as requests came (16 that read nothing grew the
    worker to 1.56 GB, 32 to 2.0 GB). At most STATE_BUILDS are built at once; the others
    wait for a place and are answered once one frees."""
    store = _big_state(tmp_path / "store")
    app = create_app(ServeConfig(store, test_key("registry"), ORIGIN,
                                 extra_routes=page_routes()))  # fmt: skip
    lookup = store.lookup
    gate = threading.Event()
    lock = threading.Lock()
    inside, most = [0], [0]

    def counted(pith: str) -> Any:
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        try:
            gate.wait(30)
            return lookup(pith)
        finally:
            with lock:
                inside[0] -= 1

    store.lookup = counted  # type: ignore[method-assign]
    try:
        with in_thread(app) as url:
            address = ("127.0.0.1", int(url.rsplit(":", 1)[1]))
            socks = [asked(address, get_request(f"/{kind}/{PITH}", HTML))
                     for kind in ("state", "pith") for _ in range(4)]  # fmt: skip
            until(lambda: inside[0] >= STATE_BUILDS)
            time.sleep(0.5)  # a chance for the others to start building, were they let
            assert most[0] == STATE_BUILDS
            gate.set()
            assert [answer(sock)[0] for sock in socks] == [200] * 8
            for sock in socks:
                sock.close()
            assert most[0] == STATE_BUILDS
    finally:
        gate.set()
        store.close()


def test_the_state_answers_not_yet_read_are_bounded_by_their_bytes(tmp_path: Path) -> None:
    """A /state/ answer was handed whole to the connection and held there until its client
    read it. The answers being sent take STATE_BYTES at most; one more is 503 serve.busy
    when no room frees in time, and a client gone gives its room back. (Driven through
    the app's ASGI calls: a socket's kernel buffers take in megabytes that its client does
    not read.)"""
    store = _big_state(tmp_path / "store")
    state = store.state(PITH)
    assert state is not None and len(state) > 500_000
    app = create_app(ServeConfig(store, test_key("registry"), ORIGIN))
    states = StateBuilds(most=2 * (len(state) + 1), wait=1.0)  # room for two answers
    app.state.log.states = states

    def scope() -> dict[str, Any]:
        path = f"/state/{PITH}"
        return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
                "method": "GET", "scheme": "http", "path": path, "raw_path": path.encode(),
                "root_path": "", "query_string": b"", "headers": [(b"host", b"x"),
                (b"accept-encoding", b"identity")], "client": ("127.0.0.1", 1),
                "server": ("127.0.0.1", 80)}  # fmt: skip

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def run() -> None:
        gone = asyncio.Event()
        sent: list[dict[str, Any]] = []

        async def unread(message: dict[str, Any]) -> None:  # a client that reads nothing
            if message["type"] == "http.response.body":
                await gone.wait()

        async def read(message: dict[str, Any]) -> None:
            sent.append(message)

        held = [asyncio.create_task(app(scope(), receive, unread)) for _ in range(2)]
        try:
            full = _until_async(lambda: states.answers.held == states.answers.most)
            await asyncio.wait_for(full, 30)
            await app(scope(), receive, read)
            assert sent[0]["status"] == 503
            assert json.loads(b"".join(m.get("body", b"") for m in sent[1:]))["error"] \
                == "serve.busy"  # fmt: skip
        finally:
            gone.set()  # the clients gone: their room given back
            await asyncio.wait_for(asyncio.gather(*held), 30)
        assert states.answers.held == 0
        sent.clear()
        await app(scope(), receive, read)
        assert sent[0]["status"] == 200
        assert b"".join(m.get("body", b"") for m in sent[1:]) == state + b"\n"

    try:
        asyncio.run(run())
    finally:
        store.close()


async def _until_async(check: Any) -> None:
    while not check():
        await asyncio.sleep(0.02)


def test_a_small_state_does_not_wait_for_the_room_of_large_ones(tmp_path: Path) -> None:
    """A state answer waited for its bytes holding its place to build one: with the bytes
    held by clients that read nothing, two more large states held both places, and a
    state of 3 KB (which takes no bytes) waited until their time was up (27.7 s by
    default; here 6 s). It is answered at once; a large one past those waiting for bytes
    is 503 serve.busy at once."""
    store = _big_state(tmp_path / "store")
    small = [line.encode() for line in
             (CASES / "mixed-piths" / "events.jsonl").read_text().splitlines()]  # fmt: skip
    keyring = load_keyring(json.dumps({"keyring_version": "1",
                                       "keys": test_keyring_entries()}).encode())  # fmt: skip
    store.append(small, keyring, keep_invalid=True)
    other = next(p for p in sorted({json.loads(line)["pith_number"] for line in small})
                 if p != PITH and store.state(p) is not None)  # fmt: skip
    size = len(store.state(PITH) or b"") + 1
    app = create_app(ServeConfig(store, test_key("registry"), ORIGIN))
    states = StateBuilds(most=2 * size, wait=6.0)  # room for two answers
    app.state.log.states = states
    try:
        with in_thread(app) as url:
            address = ("127.0.0.1", int(url.rsplit(":", 1)[1]))
            large = get_request(f"/state/{PITH}")
            unread = [asked(address, large, unread=True) for _ in range(2)]
            until(lambda: states.answers.held == states.answers.most)
            unread += [asked(address, large, unread=True) for _ in range(STATE_BUILDS)]
            until(lambda: states.answers.waiting == STATE_BUILDS)
            began = time.monotonic()
            status, body = answer(asked(address, get_request(f"/state/{other}", HTML)))
            assert status == 200 and json.loads(body)["pith_number"] == other
            assert time.monotonic() - began < 2.0
            status, body = answer(asked(address, get_request(f"/state/{PITH}", HTML)))
            assert (status, json.loads(body)["error"]) == (503, "serve.busy")
            assert time.monotonic() - began < 2.0
            for sock in unread:
                sock.close()
    finally:
        store.close()
