"""Reduce and verify a log on a Dask cluster (``pithlog reduce --dask``): the optional
layer of the ``pithlog[dask]`` extra, and the only home of ``dask`` and ``fsspec``.

:mod:`~pithlog.distributed.sources` lists the SOURCE files and frames byte ranges of them
on the workers; :mod:`~pithlog.distributed.tasks` holds what the workers run (the protocol's
functions, partitioned as spec section 7 allows); :mod:`~pithlog.distributed.graph` builds
the Dask graph and reads its output back in pith order. docs/distributed.md says how to run
an audit this way and what it costs.
"""

from pithlog.distributed.graph import Refusal, Run, check_workers, connect, start

__all__ = ["Refusal", "Run", "check_workers", "connect", "start"]
