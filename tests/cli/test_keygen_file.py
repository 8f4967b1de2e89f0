"""How ``pithlog keygen --out F`` names the key file: on Linux through an unnamed
``O_TMPFILE`` file linked in place, so no moment exists when a second copy of the private
key has a name; elsewhere (or where the filesystem or /proc refuses) through a named
temporary file, as before."""

from __future__ import annotations

import errno
import io
import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pithlog.cli import main
from pithlog.protocol.keys import load_key_file

ROOT = Path(__file__).resolve().parents[2]
ARGV = ["keygen", "--key-id", "k1", "--signer-id", "s", "--signer-type", "mirror", "--out"]

# SIGKILLs the process the moment the key file has its name, before any clean-up runs
KILLED_AT_LINK = """
import os, signal, sys
real_link = os.link
def link(*args, **kwargs):
    real_link(*args, **kwargs)
    if os.path.basename(str(args[1])) == "k.key":
        os.kill(os.getpid(), signal.SIGKILL)
os.link = link
from pithlog.cli import main
sys.exit(main(sys.argv[1:]))
"""


def run(argv: list[str]) -> tuple[int, bytes, str]:
    out, err = io.BytesIO(), io.StringIO()
    status = main(argv, stdout=out, stderr=err)
    return status, out.getvalue(), err.getvalue()


@pytest.mark.skipif(not hasattr(os, "O_TMPFILE"), reason="O_TMPFILE is Linux's")
def test_a_kill_when_the_key_is_named_leaves_no_second_copy(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.run([sys.executable, "-c", KILLED_AT_LINK, *ARGV,
                            str(tmp_path / "k.key")], env=env, capture_output=True,
                           timeout=60, check=False)  # fmt: skip
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert sorted(os.listdir(tmp_path)) == ["k.key"]
    load_key_file((tmp_path / "k.key").read_bytes())
    assert stat.S_IMODE((tmp_path / "k.key").stat().st_mode) == 0o600


def _check_written(tmp_path: Path, name: str, out: bytes) -> None:
    key_file = tmp_path / name
    assert json.loads(out) == load_key_file(key_file.read_bytes()).keyring_entry()
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600


def test_without_o_tmpfile_a_named_temporary_file_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_open = os.open
    tmpfile = getattr(os, "O_TMPFILE", 0)
    opened: list[str] = []

    def no_tmpfile(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if tmpfile and flags & tmpfile == tmpfile:
            raise OSError(errno.EOPNOTSUPP, "Operation not supported")
        opened.append(os.path.basename(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", no_tmpfile)
    status, out, _ = run([*ARGV, str(tmp_path / "k.key")])
    assert status == 0
    _check_written(tmp_path, "k.key", out)
    assert any(name.startswith(".k.key.tmp-") for name in opened)
    assert sorted(os.listdir(tmp_path)) == ["k.key"]
    # --force replaces through the same way
    status, out, _ = run([*ARGV, str(tmp_path / "k.key"), "--force"])
    assert status == 0
    _check_written(tmp_path, "k.key", out)
    assert sorted(os.listdir(tmp_path)) == ["k.key"]


@pytest.mark.skipif(not hasattr(os, "O_TMPFILE"), reason="O_TMPFILE is Linux's")
def test_without_proc_a_named_temporary_file_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_link = os.link
    linked: list[str] = []

    def no_proc(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        if str(src).startswith("/proc/"):
            raise FileNotFoundError(errno.ENOENT, "No such file or directory")
        linked.append(os.path.basename(src))
        real_link(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "link", no_proc)
    status, out, _ = run([*ARGV, str(tmp_path / "k.key")])
    assert status == 0
    _check_written(tmp_path, "k.key", out)
    assert linked and linked[0].startswith(".k.key.tmp-")
    assert sorted(os.listdir(tmp_path)) == ["k.key"]


def test_force_replaces_and_a_taken_name_is_kept(tmp_path: Path) -> None:
    key_file = tmp_path / "k.key"
    assert run([*ARGV, str(key_file)])[0] == 0
    before = key_file.read_bytes()
    status, _, err = run([*ARGV, str(key_file)])
    assert status == 2 and "[usage.exists]" in err and key_file.read_bytes() == before
    status, out, _ = run([*ARGV, str(key_file), "--force"])
    assert status == 0 and key_file.read_bytes() != before
    _check_written(tmp_path, "k.key", out)
    assert sorted(os.listdir(tmp_path)) == ["k.key"]


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_force_replaces_a_file_only(tmp_path: Path, kind: str) -> None:
    """--force renamed the new key file over whatever had the name: a FIFO, or a device
    such as /dev/null (as root), became a key file. It now replaces a file only."""
    target = tmp_path / "k.key"
    if kind == "fifo":
        os.mkfifo(target)
    else:
        target.mkdir()
    status, out, err = run([*ARGV, str(target), "--force"])
    assert (status, out) == (2, b"") and "[key_file.unwritable]" in err, err
    assert len(err.splitlines()) == 1
    mode = os.stat(target).st_mode
    assert stat.S_ISFIFO(mode) if kind == "fifo" else stat.S_ISDIR(mode)
    assert sorted(os.listdir(tmp_path)) == ["k.key"]


def _dead_pid() -> int:
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    return int(child.stdout)


@pytest.mark.parametrize("command", ["keygen", "keyring"])
def test_hidden_leftovers_of_a_killed_write_are_removed_by_the_next(
    tmp_path: Path, command: str
) -> None:
    """A write killed between naming its hidden temporary file and renaming it (keygen
    --force: a private key) leaves ``.NAME.tmp-PID``, which a rerun, with another PID,
    never met: the next write of the path removes such files of processes that are gone,
    and keeps those of a live process (a write under way) and anything not a regular file."""
    name = "k.key" if command == "keygen" else "keyring.json"
    dead = tmp_path / f".{name}.tmp-{_dead_pid()}"
    dead.write_bytes(b"a private key")
    live = tmp_path / f".{name}.tmp-{os.getppid()}"
    live.write_bytes(b"a write under way")
    (tmp_path / f".{name}.tmp-1234567").mkdir()
    other = tmp_path / f".other.tmp-{_dead_pid()}"
    other.write_bytes(b"another file's")
    if command == "keygen":
        (tmp_path / name).write_bytes(b"old key")
        status, _, err = run([*ARGV, str(tmp_path / name), "--force"])
    else:
        (tmp_path / name).write_text(json.dumps({"keyring_version": "1", "keys": []}))
        entry = run([*ARGV, str(tmp_path / "new.key")])[1]
        status, _, err = run(["keyring", "add", str(tmp_path / name), entry.decode()])
    assert status == 0, err
    assert not dead.exists()
    assert live.exists() and other.exists() and (tmp_path / f".{name}.tmp-1234567").is_dir()


@pytest.mark.parametrize("unnamed", [True, False])
def test_the_key_file_is_created_0600_never_narrowed_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unnamed: bool
) -> None:
    """Under umask 0 (which would leave a file created 0644 readable by all), the key file
    is created with mode 0600 by the open itself, through O_TMPFILE or a named temporary
    file, and no chmod of any kind runs: no moment exists when another user could open it."""
    real_open = os.open
    tmpfile = getattr(os, "O_TMPFILE", 0)
    created: list[int] = []

    def watched(path: Any, flags: int, mode: int = 0o777, *args: Any, **kwargs: Any) -> int:
        if tmpfile and flags & tmpfile == tmpfile and not unnamed:
            raise OSError(errno.EOPNOTSUPP, "Operation not supported")
        if flags & os.O_CREAT or (tmpfile and flags & tmpfile == tmpfile):
            created.append(mode)
        return real_open(path, flags, mode, *args, **kwargs)

    def no_chmod(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a key file's mode is set when it is created, not after")

    monkeypatch.setattr(os, "open", watched)
    for name in ("chmod", "fchmod", "lchmod"):
        monkeypatch.setattr(os, name, no_chmod, raising=False)
    monkeypatch.setattr(Path, "chmod", no_chmod)
    old = os.umask(0)
    try:
        status, out, err = run([*ARGV, str(tmp_path / "k.key"), "--force"])
    finally:
        os.umask(old)
    assert status == 0, err
    assert created == [0o600]
    _check_written(tmp_path, "k.key", out)
