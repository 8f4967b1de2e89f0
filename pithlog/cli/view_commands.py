"""Readable views of a store for people at a terminal: ``show`` (one pith), ``piths`` (the
piths with a state), ``event`` (one stored event); and the pith of an alias, which
``state --alias`` uses too (the store's alias index: one read)."""

from __future__ import annotations

import argparse
import collections
import itertools
import json
from collections.abc import Iterator, Sequence
from typing import Any

from pithlog.cli.edge import StoreParser, open_store
from pithlog.cli.streams import Out
from pithlog.errors import EXIT_OK, StoreError, UsageError, register
from pithlog.protocol.event_types import STATE_LISTS
from pithlog.protocol.events import is_event_id, parse_envelope
from pithlog.protocol.records import is_pith_number
from pithlog.store import PendingPith, Store

register({"store.no_event": "the store holds no copy of that event_id: check it, or see "
          "`pithlog export`"})  # fmt: skip

_FAMILY = {"arxiv": "arxiv", "arxiv_version": "arxiv", "doi": "doi"}


def resolve(store: Store, pith_or_alias: str) -> str:
    """A pith number as given, or the one pith an alias names (``store.no_state`` when
    none does, ``store.ambiguous_alias`` when several do)."""
    if is_pith_number(pith_or_alias):
        return pith_or_alias
    pith = store.pith_for_alias(pith_or_alias)
    if pith is None:
        raise StoreError("no_state", f"no pith with a state has the alias {pith_or_alias}")
    return pith


def printable(text: str) -> str:
    """``text`` for a terminal: each character that is not printable (C0 and C1 controls
    such as ESC and BEL, format characters such as U+202E, separators other than the
    space) written as its escape, ``\\x1b``, ``\\u202e``. A stored event holds whatever
    string the door admits, from whoever signed it or, kept as evidence of invalidity,
    from anyone: written as they were, its escape sequences reached the terminal of whoever
    ran ``show`` or ``event`` (a title set, the screen cleared, text reordered)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def _table(out: Out, rows: Sequence[Sequence[str]]) -> None:
    rows = [[printable(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        line = "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        out.write(line.rstrip().encode("utf-8") + b"\n")


def _by_reason(invalid: list[dict[str, Any]]) -> str:
    counts = collections.Counter(item["reason"] for item in invalid)
    return ", ".join(f"{reason} {n}" for reason, n in sorted(counts.items())) or "none"


def summary_lines(state: dict[str, Any]) -> list[tuple[str, str]]:
    """The summary of a state document ``show`` prints: (label, text) rows."""
    current = state["current"]
    record = current["record_created"]
    source = current["canonical_record"]["source"]
    signer = record["signer"]
    aliases = [f"{_FAMILY.get(a['alias_kind'], 'pith')}:{a['alias_value']}"
               for a in current["source_aliases"]]  # fmt: skip
    applied = [f"{name} {len(current[name])}" for name in STATE_LISTS if current[name]]
    equivocations = [
        f"{e['slot']['event_type']} ({len(e['event_ids'])} events)" for e in state["equivocations"]
    ]
    return [
        ("pith", state["pith_number"]),
        ("record", f"{record['event_id']}: {source['kind']} {source['id']} version "
                   f"{source['version']}"),
        ("recorded", f"{record['created_at']} by {signer['signer_id']} "
                     f"({signer['signer_type']}, key {signer['key_id']})"),
        ("aliases", ", ".join(aliases)),
        ("events", f"{state['event_count']}: {state['valid_event_count']} valid, "
                   f"{state['invalid_event_count']} invalid"),
        ("applied", ", ".join(applied) or "the record only"),
        ("equivocations", f"{state['equivocation_count']}"
                          + (f": {'; '.join(equivocations)}" if equivocations else "")),
        ("invalid", _by_reason(state["invalid_events"])),
        ("state_sha256", state["state_sha256"]),
    ]  # fmt: skip


def cmd_show(args: argparse.Namespace, out: Out) -> int:
    """A summary of one pith's state, for people (``state`` prints the document)."""
    with open_store(args, readonly=True) as store:
        pith = resolve(store, args.pith)
        found = store.lookup(pith)
    if found is None:
        raise StoreError("no_state", f"the store holds no event of {pith}")
    if isinstance(found, PendingPith):
        _table(out, [("pith", pith),
                     ("status", "pending: no valid record_created yet"),
                     ("events", f"{found.event_count}: {found.invalid_event_count} "
                                "invalid")])  # fmt: skip
        return EXIT_OK
    _table(out, summary_lines(json.loads(found)))
    return EXIT_OK


def cmd_piths(args: argparse.Namespace, out: Out) -> int:
    """The piths with a state, one line each, with their counts."""
    head = ("PITH", "EVENTS", "VALID", "INVALID", "EQUIVOCATIONS")

    def rows(store: Store) -> Iterator[tuple[str, ...]]:
        for p in store.each_pith():
            if p["status"] == "state":
                yield (p["pith_number"], str(p["event_count"]), str(p["valid_event_count"]),
                       str(p["invalid_event_count"]), str(p["equivocation_count"]))  # fmt: skip

    # two walks, a thousand piths per read, none of them held: the first sizes the
    # columns, the second prints (a list of every pith's summary is about 540 bytes a pith)
    count = 0
    with open_store(args, readonly=True) as store:
        widths = [len(cell) for cell in head]
        for row in rows(store):
            widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
        for row in itertools.chain([head], rows(store)):
            line = "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True))
            out.write(line.rstrip().encode("utf-8") + b"\n")
            count += row is not head
    out.say(f"piths: {count} with a state (pending ones: pithlog pending)")
    return EXIT_OK


def cmd_event(args: argparse.Namespace, out: Out) -> int:
    """The stored copy of one event, and what the store holds beside it."""
    if not is_event_id(args.event_id):
        raise UsageError("arguments", f"{args.event_id!r} is not an event_id: pass "
                         "sha256: followed by 64 lowercase hex digits")  # fmt: skip
    with open_store(args, readonly=True) as store:
        data = store.event(args.event_id)
        if data is None:
            raise StoreError("no_event", f"the store holds no copy of {args.event_id}")
        evidence = store.evidence(args.event_id)
        leaves = [index for index, _ in store.leaves_of(args.event_id)]
    out.write(data + b"\n")
    event = parse_envelope(data).value
    signer = event.get("signer")
    signer = signer if isinstance(signer, dict) else {}
    out.say(printable(f"event: {_member(event, 'event_type')} of {event['pith_number']}, target "
            f"{_member(event, 'target')}, created {_member(event, 'created_at')} by "
            f"{_member(signer, 'signer_id')} ({_member(signer, 'signer_type')}, key "
            f"{_member(signer, 'key_id')}); {len(evidence)} other copies kept as evidence; "
            f"leaves {', '.join(map(str, leaves))} of the log"))  # fmt: skip
    return EXIT_OK


def _member(obj: dict[str, Any], name: str) -> str:
    """A member of a stored event, for the line about it. The door admits an event with
    only its event_id and pith_number sound, and an invalid one stored as evidence of
    invalidity (``--keep-invalid``, a mirror) may lack any other member or hold another
    type: it is shown as it is (``?`` when missing), not assumed."""
    if name not in obj:
        return "?"
    value = obj[name]
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def add_commands(sub: Any, store_parser: StoreParser) -> None:
    """The subcommand parsers of this group."""
    p = store_parser(
        "show",
        help="a readable summary of one pith",
        description="Print a summary of PITH's state for people: the chosen record, its "
        "aliases, the event counts, what is applied, equivocations, invalid events by "
        "reason. PITH may be an alias (arxiv:ID, arxiv:IDvN, doi:DOI, pith:SHORT). "
        "`pithlog state` prints the state document itself.",
    )
    p.add_argument("pith", metavar="PITH_OR_ALIAS",
                   help="the pith number, or an alias: arxiv:ID, arxiv:IDvN, doi:DOI, "
                   "pith:SHORT")  # fmt: skip
    p.set_defaults(func=cmd_show)

    p = store_parser("piths", help="the piths with a state, with their counts",
                     description="One line per pith with a state: pith number, events, "
                     "valid, invalid, equivocated slots. `pithlog pending` lists the others.")
    p.set_defaults(func=cmd_piths)

    p = store_parser("event", help="print one stored event",
                     description="Print the stored (preferred) copy of EVENT_ID as one JSON "
                     "line; stderr says its type, pith, signer, the other copies kept as "
                     "evidence and its leaves in the log. Exit 2 when it is not stored.")
    p.add_argument("event_id", metavar="EVENT_ID",
                   help="the event: sha256: and 64 hex digits")  # fmt: skip
    p.set_defaults(func=cmd_event)
