"""One malloc arena for all of the site daemon's threads (glibc).

glibc gives a thread that allocates while another holds an arena's lock an
arena of its own (up to eight per core), and memory freed into an arena stays
with that arena for reuse. A site's round allocates its megabyte-sized arrays
(the query's weights, the noise share, its encoding and masks, the serialised
share) in whichever gRPC or lane thread handles it, so each thread's arena kept
a round's worth of freed memory: at 1e5 floats and 10 sites, the daemons' peak
resident memory rose from 95 to about 117 MiB over the first rounds, about 108
MiB with one arena. Only allocations past pymalloc's 512 bytes (numpy arrays,
gRPC's buffers) take malloc's lock, and a site works on a few rounds at a time,
so the one arena costs no contention that shows in a round's CPU time.
"""

from __future__ import annotations

import contextlib
import ctypes

_M_ARENA_MAX = -8  # <malloc.h>


def use_one_malloc_arena() -> None:
    """Make every thread of this process allocate from the main arena; call it
    before any thread starts. Nothing is done where the C library has no
    ``mallopt`` (not glibc)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).mallopt(_M_ARENA_MAX, 1)
