"""The commands of the transparency log: ``checkpoint``, ``verify-checkpoint``, ``prove``,
``verify-proof``, ``sync`` (docs/transparency.md)."""

from __future__ import annotations

import argparse
import os
from typing import Any

from pithlog.cli.edge import (
    STORE_HELP,
    Out,
    Parser,
    StoreParser,
    json_line,
    keyring_option,
    open_input,
    open_store,
    read_bytes,
    read_keyring,
    size_arg,
)
from pithlog.cli.evidence_commands import add_prove_equivocation, verify_evidence
from pithlog.cli.witness_commands import add_witness_options, cosigned
from pithlog.errors import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    CheckpointError,
    ProofError,
    UsageError,
)
from pithlog.lines import iter_lines
from pithlog.net.sync import ExportSource, pull, store_responder
from pithlog.protocol.canonical import encode_b64
from pithlog.protocol.events import (
    is_event_id,
)
from pithlog.protocol.keys import (
    load_key_file,
)
from pithlog.store import REFUSED, REJECTED, Store
from pithlog.transparency.checkpoint import Checkpoint, sign_checkpoint, verify_checkpoint
from pithlog.transparency.evidence import evidence_type
from pithlog.transparency.proofs import (
    ConsistencyProof,
    InclusionProof,
    proof_kind,
    verify_consistency_proof,
    verify_inclusion_proof,
)


def cmd_checkpoint(args: argparse.Namespace, out: Out) -> int:
    """Sign a checkpoint of the store's Merkle tree (C2SP tlog-checkpoint)."""
    key = load_key_file(read_bytes(args.key))
    with open_store(args, readonly=True) as store:
        size, root = store.tree_root(size_arg(args.size, "--size"))
        note = sign_checkpoint(Checkpoint(args.origin, size, root), key)
        note = cosigned(args, store, note, size, out)
    out.write(note)
    out.say(f"checkpoint: {args.origin} at tree size {size}, signed by {key.key_id}")
    return EXIT_OK


def _checkpoint_doc(verified: Any) -> dict[str, Any]:
    cp = verified.checkpoint
    return {"origin": cp.origin, "size": cp.size, "root": encode_b64(cp.root),
            "signers": list(verified.signers)}  # fmt: skip


def cmd_verify_checkpoint(args: argparse.Namespace, out: Out) -> int:
    """Verify a signed checkpoint against a keyring (and, with --check-store, the store)."""
    keyring = read_keyring(args.keyring)
    verified = verify_checkpoint(read_bytes(args.checkpoint), keyring, args.origin)
    cp = verified.checkpoint
    if args.check_store:
        with open_store(args, readonly=True) as store:
            held = store.tree_size()
            if cp.size > held:
                raise CheckpointError("diverged", f"the checkpoint is of size {cp.size}; the "
                                      f"store holds {held} leaves")  # fmt: skip
            _, root = store.tree_root(cp.size)
        if root != cp.root:
            raise CheckpointError("diverged", f"the store's root at size {cp.size} is "
                                  f"{encode_b64(root)}, the checkpoint's {encode_b64(cp.root)}")
    out.write(json_line(_checkpoint_doc(verified)))
    held_too = ", and the store holds that tree" if args.check_store else ""
    out.say(f"verify-checkpoint: {cp.origin} at size {cp.size} signed by "
            f"{', '.join(verified.signers)}{held_too}")  # fmt: skip
    return EXIT_OK


def cmd_prove_inclusion(args: argparse.Namespace, out: Out) -> int:
    """Write a tlog-proof@v1 that EVENT_ID is in the store's log."""
    if not is_event_id(args.event_id):
        raise ProofError("event_id", f"{args.event_id!r} is not an event_id")
    key = load_key_file(read_bytes(args.key))
    with open_store(args, readonly=True) as store:
        size, root = store.tree_root(size_arg(args.size, "--size"))
        leaves = [leaf for leaf in store.leaves_of(args.event_id) if leaf[0] < size]
        if not leaves:
            raise ProofError("not_found", f"no copy of {args.event_id} among the first {size} "
                             "leaves of the store's log")  # fmt: skip
        _, path = store.inclusion_path(leaves[0][0], size)
    checkpoint = sign_checkpoint(Checkpoint(args.origin, size, root), key)
    extra = bytes.fromhex(args.event_id[len("sha256:") :]) + leaves[0][1]
    out.write(InclusionProof(leaves[0][0], tuple(path), checkpoint, extra).encoded())
    out.say(f"prove inclusion: {args.event_id} is leaf {leaves[0][0]} of {size} "
            f"({len(path)} hashes)")  # fmt: skip
    return EXIT_OK


def cmd_prove_consistency(args: argparse.Namespace, out: Out) -> int:
    """Print the RFC 9162 consistency proof between two tree sizes of the store's log."""
    size_arg(args.old, "OLD")
    with open_store(args, readonly=True) as store:
        new, path = store.consistency_path(args.old, size_arg(args.new, "NEW"))
    out.write(ConsistencyProof(args.old, new, tuple(path)).encoded())
    out.say(f"prove consistency: {args.old} -> {new} ({len(path)} hashes)")
    return EXIT_OK


def cmd_verify_proof(args: argparse.Namespace, out: Out) -> int:
    """Verify an inclusion or a consistency proof offline, against signed checkpoints."""
    keyring = read_keyring(args.keyring)
    data = read_bytes(args.proof)
    kind = evidence_type(data)
    if kind is not None:
        if args.checkpoints or args.event_id:
            raise UsageError("arguments", "an evidence file carries its checkpoint and events: "
                             "give neither checkpoint files nor --event-id")  # fmt: skip
        return verify_evidence(data, kind, keyring, args.origin, out)
    if proof_kind(data) == "inclusion":
        if args.checkpoints:
            raise UsageError("arguments", "an inclusion proof carries its checkpoint: give "
                             "no checkpoint files")  # fmt: skip
        proven = verify_inclusion_proof(data, keyring, args.event_id, args.origin)
        doc = {"proof": "inclusion", "event_id": proven.event_id,
               "copy_sha256": proven.copy_sha256, "index": proven.index,
               **_checkpoint_doc(proven.checkpoint)}  # fmt: skip
        out.write(json_line(doc))
        cp = proven.checkpoint.checkpoint
        out.say(f"verify-proof: {proven.event_id} is leaf {proven.index} of {cp.origin} at "
                f"size {cp.size}")  # fmt: skip
        return EXIT_OK
    if len(args.checkpoints) != 2:
        raise UsageError("arguments", "a consistency proof is checked against two checkpoint "
                         "files: OLD_CHECKPOINT NEW_CHECKPOINT")  # fmt: skip
    old, new = verify_consistency_proof(data, read_bytes(args.checkpoints[0]),
                                        read_bytes(args.checkpoints[1]), keyring,
                                        args.origin)  # fmt: skip
    a, b = old.checkpoint, new.checkpoint
    out.write(json_line({"proof": "consistency", "origin": a.origin, "old": a.size,
                          "new": b.size, "old_root": encode_b64(a.root),
                          "new_root": encode_b64(b.root)}))  # fmt: skip
    out.say(f"verify-proof: {a.origin} at size {b.size} extends itself at size {a.size}")
    return EXIT_OK


def cmd_sync(args: argparse.Namespace, out: Out) -> int:
    """Bring into the store the copies a store folder or an export file holds."""
    keyring = read_keyring(args.keyring)
    if args.batch_size < 1:
        raise UsageError("arguments", "--batch-size must be at least 1")
    source = args.source
    refused = 0
    with open_store(args, create=True) as store:
        if os.path.isdir(source):
            with Store.open(source, create=False, readonly=True, check=True) as other:
                report = pull(store, store_responder(other), keyring,
                              keep_invalid=args.keep_invalid, batch=args.batch_size)
        else:
            with open_input(source) as stream:
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
    out.write(json_line(doc))
    shown = ", ".join(f"{n} {status}" for status, n in sorted(report.statuses.items()))
    out.say(f"sync: {report.needed} copies needed of {report.remote_items} "
            f"({shown or 'nothing to do'}); {report.rounds} rounds, "
            f"{report.bytes_exchanged} bytes exchanged")  # fmt: skip
    bad = report.statuses.get(REJECTED, 0) + report.statuses.get(REFUSED, 0) + refused
    if report.statuses.get(REJECTED, 0):
        out.say("sync: rejected copies fail checks 1-12 here; pass --keep-invalid to hold "
                "them as the source does")  # fmt: skip
    return EXIT_BAD_INPUT if bad else EXIT_OK


def add_commands(sub: Any, store_parser: StoreParser) -> None:
    """The subcommand parsers of this group."""
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
    add_witness_options(p)
    p.set_defaults(func=cmd_checkpoint)

    p = store_parser(
        "verify-checkpoint",
        help="verify a signed checkpoint against a keyring",
        description="Verify a checkpoint: its note syntax, and a valid signature by a "
        "keyring key allowed to sign for its origin (docs/transparency.md). Prints "
        '{"origin", "size", "root", "signers"} and exits 0; exits 1 when it is not trusted. '
        "With --check-store, also requires the store's tree at that size to have that root.",
    )
    keyring_option(p)
    p.add_argument("--origin", metavar="NAME", help="require this origin")
    p.add_argument("--check-store", action="store_true",
                   help="also check the checkpoint against the store (--store)")  # fmt: skip
    p.add_argument("checkpoint", metavar="CHECKPOINT", help="checkpoint file, or -")
    p.set_defaults(func=cmd_verify_checkpoint)

    p = store_parser("prove", help="write an inclusion or a consistency proof",
                     description="Proofs over the store's Merkle tree (docs/transparency.md).")
    kinds = p.add_subparsers(dest="kind", metavar="KIND", parser_class=Parser)
    kinds.required = True
    q = kinds.add_parser(
        "inclusion",
        help="a C2SP tlog-proof@v1 that an event is in the log",
        description="Print a c2sp.org/tlog-proof@v1: the leaf data (extra: the event_id and "
        "the SHA-256 of its copy), the index of its "
        "first copy in the log, the RFC 9162 inclusion path and a checkpoint of the tree of "
        "--size leaves (default: all) signed with KEYFILE for ORIGIN.",
    )
    q.add_argument("--store", metavar="DIR", default=argparse.SUPPRESS, help=STORE_HELP)
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
    q.add_argument("--store", metavar="DIR", default=argparse.SUPPRESS, help=STORE_HELP)
    q.add_argument("old", type=int, metavar="OLD")
    q.add_argument("new", type=int, metavar="NEW", nargs="?")
    q.set_defaults(func=cmd_prove_consistency)
    add_prove_equivocation(kinds)

    p = sub.add_parser(
        "verify-proof",
        help="verify an inclusion or consistency proof, or an evidence file, offline",
        description="Verify a proof without the store. An evidence file (an equivocation "
        "proof, docs/evidence.md) carries its events and checkpoint; so does an inclusion "
        "proof (tlog-proof@v1): "
        "carries its checkpoint: the checkpoint is verified against KEYRING, then the event's "
        "leaf against its root. A consistency proof needs the two checkpoints it joins, "
        "OLD_CHECKPOINT and NEW_CHECKPOINT, both verified against KEYRING. Exit 0 when the "
        "proof holds, 1 when it does not, 2 for unreadable input.",
    )
    keyring_option(p)
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
    keyring_option(p)
    p.add_argument("--keep-invalid", action="store_true",
                   help="store copies that fail checks 1-12, as the source may")  # fmt: skip
    p.add_argument("--batch-size", type=int, default=1000, metavar="N",
                   help="copies per fetch and per transaction (default 1000)")  # fmt: skip
    p.set_defaults(func=cmd_sync)
