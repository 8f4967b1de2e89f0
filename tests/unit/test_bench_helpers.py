"""The helpers of ``make bench`` (``bench/``) measure what their rows say."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import reaped  # noqa: E402

ORPHAN = """
import os, time
if os.fork() == 0:  # a helper left to end on its own, as a fork server is
    end = time.process_time() + 0.4
    while time.process_time() < end:
        pass
    os._exit(0)
"""


def _children_cpu() -> float:
    t = os.times()
    return t.children_user + t.children_system


@pytest.mark.skipif(not reaped.reaping(), reason="child subreapers are Linux's")
def test_the_cpu_of_a_commands_orphans_is_counted() -> None:
    """``reduce --dask local:N`` leaves its fork server and workers to end after it: their
    CPU time must reach the row's "CPU per event", not be lost with the orphans."""
    before = _children_cpu()
    done = reaped.run([sys.executable, "-c", ORPHAN], check=False)
    assert done.returncode == 0
    assert _children_cpu() - before >= 0.35


def test_the_commands_exit_status_is_kept() -> None:
    done = reaped.run([sys.executable, "-c", "import sys; sys.exit(3)"], check=False)
    assert done.returncode == 3
    out = reaped.run([sys.executable, "-c", "print('x')"], capture_output=True, check=True)
    assert out.stdout == b"x\n"
    with pytest.raises(subprocess.CalledProcessError):
        reaped.run([sys.executable, "-c", "raise SystemExit(1)"], check=True)


class _Table:
    """What ``net_rows`` asks of ``bench.py``'s table: a verify rate of 1 per second."""

    repeat = 1

    def verify_rate(self) -> float:
        return 1.0


def test_removing_the_last_rounds_store_is_not_timed_with_append(tmp_path: Path) -> None:
    """The store a round (or the mirror's row) left is removed before the append's timing
    starts: removing 100,000 events' store took 0.03 s, counted against append."""
    import time

    import net_rows

    (tmp_path / "appended").mkdir()
    (tmp_path / "appended" / "data.mdb").write_bytes(b"x")
    seen: list[bool] = []

    def cli(argv: list[str]) -> None:
        seen.append((tmp_path / "appended").exists())

    run, fresh = net_rows._append(tmp_path, tmp_path / "e.jsonl", tmp_path / "k.json", cli)
    run()
    assert seen == [True]  # the command alone leaves the store to its setup
    calls: list[str] = []

    def slow_setup() -> None:
        time.sleep(0.2)
        calls.append("setup")
        fresh()

    def timed_run() -> None:
        calls.append("run")
        run()

    rate, _ = net_rows._timed_rate(_Table(), "append", 1000, timed_run, slow_setup)
    assert calls == ["setup", "run"] and seen[-1] is False
    assert rate > 1000 / 0.2  # the setup's 0.2 s not in the rate


def test_a_submitters_round_counts_stored_events_only() -> None:
    """An answer ``200`` whose line says ``rejected`` or ``refused`` is no stored event: a
    round with one stops instead of giving a rate of refusals against append's stores."""
    from collections import Counter

    import net_rows

    net_rows.require_stored(Counter({"stored": 19_999}))
    for other in ("rejected", "refused", "duplicate"):
        with pytest.raises(SystemExit, match=other):
            net_rows.require_stored(Counter({"stored": 10, other: 1}))


SLOW_START = "import time\ntime.sleep(1.5)  # a Python process's start, made long\n"


def test_the_append_set_against_the_submitters_leaves_out_its_process_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The submitters' time starts once their server runs; the append they are set against
    left out nothing of its start (the interpreter and the import of the command line,
    about 0.25 s: a fifth of an append of 20,000 events). Here a start made 1.5 s long
    must not reach the append's rate, and the events must be stored all the same."""
    import json

    import net_rows
    import workload

    from pithlog.store import Store
    from pithlog.testing import test_keyring_entries

    slow = tmp_path / "slow"
    slow.mkdir()
    (slow / "sitecustomize.py").write_text(SLOW_START)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(slow), str(ROOT)]))
    keyring = tmp_path / "keyring.json"
    keyring.write_text(json.dumps({"keyring_version": "1", "keys": test_keyring_entries()}))
    events = workload.write(tmp_path / "events.jsonl", workload.mixed(5))
    run, fresh = net_rows._append_started(tmp_path, events, keyring)
    rate, _ = net_rows._timed_rate(_Table(), "append", 5, run, fresh)
    assert rate > 5 / 1.5
    with Store.open(tmp_path / "appended", readonly=True) as store:
        assert store.tree_size() == 5


def test_every_rounds_mirror_is_the_origins_tree(tmp_path: Path) -> None:
    """The mirror row reports the median round's time: a round whose mirror stopped short
    of the origin's tree stops the run, not only a short last round."""
    import mirror_bench
    import net_rows
    import workload

    from pithlog.protocol.keys import make_keyring
    from pithlog.testing import test_keyring_entries

    ring = make_keyring(test_keyring_entries())
    lines = list(workload.mixed(6))
    mirror_bench.fill(tmp_path / "origin", lines, ring)
    rounds: list[int] = []

    def cli(argv: list[str]) -> None:
        if "mirror" in argv:  # the first round's mirror stops one event short
            rounds.append(len(rounds))
            mirror_bench.fill(Path(argv[1]), lines[: 5 if len(rounds) == 1 else 6], ring)

    class Twice(_Table):
        repeat = 2

        def figure(self, name: str, value: str) -> None:
            pass

    with pytest.raises(SystemExit, match="not the origin's: size 5"):
        net_rows.mirror_row(Twice(), 6, tmp_path, tmp_path / "e.jsonl", tmp_path / "k.json",
                            "http://127.0.0.1:1", cli)  # fmt: skip
    assert rounds == [0]


def test_a_submitters_round_counts_the_events_its_store_holds(tmp_path: Path) -> None:
    """Answers ``stored`` are checked against the store the server wrote: a round whose
    store holds fewer events than were answered stored stops instead of giving a rate."""
    import mirror_bench
    import net_rows
    import workload

    from pithlog.protocol.keys import make_keyring
    from pithlog.testing import test_keyring_entries

    mirror_bench.fill(tmp_path / "s", list(workload.mixed(5)),
                      make_keyring(test_keyring_entries()))  # fmt: skip
    net_rows.require_held(tmp_path / "s", 5)
    with pytest.raises(SystemExit, match="holds 5 events, not the 6"):
        net_rows.require_held(tmp_path / "s", 6)
