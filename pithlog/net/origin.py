"""The HTTP client of a served log, as ``pithlog mirror`` reads it (``docs/network.md``,
"Running a mirror"): bounded GETs of its checkpoint, tiles, entry bundles, bundles of
copies and consistency proofs, and the C2SP tlog-tiles fallback from a partial tile a
server has dropped to its full tile. Nothing here is verified: :mod:`pithlog.net.mirror`
verifies everything before it stores anything."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from pithlog.errors import MirrorError, PithlogError, ProofError
from pithlog.net.deadline import AnswerDeadline, deadline_client, redirect_note
from pithlog.net.encoding import ACCEPT_ENCODING, read_answer
from pithlog.protocol.canonical import MAX_ENVELOPE_BYTES, shape
from pithlog.transparency import merkle, tiles
from pithlog.transparency.checkpoint import MAX_NOTE_BYTES
from pithlog.transparency.proofs import MAX_PROOF_BYTES, ConsistencyProof, parse_consistency_proof

WIDTH = tiles.WIDTH
LEAF_DATA = 64
"""pithlog's entries: event_id (32) || SHA-256 of the copy's JCS bytes (32)."""


@dataclass(frozen=True)
class Limits:
    """The most the mirror reads of each answer (an origin is not trusted with memory).
    ``tile``, ``bundle`` and ``copies`` are a full resource's (``WIDTH`` hashes, entries,
    copies); a partial one of width ``W`` is read to ``W/WIDTH`` of it (:meth:`Origin.part`),
    and so is its full one served in its place, of which the first ``W`` are kept."""

    checkpoint: int = MAX_NOTE_BYTES
    tile: int = WIDTH * merkle.HASH_SIZE
    bundle: int = WIDTH * (2 + LEAF_DATA)
    copies: int = WIDTH * (MAX_ENVELOPE_BYTES + 1)
    proof: int = MAX_PROOF_BYTES


LIMITS = Limits()
TIMEOUT = 60.0
"""Seconds to connect, or between two reads of an answer."""
ERROR_BYTES = 4 << 10
"""The most read of an error answer, to show what the origin said."""


def _said(response: httpx.Response) -> str:
    """What an error answer says, as ``: [code] message`` when it is pithlog's JSON error
    (a ``503 witness.quorum`` from ``/checkpoint`` tells the operator to wait for the
    witnesses, where the bare status told nothing), else nothing."""
    try:
        body = read_answer(response, ERROR_BYTES, lambda why: MirrorError("fetch", why))
        doc: Any = shape(body, Any)
        said = f"[{str(doc['error'])[:80]}] {str(doc['message'])[:400]}"
    except (PithlogError, TypeError, KeyError, httpx.HTTPError):
        return ""
    # the origin's words go into a one-line error: no line breaks or control characters
    return ": " + "".join(c if c.isprintable() else " " for c in said)


def out_of_time(exc: PithlogError, ends: float | None) -> bool:
    """Whether ``exc`` may be of ``ends`` passed (:attr:`Origin.ends`, :func:`time.monotonic`):
    an answer cut there or not asked for (``mirror.fetch``), or the tiles that tell a
    spoiled consistency proof from a split view left unread (``mirror.unproven``). What the
    origin served that does not verify is never."""
    return (ends is not None and time.monotonic() >= ends
            and exc.code in ("mirror.fetch", "mirror.unproven"))  # fmt: skip


class Origin:
    """The HTTP client of a served log at ``url``: bounded GETs, and the tlog-tiles
    fallback from a dropped partial tile to its full tile. ``ends`` (:func:`time.monotonic`),
    when given, bounds every answer of this origin, from any thread: an answer in flight
    then is cut there, and none is asked for after it (``mirror.fetch``, which a caller
    tells apart with :func:`out_of_time`). ``pithlog audit --max-time`` holds its mirror,
    catch-ups and states to it."""

    def __init__(self, url: str, client: httpx.Client | None = None,
                 limits: Limits = LIMITS, ends: float | None = None) -> None:  # fmt: skip
        self.url = url.rstrip("/")
        self._client = client or deadline_client(timeout=TIMEOUT, follow_redirects=False)
        self._own = client is None
        self.limits = limits
        self.ends = ends
        self.fetched = 0
        """Bytes received (bodies, decompressed)."""

    def close(self) -> None:
        if self._own:
            self._client.close()

    def __enter__(self) -> Origin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def get(self, path: str, limit: int, too_long: Callable[[str], Exception] | None = None,
            most: float | None = None, prefix: bool = False) -> bytes | None:  # fmt: skip
        """The body at ``path`` (``None``: 404), read up to ``limit`` bytes; a body over
        ``limit`` is ``too_long(why)`` when given (:func:`read_answer`), else mirror.fetch.
        ``most``: seconds the answer may take when that is less than its deadline (what is
        left of the caller's own time, ``audit --max-time``). ``prefix``: the first
        ``limit`` bytes of a body that may be longer, the rest left unread
        (:func:`read_answer`)."""
        url = f"{self.url}/{path}"
        if self.ends is not None:
            left = self.ends - time.monotonic()
            if left <= 0:
                raise MirrorError("fetch", f"{url}: not asked for: the time given ran out")
            most = left if most is None else min(most, left)
        # the whole answer, its head too, within answer_seconds of its cap
        deadline = AnswerDeadline(limit, most)
        try:
            headers = {"Accept-Encoding": ACCEPT_ENCODING}
            with deadline, self._client.stream("GET", url, headers=headers) as response:
                if response.status_code == 404:
                    return None
                if response.status_code != 200:
                    raise MirrorError("fetch", f"{url} answered {response.status_code}"
                                      f"{redirect_note(response) or _said(response)}")  # fmt: skip
                body = read_answer(response, limit,
                                   lambda why: MirrorError("fetch", f"{url}: {why}"),
                                   too_long, prefix)  # fmt: skip
        except (httpx.HTTPError, httpx.InvalidURL, UnicodeError) as exc:
            # a URL httpx cannot parse (InvalidURL), or a host name IDNA cannot encode
            # (UnicodeError, from the resolver): the URL is wrong, as for a host not found
            why = deadline.why(exc) if isinstance(exc, httpx.HTTPError) else str(exc)
            raise MirrorError("fetch", f"{url}: {why}") from exc
        self.fetched += len(body)
        return bytes(body)

    def _required(self, path: str, limit: int, prefix: bool = False) -> bytes:
        data = self.get(path, limit, prefix=prefix)
        if data is None:
            raise MirrorError("fetch", f"{self.url}/{path} is not there (404)")
        return data

    def checkpoint(self) -> bytes:
        return self._required("checkpoint", self.limits.checkpoint)

    @staticmethod
    def part(limit: int, width: int) -> int:
        """The cap of a partial resource of ``width`` whose full one's is ``limit``: ``width``
        times the most one hash, entry or copy takes (a partial bundle of copies of width 1
        is 1 MiB + 1, where it was read to the 256 MiB of a full one)."""
        return -(-limit * width // WIDTH)

    def _partial_or_full(self, path: Callable[[int], str], width: int, limit: int) -> bytes:
        """A partial resource of ``width`` (read to its own cap, :meth:`part`), or (dropped
        once its full one exists, C2SP tlog-tiles) the first bytes of the full one, as many
        as the partial's cap: the first ``width`` hashes, entries or copies, which are all
        the caller keeps, and the rest left unread. An origin that answered 404 for every
        partial one had the full one read to ``limit`` (256 MiB of copies for one leaf)."""
        if width == WIDTH:
            return self._required(path(WIDTH), limit)
        cap = self.part(limit, width)
        data = self.get(path(width), cap)
        return data if data is not None else self._required(path(WIDTH), cap, prefix=True)

    def tile(self, tile: tiles.Tile) -> bytes:
        data = self._partial_or_full(lambda w: tiles.Tile(tile.level, tile.index, w).path(),
                                     tile.width, self.limits.tile)  # fmt: skip
        return data[: tile.width * merkle.HASH_SIZE]

    def bundle(self, index: int, width: int) -> bytes:
        data = self._partial_or_full(lambda w: tiles.Tile(0, index, w).entries_path(), width,
                                     self.limits.bundle)  # fmt: skip
        return data if width == WIDTH or len(data) == width * (2 + LEAF_DATA) else \
            _first_entries(data, width)  # fmt: skip

    def copies(self, index: int, width: int) -> list[bytes]:
        data = self._partial_or_full(lambda w: "copies/" + tiles.tile_path_suffix(index, w),
                                     width, self.limits.copies)  # fmt: skip
        # the first `width` lines, found one by one: split() would make a list item of
        # every line of the answer, and 8 KB of zstd hold 255 MiB of newlines (2.4 GB)
        lines: list[bytes] = []
        at = 0
        while len(lines) < width and at < len(data):
            end = data.find(b"\n", at)
            end = len(data) if end < 0 else end
            lines.append(data[at:end])
            at = end + 1
        return lines

    def consistency(self, old: int, new: int) -> ConsistencyProof | None:
        data = self.get(f"proof/consistency/{old}/{new}", self.limits.proof)
        if data is None:
            return None
        try:
            return parse_consistency_proof(data)
        except ProofError as exc:
            raise MirrorError("unproven", f"the consistency proof {old} -> {new} is "
                              f"malformed: {exc.message}") from exc  # fmt: skip


def _first_entries(data: bytes, width: int) -> bytes:
    """The first ``width`` entries of a full bundle served in place of a dropped partial."""
    at = 0
    for _ in range(width):
        if at + 2 > len(data):
            break
        at += 2 + int.from_bytes(data[at : at + 2], "big")
    return data[:at]
