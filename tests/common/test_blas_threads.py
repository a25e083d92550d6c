"""The single-threaded BLAS defaults a script sets before numpy loads."""

import os

from privadapt.common.blas_threads import SINGLE_THREADED_BLAS, default_to_single_threaded_blas


def test_the_defaults_fill_only_what_the_environment_leaves_unset(monkeypatch):
    for name in SINGLE_THREADED_BLAS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "4")  # the user's own setting
    default_to_single_threaded_blas()
    assert os.environ["OPENBLAS_NUM_THREADS"] == "4"
    assert os.environ["OMP_NUM_THREADS"] == os.environ["MKL_NUM_THREADS"] == "1"
