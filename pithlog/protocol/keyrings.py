"""Editing a keyring file (spec section 3): a new keyring, a key added, a key revoked.

Pure: each function takes the parsed keyring document and returns the new one, checked with
the rules of :func:`pithlog.protocol.keys.keyring_from_value` (the ones ``load_keyring``
applies), so an edit never produces a keyring that pithlog would refuse to load. Members
that the spec allows and ignores (in the document and in its entries) are kept as they are;
the ``pithlog keyring`` commands write the result atomically.
"""

from __future__ import annotations

import copy
from typing import Any

from pithlog.errors import DoorError, KeyFileError, KeyringError
from pithlog.protocol.canonical import parse
from pithlog.protocol.keys import (
    KEY_FILE_VERSION,
    KEY_MEMBERS,
    Keyring,
    keyring_from_value,
    load_key_file,
)
from pithlog.protocol.timestamps import is_ts

EMPTY: dict[str, Any] = {"keyring_version": "1", "keys": []}
"""A keyring with no key (``pithlog keyring new``)."""


def new_keyring() -> dict[str, Any]:
    """The document of an empty keyring."""
    return copy.deepcopy(EMPTY)


def parse_keyring_doc(data: bytes) -> tuple[dict[str, Any], Keyring]:
    """A keyring file's document and its checked :class:`Keyring`; raises
    :class:`KeyringError` as ``load_keyring`` does."""
    try:
        doc = parse(data)
    except DoorError as exc:
        raise KeyringError("not_json", f"keyring file: {exc.message}", exc.where) from exc
    keyring = keyring_from_value(doc)  # also refuses an entry or a key file, by name
    assert isinstance(doc, dict)
    return doc, keyring


def entry_from(data: bytes) -> tuple[dict[str, Any], bool]:
    """The keyring entry that ``data`` holds, and whether ``data`` is a private key file:
    a keyring entry (one JSON object, as ``pithlog keygen`` prints it) or a pithlog key
    file (its public entry, no validity bounds). Raises :class:`KeyringError`
    (``keyring.not_an_entry``) for anything else, and for an entry that carries a private
    key (``private_key_b64``)."""
    try:
        doc = parse(data)
    except DoorError as exc:
        raise KeyringError("not_an_entry", f"the entry is not JSON: {exc.message}",
                           exc.where) from exc  # fmt: skip
    if isinstance(doc, dict) and doc.get("key_file_version") == KEY_FILE_VERSION:
        try:
            return load_key_file(data).keyring_entry(), True
        except KeyFileError as exc:
            raise KeyringError("not_an_entry", f"a key file pithlog cannot read: "
                               f"{exc.message}", exc.where) from exc  # fmt: skip
    if isinstance(doc, dict) and "keyring_version" in doc:
        raise KeyringError("not_an_entry", "this is a whole keyring, not one entry; add its "
                           "keys one by one, or use the file as the keyring")  # fmt: skip
    if not isinstance(doc, dict) or "key_id" not in doc:
        raise KeyringError("not_an_entry", "not a keyring entry or a key file; give the JSON "
                           "line pithlog keygen prints, or the key file it wrote")  # fmt: skip
    if "private_key_b64" in doc:
        # kept as a member the spec ignores, the private key would be in a public file
        raise KeyringError("not_an_entry", "the entry holds private_key_b64, a private key, "
                           "which a keyring (a public file) must not hold: give the key file "
                           "itself (its public entry is added) or the entry pithlog keygen "
                           "printed")  # fmt: skip
    return doc, False


def add_key(doc: dict[str, Any], entry: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with ``entry`` appended to its keys. Refuses an entry whose key_id is
    already there (``keyring.duplicate_key_id``) or whose public key is already trusted
    under another key_id (``keyring.duplicate_public_key``: one key, two names, would make
    a revocation of one name leave the key trusted); the result must pass every rule of
    spec section 3."""
    before = keyring_from_value(doc)
    key_id = entry.get("key_id")
    if isinstance(key_id, str) and key_id in before:
        raise KeyringError("duplicate_key_id", f"the keyring already has a key {key_id!r}; "
                           "give the new key its own key_id")  # fmt: skip
    for other in before.values():
        if entry.get("public_key_b64") == other.entry()["public_key_b64"]:
            raise KeyringError("duplicate_public_key", f"this public key is already in the "
                               f"keyring as {other.key_id!r}; a key must appear once "
                               "(revoke it there instead of adding it again)")  # fmt: skip
    missing = [m for m in KEY_MEMBERS if m not in entry]
    if missing:
        raise KeyringError("missing_member", f"the entry lacks {', '.join(missing)}; every "
                           "key needs all seven members (null for no bound)")  # fmt: skip
    after = copy.deepcopy(doc)
    after["keys"].append(copy.deepcopy(entry))
    try:
        keyring_from_value(after)
    except KeyringError as exc:
        # the new entry is the last one: say so instead of naming /keys/N
        raise KeyringError(exc.detail, f"the entry: {exc.message}") from exc
    return after


def revoke_key(doc: dict[str, Any], key_id: str, at: str) -> dict[str, Any]:
    """``doc`` with key ``key_id`` revoked at ``at`` (spec 3: valid for ts strictly before
    ``at``; a revocation does not reach back). A key already revoked may be revoked again
    only at an earlier time (a compromise found to be older than thought); a later one
    would make events valid again, and is refused (``keyring.revoked``)."""
    if not is_ts(at):
        raise KeyringError("timestamp", "--at must be a ts (YYYY-MM-DDTHH:MM:SSZ)")
    keyring = keyring_from_value(doc)
    if key_id not in keyring:
        # repr: a key_id may hold a line break or an escape, and the error is one line
        known = ", ".join(repr(k) for k in sorted(keyring)) or "none"
        raise KeyringError("unknown_key_id", f"the keyring has no key {key_id!r} (its keys: "
                           f"{known}); check the key_id with pithlog keyring show")  # fmt: skip
    was = keyring[key_id].revoked_at
    if was is not None and not at < was:
        raise KeyringError("revoked", f"{key_id!r} is already revoked at {was}; a revocation "
                           "can only be moved earlier")  # fmt: skip
    after = copy.deepcopy(doc)
    for item in after["keys"]:
        if item["key_id"] == key_id:
            item["revoked_at"] = at
    keyring_from_value(after)
    return after


def still_trusted_after(keyring: Keyring, key_id: str, at: str) -> list[str]:
    """The other key_ids under which the public key of ``key_id`` signs validly at some
    ts from ``at`` on (not revoked by then, no not_after by then). Spec 3 allows one key
    under two key_ids in a keyring (``add_key`` refuses to make one), and an event names its
    key_id: revoking one name leaves the key trusted under these."""
    key = keyring[key_id].public_key
    return sorted(k for k, other in keyring.items() if k != key_id and other.public_key == key
                  and (other.revoked_at is None or other.revoked_at > at)
                  and (other.not_after is None or other.not_after > at))  # fmt: skip


def validity(entry: dict[str, Any]) -> str:
    """A key's validity in words: ``from .. until``, and its revocation."""
    start = entry["not_before"] or "-"
    end = entry["not_after"] or "-"
    text = f"{start} .. {end}"
    if entry["revoked_at"] is not None:
        text += f", revoked at {entry['revoked_at']}"
    return text
