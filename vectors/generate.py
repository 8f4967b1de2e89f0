"""Generate the conformance vectors of pith-open-graph-merge-v1.

    .venv/bin/python vectors/generate.py [--out DIR]

Writes ``DIR/cases/<case>/`` (keyring.json, events.jsonl, expected.jsonl, pending.json,
intent.json, and log/: the transparency log of events.jsonl), ``DIR/log/`` (the log of
all the cases' events files, one after the other) and ``DIR/index.json``; DIR defaults to
this folder. ``DIR/cases`` and ``DIR/log`` are replaced as a whole. Everything is derived
from the fixed public test keys of :mod:`pithlog.testing` and the seed documents in
``seeds/``: Ed25519 signatures are deterministic, shuffling uses
``random.Random`` with fixed seeds, and nothing reads a clock, so a rerun is byte-identical.

Each event is built with an *intent*: ``applied``, ``equivocation_loser``, ``pending`` (its
pith has no valid record, and the event passed checks 1-12) or the reason code it was built
to fail with. Before writing a case the generator reduces it with :mod:`pithlog` and asserts
that every event came out as intended, so the expected files record what the protocol
requires, not merely what the reducer happens to say.

Digests and event ids of the generated events are computed here with the reference JCS
encoder (``rfc8785``), not with :func:`pithlog.protocol.canonical.jcs`.
The log files (leaves, roots, checkpoint, tiles, proofs) are computed without pithlog
(``casegen/tlog.py``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

# The generator's parts live in casegen/ beside this script; the vectors folder is not
# installed, so it is put on the path for these imports (when this runs as a script it is
# there already; a test loads this file by its path), and taken off again after them.
HERE = Path(__file__).resolve().parent
_ON_PATH = str(HERE) in sys.path
if not _ON_PATH:
    sys.path.insert(0, str(HERE))

from casegen.building import Case  # noqa: E402
from casegen.cases_pending import case_mixed, case_pending, case_predates, case_revoked  # noqa: E402
from casegen.cases_reasons import case_reasons  # noqa: E402
from casegen.cases_seed import case_citations, case_seed  # noqa: E402
from casegen.cases_slots import case_equivocations, case_step0  # noqa: E402
from casegen.cases_types import case_all_types  # noqa: E402
from casegen.writing import write_vectors  # noqa: E402

if not _ON_PATH:
    sys.path.remove(str(HERE))

CASES: tuple[Callable[[], Case], ...] = (
    case_seed,
    case_citations,
    case_all_types,
    case_reasons,
    case_equivocations,
    case_step0,
    case_pending,
    case_mixed,
    case_revoked,
    case_predates,
)


def generate(out_dir: Path) -> None:
    """Write ``out_dir/cases/*`` and ``out_dir/log`` (replacing those folders) and
    ``out_dir/index.json``."""
    write_vectors(out_dir, CASES)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=HERE,
        help="output folder (default: the vectors folder); its cases/ and log/ are replaced",
    )
    args = parser.parse_args(argv)
    generate(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
