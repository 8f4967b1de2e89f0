"""A keyring change piece by piece (``docs/store.md``, "A keyring change"): a preferred
copy re-picked in a judging piece, each pith's state whole between the pieces, and the
store at the end that of a full reduction under the new keyring, no mark left."""

from __future__ import annotations

from pathlib import Path

import eventgen as g
import lmdb
from oldformat import as_format_5
from test_rekey import assert_reduced, keyring, reference, sparse_log

from pithlog.protocol.canonical import jcs
from pithlog.protocol.text_forms import encode_b64
from pithlog.store import Store, rekey
from pithlog.store.layout import META_REKEY_CURSOR, copy_hash
from pithlog.testing import TRUSTED


def test_a_copy_preferred_anew_in_a_piece_leaves_its_pith_whole(tmp_path: Path) -> None:
    # Under a keyring without the author's key both copies of the attestation fail check 4,
    # and step 0 then prefers the smaller one: the copy whose (bad) signature is shorter,
    # which the index's spans of the other copy do not slice.
    rec = g.record("2501.00011", at=10)
    pith = rec["pith_number"]
    att = g.attestation(pith, 50)
    short = {**att, "signature_b64": encode_b64(bytes(32))}
    assert jcs(short) < jcs(att)
    others = [g.attestation(g.record(f"2501.0002{i}")["pith_number"], 60 + i, f"other {i}")
              for i in range(4)]  # fmt: skip
    lines = [jcs(e) for e in (rec, att, short, *others)]
    new = keyring(("registry", "mirror"))
    with Store.open(tmp_path / "s") as store:
        store.append(lines, g.KEYRING, keep_invalid=True)
        was, will = reference(lines, g.KEYRING), reference(lines, new)
        assert was[pith] != will[pith]
        assert store.event(att["event_id"]) == jcs(att)
        step = store._write(rekey.piece_work(new, piece_copies=1, piece_events=1))
        pieces = 1
        while not step.done:
            for p, state in was.items():
                assert store.state(p) in (state, will[p]), (pieces, p)
            step = store._write(rekey.piece_work(new, 1, 1, take_over=False))
            pieces += 1
        assert pieces > 3
        assert store.event(att["event_id"]) == jcs(short)
        assert store.keyring_digest() == new.digest
        for p, state in will.items():
            assert store.state(p) == state, p
        assert store.stats()["counts"]["rekey"] == 0
        assert store.replay(new).ok


def test_a_change_under_way_in_a_format_5_store_judges_every_copy_after_migration(
    tmp_path: Path,
) -> None:
    # A format-5 rekey cursor is a by_key key of that format (key_id hash + event_id +
    # copy hash): the migration rewrites by_key, so the walk must start again.
    lines = sparse_log(piths=12, per_pith=5, seed=13)
    new = keyring(TRUSTED, author={"revoked_at": g.ts(250)})
    path = tmp_path / "s"
    with Store.open(path) as store:
        store.append(lines, g.KEYRING, keep_invalid=True)
        assert not store._write(rekey.piece_work(new, piece_copies=2)).done
        cursor = store._read(lambda txn, dbs: txn.get(META_REKEY_CURSOR, db=dbs["meta"]))
        assert cursor is not None and len(cursor) == 40
        eid = store._read(lambda txn, dbs: txn.get(cursor[32:], db=dbs["seq"]))[:32]
        data = store.event("sha256:" + eid.hex())
    as_format_5(path)
    old_form = cursor[:32] + eid + copy_hash(data)  # what format 5 kept for that copy
    env = lmdb.open(str(path), max_dbs=32, subdir=True)
    try:
        with env.begin(write=True) as txn:
            txn.put(META_REKEY_CURSOR, old_form, db=env.open_db(b"meta", txn=txn))
    finally:
        env.close()
    with Store.open(path, create=False) as store:
        store.rekey(new)
        assert store.keyring_digest() == new.digest
        assert_reduced(store, reference(lines, new))
        assert store.stats()["counts"]["rekey"] == 0
        assert store.replay(new).ok
