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

import functools
import math
import os

from pithlog.errors import UsageError, register

ENV = "PITHLOG_CORES"
"""An environment variable: when set, the number of cores pithlog sizes its pools by,
whatever the system says (an integer from 1 to :data:`MOST_CORES`)."""

MOST_CORES = 4096
"""The most :data:`ENV` may say."""

register({"usage.cores": f"set {ENV} to an integer from 1 to {MOST_CORES} (the cores "
          "pithlog may use), or unset it"})  # fmt: skip

PROC_SELF_CGROUP = "/proc/self/cgroup"
"""Which cgroup the process is in: ``0::<path>`` for cgroup v2, ``<n>:cpu,...:<path>`` for
the v1 hierarchy that holds the ``cpu`` controller."""
CGROUP_V2_ROOT = "/sys/fs/cgroup"
"""Where cgroup v2 is mounted; each cgroup's ``cpu.max`` holds ``"<quota> <period>"`` in
microseconds, or ``"max <period>"`` for no quota."""
CGROUP_V1_CPU_ROOT = "/sys/fs/cgroup/cpu"
"""Where cgroup v1's ``cpu`` controller is mounted; each cgroup's ``cpu.cfs_quota_us`` is
its quota per ``cpu.cfs_period_us`` (``-1``: none)."""


def usable_cores() -> int:
    """The cores this process may keep busy at once: :data:`ENV` when set; else the CPUs
    it may run on (its affinity mask, where the system has one, else ``os.cpu_count()``),
    at most its cgroup's CPU quota rounded up (a quota of 1.5 CPUs lets two processes run,
    each part of the time); at least 1."""
    chosen = os.environ.get(ENV)
    if chosen is not None:
        # a bound above: the count sizes pools and reaches C ints (a 20-digit value
        # overflowed one), and no machine pithlog runs on has more
        if not (chosen.isascii() and chosen.isdigit() and 1 <= int(chosen) <= MOST_CORES):
            raise UsageError("cores", f"{ENV}={chosen[:40]!r} is not an integer from 1 to "
                             f"{MOST_CORES}: set it to the cores pithlog may use, or unset "
                             "it")  # fmt: skip
        return int(chosen)
    return system_cores()


@functools.cache
def system_cores() -> int:
    """:func:`usable_cores` as the system says, read once per process (about 0.1 ms of
    reads of /proc and /sys, where a small ``Store.append`` asks for it on every batch)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on macOS or Windows
        cores = os.cpu_count() or 1
    quota = cgroup_quota()
    if quota is not None:
        cores = min(cores, math.ceil(quota))
    return max(1, cores)


def cgroup_quota() -> float | None:
    """The fewest CPUs per period that the process's cgroup, or a cgroup above it, may use
    (``quota / period``: a quota set on a systemd service's cgroup or on its slice, as on a
    container's), or ``None`` when none has a quota or none can be read (no cgroup file
    system, another system). Inside a container with its own cgroup namespace the process's
    cgroup is the mount's root, whose files are the container's."""
    v2, v1 = _own_cgroups()
    found: list[float | None] = []
    for folder in _up_from(CGROUP_V2_ROOT, v2):
        fields = (_read(os.path.join(folder, "cpu.max")) or "").split()
        if len(fields) == 2 and fields[0] != "max":
            found.append(_ratio(fields[0], fields[1]))
    for folder in _up_from(CGROUP_V1_CPU_ROOT, v1):
        quota = _read(os.path.join(folder, "cpu.cfs_quota_us"))
        period = _read(os.path.join(folder, "cpu.cfs_period_us"))
        if quota is not None and period is not None:
            found.append(_ratio(quota, period))
    quotas = [quota for quota in found if quota is not None]
    return min(quotas) if quotas else None


def _own_cgroups() -> tuple[str, str]:
    """The process's cgroup paths, for v2 and for v1's ``cpu`` controller (``/``, the
    mount's root, where ``/proc/self/cgroup`` does not say)."""
    v2 = v1 = "/"
    for line in (_read(PROC_SELF_CGROUP) or "").splitlines():
        number, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if number == "0" and not controllers:
            v2 = path
        elif "cpu" in controllers.split(","):
            v1 = path
    return v2, v1


def _up_from(root: str, path: str) -> list[str]:
    """The folder of cgroup ``path`` under ``root`` and each above it up to ``root``, the
    deepest first; nothing outside ``root`` (``..`` is dropped)."""
    parts = [part for part in path.split("/") if part not in ("", ".", "..")]
    return [os.path.join(root, *parts[:depth]) for depth in range(len(parts), -1, -1)]


def _ratio(quota: str, period: str) -> float | None:
    try:
        q, p = int(quota), int(period)
    except ValueError:
        return None
    return q / p if q > 0 and p > 0 else None  # v1 says -1 for no quota


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as file:
            return file.read(65536).strip()
    except (OSError, ValueError):
        return None
