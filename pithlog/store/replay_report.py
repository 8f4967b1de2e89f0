"""Replay's report: each disagreement between the store and what its log implies
(:class:`Discrepancy`), and what :meth:`pithlog.store.Store.replay` found
(:class:`ReplayReport`) (``docs/store.md``, "Replay").

The modules that check a part of the store for replay (:mod:`pithlog.store.replay`,
:mod:`pithlog.store.replay_structure`, :mod:`pithlog.store.tree`,
:mod:`pithlog.store.aliases`) say what they find in these terms.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Discrepancy:
    """One place where the store disagrees with what its log implies."""

    kind: str
    subject: str
    detail: str

    def line(self) -> str:
        return f"{self.kind}: {self.subject}: {self.detail}"


@dataclass
class ReplayReport:
    """What :meth:`pithlog.store.Store.replay` found. ``ok`` when there is no discrepancy."""

    keyring_digest: str
    stored_keyring_digest: str | None
    piths: int = 0
    events: int = 0
    copies: int = 0
    discrepancies: list[Discrepancy] = field(default_factory=list)
    notes: list[Discrepancy] = field(default_factory=list)
    """Under another keyring: pending piths whose counts would change (no state does)."""
    rekey_target: str | None = None
    """The digest of the keyring a change under way goes to (a rekey stopped midway, or
    running): the piths it re-reduced answer under it, the others under the store's."""

    @property
    def same_keyring(self) -> bool:
        return self.stored_keyring_digest in (None, self.keyring_digest)

    @property
    def ok(self) -> bool:
        return not self.discrepancies

    @property
    def changed_piths(self) -> list[str]:
        """Piths whose cached state (or pending status) differs from the replayed one."""
        return sorted({d.subject for d in self.discrepancies if d.kind in ("state", "pith")})


Progress = Callable[[int, int], None]
"""``progress(done, total)``: piths replayed so far, out of ``total``."""
