"""checkpoint, verify-checkpoint, prove, verify-proof and sync, in-process."""

from __future__ import annotations

import io
import json
import os
import random
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from storeevents import g

from pithlog.cli import main
from pithlog.errors import CODES
from pithlog.store import Store
from pithlog.testing import test_key, test_keyring_entries, write_key_file

ORIGIN = "registry.test.invalid/pith"


def run(argv: list[str]) -> tuple[int, bytes, str]:
    out, err = io.BytesIO(), io.StringIO()
    status = main(argv, stdout=out, stderr=err)
    return status, out.getvalue(), err.getvalue()


@pytest.fixture
def f(tmp_path: Path) -> dict[str, Any]:
    events = [e for e in g.mixed_events(random.Random(8), piths=4, per_pith=5)
              if e["signer"]["key_id"] != "test-stranger"]  # fmt: skip
    keyring = tmp_path / "keyring.json"
    keyring.write_text(json.dumps({"keyring_version": "1", "keys": test_keyring_entries()}))
    other = tmp_path / "authors.json"
    other.write_text(json.dumps({"keyring_version": "1",
                                 "keys": test_keyring_entries(("author",))}))  # fmt: skip
    for name in ("registry", "mirror"):
        write_key_file(tmp_path / f"{name}.key", test_key(name))
    first = tmp_path / "first.jsonl"
    first.write_bytes(b"".join(g.encoded(e) + b"\n" for e in events[:20]))
    rest = tmp_path / "rest.jsonl"
    rest.write_bytes(b"".join(g.encoded(e) + b"\n" for e in events[20:]))
    return {"events": events, "keyring": str(keyring), "authors": str(other),
            "key": str(tmp_path / "registry.key"), "mirror": str(tmp_path / "mirror.key"),
            "first": str(first), "rest": str(rest), "store": str(tmp_path / "store"),
            "tmp": tmp_path}  # fmt: skip


def append(f: dict[str, Any], path: str, store: str | None = None) -> None:
    status, _, err = run(["--store", store or f["store"], "append", "--keyring", f["keyring"],
                          path])  # fmt: skip
    assert status == 0, err


def checkpoint(f: dict[str, Any], name: str, *extra: str, store: str | None = None) -> Path:
    status, out, err = run(["--store", store or f["store"], "checkpoint", "--key", f["key"],
                            "--origin", ORIGIN, *extra])  # fmt: skip
    assert status == 0, err
    path: Path = f["tmp"] / name
    path.write_bytes(out)
    return path


def test_checkpoint_and_verify_checkpoint(f: dict[str, Any]) -> None:
    append(f, f["first"])
    cp = checkpoint(f, "cp1")
    status, out, err = run(["verify-checkpoint", "--keyring", f["keyring"], str(cp)])
    assert status == 0, err
    doc = json.loads(out)
    assert doc["origin"] == ORIGIN and doc["size"] == 20 and doc["signers"] == ["test-registry"]
    args = ["--store", f["store"], "verify-checkpoint", "--keyring", f["keyring"]]
    assert run([*args, "--check-store", str(cp)])[0] == 0
    append(f, f["rest"])
    assert run([*args, "--check-store", str(cp)])[0] == 0  # an older size of the same log
    assert run([*args, "--origin", ORIGIN, str(cp)])[0] == 0
    status, _, err = run([*args, "--origin", "registry.test.invalid", str(cp)])
    assert status == 1 and "[checkpoint.origin]" in err
    # another log's checkpoint: signed, but the store does not hold that tree
    other = str(f["tmp"] / "other")
    append(f, f["rest"], store=other)
    foreign = checkpoint(f, "foreign", store=other)
    status, _, err = run([*args, "--check-store", str(foreign)])
    assert status == 1 and "[checkpoint.diverged]" in err
    big = checkpoint(f, "big")
    status, _, err = run(["--store", other, "verify-checkpoint", "--keyring", f["keyring"],
                          "--check-store", str(big)])  # fmt: skip
    assert status == 3 and "[checkpoint.behind]" in err  # fewer leaves: behind, not forked
    status, _, err = run(["verify-checkpoint", "--keyring", f["authors"], str(cp)])
    assert status == 1 and "[checkpoint.untrusted]" in err
    cp.write_bytes(cp.read_bytes().replace(b"\n20\n", b"\n21\n"))
    status, _, err = run(["verify-checkpoint", "--keyring", f["keyring"], str(cp)])
    assert status == 1 and "[checkpoint.bad_signature]" in err
    cp.write_bytes(b"not a checkpoint\n")
    status, _, err = run(["verify-checkpoint", "--keyring", f["keyring"], str(cp)])
    assert status == 2 and "[checkpoint.malformed]" in err
    status, _, err = run(["--store", f["store"], "checkpoint", "--key", f["mirror"],
                          "--origin", ORIGIN])  # fmt: skip
    assert status == 2 and "[checkpoint.key]" in err
    status, _, err = run(["--store", f["store"], "checkpoint", "--key", f["key"],
                          "--origin", ORIGIN, "--size", "999"])  # fmt: skip
    assert status == 2 and "[store.tree_size]" in err


def test_inclusion_proofs(f: dict[str, Any]) -> None:
    append(f, f["first"])
    append(f, f["rest"])
    proofs: list[Path] = []
    for i, event in enumerate(f["events"]):
        status, out, err = run(["--store", f["store"], "prove", "inclusion", event["event_id"],
                                "--key", f["key"], "--origin", ORIGIN])  # fmt: skip
        assert status == 0, err
        path = f["tmp"] / f"proof-{i}"
        path.write_bytes(out)
        proofs.append(path)
        status, out, err = run(["verify-proof", "--keyring", f["keyring"], str(path)])
        assert status == 0, err
        doc = json.loads(out)
        assert doc["event_id"] == event["event_id"] and doc["index"] == i
    eid = f["events"][3]["event_id"]
    args = ["verify-proof", "--keyring", f["keyring"]]
    assert run([*args, "--event-id", eid, str(proofs[3])])[0] == 0
    status, _, err = run([*args, "--event-id", eid, str(proofs[4])])
    assert status == 1 and "[proof.mismatch]" in err
    # an --event-id that is no event_id is the option's fault, not the proof file's
    status, _, err = run([*args, "--event-id", eid.upper(), str(proofs[3])])
    assert status == 2 and "[proof.event_id]" in err
    # an older tree size
    status, out, _ = run(["--store", f["store"], "prove", "inclusion", eid, "--size", "4",
                          "--key", f["key"], "--origin", ORIGIN])  # fmt: skip
    assert status == 0
    older = f["tmp"] / "older"
    older.write_bytes(out)
    assert run([*args, str(older)])[0] == 0
    status, _, err = run(["--store", f["store"], "prove", "inclusion", eid, "--size", "3",
                          "--key", f["key"], "--origin", ORIGIN])  # fmt: skip
    assert status == 2 and "[proof.not_found]" in err
    status, _, err = run(["--store", f["store"], "prove", "inclusion", "sha256:12",
                          "--key", f["key"], "--origin", ORIGIN])  # fmt: skip
    assert status == 2 and "[proof.event_id]" in err
    # mutations: a wrong index, a flipped bit in a hash, the checkpoint's size changed
    data = proofs[5].read_bytes()
    bad = f["tmp"] / "bad"
    bad.write_bytes(data.replace(b"index 5\n", b"index 6\n"))
    status, _, err = run([*args, str(bad)])
    assert status == 1 and "[proof.inclusion]" in err
    lines = data.split(b"\n")
    lines[3] = lines[3][:5] + (b"A" if lines[3][5:6] != b"A" else b"B") + lines[3][6:]
    bad.write_bytes(b"\n".join(lines))
    status, _, err = run([*args, str(bad)])
    assert status == 1 and "[proof.inclusion]" in err
    size = str(len(f["events"])).encode()
    bad.write_bytes(data.replace(b"\n" + size + b"\n", b"\n" + str(len(f["events"]) + 1)
                                 .encode() + b"\n"))  # fmt: skip
    status, _, err = run([*args, str(bad)])
    assert status == 1 and "[checkpoint.bad_signature]" in err
    status, _, err = run([*args, str(proofs[0]), str(proofs[1])])
    assert status == 2 and "[usage.arguments]" in err


def test_consistency_and_a_rewritten_history(f: dict[str, Any]) -> None:
    append(f, f["first"])
    old = checkpoint(f, "old")
    append(f, f["rest"])
    new = checkpoint(f, "new")
    status, out, err = run(["--store", f["store"], "prove", "consistency", "20"])
    assert status == 0, err
    assert out.startswith(b"pithlog-consistency-proof@v1\nold 20\nnew ")
    proof = f["tmp"] / "consistency"
    proof.write_bytes(out)
    args = ["verify-proof", "--keyring", f["keyring"], str(proof)]
    status, out, err = run([*args, str(old), str(new)])
    assert status == 0, err
    assert json.loads(out)["old"] == 20
    status, _, err = run([*args, str(new), str(old)])
    assert status == 1 and "[proof.mismatch]" in err
    status, _, err = run(args)
    assert status == 2 and "[usage.arguments]" in err
    # a consistency proof says nothing about an event: --event-id is not silently dropped
    eid = f["events"][0]["event_id"]
    status, out, err = run(["verify-proof", "--keyring", f["keyring"], "--event-id", eid,
                            str(proof), str(old), str(new)])  # fmt: skip
    assert status == 2 and "[usage.arguments]" in err and out == b""
    # history rewritten: one early event left out, everything appended again elsewhere
    lines = Path(f["first"]).read_bytes().splitlines(keepends=True)
    rewritten = f["tmp"] / "rewritten.jsonl"
    rewritten.write_bytes(b"".join(lines[:7] + lines[8:]) + Path(f["rest"]).read_bytes())
    store2 = str(f["tmp"] / "store2")
    append(f, str(rewritten), store=store2)
    append(f, f["first"], store=store2)  # the left-out event arrives later
    new2 = checkpoint(f, "new2", store=store2)
    status, out, _ = run(["--store", store2, "prove", "consistency", "20"])
    assert status == 0
    proof.write_bytes(out)
    status, _, err = run([*args, str(old), str(new2)])
    assert status == 1 and "[proof.consistency]" in err
    status, _, err = run(["--store", f["store"], "prove", "consistency", "99"])
    assert status == 2 and "[store.tree_size]" in err
    # OLD past NEW: the bound named is NEW, not the store's size
    status, _, err = run(["--store", f["store"], "prove", "consistency", "20", "10"])
    assert status == 2 and "old size 20 is not between 0 and the new size 10" in err, err


def test_sync_command(f: dict[str, Any]) -> None:
    append(f, f["first"])
    append(f, f["rest"])
    b = str(f["tmp"] / "b")
    append(f, f["rest"], store=b)
    status, out, err = run(["--store", b, "sync", "--from", f["store"], "--keyring",
                            f["keyring"]])  # fmt: skip
    assert status == 0, err
    doc = json.loads(out)
    assert doc["needed"] == 20 and doc["statuses"] == {"stored": 20}
    assert doc["bytes"]["total"] == sum(v for k, v in doc["bytes"].items() if k != "total")
    status, out, _ = run(["--store", b, "sync", "--from", f["store"], "--keyring",
                          f["keyring"]])  # fmt: skip
    assert status == 0 and json.loads(out)["needed"] == 0
    for pith in {e["pith_number"] for e in f["events"]}:
        assert run(["--store", b, "state", pith])[1] == run(["--store", f["store"], "state",
                                                              pith])[1]  # fmt: skip
    # from an export file, with a stranger's event kept there as invalid evidence
    export = f["tmp"] / "export.jsonl"
    status, out, _ = run(["--store", f["store"], "export"])
    stranger = g.attestation(f["events"][0]["pith_number"], 300, signer="stranger")
    export.write_bytes(out + g.encoded(stranger) + b"\n" + b"garbage\n")
    c = str(f["tmp"] / "c")
    status, out, err = run(["--store", c, "sync", "--from", str(export), "--keyring",
                            f["keyring"]])  # fmt: skip
    assert status == 2 and "--keep-invalid" in err
    doc = json.loads(out)
    assert doc["statuses"] == {"stored": len(f["events"]), "rejected": 1}
    assert doc["refused_lines"] == 1
    # --keep-invalid needs the source's checkpoint
    status, out, err = run(["--store", c, "sync", "--from", f["store"], "--keyring",
                            f["keyring"], "--keep-invalid"])  # fmt: skip
    assert status == 2 and "[usage.arguments]" in err and "--checkpoint" in err
    signed = checkpoint(f, "signed.cp")
    # from a store holding it in its signed log, the invalid copy is proven and kept
    status, _, err = run(["--store", f["store"], "append", "--keyring", f["keyring"],
                          "--keep-invalid", str(export)])  # fmt: skip
    signed = checkpoint(f, "signed2.cp")
    status, out, err = run(["--store", c, "sync", "--from", f["store"], "--keyring",
                            f["keyring"], "--keep-invalid", "--checkpoint", str(signed),
                            "--origin", ORIGIN])  # fmt: skip
    assert status == 0, err
    doc = json.loads(out)
    assert doc["statuses"] == {"stored": 1} and doc["proven"] == 1
    # a checkpoint the keyring does not trust is refused before anything is fetched
    status, _, err = run(["--store", c, "sync", "--from", f["store"], "--keyring",
                          f["authors"], "--keep-invalid", "--checkpoint", str(signed)])
    assert status == 1 and "[checkpoint.untrusted]" in err
    status, _, err = run(["--store", c, "sync", "--from", str(f["tmp"] / "nothing"),
                          "--keyring", f["keyring"]])  # fmt: skip
    assert status == 2 and "[usage.unreadable]" in err


def test_sync_from_a_file_of_too_many_copies_stops_reading_it(f: dict[str, Any]) -> None:
    """An export holding more copies than the store holds plus --max-copies is refused
    where it goes past them, not once indexed whole; the store is left as it was."""
    export = f["tmp"] / "all.jsonl"
    export.write_bytes(b"".join(g.encoded(e) + b"\n" for e in f["events"]))
    total = len(f["events"])
    b = str(f["tmp"] / "b")
    append(f, f["first"], store=b)  # the first 20 copies of the file
    args = ["--store", b, "sync", "--from", str(export), "--keyring", f["keyring"]]
    status, _, err = run([*args, "--max-copies", str(total - 21)])
    assert status == 2 and "[sync.limit]" in err and f"line {total}: " in err, err
    with Store.open(b, create=False, readonly=True) as store:
        assert store.tree_size() == 20
    status, out, err = run([*args, "--max-copies", str(total - 20)])
    assert status == 0 and json.loads(out)["needed"] == total - 20, err
    # a store that does not exist yet holds nothing: none is made
    c = f["tmp"] / "c"
    status, _, err = run(["--store", str(c), "sync", "--from", str(export), "--keyring",
                          f["keyring"], "--max-copies", "3"])  # fmt: skip
    assert status == 2 and "line 4: the export holds more than 3" in err and not c.exists()


def test_a_mirror_behind_the_checkpoint_is_behind_not_forked(f: dict[str, Any]) -> None:
    append(f, f["first"])
    append(f, f["rest"])
    cp = checkpoint(f, "cp")
    size = json.loads(run(["verify-checkpoint", "--keyring", f["keyring"], str(cp)])[1])["size"]
    mirror = str(f["tmp"] / "mirror")
    append(f, f["first"], store=mirror)  # the log's first 20 leaves
    status, out, err = run(["--store", mirror, "verify-checkpoint", "--keyring", f["keyring"],
                            "--check-store", str(cp)])  # fmt: skip
    assert status == 3 and out == b""
    assert "[checkpoint.behind]" in err and f"behind the checkpoint by {size - 20} leaf(s)" in err


def test_a_fork_names_the_first_leaf_where_the_logs_part(f: dict[str, Any]) -> None:
    append(f, f["first"])
    cp = checkpoint(f, "cp")
    fork = str(f["tmp"] / "fork")
    lines = Path(f["first"]).read_bytes().splitlines(keepends=True)
    # the same log up to leaf 12, then the leaves in another order
    (f["tmp"] / "forked.jsonl").write_bytes(b"".join(lines[:12] + lines[12:][::-1]))
    append(f, str(f["tmp"] / "forked.jsonl"), store=fork)
    args = ["--store", fork, "verify-checkpoint", "--keyring", f["keyring"], "--check-store"]
    status, _, err = run([*args, str(cp)])
    assert status == 1 and "[checkpoint.diverged]" in err and "--against" in err
    status, _, err = run([*args, "--against", f["store"], str(cp)])
    assert status == 1 and "[checkpoint.diverged]" in err
    assert "the logs part at leaf 12 (seq 13)" in err, err
    assert json.loads(lines[19])["event_id"] in err and json.loads(lines[12])["event_id"] in err


def test_inclusion_proofs_against_a_published_checkpoint(f: dict[str, Any]) -> None:
    """prove inclusion --checkpoint: no private key, the checkpoint copied verbatim, the
    proof verifies; a checkpoint of a tree the store does not hold is refused."""
    append(f, f["first"])
    published = checkpoint(f, "published.cp")  # of the first 20 events
    append(f, f["rest"])
    eid = f["events"][7]["event_id"]
    status, out, err = run(["--store", f["store"], "prove", "inclusion", eid,
                            "--checkpoint", str(published)])  # fmt: skip
    assert status == 0, err
    assert out.endswith(published.read_bytes())
    proof = f["tmp"] / "against-published"
    proof.write_bytes(out)
    status, out, err = run(["verify-proof", "--keyring", f["keyring"], "--origin", ORIGIN,
                            "--event-id", eid, str(proof)])  # fmt: skip
    assert status == 0, err
    assert json.loads(out)["size"] == 20 and json.loads(out)["index"] == 7
    # an event logged after the checkpoint's size is not in its tree
    later = f["events"][25]["event_id"]
    status, _, err = run(["--store", f["store"], "prove", "inclusion", later,
                          "--checkpoint", str(published)])  # fmt: skip
    assert status == 2 and "[proof.not_found]" in err
    # a checkpoint of another store's tree (same size, other root) is refused
    other = str(f["tmp"] / "other")
    append(f, f["rest"], store=other)
    foreign = checkpoint(f, "foreign.cp", store=other)
    status, _, err = run(["--store", f["store"], "prove", "inclusion", eid,
                          "--checkpoint", str(foreign)])  # fmt: skip
    assert status == 1 and "[checkpoint.diverged]" in err
    # a bigger tree than the store holds, a wrong origin, and the usage errors
    status, _, err = run(["--store", other, "prove", "inclusion", later,
                          "--checkpoint", str(checkpoint(f, "all.cp"))])  # fmt: skip
    assert status == 3 and "[checkpoint.behind]" in err  # fewer leaves: behind, not forked
    status, _, err = run(["--store", f["store"], "prove", "inclusion", eid, "--checkpoint",
                          str(published), "--origin", "other.invalid"])  # fmt: skip
    assert status == 1 and "[checkpoint.origin]" in err
    for extra in ([], ["--checkpoint", str(published), "--key", f["key"]],
                  ["--checkpoint", str(published), "--size", "3"], ["--key", f["key"]]):
        status, _, err = run(["--store", f["store"], "prove", "inclusion", eid, *extra])
        assert status == 2 and "[usage.arguments]" in err


def test_sync_from_standard_input(f: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """An export on a pipe (not seekable) is spooled to a temporary file, then synced."""
    append(f, f["first"])
    status, export, _ = run(["--store", f["store"], "export"])
    read_fd, write_fd = os.pipe()
    writer = threading.Thread(target=lambda: (os.write(write_fd, export), os.close(write_fd)))
    writer.start()
    with open(read_fd, "rb", buffering=0) as pipe:
        assert not pipe.seekable()
        monkeypatch.setattr(sys, "stdin", type("Stdin", (), {"buffer": pipe})())
        b = str(f["tmp"] / "b")
        status, out, err = run(["--store", b, "sync", "--from", "-", "--keyring",
                                f["keyring"]])  # fmt: skip
    writer.join()
    assert status == 0, err
    assert json.loads(out)["statuses"] == {"stored": 20}


def test_a_size_past_the_log_points_to_what_stats_shows(f: dict[str, Any]) -> None:
    # store.tree_size says where to read the log's size: stats must show it there
    append(f, f["first"])
    status, _, err = run(["--store", f["store"], "prove", "consistency", "1", "999"])
    assert status == 2 and "[store.tree_size]" in err
    status, out, _ = run(["--store", f["store"], "stats"])
    stats = json.loads(out)
    assert "next_seq - 1" in CODES["store.tree_size"]
    assert "merkle_size" not in stats  # the hint named it once
    size = int(checkpoint(f, "cp").read_text().splitlines()[1])
    assert stats["next_seq"] - 1 == size == 20


def test_verify_proof_takes_its_options_between_the_files(f: dict[str, Any]) -> None:
    append(f, f["first"])
    old = checkpoint(f, "old")
    append(f, f["rest"])
    new = checkpoint(f, "new")
    proof = f["tmp"] / "consistency"
    proof.write_bytes(run(["--store", f["store"], "prove", "consistency", "20"])[1])
    keyring = ["--keyring", f["keyring"]]
    for argv in ([str(proof), *keyring, str(old), str(new)],
                 [str(proof), str(old), *keyring, str(new)],
                 [str(proof), str(old), str(new), *keyring, "--origin", ORIGIN]):  # fmt: skip
        status, out, err = run(["verify-proof", *argv])
        assert status == 0 and json.loads(out)["old"] == 20, (argv, err)
    # CHECKPOINT is optional (an inclusion proof carries its own): PROOF alone is required
    status, _, err = run(["verify-proof", *keyring])
    assert status == 2 and "required: PROOF (" in err
    status, _, err = run(["verify-proof", str(proof), *keyring, str(old), str(new), "--bogus"])
    assert status == 2 and "unrecognized arguments: --bogus" in err


KEY_ID = "reg\nfake  line\x1b[2J\x9b31m"
"""A key_id that, printed as it is, would break a line in two and clear the terminal."""


def test_key_ids_of_a_key_file_or_a_keyring_are_shown_escaped(f: dict[str, Any]) -> None:
    from dataclasses import replace

    from pithlog.testing import TRUSTED

    registry = replace(test_key("registry"), key_id=KEY_ID)
    key = f["tmp"] / "odd.key"
    write_key_file(key, registry)
    odd = f["tmp"] / "odd.json"
    others = test_keyring_entries(tuple(n for n in TRUSTED if n != "registry"))
    odd.write_text(json.dumps({"keyring_version": "1",
                               "keys": [*others, registry.keyring_entry()]}))  # fmt: skip
    escaped = "reg\\u000afake  line\\u001b[2J\\u009b31m"

    def one_line(err: str) -> None:
        assert err.count("\n") == 1 and "\x1b" not in err and "\x9b" not in err, err
        assert escaped in err, err

    append(f, f["first"])
    status, note, err = run(["--store", f["store"], "checkpoint", "--key", str(key),
                             "--origin", ORIGIN])  # fmt: skip
    assert status == 0
    one_line(err)
    cp = f["tmp"] / "cp"
    cp.write_bytes(note)
    status, out, err = run(["verify-checkpoint", "--keyring", str(odd), str(cp)])
    assert status == 0 and json.loads(out)["signers"] == [KEY_ID]  # the data, as it is
    one_line(err)
    # a signature by that key that does not verify names it in the error
    text, _, lines = note.partition(b"\n\n")
    cp.write_bytes(text.replace(b"\n20\n", b"\n19\n") + b"\n\n" + lines)
    status, _, err = run(["verify-checkpoint", "--keyring", str(odd), str(cp)])
    assert status == 1 and "[checkpoint.bad_signature]" in err
    one_line(err)
    # a key that may not sign the origin: the refusal names it
    status, _, err = run(["--store", f["store"], "checkpoint", "--key", str(key),
                          "--origin", "elsewhere.test.invalid"])  # fmt: skip
    assert status == 2 and "[checkpoint.key]" in err
    one_line(err)


def test_a_store_one_leaf_behind_is_behind_not_forked(f: dict[str, Any]) -> None:
    append(f, f["first"])
    cp = checkpoint(f, "cp20")
    mirror = str(f["tmp"] / "mirror")
    lines = Path(f["first"]).read_bytes().splitlines(keepends=True)
    (f["tmp"] / "first19.jsonl").write_bytes(b"".join(lines[:19]))
    append(f, str(f["tmp"] / "first19.jsonl"), store=mirror)
    status, _, err = run(["--store", mirror, "verify-checkpoint", "--keyring", f["keyring"],
                          "--check-store", str(cp)])  # fmt: skip
    assert status == 3 and "[checkpoint.behind]" in err and "by 1 leaf(s)" in err, err
    eid = f["events"][0]["event_id"]
    status, _, err = run(["--store", mirror, "prove", "inclusion", eid,
                          "--checkpoint", str(cp)])  # fmt: skip
    assert status == 3 and "[checkpoint.behind]" in err, err
    # --against names a store to compare with: without --check-store nothing is compared
    status, _, err = run(["--store", mirror, "verify-checkpoint", "--keyring", f["keyring"],
                          "--against", f["store"], str(cp)])  # fmt: skip
    assert status == 2 and "[usage.arguments]" in err and "--check-store" in err


def test_verify_proof_requires_the_origin_of_every_kind_of_proof(f: dict[str, Any]) -> None:
    append(f, f["first"])
    old = checkpoint(f, "old")
    append(f, f["rest"])
    new = checkpoint(f, "new")
    eid = f["events"][3]["event_id"]
    inclusion = f["tmp"] / "inclusion"
    inclusion.write_bytes(run(["--store", f["store"], "prove", "inclusion", eid, "--key",
                               f["key"], "--origin", ORIGIN])[1])  # fmt: skip
    consistency = f["tmp"] / "consistency"
    consistency.write_bytes(run(["--store", f["store"], "prove", "consistency", "20"])[1])
    args = ["verify-proof", "--keyring", f["keyring"], "--origin", "other.test.invalid"]
    for files in ([str(inclusion)], [str(consistency), str(old), str(new)]):
        assert run(["verify-proof", "--keyring", f["keyring"], "--origin", ORIGIN, *files])[0] == 0
        status, _, err = run([*args, *files])
        assert status == 1 and "[checkpoint.origin]" in err, (files, err)
    # an evidence file carries its own checkpoints and events: no more of either is taken
    evidence = f["tmp"] / "evidence.json"
    evidence.write_bytes(b'{"evidence_type":"pith-split-view-proof"}\n')
    for extra in (["--event-id", eid], [str(old)]):
        status, _, err = run(["verify-proof", "--keyring", f["keyring"], str(evidence), *extra])
        assert status == 2 and "[usage.arguments]" in err and "evidence file" in err, err


class _Stream:
    """A standard input that is no file: ``size`` bytes of export lines, counted as read."""

    def __init__(self, line: bytes, size: int) -> None:
        self.line, self.left, self.read_bytes = line, size, 0

    def seekable(self) -> bool:
        return False

    def read(self, size: int = -1) -> bytes:
        size = self.left if size < 0 else min(size, self.left)
        start = self.read_bytes % len(self.line)
        data = (self.line * (size // len(self.line) + 2))[start : start + size]
        self.left -= size
        self.read_bytes += size
        return data


def test_sync_from_standard_input_spools_no_more_than_max_spool(
    f: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stranger's stream on standard input is copied to the temporary file no further
    than --max-spool: past it, sync.limit, nothing stored, no temporary file left."""
    spool = f["tmp"] / "spool"
    spool.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(spool))
    line = g.encoded(f["events"][0]) + b"\n"  # one copy again and again: one distinct copy
    stream = _Stream(line, 8 << 20)
    monkeypatch.setattr(sys, "stdin", type("Stdin", (), {"buffer": stream})())
    b = f["tmp"] / "b"
    status, out, err = run(["--store", str(b), "sync", "--from", "-", "--keyring",
                            f["keyring"], "--max-spool", str(1 << 20)])  # fmt: skip
    assert status == 2 and out == b"" and "[sync.limit]" in err and "--max-spool" in err, err
    assert stream.read_bytes <= (1 << 20) + 1  # read no further than the bound
    assert not b.exists() and list(spool.iterdir()) == []
    # a store that exists is left as it was
    append(f, f["first"], store=str(b))
    stream = _Stream(line, 8 << 20)
    monkeypatch.setattr(sys, "stdin", type("Stdin", (), {"buffer": stream})())
    status, _, err = run(["--store", str(b), "sync", "--from", "-", "--keyring",
                          f["keyring"], "--max-spool", str(1 << 20)])  # fmt: skip
    assert status == 2 and "[sync.limit]" in err, err
    with Store.open(str(b), create=False, readonly=True) as store:
        assert store.tree_size() == 20
    # the default bound is the one --help states; a bound for a source that is not spooled
    # is a usage error
    monkeypatch.setattr("pithlog.cli.sync_commands.MAX_SPOOL", 1 << 20)
    stream = _Stream(line, 8 << 20)
    monkeypatch.setattr(sys, "stdin", type("Stdin", (), {"buffer": stream})())
    status, _, err = run(["--store", str(b), "sync", "--from", "-", "--keyring",
                          f["keyring"]])  # fmt: skip
    assert status == 2 and "[sync.limit]" in err and stream.read_bytes <= (1 << 20) + 1, err
    status, _, err = run(["--store", str(b), "sync", "--from", f["first"], "--keyring",
                          f["keyring"], "--max-spool", "10"])  # fmt: skip
    assert status == 2 and "[usage.arguments]" in err, err
    # a temporary file that cannot be written (a full $TMPDIR) is one line, not a traceback
    if os.path.exists("/dev/full"):
        monkeypatch.setattr("tempfile.TemporaryFile", lambda: open("/dev/full", "w+b"))  # noqa: SIM115
        monkeypatch.setattr(sys, "stdin", type("Stdin", (), {"buffer": _Stream(line, 1000)})())
        status, _, err = run(["--store", str(b), "sync", "--from", "-", "--keyring",
                              f["keyring"]])  # fmt: skip
        assert status == 2 and "[usage.unwritable]" in err and "TMPDIR" in err, err


def test_sync_keeps_invalid_copies_only_from_a_source_that_can_prove_them(
    f: dict[str, Any],
) -> None:
    """An export file has no tree: --keep-invalid from one is refused before anything is
    read, saying what to do instead; the closing hint says why copies were rejected."""
    append(f, f["first"])
    signed = checkpoint(f, "signed.cp")
    status, out, _ = run(["--store", f["store"], "export"])
    stranger = g.attestation(f["events"][0]["pith_number"], 300, signer="stranger")
    export = f["tmp"] / "export.jsonl"
    export.write_bytes(out + g.encoded(stranger) + b"\n")
    c = f["tmp"] / "c"
    for extra in (["--keep-invalid", "--checkpoint", str(signed)], ["--keep-invalid"]):
        status, out, err = run(["--store", str(c), "sync", "--from", str(export),
                                "--keyring", f["keyring"], *extra])  # fmt: skip
        assert status == 2 and out == b"" and "[usage.arguments]" in err, err
        assert "proves none" in err and "import --keep-invalid" in err, err
        assert not c.exists()
    # without them, the hint names what keeps a file's invalid copies: not these options
    status, out, err = run(["--store", str(c), "sync", "--from", str(export), "--keyring",
                            f["keyring"]])  # fmt: skip
    assert status == 2 and json.loads(out)["statuses"] == {"stored": 20, "rejected": 1}
    assert "import --keep-invalid" in err and "--keep-invalid --checkpoint" not in err, err
    # from a store whose checkpoint predates the invalid copy: given both, not proven
    status, _, err = run(["--store", f["store"], "append", "--keyring", f["keyring"],
                          "--keep-invalid", str(export)])  # fmt: skip
    assert status == 0, err
    d = str(f["tmp"] / "d")
    status, out, err = run(["--store", d, "sync", "--from", f["store"], "--keyring",
                            f["keyring"], "--keep-invalid", "--checkpoint", str(signed)])
    assert status == 2 and json.loads(out)["statuses"] == {"stored": 20, "rejected": 1}
    assert "not proven" in err and "kept only with" not in err, err


def test_a_source_folder_that_is_no_store_is_named_as_the_sync_source(f: dict[str, Any]) -> None:
    """--from DIR that holds no store (or a damaged one) says DIR is the source, not the
    --store synced into, which users took it for; nothing is created."""
    empty = f["tmp"] / "empty"
    empty.mkdir()
    broken = f["tmp"] / "broken"
    broken.mkdir()
    (broken / "data.mdb").write_bytes(b"xx")
    b = f["tmp"] / "b"
    for folder, code in ((empty, "store.missing"), (broken, "store.corrupted")):
        status, out, err = run(["--store", str(b), "sync", "--from", str(folder), "--keyring",
                                f["keyring"]])  # fmt: skip
        assert status == 2 and out == b"" and f"[{code}]" in err, err
        assert f"the sync source --from {folder}" in err and err.count("\n") == 1, err
        assert not b.exists()
    status, _, err = run(["--store", str(b), "sync", "--from", str(empty), "--keyring",
                          f["keyring"]])  # fmt: skip
    assert "--store names the store synced into" in err, err
