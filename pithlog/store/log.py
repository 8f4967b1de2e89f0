"""The durable log's facade: :class:`Store`, the one class an embedding registry uses
(``docs/store.md`` describes the layout byte for byte, ``docs/api.md`` the API).

An LMDB environment holds events, their evidence, indexes and the cached state of every
pith. :class:`Store` opens it (:mod:`pithlog.store.environment`, which with the three
``environment_*`` modules beside it is all that imports :mod:`lmdb`) and hands the work of
its methods to the modules beside it, each with one job (``docs/architecture.md`` lists
them): the reads of the log's contents, which :class:`Store` takes from
:class:`~pithlog.store.log_reads.ContentReads`, to :mod:`~pithlog.store.reads`; the tree's
to :mod:`~pithlog.store.tree` and :mod:`~pithlog.store.leaves`; :meth:`Store.append` and
:meth:`Store.append_batches` to :mod:`~pithlog.store.append_pipeline`, which writes what
:mod:`~pithlog.store.append` says; :meth:`Store.replay` to
:mod:`~pithlog.store.replay_processes`, which runs the checks of
:mod:`~pithlog.store.replay_structure` and :mod:`~pithlog.store.replay`; a keyring change
to :mod:`~pithlog.store.rekey`; the checkpoints a mirror accepted and a witness cosigned
to :mod:`~pithlog.store.accepted` and :mod:`~pithlog.store.witnessed`, by way of the
methods :class:`Store` takes from :class:`~pithlog.store.log_network.NetworkReads`.

Several :class:`Store` objects (and threads) may use one store, and several processes may
use it at once (LMDB's writer lock).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Generator, Iterable
from concurrent.futures import Future
from typing import TypeVar

from pithlog.errors import StoreError
from pithlog.parallel import Pool
from pithlog.protocol.events import Envelope, is_event_id
from pithlog.protocol.keys import Keyring
from pithlog.store import append_pipeline, leaves, rekey, tree
from pithlog.store.append import AppendResult, KeepInvalid, rebuild_work
from pithlog.store.append_judging import Helpers, Judging, SentBatch
from pithlog.store.append_pipeline import (
    Item,
    Started,
    Vet,
    append_batches,
    finish_append,
    start_append,
)
from pithlog.store.arguments import (
    is_int,
    require_bool,
    require_callable,
    require_count,
    require_event_ids,
    require_items,
    require_keep_invalid,
    require_keyring,
    require_str,
    require_tree_int,
)
from pithlog.store.environment import DEFAULT_MAP_SIZE, SharedEnvironment, Work, acquire, release
from pithlog.store.environment_walk import Walkers
from pithlog.store.layout import eid_bytes
from pithlog.store.log_network import NetworkReads
from pithlog.store.log_reads import ContentReads
from pithlog.store.replay_processes import EarlyWorkers, replay, structure
from pithlog.store.replay_report import Discrepancy as Discrepancy
from pithlog.store.replay_report import Progress as Progress
from pithlog.store.replay_report import ReplayReport as ReplayReport

V = TypeVar("V")
T = TypeVar("T")


class Store(ContentReads, NetworkReads):
    """A pithlog store: one LMDB environment directory. Use as a context manager."""

    def __init__(self, shared: SharedEnvironment, readonly: bool) -> None:
        self._shared: SharedEnvironment | None = shared
        self.readonly = readonly
        self.path = shared.path

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        create: bool = True,
        readonly: bool = False,
        map_size: int = DEFAULT_MAP_SIZE,
        check: bool = False,
        walkers: Walkers | None = None,
    ) -> Store:
        """Open (and with ``create``, make) the store at ``path``.

        Opening one store twice in a process is safe: both share one environment.
        ``readonly`` refuses writes through this object, and opens the store in LMDB's
        read-only mode (unless this process has it open for writing already): no write
        transaction, so it never waits for a writer in another process, and nothing is
        written to the store's files; it works on a store this user cannot write. A store
        that needs its tree caught up or its format migrated is refused
        (``store.upgrade``): only a writable open does that (``docs/store.md``, "Readers").

        ``check`` walks every page of the data file before LMDB reads it, and refuses a
        damaged one (``store.corrupted``) that reading could crash on: for a store from
        elsewhere (``sync --from``) or one being verified (``replay --verify``); it costs a
        read of the whole file (``docs/store.md``, "The disk"); ``walkers``, processes that
        take parts of that walk (:mod:`pithlog.store.environment_walk`: replay's workers
        before they start on the piths).
        """
        where = os.fspath(path) if isinstance(path, (str, os.PathLike)) else path
        if not isinstance(where, str):  # None, bytes: a TypeError from os.path, or "\0" in
            raise StoreError("argument", f"Store.open({path!r}): the store path is a str "
                             "or a path-like object of one")  # fmt: skip
        if not where:  # a variable left unset: realpath("") is the current folder
            raise StoreError("argument", "Store.open(''): the store path is empty; give "
                             "the store's folder ('.' for the current one)")  # fmt: skip
        if "\0" in where:  # no file name holds one: os.stat raised ValueError
            raise StoreError("io", f"the store path {where!r} holds a NUL character, which "
                             "no path can: check the path")  # fmt: skip
        for name, flag in (("create", create), ("readonly", readonly), ("check", check)):
            require_bool(flag, "open", name)
        if walkers is not None and not isinstance(walkers, Walkers):
            raise StoreError("argument", f"Store.open(walkers={walkers!r}): walkers is a "
                             "pithlog.store.environment_walk.Walkers, or None")  # fmt: skip
        if not is_int(map_size) or not 0 <= map_size < 1 << 64:
            # LMDB's size_t: py-lmdb raised OverflowError past it
            raise StoreError("argument", f"Store.open(map_size={map_size!r}): the map size "
                             "is a number of bytes from 0 to 2^64 - 1")  # fmt: skip
        shared = acquire(where, create and not readonly, map_size, readonly, check, walkers)
        return cls(shared, readonly)

    def close(self) -> None:
        shared, self._shared = self._shared, None
        if shared is not None:
            release(shared)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    # --- transactions (pithlog.store.environment) -----------------------------------------

    @property
    def _env(self) -> SharedEnvironment:
        if self._shared is None:
            raise StoreError("closed", "the store is closed")
        if self._shared.pid != os.getpid():
            # LMDB: an environment must not be used in a child made by fork(); using the
            # parent's (its reader slots, its writer lock) from here is undefined behaviour
            raise StoreError("forked", f"the Store of {self.path} was opened in the process "
                             "this one was forked from, and LMDB forbids using it in the "
                             "child: start child processes with the spawn method and open "
                             "the store there, or open it in the parent only after "
                             "forking")  # fmt: skip
        return self._shared

    def _write(self, work: Work[T]) -> T:
        """Run ``work`` in one write transaction and commit it durably; a full map is grown
        and ``work`` run again from the start (:meth:`SharedEnvironment.write`)."""
        if self.readonly:
            raise StoreError("readonly", "this store was opened read-only")
        return self._env.write(work)

    def _read(self, work: Work[T]) -> T:
        return self._env.read(work)

    # --- appending (pithlog.store.append_pipeline) ---------------------------------------

    def append(
        self,
        batch: Iterable[Item],
        keyring: Keyring,
        keep_invalid: KeepInvalid = False,
        judging: Judging | None = None,
        change_keyring: bool = True,
    ) -> list[AppendResult]:
        """Append a batch as ONE durable transaction; one :class:`AppendResult` per item.

        Raw bytes, and event dicts (as :func:`pithlog.sign_event` returns them), go
        through the door (refused ones are reported, never stored). A copy
        that fails checks 1-12 is ``rejected`` (not stored) unless ``keep_invalid``, which
        stores it so that it enters the reduction as an invalid event. A second, different
        copy of a stored event_id is resolved by
        :func:`pithlog.protocol.reduce.keep_preferred`. Every pith whose events changed is
        re-reduced in the same transaction. Results are returned only after the commit is
        durable. With ``judging`` (:meth:`judging`, made with the same keyring), a batch
        of raw lines is put through the door and checks 1-12 by its helper processes.

        A keyring other than the store's is first applied as :meth:`apply_keyring` does;
        with ``change_keyring=False`` it is refused instead (``store.keyring_changed``,
        from the write transaction, as is a keyring change under way): for a program whose
        keyring was fixed at its start, such as a server, which must not undo a change
        made beside it (``pithlog rekey``).
        """
        require_keyring(keyring, "append")
        require_keep_invalid(keep_invalid, "append")
        require_bool(change_keyring, "append", "change_keyring")
        append_pipeline.require_append(batch, keyring, judging)  # before the keyring's change
        if change_keyring:
            self.apply_keyring(keyring)
        return append_pipeline.append(self, batch, keyring, keep_invalid, judging)

    def judging(self, keyring: Keyring) -> Judging:
        """Helper processes that judge raw lines (door, checks 1-12, signatures) for
        :meth:`append` ``(..., judging=...)``, one per core, kept between appends: for a
        program that appends many small batches of lines over time, such as a server's
        group commits, so that its own process keeps only the write transactions. They
        start with the first append that uses them; ``close()`` ends them."""
        require_keyring(keyring, "judging")
        # through _env: a closed store is store.closed here, as in every other method
        # (the helpers open the store by its path, and would not notice)
        return Judging(self._env.path, keyring)

    def append_judged(
        self,
        sent: list[SentBatch],
        keyring: Keyring,
        judging: Helpers,
        keep_invalid: KeepInvalid = False,
        change_keyring: bool = True,
    ) -> list[AppendResult]:
        """:meth:`append` of lines already sent to ``judging``
        (:meth:`Judging.send_each`, one batch each), as ONE durable transaction of them
        all in the order given: results in that order, after the commit. The judging
        began when each batch was sent, so that a program receiving batches one at a time
        (a server's group commit) has them judged while the batches before them are
        written; what the store came to hold meanwhile is a duplicate, as in any append.
        ``change_keyring``: as for :meth:`append`."""
        require_keyring(keyring, "append_judged")
        require_keep_invalid(keep_invalid, "append_judged")
        require_bool(change_keyring, "append_judged", "change_keyring")
        append_pipeline.require_judged(sent, keyring, judging)  # before the keyring's change
        if change_keyring:
            self.apply_keyring(keyring)
        return append_pipeline.append_judged(self, sent, keyring, judging, keep_invalid)

    def append_batches(
        self,
        batches: Iterable[Iterable[Item]],
        keyring: Keyring,
        keep_invalid: KeepInvalid = False,
        vet: Vet | None = None,
    ) -> Generator[list[AppendResult], None, None]:
        """:meth:`append` of each batch in turn, as a pipeline: each batch is still ONE
        durable transaction, and its results are yielded after its commit. Meanwhile the
        next batch goes through the door and checks 1-12, its signatures verified in
        helper processes (on a machine with more than one core: from the second batch on
        for batches of :data:`PIPELINE_MIN` or more, from the first for a first batch, a
        list, of :data:`ALONE_POOL_MIN` or more), and the transactions are written and
        committed in a thread of their own, so that a commit's wait for the disk overlaps
        the door's work on the batch after it.

        Nothing of a batch is written before the batches ahead of it are committed, and a
        batch whose transaction fails stops the pipeline before the next one is written.
        When the input fails (an exception from iterating ``batches``), or a batch cannot
        be started (the store refuses it: ``store.item``), or an interrupt comes
        (``KeyboardInterrupt``, ``SystemExit``), the batch being written is finished and
        the batches taken from the input and started after it (at most two) are written,
        in order, each one's results yielded after its commit; then the error is raised.
        The refused batch itself, and anything after it, is never written. This stops at
        the first of those batches whose transaction (or ``vet``) fails, and raises that
        batch's error, the first error as its ``__cause__``: what a batch's own check
        finds (a mirror's ``mirror.copy``) outranks the input's failure (its
        ``mirror.fetch``); an interrupt is raised all the same, not made an exception a
        caller may catch and go on from. A second interrupt while one is waited for is
        raised at once, that batch abandoned as below. When the consumer stops between
        batches, the batch being written is abandoned before its commit if it has not
        reached it (a batch whose results were not yielded is committed only when its
        commit had already begun).

        ``vet``, when given, sees each batch after the door and checks 1-12 and before its
        write transaction (its items and copy hashes, in the batches' order); what it
        raises stops the pipeline before that batch is written.

        A keyring other than the store's is first applied as :meth:`apply_keyring` does
        (when the pipeline starts), or refused."""
        require_keyring(keyring, "append_batches")
        require_keep_invalid(keep_invalid, "append_batches")
        require_callable(vet, "append_batches", "vet")
        if not isinstance(batches, Iterable) or isinstance(batches, (str, bytes, dict)):
            raise StoreError("item", f"Store.append_batches: the batches are a "
                             f"{type(batches).__name__}, not an iterable of batches (lists "
                             "of items)")  # fmt: skip
        self.apply_keyring(keyring)
        return append_batches(self, batches, keyring, keep_invalid, vet)

    def _start_append(
        self,
        batch: Iterable[Item],
        keyring: Keyring,
        executor: Pool | None = None,
        judging: bool = False,
    ) -> Started:
        return start_append(self, batch, keyring, executor, judging)

    def _finish_append(
        self,
        started: Started,
        keyring: Keyring,
        keep_invalid: KeepInvalid,
        abandon: threading.Event | None = None,
        vet: Vet | None = None,
    ) -> list[AppendResult]:
        return finish_append(self, started, keyring, keep_invalid, abandon, vet)

    # --- replay (pithlog.store.replay_processes) ------------------------------------------

    def replay(
        self,
        keyring: Keyring,
        verify: bool = True,
        jobs: int | None = None,
        progress: Progress | None = None,
        early: EarlyWorkers | None = None,
    ) -> ReplayReport:
        """Read the whole log back and report every disagreement (:class:`ReplayReport`).

        Structure first (meta; ``seq`` against the stored copies; ``events``, ``evidence``,
        ``by_pith``, ``piths``, ``states`` against each other), then pith by pith: every
        copy through the door, its event_id and checks 1-12 recomputed (``verify``: for
        real, signatures included; otherwise from the cached verdicts), the preferred copy
        against :func:`~pithlog.protocol.reduce.keep_preferred`, the pith re-reduced and
        compared byte for byte with its cached state. Under a keyring other than the
        store's, preference and cached verdicts are not compared (they belong to the
        store's keyring), so what is reported beyond structure is exactly the piths whose
        state would change.

        ``jobs`` > 1 splits the piths across that many processes (each opens the store
        read-only); the report is the same as with ``jobs=1``. ``None`` (the default): when
        signatures are checked (``verify``, or another keyring), one process per core for
        a log of at least :data:`~pithlog.store.replay_processes.POOL_MIN_COPIES` copies,
        else ``jobs=1``.
        ``early``: workers started before this store was opened
        (:func:`~pithlog.store.replay_processes.early_workers`), used when the replay runs
        in as many processes.
        """
        require_keyring(keyring, "replay")
        require_bool(verify, "replay", "verify")
        require_count(jobs, "replay", "jobs", none=True)
        require_callable(progress, "replay", "progress")
        return replay(self, keyring, verify, jobs, progress, early)

    def _structure(
        self, stack: contextlib.ExitStack, piths: list[str], apart: bool,
        pool: Pool | None = None,
    ) -> Future[list[Discrepancy]]:  # fmt: skip
        return structure(self, stack, piths, apart, pool)

    # --- rebuild under another keyring ----------------------------------------------------

    def rebuild(
        self, keyring: Keyring, progress: Progress | None = None, verify: bool = False
    ) -> dict[str, int]:
        """Re-judge every stored copy under ``keyring``, re-pick the preferred copy of every
        event_id, write every table derived from the log anew (re-reducing every pith) and
        record the keyring: one write transaction, so readers see the old store or the new
        one, never a mixture. A verdict cached under a copy's judge is reused, not checked
        (a keyring change is fast); with ``verify`` every copy is checked again, signatures
        included, and the verdicts written anew: the repair for a damaged ``verdicts``
        (``replay --verify`` names it). Returns counts: copies judged, preferred copies
        changed, piths reduced."""
        require_keyring(keyring, "rebuild")
        require_callable(progress, "rebuild", "progress")
        require_bool(verify, "rebuild", "verify")
        return self._write(rebuild_work(keyring, progress, verify))

    # --- a keyring change, by what it changes (pithlog.store.rekey) -----------------------

    def rekey_plan(
        self, keyring: Keyring, cap: int | None = None, count_events: bool = False
    ) -> rekey.Plan | None:
        """The size of the change to ``keyring``: copies to re-judge (counting stops past
        ``cap``), key_ids changed and, with ``count_events``, the events of the piths to
        re-reduce; ``None`` when the store is under it already."""
        require_keyring(keyring, "rekey_plan")
        require_count(cap, "rekey_plan", "cap", least=0, none=True)
        require_bool(count_events, "rekey_plan", "count_events")
        return self._read(lambda txn, dbs: rekey.plan(txn, dbs, keyring, cap, count_events))

    def apply_keyring(
        self,
        keyring: Keyring,
        limit: int = rekey.INLINE_MAX_COPIES,
        progress: rekey.RekeyProgress | None = None,
        event_limit: int = rekey.INLINE_MAX_EVENTS,
    ) -> rekey.Plan | None:
        """Bring the store under ``keyring`` when the change re-judges at most ``limit``
        copies and re-reduces piths of at most ``event_limit`` events (:meth:`rekey`), else
        refuse with ``store.keyring_changed``, the size of the work and the command that
        does it. What :meth:`append` does first; returns the plan it applied (``None``:
        nothing to do)."""
        require_keyring(keyring, "apply_keyring")
        require_count(limit, "apply_keyring", "limit", least=0)
        require_count(event_limit, "apply_keyring", "event_limit", least=0)
        require_callable(progress, "apply_keyring", "progress")
        return rekey.apply_keyring(self, keyring, limit, progress, event_limit)

    def rekey(
        self,
        keyring: Keyring,
        progress: rekey.RekeyProgress | None = None,
        piece_copies: int = rekey.PIECE_COPIES,
        piece_events: int = rekey.PIECE_EVENTS,
    ) -> dict[str, int]:
        """Bring the store under ``keyring`` by what changed (``docs/store.md``): the
        copies named by the key_ids whose entry changed are judged again and their piths
        re-reduced, in write transactions of ``piece_copies`` copies or about
        ``piece_events`` events; a change interrupted by a crash resumes where its last
        piece committed. ``keyring_digest`` changes with the last piece. Returns counts:
        copies judged, piths re-reduced, pieces."""
        require_keyring(keyring, "rekey")
        require_count(piece_copies, "rekey", "piece_copies")
        require_count(piece_events, "rekey", "piece_events")
        require_callable(progress, "rekey", "progress")
        return rekey.rekey(self, keyring, progress, piece_copies, piece_events)

    # --- transparency: the Merkle tree over the append sequence ---------------------------

    def tree_size(self) -> int:
        """Leaves of the Merkle tree: one per ``seq`` entry (every distinct stored copy)."""
        return self._read(lambda txn, dbs: tree.merkle_size(txn, dbs))

    def tree_root(self, size: int | None = None) -> tuple[int, bytes]:
        """``(size, MTH(D[size]))`` of the log's first ``size`` leaves (default: all), from
        O(log n) stored subtree hashes."""
        return self._read(lambda txn, dbs: tree.tree_root(txn, dbs, size))

    def leaves_of(self, event_id: str) -> list[tuple[int, bytes]]:
        """``(leaf index, copy hash)`` of every stored copy of ``event_id`` (leaf index =
        seq - 1), in append order. Two copies of one event_id are two leaves with the same
        leaf hash."""
        require_str(event_id, "leaves_of", "event_id")
        if not is_event_id(event_id):
            return []
        eid = eid_bytes(event_id)
        return self._read(lambda txn, dbs: tree.leaves_of(txn, dbs, eid))

    def inclusion_path(self, index: int, size: int | None = None) -> tuple[int, list[bytes]]:
        """``(size, PATH(index, D[size]))`` (RFC 9162 2.1.3.1)."""
        return self._read(lambda txn, dbs: tree.inclusion_path(txn, dbs, index, size))

    def consistency_path(self, old: int, new: int | None = None) -> tuple[int, list[bytes]]:
        """``(new, PROOF(old, D[new]))`` (RFC 9162 2.1.4.1)."""
        return self._read(lambda txn, dbs: tree.consistency_path(txn, dbs, old, new))

    def copy_keys(self) -> list[bytes]:
        """Every distinct stored copy as event_id (32) + copy hash (32), in that byte order:
        the items :mod:`pithlog.net.sync` reconciles."""
        return self._read(tree.copy_keys)

    def copy_seqs(self, keys: Iterable[bytes]) -> list[int | None]:
        """The sequence number of each copy named by ``keys`` (``None``: not stored)."""
        wanted = require_items(keys, "copy_seqs", "keys", bytes)
        return self._read(lambda txn, dbs: tree.copy_seqs(txn, dbs, wanted))

    def copies(self, keys: Iterable[bytes]) -> list[tuple[int, bytes]]:
        """``(seq, JCS bytes)`` of the stored copies named by ``keys`` (event_id + copy
        hash), in append order; keys of copies not stored are left out."""
        wanted = require_items(keys, "copies", "keys", bytes)
        return self._read(lambda txn, dbs: tree.copies(txn, dbs, wanted))

    # --- what an equivocation proof carries (pithlog.transparency.evidence) -------------

    def applied_copies_in_tree(
        self, event_ids: Iterable[str], size: int
    ) -> list[tuple[Envelope, int, list[bytes]]]:
        """For each event, its preferred copy (the one states are built from), that copy's
        leaf index and its inclusion path in the tree of ``size`` leaves: what an
        equivocation proof carries (:mod:`pithlog.transparency.evidence`). Raises
        ``proof.not_found`` for a copy that is not a leaf of that tree."""
        wanted = require_event_ids(event_ids, "applied_copies_in_tree")
        require_tree_int(size, "tree size")
        if size < 0:  # else proof.not_found: no copy is a leaf of it
            raise StoreError("tree_size", f"tree size {size} is not between 0 and the store's")
        return leaves.applied_copies_in_tree(self, wanted, size)

