"""The invalid events of a reduction, counted by reason for its summary line (``reduce`` on
one machine and on a Dask cluster print the same)."""

from __future__ import annotations

import collections

import msgspec

from pithlog.protocol.reduce import Pending


class _Invalid(msgspec.Struct):
    event_id: str
    reason: str


class _StateInvalid(msgspec.Struct):
    invalid_events: list[_Invalid]


_INVALID = msgspec.json.Decoder(_StateInvalid)
"""Only ``invalid_events`` of a rendered state (msgspec skips the rest unread)."""

_MEMBER = b'"invalid_events":'


class InvalidTally:
    """Reason -> how many invalid events, over the states and pending piths it is shown."""

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()

    def add(self, result: bytes | Pending) -> None:
        if isinstance(result, Pending):
            self.counts.update(result.invalid.values())
        elif not result.startswith(b"[]", result.rfind(_MEMBER) + len(_MEMBER)):
            # The state's own member is the last one (display order, spec 8): a payload
            # before it may hold an empty "invalid_events" of its own.
            self.counts.update(i.reason for i in _INVALID.decode(result).invalid_events)

    def summary(self) -> str:
        """``N invalid events (reason N, ...)``, most frequent first."""
        total = sum(self.counts.values())
        if not total:
            return "0 invalid events"
        ranked = sorted(self.counts.items(), key=lambda kv: (-kv[1], kv[0]))
        reasons = ", ".join(f"{reason} {n}" for reason, n in ranked)
        return f"{total} invalid events ({reasons})"
