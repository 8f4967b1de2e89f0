"""What pithlog says about a store (`append`/`import`'s lines and summary, `stats`,
`/stats` of `serve`, `replay --verify`'s summary, `sync`'s line) against counts made here,
from the input lines alone: a small model of the store (distinct copies, the copy step 0
keeps, the piths with a record), written without pithlog's own functions."""

from __future__ import annotations

import io
import json
import re
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from storeevents import g

from pithlog.cli import main
from pithlog.testing import TRUSTED, test_keyring_entries

# the keyring before and after a change: registry-2 is added by the second
BEFORE = tuple(name for name in TRUSTED if name != "registry-2")
AFTER = TRUSTED


def run(argv: list[str]) -> tuple[int, bytes, str]:
    out, err = io.BytesIO(), io.StringIO()
    status = main(argv, stdout=out, stderr=err)
    return status, out.getvalue(), err.getvalue()


class Model:
    """The store as the input lines make it: copies by their bytes, the preferred copy of
    each event_id by spec 7 step 0 (a copy passing checks 1-12 first, then the smallest
    bytes; only one invalid kind per event here), verdicts known by construction."""

    def __init__(self) -> None:
        self.copies: dict[bytes, dict[str, Any]] = {}  # bytes -> the event
        self.preferred: dict[str, bytes] = {}  # event_id -> bytes
        self.trusted: tuple[str, ...] = BEFORE
        self.judged: set[tuple[bytes, str]] = set()  # (copy, judge): the verdicts cached

    def fails(self, data: bytes) -> str | None:
        event = self.copies[data]
        if "_bad" in event:
            return str(event["_bad"])
        return None if event["_signer"] in self.trusted else "unknown_key"

    def judge_of(self, event: dict[str, Any]) -> str:
        # a verdict is cached under the key entry that gave it (or the key_id's absence)
        name = event["_signer"]
        return name if name in self.trusted else f"absent {name}"

    def append(self, lines: list[tuple[bytes, dict[str, Any] | None]],
               keep_invalid: bool) -> list[str]:  # fmt: skip
        statuses = []
        for data, event in lines:
            if event is None:
                statuses.append("refused")
                continue
            if data in self.copies:
                statuses.append("duplicate")
                continue
            self.copies[data] = event
            bad = self.fails(data)
            if bad is not None and not keep_invalid:
                del self.copies[data]
                statuses.append("rejected")
                continue
            self.judged.add((data, self.judge_of(event)))
            eid = event["event_id"]
            kept = self.preferred.get(eid)
            if kept is None:
                self.preferred[eid] = data
                statuses.append("stored")
            elif self.rank(data) < self.rank(kept):
                self.preferred[eid] = data
                statuses.append("replaced")
            else:
                statuses.append("evidence")
        return statuses

    def rank(self, data: bytes) -> tuple[int, bytes]:
        return (self.fails(data) is not None, data)

    def rekey(self, trusted: tuple[str, ...]) -> None:
        self.trusted = trusted
        for data, event in self.copies.items():  # the changed key's copies judged again
            self.judged.add((data, self.judge_of(event)))
        for eid in self.preferred:
            self.preferred[eid] = min((d for d, e in self.copies.items()
                                       if e["event_id"] == eid), key=self.rank)  # fmt: skip

    def piths(self) -> tuple[set[str], set[str]]:
        """(piths with a state, pending piths): a state needs a valid record_created."""
        with_events: set[str] = set()
        with_record: set[str] = set()
        for data in self.preferred.values():
            event = self.copies[data]
            with_events.add(event["pith_number"])
            if event["event_type"] == "record_created" and self.fails(data) is None:
                with_record.add(event["pith_number"])
        return with_record, with_events - with_record


def _index(model: Model) -> dict[str, int]:
    """The reduction index's entries: the slots of the events passing checks 1-12 dated no
    earlier than their pith's record (spec 7 step 4; a slot of two or more equivocated, an
    applied entry per slot but the record's), and the invalid events of every pith."""
    states, _ = model.piths()
    record_at = {model.copies[d]["pith_number"]: model.copies[d]["created_at"]
                 for d in model.preferred.values()
                 if model.copies[d]["event_type"] == "record_created"}  # fmt: skip
    slots: Counter[tuple[str, ...]] = Counter()
    invalid = 0
    for data in model.preferred.values():
        event = model.copies[data]
        pith = event["pith_number"]
        if model.fails(data) is not None:
            invalid += 1
        elif pith not in states:
            continue
        elif event["event_type"] == "record_created":
            slots[(pith, "record")] += 1
        elif event["created_at"] < record_at[pith]:
            invalid += 1  # check 13, predates_record
        else:
            slots[(pith, event["event_type"], event["target"], event["_signer"],
                   event["created_at"])] += 1  # fmt: skip
    return {"slots": len(slots), "applied": len(slots) - len(states),
            "equivocated": sum(n > 1 for n in slots.values()), "invalid": invalid}


def _signed(event: dict[str, Any], signer: str, bad: str | None = None) -> dict[str, Any]:
    """The event with what the model knows of it by construction: who signed it, and why
    checks 1-12 fail whatever the keyring (a forged signature, another body)."""
    return {**event, "_signer": signer, **({"_bad": bad} if bad else {})}


def _plain(event: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in event.items() if not k.startswith("_")}


def _line(event: dict[str, Any]) -> bytes:
    return g.encoded(_plain(event))


@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, Any]:
    """Three inputs: the first with duplicates in the batch, invalid events (a stranger's,
    a forged and a tampered copy), equivocations, several piths, two of them pending (no
    record_created); the second repeating some of the first, with new copies re-signed of
    stored events; the third, after registry-2 joins the keyring, its corrections (refused
    before) and re-signed copies."""
    records = [g.record(f"2502.{p:05d}", at=100) for p in range(5)]
    piths = [r["pith_number"] for r in records]
    first: list[dict[str, Any]] = []
    for p, (rec, pith) in enumerate(zip(records, piths, strict=True)):
        if p < 3:  # piths 3 and 4 stay pending
            first.append(_signed(rec, "registry"))
        first.append(_signed(g.attestation(pith, 200, f"a{p}", target="claim:c1"), "author"))
        first.append(_signed(g.mirror_hint(pith, 210, f"https://m.test.invalid/{p}"), "mirror"))
        # an equivocation: one slot, two statements
        first.append(_signed(g.attestation(pith, 300, f"yes {p}", target="claim:eq"), "author"))
        first.append(_signed(g.attestation(pith, 300, f"no {p}", target="claim:eq"), "author"))
        first.append(_signed(g.attestation(pith, 50, f"early {p}"), "author"))  # before R
        first.append(_signed(g.attestation(pith, 400, f"s {p}", signer="stranger"), "stranger"))
        first.append(_signed(g.correction(pith, 420, f"n {p}"), "registry"))
    victim = first[1]
    first.append(_signed(g.forged(_plain(victim)), "author", "bad_signature"))
    first.append(_signed(g.tampered(_plain(first[2])), "author", "event_id_mismatch"))
    first.insert(4, first[3])  # a duplicate within the batch
    second = [first[0], first[5], first[7]]  # across batches
    second += [_signed(g.resigned(_plain(victim), "author", bytes([n])), "author")
               for n in range(3)]  # fmt: skip
    second.append(_signed(g.resigned(_plain(first[1]), "author", b"again"), "author"))
    third = [_signed(_registry2(pith), "registry-2") for pith in piths]
    third += [_signed(g.resigned(records[0], "registry", bytes([n])), "registry")
              for n in range(2)]  # fmt: skip
    third.append(first[0])
    files = {}
    for name, events in (("first", first), ("second", second), ("third", third)):
        path = tmp_path / f"{name}.jsonl"
        path.write_bytes(b"".join(_line(e) + b"\n" for e in events) + b"{not json\n")
        files[name] = (str(path), events)
    for name, keys in (("before", BEFORE), ("after", AFTER)):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"keyring_version": "1",
                                    "keys": test_keyring_entries(keys)}))  # fmt: skip
        files[name] = str(path)
    return {**files, "tmp": tmp_path}


def _registry2(pith: str) -> dict[str, Any]:
    from pithlog.protocol.events import sign_event
    from pithlog.testing import test_key

    return sign_event(test_key("registry-2"), "correction", pith, "record", g.ts(450),
                      {"correction_type": "erratum", "notice": "by the second key"})


def _model_lines(model: Model, events: list[dict[str, Any]],
                 keep_invalid: bool) -> list[str]:  # fmt: skip
    lines: list[tuple[bytes, dict[str, Any] | None]] = [(_line(e), e) for e in events]
    return model.append([*lines, (b"{not json", None)], keep_invalid)


def _expected_stats(model: Model) -> dict[str, Any]:
    states, pending = model.piths()
    copies = len(model.copies)
    merkle = sum(copies >> level for level in range(1, copies.bit_length()))
    return {"seq": copies, "copies": copies, "by_copy": copies, "by_key": copies,
            "events": len(model.preferred), "by_pith": len(model.preferred),
            "evidence": copies - len(model.preferred), "piths": len(states | pending),
            "verdicts": len(model.judged), "merkle": merkle, "aliases": 6 * len(states),
            "rekey": 0, "dicts": 0, "piths_with_state": len(states),
            "piths_pending": len(pending), "next_seq": copies + 1,
            **_index(model)}  # fmt: skip


def _stats_said(stats: dict[str, Any]) -> dict[str, Any]:
    said = dict(stats["counts"])
    for name in ("piths_with_state", "piths_pending", "next_seq"):
        said[name] = stats[name]
    return {name: said[name] for name in _expected_stats(Model())}


def _appended(store: str, keyring: str, path: str, command: str, *extra: str,
              ) -> tuple[int, list[str], Counter[str], list[int]]:  # fmt: skip
    status, out, err = run(["--store", store, command, "--keyring", keyring, "--batch-size",
                            "7", *extra, path])  # fmt: skip
    results = [json.loads(line) for line in out.splitlines()]
    summary = re.search(r"(\d+) events in (\d+) transaction\(s\): (.*)$", err.strip())
    assert summary is not None, err
    said = Counter({s: int(n) for n, s in re.findall(r"(\d+) (\w+)", summary.group(3))})
    return status, [r["status"] for r in results], said, [int(summary.group(1)),
                                                          len(results)]  # fmt: skip


@pytest.mark.parametrize("keep_invalid", [False, True])
def test_every_figure_printed_is_the_model_s(inputs: dict[str, Any], keep_invalid: bool,
                                             ) -> None:  # fmt: skip
    store = str(inputs["tmp"] / "store")
    extra = ["--keep-invalid"] if keep_invalid else []
    model = Model()
    seen: Counter[str] = Counter()
    for name, keyring, command in (("first", "before", "append"), ("second", "before", "import"),
                                   ("third", "after", "append")):  # fmt: skip
        path, events = inputs[name]
        if keyring == "after":
            model.rekey(AFTER)
        wanted = _model_lines(model, events, keep_invalid)
        status, statuses, said, (total, printed) = _appended(store, inputs[keyring], path,
                                                             command, *extra)  # fmt: skip
        assert statuses == wanted, name
        seen.update(wanted)
        assert said == Counter(wanted) and total == printed == len(wanted), name
        assert status == (2 if {"refused", "rejected"} & set(wanted) else 0), name
        status, out, err = run(["--store", store, "stats"])
        assert status == 0, err
        stats = json.loads(out)
        assert _stats_said(stats) == _expected_stats(model), name
        status, out, err = run(["--store", store, "replay", "--verify", "--keyring",
                                inputs[keyring]])  # fmt: skip
        assert (status, out) == (0, b""), err
        states, pending = model.piths()
        assert (f"replay: {len(states | pending)} piths, {len(model.preferred)} events, "
                f"{len(model.copies)} copies (signatures verified): 0 discrepancies") in err
    statuses = {"stored", "duplicate", "replaced", "evidence", "refused", "rejected"}
    assert set(seen) == statuses - ({"rejected"} if keep_invalid else set())
    assert _expected_stats(model)["piths_pending"] == 2
    assert _expected_stats(model)["equivocated"] == 3
    # sync into a fresh store: the source's copies in its append order, judged again
    mirror = str(inputs["tmp"] / "mirror")
    status, out, err = run(["--store", mirror, "sync", "--keyring", inputs["after"],
                            "--from", store])  # fmt: skip
    line = json.loads(out)
    copies = len(model.copies)
    synced = Model()
    synced.trusted = AFTER
    _, exported, _ = run(["--store", store, "export"])
    order = {data: model.copies[data] for data in exported.splitlines()}
    wanted = Counter(synced.append(list(order.items()), keep_invalid=False))
    assert (line["local_copies"], line["remote_copies"]) == (0, copies)
    assert line["needed"] == copies and Counter(line["statuses"]) == wanted
    assert (line["proven"], line["refused_lines"]) == (0, 0)
    assert status == (2 if wanted["rejected"] else 0), err
    status, out, _ = run(["--store", mirror, "stats"])
    assert _stats_said(json.loads(out)) == _expected_stats(synced)


def test_stats_served_is_stats_printed(inputs: dict[str, Any]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient

    from pithlog.net.app import create_app
    from pithlog.net.served_log import ServeConfig
    from pithlog.store import Store
    from pithlog.testing import test_key

    store = str(inputs["tmp"] / "store")
    path, _ = inputs["first"]
    run(["--store", store, "append", "--keyring", inputs["before"], "--keep-invalid", path])
    _, out, _ = run(["--store", store, "stats"])
    printed = json.loads(out)
    with Store.open(store, readonly=True) as opened:
        app = create_app(ServeConfig(opened, test_key("registry"), "registry.test.invalid/pith"))
        with TestClient(app) as client:
            served = client.get("/stats").json()
    assert printed.pop("path") == store
    assert served == printed
