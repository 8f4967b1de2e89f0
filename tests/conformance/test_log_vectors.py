"""The transparency-log vectors in ``vectors/cases/<case>/log``: a store that appended the
case's ``events.jsonl`` in file order with ``keep_invalid`` holds those leaves and roots, and
``pithlog serve`` serves that checkpoint, those tiles and those proofs, byte for byte. The
same for ``vectors/log``, the log of every case's events file one after the other (in the
order of ``index.json``), which has a full tile and a tile of level 1.

The vector files are computed by the generator apart from pithlog (``vectors/casegen/tlog.py``),
so a change in what pithlog stores or serves shows up here as a mismatch.
"""

from __future__ import annotations

import contextlib
import functools
import json
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

with warnings.catch_warnings():  # Starlette would have httpx2; httpx is what pithlog uses
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from pithlog.net.app import create_app
from pithlog.net.served_log import ServeConfig
from pithlog.protocol.keys import Keyring, load_keyring
from pithlog.store import Store
from pithlog.store.append import DUPLICATE, EVIDENCE, REPLACED, STORED
from pithlog.testing import test_key, test_keyring
from pithlog.transparency import merkle, tiles
from pithlog.transparency.checkpoint import Checkpoint, sign_checkpoint, verify_checkpoint
from pithlog.transparency.proofs import (
    parse_consistency_proof,
    parse_inclusion_proof,
    verify_consistency_proof,
    verify_inclusion_proof,
)

VECTORS = Path(__file__).resolve().parents[2] / "vectors"
CASES_DIR = VECTORS / "cases"
CASES = sorted(p.name for p in CASES_DIR.iterdir() if p.is_dir())
LOGS = [f"cases/{name}/log" for name in CASES] + ["log"]
"""The log folders, under ``vectors/``."""
ORIGIN = "registry.test.invalid/vectors"
"""The origin of the vectors' checkpoints (``vectors/README.md``)."""


def vector_files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}  # fmt: skip


def leaves(files: dict[str, bytes]) -> list[bytes]:
    """The leaf data of ``leaves.txt`` (``index data hash`` per line)."""
    out = []
    for at, line in enumerate(files["leaves.txt"].decode("ascii").split("\n")[:-1]):
        index, data, _ = line.split(" ")
        assert int(index) == at
        out.append(bytes.fromhex(data))
    return out


def events_of(log: str) -> tuple[list[bytes], Keyring]:
    """The lines a log folder holds the log of, and a keyring to append them under (with
    ``keep_invalid``, which copies become leaves does not depend on it)."""
    if log == "log":
        cases = [c["name"] for c in json.loads((VECTORS / "index.json").read_bytes())["cases"]]
        return [line for c in cases for line in events_of(f"cases/{c}/log")[0]], test_keyring()
    folder = (VECTORS / log).parent
    lines = (folder / "events.jsonl").read_bytes().split(b"\n")[:-1]
    return lines, load_keyring((folder / "keyring.json").read_bytes())


@contextlib.contextmanager
def logged(log: str, where: Path) -> Iterator[Store]:
    """A store that appended the lines of ``log`` (:func:`events_of`) one by one in file
    order, as one batch with ``keep_invalid``."""
    lines, keyring = events_of(log)
    with Store.open(where) as store:
        results = store.append(lines, keyring, keep_invalid=True)
        assert {r.status for r in results} <= {STORED, DUPLICATE, EVIDENCE, REPLACED}
        yield store


def served(store: Store, files: dict[str, bytes]) -> dict[str, bytes]:
    """What pithlog holds and serves under the names of the vector files ``files``."""
    size = store.tree_size()
    data = store.leaf_data(0, size)
    assert data is not None
    out = {
        "leaves.txt": "".join(f"{i} {d.hex()} {merkle.leaf_hash(d).hex()}\n"
                              for i, d in enumerate(data)).encode(),
        "roots.txt": "".join(f"{s} {store.tree_root(s)[1].hex()}\n"
                             for s in range(size + 1)).encode(),
    }
    app = create_app(ServeConfig(store, test_key("registry"), ORIGIN))
    with TestClient(app, raise_server_exceptions=True) as client:

        def get(url: str) -> bytes:
            answer = client.get(url)
            assert answer.status_code == 200, (url, answer.text)
            return answer.content

        out["checkpoint"] = get("/checkpoint")
        for tile in tiles.tiles_of(size):
            out[tile.path()] = get("/" + tile.path())
            if tile.level == 0:
                out[tile.entries_path()] = get("/" + tile.entries_path())
        # the proofs the vectors hold, asked for by the leaf data the vectors say
        wanted = leaves(files)
        for name in files:
            kind, _, rest = name.removeprefix("proof/").partition("/")
            if not name.startswith("proof/"):
                continue
            if kind == "inclusion":
                d = wanted[int(rest)]
                out[name] = get(f"/proof/inclusion/sha256:{d[:32].hex()}?copy={d[32:].hex()}")
            elif kind == "consistency":
                out[name] = get(f"/proof/consistency/{rest}")
            else:
                assert kind == "checkpoint"
                old = int(rest)
                root = store.tree_root(old)[1]
                out[name] = sign_checkpoint(Checkpoint(ORIGIN, old, root), test_key("registry"))
    return out


@functools.cache
def pithlog_files(log: str) -> dict[str, bytes]:
    files = vector_files(VECTORS / log)
    with tempfile.TemporaryDirectory() as where, logged(log, Path(where) / "s") as store:
        return served(store, files)


@pytest.mark.parametrize("log", LOGS)
def test_store_and_server_give_the_log_vectors_byte_for_byte(log: str) -> None:
    files = vector_files(VECTORS / log)
    ours = pithlog_files(log)
    assert sorted(ours) == sorted(files)
    for path, data in files.items():
        assert ours[path] == data, path


@pytest.mark.parametrize("log", LOGS)
def test_log_vectors_verify(log: str) -> None:
    """The vector files pass pithlog's verifiers: the checkpoint under the test keyring,
    each proof against it, the tiles and bundles against its root."""
    files = vector_files(VECTORS / log)
    keyring = test_keyring()
    checkpoint = verify_checkpoint(files["checkpoint"], keyring, ORIGIN).checkpoint
    data = leaves(files)
    assert checkpoint.size == len(data)
    roots = [line.split(" ") for line in files["roots.txt"].decode().split("\n")[:-1]]
    assert [int(s) for s, _ in roots] == list(range(len(data) + 1))
    assert bytes.fromhex(roots[-1][1]) == checkpoint.root
    proofs = [p for p in files if p.startswith("proof/")]
    assert any(p.startswith("proof/inclusion/") for p in proofs)
    for path in proofs:
        kind, _, rest = path.removeprefix("proof/").partition("/")
        if kind == "inclusion":
            proof = parse_inclusion_proof(files[path])
            assert proof.index == int(rest) and proof.extra == data[proof.index]
            verify_inclusion_proof(files[path], keyring, origin=ORIGIN)
        elif kind == "consistency":
            old, new = (int(s) for s in rest.split("/"))
            older = files[f"proof/checkpoint/{old}"]
            assert (parse_consistency_proof(files[path]).old, new) == (old, checkpoint.size)
            verify_consistency_proof(files[path], older, files["checkpoint"], keyring, ORIGIN)
            assert bytes.fromhex(roots[old][1]) == verify_checkpoint(older, keyring).checkpoint.root
    read = tiles.VerifiedTiles(checkpoint.size, checkpoint.root, lambda t: files[t.path()])
    bundles = [t for t in tiles.tiles_of(checkpoint.size) if t.level == 0]
    got = [e for t in bundles for e in read.entries(t.index, files[t.entries_path()])]
    assert got == data


def test_the_log_of_all_cases_has_full_tiles_and_a_second_level() -> None:
    files = vector_files(VECTORS / "log")
    assert {"tile/0/000", "tile/entries/000", "tile/1/000.p/1"} <= set(files)
