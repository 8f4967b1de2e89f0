"""The commands on a store other than appending (:mod:`pithlog.cli.append_commands`):
``replay``, ``rekey``, ``state``, ``pending``, ``export``, ``stats``."""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from pithlog.cli.edge import (
    Bar,
    RekeyBars,
    StoreParser,
    keyring_option,
    open_store,
    progress_option,
    remove_leftovers,
    show_progress,
    store_path,
)
from pithlog.cli.streams import Out, read_keyring
from pithlog.errors import (
    EXIT_OK,
    EXIT_VERIFY_FAILED,
    StoreError,
    Terminated,
    UsageError,
    register,
)
from pithlog.parallel.cores import MOST_CORES
from pithlog.protocol.canonical import jcs
from pithlog.protocol.keys import Keyring
from pithlog.protocol.records import is_pith_number
from pithlog.store import PendingPith, Store
from pithlog.store.rekey import (
    INLINE_MAX_COPIES,
    INLINE_MAX_EVENTS,
    PIECE_COPIES,
    PIECE_EVENTS,
)
from pithlog.store.replay_processes import (
    COPIES_PER_WORKER,
    POOL_MIN_COPIES,
    EarlyWorkers,
    early_workers,
)
from pithlog.store.replay_report import ReplayReport

register({"store.past_end": "export --after N: N must be at most the log's last seq (see "
          "`pithlog stats`, next_seq - 1); a larger cursor belongs to another store or a "
          "rewound log"})  # fmt: skip


def cmd_replay(args: argparse.Namespace, out: Out) -> int:
    """Replay the whole store and report every disagreement."""
    if args.jobs is not None and args.rebuild and not args.verify:
        # --rebuild alone replays nothing afterwards, and the rebuild is one transaction
        raise UsageError("arguments", "--jobs sizes the replay, and --rebuild without "
                         "--verify does not replay: add --verify to check the rebuilt "
                         "store in N processes, or leave --jobs out")  # fmt: skip
    keyring = read_keyring(args.keyring)
    if args.jobs is not None and not 1 <= args.jobs <= MOST_CORES:
        # each job is a process: a mistyped count must not start thousands
        raise UsageError("arguments", f"--jobs must be from 1 to {MOST_CORES}")
    with contextlib.ExitStack() as stack:
        # --verify walks the data file at open: the workers start meanwhile, and take
        # parts of the walk
        early = (early_workers(stack, store_path(args), args.jobs)
                 if args.verify and not args.rebuild else None)  # fmt: skip
        report = _replay(args, out, keyring, early)
    if report is None:
        return EXIT_OK
    if not report.same_keyring:
        stored, this = report.stored_keyring_digest or "", keyring.digest
        # 16 hex characters name a keyring; a damaged digest may share them with this one
        shown = 16 if stored[:16] != this[:16] else max(len(stored), len(this))
        out.say(f"replay: the cached states were reduced under keyring "
                f"{stored[:shown]}, not this one ({this[:shown]}): state lines name the "
                "piths whose state would change")  # fmt: skip
    if report.rekey_target is not None:
        target, stored = report.rekey_target, report.stored_keyring_digest or ""
        out.say(f"replay: a change to keyring {target[:16]} is under way (a rekey stopped "
                f"midway, or running): the piths it re-reduced answer under it, the others "
                f"under {stored[:16]}, so a replay under either reports the other's as "
                f"differing; finish it with `pithlog --store {store_path(args)} rekey "
                "--keyring KEYRING` (that keyring), then replay")  # fmt: skip
    for note in report.notes:
        out.say(f"replay: note: {note.subject} stays pending under this keyring; "
                f"{note.detail}")  # fmt: skip
    for discrepancy in report.discrepancies:
        out.write(discrepancy.line().encode("utf-8") + b"\n")
    checked = "signatures verified" if args.verify else "cached verdicts"
    out.say(f"replay: {report.piths} piths, {report.events} events, {report.copies} copies "
            f"({checked}): {len(report.discrepancies)} discrepancies")  # fmt: skip
    return EXIT_OK if report.ok else EXIT_VERIFY_FAILED


def _replay(
    args: argparse.Namespace, out: Out, keyring: Keyring, early: EarlyWorkers | None
) -> ReplayReport | None:
    """``replay``'s work on the open store: the report, or ``None`` after a ``--rebuild``
    alone."""
    walkers = early.walkers() if early is not None else None  # the walk in parts
    with open_store(args, readonly=not args.rebuild, check=args.verify,
                    walkers=walkers) as store:  # fmt: skip
        if args.rebuild:
            bar = Bar(out, show_progress(args, out), "rebuild")
            try:
                # --verify: every copy checked again, not its cached verdict (the
                # repair for a damaged verdicts table), then the replay below
                counts = store.rebuild(keyring, progress=bar, verify=args.verify)
            finally:
                bar.close()
            judged = "signatures verified" if args.verify else "cached verdicts"
            out.say(f"replay --rebuild: {counts['copies']} copies judged ({judged}), "
                    f"{counts['preferred_changed']} preferred copies changed, "
                    f"{counts['piths']} piths re-reduced under keyring "
                    f"{keyring.digest[:16]}")  # fmt: skip
            if not args.verify:
                return None
        bar = Bar(out, show_progress(args, out), "replay")
        try:
            return store.replay(keyring, verify=args.verify, jobs=args.jobs, progress=bar,
                                early=early)  # fmt: skip
        finally:
            bar.close()



def cmd_rekey(args: argparse.Namespace, out: Out) -> int:
    """Bring the store under another keyring by what the change touches."""
    keyring = read_keyring(args.keyring)
    with open_store(args) as store:
        planned = store.rekey_plan(keyring)
        if planned is None:
            out.say(f"rekey: the store is under keyring {keyring.digest[:16]} already")
            return EXIT_OK
        resumed = " (resuming a change to this keyring)" if planned.resumed else ""
        out.say(f"rekey: {planned.keys} key(s) changed, {planned.copies} stored copies to "
                f"judge{resumed}")  # fmt: skip
        stages = RekeyBars(out, show_progress(args, out))
        try:
            counts = store.rekey(keyring, progress=stages)
        finally:
            stages.close()
    out.say(f"rekey: {counts['copies']} copies judged, {counts['piths']} piths re-reduced "
            f"in {counts['pieces']} transaction(s); the store is under keyring "
            f"{keyring.digest[:16]}")  # fmt: skip
    return EXIT_OK


def cmd_state(args: argparse.Namespace, out: Out) -> int:
    """Print the cached state document of one pith."""
    if (args.pith is None) == (args.alias is None):
        raise UsageError("arguments", "give PITH or --alias ALIAS (one of them)")
    if args.pith is not None and not is_pith_number(args.pith):
        raise UsageError("pith_number", f"{args.pith!r} is not a pith number; for an "
                         "alias (arxiv:ID, doi:DOI) use --alias")  # fmt: skip
    with open_store(args, readonly=True) as store:
        if args.alias is not None:
            args.pith = store.pith_for_alias(args.alias)
            if args.pith is None:
                raise StoreError("no_state", f"no pith with a state has the alias "
                                 f"{args.alias}")  # fmt: skip
        state = store.lookup(args.pith)
        if state is None:
            raise StoreError("no_state", f"the store holds no event of {args.pith}")
        if isinstance(state, PendingPith):
            raise StoreError("no_state", f"{args.pith} is pending: {state.event_count} "
                             "events, no valid record_created yet")  # fmt: skip
    out.write(state + b"\n")
    return EXIT_OK


def cmd_pending(args: argparse.Namespace, out: Out) -> int:
    """List the piths that have events but no state yet."""
    count = 0
    with open_store(args, readonly=True) as store:
        # written as the piths are walked, a thousand per read: none of them held
        for entry in store.each_pith():
            if entry["status"] == "pending":
                out.write(jcs(entry) + b"\n")
                count += 1
    out.say(f"pending: {count} piths")
    return EXIT_OK


def cmd_export(args: argparse.Namespace, out: Out) -> int:
    """Print every stored envelope, in append order, as JSON Lines; or with ``--out``, write
    them to shard files."""
    if args.after < 0:
        raise UsageError("arguments", "--after must be 0 or more")
    if args.out is not None:
        return _export_shards(args, out)
    if args.shard_size is not None:
        raise UsageError("arguments", "--shard-size needs --out DIR (the folder of the shards)")
    count = written = 0  # lines read from the store; lines flushed to stdout whole
    last = through = args.after  # the seq of each
    piece = bytearray()
    try:
        with open_store(args, readonly=True) as store:
            _within(store, args.after)
            for seq, data in store.export(after=args.after):
                if args.with_seq:
                    piece += b'{"seq":%d,"event":%s}\n' % (seq, data)
                else:
                    piece += data + b"\n"
                count += 1
                last = seq
                if len(piece) >= EXPORT_PIECE:
                    out.write(bytes(piece))
                    out.flush()
                    piece.clear()
                    written, through = count, seq
        out.write(bytes(piece))
        out.flush()  # before the summary says the lines are written
        written, through = count, last
    except UsageError as exc:
        if exc.code != "usage.output" or not written:
            raise
        raise UsageError("output", f"{exc.message}; export stopped: "
                         f"{_resume(written, through)}") from exc  # fmt: skip
    except (KeyboardInterrupt, Terminated):
        if written:
            out.say(f"export: interrupted: {_resume(written, through)}")
        raise
    out.say(f"export: {count} envelopes, through seq {last} (resume with --after {last})")
    return EXIT_OK


EXPORT_PIECE = 1 << 20
"""Bytes of lines ``export`` writes to standard output and flushes at once: what a stop
(a full disk, Ctrl-C) names as written is what was flushed whole."""


def _resume(written: int, through: int) -> str:
    """What a stopped export says: the lines written whole and how to export the rest
    (docs/cli.md, "export"). Lines after them may be written too, the last cut short."""
    return (f"the first {written} lines are written whole, through seq {through}: export "
            f"the rest with --after {through}")  # fmt: skip


def _within(store: Store, after: int) -> None:
    """``--after N`` names a seq of the log, or its start (0)."""
    end = store.tree_size()  # the last seq: sequence numbers run 1..size
    if after > end:
        raise StoreError("past_end", f"--after {after} is past the end of the log, which "
                         f"ends at seq {end}: check the cursor (a cursor of another store, "
                         "or a log rewound since)")  # fmt: skip


DEFAULT_SHARD = 1_000_000
"""Envelopes per shard of ``export --out`` unless ``--shard-size`` says (about 1.5 GB)."""


class _Shard:
    """One shard being written: a hidden temporary file in the folder, renamed to
    ``export-<first seq>.jsonl`` once whole and on disk, so that a reader of the folder (a
    Dask audit, an upload to object storage) never sees half a shard."""

    def __init__(self, folder: Path, first: int) -> None:
        self.path = folder / f"export-{first:012d}.jsonl"
        if self.path.exists():
            raise UsageError("exists", f"{self.path} exists: export into an empty folder, or "
                             "resume with --after the last seq exported there")  # fmt: skip
        # a shard's temporary file that an export killed outright left (SIGKILL, a crash):
        # the rerun that resumes here has another PID and would never meet it
        remove_leftovers(self.path)
        self.tmp = folder / f".{self.path.name}.tmp-{os.getpid()}"
        self.handle = open(self.tmp, "wb")  # noqa: SIM115 - closed in close()
        self.digest = hashlib.sha256()
        self.first = first
        self.last = first
        self.count = 0

    def write(self, seq: int, data: bytes) -> None:
        line = data + b"\n"
        self.handle.write(line)
        self.digest.update(line)
        self.last = seq
        self.count += 1

    def close(self) -> bytes:
        """Make the shard durable under its name; its line for stdout."""
        self.handle.flush()
        os.fsync(self.handle.fileno())
        self.handle.close()
        os.replace(self.tmp, self.path)
        # the rename is an entry of the folder: until the folder is synced, a crash can take
        # the name back, and the shard's line (which --after resumes from) would name a shard
        # that is not there
        folder = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)
        return jcs({"file": self.path.name, "first_seq": self.first, "last_seq": self.last,
                    "envelopes": self.count, "sha256": self.digest.hexdigest()}) + b"\n"

    def abandon(self) -> None:
        # closing flushes what is buffered, which fails again on a full disk: the error
        # that stopped the export is the one to report, and the file goes all the same
        with contextlib.suppress(OSError):
            self.handle.close()
        with contextlib.suppress(OSError):
            self.tmp.unlink()


def _export_shards(args: argparse.Namespace, out: Out) -> int:
    """``export --out DIR``: the envelopes in shards of ``--shard-size``, in append order
    (the files' names sort in that order), one JSON line per shard written on stdout."""
    size = DEFAULT_SHARD if args.shard_size is None else args.shard_size
    if size < 1:
        raise UsageError("arguments", "--shard-size must be at least 1")
    if args.with_seq:
        raise UsageError("arguments", "--with-seq cannot be sharded: shards are what "
                         "import and reduce read")  # fmt: skip
    if args.out == "":  # `--out "$DIR"` with DIR unset: not the current folder, silently
        raise UsageError("arguments", "--out is empty: give the folder of the shards")
    folder = Path(args.out)
    # realpath, not Path.resolve: a link that loops (in --out or the store's path) made
    # resolve raise RuntimeError, a traceback; left as it is, open or mkdir says why
    inside = Path(os.path.realpath(store_path(args)))
    target = Path(os.path.realpath(folder))
    if target == inside or inside in target.parents:
        # shards among the store's own files: a backup that goes with the store it backs up
        raise UsageError("arguments", f"--out {folder} is inside the store {inside}: give "
                         "a folder of its own for the shards")  # fmt: skip
    if folder.exists() and not folder.is_dir():
        raise UsageError("unwritable", f"--out {folder} is a file, not a folder: give the "
                         "folder of the shards (made if need be)")  # fmt: skip
    count = shards = 0
    last = printed = args.after  # printed: the last seq of the last shard said on stdout
    shard: _Shard | None = None

    def said(line: bytes, through: int) -> None:
        """The shard's line, printed once it is on disk: a standard output that closed or
        failed stops the export there (later shards unwritten), saying how to resume."""
        try:
            out.write(line)
        except (BrokenPipeError, UsageError) as exc:
            how = "closed" if isinstance(exc, BrokenPipeError) else "failed"
            raise UsageError("output_closed", f"standard output {how}: export stopped after "
                             f"the shard through seq {through}, which is written; give "
                             f"export --after {through} --out {folder} to write the rest"
                             ) from None  # fmt: skip
        nonlocal printed
        printed = through

    try:
        with open_store(args, readonly=True) as store:
            _within(store, args.after)  # before the folder is made
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise UsageError("unwritable", f"cannot make the folder {folder}: "
                                 f"{exc.strerror or exc}; check the path and its "
                                 "permissions") from exc  # fmt: skip
            for seq, data in store.export(after=args.after):
                if shard is None:
                    shard = _Shard(folder, seq)
                shard.write(seq, data)
                count += 1
                last = seq
                if shard.count == size:
                    line, shard = shard.close(), None
                    shards += 1
                    said(line, seq)
        if shard is not None:
            line, shard = shard.close(), None
            shards += 1
            said(line, last)
    except OSError as exc:
        raise UsageError("unwritable", f"cannot write a shard in {folder}: "
                         f"{exc.strerror or exc}; check its permissions and free "
                         "space") from exc  # fmt: skip
    except (KeyboardInterrupt, Terminated):
        if printed > args.after:
            out.say(f"export: interrupted: the shards through seq {printed} are written; "
                    f"give export --after {printed} --out {folder} to write the rest")  # fmt: skip
        raise
    finally:
        if shard is not None:
            shard.abandon()
    out.say(f"export: {count} envelopes in {shards} shard(s) in {folder}, through seq {last} "
            f"(resume with --after {last})")  # fmt: skip
    return EXIT_OK


def cmd_stats(args: argparse.Namespace, out: Out) -> int:
    """Counts, sizes and map use of the store, as JSON."""
    with open_store(args, readonly=True) as store:
        stats = store.stats()
    out.write(json.dumps(stats, indent=2).encode("utf-8") + b"\n")
    return EXIT_OK


def add_commands(sub: Any, store_parser: StoreParser) -> None:
    """The subcommand parsers of this group."""

    p = store_parser(
        "replay",
        help="re-read the whole store and report every disagreement",
        description="Re-read every stored envelope through the door, recompute event ids "
        "and (with --verify) every signature, check that the indexes, the sequence and the "
        "stored copies agree, that each event holds the copy section 7 step 0 prefers, and "
        "re-reduce every pith against its cached state, byte for byte. One line per "
        "discrepancy on stdout; exit 0 only when everything agrees, else 1. Under a keyring "
        "other than the store's, the state lines name exactly the piths whose state would "
        "change. --rebuild re-judges and re-reduces the whole store under KEYRING in one "
        "go (an append applies a small keyring change itself, and `pithlog rekey` a large "
        "one by what it touches, resumably).",
    )
    keyring_option(p)
    p.add_argument("--verify", action="store_true",
                   help="verify every signature again (otherwise cached verdicts are used), "
                   "after walking every page of the data file to refuse a damaged one "
                   "(store.corrupted) before it is read; the workers, when started before "
                   "the store is opened, take parts of the walk")
    p.add_argument("--rebuild", action="store_true",
                   help="re-judge and re-reduce the store under KEYRING, then record it; "
                   "a copy's cached verdict is reused unless --verify is given too, which "
                   "checks every copy again and writes the verdicts anew before the replay")
    p.add_argument("--jobs", type=int, default=None, metavar="N",
                   help=f"replay the piths in N processes, 1 to {MOST_CORES} (same output; "
                   "default: when signatures are checked (--verify, or a keyring other than the "
                   f"store's) in a store of {POOL_MIN_COPIES:,} copies or more, one per core "
                   f"but at most one per {COPIES_PER_WORKER:,} copies, where the processes "
                   "pay for their start; else 1)")  # fmt: skip
    progress_option(p, "progress")
    p.set_defaults(func=cmd_replay)

    p = store_parser(
        "rekey",
        help="bring the store under another keyring by what the change touches",
        description="Judge again the stored copies signed by the keys that KEYRING adds, "
        "removes or changes (by key_id), re-pick their events' preferred copies and "
        f"re-reduce the piths they belong to, in transactions of {PIECE_COPIES:,} copies or "
        f"about {PIECE_EVENTS:,} events; nothing else is read. A change killed midway "
        "resumes when the same command is run again; the store's keyring digest changes "
        "with the last transaction. `append` does this itself for a change of at most "
        f"{INLINE_MAX_COPIES:,} copies whose piths hold at most {INLINE_MAX_EVENTS:,} "
        "events to re-reduce (it refuses a larger one: store.keyring_changed).",
    )
    keyring_option(p)
    progress_option(p, "progress")
    p.set_defaults(func=cmd_rekey)

    p = store_parser("state", help="print the cached state document of a pith",
                     description="Print the cached state document of PITH (what `pithlog "
                     "reduce` prints for it), or of the pith whose chosen record has the "
                     "alias given with --alias (the store's alias index: one read). Exit 2 "
                     "when the pith is unknown or pending, or the alias names none or "
                     "several.")
    p.add_argument("pith", metavar="PITH", nargs="?",
                   help="the pith number (pith:YYYY:...), or none with --alias")  # fmt: skip
    p.add_argument("--alias", metavar="ALIAS",
                   help="arxiv:ID, arxiv:IDvN, doi:DOI or pith:SHORT (8, 12 or 16 "
                   "characters) instead of PITH")
    p.set_defaults(func=cmd_state)

    p = store_parser("pending", help="list piths with events but no valid record_created",
                     description="One JSON line per pending pith: pith_number, event_count, "
                     "invalid_event_count, status.")
    p.set_defaults(func=cmd_pending)

    p = store_parser("export", help="print the stored envelopes in append order",
                     description="Print every stored envelope (preferred copies and "
                     "evidence), in append order, one per line: the format `import` reads. "
                     "--after N resumes after sequence number N (stderr says the last one).")
    p.add_argument("--after", type=int, default=0, metavar="N",
                   help="start after sequence number N (default 0: everything); N past "
                   "the log's end is an error")
    p.add_argument("--with-seq", action="store_true",
                   help='print {"seq": N, "event": ENVELOPE} lines instead (not importable)')
    p.add_argument("--out", metavar="DIR", default=None,
                   help="write shard files export-<first seq>.jsonl into DIR instead (each "
                   "renamed into place once whole), one JSON line per shard on stdout: file, "
                   "first_seq, last_seq, envelopes, sha256 (docs/distributed.md)")
    p.add_argument("--shard-size", type=int, default=None, metavar="N",
                   help=f"envelopes per shard with --out (default: {DEFAULT_SHARD:,})")
    p.set_defaults(func=cmd_export)

    p = store_parser("stats", help="counts, sizes and map use of the store, as JSON",
                     description="Print the store's counts (entries of every database, "
                     "piths with a state and pending), the digest of the keyring its states "
                     "were reduced under (compare `pithlog keyring digest KEYRING`), "
                     "next_seq, format, and the LMDB map's size and use, as one JSON "
                     "object.")
    p.set_defaults(func=cmd_stats)

