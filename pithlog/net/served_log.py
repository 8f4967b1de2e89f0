"""What a served log holds between requests (``request.app.state.log``): the store, the
checkpoint it publishes (re-signed when the tree grows; cosigned, with witnesses, as
docs/witness.md says), the full tiles it keeps and the group commit of submissions
(docs/network.md). The routes that read it are :mod:`pithlog.net.app`'s."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
from starlette.concurrency import run_in_threadpool
from starlette.routing import BaseRoute

from pithlog.errors import PithlogError
from pithlog.net.body_bytes import AnswerRoom
from pithlog.net.encoding import packers
from pithlog.net.state_builds import WAIT_SECONDS, StateBuilds
from pithlog.net.submit import GroupCommit, Limits
from pithlog.net.witness_client import WitnessAhead
from pithlog.protocol.keys import Keyring, SigningKey
from pithlog.store import Store
from pithlog.transparency import tiles
from pithlog.transparency.checkpoint import Checkpoint, sign_checkpoint

T = TypeVar("T")

FULL_TILES_KEPT = 1024
"""Full hash tiles a worker keeps in memory (8 KiB each: 8 MiB), the most recently served:
a full tile never changes, and the store builds one from its 256 hashes (about 1 ms, the
cost of several whole requests to this server)."""
COSIGN_RETRY_SECONDS = 10.0
"""After the witnesses failed to cosign a new tree, how long a worker answers with what it
published (or ``503 witness.quorum``) before it asks them again: asked on every request,
an unanswering witness held each ``/checkpoint`` for its time-out and, 40 requests at
once, every worker thread, so that tiles waited as long."""
COSIGN_ROUNDS = 3
"""Trees a worker signs and has cosigned, at most, for one publication: a witness that
cosigned a larger tree (another worker's, read later) takes no older one, so the worker
reads its tree again and asks for that (:meth:`Log.checkpoint`)."""
COPY_BYTES = 64 << 20
"""Bytes of ``/copy/`` and ``/event/`` answers a worker holds until their clients read them
(:class:`~pithlog.net.body_bytes.AnswerRoom`; one of a piece or less takes none): 64
copies of the largest, 1 MiB. Handed whole to the connection, each was held there until
its client read it: 300 clients that asked for a copy of 850 KB over connections of the
Internet's segment size (1,400 bytes) and read nothing grew the worker by 252 MB, and a
worker serves 1,000 connections."""
COPY_WAITERS = 16
"""Answers of copies read and waiting for their bytes at once, per worker (a /copy/ or
/event/ answer holds its copy, at most 1 MiB; a /copies/ stream its first chunk, at most
about 2 MiB, ``COPIES_CHUNK_MOST``: about 32 MiB in all); one more is ``503 serve.busy``
at once."""


@dataclass
class ServeConfig:
    """What ``pithlog serve`` serves: the store, the key that signs its checkpoints and
    their origin; with ``keyring``, ``POST /submit`` is open."""

    store: Store
    key: SigningKey
    origin: str
    keyring: Keyring | None = None
    limits: Limits = field(default_factory=Limits)
    extra_routes: Sequence[BaseRoute] = ()
    """Routes mounted beside these (``POST /sync``); they read ``request.app.state.log``."""
    cosign: Callable[[bytes, int], bytes] | None = None
    """``cosign(note, size)``: the signed checkpoint with its witnesses' cosignatures
    (``serve --witness-url``, docs/witness.md), or an error when too few cosigned."""


@dataclass
class Published:
    """The checkpoint the server publishes: re-signed when the tree has grown."""

    size: int
    root: bytes
    note: bytes


class Log:
    """The state an app holds (``request.app.state.log``): config, the published
    checkpoint, the group commit of submissions."""

    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        self.store = config.store
        self._published: Published | None = None
        self.submissions = (GroupCommit.over(config.store, config.keyring, config.limits)
                            if config.keyring is not None else None)  # fmt: skip
        self.states = StateBuilds()
        self.copies = AnswerRoom(COPY_BYTES, COPY_WAITERS, WAIT_SECONDS, "the copies being "
                                 "sent hold all the memory the server gives them; retry later")
        self._full_tiles: OrderedDict[tuple[int, int], bytes] = OrderedDict()
        self._cosigning: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None
        self._cosign_failed: tuple[float, PithlogError] | None = None

    async def tile(self, tile: tiles.Tile) -> bytes | None:
        """The hashes of ``tile`` (``None``: the tree has not that many); a full tile from
        the :data:`FULL_TILES_KEPT` kept (least recently served dropped first)."""
        key = (tile.level, tile.index)
        if tile.width == tiles.WIDTH and (kept := self._full_tiles.get(key)) is not None:
            self._full_tiles.move_to_end(key)
            return kept
        hashes = await self.read(self.store.tile, tile.level, tile.index, tile.width)
        if hashes is not None and tile.width == tiles.WIDTH:
            self._full_tiles[key] = hashes
            if len(self._full_tiles) > FULL_TILES_KEPT:
                self._full_tiles.popitem(last=False)
        return hashes

    async def read(self, work: Callable[..., T], *args: Any) -> T:
        """A store read, in a worker thread."""
        return await run_in_threadpool(work, *args)

    async def read_copies(self, work: Callable[..., T], *args: Any) -> T:
        """A store read of copies (up to 1 MiB each), in a thread of the large answers'
        (:func:`~pithlog.net.encoding.packers`): queued in anyio's pool, a flood of them
        held ``/checkpoint``'s read of the tree behind them."""
        return await anyio.to_thread.run_sync(work, *args, limiter=packers())

    async def checkpoint(self) -> Published:
        """The signed checkpoint of the current tree, signed again only when the tree has
        grown (Ed25519 is deterministic: one tree, one note, whichever worker signs).
        With witnesses, one request at a time asks them to cosign, at most once per
        :data:`COSIGN_RETRY_SECONDS` after they failed; meanwhile the others answer with
        the checkpoint published (a log is only as far along as its witnesses agree)."""
        size, root = await self.read(self.store.tree_root)
        published = self._published
        if published is not None and published.size == size:
            return published
        note = sign_checkpoint(Checkpoint(self.config.origin, size, root), self.config.key)
        if self.config.cosign is None:
            published = self._published = Published(size, root, note)
            return published
        cosigning = self._cosigning_lock()
        if published is not None and cosigning.locked():
            return published
        async with cosigning:
            published = self._published
            if published is not None and published.size >= size:
                return published  # cosigned meanwhile, by the request that held the lock
            failed = self._cosign_failed
            if failed is not None and time.monotonic() < failed[0] + COSIGN_RETRY_SECONDS:
                if published is not None:
                    return published
                raise failed[1]
            try:
                size, root, note = await self._cosigned(size, root, note)
            except PithlogError as exc:
                # Too few witnesses cosigned the new tree: the last cosigned checkpoint
                # stays published
                self._cosign_failed = (time.monotonic(), exc)
                if published is not None:
                    return published
                raise
            self._cosign_failed = None
            published = self._published = Published(size, root, note)
            return published

    async def _cosigned(self, size: int, root: bytes, note: bytes) -> tuple[int, bytes, bytes]:
        """``note`` (of the tree ``size``, ``root``) with its witnesses' cosignatures, or
        those of a newer tree of the store: with ``--workers N`` each worker asks the
        witnesses for the tree it read, and one that another worker had them cosign a
        larger tree meanwhile was refused (``409``, ``witness.quorum``) and went on serving
        its older checkpoint for :data:`COSIGN_RETRY_SECONDS` while the others served the
        newer: a client's next request could see the log go back. The store holds every
        tree a witness cosigned for it (a larger one is a tree this log never had, which
        fails as before)."""
        assert self.config.cosign is not None
        rounds = 1
        while True:
            try:
                return size, root, await run_in_threadpool(self.config.cosign, note, size)
            except WitnessAhead as exc:
                if rounds >= COSIGN_ROUNDS:
                    raise
                size, root = await self.read(self.store.tree_root)
                if size < exc.ahead:
                    raise
                note = sign_checkpoint(Checkpoint(self.config.origin, size, root),
                                       self.config.key)  # fmt: skip
                rounds += 1

    def _cosigning_lock(self) -> asyncio.Lock:
        """The lock of the event loop that runs now: a lock binds to the loop it first
        waits on, so an app served again on another loop (a program embedding it, a test)
        takes a new one, where the old one would raise on every wait."""
        loop = asyncio.get_running_loop()
        if self._cosigning is None or self._cosigning[0] is not loop:
            self._cosigning = (loop, asyncio.Lock())
        return self._cosigning[1]
