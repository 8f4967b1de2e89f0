"""For ``make bench`` only (``bench.packing_rows``): a pithlog process started with this
folder on ``PYTHONPATH`` (and every helper it spawns, which inherits it) stores each copy
as its JCS bytes, unpacked, as a store did before issue 17's compression. The stored
form stays valid: a value that starts with ``{`` is read as the JCS bytes themselves
(``pithlog.store.codec``)."""

from pithlog.store import codec


def _unpacked(self: codec.Packer, jcs: bytes) -> bytes:
    return jcs


codec.Packer.__call__ = _unpacked  # type: ignore[method-assign]
