"""The store in the public API (docs/api.md): ``pithlog.Store`` and its results, events as
``sign_event`` returns them, and what a pith lookup can answer."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import pithlog
from pithlog import STORED, AppendResult, PendingPith, Store, StoreError, sign_event
from pithlog.protocol.canonical import jcs
from pithlog.testing import test_key, test_keyring
from tests.unit.builders import canonical_record, record_event


def test_the_store_is_exported_from_pithlog() -> None:
    for name in ("Store", "AppendResult", "PendingPith", "STORED", "DUPLICATE", "REPLACED",
                 "EVIDENCE", "REJECTED", "REFUSED"):  # fmt: skip
        assert name in pithlog.__all__ and hasattr(pithlog, name)
    assert pithlog.Store is pithlog.store.Store


FACADE = """
import sys
import pithlog
before = sorted(m for m in sys.modules if m.startswith("pithlog."))
names = {name: getattr(pithlog, name) for name in pithlog.__all__}
namespace = {}
exec("from pithlog import *", namespace)
print(before, set(pithlog.__all__) <= set(dir(pithlog)),
      all(namespace[name] is names[name] for name in pithlog.__all__))
"""


def test_the_facade_imports_nothing_until_a_name_is_asked_for() -> None:
    """``import pithlog`` runs no module of it (the console script imports the command
    line only once it handles Ctrl-C and SIGTERM, ``pithlog.__main__``), and every name of
    ``__all__`` is there when asked for, by attribute, ``dir`` and ``import *``."""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", FACADE], capture_output=True, check=True,
                          env={**os.environ, "PYTHONPATH": str(root)}, timeout=60)  # fmt: skip
    assert done.stdout.decode().split() == ["[]", "True", "True"]


SUBMODULES = """
import pithlog
print("usage.arguments" in pithlog.errors.CODES, pithlog.protocol.reduce.chosen_record.__name__,
      pithlog.protocol.keys.load_key_file.__name__, pithlog.protocol.checks.check_alone.__name__)
"""


def test_the_modules_import_pithlog_gave_are_still_its_attributes() -> None:
    """``import pithlog`` imported the API's modules at once, so ``pithlog.errors`` and
    ``pithlog.protocol`` (``pithlog.errors.CODES``, ``pithlog.protocol.reduce.chosen_record``:
    docs/api.md) were there after it; the facade that imports each name when first asked
    for left them out (AttributeError). They are imported when first asked for too."""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", SUBMODULES], capture_output=True,
                          env={**os.environ, "PYTHONPATH": str(root)}, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().split() == ["True", "chosen_record", "load_key_file",
                                         "check_alone"]


def test_append_takes_what_sign_event_returns(tmp_path: Path) -> None:
    record = record_event()
    assert isinstance(record, dict)
    with Store.open(tmp_path / "s") as store:
        results = store.append([record], test_keyring())
        assert [(r.status, r.event_id) for r in results] == [(STORED, record["event_id"])]
        assert isinstance(results[0], AppendResult)
        assert store.event(record["event_id"]) == jcs(record)
        again = store.append([jcs(record)], test_keyring())
        assert again[0].status == "duplicate"
        broken = dict(record, event_id="sha256:" + "0" * 64)
        refused = store.append([broken], test_keyring())
        assert (refused[0].status, refused[0].reason) == ("rejected", "event_id_mismatch")
        assert store.append([{"event_id": 1}], test_keyring())[0].status == "refused"


def test_an_item_of_another_type_is_refused_before_its_batch_is_written(
    tmp_path: Path,
) -> None:
    """A str (a line read in text mode) raised TypeError "string argument without an
    encoding", and an int was taken as that many NUL bytes (bytes(5)) and refused at the
    door as if the input held them: both are StoreError store.item now, saying to pass
    bytes, and nothing of the batch is written."""
    record = record_event()
    line = jcs(record)
    with Store.open(tmp_path / "s") as store:
        for item in (line.decode(), 5, None):
            with pytest.raises(StoreError) as caught:
                store.append([line, item], test_keyring())
            assert caught.value.code == "store.item" and "item 1 " in caught.value.message
            assert "binary mode" in caught.value.message
            with pytest.raises(StoreError) as caught:
                list(store.append_batches([[item]], test_keyring()))
            assert caught.value.code == "store.item"
        judging = store.judging(test_keyring())
        try:
            with pytest.raises(StoreError) as caught:
                judging.send_each([[line], [line.decode()]])
            assert caught.value.code == "store.item" and "item 1 " in caught.value.message
            assert not judging.ready  # refused before any helper was started
        finally:
            judging.close()
        assert store.event(record["event_id"]) is None
        assert store.append([bytearray(line)], test_keyring())[0].status == STORED


def test_a_batch_or_batches_that_are_no_list_are_store_item(tmp_path: Path) -> None:
    """``append(None, keyring)``, ``append_batches(None, keyring)`` or a batch of None
    among the batches was a TypeError ("'NoneType' object is not iterable") from inside
    the pipeline; each is store.item now, and nothing of it is written. A batch before
    the refused one is written, and handed out, first (``Store.append_batches``)."""
    record = record_event()
    with Store.open(tmp_path / "s") as store:
        calls = (lambda: store.append(None, test_keyring()),  # type: ignore[arg-type]
                 lambda: store.append(7, test_keyring()),  # type: ignore[arg-type]
                 lambda: list(store.append_batches(None, test_keyring())),  # type: ignore[arg-type]
                 lambda: list(store.append_batches([None], test_keyring())))  # type: ignore[list-item]  # fmt: skip
        for call in calls:
            with pytest.raises(StoreError) as caught:
                call()
            assert caught.value.code == "store.item", caught.value
        assert store.tree_size() == 0
        done = []
        with pytest.raises(StoreError) as caught:
            for results in store.append_batches([[jcs(record)], 3], test_keyring()):  # type: ignore[list-item]
                done += results
        assert caught.value.code == "store.item", caught.value
        assert [r.status for r in done] == ["stored"] and store.tree_size() == 1


def test_a_batch_that_is_one_item_is_refused_saying_so(tmp_path: Path) -> None:
    """``store.append(event, keyring)`` (one event, not a list of them) walked the dict's
    member names and said its item 0 was a ``str``, to be read in binary mode; one line of
    bytes was taken as its byte values (ints). Both are ``store.item`` saying that the
    batch is one item, to be given in a list, and nothing is written."""
    record = record_event()
    with Store.open(tmp_path / "s") as store:
        for one in (record, jcs(record), bytearray(jcs(record)), jcs(record).decode(),
                    pithlog.parse_envelope(jcs(record))):  # fmt: skip
            with pytest.raises(StoreError) as caught:
                store.append(one, test_keyring())  # type: ignore[arg-type]
            assert caught.value.code == "store.item"
            assert "the batch is one " in caught.value.message, caught.value.message
            with pytest.raises(StoreError) as caught:
                list(store.append_batches([one], test_keyring()))  # type: ignore[list-item]
            assert "the batch is one " in caught.value.message, caught.value.message
        judging = store.judging(test_keyring())
        try:
            with pytest.raises(StoreError) as caught:
                judging.send_each([jcs(record)])  # type: ignore[list-item]
            assert "the batch is one bytes" in caught.value.message
        finally:
            judging.close()
        assert store.event(record["event_id"]) is None


def test_a_keyring_of_another_type_is_store_argument(tmp_path: Path) -> None:
    """A keyring's file bytes, its parsed JSON or ``None`` given where a Keyring goes was an
    AttributeError on ``digest`` from deep inside, or (judging) taken, to fail later; each
    method that takes a keyring says store.argument, naming itself, and writes nothing."""
    record = record_event()
    keyring = test_keyring()
    with Store.open(tmp_path / "s") as store:
        store.append([jcs(record)], keyring)
        size = store.tree_size()
        judging = store.judging(keyring)
        calls = {
            "append": lambda k: store.append([jcs(record)], k),
            "append_judged": lambda k: store.append_judged([], k, judging),
            "append_batches": lambda k: list(store.append_batches([[jcs(record)]], k)),
            "judging": store.judging,
            "replay": store.replay,
            "rebuild": store.rebuild,
            "rekey_plan": store.rekey_plan,
            "apply_keyring": store.apply_keyring,
            "rekey": store.rekey,
        }
        for method, call in calls.items():
            for wrong in (None, b"{}", {"keys": []}):
                with pytest.raises(StoreError) as caught:
                    call(wrong)
                assert caught.value.code == "store.argument", (method, caught.value)
                assert f"Store.{method}: the keyring is a " in caught.value.message
        judging.close()
        assert store.tree_size() == size
        assert store.replay(keyring).ok


def test_a_tree_size_or_index_that_is_not_an_int_is_store_tree_size(tmp_path: Path) -> None:
    """A size or leaf index of another type (a str of digits from a URL, a float, None
    where an int goes) was a TypeError from inside the read; it is store.tree_size."""
    with Store.open(tmp_path / "s") as store:
        store.append([jcs(record_event())], test_keyring())
        for call in (lambda: store.tree_root("1"), lambda: store.tree_root(1.0),
                     lambda: store.tree_root(True), lambda: store.inclusion_path(None),
                     lambda: store.inclusion_path("0"), lambda: store.consistency_path("a"),
                     lambda: store.consistency_path(0, "1")):  # fmt: skip
            with pytest.raises(StoreError) as caught:
                call()
            assert caught.value.code == "store.tree_size"
            assert "is not an int" in caught.value.message
        assert store.tree_root(1)[0] == 1 and store.inclusion_path(0)[0] == 1


def test_lookup_tells_not_a_pith_from_unknown_from_pending(tmp_path: Path) -> None:
    key = test_key("registry")
    record = record_event()
    pith = record["pith_number"]
    snapshot = sign_event(key, "mirror_hint", pith, "record", "2026-07-05T09:31:31Z",
                          {"locator": "https://m.example/a"})  # fmt: skip
    with Store.open(tmp_path / "s") as store:
        with pytest.raises(StoreError) as caught:
            store.state("arxiv:2411.00284")
        assert caught.value.code == "store.pith_number"
        with pytest.raises(StoreError):
            store.lookup("pith:2024:short")
        assert store.lookup(pith) is None and store.state(pith) is None
        store.append([snapshot], test_keyring())
        assert store.lookup(pith) == PendingPith(pith, 1, 0)
        assert store.state(pith) is None
        store.append([record], test_keyring())
        state = store.lookup(pith)
        assert isinstance(state, bytes) and state == store.state(pith)


def test_lookup_reads_the_state_and_the_status_in_one_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A state read that missed (the record not yet committed) followed by a status read
    that sees the record made a pith with a state ``PendingPith``: ``lookup`` reads both
    in one transaction, and ``Store.state`` made to miss does not change its answer."""
    record = record_event()
    with Store.open(tmp_path / "s") as store:
        store.append([record], test_keyring())
        state = store.state(record["pith_number"])
        assert isinstance(state, bytes)
        monkeypatch.setattr(Store, "state", lambda self, pith_number: None)
        assert store.lookup(record["pith_number"]) == state


def test_each_pith_walks_what_piths_lists_a_chunk_at_a_time(tmp_path: Path) -> None:
    """``Store.each_pith`` yields :meth:`Store.piths`'s summaries in the same order,
    whatever the chunk, and refuses a chunk that reads nothing."""
    records = [record_event(canonical_record(version=n)) for n in range(1, 6)]
    with Store.open(tmp_path / "s") as store:
        assert list(store.each_pith()) == []
        store.append(records, test_keyring())
        listed = store.piths()
        assert len(listed) == 5
        for chunk in (1, 2, 3, 5, 6, 1000):
            assert list(store.each_pith(chunk)) == listed
        assert store.pending() == []
        for chunk in (0, -1, 1.5):
            with pytest.raises(StoreError) as caught:
                store.each_pith(chunk)  # type: ignore[arg-type]
            assert caught.value.code == "store.argument"


def test_a_size_argument_out_of_its_range_is_store_argument(tmp_path: Path) -> None:
    """``rekey(piece_events=0)`` never ended (each piece re-reduced no pith, and the next
    piece was tried again), ``piece_copies=0`` was an IndexError, a ``str`` for a cap, a
    limit or ``replay``'s ``jobs`` a TypeError from a comparison inside, and ``jobs=0``
    was taken: each is store.argument, naming the method and the argument, before any
    work (bounded here by an alarm: the loop this guards against never ended)."""
    record = record_event()
    changed = test_keyring(registry={"not_after": "2027-01-01T00:00:00Z"})
    calls = [
        lambda s: s.rekey(changed, piece_events=0),
        lambda s: s.rekey(changed, piece_copies=0),
        lambda s: s.rekey(changed, piece_copies="10"),
        lambda s: s.rekey_plan(changed, cap="10"),
        lambda s: s.rekey_plan(changed, cap=-1),
        lambda s: s.apply_keyring(changed, limit="10"),
        lambda s: s.apply_keyring(changed, event_limit=None),
        lambda s: s.replay(test_keyring(), jobs=0),
        lambda s: s.replay(test_keyring(), jobs="2"),
        lambda s: s.replay(test_keyring(), jobs=1.5),
    ]

    def hung(*_: object) -> None:
        raise TimeoutError("the call did not end")

    was = signal.signal(signal.SIGALRM, hung)
    try:
        with Store.open(tmp_path / "s") as store:
            store.append([jcs(record)], test_keyring())
            for call in calls:
                signal.alarm(10)
                with pytest.raises(StoreError) as caught:
                    call(store)
                signal.alarm(0)
                assert caught.value.code == "store.argument", caught.value
                assert caught.value.message.startswith("Store.")
            assert store.keyring_digest() == test_keyring().digest
            assert store.rekey(changed, piece_events=1)["piths"] == 1
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, was)


def test_a_store_path_of_another_type_is_store_argument(tmp_path: Path) -> None:
    """``Store.open(None)`` (a setting left unset) or a path as bytes was a TypeError, for
    bytes one that named neither the path nor the fix ("a bytes-like object is required,
    not 'str'"); each is store.argument now, and nothing is created."""
    for wrong in (None, 7, bytes(tmp_path / "s"), bytearray(b"s")):
        with pytest.raises(StoreError) as caught:
            Store.open(wrong)  # type: ignore[arg-type]
        assert caught.value.code == "store.argument", caught.value
        assert caught.value.message.startswith("Store.open(")
    assert not (tmp_path / "s").exists()
    with Store.open(tmp_path / "s") as store:
        assert store.tree_size() == 0


def test_judging_arguments_of_another_type_are_store_errors(tmp_path: Path) -> None:
    """``append_judged(None, ...)``, a list of lines where the SentBatch objects go,
    ``judging=None`` (or any object that is no helpers) and ``send_each(None)`` were a
    TypeError or an AttributeError ("'NoneType' object has no attribute 'keyring'"); they
    are store.item (what was to be appended) or store.argument (the helpers), and
    nothing is written."""
    line = jcs(record_event())
    keyring = test_keyring()
    with Store.open(tmp_path / "s") as store:
        judging = store.judging(keyring)
        try:
            calls = {
                "store.item": (lambda: store.append_judged(None, keyring, judging),  # type: ignore[arg-type]
                               lambda: store.append_judged([[line]], keyring, judging),  # type: ignore[list-item]
                               lambda: judging.send_each(None)),  # type: ignore[arg-type]
                "store.argument": (lambda: store.append_judged([], keyring, None),  # type: ignore[arg-type]
                                   lambda: store.append([line], keyring, judging=object())),  # type: ignore[arg-type]
            }
            for code, uses in calls.items():
                for use in uses:
                    with pytest.raises(StoreError) as caught:
                        use()
                    assert caught.value.code == code, caught.value
            assert store.tree_size() == 0
            sent = judging.send_each([[line]])
            assert [r.status for r in store.append_judged(sent, keyring, judging)] == [STORED]
        finally:
            judging.close()


def test_a_refused_append_leaves_the_stores_keyring_as_it_was(tmp_path: Path) -> None:
    """A batch that is no batch, helpers of another kind or under another keyring, and
    sent batches that are no SentBatch objects are refused before the append's keyring is
    applied: such a call under a new keyring re-judged the store's copies under it (the
    store's keyring changed) and only then said what was wrong."""
    from pithlog.protocol.keys import make_keyring
    from pithlog.testing import test_keyring_entries

    keyring = test_keyring()
    other = make_keyring(test_keyring_entries(("registry",)))  # the registry's key alone
    assert other.digest != keyring.digest
    line = jcs(record_event())
    with Store.open(tmp_path / "s") as store:
        assert [r.status for r in store.append([line], keyring)] == [STORED]
        judging, under_other = store.judging(keyring), store.judging(other)
        try:
            refused = {
                "store.item": (lambda: store.append(None, other),  # type: ignore[arg-type]
                               lambda: store.append_judged(None, other, under_other)),  # type: ignore[arg-type]
                "store.argument": (lambda: store.append([line], other, judging=object()),  # type: ignore[arg-type]
                                   lambda: store.append_judged([], other, None)),  # type: ignore[arg-type]
                "store.judging_keyring": (lambda: store.append([line], other, judging=judging),),
            }
            for code, uses in refused.items():
                for use in uses:
                    with pytest.raises(StoreError) as caught:
                        use()
                    assert caught.value.code == code, caught.value
                    assert store.stats()["keyring_digest"] == keyring.digest, code
        finally:
            judging.close()
            under_other.close()


def test_a_device_for_a_store_path_is_not_a_store() -> None:
    """``Store.open("/dev/null")`` said ``store.io``, "cannot read /dev/null: Not a
    directory; check its permissions": the stat of its data.mdb failed with ENOTDIR, and
    only a regular file was told apart. A path that exists and is no folder is
    store.not_a_store, whether the store may be created, must exist or is read."""
    for options in ({}, {"create": False}, {"readonly": True}):
        with pytest.raises(StoreError) as caught:
            Store.open("/dev/null", **options)
        assert caught.value.code == "store.not_a_store", caught.value
        assert "/dev/null is a file, not a store's folder" in caught.value.message


def test_an_iterator_hands_out_its_chunk_read_before_close_then_is_store_closed(
    tmp_path: Path,
) -> None:
    """What docs/api.md says of ``export`` and ``each_pith`` after ``close()``: the rows of
    the chunk read before it are handed out, and the next read from the store raises
    store.closed (no check on every row: export would pay a getpid() a copy)."""
    records = [record_event(canonical_record(version=n)) for n in range(1, 4)]
    store = Store.open(tmp_path / "s")
    store.append(records, test_keyring())
    walk, piths = store.export(chunk=2), store.each_pith(chunk=2)
    first = (next(walk)[0], next(piths)["pith_number"])
    store.close()
    assert next(walk)[0] == first[0] + 1
    assert next(piths)["pith_number"] > first[1]
    for iterator in (walk, piths):
        with pytest.raises(StoreError) as caught:
            next(iterator)
        assert caught.value.code == "store.closed"
