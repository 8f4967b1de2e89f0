"""Signed events for the store tests, made with the fixed public test keys.

Plain envelope dicts (what a signer publishes) and their JCS bytes; a small pure-Python
Ed25519 signer with a chosen nonce makes a second, equally valid signature of one body
(Ed25519 verification accepts any nonce), so two valid copies of one event_id can exist.
"""

from __future__ import annotations

import datetime
import hashlib
import random
from typing import Any

from pithlog.protocol.canonical import digest, jcs
from pithlog.protocol.event_types import prepare_record_created
from pithlog.protocol.events import body_of, sign_event
from pithlog.protocol.keys import Keyring
from pithlog.protocol.reduce import Pending, reduce_events
from pithlog.protocol.state import render, state_document
from pithlog.protocol.text_forms import encode_b64
from pithlog.testing import test_key, test_keyring

KEYRING = test_keyring()
BASE = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def ts(seconds: int) -> str:
    """A ts ``seconds`` after 2026-01-01T00:00:00Z."""
    return (BASE + datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def canonical_record(source_id: str) -> dict[str, Any]:
    return {
        "metadata": {"submitted_at": "2025-06-01T10:00:00Z", "title_canon_sha256": "ab" * 32},
        "schema_version": "1.0",
        "source": {"id": source_id, "kind": "arxiv", "version": 1},
    }


def record(source_id: str, at: int = 0, signer: str = "registry") -> dict[str, Any]:
    """A valid record_created for arXiv ``source_id``."""
    key = test_key(signer)
    pith, payload = prepare_record_created(key, {"canonical_record": canonical_record(source_id)})
    return sign_event(key, "record_created", pith, "record", ts(at), payload)


def attestation(
    pith: str, at: int, statement: str = "I wrote this", target: str = "record",
    signer: str = "author",
) -> dict[str, Any]:  # fmt: skip
    return sign_event(test_key(signer), "author_attestation", pith, target, ts(at),
                      {"statement": statement})  # fmt: skip


def mirror_hint(pith: str, at: int, locator: str, signer: str = "mirror") -> dict[str, Any]:
    return sign_event(test_key(signer), "mirror_hint", pith, "record", ts(at), {"locator": locator})


def correction(pith: str, at: int, notice: str) -> dict[str, Any]:
    return sign_event(test_key("registry"), "correction", pith, "record", ts(at),
                      {"correction_type": "erratum", "notice": notice})  # fmt: skip


def encoded(event: dict[str, Any]) -> bytes:
    return jcs(event)


def forged(event: dict[str, Any]) -> dict[str, Any]:
    """The same body and event_id with a signature that does not verify (check 6)."""
    copy = dict(event)
    sig = bytearray(64)
    sig[0] = 1
    copy["signature_b64"] = encode_b64(bytes(sig))
    return copy


def tampered(event: dict[str, Any]) -> dict[str, Any]:
    """Another body under the same event_id (check 3, event_id_mismatch)."""
    copy = dict(event)
    copy["created_at"] = ts(10**7)
    return copy


def resigned(event: dict[str, Any], signer: str, nonce: bytes) -> dict[str, Any]:
    """The same body signed again with another (valid) nonce: a second valid copy."""
    message = bytes.fromhex(digest(body_of(event)))
    copy = dict(event)
    copy["signature_b64"] = encode_b64(_sign_with_nonce(_seed(signer), message, nonce))
    return copy


def mixed_events(rng: random.Random, piths: int, per_pith: int) -> list[dict[str, Any]]:
    """A log with some of everything: records, attestations (some equivocating), mirror
    hints, corrections, events dated before their record, a stranger's events, forged copies
    and piths that never get a record (pending)."""
    events: list[dict[str, Any]] = []
    for p in range(piths):
        rec = record(f"2501.{p:05d}", at=100 + rng.randrange(50))
        pith = rec["pith_number"]
        if p % 7 != 3:  # some piths stay pending
            events.append(rec)
        for i in range(per_pith):
            kind = rng.randrange(10)
            at = 100 + rng.randrange(400)
            if kind < 4:
                events.append(attestation(pith, at, f"statement {p}-{i}",
                                          target=f"claim:c{rng.randrange(3)}"))  # fmt: skip
            elif kind < 6:
                events.append(mirror_hint(pith, at, f"https://m{i}.test.invalid/{p}"))
            elif kind == 6:
                events.append(correction(pith, at, f"notice {p}-{i}"))
            elif kind == 7:  # an equivocation: one slot, two statements
                events.append(attestation(pith, at, f"yes {p}-{i}", target="claim:eq"))
                events.append(attestation(pith, at, f"no {p}-{i}", target="claim:eq"))
            elif kind == 8:
                events.append(attestation(pith, at, f"stranger {p}-{i}", signer="stranger"))
            else:
                events.append(attestation(pith, rng.randrange(90), f"early {p}-{i}"))
    return events


def expected_states(events: list[dict[str, Any]], keyring: Keyring = KEYRING) -> dict[str, bytes]:
    """What ``pithlog reduce`` gives for these events: pith -> rendered state (or b"" when
    the pith is pending)."""
    from pithlog.protocol.events import admit

    out: dict[str, bytes] = {}
    for pith, result in reduce_events([admit(e) for e in events], keyring).items():
        out[pith] = b"" if isinstance(result, Pending) else render(state_document(result))
    return out


# --- Ed25519 with a chosen nonce (RFC 8032, reference arithmetic) --------------------------

_P = 2**255 - 19
_L = 2**252 + 27742317777372353535851937790883648493
_D = (-121665 * pow(121666, _P - 2, _P)) % _P
_I = pow(2, (_P - 1) // 4, _P)


def _xrecover(y: int) -> int:
    xx = (y * y - 1) * pow(_D * y * y + 1, _P - 2, _P)
    x = pow(xx, (_P + 3) // 8, _P)
    if (x * x - xx) % _P != 0:
        x = (x * _I) % _P
    if x % 2 != 0:
        x = _P - x
    return x


_BY = 4 * pow(5, _P - 2, _P) % _P
_B = (_xrecover(_BY), _BY, 1, _xrecover(_BY) * _BY % _P)


def _add(p: tuple[int, ...], q: tuple[int, ...]) -> tuple[int, int, int, int]:
    x1, y1, z1, t1 = p
    x2, y2, z2, t2 = q
    a = (y1 - x1) * (y2 - x2) % _P
    b = (y1 + x1) * (y2 + x2) % _P
    c = t1 * 2 * _D * t2 % _P
    dd = z1 * 2 * z2 % _P
    e, f, g, h = b - a, dd - c, dd + c, b + a
    return (e * f % _P, g * h % _P, f * g % _P, e * h % _P)


def _mul(s: int, point: tuple[int, ...]) -> tuple[int, ...]:
    q: tuple[int, ...] = (0, 1, 1, 0)
    while s > 0:
        if s & 1:
            q = _add(q, point)
        point = _add(point, point)
        s >>= 1
    return q


def _encode(point: tuple[int, ...]) -> bytes:
    x, y, z, _ = point
    zi = pow(z, _P - 2, _P)
    x, y = x * zi % _P, y * zi % _P
    return (y | ((x & 1) << 255)).to_bytes(32, "little")


def _seed(name: str) -> bytes:
    return hashlib.sha256(b"pithlog public test key: " + name.encode("utf-8")).digest()


def _sign_with_nonce(seed: bytes, message: bytes, nonce: bytes) -> bytes:
    h = hashlib.sha512(seed).digest()
    a = int.from_bytes(h[:32], "little")
    a &= (1 << 254) - 8
    a |= 1 << 254
    public = _encode(_mul(a, _B))
    r = int.from_bytes(hashlib.sha512(nonce + message).digest(), "little") % _L
    big_r = _encode(_mul(r, _B))
    k = int.from_bytes(hashlib.sha512(big_r + public + message).digest(), "little") % _L
    s = (r + k * a) % _L
    return big_r + s.to_bytes(32, "little")
