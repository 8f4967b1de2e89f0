"""Damage done to a store by hand, for the fault tests (``test_faults.py``,
``test_replay_faults.py``), and what a replay says of it."""

from __future__ import annotations

from typing import Any

import eventgen as g

from pithlog.protocol.canonical import jcs
from pithlog.protocol.checks import check_alone
from pithlog.protocol.events import admit
from pithlog.store import Store


def valid(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if check_alone(admit(e), g.KEYRING) is None]


def lines(store: Store) -> list[str]:
    return [d.line() for d in store.replay(g.KEYRING).discrepancies]


def overwrite_copy(store: Store, eid: bytes, data: bytes) -> None:
    """Replace the bytes of the preferred copy of ``eid`` where they are stored (format 6:
    in ``copies``, under the sequence number ``events`` points at)."""
    store._write(lambda txn, dbs: txn.put(txn.get(eid, db=dbs["events"]), data,
                                          db=dbs["copies"]))  # fmt: skip


def attestation(events: list[dict[str, Any]]) -> dict[str, Any]:
    return next(e for e in events if e["event_type"] == "mirror_hint")


def unindex(store: Store, event: dict[str, Any]) -> None:
    """Damage: ``event`` no longer listed under its pith in ``by_pith``."""
    key = event["pith_number"].encode() + bytes.fromhex(event["event_id"][7:])
    store._write(lambda txn, dbs: txn.delete(key, db=dbs["by_pith"]))


def rewrite_summary(store: Store, pith: str, summary: Any) -> bytes:
    """Damage: ``pith``'s ``piths`` entry replaced by the JCS of ``summary``; the entry
    it had, to put back."""
    key = pith.encode()
    was: bytes | None = store._read(lambda txn, dbs: txn.get(key, db=dbs["piths"]))
    assert was is not None
    store._write(lambda txn, dbs: txn.put(key, jcs(summary), db=dbs["piths"]))
    return was
