"""Running the app of :mod:`pithlog.net.app` under uvicorn (``pithlog serve``,
``docs/network.md``): the listening socket, the worker processes, and what each worker
opens.

The socket is bound here, before uvicorn starts, so that the real port (``--listen
HOST:0`` picks a free one) is known and said once. With one worker it is the listening
socket; with several it holds the port and each worker listens on a socket of its own
there (:class:`PortHold`). Each worker builds its app from :class:`Settings` (a JSON
document in the environment variable :data:`SETTINGS_VARIABLE`, since uvicorn starts
workers by spawning fresh interpreters) and opens the store itself: LMDB lets several
processes read one store, and its writer lock orders their commits. With several workers
the server is said to listen only once each has built its app (:data:`READY_VARIABLE`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import multiprocessing
import multiprocessing.connection
import os
import shlex
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from uvicorn.config import STARTUP_FAILURE

from pithlog.errors import PithlogError, StoreError, UsageError, shown
from pithlog.net import http_head, uvicorn_logs
from pithlog.net.answers import answer_headers
from pithlog.net.app import ServeApp, create_app
from pithlog.net.error_answers import error_handlers
from pithlog.net.held_signals import HeldServer, no_reload
from pithlog.net.pages import page_routes
from pithlog.net.served_log import ServeConfig
from pithlog.net.submit import Limits
from pithlog.net.supervisor import Supervisor, data_file, require_started_on
from pithlog.net.sync_http import sync_routes
from pithlog.net.witness_client import collect
from pithlog.net.witness_route import witness_routes
from pithlog.parallel import cores, usable_cores
from pithlog.protocol.canonical import MAX_LINE_BYTES
from pithlog.protocol.keys import Keyring, SigningKey, load_key_file, load_keyring
from pithlog.store import Store
from pithlog.transparency import merkle
from pithlog.transparency.checkpoint import Checkpoint, is_key_name, sign_checkpoint
from pithlog.transparency.witness import WITNESS_SIGNER_TYPES, may_witness

SETTINGS_VARIABLE = "PITHLOG_SERVE_SETTINGS"
SUPERVISED_VARIABLE = "PITHLOG_SERVE_SUPERVISED"
"""Set for the workers of ``--workers N``: each ends when its supervisor has ended
(:func:`_end_with_supervisor`)."""
SUPERVISOR_GONE_GRACE = 15.0
"""Seconds a worker whose supervisor ended has, after its SIGTERM, to answer what it is
answering (uvicorn's graceful shutdown is 5 s) before it ends at once."""
READY_VARIABLE = "PITHLOG_SERVE_READY"
"""With ``--workers N``: a folder where each worker, once its app is built, leaves a file
named by its process id (:func:`app_from_environment`); the supervisor says the server is
ready when N are there (:func:`_say_when_ready`)."""
READY_POLL_SECONDS = 0.02
"""How often the supervisor looks in that folder: the ready line comes at most this late."""

LIMIT_CONCURRENCY = 1000
"""Connections and tasks a worker serves at once; beyond, ``503 serve.busy``
(:mod:`pithlog.net.http_head`)."""
TIMEOUT_KEEP_ALIVE = 5
"""Seconds an idle keep-alive connection stays open."""
REUSE_PORT = hasattr(socket, "SO_REUSEPORT")
"""Whether the workers of ``--workers N`` each listen on a socket of their own
(:class:`PortHold`); where the system has no ``SO_REUSEPORT``, they share one."""
BACKLOG = 2048
"""Connections a listening socket holds before they are accepted."""


@dataclass(frozen=True)
class Settings:
    """What a worker needs to build its app: paths and values, nothing open."""

    store: str
    key: str
    origin: str
    keyring: str | None = None
    max_body: int = Limits.max_body
    max_lines: int = Limits.max_lines
    body_seconds: float = Limits.body_seconds
    max_pending: int = Limits.max_pending
    witness: bool = False
    """Serve as a witness (docs/witness.md): ``key`` cosigns, ``keyring`` names the logs."""
    witness_urls: tuple[str, ...] = ()
    """Witnesses that cosign each published checkpoint (with ``witness_keyring``)."""
    witness_keyring: str | None = None
    witness_quorum: int = 0
    data_file: list[int] | None = None
    """The device and inode of the store's data file when the command opened it: a worker
    opens that store or none (:func:`open_config`)."""

    def encode(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def decode(cls, text: str) -> Settings:
        return cls(**json.loads(text))

    def limits(self) -> Limits:
        return Limits(max_body=self.max_body, max_lines=self.max_lines,
                      body_seconds=self.body_seconds, max_pending=self.max_pending)  # fmt: skip


def extra_routes() -> list[BaseRoute]:
    """Routes served beside the log's own (:attr:`ServeConfig.extra_routes`): the pages for
    people (docs/pages.md) and ``POST /sync``."""
    return [*page_routes(), *sync_routes()]


def _read(path: str) -> bytes:
    """A keyring's bytes (and a key file's, :func:`_read_key`), no further than the door
    reads (spec section 1: 8 MiB, and one byte more to tell a longer file): ``--key
    /dev/zero`` or a keyring given an export is refused (``key_file.not_json``,
    ``keyring.not_json``) without being read whole into memory, as the commands without
    ``serve`` refuse it."""
    try:
        with open(path, "rb") as f:
            return f.read(MAX_LINE_BYTES + 1)
    except OSError as exc:
        raise UsageError("unreadable", f"cannot read {path}: {exc.strerror or exc}") from exc


KeyFileRead = Callable[[str, os.stat_result], None]
"""Told a private key file's path and status once its key is read: the command judges
its mode (``pithlog serve`` warns when group or others may read it, docs/cli.md)."""


def _read_key(path: str, read: KeyFileRead | None) -> SigningKey:
    """The private key of the key file ``path`` (read as :func:`_read` reads), and
    ``read`` told the status of the descriptor it came from."""
    try:
        with open(path, "rb") as f:
            key = load_key_file(f.read(MAX_LINE_BYTES + 1))
            status = os.fstat(f.fileno()) if read is not None else None
    except OSError as exc:
        raise UsageError("unreadable", f"cannot read {path}: {exc.strerror or exc}") from exc
    if read is not None and status is not None:
        read(path, status)
    return key


def open_config(settings: Settings, key_read: KeyFileRead | None = None) -> ServeConfig:
    """Open what ``settings`` names: the store (read-only unless submissions are taken;
    created for them), the signing key (refused, as ``pithlog checkpoint`` refuses it, when
    it may not sign for the origin) and the keyring (refused when the store's states were
    reduced under another, as ``pithlog append`` refuses it). ``key_read``: see
    :data:`KeyFileRead`."""
    key = _read_key(settings.key, key_read)
    sign_checkpoint(Checkpoint(settings.origin, 0, merkle.EMPTY_ROOT), key)
    keyring = load_keyring(_read(settings.keyring)) if settings.keyring is not None else None
    # a worker (``data_file`` known) never creates the store: one started in the place of
    # one that died, the store renamed meanwhile, made an empty store at the path and served
    # it beside the other workers (a checkpoint of 0 after 55: two logs behind one URL)
    create = keyring is not None and settings.data_file is None
    store = Store.open(settings.store, create=create, readonly=keyring is None)
    require_started_on(store, settings.store, settings.data_file)
    stored = store.keyring_digest()
    if keyring is not None and stored not in (None, keyring.digest):
        store.close()
        raise StoreError("keyring_changed", f"the store's states were reduced under keyring "
                         f"{(stored or '')[:16]}..., not this one ({keyring.digest[:16]}...): "
                         f"run `pithlog --store {shlex.quote(str(settings.store))} rekey "
                         f"--keyring {shlex.quote(str(settings.keyring))}` first (it judges "
                         "again what the change touches, resumably)")  # fmt: skip
    cosign = _cosigner(settings, store) if settings.witness_urls else None
    return ServeConfig(store, key, settings.origin, keyring, settings.limits(),
                       tuple(extra_routes()), cosign)  # fmt: skip


def open_witness(
    settings: Settings, key_read: KeyFileRead | None = None
) -> tuple[Store, Keyring, SigningKey]:
    """What a witness opens: its store (created when new: it keeps what the witness last
    cosigned per origin), the keyring naming the logs it follows, and its key
    (``key_read``: see :data:`KeyFileRead`)."""
    key = _read_key(settings.key, key_read)
    if key.signer_type not in WITNESS_SIGNER_TYPES:
        article = "an" if key.signer_type[0] in "aeiou" else "a"  # "an author key"
        raise UsageError("arguments", f"key {shown(key.key_id)} is {article} {key.signer_type} "
                         "key; a witness cosigns with a mirror or pith_registry key")  # fmt: skip
    if not is_key_name(key.signer_id):
        # the signer_id is the cosignatures' key name (signed-note: no space, no '+'):
        # cosign() refused it on every add-checkpoint, each a 500
        raise UsageError("arguments", f"key {shown(key.key_id)}: signer_id "
                         f"{key.signer_id!r} is not a signed-note key name (no spaces, no "
                         "'+'), which a witness's cosignatures carry")  # fmt: skip
    if settings.keyring is None:
        raise UsageError("arguments", "--witness needs --keyring: the logs it witnesses")
    keyring = load_keyring(_read(settings.keyring))
    # as a log's worker (open_config): a witness's that made a new store would have
    # forgotten what it cosigned
    store = Store.open(settings.store, create=settings.data_file is None)
    require_started_on(store, settings.store, settings.data_file)
    return store, keyring, key


def witness_app(settings: Settings) -> Starlette:
    """The app of a witness: ``POST /add-checkpoint`` and ``GET /<origin hash>/checkpoint``
    (C2SP tlog-witness) and ``/healthz``.
    The cosignatures' time is this machine's clock. Another path or method is answered
    as by the log's app: JSON with a stable code (``404 serve.not_found``, ``405
    serve.method`` with ``Allow``, ``501 serve.not_implemented``)."""
    store, keyring, key = open_witness(settings)

    async def healthz(request: Request) -> Response:
        # the headers of every answer (network.md): never cached, nosniff
        return Response(b"ok\n", media_type="text/plain", headers=answer_headers("no-store"))

    # the log's error answers: an unknown path or method, or a failure, is JSON with a
    # stable code here too (Starlette's own are plain text)
    app = ServeApp(routes=[*witness_routes(store, keyring, key, time.time),
                           Route("/healthz", healthz)],
                   exception_handlers=error_handlers())  # fmt: skip
    app.router.redirect_slashes = False  # one URL per resource: no 307 to another
    return app


def _cosigner(settings: Settings, store: Store) -> Callable[[bytes, int], bytes]:
    """``cosign(note, size)`` for :attr:`ServeConfig.cosign`: ask the witnesses of
    ``settings`` (C2SP tlog-witness), proving consistency from the store's tree."""
    if settings.witness_keyring is None:
        raise UsageError("arguments", "--witness-url needs --witness-keyring: the witness keys")
    witnesses = [e for e in load_keyring(_read(settings.witness_keyring)).values()
                 if may_witness(e)]  # fmt: skip
    quorum = settings.witness_quorum or len(settings.witness_urls)

    def cosign(note: bytes, size: int) -> bytes:
        def proof_from(old: int) -> list[bytes]:
            return store.consistency_path(old, size)[1]

        return collect(settings.witness_urls, note, size, proof_from, witnesses, quorum)[0]

    return cosign


def app_from_environment() -> Starlette:
    """The app of one worker (uvicorn's factory), from :data:`SETTINGS_VARIABLE`; with
    :data:`READY_VARIABLE`, the worker says it is ready there once the app is built.
    A worker of ``--workers N`` that cannot (the key file, the keyring or the store changed
    since the supervisor read them: a worker started in the place of one that died reads
    them again) says why in one line and ends with uvicorn's status for a failed start, on
    which the supervisor stops (:mod:`pithlog.net.supervisor`). Such a worker ignores
    SIGHUP: its supervisor says that ``serve`` does not reload (a terminal's hang-up
    reaches them all)."""
    settings = Settings.decode(os.environ[SETTINGS_VARIABLE])
    if not os.environ.get(SUPERVISED_VARIABLE):
        return _built(settings)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    _end_with_supervisor()
    try:
        return _built(settings)
    except PithlogError as exc:
        # uvicorn's log, which goes to stderr: the layers below the command print nothing
        logging.getLogger("uvicorn.error").error("a worker could not start: %s",
                                                 exc.describe())  # fmt: skip
        sys.exit(STARTUP_FAILURE)


def _built(settings: Settings) -> Starlette:
    """The app of ``settings``, said ready in :data:`READY_VARIABLE`'s folder."""
    app = witness_app(settings) if settings.witness else create_app(open_config(settings))
    folder = os.environ.get(READY_VARIABLE)
    if folder is not None:
        # a worker restarted after the supervisor said it was ready finds the folder gone
        with contextlib.suppress(OSError), open(os.path.join(folder, str(os.getpid())), "x"):
            pass
    return app


def _end_with_supervisor() -> None:
    """A worker of ``serve --workers N`` ends when its supervisor has ended, however it
    ended (``kill -9`` included), as a pool's workers do: otherwise it went on serving and
    committing on a port no command held, and a restarted ``serve`` could not listen
    there. It stops as a service manager stops it (SIGTERM: the requests in flight are
    answered, each after its commit), and at once :data:`SUPERVISOR_GONE_GRACE` later."""
    supervisor = multiprocessing.parent_process()
    if supervisor is None:
        return

    def watch() -> None:
        multiprocessing.connection.wait([supervisor.sentinel])
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(SUPERVISOR_GONE_GRACE)
        os._exit(1)

    threading.Thread(target=watch, name="pithlog-supervisor", daemon=True).start()


def parse_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8080`` for IPv6) -> host and port."""
    host, colon, port = listen.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not colon or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise UsageError("arguments", f"--listen {listen!r} is not HOST:PORT (port 0-65535)")
    return host, int(port)


def _tcp_socket(family: int, kind: type[socket.socket] = socket.socket,
                reuse_port: bool = False) -> socket.socket:  # fmt: skip
    # IPPROTO_TCP named: asyncio sets TCP_NODELAY only on connections of a socket that says
    # so, and without it an answer's body waits for the ACK of its headers (the client
    # delays that ACK by up to 40 ms: 20 requests/s on a kept-alive connection)
    sock = kind(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    return sock


def bind(host: str, port: int, *, hold: bool = False) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: the kernel picks a free one); with
    ``hold``, a :class:`PortHold` there instead, which listens in each worker."""
    try:
        info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        address = info[4]
        if hold:
            # SO_REUSEPORT would join the listeners any process of this user has there with
            # the same option (another `serve --workers N`): one URL serving two logs. A
            # socket without it cannot bind beside a listener, so it tells a port in use,
            # and picks the port for `:0`.
            with _tcp_socket(info[0]) as probe:
                probe.bind(address)
                address = probe.getsockname()
        sock = _tcp_socket(info[0], PortHold if hold else socket.socket, reuse_port=hold)
        sock.bind(address)
        if not hold:
            sock.listen(BACKLOG)
    except OSError as exc:
        raise UsageError("arguments", f"cannot listen on {host}:{port}: "
                         f"{exc.strerror or exc}") from exc  # fmt: skip
    sock.set_inheritable(True)
    return sock


class PortHold(socket.socket):
    """The supervisor's socket with ``--workers N``: bound with ``SO_REUSEPORT`` and never
    listening, it holds the port (``--listen HOST:0`` picks it once) while each worker
    listens on a socket of its own in the same group (:func:`listen_beside`), and the
    kernel spreads new connections over the workers by their addresses. On one shared
    socket, the worker that wakes first for a connection takes it: in four runs of the
    bench's 32 submitters, one of two workers took 17, 19, 22 and all 32 of their
    connections (``docs/network.md``). uvicorn
    hands every worker the supervisor's sockets, pickled: this one unpickles in the
    worker as that worker's own listening socket."""

    def __reduce__(self) -> tuple[Callable[[int, Any], socket.socket], tuple[int, Any]]:
        return listen_beside, (int(self.family), self.getsockname())


def listen_beside(family: int, address: Any) -> socket.socket:
    """A worker's own listening socket on the address a :class:`PortHold` holds."""
    sock = _tcp_socket(family, reuse_port=True)
    sock.bind(address)
    sock.listen(BACKLOG)
    return sock


@contextlib.contextmanager
def environment(variables: dict[str, str]) -> Iterator[None]:
    """``variables`` in the environment while the server runs (its workers, spawned, read
    them), and the environment as it was afterwards: a program that calls
    :func:`pithlog.cli.main` keeps its own, as it keeps its garbage collector's setting
    (``docs/cli.md``)."""
    before = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def serve(settings: Settings, listen: str, workers: int, ready: Callable[[str], None],
          key_read: KeyFileRead | None = None) -> None:  # fmt: skip
    """Serve until SIGINT or SIGTERM (uvicorn shuts down gracefully, then re-raises the
    signal); SIGHUP is ignored with one line (:func:`no_reload`). ``ready`` gets the URL
    once the socket listens (one worker: connections made before it is up wait in the
    backlog), or once every worker is up (several).
    ``key_read`` is told of the key file when it is first read, here, before any worker
    reads it again (:data:`KeyFileRead`)."""
    if workers < 1:
        raise UsageError("arguments", "--workers must be at least 1")
    host, port = parse_listen(listen)
    # fail here, once, on a bad store, key or keyring
    if settings.witness:
        open_witness(settings, key_read)[0].close()
    else:
        open_config(settings, key_read).store.close()
    # the store each worker opens: this one (a worker started later never makes another)
    settings = dataclasses.replace(settings, data_file=data_file(settings.store))
    # several workers: a socket of their own each, where the kernel can spread connections
    sock = bind(host, port, hold=workers > 1 and REUSE_PORT)
    variables = {SETTINGS_VARIABLE: settings.encode()}
    if workers > 1:
        # Each worker keeps its own judging helpers (Store.judging, sized by the cores):
        # N workers share the cores rather than each taking all of them.
        variables[cores.ENV] = str(max(1, usable_cores() // workers))
        variables[SUPERVISED_VARIABLE] = "1"
    config = uvicorn.Config(
        "pithlog.net.server:app_from_environment",
        factory=True,
        workers=workers,
        lifespan="off",
        loop="auto",  # uvloop where pithlog[net] installed it (docs/network.md), else asyncio
        log_config=uvicorn_logs.log_config(),  # without the line of a shutdown's cancels
        log_level="warning",
        access_log=False,
        server_header=False,
        proxy_headers=False,  # pithlog reads neither the client's address nor the scheme
        limit_concurrency=LIMIT_CONCURRENCY,
        timeout_keep_alive=TIMEOUT_KEEP_ALIVE,
        timeout_graceful_shutdown=5,
        ws="none",  # no connection is upgraded: llhttp's upgrades are undone (http_head)
        http=http_head.protocol(),  # httptools, its heads and answers bounded in time and size
    )
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{sock.getsockname()[1]}"
    with sock, contextlib.ExitStack() as stack:
        # With several workers, said once every worker has built its app: on a shared
        # socket a worker accepts every connection waiting in the backlog when it next
        # looks, so clients that connect while the others are still starting would all be
        # its own for as long as they stay connected (32 kept-alive submitters on one of
        # two workers: half the cores idle); on sockets of their own, a connection sent to
        # a worker still starting would wait for it. With one, connections made before its
        # app is built wait in the backlog, and it takes them all.
        folder = _ready_folder(stack) if workers > 1 else None
        stack.enter_context(no_reload())
        server = HeldServer(config) if workers == 1 else None
        if server is not None:
            server.hold()  # a SIGTERM right after the line below stops it as later on
            stack.callback(server.release)
        if folder is None:
            ready(url)
        else:
            variables[READY_VARIABLE] = folder
            done = threading.Event()
            stack.callback(done.set)
            threading.Thread(target=_say_when_ready, args=(folder, workers, done, ready, url),
                             daemon=True).start()  # fmt: skip
        with environment(variables):
            if server is not None:
                server.run(sockets=[sock])
            else:
                Supervisor(config, sockets=[sock]).run()


def _ready_folder(stack: contextlib.ExitStack) -> str | None:
    """A temporary folder for the workers to say they are ready in (:data:`READY_VARIABLE`),
    removed with ``stack``; ``None`` when none can be made: the server is then said to
    listen at once, as with one worker."""
    try:
        return stack.enter_context(tempfile.TemporaryDirectory(prefix="pithlog-serve-"))
    except OSError:
        return None


def _say_when_ready(folder: str, workers: int, done: threading.Event,
                    ready: Callable[[str], None], url: str) -> None:  # fmt: skip
    """``ready(url)`` once ``workers`` workers have said so in ``folder``
    (:func:`app_from_environment`), unless the server stops first (``done``)."""
    while not done.wait(READY_POLL_SECONDS):
        try:
            count = len(os.listdir(folder))
        except OSError:
            return
        if count >= workers:
            ready(url)
            return
