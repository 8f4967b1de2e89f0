"""Store.append_batches: the pipeline gives what append() gives, batch by batch."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import eventgen as g
import pytest

import pithlog.store
from pithlog.store import AppendResult, Store


def batches_of(rng: random.Random) -> list[list[bytes]]:
    """Batches that cross each other: the same copy in two batches, a better or worse copy
    of an event in a later batch than the event, lines the door refuses, invalid events."""
    events = g.mixed_events(rng, piths=6, per_pith=8)
    lines = [g.encoded(e) for e in events]
    extra = []
    signers = {"record_created": "registry", "correction": "registry", "mirror_hint": "mirror"}
    for event in rng.sample([e for e in events if e["event_type"] in signers], 12):
        extra.append(g.encoded(g.forged(event)))  # loses to the stored copy
        resigned = g.resigned(event, signers[event["event_type"]], bytes([7]) * 32)
        extra.append(g.encoded(resigned))  # a second valid copy: one of the two is preferred
    lines += extra + rng.sample(lines, 10)  # exact duplicates, some in later batches
    lines += [b"{not json", b'{"event_id":1}']
    rng.shuffle(lines)
    cut = sorted(rng.sample(range(1, len(lines)), 5))
    return [lines[a:b] for a, b in zip([0, *cut], [*cut, len(lines)], strict=True)]


def snapshot(store: Store) -> tuple[Any, ...]:
    piths = [p["pith_number"] for p in store.piths()]
    stats = store.stats()
    return (
        [store.state(p) for p in piths],
        [stats[k] for k in ("counts", "piths_with_state", "piths_pending", "keyring_digest")],
        list(store.export()),
    )


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("keep_invalid", [False, True])
def test_pipeline_equals_batch_by_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, keep_invalid: bool
) -> None:
    batches = batches_of(random.Random(seed))
    with Store.open(tmp_path / "one") as store:
        one: list[list[AppendResult]] = [
            store.append(b, g.KEYRING, keep_invalid=keep_invalid) for b in batches
        ]
        expected = snapshot(store)
        assert store.replay(g.KEYRING).ok
    monkeypatch.setattr(pithlog.store, "PIPELINE_MIN", 0)  # helper processes from batch 2
    with Store.open(tmp_path / "two") as store:
        two = list(store.append_batches(iter(batches), g.KEYRING, keep_invalid=keep_invalid))
        assert two == one
        assert snapshot(store) == expected
        assert store.replay(g.KEYRING).ok
    statuses = {r.status for results in one for r in results}
    assert {"stored", "duplicate", "refused", "evidence"} <= statuses


@pytest.mark.parametrize("helpers", [False, True])
def test_a_failing_batch_leaves_the_batches_before_it_committed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, helpers: bool
) -> None:
    if helpers:  # the second batch is started in helper processes, then abandoned
        monkeypatch.setattr(pithlog.store, "PIPELINE_MIN", 0)
    events = g.mixed_events(random.Random(3), piths=2, per_pith=4)
    lines = [g.encoded(e) for e in events]

    def batches() -> Any:
        yield lines[:5]
        yield lines[5:]
        raise RuntimeError("the input broke")

    with Store.open(tmp_path / "s") as store:
        done = []
        with pytest.raises(RuntimeError):
            for results in store.append_batches(batches(), g.KEYRING):
                done.append(results)
        assert len(done) == 1  # the second batch was started, not committed
        assert store.stats()["counts"]["seq"] == sum(r.status == "stored" for r in done[0])
        assert store.replay(g.KEYRING).ok
