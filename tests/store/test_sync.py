"""Sync: range reconciliation finds exactly the missing copies; stores converge."""

from __future__ import annotations

import io
import random
import tracemalloc
from pathlib import Path
from typing import Any

import eventgen as g
import pytest

from pithlog.errors import SyncError
from pithlog.net import sources
from pithlog.net import sync as s
from pithlog.net import sync_pull as sp
from pithlog.net.syncmsg import SHORT, short_id
from pithlog.store import Store
from pithlog.transparency.checkpoint import Checkpoint


def _items(rng: random.Random, n: int) -> list[bytes]:
    out = {rng.randbytes(64) for _ in range(n)}
    # copies of one event: same first 32 bytes, another copy hash
    for item in list(out)[: n // 10]:
        out.add(item[:32] + rng.randbytes(32))
    return sorted(out)


@pytest.mark.parametrize(("n", "missing", "extra"), [
    (0, 0, 0), (0, 0, 5), (1, 1, 0), (5, 5, 0), (40, 0, 0), (40, 3, 2), (500, 1, 0),
    (500, 60, 30), (3000, 3000, 0), (3000, 7, 100), (3000, 0, 3000),
])  # fmt: skip
def test_reconcile_finds_exactly_what_is_missing(n: int, missing: int, extra: int) -> None:
    rng = random.Random(n * 1000 + missing * 7 + extra)
    remote = _items(rng, n)
    gone = set(rng.sample(range(len(remote)), min(missing, len(remote))))
    local = sorted([x for i, x in enumerate(remote) if i not in gone] + _items(rng, extra))
    channel = sp.Channel(s.Responder(remote, list, lambda keys: []))
    need, rounds = sp.reconcile(local, channel)
    assert need == sorted(short_id(remote[i]) for i in gone)
    assert rounds >= 1 and channel.messages == 2 * rounds
    if not gone and not extra:
        assert rounds == 1 and channel.sent + channel.received < 40


def test_a_small_difference_costs_little() -> None:
    rng = random.Random(1)
    remote = _items(rng, 20000)
    local = [x for i, x in enumerate(remote) if i % 1000 != 7]
    channel = sp.Channel(s.Responder(remote, list, lambda keys: []))
    need, _ = sp.reconcile(local, channel)
    assert len(need) == len(remote) - len(local)
    listing = len(remote) * SHORT
    assert channel.sent + channel.received < listing / 10


@pytest.mark.parametrize("message", [
    b"", b"X", b"R\x05ab", b"R\x01a\x09", b"R\x02bb\x00\x01aa\x00", b"R\x01a\x00",
    b"R\xff\x01" + b"\x00" * 15, b"R\xff\x02\x05" + b"\x00" * 16, b"F\x01" + b"\x00" * 3,
    b"R\x41" + b"\x00" * 65 + b"\x00", b"G\x02" + b"\x00" * 16, b"F" + b"\x80" * 10,
])  # fmt: skip
def test_messages_breaking_the_protocol_are_refused(message: bytes) -> None:
    responder = s.Responder(_items(random.Random(2), 50), list, lambda keys: [])
    with pytest.raises(SyncError, match="protocol"):
        responder.handle(message)


def _events(seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    events = g.mixed_events(rng, piths=6, per_pith=6)
    events += [g.forged(events[1]), g.resigned(events[2], "registry", b"second"),
               g.tampered(events[4])]  # fmt: skip
    return events


def _append(store: Store, events: list[dict[str, Any]]) -> None:
    for i in range(0, len(events), 9):
        store.append([g.encoded(e) for e in events[i : i + 9]], g.KEYRING, keep_invalid=True)


def _state_of(store: Store) -> dict[str, Any]:
    piths = store.piths()
    return {"piths": piths, "states": {p["pith_number"]: store.state(p["pith_number"])
                                       for p in piths}}  # fmt: skip


def test_two_stores_from_overlapping_halves_converge(tmp_path: Path) -> None:
    events = _events(3)
    rng = random.Random(4)
    a_events = [e for e in events if rng.random() < 0.6]
    b_events = [e for e in events if rng.random() < 0.6]
    rng.shuffle(b_events)
    with Store.open(tmp_path / "a") as a, Store.open(tmp_path / "b") as b:
        _append(a, a_events)
        _append(b, b_events)
        assert a.copy_keys() != b.copy_keys()
        with Store.open(tmp_path / "b", create=False, readonly=True) as b_read:
            first = sp.pull(a, sources.store_responder(b_read), g.KEYRING, _signed(b_read),
                           batch=7)  # fmt: skip
        with Store.open(tmp_path / "a", create=False, readonly=True) as a_read:
            second = sp.pull(b, sources.store_responder(a_read), g.KEYRING, _signed(a_read))
        assert first.needed > 0 and second.needed > 0
        assert set(first.statuses) <= {"stored", "replaced", "evidence"}
        assert a.copy_keys() == b.copy_keys()
        assert _state_of(a) == _state_of(b)
        # the same as one store holding both halves
        with Store.open(tmp_path / "all") as whole:
            _append(whole, [e for e in events if e in a_events or e in b_events])
            assert _state_of(whole) == _state_of(a)
            assert whole.copy_keys() == a.copy_keys()
        assert a.replay(g.KEYRING).ok and b.replay(g.KEYRING).ok
        again = sp.pull(a, sources.store_responder(b), g.KEYRING, _signed(b))
        assert again.needed == 0 and again.rounds == 1 and again.bytes_exchanged < 40


def _signed(store: Store) -> Checkpoint:
    """The checkpoint of ``store``'s whole tree (what a caller has verified)."""
    return Checkpoint("test.invalid/log", *store.tree_root())


def _export(lines: list[bytes]) -> io.BytesIO:
    return io.BytesIO(b"".join(line + b"\n" for line in lines))


def test_sync_from_an_export_file(tmp_path: Path) -> None:
    events = _events(5)
    with Store.open(tmp_path / "a") as a, Store.open(tmp_path / "b") as b:
        _append(a, events)
        _append(b, events[::3])
        lines = [data for _, data in a.export()]
        long_line = b"x" * 5000
        source = sources.ExportSource.read(
            _export([*lines, b"not json", long_line, b"  ", lines[0]]), limit=4000)
        assert source.refused == 2 and len(source) == len(lines)
        # an export proves nothing: its invalid copies are rejected even with a checkpoint
        before = len(b.copy_keys())
        report = sp.pull(b, source.responder(), g.KEYRING, _signed(a))
        assert report.needed == len(lines) - before
        assert report.proven == 0 and report.statuses["rejected"] > 0
        assert len(b.copy_keys()) == len(lines) - report.statuses["rejected"]
        assert set(b.copy_keys()) < set(a.copy_keys())
        # asked again by the next sync, and rejected again
        again = sp.pull(b, source.responder(), g.KEYRING)
        assert again.needed == report.statuses["rejected"] == again.statuses["rejected"]


def test_an_export_that_changes_while_it_is_synced_from_is_sync_source(tmp_path: Path) -> None:
    """A copy is read again from its place in the file when it is sent: a line that no
    longer passes the door there is ``sync.source``, the one refusal the code names."""
    with Store.open(tmp_path / "a") as a, Store.open(tmp_path / "b") as b:
        _append(a, _events(2))
        stream = _export([data for _, data in a.export()])
        source = sources.ExportSource.read(stream)
        stream.getbuffer()[0:1] = b"x"  # the first line's "{" overwritten
        with pytest.raises(SyncError) as caught:
            sp.pull(b, source.responder(), g.KEYRING)
    assert caught.value.code == "sync.source"
    assert "changed while it was synced from" in caught.value.message


def test_an_export_source_holds_no_copy_in_memory(tmp_path: Path) -> None:
    """Reading an export keeps each copy's item and place, not its bytes."""
    pith = g.record("big")["pith_number"]
    events = [g.record("big")] + [g.correction(pith, i, f"{i} " + "x" * 20_000)
                                  for i in range(1, 80)]  # fmt: skip
    path = tmp_path / "big.jsonl"
    path.write_bytes(b"".join(g.encoded(e) + b"\n" for e in events))
    size = path.stat().st_size
    with path.open("rb") as stream:
        tracemalloc.start()
        source = sources.ExportSource.read(stream)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert len(source) == len(events)
        # the readline buffer of one line (21 KB) and an item per copy: not the 1.6 MB file
        assert peak < size / 10, (peak, size)
        with Store.open(tmp_path / "s") as store:
            report = sp.pull(store, source.responder(), g.KEYRING, batch=50)
            assert report.statuses["stored"] == len(events)


class _Counted(io.BytesIO):
    """An export stream that counts the bytes read from it."""

    taken = 0

    def readline(self, size: int | None = -1) -> bytes:
        line = super().readline(size)
        self.taken += len(line)
        return line


def test_an_export_of_too_many_copies_is_refused_as_it_is_read() -> None:
    """Past ``most`` distinct copies the file is read no further: a file of millions of
    copies was indexed whole (about 200 bytes a copy) before sync refused its listing."""
    lines = [g.encoded(g.record(f"cap{i}")) + b"\n" for i in range(40)]
    stream = _Counted(b"".join(lines))
    with pytest.raises(SyncError, match="line 11: the export holds more than 10") as caught:
        sources.ExportSource.read(stream, most=10)
    assert caught.value.code == "sync.limit"
    assert stream.taken == sum(map(len, lines[:11]))
    # a copy seen again is no other copy; exactly ``most`` of them are taken
    source = sources.ExportSource.read(_Counted(b"".join(lines[:10] * 3)), most=10)
    assert len(source) == 10 and source.refused == 0


def test_an_export_source_holds_no_refused_line(tmp_path: Path) -> None:
    """Refused lines are handed on as they are read, not held: three million lines of junk
    held 9 GB of refusals, each with its traceback."""
    lines = 20_000
    seen: list[int] = []
    stream = io.BytesIO(b"x\n" * lines)
    tracemalloc.start()
    source = sources.ExportSource.read(stream, on_refused=lambda number, why: seen.append(number))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert source.refused == lines and len(source) == 0
    assert seen == list(range(1, lines + 1))
    assert peak < (1 << 20) + 40 * lines, peak  # the line numbers kept here, nothing more


def test_a_prefix_store_ends_with_the_same_log(tmp_path: Path) -> None:
    """A store holding a prefix of another's log gets the rest in the other's append order:
    the two logs, hence their Merkle trees, are then the same."""
    events = [e for e in _events(6) if e["signer"]["key_id"] != "test-stranger"]
    with Store.open(tmp_path / "a") as a, Store.open(tmp_path / "b") as b:
        _append(a, events)
        _append(b, events[:10])
        assert a.tree_root(10) == b.tree_root()
        report = sp.pull(b, sources.store_responder(a), g.KEYRING, _signed(a), batch=4)
        assert report.needed == a.tree_size() - 10
        assert b.tree_root() == a.tree_root()
        assert [d for _, d in b.export()] == [d for _, d in a.export()]
