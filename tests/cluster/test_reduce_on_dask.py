"""``pithlog reduce --dask`` on a LocalCluster of two worker processes (one thread each),
started once for the module: the same bytes as ``pithlog reduce`` over the concatenation
of the shards, whatever the shards, the ranges and the workers; a worker killed mid-job
changes nothing; a worker running another pithlog is refused; ``--compare`` reports only
differences."""

from __future__ import annotations

import contextlib
import faulthandler
import io
import json
import logging
import multiprocessing
import os
import random
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cloudpickle
import dask
import pytest
from dask.utils import key_split
from distributed import Client, LocalCluster
from distributed.client import FutureCancelledError
from distributed.comm.core import CommClosedError
from distributed.diagnostics.plugin import WorkerPlugin

from pithlog.cli import main
from pithlog.distributed import connect
from pithlog.distributed.graph import LOCAL_CONFIG, job_errors, local_config, start
from pithlog.errors import DaskError, UsageError
from pithlog.protocol.canonical import jcs
from pithlog.protocol.state import digest_document
from pithlog.testing import test_keyring_entries

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "store"))
import eventgen  # noqa: E402 - the store tests' signed events

CASES = sorted(p for p in (ROOT / "vectors" / "cases").iterdir() if p.is_dir())

STALL = 120
"""Seconds a test may take before the run is stopped with every thread's traceback: a
cluster that hangs must not hang the suite."""

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import tests


@pytest.fixture(autouse=True)
def bounded() -> Iterator[None]:
    faulthandler.dump_traceback_later(STALL, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture(scope="module")
def cluster() -> Iterator[Client]:
    faulthandler.dump_traceback_later(STALL, exit=True)
    with (
        dask.config.set({"distributed.worker.profile.enabled": False}),
        LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                     dashboard_address=":0", silence_logs=logging.ERROR) as local,
        Client(local) as client,
    ):  # fmt: skip
        faulthandler.cancel_dump_traceback_later()
        yield client


def run(argv: list[str]) -> tuple[int, bytes, str]:
    out, err = io.BytesIO(), io.StringIO()
    status = main(argv, stdout=out, stderr=err)
    return status, out.getvalue(), err.getvalue()


def lines(data: bytes) -> list[bytes]:
    return [line for line in data.split(b"\n") if line.strip(b" \t\r")]


def shard(
    tmp: Path, events: list[bytes], count: int, rng: random.Random, apart: list[list[bytes]]
) -> list[str]:
    """``events`` dealt at random into ``count`` shuffled shard files; each group of
    ``apart`` (copies of one event_id) spread over different shards."""
    shards: list[list[bytes]] = [[] for _ in range(count)]
    for line in events:
        shards[rng.randrange(count)].append(line)
    for group in apart:
        first = rng.randrange(count)
        for n, line in enumerate(group):
            shards[(first + n) % count].append(line)
    paths = []
    for n, held in enumerate(shards):
        rng.shuffle(held)
        path = tmp / f"shard-{n:02d}.jsonl"
        path.write_bytes(b"".join(line + b"\n" for line in held))
        paths.append(str(path))
    return paths


def reference(tmp: Path, keyring: Path, paths: list[str]) -> tuple[int, bytes, str]:
    """``pithlog reduce`` over the shards concatenated into one file."""
    whole = tmp / "concatenated.jsonl"
    whole.write_bytes(b"".join(Path(p).read_bytes() for p in paths))
    return run(["reduce", "--keyring", str(keyring), str(whole)])


def pending_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("pending: ")]


def summary(err: str) -> str:
    return [line for line in err.splitlines() if line.startswith("reduce: ")][-1]


def on_dask(cluster: Client, keyring: Path, paths: list[str], *more: str) -> list[str]:
    return ["reduce", "--keyring", str(keyring), "--dask", cluster.scheduler.address,
            *more, *paths]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_conformance_vectors_give_the_same_bytes(
    cluster: Client, case: Path, tmp_path: Path
) -> None:
    events = lines((case / "events.jsonl").read_bytes())
    rng = random.Random(case.name)
    paths = shard(tmp_path, events, 3, rng, [])
    status, out, err = reference(tmp_path, case / "keyring.json", paths)
    # ranges that cut lines (each is read by the range it starts in); few of them, as each
    # costs the task shuffles a task per other range
    size = str(max(700, sum(Path(p).stat().st_size for p in paths) // 4))
    got = run(on_dask(cluster, case / "keyring.json", paths, "--blocksize", size))
    assert got[:2] == (status, out)
    assert out == b"".join(line + b"\n" for line in lines((case / "expected.jsonl").read_bytes()))
    assert pending_lines(got[2]) == pending_lines(err)
    assert summary(got[2]) == summary(err)


def moved(event: dict[str, Any], pith: str) -> dict[str, Any]:
    """A forged copy: the same event_id claiming another pith (check 3 fails)."""
    return {**event, "pith_number": pith}


def generated(rng: random.Random) -> tuple[list[bytes], list[list[bytes]]]:
    """A mixed log, and groups of copies of one event_id to spread across shards: a valid
    copy with forged ones under other piths; only forged copies, under two other piths
    (step 0's choice decides the pith); a second valid signature; a bad signature."""
    events = eventgen.mixed_events(rng, piths=10, per_pith=5)
    piths = sorted({e["pith_number"] for e in events})
    keep: list[dict[str, Any]] = []
    groups: list[list[bytes]] = []
    for n, event in enumerate(events):
        others = [p for p in piths if p != event["pith_number"]]
        a, b = rng.sample(others, 2)
        if n % 9 == 1:  # the genuine copy, and a forgery in another pith
            groups.append([jcs(event), jcs(moved(event, a)), jcs(event)])
        elif n % 9 == 4:  # only forgeries: the pith is the preferred forgery's
            groups.append([jcs(moved(event, a)), jcs(moved(event, b))])
        elif n % 9 == 6:  # forged signature here, a copy in another pith
            groups.append([jcs(eventgen.forged(event)), jcs(moved(event, a))])
        elif n == 7:  # two valid signatures of one body
            second = eventgen.resigned(event, "author", b"another nonce")
            groups.append([jcs(event), jcs(second)])
        else:
            keep.append(event)
    return [jcs(e) for e in keep], groups


def test_copies_across_shards_and_piths_give_the_same_bytes(
    cluster: Client, tmp_path: Path
) -> None:
    rng = random.Random(22)
    events, groups = generated(rng)
    keyring = tmp_path / "keyring.json"
    keyring.write_bytes(jcs({"keyring_version": "1", "keys": test_keyring_entries()}))
    paths = shard(tmp_path, [*events, b"not json", b'{"event_id": 1}'], 4, rng, groups)
    status, out, err = reference(tmp_path, keyring, paths)
    assert status == 2 and len(lines(out)) > 5  # the refused lines, and states
    for blocksize in ("2500", "100000"):  # ranges inside the shards, and whole shards
        got = run(on_dask(cluster, keyring, paths, "--blocksize", blocksize))
        assert got[:2] == (status, out)
        assert pending_lines(got[2]) == pending_lines(err)
        assert summary(got[2]) == summary(err)
        # each refused line is named by its shard and its line in that shard
        refused = [line for line in got[2].splitlines() if line.startswith("pithlog: ")]
        assert len(refused) == 2
        for line in refused:
            name, number = line.split(": ")[1], int(line.split(": ")[2].split()[1])
            held = Path(name).read_bytes().split(b"\n")[number - 1]
            assert held in (b"not json", b'{"event_id": 1}')
    # the same shards in another order: the same bytes
    got = run(on_dask(cluster, keyring, paths[::-1]))
    assert got[:2] == (status, out)


def test_a_keyring_on_stdin_reaches_the_workers(
    cluster: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    case = ROOT / "vectors" / "cases" / "equivocations"
    argv = ["reduce", "--keyring", "-", str(case / "events.jsonl")]
    results = []
    for more in ([], ["--dask", cluster.scheduler.address]):
        keyring = io.BytesIO((case / "keyring.json").read_bytes())
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(keyring))
        results.append(run([*argv[:3], *more, *argv[3:]]))
    assert results[0][:2] == (0, (case / "expected.jsonl").read_bytes())
    assert results[1][:2] == results[0][:2]


def test_refused_lines_past_a_ranges_list_are_counted(cluster: Client, tmp_path: Path) -> None:
    """A range names its first refused lines one by one and the rest as one line of stderr
    (or of --compare's report); the summary counts them all, as reduce's does."""
    case = ROOT / "vectors" / "cases" / "equivocations"
    junk = 1500
    events = tmp_path / "events.jsonl"
    events.write_bytes(b"x\n" * junk + (case / "events.jsonl").read_bytes())
    keyring = case / "keyring.json"
    status, out, err = run(["reduce", "--keyring", str(keyring), str(events)])
    got = run(on_dask(cluster, keyring, [str(events)]))
    assert got[:2] == (status, out) == (2, (case / "expected.jsonl").read_bytes())
    assert summary(got[2]) == summary(err) and f" {junk} lines refused" in summary(err)
    said = [line for line in got[2].splitlines() if line.startswith("pithlog: ")]
    assert len(said) == 1001
    assert said[999].endswith(": line 1000: " + err.splitlines()[999].split(": ", 2)[2])
    assert said[1000].startswith(f"pithlog: {events}: lines 1001 to {junk}: 500 lines refused")
    published = tmp_path / "published.jsonl"
    published.write_bytes(b"x\n" * junk + out)
    status, report, err = run(on_dask(cluster, keyring, [str(events)], "--compare",
                                      str(published)))  # fmt: skip
    listed = [json.loads(line) for line in lines(report)]
    assert status == 1 and len(listed) == 1001 and f"{junk} differences" in err
    assert listed[1000]["line"] == 1001 and listed[1000]["last_line"] == junk
    assert listed[1000]["count"] == 500


def test_a_published_file_whose_name_is_not_utf8_is_reported(
    cluster: Client, tmp_path: Path
) -> None:
    """A glob may match a name the system could not decode: the report names its bytes, as
    the CLI names such an argument, instead of failing to write it."""
    case = ROOT / "vectors" / "cases" / "equivocations"
    (tmp_path / os.fsdecode(b"p\xff.jsonl")).write_bytes(b"x\n")
    status, report, err = run(on_dask(cluster, case / "keyring.json",
                                      [str(case / "events.jsonl")], "--compare",
                                      str(tmp_path / "p*.jsonl")))  # fmt: skip
    listed = [json.loads(line) for line in lines(report)]
    assert status == 1 and "Traceback" not in err
    assert listed[0]["status"] == "unreadable" and listed[0]["line"] == 1
    assert listed[0]["source"] == f"{tmp_path}/p\\xff.jsonl"


def test_the_keyring_is_sent_once_not_with_every_range(
    cluster: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The keyring (up to 8 MiB) went inline in every range's task: a worker held a copy
    per range queued on it (6.5 MB x 183 ranges: 1.29 GB), and the scheduler sent one
    with each task. It is one task of the graph, on which the ranges depend."""
    case = ROOT / "vectors" / "cases" / "citations-2304.11277"
    keyring = (case / "keyring.json").read_bytes()
    submitted: list[Any] = []
    compute = cluster.compute

    def recorded(wanted: Any, **kwargs: Any) -> Any:
        submitted.extend(wanted)
        return compute(wanted, **kwargs)

    monkeypatch.setattr(cluster, "compute", recorded)
    with job_errors():
        job = start(cluster, [str(case / "events.jsonl")], keyring, 20_000)
        job.wait_reports()
        got = b"".join(result + b"\n" for _, result in job.results()
                       if isinstance(result, bytes))  # fmt: skip
    assert got == (case / "expected.jsonl").read_bytes()
    graph = {key: task for wanted in submitted for key, task in wanted.dask.items()}
    ranges = [key for key in graph if str(key_split(key)) == "check_block"]
    assert len(ranges) > 10
    holding = [key for key, task in graph.items() if keyring in cloudpickle.dumps(task)]
    assert len(holding) == 1


class KillOnce(WorkerPlugin):
    """Kills the worker process (SIGKILL) the first time it starts a task of ``prefix``:
    a worker lost mid-job, with the shuffled data it held."""

    name = "pithlog-kill-once"

    def __init__(self, marker: str, prefix: str) -> None:
        self.marker = marker
        self.prefix = prefix

    def transition(self, key: Any, start: str, finish: str, **kwargs: Any) -> None:
        name = key[0] if isinstance(key, tuple) else key
        if finish == "executing" and str(name).startswith(self.prefix):
            try:
                os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                return
            os.kill(os.getpid(), signal.SIGKILL)


def test_a_worker_killed_mid_job_changes_nothing(cluster: Client, tmp_path: Path) -> None:
    rng = random.Random(7)
    events, groups = generated(rng)
    keyring = tmp_path / "keyring.json"
    keyring.write_bytes(jcs({"keyring_version": "1", "keys": test_keyring_entries()}))
    paths = shard(tmp_path, events, 3, rng, groups)
    expected = reference(tmp_path, keyring, paths)
    marker = tmp_path / "killed"
    cluster.register_plugin(KillOnce(str(marker), "reduce_range"))
    try:
        got = run(on_dask(cluster, keyring, paths, "--blocksize", "2000"))
    finally:
        cluster.unregister_worker_plugin(KillOnce.name)
        cluster.wait_for_workers(2, timeout=60)  # the nanny starts a new one
    assert marker.exists()  # a worker was killed while it reduced a range
    assert got[:2] == expected[:2]
    assert summary(got[2]) == summary(expected[2])


class KillAlways(KillOnce):
    """Kills its worker process each time it starts a task of ``prefix``: a task that runs
    out of memory wherever it goes."""

    name = "pithlog-kill-always"

    def transition(self, key: Any, start: str, finish: str, **kwargs: Any) -> None:
        name = key[0] if isinstance(key, tuple) else key
        if finish == "executing" and str(name).startswith(self.prefix):
            os.kill(os.getpid(), signal.SIGKILL)


def set_allowed_failures(dask_scheduler: Any, count: int) -> int:
    """On the scheduler: the deaths of workers a task may cause before it is given up."""
    before: int = dask_scheduler.allowed_failures
    dask_scheduler.allowed_failures = count
    return before


def test_a_task_that_kills_every_worker_it_runs_on_is_one_error(cluster: Client) -> None:
    case = CASES[0]
    before = cluster.run_on_scheduler(set_allowed_failures, count=0)
    cluster.register_plugin(KillAlways("", "reduce_range"))
    try:
        status, out, err = run(on_dask(cluster, case / "keyring.json",
                                       [str(case / "events.jsonl")]))  # fmt: skip
    finally:
        cluster.unregister_worker_plugin(KillAlways.name)
        cluster.run_on_scheduler(set_allowed_failures, count=before)
        cluster.wait_for_workers(2, timeout=60)  # the nannies start new ones
    assert (status, out) == (2, b"")
    assert err.count("\n") == 1 and "[dask.worker_lost]" in err and "reduce_range" in err


@pytest.mark.parametrize("lost", [
    FutureCancelledError("reduce_range-1", "scheduler-connection-lost",
                         "Client lost the connection to the scheduler."),
    CommClosedError("in <TCP (closed) ConnectionPool.gather local=tcp://127.0.0.1:1>"),
])  # fmt: skip
def test_a_scheduler_lost_mid_job_is_one_error(lost: Exception) -> None:
    with pytest.raises(DaskError) as caught, job_errors():
        raise lost
    assert caught.value.code == "dask.scheduler" and "\n" not in caught.value.describe()


def set_version(version: str) -> None:
    """On a worker: the version its tasks report (imported here, as a worker that has run
    no task yet has not imported them)."""
    import pithlog.distributed.tasks as tasks

    tasks.__version__ = version  # type: ignore[attr-defined]


def test_a_worker_running_another_pithlog_is_refused(cluster: Client) -> None:
    case = CASES[0]
    worker = sorted(cluster.scheduler_info()["workers"])[0]
    cluster.run(set_version, "0.0.0-other", workers=[worker])
    try:
        status, out, err = run(on_dask(cluster, case / "keyring.json",
                                       [str(case / "events.jsonl")]))  # fmt: skip
    finally:
        cluster.run(set_version, __import__("pithlog").__version__, workers=[worker])
    assert (status, out) == (2, b"")
    assert err.count("\n") == 1 and "[dask.version]" in err
    assert worker in err and "0.0.0-other" in err


def test_without_the_extra_dask_fails_naming_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """pithlog installed without ``pithlog[dask]``: simulated by making ``import dask``
    fail in this process."""
    for name in list(sys.modules):
        if name.split(".")[0] in ("dask", "distributed") or name.startswith("pithlog.distrib"):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "dask", None)
    case = CASES[0]
    argv = ["reduce", "--keyring", str(case / "keyring.json"), str(case / "events.jsonl")]
    status, out, err = run([*argv[:3], "--dask", "local:1", *argv[3:]])
    assert (status, out) == (2, b"")
    assert err.count("\n") == 1 and "[dask.extra]" in err and "pithlog[dask]" in err
    assert run(argv)[:2] == (0, (case / "expected.jsonl").read_bytes())  # the rest works


def test_an_unreachable_scheduler_is_one_error() -> None:
    with pytest.raises(DaskError) as caught, connect("tcp://127.0.0.1:9", timeout=1):
        pass
    assert caught.value.code == "dask.scheduler"


@contextlib.contextmanager
def not_a_scheduler(answer: bytes | None) -> Iterator[str]:
    """The address of a TCP server on 127.0.0.1 that is not Dask's: it accepts, and sends
    ``answer`` (``None``: nothing, holding the connection open until the test ends)."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            held.append(conn)
            if answer is not None:
                conn.sendall(answer)
                conn.shutdown(socket.SHUT_WR)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"tcp://127.0.0.1:{server.getsockname()[1]}"
    finally:
        done.set()
        server.close()
        for conn in held:
            conn.close()


def test_an_address_that_never_answers_is_one_error() -> None:
    """A server that accepts the connection and says nothing (a port forwarded to nothing,
    a stopped process's socket): Dask's handshake waited for it forever."""
    with (
        not_a_scheduler(None) as address,
        pytest.raises(DaskError) as caught,
        connect(address, timeout=1),
    ):
        pass
    assert caught.value.code == "dask.scheduler" and "\n" not in caught.value.describe()
    assert "did not answer" in caught.value.message


@pytest.mark.parametrize("answer", [
    b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n",  # a web server
    b"SSH-2.0-OpenSSH_9.6\r\n",
    b"\xff" * 64,
    b"\x01\x00\x00\x00\x00\x00\x00\x00\x01",  # a frame cut short
    b"",  # closed at once
], ids=["http", "ssh", "binary", "short-frame", "closed"])  # fmt: skip
def test_an_address_that_is_not_a_dask_scheduler_is_one_error(answer: bytes) -> None:
    """Dask read the first bytes of any other server as a frame's length: a traceback
    (MemoryError, OverflowError, struct.error), exit 1."""
    with not_a_scheduler(answer) as address:
        status, out, err = run(["reduce", "--keyring", str(CASES[0] / "keyring.json"),
                                "--dask", address, str(CASES[0] / "events.jsonl")])  # fmt: skip
    assert (status, out) == (2, b"")
    assert err.count("\n") == 1 and "[dask.scheduler]" in err and address in err


def test_a_workers_address_is_not_taken_for_its_schedulers(cluster: Client) -> None:
    """A worker answers Dask's protocol, but is not a scheduler: that was refused with an
    error about the TLS settings of a tls:// scheduler."""
    worker = sorted(cluster.scheduler_info()["workers"])[0]
    with pytest.raises(DaskError) as caught, connect(worker, timeout=5):
        pass
    assert caught.value.code == "dask.scheduler" and "tls" not in caught.value.message
    assert "worker" in caught.value.message and cluster.scheduler.address in caught.value.message


def test_a_tls_scheduler_without_tls_settings_is_one_error() -> None:
    """Dask's tls:// comm raises TypeError without certificates in its configuration: that
    went through as a traceback."""
    with pytest.raises(DaskError) as caught, connect("tls://127.0.0.1:9", timeout=1):
        pass
    assert caught.value.code == "dask.scheduler"
    assert "distributed.comm.tls" in caught.value.message


def test_local_starts_and_stops_its_own_cluster(tmp_path: Path) -> None:
    case = ROOT / "vectors" / "cases" / "step0-copies"
    argv = ["reduce", "--keyring", str(case / "keyring.json"), str(case / "events.jsonl")]
    got = run([*argv[:3], "--dask", "local:1", *argv[3:]])
    assert got[:2] == run(argv)[:2]


@pytest.mark.parametrize("workers", ["0", "4097", "99999999999999999999", "9" * 5000])
def test_local_takes_from_1_to_4096_workers(workers: str) -> None:
    """Each is a process, and Dask lists them all before it starts one: a count beyond any
    machine is refused before anything is started."""
    with pytest.raises(UsageError) as caught, connect(f"local:{workers}"):
        pass
    assert caught.value.code == "usage.arguments" and "1 to 4096" in caught.value.message


def job_settings() -> dict[str, Any]:
    """On a worker: the settings a local cluster is started with, as the worker sees them."""
    return {name: dask.config.get(name) for name in LOCAL_CONFIG}


def preloaded() -> bool:
    """On a worker that has run no task: whether the tasks' module came with the fork."""
    return "pithlog.distributed.tasks" in sys.modules


def test_a_local_cluster_forks_its_workers_with_the_job_settings() -> None:
    """``local:N`` workers run without the profiler and the frequent monitors, and come
    forked from a process that imported Dask and the tasks (not from this process, and not
    each importing them itself)."""
    with connect("local:2") as client:
        settings = client.run(job_settings)
        parents = client.run(os.getppid)
        imported = client.run(preloaded)
    assert len(settings) == 2 and all(found == LOCAL_CONFIG for found in settings.values())
    assert LOCAL_CONFIG["distributed.worker.profile.enabled"] is False
    assert os.getpid() not in parents.values() and all(imported.values())


def test_local_starts_the_fork_server_before_importing_dask(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--dask local`` starts the fork server first, so that its imports overlap the
    command's own import of Dask; a scheduler elsewhere needs none."""
    import pithlog.cli.on_dask as on_dask

    calls: list[str] = []

    def load() -> Any:
        calls.append("dask")
        raise DaskError("extra", "stopped here")

    monkeypatch.setattr(on_dask, "start_fork_server", lambda: calls.append("fork server"))
    monkeypatch.setattr(on_dask, "load_distributed", load)
    case = CASES[0]
    argv = ["reduce", "--keyring", str(case / "keyring.json"), str(case / "events.jsonl")]
    for address, expected in (("local:2", ["fork server", "dask"]), ("local", ["fork server",
                              "dask"]), ("tcp://127.0.0.1:9", ["dask"])):  # fmt: skip
        calls.clear()
        status, _, err = run([*argv[:3], "--dask", address, *argv[3:]])
        assert (status, calls) == (2, expected) and "stopped here" in err


def test_without_a_fork_server_local_workers_are_spawned(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the platform has no fork server (Windows), ``local:N`` starts its workers as
    Dask does by default, with the rest of its settings."""
    monkeypatch.setattr(multiprocessing, "get_all_start_methods", lambda: ["spawn"])
    settings = local_config()
    assert settings.pop("distributed.worker.multiprocessing-method") == "spawn"
    assert settings.items() < LOCAL_CONFIG.items()
    monkeypatch.undo()
    assert local_config() == LOCAL_CONFIG


def state_of(line: bytes) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(line)
    return value


def test_compare_reports_only_the_differences(cluster: Client, tmp_path: Path) -> None:
    rng = random.Random(3)
    events, groups = generated(rng)
    keyring = tmp_path / "keyring.json"
    keyring.write_bytes(jcs({"keyring_version": "1", "keys": test_keyring_entries()}))
    paths = shard(tmp_path, events, 2, rng, groups)
    status, out, err = reference(tmp_path, keyring, paths)
    states = lines(out)
    assert len(states) >= 5
    pending = [line.split(": ")[1] for line in pending_lines(err)]
    assert pending
    published = tmp_path / "published.jsonl"

    def compare() -> tuple[int, list[dict[str, Any]], str]:
        got = run(on_dask(cluster, keyring, paths, "--compare", str(published)))
        return got[0], [json.loads(line) for line in lines(got[1])], got[2]

    # every state, in another serialization (JCS) and another order: nothing to report
    published.write_bytes(b"".join(jcs(state_of(s)) + b"\n" for s in states[::-1]))
    assert compare()[:2] == (0, [])

    changed = state_of(states[0])
    changed["event_count"] += 1
    fake = {**state_of(states[2]), "pith_number": pending[0]}
    published.write_bytes(b"".join([
        jcs(changed) + b"\n",                 # line 1: differs
        states[2] + b"\n", states[2] + b"\n",  # lines 2-3: the second is a duplicate
        b"{not json\n",                       # line 4: unreadable
        jcs(fake) + b"\n",                    # line 5: a state for a pending pith
        *(s + b"\n" for s in states[3:]),     # states[1] is missing
    ]))  # fmt: skip
    status, report, err = compare()
    assert status == 1
    found = {(r.get("pith_number"), r["status"], r.get("line")) for r in report}
    piths = [state_of(s)["pith_number"] for s in states]
    assert found == {
        (None, "unreadable", 4),
        (piths[0], "differs", 1),
        (piths[1], "missing", None),
        (piths[2], "duplicate", 3),
        (pending[0], "unexpected", 5),
    }
    differs = next(r for r in report if r["status"] == "differs")
    assert differs["expected_sha256"] == state_of(states[0])["state_sha256"]
    # edited without its state_sha256 updated: it claims the expected hash, but its own
    # recomputed hash is another
    assert differs["claimed_sha256"] == differs["expected_sha256"]
    assert differs["published_sha256"] == digest_document(changed) != differs["expected_sha256"]
    assert differs["source"] == str(published)
    assert "5 differences" in err


def invented_pith(n: int) -> str:
    """A pith number below every pith of the log (year 0000)."""
    return "pith:0000:" + f"{n:026d}".translate(str.maketrans("0123456789", "ABCDEFGHIJ"))


def test_published_piths_the_log_lacks_spread_over_the_ranges(
    cluster: Client, tmp_path: Path
) -> None:
    """PUBLISHED comes from the registry being checked: piths the log does not have, all
    below its first, are cut into ranges with the log's, not all compared by the first
    range's task (which a file of millions of them would kill, on every worker)."""
    rng = random.Random(11)
    events, groups = generated(rng)
    keyring = tmp_path / "keyring.json"
    keyring.write_bytes(jcs({"keyring_version": "1", "keys": test_keyring_entries()}))
    paths = shard(tmp_path, events, 2, rng, groups)
    invented = 3000
    published = tmp_path / "published.jsonl"
    published.write_bytes(b"".join(jcs({"pith_number": invented_pith(n)}) + b"\n"
                                   for n in range(invented)))  # fmt: skip
    with job_errors():
        run = start(cluster, paths, keyring.read_bytes(), 20_000, [str(published)])
        run.wait_reports()
        shares = []
        for future in run._outputs:
            part, _ = future.result()
            shares.append(sum(d["status"] == "unexpected" for d in part))
    assert sum(shares) == invented and len(shares) > 2
    assert max(shares) < invented / 2


def test_a_pith_published_many_times_is_one_line_with_its_count(
    cluster: Client, tmp_path: Path
) -> None:
    case = ROOT / "vectors" / "cases" / "equivocations"
    states = lines((case / "expected.jsonl").read_bytes())
    copies = 5000
    published = tmp_path / "published.jsonl"
    published.write_bytes(b"".join(s + b"\n" for s in states)
                          + b"".join(states[0] + b"\n" for _ in range(copies)))  # fmt: skip
    status, report, err = run(on_dask(cluster, case / "keyring.json",
                                      [str(case / "events.jsonl")], "--compare", str(published),
                                      "--blocksize", "100000"))  # fmt: skip
    listed = [json.loads(line) for line in lines(report)]
    (duplicate,) = listed
    assert status == 1 and duplicate["status"] == "duplicate"
    assert duplicate["line"] == len(states) + 1 and duplicate["count"] == copies
    assert f"{len(states) + copies} published states read" in err
    assert f"{len(states)} equal, {copies} differences" in err
