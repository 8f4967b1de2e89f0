"""Resource limits: hostile input is refused in bounded memory and time, never by a crash.

The measurements run in a child process (``resource.getrusage``: the peak resident size
over the child's own baseline), so a regression that segfaults shows as a failed test, not
as a dead test run.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pithlog.errors import DoorError
from pithlog.protocol.canonical import MAX_ENVELOPE_BYTES, MAX_LINE_BYTES, jcs, jcs_reference, parse
from pithlog.protocol.events import parse_envelope

from .corpus import ORIGINALS, PITH, VALID

ROOT = Path(__file__).resolve().parents[2]
MiB = 1 << 20


def run_child(code: str, *args: str, timeout: float = 120) -> dict[str, object]:
    """Run ``code`` in a fresh interpreter; it prints one JSON object as its last line."""
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True, text=True, timeout=timeout, cwd=ROOT,
        env={**os.environ, "PYTHONFAULTHANDLER": "1"},
    )  # fmt: skip
    assert result.returncode == 0, f"child died ({result.returncode}): {result.stderr[-2000:]}"
    report: dict[str, object] = json.loads(result.stdout.strip().splitlines()[-1])
    return report


_REDUCE_IN_CHILD = r"""
import io, json, resource, sys, time
from pithlog.cli import main

class Lines(io.TextIOBase):
    # stderr that counts lines and keeps the first few, instead of holding 50 MB of them
    def __init__(self):
        self.count, self.start = 0, ""
    def write(self, text):
        self.count += text.count("\n")
        if len(self.start) < 4000:
            self.start += text
        return len(text)
    @property
    def head(self):
        return self.start.splitlines()[:5]

class Sink(io.RawIOBase):
    def __init__(self):
        self.size = 0
    def write(self, data):
        self.size += len(data)
        return len(data)

base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
err, out = Lines(), Sink()
start = time.perf_counter()
status = main(["reduce", "--keyring", sys.argv[1], sys.argv[2]], stdout=out, stderr=err)
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"status": status, "lines": err.count, "head": err.head, "stdout": out.size,
                  "extra_kib": peak - base, "seconds": seconds}))
"""


@pytest.fixture(scope="module")
def keyring_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from pithlog.testing import test_keyring_entries

    path = tmp_path_factory.mktemp("keyring") / "keyring.json"
    path.write_text(json.dumps({"keyring_version": "1", "keys": test_keyring_entries()}))
    return path


def _junk_line(rnd: random.Random, size: int) -> bytes:
    """One line of junk of about ``size`` bytes, of a kind drawn at random."""
    kind = rnd.randrange(9)
    if kind == 0:  # random bytes without LF
        return rnd.randbytes(size).replace(b"\n", b" ")
    if kind == 1:  # many tiny values: costly objects if parsed naively
        return b"[" + b"[]," * (size // 3) + b"[]]"
    if kind == 2:
        return b"[" + b"{}," * (size // 3) + b"{}]"
    if kind == 3:  # an object with many members, first one sorting last
        members = b",".join(b'"k%07d":0' % i for i in range(size // 12))
        return b'{"zz":1,' + members + b"}"
    if kind == 4:  # deep nesting
        depth = min(size // 2, 100_000)
        return b"[" * depth + b"]" * depth
    if kind == 5:  # a valid event with a tail of garbage
        return rnd.choice(ORIGINALS) + b"x" * max(1, size - 1500)
    if kind == 6:  # a long string of escapes, a near miss (pith_number in lower case)
        body = b"\\u0041" * (size // 6)
        return b'{"event_id":"sha256:' + b"0" * 64 + b'","pith_number":"' + (
            PITH.lower().encode() + b'","x":"' + body + b'"}'
        )
    if kind == 7:  # invalid UTF-8 in a string
        return b'{"a":"' + b"\xff\xfe" * (size // 2) + b'"}'
    return b'{"a":' + b"1" * size + b"}"  # a huge number


def _write_junk(path: Path, total: int) -> int:
    """About ``total`` bytes of varied junk lines; returns the number of lines."""
    rnd = random.Random(2411_00284)
    lines = 0
    written = 0
    with path.open("wb") as handle:
        while written < total:
            size = rnd.choices([50, 2_000, 60_000, 400_000, 1_500_000], [40, 30, 15, 10, 5])[0]
            line = _junk_line(rnd, size)
            handle.write(line + b"\n")
            written += len(line) + 1
            lines += 1
    return lines


def test_a_50_mb_file_of_junk_is_refused_line_by_line_in_bounded_memory(
    tmp_path: Path, keyring_file: Path
) -> None:
    events = tmp_path / "junk.jsonl"
    lines = _write_junk(events, 50 * 10**6)
    size = events.stat().st_size
    report = run_child(_REDUCE_IN_CHILD, str(keyring_file), str(events))
    events.unlink()
    assert report["status"] == 2
    # One stderr line per refused line, and one summary line; nothing else.
    assert report["lines"] == lines + 1, report["head"]
    assert report["stdout"] == 0
    extra_mib = int(report["extra_kib"]) / 1024  # type: ignore[call-overload]
    assert extra_mib < 64, f"peak {extra_mib:.0f} MiB over baseline for a {size >> 20} MiB file"
    assert float(report["seconds"]) < 60  # type: ignore[arg-type]


@pytest.mark.parametrize("ending", [b"\n", b""], ids=["with LF", "at EOF"])
def test_a_100_mb_line_is_refused_without_reading_it_whole(
    tmp_path: Path, keyring_file: Path, ending: bytes
) -> None:
    events = tmp_path / "long.jsonl"
    chunk = b'{"a":"' + b"x" * (MiB - 6)
    with events.open("wb") as handle:
        handle.write(ORIGINALS[0] + b"\n")  # line 1: a valid record
        for _ in range(100):  # line 2: 100 MiB without LF
            handle.write(chunk)
        handle.write(ending)
    report = run_child(_REDUCE_IN_CHILD, str(keyring_file), str(events))
    events.unlink()
    assert report["status"] == 2
    head = report["head"]
    assert isinstance(head, list)
    assert head[0].startswith("pithlog: line 2: [door.line_too_long] "), head
    assert report["lines"] == 2  # the refusal and the summary
    assert int(report["stdout"]) > 0  # line 1 still became a state  # type: ignore[call-overload]
    extra_mib = int(report["extra_kib"]) / 1024  # type: ignore[call-overload]
    assert extra_mib < 32, f"peak {extra_mib:.0f} MiB over baseline for a 100 MiB line"


# --- the door alone ------------------------------------------------------------------------

_DOOR_IN_CHILD = """
import json, resource, sys, time
from pithlog.protocol.canonical import jcs, jcs_reference, parse
from pithlog.errors import DoorError
from pithlog.protocol.events import parse_envelope

kind, size = sys.argv[1], int(sys.argv[2])
if kind == "outlier":  # one member sorting after all the others, then the rest ascending
    data = b'{"zz":1,' + b",".join(b'"k%07d":0' % i for i in range(size)) + b"}"
elif kind == "rotated":  # JCS order, but not code point order (U+E000 vs beyond U+FFFF)
    names = ['"\\U00010000%07d":0' % i for i in range(size)] + ['"\\ue000":1']
    data = ("{" + ",".join(names) + "}").encode()
elif kind == "lists":
    data = b"[" + b"[]," * size + b"[]]"
else:
    data = b"[" + b"{}," * size + b"{}]"
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
verdicts = []
for door in (parse, parse_envelope):
    try:
        value = door(data)
        verdicts.append("ok")
        if door is parse and isinstance(value, dict):
            assert jcs(value) == jcs_reference(value)
    except DoorError as exc:
        verdicts.append(exc.code)
seconds = time.perf_counter() - start
extra = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base
print(json.dumps({"verdicts": verdicts, "seconds": seconds, "extra_kib": extra,
                  "bytes": len(data)}))
"""


@pytest.mark.parametrize("kind", ["outlier", "rotated"])
def test_an_object_of_many_members_in_an_unlucky_order_is_read_in_good_time(kind: str) -> None:
    """msgspec's member sort recurses once per partition: ~60,000 members with one large
    name first overflowed the C stack (a segfault in the door, from a 780 KB line), and
    more took minutes. The door now sorts wide objects with Python's sort."""
    report = run_child(_DOOR_IN_CHILD, kind, "75000")
    assert int(report["bytes"]) < MAX_ENVELOPE_BYTES * 2  # type: ignore[call-overload]
    assert report["verdicts"][0] == "ok"  # type: ignore[index]
    assert report["verdicts"][1] in ("door.event_id", "door.too_large")  # type: ignore[index]
    assert float(report["seconds"]) < 10  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["lists", "dicts"])
def test_an_8_mib_line_of_tiny_values_is_refused_before_it_becomes_objects(kind: str) -> None:
    """2.8 million ``[]`` in one line cost the door 560 MiB and six seconds; its JCS cannot
    be under 1 MiB, which the door now sees from the bytes before parsing."""
    report = run_child(_DOOR_IN_CHILD, kind, str(MAX_LINE_BYTES // 3 - 1))
    assert report["verdicts"][1] == "door.too_large"  # type: ignore[index]
    # parse (not the envelope door) still reads it, in memory bounded by the objects alone
    assert report["verdicts"][0] == "ok"  # type: ignore[index]
    extra_mib = int(report["extra_kib"]) / 1024  # type: ignore[call-overload]
    assert extra_mib < 300, f"{extra_mib:.0f} MiB"


def test_envelope_size_boundary_is_exactly_one_mib() -> None:
    """A resealed valid event whose JCS is exactly 1 MiB passes the door (and the checks);
    one byte more is refused; whitespace around it does not count."""
    from pithlog.protocol.checks import check_alone
    from pithlog.protocol.events import sign_event
    from pithlog.testing import test_key

    from .corpus import KEYRING, LATER

    def sized(pad: int) -> bytes:
        payload = {"locator": "x", "pad": "p" * pad}
        event = sign_event(test_key("mirror"), "mirror_hint", PITH, "record", LATER, payload)
        return jcs(event)

    base = len(sized(0))
    exact = sized(MAX_ENVELOPE_BYTES - base)
    assert len(exact) == MAX_ENVELOPE_BYTES
    envelope = parse_envelope(exact)
    assert check_alone(envelope, KEYRING) is None
    assert parse_envelope(b"  \t" + exact + b" \r\n " * 1000).encoded == exact
    over = exact.replace(b'"pad":"p', b'"pad":"pp', 1)  # (sign_event itself refuses it)
    assert len(over) == MAX_ENVELOPE_BYTES + 1
    with pytest.raises(DoorError) as caught:
        parse_envelope(over)
    assert caught.value.code == "door.too_large"
    # The same size written with escapes: the raw text is longer, its JCS is what counts.
    escaped = exact.replace(b"ppp", b"\\u0070pp", 1000)
    assert len(escaped) > MAX_ENVELOPE_BYTES
    assert parse_envelope(escaped).encoded == exact


def test_the_size_floor_never_exceeds_the_jcs_of_accepted_input() -> None:
    """The early refusal is sound: it counts bytes JCS keeps, so it never refuses input
    whose JCS is small enough (escapes and whitespace only make the text longer)."""
    from pithlog.protocol.canonical import jcs_size_floor

    for original in ORIGINALS:
        value = parse(original)
        assert jcs_size_floor(original) <= len(jcs(value))
        spaced = json.dumps(value, indent=4, ensure_ascii=True).encode()
        assert jcs_size_floor(spaced) <= len(jcs(value))
    tricky = b'{"a":"[]{},:\\"\\u005b\\u002c","b":[{},[],"\\u0022"]}'
    assert jcs_size_floor(tricky) <= len(jcs(parse(tricky)))
    assert jcs(parse(tricky)) == jcs_reference(parse(tricky))


def test_deep_nesting_in_a_line_is_refused_quickly() -> None:
    for depth in (65, 1000, 100_000, 4_000_000):
        data = b"[" * depth + b"]" * depth
        start = time.perf_counter()
        with pytest.raises(DoorError) as caught:
            parse_envelope(data)
        assert caught.value.code in ("door.too_deep", "door.too_large")
        assert time.perf_counter() - start < 2
    assert VALID  # the corpus imported
