"""show, piths, event and state --alias: readable views of a store, found by pith number
or by an alias of the chosen record (the store's alias index)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pithlog.testing import test_key, write_key_file
from tests.cli.test_cli import run, sign_seed, signer

__all__ = ["signer"]  # the fixture, imported for the tests below


def seeded(files: dict[str, Path], tmp_path: Path, keyring: Path | None = None) -> str:
    events = sign_seed(files)
    (tmp_path / "events.jsonl").write_bytes(b"".join(events))
    store = str(tmp_path / "store")
    status, _, err = run(["--store", store, "append", "--keyring",
                          str(keyring or files["keyring"]), str(tmp_path / "events.jsonl")])
    assert status in (0, 2), err
    return store


def test_state_by_alias_is_the_state_by_pith(signer: dict[str, Path], tmp_path: Path) -> None:
    store = seeded(signer, tmp_path)
    pith = json.loads(sign_seed(signer)[0])["pith_number"]
    status, by_pith, _ = run(["--store", store, "state", pith])
    assert status == 0
    state = json.loads(by_pith)
    for alias in state["current"]["source_aliases"]:
        family = {"arxiv_version": "arxiv", "arxiv": "arxiv", "doi": "doi"}.get(
            alias["alias_kind"], "pith")
        status, by_alias, err = run(["--store", store, "state", "--alias",
                                     f"{family}:{alias['alias_value']}"])  # fmt: skip
        assert status == 0 and by_alias == by_pith, err
    status, _, err = run(["--store", store, "state", "--alias", "arxiv:2411.99999"])
    assert status == 2 and "[store.no_state]" in err
    status, _, err = run(["--store", store, "state", "arxiv:2411.00284"])
    assert status == 2 and "use --alias" in err
    status, _, err = run(["--store", store, "state", pith, "--alias", "arxiv:2411.00284"])
    assert status == 2 and "[usage.arguments]" in err


def test_show_summarizes_a_state(signer: dict[str, Path], tmp_path: Path) -> None:
    store = seeded(signer, tmp_path)
    status, out, _ = run(["--store", store, "show", "arxiv:2411.00284v2"])
    assert status == 0
    rows = {line.split(None, 1)[0]: line.split(None, 1)[1] for line in out.decode().splitlines()}
    state = json.loads(run(["--store", store, "state", rows["pith"]])[1])
    assert rows["events"] == "2: 2 valid, 0 invalid"
    assert rows["applied"] == "graph_snapshots 1"
    assert rows["record"].startswith(state["current"]["record_created"]["event_id"])
    assert "doi:10.48550/arxiv.2411.00284" in rows["aliases"]
    assert rows["state_sha256"] == state["state_sha256"]


def test_show_counts_invalid_events_by_reason_and_shows_pending(
    signer: dict[str, Path], tmp_path: Path
) -> None:
    record, snapshot = sign_seed(signer)
    (tmp_path / "s.jsonl").write_bytes(snapshot)
    store = str(tmp_path / "store")
    assert run(["--store", store, "append", "--keyring", str(signer["keyring"]),
                str(tmp_path / "s.jsonl")])[0] == 0  # fmt: skip
    pith = json.loads(snapshot)["pith_number"]
    status, out, _ = run(["--store", store, "show", pith])
    assert status == 0 and b"pending" in out and b"1: 0 invalid" in out
    assert run(["--store", store, "piths"])[1].decode().splitlines()[1:] == []
    mirror = tmp_path / "mirror.key"
    write_key_file(mirror, test_key("mirror"))  # not in the keyring
    (tmp_path / "hint.json").write_text('{"locator": "https://m.example/a"}')
    status, hint, _ = run(["sign", "--key", str(mirror), "--type", "mirror_hint", "--pith",
                           pith, "--payload", str(tmp_path / "hint.json"),
                           "--created-at", "2026-07-06T00:00:00Z"])  # fmt: skip
    assert status == 0
    (tmp_path / "r.jsonl").write_bytes(record + hint)
    run(["--store", store, "append", "--keep-invalid", "--keyring", str(signer["keyring"]),
         str(tmp_path / "r.jsonl")])  # fmt: skip
    status, out, _ = run(["--store", store, "show", pith])
    assert status == 0
    rows = {line.split(None, 1)[0]: line.split(None, 1)[1] for line in out.decode().splitlines()}
    assert rows["events"] == "3: 2 valid, 1 invalid" and rows["invalid"] == "unknown_key 1"
    status, table, _ = run(["--store", store, "piths"])
    lines = table.decode().splitlines()
    assert lines[0].split() == ["PITH", "EVENTS", "VALID", "INVALID", "EQUIVOCATIONS"]
    assert lines[1].split() == [pith, "3", "2", "1", "0"]


def test_event_prints_the_stored_copy(signer: dict[str, Path], tmp_path: Path) -> None:
    store = seeded(signer, tmp_path)
    record = sign_seed(signer)[0]
    event_id = json.loads(record)["event_id"]
    status, out, err = run(["--store", store, "event", event_id])
    assert status == 0 and out == record
    assert "record_created of pith:2024:" in err and "leaves 0 of the log" in err
    status, _, err = run(["--store", store, "event", "sha256:" + "0" * 64])
    assert status == 2 and "[store.no_event]" in err
    status, _, err = run(["--store", store, "event", "nope"])
    assert status == 2 and "[usage.arguments]" in err


def test_event_describes_a_stored_malformed_copy(
    signer: dict[str, Path], tmp_path: Path
) -> None:
    # a copy kept as evidence of invalidity may lack any member but event_id and
    # pith_number: `event` prints it and says what it holds, with no traceback
    record = json.loads(sign_seed(signer)[0])
    del record["signer"]
    record["target"] = ["x"]
    record["event_id"] = "sha256:" + "1" * 64
    (tmp_path / "bad.jsonl").write_text(json.dumps(record) + "\n")
    store = str(tmp_path / "store")
    status, out, _ = run(["--store", store, "append", "--keep-invalid", "--keyring",
                          str(signer["keyring"]), str(tmp_path / "bad.jsonl")])  # fmt: skip
    assert status == 0 and b'"reason":"malformed"' in out
    status, out, err = run(["--store", store, "event", record["event_id"]])
    assert status == 0 and json.loads(out) == record
    assert 'target ["x"]' in err and "by ? (?, key ?)" in err


def test_piths_and_pending_walk_the_store_without_listing_it(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """``piths`` and ``pending`` listed every pith's summary (about 540 bytes a pith) before
    printing; they walk the store a chunk at a time (``Store.each_pith``, here of one) and
    print the same table and lines as the summaries give."""
    import pytest

    from pithlog.protocol.canonical import jcs
    from pithlog.store import Store

    cases = Path(__file__).resolve().parents[2] / "vectors" / "cases"
    store = str(tmp_path / "store")
    for case in ("mixed-piths", "pending"):
        status, _, err = run(["--store", store, "append", "--keep-invalid", "--keyring",
                              str(cases / case / "keyring.json"),
                              str(cases / case / "events.jsonl")])  # fmt: skip
        assert status in (0, 2), err
    with Store.open(store, readonly=True) as opened:
        summaries = opened.piths()
    with_state = [p for p in summaries if p["status"] == "state"]
    pending = [p for p in summaries if p["status"] == "pending"]
    assert len(with_state) >= 2 and pending

    def listed(self: Store) -> Any:
        raise AssertionError("listed every pith")

    walk = Store.each_pith
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Store, "piths", listed)
        patch.setattr(Store, "each_pith", lambda self, chunk=1000: walk(self, 1))
        status, table, err = run(["--store", store, "piths"])
        assert status == 0 and f"piths: {len(with_state)} with a state" in err
        status, out, err = run(["--store", store, "pending"])
        assert status == 0 and f"pending: {len(pending)} piths" in err
    assert out.splitlines() == [jcs(p) for p in pending]
    rows = [line.split() for line in table.decode().splitlines()]
    assert rows == [["PITH", "EVENTS", "VALID", "INVALID", "EQUIVOCATIONS"]] + [
        [p["pith_number"], str(p["event_count"]), str(p["valid_event_count"]),
         str(p["invalid_event_count"]), str(p["equivocation_count"])] for p in with_state]
    # the columns line up: each row's cells start where the heading's do
    starts = {tuple(m.start() for m in re.finditer(r"\S+", line))
              for line in table.decode().splitlines()}  # fmt: skip
    assert len(starts) == 1


def test_show_of_a_pith_or_alias_the_store_does_not_hold_is_one_line(
    signer: dict[str, Path], tmp_path: Path
) -> None:
    store = seeded(signer, tmp_path)
    for given in ("pith:2026:" + "A" * 26, "arxiv:2411.99999"):
        status, out, err = run(["--store", store, "show", given])
        assert status == 2 and out == b"" and "[store.no_state]" in err, err
        assert len(err.splitlines()) == 1 and "Traceback" not in err


def _unprintable(text: str) -> set[str]:
    return {c for line in text.splitlines() for c in line if not c.isprintable()}


def test_show_and_event_write_a_strangers_control_characters_escaped(tmp_path: Path) -> None:
    """An export from a stranger can hold any string the door admits: ESC, BEL, C1 codes,
    U+202E. ``show`` and ``event`` are for people at a terminal; they printed those as
    they were (a record's source id that set the terminal's title and cleared its screen;
    an invalid copy's target, kept with --keep-invalid), and now write each as an escape."""
    import unicodedata

    from pithlog.protocol.canonical import jcs
    from pithlog.protocol.event_types import prepare_record_created
    from pithlog.protocol.events import sign_event

    hostile = "\x1b]0;PWNED\x07\x1b[2J\x9b31m\u202egnp.exe"
    key = test_key("registry")
    keyring = tmp_path / "keyring.json"
    keyring.write_text(json.dumps({"keyring_version": "1", "keys": [key.keyring_entry()]}))
    record = {"metadata": {"submitted_at": "2025-01-01T00:00:00Z"}, "schema_version": "1.0",
              "source": {"kind": "doi" + hostile, "id": "10.1/" + hostile, "version": 1}}
    pith, payload = prepare_record_created(key, {"canonical_record": record})
    created = sign_event(key, "record_created", pith, "record", "2026-01-01T00:00:00Z", payload)
    other = sign_event(test_key("author"), "author_attestation", pith, "claim:" + hostile,
                       "2026-01-02T00:00:00Z", {"statement": "x"})  # unknown key: invalid
    export = tmp_path / "export.jsonl"
    export.write_bytes(jcs(created) + b"\n" + jcs(other) + b"\n")
    store = str(tmp_path / "store")
    status, out, err = run(["--store", store, "import", "--keep-invalid", "--keyring",
                            str(keyring), str(export)])  # fmt: skip
    assert status == 0, err
    status, out, err = run(["--store", store, "show", pith])
    assert status == 0, err
    shown = out.decode("utf-8")
    assert not _unprintable(shown), shown
    assert "10.1/\\x1b]0;PWNED\\x07\\x1b[2J\\x9b31m\\u202egnp.exe" in shown
    for event in (created, other):
        status, out, err = run(["--store", store, "event", event["event_id"]])
        assert status == 0 and json.loads(out) == event  # the copy itself, as stored
        assert not _unprintable(err), err
    assert "target claim:\\x1b]0;PWNED\\x07" in err
    assert all(unicodedata.category(c) != "Cf" for c in err)
