"""What the workers run for ``pithlog reduce --dask``: pure functions of their arguments,
each one task of the graph that :mod:`pithlog.distributed.graph` builds.

1. :func:`check_block`, where a range of a file is read: framing, the door and checks
   1-12 on every line, and step 0 among the copies of this range alone (``prefer`` is a
   total order, so keeping the preferred copy here first changes no winner). Its copies
   leave it packed, one :data:`Packed` item per shuffle bucket.
2. :func:`step0`, after the shuffle by ``event_id``: step 0 over every copy of each
   ``event_id`` in the log, whatever shard or pith it came from.
3. :func:`tag_ranges`, then the shuffle by pith range, then :func:`reduce_range`: steps
   1-5 for each pith of one range, in pith order; or :func:`compare_range`, the same
   compared with the published states of the range, only differences returned.

Every task takes the client's ``(pithlog version, merge version)`` and refuses to run
under another (:func:`require`): the protocol must be the one the client runs, on every
worker, including a worker that joins mid-job.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import gc
import hashlib
import pickle
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO, ParamSpec, TypeVar, cast

from pithlog import __version__
from pithlog.distributed.sources import Block, RangeStream
from pithlog.errors import DaskError, DoorError, UsageError
from pithlog.lines import iter_envelopes, iter_lines
from pithlog.parallel import Result, rendered
from pithlog.protocol.canonical import jcs, parse
from pithlog.protocol.checks import check_many
from pithlog.protocol.events import Envelope
from pithlog.protocol.keys import Keyring, load_keyring
from pithlog.protocol.records import is_pith_number
from pithlog.protocol.reduce import MERGE_VERSION, STREAM_BATCH, Kept, Pending, rank, reduce_kept
from pithlog.protocol.state import digest_document
from pithlog.protocol.state_verify import STATE_MAX_DEPTH

Versions = tuple[str, str]

Copy = tuple[str, str | None, str, bytes]
"""A distinct copy after checks 1-12: ``(event_id, reason or None, pith claimed, JCS)``."""

Winner = tuple[str, str | None, bytes]
"""The copy step 0 keeps of one ``event_id``: ``(pith_number, reason or None, JCS)``."""

Hashes = tuple[str, str | None, str, str | None]
"""A published state line's SHA-256, its JCS form's, its recomputed ``state_sha256`` and
the one it claims (:func:`_hashes`)."""

Published = tuple[str, tuple[int, int, int], Hashes, int]
"""A published state line, as its hashes: ``(pith_number, (file, range, line in the
range), hashes, lines of the pith after it in the range, counted only)``."""

Packed = tuple[int, str, bytes]
"""What the shuffles move: ``(bucket, kind, pickled list)``, the items of one partition
bound for one bucket in one pickle; ``kind`` is "c" (:data:`Copy`), "e" (:data:`Winner`)
or "p" (:data:`Published`). A Dask worker that sends a plain list of items to another
serializes it item by item (``distributed.protocol.serialize``: a header, a pickle and a
frame each), which cost a sixth of the workers' time here; packed, a bucket's share of a
partition is one pickle, made at C speed, and one object to hold."""


def versions() -> Versions:
    """This process's ``(pithlog version, merge version)``."""
    return (__version__, MERGE_VERSION)


def require(expected: Versions) -> None:
    """Refuse to run a task under another pithlog than the client's (docs/distributed.md)."""
    here = versions()
    if here != expected:
        raise DaskError(
            "version",
            f"a worker runs pithlog {here[0]} ({here[1]}) but the client runs pithlog "
            f"{expected[0]} ({expected[1]}); install the client's pithlog on every worker",
        )


_COLLECTOR = {"tasks": 0, "was_enabled": True}
_COLLECTOR_LOCK = threading.Lock()

P = ParamSpec("P")
R = TypeVar("R")


def collector_paused(task: Callable[P, R]) -> Callable[P, R]:
    """Run a task with Python's cyclic garbage collector paused, as the CLI runs a command
    (``pithlog.cli.program._collector_paused``: a task holds many acyclic decoded events, which the
    collector would traverse again and again). Counted, so that a worker running several
    tasks at once restarts it when the last of them ends."""

    @functools.wraps(task)
    def paused(*args: P.args, **kwargs: P.kwargs) -> R:
        with _COLLECTOR_LOCK:
            if _COLLECTOR["tasks"] == 0:
                _COLLECTOR["was_enabled"] = gc.isenabled()
                gc.disable()
            _COLLECTOR["tasks"] += 1
        try:
            return task(*args, **kwargs)
        finally:
            with _COLLECTOR_LOCK:
                _COLLECTOR["tasks"] -= 1
                if _COLLECTOR["tasks"] == 0 and _COLLECTOR["was_enabled"]:
                    gc.enable()

    return paused


@functools.lru_cache(maxsize=4)
def keyring_of(data: bytes) -> Keyring:
    """The keyring, loaded once per worker process (it came through its door on the client
    too, which refused it there if it was bad)."""
    return load_keyring(data)


@contextlib.contextmanager
def opened(block: Block) -> Iterator[Any]:
    """The file of ``block``, opened on this worker; a file the worker cannot open (a local
    path it does not see, a URL it has no credentials for) or read to the end of its range
    (object storage that fails mid-read, a file cut short since it was listed) is one error
    naming it."""
    try:
        handle = block.fs.open(block.path, "rb")
    except OSError as exc:
        raise UsageError("unreadable", f"a Dask worker cannot read {block.path}: "
                         f"{exc.strerror or exc}; every worker must reach the SOURCE files "
                         "(a shared file system, or object storage)") from exc  # fmt: skip
    with handle:
        try:
            yield handle
        except OSError as exc:
            raise UsageError("unreadable", f"a Dask worker failed reading {block.path}: "
                             f"{exc.strerror or exc}; run the job again") from exc  # fmt: skip


LISTED_REFUSALS = 1000
"""Refused lines a range names one by one; those after them are counted only. A refusal's
reason is about 60 bytes where its line may be 2 ("x" and an LF): a range of such lines
held all their reasons at about 100 times its size (14 GB for 128 MiB) on the worker, and
on the client until every range was read."""


@dataclass
class BlockReport:
    """What a range tells the client besides its copies: small, whatever the range's size."""

    source: int
    index: int
    lfs: int
    """Lines framed (LFs read): the client numbers lines across the ranges of a file."""
    read: int = 0
    """Lines that passed the door."""
    refused: list[tuple[int, str | None]] = field(default_factory=list)
    """``(line in the range, one-line reason)`` of each line refused at the door, or of a
    published state line that could not be read: the first :data:`LISTED_REFUSALS`. The
    reason is ``None`` for an event line longer than the limit: its refusal names the line
    (:func:`pithlog.lines.too_long`), which only the client numbers in its file."""
    unlisted: int = 0
    """Refused lines after those of :attr:`refused`, counted only."""
    unlisted_lines: tuple[int, int] = (0, 0)
    """The first and the last of them (lines in the range)."""

    def refuse(self, number: int, why: str | None) -> None:
        if len(self.refused) < LISTED_REFUSALS:
            self.refused.append((number, why))
            return
        self.unlisted += 1
        self.unlisted_lines = (self.unlisted_lines[0] or number, number)


def pack(items: list[Any], kind: str, bucket_of: Callable[[Any], int]) -> list[Packed]:
    """``items`` as one :data:`Packed` item per bucket, in bucket order."""
    by_bucket: dict[int, list[Any]] = {}
    for item in items:
        by_bucket.setdefault(bucket_of(item), []).append(item)
    return [(bucket, kind, pickle.dumps(held, protocol=pickle.HIGHEST_PROTOCOL))
            for bucket, held in sorted(by_bucket.items())]  # fmt: skip


def unpacked(groups: list[tuple[int, list[Packed]]]) -> Iterator[tuple[str, list[Any]]]:
    """``(kind, items)`` of each packed item of a shuffle's output partition."""
    for _, packed in groups:
        for _, kind, data in packed:
            yield kind, pickle.loads(data)


@collector_paused
def check_block(
    block: Block, keyring_data: bytes, expected: Versions, buckets: int
) -> tuple[list[Packed], BlockReport]:
    """Framing, the door and checks 1-12 for the lines of ``block``; step 0 among them.
    The copies kept come out packed by :func:`event_bucket` (of ``buckets``).

    Memory: the preferred copies' JCS bytes (at most the range's size; twice that while
    they are packed) and one batch of :data:`~pithlog.protocol.reduce.STREAM_BATCH`
    decoded envelopes at a time.
    """
    require(expected)
    keyring = keyring_of(keyring_data)
    kept: dict[str, Copy] = {}
    report = BlockReport(block.source, block.index, 0)
    batch: list[Envelope] = []
    read = 0

    def settle() -> None:
        # One verifying thread: a Dask worker runs one task per thread it has.
        for envelope, reason in zip(batch, check_many(batch, keyring), strict=True):
            copy = (envelope.event_id, reason, envelope.pith_number, envelope.encoded)
            current = kept.get(envelope.event_id)
            if current is None or rank(reason, envelope.encoded) < rank(current[1], current[3]):
                kept[envelope.event_id] = copy
        batch.clear()

    with opened(block) as handle:
        stream = RangeStream(handle, block.start, block.end)
        for number, item in iter_envelopes(cast(BinaryIO, stream)):
            if isinstance(item, DoorError):
                # too_long(number) says "at line <number>", a line of this range alone
                long = item.detail == "line_too_long"
                report.refuse(number, None if long else item.describe())
                continue
            read += 1
            held = kept.get(item.event_id)
            if held is not None and held[3] == item.encoded:
                continue  # the same copy again has nothing to choose
            batch.append(item)
            if len(batch) >= STREAM_BATCH:
                settle()
        settle()
    report.lfs, report.read = stream.lfs, read
    return pack(list(kept.values()), "c", functools.partial(event_bucket, buckets)), report


def event_bucket(buckets: int, copy: Copy) -> int:
    """The shuffle bucket of a copy's ``event_id`` ("sha256:" + hex: uniform already)."""
    return int(copy[0][7:23], 16) % buckets


def first(item: Packed) -> int:
    """The bucket of a packed item: the shuffles' grouper."""
    return item[0]


def identity(value: int) -> int:
    """The shuffle's hash of a bucket number: bucket ``b`` goes to output partition ``b``
    (Dask's task shuffle sends key ``h`` to partition ``h`` modulo their count)."""
    return value


@collector_paused
def step0(groups: list[tuple[int, list[Packed]]]) -> list[Winner]:
    """Section 7 step 0 over every copy of each ``event_id`` of a bucket (a partition holds
    whole buckets: every copy of an ``event_id`` is here)."""
    best: dict[str, Copy] = {}
    for _, copies in unpacked(groups):
        for copy in copies:
            current = best.get(copy[0])
            if current is None or rank(copy[1], copy[3]) < rank(current[1], current[3]):
                best[copy[0]] = copy
    return [(pith, reason, data) for _, reason, pith, data in best.values()]


def sample_piths(items: list[Winner] | list[Published], size: int) -> list[str]:
    """About ``size`` piths of a partition, evenly spaced in pith order, one per event or
    published line (so that the ranges cut by :func:`boundaries` hold about as many each)."""
    piths = sorted(item[0] for item in items)
    if len(piths) <= size:
        return piths
    return [piths[len(piths) * i // size] for i in range(size)]


def boundaries(samples: list[list[str]], ranges: int) -> list[str]:
    """``ranges - 1`` piths cutting the sampled piths into ``ranges`` ranges of about equal
    events: range ``i`` holds the piths ``p`` with ``bounds[i-1] <= p < bounds[i]``."""
    merged = sorted(p for sample in samples for p in sample)
    if not merged:
        return []
    return [merged[len(merged) * i // ranges] for i in range(1, ranges)]


def range_of(bounds: list[str], pith: str) -> int:
    return bisect.bisect_right(bounds, pith)


def tag_ranges(items: list[Winner] | list[Published], kind: str, bounds: list[str]) -> list[Packed]:
    """The winners (``kind`` "e") or published states ("p") packed by the range of their
    pith."""
    return pack(items, kind, lambda item: range_of(bounds, item[0]))


def _by_pith(
    groups: list[tuple[int, list[Packed]]],
) -> tuple[dict[str, Kept], dict[str, list[Published]]]:
    events: dict[str, Kept] = {}
    published: dict[str, list[Published]] = {}
    for kind, items in unpacked(groups):
        if kind == "e":
            for pith, reason, data in items:
                events.setdefault(pith, []).append((reason, data))
        else:
            for item in items:
                published.setdefault(item[0], []).append(item)
    return events, published


@collector_paused
def reduce_range(groups: list[tuple[int, list[Packed]]], expected: Versions) -> list[Result]:
    """Steps 1-5 for every pith of one range, in pith order (what ``pithlog reduce`` prints
    for them: :func:`pithlog.parallel.rendered`)."""
    require(expected)
    events, _ = _by_pith(groups)
    return [(pith, rendered(reduce_kept(pith, events.pop(pith)))) for pith in sorted(events)]


# --- --compare -----------------------------------------------------------------------


def _state(data: bytes) -> Any:
    """A state document's value, read with a state's limits (as ``verify-state`` reads it):
    it nests :data:`~pithlog.protocol.state_verify.STATE_MAX_DEPTH` deep, and its length is
    the pith's, not a line's of the log."""
    return parse(data, max_depth=STATE_MAX_DEPTH, max_bytes=None)


PUBLISHED_LINE_BYTES = 256 << 20
"""The longest published state line read: what bounds the memory of a line being framed.
Not the log's 8 MiB line limit: a state holds every projection of its pith, and ``reduce``
prints one of any length; a state past this is a pith beyond what one task of steps 1-5
holds (docs/distributed.md, "Memory per worker")."""

LISTED_PER_PITH = 2
"""Published lines of one pith that a range of PUBLISHED passes on: the first (compared)
and the first duplicate (listed); the others are counted only. The file comes from the
registry being checked: a million lines of one pith would otherwise all reach the one task
that compares that pith, and end the job with every worker it ran on killed."""


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _claimed(value: Any) -> str | None:
    """The ``state_sha256`` member of a state document's value, if it is a string."""
    claimed = value.get("state_sha256") if isinstance(value, dict) else None
    return claimed if isinstance(claimed, str) else None


def _canonical_sha256(value: Any) -> str | None:
    """SHA-256 of the JCS form of a state's value (``None`` if it has none): two states
    that parse to the same JSON value have the same (a registry may publish another
    serialization of a state: JCS, say, where ``reduce`` prints display form)."""
    try:
        return _sha256(jcs(value))
    except DoorError:
        return None


def _hashes(line: bytes, value: Any) -> Hashes:
    """What ``--compare`` needs of a published state line, in place of its bytes: the
    SHA-256 of the line and of its JCS form (to compare it with the state the log gives),
    and the two hashes it reports (docs/distributed.md): ``published_sha256``, its
    ``state_sha256`` recomputed from the document as published (spec section 8:
    ``digest(state without state_sha256)``), which equals ``expected_sha256`` exactly when
    the two documents agree in every other member; and ``claimed_sha256``, the
    ``state_sha256`` member it carries (``None`` when it has none, or not a string). The
    claim alone cannot show a difference: a document edited without its claim updated
    still claims the expected hash."""
    return (_sha256(line), _canonical_sha256(value), digest_document(value), _claimed(value))


@collector_paused
def read_published(block: Block, expected: Versions) -> tuple[list[Published], BlockReport]:
    """The published state lines of ``block``, each filed under its ``pith_number`` (read
    through the door with a state's limits, as ``verify-state`` reads one) as its hashes,
    not its bytes; of each pith, the first :data:`LISTED_PER_PITH` lines, the last of them
    counting the lines after it. A line that cannot be read is reported, not shuffled.

    Memory: a record of about 300 bytes per pith of the range, and one line being read."""
    require(expected)
    held: dict[str, list[Published]] = {}
    report = BlockReport(block.source, block.index, 0)
    with opened(block) as handle:
        stream = RangeStream(handle, block.start, block.end)
        for number, line in iter_lines(cast(BinaryIO, stream), PUBLISHED_LINE_BYTES):
            if line is None:
                report.refuse(number, f"the line is longer than {PUBLISHED_LINE_BYTES >> 20} MiB")
                continue
            try:
                value = _state(line)
            except DoorError as exc:
                report.refuse(number, exc.describe())
                continue
            pith = value.get("pith_number") if isinstance(value, dict) else None
            if not isinstance(pith, str) or not is_pith_number(pith):
                report.refuse(number, "not a state document: no pith_number")
                continue
            report.read += 1
            records = held.setdefault(pith, [])
            if len(records) < LISTED_PER_PITH:
                records.append((pith, (block.source, block.index, number), _hashes(line, value), 0))
            else:  # counted on the last one kept, not hashed
                last = records[-1]
                records[-1] = (*last[:3], last[3] + 1)
    report.lfs = stream.lfs
    return [record for records in held.values() for record in records], report


Difference = dict[str, Any]
"""One line of the ``--compare`` report, before the client numbers its published line."""


def _same(state: bytes, value: Any, hashes: Hashes) -> bool:
    """Equal bytes, or equal JSON values (a registry may publish another serialization of
    the same document: JCS, say, where ``reduce`` prints display form)."""
    if _sha256(state) == hashes[0]:
        return True
    canonical = _canonical_sha256(value)
    return canonical is not None and canonical == hashes[1]


@collector_paused
def compare_range(
    groups: list[tuple[int, list[Packed]]], expected: Versions
) -> tuple[list[Difference], dict[str, int]]:
    """Steps 1-5 for every pith of one range, compared with the states published for it:
    the differences only, in pith order, and counts. Of a pith's published lines the first
    is compared and the second listed (``duplicate``, or ``unexpected`` for a pith the log
    gives no state), with ``count``, the lines it stands for, when the others were
    counted only (:data:`LISTED_PER_PITH`)."""
    require(expected)
    events, published = _by_pith(groups)
    counts = {"states": 0, "pending": 0, "published": 0, "equal": 0}
    out: list[Difference] = []
    for pith in sorted(events.keys() | published.keys()):
        kept = events.pop(pith, None)
        result: bytes | Pending | None = None
        if kept is not None:
            result = rendered(reduce_kept(pith, kept))
        lines = sorted(published.pop(pith, []), key=lambda p: p[1])
        total = len(lines) + sum(p[3] for p in lines)
        counts["published"] += total
        state = result if isinstance(result, bytes) else None
        counts["states" if state is not None else "pending"] += kept is not None
        value = _state(state) if state is not None else None
        wanted = _claimed(value)
        if not lines:
            if state is not None:
                out.append({"pith_number": pith, "status": "missing",
                            "expected_sha256": wanted})  # fmt: skip
            continue
        for n, (_, where, hashes, _) in enumerate(lines[:LISTED_PER_PITH]):
            if state is None:
                status = "unexpected"
            elif n > 0:
                status = "duplicate"
            elif _same(state, value, hashes):
                counts["equal"] += 1
                continue
            else:
                status = "differs"
            more = {"count": total - 1} if n > 0 and total > LISTED_PER_PITH else {}
            out.append({"pith_number": pith, "status": status, "expected_sha256": wanted,
                        "published_sha256": hashes[2], "claimed_sha256": hashes[3],
                        "where": where, **more})  # fmt: skip
    return out, counts
