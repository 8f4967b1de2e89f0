"""``PITHLOG_CORES`` as a user meets it: a command that sizes its pools by it."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

from storeevents import g

from pithlog.testing import test_keyring_entries


def _reduce(tmp_path: Path, cores: str) -> subprocess.CompletedProcess[str]:
    events = tmp_path / "events.jsonl"
    made = g.mixed_events(random.Random(3), piths=3, per_pith=3)
    events.write_bytes(b"".join(g.encoded(e) + b"\n" for e in made))
    keyring = tmp_path / "keyring.json"
    keyring.write_text(json.dumps({"keyring_version": "1", "keys": test_keyring_entries()}))
    env = {**os.environ, "PITHLOG_CORES": cores}
    argv = [sys.executable, "-m", "pithlog", "reduce", "--keyring", str(keyring), str(events)]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)


def test_a_bad_value_is_one_line_with_its_code(tmp_path: Path) -> None:
    # 0, a word, and a count past any machine (20 digits overflowed a C int before)
    for value in ("many", "0", "4097", "99999999999999999999"):
        out = _reduce(tmp_path, value)
        assert out.returncode == 2, out.stderr
        assert out.stdout == ""
        assert out.stderr.strip() == (f"pithlog: [usage.cores] PITHLOG_CORES={value!r} is not "
                                      "an integer from 1 to 4096: set it to the cores pithlog "
                                      "may use, or unset it")  # fmt: skip


def test_a_good_value_changes_nothing_in_the_output(tmp_path: Path) -> None:
    one, four = _reduce(tmp_path, "1"), _reduce(tmp_path, "4")
    assert one.returncode == four.returncode == 0, (one.stderr, four.stderr)
    assert one.stdout == four.stdout and one.stdout.count("\n") == 3
