"""The checks of the arguments :class:`pithlog.store.Store`'s methods are given
(``docs/api.md``, "Arguments"): each raises a :class:`~pithlog.errors.StoreError` naming the
method and the argument before any work, where a value of another type failed deep inside
(a ``TypeError`` from a comparison, an ``AttributeError`` on ``encode``, a ``str`` of
digits from a URL taken for a number) or was taken for something it is not (``"yes"`` for
``True``). ``store.argument`` for all of them but the sizes and indexes of the Merkle tree,
which are ``store.tree_size`` as out of range ones are (:mod:`pithlog.store.tree`)."""

from __future__ import annotations

from collections.abc import Container, Iterable
from typing import TypeVar

from pithlog.errors import StoreError, shown
from pithlog.protocol.events import is_event_id
from pithlog.protocol.keys import Keyring

T = TypeVar("T")


def _repr(value: object) -> str:
    text = shown(repr(value))
    return text if len(text) <= 60 else text[:57] + "..."


def _refuse(method: str, name: str, value: object, what: str) -> StoreError:
    return StoreError("argument", f"Store.{method}({name}={_repr(value)}): {name} is {what}")


def require_keyring(value: object, method: str) -> None:
    """Raise ``store.argument`` unless ``value`` is a :class:`~pithlog.protocol.keys.Keyring`:
    a keyring's file bytes, its parsed JSON or ``None`` failed deep inside (an
    ``AttributeError`` on ``digest``), or only once the helpers had started."""
    if not isinstance(value, Keyring):
        raise StoreError("argument", f"Store.{method}: the keyring is a {type(value).__name__}, "
                         "not a pithlog.Keyring: read it with pithlog.load_keyring")  # fmt: skip


def is_int(value: object) -> bool:
    """An ``int`` that is not a ``bool`` (``True`` is an ``int`` to Python, never a count)."""
    return isinstance(value, int) and not isinstance(value, bool)


def require_count(value: object, method: str, name: str, least: int = 1,
                  none: bool = False) -> None:  # fmt: skip
    """Raise ``store.argument`` unless ``value`` is an ``int`` of at least ``least`` (or
    ``None`` when ``none``): a piece of 0 events never ended (its loop took no pith), one of
    0 copies indexed an empty list, and a ``str`` failed in a comparison deep inside."""
    if value is None and none:
        return
    if not is_int(value) or value < least:  # type: ignore[operator]
        raise _refuse(method, name, value, f"an int, {least} or more"
                      f"{' (or None)' if none else ''}")  # fmt: skip


def require_int(value: object, method: str, name: str, none: bool = False) -> None:
    """Raise ``store.argument`` unless ``value`` is an ``int`` (or ``None`` when ``none``),
    of any value: what is out of range is answered as such by the method."""
    if not (is_int(value) or (value is None and none)):
        raise _refuse(method, name, value, f"an int{' (or None)' if none else ''}")


def require_tree_int(value: object, what: str) -> None:
    """``store.tree_size`` for a tree size, leaf index or leaf count that is not an int (a
    str of digits from a URL, a float, ``True``): compared as it was, a TypeError from
    inside the read."""
    if not is_int(value):
        raise StoreError("tree_size", f"{what} {_repr(value)} is not an int")


def require_bool(value: object, method: str, name: str) -> None:
    """Raise ``store.argument`` unless ``value`` is ``True`` or ``False``: ``"no"``, ``1``
    or ``None`` were taken by their truth, ``"no"`` as true."""
    if not isinstance(value, bool):
        raise _refuse(method, name, value, "True or False")


def require_keep_invalid(value: object, method: str) -> None:
    """``keep_invalid`` is a ``bool`` or a container of copy hashes (a set of ``bytes``),
    not a ``str`` or ``bytes`` (``h in "yes"`` raised TypeError once an invalid copy came)."""
    if isinstance(value, bool):
        return
    if not isinstance(value, Container) or isinstance(value, (str, bytes, bytearray)):
        raise _refuse(method, "keep_invalid", value, "True, False or a set of copy hashes")


def require_str(value: object, method: str, name: str) -> None:
    """Raise ``store.argument`` unless ``value`` is a ``str`` (an origin, an event_id)."""
    if not isinstance(value, str):
        raise _refuse(method, name, value, f"a str, not a {type(value).__name__}")


def require_bytes(value: object, method: str, name: str, none: bool = False) -> None:
    """Raise ``store.argument`` unless ``value`` is ``bytes`` (or ``None`` when ``none``)."""
    if not (isinstance(value, bytes) or (value is None and none)):
        raise _refuse(method, name, value, f"bytes{' (or None)' if none else ''}, not a "
                      f"{type(value).__name__}")  # fmt: skip


def require_callable(value: object, method: str, name: str, none: bool = True) -> None:
    """Raise ``store.argument`` unless ``value`` is callable (or ``None`` when ``none``): a
    progress callback or a judge that is not one was a TypeError at its first call, after
    work had been done."""
    if not (callable(value) or (value is None and none)):
        raise _refuse(method, name, value, f"a function{' (or None)' if none else ''}")


def require_items(value: object, method: str, name: str, kind: type[T]) -> list[T]:
    """``value`` as a list, each item a ``kind``; ``store.argument`` for what is not an
    iterable of them, a ``str`` or ``bytes`` above all (its characters or byte values)."""
    if not isinstance(value, Iterable) or isinstance(value, (str, bytes, bytearray, dict)):
        raise _refuse(method, name, value, f"a list of {kind.__name__}, not a "
                      f"{type(value).__name__}")  # fmt: skip
    items = list(value)
    for item in items:
        if not isinstance(item, kind):
            raise _refuse(method, name, item, f"a list of {kind.__name__}: an item is a "
                          f"{type(item).__name__}")  # fmt: skip
    return items


def require_event_ids(value: object, method: str) -> list[str]:
    """``event_ids`` as a list of well-formed event_ids (``sha256:`` + 64 hex digits)."""
    items = require_items(value, method, "event_ids", str)
    for item in items:
        if not is_event_id(item):
            raise _refuse(method, "event_ids", item, "a list of event_ids (sha256: and 64 "
                          "lowercase hex digits)")  # fmt: skip
    return items

