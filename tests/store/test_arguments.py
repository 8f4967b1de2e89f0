"""Every argument of every public :class:`pithlog.Store` method, given a value of another
type (or a malformed event_id), is a :class:`StoreError` with a stable code before any
work (docs/api.md, "Arguments"): never a ``TypeError`` or ``AttributeError`` from deep
inside, a value taken by its truth (``keep_invalid="yes"`` as ``True``), or the store
blamed for the caller's argument (``store.corrupted`` for an event_id of no such form)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pithlog import Store, StoreError
from pithlog.protocol.canonical import jcs
from pithlog.testing import test_keyring
from tests.unit.builders import record_event

RECORD = record_event()
LINE = jcs(RECORD)
EID = RECORD["event_id"]
PITH = RECORD["pith_number"]
KEYRING = test_keyring()

Call = Callable[[Store], Any]

ARGUMENT = "store.argument"
TREE_SIZE = "store.tree_size"

CASES: list[tuple[str, Call, str, str]] = [
    # (case, call, code, what the message names)
    ("open create str", lambda s: Store.open(s.path, create="no"), ARGUMENT, "create="),
    ("open readonly int", lambda s: Store.open(s.path, readonly=1), ARGUMENT, "readonly="),
    ("open check str", lambda s: Store.open(s.path, check="yes"), ARGUMENT, "check="),
    ("open walkers int", lambda s: Store.open(s.path, walkers=5), ARGUMENT, "walkers="),
    ("open map_size bool", lambda s: Store.open(s.path, map_size=True), ARGUMENT, "map_size="),
    ("append keep_invalid str", lambda s: s.append([LINE], KEYRING, keep_invalid="yes"),
     ARGUMENT, "keep_invalid="),
    ("append keep_invalid int", lambda s: s.append([LINE], KEYRING, keep_invalid=1),
     ARGUMENT, "keep_invalid="),
    ("append keep_invalid None", lambda s: s.append([LINE], KEYRING, keep_invalid=None),
     ARGUMENT, "keep_invalid="),
    ("append change_keyring str", lambda s: s.append([LINE], KEYRING, change_keyring="no"),
     ARGUMENT, "change_keyring="),
    ("append_judged keep_invalid str",
     lambda s: s.append_judged([], KEYRING, None, keep_invalid="yes"), ARGUMENT, "keep_invalid="),
    ("append_judged change_keyring int",
     lambda s: s.append_judged([], KEYRING, None, change_keyring=0), ARGUMENT, "change_keyring="),
    ("append_batches keep_invalid bytes",
     lambda s: list(s.append_batches([[LINE]], KEYRING, keep_invalid=b"x")),
     ARGUMENT, "keep_invalid="),
    ("append_batches vet int", lambda s: list(s.append_batches([[LINE]], KEYRING, vet=5)),
     ARGUMENT, "vet="),
    ("event None", lambda s: s.event(None), ARGUMENT, "event_id="),
    ("event bytes", lambda s: s.event(EID.encode()), ARGUMENT, "event_id="),
    ("evidence None", lambda s: s.evidence(None), ARGUMENT, "event_id="),
    ("leaves_of bytes", lambda s: s.leaves_of(EID.encode()), ARGUMENT, "event_id="),
    ("status None", lambda s: s.status(None), ARGUMENT, "pith_number="),
    ("invalid_reason pith int", lambda s: s.invalid_reason(5, EID), ARGUMENT, "pith_number="),
    ("invalid_reason event None", lambda s: s.invalid_reason(PITH, None), ARGUMENT, "event_id="),
    ("each_pith chunk bool", lambda s: s.each_pith(True), ARGUMENT, "chunk="),
    ("export after bool", lambda s: s.export(after=True), ARGUMENT, "after="),
    ("export chunk bool", lambda s: s.export(chunk=True), ARGUMENT, "chunk="),
    ("replay verify str", lambda s: s.replay(KEYRING, verify="no"), ARGUMENT, "verify="),
    ("replay progress int", lambda s: s.replay(KEYRING, progress=5), ARGUMENT, "progress="),
    ("rebuild progress str", lambda s: s.rebuild(KEYRING, progress="x"), ARGUMENT, "progress="),
    ("rekey_plan count_events str", lambda s: s.rekey_plan(KEYRING, count_events="yes"),
     ARGUMENT, "count_events="),
    ("apply_keyring progress int", lambda s: s.apply_keyring(KEYRING, progress=5),
     ARGUMENT, "progress="),
    ("rekey progress int", lambda s: s.rekey(KEYRING, progress=5), ARGUMENT, "progress="),
    ("tile level str", lambda s: s.tile("0", 0, 1), ARGUMENT, "level="),
    ("tile index None", lambda s: s.tile(0, None, 1), ARGUMENT, "index="),
    ("tile index float", lambda s: s.tile(0, 1.5, 1), ARGUMENT, "index="),
    ("tile width str", lambda s: s.tile(0, 0, "1"), ARGUMENT, "width="),
    ("tile width bool", lambda s: s.tile(0, 0, True), ARGUMENT, "width="),
    ("leaf_data first str", lambda s: s.leaf_data("0", 1), TREE_SIZE, "leaf index"),
    ("leaf_data count str", lambda s: s.leaf_data(0, "2"), TREE_SIZE, "leaf count"),
    ("leaf_data first float", lambda s: s.leaf_data(1.5, 1), TREE_SIZE, "leaf index"),
    ("leaf_copies first None", lambda s: s.leaf_copies(None, 1), TREE_SIZE, "leaf index"),
    ("leaf_copies count str", lambda s: s.leaf_copies(0, "1"), TREE_SIZE, "leaf count"),
    ("leaf_copies max_bytes str", lambda s: s.leaf_copies(0, 1, "10"), ARGUMENT, "max_bytes="),
    ("copy None", lambda s: s.copy(None), ARGUMENT, "copy_sha256="),
    ("copy int", lambda s: s.copy(5), ARGUMENT, "copy_sha256="),
    ("copies int", lambda s: s.copies(5), ARGUMENT, "keys="),
    ("copies None", lambda s: s.copies(None), ARGUMENT, "keys="),
    ("copies bytes", lambda s: s.copies(b"\0" * 64), ARGUMENT, "keys="),
    ("copies item int", lambda s: s.copies([5]), ARGUMENT, "keys="),
    ("copy_seqs int", lambda s: s.copy_seqs(5), ARGUMENT, "keys="),
    ("copy_seqs item None", lambda s: s.copy_seqs([None]), ARGUMENT, "keys="),
    ("applied_copies_in_tree ids None", lambda s: s.applied_copies_in_tree(None, 1),
     ARGUMENT, "event_ids="),
    ("applied_copies_in_tree ids str", lambda s: s.applied_copies_in_tree(EID, 1),
     ARGUMENT, "event_ids="),
    ("applied_copies_in_tree id malformed", lambda s: s.applied_copies_in_tree(["x"], 1),
     ARGUMENT, "event_ids="),
    ("applied_copies_in_tree id int", lambda s: s.applied_copies_in_tree([5], 1),
     ARGUMENT, "event_ids="),
    ("applied_copies_in_tree size str", lambda s: s.applied_copies_in_tree([EID], "1"),
     TREE_SIZE, "tree size"),
    ("applied_copies_in_tree size None", lambda s: s.applied_copies_in_tree([EID], None),
     TREE_SIZE, "tree size"),
    ("applied_copies_in_tree size negative", lambda s: s.applied_copies_in_tree([EID], -1),
     TREE_SIZE, "tree size"),
    ("accepted_checkpoint int", lambda s: s.accepted_checkpoint(5), ARGUMENT, "origin="),
    ("accepted_checkpoint bytes", lambda s: s.accepted_checkpoint(b"o"), ARGUMENT, "origin="),
    ("accept_checkpoint origin None", lambda s: s.accept_checkpoint(None, b"n", None),
     ARGUMENT, "origin="),
    ("accept_checkpoint note str", lambda s: s.accept_checkpoint("o", "n", None),
     ARGUMENT, "note="),
    ("accept_checkpoint note None", lambda s: s.accept_checkpoint("o", None, None),
     ARGUMENT, "note="),
    ("accept_checkpoint previous str", lambda s: s.accept_checkpoint("o", b"n", "p"),
     ARGUMENT, "previous="),
    ("witness_state int", lambda s: s.witness_state(5), ARGUMENT, "origin="),
    ("witness_add None", lambda s: s.witness_add(None), ARGUMENT, "judge="),
    ("witness_checkpoint str", lambda s: s.witness_checkpoint("ab" * 32), ARGUMENT,
     "origin_sha256="),
]  # fmt: skip


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    path: Path = tmp_path_factory.mktemp("arguments") / "s"
    with Store.open(path) as opened:
        opened.append([LINE], KEYRING)
        yield opened


@pytest.mark.parametrize(("call", "code", "named"), [case[1:] for case in CASES],
                         ids=[case[0] for case in CASES])  # fmt: skip
def test_an_argument_of_another_type_is_a_store_error(
    store: Store, call: Call, code: str, named: str
) -> None:
    before = (store.tree_size(), store.accepted_checkpoint("o"), store.witness_state("o"))
    with pytest.raises(StoreError) as caught:
        call(store)
    assert caught.value.code == code, caught.value
    assert named in caught.value.message, caught.value
    if code == ARGUMENT:
        assert caught.value.message.startswith("Store."), caught.value
    assert (store.tree_size(), store.accepted_checkpoint("o"), store.witness_state("o")) == before


def test_the_cases_cover_every_public_method() -> None:
    """A public method added to Store without a case here is noticed: each one that takes
    an argument has at least one case above."""
    takes_none = {"close", "copy_keys", "keyring_digest", "pending", "pith_totals", "piths",
                  "stats", "tree_size"}
    # checked in test_api.py (pith numbers, aliases, tree sizes, judging, keyrings, counts)
    elsewhere = {"state", "lookup", "pith_for_alias", "piths_for_alias", "tree_root",
                 "inclusion_path", "consistency_path", "judging"}  # fmt: skip
    public = {name for name in dir(Store) if not name.startswith("_")
              and callable(getattr(Store, name))}  # fmt: skip
    covered = {case[0].split()[0] for case in CASES}
    assert public - takes_none - elsewhere - covered == set()
