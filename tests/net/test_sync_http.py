"""``POST /sync`` between real servers: ``pithlog sync --from http://...`` brings two served
stores together, the server holds a hostile client to its limits, and invalid copies
cross only with a proof against a trusted checkpoint."""

from __future__ import annotations

import gzip
import io
import json
import random
import socket
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from serving import ORIGIN, Keys, g, make_keys, serving
from slow_clients import asked, until

from pithlog.cli import main
from pithlog.errors import SyncError
from pithlog.net import sync_http
from pithlog.net import syncmsg as m
from pithlog.net.sync import Limits
from pithlog.net.sync_http import MEDIA, HttpTransport
from pithlog.net.sync_pull import pull
from pithlog.store import Store


def run(argv: list[str]) -> tuple[int, bytes, str]:
    out, err = io.BytesIO(), io.StringIO()
    status = main(argv, stdout=out, stderr=err)
    return status, out.getvalue(), err.getvalue()


def _events() -> list[dict[str, Any]]:
    return g.mixed_events(random.Random(21), piths=8, per_pith=6)


def _store(path: Path, events: list[dict[str, Any]], keep_invalid: bool = False) -> Path:
    with Store.open(path) as store:
        store.append([g.encoded(e) for e in events], g.KEYRING, keep_invalid=keep_invalid)
    return path


def _piths_and_states(path: Path) -> dict[str, Any]:
    with Store.open(path, create=False, readonly=True) as store:
        return {p["pith_number"]: store.state(p["pith_number"]) for p in store.piths()}


@pytest.fixture
def keys(tmp_path: Path) -> Keys:
    return make_keys(tmp_path)


def test_sync_between_two_served_stores(tmp_path: Path, keys: Keys) -> None:
    events = [e for e in _events() if e["signer"]["key_id"] != "test-stranger"]
    rng = random.Random(2)
    a = _store(tmp_path / "a", [e for e in events if rng.random() < 0.6])
    b = _store(tmp_path / "b", [e for e in events if rng.random() < 0.6])
    with serving(a, keys) as sa, serving(b, keys) as sb:
        status, out, err = run(["--store", str(b), "sync", "--from", sa.url, "--keyring",
                                str(keys.keyring)])  # fmt: skip
        assert status == 0, err
        first = json.loads(out)
        assert first["needed"] > 0 and first["remote_copies"] > 0
        # B's server answers from B's grown store: A gets what only B held
        status, out, err = run(["--store", str(a), "sync", "--from", sb.url, "--keyring",
                                str(keys.keyring)])  # fmt: skip
        assert status == 0, err
        assert json.loads(out)["needed"] > 0
        status, out, err = run(["--store", str(a), "sync", "--from", sb.url, "--keyring",
                                str(keys.keyring)])  # fmt: skip
        assert status == 0 and json.loads(out)["needed"] == 0 and json.loads(out)["rounds"] == 1
        assert b"Traceback" not in sa.stderr + sb.stderr
    with Store.open(a, readonly=True) as sa_, Store.open(b, readonly=True) as sb_:
        assert sa_.copy_keys() == sb_.copy_keys()
    assert _piths_and_states(a) == _piths_and_states(b)


def test_invalid_copies_cross_only_with_the_servers_checkpoint(tmp_path: Path,
                                                               keys: Keys) -> None:  # fmt: skip
    a = _store(tmp_path / "a", _events(), keep_invalid=True)
    with serving(a, keys) as sa:
        plain = tmp_path / "plain"
        status, out, _ = run(["--store", str(plain), "sync", "--from", sa.url, "--keyring",
                              str(keys.keyring)])  # fmt: skip
        rejected = json.loads(out)["statuses"]["rejected"]
        assert status == 2 and rejected > 0
        published = tmp_path / "a.cp"
        published.write_bytes(httpx.get(sa.url + "/checkpoint").content)
        mirror = tmp_path / "mirror"
        status, out, err = run(["--store", str(mirror), "sync", "--from", sa.url, "--keyring",
                                str(keys.keyring), "--keep-invalid", "--checkpoint",
                                str(published), "--origin", ORIGIN])  # fmt: skip
        assert status == 0, err
        doc = json.loads(out)
        assert "rejected" not in doc["statuses"] and doc["proven"] == doc["needed"]
    with Store.open(a, readonly=True) as origin, Store.open(mirror, readonly=True) as copy:
        assert copy.tree_root() == origin.tree_root()


def test_the_server_holds_a_client_to_the_limits(tmp_path: Path, keys: Keys) -> None:
    a = _store(tmp_path / "a", _events()[:10])
    with serving(a, keys) as sa:
        url = sa.url + "/sync"
        for body in (b"", b"X", b"R\x05ab", b"G\x02" + b"\0" * 16):
            r = httpx.post(url, content=body, headers={"Content-Type": MEDIA})
            assert r.status_code == 400 and r.json()["error"] == "sync.protocol", body
        # millions of ranges of a few bytes fit in a body: refused past MAX_RANGES
        ranges = [m.Entry(i.to_bytes(3, "big"), m.EXPAND) for i in range(1, 1 << 20)]
        r = httpx.post(url, content=m.encode_reconcile([*ranges, m.Entry(None, m.SKIP)]),
                       timeout=30)
        assert r.status_code == 413 and r.json()["error"] == "sync.limit"
        r = httpx.post(url, content=b"F" + b"\0" * (32 << 20))
        assert r.status_code == 413 and r.json()["error"] == "serve.too_large"
        assert httpx.get(url).status_code == 405
        # an honest message still works after all that
        reply = httpx.post(url, content=m.encode_reconcile([m.Entry(None, m.LIST_ALL)]))
        assert reply.status_code == 200 and reply.headers["x-pithlog-copies"] == "10"
        assert reply.headers["cache-control"] == "no-store"
        assert reply.headers["x-content-type-options"] == "nosniff"
        assert len(m.decode_reconcile(reply.content)[0].items) == 10
        assert b"Traceback" not in sa.stderr


def test_the_client_holds_a_server_to_the_limits(tmp_path: Path, keys: Keys) -> None:
    a = _store(tmp_path / "a", _events())
    with serving(a, keys) as sa, Store.open(tmp_path / "b") as b:
        # a limit smaller than the server's answer: the client refuses it
        with HttpTransport(sa.url, Limits(max_message=200)) as tight:
            with pytest.raises(SyncError, match="an answer of") as caught:
                pull(b, tight, g.KEYRING)
            assert caught.value.code == "sync.limit"
        with HttpTransport(sa.url + "/nothing") as wrong:
            with pytest.raises(SyncError) as caught:
                pull(b, wrong, g.KEYRING)
            assert caught.value.code == "sync.remote" and "serve.not_found" in str(caught.value)
        with HttpTransport("http://127.0.0.1:9") as nobody:
            with pytest.raises(SyncError) as caught:
                pull(b, nobody, g.KEYRING)
            assert caught.value.code == "sync.unreachable"
        assert b.copy_keys() == []


def test_an_error_answer_nested_past_any_reader_is_shown_as_text(tmp_path: Path) -> None:
    """A hostile responder's error body is shown, not parsed into a crash: JSON nested
    deeper than msgspec follows raised RecursionError through ``sync`` before."""
    deep = b"[" * 5000 + b"]" * 5000
    coded = b'{"error":"serve.busy","message":"later"}'
    # the source's words on the terminal: a line break or an escape in them shown escaped
    rude = b'{"error":"serve.busy","message":"later\\n\\u001b[2J' + b"x" * 5000 + b'"}'
    for body, shown in ((deep, "[[[["), (coded, "[serve.busy] later"),
                        (rude, "[serve.busy] later\\u000a\\u001b[2Jxxx"),
                        (b"no\n\x1b]0;owned\x07", "no\\u000a\\u001b]0;owned\\u0007"),
                        (b"", "answered 500: (no body)")):
        client = httpx.Client(transport=httpx.MockTransport(
            lambda request, body=body: httpx.Response(500, content=body)))  # fmt: skip
        with (Store.open(tmp_path / "b") as b, HttpTransport("http://x", client=client) as t,
              pytest.raises(SyncError) as caught):  # fmt: skip
            pull(b, t, g.KEYRING)
        assert caught.value.code == "sync.remote" and "answered 500" in caught.value.message
        assert shown in caught.value.message
        said = caught.value.describe()
        assert "\n" not in said and "\x1b" not in said and len(said) < 600, said


def test_the_server_holds_at_most_max_syncs_requests_at_once(tmp_path: Path) -> None:
    """Each ``POST /sync`` holds its body (up to 32 MiB): a dozen such clients held 438 MB
    of a read-only server. At most MAX_SYNCS are held at once; one more waits for a place,
    and gets ``503 serve.busy`` when none frees in time."""
    import threading
    import time

    from served import in_thread
    from starlette.applications import Starlette
    from starlette.routing import Route

    from pithlog.net import sync_http

    held = threading.Event()
    release = threading.Event()
    inside: list[int] = []

    class Blocked(sync_http.SyncEndpoint):
        def responder(self, store: Store) -> Any:  # a request that has a place, stopped
            inside.append(1)
            if len(inside) == sync_http.MAX_SYNCS:
                held.set()
            release.wait(30)
            return super().responder(store)

    store = Store.open(_store(tmp_path / "a", _events()), readonly=True)
    endpoint = Blocked(store_of=lambda request: store, body_seconds=1.0)
    app = Starlette(routes=[Route("/sync", endpoint.handle, methods=["POST"])])
    message = m.encode_reconcile([m.Entry(None, m.LIST_ALL)])
    answers: list[int] = []
    try:
        with in_thread(app) as url:
            def post() -> None:
                answers.append(httpx.post(url + "/sync", content=message, timeout=30).status_code)

            first = [threading.Thread(target=post) for _ in range(sync_http.MAX_SYNCS)]
            for thread in first:
                thread.start()
            assert held.wait(30)
            one_more = httpx.post(url + "/sync", content=message, timeout=30)
            assert one_more.status_code == 503 and one_more.json()["error"] == "serve.busy"
            # a body declared over the limit is 413 at once, not 503 after the wait
            too_large = httpx.post(url + "/sync", content=b"x" * (32 << 20) + b"x", timeout=30)
            assert too_large.status_code == 413 and too_large.json()["error"] == "serve.too_large"
            assert len(inside) == sync_http.MAX_SYNCS  # it never got a place
            release.set()
            for thread in first:
                thread.join(30)
            assert answers == [200] * sync_http.MAX_SYNCS
            assert httpx.post(url + "/sync", content=message).status_code == 200  # places freed
        # the same endpoint served again, on another event loop: its places are that loop's
        # (an asyncio semaphore binds to the loop it first waited on: 500s before)
        held.clear()
        release.clear()
        inside.clear()
        answers.clear()
        with in_thread(app) as url:
            again = [threading.Thread(target=post) for _ in range(sync_http.MAX_SYNCS + 1)]
            for thread in again:
                thread.start()
            assert held.wait(30)
            time.sleep(0.3)  # the one more waits for a place now
            release.set()
            for thread in again:
                thread.join(30)
            assert sorted(answers) == [200] * (sync_http.MAX_SYNCS + 1)
    finally:
        release.set()
        store.close()


def _raw(address: tuple[str, int], head_and_body: bytes) -> socket.socket:
    sock = socket.create_connection(address, timeout=20)
    sock.sendall(head_and_body)
    return sock


def _answered(sock: socket.socket) -> tuple[int, bytes]:
    answer = b""
    while chunk := sock.recv(65536):
        answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body


def test_slow_senders_hold_no_place_of_a_whole_message(tmp_path: Path, keys: Keys) -> None:
    """A place is taken once the body is whole: MAX_SYNCS slow senders, a head and a byte
    each, kept every other sync waiting their 30 s before; the honest one is answered while
    they still send."""
    a = _store(tmp_path / "a", _events()[:10])
    with serving(a, keys) as sa:
        slow = [_raw(sa.address, b"POST /sync HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                     b"Content-Length: 1000\r\n\r\nR") for _ in range(sync_http.MAX_SYNCS)]
        try:
            time.sleep(0.3)
            reply = httpx.post(sa.url + "/sync", timeout=60,
                               content=m.encode_reconcile([m.Entry(None, m.LIST_ALL)]))
            assert reply.status_code == 200 and reply.headers["x-pithlog-copies"] == "10"
            for sock in slow:  # none answered: still sending
                sock.setblocking(False)
                with pytest.raises(BlockingIOError):
                    sock.recv(1)
        finally:
            for sock in slow:
                sock.close()
        assert b"Traceback" not in sa.stderr


def test_the_bodies_held_are_bounded_by_their_bytes(tmp_path: Path) -> None:
    """MAX_SYNCS messages' bytes at most: slow senders that sent nearly that many leave no
    room for a whole message's bytes, which gets ``503 serve.busy`` when its time passes
    first (the slow senders ``408 serve.timeout`` at theirs)."""
    from served import in_thread
    from starlette.applications import Starlette
    from starlette.routing import Route

    store = Store.open(_store(tmp_path / "a", _events()), readonly=True)
    endpoint = sync_http.SyncEndpoint(Limits(max_message=1000), lambda request: store, 1.0)
    app = Starlette(routes=[Route("/sync", endpoint.handle, methods=["POST"])])
    # 19 bytes, where the slow senders leave 4
    message = m.encode_reconcile([m.Entry(None, m.FINGERPRINT_MODE, b"\0" * 16)])
    head = b"POST /sync HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: %d\r\n\r\n"
    try:
        with in_thread(app) as url:
            address = ("127.0.0.1", int(url.rsplit(":", 1)[1]))
            honest = _raw(address, head % len(message))
            time.sleep(0.2)
            slow = [_raw(address, head % 1000 + b"R" * 999)
                    for _ in range(sync_http.MAX_SYNCS)]  # fmt: skip
            time.sleep(0.3)
            honest.sendall(message)
            status, body = _answered(honest)
            assert (status, json.loads(body)["error"]) == (503, "serve.busy")
            for sock in slow:
                status, body = _answered(sock)
                assert (status, json.loads(body)["error"]) == (408, "serve.timeout")
            for sock in (honest, *slow):
                sock.close()
            assert endpoint._bodies.held == 0  # every byte given back
            assert httpx.post(url + "/sync", content=message).status_code == 200
    finally:
        store.close()


def _copies_of_a_mebibyte(max_message: int, wait: float) -> tuple[Any, Any, list[bytes]]:
    """A ``POST /sync`` endpoint (messages of at most ``max_message`` bytes, ``wait``
    seconds for room) over 39 items whose every copy is 1 MiB, in an app of its own:
    ``(endpoint, app, items)``."""
    from starlette.applications import Starlette
    from starlette.routing import Route

    from pithlog.net.sync import Responder

    items = sorted(bytes([i]) * m.ITEM for i in range(1, 40))
    blob = b"x" * (1 << 20)

    class Big(sync_http.SyncEndpoint):
        def responder(self, store: Store) -> Any:
            return Responder(items, list, lambda keys: [blob] * len(keys),
                             limits=self.limits)  # fmt: skip

    endpoint = Big(Limits(max_message=max_message), lambda request: None,  # type: ignore[arg-type, return-value]
                   wait)  # fmt: skip
    app = Starlette(routes=[Route("/sync", endpoint.handle, methods=["POST"])])
    return endpoint, app, items


def test_the_answers_not_yet_read_are_bounded_by_their_bytes() -> None:
    """An answer is held until its client reads it: clients that send a few bytes and read
    nothing made the server hold an answer each (100 orders for a store's 4 MB of copies:
    430 MB). The answers being sent take MAX_SYNCS messages' bytes at most; one more gets
    ``503 serve.busy`` when no room frees in time, and a client gone gives its room back."""
    from served import in_thread

    # answers of 15 MiB, 4 of them in the room
    endpoint, app, items = _copies_of_a_mebibyte(16 << 20, 1.0)
    message = m.encode_shorts(b"G", [m.short_id(i) for i in items])
    head = b"POST /sync HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: %d\r\n\r\n"
    unread: list[socket.socket] = []
    with in_thread(app) as url:
        address = ("127.0.0.1", int(url.rsplit(":", 1)[1]))
        try:
            for _ in range(sync_http.MAX_SYNCS):
                sock = socket.socket()
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                sock.connect(address)
                sock.sendall(head % len(message) + message)
                unread.append(sock)
            deadline = time.monotonic() + 20
            while endpoint.answers.held < sync_http.MAX_SYNCS * 15 << 20:
                assert time.monotonic() < deadline, endpoint.answers.held
                time.sleep(0.05)
            status, body = _answered(_raw(address, head % len(message) + message))
            assert (status, json.loads(body)["error"]) == (503, "serve.busy")
            assert endpoint.answers.held <= sync_http.MAX_SYNCS * endpoint.limits.max_message
        finally:
            for sock in unread:
                sock.close()
        deadline = time.monotonic() + 20
        while endpoint.answers.held:  # the clients gone, their room given back
            assert time.monotonic() < deadline, endpoint.answers.held
            time.sleep(0.05)
        reply = httpx.post(url + "/sync", content=message, timeout=30)
        assert reply.status_code == 200 and len(reply.content) > 15 << 20


@pytest.mark.parametrize("url", ["http://a:b:c", "http://[::1", "http://a\x01b", "http://a..b",
                                 "http://xn--zz"])
def test_a_url_that_cannot_be_used_is_a_one_line_error(tmp_path: Path, url: str) -> None:
    """httpx refuses such a URL with InvalidURL, and the resolver with UnicodeError (IDNA),
    neither an httpx.HTTPError: sync ended in a traceback."""
    keys = make_keys(tmp_path)
    status, _, err = run(["--store", str(tmp_path / "b"), "sync", "--from", url, "--keyring",
                          str(keys.keyring)])  # fmt: skip
    assert status == 2 and "[sync.unreachable]" in err and "Traceback" not in err, err
    assert not (tmp_path / "b").exists()


def test_a_url_that_does_not_answer_leaves_no_store(tmp_path: Path, keys: Keys) -> None:
    status, _, err = run(["--store", str(tmp_path / "b"), "sync", "--from",
                          "http://127.0.0.1:9", "--keyring", str(keys.keyring)])  # fmt: skip
    assert status == 2 and "[sync.unreachable]" in err
    assert not (tmp_path / "b").exists()


def test_a_url_that_answers_but_not_as_a_sync_source_leaves_no_store(tmp_path: Path) -> None:
    """A web server that answers any POST with 200 and a page: the store is made only once
    the source answered as one."""
    client = httpx.Client(transport=httpx.MockTransport(
        lambda request: httpx.Response(200, content=b"<html>hello</html>")))  # fmt: skip
    with HttpTransport("http://x", client=client) as t, pytest.raises(SyncError) as caught:
        t.reach()
    assert caught.value.code == "sync.protocol"


def test_an_answer_whose_head_drips_is_cut_off_at_its_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A sync source's answer has one deadline from the request on, its head included: a
    head that comes a line at a time (httpx waits 120 s for each read, h11 for 100 KiB of
    head) is cut off there (here 1 s) with sync.unreachable."""
    import time

    from served import slow_head

    from pithlog.net import encoding

    monkeypatch.setattr(encoding, "ANSWER_GRACE", 1.0)
    monkeypatch.setattr(encoding, "SLOWEST_RATE", 1 << 40)  # the cap adds no time
    with slow_head() as url, HttpTransport(url) as slow:
        started = time.monotonic()
        with pytest.raises(SyncError) as caught:
            slow.request(b"{}")
        took = time.monotonic() - started
    assert caught.value.code == "sync.unreachable" and took < 10
    assert "an answer that took over 1 s" in caught.value.message


def test_a_source_slow_in_every_answer_is_cut_off_at_max_time(tmp_path: Path, keys: Keys) -> None:
    """Each answer has its deadline (about 2 minutes), and a source that sends each one a
    byte at a time, always in time, held a sync for as long as it liked: a fetch may be
    answered one copy at a time. ``--max-time`` bounds the whole sync (default an hour),
    cutting off an answer in flight; what was committed stays stored."""
    import asyncio
    import time

    from served import in_thread

    from pithlog.net.sources import store_responder

    done = False
    with Store.open(_store(tmp_path / "a", _events()), readonly=True) as source:
        responder = store_responder(source, Limits())

        async def app(scope: Any, receive: Any, send: Any) -> None:
            body = b""
            while True:
                message = await receive()
                body += message.get("body", b"")
                if not message.get("more_body"):
                    break
            reply = responder.handle(body)
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", MEDIA.encode()),
                                    (b"content-length", b"%d" % len(reply))]})  # fmt: skip
            for i in range(len(reply)):  # a byte each 20 ms: in time for any read
                if done:
                    return
                await asyncio.sleep(0.02)
                await send({"type": "http.response.body", "body": reply[i : i + 1],
                            "more_body": i + 1 < len(reply)})  # fmt: skip

        with in_thread(app) as url:
            argv = ["--store", str(tmp_path / "b"), "sync", "--from", url, "--keyring",
                    str(keys.keyring)]  # fmt: skip
            started = time.monotonic()
            status, out, err = run([*argv, "--max-time", "2"])
            took = time.monotonic() - started
            done = True
    assert status == 2 and out == b"", err
    assert "[sync.timeout]" in err and "took over 2 s (--max-time)" in err, err
    assert "sync: out of time after 0 copies were committed" in err and "Traceback" not in err
    assert 1.5 < took < 10
    # a folder or a file is read at the disk's pace: --max-time bounds a URL only
    status, _, err = run(["--store", str(tmp_path / "c"), "sync", "--from",
                          str(tmp_path / "a"), "--keyring", str(keys.keyring),
                          "--max-time", "2"])  # fmt: skip
    assert status == 2 and "[usage.arguments]" in err and "--max-time" in err


def test_the_copies_are_read_again_after_growth_no_sooner_than_their_share_and_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each request after the log grew read every copy key of the store again (up to four
    at once): a log taking submissions did that for every tiny message anyone sent. The
    snapshot is now made again only after REBUILD_SHARE times its last making has passed,
    by one request at a time; the others answer from the last one."""
    import threading

    events = _events()
    store = Store.open(_store(tmp_path / "a", events[:10]))
    small = store.tree_size()
    made: list[int] = []
    gate = threading.Event()
    slow = threading.Event()
    making = sync_http.store_responder

    def counted(store: Store, limits: Limits | None = None) -> Any:
        made.append(store.tree_size())
        if slow.is_set():
            gate.wait(10)
        time.sleep(0.05)  # a making of 50 ms: the next no sooner than 0.5 s after it
        return making(store, limits)

    monkeypatch.setattr(sync_http, "store_responder", counted)
    endpoint = sync_http.SyncEndpoint()
    try:
        first = endpoint.responder(store)
        assert endpoint.responder(store) is first and made == [small]  # the same size
        store.append([g.encoded(e) for e in events[10:20]], g.KEYRING)
        large = store.tree_size()
        assert large > small
        assert endpoint.responder(store) is first and made == [small]  # grown, too soon
        time.sleep(0.05 * sync_http.REBUILD_SHARE + 0.1)
        slow.set()  # the next making waits for the gate: the others must not wait for it
        answers: list[Any] = []
        maker = threading.Thread(target=lambda: answers.append(endpoint.responder(store)))
        maker.start()
        deadline = time.monotonic() + 10
        while len(made) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert made == [small, large]
        others = [endpoint.responder(store) for _ in range(4)]
        assert all(other is first for other in others) and made == [small, large]
        gate.set()
        maker.join(10)
        (second,) = answers
        assert second is not first and len(second.items) > len(first.items)
        assert endpoint.responder(store) is second and made == [small, large]
    finally:
        gate.set()
        store.close()


def test_a_message_in_a_content_coding_is_415_before_it_is_read(tmp_path: Path,
                                                                keys: Keys) -> None:  # fmt: skip
    """A message sent with a Content-Encoding was read as raw bytes and answered
    ``400 sync.protocol``, as if malformed. It is refused at once, before its body is
    read (a body 1,000 bytes short is answered, not held for the 30 s of its time-out),
    with the codings taken; one said to be ``identity`` is answered."""
    a = _store(tmp_path / "a", _events()[:10])
    message = m.encode_reconcile([m.Entry(None, m.LIST_ALL)])
    with serving(a, keys) as sa:
        for coding in (b"gzip", b"zstd", b"br", b"x-unheard-of", b"identity, gzip"):
            body = gzip.compress(message)
            for short in (0, 1000):
                head = (b"POST /sync HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                        b"Content-Encoding: %s\r\nContent-Length: %d\r\n\r\n"
                        % (coding, len(body) + short))  # fmt: skip
                sock = _raw(sa.address, head + body)
                sock.settimeout(5)
                with sock:
                    status, answer = _answered(sock)
                assert status == 415, (coding, short, answer[:200])
                assert json.loads(answer)["error"] == "serve.unsupported_encoding"
        reply = httpx.post(sa.url + "/sync", content=message, timeout=30,
                           headers={"Content-Encoding": "identity"})  # fmt: skip
        assert reply.status_code == 200 and reply.headers["x-pithlog-copies"] == "10"
        assert b"Traceback" not in sa.stderr


def test_a_small_message_does_not_wait_for_the_room_of_large_answers() -> None:
    """An answer waited for its bytes holding one of the MAX_SYNCS places: with the room
    held by clients that read nothing, MAX_SYNCS more large answers held every place, and
    a reconcile message, whose answer of a few bytes takes no room, waited until their
    time was up and got 503 (30 s by default; here 6 s). It is answered at once; a large
    answer past those waiting for bytes is ``503 serve.busy`` at once."""
    from served import in_thread

    # answers of 3 MiB, 5 of them in the room
    endpoint, app, items = _copies_of_a_mebibyte(4 << 20, 6.0)
    fetch = m.encode_shorts(b"G", [m.short_id(i) for i in items])
    small = m.encode_reconcile([m.Entry(m.INFINITY, m.SKIP)])
    head = b"POST /sync HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: %d\r\n\r\n"

    large = head % len(fetch) + fetch

    socks: list[socket.socket] = []
    with in_thread(app) as url:
        address = ("127.0.0.1", int(url.rsplit(":", 1)[1]))
        try:
            socks += [asked(address, large, unread=True, timeout=20) for _ in range(5)]
            until(lambda: endpoint.answers.held > 5 * 3 << 20)
            socks += [asked(address, large, unread=True, timeout=20)
                      for _ in range(sync_http.MAX_SYNCS)]  # fmt: skip
            until(lambda: endpoint.answers.waiting == sync_http.MAX_SYNCS)
            began = time.monotonic()
            status, body = _answered(_raw(address, head % len(small) + small))
            assert status == 200 and m.decode_reconcile(body, m.BRANCHES)
            assert time.monotonic() - began < 2.0
            status, body = _answered(_raw(address, head % len(fetch) + fetch))
            assert (status, json.loads(body)["error"]) == (503, "serve.busy")
            assert time.monotonic() - began < 2.0
        finally:
            for sock in socks:
                sock.close()
        until(lambda: endpoint.answers.held == 0)  # the clients gone, their room given back
        reply = httpx.post(url + "/sync", content=fetch, timeout=30)
        assert reply.status_code == 200 and len(reply.content) > 3 << 20
