"""What is at a ``--dask`` address, asked before Dask's client connects to it.

Dask's client waits for the handshake of whatever it reached with no limit (a server that
accepts and says nothing held ``pithlog reduce --dask`` forever), reads any other
server's first bytes as a frame's length (a web server's answer was a MemoryError, others
an OverflowError or a struct.error: tracebacks) and takes a worker's address for a
scheduler's until its first request fails. :func:`identify` asks the server what it is
(Dask's ``identity`` request) within the connection timeout, and refuses in one line
anything but a scheduler (docs/distributed.md).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any

from distributed.core import rpc
from distributed.security import Security

from pithlog.errors import DaskError


async def _identity(address: str, timeout: float) -> Any:
    """The server's ``identity``, as Dask's client connects (its security settings, its
    connection timeout and retries)."""
    security = Security()  # type: ignore[no-untyped-call]
    connection_args = security.get_connection_args("client")  # type: ignore[no-untyped-call]
    peer = rpc(address, timeout=timeout, connection_args=connection_args)  # type: ignore[no-untyped-call]
    async with peer as server:
        return await server.identity()


def identify(address: str, timeout: float) -> None:
    """Refuse, in one line and within ``timeout``, an address that is not a Dask
    scheduler's. Asked in a thread of its own, with its own event loop: the caller may
    run one (Dask's client runs its own in a thread, too)."""
    # Reaching it may take the whole timeout (Dask retries); its answer as long again,
    # so that a server that cannot be reached is said so.
    waited = 2 * timeout
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        try:
            found = pool.submit(asyncio.run, asyncio.wait_for(_identity(address, timeout),
                                                              waited)).result()  # fmt: skip
        except TimeoutError as exc:
            raise DaskError("scheduler", f"{address} did not answer as a Dask scheduler "
                            f"in {waited:.0f} s; check ADDRESS") from exc  # fmt: skip
        except (OSError, ValueError) as exc:  # ValueError: a malformed address
            raise DaskError("scheduler", f"cannot reach the Dask scheduler at {address}: "
                            f"{exc}") from exc  # fmt: skip
        except TypeError as exc:
            if not address.startswith("tls://"):
                raise _not_dask(address, exc) from exc
            # Dask's tls:// comm raises TypeError when its configuration gives it no
            # certificates (distributed.comm.tls.*): the user's setting, not a bug here
            raise DaskError("scheduler", f"cannot reach the Dask scheduler at {address}: "
                            f"{exc}; a tls:// scheduler needs Dask's TLS settings "
                            "(distributed.comm.tls.* in its configuration)") from exc  # fmt: skip
        except Exception as exc:  # whatever the bytes of another protocol made of Dask's
            raise _not_dask(address, exc) from exc
    kind = found.get("type") if isinstance(found, dict) else None
    if not isinstance(found, dict) or "workers" not in found:
        scheduler = found.get("scheduler") if isinstance(found, dict) else None
        its = f" (its scheduler is {scheduler})" if isinstance(scheduler, str) else ""
        what = str(kind or "server").lower()
        raise DaskError("scheduler", f"{address} is a Dask {what}{its}, not a scheduler; "
                        "give --dask the scheduler's address")  # fmt: skip


def _not_dask(address: str, exc: BaseException) -> DaskError:
    kind = type(exc).__name__
    if type(exc).__module__ != "builtins":
        kind = f"{type(exc).__module__}.{kind}"  # struct.error, not "error"
    reason = " ".join(str(exc).split())[:200]
    return DaskError("scheduler", f"{address} does not speak Dask's protocol "
                     f"({kind}{': ' + reason if reason else ''}); is it a Dask "
                     "scheduler?")  # fmt: skip
