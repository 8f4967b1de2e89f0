"""How a command stops on Ctrl-C and SIGTERM: SIGTERM raised as
:class:`~pithlog.errors.Terminated` where Ctrl-C raises KeyboardInterrupt, and the one
line that says so said once. Imported by :func:`pithlog.cli.entry` before the rest of the
command line, so it imports nothing of pithlog but :mod:`pithlog.errors`."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

from pithlog.errors import Terminated

_saying: list[bool] = []
"""Not empty while :func:`stop_said` says a stop: see :func:`raise_terminated`."""


def raise_terminated(signum: int, frame: FrameType | None) -> None:
    """The SIGTERM handler of :func:`terminate_as_interrupt`. While a stop is being said
    it raises nothing: :func:`stop_said` ignores SIGINT, then SIGTERM, and a SIGTERM
    between the two would otherwise be raised out of the very handler that says the stop,
    out of :func:`pithlog.cli.main` (which never raises)."""
    if not _saying:
        raise Terminated


def terminate_as_interrupt() -> None:
    """Make SIGTERM stop the program as Ctrl-C does (the batch being written finished and
    printed, helpers stopped, output flushed) instead of ending it on the spot. For the
    console script, which calls it first of all (:func:`pithlog.cli.entry`): a program that
    embeds :func:`pithlog.cli.main` keeps its own SIGTERM. Here, below every layer, so that
    the console script installs it before it imports the rest of pithlog."""
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, raise_terminated)


@contextlib.contextmanager
def stop_said(console: bool) -> Iterator[None]:
    """Ignore SIGINT and SIGTERM while a stop's one line (``pithlog: interrupted``,
    ``terminated``) is said: a second Ctrl-C in the middle of it raised a KeyboardInterrupt
    out of the print, which the console script said again (the line twice, or once and a
    half) or, out of its own print, ended in a traceback. After the line, the console
    script's (``console``) further signals end the process by their default action, the
    line not said again: what is left is its exit, whose last flush of stdout may wait on
    a reader that reads no more (a shell then sees 130 or 143 all the same); a program
    that embeds :func:`pithlog.cli.main` has its own handlers back. Outside the main
    thread nothing is changed (only it can set handlers)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _saying.append(True)
    try:
        before = {signum: signal.signal(signum, signal.SIG_IGN)
                  for signum in (signal.SIGINT, signal.SIGTERM)}  # fmt: skip
        try:
            yield
        finally:
            for signum, handler in before.items():
                # a signal the program was started ignoring (nohup, a background job) stays so
                after = signal.SIG_DFL if console and handler is not signal.SIG_IGN else handler
                signal.signal(signum, after)
    finally:
        _saying.pop()
