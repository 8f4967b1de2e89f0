"""``append`` under hostile bytes: a line refused at the door or rejected by checks 1-12
stores nothing, a batch of only such lines leaves the store byte for byte as it was, and the
store stays one that ``replay --verify`` accepts.

Each example opens a store that already holds the valid corpus, then appends a batch of
hostile lines (mutations, junk, re-sealed hostile content) mixed with copies of valid events.
"""

from __future__ import annotations

import tempfile

from hypothesis import given
from hypothesis import strategies as st

from pithlog.protocol.events import parse_envelope
from pithlog.store import EVIDENCE, REFUSED, REJECTED, REPLACED, STORED, Store

from .corpus import KEYRING, ORIGINALS, budget, junk, mutations, resealed

_hostile = st.one_of(mutations().map(lambda pair: pair[1]), junk(), resealed())


def _holdings(store: Store) -> list[tuple[int, bytes]]:
    return list(store.export())


@budget(25)
@given(batch=st.lists(_hostile, min_size=1, max_size=8))
def test_hostile_lines_store_nothing_and_the_store_stays_consistent(batch: list[bytes]) -> None:
    with tempfile.TemporaryDirectory() as folder, Store.open(folder) as store:
        store.append(ORIGINALS, KEYRING)
        before = _holdings(store)
        states = {p["pith_number"]: store.state(p["pith_number"]) for p in store.piths()}
        results = store.append(batch, KEYRING)
        assert len(results) == len(batch)
        stored = [r for r in results if r.status == STORED]
        after = _holdings(store)
        # What was there is still there, in order; only copies reported stored (or kept as
        # another copy of a stored event) were added.
        assert after[: len(before)] == before
        added = [data for _, data in after[len(before) :]]
        # Every new copy in the log is one the batch reported as kept, and nothing else.
        kept = [r for r in results if r.status in (STORED, REPLACED, EVIDENCE)]
        assert len(added) == len(kept)
        for result, line in zip(results, batch, strict=True):
            if result.status == REJECTED:
                assert parse_envelope(line).encoded not in added
                assert store.event(result.event_id or "") in (None, *(d for _, d in before))
        if not stored and all(r.status in (REFUSED, REJECTED) for r in results):
            assert after == before
            assert {p["pith_number"]: store.state(p["pith_number"])
                    for p in store.piths()} == states  # fmt: skip
        report = store.replay(KEYRING)
        assert report.ok, [d.line() for d in report.discrepancies]


@budget(15)
@given(batch=st.lists(_hostile, min_size=1, max_size=6))
def test_a_rejected_batch_leaves_the_store_unchanged_under_keep_invalid_too(
    batch: list[bytes],
) -> None:
    """With --keep-invalid, refused lines still store nothing; invalid copies are stored
    as evidence of invalidity and the store still replays."""
    with tempfile.TemporaryDirectory() as folder, Store.open(folder) as store:
        store.append(ORIGINALS, KEYRING)
        before = _holdings(store)
        results = store.append(batch, KEYRING, keep_invalid=True)
        after = _holdings(store)
        assert after[: len(before)] == before
        refused = [line for r, line in zip(results, batch, strict=True) if r.status == REFUSED]
        added = {data for _, data in after[len(before) :]}
        assert not added & set(refused)
        assert store.replay(KEYRING).ok
