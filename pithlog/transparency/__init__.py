"""The log as a transparency log (docs/transparency.md): RFC 9162 Merkle tree arithmetic,
C2SP signed checkpoints and the proof formats, all verified offline. Pure, below the store
(the store keeps the tree with :mod:`~pithlog.transparency.merkle`)."""
