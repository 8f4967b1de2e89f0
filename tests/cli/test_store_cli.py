"""The store commands of the CLI, in-process through pithlog.cli.main(argv)."""

from __future__ import annotations

import io
import json
import os
import random
import re
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import pytest
from storeevents import g
from tqdm import tqdm

from pithlog.cli import main
from pithlog.lines import iter_lines
from pithlog.testing import test_keyring_entries


def run(argv: list[str]) -> tuple[int, bytes, str]:
    out, err = io.BytesIO(), io.StringIO()
    status = main(argv, stdout=out, stderr=err)
    return status, out.getvalue(), err.getvalue()


def lines(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in data.splitlines()]


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Any]:
    rng = random.Random(5)
    events = g.mixed_events(rng, piths=5, per_pith=5)
    keyring = tmp_path / "keyring.json"
    keyring.write_text(json.dumps({"keyring_version": "1", "keys": test_keyring_entries()}))
    revoked = tmp_path / "revoked.json"
    revoked.write_text(json.dumps({"keyring_version": "1", "keys": test_keyring_entries(
        author={"revoked_at": g.ts(300)})}))  # fmt: skip
    log = tmp_path / "events.jsonl"
    log.write_bytes(b"".join(g.encoded(e) + b"\n" for e in events))
    return {"events": events, "log": str(log), "keyring": str(keyring),
            "revoked": str(revoked), "store": str(tmp_path / "store"), "tmp": tmp_path}  # fmt: skip


def append(f: dict[str, Any], *extra: str, path: str | None = None) -> tuple[int, bytes, str]:
    return run(["--store", f["store"], "append", "--keyring", f["keyring"], *extra,
                path or f["log"]])  # fmt: skip


def test_append_prints_a_line_per_event_and_states_match_reduce(files: dict[str, Any]) -> None:
    status, out, err = append(files, "--keep-invalid")
    assert status == 0, err
    results = lines(out)
    assert len(results) == len(files["events"])
    assert [r["line"] for r in results] == list(range(1, len(results) + 1))
    assert all(list(r) == ["line", "event_id", "status", "reason"] for r in results)
    assert {r["status"] for r in results} == {"stored"}
    assert "1 transaction(s)" in err
    status, reduced, _ = run(["reduce", "--keyring", files["keyring"], files["log"]])
    for state_line in reduced.splitlines():
        pith = json.loads(state_line)["pith_number"]
        status, state, _ = run(["--store", files["store"], "state", pith])
        assert status == 0 and state == state_line + b"\n"
    status, again, err = append(files, "--keep-invalid")
    assert status == 0 and {r["status"] for r in lines(again)} == {"duplicate"}


def test_refused_and_rejected_lines_exit_2(files: dict[str, Any]) -> None:
    log = files["tmp"] / "mixed.jsonl"
    rec = g.record("2501.00042")
    stranger = g.attestation(rec["pith_number"], 500, signer="stranger")
    log.write_bytes(g.encoded(rec) + b"\n\n{not json\n" + g.encoded(stranger) + b"\n")
    status, out, err = append(files, path=str(log))
    assert status == 2
    assert [(r["line"], r["status"]) for r in lines(out)] == [
        (1, "stored"), (3, "refused"), (4, "rejected")]  # fmt: skip
    assert lines(out)[2]["reason"] == "unknown_key"
    assert lines(out)[1]["reason"].startswith("[door.syntax]")
    assert "1 refused" in err and "1 rejected" in err


@pytest.mark.parametrize("command", ["append", "import"])
def test_the_default_batch_bounds_a_transaction(
    files: dict[str, Any], monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    # A whole large input in one transaction would hold all of it in memory at once.
    import pithlog.cli.append_commands as commands

    monkeypatch.setattr(commands, "DEFAULT_BATCH", 10)
    status, out, err = run(["--store", files["store"], command, "--keyring", files["keyring"],
                            "--keep-invalid", files["log"]])  # fmt: skip
    assert status == 0, err
    assert f"{len(files['events'])} events in 3 transaction(s)" in err  # 25 events
    assert [r["line"] for r in lines(out)] == list(range(1, len(files["events"]) + 1))
    status, help_text, _ = run([command, "--help"])
    assert status == 0 and "(default: 10;" in re.sub(r"\s+", " ", help_text.decode())


def test_json_array_single_object_and_batches(files: dict[str, Any]) -> None:
    events = files["events"][:7]
    array = files["tmp"] / "array.json"
    array.write_text(json.dumps(events, indent=2))
    status, out, err = append(files, "--batch-size", "3", "--keep-invalid", path=str(array))
    assert status == 0, err
    assert [r["line"] for r in lines(out)] == list(range(1, 8))
    assert "3 transaction(s)" in err
    single = files["tmp"] / "one.json"
    rec = g.record("2501.00043")
    single.write_text(json.dumps(rec, indent=2))
    status, out, _ = append(files, path=str(single))
    assert status == 0 and lines(out) == [
        {"line": 1, "event_id": rec["event_id"], "status": "stored", "reason": None}]


@pytest.mark.parametrize("jobs", ["0", "4097"])
def test_replay_jobs_must_be_from_1_to_most_cores(files: dict[str, Any], jobs: str) -> None:
    """Each job is a process (started before the store is opened, with --verify): a count
    out of bounds is refused before any is started."""
    assert append(files)[0] == 2
    status, out, err = run(["--store", files["store"], "replay", "--verify", "--jobs", jobs,
                            "--keyring", files["keyring"]])  # fmt: skip
    assert status == 2 and out == b""
    assert "--jobs must be from 1 to 4096" in err


def test_replay_verify_passes_then_names_damage(files: dict[str, Any]) -> None:
    assert append(files)[0] == 2  # the stranger's events are rejected
    status, out, err = run(["--store", files["store"], "replay", "--verify",
                            "--keyring", files["keyring"]])  # fmt: skip
    assert status == 0 and out == b"", err
    assert "0 discrepancies" in err
    status, out2, err = run(["replay", "--store", files["store"], "--verify", "--jobs", "2",
                             "--keyring", files["keyring"], "--progress"])  # fmt: skip
    assert status == 0 and out2 == b""
    assert "pith" in err  # the progress bar

    from pithlog.store import Store

    pith = files["events"][0]["pith_number"]
    with Store.open(files["store"]) as store:
        store._write(lambda txn, dbs: txn.put(pith.encode(), b"{}", db=dbs["piths"]))
    status, out, _ = run(["--store", files["store"], "replay", "--verify",
                          "--keyring", files["keyring"]])  # fmt: skip
    assert status == 1
    assert out.decode().splitlines() == [
        f"index: {pith}: the state cannot be assembled from the index: the piths entry has "
        "no status 'state' or 'pending'"]
    _, out_jobs, _ = run(["--store", files["store"], "replay", "--verify", "--jobs", "3",
                          "--keyring", files["keyring"]])  # fmt: skip
    assert out_jobs == out


def test_replay_shows_a_damaged_keyring_digest_apart_from_this_keyring_s(
    files: dict[str, Any],
) -> None:
    """A keyring is named by 16 hex characters; a stored digest damaged past them was shown
    as the same name as the keyring given ("reduced under keyring X, not this one (X)")."""
    from pithlog.protocol.keys import load_keyring
    from pithlog.store import Store

    assert append(files)[0] == 2
    digest = load_keyring(Path(files["keyring"]).read_bytes()).digest
    damaged = bytearray(bytes.fromhex(digest))
    damaged[16] ^= 0xFF
    with Store.open(files["store"]) as store:
        store._write(lambda txn, dbs: txn.put(b"keyring_digest", bytes(damaged),
                                              db=dbs["meta"]))  # fmt: skip
    _, _, err = run(["--store", files["store"], "replay", "--verify",
                     "--keyring", files["keyring"]])  # fmt: skip
    said = next(line for line in err.splitlines() if "reduced under keyring" in line)
    assert f"keyring {bytes(damaged).hex()}, not this one ({digest})" in said


def test_replay_verify_starts_its_workers_before_the_walk(
    files: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Above the thresholds (lowered here), `replay --verify` starts its workers before it
    # opens and walks the store (they may take the walk's parts: tests/store/test_walk.py),
    # and they replay once the walk has passed; the output is
    # that of --jobs 1. A walk that refuses the store ends the command, workers and all.
    import pithlog.store.environment as environment
    import pithlog.store.replay_processes as rp

    assert append(files)[0] == 2  # the stranger's events are rejected
    pith = files["events"][0]["pith_number"]
    from pithlog.store import Store

    with Store.open(files["store"]) as store:  # damage for the report to name
        store._write(lambda txn, dbs: txn.delete(pith.encode(), db=dbs["piths"]))
    argv = ["--store", files["store"], "replay", "--verify", "--keyring", files["keyring"]]
    one = run([*argv, "--jobs", "1"])
    assert one[0] == 1 and one[1]
    happened: list[str] = []
    worker_pool, walk = rp.worker_pool, environment._walk

    def pool_spy(stack: Any, processes: int, initializer: Any, initargs: Any) -> Any:
        happened.append(f"{initializer.__name__} x{processes}")
        return worker_pool(stack, processes, initializer, initargs)

    def walk_spy(env: Any, real: str, walkers: Any = None) -> None:
        happened.append("walk" if walkers is None else f"walk, parts for {walkers.parts}")
        walk(env, real, walkers)

    monkeypatch.setattr(rp, "worker_pool", pool_spy)
    monkeypatch.setattr(environment, "_walk", walk_spy)
    monkeypatch.setenv("PITHLOG_CORES", "2")
    monkeypatch.setattr(rp, "POOL_MIN_COPIES", 1)
    monkeypatch.setattr(rp, "COPIES_PER_WORKER", 1)
    monkeypatch.setattr(rp, "EARLY_MIN_BYTES", 1)
    assert run(argv)[:2] == one[:2]
    # one pool, started before the walk, whose processes may take its parts
    assert happened == ["_worker_wait x2", "walk, parts for 2"]
    happened.clear()
    assert run([*argv, "--jobs", "1"])[:2] == one[:2]
    assert happened == ["walk"]
    happened.clear()
    data = Path(files["store"]) / "data.mdb"
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    status, _, err = run(argv)  # refused before the walk (the file is short): no worker waits
    assert status == 2 and "[store.corrupted]" in err
    assert happened == ["_worker_wait x2"]


def test_keyring_change_applied_by_append_rekey_and_rebuild(files: dict[str, Any]) -> None:
    assert append(files)[0] == 2
    status, out, err = run(["--store", files["store"], "replay", "--verify",
                            "--keyring", files["revoked"]])  # fmt: skip
    assert status == 1 and "would change" in err
    changed = {line.split(": ")[1] for line in out.decode().splitlines()}
    events = [e for e in files["events"] if e["signer"]["key_id"] != "test-stranger"]
    revoked = g.test_keyring(author={"revoked_at": g.ts(300)})
    before, after = g.expected_states(events), g.expected_states(events, revoked)
    assert changed == {p for p in before if before[p] != after[p]}

    def states() -> dict[str, bytes]:
        found = {}
        for pith in before:
            status, out, _ = run(["--store", files["store"], "state", pith])
            found[pith] = out.rstrip(b"\n") if status == 0 else b""
        return found

    # a small change: append applies it first (the stranger's events are still rejected)
    status, _, err = run(["--store", files["store"], "append", "--keyring", files["revoked"],
                          files["log"]])  # fmt: skip
    assert status == 2 and "the keyring changed (1 key(s))" in err, err
    assert states() == after
    # rekey back, with its bars
    status, _, err = run(["--store", files["store"], "rekey", "--progress",
                          "--keyring", files["keyring"]])  # fmt: skip
    assert status == 0, err
    assert "rekey: 1 key(s) changed" in err and "rekey: judge" in err and "rekey: reduce" in err
    assert f"the store is under keyring {g.KEYRING.digest[:16]}" in err
    assert states() == before
    status, _, err = run(["--store", files["store"], "rekey", "--keyring", files["keyring"]])
    assert status == 0 and "already" in err
    status, _, err = run(["--store", files["store"], "replay", "--rebuild", "--verify",
                          "--keyring", files["revoked"]])  # fmt: skip
    assert status == 0, err
    assert states() == after


def test_state_pending_stats_and_errors(files: dict[str, Any], monkeypatch: Any) -> None:
    monkeypatch.setenv("PITHLOG_STORE", files["store"])
    status, _, err = run(["state", files["events"][0]["pith_number"]])
    assert status == 2 and "[store.missing]" in err
    assert run(["append", "--keyring", files["keyring"], files["log"]])[0] == 2
    status, out, _ = run(["pending"])
    pending = lines(out)
    assert status == 0 and pending and all(p["status"] == "pending" for p in pending)
    status, _, err = run(["state", pending[0]["pith_number"]])
    assert status == 2 and "[store.no_state]" in err and "pending" in err
    status, _, err = run(["state", "pith:2026:AAAAAAAAAAAAAAAAAAAAAAAAAA"])
    assert status == 2 and "[store.no_state]" in err
    status, _, err = run(["state", "nonsense"])
    assert status == 2 and "[usage.pith_number]" in err
    status, out, _ = run(["stats"])
    stats = json.loads(out)
    assert status == 0 and stats["counts"]["events"] > 0 and 0 < stats["map_use"] < 1


def test_export_then_import_gives_identical_states(files: dict[str, Any]) -> None:
    rec = g.record("2501.00044")
    extra = files["tmp"] / "extra.jsonl"
    extra.write_bytes(g.encoded(rec) + b"\n" + g.encoded(g.forged(rec)) + b"\n")
    assert append(files, "--keep-invalid")[0] == 0
    assert append(files, "--keep-invalid", path=str(extra))[0] == 0
    status, exported, err = run(["--store", files["store"], "export"])
    assert status == 0 and f"through seq {len(exported.splitlines())}" in err
    dump = files["tmp"] / "export.jsonl"
    dump.write_bytes(exported)
    fresh = str(files["tmp"] / "fresh")
    status, out, err = run(["--store", fresh, "import", "--keyring", files["keyring"],
                            "--keep-invalid", str(dump)])  # fmt: skip
    assert status == 0, err
    assert {r["status"] for r in lines(out)} == {"stored", "evidence"}
    _, pend_a, _ = run(["--store", files["store"], "pending"])
    _, pend_b, _ = run(["--store", fresh, "pending"])
    assert pend_a == pend_b
    for pith in {e["pith_number"] for e in files["events"]}:
        assert run(["--store", files["store"], "state", pith])[1] == \
            run(["--store", fresh, "state", pith])[1]  # fmt: skip
    status, tail, _ = run(["--store", files["store"], "export", "--after", "3"])
    assert tail.splitlines() == exported.splitlines()[3:]
    status, seqs, _ = run(["--store", files["store"], "export", "--after", "3", "--with-seq"])
    assert [json.loads(x)["seq"] for x in seqs.splitlines()][:2] == [4, 5]


def test_export_writes_shards_that_reduce_and_import_read_as_one(
    files: dict[str, Any],
) -> None:
    assert append(files, "--keep-invalid")[0] == 0
    _, whole, _ = run(["--store", files["store"], "export"])
    total = len(whole.splitlines())
    out_dir = files["tmp"] / "shards"
    status, manifest, err = run(["--store", files["store"], "export", "--shard-size", "7",
                                 "--out", str(out_dir)])  # fmt: skip
    assert status == 0 and f"{total} envelopes in {-(-total // 7)} shard(s)" in err
    shards = sorted(out_dir.iterdir())
    assert [p.name for p in shards] == [m["file"] for m in lines(manifest)]
    assert [m["envelopes"] for m in lines(manifest)] == [7] * (total // 7) + (
        [total % 7] if total % 7 else [])  # fmt: skip
    assert b"".join(p.read_bytes() for p in shards) == whole  # append order, named in order
    assert lines(manifest)[1]["first_seq"] == lines(manifest)[0]["last_seq"] + 1 == 8
    # the shards, as several EVENTS, reduce to what the whole export reduces to
    dump = files["tmp"] / "whole.jsonl"
    dump.write_bytes(whole)
    reduced = run(["reduce", "--keyring", files["keyring"], str(dump)])
    assert run(["reduce", "--keyring", files["keyring"], *map(str, shards)])[:2] == reduced[:2]
    # a resumed export adds shards beside them; one that would overwrite a shard is refused
    assert run(["--store", files["store"], "export", "--after", str(total), "--out",
                str(out_dir)])[0] == 0  # fmt: skip
    status, _, err = run(["--store", files["store"], "export", "--out", str(out_dir)])
    assert status == 2 and "[usage.exists]" in err
    assert sorted(out_dir.iterdir()) == shards  # no half-written shard left behind
    status, _, err = run(["--store", files["store"], "export", "--shard-size", "7"])
    assert status == 2 and "--out" in err


def test_progress_of_reading_the_input_goes_to_stderr_only(files: dict[str, Any]) -> None:
    size = Path(files["log"]).stat().st_size
    status, plain, err = run(["reduce", "--keyring", files["keyring"], files["log"]])
    assert status == 0 and "reduce: read" not in err  # stderr is not a terminal here
    status, shown, err = run(["reduce", "--progress", "--keyring", files["keyring"],
                              files["log"]])  # fmt: skip
    assert status == 0 and shown == plain
    assert f"100%|##########| {tqdm.format_sizeof(size)}/{tqdm.format_sizeof(size)}" in err
    # a line said while the bar is shown goes above it, on a line of its own
    assert any(part.startswith("pending: ") and "%|" not in part
               for part in re.split("[\r\n]", err))  # fmt: skip
    status, out, err = append(files, "--keep-invalid", "--progress", "--batch-size", "7")
    assert status == 0 and len(lines(out)) == len(files["events"])
    assert "append: read: 100%" in err
    assert err.rstrip().splitlines()[-1].startswith("append: ")  # the summary comes last


class _Counting(io.BytesIO):
    """A stream that remembers how many bytes were read from it."""

    taken = 0

    def read(self, size: int | None = -1) -> bytes:
        data = super().read(size)
        self.taken += len(data)
        return data


def test_a_broken_first_line_is_not_a_reason_to_read_everything(files: dict[str, Any]) -> None:
    """A JSON Lines input whose first line is not complete JSON is tried as one multi-line
    object only up to the door's 8 MiB; the rest is streamed as lines (issue: 180 MB read
    whole)."""
    from pithlog.cli import append_commands
    from pithlog.protocol.canonical import MAX_LINE_BYTES

    good = g.encoded(files["events"][0]) + b"\n"
    stream = _Counting(b'{"broken": \n' + good * (3 * MAX_LINE_BYTES // len(good)))
    items = append_commands._iter_events(stream)
    first, second = next(items), next(items)
    assert isinstance(first[1], bytes) and first[0] == 1  # the broken line, for the door
    assert second == (2, good.rstrip(b"\n"))
    assert stream.taken <= MAX_LINE_BYTES + (2 << 20)  # not the 3 x 8 MiB of the input
    assert sum(1 for _ in items) == 3 * MAX_LINE_BYTES // len(good) - 1


def test_a_first_line_without_lf_is_read_no_further_than_a_line_may_be(
    files: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first line starting with '{' was searched for its LF to the end of the input:
    with none, the whole input was read and held (and joined again at every read, in time
    the square of its size) before the line framing, which drops an overlong line's bytes
    as it reads, had it. It now gets it after at most the door's 8 MiB."""
    from pithlog.cli import append_commands
    from pithlog.protocol.canonical import MAX_LINE_BYTES

    stream = _Counting(b'{"a":"' + b"x" * (3 * MAX_LINE_BYTES))
    framed_at = []

    def framing(lines: BinaryIO) -> Iterator[tuple[int, bytes | None]]:
        framed_at.append(stream.taken)
        return iter_lines(lines)

    monkeypatch.setattr(append_commands, "iter_lines", framing)
    items = list(append_commands._iter_events(stream))
    assert len(items) == 1 and items[0][0] == 1
    assert isinstance(items[0][1], append_commands.DoorError)
    assert items[0][1].code == "door.line_too_long"
    assert framed_at[0] <= MAX_LINE_BYTES + (2 << 20)  # not the 3 x 8 MiB of the input


def test_blank_lines_before_the_first_event_are_counted_not_held(files: dict[str, Any]) -> None:
    """The blank lines an input starts with were held whole and stripped again at every
    read (40 MB of LFs: 40 s). They are now counted and dropped as read: the events after
    them keep their line numbers, a blank start longer than a line is still that line
    refused as too long."""
    from pithlog.cli import append_commands
    from pithlog.protocol.canonical import MAX_LINE_BYTES

    good = g.encoded(files["events"][0])
    blank = b"\n" * (2 * MAX_LINE_BYTES)
    stream = _Counting(blank + b" \r\n  " + good + b"\n" + good + b"\n")
    tracemalloc.start()
    try:
        items = list(append_commands._iter_events(stream))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert items == [(2 * MAX_LINE_BYTES + 2, b"  " + good), (2 * MAX_LINE_BYTES + 3, good)]
    assert peak < MAX_LINE_BYTES // 2  # not the 16 MiB of LFs
    stream = _Counting(b" " * (MAX_LINE_BYTES + 1) + good + b"\n" + good)
    refused, kept = list(append_commands._iter_events(stream))
    assert refused[0] == 1 and isinstance(refused[1], append_commands.DoorError)
    assert kept == (2, good)
    assert list(append_commands._iter_events(_Counting(b"\n \t\r\n" * 1000))) == []


def test_a_blank_line_too_long_before_the_first_event_is_refused(files: dict[str, Any]) -> None:
    """A blank line longer than a line may be is refused as too long wherever it is: among
    the blank lines an input starts with it was dropped unreported when a 64 KiB read of
    blank lines only followed it, and a single object after it taken as the whole input."""
    from pithlog.cli import append_commands
    from pithlog.protocol.canonical import MAX_LINE_BYTES

    good = g.encoded(files["events"][0])
    for tail in (good + b"\n" + good + b"\n", good + b"\n"):
        stream = _Counting(b"\n" + b" " * (MAX_LINE_BYTES + 1) + b"\n" * 70_000 + tail)
        items = list(append_commands._iter_events(stream))
        assert items[0][0] == 2 and isinstance(items[0][1], append_commands.DoorError)
        assert items[0][1].code == "door.line_too_long"
        assert items[1] == (70_002, good)
    stream = _Counting(b" " * (MAX_LINE_BYTES - 1) + b"\r\n" * 70_000 + good + b"\n" + good)
    assert list(append_commands._iter_events(stream)) == [(70_001, good), (70_002, good)]


def test_a_blank_line_too_long_in_an_input_of_blank_lines_only_is_refused() -> None:
    """An input of blank lines only had its blank lines over 8 MiB dropped unreported
    ("no events: nothing to do"), where among events the same line is refused as too
    long; the last one too when no LF ends it."""
    from pithlog.cli import append_commands
    from pithlog.protocol.canonical import MAX_LINE_BYTES

    long = b" " * (MAX_LINE_BYTES + 1)
    for data, where in ((b"\n" + long + b"\r\n\n", 2), (b"\n\n" + long, 3)):
        items = list(append_commands._iter_events(_Counting(data)))
        assert [number for number, _ in items] == [where]
        assert isinstance(items[0][1], append_commands.DoorError)
        assert items[0][1].code == "door.line_too_long"
    assert list(append_commands._iter_events(_Counting(b"\n" + long[1:] + b"\n"))) == []


@pytest.mark.parametrize("blanks", [1, 3, (1 << 16) - 1, 1 << 16, (1 << 16) + 1, 3 << 16])
def test_one_object_after_blank_lines_is_read_alike_wherever_a_read_ends(
    files: dict[str, Any], blanks: int
) -> None:
    """One object after blank lines is the one-object input, position 1, however many blank
    lines there are: past a 64 KiB read it was taken for JSON Lines and numbered after the
    blank lines, as if where a read ended were part of the input."""
    from pithlog.cli import append_commands

    good = g.encoded(files["events"][0])
    for start in (b"\n" * blanks, b" " * blanks + b"\r\n "):
        assert list(append_commands._iter_events(_Counting(start + good + b"\n"))) == [(1, good)]


def test_a_large_object_after_blank_lines_is_one_object_wherever_a_read_ends() -> None:
    """The blank lines read with the start of a single object were counted in its size,
    those that filled reads before it were not: an object near the door's 8 MiB after
    1,000 LFs was taken for JSON Lines (each of its lines refused), after 65,536 as one
    object. Neither counts now."""
    from pithlog.cli import append_commands
    from pithlog.protocol.canonical import MAX_LINE_BYTES

    obj = b'{\n "a": "' + b"x" * (MAX_LINE_BYTES - 600) + b'"\n}'
    for blanks in (1000, 1 << 16):
        stream = _Counting(b"\n" * blanks + obj + b"\n")
        assert list(append_commands._iter_events(stream)) == [(1, obj)], blanks


def test_a_json_array_over_the_limit_is_refused_unread(
    files: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from pithlog.cli import append_commands

    monkeypatch.setattr(append_commands, "MAX_ARRAY_BYTES", 1024)
    array = json.dumps(files["events"]).encode()
    assert len(array) > 8 * 1024
    stream = _Counting(array)
    with pytest.raises(append_commands.DoorError, match="JSON Lines") as refused:
        list(append_commands._iter_events(stream))
    assert refused.value.code == "door.too_large"
    assert stream.taken <= 1024 + (1 << 16)
    path = files["tmp"] / "array.json"
    path.write_bytes(array)
    status, out, err = append(files, path=str(path))
    assert status == 2 and out == b"" and "[door.too_large]" in err


def test_input_nested_past_any_reader_is_refused_at_the_door(files: dict[str, Any]) -> None:
    """A few KB of brackets nest deeper than msgspec follows (RecursionError): the shape of
    the input is still told, and the refusal is the door's one line, never a traceback."""
    tmp: Path = files["tmp"]
    deep_array = tmp / "array.json"
    deep_array.write_bytes(b"[" * 5000 + b"]" * 5000 + b"\n")
    status, out, err = append(files, path=str(deep_array))
    assert (status, out) == (2, b"") and "Traceback" not in err
    assert err.startswith("pithlog: [door.too_deep]") and "(at the input)" in err
    deep_object = tmp / "object.json"
    deep_object.write_bytes(b'{"a":' * 5000 + b"1" + b"}" * 5000 + b"\n")
    status, out, err = run(["--store", files["store"], "import", "--keyring",
                            files["keyring"], str(deep_object)])  # fmt: skip
    assert status == 2 and "Traceback" not in err
    assert [r["reason"][:16] for r in lines(out)] == ["[door.too_deep] "]
    assert not Path(files["store"]).exists()  # every line refused: no store
    two = tmp / "states.jsonl"
    two.write_bytes(deep_array.read_bytes() * 2)
    status, out, err = run(["verify-state", str(two)])
    assert status == 1 and "Traceback" not in err and b"door.too_deep" in out


class _ClosingAfter(io.BytesIO):
    """A standard output whose reader stops after ``lines`` lines (``| head``)."""

    def __init__(self, lines: int) -> None:
        super().__init__()
        self.left = lines

    def write(self, data: Any) -> int:
        if self.left == 0:
            raise BrokenPipeError(32, "Broken pipe")
        self.left -= 1
        return super().write(data)


def test_append_into_a_closed_output_stops_and_says_so(files: dict[str, Any]) -> None:
    """``append | head -3`` is not a success: the append stops and says where (status 2,
    ``usage.output_closed``), and the same input appended again finishes it."""
    err = io.StringIO()
    argv = ["--store", files["store"], "append", "--keyring", files["keyring"],
            "--keep-invalid", "--batch-size", "5", files["log"]]  # fmt: skip
    status = main(argv, stdout=_ClosingAfter(7), stderr=err)
    assert status == 2 and "Traceback" not in err.getvalue()
    assert err.getvalue().startswith("pithlog: [usage.output_closed] standard output closed "
                                     "at line 8: append stopped")  # fmt: skip
    status, out, _ = run(argv)
    assert status == 0
    statuses = [r["status"] for r in lines(out)]
    assert len(statuses) == len(files["events"]) > 15
    # lines 1-10 (the batches of the first 7 lines printed and of line 8) are stored; at
    # most one batch more; everything after is stored only now
    assert statuses[:10] == ["duplicate"] * 10 and statuses[15:] == ["stored"] * (
        len(statuses) - 15)  # fmt: skip


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork() (RLIMIT_FSIZE set in a child)")
def test_export_into_shards_on_a_full_disk_is_one_error_and_leaves_no_part(
    files: dict[str, Any],
) -> None:
    """A shard that cannot be written whole (``ENOSPC``; here ``EFBIG``, past a file size
    limit): the error names the folder, and no temporary file is left. Closing the shard
    flushed its buffer again, which failed again and replaced the error by a traceback."""
    import resource

    assert append(files, "--keep-invalid")[0] == 0
    shards = files["tmp"] / "shards"
    argv = ["--store", files["store"], "export", "--out", str(shards), "--shard-size", "1000"]
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, hard))  # Python ignores SIGXFSZ
    try:
        status, _, err = run(argv)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert status == 2 and "[usage.unwritable] cannot write a shard in" in err, err
    assert list(shards.iterdir()) == []


def test_export_into_shards_removes_the_part_an_export_killed_outright_left(
    files: dict[str, Any],
) -> None:
    """A shard's hidden temporary file ``.export-<seq>.jsonl.tmp-PID`` that an export
    killed outright left (its process gone) is removed by the export that writes that
    shard again; one of a live process is a write under way and stays."""
    import subprocess

    assert append(files, "--keep-invalid")[0] == 0
    shards = files["tmp"] / "shards"
    shards.mkdir()
    gone = subprocess.Popen(["true"])
    gone.wait()  # a PID whose process has ended
    dead = shards / f".export-000000000001.jsonl.tmp-{gone.pid}"
    live = shards / f".export-000000000001.jsonl.tmp-{os.getppid()}"
    dead.write_bytes(b"half a shard\n")
    live.write_bytes(b"a write under way\n")
    status, _, err = run(["--store", files["store"], "export", "--out", str(shards)])
    assert status == 0, err
    assert not dead.exists() and live.exists()
    assert sorted(p.name for p in shards.iterdir()) == sorted(
        [live.name, "export-000000000001.jsonl"])  # fmt: skip


def test_export_into_shards_it_cannot_write_says_so_not_that_it_cannot_read(
    files: dict[str, Any],
) -> None:
    """``export --out`` writes: a file where its folder should be, or a folder it cannot
    make, is ``usage.unwritable`` naming the folder. It was ``usage.unreadable``, whose
    advice is about reading a file, with ``cannot create X: File exists`` for a file."""
    assert append(files, "--keep-invalid")[0] == 0
    argv = ["--store", files["store"], "export", "--out"]
    status, out, err = run([*argv, files["log"]])
    assert (status, out) == (2, b"")
    assert err == f"pithlog: [usage.unwritable] --out {files['log']} is a file, not a " \
        "folder: give the folder of the shards (made if need be)\n"  # fmt: skip
    status, out, err = run([*argv, str(Path(files["log"]) / "shards")])
    assert (status, out) == (2, b"")
    assert err.startswith("pithlog: [usage.unwritable] cannot make the folder "), err
    assert "Not a directory" in err and err.count("\n") == 1


def test_export_into_shards_refuses_an_empty_out_and_the_stores_own_folder(
    files: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--out "$DIR"`` with DIR unset wrote the shards into the current folder, and
    ``--out`` naming the store (or a folder in it) wrote them among the store's files:
    both are refused, nothing written."""
    assert append(files, "--keep-invalid")[0] == 0
    monkeypatch.chdir(files["tmp"])
    before = sorted(p.name for p in files["tmp"].iterdir())
    for given, said in (("", "--out is empty"),
                        (files["store"], "is inside the store"),
                        (str(Path(files["store"]) / "shards"), "is inside the store")):
        status, out, err = run(["--store", files["store"], "export", "--out", given])
        assert (status, out) == (2, b""), err
        assert err.startswith("pithlog: [usage.arguments] ") and said in err, err
    assert sorted(p.name for p in files["tmp"].iterdir()) == before
    assert not (Path(files["store"]) / "shards").exists()
    assert not any(p.name.startswith("export-") for p in Path(files["store"]).iterdir())


def test_export_into_shards_says_a_looping_link_in_one_line(files: dict[str, Any]) -> None:
    """A symbolic link that loops, in ``--out`` or in the store's path, is the one-line
    error of the mkdir or the open that meets it, not a traceback from the check that
    ``--out`` is not inside the store."""
    assert append(files, "--keep-invalid")[0] == 0
    loop = files["tmp"] / "loop"
    loop.symlink_to(loop)
    status, out, err = run(["--store", files["store"], "export", "--out", str(loop / "x")])
    assert (status, out) == (2, b""), err
    assert err.startswith("pithlog: [usage.unwritable] cannot make the folder "), err
    assert err.count("\n") == 1, err
    status, out, err = run(["--store", str(loop), "export", "--out",
                            str(files["tmp"] / "shards")])  # fmt: skip
    assert (status, out) == (2, b""), err
    assert err.startswith("pithlog: [store.io] ") and err.count("\n") == 1, err


def test_export_into_shards_stops_where_its_output_closes(files: dict[str, Any]) -> None:
    """``export --out DIR | head -1``: each shard is on disk before its line is printed;
    the export stops at the line that cannot be, says through which seq the shards are
    written, and --after that seq writes the rest (the same shards as one whole run)."""
    assert append(files, "--keep-invalid")[0] == 0
    shards = files["tmp"] / "shards"
    err = io.StringIO()
    argv = ["--store", files["store"], "export", "--out", str(shards), "--shard-size", "7"]
    assert main(argv, stdout=_ClosingAfter(1), stderr=err) == 2
    said = re.search(r"\[usage.output_closed\] .* give export --after (\d+) --out", err.getvalue())
    assert said, err.getvalue()
    through = int(said.group(1))
    assert through == 14 and len(list(shards.iterdir())) == 2  # the second's line failed
    status, _, rest = run([*argv[:-2], "--after", str(through), "--shard-size", "7"])
    assert status == 0, rest
    whole = files["tmp"] / "whole"
    assert run([*argv[:2], "export", "--out", str(whole), "--shard-size", "7"])[0] == 0
    assert {p.name: p.read_bytes() for p in shards.iterdir()} == {
        p.name: p.read_bytes() for p in whole.iterdir()}  # fmt: skip


def test_a_shard_is_durable_under_its_name_before_its_line_is_printed(
    files: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shard's line tells an operator (and ``--after``) that the shard is written: its
    data is synced before the rename, and its folder after it, or a crash could take the
    name back (the rename lives in the folder, which was never synced)."""
    import stat

    from pithlog.cli import store_commands

    assert append(files, "--keep-invalid")[0] == 0
    shards = files["tmp"] / "shards"
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        mode = os.fstat(fd).st_mode
        names = sorted(p.name for p in shards.iterdir() if not p.name.startswith("."))
        synced.append(f"folder:{','.join(names)}" if stat.S_ISDIR(mode) else "file")
        real_fsync(fd)

    monkeypatch.setattr(store_commands.os, "fsync", fsync)
    status, manifest, err = run(["--store", files["store"], "export", "--out", str(shards),
                                 "--shard-size", "20"])  # fmt: skip
    assert status == 0, err
    names = [m["file"] for m in lines(manifest)]
    # each shard: its file synced, then the folder holding it under its name
    assert synced == [step for n in range(1, len(names) + 1)
                      for step in ("file", f"folder:{','.join(names[:n])}")]  # fmt: skip


class _StoppingOutput:
    """A standard output that takes ``room`` bytes (the last write in part), then fails
    as a full disk does, or is interrupted (``stop``)."""

    def __init__(self, room: int, stop: BaseException) -> None:
        self.taken = bytearray()
        self.room = room
        self.stop = stop

    def write(self, data: bytes) -> int:
        part = bytes(data[: self.room - len(self.taken)])
        self.taken += part
        if len(part) < len(data):
            if part and isinstance(self.stop, OSError):
                return len(part)  # as a buffered file does: the count taken, no error yet
            raise self.stop
        return len(data)

    def flush(self) -> None:
        pass


@pytest.mark.parametrize("with_seq", [False, True], ids=["plain", "with-seq"])
@pytest.mark.parametrize("stop", ["full", "interrupted"])
def test_a_stopped_export_names_the_last_seq_written_whole(
    files: dict[str, Any], monkeypatch: pytest.MonkeyPatch, stop: str, with_seq: bool
) -> None:
    """Stopped by a full disk or Ctrl-C, export says how many lines are written whole and
    through which seq, so that the rest is exported with --after; what it names was
    written whole. Before, it named neither."""
    assert append(files, "--keep-invalid")[0] == 0
    status, whole, _ = run(["--store", files["store"], "export", "--after", "3",
                            *(["--with-seq"] if with_seq else [])])  # fmt: skip
    assert status == 0
    monkeypatch.setattr("pithlog.cli.store_commands.EXPORT_PIECE", 2000, raising=False)
    error = OSError(28, "No space left on device") if stop == "full" else KeyboardInterrupt()
    output = _StoppingOutput(len(whole) // 2, error)
    err = io.StringIO()
    status = main(["--store", files["store"], "export", "--after", "3",
                   *(["--with-seq"] if with_seq else [])], stdout=output, stderr=err)  # fmt: skip
    said = err.getvalue()
    assert status == (2 if stop == "full" else 130), said
    if stop == "full":
        assert said.count("\n") == 1 and "[usage.output]" in said, said
    named = re.search(r"the first (\d+) lines are written whole, through seq (\d+): export "
                      r"the rest with --after (\d+)", said)  # fmt: skip
    assert named is not None, said
    count, seq, after = map(int, named.groups())
    assert seq == after and count == seq - 3 and count > 0
    # those lines are there, whole, and they are the envelopes of seq 4 to seq
    assert bytes(output.taken).split(b"\n")[:count] == whole.split(b"\n")[:count]
    status, rest, _ = run(["--store", files["store"], "export", "--after", str(seq),
                           *(["--with-seq"] if with_seq else [])])  # fmt: skip
    assert b"".join(line + b"\n" for line in whole.split(b"\n")[:count]) + rest == whole


def test_a_stopped_export_that_wrote_no_line_names_no_seq(files: dict[str, Any]) -> None:
    assert append(files, "--keep-invalid")[0] == 0
    err = io.StringIO()
    status = main(["--store", files["store"], "export"],
                  stdout=_StoppingOutput(10, OSError(28, "No space left on device")),
                  stderr=err)  # fmt: skip
    assert status == 2 and "[usage.output]" in err.getvalue()
    assert "--after" not in err.getvalue() and "export:" not in err.getvalue()


def test_an_interrupted_export_into_shards_names_the_last_shard_said(
    files: dict[str, Any],
) -> None:
    assert append(files, "--keep-invalid")[0] == 0
    folder = files["tmp"] / "shards"
    status, lines_out, _ = run(["--store", files["store"], "export", "--out",
                                str(folder / "all"), "--shard-size", "5"])  # fmt: skip
    first = lines_out.split(b"\n")[0] + b"\n"
    err = io.StringIO()
    status = main(["--store", files["store"], "export", "--out", str(folder / "cut"),
                   "--shard-size", "5"], stdout=_StoppingOutput(len(first) + 3,
                   KeyboardInterrupt()), stderr=err)  # fmt: skip
    assert status == 130
    assert "the shards through seq 5 are written; give export --after 5 --out" in err.getvalue()
    assert (folder / "cut" / "export-000000000001.jsonl").read_bytes() == (
        folder / "all" / "export-000000000001.jsonl").read_bytes()
