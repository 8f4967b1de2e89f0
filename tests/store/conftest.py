"""Fixtures shared by the store's fault tests."""

from __future__ import annotations

import gc
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import eventgen as g
import pytest
from damage import valid

from pithlog.errors import DoorError
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


@pytest.fixture
def collector_paused() -> Iterator[Callable[[], int]]:
    """The cyclic collector paused, as every command, its helpers and the server's workers
    run it (:mod:`pithlog.cli`), after a collection: what is freed then is freed by
    reference counts alone. Yields a count of the door's refusals alive."""
    was = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield lambda: sum(isinstance(o, DoorError) for o in gc.get_objects())
    finally:
        if was:
            gc.enable()
