"""``make demo`` prints exactly what it runs: the commands it prints, run again as a person
would copy them (``>`` writes a file afresh, ``>>`` adds to it), give the same files."""

from __future__ import annotations

import importlib.util
import io
import shlex
from pathlib import Path

import pytest

from pithlog.cli import main

ROOT = Path(__file__).resolve().parents[2]
INPUTS = {"registry.key", "record.json", "snapshot.json"}


def load_demo():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("demo", ROOT / "scripts" / "demo.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_printed_commands_redo_the_demo(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "demo"
    load_demo().demo(folder)
    commands = [line[2:] for line in capsys.readouterr().out.splitlines()
                if line.startswith("$ ")]  # fmt: skip
    names = [shlex.split(c)[1:] for c in commands]
    ran = {n[n.index("--store") + 2] if "--store" in n else n[0] for n in names}
    assert {"keyring", "sign", "append", "export", "checkpoint", "prove", "verify-proof",
            "verify-checkpoint"} <= ran  # fmt: skip
    events = (folder / "events.jsonl").read_bytes()
    assert len(events.splitlines()) == 2

    for path in folder.iterdir():  # keep only what the demo made by hand
        if path.name not in INPUTS:
            if path.is_dir():
                for inner in path.iterdir():
                    inner.unlink()
                path.rmdir()
            else:
                path.unlink()
    for command in commands:
        argv = shlex.split(command)
        assert argv[0] == "pithlog"
        argv = argv[1:]
        mode = None
        if ">" in argv or ">>" in argv:
            op = ">>" if ">>" in argv else ">"
            at = argv.index(op)
            argv, target, mode = argv[:at], Path(argv[at + 1]), ("ab" if op == ">>" else "wb")
        out = io.BytesIO()
        status = main(argv, stdout=out, stderr=io.StringIO())
        assert status == 0, command
        if mode is not None:
            with target.open(mode) as handle:
                handle.write(out.getvalue())
    assert (folder / "events.jsonl").read_bytes() == events
