"""Ed25519 arithmetic for tests (RFC 8032), written apart from pithlog so that it can judge it.

Slow and plain: affine coordinates, one modular inverse per addition. Enough to build the
points and signatures that verifiers disagree about: the eight small-order points,
non-canonical encodings, signatures with ``S >= L``, and signatures that only a cofactored
verifier accepts.
"""

from __future__ import annotations

import functools
import hashlib

P = 2**255 - 19
L = 2**252 + 27742317777372353535851937790883648493
D = (-121665 * pow(121666, P - 2, P)) % P
SQRT_M1 = pow(2, (P - 1) // 4, P)

Point = tuple[int, int]
IDENTITY: Point = (0, 1)


def add(p: Point, q: Point) -> Point:
    """Twisted Edwards addition (a = -1), complete on this curve."""
    (x1, y1), (x2, y2) = p, q
    t = D * x1 * x2 * y1 * y2 % P
    x3 = (x1 * y2 + x2 * y1) * pow(1 + t, P - 2, P) % P
    y3 = (y1 * y2 + x1 * x2) * pow(1 - t, P - 2, P) % P
    return x3, y3


def _add_extended(p: tuple[int, int, int, int], q: tuple[int, int, int, int],
                  ) -> tuple[int, int, int, int]:  # fmt: skip
    """RFC 8032 5.1.4 addition in extended coordinates (X:Y:Z:T), no inverse."""
    x1, y1, z1, t1 = p
    x2, y2, z2, t2 = q
    a = (y1 - x1) * (y2 - x2) % P
    b = (y1 + x1) * (y2 + x2) % P
    c = t1 * 2 * D * t2 % P
    d = z1 * 2 * z2 % P
    e, f, g, h = b - a, d - c, d + c, b + a
    return e * f % P, g * h % P, f * g % P, e * h % P


def mul(n: int, p: Point) -> Point:
    out = (0, 1, 1, 0)
    q = (p[0], p[1], 1, p[0] * p[1] % P)
    while n:
        if n & 1:
            out = _add_extended(out, q)
        q = _add_extended(q, q)
        n >>= 1
    x, y, z, _ = out
    inverse = pow(z, P - 2, P)
    return x * inverse % P, y * inverse % P


def neg(p: Point) -> Point:
    return (-p[0]) % P, p[1]


def encode(p: Point) -> bytes:
    x, y = p
    return (y | (x & 1) << 255).to_bytes(32, "little")


def x_for(y: int, sign: int) -> int | None:
    """The x of the curve point with this y and sign bit, or None (RFC 8032 5.1.3 step 2-4)."""
    u = (y * y - 1) % P
    v = (D * y * y + 1) % P
    x = u * pow(v, 3, P) * pow(u * pow(v, 7, P), (P - 5) // 8, P) % P
    if v * x * x % P == (-u) % P:
        x = x * SQRT_M1 % P
    if v * x * x % P != u:
        return None
    if x == 0 and sign:
        return None
    return x if x & 1 == sign else P - x


def decode(raw: bytes) -> Point | None:
    """RFC 8032 5.1.3, strictly: ``None`` for a non-canonical y or a non-point."""
    word = int.from_bytes(raw, "little")
    y, sign = word & ((1 << 255) - 1), word >> 255
    if y >= P:
        return None
    x = x_for(y, sign)
    return None if x is None else (x, y)


def _base() -> Point:
    y = 4 * pow(5, P - 2, P) % P
    x = x_for(y, 0)
    assert x is not None
    return x, y


B = _base()


def on_curve(p: Point) -> bool:
    x, y = p
    return (-x * x + y * y - 1 - D * x * x * y * y) % P == 0


@functools.cache
def torsion() -> tuple[Point, ...]:
    """The eight points of small order, ``[k]T`` for a point ``T`` of order 8."""
    y = 2
    while True:
        x = x_for(y, 0)
        if x is not None:
            t = mul(L, (x, y))  # the torsion part of a random point
            if mul(4, t) != IDENTITY:  # order 8
                points = [IDENTITY]
                for _ in range(7):
                    points.append(add(points[-1], t))
                assert len(set(points)) == 8 and mul(8, t) == IDENTITY
                return tuple(points)
        y += 1


def secret_scalar(seed: bytes) -> tuple[int, bytes]:
    """``(a, prefix)`` of an RFC 8032 private key seed."""
    h = hashlib.sha512(seed).digest()
    a = int.from_bytes(h[:32], "little")
    a &= (1 << 254) - 8
    a |= 1 << 254
    return a, h[32:]


def challenge(r_enc: bytes, a_enc: bytes, message: bytes) -> int:
    return int.from_bytes(hashlib.sha512(r_enc + a_enc + message).digest(), "little") % L


def sign(seed: bytes, message: bytes, *, nonce: int | None = None, r_offset: Point = IDENTITY,
         ) -> bytes:  # fmt: skip
    """An Ed25519 signature; with ``r_offset`` a point added to ``R`` before hashing (so
    ``[S]B = R' - offset + [k]A``), and with ``nonce`` a chosen ``r``."""
    a, prefix = secret_scalar(seed)
    a_enc = encode(mul(a, B))
    if nonce is None:
        nonce = int.from_bytes(hashlib.sha512(prefix + message).digest(), "little") % L
    r_point = add(mul(nonce, B), r_offset)
    r_enc = encode(r_point)
    s = (nonce + challenge(r_enc, a_enc, message) * a) % L
    return r_enc + s.to_bytes(32, "little")


def verify(public: bytes, message: bytes, signature: bytes, *, cofactored: bool) -> bool:
    """RFC 8032 5.1.7 verification, either equation; ``S < L`` and canonical R and A."""
    a_point, r_point = decode(public), decode(signature[:32])
    s = int.from_bytes(signature[32:], "little")
    if a_point is None or r_point is None or s >= L:
        return False
    k = challenge(signature[:32], public, message)
    left = mul(s, B)
    right = add(r_point, mul(k, a_point))
    if cofactored:
        return mul(8, left) == mul(8, right)
    return left == right
