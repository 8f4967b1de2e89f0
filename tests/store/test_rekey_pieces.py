"""A keyring change piece by piece (``docs/store.md``, "A keyring change"): a preferred
copy re-picked in a judging piece, each pith's state whole between the pieces, and the
store at the end that of a full reduction under the new keyring, no mark left."""

from __future__ import annotations

from pathlib import Path

import eventgen as g
from test_rekey import keyring, reference

from pithlog.protocol.canonical import jcs
from pithlog.protocol.text_forms import encode_b64
from pithlog.store import Store, rekey


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
