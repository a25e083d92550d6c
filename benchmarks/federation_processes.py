"""A networked federation for benchmarks (api/simulation/process_federation.py): the
coordinator in this process, each site a ``privadapt-site`` process on
127.0.0.1 over mutual TLS, and a ``NetworkFederation`` to query them directly
(no operator API in the way).

Import this module before numpy: it makes every process run single-threaded
BLAS, since the coordinator and the sites share the machine's cores and
OpenBLAS's busy-waiting threads would oversubscribe them (common/blas_threads.py).
"""

from __future__ import annotations

import os

from privadapt.common.blas_threads import SINGLE_THREADED_BLAS

os.environ.update(SINGLE_THREADED_BLAS)

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path

from privadapt.common.data.dataset import Dataset
from privadapt.server.federation.network import NetworkFederation
from privadapt.simulation.process_federation import SitePolicyTerms, SiteProcesses


@contextlib.contextmanager
def networked_federation(
    workdir: Path, datasets: Sequence[Dataset], epsilon_cap: float = 1e6,
    round_timeout: float = 120.0,
) -> Iterator[tuple[NetworkFederation, SiteProcesses]]:
    """Sites over ``datasets``, started and awaited; everything is stopped on exit."""
    with SiteProcesses(workdir, round_timeout=round_timeout) as pool:
        yield pool.federation(datasets, SitePolicyTerms(epsilon_cap=epsilon_cap)), pool
