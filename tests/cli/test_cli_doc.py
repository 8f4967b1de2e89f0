"""docs/cli.md against the parsers: a command's section names every option its --help
lists, and its heading no option the command lacks."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from pithlog.cli import EPILOG, build_parser

ROOT = Path(__file__).resolve().parents[2]
CLI_DOC = ROOT / "docs" / "cli.md"
# commands that --help alone describes, or that a table of cli.md sums up
NO_SECTION = {"state", "pending", "stats", "show", "piths", "event"}
OPTION = r"--[a-z][a-z-]*"


def commands() -> dict[str, argparse.ArgumentParser]:
    """Every command and subcommand (``prove inclusion``) by name, with its parser."""
    found: dict[str, argparse.ArgumentParser] = {}

    def walk(parser: argparse.ArgumentParser, prefix: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    found[f"{prefix}{name}"] = child
                    walk(child, f"{prefix}{name} ")

    walk(build_parser(), "")
    return found


def options(parser: argparse.ArgumentParser) -> set[str]:
    return {o for action in parser._actions for o in action.option_strings
            if o.startswith("--") and o not in ("--help", "--store")}  # fmt: skip


def sections() -> dict[str, tuple[str, str]]:
    """Each command a heading names (``pithlog [--store DIR] CMD [SUB|SUB...]``), with the
    heading and its section's text."""
    text = CLI_DOC.read_text(encoding="utf-8")
    parts = re.split(r"^(#{2,3} .*)$", text, flags=re.M)
    found: dict[str, tuple[str, str]] = {}
    for heading, body in zip(parts[1::2], parts[2::2], strict=True):
        named = re.search(r"`pithlog (?:--store DIR )?([a-z|-]+)(?: ([a-z|]+)\b)?", heading)
        if named is None:
            continue
        command, subs = named.groups()
        # ``append|import``: two commands of one section; ``keyring new|add``: subcommands
        names = [f"{command} {s}" for s in subs.split("|")] if subs else command.split("|")
        for name in names:
            found[name] = (heading, heading + body)
    return found


def test_every_command_has_a_section_naming_each_of_its_options() -> None:
    documented = sections()
    missing: list[str] = []
    for name, parser in commands().items():
        if name in NO_SECTION or any(c.startswith(name + " ") for c in commands()):
            continue  # a group (prove, keyring) is documented by its subcommands
        if name not in documented:
            missing.append(f"{name}: no section")
            continue
        heading, text = documented[name]
        for option in sorted(options(parser)):
            if not re.search(re.escape(option) + r"(?![a-z-])", text):
                missing.append(f"{name}: {option} not in its section")
        for option in set(re.findall(OPTION, heading)) - options(parser) - {"--store"}:
            missing.append(f"{name}: {option} in its heading, not an option")
    assert not missing, missing


def test_the_main_help_lists_every_exit_status_of_cli_md() -> None:
    table = CLI_DOC.read_text(encoding="utf-8").split("## Exit status", 1)[1].split("\n\n")[1]
    statuses = re.findall(r"^\| `(\d+)` \|", table, flags=re.M)
    listed = re.findall(r"(?:^|[\s;])(\d+) [a-z]", EPILOG.split("exit status:", 1)[1])
    assert statuses and set(statuses) <= set(listed), (statuses, listed)


def test_a_heading_names_each_option_value_as_its_help_does() -> None:
    """A heading's ``--option VALUE`` uses the metavar ``--help`` shows (``--origin NAME``
    of sync, mirror and audit read ``--origin O`` here, a name their --help never used).
    ``HOST:PORT`` is one metavar; an option with choices (``--signer-type``) shows them in
    --help, so any word stands for them."""
    found = commands()
    wrong: list[str] = []
    for name, (heading, _) in sections().items():
        by_option = {o: a for a in found[name]._actions for o in a.option_strings}
        for option, value in re.findall(r"(--[a-z][a-z-]*) ([A-Z][A-Z_:]*)\b", heading):
            action = by_option.get(option)
            if action is None or action.choices is not None:
                continue
            shown = action.metavar or action.dest.upper()
            if value != shown:
                wrong.append(f"{name}: {option} {value} in cli.md, {option} {shown} in --help")
    assert not wrong, wrong
