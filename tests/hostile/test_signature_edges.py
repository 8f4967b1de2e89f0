"""Signature and key edge cases: where Ed25519 verifiers, base64 decoders and string
comparisons are known to disagree, pithlog takes the one strict reading.

Each test builds an event that passes every check before the one under test (it is shaped,
identified and attributed correctly), next to a control that is valid, so the verdict shows
the edge and nothing else.
"""

from __future__ import annotations

import base64
import copy
import unicodedata
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from pithlog.errors import KeyringError
from pithlog.protocol import keys
from pithlog.protocol.canonical import digest
from pithlog.protocol.checks import check_alone
from pithlog.protocol.event_types import prepare_record_created
from pithlog.protocol.events import admit, body_of, sign_event
from pithlog.protocol.keys import Keyring, SigningKey, is_valid_public_key, make_keyring
from pithlog.protocol.text_forms import encode_b64
from pithlog.testing import test_key, test_keyring_entries

from . import edwards as ed
from .corpus import (
    CANONICAL_RECORD,
    KEYRING,
    LATER,
    MIRROR_HINT,
    PITH,
    RECORD,
    RECORD_AT,
    VALID,
    seed_of,
)


def verdict(event: dict[str, Any], keyring: Keyring = KEYRING) -> str | None:
    """Checks 1-12 on one event: its reason, or None when it passes."""
    return check_alone(admit(event), keyring)


def seal(body: dict[str, Any], signer: str = "registry") -> dict[str, Any]:
    """An envelope of ``body`` as given (any shape) with its own event_id, signed by the key
    of ``signer``: checks 3 and 6 pass for it."""
    body_digest = digest(body)
    envelope = copy.deepcopy(body)
    envelope["event_id"] = "sha256:" + body_digest
    envelope["signature_b64"] = encode_b64(test_key(signer).sign(bytes.fromhex(body_digest)))
    return envelope


def with_signature(event: dict[str, Any], signature_b64: str) -> dict[str, Any]:
    """``event`` with another ``signature_b64`` (not part of the body: event_id still holds)."""
    return {**event, "signature_b64": signature_b64}


def test_controls_are_valid() -> None:
    assert verdict(RECORD) is None
    assert verdict(MIRROR_HINT) is None


# --- S >= L (malleability) -----------------------------------------------------------------


@pytest.mark.parametrize("multiple", [1, 2, 7, 15])
def test_signature_with_s_plus_l_is_bad_signature(multiple: int) -> None:
    """RFC 8032 5.1.7 requires 0 <= S < L; S + kL verifies under a lax verifier (the same
    equation mod L), which would give one event several valid envelopes."""
    signature = base64.b64decode(MIRROR_HINT["signature_b64"])
    s = int.from_bytes(signature[32:], "little")
    assert s < ed.L
    mauled = signature[:32] + (s + multiple * ed.L).to_bytes(32, "little")
    # The mauled signature satisfies the group equation: only the range check refuses it.
    assert ed.mul(s + multiple * ed.L, ed.B) == ed.mul(s, ed.B)
    assert verdict(with_signature(MIRROR_HINT, encode_b64(mauled))) == "bad_signature"


def test_receipt_signature_with_s_plus_l_is_bad_receipt() -> None:
    event = _record_with_receipt_signature(
        lambda sig: sig[:32] + (int.from_bytes(sig[32:], "little") + ed.L).to_bytes(32, "little")
    )
    assert verdict(event) == "bad_receipt"


# --- public keys in a keyring --------------------------------------------------------------


def _entry(public_key: bytes, key_id: str = "k") -> dict[str, Any]:
    entry = test_key("registry").keyring_entry()
    entry.update(key_id=key_id, public_key_b64=encode_b64(public_key))
    return entry


def _refused_code(entries: list[dict[str, Any]]) -> str:
    with pytest.raises(KeyringError) as caught:
        make_keyring(entries)
    return caught.value.code


def test_a_large_order_key_is_accepted() -> None:
    """The control of the refusals below: a real key loads, and is kept as given."""
    keyring = make_keyring([_entry(test_key("registry").public_key)])
    assert list(keyring) == ["k"] and keyring["k"].public_key == test_key("registry").public_key


@pytest.mark.parametrize("index", range(8))
def test_small_order_public_keys_are_refused(index: int) -> None:
    """The eight points of small order: any signature by them is forgeable (a verifier
    that accepts them accepts a signature made without any private key)."""
    point = ed.torsion()[index]
    raw = ed.encode(point)
    assert ed.mul(8, point) == ed.IDENTITY
    Ed25519PublicKey.from_public_bytes(raw)  # the library alone would take it
    assert _refused_code([_entry(raw)]) == "keyring.public_key"


@pytest.mark.parametrize("index", range(1, 8))
def test_a_large_order_key_with_a_torsion_part_is_accepted(index: int) -> None:
    """A point of large order plus one of small order is not of small order: the spec
    accepts it (libsodium's stricter check would not)."""
    point = ed.add(ed.decode(test_key("registry").public_key) or ed.IDENTITY,
                   ed.torsion()[index])  # fmt: skip
    assert ed.mul(8, point) != ed.IDENTITY
    assert is_valid_public_key(ed.encode(point))


def test_checking_a_key_takes_no_inversion_past_its_decoding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """[8]P is computed without a modular inversion (each a 255-bit power), so that a
    keyring of tens of thousands of keys loads in seconds, not a minute: the powers are
    those of decoding the point alone."""
    powers = 0

    def counted(*args: int) -> int:
        nonlocal powers
        powers += 1
        return pow(*args)

    monkeypatch.setattr(keys, "pow", counted, raising=False)
    assert is_valid_public_key(test_key("registry").public_key)
    assert 0 < powers <= 3


def _non_canonical_encodings() -> list[tuple[str, bytes]]:
    out: list[tuple[str, bytes]] = []
    for i in range(19):  # y = p + i, for the 19 values of y that fit in 255 bits
        for sign in (0, 1):
            out.append((f"y=p+{i},sign={sign}", ((ed.P + i) | sign << 255).to_bytes(32, "little")))
    for y in (1, ed.P - 1):  # x = 0 with the sign bit set
        out.append((f"y={y},x=0,sign=1", (y | 1 << 255).to_bytes(32, "little")))
    return out


@pytest.mark.parametrize(("label", "raw"), _non_canonical_encodings())
def test_non_canonical_public_keys_are_refused(label: str, raw: bytes) -> None:
    assert ed.decode(raw) is None, label  # not a canonical encoding of a point
    assert _refused_code([_entry(raw)]) == "keyring.public_key"


def test_non_canonical_encoding_of_a_large_order_point_is_refused() -> None:
    """Some y = p + i encode (non-canonically) a point of large order: a lax decoder would
    take them as a key other than the one their canonical bytes name."""
    found = 0
    for i in range(19):
        x = ed.x_for(i, 0)
        if x is None or ed.mul(8, (x, i)) == ed.IDENTITY:
            continue
        raw = (ed.P + i).to_bytes(32, "little")
        assert _refused_code([_entry(raw)]) == "keyring.public_key"
        found += 1
    assert found > 0


def test_bytes_that_are_not_a_point_are_refused() -> None:
    y = 3
    while ed.x_for(y, 0) is not None:
        y += 1
    assert _refused_code([_entry(y.to_bytes(32, "little"))]) == "keyring.public_key"


@pytest.mark.parametrize("length", [0, 31, 33, 64])
def test_public_keys_of_the_wrong_length_are_refused(length: int) -> None:
    assert _refused_code([_entry(bytes(range(length)))]) == "keyring.public_key"


def test_key_id_reused_across_keyring_entries_is_refused() -> None:
    same = test_keyring_entries(("registry", "author"))
    same[1]["key_id"] = same[0]["key_id"]
    assert _refused_code(same) == "keyring.duplicate_key_id"
    twice = test_keyring_entries(("registry", "registry"))  # even the very same entry
    assert _refused_code(twice) == "keyring.duplicate_key_id"


# --- the event signature -------------------------------------------------------------------


def test_signature_over_another_body_is_bad_signature() -> None:
    other = next(v for v in VALID if v["event_type"] == "correction")  # also a registry key
    signature = test_key("mirror").sign(bytes.fromhex(other["event_id"][len("sha256:"):]))
    assert len(signature) == 64
    assert verdict(with_signature(MIRROR_HINT, encode_b64(signature))) == "bad_signature"
    # The other event's own signature, by the right key type but over its body.
    signed_by_registry = test_key("registry").sign(bytes.fromhex(other["event_id"][7:]))
    assert verdict(with_signature(MIRROR_HINT, encode_b64(signed_by_registry))) == (
        "bad_signature"
    )


def _event_with_url_unsafe_signature() -> dict[str, Any]:
    """A valid mirror_hint whose signature's base64 holds '+' or '/'."""
    for n in range(1000):
        event = sign_event(test_key("mirror"), "mirror_hint", PITH, "record", LATER,
                           {"locator": f"https://m.test.invalid/{n}"})  # fmt: skip
        if "+" in event["signature_b64"] or "/" in event["signature_b64"]:
            assert verdict(event) is None
            return event
    raise AssertionError("no signature with + or / found")  # pragma: no cover


def _b64_variants(standard: str) -> list[tuple[str, str]]:
    """Other spellings of the same bytes, each not the canonical standard base64."""
    raw = base64.b64decode(standard)
    last = standard.rstrip("=")[-1]
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    stray = alphabet[alphabet.index(last) | 1]  # set a bit the decoder drops
    out = [
        ("leading space", " " + standard),
        ("trailing newline", standard + "\n"),
        ("inner space", standard[:20] + " " + standard[20:]),
        ("inner newline", standard[:44] + "\n" + standard[44:]),
        ("tab", standard[:10] + "\t" + standard[10:]),
        ("url-safe alphabet", base64.urlsafe_b64encode(raw).decode("ascii")),
        ("no padding", standard.rstrip("=")),
        ("short padding", standard[:-1]),
        ("extra padding", standard + "=="),
        ("stray bits in the last character", standard.rstrip("=")[:-1] + stray + "=="),
        ("63 bytes", encode_b64(raw[:63])),
        ("65 bytes", encode_b64(raw + b"\0")),
        ("empty", ""),
        ("hex instead of base64", raw.hex()),
        ("fullwidth digit", standard.replace(standard[5], "\uff10", 1)),
    ]
    assert all(value != standard for _, value in out)
    return out


def test_signature_b64_must_be_canonical_standard_base64() -> None:
    event = _event_with_url_unsafe_signature()
    for label, spelled in _b64_variants(event["signature_b64"]):
        assert verdict(with_signature(event, spelled)) == "bad_signature", label


def _record_with_receipt_signature(change: Any) -> dict[str, Any]:
    """A record_created whose receipt signature bytes (or its base64, when ``change``
    returns a string) are changed, resealed so that only check 12 can fail."""
    key = test_key("registry")
    _, payload = prepare_record_created(key, {"canonical_record": CANONICAL_RECORD})
    receipt = dict(payload["receipt"])
    changed = change(base64.b64decode(receipt["signature_b64"]))
    receipt["signature_b64"] = changed if isinstance(changed, str) else encode_b64(changed)
    payload["receipt"] = receipt
    return sign_event(key, "record_created", RECORD["pith_number"], "record", RECORD_AT, payload)


def test_receipt_signature_b64_must_be_canonical_standard_base64() -> None:
    assert verdict(_record_with_receipt_signature(lambda sig: sig)) is None  # the control
    # Find a receipt signature holding '+' or '/' by signing other records.
    key = test_key("registry")
    for n in range(1000):
        record = {**CANONICAL_RECORD, "n": n}
        pith, payload = prepare_record_created(key, {"canonical_record": record})
        standard = payload["receipt"]["signature_b64"]
        if "+" in standard or "/" in standard:
            break
    else:  # pragma: no cover
        raise AssertionError("no receipt signature with + or / found")
    for label, spelled in _b64_variants(standard):
        changed = copy.deepcopy(payload)
        changed["receipt"]["signature_b64"] = spelled
        event = sign_event(key, "record_created", pith, "record", RECORD_AT, changed)
        assert verdict(event) == "bad_receipt", label
    assert verdict(sign_event(key, "record_created", pith, "record", RECORD_AT, payload)) is None


def test_receipt_signature_over_another_hash_is_bad_receipt() -> None:
    other = test_key("registry").sign(bytes(32))
    assert verdict(_record_with_receipt_signature(lambda sig: other)) == "bad_receipt"


# --- signer identity: exact strings --------------------------------------------------------


def _signed_with_signer(**changes: str) -> dict[str, Any]:
    body = copy.deepcopy(body_of(MIRROR_HINT))
    body["signer"].update(changes)
    return seal(body, "mirror")


def test_upper_case_fingerprint_is_signer_mismatch() -> None:
    fingerprint = MIRROR_HINT["signer"]["public_key_fingerprint"]
    assert fingerprint != fingerprint.upper()
    event = _signed_with_signer(public_key_fingerprint=fingerprint.upper())
    assert verdict(event) == "signer_mismatch"
    letter = next(i for i, c in enumerate(fingerprint) if c.isalpha())
    mixed = fingerprint[:letter] + fingerprint[letter].upper() + fingerprint[letter + 1 :]
    assert verdict(_signed_with_signer(public_key_fingerprint=mixed)) == "signer_mismatch"


NFC = unicodedata.normalize("NFC", "caf\u00e9.test.invalid")
NFD = unicodedata.normalize("NFD", NFC)


def test_nfc_and_nfd_are_different_strings() -> None:
    assert NFC != NFD and unicodedata.normalize("NFC", NFD) == NFC


@pytest.mark.parametrize(("in_keyring", "in_event"), [(NFC, NFD), (NFD, NFC)])
def test_signer_id_differing_by_normalization_is_signer_mismatch(
    in_keyring: str, in_event: str
) -> None:
    keyring = make_keyring(test_keyring_entries(("mirror",), mirror={"signer_id": in_keyring}))
    mirror = test_key("mirror")
    same = SigningKey(mirror.key_id, in_keyring, mirror.signer_type, mirror.private_key)
    control = sign_event(same, "mirror_hint", PITH, "record", LATER, {"locator": "x"})
    assert verdict(control, keyring) is None
    other = SigningKey(mirror.key_id, in_event, mirror.signer_type, mirror.private_key)
    event = sign_event(other, "mirror_hint", PITH, "record", LATER, {"locator": "x"})
    assert verdict(event, keyring) == "signer_mismatch"


@pytest.mark.parametrize(
    "signer_type",
    ["\uff4dirror", "mirro\u0072\u0301", "MIRROR", "mirror ", "m\u0131rror"],
    ids=["fullwidth-m", "combining-acute", "upper", "trailing-space", "dotless-i"],
)
def test_signer_type_that_only_looks_like_one_is_signer_mismatch(signer_type: str) -> None:
    """NFKC would turn a fullwidth letter into ASCII; pithlog compares exact strings."""
    assert signer_type != "mirror"
    assert verdict(_signed_with_signer(signer_type=signer_type)) == "signer_mismatch"


def test_key_id_differing_by_normalization_is_unknown_key() -> None:
    keyring = make_keyring(test_keyring_entries(("mirror",), mirror={"key_id": NFC}))
    mirror = test_key("mirror")
    control = sign_event(SigningKey(NFC, mirror.signer_id, "mirror", mirror.private_key),
                         "mirror_hint", PITH, "record", LATER, {"locator": "x"})  # fmt: skip
    assert verdict(control, keyring) is None
    event = sign_event(SigningKey(NFD, mirror.signer_id, "mirror", mirror.private_key),
                       "mirror_hint", PITH, "record", LATER, {"locator": "x"})  # fmt: skip
    assert verdict(event, keyring) == "unknown_key"


# --- created_at ----------------------------------------------------------------------------

NOT_TIMESTAMPS = [
    "2026-02-30T00:00:00Z",  # no such day
    "2025-02-29T00:00:00Z",  # not a leap year
    "2026-04-31T00:00:00Z",
    "2026-13-01T00:00:00Z",
    "2026-00-10T00:00:00Z",
    "2026-01-00T00:00:00Z",
    "2026-01-01T24:00:00Z",  # 24:00
    "2026-06-30T23:59:60Z",  # leap second
    "2026-01-01T00:60:00Z",
    "2026-01-01T00:00:00z",  # lower-case z
    "2026-01-01t00:00:00Z",  # lower-case t
    "2026-01-01 00:00:00Z",
    "2026-01-01T00:00:00+00:00",  # offsets
    "2026-01-01T00:00:00-00:00",
    "2026-01-01T00:00:00+0000",
    "2026-01-01T00:00:00",
    "2026-01-01T00:00:00.000Z",  # fractions
    "2026-01-01T00:00:00.5Z",
    "2026-01-01T00:00:00,5Z",
    "0000-01-01T00:00:00Z",  # year 0000
    "10000-01-01T00:00:00Z",
    "+2026-01-01T00:00:00Z",
    "2026-1-01T00:00:00Z",
    "2026-01-01T0:00:00Z",
    "2026-01-01",
    "20260101T000000Z",
    "\uff12026-01-01T00:00:00Z",  # a fullwidth digit
    "\u0662026-01-01T00:00:00Z",  # an Arabic-Indic digit
    " 2026-01-01T00:00:00Z",
    "2026-01-01T00:00:00Z\n",
    "",
]


def test_the_timestamp_control_is_valid() -> None:
    body = {**body_of(MIRROR_HINT), "created_at": "2024-02-29T23:59:59Z"}
    assert verdict(seal(body, "mirror")) is None


@pytest.mark.parametrize("created_at", NOT_TIMESTAMPS)
def test_created_at_that_is_not_a_ts_is_malformed(created_at: str) -> None:
    body = {**body_of(MIRROR_HINT), "created_at": created_at}
    assert verdict(seal(body, "mirror")) == "malformed"


@pytest.mark.parametrize("created_at", NOT_TIMESTAMPS)
def test_keyring_timestamp_that_is_not_a_ts_is_refused(created_at: str) -> None:
    for member in ("not_before", "not_after", "revoked_at"):
        entries = test_keyring_entries(("mirror",), mirror={member: created_at})
        assert _refused_code(entries) == "keyring.timestamp", member


# --- cofactored and cofactorless verification ----------------------------------------------


def test_signature_only_a_cofactored_verifier_accepts_is_bad_signature() -> None:
    """R' = R + T for a point T of order 8, and S computed for R': then
    [S]B = R' - T + [k]A. The cofactored equation [8][S]B = [8]R' + [8][k]A holds, the
    cofactorless one [S]B = R' + [k]A does not. RFC 8032 5.1.7 allows either; pithlog (as
    OpenSSL and so ``cryptography``) checks the cofactorless one, and says bad_signature."""
    public = test_key("mirror").public_key
    message = bytes.fromhex(MIRROR_HINT["event_id"][len("sha256:"):])
    honest = ed.sign(seed_of("mirror"), message, nonce=0xC0FFEE)
    assert verdict(with_signature(MIRROR_HINT, encode_b64(honest))) is None
    for t in ed.torsion()[1:]:
        skewed = ed.sign(seed_of("mirror"), message, nonce=0xC0FFEE, r_offset=t)
        assert ed.verify(public, message, skewed, cofactored=True)
        assert not ed.verify(public, message, skewed, cofactored=False)
        assert verdict(with_signature(MIRROR_HINT, encode_b64(skewed))) == "bad_signature"


def test_receipt_signature_only_a_cofactored_verifier_accepts_is_bad_receipt() -> None:
    t = ed.torsion()[3]

    def skew(signature: bytes) -> bytes:
        message = bytes.fromhex(digest(CANONICAL_RECORD))
        skewed = ed.sign(seed_of("registry"), message, nonce=7, r_offset=t)
        assert ed.verify(test_key("registry").public_key, message, skewed, cofactored=True)
        return skewed

    assert verdict(_record_with_receipt_signature(skew)) == "bad_receipt"


def test_small_order_r_with_s_zero_is_bad_signature() -> None:
    """The classic forgery against a lax verifier: R of small order and S = 0 satisfy the
    cofactored equation for a small-order key; for a proper key they satisfy nothing."""
    for t in ed.torsion():
        forged = ed.encode(t) + bytes(32)
        assert verdict(with_signature(MIRROR_HINT, encode_b64(forged))) == "bad_signature"


def test_non_canonical_r_is_bad_signature() -> None:
    """R written as y + p, a non-canonical encoding of the same point. With the nonce 0, R
    is the identity, y = 1, and S = k * a satisfies [S]B = R + [k]A for the k hashed over
    whichever bytes R is written as: a verifier that reduces y mod p accepts the bytes
    (p + 1); RFC 8032 5.1.7 (and pithlog) decode R strictly and refuse them."""
    seed = seed_of("mirror")
    public = test_key("mirror").public_key
    message = bytes.fromhex(MIRROR_HINT["event_id"][len("sha256:"):])
    a, _ = ed.secret_scalar(seed)

    def signature(r_enc: bytes) -> bytes:
        s = ed.challenge(r_enc, public, message) * a % ed.L
        return r_enc + s.to_bytes(32, "little")

    canonical = signature(ed.encode(ed.IDENTITY))
    assert ed.verify(public, message, canonical, cofactored=False)
    assert verdict(with_signature(MIRROR_HINT, encode_b64(canonical))) is None
    lax = signature((ed.P + 1).to_bytes(32, "little"))
    assert ed.decode(lax[:32]) is None  # not canonical: a strict decoder stops here
    assert verdict(with_signature(MIRROR_HINT, encode_b64(lax))) == "bad_signature"
