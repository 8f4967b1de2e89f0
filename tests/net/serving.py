"""Real ``pithlog serve`` processes for the sync and mirror tests: 127.0.0.1, a port the
kernel picks (read from the line serve prints), always stopped; and the events, keys and
keyring around them (the store tests' generator, loaded by path)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from served import ORIGIN, Server, g, serve_process

__all__ = ["ORIGIN", "Keys", "Server", "g", "make_keys", "serving"]

from pithlog.testing import test_key, test_keyring_entries, write_key_file


@dataclass
class Keys:
    key: Path
    keyring: Path


def make_keys(root: Path) -> Keys:
    keyring = root / "keyring.json"
    keyring.write_text(json.dumps({"keyring_version": "1", "keys": test_keyring_entries()}))
    key = root / "registry.key"
    write_key_file(key, test_key("registry"))
    return Keys(key, keyring)


@contextlib.contextmanager
def serving(store: Path, keys: Keys, origin: str = ORIGIN) -> Iterator[Server]:
    """``pithlog --store STORE serve --listen 127.0.0.1:0`` signed with ``keys.key``."""
    with serve_process(store, "--key", str(keys.key), "--origin", origin) as server:
        yield server
