"""Where two logs part: the first leaf at which two append-only logs differ, found by
bisection on their roots (RFC 9162 2.1.1: ``MTH(D[n])`` commits to the first ``n`` leaves,
so two logs with equal roots at size ``n`` hold the same first ``n`` leaves and, below the
first difference, every smaller prefix is equal too: the predicate is monotone)."""

from __future__ import annotations

from collections.abc import Callable

Root = Callable[[int], bytes]
"""``size -> MTH`` of a log's first ``size`` leaves."""


def first_difference(size: int, ours: Root, theirs: Root) -> int | None:
    """The index (from 0) of the first leaf among the first ``size`` where the two logs
    differ, or ``None`` when their trees of ``size`` leaves are equal. O(log size) root
    computations on each side."""
    if ours(size) == theirs(size):
        return None
    low, high = 0, size  # roots equal at size ``low``, different at size ``high``
    while high - low > 1:
        middle = (low + high) // 2
        if ours(middle) == theirs(middle):
            low = middle
        else:
            high = middle
    return high - 1
