"""``pithlog serve --key`` with a key file group or others may read: one warning line on
stderr before it listens (docs/cli.md, "Key files group or others may read"), however
many workers read the key again, and none for a key file of mode 0600. Real servers on
127.0.0.1, bounded in time (``served.serve_process``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from served import ORIGIN, make_files, serve_process

from pithlog.testing import test_key, test_keyring_entries, write_key_file

pytestmark = pytest.mark.skipif(os.name != "posix", reason="file modes are POSIX's")

WARNING = ("pithlog: warning: key file {path} has mode 0644: group or others can read or "
           "write it; make it private: chmod 600 {path}")  # fmt: skip


def said(stderr: bytearray) -> list[str]:
    return [line for line in bytes(stderr).decode().splitlines()
            if not line.startswith("serve: listening on ")]  # fmt: skip


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_0644_key_warns_once_before_serve_listens(tmp_path: Path, workers: str) -> None:
    files = make_files(tmp_path, piths=2, per_pith=2)
    files.key.chmod(0o644)
    with serve_process(files.store, "--key", str(files.key), "--origin", ORIGIN,
                       "--workers", workers) as server:  # fmt: skip
        # with N workers, listening is said once every worker has built its app (and
        # read the key): a warning of theirs would be above it
        assert said(server.stderr) == [WARNING.format(path=files.key)]


def test_a_0600_key_says_nothing(tmp_path: Path) -> None:
    files = make_files(tmp_path, piths=2, per_pith=2)
    assert files.key.stat().st_mode & 0o777 == 0o600
    with serve_process(files.store, "--key", str(files.key), "--origin", ORIGIN) as server:
        assert said(server.stderr) == []


def test_a_witness_with_a_0644_key_warns_once(tmp_path: Path) -> None:
    key = tmp_path / "witness.key"
    write_key_file(key, test_key("mirror"))
    key.chmod(0o644)
    keyring = tmp_path / "witnessed.json"
    keyring.write_text(json.dumps({"keyring_version": "1", "keys": test_keyring_entries()}))
    with serve_process(tmp_path / "state", "--witness", "--key", str(key),
                       "--keyring", str(keyring)) as server:  # fmt: skip
        assert said(server.stderr) == [WARNING.format(path=key)]
