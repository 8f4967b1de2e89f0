"""The error hierarchy of pithlog.

Every failure that pithlog reports on purpose is a :class:`PithlogError`. Each class has a
stable ``family`` (``door``, ``keyring``, ...) and each raised error a stable ``code`` of the
form ``family.detail`` (``door.duplicate_member``), which the CLI prints and
``docs/errors.md`` lists. ``exit_status`` is the CLI status the error maps to.

Reason codes inside state documents (``malformed``, ``bad_signature``, ...) are not errors:
they are data of the spec (section 6) and live in :mod:`pithlog.checks`.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_VERIFY_FAILED = 1
EXIT_BAD_INPUT = 2


class PithlogError(Exception):
    """Root of every deliberate pithlog failure.

    ``detail`` is the stable second half of :attr:`code`; ``where`` says where in the input
    the problem is (a JSON path, a byte offset, a line), when that is known.
    """

    family = "error"
    exit_status = EXIT_BAD_INPUT

    def __init__(self, detail: str, message: str, where: str | None = None) -> None:
        self.detail = detail
        self.message = message
        self.where = where
        super().__init__(self.describe())

    @property
    def code(self) -> str:
        return f"{self.family}.{self.detail}"

    def describe(self) -> str:
        """One line: code, message and, when known, where."""
        at = f" (at {self.where})" if self.where else ""
        return f"[{self.code}] {self.message}{at}"


class DoorError(PithlogError):
    """Untrusted bytes refused at the door (spec sections 1 and 4): never stored or reduced."""

    family = "door"


class KeyringError(PithlogError):
    """A keyring that breaks a rule of spec section 3; the keyring is refused whole."""

    family = "keyring"


class KeyFileError(PithlogError):
    """A private key file that cannot be read or written."""

    family = "key_file"


class SigningError(PithlogError):
    """An event that cannot be built or signed as asked (``pithlog sign``)."""

    family = "sign"


class UsageError(PithlogError):
    """Wrong command-line use, or an input file that cannot be opened."""

    family = "usage"


class StateDocumentError(PithlogError):
    """A published state document that breaks a rule of spec section 9."""

    family = "state"
    exit_status = EXIT_VERIFY_FAILED


class StoreError(PithlogError):
    """The LMDB log cannot be opened, read or written as asked."""

    family = "store"
