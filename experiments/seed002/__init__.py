"""Seed 002 experiments (private transfer regression from public sources).

BLAS is made single-threaded before numpy loads (common/blas_threads.py): the
d = 200 products here gain nothing from threads, and OpenBLAS's busy-waiting
threads made each 200 x 200 solve take 0.2 s on a shared 2-core machine."""


from privadapt.common.blas_threads import default_to_single_threaded_blas

default_to_single_threaded_blas()
