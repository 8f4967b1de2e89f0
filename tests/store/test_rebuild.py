"""``Store.rebuild`` (``pithlog replay --rebuild``) as the repair ``replay --verify`` leads
to: every derived table written anew from the log itself (``copies``, ``seq`` and the
pointers of ``events`` and ``evidence``), byte for byte what a fresh append of the store's
export writes; a damaged log refused, nothing written (docs/store.md, "Replay")."""

from __future__ import annotations

import io
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import eventgen as g
import pytest

from pithlog.cli import main
from pithlog.errors import StoreError
from pithlog.store import Store
from pithlog.store.layout import DB_NAMES, VALID
from pithlog.testing import test_keyring_entries

Damage = Callable[[Any, dict[str, Any]], None]


def log_lines() -> list[bytes]:
    """Some of everything, with second valid copies and forged copies kept as evidence."""
    events = g.mixed_events(random.Random(5), piths=8, per_pith=8)
    signer = {"record_created": "registry", "author_attestation": "author"}
    lines = [g.encoded(e) for e in events]
    lines += [g.encoded(g.resigned(e, signer.get(e["event_type"], "mirror"), bytes([i + 1]) * 32))
              for i, e in enumerate(events[::5])]  # fmt: skip
    lines += [g.encoded(g.forged(e)) for e in events[::7]]
    return lines


def tables(store: Store) -> dict[str, list[tuple[bytes, bytes]]]:
    """Every named database, entry by entry in LMDB's order."""
    return store._read(lambda txn, dbs: {name: list(txn.cursor(db=dbs[name]))
                                         for name in DB_NAMES})  # fmt: skip


@pytest.fixture
def stores(tmp_path: Path) -> tuple[Store, dict[str, list[tuple[bytes, bytes]]]]:
    """A store, and the tables of a fresh append of its export (the same as its own)."""
    lines = log_lines()
    store = Store.open(tmp_path / "s")
    store.append(lines, g.KEYRING, keep_invalid=True)
    with Store.open(tmp_path / "fresh") as fresh:
        fresh.append([data for _, data in store.export()], g.KEYRING, keep_invalid=True)
        expected = tables(fresh)
    assert tables(store) == expected
    return store, expected


def nth(name: str, n: int = 3) -> Damage:
    """Damage: the ``n``-th entry of ``name`` deleted."""

    def damage(txn: Any, dbs: dict[str, Any]) -> None:
        keys = list(txn.cursor(db=dbs[name]).iternext(values=False))
        txn.delete(keys[n], db=dbs[name])

    return damage


def renamed(name: str, n: int = 3) -> Damage:
    """Damage: a second entry of ``name`` with the ``n``-th's value, its key's last byte
    flipped."""

    def damage(txn: Any, dbs: dict[str, Any]) -> None:
        key, value = list(txn.cursor(db=dbs[name]))[n]
        txn.put(key[:-1] + bytes([key[-1] ^ 1]), value, db=dbs[name])

    return damage


def repointed(txn: Any, dbs: dict[str, Any]) -> None:
    """Damage: an ``events`` pointer naming the next copy in ``seq``."""
    eid, pointer = next(iter(txn.cursor(db=dbs["events"])))
    txn.put(eid, pointer[:-1] + bytes([pointer[-1] + 1]), db=dbs["events"])


PRIMARY: dict[str, Damage] = {
    "a seq entry deleted": nth("seq"),
    "a seq entry added": renamed("seq", -1),
    "a copy deleted": nth("copies"),
    "an events pointer repointed": repointed,
    "an events key added": renamed("events"),
    "an evidence pointer deleted": nth("evidence"),
}


@pytest.mark.parametrize("how", sorted(PRIMARY))
def test_a_damaged_log_is_refused_and_nothing_written(
    stores: tuple[Store, dict[str, Any]], how: str
) -> None:
    """Damage to the log itself cannot be repaired by re-deriving the tables from it: a
    rebuild from a repointed ``events`` pointer wrote every state from the wrong copies,
    and from a deleted ``seq`` entry it reported success; each is refused whole."""
    store, _ = stores
    store._write(PRIMARY[how])
    assert not store.replay(g.KEYRING).ok
    before = tables(store)
    with pytest.raises(StoreError) as caught:
        store.rebuild(g.KEYRING)
    assert caught.value.code == "store.corrupted"
    assert "replay --verify" in str(caught.value)
    assert tables(store) == before
    store.close()


def stray(name: str) -> Damage:
    """Damage: an entry of ``name`` under a pith that holds no event."""

    def damage(txn: Any, dbs: dict[str, Any]) -> None:
        key, value = next(iter(txn.cursor(db=dbs[name])))
        txn.put(b"pith:2025:AAAAAAAAAAAAAAAAAAAAAAAAAA" + key[36:], value, db=dbs[name])

    return damage


def emptied(name: str) -> Damage:
    def damage(txn: Any, dbs: dict[str, Any]) -> None:
        txn.drop(dbs[name], delete=False)

    return damage


DERIVED = ("by_pith", "piths", "applied", "slots", "equivocated", "invalid", "aliases",
           "by_key")  # fmt: skip


@pytest.mark.parametrize("name", DERIVED)
@pytest.mark.parametrize("how", ["deleted", "added", "stray", "emptied"])
def test_a_rebuild_writes_every_derived_table_as_a_fresh_append(
    stores: tuple[Store, dict[str, Any]], name: str, how: str
) -> None:
    """Each derived table, damaged, is after a rebuild what a fresh append of the export
    wrote, and replay finds nothing. ``by_key`` was not rebuilt at all (its missing entries
    were still reported), a deleted ``by_pith`` entry had its event dropped from its pith's
    state (the damage spread to the states), an added one stopped the rebuild
    (``store.corrupted``), and index entries of a pith with no events stayed."""
    store, expected = stores
    damage = {"deleted": nth(name), "added": renamed(name), "stray": stray(name),
              "emptied": emptied(name)}[how]  # fmt: skip
    store._write(damage)
    assert tables(store) != expected
    store.rebuild(g.KEYRING)
    assert tables(store) == expected
    assert store.replay(g.KEYRING).ok
    store.close()


def wrong_verdict(txn: Any, dbs: dict[str, Any]) -> None:
    """Damage: the first ``valid`` verdict made ``bad_signature`` (well-formed, wrong)."""
    key = next(k for k, v in txn.cursor(db=dbs["verdicts"]) if v == VALID)
    txn.put(key, b"bad_signature", db=dbs["verdicts"])


def junk_verdicts(txn: Any, dbs: dict[str, Any]) -> None:
    """Damage: a key of the wrong length, and a verdict naming no stored copy."""
    txn.put(b"junk", b"valid", db=dbs["verdicts"])
    txn.put(b"\x01" * 32 + (10**6).to_bytes(8, "big"), b"bad_signature", db=dbs["verdicts"])


VERDICT_DAMAGE: dict[str, Damage] = {"a wrong verdict": wrong_verdict,
                                     "junk verdicts": junk_verdicts}  # fmt: skip


@pytest.mark.parametrize("how", sorted(VERDICT_DAMAGE))
def test_a_rebuild_with_verify_judges_every_copy_again(
    stores: tuple[Store, dict[str, Any]], how: str, tmp_path: Path
) -> None:
    """``replay --verify`` names a damaged verdict; the repair it leads to, ``replay
    --rebuild --verify``, trusted it: a ``valid`` verdict made ``bad_signature`` was
    one verdict line before and six after (the states re-reduced from it), and junk
    entries stayed. With ``verify`` every copy is checked again and ``verdicts`` written
    anew; a plain rebuild still takes the cached verdict's word (docs/store.md)."""
    store, expected = stores
    store._write(VERDICT_DAMAGE[how])
    assert [d.kind for d in store.replay(g.KEYRING, verify=True).discrepancies] == (
        ["verdicts"] * (1 if how == "a wrong verdict" else 2))  # fmt: skip
    store.rebuild(g.KEYRING)
    assert tables(store) != expected  # the cached verdicts are taken as they are
    store.rebuild(g.KEYRING, verify=True)
    assert tables(store) == expected
    assert store.replay(g.KEYRING, verify=True).ok
    store._write(VERDICT_DAMAGE[how])
    path = store.path
    store.close()
    keyring = tmp_path / "keyring.json"
    keyring.write_text(json.dumps({"keyring_version": "1", "keys": test_keyring_entries()}))
    err = io.StringIO()
    status = main(["--store", str(path), "replay", "--rebuild", "--verify", "--keyring",
                   str(keyring)], stdout=io.BytesIO(), stderr=err)  # fmt: skip
    assert status == 0, err.getvalue()
    assert "signatures verified" in err.getvalue()
    with Store.open(path) as again:
        assert tables(again) == expected


def changed_value(name: str, n: int = 3) -> Damage:
    """Damage: the ``n``-th entry of ``name`` given another value of the same length."""

    def damage(txn: Any, dbs: dict[str, Any]) -> None:
        key, value = list(txn.cursor(db=dbs[name]))[n]
        txn.put(key, value[:-1] + bytes([value[-1] ^ 1]), db=dbs[name])

    return damage


@pytest.mark.parametrize("name", ["merkle", "by_copy"])
@pytest.mark.parametrize("how", ["deleted", "added", "changed", "emptied"])
def test_a_rebuild_writes_the_tree_and_by_copy_anew_from_seq(
    stores: tuple[Store, dict[str, Any]], name: str, how: str
) -> None:
    """``merkle`` and ``by_copy`` are derived from ``seq`` as the states are from the
    copies, and replay names their damage (``merkle`` lines), but a rebuild left them as
    they were: the same lines after it. They are written anew from ``seq``, which the
    rebuild has proven whole, so the tree is the one every checkpoint was signed over."""
    store, expected = stores
    size, root = store.tree_root()
    damage = {"deleted": nth(name), "added": renamed(name), "changed": changed_value(name),
              "emptied": emptied(name)}[how]  # fmt: skip
    store._write(damage)
    assert tables(store) != expected
    assert "merkle" in {d.kind for d in store.replay(g.KEYRING).discrepancies}
    store.rebuild(g.KEYRING)
    assert tables(store) == expected
    assert store.replay(g.KEYRING).ok
    assert store.tree_root() == (size, root)
    store.close()
