"""The worker tasks of ``reduce --dask`` called in this process: what they refuse."""

from __future__ import annotations

from pathlib import Path

import pytest

from pithlog.distributed.sources import blocks, expand
from pithlog.distributed.tasks import check_block, read_published, versions
from pithlog.errors import DaskError, UsageError
from pithlog.protocol.canonical import jcs
from pithlog.protocol.reduce import MERGE_VERSION
from pithlog.testing import test_keyring_entries

KEYRING = jcs({"keyring_version": "1", "keys": test_keyring_entries()})


def test_a_task_refuses_to_run_under_another_pithlog(tmp_path: Path) -> None:
    """A worker that joined after the client checked the cluster still refuses: every task
    carries the client's versions."""
    (tmp_path / "e.jsonl").write_bytes(b"{}\n")
    block = blocks(expand([str(tmp_path / "e.jsonl")]), 1 << 20)[0]
    for other in (("0.0.0-other", MERGE_VERSION), (versions()[0], "another-merge-v2")):
        with pytest.raises(DaskError) as caught:
            check_block(block, KEYRING, other)
        assert caught.value.code == "dask.version" and other[0] in caught.value.message
        with pytest.raises(DaskError):
            read_published(block, other)
    copies, report = check_block(block, KEYRING, versions())
    assert (copies, report.read, len(report.refused)) == ([], 0, 1)  # "{}" refused at the door


def test_a_file_a_worker_cannot_read_is_one_error(tmp_path: Path) -> None:
    (tmp_path / "e.jsonl").write_bytes(b"{}\n")
    block = blocks(expand([str(tmp_path / "e.jsonl")]), 1 << 20)[0]
    (tmp_path / "e.jsonl").unlink()  # listed by the client, gone where the worker looks
    with pytest.raises(UsageError) as caught:
        check_block(block, KEYRING, versions())
    assert caught.value.code == "usage.unreadable" and "e.jsonl" in caught.value.message
