"""The command line under hostile files, in-process through :func:`pithlog.cli.main`.

``pithlog reduce`` on a file of hostile lines never raises; it exits 0 or 2, prints one
stderr line ``pithlog: line N: [family.detail] ...`` for each refused line and for no
other, and every state it prints verifies. ``pithlog verify-state`` on a mutated state
document never raises and exits 1 unless the mutation left the bytes as they were.
"""

from __future__ import annotations

import io
import random
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pithlog.cli import main
from pithlog.errors import CODES, DoorError
from pithlog.protocol.canonical import MAX_LINE_BYTES, jcs, parse
from pithlog.protocol.events import parse_envelope
from pithlog.protocol.state_verify import STATE_MAX_DEPTH, verify_state_document
from pithlog.testing import test_keyring_entries

from .corpus import (
    ORIGINALS,
    SEEDS,
    budget,
    emit,
    junk,
    mutate_bytes,
    mutate_value,
    mutations,
    reference_lines,
    resealed,
)

ROOT = Path(__file__).resolve().parents[2]
STATE_SEED = ROOT / "vectors" / "seeds" / "state-2411.00284.json"
REFUSAL = re.compile(r"pithlog: line (\d+): \[([a-z0-9_]+\.[a-z0-9_]+)\] \S.*")


@pytest.fixture(scope="module")
def folder() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="pithlog-hostile-") as name:
        path = Path(name)
        keyring = {"keyring_version": "1", "keys": test_keyring_entries()}
        (path / "keyring.json").write_bytes(jcs(keyring))
        yield path


def run(argv: list[str]) -> tuple[int, bytes, list[str]]:
    out, err = io.BytesIO(), io.StringIO()
    status = main(argv, stdout=out, stderr=err)
    return status, out.getvalue(), err.getvalue().splitlines()


def expected_refusals(data: bytes) -> list[int]:
    """The line numbers the door refuses, found the plain way."""
    refused = []
    for number, line in reference_lines(data, MAX_LINE_BYTES):
        if line is None:
            refused.append(number)
            continue
        try:
            parse_envelope(line)
        except DoorError:
            refused.append(number)
    return refused


_line = st.one_of(
    mutations().map(lambda case: case[1]),
    junk(),
    resealed(),
    st.sampled_from(ORIGINALS),
    st.sampled_from([b"", b"  ", b"\r", b" \t\r", b"\xe2\x80\xa8", b"\x0c"]),
)


@budget(60)
@given(st.lists(_line, max_size=25), st.sampled_from([b"\n", b"\r\n"]), st.booleans())
def test_reduce_reports_each_refused_line_once(
    folder: Path, lines: list[bytes], ending: bytes, final_newline: bool
) -> None:
    data = ending.join(lines) + (ending if final_newline and lines else b"")
    events = folder / "events.jsonl"
    events.write_bytes(data)
    status, out, err = run(["reduce", "--keyring", str(folder / "keyring.json"), str(events)])
    refused = expected_refusals(data)
    assert status == (2 if refused else 0)
    reported = []
    for line in err:
        match = REFUSAL.fullmatch(line)
        if match:
            reported.append(int(match.group(1)))
            assert match.group(2) in CODES
        else:
            assert line.startswith(("pending: pith:", "reduce: ")), line
    assert reported == refused
    assert err[-1].startswith("reduce: ") and f" {len(refused)} lines refused" in err[-1]
    for state in out.splitlines():
        assert verify_state_document(state) == []


# --- verify-state --------------------------------------------------------------------------

SEED = STATE_SEED.read_bytes()
SEED_VALUE = parse(SEED, max_depth=STATE_MAX_DEPTH, max_bytes=None)
FAILURE_LINE = re.compile(r"[a-z_0-9]+: \S.*")


@st.composite
def mutated_states(draw: st.DrawFn) -> bytes:
    rnd = random.Random(draw(SEEDS))
    how = draw(st.sampled_from(["bytes", "bytes", "value", "text", "lf"]))
    if how == "bytes":
        return mutate_bytes(SEED, rnd)
    if how == "lf":
        return SEED + rnd.choice([b"\n", b"\n\n", b"\r\n", b" \n", b"\r"])
    value = mutate_value(SEED_VALUE, rnd) if how == "value" else SEED_VALUE
    bends = {name: rnd.choice([0.0, 0.0, 0.01, 0.3])
             for name in ("shuffle", "escape", "space", "numform", "surrogate", "duplicate")}
    return emit(value, rnd, **bends)


def _one_lf_removed(data: bytes) -> bytes:
    return data[:-1] if data.endswith(b"\n") else data


@budget(200)
@given(mutated_states())
def test_verify_state_fails_every_changed_document(folder: Path, data: bytes) -> None:
    path = folder / "state.json"
    path.write_bytes(data)
    status, out, err = run(["verify-state", str(path)])
    unchanged = _one_lf_removed(data) == _one_lf_removed(SEED)
    assert status == (0 if unchanged else 1)
    assert len(err) == 1 and err[0].startswith("verify-state: ")
    lines = out.decode("utf-8").split("\n")
    assert lines[-1] == ""
    for line in lines[:-1]:
        assert FAILURE_LINE.fullmatch(line), line
    assert (len(lines) - 1 == 0) == unchanged


def test_verify_state_accepts_the_seed_with_one_lf(folder: Path) -> None:
    for data in (SEED, SEED + b"\n"):
        (folder / "seed.json").write_bytes(data)
        assert run(["verify-state", str(folder / "seed.json")])[0] == 0


def test_every_failure_is_one_printable_line_whatever_the_strings_hold() -> None:
    """Each string of the seed in turn gets an LF and a terminal escape: no failure line of
    verify-state may carry them (a failure is one line, and shows strings escaped)."""
    import copy

    from .corpus import _parent, _places

    for path in _places(SEED_VALUE):
        value = copy.deepcopy(SEED_VALUE)
        parent = _parent(value, path)
        if not isinstance(parent[path[-1]], str):
            continue
        parent[path[-1]] += "\n\x1b[31m\u2028"
        failures = verify_state_document(emit(value, random.Random(0)))
        assert failures, path
        for failure in failures:
            assert failure.isprintable(), (path, failure)
