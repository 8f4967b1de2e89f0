"""``pithlog.cli.main`` in a program that embeds it: the process is left as it was found.

A command pauses the cyclic garbage collector while it runs (``pithlog.cli``), and nothing
else of the process's global state is changed for it: an embedding program keeps its
collector setting, its ``threading.excepthook`` (during the command too: its own threads'
exceptions still reach it), its warning filters and display, and its signal handlers.
"""

from __future__ import annotations

import gc
import io
import json
import random
import signal
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from storeevents import g

import pithlog.cli.offline_commands
from pithlog.cli import main
from pithlog.testing import test_keyring_entries


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "keyring.json").write_text(
        json.dumps({"keyring_version": "1", "keys": test_keyring_entries()})
    )
    (tmp_path / "bad.json").write_text("{")
    events = g.mixed_events(random.Random(3), piths=3, per_pith=3)
    (tmp_path / "events.jsonl").write_bytes(b"".join(g.encoded(e) + b"\n" for e in events))
    return {name: str(tmp_path / name) for name in ("keyring.json", "bad.json", "events.jsonl")}


def _state() -> tuple[Any, ...]:
    return (gc.isenabled(), threading.excepthook, warnings.showwarning, list(warnings.filters),
            signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))  # fmt: skip


@pytest.mark.parametrize("collector", [True, False])
@pytest.mark.parametrize("command", ["reduce", "reduce --jobs 2", "bad keyring", "usage",
                                     "version"])  # fmt: skip
def test_main_leaves_the_process_as_it_found_it(
    files: dict[str, str], collector: bool, command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = {
        "reduce": ["reduce", "--keyring", files["keyring.json"], files["events.jsonl"]],
        "reduce --jobs 2": ["reduce", "--jobs", "2", "--keyring", files["keyring.json"],
                            files["events.jsonl"]],
        "bad keyring": ["reduce", "--keyring", files["bad.json"], files["events.jsonl"]],
        "usage": ["reduce", "--no-such-option"],
        "version": ["--version"],
    }[command]
    hook_calls: list[type[BaseException]] = []

    def own_hook(args: threading.ExceptHookArgs) -> None:
        hook_calls.append(args.exc_type)

    def own_show(*args: Any, **kwargs: Any) -> None:
        pass

    monkeypatch.setattr(threading, "excepthook", own_hook)
    monkeypatch.setattr(warnings, "showwarning", own_show)
    was = gc.isenabled()
    (gc.enable if collector else gc.disable)()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", ResourceWarning)
            before = _state()
            status = main(argv, stdout=io.BytesIO(), stderr=io.StringIO())
            assert _state() == before
    finally:
        (gc.enable if was else gc.disable)()
    assert status == {"bad keyring": 2, "usage": 2}.get(command, 0)
    assert hook_calls == []


def test_a_command_leaves_the_embedders_excepthook_in_place_while_it_runs(
    files: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A thread of the embedding program that fails while a command runs reaches the
    # program's own hook, not one that pithlog put in its place.
    seen: list[type[BaseException]] = []
    hooks: list[Any] = []

    def own_hook(args: threading.ExceptHookArgs) -> None:
        seen.append(args.exc_type)

    monkeypatch.setattr(threading, "excepthook", own_hook)
    real = pithlog.cli.offline_commands.reduce_lines

    def meanwhile(*args: Any, **kwargs: Any) -> Iterator[Any]:
        hooks.append(threading.excepthook)

        def fail() -> None:
            raise LookupError("the embedding program's own thread")

        thread = threading.Thread(target=fail)
        thread.start()
        thread.join()
        return real(*args, **kwargs)

    monkeypatch.setattr(pithlog.cli.offline_commands, "reduce_lines", meanwhile)
    argv = ["reduce", "--keyring", files["keyring.json"], files["events.jsonl"]]
    assert main(argv, stdout=io.BytesIO(), stderr=io.StringIO()) == 0
    assert seen == [LookupError] and hooks == [own_hook]
