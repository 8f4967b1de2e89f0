"""The commands of the transparency log: ``checkpoint``, ``verify-checkpoint``, ``prove``,
``verify-proof`` (docs/transparency.md); ``sync`` is :mod:`pithlog.cli.sync_commands`."""

from __future__ import annotations

import argparse
import hashlib
from typing import Any

from pithlog.cli.edge import (
    STORE_HELP,
    CommandParser,
    StoreParser,
    json_line,
    keyring_option,
    open_store,
    size_arg,
)
from pithlog.cli.evidence_commands import add_prove_equivocation, verify_evidence
from pithlog.cli.streams import Out, read_bytes, read_key_file, read_keyring
from pithlog.cli.witness_commands import add_witness_options, check_cosigning, cosigned
from pithlog.errors import (
    EXIT_OK,
    CheckpointError,
    ProofError,
    UsageError,
    shown,
)
from pithlog.protocol.events import is_event_id, parse_envelope
from pithlog.protocol.text_forms import encode_b64
from pithlog.store import Store
from pithlog.transparency.checkpoint import (
    MAX_NOTE_BYTES,
    Checkpoint,
    parse_checkpoint_text,
    parse_note,
    sign_checkpoint,
    verify_checkpoint,
)
from pithlog.transparency.diverge import first_difference
from pithlog.transparency.evidence import MAX_EVIDENCE_BYTES, evidence_type
from pithlog.transparency.proofs import (
    MAX_PROOF_BYTES,
    ConsistencyProof,
    InclusionProof,
    proof_kind,
    verify_consistency_proof,
    verify_inclusion_proof,
)


def cmd_checkpoint(args: argparse.Namespace, out: Out) -> int:
    """Sign a checkpoint of the store's Merkle tree (C2SP tlog-checkpoint)."""
    check_cosigning(args)  # before any work
    key = read_key_file(args.key, out)
    with open_store(args, readonly=True) as store:
        size, root = store.tree_root(size_arg(args.size, "--size"))
        note = sign_checkpoint(Checkpoint(args.origin, size, root), key)
        note = cosigned(args, store, note, size, out)
    out.write(note)
    out.say(f"checkpoint: {shown(args.origin)} at tree size {size}, signed by "
            f"{shown(key.key_id)}")  # fmt: skip
    return EXIT_OK


def _checkpoint_doc(verified: Any) -> dict[str, Any]:
    cp = verified.checkpoint
    return {"origin": cp.origin, "size": cp.size, "root": encode_b64(cp.root),
            "signers": list(verified.signers)}  # fmt: skip


def _where_they_part(
    args: argparse.Namespace, store: Store, size: int, root: bytes, theirs: bytes
) -> str:
    """The message of a fork: the two roots, and with ``--against`` (a store holding the
    checkpoint's log) the first leaf where the logs differ, by bisection on roots."""
    said = (f"the store's root at size {size} is {encode_b64(root)}, the checkpoint's "
            f"{encode_b64(theirs)}: the store holds another log")  # fmt: skip
    if not args.against:
        return said + "; pass --against A_STORE_OF_THE_LOG to find the first leaf that differs"
    with Store.open(args.against, create=False, readonly=True) as other:
        if other.tree_size() < size or other.tree_root(size)[1] != theirs:
            return said + f"; {args.against} does not hold the checkpoint's log either"
        index = first_difference(size, lambda n: store.tree_root(n)[1],
                                 lambda n: other.tree_root(n)[1])  # fmt: skip
        assert index is not None
        ours, there = _leaf(store, index), _leaf(other, index)
    return (f"{said}; the logs part at leaf {index} (seq {index + 1}): their first {index} "
            f"leaves are the same; leaf {index} is {ours} here and {there} in "
            f"{args.against}")  # fmt: skip


def _leaf(store: Store, index: int) -> str:
    """Leaf ``index`` of the store's log in words: its event_id and copy hash."""
    for _, data in store.export(after=index, chunk=1):
        event_id = parse_envelope(data).event_id
        return f"a copy of {event_id} (copy hash {hashlib.sha256(data).hexdigest()[:16]}...)"
    return "missing"


def cmd_verify_checkpoint(args: argparse.Namespace, out: Out) -> int:
    """Verify a signed checkpoint against a keyring (and, with --check-store, the store)."""
    keyring = read_keyring(args.keyring)
    verified = verify_checkpoint(read_bytes(args.checkpoint, MAX_NOTE_BYTES), keyring, args.origin)
    cp = verified.checkpoint
    if args.against and not args.check_store:
        raise UsageError("arguments", "--against goes with --check-store")
    if args.check_store:
        with open_store(args, readonly=True) as store:
            held = store.tree_size()
            if cp.size > held:
                raise CheckpointError("behind", f"the store is behind the checkpoint by "
                                      f"{cp.size - held} leaf(s) (it holds {held}, the "
                                      f"checkpoint signs {cp.size}): sync it from the log, "
                                      "then check again; behind is not forked, but whether "
                                      f"its {held} leaves are the log's first {held} needs "
                                      "that sync or a consistency proof")  # fmt: skip
            _, root = store.tree_root(cp.size)
            if root != cp.root:
                raise CheckpointError("diverged", _where_they_part(args, store, cp.size, root,
                                                                   cp.root))  # fmt: skip
    out.write(json_line(_checkpoint_doc(verified)))
    held_too = ", and the store holds that tree" if args.check_store else ""
    # the origin is the checkpoint's, the key_ids the keyring's: neither is this machine's
    out.say(f"verify-checkpoint: {shown(cp.origin)} at size {cp.size} signed by "
            f"{', '.join(shown(s) for s in verified.signers)}{held_too}")  # fmt: skip
    return EXIT_OK


def _published(args: argparse.Namespace) -> tuple[bytes, Checkpoint] | None:
    """``--checkpoint FILE`` of ``prove inclusion``: the signed checkpoint to prove against
    (its bytes, verbatim, and its text), or ``None`` when a new one is signed (``--key``)."""
    if (args.key is None) == (args.checkpoint is None):
        raise UsageError("arguments", "give --key KEYFILE --origin NAME to sign a checkpoint "
                         "of the tree, or --checkpoint FILE to prove against a signed one")
    if args.checkpoint is None:
        if args.origin is None:
            raise UsageError("arguments", "--key needs --origin NAME")
        return None
    if args.size is not None:
        raise UsageError("arguments", "--checkpoint gives the tree size: no --size")
    data = read_bytes(args.checkpoint, MAX_NOTE_BYTES)
    cp = parse_checkpoint_text(parse_note(data).text)
    if args.origin is not None and cp.origin != args.origin:
        raise CheckpointError("origin", f"the checkpoint is of {cp.origin!r}, not "
                              f"{args.origin!r}")  # fmt: skip
    return data, cp


def cmd_prove_inclusion(args: argparse.Namespace, out: Out) -> int:
    """Write a tlog-proof@v1 that EVENT_ID is in the store's log: against a checkpoint
    signed here (``--key``), or against a signed one (``--checkpoint``), whose tree the
    store must hold."""
    if not is_event_id(args.event_id):
        raise ProofError("event_id", f"{args.event_id!r} is not an event_id")
    published = _published(args)
    key = read_key_file(args.key, out) if published is None else None
    with open_store(args, readonly=True) as store:
        if published is None:
            size, root = store.tree_root(size_arg(args.size, "--size"))
        else:
            cp = published[1]
            held = store.tree_size()
            if cp.size > held:
                # fewer leaves is not another log: as verify-checkpoint --check-store says
                raise CheckpointError("behind", f"the checkpoint is of size {cp.size}; the "
                                      f"store holds {held} leaves: sync it from the log, "
                                      "then prove again")  # fmt: skip
            size, root = store.tree_root(cp.size)
            if root != cp.root:
                raise CheckpointError("diverged", f"the store's root at size {size} is "
                                      f"{encode_b64(root)}, the checkpoint's "
                                      f"{encode_b64(cp.root)}")  # fmt: skip
        leaves = [leaf for leaf in store.leaves_of(args.event_id) if leaf[0] < size]
        if not leaves:
            raise ProofError("not_found", f"no copy of {args.event_id} among the first {size} "
                             "leaves of the store's log")  # fmt: skip
        _, path = store.inclusion_path(leaves[0][0], size)
    if key is not None:
        checkpoint = sign_checkpoint(Checkpoint(args.origin, size, root), key)
    else:
        assert published is not None
        checkpoint = published[0]
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
    data = read_bytes(args.proof, max(MAX_PROOF_BYTES, MAX_EVIDENCE_BYTES))
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
        out.say(f"verify-proof: {proven.event_id} is leaf {proven.index} of "
                f"{shown(cp.origin)} at "
                f"size {cp.size}")  # fmt: skip
        return EXIT_OK
    if args.event_id:
        # a consistency proof names no event: ignoring the option would let exit 0 pass
        # for "this event is logged" when the wrong file was given
        raise UsageError("arguments", "a consistency proof names no event: --event-id goes "
                         "with an inclusion proof (tlog-proof)")  # fmt: skip
    if len(args.checkpoints) != 2:
        raise UsageError("arguments", "a consistency proof is checked against two checkpoint "
                         "files: OLD_CHECKPOINT NEW_CHECKPOINT")  # fmt: skip
    old, new = verify_consistency_proof(data, read_bytes(args.checkpoints[0], MAX_NOTE_BYTES),
                                        read_bytes(args.checkpoints[1], MAX_NOTE_BYTES),
                                        keyring,
                                        args.origin)  # fmt: skip
    a, b = old.checkpoint, new.checkpoint
    out.write(json_line({"proof": "consistency", "origin": a.origin, "old": a.size,
                          "new": b.size, "old_root": encode_b64(a.root),
                          "new_root": encode_b64(b.root)}))  # fmt: skip
    out.say(f"verify-proof: {shown(a.origin)} at size {b.size} extends itself at size "
            f"{a.size}")  # fmt: skip
    return EXIT_OK


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
    p.add_argument("--key", required=True, metavar="KEYFILE",
                   help="the log's private key file (keygen makes one)")  # fmt: skip
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
        "With --check-store, also requires the store's tree at that size to have that root: "
        "a store with fewer leaves is behind (checkpoint.behind, exit 3), one with another "
        "root has forked (checkpoint.diverged, exit 1; --against names where they part).",
    )
    keyring_option(p)
    p.add_argument("--origin", metavar="NAME", help="require this origin")
    p.add_argument("--check-store", action="store_true",
                   help="also check the checkpoint against the store (--store)")  # fmt: skip
    p.add_argument("--against", metavar="DIR",
                   help="with --check-store: a store holding the checkpoint's log (the "
                   "registry's, or a good mirror's), to find the first leaf where the two "
                   "logs part when they differ")  # fmt: skip
    p.add_argument("checkpoint", metavar="CHECKPOINT", help="checkpoint file, or -")
    p.set_defaults(func=cmd_verify_checkpoint)

    p = store_parser("prove", help="write an inclusion, consistency or equivocation proof",
                     description="Proofs over the store's Merkle tree "
                     "(docs/transparency.md), and evidence of equivocation "
                     "(docs/evidence.md).")  # fmt: skip
    kinds = p.add_subparsers(dest="kind", metavar="KIND", parser_class=CommandParser)
    kinds.required = True
    q = kinds.add_parser(
        "inclusion",
        help="a C2SP tlog-proof@v1 that an event is in the log",
        description="Print a c2sp.org/tlog-proof@v1: the leaf data (extra: the event_id and "
        "the SHA-256 of its copy), the index of its "
        "first copy in the log, the RFC 9162 inclusion path and a checkpoint of the tree of "
        "--size leaves (default: all) signed with KEYFILE for ORIGIN; or, with --checkpoint "
        "FILE, the path to the root of that signed checkpoint, copied verbatim into the "
        "proof (a server or mirror holding only a published or cosigned checkpoint).",
    )
    q.add_argument("--store", metavar="DIR", default=argparse.SUPPRESS, help=STORE_HELP)
    q.add_argument("event_id", metavar="EVENT_ID",
                   help="the event to prove: sha256: and 64 hex digits")  # fmt: skip
    q.add_argument("--size", type=int, metavar="N",
                   help="prove against the tree of the first N leaves (default: all)")
    q.add_argument("--key", metavar="KEYFILE", help="sign a checkpoint with this key")
    q.add_argument("--origin", metavar="NAME",
                   help="the origin to sign for (with --key), or to require of --checkpoint")
    q.add_argument("--checkpoint", metavar="FILE",
                   help="prove against this signed checkpoint (its size; the store must "
                   "hold its tree) instead of signing one: no private key needed")
    q.set_defaults(func=cmd_prove_inclusion)
    q = kinds.add_parser(
        "consistency",
        help="the RFC 9162 consistency proof between two tree sizes",
        description="Print PROOF(OLD, D[NEW]) of RFC 9162 in pithlog's text format: "
        "pithlog-consistency-proof@v1, old M, new N, one base64 hash per line. NEW defaults "
        "to the current tree size.",
    )
    q.add_argument("--store", metavar="DIR", default=argparse.SUPPRESS, help=STORE_HELP)
    q.add_argument("old", type=int, metavar="OLD", help="the older tree size")
    q.add_argument("new", type=int, metavar="NEW", nargs="?",
                   help="the newer tree size (default: the current one)")  # fmt: skip
    q.set_defaults(func=cmd_prove_consistency)
    add_prove_equivocation(kinds)

    p = sub.add_parser(
        "verify-proof",
        help="verify an inclusion or consistency proof, or an evidence file, offline",
        description="Verify a proof without the store. An evidence file (an equivocation "
        "or split-view proof, docs/evidence.md) carries all it needs: its events or its "
        "checkpoints. An inclusion proof (tlog-proof@v1) carries its checkpoint: the "
        "checkpoint is verified against KEYRING, then the event's leaf against its root. "
        "A consistency proof needs the two checkpoints it joins, "
        "OLD_CHECKPOINT and NEW_CHECKPOINT, both verified against KEYRING. A file that "
        "begins with '{' is read as an evidence file. Exit 0 when the proof holds, 1 when "
        "it does not (evidence.does_not_hold, proof.inclusion, proof.consistency, "
        "proof.mismatch, or a checkpoint that is not trusted), 2 when a file cannot be read "
        "or is not a proof, a checkpoint or an evidence file of its format "
        "(evidence.malformed: nothing proven either way), and for wrong arguments.",
    )
    keyring_option(p)
    p.add_argument("--origin", metavar="NAME", help="require this origin")
    p.add_argument("--event-id", metavar="EVENT_ID",
                   help="require an inclusion proof to be about this event")  # fmt: skip
    p.add_argument("proof", metavar="PROOF",
                   help="the proof or evidence file (- for stdin)")  # fmt: skip
    p.add_argument("checkpoints", metavar="CHECKPOINT", nargs="*", default=[],
                   help="for a consistency proof: OLD_CHECKPOINT NEW_CHECKPOINT")  # fmt: skip
    p.intermixed = True  # `verify-proof PROOF --keyring K OLD NEW`
    p.set_defaults(func=cmd_verify_proof)
