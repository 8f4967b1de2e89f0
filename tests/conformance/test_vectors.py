"""The conformance vectors in ``vectors/cases``: replay every case and compare byte for byte.

Each case is read as another implementation would read it (``vectors/README.md``): the
keyring through :func:`pithlog.protocol.keys.load_keyring`, each line of ``events.jsonl`` (split on
LF only) through :func:`pithlog.protocol.events.parse_envelope`, then reduced and rendered.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from pithlog.protocol.checks import REASONS
from pithlog.protocol.event_types import EVENT_TYPES
from pithlog.protocol.events import Envelope, parse_envelope
from pithlog.protocol.keys import Keyring, load_keyring
from pithlog.protocol.reduce import Judged, Pending, Reduction, collapse, reduce_events, reduce_pith
from pithlog.protocol.state import render, render_reduction, state_document
from pithlog.protocol.state_verify import verify_state_document
from tests.unit.builders import light

VECTORS = Path(__file__).resolve().parents[2] / "vectors"
CASES_DIR = VECTORS / "cases"
CASES = sorted(p.name for p in CASES_DIR.iterdir() if p.is_dir())
FILES = ("events.jsonl", "expected.jsonl", "intent.json", "keyring.json", "log", "pending.json")
OUTCOMES = {"applied", "equivocation_loser", "pending", *REASONS}


def lf_lines(data: bytes) -> list[bytes]:
    """JSON Lines as spec 1 reads them: split on LF only, whitespace-only lines skipped."""
    return [line for line in data.split(b"\n") if line.strip(b" \t\r")]


@dataclass(frozen=True)
class Replay:
    keyring: Keyring
    lines: list[bytes]
    envelopes: list[Envelope]
    results: dict[str, Reduction | Pending]
    pith_of_event: dict[str, str]


@functools.cache
def replay(name: str) -> Replay:
    folder = CASES_DIR / name
    keyring = load_keyring((folder / "keyring.json").read_bytes())
    lines = lf_lines((folder / "events.jsonl").read_bytes())
    envelopes = [parse_envelope(line) for line in lines]
    kept = collapse(envelopes, keyring)
    return Replay(
        keyring=keyring,
        lines=lines,
        envelopes=envelopes,
        results=reduce_events(envelopes, keyring),
        pith_of_event={e: judged.envelope.pith_number for e, judged in kept.items()},
    )


def rendered(results: dict[str, Reduction | Pending]) -> bytes:
    return b"".join(
        render(state_document(r)) + b"\n" for r in results.values() if isinstance(r, Reduction)
    )


def read_json(name: str, filename: str) -> Any:
    return json.loads((CASES_DIR / name / filename).read_bytes())


def test_there_are_cases() -> None:
    assert len(CASES) >= 10


@pytest.mark.parametrize("name", CASES)
def test_case_has_exactly_its_files(name: str) -> None:
    assert sorted(p.name for p in (CASES_DIR / name).iterdir()) == list(FILES)


@pytest.mark.parametrize("name", CASES)
def test_events_file_is_json_lines(name: str) -> None:
    data = (CASES_DIR / name / "events.jsonl").read_bytes()
    assert data.endswith(b"\n")
    assert len(lf_lines(data)) == data.count(b"\n"), "no blank lines"


@pytest.mark.parametrize("name", CASES)
def test_expected_states_byte_for_byte(name: str) -> None:
    expected = (CASES_DIR / name / "expected.jsonl").read_bytes()
    assert rendered(replay(name).results) == expected


@pytest.mark.parametrize("name", CASES)
def test_expected_states_are_sorted_by_pith_number(name: str) -> None:
    expected = (CASES_DIR / name / "expected.jsonl").read_bytes()
    piths = [json.loads(line)["pith_number"] for line in lf_lines(expected)]
    assert piths == sorted(piths)
    assert len(set(piths)) == len(piths)


@pytest.mark.parametrize("name", CASES)
def test_pending(name: str) -> None:
    pending = [p for p, r in replay(name).results.items() if isinstance(r, Pending)]
    assert read_json(name, "pending.json") == pending
    assert pending == sorted(pending)


@pytest.mark.parametrize("name", CASES)
def test_intent(name: str) -> None:
    """Every event came out as the generator built it to: applied, loser, held or a reason."""
    run = replay(name)
    found: dict[str, str] = {}
    for pith, result in run.results.items():
        members = [e for e, p in run.pith_of_event.items() if p == pith]
        assert len(members) == result.event_count
        if isinstance(result, Pending):
            for event_id in members:
                found[event_id] = result.invalid.get(event_id, "pending")
            continue
        for envelope in result.applied:
            found[envelope.event_id] = "applied"
        for equivocation in result.equivocations:
            for envelope in equivocation.events[1:]:
                assert envelope.event_id not in found
                found[envelope.event_id] = "equivocation_loser"
        for event_id, reason in result.invalid.items():
            assert event_id not in found
            found[event_id] = reason
    intent = read_json(name, "intent.json")
    assert set(intent.values()) <= OUTCOMES
    assert list(intent) == sorted(intent)
    assert found == intent


@pytest.mark.parametrize("name", CASES)
def test_expected_states_verify(name: str) -> None:
    expected = (CASES_DIR / name / "expected.jsonl").read_bytes()
    for line in lf_lines(expected):
        assert verify_state_document(line) == []
        assert verify_state_document(line + b"\n") == []


@pytest.mark.parametrize("name", CASES)
def test_order_and_duplicates_do_not_matter(name: str) -> None:
    run = replay(name)
    distinct = list({e.encoded: e for e in run.envelopes}.values())
    rng = random.Random(name)
    for _ in range(3):
        rng.shuffle(distinct)
        assert rendered(reduce_events(distinct, run.keyring)) == rendered(run.results)
    assert rendered(reduce_events(reversed(run.envelopes), run.keyring)) == rendered(run.results)


@pytest.mark.parametrize("name", CASES)
def test_copies_decoded_without_payloads_give_the_same_states(name: str) -> None:
    """What an append's writing process reduces: each copy as its helpers hand it over,
    decoded without its payload where the checks left hints (its spans and check 14
    facts: ``checks.reduction_hints``, ``events.readmit_light``); records whole."""
    run = replay(name)
    by_pith: dict[str, list[Judged]] = {}
    for judged in collapse(run.envelopes, run.keyring).values():
        handed = light(judged)
        # every copy but the records and those failing checks 1-2 (no spans) goes light
        whole = judged.reason in ("malformed", "unknown_event_type") or (
            judged.envelope.value.get("event_type") == "record_created")
        assert (handed is judged) == whole
        assert whole or "payload" not in handed.envelope.value
        by_pith.setdefault(judged.envelope.pith_number, []).append(handed)
    results = {pith: reduce_pith(pith, by_pith[pith]) for pith in sorted(by_pith)}
    # rendered from the slices of the copies' JCS (as a store's index is), not their values
    states = b"".join(render_reduction(r) + b"\n" for r in results.values()
                      if isinstance(r, Reduction))  # fmt: skip
    assert states == (CASES_DIR / name / "expected.jsonl").read_bytes()
    assert [p for p, r in results.items() if isinstance(r, Pending)] == read_json(
        name, "pending.json")


def test_index_lists_every_case() -> None:
    index = json.loads((VECTORS / "index.json").read_bytes())
    assert sorted(c["name"] for c in index["cases"]) == CASES
    for entry in index["cases"]:
        assert entry["description"] and "\n" not in entry["description"]
        assert entry["events"] == len(read_json(entry["name"], "intent.json"))


def test_cases_cover_every_reason_and_event_type() -> None:
    reasons: set[str] = set()
    applied_types: set[str] = set()
    for name in CASES:
        reasons.update(read_json(name, "intent.json").values())
        expected = (CASES_DIR / name / "expected.jsonl").read_bytes()
        for line in lf_lines(expected):
            current = json.loads(line)["current"]
            applied_types.update(t.name for t in EVENT_TYPES.values() if current[t.state_list])
    assert set(REASONS) <= reasons
    assert {"applied", "equivocation_loser", "pending"} <= reasons
    assert applied_types == set(EVENT_TYPES)


def test_one_case_holds_every_reason() -> None:
    assert set(REASONS) <= set(read_json("reasons", "intent.json").values())


def test_some_line_would_break_under_splitlines() -> None:
    """U+2028, U+2029 and U+0085 inside strings: str.splitlines() is the wrong reader."""
    data = (CASES_DIR / "all-event-types" / "events.jsonl").read_bytes()
    assert len(data.decode("utf-8").splitlines()) > len(lf_lines(data))


def test_seed_case_reproduces_the_published_seed() -> None:
    seed = json.loads((VECTORS / "seeds" / "state-2411.00284.json").read_bytes())
    (line,) = lf_lines((CASES_DIR / "seed-2411.00284" / "expected.jsonl").read_bytes())
    state = json.loads(line)
    assert state["pith_number"] == seed["pith_number"]
    for member in ("canonical_record", "source_aliases"):
        assert state["current"][member] == seed["current"][member]
    ours, theirs = state["current"]["graph_snapshots"], seed["current"]["graph_snapshots"]
    assert [p["payload"] for p in ours] == [p["payload"] for p in theirs]
    rc, seed_rc = state["current"]["record_created"], seed["current"]["record_created"]
    assert rc["created_at"] == seed_rc["created_at"]
    kept = {"signature_b64", "key_id", "public_key_fingerprint"}
    assert {k: v for k, v in rc["payload"]["receipt"].items() if k not in kept} == {
        k: v for k, v in seed_rc["payload"]["receipt"].items() if k not in kept
    }


def test_citations_case_signs_all_139_seed_observations() -> None:
    seed = json.loads((VECTORS / "seeds" / "citation-record-2304.11277.json").read_bytes())
    observations = [*seed["inbound"], *seed["outbound"]]
    assert len(observations) == 139
    (line,) = lf_lines((CASES_DIR / "citations-2304.11277" / "expected.jsonl").read_bytes())
    signed = {
        p["payload"]["observation"]["observation_id"]
        for p in json.loads(line)["current"]["citation_signatures"]
    }
    # Every seed observation names 2304.11277 as an arxiv_id, so every one is applied.
    assert {o["observation_id"] for o in observations} <= signed


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("vectors_generate", VECTORS / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


def _tree(root: Path) -> dict[str, bytes]:
    files = [root / "index.json", *sorted((root / "cases").rglob("*")),
             *sorted((root / "log").rglob("*"))]  # fmt: skip
    return {str(p.relative_to(root)): p.read_bytes() for p in files if p.is_file()}


def test_regeneration_is_byte_identical(tmp_path: Path) -> None:
    _generator().generate(tmp_path)
    fresh, committed = _tree(tmp_path), _tree(VECTORS)
    assert sorted(fresh) == sorted(committed)
    for path, data in committed.items():
        assert fresh[path] == data, path
