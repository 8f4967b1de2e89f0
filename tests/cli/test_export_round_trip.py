"""What an operator relies on of ``export`` and ``import`` (docs/cli.md, docs/store.md
"Export and import"), over the conformance vectors: an export imported into a fresh store
gives the same tree, the same states and the same export again, byte for byte; pieces of
it (``--after``, shards) give the same; an edited export is refused or rejected line by
line, the rest imported as if the edited lines were not there."""

from __future__ import annotations

import hashlib
import io
import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from pithlog.cli import main
from pithlog.store import Store

CASES = Path(__file__).resolve().parents[2] / "vectors" / "cases"
NAMES = sorted(p.name for p in CASES.iterdir() if (p / "events.jsonl").exists())


def run(argv: list[str]) -> tuple[int, bytes, str]:
    out, err = io.BytesIO(), io.StringIO()
    status = main(argv, stdout=out, stderr=err)
    return status, out.getvalue(), err.getvalue()


def results(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in data.splitlines()]


def summary(path: Path) -> dict[str, Any]:
    """The tree, every pith's state (its sha256, or its pending status) and the export."""
    with Store.open(path, readonly=True) as store:
        states = {}
        for entry in store.each_pith():
            state = store.lookup(entry["pith_number"])
            states[entry["pith_number"]] = (
                hashlib.sha256(state).hexdigest() if isinstance(state, bytes) else entry)
        return {"root": store.tree_root(), "states": states, "keyring": store.keyring_digest(),
                "export": b"".join(data + b"\n" for _, data in store.export())}  # fmt: skip


def imported(store: Path, keyring: Path, data: bytes, *extra: str) -> tuple[int, bytes, str]:
    dump = store.with_name(store.name + ".jsonl")
    dump.write_bytes(data)
    return run(["--store", str(store), "import", "--keyring", str(keyring), *extra, str(dump)])


def stored(tmp_path: Path, name: str, keep_invalid: bool = True) -> tuple[Path, Path, bytes]:
    """The store of one vector's events, its keyring and its export."""
    case = CASES / name
    store = tmp_path / "a"
    extra = ["--keep-invalid"] if keep_invalid else []
    status, _, err = run(["--store", str(store), "append", "--keyring",
                          str(case / "keyring.json"), *extra, str(case / "events.jsonl")])
    assert status in (0, 2), err  # fmt: skip
    status, exported, err = run(["--store", str(store), "export"])
    assert status == 0, err
    return store, case / "keyring.json", exported


@pytest.mark.parametrize("keep_invalid", [True, False], ids=["keep-invalid", "valid-only"])
@pytest.mark.parametrize("name", NAMES)
def test_an_export_imported_into_a_fresh_store_is_the_same_store(
    tmp_path: Path, name: str, keep_invalid: bool
) -> None:
    store, keyring, exported = stored(tmp_path, name, keep_invalid)
    extra = ["--keep-invalid"] if keep_invalid else []
    status, out, err = imported(tmp_path / "b", keyring, exported, *extra)
    assert status == 0, err
    assert "duplicate" not in {r["status"] for r in results(out)}
    assert summary(tmp_path / "b") == summary(store)  # root, states, export bytes


@pytest.mark.parametrize("name", ["step0-copies", "equivocations", "reasons"])
def test_pieces_after_n_imported_in_order_are_the_whole(tmp_path: Path, name: str) -> None:
    store, keyring, exported = stored(tmp_path, name)
    lines = exported.splitlines(keepends=True)
    cuts = [0, 1, len(lines) // 3, len(lines) // 2, len(lines) - 1, len(lines)]
    pieces = []
    for after, until in itertools.pairwise(cuts):
        status, piece, err = run(["--store", str(store), "export", "--after", str(after)])
        assert status == 0 and f"through seq {len(lines)}" in err, err
        assert piece == b"".join(lines[after:]), after  # exactly the leaves after N
        pieces.append(b"".join(piece.splitlines(keepends=True)[: until - after]))
    assert b"".join(pieces) == exported
    for piece in pieces:
        assert imported(tmp_path / "b", keyring, piece, "--keep-invalid")[0] == 0
    assert summary(tmp_path / "b") == summary(store)


def test_shards_are_true_and_import_in_any_order_and_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, keyring, exported = stored(tmp_path, "step0-copies")
    folder = tmp_path / "shards"
    status, manifest, err = run(["--store", str(store), "export", "--out", str(folder),
                                 "--shard-size", "7"])  # fmt: skip
    assert status == 0, err
    shards = results(manifest)
    assert all(list(s) == ["envelopes", "file", "first_seq", "last_seq", "sha256"]
               for s in shards)  # fmt: skip
    assert [s["file"] for s in shards] == sorted(p.name for p in folder.iterdir())
    seq = 1
    for shard in shards:
        data = (folder / shard["file"]).read_bytes()
        assert shard["sha256"] == hashlib.sha256(data).hexdigest()
        assert shard["envelopes"] == len(data.splitlines()) == shard["last_seq"] - seq + 1
        assert shard["first_seq"] == seq
        seq = shard["last_seq"] + 1
    assert seq - 1 == len(exported.splitlines())
    # through standard input, in the shell glob's order: the same store
    whole = b"".join((folder / s["file"]).read_bytes() for s in shards)
    assert whole == exported
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(whole)))
    status, _, err = run(["--store", str(tmp_path / "b"), "import", "--keyring", str(keyring),
                          "--keep-invalid", "-"])  # fmt: skip
    assert status == 0, err
    assert summary(tmp_path / "b") == summary(store)
    # out of order, one of them twice: its second import is all duplicates, the states
    # are the same (the tree is of another append order)
    order = [shards[3], shards[0], shards[-1], shards[1], shards[2], shards[0]]
    outs = []
    for shard in order:
        status, out, err = run(["--store", str(tmp_path / "c"), "import", "--keyring",
                                str(keyring), "--keep-invalid", str(folder / shard["file"])])
        assert status == 0, err  # fmt: skip
        outs.append(results(out))
    assert {r["status"] for r in outs[-1]} == {"duplicate"}
    assert "duplicate" not in {r["status"] for out in outs[:-1] for r in out}
    mixed, original = summary(tmp_path / "c"), summary(store)
    assert mixed["states"] == original["states"]
    assert mixed["root"][0] == original["root"][0]
    assert sorted(mixed["export"].splitlines()) == sorted(exported.splitlines())


@pytest.mark.parametrize("name", ["step0-copies", "equivocations", "all-event-types"])
def test_a_rekeyed_store_exports_what_imports_into_its_states(tmp_path: Path, name: str) -> None:
    store, keyring, _ = stored(tmp_path, name, keep_invalid=False)
    doc = json.loads(keyring.read_text())
    doc["keys"] = [k for k in doc["keys"] if k["key_id"] != "test-author"]
    other = tmp_path / "other.json"
    other.write_text(json.dumps(doc))
    status, _, err = run(["--store", str(store), "rekey", "--keyring", str(other)])
    assert status == 0, err
    status, exported, _ = run(["--store", str(store), "export"])
    # copies judged valid when appended and invalid now are kept: --keep-invalid holds
    # them again (docs/store.md)
    status, _, err = imported(tmp_path / "b", other, exported, "--keep-invalid")
    assert status == 0, err
    again = summary(tmp_path / "b")
    assert again == summary(store) and again["keyring"] is not None


def _edited(exported: bytes) -> tuple[bytes, dict[int, str], bytes]:
    """An export edited four ways, what each edited line gets, and the export without
    the edited lines."""
    lines = exported.splitlines()
    edited = list(lines)
    # a payload byte altered: the event id no longer matches
    altered = json.loads(lines[2])
    altered["created_at"] = altered["created_at"].replace("20", "19", 1)
    edited[2] = json.dumps(altered, separators=(",", ":"), sort_keys=True).encode()
    # a copy whose signature is another copy's
    swapped = json.loads(lines[4])
    swapped["signature_b64"] = json.loads(lines[5])["signature_b64"]
    edited[4] = json.dumps(swapped, separators=(",", ":"), sort_keys=True).encode()
    # a line cut in the middle, and the last line cut without its end
    edited[10] = lines[10][:50]
    edited[-1] = lines[-1][: len(lines[-1]) // 2]
    # two lines swapped: no harm, preference is order-independent
    edited[6], edited[7] = edited[7], edited[6]
    kept = [line for i, line in enumerate(lines) if i not in (2, 4, 10, len(lines) - 1)]
    expected = {3: "rejected", 5: "rejected", 11: "[door.syntax]", len(lines): "[door.syntax]"}
    return b"\n".join(edited), expected, b"\n".join(kept) + b"\n"


def test_an_edited_export_is_refused_line_by_line_and_the_rest_imported(
    tmp_path: Path,
) -> None:
    _, keyring, exported = stored(tmp_path, "mixed-piths", keep_invalid=False)
    edited, expected, kept = _edited(exported)
    status, out, err = imported(tmp_path / "b", keyring, edited)
    assert status == 2, err
    said = {r["line"]: r for r in results(out) if r["status"] in ("rejected", "refused")}
    assert sorted(said) == sorted(expected)
    for line, what in expected.items():
        if what == "rejected":
            assert said[line]["status"] == "rejected" and said[line]["reason"], said[line]
        else:
            assert said[line]["status"] == "refused" and said[line]["reason"].startswith(what)
    assert said[5]["reason"] == "bad_signature"
    assert "2 refused, 2 rejected" in err
    # nothing of the edited lines is stored, and everything else is
    assert imported(tmp_path / "c", keyring, kept)[0] == 0
    mine, theirs = summary(tmp_path / "b"), summary(tmp_path / "c")
    assert mine["states"] == theirs["states"]
    assert sorted(mine["export"].splitlines()) == sorted(theirs["export"].splitlines())
