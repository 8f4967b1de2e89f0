"""The ``pithlog`` command line: argv in, bytes out, a documented exit status. Imported by
:func:`pithlog.cli.entry` once it handles Ctrl-C and SIGTERM; :func:`main` and
:func:`build_parser` are also ``pithlog.cli.main`` and ``pithlog.cli.build_parser``.

Exit status (``docs/cli.md``): 0 success; 1 verification failed (a state document or a
store that does not hold what it claims); 2 bad input or usage (a refused line, a bad
keyring, a file that cannot be read, wrong arguments); 3 the store is behind a checkpoint
(``checkpoint.behind``); 130 interrupted; 143 terminated (SIGTERM, under the console
script). Every deliberate failure is a
:class:`~pithlog.errors.PithlogError`, caught once in :func:`main` and printed as one line.

The commands live in one module per group, each with its parsers beside them
(``docs/architecture.md`` lists them): :mod:`~pithlog.cli.offline_commands` (no store),
:mod:`~pithlog.cli.append_commands` and :mod:`~pithlog.cli.store_commands` (a store's
writes and reads), :mod:`~pithlog.cli.transparency_commands` and others;
:mod:`~pithlog.cli.edge` is the file and stream handling they share. Only the
``pithlog.cli`` package parses argv and prints.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import os
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any, NoReturn, cast

from pithlog import __version__
from pithlog.cli import (
    append_commands,
    audit_commands,
    keyring_commands,
    mirror_commands,
    net_commands,
    offline_commands,
    store_commands,
    sync_commands,
    transparency_commands,
    view_commands,
)
from pithlog.cli.edge import (
    STORE_HELP,
    CommandParser,
    Parser,
    one_standard_input,
)
from pithlog.cli.stops import stop_said
from pithlog.cli.streams import ClosedOutput, Out
from pithlog.errors import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TERMINATED,
    HelperLost,
    PithlogError,
    Terminated,
    UsageError,
)

EPILOG = """exit status: 0 success; 1 verification failed; 2 bad input or usage;
3 the store is behind the checkpoint (verify-checkpoint --check-store, prove inclusion
--checkpoint: sync it, not a fork); 130 interrupted (Ctrl-C); 143 terminated (SIGTERM).
Every error is one line: pithlog: [family.detail] message (docs/errors.md lists them).
Helper and worker processes: one per core this process may use (its CPU affinity and
cgroup quota), or $PITHLOG_CORES when set."""


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="pithlog",
        description="Append-only, signed event-log merge engine (pith-open-graph-merge-v1).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"pithlog {__version__}")
    parser.add_argument("--store", metavar="DIR", default=None,
                        help="store folder of the store commands (default: "
                        "$PITHLOG_STORE, else ./pithlog-store)")  # fmt: skip
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=CommandParser)
    sub.required = True

    def store_parser(name: str, **kwargs: Any) -> Parser:
        p: Parser = sub.add_parser(name, **kwargs)
        p.add_argument("--store", metavar="DIR", default=argparse.SUPPRESS, help=STORE_HELP)
        return p

    offline_commands.add_commands(sub, store_parser)
    keyring_commands.add_commands(sub, store_parser)
    append_commands.add_commands(sub, store_parser)
    store_commands.add_commands(sub, store_parser)
    transparency_commands.add_commands(sub, store_parser)
    sync_commands.add_commands(sub, store_parser)
    net_commands.add_commands(sub, store_parser)
    view_commands.add_commands(sub, store_parser)
    mirror_commands.add_commands(sub, store_parser)
    audit_commands.add_commands(sub, store_parser)
    return parser


Command = Callable[[argparse.Namespace, Out], int]


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Run a command with Python's cyclic garbage collector paused.

    A command holds up to hundreds of thousands of decoded events at once: acyclic trees
    of dicts and strings that reference counting frees, which the collector would traverse
    again and again as they accumulate (about 40 % of the door's time over 100k events).
    pithlog builds no reference cycles per event, so nothing waits for the collector; it is
    restored when the command ends. ``serve`` turns it back on for as long as it serves
    (:func:`pithlog.cli.net_commands.collector_running`): the web frameworks it runs leave
    reference cycles on every request.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@contextlib.contextmanager
def _helper_losses_said(out: Out) -> Iterator[None]:
    """Print a :class:`~pithlog.errors.HelperLost` warning as one line on stderr when the
    command ends, however many parts a lost helper held (other warnings as Python shows
    them). Not when SIGTERM ended the command: a service manager's SIGTERM reaches the
    helpers too, which then end as the command does, and that is no news."""
    lost = False
    show = warnings.showwarning

    def say(message: Warning | str, category: type[Warning], *rest: Any, **kw: Any) -> None:
        nonlocal lost
        if issubclass(category, HelperLost):
            lost = True
        else:
            show(message, category, *rest, **kw)

    with warnings.catch_warnings():
        warnings.simplefilter("always", HelperLost)
        warnings.showwarning = say
        try:
            yield
        except Terminated:
            lost = False
            raise
        finally:
            if lost:
                out.say(f"pithlog: warning: {HelperLost.MESSAGE}")


def _parse(argv: Sequence[str] | None, out: Out) -> argparse.Namespace:
    """Parse ``argv``. argparse prints ``--help`` and ``--version`` on ``sys.stdout``: they
    go to the command's stdout instead, as everything else it prints."""
    for number, arg in enumerate(sys.argv[1:] if argv is None else argv, 1):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:  # bytes the system could not decode (surrogateescape)
            shown = repr(os.fsencode(arg))[2:-1]  # the bytes as given: s\xff
            raise UsageError("arguments", f"argument {number} ({shown}) is not "
                             "UTF-8: give pithlog its arguments, file names included, in "
                             "UTF-8") from None  # fmt: skip
    text = io.StringIO()
    try:
        with contextlib.redirect_stdout(text):
            return build_parser().parse_args(argv)
    finally:
        if text.getvalue():
            out.write(text.getvalue().encode("utf-8"))


def main(
    argv: Sequence[str] | None = None,
    stdout: IO[bytes] | None = None,
    stderr: IO[str] | None = None,
) -> int:
    """Run one pithlog command; return its exit status. Never raises a PithlogError."""
    return _command(argv, stdout, stderr, console=False)


def _command(
    argv: Sequence[str] | None,
    stdout: IO[bytes] | None,
    stderr: IO[str] | None,
    console: bool,
) -> int:
    """:func:`main`, in the console script (:func:`run`) when ``console``: the stop of an
    interrupt, said, leaves further signals their default action
    (:func:`~pithlog.cli.stops.stop_said`)."""
    if stdout is None:  # started with standard output closed (`>&-`): sys.stdout is None
        stdout = sys.stdout.buffer if sys.stdout is not None else cast(IO[bytes], ClosedOutput())
    if stderr is None:
        stderr = sys.stderr if sys.stderr is not None else io.StringIO()
    out = Out(stdout, stderr)
    try:
        args = _parse(argv, out)
        one_standard_input(args)
        func: Command = args.func
        with _collector_paused(), _helper_losses_said(out):
            status = func(args, out)
        out.flush()  # here, where a full disk is this command's one-line error
        return status
    except PithlogError as exc:
        out.say(f"pithlog: {exc.describe()}")
        return exc.exit_status
    except SystemExit as exc:  # --help and --version
        return exc.code if isinstance(exc.code, int) else EXIT_OK
    except BrokenPipeError:
        return EXIT_OK
    except Terminated:
        with stop_said(console):  # once, whatever signals come next
            out.say("pithlog: terminated")
        return EXIT_TERMINATED
    except KeyboardInterrupt:
        with stop_said(console):
            out.say("pithlog: interrupted")
        return EXIT_INTERRUPTED


def run() -> NoReturn:
    """Run the command of ``sys.argv`` and exit with its status: the console script's
    command, once :func:`pithlog.cli.entry` has made SIGTERM an interrupt."""
    status = _command(None, None, None, console=True)
    if sys.stdout is not None:
        try:
            sys.stdout.flush()
        except OSError:
            # what could not be written stays buffered, and the interpreter's own flush at
            # exit would print a traceback of it: the rest goes nowhere instead
            nowhere = os.open(os.devnull, os.O_WRONLY)
            os.dup2(nowhere, sys.stdout.fileno())
    sys.exit(status)
