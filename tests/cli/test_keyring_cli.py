"""``pithlog keyring``: building, editing and reading a keyring file without hand-written
JSON, and the messages for a keyring entry or a key file given where a keyring goes."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest

from pithlog.cli import keyring_commands
from pithlog.errors import KeyringError
from pithlog.protocol.canonical import MAX_LINE_BYTES
from pithlog.protocol.keys import load_keyring
from tests.cli.test_cli import run


def keygen(tmp_path: Path, key_id: str, signer_type: str = "pith_registry") -> tuple[Path, Path]:
    key = tmp_path / f"{key_id}.key"
    status, entry, _ = run(["keygen", "--key-id", key_id, "--signer-id", f"{key_id}.example",
                            "--signer-type", signer_type, "--out", str(key)])  # fmt: skip
    assert status == 0
    (tmp_path / f"{key_id}.entry").write_bytes(entry)
    return key, tmp_path / f"{key_id}.entry"


def test_new_add_revoke_show_digest(tmp_path: Path) -> None:
    k1, e1 = keygen(tmp_path, "reg-1")
    k2, _ = keygen(tmp_path, "mirror-1", "mirror")
    ring = str(tmp_path / "keyring.json")
    assert run(["keyring", "new", ring])[0] == 0
    assert load_keyring(Path(ring).read_bytes()) == {}
    assert run(["keyring", "new", ring])[0] == 2  # an existing file is kept
    assert run(["keyring", "add", ring, str(e1)])[0] == 0
    status, _, err = run(["keyring", "add", ring, str(k2), "--not-before",
                          "2026-01-01T00:00:00Z"])  # fmt: skip
    assert status == 0, err
    keyring = load_keyring(Path(ring).read_bytes())
    assert list(keyring) == ["reg-1", "mirror-1"]
    assert keyring["mirror-1"].not_before == "2026-01-01T00:00:00Z"
    assert "private_key_b64" not in Path(ring).read_text()  # only the public entry

    status, _, err = run(["keyring", "revoke", ring, "reg-1", "--at", "2026-06-01T00:00:00Z"])
    assert status == 0, err
    keyring = load_keyring(Path(ring).read_bytes())
    assert keyring["reg-1"].revoked_at == "2026-06-01T00:00:00Z"

    status, table, _ = run(["keyring", "show", ring])
    assert status == 0
    lines = table.decode().splitlines()
    assert lines[0].split() == ["KEY_ID", "SIGNER_ID", "SIGNER_TYPE", "VALIDITY", "FINGERPRINT"]
    assert lines[1].startswith("reg-1 ") and "revoked at 2026-06-01T00:00:00Z" in lines[1]
    assert keyring["reg-1"].fingerprint in lines[1]
    assert "mirror " in lines[2] and "2026-01-01T00:00:00Z .. -" in lines[2]

    status, digest, _ = run(["keyring", "digest", ring])
    assert status == 0 and digest.decode().strip() == keyring.digest
    assert k1.exists()


def test_add_refuses_duplicates_and_keeps_the_file(tmp_path: Path) -> None:
    k1, e1 = keygen(tmp_path, "reg-1")
    ring = tmp_path / "keyring.json"
    run(["keyring", "new", str(ring)])
    run(["keyring", "add", str(ring), str(e1)])
    before = ring.read_bytes()
    status, _, err = run(["keyring", "add", str(ring), str(k1)])  # same key_id, same key
    assert status == 2 and "[keyring.duplicate_key_id]" in err
    renamed = json.loads(e1.read_bytes())
    renamed["key_id"] = "reg-2"
    status, _, err = run(["keyring", "add", str(ring), json.dumps(renamed)])
    assert status == 2 and "[keyring.duplicate_public_key]" in err and "reg-1" in err
    assert ring.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_add_checks_the_entry_with_the_keyring_rules(tmp_path: Path) -> None:
    _, e1 = keygen(tmp_path, "reg-1")
    ring = tmp_path / "keyring.json"
    run(["keyring", "new", str(ring)])
    entry = json.loads(e1.read_bytes())
    entry["signer_type"] = "publisher"
    status, _, err = run(["keyring", "add", str(ring), json.dumps(entry)])
    assert status == 2 and "[keyring.signer_type]" in err
    status, _, err = run(["keyring", "add", str(ring), str(ring)])
    assert status == 2 and "[keyring.not_an_entry]" in err and "whole keyring" in err
    status, _, err = run(["keyring", "add", str(ring), str(e1), "--not-after", "soon"])
    assert status == 2 and "[usage.timestamp]" in err
    assert load_keyring(ring.read_bytes()) == {}


def test_revoke_unknown_and_later_revocations_are_refused(tmp_path: Path) -> None:
    _, e1 = keygen(tmp_path, "reg-1")
    ring = str(tmp_path / "keyring.json")
    run(["keyring", "new", ring])
    run(["keyring", "add", ring, str(e1)])
    status, _, err = run(["keyring", "revoke", ring, "reg-9", "--at", "2026-06-01T00:00:00Z"])
    assert status == 2 and "[keyring.unknown_key_id]" in err and "reg-1" in err
    assert run(["keyring", "revoke", ring, "reg-1", "--at", "2026-06-01T00:00:00Z"])[0] == 0
    status, _, err = run(["keyring", "revoke", ring, "reg-1", "--at", "2026-07-01T00:00:00Z"])
    assert status == 2 and "[keyring.revoked]" in err
    assert run(["keyring", "revoke", ring, "reg-1", "--at", "2026-05-01T00:00:00Z"])[0] == 0
    assert load_keyring(Path(ring).read_bytes())["reg-1"].revoked_at == "2026-05-01T00:00:00Z"


def test_an_entry_or_a_key_file_where_a_keyring_goes_says_so(tmp_path: Path) -> None:
    key, entry = keygen(tmp_path, "reg-1")
    events = tmp_path / "none.jsonl"
    events.write_bytes(b"")
    status, _, err = run(["reduce", "--keyring", str(entry), str(events)])
    assert status == 2
    assert "[keyring.not_a_keyring]" in err and "one keyring entry" in err
    status, _, err = run(["reduce", "--keyring", str(key), str(events)])
    assert status == 2
    assert "[keyring.not_a_keyring]" in err and "private key file" in err


def test_a_failed_write_leaves_the_old_keyring(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, e1 = keygen(tmp_path, "reg-1")
    ring = tmp_path / "keyring.json"
    run(["keyring", "new", str(ring)])
    before = ring.read_bytes()

    def broken(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(keyring_commands.os, "fsync", broken)
    status, _, err = run(["keyring", "add", str(ring), str(e1)])
    assert status == 2 and "[keyring.unwritable]" in err
    assert ring.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == sorted(["keyring.json", "reg-1.key", "reg-1.entry"])



def test_an_interrupted_write_leaves_the_old_keyring_and_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C (or SIGTERM, raised as an interrupt) while the new keyring is synced: the old
    one stays, and so does no copy beside it; the temporary file was removed only when the
    write failed with an OSError, so an interrupt left a hidden ``.keyring.json.tmp-PID``
    behind each time."""
    _, e1 = keygen(tmp_path, "reg-1")
    ring = tmp_path / "keyring.json"
    run(["keyring", "new", str(ring)])
    before = ring.read_bytes()

    def interrupted(fd: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(keyring_commands.os, "fsync", interrupted)
    status, _, err = run(["keyring", "add", str(ring), str(e1)])
    assert status == 130 and err.splitlines()[-1] == "pithlog: interrupted"
    assert ring.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == sorted(["keyring.json", "reg-1.key", "reg-1.entry"])


class Endless:
    """A file or standard input that never ends (as ``--keyring /dev/zero`` would be): it
    gives what is asked, and refuses to be read whole."""

    def __init__(self) -> None:
        self.given = 0

    def __enter__(self) -> Endless:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def read(self, size: int = -1) -> bytes:
        assert size >= 0, "read whole"
        self.given += size
        return b" " * size


def test_a_huge_keyring_is_refused_without_being_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    endless = Endless()
    monkeypatch.setattr("sys.stdin", type("Stdin", (), {"buffer": endless})())
    for argv in (["keyring", "show", "-"],
                 ["--store", str(tmp_path / "s"), "replay", "--keyring", "-"]):  # fmt: skip
        endless.given = 0
        status, _, err = run(argv)
        assert status == 2
        assert err.strip() == (f"pithlog: [keyring.not_json] keyring file: - is longer than "
                               f"the {MAX_LINE_BYTES} bytes allowed")  # fmt: skip
        assert endless.given == MAX_LINE_BYTES + 1


def test_an_edit_keeps_the_keyring_mode_whatever_the_umask(tmp_path: Path) -> None:
    _, entry = keygen(tmp_path, "reg-1")
    ring = tmp_path / "keyring.json"
    assert run(["keyring", "new", str(ring)])[0] == 0
    ring.chmod(0o664)  # a keyring its group edits
    umask = os.umask(0o022)
    try:
        assert run(["keyring", "add", str(ring), str(entry)])[0] == 0
    finally:
        os.umask(umask)
    assert ring.stat().st_mode & 0o777 == 0o664


def test_an_edit_through_a_symlink_edits_the_keyring_it_points_at(tmp_path: Path) -> None:
    _, entry = keygen(tmp_path, "reg-1")
    real = tmp_path / "keyrings" / "current.json"
    real.parent.mkdir()
    assert run(["keyring", "new", str(real)])[0] == 0
    link = tmp_path / "keyring.json"
    link.symlink_to(real)
    assert run(["keyring", "add", str(link), str(entry)])[0] == 0
    assert link.is_symlink()
    assert list(load_keyring(real.read_bytes())) == ["reg-1"]


def test_an_edit_that_would_make_the_keyring_too_long_is_refused(tmp_path: Path) -> None:
    _, entry = keygen(tmp_path, "reg-1")
    ring = tmp_path / "keyring.json"
    # a keyring just under the limit, its bulk in a member the spec ignores
    doc = {"keyring_version": "1", "keys": [], "note": ""}
    doc["note"] = "x" * (MAX_LINE_BYTES - len(keyring_commands.render_keyring(doc)))
    before = keyring_commands.render_keyring(doc)
    assert len(before) == MAX_LINE_BYTES
    ring.write_bytes(before)
    assert run(["keyring", "show", str(ring)])[0] == 0
    status, _, err = run(["keyring", "add", str(ring), str(entry)])
    assert status == 2 and "[keyring.too_large]" in err and len(err.splitlines()) == 1
    assert ring.read_bytes() == before
    assert run(["keyring", "show", str(ring)])[0] == 0


def test_a_key_id_with_a_line_break_or_an_escape_is_shown_escaped(tmp_path: Path) -> None:
    _, entry = keygen(tmp_path, "reg-1")
    doc = json.loads(entry.read_bytes())
    # an entry whose key_id, printed as it is, would draw a row for a key not there
    doc["key_id"] = "a\nfake-1  fake.example  pith_registry  - .. -  00\x1b[31m"
    doc["signer_id"] = "s\u2028t"
    ring = tmp_path / "keyring.json"
    assert run(["keyring", "new", str(ring)])[0] == 0
    status, _, err = run(["keyring", "add", str(ring), json.dumps(doc)])
    assert status == 0 and len(err.splitlines()) == 1 and "\x1b" not in err
    assert "a\\u000afake-1" in err and "s\\u2028t" in err
    status, out, _ = run(["keyring", "show", str(ring)])
    assert status == 0
    assert len(out.decode().split("\n")) == 3 and b"\x1b" not in out  # header, one key, end
    status, _, err = run(["keyring", "revoke", str(ring), "nobody", "--at",
                          "2026-01-01T00:00:00Z"])  # fmt: skip
    assert status == 2 and err.count("\n") == 1 and "\x1b" not in err


def test_an_error_quoting_a_huge_value_is_still_a_short_line(tmp_path: Path) -> None:
    """A message may quote what a stranger sent: a keyring entry's signer_type of 3 MB was
    printed whole, a one-line error of 3 MB. The message keeps its first MAX_MESSAGE
    characters and counts the rest."""
    from pithlog.errors import MAX_MESSAGE

    _, e1 = keygen(tmp_path, "reg-1")
    ring = tmp_path / "keyring.json"
    run(["keyring", "new", str(ring)])
    entry = json.loads(e1.read_bytes())
    entry["signer_type"] = "p" * 3_000_000
    big = tmp_path / "entry.json"
    big.write_text(json.dumps(entry))
    status, _, err = run(["keyring", "add", str(ring), str(big)])
    assert status == 2 and err.startswith("pithlog: [keyring.signer_type] ")
    assert err.count("\n") == 1 and len(err) < MAX_MESSAGE + 200
    assert "characters cut)" in err
    # the end of the message is kept: where a message says what to do or names its file
    from pithlog.protocol.keys import SIGNER_TYPES

    assert "is not one of " + ", ".join(sorted(SIGNER_TYPES)) in err


def test_an_edit_of_keyring_dash_is_refused_not_read_from_stdin_and_written_to_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``-`` is standard input wherever pithlog reads a file: ``keyring add - ENTRY`` read
    the keyring from standard input and wrote the result over a file named ``-`` (the one
    ``keyring new -`` had made), whatever that file held. An edit needs a file to write:
    ``-`` is refused (``./-`` names a file of that name), and nothing is written."""
    _, entry = keygen(tmp_path, "reg-1")
    monkeypatch.chdir(tmp_path)
    other = tmp_path / "other.json"
    assert run(["keyring", "new", str(other)])[0] == 0
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(other.read_bytes())))
    for argv in (["keyring", "new", "-"], ["keyring", "add", "-", str(entry)],
                 ["keyring", "revoke", "-", "reg-1", "--at", "2026-01-01T00:00:00Z"]):
        status, out, err = run(argv)
        assert (status, out) == (2, b""), err
        assert err == ("pithlog: [usage.arguments] KEYRING is the file the edit is written "
                       "to, and - is standard input: give the keyring's path (./- for a "
                       "file named -)\n"), err  # fmt: skip
        assert not (tmp_path / "-").exists()
    assert run(["keyring", "new", "./-"])[0] == 0  # a file named -, by its path
    assert run(["keyring", "add", "./-", str(entry)])[0] == 0
    assert list(load_keyring((tmp_path / "-").read_bytes())) == ["reg-1"]


def test_an_edit_of_exactly_the_limit_is_written(tmp_path: Path) -> None:
    ring = tmp_path / "keyring.json"
    doc = {"keyring_version": "1", "keys": [], "note": ""}
    doc["note"] = "x" * (MAX_LINE_BYTES - len(keyring_commands.render_keyring(doc)))
    keyring_commands.write_keyring(ring, doc)  # what --keyring reads: 8 MiB and no more
    assert len(ring.read_bytes()) == MAX_LINE_BYTES
    assert run(["keyring", "show", str(ring)])[0] == 0
    doc["note"] += "x"
    with pytest.raises(KeyringError, match="too_large"):
        keyring_commands.write_keyring(ring, doc)
    assert len(ring.read_bytes()) == MAX_LINE_BYTES


def test_an_entry_given_inline_may_start_with_spaces(tmp_path: Path) -> None:
    # `keyring add K "$(cat entry.json)"` of a file beginning with a newline or spaces
    _, entry = keygen(tmp_path, "reg-1")
    ring = str(tmp_path / "keyring.json")
    assert run(["keyring", "new", ring])[0] == 0
    status, _, err = run(["keyring", "add", ring, "\n  " + entry.read_text()])
    assert status == 0, err
    assert list(load_keyring(Path(ring).read_bytes())) == ["reg-1"]


def test_keyring_new_force_replaces_a_file_only(tmp_path: Path) -> None:
    """keyring new --force renamed the new keyring over whatever had the name: a FIFO,
    or a device such as /dev/null (as root), became a keyring file. It now replaces a file
    only, through a symbolic link as well."""
    fifo = tmp_path / "k.fifo"
    os.mkfifo(fifo)
    (tmp_path / "link.json").symlink_to(fifo)
    for name in ("k.fifo", "link.json"):
        status, out, err = run(["keyring", "new", "--force", str(tmp_path / name)])
        assert (status, out) == (2, b"") and "[keyring.unwritable]" in err, err
        assert "a FIFO" in err
    assert fifo.is_fifo() and (tmp_path / "link.json").is_symlink()
    assert sorted(os.listdir(tmp_path)) == ["k.fifo", "link.json"]


def test_an_entry_holding_a_private_key_is_refused_not_copied_into_the_keyring(
    tmp_path: Path,
) -> None:
    """A keyring is public (mode 0644, handed to every verifier): an entry that carries the
    key file's private_key_b64 beside the seven members (a key file and its entry merged
    by hand) must not put the private key in it, as a member the spec ignores."""
    key, e1 = keygen(tmp_path, "reg-1")
    ring = tmp_path / "keyring.json"
    run(["keyring", "new", str(ring)])
    before = ring.read_bytes()
    entry = json.loads(e1.read_bytes())
    private = json.loads(key.read_bytes())["private_key_b64"]
    entry["private_key_b64"] = private
    status, _, err = run(["keyring", "add", str(ring), json.dumps(entry)])
    assert status == 2 and "[keyring.not_an_entry]" in err and "private" in err
    assert len(err.strip().splitlines()) == 1 and private not in err
    assert ring.read_bytes() == before
    assert run(["keyring", "add", str(ring), str(key)])[0] == 0  # the key file itself: fine
    assert private not in ring.read_text()


def test_a_revocation_names_the_other_key_ids_of_the_same_public_key(tmp_path: Path) -> None:
    """Spec 3 lets a hand-written keyring trust one public key under two key_ids (``add``
    refuses it); an event names its key_id, so revoking one name leaves the key signing
    validly under the other: the revocation says so, by name, instead of only that the
    key is valid before TS."""
    _, e1 = keygen(tmp_path, "reg-1")
    entry = json.loads(e1.read_bytes())
    alias = {**entry, "key_id": "reg-1-alias", "signer_type": "mirror"}
    ring = tmp_path / "keyring.json"
    ring.write_text(json.dumps({"keyring_version": "1", "keys": [entry, alias]}))
    status, _, err = run(["keyring", "revoke", str(ring), "reg-1", "--at",
                          "2026-06-01T00:00:00Z"])  # fmt: skip
    assert status == 0, err
    keyring = load_keyring(ring.read_bytes())
    assert keyring["reg-1"].revoked_at == "2026-06-01T00:00:00Z"
    assert keyring["reg-1-alias"].revoked_at is None
    warned = [line for line in err.splitlines() if "reg-1-alias" in line]
    assert len(warned) == 1 and "same public key" in warned[0]
    # once every name is revoked, nothing is left to warn about
    status, _, err = run(["keyring", "revoke", str(ring), "reg-1-alias", "--at",
                          "2026-06-01T00:00:00Z"])  # fmt: skip
    assert status == 0 and "same public key" not in err
