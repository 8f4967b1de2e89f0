"""``pithlog serve`` as a client sees it: a real uvicorn server (a subprocess on 127.0.0.1,
a port the kernel picks), read with httpx. The tile client here is written from the C2SP
tlog-tiles text, not with pithlog's tile code: the root re-derived from the served tiles
and entry bundles must be the signed checkpoint's."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import json
import pickle
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import zstandard
from served import ORIGIN, Files, Server, g, make_files, serving

from pithlog.errors import KeyFileError, KeyringError
from pithlog.net import server as server_module
from pithlog.net.server import REUSE_PORT, bind
from pithlog.protocol.canonical import MAX_LINE_BYTES
from pithlog.protocol.keys import load_keyring
from pithlog.store import Store
from pithlog.store.layout import FORMAT_VERSION
from pithlog.testing import test_key as fixed_key
from pithlog.testing import write_key_file
from pithlog.transparency.checkpoint import verify_checkpoint
from pithlog.transparency.proofs import verify_consistency_proof, verify_inclusion_proof
from tests.cli.test_keyring_cli import Endless

TIMEOUT = httpx.Timeout(20.0)
ERRORS_DOC = (Path(__file__).resolve().parents[2] / "docs" / "errors.md").read_text()
CODES = {line.split("`")[1] for line in ERRORS_DOC.splitlines() if line.startswith("| `")}
"""The stable codes docs/errors.md lists."""


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    return make_files(tmp_path_factory.mktemp("net"))


@pytest.fixture(scope="module")
def server(files: Files) -> Iterator[Server]:
    with serving(files) as running:
        yield running
        assert b"Traceback" not in running.stderr, running.stderr.decode(errors="replace")


def get(server: Server, path: str, **kw: Any) -> httpx.Response:
    return httpx.get(server.url + path, timeout=TIMEOUT, **kw)


# --- an independent tlog-tiles client (c2sp.org/tlog-tiles, RFC 9162 2.1) ---------------


def _leaf(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def _mth(hashes: list[bytes]) -> bytes:
    """RFC 9162 MTH over leaf hashes: split at the largest power of two below n."""
    if len(hashes) == 1:
        return hashes[0]
    k = 1
    while k * 2 < len(hashes):
        k *= 2
    return hashlib.sha256(b"\x01" + _mth(hashes[:k]) + _mth(hashes[k:])).digest()


def _n(index: int) -> str:
    """tlog-tiles: zero-padded 3-digit elements, all but the last prefixed with x."""
    digits = str(index)
    digits = "0" * (-len(digits) % 3) + digits
    groups = [digits[i : i + 3] for i in range(0, len(digits), 3)]
    return "/".join(["x" + x for x in groups[:-1]] + [groups[-1]])


def _suffix(index: int, width: int) -> str:
    return _n(index) + ("" if width == 256 else f".p/{width}")


def _bundle(data: bytes) -> list[bytes]:
    out, at = [], 0
    while at < len(data):
        n = int.from_bytes(data[at : at + 2], "big")
        assert at + 2 + n <= len(data), "an entry runs past the bundle"
        out.append(data[at + 2 : at + 2 + n])
        at += 2 + n
    return out


def read_log(server: Server, keyring_path: Path) -> tuple[int, list[bytes]]:
    """Fetch the checkpoint, every entry bundle and every tile of its size; check them
    against each other and the root. Returns the size and the leaf data."""
    cp = get(server, "/checkpoint")
    assert cp.status_code == 200 and cp.headers["content-type"] == "text/plain; charset=utf-8"
    verified = verify_checkpoint(cp.content, load_keyring(keyring_path.read_bytes()), ORIGIN)
    size, root = verified.checkpoint.size, verified.checkpoint.root
    text = cp.content.decode().split("\n")
    assert text[0] == ORIGIN and int(text[1]) == size
    leaves: list[bytes] = []
    for index in range((size + 255) // 256):
        width = min(256, size - index * 256)
        bundle = get(server, f"/tile/entries/{_suffix(index, width)}")
        assert bundle.status_code == 200, bundle.text
        entries = _bundle(bundle.content)
        assert len(entries) == width and all(len(e) == 64 for e in entries)
        tile = get(server, f"/tile/0/{_suffix(index, width)}")
        assert tile.content == b"".join(_leaf(e) for e in entries)  # width * 32 bytes
        assert tile.headers["cache-control"] == "public, max-age=31536000, immutable"
        leaves += entries
    hashes = [_leaf(e) for e in leaves]
    # level 1: each hash is the MTH of one full level-0 tile; partial ones are not hashed up
    full = size // 256
    for index in range((full + 255) // 256):
        width = min(256, full - index * 256)
        tile = get(server, f"/tile/1/{_suffix(index, width)}")
        assert tile.status_code == 200
        for i in range(width):
            first = (index * 256 + i) * 256
            assert tile.content[i * 32 : i * 32 + 32] == _mth(hashes[first : first + 256])
    assert _mth(hashes) == root
    return size, leaves


def test_an_independent_tile_client_rederives_the_signed_root(
    server: Server, files: Files
) -> None:
    size, leaves = read_log(server, files.keyring)
    with Store.open(files.store, readonly=True) as store:
        assert size == store.tree_size() > 256
        exported = [copy for _, copy in store.export()]
    # every copy served hashes to its leaf data: event_id || SHA-256(copy)
    copies: list[bytes] = []
    for index in range((size + 255) // 256):
        width = min(256, size - index * 256)
        got = get(server, f"/copies/{_suffix(index, width)}", headers={"Accept-Encoding": "gzip"})
        assert got.headers.get("content-encoding") == "gzip"  # httpx inflated it
        copies += got.content.split(b"\n")[:-1]
    assert copies == exported
    for leaf, copy in zip(leaves, copies, strict=True):
        assert hashlib.sha256(copy).digest() == leaf[32:]
        assert json.loads(copy)["event_id"] == "sha256:" + leaf[:32].hex()
    one = get(server, f"/copy/{leaves[7][32:].hex()}")
    assert one.content == copies[7] and "immutable" in one.headers["cache-control"]
    # a partial tile of an earlier size is the prefix of today's tile
    early = get(server, "/tile/0/000.p/5")
    assert early.content == b"".join(_leaf(e) for e in leaves[:5])
    # an entry bundle is hashes: never compressed, whatever the client accepts
    with httpx.stream("GET", server.url + "/tile/entries/000", timeout=TIMEOUT,
                      headers={"Accept-Encoding": "zstd, gzip"}) as response:  # fmt: skip
        body = b"".join(response.iter_raw())
    assert "content-encoding" not in response.headers
    assert body == b"".join(len(e).to_bytes(2, "big") + e for e in leaves[:256])
    # copies: zstd when accepted, else gzip when accepted, else as they are; the same bytes
    plain = b"".join(copy + b"\n" for copy in copies[:256])
    for accept, coding in [("zstd, gzip", "zstd"), ("gzip;q=1, zstd;q=0", "gzip"),
                           ("gzip", "gzip"), ("identity", None), ("*", "zstd")]:  # fmt: skip
        with httpx.stream("GET", server.url + "/copies/000", timeout=TIMEOUT,
                          headers={"Accept-Encoding": accept}) as response:  # fmt: skip
            body = b"".join(response.iter_raw())
        assert response.headers.get("content-encoding") == coding, accept
        decoded = {"zstd": lambda b: zstandard.ZstdDecompressor().decompressobj().decompress(b),
                   "gzip": gzip.decompress, None: bytes}[coding](body)  # fmt: skip
        assert decoded == plain, accept
        assert coding is None or len(body) < len(plain) / 3


def test_states_events_proofs_and_stats(server: Server, files: Files) -> None:
    keyring = load_keyring(files.keyring.read_bytes())
    with Store.open(files.store, readonly=True) as store:
        piths = store.piths()
        states = {p["pith_number"]: store.state(p["pith_number"]) for p in piths}
        stats = store.stats()
    with_state = [p for p, s in states.items() if s is not None]
    pending = [p for p, s in states.items() if s is None]
    assert with_state and pending
    for pith in with_state:
        got = get(server, f"/state/{pith}", headers={"Accept-Encoding": "identity"})
        assert got.status_code == 200 and got.headers["content-type"] == "application/json"
        assert got.content == states[pith] + b"\n"  # what `pithlog state` prints
        digest = json.loads(got.content)["state_sha256"]
        assert got.headers["etag"] == f'"{digest}"'
        again = get(server, f"/state/{pith}", headers={"If-None-Match": f'"{digest}"',
                                                       "Accept-Encoding": "identity"})  # fmt: skip
        assert again.status_code == 304 and again.content == b""
        assert again.headers["etag"] == got.headers["etag"]
        # RFC 9110 13.1.2: weak comparison (a CDN that compresses passes W/ tags on), and *;
        # the 304 with the 200's Cache-Control, Vary and nosniff
        for held in (f'W/"{digest}"', f'"other", W/"{digest}"', "*"):
            again = get(server, f"/state/{pith}", headers={"If-None-Match": held})
            assert again.status_code == 304, held
            assert again.headers["vary"] == "Accept-Encoding" and again.headers[
                "x-content-type-options"] == "nosniff"  # fmt: skip
            assert again.headers["cache-control"] == got.headers["cache-control"]
        assert get(server, f"/state/{pith}", headers={"If-None-Match": '"other"'}).content
    _compressed_answers_have_their_own_etags(server, files, states)
    answer = get(server, f"/state/{pending[0]}")
    assert answer.status_code == 404 and answer.json()["error"] == "serve.pending"
    assert answer.json()["pith"]["status"] == "pending"
    unknown = get(server, "/state/" + g.record("2599.99999")["pith_number"])
    assert unknown.status_code == 404 and unknown.json()["error"] == "serve.not_found"

    event = files.events[3]
    got = get(server, f"/event/{event['event_id']}")
    assert got.status_code == 200 and json.loads(got.content)["event_id"] == event["event_id"]
    # a page or JSON by Accept, so Vary says so; compressed as /copy/ is (from 1 KiB)
    large = max(files.events, key=lambda e: len(g.encoded(e)))
    assert len(g.encoded(large)) > 1024
    for accept in ("text/html", "application/json"):
        zipped = get(server, f"/event/{large['event_id']}",
                     headers={"Accept": accept, "Accept-Encoding": "gzip"})  # fmt: skip
        assert zipped.headers["content-encoding"] == "gzip", accept
        assert {"accept", "accept-encoding"} <= {
            v.strip().lower() for v in zipped.headers["vary"].split(",")}, accept  # fmt: skip

    # inclusion of one copy, against the checkpoint the server publishes
    proof = get(server, f"/proof/inclusion/{event['event_id']}")
    assert proof.status_code == 200
    proven = verify_inclusion_proof(proof.content, keyring, event["event_id"], ORIGIN,
                                    hashlib.sha256(got.content).digest())  # fmt: skip
    published = get(server, "/checkpoint").content
    assert proof.content.endswith(published) and proven.checkpoint.note == published
    copy = hashlib.sha256(got.content).hexdigest()
    named = get(server, f"/proof/inclusion/{event['event_id']}?copy={copy}")
    assert named.content == proof.content
    other = get(server, f"/proof/inclusion/{event['event_id']}?copy={'0' * 64}")
    assert other.status_code == 404 and other.json()["error"] == "serve.not_found"
    # consistency between two sizes, checked against checkpoints of both
    size = proven.checkpoint.checkpoint.size
    with Store.open(files.store, readonly=True) as store:
        old_root = store.tree_root(100)[1]
    from pithlog.protocol.keys import load_key_file
    from pithlog.transparency.checkpoint import Checkpoint, sign_checkpoint

    old_cp = sign_checkpoint(Checkpoint(ORIGIN, 100, old_root),
                             load_key_file(files.key.read_bytes()))  # fmt: skip
    consistency = get(server, f"/proof/consistency/100/{size}")
    assert consistency.status_code == 200
    verify_consistency_proof(consistency.content, old_cp, published, keyring, ORIGIN)

    served = get(server, "/stats").json()
    assert "path" not in served
    assert served["counts"] == stats["counts"] and served["format"] == FORMAT_VERSION.decode()
    assert get(server, "/healthz").json() == {"ok": True, "tree_size": size}
    assert get(server, "/checkpoint").headers["cache-control"] == "public, max-age=2"
    head = httpx.head(server.url + "/tile/0/000", timeout=TIMEOUT)
    assert head.status_code == 200 and head.headers["content-length"] == "8192"


def _compressed_answers_have_their_own_etags(
    server: Server, files: Files, states: dict[str, bytes | None]
) -> None:
    """RFC 9110 8.8.3: a strong ETag names one representation, content coding included.
    The compressed answers of /state/ and /event/ shared the identity answer's strong
    tag (a cache could join a 304 or a range of one to the bytes of the other); they
    carry it weak, W/"...", and a 304 carries the tag its 200 would."""
    big = max((s for s in states.values() if s is not None), key=len)
    assert len(big) >= 1024  # compressed when asked for
    digest = json.loads(big)["state_sha256"]
    copy = max((g.encoded(e) for e in files.events), key=len)
    assert len(copy) >= 1024
    event_id = json.loads(copy)["event_id"]
    for path, tag in ((f"/state/{json.loads(big)['pith_number']}", digest),
                      (f"/event/{event_id}", hashlib.sha256(copy).hexdigest())):  # fmt: skip
        for coding in ("identity", "gzip", "zstd", "br"):
            got = get(server, path, headers={"Accept-Encoding": coding})
            assert got.status_code == 200, (path, coding)
            assert got.headers.get("content-encoding", "identity") == coding, (path, coding)
            etag = f'"{tag}"' if coding == "identity" else f'W/"{tag}"'
            assert got.headers["etag"] == etag, (path, coding)
            # either tag held, the other representation: weak comparison, 304, its own tag
            for held in (f'"{tag}"', f'W/"{tag}"'):
                again = get(server, path, headers={"Accept-Encoding": coding,
                                                   "If-None-Match": held})  # fmt: skip
                assert again.status_code == 304 and again.headers["etag"] == etag, held


def _raw(server: Server, request: bytes, timeout: float = 10.0) -> bytes:
    """Bytes sent as they are (no client normalizes them), the whole answer."""
    with socket.create_connection(server.address, timeout=timeout) as sock:
        sock.sendall(request)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
        return out


BAD_PATHS = [
    ("/tile/0/5", 400, "tile.path"), ("/tile/0/x000/005", 400, "tile.path"),
    ("/tile/64/000", 400, "tile.path"), ("/tile/0/000.p/256", 400, "tile.path"),
    ("/tile/0/000.p/0", 400, "tile.path"), ("/tile/0/000.p/", 400, "tile.path"),
    ("/tile/entries/abc", 400, "tile.path"), ("/tile/0/x999/999", 404, "serve.not_found"),
    ("/tile/1/001", 404, "serve.not_found"), ("/tile/0/001.p/255", 404, "serve.not_found"),
    ("/tile/5/000.p/1", 404, "serve.not_found"), ("/copies/x001/000", 404, "serve.not_found"),
    ("/copy/zz", 400, "serve.bad_path"), ("/copy/" + "0" * 64, 404, "serve.not_found"),
    ("/event/sha256:XYZ", 400, "serve.bad_path"),
    ("/event/sha256:" + "0" * 64, 404, "serve.not_found"),
    ("/state/nope", 400, "serve.bad_path"), ("/proof/inclusion/x", 400, "serve.bad_path"),
    ("/proof/inclusion/sha256:" + "0" * 64, 404, "serve.not_found"),
    ("/proof/consistency/5/3", 400, "serve.bad_path"),
    ("/proof/consistency/01/3", 400, "serve.bad_path"),
    ("/proof/consistency/3/99999999", 404, "store.tree_size"),
    ("/nothing", 404, "serve.not_found"), ("/tile", 404, "serve.not_found"),
]  # fmt: skip


def test_every_answer_says_its_type_is_not_to_be_guessed(server: Server, files: Files) -> None:
    """``X-Content-Type-Options: nosniff`` on answers of every kind: the log's bytes,
    JSON, a page, the stylesheet, an error, a sync reply, a refused submission."""
    event_id = files.events[0]["event_id"]
    answers = [get(server, path) for path in (
        "/checkpoint", "/tile/0/000.p/1", "/tile/entries/000.p/1", "/copies/000.p/1",
        f"/event/{event_id}", "/stats", "/", "/static/style.css", "/tile/9/000",
        "/no/such/path",
    )]  # fmt: skip
    answers.append(httpx.post(server.url + "/sync", content=b"", timeout=TIMEOUT))
    answers.append(httpx.post(server.url + "/submit", content=b"{}\n", timeout=TIMEOUT))
    assert {a.status_code for a in answers} >= {200, 400, 403, 404}
    for got in answers:
        assert got.headers["x-content-type-options"] == "nosniff", got.url


def test_malformed_paths_and_methods_get_json_errors(server: Server) -> None:
    for path, status, code in BAD_PATHS:
        got = get(server, path)
        assert (got.status_code, got.json()["error"]) == (status, code), path
        assert got.json()["error"] in CODES and got.headers["cache-control"] == "no-store"
    # a bundle of copies is read as the entry bundle of the same N: its path error named
    # 'entries/000.p/0', a path the client never asked for
    for path in ("/copies/000.p/0", "/copies/abc", "/copies/000.p/256"):
        got = get(server, path)
        assert (got.status_code, got.json()["error"]) == (400, "tile.path"), path
        message = got.json()["message"]
        assert message.startswith(repr(path.removeprefix("/"))) and "entries" not in message
    for method, path, allow in (("POST", "/checkpoint", "GET, HEAD"),
                                ("POST", "/tile/0/000", "GET, HEAD"),
                                ("GET", "/submit", "POST")):  # fmt: skip
        got = httpx.request(method, server.url + path, timeout=TIMEOUT)
        assert got.status_code == 405 and got.json()["error"] == "serve.method"
        assert {m.strip() for m in got.headers["allow"].split(",")} == set(allow.split(", "))
    # RFC 9110 9.1, 15.6.2: a method no path takes is 501, whether the HTTP parser knows
    # it (DELETE, PROPFIND: a 405 naming the path's methods before) or not (BREW, and
    # get, methods being case-sensitive: a 400 before, as for bytes that are not HTTP)
    for method, path in (("DELETE", b"/tile/0/000"), ("PUT", b"/submit"), ("PROPFIND", b"/"),
                         ("OPTIONS", b"/checkpoint"), ("BREW", b"/checkpoint"),
                         ("get", b"/checkpoint"), ("BREW", b"/submit")):  # fmt: skip
        answer = _raw(server, method.encode() + b" " + path +
                      b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")  # fmt: skip
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 501 ") and b"application/json" in head, answer
        assert b"cache-control: no-store" in head and b"nosniff" in head
        assert json.loads(body)["error"] == "serve.not_implemented" in CODES
    # a request line that is not one (no space after the method, a TLS handshake) stays 400
    for line in (b"GET/ HTTP/1.1\r\nHost: x\r\n\r\n", b"\x16\x03\x01\x00\x05hello"):
        assert _raw(server, line).startswith(b"HTTP/1.1 400 "), line
    # what the HTTP parser refuses before any route: JSON as every error, then closed
    for head in (b"Content-Length: -5", b"Content-Length: abc", b"Content-Length: 3, 3",
                 b"Content-Length: 3\r\nContent-Length: 4",
                 b"Transfer-Encoding: chunked\r\nContent-Length: 3"):  # fmt: skip
        answer = _raw(server, b"POST /submit HTTP/1.1\r\nHost: x\r\n" + head +
                      b"\r\n\r\nabc")  # fmt: skip
        status, _, body = answer.partition(b"\r\n\r\n")
        assert status.startswith(b"HTTP/1.1 400 ") and b"application/json" in status, answer
        assert b"x-content-type-options: nosniff" in status
        assert json.loads(body)["error"] == "serve.bad_request"
    # one URL per tile: a second spelling would be a second copy in every cache
    for path in (b"/tile/entries/entries/000.p/1", b"/tile/0%2F000", b"/tile/entries%2F000",
                 b"/copies/000%2Ep/1", b"/tile/%30/000"):  # fmt: skip
        answer = _raw(server, b"GET " + path + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert answer.split(b" ")[1] == b"400", (path, answer[:200])
    # read-only: no --submit
    got = httpx.post(server.url + "/submit", content=b"{}\n", timeout=TIMEOUT)
    assert got.status_code == 403 and got.json()["error"] == "serve.read_only"
    # paths no client would send: dot segments, encoded slashes, NUL, a huge index
    for path in (b"/tile/0/../../../../etc/passwd", b"/tile/..%2f..%2fetc%2fpasswd",
                 b"/copy/%00", b"/state/pith:2599:%2e%2e%2f%2e%2e%2fetc", b"/tile/0/" +
                 b"x999/" * 400 + b"999"):  # fmt: skip
        answer = _raw(server, b"GET " + path + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.split(b" ")[1] in (b"400", b"404"), answer[:200]
        assert json.loads(body)["error"] in CODES and b"root:" not in body


def _worker_socket() -> socket.socket:
    """A worker's own listening socket, as uvicorn's pickling hands it over."""
    with bind("127.0.0.1", 0, hold=True) as hold:
        return pickle.loads(pickle.dumps(hold))  # type: ignore[no-any-return]


@pytest.mark.parametrize("listening", [lambda: bind("127.0.0.1", 0), _worker_socket],
                         ids=["one worker", "a worker of several"])  # fmt: skip
def test_served_connections_send_without_waiting_for_acks(
    listening: Callable[[], socket.socket],
) -> None:
    """The listening sockets of ``pithlog serve`` make asyncio (as uvicorn runs it) set
    TCP_NODELAY on every connection: otherwise each answer written in two parts waits for
    the client's delayed ACK, 40 ms per request on a kept-alive connection."""
    if listening is _worker_socket and not REUSE_PORT:
        pytest.skip("no SO_REUSEPORT here: workers share the supervisor's socket")
    sock = listening()

    async def nodelay_of_accepted() -> int:
        loop = asyncio.get_running_loop()
        accepted: asyncio.Future[socket.socket] = loop.create_future()

        class Accept(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                accepted.set_result(transport.get_extra_info("socket"))

        server = await loop.create_server(Accept, sock=sock)
        async with server:
            _, writer = await asyncio.open_connection(*sock.getsockname()[:2])
            option = (await accepted).getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
            writer.close()
        return option

    assert asyncio.run(nodelay_of_accepted()) != 0


@pytest.mark.skipif(not REUSE_PORT, reason="needs SO_REUSEPORT")
def test_a_held_port_is_served_by_the_sockets_it_hands_over() -> None:
    """``--workers N``: the supervisor's socket holds the port and accepts nothing; each
    worker unpickles it as a listening socket of its own on that port, and a connection
    is refused once no worker listens."""
    with bind("127.0.0.1", 0, hold=True) as hold:
        assert hold.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) == 0
        workers = [pickle.loads(pickle.dumps(hold)) for _ in range(2)]
        for worker in workers:
            assert worker.getsockname() == hold.getsockname() and worker is not hold
            assert worker.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) == 1
        with socket.create_connection(hold.getsockname(), timeout=5):
            pass
        for worker in workers:
            worker.close()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(hold.getsockname(), timeout=5)


def test_serve_refuses_a_huge_key_or_keyring_without_reading_it_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = tmp_path / "log.key"
    write_key_file(key, fixed_key("registry"))
    endless = Endless()
    real_open = open

    def fake_open(path: str, mode: str = "r") -> Any:
        return endless if path == "/dev/zero" else real_open(path, mode)

    monkeypatch.setattr(server_module, "open", fake_open, raising=False)
    for settings, error, code in (
        (server_module.Settings(str(tmp_path / "s"), "/dev/zero", ORIGIN), KeyFileError,
         "key_file.not_json"),
        (server_module.Settings(str(tmp_path / "s"), str(key), ORIGIN, keyring="/dev/zero"),
         KeyringError, "keyring.not_json"),
    ):  # fmt: skip
        endless.given = 0
        with pytest.raises(error) as caught:
            server_module.open_config(settings)
        assert caught.value.code == code and "longer than" in caught.value.message
        assert endless.given == MAX_LINE_BYTES + 1


def test_what_never_changes_is_immutable_and_nothing_past_the_tree_is_served(
    server: Server, files: Files
) -> None:
    """Every tile, bundle and bundle of copies, full or partial (a partial one of width W
    is the same bytes at every later size), and a consistency proof are immutable; a
    bundle of copies wider than the tree has leaves is a 404, not a short 200 a cache
    would keep for ever; a copy is named in lowercase hex only (one URL, one cache
    entry)."""
    with Store.open(files.store, readonly=True) as store:
        size = store.tree_size()
    last, width = divmod(size, 256)
    assert last >= 1 and width  # a full bundle, then a partial one
    immutable = "public, max-age=31536000, immutable"
    for path in ("/tile/0/000", f"/tile/0/{_suffix(last, width)}", "/tile/0/000.p/5",
                 "/tile/entries/000", f"/tile/entries/{_suffix(last, width)}",
                 "/tile/entries/000.p/5", "/copies/000", f"/copies/{_suffix(last, width)}",
                 "/copies/000.p/5", f"/proof/consistency/100/{size}"):  # fmt: skip
        got = get(server, path)
        assert got.status_code == 200, path
        assert got.headers["cache-control"] == immutable, path
    for path in (f"/copies/{_suffix(last, width + 1)}", f"/tile/entries/{_suffix(last, width + 1)}",
                 f"/tile/0/{_suffix(last, width + 1)}"):  # fmt: skip
        got = get(server, path)
        assert (got.status_code, got.json()["error"]) == (404, "serve.not_found"), path
        assert got.headers["cache-control"] == "no-store"
    copy = hashlib.sha256(g.encoded(files.events[0])).hexdigest()
    assert get(server, f"/copy/{copy}").status_code == 200
    got = get(server, f"/copy/{copy.upper()}")
    assert (got.status_code, got.json()["error"]) == (400, "serve.bad_path")


def test_a_small_answer_sent_as_it_is_keeps_its_strong_etag_in_a_304(
    server: Server, files: Files
) -> None:
    """An event under 1 KiB goes uncompressed whatever the client accepts: its ETag is the
    strong one, and the 304 that revalidates it carries the same tag (RFC 9110 15.4.5),
    not the weak one of a compressed answer it was never sent as."""
    small = min((g.encoded(e) for e in files.events), key=len)
    assert len(small) < 1024
    event_id, tag = json.loads(small)["event_id"], f'"{hashlib.sha256(small).hexdigest()}"'
    for accept in ("gzip", "zstd, gzip", "identity"):
        got = get(server, f"/event/{event_id}", headers={"Accept-Encoding": accept})
        assert got.content == small and "content-encoding" not in got.headers, accept
        assert got.headers["etag"] == tag, accept
        again = get(server, f"/event/{event_id}", headers={"Accept-Encoding": accept,
                                                           "If-None-Match": tag})  # fmt: skip
        assert again.status_code == 304 and again.headers["etag"] == tag, accept


SLOW_START = '''
import sys
import time

import uvicorn

original = uvicorn.Config.get_loop_factory


def slow(self):  # uvicorn's start, held up where a SIGTERM was once lost
    print("starting", flush=True)
    time.sleep(1.0)
    return original(self)


uvicorn.Config.get_loop_factory = slow
sys.argv = ["pithlog", *sys.argv[1:]]
from pithlog.cli import entry

entry()
'''


def test_a_sigterm_right_after_the_listening_line_stops_serve_with_its_one_line(
    tmp_path: Path, files: Files
) -> None:
    """``serve`` says it listens before uvicorn takes SIGTERM. A SIGTERM in between was
    raised wherever uvicorn's start stood: here with a ``coroutine 'Server.serve' was never
    awaited`` warning on stderr, and once in about thirty starts on a busy machine lost, the
    server serving on. It is now held until uvicorn's handlers take it: the server stops as
    on any SIGTERM, with one line and status 143."""
    import os
    import signal
    import subprocess
    import sys

    script = tmp_path / "slow_start.py"
    script.write_text(SLOW_START)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        [sys.executable, str(script), "--store", str(files.store), "serve", "--listen",
         "127.0.0.1:0", "--key", str(files.key), "--origin", ORIGIN],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)  # fmt: skip
    try:
        assert process.stderr is not None and process.stdout is not None
        assert process.stderr.readline().startswith(b"serve: listening on http://127.0.0.1:")
        assert process.stdout.readline() == b"starting\n"  # uvicorn's start, held up
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 143
        assert process.stderr.read() == b"pithlog: terminated\n"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)


def test_serve_with_another_keyring_says_the_rekey_to_run_for_this_store(
    tmp_path: Path, files: Files
) -> None:
    """``serve --submit`` with a keyring the store's states were not reduced under is
    refused (store.keyring_changed) with the command that brings the store under it: that
    command named a placeholder ``DIR`` and ``KEYRING``, not the store and keyring given."""
    import shlex

    from pithlog.errors import StoreError

    other = json.loads(files.keyring.read_bytes())
    other["keys"] = other["keys"][:-1]
    ring = tmp_path / "other keyring.json"
    ring.write_text(json.dumps(other))
    settings = server_module.Settings(store=str(files.store), key=str(files.key),
                                      origin=ORIGIN, keyring=str(ring))  # fmt: skip
    with pytest.raises(StoreError) as refused:
        server_module.open_config(settings)
    assert refused.value.code == "store.keyring_changed"
    store, keyring = shlex.quote(str(files.store)), shlex.quote(str(ring))
    rekey = f"pithlog --store {store} rekey --keyring {keyring}"
    assert f"`{rekey}`" in str(refused.value)
