"""``pithlog mirror`` against real ``pithlog serve`` processes on 127.0.0.1: the mirror's
log, tree and states equal the origin's; a rewritten history under the same key is refused
with evidence; a server killed mid-mirror leaves a prefix the next run continues; served
bytes that do not match what was signed are never stored."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from served import slow_head
from serving import ORIGIN, Keys, g, make_keys, serving

from pithlog.cli import main
from pithlog.errors import MirrorError, PithlogError, StoreError
from pithlog.net import mirror as mm
from pithlog.protocol.canonical import MAX_ENVELOPE_BYTES
from pithlog.protocol.keys import load_keyring
from pithlog.store import Store
from pithlog.transparency import merkle
from pithlog.transparency.checkpoint import parse_checkpoint_text, parse_note
from pithlog.transparency.tiles import right_edge


def run(argv: list[str]) -> tuple[int, bytes, str]:
    out, err = io.BytesIO(), io.StringIO()
    status = main(argv, stdout=out, stderr=err)
    return status, out.getvalue(), err.getvalue()


def _events(seed: int, piths: int = 40) -> list[dict[str, Any]]:
    """Mixed events (invalid ones among them), more than two bundles of 256 leaves."""
    return g.mixed_events(random.Random(seed), piths=piths, per_pith=8)


def _store(path: Path, events: list[dict[str, Any]]) -> Path:
    with Store.open(path) as store:
        for i in range(0, len(events), 100):
            store.append([g.encoded(e) for e in events[i : i + 100]], g.KEYRING,
                         keep_invalid=True)  # fmt: skip
    return path


def _same_log(a: Path, b: Path) -> None:
    with Store.open(a, readonly=True) as x, Store.open(b, readonly=True) as y:
        assert x.tree_root() == y.tree_root()
        assert [d for _, d in x.export()] == [d for _, d in y.export()]
        piths = x.piths()
        assert piths == y.piths()
        for p in piths:
            assert x.state(p["pith_number"]) == y.state(p["pith_number"])


def mirror(store: Path, url: str, keys: Keys, *extra: str) -> tuple[int, bytes, str]:
    return run(["--store", str(store), "mirror", url, "--keyring", str(keys.keyring),
                "--origin", ORIGIN, *extra])  # fmt: skip


@pytest.fixture
def keys(tmp_path: Path) -> Keys:
    return make_keys(tmp_path)


def test_the_mirror_equals_the_origin(tmp_path: Path, keys: Keys) -> None:
    events = _events(1)
    origin = _store(tmp_path / "origin", events[:300])
    copy = tmp_path / "mirror"
    with serving(origin, keys) as server:
        status, out, err = mirror(copy, server.url, keys, "--progress")
        assert status == 0, err
        assert f"{300}/{300}" in err and "leaf" in err  # the bar, forced off a terminal
        # the bar is closed before the summary: its last line printed once, above it
        assert err.rstrip("\n").splitlines()[-1].startswith(f"mirror: {ORIGIN} at size 300:")
        doc = json.loads(out)
        assert doc["appended"] == doc["size"] > 256 and doc["accepted"] and doc["held_before"] == 0
        assert doc["statuses"]["stored"] > 0 and set(doc["statuses"]) <= {
            "stored", "replaced", "evidence"}
        _same_log(origin, copy)
        # nothing new: nothing fetched but the checkpoint
        status, out, _ = mirror(copy, server.url, keys)
        assert status == 0 and json.loads(out)["appended"] == 0
        assert not json.loads(out)["accepted"]
        # the origin grows while served: the mirror follows, from where it was
        _store(origin, events[300:])
        status, out, err = mirror(copy, server.url, keys)
        assert status == 0, err
        doc = json.loads(out)
        assert doc["held_before"] == 300 and doc["appended"] == len(events) - 300
        assert b"Traceback" not in server.stderr
    _same_log(origin, copy)
    with Store.open(copy, readonly=True) as m:
        accepted = m.accepted_checkpoint(ORIGIN)
        assert accepted is not None
        cp = parse_checkpoint_text(parse_note(accepted).text)
        assert (cp.size, cp.root) == m.tree_root()


def test_a_rewritten_history_is_refused_with_evidence(tmp_path: Path, keys: Keys) -> None:
    events = _events(2)
    origin = _store(tmp_path / "origin", events[:200])
    copy = tmp_path / "mirror"
    with serving(origin, keys) as server:
        assert mirror(copy, server.url, keys)[0] == 0
    # the same key and origin, another history: the first 200 leaves in another order
    rewritten = _store(tmp_path / "rewritten", events[100:200] + events[:100] + events[200:])
    evidence = tmp_path / "evidence"
    with Store.open(copy, readonly=True) as m:
        before = (m.tree_root(), m.copy_keys(), m.accepted_checkpoint(ORIGIN))
    with serving(rewritten, keys) as server:
        status, out, err = mirror(copy, server.url, keys, "--evidence-dir", str(evidence))
        assert status == 1 and "[mirror.split_view]" in err and out == b""
        served = httpx.get(server.url + "/checkpoint").content
    with Store.open(copy, readonly=True) as m:
        assert (m.tree_root(), m.copy_keys(), m.accepted_checkpoint(ORIGIN)) == before
    (path,) = evidence.iterdir()
    assert str(path) in err
    doc = json.loads(path.read_text())
    assert doc["accepted_checkpoint"].encode() == before[2]
    assert doc["served_checkpoint"].encode() == served
    assert doc["consistency_proof"].startswith("pithlog-consistency-proof@v1\nold 200\n")
    # the evidence is what verify-proof refuses: the two checkpoints and the proof
    for name in ("old.cp", "new.cp", "proof"):
        key = {"old.cp": "accepted_checkpoint", "new.cp": "served_checkpoint",
               "proof": "consistency_proof"}[name]  # fmt: skip
        (tmp_path / name).write_text(doc[key])
    status, _, err = run(["verify-proof", "--keyring", str(keys.keyring), str(tmp_path / "proof"),
                          str(tmp_path / "old.cp"), str(tmp_path / "new.cp")])  # fmt: skip
    assert status == 1 and "[proof.consistency]" in err
    # and the file as a whole proves the split view to anyone, offline: the log's own proof
    # leads to its new root from another tree of 200 leaves than the one it signed
    assert doc["evidence_type"] == "pith-split-view-proof"
    status, out, err = run(["verify-proof", "--keyring", str(keys.keyring), str(path)])
    assert status == 0, err
    assert json.loads(out)["sizes"] == [200, json.loads(out)["sizes"][1]]
    assert "split view proven" in err
    # every single-byte change of it fails or is no evidence at all
    data = path.read_bytes()
    for at in range(0, len(data), 7):
        changed = bytearray(data)
        changed[at] ^= 0x01 if changed[at] != 0x0A else 0x20
        path.write_bytes(bytes(changed))
        assert run(["verify-proof", "--keyring", str(keys.keyring), str(path)])[0] in (1, 2)


def test_an_older_rewritten_tree_is_proven_a_split_view_by_the_mirror_itself(
    tmp_path: Path, keys: Keys
) -> None:
    """The log serves a smaller tree, of another history, than the one accepted, and has
    no proof to give (it holds no larger tree): the mirror holds the accepted tree, so it
    proves the split view from its own copy, where it stopped with mirror.unproven and no
    evidence before."""
    events = _events(8)
    origin = _store(tmp_path / "origin", events[:300])
    copy = tmp_path / "mirror"
    with serving(origin, keys) as server:
        assert mirror(copy, server.url, keys)[0] == 0
    rewritten = _store(tmp_path / "rewritten", events[100:200] + events[:100])
    evidence = tmp_path / "evidence"
    with Store.open(copy, readonly=True) as m:
        before = (m.tree_root(), m.accepted_checkpoint(ORIGIN))
    with serving(rewritten, keys) as server:
        status, out, err = mirror(copy, server.url, keys, "--evidence-dir", str(evidence))
    assert status == 1 and "[mirror.split_view]" in err and "this mirror's" in err, err
    with Store.open(copy, readonly=True) as m:
        assert (m.tree_root(), m.accepted_checkpoint(ORIGIN)) == before
    (path,) = evidence.iterdir()
    status, out, err = run(["verify-proof", "--keyring", str(keys.keyring), str(path)])
    assert status == 0 and "split view proven" in err, err
    assert json.loads(out)["sizes"] == [200, 300]


@pytest.mark.parametrize(("accepted", "served"), [(2, 5), (256, 300), (300, 256), (5, 1)])
def test_a_split_view_whose_smaller_tree_has_a_power_of_two_size_is_proven(
    tmp_path: Path, keys: Keys, accepted: int, served: int
) -> None:
    """RFC 9162's consistency proof from a power-of-two size leaves that tree's root out,
    so the proof as served could not show that the larger tree commits to another one:
    the mirror's evidence said split view and verify-proof said not proven. The evidence
    now carries that root first, taken from what the larger checkpoint's root commits to
    (the served tiles, or the mirror's own copy of the accepted tree)."""
    events = _events(9, piths=45)
    origin = _store(tmp_path / "origin", events[:accepted])
    copy = tmp_path / "mirror"
    with serving(origin, keys) as server:
        assert mirror(copy, server.url, keys)[0] == 0
    # the same key and origin, another history: the first two leaves swapped
    other = [events[1], events[0], *events[2:served]][:served]
    rewritten = _store(tmp_path / "rewritten", other)
    with serving(rewritten, keys) as server:
        status, _, err = mirror(copy, server.url, keys, "--evidence-dir", str(tmp_path / "ev"))
    assert status == 1 and "[mirror.split_view]" in err, err
    (path,) = (tmp_path / "ev").iterdir()
    status, out, err = run(["verify-proof", "--keyring", str(keys.keyring), str(path)])
    assert status == 0 and "split view proven" in err, err
    assert json.loads(out)["sizes"] == sorted([accepted, served])
    # the root put first is checked with the rest: another one proves nothing
    doc = json.loads(path.read_text())
    lines = doc["consistency_proof"].split("\n")
    lines[3] = lines[4]
    doc["consistency_proof"] = "\n".join(lines)
    path.write_bytes(json.dumps(doc, sort_keys=True, separators=(",", ":"),
                               ensure_ascii=False).encode() + b"\n")
    assert run(["verify-proof", "--keyring", str(keys.keyring), str(path)])[0] == 1


def test_same_size_other_root_is_a_split_view(tmp_path: Path, keys: Keys) -> None:
    events = _events(3, piths=20)
    origin = _store(tmp_path / "origin", events)
    copy = tmp_path / "mirror"
    with serving(origin, keys) as server:
        assert mirror(copy, server.url, keys)[0] == 0
    other = _store(tmp_path / "other", list(reversed(events)))
    with serving(other, keys) as server:
        status, _, err = mirror(copy, server.url, keys, "--evidence-dir", str(tmp_path / "ev"))
        assert status == 1 and "two roots for one size" in err
    (path,) = (tmp_path / "ev").iterdir()
    status, out, err = run(["verify-proof", "--keyring", str(keys.keyring), str(path)])
    assert status == 0 and json.loads(out)["how"] == "two roots for one size", err


def test_a_checkpoint_of_another_origin_than_the_one_required_is_not_mirrored(
    tmp_path: Path, keys: Keys
) -> None:
    """``--origin`` is required of the served checkpoint, whose key the keyring allows:
    a log serving another origin's checkpoint stores and accepts nothing."""
    origin = _store(tmp_path / "origin", _events(11, piths=4))
    copy = tmp_path / "mirror"
    with serving(origin, keys) as server:
        status, _, err = run(["--store", str(copy), "mirror", server.url, "--keyring",
                              str(keys.keyring), "--origin", ORIGIN + "/other"])  # fmt: skip
    assert status == 1 and "[checkpoint.origin]" in err, err
    assert not copy.exists()  # a new store is made for a checkpoint that verifies only


def test_a_checkpoint_that_does_not_verify_leaves_no_store_behind(
    tmp_path: Path, keys: Keys
) -> None:
    """mirror and audit make a new store only for a checkpoint that verifies: any answer
    of /checkpoint made it, and junk, a checkpoint signed by a key the keyring lacks or
    one short of its witnesses' quorum left an empty store (checkpoint.malformed, ...)."""
    from served import in_thread
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    from pithlog.testing import test_keyring_entries

    origin = _store(tmp_path / "origin", _events(12, piths=4))
    with serving(origin, keys) as server:
        signed = httpx.get(server.url + "/checkpoint").content
    # a keyring that does not hold the registry's key
    stranger = tmp_path / "stranger.json"
    stranger.write_text(json.dumps({"keyring_version": "1", "keys": test_keyring_entries(
        ("author", "mirror"))}))  # fmt: skip
    answers = {"junk": b"junk", "signed": signed}

    async def checkpoint(request: Request) -> Response:
        return Response(answers[request.path_params["kind"]], 200)

    app = Starlette(routes=[Route("/{kind}/checkpoint", checkpoint)])
    with in_thread(app) as url:
        for command in ("mirror", "audit"):
            for kind, keyring, extra, code in [
                ("junk", keys.keyring, [], "checkpoint.malformed"),
                ("signed", stranger, [], "checkpoint.untrusted"),
                ("signed", keys.keyring, ["--witness-key", "test-mirror"],
                 "witness.quorum"),
            ]:  # fmt: skip
                if command == "audit" and extra:
                    continue  # audit takes no witnesses
                store = tmp_path / f"{command}-{kind}-{len(extra)}"
                status, out, err = run(["--store", str(store), command, f"{url}/{kind}",
                                        "--keyring", str(keyring), *extra])  # fmt: skip
                assert status in (1, 2) and out == b"" and "Traceback" not in err, err
                assert f"[{code}]" in err, err
                assert not store.exists(), (command, kind, err)


def test_a_mirror_with_leaves_of_its_own_says_what_to_do(tmp_path: Path, keys: Keys) -> None:
    events = _events(9, piths=10)
    origin = _store(tmp_path / "origin", events[:30])
    copy = tmp_path / "mirror"
    with serving(origin, keys) as server:
        assert mirror(copy, server.url, keys)[0] == 0
        _store(copy, events[30:])  # appended to the mirror, not to the log
        status, _, err = mirror(copy, server.url, keys)
    assert status == 1 and "[mirror.diverged]" in err and "into a fresh store" in err, err


def test_a_store_without_an_accepted_checkpoint_must_hold_a_prefix_of_the_log(
    tmp_path: Path, keys: Keys
) -> None:
    """Leaves in a store that never accepted the origin's checkpoint (append, import, sync)
    are mirrored onto only when they are the log's first leaves: another log of the same
    size, a shorter one or a longer one is ``mirror.diverged``, and nothing is stored or
    accepted; a true prefix is continued."""
    events = _events(10, piths=10)
    origin = _store(tmp_path / "origin", events[:60])
    others = list(reversed(events[:60]))
    cases = {"same size": others, "shorter": others[:20], "longer": [*others, *events[60:]]}
    with serving(origin, keys) as server:
        for name, own in cases.items():
            copy = _store(tmp_path / name, own)
            with Store.open(copy, readonly=True) as m:
                before = m.tree_root()
            status, _, err = mirror(copy, server.url, keys)
            assert status == 1 and "[mirror.diverged]" in err, (name, err)
            with Store.open(copy, readonly=True) as m:
                assert m.tree_root() == before, name
                assert m.accepted_checkpoint(ORIGIN) is None, name
        prefix = _store(tmp_path / "prefix", events[:20])
        with Store.open(prefix, readonly=True) as m, Store.open(origin, readonly=True) as o:
            assert m.tree_root() == o.tree_root(20)
        status, out, err = mirror(prefix, server.url, keys)
        assert status == 0, err
        assert json.loads(out)["held_before"] == 20
    _same_log(origin, prefix)


def test_an_origin_that_does_not_answer_leaves_no_store_behind(
    tmp_path: Path, keys: Keys
) -> None:
    """mirror and audit make their store only once the origin answered: a URL that does
    not answer (a mistyped port) left an empty store, ./pithlog-store without --store."""
    with contextlib.closing(socket.socket()) as probe:
        probe.bind(("127.0.0.1", 0))  # a port nothing listens on (bound, not listening)
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"
        for command in ("mirror", "audit"):
            store = tmp_path / command
            status, out, err = run(["--store", str(store), command, url, "--keyring",
                                    str(keys.keyring)])  # fmt: skip
            assert status != 0 and out == b"" and "[mirror.fetch]" in err, err
            assert not store.exists(), command
    # a store that exists is opened as before, and the same failure leaves it as it was
    events = _events(10, piths=4)
    origin = _store(tmp_path / "origin", events)
    with serving(origin, keys) as server:
        assert mirror(tmp_path / "held", server.url, keys)[0] == 0
    status, _, err = mirror(tmp_path / "held", url, keys)
    assert status != 0 and "[mirror.fetch]" in err
    _same_log(origin, tmp_path / "held")


def test_evidence_has_a_folder_before_the_mirror_starts_and_a_spare_after(
    tmp_path: Path, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--evidence-dir that names a file is refused before anything is fetched or stored;
    a folder that fails once the split view is found (here a file put in its place) does
    not lose the evidence: it goes to the temporary folder, and the error says so."""
    events = _events(3, piths=20)
    origin = _store(tmp_path / "origin", events)
    copy = tmp_path / "mirror"
    blocked = tmp_path / "blocked"
    blocked.write_bytes(b"")
    with serving(origin, keys) as server:
        for where in (blocked, blocked / "under"):
            status, out, err = mirror(copy, server.url, keys, "--evidence-dir", str(where))
            assert (status, out) == (2, b"") and "[usage.arguments] --evidence-dir" in err
            assert "is not a folder" in err and not copy.exists()
        assert mirror(copy, server.url, keys)[0] == 0
    spare = tmp_path / "spare"
    spare.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(spare))
    other = _store(tmp_path / "other", list(reversed(events)))
    keyring = load_keyring(keys.keyring.read_bytes())
    with (serving(other, keys) as server, Store.open(copy) as store,
          mm.Origin(server.url) as served, pytest.raises(MirrorError) as caught):  # fmt: skip
        mm.mirror_once(store, served, keyring, ORIGIN, blocked)
    (path,) = spare.iterdir()
    assert caught.value.code == "mirror.split_view" and caught.value.evidence == path
    assert f"evidence written to {path} ({blocked} could not take it: " in caught.value.message
    status, out, err = run(["verify-proof", "--keyring", str(keys.keyring), str(path)])
    assert status == 0 and json.loads(out)["how"] == "two roots for one size", err


def test_a_server_killed_mid_mirror_then_resumed(tmp_path: Path, keys: Keys,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # no bundle fetched ahead: the kill then always comes before the last bundles are read
    monkeypatch.setattr(mm, "LOOKAHEAD", 0)
    events = _events(4, piths=100)
    origin = _store(tmp_path / "origin", events)
    keyring = load_keyring(keys.keyring.read_bytes())
    with Store.open(tmp_path / "mirror") as copy:
        with serving(origin, keys) as server, mm.Origin(server.url) as client:
            batches: list[int] = []

            def kill_after_first(held: int, total: int) -> None:
                batches.append(held)
                if len(batches) == 1:
                    server.kill()

            with pytest.raises(MirrorError) as caught:
                mm.mirror_once(copy, client, keyring, ORIGIN, batch_bundles=1,
                               progress=kill_after_first)  # fmt: skip
            assert caught.value.code == "mirror.fetch"
        held = copy.tree_size()
        assert held % 256 == 0 and 256 <= held < len(events)
        with Store.open(origin, readonly=True) as o:
            assert copy.tree_root() == o.tree_root(held)
        with serving(origin, keys) as server, mm.Origin(server.url) as client:
            report = mm.mirror_once(copy, client, keyring, ORIGIN)
            assert report.held_before == held and report.appended == len(events) - held
            assert not report.accepted  # the checkpoint was accepted by the first run
    _same_log(origin, tmp_path / "mirror")


def _stopped_at_the_third_bundle(monkeypatch: pytest.MonkeyPatch, stop: Callable[[], None]
                                 ) -> None:  # fmt: skip
    """Bundles fetched one at a time, one per batch, and ``stop()`` called as the third
    bundle's copies are fetched: the first batch is being written then, the second taken
    through the door, and the append pipeline writes both when its input fails."""
    monkeypatch.setattr(mm, "LOOKAHEAD", 0)
    real = mm.Origin.copies

    def copies(self: mm.Origin, index: int, width: int) -> list[bytes]:
        if index == 2:
            stop()
        return real(self, index, width)

    monkeypatch.setattr(mm.Origin, "copies", copies)


@pytest.mark.parametrize("stop", ["kill", "interrupt"])
def test_a_pass_that_stops_midway_reports_the_leaves_it_committed(
    tmp_path: Path, keys: Keys, monkeypatch: pytest.MonkeyPatch, stop: str
) -> None:
    """A pass that stops after some of its batches were committed (its origin killed, or
    the mirror interrupted) put out no line: its leaves were in no line's ``appended``, and
    summing them undercounted the store's growth. Its line is put out, with the code that
    stopped it in ``error``, and stderr says how far the store got.

    The batch verified and through the door, not yet written, when the origin failed
    after the second bundle was thrown away: the pass kept 256 leaves of the 512 it had
    verified, and the next fetched bundles 1-3 again. Both batches are kept now, and the
    next pass fetches only the bundles after them."""
    events = _events(4, piths=100)
    origin = _store(tmp_path / "origin", events)
    copy = tmp_path / "mirror"
    with serving(origin, keys) as server:
        def stopping() -> None:
            if stop == "kill":
                server.kill()
            else:
                raise KeyboardInterrupt

        _stopped_at_the_third_bundle(monkeypatch, stopping)
        status, out, err = mirror(copy, server.url, keys, "--batch-bundles", "1")
    code = {"kill": "mirror.fetch", "interrupt": "interrupted"}[stop]
    assert status == {"kill": 2, "interrupt": 130}[stop], err
    first = json.loads(out)
    with Store.open(copy, readonly=True) as m:
        held = m.tree_size()
    assert first["error"] == code and first["held_before"] == 0
    assert first["appended"] == held == 512 and first["accepted"], (first, err)
    assert first["size"] == len(events) and sum(first["statuses"].values()) == 512
    said, stopped = err.rstrip("\n").splitlines()[-2:]
    assert said == (f"mirror: {ORIGIN} at size {len(events)}: the pass stopped after 512 "
                    "leaves appended (0 held before); they are stored, and the next pass "
                    "continues from the last batch committed"), err  # fmt: skip
    assert stopped.startswith({"kill": "pithlog: [mirror.fetch]",
                               "interrupt": "pithlog: interrupted"}[stop]), err  # fmt: skip
    monkeypatch.undo()
    fetched: list[int] = []
    real = mm.Origin.copies

    def copies(self: mm.Origin, index: int, width: int) -> list[bytes]:
        fetched.append(index)
        return real(self, index, width)

    monkeypatch.setattr(mm.Origin, "copies", copies)
    with serving(origin, keys) as server:
        status, out, err = mirror(copy, server.url, keys)
    assert status == 0, err
    assert sorted(fetched) == [2, 3] and len(events) - 512 <= 2 * 256  # only what it lacked
    second = json.loads(out)
    assert "error" not in second and second["held_before"] == 512
    assert first["appended"] + second["appended"] == len(events)
    _same_log(origin, copy)


def test_a_copy_refused_in_a_batch_taken_before_a_fetch_fails_is_what_the_pass_says(
    tmp_path: Path, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second batch's copies not the ones their leaves commit to (two swapped, as an
    origin could commit to them; the mirror's vet sees it), and the origin gone as the
    third bundle is fetched, while that batch waits to be written: the pass said
    ``mirror.fetch`` (exit 2, "run it again") and the evidence waited for the next run. It
    says ``mirror.copy`` (exit 1); the first batch is kept, nothing of the second."""
    events = _events(4, piths=100)
    origin = _store(tmp_path / "origin", events)
    copy = tmp_path / "mirror"
    real = mm._committed_copies
    vetted: list[int] = []

    def swapped(leaves: Any, items: list[Any], hashes: list[bytes | None]) -> None:
        vetted.append(leaves[0][0])
        if len(vetted) == 2:
            items[0], items[1] = items[1], items[0]
            hashes[0], hashes[1] = hashes[1], hashes[0]
        real(leaves, items, hashes)

    monkeypatch.setattr(mm, "_committed_copies", swapped)
    with serving(origin, keys) as server:
        _stopped_at_the_third_bundle(monkeypatch, server.kill)
        status, out, err = mirror(copy, server.url, keys, "--batch-bundles", "1")
    assert status == 1 and vetted == [0, 256], err
    line = json.loads(out)
    assert line["error"] == "mirror.copy" and line["appended"] == 256, line
    assert err.rstrip("\n").splitlines()[-1].startswith(
        "pithlog: [mirror.copy] leaf 256: the copy served is not the one"), err
    with Store.open(copy, readonly=True) as m:
        assert m.tree_size() == 256


def test_a_following_pass_that_loses_its_origin_midway_reports_its_leaves_then_retries(
    tmp_path: Path, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``--follow``, a pass whose origin dies after a batch was committed puts out its
    line (``error``: ``mirror.fetch``) before it says it tries again: the sum of the
    lines' ``appended`` is the store's growth."""
    from pithlog.cli import mirror_commands

    events = _events(4, piths=100)
    origin = _store(tmp_path / "origin", events)
    copy = tmp_path / "mirror"
    written = io.BytesIO()
    seen: list[bytes] = []

    def poll_again(seconds: float) -> None:
        seen.append(written.getvalue())
        raise KeyboardInterrupt

    monkeypatch.setattr(mirror_commands, "time", SimpleNamespace(sleep=poll_again))
    err = io.StringIO()
    with serving(origin, keys) as server:
        _stopped_at_the_third_bundle(monkeypatch, server.kill)
        status = main(["--store", str(copy), "mirror", server.url, "--keyring",
                       str(keys.keyring), "--batch-bundles", "1", "--follow", "60"],
                      stdout=io.BufferedWriter(written), stderr=err)  # fmt: skip
    assert status == 130, err.getvalue()
    (line,) = [json.loads(line) for line in seen[0].splitlines()]  # out before the sleep
    assert line["error"] == "mirror.fetch" and line["appended"] == 512, line
    said = err.getvalue().splitlines()
    at = next(i for i, text in enumerate(said) if "the pass stopped after 512" in text)
    assert said[at + 1].startswith("mirror: [mirror.fetch]")
    assert said[at + 1].endswith("trying again in 60 s"), said


def _tampering(url: str, path_part: str, change: Any) -> httpx.Client:
    """A client to the real server whose answers under ``path_part`` are changed."""
    real = httpx.Client()

    def handler(request: httpx.Request) -> httpx.Response:
        answer = real.get(str(request.url))
        body = answer.content
        if path_part in request.url.path:
            body = change(body)
        return httpx.Response(answer.status_code, content=body)

    return httpx.Client(transport=httpx.MockTransport(handler))


@pytest.mark.parametrize(("part", "code"), [
    ("/copies/", "mirror.copy"), ("/tile/entries/", "tile.bundle"), ("/tile/0/", "tile.mismatch"),
])  # fmt: skip
def test_served_bytes_that_were_not_signed_are_never_stored(tmp_path: Path, keys: Keys,
                                                            part: str, code: str) -> None:
    events = _events(5, piths=20)
    origin = _store(tmp_path / "origin", events)
    keyring = load_keyring(keys.keyring.read_bytes())

    def change(body: bytes) -> bytes:
        if part == "/copies/":  # another valid copy in place of the first
            lines = body.split(b"\n")
            lines[0] = g.encoded(g.resigned(json.loads(lines[0]), "registry", b"x"))
            return b"\n".join(lines)
        return body[:40] + bytes([body[40] ^ 1]) + body[41:]

    with serving(origin, keys) as server, Store.open(tmp_path / "mirror") as copy:
        client = mm.Origin(server.url, _tampering(server.url, part, change))
        with pytest.raises(PithlogError) as caught:
            mm.mirror_once(copy, client, keyring, ORIGIN)
        assert caught.value.code == code
        assert copy.tree_size() == 0


def _spaced(body: bytes) -> bytes:  # the first copy written with spaces
    lines = body.split(b"\n")
    lines[0] = json.dumps(json.loads(lines[0]), separators=(", ", ": ")).encode()
    return b"\n".join(lines)


def _short(body: bytes) -> bytes:  # the last copy left out
    return body.rstrip(b"\n").rsplit(b"\n", 1)[0] + b"\n"


@pytest.mark.parametrize(("change", "said"), [
    (_spaced, r"leaf 0: the copy served is not the one"),
    (_short, r"copies 0: \d+ copies for \d+ leaves"),
])  # fmt: skip
def test_copies_not_the_bytes_committed_or_short_of_the_width_are_not_stored(
    tmp_path: Path, keys: Keys, change: Callable[[bytes], bytes], said: str
) -> None:
    """The served bytes of a copy are the ones its leaf commits to (their SHA-256 is the
    leaf's copy hash), not merely bytes the door makes the same JCS of: the same event
    written with spaces is ``mirror.copy``. So are fewer copies served than the bundle has
    leaves, not an index past the end of the answer. Nothing is stored."""
    origin = _store(tmp_path / "origin", _events(5, piths=4))
    keyring = load_keyring(keys.keyring.read_bytes())
    with serving(origin, keys) as server, Store.open(tmp_path / "mirror") as copy:
        client = mm.Origin(server.url, _tampering(server.url, "/copies/", change))
        with pytest.raises(MirrorError, match=said) as caught:
            mm.mirror_once(copy, client, keyring, ORIGIN)
        assert caught.value.code == "mirror.copy"
        assert copy.tree_size() == 0


def test_partial_tiles_bundles_and_copies_a_server_dropped_are_read_from_the_full_ones(
    tmp_path: Path, keys: Keys
) -> None:
    """C2SP tlog-tiles: once a full tile exists its partial ones may be gone (404); the
    mirror of an older checkpoint then reads the full tile, bundle and copies and keeps
    their first ``W`` hashes, entries and lines, and its tree is the checkpoint's."""
    events = _events(5, piths=40)[:300]
    origin = _store(tmp_path / "origin", events[:200])
    with serving(origin, keys) as server:
        older = httpx.get(server.url + "/checkpoint").content
    _store(origin, events[200:])  # tile 0/000 is full now
    real = httpx.Client()

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/checkpoint"):
            return httpx.Response(200, content=older)
        if ".p/" in request.url.path:
            return httpx.Response(404)
        answer = real.get(str(request.url))
        return httpx.Response(answer.status_code, content=answer.content)

    keyring = load_keyring(keys.keyring.read_bytes())
    with serving(origin, keys) as server, Store.open(tmp_path / "mirror") as copy, \
            Store.open(origin, readonly=True) as o:  # fmt: skip
        client = mm.Origin(server.url, httpx.Client(transport=httpx.MockTransport(handler)))
        report = mm.mirror_once(copy, client, keyring, ORIGIN)
        assert report.size == copy.tree_size() == 200 and report.appended == 200
        assert copy.tree_root() == o.tree_root(200)


def test_follow_polls_until_stopped(tmp_path: Path, keys: Keys) -> None:
    events = _events(6, piths=20)
    origin = _store(tmp_path / "origin", events[:60])
    copy = tmp_path / "mirror"
    with serving(origin, keys) as server:
        argv = [sys.executable, "-m", "pithlog", "--store", str(copy), "mirror", server.url,
                "--keyring", str(keys.keyring), "--follow", "1"]  # fmt: skip
        follower = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            def held() -> int:
                try:
                    with Store.open(copy, create=False, readonly=True) as m:
                        return m.tree_size()
                except StoreError as exc:  # not made yet, or made but not yet initialized
                    assert exc.code in ("store.missing", "store.upgrade"), exc
                    return 0

            deadline = time.monotonic() + 60
            while held() < 60 and time.monotonic() < deadline:
                time.sleep(0.2)
            assert held() == 60
            _store(origin, events[60:])  # the origin grows; the next poll brings it
            while held() < len(events) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert held() == len(events)
        finally:
            follower.send_signal(signal.SIGTERM)
            out, err = follower.communicate(timeout=30)
        assert follower.returncode == 143, err
        lines = [json.loads(line) for line in out.splitlines()]
        assert lines[0]["appended"] == 60 and lines[-1]["size"] == len(events)
        assert sum(line["appended"] for line in lines) == len(events)
    _same_log(origin, copy)


def test_each_pass_reports_the_bytes_it_fetched(tmp_path: Path, keys: Keys) -> None:
    """``--follow`` makes its passes with one client: a pass that finds nothing new
    reports the checkpoint's bytes, not the total since the mirror started."""
    origin = _store(tmp_path / "origin", _events(7, piths=10)[:40])
    keyring = load_keyring(keys.keyring.read_bytes())
    with serving(origin, keys) as server, mm.Origin(server.url) as client, \
            Store.open(tmp_path / "mirror") as store:  # fmt: skip
        first = mm.mirror_once(store, client, keyring, evidence_dir=tmp_path)
        second = mm.mirror_once(store, client, keyring, evidence_dir=tmp_path)
        checkpoint = httpx.get(f"{server.url}/checkpoint").content
    assert first.appended == 40 and first.fetched_bytes > 40 * 64
    assert second.appended == 0 and second.fetched_bytes == len(checkpoint)


def test_verified_tiles_are_dropped_as_the_mirror_goes(tmp_path: Path, keys: Keys,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The tiles verified so far are forgotten every FORGET_EVERY bundles (memory stays
    bounded on a long log): the right edge is then read and verified again."""
    origin = _store(tmp_path / "origin", _events(7))
    keyring = load_keyring(keys.keyring.read_bytes())
    monkeypatch.setattr(mm, "FORGET_EVERY", 1)
    with serving(origin, keys) as server, mm.Origin(server.url) as client, \
            Store.open(tmp_path / "mirror") as copy:  # fmt: skip
        reads: list[str] = []
        real = client.tile

        def counted(tile: Any) -> bytes:
            reads.append(tile.path())
            return real(tile)

        monkeypatch.setattr(client, "tile", counted)
        report = mm.mirror_once(copy, client, keyring, ORIGIN, batch_bundles=1)
        bundles = -(-report.size // 256)
        assert bundles >= 2
        # the right edge's level-1 tile (level-0 tiles are also fetched ahead of their
        # bundles, by other threads)
        (edge,) = (e.path() for e in right_edge(report.size) if e.level == 1)
        assert reads.count(edge) == bundles  # read again after each forgetting
        assert copy.tree_root() == (report.size, report.root)


def test_level0_tiles_are_fetched_ahead_with_their_bundles(tmp_path: Path, keys: Keys,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:  # fmt: skip
    """The level-0 tile a bundle is verified against is fetched by the threads that fetch
    the bundles ahead, not when its turn comes: the append never waits for a round trip.
    Each is read once, and verified as any other (the mirror's root is the origin's)."""
    origin = _store(tmp_path / "origin", _events(7, piths=80))
    keyring = load_keyring(keys.keyring.read_bytes())
    with serving(origin, keys) as server, mm.Origin(server.url) as client, \
            Store.open(tmp_path / "mirror") as copy:  # fmt: skip
        reads: list[tuple[str, str]] = []
        real = client.tile

        def counted(tile: Any) -> bytes:
            reads.append((tile.path(), threading.current_thread().name))
            return real(tile)

        monkeypatch.setattr(client, "tile", counted)
        report = mm.mirror_once(copy, client, keyring, ORIGIN, batch_bundles=1)
        assert copy.tree_root() == (report.size, report.root)
    full = [(path, thread) for path, thread in reads if path.startswith("tile/0/")
            and ".p/" not in path]  # fmt: skip
    assert len(full) == report.size // 256 >= 2
    assert len({path for path, _ in full}) == len(full)
    assert all(thread.startswith("pithlog-mirror") for _, thread in full)


def test_an_origin_without_proofs_is_not_followed(tmp_path: Path, keys: Keys) -> None:
    """A grown checkpoint whose consistency proof the origin does not give is refused (exit
    1, nothing accepted or stored)."""
    events = _events(8, piths=20)
    origin = _store(tmp_path / "origin", events[:50])
    copy = tmp_path / "mirror"
    with serving(origin, keys) as server:
        assert mirror(copy, server.url, keys)[0] == 0
        _store(origin, events[50:])

        def no_proofs(request: httpx.Request) -> httpx.Response:
            if "/proof/" in request.url.path:
                return httpx.Response(404, json={"error": "serve.not_found", "message": "-"})
            answer = httpx.get(str(request.url))
            return httpx.Response(answer.status_code, content=answer.content)

        client = mm.Origin(server.url, httpx.Client(transport=httpx.MockTransport(no_proofs)))
        keyring = load_keyring(keys.keyring.read_bytes())
        with Store.open(copy) as m:
            before = (m.tree_size(), m.accepted_checkpoint(ORIGIN))
            with pytest.raises(MirrorError) as caught:
                mm.mirror_once(m, client, keyring, ORIGIN)
            assert caught.value.code == "mirror.unproven" and caught.value.exit_status == 1
            assert (m.tree_size(), m.accepted_checkpoint(ORIGIN)) == before == (50, before[1])


def test_from_the_accepted_empty_tree_no_proof_is_asked(tmp_path: Path, keys: Keys) -> None:
    """A mirror that accepted the log's empty tree needs no consistency proof for a larger
    one: every tree extends the empty one. Asked, a junk proof from size 0 (one hash where
    none belongs) stopped the mirror, first with a ValueError traceback (0 taken for a
    power of two), then as a split view whose evidence proved nothing (verify-proof: not
    proven). The proof is no longer asked for, and the mirror brings the new leaves."""
    events = _events(10, piths=20)
    origin = _store(tmp_path / "origin", [])
    copy = tmp_path / "mirror"
    asked: list[str] = []
    with serving(origin, keys) as server:
        assert mirror(copy, server.url, keys)[0] == 0
        _store(origin, events[:5])

        def change(body: bytes) -> bytes:  # one hash more than the empty path
            asked.append("proof")
            return body + b"A" * 43 + b"=\n"

        client = mm.Origin(server.url, _tampering(server.url, "/proof/consistency/0/", change))
        keyring = load_keyring(keys.keyring.read_bytes())
        with Store.open(copy) as m:
            report = mm.mirror_once(m, client, keyring, ORIGIN, evidence_dir=tmp_path / "ev")
            assert report.size == m.tree_size() == 5
        assert asked == [] and not (tmp_path / "ev").exists()
    _same_log(origin, copy)


def test_a_leaf_whose_committed_copy_fails_the_door_or_names_another_event_stops_the_batch(
    tmp_path: Path,
) -> None:
    # What a hostile origin can commit to itself: bytes that hash to the leaf but fail the
    # door, or a copy of another event_id than the leaf's. The mirror's vet sees the batch
    # after the door and before its write transaction.
    from collections import deque

    from pithlog.errors import DoorError
    from pithlog.protocol.events import parse_envelope
    from pithlog.store.layout import copy_hash, eid_bytes

    envs = [parse_envelope(g.encoded(e)) for e in _events(7, piths=3)[:3]]
    hashes: list[bytes | None] = [copy_hash(e.encoded) for e in envs]
    good = [eid_bytes(e.event_id) + copy_hash(e.encoded) for e in envs]
    mm._committed_copies(deque([(10, good)]), list(envs), hashes)  # passes
    refused = DoorError("not_object", "an event must be a JSON object")
    cases = [
        ([envs[0], refused, envs[2]], [hashes[0], None, hashes[2]], "leaf 11: the copy fails"),
        ([envs[0], envs[2], envs[1]], [hashes[0], hashes[2], hashes[1]], "leaf 11: the copy"),
    ]
    for items, its_hashes, said in cases:
        with pytest.raises(MirrorError) as caught:
            mm._committed_copies(deque([(10, good)]), items, its_hashes)
        assert caught.value.code == "mirror.copy" and said in caught.value.message
    # a leaf committed to one event's id and another event's copy: the copy's hash is the
    # leaf's, its event_id is not
    named = [good[0], eid_bytes(envs[0].event_id) + copy_hash(envs[1].encoded), good[2]]
    with pytest.raises(MirrorError, match="leaf 11: the copy served is not the one"):
        mm._committed_copies(deque([(10, named)]), list(envs), hashes)


def test_a_bundle_of_copies_is_read_line_by_line_up_to_its_width() -> None:
    """An answer of copies is cut into at most ``width`` lines: 8 KB of zstd hold 255 MiB
    of newlines, which a split into every line made a list of 2.4 GB. A partial bundle is
    capped by its width, and so is the full one served in its place (``.p/5`` dropped):
    its first 5 MiB + 5 bytes are read, no more."""
    import tracemalloc

    junk = b"\n" * (16 << 20)
    answers = {"/copies/000.p/3": b'{"a":1}\n{"b":2}\n{"c":3}\n', "/copies/001": junk}
    client = httpx.Client(transport=httpx.MockTransport(lambda request: httpx.Response(
        200, content=answers[request.url.path]) if request.url.path in answers
        else httpx.Response(404)))  # fmt: skip
    with mm.Origin("http://origin", client=client) as origin:
        assert origin.copies(0, 3) == [b'{"a":1}', b'{"b":2}', b'{"c":3}']
        tracemalloc.start()
        try:
            assert origin.copies(1, 5) == [b""] * 5
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak < 4 * len(junk)  # the answer and its copies; a split was 8 bytes a newline


@contextlib.contextmanager
def _dripping(upstream: str) -> Iterator[tuple[str, threading.Event]]:
    """A proxy in front of ``upstream`` whose bundles of copies come a byte every 0.2 s
    (at most 300 bytes: it stops by itself), and an event set once one is being sent."""
    from served import in_thread
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response, StreamingResponse
    from starlette.routing import Route

    dripping = threading.Event()

    async def drip() -> AsyncIterator[bytes]:
        dripping.set()
        for _ in range(300):
            yield b"{"
            await asyncio.sleep(0.2)

    async def forward(request: Request) -> Response:
        if request.url.path.startswith("/copies/"):
            return StreamingResponse(drip())
        async with httpx.AsyncClient() as client:
            answer = await client.get(upstream + request.url.path,
                                      headers={"accept-encoding": "identity"})  # fmt: skip
        return Response(answer.content, answer.status_code)

    with in_thread(Starlette(routes=[Route("/{rest:path}", forward)])) as url:
        yield url, dripping


def test_an_origin_that_drips_is_cut_off_and_one_sigterm_stops_the_mirror(
    tmp_path: Path, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each read waits 60 s at most, and a whole answer :func:`answer_seconds` of its cap:
    a byte every 0.2 s is cut off there (here made 1 s). And the fetches ahead are not
    waited for when the mirror stops: one SIGTERM ends it at once, status 143."""
    from pithlog.net import encoding

    origin = _store(tmp_path / "origin", _events(6, piths=10))
    keyring = load_keyring(keys.keyring.read_bytes())
    with serving(origin, keys) as server, _dripping(server.url) as (url, dripping):
        monkeypatch.setattr(encoding, "ANSWER_GRACE", 1.0)
        monkeypatch.setattr(encoding, "SLOWEST_RATE", 1 << 40)  # the cap adds no time
        started = time.monotonic()
        with (Store.open(tmp_path / "cut") as store, mm.Origin(url) as slow,
              pytest.raises(MirrorError) as caught):  # fmt: skip
            mm.mirror_once(store, slow, keyring, ORIGIN)
        assert caught.value.code == "mirror.fetch" and "an answer that took over" in str(
            caught.value) and time.monotonic() - started < 30  # fmt: skip
        monkeypatch.undo()
        dripping.clear()
        argv = [sys.executable, "-m", "pithlog", "--store", str(tmp_path / "stopped"),
                "mirror", url, "--keyring", str(keys.keyring), "--origin", ORIGIN]  # fmt: skip
        with subprocess.Popen(argv, stderr=subprocess.PIPE, text=True) as process:
            assert dripping.wait(60)
            time.sleep(0.5)
            process.send_signal(signal.SIGTERM)
            status = process.wait(timeout=15)
            assert status == 143 and process.stderr is not None
            assert process.stderr.read().strip().endswith("pithlog: terminated")


def test_the_fetches_a_stopped_pass_left_in_flight_hold_the_next_pass_s_places(
    tmp_path: Path,
) -> None:
    """A pass that stops leaves its fetches in flight to end by themselves; the next pass
    of the same origin (``--follow``, an audit's catch-up) waits for their places before it
    starts more. An origin that failed the first bundle at once and held the four fetched
    ahead left four more threads (and connections, and what they had read) at each pass:
    8 after the second."""
    from pithlog.testing import test_key, test_keyring
    from pithlog.transparency.checkpoint import Checkpoint, sign_checkpoint

    key = test_key("registry")
    note = sign_checkpoint(Checkpoint(key.signer_id, 5 * 256, bytes(32)), key)
    held = threading.Event()

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/checkpoint":
            return httpx.Response(200, content=note)
        if request.url.path != "/tile/0/000":
            held.wait(20)  # the fetches ahead, held
        return httpx.Response(500)

    def in_flight() -> int:
        return sum(t.name == "pithlog-mirror" for t in threading.enumerate())

    origin = mm.Origin("http://origin.invalid", httpx.Client(
        transport=httpx.MockTransport(answer)))  # fmt: skip
    threading.Timer(1.0, held.set).start()
    try:
        with Store.open(tmp_path / "mirror") as store:
            for _ in range(2):
                with pytest.raises(MirrorError) as caught:
                    mm.mirror_once(store, origin, test_keyring(), key.signer_id)
                assert caught.value.code == "mirror.fetch"
                assert in_flight() <= mm.LOOKAHEAD + 1
                assert store.tree_size() == 0
    finally:
        held.set()


def test_a_copy_stored_during_the_pass_is_another_mirrors_not_the_origins_fault(
    tmp_path: Path,
) -> None:
    """Two mirrors into one store: the one that finds the other's copies stored since its
    pass began says so (``mirror.concurrent``: run again), where it accused the origin of
    serving a copy twice (``mirror.duplicate``, a failed verification). A copy stored
    before the pass began is still the origin's doing, and so is one of this pass's own
    leaves served again: in a batch not committed yet, or stored at the place the served
    tree gave it."""
    events = _events(7, piths=10)
    store_path = _store(tmp_path / "store", events)
    with Store.open(store_path) as store:
        size = store.tree_size()
        held = size - 4  # the pass began at this size; the last 4 leaves came after
        since = store.leaf_data(held, 4)
        before = store.leaf_data(0, 4)
        everything = store.leaf_data(0, size)
        assert since is not None and before is not None and everything is not None

        def served(leaf: int) -> bytes:  # the served tree is the store's
            return merkle.leaf_hash(everything[leaf])

        def elsewhere(leaf: int) -> bytes:  # the served tree holds other leaves there
            return merkle.leaf_hash(b"another leaf")

        def new_to(items: list[bytes], recent: list[set[bytes]], first: int = held,
                   served_leaf: Callable[[int], bytes] = served) -> None:  # fmt: skip
            mm._new_to(store, items, deque(recent), held, first, served_leaf)

        with pytest.raises(MirrorError) as caught:
            new_to(since, [])
        assert caught.value.code == "mirror.concurrent" and "run the mirror again" in str(
            caught.value)  # fmt: skip
        # past leaves of this pass that the served tree holds elsewhere: another writer's
        with pytest.raises(MirrorError) as caught:
            new_to(since, [], first=size, served_leaf=elsewhere)
        assert caught.value.code == "mirror.concurrent"
        # a copy stored before the pass began is the origin's duplicate, however much the
        # store grew since (this pass's own batches grow it too); so is a copy given twice
        for given in (before, since[:1] + before[:1], [since[0], since[0]]):
            with pytest.raises(MirrorError) as caught:
                new_to(given, [])
            assert caught.value.code == "mirror.duplicate"
        # this pass's own earlier copy, again: in a batch not yet committed, or committed
        for recent, first in (([set(since[:1])], held), ([], size)):
            with pytest.raises(MirrorError) as caught:
                new_to(since[:1], recent, first=first)
            assert caught.value.code == "mirror.duplicate"


def test_a_pass_keeps_the_leaves_of_its_last_batches_only(
    tmp_path: Path, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check that each batch is new to the store keeps the leaf data of the batches
    the append may not have committed yet, not of the whole pass: it kept every leaf
    mirrored (about 150 bytes each, 1.5 GB over ten million leaves)."""
    origin = _store(tmp_path / "origin", _events(17, piths=320))
    keyring = load_keyring(keys.keyring.read_bytes())
    kept: list[int] = []
    checked = mm._new_to

    def counted(store: Store, items: list[bytes], recent: Any, *args: Any) -> None:
        checked(store, items, recent, *args)
        kept.append(len(recent) if isinstance(recent, set) else sum(map(len, recent)))

    monkeypatch.setattr(mm, "_new_to", counted)
    with serving(origin, keys) as server, Store.open(tmp_path / "mirror") as store, \
            mm.Origin(server.url) as client:  # fmt: skip
        report = mm.mirror_once(store, client, keyring, ORIGIN, batch_bundles=1)
    assert report.size > 2 * mm.RECENT_BATCHES * 256 and len(kept) == -(-report.size // 256)
    assert max(kept) == mm.RECENT_BATCHES * 256
    _same_log(origin, tmp_path / "mirror")


def test_an_error_answer_says_what_the_origin_said_on_one_line() -> None:
    """A log whose witnesses have not cosigned yet answers /checkpoint with 503
    witness.quorum: the mirror's error carries that code and message (not only the
    status), flattened to one line, and an answer that is not pithlog's JSON error adds
    nothing."""
    answers = {
        "/a/checkpoint": httpx.Response(503, json={
            "error": "witness.quorum", "message": "0 witness(es) cosigned,\n1 required"}),
        "/b/checkpoint": httpx.Response(500, content=b"<html>oops</html>"),
    }  # fmt: skip
    client = httpx.Client(transport=httpx.MockTransport(lambda r: answers[r.url.path]))
    with pytest.raises(MirrorError) as caught:
        mm.Origin("http://origin.invalid/a", client).checkpoint()
    message = caught.value.describe()
    assert caught.value.code == "mirror.fetch" and "answered 503: [witness.quorum]" in message
    assert "0 witness(es) cosigned, 1 required" in message and "\n" not in message
    with pytest.raises(MirrorError) as caught:
        mm.Origin("http://origin.invalid/b", client).checkpoint()
    assert caught.value.message.endswith("/b/checkpoint answered 500")


def test_leaves_another_mirror_stored_meanwhile_are_not_counted_as_appended(
    tmp_path: Path, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two mirrors of one store at once: a batch that the other mirror (a real process
    here) committed after this pass checked it is a duplicate of this pass's append,
    already in its place. The pass ends with the origin's root, and its report says it
    appended none of those leaves (it said it appended them all)."""
    origin = _store(tmp_path / "origin", _events(13, piths=10))
    mirror = tmp_path / "mirror"
    keyring = load_keyring(keys.keyring.read_bytes())
    with serving(origin, keys) as server:
        checked = mm._new_to

        def other_mirror_commits_after_the_check(*args: Any, **kwargs: Any) -> None:
            checked(*args, **kwargs)
            subprocess.run([sys.executable, "-m", "pithlog", "--store", str(mirror), "mirror",
                            server.url, "--keyring", str(keys.keyring), "--evidence-dir",
                            str(tmp_path)], check=True, capture_output=True, timeout=60)

        monkeypatch.setattr(mm, "_new_to", other_mirror_commits_after_the_check)
        with Store.open(mirror) as store, mm.Origin(server.url) as client:
            report = mm.mirror_once(store, client, keyring, ORIGIN)
            size = store.tree_size()
    assert report.held_before == 0 and report.size == size
    assert dict(report.statuses) == {"duplicate": size}
    assert report.appended == 0
    _same_log(origin, mirror)


def test_an_answer_whose_head_drips_is_cut_off_at_its_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The deadline of an answer holds from the request on, not from its body: a head that
    comes a line at a time (h11 waits for 100 KiB of it, httpx 60 s for each read) is cut
    off there (here 1 s) as a body that drips is, with mirror.fetch."""
    from pithlog.net import encoding

    monkeypatch.setattr(encoding, "ANSWER_GRACE", 1.0)
    monkeypatch.setattr(encoding, "SLOWEST_RATE", 1 << 40)  # the cap adds no time
    with slow_head() as url, mm.Origin(url) as slow:
        started = time.monotonic()
        with pytest.raises(MirrorError) as caught:
            slow.checkpoint()
        took = time.monotonic() - started
    assert caught.value.code == "mirror.fetch" and "an answer that took over 1 s" in str(
        caught.value) and took < 10  # fmt: skip


def test_a_proxy_from_the_environment_is_used_and_held_to_the_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """HTTP_PROXY is honoured, as httpx honours it: the request for a host that does not
    resolve goes to the proxy (here a server whose heads come a line at a time), and the
    answer's deadline holds through it. Without the proxy the host would not resolve."""
    from pithlog.net import encoding

    monkeypatch.setattr(encoding, "ANSWER_GRACE", 1.0)
    monkeypatch.setattr(encoding, "SLOWEST_RATE", 1 << 40)
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "HTTPS_PROXY",
                 "https_proxy", "http_proxy"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    with slow_head() as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy)
        with mm.Origin("http://origin.invalid") as origin:
            started = time.monotonic()
            with pytest.raises(MirrorError) as caught:
                origin.checkpoint()
            took = time.monotonic() - started
    assert "an answer that took over 1 s" in caught.value.message and took < 10, caught.value


def test_a_batch_ends_once_its_copies_reach_batch_bytes(
    tmp_path: Path, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch is cut after the bundle that brings its copies to BATCH_BYTES, whatever
    --batch-bundles says: the pipeline holds three batches, and four bundles of the
    largest copies would be 1 GiB each. Here every bundle reaches it: one batch each."""
    monkeypatch.setattr(mm, "BATCH_BYTES", 1)
    events = _events(14, piths=100)
    origin = _store(tmp_path / "origin", events)
    keyring = load_keyring(keys.keyring.read_bytes())
    committed: list[int] = []
    with serving(origin, keys) as server, Store.open(tmp_path / "mirror") as store, \
            mm.Origin(server.url) as client:  # fmt: skip
        mm.mirror_once(store, client, keyring, ORIGIN, batch_bundles=4,
                       progress=lambda held, _: committed.append(held))  # fmt: skip
    bundles = (len(events) + 255) // 256
    assert bundles >= 3 and committed == [min(256 * n, len(events)) for n in
                                          range(1, bundles + 1)]  # fmt: skip
    _same_log(origin, tmp_path / "mirror")


@pytest.mark.parametrize("command", ["mirror", "audit"])
@pytest.mark.parametrize("url", ["http://a:b:c", "http://[::1", "http://a..b"])
def test_a_url_that_cannot_be_used_is_a_one_line_error(tmp_path: Path, command: str,
                                                         url: str) -> None:  # fmt: skip
    """httpx refuses such a URL with InvalidURL and the resolver with UnicodeError (IDNA),
    neither an httpx.HTTPError: mirror and audit ended in a traceback."""
    keys = make_keys(tmp_path)
    status, _, err = run(["--store", str(tmp_path / "m"), command, url, "--keyring",
                          str(keys.keyring)])  # fmt: skip
    assert status == 2 and "[mirror.fetch]" in err and "Traceback" not in err, err
    assert not (tmp_path / "m").exists()


def _junk_first_hash(body: bytes) -> bytes:
    lines = body.split(b"\n")
    lines[3] = b"A" * 43 + b"="  # the first hash of the path: a proof that holds for nothing
    return b"\n".join(lines)


@pytest.mark.parametrize(("accepted", "served"), [(5, 9), (4, 9), (200, 300), (256, 300)])
def test_a_spoiled_consistency_proof_is_told_from_a_split_view_by_the_tiles(
    tmp_path: Path, keys: Keys, accepted: int, served: int
) -> None:
    """A consistency proof is not signed: spoiled on its way from an honest log, it made
    the mirror stop with mirror.split_view and evidence that verify-proof called not
    proven; sent as junk by a log that rewrote its history, it left evidence that proved
    nothing. The served tiles, verified against the larger signed root, now tell the two
    apart: the honest log's tree is mirrored, the other history is proven a split view by
    the proof they give, and tiles that cannot be read leave it mirror.unproven."""
    events = _events(10, piths=60)
    origin = _store(tmp_path / "origin", events[:accepted])
    keyring = load_keyring(keys.keyring.read_bytes())
    honest, forked = tmp_path / "honest", tmp_path / "forked"
    with serving(origin, keys) as server:
        assert mirror(honest, server.url, keys)[0] == 0
        assert mirror(forked, server.url, keys)[0] == 0
        _store(origin, events[accepted:served])
        client = mm.Origin(server.url, _tampering(server.url, "/proof/consistency/",
                                                  _junk_first_hash))  # fmt: skip
        with Store.open(honest) as m:
            report = mm.mirror_once(m, client, keyring, ORIGIN, evidence_dir=tmp_path / "ev1")
            assert report.size == m.tree_size() == served
    assert not (tmp_path / "ev1").exists()
    _same_log(origin, honest)
    rewritten = _store(tmp_path / "rewritten", [events[1], events[0], *events[2:served]])
    with serving(rewritten, keys) as server:
        client = mm.Origin(server.url, _tampering(server.url, "/proof/consistency/",
                                                  _junk_first_hash))  # fmt: skip
        with Store.open(forked) as m, pytest.raises(MirrorError) as caught:
            mm.mirror_once(m, client, keyring, ORIGIN, evidence_dir=tmp_path / "ev2")
        assert caught.value.code == "mirror.split_view" and "served tiles" in caught.value.message
        (path,) = (tmp_path / "ev2").iterdir()
        status, out, err = run(["verify-proof", "--keyring", str(keys.keyring), str(path)])
        assert status == 0 and "split view proven" in err, err
        assert json.loads(out)["sizes"] == [accepted, served]
        client = mm.Origin(server.url, _tampering(server.url, "/proof/consistency/",
                                                  _junk_first_hash))  # fmt: skip
        client.tile = lambda tile: b"\0" * 32  # type: ignore[method-assign]
        with Store.open(forked) as m, pytest.raises(MirrorError) as caught:
            mm.mirror_once(m, client, keyring, ORIGIN, evidence_dir=tmp_path / "ev3")
        assert caught.value.code == "mirror.unproven"
    assert not (tmp_path / "ev3").exists()


def test_a_spoiled_proof_does_not_make_a_true_prefix_another_log(
    tmp_path: Path, keys: Keys
) -> None:
    """A store with leaves and no accepted checkpoint (import, append, sync) is checked to
    hold the log's first leaves by a consistency proof, which is not signed: one spoiled
    on its way from an honest log made a true prefix ``mirror.diverged`` ("mirror into a
    fresh store"). The served tiles, verified against the signed root, now decide: a true
    prefix is continued, another log is still refused, and tiles that cannot be read leave
    it ``mirror.unproven``."""
    events = _events(10, piths=10)
    origin = _store(tmp_path / "origin", events[:60])
    keyring = load_keyring(keys.keyring.read_bytes())
    prefix = _store(tmp_path / "prefix", events[:20])
    other = _store(tmp_path / "other", list(reversed(events[:60]))[:20])
    with serving(origin, keys) as server:
        def spoiled() -> mm.Origin:
            return mm.Origin(server.url, _tampering(server.url, "/proof/consistency/",
                                                    _junk_first_hash))  # fmt: skip

        with Store.open(other) as m, pytest.raises(MirrorError) as caught:
            mm.mirror_once(m, spoiled(), keyring, ORIGIN, evidence_dir=tmp_path / "ev")
        assert caught.value.code == "mirror.diverged"
        client = spoiled()
        client.tile = lambda tile: b"\0" * 32  # type: ignore[method-assign]
        with Store.open(prefix) as m, pytest.raises(MirrorError) as caught:
            mm.mirror_once(m, client, keyring, ORIGIN, evidence_dir=tmp_path / "ev")
        assert caught.value.code == "mirror.unproven"
        with Store.open(prefix) as m:
            assert m.tree_size() == 20 and m.accepted_checkpoint(ORIGIN) is None
            report = mm.mirror_once(m, spoiled(), keyring, ORIGIN,
                                    evidence_dir=tmp_path / "ev")  # fmt: skip
            assert report.size == m.tree_size() == 60
    assert not (tmp_path / "ev").exists()
    _same_log(origin, prefix)


def test_another_writer_appending_during_the_pass_is_not_the_origins_divergence(
    tmp_path: Path, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer other than a mirror of the origin (``pithlog append`` into the mirror's
    store) that commits between two of the pass's batches puts its leaf where the origin's
    belongs, and the pass's root is not the checkpoint's. Every leaf the pass appended was
    verified against that checkpoint, so this is no divergence of the origin: it is
    ``mirror.concurrent`` naming the first leaf that is not the origin's (exit 2), where it
    was ``mirror.diverged`` (exit 1, a failed verification)."""
    origin = _store(tmp_path / "origin", _events(19, piths=70))
    mirror_path = tmp_path / "mirror"
    keyring = load_keyring(keys.keyring.read_bytes())
    checked = mm._new_to
    batches = []
    local = g.record("2599.00777")

    def a_local_append_between_batches(store: Store, *args: Any) -> None:
        checked(store, *args)
        batches.append(1)
        if len(batches) == 3:  # as the pass checks its third batch
            store.append([g.encoded(local)], keyring)

    monkeypatch.setattr(mm, "_new_to", a_local_append_between_batches)
    with serving(origin, keys) as server, Store.open(mirror_path) as store, \
            mm.Origin(server.url) as client:  # fmt: skip
        with pytest.raises(MirrorError) as caught:
            mm.mirror_once(store, client, keyring, ORIGIN, batch_bundles=1)
        held = store.tree_size()
        [(leaf, _)] = store.leaves_of(local["event_id"])
    # the pass committed a batch before the local leaf: the first leaf that is not the
    # origin's is found among those stored, not taken to be the first of the pass
    assert len(batches) >= 3 and held > 2 * 256 and leaf > 0
    assert caught.value.code == "mirror.concurrent", caught.value.describe()
    assert f"another writer appended to this store during this run: its leaf {leaf} " \
        in caught.value.message  # fmt: skip


def test_follow_frees_what_each_poll_leaves_behind(
    tmp_path: Path, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every command runs with the cyclic collector paused, and the HTTP client leaves
    reference cycles on every request: a mirror that polled for days grew without end
    (about 7 KB a poll). ``--follow`` collects them between its passes."""
    import gc

    from pithlog.cli import mirror_commands

    origin = _store(tmp_path / "origin", _events(9, piths=5)[:20])
    counts: list[int] = []

    def poll_again(seconds: float) -> None:
        counts.append(len(gc.get_objects()))
        if len(counts) == 40:
            raise KeyboardInterrupt

    monkeypatch.setattr(mirror_commands, "time", SimpleNamespace(sleep=poll_again))
    with serving(origin, keys) as server:
        status, _, err = mirror(tmp_path / "mirror", server.url, keys, "--follow", "1")
    assert status == 130, err
    # after a few passes to warm up, as many objects are alive between passes: 40 a poll
    # were left before
    assert len(counts) == 40 and counts[-1] - counts[9] < 200, counts


def test_follow_waits_for_an_origin_not_up_yet_before_making_the_store(
    tmp_path: Path, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--follow`` tries an unreachable origin again at the next poll, the first poll
    of a store not made yet included: that one stopped the mirror at once (exit 2), so a
    mirror started before its origin died where one with a store waited."""
    from pithlog.cli import mirror_commands

    polls: list[float] = []

    def poll_again(seconds: float) -> None:
        polls.append(seconds)
        if len(polls) == 3:
            raise KeyboardInterrupt

    monkeypatch.setattr(mirror_commands, "time", SimpleNamespace(sleep=poll_again))
    store = tmp_path / "mirror"
    with contextlib.closing(socket.socket()) as probe:
        probe.bind(("127.0.0.1", 0))  # a port nothing listens on (bound, not listening)
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"
        status, out, err = mirror(store, url, keys, "--follow", "5")
    assert status == 130 and out == b"" and polls == [5.0, 5.0, 5.0], err
    assert err.count("[mirror.fetch]") == 3 and err.count("trying again in 5 s") == 3, err
    assert err.endswith("pithlog: interrupted\n") and not store.exists()


def test_an_older_checkpoint_of_the_same_log_is_said_to_be_older(
    tmp_path: Path, keys: Keys
) -> None:
    """A served checkpoint smaller than the accepted one, of a prefix of its tree, brings
    nothing and leaves the store as it was; its line said "at size 100: 0 leaves appended,
    root verified", as if the mirror had gone back to 100 leaves."""
    events = _events(11, piths=10)
    origin = _store(tmp_path / "origin", events[:30])
    old = tmp_path / "old"
    shutil.copytree(origin, old)
    _store(origin, events[30:])
    copy = tmp_path / "mirror"
    with serving(origin, keys) as server:
        assert mirror(copy, server.url, keys)[0] == 0
    with Store.open(copy, readonly=True) as m:
        before = (m.tree_root(), m.accepted_checkpoint(ORIGIN))
    with serving(old, keys) as server:
        status, out, err = mirror(copy, server.url, keys)
    assert status == 0 and json.loads(out)["size"] == 30, err
    assert err == (f"mirror: {ORIGIN} served size 30, older than the {len(events)} accepted "
                   "(a stale cache, or a log rolled back): a prefix of the accepted tree, "
                   "nothing to bring\n")  # fmt: skip
    with Store.open(copy, readonly=True) as m:
        assert (m.tree_root(), m.accepted_checkpoint(ORIGIN)) == before


def test_follow_puts_out_the_line_of_each_pass_before_it_sleeps(
    tmp_path: Path, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Standard output to a file or a pipe is buffered: a following mirror's lines of 200
    bytes sat in its buffer for some forty passes (forty minutes at --follow 60) before a
    log saw one, and a mirror killed meanwhile lost them. Each pass's line is put out
    before the mirror sleeps."""
    from pithlog.cli import mirror_commands

    origin = _store(tmp_path / "origin", _events(12, piths=5)[:20])
    written = io.BytesIO()
    seen: list[bytes] = []

    def poll_again(seconds: float) -> None:
        seen.append(written.getvalue())
        if len(seen) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(mirror_commands, "time", SimpleNamespace(sleep=poll_again))
    with serving(origin, keys) as server:
        status = main(["--store", str(tmp_path / "mirror"), "mirror", server.url,
                       "--keyring", str(keys.keyring), "--follow", "60"],
                      stdout=io.BufferedWriter(written), stderr=io.StringIO())  # fmt: skip
    assert status == 130
    assert [len(lines.splitlines()) for lines in seen] == [1, 2]
    assert json.loads(seen[0])["appended"] == 20



@contextlib.contextmanager
def _padding(upstream: str, part: str, pad: int, dropped: bool = False,
             coding: str = "identity", noise: bool = False) -> Iterator[str]:  # fmt: skip
    """A proxy in front of ``upstream`` whose partial answers under ``part`` are the real
    ones followed by ``pad`` bytes of no newline (in chunks of 64 KiB at most). ``dropped``:
    those partial answers are 404 (dropped, as C2SP tlog-tiles allows once the full one
    exists) and the full one, which the origin has not yet, is its partial of width 1 so
    padded, in ``coding`` (``identity`` or ``zstd``), the padding random bytes with
    ``noise`` (which do not compress)."""
    import zstandard
    from served import in_thread
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response, StreamingResponse
    from starlette.routing import Route

    async def forward(request: Request) -> Response:
        path = request.url.path
        partial = path.startswith(part) and ".p/" in path
        async with httpx.AsyncClient() as client:
            answer = await client.get(upstream + path, headers={"accept-encoding": "identity"})
            if dropped and partial:
                return Response(b"", 404)
            if dropped and path.startswith(part) and answer.status_code == 404:
                answer = await client.get(upstream + path + ".p/1",
                                          headers={"accept-encoding": "identity"})  # fmt: skip
            elif not partial or dropped:
                return Response(answer.content, answer.status_code)
        junk = random.Random(pad)
        pack = zstandard.ZstdCompressor(level=1).compressobj() if coding == "zstd" else None

        async def padded() -> AsyncIterator[bytes]:
            yield pack.compress(answer.content) if pack else answer.content
            for at in range(0, pad, 64 << 10):
                n = min(64 << 10, pad - at)
                chunk = junk.randbytes(n).replace(b"\n", b"x") if noise else b"x" * n
                yield pack.compress(chunk) if pack else chunk
            if pack:
                yield pack.flush()

        headers = {"content-encoding": coding} if pack else None
        return StreamingResponse(padded(), headers=headers)

    with in_thread(Starlette(routes=[Route("/{rest:path}", forward)])) as url:
        yield url


class _Counted(httpx.HTTPTransport):
    """A transport that counts the body bytes read of each answer, by path."""

    def __init__(self) -> None:
        super().__init__()
        self.read: dict[str, int] = {}

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        stream, path, read = response.stream, request.url.path, self.read
        assert isinstance(stream, httpx.SyncByteStream)

        class Counting(httpx.SyncByteStream):
            def __iter__(self) -> Iterator[bytes]:
                for chunk in stream:
                    read[path] = read.get(path, 0) + len(chunk)
                    yield chunk

            def close(self) -> None:
                stream.close()

        response.stream = Counting()
        return response


@pytest.mark.parametrize(("part", "entry", "pad"), [
    ("/copies/", MAX_ENVELOPE_BYTES + 1, 64 << 20), ("/tile/entries/", 66, 8 << 10),
    ("/tile/0/", 32, 4 << 10),
])  # fmt: skip
def test_a_partial_answer_is_capped_by_its_width(tmp_path: Path, keys: Keys, part: str,
                                                 entry: int, pad: int) -> None:  # fmt: skip
    """A partial tile, bundle or bundle of copies of width ``W`` holds ``W`` hashes,
    entries or copies: it is read to ``W`` times the most one takes, not to the cap of a
    full one (a partial bundle of copies of width 1 was read to 256 MiB). The last bundle
    of 257 leaves (width 1), served with more after it, is refused once past its cap (one
    copy: 1 MiB + 1), not read to its end, and nothing of it is stored."""
    origin = _store(tmp_path / "origin", _events(5, piths=40)[:257])
    keyring = load_keyring(keys.keyring.read_bytes())
    counted = _Counted()
    with serving(origin, keys) as server, _padding(server.url, part, pad) as url, \
            Store.open(tmp_path / "mirror") as copy, \
            mm.Origin(url, httpx.Client(transport=counted)) as client:  # fmt: skip
        with pytest.raises(MirrorError, match=rf"\.p/1: an answer of over {entry} bytes$"
                           ) as caught:  # fmt: skip
            mm.mirror_once(copy, client, keyring, ORIGIN)
        assert caught.value.code == "mirror.fetch" and copy.tree_size() == 0
    read = [n for path, n in counted.read.items() if path.startswith(part) and ".p/" in path]
    assert read and all(entry < n <= entry + (64 << 10) for n in read)  # a chunk past it


@pytest.mark.parametrize(("coding", "noise"), [("identity", False), ("zstd", True),
                                               ("zstd", False)])  # fmt: skip
def test_the_full_answer_in_place_of_a_partial_one_is_read_to_the_partial_cap(
        tmp_path: Path, keys: Keys, coding: str, noise: bool) -> None:  # fmt: skip
    """An origin may drop a partial bundle of copies once the full one exists (C2SP
    tlog-tiles), and the mirror then reads the full one: only its first ``W`` copies are
    kept, so it is read to the cap of ``W`` (one copy: 1 MiB + 1), not to a full bundle's
    256 MiB. The full bundle served in place of the last partial one (width 1) of 257
    leaves, the right copy followed by 64 MiB more, plain or in zstd (random bytes, or a
    bomb of one byte), is read to its first copy's cap and no further, and the mirror
    stores the log as the origin's."""
    origin = _store(tmp_path / "origin", _events(5, piths=40)[:257])
    keyring = load_keyring(keys.keyring.read_bytes())
    counted = _Counted()
    cap = MAX_ENVELOPE_BYTES + 1
    with serving(origin, keys) as server, \
            _padding(server.url, "/copies/", 64 << 20, True, coding, noise) as url, \
            Store.open(tmp_path / "mirror") as copy, \
            mm.Origin(url, httpx.Client(transport=counted)) as client:  # fmt: skip
        mm.mirror_once(copy, client, keyring, ORIGIN)
        assert copy.tree_size() == 257
        fetched = client.fetched
    _same_log(origin, tmp_path / "mirror")
    # a chunk past the cap, and for zstd what its stored blocks add (under 1/64) and what
    # the decoder reads ahead (a chunk)
    slack = (64 << 10) if coding == "identity" else cap // 64 + (4 * 64 << 10)
    assert 0 < counted.read["/copies/001"] <= cap + slack
    assert fetched < cap + (2 << 20)  # decoded: the first copy's cap, and the rest's answers
