"""Write docs/errors.md from pithlog.errors.CODES (`make docs`); a test checks it is current."""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path

import pithlog
from pithlog.errors import CODES

HEAD = """# Error codes

Every refusal pithlog makes on purpose is a `PithlogError` with a stable code
`family.detail`. The CLI prints it as one line, `pithlog: [code] message (at where)`, and
exits with status `2` (bad input or usage); a verification that fails is not an error but a
result, and exits `1`. Reason codes inside state documents (`malformed`, `bad_signature`, ...)
are not errors: they are the spec's (section 6).

This page is generated from `pithlog/errors.py` by `scripts/errors_doc.py`; a test fails
when the two differ.

| code | what to do |
|---|---|
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render() -> str:
    for module in pkgutil.walk_packages(pithlog.__path__, "pithlog."):
        if module.name != "pithlog.__main__":
            importlib.import_module(module.name)  # modules may register codes of their own
    rows = "".join(f"| `{code}` | {_cell(CODES[code])} |\n" for code in sorted(CODES))
    return HEAD + rows


if __name__ == "__main__":
    target = Path(__file__).resolve().parent.parent / "docs" / "errors.md"
    target.write_text(render(), encoding="utf-8")
    sys.stdout.write(f"wrote {target}\n")
