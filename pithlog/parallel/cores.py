"""How many cores this process may use: what every pool of pithlog is sized by.

``os.cpu_count()`` counts the machine's CPUs, not the ones a process may run on: in a
container limited to two CPUs on a 96-core host it says 96, and a server worker that
started one judging helper per "core" would start 96 interpreters to share two CPUs.
:func:`usable_cores` counts what the kernel lets this process use: the CPUs of its
affinity mask (``taskset``, a cpuset), fewer when a cgroup CPU quota (a container's
``--cpus``, a Kubernetes CPU limit) allows less. An operator who wants pithlog to take
fewer (a server sharing its machine) or to assume more sets ``PITHLOG_CORES`` (:data:`ENV`).

Written here rather than taken from a library: ``loky.cpu_count`` reads the same files,
but importing loky costs about 60 ms (and brings cloudpickle) for what is two small reads
of kernel files; Python 3.13's ``os.process_cpu_count`` knows the affinity mask only.
"""

from __future__ import annotations

import math
import os

from pithlog.errors import UsageError, register

ENV = "PITHLOG_CORES"
"""An environment variable: when set, the number of cores pithlog sizes its pools by,
whatever the system says (a positive integer)."""

register({"usage.cores": f"set {ENV} to a positive integer (the cores pithlog may use), "
          "or unset it"})  # fmt: skip

CGROUP_V2_MAX = "/sys/fs/cgroup/cpu.max"
"""cgroup v2: ``"<quota> <period>"`` in microseconds, or ``"max <period>"`` (no quota), for
the cgroup the process sees as its root (a container's own, under a cgroup namespace)."""
CGROUP_V1_QUOTA = "/sys/fs/cgroup/cpu/cpu.cfs_quota_us"
"""cgroup v1: the quota in microseconds per period, ``-1`` for none."""
CGROUP_V1_PERIOD = "/sys/fs/cgroup/cpu/cpu.cfs_period_us"


def usable_cores() -> int:
    """The cores this process may keep busy at once: :data:`ENV` when set; else the CPUs
    it may run on (its affinity mask, where the system has one, else ``os.cpu_count()``),
    at most its cgroup's CPU quota rounded up (a quota of 1.5 CPUs lets two processes run,
    each part of the time); at least 1."""
    chosen = os.environ.get(ENV)
    if chosen is not None:
        if not (chosen.isascii() and chosen.isdigit()) or int(chosen) < 1:
            raise UsageError("cores", f"{ENV}={chosen!r} is not a positive integer: set it "
                             "to the cores pithlog may use, or unset it")  # fmt: skip
        return int(chosen)
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on macOS or Windows
        cores = os.cpu_count() or 1
    quota = cgroup_quota()
    if quota is not None:
        cores = min(cores, math.ceil(quota))
    return max(1, cores)


def cgroup_quota() -> float | None:
    """The CPUs the process's cgroup may use per period (``quota / period``), or ``None``
    when it has no quota or none can be read (no cgroup file system, another system)."""
    text = _read(CGROUP_V2_MAX)
    if text is not None:
        fields = text.split()
        if len(fields) == 2 and fields[0] != "max":
            return _ratio(fields[0], fields[1])
        return None
    quota, period = _read(CGROUP_V1_QUOTA), _read(CGROUP_V1_PERIOD)
    if quota is None or period is None:
        return None
    return _ratio(quota, period)


def _ratio(quota: str, period: str) -> float | None:
    try:
        q, p = int(quota), int(period)
    except ValueError:
        return None
    return q / p if q > 0 and p > 0 else None  # v1 says -1 for no quota


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as file:
            return file.read(256).strip()
    except (OSError, ValueError):
        return None
