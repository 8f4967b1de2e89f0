"""``POST /submit`` on a real server: the door and checks of ``pithlog append``, the answer
after the commit, every limit (body size, lines, time) refusing a request whole, a slow
sender not holding up other clients, and concurrent submitters and readers with nothing
lost, grouped into few commits."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from served import Files, Server, g, loop_watched, make_files, serving, spawned_children

from pithlog.store import Store

TIMEOUT = httpx.Timeout(30.0)


@pytest.fixture
def files(tmp_path: Path) -> Files:
    return make_files(tmp_path, piths=6, per_pith=4)


@pytest.fixture
def server(files: Files) -> Iterator[Server]:
    with serving(files, "--max-lines", "40", "--max-body", "200000", "--body-timeout", "2",
                 submit=True) as running:  # fmt: skip
        yield running
        assert b"Traceback" not in running.stderr, running.stderr.decode(errors="replace")


def tree_size(server: Server) -> int:
    size: int = httpx.get(server.url + "/healthz", timeout=TIMEOUT).json()["tree_size"]
    return size


def lines(events: list[dict[str, Any]]) -> bytes:
    return b"".join(g.encoded(e) + b"\n" for e in events)


def test_submit_answers_like_append_after_the_commit(server: Server, files: Files) -> None:
    before = tree_size(server)
    new = g.record("2599.00001")
    forged = g.forged(g.record("2599.00002"))
    body = lines([new]) + b"\n" + lines([files.events[0]]) + b"not json\n" + lines([forged])
    got = httpx.post(server.url + "/submit", content=body, timeout=TIMEOUT)
    assert got.status_code == 200 and got.headers["content-type"] == "application/x-ndjson"
    assert got.headers["cache-control"] == "no-store"
    assert got.headers["x-content-type-options"] == "nosniff"
    assert int(got.headers["content-length"]) == len(got.content)
    answer = [json.loads(line) for line in got.content.splitlines()]
    assert [(a["line"], a["status"]) for a in answer] == [
        (1, "stored"), (3, "duplicate"), (4, "refused"), (5, "rejected")]  # fmt: skip
    assert answer[0]["event_id"] == new["event_id"]
    assert answer[3]["reason"] == "bad_signature"
    # answered after the commit: the event is served at once
    assert tree_size(server) == before + 1
    event = httpx.get(f"{server.url}/event/{new['event_id']}", timeout=TIMEOUT)
    assert event.status_code == 200 and event.content == g.encoded(new)


def _raw_post(server: Server, head: bytes, parts: list[bytes], pause: float) -> bytes:
    with socket.create_connection(server.address, timeout=20) as sock:
        sock.sendall(head)
        for part in parts:
            try:
                sock.sendall(part)
            except OSError:  # the server answered and closed before the body ended
                break
            time.sleep(pause)
        out = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
        return out


def _status(answer: bytes) -> tuple[int, dict[str, Any]]:
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), json.loads(body)


def _to_the_end(sock: socket.socket) -> bytes:
    """What the server sends on ``sock`` until it closes the connection."""
    answer = b""
    while chunk := sock.recv(65536):
        answer += chunk
    return answer


def _errors(*socks: socket.socket) -> list[tuple[int, str]]:
    """The status and error code of the one answer on each of ``socks``, in order."""
    return [(status, doc["error"]) for status, doc in map(_status, map(_to_the_end, socks))]


def test_limits_refuse_a_request_whole(server: Server) -> None:
    before = tree_size(server)
    url = server.url + "/submit"
    events = [g.record(f"2599.{i:05d}") for i in range(100, 141)]
    # lines: 41 > 40
    got = httpx.post(url, content=lines(events), timeout=TIMEOUT)
    assert got.status_code == 413 and got.json()["error"] == "serve.too_many_lines"
    # bytes: said by Content-Length, refused before the body is read
    got = httpx.post(url, content=b"x" * 200_001, timeout=TIMEOUT)
    assert got.status_code == 413 and got.json()["error"] == "serve.too_large"

    # bytes: chunked, no Content-Length: counted as they come
    def chunks() -> Iterator[bytes]:
        yield lines(events[:2])
        for _ in range(30):
            yield b" " * 10_000

    got = httpx.post(url, content=chunks(), timeout=TIMEOUT)
    assert got.status_code == 413 and got.json()["error"] == "serve.too_large"
    # time: a body that takes longer than --body-timeout (2 s)
    body = lines(events[:3])
    head = (b"POST /submit HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body))  # fmt: skip
    status, doc = _status(_raw_post(server, head, [body[i : i + 50]
                                                   for i in range(0, len(body), 50)], 0.3))
    assert status == 408 and doc["error"] == "serve.timeout"
    # nothing of the refused requests was stored
    assert tree_size(server) == before
    for event in events:
        got = httpx.get(f"{server.url}/event/{event['event_id']}", timeout=TIMEOUT)
        assert got.status_code == 404


def test_a_client_gone_mid_body_stores_nothing(server: Server) -> None:
    """The connection closed with half its body sent: nothing is stored, the server logs
    no error (the fixture reads its stderr), and the next submission is stored."""
    before = tree_size(server)
    body = lines([g.record("2599.00300")])
    head = (b"POST /submit HTTP/1.1\r\nHost: x\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body))  # fmt: skip
    with socket.create_connection(server.address, timeout=20) as sock:
        sock.sendall(head + body[: len(body) // 2])
    after = lines([g.record("2599.00301")])
    got = httpx.post(server.url + "/submit", content=after, timeout=TIMEOUT)
    assert got.status_code == 200 and b'"status":"stored"' in got.content
    assert tree_size(server) == before + 1


def test_two_content_lengths_are_refused(server: Server) -> None:
    """A request whose head says two lengths (a smuggling attempt: which one ends the
    body?) is refused before the app, and nothing of it is stored."""
    before = tree_size(server)
    body = lines([g.record("2599.00302")])
    for second in (len(body) + 10, len(body)):
        head = (b"POST /submit HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                b"Content-Length: %d\r\nContent-Length: %d\r\n\r\n"
                % (len(body), second))  # fmt: skip
        answer = _raw_post(server, head, [body], 0)
        assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]
    assert tree_size(server) == before


def test_a_slow_sender_does_not_hold_up_other_clients(server: Server) -> None:
    body = lines([g.record("2599.00200")])
    head = (b"POST /submit HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body))  # fmt: skip
    with socket.create_connection(server.address, timeout=20) as sock:
        sock.sendall(head + body[:10])  # and then nothing for a while
        with httpx.Client(base_url=server.url, timeout=TIMEOUT) as client:
            for path in ("/checkpoint", "/tile/0/000.p/1", "/healthz"):
                assert client.get(path).status_code == 200
        # the slow request is still open (its 2 s are not over): the reads did not wait
        # for it, and it completes
        sock.sendall(body[10:])
        answer = _to_the_end(sock)
    status, _ = _status(answer.split(b"\r\n\r\n", 1)[0] + b"\r\n\r\n{}")
    assert status == 200 and b'"status":"stored"' in answer


def test_concurrent_submitters_and_readers_lose_nothing(server: Server, files: Files) -> None:
    """32 clients each submit one event while 32 others read the checkpoint and tiles:
    every event is stored and answered, the tree grows by exactly 32, and the 32 requests
    share far fewer than 32 commits (group commit)."""
    before = tree_size(server)
    events = [g.record(f"2599.{i:05d}") for i in range(300, 332)]

    async def run() -> tuple[list[httpx.Response], list[httpx.Response]]:
        limits = httpx.Limits(max_connections=64)
        async with httpx.AsyncClient(base_url=server.url, timeout=TIMEOUT,
                                     limits=limits) as client:  # fmt: skip
            submits = [client.post("/submit", content=lines([e])) for e in events]
            reads = [client.get("/checkpoint" if i % 2 else "/tile/0/000.p/1")
                     for i in range(32)]  # fmt: skip
            done = await asyncio.gather(*submits, *reads)
        return list(done[:32]), list(done[32:])

    submitted, read = asyncio.run(run())
    assert all(r.status_code == 200 for r in read)
    for event, response in zip(events, submitted, strict=True):
        assert response.status_code == 200
        answer = json.loads(response.content)
        assert (answer["event_id"], answer["status"]) == (event["event_id"], "stored")
    assert tree_size(server) == before + 32
    stats = httpx.get(server.url + "/stats", timeout=TIMEOUT).json()
    assert stats["submissions"]["requests"] == 32
    assert stats["submissions"]["commits"] < 16, stats["submissions"]
    with Store.open(files.store, readonly=True) as store:
        for event in events:
            assert store.event(event["event_id"]) == g.encoded(event)


def test_submissions_held_at_once_are_bounded(files: Files) -> None:
    """--max-pending 1: one place for a whole body, and 1 x --max-body bytes of bodies.
    A slow sender holds the bytes it sent and no place: a request over --max-body is
    refused at once, and a whole one of one event is answered (it waited 2 s, the slow
    sender's time-out, when the slow sender held the place from its head on). A body has
    --body-timeout from its request's start (whole 2.8 s after it, it is too late); one
    that finds no room for its bytes within it (the slow senders hold them all) is 503
    serve.busy, as is one whose body is whole but finds no place within it (the place held
    by a submission waiting for its commit)."""
    import threading

    import lmdb

    with serving(files, "--max-pending", "1", "--body-timeout", "2", "--max-body", "100000",
                 submit=True) as server:  # fmt: skip
        url = server.url + "/submit"
        held = socket.create_connection(server.address, timeout=20)  # A: a body never ending
        waiting = socket.create_connection(server.address, timeout=20)
        try:
            held.sendall(b"POST /submit HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                         b"Content-Length: 1000\r\n\r\n{")  # fmt: skip
            time.sleep(0.3)
            too_large = httpx.post(url, content=b"x" * 100_001, timeout=TIMEOUT)
            assert too_large.status_code == 413 and too_large.json()["error"] == "serve.too_large"
            whole = httpx.post(url, content=lines([g.record("2599.00903")]), timeout=TIMEOUT)
            assert whole.status_code == 200
            assert json.loads(whole.content)["status"] == "stored"
            held.setblocking(False)
            with pytest.raises(BlockingIOError):  # both answered while A was still sending
                held.recv(1)
            held.setblocking(True)
            body = lines([g.record("2599.00900")])
            waiting.sendall(b"POST /submit HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                            b"Content-Length: %d\r\n\r\n" % len(body))  # fmt: skip
            time.sleep(2.8)
            with contextlib.suppress(OSError):  # answered (408) and closed already
                waiting.sendall(body)
            assert _errors(held, waiting) == [(408, "serve.timeout"), (408, "serve.timeout")]
        finally:
            held.close()
            waiting.close()
        # a slow sender that sent all but 10 of the 100,000 bytes of bodies held, after
        # the head of a request whose body then comes whole: it finds no room for its
        # bytes, and its 2 s pass before the slow sender's
        body = lines([g.record("2599.00904")])
        with socket.create_connection(server.address, timeout=20) as no_room, \
                socket.create_connection(server.address, timeout=20) as full:  # fmt: skip
            no_room.sendall(b"POST /submit HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                            b"Content-Length: %d\r\n\r\n" % len(body))  # fmt: skip
            time.sleep(0.2)
            full.sendall(b"POST /submit HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                         b"Content-Length: 100000\r\n\r\n" + b" " * 99_990)  # fmt: skip
            time.sleep(0.3)
            no_room.sendall(body)
            assert _errors(no_room, full) == [(503, "serve.busy"), (408, "serve.timeout")]
        # a place held by a submission whose commit waits (the store's writer lock, taken
        # here): the next one finds no place within its 2 s
        env = lmdb.open(str(files.store), max_dbs=64, subdir=True)
        answers: list[httpx.Response] = []
        try:
            txn = env.begin(write=True)
            first = threading.Thread(target=lambda: answers.append(httpx.post(
                url, content=lines([g.record("2599.00901")]), timeout=TIMEOUT)))  # fmt: skip
            first.start()
            time.sleep(0.5)
            busy = httpx.post(url, content=lines([g.record("2599.00902")]), timeout=TIMEOUT)
            assert busy.status_code == 503 and busy.json()["error"] == "serve.busy"
            txn.abort()
            first.join(30)
        finally:
            env.close()
        assert [a.status_code for a in answers] == [200]
        assert [json.loads(x)["status"] for x in answers[0].content.splitlines()] == ["stored"]
        assert b"Traceback" not in server.stderr


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_workers_share_the_cores_for_their_judging_helpers(
    files: Files, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With --workers 2 on 4 cores, each worker judges in at most 2 helpers of its own
    (docs/network.md): the workers share the cores rather than taking 4 each."""
    import random

    monkeypatch.setenv("PITHLOG_CORES", "4")
    fresh = g.mixed_events(random.Random(41), piths=6, per_pith=6)
    with serving(files, "--workers", "2", submit=True) as running:
        for start in range(0, len(fresh), 12):  # a connection each: both workers take some
            answer = httpx.post(running.url + "/submit", content=lines(fresh[start:start + 12]),
                                timeout=TIMEOUT)  # fmt: skip
            assert answer.status_code == 200, answer.text
        workers = spawned_children(running.process.pid)
        helpers = {worker: spawned_children(worker, b"pithlog.cli.judge_helper")
                   for worker in workers}  # fmt: skip
        assert b"Traceback" not in running.stderr
    assert len(workers) == 2
    # a worker starts its helpers with its first submission: 2 where a worker judged
    assert max(len(h) for h in helpers.values()) == 2, helpers


def test_a_large_body_is_split_off_the_event_loop_and_no_further_than_its_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """8 MiB of newlines took 2.2 s to split, on the event loop, every other request of the
    worker waiting: a body of SPLIT_APART_BYTES or more is split in a worker thread, and a
    split stops at the first line past --max-lines."""
    from pithlog.errors import ServeError
    from pithlog.net import submit

    on_loop: list[bool] = []
    split = submit.split_lines
    monkeypatch.setattr(submit, "split_lines", loop_watched(on_loop, split))
    limits = submit.Limits(max_lines=3)
    small, large = b"{}\n" * 3, b"\n" * submit.SPLIT_APART_BYTES + b"{}\n" * 3
    assert [n for n, _ in asyncio.run(submit.lines_of(small, limits))] == [1, 2, 3]
    assert [n for n, _ in asyncio.run(submit.lines_of(large, limits))] == [
        submit.SPLIT_APART_BYTES + i for i in (1, 2, 3)]  # fmt: skip
    assert on_loop == [True, False]
    seen: list[int] = []
    counted = submit.iter_lines

    def counting(stream: Any) -> Iterator[tuple[int, bytes | None]]:
        for item in counted(stream):
            seen.append(item[0])
            yield item

    monkeypatch.setattr(submit, "iter_lines", counting)
    with pytest.raises(ServeError) as refused:
        split(b"{}\n" * 1000, limits)
    assert refused.value.code == "serve.too_many_lines" and len(seen) == 4


@pytest.mark.parametrize("cores", ["1", "2"])
def test_a_rekey_beside_the_server_is_not_undone_by_a_submission(
    files: Files, cores: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server's keyring is fixed at its start. A store brought under another keyring
    beside it (``pithlog rekey``: here a key added), or with a change under way, must not
    be changed back by the next submission, as an append under the old keyring would do
    (a revoked key restored by any stranger's POST): the submission is refused, ``503
    store.keyring_changed``, and nothing is stored. With one core (each commit judges
    its lines itself) and with helpers."""
    from pithlog.protocol.keys import make_keyring
    from pithlog.store import rekey
    from pithlog.testing import TRUSTED, test_keyring_entries

    monkeypatch.setenv("PITHLOG_CORES", cores)
    new = make_keyring(test_keyring_entries((*TRUSTED, "stranger")))
    with serving(files, submit=True) as server:
        first = httpx.post(server.url + "/submit", content=lines([g.record("2599.00950")]),
                           timeout=TIMEOUT)  # fmt: skip
        assert [json.loads(x)["status"] for x in first.content.splitlines()] == ["stored"]
        with Store.open(files.store) as store:  # one piece of the change: under way
            store._write(rekey.piece_work(new, piece_copies=1))
            assert store.stats()["rekey_target"] is not None
        refused = []
        for number, finish in ((951, True), (952, False)):
            event = g.record(f"2599.00{number}")
            answer = httpx.post(server.url + "/submit", content=lines([event]),
                                timeout=TIMEOUT)  # fmt: skip
            refused.append((answer.status_code, answer.json()["error"]))
            with Store.open(files.store) as store:
                assert store.event(event["event_id"]) is None
                if finish:
                    store.rekey(new)
                assert store.keyring_digest() == new.digest
                assert store.stats()["rekey_target"] is None
        assert refused == [(503, "store.keyring_changed")] * 2
        assert b"Traceback" not in server.stderr


def test_whole_bodies_are_not_held_up_by_each_other(files: Files) -> None:
    """--max-pending 1 --max-body 100000: two bodies of 60,000 bytes, sent at once in two
    parts each, the second's first part taking all but 10,000 of the bytes of bodies held.
    Each then waits for room the other holds; both are answered at once, one after the
    other (nobody waited for the --body-timeout of 3 s and got 503 serve.busy)."""
    with serving(files, "--max-pending", "1", "--body-timeout", "3", "--max-body", "100000",
                 submit=True) as server:  # fmt: skip
        bodies = []
        for number in ("2599.02000", "2599.02001"):
            one = lines([g.record(number)])
            bodies.append(one + b"\n" * (60_000 - len(one)))
        head = (b"POST /submit HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                b"Content-Length: 60000\r\n\r\n")  # fmt: skip
        with socket.create_connection(server.address, timeout=20) as a, \
                socket.create_connection(server.address, timeout=20) as b:  # fmt: skip
            started = time.monotonic()
            a.sendall(head + bodies[0][:40_000])
            time.sleep(0.2)
            b.sendall(head + bodies[1][:50_000])
            time.sleep(0.2)
            a.sendall(bodies[0][40_000:])
            time.sleep(0.2)
            b.sendall(bodies[1][50_000:])
            got = []
            for sock in (a, b):
                head_of, _, body = _to_the_end(sock).partition(b"\r\n\r\n")
                doc = json.loads(body)
                got.append((int(head_of.split(b" ")[1]), doc.get("status", doc.get("error"))))
            took = time.monotonic() - started
        assert got == [(200, "stored"), (200, "stored")]
        assert took < 2.5


def test_a_request_still_open_at_shutdown_is_answered_not_a_traceback(files: Files) -> None:
    """SIGTERM while a slow sender is in the middle of its body: uvicorn's graceful
    shutdown ends by cancelling the request after 5 s, which printed an 'Exception in ASGI
    application' traceback (CancelledError) on the server's stderr, one per request open.
    The request is answered 503 serve.stopping instead, and nothing is printed but the
    command's one line (uvicorn's line saying it cancelled the request is left out)."""
    with serving(files, "--body-timeout", "30", submit=True) as server, \
            socket.create_connection(server.address, timeout=20) as slow:  # fmt: skip
        slow.sendall(b"POST /submit HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{")
        time.sleep(0.3)
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(20) in (0, 143, -15)
        answer = _to_the_end(slow)
        assert _status(answer) == (503, {"error": "serve.stopping",
                                         "message": _status(answer)[1]["message"]})
        assert b"Traceback" not in server.stderr, server.stderr.decode()
        assert b"Exception in ASGI application" not in server.stderr
        # nor uvicorn's "ERROR:    Cancel 1 running task(s), timeout graceful shutdown
        # exceeded": the request's answer is the documented one, not a server error
        time.sleep(0.2)  # the drain thread's last read
        assert bytes(server.stderr).splitlines()[1:] == [b"pithlog: terminated"], \
            server.stderr.decode()  # fmt: skip


def test_a_body_of_exactly_max_body_bytes_is_taken_and_one_more_refused(server: Server) -> None:
    """--max-body 200000 is the most a body may hold: a chunked body (no Content-Length,
    counted as it arrives) of exactly that many bytes is taken, one of a byte more is
    413 and stores nothing."""
    before = tree_size(server)
    url = server.url + "/submit"
    for extra, event in ((1, g.record("2599.00310")), (0, g.record("2599.00311"))):
        body = lines([event])
        padded = body + b"\n" * (200_000 + extra - len(body))

        def chunks(padded: bytes = padded) -> Iterator[bytes]:
            for at in range(0, len(padded), 50_000):
                yield padded[at : at + 50_000]

        got = httpx.post(url, content=chunks(), timeout=TIMEOUT)
        if extra:
            assert got.status_code == 413 and got.json()["error"] == "serve.too_large"
            assert tree_size(server) == before
        else:
            assert got.status_code == 200 and b'"status":"stored"' in got.content
            assert tree_size(server) == before + 1


def test_a_client_gone_after_whole_lines_stores_none_of_them(server: Server) -> None:
    """A body cut off by its client after whole event lines is not a shorter request: its
    answer cannot be read, and storing the lines that arrived would store part of what
    the client sent. Nothing of it is stored."""
    before = tree_size(server)
    first, second = g.record("2599.00320"), g.record("2599.00321")
    body = lines([first, second])
    head = (b"POST /submit HTTP/1.1\r\nHost: x\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body))  # fmt: skip
    with socket.create_connection(server.address, timeout=20) as sock:
        sock.sendall(head + lines([first]) + lines([second])[:10])
        time.sleep(0.2)  # the whole line is read before the connection closes
    after = lines([g.record("2599.00322")])
    got = httpx.post(server.url + "/submit", content=after, timeout=TIMEOUT)
    assert got.status_code == 200 and b'"status":"stored"' in got.content
    time.sleep(0.3)  # what the server would do with the lines cut off, it has done
    assert tree_size(server) == before + 1
    got = httpx.get(f"{server.url}/event/{first['event_id']}", timeout=TIMEOUT)
    assert got.status_code == 404


@pytest.mark.parametrize("coding", ["gzip", "zstd", "br", "x-unheard-of", "identity, gzip"])
def test_a_body_in_a_content_coding_is_415_before_it_is_read(server: Server,
                                                             coding: str) -> None:  # fmt: skip
    """A body sent with a Content-Encoding was read as raw bytes, each line of a gzipped
    body refused at the door as if malformed. It is refused whole, at once (the head alone
    is answered, not the body time-out's 408 2 s later), with the codings taken and
    nothing stored; a body said to be ``identity`` is read."""
    before = tree_size(server)
    body = gzip.compress(lines([g.record("2599.00330")]))
    head = (b"POST /submit HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            b"Content-Encoding: %s\r\nContent-Length: %d\r\n\r\n"
            % (coding.encode(), len(body) + 1000))  # fmt: skip
    began = time.monotonic()
    with socket.create_connection(server.address, timeout=20) as sock:
        sock.sendall(head + body)  # 1,000 bytes short: only the head can be answered
        answer = _to_the_end(sock)
    assert time.monotonic() - began < 1.5
    status, doc = _status(answer)
    assert (status, doc["error"]) == (415, "serve.unsupported_encoding"), answer[:300]
    assert b"\r\naccept-encoding: identity\r\n" in answer.partition(b"\r\n\r\n")[0].lower()
    assert tree_size(server) == before
    event = lines([g.record("2599.00331")])
    got = httpx.post(server.url + "/submit", content=event, timeout=TIMEOUT,
                     headers={"Content-Encoding": "identity"})  # fmt: skip
    assert got.status_code == 200 and b'"status":"stored"' in got.content
    assert tree_size(server) == before + 1
