"""The ts form of spec section 1."""

from __future__ import annotations

import pytest

from pithlog.protocol.timestamps import is_ts


@pytest.mark.parametrize(
    "value",
    [
        "2026-07-05T09:31:31Z",
        "0001-01-01T00:00:00Z",
        "9999-12-31T23:59:59Z",
        "2024-02-29T12:00:00Z",  # leap year
        "2000-02-29T00:00:00Z",  # divisible by 400
        "2026-04-30T00:00:00Z",
        "2026-01-31T00:00:00Z",
    ],
)
def test_timestamps_accepted(value: str) -> None:
    assert is_ts(value)


@pytest.mark.parametrize(
    "value",
    [
        "2026-02-30T00:00:00Z",  # no such day
        "2026-02-29T00:00:00Z",  # not a leap year
        "2100-02-29T00:00:00Z",  # divisible by 100, not 400
        "2026-04-31T00:00:00Z",
        "2026-00-10T00:00:00Z",
        "2026-13-01T00:00:00Z",
        "2026-01-00T00:00:00Z",
        "0000-01-01T00:00:00Z",  # year 0001-9999
        "2026-01-01T24:00:00Z",  # hour 00-23
        "2026-01-01T23:60:00Z",
        "2026-12-31T23:59:60Z",  # no leap second
        "2026-01-01t00:00:00Z",  # upper-case T
        "2026-01-01T00:00:00z",  # upper-case Z
        "2026-01-01 00:00:00Z",
        "2026-01-01T00:00:00",
        "2026-01-01T00:00:00+00:00",
        "2026-01-01T00:00:00.000Z",
        "2026-01-01T00:00Z",
        "2026-1-01T00:00:00Z",
        "12026-01-01T00:00:00Z",
        " 2026-01-01T00:00:00Z",
        "2026-01-01T00:00:00Z\n",
        "\u0662\u0660\u0662\u0666-01-01T00:00:00Z",  # Arabic-Indic digits are not [0-9]
        "",
    ],
)
def test_timestamps_refused(value: str) -> None:
    assert not is_ts(value)


@pytest.mark.parametrize(
    "value", [None, 20260101, b"2026-01-01T00:00:00Z", ["2026-01-01T00:00:00Z"]]
)
def test_non_strings_are_not_timestamps(value: object) -> None:
    assert not is_ts(value)


def test_string_order_is_time_order() -> None:
    stamps = ["2026-01-01T00:00:00Z", "0999-12-31T23:59:59Z", "2025-12-31T23:59:59Z",
              "2026-01-01T00:00:01Z", "2026-10-01T00:00:00Z", "2026-09-30T23:59:59Z"]
    assert all(is_ts(s) for s in stamps)
    assert sorted(stamps) == [
        "0999-12-31T23:59:59Z",
        "2025-12-31T23:59:59Z",
        "2026-01-01T00:00:00Z",
        "2026-01-01T00:00:01Z",
        "2026-09-30T23:59:59Z",
        "2026-10-01T00:00:00Z",
    ]
