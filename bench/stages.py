"""Where the time of one event goes: each stage of pithlog's path timed alone, on one core.

Run by `make bench` after the throughput table (or alone: `python bench/stages.py FILE`).
Each figure is microseconds per event over the whole file, with the cyclic garbage
collector paused as the CLI pauses it: the best of three passes, but for the signatures
(one pass: thousands of verifies are long enough to time) and the store's row (one append,
less one pass each of the door and the checks); the last column is the share of the raw
verify time of one signature measured in the same run.
"""

from __future__ import annotations

import gc
import itertools
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from verify_rate import raw_verify_rate

from pithlog.protocol.checks import SignatureCheck, prepare
from pithlog.protocol.events import parse_envelope
from pithlog.protocol.keys import Keyring, make_keyring
from pithlog.protocol.reduce import Judged, Reduction, reduce_pith
from pithlog.protocol.state import render_reduction
from pithlog.store import Store
from pithlog.testing import test_keyring_entries


def best(func: Callable[[], object], passes: int = 3) -> float:
    times = []
    for _ in range(passes):
        start = time.perf_counter()
        func()
        times.append(time.perf_counter() - start)
    return min(times)


def stages(lines: list[bytes], ring: Keyring, verify_us: float) -> list[tuple[str, float]]:
    n = len(lines)
    envelopes = [parse_envelope(line) for line in lines]
    prepared = [prepare(e, ring) for e in envelopes]
    checks = [c for p in prepared for c in p.checks()]

    def verify_all() -> None:
        for check in checks:
            check.ok = None
            check.run()

    door = best(lambda: [parse_envelope(x) for x in lines])
    checks_1_12 = best(lambda: [prepare(e, ring) for e in envelopes])
    rows = [
        ("door (parse, JCS, admit)", door / n),
        ("checks 1-12 without the signatures", checks_1_12 / n),
        (f"signatures ({len(checks) / n:.2f} per event)", best(verify_all, 1) / n),
    ]
    judged = [Judged(e, p.reason()) for e, p in zip(envelopes, prepared, strict=True)]
    by_pith: dict[str, list[Judged]] = {}
    for j in judged:
        by_pith.setdefault(j.envelope.pith_number, []).append(j)

    def reduce_render() -> None:
        for pith, events in by_pith.items():
            result = reduce_pith(pith, events)
            if isinstance(result, Reduction):
                render_reduction(result)

    rows.append(("reduction and state rendering (steps 1-5)", best(reduce_render) / n))
    rows.append(("store: append in batches of 1,000, signatures not verified",
                 _append_unverified(lines, ring) / n))  # fmt: skip
    return [(name, seconds * 1e6) for name, seconds in rows] + [("raw Ed25519 verify", verify_us)]


def _append_unverified(lines: list[bytes], ring: Keyring) -> float:
    """The store's own cost: append with every signature taken as good, minus the door and
    the checks, which the rows above count."""
    run = SignatureCheck.run

    def accept(self: Any) -> bool:
        self.ok = True
        return True

    SignatureCheck.run = accept  # type: ignore[method-assign]
    try:
        with (
            tempfile.TemporaryDirectory(prefix="pithlog-stages-") as folder,
            Store.open(Path(folder) / "s") as store,
        ):
            start = time.perf_counter()
            for i in range(0, len(lines), 1000):
                store.append(lines[i : i + 1000], ring)
            total = time.perf_counter() - start
    finally:
        SignatureCheck.run = run  # type: ignore[method-assign]
    door = best(lambda: [parse_envelope(x) for x in lines], 1)
    envelopes = [parse_envelope(x) for x in lines]
    checks = best(lambda: [prepare(e, ring) for e in envelopes], 1)
    return max(0.0, total - door - checks)


def table(lines: list[bytes], verify_us: float) -> str:
    ring = make_keyring(test_keyring_entries())
    was = gc.isenabled()
    gc.disable()
    try:
        rows = stages(lines, ring, verify_us)
    finally:
        if was:
            gc.enable()
    out = ["| stage (one core) | us per event | share of one verify |", "|---|---|---|"]
    out += [f"| {name} | {us:,.1f} | {us / verify_us:.2f} |" for name, us in rows]
    return "\n".join(out)


def main(argv: list[str]) -> int:
    path = Path(argv[0]) if argv else Path(__file__).parent / ".cache" / "mixed-10000.jsonl"
    lines = list(itertools.islice(path.read_bytes().splitlines(), 20000))
    print(table(lines, 1e6 / raw_verify_rate(5000)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
