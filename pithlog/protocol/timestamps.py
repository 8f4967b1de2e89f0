"""The ts rule of spec section 1.

A ts is ``YYYY-MM-DDTHH:MM:SSZ`` literally: upper-case ``T`` and ``Z``, no offset, no
fraction, a real calendar instant (year 0001-9999, a day that exists in its month, hour
00-23, minute 00-59, second 00-59: no leap second). With this fixed form string order is
time order, so every time comparison in pithlog is a string comparison.
"""

from __future__ import annotations

import calendar
import re

# [0-9], not \\d: \\d also matches other scripts' digits.
_TS = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})Z")


_DAYS = (0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def is_ts(value: object) -> bool:
    """True when ``value`` is a string in the ts form of spec section 1."""
    if not isinstance(value, str) or len(value) != 20:
        return False
    m = _TS.fullmatch(value)
    if m is None:
        return False
    year, month, day, hour, minute, second = map(int, m.groups())
    if not (year >= 1 and 1 <= month <= 12 and day >= 1):
        return False
    days = _DAYS[month]
    if month == 2 and calendar.isleap(year):
        days = 29
    return day <= days and hour <= 23 and minute <= 59 and second <= 59
