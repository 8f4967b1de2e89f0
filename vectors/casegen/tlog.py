"""The transparency log of a case: what a store holds after appending its events file in
file order with ``--keep-invalid`` (docs/transparency.md, "The tree"), and what
``pithlog serve`` serves of it (docs/network.md, "Endpoints").

Computed here apart from pithlog (hashlib, plain recursions of RFC 9162 section 2.1, the
tile layout of c2sp.org/tlog-tiles, the note of c2sp.org/signed-note signed with
``cryptography``'s Ed25519), so that ``tests/conformance/test_vectors.py`` can hold
pithlog's store and server to these bytes.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Sequence

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from casegen.common import jcs

ORIGIN = "registry.test.invalid/vectors"
"""The checkpoints' origin (and key name): a path under the signer_id of the test registry
key, so that pithlog's ``checkpoint`` and ``verify-checkpoint`` take it."""

SIGNER = "registry"
"""The test key that signs: its seed is SHA-256 of ``"pithlog public test key: registry"``."""

TILE_HEIGHT = 8
TILE_WIDTH = 1 << TILE_HEIGHT


def _sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


# --- leaves and the tree (RFC 9162 2.1) ---------------------------------------------------


def leaf_data(lines: Sequence[bytes]) -> list[bytes]:
    """The leaf data of the distinct copies of ``lines`` in the order they first occur:
    the 32 raw bytes of the copy's ``event_id`` member and SHA-256 of its JCS bytes. A line
    repeating an earlier copy (in any encoding) is no new leaf; with ``--keep-invalid``
    every other line that passes the door is one, whatever its verdict."""
    seen: set[bytes] = set()
    out: list[bytes] = []
    for line in lines:
        value = json.loads(line)
        copy = jcs(value)
        if copy in seen:
            continue
        seen.add(copy)
        event_id = value["event_id"]
        assert event_id.startswith("sha256:")
        out.append(bytes.fromhex(event_id[len("sha256:") :]) + _sha256(copy))
    return out


def leaf_hash(data: bytes) -> bytes:
    return _sha256(b"\x00" + data)


def _split(n: int) -> int:
    """The largest power of two smaller than ``n`` (n >= 2)."""
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def mth(hashes: Sequence[bytes]) -> bytes:
    """``MTH(D[n])`` over leaf hashes (RFC 9162 2.1.1)."""
    if not hashes:
        return _sha256(b"")
    if len(hashes) == 1:
        return hashes[0]
    k = _split(len(hashes))
    return _sha256(b"\x01" + mth(hashes[:k]) + mth(hashes[k:]))


def path(m: int, hashes: Sequence[bytes]) -> list[bytes]:
    """``PATH(m, D[n])`` (RFC 9162 2.1.3.1)."""
    if len(hashes) == 1:
        return []
    k = _split(len(hashes))
    if m < k:
        return [*path(m, hashes[:k]), mth(hashes[k:])]
    return [*path(m - k, hashes[k:]), mth(hashes[:k])]


def proof(m: int, hashes: Sequence[bytes]) -> list[bytes]:
    """``PROOF(m, D[n])`` (RFC 9162 2.1.4.1), 0 < m <= n."""
    return _subproof(m, hashes, True)


def _subproof(m: int, hashes: Sequence[bytes], b: bool) -> list[bytes]:
    n = len(hashes)
    if m == n:
        return [] if b else [mth(hashes)]
    k = _split(n)
    if m <= k:
        return [*_subproof(m, hashes[:k], b), mth(hashes[k:])]
    return [*_subproof(m - k, hashes[k:], False), mth(hashes[:k])]


# --- tlog-tiles ---------------------------------------------------------------------------


def tile_index(index: int) -> str:
    """``N`` in zero-padded three-digit groups, all but the last prefixed with ``x``."""
    groups = [f"{index % 1000:03d}"]
    index //= 1000
    while index:
        groups.append(f"x{index % 1000:03d}")
        index //= 1000
    return "/".join(reversed(groups))


def tiles(data: Sequence[bytes]) -> dict[str, bytes]:
    """Every tile and entry bundle of the tree of ``len(data)`` leaves, by path: level 0
    holds the leaf hashes, level ``L`` the roots of the full tiles of level ``L - 1``; the
    last tile of a level holds what is left (``.p/<W>``). Bundles: a big-endian uint16
    length and the 64-byte leaf data per leaf, in level-0 tile ``N``'s leaves."""
    out: dict[str, bytes] = {}
    hashes = [leaf_hash(d) for d in data]
    entries = [len(d).to_bytes(2, "big") + d for d in data]
    level = 0
    while hashes:
        for first in range(0, len(hashes), TILE_WIDTH):
            width = min(TILE_WIDTH, len(hashes) - first)
            suffix = tile_index(first // TILE_WIDTH)
            if width < TILE_WIDTH:
                suffix += f".p/{width}"
            out[f"tile/{level}/{suffix}"] = b"".join(hashes[first : first + width])
            if level == 0:
                out[f"tile/entries/{suffix}"] = b"".join(entries[first : first + width])
        # only full tiles are hashed into the level above
        hashes = [mth(hashes[i : i + TILE_WIDTH])
                  for i in range(0, len(hashes) - TILE_WIDTH + 1, TILE_WIDTH)]  # fmt: skip
        level += 1
    return out


# --- the signed checkpoint (c2sp.org/tlog-checkpoint, c2sp.org/signed-note) -------------


def checkpoint(size: int, root: bytes) -> bytes:
    """The note of ``size`` and ``root`` signed by the test registry key under the key name
    :data:`ORIGIN`: Ed25519 is deterministic, and the note holds no timestamp."""
    seed = _sha256(b"pithlog public test key: " + SIGNER.encode())
    key = Ed25519PrivateKey.from_private_bytes(seed)
    public = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    text = f"{ORIGIN}\n{size}\n{_b64(root)}\n".encode()
    key_id = _sha256(ORIGIN.encode() + b"\n\x01" + public)[:4]
    return text + f"\n\u2014 {ORIGIN} {_b64(key_id + key.sign(text))}\n".encode()


def inclusion_proof(index: int, data: Sequence[bytes], note: bytes) -> bytes:
    """c2sp.org/tlog-proof@v1 of leaf ``index``, its leaf data as ``extra``, against the
    checkpoint ``note`` of all of ``data``."""
    hashes = [leaf_hash(d) for d in data]
    lines = ["c2sp.org/tlog-proof@v1", f"extra {_b64(data[index])}", f"index {index}",
             *(_b64(h) for h in path(index, hashes))]  # fmt: skip
    return ("\n".join(lines) + "\n\n").encode() + note


def consistency_proof(old: int, data: Sequence[bytes]) -> bytes:
    """pithlog's consistency proof (docs/transparency.md) of the first ``old`` leaves and
    all of ``data``."""
    hashes = [leaf_hash(d) for d in data]
    lines = ["pithlog-consistency-proof@v1", f"old {old}", f"new {len(hashes)}",
             *(_b64(h) for h in proof(old, hashes))]  # fmt: skip
    return "".join(line + "\n" for line in lines).encode()


# --- the log/ folder ----------------------------------------------------------------------


def proven_leaves(data: Sequence[bytes]) -> list[int]:
    """The leaves given an inclusion proof: the first, the middle, the last, and the first
    leaf that is a second copy of an event_id (if any)."""
    chosen = {0, len(data) // 2, len(data) - 1}
    seen: set[bytes] = set()
    for index, d in enumerate(data):
        if d[:32] in seen:
            chosen.add(index)
            break
        seen.add(d[:32])
    return sorted(chosen)


def old_size(size: int) -> int:
    """The older tree size the consistency proof starts from (0 < old < size)."""
    return max(1, size * 2 // 3)


def log_files(lines: Sequence[bytes]) -> dict[str, bytes]:
    """The files of a ``log/`` folder for the events file ``lines`` (at least two copies)."""
    data = leaf_data(lines)
    assert len(data) >= 2
    hashes = [leaf_hash(d) for d in data]
    n = len(data)
    note = checkpoint(n, mth(hashes))
    old = old_size(n)
    rows = enumerate(zip(data, hashes, strict=True))
    files = {
        "leaves.txt": "".join(f"{i} {d.hex()} {h.hex()}\n" for i, (d, h) in rows).encode(),
        "roots.txt": "".join(f"{s} {mth(hashes[:s]).hex()}\n" for s in range(n + 1)).encode(),
        "checkpoint": note,
        f"proof/checkpoint/{old}": checkpoint(old, mth(hashes[:old])),
        f"proof/consistency/{old}/{n}": consistency_proof(old, data),
    }
    for index in proven_leaves(data):
        files[f"proof/inclusion/{index}"] = inclusion_proof(index, data, note)
    files.update(tiles(data))
    return dict(sorted(files.items()))
