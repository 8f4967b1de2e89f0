"""Checks 1-12 over batches (check_many, start_checks): the verdicts of check_alone, whatever
runs the signature verifications."""

from __future__ import annotations

import multiprocessing
import threading
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import pytest

from pithlog.errors import DoorError
from pithlog.protocol.canonical import decode_b64, digest
from pithlog.protocol.checks import check_alone, check_many, start_checks, verify_batch
from pithlog.protocol.events import Envelope, body_of, parse_envelope
from pithlog.protocol.keys import load_keyring

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
    batch = envelopes() * 3  # above the size at which threads are used
    assert check_many(batch, KEYRING, workers) == EXPECTED * 3


def test_start_checks_on_an_executor() -> None:
    with ThreadPoolExecutor(2) as executor:
        batch = start_checks(envelopes() * 9, KEYRING, executor=executor)
        assert batch.reasons() == EXPECTED * 9
        assert batch.reasons() == EXPECTED * 9  # asking again waits for nothing


def test_a_batch_does_not_wait_for_a_busy_helper() -> None:
    # The one worker is held until the batch is judged: every part of the batch is still
    # waiting in the executor's queue, so reasons() must verify them all in this thread.
    release = threading.Event()
    with ThreadPoolExecutor(1) as executor:
        held = executor.submit(release.wait, 5)
        batch = start_checks(envelopes() * 9, KEYRING, executor=executor)
        assert batch.reasons() == EXPECTED * 9
        assert not held.done()  # judged while the helper was still busy
        release.set()
    assert held.result() is True  # released, not timed out


def test_start_checks_in_a_verifying_process() -> None:
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=context) as executor:
        assert start_checks(envelopes() * 9, KEYRING, executor=executor).reasons() == EXPECTED * 9


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
