"""The event envelope (spec section 4): the door for events, and digests over the JCS bytes.

- :func:`admit` is the door for envelopes: a parsed value is attributed to a record (an
  object with a well-formed ``event_id`` and ``pith_number``, JCS at most 1 MiB) or refused;
  :func:`parse_envelope` takes untrusted bytes there, :func:`readmit` stored bytes back.
- :func:`projection_spans`, :func:`body_sha256` and :func:`observation_digest` read the parts
  of an envelope's (or a payload's) JCS bytes and digest them without encoding them again.
- :func:`sign_event` builds a signed envelope.

The table of event types (spec section 5) is :mod:`pithlog.protocol.event_types`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from pithlog.errors import DoorError
from pithlog.protocol.canonical import (
    JSON,
    MAX_ENVELOPE_BYTES,
    decode,
    digest,
    jcs,
    parse,
    value_text,
)
from pithlog.protocol.keys import SigningKey
from pithlog.protocol.records import is_pith_number
from pithlog.protocol.text_forms import encode_b64

ENVELOPE_MEMBERS = frozenset(
    {
        "event_type",
        "pith_number",
        "target",
        "created_at",
        "signer",
        "payload",
        "event_id",
        "signature_b64",
    }
)
"""Spec 4: the envelope is closed; exactly these members."""

SIGNER_MEMBERS = frozenset({"key_id", "public_key_fingerprint", "signer_id", "signer_type"})
"""Spec 3: the signer object is closed; exactly these members."""

_EVENT_ID = re.compile(r"sha256:[0-9a-f]{64}")


def is_event_id(value: object) -> bool:
    """``"sha256:"`` + 64 lowercase hex."""
    return isinstance(value, str) and _EVENT_ID.fullmatch(value) is not None


@dataclass(frozen=True, slots=True)
class Envelope:
    """An envelope that passed the door: attributable to a record, maybe still invalid.

    ``value`` is the parsed JSON object exactly as received; ``encoded`` its JCS bytes (the
    byte string that section 7 step 0 compares, and what a store keeps).
    """

    value: dict[str, Any]
    event_id: str
    pith_number: str
    encoded: bytes
    spans: tuple[int, int, int, int] | None = field(default=None, compare=False, repr=False)
    """:func:`projection_spans` of this envelope once computed (a state and a store's index
    both need them): a cache, set once, not part of the value."""
    facts: tuple[RecordFacts] | None = field(default=None, compare=False, repr=False)
    """Check 14's facts (:func:`pithlog.protocol.checks.record_facts`) in a 1-tuple, carried
    by an envelope decoded without its payload (:func:`readmit_light`); ``None`` for any
    other, whose facts are read from its payload. Not part of the value."""


RecordFacts = bytes | str | tuple[str, ...] | None
"""What check 14 of an event's type needs of its payload and target (spec 5.3): the part
of the rule that reads the event (:data:`pithlog.protocol.event_types.FactsRule`)."""

Spans = tuple[int, int, int, int]
"""``(payload_start, payload_end, signer_start, signer_end)`` in an envelope's JCS bytes
(:func:`projection_spans`)."""

Hints = tuple[Spans, RecordFacts]
"""What the appending process needs of a copy its helpers judged, besides its JCS bytes and
verdict, to decode it without its payload (:func:`readmit_light`): its spans and its check
14 facts (``None`` for a copy that failed checks 1-12: never compared)."""


def admit(value: JSON, encoded: bytes | None = None) -> Envelope:
    """Attribute a parsed value to a record, or raise :class:`DoorError` (spec 4)."""
    if not isinstance(value, dict):
        raise DoorError("not_object", "an event must be a JSON object")
    if not is_event_id(value.get("event_id")):
        raise DoorError(
            "event_id", 'no event_id string of the form "sha256:" + 64 lowercase hex', "/event_id"
        )
    if not is_pith_number(value.get("pith_number")):
        raise DoorError(
            "pith_number",
            "no pith_number string of the form pith:YYYY:<26 base32 characters>",
            "/pith_number",
        )
    if encoded is None:
        encoded = jcs(value)
    if len(encoded) > MAX_ENVELOPE_BYTES:
        raise DoorError(
            "too_large",
            f"JCS encoding of the envelope is {len(encoded)} bytes; at most {MAX_ENVELOPE_BYTES}",
        )
    return Envelope(value, value["event_id"], value["pith_number"], encoded)


def admit_value(value: object) -> Envelope:
    """The door for an event given as a Python value (what :func:`sign_event` returns, or
    a caller's dict): written as JSON text and read back by :func:`parse_envelope`, so that
    it meets every rule bytes meet. Given to :func:`admit` alone, a float, an integer past
    2^53 - 1, a lone surrogate or nesting past 64 would be stored, and every later replay
    and import of the log would refuse it."""
    return parse_envelope(value_text(value))


def parse_envelope(data: bytes) -> Envelope:
    """The door for one event: untrusted bytes to an :class:`Envelope`, or :class:`DoorError`."""
    value, encoded = decode(data, max_encoded=MAX_ENVELOPE_BYTES)
    return admit(value, encoded)


def parse_envelopes(lines: Iterable[bytes]) -> list[Envelope | DoorError]:
    """:func:`parse_envelope` of each line: its envelope, or in its place the door's
    refusal (a refusal never stops the others).

    A refusal is kept without its traceback and the exception it was raised from (what a
    refusal sent to another process loses anyway): their frames lead back to this one,
    whose ``out`` holds the refusal, a reference cycle that only the cyclic collector
    frees, and the helpers that call this run with it paused (:mod:`pithlog.cli`). Each
    refused line then kept its frames and its bytes for as long as the helper lived: 41 MB
    of short junk lines grew each of ``reduce``'s helpers past 1.5 GB."""
    out: list[Envelope | DoorError] = []
    for line in lines:
        try:
            out.append(parse_envelope(line))
        except DoorError as exc:
            out.append(exc.unchained())  # PithlogError.unchained
    return out


_ANY = msgspec.json.Decoder()


def readmit(encoded: bytes) -> Envelope:
    """The envelope again from its JCS bytes, which passed the door before: a stored copy
    (``replay`` is what puts every stored byte through the door again), or a copy that a
    reduction kept as bytes between step 0 and its pith's turn. No checks: decoding JCS
    gives back the value it encodes."""
    value = _ANY.decode(encoded)
    return Envelope(value, value["event_id"], value["pith_number"], encoded)


def readmit_light(encoded: bytes, hints: Hints) -> Envelope:
    """:func:`readmit` without decoding the payload: ``value`` has every member but
    ``payload`` (so that a use of it fails loudly), and the envelope carries the spans and
    check 14 facts of ``hints``, which the process that judged the copy took from these
    same bytes (:func:`pithlog.protocol.checks.reduction_hints`).

    Steps 1-4 of a reduction, and the store's index of it, need of an event other than R
    only its top-level members, its check 14 facts and its spans (where the state
    document's slices of its JCS lie): this is what an append's writing process decodes of
    the copies its helpers judged (:func:`pithlog.store.append_judging.receive`), about 2
    us per event against 9 for decoding and freeing a whole one of the bench's registry
    workload. The payload's bytes are replaced by ``0`` before decoding, which leaves the
    JSON well formed."""
    spans, facts = hints
    value = _ANY.decode(b"".join((encoded[: spans[0]], b"0", encoded[spans[1] :])))
    del value["payload"]
    return Envelope(value, value["event_id"], value["pith_number"], encoded, spans, (facts,))


def body_of(envelope: dict[str, Any]) -> dict[str, Any]:
    """``body``: the envelope without ``event_id`` and ``signature_b64`` (spec 4)."""
    return {k: v for k, v in envelope.items() if k != "event_id" and k != "signature_b64"}


# --- where a projection's parts sit in the envelope's JCS ---------------------------------

_json_string = msgspec.json.Encoder().encode


def projection_spans(envelope: Envelope) -> tuple[int, int, int, int]:
    """``(payload_start, payload_end, signer_start, signer_end)`` within ``envelope.encoded``.

    For an envelope that passed check 1 (exactly the eight members), its JCS is
    ``{"created_at":…,"event_id":…,"event_type":…,"payload":P,"pith_number":…,
    "signature_b64":…,"signer":S,"target":T}``, so the JCS of the payload and of the signer
    (and the target's JSON string, after S) are slices of it: a state document can be built
    from stored bytes without decoding or re-encoding any payload.
    """
    if envelope.spans is not None:
        return envelope.spans
    event = envelope.value
    encoded = envelope.encoded
    payload_start = (
        len(b'{"created_at":') + len(_json_string(event["created_at"]))
        + len(b',"event_id":') + len(_json_string(envelope.event_id))
        + len(b',"event_type":') + len(_json_string(event["event_type"]))
        + len(b',"payload":')
    )  # fmt: skip
    signer = jcs(event["signer"], members=4)  # check 1: exactly four string members
    signer_end = len(encoded) - 1 - len(_json_string(event["target"])) - len(b',"target":')
    signer_start = signer_end - len(signer)
    payload_end = (
        signer_start - len(b',"signer":')
        - len(_json_string(event["signature_b64"])) - len(b',"signature_b64":')
        - len(_json_string(envelope.pith_number)) - len(b',"pith_number":')
    )  # fmt: skip
    if encoded[signer_start:signer_end] != signer or encoded[payload_end] != ord(","):
        raise ValueError(f"{envelope.event_id} is not a well-formed envelope in JCS form")
    spans = (payload_start, payload_end, signer_start, signer_end)
    object.__setattr__(envelope, "spans", spans)  # the cache of a frozen value, set once
    return spans


def body_sha256(envelope: Envelope) -> str:
    """``digest(body)`` (spec 4) of an envelope that passed check 1, from its JCS bytes.

    JCS writes an object's members sorted and each member on its own, so the JCS of the
    body is the envelope's JCS without its ``"event_id"`` and ``"signature_b64"`` members:
    three slices of ``envelope.encoded`` (found with :func:`projection_spans`), hashed
    without encoding the body again. This relies on what :class:`Envelope` promises,
    ``encoded`` is the JCS of ``value``; bytes whose member boundaries are not where JCS
    puts them (never the case for what the door returns) are digested the plain way.
    """
    event = envelope.value
    encoded = envelope.encoded
    try:
        _, payload_end, signer_start, _ = projection_spans(envelope)
    except ValueError:
        return digest(body_of(event))
    eid_start = len(b'{"created_at":') + len(_json_string(event["created_at"]))
    eid_member = b',"event_id":' + _json_string(envelope.event_id)
    eid_end = eid_start + len(eid_member)
    sig_member = b',"signature_b64":' + _json_string(event["signature_b64"])
    sig_end = signer_start - len(b',"signer":')
    sig_start = sig_end - len(sig_member)
    if (
        encoded[eid_start:eid_end] != eid_member
        or encoded[sig_start:sig_end] != sig_member
        or sig_start != payload_end + len(b',"pith_number":')
        + len(_json_string(envelope.pith_number))
    ):
        return digest(body_of(event))
    sha = hashlib.sha256(encoded[:eid_start])
    sha.update(encoded[eid_end:sig_start])
    sha.update(encoded[sig_end:])
    return sha.hexdigest()


# --- the digest of a citation's observation (spec 5.2), from the payload's JCS ------------


_OBSERVATION_OPEN = b'{"observation":'
_DIGEST_MEMBER = "observation_digest"


def observation_digest(p: dict[str, Any], payload_jcs: bytes | None = None) -> str:
    """``digest`` of the payload's observation without its ``observation_digest`` member
    (spec 5.2), ``p["observation"]`` being an object that holds that member as a string.

    JCS writes an object's members sorted, each on its own, so with the payload's JCS at
    hand the JCS of the observation is a slice of it when ``observation`` is the payload's
    only member, and the JCS of the observation without the member is that slice without
    the member's bytes, ``,"observation_digest":"…"`` (never its first member: ``citation``
    sorts before it). Those bytes begin with a comma and a quote that no JSON string holds
    unescaped, so where they occur a member of that name and value begins; occurring once,
    they are the observation's own member (a nested object may hold its twin: then, as for
    anything else unproven, the digest is taken the plain way). As :func:`body_sha256`
    relies on ``Envelope.encoded``, this relies on ``payload_jcs`` being the JCS of ``p``:
    only where the member is cut are the bytes checked."""
    obs = p["observation"]
    if payload_jcs is not None and len(p) == 1 and payload_jcs.startswith(_OBSERVATION_OPEN):
        member = b',"observation_digest":' + _json_string(obs[_DIGEST_MEMBER])
        start = payload_jcs.find(member)  # one scan: to the member, then past it
        if start > 0 and payload_jcs.find(member, start + 1) < 0 and payload_jcs[-2:] == b"}}":
            view = memoryview(payload_jcs)  # the observation's JCS: [len(open):-1]
            sha = hashlib.sha256(view[len(_OBSERVATION_OPEN) : start])
            sha.update(view[start + len(member) : -1])
            return sha.hexdigest()
    return digest({k: v for k, v in obs.items() if k != _DIGEST_MEMBER})



# --- building and signing -----------------------------------------------------------------


def sign_event(
    key: SigningKey,
    event_type: str,
    pith_number: str,
    target: str,
    created_at: str,
    payload: dict[str, Any],
) -> dict[str, Any]:
    """A signed envelope (spec 4), members in JCS order.

    Builds what the signer means; it does not judge it (``pithlog reduce`` does), except
    that the result must pass the door.
    """
    body = {
        "created_at": created_at,
        "event_type": event_type,
        "payload": payload,
        "pith_number": pith_number,
        "signer": key.signer,
        "target": target,
    }
    body = parse(value_text(body))  # the door first: nothing but v1 JSON is signed
    body_digest = digest(body)
    envelope = dict(body)
    envelope["event_id"] = "sha256:" + body_digest
    envelope["signature_b64"] = encode_b64(key.sign(bytes.fromhex(body_digest)))
    envelope = {k: envelope[k] for k in sorted(envelope)}
    admit_value(envelope)  # a payload of floats or deep nesting is refused here already
    return envelope

