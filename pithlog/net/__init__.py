"""Logs talking to each other: range-based reconciliation (:mod:`~pithlog.net.sync`) above the
store it reads and fills."""
