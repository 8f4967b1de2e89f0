"""The error hierarchy of pithlog.

Every failure that pithlog reports on purpose is a :class:`PithlogError`. Each class has a
stable ``family`` (``door``, ``keyring``, ...) and each raised error a stable ``code`` of the
form ``family.detail`` (``door.duplicate_member``), which the CLI prints and
``docs/errors.md`` lists. ``exit_status`` is the CLI status the error maps to.

Reason codes inside state documents (``malformed``, ``bad_signature``, ...) are not errors:
they are data of the spec (section 6) and live in :mod:`pithlog.protocol.checks`.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Self

EXIT_OK = 0
EXIT_VERIFY_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_BEHIND = 3
"""``verify-checkpoint --check-store``: the store holds fewer leaves than the checkpoint
(a mirror behind the log, not a fork)."""
EXIT_INTERRUPTED = 130
"""Ctrl-C (SIGINT): 128 + 2, as shells report it."""
EXIT_TERMINATED = 143
"""SIGTERM, under the console script: 128 + 15."""


CODES: dict[str, str] = {
    # door: untrusted bytes (spec 1, 4)
    "door.bom": "remove the byte-order mark: input is UTF-8 without one",
    "door.utf8": "the input is not valid UTF-8; re-encode it",
    "door.syntax": "the input is not JSON (RFC 8259); fix the syntax at the place named",
    "door.duplicate_member": "an object repeats a member name; keep exactly one",
    "door.number_form": "write numbers as integers -?(0|[1-9][0-9]*): no fraction, exponent or -0",
    "door.number_range": "integers must lie within +/-(2^53 - 1); send larger ones as strings",
    "door.lone_surrogate": "a string holds a lone UTF-16 surrogate; send Unicode scalar values",
    "door.too_deep": "nesting is limited to 64 levels (the envelope object is level 1)",
    "door.too_large": "an envelope's JCS encoding is limited to 1 MiB, other input to 8 MiB",
    "door.line_too_long": "a JSON Lines line is limited to 8 MiB",
    "door.not_object": "an event must be a JSON object",
    "door.event_id": 'an event needs event_id "sha256:" + 64 lowercase hex',
    "door.pith_number": "an event needs a pith_number pith:YYYY:<26 base32 characters A-Z2-7>",
    # keyring (spec 3)
    "keyring.not_json": "the keyring file breaks a JSON rule of spec section 1",
    "keyring.shape": 'the keyring is {"keyring_version": "1", "keys": [...]} of objects',
    "keyring.version": 'set keyring_version to the string "1"',
    "keyring.missing_member": "each key needs all seven members of spec section 3",
    "keyring.key_id": "key_id must be a non-empty string",
    "keyring.duplicate_key_id": "each key_id may appear once in a keyring",
    "keyring.signer_id": "signer_id must be a non-empty string",
    "keyring.signer_type": "signer_type must be one of the six of spec section 3",
    "keyring.public_key": "public_key_b64: canonical base64 of a 32-byte Ed25519 point, "
    "canonical (y < p) and not of small order",
    "keyring.timestamp": "not_before, not_after, revoked_at: null or YYYY-MM-DDTHH:MM:SSZ",
    "keyring.validity": "not_before must be earlier than not_after",
    "keyring.not_a_keyring": "a keyring entry or a key file was given where a keyring is "
    "expected: build a keyring with `pithlog keyring new` and `pithlog keyring add`",
    "keyring.not_an_entry": "`pithlog keyring add` takes a keyring entry (as keygen prints "
    "it, with no private_key_b64) or a pithlog key file",
    "keyring.duplicate_public_key": "each public key may appear once in a keyring",
    "keyring.unknown_key_id": "the keyring has no key of that key_id: see `pithlog keyring "
    "show`",
    "keyring.revoked": "the key is already revoked at that time or earlier",
    "keyring.unwritable": "the keyring file cannot be written there; check the folder",
    "keyring.too_large": "the edited keyring would be longer than the 8 MiB a keyring file "
    "may be; the file is kept as it was",
    # key files
    "key_file.not_json": "the key file is not JSON pithlog can read",
    "key_file.version": "not a pithlog key file (key_file_version pithlog-key-v1)",
    "key_file.member": "key_id, signer_id, signer_type, private_key_b64 must be non-empty strings",
    "key_file.signer_type": "signer_type must be one of the six of spec section 3",
    "key_file.private_key": "private_key_b64 must be base64 of a 32-byte Ed25519 seed",
    "key_file.public_key": "public_key_b64 does not belong to private_key_b64",
    "key_file.unwritable": "the key file cannot be written there; check the folder",
    # sign
    "sign.payload": "the payload must be a JSON object of the event type's shape",
    "sign.pith_number": "--pith disagrees with the pith number of the canonical_record",
    "sign.invalid_event": "the event would fail checks 1-12; fix it or pass --allow-invalid",
    # usage
    "usage.arguments": "see the command's --help",
    "usage.net_extra": "the command speaks HTTP, which needs the net extra: pip install "
    "'pithlog[net]'",
    "usage.unreadable": "the file cannot be read; check its path and permissions",
    "usage.exists": "the output file exists: pass --force to replace it where the command "
    "takes it (keygen, keyring new); export never overwrites a shard: give another folder",
    "usage.unwritable": "the output folder cannot be made or written (a file in its place, "
    "no permission, a full disk): check the path, its permissions and free space",
    "usage.event_type": "use one of the nine event types of spec section 5",
    "usage.target": "pass --target for this event type",
    "usage.timestamp": "timestamps are YYYY-MM-DDTHH:MM:SSZ",
    "usage.pith_number": "pass --pith pith:YYYY:<26 base32 characters>",
    "usage.several_states": "verify-state checks one state document per file: split the "
    "lines of reduce's output into files",
    "usage.state_too_large": "the file is longer than verify-state's --max-bytes (256 MiB "
    "by default): pass a larger --max-bytes if it is one state document",
    "usage.output": "standard output cannot be written (a full disk, a closed descriptor): "
    "check where it goes",
    "usage.output_closed": "standard output closed (a reader such as head stopped) or failed "
    "(a full disk) before append, import or export --out finished: run the same input again "
    "to finish (what is stored is reported as duplicate), or export with the --after the "
    "message names",
    # dask: reduce --dask (docs/distributed.md)
    "dask.extra": "--dask needs the dask extra: pip install 'pithlog[dask]'",
    "dask.scheduler": "start the Dask scheduler and its workers, or check ADDRESS "
    "(tcp://host:port, or local[:N] for a cluster on this machine)",
    "dask.version": "install on every Dask worker the pithlog version the client runs",
    "dask.worker_lost": "a task killed every Dask worker that ran it (out of memory, say): "
    "see the workers' logs; give them more memory (--memory-limit) or pass a smaller "
    "--blocksize",
    # proof (the others in pithlog.transparency.proofs): raised by the store's reads and the
    # CLI as well
    "proof.not_found": "the store's tree of that size holds no copy of that event_id",
    # mirror: pithlog mirror and audit (docs/network.md); here, not in pithlog.net.mirror,
    # because the origin's reader and the consistency step raise them too
    "mirror.split_view": "the served checkpoint is not consistent with the one this store "
    "accepted from that origin (a split view or a rewritten history): nothing was stored; "
    "publish the evidence file named in the message",
    "mirror.diverged": "the store's log is not a prefix of the served log: mirror into a "
    "fresh store",
    "mirror.copy": "a served copy does not match its leaf data (its SHA-256 or event_id) "
    "or fails the door: the origin serves other bytes than it signed",
    "mirror.duplicate": "the served tree holds a copy twice, or one this store holds at "
    "another place: the mirror cannot reproduce that tree",
    "mirror.unproven": "the origin did not answer the consistency proof a checkpoint needs "
    "(or served an older checkpoint than the one accepted, without proof; or a proof "
    "that does not hold, without the tiles that tell whether its tree is another)",
    "mirror.fetch": "the origin could not be reached, or answered with an error or an "
    "oversize answer; run the mirror again (it continues where it stopped)",
    "mirror.concurrent": "another mirror of this store accepted a checkpoint or appended "
    "meanwhile: run again (when another command appended leaves of its own meanwhile, the "
    "message says so: the store is no longer a mirror, mirror into a fresh store)",
}
"""Every stable error code, with what to do about it; ``docs/errors.md`` lists the same."""


def register(codes: dict[str, str]) -> None:
    """Add the codes of a module that defines its own (the store), once, at import."""
    for code, fix in codes.items():
        if CODES.setdefault(code, fix) != fix:
            raise ValueError(f"error code {code} registered twice")


MAX_MESSAGE = 2000
"""The most characters of an error's message, the count of those cut included; the rest is
counted, not shown."""
KEPT_END = 500
"""Of those, the characters kept from the message's end."""
CUT_ROOM = 50
"""Of those, the room kept for `` ...(N characters cut)... ``, whatever N: a message cut
is then no longer than :data:`MAX_MESSAGE`, so that cutting it again (an error rebuilt
from its message after crossing a process boundary, ``__reduce__``) leaves it as it is."""
MAX_WHERE = 500
"""The most characters of an error's ``where``, cut as a message is (its last
:data:`WHERE_END` kept, the innermost place of a JSON Pointer): a pointer names the
members it passes, and a member name may be megabytes long."""
WHERE_END = 200


def shown(text: str) -> str:
    """``text`` chosen by someone else (a key_id or signer_id of a keyring, a checkpoint's
    origin, a witness's answer) as a message or a line of output shows it: a character
    that is not printable (LF, ESC, DEL, U+2028, a bidi override, ...) as ``\\uXXXX``, so
    that it can neither break a one-line message or a table row into several (a row that
    looks like another key) nor write terminal escapes."""
    if text.isprintable():
        return text
    return "".join(
        c if c.isprintable() else f"\\u{ord(c):04x}" if ord(c) <= 0xFFFF else f"\\U{ord(c):08x}"
        for c in text
    )


def _cut(text: str, most: int, end: int) -> str:
    """``text``, or when it is longer than ``most`` its start and its last ``end``
    characters and how many were cut between, ``most`` characters at most in all."""
    if len(text) <= most:
        return text
    head = most - end - CUT_ROOM
    cut = len(text) - head - end
    return f"{text[:head]} ...({cut:,} characters cut)... {text[-end:]}"


class PithlogError(Exception):
    """Root of every deliberate pithlog failure.

    ``detail`` is the stable second half of :attr:`code`; ``where`` says where in the input
    the problem is (a JSON path, a byte offset, a line), when that is known.
    """

    family = "error"
    exit_status = EXIT_BAD_INPUT

    def __init__(self, detail: str, message: str, where: str | None = None) -> None:
        self.detail = detail
        if self.code not in CODES:  # an unlisted code is a bug: docs/errors.md must name it
            raise ValueError(f"unregistered error code {self.code}")
        # a message may quote what a stranger sent (a member's value, a keyring's key ids),
        # and a JSON Pointer the member names: the line the CLI prints and the JSON the
        # server answers stay short. Its end is kept too: that is where a message names its
        # file or its advice (a split view's evidence path comes after the origin)
        self.message = _cut(message, MAX_MESSAGE, KEPT_END)
        self.where = None if where is None else _cut(where, MAX_WHERE, WHERE_END)
        super().__init__(self.describe())

    def __reduce__(self) -> tuple[type[PithlogError], tuple[str, str, str | None]]:
        # Errors cross process boundaries (replay and reduce workers, verifying helpers);
        # Exception's own pickling would call __init__ with the one-line text alone.
        return type(self), (self.detail, self.message, self.where)

    @property
    def code(self) -> str:
        return f"{self.family}.{self.detail}"

    def describe(self) -> str:
        """One line: code, message and, when known, where."""
        at = f" (at {self.where})" if self.where else ""
        return f"[{self.code}] {self.message}{at}"

    def unchained(self) -> Self:
        """This error without its traceback and the exceptions it was raised from or
        during: what to keep of it past its ``except`` block (a line's refusal among a
        batch's items). Its traceback holds the frames it passed through, and when one of
        them holds the list that keeps the error, that is a reference cycle only the cyclic
        collector frees; commands, their helpers and the server's judging run with it
        paused (:mod:`pithlog.cli`), so each refused line was kept, frames and bytes, for
        as long as the process lived."""
        self.__cause__ = self.__context__ = None
        return self.with_traceback(None)


class DoorError(PithlogError):
    """Untrusted bytes refused at the door (spec sections 1 and 4): never stored or reduced."""

    family = "door"


class KeyringError(PithlogError):
    """A keyring that breaks a rule of spec section 3; the keyring is refused whole."""

    family = "keyring"


class KeyFileError(PithlogError):
    """A private key file that cannot be read or written."""

    family = "key_file"


class SigningError(PithlogError):
    """An event that cannot be built or signed as asked (``pithlog sign``)."""

    family = "sign"


class UsageError(PithlogError):
    """Wrong command-line use, or an input file that cannot be opened."""

    family = "usage"


class StoreError(PithlogError):
    """The LMDB log cannot be opened, read or written as asked."""

    family = "store"


class _Verifying(PithlogError):
    """An error family where some codes mean "verification failed" (exit 1), not bad input."""

    failed: frozenset[str] = frozenset()

    def __init__(self, detail: str, message: str, where: str | None = None) -> None:
        super().__init__(detail, message, where)
        self.exit_status = EXIT_VERIFY_FAILED if detail in self.failed else EXIT_BAD_INPUT


class CheckpointError(_Verifying):
    """A checkpoint (C2SP signed note) that cannot be parsed, signed or trusted."""

    family = "checkpoint"
    failed = frozenset({"untrusted", "bad_signature", "origin", "diverged"})

    def __init__(self, detail: str, message: str, where: str | None = None) -> None:
        super().__init__(detail, message, where)
        if detail == "behind":
            self.exit_status = EXIT_BEHIND


class ProofError(_Verifying):
    """A Merkle proof that cannot be built, parsed, or that does not verify."""

    family = "proof"
    failed = frozenset({"inclusion", "consistency", "mismatch"})


class EvidenceError(_Verifying):
    """An evidence file (an equivocation proof) that is not one, or whose claim does not
    hold."""

    family = "evidence"
    failed = frozenset({"does_not_hold"})


class WitnessError(_Verifying):
    """A cosignature or a witness request that is malformed or does not verify (C2SP
    tlog-witness, tlog-cosignature)."""

    family = "witness"
    failed = frozenset({"cosignature", "quorum"})


class TileError(_Verifying):
    """A tlog-tiles path that names no tile, or served tiles and bundles that do not verify
    against their checkpoint (``pithlog.transparency.tiles``)."""

    family = "tile"
    failed = frozenset({"mismatch", "bundle", "size"})


class ServeError(PithlogError):
    """A request that ``pithlog serve`` refuses (``docs/network.md``): the HTTP status comes
    with the code."""

    family = "serve"


class SyncError(PithlogError):
    """A sync that cannot read its source or receives a message breaking the protocol."""

    family = "sync"


class DaskError(PithlogError):
    """A reduction on a Dask cluster that cannot start or run (``pithlog.distributed``)."""

    family = "dask"


class MirrorError(_Verifying):
    """A served log that ``pithlog mirror`` cannot copy, or that does not verify against its
    signed checkpoint (``docs/network.md``)."""

    family = "mirror"
    failed = frozenset({"split_view", "diverged", "copy", "duplicate", "unproven"})
    evidence: Path | None = None
    """``split_view``: the evidence file written (``None``: it could not be written)."""


class HelperLost(RuntimeWarning):
    """A helper or worker process ended abruptly (killed: by hand, or by the kernel when
    memory ran out) before returning its work. Not an error: the work is pure, so the
    process that started it does it again itself, and every result is the same, only
    later. Emitted with :mod:`warnings`; the CLI prints it as one line."""

    MESSAGE = ("a helper process ended abruptly (killed?); its work is done in this "
               "process instead, with the same results")  # fmt: skip

    @classmethod
    def warn(cls) -> None:
        warnings.warn(cls.MESSAGE, cls, stacklevel=3)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C would be (:func:`terminate_as_interrupt`): the command
    stops as an interrupt stops it, with status 143 (:data:`EXIT_TERMINATED`)."""
