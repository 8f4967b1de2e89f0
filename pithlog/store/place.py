"""Where a store may be made: refused before anything is created (``docs/store.md``).

A store is a folder holding LMDB's ``data.mdb`` (and ``lock.mdb``). ``--store`` naming a
plain file, or an existing folder that holds other files but no store, is almost always a
mistake (a wrong path, a typo, the current folder): pithlog refuses it instead of putting
its files among someone else's.
"""

from __future__ import annotations

import os

from pithlog.errors import StoreError

STORE_FILES = frozenset({"data.mdb", "lock.mdb"})


def is_store_folder(path: str) -> bool:
    """A folder holding ``data.mdb``: a store (or a damaged one, for open to judge)."""
    return os.path.isfile(os.path.join(path, "data.mdb"))


def check_path(path: str) -> None:
    """Refuse a path that py-lmdb cannot take, before anything is made there: it encodes
    a path in UTF-8, and a file name of other bytes is held by Python as lone surrogates
    (which raised UnicodeEncodeError once the store's folder was made)."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise StoreError("io", f"the store path {path!r} is not UTF-8, and LMDB takes only "
                         "UTF-8 paths: give a path of UTF-8 names") from None  # fmt: skip


def check_place(path: str) -> None:
    """Refuse ``path`` as the place of a new store: a file, or a folder holding other
    files and no store. A missing path, an empty folder and a store are fine."""
    if is_store_folder(path) or not os.path.lexists(path):
        return
    if not os.path.isdir(path):
        raise StoreError("not_a_store", f"{path} is a file, not a store folder: check "
                         "--store (a store is a folder; give a new or empty one)")  # fmt: skip
    try:
        others = sorted(set(os.listdir(path)) - STORE_FILES)
    except OSError as exc:
        raise StoreError("io", f"cannot read {path}: {exc.strerror or exc}") from exc
    if others:
        shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
        raise StoreError("not_a_store", f"{path} is a folder holding other files ({shown}) "
                         "and no pithlog store: check --store, or give a new or empty "
                         "folder")  # fmt: skip


def unreadable(path: str, exc: OSError) -> StoreError:
    """What ``os.stat`` of the ``data.mdb`` of ``path`` failing otherwise than by its
    absence means. ``path`` itself not a folder (a file, or a device such as
    ``/dev/null`` or a FIFO, which ``isfile`` did not count: its ``ENOTDIR`` was said to
    be a matter of permissions) is ``store.not_a_store``; else the folder cannot be
    entered (or a file stands on the way to it)."""
    if os.path.exists(path) and not os.path.isdir(path):
        return StoreError("not_a_store", f"{path} is a file, not a store's folder")
    return StoreError("io", f"cannot read {path}: {exc.strerror or exc}; check its "
                      "permissions")  # fmt: skip
