"""Asking witnesses to cosign a checkpoint (C2SP tlog-witness ``add-checkpoint``), for
``pithlog checkpoint --witness URL --quorum N`` (docs/witness.md).

A witness answers 409 with the size it last cosigned when the request's ``old`` is not it;
the client then proves consistency from that size and asks again, up to
:data:`ADD_REQUESTS` requests in all. Every answer is
checked: only cosignature lines that verify under a keyring witness key count. Each
request is held to one deadline, its answer's head included (:mod:`pithlog.net.deadline`):
a witness cannot hold a ``checkpoint --witness`` or a server's publication by sending a
header line now and then.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import httpx

from pithlog.errors import WitnessError, shown
from pithlog.net.deadline import AnswerDeadline, deadline_client, redirect_note
from pithlog.net.encoding import ACCEPT_ENCODING, read_answer
from pithlog.protocol.keys import KeyEntry
from pithlog.transparency.checkpoint import decimal_of
from pithlog.transparency.witness import AddCheckpoint, Cosigned, witness_lines

TIMEOUT = 10.0
"""Seconds to connect to a witness, or between two reads of its answer; the whole answer,
head and body, has :func:`pithlog.net.encoding.answer_seconds` of
:data:`MAX_ANSWER_BYTES` (about 60 s)."""
MAX_ANSWER_BYTES = 16 << 10
"""Bytes of a witness's answer, decoded: more is ``witness.answer`` (a cosignature line is
under 200)."""
ADD_REQUESTS = 4
"""``add-checkpoint`` requests to one witness for one checkpoint. Two were enough for one
client, but the workers of ``serve --workers N`` each ask for the tree they read: a
witness that another worker moves on between this one's requests answers 409 again, with
its new size (one no larger than the tree asked for, else :class:`WitnessAhead`)."""


@dataclass(frozen=True)
class Asked:
    """What one witness said: its cosignatures (verified), or why there are none."""

    url: str
    lines: bytes
    """Its verified cosignature lines only (what the published checkpoint gets)."""
    cosigned: tuple[Cosigned, ...]
    problem: str | None = None
    ahead: int | None = None
    """The larger size of this log that the witness named in its 409: it cosigned that tree
    since this one was read (another worker of the same server asked it meanwhile)."""


class WitnessAhead(WitnessError):
    """``witness.quorum``, when a witness that did not cosign had cosigned a larger tree
    of the log than the one asked for (:attr:`ahead`, the largest named): it cosigns no
    older one (C2SP tlog-witness: ``old`` must be its size), so the caller that holds that
    tree signs it and asks again."""

    def __init__(self, message: str, ahead: int) -> None:
        super().__init__("quorum", message)
        self.ahead = ahead

    def __reduce__(self) -> tuple[type[WitnessAhead], tuple[str, int]]:  # type: ignore[override]
        return type(self), (self.message, self.ahead)


@dataclass(frozen=True)
class _Answer:
    status_code: int
    content_type: str
    content: bytes
    redirect: str = ""
    """:func:`~pithlog.net.deadline.redirect_note` of the answer."""


def _post(client: httpx.Client, url: str, body: bytes) -> _Answer:
    """The witness's answer, at most :data:`MAX_ANSWER_BYTES` once decoded
    (:func:`pithlog.net.encoding.read_answer`; ``witness.answer`` beyond)."""
    headers = {"Content-Type": "text/plain; charset=utf-8", "Accept-Encoding": ACCEPT_ENCODING}
    with client.stream("POST", url.rstrip("/") + "/add-checkpoint", content=body,
                       headers=headers) as answer:  # fmt: skip
        content = read_answer(answer, MAX_ANSWER_BYTES, lambda why: WitnessError("answer", why))
        return _Answer(answer.status_code, answer.headers.get("content-type", ""), content,
                       redirect_note(answer))  # fmt: skip


def ask_witness(
    client: httpx.Client,
    url: str,
    note: bytes,
    size: int,
    proof_from: Callable[[int], Sequence[bytes]],
    witnesses: Sequence[KeyEntry],
) -> Asked:
    """Send the signed checkpoint ``note`` (of tree ``size``) to the witness at ``url``,
    starting from old size 0 and, on each 409 (:data:`ADD_REQUESTS` requests at most),
    from the size the witness names, with the consistency proof ``proof_from(old)``. A
    witness that names a larger size than ``size`` is :attr:`Asked.ahead`. The deadline
    of each answer holds its head only on a ``client`` made by
    :func:`pithlog.net.deadline.deadline_client`."""
    old = 0
    for _ in range(ADD_REQUESTS):
        proof = tuple(proof_from(old)) if 0 < old < size else ()
        # the whole answer, its head too, within answer_seconds of its cap (the client's
        # client is deadline_client's: httpx alone times each read, and h11 waits for
        # 100 KiB of head)
        deadline = AnswerDeadline(MAX_ANSWER_BYTES)
        try:
            with deadline:
                answer = _post(client, url, AddCheckpoint(old, proof, note).encoded())
        except httpx.HTTPError as exc:
            return Asked(url, b"", (), f"no answer: {shown(deadline.why(exc))}")
        except (httpx.InvalidURL, UnicodeError) as exc:
            # a URL httpx cannot parse, or a host name IDNA cannot encode (the resolver):
            # no witness there, as for a host not found
            return Asked(url, b"", (), f"no answer: {shown(str(exc))}")
        except WitnessError as exc:
            return Asked(url, b"", (), exc.message)
        content = answer.content
        if answer.status_code == 409 and answer.content_type.startswith("text/x.tlog.size"):
            text = content.decode("ascii", "replace").strip()
            # a tree size as a checkpoint writes it (at most 19 digits): int() of the
            # thousands of digits a witness may send raised ValueError, a traceback here
            # and a 500 from every /checkpoint of a serve --witness-url
            known = decimal_of(text)
            if known is not None and known > size:
                return Asked(url, b"", (), f"409 with size {known}: the witness has cosigned "
                             f"a larger tree of this log than {size}", ahead=known)  # fmt: skip
            if known is None or known == old:
                return Asked(url, b"", (), f"409 with size {text[:40]!r}: the witness has "
                             "seen another tree of this log")  # fmt: skip
            old = known
            continue
        if answer.status_code != 200:
            # the witness's words, on the terminal and in witness.quorum's one line: cut,
            # and a line break or a terminal escape in them shown escaped
            said = shown(content.decode("utf-8", "replace").strip()[:200]) or "(no body)"
            if answer.redirect:
                return Asked(url, b"", (), f"status {answer.status_code}{answer.redirect}")
            return Asked(url, b"", (), f"status {answer.status_code}: {said}")
        try:
            lines, found = witness_lines(note, content, witnesses)
        except WitnessError as exc:  # this witness's problem only: the others still count
            return Asked(url, b"", (), exc.message)
        return Asked(url, lines, tuple(found), None if found else "no cosignature by a "
                     "keyring witness key")  # fmt: skip
    return Asked(url, b"", (), "the witness moved while it was asked")


def collect(
    urls: Sequence[str],
    note: bytes,
    size: int,
    proof_from: Callable[[int], Sequence[bytes]],
    witnesses: Sequence[KeyEntry],
    quorum: int,
    transport: httpx.BaseTransport | None = None,
) -> tuple[bytes, list[Asked]]:
    """Ask every witness in turn; the checkpoint with the cosignatures of all that cosigned,
    or ``witness.quorum`` when fewer than ``quorum`` distinct witness keys did
    (:class:`WitnessAhead` when one of those that did not had cosigned a larger tree). The
    client is :func:`pithlog.net.deadline.deadline_client`'s unless a ``transport`` is
    given."""
    asked: list[Asked] = []
    client = (httpx.Client(timeout=TIMEOUT, transport=transport) if transport is not None
              else deadline_client(timeout=TIMEOUT))  # fmt: skip
    with client:
        for url in urls:
            asked.append(ask_witness(client, url, note, size, proof_from, witnesses))
    keys = {c.key_id for a in asked for c in a.cosigned}
    if len(keys) < quorum:
        # a witness that cosigned with keys already counted (two URLs of one witness)
        # adds none: say so, or the line would name no witness that fell short
        counted: set[str] = set()
        said: list[str] = []
        for a in asked:
            mine = {c.key_id for c in a.cosigned}
            if a.problem:
                said.append(f"{a.url}: {a.problem}")
            elif mine and mine <= counted:
                names = ", ".join(shown(k) for k in sorted(mine))
                said.append(f"{a.url}: cosigned by {names}, a key an earlier URL's witness "
                            "cosigned with: one witness")  # fmt: skip
            counted |= mine
        why = "; ".join(said)
        message = (f"{len(keys)} witness(es) cosigned, {quorum} required"
                   + (f" ({why})" if why else ""))  # fmt: skip
        ahead = max((a.ahead for a in asked if a.ahead is not None), default=None)
        raise WitnessError("quorum", message) if ahead is None else WitnessAhead(message, ahead)
    return note + b"".join(a.lines for a in asked if a.cosigned), asked
