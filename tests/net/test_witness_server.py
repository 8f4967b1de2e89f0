"""A witness, ``pithlog serve --witness`` (uvicorn on 127.0.0.1, a free port):
``checkpoint --witness`` collects its cosignature, the witness's state moves only on a 200,
and a quorum that is not reached prints nothing."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import random
import shlex
import shutil
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from served import g, in_thread, serve_process, slow_head
from starlette.applications import Starlette

from pithlog.cli import main
from pithlog.errors import WitnessError
from pithlog.net import witness_route
from pithlog.protocol.keys import load_keyring, make_keyring
from pithlog.store import Store
from pithlog.testing import test_key, test_keyring_entries, write_key_file
from pithlog.transparency.witness import verify_cosignatures

ORIGIN = "registry.test.invalid/pith"
KEYRING = make_keyring(test_keyring_entries())


def run(argv: list[str]) -> tuple[int, bytes, str]:
    out, err = io.BytesIO(), io.StringIO()
    status = main(argv, stdout=out, stderr=err)
    return status, out.getvalue(), err.getvalue()


@pytest.fixture
def witness(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """``pithlog serve --witness`` (test key "mirror", its state in its own store) as a
    subprocess on 127.0.0.1 and a port the kernel picks, stopped at the end of the test."""
    key = tmp_path / "witness.key"
    write_key_file(key, test_key("mirror"))
    keyring = tmp_path / "witnessed.json"
    keyring.write_text(json.dumps({"keyring_version": "1", "keys": test_keyring_entries()}))
    state = tmp_path / "witness-state"
    with serve_process(state, "--witness", "--key", str(key), "--keyring", str(keyring)) as s:
        yield {"url": s.url, "state": state}


def witnessed(witness: dict[str, Any]) -> tuple[int, bytes] | None:
    """What the witness last cosigned for the log, read from its store beside it."""
    with Store.open(witness["state"], create=False, readonly=True) as store:
        return store.witness_state(ORIGIN)


@pytest.fixture
def log(tmp_path: Path) -> dict[str, Any]:
    events = [e for e in g.mixed_events(random.Random(3), piths=3, per_pith=4)
              if e["signer"]["key_id"] != "test-stranger"]  # fmt: skip
    keyring = tmp_path / "keyring.json"
    keyring.write_text(json.dumps({"keyring_version": "1", "keys": test_keyring_entries()}))
    key = tmp_path / "registry.key"
    write_key_file(key, test_key("registry"))
    halves = []
    for name, part in (("a", events[:6]), ("b", events[6:])):
        path = tmp_path / f"{name}.jsonl"
        path.write_bytes(b"".join(g.encoded(e) + b"\n" for e in part))
        halves.append(str(path))
    return {"keyring": str(keyring), "key": str(key), "halves": halves,
            "store": str(tmp_path / "log")}  # fmt: skip


def checkpoint(log: dict[str, Any], *extra: str) -> tuple[int, bytes, str]:
    return run(["--store", log["store"], "checkpoint", "--key", log["key"], "--origin", ORIGIN,
                "--keyring", log["keyring"], *extra])  # fmt: skip


def append(log: dict[str, Any], path: str) -> None:
    status, _, err = run(["--store", log["store"], "append", "--keyring", log["keyring"], path])
    assert status == 0, err


def test_checkpoint_collects_a_cosignature_and_the_witness_follows_the_log(
    witness: dict[str, Any], log: dict[str, Any]
) -> None:
    append(log, log["halves"][0])
    status, note, err = checkpoint(log, "--witness", witness["url"])
    assert status == 0, err
    cosigned = verify_cosignatures(note, [KEYRING["test-mirror"]])
    assert [c.key_id for c in cosigned] == ["test-mirror"]
    size = int(note.split(b"\n")[1])
    assert witnessed(witness)[0] == size
    # the log grows: the witness answers 409 with its size, the client proves from there
    append(log, log["halves"][1])
    status, note2, err = checkpoint(log, "--witness", witness["url"])
    assert status == 0, err
    assert verify_cosignatures(note2, [KEYRING["test-mirror"]])
    assert witnessed(witness)[0] == int(note2.split(b"\n")[1]) > size
    # a stale old size: 409 with the witness's size, typed exactly as tlog-witness says
    # (MUST be text/x.tlog.size: no charset, which clients that check it refuse)
    answer = httpx.post(witness["url"] + "/add-checkpoint",
                        content=b"old 0\n\n" + note2)  # fmt: skip
    assert answer.status_code == 409 and answer.headers["content-type"] == "text/x.tlog.size"
    assert answer.content == f"{witnessed(witness)[0]}\n".encode()
    # an older checkpoint is never cosigned again: the witness does not roll back
    status, out, err = checkpoint(log, "--witness", witness["url"], "--size", str(size))
    assert status == 1 and out == b"" and "[witness.quorum]" in err
    assert witnessed(witness)[0] > size


def test_a_quorum_not_reached_prints_nothing(
    witness: dict[str, Any], log: dict[str, Any]
) -> None:
    append(log, log["halves"][0])
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))  # bound, never listening: connection refused
    nobody = f"http://127.0.0.1:{dead.getsockname()[1]}"
    status, out, err = checkpoint(log, "--witness", witness["url"], "--witness", nobody)
    dead.close()
    assert status == 1 and out == b"" and "1 witness(es) cosigned, 2 required" in err
    status, out, err = checkpoint(log, "--witness", witness["url"], "--witness", nobody,
                                  "--quorum", "1")  # fmt: skip
    assert status == 0 and verify_cosignatures(out, [KEYRING["test-mirror"]])
    assert f"{nobody} cosigned: nothing" in err


def test_two_urls_of_one_witness_are_one_witness_and_the_quorum_says_why(
    witness: dict[str, Any], log: dict[str, Any]
) -> None:
    """``--witness URL --witness URL/`` (the client asks ``URL/add-checkpoint`` of both)
    made a default quorum of two that the witness's one key could never meet, and the
    ``witness.quorum`` line named no witness that fell short. The two are one witness,
    asked once; two spellings the CLI cannot tell apart are named in the line."""
    append(log, log["halves"][0])
    url = witness["url"]
    status, note, err = checkpoint(log, "--witness", url, "--witness", url + "/")
    assert status == 0, err
    assert [c.key_id for c in verify_cosignatures(note, [KEYRING["test-mirror"]])] == [
        "test-mirror"]  # fmt: skip
    assert err.count("cosigned: test-mirror") == 1
    shouted = url.replace("http://", "HTTP://")
    status, out, err = checkpoint(log, "--witness", url, "--witness", shouted)
    assert status == 1 and out == b""
    assert (f"1 witness(es) cosigned, 2 required ({shouted}: cosigned by test-mirror, a key "
            "an earlier URL's witness cosigned with: one witness)") in err  # fmt: skip


def test_a_served_log_publishes_cosigned_checkpoints_and_a_mirror_requires_them(
    witness: dict[str, Any], log: dict[str, Any], tmp_path: Path
) -> None:
    """serve --witness-url publishes each checkpoint with the witness's cosignature;
    mirror --witness-key refuses a log whose checkpoint lacks it."""
    append(log, log["halves"][0])
    # the witness's URL given twice is one witness: the default quorum is 1, not 2
    cosigning = ["--witness-url", witness["url"], "--witness-url", witness["url"],
                 "--witness-keyring", log["keyring"]]  # fmt: skip
    args = ["--key", log["key"], "--origin", ORIGIN]
    with serve_process(Path(log["store"]), *args, *cosigning) as cosigned, \
            serve_process(Path(log["store"]), *args) as plain:  # fmt: skip
        note = httpx.get(cosigned.url + "/checkpoint", timeout=30).content
        assert [c.key_id for c in verify_cosignatures(note, [KEYRING["test-mirror"]])] == [
            "test-mirror"]
        required = ["--keyring", log["keyring"], "--witness-key", "test-mirror"]
        status, _, err = run(["--store", str(tmp_path / "m1"), "mirror", cosigned.url,
                              *required])  # fmt: skip
        assert status == 0, err
        # a key named twice is one witness, whose one cosignature meets the default quorum
        status, _, err = run(["--store", str(tmp_path / "m3"), "mirror", cosigned.url,
                              *required, "--witness-key", "test-mirror"])  # fmt: skip
        assert status == 0, err
        status, _, err = run(["--store", str(tmp_path / "m2"), "mirror", plain.url, *required])
        assert status == 1 and "[witness.quorum]" in err
        # nothing stored from a log without its witness, not even an empty store
        assert not (tmp_path / "m2").exists()


def test_a_witness_whose_answer_head_drips_is_cut_off_at_its_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A witness's answer has one deadline from the request on, its head included: a head
    that comes a line at a time (httpx waits 10 s for each read, h11 for 100 KiB of head)
    is cut off there (here 1 s), and the witness counts as not having answered."""
    from pithlog.net import encoding
    from pithlog.net.witness_client import collect

    monkeypatch.setattr(encoding, "ANSWER_GRACE", 1.0)
    monkeypatch.setattr(encoding, "SLOWEST_RATE", 1 << 40)  # the cap adds no time
    with slow_head() as url:
        started = time.monotonic()
        with pytest.raises(WitnessError) as caught:
            collect([url], b"note", 1, lambda old: [], [], 1)
        took = time.monotonic() - started
    assert caught.value.code == "witness.quorum" and took < 10
    assert f"{url}: no answer: an answer that took over 1 s" in caught.value.message


@pytest.mark.parametrize("url", ["http://a:b:c", "http://[::1", "http://a..b"])
def test_a_witness_url_that_cannot_be_used_is_no_answer(log: dict[str, Any], url: str) -> None:
    """httpx refuses such a URL with InvalidURL and the resolver with UnicodeError (IDNA),
    neither an httpx.HTTPError: checkpoint --witness ended in a traceback."""
    append(log, log["halves"][0])
    status, _, err = checkpoint(log, "--witness", url)
    assert status != 0 and "Traceback" not in err and "[witness.quorum]" in err, err
    assert "no answer" in err, err


def test_a_body_that_does_not_arrive_in_time_is_408(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the body was read without a deadline: a client that sent part of it held its
    # connection for ever
    monkeypatch.setattr(witness_route, "BODY_SECONDS", 0.5)
    keyring = load_keyring(json.dumps({"keyring_version": "1",
                                       "keys": test_keyring_entries()}).encode())  # fmt: skip
    with Store.open(tmp_path / "state") as store:
        app = Starlette(routes=witness_route.witness_routes(store, keyring, test_key("mirror"),
                                                            lambda: 0.0))  # fmt: skip
        with in_thread(app) as url:
            host, port = url.removeprefix("http://").rsplit(":", 1)
            with socket.create_connection((host, int(port)), timeout=10) as sock:
                sock.sendall(b"POST /add-checkpoint HTTP/1.1\r\nHost: x\r\n"
                             b"Content-Length: 100\r\n\r\nold 0\n")  # fmt: skip
                answer = sock.recv(65536)
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    # every answer of the witness, its plain-text errors too, as every other route's
    head = answer.partition(b"\r\n\r\n")[0].lower()
    assert b"\r\nx-content-type-options: nosniff\r\n" in head, head
    assert b"\r\ncache-control: no-store\r\n" in head, head


@pytest.mark.parametrize("size", [b"9" * 5000, b"1" + b"0" * 19])
def test_a_409_whose_size_is_no_tree_size_is_that_witness_s_problem(size: bytes) -> None:
    """A 409's body is a tree size as a checkpoint writes it: int() of the 5,000 digits a
    hostile witness sent raised ValueError (a traceback for checkpoint --witness, a 500
    for every /checkpoint of serve --witness-url)."""
    from pithlog.net.witness_client import collect

    def conflict(request: httpx.Request) -> httpx.Response:
        return httpx.Response(409, headers={"Content-Type": "text/x.tlog.size"},
                              content=size + b"\n")  # fmt: skip

    with pytest.raises(WitnessError) as caught:
        collect(["http://witness.invalid"], b"note", 5, lambda old: [], [], 1,
                transport=httpx.MockTransport(conflict))  # fmt: skip
    assert caught.value.code == "witness.quorum"
    assert "http://witness.invalid: 409 with size" in caught.value.message


def witness_in_thread(tmp_path: Path) -> Any:
    """``serve --witness``'s app (test key "mirror") served in a thread: its URL."""
    from pithlog.net.server import Settings, witness_app

    key = tmp_path / "witness.key"
    write_key_file(key, test_key("mirror"))
    keyring = tmp_path / "witnessed.json"
    keyring.write_text(json.dumps({"keyring_version": "1", "keys": test_keyring_entries()}))
    return in_thread(witness_app(Settings(store=str(tmp_path / "state"), key=str(key),
                                          origin="", keyring=str(keyring),
                                          witness=True)))  # fmt: skip


def test_a_witness_answers_unknown_paths_methods_and_failures_in_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/network.md: every error pithlog answers is JSON with a stable code. The
    witness's app answered Starlette's plain-text Not Found, Method Not Allowed and
    Internal Server Error."""

    def fails(self: Store, judge: Any) -> Any:
        raise RuntimeError("the disk caught fire")

    monkeypatch.setattr(Store, "witness_add", fails)
    with witness_in_thread(tmp_path) as url:
        body = b"old 0\n\nx\n"
        answers = {
            "serve.not_found": httpx.get(url + "/checkpoint", timeout=10),
            "serve.method": httpx.get(url + "/add-checkpoint", timeout=10),
            "serve.internal": httpx.post(url + "/add-checkpoint", content=body, timeout=10),
        }
        # no 307 to /add-checkpoint: one URL per resource, as the log's
        slash = httpx.post(url + "/add-checkpoint/", content=body, timeout=10)
    for code, answer in [*answers.items(), ("serve.not_found", slash)]:
        assert answer.headers["content-type"] == "application/json", (code, answer.text)
        assert answer.json()["error"] == code
    assert answers["serve.method"].status_code == 405
    assert answers["serve.internal"].status_code == 500
    assert "fire" not in answers["serve.internal"].text


def test_a_log_with_an_origin_longer_than_an_lmdb_key_is_witnessed(tmp_path: Path) -> None:
    """An origin of 600 bytes under the keyring's log key: the witness kept its state under
    ``witness:<origin>``, over LMDB's 511-byte key, and answered every add-checkpoint of
    that log 500 (MDB_BAD_VALSIZE). It is kept under the origin's hash instead."""
    from pithlog.transparency import merkle
    from pithlog.transparency.checkpoint import Checkpoint, sign_checkpoint
    from pithlog.transparency.witness import AddCheckpoint

    origin = ORIGIN + "/" + "a" * 600
    leaves = merkle.subtree_from_leaves([merkle.leaf_hash(bytes([i]) * 64) for i in range(4)])
    note = sign_checkpoint(Checkpoint(origin, 4, merkle.root(4, leaves)), test_key("registry"))
    with witness_in_thread(tmp_path) as url:
        first = httpx.post(url + "/add-checkpoint", timeout=10,
                           content=AddCheckpoint(0, (), note).encoded())  # fmt: skip
        again = httpx.post(url + "/add-checkpoint", timeout=10,
                           content=AddCheckpoint(0, (), note).encoded())  # fmt: skip
    assert first.status_code == 200, first.text
    assert verify_cosignatures(note + first.content, [KEYRING["test-mirror"]])
    assert (again.status_code, again.content) == (409, b"4\n")  # the state was kept
    with Store.open(tmp_path / "state", create=False, readonly=True) as store:
        assert store.witness_state(origin) == (4, merkle.root(4, leaves))
        assert store.witness_state(ORIGIN) is None


def test_a_witness_key_whose_signer_id_is_no_key_name_is_refused(tmp_path: Path) -> None:
    """The signer_id is the cosignatures' key name: with a space in it, the witness started
    and answered every add-checkpoint 500 (cosign refused the key each time)."""
    from pithlog.errors import UsageError
    from pithlog.net.server import Settings, witness_app
    from pithlog.protocol.keys import SigningKey

    key = tmp_path / "witness.key"
    write_key_file(key, SigningKey.generate("w1", "my witness", "mirror"))
    keyring = tmp_path / "witnessed.json"
    keyring.write_text(json.dumps({"keyring_version": "1", "keys": test_keyring_entries()}))
    with pytest.raises(UsageError) as refused:
        witness_app(Settings(store=str(tmp_path / "state"), key=str(key), origin="",
                             keyring=str(keyring), witness=True))  # fmt: skip
    assert "'my witness' is not a signed-note key name" in refused.value.message


@pytest.mark.parametrize(("signer", "said"), [("author", "is an author key"),
                                               ("indexer", "is a citation_indexer key")])
def test_a_witness_key_of_another_signer_type_is_refused(
    tmp_path: Path, signer: str, said: str
) -> None:
    from pithlog.errors import UsageError
    from pithlog.net.server import Settings, witness_app

    key = tmp_path / "witness.key"
    write_key_file(key, test_key(signer))
    with pytest.raises(UsageError) as refused:
        witness_app(Settings(store=str(tmp_path / "state"), key=str(key), origin="",
                             keyring=str(key), witness=True))  # fmt: skip
    assert said in refused.value.message
    assert "a witness cosigns with a mirror or pith_registry key" in refused.value.message


def test_a_path_or_method_the_witness_does_not_serve_is_a_json_error(
    witness: dict[str, Any],
) -> None:
    """Against a real witness process: a path or method it does not serve is the JSON error
    of serve, and a method no path takes is 501 (RFC 9110 15.6.2), not a 405 naming the
    path's methods."""
    for method, path, status, code, allow in (
        ("GET", "/nothing", 404, "serve.not_found", None),
        ("GET", "/add-checkpoint", 405, "serve.method", {"POST"}),
        ("POST", "/healthz", 405, "serve.method", {"GET", "HEAD"}),
        ("DELETE", "/add-checkpoint", 501, "serve.not_implemented", None),
    ):
        got = httpx.request(method, witness["url"] + path, timeout=20)
        assert got.status_code == status and got.headers["content-type"] == "application/json"
        assert got.json()["error"] == code and got.headers["cache-control"] == "no-store"
        if allow is not None:
            assert {m.strip() for m in got.headers["allow"].split(",")} == allow


def test_the_witness_s_healthz_carries_the_headers_of_every_answer(
    witness: dict[str, Any],
) -> None:
    """network.md: every answer carries ``nosniff``, and ``/healthz`` is ``no-store``. The
    witness's ``/healthz`` had neither (a cache could hold a witness's "ok" after it died)."""
    for method in ("GET", "HEAD"):
        got = httpx.request(method, witness["url"] + "/healthz", timeout=20)
        assert got.status_code == 200 and got.headers["cache-control"] == "no-store"
        assert got.headers["x-content-type-options"] == "nosniff"
        assert got.headers["content-type"] == "text/plain; charset=utf-8"
        assert got.content == (b"ok\n" if method == "GET" else b"")


def test_a_worker_that_a_witness_finds_behind_signs_its_newer_tree(tmp_path: Path) -> None:
    """The workers of ``serve --workers N --witness-url`` each ask the witnesses for the
    tree they read: when another worker had the witness cosign a larger tree between this
    worker's read and its request, the witness answers 409 with that size. That is no
    split view: the worker reads its tree again (it has grown at least as far), signs it
    and asks again. It failed instead, and served its older checkpoint for
    COSIGN_RETRY_SECONDS while the other worker served the newer one: clients on two
    connections saw the log go back."""
    import asyncio

    from pithlog.net.served_log import Log, ServeConfig
    from pithlog.net.witness_client import collect
    from pithlog.transparency.checkpoint import Checkpoint, sign_checkpoint

    events = [e for e in g.mixed_events(random.Random(3), piths=3, per_pith=4)
              if e["signer"]["key_id"] != "test-stranger"]  # fmt: skip
    key = test_key("registry")
    witnesses = [KEYRING["test-mirror"]]
    with witness_in_thread(tmp_path) as url, Store.open(tmp_path / "log") as store:
        store.append([g.encoded(e) for e in events[:6]], KEYRING)

        def ask(note: bytes, size: int) -> bytes:
            def proof_from(old: int) -> list[bytes]:
                return store.consistency_path(old, size)[1]

            return collect([url], note, size, proof_from, witnesses, 1)[0]

        asked: list[int] = []

        def another_worker_first(note: bytes, size: int) -> bytes:
            if not asked:
                # between this worker's read of the tree and its request, the log grows
                # and another worker has the witness cosign the larger tree
                store.append([g.encoded(e) for e in events[6:]], KEYRING)
                grown, root = store.tree_root()
                ask(sign_checkpoint(Checkpoint(ORIGIN, grown, root), key), grown)
            asked.append(size)
            return ask(note, size)

        behind = Log(ServeConfig(store, key, ORIGIN, cosign=another_worker_first))
        published = asyncio.run(behind.checkpoint())
        assert published.size == store.tree_size() == asked[-1] > asked[0]
        assert verify_cosignatures(published.note, witnesses)


def test_a_witness_that_another_worker_moves_between_two_requests_is_asked_again(
    tmp_path: Path,
) -> None:
    """A 409 names the witness's size; when another worker has the witness cosign a larger
    tree (still no larger than this one) before the request that proves from that size, the
    witness answers 409 again with the new size. The client asked twice and gave up ("the
    witness moved while it was asked"); it proves from the new size instead."""
    from pithlog.net.witness_client import collect
    from pithlog.transparency.checkpoint import Checkpoint, sign_checkpoint

    events = [e for e in g.mixed_events(random.Random(3), piths=3, per_pith=4)
              if e["signer"]["key_id"] != "test-stranger"]  # fmt: skip
    key = test_key("registry")
    witnesses = [KEYRING["test-mirror"]]
    with witness_in_thread(tmp_path) as url, Store.open(tmp_path / "log") as store:
        sizes = []
        for part in (events[:4], events[4:8], events[8:]):
            store.append([g.encoded(e) for e in part], KEYRING)
            sizes.append(store.tree_size())

        def note_of(size: int) -> bytes:
            return sign_checkpoint(Checkpoint(ORIGIN, size, store.tree_root(size)[1]), key)

        def ask(size: int, transport: httpx.BaseTransport | None = None) -> bytes:
            def proof_from(old: int) -> list[bytes]:
                return store.consistency_path(old, size)[1]

            return collect([url], note_of(size), size, proof_from, witnesses, 1,
                           transport=transport)[0]  # fmt: skip

        ask(sizes[0])
        conflicts: list[int] = []

        class AnotherWorkerBetween(httpx.HTTPTransport):
            def handle_request(self, request: httpx.Request) -> httpx.Response:
                answer = super().handle_request(request)
                if answer.status_code == 409:
                    conflicts.append(int(answer.read()))
                    if len(conflicts) == 1:
                        ask(sizes[1])  # the witness moves on, to a smaller tree than ours
                return answer

        cosigned = ask(sizes[2], AnotherWorkerBetween())
        assert conflicts == sizes[:2]
        assert verify_cosignatures(cosigned, witnesses)


def test_what_a_witness_or_a_keyring_names_is_shown_escaped(
    tmp_path: Path, log: dict[str, Any]
) -> None:
    """A witness key's key_id (the keyring's) and a witness's answer reach the terminal
    and witness.quorum's one line: a line break or a terminal escape in them is shown
    escaped (they were printed as they were)."""
    from dataclasses import replace

    from pithlog.net.witness_client import collect
    from pithlog.transparency.witness import verify_cosignatures

    odd = replace(test_key("mirror"), key_id="w\nfake\x1b[2J")
    keyring = tmp_path / "witnesses.json"
    keyring.write_text(json.dumps({"keyring_version": "1", "keys": [odd.keyring_entry()]}))
    append(log, log["halves"][0])
    with witness_in_thread(tmp_path) as url:
        status, note, err = run(["--store", log["store"], "checkpoint", "--key", log["key"],
                                 "--origin", ORIGIN, "--keyring", str(keyring),
                                 "--witness", url])  # fmt: skip
    assert status == 0, err
    assert err.count("\n") == 2 and "\x1b" not in err, err
    assert "cosigned: w\\u000afake\\u001b[2J" in err

    def rude(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, content=b"no\n\x1b]0;owned\x07 thanks")

    with pytest.raises(WitnessError) as caught:
        collect(["http://witness.invalid"], note, 6, lambda old: [], [], 1,
                transport=httpx.MockTransport(rude))  # fmt: skip
    said = caught.value.describe()
    assert "\n" not in said and "\x1b" not in said and "\x07" not in said, said
    assert "status 400: no\\u000a\\u001b]0;owned\\u0007 thanks" in said
    with pytest.raises(WitnessError) as caught:  # a redirect, say: its empty body named
        collect(["http://witness.invalid"], note, 6, lambda old: [], [], 1,
                transport=httpx.MockTransport(lambda request: httpx.Response(302)))
    assert "status 302: (no body)" in caught.value.describe()
    # a cosignature by that key that does not verify names it escaped
    spoiled = note[:-10] + (b"A" if note[-10:-9] != b"A" else b"B") + note[-9:]
    with pytest.raises(WitnessError) as caught:
        verify_cosignatures(spoiled, [load_keyring(keyring.read_bytes())[odd.key_id]])
    assert "w\\u000afake\\u001b[2J" in caught.value.message and "\n" not in caught.value.message


def test_a_body_over_the_witness_s_limit_is_413_and_one_at_it_is_judged(tmp_path: Path) -> None:
    """tlog-witness bodies are small: past MAX_BODY_BYTES the witness reads no further and
    answers 413; a body of exactly that many bytes is read and judged (a malformed one:
    400)."""
    from pithlog.transparency.witness import MAX_BODY_BYTES

    with witness_in_thread(tmp_path) as url:
        over = httpx.post(url + "/add-checkpoint", content=b"x" * (MAX_BODY_BYTES + 1),
                          timeout=20)  # fmt: skip
        at = httpx.post(url + "/add-checkpoint", content=b"x" * MAX_BODY_BYTES, timeout=20)
    assert over.status_code == 413, over.text
    assert at.status_code == 400, at.text
    for answer in (over, at):  # a plain-text error is never taken for a page, nor cached
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["cache-control"] == "no-store"


def test_a_body_in_a_content_coding_is_415_before_it_is_read(tmp_path: Path) -> None:
    """A body sent with a Content-Encoding was read as raw bytes and judged malformed
    (400). It is refused at once, before the body is read (one 1,000 bytes short is
    answered, not held for BODY_SECONDS), with the codings taken."""
    body = gzip.compress(b"old 0\n\nx\n")
    with witness_in_thread(tmp_path) as url:
        host, port = url.removeprefix("http://").rsplit(":", 1)
        for coding in (b"gzip", b"zstd", b"br", b"identity, gzip"):
            with socket.create_connection((host, int(port)), timeout=5) as sock:
                sock.sendall(b"POST /add-checkpoint HTTP/1.1\r\nHost: x\r\n"
                             b"Connection: close\r\nContent-Encoding: %s\r\n"
                             b"Content-Length: %d\r\n\r\n%s"
                             % (coding, len(body) + 1000, body))  # fmt: skip
                answer = b""
                while chunk := sock.recv(65536):
                    answer += chunk
            head = answer.partition(b"\r\n\r\n")[0].lower()
            assert head.startswith(b"http/1.1 415 "), answer[:200]
            assert b"\r\naccept-encoding: identity\r\n" in head
            assert b"\r\nx-content-type-options: nosniff\r\n" in head
        said = httpx.post(url + "/add-checkpoint", content=b"old 0\n\nx\n", timeout=10,
                          headers={"Content-Encoding": "identity"})  # fmt: skip
    assert said.status_code == 400, said.text  # read and judged: malformed


def test_a_cosignature_by_a_revoked_witness_key_does_not_count(
    witness: dict[str, Any], log: dict[str, Any], tmp_path: Path
) -> None:
    # the keyring given with --witness names the witness keys: a revoked one is no longer
    # one (docs/witness.md), whatever the witness still answers with it
    append(log, log["halves"][0])
    revoked = tmp_path / "revoked-witness.json"
    entries = test_keyring_entries(mirror={"revoked_at": "2026-01-01T00:00:00Z"})
    revoked.write_text(json.dumps({"keyring_version": "1", "keys": entries}))
    status, out, err = run(["--store", log["store"], "checkpoint", "--key", log["key"],
                            "--origin", ORIGIN, "--keyring", str(revoked),
                            "--witness", witness["url"]])  # fmt: skip
    assert status == 1 and out == b"" and "[witness.quorum]" in err, err


def setup_lines() -> list[tuple[str, list[str]]]:
    """witness.md's "Setting one up": each command (its ``\\`` lines joined) with the
    ``# stderr:`` lines that follow it."""
    text = (Path(__file__).parents[2] / "docs" / "witness.md").read_text("utf-8")
    block = text.split("\n## Setting one up\n")[1].split("```sh\n")[1].split("```")[0]
    found: list[tuple[str, list[str]]] = []
    for line in block.replace("\\\n", " ").splitlines():
        if line.startswith("# stderr: "):
            found[-1][1].append(line.removeprefix("# stderr: "))
        elif line and not line.startswith("#"):
            found.append((" ".join(line.split()), []))
    return found


def test_the_setup_of_witness_md_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each line, in the folder of the README's commands: the servers on ports the kernel
    picks (the page's URLs read as theirs), every other command in-process, and each
    ``# stderr:`` line is what the command said. The page had no such steps: the log's
    own keyring given to ``checkpoint --witness`` ends in ``witness.quorum``."""
    monkeypatch.chdir(tmp_path)
    for argv in (["keygen", "--key-id", "reg-1", "--signer-id", "registry.example",
                  "--signer-type", "pith_registry", "--out", "k.key"],
                 ["keyring", "new", "keyring.json"], ["keyring", "add", "keyring.json", "k.key"]):
        assert run(argv)[0] == 0, argv  # fmt: skip
    Path("record.json").write_text(
        '{"canonical_record": {"schema_version": "1.0", "source": {"kind": "arxiv", '
        '"id": "2411.00284", "version": 2}, "metadata": {"submitted_at": '
        '"2024-11-01T00:43:54Z"}}}'
    )
    _, event, _ = run(["sign", "--key", "k.key", "--type", "record_created", "--payload",
                       "record.json"])  # fmt: skip
    Path("events.jsonl").write_bytes(event)
    assert run(["--store", "log", "append", "--keyring", "keyring.json", "events.jsonl"])[0] == 0
    urls: dict[str, str] = {}  # the page's URL -> the server's
    ran: list[str] = []
    with contextlib.ExitStack() as servers:
        for line, said in setup_lines():
            for page, real in urls.items():
                line = line.replace(page, real)
            for command in line.split(" && "):
                argv = shlex.split(command)
                if argv[0] == "cp":
                    shutil.copy(argv[1], argv[2])
                    continue
                assert argv[0] == "pithlog", command
                if "serve" in argv:
                    at = argv.index("serve")
                    args = argv[at + 1:]
                    page = "http://127.0.0.1:8080"
                    if "--listen" in args:
                        page = "http://" + args.pop(args.index("--listen") + 1)
                        args.remove("--listen")
                    server = servers.enter_context(serve_process(Path(argv[2]), *args))
                    urls[page] = server.url
                    assert [s.replace(page, server.url) for s in said] == [
                        f"serve: listening on {server.url}"], said
                    ran.append("serve")
                    continue
                target = None
                if ">" in argv:
                    argv, target = argv[:argv.index(">")], Path(argv[argv.index(">") + 1])
                status, out, err = run(argv[1:])
                assert status == 0, (command, err)
                if target is not None:
                    target.write_bytes(out)
                for expected in said:
                    for page, real in urls.items():
                        expected = expected.replace(page, real)
                    assert expected in err.splitlines(), (expected, err)
                ran.append(argv[3] if argv[1] == "--store" else argv[1])
    assert ran == ["keygen", "serve", "keyring", "keyring", "checkpoint", "serve", "keyring",
                   "mirror"], ran  # fmt: skip
    note = Path("today.cp").read_bytes()
    entry = load_keyring(Path("mirror-keyring.json").read_bytes())["w-1"]
    assert [c.key_id for c in verify_cosignatures(note, [entry])] == ["w-1"]
    with Store.open("copy", create=False, readonly=True) as mirrored:
        assert mirrored.tree_size() == 1
