"""Write docs/errors.md from pithlog.errors.CODES (`make docs`); a test checks it is current."""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path

import pithlog
from pithlog import errors
from pithlog.errors import CODES

HEAD = """# Error codes

Every refusal pithlog makes on purpose is a `PithlogError` with a stable code
`family.detail`. The CLI prints it as one line, `pithlog: [code] message (at where)`, and
exits with the status the table gives: `2` (bad input or usage) for most codes; `1` for
those that say a verification failed (a checkpoint, a proof, a mirrored log or evidence
that does not hold what it claims), as when a check the command makes fails (`replay`,
`verify-state`); `3` for `checkpoint.behind` ([cli.md](cli.md), "Exit status"). Reason
codes inside state documents (`malformed`, `bad_signature`, ...) are not errors: they are
the spec's (section 6). A message may quote what was sent: one longer than 2,000
characters is cut to 2,000 at most (`MAX_MESSAGE`), keeping its first 1,450 and its last
500 and saying how many were cut between, in the CLI's line and in the server's JSON alike;
the place (`at where`: a JSON Pointer holds the member names it passes) is cut the same way
to 500 (`MAX_WHERE`), its last 200 kept.

This page is generated from `pithlog/errors.py` by `scripts/errors_doc.py`; a test fails
when the two differ.

| code | exit | what to do |
|---|---|---|
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def exit_status(code: str) -> int:
    """The CLI's exit status for ``code``: that of an error of its family and detail."""
    family, _, detail = code.partition(".")
    classes = {cls.family: cls for cls in vars(errors).values()
               if isinstance(cls, type) and issubclass(cls, errors.PithlogError)}  # fmt: skip
    return classes[family](detail, "").exit_status


def render() -> str:
    for module in pkgutil.walk_packages(pithlog.__path__, "pithlog."):
        if module.name != "pithlog.__main__":
            importlib.import_module(module.name)  # modules may register codes of their own
    rows = "".join(f"| `{code}` | {exit_status(code)} | {_cell(CODES[code])} |\n"
                   for code in sorted(CODES))  # fmt: skip
    return HEAD + rows


if __name__ == "__main__":
    target = Path(__file__).resolve().parent.parent / "docs" / "errors.md"
    target.write_text(render(), encoding="utf-8")
    sys.stdout.write(f"wrote {target}\n")
