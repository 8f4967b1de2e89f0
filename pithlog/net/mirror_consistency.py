"""Step 2 of ``pithlog mirror`` (:mod:`pithlog.net.mirror`): the served checkpoint proven
consistent with what this store already holds of its origin, before it is accepted
(``docs/network.md``, "Running a mirror").

With a checkpoint accepted from that origin, :func:`_consistent` proves the served one of
the same log (RFC 9162 consistency proof from ``/proof/consistency``, or this store's own
copy when the served tree is the older); a proof that does not hold is checked against the
served tiles, verified against the signed root, which tell a spoiled proof from another
history. Without one, :func:`_prefix` proves the store's leaves a prefix of the served
tree the same way. A split view or a rewritten history raises ``mirror.split_view`` after
writing both checkpoints and the proof that shows it to an evidence file
(a pith-split-view-proof, ``docs/evidence.md``). The ``mirror.*`` codes raised here are
registered by :mod:`pithlog.net.mirror`, whose pass is the only caller.
"""

from __future__ import annotations

import hashlib
import re
import time
from pathlib import Path

from pithlog.errors import MirrorError, PithlogError, shown
from pithlog.net.evidence_files import write_evidence
from pithlog.net.origin import Origin
from pithlog.store import Store
from pithlog.transparency import merkle, tiles
from pithlog.transparency.checkpoint import Checkpoint, parse_checkpoint_text, parse_note
from pithlog.transparency.evidence import split_view_proof
from pithlog.transparency.proofs import ConsistencyProof


def _consistent(store: Store, origin: Origin, old: Checkpoint, old_note: bytes,
                new: Checkpoint, new_note: bytes, evidence_dir: Path) -> None:  # fmt: skip
    """``new`` and the accepted ``old`` are of one log (whichever is larger), or the
    evidence is written and ``mirror.split_view`` raised."""
    if old.size == new.size:
        if old.root != new.root:
            _split_view(old_note, new_note, None, evidence_dir, "two roots for one size")
        return
    small, large = (old, new) if old.size < new.size else (new, old)
    if small.size == 0:
        # every tree extends the empty one (whose root a checkpoint must have to parse):
        # nothing to prove, and a proof asked for could only be a junk one
        return
    if large is old and store.tree_size() >= old.size:
        # An older tree served: this store holds the accepted one, verified, so it proves
        # the served tree a prefix of it or not by itself. Asking the log would let a log
        # that rewrote its history escape as mirror.unproven by not answering.
        if store.tree_root(small.size)[1] == small.root:
            return  # a stale checkpoint of this very tree (a cache): nothing to bring
        path = store.consistency_path(small.size, large.size)[1]
        if _power_of_two(small.size):  # the root the accepted tree commits to, first
            path.insert(0, store.tree_root(small.size)[1])
        own = ConsistencyProof(small.size, large.size, tuple(path))
        _split_view(old_note, new_note, own.encoded(), evidence_dir,
                    f"the served tree of {small.size} leaves is not the first {small.size} "
                    f"of the accepted one (the proof is this mirror's, from its copy)")
    proof = origin.consistency(small.size, large.size)
    if proof is None:
        raise MirrorError("unproven", f"{origin.url} gives no consistency proof from size "
                          f"{small.size} to {large.size}")  # fmt: skip
    if (proof.old, proof.new) == (small.size, large.size) and merkle.verify_consistency(
        small.size, large.size, small.root, large.root, proof.path
    ):
        return
    if _proves_split_view(proof, small, large):  # the log's own word against itself
        _split_view(old_note, new_note, proof.encoded(), evidence_dir,
                    f"the consistency proof {small.size} -> {large.size} does not hold")
    # A proof is not signed: a proxy, a cache or a bug spoils one of an honest log as
    # easily as a log that split its view sends junk. Evidence that proves nothing would
    # accuse the one and not show the other: the tiles of the larger tree, verified
    # against its signed root, tell them apart, and give the proof that shows which.
    from_tiles = _proof_from_tiles(origin, small, large)
    if from_tiles is None:
        raise MirrorError("unproven", f"the consistency proof {small.size} -> {large.size} "
                          f"of {origin.url} does not hold, and its tiles of size "
                          f"{large.size} cannot be read to tell whether its tree extends "
                          "the accepted one")  # fmt: skip
    first, shown = from_tiles
    if first == small.root:
        return  # its tree extends the accepted one: the proof was wrong, not its history
    _split_view(old_note, new_note, shown.encoded(), evidence_dir,
                f"the consistency proof {small.size} -> {large.size} does not hold, and the "
                f"served tree of {large.size} leaves commits to another first {small.size} "
                "(the proof is this mirror's, from the served tiles)")


def _power_of_two(size: int) -> bool:
    # 0 is not one: the empty tree has no first root to put before a path (no tile level)
    return size > 0 and size & (size - 1) == 0


def _proves_split_view(proof: ConsistencyProof, small: Checkpoint, large: Checkpoint) -> bool:
    """Whether ``proof`` by itself is a pith-split-view-proof's: it leads to ``large``'s
    root from another tree of ``small.size`` leaves (RFC 9162 2.1.4.2; a power-of-two
    size's path leaves that tree's root out, so it never shows another one)."""
    if (proof.old, proof.new) != (small.size, large.size) or _power_of_two(small.size):
        return False
    roots = merkle.consistency_roots(small.size, large.size, small.root, proof.path)
    return roots is not None and roots[1] == large.root and roots[0] != small.root


def _proof_from_tiles(origin: Origin, small: Checkpoint,
                      large: Checkpoint) -> tuple[bytes, ConsistencyProof] | None:  # fmt: skip
    """The root of the first ``small.size`` leaves that ``large``'s tree commits to, and
    the RFC 9162 consistency proof from it (that root first for a power-of-two size, as
    step 2 of 2.1.4.2 puts it), both from the served tiles verified against ``large``'s
    root; ``None`` when they cannot be read."""
    verified = tiles.VerifiedTiles(large.size, large.root, origin.tile)

    def perfect(level: int, index: int) -> bytes:
        # 2**rest hashes of one tile of tile level `up` (aligned, so never two tiles)
        up, rest = divmod(level, tiles.HEIGHT)
        first = index << rest
        row = verified.tile(up, first // tiles.WIDTH)
        at = (first % tiles.WIDTH) * merkle.HASH_SIZE
        return tiles.perfect_root([row[i : i + merkle.HASH_SIZE] for i in range(
            at, at + (merkle.HASH_SIZE << rest), merkle.HASH_SIZE)])  # fmt: skip

    subtree = merkle.subtree_from_perfect(perfect)
    try:
        first = subtree(0, small.size)
        path = merkle.consistency_path(small.size, large.size, subtree)
    except PithlogError:
        return None
    if _power_of_two(small.size):
        path.insert(0, first)
    return first, ConsistencyProof(small.size, large.size, tuple(path))


def file_safe(origin: str, most: int = 64) -> str:
    """``origin`` as part of a file name: what is not a letter, a digit or ``._-`` made
    ``_``, and a long one cut to ``most`` characters and a hash of the whole (the origin is
    the served log's to choose, and a name over 255 bytes cannot be written: the evidence
    of a split view would be lost with it)."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", origin)
    if len(name) <= most:
        return name
    return f"{name[:most]}-{hashlib.sha256(origin.encode()).hexdigest()[:16]}"


def _split_view(old_note: bytes, new_note: bytes, proof: bytes | None, evidence_dir: Path,
                why: str) -> None:  # fmt: skip
    cp = parse_checkpoint_text(parse_note(new_note).text)
    old = parse_checkpoint_text(parse_note(old_note).text)
    name = file_safe(cp.origin)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    # a pith-split-view-proof (docs/evidence.md): `pithlog verify-proof` checks it offline
    path, problem = write_evidence(Path(evidence_dir),
                                   f"split-view-{name}-{old.size}-{cp.size}-{stamp}.json",
                                   split_view_proof(old_note, new_note, proof))  # fmt: skip
    written = "evidence written to" if path is not None else "evidence not written"
    aside = f" ({problem})" if problem else ""
    refused = MirrorError("split_view", f"{shown(cp.origin)}: {why} (accepted size {old.size}, "
                          f"served size {cp.size}); {written} {path or ''}{aside}")  # fmt: skip
    refused.evidence = path  # for audit's finding (pithlog.net.audit.split_view)
    raise refused


def _prefix(store: Store, origin: Origin, held: int, cp: Checkpoint) -> None:
    """A store with leaves and no accepted checkpoint must hold a prefix of the served
    tree."""
    if held > cp.size:
        raise MirrorError("diverged", f"the store holds {held} leaves, the served checkpoint "
                          f"{cp.size}")  # fmt: skip
    _, root = store.tree_root(held)
    if held == cp.size:
        ok = root == cp.root
    else:
        proof = origin.consistency(held, cp.size)
        if proof is None:
            raise MirrorError("unproven", f"{origin.url} gives no consistency proof from size "
                              f"{held} to {cp.size}")  # fmt: skip
        ok = merkle.verify_consistency(held, cp.size, root, cp.root, proof.path)
        if not ok:
            # a proof is not signed (see _consistent): one spoiled on its way from an honest
            # log said "another log" of a true prefix; the served tiles, verified against
            # the signed root, say which first `held` leaves the log commits to
            from_tiles = _proof_from_tiles(origin, Checkpoint(cp.origin, held, root), cp)
            if from_tiles is None:
                raise MirrorError("unproven", f"the consistency proof {held} -> {cp.size} of "
                                  f"{origin.url} does not hold, and its tiles of size "
                                  f"{cp.size} cannot be read to tell whether its tree "
                                  "extends the store's")  # fmt: skip
            ok = from_tiles[0] == root
    if not ok:
        raise MirrorError("diverged", f"the store's {held} leaves are not the first {held} "
                          f"of {shown(cp.origin)}'s log: mirror into a fresh store")  # fmt: skip
