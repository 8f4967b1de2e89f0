"""``POST /sync``: the messages of :mod:`pithlog.net.sync` carried over HTTP
(``docs/network.md``, "Sync over HTTP and its limits").

One request carries one message (``application/x-pithlog-sync``: the binary message of
:mod:`pithlog.net.syncmsg`), one answer its reply. The server side (:class:`SyncEndpoint`,
a Starlette route) keeps no session: each message is answered from the store's sorted
copies as they are when it arrives (the item list is read again only when the tree has
grown since the last message). The client side (:class:`HttpTransport`) is a
:class:`pithlog.net.sync_pull.Transport` over httpx, so :func:`pithlog.net.sync_pull.pull`
runs unchanged with ``--from http://...``.

Both sides hold the other to the limits of sync: a request body over
:data:`pithlog.net.sync.MAX_MESSAGE` is ``413`` before it is read whole, and so is an
answer over it on the client; a body that takes more than :data:`BODY_SECONDS` is ``408``;
at most :data:`MAX_SYNCS` requests are answered at once per worker, each once its body is
whole (``503`` after waiting), and the bodies held stay under :data:`MAX_SYNCS` messages
(:mod:`pithlog.net.body_bytes`), as do the answers being sent (:class:`SyncAnswer`).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from pithlog.errors import DoorError, ServeError, SyncError, register, shown
from pithlog.net.answers import NO_STORE, answer_headers, status_of
from pithlog.net.body_bytes import AnswerRoom, BodyBytes, HeldAnswer
from pithlog.net.deadline import AnswerDeadline, deadline_client, redirect_note
from pithlog.net.encoding import ACCEPT_ENCODING, read_answer
from pithlog.net.error_answers import error_response
from pithlog.net.sources import store_responder
from pithlog.net.submit import TAKEN_CODINGS, check_coding, check_declared, read_body
from pithlog.net.submit import Limits as BodyLimits
from pithlog.net.sync import MAX_SECONDS, Limits, Responder
from pithlog.net.syncmsg import BRANCHES, INFINITY, SKIP, Entry, decode_reconcile, encode_reconcile
from pithlog.protocol.canonical import shape
from pithlog.store import Store

register(
    {
        "sync.unreachable": "the sync source's URL cannot be reached (or did not answer in "
        "time): check --from and the network",
        "sync.remote": "the sync source answered with an error: its code and message follow",
        "sync.timeout": "the sync from a URL took longer than --max-time (default 3,600 s): "
        "what it committed stays stored; run it again for the rest, or give a longer "
        "--max-time (docs/network.md)",
    }
)

SYNC_PATH = "/sync"
MEDIA = "application/x-pithlog-sync"
COPIES_HEADER = "X-Pithlog-Copies"
"""The answering store's copy count (reported by the client, never trusted)."""
BODY_SECONDS = 30.0
"""Seconds a request body may take to arrive."""
TIMEOUT = 120.0
"""Seconds the client waits for a connection, or between two reads of an answer."""
_ERROR_BYTES = 64 << 10
"""The most of an error answer the client reads."""


def _app_store(request: Request) -> Store:
    store: Store = request.app.state.log.store
    return store


MAX_SYNCS = 4
"""``POST /sync`` requests answered at once per worker, each taking its place once its body
(up to :data:`pithlog.net.sync.MAX_MESSAGE`) is whole: more wait for a place, and after
:data:`BODY_SECONDS` without one get ``503 serve.busy``. The bodies a worker holds, being
received or not, are bounded by as many messages' bytes (:mod:`pithlog.net.body_bytes`):
without a bound, a dozen clients each sending 32 MiB held 438 MB of the server's memory,
and a thousand connections could hold 32 GiB. Places taken before the body was read let
four slow senders, a head and a byte each, keep every other sync waiting 30 s."""


REBUILD_SHARE = 10
"""The snapshot of the store's copies that ``POST /sync`` answers from is made again, once
the log has grown, only after this many times as long as its last making took has passed
since then (:meth:`SyncEndpoint.responder`), and by one request at a time. Making it reads
every copy key of the store: a tiny message after each growth made a log taking
submissions read its whole key set again and again, up to four at once, for anyone who
asked. So the making takes at most about a tenth of a core, and a sync answers from copies
at most that old (a store of a million copies: some seconds)."""


class SyncAnswer(HeldAnswer):
    """An answer to ``POST /sync``, whose ``held`` bytes were taken out of ``room``
    (:data:`MAX_SYNCS` messages per worker; none for an answer of one piece,
    :class:`~pithlog.net.body_bytes.AnswerRoom`) and are given back once it is sent, or
    its client gone. Each answer was held in the server's memory until its client read
    it: 100 clients that sent an order for a store's 4 MB of copies and read nothing held
    430 MB, and a thousand connections could hold 32 GiB."""

    def __init__(self, reply: bytes, headers: dict[str, str], room: BodyBytes,
                 held: int) -> None:  # fmt: skip
        super().__init__(reply, MEDIA, headers, room, held)


class SyncEndpoint:
    """``POST /sync`` over a store: :meth:`handle` is the Starlette endpoint."""

    def __init__(
        self,
        limits: Limits | None = None,
        store_of: Callable[[Request], Store] = _app_store,
        body_seconds: float = BODY_SECONDS,
    ) -> None:
        self.limits = limits or Limits()
        self._store_of = store_of
        self._body = BodyLimits(max_body=self.limits.max_message, body_seconds=body_seconds)
        self._lock = threading.Lock()
        self._making = threading.Lock()
        """Held by the one request that makes the snapshot (:meth:`responder`)."""
        self._cached: tuple[Store, int, Responder] | None = None
        self._next_making = 0.0
        """When the snapshot may be made again (:data:`REBUILD_SHARE`)."""
        self._slots: tuple[asyncio.AbstractEventLoop, asyncio.Semaphore] | None = None
        self._bodies = BodyBytes(MAX_SYNCS * self.limits.max_message)
        """The places and the event loop they belong to: an asyncio semaphore binds to the
        loop it first waits on, and an app served again on another loop needs its own."""
        self.answers = AnswerRoom(MAX_SYNCS * self.limits.max_message, MAX_SYNCS,
                                  body_seconds, "the answers being sent hold all the "
                                  "memory the server gives them; retry later")  # fmt: skip
        """The bytes of the answers being sent (:class:`SyncAnswer`), awaited out of the
        places: waiting in its place, an answer of MAX_SYNCS large ones that clients did
        not read held every place, and a reconcile message, whose answer takes no bytes,
        waited behind them until their time was up."""

    def responder(self, store: Store) -> Responder:
        """The responder over the store's copies: made again when the tree has grown (the
        log only grows, so an unchanged size is an unchanged set of copies), but no sooner
        than :data:`REBUILD_SHARE` allows, and by one request at a time; meanwhile the
        others answer from the copies made before, a log a little shorter (every copy in
        it is still held: its answers stay true)."""
        size = store.tree_size()
        with self._lock:
            cached = self._cached if self._cached and self._cached[0] is store else None
            if cached is not None and (cached[1] == size
                                       or time.monotonic() < self._next_making):  # fmt: skip
                return cached[2]
        if not self._making.acquire(blocking=cached is None):
            assert cached is not None  # another request makes it: this one has the last
            return cached[2]
        try:
            with self._lock:  # made by the request that held the lock before this one?
                made = self._cached
                if made is not None and made[0] is store and made[1] >= size:
                    return made[2]
            began = time.monotonic()
            responder = store_responder(store, self.limits)
            ended = time.monotonic()
            with self._lock:
                self._cached = (store, size, responder)
                self._next_making = ended + REBUILD_SHARE * (ended - began)
            return responder
        finally:
            self._making.release()

    async def handle(self, request: Request) -> Response:
        store = self._store_of(request)
        length = request.headers.get("content-length")
        try:
            check_declared(length, self._body)  # 413 at once, before any byte is held
            check_coding(request.headers.getlist("content-encoding"))  # 415, as at once
            # the body holds the bytes it has sent, and a place only once it is whole: a
            # slow sender holds no place that a whole message waits for
            body = await read_body(request.stream(), None, self._body,  # length: checked
                                   held=self._bodies)  # fmt: skip
        except ServeError as exc:  # the body's own limits
            answer = error_response(status_of(exc), exc.code, exc.message)
            if answer.status_code == 415:  # RFC 9110 15.5.16: the codings taken
                answer.headers["Accept-Encoding"] = TAKEN_CODINGS
            return answer
        try:
            loop = asyncio.get_running_loop()
            if self._slots is None or self._slots[0] is not loop:
                self._slots = (loop, asyncio.Semaphore(MAX_SYNCS))
            slots = self._slots[1]
            try:
                async with asyncio.timeout(self._body.body_seconds):
                    await slots.acquire()
            except TimeoutError:
                return error_response(503, "serve.busy", f"{MAX_SYNCS} syncs are in "
                                      "progress; retry later")  # fmt: skip
            try:
                responder = await run_in_threadpool(self.responder, store)
                reply = await run_in_threadpool(responder.handle, body)
            except SyncError as exc:
                status = 413 if exc.code == "sync.limit" else 400
                return error_response(status, exc.code, exc.message)
            finally:
                slots.release()
        finally:
            self._bodies.give(len(body))
        del body  # answered: not held while the answer waits for its bytes
        try:
            # out of its place (AnswerRoom): the answers made and not yet sent stay within
            # the room and MAX_SYNCS more, and a small one, which takes no bytes, is sent
            held = await self.answers.hold(len(reply))
        except ServeError as exc:
            return error_response(503, exc.code, exc.message)
        return SyncAnswer(reply, {**answer_headers(NO_STORE),
                                  COPIES_HEADER: str(len(responder.items))},
                          self.answers, held)  # fmt: skip


def sync_routes(limits: Limits | None = None) -> list[BaseRoute]:
    """The routes to mount beside a served log's (``POST /sync``)."""
    return [Route(SYNC_PATH, SyncEndpoint(limits).handle, methods=["POST"])]


def is_url(source: str) -> bool:
    return source.startswith(("http://", "https://"))


class HttpTransport:
    """The pulling side's :class:`pithlog.net.sync_pull.Transport` to ``BASE_URL/sync``,
    whose messages are answered within ``max_seconds`` of its making in all (``None``: no
    bound but each answer's), or ``sync.timeout``."""

    def __init__(
        self, base_url: str, limits: Limits | None = None, client: httpx.Client | None = None,
        max_seconds: float | None = MAX_SECONDS,
    ) -> None:  # fmt: skip
        self.url = base_url.rstrip("/") + SYNC_PATH
        self.limits = limits or Limits()
        self.max_seconds = max_seconds
        self._ends = None if max_seconds is None else time.monotonic() + max_seconds
        self._client = client or deadline_client(timeout=TIMEOUT, follow_redirects=False)
        self._own = client is None
        self.sent = self.received = self.messages = 0
        self.remote_items: int | None = None

    def close(self) -> None:
        if self._own:
            self._client.close()

    def __enter__(self) -> HttpTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def reach(self) -> None:
        """One message that asks about nothing (a single range, skipped): whether the
        source answers at all, and as a sync source (a reconcile message), before a store
        is made to sync into."""
        decode_reconcile(self.request(encode_reconcile([Entry(INFINITY, SKIP)])), BRANCHES)

    def _late(self) -> SyncError:
        return SyncError("timeout", f"{self.url}: the sync took over {self.max_seconds:g} s "
                         "(--max-time)")  # fmt: skip

    def request(self, message: bytes) -> bytes:
        left = None if self._ends is None else self._ends - time.monotonic()
        if left is not None and left <= 0:
            raise self._late()
        self.sent += len(message)
        # the whole answer, its head too, within answer_seconds of its cap (and the time
        # left to the sync): httpx times each read only, and h11 waits for 100 KiB of head
        # (pithlog.net.deadline)
        deadline = AnswerDeadline(self.limits.max_message, left)
        try:
            headers = {"Content-Type": MEDIA, "Accept-Encoding": ACCEPT_ENCODING}
            with deadline, self._client.stream("POST", self.url, content=message,
                                               headers=headers) as response:  # fmt: skip
                if response.status_code != 200:
                    raise _remote_error(response)
                reply = self._read(response)
        except (httpx.HTTPError, httpx.InvalidURL, UnicodeError) as exc:
            # a URL httpx cannot parse (InvalidURL), or a host name IDNA cannot encode
            # (UnicodeError, from the resolver): --from is wrong, as for a host not found
            if self._ends is not None and time.monotonic() >= self._ends:
                raise self._late() from exc
            why = deadline.why(exc) if isinstance(exc, httpx.HTTPError) else str(exc)
            raise SyncError("unreachable", f"{self.url}: {why}") from exc
        self.received += len(reply)
        self.messages += 2
        copies = response.headers.get(COPIES_HEADER, "")
        if copies.isascii() and copies.isdigit() and len(copies) < 19:
            self.remote_items = int(copies)
        return reply

    def _read(self, response: httpx.Response) -> bytes:
        length = response.headers.get("content-length", "")
        if length.isdigit() and int(length) > self.limits.max_message:
            raise SyncError("limit", f"an answer of {length} bytes; the most taken is "
                            f"{self.limits.max_message}")  # fmt: skip
        return read_answer(response, self.limits.max_message, lambda why: SyncError("limit", why))


def _remote_error(response: httpx.Response) -> SyncError:
    if note := redirect_note(response):
        return SyncError("remote", f"{response.url} answered {response.status_code}{note}")
    try:
        body = read_answer(response, _ERROR_BYTES, lambda why: SyncError("remote", why))
    except SyncError as exc:
        return SyncError("remote", f"{response.url} answered {response.status_code} and "
                         f"{exc.message}")  # fmt: skip
    try:
        doc: Any = shape(bytes(body), Any)
        said = f"[{str(doc['error'])[:80]}] {str(doc['message'])[:400]}"
    except (DoorError, TypeError, KeyError):
        said = bytes(body[:200]).decode("utf-8", "replace")
    # the source's words go into a one-line error, on the terminal: cut, as the mirror
    # cuts an origin's, and a line break or a terminal escape in them shown escaped
    return SyncError("remote", f"{response.url} answered {response.status_code}: "
                     f"{shown(said) or '(no body)'}")  # fmt: skip
