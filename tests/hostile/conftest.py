"""Hypothesis budgets of the hostile-input tests.

Every fuzz test here has a fixed budget (:func:`tests.hostile.corpus.budget`), small enough
that the folder runs in well under a minute. ``HYPOTHESIS_PROFILE=fuzz`` (``make fuzz``)
multiplies each budget and loads the ``fuzz`` profile registered below.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "fuzz",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
if os.environ.get("HYPOTHESIS_PROFILE") == "fuzz":
    settings.load_profile("fuzz")
