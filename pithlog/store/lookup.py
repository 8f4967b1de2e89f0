"""What :meth:`pithlog.store.Store.lookup` answers beside a state document, and the check
of the pith numbers :meth:`~pithlog.store.Store.state` and ``lookup`` are given
(``docs/api.md``; the other arguments' are in :mod:`pithlog.store.arguments`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pithlog.errors import StoreError, register
from pithlog.protocol.records import is_pith_number

register({"store.pith_number": "a pith number is pith:YYYY:<26 base32 characters A-Z2-7>: "
          "check the argument"})  # fmt: skip


@dataclass(frozen=True)
class PendingPith:
    """A pith the store has events of but no valid ``record_created`` yet (spec 7 step 2):
    no state document."""

    pith_number: str
    event_count: int
    invalid_event_count: int

    @classmethod
    def of(cls, status: dict[str, Any]) -> PendingPith:
        return cls(status["pith_number"], status["event_count"], status["invalid_event_count"])


def require_pith_number(value: str) -> None:
    """Raise ``store.pith_number`` unless ``value`` is a pith number."""
    if not is_pith_number(value):
        raise StoreError("pith_number", f"{value!r} is not a pith number "
                         "(pith:YYYY:<26 base32 characters>): check it")  # fmt: skip
