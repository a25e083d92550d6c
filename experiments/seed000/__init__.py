"""Seed 000 experiments (private supervised adaptation).

A ``--networked`` run puts site daemons and the coordinator on the same cores:
BLAS is made single-threaded before numpy loads (common/blas_threads.py), or
OpenBLAS's busy-waiting threads would oversubscribe them."""

import os
import sys

from privadapt.common.blas_threads import SINGLE_THREADED_BLAS

if "--networked" in sys.argv:
    for _name, _value in SINGLE_THREADED_BLAS.items():
        os.environ.setdefault(_name, _value)
