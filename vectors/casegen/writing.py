"""Reducing a case, checking that every event came out as intended, and
writing its files.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from casegen.building import Case
from casegen.common import jcs
from casegen.tlog import log_files
from pithlog.protocol.checks import REASONS
from pithlog.protocol.event_types import EVENT_TYPES
from pithlog.protocol.events import parse_envelope
from pithlog.protocol.keys import load_keyring
from pithlog.protocol.reduce import Pending, Reduction, collapse, reduce_events
from pithlog.protocol.state import render, state_document
from pithlog.protocol.state_verify import verify_state_document


def outcomes(
    results: dict[str, Reduction | Pending], pith_of_event: dict[str, str]
) -> dict[str, str]:
    """event_id -> what became of it, read off the reducer's result."""
    found: dict[str, str] = {}
    for pith, result in results.items():
        if isinstance(result, Pending):
            members = [e for e, p in pith_of_event.items() if p == pith]
            assert len(members) == result.event_count
            for event_id in members:
                found[event_id] = result.invalid.get(event_id, "pending")
            continue
        for envelope in result.applied:
            found[envelope.event_id] = "applied"
        for equivocation in result.equivocations:
            for envelope in equivocation.events[1:]:
                found[envelope.event_id] = "equivocation_loser"
        found.update(result.invalid)
    return found


def _styles(value: Any, style: int, rng: random.Random) -> bytes:
    """Another encoding of the same JSON value (a repeated line need not repeat its bytes)."""
    if style == 0:
        return jcs(value)
    if style == 1:  # members in another order, spaces after separators, raw UTF-8
        return json.dumps(
            _shuffled(value, rng), ensure_ascii=False, separators=(", ", ": ")
        ).encode()
    if style == 2:  # ASCII only: \u escapes (surrogate pairs above U+FFFF), and \/
        return json.dumps(value, ensure_ascii=True).replace("/", "\\/").encode()
    # leading and trailing JSON whitespace, CR included
    return b" \t" + json.dumps(_shuffled(value, rng), ensure_ascii=False).encode() + b" \r"


def _shuffled(value: Any, rng: random.Random) -> Any:
    if isinstance(value, dict):
        names = list(value)
        rng.shuffle(names)
        return {n: _shuffled(value[n], rng) for n in names}
    if isinstance(value, list):
        return [_shuffled(v, rng) for v in value]
    return value


def event_lines(case: Case) -> list[bytes]:
    """The case's envelopes, one per line, with repeats (some re-encoded), shuffled."""
    rng = random.Random(int.from_bytes(hashlib.sha256(case.name.encode()).digest()[:8], "big"))
    lines = [jcs(e) for e in case.envelopes]
    for envelope in case.envelopes:
        if rng.random() < 0.3:
            line = _styles(envelope, rng.randrange(4), rng)
            assert jcs(json.loads(line)) == jcs(envelope)
            lines.append(line)
    rng.shuffle(lines)
    for line in lines:
        assert b"\n" not in line
    return lines


def dump_json(value: Any) -> bytes:
    return (json.dumps(value, indent=2, ensure_ascii=False) + "\n").encode()


@dataclass
class Built:
    files: dict[str, bytes]
    reasons: set[str]
    description: str
    summary: dict[str, Any]


def build(case: Case) -> Built:
    """Reduce the case, assert the result is what its events were built for, render it."""
    keyring_bytes = dump_json(case.keyring)
    lines = event_lines(case)
    keyring = load_keyring(keyring_bytes)
    envelopes = [parse_envelope(line) for line in lines]
    results = reduce_events(envelopes, keyring)
    kept = collapse(envelopes, keyring)
    pith_of_event = {event_id: judged.envelope.pith_number for event_id, judged in kept.items()}

    found = outcomes(results, pith_of_event)
    if found != case.intent:
        wrong = {
            e: (case.intent.get(e), found.get(e))
            for e in sorted(set(found) | set(case.intent))
            if found.get(e) != case.intent.get(e)
        }
        raise AssertionError(f"case {case.name}: intent (left) vs reduction (right): {wrong}")
    for event_id, pith in case.home.items():
        assert pith_of_event[event_id] == pith, (case.name, event_id, pith)
    for pith in case.absent_piths:
        assert pith not in results, (case.name, pith)
    for check in case.checks:
        check(results)

    expected = b""
    pending: list[str] = []
    for pith, result in results.items():  # sorted by pith_number
        if isinstance(result, Pending):
            pending.append(pith)
            continue
        line = render(state_document(result))
        assert verify_state_document(line) == [], (case.name, pith)
        expected += line + b"\n"
    files = {
        "keyring.json": keyring_bytes,
        "events.jsonl": b"".join(line + b"\n" for line in lines),
        "expected.jsonl": expected,
        "pending.json": dump_json(pending),
        "intent.json": dump_json(dict(sorted(case.intent.items()))),
        **{f"log/{name}": data for name, data in log_files(lines).items()},
    }
    summary = {
        "name": case.name,
        "description": case.description,
        "events": len(case.intent),
        "envelopes": len(case.envelopes),
        "lines": len(lines),
        "states": len(results) - len(pending),
        "pending": len(pending),
    }
    return Built(files, set(case.intent.values()), case.description, summary)


def write_vectors(out_dir: Path, cases: Sequence[Callable[[], Case]]) -> None:
    """Build ``cases`` and write ``out_dir/cases/*`` and ``out_dir/log`` (replacing those
    folders) and ``out_dir/index.json``."""
    out_dir = Path(out_dir)
    built = [build(make_case()) for make_case in cases]
    names = [b.summary["name"] for b in built]
    assert len(set(names)) == len(names)
    covered = set().union(*(b.reasons for b in built))
    missing = [r for r in REASONS if r not in covered]
    assert not missing, f"no case fails with {missing}"
    applied_types: set[str] = set()
    for b in built:
        for line in b.files["expected.jsonl"].split(b"\n")[:-1]:
            current = json.loads(line)["current"]
            applied_types.update(t.name for t in EVENT_TYPES.values() if current[t.state_list])
    assert applied_types == set(EVENT_TYPES), sorted(set(EVENT_TYPES) - applied_types)

    cases_dir = out_dir / "cases"
    if cases_dir.exists():
        shutil.rmtree(cases_dir)
    for b in built:
        folder = cases_dir / b.summary["name"]
        folder.mkdir(parents=True)
        for filename, data in b.files.items():
            (folder / filename).parent.mkdir(parents=True, exist_ok=True)
            (folder / filename).write_bytes(data)
    # the log of all the cases' events files one after the other: past 256 leaves, so that
    # it has a full tile, a partial one and a tile of level 1
    log_dir = out_dir / "log"
    if log_dir.exists():
        shutil.rmtree(log_dir)
    every_line = [line for b in built for line in b.files["events.jsonl"].split(b"\n")[:-1]]
    for filename, data in log_files(every_line).items():
        (log_dir / filename).parent.mkdir(parents=True, exist_ok=True)
        (log_dir / filename).write_bytes(data)
    index = {
        "merge_version": "pith-open-graph-merge-v1",
        "generator": "vectors/generate.py",
        "cases": [b.summary for b in built],
    }
    (out_dir / "index.json").write_bytes(dump_json(index))
