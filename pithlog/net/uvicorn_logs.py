"""The logging setup ``pithlog serve`` gives uvicorn (``docs/network.md``, "Stops on
Ctrl-C or SIGTERM"): uvicorn's own, less the one line its graceful shutdown logs as an
error when it cancels the requests still open after its time-out.

Those requests are answered ``503 serve.stopping`` by pithlog (the documented outcome, not
a fault of the server), and the command's stop is said by its own line (``pithlog:
terminated``); uvicorn's ``ERROR:    Cancel 1 running task(s), timeout graceful shutdown
exceeded`` beside it told an operator of an error that is none. Every other line of
uvicorn's stays.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

from uvicorn.config import LOGGING_CONFIG

CANCELLED = "Cancel %s running task(s), timeout graceful shutdown exceeded"
"""The template of the line left out (``uvicorn.Server.shutdown``), compared unformatted."""


class WithoutCancelledTasks(logging.Filter):
    """Drops uvicorn's :data:`CANCELLED` line."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg != CANCELLED


def log_config() -> dict[str, Any]:
    """uvicorn's default ``log_config`` with :class:`WithoutCancelledTasks` on its
    ``uvicorn.error`` logger. A dict that names the filter by its import path: uvicorn
    applies it again in each worker of ``--workers N``."""
    config = copy.deepcopy(LOGGING_CONFIG)
    config.setdefault("filters", {})["without_cancelled"] = {
        "()": f"{__name__}.WithoutCancelledTasks"
    }
    config["loggers"]["uvicorn.error"]["filters"] = ["without_cancelled"]
    return config
