"""The one rule on large deltas, shared by site policies and job specs.

A delta of 1e-3 or more protects no one in a data set of a few hundred
records: (epsilon, delta)-DP allows a mechanism that publishes each record
outright with probability delta. Such a delta must be refused
unless the configuration says, in a key of its own, that it is meant.
"""

from __future__ import annotations

#: A delta at or above this needs an explicit ``allow_large_delta = true``:
#: 1e-3 is 1/n for n = 1000, and the usual advice is delta well below 1/n.
LARGE_DELTA = 1e-3


def large_delta_refusal(delta: float, key: str, allow_key: str) -> str | None:
    """Why ``delta`` (the value of ``key``) is refused, naming what would be
    accepted, or None when it is below :data:`LARGE_DELTA`. The caller checks
    ``allow_key`` (``[section] allow_large_delta``) first."""
    if delta < LARGE_DELTA:
        return None
    return (f"{key} = {delta:g} is {LARGE_DELTA:g} or more, which protects no one in a data "
            f"set of a few hundred records; write {key} below {LARGE_DELTA:g} and below 1/n "
            f"(such as 1e-6), or set {allow_key} = true if you mean it")
