"""The LMDB log (docs/store.md): :class:`Store`, the one facade an embedding registry uses,
and the modules that work in its transactions (layout, the reduction index, append, replay,
the Merkle tree's storage). The only package that imports ``lmdb``, in its environment
modules (:mod:`pithlog.store.environment` and those beside it)."""

from pithlog.store.append import (
    DUPLICATE,
    EVIDENCE,
    REFUSED,
    REJECTED,
    REPLACED,
    STORED,
    AppendResult,
)
from pithlog.store.append_judging import Judging, SentBatch
from pithlog.store.log import Store
from pithlog.store.lookup import PendingPith

__all__ = [
    "DUPLICATE", "EVIDENCE", "REFUSED", "REJECTED", "REPLACED", "STORED", "AppendResult",
    "Judging", "PendingPith", "SentBatch", "Store",
]  # fmt: skip
