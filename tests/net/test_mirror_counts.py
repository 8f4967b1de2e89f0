"""Every figure of ``pithlog mirror``'s JSON line and of its line on stderr (docs/network.md,
"Running a mirror") against counts made here, without pithlog's own functions: the leaves
of the served log from its input lines (the copies, in order), the statuses from a model
of spec 7 step 0 whose verdicts are known by construction, the root from RFC 9162's MTH
computed over those leaves, and the bytes fetched as a proxy between the mirror and a real
``pithlog serve`` counts them. Four passes: the first, one with nothing new, one after the
origin grew, one stopped midway (interrupted), and the pass that resumes it."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from served import in_thread
from serving import ORIGIN, g, make_keys, serving

from pithlog.cli import main
from pithlog.net import mirror as mm
from pithlog.store import Store

LEAVES = (300, 700, 1300)
"""The origin's size at each stage: more than a bundle, then more than two more."""


def _events(count: int) -> list[tuple[dict[str, Any], bool]]:
    """``count`` events, each with whether checks 1-12 pass (known by construction): per
    pith a record, an attestation, its forged and tampered copies (same event_id, check 6
    and 3 fail), a copy of it signed again (valid: two valid copies of one event_id), and a
    stranger's attestation (no key in the keyring), in an order that puts invalid copies
    first for some event_ids and valid ones first for others."""
    events: list[tuple[dict[str, Any], bool]] = []
    p = 0
    while len(events) < count:
        rec = g.record(f"2503.{p:05d}", at=100)
        pith = rec["pith_number"]
        att = g.attestation(pith, 200, f"said {p}")
        group = [(rec, True), (att, True), (g.forged(att), False), (g.tampered(att), False),
                 (g.resigned(att, "author", bytes([p % 256, p // 256])), True),
                 (g.attestation(pith, 300, f"s {p}", signer="stranger"), False)]  # fmt: skip
        if p % 2:  # the forged and tampered copies before the valid ones
            group[1:5] = [group[2], group[3], group[1], group[4]]
        events += group
        p += 1
    return events[:count]


def _statuses(lines: list[tuple[bytes, bool]], start: int, end: int) -> Counter[str]:
    """Statuses of the leaves ``start`` to ``end`` appended in order after the ones before
    them (keep_invalid: every copy is stored): the first copy of an event_id ``stored``, a
    later one ``replaced`` when it ranks before the kept one (passing checks 1-12 first,
    then the smallest bytes; spec 7 step 0), else ``evidence``."""
    kept: dict[str, tuple[bool, bytes]] = {}
    counted: Counter[str] = Counter()
    for at, (data, valid) in enumerate(lines[:end]):
        eid = json.loads(data)["event_id"]
        rank = (not valid, data)
        status = "stored" if eid not in kept else "replaced" if rank < kept[eid] else "evidence"
        if status != "evidence":
            kept[eid] = rank
        if at >= start:
            counted[status] += 1
    return counted


def _mth(leaves: list[bytes]) -> bytes:
    """RFC 9162 section 2.1.1's MTH over leaf data."""
    if len(leaves) == 1:
        return hashlib.sha256(b"\x00" + leaves[0]).digest()
    k = 1 << ((len(leaves) - 1).bit_length() - 1)
    return hashlib.sha256(b"\x01" + _mth(leaves[:k]) + _mth(leaves[k:])).digest()


def _root(lines: list[tuple[bytes, bool]], size: int) -> str:
    """The root the origin signs at ``size``: a leaf is event_id || SHA-256(copy)."""
    leaves = [bytes.fromhex(json.loads(data)["event_id"].removeprefix("sha256:"))
              + hashlib.sha256(data).digest() for data, _ in lines[:size]]  # fmt: skip
    return base64.b64encode(_mth(leaves)).decode()


@contextlib.contextmanager
def counting(upstream: str) -> Iterator[tuple[str, list[int]]]:
    """A proxy on 127.0.0.1 in front of ``upstream`` that asks for and passes on each answer
    unencoded, noting the length of each 200 answer's body (what the mirror counts in
    ``fetched_bytes``: the bodies, decoded; a 404 counts nothing)."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    bodies: list[int] = []

    async def forward(request: Request) -> Response:
        url = upstream + request.scope["raw_path"].decode("latin-1")
        async with httpx.AsyncClient(timeout=30) as client:
            answer = await client.get(url, headers={"accept-encoding": "identity"})
        if answer.status_code == 200:
            bodies.append(len(answer.content))
        kept = {k: v for k, v in answer.headers.items() if k not in
                ("content-length", "content-encoding", "transfer-encoding", "connection")}
        return Response(answer.content, answer.status_code, headers=kept)

    app = Starlette(routes=[Route("/{rest:path}", forward, methods=["GET"])])
    with in_thread(app) as url:
        yield url, bodies


def _append(store: Path, lines: list[tuple[bytes, bool]]) -> None:
    with Store.open(store) as opened:
        opened.append([data for data, _ in lines], g.KEYRING, keep_invalid=True)


def run(argv: list[str]) -> tuple[int, bytes, str]:
    out, err = io.BytesIO(), io.StringIO()
    status = main(argv, stdout=out, stderr=err)
    return status, out.getvalue(), err.getvalue()


def _held(store: Path) -> list[bytes]:
    """The copies the store holds, in its log's order (``pithlog export``)."""
    status, out, err = run(["--store", str(store), "export"])
    assert status == 0, err
    return out.splitlines()


def test_the_figures_of_each_pass_are_the_counts_made_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = make_keys(tmp_path)
    lines = [(g.encoded(e), valid) for e, valid in _events(LEAVES[-1])]
    assert len({data for data, _ in lines}) == len(lines)  # no copy twice: one leaf each
    origin, copy = tmp_path / "origin", tmp_path / "mirror"
    _append(origin, lines[:LEAVES[0]])
    fetched_before = 0

    def mirror(url: str, *extra: str) -> tuple[int, dict[str, Any], str]:
        status, out, err = run(["--store", str(copy), "mirror", url, "--keyring",
                                str(keys.keyring), "--origin", ORIGIN, *extra])  # fmt: skip
        said = out.decode().splitlines()
        assert len(said) == 1, (out, err)
        return status, json.loads(said[0]), err

    def expect(line: dict[str, Any], err: str, held: int, size: int, end: int,
               accepted: bool, fetched: list[int]) -> list[int]:  # fmt: skip
        """The line of a pass that found ``held`` leaves, was served ``size`` and left
        ``end`` (and the store holds those leaves); the lengths of the bodies it fetched."""
        nonlocal fetched_before
        assert {k: v for k, v in line.items() if k != "error"} == {
            "origin": ORIGIN, "size": size, "root": _root(lines, size),
            "held_before": held, "appended": end - held, "accepted": accepted,
            "fetched_bytes": sum(fetched[fetched_before:]),
            "statuses": dict(sorted(_statuses(lines, held, end).items())),
        }, err  # fmt: skip
        bodies, fetched_before = fetched[fetched_before:], len(fetched)
        assert _held(copy) == [data for data, _ in lines[:end]]
        return bodies

    with serving(origin, keys) as server, counting(server.url) as (url, fetched):
        # the first pass: everything
        status, line, err = mirror(url)
        assert status == 0, err
        expect(line, err, 0, LEAVES[0], LEAVES[0], True, fetched)
        assert err.endswith(f"mirror: {ORIGIN} at size {LEAVES[0]}: {LEAVES[0]} leaves "
                            "appended (0 held before), root verified\n"), err  # fmt: skip
        # nothing new: the checkpoint alone is fetched
        status, line, err = mirror(url)
        assert status == 0, err
        assert len(expect(line, err, LEAVES[0], LEAVES[0], LEAVES[0], False, fetched)) == 1
        assert line["statuses"] == {}
        # the origin grew
        _append(origin, lines[LEAVES[0]:LEAVES[1]])
        status, line, err = mirror(url)
        assert status == 0, err
        expect(line, err, LEAVES[0], LEAVES[1], LEAVES[1], True, fetched)
        assert err.endswith(f"at size {LEAVES[1]}: {LEAVES[1] - LEAVES[0]} leaves appended "
                            f"({LEAVES[0]} held before), root verified\n"), err  # fmt: skip
        # grew again; the pass is interrupted as bundle 4's copies are fetched, one bundle
        # a batch, none fetched ahead: bundles 2 and 3 (leaves 700-1023) are committed
        _append(origin, lines[LEAVES[1]:])
        monkeypatch.setattr(mm, "LOOKAHEAD", 0)
        real = mm.Origin.copies

        def copies(self: mm.Origin, index: int, width: int) -> list[bytes]:
            if index == 4:
                raise KeyboardInterrupt
            return real(self, index, width)

        monkeypatch.setattr(mm.Origin, "copies", copies)
        status, line, err = mirror(url, "--batch-bundles", "1")
        assert status == 130 and line["error"] == "interrupted", err
        expect(line, err, LEAVES[1], LEAVES[2], 4 * 256, True, fetched)
        assert f"the pass stopped after {4 * 256 - LEAVES[1]} leaves appended ({LEAVES[1]} " \
            "held before)" in err  # fmt: skip
        # resumed: the rest, under the checkpoint the stopped pass accepted
        monkeypatch.undo()
        status, line, err = mirror(url)
        assert status == 0, err
        expect(line, err, 4 * 256, LEAVES[2], LEAVES[2], False, fetched)
        assert err.endswith(f"at size {LEAVES[2]}: {LEAVES[2] - 4 * 256} leaves appended "
                            f"({4 * 256} held before), root verified\n"), err  # fmt: skip
