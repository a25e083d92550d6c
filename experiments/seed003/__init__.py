"""Seed 003 experiments (private unlabeled adaptation from a public source).

A ``--networked`` run puts site daemons and the coordinator on the same cores:
importing ``experiments.seed000`` first makes BLAS single-threaded before numpy
loads (its package docstring says why), for this package's scripts too."""

import experiments.seed000  # noqa: F401 -- the BLAS guard, before numpy loads
