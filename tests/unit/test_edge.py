"""The shared edge of the command line (pithlog.cli.edge): the store's path, argument
types and their bounds, served URLs and --evidence-dir, checked before any work."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from pithlog.cli import edge
from pithlog.errors import UsageError


def test_the_store_is_the_option_then_the_environment_then_the_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PITHLOG_STORE", "/srv/from-env")
    assert edge.store_path(argparse.Namespace(store="given")) == "given"
    assert edge.store_path(argparse.Namespace(store=None)) == "/srv/from-env"
    monkeypatch.delenv("PITHLOG_STORE")
    assert edge.store_path(argparse.Namespace(store=None)) == edge.DEFAULT_STORE


def test_a_store_to_be_made_is_made_only_once_the_origin_answered(tmp_path: Path) -> None:
    args = argparse.Namespace(store=str(tmp_path / "new"))
    asked: list[str] = []

    def unreachable() -> None:
        asked.append("reach")
        raise UsageError("arguments", "no answer")

    with pytest.raises(UsageError):
        edge.open_store_reached(args, unreachable)
    assert asked == ["reach"] and not (tmp_path / "new").exists()
    edge.open_store_reached(args, lambda: asked.append("reach")).close()
    assert (tmp_path / "new" / "data.mdb").exists()
    asked.clear()
    edge.open_store_reached(args, unreachable).close()  # it exists: nothing to reach
    assert asked == []


def test_the_bounds_of_seconds_and_counts() -> None:
    assert edge.seconds(str(edge.MOST_SECONDS)) == edge.MOST_SECONDS
    assert edge.seconds_from(0.5)("0.5") == 0.5
    for bad in ("0", "-1", "nan", "inf", str(edge.MOST_SECONDS + 1)):
        with pytest.raises(argparse.ArgumentTypeError):
            edge.seconds(bad)
    with pytest.raises(argparse.ArgumentTypeError):
        edge.seconds_from(0.5)("0.49")
    assert edge.seconds_or_zero("0") == 0 and edge.seconds_or_zero("2.5") == 2.5
    for bad in ("-1", "nan", "inf", "x", str(edge.MOST_SECONDS + 1)):
        with pytest.raises(argparse.ArgumentTypeError):
            edge.seconds_or_zero(bad)
    assert edge.at_least(1)("1") == 1
    with pytest.raises(argparse.ArgumentTypeError):
        edge.at_least(1)("0")
    assert edge.size_arg(0, "--size") == 0 and edge.size_arg(None, "--size") is None
    with pytest.raises(UsageError, match="0 or more"):
        edge.size_arg(-1, "--size")


def test_a_served_url_is_http_or_https() -> None:
    assert edge.served_url("https://log.test.invalid/") == "https://log.test.invalid/"
    for bad in ("ftp://log.test.invalid/", "log.test.invalid", "file:///tmp/x"):
        with pytest.raises(UsageError, match="not an http"):
            edge.served_url(bad)


def test_the_evidence_folder_is_a_folder_this_user_can_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert edge.evidence_folder(str(tmp_path / "a" / "b")) == tmp_path / "a" / "b"
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError, match="is not a folder"):
        edge.evidence_folder(str(tmp_path / "file" / "below"))
    # (as root every folder is writable: what os.access answers is what is judged)
    monkeypatch.setattr(edge.os, "access", lambda path, mode: False)
    with pytest.raises(UsageError, match="cannot be written"):
        edge.evidence_folder(str(tmp_path / "a"))
