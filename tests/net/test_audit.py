"""pithlog audit against a real ``pithlog serve`` on 127.0.0.1: a registry that serves what
its log implies passes; a proxy in front of it that alters one served state makes audit
exit 1 naming that pith and nothing else; equivocations come out as proof files that
``verify-proof`` accepts."""

from __future__ import annotations

import io
import json
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from served import ORIGIN, Files, g, in_thread, serving
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from pithlog.cli import main
from pithlog.store import Store
from pithlog.testing import test_key, test_keyring_entries, write_key_file

CASES = Path(__file__).resolve().parents[2] / "vectors" / "cases"


def run(argv: list[str]) -> tuple[int, bytes, str]:
    out, err = io.BytesIO(), io.StringIO()
    status = main(argv, stdout=out, stderr=err)
    return status, out.getvalue(), err.getvalue()


def case_files(root: Path, case: str) -> Files:
    """A registry's store of one conformance case (invalid events kept, as a log keeps them)."""
    key = root / "registry.key"
    write_key_file(key, test_key("registry"))
    keyring = CASES / case / "keyring.json"
    store = root / "registry"
    status, _, err = run(["--store", str(store), "append", "--keep-invalid", "--keyring",
                          str(keyring), str(CASES / case / "events.jsonl")])  # fmt: skip
    assert status in (0, 2), err
    return Files(root, store, key, keyring, [])


async def upstream(url: str) -> httpx.Response:
    """The registry's answer to a proxied GET, not encoded (so that it can be altered)."""
    async with httpx.AsyncClient() as client:
        return await client.get(url, headers={"accept-encoding": "identity"})


def altered(body: bytes) -> bytes:
    """A served state with one number changed: another document."""
    state = json.loads(body)
    state["event_count"] += 1
    return json.dumps(state, separators=(",", ":")).encode() + b"\n"


def proxied(forward: Any, where: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """``where``, with the ``url`` of ``forward`` served for every path in a thread."""
    with in_thread(Starlette(routes=[Route("/{rest:path}", forward)])) as url:
        where["url"] = url
        yield where


def first_bundle_cut(path: str, where: dict[str, Any]) -> Response | None:
    """A 503 for the first entry bundle asked for once the log has grown (``grown``): the
    catch-up's pass stops midway, its newer checkpoint accepted and its leaves not."""
    if path.startswith("/tile/entries/") and where["grown"] and not where["failed"]:
        where["failed"] += 1
        return Response(b"upstream gone", 503)
    return None


def grow(files: Files, keyring: Any, pith: str = "2603.00001") -> None:
    """The registry's log grown by one record (kept even if invalid) while it is audited."""
    with Store.open(files.store) as registry:
        registry.append([g.encoded(g.record(pith))], keyring, keep_invalid=True)


def audit_through(forward: Any, where: dict[str, Any], files: Files,
                  tmp_path: Path) -> tuple[int, list[Any], str]:  # fmt: skip
    """``audit`` of a real ``serve`` of ``files`` through the proxy ``forward``."""
    with serving(files) as server:
        where["upstream"] = server.url
        for proxy in proxied(forward, where):
            return audit(proxy["url"], files, tmp_path / "auditor", tmp_path / "ev")
    raise AssertionError("no proxy")


@pytest.fixture
def altering_proxy() -> Iterator[dict[str, Any]]:
    """A proxy on 127.0.0.1 in front of ``upstream`` (set by the test) that changes the one
    served state of ``pith``, answers that of ``long`` with 64 MiB and one byte and that of
    ``failing`` with 503, that of ``invented`` with ``invented_body``, and passes
    everything else through, in a thread."""
    where: dict[str, Any] = {"upstream": None, "pith": None}

    async def long() -> AsyncIterator[bytes]:
        for _ in range(64):
            yield b" " * (1 << 20)
        yield b" "

    async def forward(request: Request) -> Response:
        path = request.url.path
        if path == f"/state/{where.get('long')}":
            return StreamingResponse(long(), media_type="application/json")
        if path == f"/state/{where.get('failing')}":
            return Response(b"upstream gone", 503)
        if path == f"/state/{where.get('invented')}":  # a state the log does not imply
            return Response(where["invented_body"], 200, media_type="application/json")
        answer = await upstream(where["upstream"] + path)
        body = answer.content
        if path == f"/state/{where['pith']}" and answer.status_code == 200:
            body = altered(body)
        if path == f"/state/{where.get('deep')}":  # nested past any recursive reader
            body = b"[" * 5000 + b"]" * 5000
        return Response(body, answer.status_code,
                        media_type=answer.headers.get("content-type"))  # fmt: skip

    yield from proxied(forward, where)


def audit(url: str, files: Files, store: Path, evidence: Path) -> tuple[int, list[Any], str]:
    status, out, err = run(["--store", str(store), "audit", url, "--keyring",
                            str(files.keyring), "--evidence-dir", str(evidence)])  # fmt: skip
    return status, [json.loads(line) for line in out.splitlines()], err


def test_an_honest_registry_passes_and_one_altered_state_is_named(
    tmp_path: Path, altering_proxy: dict[str, Any]
) -> None:
    files = case_files(tmp_path, "mixed-piths")
    with Store.open(files.store, readonly=True) as registry:
        piths = [p["pith_number"] for p in registry.piths() if p["status"] == "state"]
    assert len(piths) >= 2
    with serving(files) as server:
        blocked = tmp_path / "blocked"
        blocked.write_bytes(b"")  # no folder for the evidence: refused before the audit
        status, out, err = run(["--store", str(tmp_path / "auditor"), "audit", server.url,
                                "--keyring", str(files.keyring), "--evidence-dir",
                                str(blocked)])  # fmt: skip
        assert (status, out) == (2, b"") and "[usage.arguments] --evidence-dir" in err
        assert not (tmp_path / "auditor").exists()
        status, lines, err = audit(server.url, files, tmp_path / "auditor", tmp_path / "ev")
        assert status == 0, err
        assert lines == [{"summary": True, "origin": ORIGIN, "size": lines[-1]["size"],
                          "latest_size": lines[-1]["size"], "compared_size": lines[-1]["size"],
                          "stopped": None, "state_mismatch": 0, "state_unanswered": 0,
                          "state_not_checked": 0, "equivocation": 0,
                          "split_view": 0}]  # fmt: skip
        altering_proxy["upstream"], altering_proxy["pith"] = server.url, piths[1]
        status, lines, err = audit(altering_proxy["url"], files, tmp_path / "auditor2",
                                   tmp_path / "ev2")  # fmt: skip
    assert status == 1, err
    findings = lines[:-1]
    assert [(f["finding"], f["pith_number"]) for f in findings] == [("state_mismatch", piths[1])]
    assert findings[0]["log_state_sha256"] != findings[0]["served_state_sha256"]
    assert lines[-1]["state_mismatch"] == 1 and lines[-1]["equivocation"] == 0


def test_a_served_state_nested_past_any_reader_is_a_mismatch_not_a_crash(
    tmp_path: Path, altering_proxy: dict[str, Any]
) -> None:
    files = case_files(tmp_path, "mixed-piths")
    with Store.open(files.store, readonly=True) as registry:
        pith = next(p["pith_number"] for p in registry.piths() if p["status"] == "state")
    with serving(files) as server:
        altering_proxy["upstream"], altering_proxy["deep"] = server.url, pith
        status, lines, err = audit(altering_proxy["url"], files, tmp_path / "auditor",
                                   tmp_path / "ev")  # fmt: skip
    assert status == 1 and "Traceback" not in err, err
    assert [(f["finding"], f["pith_number"]) for f in lines[:-1]] == [("state_mismatch", pith)]
    assert lines[-1]["state_mismatch"] == 1


def test_a_served_state_is_hashed_as_a_state_not_as_an_envelope() -> None:
    """The served state's hash in a mismatch finding is computed through the door as a
    state document goes (verify-state): one over 8 MiB, or nesting a payload deeper than an
    envelope may alone (a state nests its events' payloads three levels deeper), is JSON
    with a hash; it was null, as for bytes that are not JSON."""
    from pithlog.net.audit import _computed
    from pithlog.protocol.canonical import MAX_DEPTH, MAX_LINE_BYTES, digest

    deep: Any = 0
    for _ in range(MAX_DEPTH + 1):
        deep = {"x": deep}
    for value in ({"events": [deep]}, {"events": ["a" * MAX_LINE_BYTES]}):
        served = json.dumps({**value, "state_sha256": "sha256:" + "0" * 64}).encode()
        assert _computed(served) == digest(value)
    assert _computed(b"[" * 100_000) is None


def test_a_state_too_long_or_unanswered_is_a_finding_and_the_audit_goes_on(
    tmp_path: Path, altering_proxy: dict[str, Any]
) -> None:
    """An answer longer than the log's state (64 MiB and a byte: over the fixed cap there
    was) is a state_mismatch, read no further than the state's own length allows; a 503
    is a state_unanswered, no evidence of a lie. Neither ends the audit: the altered state
    after them is found, and the summary counts each (exit 1), where audit stopped at the
    first with mirror.fetch, exit 2."""
    files = case_files(tmp_path, "mixed-piths")
    with Store.open(files.store, readonly=True) as registry:
        piths = [p["pith_number"] for p in registry.piths() if p["status"] == "state"]
        length = len(registry.state(piths[0]) or b"")
    assert len(piths) == 3
    with serving(files) as server:
        altering_proxy.update(upstream=server.url, long=piths[0], failing=piths[1],
                              pith=piths[2])  # fmt: skip
        status, lines, err = audit(altering_proxy["url"], files, tmp_path / "auditor",
                                   tmp_path / "ev")  # fmt: skip
    assert status == 1, err
    long, failing, altered = lines[:-1]
    assert (long["finding"], long["pith_number"], long["served"]) == (
        "state_mismatch", piths[0], True)  # fmt: skip
    assert long["served_state_sha256"] is None and long["log_state_sha256"] is not None
    cap = int(long["served_problem"].split()[4])
    assert length < cap < 2 * length and long["served_problem"].endswith(f"is {length}")
    assert (failing["finding"], failing["pith_number"]) == ("state_unanswered", piths[1])
    assert "answered 503" in failing["problem"] and failing["log_state_sha256"]
    assert (altered["finding"], altered["pith_number"]) == ("state_mismatch", piths[2])
    assert {k: v for k, v in lines[-1].items() if k not in ("origin", "size", "latest_size",
                                                          "compared_size")} == {
        "summary": True, "stopped": None, "state_mismatch": 2, "state_unanswered": 1,
        "state_not_checked": 0, "equivocation": 0, "split_view": 0}  # fmt: skip
    assert "2 state mismatch(es), 1 state(s) unanswered" in err


def test_a_state_served_for_a_pith_the_log_leaves_pending_is_a_mismatch(
    tmp_path: Path, altering_proxy: dict[str, Any]
) -> None:
    """A pith whose log holds no valid record_created has no state (spec 7 step 2): the
    log implies 404. The audit compared the piths with a state only, so a registry that
    served a state document for a pending pith (here one of another pith, and one too
    long to read) passed with exit 0."""
    files = case_files(tmp_path, "mixed-piths")
    with Store.open(files.store, readonly=True) as registry:
        pending = [p["pith_number"] for p in registry.piths() if p["status"] == "pending"]
        other = next(p["pith_number"] for p in registry.piths() if p["status"] == "state")
        body = (registry.state(other) or b"") + b"\n"
    assert len(pending) == 1
    with serving(files) as server:
        status, lines, err = audit(server.url, files, tmp_path / "auditor", tmp_path / "ev")
        assert status == 0 and len(lines) == 1, err  # 404 for the pending pith: as implied
        altering_proxy.update(upstream=server.url, invented=pending[0], invented_body=body)
        status, lines, err = audit(altering_proxy["url"], files, tmp_path / "auditor2",
                                   tmp_path / "ev2")  # fmt: skip
        assert status == 1, err
        assert lines[:-1] == [{
            "finding": "state_mismatch", "pith_number": pending[0], "log_state_sha256": None,
            "served_state_sha256": json.loads(body)["state_sha256"],
            "served_claims_state_sha256": json.loads(body)["state_sha256"], "served": True,
        }]  # fmt: skip
        assert lines[-1]["state_mismatch"] == 1
        altering_proxy.update(invented_body=b" " * (2 << 20))
        status, lines, err = audit(altering_proxy["url"], files, tmp_path / "auditor3",
                                   tmp_path / "ev3")  # fmt: skip
    assert status == 1, err
    (finding,) = lines[:-1]
    assert (finding["finding"], finding["pith_number"], finding["served"]) == (
        "state_mismatch", pending[0], True)  # fmt: skip
    assert "the log implies no state" in finding["served_problem"]


def test_every_equivocation_comes_out_as_a_proof_that_verifies(tmp_path: Path) -> None:
    files = case_files(tmp_path, "equivocations")
    expected = [json.loads(line) for line in (CASES / "equivocations" / "expected.jsonl")
                .read_bytes().splitlines()]  # fmt: skip
    slots = sum(len(s["equivocations"]) for s in expected)
    with serving(files) as server:
        status, lines, err = audit(server.url, files, tmp_path / "auditor", tmp_path / "ev")
    assert status == 1, err
    proofs = [f for f in lines[:-1] if f["finding"] == "equivocation"]
    assert len(proofs) == slots and lines[-1]["state_mismatch"] == 0
    for finding in proofs:
        status, out, err = run(["verify-proof", "--keyring", str(files.keyring),
                                "--origin", ORIGIN, finding["proof"]])  # fmt: skip
        assert status == 0, err
        assert json.loads(out)["event_ids"] == finding["event_ids"]


def _audit_stalled(
    files: Files, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, asked: list[str],
    stalls: Callable[[int], bool], *options: str,
) -> tuple[int, str, str, float]:  # fmt: skip
    """``pithlog audit`` of ``files``'s registry behind a proxy that lets the n-th
    ``/state/`` request (counted from 1, each path put in ``asked``) time out when
    ``stalls(n)``, with a deadline of 1 s: the audit's status, out, err and seconds."""
    import asyncio

    from pithlog.net import encoding

    async def forward(request: Request) -> Response:
        path = request.url.path
        if path.startswith("/state/"):
            asked.append(path)
            if stalls(len(asked)):
                await asyncio.sleep(3)  # past the deadline of 1 s
                return Response(b"late", 503)
        async with httpx.AsyncClient() as client:
            answer = await client.get(where + path, headers={"accept-encoding": "identity"})
        return Response(answer.content, answer.status_code)

    monkeypatch.setattr(encoding, "ANSWER_GRACE", 1.0)
    monkeypatch.setattr(encoding, "SLOWEST_RATE", 1 << 40)  # the cap adds no time
    with serving(files) as server, \
            in_thread(Starlette(routes=[Route("/{rest:path}", forward)])) as url:  # fmt: skip
        where = server.url
        started = time.monotonic()
        status, out, err = run(["--store", str(tmp_path / "auditor"), "audit", url,
                                "--keyring", str(files.keyring), "--evidence-dir",
                                str(tmp_path / "ev"), *options])  # fmt: skip
        return status, out, err, time.monotonic() - started


def _equivocations_proven(lines: list[dict[str, Any]], files: Files) -> None:
    """The audit's output ``lines`` hold equivocations, as many as its summary counts, and
    ``verify-proof`` accepts the proof of each."""
    proofs = [f for f in lines[:-1] if f["finding"] == "equivocation"]
    assert proofs and lines[-1]["equivocation"] == len(proofs)
    for finding in proofs:
        status, _, err = run(["verify-proof", "--keyring", str(files.keyring),
                              "--origin", ORIGIN, finding["proof"]])  # fmt: skip
        assert status == 0, err


def test_states_that_time_out_in_a_row_stop_the_audit_asking(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A registry that lets every /state/<pith> request time out held the audit the whole
    deadline of each (a minute), for every pith: after --max-unanswered in a row (here 1,
    and a deadline of 1 s) the audit asks for no more, counts the piths left as
    state_not_checked, proves the equivocations all the same and exits 1."""


    files = case_files(tmp_path, "equivocations")
    with Store.open(files.store, readonly=True) as registry:
        piths = [p["pith_number"] for p in registry.piths() if p["status"] == "state"]
    assert len(piths) >= 2
    asked: list[str] = []
    status, out, err, took = _audit_stalled(files, tmp_path, monkeypatch, asked, lambda n: True,
                                            "--max-unanswered", "1")  # fmt: skip
    assert status == 1 and "Traceback" not in err, err
    lines = [json.loads(line) for line in out.splitlines()]
    kinds = [line.get("finding") for line in lines[:-1]]
    assert kinds[:2] == ["state_unanswered", "state_not_checked"]
    assert "an answer that took over 1 s" in lines[0]["problem"]
    assert lines[1]["count"] == len(piths) - 1 and lines[1]["first_pith_number"] == piths[1]
    assert set(kinds[2:]) == {"equivocation"}
    assert lines[-1]["state_unanswered"] == 1
    assert lines[-1]["state_not_checked"] == len(piths) - 1
    assert lines[-1]["stopped"] == "max_unanswered"
    assert lines[-1]["equivocation"] == len(kinds) - 2 > 0
    assert len(asked) == 1 and took < 30
    assert f"1 state(s) unanswered, {len(piths) - 1} not checked" in err


def _valid_only(tmp_path: Path, events: list[dict[str, Any]]) -> Files:
    """A registry's store of ``events``, all valid: an audit of it passes."""
    keyring = tmp_path / "keyring.json"
    keyring.write_text(json.dumps({"keyring_version": "1", "keys": test_keyring_entries()}))
    key = tmp_path / "registry.key"
    write_key_file(key, test_key("registry"))
    with Store.open(tmp_path / "registry") as registry:
        registry.append([g.encoded(e) for e in events], g.KEYRING)
    return Files(tmp_path, tmp_path / "registry", key, keyring, events)


def _thirty_piths(tmp_path: Path) -> Files:
    """A registry of 30 records, one pith each: one state asked for at a time."""
    return _valid_only(tmp_path, [g.record(f"2602.{i:05d}") for i in range(1, 31)])


def test_max_time_bounds_an_audit_that_every_other_state_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--max-unanswered counts states unanswered in a row: a registry that let every other
    /state/ request time out (here after 1 s) and answered the others at once never
    reached it, and held the audit half the deadline a pith, weeks over a large log. With
    --max-time the audit stops asking when its time is up (an answer in flight cut
    there), counts the rest as state_not_checked, says why in the summary's stopped, and
    exits 1."""

    files = _thirty_piths(tmp_path)
    asked: list[str] = []

    status, out, err, took = _audit_stalled(files, tmp_path, monkeypatch, asked,
                                            lambda n: n % 2 == 1, "--max-time", "3")  # fmt: skip
    assert status == 1 and "Traceback" not in err, err
    lines = [json.loads(line) for line in out.splitlines()]
    summary, findings = lines[-1], lines[:-1]
    # 15 states unanswered a second each, without the bound
    assert took < 8 and len(asked) < 10, (took, asked)
    assert findings[-1]["finding"] == "state_not_checked"
    assert "time ran out (--max-time)" in findings[-1]["problem"]
    assert {f["finding"] for f in findings[:-1]} <= {"state_unanswered"}
    assert summary["stopped"] == "max_time" and summary["state_mismatch"] == 0
    assert summary["state_not_checked"] == findings[-1]["count"] > 0
    # every pith a pass, unanswered or not checked (the one whose answer the time cut
    # too, if any): none left out
    assert summary["state_unanswered"] == len(findings) - 1
    assert 30 - summary["state_not_checked"] in (len(asked), len(asked) - 1)
    assert "stopped short: --max-time ran out" in err
    # without a bound hit, the summary says so
    with serving(files) as server:
        status, lines, err = audit(server.url, files, tmp_path / "auditor", tmp_path / "ev")
    assert status == 0 and lines[-1]["stopped"] is None, err


def test_an_audit_has_a_time_by_default_and_max_time_0_lifts_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --max-time an audit had no bound but each answer's deadline: a registry
    that answered every state just in time held it as long as its piths took (one that let
    every other /state/ request time out, here after 1 s, 15 s for these 30 piths; half a
    second a state, 14 hours over 100,000). It now has audit.MAX_SECONDS (an hour; here
    3 s) unless told, and stops as --max-time stops it; --max-time 0 is no limit."""
    from pithlog.net import audit as net_audit

    files = _thirty_piths(tmp_path)
    asked: list[str] = []
    monkeypatch.setattr(net_audit, "MAX_SECONDS", 3.0)
    status, out, err, _ = _audit_stalled(files, tmp_path, monkeypatch, asked,
                                         lambda n: n % 2 == 1)  # fmt: skip
    assert status == 1 and "Traceback" not in err, err
    lines = [json.loads(line) for line in out.splitlines()]
    summary, findings = lines[-1], lines[:-1]
    assert summary["stopped"] == "max_time" and findings[-1]["finding"] == "state_not_checked"
    assert summary["state_not_checked"] == findings[-1]["count"] > 0 and len(asked) < 30
    assert "stopped short: --max-time ran out" in err
    # 0: no limit, whatever the default
    monkeypatch.setattr(net_audit, "MAX_SECONDS", 1e-9)
    with serving(files) as server:
        status, out, err = run(["--store", str(tmp_path / "auditor2"), "audit", server.url,
                                "--keyring", str(files.keyring), "--evidence-dir",
                                str(tmp_path / "ev2"), "--max-time", "0"])  # fmt: skip
    assert status == 0, err
    assert json.loads(out.splitlines()[-1])["stopped"] is None


def test_max_time_cuts_the_mirror_short_and_the_next_audit_resumes_it(
    tmp_path: Path,
) -> None:
    """--max-time bounded the states only: the mirror of step 1 ran to its end, however
    slowly the registry served it (a bundle of copies may take 9.5 minutes, each). Through
    a proxy that held every bundle of copies after the eighth 30 s, an audit given 8 s ran
    past 30 s, mirrored the whole log and then checked no state. Its mirror now stops when
    the time runs out, the answer in flight cut there: the two batches taken before it (4
    bundles, 1,024 leaves, each), verified, stay: the first was written, and the second,
    which the append pipeline had through the door and not yet written, is written then
    (it was thrown away: 1,024 leaves kept, and the next audit fetched bundles 4-9 again);
    no state is compared with a log held in part (no finding, the summary's stopped
    max_time, exit 1). The next audit fetches only the bundles the first did not commit,
    and passes."""
    import asyncio
    import threading

    piths = [g.record(f"2603.{i:05d}") for i in range(1, 11)]
    files = _valid_only(tmp_path, piths + [g.attestation(r["pith_number"], n, f"said {n}")
                                           for n in range(1, 231) for r in piths])  # fmt: skip
    total = len(files.events)
    assert 9 * 256 < total < 10 * 256  # 10 bundles: the third batch begins at the 9th
    asked: list[str] = []
    where: dict[str, Any] = {"slow": True}
    release = threading.Event()

    def bundle(path: str) -> int:  # /copies/006 or /copies/006.p/74: 6 (under 1,000)
        return int(path.removeprefix("/copies/")[:3])

    async def forward(request: Request) -> Response:
        path = request.url.path
        asked.append(path)
        if where["slow"] and path.startswith("/copies/") and bundle(path) >= 8:
            for _ in range(600):  # 30 s, within the answer's deadline; released at the end
                if release.is_set():
                    return Response(b"released", 503)
                await asyncio.sleep(0.05)
        async with httpx.AsyncClient() as client:
            answer = await client.get(where["upstream"] + path,
                                      headers={"accept-encoding": "identity"})  # fmt: skip
        return Response(answer.content, answer.status_code)

    mirror = tmp_path / "auditor"
    try:
        with serving(files) as server:
            where["upstream"] = server.url
            for proxy in proxied(forward, where):
                status, out, err = run(["--store", str(mirror), "audit", proxy["url"],
                                        "--keyring", str(files.keyring), "--evidence-dir",
                                        str(tmp_path / "ev"), "--max-time", "8"])  # fmt: skip
                assert status == 1 and "Traceback" not in err, err
                assert [json.loads(line) for line in out.splitlines()] == [{
                    "summary": True, "origin": ORIGIN, "size": total, "latest_size": None,
                    "compared_size": None, "stopped": "max_time", "state_mismatch": 0,
                    "state_unanswered": 0, "state_not_checked": 0, "equivocation": 0,
                    "split_view": 0}]  # fmt: skip
                assert not [p for p in asked if p.startswith("/state/")]
                assert "--max-time ran out while mirroring" in err
                assert "stopped short: --max-time ran out" in err
                with Store.open(mirror, readonly=True) as held, \
                        Store.open(files.store, readonly=True) as registry:  # fmt: skip
                    assert held.tree_size() == 8 * 256
                    assert held.tree_root() == registry.tree_root(8 * 256)
                where["slow"] = False
                release.set()
                asked.clear()
                status, out, err = run(["--store", str(mirror), "audit", proxy["url"],
                                        "--keyring", str(files.keyring), "--evidence-dir",
                                        str(tmp_path / "ev")])  # fmt: skip
                assert status == 0, err
                assert json.loads(out)["stopped"] is None
                # resumed: the bundles the first left, not the eight it committed
                assert {bundle(p) for p in asked if p.startswith("/copies/")} == {8, 9}
    finally:
        release.set()
    with Store.open(mirror, readonly=True) as held, \
            Store.open(files.store, readonly=True) as registry:  # fmt: skip
        assert held.tree_root() == registry.tree_root()


def test_max_time_holds_the_first_checkpoint_too(tmp_path: Path) -> None:
    """The checkpoint fetched before a new store is made is step 1's too: from a server
    whose answer's head comes a line at a time (within its 62 s deadline), an audit given
    1 s waited 30 s and ended with that answer's error, exit 2. It stops at 1 s with the
    summary (stopped max_time, nothing accepted), exit 1, and makes no store."""
    from served import slow_head

    keyring = tmp_path / "keyring.json"
    keyring.write_text(json.dumps({"keyring_version": "1", "keys": test_keyring_entries()}))
    with slow_head() as url:
        status, out, err = run(["--store", str(tmp_path / "auditor"), "audit", url,
                                "--keyring", str(keyring), "--evidence-dir",
                                str(tmp_path / "ev"), "--max-time", "1"])  # fmt: skip
    assert status == 1 and "Traceback" not in err, err
    assert json.loads(out) == {
        "summary": True, "origin": None, "size": None, "latest_size": None,
        "compared_size": None, "stopped": "max_time", "state_mismatch": 0,
        "state_unanswered": 0, "state_not_checked": 0, "equivocation": 0, "split_view": 0}
    assert not (tmp_path / "auditor").exists()


def test_an_up_to_date_mirror_is_audited_under_the_keyring_given(tmp_path: Path) -> None:
    """A second audit into the same store with another keyring appends nothing (the mirror
    is up to date): its states were compared as reduced under the first keyring, and the
    proof of a slot whose signer the second lacks ended in a KeyError traceback. The store
    is now brought under the keyring given first, as append brings it."""
    files = case_files(tmp_path, "equivocations")
    keys = json.loads(files.keyring.read_text())
    keys["keys"] = [e for e in keys["keys"] if e["key_id"] != "test-author"]
    other = tmp_path / "other.json"
    other.write_text(json.dumps(keys))
    with serving(files) as server:
        status, lines, err = audit(server.url, files, tmp_path / "auditor", tmp_path / "ev")
        assert status == 1 and lines[-1]["equivocation"] == 6, err
        status, out, err = run(["--store", str(tmp_path / "auditor"), "audit", server.url,
                                "--keyring", str(other), "--evidence-dir",
                                str(tmp_path / "ev2")])  # fmt: skip
    assert status == 1, err
    lines = [json.loads(line) for line in out.splitlines()]
    proofs = [f for f in lines[:-1] if f["finding"] == "equivocation"]
    # the author's events are invalid under the other keyring: its three slots are gone,
    # and the registry (reduced under the first) serves other states than K implies
    assert len(proofs) == 3 and lines[-1]["state_mismatch"] > 0
    assert all(f["slot"]["key_id"] != "test-author" for f in proofs)
    assert "audit: the keyring changed (1 key(s))" in err
    for finding in proofs:
        status, _, err = run(["verify-proof", "--keyring", str(other), finding["proof"]])
        assert status == 0, err


def test_the_audit_walks_the_piths_without_listing_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/evidence.md: the audit's memory does not grow with the number of piths. It
    listed every pith's summary (about 540 bytes a pith) for the states and again for the
    equivocations; it walks them a chunk at a time (``Store.each_pith``), here of one."""
    files = case_files(tmp_path, "equivocations")
    expected = [json.loads(line) for line in (CASES / "equivocations" / "expected.jsonl")
                .read_bytes().splitlines()]  # fmt: skip
    walk = Store.each_pith

    def listed(self: Store) -> list[dict[str, Any]]:
        raise AssertionError("the audit listed every pith")

    monkeypatch.setattr(Store, "piths", listed)
    monkeypatch.setattr(Store, "each_pith", lambda self, chunk=1000: walk(self, 1))
    with serving(files) as server:
        status, lines, err = audit(server.url, files, tmp_path / "auditor", tmp_path / "ev")
    assert status == 1, err
    proofs = [f for f in lines[:-1] if f["finding"] == "equivocation"]
    assert len(proofs) == sum(len(s["equivocations"]) for s in expected) > 0
    assert lines[-1]["state_mismatch"] == 0


def growing_files(root: Path) -> tuple[Files, dict[str, str]]:
    """A registry of three piths: ``still`` and ``grown`` with a state, ``pending`` with a
    mirror hint and no record_created (no state)."""
    records = {name: g.record(f"2601.0000{i}") for i, name in enumerate(("still", "grown",
                                                                          "pending"))}  # fmt: skip
    piths = {name: event["pith_number"] for name, event in records.items()}
    events = [records["still"], records["grown"],
              g.mirror_hint(piths["pending"], 1, "https://mirror.example/p")]  # fmt: skip
    files = _valid_only(root, events)
    piths["pending_record"] = g.encoded(records["pending"]).decode()
    return files, piths


@pytest.fixture
def growing_proxy() -> Iterator[dict[str, Any]]:
    """A proxy on 127.0.0.1 in front of ``upstream`` that, before it forwards a state
    request of a pith in ``grow`` (pith: how many times), appends an event of that pith to
    the registry's store ``store`` (a log taking submissions as it is audited: a
    correction, or the record_created ``record`` of a pending pith), the first time with
    the encoded events ``also``, and alters every state it forwards of the pith ``lie``."""
    where: dict[str, Any] = {"grow": {}, "lie": None, "appended": 0}

    async def forward(request: Request) -> Response:
        path = request.url.path
        pith = path.removeprefix("/state/")
        if where["grow"].get(pith, 0) > 0:
            where["grow"][pith] -= 1
            event = (where["record"] if pith == where.get("pending") else
                     g.encoded(g.correction(pith, 10 + where["appended"],
                                            f"notice {where['appended']}")))  # fmt: skip
            also, where["also"] = where.get("also", []), []  # with the first only
            with Store.open(where["store"]) as registry:
                results = registry.append([event, *also], g.KEYRING)
            assert {result.status for result in results} == {"stored"}, results
            where["appended"] += 1 + len(also)
        answer = await upstream(where["upstream"] + path)
        body = answer.content
        if pith == where["lie"] and answer.status_code == 200:
            body = altered(body)
        return Response(body, answer.status_code,
                        media_type=answer.headers.get("content-type"))  # fmt: skip

    yield from proxied(forward, where)


def test_a_registry_that_grows_while_audited_is_not_named_and_a_lie_still_is(
    tmp_path: Path, growing_proxy: dict[str, Any]
) -> None:
    """The audit mirrored the log, then compared each state served later: a pith that got
    an event in between (a registry taking submissions), or whose record_created came,
    was a state_mismatch, and an honest registry exited 1. A state that differs now brings
    the mirror up to the registry's newer checkpoint and is compared again; one that still
    differs with the tree unchanged is named."""
    files, piths = growing_files(tmp_path)
    with Store.open(files.store, readonly=True) as registry:
        size_before = registry.tree_size()
        before = {name: registry.state(piths[name]) for name in ("still", "grown", "pending")}
    assert before["pending"] is None
    with serving(files) as server:
        growing_proxy.update(upstream=server.url, store=files.store,
                             record=piths["pending_record"].encode(), pending=piths["pending"],
                             grow={piths["grown"]: 1, piths["pending"]: 1})  # fmt: skip
        status, lines, err = audit(growing_proxy["url"], files, tmp_path / "auditor",
                                   tmp_path / "ev")  # fmt: skip
        assert growing_proxy["appended"] == 2
        with Store.open(files.store, readonly=True) as registry:
            size_after = registry.tree_size()
            after = {name: registry.state(piths[name]) for name in ("grown", "pending")}
        assert after["grown"] != before["grown"] and after["pending"] is not None
        assert status == 0, (lines, err)
        assert lines == [{"summary": True, "origin": ORIGIN, "size": size_before,
                          "latest_size": size_after, "compared_size": size_after,
                          "stopped": None, "state_mismatch": 0, "state_unanswered": 0,
                          "state_not_checked": 0, "equivocation": 0,
                          "split_view": 0}]  # fmt: skip
        assert size_after == size_before + 2
        with Store.open(tmp_path / "auditor", readonly=True) as auditor:
            assert auditor.state(piths["grown"]) == after["grown"]
        # a lie is named even when the log grew before it was served
        growing_proxy.update(grow={piths["still"]: 1}, lie=piths["still"])
        status, lines, err = audit(growing_proxy["url"], files, tmp_path / "auditor2",
                                   tmp_path / "ev2")  # fmt: skip
    assert status == 1, err
    assert [(f["finding"], f["pith_number"]) for f in lines[:-1]] == [
        ("state_mismatch", piths["still"])]  # fmt: skip
    assert (lines[-1]["size"], lines[-1]["latest_size"]) == (size_after, size_after + 1)


def test_a_state_that_changes_at_every_request_is_not_checked_nor_named(
    tmp_path: Path, growing_proxy: dict[str, Any]
) -> None:
    """A pith whose state the registry's log changes before each of the audit's requests
    is never compared at one size: after CATCH_UPS catch-ups it is ``state_not_checked``
    (no pass, exit 1), not a mismatch."""
    from pithlog.net.audit import CATCH_UPS

    files, piths = growing_files(tmp_path)
    with serving(files) as server:
        growing_proxy.update(upstream=server.url, store=files.store,
                             grow={piths["grown"]: 100})  # fmt: skip
        status, lines, err = audit(growing_proxy["url"], files, tmp_path / "auditor",
                                   tmp_path / "ev")  # fmt: skip
    assert status == 1, err
    assert growing_proxy["appended"] == CATCH_UPS + 1
    (finding, summary) = lines
    assert finding["finding"] == "state_not_checked"
    assert (finding["first_pith_number"], finding["count"]) == (piths["grown"], 1)
    assert summary["state_not_checked"] == 1 and summary["state_mismatch"] == 0


def test_the_piths_not_checked_are_counted_in_a_log_grown_while_audited(tmp_path: Path) -> None:
    """``state_not_checked`` counts the piths left unasked. They were counted from the
    piths the log had when the walk began, and a log that grew while audited (a catch-up
    that brought new piths) made the count short, zero or below zero: here one pith is
    left and the line said -3, which the summary's counts then subtracted from the
    others."""
    from pithlog.errors import MirrorError
    from pithlog.net.audit import compare_states

    events = [g.record(f"2601.{i:05d}") for i in range(6)]
    events.sort(key=lambda event: event["pith_number"])
    store = Store.open(tmp_path / "auditor")
    store.append([g.encoded(event) for event in events[:2]], g.KEYRING)
    walk = store.each_pith
    store.each_pith = lambda chunk=2: walk(chunk)  # type: ignore[method-assign]
    first, *later = [event["pith_number"] for event in events]
    asked: list[str] = []

    class Registry:  # the first state served before the log grew, two unanswered later
        def get(self, path: str, cap: int, too_long: type[Exception],
                most: float | None = None) -> bytes | None:  # fmt: skip
            pith = path.removeprefix("state/")
            asked.append(pith)
            if pith in later[2:4]:
                raise MirrorError("fetch", "no answer")
            if pith == first and asked.count(first) == 1:
                return b"{}"
            return store.state(pith)

    def catch_up() -> bool:
        if store.tree_size() > 2:
            return False
        store.append([g.encoded(event) for event in events[2:]], g.KEYRING)
        return True

    try:
        findings = list(compare_states(store, Registry(), max_unanswered=2,  # type: ignore[arg-type]
                                       catch_up=catch_up))  # fmt: skip
    finally:
        store.close()
    assert [f.kind for f in findings] == ["state_unanswered"] * 2 + ["state_not_checked"]
    assert findings[-1].doc["first_pith_number"] == later[4]
    assert findings[-1].doc["count"] == 1


def test_a_checkpoint_unanswered_in_a_catch_up_spares_no_other_pith(tmp_path: Path) -> None:
    """A state that differs brings the mirror up to the registry's checkpoint of now. When
    that checkpoint could not be fetched (mirror.fetch), the audit ended with the error:
    the differing state was not named, no other pith was compared, and no summary came, so
    a registry that served a lie and then failed one request was spared the rest. The pith
    is now ``state_not_checked`` (no evidence: the registry may have grown) and the audit
    goes on."""
    from pithlog.errors import MirrorError
    from pithlog.net.audit import compare_states

    events = sorted((g.record(f"2602.{i:05d}") for i in range(3)),
                    key=lambda event: event["pith_number"])  # fmt: skip
    piths = [event["pith_number"] for event in events]
    store = Store.open(tmp_path / "auditor")
    store.append([g.encoded(event) for event in events], g.KEYRING)
    asked: list[str] = []

    class Registry:  # the first state a lie, the third a mismatch too
        def get(self, path: str, cap: int, too_long: type[Exception],
                most: float | None = None) -> bytes | None:  # fmt: skip
            pith = path.removeprefix("state/")
            asked.append(pith)
            return b"{}" if pith in (piths[0], piths[2]) else store.state(pith)

    calls: list[int] = []

    def catch_up() -> bool:
        calls.append(1)
        if len(calls) == 1:
            raise MirrorError("fetch", "https://registry.example/checkpoint answered 503")
        return False

    try:
        findings = list(compare_states(store, Registry(), catch_up=catch_up))  # type: ignore[arg-type]
        def split() -> bool:
            raise MirrorError("split_view", "split")

        with pytest.raises(MirrorError, match="split"):  # what does not verify still ends it
            list(compare_states(store, Registry(), catch_up=split))  # type: ignore[arg-type]
    finally:
        store.close()
    assert asked[:3] == piths
    assert [(f.kind, f.doc.get("pith_number", f.doc.get("first_pith_number")))
            for f in findings] == [("state_not_checked", piths[0]),
                                   ("state_mismatch", piths[2])]  # fmt: skip
    assert findings[0].doc["count"] == 1 and "503" in findings[0].doc["problem"]


def test_a_catch_up_stopped_midway_leaves_no_state_named_for_its_log(tmp_path: Path) -> None:
    """A catch-up whose pass accepted the registry's newer checkpoint and then could not
    fetch its leaves leaves the mirror behind that checkpoint. The next state that differs
    for that reason brought the mirror up to it (the pass resumed), but no newer checkpoint
    was accepted, so the difference was taken to be served at the size compared: an
    honest registry was named (state_mismatch) for a pith compared with the shorter tree.
    The tree having grown, the pith is now compared again."""
    files, piths = growing_files(tmp_path)
    first, second = sorted((piths["still"], piths["grown"]))
    where: dict[str, Any] = {"grown": False, "failed": 0}

    async def forward(request: Request) -> Response:
        path = request.url.path
        if path == f"/state/{first}" and not where["grown"]:
            where["grown"] = True  # both piths get an event before the first is served
            with Store.open(files.store) as registry:
                for number, pith in enumerate((first, second)):
                    (result,) = registry.append([g.encoded(g.correction(
                        pith, 10 + number, f"notice {number}"))], g.KEYRING)  # fmt: skip
                    assert result.status == "stored", result
        elif (cut := first_bundle_cut(path, where)) is not None:
            return cut
        answer = await upstream(where["upstream"] + path)
        return Response(answer.content, answer.status_code,
                        media_type=answer.headers.get("content-type"))  # fmt: skip

    status, lines, err = audit_through(forward, where, files, tmp_path)
    assert where["failed"] == 1
    assert [(f["finding"], f.get("first_pith_number")) for f in lines[:-1]] == [
        ("state_not_checked", first)], (lines, err)  # fmt: skip
    assert lines[-1]["state_mismatch"] == 0
    assert status == 1  # a pith not checked is no pass


def test_equivocations_are_proven_after_a_catch_up_that_stopped_midway(tmp_path: Path) -> None:
    """A catch-up that accepted the registry's newer checkpoint and then could not fetch
    its leaves left the mirror's tree shorter than the checkpoint it accepted; the
    equivocations were then proven against that checkpoint, whose tree the store does not
    hold: the audit ended with store.tree_size after its findings, no proof and no
    summary. They are proven against the last checkpoint the mirror holds whole."""
    from pithlog.protocol.keys import load_keyring

    files = case_files(tmp_path, "equivocations")
    keyring = load_keyring(files.keyring.read_bytes())
    where: dict[str, Any] = {"grown": False, "failed": 0}

    async def forward(request: Request) -> Response:
        path = request.url.path
        answer = await upstream(where["upstream"] + path)
        body = answer.content
        if path.startswith("/state/") and not where["grown"]:
            where["grown"] = True  # the log grows, and this state is a lie
            grow(files, keyring)
            body = altered(body)
        elif (cut := first_bundle_cut(path, where)) is not None:
            return cut
        return Response(body, answer.status_code,
                        media_type=answer.headers.get("content-type"))  # fmt: skip

    status, lines, err = audit_through(forward, where, files, tmp_path)
    assert where["failed"] == 1
    assert status == 1, err
    assert lines[-1].get("summary"), (lines, err)
    _equivocations_proven(lines, files)


def test_an_equivocation_past_the_tree_held_whole_is_found_without_a_proof(
    tmp_path: Path,
) -> None:
    """Leaves a stopped catch-up committed lie past the checkpoint the mirror holds whole:
    an equivocation among them cannot be proven against it, and raised proof.not_found,
    ending the audit without its summary. It is found, with no proof and why."""
    from pithlog.net.audit import prove_equivocations
    from pithlog.protocol.keys import load_keyring
    from pithlog.transparency.checkpoint import Checkpoint, sign_checkpoint

    files = case_files(tmp_path, "equivocations")
    keyring = load_keyring(files.keyring.read_bytes())
    with Store.open(files.store) as store:
        _, root = store.tree_root(1)
        note = sign_checkpoint(Checkpoint(ORIGIN, 1, root), test_key("registry"))
        findings = list(prove_equivocations(store, keyring, note, tmp_path))
    assert findings and all(f.kind == "equivocation" for f in findings)
    assert all(f.doc["proof"] is None for f in findings)
    assert all("holds whole" in f.doc["proof_problem"] for f in findings)


def test_a_pith_that_first_comes_in_a_catch_up_is_compared(
    tmp_path: Path, growing_proxy: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A catch-up brings the log's newer leaves, and with them piths the walk had passed
    (sorted before the pith that called for it): they were never compared, so a registry
    that lied about one passed (exit 0) with a summary whose ``latest_size`` held it. They
    are now compared once the walk is done, and the summary's ``compared_size`` is the
    last tree's; past CAUGHT_UP_PITHS it is the first tree's, with no finding."""
    from pithlog.net import audit as audit_module

    monkeypatch.setattr(audit_module, "LEAVES_BYTES", 1)  # the leaves read one at a time
    files, piths = growing_files(tmp_path)
    last = max(piths["still"], piths["grown"])
    new = next(event for event in (g.record(f"2603.{i:05d}") for i in range(200))
               if event["pith_number"] < last)  # fmt: skip
    with serving(files) as server:
        with Store.open(files.store, readonly=True) as registry:
            size_before = registry.tree_size()
        growing_proxy.update(upstream=server.url, store=files.store, grow={last: 1},
                             also=[g.encoded(new)], lie=new["pith_number"])  # fmt: skip
        status, lines, err = audit(growing_proxy["url"], files, tmp_path / "auditor",
                                   tmp_path / "ev")  # fmt: skip
        assert growing_proxy["appended"] == 2
        assert status == 1, (lines, err)
        assert [(f["finding"], f["pith_number"]) for f in lines[:-1]] == [
            ("state_mismatch", new["pith_number"])]  # fmt: skip
        assert lines[-1]["size"] == size_before
        assert lines[-1]["latest_size"] == lines[-1]["compared_size"] == size_before + 2
        # the same growth from an honest registry passes, its last tree compared
        growing_proxy.update(grow={last: 1}, lie=None,
                             also=[g.encoded(g.record("2604.00001"))])  # fmt: skip
        status, lines, err = audit(growing_proxy["url"], files, tmp_path / "auditor2",
                                   tmp_path / "ev2")  # fmt: skip
        assert status == 0, (lines, err)
        assert lines[-1]["latest_size"] == lines[-1]["compared_size"] == size_before + 4
        # past the bound the piths a catch-up touched are not followed: the claim stays
        # at the first tree, and that is no finding
        monkeypatch.setattr(audit_module, "CAUGHT_UP_PITHS", 1)
        growing_proxy.update(grow={last: 1}, also=[g.encoded(g.record("2604.00002"))])
        status, lines, err = audit(growing_proxy["url"], files, tmp_path / "auditor3",
                                   tmp_path / "ev3")  # fmt: skip
    assert status == 0, (lines, err)
    assert lines[-1]["compared_size"] == lines[-1]["size"] == size_before + 4
    assert lines[-1]["latest_size"] == size_before + 6


def test_a_stale_checkpoint_after_a_catch_up_stopped_midway_leaves_the_proofs_held_whole(
    tmp_path: Path,
) -> None:
    """A catch-up that stopped midway had accepted the registry's newer checkpoint; the
    next one was served an older checkpoint (a cache's) and brought nothing. The proofs were
    then made against the checkpoint accepted, whose tree the store does not hold: the audit
    ended with store.tree_size after its findings, no proof and no summary. The checkpoint
    the proofs are against is one whose tree the mirror holds whole."""
    from pithlog.protocol.keys import load_keyring

    files = case_files(tmp_path, "equivocations")
    keyring = load_keyring(files.keyring.read_bytes())
    where: dict[str, Any] = {"grown": False, "failed": 0, "lies": 0, "stale": None}

    async def forward(request: Request) -> Response:
        path = request.url.path
        answer = await upstream(where["upstream"] + path)
        body = answer.content
        if path == "/checkpoint" and where["stale"] is None:
            where["stale"] = body  # the checkpoint of before the log grew, as a cache keeps it
        elif path == "/checkpoint" and where["failed"]:
            body = where["stale"]  # after the stopped pass: the cache's older checkpoint
        if path.startswith("/state/") and answer.status_code == 200 and where["lies"] < 2:
            where["lies"] += 1  # two states lie: each calls for a catch-up
            if not where["grown"]:
                where["grown"] = True
                grow(files, keyring)
            body = altered(body)
        elif (cut := first_bundle_cut(path, where)) is not None:
            return cut
        return Response(body, answer.status_code,
                        media_type=answer.headers.get("content-type"))  # fmt: skip

    status, lines, err = audit_through(forward, where, files, tmp_path)
    assert where["failed"] == 1 and where["lies"] == 2
    assert status == 1, err
    assert lines[-1].get("summary"), (lines, err)
    assert lines[-1]["state_mismatch"] == 1  # the second lie, served at the size compared
    _equivocations_proven(lines, files)


def test_a_pith_whose_catch_up_the_time_cut_is_counted_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A state that differs brings a catch-up, and the piths its leaves touch are owed a
    comparison after it: the pith's own among them. When --max-time ran out before the
    pith was compared again, its state_not_checked line counted it, and then once more
    among the piths owed: 3 piths, a count of 4."""
    from pithlog.net import audit
    from pithlog.net.audit import compare_states

    events = sorted((g.record(f"2604.{i:05d}") for i in range(3)),
                    key=lambda event: event["pith_number"])  # fmt: skip
    piths = [event["pith_number"] for event in events]
    store = Store.open(tmp_path / "auditor")
    store.append([g.encoded(event) for event in events], g.KEYRING)
    clock = [0.0]
    monkeypatch.setattr(audit.time, "monotonic", lambda: clock[0])

    class Registry:  # the first state a lie
        def get(self, path: str, cap: int, too_long: type[Exception],
                most: float | None = None) -> bytes | None:  # fmt: skip
            pith = path.removeprefix("state/")
            return b"{}" if pith == piths[0] else store.state(pith)

    def catch_up() -> bool:  # the first pith's log grows, and the time runs out meanwhile
        store.append([g.encoded(g.correction(piths[0], 500, "late notice"))], g.KEYRING)
        clock[0] = 10.0
        return True

    try:
        findings = list(compare_states(store, Registry(), catch_up=catch_up,  # type: ignore[arg-type]
                                       ends=5.0))  # fmt: skip
    finally:
        store.close()
    assert [f.kind for f in findings] == ["state_not_checked"]
    assert findings[0].doc["first_pith_number"] == piths[0]
    assert findings[0].doc["count"] == len(piths)
