"""The Dask graph of ``pithlog reduce --dask``, and the cluster it runs on.

The graph follows the partition the protocol allows (docs/distributed.md):

::

    ranges of the SOURCE files ─▶ check_block ─▶ shuffle by event_id ─▶ step0 ─┐
    (read by the workers)          door, checks    (Dask's task shuffle)         │ sample piths
                                   1-12, local                                  ▼ boundaries
                                   step 0                                       │
    published state lines ─▶ read_published ─────────────▶ tag_ranges ◀─────────┘
                                                               │ shuffle by pith range
                                                               ▼
                                                 reduce_range / compare_range ─▶ client,
                                                 steps 1-5, one range of piths    range by range

Step 0 needs every copy of an ``event_id`` together, wherever it was read and whatever
pith it claims; steps 1-5 need every winner of a pith together. So there are two shuffles,
both Dask's own task shuffle (``dask.bag``), each keyed by a bucket number that is its
output partition: the second one's buckets are ranges of piths cut at quantiles sampled
from the winners, so the client fetches the outputs in partition order and prints the
states in pith order, one range at a time, with no sort and nothing else held.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Iterable, Iterator
from concurrent.futures import CancelledError
from dataclasses import dataclass, field
from typing import Any

import dask
import dask.bag as db
from dask.bag.core import groupby_tasks
from dask.base import tokenize
from dask.delayed import delayed
from dask.utils import key_split
from distributed import Client, KilledWorker, LocalCluster
from distributed.comm.core import CommClosedError
from distributed.utils import silence_logging_cmgr

from pithlog.distributed.local import has_fork_server, local_workers, start_fork_server
from pithlog.distributed.reach import identify
from pithlog.distributed.sources import SourceFile, blocks, expand
from pithlog.distributed.tasks import (
    LISTED_REFUSALS,
    BlockReport,
    Difference,
    boundaries,
    check_block,
    compare_range,
    first,
    identity,
    read_published,
    reduce_range,
    sample_piths,
    step0,
    tag_ranges,
    versions,
)
from pithlog.errors import DaskError, UsageError
from pithlog.lines import too_long
from pithlog.parallel import Result, usable_cores
from pithlog.parallel.cores import MOST_CORES

MAX_BLOCK = 128 << 20
"""The largest range a task reads, by default: what bounds a task's memory (docs). The
same as :data:`PARTITION_BYTES`, so that by default each range's output is one partition
of the shuffles as it stands, with nothing moved to join ranges together."""

MIN_BLOCK = 1 << 20
"""The smallest range chosen by default: below it a task costs more to schedule than to
run."""

BLOCKS_PER_THREAD = 2
"""Ranges per worker thread, by default, so that the load spreads; the shuffles take as
many partitions per thread (each range's output is one partition). Four per thread
measured no better than two on the 100,000-event set: the last ranges finish together
either way, and the shuffles' tasks grow with the square of the partitions."""

PARTITION_BYTES = 128 << 20
"""Input bytes per partition of the shuffles, at most (unless there are fewer than two
per worker thread): the shuffles cost a task per pair of partitions in each stage (Dask's
task shuffle), so they take the ranges' outputs together, and a partition's events are
what one task of steps 1-5 holds."""

MAX_BRANCH = 32
"""Dask's task shuffle splits each partition at most this many ways per stage."""

SAMPLES = 64
"""Piths sampled per output range to cut the pith ranges."""

CONNECT_TIMEOUT = 30.0
"""Seconds to reach a scheduler, and for a first worker to join it."""

LOCAL_CONFIG: dict[str, Any] = {
    # Dask's statistical profiler samples every worker thread's stack every 10 ms: a third
    # more CPU per event measured here, for a dashboard nobody looks at.
    "distributed.worker.profile.enabled": False,
    # The event loops' health checks (every 20 ms in each of the scheduler, the nannies and
    # the workers), the dashboard's system monitor (every 0.5 s) and the memory monitors
    # (every 0.1 s) cost an idle local cluster of two workers 0.11 cores measured here, and
    # 0.02 at these intervals: the two cores are the job's. Memory is still watched, every
    # second, and a task's output is still spilled when it is stored above the target.
    "distributed.admin.tick.interval": "1s",
    "distributed.admin.system-monitor.interval": "5s",
    "distributed.worker.memory.monitor-interval": "1s",
    # Workers forked from one process that has imported Dask and pithlog (see
    # local.FORKSERVER_PRELOAD) rather than each started afresh and importing them: a worker
    # then starts in 0.05 CPU-s instead of 0.7 measured here.
    "distributed.worker.multiprocessing-method": "forkserver",
}
"""Dask settings of a ``local[:N]`` cluster, which runs beside nothing else of Dask's: what
a job on its cores does not need turned off (docs/distributed.md, "On one machine")."""



def local_config() -> dict[str, Any]:
    """:data:`LOCAL_CONFIG`, starting workers as Dask does by default (``spawn``) where
    this platform has no fork server (Windows)."""
    if has_fork_server():
        return dict(LOCAL_CONFIG)
    return {**LOCAL_CONFIG, "distributed.worker.multiprocessing-method": "spawn"}


@contextlib.contextmanager
def connect(address: str, timeout: float = CONNECT_TIMEOUT) -> Iterator[Client]:
    """A client of the scheduler at ``address``; ``local[:N]`` starts (and at the end stops)
    a cluster of N worker processes on this machine (N: its cores), one thread each."""
    local = local_workers(address)
    if local is not None:
        # Bounded as PITHLOG_CORES is: each worker is a process, and Dask lists N workers
        # before it starts one (local:99999999999999999999 filled the memory).
        digits = local.lstrip("0") or "0"
        workers = int(digits) if len(digits) <= len(str(MOST_CORES)) else MOST_CORES + 1
        if not local:
            workers = usable_cores()
        if not 1 <= workers <= MOST_CORES:
            raise UsageError("arguments", f"--dask local:N needs N from 1 to {MOST_CORES}")
        settings = local_config()
        # Started now unless the command started it before importing Dask; Dask's own
        # preload list (get_mp_context) then finds it running and changes nothing.
        start_fork_server()
        with (
            dask.config.set(settings),
            LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                         host="127.0.0.1", dashboard_address=":0",
                         silence_logs=logging.CRITICAL) as cluster,
            Client(cluster) as client,
        ):  # fmt: skip
            yield client
        return
    if "://" not in address:
        raise UsageError("arguments", f"--dask {address}: give a scheduler address "
                         "(tcp://host:port) or local[:N]")  # fmt: skip
    # As a local cluster's (silence_logs): the client's own log of a lost scheduler is
    # tracebacks on stderr, where the command says it in one line (job_errors).
    with contextlib.ExitStack() as stack:
        stack.enter_context(silence_logging_cmgr(logging.CRITICAL))
        identify(address, timeout)
        try:
            client = Client(address, timeout=timeout)
        except (OSError, TimeoutError, ValueError) as exc:
            raise DaskError("scheduler", f"cannot reach the Dask scheduler at {address}: "
                            f"{exc}") from exc  # fmt: skip
        stack.enter_context(client)
        try:
            client.wait_for_workers(1, timeout=timeout)
        except (TimeoutError, OSError) as exc:
            raise DaskError("scheduler", f"no worker joined the scheduler at {address} "
                            f"within {timeout:.0f} s") from exc  # fmt: skip
        yield client


@contextlib.contextmanager
def job_errors() -> Iterator[None]:
    """Dask's own failures of a running job as one-line errors: a task whose every try
    killed its worker (Dask gives up after ``distributed.scheduler.allowed-failures``
    deaths: a task that runs out of memory kills each worker it is sent to), and the
    connection to the scheduler lost, which cancels every future of the job. A worker
    lost once costs time only (docs/distributed.md)."""
    try:
        yield
    except KilledWorker as exc:
        worker = getattr(exc.last_worker, "address", exc.last_worker)
        task = key_split(exc.task)
        raise DaskError("worker_lost", f"every Dask worker that ran a {task} task died "
                        f"running it ({exc.allowed_failures + 1} tries, the last on {worker}); "
                        "see the workers' logs: out of memory, say") from exc  # fmt: skip
    except CancelledError as exc:
        reason = " ".join(str(exc).split())
        raise DaskError("scheduler", f"the job was cancelled on the Dask cluster ({reason}); "
                        "run it again once the scheduler is back") from exc  # fmt: skip
    except CommClosedError as exc:
        raise DaskError("scheduler", f"lost the connection to the Dask scheduler ({exc}); "
                        "run the job again once it is back") from exc  # fmt: skip


def check_workers(client: Client) -> int:
    """Refuse a cluster whose workers run another pithlog or merge version than this
    process (each task checks again, for workers that join later). Returns the worker
    threads."""
    here = versions()
    try:
        found: dict[str, Any] = client.run(versions)
    except Exception as exc:  # a worker without pithlog cannot even unpickle the call
        raise DaskError("version", f"a Dask worker cannot run pithlog: {exc}; install "
                        f"pithlog {here[0]} on every worker") from exc  # fmt: skip
    for worker, theirs in sorted(found.items()):
        if tuple(theirs) != here:
            raise DaskError(
                "version",
                f"Dask worker {worker} runs pithlog {theirs[0]} ({theirs[1]}) but this "
                f"client runs pithlog {here[0]} ({here[1]}); install the same pithlog on "
                "every worker",
            )
    threads: dict[str, int] = client.nthreads()
    return max(1, sum(threads.values()))


def shuffled_partitions(n: int, max_branch: int = MAX_BRANCH) -> int:
    """The output partitions of Dask's task shuffle of ``n`` partitions
    (``dask.bag.core.groupby_tasks``): ``k ** stages`` with ``k ** stages >= n``."""
    stages = math.ceil(math.log(n) / math.log(max_branch)) or 1
    k = n if stages == 1 else math.ceil(n ** (1 / stages))
    return int(k**stages)


def _shuffle(bag: db.Bag, grouper: Any, buckets: int) -> db.Bag:
    """Dask's task shuffle of ``bag`` by ``grouper``, a bucket below ``buckets``: bucket ``b``
    lands in output partition ``b``."""
    out: db.Bag = groupby_tasks(bag, grouper, hash=identity, max_branch=MAX_BRANCH)
    if out.npartitions != buckets:  # the arithmetic of shuffled_partitions no longer holds
        raise RuntimeError(f"task shuffle gave {out.npartitions} partitions, not {buckets}")
    return out


def shuffle_partitions(total: int, threads: int, ranges: int) -> int:
    """Partitions of the shuffles: :data:`BLOCKS_PER_THREAD` per worker thread, more when
    each would hold over :data:`PARTITION_BYTES` of input; never more than the ranges
    read."""
    wanted = max(BLOCKS_PER_THREAD * threads, -(-total // PARTITION_BYTES))
    return max(1, min(ranges, wanted))


def blocksize_for(files: list[SourceFile], threads: int, blocksize: int | None) -> int:
    if blocksize is not None:
        return max(1, blocksize)
    total = sum(f.size for f in files)
    share = -(-total // (BLOCKS_PER_THREAD * threads))
    return max(MIN_BLOCK, min(MAX_BLOCK, share))


@dataclass
class Refusal:
    source: str
    line: int
    message: str
    count: int = 1
    """Lines it stands for: more than one for the lines a range refused after those it
    lists (:data:`~pithlog.distributed.tasks.LISTED_REFUSALS`), from ``line`` to
    ``last``."""
    last: int = 0


@dataclass
class Run:
    """A job on the cluster: its reports as they are read, then its output range by range
    (:meth:`results` or :meth:`differences`)."""

    files: list[SourceFile]
    published_files: list[SourceFile]
    _reports: list[Any]
    _published_reports: list[Any]
    _outputs: list[Any]
    compare: bool
    read: int = 0
    refused: list[Refusal] = field(default_factory=list)
    unreadable: list[Refusal] = field(default_factory=list)
    published_read: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    _offsets: dict[tuple[int, int], int] = field(default_factory=dict)

    @property
    def refused_lines(self) -> int:
        """The event lines refused at the door, listed or not."""
        return sum(refusal.count for refusal in self.refused)

    def wait_reports(self) -> None:
        """Wait for every range to be read, then number the refused lines in their files."""
        # One report at a time, in range order (as blocks() lists them): each may list
        # LISTED_REFUSALS lines, and the ranges may be thousands.
        self.refused = _numbered(self._read(self._reports, "read"), self.files, {})
        self.unreadable = _numbered(self._read(self._published_reports, "published_read"),
                                    self.published_files, self._offsets)  # fmt: skip

    def _read(self, futures: list[Any], total: str) -> Iterator[BlockReport]:
        """Each report as it is fetched, its lines read added to ``total``."""
        for future in futures:
            report: BlockReport = future.result()
            future.release()
            setattr(self, total, getattr(self, total) + report.read)
            yield report

    def results(self) -> Iterator[Result]:
        """``(pith, state bytes | Pending)`` in pith order, one output range at a time."""
        last = ""
        for future in self._outputs:
            part: list[Result] = future.result()
            future.release()  # printed: the worker may drop it
            for pith, result in part:
                _in_order(last, pith)
                last = pith
                yield pith, result

    def differences(self) -> Iterator[Difference]:
        """The report of ``--compare``: each difference, in pith order, its published line
        numbered in its file."""
        last = ""
        for future in self._outputs:
            part, counts = future.result()
            future.release()
            for name, value in counts.items():
                self.counts[name] = self.counts.get(name, 0) + value
            for difference in part:
                _in_order(last, difference["pith_number"], strict=False)
                last = difference["pith_number"]
                where = difference.pop("where", None)
                if where is not None:
                    source, index, line = where
                    difference["source"] = self.published_files[source].name
                    difference["line"] = self._offsets.get((source, index), 0) + line
                yield difference


def _in_order(last: str, pith: str, strict: bool = True) -> None:
    if pith < last or (strict and pith == last):
        raise RuntimeError(f"pith ranges came back out of order ({last} before {pith})")


LISTED_IN_ALL = 10_000
"""Refused lines the client names one by one, over all ranges; those after them are
counted, in one line per file. A range lists up to :data:`~pithlog.distributed.tasks.
LISTED_REFUSALS`: over the 14,000 ranges of a large junk input that was 1.4 GB held on the
client."""


def _numbered(
    reports: Iterable[BlockReport], files: list[SourceFile], offsets: dict[tuple[int, int], int]
) -> list[Refusal]:
    """Each report's refused lines numbered in its file (ranges frame their lines
    exactly: a range's first line follows the previous range's LFs); ``reports`` come in
    file and range order, and ``offsets`` is filled with each range's first line number
    less one. The first :data:`LISTED_IN_ALL` are listed, the rest counted per file."""
    at: dict[int, int] = {}
    out: list[Refusal] = []
    listed = 0

    def add(name: str, first: int, last: int, count: int, message: str) -> None:
        nonlocal listed
        if listed < LISTED_IN_ALL:
            listed += 1
            out.append(Refusal(name, first, message, count, last if count > 1 else 0))
            return
        # reports come in file order: a file's lines past the cap are one Refusal, the last
        held = out[-1] if out and out[-1].source == name and out[-1].message.endswith(_FOLDED) \
            else None  # fmt: skip
        if held is None:
            held = Refusal(name, first, "", 0, first)
            out.append(held)
        held.count += count
        held.last = last
        held.message = f"{held.count} lines refused, not listed: at most {LISTED_IN_ALL}{_FOLDED}"

    for report in reports:
        base = at.get(report.source, 0)
        offsets[(report.source, report.index)] = base
        name = files[report.source].name
        for n, why in report.refused:
            add(name, base + n, base + n, 1, too_long(base + n).describe() if why is None else why)
        if report.unlisted:
            first, last = report.unlisted_lines
            add(name, base + first, base + last, report.unlisted,
                f"{report.unlisted} lines refused, not listed: a range lists the first "
                f"{LISTED_REFUSALS} it refuses")  # fmt: skip
        at[report.source] = base + report.lfs
    return out


_FOLDED = " refused lines are listed in all"


def start(
    client: Client,
    sources: list[str],
    keyring_data: bytes,
    blocksize: int | None = None,
    published: list[str] | None = None,
) -> Run:
    """Build the graph for ``sources`` (and, with ``published``, their comparison with the
    published states) and start it on the cluster."""
    threads = check_workers(client)
    files = expand(sources)
    pub_files = expand(published) if published else []
    expected = versions()
    size = blocksize_for(files + pub_files, threads, blocksize)
    ranges_read = blocks(files, size)
    width = shuffle_partitions(sum(f.size for f in files), threads, len(ranges_read))
    buckets = shuffled_partitions(width)
    # One task of the graph, on which every range depends: given inline, the keyring (up
    # to 8 MiB) went with each range's task, and a worker held a copy per range queued on
    # it (6.5 MB x 183 ranges: 1.29 GB measured). A worker now fetches it once.
    keyring = delayed(keyring_data, name=f"pithlog-keyring-{tokenize(keyring_data)}")
    checked = [
        delayed(check_block, nout=2, pure=False)(b, keyring, expected, buckets)
        for b in ranges_read
    ]  # fmt: skip
    copies = _gathered([c for c, _ in checked], files, threads)
    by_event = _shuffle(copies, first, buckets)
    winners = by_event.map_partitions(step0)
    pub_read = [
        delayed(read_published, nout=2, pure=False)(b, expected)
        for b in (blocks(pub_files, size) if pub_files else [])
    ]  # fmt: skip
    states = _gathered([s for s, _ in pub_read], pub_files, threads) if pub_read else None
    ranges = shuffled_partitions(winners.npartitions + (states.npartitions if states else 0))
    # The published piths are sampled with the winners': PUBLISHED comes from the registry
    # being checked, and piths the log does not have (all below its first pith, say) would
    # otherwise all fall in one range, and one task.
    sampled_bags = [winners] if states is None else [winners, states]
    per = max(1, -(-SAMPLES * ranges // sum(b.npartitions for b in sampled_bags)))
    sampled = [part for bag in sampled_bags
               for part in bag.map_partitions(sample_piths, per).to_delayed(optimize_graph=False)]
    bounds = delayed(boundaries)(sampled, ranges)
    tagged = winners.map_partitions(tag_ranges, "e", bounds)
    if states is not None:
        tagged = db.concat([tagged, states.map_partitions(tag_ranges, "p", bounds)])
    grouped = _shuffle(tagged, first, ranges)
    final = compare_range if published else reduce_range
    # Not optimized: optimizing fuses and renames tasks collection by collection, and a
    # task two of them share (step 0 feeds the sample and the ranges) would run twice.
    parts = grouped.to_delayed(optimize_graph=False)
    outputs = [delayed(final, pure=False)(part, expected) for part in parts]
    wanted = [r for _, r in checked] + [r for _, r in pub_read] + outputs
    futures = client.compute(wanted, optimize_graph=False)
    n, p = len(checked), len(pub_read)
    return Run(files, pub_files, futures[:n], futures[n : n + p], futures[n + p :],
               compare=bool(published))  # fmt: skip


def _gathered(parts: list[Any], files: list[SourceFile], threads: int) -> db.Bag:
    """The outputs of the ranges as a bag of :func:`shuffle_partitions` partitions (adjacent
    ranges' outputs joined)."""
    width = shuffle_partitions(sum(f.size for f in files), threads, len(parts))
    bag: db.Bag = db.from_delayed(parts)
    # Joining ranges moves all but one of their outputs to one worker: only when the ranges
    # are many and small (--blocksize), so that the shuffles stay a few tasks per pair.
    return bag if width == len(parts) else bag.repartition(width)
