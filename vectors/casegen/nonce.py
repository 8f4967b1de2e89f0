"""Ed25519 signing with a chosen nonce: a second, different, valid signature of one message
(spec 7 step 0: two copies of one event that both pass checks 1-12), and the malleated form
S + L that RFC 8032 verifiers reject.
"""

from __future__ import annotations

import hashlib

from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

from pithlog.protocol.keys import SigningKey

_P = 2**255 - 19
_L = 2**252 + 27742317777372353535851937790883648493
_D = -121665 * pow(121666, _P - 2, _P) % _P
_SQRT_M1 = pow(2, (_P - 1) // 4, _P)


def _x_of(y: int, sign: int) -> int:
    xx = (y * y - 1) * pow(_D * y * y + 1, _P - 2, _P) % _P
    x = pow(xx, (_P + 3) // 8, _P)
    if (x * x - xx) % _P:
        x = x * _SQRT_M1 % _P
    return _P - x if x & 1 != sign else x


_BY = 4 * pow(5, _P - 2, _P) % _P
_BASE = (_x_of(_BY, 0), _BY)


def _add(p: tuple[int, int], q: tuple[int, int]) -> tuple[int, int]:
    (x1, y1), (x2, y2) = p, q
    t = _D * x1 * x2 * y1 * y2 % _P
    return (
        (x1 * y2 + x2 * y1) * pow(1 + t, _P - 2, _P) % _P,
        (y1 * y2 + x1 * x2) * pow(1 - t, _P - 2, _P) % _P,
    )


def _mul(scalar: int, point: tuple[int, int]) -> tuple[int, int]:
    result = (0, 1)
    while scalar:
        if scalar & 1:
            result = _add(result, point)
        point = _add(point, point)
        scalar >>= 1
    return result


def _encode_point(point: tuple[int, int]) -> bytes:
    x, y = point
    return (y | (x & 1) << 255).to_bytes(32, "little")


def sign_with_nonce(key: SigningKey, message: bytes, salt: bytes) -> bytes:
    """RFC 8032 signing, except that the nonce hash is prefixed with ``salt``.

    With an empty salt this is the standard deterministic signature; any other salt gives
    another signature that verifies just as well.
    """
    seed = key.private_key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    h = hashlib.sha512(seed).digest()
    a = int.from_bytes(h[:32], "little") & ((1 << 254) - 8) | (1 << 254)
    public = _encode_point(_mul(a, _BASE))
    assert public == key.public_key
    r = int.from_bytes(hashlib.sha512(salt + h[32:] + message).digest(), "little") % _L
    big_r = _encode_point(_mul(r, _BASE))
    k = int.from_bytes(hashlib.sha512(big_r + public + message).digest(), "little") % _L
    return big_r + ((r + k * a) % _L).to_bytes(32, "little")


def malleate(signature: bytes) -> bytes:
    """The same signature with S replaced by S + L (not canonical; RFC 8032 rejects it)."""
    s = int.from_bytes(signature[32:], "little")
    return signature[:32] + (s + _L).to_bytes(32, "little")
