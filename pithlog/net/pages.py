"""Pages for people (docs/pages.md): the log at a glance (``/``), one record as a person
reads it (``/pith/<pith_number>``), an event (``/event/sha256:<hex>`` when the client asks
for HTML), and the search that takes an arXiv id, a DOI, a pith number or a short alias.

Server-rendered from Jinja2 templates with autoescaping on for every template: every string
on a page comes from signed but untrusted events. No JavaScript. The JSON endpoints of
:mod:`pithlog.net.app` stay what they are; these routes are mounted before them.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from functools import partial, wraps
from http import HTTPStatus
from importlib import resources
from typing import Any

import anyio
import msgspec
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from pithlog import __version__
from pithlog.errors import PithlogError, ServeError
from pithlog.net.answers import NO_STORE, answer_headers, status_of
from pithlog.net.app import get_event
from pithlog.net.body_bytes import HeldAnswer
from pithlog.net.encoding import compressed, packed_apart
from pithlog.net.error_answers import ERROR_PAGE
from pithlog.net.page_layout import (
    MOST_LISTED,
    MOST_SIDE_BY_SIDE,
    PAGE_MAKING,
    PAGE_SHOWN,
    Layout,
    environment,
    making,
    pith_making,
    segment,
)
from pithlog.net.page_state import copy_members, shown_state, stored_payload
from pithlog.net.served_log import Log
from pithlog.protocol.event_types import EVENT_TYPES, STATE_LISTS
from pithlog.protocol.events import is_event_id
from pithlog.protocol.records import is_pith_number

RECENT = 12
"""Events listed on the front page."""

MAX_QUERY = 256
"""The longest search accepted (an alias is far shorter)."""

MOST_CHARS_RECENT = 256
"""The most characters of a recent event's signer id or time the front page shows. A kept
invalid event's signer and created_at may be anything its maker wrote, up to a 1 MiB
envelope: twelve of them made every load of the front page 12 MB."""

REASON_MEANINGS = {
    "malformed": "members missing, extra or of the wrong JSON type, or a created_at that is "
    "not a timestamp",
    "unknown_event_type": "not one of the nine event types of the protocol",
    "event_id_mismatch": "the event_id is not the SHA-256 of the event's body",
    "unknown_key": "signed with a key the keyring does not hold",
    "signer_mismatch": "the signer's fields differ from the keyring's entry for the key",
    "bad_signature": "the signature does not verify",
    "key_not_valid": "the key was not valid at the event's time (not yet, expired or revoked)",
    "unauthorized_signer": "this kind of signer may not sign this type of event",
    "bad_target": "the target is not allowed for this type of event",
    "bad_payload": "the payload breaks a rule of its event type",
    "pith_number_mismatch": "the record's pith number is not derived from its canonical record",
    "bad_receipt": "the registry's receipt in the record does not verify",
    "predates_record": "signed before the record it speaks of was created",
    "record_mismatch": "the payload disagrees with the record (source, anchored hash or paper)",
}
"""Reason code (spec 6) -> what it means, in a sentence for a reader."""

_STATUSES = frozenset(HTTPStatus)
"""The statuses :class:`http.HTTPStatus` names (an error page's heading)."""

_HEADINGS = {
    "graph_snapshots": "Graph snapshots", "author_attestations": "Author attestations",
    "timestamp_anchors": "Timestamp anchors", "storage_attestations": "Storage attestations",
    "citation_signatures": "Citation signatures", "replication_records": "Replication records",
    "corrections": "Corrections", "mirror_hints": "Mirror hints",
}  # fmt: skip
_ARXIV = re.compile(r"(?:arxiv:)?(\d{4}\.\d{4,5})(v\d+)?", re.IGNORECASE)
_SHORT = re.compile(r"(?:pith:)?([A-Z2-7]{8}|[A-Z2-7]{12}|[A-Z2-7]{16})", re.IGNORECASE)


def alias_of(query: str) -> str | None:
    """What a person typed -> a lookup form of the alias index (``arxiv:2411.00284v2``,
    ``doi:10.48550/arxiv.2411.00284``, ``pith:4F47WZKM``), or ``None``."""
    q = query.strip()
    if m := _ARXIV.fullmatch(q):
        return f"arxiv:{m.group(1)}{(m.group(2) or '').lower()}"
    low = q.lower()
    for prefix in ("doi:", "https://doi.org/", "http://doi.org/", "doi.org/"):
        if low.startswith(prefix):
            return "doi:" + q[len(prefix) :]
    if low.startswith("10."):
        return "doi:" + q
    if m := _SHORT.fullmatch(q):
        return "pith:" + m.group(1).upper()
    return None


class Pages:
    """The page routes over a served log (:class:`pithlog.net.served_log.Log`)."""

    def __init__(self) -> None:
        self.env = environment()
        self._totals: tuple[int, dict[str, int]] | None = None

    async def render(self, request: Request, template: str, status: int = 200,
                     **context: Any) -> HTMLResponse:  # fmt: skip
        """The page, rendered in a worker thread: a record of thousands of events is a
        page of megabytes (1.8 s of Jinja for 4,000 events), which on the event loop would
        hold every other request of the worker that long. A page of
        :data:`~pithlog.net.encoding.APART_BYTES` or more is compressed in a worker thread
        too, as the JSON routes' large answers are."""
        log: Log = request.app.state.log
        page = await anyio.to_thread.run_sync(self._page, request, log, template, context)
        body, coded = await packed_apart(request.headers, page)
        return HTMLResponse(body, status, headers=_page_headers(coded))

    def _page(self, request: Request, log: Log, template: str, context: dict[str, Any],
              layout: Layout | None = None) -> bytes:  # fmt: skip
        """The bytes of the page ``template`` renders with ``context`` (in a thread),
        each piece encoded as it is made: rendered into one string, then encoded, a page
        with one character past U+FFFF was that string at four bytes a character, and
        again in the pieces joined into it (8 times the page's bytes; now twice)."""
        pieces = self.env.get_template(template).generate(
            origin=log.config.origin, version=__version__, root=root_of(request),
            query=request.query_params.get("q", "")[:MAX_QUERY], layout=layout or Layout(),
            **context,
        )  # fmt: skip
        return b"".join([piece.encode() for piece in pieces])

    async def message(self, request: Request, status: int, heading: str, text: str,
                      links: list[tuple[str, str]] | None = None) -> HTMLResponse:  # fmt: skip
        """A page of one heading and one sentence; ``links`` are (path from the root the
        server answers at, without its first ``/``, each value in it a
        :func:`~pithlog.net.page_layout.segment`; text)."""
        return await self.render(request, "message.html", status, heading=heading, text=text,
                                 links=links or [])  # fmt: skip

    def failed(self, request: Request, status: int, code: str, message: str
               ) -> Response | None:  # fmt: skip
        """The answer of a page that failed to be made, of the error ``code`` (the handlers
        of :mod:`pithlog.net.error_answers`), when the client asked for HTML (a browser): a
        page of the JSON answer's status that names the code, never cached. An unexpected
        failure (``500 serve.internal``) says nothing of itself (the server's log has it);
        a known error (``503 store.readers_full``, ``503 serve.busy``, ...) says its
        message, one line escaped as every string of a page, between Unicode bidi isolates
        as what a search typed (it may quote a witness's words). ``None`` for any other
        client, which gets the JSON of every route (docs/network.md, "Errors"). Rendered
        on the event loop: a page of a few hundred bytes, of nothing the store holds. An
        event asked with ``?format=json`` is its JSON route's (:func:`_answers_page`): its
        errors are too."""
        if not _answers_page(request):
            return None
        if code == "serve.internal":
            heading = "Server error"
            text = (f"The server failed to make this page ({code}); the operator's log has "
                    "the details.")  # fmt: skip
        else:
            heading = HTTPStatus(status).phrase if status in _STATUSES else "Error"
            text = f"\u2068{message}\u2069 ({code})"
        log: Log = request.app.state.log
        page = self._page(request, log, "message.html", {
            "heading": heading, "links": [], "text": text,
        })  # fmt: skip
        headers = {**_page_headers({}), "Cache-Control": NO_STORE, "Vary": "Accept"}
        return HTMLResponse(page, status, headers=headers)

    def _route(self, endpoint: Callable[[Request], Awaitable[Response]]
               ) -> Callable[[Request], Awaitable[Response]]:  # fmt: skip
        """``endpoint`` as a page's route: its errors, known or not, are answered by
        :meth:`failed` (:data:`~pithlog.net.error_answers.ERROR_PAGE`), not by the JSON a
        browser showed raw."""

        @wraps(endpoint)
        async def route(request: Request) -> Response:
            request.scope[ERROR_PAGE] = self.failed
            return await endpoint(request)

        return route

    # --- the front page ---------------------------------------------------------------------

    def totals(self, log: Log) -> dict[str, int]:
        """Counts over every pith of the store, computed again only when the store has
        grown. They are keyed by the store's own size, not the published tree's: the states
        they sum are the store's (as ``/state/`` serves them), which runs ahead of the
        published checkpoint while the witnesses lag, so counts keyed by the published size
        stayed frozen at whatever the store held when first counted."""
        tree_size = log.store.tree_size()
        cached = self._totals
        if cached is not None and cached[0] == tree_size:
            return cached[1]
        # summed as they are read: a list of every pith's summary held 540 MB for a
        # million piths, in each worker, whenever the store had grown
        out = log.store.pith_totals()
        self._totals = (tree_size, out)
        return out

    @staticmethod
    def recent(log: Log, tree_size: int) -> list[dict[str, Any]]:
        """The last :data:`RECENT` copies of the published tree of ``tree_size`` leaves,
        newest first. The store may hold more (appended since, or not yet cosigned by the
        witnesses): those are neither shown nor read."""
        out = []
        for seq, copy in log.store.export(after=max(0, tree_size - RECENT), chunk=RECENT):
            if seq > tree_size:
                break
            event = msgspec.json.decode(copy)
            signer = event.get("signer")
            out.append({
                "leaf": seq - 1, "event_id": event.get("event_id"),
                "event_type": _event_type(event),
                "pith_number": event.get("pith_number"),
                # not "signed by" the signer it names (event.html)
                "reason": log.store.invalid_reason(event.get("pith_number"),
                                                   event.get("event_id")),
                "signer_id": _cut(signer.get("signer_id") if isinstance(signer, dict)
                                  else None),
                "created_at": _cut(event.get("created_at")),
            })  # fmt: skip
            if seq == tree_size:  # the last leaf: no read of the chunk after it
                break
        return out[::-1]

    async def home(self, request: Request) -> Response:
        log: Log = request.app.state.log
        published = await log.checkpoint()
        totals = await log.read(self.totals, log)
        recent = await log.read(self.recent, log, published.size)
        return await self.render(request, "home.html", tree_size=published.size,
                                 totals=totals, recent=recent,
                                 checkpoint=published.note.decode("utf-8"))  # fmt: skip

    # --- search -----------------------------------------------------------------------------

    async def search(self, request: Request) -> Response:
        log: Log = request.app.state.log
        query = request.query_params.get("q", "").strip()
        if not query or len(query) > MAX_QUERY:
            return await self.message(request, 400, "Search", "Type an arXiv id (2411.00284, "
                                      "with or without its version), a DOI, a pith number or "
                                      "the first 8, 12 or 16 characters of one.")  # fmt: skip
        if is_pith_number(query):
            return RedirectResponse(f"{root_of(request)}pith/{segment(query)}", 303,
                                    headers=answer_headers("no-cache"))  # fmt: skip
        alias = alias_of(query)
        piths: list[str] = []
        if alias is not None:
            try:
                piths = await log.read(log.store.piths_for_alias, alias)
            except PithlogError as exc:
                # not a form of alias: nothing found; a store that failed to answer (too
                # many readers, retry) is an error, not "no record has the alias"
                if exc.code != "store.alias":
                    raise
                piths = []
        if len(piths) == 1:
            return RedirectResponse(f"{root_of(request)}pith/{segment(piths[0])}", 303,
                                    headers=answer_headers("no-cache"))  # fmt: skip
        # what was typed, between FSI and PDI (Unicode bidi isolates): a right-to-left
        # override in it reversed the sentence around it
        shown = f"\u2068{query}\u2069"
        if piths:
            # at most MOST_LISTED links, as a record's page lists: a registry's key can sign
            # any number of records of one arXiv id (20,000 made a page of 2 MB)
            first = f"; the first {MOST_LISTED}" if len(piths) > MOST_LISTED else ""
            return await self.message(request, 200, "Several records match",
                                      f"{shown} names {len(piths)} records (versions of one "
                                      f"paper share its arXiv id){first}:",
                                      [(f"pith/{segment(p)}", p)
                                       for p in piths[:MOST_LISTED]])  # fmt: skip
        return await self.message(request, 404, "Nothing found",
                                  f"No record of this log has the alias {shown}.")

    # --- a record ---------------------------------------------------------------------------

    def _pith_context(self, log: Log, pith: str, state_bytes: bytes) -> dict[str, Any]:
        # the items shown, not the whole state (page_state): a state of 20 MB took 0.55 s
        # and 226 MB to decode and render, on every request, for a page of a few hundred
        state, totals, title = shown_state(state_bytes, MOST_LISTED)
        # each copy of an equivocated slot is read as its page lays it out, and let go
        # once laid out (stored_payload): read here, up to 200 slots of 6 copies of 1 MiB
        # were all held while the page was made (40 slots of 5 copies of 1 MB: 201 MB,
        # where the page held 4 MB of the room)
        equivocations = []
        for q in state["equivocations"]:
            events = []
            for raw in q["event_ids"][:MOST_SIDE_BY_SIDE]:
                event_id = msgspec.json.decode(raw)
                events.append({"event_id": event_id,
                               "payload": partial(stored_payload, log.store, event_id)})
            equivocations.append({**q, "events": events})
        lists = [(name, _HEADINGS[name]) for name in STATE_LISTS if name in _HEADINGS]
        return {"state": state, "totals": totals, "pith": pith, "equivocations": equivocations,
                "title": title, "lists": lists, "reasons": REASON_MEANINGS}  # fmt: skip

    def _pith_page(self, request: Request, log: Log, pith: str, state_bytes: bytes) -> bytes:
        """The record's page of the state ``state_bytes`` (in a thread of the large answers)."""
        context = self._pith_context(log, pith, state_bytes)
        return self._page(request, log, "pith.html", context)

    async def pith(self, request: Request) -> Response:
        log: Log = request.app.state.log
        pith = request.path_params["pith"]
        if not is_pith_number(pith):
            return await self.message(request, 400, "Not a pith number", "A pith number reads "
                                      "pith:YYYY: and 26 base32 characters.")
        try:
            # a place among the worker's state builds (pithlog.net.state_builds) while the
            # state is built: a 20 MB state takes 43 MB at its peak
            async with log.states.place():
                # the state, or else the pith's status, in one snapshot (Store.lookup)
                found = await log.read(log.store.lookup, pith)
            if isinstance(found, bytes):
                # out of its place (as /state/'s answer: a page waiting for room holds no
                # place), what making the page takes, before the state is decoded: from
                # the room of the answers made of events, as an event's page (16 may wait)
                held = await log.copies.hold(pith_making(found))
        except ServeError as exc:  # serve.busy
            return await self.message(request, status_of(exc), "Busy", exc.message)
        if isinstance(found, bytes):
            room = log.copies
            try:
                # in the threads of the large answers, as an event's page: in anyio's
                # 40, where /checkpoint and the tiles are read
                page = await log.read_copies(self._pith_page, request, log, pith, found)
                del found  # the page's bytes are what is held from here
                body, coded = await packed_apart(request.headers, page)
            except BaseException:
                room.give(held)
                raise
            try:  # what the page's bytes take while sent, the rest given back
                kept = room.keep(held, len(body))
            except ServeError as exc:  # serve.busy
                return await self.message(request, status_of(exc), "Busy", exc.message)
            return HeldAnswer(body, "text/html", _page_headers(coded), room, kept)
        if found is None:
            return await self.message(request, 404, "Unknown record",
                                      f"This log holds no event of {pith}.")
        return await self.message(request, 404, "Pending record",
                                  f"{pith} has {found.event_count} event(s) but no valid "
                                  "record_created yet, so no state: it is pending.")

    # --- an event ---------------------------------------------------------------------------

    async def event(self, request: Request) -> Response:
        """HTML when the client prefers it (a browser), else the JSON route's answer: either
        way with ``Vary: Accept``, so that a shared cache does not hand one to a client that
        asked for the other."""
        response = await self._event(request)
        response.headers.add_vary_header("Accept")
        return response

    async def _event(self, request: Request) -> Response:
        if not _answers_page(request):
            return await get_event(request)
        log: Log = request.app.state.log
        event_id = request.path_params["event_id"]
        if not is_event_id(event_id):
            return await self.message(request, 400, "Not an event id", "An event id reads "
                                      "sha256: and 64 lowercase hex digits.")
        # read, decoded and rendered as the JSON route's copies are (docs/network.md,
        # limits): in the threads of the large answers, holding the room for copies. In
        # anyio's 40 threads, with the copy decoded on the event loop, 400 requests at once
        # for the page of a copy of 960 KB kept a /checkpoint waiting 15 s.
        copy = await log.read_copies(log.store.event, event_id)
        if copy is None:
            return await self.message(request, 404, "Unknown event",
                                      f"This log holds no event {event_id}.")
        try:  # what making the page takes, before the copy is decoded (page_layout.making)
            held = await log.copies.hold(making(len(copy), PAGE_MAKING, PAGE_SHOWN))
        except ServeError as exc:  # serve.busy
            return await self.message(request, status_of(exc), "Busy", exc.message)
        try:
            page = await log.read_copies(self._event_page, request, log, event_id, copy)
            del copy  # the page's bytes are what is held from here
            body, coded = await packed_apart(request.headers, page)
        except BaseException:
            log.copies.give(held)
            raise
        try:  # what the page's bytes take while sent, the rest given back
            kept = log.copies.keep(held, len(body))
        except ServeError as exc:  # serve.busy
            return await self.message(request, status_of(exc), "Busy", exc.message)
        return HeldAnswer(body, "text/html", _page_headers(coded), log.copies, kept)

    def _event_page(self, request: Request, log: Log, event_id: str, copy: bytes) -> bytes:
        """The page of the event of ``copy`` (in a thread of the large answers), of the
        members of the copy it shows, read as far as it shows them (page_state
        .copy_members): decoded whole, a copy of 1 MiB of nested empty arrays took 38.8
        times its copy, though the page shows none of them."""
        event = copy_members(copy)
        event["event_type"] = _event_type(event)
        # a kept invalid copy (evidence) names whatever signer its maker wrote: its page
        # showed "signed by" the registry for a payload the registry never signed
        reason = log.store.invalid_reason(event["pith_number"], event_id)
        return self._page(request, log, "event.html", {"event": event, "reason": reason,
                                                        "reasons": REASON_MEANINGS},
                          Layout(exact=True))  # fmt: skip

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/", self._route(self.home)),
            Route("/search", self._route(self.search)),
            Route("/pith/{pith}", self._route(self.pith)),
            Route("/event/{event_id}", self._route(self.event), middleware=compressed()),
            Route("/static/style.css", _stylesheet),
        ]


def root_of(request: Request) -> str:
    """The way from the page ``request`` asks for to the root the server answers at, as a
    relative reference (RFC 3986 section 4.2): ``./`` for ``/`` and ``/search``, ``../``
    for ``/pith/<pith_number>`` and ``/event/<event_id>``. Every link of a page, and the
    ``Location`` of the search's ``303`` (RFC 9110 section 10.2.2 resolves a relative one
    against the request's URI), starts with it: behind a reverse proxy that serves the log
    under a prefix (docs/network.md, "Running a registry": ``/pith/``), links from the root
    (``/static/style.css``) led out of the prefix, to the proxy's own root, and every page
    lost its stylesheet, its links and its search. ``./`` rather than nothing: a path whose
    first segment holds a colon (``pith:2024:...``) would read as a scheme."""
    depth = request.scope["path"].count("/") - 1
    return "../" * depth if depth > 0 else "./"


def _page_headers(coded: dict[str, str]) -> dict[str, str]:
    """The headers of a page, with those of its compression (``coded``)."""
    return {
        **answer_headers("no-cache"),
        # nothing on these pages runs or loads from elsewhere
        "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self'; "
        "form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
        **coded,
    }  # fmt: skip


def _event_type(event: dict[str, Any]) -> str:
    """The event's type as a page names it: a kept invalid event's may be any JSON value
    (an empty string made a link without text, a long one a line of megabytes), and one
    outside the nine types is "unknown type"."""
    kind = event.get("event_type")
    return kind if isinstance(kind, str) and kind in EVENT_TYPES else "unknown type"


def _cut(value: Any) -> str | None:
    """``value`` as the front page shows it: ``None``, a string, or the JSON of any other
    value, past :data:`MOST_CHARS_RECENT` characters cut with an ellipsis."""
    if value is None:
        return None
    text = value if isinstance(value, str) else msgspec.json.encode(value).decode()
    return text if len(text) <= MOST_CHARS_RECENT else text[:MOST_CHARS_RECENT] + "…"


def _wants_html(request: Request) -> bool:
    """``Accept`` names text/html before any JSON type (what a browser sends)."""
    accept = request.headers.get("accept", "").lower()
    html = accept.find("text/html")
    json = min((i for i in (accept.find("application/json"), accept.find("application/x-ndjson"))
                if i >= 0), default=-1)  # fmt: skip
    return html >= 0 and (json < 0 or html < json)


def _answers_page(request: Request) -> bool:
    """The client asks for a page, not JSON: ``Accept`` names text/html before any JSON
    type, and ``?format=json`` (which asks an event's route for its JSON whatever
    ``Accept`` says) is absent."""
    return request.query_params.get("format") != "json" and _wants_html(request)


_CSS: bytes | None = None


async def _stylesheet(request: Request) -> Response:
    global _CSS
    if _CSS is None:
        _CSS = (resources.files("pithlog.net") / "static" / "style.css").read_bytes()
    return Response(_CSS, media_type="text/css", headers=answer_headers("public, max-age=3600"))


def page_routes() -> list[BaseRoute]:
    """The routes of the pages, to mount before the log's own (the event route negotiates
    between a page and the JSON)."""
    return Pages().routes()

