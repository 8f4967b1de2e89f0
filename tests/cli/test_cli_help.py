"""What the --help texts state against what the code does: every default number an
option's help states is the default the command uses, and the sizes ``rekey``'s help
gives are those of :mod:`pithlog.store.rekey`."""

from __future__ import annotations

import argparse
import re
from typing import Any

from pithlog.cli.store_commands import DEFAULT_SHARD
from pithlog.cli.sync_commands import MAX_SPOOL
from pithlog.net import audit, mirror, submit
from pithlog.net.sync import MAX_SECONDS
from pithlog.store import rekey
from tests.cli.test_cli_doc import commands

UNITS = {None: 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
STATED = re.compile(r"\(default:? (\d[\d,]*(?:\.\d+)?)(?: ([KMG]iB))?[;,)]")


def _sentinel_defaults() -> dict[tuple[str, str], Any]:
    """Options whose parser default is ``None`` (the command then takes a constant of
    its own), with the value the command uses."""
    return {
        ("export", "--shard-size"): DEFAULT_SHARD,
        ("sync", "--max-time"): MAX_SECONDS,
        ("sync", "--max-spool"): MAX_SPOOL,
        ("audit", "--max-time"): audit.MAX_SECONDS,
        ("serve", "--max-body"): submit.Limits.max_body,
        ("serve", "--max-lines"): submit.Limits.max_lines,
        ("serve", "--body-timeout"): submit.Limits.body_seconds,
        ("serve", "--max-pending"): submit.Limits.max_pending,
    }


def _stated(action: argparse.Action) -> float | None:
    found = STATED.search(action.help or "")
    if found is None:
        return None
    number, unit = found.groups()
    return float(number.replace(",", "")) * UNITS[unit]


def test_every_default_number_a_help_states_is_the_default_used() -> None:
    sentinels = _sentinel_defaults()
    checked: set[tuple[str, str]] = set()
    wrong: list[str] = []
    for name, parser in commands().items():
        for action in parser._actions:
            stated = _stated(action)
            if stated is None or not action.option_strings:
                continue
            key = (name, action.option_strings[0])
            default = action.default
            if default is None:
                assert key in sentinels, f"{key}: help states a default the test cannot see"
                default = sentinels[key]
                checked.add(key)
            if isinstance(default, bool) or not isinstance(default, int | float):
                continue
            if stated != default:
                wrong.append(f"pithlog {name} {key[1]}: help says {stated:,.10g}, the default "
                             f"is {default}")  # fmt: skip
    assert not wrong, "\n".join(wrong)
    assert checked == set(sentinels)


def test_parser_defaults_are_the_library_defaults() -> None:
    """A literal parser default restates a library constant: the two must agree."""
    found = commands()

    def default(command: str, option: str) -> Any:
        for action in found[command]._actions:
            if option in action.option_strings:
                return action.default
        raise AssertionError(f"{command} has no {option}")

    assert default("mirror", "--batch-bundles") == mirror.BATCH_BUNDLES
    assert default("audit", "--max-unanswered") == audit.UNANSWERED_IN_A_ROW


def test_rekey_help_gives_both_limits_of_an_append_applying_a_change() -> None:
    """``append`` applies a keyring change itself only when it re-judges at most
    INLINE_MAX_COPIES copies and re-reduces at most INLINE_MAX_EVENTS events; the help
    named the first bound alone, so a change of a few copies over large piths, which
    append refuses, read as one it makes."""
    text = " ".join((commands()["rekey"].description or "").split())
    assert f"at most {rekey.INLINE_MAX_COPIES:,} copies" in text
    assert f"{rekey.INLINE_MAX_EVENTS:,} events" in text
    assert f"{rekey.PIECE_COPIES:,} copies or about {rekey.PIECE_EVENTS:,} events" in text


def test_every_option_and_argument_says_what_it_is() -> None:
    """``--help`` explains each option and positional argument of every command: a bare
    ``--key KEYFILE`` line left the reader to guess whose key, public or private."""
    bare = [f"pithlog {name} {'/'.join(action.option_strings) or action.dest}"
            for name, parser in commands().items() for action in parser._actions
            if not isinstance(action, argparse._HelpAction | argparse._SubParsersAction)
            and action.help != argparse.SUPPRESS and not (action.help or "").strip()]  # fmt: skip
    assert not bare, "options without a help text:\n" + "\n".join(bare)
