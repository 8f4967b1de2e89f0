"""The ``pithlog`` command line: argv in, bytes out, a documented exit status
(``docs/cli.md``). :func:`entry` is the console script (and ``python -m pithlog``);
:func:`main` runs one command in a program that embeds it.

Importing the command line (:mod:`~pithlog.cli.program`: the store, the network, every
command's parsers) takes about half a second, a part of every command: a Ctrl-C in that
time printed a traceback of the import, and a SIGTERM ended the program without a word.
So this package imports nothing of it until asked (PEP 562), and :func:`entry` makes
SIGTERM an interrupt before it imports it: from its first instruction, an interrupt ends
a command with one line and status 130 (SIGTERM: 143), as it does later on.
"""

from __future__ import annotations

import contextlib
import sys
from typing import TYPE_CHECKING, Any, NoReturn

from pithlog.cli.stops import stop_said, terminate_as_interrupt
from pithlog.errors import EXIT_INTERRUPTED, EXIT_TERMINATED, Terminated

if TYPE_CHECKING:
    from pithlog.cli.program import EPILOG, Command, build_parser, main

_FROM_PROGRAM = frozenset({"EPILOG", "Command", "build_parser", "main"})
"""The names of :mod:`pithlog.cli.program` that are also this package's."""


def __getattr__(name: str) -> Any:
    if name in _FROM_PROGRAM:
        from pithlog.cli import program

        return getattr(program, name)
    raise AttributeError(f"module 'pithlog.cli' has no attribute {name!r}")


def entry() -> NoReturn:
    """Console-script entry point: run the command of ``sys.argv`` and exit with its
    status, SIGTERM stopping it as Ctrl-C does."""
    terminate_as_interrupt()
    try:
        from pithlog.cli import program

        # In the try: an interrupt before main() handles it (or after, in the last flush)
        # still ends the command with the line main() prints.
        program.run()
    except Terminated:
        _stopped("terminated", EXIT_TERMINATED)
    except KeyboardInterrupt:
        _stopped("interrupted", EXIT_INTERRUPTED)


def _stopped(how: str, status: int) -> NoReturn:
    """Say ``pithlog: interrupted`` (or ``terminated``) on stderr, as :func:`main` does, once
    whatever signals come next (:func:`~pithlog.cli.stops.stop_said`), and exit with
    ``status``."""
    with stop_said(console=True):
        if sys.stderr is not None:  # started with stderr closed (`2>&-`)
            # a stderr that cannot be written loses the line, not the status
            with contextlib.suppress(OSError):
                print(f"pithlog: {how}", file=sys.stderr, flush=True)
    sys.exit(status)


__all__ = ["EPILOG", "Command", "build_parser", "entry", "main"]
