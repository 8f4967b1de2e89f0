"""prove equivocation and verify-proof of evidence files, in-process; the proofs are also
checked with Ed25519 and RFC 9162 code written here, independent of pithlog's."""

from __future__ import annotations

import base64
import hashlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from pithlog.cli import main
from pithlog.protocol.canonical import jcs
from pithlog.protocol.keys import make_keyring
from pithlog.store import Store
from pithlog.testing import TRUSTED, test_key, test_keyring_entries, write_key_file
from tests.store.eventgen import record

ORIGIN = "registry.test.invalid/pith"
CASE = Path(__file__).resolve().parents[2] / "vectors" / "cases" / "equivocations"


def run(argv: list[str]) -> tuple[int, bytes, str]:
    out, err = io.BytesIO(), io.StringIO()
    status = main(argv, stdout=out, stderr=err)
    return status, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def case(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The conformance case of equivocations, appended to a store."""
    tmp = tmp_path_factory.mktemp("evidence")
    key = tmp / "registry.key"
    write_key_file(key, test_key("registry"))
    store = str(tmp / "store")
    keyring = str(CASE / "keyring.json")
    status, _, err = run(["--store", store, "append", "--keep-invalid", "--keyring", keyring,
                          str(CASE / "events.jsonl")])  # fmt: skip
    assert status in (0, 2), err
    states = [json.loads(line) for line in (CASE / "expected.jsonl").read_bytes().splitlines()]
    equivocated = [s for s in states if s["equivocations"]]
    assert equivocated, "the case has equivocations"
    return {"tmp": tmp, "key": str(key), "store": store, "keyring": keyring,
            "states": equivocated}  # fmt: skip


def prove(case: dict[str, Any], pith: str, *extra: str) -> tuple[int, bytes, str]:
    return run(["--store", case["store"], "prove", "equivocation", pith, "--key", case["key"],
                "--origin", ORIGIN, "--keyring", case["keyring"], *extra])  # fmt: skip


def verify(case: dict[str, Any], data: bytes, name: str = "proof.json") -> tuple[int, bytes, str]:
    path = case["tmp"] / name
    path.write_bytes(data)
    return run(["verify-proof", "--keyring", case["keyring"], str(path)])


def every_proof(case: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any], bytes]]:
    """(state, equivocation, proof file) for every equivocated slot of the case."""
    found = []
    for state in case["states"]:
        for number, slot in enumerate(state["equivocations"], 1):
            status, out, err = prove(case, state["pith_number"], "--slot", str(number))
            assert status == 0, err
            found.append((state, slot, out))
    return found


def test_every_equivocation_is_proven_and_verified(case: dict[str, Any]) -> None:
    for state, slot, proof in every_proof(case):
        doc = json.loads(proof)
        assert doc["evidence_type"] == "pith-equivocation-proof"
        assert doc["slot"] == slot["slot"] and doc["pith_number"] == state["pith_number"]
        assert sorted(e["event_id"] for e in doc["events"]) == sorted(slot["event_ids"])
        status, out, err = verify(case, proof)
        assert status == 0, err
        assert json.loads(out)["event_ids"] == slot["event_ids"]
        assert "equivocation proven" in err


def _root_from_path(leaf: bytes, index: int, size: int, path: list[bytes]) -> bytes:
    """RFC 9162 2.1.3.2, written out here."""
    fn, sn = index, size - 1
    r = leaf
    for p in path:
        if sn == 0:
            raise AssertionError("path too long")
        if fn & 1 or fn == sn:
            r = hashlib.sha256(b"\x01" + p + r).digest()
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = hashlib.sha256(b"\x01" + r + p).digest()
        fn >>= 1
        sn >>= 1
    assert sn == 0
    return r


def test_proofs_hold_under_independent_code(case: dict[str, Any]) -> None:
    """Each envelope is signed by the named key (Ed25519 over its JCS body, spec 5) and
    included under the checkpoint's root (RFC 9162), which the log's key signed."""
    keyring = {k["key_id"]: k for k in json.loads(Path(case["keyring"]).read_text())["keys"]}
    for _, _, proof in every_proof(case):
        doc = json.loads(proof)
        text, _, signatures = doc["checkpoint"].partition("\n\n")
        origin, size, root_b64 = text.split("\n")[:3]
        root = base64.b64decode(root_b64)
        log_key = Ed25519PublicKey.from_public_bytes(
            base64.b64decode(keyring["test-registry"]["public_key_b64"]))
        sig = base64.b64decode(signatures.split(" ")[-1])[4:]
        log_key.verify(sig, (text + "\n").encode())
        for event, place in zip(doc["events"], doc["inclusion"], strict=True):
            body = {k: v for k, v in event.items() if k not in ("event_id", "signature_b64")}
            assert event["event_id"] == "sha256:" + hashlib.sha256(rfc8785.dumps(body)).hexdigest()
            signer = keyring[event["signer"]["key_id"]]
            assert signer in doc["keys"]
            public = Ed25519PublicKey.from_public_bytes(base64.b64decode(signer["public_key_b64"]))
            public.verify(base64.b64decode(event["signature_b64"]),
                          hashlib.sha256(rfc8785.dumps(body)).digest())  # spec 4: digest(body)
            leaf = bytes.fromhex(event["event_id"][7:]) + hashlib.sha256(
                rfc8785.dumps(event)).digest()
            leaf_hash = hashlib.sha256(b"\x00" + leaf).digest()
            path = [base64.b64decode(h) for h in place["path"]]
            assert _root_from_path(leaf_hash, place["index"], int(size), path) == root
        assert origin == ORIGIN


def test_every_single_byte_change_fails(case: dict[str, Any]) -> None:
    """No change of one byte leaves a proof that verifies: each is refused as not evidence
    (exit 2) or as evidence that does not hold (exit 1)."""
    from pithlog.errors import PithlogError
    from pithlog.protocol.keys import load_keyring
    from pithlog.transparency.evidence import verify_equivocation_proof

    keyring = load_keyring(Path(case["keyring"]).read_bytes())
    _, _, proof = min(every_proof(case), key=lambda p: len(p[2]))
    assert verify_equivocation_proof(proof, keyring).event_ids
    codes: dict[str, int] = {}
    for at in range(len(proof)):
        changed = bytearray(proof)
        changed[at] ^= 0x01 if changed[at] != 0x0A else 0x20
        with pytest.raises(PithlogError) as refused:
            verify_equivocation_proof(bytes(changed), keyring)
        codes[refused.value.code] = codes.get(refused.value.code, 0) + 1
    assert codes.keys() <= {"evidence.malformed", "evidence.does_not_hold",
                            "checkpoint.malformed", "checkpoint.bad_signature",
                            "checkpoint.untrusted"}  # fmt: skip
    assert codes.get("evidence.does_not_hold", 0) > 0 and codes.get("evidence.malformed", 0) > 0


def test_exit_statuses_of_verify_proof(case: dict[str, Any]) -> None:
    _, _, proof = every_proof(case)[0]
    doc = json.loads(proof)
    doc["inclusion"][0]["index"] += 1  # well formed, does not hold
    status, _, err = verify(case, rfc8785.dumps(doc) + b"\n")
    assert status == 1 and "[evidence.does_not_hold]" in err
    status, _, err = verify(case, proof.replace(b",", b", ", 1))  # not JCS: not as written
    assert status == 2 and "[evidence.malformed]" in err
    doc = json.loads(proof)
    doc["events"] = doc["events"][:1] * 2  # one event twice is no equivocation
    doc["inclusion"] = doc["inclusion"][:1] * 2
    status, _, err = verify(case, rfc8785.dumps(doc) + b"\n")
    assert status == 1 and "one event_id" in err


def test_a_pith_without_equivocation_and_slot_choice(case: dict[str, Any]) -> None:
    calm_case = CASE.parent / "all-event-types"
    store = str(case["tmp"] / "calm")
    status, _, err = run(["--store", store, "append", "--keyring", case["keyring"],
                          str(calm_case / "events.jsonl")])  # fmt: skip
    assert status in (0, 2), err
    calm = json.loads((calm_case / "expected.jsonl").read_bytes().splitlines()[0])
    assert not calm["equivocations"]
    status, out, err = prove({**case, "store": store}, calm["pith_number"])
    assert status == 2 and out == b"" and "[evidence.no_equivocation]" in err
    busy = next(s for s in case["states"] if len(s["equivocations"]) > 1)
    status, _, err = prove(case, busy["pith_number"])
    assert status == 2 and "--slot" in err
    status, _, err = prove(case, busy["pith_number"], "--slot", "99")
    assert status == 2 and "[evidence.no_equivocation]" in err


def test_no_proof_while_a_keyring_change_is_under_way(tmp_path: Path) -> None:
    """Midway through a change that trusts a second registry key, a pith already
    re-reduced holds an equivocation signed by that key while the store's digest still
    names the old keyring: proving under the old one is refused with a line, not a
    KeyError for the key it lacks."""
    key = tmp_path / "registry.key"
    write_key_file(key, test_key("registry"))
    old = {"keyring_version": "1", "keys": test_keyring_entries(TRUSTED)}
    (tmp_path / "old.json").write_text(json.dumps(old))
    new = make_keyring(test_keyring_entries((*TRUSTED, "stranger")))
    records = [record(f"2501.{i:05d}") for i in range(3)]
    # a second registry's record of each: two valid records of one pith under `new`
    rivals = [record(f"2501.{i:05d}", at=5, signer="stranger") for i in range(3)]

    class Stop(Exception):
        pass

    def stop_after_a_pith(stage: str, done: int, total: int) -> None:
        if stage == "reduce" and done:
            raise Stop

    with Store.open(tmp_path / "s") as store:
        store.append([jcs(e) for e in records + rivals], make_keyring(old["keys"]),
                     keep_invalid=True)  # fmt: skip
        with pytest.raises(Stop):
            store.rekey(new, progress=stop_after_a_pith, piece_events=1)
        proven = [r["pith_number"] for r in records
                  if json.loads(store.state(r["pith_number"]) or b"{}")["equivocations"]]
    assert proven, "a pith was re-reduced under the new keyring"
    status, out, err = run(["--store", str(tmp_path / "s"), "prove", "equivocation", proven[0],
                            "--key", str(key), "--origin", ORIGIN, "--keyring",
                            str(tmp_path / "old.json")])  # fmt: skip
    assert (status, out) == (2, b"")
    assert err.startswith("pithlog: [store.keyring_changed] a keyring change is under way")


def _split_view_file(accepted: int, served: int, other_root: bool, proof: object,
                     served_by: str = "registry") -> bytes:  # fmt: skip
    """A pith-split-view-proof of two checkpoints of the registry's test key over a tree of
    distinct leaves (the served one over another root when ``other_root``, and signed by
    the test key ``served_by``)."""
    from pithlog.transparency import merkle
    from pithlog.transparency.checkpoint import Checkpoint, sign_checkpoint

    subtree = merkle.subtree_from_leaves([merkle.leaf_hash(b"%d" % i) for i in range(32)])
    key = test_key("registry")
    a = sign_checkpoint(Checkpoint(ORIGIN, accepted, merkle.root(accepted, subtree)), key)
    root = merkle.leaf_hash(b"another") if other_root else merkle.root(served, subtree)
    b = sign_checkpoint(Checkpoint(ORIGIN, served, root), test_key(served_by))
    doc = {"evidence_type": "pith-split-view-proof", "evidence_version": "1",
           "accepted_checkpoint": a.decode(), "served_checkpoint": b.decode(),
           "consistency_proof": proof}  # fmt: skip
    return rfc8785.dumps(doc) + b"\n"


def test_a_split_view_file_holds_no_text_that_is_not_checked(case: dict[str, Any]) -> None:
    """One size with two roots needs no proof: a consistency_proof there was never read, so
    a file carrying any text in it (or a number, a list) verified as a proven split view,
    though the format has no free text. It is now not evidence, as is a consistency_proof
    of any other type than a string or null."""
    status, _, err = verify(case, _split_view_file(7, 7, True, None))
    assert status == 0 and "split view proven" in err, err
    for junk in ("the log's operator is a crook", 5, ["anything"]):
        status, _, err = verify(case, _split_view_file(7, 7, True, junk))
        assert status == 2 and "[evidence.malformed]" in err, err
    status, _, err = verify(case, _split_view_file(5, 9, False, {"old": 5}))
    assert status == 2 and "[evidence.malformed] consistency_proof" in err, err


def test_a_split_view_names_the_keys_that_signed_each_checkpoint(case: dict[str, Any]) -> None:
    """Two keys of the keyring may sign for one origin (a registry's old and new key): the
    output said only that the origin signed two histories, not by which keys, as an
    inclusion proof's output does. It lists the signers of each checkpoint, in the order
    of its sizes."""
    from pithlog.transparency import merkle
    from pithlog.transparency.checkpoint import Checkpoint, sign_checkpoint
    from pithlog.transparency.proofs import ConsistencyProof

    status, out, err = verify(case, _split_view_file(7, 7, True, None, "registry-2"))
    assert status == 0, err
    doc = json.loads(out)
    assert doc["sizes"] == [7, 7]
    assert doc["signers"] == [["test-registry"], ["test-registry-2"]]
    assert ("signed two histories (tree size 7 signed by test-registry, tree size 7 by "
            "test-registry-2)") in err, err
    # sizes differ: the smaller first, here the served checkpoint, of the other key
    rewritten = merkle.subtree_from_leaves([merkle.leaf_hash(b"x%d" % i) for i in range(32)])
    honest = merkle.subtree_from_leaves([merkle.leaf_hash(b"%d" % i) for i in range(32)])
    accepted = sign_checkpoint(Checkpoint(ORIGIN, 9, merkle.root(9, rewritten)),
                               test_key("registry"))  # fmt: skip
    served = sign_checkpoint(Checkpoint(ORIGIN, 5, merkle.root(5, honest)),
                             test_key("registry-2"))  # fmt: skip
    proof = ConsistencyProof(5, 9, tuple(merkle.consistency_path(5, 9, rewritten))).encoded()
    doc = {"evidence_type": "pith-split-view-proof", "evidence_version": "1",
           "accepted_checkpoint": accepted.decode(), "served_checkpoint": served.decode(),
           "consistency_proof": proof.decode()}  # fmt: skip
    status, out, err = verify(case, rfc8785.dumps(doc) + b"\n")
    assert status == 0, err
    doc = json.loads(out)
    assert doc["sizes"] == [5, 9]
    assert doc["signers"] == [["test-registry-2"], ["test-registry"]]
    assert "(tree size 5 signed by test-registry-2, tree size 9 by test-registry)" in err, err


def test_a_pith_number_of_the_file_is_shown_escaped(case: dict[str, Any]) -> None:
    """The evidence file's pith_number, which no event has, was quoted as it was in the
    one-line error: a line break and a terminal escape reached the terminal."""
    _, _, proof = every_proof(case)[0]
    doc = json.loads(proof)
    doc["pith_number"] = "pith:x\n[evidence.ok] fine\x1b[2J"
    status, _, err = verify(case, rfc8785.dumps(doc) + b"\n")
    assert status == 1 and "[evidence.does_not_hold]" in err
    assert err.count("\n") == 1 and "\x1b" not in err, err


def test_a_keyring_other_than_the_stores_says_both_and_what_to_do(
    case: dict[str, Any], tmp_path: Path
) -> None:
    """The keys a proof carries must be those the states were judged under: another
    keyring (the log's key added to it, say) is refused, naming the two keyrings by digest
    and the ways out. It said only that the keyring was another."""
    other = json.loads(Path(case["keyring"]).read_bytes())
    other["keys"] = other["keys"][:-1]
    ring = tmp_path / "other.json"
    ring.write_text(json.dumps(other))
    pith = case["states"][0]["pith_number"]
    status, out, err = run(["--store", case["store"], "prove", "equivocation", pith, "--key",
                            case["key"], "--origin", ORIGIN, "--keyring", str(ring)])  # fmt: skip
    assert (status, out) == (2, b"")
    stored = make_keyring(json.loads(Path(case["keyring"]).read_bytes())["keys"]).digest
    given = make_keyring(other["keys"]).digest
    assert err == (f"pithlog: [store.keyring_changed] the store's states were reduced under "
                   f"keyring {stored[:16]}, not --keyring's ({given[:16]}): give the keyring "
                   "the store was reduced under (pithlog stats: keyring_digest; pithlog "
                   "keyring digest KEYRING), or bring the store under this one first with "
                   "pithlog rekey --keyring KEYRING\n")  # fmt: skip


def test_an_evidence_file_past_1_mib_is_read_and_one_past_the_limit_refused(
    tmp_path: Path,
) -> None:
    """The envelopes of a slot may be large (a line is up to 8 MiB): a valid equivocation
    proof of two 600 KB statements (1.2 MB) is verified whole; a file past
    MAX_EVIDENCE_BYTES (64 MiB) is refused unread, with its code."""
    from pithlog.transparency.evidence import MAX_EVIDENCE_BYTES

    pith, key, keyring = _one_slot_store(tmp_path, [c * 600_000 for c in "ab"])
    status, proof, err = run(["--store", str(tmp_path / "s"), "prove", "equivocation", pith,
                              "--key", str(key), "--origin", ORIGIN, "--keyring",
                              str(keyring)])  # fmt: skip
    assert status == 0, err
    assert 1 << 20 < len(proof) < 2 << 20
    (tmp_path / "proof.json").write_bytes(proof)
    status, out, err = run(["verify-proof", "--keyring", str(keyring),
                            str(tmp_path / "proof.json")])  # fmt: skip
    assert status == 0, err
    assert json.loads(out)["proof"] == "pith-equivocation-proof"
    huge = tmp_path / "huge.json"
    with huge.open("wb") as f:  # sparse past its first byte: nothing is written to disk
        f.write(b"{")
        f.truncate(MAX_EVIDENCE_BYTES + 1)
    status, out, err = run(["verify-proof", "--keyring", str(keyring), str(huge)])
    assert (status, out) == (2, b"")
    assert err == (f"pithlog: [evidence.malformed] an evidence file is limited to "
                   f"{MAX_EVIDENCE_BYTES} bytes\n")  # fmt: skip


def _one_slot_store(tmp_path: Path, statements: list[str]) -> tuple[str, Path, Path]:
    """A store whose one pith has one slot filled by an attestation per statement: the
    pith, the registry's key file and the keyring file."""
    from tests.store.eventgen import attestation

    key = tmp_path / "registry.key"
    write_key_file(key, test_key("registry"))
    keys = test_keyring_entries(TRUSTED)
    keyring = tmp_path / "keyring.json"
    keyring.write_text(json.dumps({"keyring_version": "1", "keys": keys}))
    first = record("2501.00001")
    pith = first["pith_number"]
    events = [first, *(attestation(pith, 10, statement=s) for s in statements)]
    with Store.open(tmp_path / "s") as store:
        store.append([jcs(e) for e in events], make_keyring(keys), keep_invalid=True)
    return pith, key, keyring


def test_a_slot_filled_more_than_64_times_gives_a_proof_that_verifies(tmp_path: Path) -> None:
    """A proof holds 64 envelopes at most (MAX_EVENTS), which verify-proof enforces; a slot
    filled 65 times was written whole, 65 envelopes, and its own verify-proof refused it as
    no evidence file (exit 2): the more a key equivocated, the less it could be shown. The
    proof now carries the first 64 of the slot, and says so."""
    pith, key, keyring = _one_slot_store(tmp_path, [f"statement {i}" for i in range(65)])
    status, proof, err = run(["--store", str(tmp_path / "s"), "prove", "equivocation", pith,
                              "--key", str(key), "--origin", ORIGIN, "--keyring",
                              str(keyring)])  # fmt: skip
    assert status == 0, err
    assert "64 of the 65 events of slot" in err, err
    doc = json.loads(proof)
    assert len(doc["events"]) == len(doc["inclusion"]) == 64
    (tmp_path / "proof.json").write_bytes(proof)
    status, out, err = run(["verify-proof", "--keyring", str(keyring),
                            str(tmp_path / "proof.json")])  # fmt: skip
    assert status == 0, err
    assert json.loads(out)["event_ids"] == [e["event_id"] for e in doc["events"]]


def test_a_proof_of_large_envelopes_stays_within_the_file_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """64 envelopes of up to 1 MiB each are more than MAX_EVIDENCE_BYTES (64 MiB) with the
    rest of the file: a key that equivocated with large enough statements got a proof that
    verify-proof refused unread. The proof takes envelopes, in order, while the file stays
    within the limit (two always do); shown here with the limit made smaller."""
    from pithlog.protocol.keys import load_keyring
    from pithlog.transparency import evidence

    pith, _, keyring_file = _one_slot_store(tmp_path, [c * 3000 for c in "abcdefgh"])
    keyring = load_keyring(keyring_file.read_bytes())
    monkeypatch.setattr(evidence, "MAX_EVIDENCE_BYTES", 16_000)
    with Store.open(tmp_path / "s", readonly=True) as store:
        slot = json.loads(store.state(pith) or b"{}")["equivocations"][0]
        size, root = store.tree_root(None)
        found = store.applied_copies_in_tree(slot["event_ids"], size)
    from pithlog.transparency.checkpoint import Checkpoint, sign_checkpoint

    note = sign_checkpoint(Checkpoint(ORIGIN, size, root), test_key("registry"))
    envelopes = [envelope for envelope, _, _ in found]
    places = [evidence.Included(index, tuple(path)) for _, index, path in found]
    keys = [keyring["test-author"].entry()]
    proof, kept = evidence.equivocation_proof(pith, envelopes, keys, note, places)
    assert len(proof) <= 16_000 and 2 <= kept < 8
    assert len(json.loads(proof)["events"]) == kept
    proven = evidence.verify_equivocation_proof(proof, keyring)
    assert proven.event_ids == tuple(slot["event_ids"][:kept])


def test_a_slot_of_another_shape_is_no_evidence_file(case: dict[str, Any]) -> None:
    """docs/evidence.md step 1: a file with members of another shape is not evidence
    (exit 2). A ``slot`` that was not an object of the four members (a list, a member
    more or less, a number for a string) was read as a slot the events did not fill:
    ``[evidence.does_not_hold]``, exit 1, a claim that the file's evidence was false. A
    well-formed slot the events do not fill stays exit 1."""
    _, _, proof = every_proof(case)[0]
    doc = json.loads(proof)
    slot = doc["slot"]
    for bad in (list(slot.values()), "slot", None, {**slot, "note": "x"},
                {k: v for k, v in slot.items() if k != "target"}, {**slot, "target": 5},
                {**slot, "event_type": None}, {**slot, "created_at": 1},
                {**slot, "key_id": ["k"]}):  # fmt: skip
        status, out, err = verify(case, rfc8785.dumps({**doc, "slot": bad}) + b"\n")
        assert (status, out) == (2, b""), (bad, err)
        assert err.startswith("pithlog: [evidence.malformed] slot"), (bad, err)
    status, _, err = verify(case, rfc8785.dumps({**doc, "slot": {**slot, "target": "other"}})
                            + b"\n")  # fmt: skip
    assert status == 1 and "[evidence.does_not_hold]" in err and "does not fill" in err, err


def test_verify_proof_help_and_cli_md_say_what_exit_2_is_for_an_evidence_file(
    case: dict[str, Any],
) -> None:
    """A readable file that is no valid evidence file exits 2 ([evidence.malformed]):
    verify-proof's --help said exit 2 was for unreadable input, and its section of
    docs/cli.md named neither evidence files nor the evidence.* codes."""
    from tests.cli.test_cli_doc import sections

    status, out, err = verify(case, b'{"evidence_type":"pith-split-view-proof"}\n')
    assert (status, out) == (2, b"") and "[evidence.malformed]" in err, err
    status, out, _ = run(["verify-proof", "--help"])
    text = " ".join(out.decode().split())
    assert status == 0
    assert ("2 when a file cannot be read or is not a proof, a checkpoint or an evidence "
            "file of its format (evidence.malformed: nothing proven either way)") in text
    assert "1 when it does not (evidence.does_not_hold" in text
    _, section = sections()["verify-proof"]
    section = " ".join(section.split())
    for said in ("[evidence.md](evidence.md)", "`evidence.does_not_hold`",
                 "`evidence.malformed`", '"pith-equivocation-proof"',
                 '"pith-split-view-proof"'):  # fmt: skip
        assert said in section, said
