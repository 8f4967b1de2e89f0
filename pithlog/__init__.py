"""pithlog: an append-only, signed event-log merge engine for the Pith open graph.

The pure core implements ``pith-open-graph-merge-v1`` (``docs/protocol.md``):

>>> from pithlog import load_keyring, parse_envelope, reduce_events, state_document, render

and the durable log an embedding registry appends to:

>>> from pithlog import Store, AppendResult, STORED

See ``docs/api.md`` for the Python API.
"""

from typing import TYPE_CHECKING, Any

from pithlog.errors import (
    DoorError,
    KeyFileError,
    KeyringError,
    PithlogError,
    SigningError,
    StoreError,
    UsageError,
)
from pithlog.protocol.canonical import digest, jcs, parse
from pithlog.protocol.checks import REASONS, check_against_record, check_alone
from pithlog.protocol.event_types import EVENT_TYPES, prepare_record_created
from pithlog.protocol.events import Envelope, admit, parse_envelope, sign_event
from pithlog.protocol.keys import Keyring, SigningKey, load_keyring, make_keyring
from pithlog.protocol.reduce import (
    MERGE_VERSION,
    Pending,
    Reduction,
    collapse,
    collapse_streamed,
    reduce_events,
    reduce_kept,
    reduce_pith,
)
from pithlog.protocol.state import render, state_document
from pithlog.protocol.state_verify import verify_state_document

if TYPE_CHECKING:
    from pithlog.store import (
        DUPLICATE,
        EVIDENCE,
        REFUSED,
        REJECTED,
        REPLACED,
        STORED,
        AppendResult,
        PendingPith,
        Store,
    )

_FROM_STORE = frozenset({
    "DUPLICATE", "EVIDENCE", "REFUSED", "REJECTED", "REPLACED", "STORED", "AppendResult",
    "PendingPith", "Store",
})  # fmt: skip
"""Names of the public API that live in :mod:`pithlog.store`, imported when first asked
for (PEP 562): every process that imports any part of pithlog runs this file, and the
helper processes of a reduction need neither LMDB nor the store (about 0.1 s a start)."""


def __getattr__(name: str) -> Any:
    if name in _FROM_STORE:
        from pithlog import store

        return getattr(store, name)
    raise AttributeError(f"module 'pithlog' has no attribute {name!r}")


__version__ = "0.1.0"

__all__ = [
    "DUPLICATE",
    "EVENT_TYPES",
    "EVIDENCE",
    "MERGE_VERSION",
    "REASONS",
    "REFUSED",
    "REJECTED",
    "REPLACED",
    "STORED",
    "AppendResult",
    "DoorError",
    "Envelope",
    "KeyFileError",
    "Keyring",
    "KeyringError",
    "Pending",
    "PendingPith",
    "PithlogError",
    "Reduction",
    "SigningError",
    "SigningKey",
    "Store",
    "StoreError",
    "UsageError",
    "admit",
    "check_against_record",
    "check_alone",
    "collapse",
    "collapse_streamed",
    "digest",
    "jcs",
    "load_keyring",
    "make_keyring",
    "parse",
    "parse_envelope",
    "prepare_record_created",
    "reduce_events",
    "reduce_kept",
    "reduce_pith",
    "render",
    "sign_event",
    "state_document",
    "verify_state_document",
]
