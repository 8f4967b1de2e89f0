"""The reads of a store whose keys were damaged by hand: one ``store.corrupted`` line, never
a traceback, and what ``replay`` says of the same damage (``docs/store.md``, "Replay")."""

from __future__ import annotations

from typing import Any

import pytest
from damage import lines

from pithlog.errors import StoreError
from pithlog.store import Store
from pithlog.store.layout import SEQ


def test_export_of_a_seq_key_of_another_length_is_store_corrupted(
    damaged: tuple[Store, list[Any]],
) -> None:
    """export unpacked each seq key as a sequence number: a damaged one of another length
    was a struct.error, a traceback of the CLI, where replay names it."""
    store, _ = damaged
    store._write(lambda txn, dbs: txn.put(b"\x01", txn.get(SEQ.pack(1), db=dbs["seq"]),
                                          db=dbs["seq"]))  # fmt: skip
    with pytest.raises(StoreError) as refused:
        list(store.export())
    assert refused.value.code == "store.corrupted"
    assert "seq key 01 is not an 8-byte sequence number" in refused.value.message
    assert "seq: key 01: is not an 8-byte sequence number" in lines(store)
