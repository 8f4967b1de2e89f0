"""docs/protocol.md says what the code does: the numbers it gives are the constants the code
uses, and the examples of its tables give the verdicts it names."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pithlog.errors import DoorError
from pithlog.protocol.canonical import (
    MAX_DEPTH,
    MAX_ENVELOPE_BYTES,
    MAX_LINE_BYTES,
    MAX_SAFE_INTEGER,
    parse,
)
from pithlog.protocol.state_verify import STATE_MAX_DEPTH
from pithlog.protocol.text_forms import decode_b64, lower_ascii
from pithlog.protocol.timestamps import is_ts

DOC = (Path(__file__).resolve().parents[2] / "docs" / "protocol.md").read_text("utf-8")
TEXT = " ".join(DOC.split())


def _section(start: str, end: str) -> str:
    return DOC.split(start, 1)[1].split(end, 1)[0]


def _rows(table: str) -> list[list[str]]:
    """The body rows of the first markdown table in ``table``, cells split on unescaped |."""
    rows = []
    for line in table.splitlines():
        if line.startswith("|") and not line.startswith("|---"):
            rows.append([c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)[1:-1]])
    return rows[1:]  # the header aside


def test_the_door_limits_are_the_constants() -> None:
    assert f"at most 1 MiB ({MAX_ENVELOPE_BYTES:,} bytes)" in TEXT
    assert MAX_ENVELOPE_BYTES == 1 << 20
    assert f"at most 8 MiB ({MAX_LINE_BYTES:,} bytes before its LF" in TEXT
    assert MAX_LINE_BYTES == 8 << 20
    assert f"nesting at most {MAX_DEPTH} levels" in TEXT
    assert f"`{MAX_SAFE_INTEGER + 1}` (`{MAX_SAFE_INTEGER}` passes)" in TEXT
    assert MAX_SAFE_INTEGER == 2**53 - 1


def test_the_state_and_keyring_limits_are_the_constants() -> None:
    from pithlog.cli.offline_commands import STATE_FILE_BYTES

    assert f"a depth limit of {MAX_DEPTH} + {STATE_MAX_DEPTH - MAX_DEPTH} and no size limit" in TEXT
    assert f"({STATE_FILE_BYTES >> 20} MiB unless raised)" in TEXT
    assert STATE_FILE_BYTES % (1 << 20) == 0
    assert "the line's limit, 8 MiB" in TEXT and MAX_LINE_BYTES == 8 << 20


def _examples(cell: str) -> list[tuple[str, str]]:
    """The code spans of a table cell, but for those in a remark in parentheses (a remark
    saying what ``passes`` keeps its example, marked)."""
    cell = re.sub(r"\((?![^)]*passes\))[^)]*\)", "", cell)
    return re.findall(r"`([^`]+)`( passes)?", cell)


def _door_code(data: bytes) -> str | None:
    try:
        parse(data)
    except DoorError as exc:
        return exc.code
    return None


def test_each_refused_example_of_the_door_table_gives_its_error() -> None:
    rows = _rows(_section("## 1. The door", "Why these rules."))
    checked = 0
    for _rule, examples, error in rows:
        code = re.match(r"`([a-z0-9_.]+)`", error)
        assert code, error
        for example, passes in _examples(examples):
            if re.fullmatch(r"(?:[0-9A-F]{2} )+[0-9A-F]{2}", example):
                data = bytes.fromhex(example)
            else:
                data = example.encode("utf-8")
            assert _door_code(data) == (None if passes else code[1]), example
            checked += 1
    assert checked >= 10
    deep = b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1)
    assert "65 nested arrays" in TEXT and MAX_DEPTH + 1 == 65
    assert _door_code(deep) == "door.too_deep"
    assert _door_code(deep[1:-1]) is None


def test_the_timestamp_table_says_which_strings_are_ts() -> None:
    rows = _rows(_section("### Timestamps (ts)", "Because the form"))
    assert len(rows) == 4
    for strings, verdict in rows:
        for ts, _ in _examples(strings):
            assert is_ts(ts) == verdict.startswith("yes"), ts


def test_the_text_convention_examples() -> None:
    assert "`10.5555/ÉTUDE` lowercases to `10.5555/Étude`" in TEXT
    assert lower_ascii("10.5555/ÉTUDE") == "10.5555/Étude"
    assert "`QQ==` (the byte `A`) is accepted; `QR==`" in TEXT
    assert decode_b64("QQ==") == b"A"
    assert decode_b64("QR==") is None and decode_b64("QQ") is None


@pytest.mark.parametrize("reason", ["door.line_too_long", "door.too_large", "keyring.not_json"])
def test_the_codes_the_door_section_names_are_registered(reason: str) -> None:
    errors = (Path(__file__).resolve().parents[2] / "docs" / "errors.md").read_text("utf-8")
    assert f"`{reason}`" in errors and f"`{reason}`" in DOC


def test_an_anchor_target_names_its_event_in_lowercase_hex() -> None:
    """The table of event types said ``event:sha256:<64 hex>``; an upper-case digit makes
    the target ``bad_target`` (spec 5: 64 lowercase hex)."""
    from pithlog.protocol.event_types import EVENT_TYPES

    assert "`event:sha256:<64 lowercase hex>`" in TEXT
    target_ok = EVENT_TYPES["timestamp_anchor"].target_ok
    assert target_ok("event:sha256:" + "ab" * 32)
    assert not target_ok("event:sha256:" + "AB" * 32)
