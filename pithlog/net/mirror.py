"""``pithlog mirror``: pull a served log (``pithlog serve``, C2SP tlog-tiles) into a local
store, verifying everything before storing anything (``docs/network.md``, "Running a
mirror").

One pass, :func:`mirror_once`, after Go's ``sumdb/tlog`` tile reader and Tessera's
``fsck``:

1. Fetch ``/checkpoint``; verify its signature against the keyring (a key allowed for its
   origin, as ``verify-checkpoint`` does).
2. Prove it consistent with the checkpoint this store last accepted from that origin
   (:mod:`pithlog.net.mirror_consistency`; RFC 9162 consistency proof from
   ``/proof/consistency``; one that does not hold is checked against the served tiles,
   which tell a spoiled proof from another history). A split view or a rewritten history
   stores nothing: both checkpoints and a proof that shows it are written to an evidence
   file. A store with leaves but no accepted checkpoint must hold a prefix of the served
   tree (proven the same way, against its own root). Then the checkpoint is accepted
   (recorded in the store, compare-and-set).
3. From the first leaf the store lacks: every tile needed is verified, the right edge
   against the checkpoint's root and every other tile against its parent
   (:class:`pithlog.transparency.tiles.VerifiedTiles`); every entry bundle against its
   level-0 tile; every copy of ``/copies/<N>`` against its entry (its SHA-256 and its
   event_id). Only then is a batch appended, in the origin's leaf order, invalid copies
   kept as the origin keeps them, so that the mirror's tree is the origin's: its root at
   the checkpoint's size is compared at the end.

Resumable: each batch is one transaction; the accepted checkpoint covers the leaves
stored, so a run killed anywhere continues from the store's last leaf. Everything fetched
is bounded (:data:`pithlog.net.origin.LIMITS`), and a partial tile that a server has
dropped is read from the full tile (C2SP tlog-tiles: a client then keeps the first ``W``
hashes).
"""

from __future__ import annotations

import functools
import hashlib
import threading
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar
from weakref import WeakKeyDictionary

from pithlog.errors import DoorError, MirrorError, shown
from pithlog.net.mirror_consistency import _consistent, _prefix
from pithlog.net.origin import LEAF_DATA, WIDTH, Origin
from pithlog.protocol.events import Envelope
from pithlog.protocol.keys import KeyEntry, Keyring
from pithlog.store import DUPLICATE, Store
from pithlog.store.layout import eid_bytes
from pithlog.transparency import merkle, tiles
from pithlog.transparency.checkpoint import (
    Checkpoint,
    parse_checkpoint_text,
    parse_note,
    verify_checkpoint,
)
from pithlog.transparency.witness import require_quorum

BATCH_BUNDLES = 4
"""Bundles (of 256 leaves) per append transaction."""
BATCH_BYTES = 64 << 20
"""A batch ends after the bundle that brings its copies to this many bytes, however few
its bundles: the append pipeline holds three batches at once (one gathered, one through
the door, one being written), and four bundles of the largest copies are 1 GiB each."""
LOOKAHEAD = 4
"""Bundles fetched ahead of the one being verified, so that the network's wait overlaps
the door's work (each holds at most a bundle of copies: see :class:`Limits`)."""
RECENT_BATCHES = 4
"""Batches whose leaf data :func:`_new_to` keeps, the one it checks included: the append
pipeline holds at most three batches uncommitted (one gathered, one through the door, one
being written), and a batch before them is committed, so its copies are found in the
store. The leaves of a whole pass were kept (about 150 bytes a leaf: 1.5 GB over ten
million)."""
FORGET_EVERY = 256
"""Bundles after which the verified tiles are dropped (the right edge and the few tiles
above are read again): memory stays about 2 MiB of tiles however long the log."""


# --- one pass -----------------------------------------------------------------------------


@dataclass
class MirrorReport:
    origin: str
    size: int
    root: bytes
    held_before: int
    accepted: bool
    """A newer checkpoint was accepted in this pass."""
    appended: int = 0
    fetched_bytes: int = 0
    older_than: int | None = None
    """The size of the accepted checkpoint, when the one served is smaller (a stale cache,
    or a log rolled back): it was proven a prefix of the accepted tree and brought
    nothing, and the store stays at the accepted size."""
    statuses: Counter[str] = field(default_factory=Counter)


Progress = Callable[[int, int], None]
"""``progress(leaves held, leaves of the checkpoint)`` after each committed batch."""


def verified_checkpoint(origin: Origin, keyring: Keyring, origin_name: str | None = None,
                        witnesses: Sequence[KeyEntry] = (),
                        quorum: int = 0) -> tuple[bytes, Checkpoint]:  # fmt: skip
    """Step 1: the origin's checkpoint, its signature verified against ``keyring`` (and
    ``origin_name`` required of it), and cosigned by ``quorum`` of ``witnesses``; else
    ``checkpoint.*``, ``witness.quorum`` or ``mirror.fetch``. Also what a store that does
    not exist yet is made for (:func:`pithlog.cli.edge.open_store_reached`): any answer of
    ``/checkpoint``, junk too, made one, left empty by the error that followed."""
    note = origin.checkpoint()
    cp = verify_checkpoint(note, keyring, origin_name).checkpoint
    if quorum:  # before anything else is believed: the log's word alone is not enough
        require_quorum(note, witnesses, quorum)
    return note, cp


def mirror_once(
    store: Store,
    origin: Origin,
    keyring: Keyring,
    origin_name: str | None = None,
    evidence_dir: Path = Path("."),
    batch_bundles: int = BATCH_BUNDLES,
    progress: Progress | None = None,
    witnesses: Sequence[KeyEntry] = (),
    quorum: int = 0,
    begun: Callable[[MirrorReport], None] | None = None,
    counted_from: int | None = None,
) -> MirrorReport:
    """One pass of the mirror (the module's steps 1-3). Raises :class:`MirrorError` (and
    ``checkpoint.*``, ``tile.*`` for what does not verify); nothing unverified is stored.

    ``begun(report)``, when given, is called once the checkpoint is accepted (step 2), with
    the report this pass then fills in as its batches are committed: a pass that fails
    later (its origin gone, a copy that does not verify, an interrupt) has committed the
    leaves counted there, which its caller can report although nothing is returned.

    ``counted_from``: the count of ``origin.fetched`` from which the report's
    ``fetched_bytes`` runs, when the pass's bytes began before it (the checkpoint a
    command fetched to decide to make the store); by default, from the start of the pass."""
    # ``--follow`` reuses one Origin for every pass: its count runs on, the report is this
    # pass's bytes
    fetched_before = origin.fetched if counted_from is None else counted_from
    note, cp = verified_checkpoint(origin, keyring, origin_name, witnesses, quorum)
    previous = store.accepted_checkpoint(cp.origin)
    held = store.tree_size()
    old = parse_checkpoint_text(parse_note(previous).text) if previous is not None else None
    if old is not None and previous is not None:
        _consistent(store, origin, old, previous, cp, note, evidence_dir)
        if held > old.size:
            raise MirrorError("diverged", f"the store holds {held} leaves, more than the "
                              f"{old.size} of the checkpoint it accepted from {shown(cp.origin)}: "
                              "it is not a mirror of that log alone (leaves were added "
                              "by append, import or sync): mirror into a fresh "
                              "store")  # fmt: skip
    elif held:
        _prefix(store, origin, held, cp)
    newer = old is None or cp.size > old.size
    if newer and not store.accept_checkpoint(cp.origin, note, previous):
        raise MirrorError("concurrent", f"the accepted checkpoint of {shown(cp.origin)} changed "
                          "during this run")  # fmt: skip
    report = MirrorReport(cp.origin, cp.size, cp.root, held, newer)
    if old is not None and cp.size < old.size:
        report.older_than = old.size
    if begun is not None:
        begun(report)
    try:
        if held < cp.size:
            fetched = _Fetched(origin)
            verified = tiles.VerifiedTiles(cp.size, cp.root, fetched.tile)
            leaves: deque[tuple[int, list[bytes]]] = deque()  # each batch's leaf data
            batches = _batches(store, origin, verified, fetched, held, cp.size,
                               max(1, batch_bundles), leaves)  # fmt: skip
            vet = functools.partial(_committed_copies, leaves)
            done = held
            for results in store.append_batches(batches, keyring, keep_invalid=True, vet=vet):
                done += len(results)
                for result in results:
                    report.statuses[result.status] += 1
                # a leaf another mirror of this store committed after this pass checked it
                # (_new_to) is a duplicate here, already in its place: not appended by this one
                report.appended += sum(r.status != DUPLICATE for r in results)
                if progress is not None:
                    progress(done, cp.size)
            _, root = store.tree_root(cp.size) if store.tree_size() >= cp.size else (0, b"")
            if root != cp.root:
                raise _overtaken(store, verified, held, cp.size)
    finally:  # a pass that fails fetched bytes too, and its line says them
        report.fetched_bytes = origin.fetched - fetched_before
    return report


class _Fetched:
    """The tile reader of :class:`~pithlog.transparency.tiles.VerifiedTiles`: a level-0
    tile fetched ahead with its bundle (:func:`_batches`) is handed over once, the others
    are fetched when asked for. The reader only reads: every tile is verified by
    ``VerifiedTiles``, wherever its bytes came from."""

    def __init__(self, origin: Origin) -> None:
        self.origin = origin
        self.ahead: dict[tiles.Tile, bytes] = {}

    def tile(self, tile: tiles.Tile) -> bytes:
        data = self.ahead.pop(tile, None)
        return data if data is not None else self.origin.tile(tile)


def _batches(store: Store, origin: Origin, verified: tiles.VerifiedTiles, fetched: _Fetched,
             held: int, size: int, bundles: int,
             leaves: deque[tuple[int, list[bytes]]]) -> Iterator[list[bytes]]:  # fmt: skip
    """The copies of leaves ``held`` to ``size``, each the bytes its leaf commits to (its
    SHA-256 is the leaf data's copy hash), in batches of ``bundles`` bundles (fewer once
    their copies reach :data:`BATCH_BYTES`); each batch checked to be new to the store
    (else its tree would differ), its first leaf and leaf data put in ``leaves`` for
    :func:`_committed_copies`, which sees the batch through the door before it is written.
    The level-0 tiles, bundles and copies of the next :data:`LOOKAHEAD` bundles are
    fetched meanwhile (unverified, held only until their turn), so that the append never
    waits for a round trip to the origin."""
    batch: list[bytes] = []
    items: list[bytes] = []
    held_bytes = 0  # of the copies in `batch`
    # the leaves of this pass's latest batches, not all committed yet when the next is
    # checked (the ones before are found in the store)
    recent: deque[set[bytes]] = deque(maxlen=RECENT_BATCHES)
    indexes = range(held // WIDTH, (size + WIDTH - 1) // WIDTH)

    def fetch(index: int) -> tuple[bytes, bytes, list[bytes]]:
        width = tiles.tile_width(0, index, size)
        level0 = origin.tile(tiles.Tile(0, index, width))
        return level0, origin.bundle(index, width), origin.copies(index, width)

    ahead: deque[Future[tuple[bytes, bytes, list[bytes]]]] = deque()
    queued = iter(indexes)
    slots = _fetch_slots(origin)
    try:
        for index in indexes:
            while len(ahead) < LOOKAHEAD + 1 and (following := next(queued, None)) is not None:
                ahead.append(_in_background(fetch, following, slots))
            level0, bundle, copies = ahead.popleft().result()
            width = tiles.tile_width(0, index, size)
            fetched.ahead = {tiles.Tile(0, index, width): level0}  # only this bundle's
            entries = verified.entries(index, bundle)
            if len(copies) != width:
                raise MirrorError("copy", f"copies {index}: {len(copies)} copies for {width} "
                                  "leaves")  # fmt: skip
            skip = max(0, held - index * WIDTH)
            if not batch:
                first = index * WIDTH + skip
            for at in range(skip, width):
                batch.append(_committed(copies[at], entries[at], index * WIDTH + at))
                items.append(entries[at])
                held_bytes += len(copies[at])
            if ((index + 1) % bundles == 0 or index * WIDTH + width >= size
                    or held_bytes >= BATCH_BYTES):  # fmt: skip
                _new_to(store, items, recent, held, first, functools.partial(
                    _served_leaf_hash, verified))  # fmt: skip
                leaves.append((first, items))
                yield batch
                batch, items, held_bytes = [], [], 0
            if index % FORGET_EVERY == FORGET_EVERY - 1:
                verified.forget()
    finally:
        # stopped early (an error, an interrupt, the consumer gone): the fetches in flight
        # are left to end by themselves, unwaited for (answer_seconds bounds each)
        for future in ahead:
            future.cancel()


T = TypeVar("T")


_SLOTS: WeakKeyDictionary[Origin, threading.Semaphore] = WeakKeyDictionary()
_SLOTS_MADE = threading.Lock()


def _fetch_slots(origin: Origin) -> threading.Semaphore:
    """The :data:`LOOKAHEAD` + 1 fetches in flight that ``origin`` is given, over all the
    passes that use it (``--follow``, an audit's catch-ups): a pass that stops leaves its
    fetches in flight to end by themselves, and the next pass waits for their places. Per
    pass, an origin that failed the first fetch at once and held the four others until
    their deadline (about 12 minutes) left four more threads, connections and partial
    bundles of copies (256 MiB each at most) behind at every poll of ``--follow 1``."""
    with _SLOTS_MADE:
        slots = _SLOTS.get(origin)
        if slots is None:
            slots = _SLOTS[origin] = threading.Semaphore(LOOKAHEAD + 1)
        return slots


def _in_background(fetch: Callable[[int], T], index: int,
                   slots: threading.Semaphore) -> Future[T]:  # fmt: skip
    """``fetch(index)`` in a daemon thread of its own, once one of ``slots`` is free (held
    until the fetch ends, however the pass that asked for it ended): a pool's threads are
    joined when the interpreter exits, so one Ctrl-C or SIGTERM would wait for a slow
    origin's answers in flight (a byte a minute: until their deadline). Threads are
    started per bundle of 256 leaves, at most :data:`LOOKAHEAD` + 1 at once. The wait for
    a slot is a lock's, which a signal interrupts."""
    slots.acquire()
    future: Future[T] = Future()

    def run() -> None:
        done: Callable[[], object]
        try:
            if not future.set_running_or_notify_cancel():
                return
            try:
                result = fetch(index)
            except BaseException as exc:  # handed to the consumer, which raises it
                done = functools.partial(future.set_exception, exc)
            else:
                done = functools.partial(future.set_result, result)
        finally:
            slots.release()  # before the consumer is woken to ask for the next one
        done()

    try:
        threading.Thread(target=run, name="pithlog-mirror", daemon=True).start()
    except BaseException:
        slots.release()
        raise
    return future


def _committed(copy: bytes, leaf_data: bytes, leaf: int) -> bytes:
    """The copy of a leaf, if its bytes are the ones the leaf data commits to (their
    SHA-256 is its copy hash); the door and the leaf's event_id are seen to by
    :func:`_committed_copies`, once the batch has been through the door."""
    if len(leaf_data) != LEAF_DATA:
        raise MirrorError("copy", f"leaf {leaf}: an entry of {len(leaf_data)} bytes, not "
                          f"{LEAF_DATA}")  # fmt: skip
    if hashlib.sha256(copy).digest() != leaf_data[32:]:
        raise MirrorError("copy", f"leaf {leaf}: the copy served is not the one the leaf "
                          "commits to")  # fmt: skip
    return copy


def _committed_copies(leaves: deque[tuple[int, list[bytes]]],
                      items: list[Envelope | DoorError],
                      hashes: list[bytes | None]) -> None:  # fmt: skip
    """The ``vet`` of the mirror's append (:meth:`Store.append_batches`): every copy of the
    batch passed the door in its JCS form (the hash of what the door made of it is the
    leaf's copy hash, which its served bytes hash to) and is of the leaf's event_id; else
    ``mirror.copy``, and nothing of the batch is written."""
    first, leaf_data = leaves.popleft()
    if len(items) != len(leaf_data):
        raise MirrorError("copy", f"leaf {first}: {len(items)} copies for {len(leaf_data)} "
                          "leaves")  # fmt: skip
    for at, (item, h, data) in enumerate(zip(items, hashes, leaf_data, strict=True)):
        if isinstance(item, DoorError):
            raise MirrorError("copy", f"leaf {first + at}: the copy fails the door: "
                              f"{item.describe()}")  # fmt: skip
        # the leaf data is event_id (32 raw bytes) || SHA-256 of the JCS bytes (item_of)
        if h is None or eid_bytes(item.event_id) + h != data:
            raise MirrorError("copy", f"leaf {first + at}: the copy served is not the one "
                              "the leaf commits to")  # fmt: skip


def _new_to(store: Store, items: list[bytes], recent: deque[set[bytes]], held: int,
            first: int, served: Callable[[int], bytes]) -> None:  # fmt: skip
    """No copy of ``items`` (the leaf data of leaves ``first`` on) is stored, or earlier in
    this pass, or twice in ``items``: an append would skip it as a duplicate and the tree
    would lose a leaf. ``recent`` holds the leaf data of this pass's latest batches, whose
    commits may not be done (``items`` joins it); a copy of an earlier batch of this pass
    is stored, and it is that batch's when ``served`` (the verified leaf hash of a leaf of
    the served tree) says the served tree holds it at the leaf before its sequence number.
    Any other copy stored since this pass began (at ``held`` leaves) is another mirror's of
    the same store, not the origin's fault."""
    batch = set(items)
    twice = len(batch) != len(items) or any(not batch.isdisjoint(kept) for kept in recent)
    recent.append(batch)
    seqs = store.copy_seqs(items)
    if not twice and any(s is not None for s in seqs):
        # a leaf this pass went past (held to first), stored at its place, served again
        twice = any(s is not None and held < s <= first and served(s - 1) == merkle.leaf_hash(d)
                    for d, s in zip(items, seqs, strict=True))  # fmt: skip
    if twice or any(s is not None for s in seqs):
        # Sequence numbers run 1..size: a copy past `held` was stored during this pass,
        # and not by it (its own earlier copies count as twice, above).
        if not twice and all(s is None or s > held for s in seqs):
            raise MirrorError("concurrent", f"another writer appended to this store during "
                              f"this run (after its {held} leaves): run the mirror "
                              "again")  # fmt: skip
        raise MirrorError("duplicate", "the served tree holds a copy twice (or one this store "
                          "already holds): its tree cannot be reproduced")  # fmt: skip


def _overtaken(store: Store, verified: tiles.VerifiedTiles, held: int, size: int) -> MirrorError:
    """The error of a pass whose root at ``size`` is not the checkpoint's after its
    appends. The store held a proven prefix (``held`` leaves) and every leaf appended was
    verified against the checkpoint, in leaf order: so another writer (``append``,
    ``import``, ``sync``, a submission, a mirror of another log) committed leaves of its
    own during the pass, and the pass's landed after them. No fault of the origin's
    (``mirror.diverged`` said one); the store is no longer a prefix of its tree."""
    stored = store.leaf_data(held, max(0, min(store.tree_size(), size) - held)) or []
    first = next((held + at for at, data in enumerate(stored)
                  if merkle.leaf_hash(data) != _served_leaf_hash(verified, held + at)),
                 held + len(stored))  # fmt: skip
    return MirrorError("concurrent", f"another writer appended to this store during this "
                       f"run: its leaf {first} is not the origin's, so its tree is no longer "
                       "a prefix of the origin's; mirror into a fresh store, and let no "
                       "other command write a mirror's store")  # fmt: skip


def _served_leaf_hash(verified: tiles.VerifiedTiles, leaf: int) -> bytes:
    """The leaf hash of ``leaf`` in the served tree, from its verified level-0 tile."""
    return verified.leaf_hashes(leaf // WIDTH)[leaf % WIDTH]
