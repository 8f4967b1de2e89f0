"""Fixed, public, test-only keys: for conformance vectors, tests, benchmarks and the demo.

Their private seeds are derived from fixed labels, so anyone can regenerate every vector
byte for byte. Never trust them for anything real: the seeds are public.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

from pithlog.protocol.keys import Keyring, SigningKey, dump_key_file, make_keyring

TEST_SIGNERS: dict[str, tuple[str, str]] = {
    # name: (signer_type, signer_id)
    "registry": ("pith_registry", "registry.test.invalid"),
    "registry-2": ("pith_registry", "registry.test.invalid"),
    "author": ("author", "author.test.invalid"),
    "tsa": ("timestamp_authority", "tsa.test.invalid"),
    "mirror": ("mirror", "mirror.test.invalid"),
    "indexer": ("citation_indexer", "indexer.test.invalid"),
    "replicator": ("replicator", "replicator.test.invalid"),
    "stranger": ("pith_registry", "stranger.test.invalid"),
}


def test_key(name: str) -> SigningKey:
    """The fixed test key ``name`` (one of :data:`TEST_SIGNERS`); key_id ``test-<name>``."""
    signer_type, signer_id = TEST_SIGNERS[name]
    seed = hashlib.sha256(b"pithlog public test key: " + name.encode("utf-8")).digest()
    return SigningKey.from_seed(seed, f"test-{name}", signer_id, signer_type)


TRUSTED = ("registry", "registry-2", "author", "tsa", "mirror", "indexer", "replicator")


def test_keyring_entries(
    names: tuple[str, ...] = TRUSTED,
    **overrides: dict[str, Any],
) -> list[dict[str, Any]]:
    """Keyring entries for the named test keys; ``overrides[name]`` updates one entry."""
    entries = []
    for name in names:
        entry = test_key(name).keyring_entry()
        entry.update(overrides.get(name.replace("-", "_"), {}))
        entries.append(entry)
    return entries


def test_keyring(**overrides: dict[str, Any]) -> Keyring:
    """A keyring trusting every test key but ``stranger``."""
    return make_keyring(test_keyring_entries(TRUSTED, **overrides))


def write_key_file(path: str | os.PathLike[str], key: SigningKey) -> None:
    """Write ``key``'s key file at ``path`` with mode 0600, as ``pithlog keygen`` does: a
    key file group or others may read is used with a warning (docs/cli.md, "Key files
    group or others may read"), which tests, benchmarks and the demo should not print.
    The file is created 0600 (an existing one is made 0600 before it is written)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        os.fchmod(fd, 0o600)
        handle.write(dump_key_file(key))


# These are helpers, not tests: keep pytest from collecting them where they are imported.
test_key.__test__ = False  # type: ignore[attr-defined]
test_keyring_entries.__test__ = False  # type: ignore[attr-defined]
test_keyring.__test__ = False  # type: ignore[attr-defined]
