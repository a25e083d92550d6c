"""Environment that keeps BLAS single-threaded in processes that share a machine.

A coordinator and N simulated sites on one machine each load OpenBLAS with one
busy-waiting thread per core; together they oversubscribe the cores, and a
networked PCnvxAdap iteration at n = 35,000 took 83 ms instead of 23
(benchmarks/pcnvx_adap.py). This module imports only ``os``, so a script can
set the variables before numpy loads.
"""

import os

SINGLE_THREADED_BLAS = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
                        "MKL_NUM_THREADS": "1"}


def default_to_single_threaded_blas() -> None:
    """Set each variable of :data:`SINGLE_THREADED_BLAS` this process's
    environment does not already set (a user's own setting wins); call it
    before numpy is first imported, which reads them once."""
    for name, value in SINGLE_THREADED_BLAS.items():
        os.environ.setdefault(name, value)
