"""Checks 1-12 over batches (check_many, start_checks): the verdicts of check_alone, whatever
runs the signature verifications (here, threads, helper processes sharing with this one)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pithlog.errors import DoorError
from pithlog.parallel import (
    PROCESS_CHUNK,
    Pool,
    in_threads,
    leave_interrupts_to_parent,
    worker_pool,
)
from pithlog.protocol.canonical import digest
from pithlog.protocol.checks import (
    PART,
    SignatureCheck,
    check_alone,
    check_many,
    prepare,
    start_checks,
    verify_batch,
)
from pithlog.protocol.events import Envelope, body_of, parse_envelope
from pithlog.protocol.keys import load_keyring
from pithlog.protocol.text_forms import decode_b64

CASE = Path(__file__).resolve().parents[2] / "vectors" / "cases" / "reasons"
KEYRING = load_keyring((CASE / "keyring.json").read_bytes())


def envelopes() -> list[Envelope]:
    out = []
    for line in (CASE / "events.jsonl").read_bytes().splitlines():
        try:
            out.append(parse_envelope(line))
        except DoorError:  # lines of the case that the door refuses are not checked
            continue
    return out


EXPECTED = [check_alone(e, KEYRING) for e in envelopes()]


def test_the_case_has_every_check_1_to_12_reason_and_passes() -> None:
    # bad_signature and bad_receipt are what a lost or wrong verification would change.
    assert {"bad_signature", "bad_receipt", None} <= set(EXPECTED)
    assert len(EXPECTED) >= 40


@pytest.mark.parametrize("workers", [1, 2, 4])
def test_check_many_in_threads(workers: int) -> None:
    batch = envelopes() * 3  # more than one part: threads are used
    assert check_many(batch, KEYRING, in_threads(workers)) == EXPECTED * 3


def test_check_many_here_without_a_verifier() -> None:
    assert check_many(envelopes() * 3, KEYRING) == EXPECTED * 3


def test_a_verifier_that_takes_nothing_leaves_the_verifications_to_reasons() -> None:
    # Every envelope is still prepared, and every verification the verifier did not run
    # is run where the reasons are asked for.
    taken: list[int] = []

    def lazy(parts: Iterator[list[SignatureCheck]]) -> Callable[[], None]:
        taken.append(len(next(parts)))  # one part, then it stops reading
        return lambda: None

    assert start_checks(envelopes() * 9, KEYRING, lazy).reasons() == EXPECTED * 9
    assert taken == [PART]


def _spied(pool: Pool) -> list[int]:
    """The number of verifications in each task ``pool`` is sent."""
    sent: list[int] = []
    submit = pool.submit

    def counting(fn: Any, *args: Any) -> Any:
        sent.append(len(args[0]))
        return submit(fn, *args)

    pool.submit = counting  # type: ignore[method-assign]
    return sent


def test_start_checks_in_verifying_processes_with_a_share_kept_here() -> None:
    batch = envelopes() * 30
    total = sum(len(prepare(e, KEYRING).checks()) for e in batch)
    with contextlib.ExitStack() as stack:
        pool = worker_pool(stack, 1, leave_interrupts_to_parent, ())
        sent = _spied(pool)
        pool._share = 0.5
        started = start_checks(batch, KEYRING, pool.verify)
        assert started.reasons() == EXPECTED * 30
        assert started.reasons() == EXPECTED * 30  # asking again waits for nothing
        # about half was sent, in fixed tasks; the rest was verified here
        assert abs(sum(sent) - total / 2) <= PART and max(sent) <= PROCESS_CHUNK + PART
        sent.clear()
        pool._share = 0.0
        assert start_checks(batch, KEYRING, pool.verify).reasons() == EXPECTED * 30
        assert sum(sent) == total


def _hold(seconds: float) -> None:
    time.sleep(seconds)


def test_the_share_kept_here_follows_how_the_helpers_kept_up() -> None:
    batch = envelopes() * 30
    with contextlib.ExitStack() as stack:
        pool = worker_pool(stack, 1, leave_interrupts_to_parent, ())
        pool.submit(int).result()  # started
        # The helper is busy with something else: its part of the batch lags behind
        # this process's share, which grows for the batches after.
        before = pool._share = 0.25
        pool.submit(_hold, 3.0)
        assert start_checks(batch, KEYRING, pool.verify).reasons() == EXPECTED * 30
        assert pool._share > before
        # The helper finished its part before this process asked (a task sent after the
        # batch's tasks is done after them: one helper takes them in order): it shrinks.
        before = pool._share
        started = start_checks(batch, KEYRING, pool.verify)
        pool.submit(int).result()
        assert started.reasons() == EXPECTED * 30
        assert pool._share < before


def test_verify_batch_judges_each_triple() -> None:
    key = next(iter(KEYRING.values()))
    envelope = next(e for e, r in zip(envelopes(), EXPECTED, strict=True)
                    if r is None and e.value["signer"]["key_id"] == key.key_id)  # fmt: skip
    signature = decode_b64(envelope.value["signature_b64"])
    assert signature is not None
    message = bytes.fromhex(digest(body_of(envelope.value)))
    flipped = bytes([message[0] ^ 1]) + message[1:]
    assert verify_batch([(key.public_key, signature, message),
                         (key.public_key, signature, flipped)]) == [True, False]  # fmt: skip
