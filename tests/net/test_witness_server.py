"""A witness on a real uvicorn server (127.0.0.1, a free port): ``checkpoint --witness``
collects its cosignature, the witness's state moves only on a 200, and a quorum that is not
reached prints nothing."""

from __future__ import annotations

import io
import json
import random
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from starlette.applications import Starlette

from pithlog.cli import main
from pithlog.net.witness_route import witness_routes
from pithlog.protocol.keys import dump_key_file, make_keyring
from pithlog.store import Store
from pithlog.testing import test_key, test_keyring_entries
from pithlog.transparency.witness import verify_cosignatures

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cli"))
from storeevents import g

ORIGIN = "registry.test.invalid/pith"
KEYRING = make_keyring(test_keyring_entries())


def run(argv: list[str]) -> tuple[int, bytes, str]:
    out, err = io.BytesIO(), io.StringIO()
    status = main(argv, stdout=out, stderr=err)
    return status, out.getvalue(), err.getvalue()


@pytest.fixture
def witness(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A witness (test key "mirror", state in its own store) served by uvicorn in a thread,
    stopped at the end of the test."""
    store = Store.open(tmp_path / "witness-state")
    app = Starlette(routes=witness_routes(store, KEYRING, test_key("mirror"), time.time))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="error", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "the witness did not start"
        time.sleep(0.01)
    try:
        yield {"url": f"http://127.0.0.1:{port}", "store": store}
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
        store.close()


@pytest.fixture
def log(tmp_path: Path) -> dict[str, Any]:
    events = [e for e in g.mixed_events(random.Random(3), piths=3, per_pith=4)
              if e["signer"]["key_id"] != "test-stranger"]  # fmt: skip
    keyring = tmp_path / "keyring.json"
    keyring.write_text(json.dumps({"keyring_version": "1", "keys": test_keyring_entries()}))
    key = tmp_path / "registry.key"
    key.write_bytes(dump_key_file(test_key("registry")))
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
    assert witness["store"].witness_state(ORIGIN)[0] == size
    # the log grows: the witness answers 409 with its size, the client proves from there
    append(log, log["halves"][1])
    status, note2, err = checkpoint(log, "--witness", witness["url"])
    assert status == 0, err
    assert verify_cosignatures(note2, [KEYRING["test-mirror"]])
    assert witness["store"].witness_state(ORIGIN)[0] == int(note2.split(b"\n")[1]) > size
    # an older checkpoint is never cosigned again: the witness does not roll back
    status, out, err = checkpoint(log, "--witness", witness["url"], "--size", str(size))
    assert status == 1 and out == b"" and "[witness.quorum]" in err
    assert witness["store"].witness_state(ORIGIN)[0] > size


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
