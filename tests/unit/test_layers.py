"""The layering of docs/architecture.md, read off the source: one subpackage per layer,
arrows pointing down only, a pure core, I/O at the edges.

- Each layer imports only the layers its row of :data:`MAY_IMPORT` names (and itself), so no
  two layers import each other and the protocol core imports nothing of pithlog but
  ``pithlog.errors``.
- Only the environment modules of ``pithlog.store`` import ``lmdb``; each other third-party
  package has one home.
- Only the ``pithlog.cli`` package parses argv or writes to stdout and stderr.
- The pure layers (``protocol``, ``transparency``) open no file, read no clock and touch no
  process state: they take values and return values.
- The benchmark scripts do not import each other in a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "pithlog"

MAY_IMPORT: dict[str, set[str]] = {
    "errors": set(),
    "protocol": {"errors"},
    "transparency": {"errors", "protocol"},
    "lines": {"errors", "protocol"},
    "parallel": {"errors", "protocol"},
    "testing": {"protocol"},
    "store": {"errors", "protocol", "transparency", "lines", "parallel"},
    "net": {"errors", "protocol", "transparency", "lines", "parallel", "store"},
    "distributed": {"errors", "protocol", "lines", "parallel"},
    "cli": {
        "errors", "protocol", "transparency", "lines", "parallel", "store", "net",
        "distributed",
    },
    # the facades: the public API (docs/api.md) and ``python -m pithlog``
    "__init__": {"errors", "protocol", "store"},
    "__main__": {"cli"},
}  # fmt: skip
"""Layer -> the layers it may import, from the bottom (``errors``) up (``cli``)."""

PURE = ("protocol", "transparency")
"""The layers that implement the protocol and the log's proofs: values in, values out."""

HOMES = {
    "lmdb": {  # the environment modules (docs/architecture.md)
        "pithlog.store.environment",
        "pithlog.store.environment_errors",
        "pithlog.store.environment_files",
        "pithlog.store.environment_scratch",
        "pithlog.store.environment_sweep",
        "pithlog.store.environment_walk",
    },
    "zstandard": {"pithlog.store", "pithlog.net.encoding"},  # stored values; HTTP answers
    "cryptography": {"pithlog.protocol.keys", "pithlog.protocol.checks"},
    "nacl": {"pithlog.protocol.keys"},  # libsodium's verify, asked first (verify_signature)
    "rfc8785": {"pithlog.protocol.jcs"},
    "starlette": {"pithlog.net"},
    "starlette_compress": {"pithlog.net.encoding"},
    "brotli": {"pithlog.net.encoding"},  # large answers compressed in a worker thread
    "httptools": {"pithlog.net.http_head"},
    "httpcore": {"pithlog.net.deadline"},
    "uvicorn": {"pithlog.net", "pithlog.cli"},
    "httpx": {"pithlog.net"},
    "jinja2": {"pithlog.net"},
    "dask": {"pithlog.distributed"},
    "distributed": {"pithlog.distributed"},
    "fsspec": {"pithlog.distributed"},
}
"""A third-party package -> the modules or layers that may import it."""

NOT_IN_PURE = {
    "time", "datetime", "lmdb", "pathlib", "io", "shutil", "tempfile", "subprocess", "socket",
    "sys", "argparse", "threading", "multiprocessing", "signal", "concurrent",
    "os",
}  # fmt: skip


def modules() -> dict[str, ast.Module]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = ast.parse(path.read_text(encoding="utf-8"))
    return found


def packages() -> set[str]:
    """The modules that are packages (an ``__init__.py``): ``from . import x`` inside one
    names its own children, inside any other module its siblings."""
    return {
        ".".join(path.parent.relative_to(PACKAGE.parent).parts)
        for path in PACKAGE.rglob("__init__.py")
    }


def layer(name: str) -> str:
    """``pithlog.store.replay`` -> ``store``; the package itself is ``__init__``."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imported(tree: ast.Module, name: str = "", package: bool = False) -> set[str]:
    """The full dotted names of every module ``tree`` (the module ``name``, a package when
    ``package``) imports, at any depth of the code: ``from pithlog import x`` counts as
    ``pithlog.x``, a relative import as the absolute name it resolves to (``from ..store
    import Store`` in ``pithlog.protocol.keys`` is ``pithlog.store``), and
    ``importlib.import_module("pithlog.x")`` with a literal name (or an f-string's literal
    head) as ``pithlog.x``, so neither form slips past the rules."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level and not name:
                continue  # unresolved without the module's name; never a third party
            if node.level:
                parts = name.split(".") if package else name.split(".")[:-1]
                base = parts[: len(parts) - (node.level - 1)]
                module = ".".join([*base, module] if module else base)
            if not module:
                continue
            names.add(module)
            if module == "pithlog" or (node.level and not node.module):
                names |= {f"{module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Call) and node.args and (
            called(node) in ("import_module", "__import__")
            or attribute(node.func, "importlib") == "import_module"
        ):
            names.add(_literal_head(node.args[0]))
    return names - {""}


def _literal_head(node: ast.expr) -> str:
    """The module name a literal (or an f-string's literal start, cut at its last dot)
    spells; empty when it spells none."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values:
        head = node.values[0]
        if isinstance(head, ast.Constant) and isinstance(head.value, str):
            return head.value.rpartition(".")[0]
    return ""


def tops(tree: ast.Module) -> set[str]:
    return {name.split(".")[0] for name in imported(tree)}


def layers_imported(tree: ast.Module, name: str = "", package: bool = False) -> set[str]:
    found = imported(tree, name, package)
    return {layer(n) for n in found if n.startswith("pithlog.")} - {"__version__"}


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
    """Calls ``print`` or uses ``sys.stdout``, ``sys.stderr``, ``sys.stdin`` or ``sys.argv``
    (as ``sys.X`` or imported by ``from sys import X``)."""
    terminal = {"stdout", "stderr", "stdin", "argv"}
    return any(
        called(node) == "print"
        or attribute(node, "sys") in terminal
        or (isinstance(node, ast.ImportFrom) and node.module == "sys"
            and any(alias.name in terminal for alias in node.names))
        for node in ast.walk(tree)
    )  # fmt: skip


ALL = modules()
PACKAGES = packages()


def test_the_tree_shows_the_layers() -> None:
    """Every module lives in a known layer, and few are left at the top of the package."""
    assert {layer(name) for name in ALL} <= MAY_IMPORT.keys()
    top = sorted(
        name for name in ALL
        if name.count(".") == 1 and (PACKAGE / f"{layer(name)}.py").is_file()
        and name != "pithlog.__main__"
    )  # fmt: skip
    assert top == ["pithlog.errors", "pithlog.lines", "pithlog.testing"]
    for package in ("protocol", "transparency", "store", "net", "parallel", "cli"):
        assert f"pithlog.{package}" in ALL


def test_architecture_md_names_every_module() -> None:
    """Each module has its row (or its mention) in docs/architecture.md's tables: a module
    added without one leaves the page's map of the code short."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    unnamed = sorted(
        name for name in ALL
        if not name.endswith(("__init__", "__main__")) and name not in PACKAGES
        and f"`{name.rsplit('.', 1)[1]}`" not in text
    )  # fmt: skip
    assert not unnamed, unnamed


def test_the_rules_have_no_cycle() -> None:
    """Arrows point down only: the allowed imports themselves form no cycle."""
    seen: dict[str, int] = {}

    def depth(name: str, path: tuple[str, ...] = ()) -> int:
        assert name not in path, f"cycle: {' -> '.join((*path, name))}"
        if name not in seen:
            seen[name] = 1 + max((depth(d, (*path, name)) for d in MAY_IMPORT[name]), default=0)
        return seen[name]

    for name in MAY_IMPORT:
        depth(name)


@pytest.mark.parametrize("name", sorted(ALL))
def test_each_module_imports_only_the_layers_below(name: str) -> None:
    own = layer(name)
    wrong = layers_imported(ALL[name], name, name in PACKAGES) - MAY_IMPORT[own] - {own}
    assert not wrong, f"{name} ({own}) imports {sorted(wrong)}"


@pytest.mark.parametrize("name", sorted(ALL))
def test_each_third_party_package_has_its_home(name: str) -> None:
    for package, homes in HOMES.items():
        if package in tops(ALL[name]):
            assert any(name == h or name.startswith(h + ".") for h in homes), (
                f"{name} imports {package}, whose homes are {sorted(homes)}"
            )


@pytest.mark.parametrize("name", sorted(ALL))
def test_only_the_cli_parses_argv_and_prints(name: str) -> None:
    if layer(name) != "cli":
        assert "argparse" not in tops(ALL[name])
        assert not writes_to_terminal(ALL[name])


@pytest.mark.parametrize("name", sorted(n for n in ALL if layer(n) in PURE))
def test_the_pure_layers_take_values_and_return_values(name: str) -> None:
    tree = ALL[name]
    assert not tops(tree) & NOT_IN_PURE, f"{name} imports {sorted(tops(tree) & NOT_IN_PURE)}"
    for node in ast.walk(tree):
        assert called(node) not in {"open", "print", "input"}, f"{name} calls {called(node)}"


def test_the_rules_fail_on_a_module_that_breaks_them() -> None:
    """The checks above read real imports: a protocol module importing the store, or a
    store module printing, is caught."""
    bad = ast.parse("from pithlog.store import Store\nimport lmdb\nprint('x')\n")
    assert layers_imported(bad) - MAY_IMPORT["protocol"] == {"store"}
    assert "lmdb" in tops(bad)
    assert writes_to_terminal(bad)
    sneaky = ast.parse("from pithlog import net\n")
    assert layers_imported(sneaky) == {"net"}
    # relative imports resolve from the module's package (a package's own, for __init__)
    relative = ast.parse("from ..store import Store\nfrom .. import net\nfrom . import keys\n")
    assert layers_imported(relative, "pithlog.protocol.checks") == {"store", "net", "protocol"}
    assert layers_imported(relative, "pithlog.protocol", True) == {"store", "net", "protocol"}
    dynamic = ast.parse(
        "import importlib\nimportlib.import_module('pithlog.store.replay')\n"
        "importlib.import_module(f'pithlog.net.{name}')\n__import__('pithlog.cli')\n"
    )
    assert layers_imported(dynamic) == {"store", "net", "cli"}
    assert writes_to_terminal(ast.parse("from sys import stderr\n"))


def test_the_benchmarks_do_not_import_each_other() -> None:
    """``bench/`` scripts import shared helpers, never one another both ways."""
    scripts = (ROOT / "bench").glob("*.py")
    bench = {p.stem: ast.parse(p.read_text(encoding="utf-8")) for p in scripts}
    edges = {a: tops(tree) & (bench.keys() - {a}) for a, tree in bench.items()}
    for a, targets in edges.items():
        for b in targets:
            assert a not in edges[b], f"bench/{a}.py and bench/{b}.py import each other"
