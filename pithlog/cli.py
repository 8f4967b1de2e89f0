"""The ``pithlog`` command line: argv in, bytes out, a documented exit status.

Exit status (``docs/cli.md``): 0 success; 1 verification failed (a state document or a
store that does not hold what it claims); 2 bad input or usage (a refused line, a bad
keyring, a file that cannot be read, wrong arguments). Every deliberate failure is a
:class:`~pithlog.errors.PithlogError`, caught once in :func:`main` and printed as one line.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any, BinaryIO, NoReturn

from pithlog import __version__
from pithlog.canonical import jcs, parse
from pithlog.checks import check_alone
from pithlog.errors import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    EXIT_VERIFY_FAILED,
    DoorError,
    KeyFileError,
    PithlogError,
    SigningError,
    UsageError,
)
from pithlog.events import EVENT_TYPES, admit, prepare_record_created, sign_event
from pithlog.keys import (
    SIGNER_TYPES,
    Keyring,
    SigningKey,
    dump_key_file,
    load_key_file,
    load_keyring,
    make_keyring,
)
from pithlog.lines import iter_envelopes
from pithlog.records import is_pith_number
from pithlog.reduce import Pending, reduce_events
from pithlog.state import render, state_document, verify_state_document
from pithlog.timestamps import is_ts


class _Parser(argparse.ArgumentParser):
    """argparse, with usage errors raised as :class:`UsageError` instead of exiting."""

    def error(self, message: str) -> NoReturn:
        raise UsageError("arguments", f"{message} (see '{self.prog} --help')")


# --- I/O helpers (the edge) ---------------------------------------------------------------


def _read_bytes(path: str) -> bytes:
    try:
        if path == "-":
            return sys.stdin.buffer.read()
        return Path(path).read_bytes()
    except OSError as exc:
        raise UsageError("unreadable", f"cannot read {path}: {exc.strerror or exc}") from exc


@contextlib.contextmanager
def _open_input(path: str) -> Iterator[BinaryIO]:
    if path == "-":
        yield sys.stdin.buffer
        return
    try:
        stream = open(path, "rb")  # noqa: SIM115 - closed by the with below
    except OSError as exc:
        raise UsageError("unreadable", f"cannot read {path}: {exc.strerror or exc}") from exc
    with stream:
        yield stream


def _keyring(path: str) -> Keyring:
    return load_keyring(_read_bytes(path))


class _Out:
    """stdout and stderr as bytes and lines."""

    def __init__(self, stdout: IO[bytes], stderr: IO[str]) -> None:
        self.stdout = stdout
        self.stderr = stderr

    def write(self, data: bytes) -> None:
        self.stdout.write(data)

    def say(self, line: str) -> None:
        """One line of diagnostics on stderr."""
        print(line, file=self.stderr)


# --- commands -----------------------------------------------------------------------------


def cmd_reduce(args: argparse.Namespace, out: _Out) -> int:
    """Reduce a JSON Lines file of events to one state document per pith."""
    keyring = _keyring(args.keyring)
    envelopes = []
    refused = 0
    with _open_input(args.events) as stream:
        for number, item in iter_envelopes(stream):
            if isinstance(item, DoorError):
                refused += 1
                out.say(f"pithlog: line {number}: {item.describe()}")
            else:
                envelopes.append(item)
    results = reduce_events(envelopes, keyring)
    states = 0
    for pith, result in results.items():
        if isinstance(result, Pending):
            out.say(f"pending: {pith}: {result.event_count} events, no valid record_created")
            continue
        out.write(render(state_document(result)) + b"\n")
        states += 1
    out.say(
        f"reduce: {len(envelopes)} events read, {refused} lines refused, "
        f"{states} states, {len(results) - states} pending"
    )
    return EXIT_BAD_INPUT if refused else EXIT_OK


def cmd_verify_state(args: argparse.Namespace, out: _Out) -> int:
    """Check a published state document without its log (spec section 9)."""
    failures = verify_state_document(_read_bytes(args.state))
    for failure in failures:
        out.write(failure.encode("utf-8") + b"\n")
    if failures:
        out.say(f"verify-state: {args.state}: {len(failures)} rule(s) failed")
        return EXIT_VERIFY_FAILED
    out.say(f"verify-state: {args.state}: conforms to spec section 9")
    return EXIT_OK


def _write_private(path: Path, data: bytes, force: bool) -> None:
    """Write a secret file with mode 0600, never half-written, never over one by accident."""
    if path.exists() and not force:
        raise UsageError("exists", f"{path} exists; pass --force to replace it")
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise KeyFileError("unwritable", f"cannot write {path}: {exc.strerror or exc}") from exc


def cmd_keygen(args: argparse.Namespace, out: _Out) -> int:
    """Make an Ed25519 key file and print its keyring entry."""
    for name in ("not_before", "not_after"):
        value = getattr(args, name)
        if value is not None and not is_ts(value):
            flag = "--" + name.replace("_", "-")
            raise UsageError("timestamp", f"{flag} must be YYYY-MM-DDTHH:MM:SSZ")
    key = SigningKey.generate(args.key_id, args.signer_id, args.signer_type)
    entry = key.keyring_entry(not_before=args.not_before, not_after=args.not_after)
    make_keyring([entry])  # the entry must be one a keyring accepts
    _write_private(Path(args.out), dump_key_file(key), args.force)
    out.write(jcs(entry) + b"\n")
    out.say(f"keygen: wrote {args.out} (mode 0600); add the entry above to your keyring")
    return EXIT_OK


DEFAULT_TARGETS = {
    "record_created": "record",
    "graph_snapshot": "graph",
    "storage_attestation": "record",
    "correction": "record",
    "mirror_hint": "record",
}


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def cmd_sign(args: argparse.Namespace, out: _Out) -> int:
    """Build and sign one event; print it as one JSON line."""
    key = load_key_file(_read_bytes(args.key))
    if args.type not in EVENT_TYPES:
        raise UsageError("event_type", f"unknown event type {args.type!r}; one of "
                         f"{', '.join(EVENT_TYPES)}")  # fmt: skip
    created_at = args.created_at or _now()
    if not is_ts(created_at):
        raise UsageError("timestamp", "--created-at must be YYYY-MM-DDTHH:MM:SSZ")
    target = args.target or DEFAULT_TARGETS.get(args.type)
    if target is None:
        raise UsageError("target", f"--target is required for {args.type}")
    try:
        payload = parse(_read_bytes(args.payload))
    except DoorError as exc:
        raise SigningError("payload", f"payload is not v1 JSON: {exc.message}", exc.where) from exc
    if not isinstance(payload, dict):
        raise SigningError("payload", "the payload must be a JSON object")
    pith = args.pith
    if args.type == "record_created":
        derived, payload = prepare_record_created(key, payload)
        if pith is not None and pith != derived:
            raise SigningError("pith_number", f"--pith {pith} but the record's pith number "
                               f"is {derived}")  # fmt: skip
        pith = derived
    if pith is None or not is_pith_number(pith):
        raise UsageError("pith_number", "--pith PITH (pith:YYYY:<26 base32>) is required")
    event = sign_event(key, args.type, pith, target, created_at, payload)
    if not args.allow_invalid:
        own = make_keyring([key.keyring_entry()])
        reason = check_alone(admit(event), own)
        if reason is not None:
            raise SigningError(
                "invalid_event",
                f"the event would be invalid ({reason}); fix it, or pass --allow-invalid",
            )
    out.write(jcs(event) + b"\n")
    return EXIT_OK


# --- argv ---------------------------------------------------------------------------------

EPILOG = """exit status: 0 success; 1 verification failed; 2 bad input or usage.
Every error is one line: pithlog: [family.detail] message (docs/errors.md lists them)."""


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="pithlog",
        description="Append-only, signed event-log merge engine (pith-open-graph-merge-v1).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"pithlog {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    p = sub.add_parser(
        "reduce",
        help="reduce events (JSON Lines) to state documents",
        description="Reduce events (JSON Lines, one event per line, split on LF only) to one "
        "state document per line for every pith that has a state, sorted by pith_number. "
        "Pending piths and lines refused at the door are reported on stderr; a refused line "
        "makes the exit status 2, the rest is still reduced.",
    )
    p.add_argument("--keyring", required=True, metavar="KEYRING", help="keyring JSON file")
    p.add_argument("events", metavar="EVENTS", help="JSON Lines file of events, or - for stdin")
    p.set_defaults(func=cmd_reduce)

    p = sub.add_parser(
        "verify-state",
        help="check a published state document without its log",
        description="Check a state document against spec section 9: state_sha256, pith "
        "number, aliases, counts, applied_event_ids, order, and that re-rendering reproduces "
        "its bytes. Prints one line per failed rule and exits 1; exits 0 when it conforms.",
    )
    p.add_argument("state", metavar="STATE", help="state document file, or - for stdin")
    p.set_defaults(func=cmd_verify_state)

    p = sub.add_parser(
        "keygen",
        help="make an Ed25519 key file and print its keyring entry",
        description="Write a new Ed25519 private key file (mode 0600) and print the keyring "
        "entry for it (one JSON line) on stdout.",
    )
    p.add_argument("--key-id", required=True)
    p.add_argument("--signer-id", required=True)
    p.add_argument("--signer-type", required=True, choices=sorted(SIGNER_TYPES))
    p.add_argument("--out", required=True, metavar="KEYFILE", help="private key file to write")
    p.add_argument("--not-before", metavar="TS", help="not_before of the keyring entry")
    p.add_argument("--not-after", metavar="TS", help="not_after of the keyring entry")
    p.add_argument("--force", action="store_true", help="replace KEYFILE if it exists")
    p.set_defaults(func=cmd_keygen)

    p = sub.add_parser(
        "sign",
        help="build and sign one event",
        description="Build and sign one event and print it as one JSON line. A "
        "record_created payload gets canonical_sha256, source_kind/id/version and a signed "
        "receipt filled in from its canonical_record, and its pith number derived. The event "
        "is checked against the signing key alone (checks 1-12); an event that would be "
        "invalid is refused unless --allow-invalid.",
    )
    p.add_argument("--key", required=True, metavar="KEYFILE")
    p.add_argument("--type", required=True, metavar="TYPE", help=", ".join(EVENT_TYPES))
    p.add_argument("--pith", metavar="PITH", help="pith number (derived for record_created)")
    p.add_argument("--target", metavar="T", help="target (default: record, or graph for "
                   "graph_snapshot, where the type allows only one)")  # fmt: skip
    p.add_argument("--payload", required=True, metavar="FILE", help="payload JSON, or -")
    p.add_argument("--created-at", metavar="TS", help="YYYY-MM-DDTHH:MM:SSZ (default: now, UTC)")
    p.add_argument("--allow-invalid", action="store_true",
                   help="print the event even if checks 1-12 would reject it")  # fmt: skip
    p.set_defaults(func=cmd_sign)
    return parser


Command = Callable[[argparse.Namespace, _Out], int]


def main(
    argv: Sequence[str] | None = None,
    stdout: IO[bytes] | None = None,
    stderr: IO[str] | None = None,
) -> int:
    """Run one pithlog command; return its exit status. Never raises a PithlogError."""
    out = _Out(stdout if stdout is not None else sys.stdout.buffer,
               stderr if stderr is not None else sys.stderr)  # fmt: skip
    try:
        args = build_parser().parse_args(argv)
        func: Command = args.func
        return func(args, out)
    except PithlogError as exc:
        out.say(f"pithlog: {exc.describe()}")
        return exc.exit_status
    except SystemExit as exc:  # --help and --version
        return exc.code if isinstance(exc.code, int) else EXIT_OK
    except BrokenPipeError:
        return EXIT_OK
    except KeyboardInterrupt:
        out.say("pithlog: interrupted")
        return 130


def entry() -> Any:
    """Console-script entry point."""
    sys.exit(main())
