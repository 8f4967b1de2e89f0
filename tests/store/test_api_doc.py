"""docs/api.md is one session of examples: they run, in order, and every ``# -> ...`` says
what its line gives.

A line of an example that ends in ``# -> TEXT`` (or is followed by a comment line
``# -> TEXT``, continued by further ``#`` lines) promises that the expression on it
evaluates to a value whose ``repr`` is TEXT, or, for a ``print(...)`` call, that it prints
TEXT. TEXT may go on with a short explanation after the value (`` (the genuine copy
won)``, ``: no event of it``, ``, twice``). Each such expression is rewritten to hand its
value to the test, so a promise the code no longer keeps fails here, and so does an arrow
that is not on an expression (it could never be checked).
"""

from __future__ import annotations

import ast
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
API_DOC = ROOT / "docs" / "api.md"
ARROW = "# -> "
# What may follow the promised value: an explanation for people.
EXPLANATION = (" (", ": ", ", ")


def blocks(text: str) -> list[str]:
    """The ``python`` fenced blocks of the page, in order."""
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def promise_after(lines: list[str], end: int) -> str | None:
    """The ``# -> `` text of the statement that ends on line ``end`` (1-based), if any."""
    last = lines[end - 1]
    if ARROW in last:
        first, following = last.split(ARROW, 1)[1].strip(), end
    elif end < len(lines) and lines[end].strip().startswith(ARROW):
        first, following = lines[end].strip()[len(ARROW):].strip(), end + 1
    else:
        return None
    parts = [first]
    # A promise too long for one line goes on in comment lines that are not arrows.
    while following < len(lines):
        line = lines[following].strip()
        if not line.startswith("#") or line.startswith(ARROW):
            break
        parts.append(line.lstrip("#").strip())
        following += 1
    return " ".join(parts)


class Promises(ast.NodeTransformer):
    """Rewrites each promised expression to report what it gives, keyed by its line."""

    def __init__(self, lines: list[str], block: int) -> None:
        self.lines = lines
        self.block = block
        self.promised: dict[str, str] = {}

    def visit_Expr(self, node: ast.Expr) -> ast.AST:
        end = node.end_lineno or node.lineno
        promise = promise_after(self.lines, end)
        if promise is None:
            return node
        key = f"block {self.block}, line {node.lineno}: {self.lines[node.lineno - 1].strip()}"
        self.promised[key] = promise
        value = node.value
        func = value.func if isinstance(value, ast.Call) else None
        if isinstance(value, ast.Call) and isinstance(func, ast.Name) and func.id == "print":
            args = [ast.Constant(key), *value.args]
            call = ast.Call(ast.Name("__printed__", ast.Load()), args, [])
        else:
            call = ast.Call(ast.Name("__seen__", ast.Load()), [ast.Constant(key), value], [])
        return ast.copy_location(ast.Expr(call), node)


def arrows_in(source: str) -> int:
    return sum(1 for line in source.splitlines() if ARROW in line)


def keeps(promise: str, given: str) -> bool:
    if promise == given:
        return True
    return promise.startswith(given) and promise[len(given):].startswith(EXPLANATION)


def test_the_examples_of_api_md_run_and_give_what_they_say(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The page says to run from the repository root (one example reads vectors/seeds/);
    # its temporary folders go under this test's own.
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    given: dict[str, list[str]] = {}

    def seen(key: str, value: Any) -> None:
        given.setdefault(key, []).append(repr(value))

    def printed(key: str, *args: Any) -> None:
        given.setdefault(key, []).append(" ".join(str(arg) for arg in args))

    namespace: dict[str, Any] = {"__seen__": seen, "__printed__": printed, "__name__": "api_md"}
    promised: dict[str, str] = {}
    sources = blocks(API_DOC.read_text(encoding="utf-8"))
    assert len(sources) >= 10, "docs/api.md lost its examples"
    for number, source in enumerate(sources):
        lines = source.splitlines()
        promises = Promises(lines, number)
        tree = ast.fix_missing_locations(promises.visit(ast.parse(source)))
        # An arrow that is not on an expression statement is a promise nobody checks.
        assert arrows_in(source) == len(promises.promised), f"block {number}: a lone arrow"
        exec(compile(tree, f"docs/api.md block {number}", "exec"), namespace)
        promised.update(promises.promised)

    assert len(promised) >= 45
    for key, promise in promised.items():
        assert key in given, f"{key}: never ran"
        for value in given[key]:
            assert keeps(promise, value), f"{key}\n  says  {promise}\n  gives {value}"


def test_a_broken_promise_is_seen() -> None:
    """The checker itself: a promise the value does not keep is caught, a kept one passes."""
    lines = ["1 + 1  # -> 2", "sorted('ba')", "# -> ['a',", "#     'b']", "x = 3  # -> 3"]
    promises = Promises(lines, 0)
    promises.visit(ast.parse("\n".join(lines)))
    assert list(promises.promised.values()) == ["2", "['a', 'b']"]
    assert arrows_in("\n".join(lines)) == 3  # the assignment's arrow is not a promise
    assert keeps("2 (two)", "2") and keeps("None: none", "None") and keeps("[1], twice", "[1]")
    assert not keeps("3", "2") and not keeps("23", "2") and not keeps("2x", "2")
