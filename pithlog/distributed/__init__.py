"""Reduce and verify a log on a Dask cluster (``pithlog reduce --dask``): the optional
layer of the ``pithlog[dask]`` extra, and the only home of ``dask`` and ``fsspec``.

:mod:`~pithlog.distributed.sources` lists the SOURCE files and frames byte ranges of them
on the workers; :mod:`~pithlog.distributed.tasks` holds what the workers run (the protocol's
functions, partitioned as spec section 7 allows); :mod:`~pithlog.distributed.graph` builds
the Dask graph and reads its output back in pith order; :mod:`~pithlog.distributed.local`
starts the fork server of a local cluster. docs/distributed.md says how to run an audit
this way and what it costs.

The graph's names are imported from it when first asked for (PEP 562): importing
:mod:`pithlog.distributed.local` (or the tasks, in a worker) does not import the client's
side of Dask.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pithlog.distributed.graph import Refusal, Run, check_workers, connect, job_errors, start

__all__ = ["Refusal", "Run", "check_workers", "connect", "job_errors", "start"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("pithlog.distributed.graph"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
