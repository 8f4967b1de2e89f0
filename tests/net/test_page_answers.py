"""The pages for people (docs/pages.md) without a browser: the app in process, over a store
of the conformance cases and of kept invalid events whose members are of any JSON type."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from pithlog import Store, load_keyring, sign_event
from pithlog.net.app import ServeConfig, create_app
from pithlog.net.pages import page_routes
from pithlog.testing import test_key

CASES = Path(__file__).resolve().parents[2] / "vectors" / "cases"
KEYRING = load_keyring((CASES / "equivocations" / "keyring.json").read_bytes())
PITH = json.loads((CASES / "seed-2411.00284" / "expected.jsonl").read_text())["pith_number"]
ORIGIN = "registry.test.invalid/pith"
HTML = {"accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}


def _cases() -> list[bytes]:
    lines = []
    for case in ("seed-2411.00284", "equivocations"):
        lines += (CASES / case / "events.jsonl").read_text().splitlines()
    return [line.encode() for line in lines if line]


def _odd(n: int, **members: Any) -> dict[str, Any]:
    """A signed event with ``members`` put in its place afterwards: invalid, kept."""
    event = sign_event(test_key("author"), "author_attestation", PITH, "claim:x",
                       "2026-08-01T00:00:00Z", {"statement": "hi"})  # fmt: skip
    return {**event, **members, "event_id": "sha256:" + format(n, "064x")}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "store") as s:
        s.append(_cases(), KEYRING, keep_invalid=True)
        yield s


def _client(store: Store, **config: Any) -> TestClient:
    return TestClient(create_app(ServeConfig(store, test_key("registry"), ORIGIN,
                                             extra_routes=page_routes(), **config)))  # fmt: skip


@pytest.mark.parametrize("created_at", [5, {"at": 1}, ["2026-08-01T00:00:00Z"], True, "soon"])
def test_a_kept_event_whose_time_is_not_a_timestamp_is_shown_as_text(
    store: Store, created_at: Any
) -> None:
    """A kept invalid event's created_at may be any JSON value: the front page (which lists
    it among the recent events) and its own page were a 500, the time filter calling
    ``str.replace`` on it."""
    odd = _odd(1, created_at=created_at)
    store.append([json.dumps(odd).encode()], KEYRING, keep_invalid=True)
    with _client(store) as client:
        for path in ("/", "/event/" + odd["event_id"]):
            got = client.get(path, headers=HTML)
            assert got.status_code == 200, (path, got.text)
            assert got.headers["content-type"].startswith("text/html")
        assert f'<time datetime="{created_at}"' not in got.text
