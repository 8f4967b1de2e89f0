"""The commands that need no store: ``reduce``, ``verify-state``, ``keygen``, ``sign``."""

from __future__ import annotations

import argparse
import contextlib
import datetime
import errno
import os
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pithlog.cli.edge import (
    StoreParser,
    at_least,
    keyring_option,
    not_a_file,
    progress_option,
    reading,
    remove_leftovers,
)
from pithlog.cli.on_dask import reduce_on_dask
from pithlog.cli.streams import Out, open_input, read_bytes, read_key_file, read_keyring
from pithlog.cli.tally import InvalidTally
from pithlog.errors import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    EXIT_VERIFY_FAILED,
    DoorError,
    KeyFileError,
    SigningError,
    UsageError,
)
from pithlog.lines import iter_lines, too_long
from pithlog.parallel import admitted, reduce_lines, reduce_rendered
from pithlog.parallel.cores import MOST_CORES
from pithlog.protocol.canonical import MAX_LINE_BYTES, jcs, parse, shape
from pithlog.protocol.checks import check_alone
from pithlog.protocol.event_types import EVENT_TYPES, prepare_record_created
from pithlog.protocol.events import admit, sign_event
from pithlog.protocol.explain import payload_problem, targets_of
from pithlog.protocol.keys import (
    SIGNER_TYPES,
    SigningKey,
    dump_key_file,
    make_keyring,
)
from pithlog.protocol.records import is_pith_number
from pithlog.protocol.reduce import Pending
from pithlog.protocol.state_verify import verify_state_document
from pithlog.protocol.timestamps import is_ts


def cmd_reduce(args: argparse.Namespace, out: Out) -> int:
    """Reduce JSON Lines files of events to one state document per pith."""
    if not 1 <= args.jobs <= MOST_CORES:
        # each job is a process: a mistyped count must not start thousands
        raise UsageError("arguments", f"--jobs must be from 1 to {MOST_CORES}")
    if args.dask is not None:
        if args.jobs != 1:
            raise UsageError("arguments", "--jobs and --dask both spread the work: give one "
                             "(--dask local:N for N processes on this machine)")  # fmt: skip
        if args.progress:
            # the bar counts the input this process reads; with --dask the workers read it
            raise UsageError("arguments", "--progress shows the input read here, and with "
                             "--dask the workers read it: follow them on the Dask "
                             "dashboard")  # fmt: skip
        return reduce_on_dask(args, out)
    if args.compare is not None or args.blocksize is not None:
        raise UsageError("arguments", "--compare and --blocksize need --dask (on one "
                         "machine: --dask local)")  # fmt: skip
    keyring = read_keyring(args.keyring)
    read = refused = states = pending = 0
    invalid = InvalidTally()
    several = len(args.events) > 1

    def where(tag: tuple[str, int]) -> str:
        return f"{tag[0]}: line {tag[1]}" if several else f"line {tag[1]}"

    def refuse(tag: tuple[str, int], error: DoorError) -> None:
        nonlocal refused
        refused += 1
        out.say(f"pithlog: {where(tag)}: {error.describe()}")

    def lines() -> Iterator[tuple[tuple[str, int], bytes | DoorError]]:
        # Each file is framed on its own: the last line of one ends at its end.
        nonlocal read
        for path in args.events:
            with open_input(path) as raw, reading(raw, args, out, "reduce: read") as stream:
                for number, line in iter_lines(stream):
                    read += 1
                    yield (path, number), too_long(number) if line is None else line

    # --jobs 1: the door, checks and signatures of the lines in helpers as they are read
    if args.jobs == 1:
        results = reduce_lines(lines(), keyring, refuse)
    else:
        results = reduce_rendered(admitted(lines(), refuse), keyring, jobs=args.jobs)
    for pith, result in results:
        if isinstance(result, Pending):
            out.say(f"pending: {pith}: {result.event_count} events, no valid record_created")
            pending += 1
            invalid.add(result)
            continue
        out.write(result + b"\n")
        states += 1
        invalid.add(result)
    read -= refused  # the lines read, less those the door refused
    out.say(f"reduce: {read} events read, {refused} lines refused, {states} states, "
            f"{pending} pending; {invalid.summary()}")  # fmt: skip
    return EXIT_BAD_INPUT if refused else EXIT_OK


def _json_lines(data: bytes) -> int:
    """How many state documents ``data`` holds as JSON Lines: its number of non-blank
    lines when each is a JSON object of its own (what ``reduce`` prints), else 1 (one
    document, perhaps pretty-printed or damaged: verify-state judges it)."""
    lines = [line for line in data.split(b"\n") if line.strip()]
    if len(lines) < 2:
        return 1
    for line in lines:
        try:
            if not isinstance(shape(line, Any), dict):
                return 1
        except DoorError:
            return 1
    return len(lines)


STATE_FILE_BYTES = 256 << 20
"""The longest state document ``verify-state`` reads by default (``--max-bytes``). The
spec caps no state (a pith holds any number of events, docs/protocol.md 13), but reading
one is holding it, about five times over once parsed and rendered again (some 25 times
for a document made mostly of small objects or arrays): a file that is
no state (``/dev/zero``) must not take the machine's memory. 256 MiB is well over a
hundred thousand events of one pith (a kilobyte or two each in a state)."""


def cmd_verify_state(args: argparse.Namespace, out: Out) -> int:
    """Check a published state document without its log (spec section 9)."""
    # its one trailing LF is not counted: a document of --max-bytes is read with it
    data = read_bytes(args.state, args.max_bytes + 1)
    if len(data) - data.endswith(b"\n") > args.max_bytes:
        raise UsageError("state_too_large", f"{args.state} is longer than {args.max_bytes:,} "
                         "bytes, the most verify-state reads: if it is one state document, "
                         "pass a larger --max-bytes")  # fmt: skip
    lines = _json_lines(data)
    if lines > 1:
        raise UsageError("several_states", f"one state document per file; {args.state} has "
                         f"{lines} lines (pithlog reduce prints one state per line): give "
                         "each its own file (split -l 1) and verify each")  # fmt: skip
    failures = verify_state_document(data)
    for failure in failures:
        out.write(failure.encode("utf-8") + b"\n")
    if failures:
        out.say(f"verify-state: {args.state}: {len(failures)} rule(s) failed")
        return EXIT_VERIFY_FAILED
    out.say(f"verify-state: {args.state}: conforms to spec section 9")
    return EXIT_OK


_NO_HARD_LINKS = frozenset({errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS})
"""What link() answers on a filesystem without hard links (FAT, some FUSE mounts)."""


_NO_UNNAMED_FILES = frozenset(
    {errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL, errno.ENOENT, errno.EXDEV}
)
"""What open(O_TMPFILE) answers where the filesystem or kernel has no unnamed files
(EISDIR: a kernel older than 3.11 reads the flag as O_DIRECTORY), and what the link
through /proc answers where /proc is not mounted (ENOENT) or its link is not followed
(EXDEV: the /proc entry itself would be linked)."""


def _write_private(path: Path, data: bytes, force: bool) -> None:
    """Write a secret file with mode 0600, never half-written, never over one by accident.

    On Linux the bytes go to an unnamed ``O_TMPFILE`` file in the target folder, given its
    name by ``linkat(AT_SYMLINK_FOLLOW)`` of ``/proc/self/fd/N``: a kill at any moment
    leaves the key file or nothing, never a second named copy of the key, except with
    ``force``, where the new key is linked to a hidden name and renamed over the old file
    (a kill between the two leaves it under the hidden name: no name can be replaced
    by an unnamed file; the next write of the path removes it, :func:`remove_leftovers`).
    Where that is unavailable a named temporary file is written and linked instead.

    A hard link, not a rename, gives the name unless ``force``: a link fails when the name
    is taken, so a key file made there after the check below (another keygen with the
    same ``--out``, whose entry was printed) is kept, where a rename would silently
    replace it. The folder is synced after: until then a crash can lose the new name, and
    with it a key whose keyring entry was already printed."""
    if path.exists() and not force:
        raise UsageError("exists", f"{path} exists; pass --force to replace it")
    what = not_a_file(path)
    if what is not None:
        raise KeyFileError("unwritable", f"{path} is {what}: --force replaces a key file "
                           "only; give the path of the key file to write")  # fmt: skip
    remove_leftovers(path)  # a key under a hidden name, from a --force killed midway
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        folder = os.open(path.parent, os.O_RDONLY)
        try:
            if not _write_unnamed(folder, path, tmp, data, force):
                _write_named(path, tmp, data, force)
            os.fsync(folder)
        finally:
            os.close(folder)
    except OSError as exc:
        raise KeyFileError("unwritable", f"cannot write {path}: {exc.strerror or exc}; "
                           "check that its folder exists and is writable") from exc
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()  # after a link (or a failure); after a rename it is already gone


def _link(source: str | Path, path: Path, tmp: Path, force: bool, folder: int | None) -> None:
    """Give ``path`` to the file at ``source``: a link that fails when the name is taken,
    or with ``force`` a link to ``tmp`` renamed over it (a rename replaces atomically).
    With ``folder`` (the fd of ``path``'s folder) the link is ``linkat`` with
    ``AT_SYMLINK_FOLLOW``: CPython calls plain ``link()``, which does not follow a
    symbolic link such as ``/proc/self/fd/N``, unless a folder fd is given."""

    def link(name: Path) -> None:
        if folder is None:
            os.link(source, name)
        else:
            os.link(source, name.name, dst_dir_fd=folder)

    try:
        link(path)
    except FileExistsError:
        if not force:
            raise UsageError("exists", f"{path} exists; pass --force to replace "
                             "it") from None  # fmt: skip
        link(tmp)
        os.replace(tmp, path)


def _write_unnamed(folder: int, path: Path, tmp: Path, data: bytes, force: bool) -> bool:
    """Write ``path`` through an unnamed ``O_TMPFILE`` file; False (nothing written)
    where there are none, or no /proc to name one through."""
    flag = getattr(os, "O_TMPFILE", None)
    if flag is None:  # not Linux (where linkat, for dst_dir_fd, is always there)
        return False
    try:
        fd = os.open(path.parent, flag | os.O_WRONLY, 0o600)
    except OSError as exc:
        if exc.errno in _NO_UNNAMED_FILES:
            return False
        raise
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(fd)
        try:
            _link(f"/proc/self/fd/{fd}", path, tmp, force, folder)
        except OSError as exc:
            if exc.errno in _NO_UNNAMED_FILES or exc.errno in _NO_HARD_LINKS:
                return False
            raise
    return True


def _write_named(path: Path, tmp: Path, data: bytes, force: bool) -> None:
    """Write ``path`` through the named temporary file ``tmp`` (the caller unlinks it)."""
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    if force:
        os.replace(tmp, path)
        return
    try:
        _link(tmp, path, tmp, force, None)
    except OSError as exc:
        if exc.errno not in _NO_HARD_LINKS:
            raise
        os.replace(tmp, path)  # no hard links here: the check above is all there is


def cmd_keygen(args: argparse.Namespace, out: Out) -> int:
    """Make an Ed25519 key file and print its keyring entry."""
    for name in ("not_before", "not_after"):
        value = getattr(args, name)
        if value is not None and not is_ts(value):
            flag = "--" + name.replace("_", "-")
            raise UsageError("timestamp", f"{flag} must be YYYY-MM-DDTHH:MM:SSZ")
    if args.out == "-":
        # a file named - would be one no command reads: --key - and keyring add KEYRING -
        # read standard input
        raise UsageError("arguments", "--out is the key file to write, and - is standard "
                         "input elsewhere: give the key file's path (./- for a file named "
                         "-)")  # fmt: skip
    key = SigningKey.generate(args.key_id, args.signer_id, args.signer_type)
    entry = key.keyring_entry(not_before=args.not_before, not_after=args.not_after)
    make_keyring([entry])  # the entry must be one a keyring accepts
    _write_private(Path(args.out), dump_key_file(key), args.force)
    try:
        out.write(jcs(entry) + b"\n")
        out.flush()
    except UsageError as exc:  # the key exists: say so, since the entry was not printed
        raise UsageError(exc.detail, f"{exc.message}; the key file {args.out} was "
                         f"written: `{_trust_command(args)}` trusts it") from exc  # fmt: skip
    out.say(f"keygen: wrote {args.out} (mode 0600); trust it with: {_trust_command(args)}")
    return EXIT_OK


def _trust_command(args: argparse.Namespace) -> str:
    """The ``keyring add`` that trusts the new key as the entry keygen printed. A key file
    holds no validity, so ``keyring add KEYRING KEYFILE`` alone adds the key unbounded: a
    key made with ``--not-after`` would be trusted for ever. The bounds go with it."""
    words = ["pithlog", "keyring", "add", "KEYRING", shlex.quote(args.out)]
    for flag, value in (("--not-before", args.not_before), ("--not-after", args.not_after)):
        if value is not None:
            words += [flag, value]
    return " ".join(words)


DEFAULT_TARGETS = {
    "record_created": "record",
    "graph_snapshot": "graph",
    "storage_attestation": "record",
    "correction": "record",
    "mirror_hint": "record",
}


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def cmd_sign(args: argparse.Namespace, out: Out) -> int:
    """Build and sign one event; print it as one JSON line."""
    key = read_key_file(args.key, out)
    if args.type not in EVENT_TYPES:
        raise UsageError("event_type", f"unknown event type {args.type!r}; one of "
                         f"{', '.join(EVENT_TYPES)}")  # fmt: skip
    created_at = args.created_at or _now()
    if not is_ts(created_at):
        raise UsageError("timestamp", "--created-at must be YYYY-MM-DDTHH:MM:SSZ")
    target = args.target or DEFAULT_TARGETS.get(args.type)
    if target is None:
        raise UsageError("target", f"--target is required for {args.type}: pass "
                         f"{targets_of(args.type)}")  # fmt: skip
    # --allow-invalid prints an event failing any of checks 1-12, check 9 included: a
    # bad_target event is what a test of a verifier needs as much as any other.
    if not args.allow_invalid and not EVENT_TYPES[args.type].target_ok(target):
        raise UsageError("target", f"--target {target!r} is not allowed for {args.type}: "
                         f"pass {targets_of(args.type)}")  # fmt: skip
    try:
        payload = parse(read_bytes(args.payload, MAX_LINE_BYTES))
    except DoorError as exc:
        raise SigningError("payload", f"payload is not v1 JSON: {exc.message}", exc.where) from exc
    if not isinstance(payload, dict):
        raise SigningError("payload", "the payload must be a JSON object")
    pith = args.pith
    if args.type == "record_created":
        derived, payload = prepare_record_created(key, payload)
        if pith is not None and pith != derived:
            raise SigningError("pith_number", f"--pith {pith} but the record's pith number "
                               f"is {derived}; leave --pith out or pass that")  # fmt: skip
        pith = derived
    if pith is None or not is_pith_number(pith):
        raise UsageError("pith_number", "--pith PITH (pith:YYYY:<26 base32>) is required")
    event = sign_event(key, args.type, pith, target, created_at, payload)
    if not args.allow_invalid:
        own = make_keyring([key.keyring_entry()])
        reason = check_alone(admit(event), own)
        problem = payload_problem(args.type, payload, target) if reason == "bad_payload" else None
        if problem is not None:
            raise SigningError("payload", f"{args.type} payload: {problem} (check 10, "
                               "bad_payload); see docs/cli.md for a payload of every type")
        if reason is not None:
            raise SigningError(
                "invalid_event",
                f"the event would be invalid ({reason}); fix it, or pass --allow-invalid",
            )
    out.write(jcs(event) + b"\n")
    return EXIT_OK


def add_commands(sub: Any, store_parser: StoreParser) -> None:
    """The subcommand parsers of this group (none of them takes ``--store``)."""
    p = sub.add_parser(
        "reduce",
        help="reduce events (JSON Lines) to state documents",
        description="Reduce events (JSON Lines, one event per line, split on LF only) to one "
        "state document per line for every pith that has a state, sorted by pith_number. "
        "Several EVENTS are one input, read in order. "
        "Pending piths and lines refused at the door are reported on stderr; a refused line "
        "makes the exit status 2, the rest is still reduced.",
    )
    keyring_option(p)
    p.add_argument("events", metavar="EVENTS", nargs="+",
                   help="JSON Lines file(s) of events, read in order as one input, or - for "
                   "stdin; with --dask also globs and fsspec URLs (s3://bucket/export-*.jsonl)")
    p.add_argument("--jobs", type=int, default=1, metavar="N",
                   help=f"reduce the piths in N processes, 1 to {MOST_CORES} (same output)")
    p.add_argument("--dask", metavar="ADDRESS", default=None,
                   help="reduce on a Dask cluster: its scheduler (tcp://host:port), or local[:N] "
                   "for N worker processes started here (same output; needs pithlog[dask]; "
                   "docs/distributed.md)")
    p.add_argument("--compare", metavar="PUBLISHED", default=None,
                   help="with --dask: compare the states with PUBLISHED (JSON Lines, one state "
                   "per line; a path, glob or URL) on the workers and print only the "
                   "differences, one JSON line each; exit 1 when there is any: a state that "
                   "differs, is missing or unexpected, a duplicate or an unreadable line")
    p.add_argument("--blocksize", type=at_least(1), default=None, metavar="BYTES",
                   help="with --dask: bytes of a file per task (default: the input spread over "
                   "2 tasks per worker thread, between 1 MiB and 128 MiB)")
    progress_option(p, "how much of the input is read (not with --dask, whose workers "
                    "read it)")
    p.set_defaults(func=cmd_reduce)

    p = sub.add_parser(
        "verify-state",
        help="check a published state document without its log",
        description="Check a state document against spec section 9: state_sha256, pith "
        "number, aliases, counts, applied_event_ids, order, the equivocations and their "
        "slots, that each applied projection passes the checks of section 6 it shows enough "
        "of, and that re-rendering reproduces its bytes (the rules: docs/protocol.md). "
        "Signatures, event ids, keys and events left out cannot be checked this way. Prints "
        "one line per failed rule and exits 1; exits 0 when it conforms.",
    )
    p.add_argument("state", metavar="STATE", help="state document file, or - for stdin")
    p.add_argument("--max-bytes", type=at_least(1), default=STATE_FILE_BYTES,
                   metavar="BYTES", help="the longest document read, its trailing LF aside "
                   "(default 256 MiB; longer: exit 2, usage.state_too_large)")  # fmt: skip
    p.set_defaults(func=cmd_verify_state)

    p = sub.add_parser(
        "keygen",
        help="make an Ed25519 key file and print its keyring entry",
        description="Write a new Ed25519 private key file (mode 0600) and print the keyring "
        "entry for it (one JSON line) on stdout.",
    )
    p.add_argument("--key-id", required=True, metavar="ID",
                   help="the key's key_id: unique in the keyring, e.g. registry-2026-07")
    p.add_argument("--signer-id", required=True, metavar="ID",
                   help="who signs with it, e.g. the registry's domain")
    p.add_argument("--signer-type", required=True, choices=sorted(SIGNER_TYPES),
                   help="what the signer is (spec section 3): which event types its key "
                   "may sign")  # fmt: skip
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
    p.add_argument("--key", required=True, metavar="KEYFILE",
                   help="the signer's private key file (keygen makes one)")  # fmt: skip
    p.add_argument("--type", required=True, metavar="TYPE", help=", ".join(EVENT_TYPES))
    p.add_argument("--pith", metavar="PITH", help="pith number (derived for record_created)")
    p.add_argument("--target", metavar="T", help="target (default: record, or graph for "
                   "graph_snapshot, where the type allows only one)")  # fmt: skip
    p.add_argument("--payload", required=True, metavar="FILE", help="payload JSON, or -")
    p.add_argument("--created-at", metavar="TS", help="YYYY-MM-DDTHH:MM:SSZ (default: now, UTC)")
    p.add_argument("--allow-invalid", action="store_true",
                   help="print the event even if checks 1-12 would reject it")  # fmt: skip
    p.set_defaults(func=cmd_sign)

