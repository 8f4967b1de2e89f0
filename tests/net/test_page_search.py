"""The search of the pages for people (docs/pages.md): the app in process, over a store of
the conformance cases."""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

with warnings.catch_warnings():  # Starlette would have httpx2; httpx is what pithlog uses
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from pithlog import Store
from pithlog.net.app import create_app
from pithlog.net.pages import MOST_LISTED, page_routes
from pithlog.net.served_log import ServeConfig
from pithlog.testing import test_key

ORIGIN = "registry.test.invalid/pith"
HTML = {"accept": "text/html"}


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
    assert re.findall(r'href="/pith/([^"]+)"', page.text) == piths[:MOST_LISTED]
    monkeypatch.setattr(store, "piths_for_alias", lambda alias: piths[:MOST_LISTED])
    page = c.get("/search?q=2411.00284", headers=HTML)
    assert "the first" not in page.text
    assert re.findall(r'href="/pith/([^"]+)"', page.text) == piths[:MOST_LISTED]
