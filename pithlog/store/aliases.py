"""The alias index of a store (``docs/store.md``, "The alias index"): from the source
aliases of each pith's chosen record (spec 8, ``current.source_aliases``) to the pith, so
that ``arxiv:2411.00284`` finds its pith in one read.

Database ``aliases``: key ``ALIAS + 0x00 + pith`` (ASCII), value empty. ``ALIAS`` is the
lookup form of an alias, ``family:value``:

==================  =================================================
alias_kind          lookup form
==================  =================================================
``arxiv``           ``arxiv:2411.00284``
``arxiv_version``   ``arxiv:2411.00284v2``
``doi``             ``doi:10.48550/arxiv.2411.00284`` (ASCII lower case)
``pith_short_N``    ``pith:4F47WZKM`` (8, 12 and 16 characters)
==================  =================================================

Several piths may hold one alias (the records of two versions of a paper share
``arxiv:ID``): each has its own key, and a lookup reads the keys under ``ALIAS + 0x00``
with one cursor seek. The index follows the chosen record of every pith in the append
transaction (:func:`follow`), is rebuilt whole by a rebuild and by the migration of a store
of format 2 (:func:`rebuild_aliases`), and replay compares it with what the cached states
imply (:func:`check_aliases`).
"""

from __future__ import annotations

from typing import Any

import msgspec

from pithlog.errors import StoreError, register
from pithlog.protocol.events import readmit
from pithlog.protocol.records import is_pith_number
from pithlog.protocol.state import source_aliases
from pithlog.protocol.text_forms import lower_ascii
from pithlog.store.layout import Txn, eid_bytes, event_copy
from pithlog.store.replay_report import Discrepancy
from pithlog.store.stateindex import stored_summary

register({
    "store.alias": "an alias is arxiv:<id>, arxiv:<id>v<N>, doi:<doi> or pith:<the first 8, "
    "12 or 16 characters of a pith number's last part>",
    "store.ambiguous_alias": "the alias names several piths: give a more precise alias "
    "(arxiv:<id>v<N>) or the pith number",
})  # fmt: skip

FAMILY = {
    "arxiv": "arxiv",
    "arxiv_version": "arxiv",
    "doi": "doi",
    "pith_short_8": "pith",
    "pith_short_12": "pith",
    "pith_short_16": "pith",
}
"""``alias_kind`` (spec 8) -> the family written before the colon of the lookup form."""

SEP = b"\x00"


def lookup_form(alias: str) -> bytes:
    """The index key prefix of an alias a person typed, normalized: DOIs in ASCII lower
    case, pith shorts in upper case. Raises ``store.alias`` for anything else."""
    if not isinstance(alias, str):
        raise StoreError("alias", f"{alias!r} is not an alias: give a str, such as "
                         "arxiv:<id>, arxiv:<id>v<N>, doi:<doi> or pith:<8, 12 or 16 "
                         "characters>")  # fmt: skip
    family, colon, value = alias.partition(":")
    family = family.lower()
    if not colon or not value or family not in ("arxiv", "doi", "pith") or "\x00" in value:
        raise StoreError("alias", f"{alias!r} is not an alias: use arxiv:<id>, "
                         "arxiv:<id>v<N>, doi:<doi> or pith:<8, 12 or 16 characters>")
    if family == "doi":
        value = lower_ascii(value)
    elif family == "pith":
        if ":" in value:
            raise StoreError("alias", f"{alias!r} is a pith number, not an alias: use it "
                             "as it is")  # fmt: skip
        value = value.upper()
    try:
        return f"{family}:{value}".encode()
    except UnicodeEncodeError:  # a lone surrogate (json.loads makes one of "\ud800")
        raise StoreError("alias", f"{alias!r} is not an alias: it holds a lone surrogate, "
                         "which no alias does") from None  # fmt: skip


def record_aliases(record_data: bytes) -> list[bytes]:
    """The lookup forms of the source aliases of a stored ``record_created`` copy."""
    payload = readmit(record_data).value["payload"]
    found = source_aliases(payload["canonical_record"], payload["canonical_sha256"], "")
    return [f"{FAMILY[a['alias_kind']]}:{a['alias_value']}".encode() for a in found]


def chosen(txn: Txn, dbs: dict[str, Any], pith: str) -> str | None:
    """The event_id of the chosen record of ``pith`` (``None``: no state)."""
    raw = txn.get(pith.encode("ascii"), db=dbs["piths"])
    if raw is None:
        return None
    record: str | None = stored_summary(raw, pith).get("record")
    return record


def _keys(txn: Txn, dbs: dict[str, Any], pith: str, record: str | None) -> set[bytes]:
    if record is None:
        return set()
    data = event_copy(txn, dbs, eid_bytes(record))
    if data is None:
        raise StoreError("corrupted", f"the chosen record of {pith} is not in events; run "
                         "`pithlog replay --verify`")  # fmt: skip
    try:
        found = record_aliases(data)
    except (KeyError, TypeError) as exc:  # events names another copy than a record's
        raise StoreError("corrupted", f"the chosen record of {pith}, {record}, is not a "
                         "stored record_created; run `pithlog replay --verify`") from exc
    return {alias + SEP + pith.encode("ascii") for alias in found}


def follow(txn: Txn, dbs: dict[str, Any], pith: str, before: str | None) -> None:
    """After ``pith`` was re-reduced in this transaction: its alias keys follow its chosen
    record, which was ``before`` (an event_id, or ``None``)."""
    after = chosen(txn, dbs, pith)
    if after == before:
        return
    old, new = _keys(txn, dbs, pith, before), _keys(txn, dbs, pith, after)
    for key in old - new:
        txn.delete(key, db=dbs["aliases"])
    for key in new - old:
        txn.put(key, b"", db=dbs["aliases"])


def expected_keys(
    txn: Txn, dbs: dict[str, Any], damaged: set[str] | None = None
) -> set[bytes]:
    """Every alias key the cached states imply. With ``damaged``, a pith whose summary
    cannot be read is added to it and skipped (replay reports it as index damage)."""
    keys: set[bytes] = set()
    for raw_pith, raw in txn.cursor(db=dbs["piths"]):
        pith = raw_pith.decode("ascii", "replace")
        try:
            summary = msgspec.json.decode(raw)
            if "status" not in summary:
                raise KeyError("status")
            keys |= _keys(txn, dbs, pith, summary.get("record"))
        except (StoreError, KeyError, ValueError, TypeError, AttributeError,
                msgspec.MsgspecError):  # fmt: skip
            if damaged is None:
                raise
            damaged.add(pith)
    return keys


def rebuild_aliases(txn: Txn, dbs: dict[str, Any]) -> int:
    """Write the alias index anew from the cached states; returns its number of keys."""
    cursor = txn.cursor(db=dbs["aliases"])
    found = cursor.first()
    while found:
        found = cursor.delete()
    keys = expected_keys(txn, dbs)
    for key in sorted(keys):
        txn.put(key, b"", db=dbs["aliases"])
    return len(keys)


def piths_for(txn: Txn, dbs: dict[str, Any], alias: bytes) -> list[str]:
    """The piths whose chosen record has the alias (lookup form), in pith order."""
    prefix = alias + SEP
    out: list[str] = []
    cursor = txn.cursor(db=dbs["aliases"])
    found = cursor.set_range(prefix)
    while found and cursor.key().startswith(prefix):
        pith = cursor.key()[len(prefix) :].decode("ascii", "replace")
        if is_pith_number(pith):
            out.append(pith)
        found = cursor.next()
    return out


def check_aliases(txn: Txn, dbs: dict[str, Any], found: list[Discrepancy]) -> None:
    """Replay: the alias index holds exactly the keys the cached states imply."""
    damaged: set[str] = set()
    expected = expected_keys(txn, dbs, damaged)
    stored = {key for key in txn.cursor(db=dbs["aliases"]).iternext(values=False)
              if key.partition(SEP)[2].decode("ascii", "replace") not in damaged}  # fmt: skip
    for key in sorted(expected - stored):
        alias, _, pith = key.partition(SEP)
        found.append(Discrepancy("aliases", pith.decode("ascii", "replace"),
                                 f"alias {alias.decode('ascii', 'replace')} is missing "
                                 "from the alias index"))  # fmt: skip
    for key in sorted(stored - expected):
        alias, _, pith = key.partition(SEP)
        found.append(Discrepancy("aliases", pith.decode("ascii", "replace"),
                                 f"the alias index holds {alias.decode('ascii', 'replace')}, "
                                 "which its state does not have"))  # fmt: skip
