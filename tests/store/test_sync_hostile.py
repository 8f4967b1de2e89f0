"""Sync against a hostile source: every limit holds, junk is refused, and invalid copies are
kept only when the source proves them leaves of a trusted checkpoint."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import eventgen as g
import pytest

from pithlog.errors import SyncError
from pithlog.net import sources
from pithlog.net import sync as s
from pithlog.net import sync_pull as sp
from pithlog.net import syncmsg as m
from pithlog.store import Store
from pithlog.transparency.checkpoint import Checkpoint


class Hostile:
    """A transport whose other side answers as ``answer(message)`` says, counting rounds."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.sent = self.received = self.messages = 0
        self.remote_items: int | None = None
        self.rounds = 0

    def request(self, message: bytes) -> bytes:
        if message[:1] == b"R":
            self.rounds += 1
        self.sent += len(message)
        reply: bytes = self.answer(message)
        self.received += len(reply)
        self.messages += 2
        return reply


def _random_ranges(rng: random.Random, count: int) -> list[m.Entry]:
    bounds = sorted({rng.randbytes(8) for _ in range(count - 1)})
    return [m.Entry(b, m.FINGERPRINT_MODE, rng.randbytes(m.FINGERPRINT))
            for b in [*bounds, None]]  # fmt: skip


def _items(n: int, seed: int = 1) -> list[bytes]:
    rng = random.Random(seed)
    return sorted(rng.randbytes(64) for _ in range(n))


def test_random_fingerprints_stop_at_the_round_limit() -> None:
    """A source answering every range with a random fingerprint never lets reconciliation
    end: it stops after MAX_ROUNDS rounds, at once."""
    rng = random.Random(3)

    def answer(message: bytes) -> bytes:
        asked = m.decode_reconcile(message)
        return m.encode_reconcile(_random_ranges(rng, max(2, len(asked))))

    hostile = Hostile(answer)
    started = time.monotonic()
    with pytest.raises(SyncError, match=r"did not end in 32 rounds") as caught:
        sp.reconcile(_items(500), hostile)
    assert caught.value.code == "sync.limit"
    assert hostile.rounds == s.MAX_ROUNDS
    assert time.monotonic() - started < 5


def test_an_answer_growing_sixteenfold_each_round_stops_on_bytes() -> None:
    rng = random.Random(4)

    def answer(message: bytes) -> bytes:
        asked = m.decode_reconcile(message)
        return m.encode_reconcile(_random_ranges(rng, s.BRANCHES * len(asked)))

    hostile = Hostile(answer)
    limits = s.Limits(max_reconcile_bytes=1 << 20)
    with pytest.raises(SyncError, match="reconciliation took over") as caught:
        sp.reconcile(_items(500), hostile, limits)
    assert caught.value.code == "sync.limit"
    assert hostile.sent + hostile.received < 20 << 20
    assert hostile.rounds < 8


def _cut_in_sixteen(message: bytes) -> bytes:
    """Every range asked about cut into 16 parts of fingerprints no side holds, their bounds
    one byte longer each round: the most ranges the pulling side lets an answer hold."""
    out: list[m.Entry] = []
    lower = b""
    for e in m.decode_reconcile(message):
        if e.mode == m.SKIP:
            out.append(e)
        else:
            at = lower.ljust(len(e.bound or b""), b"\0")
            out += [m.Entry(at + bytes([16 * j]), m.FINGERPRINT_MODE, b"\1" * 16)
                    for j in range(1, 16)]  # fmt: skip
            out.append(m.Entry(e.bound, m.FINGERPRINT_MODE, b"\1" * 16))
        lower = e.bound if e.bound is not None else lower
    return m.encode_reconcile(out)


def test_a_round_is_held_to_the_ranges_the_two_sides_can_differ_in() -> None:
    """Each range left to ask about differs, so holds a copy of this side's or one it lacks:
    a round leaving more than len(local) + max_needed is refused as it is read. Bounded by
    the bytes of reconciliation alone, a source cutting every range in 16 made a round of
    11 million ranges within the 256 MiB (2.4 GB, 72 s)."""
    hostile = Hostile(_cut_in_sixteen)
    limits = s.Limits(max_needed=1000, max_reconcile_bytes=16 << 20)
    with pytest.raises(SyncError, match="more than 1500 differing ranges") as caught:
        sp.reconcile(_items(500), hostile, limits)
    assert caught.value.code == "sync.limit"
    assert hostile.received < 1 << 20


def test_more_ranges_than_asked_for_are_refused() -> None:
    rng = random.Random(5)

    def answer(message: bytes) -> bytes:
        asked = m.decode_reconcile(message)
        return m.encode_reconcile(_random_ranges(rng, s.BRANCHES * len(asked) + 1))

    with pytest.raises(SyncError, match=r"an answer of more than 16 ranges to 1 asked"):
        sp.reconcile(_items(50), Hostile(answer))


def test_a_listing_of_too_many_missing_copies_is_refused() -> None:
    rng = random.Random(6)

    def answer(message: bytes) -> bytes:
        shorts = tuple(rng.randbytes(m.SHORT) for _ in range(300))
        return m.encode_reconcile([m.Entry(None, m.ITEMS, items=shorts)])

    with pytest.raises(SyncError, match="more than 200 copies"):
        sp.reconcile([], Hostile(answer), s.Limits(max_needed=200))
    # the same listing within the limit is what the pulling side then asks for
    need, rounds = sp.reconcile([], Hostile(answer), s.Limits(max_needed=300))
    assert len(need) == 300 and rounds == 1


def test_oversize_messages_are_refused_both_ways() -> None:
    responder = s.Responder(_items(100), list, lambda keys: [], limits=s.Limits(max_message=64))
    with pytest.raises(SyncError, match="a message of 82 bytes") as caught:
        responder.handle(m.encode_shorts(b"F", [b"\0" * m.SHORT] * 5))
    assert caught.value.code == "sync.limit"
    big = Hostile(lambda message: b"R" + b"\0" * 100)
    with pytest.raises(SyncError, match="an answer of 101 bytes"):
        sp.reconcile(_items(10), big, s.Limits(max_message=100))


def test_too_many_proofs_asked_at_once_are_refused() -> None:
    responder = s.Responder(_items(10), list, lambda keys: [],
                            lambda size, keys: [None] * len(keys))  # fmt: skip
    ask = b"P" + m.varint(5) + m.encode_shorts(b"", [b"\0" * m.SHORT] * (s.MAX_PROOFS + 1))
    with pytest.raises(SyncError, match="proofs of 4097 copies") as caught:
        responder.handle(ask)
    assert caught.value.code == "sync.limit"
    fine = b"P" + m.varint(5) + m.encode_shorts(b"", [b"\0" * m.SHORT] * s.MAX_PROOFS)
    assert responder.handle(fine) == b"Q" + b"\0" * s.MAX_PROOFS


def test_too_many_proofs_are_refused_by_their_declared_count() -> None:
    """A ``P`` message's count is held to MAX_PROOFS before its short ids are read: one
    declaring more is sync.limit even when the ids are not there (they were split first, 1 s
    and 150 MB for a message of 32 MiB, then counted), and a whole message of 2 million
    ids is refused about as fast as a tiny one."""
    responder = s.Responder(_items(10), list, lambda keys: [],
                            lambda size, keys: [None] * len(keys))  # fmt: skip
    cut = b"P" + m.varint(5) + m.varint(s.MAX_PROOFS + 1) + b"\0" * m.SHORT
    with pytest.raises(SyncError, match="proofs of 4097 copies") as caught:
        responder.handle(cut)
    assert caught.value.code == "sync.limit"
    n = (s.MAX_MESSAGE - 20) // m.SHORT
    whole = b"P" + m.varint(5) + m.varint(n) + bytes(n * m.SHORT)
    started = time.perf_counter()
    with pytest.raises(SyncError, match=f"proofs of {n} copies") as caught:
        responder.handle(whole)
    assert caught.value.code == "sync.limit"
    assert time.perf_counter() - started < 0.1


def test_item_lists_asked_are_refused_by_their_declared_count() -> None:
    """A responder answers an item list of a reconcile message as a skipped range, so a
    message's lists are held to MAX_ASKED_ITEMS short ids in all, from the counts they
    declare: 2 million of them were split (0.4-1 s and 150 MB for a message of 32 MiB)
    before being ignored. A message within the limit is answered as before."""
    responder = s.Responder(_items(10), list, lambda keys: [])
    one = b"\0" * m.SHORT
    half = s.MAX_ASKED_ITEMS // 2
    fine = m.encode_reconcile([m.Entry(b"\x80", m.ITEMS, items=(one,) * half),
                               m.Entry(None, m.ITEMS, items=(one,) * half)])  # fmt: skip
    assert m.decode_reconcile(responder.handle(fine)) == [m.Entry(None, m.SKIP)]
    over = m.encode_reconcile([m.Entry(b"\x80", m.ITEMS, items=(one,) * half),
                               m.Entry(None, m.ITEMS, items=(one,) * (half + 1))])  # fmt: skip
    with pytest.raises(SyncError, match="item lists of 4097 short ids") as caught:
        responder.handle(over)
    assert caught.value.code == "sync.limit"
    cut = b"R" + bytes([255, m.ITEMS]) + m.varint(s.MAX_ASKED_ITEMS + 1) + one
    with pytest.raises(SyncError, match="item lists of 4097 short ids"):
        responder.handle(cut)
    n = (s.MAX_MESSAGE - 20) // m.SHORT
    whole = b"R" + bytes([255, m.ITEMS]) + m.varint(n) + bytes(n * m.SHORT)
    started = time.perf_counter()
    with pytest.raises(SyncError, match=f"item lists of {n} short ids") as caught:
        responder.handle(whole)
    assert caught.value.code == "sync.limit"
    assert time.perf_counter() - started < 0.1


def _events(seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [e for e in g.mixed_events(rng, piths=4, per_pith=5)
            if e["signer"]["key_id"] != "test-stranger"]  # fmt: skip


def _junk_source(store: Store, copies: list[bytes]) -> Hostile:
    """A source listing ids it made up, then sending other (valid, signed) copies for them."""
    rng = random.Random(7)
    shorts = sorted(rng.randbytes(m.SHORT) for _ in range(len(copies)))

    def answer(message: bytes) -> bytes:
        kind = message[:1]
        if kind == b"R":
            return m.encode_reconcile([m.Entry(None, m.ITEMS, items=tuple(shorts))])
        if kind == b"F":
            return b"O" + message[1:]
        asked = m.decode_shorts(message)
        data = copies[: len(asked)]
        return b"D" + m.varint(len(data)) + b"".join(m.varint(len(d)) + d for d in data)

    return Hostile(answer)


@pytest.mark.parametrize("junk", ["other copies", "not json"])
def test_copies_that_are_not_the_ones_asked_for_are_refused(tmp_path: Path, junk: str) -> None:
    events = _events(8)
    copies = [g.encoded(e) for e in events]
    if junk == "not json":
        copies = [b"{" * 10 for _ in copies]
    with Store.open(tmp_path / "s") as store:
        store.append(copies[:3] if junk == "other copies" else [], g.KEYRING)
        before = store.copy_keys()
        with pytest.raises(SyncError) as caught:
            sp.pull(store, _junk_source(store, copies), g.KEYRING)
        assert caught.value.code == "sync.mismatch"
        assert store.copy_keys() == before


def test_a_fetch_answered_in_parts_still_gets_every_copy(tmp_path: Path) -> None:
    events = _events(9)
    with Store.open(tmp_path / "a") as a, Store.open(tmp_path / "b") as b:
        a.append([g.encoded(e) for e in events], g.KEYRING)
        largest = max(len(d) for _, d in a.export())
        limits = s.Limits(max_message=3 * largest)
        channel = sp.Channel(sources.store_responder(a, limits))
        report = sp.pull(b, channel, g.KEYRING, limits=limits)
        assert b.copy_keys() == a.copy_keys() and report.statuses["stored"] == len(events)
        # one G message could not hold them: several were needed (besides an R and an F)
        total = sum(len(d) for _, d in a.export())
        fetches = report.messages // 2 - 2
        assert fetches >= 2 and fetches >= -(-total // limits.max_message)


def test_a_large_list_all_is_answered_in_parts() -> None:
    remote = _items(3000, seed=2)
    responder = s.Responder(remote, list, lambda keys: [], limits=s.Limits(max_listed=100))
    need, rounds = sp.reconcile([], sp.Channel(responder))
    assert need == sorted(m.short_id(i) for i in remote) and rounds > 1


# --- invalid copies: kept only when proven leaves of a trusted checkpoint -----------------


def _with_invalid(tmp_path: Path) -> tuple[Store, list[bytes]]:
    events = _events(10)
    a = Store.open(tmp_path / "a")
    first = [g.encoded(e) for e in events[:12]] + [g.encoded(g.forged(events[0]))]
    later = [g.encoded(e) for e in events[12:]] + [g.encoded(g.forged(events[12]))]
    a.append(first, g.KEYRING, keep_invalid=True)
    a.append(later, g.KEYRING, keep_invalid=True)
    return a, first


def test_invalid_copies_are_kept_only_below_the_trusted_checkpoint(tmp_path: Path) -> None:
    a, first = _with_invalid(tmp_path)
    with a, Store.open(tmp_path / "b") as b:
        signed = Checkpoint("test.invalid/log", *a.tree_root(len(first)))
        report = sp.pull(b, sources.store_responder(a), g.KEYRING, signed)
        # the forged copy below the checkpoint's size is kept, the one after it is not
        assert report.statuses["evidence"] == 1 and report.statuses["rejected"] == 1
        assert report.proven == len(first)
        assert b.tree_root(len(first)) == a.tree_root(len(first))
        # without a checkpoint, no invalid copy is kept
        with Store.open(tmp_path / "c") as c:
            plain = sp.pull(c, sources.store_responder(a), g.KEYRING)
            assert plain.statuses["rejected"] == 2 and plain.proven == 0


def test_a_source_lying_about_proofs_keeps_nothing_invalid(tmp_path: Path) -> None:
    a, _ = _with_invalid(tmp_path)
    with a, Store.open(tmp_path / "b") as b:
        honest = sources.store_responder(a)
        rng = random.Random(11)

        def lying(size: int, keys: list[bytes]) -> list[tuple[int, list[bytes]] | None]:
            return [(i, [rng.randbytes(32) for _ in range(5)]) for i in range(len(keys))]

        liar = s.Responder(honest.items, honest._order, honest._copies, lying)
        # a checkpoint of the whole tree, but with a root the source's proofs cannot reach
        _, root = a.tree_root()
        signed = Checkpoint("test.invalid/log", a.tree_size(), root)
        report = sp.pull(b, liar, g.KEYRING, signed)
        assert report.proven == 0 and report.statuses["rejected"] == 2


def test_a_request_of_too_many_ranges_is_refused_before_it_is_read_whole() -> None:
    """A 32 MiB reconcile message holds millions of ranges of a few bytes: six million held
    a responder for 52 s and 2 GB. Past MAX_RANGES ranges it is refused as it is read."""
    responder = s.Responder(_items(100), list, lambda keys: [])
    bounds = [i.to_bytes(3, "big") for i in range(1, s.MAX_RANGES + 1)]
    asked = [m.Entry(b, m.EXPAND) for b in bounds] + [m.Entry(None, m.SKIP)]
    with pytest.raises(SyncError, match=f"more than {s.MAX_RANGES} ranges") as caught:
        responder.handle(m.encode_reconcile(asked))
    assert caught.value.code == "sync.limit"
    assert len(m.decode_reconcile(responder.handle(m.encode_reconcile(asked[1:])))) > 1
    many = m.encode_reconcile([m.Entry(i.to_bytes(4, "big"), m.SKIP) for i in range(1, 1 << 20)]
                              + [m.Entry(None, m.SKIP)])  # fmt: skip
    started = time.monotonic()
    with pytest.raises(SyncError, match="more than 4 ranges"):
        m.decode_reconcile(many, 4)
    assert time.monotonic() - started < 0.1


@pytest.mark.parametrize("most", [3, 5, 64])
def test_a_round_of_more_ranges_than_a_message_holds_is_asked_in_parts(most: int) -> None:
    """The pulling side asks about at most ``max_ranges`` ranges per message, and still
    finds exactly what it lacks (rounds of thousands of differing ranges, cut in parts)."""
    rng = random.Random(most)
    both = _items(6000, seed=11)
    local = sorted(i for i in both if rng.random() < 0.7)
    remote = sorted(i for i in both if rng.random() < 0.7)
    limits = s.Limits(max_ranges=most)
    responder = s.Responder(remote, list, lambda keys: [], limits=limits)
    widest: list[int] = []

    def answer(message: bytes) -> bytes:
        widest.append(len(m.decode_reconcile(message)))
        return responder.handle(message)

    need, rounds = sp.reconcile(local, Hostile(answer), limits)
    assert need == sorted(m.short_id(i) for i in set(remote) - set(local))
    assert max(widest) <= most and len(widest) > rounds


def test_a_reply_about_ranges_not_asked_is_refused() -> None:
    """A round asked in parts: each answer may only skip the ranges its message did not ask
    about."""
    local = _items(3000, seed=12)
    limits = s.Limits(max_ranges=8)
    honest = s.Responder(_items(3000, seed=13), list, lambda keys: [], limits=limits)

    def answer(message: bytes) -> bytes:
        asked = m.decode_reconcile(message)
        if asked[0].mode == m.SKIP:  # a message of a later part: answer its skips too
            return m.encode_reconcile([m.Entry(None, m.ITEMS, items=(b"\0" * m.SHORT,))])
        return honest.handle(message)

    with pytest.raises(SyncError, match=r"not asked about|joins ranges") as caught:
        sp.reconcile(local, Hostile(answer), limits)
    assert caught.value.code == "sync.protocol"


def test_a_short_id_asked_again_and_again_is_looked_up_once() -> None:
    """An order or fetch message may repeat one short id two million times: the holder
    looked each one up (19 s per message over a store of 40 copies)."""
    items = _items(10)
    looked_up: list[int] = []

    def order(keys: list[bytes]) -> list[bytes]:
        looked_up.append(len(keys))
        return keys

    def copies(keys: list[bytes]) -> list[bytes]:
        looked_up.append(len(keys))
        return [b"{}" for _ in keys]

    responder = s.Responder(items, order, copies)
    shorts = [m.short_id(items[3])] * 100_000 + [m.short_id(items[1])] * 3
    assert m.decode_shorts(responder.handle(m.encode_shorts(b"F", shorts))) == \
        [m.short_id(items[3]), m.short_id(items[1])]  # fmt: skip
    assert responder.handle(m.encode_shorts(b"G", shorts)) == b"D\x02\x02{}\x02{}"
    assert looked_up == [2, 2]


def test_the_most_copies_listed_can_be_ordered_in_one_message() -> None:
    """MAX_ORDERED short ids make an order message the responder takes; one more does not
    (``--max-copies`` stops there)."""
    responder = s.Responder([], list, lambda keys: [])
    assert responder.handle(m.encode_shorts(b"F", [b"\0" * m.SHORT] * s.MAX_ORDERED)) == b"O\0"
    with pytest.raises(SyncError, match="a message of") as caught:
        responder.handle(m.encode_shorts(b"F", [b"\0" * m.SHORT] * (s.MAX_ORDERED + 1)))
    assert caught.value.code == "sync.limit"
