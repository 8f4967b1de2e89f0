"""pithlog: an append-only, signed event-log merge engine for the Pith open graph.

The pure core implements ``pith-open-graph-merge-v1`` (``docs/protocol.md``):

>>> from pithlog import load_keyring, parse_envelope, reduce_events, state_document, render

and the durable log an embedding registry appends to:

>>> from pithlog import Store, AppendResult, STORED

See ``docs/api.md`` for the Python API.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_HOMES = {
    "pithlog.errors": ("DoorError", "KeyFileError", "KeyringError", "PithlogError",
                       "SigningError", "StoreError", "UsageError"),
    "pithlog.protocol.canonical": ("digest", "jcs", "parse"),
    "pithlog.protocol.checks": ("REASONS", "check_against_record", "check_alone"),
    "pithlog.protocol.event_types": ("EVENT_TYPES", "prepare_record_created"),
    "pithlog.protocol.events": ("Envelope", "admit", "parse_envelope", "sign_event"),
    "pithlog.protocol.keys": ("Keyring", "SigningKey", "load_keyring", "make_keyring"),
    "pithlog.protocol.reduce": ("MERGE_VERSION", "Pending", "Reduction", "collapse",
                                "collapse_streamed", "reduce_events", "reduce_kept",
                                "reduce_pith"),
    "pithlog.protocol.state": ("render", "state_document"),
    "pithlog.protocol.state_verify": ("verify_state_document",),
    "pithlog.store": ("DUPLICATE", "EVIDENCE", "REFUSED", "REJECTED", "REPLACED", "STORED",
                      "AppendResult", "PendingPith", "Store"),
}  # fmt: skip
"""The module of each name of the public API, imported when the name is first asked for
(PEP 562). Every process that imports any part of pithlog runs this file: the console
script, before it handles Ctrl-C and SIGTERM (:func:`pithlog.cli.entry`), and each helper
process of a reduction, which needs neither LMDB nor the store (about 0.1 s a start)."""

_HOME = {name: module for module, names in _HOMES.items() for name in names}

_IMPORTED = frozenset({"errors", "protocol"})
"""The packages that ``import pithlog`` made its attributes when it imported the modules
of the API at once (``import pithlog`` then ``pithlog.errors.CODES`` or
``pithlog.protocol.reduce.chosen_record``, docs/api.md): asked for, they are imported with
those modules, as then."""


def __getattr__(name: str) -> Any:
    import importlib

    if name in _IMPORTED:
        for home in _HOMES:
            if home != "pithlog.store":  # imported when first asked for then too
                importlib.import_module(home)
        return globals()[name]  # made this package's attribute by its import
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module 'pithlog' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # asked once: the next lookup finds it without this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


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
