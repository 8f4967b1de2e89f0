"""Requests per second of `pithlog serve`, against a trivial endpoint of the same framework.

    .venv/bin/python bench/net_bench.py [--events 2000] [--seconds 3] [--connections 16]

A store of N events of the seed-shaped workload (bench/workload.py) is served by `pithlog
serve` (one worker, on 127.0.0.1); a Starlette app whose one route answers a constant runs
under uvicorn with the same settings beside it. An httpx client keeps C connections busy
for S seconds on each of: a full tile (`/tile/0/000`, 8,192 bytes), `/checkpoint`, one
state document, and the trivial route. Printed: requests/s, p50 and p99 latency, and each
rate divided by the trivial route's (the target for tiles is 0.7 or more: what pithlog
adds to the framework's own cost). Client and servers share the machine: the ratios, taken
in one run, are what to compare, not the absolute rates.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import signal
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx
import workload

from pithlog.parallel import usable_cores
from pithlog.protocol.keys import make_keyring
from pithlog.store import Store
from pithlog.testing import test_key, test_keyring_entries, write_key_file

ORIGIN = "registry.test.invalid/pith"


def trivial_server() -> None:
    """A Starlette app with constant routes, under uvicorn as `pithlog serve` runs: ``GET
    /``, and ``POST /submit``, which reads the body and answers one status line without
    storing anything (the ceiling of bench/submit_bench.py's clients and framework)."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    async def ok(request: Request) -> Response:
        return Response(b"ok\n", media_type="text/plain")

    async def submit(request: Request) -> Response:
        await request.body()
        return Response(b'{"status": "not stored"}\n', media_type="application/x-ndjson")

    from pithlog.net.server import bind

    sock = bind("127.0.0.1", 0)  # the listening socket pithlog serve makes
    print(f"serve: listening on http://127.0.0.1:{sock.getsockname()[1]}", file=sys.stderr,
          flush=True)  # fmt: skip
    routes = [Route("/", ok), Route("/healthz", ok), Route("/submit", submit, methods=["POST"])]
    config = uvicorn.Config(Starlette(routes=routes), lifespan="off", log_level="warning",
                            access_log=False, server_header=False,
                            limit_concurrency=1000)  # fmt: skip
    uvicorn.Server(config).run(sockets=[sock])


def start(argv: list[str]) -> tuple[subprocess.Popen[bytes], str]:
    """Start a server that prints ``serve: listening on URL``; the process and the URL."""
    process = subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
    assert process.stderr is not None
    line = process.stderr.readline().decode()
    if not line.startswith("serve: listening on "):
        process.kill()
        raise SystemExit(f"server did not start: {line}{process.stderr.read().decode()}")
    return process, line.split(" on ", 1)[1].strip()


def stop(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def serve(store: Path, key: Path, *options: str) -> tuple[subprocess.Popen[bytes], str]:
    """``pithlog serve`` of ``store`` on a free port of 127.0.0.1 (one worker unless
    ``options`` say ``--workers``)."""
    return start([sys.executable, "-m", "pithlog", "--store", str(store), "serve", "--listen",
                  "127.0.0.1:0", "--key", str(key), "--origin", ORIGIN, *options])  # fmt: skip


def cpu_seconds(pid: int) -> tuple[float, float]:
    """CPU seconds (user and system) of process ``pid`` and of all its descendants (a
    worker's judging helpers; with ``--workers N``, the workers and theirs), from /proc
    (zeros where there is no /proc)."""

    def own(stat: Path) -> tuple[int, float]:
        fields = stat.read_text().rsplit(")", 1)[1].split()
        ticks = int(fields[11]) + int(fields[12])  # utime, stime
        return int(fields[1]), ticks / CLOCK_TICKS

    if not Path("/proc/self/stat").exists():
        return 0.0, 0.0
    server = own(Path(f"/proc/{pid}/stat"))[1]
    children: dict[int, list[int]] = {}
    seconds: dict[int, float] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent, seconds[int(stat.parent.name)] = own(stat)
        except (OSError, IndexError, ValueError):  # ended meanwhile
            continue
        children.setdefault(parent, []).append(int(stat.parent.name))
    descendants, todo = 0.0, list(children.get(pid, []))
    while todo:
        child = todo.pop()
        descendants += seconds[child]
        todo += children.get(child, [])
    return server, descendants


CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def serve_trivial() -> tuple[subprocess.Popen[bytes], str]:
    """:func:`trivial_server` in a process of its own."""
    return start([sys.executable, str(Path(__file__).resolve()), "--trivial-server"])


@contextlib.asynccontextmanager
async def connections_to(url: str, count: int) -> AsyncIterator[list[httpx.AsyncClient]]:
    """``count`` kept-alive connections to ``url``: one httpx client each, because one
    client's pool looks at all its connections on every request (16 connections in one
    pool halved the rate the client could make), and the client shares the machine's
    cores with the server it measures."""
    async with contextlib.AsyncExitStack() as stack:
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        tls = ssl.create_default_context()  # unused on http://, but made by each client
        yield [await stack.enter_async_context(httpx.AsyncClient(base_url=url, limits=limits,
                                                                 timeout=60, verify=tls))
               for _ in range(count)]  # fmt: skip


async def load(url: str, path: str, seconds: float, connections: int) -> tuple[int, list[float]]:
    """GET ``path`` on ``connections`` connections for ``seconds``: requests/s and the
    latencies (seconds, sorted)."""
    latencies: list[float] = []
    async with connections_to(url, connections) as clients:
        for client in clients:  # open the connections
            (await client.get(path)).raise_for_status()
        deadline = time.perf_counter() + seconds

        async def worker(client: httpx.AsyncClient) -> None:
            while time.perf_counter() < deadline:
                t = time.perf_counter()
                response = await client.get(path)
                latencies.append(time.perf_counter() - t)
                if response.status_code != 200:
                    raise SystemExit(f"{path}: {response.status_code} {response.text[:200]}")

        started = time.perf_counter()
        await asyncio.gather(*(worker(client) for client in clients))
        elapsed = time.perf_counter() - started
    return round(len(latencies) / elapsed), sorted(latencies)


Rates = dict[str, tuple[int, list[float]]]
"""Per endpoint: requests/s and the latencies (seconds, sorted)."""

TRIVIAL = "trivial Starlette route"
TILE = "full tile /tile/0/000"


def endpoints(url: str, trivial_url: str, pith: str, seconds: float,
              connections: int) -> Rates:  # fmt: skip
    """Each endpoint loaded in turn (:func:`load`), the trivial route last."""
    runs = [(TILE, url, "/tile/0/000"), ("/checkpoint", url, "/checkpoint"),
            (f"state /state/{pith[:12]}...", url, f"/state/{pith}"),
            (TRIVIAL, trivial_url, "/")]  # fmt: skip
    return {name: asyncio.run(load(u, p, seconds, connections)) for name, u, p in runs}


def percentile(latencies: list[float], q: float) -> float:
    """The ``q`` quantile of sorted ``latencies``, in milliseconds."""
    return latencies[min(len(latencies) - 1, int(len(latencies) * q))] * 1000


def key_file(folder: Path) -> Path:
    """The log's private key (the test registry key), written into ``folder``."""
    key = folder / "registry.key"
    write_key_file(key, test_key("registry"))
    return key


def served_store(folder: Path, events: int) -> tuple[Path, Path, str, int]:
    """A store of ``events`` seed-shaped events and the log's key in ``folder``: the store,
    the key file, a pith with a state, the tree size."""
    key = key_file(folder)
    with Store.open(folder / "store") as store:
        store.append(list(workload.mixed(events)), make_keyring(test_keyring_entries()))
        pith = next(p["pith_number"] for p in store.piths() if p["status"] == "state")
        size = store.tree_size()
    return folder / "store", key, pith, size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--trivial-server", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.trivial_server:
        trivial_server()
        return
    with tempfile.TemporaryDirectory(prefix="pithlog-net-bench-") as tmp:
        store, key, pith, size = served_store(Path(tmp), args.events)
        server, url = serve(store, key)
        trivial, trivial_url = serve_trivial()
        try:
            results = endpoints(url, trivial_url, pith, args.seconds, args.connections)
        finally:
            stop(server)
            stop(trivial)
    base = results[TRIVIAL][0]
    print(f"net_bench: {args.events} events ({size} leaves), {args.connections} connections, "
          f"{args.seconds:g} s each; {platform.python_version()}, {usable_cores()} cores")
    print("| endpoint | requests/s | / trivial | p50 ms | p99 ms |")
    print("|---|---|---|---|---|")
    for name, (rate, lat) in results.items():
        print(f"| {name} | {rate} | {rate / base:.2f} | {percentile(lat, 0.5):.1f} | "
              f"{percentile(lat, 0.99):.1f} |")
    print(json.dumps({name: r[0] for name, r in results.items()}))


if __name__ == "__main__":
    main()
