"""README.md's first commands run as written, and its Python examples on the files those
commands make (``keyring.json``, ``events.jsonl``) in the folder they are run in."""

from __future__ import annotations

import io
import re
import shlex
from pathlib import Path

import pytest

from pithlog.cli import main

ROOT = Path(__file__).resolve().parents[2]


def run(argv: list[str]) -> bytes:
    out = io.BytesIO()
    assert main(argv, stdout=out, stderr=io.StringIO()) == 0, argv
    return out.getvalue()


# A word of capitals (PITH, EVENT_ID, N) stands for a value: such a line is not run.
PLACEHOLDER = re.compile(r"\b[A-Z][A-Z_]*\b")


def commands() -> list[str]:
    """The lines of README's command block before its Dask part (that needs a cluster,
    the rest a server), without those that hold a placeholder."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"^```sh\n(.*?)^```", text, flags=re.S | re.M)
                 if b.startswith("pithlog keygen"))
    local = block.split("\n# an audit on a Dask cluster")[0]
    return [line for line in local.splitlines()
            if line.startswith("pithlog ") or line.startswith("echo ")
            if not PLACEHOLDER.search(line.split(" #")[0])]  # fmt: skip


def run_line(line: str) -> None:
    """One line as sh runs it: ``&&`` between commands, ``> FILE`` for their output,
    ``echo TEXT`` the one command that is not pithlog."""
    words = shlex.split(line, comments=True)
    while words:
        end = words.index("&&") if "&&" in words else len(words)
        argv, words = words[:end], words[end + 1:]
        target = None
        if ">" in argv:
            at = argv.index(">")
            argv, target = argv[:at], Path(argv[at + 1])
        output = (" ".join(argv[1:]) + "\n").encode() if argv[0] == "echo" else run(argv[1:])
        if target is not None:
            target.write_bytes(output)


def test_the_readme_first_commands_run_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """They signed ``record.json``, which nothing made, printed the event to the terminal
    where ``append`` then read an ``events.jsonl`` nothing had written, and verified a
    ``state.json`` no command wrote."""
    monkeypatch.chdir(tmp_path)
    lines = commands()
    assert len(lines) >= 9, lines
    for line in lines:
        run_line(line)
    assert len(Path("events.jsonl").read_bytes().splitlines()) == 1
    assert Path("states.jsonl").read_bytes().startswith(b'{"state_type":')


def test_the_readme_python_examples_run_on_what_its_commands_make(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The store example used ``events``, which nothing defined, and passed
    ``pith_for_alias``'s ``None`` to ``store.state``, which refuses it."""
    monkeypatch.chdir(tmp_path)
    for line in commands():
        run_line(line)
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)
    assert len(blocks) == 2
    session: dict[str, object] = {}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), session)
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith('{"state_type":"pith_open_graph_state"')
    assert printed[1].startswith("stored sha256:")
    assert session["state"] == printed[0].encode()
