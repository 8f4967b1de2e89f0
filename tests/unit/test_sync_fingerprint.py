"""The fingerprint of a sync range (pithlog.net.syncmsg.fingerprint) is hashed in chunks:
the same digest as hashing the range's items joined, without holding them joined."""

from __future__ import annotations

import hashlib
import os
import random
import tracemalloc

from pithlog.net.syncmsg import FINGERPRINT, ITEM, fingerprint


def _joined(items: list[bytes], lo: int, hi: int) -> bytes:
    h = hashlib.sha256((hi - lo).to_bytes(8, "big"))
    h.update(b"".join(items[lo:hi]))
    return h.digest()[:FINGERPRINT]


def test_digest_is_that_of_the_joined_items() -> None:
    rng = random.Random(7)
    for n in (0, 1, 2, 17, 1000, 5000, 9000):
        items = sorted(rng.randbytes(ITEM) for _ in range(n))
        for _ in range(5):
            lo = rng.randint(0, n)
            hi = rng.randint(lo, n)
            assert fingerprint(items, lo, hi) == _joined(items, lo, hi)
        assert fingerprint(items, 0, n) == _joined(items, 0, n)


def test_peak_memory_does_not_grow_with_the_range() -> None:
    n = 200_000  # 12.8 MB of items
    items = [os.urandom(ITEM) for _ in range(n)]
    tracemalloc.start()
    try:
        fingerprint(items, 0, n)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak
