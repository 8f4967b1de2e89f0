"""Format 6 -> 7 (``docs/store.md``, "Format 6 to 7"): every cached verdict keyed by the
sequence number of its copy instead of the copy's hash (``verdicts``: the judge (32) + the
sequence number (8), which ``by_copy`` gives for each hash).

Why: the verdicts an append writes then fall in the log's order, a few pages per commit,
where keys ending in a hash put each on a page of its own. A commit of 16 events writes 79
pages instead of 97, and 32 single-event submitters made 1.04x the events/s (median of 14
paired runs, ``docs/submit-speed.md``).

The step runs in write transactions of at most :data:`MIGRATE_CHUNK` entries each, from a
cursor in ``meta`` (:data:`META_MIGRATING`), so a store of any size migrates within LMDB's
transaction limit and a crash resumes where the last commit left it. The first transaction
(:func:`start`) records format 7 with the cursor: a pithlog of format 6 then refuses the
store (``store.format``), and a read-only open refuses it (``store.upgrade``) until a
writable open has finished the step (:func:`pithlog.store.environment._open_lmdb` runs it
before it returns). A verdict of a copy that ``by_copy`` does not know is dropped: it is a
cache, judged again when needed.

This module does not import :mod:`lmdb`; it works on a transaction the store opens.
"""

from __future__ import annotations

from typing import Any

from pithlog.store.layout import FORMAT_VERSION, META_FORMAT, SEQ, Txn

META_MIGRATING = b"format7_from"
"""``meta`` key while a store's verdicts are being keyed anew: the last ``verdicts`` key
the step went past (empty: none yet)."""

MIGRATE_CHUNK = 10_000
"""``verdicts`` entries gone through per write transaction of the step."""

HASH_KEY = 64
"""The length of a format-6 ``verdicts`` key: judge (32) + copy hash (32)."""


def start(txn: Txn, dbs: dict[str, Any]) -> None:
    """In the transaction that starts a store's migration (a format-6 store's, or an older
    one's after :func:`pithlog.store.format6.start`, whose steps run first): record format 7
    and the cursor of :func:`step`."""
    txn.put(META_FORMAT, FORMAT_VERSION, db=dbs["meta"])
    txn.put(META_MIGRATING, b"", db=dbs["meta"])


def migrating(txn: Txn, dbs: dict[str, Any]) -> bool:
    return txn.get(META_MIGRATING, db=dbs["meta"]) is not None


def step(txn: Txn, dbs: dict[str, Any], limit: int | None = None) -> bool:
    """Go through up to ``limit`` ``verdicts`` entries from the cursor in ``meta``, keying
    each one of format 6 by its copy's sequence number; ``True`` while there is more to do.
    An entry keyed anew sorts before those still to do under its judge (a sequence number
    begins with zero bytes, a hash seldom does), and one that sorts after is passed over as
    already done: either way, none is done twice."""
    after = txn.get(META_MIGRATING, db=dbs["meta"])
    if after is None:
        return False
    limit = MIGRATE_CHUNK if limit is None else limit
    cursor = txn.cursor(db=dbs["verdicts"])
    found = cursor.set_range(after + b"\x00") if after else cursor.first()
    seen: list[tuple[bytes, bytes]] = []
    while found and len(seen) < limit:
        seen.append(cursor.item())
        found = cursor.next()
    for key, value in seen:  # read first, then written: no cursor stands on a changed page
        if len(key) != HASH_KEY:
            continue
        pointer = txn.get(key[32:], db=dbs["by_copy"])
        txn.delete(key, db=dbs["verdicts"])
        if pointer is not None and len(pointer) == SEQ.size:
            txn.put(key[:32] + pointer, value, db=dbs["verdicts"])
    if found:
        txn.put(META_MIGRATING, seen[-1][0], db=dbs["meta"])
        return True
    txn.delete(META_MIGRATING, db=dbs["meta"])
    return False
