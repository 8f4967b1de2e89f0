"""The checkpoint a witness serves monitors (C2SP tlog-witness, "Monitor Retrieval
Mechanism"), kept by ``Store.witness_add`` with the ``(size, root)`` it cosigned and read by
``Store.witness_checkpoint``: the note text, the log's signature lines the witness verified
and its cosignature, and nothing else; moved only by a 200, never shown for a tree the
witness did not record."""

from __future__ import annotations

import base64
import hashlib
import struct
from pathlib import Path

import pytest

from pithlog.errors import WitnessError
from pithlog.protocol.keys import make_keyring
from pithlog.store import Store, witnessed
from pithlog.store.layout import SEQ
from pithlog.testing import test_key, test_keyring_entries
from pithlog.transparency import merkle
from pithlog.transparency.checkpoint import (
    Checkpoint,
    Note,
    parse_note,
    sign_checkpoint,
    sign_note,
    verify_checkpoint,
)
from pithlog.transparency.witness import (
    AddCheckpoint,
    Verdict,
    cosign,
    judge_add_checkpoint,
    verify_cosignatures,
)

ORIGIN = "registry.test.invalid/pith"
ORIGIN_SHA256 = hashlib.sha256(ORIGIN.encode()).digest()
KEYRING = make_keyring(test_keyring_entries())
WITNESS = test_key("mirror")
SUB = merkle.subtree_from_leaves([merkle.leaf_hash(bytes([i]) * 64) for i in range(40)])


def signed(size: int, root: bytes | None = None) -> bytes:
    root = merkle.root(size, SUB) if root is None else root
    return sign_checkpoint(Checkpoint(ORIGIN, size, root), test_key("registry"))


def body(old: int, new: int, checkpoint: bytes | None = None) -> bytes:
    proof = merkle.consistency_path(old, new, SUB) if 0 < old < new else []
    return AddCheckpoint(old, tuple(proof), checkpoint or signed(new)).encoded()


def add(store: Store, data: bytes, timestamp: int = 7) -> Verdict:
    return store.witness_add(
        lambda known: judge_add_checkpoint(data, KEYRING, known, WITNESS, timestamp)
    )


def text_of(note: bytes) -> bytes:
    return note[: note.index(b"\n\n") + 1]


def test_the_checkpoint_served_is_the_one_cosigned_with_its_verified_lines(
    tmp_path: Path,
) -> None:
    """The served note parses and verifies under the log's key and the witness's
    cosignature (the line add-checkpoint returned); the lines of keys the keyring does not
    allow for the origin (another witness's cosignature, a stranger's) are left out, and a
    line sent twice is served once."""
    foreign = f"\u2014 other.example/w {base64.b64encode(bytes(4 + 72)).decode()}\n".encode()
    stranger = sign_note(text_of(signed(10)), "stranger.invalid", test_key("stranger"))
    log_line = signed(10)[len(text_of(signed(10))) + 1 :]
    sent = signed(10) + foreign + stranger.line().encode() + log_line
    with Store.open(tmp_path / "w") as store:
        assert store.witness_checkpoint(ORIGIN_SHA256) is None  # never cosigned
        verdict = add(store, body(0, 10, sent))
        assert verdict.status == 200
        served = store.witness_checkpoint(ORIGIN_SHA256)
    assert served is not None
    assert served == signed(10) + verdict.body  # the log's line, then the witness's
    note = parse_note(served)
    assert [s.name for s in note.signatures] == [ORIGIN, WITNESS.signer_id]
    verified = verify_checkpoint(served, KEYRING, ORIGIN)
    assert (verified.checkpoint.size, verified.signers) == (10, ("test-registry",))
    assert [c.timestamp for c in verify_cosignatures(served, [KEYRING["test-mirror"]])] == [7]


def test_only_a_200_moves_the_checkpoint_served(tmp_path: Path) -> None:
    with Store.open(tmp_path / "w") as store:
        assert add(store, body(0, 10)).status == 200
        first = store.witness_checkpoint(ORIGIN_SHA256)
        assert add(store, body(0, 20)).status == 409
        bad_proof = AddCheckpoint(10, (bytes(32),), signed(20)).encoded()
        assert add(store, bad_proof).status == 422
        assert add(store, AddCheckpoint(10, (), signed(10, bytes(32))).encoded()).status == 422
        assert add(store, b"garbage").status == 400
        assert store.witness_checkpoint(ORIGIN_SHA256) == first
        verdict = add(store, body(10, 20), timestamp=8)
        assert verdict.status == 200
        assert store.witness_checkpoint(ORIGIN_SHA256) == signed(20) + verdict.body
        assert store.witness_state(ORIGIN) == (20, merkle.root(20, SUB))
        # a failure of the verdict (a cosignature of time 0) undoes the transaction:
        # neither the state nor the checkpoint served moves
        with pytest.raises(WitnessError, match="timestamp 0"):
            add(store, body(20, 30), timestamp=0)
        assert store.witness_checkpoint(ORIGIN_SHA256) == signed(20) + verdict.body
        assert store.witness_checkpoint(hashlib.sha256(b"other.invalid/log").digest()) is None


def test_a_state_recorded_without_a_checkpoint_serves_none_until_the_next_cosign(
    tmp_path: Path,
) -> None:
    """A store whose witness state a pithlog that kept no checkpoint recorded (before the
    monitoring route; or an older pithlog moving the state past the checkpoint kept): the
    witness answers 404 rather than a checkpoint of a tree it no longer holds, until it
    cosigns again."""

    def older_pithlog(size: int) -> None:  # what record wrote before: the state alone
        value = SEQ.pack(size) + merkle.root(size, SUB)
        store._write(lambda txn, dbs: txn.put(b"witness:" + ORIGIN.encode(), value,
                                              db=dbs["meta"]))  # fmt: skip

    with Store.open(tmp_path / "w") as store:
        older_pithlog(10)
        assert store.witness_state(ORIGIN) == (10, merkle.root(10, SUB))
        assert store.witness_checkpoint(ORIGIN_SHA256) is None
        verdict = add(store, body(10, 20))
        assert store.witness_checkpoint(ORIGIN_SHA256) == signed(20) + verdict.body
        older_pithlog(30)  # moved on without a checkpoint: the one kept is of size 20
        assert store.witness_checkpoint(ORIGIN_SHA256) is None
        assert add(store, body(30, 40)).status == 200
        served = store.witness_checkpoint(ORIGIN_SHA256)
        assert served is not None and verify_checkpoint(served, KEYRING).checkpoint.size == 40


def test_an_origin_too_long_for_an_lmdb_key_is_served_by_its_hash(tmp_path: Path) -> None:
    origin = ORIGIN + "/" + "a" * 600
    note = sign_checkpoint(Checkpoint(origin, 4, merkle.root(4, SUB)), test_key("registry"))
    with Store.open(tmp_path / "w") as store:
        verdict = add(store, AddCheckpoint(0, (), note).encoded())
        assert verdict.status == 200
        digest = hashlib.sha256(origin.encode()).digest()
        assert store.witness_checkpoint(digest) == note + verdict.body
        assert store.witness_checkpoint(ORIGIN_SHA256) is None


def test_the_checkpoint_key_is_no_state_key() -> None:
    for prefix in (witnessed.PREFIX, witnessed.HASHED_PREFIX):
        assert not witnessed.CHECKPOINT_PREFIX.startswith(prefix)
        assert not prefix.startswith(witnessed.CHECKPOINT_PREFIX)


def test_at_most_the_lines_a_note_may_hold_are_served() -> None:
    """A note of 100 lines by the log's keys (the most a note holds) and the cosignature
    would be 101: one a signed-note parser refuses. The log's lines are cut to 99."""
    from pithlog.transparency.checkpoint import MAX_SIGNATURES, NoteSignature
    from pithlog.transparency.witness import served_checkpoint

    text = text_of(signed(10))
    verified = verify_checkpoint(signed(10), KEYRING)
    many = verified.__class__(verified.checkpoint, verified.signers, verified.note,
                              tuple(NoteSignature(ORIGIN, struct.pack(">I", i), bytes(64))
                                    for i in range(MAX_SIGNATURES)))  # fmt: skip
    served = served_checkpoint(text, many, cosign(text, WITNESS, 7))
    assert len(parse_note(served).signatures) == MAX_SIGNATURES
    assert Note(text, ()).text == parse_note(served).text
