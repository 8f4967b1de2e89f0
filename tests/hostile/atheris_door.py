"""Coverage-guided fuzzing of the door and checks 1-12 with atheris (libFuzzer).

Optional: atheris is not a dependency of pithlog. ``make fuzz`` runs this harness after
the Hypothesis tests when ``import atheris`` works, for example after
``.venv/bin/pip install atheris``. By hand::

    .venv/bin/python tests/hostile/atheris_door.py -atheris_runs=100000 [CORPUS_DIR ...]

Without a corpus folder it starts from the valid events of ``corpus.py`` (written to a
temporary folder). Each input must meet what ``test_door_fuzz.py`` and
``test_differential.py`` assert: only DoorError escapes the door; an accepted value
re-canonicalizes; the fast and the plain path agree; a changed event is never valid.
Not collected by pytest (the name does not start with ``test_``).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import atheris

with atheris.instrument_imports():
    from pithlog.errors import DoorError
    from pithlog.protocol.canonical import jcs, jcs_reference, parse_exact
    from pithlog.protocol.checks import check_alone
    from pithlog.protocol.events import admit, parse_envelope

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import KEYRING, ORIGINALS

ORIGINAL_SET = frozenset(ORIGINALS)


def plain(data: bytes) -> tuple[str, bytes | str]:
    try:
        value = parse_exact(data)
        return "ok", admit(value, jcs_reference(value)).encoded
    except DoorError as exc:
        return "refused", exc.code


def one_input(data: bytes) -> None:
    try:
        envelope = parse_envelope(data)
    except DoorError as exc:
        assert exc.describe().isprintable()
        slow = plain(data)
        assert slow[0] == "refused", (data, exc.code, slow)
        assert exc.code == "door.too_large" or slow[1] == exc.code, (data, exc.code, slow)
        return
    assert envelope.encoded == jcs(envelope.value) == jcs_reference(envelope.value)
    assert plain(data) == ("ok", envelope.encoded)
    if check_alone(envelope, KEYRING) is None:
        assert envelope.encoded in ORIGINAL_SET, data


def main() -> None:
    argv = list(sys.argv)
    if not any(not arg.startswith("-") for arg in argv[1:]):
        seeds = Path(tempfile.mkdtemp(prefix="pithlog-atheris-"))
        for i, original in enumerate(ORIGINALS):
            (seeds / f"valid-{i}").write_bytes(original)
        argv.append(str(seeds))
    atheris.Setup(argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
