"""The search and the front page of the pages for people (docs/pages.md), under many or
long strings: the app in process."""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

with warnings.catch_warnings():  # Starlette would have httpx2; httpx is what pithlog uses
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from pithlog import Store, load_keyring, sign_event
from pithlog.net.app import create_app
from pithlog.net.page_layout import MOST_LISTED
from pithlog.net.pages import MOST_CHARS_RECENT, RECENT, page_routes
from pithlog.net.served_log import ServeConfig
from pithlog.protocol.keys import SigningKey
from pithlog.testing import test_key

ORIGIN = "registry.test.invalid/pith"
HTML = {"accept": "text/html"}
PITH = "pith:2024:4F47WZKMWXPUQ7DX6KAARP5YKA"


@pytest.fixture
def client(tmp_path: Path) -> Iterator[tuple[Store, TestClient]]:
    with Store.open(tmp_path / "store") as store:
        app = create_app(ServeConfig(store, test_key("registry"), ORIGIN,
                                     extra_routes=page_routes()))  # fmt: skip
        with TestClient(app) as c:
            yield store, c


def test_a_search_that_names_many_records_lists_at_most_most_listed(
    client: tuple[Store, TestClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A registry's key can sign any number of records of one arXiv id, and the search
    listed each: 20,000 made a page of 2 MB. It lists the first :data:`MOST_LISTED` and
    says how many there are."""
    store, c = client
    piths = [f"pith:2024:{n:026d}".translate(str.maketrans("0123456789", "ABCDEFGHIJ"))
             for n in range(MOST_LISTED * 3)]  # fmt: skip
    monkeypatch.setattr(store, "piths_for_alias", lambda alias: piths)
    page = c.get("/search?q=2411.00284", headers=HTML)
    assert page.status_code == 200
    assert f"names {MOST_LISTED * 3} records" in page.text
    assert f"the first {MOST_LISTED}:" in page.text
    assert re.findall(r'href="\./pith/([^"]+)"', page.text) == piths[:MOST_LISTED]
    monkeypatch.setattr(store, "piths_for_alias", lambda alias: piths[:MOST_LISTED])
    page = c.get("/search?q=2411.00284", headers=HTML)
    assert "the first" not in page.text
    assert re.findall(r'href="\./pith/([^"]+)"', page.text) == piths[:MOST_LISTED]


def test_the_front_page_cuts_a_kept_event_s_long_signer_id_and_time(
    client: tuple[Store, TestClient],
) -> None:
    """A kept invalid event's signer and created_at may be anything its maker wrote, up to
    a 1 MiB envelope, and the front page showed them whole for each of its twelve recent
    events: 12 MB on every load. Each is cut at :data:`MOST_CHARS_RECENT` characters."""
    store, c = client
    keyring = load_keyring(json.dumps({"keyring_version": "1", "keys": [
        test_key("author").keyring_entry()]}).encode())  # fmt: skip
    stranger = SigningKey.from_seed(bytes(32), "k", "s" * 200_000, "author")
    events = [sign_event(stranger, "author_attestation", PITH, "record", "2026-08-01T00:00:00Z",
                         {"statement": str(n)}) for n in range(RECENT)]  # fmt: skip
    events[0] = {**events[0], "created_at": ["t" * 200_000]}  # kept: malformed
    store.append([json.dumps(e).encode() for e in events], keyring, keep_invalid=True)
    page = c.get("/", headers=HTML)
    assert page.status_code == 200
    assert len(page.content) < 30_000
    assert "s" * MOST_CHARS_RECENT + "…" in page.text
    assert '["' + "t" * (MOST_CHARS_RECENT - 2) + "…" in page.text.replace("&#34;", '"')
