"""Logs talking to each other: range-based reconciliation (:mod:`~pithlog.net.sync`, the
protocol and its responder; :mod:`~pithlog.net.sync_pull`, the pulling side) above the store it
reads and fills, and the log on HTTP (``pithlog serve``: :mod:`~pithlog.net.app`,
:mod:`~pithlog.net.submit`, :mod:`~pithlog.net.server`; ``docs/network.md``)."""
