"""pithlog's reducer against an independent model of the spec (``model.py``).

Both read the same bytes or values and must produce the same state documents byte for
byte (and the same pending piths, with their counts and invalid events): on every
conformance case, on the published seed, on generated universes of events
(``universe.py``), on hostile universes whose events are re-signed after a change at any
place, and on every single type confusion of every place of a valid event of each type.
``HYPOTHESIS_PROFILE=fuzz`` raises the example budget (60 to 1,000) and adds a keyring with
validity windows to the single changes.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pithlog
from pithlog.testing import TEST_SIGNERS, test_key, test_keyring_entries

from . import model, model_values
from .universe import KEYRING, build, event_sets, states

VECTORS = Path(__file__).resolve().parents[2] / "vectors"
CASES = sorted(p.name for p in (VECTORS / "cases").iterdir() if p.is_dir())
SEED = VECTORS / "seeds" / "state-2411.00284.json"
FUZZ = os.environ.get("HYPOTHESIS_PROFILE") == "fuzz"
MODEL_KEYRING = model_values.make_keyring(test_keyring_entries())


def pithlog_states(data: bytes, keyring: pithlog.Keyring) -> dict[str, Any]:
    lines = [line for line in data.split(b"\n") if line.strip(b" \t\r")]
    return _outcomes(pithlog.reduce_events([pithlog.parse_envelope(x) for x in lines], keyring))


def _outcomes(results: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pith, result in results.items():
        if isinstance(result, pithlog.Pending):
            out[pith] = ("pending", result.event_count, sorted(result.invalid.items()))
        else:
            out[pith] = pithlog.render(pithlog.state_document(result))
    return out


@pytest.mark.parametrize("name", CASES)
def test_vector_case(name: str) -> None:
    folder = VECTORS / "cases" / name
    keyring_bytes = (folder / "keyring.json").read_bytes()
    events = (folder / "events.jsonl").read_bytes()
    ring = model_values.load_keyring(keyring_bytes)
    expected = model.reduce(model_values.read_lines(events), ring)
    assert pithlog_states(events, pithlog.load_keyring(keyring_bytes)) == expected
    # and both agree with the committed files
    assert b"".join(s + b"\n" for s in expected.values() if isinstance(s, bytes)) == (
        folder / "expected.jsonl").read_bytes()
    assert [p for p, s in expected.items() if not isinstance(s, bytes)] == json.loads(
        (folder / "pending.json").read_bytes())


def test_seed_rerenders_byte_for_byte() -> None:
    data = SEED.read_bytes()
    doc = model_values.parse(data)
    assert pithlog.render(doc) == data
    # The model rebuilds the state from the seed's own projections (§8).
    current = doc["current"]
    record = {**current["record_created"], "event_type": "record_created"}
    applied = [record] + [
        {**proj, "event_type": event_type}
        for event_type, (lst, _, _) in model.TYPES.items() if lst is not None
        for proj in current[lst]
    ]
    rebuilt = model.state(doc["pith_number"], doc["event_count"], record, applied, [], {})
    assert model.render(rebuilt) == data


BUDGET = settings(deadline=None, max_examples=1000 if FUZZ else 60,
                  suppress_health_check=[HealthCheck.too_slow])


def envelopes_of(values: list[dict[str, Any]]) -> list[pithlog.Envelope]:
    return [pithlog.admit(v) for v in values]


def test_the_model_keyring_is_pithlogs() -> None:
    assert {k: e["fingerprint"] for k, e in MODEL_KEYRING.items()} == {
        k: e.fingerprint for k, e in KEYRING.items()}


@BUDGET
@given(specs=event_sets(), data=st.data())
def test_generated_universes(specs: list[tuple[Any, ...]], data: st.DataObject) -> None:
    values = [build(s) for s in specs]
    extra = data.draw(st.lists(st.sampled_from(values), max_size=4), label="duplicates")
    values = data.draw(st.permutations(values + extra), label="order")
    assert states(envelopes_of(values)) == model.reduce(values, MODEL_KEYRING)


# --- Hostile universes: events re-signed after a change at any place of their body, so that
# every check, not only the signature, meets odd values. Built with the model's own JCS and
# the fixed test keys' ``sign``; pithlog builds none of them.

KEYS = {name: test_key(name) for name in TEST_SIGNERS}
# Two more author keys whose key_ids sort differently by code point and by UTF-16 (§1).
for _label in ("k\ue000", "k\U0001f600"):
    KEYS[_label] = pithlog.SigningKey.from_seed(
        hashlib.sha256(_label.encode()).digest(), _label, "author.test.invalid", "author")
SIGNER_OF = {"record_created": "registry", "graph_snapshot": "registry",
             "author_attestation": "author", "timestamp_anchor": "tsa",
             "storage_attestation": "mirror", "citation_signature": "indexer",
             "replication_record": "replicator", "correction": "registry",
             "mirror_hint": "mirror"}
WINDOWS = {"tsa": {"not_before": "2026-01-02T00:00:00Z"},
           "mirror": {"not_after": "2026-02-01T00:00:00Z"},
           "author": {"revoked_at": "2026-01-02T00:00:00Z"},
           "registry_2": {"not_before": "2026-01-01T00:00:00Z",
                          "not_after": "2026-01-01T00:00:01Z"}}
EXTRA = [KEYS["k\ue000"].keyring_entry(), KEYS["k\U0001f600"].keyring_entry()]
KEYRINGS = [test_keyring_entries() + EXTRA, test_keyring_entries(**WINDOWS) + EXTRA]
TIMES = ["2026-01-01T00:00:00Z", "2026-01-01T00:00:01Z", "2026-01-02T00:00:00Z",
         "2026-02-01T00:00:00Z", "2025-12-31T23:59:59Z"]
ODD_TIMES = ["2024-02-29T00:00:00Z", "2023-02-29T00:00:00Z", "0000-01-01T00:00:00Z",
             "0001-01-01T00:00:00Z", "2026-01-01T24:00:00Z", "2026-01-01T00:00:60Z",
             "2026-01-01t00:00:00Z", "2026-01-01T00:00:00+00:00", "2026-1-01T00:00:00Z",
             "\uff12\uff10\uff12\uff16-01-01T00:00:00Z", "2026-01-01T00:00:00.0Z",
             "2026-13-01T00:00:00Z", "2026-04-31T00:00:00Z", "2026-01-01T00:00:00Z\n",
             " 2026-01-01T00:00:00Z", "2026-01-01T0\u0661:00:00Z"]
H = "ab" * 32
ODD_VALUES = [None, True, False, 0, 1, 2, -1, 2**53 - 1, "", "x", "X", "record", "graph",
              "AA==", "QR==", "QQ", "AA==\n", H, H.upper(), H[:63], "sha256:" + H,
              [], ["x"], {}, {"a": 1}, "claim:", "claim:x", "citation:", "citation:o",
              "event:sha256:" + H, "event:sha256:" + H.upper(), "pith_registry", "author",
              "mirror", "ed25519", "canonical_sha256_bytes", "erratum", "retraction",
              "replicated", "\u0130", "2411.00284", "2411.00284v2", *TIMES, *ODD_TIMES,
              # what JCS escapes, and member names whose UTF-16 and code point orders differ
              "\x00\x1f\x7f\u2028\ufeff\"\\/", {"\ue000": 1, "\U0001f600": [2], "\u00e9": {}}]

TARGETS = ["record", "graph", "claim:", "claim:x", "citation:", "citation:o1", "event:sha256:",
           "event:sha256:" + H, "event:sha256:" + H.upper(), "event:sha256:" + H + "\n",
           "Record", "record ", "claim", "event:" + H, ""]

CONFUSIONS = [None, True, False, 0, 1, 2, -1, "", "1", [], {}]

CANONICAL_RECORDS = st.fixed_dictionaries({
    "metadata": st.fixed_dictionaries({"submitted_at": st.sampled_from(
        ["2024-11-01T00:43:54Z", "0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z"])},
        optional={"title": st.sampled_from(["t", "\u00e9\U0001f600", "\u2028"])}),
    "schema_version": st.just("1.0"),
    "source": st.fixed_dictionaries({
        "kind": st.sampled_from(["arxiv", "doi", "handle", "ARXIV", ""]),
        "id": st.sampled_from(["2411.00284", "10.5555/\u00c9TUDE-Ab", "2304.11277", "",
                               "A\u0130Z"]),
        "version": st.sampled_from([1, 2, 0, -1, 2**53 - 1]),
    }),
})


def b64e(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def seal(name: str, body: dict[str, Any]) -> dict[str, Any]:
    """An envelope of ``body`` with its event_id and a signature by test key ``name``."""
    d = model_values.digest(body)
    return {**body, "event_id": "sha256:" + d,
            "signature_b64": b64e(KEYS[name].sign(bytes.fromhex(d)))}


def record_body(canonical: dict[str, Any], created_at: str) -> dict[str, Any]:
    key = KEYS["registry"]
    sha = model_values.digest(canonical)
    source = canonical.get("source")
    source = source if isinstance(source, dict) else {}
    receipt = {"algorithm": "ed25519", "canonical_sha256": sha, "key_id": key.key_id,
               "public_key_fingerprint": key.fingerprint, "signed_message":
               "canonical_sha256_bytes", "signature_b64": b64e(key.sign(bytes.fromhex(sha)))}
    payload = {"attestation_state": "computed", "canonical_record": canonical,
               "canonical_sha256": sha, "receipt": receipt, "source_id": source.get("id"),
               "source_kind": source.get("kind"), "source_version": source.get("version")}
    try:
        pith = model_values.pith_number_of(canonical, sha)
    except (KeyError, TypeError):
        pith = "pith:2024:" + model_values.b32_of(sha)
    return {"created_at": created_at, "event_type": "record_created", "payload": payload,
            "pith_number": pith, "signer": key.signer, "target": "record"}


def other_body(event_type: str, record: dict[str, Any], created_at: str, n: int,
               side: str) -> dict[str, Any]:
    canonical = record["payload"]["canonical_record"]
    target = "record"
    payload: dict[str, Any]
    if event_type == "graph_snapshot":
        target = "graph"
        payload = {"graph_snapshot": {"source": dict(reversed(canonical["source"].items())),
                                      "n": n}, "verdict_id": None if n % 2 else "v"}
    elif event_type == "author_attestation":
        target = ("record", "claim:c\u2028\ue000", "claim:c\u2028\U0001f600")[n]
        payload = {"statement": f"s{n}"}
    elif event_type == "timestamp_anchor":
        if n % 2:
            target = "event:sha256:" + record["event_id"][7:]
        payload = {"anchor_kind": "k", "anchored_sha256": target[13:] if n % 2 else
                   record["payload"]["canonical_sha256"], "proof_b64": "" if n else "AA=="}
    elif event_type == "storage_attestation":
        payload = {"byte_size": n, "content_sha256": H, "locator": "l"}
    elif event_type == "citation_signature":
        target = f"citation:o{n}"
        obs = {"citation": {side: {"arxiv_id": canonical["source"]["id"]}},
               "observation_id": f"o{n}"}
        seal = "sha256:" + model_values.digest(obs)
        payload = {"observation": {**obs, "observation_digest": seal}}
    elif event_type == "replication_record":
        target = "claim:x" if n % 2 else "record"
        payload = {"outcome": "inconclusive", "report": "r"}
    elif event_type == "correction":
        payload = {"correction_type": "withdrawal", "notice": "n"}
    else:
        payload = {"locator": f"l{n}"}
    return {"created_at": created_at, "event_type": event_type, "payload": payload,
            "pith_number": record["pith_number"], "signer": KEYS[SIGNER_OF[event_type]].signer,
            "target": target}


def _paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*path, k))
    return out


def mutate(draw: st.DrawFn, body: dict[str, Any], depth: int = 1) -> dict[str, Any]:
    """``body`` with one place (``depth`` or more levels down) replaced, removed, or given
    an extra member."""
    body = json.loads(json.dumps(body))
    paths = [q for q in _paths(body) if len(q) >= depth]
    deep = [q for q in paths if q[0] == "payload" and len(q) > 1]
    path = draw(st.sampled_from(deep if deep and draw(st.booleans()) else paths))
    parent = body
    for k in path[:-1]:
        parent = parent[k]
    how = draw(st.sampled_from(["replace", "replace", "remove", "extra", "redigest"]))
    if how == "replace":  # half the time a JSON type confusion, else any odd value
        parent[path[-1]] = draw(st.sampled_from(CONFUSIONS) | st.sampled_from(ODD_VALUES))
    elif how == "remove":
        del parent[path[-1]]
    elif how == "extra":
        parent["extra"] = draw(st.sampled_from(ODD_VALUES))
    obs = body.get("payload", {}).get("observation") if isinstance(
        body.get("payload"), dict) else None
    if isinstance(obs, dict) and draw(st.booleans()):
        obs.pop("observation_digest", None)  # re-seal the observation so check 10 passes
        obs["observation_digest"] = "sha256:" + model_values.digest(obs)
    return body


@st.composite
def hostile(draw: st.DrawFn) -> tuple[int, list[dict[str, Any]]]:
    records = [record_body(c, draw(st.sampled_from(TIMES[:3])))
               for c in draw(st.lists(CANONICAL_RECORDS, min_size=1, max_size=2))]
    sealed = [seal("registry", r) for r in records]
    bodies: list[tuple[str, dict[str, Any]]] = [("registry", r) for r in records]
    for _ in range(draw(st.integers(0, 10))):
        record = draw(st.sampled_from(sealed))
        event_type = draw(st.sampled_from(sorted(SIGNER_OF)))
        if event_type == "record_created":
            canonical = record["payload"]["canonical_record"]
            if draw(st.integers(0, 2)):  # a changed record, its hash and receipt made anew
                canonical = mutate(draw, {"c": canonical}, 2)["c"]
            body = record_body(canonical, draw(st.sampled_from(TIMES)))
        else:
            body = other_body(event_type, draw(st.sampled_from(sealed)),
                              draw(st.sampled_from(TIMES)),
                              draw(st.integers(0, 2)), draw(st.sampled_from(
                                  ["citing_paper", "cited_paper", "cited_work"])))
            body["pith_number"] = record["pith_number"]  # maybe about another record
            if draw(st.integers(0, 5)) == 0:
                body["target"] = draw(st.sampled_from(TARGETS))
        name = draw(st.sampled_from([SIGNER_OF[event_type]] * 4 + sorted(KEYS)))
        bodies.append((name, {**body, "signer": KEYS[name].signer}))
    for i, (name, body) in enumerate(draw(st.lists(st.sampled_from(bodies), max_size=4))):
        # the same slot (type, target, key, instant) with other content: an equivocation
        bodies.append((name, {**body, "payload": {**body["payload"], "again": i}}))
    out = []
    for name, body in bodies:
        if draw(st.integers(0, 2)) == 0:
            body = mutate(draw, body)
        if "pith_number" not in body or not isinstance(body["pith_number"], str) or \
                not model_values.PITH_NUMBER.fullmatch(body["pith_number"]):
            body["pith_number"] = records[0]["pith_number"]  # the door wants one
        event = seal(name, body)
        if draw(st.integers(0, 19)) == 0:  # changed after signing: event_id_mismatch
            event = {**event, "created_at": draw(st.sampled_from(TIMES))}
        if draw(st.integers(0, 9)) == 0:  # a forged copy under the same event_id
            event = {**event, "signature_b64": draw(st.sampled_from(
                ["", "AA==", b64e(bytes(64)), event["signature_b64"][:-4] + "AAA="]))}
        out.append(event)
    return draw(st.integers(0, 1)), draw(st.permutations(out))


@BUDGET
@given(universe=hostile())
def test_hostile_universes(universe: tuple[int, list[dict[str, Any]]]) -> None:
    ring, values = universe
    expected = model.reduce(values, model_values.make_keyring(KEYRINGS[ring]))
    got = _outcomes(pithlog.reduce_events(envelopes_of(values),
                                          pithlog.make_keyring(KEYRINGS[ring])))
    assert got == expected
    for rendered in expected.values():
        if isinstance(rendered, bytes):
            assert pithlog.verify_state_document(rendered) == []


# --- Every single change: each place of a valid event of every type (and of its canonical
# record, hash and receipt made anew) replaced by each JSON type confusion, removed, or
# given a sibling; re-signed, and reduced beside a valid record.

RECORD_C = {"metadata": {"submitted_at": "2024-11-01T00:43:54Z"}, "schema_version": "1.0",
            "source": {"id": "2411.00284", "kind": "arxiv", "version": 2}}


def _changed(body: dict[str, Any], path: tuple[Any, ...]) -> list[dict[str, Any]]:
    out = []
    for change in ["remove", "extra", *range(len(CONFUSIONS))]:
        changed = json.loads(json.dumps(body))
        parent = changed
        for k in path[:-1]:
            parent = parent[k]
        if change == "remove":
            del parent[path[-1]]
        elif change == "extra":
            parent["extra"] = 1
        else:
            parent[path[-1]] = CONFUSIONS[int(change)]
        out.append(changed)
    return out


def single_changes() -> list[tuple[str, list[dict[str, Any]]]]:
    body = record_body(RECORD_C, "2026-01-01T00:00:01Z")
    record = seal("registry", body)
    bases = [body] + [other_body(t, record, "2026-01-02T00:00:00Z", n, "cited_work")
                      for t in sorted(SIGNER_OF) if t != "record_created" for n in (0, 1)]
    cases = []
    for base in bases:
        name = SIGNER_OF[base["event_type"]]
        for path in _paths(base)[1:]:
            if path == ("pith_number",):
                continue  # the door's business
            for changed in _changed(base, path):
                values = [seal(name, changed)]
                payload = changed.get("payload")
                canonical = payload.get("canonical_record") if isinstance(payload, dict) else None
                if len(path) > 2 and path[:2] == ("payload", "canonical_record") \
                        and isinstance(canonical, dict):
                    remade = record_body(canonical, changed["created_at"])
                    if model_values.PITH_NUMBER.fullmatch(remade["pith_number"]):
                        values.append(seal(name, remade))
                cases += [(f"{base['event_type']} {'/'.join(path)}", [record, v]) for v in values]
    return cases


def test_single_changes() -> None:
    for ring in range(len(KEYRINGS) if FUZZ else 1):
        model_ring = model_values.make_keyring(KEYRINGS[ring])
        pithlog_ring = pithlog.make_keyring(KEYRINGS[ring])
        for label, values in single_changes():
            expected = model.reduce(values, model_ring)
            got = _outcomes(pithlog.reduce_events(envelopes_of(values), pithlog_ring))
            assert got == expected, (label, values[-1])
