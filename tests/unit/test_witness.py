"""pithlog.transparency.witness: cosignatures (C2SP tlog-cosignature) and the add-checkpoint
verdicts (C2SP tlog-witness), checked against the byte layouts written out here."""

from __future__ import annotations

import base64
import hashlib
import struct
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from pithlog.errors import WitnessError
from pithlog.protocol.keys import SigningKey, make_keyring
from pithlog.store import Store
from pithlog.testing import test_key, test_keyring, test_keyring_entries
from pithlog.transparency import merkle
from pithlog.transparency.checkpoint import (
    Checkpoint,
    Note,
    NoteSignature,
    sign_checkpoint,
    sign_note,
)
from pithlog.transparency.witness import (
    MAX_BODY_BYTES,
    MAX_PROOF_LINES,
    AddCheckpoint,
    cosign,
    cosignature_key_id,
    cosigned_message,
    judge_add_checkpoint,
    may_witness,
    parse_add_checkpoint,
    require_quorum,
    verify_cosignatures,
    with_cosignatures,
    witness_lines,
)

ORIGIN = "registry.test.invalid/pith"
KEYRING = make_keyring(test_keyring_entries())
WITNESS = test_key("mirror")
LEAVES = [merkle.leaf_hash(bytes([i]) * 64) for i in range(40)]
SUB = merkle.subtree_from_leaves(LEAVES)


def signed(size: int, key: str = "registry") -> bytes:
    return sign_checkpoint(Checkpoint(ORIGIN, size, merkle.root(size, SUB)), test_key(key))


def body(old: int, new: int, checkpoint: bytes | None = None) -> bytes:
    proof = merkle.consistency_path(old, new, SUB) if 0 < old < new else []
    return AddCheckpoint(old, tuple(proof), checkpoint or signed(new)).encoded()


def test_a_cosignature_has_the_layout_of_the_spec() -> None:
    note = signed(10)
    text = note[: note.index(b"\n\n") + 1]
    line = cosign(text, WITNESS, 1_700_000_000).line()
    dash, name, blob = line.rstrip("\n").split(" ")
    assert dash == "\u2014" and name == WITNESS.signer_id
    raw = base64.b64decode(blob)
    expected_id = hashlib.sha256(name.encode() + b"\n\x04" + WITNESS.public_key).digest()[:4]
    assert raw[:4] == expected_id and len(raw) == 4 + 8 + 64
    assert struct.unpack(">Q", raw[4:12])[0] == 1_700_000_000
    message = b"cosignature/v1\ntime 1700000000\n" + text
    Ed25519PublicKey.from_public_bytes(WITNESS.public_key).verify(raw[12:], message)


def test_cosignatures_verify_and_count_toward_a_quorum() -> None:
    note = signed(10)
    text = note[: note.index(b"\n\n") + 1]
    witnesses = [KEYRING["test-mirror"]]
    cosigned = with_cosignatures(note, cosign(text, WITNESS, 5).line().encode())
    assert [c.key_id for c in verify_cosignatures(cosigned, witnesses)] == ["test-mirror"]
    assert require_quorum(cosigned, witnesses, 1)
    with pytest.raises(WitnessError, match="1 required"):
        require_quorum(note, witnesses, 1)
    other = with_cosignatures(signed(11), cosign(text, WITNESS, 5).line().encode())
    with pytest.raises(WitnessError) as wrong:  # a cosignature of another tree
        verify_cosignatures(other, witnesses)
    assert wrong.value.code == "witness.cosignature"
    # the same witness's line twice is one witness: it does not meet a quorum of two
    line = cosign(text, WITNESS, 6).line().encode()
    twice = with_cosignatures(cosigned, line)
    assert [c.key_id for c in verify_cosignatures(twice, witnesses)] == ["test-mirror"]
    with pytest.raises(WitnessError, match="2 required"):
        require_quorum(twice, witnesses, 2)
    # the witness's line under another key name (key ID and signature kept) is not its line
    renamed = line.replace(WITNESS.signer_id.encode(), b"other.test.invalid", 1)
    assert verify_cosignatures(with_cosignatures(note, renamed), witnesses) == []
    # a timestamp of 2^63 or more is out of range (tlog-cosignature), signed or not
    with pytest.raises(WitnessError):
        cosign(text, WITNESS, 1 << 63)
    late = NoteSignature(WITNESS.signer_id, cosignature_key_id(WITNESS.signer_id,
                         WITNESS.public_key), struct.pack(">Q", 1 << 63)
                         + WITNESS.sign(cosigned_message(text, 1 << 63)))  # fmt: skip
    with pytest.raises(WitnessError) as out_of_range:
        verify_cosignatures(with_cosignatures(note, late.line().encode()), witnesses)
    assert out_of_range.value.code == "witness.cosignature"


def test_a_witness_key_is_a_mirror_or_registry_key_not_revoked() -> None:
    assert may_witness(KEYRING["test-mirror"]) and may_witness(KEYRING["test-registry"])
    assert not may_witness(KEYRING["test-author"])
    revoked = test_keyring(mirror={"revoked_at": "2026-01-01T00:00:00Z"})
    assert not may_witness(revoked["test-mirror"])


def test_add_checkpoint_round_trip_and_limits() -> None:
    request = parse_add_checkpoint(body(8, 20))
    assert request.old == 8 and request.proof and request.checkpoint == signed(20)
    proof_line = base64.b64encode(bytes(32)) + b"\n"
    most = parse_add_checkpoint(b"old 1\n" + proof_line * MAX_PROOF_LINES + b"\n" + signed(3))
    assert len(most.proof) == MAX_PROOF_LINES
    for bad, says in (
        (b"old 01\n\n" + signed(3), "'old N'"),
        (f"old {2**63}\n\n".encode() + signed(3), "'old N'"),  # over Go's int64
        (b"old 3\n" + b"AAAA\n" + b"\n" + signed(3), "32-byte hash"),
        (b"no empty line", "no empty line"),
        (b"old 1\n" + b"A" * 44 + b"\n\n" + signed(3), "32-byte hash"),  # 33 bytes
        (b"old 1\n" + proof_line * (MAX_PROOF_LINES + 1) + b"\n" + signed(3),
         f"more than {MAX_PROOF_LINES} proof lines"),
        (b"old 1\n\n" + signed(3).ljust(MAX_BODY_BYTES, b"x"), f"over {MAX_BODY_BYTES} bytes"),
    ):
        with pytest.raises(WitnessError) as refused:
            parse_add_checkpoint(bad)
        assert refused.value.code == "witness.malformed", bad[:40]
        assert says in refused.value.message, (says, refused.value.message)


class Witness:
    """A witness's state, as the store keeps it: origin -> (size, root)."""

    def __init__(self) -> None:
        self.known: dict[str, tuple[int, bytes]] = {}

    def add(self, data: bytes) -> tuple[int, bytes]:
        verdict = judge_add_checkpoint(data, KEYRING, self.known.get, WITNESS, 7)
        if verdict.status == 200:
            assert verdict.origin is not None and verdict.record is not None
            self.known[verdict.origin] = verdict.record
        return verdict.status, verdict.body


def test_the_statuses_of_tlog_witness() -> None:
    w = Witness()
    status, line = w.add(body(0, 10))
    assert status == 200 and line.startswith("\u2014 mirror".encode())
    assert verify_cosignatures(with_cosignatures(signed(10), line), [KEYRING["test-mirror"]])
    assert w.add(body(0, 20)) == (409, b"10\n")  # old is not what it cosigned
    assert w.add(body(10, 20))[0] == 200 and w.known[ORIGIN][0] == 20
    assert w.add(body(20, 20))[0] == 200  # the same tree again
    assert w.add(body(30, 20))[0] == 400  # old > new
    bad_proof = AddCheckpoint(20, (bytes(32),), signed(30)).encoded()
    assert w.add(bad_proof)[0] == 422 and w.known[ORIGIN][0] == 20
    other_root = sign_checkpoint(Checkpoint(ORIGIN, 20, bytes(32)), test_key("registry"))
    # tlog-witness: the same size with another root is a 422, as a proof that fails
    assert w.add(AddCheckpoint(20, (), other_root).encoded())[0] == 422
    stranger = Checkpoint("nobody.invalid/log", 3, merkle.root(3, SUB))
    text = stranger.text()
    note = Note(text, (sign_note(text, stranger.origin, test_key("stranger")),)).encoded()
    assert w.add(AddCheckpoint(0, (), note).encoded())[0] == 404
    forged = Note(signed(30)[: signed(30).index(b"\n\n") + 1],
                  (sign_note(b"x\n", ORIGIN, test_key("author")),)).encoded()  # fmt: skip
    assert w.add(AddCheckpoint(20, (), forged).encoded())[0] == 403
    assert w.add(b"garbage")[0] == 400
    assert w.known[ORIGIN][0] == 20  # nothing but a 200 moved it
    # from size 0 there is nothing to prove consistent: a proof there is refused
    with_proof = AddCheckpoint(0, (merkle.root(10, SUB),), signed(10)).encoded()
    assert Witness().add(with_proof) == (422, b"the proof must be empty from size 0\n")


def test_of_a_witness_answer_only_its_verified_cosignatures_are_kept() -> None:
    """A witness's answer reaches the published checkpoint only as the lines that verify
    under a keyring witness key: a line in the log's own name (a bad signature by its
    key) or by an unknown key would break, or swell, the note for every verifier."""
    note = signed(10)
    text = note[: note.index(b"\n\n") + 1]
    good = cosign(text, WITNESS, 5).line().encode()
    log_line = note[note.index(b"\n\n") + 2 :].splitlines(keepends=True)[0]
    name, blob = log_line.decode().rstrip("\n").split(" ")[1:]
    forged = f"\u2014 {name} {base64.b64encode(base64.b64decode(blob)[:4] + bytes(64)).decode()}\n"
    unknown = cosign(text, test_key("stranger"), 5).line().encode()
    witnesses = [KEYRING["test-mirror"]]
    kept, found = witness_lines(note, forged.encode() + good + unknown + good, witnesses)
    assert kept == good and [c.key_id for c in found] == ["test-mirror"]
    for answer in (good + "\u2014 x not-base64\n".encode(),
                   good + b"\xff\n", b"HTTP/1.1 200\n"):  # fmt: skip
        with pytest.raises(WitnessError) as refused:
            witness_lines(note, answer, witnesses)
        assert refused.value.code == "witness.malformed", answer


def test_a_key_that_may_sign_the_origin_is_no_witness_of_it() -> None:
    """The log's own key (pith_registry, allowed to sign the origin's checkpoints) may be
    listed among witness keys, as a keyring shared by a log and its auditors lists it: its
    cosignature of its own checkpoint does not count toward a quorum."""
    note = signed(10)
    text = note[: note.index(b"\n\n") + 1]
    own = with_cosignatures(note, cosign(text, test_key("registry"), 5).line().encode())
    assert verify_cosignatures(own, [KEYRING["test-registry"]]) == []
    with pytest.raises(WitnessError) as short:
        require_quorum(own, [KEYRING["test-registry"], KEYRING["test-mirror"]], 1)
    assert short.value.code == "witness.quorum"


def test_a_witness_key_listed_twice_is_one_witness() -> None:
    """``--witness-key test-mirror`` given twice asks for a quorum of two: one witness's
    cosignature does not meet it, nor does the same key under a second key_id."""
    note = signed(10)
    text = note[: note.index(b"\n\n") + 1]
    cosigned = with_cosignatures(note, cosign(text, WITNESS, 5).line().encode())
    mirror = KEYRING["test-mirror"]
    alias = make_keyring([{**test_keyring_entries(("mirror",))[0], "key_id": "alias"}])["alias"]
    for witnesses in ([mirror, mirror], [mirror, alias]):
        assert [c.key_id for c in verify_cosignatures(cosigned, witnesses)] == ["test-mirror"]
        with pytest.raises(WitnessError) as short:
            require_quorum(cosigned, witnesses, 2)
        assert short.value.code == "witness.quorum"


def test_the_size_cosigned_with_another_root_is_a_422() -> None:
    """tlog-witness (C2SP #280, which changed it from 409): "If the old size matches the
    checkpoint size, the witness MUST check that the root hashes are also identical. If
    they don't match, the witness MUST respond with a 422 Unprocessable Entity", as for a
    proof that fails; every 409 names a size to prove from, and this one named the size
    the client had sent. The record stays the tree first cosigned."""
    known = {ORIGIN: (20, merkle.root(20, SUB))}
    other_root = sign_checkpoint(Checkpoint(ORIGIN, 20, bytes(32)), test_key("registry"))
    verdict = judge_add_checkpoint(AddCheckpoint(20, (), other_root).encoded(), KEYRING,
                                   known.get, WITNESS, 7)  # fmt: skip
    assert verdict.status == 422 and verdict.content_type != "text/x.tlog.size"
    assert b"another root" in verdict.body
    assert verdict.record is None and verdict.origin is None


def test_a_checkpoint_of_size_0_with_another_root_is_422() -> None:
    """tlog-witness: a checkpoint of size zero MUST have the empty tree's root, else 422;
    the note is well formed and signed, so it is not a 400 of a malformed body."""
    w = Witness()
    not_empty = sign_checkpoint(Checkpoint(ORIGIN, 0, bytes(32)), test_key("registry"))
    status, said = w.add(AddCheckpoint(0, (), not_empty).encoded())
    assert status == 422 and b"empty tree" in said and ORIGIN not in w.known
    empty = sign_checkpoint(Checkpoint(ORIGIN, 0, merkle.EMPTY_ROOT), test_key("registry"))
    assert w.add(AddCheckpoint(0, (), empty).encoded())[0] == 200
    # the origin and the signature are judged first: 404 and 403 as for any size
    stranger = Checkpoint("nobody.invalid/log", 0, bytes(32))
    text = stranger.text()
    note = Note(text, (sign_note(text, stranger.origin, test_key("stranger")),)).encoded()
    assert w.add(AddCheckpoint(0, (), note).encoded())[0] == 404
    unsigned = Note(Checkpoint(ORIGIN, 0, bytes(32)).text(),
                    (sign_note(b"x\n", ORIGIN, test_key("author")),)).encoded()  # fmt: skip
    assert w.add(AddCheckpoint(0, (), unsigned).encoded())[0] == 403


def test_a_cosignature_line_is_read_by_name_key_id_and_length() -> None:
    note = signed(10)
    text = note[: note.index(b"\n\n") + 1]
    witnesses = [KEYRING["test-mirror"]]
    # the witness's name with another key ID: another key (a rotated one), ignored as
    # signed notes ignore unknown keys, not a cosignature that fails
    other = NoteSignature(WITNESS.signer_id, b"\x00\x01\x02\x03", bytes(72))
    assert verify_cosignatures(with_cosignatures(note, other.line().encode()), witnesses) == []
    # its key ID with fewer bytes than a timestamp: a cosignature that fails, no crash
    kid = cosignature_key_id(WITNESS.signer_id, WITNESS.public_key)
    for blob in (bytes(4), bytes(71), bytes(73)):
        short = NoteSignature(WITNESS.signer_id, kid, blob).line().encode()
        with pytest.raises(WitnessError) as refused:
            verify_cosignatures(with_cosignatures(note, short), witnesses)
        assert refused.value.code == "witness.cosignature"
    # a witness whose signer_id is no key name cannot write a cosignature line
    bad = SigningKey.from_seed(bytes(32), "bad", "has space.invalid", "mirror")
    with pytest.raises(WitnessError) as refused:
        cosign(text, bad, 5)
    assert refused.value.code == "witness.key"


def test_only_whole_signature_lines_are_appended() -> None:
    note = signed(10)
    text = note[: note.index(b"\n\n") + 1]
    line = cosign(text, WITNESS, 5).line().encode()
    for answer in (line.rstrip(b"\n"), b"x" + line, line + b"x\n"):
        with pytest.raises(WitnessError, match="malformed"):
            with_cosignatures(note, answer)


def test_a_body_of_exactly_the_limit_is_read() -> None:
    head = b"old 1\n\n"
    exact = head + signed(3).ljust(MAX_BODY_BYTES - len(head), b"x")
    assert len(exact) == MAX_BODY_BYTES and parse_add_checkpoint(exact).old == 1
    with pytest.raises(WitnessError, match="over"):
        parse_add_checkpoint(exact + b"x")


def test_a_cosignature_is_never_timestamped_zero(tmp_path: Path) -> None:
    """tlog-witness: "The cosignature MUST NOT omit the timestamp, i.e. the timestamp MUST
    NOT be zero". A witness whose clock read before 1970-01-01T00:00:01 answered 200 with a
    cosignature of time 0 and recorded the tree; it now cosigns nothing and records
    nothing (the store's transaction is undone: a 500 from the route)."""
    note = signed(10)
    text = note[: note.index(b"\n\n") + 1]
    with pytest.raises(WitnessError) as zero:
        cosign(text, WITNESS, 0)
    assert zero.value.code == "witness.malformed" and "timestamp 0" in zero.value.message
    assert cosign(text, WITNESS, 1).line()  # the first second is a time
    with Store.open(tmp_path / "w") as store:
        with pytest.raises(WitnessError):
            store.witness_add(lambda known: judge_add_checkpoint(body(0, 10), KEYRING, known,
                                                                 WITNESS, 0))  # fmt: skip
        assert store.witness_state(ORIGIN) is None
        store.witness_add(lambda known: judge_add_checkpoint(body(0, 10), KEYRING, known,
                                                             WITNESS, 1))  # fmt: skip
        assert store.witness_state(ORIGIN) == (10, merkle.root(10, SUB))


def test_a_checkpoint_with_sixteen_large_foreign_signatures_is_judged() -> None:
    """C2SP signed-note: a verifier MUST accept notes of at least 16 signatures, each of
    which may be nearly 5 kB (an ML-DSA-87 signature is 4,627 bytes). Such a checkpoint,
    with a full consistency proof, is about 100 KB: read and cosigned, the lines of keys the
    witness does not know ignored; the 64 KiB limit before refused it (413)."""
    foreign = b"".join(
        f"\u2014 witness{i:02d}.example/w ".encode()
        + base64.b64encode(struct.pack(">I", 0x1000 + i) + bytes([i]) * 4627) + b"\n"
        for i in range(16)
    )
    checkpoint = signed(40) + foreign
    proof = tuple(bytes([i]) * 32 for i in range(MAX_PROOF_LINES))
    padded = AddCheckpoint(20, proof, checkpoint).encoded()
    assert 64 << 10 < len(padded) <= MAX_BODY_BYTES
    known = {ORIGIN: (20, merkle.root(20, SUB))}
    verdict = judge_add_checkpoint(body(20, 40, checkpoint), KEYRING, known.get, WITNESS, 7)
    assert verdict.status == 200, verdict.body
    assert verdict.body.startswith("\u2014 ".encode())
