"""Replay beside appends (docs/store.md, "Replay beside appends"): appends that land between
replay's passes are neither reported as damage nor counted; the report speaks of the log as
of replay's start."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import eventgen as g
import pytest

from pithlog.errors import StoreError
from pithlog.protocol.checks import check_alone
from pithlog.protocol.events import admit
from pithlog.store import Store, replay_processes
from pithlog.store.replay_report import ReplayReport
from pithlog.testing import test_keyring


def counts(report: ReplayReport) -> tuple[int, int, int]:
    return report.piths, report.events, report.copies


def make_store(path: Path) -> list[dict[str, Any]]:
    rng = random.Random(11)
    events = [e for e in g.mixed_events(rng, piths=8, per_pith=4)
              if check_alone(admit(e), g.KEYRING) is None]  # fmt: skip
    with Store.open(path) as store:
        store.append([g.encoded(e) for e in events], g.KEYRING)
    return events


def arrivals(events: list[dict[str, Any]]) -> list[list[bytes]]:
    """What lands while replay runs: a new pith; an attestation and a second valid copy
    (another signature) of a stored event, both in the first pith replay goes through (in
    its first chunk)."""
    first = min(e["pith_number"] for e in events)
    stored = next(e for e in events if e["pith_number"] == first)
    signer = {"record_created": "registry", "correction": "registry",
              "mirror_hint": "mirror"}.get(stored["event_type"], "author")  # fmt: skip
    return [
        [g.encoded(g.record("2501.77777"))],
        [g.encoded(g.attestation(first, 450, "late statement"))],
        [g.encoded(g.resigned(stored, signer, b"\x07" * 32))],
    ]


def inject(
    monkeypatch: pytest.MonkeyPatch, store: Store, batches: list[list[bytes]], where: str
) -> list[str]:
    """Append ``batches`` at replay's pass boundaries: after its start (when the chunks are
    cut), after the structure pass, or between the two transactions in which a one-process
    replay reads a chunk's copies and then compares its states. Returns the statuses, for
    the test to check that the appends happened."""
    statuses: list[str] = []

    def append(batch: list[bytes]) -> None:
        statuses.extend(r.status for r in store.append(batch, g.KEYRING))

    def after(name: str, batch: list[bytes]) -> None:
        original: Callable[..., Any] = getattr(replay_processes, name)

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            append(batch)
            return result

        monkeypatch.setattr(replay_processes, name, wrapped)

    if where == "start":
        after("make_chunks", [b for batch in batches for b in batch])
    elif where == "between":
        after("make_chunks", batches[0])
        after("_structure_here", [b for batch in batches[1:] for b in batch])
    else:  # inside a chunk: after its copies are read, before its states are compared
        original = replay_processes.start_chunk
        pending = [b for batch in batches for b in batch]

        def read_then_append(*args: Any, **kwargs: Any) -> Any:
            started = original(*args, **kwargs)
            if pending:
                append(pending[:])
                pending.clear()
            return started

        monkeypatch.setattr(replay_processes, "start_chunk", read_then_append)
    return statuses


@pytest.mark.parametrize(
    ("jobs", "where"), [(1, "start"), (1, "between"), (1, "in a chunk"), (2, "start")]
)
def test_appends_between_replay_passes_report_the_log_as_of_the_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jobs: int, where: str
) -> None:
    path = tmp_path / "s"
    events = make_store(path)
    with Store.open(path) as store:
        before = store.replay(g.KEYRING, jobs=jobs)
        assert before.ok
        statuses = inject(monkeypatch, store, arrivals(events), where)
        during = store.replay(g.KEYRING, jobs=jobs)
        monkeypatch.undo()
        assert len(statuses) == 3 and "rejected" not in statuses and "duplicate" not in statuses
        assert [d.line() for d in during.discrepancies] == []
        assert during.ok
        assert counts(during) == counts(before)
        after = store.replay(g.KEYRING, jobs=jobs)
        assert after.ok
        assert after.piths == before.piths + 1
        assert after.events == before.events + 2
        assert after.copies == before.copies + 3


def test_a_rebuild_during_replay_is_an_error_not_a_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The verdicts and states a replay compares belong to the keyring of its start: a
    rebuild under another keyring between its passes cannot give a true report."""
    path = tmp_path / "s"
    make_store(path)
    revoked = test_keyring(author={"revoked_at": g.ts(300)})
    with Store.open(path) as store:
        original = replay_processes.make_chunks

        def rebuild_first(*args: Any, **kwargs: Any) -> Any:
            store.rebuild(revoked)
            return original(*args, **kwargs)

        monkeypatch.setattr(replay_processes, "make_chunks", rebuild_first)
        with pytest.raises(StoreError) as rebuilt:
            store.replay(g.KEYRING)
        assert rebuilt.value.code == "store.rebuilt"
        monkeypatch.undo()
        assert store.replay(revoked).ok
