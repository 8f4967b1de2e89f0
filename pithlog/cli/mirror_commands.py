"""``pithlog mirror``: pull a served log into the store, verifying it (docs/network.md)."""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pithlog.cli.edge import (
    Bar,
    StoreParser,
    evidence_folder,
    json_line,
    keyring_option,
    net_module,
    open_store_reached,
    progress_option,
    seconds_from,
    served_url,
    show_progress,
)
from pithlog.cli.streams import Out, read_keyring
from pithlog.errors import EXIT_OK, MirrorError, PithlogError, Terminated, UsageError, shown
from pithlog.protocol.keys import KeyEntry
from pithlog.protocol.text_forms import encode_b64
from pithlog.transparency.witness import may_witness

if TYPE_CHECKING:
    from pithlog.net.mirror import MirrorReport

LEAST_FOLLOW = 1.0
"""The shortest poll of ``--follow``: ``pithlog serve`` answers ``/checkpoint`` with
``max-age=2`` (docs/network.md, "Running a registry"), so a mirror behind any cache sees no newer
checkpoint by asking more often, and ``--follow 0.0001`` asked thousands of times a
second (each a checkpoint fetched and its signature verified)."""

follow_seconds = seconds_from(LEAST_FOLLOW)
"""The argparse type of ``--follow``: from :data:`LEAST_FOLLOW` to
:data:`~pithlog.cli.edge.MOST_SECONDS` seconds."""


def cmd_mirror(args: argparse.Namespace, out: Out) -> int:
    """Mirror the log served at URL into the store; with --follow, poll it."""
    mirror = net_module("mirror", "pithlog mirror")
    served_url(args.url)
    if args.batch_bundles < 1:
        raise UsageError("arguments", "--batch-bundles must be at least 1")
    keyring = read_keyring(args.keyring)
    evidence = evidence_folder(args.evidence_dir)
    witnesses: list[KeyEntry] = []
    for key_id in args.witness_key:
        entry = keyring.get(key_id)
        if entry is None or not may_witness(entry):
            raise UsageError("arguments", f"--witness-key {key_id}: not a witness key of the "
                             "keyring (a mirror or pith_registry key, not revoked)")  # fmt: skip
        # a key named twice, or under two key_ids, is one witness (one cosignature)
        if all(w.public_key != entry.public_key for w in witnesses):
            witnesses.append(entry)
    quorum = len(witnesses) if args.witness_quorum is None else args.witness_quorum
    if args.witness_quorum is not None and not 1 <= quorum <= len(witnesses):
        # a quorum of 0 would accept a checkpoint no --witness-key cosigned: the keys named
        # would be silently required of nobody
        raise UsageError("arguments", "--witness-quorum is between 1 and the number of "
                         "distinct witness keys given with --witness-key")  # fmt: skip
    # a store that does not exist yet is made for a checkpoint that verifies only
    with mirror.Origin(args.url) as origin, \
            open_store_reached(args, lambda: _reached(
                lambda: mirror.verified_checkpoint(origin, keyring, args.origin, witnesses,
                                                   quorum), args, out)) as store:  # fmt: skip
        # the first pass's bytes are the command's from its start: a store not made yet
        # was made for a checkpoint fetched before the pass (open_store_reached), which
        # the pass then fetched again; its line left the first one out
        counted_from: int | None = 0
        while True:
            bar = Bar(out, show_progress(args, out), "mirror", unit="leaf")
            out.bar = bar
            report = None
            begun: list[MirrorReport] = []  # the pass's, once its checkpoint is accepted
            stopped: PithlogError | KeyboardInterrupt | None = None
            try:
                report = mirror.mirror_once(store, origin, keyring, args.origin, evidence,
                                            args.batch_bundles, progress=bar,
                                            witnesses=witnesses, quorum=quorum,
                                            begun=begun.append,
                                            counted_from=counted_from)  # fmt: skip
            except (PithlogError, KeyboardInterrupt) as exc:
                stopped = exc
            finally:
                bar.close()
                out.bar = None
                counted_from = None
            if stopped is not None:
                # the batches committed before it stopped are the store's: without their
                # line, summing `appended` over the lines fell short of the store's growth
                if begun:
                    _report(begun[0], out, stopped)
                if not isinstance(stopped, MirrorError):
                    raise stopped
                _try_again(stopped, args, out)
            if report is not None:  # below the bar's last line, which closing it printed
                _report(report, out)
            if args.follow is None:
                return EXIT_OK
            # stdout to a file or a pipe is buffered: the pass's line is put out now, not
            # forty passes later (or never, if the mirror is killed while it sleeps)
            out.flush()
            # Every command runs with the cyclic collector paused (pithlog.cli), and the
            # HTTP client leaves reference cycles on every request: a mirror that polls
            # for days grew by about 7 KB a poll. Between passes little is alive, so a
            # collection is quick, and the pass itself keeps the collector out of the door.
            gc.collect()
            time.sleep(args.follow)


def _reached(verified: Callable[[], object], args: argparse.Namespace, out: Out) -> object:
    """The origin's checkpoint, fetched and verified (``verified()``) before a store that
    does not exist yet is made: with ``--follow``, an origin not reachable yet is polled
    until it answers, as it is once the store exists (a mirror started before its origin
    stopped at once); a checkpoint that does not verify stops the mirror, and no store is
    made."""
    while True:
        try:
            return verified()
        except MirrorError as exc:
            _try_again(exc, args, out)
        time.sleep(args.follow)


def _try_again(exc: MirrorError, args: argparse.Namespace, out: Out) -> None:
    """Say that a poll is tried again, or raise ``exc``: with ``--follow``, a poll that
    cannot reach the origin is tried again; anything that does not verify stops the
    mirror."""
    if args.follow is None or exc.code != "mirror.fetch":
        raise exc
    out.say(f"mirror: {exc.describe()}; trying again in {args.follow:g} s")


def _report(report: Any, out: Out,
            stopped: PithlogError | KeyboardInterrupt | None = None) -> None:  # fmt: skip
    """The line of a pass, and its summary on stderr; of a pass ``stopped`` after its
    checkpoint was accepted, with the code that stopped it in ``error`` and the leaves it
    committed (docs/network.md, "Running a mirror")."""
    line = {
        "origin": report.origin, "size": report.size, "root": encode_b64(report.root),
        "held_before": report.held_before, "appended": report.appended,
        "accepted": report.accepted, "fetched_bytes": report.fetched_bytes,
        "statuses": dict(sorted(report.statuses.items())),
    }  # fmt: skip
    if stopped is not None:
        line["error"] = (stopped.code if isinstance(stopped, PithlogError)
                         else "terminated" if isinstance(stopped, Terminated)
                         else "interrupted")  # fmt: skip
    out.write(json_line(line))
    if stopped is not None:
        # the mirror may be on its way out: the line is put out before the error's
        out.flush()
        out.say(f"mirror: {shown(report.origin)} at size {report.size}: the pass stopped "
                f"after {report.appended} leaves appended ({report.held_before} held "
                "before); they are stored, and the next pass continues from the last batch "
                "committed")  # fmt: skip
        return
    if report.older_than is not None:
        # "at size 100, root verified" read as the mirror's size, which is the accepted one
        out.say(f"mirror: {shown(report.origin)} served size {report.size}, older than the "
                f"{report.older_than} accepted (a stale cache, or a log rolled back): a prefix "
                "of the accepted tree, nothing to bring")  # fmt: skip
        return
    out.say(f"mirror: {shown(report.origin)} at size {report.size}: {report.appended} leaves "
            f"appended ({report.held_before} held before), root verified")  # fmt: skip


def add_commands(sub: Any, store_parser: StoreParser) -> None:
    """The subcommand parsers of this group."""
    p = store_parser(
        "mirror",
        help="pull a served log into the store, verifying every tile, entry and copy",
        description="Pull the log served at URL (pithlog serve, C2SP tlog-tiles) into the "
        "store: verify the checkpoint's signature against KEYRING, its consistency with the "
        "checkpoint the store last accepted from that origin, every tile against the root, "
        "every entry bundle against its tile and every copy against its entry; only then "
        "append, in the origin's order, invalid copies kept as the origin keeps them, so "
        "that the store's tree and root are the origin's. Prints one JSON line per pass. A "
        "split view (a checkpoint not consistent with the accepted one) stops with exit 1, "
        "stores nothing and writes the evidence to a file named in the error. Resumable: a "
        "run stopped anywhere continues where the last committed batch ended. See "
        "docs/network.md.",
    )
    p.add_argument("url", metavar="URL", help="the served log, e.g. https://registry.example")
    keyring_option(p)
    p.add_argument("--origin", metavar="NAME", help="require this origin of the checkpoint")
    p.add_argument("--follow", type=follow_seconds, metavar="SECONDS",
                   help="poll the origin every SECONDS (from 1 to 86,400: its checkpoint "
                   "is served for 2 s) until interrupted")  # fmt: skip
    p.add_argument("--evidence-dir", default=".", metavar="DIR",
                   help="where a split view's evidence file is written (default: .)")
    p.add_argument("--batch-bundles", type=int, default=4, metavar="N",
                   help="bundles of 256 leaves per append transaction (default 4; fewer "
                   "once their copies reach 64 MiB)")  # fmt: skip
    p.add_argument("--witness-key", action="append", default=[], metavar="KEY_ID",
                   help="require cosignatures (C2SP tlog-cosignature) by this keyring key on "
                   "the served checkpoint before anything is believed; repeatable "
                   "(docs/witness.md)")  # fmt: skip
    p.add_argument("--witness-quorum", type=int, metavar="N",
                   help="how many of the --witness-key must have cosigned (default: all)")
    progress_option(p, "the leaves mirrored")
    p.set_defaults(func=cmd_mirror)
