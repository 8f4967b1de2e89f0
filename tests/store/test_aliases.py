"""The alias index (pithlog.store.aliases): a pith found by the source aliases of its chosen
record in one read, kept in the append transaction, checked by replay, rebuilt under
another keyring, and built when a store of the previous format is opened."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import eventgen as g
import lmdb
import pytest
from oldformat import as_format_5

from pithlog.errors import StoreError
from pithlog.protocol.event_types import prepare_record_created
from pithlog.protocol.events import sign_event
from pithlog.protocol.keys import make_keyring
from pithlog.store import Store
from pithlog.store.layout import FORMAT_2, FORMAT_VERSION, META_FORMAT
from pithlog.testing import test_key, test_keyring_entries


def lookups(state: bytes) -> list[str]:
    """What a person types for each source alias of a state document (spec 8)."""
    family = {"arxiv": "arxiv", "arxiv_version": "arxiv", "doi": "doi"}
    return [f"{family.get(a['alias_kind'], 'pith')}:{a['alias_value']}"
            for a in json.loads(state)["current"]["source_aliases"]]  # fmt: skip


def versioned(source_id: str, version: int) -> dict[str, Any]:
    key = test_key("registry")
    record = g.canonical_record(source_id)
    record["source"]["version"] = version
    pith, payload = prepare_record_created(key, {"canonical_record": record})
    return sign_event(key, "record_created", pith, "record", g.ts(version), payload)


def test_every_alias_of_the_chosen_record_finds_its_pith(tmp_path: Path) -> None:
    rec = g.record("2501.00007")
    pith = rec["pith_number"]
    with Store.open(tmp_path / "s") as store:
        hint = g.mirror_hint(pith, 5, "https://m.example/a")
        store.append([g.encoded(hint)], g.KEYRING)
        assert store.pith_for_alias("arxiv:2501.00007") is None  # pending: no record yet
        store.append([g.encoded(rec)], g.KEYRING)
        state = store.state(pith)
        assert state is not None
        typed = lookups(state)
        assert len(typed) == 6
        for alias in typed:
            assert store.pith_for_alias(alias) == pith, alias
        short = next(a for a in typed if a.startswith("pith:"))
        assert store.pith_for_alias(short.lower()) == pith
        doi = next(a for a in typed if a.startswith("doi:"))
        assert store.pith_for_alias(doi.upper().replace("DOI:", "doi:")) == pith
        assert store.pith_for_alias("arxiv:2501.99999") is None
        for bad in ("2501.00007", "isbn:1", "pith:2025:" + "A" * 26):
            with pytest.raises(StoreError) as caught:
                store.pith_for_alias(bad)
            assert caught.value.code == "store.alias"
        assert store.replay(g.KEYRING).ok


def test_an_alias_of_another_type_or_not_unicode_is_store_alias(tmp_path: Path) -> None:
    """``pith_for_alias`` of ``None`` or an int raised AttributeError (``partition``), of
    bytes TypeError, and of a string holding a lone surrogate (what ``json.loads`` makes of
    ``"\\ud800"`` in a request) UnicodeEncodeError: each is ``store.alias``, as a string
    of no alias form is."""
    with Store.open(tmp_path / "s") as store:
        for bad in (None, 5, b"arxiv:2501.00007", "arxiv:2501.\ud800", "doi:10.1/\udcff",
                    "pith:\ud800AAAAAAA"):  # fmt: skip
            for find in (store.pith_for_alias, store.piths_for_alias):
                with pytest.raises(StoreError) as caught:
                    find(bad)  # type: ignore[arg-type]
                assert caught.value.code == "store.alias", bad


def test_two_versions_share_the_unversioned_alias(tmp_path: Path) -> None:
    v1, v2 = versioned("2502.00001", 1), versioned("2502.00001", 2)
    assert v1["pith_number"] != v2["pith_number"]
    with Store.open(tmp_path / "s") as store:
        store.append([v1, v2], g.KEYRING)
        assert store.piths_for_alias("arxiv:2502.00001") == sorted(
            [v1["pith_number"], v2["pith_number"]])
        with pytest.raises(StoreError) as caught:
            store.pith_for_alias("arxiv:2502.00001")
        assert caught.value.code == "store.ambiguous_alias"
        assert store.pith_for_alias("arxiv:2502.00001v2") == v2["pith_number"]


def test_replay_names_a_damaged_alias_index_and_rebuild_follows_the_keyring(
    tmp_path: Path,
) -> None:
    rec = g.record("2501.00008")
    with Store.open(tmp_path / "s") as store:
        store.append([g.encoded(rec)], g.KEYRING)
        key = b"arxiv:2501.00008\x00" + rec["pith_number"].encode()
        store._write(lambda txn, dbs: txn.delete(key, db=dbs["aliases"]))
        lines = [d.line() for d in store.replay(g.KEYRING).discrepancies]
        assert lines == [f"aliases: {rec['pith_number']}: alias arxiv:2501.00008 is missing "
                         "from the alias index"]  # fmt: skip
        store._write(lambda txn, dbs: txn.put(b"arxiv:9\x00" + rec["pith_number"].encode(),
                                              b"", db=dbs["aliases"]))  # fmt: skip
        assert len(store.replay(g.KEYRING).discrepancies) == 2
        store.rebuild(g.KEYRING)
        assert store.replay(g.KEYRING).ok
        assert store.pith_for_alias("arxiv:2501.00008") == rec["pith_number"]
        without = make_keyring(test_keyring_entries(("mirror", "author")))  # no registry key
        store.rebuild(without)
        assert store.pith_for_alias("arxiv:2501.00008") is None
        assert store.replay(without).ok


def test_a_store_of_the_previous_format_gets_its_index_on_open(tmp_path: Path) -> None:
    recs = [g.record(f"2501.0001{i}") for i in range(3)]
    path = tmp_path / "s"
    with Store.open(path) as store:
        store.append([g.encoded(r) for r in recs], g.KEYRING)
        states = {r["pith_number"]: store.state(r["pith_number"]) for r in recs}
    # what format 2 was: format 5's copies and slots, no aliases database, format "2"
    as_format_5(path)
    env = lmdb.open(str(path), max_dbs=32, subdir=True)
    with env.begin(write=True) as txn:
        txn.drop(env.open_db(b"aliases", txn=txn), delete=True)
        txn.put(META_FORMAT, FORMAT_2, db=env.open_db(b"meta", txn=txn))
    with env.begin() as txn:
        assert txn.get(b"aliases") is None  # the database is gone from the main db
    env.close()
    with Store.open(path, create=False) as store:
        assert store.stats()["format"] == FORMAT_VERSION.decode()
        for r in recs:
            assert store.pith_for_alias(f"arxiv:{r['payload']['source_id']}") == r["pith_number"]
            assert store.state(r["pith_number"]) == states[r["pith_number"]]
        assert store.replay(g.KEYRING).ok
    env = lmdb.open(str(path), max_dbs=32, subdir=True)
    with env.begin() as txn:
        assert txn.get(META_FORMAT, db=env.open_db(b"meta", txn=txn)) == FORMAT_VERSION
    env.close()


def test_a_rekey_that_takes_a_piths_record_away_takes_its_aliases_away(tmp_path: Path) -> None:
    rec = g.record("2501.00009", at=100)
    pith = rec["pith_number"]
    hint = g.mirror_hint(pith, 200, "https://m.example/b")
    revoked = make_keyring(test_keyring_entries(("registry", "mirror", "author"),
                                                registry={"revoked_at": g.ts(50)}))  # fmt: skip
    with Store.open(tmp_path / "s") as store:
        store.append([g.encoded(rec), g.encoded(hint)], g.KEYRING)
        assert store.pith_for_alias("arxiv:2501.00009") == pith
        store.rekey(revoked)  # the record is signed after its key's revocation: pending
        assert store.status(pith)["status"] == "pending"
        for alias in ("arxiv:2501.00009", "arxiv:2501.00009v1", "doi:10.48550/arxiv.2501.00009"):
            assert store.piths_for_alias(alias) == [], alias
        assert store.replay(revoked).ok
        store.rekey(g.KEYRING)
        assert store.pith_for_alias("arxiv:2501.00009") == pith
        assert store.replay(g.KEYRING).ok
