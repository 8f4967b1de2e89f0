"""``python -m pithlog``."""

from pithlog.cli import entry

entry()
