"""Pith numbers (spec section 2)."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from pithlog.protocol.canonical import digest, parse
from pithlog.protocol.records import base32_of, is_pith_number, pith_number_for, pith_number_of

from .builders import STATE_SEED

SEED_PITH = "pith:2024:4F47WZKMWXPUQ7DX6KAARP5YKA"


def seed_record() -> dict[str, Any]:
    record: dict[str, Any] = parse(STATE_SEED.read_bytes())["current"]["canonical_record"]
    return record


def test_seed_pith_number_derives_from_its_canonical_record() -> None:
    record = seed_record()
    assert digest(record) == "e179fb654cb5df487c77f28008bfb8503dc76381bc22abfa9516d12ed2c5dca1"
    assert pith_number_of(record) == SEED_PITH
    assert pith_number_for(digest(record), record["metadata"]["submitted_at"]) == SEED_PITH


def test_base32_is_first_16_bytes_unpadded_upper_case() -> None:
    sha = digest(seed_record())
    b = base32_of(sha)
    assert len(b) == 26
    assert b == "4F47WZKMWXPUQ7DX6KAARP5YKA"
    assert base64.b32decode(b + "======") == bytes.fromhex(sha)[:16]


def test_year_comes_from_submitted_at() -> None:
    record = seed_record()
    record["metadata"]["submitted_at"] = "1999-11-01T00:43:54Z"
    number = pith_number_of(record)
    assert number.startswith("pith:1999:")
    assert number != SEED_PITH
    assert number[10:] == base32_of(digest(record))


def test_any_change_to_the_record_changes_the_number() -> None:
    record = seed_record()
    record["source"]["version"] = 3
    assert pith_number_of(record) != SEED_PITH


@pytest.mark.parametrize("value", [SEED_PITH, "pith:0001:" + "A" * 26, "pith:9999:" + "7" * 26])
def test_pith_number_form_accepted(value: str) -> None:
    assert is_pith_number(value)


@pytest.mark.parametrize(
    "value",
    [
        "pith:2024:4F47WZKMWXPUQ7DX6KAARP5YK",  # 25
        "pith:2024:4F47WZKMWXPUQ7DX6KAARP5YKAA",  # 27
        "pith:2024:4f47wzkmwxpuq7dx6kaarp5yka",  # lower case
        "pith:2024:4F47WZKMWXPUQ7DX6KAARP5YK1",  # 1 is not base32
        "pith:24:4F47WZKMWXPUQ7DX6KAARP5YKA",
        "Pith:2024:4F47WZKMWXPUQ7DX6KAARP5YKA",
        "pith:2024:4F47WZKMWXPUQ7DX6KAARP5YKA\n",
        "pith:2024:4F47WZKMWXPUQ7DX6KAARP5YKA=",
        None,
        42,
    ],
)
def test_pith_number_form_refused(value: object) -> None:
    assert not is_pith_number(value)
