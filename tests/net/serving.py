"""Real ``pithlog serve`` processes for the sync and mirror tests: 127.0.0.1, a port the
kernel picks (read from the line serve prints), always stopped; and the events, keys and
keyring around them (the store tests' generator, loaded by path)."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from pithlog.protocol.keys import dump_key_file
from pithlog.testing import test_key, test_keyring_entries

ORIGIN = "registry.test.invalid/pith"
START_SECONDS = 30.0


def _load() -> ModuleType:
    name = "store_eventgen"
    if name in sys.modules:
        return sys.modules[name]
    path = Path(__file__).resolve().parents[1] / "store" / "eventgen.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


g = _load()


@dataclass
class Keys:
    key: Path
    keyring: Path


def make_keys(root: Path) -> Keys:
    keyring = root / "keyring.json"
    keyring.write_text(json.dumps({"keyring_version": "1", "keys": test_keyring_entries()}))
    key = root / "registry.key"
    key.write_bytes(dump_key_file(test_key("registry")))
    return Keys(key, keyring)


@dataclass
class Server:
    url: str
    process: subprocess.Popen[bytes]
    stderr: bytearray

    def kill(self) -> None:
        """SIGKILL: the server dies at once, mid-answer if it is answering."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


@contextlib.contextmanager
def serving(store: Path, keys: Keys, origin: str = ORIGIN) -> Iterator[Server]:
    """``pithlog --store STORE serve --listen 127.0.0.1:0``, stopped on leaving."""
    argv = [sys.executable, "-m", "pithlog", "--store", str(store), "serve", "--listen",
            "127.0.0.1:0", "--key", str(keys.key), "--origin", origin]  # fmt: skip
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})  # fmt: skip
    seen = bytearray()
    try:
        url = _listening(process, seen)
        stream = process.stderr
        assert stream is not None

        def drain() -> None:
            with contextlib.suppress(OSError, ValueError):
                while chunk := os.read(stream.fileno(), 65536):
                    seen.extend(chunk)

        threading.Thread(target=drain, daemon=True).start()
        yield Server(url, process, seen)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


def _listening(process: subprocess.Popen[bytes], seen: bytearray) -> str:
    assert process.stderr is not None
    selector = selectors.DefaultSelector()
    selector.register(process.stderr, selectors.EVENT_READ)
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if not selector.select(timeout=max(0.0, deadline - time.monotonic())):
            break
        chunk = os.read(process.stderr.fileno(), 4096)
        if not chunk:
            break
        seen.extend(chunk)
        for line in bytes(seen).split(b"\n")[:-1]:
            if line.startswith(b"serve: listening on "):
                return line.split(b" on ", 1)[1].decode()
    raise AssertionError(f"pithlog serve did not start: {seen.decode(errors='replace')}")
