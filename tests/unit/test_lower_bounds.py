"""The lower bounds of pyproject.toml's dependencies and extras: each at least the first
release that has what pithlog calls (an older one passes the resolver, then fails at import
or at the call)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

FIRST_WITH = {
    # msgspec.json.Encoder(order="sorted"): pithlog.protocol.canonical, pithlog.protocol.state
    "msgspec": (0, 18, 6),
    # uvicorn.supervisors.Multiprocess(config, sockets), without target: pithlog.net.server
    "uvicorn": (0, 51),
    # zstd answers decoded (Content-Encoding: zstd), as serve gives them: tests/net/test_app.py
    "httpx": (0, 28),
}
"""Package: the first release with every API pithlog uses of it."""


def _lower_bounds() -> dict[str, tuple[int, ...]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    bounds = {}
    extras = [r for group in project["optional-dependencies"].values() for r in group]
    for requirement in [*project["dependencies"], *extras]:
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)(?:\[[a-z,]+\])?>=([0-9.]+)(?:;.*)?", requirement)
        assert match, f"{requirement}: a dependency is NAME>=VERSION"
        bounds[match[1].lower()] = tuple(int(p) for p in match[2].split("."))
    return bounds


def test_each_lower_bound_has_the_apis_pithlog_uses() -> None:
    bounds = _lower_bounds()
    for name, first in FIRST_WITH.items():
        assert bounds[name] >= first, f"{name}>={bounds[name]}: needs >={first}"


def test_the_license_is_an_spdx_expression_the_build_backend_reads() -> None:
    """PEP 639's ``license = "SPDX"``, which setuptools reads from 77 on; the table form
    ``{text = ...}`` is deprecated there, and builds with it refused after 2027-02-18."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert isinstance(pyproject["project"]["license"], str)
    (backend,) = [r for r in pyproject["build-system"]["requires"] if r.startswith("setuptools")]
    match = re.fullmatch(r"setuptools>=([0-9]+)", backend)
    assert match and int(match[1]) >= 77, backend


def test_the_license_text_ships_and_the_version_is_written_once() -> None:
    """The wheel carries the license it declares (``license-files``), and its version is
    read from ``pithlog.__version__``, what ``pithlog --version`` prints: written in two
    places, a bump of one would make the other untrue."""
    import pithlog

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    project = pyproject["project"]
    assert project["license-files"] == ["LICENSE"]
    assert "Apache License" in (ROOT / "LICENSE").read_text(encoding="utf-8")[:200]
    assert "version" not in project and project["dynamic"] == ["version"]
    dynamic = pyproject["tool"]["setuptools"]["dynamic"]
    assert dynamic["version"] == {"attr": "pithlog.__version__"}
    assert re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", pithlog.__version__)
