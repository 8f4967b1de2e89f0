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
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx
import workload

from pithlog.protocol.keys import dump_key_file, make_keyring
from pithlog.store import Store
from pithlog.testing import test_key, test_keyring_entries

ORIGIN = "registry.test.invalid/pith"


def trivial_server() -> None:
    """A Starlette app with one constant route, under uvicorn as `pithlog serve` runs."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    async def ok(request: Request) -> Response:
        return Response(b"ok\n", media_type="text/plain")

    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)
    print(f"serve: listening on http://127.0.0.1:{sock.getsockname()[1]}", file=sys.stderr,
          flush=True)  # fmt: skip
    config = uvicorn.Config(Starlette(routes=[Route("/", ok)]), lifespan="off",
                            log_level="warning", access_log=False, server_header=False,
                            limit_concurrency=1000)  # fmt: skip
    uvicorn.Server(config).run(sockets=[sock])


def start(argv: list[str]) -> tuple[subprocess.Popen[bytes], str]:
    process = subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
    assert process.stderr is not None
    line = process.stderr.readline().decode()
    if not line.startswith("serve: listening on "):
        process.kill()
        raise SystemExit(f"server did not start: {line}{process.stderr.read().decode()}")
    return process, line.split(" on ", 1)[1].strip()


async def load(url: str, path: str, seconds: float, connections: int) -> tuple[int, list[float]]:
    latencies: list[float] = []
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=30) as client:
        for _ in range(connections):  # warm the connections
            (await client.get(path)).raise_for_status()
        deadline = time.perf_counter() + seconds

        async def worker() -> None:
            while time.perf_counter() < deadline:
                t = time.perf_counter()
                response = await client.get(path)
                latencies.append(time.perf_counter() - t)
                if response.status_code != 200:
                    raise SystemExit(f"{path}: {response.status_code} {response.text[:200]}")

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(connections)))
        elapsed = time.perf_counter() - started
    return round(len(latencies) / elapsed), sorted(latencies)


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
    entries = test_keyring_entries()
    with tempfile.TemporaryDirectory(prefix="pithlog-net-bench-") as tmp:
        root = Path(tmp)
        (root / "registry.key").write_bytes(dump_key_file(test_key("registry")))
        with Store.open(root / "store") as store:
            store.append(list(workload.mixed(args.events)), make_keyring(entries))
            pith = next(p["pith_number"] for p in store.piths() if p["status"] == "state")
            size = store.tree_size()
        serve, url = start([sys.executable, "-m", "pithlog", "--store", str(root / "store"),
                            "serve", "--listen", "127.0.0.1:0", "--key",
                            str(root / "registry.key"), "--origin", ORIGIN])  # fmt: skip
        trivial, trivial_url = start([sys.executable, __file__, "--trivial-server"])
        try:
            runs = [("full tile /tile/0/000", url, "/tile/0/000"),
                    ("/checkpoint", url, "/checkpoint"),
                    (f"state ({pith[:14]}...)", url, f"/state/{pith}"),
                    ("trivial Starlette route", trivial_url, "/")]  # fmt: skip
            results = {name: asyncio.run(load(u, p, args.seconds, args.connections))
                       for name, u, p in runs}  # fmt: skip
        finally:
            for process in (serve, trivial):
                process.send_signal(signal.SIGTERM)
                process.wait(10)
    base = results["trivial Starlette route"][0]
    print(f"net_bench: {args.events} events ({size} leaves), {args.connections} connections, "
          f"{args.seconds:g} s each; {platform.python_version()}, {os.cpu_count()} cores")
    print("| endpoint | requests/s | / trivial | p50 ms | p99 ms |")
    print("|---|---|---|---|---|")
    for name, (rate, lat) in results.items():
        p50, p99 = lat[len(lat) // 2] * 1000, lat[int(len(lat) * 0.99)] * 1000
        print(f"| {name} | {rate} | {rate / base:.2f} | {p50:.1f} | {p99:.1f} |")
    print(json.dumps({name: r[0] for name, r in results.items()}))


if __name__ == "__main__":
    main()
