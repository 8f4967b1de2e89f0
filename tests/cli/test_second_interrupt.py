"""A second Ctrl-C or SIGTERM while the ``pithlog`` program says ``pithlog: interrupted``
(or ``terminated``): the line once, whole, and the status of the first signal. It printed
the line twice (the second signal a KeyboardInterrupt out of main's print, said again by
the console script), or a traceback (one out of the console script's own print)."""

from __future__ import annotations

import signal
import subprocess

import pytest

from tests.cli.test_early_interrupt import python_child

# The child runs the console script's entry point with the command held up where the first
# signal is to land: in main (its parsing, inside main's try) or before main (the whole
# run, as in the import of the command line), saying on stdout when it got there. Then it
# says on stdout when the second signal is to come, and waits: with WAIT "line", once a
# line starting "pithlog:" has been written to stderr up to its newline (print writes that
# apart), so that the signal lands mid-line; with "flush", in the flush of stdout that
# follows main, after the line. Every time, on a busy machine too. It restores Python's
# SIGINT handler: a process started in the background of a non-interactive shell inherits
# SIGINT ignored.
CHILD = """
import os, signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)
from pithlog.cli import entry, program

def held(*args):
    os.write(1, b"running\\n")
    time.sleep(30)

setattr(program, sys.argv.pop(1), held)
WAIT = sys.argv.pop(1)

def waiting():
    os.write(1, b"said\\n")
    time.sleep(2)

class Said:
    def __init__(self, stream):
        self.stream = stream

    def __getattr__(self, name):
        return getattr(self.stream, name)

    def write(self, text):
        written = self.stream.write(text)
        self.stream.flush()
        if WAIT == "line" and text.startswith("pithlog:"):
            waiting()
        return written

    def flush(self):
        self.stream.flush()
        if WAIT == "flush" and self.stream is sys.__stdout__:
            waiting()

    def isatty(self):
        return False

sys.stderr = Said(sys.stderr)
sys.stdout = Said(sys.stdout)
entry()
"""


def _signalled_twice(where: str, pause: str, first: int,
                     second: int) -> tuple[subprocess.Popen[bytes], bytes, bytes]:  # fmt: skip
    """The child held at ``where``, sent ``first``, then ``second`` once it has said its
    stop (and paused after it, at ``pause``): the child, its stdout and its stderr."""
    child = python_child(CHILD, where, pause, "--version")
    assert child.stdout is not None
    try:
        assert child.stdout.readline() == b"running\n"
        child.send_signal(first)
        assert child.stdout.readline() == b"said\n"
        child.send_signal(second)
        out, err = child.communicate(timeout=20)
    finally:
        child.kill()
    return child, out, err


@pytest.mark.parametrize("where", ["_parse", "run"])
@pytest.mark.parametrize(
    ("first", "second", "status", "said"),
    [(signal.SIGINT, signal.SIGINT, 130, "interrupted"),
     (signal.SIGINT, signal.SIGTERM, 130, "interrupted"),
     (signal.SIGTERM, signal.SIGINT, 143, "terminated")],
)  # fmt: skip
def test_a_signal_while_the_stop_is_said_is_not_said_again(
    where: str, first: int, second: int, status: int, said: str
) -> None:
    child, out, err = _signalled_twice(where, "line", first, second)
    assert err.decode() == f"pithlog: {said}\n"
    assert child.returncode == status, err
    assert out == b""


@pytest.mark.parametrize("second", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_after_the_stop_is_said_ends_the_program_saying_nothing(second: int) -> None:
    """Once the line is said, what is left is the program's exit (its last flush of stdout
    may wait on a reader that reads no more): a further signal ends it at once by its
    default action, and nothing more is said."""
    child, out, err = _signalled_twice("_parse", "flush", signal.SIGINT, second)
    assert err.decode() == "pithlog: interrupted\n"
    assert child.returncode == -second, err
    assert out == b""
