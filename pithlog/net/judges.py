"""The judging helpers of ``pithlog serve --submit``, fed by the server's event loop itself.

Each helper is a process of its own (``python -m pithlog.cli.judge_helper``, running
:mod:`pithlog.store.judge_stdio`) that judges raw lines as an append's helpers do: the
door, checks 1-12 and their signatures, the store's packing. The event loop writes each
part of lines to a helper's standard input and reads its judgements from the helper's
standard output as they come, with no thread between them. A ``concurrent.futures`` pool
(which the server used before) takes each part through a queue's feeder thread and
brings each answer back through its manager thread, and in a server each of those
threads waits for the interpreter lock that the event loop holds. Measured on 2 cores
with 32 single-event submitters, per submitted event: the server's process spent 231-240
us of CPU and its helpers 172-178 us with such a pool, 178-183 us and 126-131 us fed
this way; 1.25x the submissions/s in paired rounds (``docs/submit-speed.md``).

A request's judgement is known to the event loop the moment it arrives, so the group
commit (:mod:`pithlog.net.submit`) writes only what is judged and never waits on a helper
inside a write transaction. A helper that ends (killed, out of memory) fails its parts
with :class:`~concurrent.futures.process.BrokenProcessPool`, and the write transaction
judges them itself (:func:`pithlog.store.append_judging.receive`); the next request
starts new helpers. A helper that holds parts and answers nothing for
:data:`SILENT_SECONDS` (stopped, swapped out, stuck) is killed and counts as ended: the
group commit waits for the judgement at the head of its queue, so one such helper held
every submission of the worker, unanswered, for as long as it stayed silent. The helpers
end when the server closes their input or ends, however it ends: they read nothing else.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import os
import pickle
import site
import sys
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from pithlog.protocol.keys import Keyring
from pithlog.store import SentBatch
from pithlog.store.append_judging import JudgedPart, send_each
from pithlog.store.judge_stdio import FRAME, frame

SHARES = 1
"""Parts per helper that the requests of one turn are cut into: one, since each part goes
to the helper with the fewest lines waiting (a pool's idle workers pull tasks instead, and
two parts each let the pool even out)."""

SILENT_SECONDS = 10.0
"""How long a helper holding parts may answer none of them before it is taken for hung,
killed and its parts judged by the write transaction (:meth:`LoopJudging.until_judged`). A
part is at most :data:`~pithlog.store.append_judging.JUDGE_PART` lines of one request's
body (8 MiB by default), which a helper judges in well under a second: a helper silent
for this long is not working on it."""


class _Helper:
    """One helper process and the parts it was sent, oldest first."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.waiting: collections.deque[tuple[Future[JudgedPart], int]] = collections.deque()
        self.lines = 0
        """Lines sent and not yet judged: the next part goes to the helper with fewest."""
        self.alive = True
        self.loop = asyncio.get_running_loop()
        self.heard = self.loop.time()
        """When this helper last answered a part, or was given one with none waiting: a
        helper with parts waiting that has been silent since long ago is hung."""
        self.reading = self.loop.create_task(self._read())

    def send(self, lines: list[bytes]) -> Future[JudgedPart]:
        stdin = self.process.stdin
        if not self.alive or stdin is None or stdin.is_closing():
            raise BrokenProcessPool("a judging helper ended")
        # The transport buffers what the pipe does not take at once: bounded by the
        # submissions the server holds (Limits.max_pending bodies).
        stdin.write(frame(lines))
        if not self.waiting:
            self.heard = self.loop.time()
        future: Future[JudgedPart] = Future()
        self.waiting.append((future, len(lines)))
        self.lines += len(lines)
        return future

    async def _read(self) -> None:
        stdout = self.process.stdout
        assert stdout is not None
        try:
            while True:
                (length,) = FRAME.unpack(await stdout.readexactly(FRAME.size))
                judged: JudgedPart = pickle.loads(await stdout.readexactly(length))
                future, count = self.waiting.popleft()
                self.lines -= count
                self.heard = self.loop.time()
                future.set_result(judged)
        except (asyncio.IncompleteReadError, ConnectionError, IndexError):
            pass  # the helper ended (or answered what it was not asked: ended all the same)
        finally:
            self.end()

    def silent(self, seconds: float) -> bool:
        """Whether this helper holds parts and has answered none for ``seconds``."""
        return self.alive and bool(self.waiting) and self.loop.time() - self.heard >= seconds

    def kill(self) -> None:
        """End a hung helper: its parts fail now (judged by whoever receives them), and
        the process is killed, so that the next request starts a new one."""
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.end()

    def end(self) -> None:
        """Fail every part still waiting: whoever receives them judges them."""
        self.alive = False
        while self.waiting:
            future, _ = self.waiting.popleft()
            future.set_exception(BrokenProcessPool("a judging helper ended"))
        self.lines = 0


class LoopJudging:
    """``processes`` judging helpers for one keyring, fed from the running event loop:
    :meth:`start` (and again whenever :attr:`ready` is false), then :meth:`send_each` for
    each turn's requests, :meth:`close` at the end."""

    def __init__(self, path: str, keyring: Keyring, processes: int) -> None:
        self.path = path
        self.keyring = keyring
        self.processes = processes
        self._helpers: list[_Helper] = []

    @property
    def ready(self) -> bool:
        """Whether every helper runs (else :meth:`start` starts new ones)."""
        return len(self._helpers) == self.processes and all(h.alive for h in self._helpers)

    async def start(self) -> None:
        """Start the helpers that are not running (all of them the first time)."""
        self._helpers = [h for h in self._helpers if h.alive]
        entries = [key.entry() for key in self.keyring.values()]
        while len(self._helpers) < self.processes:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "pithlog.cli.judge_helper",
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                # its own session: a terminal's Ctrl-C is the server's to handle
                start_new_session=True, env=_environment(),
            )  # fmt: skip
            assert process.stdin is not None
            process.stdin.write(frame((self.path, entries)))
            self._helpers.append(_Helper(process))

    def send_each(self, batches: list[list[bytes]]) -> list[SentBatch]:
        """Start judging each batch (each request's lines), as
        :meth:`pithlog.store.Judging.send_each` does, in parts shared out among the
        helpers; a part no helper can take is judged by whoever receives it."""
        return send_each(self._submit, max(1, self.processes), batches, SHARES)

    async def until_judged(self, sent: SentBatch) -> None:
        """:func:`until_judged`, killing on the way every helper that holds parts and has
        answered none for :data:`SILENT_SECONDS` (:meth:`_Helper.kill`): ``sent`` is then
        judged (its parts of such a helper failed, for the write transaction to judge)."""
        loop = asyncio.get_running_loop()
        while not judged(sent):
            # until the first helper holding parts has been silent for SILENT_SECONDS
            busy = [h.heard for h in self._helpers if h.alive and h.waiting]
            wait = min(busy, default=loop.time()) + SILENT_SECONDS - loop.time()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(until_judged(sent), max(wait, 0.0))
            for helper in self._helpers:
                if helper.silent(SILENT_SECONDS):
                    helper.kill()

    def _submit(self, lines: list[bytes]) -> Future[JudgedPart]:
        alive = [h for h in self._helpers if h.alive]
        if not alive:
            raise BrokenProcessPool("no judging helper runs")
        return min(alive, key=lambda h: h.lines).send(lines)

    async def close(self) -> None:
        """Close the helpers' input (they end), and wait for them."""
        helpers, self._helpers = self._helpers, []
        for helper in helpers:
            if helper.process.stdin is not None:
                helper.process.stdin.close()
        for helper in helpers:
            await helper.process.wait()
            await helper.reading


def _environment() -> dict[str, str]:
    """This process's environment, with the import path the helper needs to find this
    pithlog (:func:`import_path`)."""
    env = dict(os.environ)
    here = str(Path(__file__).resolve().parents[2])  # the folder holding pithlog/
    sites = [*site.getsitepackages(), site.getusersitepackages()]
    path = import_path(here, [str(Path(s).resolve()) for s in sites], env.get("PYTHONPATH"))
    if path is not None:
        env["PYTHONPATH"] = path
    return env


def import_path(here: str, sites: list[str], current: str | None) -> str | None:
    """The helper's ``PYTHONPATH``: ``current`` with ``here`` (the folder holding pithlog)
    first when it is not a site folder (a source checkout, an editable install that a
    new interpreter started elsewhere might not find first); ``None`` to leave it as it
    is. A site folder is never put there: ``PYTHONPATH`` comes before the standard
    library, where a package of the site folder could then hide a module of it."""
    if here in sites:
        return None
    return os.pathsep.join(p for p in (here, current) if p)


def judged(sent: SentBatch) -> bool:
    """Whether every part of ``sent`` has its judgement (or its helper's end)."""
    return all(part.future is None or part.future.done() for part in sent.parts)


async def until_judged(sent: SentBatch) -> None:
    """Wait until :func:`judged` is true of ``sent`` (its futures are settled by the event
    loop's own thread: :class:`LoopJudging`)."""
    loop = asyncio.get_running_loop()
    for part in sent.parts:
        if part.future is not None and not part.future.done():
            settled: asyncio.Future[None] = loop.create_future()
            part.future.add_done_callback(functools.partial(_settle, settled))
            await settled


def _settle(settled: asyncio.Future[None], _: object) -> None:
    if not settled.done():
        settled.set_result(None)
