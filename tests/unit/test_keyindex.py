"""keyindex.key_hash: the ``by_key`` prefix of a key_id, kept for short key_ids only."""

from __future__ import annotations

import hashlib

from pithlog.store import keyindex


def test_key_hash_is_the_sha256_of_the_key_id_and_holds_only_short_ones() -> None:
    keyindex._kept_key_hash.cache_clear()
    short, long = "registry-2026", "k" * 257
    for key_id in (short, short, long, "x" * 256, "\udc80 a lone surrogate"):
        assert keyindex.key_hash(key_id) == hashlib.sha256(
            key_id.encode("utf-8", "surrogatepass")).digest()  # fmt: skip
    kept = keyindex._kept_key_hash.cache_info()
    # the short ones are kept (the second call of ``short`` was found), the long one not
    assert kept.currsize == 3 and kept.hits == 1
    for n in range(1000):  # a stranger naming many key_ids: at most 256 are held
        keyindex.key_hash(f"key-{n}")
    assert keyindex._kept_key_hash.cache_info().currsize == 256
