"""The monitoring route of ``pithlog serve --witness`` (C2SP tlog-witness, "Monitor Retrieval
Mechanism"), against a witness served on 127.0.0.1: ``GET /<origin hash>/checkpoint`` is
404 until the witness cosigns the log, then the checkpoint it cosigned (the log's
signature, its cosignature), moved by the next 200 of add-checkpoint and by nothing
else."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import httpx
from test_witness_server import KEYRING, ORIGIN, in_thread, witness_in_thread

from pithlog.testing import test_key, test_keyring_entries, write_key_file
from pithlog.transparency import merkle
from pithlog.transparency.checkpoint import (
    Checkpoint,
    parse_note,
    sign_checkpoint,
    verify_checkpoint,
)
from pithlog.transparency.witness import AddCheckpoint, verify_cosignatures

SUB = merkle.subtree_from_leaves([merkle.leaf_hash(bytes([i]) * 64) for i in range(16)])
PATH = f"/{hashlib.sha256(ORIGIN.encode()).hexdigest()}/checkpoint"


def signed(size: int) -> bytes:
    return sign_checkpoint(Checkpoint(ORIGIN, size, merkle.root(size, SUB)), test_key("registry"))


def add(url: str, old: int, new: int, note: bytes | None = None) -> httpx.Response:
    proof = merkle.consistency_path(old, new, SUB) if 0 < old < new else []
    body = AddCheckpoint(old, tuple(proof), note or signed(new)).encoded()
    return httpx.post(url + "/add-checkpoint", content=body, timeout=10)


def test_a_witness_serves_the_checkpoint_it_cosigned_to_monitors(tmp_path: Path) -> None:
    with witness_in_thread(tmp_path) as url:
        before = httpx.get(url + PATH, timeout=10)
        first = add(url, 0, 4)
        served = httpx.get(url + PATH, timeout=10)
        # a 409 (a stale old size) and a 422 (a proof that fails) cosign nothing: the
        # checkpoint served stays the one of size 4
        stale = add(url, 0, 8)
        bad_proof = httpx.post(url + "/add-checkpoint", timeout=10,
                               content=AddCheckpoint(4, (bytes(32),), signed(8)).encoded())
        unchanged = httpx.get(url + PATH, timeout=10)
        second = add(url, 4, 8)
        moved = httpx.get(url + PATH, timeout=10)
        head = httpx.head(url + PATH, timeout=10)
    assert before.status_code == 404 and before.headers["cache-control"] == "no-store"
    assert before.headers["content-type"].startswith("text/plain")
    assert first.status_code == 200, first.text
    assert served.status_code == 200
    assert served.headers["content-type"] == "text/plain; charset=utf-8"
    assert served.headers["cache-control"] == "public, max-age=60"
    assert served.content == signed(4) + first.content
    # what a monitor does with it: pithlog's own parser and verifiers take it
    assert len(parse_note(served.content).signatures) == 2
    verified = verify_checkpoint(served.content, KEYRING, ORIGIN)
    assert verified.checkpoint.size == 4 and verified.signers == ("test-registry",)
    assert [c.key_id for c in verify_cosignatures(served.content,
                                                  [KEYRING["test-mirror"]])] == ["test-mirror"]
    assert (stale.status_code, stale.content) == (409, b"4\n")
    assert bad_proof.status_code == 422
    assert unchanged.content == served.content
    assert second.status_code == 200, second.text
    assert moved.content == signed(8) + second.content
    assert verify_checkpoint(moved.content, KEYRING, ORIGIN).checkpoint.size == 8
    assert head.status_code == 200 and head.content == b""


def test_a_malformed_origin_hash_is_400_and_an_unknown_one_404(tmp_path: Path) -> None:
    digest = hashlib.sha256(ORIGIN.encode()).hexdigest()
    with witness_in_thread(tmp_path) as url:
        assert add(url, 0, 4).status_code == 200
        malformed = [httpx.get(f"{url}/{h}/checkpoint", timeout=10)
                     for h in (digest.upper(), digest[:63], digest + "0", "g" * 64,
                               "%20" + digest[1:])]  # fmt: skip
        unknown = httpx.get(f"{url}/{hashlib.sha256(b'other.invalid/log').hexdigest()}"
                            "/checkpoint", timeout=10)  # fmt: skip
        posted = httpx.post(url + PATH, content=b"", timeout=10)
        served = httpx.get(url + PATH, timeout=10)
    for answer in malformed:
        assert answer.status_code == 400, answer.text
        assert answer.headers["content-type"].startswith("text/plain")
        assert answer.headers["cache-control"] == "no-store"
    assert unknown.status_code == 404 and b"other" not in unknown.content
    # the route is a GET: any other method is the JSON error of every other path
    assert posted.status_code == 405 and posted.json()["error"] == "serve.method"
    assert served.status_code == 200


def test_a_log_the_keyring_no_longer_names_is_404(tmp_path: Path) -> None:
    """A witness restarted with a keyring that no longer names the log follows it no more
    (its add-checkpoint answers 404): its monitoring route says the same, rather than serve
    the last tree it cosigned as a recent one."""
    from pithlog.net.server import Settings, witness_app

    with witness_in_thread(tmp_path) as url:
        assert add(url, 0, 4).status_code == 200
    keyring = tmp_path / "without-the-log.json"
    others = ("author", "mirror")  # no registry.test.invalid key: "registry" nor "registry-2"
    keyring.write_text(json.dumps({"keyring_version": "1",
                                   "keys": test_keyring_entries(others)}))  # fmt: skip
    key = tmp_path / "witness.key"
    write_key_file(key, test_key("mirror"))
    app = witness_app(Settings(store=str(tmp_path / "state"), key=str(key), origin="",
                               keyring=str(keyring), witness=True))  # fmt: skip
    with in_thread(app) as url:
        assert httpx.get(url + PATH, timeout=10).status_code == 404
        assert add(url, 4, 8).status_code == 404
