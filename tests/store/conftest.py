"""Fixtures shared by the store's fault tests."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import eventgen as g
import pytest
from damage import valid

from pithlog.store import Store


@pytest.fixture
def damaged(tmp_path: Path) -> Iterator[tuple[Store, list[dict[str, Any]]]]:
    rng = random.Random(21)
    events = valid(g.mixed_events(rng, piths=5, per_pith=6))
    store = Store.open(tmp_path / "s")
    store.append([g.encoded(e) for e in events], g.KEYRING)
    assert store.replay(g.KEYRING).ok
    yield store, events
    store.close()
