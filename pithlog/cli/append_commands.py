"""The commands that append to a store: ``append`` and ``import``, with the reading of their
input (JSON Lines, a JSON array of events or one JSON object) and its cutting into batches,
each one write transaction."""

from __future__ import annotations

import argparse
import collections
import contextlib
import itertools
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

import msgspec

from pithlog.cli.edge import (
    RekeyBars,
    StoreParser,
    interrupt_held,
    is_json,
    keyring_option,
    open_store,
    progress_option,
    reading,
    show_progress,
    store_path,
)
from pithlog.cli.streams import Out, open_input, read_keyring
from pithlog.errors import EXIT_BAD_INPUT, EXIT_OK, DoorError, UsageError
from pithlog.lines import iter_lines
from pithlog.protocol.canonical import MAX_LINE_BYTES, shape
from pithlog.protocol.events import parse_envelope
from pithlog.store import REFUSED, REJECTED, AppendResult
from pithlog.store.place import check_place, is_store_folder

_JSON_SPACE = b" \t\r\n"

DEFAULT_BATCH = 10_000
"""Events per transaction of ``append`` and ``import`` unless ``--batch-size`` says. One
transaction holds its input, its decoded events and LMDB's dirty pages: about 15 KB per
event. The 100,000 events of ``make bench`` in one transaction: 1,369 MiB of the process's
own memory and 16.3 s; in transactions of 10,000: 431 MiB and 12.8 s."""


class _Prefixed:
    """A binary stream with some bytes already read put back in front."""

    def __init__(self, head: bytes, stream: BinaryIO) -> None:
        self._head = head
        self._stream = stream

    def read(self, size: int = -1) -> bytes:
        if self._head:
            head, self._head = self._head, b""
            return head
        return self._stream.read(size)


def _iter_events(stream: BinaryIO) -> Iterator[tuple[int, bytes | DoorError]]:
    """``(position, raw event bytes | DoorError)`` from JSON Lines, a JSON array of events
    or one JSON object (pretty-printed or not). The position is the line number for JSON
    Lines, the element number (from 1) for an array, 1 for a single object. Every event's
    bytes still go through the door (the store's append)."""
    skipped, overlong, head = _blank_start(stream)
    if not head:  # blank lines only: each too long is refused, as among events
        for number in overlong:
            yield number, DoorError("line_too_long", "line is longer than 8 MiB", f"line {number}")
        return
    first = head.lstrip(_JSON_SPACE)[:1]
    if first == b"[":
        data = head + _read_at_most(stream, MAX_ARRAY_BYTES + 1 - len(head))
        if len(data) > MAX_ARRAY_BYTES:
            raise DoorError("too_large", f"a JSON array input is limited to {MAX_ARRAY_BYTES} "
                            "bytes; write larger inputs as JSON Lines, one event per line",
                            "the input")  # fmt: skip
        try:
            elements = shape(data, list[msgspec.Raw])
        except DoorError as exc:
            if exc.detail != "syntax":
                raise DoorError(exc.detail, exc.message, "the input") from exc
            why = exc.message.removeprefix("not JSON: ")
            raise DoorError("syntax", f"input starts with '[' but is not a JSON array: {why}",
                            "the input") from exc  # fmt: skip
        for number, element in enumerate(elements, 1):
            yield number, bytes(element)
        return
    if first == b"{":
        # the first line, looked for no further than a line may be long: a first line with
        # no LF was read whole, however long, its bytes joined again at every read
        pieces = [head]
        size = len(head)
        while b"\n" not in pieces[-1] and size <= MAX_LINE_BYTES:
            chunk = stream.read(1 << 16)
            if not chunk:
                break
            pieces.append(chunk)
            size += len(chunk)
        head = b"".join(pieces)
        # the input's first line, blank when blank lines were dropped before it: whether
        # it is one whole object must not hang on where a 64 KiB read ended
        line = b"" if skipped else head.split(b"\n", 1)[0]
        if not is_json(line):
            # One object written over several lines is at most one event's worth of input
            # (the door's 8 MiB): reading further in the hope of one would hold a whole
            # JSON Lines file whose first line is broken. A blank line longer than that
            # before it makes the input more than one object's worth too.
            data = head + _read_at_most(stream, MAX_LINE_BYTES + 1 - len(head))
            if not overlong and len(data) <= MAX_LINE_BYTES and is_json(data):
                yield 1, data.strip(_JSON_SPACE)
                return
            stream = _Prefixed(data, stream)  # type: ignore[assignment]
        else:
            stream = _Prefixed(head, stream)  # type: ignore[assignment]
    else:
        stream = _Prefixed(head, stream)  # type: ignore[assignment]
    for number in overlong:
        yield number, DoorError("line_too_long", "line is longer than 8 MiB", f"line {number}")
    for number, raw in iter_lines(stream):
        if raw is None:
            yield skipped + number, DoorError("line_too_long", "line is longer than 8 MiB",
                                              f"line {skipped + number}")  # fmt: skip
        else:
            yield skipped + number, raw


def _blank_start(stream: BinaryIO) -> tuple[int, list[int], bytes]:
    """The blank lines the input starts with, counted and dropped, the numbers of those
    longer than a line may be, and the bytes read after them: from the start of the first
    line that is not blank (``b""`` when there is none). They were held whole and stripped
    again at every read: a stream of blank lines took memory without bound and time in its
    square (40 MB of LFs: 40 s). A blank line over ``MAX_LINE_BYTES`` is refused as too
    long as any other line is (spec section 1; :func:`pithlog.lines.iter_lines` counts
    every byte before the LF), so its number is kept; a blank start of the first line
    that is not blank longer than that is kept as ``MAX_LINE_BYTES + 1`` spaces: that line
    is refused as too long whatever its blanks were."""
    skipped = 0
    overlong: list[int] = []
    pieces: list[bytes] = []
    size = 0
    while True:
        chunk = stream.read(1 << 16)
        if not chunk:
            if size > MAX_LINE_BYTES:  # the last line, with no LF
                overlong.append(skipped + 1)
            return skipped, overlong, b""
        rest = chunk.lstrip(_JSON_SPACE)
        # the blank lines of the read that ends the blank start are dropped too: kept in
        # the head, they counted in the size of a single object after them when they came
        # in its read and not when they filled reads before it
        blank = chunk[: len(chunk) - len(rest)]
        end = blank.rfind(b"\n")
        if end >= 0:
            if size + blank.find(b"\n") > MAX_LINE_BYTES:
                overlong.append(skipped + 1)
            skipped += blank.count(b"\n")
            pieces, size, chunk = [], 0, chunk[end + 1 :]
        if rest:
            if size > MAX_LINE_BYTES:
                pieces = [b" " * (MAX_LINE_BYTES + 1)]
            return skipped, overlong, b"".join([*pieces, chunk])
        size += len(chunk)
        if size <= MAX_LINE_BYTES:
            pieces.append(chunk)


MAX_ARRAY_BYTES = 64 << 20
"""The largest JSON-array input ``append`` and ``import`` read (it is decoded whole: about
40,000 events of the bench's mean size); JSON Lines, streamed, has no such limit."""


def _read_at_most(stream: BinaryIO, size: int) -> bytes:
    """Up to ``size`` bytes of ``stream`` (fewer only at its end): never the whole of it."""
    parts: list[bytes] = []
    while size > 0:
        chunk = stream.read(min(size, 1 << 20))
        if not chunk:
            break
        parts.append(chunk)
        size -= len(chunk)
    return b"".join(parts)


def _batches(
    items: Iterator[tuple[int, bytes | DoorError]], size: int | None
) -> Iterator[list[tuple[int, bytes | DoorError]]]:
    batch: list[tuple[int, bytes | DoorError]] = []
    for item in items:
        batch.append(item)
        if size is not None and len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def _until_admitted(
    items: Iterator[tuple[int, bytes | DoorError]], refused: Callable[[int, DoorError], None]
) -> tuple[int, bytes] | None:
    """The first item that passes the door, or ``None``; each refused one before it handed
    to ``refused`` as it is read, not held: a new store's input of a million junk lines
    held them all (1.5 GB for 13.6 MB of input) until a line passed or the input ended."""
    for number, item in items:
        if isinstance(item, bytes):
            try:
                parse_envelope(item)
            except DoorError as exc:
                item = exc
            else:
                return number, item
        refused(number, item)
    return None


def _write_result(out: Out, command: str, number: int, result: AppendResult,
                  stored: bool = True) -> None:  # fmt: skip
    """Write one line's result; a closed or full standard output stops the command
    (``stored``: whether the store holds anything of this input yet)."""
    try:
        out.write(_result_line(number, result))
    except (BrokenPipeError, UsageError) as exc:  # closed, or a full disk
        # not a success: the rest of the input is left unappended (the pipeline's batch in
        # hand is finished or abandoned on the way out)
        how = ("closed" if isinstance(exc, BrokenPipeError)
               else f"failed ({exc.message.split(';')[0]})")  # fmt: skip
        where = ("the input is stored through that line's batch (perhaps one batch more)"
                 if stored else "nothing of the input is stored")  # fmt: skip
        raise UsageError("output_closed", f"standard output {how} at line {number}: "
                         f"{command} stopped; {where}: give {command} the same input again "
                         "to finish (what is stored is reported as duplicate)") from None


def _result_line(number: int, result: AppendResult) -> bytes:
    doc = {"line": number, "event_id": result.event_id, "status": result.status,
           "reason": result.reason}  # fmt: skip
    # msgspec writes what json.dumps(ensure_ascii=False, compact) writes, about 5x faster:
    # one line per appended event
    return msgspec.json.encode(doc) + b"\n"


def _append_input(args: argparse.Namespace, out: Out, command: str) -> int:
    keyring = read_keyring(args.keyring)
    if args.batch_size is not None and args.batch_size < 1:
        raise UsageError("arguments", "--batch-size must be at least 1")
    counts: dict[str, int] = {}
    batches = 0
    path = store_path(args)
    check_place(path)  # before anything is read or created
    with contextlib.ExitStack() as stack:
        raw = stack.enter_context(open_input(args.events))
        stream = stack.enter_context(reading(raw, args, out, f"{command}: read"))
        events = _iter_events(stream)
        if not is_store_folder(path):
            # A new store is made only for input with an event that passes the door: an
            # input whose every line is refused leaves no empty store behind.
            def refused(number: int, error: DoorError) -> None:
                result = AppendResult(-1, None, REFUSED, error.describe())
                counts[REFUSED] = counts.get(REFUSED, 0) + 1
                _write_result(out, command, number, result, stored=False)

            first = _until_admitted(events, refused)
            if first is None:
                if not counts:
                    out.say(f"{command}: no events: nothing to do (no store created at {path})")
                    return EXIT_OK
                out.say(f"{command}: {counts[REFUSED]} events, every one refused at the "
                        f"door: no store created at {path}")  # fmt: skip
                return EXIT_BAD_INPUT
            events = itertools.chain([first], events)
        store = stack.enter_context(open_store(args, create=True))
        # a changed keyring: a small change is applied first (in pieces, with a bar),
        # a large one refused with the size of the work and `pithlog rekey`
        stages = RekeyBars(out, show_progress(args, out))
        try:
            applied = store.apply_keyring(keyring, progress=stages)
        finally:
            stages.close()
        if applied is not None:
            out.say(f"{command}: the keyring changed ({applied.keys} key(s)): "
                    f"{applied.copies} stored copies judged again first")  # fmt: skip
        # append_batches reads up to two batches ahead (their door and signatures run while
        # the batch before is written): the batches wait here for their results, in order.
        waiting: collections.deque[list[tuple[int, bytes | DoorError]]] = collections.deque()

        def raw_batches() -> Iterator[list[bytes]]:
            for batch in _batches(events, args.batch_size):
                waiting.append(batch)
                yield [item for _, item in batch if isinstance(item, bytes)]

        # closed here, not when collected: the batch being written is finished or abandoned
        # while the store is still open
        pipeline = contextlib.closing(
            store.append_batches(raw_batches(), keyring, args.keep_invalid)
        )
        with pipeline as appended_batches:
            interrupted: type[KeyboardInterrupt] | None = None  # held, not yet raised
            while True:
                # An interrupt held while a committed batch was printed is raised in the
                # pipeline (once), which then finishes and hands out the batches it read
                # and started, as for an interrupt that lands in it: so every committed
                # batch is printed whole (docs/cli.md). One held while those are printed
                # is a second interrupt: raised in the pipeline, it stops it there.
                try:
                    if interrupted is not None:
                        stop, interrupted = interrupted, None
                        appended = appended_batches.throw(stop())
                    else:
                        appended = next(appended_batches)
                except StopIteration:
                    break
                batch = waiting.popleft()
                results = iter(appended)
                batches += 1
                with interrupt_held() as came:
                    for number, item in batch:
                        if isinstance(item, DoorError):
                            result = AppendResult(-1, None, REFUSED, item.describe())
                        else:
                            result = next(results)
                        counts[result.status] = counts.get(result.status, 0) + 1
                        _write_result(out, command, number, result)
                interrupted = came()
    total = sum(counts.values())
    shown = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    out.say(f"{command}: {total} events in {batches} transaction(s): {shown or 'nothing'}")
    bad = counts.get(REFUSED, 0) + counts.get(REJECTED, 0)
    return EXIT_BAD_INPUT if bad else EXIT_OK


def cmd_append(args: argparse.Namespace, out: Out) -> int:
    """Append events to the store; one JSON line per event on stdout."""
    return _append_input(args, out, "append")


def cmd_import(args: argparse.Namespace, out: Out) -> int:
    """Append an export file to the store."""
    return _append_input(args, out, "import")


def add_commands(sub: Any, store_parser: StoreParser) -> None:
    """The subcommand parsers of this group."""
    for name, func, what in (
        ("append", cmd_append, "events"),
        ("import", cmd_import, "an export file"),
    ):
        p = store_parser(
            name,
            help=f"append {what} to the store",
            description=f"Append {what} to the store: JSON Lines, a JSON array of events or "
            "one JSON object. Each batch is one durable transaction (all of it or none), "
            "committed before its lines are printed: one JSON line per event on stdout, "
            '{"line", "event_id", "status", "reason"}, status one of stored, duplicate, '
            "replaced, evidence, rejected, refused ('line' is the element number for an "
            "array). A summary goes to stderr. Exit 2 when anything was refused at the door "
            "or rejected by checks 1-12, else 0.",
        )
        keyring_option(p)
        p.add_argument("--keep-invalid", action="store_true",
                       help="store events that fail checks 1-12 as evidence of invalidity "
                       "(they enter the reduction as invalid events) instead of rejecting "
                       "them; this takes the file's word for them, which nothing proves "
                       "(sync --keep-invalid --checkpoint keeps only what a signed log "
                       "proves)")  # fmt: skip
        p.add_argument("--batch-size", type=int, metavar="N", default=DEFAULT_BATCH,
                       help=f"events per transaction (default: {DEFAULT_BATCH}; one "
                       "transaction holds about 15 KB of memory per event); each batch is "
                       "read, checked and verified while the one before it is written")  # fmt: skip
        p.add_argument("events", metavar="FILE", nargs="?", default="-",
                       help="input file, or - for stdin (the default)")  # fmt: skip
        progress_option(p)
        p.set_defaults(func=func)
