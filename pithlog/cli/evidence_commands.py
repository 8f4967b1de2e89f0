"""Evidence for auditors: ``prove equivocation`` writes a portable equivocation proof, and
``verify-proof`` checks one offline (docs/evidence.md)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from pithlog.cli.edge import STORE_HELP, json_line, keyring_option, open_store
from pithlog.cli.streams import Out, read_key_file, read_keyring
from pithlog.errors import EXIT_OK, EvidenceError, StoreError, UsageError, shown
from pithlog.protocol.keys import Keyring
from pithlog.protocol.records import is_pith_number
from pithlog.transparency.checkpoint import Checkpoint, sign_checkpoint
from pithlog.transparency.evidence import (
    EQUIVOCATION_PROOF,
    SPLIT_VIEW_PROOF,
    Included,
    equivocation_proof,
    verify_equivocation_proof,
    verify_split_view_proof,
)


def cmd_prove_equivocation(args: argparse.Namespace, out: Out) -> int:
    """Write a pith-equivocation-proof of one equivocated slot of PITH."""
    if not is_pith_number(args.pith):
        raise UsageError("arguments", f"{args.pith!r} is not a pith number")
    key = read_key_file(args.key, out)
    keyring = read_keyring(args.keyring)
    with open_store(args, readonly=True) as store:
        stored = store.keyring_digest()
        if stored not in (None, keyring.digest):
            # the keys in the proof must be those the states were judged under
            raise StoreError("keyring_changed", f"the store's states were reduced under "
                             f"keyring {(stored or '')[:16]}, not --keyring's "
                             f"({keyring.digest[:16]}): give the keyring the store was "
                             "reduced under (pithlog stats: keyring_digest; pithlog keyring "
                             "digest KEYRING), or bring the store under this one first with "
                             "pithlog rekey --keyring KEYRING")  # fmt: skip
        if store.rekey_plan(keyring, cap=0) is not None:
            # a change under way: some piths are already reduced under its target keyring
            # (docs/store.md, "What reads see meanwhile"), whose keys --keyring may lack
            raise StoreError("keyring_changed", "a keyring change is under way in the store "
                             "(pithlog stats: rekey_target): finish it with `pithlog rekey "
                             "--keyring` and prove under its keyring")  # fmt: skip
        state = store.state(args.pith)
        if state is None:
            raise EvidenceError("no_equivocation", f"pith {args.pith} has no state in the "
                                "store (unknown or pending)")  # fmt: skip
        slots: list[dict[str, Any]] = json.loads(state)["equivocations"]
        slot = _chosen(slots, args.slot, args.pith)
        size, root = store.tree_root(None)
        found = store.applied_copies_in_tree(slot["event_ids"], size)
    envelopes = [envelope for envelope, _, _ in found]
    places = [Included(index, tuple(path)) for _, index, path in found]
    keys = [keyring[k].entry() for k in sorted({e.value['signer']['key_id'] for e in envelopes})]
    checkpoint = sign_checkpoint(Checkpoint(args.origin, size, root), key)
    proof, kept = equivocation_proof(args.pith, envelopes, keys, checkpoint, places)
    out.write(proof)
    # a proof holds the first 64 of a slot at most, as many as fit in its file limit
    events = (f"{kept} events" if kept == len(envelopes) else
              f"{kept} of the {len(envelopes)} events")  # fmt: skip
    out.say(f"prove equivocation: {events} of slot {_slot_text(slot['slot'])} "
            f"of {args.pith}, included in {args.origin} at tree size {size}")  # fmt: skip
    return EXIT_OK


def _chosen(slots: list[dict[str, Any]], number: int | None, pith: str) -> dict[str, Any]:
    if not slots:
        raise EvidenceError("no_equivocation", f"pith {pith} has no equivocated slot")
    if number is None:
        if len(slots) > 1:
            raise UsageError("arguments", f"pith {pith} has {len(slots)} equivocated slots: "
                             f"give --slot 1 to {len(slots)} (their order in the state's "
                             "equivocations)")  # fmt: skip
        return slots[0]
    if not 1 <= number <= len(slots):
        raise EvidenceError("no_equivocation", f"pith {pith} has {len(slots)} equivocated "
                            f"slot(s); --slot {number} is not one of them")  # fmt: skip
    return slots[number - 1]


def _slot_text(slot: dict[str, Any]) -> str:
    if slot["event_type"] == "record_created":
        return "record_created"
    return (f"({slot['event_type']}, {shown(slot['target'])}, {shown(slot['key_id'])}, "
            f"{slot['created_at']})")  # fmt: skip


def verify_evidence(data: bytes, kind: str, keyring: Keyring, origin: str | None,
                    out: Out) -> int:  # fmt: skip
    """``verify-proof`` of a JSON evidence file whose evidence_type is ``kind``."""
    if kind == SPLIT_VIEW_PROOF:
        split = verify_split_view_proof(data, keyring, origin)
        out.write(json_line({"proof": SPLIT_VIEW_PROOF, "origin": split.origin,
                             "sizes": list(split.sizes),
                             "signers": [list(keys) for keys in split.signers],
                             "how": split.how}))  # fmt: skip
        out.say(f"verify-proof: {split.describe()}")
        return EXIT_OK
    if kind != EQUIVOCATION_PROOF:
        raise EvidenceError("malformed", f"evidence_type {kind!r} is not one pithlog knows "
                            f"({EQUIVOCATION_PROOF}, {SPLIT_VIEW_PROOF})")  # fmt: skip
    proven = verify_equivocation_proof(data, keyring, origin)
    cp = proven.checkpoint.checkpoint
    out.write(json_line({
        "proof": EQUIVOCATION_PROOF, "pith_number": proven.pith_number, "slot": proven.slot,
        "event_ids": list(proven.event_ids), "signers": list(proven.signers),
        "origin": cp.origin, "size": cp.size,
    }))  # fmt: skip
    out.say(f"verify-proof: {proven.describe()}")
    return EXIT_OK


def add_prove_equivocation(kinds: Any) -> None:
    """``prove equivocation``, beside ``prove inclusion`` and ``prove consistency``."""
    q = kinds.add_parser(
        "equivocation",
        help="a portable proof that a signer filled one slot twice, and the log has both",
        description="Print a pith-equivocation-proof (docs/evidence.md): the envelopes of one "
        "equivocated slot of PITH exactly as logged (64 at most, as many as fit in an "
        "evidence file's 64 MiB), the keyring entries of their keys, and for each an "
        "inclusion proof under a checkpoint of the whole tree signed with KEYFILE "
        "for ORIGIN. --slot N picks the Nth of the state's equivocations (needed when there "
        "are several). Check it anywhere with `pithlog verify-proof --keyring K FILE`.",
    )
    q.add_argument("--store", metavar="DIR", default=argparse.SUPPRESS, help=STORE_HELP)
    q.add_argument("pith", metavar="PITH", help="the pith number")
    q.add_argument("--slot", type=int, metavar="N",
                   help="which equivocated slot, from 1, in the state's order")  # fmt: skip
    q.add_argument("--key", required=True, metavar="KEYFILE",
                   help="the log's signing key, for the checkpoint")  # fmt: skip
    q.add_argument("--origin", required=True, metavar="NAME", help="the log's origin")
    keyring_option(q)
    q.set_defaults(func=cmd_prove_equivocation)
