"""The work of :func:`pithlog.parallel.results_folder.remove_stale` at a pool's start is
bounded, whatever ``$TMPDIR`` holds: at most ``MAX_REMOVED`` folders removed and
``MAX_EXAMINED`` opened; the rest are left for later starts."""

from __future__ import annotations

import fcntl
import os
import types
from pathlib import Path
from typing import Any

import pytest

from pithlog.parallel import results_folder


def _stale(tmp_path: Path, count: int) -> None:
    for n in range(count):
        (tmp_path / f"{results_folder.PREFIX}{n}-{n:016x}").mkdir(0o700)


def test_at_most_max_removed_per_start_the_rest_later(tmp_path: Path) -> None:
    _stale(tmp_path, 150)
    results_folder.remove_stale(str(tmp_path))
    assert len(os.listdir(tmp_path)) == 150 - 64
    results_folder.remove_stale(str(tmp_path))
    results_folder.remove_stale(str(tmp_path))
    assert os.listdir(tmp_path) == []
    assert results_folder.MAX_REMOVED == 64  # as docs/cli.md says


def test_at_most_max_examined_opened_per_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Folders in use (their lock held) are opened and left: never more than a bounded
    number of them per start, however many ``$TMPDIR`` holds."""
    _stale(tmp_path, 1000)

    def busy(fd: int, operation: int) -> None:
        raise BlockingIOError

    constants = {k: getattr(fcntl, k) for k in ("LOCK_EX", "LOCK_SH", "LOCK_NB")}
    monkeypatch.setattr(results_folder, "fcntl", types.SimpleNamespace(flock=busy, **constants))
    opened: list[str] = []
    real_open = os.open

    def counting(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        opened.append(str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", counting)
    results_folder.remove_stale(str(tmp_path))
    assert len(opened) == 256
    assert len(os.listdir(tmp_path)) == 1000
