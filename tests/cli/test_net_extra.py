"""pithlog installed without the ``pithlog[net]`` extra: every command that needs HTTP fails
with one line naming the extra, and the rest of the CLI works."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from pithlog.cli import main
from pithlog.testing import test_key, test_keyring_entries, write_key_file

NET = ("httpx", "httpcore", "uvicorn", "starlette", "starlette_compress", "jinja2",
       "httptools", "uvloop")  # fmt: skip
"""Top-level packages that come with the extra."""

WITHOUT_NET = (
    "import sys\n"
    f"for name in {NET!r}:\n"
    "    sys.modules[name] = None  # import NAME fails, as where it is not installed\n"
    "from pithlog.cli import entry\n"
    "sys.argv[0] = 'pithlog'\n"
    "entry()\n"
)
"""``python -c``: the console script of pithlog installed without ``pithlog[net]``."""


def run(argv: list[str]) -> tuple[int, bytes, str]:
    out, err = io.BytesIO(), io.StringIO()
    status = main(argv, stdout=out, stderr=err)
    return status, out.getvalue(), err.getvalue()


def run_without_net(argv: list[str]) -> tuple[int, bytes, str]:
    """``pithlog ARGV`` in a process of its own, where the extra cannot be imported."""
    done = subprocess.run([sys.executable, "-c", WITHOUT_NET, *argv], capture_output=True,
                          timeout=60, check=False)  # fmt: skip
    return done.returncode, done.stdout, done.stderr.decode()


ORIGIN = "registry.test.invalid/pith"
SEED = Path(__file__).parents[2] / "vectors" / "cases" / "seed-2411.00284"


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    keyring = tmp_path / "keyring.json"
    keyring.write_text(json.dumps({"keyring_version": "1", "keys": test_keyring_entries()}))
    key = tmp_path / "registry.key"
    write_key_file(key, test_key("registry"))
    store = str(tmp_path / "store")
    status, _, err = run(["--store", store, "append", "--keyring", str(SEED / "keyring.json"),
                          str(SEED / "events.jsonl")])  # fmt: skip
    assert status == 0, err
    return {"keyring": str(keyring), "key": str(key), "store": store}


COMMANDS = {
    "serve": ["serve", "--key", "{key}", "--origin", ORIGIN, "--listen", "127.0.0.1:0"],
    "mirror": ["mirror", "http://127.0.0.1:9", "--keyring", "{keyring}"],
    "audit": ["audit", "http://127.0.0.1:9", "--keyring", "{keyring}"],
    "sync": ["sync", "--from", "http://127.0.0.1:9", "--keyring", "{keyring}"],
    "checkpoint": ["checkpoint", "--key", "{key}", "--origin", ORIGIN,
                   "--witness", "http://127.0.0.1:9", "--keyring", "{keyring}"],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_command_needing_http_names_the_extra(files: dict[str, str], command: str) -> None:
    argv = ["--store", files["store"], *(a.format(**files) for a in COMMANDS[command])]
    status, out, err = run_without_net(argv)
    assert (status, out) == (2, b"")
    assert err.count("\n") == 1 and "pithlog[net]" in err, err
    assert err.startswith("pithlog: [usage.net_extra] "), err


def test_the_rest_works_without_the_extra(files: dict[str, str]) -> None:
    status, out, err = run_without_net(["--store", files["store"], "checkpoint", "--key",
                                        files["key"], "--origin", ORIGIN])  # fmt: skip
    assert status == 0, err
    assert out.startswith(ORIGIN.encode() + b"\n2\n")
