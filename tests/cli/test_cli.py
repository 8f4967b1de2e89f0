"""The CLI, in-process through pithlog.cli.main(argv)."""

from __future__ import annotations

import errno
import io
import json
import os
import stat
from pathlib import Path

import pytest

from pithlog.cli import main
from pithlog.protocol.canonical import jcs
from pithlog.protocol.keys import dump_key_file, load_key_file
from pithlog.testing import test_key, write_key_file

ROOT = Path(__file__).resolve().parents[2]
SEED = ROOT / "vectors" / "seeds" / "state-2411.00284.json"


def run(argv: list[str], stdin: bytes | None = None,
        monkeypatch: pytest.MonkeyPatch | None = None) -> tuple[int, bytes, str]:  # fmt: skip
    out, err = io.BytesIO(), io.StringIO()
    if stdin is not None:
        assert monkeypatch is not None
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    status = main(argv, stdout=out, stderr=err)
    return status, out.getvalue(), err.getvalue()


@pytest.fixture
def signer(tmp_path: Path) -> dict[str, Path]:
    """A registry key file, a keyring trusting it, and the seed's two payloads."""
    key = test_key("registry")
    write_key_file(tmp_path / "reg.key", key)
    keyring = {"keyring_version": "1", "keys": [key.keyring_entry()]}
    (tmp_path / "keyring.json").write_text(json.dumps(keyring))
    seed = json.loads(SEED.read_bytes())["current"]
    (tmp_path / "record.json").write_text(json.dumps(seed["record_created"]["payload"]))
    (tmp_path / "snapshot.json").write_text(json.dumps(seed["graph_snapshots"][0]["payload"]))
    return {"key": tmp_path / "reg.key", "keyring": tmp_path / "keyring.json",
            "record": tmp_path / "record.json", "snapshot": tmp_path / "snapshot.json"}  # fmt: skip


def sign_seed(files: dict[str, Path]) -> list[bytes]:
    status, record, _ = run(["sign", "--key", str(files["key"]), "--type", "record_created",
                             "--payload", str(files["record"]),
                             "--created-at", "2026-07-05T09:31:31Z"])  # fmt: skip
    assert status == 0
    pith = json.loads(record)["pith_number"]
    status, snapshot, _ = run(["sign", "--key", str(files["key"]), "--type", "graph_snapshot",
                               "--pith", pith, "--payload", str(files["snapshot"]),
                               "--created-at", "2026-07-05T09:31:31Z"])  # fmt: skip
    assert status == 0
    return [record, snapshot]


def test_verify_state_accepts_the_seed() -> None:
    status, out, err = run(["verify-state", str(SEED)])
    assert status == 0, out
    assert out == b""
    assert "conforms" in err


def test_verify_state_rejects_a_changed_value(tmp_path: Path) -> None:
    changed = SEED.read_bytes().replace(b'"event_count":2', b'"event_count":3')
    (tmp_path / "s.json").write_bytes(changed)
    status, out, _ = run(["verify-state", str(tmp_path / "s.json")])
    assert status == 1
    rules = {line.split(":")[0] for line in out.decode().splitlines()}
    assert {"state_sha256", "counts"} <= rules


def test_verify_state_reads_no_further_than_max_bytes(tmp_path: Path) -> None:
    """verify-state read its file whole, however long (/dev/zero until memory ran out):
    it now reads no more than --max-bytes (256 MiB by default) and the trailing LF, and
    refuses a longer file before checking it."""
    seed = SEED.read_bytes()
    body = seed.removesuffix(b"\n")
    fits = str(len(body))
    assert run(["verify-state", "--max-bytes", fits, str(SEED)])[0] == 0
    (tmp_path / "s.json").write_bytes(body)
    assert run(["verify-state", "--max-bytes", fits, str(tmp_path / "s.json")])[0] == 0
    status, out, err = run(["verify-state", "--max-bytes", str(len(body) - 1), str(SEED)])
    assert (status, out) == (2, b"") and "[usage.state_too_large]" in err, err
    status, out, err = run(["verify-state", "/dev/zero"])  # read up to 256 MiB, no more
    assert (status, out) == (2, b"") and "longer than 268,435,456 bytes" in err, err


@pytest.mark.parametrize("limit", [str(1 << 62), str(1 << 63), "9" * 30])
def test_verify_state_takes_a_max_bytes_past_memory(limit: str) -> None:
    """A --max-bytes past what memory or an index holds was read(limit) at once, which
    allocates the limit first: a MemoryError or an OverflowError traceback, for the seed
    of a few kilobytes. Read a piece at a time, the seed conforms under any limit."""
    status, out, err = run(["verify-state", "--max-bytes", limit, str(SEED)])
    assert (status, out) == (0, b""), err
    assert "conforms" in err


def test_verify_state_not_json_is_a_failed_rule(tmp_path: Path) -> None:
    (tmp_path / "s.json").write_bytes(SEED.read_bytes()[:-1])
    status, out, _ = run(["verify-state", str(tmp_path / "s.json")])
    assert status == 1
    assert out.startswith(b"json: ")


def test_sign_then_reduce_gives_the_seed_shape(signer: dict[str, Path], tmp_path: Path) -> None:
    lines = sign_seed(signer)
    events = tmp_path / "events.jsonl"
    events.write_bytes(b"".join(lines))
    status, out, err = run(["reduce", "--keyring", str(signer["keyring"]), str(events)])
    assert status == 0, err
    assert out.endswith(b"\n") and out.count(b"\n") == 1
    state = json.loads(out)
    seed = json.loads(SEED.read_bytes())
    assert state["pith_number"] == seed["pith_number"]
    assert state["current"]["canonical_record"] == seed["current"]["canonical_record"]
    assert state["current"]["source_aliases"] == seed["current"]["source_aliases"]
    assert state["applied_event_ids"] == [json.loads(x)["event_id"] for x in lines]
    (tmp_path / "state.json").write_bytes(out)
    assert run(["verify-state", str(tmp_path / "state.json")])[0] == 0


def test_reduce_reports_refused_lines_and_still_reduces(
    signer: dict[str, Path], tmp_path: Path
) -> None:
    lines = sign_seed(signer)
    events = tmp_path / "events.jsonl"
    events.write_bytes(lines[0] + b'{"a":1,"a":2}\n' + b"  \t\r\n" + b"[1.5]\n" + lines[1])
    status, out, err = run(["reduce", "--keyring", str(signer["keyring"]), str(events)])
    assert status == 2
    assert out.count(b"\n") == 1
    assert json.loads(out)["event_count"] == 2
    assert "line 2: [door.duplicate_member]" in err
    assert "line 4: [door.number_form]" in err
    assert "line 3" not in err


class _Pipe:
    """Standard input that hands out its bytes only as asked, noting what has been said on
    stderr when each read is made."""

    def __init__(self, data: bytes, err: io.StringIO) -> None:
        self.data, self.at, self.err = data, 0, err
        self.said_at: list[tuple[int, int]] = []  # (bytes handed out, stderr lines)

    def read(self, size: int = -1) -> bytes:
        assert 0 < size <= 1 << 20, f"read({size}): the input is to be read in chunks"
        self.said_at.append((self.at, self.err.getvalue().count("\n")))
        chunk = self.data[self.at : self.at + size]
        self.at += len(chunk)
        return chunk


@pytest.mark.parametrize("cores", ["1", "2"])
def test_reduce_reads_its_input_as_it_goes(
    signer: dict[str, Path], monkeypatch: pytest.MonkeyPatch, cores: str
) -> None:
    """``reduce`` streams its input: refusals are said while the rest is still unread,
    so no more than a chunk of raw bytes is ever held (with helpers or without)."""
    monkeypatch.setenv("PITHLOG_CORES", cores)
    junk = b"".join(b'{"n":%d,"pad":"%s"}\n' % (n, b"x" * 300) for n in range(10_000))
    data = b"".join(sign_seed(signer)) + junk
    out, err = io.BytesIO(), io.StringIO()
    pipe = _Pipe(data, err)
    monkeypatch.setattr("sys.stdin", type("Stdin", (), {"buffer": pipe})())
    status = main(["reduce", "--keyring", str(signer["keyring"]), "-"], stdout=out, stderr=err)
    assert status == 2 and out.getvalue().count(b"\n") == 1
    assert err.getvalue().count("[door.") == 10_000
    assert pipe.at == len(data) > 3 << 20
    # when the last chunk was asked for, lines had been refused already
    last_full = max(i for i, (at, _) in enumerate(pipe.said_at) if at < len(data))
    assert pipe.said_at[last_full][1] > 0


def test_append_to_a_new_store_says_refusals_before_the_first_event_as_it_reads(
    signer: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new store is made only once a line passes the door. The refused lines before it
    were held until then (a million junk lines: 1.5 GB for 13.6 MB of input); they are
    now said as they are read, and the store made for the event after them."""
    junk = b"".join(b'{"n":%d,"pad":"%s"}\n' % (n, b"x" * 300) for n in range(10_000))
    data = junk + b"".join(sign_seed(signer))
    out, err = io.BytesIO(), io.StringIO()

    class Pipe:
        def __init__(self) -> None:
            self.at, self.said_at = 0, [0]

        def read(self, size: int = -1) -> bytes:
            assert 0 < size <= 1 << 20, f"read({size}): the input is to be read in chunks"
            self.said_at.append(out.getvalue().count(b"\n"))
            chunk = data[self.at : self.at + size]
            self.at += len(chunk)
            return chunk

    pipe = Pipe()
    monkeypatch.setattr("sys.stdin", type("Stdin", (), {"buffer": pipe})())
    store = tmp_path / "new-store"
    status = main(["--store", str(store), "append", "--keyring", str(signer["keyring"]), "-"],
                  stdout=out, stderr=err)  # fmt: skip
    assert status == 2, err.getvalue()
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [line["status"] for line in lines] == ["refused"] * 10_000 + ["stored"] * 2
    assert pipe.at == len(data) > 3 << 20
    # lines had been refused (and said) before the last chunks of the junk were read
    assert pipe.said_at[-2] > 0
    assert (store / "data.mdb").exists()


def test_reduce_reads_several_files_as_one_input_each_framed_alone(
    signer: dict[str, Path], tmp_path: Path
) -> None:
    lines = sign_seed(signer)
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_bytes(lines[0].rstrip(b"\n"))  # no final LF: its line ends with the file
    second.write_bytes(b"[1.5]\n" + lines[1])
    status, out, err = run(["reduce", "--keyring", str(signer["keyring"]), str(first),
                            str(second)])  # fmt: skip
    assert status == 2
    assert json.loads(out)["event_count"] == 2
    assert f"pithlog: {second}: line 1: [door.number_form]" in err
    assert "1 lines refused" in err


def test_reduce_options_that_need_dask_or_exclude_it(signer: dict[str, Path]) -> None:
    base = ["reduce", "--keyring", str(signer["keyring"]), "events.jsonl"]
    status, _, err = run([*base, "--compare", "published.jsonl"])
    assert status == 2 and "[usage.arguments] --compare and --blocksize need --dask" in err
    status, _, err = run([*base, "--jobs", "2", "--dask", "local:2"])
    assert status == 2 and "[usage.arguments] --jobs and --dask" in err


def test_reduce_splits_on_lf_only(signer: dict[str, Path], tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    record = json.loads(signer["record"].read_text())
    record["canonical_record"]["metadata"]["title"] = "a\u2028b\u2029c\u0085d"
    signer["record"].write_text(json.dumps(record))
    lines = sign_seed(signer)
    assert "\u2028".encode() in lines[0]
    status, out, err = run(["reduce", "--keyring", str(signer["keyring"]), "-"],
                           stdin=lines[0], monkeypatch=monkeypatch)  # fmt: skip
    assert status == 0, err
    assert "\u2028".encode() in out


def test_reduce_reports_pending(signer: dict[str, Path], tmp_path: Path) -> None:
    lines = sign_seed(signer)
    events = tmp_path / "events.jsonl"
    events.write_bytes(lines[1])  # a snapshot without its record
    status, out, err = run(["reduce", "--keyring", str(signer["keyring"]), str(events)])
    assert status == 0
    assert out == b""
    assert "pending: pith:2024:4F47WZKMWXPUQ7DX6KAARP5YKA" in err


def test_reduce_bad_keyring_is_one_line(signer: dict[str, Path], tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text('{"keyring_version": "2", "keys": []}')
    status, _, err = run(["reduce", "--keyring", str(tmp_path / "bad.json"), "-"])
    assert status == 2
    assert err.strip().splitlines() == [
        'pithlog: [keyring.version] keyring_version must be the string "1" (at /keyring_version)'
    ]


def test_missing_file_is_usage_error(tmp_path: Path) -> None:
    status, _, err = run(["verify-state", str(tmp_path / "nope.json")])
    assert status == 2
    assert "[usage.unreadable]" in err


def test_standard_input_given_twice_is_refused_before_anything_is_read(
    signer: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Standard input can be read once: ``cat keyring.json | pithlog append --keyring -``
    (FILE defaults to ``-``) read the keyring and then no events, and said "nothing to do"
    with status 0; ``reduce --keyring K - -`` reduced the input once and then nothing.
    Two arguments given as ``-`` are refused, naming them, before any is read."""
    keyring = signer["keyring"].read_bytes()
    store = str(tmp_path / "store")
    cases = [
        (["--store", store, "append", "--keyring", "-"], "--keyring and FILE"),
        (["--store", store, "import", "--keyring", "-", "-"], "--keyring and FILE"),
        (["reduce", "--keyring", str(signer["keyring"]), "-", "-"], "EVENTS twice"),
        (["--store", store, "sync", "--keyring", "-", "--from", "-"], "--keyring and --from"),
        (["sign", "--key", "-", "--type", "record_created", "--payload", "-"],
         "--key and --payload"),
        (["verify-proof", "--keyring", "-", "-"], "--keyring and PROOF"),
    ]  # fmt: skip
    for argv, named in cases:
        status, out, err = run(argv, stdin=keyring, monkeypatch=monkeypatch)
        assert (status, out) == (2, b""), (argv, err)
        assert err == (f"pithlog: [usage.arguments] {named}: - (standard input) can be "
                       "read once; give all but one of them as files\n"), err
    assert not Path(store).exists()
    # one - is standard input, as always
    events = b"".join(sign_seed(signer))
    status, out, _ = run(["reduce", "--keyring", str(signer["keyring"]), "-"], stdin=events,
                         monkeypatch=monkeypatch)  # fmt: skip
    assert status == 0 and out


def test_usage_errors_exit_2() -> None:
    status, _, err = run(["reduce"])
    assert status == 2
    assert "[usage.arguments]" in err
    assert run(["no-such-command"])[0] == 2


def test_help_and_version_go_to_the_commands_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(["--help"])
    assert status == 0 and "verify-state" in out.decode() and not err
    status, out, _ = run(["--version"])
    assert status == 0 and out.decode().startswith("pithlog ")
    status, out, _ = run(["append", "--help"])
    assert status == 0 and "--batch-size" in out.decode()
    assert capsys.readouterr().out == ""  # nothing on the process's own stdout


def test_keygen_writes_0600_and_prints_entry(tmp_path: Path) -> None:
    out_file = tmp_path / "k.key"
    status, out, _ = run(["keygen", "--key-id", "k1", "--signer-id", "s", "--signer-type",
                          "mirror", "--out", str(out_file)])  # fmt: skip
    assert status == 0
    assert stat.S_IMODE(out_file.stat().st_mode) == 0o600
    entry = json.loads(out)
    key = load_key_file(out_file.read_bytes())
    assert entry == key.keyring_entry()
    # An existing key file is never replaced by accident.
    before = out_file.read_bytes()
    status, _, err = run(["keygen", "--key-id", "k2", "--signer-id", "s", "--signer-type",
                          "mirror", "--out", str(out_file)])  # fmt: skip
    assert status == 2 and "[usage.exists]" in err
    assert out_file.read_bytes() == before


def test_keygen_hint_trusts_the_key_with_the_validity_it_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """keygen said ``trust it with: pithlog keyring add KEYRING k.key`` whatever its
    ``--not-before``/``--not-after``; a key file holds no validity, so that command
    trusted a key meant to expire for ever. The command it says, run as said, adds the
    entry it printed."""
    monkeypatch.chdir(tmp_path)
    status, out, err = run(["keygen", "--key-id", "k", "--signer-id", "s", "--signer-type",
                            "mirror", "--out", "k.key", "--not-before",
                            "2026-01-01T00:00:00Z", "--not-after",
                            "2027-01-01T00:00:00Z"])  # fmt: skip
    assert status == 0
    hint = err.strip().split("trust it with: ", 1)[1]
    words = hint.split()
    assert words[:4] == ["pithlog", "keyring", "add", "KEYRING"]
    assert run(["keyring", "new", "keyring.json"])[0] == 0
    assert run(["keyring", "add", "keyring.json", *words[4:]])[0] == 0
    keyring = json.loads((tmp_path / "keyring.json").read_bytes())
    assert keyring["keys"] == [json.loads(out)]


def test_keygen_out_dash_is_refused_not_a_file_that_keyring_add_dash_cannot_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``keygen --out -`` wrote the private key to a file named ``-`` and said to trust it
    with ``pithlog keyring add KEYRING -``, which reads standard input, not that file.
    ``-`` is refused (``./-`` names a file of that name), and nothing is written."""
    monkeypatch.chdir(tmp_path)
    argv = ["keygen", "--key-id", "k", "--signer-id", "s", "--signer-type", "mirror", "--out"]
    status, out, err = run([*argv, "-"])
    assert (status, out) == (2, b"")
    assert err == ("pithlog: [usage.arguments] --out is the key file to write, and - is "
                   "standard input elsewhere: give the key file's path (./- for a file "
                   "named -)\n")  # fmt: skip
    assert list(tmp_path.iterdir()) == []
    assert run([*argv, "./-"])[0] == 0 and (tmp_path / "-").exists()


def test_keygen_syncs_the_folder_after_naming_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append("folder" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    status, _, _ = run(["keygen", "--key-id", "k1", "--signer-id", "s", "--signer-type",
                        "mirror", "--out", str(tmp_path / "k.key")])  # fmt: skip
    assert status == 0
    # the key's bytes, then the name the rename gave it: a crash keeps both or neither
    assert synced == ["file", "folder"]


def test_keygen_keeps_a_key_file_made_while_it_wrote_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out_file = tmp_path / "k.key"
    other = dump_key_file(test_key("mirror"))  # another keygen's key, its entry printed
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        real_fsync(fd)
        if not out_file.exists():
            out_file.write_bytes(other)

    monkeypatch.setattr(os, "fsync", fsync)
    argv = ["keygen", "--key-id", "k1", "--signer-id", "s", "--signer-type", "mirror",
            "--out", str(out_file)]  # fmt: skip
    status, out, err = run(argv)
    assert status == 2 and "[usage.exists]" in err and out == b""
    assert out_file.read_bytes() == other
    assert sorted(os.listdir(tmp_path)) == ["k.key"]  # no temporary file left
    # a filesystem without hard links still gets its key file
    monkeypatch.setattr(os, "fsync", real_fsync)

    def no_links(src: object, dst: object, **names: object) -> None:
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    argv[-1] = str(tmp_path / "k2.key")
    status, out, _ = run(argv)
    assert status == 0 and json.loads(out) == load_key_file(
        (tmp_path / "k2.key").read_bytes()).keyring_entry()  # fmt: skip
    assert sorted(os.listdir(tmp_path)) == ["k.key", "k2.key"]


def test_sign_refuses_an_invalid_event(signer: dict[str, Path]) -> None:
    # A registry key may not sign author attestations (check 8).
    payload = signer["snapshot"].parent / "att.json"
    payload.write_text('{"statement": "I wrote it"}')
    argv = ["sign", "--key", str(signer["key"]), "--type", "author_attestation",
            "--pith", "pith:2024:4F47WZKMWXPUQ7DX6KAARP5YKA", "--target", "record",
            "--payload", str(payload), "--created-at", "2026-07-05T09:31:31Z"]  # fmt: skip
    status, out, err = run(argv)
    assert status == 2 and out == b""
    assert "[sign.invalid_event]" in err and "unauthorized_signer" in err
    status, out, _ = run([*argv, "--allow-invalid"])
    assert status == 0 and json.loads(out)["event_type"] == "author_attestation"


def test_sign_allow_invalid_prints_an_event_with_a_bad_target(signer: dict[str, Path]) -> None:
    """--allow-invalid prints an event that fails any of checks 1-12: one whose target the
    type does not allow (check 9) was refused with usage.target all the same."""
    payload = signer["snapshot"].parent / "fix.json"
    payload.write_text('{"correction_type": "erratum", "notice": "Fixed a typo."}')
    argv = ["sign", "--key", str(signer["key"]), "--type", "correction",
            "--pith", "pith:2024:4F47WZKMWXPUQ7DX6KAARP5YKA", "--target", "claim:c1",
            "--payload", str(payload), "--created-at", "2026-07-05T09:31:31Z"]  # fmt: skip
    status, out, err = run(argv)
    assert status == 2 and out == b"" and "[usage.target]" in err
    status, out, _ = run([*argv, "--allow-invalid"])
    assert status == 0 and json.loads(out)["target"] == "claim:c1"


def test_sign_record_created_derives_and_checks_pith(signer: dict[str, Path]) -> None:
    base = ["sign", "--key", str(signer["key"]), "--type", "record_created",
            "--payload", str(signer["record"]), "--created-at", "2026-07-05T09:31:31Z"]  # fmt: skip
    status, out, _ = run(base)
    event = json.loads(out)
    assert out == jcs(event) + b"\n"
    receipt = event["payload"]["receipt"]
    assert receipt["key_id"] == "test-registry"
    assert receipt["builder_version"] == "pith-number-builder-2026-05-17-v1"  # kept
    status, _, err = run([*base, "--pith", "pith:2024:AAAAAAAAAAAAAAAAAAAAAAAAAA"])
    assert status == 2 and "[sign.pith_number]" in err


def test_sign_rejects_bad_created_at(signer: dict[str, Path]) -> None:
    status, _, err = run(["sign", "--key", str(signer["key"]), "--type", "record_created",
                          "--payload", str(signer["record"]),
                          "--created-at", "2026-02-30T00:00:00Z"])  # fmt: skip
    assert status == 2 and "[usage.timestamp]" in err


def test_reduce_jobs_gives_the_output_of_one_process(tmp_path: Path) -> None:
    # The vector cases of one keyring in one input (states, pending piths, copies under
    # other piths): worker processes, each with a part of the piths, print the same bytes.
    keyring = ROOT / "vectors" / "cases" / "mixed-piths" / "keyring.json"
    cases = [c for c in sorted((ROOT / "vectors" / "cases").iterdir())
             if (c / "keyring.json").read_bytes() == keyring.read_bytes()]  # fmt: skip
    assert len(cases) >= 7
    events = tmp_path / "all.jsonl"
    events.write_bytes(b"".join((c / "events.jsonl").read_bytes() for c in cases) + b"[1]\n")
    one = run(["reduce", "--keyring", str(keyring), str(events)])
    assert one[0] == 2 and one[1].count(b"\n") >= 8, one[2]
    assert "pending: " in one[2] and "line " in one[2]
    assert run(["reduce", "--jobs", "3", "--keyring", str(keyring), str(events)]) == one


@pytest.mark.parametrize("jobs", ["0", "-3", "4097", "100000"])
def test_reduce_jobs_must_be_from_1_to_most_cores(signer: dict[str, Path], jobs: str) -> None:
    """Each job is a process: a count out of bounds is refused before any is started."""
    status, out, err = run(["reduce", "--jobs", jobs, "--keyring", str(signer["keyring"]), "-"])
    assert status == 2 and out == b""
    assert "--jobs must be from 1 to 4096" in err


def test_replay_help_says_how_many_processes_by_default() -> None:
    """The default of --jobs as replay_jobs computes it: the cap per copies, and another
    keyring counting as --verify."""
    status, out, _ = run(["replay", "--help"])
    text = " ".join(out.decode().split())
    assert status == 0
    assert "at most one per 2,500 copies" in text and "a keyring other than the store's" in text


def test_verify_state_help_names_the_rules_of_section_6_and_the_slots() -> None:
    """verify-state also runs the rules projections, slots and equivocations
    (docs/protocol.md, section 9): its --help listed only the rules it had before them, as
    if a state whose applied events break checks 8-10 and 14 were not looked at."""
    status, out, _ = run(["verify-state", "--help"])
    text = " ".join(out.decode().split())
    assert status == 0
    assert "the equivocations and their slots" in text
    assert "the checks of section 6" in text and "cannot be checked" in text


def test_reduce_help_says_every_difference_of_compare_fails_it() -> None:
    """--compare exits 1 on any line of its report (docs/distributed.md): its --help said
    only a state that differs or is missing did, as if a state published for a pending
    pith, a second line for one pith or an unreadable line passed."""
    status, out, _ = run(["reduce", "--help"])
    text = " ".join(out.decode().split())
    assert status == 0
    assert ("exit 1 when there is any: a state that differs, is missing or unexpected, a "
            "duplicate or an unreadable line") in text


def test_a_bar_shown_at_its_first_report_counts_its_rate_from_the_start() -> None:
    """A bar appears at its first report, often once a whole batch was committed: its rate
    counted from that moment was the batch over no time (22,724,876 pith/s for a rekey's
    re-reduction). It counts from when the work began."""
    import re
    import time

    from pithlog.cli.edge import Bar
    from pithlog.cli.streams import Out

    stderr = io.StringIO()
    out = Out(io.BytesIO(), stderr)
    bar = Bar(out, True, "work")
    time.sleep(0.2)  # the work: 100 piths in at least 0.2 s, so at most 500 a second
    bar(100, 100)
    bar.close()
    rates = [float(r) for r in re.findall(r"([0-9.]+)pith/s", stderr.getvalue())]
    assert rates and max(rates) <= 500, stderr.getvalue()
