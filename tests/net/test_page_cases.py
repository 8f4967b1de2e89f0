"""Every page of every conformance case (vectors/cases), rendered by the pages' Jinja
environment, whose undefined is strict (docs/pages.md, "Templates"): a template that reads
a name its context lacks fails the page, where it was shown as nothing. The templates read
each member the spec does not require only where it is defined: spec 5.1 requires nothing
of a record's metadata but ``submitted_at``."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import jinja2
import msgspec
import pytest

with warnings.catch_warnings():  # Starlette would have httpx2; httpx is what pithlog uses
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from pithlog import Store, load_keyring, sign_event
from pithlog.net.app import create_app
from pithlog.net.page_layout import environment
from pithlog.net.pages import page_routes
from pithlog.net.served_log import ServeConfig
from pithlog.protocol.event_types import prepare_record_created
from pithlog.testing import test_key

CASES = Path(__file__).resolve().parents[2] / "vectors" / "cases"
ORIGIN = "registry.test.invalid/pith"
HTML = {"accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}
KEYRING = load_keyring((CASES / "equivocations" / "keyring.json").read_bytes())


def _client(store: Store) -> TestClient:
    return TestClient(create_app(ServeConfig(store, test_key("registry"), ORIGIN,
                                             extra_routes=page_routes())))  # fmt: skip


def _pages(client: TestClient, store: Store, piths: list[str]) -> dict[str, Any]:
    """The front page, each record's page and each stored event's page -> its answer."""
    events = dict.fromkeys(msgspec.json.decode(copy)["event_id"] for _, copy in store.export())
    paths = ["/", *(f"/pith/{p}" for p in piths), *(f"/event/{e}" for e in events)]
    return {path: client.get(path, headers=HTML) for path in paths}


def _ok(pages: dict[str, Any]) -> None:
    failed = {path: (got.status_code, got.text[:300]) for path, got in pages.items()
              if got.status_code != 200}  # fmt: skip
    assert not failed, failed
    for path, got in pages.items():
        assert got.headers["content-type"] == "text/html; charset=utf-8", path
        assert got.text.startswith("<!doctype html>") and "</html>" in got.text, path


def test_the_environment_fails_a_template_that_reads_a_name_not_there() -> None:
    """A name read that is not in the context was rendered as nothing: a page could show
    an empty field for a typo or a member a record lacks, silently."""
    env = environment()
    assert env.undefined is jinja2.StrictUndefined
    with pytest.raises(jinja2.UndefinedError):
        env.from_string("{{ record.metadata.license }}").render(record={"metadata": {}})
    # a test of whether it is defined reads it safely
    assert env.from_string("{{ 'none' if m.license is not defined }}").render(m={}) == "none"


@pytest.mark.parametrize("case", sorted(p.name for p in CASES.iterdir() if p.is_dir()))
def test_every_page_of_every_conformance_case_is_rendered(tmp_path: Path, case: str) -> None:
    """Every page of the case, its invalid events kept (their pages too): 416 pages over
    the ten cases. With a strict undefined and the templates as they were, the pages of
    12 records failed (500): metadata without ``title_canon_sha256``, ``license``,
    ``primary_cat`` or ``cross_cats_sorted``, which spec 5.1 does not require."""
    folder = CASES / case
    keyring = load_keyring((folder / "keyring.json").read_bytes())
    lines = [line for line in (folder / "events.jsonl").read_bytes().split(b"\n") if line]
    # split on newlines only: a state may hold U+2028, at which str.splitlines splits
    piths = [json.loads(line)["pith_number"]
             for line in (folder / "expected.jsonl").read_text().split("\n") if line]  # fmt: skip
    with Store.open(tmp_path / "store") as store:
        store.append(lines, keyring, keep_invalid=True)
        stored = store.tree_size()
        with _client(store) as client:
            pages = _pages(client, store, piths)
    # each event's page once: a case may store copies of one event (step0-copies)
    assert stored and len([path for path in pages if path.startswith("/event/")]) <= stored
    _ok(pages)


def _record(metadata: dict[str, Any], version: int) -> tuple[str, dict[str, Any]]:
    """A registry's record_created of ``metadata``, and its pith number."""
    record = {"metadata": metadata, "schema_version": "1.0",
              "source": {"id": "2607.00002", "kind": "arxiv", "version": version}}  # fmt: skip
    pith, payload = prepare_record_created(test_key("registry"), {"canonical_record": record})
    return pith, sign_event(test_key("registry"), "record_created", pith, "record",
                            "2026-08-01T00:00:00Z", payload)  # fmt: skip


def test_records_of_the_least_metadata_the_spec_allows_have_pages(tmp_path: Path) -> None:
    """A record whose metadata holds only ``submitted_at`` (spec 5.1), one whose optional
    members are all null, and an attestation of each: every page ``200``, the members it
    lacks shown as "none" (title hash, license) or as nothing (categories)."""
    at = "2026-07-01T00:00:00Z"
    least, created = _record({"submitted_at": at}, 1)
    nulls, created_nulls = _record({"submitted_at": at, "title_canon_sha256": None,
                                    "primary_cat": None, "cross_cats_sorted": None,
                                    "license": None}, 2)  # fmt: skip
    events = [created, created_nulls]
    for pith in (least, nulls):
        events.append(sign_event(test_key("author"), "author_attestation", pith, "record",
                                 "2026-08-01T00:00:01Z", {"statement": "mine"}))  # fmt: skip
    with Store.open(tmp_path / "store") as store:
        results = store.append([json.dumps(e).encode() for e in events], KEYRING)
        assert [r.status for r in results] == ["stored"] * 4
        with _client(store) as client:
            pages = _pages(client, store, [least, nulls])
    assert len(pages) == 7
    _ok(pages)
    record = pages[f"/pith/{least}"].text
    fields = record.partition("<dt>title hash</dt>")[2].partition("<dt>source</dt>")[0]
    assert "<dd>none</dd>" in fields  # the title hash
    assert "<dt>categories</dt><dd><bdi></bdi></dd>" in fields
    assert "<dt>license</dt><dd>none</dd>" in fields
    assert '<time datetime="2026-07-01T00:00:00Z">' in fields
