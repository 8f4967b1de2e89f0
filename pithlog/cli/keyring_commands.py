"""``pithlog keyring new|add|revoke|show|digest``: build and read a keyring file (spec
section 3) without hand-written JSON.

The edits themselves are pure (:mod:`pithlog.protocol.keyrings`: the rules of
``load_keyring``, duplicates refused); this module reads the file, and writes the new one
atomically: a temporary file beside it, synced, renamed over it, the folder synced, so a
crash leaves the old keyring or the new one, never half of one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
from pathlib import Path
from typing import Any

from pithlog.cli.edge import CommandParser, StoreParser, not_a_file, remove_leftovers
from pithlog.cli.streams import Out, keyring_bytes, read_bytes_and_status, warn_if_exposed
from pithlog.errors import EXIT_OK, KeyringError, UsageError, shown
from pithlog.protocol.canonical import MAX_LINE_BYTES
from pithlog.protocol.keyrings import (
    add_key,
    entry_from,
    new_keyring,
    parse_keyring_doc,
    revoke_key,
    still_trusted_after,
    validity,
)
from pithlog.protocol.keys import keyring_from_value
from pithlog.protocol.timestamps import is_ts


def render_keyring(doc: dict[str, Any]) -> bytes:
    """A keyring file as pithlog writes it: indented JSON, one member per line, UTF-8."""
    return (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def write_atomically(path: Path, data: bytes, replace: bool) -> None:
    """Write ``path`` all at once: temp file, fsync, rename, fsync of the folder. An
    existing file is replaced only with ``replace`` (and keeps its mode)."""
    if path.exists() and not replace:
        raise UsageError("exists", f"{path} exists; pass --force to replace it")
    # a keyring reached through a symbolic link (a deployed config pointing at the current
    # keyring) is edited where it is: renamed over, the link would become a copy and the
    # keyring it points at stay as it was
    path = Path(os.path.realpath(path))
    what = not_a_file(path)
    if what is not None:
        raise KeyringError("unwritable", f"{path} is {what}, not a keyring file: give the "
                           "path of the keyring file to write")  # fmt: skip
    mode = path.stat().st_mode & 0o777 if path.exists() else None
    remove_leftovers(path)  # from a write killed before its rename
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644 if mode is None else mode)
        if mode is not None:
            # open() applies the umask: a keyring shared by a group (0664) would lose the
            # group's write under the usual umask 022
            os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        folder = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)
    except OSError as exc:
        raise KeyringError("unwritable", f"cannot write {path}: {exc.strerror or exc}; "
                           "check that its folder exists and is writable") from exc
    finally:
        # whatever stopped the write (an OSError, or Ctrl-C and SIGTERM, raised as an
        # interrupt) leaves no copy beside the keyring; after the rename it is gone already
        with contextlib.suppress(OSError):
            tmp.unlink()


def write_keyring(path: Path, doc: dict[str, Any]) -> None:
    """Write an edited keyring over ``path``, unless its file would be longer than a
    keyring may be (spec section 1: 8 MiB, what ``--keyring`` reads): written, every
    command would then refuse it (``keyring.not_json``), so the edit is refused instead
    (``keyring.too_large``) and the file kept as it was."""
    data = render_keyring(doc)
    if len(data) > MAX_LINE_BYTES:
        raise KeyringError("too_large", f"after this edit {path} would be {len(data):,} bytes, "
                           f"longer than the {MAX_LINE_BYTES:,} a keyring file may be; it is "
                           "unchanged: remove members the spec ignores, or keys no longer "
                           "needed, first")  # fmt: skip
    write_atomically(path, data, replace=True)


def _edited(path: str) -> Path:
    """KEYRING of an edit: the file it is written to. ``-`` is standard input wherever a
    file is read (``--keyring -``, ``keyring show -``): an edit would read the keyring
    from standard input and write it over a file named ``-``, whatever that file held."""
    if path == "-":
        raise UsageError("arguments", "KEYRING is the file the edit is written to, and - is "
                         "standard input: give the keyring's path (./- for a file named "
                         "-)")  # fmt: skip
    return Path(path)


def _read_doc(path: str) -> dict[str, Any]:
    doc, _ = parse_keyring_doc(keyring_bytes(str(_edited(path))))
    return doc


def cmd_keyring_new(args: argparse.Namespace, out: Out) -> int:
    """Write an empty keyring."""
    _edited(args.keyring)
    write_atomically(Path(args.keyring), render_keyring(new_keyring()), args.force)
    out.say(f"keyring new: wrote {args.keyring} (no keys yet; add them with "
            f"pithlog keyring add {args.keyring} ENTRY_OR_KEYFILE)")  # fmt: skip
    return EXIT_OK


def _entry_arg(value: str) -> tuple[bytes, os.stat_result | None]:
    """ENTRY_OR_KEYFILE: a file (or - for stdin), or the entry's JSON itself; with the
    file's status (``None`` for the others)."""
    if value.lstrip().startswith(("{", "[")):
        return value.encode("utf-8"), None
    return read_bytes_and_status(value, MAX_LINE_BYTES)


def cmd_keyring_add(args: argparse.Namespace, out: Out) -> int:
    """Add a key (a keyring entry, or the public entry of a key file)."""
    doc = _read_doc(args.keyring)
    data, status = _entry_arg(args.entry)
    entry, private = entry_from(data)
    if status is not None and private:  # a key file: a private key, where an entry is public
        warn_if_exposed(args.entry, status, out)
    for name in ("not_before", "not_after"):
        value = getattr(args, name)
        if value is not None:
            if not is_ts(value):
                flag = "--" + name.replace("_", "-")
                raise UsageError("timestamp", f"{flag} must be YYYY-MM-DDTHH:MM:SSZ")
            entry[name] = value
    after = add_key(doc, entry)
    write_keyring(Path(args.keyring), after)
    keyring = keyring_from_value(after)
    key = keyring[entry["key_id"]]
    out.say(f"keyring add: {shown(key.key_id)} ({key.signer_type} {shown(key.signer_id)}, "
            f"fingerprint {key.fingerprint}); {args.keyring} has {len(keyring)} "
            f"{'key' if len(keyring) == 1 else 'keys'}, digest "
            f"{keyring.digest}")  # fmt: skip
    return EXIT_OK


def cmd_keyring_revoke(args: argparse.Namespace, out: Out) -> int:
    """Set a key's revoked_at."""
    doc = _read_doc(args.keyring)
    after = revoke_key(doc, args.key_id, args.at)
    write_keyring(Path(args.keyring), after)
    keyring = keyring_from_value(after)
    out.say(f"keyring revoke: {shown(args.key_id)} is valid only before {args.at}; digest now "
            f"{keyring.digest} (a store reduced under the old keyring applies the change "
            "at its next append, or with `pithlog rekey --keyring` when it is large)")  # fmt: skip
    others = still_trusted_after(keyring, args.key_id, args.at)
    if others:
        names = ", ".join(f"'{shown(k)}'" for k in others)
        out.say(f"keyring revoke: warning: the same public key is trusted as {names} too, "
                f"and signs validly under {'that key_id' if len(others) == 1 else 'those'} "
                f"from {args.at} on: revoke {'it' if len(others) == 1 else 'them'} as "
                "well")  # fmt: skip
    return EXIT_OK


COLUMNS = ("KEY_ID", "SIGNER_ID", "SIGNER_TYPE", "VALIDITY", "FINGERPRINT")


def cmd_keyring_show(args: argparse.Namespace, out: Out) -> int:
    """The keys of a keyring as a table."""
    _, keyring = parse_keyring_doc(keyring_bytes(args.keyring))
    rows = [COLUMNS]
    for key in keyring.values():
        entry = key.entry()
        rows.append((shown(key.key_id), shown(key.signer_id), key.signer_type, validity(entry),
                     key.fingerprint))  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    for row in rows:
        line = "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        out.write(line.rstrip().encode("utf-8") + b"\n")
    out.say(f"keyring show: {len(keyring)} keys, digest {keyring.digest}")
    return EXIT_OK


def cmd_keyring_digest(args: argparse.Namespace, out: Out) -> int:
    """The keyring's digest, as ``stats`` shows a store's."""
    _, keyring = parse_keyring_doc(keyring_bytes(args.keyring))
    out.write(keyring.digest.encode("ascii") + b"\n")
    return EXIT_OK


def add_commands(sub: Any, store_parser: StoreParser) -> None:
    """``keyring`` and its subcommands (none takes ``--store``)."""
    p = sub.add_parser(
        "keyring",
        help="make, edit and show a keyring file",
        description="Build and read a keyring (spec section 3). Every edit is checked with "
        "the rules `--keyring` applies when loading one, refuses a key_id or a public key "
        "already there, and writes the file atomically (temporary file, sync, rename).",
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION", parser_class=CommandParser)
    actions.required = True

    q = actions.add_parser("new", help="write an empty keyring",
                           description="Write KEYRING with no keys.")
    q.add_argument("keyring", metavar="KEYRING", help="the keyring file to write")
    q.add_argument("--force", action="store_true", help="replace KEYRING if it exists")
    q.set_defaults(func=cmd_keyring_new)

    q = actions.add_parser(
        "add",
        help="add a key: a keyring entry or a key file's public entry",
        description="Add a key to KEYRING. ENTRY_OR_KEYFILE is the entry pithlog keygen "
        "printed (a file holding it, - for stdin, or the JSON itself) or a pithlog key file, "
        "whose public entry is added (the private key is not copied).",
    )
    q.add_argument("keyring", metavar="KEYRING", help="the keyring file to edit")
    q.add_argument("entry", metavar="ENTRY_OR_KEYFILE",
                   help="a keyring entry (a file holding it, - for stdin, or the JSON "
                   "itself) or a key file, whose public entry is added")  # fmt: skip
    q.add_argument("--not-before", metavar="TS", help="set the entry's not_before")
    q.add_argument("--not-after", metavar="TS", help="set the entry's not_after")
    q.set_defaults(func=cmd_keyring_add)

    q = actions.add_parser(
        "revoke",
        help="revoke a key from a time on",
        description="Set revoked_at of KEY_ID to TS: the key signs validly only for "
        "created_at before TS (events before it stay valid). A revoked key can only be "
        "revoked again at an earlier time. A warning names any other key_id under which "
        "the keyring trusts the same public key: revoke it as well.",
    )
    q.add_argument("keyring", metavar="KEYRING", help="the keyring file to edit")
    q.add_argument("key_id", metavar="KEY_ID", help="the key_id of the key to revoke")
    q.add_argument("--at", required=True, metavar="TS", help="revoked_at, YYYY-MM-DDTHH:MM:SSZ")
    q.set_defaults(func=cmd_keyring_revoke)

    q = actions.add_parser("show", help="the keys as a table",
                           description="One line per key: key id, signer, signer type, "
                           "validity (not_before .. not_after, revoked_at) and fingerprint "
                           "(first 16 bytes of SHA-256 of the public key).")  # fmt: skip
    q.add_argument("keyring", metavar="KEYRING", help="the keyring file to read")
    q.set_defaults(func=cmd_keyring_show)

    q = actions.add_parser("digest", help="the keyring's digest (as stats shows a store's)",
                           description="Print the digest of what the keyring means (the "
                           "seven members of every key, by key_id), the keyring_digest that "
                           "`pithlog stats` shows for the keyring a store was reduced under.")
    q.add_argument("keyring", metavar="KEYRING", help="the keyring file to read")
    q.set_defaults(func=cmd_keyring_digest)
