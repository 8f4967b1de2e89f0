"""The mirror's speed against a local append (issue 18, item 7): store A holds N events of
the seed-shaped workload (``bench/workload.py``); ``pithlog serve`` serves it on
127.0.0.1; ``pithlog mirror`` pulls it into a fresh store (everything verified: tiles,
bundles, copies, signatures). The reference is ``pithlog append`` of A's export into a
fresh store, in batches of 1,000. Printed: both times and mirror throughput ÷ append
throughput (target >= 0.8), one run, same machine (server, mirror and disk shared).
``make bench`` measures the same (``bench/net_rows.py``).

    .venv/bin/python bench/mirror_bench.py [N]
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import workload
from net_bench import ORIGIN, serve, stop

from pithlog.protocol.keys import Keyring, make_keyring
from pithlog.store import Store
from pithlog.testing import test_key, test_keyring_entries, write_key_file


def fill(path: Path, lines: list[bytes], keyring: Keyring) -> None:
    """The origin's store: ``lines`` appended in batches of 10,000 (untimed)."""
    batches = (lines[i : i + 10_000] for i in range(0, len(lines), 10_000))
    with Store.open(path) as store:
        for _ in store.append_batches(batches, keyring):
            pass


def mirror_argv(url: str, store: Path, keyring: Path) -> list[str]:
    """``pithlog mirror`` of the served log at ``url`` into ``store`` (CLI arguments)."""
    return ["--store", str(store), "mirror", url, "--keyring", str(keyring), "--origin", ORIGIN]


def require_same_tree(origin: Path, mirror: Path) -> None:
    """Stop the run unless ``mirror`` holds the origin's tree (its size and root): a time
    is reported for a whole mirror only."""
    with Store.open(origin, readonly=True) as x, Store.open(mirror, readonly=True) as y:
        want, got = (x.tree_size(), x.tree_root()), (y.tree_size(), y.tree_root())
    if want != got:
        raise SystemExit(f"mirror: the mirror's tree is not the origin's: size {got[0]:,}, "
                         f"root {got[1]!r}; the origin's size {want[0]:,}, root {want[1]!r}")


def _pithlog(*args: str) -> list[str]:
    return [sys.executable, "-m", "pithlog", *args]


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    root = Path(tempfile.mkdtemp(prefix="pithlog-mirror-bench-"))
    try:
        keyring = root / "keyring.json"
        keyring.write_text(json.dumps({"keyring_version": "1", "keys": test_keyring_entries()}))
        key = root / "registry.key"
        write_key_file(key, test_key("registry"))
        export = workload.write(root / "events.jsonl", workload.mixed(n))
        fill(root / "a", export.read_bytes().splitlines(), make_keyring(test_keyring_entries()))

        started = time.perf_counter()
        subprocess.run(_pithlog("--store", str(root / "appended"), "append", "--keyring",
                                str(keyring), "--batch-size", "1000", str(export)),
                       check=True, stdout=subprocess.DEVNULL)  # fmt: skip
        append_s = time.perf_counter() - started

        server, url = serve(root / "a", key)
        try:
            started = time.perf_counter()
            subprocess.run(_pithlog(*mirror_argv(url, root / "mirror", keyring)), check=True,
                           stdout=subprocess.DEVNULL)  # fmt: skip
            mirror_s = time.perf_counter() - started
        finally:
            stop(server)
        require_same_tree(root / "a", root / "mirror")
        print(f"{n:,} events: append (batches of 1,000) {append_s:.1f} s, mirror over "
              f"loopback {mirror_s:.1f} s; mirror / append throughput "
              f"{append_s / mirror_s:.2f} (target >= 0.8)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
