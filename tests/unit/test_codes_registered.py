"""Every code a module raises is registered by the time it raises it.

A module registers its own codes at import (:func:`pithlog.errors.register`); a
:class:`~pithlog.errors.PithlogError` built with a code nobody registered is a
``ValueError`` instead of the error. So each code a module raises must be in
:data:`pithlog.errors.CODES` itself or registered by a module that the raising one imports,
directly or through others: a program that imports only that module (the origin's reader
without the mirror, the sync messages without sync) must get the error, not a
``ValueError``. Read off the source, as the layering test reads it.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Iterable
from pathlib import Path

from pithlog import errors

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "pithlog"

FAMILIES = {
    name: cls.family
    for name, cls in vars(errors).items()
    if inspect.isclass(cls) and issubclass(cls, errors.PithlogError)
}
"""Each error class of :mod:`pithlog.errors` -> its family, the first half of a code."""


def _name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(name: str, tree: ast.Module, known: set[str]) -> set[str]:
    """The pithlog modules ``tree`` imports anywhere in it, with their packages."""
    found: set[str] = set()
    package = name if (PACKAGE / Path(*name.split(".")[1:]) / "__init__.py").exists() else (
        name.rpartition(".")[0]
    )
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        for target in targets:
            while target:
                if target in known:
                    found.add(target)
                target = target.rpartition(".")[0]
    return found


def _raised(tree: ast.Module) -> set[str]:
    """The codes ``tree`` builds as ``SomeError("detail", ...)`` with a literal detail."""
    codes = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        cls = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        first = node.args[0]
        if cls in FAMILIES and isinstance(first, ast.Constant) and isinstance(first.value, str):
            codes.add(f"{FAMILIES[cls]}.{first.value}")
    return codes


def _registered(tree: ast.Module) -> set[str]:
    """The codes ``tree`` passes to ``register({...})``."""
    codes = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and getattr(node.func, "id", getattr(node.func, "attr", None)) == "register"
            and node.args
            and isinstance(node.args[0], ast.Dict)
        ):
            codes |= {k.value for k in node.args[0].keys if isinstance(k, ast.Constant)}
    return codes


def _source() -> dict[str, ast.Module]:
    return {_name(path): ast.parse(path.read_text()) for path in sorted(PACKAGE.rglob("*.py"))}


def test_every_raised_code_is_registered_where_it_is_raised() -> None:
    trees = _source()
    known = set(trees)
    graph = {name: _imports(name, tree, known) for name, tree in trees.items()}
    registers = {name: _registered(tree) for name, tree in trees.items()}
    base = set(errors.CODES) - set().union(*registers.values())
    unregistered = []
    for name, tree in trees.items():
        seen, todo = {name}, [name]
        while todo:
            for other in graph[todo.pop()] - seen:
                seen.add(other)
                todo.append(other)
        reachable = base.union(*(registers[other] for other in seen))
        unregistered += [f"{name}: {code}" for code in sorted(_raised(tree) - reachable)]
    assert not unregistered, unregistered


def test_the_reading_sees_what_it_must() -> None:
    # the test above is only as good as its reading: it finds the codes a module raises and
    # registers, and the modules a module imports
    trees = _source()
    assert "mirror.fetch" in _raised(trees["pithlog.net.origin"])
    assert "sync.source" in _registered(trees["pithlog.net.sync"])
    assert "pithlog.net.syncmsg" in _imports("pithlog.net.sync", trees["pithlog.net.sync"],
                                             set(trees))
    assert "pithlog.errors" in _imports("pithlog.net.sync", trees["pithlog.net.sync"],
                                        set(trees))
    assert "mirror.fetch" in errors.CODES


def _strings(nodes: Iterable[ast.AST]) -> set[str]:
    return {n.value for n in nodes if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def _used(tree: ast.Module) -> set[str]:
    """The codes ``tree`` may raise or answer: ``family.detail`` for each string in the
    first argument of a call (``SomeError("detail", ...)``, a module's
    ``_refuse("detail", ...)``, ``StoreError("readonly" if ... else "io")``) and each
    family whose error class the module names; and each whole code passed to a call or
    held as a dict's value (``error_response(404, "serve.pending", ...)``,
    ``{"error": "serve.head_too_large", ...}``)."""
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    families = {family for cls, family in FAMILIES.items() if cls in names}
    details: set[str] = set()
    whole: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            if node.args:
                details |= _strings(ast.walk(node.args[0]))
            whole |= _strings([*node.args, *(k.value for k in node.keywords)])
        elif isinstance(node, ast.Dict):
            whole |= _strings(v for v in node.values if v is not None)
    return whole | {f"{family}.{detail}" for family in families for detail in details}


def test_every_registered_code_is_raised_somewhere() -> None:
    """A code registered (and listed in docs/errors.md) that no module raises or answers
    is a promise nobody keeps: ``proof.size`` was listed beside ``store.tree_size``,
    which is what a tree size out of range raises."""
    import importlib
    import pkgutil

    import pithlog

    for module in pkgutil.walk_packages(pithlog.__path__, "pithlog."):
        if module.name != "pithlog.__main__":
            importlib.import_module(module.name)  # modules register codes of their own
    trees = _source()
    used = set().union(*(_used(tree) for tree in trees.values()))
    never = sorted(set(errors.CODES) - used)
    assert not never, never
    # the reading finds each way a code is raised or answered
    assert "door.bom" in _used(trees["pithlog.protocol.canonical"])  # _refuse("bom", ...)
    assert "store.io" in _used(trees["pithlog.store.environment"])  # an IfExp
    assert "serve.head_too_large" in _used(trees["pithlog.net.http_head"])  # a dict's value
    assert "serve.pending" in _used(trees["pithlog.net.app"])  # error_response's argument
