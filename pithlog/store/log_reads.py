"""The methods of :class:`pithlog.store.Store` that read the log's contents
(``docs/api.md``): a pith's state, status or pending record, the piths an alias names, an
event's preferred copy and its evidence, the piths (all at once, or chunk by chunk), their
totals, the keyring digest, the export in chunks of short transactions, the counts of
``stats``. :class:`ContentReads` holds them apart from the facade's other methods, each
handing its work to :mod:`~pithlog.store.reads` (or :mod:`~pithlog.store.aliases`,
:mod:`~pithlog.store.layout`); :class:`~pithlog.store.log.Store` inherits them and provides
the transactions they run in."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, TypeVar, cast

from pithlog.errors import StoreError
from pithlog.protocol.events import is_event_id
from pithlog.protocol.records import is_pith_number
from pithlog.store import aliases, reads
from pithlog.store.arguments import require_count, require_int, require_str
from pithlog.store.environment import Work
from pithlog.store.layout import META_KEYRING, eid_bytes, event_copy, evidence_of
from pithlog.store.lookup import PendingPith, require_pith_number

if TYPE_CHECKING:
    from pithlog.store.log import Store

T = TypeVar("T")


class ContentReads:
    """Reads of the log's contents, over :meth:`_read`. The chunked reads and ``stats``
    hand their :class:`~pithlog.store.log.Store` (the one class that inherits these) to
    :mod:`~pithlog.store.reads`, which opens a transaction per chunk or reads the map."""

    def _read(self, work: Work[T]) -> T:  # provided by Store
        raise NotImplementedError

    # --- reading --------------------------------------------------------------------------

    def state(self, pith_number: str) -> bytes | None:
        """The cached state document of a pith (exactly what ``pithlog reduce`` prints for
        it, without the newline), or ``None`` when it has none (unknown or pending: see
        :meth:`lookup` to tell them apart). A string that is not a pith number raises
        :class:`StoreError` ``store.pith_number``."""
        require_pith_number(pith_number)
        # one snapshot: a record committed between a state read and a status read would
        # make a pith with a state look pending
        return self._read(lambda txn, dbs: reads.state(txn, dbs, pith_number))

    def lookup(self, pith_number: str) -> bytes | PendingPith | None:
        """What the store knows of a pith: its state document (bytes, as :meth:`state`), a
        :class:`PendingPith` (events, but no valid record_created yet), or ``None`` (no
        event of it). Raises ``store.pith_number`` for a string that is not a pith number."""
        require_pith_number(pith_number)
        # one snapshot: a record committed between a state read and a status read would
        # make a pith with a state look pending
        return self._read(lambda txn, dbs: reads.state(txn, dbs, pith_number)
                          or _pending(reads.status(txn, dbs, pith_number)))  # fmt: skip

    def piths_for_alias(self, alias: str) -> list[str]:
        """The piths whose chosen record has ``alias`` (``arxiv:2411.00284``,
        ``arxiv:2411.00284v2``, ``doi:...``, ``pith:4F47WZKM``), in pith order: one cursor
        seek in the alias index (:mod:`pithlog.store.aliases`). Raises ``store.alias`` for
        a string that is not of those forms."""
        key = aliases.lookup_form(alias)
        return self._read(lambda txn, dbs: aliases.piths_for(txn, dbs, key))

    def pith_for_alias(self, alias: str) -> str | None:
        """The one pith whose chosen record has ``alias``, or ``None``; raises
        ``store.ambiguous_alias`` when several do (two versions of a paper share
        ``arxiv:ID``: ask for ``arxiv:IDvN``)."""
        piths = self.piths_for_alias(alias)
        if len(piths) > 1:
            raise StoreError("ambiguous_alias", f"{alias} names {len(piths)} piths: "
                             f"{', '.join(piths)}; give a more precise alias or the pith "
                             "number")  # fmt: skip
        return piths[0] if piths else None

    def event(self, event_id: str) -> bytes | None:
        """The preferred copy stored under ``event_id`` (JCS bytes), or ``None``."""
        require_str(event_id, "event", "event_id")
        if not is_event_id(event_id):
            return None
        key = eid_bytes(event_id)
        return self._read(lambda txn, dbs: event_copy(txn, dbs, key))

    def invalid_reason(self, pith_number: str, event_id: str) -> str | None:
        """The reason code (spec 6) for which the reduction of ``pith_number`` holds
        ``event_id`` invalid, or ``None`` (valid, or no event of that pith): one read of the
        ``invalid`` index. A kept invalid copy names any signer it likes; whoever shows it
        must say it is invalid."""
        require_str(pith_number, "invalid_reason", "pith_number")
        require_str(event_id, "invalid_reason", "event_id")
        if not is_pith_number(pith_number) or not is_event_id(event_id):
            return None
        key = pith_number.encode("ascii") + eid_bytes(event_id)
        raw = self._read(lambda txn, dbs: txn.get(key, db=dbs["invalid"]))
        return None if raw is None else bytes(raw).decode("ascii")

    def evidence(self, event_id: str) -> list[bytes]:
        """The other copies kept under ``event_id`` (evidence), in copy-hash order."""
        require_str(event_id, "evidence", "event_id")
        if not is_event_id(event_id):
            return []
        key = eid_bytes(event_id)
        return self._read(lambda txn, dbs: [v for _, _, v in evidence_of(txn, dbs, key)])

    def status(self, pith_number: str) -> dict[str, Any] | None:
        """The ``piths`` entry of a pith: status, event counts (``None`` when unknown)."""
        require_str(pith_number, "status", "pith_number")
        if not is_pith_number(pith_number):
            return None
        return self._read(lambda txn, dbs: reads.status(txn, dbs, pith_number))

    def piths(self) -> list[dict[str, Any]]:
        """Every pith with its status, sorted by pith_number."""
        return self._read(reads.piths)

    def each_pith(self, chunk: int = 1000) -> Iterator[dict[str, Any]]:
        """What :meth:`piths` lists, one summary at a time, read ``chunk`` piths per short
        transaction: a walk over a million piths holds one chunk, not the list."""
        require_count(chunk, "each_pith", "chunk")  # the piths read in one transaction
        return reads.each_pith(cast("Store", self), chunk)

    def pith_totals(self) -> dict[str, int]:
        """Counts over every pith in one snapshot: ``piths`` (with a state), ``pending``,
        and their ``events``, ``invalid`` events and ``equivocations``."""
        return self._read(reads.pith_totals)

    def pending(self) -> list[dict[str, Any]]:
        """Piths whose events hold no valid record_created yet (spec 7 step 2)."""
        return [p for p in self.each_pith() if p["status"] == "pending"]

    def keyring_digest(self) -> str | None:
        """Digest of the keyring the cached states were reduced under (``None``: empty)."""
        raw = self._read(lambda txn, dbs: txn.get(META_KEYRING, db=dbs["meta"]))
        return None if raw is None else raw.hex()

    def export(self, after: int = 0, chunk: int = 1000) -> Iterator[tuple[int, bytes]]:
        """Every distinct stored envelope (preferred copies and evidence) in append order,
        as ``(seq, JCS bytes)``, starting after sequence number ``after``. Each chunk is read
        in its own short transaction, so an export does not pin old pages for long."""
        require_int(after, "export", "after")  # a float raised struct.error when packed
        require_count(chunk, "export", "chunk")  # 0 read nothing, and then indexed it
        return reads.export(cast("Store", self), after, chunk)

    def stats(self) -> dict[str, Any]:
        """Counts, sizes and map use, as a JSON object."""
        return reads.stats(cast("Store", self))


def _pending(status: dict[str, Any] | None) -> PendingPith | None:
    return None if status is None else PendingPith.of(status)
