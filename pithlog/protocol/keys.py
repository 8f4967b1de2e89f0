"""Keys, signers and the keyring (spec section 3).

- Ed25519 signing and verification (RFC 8032) through ``cryptography``; a signature that
  libsodium (PyNaCl) accepts is not asked of ``cryptography`` again (:func:`verify_signature`).
- ``public_key_fingerprint``: first 16 bytes of SHA-256 of the raw public key, lowercase hex.
- :func:`load_keyring`: the verifier's trust configuration, every rule checked; a keyring
  that breaks one is refused whole with a :class:`~pithlog.errors.KeyringError`.
- Private key files (a pithlog format, documented in ``docs/cli.md``): load and dump.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)
from nacl.bindings import crypto_sign_open
from nacl.exceptions import BadSignatureError

from pithlog.errors import DoorError, KeyFileError, KeyringError
from pithlog.protocol.canonical import digest, parse
from pithlog.protocol.text_forms import decode_b64, encode_b64
from pithlog.protocol.timestamps import is_ts

SIGNER_TYPES = frozenset(
    {
        "pith_registry",
        "author",
        "timestamp_authority",
        "mirror",
        "citation_indexer",
        "replicator",
    }
)
"""Spec 3: the six signer types."""

KEY_MEMBERS = (
    "key_id",
    "public_key_b64",
    "signer_id",
    "signer_type",
    "not_before",
    "not_after",
    "revoked_at",
)
"""Spec 3: every keyring entry has all seven (others are allowed and ignored)."""


def fingerprint(public_key: bytes) -> str:
    """``public_key_fingerprint``: first 16 bytes of SHA-256 of the raw key, lowercase hex."""
    return hashlib.sha256(public_key).digest()[:16].hex()


# --- RFC 8032 section 5.1.3 point decoding ------------------------------------------------
# cryptography (OpenSSL) accepts any 32 bytes as a public key; the spec asks for a canonical
# encoding of a curve point that is not of small order, so the keyring check decodes here.

_P = 2**255 - 19
_D = (-121665 * pow(121666, _P - 2, _P)) % _P
_SQRT_M1 = pow(2, (_P - 1) // 4, _P)


def _decode_point(raw: bytes) -> tuple[int, int] | None:
    """Affine (x, y) of a canonical point encoding, or None (RFC 8032 5.1.3)."""
    if len(raw) != 32:
        return None
    word = int.from_bytes(raw, "little")
    x_0 = word >> 255
    y = word & ((1 << 255) - 1)
    if y >= _P:
        return None
    u = (y * y - 1) % _P
    v = (_D * y * y + 1) % _P
    x = (u * pow(v, 3, _P) * pow(u * pow(v, 7, _P), (_P - 5) // 8, _P)) % _P
    vx2 = (v * x * x) % _P
    if vx2 == u:
        pass
    elif vx2 == (-u) % _P:
        x = (x * _SQRT_M1) % _P
    else:
        return None
    if x == 0 and x_0 == 1:
        return None
    if x & 1 != x_0:
        x = _P - x
    return x, y


def _double(x: int, y: int, z: int) -> tuple[int, int, int]:
    """[2]P in projective coordinates (X : Y : Z), a = -1 (dbl-2008-bbjlp): no inversion,
    where the affine doubling needs two (each a 255-bit power): a keyring's check costs its
    decoding, not its doublings, even for tens of thousands of keys."""
    b = (x + y) * (x + y) % _P
    c = x * x % _P
    d = y * y % _P
    f = (d - c) % _P  # a*C + D with a = -1
    j = (f - 2 * z * z) % _P
    return (b - c - d) * j % _P, f * (-c - d) % _P, f * j % _P


def is_valid_public_key(raw: bytes) -> bool:
    """A canonical encoding of a curve point that is not one of the eight of small order."""
    point = _decode_point(raw)
    if point is None:
        return False
    x, y, z = point[0], point[1], 1
    for _ in range(3):  # [8]P by three doublings; small order iff it is the identity
        x, y, z = _double(x, y, z)
    return not (x == 0 and y == z)  # the identity (0 : Z : Z); Z is never 0 on this curve


# --- signing and verifying ----------------------------------------------------------------


def verify_signature(
    verifier: Ed25519PublicKey, signature: bytes, message: bytes, public_key: bytes | None = None
) -> bool:
    """True when ``signature`` is a valid Ed25519 signature of ``message`` by the key of
    ``verifier`` (its raw 32 bytes ``public_key``, when the caller has them), as OpenSSL,
    through ``cryptography``, decides it (``docs/protocol.md``, cofactorless and strict).

    libsodium is asked first, since it verifies about 1.6 times as fast on the machines
    measured (``bench/verify_rate.py``). What it accepts, OpenSSL accepts: both require S
    below the group order and test the same cofactorless equation, comparing the
    encoding of ``[S]B - [k]A`` with the bytes of R, and libsodium refuses more besides
    (an R or a key of small order, a key not canonically encoded). So its yes is the
    verdict, and only its no is asked of OpenSSL again: the verdict stays OpenSSL's, on
    every machine, at libsodium's cost for the valid signatures that are nearly all.
    ``tests/hostile/test_signature_edges.py`` builds the signatures on which the two
    disagree (an R of small order: libsodium refuses it, OpenSSL and pithlog accept)."""
    raw = verifier.public_bytes_raw() if public_key is None else public_key
    if len(signature) == 64 and len(raw) == 32:  # libsodium reads exactly these lengths
        try:
            crypto_sign_open(signature + message, raw)
        except BadSignatureError:
            pass
        else:
            return True
    try:
        verifier.verify(signature, message)
    except InvalidSignature:
        return False
    return True


@dataclass(frozen=True)
class SigningKey:
    """A private key with the signer identity it signs as."""

    key_id: str
    signer_id: str
    signer_type: str
    private_key: Ed25519PrivateKey = field(repr=False)

    @classmethod
    def from_seed(cls, seed: bytes, key_id: str, signer_id: str, signer_type: str) -> SigningKey:
        return cls(key_id, signer_id, signer_type, Ed25519PrivateKey.from_private_bytes(seed))

    @classmethod
    def generate(cls, key_id: str, signer_id: str, signer_type: str) -> SigningKey:
        return cls(key_id, signer_id, signer_type, Ed25519PrivateKey.generate())

    @property
    def public_key(self) -> bytes:
        return self.private_key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.public_key)

    @property
    def signer(self) -> dict[str, str]:
        """The signer object of spec 3, members in JCS order."""
        return {
            "key_id": self.key_id,
            "public_key_fingerprint": self.fingerprint,
            "signer_id": self.signer_id,
            "signer_type": self.signer_type,
        }

    def sign(self, message: bytes) -> bytes:
        return self.private_key.sign(message)

    def keyring_entry(
        self,
        not_before: str | None = None,
        not_after: str | None = None,
        revoked_at: str | None = None,
    ) -> dict[str, Any]:
        """The keyring entry (spec 3) for this key."""
        return {
            "key_id": self.key_id,
            "public_key_b64": encode_b64(self.public_key),
            "signer_id": self.signer_id,
            "signer_type": self.signer_type,
            "not_before": not_before,
            "not_after": not_after,
            "revoked_at": revoked_at,
        }


# --- key files ----------------------------------------------------------------------------

KEY_FILE_VERSION = "pithlog-key-v1"


def dump_key_file(key: SigningKey) -> bytes:
    """The private key file: a JSON object holding the 32-byte Ed25519 seed and the signer."""
    seed = key.private_key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    doc = {
        "key_file_version": KEY_FILE_VERSION,
        "key_id": key.key_id,
        "signer_id": key.signer_id,
        "signer_type": key.signer_type,
        "private_key_b64": encode_b64(seed),
        "public_key_b64": encode_b64(key.public_key),
    }
    return (json.dumps(doc, indent=2) + "\n").encode("utf-8")


def load_key_file(data: bytes) -> SigningKey:
    """Read a key file written by :func:`dump_key_file`, or raise :class:`KeyFileError`."""
    try:
        doc = parse(data)
    except DoorError as exc:
        message = f"key file: {exc.message}"
        raise KeyFileError("not_json", message, exc.where) from exc
    if not isinstance(doc, dict) or doc.get("key_file_version") != KEY_FILE_VERSION:
        raise KeyFileError("version", f"key file must have key_file_version {KEY_FILE_VERSION!r}")
    for name in ("key_id", "signer_id", "signer_type", "private_key_b64"):
        if not isinstance(doc.get(name), str) or not doc[name]:
            raise KeyFileError("member", f"key file member {name!r} must be a non-empty string")
    if doc["signer_type"] not in SIGNER_TYPES:  # a str, checked above
        raise KeyFileError("signer_type", f"unknown signer_type {doc['signer_type']!r}; use one of "
                           + ", ".join(sorted(SIGNER_TYPES)))
    seed = decode_b64(doc["private_key_b64"])
    if seed is None or len(seed) != 32:
        raise KeyFileError("private_key", "private_key_b64 must be base64 of 32 bytes")
    key = SigningKey.from_seed(seed, doc["key_id"], doc["signer_id"], doc["signer_type"])
    if "public_key_b64" in doc and doc["public_key_b64"] != encode_b64(key.public_key):
        raise KeyFileError("public_key", "public_key_b64 does not belong to the private key; "
                           "remove it or give the matching one")
    return key


# --- the keyring --------------------------------------------------------------------------


@dataclass(frozen=True)
class KeyEntry:
    """One trusted key of the keyring (spec 3)."""

    key_id: str
    public_key: bytes
    signer_id: str
    signer_type: str
    not_before: str | None
    not_after: str | None
    revoked_at: str | None
    fingerprint: str
    verifier: Ed25519PublicKey = field(repr=False, compare=False)

    def valid_at(self, t: str) -> bool:
        """Spec 3: valid at ts ``t``; a revocation does not reach back."""
        return (
            (self.not_before is None or self.not_before <= t)
            and (self.not_after is None or t < self.not_after)
            and (self.revoked_at is None or t < self.revoked_at)
        )

    def entry(self) -> dict[str, Any]:
        """The seven members of spec 3, as a JSON object."""
        return {
            "key_id": self.key_id,
            "public_key_b64": encode_b64(self.public_key),
            "signer_id": self.signer_id,
            "signer_type": self.signer_type,
            "not_before": self.not_before,
            "not_after": self.not_after,
            "revoked_at": self.revoked_at,
        }


class Keyring(Mapping[str, KeyEntry]):
    """The verifier's trust configuration: ``key_id`` -> :class:`KeyEntry`.

    ``digest`` identifies what the keyring means (the seven members of every key, sorted by
    key_id), not how its file is written, so caches keyed by it survive reformatting.
    """

    def __init__(self, entries: Mapping[str, KeyEntry]) -> None:
        self._entries = dict(entries)
        meaning = [self._entries[k].entry() for k in sorted(self._entries)]
        self.digest = digest({"keyring_version": "1", "keys": meaning})

    def __getitem__(self, key_id: str) -> KeyEntry:
        return self._entries[key_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Keyring({len(self)} keys, digest={self.digest[:12]})"


def _refuse(detail: str, message: str, where: str | None = None) -> KeyringError:
    return KeyringError(detail, message, where)


def _refuse_lookalike(doc: dict[str, Any]) -> None:
    """A key file or a keyring entry given where a keyring is expected: say which."""
    if "key_file_version" in doc:
        raise _refuse("not_a_keyring", "this is a private key file, not a keyring; use "
                      "`pithlog keyring add KEYRING KEYFILE` to put its public entry in one")
    if "key_id" in doc or "public_key_b64" in doc:
        raise _refuse("not_a_keyring", "this is one keyring entry (as pithlog keygen prints "
                      "it), not a keyring; use `pithlog keyring new KEYRING` and `pithlog "
                      "keyring add KEYRING ENTRY` to make one")


def keyring_from_value(doc: Any) -> Keyring:
    """Check a parsed keyring (spec 3) and build it, or raise :class:`KeyringError`."""
    if not isinstance(doc, dict):
        raise _refuse("shape", "keyring must be a JSON object")
    if "keyring_version" not in doc:
        _refuse_lookalike(doc)
    if doc.get("keyring_version") != "1":
        raise _refuse("version", 'keyring_version must be the string "1"', "/keyring_version")
    keys = doc.get("keys")
    if not isinstance(keys, list):
        raise _refuse("shape", "keyring member 'keys' must be an array", "/keys")
    entries: dict[str, KeyEntry] = {}
    for i, item in enumerate(keys):
        where = f"/keys/{i}"
        if not isinstance(item, dict):
            raise _refuse("shape", "each key must be a JSON object", where)
        missing = [m for m in KEY_MEMBERS if m not in item]
        if missing:
            raise _refuse("missing_member", f"key lacks {', '.join(missing)}; every key needs all "
                          "seven members (null for no bound)", where)
        key_id, signer_id = item["key_id"], item["signer_id"]
        if not isinstance(key_id, str) or not key_id:
            raise _refuse("key_id", "key_id must be a non-empty string", f"{where}/key_id")
        if key_id in entries:
            raise _refuse("duplicate_key_id", f"key_id {key_id!r} appears twice; give each key its "
                          "own key_id", where)
        if not isinstance(signer_id, str) or not signer_id:
            raise _refuse("signer_id", "signer_id must be a non-empty string", f"{where}/signer_id")
        if not isinstance(item["signer_type"], str) or item["signer_type"] not in SIGNER_TYPES:
            raise _refuse(
                "signer_type",
                f"signer_type {item['signer_type']!r} is not one of "
                + ", ".join(sorted(SIGNER_TYPES)),
                f"{where}/signer_type",
            )
        raw = decode_b64(item["public_key_b64"])
        if raw is None or len(raw) != 32:
            raise _refuse(
                "public_key",
                "public_key_b64 must be canonical standard base64 of exactly 32 bytes",
                f"{where}/public_key_b64",
            )
        if not is_valid_public_key(raw):
            raise _refuse(
                "public_key",
                "public_key_b64 is not a canonical Ed25519 point of large order; use the public "
                "key of a real key pair (as pithlog keygen prints it)",
                f"{where}/public_key_b64",
            )
        for name in ("not_before", "not_after", "revoked_at"):
            if item[name] is not None and not is_ts(item[name]):
                raise _refuse(
                    "timestamp",
                    f"{name} must be null or a ts (YYYY-MM-DDTHH:MM:SSZ)",
                    f"{where}/{name}",
                )
        nb, na = item["not_before"], item["not_after"]
        if nb is not None and na is not None and not nb < na:
            raise _refuse("validity", "not_before must be earlier than not_after", where)
        entries[key_id] = KeyEntry(
            key_id=key_id,
            public_key=raw,
            signer_id=signer_id,
            signer_type=item["signer_type"],
            not_before=nb,
            not_after=na,
            revoked_at=item["revoked_at"],
            fingerprint=fingerprint(raw),
            verifier=Ed25519PublicKey.from_public_bytes(raw),
        )
    return Keyring(entries)


def load_keyring(data: bytes) -> Keyring:
    """Parse keyring bytes (the door rules of spec 1 apply) and check them (spec 3)."""
    try:
        doc = parse(data)
    except DoorError as exc:
        raise KeyringError("not_json", f"keyring file: {exc.message}", exc.where) from exc
    return keyring_from_value(doc)


def make_keyring(entries: list[dict[str, Any]]) -> Keyring:
    """A keyring from entries (as :meth:`SigningKey.keyring_entry` gives), checked."""
    return keyring_from_value({"keyring_version": "1", "keys": entries})
