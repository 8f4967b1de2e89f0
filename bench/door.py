"""The door's cost per line for each form producers write, on one core.

Run by `make bench` after the stage table (or alone: `python bench/door.py [N]`). The same
events of the registry workload are written in each of :data:`workload.FORMS`; each figure
is microseconds of CPU per line through ``parse_envelope`` (the door as ``reduce`` and
``append`` use it), the best of :data:`PASSES` passes with the cyclic garbage collector
paused as the CLI pauses it. The passes go round the forms in turn, and CPU time is
counted rather than wall time, so that other work on a shared machine moves every form's
figure alike instead of one form's alone. Beside it: the ratio to the JCS lines against
the bound of issue 23 (1.3x for the producer's compact form, 2x for the others), the share
of lines the fast door proved (it hands the rest to the exact door), and the exact door
alone on the same lines.
"""

from __future__ import annotations

import gc
import itertools
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import workload

from pithlog.protocol.canonical import decode_fast, jcs, parse_exact
from pithlog.protocol.events import admit, parse_envelope

PASSES = 7
BOUND = {"jcs": 1.0, "producer": 1.3}
"""The most each form may cost per line, as a multiple of the JCS lines (2x if not named)."""


def cpu(func: Callable[[], object]) -> float:
    """CPU seconds of this process for one call of ``func``."""
    start = time.process_time()
    func()
    return time.process_time() - start


def fast_door(lines: list[bytes]) -> None:
    for line in lines:
        parse_envelope(line)


def exact_door(lines: list[bytes]) -> None:
    for line in lines:
        value = parse_exact(line)
        admit(value, jcs(value))


def rows(count: int) -> list[tuple[str, float, float, float]]:
    """``(form, fast us per line, exact us per line, share proved fast)`` for each form."""
    events = [json.loads(line) for line in itertools.islice(workload.registry(count), count)]
    lines = {form: [workload.written(e, form) for e in events] for form in workload.FORMS}
    fast = dict.fromkeys(workload.FORMS, float("inf"))
    exact = dict.fromkeys(workload.FORMS, float("inf"))
    for _ in range(PASSES):
        for form, some in lines.items():
            fast[form] = min(fast[form], cpu(lambda s=some: fast_door(s)))  # type: ignore[misc]
    for _ in range(2):
        for form, some in lines.items():
            exact[form] = min(exact[form], cpu(lambda s=some: exact_door(s)))  # type: ignore[misc]
    out = []
    for form, some in lines.items():
        proved = sum(decode_fast(x) is not None for x in some) / len(some)
        out.append((form, fast[form] / len(some) * 1e6, exact[form] / len(some) * 1e6, proved))
    return out


def table(count: int = 2000) -> str:
    was = gc.isenabled()
    gc.disable()
    try:
        measured = rows(count)
    finally:
        if was:
            gc.enable()
    base = measured[[m[0] for m in measured].index("jcs")][1]
    out = ["| form (one core) | door us per line | vs JCS lines (bound) | proved by the fast door "
           "| exact door alone, us per line |", "|---|---|---|---|---|"]  # fmt: skip
    for form, fast, exact, proved in measured:
        bound = BOUND.get(form, 2.0)
        out.append(f"| {form} | {fast:,.1f} | {fast / base:.2f}x ({bound:.1f}x) "
                   f"| {proved:.0%} | {exact:,.1f} |")  # fmt: skip
    return "\n".join(out)


def main(argv: list[str]) -> int:
    print(table(int(argv[0]) if argv else 2000))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
