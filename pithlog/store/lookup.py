"""What :meth:`pithlog.store.Store.lookup` answers beside a state document, and the checks
of the pith numbers and keyrings the store's methods are given (``docs/api.md``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pithlog.errors import StoreError, register
from pithlog.protocol.keys import Keyring
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


def require_keyring(value: object, method: str) -> None:
    """Raise ``store.argument`` unless ``value`` is a :class:`~pithlog.protocol.keys.Keyring`:
    a keyring's file bytes, its parsed JSON or ``None`` failed deep inside (an
    ``AttributeError`` on ``digest``), or only once the helpers had started."""
    if not isinstance(value, Keyring):
        raise StoreError("argument", f"Store.{method}: the keyring is a {type(value).__name__}, "
                         "not a pithlog.Keyring: read it with pithlog.load_keyring")  # fmt: skip


def require_count(value: object, method: str, name: str, least: int = 1,
                  none: bool = False) -> None:  # fmt: skip
    """Raise ``store.argument`` unless ``value`` is an ``int`` of at least ``least`` (or
    ``None`` when ``none``): a piece of 0 events never ended (its loop took no pith), one of
    0 copies indexed an empty list, and a ``str`` failed in a comparison deep inside."""
    if value is None and none:
        return
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise StoreError("argument", f"Store.{method}({name}={value!r}): {name} is an int, "
                         f"{least} or more{' (or None)' if none else ''}")  # fmt: skip
