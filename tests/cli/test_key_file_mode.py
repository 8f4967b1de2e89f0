"""A private key file that group or others may read or write is used with one warning line
on stderr, as OpenSSH and GnuPG warn (docs/cli.md, "Key files group or others may
read"): once per file per process, the command going on; a key read from standard input
or a pipe is not checked."""

from __future__ import annotations

import io
import json
import os
import random
import threading
from pathlib import Path

import pytest
from storeevents import g

from pithlog.cli import main, streams
from pithlog.store import Store
from pithlog.testing import test_key, test_keyring_entries, write_key_file

pytestmark = pytest.mark.skipif(os.name != "posix", reason="file modes are POSIX's")

ORIGIN = "registry.test.invalid/pith"
SEED = Path(__file__).resolve().parents[2] / "vectors" / "seeds" / "state-2411.00284.json"
CLI_DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
WARNING = next(line for line in CLI_DOC.read_text().splitlines()
               if line.startswith("pithlog: warning: key file ")).replace("FILE", "{path}")
"""The line docs/cli.md documents, its FILE to be filled in."""


def run(argv: list[str]) -> tuple[int, bytes, str]:
    out, err = io.BytesIO(), io.StringIO()
    status = main(argv, stdout=out, stderr=err)
    return status, out.getvalue(), err.getvalue()


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """No file warned about yet, as in a new process (another test's deleted key file may
    have left its inode to one of these)."""
    monkeypatch.setattr(streams, "_WARNED", set())


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    seed = json.loads(SEED.read_bytes())["current"]
    (tmp_path / "record.json").write_text(json.dumps(seed["record_created"]["payload"]))
    key = tmp_path / "reg.key"
    write_key_file(key, test_key("registry"))
    key.chmod(0o644)
    return {"key": key, "record": tmp_path / "record.json"}


def sign(key: str, payload: Path) -> list[str]:
    return ["sign", "--key", key, "--type", "record_created", "--payload", str(payload),
            "--created-at", "2026-07-05T09:31:31Z"]  # fmt: skip


def warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("pithlog: warning:")]


def test_a_0644_key_file_warns_once_with_the_documented_line(files: dict[str, Path]) -> None:
    status, out, err = run(sign(str(files["key"]), files["record"]))
    assert status == 0, err
    assert json.loads(out)["signer"]["key_id"] == "test-registry"  # it went on
    assert warnings(err) == [WARNING.format(path=files["key"])]
    # once per file per process: the same file used again says nothing more
    status, again, err = run(sign(str(files["key"]), files["record"]))
    assert (status, err) == (0, "")
    assert again == out


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620, 0o602, 0o660])
def test_group_or_others_reading_or_writing_warns(files: dict[str, Path], mode: int) -> None:
    files["key"].chmod(mode)
    status, _, err = run(sign(str(files["key"]), files["record"]))
    assert status == 0, err
    assert warnings(err) == [WARNING.format(path=files["key"]).replace("0644", f"{mode:04o}")]


@pytest.mark.parametrize("mode", [0o600, 0o400])
def test_a_private_key_file_says_nothing(files: dict[str, Path], mode: int) -> None:
    files["key"].chmod(mode)
    status, _, err = run(sign(str(files["key"]), files["record"]))
    assert (status, err) == (0, "")


def test_the_test_helper_writes_key_files_0600(tmp_path: Path) -> None:
    key = tmp_path / "k.key"
    write_key_file(key, test_key("registry"))
    assert key.stat().st_mode & 0o777 == 0o600


def test_a_key_on_standard_input_is_not_checked(
    files: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    with open(files["key"], "rb") as stdin:  # a 0644 file, given as standard input
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(stdin))
        status, out, err = run(sign("-", files["record"]))
    assert (status, err) == (0, "")
    assert json.loads(out)["signer"]["key_id"] == "test-registry"


def test_a_key_through_a_pipe_is_not_checked(files: dict[str, Path]) -> None:
    read, write = os.pipe()
    data = files["key"].read_bytes()

    def feed() -> None:
        with open(write, "wb") as pipe:
            pipe.write(data)

    feeder = threading.Thread(target=feed)
    feeder.start()
    try:
        status, _, err = run(sign(f"/dev/fd/{read}", files["record"]))
    finally:
        feeder.join(10)
        os.close(read)
    assert (status, err) == (0, "")


def test_a_file_that_is_no_key_file_is_refused_without_the_warning(tmp_path: Path) -> None:
    other = tmp_path / "keyring.json"
    other.write_text(json.dumps({"keyring_version": "1", "keys": []}))
    other.chmod(0o644)
    status, _, err = run(["sign", "--key", str(other), "--type", "record_created",
                          "--payload", str(other)])  # fmt: skip
    assert status == 2
    assert "key_file.version" in err
    assert warnings(err) == []


def test_keyring_add_of_a_0644_key_file_warns_and_of_an_entry_does_not(
    tmp_path: Path, files: dict[str, Path]
) -> None:
    keyring = tmp_path / "keyring.json"
    assert run(["keyring", "new", str(keyring)])[0] == 0
    status, _, err = run(["keyring", "add", str(keyring), str(files["key"])])
    assert status == 0, err
    assert warnings(err) == [WARNING.format(path=files["key"])]
    entry = tmp_path / "mirror.entry"  # public: its mode is nobody's business
    entry.write_text(json.dumps(test_key("mirror").keyring_entry()))
    entry.chmod(0o644)
    status, _, err = run(["keyring", "add", str(keyring), str(entry)])
    assert status == 0, err
    assert warnings(err) == []


def test_the_store_commands_that_sign_warn(tmp_path: Path, files: dict[str, Path]) -> None:
    events = [e for e in g.mixed_events(random.Random(8), piths=2, per_pith=4)
              if e["signer"]["key_id"] != "test-stranger"]  # fmt: skip
    store = str(tmp_path / "store")
    with Store.open(store) as s:
        s.append([g.encoded(e) for e in events], g.KEYRING, keep_invalid=True)
    keyring = tmp_path / "keyring.json"
    keyring.write_text(json.dumps({"keyring_version": "1", "keys": test_keyring_entries()}))
    line = WARNING.format(path=files["key"])
    for argv in (
        ["checkpoint", "--key", str(files["key"]), "--origin", ORIGIN],
        ["prove", "inclusion", events[0]["event_id"], "--key", str(files["key"]),
         "--origin", ORIGIN],
    ):  # fmt: skip
        streams._WARNED.clear()  # each as the first command of its process
        status, _, err = run(["--store", store, *argv])
        assert status == 0, err
        assert warnings(err) == [line], argv


def test_a_path_a_shell_would_split_is_quoted_in_the_line(tmp_path: Path) -> None:
    key = tmp_path / "my key.key"
    write_key_file(key, test_key("registry"))
    key.chmod(0o604)
    payload = tmp_path / "record.json"
    seed = json.loads(SEED.read_bytes())["current"]
    payload.write_text(json.dumps(seed["record_created"]["payload"]))
    status, _, err = run(sign(str(key), payload))
    assert status == 0, err
    quoted = f"'{key}'"
    assert warnings(err) == [WARNING.format(path=quoted).replace("0644", "0604")]
