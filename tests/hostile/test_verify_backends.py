"""Ed25519 verification by two libraries: pithlog asks libsodium first (the faster), and
when libsodium says no it asks OpenSSL (through ``cryptography``), whose verdict is the
one pithlog gives (``pithlog.protocol.keys.verify_signature``, ``docs/protocol.md``). These
tests hold that split to OpenSSL's verdict on the signatures where the two are known to
differ (an R of small order, S not below the group's order, damaged bytes) and on random
keys, messages and damage.
"""

from __future__ import annotations

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from hypothesis import given, settings
from hypothesis import strategies as st
from nacl.bindings import crypto_sign_open
from nacl.exceptions import BadSignatureError

from pithlog.protocol.keys import verify_signature
from pithlog.testing import test_key

from . import edwards as ed
from .corpus import MIRROR_HINT, seed_of


def _openssl(public: bytes, message: bytes, signature: bytes) -> bool:
    try:
        Ed25519PublicKey.from_public_bytes(public).verify(signature, message)
    except InvalidSignature:
        return False
    return True


def _sodium(public: bytes, message: bytes, signature: bytes) -> bool:
    try:
        crypto_sign_open(signature + message, public)
    except BadSignatureError:
        return False
    return True


def test_a_signature_libsodium_refuses_and_openssl_accepts_is_valid() -> None:
    """R the identity (the nonce 0): libsodium refuses an R of small order, OpenSSL accepts
    it, and the verdict is OpenSSL's, so libsodium's no was asked again."""
    public = test_key("mirror").public_key
    message = bytes.fromhex(MIRROR_HINT["event_id"][len("sha256:"):])
    signature = ed.sign(seed_of("mirror"), message, nonce=0)
    assert signature[:32] == ed.encode(ed.IDENTITY)
    assert not _sodium(public, message, signature)
    assert _openssl(public, message, signature)
    verifier = Ed25519PublicKey.from_public_bytes(public)
    assert verify_signature(verifier, signature, message)
    assert verify_signature(verifier, signature, message, public)


def _edge_signatures(message: bytes) -> list[bytes]:
    """Signatures of ``message`` by the mirror key on which verifiers are known to differ,
    and plain ones, whole and damaged."""
    seed = seed_of("mirror")
    honest = ed.sign(seed, message)
    s = int.from_bytes(honest[32:], "little")
    out = [honest, ed.sign(seed, message, nonce=0), ed.sign(seed, message, nonce=1),
           honest[:32] + (s + ed.L).to_bytes(32, "little"),  # S + L: not below the order
           honest[:32] + bytes(32), bytes(64), honest[::-1]]  # fmt: skip
    out += [ed.sign(seed, message, nonce=5, r_offset=t) for t in ed.torsion()[1:]]
    out += [ed.encode(t) + bytes(32) for t in ed.torsion()]
    for bit in (0, 7, 255, 256, 300, 511):
        damaged = bytearray(honest)
        damaged[bit // 8] ^= 1 << (bit % 8)
        out.append(bytes(damaged))
    return out


@pytest.mark.parametrize("message", [bytes(32), b"\xff" * 32, b"note\n" * 40])
def test_verify_signature_gives_openssls_verdict_on_every_edge(message: bytes) -> None:
    public = test_key("mirror").public_key
    verifier = Ed25519PublicKey.from_public_bytes(public)
    signatures = _edge_signatures(message)
    verdicts = [_openssl(public, message, sig) for sig in signatures]
    assert True in verdicts and False in verdicts
    assert any(o and not _sodium(public, message, sig)
               for o, sig in zip(verdicts, signatures, strict=True))  # fmt: skip
    for signature, expected in zip(signatures, verdicts, strict=True):
        assert verify_signature(verifier, signature, message, public) is expected
        assert verify_signature(verifier, signature, message) is expected


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=32, max_size=32), st.binary(max_size=64), st.integers(0, 511),
       st.booleans())  # fmt: skip
def test_verify_signature_agrees_with_openssl(seed: bytes, message: bytes, bit: int,
                                              damage: bool) -> None:  # fmt: skip
    key = Ed25519PrivateKey.from_private_bytes(seed)
    public = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    signature = bytearray(key.sign(message))
    if damage:
        signature[bit // 8] ^= 1 << (bit % 8)
    verifier = Ed25519PublicKey.from_public_bytes(public)
    expected = _openssl(public, message, bytes(signature))
    assert verify_signature(verifier, bytes(signature), message, public) is expected
    assert _sodium(public, message, bytes(signature)) is expected  # no R of small order here
