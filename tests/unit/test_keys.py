"""Keys, fingerprints, keyring rules, validity windows and key files (spec section 3)."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from pithlog.errors import KeyFileError, KeyringError
from pithlog.protocol.keys import (
    SigningKey,
    _decode_point,
    dump_key_file,
    fingerprint,
    is_valid_public_key,
    keyring_from_value,
    load_key_file,
    load_keyring,
)
from pithlog.protocol.text_forms import encode_b64
from pithlog.testing import test_key as fixed_key
from pithlog.testing import test_keyring_entries as fixed_entries

P = 2**255 - 19


def entry(name: str = "registry", **changes: Any) -> dict[str, Any]:
    e = fixed_key(name).keyring_entry()
    e.update(changes)
    return e


def keyring_bytes(keys: list[dict[str, Any]], **top: Any) -> bytes:
    return json.dumps({"keyring_version": "1", "keys": keys, **top}).encode()


def refused(keys: list[dict[str, Any]], **top: Any) -> KeyringError:
    with pytest.raises(KeyringError) as info:
        load_keyring(keyring_bytes(keys, **top))
    return info.value


def b64_le(n: int) -> str:
    return encode_b64(n.to_bytes(32, "little"))


# --- fingerprint -------------------------------------------------------------------------


def test_fingerprint_is_first_16_bytes_of_sha256_hex() -> None:
    raw = fixed_key("registry").public_key
    assert fingerprint(raw) == hashlib.sha256(raw).hexdigest()[:32]
    assert len(fingerprint(raw)) == 32
    assert fingerprint(bytes(32)) == "66687aadf862bd776c8fc18b8e9f8e20"


def test_signing_key_signer_object() -> None:
    k = fixed_key("author")
    assert k.signer == {
        "key_id": "test-author",
        "public_key_fingerprint": fingerprint(k.public_key),
        "signer_id": "author.test.invalid",
        "signer_type": "author",
    }
    public = Ed25519PrivateKey.from_private_bytes(
        hashlib.sha256(b"pithlog public test key: author").digest()
    ).public_key()
    assert k.public_key == public.public_bytes(Encoding.Raw, PublicFormat.Raw)


# --- a good keyring ----------------------------------------------------------------------


def test_the_test_keyring_loads() -> None:
    ring = load_keyring(keyring_bytes(fixed_entries()))
    assert set(ring) == {"test-registry", "test-registry-2", "test-author", "test-tsa",
                         "test-mirror", "test-indexer", "test-replicator"}
    e = ring["test-author"]
    assert e.public_key == fixed_key("author").public_key
    assert e.fingerprint == fixed_key("author").fingerprint
    assert (e.signer_id, e.signer_type) == ("author.test.invalid", "author")


def test_extra_members_are_ignored() -> None:
    plain = load_keyring(keyring_bytes([entry()]))
    extra = load_keyring(
        keyring_bytes([entry(comment="rotated 2026", weight=3)], description="ours", v=[1])
    )
    assert extra["test-registry"] == plain["test-registry"]
    assert extra.digest == plain.digest


def test_keyring_digest_ignores_file_order_and_layout() -> None:
    a = load_keyring(keyring_bytes([entry("registry"), entry("author")]))
    b = load_keyring(
        json.dumps({"keys": [entry("author"), entry("registry")], "keyring_version": "1"},
                   indent=4).encode()
    )
    assert a.digest == b.digest
    later = entry("author", not_after="2027-01-01T00:00:00Z")
    c = load_keyring(keyring_bytes([entry("registry"), later]))
    assert c.digest != a.digest


def test_empty_keyring_is_allowed() -> None:
    assert len(load_keyring(keyring_bytes([]))) == 0


# --- every rule refused ------------------------------------------------------------------


@pytest.mark.parametrize(
    "member",
    ["key_id", "public_key_b64", "signer_id", "signer_type", "not_before", "not_after",
     "revoked_at"],
)
def test_missing_member(member: str) -> None:
    e = entry()
    del e[member]
    assert refused([e]).code == "keyring.missing_member"


def test_duplicate_key_id() -> None:
    # Even with a different key under it: one key_id, one key.
    err = refused([entry("registry"), entry("author", key_id="test-registry")])
    assert err.code == "keyring.duplicate_key_id"


@pytest.mark.parametrize("signer_type", ["registry", "Author", "", None, 1, "pith_registry "])
def test_bad_signer_type(signer_type: Any) -> None:
    assert refused([entry(signer_type=signer_type)]).code == "keyring.signer_type"


@pytest.mark.parametrize("key_id", ["", None, 7, ["a"]])
def test_bad_key_id(key_id: Any) -> None:
    assert refused([entry(key_id=key_id)]).code == "keyring.key_id"


@pytest.mark.parametrize("signer_id", ["", None, 7])
def test_bad_signer_id(signer_id: Any) -> None:
    assert refused([entry(signer_id=signer_id)]).code == "keyring.signer_id"


def test_non_canonical_base64_public_key() -> None:
    good = entry()["public_key_b64"]
    raw = base64.b64decode(good)
    # The last character of a 32-byte encoding carries 4 bits that must be zero.
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    last = alphabet.index(good[-2])
    sloppy = good[:-2] + alphabet[last | 1] + "="
    assert sloppy != good and base64.b64decode(sloppy) == raw
    for bad in (sloppy, good[:-1], good.replace("=", ""), " " + good, good + "\n",
                good.replace("+", "-").replace("/", "_") if ("+" in good or "/" in good)
                else good[:-2] + "-="):
        assert refused([entry(public_key_b64=bad)]).code == "keyring.public_key", bad


@pytest.mark.parametrize("size", [0, 31, 33, 64])
def test_public_key_of_wrong_length(size: int) -> None:
    assert refused([entry(public_key_b64=encode_b64(b"\x03" * size))]).code == "keyring.public_key"


def test_y_at_or_above_p_is_not_canonical() -> None:
    # y = 3 is a point of large order; y = 3 + p encodes the same point non-canonically.
    assert is_valid_public_key((3).to_bytes(32, "little"))
    load_keyring(keyring_bytes([entry(public_key_b64=b64_le(3))]))
    assert not is_valid_public_key((3 + P).to_bytes(32, "little"))
    assert refused([entry(public_key_b64=b64_le(3 + P))]).code == "keyring.public_key"
    assert refused([entry(public_key_b64=b64_le(P))]).code == "keyring.public_key"
    assert refused([entry(public_key_b64=b64_le(2**255 - 1))]).code == "keyring.public_key"


def test_not_on_the_curve() -> None:
    # y = 2: (y^2 - 1) / (d y^2 + 1) has no square root, so no point has this y.
    assert not is_valid_public_key((2).to_bytes(32, "little"))
    assert refused([entry(public_key_b64=b64_le(2))]).code == "keyring.public_key"


def test_x_zero_with_sign_bit_is_not_canonical() -> None:
    # y = 1 gives x = 0; the sign bit set asks for "-0" (RFC 8032 5.1.3 step 4 fails).
    assert not is_valid_public_key((1 | (1 << 255)).to_bytes(32, "little"))


SMALL_ORDER = {
    "identity": (1).to_bytes(32, "little"),  # 0100..00
    "order-2": (P - 1).to_bytes(32, "little"),  # (0, -1)
    "order-4": (0).to_bytes(32, "little"),  # (sqrt(-1), 0)
    "order-4-neg": (1 << 255).to_bytes(32, "little"),  # (-sqrt(-1), 0)
    "order-8": bytes.fromhex("c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a"),
    "order-8-neg": bytes.fromhex(
        "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa"
    ),
    "order-8-b": bytes.fromhex("26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05"),
    "order-8-b-neg": bytes.fromhex(
        "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85"
    ),
}


@pytest.mark.parametrize("name", sorted(SMALL_ORDER))
def test_small_order_points_are_refused(name: str) -> None:
    raw = SMALL_ORDER[name]
    assert _decode_point(raw) is not None  # on the curve, canonical: refused for its order
    assert not is_valid_public_key(raw)
    assert refused([entry(public_key_b64=encode_b64(raw))]).code == "keyring.public_key"


def test_real_keys_are_valid_points() -> None:
    for name in ("registry", "author", "tsa", "mirror", "indexer", "replicator", "stranger"):
        assert is_valid_public_key(fixed_key(name).public_key)


@pytest.mark.parametrize("member", ["not_before", "not_after", "revoked_at"])
@pytest.mark.parametrize(
    "value", ["2026-02-30T00:00:00Z", "2026-01-01T00:00:00z", "2026-01-01", "", 0, False]
)
def test_bad_ts(member: str, value: Any) -> None:
    assert refused([entry(**{member: value})]).code == "keyring.timestamp"


@pytest.mark.parametrize(
    ("not_before", "not_after"),
    [("2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z"),
     ("2026-01-02T00:00:00Z", "2026-01-01T00:00:00Z")],
)
def test_not_before_must_be_earlier_than_not_after(not_before: str, not_after: str) -> None:
    err = refused([entry(not_before=not_before, not_after=not_after)])
    assert err.code == "keyring.validity"


def test_one_second_window_is_allowed() -> None:
    ring = load_keyring(keyring_bytes([entry(not_before="2026-01-01T00:00:00Z",
                                             not_after="2026-01-01T00:00:01Z")]))  # fmt: skip
    # the window is kept as written, and is that one second: [not_before, not_after)
    e = ring["test-registry"]
    assert (e.not_before, e.not_after) == ("2026-01-01T00:00:00Z", "2026-01-01T00:00:01Z")
    assert e.valid_at("2026-01-01T00:00:00Z")
    assert not e.valid_at("2025-12-31T23:59:59Z") and not e.valid_at("2026-01-01T00:00:01Z")


@pytest.mark.parametrize("version", ["2", 1, "1.0", None, " 1"])
def test_keyring_version_must_be_string_1(version: Any) -> None:
    data = json.dumps({"keyring_version": version, "keys": []}).encode()
    with pytest.raises(KeyringError) as info:
        load_keyring(data)
    assert info.value.code == "keyring.version"


def test_keyring_version_missing() -> None:
    with pytest.raises(KeyringError) as info:
        load_keyring(b'{"keys":[]}')
    assert info.value.code == "keyring.version"


@pytest.mark.parametrize(
    "doc", [[], "keyring", {"keyring_version": "1"}, {"keyring_version": "1", "keys": {}},
            {"keyring_version": "1", "keys": ["test-registry"]}],
)
def test_keyring_shape(doc: Any) -> None:
    with pytest.raises(KeyringError) as info:
        keyring_from_value(doc)
    assert info.value.code == "keyring.shape"


@pytest.mark.parametrize(
    "data",
    [b'{"keyring_version":"1","keyring_version":"1","keys":[]}', b"\xef\xbb\xbf{}",
     b'{"keyring_version":"1","keys":[],"n":1.5}', b"not json"],
)
def test_keyring_door_rules(data: bytes) -> None:
    with pytest.raises(KeyringError) as info:
        load_keyring(data)
    assert info.value.code == "keyring.not_json"


def test_one_bad_key_refuses_the_whole_keyring() -> None:
    err = refused([entry("registry"), entry("author"), entry("tsa", signer_type="notary")])
    assert err.code == "keyring.signer_type"
    assert err.where == "/keys/2/signer_type"


# --- validity ----------------------------------------------------------------------------


def key_entry(**changes: Any) -> Any:
    return load_keyring(keyring_bytes([entry(**changes)]))["test-registry"]


def test_valid_at_without_bounds() -> None:
    e = key_entry()
    assert e.valid_at("0001-01-01T00:00:00Z") and e.valid_at("9999-12-31T23:59:59Z")


def test_valid_at_window_is_half_open() -> None:
    e = key_entry(not_before="2026-01-01T00:00:00Z", not_after="2026-07-01T00:00:00Z")
    assert not e.valid_at("2025-12-31T23:59:59Z")
    assert e.valid_at("2026-01-01T00:00:00Z")
    assert e.valid_at("2026-06-30T23:59:59Z")
    assert not e.valid_at("2026-07-01T00:00:00Z")


def test_revocation_does_not_reach_back() -> None:
    e = key_entry(revoked_at="2026-05-01T00:00:00Z")
    assert e.valid_at("2020-01-01T00:00:00Z")
    assert e.valid_at("2026-04-30T23:59:59Z")
    assert not e.valid_at("2026-05-01T00:00:00Z")
    assert not e.valid_at("2030-01-01T00:00:00Z")


def test_revoked_before_not_before_is_never_valid() -> None:
    e = key_entry(not_before="2026-06-01T00:00:00Z", revoked_at="2026-05-01T00:00:00Z")
    for t in ("2026-04-01T00:00:00Z", "2026-05-15T00:00:00Z", "2026-07-01T00:00:00Z"):
        assert not e.valid_at(t)


def test_a_loaded_keyring_may_hold_no_key_or_one_key_under_two_key_ids() -> None:
    """docs/protocol.md, choice 20: the spec asks only that key_ids be unique; a keyring
    file is taken as its author wrote it (``pithlog keyring add`` refuses the second name)."""
    assert len(load_keyring(keyring_bytes([]))) == 0
    twice = load_keyring(keyring_bytes([
        entry("registry", revoked_at="2026-05-01T00:00:00Z"),
        entry("registry", key_id="registry-again"),
    ]))  # fmt: skip
    assert twice["registry-again"].public_key == twice[fixed_key("registry").key_id].public_key
    assert twice["registry-again"].valid_at("2027-01-01T00:00:00Z")
    assert not twice[fixed_key("registry").key_id].valid_at("2027-01-01T00:00:00Z")


# --- key files ---------------------------------------------------------------------------


def test_key_file_round_trip() -> None:
    k = SigningKey.generate("k-1", "someone.test.invalid", "mirror")
    loaded = load_key_file(dump_key_file(k))
    assert (loaded.key_id, loaded.signer_id, loaded.signer_type) == (
        "k-1", "someone.test.invalid", "mirror")
    assert loaded.public_key == k.public_key
    assert loaded.sign(b"message") == k.sign(b"message")  # Ed25519 is deterministic
    assert dump_key_file(loaded) == dump_key_file(k)


def test_fixed_test_key_round_trip() -> None:
    k = fixed_key("tsa")
    assert load_key_file(dump_key_file(k)).signer == k.signer


def key_file_doc(**changes: Any) -> bytes:
    doc = json.loads(dump_key_file(fixed_key("mirror")))
    doc.update(changes)
    doc = {k: v for k, v in doc.items() if v is not None}
    return json.dumps(doc).encode()


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        ({"key_file_version": "pithlog-key-v2"}, "key_file.version"),
        ({"key_id": ""}, "key_file.member"),
        ({"signer_type": "emperor"}, "key_file.signer_type"),
        ({"private_key_b64": encode_b64(b"\x01" * 31)}, "key_file.private_key"),
        ({"private_key_b64": "not base64"}, "key_file.private_key"),
        ({"public_key_b64": encode_b64(fixed_key("author").public_key)}, "key_file.public_key"),
    ],
)
def test_bad_key_files(changes: dict[str, Any], code: str) -> None:
    with pytest.raises(KeyFileError) as info:
        load_key_file(key_file_doc(**changes))
    assert info.value.code == code


def test_key_file_must_be_json() -> None:
    with pytest.raises(KeyFileError) as info:
        load_key_file(b"\xef\xbb\xbf{}")
    assert info.value.code == "key_file.not_json"
