"""Generated keyrings for the property tests: the fixed test keys, each perhaps left out,
given another ``signer_id``, or given a validity window (section 3) whose edges fall on
the instants the generated events are dated at (``universe.TIMES``) or one second
beside them, so that ``not_before <= t < not_after`` and ``t < revoked_at`` are met at
their edges."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from pithlog.protocol.keys import Keyring, make_keyring
from pithlog.testing import TEST_SIGNERS, test_key

from . import model_values

EDGES = (
    "2025-12-31T23:59:59Z",
    "2026-01-01T00:00:00Z",
    "2026-01-01T00:00:01Z",
    "2026-01-02T00:00:00Z",
    "2026-02-01T00:00:00Z",
    "2026-02-01T00:00:01Z",
)
EDGE_OR_NULL = st.one_of(st.none(), st.sampled_from(EDGES))


@st.composite
def _entry(draw: st.DrawFn, name: str, windowed: bool) -> dict[str, Any] | None:
    if draw(st.integers(0, 11)) == 0:
        return None  # left out: its events are unknown_key
    entry = test_key(name).keyring_entry()
    if draw(st.integers(0, 9)) == 0:
        entry["signer_id"] = "another.test.invalid"  # signer_mismatch
    if not windowed and draw(st.integers(0, 2)):
        return entry  # no window: most piths keep a valid record and reach a state
    not_before, not_after = draw(EDGE_OR_NULL), draw(EDGE_OR_NULL)
    if not_before is not None and not_after is not None and not_before >= not_after:
        not_after = None  # section 3: not_before < not_after when both are set
    entry.update(not_before=not_before, not_after=not_after, revoked_at=draw(EDGE_OR_NULL))
    return entry


@st.composite
def keyring_entries(draw: st.DrawFn, windowed: bool = False) -> list[dict[str, Any]]:
    """Entries for every test key (``stranger`` too, now and then), windows drawn for
    about one key in three (``windowed``: for every key)."""
    names = [n for n in TEST_SIGNERS if n != "stranger" or draw(st.integers(0, 3)) == 0]
    entries = [draw(_entry(name, windowed)) for name in names]
    return [e for e in entries if e is not None]


def both(entries: list[dict[str, Any]]) -> tuple[Keyring, dict[str, dict[str, Any]]]:
    """pithlog's keyring of ``entries`` and the model's."""
    return make_keyring(entries), model_values.make_keyring(entries)
