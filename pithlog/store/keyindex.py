"""Verdicts per key entry and the index of copies by key (format 5, ``docs/store.md``).

Checks 1-12 of one copy read the keyring at one place only: the entry of the copy's
``signer.key_id`` (spec 6, checks 4-8 and 12; check 12's receipt must name the same key).
So a copy's verdict is a function of the copy and of that one entry, and is cached under
it: ``verdicts`` is keyed by the digest of the judging entry (32) + the copy's sequence
number (8; the copy hash before format 7, :mod:`pithlog.store.format7`), so that the
verdicts of an append fall in the log's order under each judge.

- :func:`entry_digest`: SHA-256 of the JCS of the entry's seven members (spec 3), so a key
  whose entry is unchanged keeps its verdicts across keyring changes;
- a copy whose ``key_id`` the keyring lacks is judged by "no entry for this key_id"
  (``unknown_key``, or an earlier check): :func:`absent_digest` of the key_id, which no
  entry digest equals, so adding a key with that key_id leaves those copies unjudged;
- a copy without a string ``key_id`` fails check 1 under every keyring: :data:`NO_KEY_ID`.

``by_key`` (SHA-256 of the key_id (32) + the copy's sequence number (8), empty values;
format 5 named the copy by event_id + copy hash, 96 bytes a key) lists every stored copy
under the key_id that signed it, written in the append transaction, so a keyring change
finds the copies a key judges by one prefix scan (:mod:`pithlog.store.rekey`); under one key
its entries grow in append order, so their pages fill as ``seq``'s do.
"""

from __future__ import annotations

import functools
import hashlib
from typing import Any

import msgspec

from pithlog.protocol.canonical import jcs
from pithlog.protocol.events import Envelope
from pithlog.protocol.keys import Keyring
from pithlog.store.layout import (
    FORMAT_5,
    META_FORMAT,
    META_KEYRING,
    META_LEGACY_KEYRING,
    Txn,
    is_verdict,
)

NO_KEY_ID = hashlib.sha256(b"pithlog verdict: no key_id").digest()
"""The judge of a copy that names no key_id (a string): check 1 fails whatever the keyring."""


def entry_digest(entry: dict[str, Any]) -> bytes:
    """SHA-256 of the JCS of a keyring entry's seven members (spec 3)."""
    return hashlib.sha256(jcs(entry)).digest()


def absent_digest(key_id: str) -> bytes:
    """The judge of copies naming ``key_id`` under a keyring that lacks it."""
    return hashlib.sha256(jcs({"absent_key_id": key_id})).digest()


def key_hash(key_id: str) -> bytes:
    """The ``by_key`` prefix of a key_id: SHA-256 of its UTF-8 (fixed width, any length).
    Kept for the last 256 key_ids of up to 256 characters (64 K characters held at most,
    whatever key_ids copies name): an append lists each new copy under its signer's, and a
    log has few signers."""
    return _kept_key_hash(key_id) if len(key_id) <= 256 else _key_hash(key_id)


def _key_hash(key_id: str) -> bytes:
    return hashlib.sha256(key_id.encode("utf-8", "surrogatepass")).digest()


_kept_key_hash = functools.lru_cache(maxsize=256)(_key_hash)


def signer_key_id(env: Envelope) -> str | None:
    """The copy's ``signer.key_id`` when it is a string (else ``None``: check 1 fails)."""
    signer = env.value.get("signer")
    key_id = signer.get("key_id") if isinstance(signer, dict) else None
    return key_id if isinstance(key_id, str) else None


class _Signer(msgspec.Struct):
    key_id: Any = None


class _Signed(msgspec.Struct):
    signer: Any = None


_SIGNED = msgspec.json.Decoder(_Signed)


def key_id_of(data: bytes) -> str | None:
    """:func:`signer_key_id` of stored bytes, decoding only the signer."""
    try:
        signer = _SIGNED.decode(data).signer
    except (msgspec.MsgspecError, ValueError):
        return None
    key_id = signer.get("key_id") if isinstance(signer, dict) else None
    return key_id if isinstance(key_id, str) else None


def meaning(keyring: Keyring) -> bytes:
    """JCS of what ``keyring.digest`` hashes: its entries sorted by key_id."""
    return jcs({"keyring_version": "1", "keys": [keyring[k].entry() for k in sorted(keyring)]})


def entries_agree(entries: bytes | None, kd: bytes | None) -> bool:
    """Whether ``meta[keyring]`` (``entries``, :func:`meaning`'s bytes) is what
    ``keyring_digest`` (``kd``) is the digest of, as every write of the two together makes
    it: damaged entries must not be diffed against a new keyring (``docs/store.md``, "A
    keyring change")."""
    return entries is not None and kd is not None and hashlib.sha256(entries).digest() == kd


def entries_of(raw: bytes) -> dict[str, dict[str, Any]]:
    """key_id -> entry of a keyring's :func:`meaning` as stored in ``meta``."""
    doc: dict[str, Any] = msgspec.json.decode(raw)
    return {entry["key_id"]: entry for entry in doc["keys"]}


class Judges:
    """The verdict prefix of each key_id under one keyring (entry digests, computed once).

    ``legacy``: the keyring digest under which a store migrated from format 3 still holds
    its verdicts, when it is this keyring's (:func:`cached_verdict` falls back to it)."""

    def __init__(self, keyring: Keyring, legacy: bytes | None = None) -> None:
        self.keyring = keyring
        self.legacy = legacy if legacy == bytes.fromhex(keyring.digest) else None
        self._prefix: dict[str | None, bytes] = {None: NO_KEY_ID}

    @classmethod
    def of_store(cls, txn: Txn, dbs: dict[str, Any], keyring: Keyring) -> Judges:
        return cls(keyring, txn.get(META_LEGACY_KEYRING, db=dbs["meta"]))

    def prefix(self, key_id: str | None) -> bytes:
        found = self._prefix.get(key_id)
        if found is None:
            assert key_id is not None
            entry = self.keyring.get(key_id)
            found = absent_digest(key_id) if entry is None else entry_digest(entry.entry())
            self._prefix[key_id] = found
        return found

    def key(self, env: Envelope, pointer: bytes) -> bytes:
        """The ``verdicts`` key of the copy ``env`` stored under ``pointer`` (its sequence
        number) under this keyring."""
        return self.prefix(signer_key_id(env)) + pointer


def cached_verdict(txn: Txn, dbs: dict[str, Any], judges: Judges, env: Envelope,
                   pointer: bytes, *, raw: bool = False) -> bytes | None:  # fmt: skip
    """The cached verdict of the copy ``env`` stored under ``pointer`` under ``judges``'
    keyring, or ``None``. A stored value that is not a verdict (damaged) is ``None`` too:
    the copy is then checked again and its verdict written over it (an append, a rekey, a
    rebuild, the repair replay asks for), unless ``raw`` (replay, which reports it)."""
    found = txn.get(judges.key(env, pointer), db=dbs["verdicts"])
    if found is None and judges.legacy is not None:
        found = txn.get(judges.legacy + pointer, db=dbs["verdicts"])
    return found if raw or found is None or is_verdict(found) else None


def index_copy(txn: Txn, dbs: dict[str, Any], env: Envelope, pointer: bytes) -> None:
    """List a stored copy (its sequence number, ``pointer``) in ``by_key`` (a copy with no
    key_id has no key to change)."""
    key_id = signer_key_id(env)
    if key_id is not None:
        txn.put(key_hash(key_id) + pointer, b"", db=dbs["by_key"])


def index_stored(txn: Txn, dbs: dict[str, Any], pointer: bytes, data: bytes) -> None:
    """:func:`index_copy` of a copy's JCS bytes, decoding only its signer."""
    key_id = key_id_of(data)
    if key_id is not None:
        txn.put(key_hash(key_id) + pointer, b"", db=dbs["by_key"])


def migrate_3_to_5(txn: Txn, dbs: dict[str, Any]) -> None:
    """Format 3 or 4 -> 5, in the caller's write transaction: the format-3 verdicts (keyed
    by the whole keyring's digest) kept under ``legacy_keyring_digest`` until the keyring
    changes. ``by_key`` is built when the copies move to ``copies`` (format 6: its keys name
    a copy by its sequence number, :mod:`pithlog.store.format6`). ``meta[keyring]`` (the
    entries) is unknown until an append or a rekey presents the keyring: the first change
    after a migration re-judges every copy."""
    kd = txn.get(META_KEYRING, db=dbs["meta"])
    if kd is not None:
        txn.put(META_LEGACY_KEYRING, kd, db=dbs["meta"])
    txn.put(META_FORMAT, FORMAT_5, db=dbs["meta"])
