"""README.md's Python examples run as written, on the files its commands make
(``keyring.json``, ``events.jsonl``) in the folder they are run in."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from pithlog.cli import main

ROOT = Path(__file__).resolve().parents[2]


def run(argv: list[str]) -> bytes:
    out = io.BytesIO()
    assert main(argv, stdout=out, stderr=io.StringIO()) == 0, argv
    return out.getvalue()


def test_the_readme_python_examples_run_on_what_its_commands_make(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The store example used ``events``, which nothing defined, and passed
    ``pith_for_alias``'s ``None`` to ``store.state``, which refuses it."""
    monkeypatch.chdir(tmp_path)
    run(["keygen", "--key-id", "K", "--signer-id", "registry.example", "--signer-type",
         "pith_registry", "--out", "k.key"])  # fmt: skip
    run(["keyring", "new", "keyring.json"])
    run(["keyring", "add", "keyring.json", "k.key"])
    Path("record.json").write_text(
        '{"canonical_record": {"schema_version": "1.0", "source": {"kind": "arxiv", '
        '"id": "2411.00284", "version": 2}, "metadata": {"submitted_at": '
        '"2024-11-01T00:43:54Z"}}}'
    )
    event = run(["sign", "--key", "k.key", "--type", "record_created", "--payload",
                 "record.json", "--created-at", "2026-07-05T09:31:31Z"])  # fmt: skip
    Path("events.jsonl").write_bytes(event)
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
