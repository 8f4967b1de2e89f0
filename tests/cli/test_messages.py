"""What the commands print when a person makes the usual mistakes: a usage mistake is
status 2 and says what to do, a count is given where one helps (issue: "Tried as a new user
would", point 4). Each test fails on the message or status printed before."""

from __future__ import annotations

import errno
import io
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from pithlog.cli import main
from pithlog.store import Store
from pithlog.testing import test_key
from tests.cli.test_cli import run, sign_seed, signer

__all__ = ["signer"]  # the fixture, imported for the tests below


def stored(files: dict[str, Path], tmp_path: Path) -> tuple[str, list[bytes]]:
    events = sign_seed(files)
    (tmp_path / "events.jsonl").write_bytes(b"".join(events))
    store = str(tmp_path / "store")
    status, _, err = run(["--store", store, "append", "--keyring", str(files["keyring"]),
                          str(tmp_path / "events.jsonl")])  # fmt: skip
    assert status == 0, err
    return store, events


def test_verify_state_of_several_states_is_a_usage_mistake(
    signer: dict[str, Path], tmp_path: Path
) -> None:
    states = tmp_path / "states.jsonl"
    seed = (Path(__file__).parents[2] / "vectors/seeds/state-2411.00284.json").read_bytes()
    states.write_bytes(seed.strip() + b"\n" + seed.strip() + b"\n" + seed.strip() + b"\n")
    status, out, err = run(["verify-state", str(states)])
    assert status == 2 and out == b""
    assert "[usage.several_states] one state document per file" in err and "3 lines" in err
    one = tmp_path / "one.json"
    one.write_bytes(seed.strip() + b"\n")
    assert run(["verify-state", str(one)])[0] == 0
    # one document over several lines is one document: verified, and not in display form
    pretty = tmp_path / "pretty.json"
    pretty.write_text(json.dumps(json.loads(seed), indent=2))
    status, out, err = run(["verify-state", str(pretty)])
    assert status == 1 and out.startswith(b"rendering: ")


def test_export_after_the_end_of_the_log_is_an_error(
    signer: dict[str, Path], tmp_path: Path
) -> None:
    store, _ = stored(signer, tmp_path)
    status, out, err = run(["--store", store, "export", "--after", "2"])
    assert status == 0 and out == b""  # at the end: nothing new, fine
    status, out, err = run(["--store", store, "export", "--after", "99"])
    assert status == 2 and out == b""
    assert "[store.past_end]" in err and "ends at seq 2" in err
    shards = tmp_path / "shards"  # into shards alike, and no folder made
    status, out, err = run(["--store", store, "export", "--after", "5", "--out", str(shards)])
    assert (status, out) == (2, b"") and "[store.past_end]" in err and not shards.exists()


def test_reduce_counts_invalid_events_by_reason(signer: dict[str, Path], tmp_path: Path) -> None:
    events = sign_seed(signer)
    (tmp_path / "events.jsonl").write_bytes(b"".join(events))
    ring = tmp_path / "other.json"
    run(["keygen", "--key-id", "other", "--signer-id", "o", "--signer-type", "mirror",
         "--out", str(tmp_path / "other.key")])  # fmt: skip
    run(["keyring", "new", str(ring)])
    run(["keyring", "add", str(ring), str(tmp_path / "other.key")])
    status, _, err = run(["reduce", "--keyring", str(ring), str(tmp_path / "events.jsonl")])
    assert status == 0
    assert "2 invalid events (unknown_key 2)" in err, err
    status, _, err = run(["reduce", "--keyring", str(signer["keyring"]),
                          str(tmp_path / "events.jsonl")])  # fmt: skip
    assert status == 0 and "0 invalid events" in err


def test_sync_from_a_file_says_why_each_line_is_refused(
    signer: dict[str, Path], tmp_path: Path
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"a":1}\n[1]\n')
    status, _, err = run(["--store", str(tmp_path / "s"), "sync", "--from", str(bad),
                          "--keyring", str(signer["keyring"])])  # fmt: skip
    assert status == 2
    assert f"{bad}: line 1: [door.event_id]" in err and f"{bad}: line 2: [door.not_object]" in err
    assert "no store created" in err and not (tmp_path / "s").exists()


def test_an_interrupted_sync_says_what_it_stored(
    signer: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, _ = stored(signer, tmp_path)
    calls = []
    append = Store.append

    def interrupted_second(self: Store, *args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return append(self, *args, **kwargs)

    monkeypatch.setattr(Store, "append", interrupted_second)
    mirror = str(tmp_path / "mirror")
    status, _, err = run(["--store", mirror, "sync", "--from", source, "--batch-size", "1",
                          "--keyring", str(signer["keyring"])])  # fmt: skip
    assert status == 130
    assert "sync: interrupted after 1 copies were committed (1 stored)" in err, err
    monkeypatch.undo()
    with Store.open(mirror, create=False) as store:
        assert store.tree_size() == 1


def test_sign_names_the_payload_member_and_the_allowed_targets(signer: dict[str, Path]) -> None:
    payload = json.loads(signer["record"].read_text())
    record = payload["canonical_record"]
    record["source"]["version"] = "v1"
    signer["record"].write_text(json.dumps({"canonical_record": record}))
    status, _, err = run(["sign", "--key", str(signer["key"]), "--type", "record_created",
                          "--payload", str(signer["record"])])  # fmt: skip
    assert status == 2
    assert "canonical_record.source.version must be an integer (got 'v1')" in err
    status, _, err = run(["sign", "--key", str(signer["key"]), "--type", "author_attestation",
                          "--pith", "pith:2024:" + "A" * 26, "--payload",
                          str(signer["snapshot"])])  # fmt: skip
    assert status == 2 and "record or claim:<claim id>" in err


def test_a_store_that_is_a_file_or_a_foreign_folder_is_refused(
    signer: dict[str, Path], tmp_path: Path
) -> None:
    events = b"".join(sign_seed(signer))
    (tmp_path / "events.jsonl").write_bytes(events)
    plain = tmp_path / "plain"
    plain.write_bytes(b"x")
    status, _, err = run(["--store", str(plain), "append", "--keyring", str(signer["keyring"]),
                          str(tmp_path / "events.jsonl")])  # fmt: skip
    assert status == 2 and "[store.not_a_store]" in err and "is a file" in err
    assert plain.read_bytes() == b"x"
    foreign = tmp_path / "papers"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    status, _, err = run(["--store", str(foreign), "append", "--keyring",
                          str(signer["keyring"]), str(tmp_path / "events.jsonl")])  # fmt: skip
    assert status == 2 and "holding other files (notes.txt)" in err
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]


def test_sync_refuses_a_foreign_store_folder_before_reading_its_source(
    signer: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``sync --from FILE`` into a --store that is no store: refused before the file is read
    (as append and import do). It read, indexed and reported the whole file first (a
    115 MB export: 3.7 s, against 0.7 s for import), and spooled all of standard input
    to a temporary file for ``--from -``."""
    foreign = tmp_path / "papers"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    source = tmp_path / "export.jsonl"
    source.write_bytes(b"not json\n" * 3 + b"".join(sign_seed(signer)))
    for given in (str(source), "-"):
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(source.read_bytes())))
        status, out, err = run(["--store", str(foreign), "sync", "--from", given,
                                "--keyring", str(signer["keyring"])])  # fmt: skip
        assert status == 2 and out == b"", err
        assert err.splitlines() == [line for line in err.splitlines() if "[store.not_a_store]"
                                    in line] and err, err  # no line of the source reported
        assert sys.stdin.read() != "", given  # standard input left unread
        assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]


def test_an_import_whose_every_line_is_refused_creates_no_store(
    signer: dict[str, Path], tmp_path: Path
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"a":1}\nnot json\n')
    store = tmp_path / "store"
    status, out, err = run(["--store", str(store), "import", "--keyring",
                            str(signer["keyring"]), str(bad)])  # fmt: skip
    assert status == 2 and not store.exists()
    assert [json.loads(line)["status"] for line in out.splitlines()] == ["refused", "refused"]
    assert "no store created" in err


PITH = "pith:2026:AAAAAAAAAAAAAAAAAAAAAAAAAA"
EVENT = "sha256:" + "a" * 64
CHECKPOINT = ["--key", "{key}", "--origin", "registry.test.invalid/pith"]


@pytest.mark.parametrize(
    "argv",
    [
        ["stats"], ["pending"], ["piths"], ["export"], ["state", PITH], ["show", PITH],
        ["event", EVENT], ["replay", "--keyring", "{keyring}"],
        ["replay", "--verify", "--keyring", "{keyring}"],
        ["replay", "--rebuild", "--verify", "--keyring", "{keyring}"],
        ["rekey", "--keyring", "{keyring}"], ["checkpoint", *CHECKPOINT],
        ["prove", "consistency", "1", "2"], ["prove", "inclusion", EVENT, *CHECKPOINT],
        ["prove", "equivocation", PITH, *CHECKPOINT, "--keyring", "{keyring}"],
    ],
)  # fmt: skip
def test_a_missing_store_is_refused_and_not_created(
    signer: dict[str, Path], tmp_path: Path, argv: list[str]
) -> None:
    """A read of a mistyped ``--store`` is ``store.missing`` in one line, and leaves no
    folder behind: an empty store made on the way would answer as if the log were empty
    (docs/cli.md: only the commands that write create a store)."""
    store = tmp_path / "typo" / "store"
    given = [arg.format(key=signer["key"], keyring=signer["keyring"]) for arg in argv]
    status, out, err = run(["--store", str(store), *given])
    assert (status, out) == (2, b""), err
    assert err.startswith("pithlog: [store.missing] no store at ") and err.count("\n") == 1
    assert not (tmp_path / "typo").exists()


def test_an_empty_pithlog_store_is_refused_not_the_default_store(
    signer: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``PITHLOG_STORE=`` (``PITHLOG_STORE=$DIR`` with DIR unset) is refused as ``--store
    ""`` is: it fell back to ./pithlog-store, where an append created a store and a read
    answered from whatever store was there. ``--store`` given still wins over it."""
    import subprocess
    import sys

    import pithlog

    here = str(Path(pithlog.__file__).parents[1])  # this pithlog, from another folder
    store, _ = stored(signer, tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PITHLOG_STORE", "")
    keyring, events = str(signer["keyring"]), str(tmp_path / "events.jsonl")
    for argv in (["stats"], ["append", "--keyring", keyring, events]):
        status, out, err = run(argv)
        assert (status, out) == (2, b""), err
        assert err.startswith("pithlog: [usage.arguments] PITHLOG_STORE is empty"), err
        assert err.count("\n") == 1
    assert not (tmp_path / "pithlog-store").exists()
    assert run(["--store", store, "stats"])[0] == 0
    done = subprocess.run([sys.executable, "-m", "pithlog", "append", "--keyring", keyring,
                           events], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PITHLOG_STORE": "", "PYTHONPATH": here})  # fmt: skip
    assert done.returncode == 2 and "PITHLOG_STORE is empty" in done.stderr, done.stderr
    assert not (tmp_path / "pithlog-store").exists()


def test_help_texts(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, wanted in ((["stats", "--help"], "keyring digest"),
                         (["keygen", "--help"], "unique in the keyring"),
                         (["checkpoint", "--help"], "first N leaves"),
                         (["sync", "--help"], "export file"),
                         (["import", "--help"], "takes the file's word"),
                         (["append", "--help"], "takes the file's word")):  # fmt: skip
        status, out, _ = run(argv)
        assert status == 0 and wanted in " ".join(out.decode().split()), argv


@pytest.mark.parametrize(
    ("argv", "helps"),
    [
        (["append", "--keyring", "k", "--bogus", "e"], "pithlog append"),
        (["verify-state", "s", "extra"], "pithlog verify-state"),
        (["verify-proof", "p", "--keyring", "k", "1", "2", "--bogus"], "pithlog verify-proof"),
        (["keyring", "show", "k", "--bogus"], "pithlog keyring show"),
        (["prove", "inclusion", "e", "--bogus"], "pithlog prove inclusion"),
        (["--bogus", "stats"], "pithlog"),  # not an option of any command: pithlog's own
    ],
)  # fmt: skip
def test_an_unknown_argument_points_at_the_help_that_lists_the_options(
    argv: list[str], helps: str
) -> None:
    """An argument a subcommand does not know was refused by the top parser, pointing at
    'pithlog --help', which does not list the subcommand's options."""
    status, out, err = run(argv)
    assert (status, out) == (2, b"") and "[usage.arguments] unrecognized arguments" in err
    assert err.rstrip().endswith(f"(see '{helps} --help')"), err


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        # times: nan and inf parse as floats and reached the event loop's timers
        (["serve", "--key", "k", "--origin", "o", "--body-timeout", "nan"], "'nan': give seconds"),
        (["serve", "--key", "k", "--origin", "o", "--body-timeout", "inf"], "'inf': give seconds"),
        (["serve", "--key", "k", "--origin", "o", "--body-timeout", "0"], "'0': give seconds"),
        # each worker a process: 99999 started hundreds before LMDB's readers ran out
        (["serve", "--key", "k", "--origin", "o", "--workers", "99999"],
         "--workers must be from 1 to 4096"),
        (["mirror", "http://x", "--keyring", "k", "--follow", "nan"], "'nan': give seconds"),
        (["mirror", "http://x", "--keyring", "k", "--follow", "90000"], "at most 86,400"),
        # polled the origin thousands of times a second, for a checkpoint served for 2 s
        (["mirror", "http://x", "--keyring", "k", "--follow", "0.0001"],
         "'0.0001': give seconds of at least 1 and at most 86,400"),
        (["mirror", "http://x", "--keyring", "k", "--follow", "0.5"], "'0.5': give seconds"),
        (["mirror", "http://x", "--keyring", "k", "--follow", "0"], "of at least 1 and"),
        # a quorum of none, or below one, would publish checkpoints no witness cosigned
        (["serve", "--key", "k", "--origin", "o", "--witness-quorum", "1"],
         "--witness-quorum is between 1 and the number of --witness-url"),
        (["serve", "--key", "k", "--origin", "o", "--witness-url", "http://w",
          "--witness-keyring", "w", "--witness-quorum", "-3"],
         "--witness-quorum is between 1 and the number of --witness-url"),
        # options that would be ignored without their partner
        (["serve", "--key", "k", "--origin", "o", "--witness-keyring", "w"],
         "--witness-keyring names the keys of the witnesses given with --witness-url"),
        (["serve", "--key", "k", "--keyring", "k", "--witness", "--origin", "o"],
         "no --submit and no --origin"),
        (["checkpoint", "--key", "k", "--origin", "o", "--keyring", "k"],
         "--quorum and --keyring need --witness URL"),
        # the bounds of POST /submit, served only with --submit (POST /sync has its own)
        *[(["serve", "--key", "k", "--origin", "o", option, value],
           "--max-pending bound POST /submit: give them with --submit")
          for option, value in (("--max-body", "100"), ("--max-lines", "5"),
                                ("--body-timeout", "2"), ("--max-pending", "1"))],
        (["serve", "--key", "k", "--origin", "o", "--submit", "--keyring", "k",
          "--max-pending", "0"], "--max-body, --max-lines and --max-pending are positive"),
        (["checkpoint", "--key", "k", "--origin", "o", "--quorum", "1"],
         "--quorum and --keyring need --witness URL"),
        (["checkpoint", "--key", "k", "--origin", "o", "--witness", "http://w"],
         "--witness needs --keyring"),
        (["checkpoint", "--key", "k", "--origin", "o", "--witness", "http://w", "--keyring",
          "k", "--quorum", "0"], "--quorum is between 1 and the 1 --witness given"),
        # one witness given twice (a trailing slash) is one: a quorum of two is never met
        (["checkpoint", "--key", "k", "--origin", "o", "--witness", "http://w", "--witness",
          "http://w/", "--keyring", "k", "--quorum", "2"],
         "--quorum is between 1 and the 1 --witness given"),
        (["sync", "--from", "x", "--keyring", "k", "--max-copies", "-1"], "'-1': give 0 or more"),
        # more could be listed, but their order is asked in one message of at most 32 MiB
        (["sync", "--from", "x", "--keyring", "k", "--max-copies", "2097152"],
         "--max-copies can be at most 2097151"),
        (["sync", "--from", "x", "--keyring", "k", "--origin", "o"],
         "--origin is the origin --checkpoint must have"),
        (["reduce", "--keyring", "k", "--blocksize", "-5", "e"], "'-5': give 1 or more"),
        (["reduce", "--keyring", "k", "--blocksize", "4096", "e"],
         "--compare and --blocksize need --dask"),
        (["reduce", "--keyring", "k", "--dask", "local:1", "--progress", "e"],
         "--progress shows the input read here"),  # was ignored
        (["replay", "--keyring", "k", "--rebuild", "--jobs", "2"],
         "--rebuild without --verify does not replay"),  # --jobs was ignored
        (["--store", "", "stats"], "--store is empty"),  # not ./pithlog-store, silently
        # bytes the system could not decode: refused before they reach a JSON key file, a
        # keyring, a store's path (each raised UnicodeEncodeError before)
        (["keygen", "--key-id", "k\udcff", "--signer-id", "s", "--signer-type", "mirror",
          "--out", "k.key"], "argument 5 (k\\xff) is not UTF-8"),
        (["state", "--alias", "arxiv:\udcff"], "is not UTF-8"),
    ],
)  # fmt: skip
def test_option_values_and_pairs_are_refused_before_any_work(
    tmp_path: Path, argv: list[str], says: str
) -> None:
    status, out, err = run(["--store", str(tmp_path / "store"), *argv])
    assert (status, out) == (2, b"") and err.startswith("pithlog: [usage.arguments] "), err
    assert says in err and err.count("\n") == 1
    assert not (tmp_path / "store").exists()


def test_closed_or_full_standard_streams_are_one_line_each(
    signer: dict[str, Path], tmp_path: Path
) -> None:
    """A command started with standard output closed (``>&-``) or on a full disk
    (``/dev/full``), or reading a closed standard input, says so in one line with status
    2: before, each ended in a traceback (``sys.stdout`` is None, or ENOSPC at a write or
    at the interpreter's flush on exit)."""
    import subprocess
    import sys

    store, _ = stored(signer, tmp_path)
    pithlog = f"{sys.executable} -m pithlog --store {store}"
    keyring = signer["keyring"]
    cases = [
        (f"{pithlog} export >&-", "[usage.output] standard output cannot be written"),
        (f"{pithlog} export --with-seq >/dev/full", "No space left on device"),
        (f"{pithlog} stats >/dev/full", "No space left on device"),
        (f"{pithlog} append --keyring {keyring} - <&-", "[usage.unreadable] standard input"),
        (f"{pithlog} verify-state - <&-", "standard input is closed"),
        (f"{pithlog} append --keyring {keyring} {tmp_path / 'events.jsonl'} >/dev/full",
         "[usage.output_closed] standard output failed"),
        (f"{sys.executable} -m pithlog keygen --key-id k --signer-id s --signer-type mirror "
         f"--out {tmp_path / 'new.key'} >/dev/full", "the key file"),
    ]  # fmt: skip
    for command, says in cases:
        if "/dev/full" in command and not Path("/dev/full").is_char_device():
            continue  # not Linux: no such device
        done = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, (command, done.stderr)
        assert says in done.stderr and done.stderr.count("\n") == 1, (command, done.stderr)
    assert (tmp_path / "new.key").exists()  # written, and the error says so


def test_mirror_refuses_a_witness_quorum_of_nobody(tmp_path: Path) -> None:
    # --witness-key K --witness-quorum 0 required no cosignature at all: K was ignored
    keyring = tmp_path / "keyring.json"
    keyring.write_text(json.dumps({"keyring_version": "1",
                                   "keys": [test_key("mirror").keyring_entry()]}))  # fmt: skip
    base = ["--store", str(tmp_path / "store"), "mirror", "http://127.0.0.1:9/",
            "--keyring", str(keyring), "--witness-key", "test-mirror"]  # fmt: skip
    for quorum in ("0", "2"):
        status, out, err = run([*base, "--witness-quorum", quorum])
        assert (status, out) == (2, b"")
        assert "[usage.arguments] --witness-quorum is between 1" in err
    assert not (tmp_path / "store").exists()


def test_small_files_are_read_no_further_than_their_limit(
    signer: dict[str, Path], tmp_path: Path
) -> None:
    """A key file, a checkpoint, a payload or a keyring entry given an endless file (a
    mistyped path: an export, /dev/zero) is refused after its format's limit, as a keyring
    is: each was read whole first, until memory ran out (a MemoryError traceback)."""
    import resource
    import subprocess
    import sys

    store, _ = stored(signer, tmp_path)
    key, keyring = str(signer["key"]), str(signer["keyring"])
    cases = [
        (["sign", "--key", "/dev/zero", "--type", "correction", "--payload", "-"],
         "[key_file.not_json]"),
        (["sign", "--key", key, "--type", "correction", "--pith",
          "pith:2024:4F47WZKMWXPUQ7DX6KAARP5YKA", "--payload", "/dev/zero"], "[sign.payload]"),
        (["--store", store, "checkpoint", "--key", "/dev/zero", "--origin", "o"],
         "[key_file.not_json]"),
        (["verify-checkpoint", "--keyring", keyring, "/dev/zero"], "[checkpoint.malformed]"),
        (["keyring", "add", keyring, "/dev/zero"], "[keyring.not_an_entry]"),
    ]  # fmt: skip

    def little_memory() -> None:  # far less than an endless read takes
        resource.setrlimit(resource.RLIMIT_AS, (1536 << 20, 1536 << 20))

    for argv, says in cases:
        done = subprocess.run([sys.executable, "-m", "pithlog", *argv], capture_output=True,
                              text=True, timeout=60, preexec_fn=little_memory)  # fmt: skip
        assert done.returncode == 2, (argv, done.stderr[-500:])
        assert says in done.stderr and done.stderr.count("\n") == 1, (argv, done.stderr)


class _FailingInput(io.RawIOBase):
    """Standard input that opens fine and fails at its first read, as a failing disk or
    a hung-up terminal does."""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        raise OSError(errno.EIO, "Input/output error")


@pytest.mark.parametrize("command", ["reduce", "append", "import", "sync"])
def test_an_input_that_fails_as_it_is_read_is_one_line(
    command: str, signer: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BufferedReader(_FailingInput())))
    keyring = str(signer["keyring"])
    argv = {"reduce": ["reduce", "--keyring", keyring, "-"],
            "append": ["--store", str(tmp_path / "s"), "append", "--keyring", keyring, "-"],
            "import": ["--store", str(tmp_path / "s"), "import", "--keyring", keyring, "-"],
            "sync": ["--store", str(tmp_path / "s"), "sync", "--from", "-", "--keyring",
                     keyring]}[command]  # fmt: skip
    status, out, err = run(argv)
    assert (status, out) == (2, b""), err
    assert err == "pithlog: [usage.unreadable] reading standard input failed: Input/output error\n"


class _FullStderr(io.StringIO):
    """Standard error on a full disk."""

    def write(self, text: str) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("progress", [[], ["--progress"]])
def test_a_stderr_that_cannot_be_written_loses_only_the_diagnostics(
    progress: list[str], signer: dict[str, Path], tmp_path: Path
) -> None:
    """The refused line's message, the summary and the bar fail to be written: the state is
    printed all the same, with the status of the run (2: a line was refused)."""
    events = tmp_path / "events.jsonl"
    events.write_bytes(b"".join(sign_seed(signer)) + b"not json\n")
    status, states, _ = run(["reduce", *progress, "--keyring", str(signer["keyring"]),
                             str(events)])  # fmt: skip
    assert status == 2 and states.count(b"\n") == 1
    out = io.BytesIO()
    argv = ["reduce", *progress, "--keyring", str(signer["keyring"]), str(events)]
    assert main(argv, stdout=out, stderr=_FullStderr()) == 2
    assert out.getvalue() == states


def test_cli_doc_warns_that_keep_invalid_takes_the_file_s_word() -> None:
    """append|import --keep-invalid keeps what no signed log proves: docs/cli.md says so
    where it documents the option, as docs/transparency.md does."""
    text = (Path(__file__).parents[2] / "docs" / "cli.md").read_text(encoding="utf-8")
    section = text.split("## `pithlog --store DIR append|import", 1)[1].split("\n## ", 1)[0]
    assert "takes the file's word" in " ".join(section.split())
