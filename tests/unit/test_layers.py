"""The layering of docs/architecture.md, read off the source: a pure core, I/O at the edges.

- Only ``pithlog.store`` imports ``lmdb``.
- Only the ``pithlog.cli`` package parses argv or writes to stdout and stderr.
- The pure core (the protocol's modules) opens no file, reads no clock and touches no
  process state: it takes values and returns values.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "pithlog"

CORE = ("canonical", "timestamps", "records", "keys", "events", "checks", "reduce", "state",
        "merkle", "proofs", "checkpoint")  # fmt: skip
"""The modules that implement the protocol itself (spec sections 1-9, the log's proofs)."""

NOT_IN_CORE = {
    "time", "datetime", "lmdb", "pathlib", "io", "shutil", "tempfile", "subprocess", "socket",
    "sys", "argparse", "threading", "multiprocessing",
}  # fmt: skip


def modules() -> dict[str, ast.Module]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = ast.parse(path.read_text(encoding="utf-8"))
    return found


def imported(tree: ast.Module) -> set[str]:
    """The top-level names of every module ``tree`` imports, at any depth of the code."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def called(node: ast.AST) -> str | None:
    """The name of the builtin or function ``node`` calls by a bare name, if it does."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return node.func.id
    return None


def attribute(node: ast.AST, module: str) -> str | None:
    """``X`` when ``node`` is ``module.X``."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return node.attr if node.value.id == module else None
    return None


def writes_to_terminal(tree: ast.Module) -> bool:
    """Calls ``print`` or uses ``sys.stdout``, ``sys.stderr``, ``sys.stdin`` or ``sys.argv``."""
    terminal = {"stdout", "stderr", "stdin", "argv"}
    return any(
        called(node) == "print" or attribute(node, "sys") in terminal for node in ast.walk(tree)
    )


ALL = modules()


def test_the_package_is_found() -> None:
    assert {f"pithlog.{name}" for name in CORE} <= ALL.keys()
    assert "pithlog.cli" in ALL and "pithlog.store" in ALL


@pytest.mark.parametrize("name", sorted(ALL))
def test_only_the_store_imports_lmdb(name: str) -> None:
    assert ("lmdb" in imported(ALL[name])) == (name == "pithlog.store")


@pytest.mark.parametrize("name", sorted(ALL))
def test_only_the_cli_parses_argv_and_prints(name: str) -> None:
    in_cli = name == "pithlog.cli" or name.startswith("pithlog.cli.")
    if not in_cli:
        assert "argparse" not in imported(ALL[name])
        assert not writes_to_terminal(ALL[name])


@pytest.mark.parametrize("name", CORE)
def test_the_core_takes_values_and_returns_values(name: str) -> None:
    tree = ALL[f"pithlog.{name}"]
    assert not imported(tree) & NOT_IN_CORE
    for node in ast.walk(tree):
        assert called(node) not in {"open", "print", "input"}, f"{name} calls {called(node)}"
        # os only to size a thread pool (checks): never files, environment or clock
        used = attribute(node, "os")
        assert used in {None, "cpu_count"}, f"{name} uses os.{used}"
