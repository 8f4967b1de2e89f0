"""``pithlog reduce --dask``: the command's edge for a Dask cluster. ``pithlog.distributed``
is imported here, when the command runs, so that pithlog without the ``dask`` extra still
works and says which extra ``--dask`` needs."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
from types import ModuleType
from typing import TYPE_CHECKING

from pithlog.cli.edge import json_line
from pithlog.cli.streams import Out, keyring_bytes
from pithlog.cli.tally import InvalidTally
from pithlog.distributed.local import local_workers, start_fork_server
from pithlog.errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_VERIFY_FAILED, DaskError
from pithlog.protocol.keys import load_keyring
from pithlog.protocol.reduce import Pending

if TYPE_CHECKING:
    from pithlog.distributed import Run

_EXTRA = ("dask", "distributed", "fsspec", "cloudpickle", "tornado", "toolz")
"""Top-level packages that come with the extra: their absence means the extra is missing."""


def load_distributed() -> ModuleType:
    """``pithlog.distributed``'s graph (the client's side of Dask), or a one-line error
    naming the extra to install."""
    try:
        return importlib.import_module("pithlog.distributed.graph")
    except ImportError as exc:
        missing = (exc.name or "").split(".")[0]
        if missing not in _EXTRA:
            raise
        raise DaskError("extra", f"--dask needs Dask, which is not installed here ({missing} "
                        "is missing): pip install 'pithlog[dask]'") from exc  # fmt: skip


def reduce_on_dask(args: argparse.Namespace, out: Out) -> int:
    """Reduce (or with ``--compare``, verify) the EVENTS on the cluster at ``--dask``."""
    if local_workers(args.dask) is not None and importlib.util.find_spec("distributed"):
        # Its imports overlap this process's import of Dask (pithlog.distributed.local).
        start_fork_server()
    distributed = load_distributed()
    # Read once (a keyring on stdin cannot be read twice), refused here if bad; the workers
    # get the same bytes.
    keyring_data = keyring_bytes(args.keyring)
    load_keyring(keyring_data)
    published = [args.compare] if args.compare is not None else None
    with distributed.connect(args.dask) as client, distributed.job_errors():
        run = distributed.start(client, args.events, keyring_data, args.blocksize, published)
        run.wait_reports()
        for refusal in run.refused:
            lines = f"line {refusal.line}"
            if refusal.count > 1:
                lines = f"lines {refusal.line} to {refusal.last}"
            out.say(f"pithlog: {refusal.source}: {lines}: {refusal.message}")
        if published is not None:
            return _report(run, out)
        states = pending = 0
        invalid = InvalidTally()
        for pith, result in run.results():
            invalid.add(result)
            if isinstance(result, Pending):
                out.say(f"pending: {pith}: {result.event_count} events, no valid "
                        "record_created")  # fmt: skip
                pending += 1
                continue
            out.write(result + b"\n")
            states += 1
    out.say(f"reduce: {run.read} events read, {run.refused_lines} lines refused, {states} "
            f"states, {pending} pending; {invalid.summary()}")  # fmt: skip
    return EXIT_BAD_INPUT if run.refused else EXIT_OK


def _report(run: Run, out: Out) -> int:
    """The ``--compare`` report: unreadable published lines, then the differences in pith
    order, one JSON line each (docs/distributed.md)."""
    differences = 0
    for bad in run.unreadable:
        # lines after the first a range lists are one line of the report, with their count
        more = {"last_line": bad.last, "count": bad.count} if bad.count > 1 else {}
        out.write(json_line({"status": "unreadable", "source": bad.source, "line": bad.line,
                             "reason": bad.message, **more}))  # fmt: skip
        differences += bad.count
    for difference in run.differences():
        out.write(json_line(difference))
        differences += difference.get("count", 1)  # a listed line and those counted with it
    counts = run.counts
    out.say(f"compare: {run.read} events read, {run.refused_lines} lines refused, "
            f"{counts.get('states', 0)} states, {counts.get('pending', 0)} pending, "
            f"{run.published_read} published states read, "
            f"{counts.get('equal', 0)} equal, {differences} differences")
    if differences:
        return EXIT_VERIFY_FAILED
    return EXIT_BAD_INPUT if run.refused else EXIT_OK
