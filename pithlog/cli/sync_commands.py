"""The ``sync`` command: reconcile the store with another store folder, an export file or a
served log's ``POST /sync`` (docs/transparency.md, "Sync"; docs/network.md)."""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import tempfile
from collections.abc import Iterator
from typing import Any, BinaryIO

from pithlog.cli.edge import (
    StoreParser,
    at_least,
    json_line,
    keyring_option,
    net_module,
    open_store,
    open_store_reached,
    seconds,
    store_path,
)
from pithlog.cli.streams import Out, open_input, read_bytes, read_keyring
from pithlog.errors import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    DoorError,
    StoreError,
    SyncError,
    UsageError,
)
from pithlog.net.sources import ExportSource, store_responder
from pithlog.net.sync import MAX_NEEDED, MAX_ORDERED, MAX_SECONDS, Limits
from pithlog.net.sync_pull import pull
from pithlog.protocol.keys import Keyring
from pithlog.store import REFUSED, REJECTED, AppendResult, Store
from pithlog.store.place import check_place, is_store_folder
from pithlog.transparency.checkpoint import MAX_NOTE_BYTES, Checkpoint, verify_checkpoint


def _trusted_checkpoint(args: argparse.Namespace, keyring: Keyring) -> Checkpoint | None:
    """``--keep-invalid`` needs the source's signed checkpoint (``--checkpoint``), verified
    against the keyring: invalid copies are kept only when the source proves them leaves
    of its tree (docs/transparency.md, "Sync's limits")."""
    if args.checkpoint is None:
        if args.keep_invalid:
            raise UsageError("arguments", "--keep-invalid keeps invalid copies only from a "
                             "source whose signed log proves them: give --checkpoint FILE, "
                             "the source's checkpoint, which the keyring must trust")
        return None
    if not args.keep_invalid:
        raise UsageError("arguments", "--checkpoint is used with --keep-invalid only")
    note = read_bytes(args.checkpoint, MAX_NOTE_BYTES)
    return verify_checkpoint(note, keyring, args.origin).checkpoint


MAX_SPOOL = 1 << 30
"""The most bytes of standard input ``sync --from -`` copies to its temporary file unless
``--max-spool`` says (1 GiB: about 650,000 seed-shaped copies)."""

_SPOOL_PIECE = 1 << 20


def _unspooled(exc: OSError) -> UsageError:
    return UsageError("unwritable", "cannot spool standard input to a temporary file in "
                      f"{tempfile.gettempdir()}: {exc.strerror or exc}; free space there, or "
                      "set TMPDIR")  # fmt: skip


@contextlib.contextmanager
def _seekable(path: str, most: int) -> Iterator[BinaryIO]:
    """The export file, or standard input spooled to a temporary file (a sync reads its
    source twice: once to list it, then the copies it needs), no more than ``most`` bytes
    of it: a longer stream is ``sync.limit``, read no further. It was copied whole before
    any limit applied, so that a stranger's stream filled the disk of $TMPDIR. The file has
    no name (made unlinked, or unlinked as soon as made): no exit path leaves it behind; a
    file that cannot be made or written (a full disk) is ``usage.unwritable``."""
    with open_input(path) as stream:
        if stream.seekable():
            yield stream
            return
        try:
            spool = tempfile.TemporaryFile()  # noqa: SIM115 - closed below
        except OSError as exc:
            raise _unspooled(exc) from exc
        try:
            copied = 0
            try:
                while piece := stream.read(min(_SPOOL_PIECE, most + 1 - copied)):
                    copied += len(piece)
                    if copied > most:
                        raise SyncError("limit", f"standard input holds more than {most:,} "
                                        "bytes (--max-spool), the most spooled to a temporary "
                                        "file; none was stored: raise --max-spool, or give "
                                        "the export as a file, which is read in place")  # fmt: skip
                    spool.write(piece)
                spool.seek(0)  # what is still buffered is written here
            except OSError as exc:
                raise _unspooled(exc) from exc
            yield spool
        finally:
            # closing flushes what is buffered, which fails again on a full disk: the error
            # that stopped the spool is the one to report, and the file goes all the same
            with contextlib.suppress(OSError):
                spool.close()


def _source_store(source: str) -> Store:
    """The store folder ``--from`` names, opened read-only; a refusal to open it names it as
    the sync source: ``store.missing ... no store at DIR`` alone was taken for the --store
    synced into (which a sync creates)."""
    try:
        return Store.open(source, create=False, readonly=True, check=True)
    except StoreError as exc:
        hint = ("; --from names the store synced from, --store names the store synced into"
                if exc.detail == "missing" else "")  # fmt: skip
        raise StoreError(exc.detail, f"the sync source --from {source}: {exc.message}{hint}",
                         exc.where) from exc  # fmt: skip


def _http_transport(url: str, limits: Limits, max_seconds: float) -> Any:
    return net_module("sync_http", "sync --from a URL").HttpTransport(
        url, limits, max_seconds=max_seconds)


def cmd_sync(args: argparse.Namespace, out: Out) -> int:
    """Bring into the store the copies a store folder or an export file holds."""
    if args.batch_size < 1:
        raise UsageError("arguments", "--batch-size must be at least 1")
    if args.max_copies > MAX_ORDERED:
        # the copies to fetch are ordered by one message of at most 32 MiB: a larger
        # listing was refused by the source after the whole reconciliation
        raise UsageError("arguments", f"--max-copies can be at most {MAX_ORDERED}: the "
                         "copies one sync fetches are ordered in one message; a store "
                         "further behind imports an export or mirrors the log")  # fmt: skip
    if args.origin is not None and args.checkpoint is None:
        raise UsageError("arguments", "--origin is the origin --checkpoint must have: give "
                         "it with --checkpoint (and --keep-invalid) only")  # fmt: skip
    source = args.source
    if args.max_time is not None and not source.startswith(("http://", "https://")):
        raise UsageError("arguments", "--max-time bounds a sync from a URL only: a store "
                         "folder or an export file is read here, at the disk's pace")  # fmt: skip
    remote_log = source.startswith(("http://", "https://")) or os.path.isdir(source)
    if args.keep_invalid and not remote_log:
        # docs/transparency.md, "Invalid copies only from a signed log": a file's invalid
        # copies were fetched and rejected, every one, the options given for nothing
        raise UsageError("arguments", f"--keep-invalid keeps the invalid copies a source "
                         f"proves leaves of its signed log (--checkpoint), and an export "
                         f"file ({source}) has no tree: it proves none. Take a file's word "
                         "for its invalid copies with `import --keep-invalid`, or sync from "
                         "the store or served log that --checkpoint signs")  # fmt: skip
    if args.max_spool is not None and source != "-":
        raise UsageError("arguments", "--max-spool bounds the copy of standard input (--from "
                         "-) only: a file or a store folder is read in place")  # fmt: skip
    keyring = read_keyring(args.keyring)
    trusted = _trusted_checkpoint(args, keyring)
    # a --store where no store may be made is refused before the source is read, as
    # append and import refuse it: an export file was read, indexed and its refusals
    # reported first (standard input spooled whole), then the store refused
    check_place(store_path(args))
    limits = Limits(max_needed=args.max_copies)
    refused = 0
    stored: collections.Counter[str] = collections.Counter()

    def tally(results: list[AppendResult]) -> None:
        stored.update(result.status for result in results)

    store: Store | None = None
    try:
        with contextlib.ExitStack() as stack:
            if source.startswith(("http://", "https://")):
                remote: Any = stack.enter_context(_http_transport(
                    source, limits, args.max_time or MAX_SECONDS))
            elif os.path.isdir(source):
                other = stack.enter_context(_source_store(source))
                remote = store_responder(other, limits)
            else:
                def say_refused(number: int, problem: DoorError) -> None:
                    out.say(f"pithlog: {source}: line {number}: {problem.describe()}")

                # a file of more distinct copies than the store holds plus --max-copies
                # lists more missing copies than that: it is refused as soon as it is
                # read that far, not once indexed whole
                held = 0
                if is_store_folder(store_path(args)):
                    store = stack.enter_context(open_store(args, create=True))
                    held = store.tree_size()
                export = ExportSource.read(stack.enter_context(_seekable(
                    source, MAX_SPOOL if args.max_spool is None else args.max_spool)),
                                           on_refused=say_refused,
                                           most=held + limits.max_needed)  # fmt: skip
                refused = export.refused
                if not len(export) and store is None:
                    out.say(f"sync: {source} holds no copy that passes the door "
                            f"({refused} lines refused): no store created")  # fmt: skip
                    return EXIT_BAD_INPUT if refused else EXIT_OK
                remote = export.responder(limits)
            if store is None and source.startswith(("http://", "https://")):
                # a URL that does not answer leaves no empty store behind
                store = stack.enter_context(open_store_reached(args, remote.reach))
            elif store is None:
                store = stack.enter_context(open_store(args, create=True))
            report = pull(store, remote, keyring, trusted, batch=args.batch_size,
                          limits=limits, on_results=tally)  # fmt: skip
    except (KeyboardInterrupt, SyncError) as exc:
        if isinstance(exc, SyncError) and exc.code != "sync.timeout":
            raise
        shown = ", ".join(f"{n} {status}" for status, n in sorted(stored.items()))
        stopped = "interrupted" if isinstance(exc, KeyboardInterrupt) else "out of time"
        out.say(f"sync: {stopped} after {sum(stored.values())} copies were committed "
                f"({shown or 'none'}); they stay stored: run the same sync again for the "
                "rest")  # fmt: skip
        raise
    doc = {
        "local_copies": report.local_items,
        "remote_copies": report.remote_items,
        "needed": report.needed,
        "rounds": report.rounds,
        "messages": report.messages,
        "bytes": {"reconcile_sent": report.reconcile_sent,
                  "reconcile_received": report.reconcile_received,
                  "fetch_sent": report.fetch_sent, "fetch_received": report.fetch_received,
                  "total": report.bytes_exchanged},
        "statuses": dict(sorted(report.statuses.items())),
        "proven": report.proven,
        "refused_lines": refused,
    }  # fmt: skip
    out.write(json_line(doc))
    shown = ", ".join(f"{n} {status}" for status, n in sorted(report.statuses.items()))
    out.say(f"sync: {report.needed} copies needed of {report.remote_items} "
            f"({shown or 'nothing to do'}); {report.rounds} rounds, "
            f"{report.bytes_exchanged} bytes exchanged")  # fmt: skip
    bad = report.statuses.get(REJECTED, 0) + report.statuses.get(REFUSED, 0) + refused
    if report.statuses.get(REJECTED, 0):
        if not remote_log:
            why = ("an export file proves none of them: `import --keep-invalid` takes its "
                   "word for them")  # fmt: skip
        elif trusted is not None:
            why = (f"the source did not prove them leaves of the tree of --checkpoint (size "
                   f"{trusted.size}), so they are not proven: a copy logged after that "
                   "checkpoint, or not in its log; a later checkpoint may prove them")  # fmt: skip
        else:
            why = ("they are kept only with --keep-invalid --checkpoint, when the source "
                   "proves them leaves of its signed log")  # fmt: skip
        out.say(f"sync: rejected copies fail checks 1-12 here; {why}")
    return EXIT_BAD_INPUT if bad else EXIT_OK


def add_commands(sub: Any, store_parser: StoreParser) -> None:
    """The ``sync`` subcommand's parser."""
    p = store_parser(
        "sync",
        help="bring in the copies another store, an export file or a served log holds",
        description="Reconcile the store with SOURCE (a store folder, opened read-only, a "
        "JSON Lines export file, or the URL of a served log, whose POST /sync answers) by "
        "comparing fingerprints of ranges of copies, fetch the "
        "copies the store lacks (preferred and evidence) and append them in transactions of "
        "--batch-size, in the source's order. Every fetched copy must hash to what was asked; "
        "the source is held to the limits of docs/transparency.md. Prints one JSON line: "
        "copies on each side, needed, rounds, bytes exchanged, append statuses. Exit 2 when "
        "a copy was rejected or a line refused.",
    )
    p.add_argument("--from", dest="source", required=True, metavar="SOURCE",
                   help="the store folder, export file (- for stdin) or served log's URL "
                   "to bring copies from")  # fmt: skip
    keyring_option(p)
    p.add_argument("--keep-invalid", action="store_true",
                   help="store copies that fail checks 1-12 when the source proves them "
                   "leaves of the tree of --checkpoint: a store folder or a URL, not an "
                   "export file, which proves nothing (import --keep-invalid takes its "
                   "word)")  # fmt: skip
    p.add_argument("--checkpoint", metavar="FILE",
                   help="the source's signed checkpoint (needed by --keep-invalid); the "
                   "keyring must trust it")  # fmt: skip
    p.add_argument("--origin", metavar="NAME", help="require this origin of --checkpoint")
    p.add_argument("--batch-size", type=int, default=1000, metavar="N",
                   help="copies per fetch and per transaction (default 1000)")  # fmt: skip
    p.add_argument("--max-copies", type=at_least(0), default=MAX_NEEDED, metavar="N",
                   help=f"stop when the source lists more than N copies the store lacks "
                   f"(default {MAX_NEEDED}, at most {MAX_ORDERED})")  # fmt: skip
    p.add_argument("--max-spool", type=at_least(1), metavar="BYTES",
                   help="with --from - (a pipe): refuse standard input longer than BYTES "
                   f"(sync.limit, nothing stored), copied no further to its temporary file "
                   f"(default {MAX_SPOOL:,})")  # fmt: skip
    p.add_argument("--max-time", type=seconds, metavar="SECONDS",
                   help=f"with --from a URL: stop when the sync has taken SECONDS in all "
                   f"(default {MAX_SECONDS:,.0f}, at most 86,400), keeping what it "
                   "committed")  # fmt: skip
    p.set_defaults(func=cmd_sync)
