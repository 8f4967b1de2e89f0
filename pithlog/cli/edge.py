"""The edge of the command line that every command shares: argument errors as
:class:`~pithlog.errors.UsageError`, the options and argument types of several commands,
opening the store, progress bars, Ctrl-C and SIGTERM. Reading files and stdin and writing
stdout and stderr are :mod:`pithlog.cli.streams`'s."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import signal
import stat
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any, BinaryIO, NoReturn, cast

from pithlog.cli.stops import raise_terminated
from pithlog.cli.streams import Out
from pithlog.errors import DoorError, Terminated, UsageError
from pithlog.protocol.canonical import shape
from pithlog.store import Store
from pithlog.store.environment_walk import Walkers


class Parser(argparse.ArgumentParser):
    """argparse, with usage errors raised as :class:`UsageError` instead of exiting.

    ``intermixed``: options may come between the positionals (``verify-proof PROOF
    --keyring K OLD NEW``), which plain argparse refuses once a positional of ``nargs="*"``
    has been matched empty before an option. Only for a parser without subcommands."""

    intermixed = False
    _parsing_intermixed = False

    def parse_known_args(  # type: ignore[override]
        self, args: Any = None, namespace: Any = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if not self.intermixed or self._parsing_intermixed:
            return super().parse_known_args(args, namespace)
        # parse_known_intermixed_args calls parse_known_args twice (options, then
        # positionals): those calls parse as plain argparse does
        self._parsing_intermixed = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._parsing_intermixed = False

    def error(self, message: str) -> NoReturn:
        raise UsageError("arguments", f"{message} (see '{self.prog} --help')")


class CommandParser(Parser):
    """The parser of one subcommand: an argument it does not know is its error, pointing
    at its own ``--help``. argparse hands such arguments back to the top parser, which
    refused them pointing at ``pithlog --help``, where the command's options are not."""

    def parse_known_args(  # type: ignore[override]
        self, args: Any = None, namespace: Any = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras and not self._parsing_intermixed:  # the first of two intermixed passes
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


def keyring_option(parser: argparse.ArgumentParser) -> None:
    """``--keyring KEYRING``, which every command that checks signatures requires."""
    parser.add_argument("--keyring", required=True, metavar="KEYRING", help="keyring JSON file")


def progress_option(
    parser: argparse.ArgumentParser, what: str = "how much of the input is read"
) -> None:
    """``--progress``: a bar on stderr even when stderr is not a terminal."""
    parser.add_argument("--progress", action="store_true",
                        help=f"show {what} on stderr even when it is not a terminal")  # fmt: skip


@contextlib.contextmanager
def interrupt_held() -> Iterator[Callable[[], type[KeyboardInterrupt] | None]]:
    """Hold Ctrl-C (SIGINT), and SIGTERM when :func:`terminate_as_interrupt` handles it,
    while the block runs: the lines of a committed batch are then printed whole. Yields a
    function giving the exception of the signal that came, if one did; a second signal is
    not held, so that a blocked write (a pager not reading) can still be interrupted. A
    signal whose handler is not pithlog's or Python's own is left alone, and nothing is
    held outside the main thread."""
    held: dict[int, type[KeyboardInterrupt]] = {}
    if threading.current_thread() is threading.main_thread():
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            held[signal.SIGINT] = KeyboardInterrupt
        if signal.getsignal(signal.SIGTERM) is raise_terminated:
            held[signal.SIGTERM] = Terminated
    came: list[type[KeyboardInterrupt]] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        if came:
            raise held[signum]
        came.append(held[signum])

    previous = {signum: signal.getsignal(signum) for signum in held}
    for signum in held:
        signal.signal(signum, hold)
    try:
        yield lambda: came[0] if came else None
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


_READ_ARGUMENTS = {"keyring": "--keyring", "witness_keyring": "--witness-keyring",
                   "key": "--key", "source": "--from", "checkpoint": "--checkpoint",
                   "payload": "--payload", "entry": "ENTRY_OR_KEYFILE", "state": "STATE",
                   "proof": "PROOF", "checkpoints": "CHECKPOINT", "events": "EVENTS"}
"""The arguments a command reads a file from (``-``: standard input), as --help names
them; :data:`_POSITIONAL` where a command names one otherwise."""
_POSITIONAL = {("append", "events"): "FILE", ("import", "events"): "FILE",
               ("keyring", "keyring"): "KEYRING", ("verify-checkpoint", "checkpoint"): "CHECKPOINT"}


def one_standard_input(args: argparse.Namespace) -> None:
    """Refuse two arguments given as ``-``: standard input can be read once, so the second
    reader saw nothing (``cat keyring.json | pithlog append --keyring -``, whose FILE is
    ``-`` by default, read the keyring, then no events, and said there was nothing to
    do)."""
    command = str(getattr(args, "command", ""))
    named: list[str] = []
    for dest, label in _READ_ARGUMENTS.items():
        value = getattr(args, dest, None)
        for given in value if isinstance(value, list) else [value]:
            if given == "-":
                named.append(_POSITIONAL.get((command, dest), label))
    if len(named) < 2:
        return
    said = (f"{named[0]} twice" if len(set(named)) == 1
            else ", ".join(named[:-1]) + f" and {named[-1]}")  # fmt: skip
    raise UsageError("arguments", f"{said}: - (standard input) can be read once; give all "
                     "but one of them as files")


DEFAULT_STORE = "pithlog-store"
STORE_HELP = "store folder (default: $PITHLOG_STORE, else ./pithlog-store)"


def store_path(args: argparse.Namespace) -> str:
    path: str | None = getattr(args, "store", None)
    if path == "":  # `--store "$DIR"` with DIR unset: not the default store, silently
        raise UsageError("arguments", "--store is empty: give the store's folder (or leave "
                         "the option out for $PITHLOG_STORE, else ./pithlog-store)")  # fmt: skip
    if path:
        return path
    path = os.environ.get("PITHLOG_STORE")
    if path == "":  # `PITHLOG_STORE=$DIR` with DIR unset: as --store "", not the default
        raise UsageError("arguments", "PITHLOG_STORE is empty: set it to the store's "
                         "folder, or unset it for ./pithlog-store")  # fmt: skip
    return path or DEFAULT_STORE


def open_store(
    args: argparse.Namespace,
    create: bool = False,
    readonly: bool = False,
    check: bool = False,
    walkers: Walkers | None = None,
) -> Store:
    """The store of ``--store``; ``readonly`` for a command that only reads it (LMDB's
    read-only mode: it never waits for a writer, never writes the store, and works on a
    store this user cannot write); ``check`` to walk its data file first (``Store.open``),
    in parts by ``walkers`` when given."""
    return Store.open(store_path(args), create=create, readonly=readonly, check=check,
                      walkers=walkers)  # fmt: skip


def open_store_reached(args: argparse.Namespace, reach: Callable[[], object]) -> Store:
    """The store of ``--store`` for a command that pulls a log from elsewhere (``mirror``,
    ``audit``), made if need be; a store that does not exist yet is made only once
    ``reach()`` (a fetch of the origin's checkpoint, verified) returned, so that a URL that
    does not answer, or answers with a checkpoint that does not verify, leaves no empty
    store behind (``./pithlog-store`` without ``--store``)."""
    if not (Path(store_path(args)) / "data.mdb").exists():
        reach()
    return open_store(args, create=True)


class Bar:
    """Progress on stderr (tqdm), or nothing: ``bar(done, total)`` as work completes, in
    piths, or with ``unit="B"`` in bytes of input."""

    def __init__(self, out: Out, show: bool, desc: str, unit: str = "pith") -> None:
        self._bar: Any = None
        self._out = out
        self._show = show
        self._desc = desc
        self._unit = unit
        self.started = time.time()  # tqdm's clock
        """When the work began: the bar appears at its first report, often after a whole
        batch was committed, and its rate counts from here, not from that report (a rate
        of the batch over no time: 22,724,876 pith/s)."""

    def __call__(self, done: int, total: int | None) -> None:
        if not self._show:
            return
        if self._bar is None:
            from tqdm import tqdm

            self._bar = tqdm(total=total, unit=self._unit, unit_scale=self._unit == "B",
                             desc=self._desc, file=self._out.stderr,
                             dynamic_ncols=True)  # fmt: skip
            self._bar.start_t = self._bar.last_print_t = self.started
        self._bar.update(done - self._bar.n)

    def write(self, line: str) -> bool:
        """Print ``line`` on stderr above the bar, if the bar is shown; say whether it was."""
        if self._bar is None:
            return False
        self._bar.write(line, file=self._out.stderr)
        return True

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


class RekeyBars:
    """The two bars of a keyring change (:data:`pithlog.store.rekey.RekeyProgress`):
    copies judged, then piths re-reduced."""

    def __init__(self, out: Out, show: bool) -> None:
        self._bars = {"judge": Bar(out, show, "rekey: judge", "copy"),
                      "reduce": Bar(out, show, "rekey: reduce", "pith")}  # fmt: skip
        self._judged_at = time.time()

    def __call__(self, stage: str, done: int, total: int) -> None:
        if stage == "reduce":
            self._bars["judge"].close()
        else:
            # the piece that judges the last copies re-reduces in the same commit: the
            # re-reduction began after the piece before it, reported here before
            self._bars["reduce"].started = self._judged_at
            self._judged_at = time.time()
        self._bars[stage](done, total)

    def close(self) -> None:
        for bar in self._bars.values():
            bar.close()


class _Counted:
    """An input stream that reports the bytes read from it to a :class:`Bar`."""

    def __init__(self, stream: BinaryIO, bar: Bar, total: int | None) -> None:
        self._stream = stream
        self._bar = bar
        self._total = total
        self._done = 0

    def read(self, size: int = -1) -> bytes:
        data = self._stream.read(size)
        self._done += len(data)
        self._bar(self._done, self._total)
        return data


@contextlib.contextmanager
def reading(
    stream: BinaryIO, args: argparse.Namespace, out: Out, desc: str
) -> Iterator[BinaryIO]:
    """``stream``, showing on stderr how much of it has been read (:func:`show_progress`):
    as a share of its size when it is a regular file, else as a count of bytes."""
    show = show_progress(args, out)
    if not show:
        yield stream
        return
    total: int | None = None
    with contextlib.suppress(OSError, ValueError, AttributeError):
        info = os.fstat(stream.fileno())
        total = info.st_size if stat.S_ISREG(info.st_mode) else None
    bar = out.bar = Bar(out, show, desc, unit="B")
    try:
        yield cast(BinaryIO, _Counted(stream, bar, total))  # read() is all the readers use
    finally:
        out.bar = None
        bar.close()


def show_progress(args: argparse.Namespace, out: Out) -> bool:
    if args.progress:
        return True
    isatty = getattr(out.stderr, "isatty", None)
    return bool(isatty and isatty())


def json_line(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"


MOST_SECONDS = 86_400.0
"""The longest any time option of the CLI takes (a day)."""


def seconds_from(least: float = 0.0) -> Callable[[str], float]:
    """An argparse type: seconds at most :data:`MOST_SECONDS`, and above 0 (``least`` 0)
    or at least ``least``. ``nan`` and ``inf`` parse as floats, and would reach the event
    loop's timers, which cannot take them (``serve --body-timeout nan`` made every
    submission fail)."""
    lowest = "above 0" if not least else f"of at least {least:g}"

    def seconds(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
        low = value > 0 if not least else value >= least
        if not (low and value <= MOST_SECONDS):  # False for nan as well
            raise argparse.ArgumentTypeError(f"{text!r}: give seconds {lowest} and at most "
                                             f"{MOST_SECONDS:,.0f}")  # fmt: skip
        return value

    return seconds


seconds = seconds_from()
"""Seconds above 0 and at most :data:`MOST_SECONDS` (:func:`seconds_from`)."""


def seconds_or_zero(text: str) -> float:
    """An argparse type: 0 (no limit, where an option's default is one), or
    :func:`seconds`."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if value == 0:
        return 0.0
    try:
        return seconds(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"{text!r}: give 0 (no limit), or seconds above 0 "
                                         f"and at most {MOST_SECONDS:,.0f}") from None


def at_least(least: int) -> Callable[[str], int]:
    """An argparse type: a decimal integer of at least ``least``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"{text!r}: give {least} or more")
        return value

    return parse


def size_arg(value: int | None, name: str) -> int | None:
    if value is not None and value < 0:
        raise UsageError("arguments", f"{name} must be 0 or more")
    return value


StoreParser = Callable[..., Parser]
"""``store_parser(name, **kwargs)``: a subcommand parser with the ``--store`` option."""


def is_json(data: bytes) -> bool:
    """Whether ``data`` is one complete JSON value (syntax only: the door judges the rest).
    Used to tell one document written over several lines from JSON Lines."""
    try:
        shape(data)
    except DoorError:
        return False
    return True


def net_module(name: str, what: str) -> ModuleType:
    """``pithlog.net.NAME``, imported when a command needs it: the HTTP modules come with
    the optional ``pithlog[net]`` extra, so without it ``what`` fails with one line naming
    the extra, and the rest of the CLI works."""
    try:
        return importlib.import_module(f"pithlog.net.{name}")
    except ImportError as exc:
        raise UsageError("net_extra", f"{what} needs the net extra (pip install "
                         f"'pithlog[net]'): {exc}") from exc  # fmt: skip


def served_url(url: str) -> str:
    """A served log's URL, as ``mirror``, ``audit`` and ``sync --from`` take it."""
    if not url.startswith(("http://", "https://")):
        raise UsageError("arguments", f"{url!r} is not an http:// or https:// URL")
    return url


def evidence_folder(name: str) -> Path:
    """``--evidence-dir``, checked before any work: a folder that exists, or can be made,
    and that this process may write into, so that a finding at the end of a long mirror is
    not left without its file (a full disk later still is: the file then goes to the
    temporary folder, :func:`pithlog.net.evidence_files.write_evidence`)."""
    path = Path(name)
    nearest = path
    while not nearest.exists() and nearest != nearest.parent:
        nearest = nearest.parent
    if nearest.exists() and not nearest.is_dir():
        raise UsageError("arguments", f"--evidence-dir {name}: {nearest} is not a folder; "
                         "give a folder for the evidence files")  # fmt: skip
    if not os.access(nearest, os.W_OK | os.X_OK):
        raise UsageError("arguments", f"--evidence-dir {name}: {nearest} cannot be written "
                         "by this user; give a folder it can write")  # fmt: skip
    return path


def not_a_file(path: Path) -> str | None:
    """What is at ``path`` (through symbolic links) when it is there and not a regular
    file (``a folder``, ``a device``, ``a FIFO``, ...), else ``None``. ``--force`` replaces
    a file by renaming the new one over its name: over ``/dev/null`` that renamed a key
    file over the device node itself, which every other program then wrote into."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None  # nothing there, or a link to nothing: the write gives the name
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    return "not a regular file"


def remove_leftovers(path: Path) -> None:
    """Remove the hidden temporary files ``.NAME.tmp-PID`` beside ``path`` that a write of
    it killed outright (``SIGKILL``, a crash) left behind: a rerun has another PID and
    never meets them, and one of ``keygen --force`` holds a private key. Only regular files
    of this user whose process is gone are removed (this process has not made its own
    yet); a live process's file may be a write under way."""
    prefix = f".{path.name}.tmp-"
    try:
        names = os.listdir(path.parent)
    except OSError:
        return  # the write reports the folder
    for name in names:
        pid = name[len(prefix):]
        if not name.startswith(prefix) or not pid.isdecimal() or pid != str(int(pid)):
            continue
        leftover = path.parent / name
        try:
            st = os.lstat(leftover)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                continue
            if int(pid) != os.getpid() and _alive(int(pid)):
                continue
            leftover.unlink()
        except OSError:
            continue  # not ours to remove after all: the write goes on beside it


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):
        return True  # another user's process (EPERM), or no PID pithlog wrote: kept
    return True
