"""``python -m pithlog.cli.judge_helper``: a judging helper of ``pithlog serve --submit``
on this process's standard input and output (:mod:`pithlog.store.judge_stdio`), started
and fed by the server (:mod:`pithlog.net.judges`), never by hand."""

from __future__ import annotations

import os
import sys

from pithlog.errors import PithlogError
from pithlog.store.judge_stdio import serve_frames


def main() -> None:
    # The frames go out on a copy of the standard output; the standard output itself is
    # pointed at the standard error, so that nothing printed here can corrupt a frame.
    out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    try:
        serve_frames(sys.stdin.buffer, out)
    except PithlogError as exc:
        # a store that cannot be opened (gone from under the server, refused to a reader):
        # one line on the server's standard error; the server judges the helper's parts
        print(f"pithlog: judge helper: {exc}", file=sys.stderr)
        sys.exit(2)
    except BrokenPipeError:
        # the server worker ended (kill -9 included) while this helper judged a part: its
        # answer has no reader, and the helper ends as at the end of its input, with no
        # traceback on the server's standard error; what `out` still buffers goes nowhere,
        # or the interpreter's flush at exit would fail again and say so
        nowhere = os.open(os.devnull, os.O_WRONLY)
        os.dup2(nowhere, out.fileno())


if __name__ == "__main__":
    main()
