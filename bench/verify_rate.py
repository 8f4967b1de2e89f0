"""The yardstick every figure of ``make bench`` is divided by: the raw Ed25519 verify rate of
one core, measured in the same run (imported by ``bench.py`` and ``stages.py`` alike)."""

from __future__ import annotations

import time
from collections.abc import Callable

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey


def timed(func: Callable[[], object]) -> float:
    """Wall seconds of one call of ``func``."""
    start = time.perf_counter()
    func()
    return time.perf_counter() - start


def raw_verify_rate(n: int) -> float:
    """Ed25519 verifications per second, one core, 32-byte messages (what pithlog signs)."""
    key = Ed25519PrivateKey.generate()
    public = key.public_key()
    message = bytes(32)
    signature = key.sign(message)
    seconds = timed(lambda: [public.verify(signature, message) for _ in range(n)])
    return n / seconds


def sodium_verify_rate(n: int) -> float:
    """The same with libsodium (PyNaCl), which pithlog asks first
    (``pithlog.protocol.keys.verify_signature``): not the yardstick, which stays
    ``cryptography``'s, but what shows how much of a ratio comes from verifying faster."""
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
    from nacl.bindings import crypto_sign_open

    key = Ed25519PrivateKey.generate()
    public = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    signed = key.sign(bytes(32)) + bytes(32)
    seconds = timed(lambda: [crypto_sign_open(signed, public) for _ in range(n)])
    return n / seconds
