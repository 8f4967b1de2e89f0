"""A served log (the app in-process) checked by the verifiers of
``tests/unit/test_tlog_independent.py``, written apart from pithlog: the checkpoint's
signature with ``cryptography`` alone, the root recomputed from the entry bundles by
RFC 9162's ``MTH`` and, for earlier sizes too, from the tiles of that size (their partial
tiles), the tiles against the leaves, every proof the server gives; and the
paths C2SP tlog-tiles does not allow, each refused with its status and code."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import random
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from served import ORIGIN, make_files

with warnings.catch_warnings():  # Starlette would have httpx2; httpx is what pithlog uses
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from pithlog.net.app import create_app
from pithlog.net.served_log import ServeConfig
from pithlog.protocol.keys import load_key_file
from pithlog.store import Store


def _independent() -> ModuleType:
    path = Path(__file__).resolve().parents[1] / "unit" / "test_tlog_independent.py"
    spec = importlib.util.spec_from_file_location("tlog_independent", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ind = _independent()


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, bytes]]:
    files = make_files(tmp_path_factory.mktemp("served"))  # more than 256 leaves
    key = load_key_file(files.key.read_bytes())
    with Store.open(files.store, readonly=True) as store:
        app = create_app(ServeConfig(store, key, ORIGIN))
        with TestClient(app) as test_client:
            yield test_client, key.public_key


def _mth(hashes: list[bytes]) -> bytes:
    if not hashes:
        return hashlib.sha256(b"").digest()
    if len(hashes) == 1:
        return hashes[0]
    k = 1
    while k * 2 < len(hashes):
        k *= 2
    return ind._node(_mth(hashes[:k]), _mth(hashes[k:]))


def _n(index: int) -> str:
    """tlog-tiles: N in zero-padded three-digit elements, all but the last x-prefixed."""
    digits = str(index)
    digits = "0" * (-len(digits) % 3) + digits
    groups = [digits[i : i + 3] for i in range(0, len(digits), 3)]
    return "/".join(["x" + g for g in groups[:-1]] + [groups[-1]])


def _root_from_tiles(http: TestClient, size: int) -> bytes:
    """RFC 9162 MTH(D[0:size]) by its recursion, each aligned run of 256**L leaves taken
    from the tiles of level L as they are at ``size`` (tlog-tiles: the tile of index n
    holds floor(size / 256**L) - n * 256 hashes, at most 256; the last one is ``.p/W``).
    Every tile is ``application/octet-stream``, exactly W * 32 bytes."""

    def hash_at(level: int, j: int) -> bytes:
        index, width = j // 256, min(256, size // 256**level - j // 256 * 256)
        path = f"/tile/{level}/{_n(index)}" + ("" if width == 256 else f".p/{width}")
        got = http.get(path)
        assert got.status_code == 200, path
        assert got.headers["content-type"] == "application/octet-stream", path
        assert len(got.content) == width * 32, path
        return got.content[j % 256 * 32 : j % 256 * 32 + 32]

    def mth(lo: int, hi: int) -> bytes:
        level, span = 0, 1
        while span * 256 <= hi - lo:
            level, span = level + 1, span * 256
        if hi - lo == span and lo % span == 0:
            return hash_at(level, lo // span)
        k = 1
        while k * 2 < hi - lo:
            k *= 2
        return ind._node(mth(lo, lo + k), mth(lo + k, hi))

    return mth(0, size)


def _bundle(data: bytes) -> list[bytes]:
    out, at = [], 0
    while at < len(data):
        n = int.from_bytes(data[at : at + 2], "big")
        out.append(data[at + 2 : at + 2 + n])
        at += 2 + n
    assert at == len(data)
    return out


def test_a_served_log_holds_under_independent_verifiers(
    client: tuple[TestClient, bytes],
) -> None:
    http, public_key = client
    note = http.get("/checkpoint").content
    origin, size_line, root_line = ind.open_note(note, ORIGIN, public_key).decode().split("\n")[:3]
    size, root = int(size_line), base64.b64decode(root_line)
    assert origin == ORIGIN and 256 < size < 512
    partial = size - 256
    entries = _bundle(http.get("/tile/entries/000").content)
    entries += _bundle(http.get(f"/tile/entries/001.p/{partial}").content)
    assert len(entries) == size and {len(e) for e in entries} == {64}
    leaves = [hashlib.sha256(b"\x00" + e).digest() for e in entries]
    assert _mth(leaves) == root
    level0 = http.get("/tile/0/000").content + http.get(f"/tile/0/001.p/{partial}").content
    assert level0 == b"".join(leaves)
    assert http.get("/tile/1/000.p/1").content == _mth(leaves[:256])
    # the root of every earlier size re-derived from the tiles of that size (its partial
    # tiles, level 1's included, served for every width up to the tree's), and nothing
    # served past the right edge
    for earlier in (1, 5, 255, 256, 257, size - 1, size):
        assert _root_from_tiles(http, earlier) == _mth(leaves[:earlier]), earlier
    for path in (f"/tile/0/001.p/{partial + 1}", "/tile/0/002.p/1", "/tile/1/000.p/2",
                 "/tile/2/000.p/1", f"/tile/entries/001.p/{partial + 1}"):  # fmt: skip
        assert http.get(path).status_code == 404, path
    bundle = http.get(f"/tile/entries/001.p/{partial}")
    assert bundle.headers["content-type"] == "application/octet-stream"
    for i in {0, 255, 256, size - 1, *random.Random(1).sample(range(size), 12)}:
        eid = "sha256:" + entries[i][:32].hex()
        text = http.get(f"/proof/inclusion/{eid}?copy={entries[i][32:].hex()}").text
        head, _, checkpoint = text.partition("\n\n")
        lines = head.split("\n")
        assert lines[0] == "c2sp.org/tlog-proof@v1" and checkpoint.encode() == note
        assert base64.b64decode(lines[1].removeprefix("extra ")) == entries[i]
        assert lines[2] == f"index {i}"
        path = [base64.b64decode(h) for h in lines[3:]]
        assert ind.root_from_inclusion(i, size, leaves[i], path) == root
    for old, new in [(0, 0), (0, size), (1, size), (size, size), (255, 256), (256, size),
                     (3, 7), (128, 300), (size - 1, size), (2, 2)]:  # fmt: skip
        lines = http.get(f"/proof/consistency/{old}/{new}").text.split("\n")
        assert lines[:3] == ["pithlog-consistency-proof@v1", f"old {old}", f"new {new}"]
        assert lines[-1] == ""
        path = [base64.b64decode(h) for h in lines[3:-1]]
        assert ind.consistent(old, new, path, _mth(leaves[:old]), _mth(leaves[:new]))


@pytest.mark.parametrize(
    ("path", "status", "code"),
    [("/tile/0/x000/000", 400, "tile.path"), ("/tile/0/000.p/0", 400, "tile.path"),
     ("/tile/0/000.p/256", 400, "tile.path"), ("/tile/0/000.p/010", 400, "tile.path"),
     ("/tile/64/000", 400, "tile.path"), ("/tile/00/000", 400, "tile.path"),
     ("/tile/0/0000", 400, "tile.path"), ("/tile/0/5", 400, "tile.path"),
     ("/tile/0/000/", 400, "tile.path"), ("/tile/0//000", 400, "tile.path"),
     ("/tile/entries/x000/000", 400, "tile.path"), ("/tile/0/%30%30%30", 400,
                                                     "serve.bad_path"),
     ("/tile/0/001", 404, "serve.not_found"), ("/tile/1/000", 404, "serve.not_found"),
     ("/tile/63/000.p/1", 404, "serve.not_found"),
     ("/tile/entries/x999/000", 404, "serve.not_found"),
     ("/tile/0/x009/x223/x372/x036/x854/x775/807", 404, "serve.not_found"),
     ("/tile/0/x009/x223/x372/x036/x854/x775/808", 400, "tile.path"),
     ("/tile/0/x018/x446/x744/x073/x709/x551/615", 400, "tile.path"),
     ("/tile/entries/x999/x999/x999/x999/x999/x999/999", 400, "tile.path"),
     ("/copies/x009/x223/x372/x036/x854/x775/808", 400, "tile.path"),
     ("/tile/0/x001/x002/x003/x004/x005/x006/x007/008", 400, "tile.path"),
     ("/proof/consistency/5/3", 400, "serve.bad_path"),
     ("/proof/consistency/01/3", 400, "serve.bad_path"),
     ("/proof/consistency/0/9223372036854775807", 404, "store.tree_size"),
     ("/proof/consistency/0/9223372036854775808", 400, "serve.bad_path"),
     ("/proof/consistency/0/9999999999999999999", 400, "serve.bad_path"),
     ("/proof/consistency/0/99999999999999999999", 400, "serve.bad_path")],
)  # fmt: skip
def test_paths_tlog_tiles_does_not_allow(
    client: tuple[TestClient, bytes], path: str, status: int, code: str
) -> None:
    got = client[0].get(path)
    assert (got.status_code, got.json()["error"]) == (status, code)
    assert got.headers["cache-control"] == "no-store"
