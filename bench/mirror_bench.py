"""The mirror's speed against a local append (issue 18, item 7): store A holds N events of
the seed-shaped workload (``bench/workload.py``); ``pithlog serve`` serves it on
127.0.0.1; ``pithlog mirror`` pulls it into a fresh store (everything verified: tiles,
bundles, copies, signatures). The reference is ``pithlog append`` of A's export into a
fresh store, in batches of 1,000. Printed: both times and mirror throughput ÷ append
throughput (target >= 0.8), one run, same machine (server, mirror and disk shared).

    .venv/bin/python bench/mirror_bench.py [N]
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import workload

from pithlog.protocol.keys import dump_key_file, make_keyring
from pithlog.store import Store
from pithlog.testing import test_key, test_keyring_entries

ORIGIN = "registry.test.invalid/pith"


def _pithlog(*args: str) -> list[str]:
    return [sys.executable, "-m", "pithlog", *args]


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    root = Path(tempfile.mkdtemp(prefix="pithlog-mirror-bench-"))
    try:
        import json

        keyring = root / "keyring.json"
        keyring.write_text(json.dumps({"keyring_version": "1", "keys": test_keyring_entries()}))
        key = root / "registry.key"
        key.write_bytes(dump_key_file(test_key("registry")))
        export = workload.write(root / "events.jsonl", workload.mixed(n))
        ring = make_keyring(test_keyring_entries())
        lines = export.read_bytes().splitlines()
        with Store.open(root / "a") as a:
            for i in range(0, len(lines), 10_000):
                a.append(lines[i : i + 10_000], ring)

        started = time.perf_counter()
        subprocess.run(_pithlog("--store", str(root / "appended"), "append", "--keyring",
                                str(keyring), "--batch-size", "1000", str(export)),
                       check=True, stdout=subprocess.DEVNULL)  # fmt: skip
        append_s = time.perf_counter() - started

        server = subprocess.Popen(_pithlog("--store", str(root / "a"), "serve", "--listen",
                                           "127.0.0.1:0", "--key", str(key), "--origin",
                                           ORIGIN), stderr=subprocess.PIPE)  # fmt: skip
        try:
            assert server.stderr is not None
            line = server.stderr.readline().decode()
            url = line.rsplit(" ", 1)[1].strip()
            started = time.perf_counter()
            subprocess.run(_pithlog("--store", str(root / "mirror"), "mirror", url,
                                    "--keyring", str(keyring), "--origin", ORIGIN),
                           check=True, stdout=subprocess.DEVNULL)  # fmt: skip
            mirror_s = time.perf_counter() - started
        finally:
            server.terminate()
            server.wait(30)
        with Store.open(root / "a", readonly=True) as a, \
                Store.open(root / "mirror", readonly=True) as m:  # fmt: skip
            assert a.tree_root() == m.tree_root()
        print(f"{n:,} events: append (batches of 1,000) {append_s:.1f} s, mirror over "
              f"loopback {mirror_s:.1f} s; mirror / append throughput "
              f"{append_s / mirror_s:.2f} (target >= 0.8)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
