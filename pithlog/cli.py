"""The ``pithlog`` command line: argv in, bytes out, a documented exit status.

Exit status (``docs/cli.md``): 0 success; 1 verification failed (a state document or a
store that does not hold what it claims); 2 bad input or usage (a refused line, a bad
keyring, a file that cannot be read, wrong arguments). Every deliberate failure is a
:class:`~pithlog.errors.PithlogError`, caught once in :func:`main` and printed as one line.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import datetime
import gc
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any, BinaryIO, NoReturn

import msgspec

from pithlog import __version__
from pithlog.canonical import encode_b64, jcs, parse
from pithlog.checkpoint import Checkpoint, sign_checkpoint, verify_checkpoint
from pithlog.checks import check_alone
from pithlog.errors import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    EXIT_VERIFY_FAILED,
    CheckpointError,
    DoorError,
    KeyFileError,
    PithlogError,
    ProofError,
    SigningError,
    StoreError,
    UsageError,
)
from pithlog.events import (
    EVENT_TYPES,
    Envelope,
    admit,
    is_event_id,
    prepare_record_created,
    sign_event,
)
from pithlog.keys import (
    SIGNER_TYPES,
    Keyring,
    SigningKey,
    dump_key_file,
    load_key_file,
    load_keyring,
    make_keyring,
)
from pithlog.lines import iter_envelopes, iter_lines
from pithlog.parallel import reduce_rendered
from pithlog.proofs import (
    ConsistencyProof,
    InclusionProof,
    proof_kind,
    verify_consistency_proof,
    verify_inclusion_proof,
)
from pithlog.records import is_pith_number
from pithlog.reduce import Pending
from pithlog.state import verify_state_document
from pithlog.store import REFUSED, REJECTED, AppendResult, Store
from pithlog.sync import ExportSource, pull, store_responder
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
        raise UsageError("unreadable", f"cannot read {path}: {exc.strerror or exc}; "
                         "check the path and its permissions") from exc


@contextlib.contextmanager
def _open_input(path: str) -> Iterator[BinaryIO]:
    if path == "-":
        yield sys.stdin.buffer
        return
    try:
        stream = open(path, "rb")  # noqa: SIM115 - closed by the with below
    except OSError as exc:
        raise UsageError("unreadable", f"cannot read {path}: {exc.strerror or exc}; "
                         "check the path and its permissions") from exc
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
    if args.jobs < 1:
        raise UsageError("arguments", "--jobs must be at least 1")
    read = refused = states = pending = 0
    with _open_input(args.events) as stream:

        def admitted() -> Iterator[Envelope]:
            nonlocal read, refused
            for number, item in iter_envelopes(stream):
                if isinstance(item, DoorError):
                    refused += 1
                    out.say(f"pithlog: line {number}: {item.describe()}")
                else:
                    read += 1
                    yield item

        for pith, result in reduce_rendered(admitted(), keyring, jobs=args.jobs):
            if isinstance(result, Pending):
                out.say(f"pending: {pith}: {result.event_count} events, no valid record_created")
                pending += 1
                continue
            out.write(result + b"\n")
            states += 1
    out.say(f"reduce: {read} events read, {refused} lines refused, {states} states, "
            f"{pending} pending")  # fmt: skip
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
        raise KeyFileError("unwritable", f"cannot write {path}: {exc.strerror or exc}; "
                           "check that its folder exists and is writable") from exc


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
                               f"is {derived}; leave --pith out or pass that")  # fmt: skip
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


# --- the store ----------------------------------------------------------------------------

DEFAULT_STORE = "pithlog-store"
_JSON_SPACE = b" \t\r\n"


def _store_path(args: argparse.Namespace) -> str:
    path: str | None = getattr(args, "store", None)
    return path or os.environ.get("PITHLOG_STORE") or DEFAULT_STORE


def _open_store(args: argparse.Namespace, create: bool = False) -> Store:
    return Store.open(_store_path(args), create=create)


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
    head = b""
    while not head.lstrip(_JSON_SPACE):
        chunk = stream.read(1 << 16)
        if not chunk:
            return
        head += chunk
    first = head.lstrip(_JSON_SPACE)[:1]
    if first == b"[":
        data = head + stream.read()
        try:
            elements = msgspec.json.decode(data, type=list[msgspec.Raw])
        except (msgspec.MsgspecError, ValueError) as exc:
            raise DoorError("syntax", f"input starts with '[' but is not a JSON array: {exc}",
                            "the input") from exc  # fmt: skip
        for number, element in enumerate(elements, 1):
            yield number, bytes(element)
        return
    if first == b"{":
        while b"\n" not in head:
            chunk = stream.read(1 << 16)
            if not chunk:
                break
            head += chunk
        line = head.split(b"\n", 1)[0]
        if not _complete_json(line):
            data = head + stream.read()
            if _complete_json(data):  # one object written over several lines
                yield 1, data.strip(_JSON_SPACE)
                return
            stream = _Prefixed(data, stream)  # type: ignore[assignment]
        else:
            stream = _Prefixed(head, stream)  # type: ignore[assignment]
    else:
        stream = _Prefixed(head, stream)  # type: ignore[assignment]
    for number, raw in iter_lines(stream):
        if raw is None:
            yield number, DoorError("line_too_long", "line is longer than 8 MiB",
                                    f"line {number}")  # fmt: skip
        else:
            yield number, raw


def _complete_json(data: bytes) -> bool:
    try:
        msgspec.json.decode(data, type=msgspec.Raw)
    except (msgspec.MsgspecError, ValueError):
        return False
    return True


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


def _result_line(number: int, result: AppendResult) -> bytes:
    doc = {"line": number, "event_id": result.event_id, "status": result.status,
           "reason": result.reason}  # fmt: skip
    # msgspec writes what json.dumps(ensure_ascii=False, compact) writes, about 5x faster:
    # one line per appended event
    return msgspec.json.encode(doc) + b"\n"


def _append_input(args: argparse.Namespace, out: _Out, command: str) -> int:
    keyring = _keyring(args.keyring)
    if args.batch_size is not None and args.batch_size < 1:
        raise UsageError("arguments", "--batch-size must be at least 1")
    counts: dict[str, int] = {}
    batches = 0
    with _open_input(args.events) as stream, _open_store(args, create=True) as store:
        # append_batches reads up to two batches ahead (their door and signatures run while
        # the batch before is written): the batches wait here for their results, in order.
        waiting: collections.deque[list[tuple[int, bytes | DoorError]]] = collections.deque()

        def raw_batches() -> Iterator[list[bytes]]:
            for batch in _batches(_iter_events(stream), args.batch_size):
                waiting.append(batch)
                yield [item for _, item in batch if isinstance(item, bytes)]

        # closed here, not when collected: the batch being written is finished or abandoned
        # while the store is still open
        pipeline = contextlib.closing(
            store.append_batches(raw_batches(), keyring, args.keep_invalid)
        )
        with pipeline as appended_batches:
            for appended in appended_batches:
                batch = waiting.popleft()
                results = iter(appended)
                batches += 1
                for number, item in batch:
                    if isinstance(item, DoorError):
                        result = AppendResult(-1, None, REFUSED, item.describe())
                    else:
                        result = next(results)
                    counts[result.status] = counts.get(result.status, 0) + 1
                    out.write(_result_line(number, result))
    total = sum(counts.values())
    shown = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    out.say(f"{command}: {total} events in {batches} transaction(s): {shown or 'nothing'}")
    bad = counts.get(REFUSED, 0) + counts.get(REJECTED, 0)
    return EXIT_BAD_INPUT if bad else EXIT_OK


def cmd_append(args: argparse.Namespace, out: _Out) -> int:
    """Append events to the store; one JSON line per event on stdout."""
    return _append_input(args, out, "append")


def cmd_import(args: argparse.Namespace, out: _Out) -> int:
    """Append an export file to the store."""
    return _append_input(args, out, "import")


class _Bar:
    """Progress on stderr (tqdm), or nothing."""

    def __init__(self, out: _Out, show: bool, desc: str) -> None:
        self._bar: Any = None
        self._out = out
        self._show = show
        self._desc = desc

    def __call__(self, done: int, total: int) -> None:
        if not self._show:
            return
        if self._bar is None:
            from tqdm import tqdm

            self._bar = tqdm(total=total, unit="pith", desc=self._desc, file=self._out.stderr,
                             dynamic_ncols=True)  # fmt: skip
        self._bar.update(done - self._bar.n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def _show_progress(args: argparse.Namespace, out: _Out) -> bool:
    if args.progress:
        return True
    isatty = getattr(out.stderr, "isatty", None)
    return bool(isatty and isatty())


def cmd_replay(args: argparse.Namespace, out: _Out) -> int:
    """Replay the whole store and report every disagreement."""
    keyring = _keyring(args.keyring)
    if args.jobs < 1:
        raise UsageError("arguments", "--jobs must be at least 1")
    with _open_store(args) as store:
        if args.rebuild:
            bar = _Bar(out, _show_progress(args, out), "rebuild")
            try:
                counts = store.rebuild(keyring, progress=bar)
            finally:
                bar.close()
            out.say(f"replay --rebuild: {counts['copies']} copies judged, "
                    f"{counts['preferred_changed']} preferred copies changed, "
                    f"{counts['piths']} piths re-reduced under keyring "
                    f"{keyring.digest[:16]}")  # fmt: skip
            if not args.verify:
                return EXIT_OK
        bar = _Bar(out, _show_progress(args, out), "replay")
        try:
            report = store.replay(keyring, verify=args.verify, jobs=args.jobs, progress=bar)
        finally:
            bar.close()
    if not report.same_keyring:
        out.say(f"replay: the cached states were reduced under keyring "
                f"{(report.stored_keyring_digest or '')[:16]}, not this one "
                f"({keyring.digest[:16]}): state lines name the piths whose state "
                "would change")  # fmt: skip
    for note in report.notes:
        out.say(f"replay: note: {note.subject} stays pending under this keyring; "
                f"{note.detail}")  # fmt: skip
    for discrepancy in report.discrepancies:
        out.write(discrepancy.line().encode("utf-8") + b"\n")
    checked = "signatures verified" if args.verify else "cached verdicts"
    out.say(f"replay: {report.piths} piths, {report.events} events, {report.copies} copies "
            f"({checked}): {len(report.discrepancies)} discrepancies")  # fmt: skip
    return EXIT_OK if report.ok else EXIT_VERIFY_FAILED


def cmd_state(args: argparse.Namespace, out: _Out) -> int:
    """Print the cached state document of one pith."""
    if not is_pith_number(args.pith):
        raise UsageError("pith_number", f"{args.pith!r} is not a pith number")
    with _open_store(args) as store:
        state = store.state(args.pith)
        if state is None:
            status = store.status(args.pith)
            if status is None:
                raise StoreError("no_state", f"the store holds no event of {args.pith}")
            raise StoreError("no_state", f"{args.pith} is pending: {status['event_count']} "
                             "events, no valid record_created yet")  # fmt: skip
    out.write(state + b"\n")
    return EXIT_OK


def cmd_pending(args: argparse.Namespace, out: _Out) -> int:
    """List the piths that have events but no state yet."""
    with _open_store(args) as store:
        pending = store.pending()
    for entry in pending:
        out.write(jcs(entry) + b"\n")
    out.say(f"pending: {len(pending)} piths")
    return EXIT_OK


def cmd_export(args: argparse.Namespace, out: _Out) -> int:
    """Print every stored envelope, in append order, as JSON Lines."""
    if args.after < 0:
        raise UsageError("arguments", "--after must be 0 or more")
    count = 0
    last = args.after
    with _open_store(args) as store:
        for seq, data in store.export(after=args.after):
            if args.with_seq:
                out.write(b'{"seq":%d,"event":%s}\n' % (seq, data))
            else:
                out.write(data + b"\n")
            count += 1
            last = seq
    out.say(f"export: {count} envelopes, through seq {last} (resume with --after {last})")
    return EXIT_OK


def cmd_stats(args: argparse.Namespace, out: _Out) -> int:
    """Counts, sizes and map use of the store, as JSON."""
    with _open_store(args) as store:
        stats = store.stats()
    out.write(json.dumps(stats, indent=2).encode("utf-8") + b"\n")
    return EXIT_OK


# --- transparency: checkpoints, proofs, sync ---------------------------------------------


def _json_line(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"


def _size_arg(value: int | None, name: str) -> int | None:
    if value is not None and value < 0:
        raise UsageError("arguments", f"{name} must be 0 or more")
    return value


def cmd_checkpoint(args: argparse.Namespace, out: _Out) -> int:
    """Sign a checkpoint of the store's Merkle tree (C2SP tlog-checkpoint)."""
    key = load_key_file(_read_bytes(args.key))
    with _open_store(args) as store:
        size, root = store.tree_root(_size_arg(args.size, "--size"))
    out.write(sign_checkpoint(Checkpoint(args.origin, size, root), key))
    out.say(f"checkpoint: {args.origin} at tree size {size}, signed by {key.key_id}")
    return EXIT_OK


def _checkpoint_doc(verified: Any) -> dict[str, Any]:
    cp = verified.checkpoint
    return {"origin": cp.origin, "size": cp.size, "root": encode_b64(cp.root),
            "signers": list(verified.signers)}  # fmt: skip


def cmd_verify_checkpoint(args: argparse.Namespace, out: _Out) -> int:
    """Verify a signed checkpoint against a keyring (and, with --check-store, the store)."""
    keyring = _keyring(args.keyring)
    verified = verify_checkpoint(_read_bytes(args.checkpoint), keyring, args.origin)
    cp = verified.checkpoint
    if args.check_store:
        with _open_store(args) as store:
            held = store.tree_size()
            if cp.size > held:
                raise CheckpointError("diverged", f"the checkpoint is of size {cp.size}; the "
                                      f"store holds {held} leaves")  # fmt: skip
            _, root = store.tree_root(cp.size)
        if root != cp.root:
            raise CheckpointError("diverged", f"the store's root at size {cp.size} is "
                                  f"{encode_b64(root)}, the checkpoint's {encode_b64(cp.root)}")
    out.write(_json_line(_checkpoint_doc(verified)))
    held_too = ", and the store holds that tree" if args.check_store else ""
    out.say(f"verify-checkpoint: {cp.origin} at size {cp.size} signed by "
            f"{', '.join(verified.signers)}{held_too}")  # fmt: skip
    return EXIT_OK


def cmd_prove_inclusion(args: argparse.Namespace, out: _Out) -> int:
    """Write a tlog-proof@v1 that EVENT_ID is in the store's log."""
    if not is_event_id(args.event_id):
        raise ProofError("event_id", f"{args.event_id!r} is not an event_id")
    key = load_key_file(_read_bytes(args.key))
    with _open_store(args) as store:
        size, root = store.tree_root(_size_arg(args.size, "--size"))
        leaves = [index for index, _ in store.leaves_of(args.event_id) if index < size]
        if not leaves:
            raise ProofError("not_found", f"no copy of {args.event_id} among the first {size} "
                             "leaves of the store's log")  # fmt: skip
        _, path = store.inclusion_path(leaves[0], size)
    checkpoint = sign_checkpoint(Checkpoint(args.origin, size, root), key)
    extra = bytes.fromhex(args.event_id[len("sha256:") :])
    out.write(InclusionProof(leaves[0], tuple(path), checkpoint, extra).encoded())
    out.say(f"prove inclusion: {args.event_id} is leaf {leaves[0]} of {size} "
            f"({len(path)} hashes)")  # fmt: skip
    return EXIT_OK


def cmd_prove_consistency(args: argparse.Namespace, out: _Out) -> int:
    """Print the RFC 9162 consistency proof between two tree sizes of the store's log."""
    _size_arg(args.old, "OLD")
    with _open_store(args) as store:
        new, path = store.consistency_path(args.old, _size_arg(args.new, "NEW"))
    out.write(ConsistencyProof(args.old, new, tuple(path)).encoded())
    out.say(f"prove consistency: {args.old} -> {new} ({len(path)} hashes)")
    return EXIT_OK


def cmd_verify_proof(args: argparse.Namespace, out: _Out) -> int:
    """Verify an inclusion or a consistency proof offline, against signed checkpoints."""
    keyring = _keyring(args.keyring)
    data = _read_bytes(args.proof)
    if proof_kind(data) == "inclusion":
        if args.checkpoints:
            raise UsageError("arguments", "an inclusion proof carries its checkpoint: give "
                             "no checkpoint files")  # fmt: skip
        proven = verify_inclusion_proof(data, keyring, args.event_id, args.origin)
        doc = {"proof": "inclusion", "event_id": proven.event_id, "index": proven.index,
               **_checkpoint_doc(proven.checkpoint)}  # fmt: skip
        out.write(_json_line(doc))
        cp = proven.checkpoint.checkpoint
        out.say(f"verify-proof: {proven.event_id} is leaf {proven.index} of {cp.origin} at "
                f"size {cp.size}")  # fmt: skip
        return EXIT_OK
    if len(args.checkpoints) != 2:
        raise UsageError("arguments", "a consistency proof is checked against two checkpoint "
                         "files: OLD_CHECKPOINT NEW_CHECKPOINT")  # fmt: skip
    old, new = verify_consistency_proof(data, _read_bytes(args.checkpoints[0]),
                                        _read_bytes(args.checkpoints[1]), keyring,
                                        args.origin)  # fmt: skip
    a, b = old.checkpoint, new.checkpoint
    out.write(_json_line({"proof": "consistency", "origin": a.origin, "old": a.size,
                          "new": b.size, "old_root": encode_b64(a.root),
                          "new_root": encode_b64(b.root)}))  # fmt: skip
    out.say(f"verify-proof: {a.origin} at size {b.size} extends itself at size {a.size}")
    return EXIT_OK


def cmd_sync(args: argparse.Namespace, out: _Out) -> int:
    """Bring into the store the copies a store folder or an export file holds."""
    keyring = _keyring(args.keyring)
    if args.batch_size < 1:
        raise UsageError("arguments", "--batch-size must be at least 1")
    source = args.source
    refused = 0
    with _open_store(args, create=True) as store:
        if os.path.isdir(source):
            with Store.open(source, create=False, readonly=True) as other:
                report = pull(store, store_responder(other), keyring,
                              keep_invalid=args.keep_invalid, batch=args.batch_size)
        else:
            with _open_input(source) as stream:
                export = ExportSource.read(line for _, line in iter_lines(stream))
            refused = export.refused
            report = pull(store, export.responder(), keyring, keep_invalid=args.keep_invalid,
                          batch=args.batch_size)  # fmt: skip
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
        "refused_lines": refused,
    }  # fmt: skip
    out.write(_json_line(doc))
    shown = ", ".join(f"{n} {status}" for status, n in sorted(report.statuses.items()))
    out.say(f"sync: {report.needed} copies needed of {report.remote_items} "
            f"({shown or 'nothing to do'}); {report.rounds} rounds, "
            f"{report.bytes_exchanged} bytes exchanged")  # fmt: skip
    bad = report.statuses.get(REJECTED, 0) + report.statuses.get(REFUSED, 0) + refused
    if report.statuses.get(REJECTED, 0):
        out.say("sync: rejected copies fail checks 1-12 here; pass --keep-invalid to hold "
                "them as the source does")  # fmt: skip
    return EXIT_BAD_INPUT if bad else EXIT_OK


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
    parser.add_argument("--store", metavar="DIR", default=None,
                        help="store folder of the store commands (default: "
                        "$PITHLOG_STORE, else ./pithlog-store)")  # fmt: skip
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
    p.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="reduce the piths in N processes (same output)")
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

    store_help = "store folder (default: $PITHLOG_STORE, else ./pithlog-store)"

    def store_parser(name: str, **kwargs: Any) -> _Parser:
        p: _Parser = sub.add_parser(name, **kwargs)
        p.add_argument("--store", metavar="DIR", default=argparse.SUPPRESS, help=store_help)
        return p

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
        p.add_argument("--keyring", required=True, metavar="KEYRING", help="keyring JSON file")
        p.add_argument("--keep-invalid", action="store_true",
                       help="store events that fail checks 1-12 as evidence of invalidity "
                       "(they enter the reduction as invalid events) instead of rejecting "
                       "them")  # fmt: skip
        p.add_argument("--batch-size", type=int, metavar="N",
                       default=None if name == "append" else 10000,
                       help="events per transaction (default: "
                       + ("the whole input" if name == "append" else "10000")
                       + "); each batch is read, checked and verified while the one "
                       "before it is written")  # fmt: skip
        p.add_argument("events", metavar="FILE", nargs="?", default="-",
                       help="input file, or - for stdin (the default)")  # fmt: skip
        p.set_defaults(func=func)

    p = store_parser(
        "replay",
        help="re-read the whole store and report every disagreement",
        description="Re-read every stored envelope through the door, recompute event ids "
        "and (with --verify) every signature, check that the indexes, the sequence and the "
        "stored copies agree, that each event holds the copy section 7 step 0 prefers, and "
        "re-reduce every pith against its cached state, byte for byte. One line per "
        "discrepancy on stdout; exit 0 only when everything agrees, else 1. Under a keyring "
        "other than the store's, the state lines name exactly the piths whose state would "
        "change. --rebuild re-reduces the store under KEYRING (needed before appending "
        "with a changed keyring).",
    )
    p.add_argument("--keyring", required=True, metavar="KEYRING", help="keyring JSON file")
    p.add_argument("--verify", action="store_true",
                   help="verify every signature again (otherwise cached verdicts are used)")
    p.add_argument("--rebuild", action="store_true",
                   help="re-judge and re-reduce the store under KEYRING, then record it")
    p.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="replay the piths in N processes (same output)")
    p.add_argument("--progress", action="store_true",
                   help="show progress on stderr even when it is not a terminal")
    p.set_defaults(func=cmd_replay)

    p = store_parser("state", help="print the cached state document of a pith",
                     description="Print the cached state document of PITH (what `pithlog "
                     "reduce` prints for it). Exit 2 when the pith is unknown or pending.")
    p.add_argument("pith", metavar="PITH")
    p.set_defaults(func=cmd_state)

    p = store_parser("pending", help="list piths with events but no valid record_created",
                     description="One JSON line per pending pith: pith_number, event_count, "
                     "invalid_event_count, status.")
    p.set_defaults(func=cmd_pending)

    p = store_parser("export", help="print the stored envelopes in append order",
                     description="Print every stored envelope (preferred copies and "
                     "evidence), in append order, one per line: the format `import` reads. "
                     "--after N resumes after sequence number N (stderr says the last one).")
    p.add_argument("--after", type=int, default=0, metavar="N")
    p.add_argument("--with-seq", action="store_true",
                   help='print {"seq": N, "event": ENVELOPE} lines instead (not importable)')
    p.set_defaults(func=cmd_export)

    p = store_parser("stats", help="counts, sizes and map use of the store, as JSON")
    p.set_defaults(func=cmd_stats)

    _transparency_parsers(sub, store_parser, store_help)
    return parser


def _transparency_parsers(
    sub: Any, store_parser: Callable[..., _Parser], store_help: str
) -> None:
    p = store_parser(
        "checkpoint",
        help="sign a checkpoint of the store's Merkle tree",
        description="Print a signed checkpoint of the store's log: a C2SP tlog-checkpoint "
        "(origin, tree size, base64 RFC 9162 root hash) in a C2SP signed note, signed with "
        "KEYFILE under the key name ORIGIN. The key must be a pith_registry or mirror key "
        "whose signer_id is ORIGIN or ORIGIN's prefix before a '/'. See "
        "docs/transparency.md.",
    )
    p.add_argument("--key", required=True, metavar="KEYFILE")
    p.add_argument("--origin", required=True, metavar="NAME",
                   help="the log's origin, also the signature's key name")  # fmt: skip
    p.add_argument("--size", type=int, metavar="N",
                   help="sign the tree of the first N leaves (default: all)")  # fmt: skip
    p.set_defaults(func=cmd_checkpoint)

    p = store_parser(
        "verify-checkpoint",
        help="verify a signed checkpoint against a keyring",
        description="Verify a checkpoint: its note syntax, and a valid signature by a "
        "keyring key allowed to sign for its origin (docs/transparency.md). Prints "
        '{"origin", "size", "root", "signers"} and exits 0; exits 1 when it is not trusted. '
        "With --check-store, also requires the store's tree at that size to have that root.",
    )
    p.add_argument("--keyring", required=True, metavar="KEYRING")
    p.add_argument("--origin", metavar="NAME", help="require this origin")
    p.add_argument("--check-store", action="store_true",
                   help="also check the checkpoint against the store (--store)")  # fmt: skip
    p.add_argument("checkpoint", metavar="CHECKPOINT", help="checkpoint file, or -")
    p.set_defaults(func=cmd_verify_checkpoint)

    p = store_parser("prove", help="write an inclusion or a consistency proof",
                     description="Proofs over the store's Merkle tree (docs/transparency.md).")
    kinds = p.add_subparsers(dest="kind", metavar="KIND", parser_class=_Parser)
    kinds.required = True
    q = kinds.add_parser(
        "inclusion",
        help="a C2SP tlog-proof@v1 that an event is in the log",
        description="Print a c2sp.org/tlog-proof@v1: the event_id (extra), the index of its "
        "first copy in the log, the RFC 9162 inclusion path and a checkpoint of the tree of "
        "--size leaves (default: all) signed with KEYFILE for ORIGIN.",
    )
    q.add_argument("--store", metavar="DIR", default=argparse.SUPPRESS, help=store_help)
    q.add_argument("event_id", metavar="EVENT_ID")
    q.add_argument("--size", type=int, metavar="N")
    q.add_argument("--key", required=True, metavar="KEYFILE")
    q.add_argument("--origin", required=True, metavar="NAME")
    q.set_defaults(func=cmd_prove_inclusion)
    q = kinds.add_parser(
        "consistency",
        help="the RFC 9162 consistency proof between two tree sizes",
        description="Print PROOF(OLD, D[NEW]) of RFC 9162 in pithlog's text format: "
        "pithlog-consistency-proof@v1, old M, new N, one base64 hash per line. NEW defaults "
        "to the current tree size.",
    )
    q.add_argument("--store", metavar="DIR", default=argparse.SUPPRESS, help=store_help)
    q.add_argument("old", type=int, metavar="OLD")
    q.add_argument("new", type=int, metavar="NEW", nargs="?")
    q.set_defaults(func=cmd_prove_consistency)

    p = sub.add_parser(
        "verify-proof",
        help="verify an inclusion or consistency proof offline",
        description="Verify a proof without the store. An inclusion proof (tlog-proof@v1) "
        "carries its checkpoint: the checkpoint is verified against KEYRING, then the event's "
        "leaf against its root. A consistency proof needs the two checkpoints it joins, "
        "OLD_CHECKPOINT and NEW_CHECKPOINT, both verified against KEYRING. Exit 0 when the "
        "proof holds, 1 when it does not, 2 for unreadable input.",
    )
    p.add_argument("--keyring", required=True, metavar="KEYRING")
    p.add_argument("--origin", metavar="NAME", help="require this origin")
    p.add_argument("--event-id", metavar="EVENT_ID",
                   help="require an inclusion proof to be about this event")  # fmt: skip
    p.add_argument("proof", metavar="PROOF")
    p.add_argument("checkpoints", metavar="CHECKPOINT", nargs="*",
                   help="for a consistency proof: OLD_CHECKPOINT NEW_CHECKPOINT")  # fmt: skip
    p.set_defaults(func=cmd_verify_proof)

    p = store_parser(
        "sync",
        help="bring in the copies another store or an export file holds",
        description="Reconcile the store with SOURCE (a store folder, opened read-only, or a "
        "JSON Lines export file) by comparing fingerprints of ranges of copies, fetch the "
        "copies the store lacks (preferred and evidence) and append them in transactions of "
        "--batch-size. Prints one JSON line: copies on each side, needed, rounds, bytes "
        "exchanged, append statuses. Exit 2 when a copy was rejected or a line refused.",
    )
    p.add_argument("--from", dest="source", required=True, metavar="SOURCE")
    p.add_argument("--keyring", required=True, metavar="KEYRING")
    p.add_argument("--keep-invalid", action="store_true",
                   help="store copies that fail checks 1-12, as the source may")  # fmt: skip
    p.add_argument("--batch-size", type=int, default=1000, metavar="N",
                   help="copies per fetch and per transaction (default 1000)")  # fmt: skip
    p.set_defaults(func=cmd_sync)


Command = Callable[[argparse.Namespace, _Out], int]


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Run a command with Python's cyclic garbage collector paused.

    A command holds up to hundreds of thousands of decoded events at once: acyclic trees
    of dicts and strings that reference counting frees, which the collector would traverse
    again and again as they accumulate (about 40 % of the door's time over 100k events).
    pithlog builds no reference cycles per event, so nothing waits for the collector; it is
    restored when the command ends.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


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
        with _collector_paused():
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
