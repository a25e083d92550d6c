"""Seed 000 experiments (private supervised adaptation).

A ``--networked`` run puts site daemons and the coordinator on the same cores:
BLAS is made single-threaded before numpy loads (common/blas_threads.py), or
OpenBLAS's busy-waiting threads would oversubscribe them."""

import sys

from privadapt.common.blas_threads import default_to_single_threaded_blas

if "--networked" in sys.argv:
    default_to_single_threaded_blas()
