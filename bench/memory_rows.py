"""The memory rows of `make bench`: the peak RSS of ``pithlog reduce`` and of ``replay
--verify``, each in a fresh process (its own peak, not the parent's carried over a fork)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import workload
from table import Table

from pithlog.protocol.keys import Keyring
from pithlog.store import Store

REPLAY_CHILD = """
import io, sys, threading, time
from pithlog.cli import main

peak = 0
def sample():
    # RssAnon: the process's own memory. VmHWM also counts the store's file pages that
    # LMDB's read-only memory map made resident, which the kernel may drop at any time.
    global peak
    while True:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("RssAnon:"):
                    peak = max(peak, int(line.split()[1]))
        time.sleep(0.05)
threading.Thread(target=sample, daemon=True).start()
# --jobs 1: the memory of one process replaying every pith (workers would each hold less)
status = main(["replay", "--store", sys.argv[1], "--verify", "--keyring", sys.argv[2],
               "--jobs", "1"], stdout=io.BytesIO(), stderr=io.StringIO())
assert status == 0
time.sleep(0.1)
# VmHWM, not ru_maxrss: ru_maxrss would also count the parent's resident memory at the
# fork that started this process (Linux carries it over the exec).
with open("/proc/self/status") as status_file:
    hwm = next(int(line.split()[1]) for line in status_file if line.startswith("VmHWM:"))
print(peak, hwm)
"""


def reduce_memory(table: Table, events: Path, keyring: Path) -> None:
    """Peak RSS of ``pithlog reduce`` (``--jobs 1``) in a fresh process: it holds its whole
    input, so this grows with the input (docs/cli.md)."""
    child = [sys.executable, "-c", REDUCE_CHILD, str(events), str(keyring)]
    out = subprocess.run(child, check=True, capture_output=True, text=True)
    count = sum(1 for _ in events.open("rb"))
    table.figure(f"reduce of a {count:,}-event file: peak RSS",
                 f"{int(out.stdout) / 1024:,.0f} MiB")  # fmt: skip


REDUCE_CHILD = """
import io, os, sys
from pithlog.cli import main

with open(os.devnull, "wb") as sink:  # the states are printed, not held
    status = main(["reduce", "--keyring", sys.argv[2], sys.argv[1]],
                  stdout=sink, stderr=io.StringIO())
assert status == 0
# VmHWM: this process's own peak. ru_maxrss would also count the parent's resident memory
# at the fork that started this process (Linux carries it over the exec).
with open("/proc/self/status") as status_file:
    print(next(int(line.split()[1]) for line in status_file if line.startswith("VmHWM:")))
"""


def replay_memory(table: Table, ring: Keyring, keyring: Path, count: int) -> None:
    """Peak RSS of replay --verify in a fresh process over a store of ``count`` events."""
    folder = Path(tempfile.mkdtemp(prefix="pithlog-bench-"))
    try:
        with Store.open(folder / "store") as store:
            batch: list[bytes] = []
            for line in workload.mixed(count):
                batch.append(line)
                if len(batch) == 10000:
                    store.append(batch, ring)
                    batch = []
            if batch:
                store.append(batch, ring)
        child = [sys.executable, "-c", REPLAY_CHILD, str(folder / "store"), str(keyring)]
        out = subprocess.run(child, check=True, capture_output=True, text=True)
        anon_kib, rss_kib = (int(x) for x in out.stdout.split())
        table.figure(f"replay --verify over {count:,} events: peak anonymous memory",
                     f"{anon_kib / 1024:,.0f} MiB")  # fmt: skip
        table.figure("  peak RSS, with the store's mapped file pages",
                     f"{rss_kib / 1024:,.0f} MiB")  # fmt: skip
    finally:
        shutil.rmtree(folder, ignore_errors=True)
