"""Ctrl-C and SIGTERM between ``serve: listening on ...`` and uvicorn's own handlers;
and SIGHUP, which ``serve`` ignores with one line (:func:`no_reload`).

``serve`` with one worker says it listens before uvicorn starts (connections made meanwhile
wait in the backlog), and uvicorn takes SIGINT and SIGTERM only once its event loop runs
(``Server.capture_signals``). A SIGTERM in between, as a service manager or a test sends
one right after that line, was raised as an interrupt wherever the program stood: inside
the event loop's start it left a ``coroutine 'Server.serve' was never awaited`` warning on
stderr, and once in about thirty starts on a busy machine it was lost, the server serving
on until killed. :class:`HeldServer` holds such a signal from before the line is said, and
hands it to uvicorn as uvicorn's handlers take over: the server stops as it stops on a
signal (gracefully, then the signal raised again, so the command ends with its one line
and status).
"""

from __future__ import annotations

import contextlib
import logging
import signal
from collections.abc import Generator, Iterator
from types import FrameType
from typing import Any

import uvicorn

HELD = (signal.SIGINT, signal.SIGTERM)
NO_RELOAD = ("SIGHUP ignored: serve does not reload (it reads the key, the keyring and the "
             "store when it starts); restart it to read them again")  # fmt: skip
"""The line said on SIGHUP (``docs/network.md``, "The command"), at ``warning`` in
uvicorn's log."""


def say_no_reload() -> None:
    """Say :data:`NO_RELOAD` in uvicorn's log (stderr)."""
    logging.getLogger("uvicorn.error").warning(NO_RELOAD)


@contextlib.contextmanager
def no_reload() -> Iterator[None]:
    """SIGHUP ignored with :data:`NO_RELOAD` while the server runs (call in the main
    thread), the handler from before put back after. Its default action ended ``serve``
    at once, the requests in flight cut and nothing said, while uvicorn's supervisor of
    ``--workers N`` replaced every worker on it instead (:class:`~pithlog.net.supervisor.
    Supervisor` says the line there); ``systemctl reload`` sends it."""
    before = signal.signal(signal.SIGHUP, lambda sig, frame: say_no_reload())
    try:
        yield
    finally:
        signal.signal(signal.SIGHUP, before)


class HeldServer(uvicorn.Server):
    """A :class:`uvicorn.Server` whose SIGINT and SIGTERM are held from :meth:`hold` on,
    until its own handlers take them."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._held: list[int] = []
        self._before: dict[int, Any] = {}

    def hold(self) -> None:
        """From now on, note SIGINT and SIGTERM instead of acting on them (call in the main
        thread, before saying the server is ready)."""
        for sig in HELD:
            self._before[sig] = signal.signal(sig, self._note)

    def release(self) -> None:
        """The handlers from before :meth:`hold` again: once uvicorn's have given way, or
        when uvicorn never took over (the server did not start)."""
        for sig, handler in self._before.items():
            signal.signal(sig, handler)
        self._before.clear()

    def _note(self, sig: int, frame: FrameType | None) -> None:
        self._held.append(sig)

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        # uvicorn's handlers take the place of _note itself, so that a signal is either held
        # or theirs: the handlers from before hold() put back first left a gap in which a
        # SIGTERM was raised inside the event loop's start instead of stopping the server
        with super().capture_signals():
            held, self._held = self._held, []
            for sig in held:  # arrived before uvicorn listened for them
                self.handle_exit(sig, None)
            yield
        # uvicorn put _note back and raised each signal it captured into it: they are
        # raised again with the handlers from before hold(), which end the command with
        # its one line and status (Terminated, KeyboardInterrupt)
        noted, self._held = self._held, []
        self.release()
        for sig in noted:
            signal.raise_signal(sig)
